//! NPB IS, the integer sort: keys drawn from an approximately Gaussian distribution are ranked
//! by a bucket sort whose buckets are redistributed among the processes with an all-to-all.
//! NPB's partial verification checks the ranks of five keys in every iteration; the full
//! verification sorts the keys by their ranks and checks the order, across processes too.
//!
//!   npb_is CLASS     (S, W, A or B; a power-of-two number of processes)

use std::process::ExitCode;

use examples::npb::{self, multiply, power, Randlc, Summary, MULTIPLIER};
use mpirt::collective::SystemOperation;
use mpirt::datatype::{Partition, PartitionMut};
use mpirt::traits::*;
use mpirt::Count;

const ITERATIONS: i32 = 10;
const TESTS: usize = 5;
const SEED: u64 = 314_159_265;

struct Class {
    name: char,
    total_keys_log2: u32,
    max_key_log2: u32,
    buckets_log2: u32,
    /// Positions in the global key sequence whose keys' ranks are checked in every iteration.
    test_index: [usize; TESTS],
    /// Their ranks, before NPB's per-class, per-iteration offset (see `expected_rank`).
    test_rank: [i64; TESTS],
}

impl Class {
    fn new(name: char) -> Class {
        let (total_keys_log2, max_key_log2, buckets_log2, test_index, test_rank) = match name {
            'S' => (
                16,
                11,
                9,
                [48427, 17148, 23627, 62548, 4431],
                [0, 18, 346, 64917, 65463],
            ),
            'W' => (
                20,
                16,
                10,
                [357773, 934767, 875723, 898999, 404505],
                [1249, 11698, 1039987, 1043896, 1048018],
            ),
            'A' => (
                23,
                19,
                10,
                [2112377, 662041, 5336171, 3642833, 4250760],
                [104, 17523, 123928, 8288932, 8388264],
            ),
            _ => (
                25,
                21,
                10,
                [41869, 812306, 5102857, 18232239, 26860214],
                [33422937, 10244, 59149, 33135281, 99],
            ),
        };
        Class {
            name,
            total_keys_log2,
            max_key_log2,
            buckets_log2,
            test_index,
            test_rank,
        }
    }

    fn total_keys(&self) -> usize {
        1 << self.total_keys_log2
    }

    fn buckets(&self) -> usize {
        1 << self.buckets_log2
    }

    /// The rank test key `test` must have in `iteration`: the keys each iteration rewrites
    /// (see `rank`) move the test keys' ranks up or down by an amount NPB fixes per class.
    fn expected_rank(&self, test: usize, iteration: i32) -> i64 {
        let base = self.test_rank[test];
        let iteration = i64::from(iteration);
        match self.name {
            'S' if test <= 2 => base + iteration,
            'W' if test < 2 => base + iteration - 2,
            'A' if test <= 2 => base + iteration - 1,
            'A' => base - iteration + 1,
            'B' if matches!(test, 1 | 2 | 4) => base + iteration,
            _ => base - iteration,
        }
    }
}

/// This process's part of the ranking: the keys of its buckets and their cumulative counts.
struct Ranked {
    keys: Vec<i32>,
    min_key: usize,
    /// Keys on the processes with lesser buckets.
    lesser: usize,
    /// `cumulative[k - min_key]`: keys (all processes) less than or equal to key `k`.
    cumulative: Vec<usize>,
}

/// This process's keys: its share of NPB's single stream, each the scaled sum of four numbers.
fn create_keys(class: &Class, rank: usize, count: usize) -> Vec<i32> {
    let seed = multiply(SEED, power(MULTIPLIER, 4 * (rank * count) as u64));
    let mut stream = Randlc::new(seed, MULTIPLIER);
    let scale = f64::from(1 << (class.max_key_log2 - 2));
    (0..count)
        .map(|_| {
            let mut x = stream.next_f64();
            x += stream.next_f64();
            x += stream.next_f64();
            x += stream.next_f64();
            (scale * x) as i32
        })
        .collect()
}

