//! osu_bw: rank 0 sends a window of non-blocking messages, rank 1 receives them and answers
//! with a short acknowledgement; bandwidth is bytes over the time of all windows.

use mpirt::request::{scope, wait_all};
use mpirt::traits::*;
use osu_benches::{measure, start, Benchmark};

const DATA_TAG: i32 = 100;
const ACK_TAG: i32 = 101;

fn main() {
    let (universe, options) = start(Benchmark::Bandwidth);
    let world = universe.world();
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let window = options.window;
    let s_buf = vec![b'a'; options.max_size];
    // OSU receives a window into one buffer; safe Rust lends each receive its own slot.
    let slot = options.max_size.max(1);
    let mut r_buf = vec![b'b'; slot * window];
    let mut ack = [0u8; 4];
    measure(
        &world,
        &options,
        |size| {
            if rank == 0 {
                scope(|sc| {
                    let mut requests: Vec<_> = (0..window)
                        .map(|_| peer.immediate_send_with_tag(sc, &s_buf[..size], DATA_TAG))
                        .collect();
                    wait_all(&mut requests);
                });
                peer.receive_into_with_tag(&mut ack[..], ACK_TAG);
            } else {
                scope(|sc| {
                    let mut requests: Vec<_> = r_buf
                        .chunks_mut(slot)
                        .map(|c| peer.immediate_receive_into_with_tag(sc, &mut c[..size], DATA_TAG))
                        .collect();
                    wait_all(&mut requests);
                });
                peer.send_with_tag(&ack[..], ACK_TAG);
            }
        },
        |size, iterations, seconds| size as f64 / 1e6 * (iterations * window) as f64 / seconds,
    );
}
