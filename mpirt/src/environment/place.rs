//! Where the engine lives, at every threading level: one static, so that a call reaches its
//! fields at fixed addresses whichever way it came in. Who may reach it is decided once, at
//! `initialize`: at `Single` and `Funneled` the initializing thread alone, marked in a
//! thread-local (`OWNER`); at `Serialized` and `Multiple` whichever thread holds the shared
//! lock (`shared`, cargo feature `threads`).
//!
//! Why a static rather than the initializing thread's thread-local slot with the shared engine
//! elsewhere: a call that took its engine from either of two places had it behind a pointer
//! chosen at run time, so every field was reached through a register rather than at a fixed
//! offset, and a program at `Single` paid 17 (sender) to 32 (receiver) instructions more per
//! 8-byte message with the feature on (osu-benches/compare/shm-callgrind.sh). Here the engine
//! has one address for both ways in, and the `Single` path pays one thread-local increment and
//! one predictable branch on its way in (`mark`), what the thread-local `RefCell`'s borrow flag
//! cost before.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;

use crate::backend::AnyPml;
use crate::error::Cause;
// Shuttle's under the feature `model-check`, so that each of a model check's threads has its own
// `OWNER`, as each thread of a process has (see `crate::sync`).
use crate::sync::thread_local;

#[cfg(feature = "threads")]
use super::shared;

/// The engine's one place: `None` before `initialize` and after finalize.
struct Place(UnsafeCell<Option<AnyPml>>);

// SAFETY: the engine is reached only by a thread with the right to it, and one thread has it
// at a time. At `Single` and `Funneled` the right is an `OwnersRight` from
// `OwnersRight::take` (the blocking calls), or one that `Entry::enter` took and forgot into
// its `Entry`: only the thread whose `OWNER` `install` marked has one (no other thread's is
// ever marked `FREE`: a thread in a call on the shared engine is marked `SHARED_CALL`), and
// `take` makes one only where it found the mark `FREE`, which it sets to `IN_CALL` until the
// right's drop sets it back, so there is never a second one at once, nested calls included
// (an `OwnersRight` made where `take` found no `FREE` would, dropped, mark the thread free
// inside its enclosing call). At `Serialized` and `Multiple` (no thread marked `FREE`) only
// the thread that holds `shared`'s lock has it (an `Entry` of `enter` or a `shared::Held`),
// and the lock refuses a second hold in the thread that has it.
// That the engine may be reached from another thread than the one that made it: nothing in a
// PML belongs to its thread. Its transports' endpoints (sockets, shared mappings, verbs and
// libfabric objects) are the process's, and it keeps no thread-local state; the raw pointers
// it holds are buffers lent under each call's `# Safety` contract, alive until their operation
// completes on whichever thread completes it (the request and scope types see to that), and
// they are elements of `Equivalence` types, plain data, so that another thread writes them is
// what a send of them to it would be. UCX's worker is made for one thread
// (`UCS_THREAD_MODE_SINGLE`): `initialize_with_threading` keeps the UCX PML at `Funneled`,
// where only the initializing thread reaches it.
unsafe impl Sync for Place {}

static ENGINE: Place = Place(UnsafeCell::new(None));

/// The place.
///
/// # Safety
/// The caller holds the one right to the engine there is (an `OwnersRight`, an `Entry`, or
/// `shared`'s lock) for as long as the reference lives, and makes no other reference from
/// here meanwhile.
#[inline(always)]
pub(super) unsafe fn slot<'a>() -> &'a mut Option<AnyPml> {
    // SAFETY: the caller's guarantee: this is the only reference to the place while it lives.
    unsafe { &mut *ENGINE.0.get() }
}

/// The engine in its place; `NotInitialized` before `initialize`, `Finalized` after finalize.
///
/// # Safety
/// As for [`slot`].
#[inline(always)]
pub(super) unsafe fn engine<'a>() -> Result<&'a mut AnyPml, Cause> {
    // Not `ok_or`: its error, made before the test, has drop glue, which the compiler then
    // called on every call that found the engine.
    // SAFETY: the caller's guarantee, passed on.
    match unsafe { slot() } {
        Some(engine) => Ok(engine),
        None => Err(super::not_running()),
    }
}

