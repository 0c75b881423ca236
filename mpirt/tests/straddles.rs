//! Collectives by messages whose ranks' lengths fall on different sides of an algorithm's
//! limit (`collective/select.rs`), so that they choose algorithms with different message
//! patterns: every rank must end with a named error, or with the root's exact bytes where it
//! may (a broadcast's ranks that never hear from the rank that disagrees), and never wait
//! for ever. Immediate calls go by messages on every placement; rsrun's stall timeout ends
//! (and names) a job whose ranks all wait, and the test's job limit any other.

use std::env;

use mpirt::collective::SystemOperation;
use mpirt::request;
use mpirt::topology::SimpleCommunicator;
use mpirt::traits::*;

#[allow(dead_code)] // The helpers other test files use.
mod common;

use common::{ok_job_with, RANK_MODE};

/// What a rank prints: "straddle <case>: rank <r>: ok", or the error, which names the rank.
fn report(case: &str, rank: i32, result: Result<(), mpirt::Error>) {
    match result {
        Ok(()) => println!("straddle {case}: rank {rank}: ok"),
        Err(e) => println!("straddle {case}: {e}"),
    }
}

fn byte(i: usize) -> u8 {
    (i * 7 % 251) as u8
}

/// The broadcast limits: past 512 KiB on more than 7 ranks the root's vector is scattered,
/// then passed round a ring; up to it (or on fewer ranks), it goes down a binomial tree.
const BROADCAST_SHORT: usize = 512 << 10;
/// All-reduce vectors up to 8 KiB go by recursive doubling, then by Rabenseifner's
/// algorithm up to 1 MiB, then round a ring.
const ALLREDUCE_SHORT: usize = 8 << 10;
const ALLREDUCE_RING: usize = 1 << 20;
/// All-gather results up to 64 KiB go by Bruck's algorithm, up to 256 KiB on a power of two
/// of ranks by recursive doubling, longer ones round a ring.
const ALLGATHER_SHORT: usize = 64 << 10;
const ALLGATHER_DOUBLING: usize = 256 << 10;

/// The all-gather's limit on `size` ranks.
fn all_gather_limit(size: i32) -> usize {
    if (size as u32).is_power_of_two() {
        ALLGATHER_DOUBLING
    } else {
        ALLGATHER_SHORT
    }
}
/// Scatters and gathers whose whole vector is up to 256 KiB go down (up) a binomial tree,
/// longer ones directly.
const ROOTED_SHORT: usize = 256 << 10;
/// Reductions to a root of vectors up to 64 KiB go up a binomial tree, longer ones by
/// reduce-scatter then gather.
const REDUCE_LONG: usize = 64 << 10;
/// All-to-all blocks up to 256 bytes all go at once, longer ones pairwise.
const ALLTOALL_SHORT: usize = 256;

/// The cases on `size` ranks: (case, odd rank, its length, the others' length); lengths in
/// bytes (broadcast, all-gather's, scatter's, gather's and all-to-all's block) or `i32`
/// elements (all-reduce, reduce).
fn cases(size: i32) -> Vec<(String, i32, usize, usize)> {
    let mut cases = vec![];
    let mut add = |what: &str, odd: i32, mine: usize, theirs: usize| {
        cases.push((
            format!("{what} {mine} at rank {odd} vs {theirs}"),
            odd,
            mine,
            theirs,
        ));
    };
    let (last, middle) = (size - 1, size / 2);
    if size > 7 {
        let (short, long) = (BROADCAST_SHORT, BROADCAST_SHORT + 8);
        for odd in [middle, last, 0] {
            add("broadcast", odd, short, long);
            add("broadcast", odd, long, short);
        }
        add("broadcast", middle, 64, 1 << 20);
    }
    let int = std::mem::size_of::<i32>();
    for (mine, theirs) in [
        (ALLREDUCE_SHORT / int + 2, ALLREDUCE_SHORT / int),
        (ALLREDUCE_RING / int + 2, ALLREDUCE_RING / int),
    ] {
        add("all_reduce", last, mine, theirs);
        add("all_reduce", 0, theirs, mine);
    }
    add("all_reduce", middle, 4, ALLREDUCE_RING / int + 2);
    let block = all_gather_limit(size) / size as usize;
    add("all_gather", last, block + 1, block);
    add("all_gather", 0, block, block + 1);
    add("all_gather", middle, 8, 1 << 17);
    let block = ROOTED_SHORT / size as usize;
    let mut odd_ranks = vec![0, middle, last];
    odd_ranks.dedup();
    for odd in odd_ranks {
        add("scatter", odd, block + 1, block);
        add("scatter", odd, block, block + 1);
    }
    let (short, long) = (REDUCE_LONG / int, REDUCE_LONG / int + 2);
    add("reduce", last, long, short);
    add("reduce", middle, short, long);
    add("reduce", 0, long, short);
    add("reduce", 0, short, long);
    let block = ROOTED_SHORT / size as usize;
    add("gather", last, block + 1, block);
    add("gather", middle, block, block + 1);
    add("gather", 0, block + 1, block);
    add("gather", 0, block, block + 1);
    add("all_to_all", last, ALLTOALL_SHORT + 1, ALLTOALL_SHORT);
    add("all_to_all", middle, 8, 4096);
    cases
}

