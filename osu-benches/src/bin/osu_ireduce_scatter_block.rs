//! osu_ireduce_scatter_block: the non-blocking sum of MPI_CHAR elements cut into equal blocks
//! of size / n elements, one per rank, with OSU's overlap columns.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IReduceScatterBlock);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    measure_non_blocking(
        &world,
        &options,
        Benchmark::IReduceScatterBlock,
        |size, between| {
            let block = size / n;
            let (send, recv) = (&send[..block * n], &mut recv[..block]);
            request::scope(|scope| {
                let sum = SystemOperation::sum();
                let request = world.immediate_reduce_scatter_block_into(scope, send, recv, sum);
                between();
                request.wait();
            });
        },
    );
}