/// A thread's right to the engine, in its `OWNER` mark. The values make the owner's way in an
/// increment of the mark and its way out a decrement, each one instruction that also tests its
/// result (`FREE` + 1 is `IN_CALL`, 0, and nothing else gives 0): the way in tested the mark
/// against `FREE` and then stored `IN_CALL` (three instructions), and, with the feature
/// `threads`, the way out of a non-blocking call tested the mark again before it stored
/// `FREE` (osu-benches/compare/shm-callgrind.sh: osu_bw's receiver paid 9 instructions a
/// message more at `Single` for the feature, ARCHITECTURE.md, "Threads").
mod mark {
    /// The initializing thread, between calls (at `Single` and `Funneled`).
    pub(super) const FREE: u8 = u8::MAX;
    /// The initializing thread, inside a call: a call from inside it (a progress hook's)
    /// fails as `NestedCall`, as a second borrow of a `RefCell` would, instead of making a
    /// second reference to the engine.
    pub(super) const IN_CALL: u8 = FREE.wrapping_add(1);
    /// A thread inside a non-blocking call on the shared engine's lock (`Entry`, feature
    /// `threads`): the way out's decrement gives 0 from here alone (the owner's gives
    /// `FREE`), which sends the call to let go of the lock (`let_go_shared`).
    #[cfg(feature = "threads")]
    pub(super) const SHARED_CALL: u8 = IN_CALL + 1;
    /// Not the initializing thread, or the engine is shared, outside a call: neither it nor
    /// the value the way in makes of it (`NO` + 1) is `FREE`, `IN_CALL` or `SHARED_CALL`.
    pub(super) const NO: u8 = 0x80;
}

thread_local! {
    static OWNER: Cell<u8> = const { Cell::new(mark::NO) };
}

/// Puts the engine in its place, at `initialize`, reached by this thread alone unless
/// `shared`, when `shared::install` must come next. No thread has a right to the engine yet:
/// `initialize` runs once, and no thread is marked nor the lock made before this returns.
pub(super) fn install(engine: AnyPml, shared: bool) {
    // SAFETY: no thread has the right to the engine yet (above), so nothing else reaches it.
    unsafe { *ENGINE.0.get() = Some(engine) };
    if !shared {
        OWNER.with(|owner| owner.set(mark::FREE));
    }
}

/// A thread's right to the engine for one non-blocking call, or for finalize, either way
/// (the blocking calls take an `OwnersRight`, or the shared lock one round at a time): the
/// initializing thread's at `Single` and `Funneled`, marked in `OWNER`; at `Serialized` and
/// `Multiple` the shared lock, held by `shared` for this thread until the drop.
///
/// Which of the two, the drop reads from `OWNER` (the initializing thread's mark says it is in
/// a call), so that the call carries nothing for it: taken as a value of either kind (an enum
/// holding the lock's guard, or a flag), the right was built in memory and copied, or kept in
/// a register the call then lacked, and the `Single` path paid 8 to 26 instructions more a
/// message (osu-benches/compare/shm-callgrind.sh).
///
/// `!Send` (the pointer marker): the right is its thread's, whose `OWNER` mark or
/// `shared`'s thread-locals the drop reads, so an `Entry` that moved to another thread would
/// give up that thread's right (or none) instead of this one's.
pub(super) struct Entry(PhantomData<*const ()>);

/// The initializing thread's right to the engine at `Single` and `Funneled`, for one call:
/// what the blocking calls take (`environment::on_engine`), whose way to the shared engine
/// does not run through it. Its drop is the mark's store alone, where an `Entry`'s tests the
/// mark to tell the owner's end of a call from the shared lock's release: on the blocking
/// calls, that test was a `Single` program's cost of the shared engine's being built in.
///
/// `!Send`, as an `Entry`: the mark its drop sets is its thread's. (Not `Owned`, a name
/// `point_to_point` gives a received message's buffer.)
pub(super) struct OwnersRight(PhantomData<*const ()>);

