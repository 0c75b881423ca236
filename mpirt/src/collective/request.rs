//! Requests of immediate collectives: a schedule that advances each time it is tested or
//! waited on, borrowing its buffers for the scope's lifetime as point-to-point requests do.

use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::{fatal, or_fatal, Cause, Error};
use crate::request::{Scope, StaticScope};

use super::progress;
use super::schedule::Execution;

/// An unfinished immediate collective (`MPI_Request` of `MPI_Ibarrier`, `MPI_Iallreduce`, ...).
/// Like a point-to-point request it must be waited on or tested to completion.
///
/// A collective moves on to its next round when it, another immediate collective or a
/// blocking collective of this thread is tested or waited on, so ranks may complete their
/// requests in any order. Point-to-point waits do not move it on.
#[must_use = "a request must be waited on or tested to completion"]
pub struct CollectiveRequest<'a, S: Scope<'a> = StaticScope> {
    /// On the heap, where it stays put while registered with `progress` (which steps it
    /// when others wait) and while the request moves; freed when it finishes.
    execution: Option<NonNull<Execution<'a>>>,
    scope: S,
    operation: &'static str,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a, S: Scope<'a>> CollectiveRequest<'a, S> {
    pub(crate) fn new(execution: Execution<'a>, scope: S, operation: &'static str) -> Self {
        scope.register();
        let execution = NonNull::from(Box::leak(Box::new(execution)));
        // SAFETY: the execution is on the heap until `release`, which unregisters it first;
        // this request touches it only through the pointer, one call at a time, and the
        // scope keeps its buffers alive until it finishes.
        unsafe { progress::register(execution) };
        CollectiveRequest {
            execution: Some(execution),
            scope,
            operation,
            _borrow: PhantomData,
        }
    }

    /// Advances the schedule; `Some` once it ended, with how.
    fn advance(&mut self, block: bool) -> Option<Result<(), Error>> {
        let execution = self.execution.expect("an unfinished request");
        // SAFETY: the pointer is valid until `release` (see `new`), and no other reference to
        // the execution is live: `progress` steps it only from another execution's step.
        let step = unsafe { &mut *execution.as_ptr() }.step(block);
        let result = match step {
            Ok(false) => return None,
            Ok(true) => Ok(()),
            Err(cause) => Err(Error::new(self.operation, cause)),
        };
        self.release();
        self.scope.unregister();
        Some(result)
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

    /// Waits for the collective to finish.
    pub fn wait(self) {
        or_fatal(self.try_wait())
    }

    pub fn try_wait(mut self) -> Result<(), Error> {
        self.advance(true).expect("a blocking step finishes")
    }

    pub fn wait_without_status(self) {
        self.wait()
    }

    /// `Ok` if the collective finished, else the request back.
    pub fn test(mut self) -> Result<(), Self> {
        match self.advance(false) {
            None => Err(self),
            Some(result) => {
                or_fatal(result);
                Ok(())
            }
        }
    }
}

impl<'a, S: Scope<'a>> Drop for CollectiveRequest<'a, S> {
    fn drop(&mut self) {
        if let Some(execution) = self.execution {
            // The job ends here; what the execution has in flight is not waited for.
            progress::unregister(execution);
            if std::thread::panicking() {
                crate::environment::abort_job(101, "a rank panicked with requests in flight");
            }
            fatal(Error::new(self.operation, Cause::DroppedRequest));
        }
    }
}
