//! Requests of non-blocking operations, and the scopes that keep their buffers alive, shaped
//! like rsmpi's: a `Request<'a, D, S>` borrows its buffer, of type `D`, for `'a`, and hands it
//! back when it finishes ([`Request::wait_for_data`], [`Request::test_with_data`], and each
//! finished request of a [`RequestCollection`]).
//!
//! [`scope`] and [`multiple_scope`] run a closure and do not return while a request of theirs is
//! unfinished, so the messaging layer never writes into, or reads from, a freed buffer. A
//! request must be completed (`wait`, `test` until it succeeds) or handed to a [`WaitGuard`] or
//! [`CancelGuard`]; dropping an unfinished one, or leaking it out of its scope with
//! `mem::forget`, ends the job with a message, since carrying on could corrupt memory.

use std::fmt;
use std::mem::ManuallyDrop;
use std::panic::Location;

use pml::stall::Awaited;
use pml::RecvBuf;
use pml::{Done, Handle, Pml, PmlError, SendMode, SourceSel, Started, Waiting};

use crate::collective::progress;
use crate::collective::request::Running;
use crate::communicator::Rank;
use crate::environment::{self, abort_job, with_engine};
use crate::error::{fatal, or_fatal, Cause, Error};
use crate::point_to_point::{send_description, wait_handle, Landing, RecvSlot, Status, Tag};
use crate::stall;

mod collection;
mod guard;
mod lent;
mod scope;

pub use collection::{multiple_scope, RequestCollection};
pub use guard::{CancelGuard, WaitGuard};
pub(crate) use lent::Lent;
pub use scope::{
    scope, shared_scope, LocalScope, Scope, SharedScope, StaticScope, ThreadSafeScope,
};

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
                send_description(what, *dest, *tag)
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
    /// A receive's, until it finishes: how what arrives becomes the buffer's elements.
    landing: Option<Landing>,
    operation: Operation,
}

// Every request moves at least once (into the program's vector of them), so its size is paid
// per message: the rarer collective is a pointer to its slot (`Running`), kept to a message's.
enum Pending<'a> {
    Message(Message),
    Collective(Running<'a>),
}

// Programs keep requests in vectors and move each at least twice (in, then out to be waited
// on): a receive's request is kept well under the 128 bytes it once had, its buffer (a slice,
// the largest kind) included.
const _: () = assert!(std::mem::size_of::<Request<'static, [u8], &LocalScope<'static>>>() <= 96);

/// An unfinished non-blocking operation that borrows its buffer, a `D`, for `'a`
/// (`MPI_Request`): a point-to-point operation or an immediate collective. Waiting on or
/// testing any request also moves this thread's immediate collectives on, so ranks may
/// complete their requests in any order.
#[must_use = "a request must be waited on, tested to completion, or put in a guard"]
pub struct Request<'a, D: ?Sized, S: Scope<'a> = StaticScope> {
    /// `None` once finished. Not dropped as a field: a finished request has nothing in it,
    /// and the drop of an unfinished one ends the process, so the drop glue that would look
    /// at it again after every request's `drop` has nothing to do.
    pending: ManuallyDrop<Option<Pending<'a>>>,
    /// Also what makes requests `!Send`: it holds a pointer.
    data: Lent<'a, D>,
    scope: S,
}