impl OwnersRight {
    /// The right to the engine where this thread owns it (`Single`, `Funneled`), outside a
    /// call; `None` elsewhere.
    #[inline(always)]
    pub(super) fn take() -> Option<OwnersRight> {
        // One increment, whose result the branch tests: only `FREE` becomes `IN_CALL`.
        let took = OWNER.with(|owner| {
            let now = owner.get().wrapping_add(1);
            owner.set(now);
            now == mark::IN_CALL
        });
        // Not `then_some`, which makes its argument first: the right it then dropped, where
        // this thread has none, marked the thread free inside an enclosing call of its own
        // (so that a call inside a call reached the engine beside the outer one), and marked
        // a thread that never had the right (`NO`: not the initializing thread, or the engine
        // shared) as the owner between calls. The tests below fail on either.
        if took {
            Some(OwnersRight(PhantomData))
        } else {
            undo_take();
            None
        }
    }

    /// The engine; `NotInitialized` before `initialize`, `Finalized` after finalize.
    #[inline(always)]
    pub(super) fn engine(&mut self) -> Result<&mut AnyPml, Cause> {
        // SAFETY: `take` made this `OwnersRight` only where it found this thread the free
        // owner, and marked it in a call until the drop, so it is the one right to the engine
        // there is now (see `Place`); the reference lives no longer than its borrow.
        unsafe { engine() }
    }
}

/// Puts back the mark that `OwnersRight::take`'s increment found, where it found no right.
/// Out of line, so that the increment and its test stay one instruction and a branch: inline,
/// the mark found was kept in a register for this, and the way in loaded, incremented and
/// stored it apart (5 instructions where it is 2).
#[cold]
#[inline(never)]
fn undo_take() {
    OWNER.with(|owner| owner.set(owner.get().wrapping_sub(1)));
}

impl Drop for OwnersRight {
    #[inline(always)]
    fn drop(&mut self) {
        // `take` marked this thread in a call, and nothing inside the call changes that mark
        // for good (`InUserCode` puts back what it found).
        OWNER.with(|owner| {
            debug_assert!(
                owner.get() == mark::IN_CALL,
                "an owner's right outside a call"
            );
            owner.set(mark::FREE)
        });
    }
}

impl Entry {
    /// The right to the engine, either way; where this thread has none, why not
    /// ([`refused`]).
    #[inline(always)]
    pub(super) fn enter() -> Result<Entry, Cause> {
        if let Some(owned) = OwnersRight::take() {
            // The same right, which this `Entry`'s drop ends: it finds the mark in a call.
            std::mem::forget(owned);
            return Ok(Entry(PhantomData));
        }
        #[cfg(feature = "threads")]
        if shared::hold_for_call() {
            // What the drop's decrement tells from the owner's `IN_CALL`.
            OWNER.with(|owner| owner.set(mark::SHARED_CALL));
            return Ok(Entry(PhantomData));
        }
        Err(refused())
    }

    /// The place, for as long as this right is borrowed.
    #[inline(always)]
    pub(super) fn slot(&mut self) -> &mut Option<AnyPml> {
        // SAFETY: this `Entry` is the one right to the engine there is now (see `Place`), and
        // the reference lives no longer than its borrow.
        unsafe { slot() }
    }

    /// The engine; `NotInitialized` before `initialize`, `Finalized` after finalize.
    #[inline(always)]
    pub(super) fn engine(&mut self) -> Result<&mut AnyPml, Cause> {
        // SAFETY: this `Entry` is the one right to the engine there is now (see `Place`), and
        // the reference lives no longer than its borrow.
        unsafe { engine() }
    }
}

