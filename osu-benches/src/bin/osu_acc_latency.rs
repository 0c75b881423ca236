//! osu_acc_latency: MPI_Accumulate's (sum of bytes, or with `-T mpi_double` of f64s) latency in the synchronisation `-s`
//! names, on a window `-w` makes (mpirt only: rsmpi has no windows).

use osu_benches::one_sided::{run, Accumulate, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::AccLatency);
    let world = universe.world();
    // Sizes are bytes: `-T mpi_double` accumulates size / 8 f64s.
    if options.doubles {
        let data = vec![1f64; options.max_size / 8];
        run::<f64, _>(
            &world,
            &options,
            Report::Latency,
            |size| size / 8,
            |size| Accumulate {
                data: &data[..size / 8],
                fetch: false,
            },
        );
    } else {
        let data = vec![1u8; options.max_size];
        run::<u8, _>(
            &world,
            &options,
            Report::Latency,
            |size| size,
            |size| Accumulate {
                data: &data[..size],
                fetch: false,
            },
        );
    }
}
