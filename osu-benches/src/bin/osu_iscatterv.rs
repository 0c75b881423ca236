//! osu_iscatterv: rank 0 sends a message of each size to every rank, with a count and a
//! displacement per rank, without blocking, with OSU's overlap columns.

use osu_benches::mpi::datatype::Partition;
use osu_benches::mpi::request;
use osu_benches::mpi::traits::*;
use osu_benches::{measure_non_blocking, start, Benchmark, Counts};

fn main() {
    let (universe, options) = start(Benchmark::IScatterv);
    let world = universe.world();
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    let send = vec![b'a'; options.max_size * n];
    let mut recv = vec![0u8; options.max_size];
    let mut blocks = Counts::blocks(n);
    measure_non_blocking(&world, &options, Benchmark::IScatterv, |size, between| {
        let (counts, displs) = blocks.at(size);
        let parts = Partition::new(&send[..size * n], counts, displs);
        request::scope(|scope| {
            let request = if world.rank() == 0 {
                root.immediate_scatter_varcount_into_root(scope, &parts, &mut recv[..size])
            } else {
                root.immediate_scatter_varcount_into(scope, &mut recv[..size])
            };
            between();
            request.wait();
        });
    });
}