/// This thread marked as inside a call while user code that mpirt runs (a user-defined
/// operation) runs, until the drop: a call the code makes finds no right to the engine and
/// fails as `NestedCall` (`refused`), also where it runs outside any PML call (a blocking
/// collective applies its operation between calls). Each level's mark is set as the calls
/// that have the right leave it, so that those calls look at nothing more.
pub(super) struct InUserCode {
    owner: u8,
    #[cfg(feature = "threads")]
    holding: shared::HoldingMark,
}

impl InUserCode {
    #[cold]
    pub(super) fn mark() -> InUserCode {
        let owner = OWNER.with(|owner| {
            let was = owner.get();
            if was == mark::FREE {
                owner.set(mark::IN_CALL);
            }
            was
        });
        InUserCode {
            owner,
            #[cfg(feature = "threads")]
            holding: shared::mark_holding(None),
        }
    }
}

impl Drop for InUserCode {
    fn drop(&mut self) {
        OWNER.with(|owner| owner.set(self.owner));
        #[cfg(feature = "threads")]
        shared::mark_holding(Some(self.holding));
    }
}

/// Ends a non-blocking call on the shared engine: marks this thread outside a call, then lets
/// go of the lock, stepping the hooks the call deferred (a hook's panic comes out of the call
/// with the thread already marked outside it). Out of line, as `Single` never takes it.
#[cfg(feature = "threads")]
#[cold]
#[inline(never)]
fn let_go_shared() {
    OWNER.with(|owner| owner.set(mark::NO));
    shared::let_go_after_call();
}

/// Why this thread has no right to the engine now (`Entry::enter` found none): a call
/// inside a call (`NestedCall`), before `initialize` made the engine reachable (also while it
/// runs), once finalize began to take it, or, at `Single` and `Funneled`, a thread that did
/// not initialize. Out of line: the calls that have the right
/// carry nothing of it.
#[cold]
#[inline(never)]
pub(super) fn refused() -> Cause {
    #[cfg(feature = "threads")]
    let holding = shared::holding();
    #[cfg(not(feature = "threads"))]
    let holding = false;
    if holding || OWNER.with(Cell::get) == mark::IN_CALL {
        Cause::NestedCall
    } else if !super::is_initialized() || super::is_finalized() {
        super::not_running()
    } else if super::still_initializing() {
        Cause::NotInitialized
    } else {
        // Initialized and running, yet not this thread's, nor shared: `Single` or `Funneled`.
        Cause::NotInitializingThread
    }
}

impl Drop for Entry {
    #[inline(always)]
    fn drop(&mut self) {
        // The owner's `IN_CALL` becomes `FREE`; with the feature `threads`, a shared call's
        // `SHARED_CALL` becomes 0, the one value that sends the call to let go of the lock:
        // one decrement and a branch on its result, where a load and test of the mark came
        // before the store.
        #[cfg(feature = "threads")]
        if OWNER.with(|owner| {
            let now = owner.get().wrapping_sub(1);
            owner.set(now);
            now == 0
        }) {
            let_go_shared();
        }
        #[cfg(not(feature = "threads"))]
        OWNER.with(|owner| owner.set(mark::FREE));
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, OwnersRight};