/// One immediate `kind` call of `len` on this rank, where the root's is `root_len`: its
/// outcome (a rank that finishes holds the root's bytes where it hears from the root).
fn call(
    world: &SimpleCommunicator,
    kind: &str,
    len: usize,
    root_len: usize,
) -> Result<(), mpirt::Error> {
    let (rank, n) = (world.rank(), world.size() as usize);
    let root = world.process_at_rank(0);
    let sum = SystemOperation::sum;
    match kind {
        "broadcast" => {
            let mut buf: Vec<u8> = match rank {
                0 => (0..len).map(byte).collect(),
                _ => vec![0; len],
            };
            let done = request::scope(|scope| {
                root.immediate_broadcast_into(scope, &mut buf[..])
                    .try_wait()
                    .map(drop)
            });
            if done.is_ok() {
                assert!(
                    len == root_len && buf.iter().enumerate().all(|(i, &b)| b == byte(i)),
                    "{kind} of {len}: rank {rank} finished without the root's bytes"
                );
            }
            done
        }
        "all_reduce" => {
            let send: Vec<i32> = (0..len as i32).map(|i| rank * 1000 + i).collect();
            let mut recv = vec![0i32; len];
            request::scope(|scope| {
                world
                    .immediate_all_reduce_into(scope, &send[..], &mut recv[..], sum())
                    .try_wait()
                    .map(drop)
            })
        }
        "all_gather" => {
            let send: Vec<u8> = (0..len).map(byte).collect();
            let mut recv = vec![0u8; len * n];
            request::scope(|scope| {
                world
                    .immediate_all_gather_into(scope, &send[..], &mut recv[..])
                    .try_wait()
                    .map(drop)
            })
        }
        "scatter" => {
            let mut part = vec![0u8; len];
            let all: Vec<u8> = match rank {
                0 => (0..len * n).map(byte).collect(),
                _ => vec![],
            };
            let done = request::scope(|scope| match rank {
                0 => root
                    .immediate_scatter_into_root(scope, &all[..], &mut part[..])
                    .try_wait()
                    .map(drop),
                _ => root
                    .immediate_scatter_into(scope, &mut part[..])
                    .try_wait()
                    .map(drop),
            });
            if done.is_ok() {
                let at = rank as usize * len;
                assert!(
                    len == root_len && part.iter().enumerate().all(|(i, &b)| b == byte(at + i)),
                    "{kind} of {len}: rank {rank} finished without its part of the root's bytes"
                );
            }
            done
        }
        "reduce" => {
            let send: Vec<i32> = (0..len as i32).map(|i| rank * 1000 + i).collect();
            let mut recv = vec![0i32; len];
            request::scope(|scope| match rank {
                0 => root
                    .immediate_reduce_into_root(scope, &send[..], &mut recv[..], sum())
                    .try_wait()
                    .map(drop),
                _ => root
                    .immediate_reduce_into(scope, &send[..], sum())
                    .try_wait()
                    .map(drop),
            })
        }
        "gather" => {
            let send: Vec<u8> = (0..len).map(byte).collect();
            let mut all = vec![0u8; len * n];
            request::scope(|scope| match rank {
                0 => root
                    .immediate_gather_into_root(scope, &send[..], &mut all[..])
                    .try_wait()
                    .map(drop),
                _ => root
                    .immediate_gather_into(scope, &send[..])
                    .try_wait()
                    .map(drop),
            })
        }
        "all_to_all" => {
            let send: Vec<u8> = (0..len * n).map(byte).collect();
            let mut recv = vec![0u8; len * n];
            request::scope(|scope| {
                world
                    .immediate_all_to_all_into(scope, &send[..], &mut recv[..])
                    .try_wait()
                    .map(drop)
            })
        }
        other => panic!("unknown case {other}"),
    }
}

