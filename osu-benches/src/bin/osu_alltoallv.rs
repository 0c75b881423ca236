//! osu_alltoallv: every rank sends a message of each size to every rank, with a count and a
//! displacement per rank on both sides (every block the same size, as OSU's are).

use osu_benches::mpi::datatype::{Partition, PartitionMut};
use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::Alltoallv);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![b'a'; options.max_size * n];
    let mut recv = vec![0u8; options.max_size * n];
    let mut blocks = Counts::blocks(n);
    measure_collective(&world, &options, Benchmark::Alltoallv, |size| {
        let (counts, displs) = blocks.at(size);
        let out = Partition::new(&send[..size * n], counts, displs);
        let mut parts = PartitionMut::new(&mut recv[..size * n], counts, displs);
        world.all_to_all_varcount_into(&out, &mut parts);
    });
}
