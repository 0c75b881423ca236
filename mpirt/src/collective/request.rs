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
    /// The slot's execution, while it runs: the pointer `progress` holds a copy of (once
    /// registered), and the only way to it.
    execution: Option<NonNull<Execution<'a>>>,
    /// Whether `progress` holds the execution: not while its first round is posted.
    registered: bool,
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
    /// Starts `execution`: posts its first round, as a C MPI's non-blocking collectives do,
    /// so that what a step can move without waiting (eager sends, receives the peers'
    /// messages land in) moves while the program computes, not only once it tests or waits.
    /// Only an execution that goes on past that step is registered with `progress`: one that
    /// finished (a rank that only sends, its sends taken at once) or failed has nothing left
    /// for other waits to step, and skips the registration and the progress hook's churn.
    pub fn start(execution: Execution<'a>, operation: &'static str) -> Self {
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
        let mut running = Running {
            slot,
            execution,
            registered: false,
        };
        if !running.poll(false) {
            // Marked first: should `register` unwind part way, the drop still takes the
            // execution off the list before its slot goes back to the pool.
            running.registered = true;
            // SAFETY: the execution stays in the slot, at its address, until `release` or
            // `abandon`, which unregister it first; this value touches it only through the
            // registered pointer's copies, one call at a time, and the request's scope keeps
            // its buffers alive until it finishes.
            unsafe { progress::register(running.execution.expect("unfinished")) };
        }
        running
    }

    /// Advances the schedule (to its end with `block`); whether it has finished.
    pub fn poll(&mut self, block: bool) -> bool {
        let Some(execution) = self.execution else {
            return true;
        };
        // SAFETY: the execution is valid until `release` (see `start`), and no other reference
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
            self.unregister(execution);
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
            self.unregister(execution);
            // SAFETY: the slot is valid (see `slot`), and nothing else refers to its
            // execution now that it is unregistered.
            let execution = unsafe { (*addr_of_mut!((*self.slot.as_ptr()).execution)).take() };
            std::mem::forget(execution);
        }
    }

    /// Has `progress` forget the execution, if it holds it.
    fn unregister(&mut self, execution: NonNull<Execution<'a>>) {
        if std::mem::take(&mut self.registered) {
            progress::unregister(execution);
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

#[cfg(test)]
mod tests {
    use super::super::calls;
    use super::*;
    use crate::backend::hooks;
    use crate::communicator::CommData;

    /// Starts an immediate barrier on `comm` as `immediate` does.
    fn barrier(comm: &CommData) -> Running<'static> {
        let call = calls::barrier(comm).expect("a barrier's plan");
        // SAFETY: a barrier lends no buffers.
        Running::start(unsafe { call.start(comm) }, "immediate barrier")
    }

    /// A collective that finished in the step that posts its first round (a barrier of one
    /// rank has nothing to send) is never registered for other waits to step: no progress
    /// hook comes and goes.
    #[test]
    fn a_collective_finished_as_it_starts_registers_no_hook() {
        let before = hooks::registered_so_far();
        let mut running = barrier(&CommData::world(0, 1));
        assert_eq!(hooks::registered_so_far(), before, "a hook was registered");
        assert!(running.poll(false));
        assert!(running.outcome().is_ok());
        assert!(!hooks::any());
    }

    /// One whose first step fails (no engine to post on, in a unit test) is not registered
    /// either, and its request reports the failure with the operation's name.
    #[test]
    fn a_collective_failed_as_it_starts_registers_no_hook_and_reports() {
        let before = hooks::registered_so_far();
        let mut running = barrier(&CommData::world(0, 2));
        assert_eq!(hooks::registered_so_far(), before, "a hook was registered");
        assert!(running.poll(true));
        let error = running.outcome().expect_err("no engine to post on");
        assert!(error.to_string().contains("immediate barrier"), "{error}");
        assert!(!hooks::any());
    }
}
