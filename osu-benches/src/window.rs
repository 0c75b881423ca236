//! The bandwidth tests' exchange (`osu_bw`, `osu_mbw_mr`): the sender posts a window of
//! non-blocking sends and waits for them; the receiver posts as many receives, waits, and
//! answers with a short acknowledgement that ends the sender's round.

use crate::mpi::request::{scope, wait_all};
use crate::mpi::topology::Process;
use crate::mpi::traits::*;

const DATA_TAG: i32 = 100;
const ACK_TAG: i32 = 101;
const ACK_BYTES: usize = 4;

/// Sends `window` copies of `data` to `peer`, then waits for its acknowledgement.
pub fn send_window(peer: &Process, data: &[u8], window: usize) {
    scope(|sc| {
        let mut requests: Vec<_> = (0..window)
            .map(|_| peer.immediate_send_with_tag(sc, data, DATA_TAG))
            .collect();
        wait_all(&mut requests);
    });
    let mut ack = [0u8; ACK_BYTES];
    peer.receive_into_with_tag(&mut ack[..], ACK_TAG);
}

/// Where a window of messages of up to `max_size` bytes lands. OSU receives a whole window
/// into one buffer; safe Rust lends each receive a slot of its own.
pub struct Slots {
    buffer: Vec<u8>,
    slot: usize,
}

impl Slots {
    pub fn new(max_size: usize, window: usize) -> Slots {
        let slot = max_size.max(1);
        Slots {
            buffer: vec![b'b'; slot * window],
            slot,
        }
    }

    /// Receives a window of `size`-byte messages from `peer`, then acknowledges them.
    pub fn receive_window(&mut self, peer: &Process, size: usize) {
        scope(|sc| {
            let mut requests: Vec<_> = self
                .buffer
                .chunks_mut(self.slot)
                .map(|c| peer.immediate_receive_into_with_tag(sc, &mut c[..size], DATA_TAG))
                .collect();
            wait_all(&mut requests);
        });
        peer.send_with_tag(&[0u8; ACK_BYTES][..], ACK_TAG);
    }
}
