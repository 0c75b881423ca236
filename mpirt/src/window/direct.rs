//! The shared-memory path: a window whose ranks all map its memory (every rank on one host)
//! is reached with loads, stores and CPU atomics, with no message and no help from the
//! target. The mapping starts with one cache line per rank for its locks, then each rank's
//! part.
//!
//! Passive-target locks are a reader-writer word per rank (exclusive bit, writer-waiting
//! bit, shared count): an exclusive request that must wait raises the waiting bit, which
//! keeps new shared holders out, so a stream of shared ones does not starve it.
//! Accumulates, `get_accumulate`, `fetch_and_op` and `compare_and_swap` on a rank's part
//! hold that rank's accumulate lock, a spin lock held for one element-wise operation, so
//! every accumulate on it is atomic with every other, whatever the operation and type.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pml::shared_mapping::SharedMapping;
use pml::Pml;

use super::operation::AccumulateOperation;
use crate::datatype::Datatype;
use crate::environment::with_engine_or_lent;
use crate::error::Cause;

/// Bytes of a rank's control line.
pub(super) const LINE: usize = 64;

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

/// A rank's control line.
#[repr(C)]
struct Control {
    lock: AtomicU64,
    accumulate: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Control>() <= LINE);

pub(super) struct Direct {
    map: SharedMapping,
    /// Each rank's part: its offset in the mapping and its bytes.
    parts: Vec<(usize, usize)>,
}

impl Direct {
    /// Over a mapping laid out as the module says, `parts` within it past the control
    /// lines, which start zeroed (unlocked).
    pub fn new(map: SharedMapping, parts: Vec<(usize, usize)>) -> Direct {
        debug_assert!(parts
            .iter()
            .all(|&(at, len)| at >= parts.len() * LINE && at + len <= map.len()));
        Direct { map, parts }
    }

    fn control(&self, rank: u32) -> &Control {
        let line = self.map.base().as_ptr().wrapping_add(rank as usize * LINE);
        // SAFETY: the mapping starts with a line per rank (`new`), page aligned, which every
        // process touches only through these atomics.
        unsafe { &*line.cast::<Control>() }
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

    /// Runs `f` holding `rank`'s accumulate lock.
    fn accumulating<R>(&self, rank: u32, f: impl FnOnce() -> R) -> Result<R, Cause> {
        let flag = &self.control(rank).accumulate;
        let mut spins = 0u32;
        while flag
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins.is_multiple_of(PROGRESS_SPINS) {
                with_engine_or_lent(|e| e.progress())?;
            }
            if spins.is_multiple_of(SPINS) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let out = f();
        flag.store(0, Ordering::Release);
        Ok(out)
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

    /// `target = incoming ∘ target`, atomically; `old` gets the values before.
    pub fn accumulate(
        &self,
        rank: u32,
        offset: u64,
        op: AccumulateOperation,
        datatype: Datatype,
        incoming: &[u8],
        old: Option<&mut [u8]>,
    ) -> Result<(), Cause> {
        let at = self.at(rank, offset, incoming.len());
        self.accumulating(rank, || {
            // SAFETY: the bytes lie in the rank's part (`at`), and every accumulate on it
            // holds its accumulate lock, so no other accumulate touches them meanwhile.
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
        self.accumulating(rank, || {
            // SAFETY: as in `accumulate`.
            let target = unsafe { std::slice::from_raw_parts_mut(at, swap.len()) };
            old.copy_from_slice(target);
            if target == compare {
                target.copy_from_slice(swap);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_exclusive_request_keeps_new_shared_holders_out() {
        let name = format!("mpirt-test-direct-{}", std::process::id());
        let map = SharedMapping::create(&name, 2 * LINE).expect("a /dev/shm mapping");
        SharedMapping::remove(&name).expect("remove the name");
        let direct = Direct::new(map, vec![(LINE, LINE)]);
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
}
