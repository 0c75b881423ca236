//! Immediate collectives in flight advance one another. A collective posts its first round as
//! it starts (`request::Running::start` steps it once) and its next round only when it is
//! stepped; MPI lets ranks complete their requests in any order, so whoever waits (any
//! request's `wait` or `test`, a blocking collective, a blocking receive) also steps every
//! immediate collective of this thread: while any is in flight, one progress hook (see
//! `backend::hooks`) steps them all whenever the PML moves. One that finished in its first
//! step is never registered.

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;

use super::schedule::Execution;
use crate::backend::hooks::{self, HookId};

thread_local! {
    /// The executions of unfinished immediate collectives, owned by their requests.
    static IN_FLIGHT: RefCell<Vec<NonNull<Execution<'static>>>> = const { RefCell::new(Vec::new()) };
    /// The progress hook that steps them, while there is any.
    static HOOK: Cell<Option<HookId>> = const { Cell::new(None) };
    /// The execution its owner is stepping now, which the hook leaves alone.
    static CURRENT: Cell<*const ()> = const { Cell::new(std::ptr::null()) };
    /// Whether the hook saw an execution finish (or fail) since `take_finished`.
    static FINISHED: Cell<bool> = const { Cell::new(false) };
}

/// Address of an execution, to tell it from the others.
fn address(execution: *const Execution<'_>) -> *const () {
    execution.cast()
}

/// Lets other executions' steps, and every wait, advance `execution` too.
///
/// # Safety
/// `execution` must stay valid, at its address, and not be accessed but through this
/// pointer's copies (its owner included, one access at a time) until [`unregister`]; its
/// buffers must stay valid as long. The lifetime is erased here: the owner's scope keeps it.
pub(crate) unsafe fn register(execution: NonNull<Execution<'_>>) {
    IN_FLIGHT.with(|list| list.borrow_mut().push(execution.cast()));
    if HOOK.with(Cell::get).is_none() {
        HOOK.with(|hook| hook.set(Some(hooks::register(advance_all))));
    }
}

pub(crate) fn unregister(execution: NonNull<Execution<'_>>) {
    let gone = address(execution.as_ptr());
    // During thread-local teardown there is nothing left to step.
    let _ = IN_FLIGHT.try_with(|list| {
        let mut list = list.borrow_mut();
        list.retain(|p| address(p.as_ptr()) != gone);
        if list.is_empty() {
            if let Some(id) = HOOK.with(Cell::take) {
                hooks::unregister(id);
            }
        }
    });
}

/// Runs `step` as `me`'s owner stepping it: the hook then leaves `me` alone, whose only
/// access is the owner's.
pub(crate) fn stepping<R>(me: *const Execution<'_>, step: impl FnOnce() -> R) -> R {
    /// Puts the execution stepped before back when `step` returns or unwinds.
    struct Restore(*const ());
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|current| current.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|current| current.replace(address(me))));
    step()
}

/// The progress hook: steps every registered execution but the one its owner is stepping,
/// as far as each goes without blocking; their errors stay with them, for their own `wait`
/// or `test` to report. Each is looked up by position, without holding the list.
fn advance_all() {
    let current = CURRENT.with(Cell::get);
    let mut i = 0;
    while let Some(other) = IN_FLIGHT.with(|list| list.borrow().get(i).copied()) {
        i += 1;
        if address(other.as_ptr()) == current {
            continue;
        }
        // SAFETY: registered executions are valid until unregistered (`register`'s
        // contract); the one whose owner is stepping it is skipped, and the others' owners
        // are not running (hooks run on the thread of the executions' requests, which never
        // leave it, during one of its mpirt calls: inside a PML call, or as the call lets go
        // of the shared engine's lock), so no other access is live.
        let other = unsafe { &mut *other.as_ptr() };
        // One that is over waits for its owner: stepped again, it would report finishing
        // again, and a wait for it would never sleep.
        if !other.is_over() && !matches!(other.step_alone(false), Ok(false)) {
            FINISHED.with(|finished| finished.set(true));
        }
    }
}

/// Whether the hook saw an immediate collective finish (or fail) since the last call: a
/// wait on a set of requests with collectives among them returns then, for its owner to
/// collect it.
pub(crate) fn take_finished() -> bool {
    FINISHED.with(Cell::take)
}
