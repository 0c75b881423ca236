//! One-sided communication (windows) with real ranks under rsrun (see `common`), on shared
//! memory and on TCP (and, in builds with the features, over verbs and libfabric).
//!
//! The model test runs seeded random programs of puts, gets, accumulates and atomics in
//! fence, PSCW, lock and lock_all epochs, and checks every window and every fetched value
//! against a serial model of MPI's semantics: within an epoch each location is given one role
//! (written by one origin, accumulated by several, read by several, or swapped by one), so
//! the outcome MPI defines is one value, which the model computes.

use std::env;

use mpirt::collective::SystemOperation;
use mpirt::datatype::{MutView, UserDatatype, View};
use mpirt::environment::Universe;
use mpirt::topology::SimpleCommunicator;
use mpirt::traits::*;
use mpirt::window::{AccumulateOperation, LockKind, TargetDatatype, Window};
use mpirt::Rank;

#[allow(dead_code)] // each test binary uses part of it
mod common;

use common::{ok_job_with, SideFiles, RANK_MODE};

/// Elements of each rank's window in the model test.
const LEN: usize = 12;
/// Programs (seeds) each model job runs.
const SEEDS: u64 = 6;
/// Phases (epochs) a program has.
const PHASES: usize = 8;

#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    let universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    match mode.as_str() {
        "model" => {
            let issued: usize = (0..SEEDS).map(|seed| model(&world, seed)).sum();
            // Each rank issues some of a program's operations; a model run that issued none
            // would prove nothing.
            assert!(
                issued > 0,
                "the programs gave rank {} nothing to do",
                world.rank()
            );
            // Whether `allocate` mapped the memory for the shared-memory path.
            let mapped = Window::<u8>::allocate(&world, 1).shared_query(0).is_ok();
            println!(
                "model ok: rank {} checked {issued} operations (mapped: {mapped})",
                world.rank()
            );
        }
        "typed" => {
            let issued: usize = (0..SEEDS).map(|seed| typed_model(&world, seed)).sum();
            typed_requests(&world);
            typed_requests_in_flight(&world);
            assert!(
                issued > 0,
                "rank {} issued no typed operation",
                world.rank()
            );
            println!(
                "typed ok: rank {} checked {issued} operations",
                world.rank()
            );
        }
        "atomics" => {
            counter(&world);
            exclusive(&world);
            unwound(&world);
            unwound_inside_another_epoch(&world);
            compare_and_swap_once(&world);
            atomics_beside_long_accumulates::<u64>(&world, 5000);
            atomics_beside_long_accumulates::<f64>(&world, 5000);
            no_ops_beside_locked_sums(&world);
            no_ops_write_nothing(&world, &universe);
            long_locked_sums(&world);
            println!("atomics ok ({})", lock_free_agreed(&world));
        }
        // The atomics that prove a PML's one-sided path in a few seconds: every rank's
        // concurrent fetch_and_op on one counter, a compare_and_swap race, a short run of
        // locked float sums contending with fetch_and_ops on their elements, and no-ops that
        // write nothing.
        "counter" => {
            counter(&world);
            compare_and_swap_once(&world);
            atomics_beside_long_accumulates::<f64>(&world, 100);
            no_ops_write_nothing(&world, &universe);
            println!("counter ok");
        }
        "kinds" => {
            created(&world);
            dynamic(&world, &universe);
            shared(&world);
            progress_in_a_receive(&world);
            large(&world);
            request_after_flush(&world);
            println!("kinds ok");
        }
        "barrier" => {
            served_in_a_barrier(&world);
            println!("barrier ok");
        }
        "late" => {
            woken_in_a_barrier(&world);
            println!("late ok");
        }
        "flushes" => {
            flushes_ride_on_their_operations(&world, &universe);
            println!("flushes ok");
        }
        "pscw-notices" => {
            pscw_on_shared_memory_sends_nothing(&world, &universe);
            println!("pscw-notices ok");
        }
        "freed" => {
            unwound_unlocks_stay_with_their_window(&world);
            println!("freed ok");
        }
        "rma-flushes" => {
            rma_flushes_need_no_sleep(&world, &universe);
            println!("rma-flushes ok");
        }
        "unwound-fault" => {
            unwound_fault_reaches_the_free(&world);
            println!("unwound-fault ok");
        }
        "errors" => errors(&world),
        "beyond" => {
            beyond_locked_memory(&world);
            println!("beyond ok");
        }
        other => panic!("unknown mode {other}"),
    }
    if let Some(c) = universe.one_sided_counters() {
        println!(
            "rank {} rdma: {} writes, {} reads, {} atomics",
            world.rank(),
            c.puts,
            c.gets,
            c.atomics
        );
    }
    println!("rank {} done", world.rank());
}

/// A small seeded generator (xorshift64*): every rank draws the same program.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    Fence,
    Pscw,
    Lock,
    LockAll,
}

/// What one location of one target is, in one phase.
#[derive(Clone, Debug)]
enum Role {
    Untouched,
    /// One origin writes this value.
    Put(usize, i64),
    /// These origins add these values (sum), or take the max.
    Accumulate(Vec<(usize, i64)>, bool),
    /// These origins read it.
    Get(Vec<usize>),
    /// One origin replaces it by this value and fetches the old one.
    GetReplace(usize, i64),
    /// One origin swaps in this value if the location equals `compare`.
    Swap(usize, i64, i64),
    /// These origins each fetch-and-add 1.
    Count(Vec<usize>),
    /// One origin reads it atomically (fetch_and_op with no-op).
    AtomicRead(usize),
}

/// One operation an origin issues: target, first element, and what.
#[derive(Clone, Debug)]
enum Op {
    Put(Vec<i64>),
    Get(usize),
    Accumulate(Vec<i64>, bool),
    GetReplace(i64),
    Swap(i64, i64),
    Count,
    AtomicRead,
}

struct Phase {
    sync: Sync,
    /// Per target, per location.
    roles: Vec<Vec<Role>>,
    /// Per target (PSCW): the origins that access it.
    groups: Vec<Vec<usize>>,
    /// Lock phases: whether each origin locks exclusively.
    exclusive: Vec<bool>,
    /// Whether an origin takes the request-based form of its gets.
    requests: bool,
}

fn draw_phase(draw: &mut Draw, size: usize) -> Phase {
    let sync = [Sync::Fence, Sync::Pscw, Sync::Lock, Sync::LockAll][draw.below(4)];
    let groups: Vec<Vec<usize>> = (0..size)
        .map(|_| (0..size).filter(|_| draw.chance(60)).collect())
        .collect();
    let value = |draw: &mut Draw| draw.below(1000) as i64 - 500;
    let roles = (0..size)
        .map(|target| {
            let origins: Vec<usize> = match sync {
                Sync::Pscw => groups[target].clone(),
                _ => (0..size).collect(),
            };
            (0..LEN)
                .map(|_| {
                    if origins.is_empty() {
                        return Role::Untouched;
                    }
                    let some = |draw: &mut Draw| -> Vec<usize> {
                        let chosen: Vec<usize> = origins
                            .iter()
                            .copied()
                            .filter(|_| draw.chance(50))
                            .collect();
                        if chosen.is_empty() {
                            vec![origins[draw.below(origins.len())]]
                        } else {
                            chosen
                        }
                    };
                    let one = origins[draw.below(origins.len())];
                    match draw.below(9) {
                        0 => Role::Untouched,
                        1 | 2 => Role::Put(one, value(draw)),
                        3 => {
                            let max = draw.chance(30);
                            let adds = some(draw).into_iter().map(|o| (o, value(draw))).collect();
                            Role::Accumulate(adds, max)
                        }
                        4 => Role::Get(some(draw)),
                        5 => Role::GetReplace(one, value(draw)),
                        6 => {
                            let v = value(draw);
                            Role::Swap(one, v, value(draw))
                        }
                        7 => Role::Count(some(draw)),
                        _ => Role::AtomicRead(one),
                    }
                })
                .collect()
        })
        .collect();
    Phase {
        sync,
        roles,
        groups,
        exclusive: (0..size).map(|_| draw.chance(50)).collect(),
        requests: draw.chance(50),
    }
}

/// The operations `origin` issues in `phase`, per target: consecutive locations it puts,
/// gets or accumulates (with one operation) become one operation of several elements.
fn ops_of(phase: &Phase, origin: usize, state: &[Vec<i64>]) -> Vec<(usize, Vec<(usize, Op)>)> {
    let mut all = Vec::new();
    for (target, roles) in phase.roles.iter().enumerate() {
        let mut ops: Vec<(usize, Op)> = Vec::new();
        for (at, role) in roles.iter().enumerate() {
            let op = match role {
                Role::Put(o, v) if *o == origin => Op::Put(vec![*v]),
                Role::Accumulate(adds, max) => match adds.iter().find(|(o, _)| *o == origin) {
                    Some((_, v)) => Op::Accumulate(vec![*v], *max),
                    None => continue,
                },
                Role::Get(os) if os.contains(&origin) => Op::Get(1),
                Role::GetReplace(o, v) if *o == origin => Op::GetReplace(*v),
                Role::Swap(o, v, mismatch) if *o == origin => {
                    // Half the swaps compare with the value there (and swap), half not.
                    let compare = if v % 2 == 0 {
                        state[target][at]
                    } else {
                        *mismatch
                    };
                    Op::Swap(*v, compare)
                }
                Role::Count(os) if os.contains(&origin) => Op::Count,
                Role::AtomicRead(o) if *o == origin => Op::AtomicRead,
                _ => continue,
            };
            match (ops.last_mut(), op) {
                (Some((start, Op::Put(values))), Op::Put(more)) if *start + values.len() == at => {
                    values.extend(more)
                }
                (Some((start, Op::Get(n))), Op::Get(1)) if *start + *n == at => *n += 1,
                // A run of accumulates is one long accumulate (the shared-memory path takes
                // the lock for it), beside other origins' single-element ones (CPU atomics).
                (Some((start, Op::Accumulate(values, max))), Op::Accumulate(more, also_max))
                    if *start + values.len() == at && *max == also_max =>
                {
                    values.extend(more)
                }
                (_, op) => ops.push((at, op)),
            }
        }
        if !ops.is_empty() {
            all.push((target, ops));
        }
    }
    all
}

/// What the model says a location holds after `phase`, from what it held before.
fn model_after(role: &Role, before: i64) -> i64 {
    match role {
        Role::Untouched | Role::Get(_) | Role::AtomicRead(_) => before,
        Role::Put(_, v) | Role::GetReplace(_, v) => *v,
        Role::Accumulate(adds, false) => before + adds.iter().map(|(_, v)| v).sum::<i64>(),
        Role::Accumulate(adds, true) => adds.iter().map(|(_, v)| *v).fold(before, i64::max),
        Role::Swap(_, v, mismatch) => {
            let compare = if v % 2 == 0 { before } else { *mismatch };
            if compare == before {
                *v
            } else {
                before
            }
        }
        Role::Count(os) => before + os.len() as i64,
    }
}

/// Results an origin fetched: per operation, the values.
type Fetched = Vec<Vec<i64>>;

/// Issues `ops` on one target inside `epoch`.
fn issue<'s>(
    epoch: &'s mpirt::window::Epoch<'s, '_, i64>,
    target: usize,
    ops: &'s [(usize, Op)],
    results: &'s mut [Vec<i64>],
    requests: bool,
) {
    let one = 1i64;
    let target = target as Rank;
    let mut pending = Vec::new();
    for ((at, op), result) in ops.iter().zip(results.iter_mut()) {
        let at = *at;
        match op {
            Op::Put(values) => epoch.put(values, target, at),
            Op::Get(_) if requests => pending.push(epoch.rget(result, target, at)),
            Op::Get(_) => epoch.get(result, target, at),
            Op::Accumulate(values, max) => {
                let op = if *max {
                    SystemOperation::max()
                } else {
                    SystemOperation::sum()
                };
                epoch.accumulate(values, target, at, op)
            }
            Op::GetReplace(v) => epoch.get_accumulate(
                std::slice::from_ref(v),
                result,
                target,
                at,
                AccumulateOperation::Replace,
            ),
            Op::Swap(v, compare) => epoch.compare_and_swap(v, compare, &mut result[0], target, at),
            Op::Count => epoch.fetch_and_op(
                ref_of(&one),
                &mut result[0],
                target,
                at,
                SystemOperation::sum(),
            ),
            Op::AtomicRead => epoch.fetch_and_op(
                ref_of(&0),
                &mut result[0],
                target,
                at,
                AccumulateOperation::NoOp,
            ),
        }
    }
    for request in pending {
        request.wait();
    }
}

/// A value that lives for the whole program, for operands borrowed by an epoch.
fn ref_of(v: &i64) -> &'static i64 {
    Box::leak(Box::new(*v))
}

fn result_len(op: &Op) -> usize {
    match op {
        Op::Get(n) => *n,
        Op::Put(_) | Op::Accumulate(..) => 0,
        _ => 1,
    }
}

