//! osu_put_bibw: MPI_Put's bandwidth both ways at once, `-W` puts by each rank per fence or
//! PSCW epoch (mpirt only: rsmpi has no windows).

use osu_benches::one_sided::{run, Put, Report};
use osu_benches::{start, Benchmark};

fn main() {
    let (universe, options) = start(Benchmark::PutBiBandwidth);
    let window = options.window;
    // A piece for each put of a window, as OSU's buffer.
    let data = vec![b'a'; options.max_size * window];
    run::<u8, _>(
        &universe.world(),
        &options,
        Report::BiBandwidth { window },
        |size| size * window,
        |size| Put {
            data: &data[..size * window],
            window,
        },
    );
}
