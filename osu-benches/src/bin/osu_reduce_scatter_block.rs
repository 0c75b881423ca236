//! osu_reduce_scatter_block: a sum of MPI_CHAR elements, cut into equal blocks of size / n
//! elements, one per rank.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::ReduceScatterBlock);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    measure_collective(&world, &options, Benchmark::ReduceScatterBlock, |size| {
        let block = size / n;
        let (send, recv) = (&send[..block * n], &mut recv[..block]);
        world.reduce_scatter_block_into(send, recv, SystemOperation::sum());
    });
}