/// Runs program `seed`; returns how many operations this rank issued.
fn model(world: &SimpleCommunicator, seed: u64) -> usize {
    let size = world.size() as usize;
    let me = world.rank() as usize;
    let mut draw = Draw(0x9E37_79B9_7F4A_7C15 ^ ((seed + 1) * 0x1000_0001));
    let window = Window::<i64>::allocate(world, LEN);
    let mut state = vec![vec![0i64; LEN]; size];
    let mut issued = 0;
    for phase_number in 0..PHASES {
        let phase = draw_phase(&mut draw, size);
        let mine = ops_of(&phase, me, &state);
        let mut results: Vec<Fetched> = mine
            .iter()
            .map(|(_, ops)| {
                ops.iter()
                    .map(|(_, op)| vec![0i64; result_len(op)])
                    .collect()
            })
            .collect();
        let requests = phase.requests;
        issued += mine.iter().map(|(_, ops)| ops.len()).sum::<usize>();
        match phase.sync {
            Sync::Fence => window.fence_epoch(|epoch| {
                for ((target, ops), results) in mine.iter().zip(results.iter_mut()) {
                    issue(epoch, *target, ops, results, requests);
                }
            }),
            Sync::Pscw => {
                let origins: Vec<Rank> = phase.groups[me].iter().map(|&o| o as Rank).collect();
                let targets: Vec<Rank> = (0..size)
                    .filter(|t| phase.groups[*t].contains(&me))
                    .map(|t| t as Rank)
                    .collect();
                window.post(&origins, || {
                    window.start(&targets, |epoch| {
                        for ((target, ops), results) in mine.iter().zip(results.iter_mut()) {
                            issue(epoch, *target, ops, results, requests);
                        }
                    })
                })
            }
            Sync::Lock => {
                let kind = if phase.exclusive[me] {
                    LockKind::Exclusive
                } else {
                    LockKind::Shared
                };
                for ((target, ops), results) in mine.iter().zip(results.iter_mut()) {
                    window.lock(*target as Rank, kind, |epoch| {
                        issue(epoch, *target, ops, results, requests);
                        if requests {
                            epoch.flush(*target as Rank).unwrap();
                        }
                    });
                }
                world.barrier();
            }
            Sync::LockAll => {
                window.lock_all(|epoch| {
                    for ((target, ops), results) in mine.iter().zip(results.iter_mut()) {
                        issue(epoch, *target, ops, results, requests);
                    }
                    if requests {
                        epoch.flush_all().unwrap();
                    }
                });
                world.barrier();
            }
        }
        let context = format!("seed {seed} phase {phase_number} ({:?})", phase.sync);
        // The fetched values.
        for ((target, ops), results) in mine.iter().zip(&results) {
            for ((at, op), got) in ops.iter().zip(results) {
                let before = &state[*target][*at..];
                let role = &phase.roles[*target][*at];
                match op {
                    Op::Get(n) => assert_eq!(got[..], before[..*n], "{context}: get"),
                    Op::GetReplace(_) | Op::Swap(..) | Op::AtomicRead => {
                        assert_eq!(got[0], before[0], "{context}: fetch of {role:?}")
                    }
                    Op::Count => {
                        let Role::Count(os) = role else {
                            unreachable!()
                        };
                        assert!(
                            (before[0]..before[0] + os.len() as i64).contains(&got[0]),
                            "{context}: fetch_and_op got {} from {}",
                            got[0],
                            before[0]
                        );
                    }
                    Op::Put(_) | Op::Accumulate(..) => {}
                }
            }
        }
        for (target, roles) in phase.roles.iter().enumerate() {
            for (at, role) in roles.iter().enumerate() {
                state[target][at] = model_after(role, state[target][at]);
            }
        }
        window.with_local(|local| assert_eq!(local, &state[me][..], "{context}: window"));
        world.barrier();
    }
    issued
}

/// Every rank adds 1 to rank 0's counter many times; the values fetched are each returned
/// once.
fn counter(world: &SimpleCommunicator) {
    const EACH: usize = 50;
    let window = Window::<u64>::allocate(world, 1);
    let mut fetched = vec![0u64; EACH];
    for slot in fetched.iter_mut() {
        window.lock_all(|epoch| epoch.fetch_and_op(&1, slot, 0, 0, SystemOperation::sum()));
    }
    let mut all = vec![0u64; EACH * world.size() as usize];
    world.all_gather_into(&fetched[..], &mut all[..]);
    all.sort_unstable();
    let expected: Vec<u64> = (0..all.len() as u64).collect();
    assert_eq!(all, expected, "fetch_and_op lost or repeated a value");
    window.fence_epoch(|_| {});
    if world.rank() == 0 {
        window.with_local(|c| assert_eq!(c[0], all.len() as u64));
    }
}

/// A read-modify-write of get then put under an exclusive lock is never interleaved.
/// A lock epoch whose closure panics (caught) still releases its lock, and its gets'
/// buffers: every rank locks the target exclusively afterwards, and nothing writes into
/// the buffer given back.
fn unwound(world: &SimpleCommunicator) {
    let window = Window::<u64>::allocate(world, 1);
    window.with_local(|local| local[0] = 7);
    world.barrier();
    let mut got = [0u64];
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        window.lock(0, LockKind::Exclusive, |epoch| {
            epoch.get(&mut got, 0, 0);
            panic!("a lock epoch unwinds");
        })
    }));
    assert!(caught.is_err());
    got[0] = 1;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        window.lock_all(|_| panic!("a lock_all epoch unwinds"))
    }));
    assert!(caught.is_err());
    for _ in 0..3 {
        window.lock(0, LockKind::Exclusive, |epoch| {
            epoch.accumulate(&[1], 0, 0, SystemOperation::sum())
        });
    }
    world.barrier();
    assert_eq!(got, [1], "a reply wrote into a buffer its epoch gave back");
    if world.rank() == 0 {
        window.with_local(|c| assert_eq!(c[0], 7 + 3 * world.size() as u64));
    }
    world.barrier();
}

/// Windows freed and made again in turn.
const FREED_ROUNDS: usize = 50;

/// An unwound lock epoch's unlock, which asks for no answer, is applied by its target before
/// the window is freed: a window made next takes the lowest free context, the freed one's,
/// and would otherwise take that unlock as one of its own (a lock its target never granted:
/// refused, reported at the rank's next unlock, or worse, another epoch's lock released).
/// Each round every rank locks every rank, itself too (whose unlock goes through its
/// loopback, delivered only by a round of progress), in an epoch that unwinds; the window is
/// freed at once, and a new one's lock epochs on every rank end cleanly.
fn unwound_unlocks_stay_with_their_window(world: &SimpleCommunicator) {
    let mut refused = Vec::new();
    for round in 0..FREED_ROUNDS {
        let window = Window::<u64>::allocate(world, 1);
        for target in 0..world.size() {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                window.lock(target, LockKind::Exclusive, |_| {
                    panic!("a lock epoch unwinds before its window is freed")
                })
            }));
            assert!(caught.is_err());
        }
        drop(window);
        let window = Window::<u64>::allocate(world, 1);
        for target in 0..world.size() {
            let one = [1u64];
            if let Err(e) = window.try_lock(target, LockKind::Exclusive, |epoch| {
                epoch.accumulate(&one, target, 0, SystemOperation::sum())
            }) {
                refused.push(format!("round {round}: {e}"));
            }
        }
        world.barrier();
        if refused.is_empty() {
            window.with_local(|c| assert_eq!(c[0], world.size() as u64, "round {round}"));
        }
    }
    assert!(
        refused.is_empty(),
        "rank {}: {} of {} lock epochs on windows made after one whose epochs unwound \
         failed: {refused:?}",
        world.rank(),
        refused.len(),
        FREED_ROUNDS * world.size() as usize
    );
}

/// Rounds of a put and its flush in `rma_flushes_need_no_sleep`.
const RMA_ROUNDS: u64 = 40;

/// Rank 0's puts and flushes on rank 1's window by the provider's RMA (or verbs' RDMA
/// WRITEs), while rank 1 waits in a barrier. Over a provider that applies RMA in the target's
/// progress (tcp;ofi_rxm, shm), rank 1 never sleeps on its completion queue's wait fd
/// meanwhile, which a peer's write does not wake (`Counters::ofi_fd_sleeps`: each write
/// waited for such a sleep to run out, 1-2 ms); and rank 0's PML counts each write's
/// completion as delivered (`frames_received`), so that its flush's wait sees it at once
/// instead of after its spin budget.
fn rma_flushes_need_no_sleep(world: &SimpleCommunicator, universe: &Universe) {
    let counted = || universe.counters().unwrap_or_default();
    let window = Window::<u64>::allocate(world, 1);
    world.barrier();
    let before = counted();
    let values: Vec<u64> = (1..=RMA_ROUNDS).collect();
    if world.rank() == 0 {
        window.lock(1, LockKind::Exclusive, |epoch| {
            for value in values.chunks(1) {
                epoch.put(value, 1, 0);
                epoch.flush(1).unwrap();
            }
        });
    }
    world.barrier();
    let after = counted();
    println!(
        "rank {}: {} fd sleeps, {} deliveries, {} writes by the device",
        world.rank(),
        after.ofi_fd_sleeps - before.ofi_fd_sleeps,
        after.frames_received - before.frames_received,
        after.rma_writes - before.rma_writes
    );
    match world.rank() {
        0 => {
            let writes = after.rma_writes - before.rma_writes;
            assert!(
                writes >= RMA_ROUNDS,
                "rank 0's {RMA_ROUNDS} puts made {writes} writes by the device"
            );
            let delivered = after.frames_received - before.frames_received;
            assert!(
                delivered >= RMA_ROUNDS,
                "rank 0's PML delivered {delivered} frames and completions in {RMA_ROUNDS} rounds \
                 of an fi_write and its flush: the writes' completions were not counted"
            );
        }
        _ => {
            let slept = after.ofi_fd_sleeps - before.ofi_fd_sleeps;
            assert_eq!(
                slept,
                0,
                "rank {} slept {slept} times on its completion queue's fd, which rank 0's \
                 fi_writes to its window do not wake",
                world.rank()
            );
        }
    }
    if world.rank() == 1 {
        window.with_local(|local| assert_eq!(local, [RMA_ROUNDS], "rank 1's window"));
    }
    world.barrier();
}

/// The target's refusal of a put whose lock epoch unwound (its end, which reports refusals,
/// never ran) reaches the window's free: rank 0 puts into memory rank 1 detached (the put is
/// held back for the epoch's end, sent as the unwinding releases the lock, and refused
/// later), and its `try_free` names the put, the target and the cause, after the other
/// ranks' frees paired with its own. Their frees, which carry no fault, succeed.
fn unwound_fault_reaches_the_free(world: &SimpleCommunicator) {
    let mut block = vec![0u64; 2];
    let window = Window::<u64>::create_dynamic(world);
    let mine = window.attach(&mut block[..]) as u64;
    let mut addresses = vec![0u64; world.size() as usize];
    world.all_gather_into(&mine, &mut addresses[..]);
    window.detach(mine as usize).unwrap();
    world.barrier();
    if world.rank() == 0 {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            window.lock(1, LockKind::Exclusive, |epoch| {
                epoch.put(&[5], 1, addresses[1] as usize);
                panic!("a lock epoch unwinds after a put its target will refuse")
            })
        }));
        assert!(caught.is_err());
    }
    let freed = window.try_free();
    if world.rank() == 0 {
        let text = freed
            .expect_err("the refusal of an unwound epoch's put was dropped with the window")
            .to_string();
        let wanted = format!(
            "rank 0: free a window: rank 1 refused: a put: no attached memory holds the 8 \
             byte(s) at address {:#x}",
            addresses[1]
        );
        assert!(text.contains(&wanted), "{text}\nwanted {wanted}");
        println!("rank 0's free: {text}");
    } else {
        freed.unwrap();
    }
    assert_eq!(block, [0, 0], "a refused put wrote");
}

/// A lock epoch that unwinds inside another (rank 0 locks itself inside its lock of rank 1)
/// gives back its own buffers only: the outer epoch's get, whose reply comes after the inner
/// one unwound (rank 1 is asleep outside mpirt meanwhile), still lands.
fn unwound_inside_another_epoch(world: &SimpleCommunicator) {
    let window = Window::<u64>::allocate(world, 1);
    window.with_local(|local| local[0] = 100 + world.rank() as u64);
    world.barrier();
    match world.rank() {
        0 => {
            let mut got = [0u64];
            window.lock(1, LockKind::Shared, |outer| {
                let rank_1 = world.process_at_rank(1);
                rank_1.send(&1u8);
                let (_, _): (u8, _) = rank_1.receive();
                let get = outer.rget(&mut got, 1, 0);
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    window.lock(0, LockKind::Exclusive, |_| {
                        panic!("a lock epoch unwinds inside another")
                    })
                }));
                assert!(caught.is_err());
                assert_eq!(
                    get.wait().as_deref(),
                    Some(&[101u64][..]),
                    "the outer epoch's get was given up with the inner epoch"
                );
            });
            assert_eq!(got, [101]);
        }
        1 => {
            let rank_0 = world.process_at_rank(0);
            let (_, _): (u8, _) = rank_0.receive();
            rank_0.send(&1u8);
            // Serves nothing until the barrier: the get's reply comes after the inner epoch
            // unwound.
            std::thread::sleep(std::time::Duration::from_millis(1000));
        }
        _ => {}
    }
    world.barrier();
}

fn exclusive(world: &SimpleCommunicator) {
    const EACH: u64 = 100;
    let window = Window::<u64>::allocate(world, 1);
    for _ in 0..EACH {
        let (mut value, mut next) = ([0u64], [0u64]);
        window.lock(0, LockKind::Exclusive, |epoch| {
            let value = epoch.rget(&mut value, 0, 0).wait().unwrap();
            // Give the other ranks the core between the read and the write: without the
            // lock's exclusion, their increments would interleave and be lost.
            std::thread::yield_now();
            next[0] = value[0] + 1;
            epoch.put(&next, 0, 0);
        });
    }
    world.barrier();
    if world.rank() == 0 {
        window.with_local(|c| {
            assert_eq!(
                c[0],
                EACH * world.size() as u64,
                "an exclusive lock let another in"
            )
        });
    }
}

