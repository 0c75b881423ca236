//! The loops the tests share, as OSU runs them. Point-to-point: for each message size, a
//! barrier, warm-up iterations, then timed ones; rank 0 prints one row. Collective: each call
//! timed on its own and followed by an untimed barrier; rank 0 prints the average over the
//! ranks (and with `-f` the minimum and maximum).

use std::io::Write;

use mpirt::topology::SimpleCommunicator;
use mpirt::traits::*;

use mpirt::collective::SystemOperation;

use crate::options::{Benchmark, Options};
use crate::output::{collective_row, row, Latencies};

/// Runs `iteration(size)` over OSU's sizes and loop counts; `value(size, iterations, seconds)`
/// turns the timed part into the number rank 0 prints.
pub fn measure(
    world: &SimpleCommunicator,
    options: &Options,
    mut iteration: impl FnMut(usize),
    value: impl Fn(usize, usize, f64) -> f64,
) {
    for size in options.sizes() {
        let (iterations, skip) = options.loops(size);
        world.barrier();
        let mut start = 0.0;
        for i in 0..iterations + skip {
            if i == skip {
                start = mpirt::time();
            }
            iteration(size);
        }
        if world.rank() == 0 {
            print!(
                "{}",
                row(size, value(size, iterations, mpirt::time() - start))
            );
            let _ = std::io::stdout().flush();
        }
    }
}

/// Runs the collective `call(size)` over OSU's sizes (without a size for the barrier, which
/// is its own synchronization) and prints a row per size.
pub fn measure_collective(
    world: &SimpleCommunicator,
    options: &Options,
    b: Benchmark,
    mut call: impl FnMut(usize),
) {
    let sizes: Vec<Option<usize>> = if b.has_sizes() {
        options.sizes().filter(|&s| s > 0).map(Some).collect()
    } else {
        vec![None]
    };
    for size in sizes {
        let (iterations, skip) = options.loops(size.unwrap_or(0));
        world.barrier();
        let mut timer = 0.0;
        for i in 0..iterations + skip {
            let start = mpirt::time();
            call(size.unwrap_or(0));
            let elapsed = mpirt::time() - start;
            if size.is_some() {
                world.barrier();
            }
            if i >= skip {
                timer += elapsed;
            }
        }
        if size.is_none() {
            world.barrier();
        }
        let latency = timer * 1e6 / iterations as f64;
        let root = world.process_at_rank(0);
        let over_ranks = |op: SystemOperation| {
            let mut result = 0.0;
            if world.rank() == 0 {
                root.reduce_into_root(&latency, &mut result, op);
            } else {
                root.reduce_into(&latency, op);
            }
            result
        };
        let (min, max) = (
            over_ranks(SystemOperation::min()),
            over_ranks(SystemOperation::max()),
        );
        let avg = over_ranks(SystemOperation::sum()) / world.size() as f64;
        if world.rank() == 0 {
            let latencies = Latencies {
                avg,
                min,
                max,
                iterations,
            };
            print!("{}", collective_row(size, latencies, options.full));
            let _ = std::io::stdout().flush();
        }
        world.barrier();
    }
}
