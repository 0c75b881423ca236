//! osu_put_bw: MPI_Put's bandwidth, `-W` puts per synchronisation (mpirt only: rsmpi has no
//! windows).

use osu_benches::one_sided::{run, Put, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::PutBandwidth);
    let window = options.window;
    // A piece for each put of a window, as OSU's buffer.
    let data = vec![b'a'; options.max_size * window];
    run::<u8, _>(
        &universe.world(),
        &options,
        Report::Bandwidth { window },
        |size| size * window,
        |size| Put {
            data: &data[..size * window],
            window,
        },
    );
}