/// Of ranks racing to swap 0 for their rank + 1, exactly one wins.
fn compare_and_swap_once(world: &SimpleCommunicator) {
    let window = Window::<i32>::allocate(world, 1);
    let mine = world.rank() + 1;
    let mut old = -1;
    window.lock(0, LockKind::Shared, |epoch| {
        epoch.compare_and_swap(&mine, &0, &mut old, 0, 0)
    });
    let won = i32::from(old == 0);
    let mut winners = 0;
    world.all_reduce_into(&won, &mut winners, SystemOperation::sum());
    assert_eq!(winners, 1, "compare_and_swap let {winners} ranks win");
}

/// A number the mixed-atomics test counts in.
trait Count: mpirt::datatype::Equivalence + Copy + Default + PartialEq + std::fmt::Debug {
    fn of(n: u64) -> Self;
}

impl Count for u64 {
    fn of(n: u64) -> Self {
        n
    }
}

impl Count for f64 {
    fn of(n: u64) -> Self {
        n as f64
    }
}

/// Every rank interleaves single-element atomics on the same elements (fetch_and_op and
/// accumulate of one element; the shared-memory path applies them with CPU atomics, without
/// the accumulate lock: an integer add, a float's compare-and-swap loop) with short long
/// accumulates over them (three elements, which hold the lock and add in plain loads and
/// stores), back to back in one lock_all epoch so that they meet often: no increment is lost,
/// whichever way each went and however they met. `rounds` per rank.
fn atomics_beside_long_accumulates<T: Count>(world: &SimpleCommunicator, rounds: u64) {
    const LONG: usize = 3;
    let window = Window::<T>::allocate(world, LONG);
    let ones = vec![T::of(1); LONG];
    let one = T::of(1);
    let size = world.size() as u64;
    let kind = |rank: u64, round: u64| (rank + round) % 3;
    let mut fetched = vec![T::default(); 2 * rounds as usize];
    let mut slots = fetched.iter_mut();
    world.barrier();
    window.lock_all(|e| {
        for round in 0..rounds {
            match kind(world.rank() as u64, round) {
                0 => e.accumulate(&ones, 0, 0, SystemOperation::sum()),
                1 => {
                    let (first, last) = (slots.next().unwrap(), slots.next().unwrap());
                    e.fetch_and_op(&one, first, 0, 0, SystemOperation::sum());
                    e.fetch_and_op(&one, last, 0, LONG - 1, SystemOperation::sum());
                }
                _ => e.accumulate(&ones[..1], 0, 0, SystemOperation::sum()),
            }
        }
    });
    window.fence_epoch(|_| {});
    let count = |of: u64| {
        (0..size)
            .flat_map(|rank| (0..rounds).map(move |round| kind(rank, round)))
            .filter(|&k| k == of)
            .count() as u64
    };
    if world.rank() == 0 {
        window.with_local(|local| {
            assert_eq!(
                (local[0], local[1], local[LONG - 1]),
                (
                    T::of(size * rounds),
                    T::of(count(0)),
                    T::of(count(0) + count(1))
                ),
                "an increment was lost between atomics and long accumulates"
            )
        });
    }
    world.barrier();
}

/// Every rank interleaves f64 sums over a short range (which windows over verbs apply under
/// the target's accumulate lock, by RDMA READ and WRITE, and contend for) with no-op
/// `fetch_and_op`s and `get_accumulate`s of it, back to back in one lock_all epoch: a no-op
/// read by a device fetch-and-add of 0 (beside a lock's take that failed, or as the no-op
/// itself) writes its element back and can undo a holder's write that met it. No increment is
/// lost, and each rank's no-ops see every element whole, never less than its own sums so far
/// nor more than all of them.
fn no_ops_beside_locked_sums(world: &SimpleCommunicator) {
    const ROUNDS: u64 = 2000;
    const LONG: usize = 4;
    let window = Window::<f64>::allocate(world, LONG);
    let ones = [1.0; LONG];
    let zeros = [0.0; LONG];
    let size = world.size() as u64;
    let no_op = |round: u64| round % 4 == 3;
    let sums = (0..ROUNDS).filter(|&r| !no_op(r)).count();
    let total = (size as usize * sums) as f64;
    // What each no-op fetched (read after the epoch, which completes them), and how many of
    // its own sums this rank had made by then.
    let mut seen = vec![0.0; LONG * (ROUNDS as usize - sums)];
    let mut floors = Vec::new();
    let mut slots = seen.chunks_exact_mut(LONG);
    world.barrier();
    window.lock_all(|e| {
        for round in 0..ROUNDS {
            if !no_op(round) {
                e.accumulate(&ones, 0, 0, SystemOperation::sum());
                continue;
            }
            floors.push((round - round / 4) as f64);
            let slot = slots.next().unwrap();
            if round % 8 == 3 {
                e.get_accumulate(&zeros, slot, 0, 0, AccumulateOperation::NoOp);
            } else {
                for (at, element) in slot.iter_mut().enumerate() {
                    e.fetch_and_op(&zeros[at], element, 0, at, AccumulateOperation::NoOp);
                }
            }
        }
    });
    window.fence_epoch(|_| {});
    for (fetched, &floor) in seen.chunks_exact(LONG).zip(&floors) {
        for &value in fetched {
            assert!(
                value >= floor && value <= total && value.fract() == 0.0,
                "rank {}: a no-op fetched {value} after {floor} of its own sums, of {total}",
                world.rank()
            );
        }
    }
    if world.rank() == 0 {
        window.with_local(|local| {
            assert_eq!(
                local,
                &[total; LONG][..],
                "an f64 sum was lost beside no-op fetches"
            )
        });
    }
    world.barrier();
}

/// No-op `fetch_and_op`s and `get_accumulate`s post no device atomic (whose fetch-and-add
/// of 0 would write each element back and could undo a locked accumulate's write that met
/// it): on windows over verbs each is one RDMA READ, counted; elsewhere messages, counting
/// neither.
fn no_ops_write_nothing(world: &SimpleCommunicator, universe: &mpirt::environment::Universe) {
    const FETCHES: u64 = 10;
    let window = Window::<f64>::allocate(world, 4);
    let mut fetched = [0.0; FETCHES as usize];
    let mut range = [0.0; 4];
    let counted = || universe.one_sided_counters().unwrap_or_default();
    world.barrier();
    let (before, after) = window.lock_all(|e| {
        let before = counted();
        for one in fetched.iter_mut() {
            e.fetch_and_op(&0.0, one, 0, 1, AccumulateOperation::NoOp);
        }
        e.get_accumulate(&[0.0; 4], &mut range, 0, 0, AccumulateOperation::NoOp);
        (before, counted())
    });
    let (reads, atomics) = (after.gets - before.gets, after.atomics - before.atomics);
    assert!(
        atomics == 0 && (reads == 0 || reads > FETCHES),
        "rank {}: {} no-op fetches posted {atomics} device atomics and {reads} RDMA READs",
        world.rank(),
        FETCHES + 1
    );
    // A locked f64 sum of 32 bytes where nobody contends: its take and release are the
    // only atomics, its range one RDMA READ (not fetch-and-adds of 0 beside the take).
    world.barrier();
    let (before, after) = window.lock_all(|e| {
        let before = counted();
        if world.rank() == 0 {
            e.accumulate(&[1.0; 4], 0, 0, SystemOperation::sum());
        }
        (before, counted())
    });
    let locked = (after.gets - before.gets, after.atomics - before.atomics);
    assert!(
        [(0, 0), (1, 2)].contains(&locked),
        "rank {}: a locked sum posted {} RDMA READs and {} device atomics",
        world.rank(),
        locked.0,
        locked.1
    );
    world.barrier();
}

/// Every rank sums ones into all of rank 0's 640 KiB of f64s twice, by accumulate and by
/// get_accumulate: windows over verbs move a locked accumulate in turns of 256 KiB (three
/// here), each under its own take of the lock. Every element gets every sum, and each
/// fetched element is one whole count from before this rank's second sum.
fn long_locked_sums(world: &SimpleCommunicator) {
    const LEN: usize = (640 << 10) / 8;
    let window = Window::<f64>::allocate(world, LEN);
    let ones = vec![1.0; LEN];
    let mut fetched = vec![-1.0; LEN];
    let size = world.size() as f64;
    world.barrier();
    window.lock_all(|e| {
        e.accumulate(&ones, 0, 0, SystemOperation::sum());
        e.get_accumulate(&ones, &mut fetched, 0, 0, SystemOperation::sum());
    });
    window.fence_epoch(|_| {});
    let bad = fetched
        .iter()
        .position(|&f| !(1.0..2.0 * size).contains(&f) || f.fract() != 0.0);
    assert_eq!(
        bad.map(|at| (at, fetched[at])),
        None,
        "rank {}: get_accumulate fetched an element outside 1..{}",
        world.rank(),
        2.0 * size
    );
    if world.rank() == 0 {
        window.with_local(|local| {
            let short = local.iter().position(|&v| v != 2.0 * size);
            assert_eq!(
                short.map(|at| (at, local[at])),
                None,
                "a long locked f64 sum lost a turn"
            )
        });
    }
    world.barrier();
}

/// Whether every rank may apply short accumulates without the lock on the shared-memory
/// path: every rank registered for membarrier's global barrier (which mpirt did already, and
/// which registering again leaves as it is). Said in the job's output, since the atomics
/// test proves the lock-free path only where it was taken.
fn lock_free_agreed(world: &SimpleCommunicator) -> &'static str {
    const REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;
    // SAFETY: membarrier takes integers and touches no memory of ours.
    let registered =
        unsafe { libc::syscall(libc::SYS_membarrier, REGISTER_GLOBAL_EXPEDITED, 0, 0) } == 0;
    let mine = [i32::from(registered)];
    let (mut fewest, mut most) = ([0i32], [0i32]);
    world.all_reduce_into(&mine[..], &mut fewest[..], SystemOperation::min());
    world.all_reduce_into(&mine[..], &mut most[..], SystemOperation::max());
    match (fewest[0], most[0]) {
        (1, 1) => "every rank lock-free",
        (0, 0) => "every rank takes the lock",
        _ => "ranks disagree: every rank takes the lock",
    }
}

/// Bytes of rank 1's window in `beyond_locked_memory`: more than `windows_beyond_locked_memory`
/// lets a rank lock.
const BEYOND: usize = 64 << 20;

/// Puts, gets and accumulates on a window whose rank 1 could not register its memory for
/// RDMA (past the locked-memory limit): they reach it by messages.
fn beyond_locked_memory(world: &SimpleCommunicator) {
    let size = world.size() as usize;
    let me = world.rank();
    let lens = |rank: Rank| if rank == 1 { BEYOND / 8 } else { size + 1 };
    let window = Window::<u64>::allocate(world, lens(me));
    let mine = [100 + me as u64];
    window.fence_epoch(|epoch| {
        for t in 0..size as Rank {
            epoch.put(&mine, t, me as usize);
            epoch.accumulate(&[1], t, lens(t) - 1, SystemOperation::sum());
        }
    });
    let mut got = [0u64; 2];
    window.lock(1, LockKind::Shared, |epoch| {
        epoch.get(&mut got, 1, lens(1) - 2);
    });
    assert_eq!(got, [0, size as u64], "rank 1's window's last elements");
    window.with_local(|local| {
        for (r, v) in local.iter().enumerate().take(size) {
            assert_eq!(*v, 100 + r as u64, "rank {me}'s element {r}");
        }
        assert_eq!(
            local[local.len() - 1],
            size as u64,
            "rank {me}'s last element"
        );
    });
    world.barrier();
}

/// A window over a borrowed buffer, which holds the puts and the accumulates (of 4-byte
/// elements: never device atomics, which windows_over_verbs checks) when the window is gone.
fn created(world: &SimpleCommunicator) {
    let size = world.size() as usize;
    let me = world.rank();
    let mut memory = vec![0i32; size + 1];
    {
        let window = Window::create(world, &mut memory[..]);
        let mine = [me * 10];
        window.fence_epoch(|epoch| {
            for t in 0..size as Rank {
                epoch.put(&mine, t, me as usize);
                epoch.accumulate(&[1], t, size, SystemOperation::sum());
            }
        });
        let mut before = 0;
        window.lock(0, LockKind::Exclusive, |epoch| {
            epoch.fetch_and_op(&1, &mut before, 0, size, SystemOperation::sum())
        });
        assert!(before >= size as i32, "fetch_and_op found {before}");
        world.barrier();
    }
    let mut expected: Vec<i32> = (0..size as i32).map(|r| r * 10).collect();
    expected.push(if me == 0 {
        2 * size as i32
    } else {
        size as i32
    });
    assert_eq!(memory, expected);
}

/// The text of a refusal inside a lock or fence epoch, wherever it came: from the operation
/// itself (on the RDMA path an origin learns a dynamic window's blocks from the target when it
/// reaches into one, and checks its bounds) or from the epoch's end (by messages the target
/// refuses, and the epoch's end reports it).
fn refusal(outcome: Result<Result<(), mpirt::Error>, mpirt::Error>) -> String {
    match outcome {
        Err(e) | Ok(Err(e)) => e.to_string(),
        Ok(Ok(())) => panic!("an access outside the attached memory was not refused"),
    }
}

/// Each rank's fetch_and_ops on the dynamic window's counter.
const DYNAMIC_ROUNDS: usize = 8;

