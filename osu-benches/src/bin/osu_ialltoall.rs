//! osu_ialltoall: every rank sends a message of each size to every rank without blocking, with
//! OSU's overlap columns.

use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IAlltoall);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![b'a'; options.max_size * n];
    let mut recv = vec![0u8; options.max_size * n];
    measure_non_blocking(&world, &options, Benchmark::IAlltoall, |size, between| {
        request::scope(|scope| {
            let (send, recv) = (&send[..size * n], &mut recv[..size * n]);
            let request = world.immediate_all_to_all_into(scope, send, recv);
            between();
            request.wait();
        });
    });
}
