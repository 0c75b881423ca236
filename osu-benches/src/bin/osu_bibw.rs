//! osu_bibw: both ranks send a window of non-blocking messages to each other at once, and
//! receive the other's window into one buffer (as OSU does); bandwidth counts both directions.

use osu_benches::mpi::request::{scope, wait_all};
use osu_benches::mpi::traits::*;
use osu_benches::{measure, start, Benchmark};

const DATA_TAG: i32 = 100;

fn main() {
    let (universe, options) = start(Benchmark::BiBandwidth);
    let world = universe.world();
    let peer = world.process_at_rank(1 - world.rank());
    let window = options.window;
    let s_buf = vec![b'a'; options.max_size];
    let mut r_buf = vec![b'b'; options.max_size];
    let r_ptr = r_buf.as_mut_ptr();
    measure(
        &world,
        &options,
        |size| {
            scope(|sc| {
                let mut requests: Vec<_> = (0..window)
                    // SAFETY: nothing but these receives touches `r_buf` while the program
                    // runs (it is reached only through `r_ptr`, and outlives `measure`), and
                    // the scope ends only once all of them have completed; that they all
                    // write the same bytes is C's semantics, what OSU's source does.
                    .map(|_| unsafe {
                        peer.immediate_receive_into_raw_with_tag(sc, r_ptr, size, DATA_TAG)
                    })
                    .collect();
                requests.extend(
                    (0..window).map(|_| peer.immediate_send_with_tag(sc, &s_buf[..size], DATA_TAG)),
                );
                wait_all(&mut requests);
            });
        },
        |size, iterations, seconds| size as f64 / 1e6 * (2 * iterations * window) as f64 / seconds,
    );
    drop(r_buf);
}
