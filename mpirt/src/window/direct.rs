//! The shared-memory path: a window whose ranks all map its memory (every rank on one host)
//! is reached with loads, stores and CPU atomics, with no message and no help from the
//! target. The mapping starts with two cache lines per rank (`CONTROL`): its lock words, and
//! its lock-free flag on a line of its own (an origin raises and lowers the flag around every
//! atomic, which would otherwise take the line the other ranks spin on for the locks), then
//! each rank's PSCW notices on lines of their own, then each rank's part (`header`).
//!
//! PSCW's notices are counts in the receiving rank's lines, one per sender: a `post` adds one
//! to each origin's count of posts from this rank, which the origin's `start` takes; a
//! `complete` adds one to each target's count of completes from this rank, which the
//! target's `wait` takes. As messages they cost each rank two sends and two receives a
//! ping-pong, most of them by the unexpected-message path (`osu_put_latency -s pscw`: 4,981
//! instructions an iteration on rank 0, callgrind; 614 as counts: a locked add each and a
//! look). The add releases and the look acquires: a target's stores
//! before its `post` are seen by the origin's accesses, and an origin's puts before its
//! `complete` by the target once its `wait` returns.
//!
//! Passive-target locks are a reader-writer word per rank (exclusive bit, writer-waiting
//! bit, shared count): an exclusive request that must wait raises the waiting bit, which
//! keeps new shared holders out, so a stream of shared ones does not starve it.
//!
//! Accumulates (and `get_accumulate`, `fetch_and_op`, `compare_and_swap`) must be atomic per
//! element with every concurrent accumulate on the element. Two ways do that:
//! - CPU atomics (`atomic.rs`), for an operation on one element of 1, 2, 4 or 8 bytes, with
//!   no lock: one locked instruction for `compare_and_swap`, replace and an integer sum or
//!   bitwise operation, a compare-and-swap loop for the other operations and for floats;
//! - the target rank's accumulate lock, a spin lock held for one element-wise operation in
//!   plain loads and stores (vectorised), for longer operations and other element sizes.
//!
//! Atomics are atomic with atomics whatever their operations (mixed operations included),
//! and lock holders exclude each other; what remains is an atomic and a plain lock holder on
//! one element, which the lock word alone cannot keep apart without the atomics paying a
//! second locked instruction. So the lock word has a mode: atomics go without the lock only
//! while the word is zero (unlocked, atomic mode), and each rank has a lock-free flag that it
//! raises while it does, checking the word after raising it. A plain holder that finds the
//! word in atomic mode switches it to plain mode (`PLAIN`) as it locks, runs a global memory
//! barrier (`membarrier`, which makes every running rank execute a full fence) and waits for
//! every raised flag to fall. Either the barrier orders an origin's check after the switch
//! (it sees the word non-zero, lowers its flag and takes the lock, whose holders exclude each
//! other), or it orders the origin's raised flag before the holder's look at the flags (the
//! holder waits for the origin's atomic to end). Plain mode stays after the holder unlocks,
//! so a stream of long accumulates pays the barrier once; an atomic that takes the lock in
//! plain mode switches back to atomic mode as it unlocks (no plain holder is left). Where any
//! rank could not register for the barrier (no `membarrier`), every accumulate takes the
//! lock, atomics included.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pml::shared_mapping::SharedMapping;
use pml::Pml;

use super::atomic;
use super::operation::{self, AccumulateOperation};
use crate::datatype::Datatype;
use crate::environment::with_engine_or_lent;
use crate::error::Cause;

/// Bytes of a cache line.
pub(super) const LINE: usize = 64;
/// Bytes of a rank's control lines at the start of the mapping.
const CONTROL: usize = 2 * LINE;

/// Bytes of a rank's PSCW notices in a window of `ranks` ranks: a count per sender of each
/// kind, on whole lines.
fn notice_bytes(ranks: usize) -> Option<usize> {
    ranks
        .checked_mul(2 * size_of::<AtomicU32>())?
        .checked_next_multiple_of(LINE)
}

