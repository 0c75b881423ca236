//! osu_latency: ping-pong between two ranks; half the round trip, averaged.

use osu_benches::mpi::traits::*;
use osu_benches::{measure, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Latency);
    let world = universe.world();
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let s_buf = vec![b'a'; options.max_size];
    let mut r_buf = vec![b'b'; options.max_size];
    measure(
        &world,
        &options,
        |size| {
            if rank == 0 {
                peer.send_with_tag(&s_buf[..size], 1);
                peer.receive_into_with_tag(&mut r_buf[..size], 1);
            } else {
                peer.receive_into_with_tag(&mut r_buf[..size], 1);
                peer.send_with_tag(&s_buf[..size], 1);
            }
        },
        |_, iterations, seconds| seconds * 1e6 / (2.0 * iterations as f64),
    );
}
