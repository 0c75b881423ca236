//! The collective side of a request: an immediate collective's schedule, on the heap, that
//! advances each time its request (or any other wait of this thread) is tested or waited on.

use std::ptr::NonNull;

use crate::error::{Cause, Error};

use super::progress;
use super::schedule::Execution;

/// An immediate collective in progress, then its outcome.
pub(crate) struct Running<'a> {
    /// On the heap, where it stays put while registered with `progress` (whose hook steps
    /// it whenever the PML moves) and while the request moves; freed when it finishes.
    execution: Option<NonNull<Execution<'a>>>,
    outcome: Option<Result<(), Error>>,
    operation: &'static str,
}

impl<'a> Running<'a> {
    pub fn new(execution: Execution<'a>, operation: &'static str) -> Self {
        let execution = NonNull::from(Box::leak(Box::new(execution)));
        // SAFETY: the execution is on the heap until `release`, which unregisters it first;
        // this value touches it only through the pointer, one call at a time, and the
        // request's scope keeps its buffers alive until it finishes.
        unsafe { progress::register(execution) };
        Running {
            execution: Some(execution),
            outcome: None,
            operation,
        }
    }

    /// Advances the schedule (to its end with `block`); whether it has finished.
    pub fn poll(&mut self, block: bool) -> bool {
        let Some(execution) = self.execution else {
            return true;
        };
        // SAFETY: the pointer is valid until `release` (see `new`), and no other reference to
        // the execution is live: `progress`'s hook steps it only inside PML calls, and
        // leaves it alone while this step runs (`Execution::step` marks it as its owner's).
        let step = unsafe { &mut *execution.as_ptr() }.step(block);
        let outcome = match step {
            Ok(false) => return false,
            Ok(true) => Ok(()),
            Err(cause) => Err(Error::new(self.operation, cause)),
        };
        self.release();
        self.outcome = Some(outcome);
        true
    }

    /// How the finished collective ended.
    pub fn outcome(&mut self) -> Result<(), Error> {
        self.outcome.take().expect("a finished collective")
    }

    /// Unregisters and frees the execution (taking back whatever it has in flight).
    fn release(&mut self) {
        if let Some(execution) = self.execution.take() {
            progress::unregister(execution);
            // SAFETY: the pointer came from `Box::leak` in `new`, and nothing else refers to
            // it now that it is unregistered.
            drop(unsafe { Box::from_raw(execution.as_ptr()) });
        }
    }

    /// For a request dropped unfinished, as the job ends: stops stepping the execution and
    /// leaves it (and what it has in flight) alone rather than wait for its transfers.
    pub fn abandon(&mut self) {
        if let Some(execution) = self.execution.take() {
            progress::unregister(execution);
        }
    }

    /// The collective's name, for messages.
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// Collective requests cannot be cancelled (MPI forbids it).
    pub fn cancel(&self) -> Result<(), Error> {
        Err(Error::new(self.operation, Cause::NotCancellable))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.release();
    }
}
