//! osu_reduce_scatter: a sum of MPI_CHAR elements, cut into nearly equal parts, one per rank
//! (the first `size % n` ranks get one element more; with fewer elements than ranks, the
//! first ranks get one each), as OSU cuts them.

use osu_benches::mpi::collective::SystemOperation;
use osu_benches::mpi::traits::*;
use osu_benches::mpi::Count;
use osu_benches::{measure_collective, start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::ReduceScatter);
    let world = universe.world();
    let (n, me) = (world.size() as usize, world.rank() as usize);
    let send = vec![1i8; options.max_size];
    let mut recv = vec![0i8; options.max_size];
    // Cut once per size, outside the timed calls, as OSU does.
    let mut counts: Vec<Count> = vec![0; n];
    let mut cut_for = None;
    measure_collective(&world, &options, Benchmark::ReduceScatter, |size| {
        if cut_for != Some(size) {
            for (r, count) in counts.iter_mut().enumerate() {
                *count = (size / n + usize::from(r < size % n)) as Count;
            }
            cut_for = Some(size);
        }
        let own = counts[me] as usize;
        world.reduce_scatter_into(
            &send[..size],
            &mut recv[..own],
            &counts,
            SystemOperation::sum(),
        );
    });
}
