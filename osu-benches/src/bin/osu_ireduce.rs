//! osu_ireduce: the non-blocking sum of MPI_CHAR elements to rank 0, with OSU's overlap
//! columns.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IReduce);
    let world = universe.world();
    let root = world.process_at_rank(0);
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    measure_non_blocking(&world, &options, Benchmark::IReduce, |size, between| {
        request::scope(|scope| {
            let sum = SystemOperation::sum();
            let request = if world.rank() == 0 {
                root.immediate_reduce_into_root(scope, &send[..size], &mut recv[..size], sum)
            } else {
                root.immediate_reduce_into(scope, &send[..size], sum)
            };
            between();
            request.wait();
        });
    });
}
