//! osu_barrier: the average time of a barrier over the ranks.

use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Barrier);
    let world = universe.world();
    measure_collective(&world, &options, Benchmark::Barrier, |_| world.barrier());
}