impl<'a, D: ?Sized, S: Scope<'a>> Request<'a, D, S> {
    #[inline]
    fn new(pending: Pending<'a>, data: Lent<'a, D>, scope: S) -> Self {
        scope.register();
        Request {
            pending: ManuallyDrop::new(Some(pending)),
            data,
            scope,
        }
    }

    #[inline]
    fn message(
        outcome: Outcome,
        landing: Option<Landing>,
        data: Lent<'a, D>,
        scope: S,
        operation: Operation,
    ) -> Self {
        let message = Message {
            outcome,
            landing,
            operation,
        };
        Request::new(Pending::Message(message), data, scope)
    }

    pub(crate) fn collective(running: Running<'a>, data: Lent<'a, D>, scope: S) -> Self {
        Request::new(Pending::Collective(running), data, scope)
    }

    #[inline]
    pub(crate) fn send(
        handle: Handle,
        kept: Option<Landing>,
        data: Lent<'a, D>,
        scope: S,
        mode: SendMode,
        dest: Rank,
        tag: Tag,
    ) -> Self {
        let operation = Operation::Send {
            synchronous: mode == SendMode::Synchronous,
            dest,
            tag,
        };
        // `kept` (a packed copy) is only ever given with a handle other than `SENT`, so
        // `take_sent` still finds nothing to free in the sends it completes.
        Request::message(Outcome::Engine(handle), kept, data, scope, operation)
    }

    #[inline]
    pub(crate) fn receive(
        started: Started<RecvBuf>,
        slot: RecvSlot,
        data: Lent<'a, D>,
        scope: S,
        source: SourceSel,
        tag: Option<Tag>,
    ) -> Self {
        let outcome = match started {
            Started::Done { result, .. } => match result {
                Ok(status) => Outcome::Received(status),
                Err(e) => Outcome::Failed(e),
            },
            Started::Posted(handle) => Outcome::Engine(handle),
            Started::Claimed => unreachable!("only blocking receives claim"),
        };
        Request::message(
            outcome,
            Some(slot.into_landing()),
            data,
            scope,
            Operation::Receive { source, tag },
        )
    }

    /// Whether this is an immediate collective's request, whose steps are its thread's
    /// (`collective::progress`), so that it cannot move to another thread.
    pub(crate) fn is_collective(&self) -> bool {
        matches!(*self.pending, Some(Pending::Collective(_)))
    }

    fn pending(&mut self) -> &mut Pending<'a> {
        self.pending.as_mut().expect("an unfinished request")
    }

    /// The engine's handles this request waits for, into `into`: a point-to-point request's
    /// still in the engine, or a direct immediate collective's transfers in flight (an
    /// execution's steps tell a wait when it finishes instead: `progress::take_finished`).
    fn awaited(&mut self, into: &mut Vec<Handle>) {
        match self.pending.as_mut().expect("an unfinished request") {
            Pending::Message(Message {
                outcome: Outcome::Engine(handle),
                ..
            }) => into.push(*handle),
            Pending::Collective(running) => running.awaited(into),
            Pending::Message(_) => {}
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
                    Ok(Done::Received(status)) => match message.landing.take() {
                        Some(landing) => landing.finish(status),
                        None => unreachable!("a send completed as a receive"),
                    },
                    // A send's packed copy, if any, is dropped with the request below.
                    Err(Cause::Messaging(PmlError::Cancelled)) => Ok(Status::cancelled()),
                    Err(cause) => Err(cause),
                };
                status.map_err(|cause| Error::new(message.operation.describe(), cause))
            }
        };
        *self.pending = None;
        // SAFETY: registered in `new`; the operation is over (just completed above).
        unsafe { self.scope.unregister() };
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
        // A send has no landing and its outcome is a handle: nothing in it owns memory, so
        // forgetting it frees all that dropping it would, without the drop glue's call.
        std::mem::forget(self.pending.take());
        // SAFETY: registered in `new`; the send is over (the transport took it as it started).
        unsafe { self.scope.unregister() };
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
        let landing = message.landing.take().expect("a receive has a landing");
        let result = landing
            .finish(status)
            .map_err(|cause| Error::new(message.operation.describe(), cause));
        // Its landing is taken and its outcome a status: nothing left in it owns memory.
        std::mem::forget(self.pending.take());
        // SAFETY: registered in `new`; the receive is over (its message was waiting).
        unsafe { self.scope.unregister() };
        Some(result)
    }

    /// Waits for the operation to finish (`MPI_Wait`).
    #[track_caller]
    pub fn wait(mut self) -> Status {
        stall::at(Location::caller());
        or_fatal(self.finish())
    }

    /// Waits for the operation to finish and hands its buffer back.
    #[track_caller]
    pub fn wait_for_data(self) -> &'a D {
        stall::at(Location::caller());
        self.wait_with_data().1
    }

    /// [`wait`](Self::wait) that also hands the buffer back.
    pub(crate) fn wait_with_data(self) -> (Status, &'a D) {
        let data = self.data;
        let status = self.wait();
        // SAFETY: `wait` returned, so the operation is over (a failed one ended the job).
        (status, unsafe { data.get() })
    }

    /// [`wait`](Self::wait) that returns how the operation failed instead of ending the job.
    pub fn try_wait(mut self) -> Result<Status, Error> {
        self.finish()
    }

    /// Waits for the operation to finish and leaves the request empty, its drop a no-op.
    /// In place: a request is 96 bytes, and every move of it is paid per message.
    #[inline]
    fn finish(&mut self) -> Result<Status, Error> {
        if let Some(status) = self.take_sent() {
            return Ok(status);
        }
        if let Some(result) = self.take_received() {
            return result;
        }
        self.wait_in_engine()
    }

    /// Waits for an operation that did not finish as it started.
    fn wait_in_engine(&mut self) -> Result<Status, Error> {
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
    #[track_caller]
    pub fn wait_without_status(self) {
        stall::at(Location::caller());
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
                // The test steps the immediate collectives in flight too.
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

    /// The status and the buffer if the operation finished, else the request back.
    #[allow(clippy::result_large_err)]
    pub fn test_with_data(self) -> Result<(Status, &'a D), Self> {
        let data = self.data;
        let status = self.test()?;
        // SAFETY: the test found the operation over (a failed one ended the job).
        Ok((status, unsafe { data.get() }))
    }

    /// The same request, registered with `scope` instead, whose lifetime may be shorter.
    pub fn shrink_scope_to<'b, S2>(mut self, scope: S2) -> Request<'b, D, S2>
    where
        'a: 'b,
        S2: Scope<'b>,
    {
        // Taken, not copied: the emptied request's drop then has nothing to do.
        let pending = self.pending.take().expect("an unfinished request");
        // SAFETY: registered in `new`; the operation is not over, but `Request::new` below
        // registers it with `scope`, which ends no later (`'a: 'b`) and answers for it now.
        unsafe { self.scope.unregister() };
        Request::new(pending, self.data, scope)
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
fn wait_for_one<'a, D: ?Sized, S: Scope<'a>>(
    requests: &mut [&mut Request<'a, D, S>],
    operation: &'static str,
) -> usize {
    loop {
        if let Some(i) = requests.iter_mut().position(|r| r.is_complete()) {
            return i;
        }
        let mut handles: Vec<Handle> = Vec::new();
        for request in requests.iter_mut() {
            request.awaited(&mut handles);
        }
        // The wait steps every immediate collective in flight, those outside the set too (a
        // peer may wait for their next round before it sends what one of these waits for),
        // and returns once one of the messages finished or a collective did: the collective
        // requests of the set then find theirs finished.
        progress::take_finished();
        let woken = with_engine(|e| e.step_hooks()).and_then(|()| {
            environment::wait_until_or_lent(Awaited::Requests(&handles), |e| {
                for &h in &handles {
                    if e.is_complete(h)? {
                        return Ok(true);
                    }
                }
                Ok(progress::take_finished())
            })
        });
        or_fatal(woken.map_err(|c| Error::new(operation, c)));
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Drop for Request<'a, D, S> {
    // Inline: every finished request is dropped, and for those the drop is one test.
    #[inline]
    fn drop(&mut self) {
        if self.pending.is_some() {
            self.drop_unfinished();
        }
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Request<'a, D, S> {
    /// Ends the job: the operation may still read or write a buffer that is about to be
    /// freed.
    #[cold]
    #[inline(never)]
    fn drop_unfinished(&mut self) -> ! {
        self.abandon();
        end_job_over_unfinished(Error::new("drop of a request", Cause::DroppedRequest));
    }

    /// For an unfinished request as the job ends: a collective's execution is no longer
    /// stepped, and what it has in flight not waited for.
    fn abandon(&mut self) {
        if let Some(Pending::Collective(running)) = &mut *self.pending {
            running.abandon();
        }
    }
}

/// Ends the job over requests left unfinished, whose buffers may be about to be freed: with
/// `error`, or, while a panic unwinds (its message is already out), as a panicked rank.
#[cold]
pub(crate) fn end_job_over_unfinished(error: Error) -> ! {
    if std::thread::panicking() {
        abort_job(101, "a rank panicked with requests in flight");
    }
    fatal(error)
}

impl<'a, D: ?Sized, S: Scope<'a>> fmt::Debug for Request<'a, D, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The operation, not the buffer: the messaging layer may be writing it.
        let operation = match self.pending.as_ref() {
            Some(Pending::Message(message)) => message.operation.describe(),
            Some(Pending::Collective(running)) => running.operation().to_string(),
            None => "finished".to_string(),
        };
        f.debug_struct("Request")
            .field("operation", &operation)
            .finish_non_exhaustive()
    }
}

/// Moves the messaging layer and this thread's immediate collectives on, for the calls that
/// test without blocking.
fn progress_engine(operation: &'static str) {
    or_fatal(with_engine(|e| e.progress()).map_err(|c| Error::new(operation, c)));
}

/// Waits until one of `requests` finishes; returns the index it had and its status, and
/// removes it. `None` if `requests` is empty (`MPI_Waitany`).
#[track_caller]
pub fn wait_any<'a, D: ?Sized, S: Scope<'a>>(
    requests: &mut Vec<Request<'a, D, S>>,
) -> Option<(usize, Status)> {
    if requests.is_empty() {
        return None;
    }
    stall::enter(stall::Call::waiting("wait_any"));
    let mut live: Vec<&mut Request<'a, D, S>> = requests.iter_mut().collect();
    let index = wait_for_one(&mut live, "wait_any");
    Some((index, requests.remove(index).wait()))
}

/// Returns the index and status of a finished request, removing it, if any has finished
/// (`MPI_Testany`).
pub fn test_any<'a, D: ?Sized, S: Scope<'a>>(
    requests: &mut Vec<Request<'a, D, S>>,
) -> Option<(usize, Status)> {
    progress_engine("test_any");
    let index = requests.iter_mut().position(|r| r.is_complete())?;
    Some((index, requests.remove(index).wait()))
}

/// Waits for every request, in order, and returns their statuses (`MPI_Waitall`).
#[track_caller]
pub fn wait_all<'a, D: ?Sized, S: Scope<'a>>(requests: &mut Vec<Request<'a, D, S>>) -> Vec<Status> {
    stall::enter(stall::Call::waiting("wait_all"));
    // Each is finished where it lies and the emptied ones are taken out at the end, by the
    // guard's drop: no request is moved, and a panic part-way (caught by the program) leaves
    // the vector holding only the unfinished ones, which can be waited for again.
    struct Finished<'v, T> {
        requests: &'v mut Vec<T>,
        count: usize,
    }
    impl<T> Drop for Finished<'_, T> {
        fn drop(&mut self) {
            self.requests.drain(..self.count);
        }
    }
    let mut finished = Finished { requests, count: 0 };
    let mut statuses = Vec::with_capacity(finished.requests.len());
    while let Some(request) = finished.requests.get_mut(finished.count) {
        statuses.push(or_fatal(request.finish()));
        finished.count += 1;
    }
    statuses
}
