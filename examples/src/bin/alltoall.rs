//! Every rank sends a patterned block to every other rank at once, with non-blocking sends and
//! receives, and checks every byte it receives. Block lengths differ from pair to pair, from
//! BYTES down to BYTES/64, so small eager messages and large rendezvous ones cross together.
//! Rank 0 prints a line after rounds 1, 2, 4, 8, ... and the last, once every rank has checked
//! its blocks of that round; a wrong block fails the job, naming the pair and the offset.
//!
//! `alltoall [BYTES [ROUNDS]]` (defaults: 1m, 1; BYTES takes k, m and g suffixes)

use std::process::ExitCode;

use examples::parse_size;
use mpirt::request;
use mpirt::traits::*;
use mpirt::Rank;

const BLOCK: i32 = 1;
const REPORT: i32 = 2;

/// Length of the block `from` sends to `to`: BYTES, BYTES/4, BYTES/16 or BYTES/64.
fn block_len(max: usize, from: Rank, to: Rank) -> usize {
    max >> (2 * ((from + to) % 4))
}

/// Byte `i` of the block `from` sends to `to` in `round`: differs per pair, round and position.
fn pattern(from: Rank, to: Rank, round: u64, i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9) ^ (from as usize * 7 + to as usize * 13 + round as usize * 29))
        as u8
}

/// Rank 0 reports rounds 1, 2, 4, ...: a long run shows progress without a line per round.
fn reported(round: u64, rounds: u64) -> bool {
    round.is_power_of_two() || round == rounds
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let max = args.first().map_or(Some(1 << 20), |a| parse_size(a));
    let rounds = args.get(1).map_or(Some(1), |a| a.parse::<u64>().ok());
    let (Some(max), Some(rounds), true) = (max, rounds, args.len() <= 2) else {
        eprintln!("usage: alltoall [BYTES [ROUNDS]]");
        return ExitCode::FAILURE;
    };
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let peers: Vec<Rank> = (0..size).filter(|&r| r != rank).collect();
    for round in 1..=rounds {
        let outgoing: Vec<Vec<u8>> = peers
            .iter()
            .map(|&to| {
                (0..block_len(max, rank, to))
                    .map(|i| pattern(rank, to, round, i))
                    .collect()
            })
            .collect();
        let mut incoming: Vec<Vec<u8>> = peers
            .iter()
            .map(|&from| vec![0; block_len(max, from, rank)])
            .collect();
        request::scope(|scope| {
            let mut requests = Vec::with_capacity(2 * peers.len());
            for (&from, buf) in peers.iter().zip(incoming.iter_mut()) {
                let source = world.process_at_rank(from);
                requests.push(source.immediate_receive_into_with_tag(scope, &mut buf[..], BLOCK));
            }
            for (&to, block) in peers.iter().zip(&outgoing) {
                let destination = world.process_at_rank(to);
                requests.push(destination.immediate_send_with_tag(scope, &block[..], BLOCK));
            }
            request::wait_all(&mut requests);
        });
        for (&from, block) in peers.iter().zip(&incoming) {
            if let Some(i) = (0..block.len()).find(|&i| block[i] != pattern(from, rank, round, i)) {
                eprintln!(
                    "alltoall: round {round}: the block from rank {from} to rank {rank} is wrong \
                     at byte {i} of {}",
                    block.len()
                );
                return ExitCode::FAILURE;
            }
        }
        if !reported(round, rounds) {
            continue;
        }
        let root = world.process_at_rank(0);
        if rank == 0 {
            let mut verified = peers.len();
            for from in 1..size {
                let (count, _) = world.process_at_rank(from).receive_with_tag::<u64>(REPORT);
                verified += count as usize;
            }
            println!(
                "alltoall: {size} ranks, round {round} of {rounds}: {verified} blocks of {} to \
                 {max} bytes verified",
                max >> 6
            );
        } else {
            root.send_with_tag(&(peers.len() as u64), REPORT);
        }
    }
    ExitCode::SUCCESS
}
