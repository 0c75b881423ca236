//! Progress hooks: work this thread registers to be stepped whenever its PML moves, by every
//! blocking call and every test (mpirt's immediate collectives, which post their next round
//! only when stepped). Point-to-point code waits one way, whether any is registered or not;
//! the PML's waiting loop steps them ([`pml::Waiting::step_hooks`]).

use std::cell::{Cell, RefCell};

/// What `register` returns, to unregister the same hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HookId(u64);

/// A registered hook and its id.
type Registered = (HookId, fn());

thread_local! {
    static HOOKS: RefCell<Vec<Registered>> = const { RefCell::new(Vec::new()) };
    /// Whether any hook is registered: the one look a call makes when none is.
    static ANY: Cell<bool> = const { Cell::new(false) };
    static NEXT_ID: Cell<u64> = const { Cell::new(0) };
    /// Set while the hooks run: a hook's own calls into the PML do not step them again.
    static STEPPING: Cell<bool> = const { Cell::new(false) };
}

crate::sync::thread_local! {
    /// Set where a PML call under the lock of the engine that threads share would have
    /// stepped the hooks (`defer`): they run once this thread has let go (`step_deferred`).
    /// A thread-local of `crate::sync`, as the lock's own marks are: under the model checks,
    /// each of the model's threads has its own (std's would be one for them all, and one
    /// thread's round could take another's).
    static DEFERRED: Cell<bool> = const { Cell::new(false) };
}

/// Has `hook` stepped whenever this thread's PML moves, until `unregister`: with the PML lent
/// to it (`environment::lend`), or, where a call holds the lock of the engine that threads
/// share, once the call lets go of it (`defer`).
pub(crate) fn register(hook: fn()) -> HookId {
    let id = HookId(NEXT_ID.with(|n| n.replace(n.get() + 1)));
    HOOKS.with(|hooks| hooks.borrow_mut().push((id, hook)));
    ANY.with(|any| any.set(true));
    id
}

pub(crate) fn unregister(id: HookId) {
    // During thread-local teardown there is nothing left to step.
    let _ = HOOKS.try_with(|hooks| {
        let mut hooks = hooks.borrow_mut();
        hooks.retain(|&(other, _)| other != id);
        ANY.with(|any| any.set(!hooks.is_empty()));
    });
}

/// How many hooks this thread registered so far, for tests.
#[cfg(test)]
pub(crate) fn registered_so_far() -> u64 {
    NEXT_ID.with(Cell::get)
}

/// Whether any hook is registered.
#[inline]
pub(crate) fn any() -> bool {
    ANY.with(Cell::get)
}

/// Runs every registered hook once, unless the hooks are running already (a hook's own
/// calls into the PML land here again). A hook may register or unregister others: each is
/// looked up by position, without holding the list, and one that moved is stepped next time.
pub(crate) fn step_all() {
    if STEPPING.with(|s| s.replace(true)) {
        return;
    }
    let _stepped = Stepped;
    let mut i = 0;
    while let Some(hook) = HOOKS.with(|hooks| hooks.borrow().get(i).map(|&(_, hook)| hook)) {
        hook();
        i += 1;
    }
}

/// Leaves the hooks for `step_deferred`, unless they are running now (this is one of their
/// own calls into the PML, which does not step them again): a PML call that holds the lock
/// of the engine that threads share (`Serialized`, `Multiple`) defers them, so that what they
/// run (an immediate collective's reduction by a user-defined operation, which may take long)
/// runs without the lock, and the rank's other threads go on meanwhile, as MPICH and Open MPI
/// call a user's operation outside their locks.
pub(crate) fn defer() {
    if !stepping() {
        DEFERRED.with(|deferred| deferred.set(true));
    }
}

/// Whether the hooks are running now (`step_all`): a call into the PML is one of theirs.
pub(crate) fn stepping() -> bool {
    STEPPING.with(Cell::get)
}

/// Whether a call deferred the hooks (`defer`) and they have not run since.
pub(crate) fn deferred() -> bool {
    DEFERRED.with(Cell::get)
}

/// Runs the hooks that a call deferred (`defer`), once the caller let go of the engine's
/// lock: each call of theirs into the PML takes it again, for that call; whether any were.
pub(crate) fn step_deferred() -> bool {
    let deferred = DEFERRED.with(Cell::take);
    if deferred {
        step_all();
    }
    deferred
}

/// Clears `STEPPING` when the hooks are done, also when one panics: a program that catches
/// the panic must not find its hooks never stepped again.
struct Stepped;

impl Drop for Stepped {
    fn drop(&mut self) {
        // During thread-local teardown there is nothing left to step.
        let _ = STEPPING.try_with(|s| s.set(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static STEPS: Cell<u32> = const { Cell::new(0) };
    }

    fn counts() {
        STEPS.with(|n| n.set(n.get() + 1));
    }

    fn panics() {
        panic!("a hook failed");
    }

    #[test]
    fn a_hook_that_panicked_leaves_the_others_stepped_again() {
        let panicking = register(panics);
        let counting = register(counts);
        assert!(std::panic::catch_unwind(step_all).is_err());
        unregister(panicking);
        step_all();
        assert_eq!(
            STEPS.with(Cell::get),
            1,
            "the hooks were not stepped after the panic"
        );
        unregister(counting);
        assert!(!any());
    }
}
