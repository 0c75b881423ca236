//! The synchronization primitives of the engine that threads share (`environment/shared.rs`:
//! its lock, the condition variable that pausing threads wait on, the count of them, whether
//! a waiting thread progresses for the others, which thread holds the lock and its call's
//! hold, the hint of a spinning wait) and the mark of the
//! thread that owns the engine at `Single` and `Funneled` (`environment/place.rs`, which every
//! call reads on its way in): std's, or, in the library's own tests built with the feature
//! `model-check`, the `shuttle` crate's (an optional dependency), whose scheduler then runs the
//! threads of the model checks (`environment/shared/model.rs`) in interleavings it chooses and
//! replays, and reports a deadlock (a lost wake-up: its condition variables never time out)
//! where every thread is blocked. One place, so that the code under check is the code that
//! ships.

#[cfg(not(all(test, feature = "model-check")))]
pub(crate) use std::{
    hint::spin_loop,
    sync::atomic::{AtomicUsize, Ordering},
    sync::{Condvar, Mutex, MutexGuard},
    thread_local,
};

#[cfg(all(test, feature = "model-check"))]
pub(crate) use shuttle::{
    hint::spin_loop,
    sync::atomic::{AtomicUsize, Ordering},
    sync::{Condvar, Mutex, MutexGuard},
    thread_local,
};

/// Sleeps a thread apart from the engine on `nap` (`pml::nap`), at most `timeout`; whether it
/// ran to its timeout.
#[cfg(not(all(test, feature = "model-check")))]
pub(crate) fn sleep_apart(nap: &pml::Nap, timeout: std::time::Duration) -> bool {
    nap.sleep(timeout)
}

/// Under the model checks: shuttle runs its threads on one, which a real sleep would stop, so
/// the sleep looks (a zero timeout) and yields to the model's other threads until woken,
/// without a timeout, as shuttle's condition variables: a lost wake-up leaves it yielding for
/// ever, which shuttle reports when the run passes its step limit.
#[cfg(all(test, feature = "model-check"))]
pub(crate) fn sleep_apart(nap: &pml::Nap, _timeout: std::time::Duration) -> bool {
    while nap.sleep(std::time::Duration::ZERO) {
        shuttle::thread::yield_now();
    }
    false
}
