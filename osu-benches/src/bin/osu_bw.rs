//! osu_bw: rank 0 sends a window of non-blocking messages, rank 1 receives them (all into one
//! buffer, as OSU does) and answers with a short acknowledgement; bandwidth is bytes over the
//! time of all windows.

use osu_benches::mpi::traits::*;
use osu_benches::{measure, receive_window, send_window, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Bandwidth);
    let world = universe.world();
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let window = options.window;
    let s_buf = vec![b'a'; options.max_size];
    let mut r_buf = vec![b'b'; options.max_size];
    measure(
        &world,
        &options,
        |size| {
            if rank == 0 {
                send_window(&peer, &s_buf[..size], window);
            } else {
                receive_window(&peer, &mut r_buf[..size], window);
            }
        },
        |size, iterations, seconds| size as f64 / 1e6 * (iterations * window) as f64 / seconds,
    );
}
