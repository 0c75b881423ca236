//! Handles that cross threads, at [`Threading::Serialized`] and [`Threading::Multiple`]
//! (`MPI_THREAD_SERIALIZED`, `MPI_THREAD_MULTIPLE`), which mpirt provides when built with the
//! cargo feature `threads` (without it, [`Universe::threads`](crate::Universe::threads) is
//! `None`, as the runtime provides `Funneled` at most).
//!
//! Communicators, processes, requests and the universe are `!Send` at every threading level,
//! so a program that stays at [`Threading::Single`] or [`Threading::Funneled`] cannot reach
//! the runtime from a second thread: the compiler refuses it, where a C MPI library would
//! accept the call and misbehave at run time.
//!
//! ```compile_fail,E0277
//! use mpirt::traits::*;
//!
//! let universe = mpirt::initialize().unwrap();
//! let world = universe.world();
//! // A `SimpleCommunicator` is not `Send`: this does not compile.
//! std::thread::spawn(move || world.rank()).join().unwrap();
//! ```
//!
//! Its twin, which differs only in what moves (a communicator made sendable, which takes the
//! [`Threads`] that only `Serialized` and `Multiple` hand out), compiles:
//!
//! ```no_run
//! use mpirt::traits::*;
//! use mpirt::Threading;
//!
//! let (universe, _) = mpirt::initialize_with_threading(Threading::Multiple).unwrap();
//! let world = universe.world().duplicate().into_sendable(universe.threads().unwrap());
//! std::thread::spawn(move || world.into_communicator().rank()).join().unwrap();
//! ```
//!
//! A universe that provides `Serialized` or `Multiple` hands out [`Threads`], and with it a
//! program makes the two handles that cross threads:
//!
//! - [`SharedCommunicator`] (`Send` and `Sync`): a communicator that many threads use at
//!   once for point-to-point messages, as `MPI_THREAD_MULTIPLE` allows; each thread takes its
//!   own view of it ([`SharedCommunicator::local`]). Collectives and communicator creation
//!   are refused on a view, with an error saying so: MPI leaves the order of one
//!   communicator's collectives to the program, and a view's collective sequence would be
//!   the thread's own, so threads that took turns on it would disagree with the other ranks.
//! - [`SendableCommunicator`] (`Send`): a communicator moved whole to another thread, which
//!   then uses it for everything, collectives included: the usual way to give each thread a
//!   duplicate of the world (`MPI_Comm_dup` per thread).
//! - [`SendableRequest`] (`Send` and `Sync` where its buffer is): a point-to-point request
//!   that another thread completes, registered with a
//!   [`shared_scope`](crate::request::shared_scope) (a
//!   [`ThreadSafeScope`]).
//!
//! ```no_run
//! use mpirt::traits::*;
//! use mpirt::Threading;
//!
//! let (universe, provided) = mpirt::initialize_with_threading(Threading::Multiple).unwrap();
//! assert_eq!(provided, Threading::Multiple);
//! let threads = universe.threads().expect("Multiple lets handles cross threads");
//! let world = universe.world();
//! let shared = world.share(threads);
//! let own = world.duplicate().into_sendable(threads);
//! std::thread::scope(|scope| {
//!     scope.spawn(|| {
//!         let world = shared.local();
//!         let next = (world.rank() + 1) % world.size();
//!         world.process_at_rank(next).send(&world.rank());
//!     });
//!     scope.spawn(move || {
//!         let mine = own.into_communicator();
//!         mine.barrier();
//!     });
//! });
//! let previous = (world.rank() + world.size() - 1) % world.size();
//! let (got, _) = world.process_at_rank(previous).receive::<i32>();
//! assert_eq!(got, previous);
//! ```
//!
//! Why this is sound: at these levels the engine lives behind a process-wide lock
//! (`environment`), so any thread may call it; a `SharedCommunicator` holds only plain data
//! (the context id, the members, this rank) and the context id's lease in an `Arc`, and each
//! thread's view is a communicator of that thread's own, `!Send` as any; a
//! `SendableCommunicator` is made only from a communicator's sole handle, holding nothing
//! another handle of its thread shares (checked when it is made), so moving it moves every
//! reference to its state. `Threads` exists only where the runtime provides one of these
//! levels, so a program at `Funneled` cannot make either.

use std::fmt;
use std::sync::Arc;

