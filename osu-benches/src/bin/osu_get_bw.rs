//! osu_get_bw: MPI_Get's bandwidth, `-W` gets per synchronisation (mpirt only: rsmpi has no
//! windows).

use osu_benches::one_sided::{run, Gets, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::GetBandwidth);
    let window = options.window;
    run::<u8, _>(
        &universe.world(),
        &options,
        Report::Bandwidth { window },
        |size| size * window,
        |len| Gets { len, window },
    );
}
