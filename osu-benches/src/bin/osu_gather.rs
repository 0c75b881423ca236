//! osu_gather: each rank's message of each size, gathered on rank 0.

use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Gather);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size];
    let mut recv = vec![0u8; options.max_size * n];
    measure_collective(&world, &options, Benchmark::Gather, |size| {
        if world.rank() == 0 {
            root.gather_into_root(&send[..size], &mut recv[..size * n]);
        } else {
            root.gather_into(&send[..size]);
        }
    });
}
