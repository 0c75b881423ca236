//! osu_scatterv: rank 0 sends a message of each size to every rank, with a count and a
//! displacement per rank (every block the same size, as OSU's are).

use osu_benches::mpi::datatype::Partition;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_collective, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::Scatterv);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size * n];
    let mut recv = vec![0u8; options.max_size];
    let mut blocks = Counts::blocks(n);
    measure_collective(&world, &options, Benchmark::Scatterv, |size| {
        if world.rank() == 0 {
            let (counts, displs) = blocks.at(size);
            let parts = Partition::new(&send[..size * n], counts, displs);
            root.scatter_varcount_into_root(&parts, &mut recv[..size]);
        } else {
            root.scatter_varcount_into(&mut recv[..size]);
        }
    });
}
