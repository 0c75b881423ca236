//! osu_iallreduce: the non-blocking sum of MPI_CHAR elements on every rank, with OSU's
//! overlap columns.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IAllreduce);
    let world = universe.world();
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    measure_non_blocking(&world, &options, Benchmark::IAllreduce, |size, between| {
        request::scope(|scope| {
            let (send, recv) = (&send[..size], &mut recv[..size]);
            let request =
                world.immediate_all_reduce_into(scope, send, recv, SystemOperation::sum());
            between();
            request.wait();
        });
    });
}
