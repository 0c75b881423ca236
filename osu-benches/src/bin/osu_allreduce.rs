//! osu_allreduce: a sum of MPI_CHAR elements, the result on every rank.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Allreduce);
    let world = universe.world();
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    measure_collective(&world, &options, Benchmark::Allreduce, |size| {
        world.all_reduce_into(&send[..size], &mut recv[..size], SystemOperation::sum())
    });
}