use crate::communicator::{CommData, Communicator, Rank, SimpleCommunicator};
use crate::context::ContextLease;
use crate::environment::{threading_support, Threading};
use crate::error::{fatal, or_fatal, Cause, Error};
use crate::request::{Request, Scope, ThreadSafeScope};

/// Proof that the runtime provides [`Threading::Serialized`] or [`Threading::Multiple`]:
/// [`Universe::threads`](crate::Universe::threads) makes it, and the handles that cross
/// threads ask for it.
///
/// ```
/// fn assert_send_sync<T: Send + Sync>() {}
/// assert_send_sync::<mpirt::threads::Threads>();
/// assert_send_sync::<mpirt::threads::SharedCommunicator>();
/// fn assert_send<T: Send>() {}
/// assert_send::<mpirt::threads::SendableCommunicator>();
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Threads {
    _private: (),
}

impl Threads {
    /// `Some` where the runtime provides `Serialized` or `Multiple`.
    pub(crate) fn provided() -> Option<Threads> {
        (threading_support() >= Threading::Serialized).then_some(Threads { _private: () })
    }

    /// How this rank's threads waited in blocking calls so far (beside
    /// [`Universe::counters`](crate::Universe::counters)' `naps` and `nap_wakes`, the sleeps
    /// apart from the engine of the thread that progresses).
    pub fn waits(self) -> Waits {
        crate::environment::thread_waits()
    }
}

/// Counts of a rank's blocking calls' waits at `Serialized` and `Multiple`
/// ([`Threads::waits`]): one waiting thread at a time progresses for the rank (spins, then
/// sleeps apart from the engine until a peer wakes it); the others pause until a round moves
/// something or that thread leaves and hands its place to them (one of them takes it; a
/// thread that starts a wait meanwhile holds it until then).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waits {
    /// Times a waiting thread took the place of the one that progresses.
    pub progressors: u64,
    /// Of the times that thread left, those it handed its place to threads paused beside it
    /// (the others left it free or, where it held the place lent, handed it back to the
    /// threads on their way).
    pub handed_on: u64,
    /// Places that a thread which started its wait after a hand-off held (lent) until a
    /// thread back from a pause took them over.
    pub taken_over: u64,
    /// Pauses of the other waiting threads, and of the one that progresses where no peer can
    /// wake the rank (OFI alone, UCX, loopback alone: it pauses, 20 us doubling to 1 ms,
    /// instead of sleeping apart).
    pub pauses: u64,
    /// Of those, the pauses another thread ended (the rest ran out, at most 1 ms each).
    pub pauses_woken: u64,
}

/// A communicator that threads use at once for point-to-point messages: `Send`, `Sync` and
/// cheap to clone. Each thread communicates through its own [`local`](Self::local) view.
#[derive(Clone)]
pub struct SharedCommunicator {
    context: u32,
    rank: u32,
    group: Arc<[u32]>,
    /// Keeps the context id from being taken by another communicator while a view lives.
    lease: Option<Arc<ContextLease>>,
}

impl SharedCommunicator {
    /// This process's rank in the communicator.
    pub fn rank(&self) -> Rank {
        self.rank as Rank
    }

    /// How many ranks the communicator has.
    pub fn size(&self) -> Rank {
        self.group.len() as Rank
    }

    /// This thread's view of the communicator: a communicator on the same context, for
    /// point-to-point calls (sends, receives, probes, immediate operations); its collectives,
    /// communicator creations and spawns fail, naming the cause.
    pub fn local(&self) -> SimpleCommunicator {
        SimpleCommunicator::new(CommData::view(
            self.context,
            self.rank,
            self.group.to_vec(),
            self.lease.clone(),
        ))
    }
}

impl fmt::Debug for SharedCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedCommunicator")
            .field("context", &self.context)
            .field("rank", &self.rank)
            .field("size", &self.group.len())
            .finish()
    }
}

/// A communicator on its way to another thread, which takes it back with
/// [`into_communicator`](Self::into_communicator) and then uses it for everything.
#[derive(Debug)]
pub struct SendableCommunicator(CommData);

// SAFETY: `CommData::check_sole_handle` passed when this was made: the communicator's shared
// state (behind an `Rc`) has no other strong or weak reference, no attribute (whose values
// may hold the thread's own `Rc`s), no shared-memory area another reference holds, and no
// inter-communicator sides, so moving this moves every reference to that state, with its
// `Cell`s, and nothing left on the old thread can reach them; nor its kept plans' `Rc`s
// (`collective::plans`), which only executions share, each holding a handle of its own, so
// none is in flight here. Its context id's lease is freed
// through the process-wide bitmap (`context`), from whichever thread drops it.
unsafe impl Send for SendableCommunicator {}

