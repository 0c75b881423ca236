//! osu_gatherv: each rank's message of each size, gathered on rank 0 by
//! `gather_varcount_into_root`, each part placed by its count and displacement (OSU's counts
//! and displacements: every rank's the size, back to back in rank order).

use osu_benches::mpi::datatype::PartitionMut;
use osu_benches::mpi::traits::*;
use osu_benches::mpi::Count;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::Gatherv);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size];
    let mut recv = vec![0u8; options.max_size * n];
    measure_collective(&world, &options, Benchmark::Gatherv, |size| {
        if world.rank() == 0 {
            let counts = vec![size as Count; n];
            let displs: Vec<Count> = (0..n).map(|r| (r * size) as Count).collect();
            let mut parts = PartitionMut::new(&mut recv[..size * n], &counts[..], &displs[..]);
            root.gather_varcount_into_root(&send[..size], &mut parts);
        } else {
            root.gather_varcount_into(&send[..size]);
        }
    });
}
