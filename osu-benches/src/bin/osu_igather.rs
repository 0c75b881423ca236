//! osu_igather: each rank's message of each size, gathered on rank 0 without blocking, with
//! OSU's overlap columns.

use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IGather);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size];
    let mut recv = vec![0u8; options.max_size * n];
    measure_non_blocking(&world, &options, Benchmark::IGather, |size, between| {
        request::scope(|scope| {
            let request = if world.rank() == 0 {
                root.immediate_gather_into_root(scope, &send[..size], &mut recv[..size * n])
            } else {
                root.immediate_gather_into(scope, &send[..size])
            };
            between();
            request.wait();
        });
    });
}
