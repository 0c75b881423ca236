//! osu_ireduce_scatter: the non-blocking sum of MPI_CHAR elements cut into OSU's nearly equal
//! parts, one per rank (as osu_reduce_scatter cuts them), with OSU's overlap columns.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::IReduceScatter);
    let world = universe.world();
    let me = world.rank() as usize;
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    let mut parts = Counts::parts(world.size() as usize);
    measure_non_blocking(
        &world,
        &options,
        Benchmark::IReduceScatter,
        |size, between| {
            let (counts, _) = parts.at(size);
            let own = counts[me] as usize;
            let (send, recv) = (&send[..size], &mut recv[..own]);
            request::scope(|scope| {
                let sum = SystemOperation::sum();
                let request = world.immediate_reduce_scatter_into(scope, send, recv, counts, sum);
                between();
                request.wait();
            });
        },
    );
}
