//! osu_allgather: each rank's message of each size, gathered on every rank.

use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Allgather);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![b'a'; options.max_size];
    let mut recv = vec![0u8; options.max_size * n];
    measure_collective(&world, &options, Benchmark::Allgather, |size| {
        world.all_gather_into(&send[..size], &mut recv[..size * n])
    });
}
