//! Requests of non-blocking operations, and the scopes that keep their buffers alive.
//!
//! A request borrows its buffer for `'a`, the lifetime of a scope: [`scope`] and
//! [`multiple_scope`] run a closure and do not return while a request of theirs is unfinished,
//! so the messaging layer never writes into, or reads from, a freed buffer. A request must be
//! completed (`wait`, `test` until it succeeds) or handed to a [`WaitGuard`] or [`CancelGuard`];
//! dropping an unfinished one, or leaking it out of its scope with `mem::forget`, ends the job
//! with a message, since carrying on could corrupt memory.

use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;

use pml::engine::RecvBuf;
use pml::{Done, Handle, PmlError, SendMode, SourceSel, Started};

use crate::collective::progress;
use crate::collective::request::Running;
use crate::communicator::Rank;
use crate::environment::{abort_job, with_engine};
use crate::error::{fatal, or_fatal, Cause, Error};
use crate::point_to_point::{wait_handle, RecvSlot, Status, Tag};

/// Where requests are registered for as long as they are unfinished.
///
/// # Safety
/// An implementation must not let `'a` end (the buffers its requests borrow be freed) while
/// more requests are registered than unregistered.
pub unsafe trait Scope<'a> {
    #[doc(hidden)]
    fn register(&self);
    #[doc(hidden)]
    fn unregister(&self);
}

/// The scope of requests whose buffers are `'static`: nothing can free them.
#[derive(Clone, Copy, Debug)]
pub struct StaticScope;

// SAFETY: `'static` buffers are never freed, so there is nothing to track.
unsafe impl Scope<'static> for StaticScope {
    fn register(&self) {}
    fn unregister(&self) {}
}

/// The scope [`scope`] hands its closure.
#[derive(Debug)]
pub struct LocalScope<'a> {
    pending: Cell<usize>,
    /// `'a` is invariant, so requests cannot shorten it to fit a shorter-lived buffer.
    _invariant: PhantomData<Cell<&'a ()>>,
    _not_send: PhantomData<*const ()>,
}

impl LocalScope<'_> {
    fn new() -> Self {
        LocalScope {
            pending: Cell::new(0),
            _invariant: PhantomData,
            _not_send: PhantomData,
        }
    }
}