/// A dynamic window: memory attached after creation, reached by its address. On the RDMA
/// path its puts, gets and (its elements being 8-byte numbers) accumulates are the
/// device's, once the origin learned the block it reaches into; the device's writes, reads
/// and atomics are said for the job's checks.
fn dynamic(world: &SimpleCommunicator, universe: &mpirt::environment::Universe) {
    let size = world.size() as usize;
    let me = world.rank();
    let mut block = vec![0u64; 4];
    let mut spare = vec![0u64; 2];
    let mut second = vec![0u64; 3];
    let mut late = vec![0u64; 2];
    let mut counts = vec![0u64; 2];
    let window = Window::<u64>::create_dynamic(world);
    let mine = [
        window.attach(&mut block[..]) as u64,
        window.attach(&mut spare[..]) as u64,
        window.attach(&mut second[..]) as u64,
    ];
    let mut addresses = vec![0u64; 3 * size];
    world.all_gather_into(&mine[..], &mut addresses[..]);
    let next = ((me + 1) % size as Rank) as usize;
    let [at, spare_at, second_at] = [0, 1, 2].map(|k| addresses[3 * next + k] as usize);
    // Detached before any rank reached into it.
    window.detach(mine[1] as usize).unwrap();
    world.barrier();
    let counted = || universe.one_sided_counters().unwrap_or_default();
    let before = counted();
    let mut got = [0u64; 4];
    let ours = [me as u64 + 1; 2];
    window.fence_epoch(|epoch| {
        epoch.put(&ours, next as Rank, at + 8);
        epoch.put(&ours[..1], next as Rank, second_at + 16);
    });
    window.fence_epoch(|epoch| epoch.get(&mut got, next as Rank, at));
    assert_eq!(got, [0, me as u64 + 1, me as u64 + 1, 0]);
    // Every rank's fetch_and_ops on one counter in rank 0's attached memory, each value
    // returned once, and max accumulates beside it.
    let counts_mine = window.attach(&mut counts[..]);
    let mut counts_at = counts_mine as u64;
    world.process_at_rank(0).broadcast_into(&mut counts_at);
    let mut fetched = [0u64; DYNAMIC_ROUNDS];
    let sum = SystemOperation::sum();
    let highest = [(me as u64 + 1) * 10];
    window.lock_all(|epoch| {
        for value in fetched.iter_mut() {
            epoch.fetch_and_op(&1, value, 0, counts_at as usize, sum);
        }
        epoch.accumulate(&highest, 0, counts_at as usize + 8, SystemOperation::max());
    });
    let mut all = vec![0u64; DYNAMIC_ROUNDS * size];
    world.all_gather_into(&fetched[..], &mut all[..]);
    all.sort_unstable();
    let each: Vec<u64> = (0..all.len() as u64).collect();
    assert_eq!(
        all, each,
        "the dynamic window's counter lost or repeated a value"
    );
    let after = counted();
    println!(
        "rank {me} dynamic window: {} writes and {} reads by the device, {} atomics",
        after.puts - before.puts,
        after.gets - before.gets,
        after.atomics - before.atomics
    );
    // An address past the attached block is refused, named (by the target, or by the origin
    // against the block it learned), and nothing is written.
    let refused = window.try_lock(next as Rank, LockKind::Shared, |epoch| {
        epoch.try_put(&[1; 4], next as Rank, at + 8)
    });
    let text = refusal(refused);
    assert!(
        text.contains("no attached memory holds the 32 byte(s)"),
        "{text}"
    );
    // So is a block the target detached before this rank reached into it.
    let refused = window.try_lock(next as Rank, LockKind::Shared, |epoch| {
        epoch.try_put(&[9], next as Rank, spare_at)
    });
    let text = refusal(refused);
    assert!(
        text.contains("no attached memory holds the 8 byte(s)"),
        "{text}"
    );
    // A fence reports its refusals (the target answers its end after applying them), and
    // takes its closing barrier all the same: the fence and the free after it pair with the
    // other ranks' and do not hang.
    // Rank 0 alone is refused: were its closing barrier skipped, the others' would pair
    // with its next one.
    let refused = window.try_fence_epoch(|epoch| match me {
        0 => epoch.try_put(&[1; 4], next as Rank, at + 8),
        _ => Ok(()),
    });
    if me == 0 {
        let text = refusal(refused);
        assert!(
            (text.contains("fence") || text.contains("put to rank")) && text.contains("attached"),
            "{text}"
        );
    } else {
        refused.unwrap().unwrap();
    }
    window.fence_epoch(|_| {});
    // A displacement that is not whole elements from its block's start is refused: it
    // would leave elements holding parts of two.
    let refused = window.try_lock(next as Rank, LockKind::Shared, |epoch| {
        epoch.try_put(&[1], next as Rank, at + 9)
    });
    let text = refusal(refused);
    assert!(text.contains("not whole elements"), "{text}");
    // A block attached after others were reached is learned when first reached into, and
    // the target answers while it waits in a barrier (its exposure epoch's body; a barrier
    // in the shared-memory area looks at messages between its sleeps): rank 0's put, which
    // asks rank 1 where the block lies, and its `complete` are answered there, or the job
    // hangs.
    let late_at = window.attach(&mut late[..]) as u64;
    let mut lates = vec![0u64; size];
    world.all_gather_into(&late_at, &mut lates[..]);
    match me {
        0 => {
            window.start(&[1], |epoch| epoch.put(&[7], 1, lates[1] as usize + 8));
            world.barrier();
        }
        1 => window.post(&[0], || world.barrier()),
        _ => world.barrier(),
    }
    // Every rank's lock epochs on this rank ended before it detaches.
    world.barrier();
    window.detach(mine[0] as usize).unwrap();
    window.detach(mine[2] as usize).unwrap();
    window.detach(late_at as usize).unwrap();
    window.detach(counts_mine).unwrap();
    drop(window);
    if me == 0 {
        let wanted = [(DYNAMIC_ROUNDS * size) as u64, 10 * size as u64];
        assert_eq!(counts, wanted, "rank 0's counter and maximum");
    }
    let previous = (me + size as Rank - 1) % size as Rank;
    assert_eq!(block, [0, previous as u64 + 1, previous as u64 + 1, 0]);
    assert_eq!(second, [0, 0, previous as u64 + 1]);
    assert_eq!(spare, [0, 0], "a put reached a detached block");
    let wanted = if me == 1 { [0, 7] } else { [0, 0] };
    assert_eq!(late, wanted, "rank {me}'s block attached late");
}

/// A shared window: each rank's part is loaded from directly by the others.
fn shared(world: &SimpleCommunicator) {
    if common::across_hosts("one host for allocate_shared") {
        return;
    }
    let size = world.size();
    let window = Window::<u32>::allocate_shared(world, 3);
    window.with_local(|local| local.fill(world.rank() as u32 + 7));
    window.fence_epoch(|_| {});
    for rank in 0..size {
        let (ptr, len) = window.shared_query(rank).unwrap();
        assert_eq!(len, 3);
        // SAFETY: the segment holds 3 elements, written before the fence and not after.
        let values = unsafe { std::slice::from_raw_parts(ptr, len) };
        assert_eq!(values, [rank as u32 + 7; 3]);
    }
    window.fence_epoch(|_| {});
}

/// A passive target inside a blocking receive serves lock, put and unlock: the origin sends
/// the message that receive waits for only after its unlock returned.
fn progress_in_a_receive(world: &SimpleCommunicator) {
    if world.size() < 2 {
        return;
    }
    let window = Window::<u64>::allocate(world, 1);
    match world.rank() {
        0 => {
            window.lock(1, LockKind::Exclusive, |epoch| epoch.put(&[42], 1, 0));
            world.process_at_rank(1).send(&1u8);
        }
        1 => {
            let (_, _): (u8, _) = world.process_at_rank(0).receive();
            window.with_local(|l| assert_eq!(l[0], 42));
        }
        _ => {}
    }
    world.barrier();
}

/// Rank 0's locked sums on rank 1, `SERVED_ROUNDS` epochs, while rank 1 waits in a barrier
/// (in the collective area of a communicator of its own, on one host, which `--verbose`
/// reports on when it goes): each is served by rank 1's progress there, and all are in its
/// window after.
fn served_in_a_barrier(world: &SimpleCommunicator) {
    let window = Window::<u64>::allocate(world, 1);
    let waiting = world.duplicate();
    waiting.barrier();
    if world.rank() == 0 {
        for _ in 0..SERVED_ROUNDS {
            window.lock(1, LockKind::Exclusive, |epoch| {
                epoch.accumulate(&[1], 1, 0, SystemOperation::sum())
            });
        }
    }
    waiting.barrier();
    drop(waiting);
    if world.rank() == 1 {
        window.with_local(|local| assert_eq!(local[0], SERVED_ROUNDS, "rank 1's sum"));
    }
    world.barrier();
}

/// The epochs `served_in_a_barrier` runs.
const SERVED_ROUNDS: u64 = 300;

/// PSCW on the shared-memory path sends no message: `post`'s and `complete`'s notices are
/// counts in the window's mapping (`window/direct.rs`). Every rank exposes its window to its
/// left neighbour and accesses its right one's, round after round, each put landing in a
/// slot of its own; each rank checks after its `wait` that every round's put is there (the
/// notices publish the stores); then every rank exposes to and accesses all the others
/// (overlapping groups: several senders' notices at once), each put in its origin's slot.
/// Each rank checks that its PML sent no frame in all the rounds (before, a post and a
/// complete were a message each).
fn pscw_on_shared_memory_sends_nothing(world: &SimpleCommunicator, universe: &Universe) {
    const ROUNDS: usize = 50;
    let (me, n) = (world.rank(), world.size());
    let window = Window::<u64>::allocate(world, ROUNDS);
    // Made before the frames are counted: creation's collectives are messages.
    let all = Window::<u64>::allocate(world, ROUNDS * n as usize);
    assert!(
        window.shared_query(0).is_ok() && all.shared_query(0).is_ok(),
        "rank {me}: allocate did not map the windows: the test needs the shared-memory path"
    );
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let frames = || universe.counters().map_or(0, |c| c.frames_sent);
    let before = frames();
    for round in 0..ROUNDS {
        let value = [(me as u64 + 1) * 1000 + round as u64];
        window.post(&[left], || {
            window.start(&[right], |epoch| epoch.put(&value, right, round));
        });
        window.with_local(|local| {
            assert_eq!(
                local[round],
                (left as u64 + 1) * 1000 + round as u64,
                "rank {me}: rank {left}'s put of round {round} after the wait"
            );
        });
    }
    // Overlapping groups: every rank exposes to and accesses every other, so each rank's
    // notices come from several senders at once, each put in a slot of its origin's.
    let others: Vec<i32> = (0..n).filter(|&r| r != me).collect();
    for round in 0..ROUNDS {
        let value = [(me as u64 + 1) * 1000 + round as u64];
        all.post(&others, || {
            all.start(&others, |epoch| {
                for &t in &others {
                    epoch.put(&value, t, round * n as usize + me as usize);
                }
            });
        });
        all.with_local(|local| {
            for &o in &others {
                assert_eq!(
                    local[round * n as usize + o as usize],
                    (o as u64 + 1) * 1000 + round as u64,
                    "rank {me}: rank {o}'s put of round {round} after the wait (groups of all)"
                );
            }
        });
    }
    let sent = frames() - before;
    assert_eq!(
        sent,
        0,
        "rank {me}: {} PSCW rounds on the shared-memory path sent {sent} frames",
        2 * ROUNDS
    );
    // A start waits for its own targets' posts, never another rank's: rank 2 posts to rank
    // 0 first, then tells rank 1 to write its value and post; rank 0's start on rank 1 alone
    // must read that value, whatever rank 2's notice said.
    if n >= 3 {
        const WRITTEN: u64 = 0x5eed;
        match me {
            0 => {
                let mut seen = [0u64];
                window.start(&[1], |epoch| epoch.get(&mut seen, 1, 0));
                assert_eq!(
                    seen[0], WRITTEN,
                    "rank 0: its start on rank 1 ran before rank 1's post (rank 2's post taken)"
                );
                window.start(&[2], |_| ());
            }
            1 => {
                world.process_at_rank(2).receive::<u8>();
                window.with_local(|local| local[0] = WRITTEN);
                window.post(&[0], || ());
            }
            2 => window.post(&[0], || world.process_at_rank(1).send(&1u8)),
            _ => {}
        }
    }
}

