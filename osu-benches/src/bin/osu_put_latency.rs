//! osu_put_latency: MPI_Put's latency in the synchronisation `-s` names, on a window `-w`
//! makes (mpirt only: rsmpi has no windows).

use osu_benches::one_sided::{run, Put, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::PutLatency);
    let data = vec![b'a'; options.max_size];
    run::<u8, _>(
        &universe.world(),
        &options,
        Report::Latency,
        |size| size,
        |size| Put {
            data: &data[..size],
            window: 1,
        },
    );
}
