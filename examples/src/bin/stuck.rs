//! The classic bugs that make a message-passing job stop, one a run, for `rsrun
//! --stall-timeout` to diagnose (`examples/tests/stall.rs`): `stuck BUG` on the ranks the
//! bug needs. `slow` is not a bug: one rank computes for longer than the timeout while the
//! others wait for it, and the job finishes; nor is `until-file` (for `kill -USR1`). The bugs
//! named `threads-...` run at `Threading::Multiple` (mpirt's feature `threads`), with named
//! threads that share the world.

use std::time::{Duration, Instant};

use mpirt::environment::Threading;
use mpirt::threads::SharedCommunicator;
use mpirt::traits::*;

fn main() {
    let bug = std::env::args().nth(1).expect("usage: stuck BUG");
    let universe = if bug.starts_with("threads-") {
        let (universe, provided) = mpirt::initialize_with_threading(Threading::Multiple)
            .expect("mpirt is initialized once");
        if provided != Threading::Multiple {
            eprintln!("stuck {bug}: mpirt provides {provided:?} here (built without `threads`)");
            std::process::exit(2);
        }
        universe
    } else {
        mpirt::initialize().expect("mpirt is initialized once")
    };
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    match bug.as_str() {
        // Both send synchronously first: each waits for the other's receive.
        "head-to-head" => {
            let other = world.process_at_rank(1 - rank);
            other.synchronous_send_with_tag(&[rank; 2], 3);
            let _: (Vec<i32>, _) = other.receive_vec_with_tag(3);
        }
        // Each receives from the previous rank before it sends.
        "receive-cycle" => {
            let previous = world.process_at_rank((rank + size - 1) % size);
            let (_, _) = previous.receive_with_tag::<i64>(7);
            world
                .process_at_rank((rank + 1) % size)
                .send_with_tag(&1i64, 7);
        }
        // Rank 0 sends with tag 1; rank 1 receives with tag 2.
        "tag-mismatch" => {
            if rank == 0 {
                world.process_at_rank(1).send_with_tag(&1.5f64, 1);
                let (_, _) = world.process_at_rank(1).receive_with_tag::<f64>(9);
            } else {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<f64>(2);
            }
        }
        // Rank 0 sends to rank 2, which receives from rank 1; rank 1 goes on to the barrier.
        "wrong-source" => {
            match rank {
                0 => world.process_at_rank(2).send_with_tag(&5u32, 4),
                2 => {
                    let (_, _) = world.process_at_rank(1).receive_with_tag::<u32>(4);
                }
                _ => {}
            }
            world.barrier();
        }
        // As tag-mismatch, with rank 1's receive posted and then waited for.
        "posted-tag-mismatch" => {
            if rank == 0 {
                world.process_at_rank(1).send_with_tag(&1.5f64, 1);
                let (_, _) = world.process_at_rank(1).receive_with_tag::<f64>(9);
            } else {
                let mut value = 0f64;
                mpirt::request::scope(|scope| {
                    world
                        .process_at_rank(0)
                        .immediate_receive_into_with_tag(scope, &mut value, 2)
                        .wait();
                });
            }
        }
        // Rank 0 sends on the world; rank 1 receives on a duplicate of it.
        "wrong-communicator" => {
            let dup = world.duplicate();
            if rank == 0 {
                world.process_at_rank(1).send_with_tag(&8u8, 6);
                let (_, _) = dup.process_at_rank(1).receive_with_tag::<u8>(6);
            } else {
                let (_, _) = dup.process_at_rank(0).receive_with_tag::<u8>(6);
            }
        }
        // The last rank skips the barrier and waits for a message no one sends.
        "skipped-barrier" => {
            if rank == size - 1 {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<i32>(11);
            } else {
                world.barrier();
            }
        }
        // The last rank skips the all-reduce (which runs in the shared-memory area where the
        // ranks share a host) and waits for a message no one sends.
        "skipped-all-reduce" => {
            if rank == size - 1 {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<i32>(15);
            } else {
                let mut sum = 0u64;
                world.all_reduce_into(&1u64, &mut sum, mpirt::collective::SystemOperation::sum());
            }
        }
        // Rank 1's arguments to the first all-reduce are refused (its result is too short),
        // which every rank is told where they meet in the shared-memory area; then the last
        // rank skips the barrier. The refused call counts once on every rank, rank 1's too.
        "refused-all-reduce" => {
            let mut sums = [0u64; 2];
            let recv = if rank == 1 {
                &mut sums[..1]
            } else {
                &mut sums[..]
            };
            let op = mpirt::collective::SystemOperation::sum();
            world
                .try_all_reduce_into(&[1u64, 2][..], recv, op)
                .expect_err("rank 1's result is too short");
            if rank == size - 1 {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<i32>(22);
            } else {
                world.barrier();
            }
        }
        // The even and the odd ranks, joined by an inter-communicator; the last rank skips
        // the all-reduce over it that the others wait in.
        "skipped-inter-all-reduce" => {
            let local = world
                .split_by_color(mpirt::topology::Color::with_value(rank % 2))
                .expect("every rank has a color");
            let inter = local.create_intercommunicator(0, &world, 1 - rank % 2, 24);
            if rank == size - 1 {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<i32>(23);
            } else {
                let mut sum = 0u64;
                let op = mpirt::collective::SystemOperation::sum();
                inter.all_reduce_into(&1u64, &mut sum, op);
            }
        }
        // Rank 1 skips the gather that rank 0, its root, waits in, and waits for a message
        // no one sends.
        "skipped-gather" => {
            if rank == 0 {
                let mut all = vec![0i32; size as usize];
                world
                    .process_at_rank(0)
                    .gather_into_root(&rank, &mut all[..]);
            } else {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<u32>(19);
            }
        }
        // Rank 2 skips the reduce whose root is rank 0; rank 1 gives its part and goes on to
        // wait for a message from rank 2, outside the reduce, as rank 2 waits for one from
        // rank 0.
        "skipped-reduce" => {
            let root = world.process_at_rank(0);
            let op = mpirt::collective::SystemOperation::sum();
            match rank {
                0 => {
                    let mut sum = 0u64;
                    root.reduce_into_root(&1u64, &mut sum, op);
                }
                1 => {
                    root.reduce_into(&1u64, op);
                    let (_, _) = world.process_at_rank(2).receive_with_tag::<u32>(20);
                }
                _ => {
                    let (_, _) = world.process_at_rank(0).receive_with_tag::<u32>(21);
                }
            }
        }
        // Rank 0 posts a receive from rank 2 that nothing here depends on, then waits on
        // another, from rank 1, which waits for rank 0 first: a cycle of ranks 0 and 1, which
        // rank 2 waits for too.
        "unrelated-receive" => match rank {
            0 => {
                let (mut unrelated, mut wanted) = (0u64, 0u64);
                mpirt::request::scope(|scope| {
                    let other = world.process_at_rank(2).immediate_receive_into_with_tag(
                        scope,
                        &mut unrelated,
                        30,
                    );
                    world
                        .process_at_rank(1)
                        .immediate_receive_into_with_tag(scope, &mut wanted, 31)
                        .wait();
                    other.wait();
                });
            }
            1 => {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<u64>(32);
            }
            _ => {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<u64>(33);
            }
        },
        // The broadcast's root, the last rank, skips it and waits for a message no one sends;
        // the others wait in the broadcast for the root's data.
        "skipped-broadcast" => {
            let root = world.process_at_rank(size - 1);
            if rank == size - 1 {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<u32>(18);
            } else {
                let mut value = 0u64;
                root.broadcast_into(&mut value);
            }
        }
        // Rank 0 synchronously sends to rank 1, which receives it; then rank 1 skips the
        // barrier: rank 0's report names the barrier, not the send before it.
        "barrier-after-send" => {
            if rank == 0 {
                world.process_at_rank(1).synchronous_send_with_tag(&1u8, 16);
                world.barrier();
            } else {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<u8>(16);
                let (_, _) = world.process_at_rank(0).receive_with_tag::<u8>(17);
            }
        }
        // Rank 0 finalizes at once; rank 1 waits for a message from it.
        "finalized-peer" => {
            if rank == 1 {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<i32>(12);
            }
        }
        // Rank 0 computes for 2.5 s, then sends to everyone: slow, not stuck (the tests' stall
        // timeout is 1 s, and the others tell rsrun they wait after 1 s).
        "slow" => {
            if rank == 0 {
                let start = Instant::now();
                let mut x = 0u64;
                while start.elapsed() < Duration::from_millis(2500) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
                for r in 1..size {
                    world.process_at_rank(r).send_with_tag(&x, 13);
                }
            } else {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<u64>(13);
            }
            world.barrier();
            if rank == 0 {
                println!("slow: done");
            }
        }
        // Rank 0 waits outside mpirt until the file named next exists (the test makes it once
        // it has seen rsrun's report on SIGUSR1), then sends to everyone.
        "until-file" => {
            let path = std::env::args()
                .nth(2)
                .expect("usage: stuck until-file PATH");
            if rank == 0 {
                let start = Instant::now();
                while !std::path::Path::new(&path).exists() {
                    assert!(
                        start.elapsed() < Duration::from_secs(60),
                        "{path} did not appear"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
                for r in 1..size {
                    world.process_at_rank(r).send_with_tag(&1u8, 14);
                }
            } else {
                let (_, _) = world.process_at_rank(0).receive_with_tag::<u8>(14);
            }
        }
        // On each of two ranks, thread `worker-1` receives a message with tag 41 that no one
        // sends, and `worker-2` receives with tag 42 before it sends with that tag: a cycle of
        // the ranks' `worker-2`s.
        "threads-stuck" => {
            let shared = world.share(universe.threads().expect("Multiple is provided"));
            std::thread::scope(|scope| {
                spawn_named(scope, "worker-1", || {
                    let local = shared.local();
                    let (_, _) = local.process_at_rank(1 - rank).receive_with_tag::<i32>(41);
                });
                spawn_named(scope, "worker-2", || {
                    let local = shared.local();
                    let other = local.process_at_rank(1 - rank);
                    let (_, _) = other.receive_with_tag::<i32>(42);
                    other.send_with_tag(&rank, 42);
                });
            });
        }
        // `slow` with threads: on every rank, thread `waiter` receives from rank 0's thread
        // `computer`, which first makes a call (so that it counts among its rank's threads
        // that use mpirt; rank 0's waiter starts its receive after that), then computes for
        // 2.5 s, sends to every rank and ends. Rank 0's waiter waits beside a thread that
        // computes: slow, not stuck.
        "threads-slow" => {
            let shared = world.share(universe.threads().expect("Multiple is provided"));
            let counted = std::sync::Barrier::new(2);
            std::thread::scope(|scope| {
                spawn_named(scope, "waiter", || {
                    if rank == 0 {
                        counted.wait();
                    }
                    let (_, _) = shared
                        .local()
                        .process_at_rank(0)
                        .receive_with_tag::<u64>(13);
                });
                if rank == 0 {
                    spawn_named(scope, "computer", || compute_then_send(&shared, &counted));
                }
            });
            world.barrier();
            if rank == 0 {
                println!("threads-slow: done");
            }
        }
        // `threads-slow` where rank 0's thread `computer` makes no call before it computes:
        // its first is its send. Not counted while it computes, it runs: rank 0 is not
        // stalled, and the job is slow, not stuck. In `threads-lost` it computes and ends
        // without sending: stuck from its end on.
        "threads-late" | "threads-lost" => {
            let shared = world.share(universe.threads().expect("Multiple is provided"));
            std::thread::scope(|scope| {
                spawn_named(scope, "waiter", || {
                    let (_, _) = shared
                        .local()
                        .process_at_rank(0)
                        .receive_with_tag::<u64>(13);
                });
                if rank == 0 {
                    spawn_named(scope, "computer", || {
                        let x = compute();
                        if bug == "threads-lost" {
                            return;
                        }
                        let local = shared.local();
                        for r in 0..local.size() {
                            local.process_at_rank(r).send_with_tag(&x, 13);
                        }
                    });
                }
            });
            world.barrier();
            if rank == 0 {
                println!("threads-late: done");
            }
        }
        other => panic!("unknown bug {other}"),
    }
}

/// Spawns a thread named `name` in `scope`.
fn spawn_named<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: &str,
    f: impl FnOnce() + Send + 'scope,
) {
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, f)
        .expect("a thread starts");
}

/// `threads-slow`'s computing thread on rank 0; `counted` lets the waiter go after its first
/// call.
fn compute_then_send(shared: &SharedCommunicator, counted: &std::sync::Barrier) {
    let local = shared.local();
    // Its first call: nothing is there to find.
    assert!(local.any_process().immediate_probe_with_tag(99).is_none());
    counted.wait();
    let x = compute();
    for r in 0..local.size() {
        local.process_at_rank(r).send_with_tag(&x, 13);
    }
}

/// The threaded bugs' computing thread's work: 2.5 s, longer than the stall timeout.
fn compute() -> u64 {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < Duration::from_millis(2500) {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    x
}