/// A flush after one short put, accumulate, get or fetch_and_op costs the origin one message
/// a round, counted in its transports' frames: the put or accumulate, held back until the
/// flush, carries the flush's ask, and a get's or fetch's answer says that the target
/// applied everything before it (each round was two messages before: the operation, then
/// the flush's own request). A put of 4 KiB is short too. The target serves them from a
/// barrier; its window holds every round's effect. The origin makes no round of progress in
/// a probe meanwhile (its PML's `probe_rounds`): it finds the answers among what its waits
/// received. Neither rank makes one as it receives a request or an answer found queued
/// (`matched_receive_rounds`): each is here whole, and a round polled the transports for
/// nothing between a request and its answer (a system call over TCP on each side).
fn flushes_ride_on_their_operations(world: &SimpleCommunicator, universe: &Universe) {
    const ROUNDS: u64 = 40;
    const PAGE: usize = 4096 / 8;
    let window = Window::<u64>::allocate(world, PAGE);
    let page: Vec<u64> = (0..PAGE as u64)
        .map(|k| if k < 4 { 0 } else { k })
        .collect();
    let matched_rounds = || universe.counters().map_or(0, |c| c.matched_receive_rounds);
    let waiting = world.duplicate();
    waiting.barrier();
    let matched_before = matched_rounds();
    if world.rank() == 0 {
        let frames = || universe.counters().map_or(0, |c| c.frames_sent);
        let probes = || universe.counters().map_or(0, |c| c.probe_rounds);
        let probed = probes();
        let mut got = [0u64; 1];
        let mut fetched = [0u64; ROUNDS as usize];
        let values: [u64; ROUNDS as usize] = std::array::from_fn(|k| k as u64 + 1);
        let sent = window.lock(1, LockKind::Shared, |epoch| {
            let mut sent = Vec::new();
            let before = frames();
            for _ in 0..ROUNDS {
                epoch.put(&page, 1, 0);
                epoch.flush(1).unwrap();
            }
            sent.push(("4 KiB put", frames() - before));
            let before = frames();
            for value in values.chunks(1) {
                epoch.put(value, 1, 0);
                epoch.flush(1).unwrap();
            }
            sent.push(("put", frames() - before));
            let before = frames();
            for _ in 0..ROUNDS {
                epoch.accumulate(&[1], 1, 1, SystemOperation::sum());
                epoch.flush(1).unwrap();
            }
            sent.push(("accumulate", frames() - before));
            let before = frames();
            let mut spare = &mut got[..];
            for _ in 0..ROUNDS {
                let request = epoch.rget(spare, 1, 0);
                epoch.flush(1).unwrap();
                spare = request.wait().unwrap();
                assert_eq!(spare, [ROUNDS], "rank 0's get of the last put");
            }
            sent.push(("get", frames() - before));
            let before = frames();
            let mut results = &mut fetched[..];
            for _ in 0..ROUNDS {
                let (result, rest) = results.split_first_mut().unwrap();
                epoch.fetch_and_op(&1, result, 1, 2, SystemOperation::sum());
                epoch.flush(1).unwrap();
                results = rest;
            }
            sent.push(("fetch_and_op", frames() - before));
            sent
        });
        // The window looks for its answers in what its waits received, never by a probe that
        // polls the transports for nothing (a system call over TCP; five every put and
        // flush before).
        let probed = probes() - probed;
        assert_eq!(
            probed,
            0,
            "rank 0: {} rounds of operations and flushes made {probed} rounds of progress \
             in probes",
            4 * ROUNDS
        );
        assert_eq!(
            fetched,
            std::array::from_fn(|k| k as u64),
            "rank 0's fetches"
        );
        for (what, messages) in sent {
            assert_eq!(
                messages, ROUNDS,
                "rank 0: {ROUNDS} rounds of a {what} and a flush sent {messages} messages"
            );
        }
    }
    waiting.barrier();
    let matched = matched_rounds() - matched_before;
    assert_eq!(
        matched,
        0,
        "rank {}: {matched} of the window's receives of requests and answers here whole made \
         a round of progress",
        world.rank()
    );
    drop(waiting);
    if world.rank() == 1 {
        window.with_local(|local| {
            assert_eq!(local[..3], [ROUNDS; 3], "rank 1's window");
            assert_eq!(
                local[4..],
                page[4..],
                "rank 1's window after the 4 KiB puts"
            );
        });
    }
    world.barrier();
}

/// `LATE_ROUNDS` barriers (in the collective area of a communicator of its own) that rank 0
/// reaches `LATE_BY` after rank 1, which holds a window meanwhile (so sleeps in its PML):
/// rank 0's flag is what ends each of rank 1's waits.
fn woken_in_a_barrier(world: &SimpleCommunicator) {
    let _window = Window::<u64>::allocate(world, 1);
    let waiting = world.duplicate();
    waiting.barrier();
    for _ in 0..LATE_ROUNDS {
        if world.rank() == 0 {
            std::thread::sleep(LATE_BY);
        }
        waiting.barrier();
    }
    drop(waiting);
    world.barrier();
}

/// The barriers `woken_in_a_barrier` runs, and how late rank 0 comes to each.
const LATE_ROUNDS: u32 = 40;
const LATE_BY: std::time::Duration = std::time::Duration::from_millis(5);

/// 1 MiB puts and gets, past every transport's eager limit (rendezvous requests and
/// replies).
fn large(world: &SimpleCommunicator) {
    const MIB: usize = 1 << 20;
    let size = world.size();
    let me = world.rank();
    let next = (me + 1) % size;
    let previous = (me + size - 1) % size;
    let pattern = |rank: Rank| -> Vec<u8> { (0..MIB).map(|i| (i as u8) ^ (rank as u8)).collect() };
    let window = Window::<u8>::allocate(world, MIB);
    let mine = pattern(me);
    window.fence_epoch(|epoch| epoch.put(&mine, next, 0));
    window.with_local(|local| assert!(local == pattern(previous), "a 1 MiB put"));
    let mut got = vec![0u8; MIB];
    window.lock(next, LockKind::Shared, |epoch| epoch.get(&mut got, next, 0));
    assert!(got == mine, "a 1 MiB get");
    world.barrier();
}

/// A get's request waited for after a flush of its target hands back the data the flush
/// completed (the flush leaves the request's outcome to it).
fn request_after_flush(world: &SimpleCommunicator) {
    let size = world.size();
    let me = world.rank();
    let next = (me + 1) % size;
    let window = Window::<i32>::allocate(world, 2);
    window.with_local(|local| local.fill(me * 3));
    world.barrier();
    let mut got = [0i32; 2];
    window.lock(next, LockKind::Shared, |epoch| {
        let request = epoch.rget(&mut got, next, 0);
        epoch.flush(next).unwrap();
        assert_eq!(request.wait().unwrap(), [next * 3; 2]);
    });
    world.barrier();
}

/// Elements of each rank's window in the typed model test.
const TYPED_LEN: usize = 64;
/// What origin buffers hold where no datatype's block lies.
const GUARD: i64 = -7777;

/// A random layout of `i64`s, and what the serial reference knows of it: the elements one
/// element of it covers, in type-map order, and its extent in elements.
struct Drawn {
    datatype: UserDatatype,
    indexes: Vec<usize>,
    extent: usize,
}

impl Drawn {
    /// The elements `count` elements of the layout cover, in type-map order.
    fn covers(&self, count: usize) -> Vec<usize> {
        (0..count)
            .flat_map(|k| self.indexes.iter().map(move |&i| k * self.extent + i))
            .collect()
    }
}

/// A vector, an indexed type, a struct (blocks in a shuffled order, the lowest sometimes
/// above 0), or a vector of one of them.
fn draw_layout(draw: &mut Draw, nested: bool) -> Drawn {
    let int = i64::equivalent_datatype();
    match draw.below(if nested { 3 } else { 4 }) {
        0 => {
            let (count, block) = (1 + draw.below(4), 1 + draw.below(3));
            let stride = block + draw.below(3);
            Drawn {
                datatype: UserDatatype::vector(count as i32, block as i32, stride as i32, &int),
                indexes: (0..count)
                    .flat_map(|i| (0..block).map(move |j| i * stride + j))
                    .collect(),
                extent: (count - 1) * stride + block,
            }
        }
        kind @ (1 | 2) => {
            let n = 1 + draw.below(4);
            let mut at = draw.below(3);
            let mut slots = Vec::new();
            for _ in 0..n {
                let len = 1 + draw.below(3);
                slots.push((at, len));
                at += len + draw.below(3);
            }
            for i in (1..n).rev() {
                slots.swap(i, draw.below(i + 1));
            }
            let lens: Vec<i32> = slots.iter().map(|s| s.1 as i32).collect();
            let lower = slots.iter().map(|s| s.0).min().unwrap();
            let upper = slots.iter().map(|s| s.0 + s.1).max().unwrap();
            let datatype = if kind == 1 {
                let displs: Vec<i32> = slots.iter().map(|s| s.0 as i32).collect();
                UserDatatype::indexed(&lens, &displs, &int)
            } else {
                let displs: Vec<isize> = slots.iter().map(|s| (s.0 * 8) as isize).collect();
                UserDatatype::structured(&lens, &displs, &vec![int; n])
            };
            Drawn {
                datatype,
                indexes: slots.iter().flat_map(|&(d, l)| d..d + l).collect(),
                extent: upper - lower,
            }
        }
        _ => {
            let inner = draw_layout(draw, true);
            let (count, stride) = (1 + draw.below(3), 1 + draw.below(2));
            let step = stride * inner.extent;
            Drawn {
                datatype: UserDatatype::vector(count as i32, 1, stride as i32, &inner.datatype),
                indexes: (0..count)
                    .flat_map(|i| inner.indexes.iter().map(move |&x| i * step + x))
                    .collect(),
                extent: (count - 1) * step + inner.extent,
            }
        }
    }
}

/// An origin side of `n` elements: a slice, or an indexed type of ascending blocks with
/// gaps; the elements it covers, in order.
fn draw_origin(draw: &mut Draw, n: usize) -> (Option<UserDatatype>, Vec<usize>) {
    if draw.chance(30) {
        return (None, (0..n).collect());
    }
    let (mut lens, mut displs, mut covers) = (Vec::new(), Vec::new(), Vec::new());
    let (mut left, mut at) = (n, draw.below(3));
    while left > 0 {
        let len = (1 + draw.below(4)).min(left);
        lens.push(len as i32);
        displs.push(at as i32);
        covers.extend(at..at + len);
        at += len + draw.below(3);
        left -= len;
    }
    let int = i64::equivalent_datatype();
    (Some(UserDatatype::indexed(&lens, &displs, &int)), covers)
}

/// One origin's typed operation in a phase, as every rank draws it.
struct TypedOp {
    target: usize,
    kind: usize,
    layout: Drawn,
    count: usize,
    disp: usize,
    origin: Option<UserDatatype>,
    origin_covers: Vec<usize>,
    values: Vec<i64>,
}

fn draw_typed_op(draw: &mut Draw, target: usize) -> TypedOp {
    let (layout, count, covers) = loop {
        let layout = draw_layout(draw, false);
        let count = 1 + draw.below(2);
        let covers = layout.covers(count);
        if covers.iter().max().is_some_and(|&m| m < TYPED_LEN) {
            break (layout, count, covers);
        }
    };
    let room = TYPED_LEN - covers.iter().max().unwrap();
    let disp = draw.below(room);
    let (origin, origin_covers) = draw_origin(draw, covers.len());
    let buffer_len = origin_covers.iter().max().map_or(0, |m| m + 1) + 2;
    let values = (0..buffer_len)
        .map(|i| match origin_covers.contains(&i) {
            true => draw.below(1000) as i64 - 500,
            false => GUARD,
        })
        .collect();
    TypedOp {
        target,
        kind: draw.below(4),
        layout,
        count,
        disp,
        origin,
        origin_covers,
        values,
    }
}

/// Seeded phases of typed puts, gets, accumulates and get_accumulates, each origin to
/// another target (a rotation), in fence, lock_all and lock epochs, checked against a serial
/// reference: every window element (those no layout covers stay as they were) and every
/// origin buffer (its gaps untouched).
fn typed_model(world: &SimpleCommunicator, seed: u64) -> usize {
    let (size, me) = (world.size() as usize, world.rank() as usize);
    let mut draw = Draw(0x7E57_0000 + seed * 7919 + 1);
    let window = Window::<i64>::allocate(world, TYPED_LEN);
    let mut state: Vec<Vec<i64>> = (0..size)
        .map(|r| (0..TYPED_LEN).map(|i| (r * 1000 + i) as i64).collect())
        .collect();
    window.with_local(|l| l.copy_from_slice(&state[me]));
    world.barrier();
    let mut issued = 0;
    for _ in 0..PHASES {
        let shift = draw.below(size);
        let sync = draw.below(3);
        let ops: Vec<TypedOp> = (0..size)
            .map(|o| draw_typed_op(&mut draw, (o + shift) % size))
            .collect();
        let mine = &ops[me];
        // What the origin's buffer holds after the operation, by the reference.
        let mut expected = mine.values.clone();
        for op in &ops {
            let window = &mut state[op.target];
            let pairs = op
                .layout
                .covers(op.count)
                .into_iter()
                .zip(&op.origin_covers);
            for (t, &o) in pairs {
                let at = op.disp + t;
                match op.kind {
                    0 => window[at] = op.values[o],
                    1 | 3 if std::ptr::eq(op, mine) => expected[o] = window[at],
                    _ => {}
                }
                if op.kind >= 2 {
                    window[at] += op.values[o];
                }
            }
        }
        let mut buffer = mine.values.clone();
        let target_type = TargetDatatype::new(&mine.layout.datatype, mine.count);
        let (target, n) = (mine.target as Rank, mine.origin_covers.len());
        let run = |epoch: &mpirt::window::Epoch<'_, '_, i64>, buffer: &mut Vec<i64>| {
            let origin = mine.values.as_slice();
            let sum = SystemOperation::sum();
            match &mine.origin {
                None => match mine.kind {
                    0 => epoch.put_typed(&origin[..n], target, mine.disp, &target_type),
                    1 => epoch.get_typed(&mut buffer[..n], target, mine.disp, &target_type),
                    2 => epoch.accumulate_typed(&origin[..n], target, mine.disp, &target_type, sum),
                    _ => {
                        let into = &mut buffer[..n];
                        epoch.get_accumulate_typed(
                            &origin[..n],
                            into,
                            target,
                            mine.disp,
                            &target_type,
                            sum,
                        )
                    }
                },
                Some(datatype) => {
                    // SAFETY: the indexed type covers whole i64s of the buffer.
                    let view = unsafe { View::with_count_and_datatype(origin, 1, datatype) };
                    // SAFETY: as above; its blocks do not overlap.
                    let mut into = unsafe {
                        MutView::with_count_and_datatype(buffer.as_mut_slice(), 1, datatype)
                    };
                    match mine.kind {
                        0 => epoch.put_typed(&view, target, mine.disp, &target_type),
                        1 => epoch.get_typed(&mut into, target, mine.disp, &target_type),
                        2 => epoch.accumulate_typed(&view, target, mine.disp, &target_type, sum),
                        _ => epoch.get_accumulate_typed(
                            &view,
                            &mut into,
                            target,
                            mine.disp,
                            &target_type,
                            sum,
                        ),
                    }
                }
            }
        };
        match sync {
            0 => window.fence_epoch(|epoch| run(epoch, &mut buffer)),
            1 => window.lock_all(|epoch| run(epoch, &mut buffer)),
            _ => window.lock(target, LockKind::Exclusive, |epoch| run(epoch, &mut buffer)),
        }
        issued += 1;
        world.barrier();
        assert_eq!(
            buffer, expected,
            "seed {seed}: rank {me}'s origin buffer after a typed op of kind {} (layout {:?} x{} at {})",
            mine.kind, mine.layout.indexes, mine.count, mine.disp
        );
        window
            .with_local(|l| assert_eq!(l, state[me].as_slice(), "seed {seed}: rank {me}'s window"));
        world.barrier();
    }
    issued
}

