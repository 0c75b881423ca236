//! osu_reduce: a sum of MPI_CHAR elements to rank 0.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Reduce);
    let world = universe.world();
    let root = world.process_at_rank(0);
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    measure_collective(&world, &options, Benchmark::Reduce, |size| {
        if world.rank() == 0 {
            root.reduce_into_root(&send[..size], &mut recv[..size], SystemOperation::sum());
        } else {
            root.reduce_into(&send[..size], SystemOperation::sum());
        }
    });
}