// SAFETY: the scope counts its unfinished requests, and its drop (which comes before `'a`
// ends, as `scope` owns it) ends the process if any is left.
unsafe impl<'a> Scope<'a> for &LocalScope<'a> {
    fn register(&self) {
        self.pending.set(self.pending.get() + 1);
    }
    fn unregister(&self) {
        self.pending.set(self.pending.get() - 1);
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

/// What a request is doing, for error messages (built only when one is needed).
pub(crate) enum Operation {
    Send {
        synchronous: bool,
        dest: Rank,
        tag: Tag,
    },
    Receive {
        source: SourceSel,
        tag: Option<Tag>,
    },
}

impl Operation {
    fn describe(&self) -> String {
        match self {
            Operation::Send {
                synchronous,
                dest,
                tag,
            } => {
                let what = if *synchronous {
                    "immediate synchronous send"
                } else {
                    "immediate send"
                };
                format!("{what} to rank {dest} (tag {tag})")
            }
            Operation::Receive { source, tag } => {
                let from = match source {
                    SourceSel::Any => "any rank".to_string(),
                    SourceSel::Rank(r) => format!("rank {r}"),
                };
                let tag = match tag {
                    None => "any tag".to_string(),
                    Some(t) => format!("tag {t}"),
                };
                format!("immediate receive from {from} ({tag})")
            }
        }
    }
}

/// Where a point-to-point operation's outcome comes from.
enum Outcome {
    /// The engine's request.
    Engine(Handle),
    /// A receive that found its message waiting finished as it started.
    Received(pml::Status),
    /// ... or failed as it started (boxed: every request pays for the largest variant).
    Failed(Box<PmlError>),
}

/// A point-to-point operation in flight.
struct Message {
    outcome: Outcome,
    slot: Option<RecvSlot>,
    operation: Operation,
}

// Every request moves at least once (into the program's vector of them), so its size is paid
// per message: the rarer collective is boxed to keep it to a message's.
enum Pending<'a> {
    Message(Message),
    Collective(Box<Running<'a>>),
}

// Programs keep requests in vectors and move each at least twice (in, then out to be waited
// on): a receive's request is kept well under the 128 bytes it once had.
const _: () = assert!(std::mem::size_of::<Request<'static, &LocalScope<'static>>>() <= 96);

/// An unfinished non-blocking operation that borrows its buffers for `'a` (`MPI_Request`): a
/// point-to-point operation or an immediate collective. Waiting on or testing any request
/// also moves this thread's immediate collectives on, so ranks may complete their requests in
/// any order.
#[must_use = "a request must be waited on, tested to completion, or put in a guard"]
pub struct Request<'a, S: Scope<'a> = StaticScope> {
    /// `None` once finished. Not dropped as a field: a finished request has nothing in it,
    /// and the drop of an unfinished one ends the process, so the drop glue that would look
    /// at it again after every request's `drop` has nothing to do.
    pending: ManuallyDrop<Option<Pending<'a>>>,
    scope: S,
    _borrow: PhantomData<&'a mut ()>,
    _not_send: PhantomData<*const ()>,
}

impl<'a, S: Scope<'a>> Request<'a, S> {
    #[inline]
    fn new(pending: Pending<'a>, scope: S) -> Self {
        scope.register();
        Request {
            pending: ManuallyDrop::new(Some(pending)),
            scope,
            _borrow: PhantomData,
            _not_send: PhantomData,
        }
    }

    #[inline]
    fn message(outcome: Outcome, slot: Option<RecvSlot>, scope: S, operation: Operation) -> Self {
        let message = Message {
            outcome,
            slot,
            operation,
        };
        Request::new(Pending::Message(message), scope)
    }

    pub(crate) fn collective(running: Running<'a>, scope: S) -> Self {
        Request::new(Pending::Collective(Box::new(running)), scope)
    }

    #[inline]
    pub(crate) fn send(handle: Handle, scope: S, mode: SendMode, dest: Rank, tag: Tag) -> Self {
        let operation = Operation::Send {
            synchronous: mode == SendMode::Synchronous,
            dest,
            tag,
        };
        Request::message(Outcome::Engine(handle), None, scope, operation)
    }

    #[inline]
    pub(crate) fn receive(
        started: Started<RecvBuf>,
        slot: RecvSlot,
        scope: S,
        source: SourceSel,
        tag: Option<Tag>,
    ) -> Self {
        let outcome = match started {
            Started::Done { result, .. } => match result {
                Ok(status) => Outcome::Received(status),
                Err(e) => Outcome::Failed(Box::new(e)),
            },
            Started::Posted(handle) => Outcome::Engine(handle),
            Started::Claimed => unreachable!("only blocking receives claim"),
        };
        Request::message(
            outcome,
            Some(slot),
            scope,
            Operation::Receive { source, tag },
        )
    }

    fn pending(&mut self) -> &mut Pending<'a> {
        self.pending.as_mut().expect("an unfinished request")
    }

    /// The engine's handle of a point-to-point request still in the engine.
    fn handle(&self) -> Option<Handle> {
        match self.pending.as_ref().expect("an unfinished request") {
            Pending::Message(Message {
                outcome: Outcome::Engine(handle),
                ..
            }) => Some(*handle),
            _ => None,
        }
    }

    /// Turns the end of the operation into a status, releasing the buffers; for a message,
    /// `done` is the engine's report.
    fn complete(&mut self, done: Result<Done, Cause>) -> Result<Status, Error> {
        // Worked out in place: moving the request out first copies it whole, on every
        // message.
        let status = match self.pending.as_mut().expect("an unfinished request") {
            Pending::Collective(running) => running.outcome().map(|()| Status::of_collective()),
            Pending::Message(message) => {
                let status = match done {
                    Ok(Done::Sent) => match message.operation {
                        Operation::Send { dest, tag, .. } => Ok(Status::of_send(dest, tag)),
                        Operation::Receive { .. } => unreachable!("a receive completed as a send"),
                    },
                    Ok(Done::Received(status)) => match message.slot.take() {
                        Some(slot) => slot.finish(status),
                        None => unreachable!("a send completed as a receive"),
                    },
                    Err(Cause::Messaging(PmlError::Cancelled)) => Ok(Status::cancelled()),
                    Err(cause) => Err(cause),
                };
                status.map_err(|cause| Error::new(message.operation.describe(), cause))
            }
        };
        *self.pending = None;
        self.scope.unregister();
        status
    }

    /// Completes a send that the transport took as it started, if this is one: it needs
    /// neither the engine nor an error path, so that a window of small sends is waited for
    /// at a few instructions each. `None`, the request untouched, for any other operation.
    #[inline]
    fn take_sent(&mut self) -> Option<Status> {
        let Some(Pending::Message(Message {
            outcome: Outcome::Engine(handle),
            operation: Operation::Send { dest, tag, .. },
            ..
        })) = &*self.pending
        else {
            return None;
        };
        if *handle != Handle::SENT {
            return None;
        }
        let status = Status::of_send(*dest, *tag);
        // A send has no slot and its outcome is a handle: nothing in it owns memory, so
        // forgetting it frees all that dropping it would, without the drop glue's call.
        std::mem::forget(self.pending.take());
        self.scope.unregister();
        Some(status)
    }

    /// Completes a receive whose message was waiting when it started, if this is one: the
    /// same shortcut as [`take_sent`](Self::take_sent), with the checks of what arrived.
    #[inline]
    fn take_received(&mut self) -> Option<Result<Status, Error>> {
        let Some(Pending::Message(message)) = &mut *self.pending else {
            return None;
        };
        let Outcome::Received(status) = message.outcome else {
            return None;
        };
        let slot = message.slot.take().expect("a receive has a slot");
        let result = slot
            .finish(status)
            .map_err(|cause| Error::new(message.operation.describe(), cause));
        // Its slot is taken and its outcome a status: nothing left in it owns memory.
        std::mem::forget(self.pending.take());
        self.scope.unregister();
        Some(result)
    }

    /// Waits for the operation to finish (`MPI_Wait`).
    pub fn wait(mut self) -> Status {
        if let Some(status) = self.take_sent() {
            return status;
        }
        if let Some(result) = self.take_received() {
            return or_fatal(result);
        }
        or_fatal(self.wait_in_engine())
    }

    pub fn try_wait(mut self) -> Result<Status, Error> {
        if let Some(status) = self.take_sent() {
            return Ok(status);
        }
        if let Some(result) = self.take_received() {
            return result;
        }
        self.wait_in_engine()
    }

    /// Waits for an operation that did not finish as it started.
    fn wait_in_engine(mut self) -> Result<Status, Error> {
        let done = match self.pending() {
            Pending::Message(message) => match message.outcome {
                Outcome::Engine(handle) => wait_handle(handle),
                _ => message.outcome.finished(),
            },
            Pending::Collective(running) => {
                running.poll(true);
                Ok(Done::Sent)
            }
        };
        self.complete(done)
    }

    /// Waits without looking at the status.
    pub fn wait_without_status(self) {
        self.wait();
    }

    /// The status if the operation finished, else the request back (`MPI_Test`).
    // rsmpi's shape: the unfinished request comes back by value, with no allocation.
    #[allow(clippy::result_large_err)]
    pub fn test(mut self) -> Result<Status, Self> {
        if let Some(status) = self.take_sent() {
            return Ok(status);
        }
        let done = match self.pending() {
            Pending::Message(message) => {
                let handle = match message.outcome {
                    Outcome::Engine(handle) => handle,
                    _ => {
                        let done = message.outcome.finished();
                        return Ok(or_fatal(self.complete(done)));
                    }
                };
                if progress::any_in_flight() {
                    progress::advance_all();
                }
                match with_engine(|e| e.test(handle)) {
                    Ok(None) => return Err(self),
                    Ok(Some(done)) => Ok(done),
                    Err(cause) => Err(cause),
                }
            }
            Pending::Collective(running) => {
                if !running.poll(false) {
                    return Err(self);
                }
                Ok(Done::Sent)
            }
        };
        Ok(or_fatal(self.complete(done)))
    }

    /// Asks for the operation to be cancelled (`MPI_Cancel`); it must still be waited on, and
    /// its status then says whether the cancel took. Only unmatched receives can be cancelled;
    /// an immediate collective cannot, and asking is an error.
    pub fn cancel(&self) {
        let message = match self.pending.as_ref().expect("an unfinished request") {
            Pending::Message(message) => message,
            Pending::Collective(running) => return or_fatal(running.cancel()),
        };
        let Outcome::Engine(handle) = message.outcome else {
            // Finished as it started: too late to cancel, which MPI allows.
            return;
        };
        or_fatal(
            with_engine(|e| e.cancel(handle))
                .map(drop)
                .map_err(|c| Error::new(message.operation.describe(), c)),
        )
    }

    /// Whether the operation finished; a collective's is moved on to find out.
    fn is_complete(&mut self) -> bool {
        match self.pending() {
            Pending::Message(message) => match message.outcome {
                Outcome::Engine(handle) => with_engine(|e| e.is_complete(handle)).unwrap_or(true),
                Outcome::Received(_) | Outcome::Failed(_) => true,
            },
            Pending::Collective(running) => running.poll(false),
        }
    }
}