fn straddles(world: &SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    for (case, odd, mine, theirs) in cases(size) {
        let kind = case.split(' ').next().expect("a kind");
        let len = if rank == odd { mine } else { theirs };
        let root_len = if odd == 0 { mine } else { theirs };
        report(&case, rank, call(world, kind, len, root_len));
        in_step(world, &case);
        // Each length again on every rank: the plans kept for this rank's length (and the
        // other's) are those of calls that did not straddle, whatever the straddled call did
        // to its own (a release's rounds, another algorithm's plan).
        for len in [mine, theirs] {
            let again = format!("again {case}, {len} on every rank");
            report(&again, rank, call(world, kind, len, len));
            in_step(world, &again);
        }
    }
}

/// The rank side of [`a_direct_call_that_hears_another_algorithm_goes_on_as_an_execution`]:
/// a gather to rank 0 on 2 ranks whose rank 1's part is a byte longer than the limit's
/// share, so that rank 1's whole vector chose the linear algorithm and the root's the
/// binomial tree.
fn hand_over(world: &SimpleCommunicator) {
    let rank = world.rank();
    let block = ROOTED_SHORT / 2;
    let len = if rank == 1 { block + 1 } else { block };
    report("hand-over gather", rank, call(world, "gather", len, block));
    in_step(world, "hand-over gather");
    println!("hand-over: rank {rank}: in step");
}

/// A rank out of step would read another call's bytes here.
fn in_step(world: &SimpleCommunicator, after: &str) {
    let (rank, size) = (world.rank(), world.size());
    let (one, mut total) = (rank * 10 + 1, 0i32);
    world.all_reduce_into(&one, &mut total, SystemOperation::sum());
    assert_eq!(
        total,
        (0..size).map(|r| r * 10 + 1).sum::<i32>(),
        "after {after}"
    );
}

/// The rank side, selected by `RANK_MODE`.
#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    let universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    match mode.as_str() {
        "straddles" => straddles(&world),
        "hand-over" => hand_over(&world),
        other => panic!("unknown rank mode {other}"),
    }
    println!("rank {} done", world.rank());
}

/// Whether the test hosts (MPIRT_TEST_HOSTS) hold more than one of `size` ranks on some
/// host, so that collectives take the hierarchical plans.
fn some_host_has_two(size: i32) -> bool {
    env::var("MPIRT_TEST_HOSTS").is_ok_and(|hosts| hosts.split(',').count() < size as usize)
}

/// The causes a rank may name: another algorithm's message, or a length that disagrees
/// (its own receive's, or a peer's that then passed nothing on).
const ALGORITHM: &str = "algorithm where this rank ran";
const NAMED: [&str; 3] = [
    ALGORITHM,
    "bytes where this rank expected",
    "the ranks' counts disagree",
];

