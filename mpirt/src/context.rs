//! Context ids: the communicator part of every message's envelope. Each process tracks the ids
//! its live communicators use; a new communicator takes the lowest id no member uses (agreed
//! by an all-reduce of the members' bitmaps), and gives it back when its last handle drops.
//!
//! Members of disjoint communicators made by one split may share an id: a process holds at
//! most one live communicator per id, which is all that keeps messages of different
//! communicators apart.

use std::sync::{Mutex, MutexGuard, PoisonError};

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

/// How many ids communicators agree on (below 4096).
const AGREED_IDS: u32 = WORDS as u32 * 64;

/// The context id of a communicator's ranks on one host, which its hierarchical collectives
/// make of it (`collective::hierarchy`): above every agreed id, and made of the
/// communicator's own, so every member derives it alike and no live communicator of this
/// process has it.
pub(crate) fn host_part(id: u32) -> u32 {
    id + AGREED_IDS
}

/// The context id of a communicator's host leaders, as [`host_part`].
pub(crate) fn leaders_part(id: u32) -> u32 {
    id + 2 * AGREED_IDS
}

/// The ids this process's communicators use, whichever threads hold them (a communicator's
/// last handle may drop on another thread than the one that made it, see `crate::threads`).
static IN_USE: Mutex<[u64; WORDS]> = Mutex::new({
    let mut bits = [0; WORDS];
    bits[0] = 1 << WORLD | 1 << SELF;
    bits
});

/// The bitmap; each change is one store, so a thread that panicked holding it left it whole.
fn bits() -> MutexGuard<'static, [u64; WORDS]> {
    IN_USE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Held by a thread of this process while it makes a communicator, from before the agreement
/// on its context id until its lease is taken (see `creating`).
static CREATING: Mutex<()> = Mutex::new(());

/// Makes this thread's communicator creation the process's only one until the guard drops:
/// two threads agreeing on ids at once would each miss the id the other is about to take,
/// and could give two communicators one id. Creations from several threads of a process run
/// one at a time, so the program must order them alike on every rank (as MPI asks of one
/// communicator's collectives); MPICH's context-id mask, which contends for ids without
/// blocking, would lift that (ARCHITECTURE.md, "Threads").
pub(crate) fn creating() -> MutexGuard<'static, ()> {
    // A creation that panicked leaves nothing half-made behind this lock: the bitmap has its
    // own.
    CREATING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The ids this process's communicators use, as a bitmap.
pub(crate) fn in_use() -> [u64; WORDS] {
    *bits()
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
        bits()[id / 64] &= !(1 << (id % 64));
    }
}

/// What a member brings to the agreement on a new communicator besides the ids it uses:
/// whether its own arguments were valid, and a fingerprint of the arguments every member must
/// pass alike (0 for calls whose arguments may differ, such as a split's colors). A member
/// whose arguments are bad then fails the call with the others, rather than leaving them
/// waiting, and members that pass different grids are told so.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Proposal {
    pub valid: bool,
    pub fingerprint: u64,
}

/// The lowest id that no member of `parent` uses, once every member's proposal holds: a
/// collective over `parent`.
pub(crate) fn agree(parent: &CommData, proposal: Proposal) -> Result<u32, Error> {
    let used = agree_on_used(parent, proposal)?;
    lowest_free(&used).ok_or_else(|| Error::new("context id agreement", Cause::ContextIdsExhausted))
}

/// The ids some member of `parent` uses, once every member's proposal holds: a collective over
/// `parent`. An inter-communicator takes an id free in both its groups, each group's set
/// agreed this way.
pub(crate) fn agree_on_used(parent: &CommData, proposal: Proposal) -> Result<[u64; WORDS], Error> {
    let fail = |cause| Error::new("context id agreement", cause);
    let mut mine = [0u64; WORDS + 3];
    mine[..WORDS].copy_from_slice(&in_use());
    // With an OR alone: a set bit says some member was not valid; a fingerprint bit set both
    // in some member's fingerprint and in another's complement says they differ.
    mine[WORDS] = u64::from(!proposal.valid);
    mine[WORDS + 1] = proposal.fingerprint;
    mine[WORDS + 2] = !proposal.fingerprint;
    let mut all = [0u64; WORDS + 3];
    collective::all_reduce_on(
        parent,
        &mine[..],
        &mut all[..],
        SystemOperation::bitwise_or(),
    )?;
    if all[WORDS] != 0 {
        return Err(fail(Cause::PeerArguments(
            "another rank passed arguments that are not valid (its own error says which)",
        )));
    }
    if all[WORDS + 1] & all[WORDS + 2] != 0 {
        return Err(fail(Cause::PeerArguments(
            "the ranks passed different arguments where MPI needs the same on all",
        )));
    }
    Ok(all[..WORDS].try_into().expect("the bitmap's words"))
}

/// A fingerprint of `words` for [`Proposal`] (FNV-1a over their bytes).
pub(crate) fn fingerprint(words: impl IntoIterator<Item = i64>) -> u64 {
    bootstrap::fnv1a(words.into_iter().flat_map(i64::to_ne_bytes))
}

/// Takes `id` (from [`agree`]) for a communicator of this process.
pub(crate) fn lease(id: u32) -> ContextLease {
    bits()[id as usize / 64] |= 1 << (id % 64);
    ContextLease(id)
}
