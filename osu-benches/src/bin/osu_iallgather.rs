//! osu_iallgather: each rank's message of each size, gathered on every rank without blocking,
//! with OSU's overlap columns.

use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IAllgather);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![b'a'; options.max_size];
    let mut recv = vec![0u8; options.max_size * n];
    measure_non_blocking(&world, &options, Benchmark::IAllgather, |size, between| {
        request::scope(|scope| {
            let (send, recv) = (&send[..size], &mut recv[..size * n]);
            let request = world.immediate_all_gather_into(scope, send, recv);
            between();
            request.wait();
        });
    });
}