/// On 2 to 8 ranks (broadcasts, whose algorithms differ only past 7 ranks, on 8), every case
/// ends on every rank: the all-reduces, all-gathers and all-to-alls fail on every rank, each
/// naming why; a broadcast or scatter fails on the rank that disagrees (but the root, which
/// cannot tell) and on every rank that hears from it, and the others hold the root's bytes;
/// a reduction or gather fails on its root, on every rank whose length chose the long
/// algorithm, and on every rank that hears of the rank that disagrees (ranks of the short one
/// whose whole subtree ran it end as they sent their part). Where the algorithms differ, some
/// rank names the other algorithm.
#[test]
fn lengths_straddling_an_algorithm_limit_fail_on_every_rank_without_waiting() {
    for size in 2..=8 {
        let (out, _) = ok_job_with(size as u32, "straddles", &[("MPIRT_STALL_TIMEOUT", "60")]);
        for (case, odd, mine, theirs) in cases(size) {
            let prefix = format!("straddle {case}: rank ");
            let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(&prefix)).collect();
            assert_eq!(lines.len(), size as usize, "{size} ranks, {case}:\n{out}");
            let straddled = |limit: usize| (mine <= limit) != (theirs <= limit);
            let differ = match case.split(' ').next() {
                Some("broadcast") => straddled(BROADCAST_SHORT),
                Some("all_reduce") => {
                    let int = std::mem::size_of::<i32>();
                    straddled(ALLREDUCE_SHORT / int) || straddled(ALLREDUCE_RING / int)
                }
                Some("all_gather") => straddled(all_gather_limit(size) / size as usize),
                // Across hosts with more than one rank on some, scatters and gathers go
                // through each host's leader whatever the length: the lengths disagree, named.
                Some("scatter" | "gather") => {
                    !some_host_has_two(size) && straddled(ROOTED_SHORT / size as usize)
                }
                Some("reduce") => straddled(REDUCE_LONG / std::mem::size_of::<i32>()),
                // Across hosts with more than one rank on some, short blocks go through each
                // host's leader; on one host both algorithms meet unmarked.
                Some("all_to_all") => some_host_has_two(size) && straddled(ALLTOALL_SHORT),
                _ => false,
            };
            for rank in 0..size {
                let line = lines
                    .iter()
                    .find(|l| l[prefix.len()..].starts_with(&format!("{rank}:")))
                    .unwrap_or_else(|| panic!("{case}: no outcome of rank {rank}:\n{out}"));
                let ok = line.ends_with(": ok");
                let rooted = case.starts_with("broadcast") || case.starts_with("scatter");
                let to_root = case.starts_with("reduce") || case.starts_with("gather");
                // Where the algorithms differ, a rank of the long one hears of the short one
                // (the release down the tree reaches every such rank).
                let len = if rank == odd { mine } else { theirs };
                let ran_short = match case.split(' ').next() {
                    Some("reduce") => len <= REDUCE_LONG / std::mem::size_of::<i32>(),
                    _ => len <= ROOTED_SHORT / size as usize,
                };
                assert!(
                    (ok && rooted && (rank != odd || rank == 0))
                        || (ok && to_root && rank != 0 && (!differ || ran_short))
                        || NAMED.iter().any(|c| line.contains(c)),
                    "{size} ranks, {case}: {line}\n{out}"
                );
            }
            if differ {
                assert!(
                    lines.iter().any(|l| l.contains(ALGORITHM)),
                    "{size} ranks, {case}: no rank named the other algorithm\n{out}"
                );
            }
            for len in [mine, theirs] {
                let again = format!("straddle again {case}, {len} on every rank: rank ");
                let ok = out
                    .lines()
                    .filter(|l| l.starts_with(&again) && l.ends_with(": ok"))
                    .count();
                assert!(
                    ok >= size as usize,
                    "{size} ranks, {again}...: not ok\n{out}"
                );
            }
        }
    }
}

/// An immediate call whose transfers all go in one round (each rank's part of a short gather
/// on 2 ranks) runs direct, without an execution (`collective::schedule::direct`); where its
/// receive names another algorithm than its own, it goes on as an execution. Here the root,
/// on the binomial tree, hears rank 1's linear algorithm's empty message up the tree: it must
/// then send rank 1 the release down the tree that rank 1 waits for (a call that ended at
/// that message would leave rank 1 waiting for ever), and both name the other algorithm (or
/// the lengths), and go on in step.
#[test]
fn a_direct_call_that_hears_another_algorithm_goes_on_as_an_execution() {
    if some_host_has_two(2) {
        println!("skipped: 2 ranks on one test host gather through the host's leader");
        return;
    }
    let (out, _) = ok_job_with(2, "hand-over", &[("MPIRT_STALL_TIMEOUT", "60")]);
    let outcome = |rank: i32| {
        let prefix = format!("straddle hand-over gather: rank {rank}: ");
        let line = out.lines().find(|l| l.starts_with(&prefix));
        line.unwrap_or_else(|| panic!("no outcome of rank {rank}:\n{out}"))
    };
    let root = outcome(0);
    assert!(
        root.contains(ALGORITHM) && root.contains("of the linear algorithm"),
        "{root}"
    );
    let other = outcome(1);
    assert!(NAMED.iter().any(|c| other.contains(c)), "{other}");
    for rank in 0..2 {
        assert!(
            out.contains(&format!("hand-over: rank {rank}: in step")),
            "{out}"
        );
    }
}
