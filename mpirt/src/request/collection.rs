//! Requests completed together (rsmpi's `RequestCollection`): each finished one reports its
//! index, status and buffer.

use crate::error::{Cause, Error};
use crate::point_to_point::Status;

use super::{end_job_over_unfinished, progress_engine, wait_for_one, LocalScope, Request, Scope};

/// The scope of the requests in a [`RequestCollection`], which answers for them itself.
struct Collected;

// SAFETY: only a `RequestCollection` holds requests of this scope (the type is private), only
// `multiple_scope` makes a collection, and it drops it before it returns, which is before
// `'a` (a lifetime parameter of `multiple_scope`) can end; the drop ends the job if any
// request in it is unfinished.
unsafe impl<'a> Scope<'a> for Collected {
    fn register(&self) {}
    unsafe fn unregister(&self) {}
}

/// What a finished request of a collection reports: its index, its status and its buffer.
type Finished<'a, D> = (usize, Status, &'a D);

/// A set of requests of any scope, completed together, as [`multiple_scope`] hands out: the
/// `wait_*` and `test_*` calls report each request once, as `(index, status, buffer)`, the
/// index being what [`add`](Self::add) returned.
pub struct RequestCollection<'a, D: ?Sized> {
    /// `None` once finished.
    requests: Vec<Option<Request<'a, D, Collected>>>,
}

impl<'a, D: ?Sized> RequestCollection<'a, D> {
    fn with_capacity(capacity: usize) -> Self {
        RequestCollection {
            requests: Vec::with_capacity(capacity),
        }
    }

    /// Takes `request` over from its scope; returns its index in the collection.
    pub fn add<S: Scope<'a>>(&mut self, request: Request<'a, D, S>) -> usize {
        self.requests.push(Some(request.shrink_scope_to(Collected)));
        self.requests.len() - 1
    }

    /// Number of requests added.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Number of requests not yet finished.
    pub fn incomplete(&self) -> usize {
        self.requests.iter().filter(|r| r.is_some()).count()
    }

    /// Waits until an unfinished request finishes (`MPI_Waitany`); `None` if none is left.
    pub fn wait_any(&mut self) -> Option<Finished<'a, D>> {
        let index = self.wait_until_any_finished("wait_any")?;
        Some(self.finish(index))
    }

    /// Waits until at least one unfinished request finishes, then puts every finished one in
    /// `result`, by index (`MPI_Waitsome`); `result` is left empty if none was unfinished.
    pub fn wait_some(&mut self, result: &mut Vec<Finished<'a, D>>) {
        result.clear();
        if self.wait_until_any_finished("wait_some").is_some() {
            self.finish_finished(result);
        }
    }

    /// Waits for every unfinished request and puts them all in `result`, by index
    /// (`MPI_Waitall`).
    pub fn wait_all(&mut self, result: &mut Vec<Finished<'a, D>>) {
        result.clear();
        for index in 0..self.requests.len() {
            if self.requests[index].is_some() {
                result.push(self.finish(index));
            }
        }
    }

    /// A request that has finished, if one has (`MPI_Testany`).
    pub fn test_any(&mut self) -> Option<Finished<'a, D>> {
        progress_engine("test_any");
        let index = self
            .requests
            .iter_mut()
            .position(|r| r.as_mut().is_some_and(Request::is_complete))?;
        Some(self.finish(index))
    }

    /// Puts every request that has finished in `result`, by index (`MPI_Testsome`); empty if
    /// none has.
    pub fn test_some(&mut self, result: &mut Vec<Finished<'a, D>>) {
        result.clear();
        progress_engine("test_some");
        self.finish_finished(result);
    }

    /// If every request has finished, puts those not yet reported in `result`, by index, and
    /// returns true; otherwise leaves them all unreported, `result` empty, and returns false
    /// (`MPI_Testall`).
    pub fn test_all(&mut self, result: &mut Vec<Finished<'a, D>>) -> bool {
        result.clear();
        progress_engine("test_all");
        let all_finished = self.requests.iter_mut().flatten().all(Request::is_complete);
        if all_finished {
            self.wait_all(result);
        }
        all_finished
    }

    /// Blocks until an unfinished request has finished; its index, or `None` if none is left.
    fn wait_until_any_finished(&mut self, operation: &'static str) -> Option<usize> {
        let (indices, mut live): (Vec<usize>, Vec<&mut Request<'a, D, Collected>>) = self
            .requests
            .iter_mut()
            .enumerate()
            .filter_map(|(i, r)| r.as_mut().map(|r| (i, r)))
            .unzip();
        if live.is_empty() {
            return None;
        }
        Some(indices[wait_for_one(&mut live, operation)])
    }

    /// Completes every unfinished request that has finished, into `result`.
    fn finish_finished(&mut self, result: &mut Vec<Finished<'a, D>>) {
        for index in 0..self.requests.len() {
            if self.requests[index]
                .as_mut()
                .is_some_and(Request::is_complete)
            {
                result.push(self.finish(index));
            }
        }
    }

    fn finish(&mut self, index: usize) -> Finished<'a, D> {
        let request = self.requests[index].take().expect("an unfinished request");
        let (status, data) = request.wait_with_data();
        (index, status, data)
    }
}

impl<D: ?Sized> Drop for RequestCollection<'_, D> {
    fn drop(&mut self) {
        let pending = self.incomplete();
        if pending == 0 {
            return;
        }
        for request in self.requests.iter_mut().flatten() {
            request.abandon();
        }
        end_job_over_unfinished(Error::new(
            "end of multiple_scope",
            Cause::UnfinishedCollection { pending },
        ));
    }
}

/// Runs `f` with a scope and an empty collection that has room for `reserve` requests
/// (rsmpi's `multiple_scope`). Requests may be added to the collection from any scope whose
/// buffers outlive this call; any left unfinished in it when `f` returns end the job.
pub fn multiple_scope<'a, F, R, D>(reserve: usize, f: F) -> R
where
    D: 'a + ?Sized,
    F: FnOnce(&LocalScope<'a>, &mut RequestCollection<'a, D>) -> R,
{
    let scope = LocalScope::new();
    let mut collection = RequestCollection::with_capacity(reserve);
    f(&scope, &mut collection)
}
