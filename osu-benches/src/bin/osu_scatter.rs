//! osu_scatter: rank 0 sends a message of each size to every rank.

use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Scatter);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size * n];
    let mut recv = vec![0u8; options.max_size];
    measure_collective(&world, &options, Benchmark::Scatter, |size| {
        if world.rank() == 0 {
            root.scatter_into_root(&send[..size * n], &mut recv[..size]);
        } else {
            root.scatter_into(&mut recv[..size]);
        }
    });
}
