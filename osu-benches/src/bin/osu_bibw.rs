//! osu_bibw: both ranks send a window of non-blocking messages to each other at once;
//! bandwidth counts both directions.

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
    // OSU receives a window into one buffer; safe Rust lends each receive its own slot.
    let slot = options.max_size.max(1);
    let mut r_buf = vec![b'b'; slot * window];
    measure(
        &world,
        &options,
        |size| {
            scope(|sc| {
                let mut requests: Vec<_> = r_buf
                    .chunks_mut(slot)
                    .map(|c| peer.immediate_receive_into_with_tag(sc, &mut c[..size], DATA_TAG))
                    .collect();
                requests.extend(
                    (0..window).map(|_| peer.immediate_send_with_tag(sc, &s_buf[..size], DATA_TAG)),
                );
                wait_all(&mut requests);
            });
        },
        |size, iterations, seconds| size as f64 / 1e6 * (2 * iterations * window) as f64 / seconds,
    );
}