impl SendableCommunicator {
    /// The communicator, on the thread that received it.
    pub fn into_communicator(self) -> SimpleCommunicator {
        SimpleCommunicator::new(self.0)
    }
}

impl SimpleCommunicator {
    /// This communicator as threads share it, for point-to-point messages from any thread
    /// (see [`SharedCommunicator`]).
    pub fn share(&self, _threads: Threads) -> SharedCommunicator {
        let data = self.data();
        let (group, lease) = data.members_and_lease();
        SharedCommunicator {
            context: data.context,
            rank: data.rank,
            group: group.into(),
            lease,
        }
    }

    /// Moves this communicator to another thread; ends the job, naming the cause, unless this
    /// is its only handle (see [`try_into_sendable`](Self::try_into_sendable)).
    #[track_caller]
    pub fn into_sendable(self, threads: Threads) -> SendableCommunicator {
        or_fatal(self.try_into_sendable(threads))
    }

    /// Moves this communicator to another thread, if this is its only handle and it holds
    /// nothing shared with this thread (no attributes, no collective in flight); else an
    /// error saying which.
    pub fn try_into_sendable(self, _threads: Threads) -> Result<SendableCommunicator, Error> {
        match self.data().check_sole_handle() {
            Ok(()) => Ok(SendableCommunicator(self.into_data())),
            Err(cause) => Err(Error::new("into_sendable", cause)),
        }
    }
}

