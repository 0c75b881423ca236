//! osu_get_acc_latency: MPI_Get_accumulate's (sum of bytes) latency in the synchronisation
//! `-s` names, on a window `-w` makes (mpirt only: rsmpi has no windows).

use osu_benches::one_sided::{run, Accumulate, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::GetAccLatency);
    let data = vec![1u8; options.max_size];
    run::<u8, _>(
        &universe.world(),
        &options,
        Report::Latency,
        |size| size,
        |size| Accumulate {
            data: &data[..size],
            fetch: true,
        },
    );
}