/// The typed request tests' window, `len` `i64`s a rank whose element `i` here holds
/// `start(i)` once every rank set its own, and their layouts: every other element and every
/// third, 4 of each.
fn typed_window(
    world: &SimpleCommunicator,
    len: usize,
    start: impl Fn(usize) -> i64,
) -> (Window<'static, i64>, UserDatatype, UserDatatype) {
    let window = Window::<i64>::allocate(world, len);
    window.with_local(|l| {
        for (i, v) in l.iter_mut().enumerate() {
            *v = start(i);
        }
    });
    world.barrier();
    let int = i64::equivalent_datatype();
    let every_other = UserDatatype::vector(4, 1, 2, &int);
    let every_third = UserDatatype::vector(4, 1, 3, &int);
    (window, every_other, every_third)
}

/// The request forms of the typed operations act as the blocking forms do, and their
/// requests hand back the buffers they filled: every other element of the next rank's window,
/// from and into every third element of an origin buffer (its gaps untouched).
fn typed_requests(world: &SimpleCommunicator) {
    const LEN: usize = 16;
    let (size, me) = (world.size(), world.rank());
    let next = (me + 1) % size;
    let start = |rank: Rank, i: usize| 100 * rank as i64 + i as i64;
    let (window, every_other, every_third) = typed_window(world, LEN, |i| start(me, i));
    let target_type = TargetDatatype::new(&every_other, 1);
    let spread = |i: usize| i.is_multiple_of(3).then_some(i as i64 / 3 + 1);
    let values: Vec<i64> = (0..10).map(|i| spread(i).unwrap_or(GUARD)).collect();
    // SAFETY: the vector type covers elements 0, 3, 6 and 9 of the 10.
    let origin = unsafe { View::with_count_and_datatype(&values[..], 1, &every_third) };
    let ones = [1i64; 4];
    let mut got = [GUARD; 4];
    let mut old = vec![GUARD; 10];
    // SAFETY: as above; its blocks do not overlap.
    let mut into = unsafe { MutView::with_count_and_datatype(&mut old[..], 1, &every_third) };
    let sum = SystemOperation::sum();
    window.lock(next, LockKind::Exclusive, |epoch| {
        let put = epoch.rput_typed(&origin, next, 0, &target_type);
        assert!(put.wait().is_none());
        let got = epoch.rget_typed(&mut got[..], next, 0, &target_type);
        assert_eq!(got.wait().unwrap(), [1, 2, 3, 4], "rank {me}: rget_typed");
        let added = epoch.raccumulate_typed(&ones[..], next, 8, &target_type, sum);
        assert!(added.wait().is_none());
        let fetched = epoch.rget_accumulate_typed(&origin, &mut into, next, 8, &target_type, sum);
        assert!(fetched.wait().is_some());
    });
    let was = |k: usize| start(next, 8 + 2 * k) + 1;
    let expected: Vec<i64> = (0..10)
        .map(|i| spread(i).map_or(GUARD, |_| was(i / 3)))
        .collect();
    assert_eq!(old, expected, "rank {me}: rget_accumulate_typed's result");
    world.barrier();
    window.with_local(|l| {
        for (i, &v) in l.iter().enumerate() {
            let wanted = match i {
                _ if i % 2 == 1 => start(me, i),
                0..8 => (i / 2 + 1) as i64,
                _ => start(me, i) + 1 + ((i - 8) / 2 + 1) as i64,
            };
            assert_eq!(
                v, wanted,
                "rank {me}'s element {i} after the typed requests"
            );
        }
    });
    world.barrier();
}

/// Two typed requests of rank 0 on rank 1, a get and a get_accumulate (every other element
/// of rank 1's window, into every third element of an origin buffer), in flight together and
/// waited for in the opposite order, each handing back what it fetched. Where windows go by
/// messages neither is complete before rank 1 serves them, which it does not while it
/// computes outside mpirt; elsewhere whether they were is said. By messages, rank 1 computes
/// (waits outside mpirt) from before rank 0 issues the requests until rank 0 has tested them,
/// which the two say in files of a directory of rank 0's (`SideFiles`): a fixed sleep of rank
/// 1's could end before rank 0, on a loaded host, came to its test, and rank 1 would then serve
/// both requests in the fence.
fn typed_requests_in_flight(world: &SimpleCommunicator) {
    const LEN: usize = 16;
    let me = world.rank();
    let start = |i: usize| 1000 + i as i64;
    let (window, every_other, every_third) = typed_window(world, LEN, start);
    let target_type = TargetDatatype::new(&every_other, 1);
    let by_messages = env::var("MPIRT_WINDOW_PATH").is_ok_and(|p| p == "messages");
    let ones = [1i64; 4];
    let (mut got, mut old) = (vec![GUARD; 10], vec![GUARD; 10]);
    // SAFETY: the vector type covers elements 0, 3, 6 and 9 of the 10; its blocks do not
    // overlap.
    let mut got_view = unsafe { MutView::with_count_and_datatype(&mut got[..], 1, &every_third) };
    // SAFETY: as above.
    let mut old_view = unsafe { MutView::with_count_and_datatype(&mut old[..], 1, &every_third) };
    let sum = SystemOperation::sum();
    let side = SideFiles::of_rank_0(world, "typed-in-flight");
    window.fence_epoch(|epoch| match me {
        0 => {
            side.wait_for("computing");
            // The get last: by the device, a fetching accumulate is done when issued.
            let fetch =
                epoch.rget_accumulate_typed(&ones[..], &mut old_view, 1, 8, &target_type, sum);
            let get = epoch.rget_typed(&mut got_view, 1, 0, &target_type);
            let in_flight = [!fetch.test().unwrap(), !get.test().unwrap()];
            side.say("tested");
            println!("rank 0's typed requests in flight: {in_flight:?}");
            if by_messages {
                assert_eq!(
                    in_flight,
                    [true, true],
                    "a typed request completed while its target computed"
                );
            }
            assert!(get.wait().is_some());
            assert!(fetch.wait().is_some());
        }
        1 => {
            side.say("computing");
            // Elsewhere an operation may need this rank's progress before it is issued whole
            // (UCX's RMA over its TCP transport is carried by the target's worker; a fetching
            // accumulate by the device is waited for as it is issued), and nothing is asserted
            // of its being in flight: this rank comes back at once.
            if by_messages {
                side.wait_for("tested");
            }
        }
        _ => {}
    });
    side.remove(world);
    if me == 0 {
        let spread = |from: usize| -> Vec<i64> {
            (0..10)
                .map(|i| match i % 3 {
                    0 => start(from + 2 * (i / 3)),
                    _ => GUARD,
                })
                .collect()
        };
        assert_eq!(got, spread(0), "rank 0: the typed get in flight");
        assert_eq!(old, spread(8), "rank 0: the typed get_accumulate in flight");
    }
    if me == 1 {
        window.with_local(|l| {
            for (i, &v) in l.iter().enumerate() {
                let added = i64::from(i >= 8 && i % 2 == 0);
                assert_eq!(v, start(i) + added, "rank 1's element {i}");
            }
        });
    }
    world.barrier();
}

/// Each misuse is refused with a named error, and nothing is written.
fn errors(world: &SimpleCommunicator) {
    let size = world.size();
    let window = Window::<u32>::allocate(world, 4);
    let say = |what: &str, e: mpirt::Error| println!("{what}: {e}");
    let e = window
        .try_fence_epoch(|epoch| epoch.try_put(&[1; 3], size - 1, 2))
        .unwrap()
        .unwrap_err();
    say("outside", e);
    let mut into = [0u32; 1];
    let e = window
        .try_fence_epoch(|epoch| epoch.try_get(&mut into, size, 0))
        .unwrap()
        .unwrap_err();
    say("rank", e);
    let e = window
        .try_lock(0, LockKind::Shared, |epoch| {
            epoch.try_put(&[1], size - 1, 0)
        })
        .unwrap()
        .unwrap_err();
    say("epoch", e);
    let e = window
        .try_lock(0, LockKind::Shared, |_| window.try_fence_epoch(|_| ()))
        .unwrap()
        .unwrap_err();
    say("fence in lock", e);
    let e = window
        .try_lock(0, LockKind::Shared, |_| {
            window.try_lock(0, LockKind::Shared, |_| ())
        })
        .unwrap()
        .unwrap_err();
    say("lock twice", e);
    if let Err(e) = window.shared_query(0) {
        say("query", e);
    } else {
        // The shared-memory path: `with_local` would lend memory other ranks store into.
        let e = window
            .try_fence_epoch(|_| window.try_with_local(|_| ()))
            .unwrap()
            .unwrap_err();
        say("with_local in an epoch", e);
    }
    let chars = Window::<char>::allocate(world, 1);
    let e = chars
        .try_lock(0, LockKind::Shared, |epoch| {
            epoch.try_accumulate(&['a'], 0, 0, AccumulateOperation::Replace)
        })
        .unwrap()
        .unwrap_err();
    say("type", e);
    let mut old = 'c';
    let e = chars
        .try_lock(0, LockKind::Shared, |epoch| {
            epoch.try_compare_and_swap(&'a', &'b', &mut old, 0, 0)
        })
        .unwrap()
        .unwrap_err();
    say("swap type", e);
    let floats = Window::<f32>::allocate(world, 1);
    let e = floats
        .try_lock(0, LockKind::Shared, |epoch| {
            epoch.try_accumulate(&[1.0], 0, 0, SystemOperation::bitwise_and())
        })
        .unwrap()
        .unwrap_err();
    say("op", e);
    let e = window
        .try_with_local(|_| window.try_lock(0, LockKind::Shared, |_| ()))
        .unwrap()
        .unwrap_err();
    say("epoch in with_local", e);
    let e = window
        .try_with_local(|_| window.try_with_local(|_| ()))
        .unwrap()
        .unwrap_err();
    say("with_local twice", e);
    // One rank's length too large for memory, or another element type, is refused on every
    // rank alike (none is left in a collective of the creation).
    let huge = if world.rank() == 1 { 1 << 61 } else { 1 };
    let e = Window::<u64>::try_allocate(world, huge)
        .err()
        .expect("a window of 2^64 bytes");
    say("huge", e);
    let e = if world.rank() == 1 {
        Window::<i32>::try_allocate(world, 1).err()
    } else {
        Window::<u32>::try_allocate(world, 1).err()
    };
    say("types", e.expect("windows over i32 and u32"));
    typed_errors(world, &window, say);
    world.barrier();
    window.with_local(|l| assert_eq!(l, [0; 4], "a refused operation wrote"));
    drop((chars, floats));
}

/// Typed operations refused: a block past the window, signatures that differ, a target
/// datatype of other elements than the window's, blocks that are not whole elements.
fn typed_errors(
    world: &SimpleCommunicator,
    window: &Window<u32>,
    say: impl Fn(&str, mpirt::Error),
) {
    let last = world.size() - 1;
    let every_other = UserDatatype::vector(3, 1, 2, &u32::equivalent_datatype());
    let past = TargetDatatype::new(&every_other, 1);
    let e = window
        .try_fence_epoch(|epoch| epoch.try_put_typed(&[1u32; 3], last, 0, &past))
        .unwrap()
        .unwrap_err();
    say("typed outside", e);
    let e = window
        .try_fence_epoch(|epoch| epoch.try_get_typed(&mut [0u32; 3][..], last, 0, &past))
        .unwrap()
        .unwrap_err();
    say("typed get outside", e);
    let fits = UserDatatype::vector(2, 1, 2, &u32::equivalent_datatype());
    let two = TargetDatatype::new(&fits, 1);
    let e = window
        .try_lock(0, LockKind::Shared, |epoch| {
            epoch.try_accumulate_typed(&[1u32; 3], 0, 0, &two, SystemOperation::sum())
        })
        .unwrap()
        .unwrap_err();
    say("typed count", e);
    let e = window
        .try_lock(0, LockKind::Shared, |epoch| {
            epoch.try_put_typed(&[1i32; 2], 0, 0, &two)
        })
        .unwrap()
        .unwrap_err();
    say("typed signature", e);
    let shorts = UserDatatype::vector(2, 1, 2, &u16::equivalent_datatype());
    let halves = TargetDatatype::new(&shorts, 1);
    let e = window
        .try_lock(0, LockKind::Shared, |epoch| {
            epoch.try_put_typed(&[1u16; 2], 0, 0, &halves)
        })
        .unwrap()
        .unwrap_err();
    say("typed elements", e);
    let int = u32::equivalent_datatype();
    let askew = UserDatatype::structured(&[1], &[2], &[int]);
    let askew = TargetDatatype::new(&askew, 1);
    let e = window
        .try_lock(0, LockKind::Shared, |epoch| {
            epoch.try_put_typed(&[1u32], 0, 0, &askew)
        })
        .unwrap()
        .unwrap_err();
    say("typed askew", e);
}

