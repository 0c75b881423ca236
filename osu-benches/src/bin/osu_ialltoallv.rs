//! osu_ialltoallv: every rank sends a message of each size to every rank, with a count and a
//! displacement per rank on both sides, without blocking, with OSU's overlap columns.

use osu_benches::mpi::datatype::{Partition, PartitionMut};
use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::IAlltoallv);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![b'a'; options.max_size * n];
    let mut recv = vec![0u8; options.max_size * n];
    let mut blocks = Counts::blocks(n);
    measure_non_blocking(&world, &options, Benchmark::IAlltoallv, |size, between| {
        let (counts, displs) = blocks.at(size);
        let out = Partition::new(&send[..size * n], counts, displs);
        let mut parts = PartitionMut::new(&mut recv[..size * n], counts, displs);
        request::scope(|scope| {
            let request = world.immediate_all_to_all_varcount_into(scope, &out, &mut parts);
            between();
            request.wait();
        });
    });
}
