//! The collective side of a request: an immediate collective's schedule, on the heap, that
//! advances each time its request (or any other wait of this thread) is tested or waited on.

use std::ptr::{addr_of, addr_of_mut, NonNull};

use crate::error::{Cause, Error};

use super::progress;
use super::schedule::Execution;

/// An immediate collective in progress, then its outcome: a pointer to its [`Slot`], so that
/// a request holding it stays as small as a message's.
pub(crate) struct Running<'a> {
    /// Valid and initialized until this is dropped; the slot's memory comes from this
    /// thread's kept slots (`slots`) and goes back there. Only reached through raw places,
    /// never a reference to the whole slot or its execution, so that `execution` stays
    /// usable.
    slot: NonNull<Slot<'a>>,
    /// The slot's execution, while it runs: the pointer `progress` holds a copy of, and
    /// the only way to it.
    execution: Option<NonNull<Execution<'a>>>,
}

/// Where an immediate collective's execution stays put while registered with `progress`
/// (whose hook steps it whenever the PML moves) and while its request moves.
struct Slot<'a> {
    /// Until the collective finishes (or is abandoned).
    execution: Option<Execution<'a>>,
    outcome: Option<Result<(), Error>>,
    operation: &'static str,
}

impl<'a> Running<'a> {
    pub fn new(execution: Execution<'a>, operation: &'static str) -> Self {
        let slot = slots::take();
        let slot = slot.cast::<Slot<'a>>();
        // SAFETY: `slots::take` gives memory for a slot (of any lifetime: lifetimes do not
        // change a layout), unused; written whole here before any read.
        unsafe {
            slot.as_ptr().write(Slot {
                execution: Some(execution),
                outcome: None,
                operation,
            })
        };
        // SAFETY: just written; the execution's field alone is borrowed, once.
        let execution = unsafe { (*addr_of_mut!((*slot.as_ptr()).execution)).as_mut() };
        let execution = execution.map(NonNull::from);
        // SAFETY: the execution stays in the slot, at its address, until `release` or
        // `abandon`, which unregister it first; this value touches it only through the
        // registered pointer's copies, one call at a time, and the request's scope keeps its
        // buffers alive until it finishes.
        unsafe { progress::register(execution.expect("just written")) };
        Running { slot, execution }
    }

    /// Advances the schedule (to its end with `block`); whether it has finished.
    pub fn poll(&mut self, block: bool) -> bool {
        let Some(execution) = self.execution else {
            return true;
        };
        // SAFETY: the execution is valid until `release` (see `new`), and no other reference
        // to it is live: `progress`'s hook steps it only on this thread (a collective request
        // is `!Send`, and `into_sendable` refuses it), during one of its mpirt calls (inside a
        // PML call, or at `Serialized` and `Multiple` as the call lets go of the shared
        // engine's lock: `hooks::defer`), and leaves it alone while this step runs
        // (`Execution::step` marks it as its owner's).
        let step = unsafe { &mut *execution.as_ptr() }.step(block);
        let outcome = match step {
            Ok(false) => return false,
            Ok(true) => Ok(()),
            Err(cause) => Err(Error::new(self.operation(), cause)),
        };
        self.release();
        // SAFETY: the slot is valid (see `slot`); a field apart from the execution.
        unsafe { *addr_of_mut!((*self.slot.as_ptr()).outcome) = Some(outcome) };
        true
    }

    /// How the finished collective ended.
    pub fn outcome(&mut self) -> Result<(), Error> {
        // SAFETY: the slot is valid (see `slot`); a field apart from the execution.
        let outcome = unsafe { (*addr_of_mut!((*self.slot.as_ptr()).outcome)).take() };
        outcome.expect("a finished collective")
    }

    /// Unregisters and drops the execution (taking back whatever it has in flight).
    fn release(&mut self) {
        if let Some(execution) = self.execution.take() {
            progress::unregister(execution);
            // SAFETY: the slot is valid (see `slot`), and nothing else refers to its
            // execution now that it is unregistered.
            unsafe { *addr_of_mut!((*self.slot.as_ptr()).execution) = None };
        }
    }

    /// For a request dropped unfinished, as the job ends: stops stepping the execution and
    /// leaves what it has in flight alone rather than wait for its transfers (its transfers
    /// land in the caller's buffers and in the execution's own heap buffers, which it
    /// leaks, never in the slot).
    pub fn abandon(&mut self) {
        if let Some(execution) = self.execution.take() {
            progress::unregister(execution);
            // SAFETY: the slot is valid (see `slot`), and nothing else refers to its
            // execution now that it is unregistered.
            let execution = unsafe { (*addr_of_mut!((*self.slot.as_ptr()).execution)).take() };
            std::mem::forget(execution);
        }
    }

    /// The collective's name, for messages.
    pub fn operation(&self) -> &'static str {
        // SAFETY: the slot is valid (see `slot`); a field apart from the execution.
        unsafe { *addr_of!((*self.slot.as_ptr()).operation) }
    }

    /// Collective requests cannot be cancelled (MPI forbids it).
    pub fn cancel(&self) -> Result<(), Error> {
        Err(Error::new(self.operation(), Cause::NotCancellable))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.release();
        // SAFETY: the slot is valid and initialized (see `slot`), and its execution is gone,
        // so nothing refers to it: dropped in place, then its memory goes back unused.
        unsafe {
            self.slot.as_ptr().drop_in_place();
            slots::give_back(self.slot.cast());
        }
    }
}

/// Slots' memory kept from one immediate collective for the next on this thread, so that a
/// call allocates none: its execution and outcome live in one.
mod slots {
    use std::cell::RefCell;
    use std::mem::MaybeUninit;
    use std::ptr::NonNull;

    use super::Slot;

    /// Memory for a slot of any lifetime (lifetimes do not change a layout).
    type Memory = MaybeUninit<Slot<'static>>;

    /// Slots kept per thread: as many as immediate collectives usually overlap; more are
    /// freed.
    const KEPT: usize = 16;

    thread_local! {
        // Boxed: each box's memory is what `take` hands out, and must not move as the
        // vector grows.
        #[allow(clippy::vec_box)]
        static FREE: RefCell<Vec<Box<Memory>>> = const { RefCell::new(Vec::new()) };
    }

    /// Memory for one slot, unused; [`give_back`] takes it back.
    pub fn take() -> NonNull<Memory> {
        let kept = FREE.try_with(|free| free.borrow_mut().pop()).ok().flatten();
        let memory = kept.unwrap_or_else(|| Box::new(MaybeUninit::uninit()));
        NonNull::from(Box::leak(memory))
    }

    /// # Safety
    /// `memory` came from [`take`], and nothing uses it any more (what it held is dropped).
    pub unsafe fn give_back(memory: NonNull<Memory>) {
        // SAFETY: from `take`'s `Box::leak`, as the caller promises; a `MaybeUninit` holds
        // nothing to drop.
        let memory = unsafe { Box::from_raw(memory.as_ptr()) };
        // During thread-local teardown the memory is simply freed.
        let _ = FREE.try_with(|free| {
            let mut free = free.borrow_mut();
            if free.len() < KEPT {
                free.push(memory);
            }
        });
    }
}
