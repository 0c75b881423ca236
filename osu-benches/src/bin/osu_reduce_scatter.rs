//! osu_reduce_scatter: a sum of MPI_CHAR elements, cut into nearly equal parts, one per rank
//! (the first `size % n` ranks get one element more; with fewer elements than ranks, the
//! first ranks get one each), as OSU cuts them.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::ReduceScatter);
    let world = universe.world();
    let me = world.rank() as usize;
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    let mut parts = Counts::parts(world.size() as usize);
    measure_collective(&world, &options, Benchmark::ReduceScatter, |size| {
        let (counts, _) = parts.at(size);
        let own = counts[me] as usize;
        world.reduce_scatter_into(
            &send[..size],
            &mut recv[..own],
            counts,
            SystemOperation::sum(),
        );
    });
}
