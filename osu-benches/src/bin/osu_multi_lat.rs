//! osu_multi_lat: the first half of the ranks each ping-pong with one of the second half, all
//! pairs at once; the latency is half the round trip averaged over the ranks of every pair
//! (an odd rank out idles).

use osu_benches::mpi::traits::*;
use osu_benches::{measure_summed, row, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::MultiLatency);
    let world = universe.world();
    let rank = world.rank() as usize;
    let pairs = world.size() as usize / 2;
    let paired = rank < 2 * pairs;
    let sender = rank < pairs;
    let peer = world.process_at_rank((if sender { rank + pairs } else { rank - pairs }) as i32);
    let s_buf = vec![b'a'; options.max_size];
    let mut r_buf = vec![b'b'; options.max_size];
    measure_summed(
        &world,
        &options,
        |size| {
            if sender {
                peer.send_with_tag(&s_buf[..size], 1);
                peer.receive_into_with_tag(&mut r_buf[..size], 1);
            } else if paired {
                peer.receive_into_with_tag(&mut r_buf[..size], 1);
                peer.send_with_tag(&s_buf[..size], 1);
            }
        },
        |_, iterations, seconds| {
            if paired {
                seconds * 1e6 / (2.0 * iterations as f64)
            } else {
                0.0
            }
        },
        |size, _, sum| row(size, sum / (2 * pairs) as f64),
    );
}
