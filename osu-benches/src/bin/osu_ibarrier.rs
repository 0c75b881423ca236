//! osu_ibarrier: the non-blocking barrier, with OSU's overlap columns.

use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IBarrier);
    let world = universe.world();
    measure_non_blocking(&world, &options, Benchmark::IBarrier, |_, between| {
        let request = world.immediate_barrier();
        between();
        request.wait();
    });
}
