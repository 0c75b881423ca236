//! osu_fop_latency: MPI_Fetch_and_op's (sum of one 8-byte integer) latency in the
//! synchronisation `-s` names, on a window `-w` makes (mpirt only: rsmpi has no windows).

use osu_benches::one_sided::{run, FetchAndAdd, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::FopLatency);
    run::<u64, _>(
        &universe.world(),
        &options,
        Report::Latency,
        |_| 1,
        |_| FetchAndAdd(1),
    );
}
