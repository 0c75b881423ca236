//! osu_alltoall: every rank sends a message of each size to every rank.

use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Alltoall);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![b'a'; options.max_size * n];
    let mut recv = vec![0u8; options.max_size * n];
    measure_collective(&world, &options, Benchmark::Alltoall, |size| {
        world.all_to_all_into(&send[..size * n], &mut recv[..size * n])
    });
}
