//! osu_bcast: broadcast from rank 0 of each message size.

use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Broadcast);
    let world = universe.world();
    let root = world.process_at_rank(0);
    let mut buf = vec![b'a'; options.max_size];
    measure_collective(&world, &options, Benchmark::Broadcast, |size| {
        root.broadcast_into(&mut buf[..size])
    });
}