/// Runs a job that must succeed and print `expect`; over TCP, checks each rank said (under
/// MPIRT_VERBOSE) it reached the others over TCP: a TCP test run over shared memory would
/// prove nothing. Returns its stdout.
fn assert_job(n: u32, mode: &str, envs: &[(&str, &str)], expect: &str) -> String {
    let (out, err) = ok_job_with(n, mode, envs);
    assert!(
        out.contains(expect),
        "{mode} on {n} ranks ({envs:?}): {out}"
    );
    if envs == TCP && common::test_pml() == "native" {
        for rank in 0..n {
            let said = format!("mpirt: rank {rank} of {n} ");
            assert!(
                err.lines()
                    .any(|l| l.starts_with(&said)
                        && l.contains(&format!("{} ranks over tcp", n - 1))),
                "rank {rank} did not run over TCP:\n{err}"
            );
        }
    }
    out
}

/// TCP between the ranks, and windows by messages (on one host they would map their memory).
const TCP: [(&str, &str); 3] = [
    ("MPIRT_TRANSPORT", "tcp"),
    ("MPIRT_VERBOSE", "1"),
    ("MPIRT_WINDOW_PATH", "messages"),
];
/// Windows by messages over shared memory.
const MESSAGES: [(&str, &str); 1] = [("MPIRT_WINDOW_PATH", "messages")];

#[test]
fn model_programs_on_shared_memory() {
    for n in [2, 3, 5] {
        let out = assert_job(n, "model", &[], "model ok");
        assert!(out.contains("(mapped: true)"), "{out}");
    }
}

#[test]
fn model_programs_by_messages_on_shared_memory() {
    for n in [2, 5] {
        let out = assert_job(n, "model", &MESSAGES, "model ok");
        assert!(out.contains("(mapped: false)"), "{out}");
    }
}

#[test]
fn model_programs_on_tcp() {
    for n in [2, 4] {
        assert_job(n, "model", &TCP, "model ok");
    }
}

#[test]
fn typed_programs() {
    for n in [2, 3, 5] {
        assert_job(n, "typed", &[], "typed ok");
    }
    assert_job(3, "typed", &MESSAGES, "typed ok");
    assert_job(4, "typed", &TCP, "typed ok");
}

#[test]
fn atomics_and_locks() {
    assert_job(4, "atomics", &[], "atomics ok");
    assert_job(4, "atomics", &MESSAGES, "atomics ok");
    assert_job(3, "atomics", &TCP, "atomics ok");
}

#[test]
fn window_kinds_and_progress() {
    assert_job(3, "kinds", &[], "kinds ok");
    assert_job(3, "kinds", &MESSAGES, "kinds ok");
    assert_job(2, "kinds", &TCP, "kinds ok");
}

/// A flush after one operation sends no message of its own, and the origin probes for none of
/// the answers (`flushes_ride_on_their_operations`), by messages over shared memory and over
/// TCP.
#[test]
fn a_flush_after_one_operation_costs_no_message_of_its_own() {
    assert_job(2, "flushes", &MESSAGES, "flushes ok");
    assert_job(2, "flushes", &TCP, "flushes ok");
}

/// PSCW's notices on the shared-memory path are counts in the mapping, not messages
/// (`pscw_on_shared_memory_sends_nothing`), on 2, 3 and 4 ranks (a rank's neighbours one
/// rank, or two; groups of all the others overlapping on 3 and 4).
#[test]
fn pscw_on_shared_memory_sends_no_message() {
    for n in [2, 3, 4] {
        assert_job(n, "pscw-notices", &[], "pscw-notices ok");
    }
}

/// An unwound lock epoch's unlock is applied before its window is freed, never taken by the
/// next window on the same context (`unwound_unlocks_stay_with_their_window`), by messages
/// over shared memory and over TCP.
#[test]
fn unwound_unlocks_are_applied_before_the_window_is_freed() {
    assert_job(2, "freed", &MESSAGES, "freed ok");
    assert_job(3, "freed", &TCP, "freed ok");
}

/// A target's refusal of an operation whose epoch unwound is returned by the origin's
/// `try_free` (`unwound_fault_reaches_the_free`), by messages over shared memory and over TCP.
#[test]
fn a_refusal_no_epoch_reported_reaches_the_free() {
    assert_job(2, "unwound-fault", &MESSAGES, "unwound-fault ok");
    assert_job(3, "unwound-fault", &TCP, "unwound-fault ok");
}

/// Windows by messages, and waits in the collective area that sleep at once (they spin not
/// at all), with the area's counts on stderr.
const ASLEEP_AT_ONCE: [(&str, &str); 3] = [
    ("MPIRT_WINDOW_PATH", "messages"),
    ("MPIRT_VERBOSE", "1"),
    ("MPIRT_SPIN_US", "0"),
];

