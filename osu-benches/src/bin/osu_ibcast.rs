//! osu_ibcast: the non-blocking broadcast from rank 0 of each message size, with OSU's overlap
//! columns.

use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::IBroadcast);
    let world = universe.world();
    let root = world.process_at_rank(0);
    let mut buf = vec![b'a'; options.max_size];
    measure_non_blocking(&world, &options, Benchmark::IBroadcast, |size, between| {
        request::scope(|scope| {
            let request = root.immediate_broadcast_into(scope, &mut buf[..size]);
            between();
            request.wait();
        });
    });
}
