//! osu_bw: rank 0 sends a window of non-blocking messages, rank 1 receives them and answers
//! with a short acknowledgement; bandwidth is bytes over the time of all windows.

use osu_benches::mpi::traits::*;
use osu_benches::{measure, send_window, start, Benchmark, Slots};

fn main() {
    let (universe, options) = start(Benchmark::Bandwidth);
    let world = universe.world();
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let window = options.window;
    let s_buf = vec![b'a'; options.max_size];
    let mut slots = Slots::new(options.max_size, window);
    measure(
        &world,
        &options,
        |size| {
            if rank == 0 {
                send_window(&peer, &s_buf[..size], window);
            } else {
                slots.receive_window(&peer, size);
            }
        },
        |size, iterations, seconds| size as f64 / 1e6 * (iterations * window) as f64 / seconds,
    );
}
