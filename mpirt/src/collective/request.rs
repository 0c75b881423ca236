//! The collective side of a request: an immediate collective's schedule, on the heap, that
//! advances each time its request (or any other wait of this thread) is tested or waited on;
//! or, where its transfers all go in one round, those transfers (`schedule::direct`), which
//! nothing but the transport moves on.

use std::ptr::{addr_of, addr_of_mut, NonNull};

use pml::Handle;

use crate::communicator::CommData;
use crate::error::{Cause, Error};

use super::calls::{Begun, Call};
use super::progress;
use super::schedule::{Direct, Execution, Room, Stepped};

/// An immediate collective in progress, then its outcome: a pointer to its [`Slot`], so that
/// a request holding it stays as small as a message's.
pub(crate) struct Running<'a> {
    /// Valid and initialized until this is dropped (but for its room, which its direct
    /// call writes before it reads); the slot's memory comes from this thread's kept slots
    /// (`slots`) and goes back there. Only reached through raw places, never a reference to
    /// the whole slot or its execution, so that `execution` stays usable.
    slot: NonNull<Slot<'a>>,
    /// The slot's execution, while it runs: the pointer `progress` holds a copy of (once
    /// registered), and the only way to it.
    execution: Option<NonNull<Execution<'a>>>,
    /// Whether `progress` holds the execution: not while its first round is posted.
    registered: bool,
    /// Whether the slot's direct call runs (`execution` is then `None`).
    direct: bool,
    /// Whether the slot's memory must not be used again: an abandoned direct call's receives
    /// may still land on its room.
    leaked: bool,
}

/// Where an immediate collective's execution, or its direct call, stays put while registered
/// with `progress` (whose hook steps it whenever the PML moves) or while its transfers land on
/// the slot's room, as its request moves.
struct Slot<'a> {
    /// Until the collective finishes (or is abandoned).
    execution: Option<Execution<'a>>,
    /// Instead of an execution, until the collective finishes (or hands over to one).
    direct: Option<Direct<'a>>,
    outcome: Option<Result<(), Error>>,
    operation: &'static str,
    /// A direct call's transfers in flight and scratch: never written as the slot is, so
    /// that starting a call costs no copy of it.
    room: Room,
}

impl<'a> Running<'a> {
    /// Starts `call` on `comm`: posts its first round, as a C MPI's non-blocking collectives
    /// do, so that what a step can move without waiting (eager sends, receives the peers'
    /// messages land in) moves while the program computes, not only once it tests or waits.
    /// A call whose transfers all go in that round goes direct (`schedule::direct`), and is
    /// never registered with `progress`: nothing is left to post. Of the others, only an
    /// execution that goes on past that step is registered: one that finished (a rank that
    /// only sends, its sends taken at once) or failed has nothing left for other waits to
    /// step, and skips the registration and the progress hook's churn.
    ///
    /// # Safety
    /// As for `Call::start`: the call's buffers stay valid (and the receive buffer otherwise
    /// untouched) until this is finished or dropped.
    pub unsafe fn start(call: Call<'a>, comm: &CommData, operation: &'static str) -> Self {
        let slot = slots::take().cast::<Slot<'a>>();
        // SAFETY: `slots::take` gives memory for a slot (of any lifetime: lifetimes do not
        // change a layout), unused; its room is the call's alone until the slot goes back,
        // and the slot goes back only once nothing lands there (`Drop`, `abandon`).
        let begun = unsafe {
            let room = NonNull::new_unchecked(addr_of_mut!((*slot.as_ptr()).room));
            call.begin(comm, room)
        };
        let (execution, direct) = match begun {
            Begun::Direct(direct) => (None, Some(direct)),
            Begun::Execution(execution) => (Some(execution), None),
        };
        let is_direct = direct.is_some();
        // SAFETY: every field but the room written before any read (the direct call writes
        // the room before it reads it).
        unsafe {
            let slot = slot.as_ptr();
            addr_of_mut!((*slot).execution).write(execution);
            addr_of_mut!((*slot).direct).write(direct);
            addr_of_mut!((*slot).outcome).write(None);
            addr_of_mut!((*slot).operation).write(operation);
        }
        let mut running = Running {
            slot,
            execution: None,
            registered: false,
            direct: is_direct,
            leaked: false,
        };
        if is_direct {
            let started = running.direct_call().start();
            running.after_direct(started, false);
            return running;
        }
        // SAFETY: just written; the execution's field alone is borrowed, once.
        let execution = unsafe { (*addr_of_mut!((*slot.as_ptr()).execution)).as_mut() };
        running.execution = execution.map(NonNull::from);
        running.go_on_registered();
        running
    }

