//! Context ids: the communicator part of every message's envelope. Each process tracks the ids
//! its live communicators use; a new communicator takes the lowest id no member uses (agreed
//! by an all-reduce of the members' bitmaps), and gives it back when its last handle drops.
//!
//! Members of disjoint communicators made by one split may share an id: a process holds at
//! most one live communicator per id, which is all that keeps messages of different
//! communicators apart.

use std::cell::RefCell;

use crate::collective::{self, SystemOperation};
use crate::communicator::CommData;
use crate::error::{Cause, Error};

/// Words of the bitmap: 64 * 64 = 4096 context ids.
pub(crate) const WORDS: usize = 64;

/// The world communicator's id, held for the whole run.
pub(crate) const WORLD: u32 = 0;
/// `MPI_COMM_SELF`'s id, held for the whole run: no communicator of two or more processes
/// takes it, so a process's messages to itself there match nothing else.
pub(crate) const SELF: u32 = 1;

thread_local! {
    static IN_USE: RefCell<[u64; WORDS]> = const {
        let mut bits = [0; WORDS];
        bits[0] = 1 << WORLD | 1 << SELF;
        RefCell::new(bits)
    };
}

/// The ids this process's communicators use, as a bitmap.
pub(crate) fn in_use() -> [u64; WORDS] {
    IN_USE.with(|bits| *bits.borrow())
}

/// The lowest id not in `used`, if any.
pub(crate) fn lowest_free(used: &[u64; WORDS]) -> Option<u32> {
    used.iter()
        .enumerate()
        .find(|(_, word)| **word != u64::MAX)
        .map(|(i, word)| (i * 64) as u32 + word.trailing_ones())
}

/// A context id in use by one communicator of this process; freed on drop.
#[derive(Debug)]
pub(crate) struct ContextLease(u32);

impl ContextLease {
    pub fn id(&self) -> u32 {
        self.0
    }
}

impl Drop for ContextLease {
    fn drop(&mut self) {
        let id = self.0 as usize;
        // A communicator kept in a thread-local may drop after this map: nothing to free then.
        let _ = IN_USE.try_with(|bits| bits.borrow_mut()[id / 64] &= !(1 << (id % 64)));
    }
}

/// The lowest id that no member of `parent` uses: a collective over `parent`.
pub(crate) fn agree(parent: &CommData) -> Result<u32, Error> {
    let mine = in_use();
    let mut all = [0u64; WORDS];
    collective::all_reduce_on(
        parent,
        &mine[..],
        &mut all[..],
        SystemOperation::bitwise_or(),
    )?;
    lowest_free(&all).ok_or_else(|| Error::new("context id agreement", Cause::ContextIdsExhausted))
}

/// Takes `id` (from [`agree`]) for a communicator of this process.
pub(crate) fn lease(id: u32) -> ContextLease {
    IN_USE.with(|bits| bits.borrow_mut()[id as usize / 64] |= 1 << (id % 64));
    ContextLease(id)
}
