//! The loop every point-to-point test shares, as OSU runs it: for each message size, a barrier,
//! warm-up iterations, then timed ones; rank 0 prints one row.

use std::io::Write;

use mpirt::topology::SimpleCommunicator;
use mpirt::traits::*;

use crate::options::Options;
use crate::output::row;

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
