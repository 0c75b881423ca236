//! Scopes: where requests are registered while unfinished, so that the buffers they borrow
//! outlive them.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{fatal, Cause, Error};

/// Where requests are registered for as long as they are unfinished.
///
/// # Safety
/// An implementation must not let `'a` end (the buffers its requests borrow be freed) while
/// more requests are registered than unregistered. It need only count the registrations and
/// unregistrations of one thread (that of the requests, which stay on it): a scope whose
/// requests may complete on other threads makes the stronger promise of
/// [`ThreadSafeScope`].
pub unsafe trait Scope<'a> {
    #[doc(hidden)]
    fn register(&self);
    /// # Safety
    /// Only for a request registered here that is over, or that a scope ending no later
    /// than this one answers for from now on: this scope may then let its buffers go.
    /// Unsafe (as in rsmpi) because a scope's guarantee rests on its count: code that could
    /// lower it at will could free a buffer the messaging layer still writes.
    #[doc(hidden)]
    unsafe fn unregister(&self);
}

/// A [`Scope`] that stays sound when its requests move to other threads and complete there
/// (`threads::SendableRequest`): only a request of such a scope can be made sendable.
///
/// # Safety
/// As for [`Scope`], with `register` and `unregister` called from any threads, at once: the
/// count of unfinished requests is one for every thread (not a copy per thread, nor a
/// `Cell` that two threads could update at once), an unregistration on any thread
/// happens-before the end of `'a` that the count allows (so what the finished operation wrote
/// is complete before the buffer is freed), and a value of the scope moved to another thread
/// still names the same count (`Send`).
pub unsafe trait ThreadSafeScope<'a>: Scope<'a> + Send {}

/// The scope of requests whose buffers are `'static`: nothing can free them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StaticScope;

// SAFETY: `'static` buffers are never freed, so there is nothing to track.
unsafe impl Scope<'static> for StaticScope {
    fn register(&self) {}
    unsafe fn unregister(&self) {}
}

// SAFETY: there is no count: `'static` buffers are never freed, on any thread.
unsafe impl ThreadSafeScope<'static> for StaticScope {}

/// The scope [`scope`] hands its closure.
#[derive(Debug)]
pub struct LocalScope<'a> {
    pending: Cell<usize>,
    /// `'a` is invariant, so requests cannot shorten it to fit a shorter-lived buffer.
    _invariant: PhantomData<Cell<&'a ()>>,
    _not_send: PhantomData<*const ()>,
}

impl LocalScope<'_> {
    pub(super) fn new() -> Self {
        LocalScope {
            pending: Cell::new(0),
            _invariant: PhantomData,
            _not_send: PhantomData,
        }
    }
}

// SAFETY: the scope counts its unfinished requests, and its drop (which comes before `'a`
// ends, as `scope` owns it) ends the process if any is left.
// Inline: called twice per request, from the program's crate, where a call of a function
// that is not generic is not inlined without these.
unsafe impl<'a> Scope<'a> for &LocalScope<'a> {
    #[inline]
    fn register(&self) {
        self.pending.set(self.pending.get() + 1);
    }
    #[inline]
    unsafe fn unregister(&self) {
        let pending = self.pending.get().checked_sub(1);
        self.pending
            .set(pending.expect("a request scope unregistered more than it registered"));
    }
}

impl Drop for LocalScope<'_> {
    fn drop(&mut self) {
        let pending = self.pending.get();
        if pending != 0 {
            fatal(Error::new(
                "end of request scope",
                Cause::LeakedRequest { pending },
            ));
        }
    }
}

/// Runs `f` with a scope for requests; buffers borrowed by them must outlive this call.
pub fn scope<'a, F, R>(f: F) -> R
where
    F: FnOnce(&LocalScope<'a>) -> R,
{
    let scope = LocalScope::new();
    f(&scope)
}

/// The scope [`shared_scope`] hands its closure: a [`LocalScope`] that threads share, for
/// requests that other threads complete (`threads::SendableRequest`). Its count is atomic,
/// so it is `Sync` and a request registered with `&SharedScope` is `Send` where its buffer
/// is; it ends the job as a `LocalScope` does if a request is left unfinished.
#[derive(Debug)]
pub struct SharedScope<'a> {
    pending: AtomicUsize,
    /// `'a` is invariant (as in `LocalScope`), through a type that is `Send` and `Sync`.
    _invariant: PhantomData<fn(&'a ()) -> &'a ()>,
}

// SAFETY: the scope counts its unfinished requests, whichever thread registers or finishes
// them, and its drop (which comes before `'a` ends, as `shared_scope` owns it, and after
// every thread that borrowed it let go, which borrowing it for a thread takes) ends the
// process if any is left.
unsafe impl<'a> Scope<'a> for &SharedScope<'a> {
    #[inline]
    fn register(&self) {
        self.pending.fetch_add(1, Ordering::Relaxed);
    }
    #[inline]
    unsafe fn unregister(&self) {
        // Release: what the finished operation wrote is seen by the scope's end (Acquire).
        let before = self.pending.fetch_sub(1, Ordering::Release);
        assert!(
            before != 0,
            "a request scope unregistered more than it registered"
        );
    }
}

// SAFETY: one atomic count for every thread, in the scope that every `&SharedScope` names
// wherever it moved; an unregistration decrements it with `Release`, and the scope's end
// reads it with `Acquire` after every thread that borrowed it ended (`shared_scope`'s
// borrow), so each finished operation's writes happen-before the buffers' end; a count left
// above zero ends the process there, before `'a` ends.
unsafe impl<'a> ThreadSafeScope<'a> for &SharedScope<'a> {}

impl Drop for SharedScope<'_> {
    fn drop(&mut self) {
        let pending = self.pending.load(Ordering::Acquire);
        if pending != 0 {
            fatal(Error::new(
                "end of request scope",
                Cause::LeakedRequest { pending },
            ));
        }
    }
}

/// Runs `f` with a scope for requests that threads share: a request registered with it may
/// move to another thread at `Threading::Serialized` and `Multiple`
/// (`threads::SendableRequest`), which completes it there. Buffers borrowed by its requests
/// must outlive this call, and the threads that borrow the scope end within it, as borrowing
/// it for a thread takes (`std::thread::scope`).
pub fn shared_scope<'a, F, R>(f: F) -> R
where
    F: FnOnce(&SharedScope<'a>) -> R,
{
    let scope = SharedScope {
        pending: AtomicUsize::new(0),
        _invariant: PhantomData,
    };
    f(&scope)
}
