//! osu_bibw: both ranks send a window of non-blocking messages to each other at once;
//! bandwidth counts both directions.

use std::io::Write;

use mpirt::request::{scope, wait_all};
use mpirt::traits::*;
use osu_benches::{row, start, Benchmark};

const DATA_TAG: i32 = 100;

fn main() {
    let (universe, options) = start(Benchmark::BiBandwidth);
    let world = universe.world();
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let window = options.window;
    let s_buf = vec![b'a'; options.max_size];
    // OSU receives a window into one buffer; safe Rust lends each receive its own slot.
    let slot = options.max_size.max(1);
    let mut r_buf = vec![b'b'; slot * window];
    for size in options.sizes() {
        let (iterations, skip) = options.loops(size);
        world.barrier();
        let mut start = 0.0;
        for i in 0..iterations + skip {
            if i == skip {
                start = mpirt::time();
            }
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
        }
        if rank == 0 {
            let seconds = mpirt::time() - start;
            let bandwidth = size as f64 / 1e6 * (2 * iterations * window) as f64 / seconds;
            print!("{}", row(size, bandwidth));
            let _ = std::io::stdout().flush();
        }
    }
}