/// The count that `suffix` ends in rank 1's `--verbose` lines of the collective area in
/// `err` (those of a 2-rank job that contain `within`), summed over its areas.
fn rank_1s_area_count(err: &str, within: &str, suffix: &str) -> u64 {
    err.lines()
        .filter(|l| l.starts_with("mpirt: collective area, rank 1 of 2:") && l.contains(within))
        .filter_map(|l| {
            l.split(", ")
                .find_map(|part| part.strip_suffix(suffix))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// A target waiting in a barrier that meets in the collective area, whose windows go by
/// messages, sleeps in its PML, which the origin's requests wake, not on the area's futex
/// word, which they do not (it served them only between sleeps of up to 1 ms there): its
/// `--verbose` count of sleeps in the PML (the waits spin not at all, `MPIRT_SPIN_US=0`, so
/// they sleep at once), and every epoch's sum in its window.
#[test]
fn a_target_in_a_barrier_sleeps_where_operations_wake_it() {
    if common::spread_over_hosts() {
        println!("skipped: needs the ranks on one host, whose barrier meets in the area");
        return;
    }
    let (out, err) = ok_job_with(2, "barrier", &ASLEEP_AT_ONCE);
    assert!(out.contains("barrier ok"), "{out}");
    let in_pml = rank_1s_area_count(&err, "", " sleeps in the PML (serving peers)");
    assert!(
        in_pml > 0,
        "rank 1 never slept in its PML while serving {SERVED_ROUNDS} epochs:\n{err}"
    );
}

/// A target asleep in its PML in a barrier that meets in the collective area is woken by the
/// rank that publishes the flag it waits for (through that rank's shared-memory wake, or, on
/// the UCX PML, which tools/test-all.sh runs this on too, an active message), not left to its
/// sleep's timeout of 1 ms: without that wake, every barrier of a rank holding a window off
/// the shared-memory path, or an immediate collective, that slept came up to 1 ms late. Rank
/// 1's `--verbose` count of the sleeps in its PML that the flag ended before their timeout, in
/// the late barriers' area (0 without the wake, on either PML: nothing else reaches its PML
/// while rank 0 computes).
#[test]
fn a_target_asleep_in_its_pml_is_woken_by_the_barriers_flag() {
    if common::spread_over_hosts() {
        println!("skipped: needs the ranks on one host, whose barrier meets in the area");
        return;
    }
    let (out, err) = ok_job_with(2, "late", &ASLEEP_AT_ONCE);
    assert!(out.contains("late ok"), "{out}");
    // The late barriers' communicator alone (its first call and `LATE_ROUNDS`): in the
    // others' areas, messages (the window's set-up) may end a sleep too.
    let calls = format!(" {} calls,", LATE_ROUNDS + 1);
    let woken = rank_1s_area_count(&err, &calls, " of them ended by the flag");
    assert!(
        woken > 0,
        "no sleep of rank 1 in its PML, in {LATE_ROUNDS} barriers that rank 0 reached \
         {LATE_BY:?} late, ended before its timeout:\n{err}"
    );
}

/// Over a provider that applies RMA in the target's progress (tcp;ofi_rxm, shm: windows take
/// its RMA only with `MPIRT_WINDOW_PATH=rdma`), a target waiting in a barrier keeps polling
/// while a peer writes to its window, and an origin's flush sees its writes complete as they
/// do (`rma_flushes_need_no_sleep`): both counted, not timed. Each put and flush took 2.2-2.7
/// ms before (osu_put_latency, tcp;ofi_rxm).
#[cfg(feature = "ofi")]
#[test]
fn ofi_rma_in_the_targets_progress_is_not_slept_through() {
    let provider = common::ofi_test_provider();
    if !["tcp;ofi_rxm", "shm"].contains(&provider.as_str()) {
        println!("skipped: {provider} does RMA without the target's progress");
        return;
    }
    let mut envs = vec![
        ("MPIRT_TRANSPORT", "ofi"),
        ("MPIRT_OFI_PROVIDER", provider.as_str()),
        ("MPIRT_WINDOW_PATH", "rdma"),
    ];
    envs.extend(common::ofi_on_loopback());
    let (out, _) = ok_job_with(2, "rma-flushes", &envs);
    assert!(out.contains("rma-flushes ok"), "over {provider}: {out}");
}

/// RDMA verbs between the ranks, and windows by RDMA where verbs reaches (never the
/// shared-memory mapping, which ranks on one host would otherwise take).
#[cfg(feature = "verbs")]
const VERBS: [(&str, &str); 3] = [
    ("MPIRT_TRANSPORT", "verbs"),
    ("MPIRT_VERBOSE", "1"),
    ("MPIRT_WINDOW_PATH", "rdma"),
];

/// Over verbs, an origin's flush sees its RDMA WRITEs complete as they do: its PML counts
/// their completions as delivered (`rma_flushes_need_no_sleep`), so that the flush's wait
/// looks again at once; uncounted, each waited out its spin budget and a sleep that the
/// completion, already taken, could not end. Counted, not timed.
#[cfg(feature = "verbs")]
#[test]
fn windows_over_verbs_flush_as_their_writes_complete() {
    if !rdma_device_here() {
        return;
    }
    let (out, _) = ok_job_with(2, "rma-flushes", &VERBS);
    assert!(out.contains("rma-flushes ok"), "over verbs: {out}");
}

/// The RDMA WRITEs, READs and atomics (on UCX: puts, gets and atomics; over OFI: its
/// fi_writes, fi_reads and fi_atomics) a job's ranks counted, summed over its ranks.
fn rdma_counted(out: &str) -> [u64; 3] {
    counted(out, " rdma: ")
}

/// The device's writes, reads and atomics of the kinds mode's dynamic window, summed over a
/// job's ranks.
fn dynamic_counted(out: &str) -> [u64; 3] {
    counted(out, " dynamic window: ")
}

/// The counts on the lines of `out` that hold `marker`, each line the rank and then the
/// counts, summed over the lines (the job's ranks).
fn counted<const N: usize>(out: &str, marker: &str) -> [u64; N] {
    let mut sum = [0u64; N];
    for line in out.lines().filter(|l| l.contains(marker)) {
        let numbers: Vec<u64> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        for (total, n) in sum.iter_mut().zip(&numbers[1..]) {
            *total += n;
        }
    }
    sum
}

/// Whether this host has an RDMA device; says why the test is skipped where not.
#[cfg(feature = "verbs")]
fn rdma_device_here() -> bool {
    let here = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    if !here {
        println!(
            "skipped: no RDMA device here (tools/test-all.sh runs this in the Soft-RoCE guest)"
        );
    }
    here
}

/// Windows over verbs (run in the Soft-RoCE guest by tools/test-all.sh): puts by RDMA
/// WRITE, gets by RDMA READ, and, on the model's and the atomics' 8-byte windows, every
/// accumulate and atomic by device atomics, which the ranks' counters show; the same
/// programs and checks as on the other paths.
#[cfg(feature = "verbs")]
#[test]
fn windows_over_verbs() {
    if !rdma_device_here() {
        return;
    }
    for (n, mode, expect, atomics) in [
        (2, "model", "model ok", true),
        (3, "model", "model ok", true),
        (3, "typed", "typed ok", true),
        (2, "atomics", "atomics ok", true),
        (2, "kinds", "kinds ok", false),
    ] {
        let (out, err) = ok_job_with(n, mode, &VERBS);
        assert!(out.contains(expect), "{mode} on {n} ranks: {out}");
        for rank in 0..n {
            let said = format!("mpirt: rank {rank} of {n} ");
            assert!(
                err.lines().any(|l| l.starts_with(&said)
                    && l.contains(&format!("{} ranks over verbs", n - 1))
                    && l.contains("windows by RDMA WRITE, READ and atomics")),
                "rank {rank} did not run over verbs with device atomics:\n{err}"
            );
        }
        let [writes, reads, device_atomics] = rdma_counted(&out);
        let [dynamic_writes, dynamic_reads, dynamic_atomics] = dynamic_counted(&out);
        // Where a fixed window's elements are 8-byte numbers, accumulates go by the device;
        // elsewhere (`kinds`: 4-byte and 1-byte windows) never, even for a fetch_and_op.
        assert!(
            writes > 0 && reads > 0 && (device_atomics - dynamic_atomics > 0) == atomics,
            "{mode} on {n} ranks counted {writes} RDMA WRITEs, {reads} READs and \
             {device_atomics} atomics ({dynamic_atomics} the dynamic window's):\n{out}"
        );
        // A dynamic window's puts, gets and (of u64) accumulates go by the device too, once
        // learned.
        if mode == "kinds" {
            assert!(
                dynamic_writes > 0 && dynamic_reads > 0 && dynamic_atomics > 0,
                "the dynamic window counted {dynamic_writes} RDMA WRITEs, {dynamic_reads} \
                 READs and {dynamic_atomics} atomics:\n{out}"
            );
        }
    }
    let out = assert_job(3, "errors", &VERBS, "rank 0 done");
    for needle in MISUSES {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    // A completion queue with room for 16 sends beside its 512 receives
    // (MPIRT_VERBS_CQ_ENTRIES, as a job of more peers than the device's max_cqe holds would
    // get), far below a queue pair's 256, and 1 MiB puts cut into 4 KiB RDMA WRITEs (256 work
    // requests each): every send, of every queue pair, waits for room in it, and the jobs
    // still end right.
    let mut small_cq = VERBS.to_vec();
    small_cq.extend([
        ("MPIRT_VERBS_CQ_ENTRIES", "528"),
        ("MPIRT_VERBS_MAX_MSG", "4096"),
    ]);
    for (mode, expect) in [("kinds", "kinds ok"), ("model", "model ok")] {
        let (out, err) = ok_job_with(2, mode, &small_cq);
        assert!(
            out.contains(expect),
            "{mode} with a small completion queue: {out}"
        );
        assert!(
            err.contains("at most 16 sends in flight (the completion queue's room)"),
            "the completion queue's room was not capped:\n{err}"
        );
    }
}

/// Windows on the RDMA path, never the shared-memory mapping (which ranks on one host would
/// otherwise take): on the UCX PML, UCX's RMA.
const RDMA_PATH: [(&str, &str); 1] = [("MPIRT_WINDOW_PATH", "rdma")];

/// Windows over UCX's RMA (tools/test-all.sh runs this in its UCX phases, with
/// MPIRT_TEST_PML=ucx over UCX_TLS=sm,self and tcp): puts by `ucp_put_nbx`, gets by
/// `ucp_get_nbx`, and on the model's and the atomics' 8-byte windows every accumulate and
/// atomic by `ucp_atomic_op_nbx` (directly, or under the lock word taken with it), which
/// the ranks' counters show; the model's and the typed programs and checks as on the other
/// paths, and every rank's concurrent `fetch_and_op` on one counter returning each value
/// once.
#[test]
fn windows_over_ucx() {
    if common::test_pml() != "ucx" {
        println!("skipped: the jobs run on the native PML (MPIRT_TEST_PML=ucx runs them on UCX)");
        return;
    }
    // The whole atomics mode too: where UCX does atomics in software at the target (over TCP,
    // and, inferred from the timings, over shared memory), its thousands of contended
    // operations are applied by targets that wait in barriers meanwhile; while such a target
    // slept on the collective area's futex word, which they do not wake, it applied them only
    // between sleeps of up to 1 ms, and the mode outlasted the job's limit (it sleeps in its
    // PML now, which they wake: `collective/shared.rs`).
    for (n, mode, expect, eight_bytes) in [
        (3, "model", "model ok", true),
        (3, "typed", "typed ok", true),
        (3, "counter", "counter ok", true),
        (3, "atomics", "atomics ok", true),
        (2, "kinds", "kinds ok", false),
    ] {
        let (out, _) = ok_job_with(n, mode, &RDMA_PATH);
        assert!(out.contains(expect), "{mode} on {n} ranks: {out}");
        let [puts, gets, atomics] = rdma_counted(&out);
        let [dynamic_puts, dynamic_gets, dynamic_atomics] = dynamic_counted(&out);
        assert!(
            puts > 0 && gets > 0 && (atomics - dynamic_atomics > 0) == eight_bytes,
            "{mode} on {n} ranks counted {puts} UCX puts, {gets} gets and {atomics} atomics \
             ({dynamic_atomics} the dynamic window's):\n{out}"
        );
        // A dynamic window's puts, gets and (of u64) accumulates go by UCX's RMA too, once
        // learned.
        if mode == "kinds" {
            assert!(
                dynamic_puts > 0 && dynamic_gets > 0 && dynamic_atomics > 0,
                "the dynamic window counted {dynamic_puts} UCX puts, {dynamic_gets} gets and \
                 {dynamic_atomics} atomics:\n{out}"
            );
        }
    }
}

/// Windows over libfabric, every pair on `common::ofi_test_provider()` (tools/test-all.sh's
/// OFI phase runs this on each provider it runs the suites on, on this host and across the
/// test hosts): puts by fi_write, gets by fi_read and, where the provider has 8-byte
/// fetch-and-add and compare-and-swap (`--verbose` says which), the 8-byte windows'
/// accumulates and atomics by fi_atomic, which the ranks' counters show; the same programs
/// and checks as on the other paths.
#[cfg(feature = "ofi")]
#[test]
fn windows_over_ofi() {
    let provider = common::ofi_test_provider();
    let mut envs = vec![
        ("MPIRT_TRANSPORT", "ofi"),
        ("MPIRT_OFI_PROVIDER", provider.as_str()),
        ("MPIRT_VERBOSE", "1"),
        ("MPIRT_WINDOW_PATH", "rdma"),
    ];
    envs.extend(common::ofi_on_loopback());
    // The model's programs take every kind of operation and epoch (the atomics mode's
    // thousands of contended rounds, each an fi_atomic that the target's progress applies,
    // outlast the job's limit on tcp;ofi_rxm); the typed ones' puts and gets go a piece at a
    // time between the origin's blocks in place and the target's, their requests in flight.
    for (n, mode, expect, eight_bytes) in [
        (3, "model", "model ok", true),
        (3, "typed", "typed ok", true),
        (2, "kinds", "kinds ok", false),
    ] {
        let (out, err) = ok_job_with(n, mode, &envs);
        assert!(
            out.contains(expect),
            "{mode} on {n} ranks over {provider}: {out}"
        );
        let mut with_atomics = true;
        for rank in 0..n {
            let said = format!("mpirt: rank {rank} of {n} ");
            let line = err
                .lines()
                .find(|l| {
                    l.starts_with(&said)
                        && l.contains(&format!("{} ranks over libfabric {provider} ", n - 1))
                })
                .unwrap_or_else(|| panic!("rank {rank} did not run over {provider}:\n{err}"));
            if provider.ends_with(";ofi_rxd") {
                // Never by its RMA (which crashes ranks, three or more), even when asked.
                assert!(
                    line.contains("windows by messages (the provider's RMA crashes ranks"),
                    "rank {rank}: {provider}'s windows do not go by messages:\n{line}"
                );
                continue;
            }
            assert!(
                line.contains("windows by fi_write"),
                "rank {rank}: {provider} has no RMA writes, windows went by messages:\n{line}"
            );
            // tcp;ofi_rxm and shm emulate RMA slower than messages: only when asked.
            assert_eq!(
                line.contains("only with MPIRT_WINDOW_PATH=rdma, else by messages"),
                ["tcp;ofi_rxm", "shm"].contains(&provider.as_str()),
                "rank {rank}: {provider}'s windows by default:\n{line}"
            );
            with_atomics &= line.contains("windows by fi_write, fi_read and fi_atomic");
            // rxm over verbs is not asked for atomics (its key map refuses the keys verbs'
            // registration cache gives twice): accumulates by messages, saying why.
            if provider == "verbs;ofi_rxm" {
                assert!(
                    line.contains("accumulates by messages: atomics not asked, rxm"),
                    "rank {rank}: {provider} was asked for atomics:\n{line}"
                );
            }
        }
        let [writes, reads, atomics] = rdma_counted(&out);
        if provider.ends_with(";ofi_rxd") {
            assert_eq!(
                [writes, reads, atomics],
                [0, 0, 0],
                "{mode} on {n} ranks over {provider} took RMA:\n{out}"
            );
            continue;
        }
        // Both have the 8-byte atomics (rxm's emulated, shm's applied by the target).
        assert!(
            with_atomics || !["tcp;ofi_rxm", "shm"].contains(&provider.as_str()),
            "{provider} lost its atomics:\n{err}"
        );
        // Where every window's elements are 8-byte numbers and the provider has the atomics,
        // accumulates go by fi_atomic; elsewhere (`kinds`: 4-byte and 1-byte windows, or a
        // provider without them) never, even for a fetch_and_op.
        let [dynamic_writes, dynamic_reads, dynamic_atomics] = dynamic_counted(&out);
        assert!(
            writes > 0
                && reads > 0
                && (atomics - dynamic_atomics > 0) == (eight_bytes && with_atomics),
            "{mode} on {n} ranks over {provider} counted {writes} fi_writes, {reads} fi_reads \
             and {atomics} fi_atomics, {dynamic_atomics} the dynamic window's (provider \
             atomics: {with_atomics}):\n{out}"
        );
        // A dynamic window's puts, gets and (of u64, where the provider has the atomics)
        // accumulates go by RMA too, once learned.
        if mode == "kinds" {
            assert!(
                dynamic_writes > 0 && dynamic_reads > 0 && (dynamic_atomics > 0) == with_atomics,
                "the dynamic window over {provider} counted {dynamic_writes} fi_writes, \
                 {dynamic_reads} fi_reads and {dynamic_atomics} fi_atomics (provider atomics: \
                 {with_atomics}):\n{out}"
            );
        }
        println!(
            "{mode} on {n} ranks over {provider}: {writes} fi_writes, {reads} fi_reads, \
             {atomics} fi_atomics"
        );
    }
}

/// A window larger than the locked-memory limit on one rank (its `ibv_reg_mr` fails) is
/// still made on every rank, and is reached by messages there (`expose_window` failing on one
/// rank once left the others waiting in the window's all-gather). Needs a limit that holds:
/// tools/test-all.sh runs it in the Soft-RoCE guest under `capsh --drop=cap_ipc_lock` and
/// `ulimit -l`.
#[cfg(feature = "verbs")]
#[test]
fn windows_beyond_locked_memory() {
    if !rdma_device_here() {
        return;
    }
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|caps| u64::from_str_radix(caps.trim(), 16).ok())
        .expect("CapEff in /proc/self/status");
    // CAP_IPC_LOCK (14) lets a process lock memory past its limit.
    if effective & 1 << 14 != 0 {
        println!("skipped: CAP_IPC_LOCK lifts the locked-memory limit (run under capsh --drop=cap_ipc_lock)");
        return;
    }
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    let locked = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<usize>().ok());
    if locked.is_none_or(|bytes| bytes >= BEYOND) {
        println!(
            "skipped: the locked-memory limit ({locked:?}) is not below {BEYOND} bytes (ulimit -l)"
        );
        return;
    }
    let (out, err) = ok_job_with(2, "beyond", &VERBS);
    assert!(out.contains("beyond ok"), "{out}");
    assert!(
        err.contains(&format!(
            "mpirt: rank 1: registering {BEYOND} bytes for a window failed"
        )),
        "rank 1 registered its window after all:\n{err}"
    );
}

/// What both paths name alike.
const MISUSES: [&str; 18] = [
    "outside: rank 0: put to rank 2: 3 element(s) at displacement 2 reach past the end of \
     rank 2's window, which holds 4 element(s); nothing was moved",
    "rank: rank 0: get from rank 3: rank 3 is out of range",
    "epoch: rank 0: put to rank 2: rank 2 is not a target of this access epoch (a lock \
     epoch)",
    "fence in lock: rank 0: fence: a lock epoch is open on this window; end it first",
    "lock twice: rank 0: lock of rank 0: rank 0 is already locked",
    "type: rank 0: accumulate to rank 0: accumulates take primitive numbers and bool, not \
     char",
    "swap type: rank 0: compare_and_swap on rank 0: compare_and_swap takes primitive numbers \
     and bool, not char",
    "op: rank 0: accumulate to rank 0: the operation bitwise_and is not defined for f32",
    "epoch in with_local: rank 0: lock of rank 0: the window's memory is lent to with_local; \
     open epochs outside it",
    "with_local twice: rank 0: with_local: ",
    "huge: rank 0: allocate a window: rank 1's 2305843009213693952 elements of u64 do not fit \
     in memory",
    "types: rank 0: allocate a window: rank 1 creates the window over another element type (4 \
     bytes) than this rank's u32 (4 bytes): every rank must use one type",
    "typed outside: rank 0: put (typed) to rank 2: the target datatype's block of 4 byte(s) at \
     byte 16 from displacement 0 reaches past the end of rank 2's window, which holds 4 \
     element(s); nothing was moved",
    "typed get outside: rank 0: get (typed) from rank 2: the target datatype's block of 4 \
     byte(s) at byte 16",
    "typed count: rank 0: accumulate (typed) to rank 0: the origin and the target datatype (3 \
     and 2 basic elements) differ in type signature at basic element 2; they must be equal",
    "typed signature: rank 0: put (typed) to rank 0: the origin and the target datatype (2 and \
     2 basic elements) differ in type signature at basic element 0",
    "typed elements: rank 0: put (typed) to rank 0: the target datatype and the window's \
     elements (2 and 1 basic elements) differ in type signature at basic element 0",
    "typed askew: rank 0: put (typed) to rank 0: the target datatype's block of 4 byte(s) at \
     byte 2 is not whole elements of the window's 4-byte type",
];

#[test]
fn misuse_is_named_on_shared_memory() {
    let out = assert_job(3, "errors", &[], "rank 0 done");
    for needle in MISUSES {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    let needle = "with_local in an epoch: rank 0: with_local: on the shared-memory path other \
                  ranks store into this memory during this rank's epochs and post";
    assert!(out.contains(needle), "missing {needle:?} in\n{out}");
}

#[test]
fn misuse_is_named() {
    // By messages: on the shared-memory path, `allocate` maps the memory, which
    // `shared_query` then reaches.
    let out = assert_job(3, "errors", &MESSAGES, "rank 0 done");
    assert!(
        out.contains("with_local twice: rank 0: with_local: the window's memory is lent"),
        "{out}"
    );
    for needle in MISUSES.into_iter().chain([
        "query: rank 0: shared_query of rank 0: only a window whose memory every rank maps \
         (allocate_shared) is shared",
    ]) {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
}