impl Outcome {
    /// How an operation that finished as it started ended.
    #[inline]
    fn finished(&self) -> Result<Done, Cause> {
        match self {
            Outcome::Engine(_) => unreachable!("the engine's requests finish in the engine"),
            Outcome::Received(status) => Ok(Done::Received(*status)),
            Outcome::Failed(e) => Err(Cause::from(PmlError::clone(e))),
        }
    }
}

/// Waits until one of `requests` has finished; returns its position. Immediate collectives
/// among them, and every other one in flight, move on meanwhile.
fn wait_for_one<'a, S: Scope<'a>>(
    requests: &mut [&mut Request<'a, S>],
    operation: &'static str,
) -> usize {
    loop {
        if let Some(i) = requests.iter_mut().position(|r| r.is_complete()) {
            return i;
        }
        let mut handles: Vec<Handle> = requests.iter().filter_map(|r| r.handle()).collect();
        handles.extend(progress::handles_of_all());
        // With nothing in flight to wait for, the next round of the loop steps the
        // collectives again (each posts its next round when stepped).
        if !handles.is_empty() {
            let woken = with_engine(|e| e.wait_any(&handles));
            or_fatal(woken.map(drop).map_err(|c| Error::new(operation, c)));
        }
    }
}

impl<'a, S: Scope<'a>> Drop for Request<'a, S> {
    // Inline: every finished request is dropped, and for those the drop is one test.
    #[inline]
    fn drop(&mut self) {
        if self.pending.is_some() {
            self.drop_unfinished();
        }
    }
}