/// One ranking pass of NPB's IS. Returns the ranking and how many test keys this process held
/// with the right rank.
fn rank<C: Communicator>(
    world: &C,
    class: &Class,
    keys: &mut [i32],
    iteration: i32,
) -> (Ranked, usize) {
    let (me, size) = (world.rank() as usize, world.size() as usize);
    let buckets = class.buckets();
    let shift = class.max_key_log2 - class.buckets_log2;
    let per_process = keys.len();
    // Each iteration rewrites two keys of the global sequence, so that the ranks change.
    if me == 0 {
        keys[iteration as usize] = iteration;
        keys[(iteration + ITERATIONS) as usize] = (1 << class.max_key_log2) - iteration;
    }

    // Bucket sizes, with the values of the test keys this process holds riding behind them
    // so that one reduction tells every process both.
    let mut local = vec![0i64; buckets + TESTS];
    for &key in keys.iter() {
        local[(key >> shift) as usize] += 1;
    }
    for (test, &index) in class.test_index.iter().enumerate() {
        if index / per_process == me {
            local[buckets + test] = i64::from(keys[index % per_process]);
        }
    }
    let mut by_bucket = vec![0i32; keys.len()];
    let mut next: Vec<usize> = local[..buckets]
        .iter()
        .scan(0, |at, &n| {
            let start = *at;
            *at += n as usize;
            Some(start)
        })
        .collect();
    for &key in keys.iter() {
        let bucket = (key >> shift) as usize;
        by_bucket[next[bucket]] = key;
        next[bucket] += 1;
    }
    let mut totals = vec![0i64; buckets + TESTS];
    world.all_reduce_into(&local[..], &mut totals[..], SystemOperation::sum());

    // NPB's redistribution: process j takes the buckets that bring the running total past
    // (j + 1) * per_process keys. Processes the buckets run out before take none.
    let mut first_bucket = vec![buckets; size];
    let mut last_bucket = vec![0; size];
    let mut send_counts = vec![0 as Count; size];
    let (mut total, mut mine, mut j) = (0i64, 0i64, 0);
    for bucket in 0..buckets {
        total += totals[bucket];
        mine += local[bucket];
        if j < size && total >= ((j + 1) * per_process) as i64 {
            send_counts[j] = mine as Count;
            first_bucket[j] = if j == 0 { 0 } else { last_bucket[j - 1] + 1 };
            last_bucket[j] = bucket;
            j += 1;
            mine = 0;
        }
    }
    let displacements = |counts: &[Count]| -> Vec<Count> {
        counts
            .iter()
            .scan(0, |at, &n| {
                let start = *at;
                *at += n;
                Some(start)
            })
            .collect()
    };
    let mut receive_counts = vec![0 as Count; size];
    world.all_to_all_into(&send_counts[..], &mut receive_counts[..]);
    let send_displacements = displacements(&send_counts);
    let receive_displacements = displacements(&receive_counts);
    let mut mine_keys = vec![0i32; receive_counts.iter().sum::<Count>() as usize];
    world.all_to_all_varcount_into(
        &Partition::new(&by_bucket[..], &send_counts[..], &send_displacements[..]),
        &mut PartitionMut::new(
            &mut mine_keys[..],
            &receive_counts[..],
            &receive_displacements[..],
        ),
    );

    // Rank the keys of this process's buckets by counting.
    let lesser: i64 = totals[..first_bucket[me].min(buckets)].iter().sum();
    let min_key = first_bucket[me] << shift;
    let max_key = ((last_bucket[me] + 1) << shift).max(min_key);
    let mut cumulative = vec![0usize; max_key - min_key];
    for &key in &mine_keys {
        cumulative[key as usize - min_key] += 1;
    }
    let mut running = lesser as usize;
    for count in cumulative.iter_mut() {
        running += *count;
        *count = running;
    }

    // Partial verification: the rank of a test key k is the number of keys less than k.
    let mut passed = 0;
    for test in 0..TESTS {
        let key = totals[buckets + test] as usize;
        if (min_key..max_key).contains(&key) {
            let key_rank = if key > min_key {
                cumulative[key - 1 - min_key]
            } else {
                lesser as usize
            };
            if key_rank as i64 == class.expected_rank(test, iteration) {
                passed += 1;
            } else {
                eprintln!(
                    "npb_is: failed partial verification: iteration {iteration}, process {me}, \
                     test key {test}"
                );
            }
        }
    }
    let ranked = Ranked {
        keys: mine_keys,
        min_key,
        lesser: lesser as usize,
        cumulative,
    };
    (ranked, passed)
}