    /// Implemented twice for a `Send` type, so that naming its item for one cannot infer
    /// which: the check below compiles only while `Entry` and `OwnersRight` are `!Send`.
    trait AmbiguousIfSend<Which> {
        fn some_item() {}
    }
    impl<T: ?Sized> AmbiguousIfSend<()> for T {}
    impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}

    #[test]
    fn a_right_stays_on_its_thread() {
        // A compile-time check: were `Entry` or `OwnersRight` `Send`, `_` would have two
        // candidates (E0283).
        let _ = <Entry as AmbiguousIfSend<_>>::some_item;
        let _ = <OwnersRight as AmbiguousIfSend<_>>::some_item;
    }

    /// At `Single` and `Funneled`, a call inside a call finds no right, and finding none
    /// leaves the enclosing call's mark: a right made and dropped for the refused call
    /// (`then_some`) marked the thread free, and the next call inside took the engine beside
    /// the one it was inside. Shuttle's thread-locals live only inside its scheduler.
    #[cfg(not(feature = "model-check"))]
    #[test]
    fn a_call_inside_a_call_leaves_the_outer_right_in_place() {
        use super::{mark, OWNER};

        OWNER.with(|owner| owner.set(mark::FREE));
        let outer = OwnersRight::take();
        assert!(
            outer.is_some(),
            "the initializing thread has no right between calls"
        );
        for nested in 1..=2 {
            assert!(
                OwnersRight::take().is_none(),
                "call {nested} inside a call got a right to the engine"
            );
        }
        assert!(
            OWNER.with(|owner| owner.get() == mark::IN_CALL),
            "the refused calls let go of the outer call's right"
        );
        drop(outer);
        assert!(OWNER.with(|owner| owner.get() == mark::FREE));
        OWNER.with(|owner| owner.set(mark::NO));
    }

    /// A thread that is not the owner (or where the engine is shared) finds no right, and
    /// finding none leaves it unmarked: a right made and dropped for the refusal (`then_some`)
    /// marked it the owner between calls, and its next call took the engine beside the owner's.
    #[cfg(not(feature = "model-check"))]
    #[test]
    fn a_thread_without_the_right_stays_without_it() {
        use super::{mark, OWNER};

        OWNER.with(|owner| owner.set(mark::NO));
        for call in 1..=2 {
            assert!(
                OwnersRight::take().is_none(),
                "call {call} of a thread that is not the owner got a right to the engine"
            );
        }
        assert!(
            OWNER.with(|owner| owner.get() == mark::NO),
            "the refused calls marked a thread that is not the owner"
        );
    }

    /// `Entry::enter` on the owner's thread takes the owner's right and keeps it to its drop:
    /// inside, the thread is in a call (a nested call is refused, by either way in), and the
    /// drop marks it free again.
    #[cfg(not(feature = "model-check"))]
    #[test]
    fn an_entry_holds_the_owners_right_until_its_drop() {
        use super::{mark, OWNER};
        use crate::error::Cause;

        OWNER.with(|owner| owner.set(mark::FREE));
        let entry = Entry::enter().unwrap_or_else(|_| panic!("the free owner found no right"));
        assert!(
            OWNER.with(|owner| owner.get() == mark::IN_CALL),
            "an Entry of the owner's right left the thread marked outside a call"
        );
        assert!(
            OwnersRight::take().is_none(),
            "a blocking call inside an Entry got a right to the engine"
        );
        assert!(
            matches!(Entry::enter(), Err(Cause::NestedCall)),
            "a call inside an Entry was not refused as nested"
        );
        drop(entry);
        assert!(
            OWNER.with(|owner| owner.get() == mark::FREE),
            "the Entry's drop did not give the owner's right back"
        );
        OWNER.with(|owner| owner.set(mark::NO));
    }

    /// A hook that panics as a non-blocking call on the shared engine ends (a user-defined
    /// operation's): the panic comes out of the call's end and leaves the thread marked
    /// outside a call (not `IN_CALL`, the value the way out's decrement left), so that the
    /// thread's next call is not refused as `NestedCall`.
    #[cfg(all(feature = "threads", not(feature = "model-check")))]
    #[test]
    fn a_hooks_panic_at_a_shared_calls_end_comes_out_of_the_call() {
        use super::{let_go_shared, mark, OWNER};
        use crate::backend::hooks;

        const MESSAGE: &str = "a hook failed at the end of a call on the shared engine";
        fn panics() {
            panic!("{MESSAGE}");
        }

        let hook = hooks::register(panics);
        hooks::defer();
        OWNER.with(|owner| owner.set(mark::SHARED_CALL.wrapping_sub(1)));
        let ended = std::panic::catch_unwind(let_go_shared);
        hooks::unregister(hook);
        let payload = ended.expect_err("the hook's panic did not come out of the call's end");
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some(MESSAGE)
        );
        assert!(
            OWNER.with(|owner| owner.get()) == mark::NO,
            "the call's end left the thread marked inside a call"
        );
    }
}
