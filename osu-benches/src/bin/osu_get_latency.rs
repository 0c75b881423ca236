//! osu_get_latency: MPI_Get's latency in the synchronisation `-s` names, on a window `-w`
//! makes (mpirt only: rsmpi has no windows).

use osu_benches::one_sided::{run, Get, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::GetLatency);
    run::<u8, _>(
        &universe.world(),
        &options,
        Report::Latency,
        |size| size,
        Get,
    );
}
