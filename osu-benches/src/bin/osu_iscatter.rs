//! osu_iscatter: rank 0 sends a message of each size to every rank without blocking, with
//! OSU's overlap columns.

use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IScatter);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size * n];
    let mut recv = vec![0u8; options.max_size];
    measure_non_blocking(&world, &options, Benchmark::IScatter, |size, between| {
        request::scope(|scope| {
            let request = if world.rank() == 0 {
                root.immediate_scatter_into_root(scope, &send[..size * n], &mut recv[..size])
            } else {
                root.immediate_scatter_into(scope, &mut recv[..size])
            };
            between();
            request.wait();
        });
    });
}
