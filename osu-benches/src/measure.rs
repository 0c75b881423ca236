//! The loops the tests share, as OSU runs them. Point-to-point: for each message size, a
//! barrier, warm-up iterations, then timed ones; rank 0 prints one row (the multi-pair tests
//! first sum each rank's share of it over the ranks). Collective: each call
//! timed on its own and followed by an untimed barrier; rank 0 prints the average over the
//! ranks (and with `-f` the minimum and maximum).

use std::io::Write;

use crate::mpi;
use crate::mpi::topology::SimpleCommunicator;
use crate::mpi::traits::*;

use crate::mpi::collective::SystemOperation;

use crate::options::{Benchmark, Options};
use crate::output::{collective_row, non_blocking_row, row, Latencies, Overlapped};

/// Runs `iteration(size)` over OSU's sizes and loop counts, after a barrier for each size;
/// `done(size, iterations, seconds)` gets the time of the timed iterations.
fn over_sizes(
    world: &SimpleCommunicator,
    options: &Options,
    mut iteration: impl FnMut(usize),
    mut done: impl FnMut(usize, usize, f64),
) {
    for size in options.sizes() {
        let (iterations, skip) = options.loops(size);
        world.barrier();
        let mut start = 0.0;
        for i in 0..iterations + skip {
            if i == skip {
                start = mpi::time();
            }
            iteration(size);
        }
        done(size, iterations, mpi::time() - start);
    }
}

/// Prints a row at once, so that a run cut short still shows the sizes it finished.
fn say(text: &str) {
    print!("{text}");
    let _ = std::io::stdout().flush();
}

/// `x` combined over the ranks by `op`: the result on rank 0, 0 elsewhere.
fn at_root(world: &SimpleCommunicator, x: f64, op: SystemOperation) -> f64 {
    let root = world.process_at_rank(0);
    let mut result = 0.0;
    if world.rank() == 0 {
        root.reduce_into_root(&x, &mut result, op);
    } else {
        root.reduce_into(&x, op);
    }
    result
}

/// Runs `iteration(size)` over OSU's sizes and loop counts; `value(size, iterations, seconds)`
/// turns rank 0's timed part into the number it prints.
pub fn measure(
    world: &SimpleCommunicator,
    options: &Options,
    iteration: impl FnMut(usize),
    value: impl Fn(usize, usize, f64) -> f64,
) {
    over_sizes(world, options, iteration, |size, iterations, seconds| {
        if world.rank() == 0 {
            say(&row(size, value(size, iterations, seconds)));
        }
    });
}

/// Like `measure` for the tests where every pair counts: each rank's
/// `share(size, iterations, seconds)` is summed over the ranks and rank 0 prints
/// `line(size, iterations, sum)`.
pub fn measure_summed(
    world: &SimpleCommunicator,
    options: &Options,
    iteration: impl FnMut(usize),
    share: impl Fn(usize, usize, f64) -> f64,
    line: impl Fn(usize, usize, f64) -> String,
) {
    over_sizes(world, options, iteration, |size, iterations, seconds| {
        let sum = at_root(
            world,
            share(size, iterations, seconds),
            SystemOperation::sum(),
        );
        if world.rank() == 0 {
            say(&line(size, iterations, sum));
        }
    });
}

/// The sizes a collective test walks: OSU's from 1 byte, or none for the barriers.
fn collective_sizes(options: &Options, b: Benchmark) -> Vec<Option<usize>> {
    if b.has_sizes() {
        options.sizes().filter(|&s| s > 0).map(Some).collect()
    } else {
        vec![None]
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
    for size in collective_sizes(options, b) {
        let (iterations, skip) = options.loops(size.unwrap_or(0));
        world.barrier();
        let mut timer = 0.0;
        for i in 0..iterations + skip {
            let start = mpi::time();
            call(size.unwrap_or(0));
            let elapsed = mpi::time() - start;
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
        let over_ranks = |op| at_root(world, latency, op);
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
            say(&collective_row(size, latencies, options.full));
        }
        world.barrier();
    }
}

/// Runs the non-blocking collective `call(size, between)` over OSU's sizes, as OSU does: `call`
/// starts the operation, runs `between()`, then waits for it. First the call alone (`between`
/// does nothing) gives its pure time; then `between` computes for that long, and the row says
/// how much of the call the computation hid. Each call is followed by a barrier, as OSU 7.4's
/// are, but for the non-blocking barrier's calls alone (`osu_ibarrier` times those back to
/// back, and only its overlapped calls with a barrier after each).
pub fn measure_non_blocking(
    world: &SimpleCommunicator,
    options: &Options,
    b: Benchmark,
    mut call: impl FnMut(usize, &mut dyn FnMut()),
) {
    for size in collective_sizes(options, b) {
        let (iterations, skip) = options.loops(size.unwrap_or(0));
        let bytes = size.unwrap_or(0);
        world.barrier();
        let mut alone = 0.0;
        for i in 0..iterations + skip {
            let start = mpi::time();
            call(bytes, &mut || {});
            let elapsed = mpi::time() - start;
            if size.is_some() {
                world.barrier();
            }
            if i >= skip {
                alone += elapsed;
            }
        }
        let pure = alone / iterations as f64;
        let mut sums = [0.0; 4];
        for i in 0..iterations + skip {
            let (mut started, mut computed) = (0.0, 0.0);
            let start = mpi::time();
            call(bytes, &mut || {
                started = mpi::time();
                compute(pure);
                computed = mpi::time();
            });
            let end = mpi::time();
            world.barrier();
            if i >= skip {
                let parts = [
                    end - start,
                    computed - started,
                    started - start,
                    end - computed,
                ];
                for (sum, part) in sums.iter_mut().zip(parts) {
                    *sum += part;
                }
            }
        }
        let average = |seconds: f64, per: usize| {
            let micros = seconds * 1e6 / per as f64;
            at_root(world, micros, SystemOperation::sum()) / world.size() as f64
        };
        let figures = Overlapped {
            overall: average(sums[0], iterations),
            compute: average(sums[1], iterations),
            init: average(sums[2], iterations),
            wait: average(sums[3], iterations),
            pure: average(pure, 1),
            pure_min: at_root(world, pure * 1e6, SystemOperation::min()),
            pure_max: at_root(world, pure * 1e6, SystemOperation::max()),
        };
        if world.rank() == 0 {
            say(&non_blocking_row(size, figures, options.full));
        }
        world.barrier();
    }
}

/// Keeps the CPU busy for `seconds` without calling the library, as OSU's computation
/// without probes does: what progresses the operation meanwhile is the library's own doing.
fn compute(seconds: f64) {
    let until = mpi::time() + seconds;
    while mpi::time() < until {
        std::hint::spin_loop();
    }
}
