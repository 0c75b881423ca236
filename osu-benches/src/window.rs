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
    send_window_on(peer, data, window, DATA_TAG, ACK_TAG);
}

/// `send_window` with the data on `data_tag` and the acknowledgement on `ack_tag`: the
/// multi-threaded tests give each thread its own pair, so that threads' windows never match
/// each other's receives.
pub fn send_window_on(peer: &Process, data: &[u8], window: usize, data_tag: i32, ack_tag: i32) {
    scope(|sc| {
        let mut requests: Vec<_> = (0..window)
            .map(|_| peer.immediate_send_with_tag(sc, data, data_tag))
            .collect();
        wait_all(&mut requests);
    });
    let mut ack = [0u8; ACK_BYTES];
    peer.receive_into_with_tag(&mut ack[..], ack_tag);
}

/// Receives a window of `window` messages of up to `buf.len()` bytes from `peer`, every one
/// into all of `buf`, as OSU's C source does (so the buffer stays cache-warm whatever its
/// size), then acknowledges them.
pub fn receive_window(peer: &Process, buf: &mut [u8], window: usize) {
    receive_window_on(peer, buf, window, DATA_TAG, ACK_TAG);
}

/// `receive_window` with the tags of `send_window_on`.
pub fn receive_window_on(
    peer: &Process,
    buf: &mut [u8],
    window: usize,
    data_tag: i32,
    ack_tag: i32,
) {
    let (ptr, len) = (buf.as_mut_ptr(), buf.len());
    scope(|sc| {
        let mut requests: Vec<_> = (0..window)
            // SAFETY: `buf` is borrowed mutably for this whole call, so only these receives
            // touch it, and the scope ends only once every one of them has completed. They
            // all write `buf`; what it holds afterwards is one of the messages, which is all
            // a bandwidth test needs (and what C's MPI_Irecv gives OSU).
            .map(|_| unsafe { peer.immediate_receive_into_raw_with_tag(sc, ptr, len, data_tag) })
            .collect();
        wait_all(&mut requests);
    });
    peer.send_with_tag(&[0u8; ACK_BYTES][..], ack_tag);
}
