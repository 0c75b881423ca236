//! osu_cas_latency: MPI_Compare_and_swap's (one 8-byte integer) latency in the
//! synchronisation `-s` names, on a window `-w` makes (mpirt only: rsmpi has no windows).

use osu_benches::one_sided::{run, CompareAndSwap, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::CasLatency);
    run::<u64, _>(
        &universe.world(),
        &options,
        Report::Latency,
        |_| 1,
        |_| CompareAndSwap {
            value: 1,
            compare: 0,
        },
    );
}