/// Bytes before the first part of a window of `ranks` ranks: every rank's control lines,
/// then every rank's notices (see the module); `None` where that overflows.
pub(super) fn header(ranks: usize) -> Option<usize> {
    ranks
        .checked_mul(CONTROL)?
        .checked_add(ranks.checked_mul(notice_bytes(ranks)?)?)
}

/// A kind of PSCW notice: the index of its counts in a rank's notice lines.
#[derive(Clone, Copy)]
pub(super) enum Notice {
    /// A target's `post`, counted at the origin.
    Posted = 0,
    /// An origin's `complete`, counted at the target.
    Completed = 1,
}

/// The exclusive holder's bit of a lock word; the bits below `WAITING` count shared holders.
const EXCLUSIVE: u64 = 1 << 63;
/// Set by an exclusive request that waits: no new shared holder enters meanwhile.
const WAITING: u64 = 1 << 62;

/// Spins on the accumulate lock between steps of the PML's progress, which notices a
/// peer that died holding it (and lets the PML fail this call rather than spin forever).
const PROGRESS_SPINS: u32 = 1 << 12;

/// Spins before a waiting rank yields its core: a lock is held for a short copy, unless its
/// holder was descheduled, which only yielding lets run again where ranks share cores.
const SPINS: u32 = 64;

/// The accumulate word's lock bit.
const LOCKED: u32 = 1;
/// The accumulate word's plain mode (see the module): atomics take the lock.
const PLAIN: u32 = 2;

/// A rank's control lines.
#[repr(C)]
struct Control {
    lock: AtomicU64,
    accumulate: AtomicU32,
    /// Raised while this rank, as an origin, applies atomics without the target's lock.
    lock_free: Flag,
}

/// The lock-free flag, on the second of a rank's control lines.
#[repr(C, align(64))]
struct Flag(AtomicU32);

const _: () = assert!(std::mem::size_of::<Control>() == CONTROL);
const _: () = assert!(std::mem::offset_of!(Control, lock_free) == LINE);

pub(super) struct Direct {
    map: SharedMapping,
    /// Each rank's part: its offset in the mapping and its bytes.
    parts: Vec<(usize, usize)>,
    /// This rank.
    me: u32,
    /// Whether every rank registered for the barrier (`barrier::registered`), so that short
    /// accumulates may skip the lock.
    lock_free: bool,
}

impl Direct {
    /// Over a mapping laid out as the module says, `parts` within it past the control
    /// lines, which start zeroed (unlocked); `lock_free` where every rank registered for the
    /// barrier.
    pub fn new(map: SharedMapping, parts: Vec<(usize, usize)>, me: u32, lock_free: bool) -> Direct {
        debug_assert!(parts.iter().all(
            |&(at, len)| header(parts.len()).is_some_and(|h| at >= h) && at + len <= map.len()
        ));
        Direct {
            map,
            parts,
            me,
            lock_free,
        }
    }

    fn control(&self, rank: u32) -> &Control {
        let line = self
            .map
            .base()
            .as_ptr()
            .wrapping_add(rank as usize * CONTROL);
        // SAFETY: the mapping starts with `CONTROL` bytes per rank (`new`), page aligned,
        // which every process touches only through these atomics.
        unsafe { &*line.cast::<Control>() }
    }

    /// `rank`'s count of the notices of `kind` that `from` sent it.
    fn notices(&self, rank: u32, kind: Notice, from: u32) -> &AtomicU32 {
        let ranks = self.parts.len();
        let lines = notice_bytes(ranks).expect("checked by header in new");
        let at = ranks * CONTROL
            + rank as usize * lines
            + (kind as usize * ranks + from as usize) * size_of::<AtomicU32>();
        // SAFETY: every rank's notice lines follow the control lines (`header`), inside the
        // mapping (`new`), 4-byte aligned, and every process touches them only through
        // these atomics.
        unsafe {
            &*self
                .map
                .base()
                .as_ptr()
                .wrapping_add(at)
                .cast::<AtomicU32>()
        }
    }

    /// Sends `to` a notice of `kind` from this rank: this rank's stores before it are seen
    /// by `to` once it took the notice.
    pub fn notify(&self, to: u32, kind: Notice) {
        self.notices(to, kind, self.me)
            .fetch_add(1, Ordering::Release);
    }