impl<'a, S: Scope<'a>> Request<'a, S> {
    /// Ends the job: the operation may still read or write a buffer that is about to be
    /// freed.
    #[cold]
    #[inline(never)]
    fn drop_unfinished(&mut self) -> ! {
        if let Some(Pending::Collective(running)) = &mut *self.pending {
            // The job ends here; what the collective has in flight is not waited for.
            running.abandon();
        }
        if std::thread::panicking() {
            abort_job(101, "a rank panicked with requests in flight");
        }
        fatal(Error::new("drop of a request", Cause::DroppedRequest));
    }
}

/// Waits for its request when dropped.
pub struct WaitGuard<'a, S: Scope<'a> = StaticScope>(Option<Request<'a, S>>);

impl<'a, S: Scope<'a>> From<Request<'a, S>> for WaitGuard<'a, S> {
    fn from(request: Request<'a, S>) -> Self {
        WaitGuard(Some(request))
    }
}

impl<'a, S: Scope<'a>> Drop for WaitGuard<'a, S> {
    fn drop(&mut self) {
        if let Some(request) = self.0.take() {
            request.wait();
        }
    }
}

/// Cancels its request, then waits for it, when dropped.
pub struct CancelGuard<'a, S: Scope<'a> = StaticScope>(Option<Request<'a, S>>);

impl<'a, S: Scope<'a>> From<Request<'a, S>> for CancelGuard<'a, S> {
    fn from(request: Request<'a, S>) -> Self {
        CancelGuard(Some(request))
    }
}

impl<'a, S: Scope<'a>> Drop for CancelGuard<'a, S> {
    fn drop(&mut self) {
        if let Some(request) = self.0.take() {
            request.cancel();
            request.wait();
        }
    }
}

