//! How long a passive-target epoch waits for a target that computes outside mpirt: rank 1
//! spins for COMPUTE milliseconds without calling mpirt while rank 0 locks it, puts 8 bytes
//! and unlocks, timing that epoch. On the shared-memory path (ranks of one host, `allocate`)
//! the epoch needs nothing of the target; on the active-message path
//! (`MPIRT_WINDOW_PATH=messages`, or ranks on different hosts) it ends only once the target
//! is back in mpirt, so it ends just after the target's computation does. Each line gives
//! the epoch's time and when it ended against the end of the target's computation (wall
//! clock, one host). A figure, not a test.
//!
//! `rsrun -n 2 window_progress [COMPUTE_MS...]` (default 0 1 10 50)

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mpirt::traits::*;
use mpirt::window::{LockKind, Window};

fn main() {
    let universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    if world.size() != 2 {
        eprintln!("window_progress runs on 2 ranks");
        std::process::exit(1);
    }
    let computes: Vec<u64> = match std::env::args().skip(1).map(|a| a.parse()).collect() {
        Ok(list) if !Vec::is_empty(&list) => list,
        Ok(_) => vec![0, 1, 10, 50],
        Err(e) => {
            eprintln!("window_progress: COMPUTE_MS must be whole milliseconds: {e}");
            std::process::exit(1);
        }
    };
    let window = Window::<u64>::allocate(&world, 1);
    let path = if window.shared_query(1).is_ok() {
        "shared memory"
    } else {
        "active messages"
    };
    let value = [42u64];
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_secs_f64()
    };
    for compute in computes {
        world.barrier();
        if world.rank() == 1 {
            let until = Instant::now() + Duration::from_millis(compute);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            let computed = now();
            world.process_at_rank(0).send(&computed);
        } else {
            let start = Instant::now();
            window.lock(1, LockKind::Exclusive, |epoch| epoch.put(&value, 1, 0));
            let (took, ended) = (start.elapsed(), now());
            let (computed, _): (f64, _) = world.process_at_rank(1).receive();
            println!(
                "{path}: target computing {compute} ms: lock, put, unlock took {:.3} ms, \
                 ending {:+.3} ms from the end of the computation",
                took.as_secs_f64() * 1e3,
                (ended - computed) * 1e3
            );
        }
        world.barrier();
    }
}