    /// Takes one notice of `kind` that `from` sent this rank, if one came.
    pub fn try_take(&self, kind: Notice, from: u32) -> bool {
        let count = self.notices(self.me, kind, from);
        if count.load(Ordering::Acquire) == 0 {
            return false;
        }
        // Only this rank takes its notices: the count stays positive until it does.
        count.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// The start of `rank`'s part and its bytes.
    pub fn part(&self, rank: u32) -> (*mut u8, usize) {
        let (at, len) = self.parts[rank as usize];
        (self.map.base().as_ptr().wrapping_add(at), len)
    }

    /// `len` bytes of `rank`'s part at `offset`, which the caller checked lie in it.
    fn at(&self, rank: u32, offset: u64, len: usize) -> *mut u8 {
        let (start, bytes) = self.part(rank);
        assert!(offset as usize + len <= bytes, "checked by Epoch::place");
        start.wrapping_add(offset as usize)
    }

    /// Takes `rank`'s passive-target lock if it is free for `exclusive`; else false.
    pub fn try_lock(&self, rank: u32, exclusive: bool) -> bool {
        let word = &self.control(rank).lock;
        let now = word.load(Ordering::Relaxed);
        if exclusive {
            if now & !WAITING == 0 {
                return word
                    .compare_exchange(now, EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok();
            }
            if now & WAITING == 0 {
                word.fetch_or(WAITING, Ordering::Relaxed);
            }
            return false;
        }
        now & (EXCLUSIVE | WAITING) == 0
            && word
                .compare_exchange(now, now + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    pub fn unlock(&self, rank: u32, exclusive: bool) {
        let word = &self.control(rank).lock;
        if exclusive {
            // Keeps a waiting bit another exclusive request raised meanwhile.
            word.fetch_and(WAITING, Ordering::Release);
        } else {
            word.fetch_sub(1, Ordering::Release);
        }
    }

    /// Runs `f` holding `rank`'s accumulate lock; `plain` where `f` works in plain loads and
    /// stores, which then switches the lock to plain mode (see the module).
    fn accumulating<R>(&self, rank: u32, plain: bool, f: impl FnOnce() -> R) -> Result<R, Cause> {
        let word = &self.control(rank).accumulate;
        let mode = if plain { PLAIN } else { 0 };
        let mut spins = 0u32;
        let before = loop {
            let now = word.load(Ordering::Relaxed);
            if now & LOCKED == 0
                && word
                    .compare_exchange_weak(
                        now,
                        now | LOCKED | mode,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                break now;
            }
            spin(&mut spins)?;
        };
        // Until the atomics are known to be done, unlocking puts the mode back as it was.
        let unlock = Unlock {
            word,
            to: Cell::new(before),
        };
        if plain && self.lock_free && before & PLAIN == 0 {
            barrier::run()?;
            for other in 0..self.parts.len() as u32 {
                let raised = &self.control(other).lock_free.0;
                let mut spins = 0u32;
                while raised.load(Ordering::Acquire) != 0 {
                    spin(&mut spins)?;
                }
            }
        }
        unlock.to.set(mode);
        Ok(f())
    }

    /// Runs `f`, which applies CPU atomics only, without `rank`'s accumulate lock where the
    /// lock is in atomic mode, else holding it (see the module).
    fn atomically<R>(&self, rank: u32, f: impl FnOnce() -> R) -> Result<R, Cause> {
        if self.lock_free {
            let mine = &self.control(self.me).lock_free.0;
            mine.store(1, Ordering::Relaxed);
            // The flag's store is ordered before the word's load by the fence that a plain
            // holder's barrier runs on this CPU; the compiler must not reorder them either.
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            // Lowers the flag however this ends (`f` unwinding included): a holder may be
            // waiting for it, and with Release publishes the atomic to that holder.
            let lowered = Lower(mine);
            if self.control(rank).accumulate.load(Ordering::Acquire) == 0 {
                return Ok(f());
            }
            // Lowered before waiting for the lock, which its holder may hold until it falls.
            drop(lowered);
        }
        self.accumulating(rank, false, f)
    }

    pub fn put(&self, rank: u32, offset: u64, data: &[u8]) {
        let to = self.at(rank, offset, data.len());
        // SAFETY: the bytes lie in the rank's part of the mapping (`at`); MPI's rules make
        // the program keep conflicting accesses apart, as for any shared memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), to, data.len()) };
    }

    pub fn get(&self, rank: u32, offset: u64, into: &mut [u8]) {
        let from = self.at(rank, offset, into.len());
        // SAFETY: as in `put`; `into` is the origin's own memory.
        unsafe { std::ptr::copy_nonoverlapping(from, into.as_mut_ptr(), into.len()) };
    }

    /// `target = incoming ∘ target`, atomically per element; `old` gets the values before.
    /// `element` is `datatype`'s code (`operation::element_code`).
    pub fn accumulate(
        &self,
        rank: u32,
        offset: u64,
        op: AccumulateOperation,
        (datatype, element): (Datatype, u8),
        incoming: &[u8],
        old: Option<&mut [u8]>,
    ) -> Result<(), Cause> {
        let at = self.at(rank, offset, incoming.len());
        if incoming.is_empty() {
            // Nothing to apply: neither the lock nor the barrier a plain holder may run.
            return Ok(());
        }
        if incoming.len() == datatype.size() && atomic::fits(incoming.len()) {
            let integer = operation::is_integer(element);
            // SAFETY: the element lies in the rank's part (`at`), aligned to its size (parts
            // start on a cache line, elements at whole elements into them), and concurrent
            // accumulates on it are atomics or wait for them (`atomically`, `accumulating`).
            let apply = || unsafe { atomic::accumulate(at, op, datatype, integer, incoming, old) };
            return self.atomically(rank, apply);
        }
        self.accumulating(rank, true, || {
            // SAFETY: the bytes lie in the rank's part (`at`), and every accumulate on it
            // holds its accumulate lock or has ended its atomics (`accumulating`), so no
            // other accumulate touches them meanwhile.
            let target = unsafe { std::slice::from_raw_parts_mut(at, incoming.len()) };
            if let Some(old) = old {
                old.copy_from_slice(target);
            }
            op.apply(datatype, incoming, target);
        })
    }

    /// Stores `swap` if the element equals `compare`, atomically; `old` gets it as it was.
    pub fn compare_and_swap(
        &self,
        rank: u32,
        offset: u64,
        compare: &[u8],
        swap: &[u8],
        old: &mut [u8],
    ) -> Result<(), Cause> {
        let at = self.at(rank, offset, swap.len());
        if atomic::fits(swap.len()) {
            // SAFETY: as for the atomics in `accumulate`.
            let swapped = || unsafe { atomic::compare_and_swap(at, compare, swap, old) };
            return self.atomically(rank, swapped);
        }
        self.accumulating(rank, true, || {
            // SAFETY: as in `accumulate`.
            let target = unsafe { std::slice::from_raw_parts_mut(at, swap.len()) };
            old.copy_from_slice(target);
            if target == compare {
                target.copy_from_slice(swap);
            }
        })
    }
}

/// Lowers a rank's lock-free flag when its atomics return or unwind.
struct Lower<'a>(&'a AtomicU32);

impl Drop for Lower<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Releases an accumulate lock when its holder's work returns or unwinds, leaving the word
/// in the mode `to`.
struct Unlock<'a> {
    word: &'a AtomicU32,
    to: Cell<u32>,
}

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.word.store(self.to.get(), Ordering::Release);
    }
}

