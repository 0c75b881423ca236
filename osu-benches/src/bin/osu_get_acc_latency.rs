//! osu_get_acc_latency: MPI_Get_accumulate's latency (a sum of bytes, or with `-T mpi_double`
//! of f64s) in the synchronisation `-s` names, on a window `-w` makes (mpirt only: rsmpi has
//! no windows).

use osu_benches::one_sided::accumulate_latency;
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::GetAccLatency);
    accumulate_latency(&universe.world(), &options, true);
}
