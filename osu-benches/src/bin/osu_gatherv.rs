//! osu_gatherv: each rank's message of each size, gathered on rank 0 with a count and a
//! displacement per rank (every block the same size, as OSU's are).

use osu_benches::mpi::datatype::PartitionMut;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::Gatherv);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size];
    let mut recv = vec![0u8; options.max_size * n];
    let mut blocks = Counts::blocks(n);
    measure_collective(&world, &options, Benchmark::Gatherv, |size| {
        if world.rank() == 0 {
            let (counts, displs) = blocks.at(size);
            let mut parts = PartitionMut::new(&mut recv[..size * n], counts, displs);
            root.gather_varcount_into_root(&send[..size], &mut parts);
        } else {
            root.gather_varcount_into(&send[..size]);
        }
    });
}
