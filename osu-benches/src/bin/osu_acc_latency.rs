//! osu_acc_latency: MPI_Accumulate's latency (a sum of bytes, or with `-T mpi_double`
//! of f64s) in the synchronisation `-s` names, on a window `-w` makes (mpirt only: rsmpi has
//! no windows).

use osu_benches::one_sided::accumulate_latency;
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::AccLatency);
    accumulate_latency(&universe.world(), &options, false);
}