/// NPB's full verification: places every key at its rank and checks that the result is in
/// order, on this process and against the greatest key of the processes before it.
fn full_verify<C: Communicator>(world: &C, ranked: Ranked) -> bool {
    let Ranked {
        keys,
        min_key,
        lesser,
        mut cumulative,
    } = ranked;
    let mut sorted = vec![0i32; keys.len()];
    for &key in &keys {
        let slot = &mut cumulative[key as usize - min_key];
        *slot -= 1;
        sorted[*slot - lesser] = key;
    }
    let mut out_of_order = sorted.windows(2).filter(|w| w[0] > w[1]).count();
    // -1: a process without keys bounds nothing.
    let greatest = sorted.last().copied().unwrap_or(-1);
    let mut greatest_of = vec![0i32; world.size() as usize];
    world.all_gather_into(&greatest, &mut greatest_of[..]);
    let before = greatest_of[..world.rank() as usize].iter().max().copied();
    if let (Some(&least), Some(before)) = (sorted.first(), before) {
        out_of_order += usize::from(before > least);
    }
    if out_of_order != 0 {
        eprintln!(
            "npb_is: process {}: full verification: {out_of_order} keys out of sort",
            world.rank()
        );
    }
    out_of_order == 0
}

fn main() -> ExitCode {
    let Some(name) = npb::class_or_usage("npb_is") else {
        return ExitCode::FAILURE;
    };
    let class = Class::new(name);
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    let size = world.size();
    if !npb::power_of_two_or_refuse("npb_is", &world) {
        return ExitCode::FAILURE;
    }
    let per_process = class.total_keys() / size as usize;
    if per_process <= 2 * ITERATIONS as usize {
        eprintln!(
            "npb_is: class {} has too few keys for {size} processes",
            class.name
        );
        return ExitCode::FAILURE;
    }
    let mut keys = create_keys(&class, world.rank() as usize, per_process);

    // One pass for free, as NPB does, so that the timed ones find everything warm.
    rank(&world, &class, &mut keys, 1);
    world.barrier();
    let start = mpirt::time();
    let mut passed = 0;
    let mut last = None;
    for iteration in 1..=ITERATIONS {
        let (ranked, ok) = rank(&world, &class, &mut keys, iteration);
        passed += ok;
        last = Some(ranked);
    }
    let seconds = npb::slowest(&world, mpirt::time() - start);
    let sorted = full_verify(&world, last.expect("at least one iteration"));
    let mine = passed as i64 + i64::from(sorted);
    let mut verified_count = 0i64;
    world.all_reduce_into(&mine, &mut verified_count, SystemOperation::sum());
    if world.rank() != 0 {
        return ExitCode::SUCCESS;
    }
    let expected = i64::from(TESTS as i32 * ITERATIONS + size);
    let keys_ranked = f64::from(ITERATIONS) * class.total_keys() as f64;
    Summary {
        name: "IS",
        class: class.name,
        size: class.total_keys().to_string(),
        iterations: ITERATIONS as u32,
        seconds,
        processes: size,
        mops: keys_ranked / seconds / 1e6,
        operation: "keys ranked",
        verified: verified_count == expected,
    }
    .report()
}
