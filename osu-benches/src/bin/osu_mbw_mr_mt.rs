//! osu_mbw_mr_mt (not in OSU 7.4): osu_mbw_mr's windows between thread pairs instead of rank
//! pairs. Each of rank 0's `-t` threads sends windows of messages to the same thread of rank
//! 1 (each pair on tags of its own), all pairs at once; prints the bandwidth of all pairs
//! together and the messages per second. Each size starts with a barrier of the two ranks,
//! each round with one of the rank's threads; a sender times only its window and the
//! acknowledgement, and the senders' times are averaged, as in osu_mbw_mr.

use std::sync::Barrier;
use std::thread;

use osu_benches::mpi;
use osu_benches::mpi::threads::SharedCommunicator;
use osu_benches::mpi::traits::*;
use osu_benches::{rate_row, receive_window_on, send_window_on, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::MessageRateMt);
    let world = universe.world();
    let shared = world.share(universe.threads().expect("start asked for Multiple"));
    let threads = options.sender_threads;
    let window = options.window;
    for size in options.sizes() {
        let (iterations, skip) = options.loops(size);
        world.barrier();
        let together = Barrier::new(threads);
        let times: Vec<f64> = thread::scope(|scope| {
            let running: Vec<_> = (0..threads)
                .map(|t| {
                    let (shared, together) = (&shared, &together);
                    scope.spawn(move || pair(shared, together, t, size, window, iterations, skip))
                })
                .collect();
            running.into_iter().map(|h| h.join().unwrap()).collect()
        });
        if world.rank() == 0 {
            let seconds = times.iter().sum::<f64>() / threads as f64;
            let mb_per_s = size as f64 / 1e6 * (threads * iterations * window) as f64 / seconds;
            print!("{}", rate_row(size, mb_per_s, mb_per_s * 1e6 / size as f64));
        }
    }
}

/// Thread `t`'s side of its pair: windows sent (rank 0) or received (rank 1); rank 0's
/// seconds in its timed windows.
fn pair(
    shared: &SharedCommunicator,
    together: &Barrier,
    t: usize,
    size: usize,
    window: usize,
    iterations: usize,
    skip: usize,
) -> f64 {
    let world = shared.local();
    let sender = world.rank() == 0;
    let peer = world.process_at_rank(1 - world.rank());
    let (data_tag, ack_tag) = (2 * t as i32, 2 * t as i32 + 1);
    let s_buf = vec![b'a'; size];
    let mut r_buf = vec![b'b'; size];
    let mut timed = 0.0;
    for i in 0..iterations + skip {
        together.wait();
        if sender {
            let start = mpi::time();
            send_window_on(&peer, &s_buf, window, data_tag, ack_tag);
            if i >= skip {
                timed += mpi::time() - start;
            }
        } else {
            receive_window_on(&peer, &mut r_buf, window, data_tag, ack_tag);
        }
    }
    timed
}