/// A point-to-point request on its way to another thread, which takes it back with
/// [`into_request`](Self::into_request) and completes it there: a thread waiting on a request
/// another thread posted, as `MPI_THREAD_MULTIPLE` allows (two threads must not wait on the
/// same request at once, which moving it rules out).
///
/// Only a request of a [`ThreadSafeScope`] becomes one ([`Request::into_sendable`]), as
/// `&SharedScope` ([`shared_scope`](crate::request::shared_scope)) and `StaticScope` are:
/// the scope's count of unfinished requests is then one for every thread. It is `Send`
/// where the request's buffer may cross threads too: the buffer's type is `Send` and `Sync`
/// (a receive's buffer comes back as `&D` on the other thread, and the engine writes it from
/// whichever thread makes progress).
///
/// At `Multiple`, a request of a shared scope moves:
///
/// ```no_run
/// use mpirt::traits::*;
/// use mpirt::Threading;
///
/// let (universe, _) = mpirt::initialize_with_threading(Threading::Multiple).unwrap();
/// let threads = universe.threads().unwrap();
/// let world = universe.world();
/// let mut got = 0i32;
/// mpirt::request::shared_scope(|scope| {
///     let request = world.process_at_rank(0).immediate_receive_into(scope, &mut got);
///     let sendable = request.into_sendable(threads);
///     std::thread::scope(|s| {
///         s.spawn(move || sendable.into_request().wait());
///         if world.rank() == 0 {
///             world.process_at_rank(0).send(&7i32);
///         }
///     });
/// });
/// ```
///
/// The same program with a [`scope`](crate::request::scope) instead, whose `&LocalScope`
/// counts in a `Cell` of its thread, is refused where the request is made sendable:
///
/// ```compile_fail,E0599
/// use mpirt::traits::*;
/// use mpirt::Threading;
///
/// let (universe, _) = mpirt::initialize_with_threading(Threading::Multiple).unwrap();
/// let threads = universe.threads().unwrap();
/// let world = universe.world();
/// let mut got = 0i32;
/// mpirt::request::scope(|scope| {
///     let request = world.process_at_rank(0).immediate_receive_into(scope, &mut got);
///     // `&LocalScope` is not a `ThreadSafeScope`: this does not compile.
///     let sendable = request.into_sendable(threads);
///     std::thread::scope(|s| {
///         s.spawn(move || sendable.into_request().wait());
///         if world.rank() == 0 {
///             world.process_at_rank(0).send(&7i32);
///         }
///     });
/// });
/// ```
///
/// and so is the same program moving the request itself, without `into_sendable`: a
/// [`Request`] is `!Send` at every threading level, `Multiple` included (it may be an
/// immediate collective's, which its thread steps), and what crosses is a `SendableRequest`:
///
/// ```compile_fail,E0277
/// use mpirt::traits::*;
/// use mpirt::Threading;
///
/// let (universe, _) = mpirt::initialize_with_threading(Threading::Multiple).unwrap();
/// let world = universe.world();
/// let mut got = 0i32;
/// mpirt::request::shared_scope(|scope| {
///     let request = world.process_at_rank(0).immediate_receive_into(scope, &mut got);
///     // A `Request` is not `Send`: this does not compile.
///     std::thread::scope(|s| {
///         s.spawn(move || request.wait());
///         if world.rank() == 0 {
///             world.process_at_rank(0).send(&7i32);
///         }
///     });
/// });
/// ```
///
/// A request becomes sendable only with a [`Threads`], which a program cannot make itself:
/// [`Universe::threads`](crate::Universe::threads) hands it out, and only where the runtime
/// provides `Serialized` or `Multiple` (it is `None` at `Single` and `Funneled`). Making one
/// is refused:
///
/// ```compile_fail,E0451
/// use mpirt::traits::*;
///
/// let universe = mpirt::initialize().unwrap();
/// let world = universe.world();
/// let mut got = 0i32;
/// mpirt::request::shared_scope(|scope| {
///     let request = world.process_at_rank(0).immediate_receive_into(scope, &mut got);
///     // `Threads`' field is private: this does not compile.
///     let threads = mpirt::threads::Threads { _private: () };
///     request.into_sendable(threads).into_request().wait();
/// });
/// ```
///
/// while its twin, which asks the universe, compiles (and ends the job at `Single`, where
/// `threads()` is `None`):
///
/// ```no_run
/// use mpirt::traits::*;
///
/// let universe = mpirt::initialize().unwrap();
/// let world = universe.world();
/// let mut got = 0i32;
/// mpirt::request::shared_scope(|scope| {
///     let request = world.process_at_rank(0).immediate_receive_into(scope, &mut got);
///     let threads = universe.threads().expect("Single hands out no Threads");
///     request.into_sendable(threads).into_request().wait();
/// });
/// ```
pub struct SendableRequest<'a, D: ?Sized, S: Scope<'a>>(Request<'a, D, S>);

// SAFETY: `into_sendable` let only point-to-point requests through: an immediate collective's
// steps are kept by its thread (`collective::progress`), a message's by the engine, which any
// thread reaches at the levels `Threads` proves (through its lock, `environment`), by the
// handle the request holds. What else the request holds is its thread's in no way: the
// landing (element size and name, or an owned staging buffer or packed copy, whose datatype
// layouts are `Arc`s in a process-wide registry), what the operation was (for messages), the
// buffer lent as a pointer, which the other thread turns back into `&'a D` (so `D: Sync`, and
// `D: Send` since a receive wrote it through the pointer, as a `&mut D` would have been
// moved), and the scope, moved with it, which its completion unregisters from on the other
// thread: `ThreadSafeScope` promises that this keeps the buffers alive as long as the
// request needs them (one count for every thread, `Send`), which `Scope` alone does not.
unsafe impl<'a, D: ?Sized + Send + Sync, S: ThreadSafeScope<'a>> Send
    for SendableRequest<'a, D, S>
{
}

// SAFETY: a shared `&SendableRequest` reaches nothing of the request: `into_request` takes
// it by value, and `Debug`, the one use through `&self`, prints the type's name alone.
unsafe impl<'a, D: ?Sized + Send + Sync, S: ThreadSafeScope<'a> + Sync> Sync
    for SendableRequest<'a, D, S>
{
}

impl<'a, D: ?Sized, S: Scope<'a>> SendableRequest<'a, D, S> {
    /// The request, on the thread that received it, to wait on or test there.
    pub fn into_request(self) -> Request<'a, D, S> {
        self.0
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> fmt::Debug for SendableRequest<'a, D, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendableRequest").finish_non_exhaustive()
    }
}

impl<'a, D: ?Sized, S: ThreadSafeScope<'a>> Request<'a, D, S> {
    /// Makes this request movable to another thread (see [`SendableRequest`]), where its
    /// scope is a [`ThreadSafeScope`]; ends the job, naming the cause, for an immediate
    /// collective's request, which its thread steps.
    #[track_caller]
    pub fn into_sendable(self, _threads: Threads) -> SendableRequest<'a, D, S> {
        if self.is_collective() {
            fatal(Error::new("into_sendable", Cause::CollectiveRequest));
        }
        SendableRequest(self)
    }
}
