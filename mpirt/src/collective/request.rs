//! Requests of immediate collectives: a schedule that advances each time it is tested or
//! waited on, borrowing its buffers for the scope's lifetime as point-to-point requests do.

use std::marker::PhantomData;

use crate::error::{fatal, or_fatal, Cause, Error};
use crate::request::{Scope, StaticScope};

use super::schedule::Execution;

/// An unfinished immediate collective (`MPI_Request` of `MPI_Ibarrier`, `MPI_Iallreduce`, ...).
/// Like a point-to-point request it must be waited on or tested to completion.
///
/// A collective moves to its next round only inside its own `test` or `wait` (messages keep
/// arriving meanwhile, but nothing is sent on): when several are in flight, every rank must
/// complete them in the same order, or test them in turn, lest one rank wait on a round that
/// another has not yet sent.
#[must_use = "a request must be waited on or tested to completion"]
pub struct CollectiveRequest<'a, S: Scope<'a> = StaticScope> {
    /// Boxed: the request moves through every `test`, the schedule need not.
    execution: Option<Box<Execution<'a>>>,
    scope: S,
    operation: &'static str,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a, S: Scope<'a>> CollectiveRequest<'a, S> {
    pub(crate) fn new(execution: Execution<'a>, scope: S, operation: &'static str) -> Self {
        scope.register();
        CollectiveRequest {
            execution: Some(Box::new(execution)),
            scope,
            operation,
            _borrow: PhantomData,
        }
    }

    /// Advances the schedule; `Some` once it ended, with how.
    fn advance(&mut self, block: bool) -> Option<Result<(), Error>> {
        let execution = self.execution.as_mut().expect("an unfinished request");
        let result = match execution.step(block) {
            Ok(false) => return None,
            Ok(true) => Ok(()),
            Err(cause) => Err(Error::new(self.operation, cause)),
        };
        self.execution = None;
        self.scope.unregister();
        Some(result)
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
        if self.execution.is_some() {
            if std::thread::panicking() {
                crate::environment::abort_job(101, "a rank panicked with requests in flight");
            }
            fatal(Error::new(self.operation, Cause::DroppedRequest));
        }
    }
}