/// Waits until one of `requests` finishes; returns the index it had and its status, and
/// removes it. `None` if `requests` is empty (`MPI_Waitany`).
pub fn wait_any<'a, S: Scope<'a>>(requests: &mut Vec<Request<'a, S>>) -> Option<(usize, Status)> {
    if requests.is_empty() {
        return None;
    }
    let mut live: Vec<&mut Request<'a, S>> = requests.iter_mut().collect();
    let index = wait_for_one(&mut live, "wait_any");
    Some((index, requests.remove(index).wait()))
}

/// Returns the index and status of a finished request, removing it, if any has finished
/// (`MPI_Testany`).
pub fn test_any<'a, S: Scope<'a>>(requests: &mut Vec<Request<'a, S>>) -> Option<(usize, Status)> {
    or_fatal(with_engine(|e| e.progress()).map_err(|c| Error::new("test_any", c)));
    let index = requests.iter_mut().position(|r| r.is_complete())?;
    Some((index, requests.remove(index).wait()))
}

/// Waits for every request, in order, and returns their statuses (`MPI_Waitall`).
pub fn wait_all<'a, S: Scope<'a>>(requests: &mut Vec<Request<'a, S>>) -> Vec<Status> {
    requests.drain(..).map(Request::wait).collect()
}

/// A set of requests completed together, as [`multiple_scope`] hands out.
pub struct RequestCollection<'a, S: Scope<'a>> {
    requests: Vec<Option<Request<'a, S>>>,
}

impl<'a, S: Scope<'a>> RequestCollection<'a, S> {
    fn with_capacity(capacity: usize) -> Self {
        RequestCollection {
            requests: Vec::with_capacity(capacity),
        }
    }

    /// Adds a request; returns its index in the collection.
    pub fn add(&mut self, request: Request<'a, S>) -> usize {
        self.requests.push(Some(request));
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

    fn finish(&mut self, index: usize) -> (usize, Status) {
        let request = self.requests[index].take().expect("an unfinished request");
        (index, request.wait())
    }

    /// Waits until one unfinished request finishes; its index and status, or `None` if none
    /// is left (`MPI_Waitany`).
    pub fn wait_any(&mut self) -> Option<(usize, Status)> {
        let (indices, mut live): (Vec<usize>, Vec<&mut Request<'a, S>>) = self
            .requests
            .iter_mut()
            .enumerate()
            .filter_map(|(i, r)| r.as_mut().map(|r| (i, r)))
            .unzip();
        if live.is_empty() {
            return None;
        }
        let found = wait_for_one(&mut live, "wait_any");
        Some(self.finish(indices[found]))
    }

    /// The index and status of a finished request, if one has finished (`MPI_Testany`).
    pub fn test_any(&mut self) -> Option<(usize, Status)> {
        or_fatal(with_engine(|e| e.progress()).map_err(|c| Error::new("test_any", c)));
        let index = self
            .requests
            .iter_mut()
            .position(|r| r.as_mut().is_some_and(Request::is_complete))?;
        Some(self.finish(index))
    }

    /// Waits for every unfinished request; returns (index, status) of each, by index
    /// (`MPI_Waitall`).
    pub fn wait_all(&mut self) -> Vec<(usize, Status)> {
        let live: Vec<usize> = (0..self.requests.len())
            .filter(|&i| self.requests[i].is_some())
            .collect();
        live.into_iter().map(|i| self.finish(i)).collect()
    }
}

/// Runs `f` with a scope and an empty collection of up to about `capacity` requests
/// (rsmpi's `multiple_scope`). Requests left unfinished in the collection end the job.
pub fn multiple_scope<'a, F, R>(capacity: usize, f: F) -> R
where
    F: for<'s> FnOnce(&'s LocalScope<'a>, &mut RequestCollection<'a, &'s LocalScope<'a>>) -> R,
{
    let scope = LocalScope::new();
    let mut collection = RequestCollection::with_capacity(capacity);
    f(&scope, &mut collection)
}
