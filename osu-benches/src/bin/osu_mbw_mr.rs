//! osu_mbw_mr: the first half of the ranks each send windows of messages to one of the second
//! half (as osu_bw), all pairs at once; prints the bandwidth of all pairs together and the
//! messages per second. As in OSU, every round starts with a barrier and a sender times only
//! its window and the acknowledgement; the senders' times are averaged.

use std::cell::RefCell;

use osu_benches::mpi;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_summed, rate_row, receive_window, send_window, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::MultiBandwidth);
    let world = universe.world();
    let rank = world.rank() as usize;
    let pairs = world.size() as usize / 2;
    let sender = rank < pairs;
    let receiver = !sender && rank < 2 * pairs;
    let peer = world.process_at_rank((if sender { rank + pairs } else { rank - pairs }) as i32);
    let window = options.window;
    let s_buf = vec![b'a'; options.max_size];
    let mut r_buf = vec![b'b'; if receiver { options.max_size } else { 0 }];
    // A sender's round times, warm-up ones first: the timed ones are the last `iterations`.
    let rounds = RefCell::new(Vec::new());
    measure_summed(
        &world,
        &options,
        |size| {
            world.barrier();
            if sender {
                let start = mpi::time();
                send_window(&peer, &s_buf[..size], window);
                rounds.borrow_mut().push(mpi::time() - start);
            } else if receiver {
                receive_window(&peer, &mut r_buf[..size], window);
            }
        },
        |_, iterations, _| {
            let mut rounds = rounds.borrow_mut();
            let timed = rounds.iter().rev().take(iterations).sum();
            rounds.clear();
            timed
        },
        |size, iterations, sum| {
            let seconds = sum / pairs as f64;
            let mb_per_s = size as f64 / 1e6 * (pairs * iterations * window) as f64 / seconds;
            rate_row(size, mb_per_s, mb_per_s * 1e6 / size as f64)
        },
    );
}
