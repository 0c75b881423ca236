//! osu_igatherv: each rank's message of each size, gathered on rank 0 with a count and a
//! displacement per rank, without blocking, with OSU's overlap columns.

use osu_benches::mpi::datatype::PartitionMut;
use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::IGatherv);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size];
    let mut recv = vec![0u8; options.max_size * n];
    let mut blocks = Counts::blocks(n);
    measure_non_blocking(&world, &options, Benchmark::IGatherv, |size, between| {
        let (counts, displs) = blocks.at(size);
        let mut parts = PartitionMut::new(&mut recv[..size * n], counts, displs);
        // The root's request holds the partition, the others' none: two request types.
        request::scope(|scope| {
            if world.rank() == 0 {
                let request =
                    root.immediate_gather_varcount_into_root(scope, &send[..size], &mut parts);
                between();
                request.wait();
            } else {
                let request = root.immediate_gather_varcount_into(scope, &send[..size]);
                between();
                request.wait();
            }
        });
    });
}
