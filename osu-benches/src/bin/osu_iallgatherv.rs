//! osu_iallgatherv: each rank's message of each size, gathered on every rank with a count and a
//! displacement per rank, without blocking, with OSU's overlap columns.

use osu_benches::mpi::datatype::PartitionMut;
use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::IAllgatherv);
    let world = universe.world();
    let n = world.size() as usize;
    let send = vec![b'a'; options.max_size];
    let mut recv = vec![0u8; options.max_size * n];
    let mut blocks = Counts::blocks(n);
    measure_non_blocking(&world, &options, Benchmark::IAllgatherv, |size, between| {
        let (counts, displs) = blocks.at(size);
        let mut parts = PartitionMut::new(&mut recv[..size * n], counts, displs);
        request::scope(|scope| {
            let request =
                world.immediate_all_gather_varcount_into(scope, &send[..size], &mut parts);
            between();
            request.wait();
        });
    });
}
