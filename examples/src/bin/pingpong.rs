//! Two ranks bounce messages of 1 byte to 16 MiB, checking every byte, and rank 0 prints the
//! round-trip time per size.

use std::process::ExitCode;

use mpirt::traits::*;

const MAX: usize = 16 << 20;
const ROUNDS: usize = 10;

fn fill(buf: &mut [u8], size: usize, round: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i.wrapping_mul(131) ^ size ^ round) as u8;
    }
}

fn main() -> ExitCode {
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    if world.size() != 2 {
        if world.rank() == 0 {
            eprintln!("pingpong needs exactly 2 ranks, got {}", world.size());
        }
        return ExitCode::FAILURE;
    }
    let me = world.rank();
    let other = world.process_at_rank(1 - me);
    let mut out = vec![0u8; MAX];
    let mut back = vec![0u8; MAX];
    let mut size = 1;
    while size <= MAX {
        let start = mpirt::time();
        for round in 0..ROUNDS {
            fill(&mut out[..size], size, round);
            if me == 0 {
                other.send(&out[..size]);
                other.receive_into(&mut back[..size]);
                if back[..size] != out[..size] {
                    eprintln!("pingpong: {size}-byte message came back changed");
                    return ExitCode::FAILURE;
                }
            } else {
                other.receive_into(&mut back[..size]);
                if back[..size] != out[..size] {
                    eprintln!("pingpong: {size}-byte message arrived changed");
                    return ExitCode::FAILURE;
                }
                other.send(&back[..size]);
            }
        }
        if me == 0 {
            let us = (mpirt::time() - start) * 1e6 / ROUNDS as f64;
            println!("{size:>10} bytes  {us:>12.2} us round trip");
        }
        size *= 2;
    }
    ExitCode::SUCCESS
}
