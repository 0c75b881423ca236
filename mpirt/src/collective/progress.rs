//! Immediate collectives in flight advance one another. A collective posts its next round only
//! when it is stepped; MPI lets ranks complete their requests in any order, so whoever waits
//! (any request's `wait` or `test`, a blocking collective) also steps every immediate
//! collective of this thread, and wakes when any of their transfers finishes.

use std::cell::RefCell;
use std::ptr::NonNull;

use pml::Handle;

use super::schedule::Execution;

thread_local! {
    /// The executions of unfinished immediate collectives, owned by their requests.
    static IN_FLIGHT: RefCell<Vec<NonNull<Execution<'static>>>> = const { RefCell::new(Vec::new()) };
}

/// Address of an execution, to tell it from the others.
fn address(execution: *const Execution<'_>) -> *const () {
    execution.cast()
}

/// Lets other executions' steps advance `execution` too.
///
/// # Safety
/// `execution` must stay valid, at its address, and not be accessed but through this
/// pointer's copies (its owner included, one access at a time) until [`unregister`]; its
/// buffers must stay valid as long. The lifetime is erased here: the owner's scope keeps it.
pub(crate) unsafe fn register(execution: NonNull<Execution<'_>>) {
    IN_FLIGHT.with(|list| list.borrow_mut().push(execution.cast()));
}

pub(crate) fn unregister(execution: NonNull<Execution<'_>>) {
    let gone = address(execution.as_ptr());
    // During thread-local teardown there is nothing left to step.
    let _ = IN_FLIGHT.try_with(|list| list.borrow_mut().retain(|p| address(p.as_ptr()) != gone));
}

/// The registered executions other than `me`.
fn others(me: *const Execution<'_>) -> Vec<NonNull<Execution<'static>>> {
    let me = address(me);
    IN_FLIGHT.with(|list| {
        list.borrow()
            .iter()
            .copied()
            .filter(|p| address(p.as_ptr()) != me)
            .collect()
    })
}

pub(crate) fn others_in_flight(me: *const Execution<'_>) -> bool {
    let me = address(me);
    IN_FLIGHT.with(|list| list.borrow().iter().any(|p| address(p.as_ptr()) != me))
}

/// Steps every other registered execution as far as it goes without blocking; their errors
/// stay with them, for their own `wait` or `test` to report.
pub(crate) fn advance_others(me: *const Execution<'_>) {
    for other in others(me) {
        // SAFETY: registered executions are valid until unregistered (`register`'s contract),
        // this thread is inside `me`'s step or (with `me` null) in a wait outside every
        // execution, so no other access to `other` is live, and `me` is never in the list.
        let other = unsafe { &mut *other.as_ptr() };
        let _ = other.step_alone(false);
    }
}

/// Whether any immediate collective is in flight: then a wait on anything else must keep
/// stepping it.
pub(crate) fn any_in_flight() -> bool {
    others_in_flight(std::ptr::null())
}

/// Steps every registered execution, if there is any, for a wait that is not one of them.
#[inline]
pub(crate) fn advance_all() {
    if any_in_flight() {
        advance_others(std::ptr::null());
    }
}

/// The transfers in flight of every registered execution.
pub(crate) fn handles_of_all() -> Vec<Handle> {
    handles_of_others(std::ptr::null())
}

/// The transfers in flight of every other registered execution.
pub(crate) fn handles_of_others(me: *const Execution<'_>) -> Vec<Handle> {
    others(me)
        .into_iter()
        .flat_map(|other| {
            // SAFETY: as in `advance_others`; only read.
            unsafe { other.as_ref() }.in_flight_handles()
        })
        .collect()
}
