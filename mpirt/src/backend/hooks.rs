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

/// Has `hook` stepped (with the PML lent to it, see `environment::lend`) whenever this
/// thread's PML moves, until `unregister`.
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
