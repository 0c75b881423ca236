//! osu_latency_mt: ping-pong between two ranks with threads on both (OSU 7.4's): rank 0's
//! sender threads share the iterations, each sending a ping and waiting for its pong; rank
//! 1's receiver threads share them too, each receiving a ping and answering it. With one
//! sender, pings travel on tag 1 and pongs on tag 2, so any receiver thread answers any ping;
//! with several, iteration `i` travels on tag `i` both ways, so each pong goes back to the
//! thread that sent its ping. Prints half the round trip, averaged over the timed iterations of
//! the sender thread that ran iteration `skip`, as OSU does, and at the end each rank's counts
//! of its threads' waits (`mpirt::threads::Waits`, naps) as comment lines. Every thread communicates
//! through its own view of the world (`mpirt::threads`).

use std::io::Write;
use std::thread;

use osu_benches::mpi;
use osu_benches::mpi::threads::SharedCommunicator;
use osu_benches::mpi::traits::*;
use osu_benches::{row, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::LatencyMt);
    let world = universe.world();
    let threads = universe.threads().expect("start asked for Multiple");
    let shared = world.share(threads);
    let (senders, receivers) = (options.sender_threads, options.receiver_threads);
    for size in options.sizes() {
        let (iterations, skip) = options.loops(size);
        world.barrier();
        if world.rank() == 0 {
            let times: Vec<f64> = thread::scope(|scope| {
                let running: Vec<_> = (0..senders)
                    .map(|t| {
                        let shared = &shared;
                        scope.spawn(move || ping(shared, t, senders, size, iterations + skip, skip))
                    })
                    .collect();
                running.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let timed = times[skip % senders];
            let latency = timed * 1e6 / (2.0 * iterations as f64 / senders as f64);
            print!("{}", row(size, latency));
            let _ = std::io::stdout().flush();
        } else {
            thread::scope(|scope| {
                for t in 0..receivers {
                    let shared = &shared;
                    scope.spawn(move || {
                        pong(shared, t, receivers, senders, size, iterations + skip)
                    });
                }
            });
        }
    }
    // How this rank's threads waited, over every size: a comment line, which readers of the
    // rows skip.
    let waits = threads.waits();
    let counters = universe.counters().unwrap_or_default();
    println!(
        "# rank {}: {} waits took the progressing place ({} handed on to paused ones, {} taken over), {} pauses ({} woken), {} naps ({} woken by own threads)",
        world.rank(),
        waits.progressors,
        waits.handed_on,
        waits.taken_over,
        waits.pauses,
        waits.pauses_woken,
        counters.naps,
        counters.nap_wakes
    );
}

/// The tags of iteration `i`'s ping and pong.
fn tags(i: usize, senders: usize) -> (i32, i32) {
    if senders > 1 {
        (i as i32, i as i32)
    } else {
        (1, 2)
    }
}

/// Sender thread `t` of `senders`: its share of `total` round trips; the seconds its timed
/// ones (from iteration `skip`) took.
fn ping(
    shared: &SharedCommunicator,
    t: usize,
    senders: usize,
    size: usize,
    total: usize,
    skip: usize,
) -> f64 {
    let world = shared.local();
    let peer = world.process_at_rank(1);
    let s_buf = vec![b'a'; size];
    let mut r_buf = vec![b'b'; size];
    let mut timed = 0.0;
    for i in (t..total).step_by(senders) {
        let (ping, pong) = tags(i, senders);
        let start = mpi::time();
        peer.send_with_tag(&s_buf[..], ping);
        peer.receive_into_with_tag(&mut r_buf[..], pong);
        if i >= skip {
            timed += mpi::time() - start;
        }
    }
    timed
}

/// Receiver thread `t` of `receivers`: answers its share of `total` pings.
fn pong(
    shared: &SharedCommunicator,
    t: usize,
    receivers: usize,
    senders: usize,
    size: usize,
    total: usize,
) {
    let world = shared.local();
    let peer = world.process_at_rank(0);
    let s_buf = vec![b'a'; size];
    let mut r_buf = vec![b'b'; size];
    for i in (t..total).step_by(receivers) {
        let (ping, pong) = tags(i, senders);
        peer.receive_into_with_tag(&mut r_buf[..], ping);
        peer.send_with_tag(&s_buf[..], pong);
    }
}
