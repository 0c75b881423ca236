//! Rank 0 sends one message of SIZE bytes to the last rank, then a checksum of it; the last rank
//! checks the message it received against that checksum and prints the result and the rate.
//! For messages of a gigabyte and more, across hosts or on one.
//!
//!   bigmsg SIZE     (SIZE takes k, m and g suffixes: bigmsg 1g)

use std::process::ExitCode;

use examples::parse_size;
use mpirt::traits::*;

const DATA: i32 = 1;
const CHECKSUM: i32 = 2;

/// Fills `buf` with a pattern that differs per 8-byte word, so a misplaced chunk shows.
fn fill(buf: &mut [u8]) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let word = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
    }
}

/// An order-sensitive 64-bit checksum, a word at a time (a byte at a time is too slow for 1 GiB).
fn checksum(buf: &[u8]) -> u64 {
    let mut words = buf.chunks_exact(8);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in &mut words {
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w.try_into().unwrap()))
            .wrapping_mul(0x100_0000_01b3);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(len) = args
        .first()
        .and_then(|a| parse_size(a))
        .filter(|_| args.len() == 1)
    else {
        eprintln!("usage: bigmsg SIZE (bytes, or with a k, m or g suffix)");
        return ExitCode::FAILURE;
    };
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    if size < 2 {
        eprintln!("bigmsg needs at least 2 ranks, got {size}");
        return ExitCode::FAILURE;
    }
    let last = size - 1;
    let mut msg = vec![0u8; if rank == 0 || rank == last { len } else { 0 }];
    if rank == 0 {
        fill(&mut msg);
    } else {
        // Touched before the clock starts, so the rate leaves out the kernel's zeroing of
        // fresh pages.
        msg.fill(0xff);
    }
    // The rate counts the transfer only, not rank 0 filling the message.
    world.barrier();
    if rank == 0 {
        let receiver = world.process_at_rank(last);
        receiver.send_with_tag(&msg[..], DATA);
        receiver.send_with_tag(&checksum(&msg), CHECKSUM);
    } else if rank == last {
        let sender = world.process_at_rank(0);
        let start = mpirt::time();
        let status = sender.receive_into_with_tag(&mut msg[..], DATA);
        let seconds = mpirt::time() - start;
        let (expected, _) = sender.receive_with_tag::<u64>(CHECKSUM);
        let got = checksum(&msg);
        if status.byte_count() != len || got != expected {
            eprintln!(
                "bigmsg: rank {rank} received {} of {len} bytes with checksum {got:#018x}, \
                 rank 0 sent {expected:#018x}",
                status.byte_count()
            );
            return ExitCode::FAILURE;
        }
        println!(
            "bigmsg: {len} bytes from rank 0 to rank {last} in {seconds:.2} s ({:.0} MB/s), \
             checksum {got:#018x} ok",
            len as f64 / seconds / 1e6
        );
    }
    ExitCode::SUCCESS
}