    /// Steps the execution as it starts, and registers it with `progress` unless that step
    /// finished it.
    fn go_on_registered(&mut self) {
        if !self.poll(false) {
            // Marked first: should `register` unwind part way, the drop still takes the
            // execution off the list before its slot goes back to the pool.
            self.registered = true;
            // SAFETY: the execution stays in the slot, at its address, until `release` or
            // `abandon`, which unregister it first; this value touches it only through the
            // registered pointer's copies, one call at a time, and the request's scope keeps
            // its buffers alive until it finishes.
            unsafe { progress::register(self.execution.expect("unfinished")) };
        }
    }

    /// The slot's direct call, while it runs.
    fn direct_call(&mut self) -> &mut Direct<'a> {
        debug_assert!(self.direct);
        // SAFETY: the slot is valid (see `slot`); a field apart from the execution, which
        // nothing else refers to (a direct call is never registered).
        let direct = unsafe { (*addr_of_mut!((*self.slot.as_ptr()).direct)).as_mut() };
        direct.expect("a direct call runs")
    }

    /// Where the direct call's step leaves it; whether the collective finished. A call whose
    /// receive named another algorithm goes on as its execution, stepped (to its end with
    /// `block`) and registered as a started one is.
    fn after_direct(&mut self, stepped: Result<Stepped, Cause>, block: bool) -> bool {
        let outcome = match stepped {
            Ok(Stepped::Pending) => return false,
            Ok(Stepped::Done) => Ok(()),
            Err(cause) => Err(Error::new(self.operation(), cause)),
            Ok(Stepped::HandOver) => {
                self.direct = false;
                // SAFETY: the slot is valid (see `slot`); fields apart from each other, and
                // the execution's borrowed once, to keep its address.
                let execution = unsafe {
                    let slot = self.slot.as_ptr();
                    let direct = (*addr_of_mut!((*slot).direct)).take();
                    let execution = direct.expect("a direct call runs").hand_over();
                    let place = &mut *addr_of_mut!((*slot).execution);
                    NonNull::from(place.insert(execution))
                };
                self.execution = Some(execution);
                if block {
                    return self.poll(true);
                }
                self.go_on_registered();
                return self.execution.is_none();
            }
        };
        self.release();
        // SAFETY: the slot is valid (see `slot`); a field apart from the others.
        unsafe { *addr_of_mut!((*self.slot.as_ptr()).outcome) = Some(outcome) };
        true
    }

    /// Advances the schedule (to its end with `block`); whether it has finished.
    pub fn poll(&mut self, block: bool) -> bool {
        if self.direct {
            let stepped = self.direct_call().step(block);
            return self.after_direct(stepped, block);
        }
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

    /// The handles of a direct call's transfers still in flight, for a wait on several
    /// requests (an execution's steps are the progress hook's, which tells such a wait when
    /// one finishes: `progress::take_finished`).
    pub fn awaited(&mut self, into: &mut Vec<Handle>) {
        if self.direct {
            self.direct_call().awaited(into);
        }
    }

    /// How the finished collective ended.
    pub fn outcome(&mut self) -> Result<(), Error> {
        // SAFETY: the slot is valid (see `slot`); a field apart from the execution.
        let outcome = unsafe { (*addr_of_mut!((*self.slot.as_ptr()).outcome)).take() };
        outcome.expect("a finished collective")
    }

    /// Unregisters and drops the execution (taking back whatever it has in flight), or the
    /// direct call.
    fn release(&mut self) {
        if std::mem::take(&mut self.direct) {
            // SAFETY: the slot is valid (see `slot`), and nothing else refers to its direct
            // call.
            unsafe { *addr_of_mut!((*self.slot.as_ptr()).direct) = None };
        }
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
    /// leaks, never in the slot; a direct call's land on the slot's room, whose memory
    /// is then never used again).
    pub fn abandon(&mut self) {
        if std::mem::take(&mut self.direct) {
            // SAFETY: the slot is valid (see `slot`), and nothing else refers to its direct
            // call.
            let direct = unsafe { (*addr_of_mut!((*self.slot.as_ptr()).direct)).take() };
            std::mem::forget(direct);
            self.leaked = true;
        }
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
        // SAFETY: the slot is valid and initialized (see `slot`; its room holds nothing
        // to drop), and its execution and direct call are gone, so nothing refers to it:
        // dropped in place, then its memory goes back unused, unless an abandoned direct
        // call's receives may still land on it.
        unsafe {
            self.slot.as_ptr().drop_in_place();
            if !self.leaked {
                slots::give_back(self.slot.cast());
            }
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
        unsafe { Running::start(call, comm, "immediate barrier") }
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
