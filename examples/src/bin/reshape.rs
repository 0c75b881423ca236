//! Rank 0 sends BYTES of a matrix's column of BLOCK-byte blocks (a vector datatype) to rank 1,
//! which receives them in another layout: blocks of 3/4 and 5/4 of BLOCK in turn (an indexed
//! datatype), as a code whose two sides hold the data in different shapes does. Repeated
//! ROUNDS times, the same bytes each time (only the messages are timed); rank 1 then checks
//! every byte, rank 0 prints the rate. Both sides' blocks average
//! BLOCK bytes, so this measures how a layout of blocks of that size moves (over shared
//! memory: `MPIRT_SHM_ARENA_MIN_BLOCK`, `MPIRT_SHM_IN_PLACE_MIN_BLOCK`).
//!
//!   reshape BLOCK BYTES ROUNDS     (BLOCK a multiple of 4; sizes take k, m and g suffixes)

use std::process::ExitCode;

use examples::parse_size;
use mpirt::datatype::{MutView, UserDatatype, View};
use mpirt::traits::*;

/// Bytes between two blocks on either side.
const GAP: usize = 64;

const USAGE: &str = "usage: reshape BLOCK BYTES ROUNDS (BLOCK a multiple of 4, BYTES of 2 * \
                     BLOCK or more, the layouts with their gaps under 2 GiB)";

/// Whether the layouts of `bytes` in blocks of `block` (whole pairs of them, each block
/// followed by `GAP` bytes) span at most `i32::MAX` bytes: their displacements are `i32`s, as
/// MPI's are, and a larger one would wrap.
fn fits_i32(block: usize, bytes: usize) -> bool {
    let pairs = bytes / (2 * block);
    pairs
        .checked_mul(2 * (block + GAP))
        .is_some_and(|span| span <= i32::MAX as usize)
}

/// The byte at packed offset `i`.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 8)) as u8
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match &args[..] {
        [block, bytes, rounds] => parse_size(block)
            .zip(parse_size(bytes))
            .zip(rounds.parse::<usize>().ok()),
        _ => None,
    };
    let Some(((block, bytes), rounds)) = parsed.filter(|&((block, bytes), rounds)| {
        block >= 4
            && block.is_multiple_of(4)
            && bytes >= 2 * block
            && rounds > 0
            && fits_i32(block, bytes)
    }) else {
        eprintln!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    if world.size() != 2 {
        if world.rank() == 0 {
            eprintln!("reshape needs exactly 2 ranks, got {}", world.size());
        }
        return ExitCode::FAILURE;
    }
    // Whole pairs of blocks, so that both layouts hold the same bytes.
    let pairs = bytes / (2 * block);
    let len = pairs * 2 * block;
    let me = world.rank();
    let other = world.process_at_rank(1 - me);
    let u8_type = u8::equivalent_datatype();
    if me == 0 {
        let n = 2 * pairs;
        let stride = block + GAP;
        let mut matrix = vec![0u8; n * stride];
        for (i, b) in matrix
            .chunks_mut(stride)
            .flat_map(|r| &mut r[..block])
            .enumerate()
        {
            *b = pattern(i);
        }
        let column = UserDatatype::vector(n as i32, block as i32, stride as i32, &u8_type);
        // SAFETY: `n` blocks of `block` bytes `stride` apart lie within the matrix.
        let view = unsafe { View::with_count_and_datatype(&matrix[..], 1, &column) };
        world.barrier();
        let start = mpirt::time();
        for _ in 0..rounds {
            other.send(&view);
        }
        // Rank 1's word that every round arrived ends the timing; its check of the bytes
        // follows, untimed (a rank that found one wrong ends the job).
        let (arrived, _) = other.receive::<u8>();
        let seconds = mpirt::time() - start;
        assert_eq!(arrived, 0, "rank 1's word after the last round");
        let (checked, _) = other.receive::<u8>();
        assert_eq!(checked, 1, "rank 1's word after the check");
        println!(
            "reshape: {rounds} x {len} bytes in blocks of {block} in {seconds:.6} s: {:.1} MB/s",
            (len * rounds) as f64 / seconds / 1e6
        );
        return ExitCode::SUCCESS;
    }
    let (short, long) = (3 * block / 4, 5 * block / 4);
    let lengths: Vec<i32> = (0..pairs)
        .flat_map(|_| [short as i32, long as i32])
        .collect();
    let places: Vec<i32> = (0..pairs)
        .flat_map(|p| {
            let at = p * (2 * block + 2 * GAP);
            [at as i32, (at + short + GAP) as i32]
        })
        .collect();
    let shape = UserDatatype::indexed(&lengths, &places, &u8_type);
    let mut landed = vec![0u8; pairs * (2 * block + 2 * GAP)];
    {
        // SAFETY: the indexed blocks lie within `landed`, `2 * block + 2 * GAP` a pair.
        let mut view = unsafe { MutView::with_count_and_datatype(&mut landed[..], 1, &shape) };
        world.barrier();
        for _ in 0..rounds {
            other.receive_into(&mut view);
        }
    }
    other.send(&0u8);
    let packed = lengths.iter().zip(&places).flat_map(|(&n, &at)| {
        let at = at as usize;
        &landed[at..at + n as usize]
    });
    if let Some(i) = packed.enumerate().position(|(i, &b)| b != pattern(i)) {
        eprintln!("reshape: byte {i} of {len} landed wrong");
        return ExitCode::FAILURE;
    }
    other.send(&1u8);
    ExitCode::SUCCESS
}