/// One step of a wait for another rank's lock or flag: the PML's progress now and then,
/// which notices a peer that died holding it (and fails this call rather than spin forever),
/// and the core to others where ranks share cores.
fn spin(spins: &mut u32) -> Result<(), Cause> {
    *spins += 1;
    if spins.is_multiple_of(PROGRESS_SPINS) {
        with_engine_or_lent(|e| e.progress())?;
    }
    if spins.is_multiple_of(SPINS) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
    Ok(())
}

/// The global memory barrier of the lock's protocol: Linux's `membarrier`, expedited, which
/// runs a full memory fence on every CPU that runs a thread of a registered process.
pub(super) mod barrier {
    use std::sync::OnceLock;

    use crate::error::Cause;
    use crate::window::WindowFault;

    /// Registers this process for the barrier, once; whether it is.
    pub fn registered() -> bool {
        static REGISTERED: OnceLock<bool> = OnceLock::new();
        *REGISTERED.get_or_init(pml::membarrier::register_global_expedited)
    }

    /// Runs the barrier. Only after every rank `registered`.
    pub fn run() -> Result<(), Cause> {
        pml::membarrier::global_expedited().map_err(|error| {
            Cause::Window(WindowFault::Unsupported(format!(
                "the memory barrier that orders accumulates failed after it was registered: {error}"
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_exclusive_request_keeps_new_shared_holders_out() {
        let name = format!("mpirt-test-direct-{}", std::process::id());
        let map =
            SharedMapping::create(&name, header(1).unwrap() + LINE).expect("a /dev/shm mapping");
        SharedMapping::remove(&name).expect("remove the name");
        let direct = Direct::new(map, vec![(header(1).unwrap(), LINE)], 0, false);
        assert!(direct.try_lock(0, false), "a first shared holder");
        assert!(
            !direct.try_lock(0, true),
            "exclusive beside a shared holder"
        );
        assert!(
            !direct.try_lock(0, false),
            "a shared holder overtook a waiting exclusive"
        );
        direct.unlock(0, false);
        assert!(direct.try_lock(0, true), "the waiting exclusive request");
        assert!(!direct.try_lock(0, false));
        direct.unlock(0, true);
        assert!(direct.try_lock(0, false), "shared once nobody waits");
    }

    /// An accumulate of no elements touches nothing, so it neither waits for the lock (held
    /// here: a wait would end, without an engine, in the progress's error) nor runs the
    /// barrier.
    #[test]
    fn an_empty_accumulate_returns_at_once() {
        let name = format!("mpirt-test-direct-empty-{}", std::process::id());
        let map =
            SharedMapping::create(&name, header(1).unwrap() + LINE).expect("a /dev/shm mapping");
        SharedMapping::remove(&name).expect("remove the name");
        let direct = Direct::new(map, vec![(header(1).unwrap(), LINE)], 0, true);
        direct
            .control(0)
            .accumulate
            .store(LOCKED, Ordering::Relaxed);
        let sum = AccumulateOperation::System(crate::collective::SystemOperation::sum());
        let u64s = crate::datatype::datatype_of::<u64>();
        let element = (
            u64s,
            operation::element_code(u64s).expect("u64 accumulates"),
        );
        assert_eq!(direct.accumulate(0, 0, sum, element, &[], None), Ok(()));
        assert_eq!(
            direct.accumulate(0, 0, sum, element, &[], Some(&mut [])),
            Ok(())
        );
    }

    /// While rank 0 holds the accumulate lock for a plain operation, rank 1's atomic on the
    /// same element waits for it: rank 0 watches the element, inside the lock, for a second
    /// after rank 1 started its atomic (a race the hammering test below meets only where the
    /// two threads happen to run at once). Left out of the model checks' build (the feature
    /// `model-check`): its threads reach the engine's thread-local mark (`crate::sync`),
    /// shuttle's there, which lives only inside shuttle's scheduler.
    #[cfg(not(feature = "model-check"))]
    #[test]
    fn an_atomic_waits_for_a_plain_holder() {
        use std::sync::atomic::AtomicBool;
        if !barrier::registered() {
            println!("skipped: membarrier's global expedited command is not available here");
            return;
        }
        let name = format!("mpirt-test-direct-held-{}", std::process::id());
        let first = header(2).unwrap();
        let bytes = first + 2 * LINE;
        let parts = vec![(first, LINE), (first + LINE, LINE)];
        let _made = SharedMapping::create(&name, bytes).expect("a /dev/shm mapping");
        let opened = std::sync::Barrier::new(3);
        let (holding, trying) = (AtomicBool::new(false), AtomicBool::new(false));
        let sum = AccumulateOperation::System(crate::collective::SystemOperation::sum());
        let u64s = crate::datatype::datatype_of::<u64>();
        let element = (
            u64s,
            operation::element_code(u64s).expect("u64 accumulates"),
        );
        let seen = std::thread::scope(|s| {
            let holder = s.spawn(|| {
                let map = SharedMapping::open(&name, bytes).expect("open the mapping");
                let direct = Direct::new(map, parts.clone(), 0, true);
                opened.wait();
                let (at, _) = direct.part(0);
                let watch = || {
                    holding.store(true, Ordering::Release);
                    while !trying.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    let since = std::time::Instant::now();
                    // SAFETY: the first u64 of rank 0's part; rank 1 changes it only with
                    // an atomic, and a volatile load of an aligned u64 does not tear.
                    let read = || unsafe { std::ptr::read_volatile(at.cast::<u64>()) };
                    while read() == 0 && since.elapsed() < std::time::Duration::from_secs(1) {
                        std::thread::yield_now();
                    }
                    read()
                };
                loop {
                    match direct.accumulating(0, true, watch) {
                        Err(Cause::NotInitialized) => continue,
                        seen => break seen.expect("the lock"),
                    }
                }
            });
            s.spawn(|| {
                let map = SharedMapping::open(&name, bytes).expect("open the mapping");
                let direct = Direct::new(map, parts.clone(), 1, true);
                opened.wait();
                while !holding.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                trying.store(true, Ordering::Release);
                let one = 1u64.to_ne_bytes();
                while let Err(cause) = direct.accumulate(0, 0, sum, element, &one, None) {
                    assert_eq!(cause, Cause::NotInitialized, "an accumulate failed");
                }
            });
            opened.wait();
            SharedMapping::remove(&name).expect("remove the name");
            holder.join().expect("the holder")
        });
        assert_eq!(seen, 0, "an atomic went past a plain holder of the lock");
    }

    /// Two ranks' views of one mapping, on two threads: rank 0 adds ones over three elements
    /// (the lock, in plain loads and stores) while rank 1 adds one to the first element (a CPU
    /// atomic, lock-free while the word is in atomic mode), back to back: no increment is lost.
    #[test]
    fn atomics_and_plain_holders_lose_no_increment() {
        const ROUNDS: u64 = 100_000;
        const LONG: usize = 3;
        if !barrier::registered() {
            println!("skipped: membarrier's global expedited command is not available here");
            return;
        }
        let name = format!("mpirt-test-direct-mixed-{}", std::process::id());
        let first = header(2).unwrap();
        let bytes = first + 2 * LINE;
        let parts = vec![(first, LINE), (first + LINE, LINE)];
        let made = SharedMapping::create(&name, bytes).expect("a /dev/shm mapping");
        let opened = std::sync::Barrier::new(3);
        let sum = AccumulateOperation::System(crate::collective::SystemOperation::sum());
        let u64s = crate::datatype::datatype_of::<u64>();
        let element = (
            u64s,
            operation::element_code(u64s).expect("u64 accumulates"),
        );
        std::thread::scope(|s| {
            for me in 0..2u32 {
                let (name, parts, opened) = (&name, parts.clone(), &opened);
                s.spawn(move || {
                    let map = SharedMapping::open(name, bytes).expect("open the mapping");
                    let direct = Direct::new(map, parts, me, true);
                    opened.wait();
                    let ones = [1u64; LONG].map(u64::to_ne_bytes).concat();
                    for _ in 0..ROUNDS {
                        let incoming = if me == 0 { &ones[..] } else { &ones[..8] };
                        // A wait that outlasts `PROGRESS_SPINS` asks for the engine's
                        // progress, which a unit test has not: nothing was applied then, so
                        // the rank tries again.
                        while let Err(cause) = direct.accumulate(0, 0, sum, element, incoming, None)
                        {
                            assert_eq!(cause, Cause::NotInitialized, "an accumulate failed");
                        }
                    }
                });
            }
            opened.wait();
            SharedMapping::remove(&name).expect("remove the name");
        });
        let direct = Direct::new(made, parts, 0, true);
        let (at, _) = direct.part(0);
        let mut counts = [0u64; LONG];
        // SAFETY: the part holds `LONG` u64s (a line), and both threads have ended.
        unsafe { std::ptr::copy_nonoverlapping(at.cast::<u64>(), counts.as_mut_ptr(), LONG) };
        assert_eq!(
            counts,
            [2 * ROUNDS, ROUNDS, ROUNDS],
            "an increment was lost between atomics and a plain holder"
        );
    }
}
