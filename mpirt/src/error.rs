//! Errors: fatal by default, returned by the `try_` variants.
//!
//! Every message names the rank, the operation and the cause, so that a failing job says which
//! process did what and why: `mpirt: rank 1: receive from rank 0 (tag 7): message truncated: ...`.

use std::fmt;

use pml::PmlError;

use crate::communicator::Rank;
use crate::environment;
use crate::point_to_point::{Count, Tag};

/// Why an operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The messaging layer failed (truncation, a broken peer, ...).
    Messaging(PmlError),
    /// Negative tags belong to the runtime.
    NegativeTag(Tag),
    /// A rank outside the communicator.
    RankOutOfRange { rank: Rank, size: Rank },
    /// A message whose length is not a whole number of elements of the receive type.
    PartialElement {
        bytes: usize,
        element: usize,
        type_name: &'static str,
    },
    /// `receive::<T>()` takes exactly one `T`.
    NotOneElement {
        bytes: usize,
        element: usize,
        type_name: &'static str,
    },
    /// The bytes that arrived are not a valid value of the receive type (a `bool` other
    /// than 0 or 1, a `char` that is not a Unicode scalar value).
    InvalidValue { type_name: &'static str },
    /// The call came before `initialize`.
    NotInitialized,
    /// The call came after finalize (the universe's drop).
    Finalized,
    /// The call came from inside another mpirt call on this thread (a user-defined
    /// operation, or another callback mpirt runs, that calls mpirt back), which MPI does not
    /// allow.
    NestedCall,
    /// At `Threading::Single` and `Funneled`, a call from a thread other than the one that
    /// initialized.
    NotInitializingThread,
    /// `SimpleCommunicator::world` or `self_comm` on a thread other than the one that
    /// initialized, whose handles they are.
    PredefinedOnOtherThread,
    /// A collective or a communicator's creation on a thread's view of a shared communicator
    /// (`threads::SharedCommunicator::local`), which carries point-to-point only.
    CollectiveOnView,
    /// A communicator that cannot move to another thread (`into_sendable`), and why.
    NotSoleHandle(&'static str),
    /// An immediate collective's request made sendable (`Request::into_sendable`): its steps
    /// are its thread's.
    CollectiveRequest,
    /// A request was forgotten (`mem::forget`) inside its scope: its buffer may be freed
    /// while the messaging layer still uses it, so the job cannot go on.
    LeakedRequest { pending: usize },
    /// A `multiple_scope` closure returned with requests of its collection unfinished.
    UnfinishedCollection { pending: usize },
    /// A request was dropped before it completed.
    DroppedRequest,
    /// A `ReceiveFuture` was dropped before its value arrived.
    DroppedFuture,
    /// A cancel of an immediate collective's request, which MPI does not allow.
    NotCancellable,
    /// Start-up failed (the launcher's environment, wire-up, the transports).
    Startup(String),
    /// A peer expects a part of a rooted collective of another length than this rank, its
    /// root, sends it.
    PartDisagrees {
        peer: Rank,
        expected: usize,
        sending: usize,
    },
    /// A buffer of a collective holds the wrong number of elements for what the others hold.
    CountMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A peer's part of a collective was not as long as this rank's buffers say.
    LengthDisagrees {
        peer: Rank,
        expected: usize,
        got: usize,
    },
    /// A peer relaying a collective by messages sent nothing where this rank expected bytes:
    /// its count disagrees, or it failed earlier in the call and passes no data on.
    PeerPassedNothing { peer: Rank, expected: usize },
    /// A peer relaying a collective by messages sent nothing where this rank expected the
    /// length of its empty part (a scatter's of parts of any length across hosts, whose
    /// leader passes on the root's length for it): it failed earlier in the call, or the
    /// counts disagree.
    PeerPassedNoLength { peer: Rank },
    /// A peer sent a length of a part that this rank relays (a host's leader of a gather or
    /// scatter of parts of any length learns its ranks' lengths) that no buffer of this rank
    /// can hold: the parts' lengths sum past what a buffer may be, or no buffer that long
    /// could be made. Ranks of one call on different algorithms (given different
    /// `MPIRT_COLL_*` settings) send such bytes.
    LengthUnheld { peer: Rank, length: usize },
    /// Ranks of a collective by messages chose algorithms that run different message
    /// patterns (their lengths fall on different sides of a limit in `select`): `peer`'s
    /// message, or one it passed on, came from `theirs` where this rank ran `ours`.
    AlgorithmDisagrees {
        peer: Rank,
        ours: &'static str,
        theirs: &'static str,
    },
    /// The send and receive buffers of a collective hold different element types.
    TypeMismatch {
        send: &'static str,
        receive: &'static str,
    },
    /// Packed bytes that do not fit the buffer given for them (`pack_into`), or a buffer
    /// that asks for more than the packed bytes hold (`unpack_into`).
    PackOverflow { needed: usize, room: usize },
    /// A pack or unpack position or count that cannot be: negative, or a position past the
    /// largest `Count`.
    InvalidPack(String),
    /// A datatype used after the user datatype it came from was dropped.
    FreedDatatype { type_name: &'static str },
    /// The send and the receive datatypes' signatures (their basic elements, in order)
    /// differ at this element.
    SignatureMismatch { element: usize },
    /// A built-in reduction that is not defined for the element type (`sum` of `bool`, ...).
    UnsupportedOperation {
        operation: &'static str,
        type_name: &'static str,
    },
    /// The counts and displacements of a partitioned buffer do not fit it or the communicator.
    InvalidPartition(String),
    /// The root-only form of a collective called on a non-root, or the other way round.
    WrongRootCall { root: Rank, call: &'static str },
    /// An `MPIRT_COLL_*` variable names no algorithm of its collective.
    UnknownAlgorithm {
        variable: String,
        value: String,
        choices: &'static [&'static str],
    },
    /// Every context id is in use by some member of the communicator.
    ContextIdsExhausted,
    /// A group operation was given the same rank twice.
    DuplicateRank(Rank),
    /// A group names a process outside the communicator it is to be made from.
    NotInCommunicator { world_rank: Rank },
    /// A raw-pointer buffer that cannot be one (null, misaligned, too long).
    InvalidRawBuffer(String),
    /// Buffered sends that no rank received before the job finalized.
    Unreceived(String),
    /// A buffered send that does not fit in the space attached for buffered sends.
    BufferFull {
        needed: usize,
        free: usize,
        capacity: usize,
    },
    /// A Cartesian topology's shape, or an argument about it, that cannot be (a negative
    /// extent, a dimension that does not exist, one flag too few, ...).
    InvalidTopology(String),
    /// A coordinate outside its non-periodic dimension.
    CoordinateOutOfRange {
        dimension: usize,
        coordinate: Count,
        extent: Count,
    },
    /// A Cartesian grid with more points than the communicator has ranks.
    GridTooLarge { points: Rank, size: Rank },
    /// The members of a group making a communicator of it passed different tags.
    TagsDisagree { tag: Tag, other: Tag, rank: Rank },
    /// Other ranks of a collective call passed arguments that are not valid, or other than
    /// this rank's where they must be the same.
    PeerArguments(&'static str),
    /// A peer's own check of its arguments to a collective failed: it took its part in the
    /// call only to say so (its own error names the cause).
    PeerRefused { peer: Rank },
    /// This host's leader in a collective's exchange between hosts failed there.
    LeaderFailed { leader: Rank },
    /// A rank outside an inter-communicator's remote group.
    RemoteRankOutOfRange { rank: Rank, remote_size: Rank },
    /// An operation of intra-communicators called on an inter-communicator.
    InterCommunicator,
    /// An operation of inter-communicators (a merge, a leader's part) that cannot be done as
    /// asked: the groups overlap, the remote leader failed, ...
    InvalidInterCommunicator(String),
    /// A spawn's arguments that cannot be (no processes, a program not found, ...).
    InvalidSpawn(String),
    /// A spawn that did not start its processes or could not join them (the launcher cannot
    /// start ranks at run time, it refused, or the wire-up with them failed): why.
    SpawnFailed(String),
    /// A one-sided operation or synchronisation was refused (see `window`).
    Window(crate::window::WindowFault),
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Messaging(e) => e.fmt(f),
            Cause::NegativeTag(tag) => write!(
                f,
                "tag {tag} is negative; negative tags are reserved for the runtime"
            ),
            Cause::RankOutOfRange { rank, size } => write!(
                f,
                "rank {rank} is out of range: the communicator has {size} ranks (0 to {})",
                size - 1
            ),
            Cause::PartialElement {
                bytes,
                element,
                type_name,
            } => write!(
                f,
                "the message is {bytes} bytes, not a whole number of {type_name} elements of \
                 {element} bytes"
            ),
            Cause::NotOneElement {
                bytes,
                element,
                type_name,
            } => write!(
                f,
                "the message is {bytes} bytes but one {type_name} is {element} bytes"
            ),
            Cause::InvalidValue { type_name } => {
                write!(f, "the message's bytes are not a valid {type_name}")
            }
            Cause::NotInitialized => write!(
                f,
                "mpirt is not initialized (call mpirt::initialize() or \
                 initialize_with_threading first)"
            ),
            Cause::Finalized => write!(
                f,
                "mpirt was finalized (the Universe was dropped): no call may come after"
            ),
            Cause::NestedCall => write!(
                f,
                "called from inside another mpirt call on this thread (a user-defined \
                 operation or other callback that mpirt runs may not call mpirt, as in MPI)"
            ),
            Cause::NotInitializingThread => write!(
                f,
                "this thread did not initialize mpirt, and at Threading::Single and Funneled \
                 only the thread that initialized may communicate \
                 (initialize_with_threading(Threading::Multiple) lets others, through \
                 mpirt::threads)"
            ),
            Cause::PredefinedOnOtherThread => write!(
                f,
                "the world and self communicators' handles belong to the thread that \
                 initialized mpirt; at Threading::Serialized and Multiple another thread reaches \
                 the world through world.share(universe.threads()?) (SharedCommunicator::local) \
                 or a duplicate moved with into_sendable"
            ),
            Cause::CollectiveOnView => write!(
                f,
                "a thread's view of a shared communicator (SharedCommunicator::local) takes \
                 point-to-point calls only: collectives and new communicators need a \
                 communicator of the thread's own (duplicate one per thread and move it with \
                 into_sendable)"
            ),
            Cause::CollectiveRequest => write!(
                f,
                "an immediate collective's request cannot move to another thread: the thread \
                 that started it steps it, so it must complete it (point-to-point requests move)"
            ),
            Cause::NotSoleHandle(why) => {
                write!(f, "this communicator cannot move to another thread: {why}")
            }
            Cause::LeakedRequest { pending } => write!(
                f,
                "{pending} request(s) did not complete before their scope ended (forgotten \
                 with mem::forget?); their buffers are no longer safe to use"
            ),
            Cause::UnfinishedCollection { pending } => write!(
                f,
                "{pending} request(s) of its collection were unfinished when the closure \
                 returned; complete them first (wait_all, or test_all until it returns true)"
            ),
            Cause::NotCancellable => write!(
                f,
                "the request of an immediate collective cannot be cancelled; wait on it or \
                 test it to completion"
            ),
            Cause::DroppedRequest => write!(
                f,
                "a request was dropped before it completed; wait on it, test it to \
                 completion, or wrap it in a WaitGuard or CancelGuard"
            ),
            Cause::DroppedFuture => write!(
                f,
                "the future was dropped before its value arrived; finish it with get, or with \
                 try until it succeeds"
            ),
            Cause::Startup(why) => f.write_str(why),
            Cause::CountMismatch {
                what,
                expected,
                got,
            } => write!(f, "{what} holds {got} elements where {expected} are needed"),
            Cause::PeerPassedNothing { peer, expected } => write!(
                f,
                "rank {peer} sent 0 bytes where this rank expected {expected}: the ranks' \
                 counts disagree, or rank {peer} failed earlier in this call and passes no data \
                 on (then its own error says why)"
            ),
            Cause::PeerPassedNoLength { peer } => write!(
                f,
                "rank {peer} sent 0 bytes where this rank expected the length of its part of 0 \
                 bytes: the ranks' counts disagree, or rank {peer} failed earlier in this call \
                 and passes no data on (then its own error says why)"
            ),
            Cause::LengthUnheld { peer, length } => write!(
                f,
                "rank {peer} sent a part's length of {length} bytes, more than any buffer of \
                 this rank can hold with its other parts: the ranks' counts or algorithms \
                 disagree (as ranks given different MPIRT_COLL_* settings do)"
            ),
            Cause::AlgorithmDisagrees { peer, ours, theirs } => write!(
                f,
                "rank {peer} passed on a message of the {theirs} algorithm where this rank ran \
                 {ours}: the ranks' counts disagree (they fall on different sides of an \
                 algorithm's limit)"
            ),
            Cause::LengthDisagrees {
                peer,
                expected,
                got,
            } => write!(
                f,
                "rank {peer} sent {got} bytes where this rank expected {expected}: the ranks' \
                 counts disagree"
            ),
            Cause::TypeMismatch { send, receive } => write!(
                f,
                "the send buffer holds {send} elements but the receive buffer {receive}"
            ),
            Cause::PackOverflow { needed, room } => write!(
                f,
                "{needed} bytes are needed from the packed buffer's start, which holds {room}"
            ),
            Cause::InvalidPack(why) => write!(f, "{why}"),
            Cause::FreedDatatype { type_name } => write!(
                f,
                "the {type_name} was freed (its UserDatatype dropped) before this use"
            ),
            Cause::SignatureMismatch { element } => write!(
                f,
                "the send and receive datatypes' signatures differ at basic element {element} \
                 (their element kinds in order must be the same)"
            ),
            Cause::UnsupportedOperation {
                operation,
                type_name,
            } => write!(
                f,
                "the operation {operation} is not defined for {type_name}"
            ),
            Cause::InvalidPartition(why) => write!(f, "invalid partition: {why}"),
            Cause::WrongRootCall { root, call } => write!(f, "the root is rank {root}: {call}"),
            Cause::UnknownAlgorithm {
                variable,
                value,
                choices,
            } => write!(
                f,
                "{variable}={value} names no algorithm (choose one of: {})",
                choices.join(", ")
            ),
            Cause::ContextIdsExhausted => write!(
                f,
                "every communicator context id is in use (free communicators that are no \
                 longer needed)"
            ),
            Cause::DuplicateRank(rank) => write!(f, "rank {rank} is given more than once"),
            Cause::NotInCommunicator { world_rank } => write!(
                f,
                "the group holds world rank {world_rank}, which is not in the communicator"
            ),
            Cause::InvalidRawBuffer(why) => write!(f, "invalid buffer: {why}"),
            Cause::Unreceived(what) => write!(f, "{what}"),
            Cause::BufferFull {
                needed,
                free,
                capacity,
            } => write!(
                f,
                "the message needs {needed} bytes of the space attached for buffered sends, \
                 which has {free} of {capacity} bytes free (Universe::set_buffer_size)"
            ),
            Cause::InvalidTopology(why) => write!(f, "invalid topology: {why}"),
            Cause::CoordinateOutOfRange {
                dimension,
                coordinate,
                extent,
            } => write!(
                f,
                "coordinate {coordinate} is outside dimension {dimension}, which is not \
                 periodic and has extent {extent} (0 to {})",
                extent - 1
            ),
            Cause::GridTooLarge { points, size } => write!(
                f,
                "the grid has {points} points but the communicator only {size} ranks"
            ),
            Cause::PeerArguments(why) => f.write_str(why),
            Cause::PartDisagrees {
                peer,
                expected,
                sending,
            } => write!(
                f,
                "rank {peer} expects {expected} bytes where this rank sends it {sending}: the \
                 ranks' counts disagree"
            ),
            Cause::PeerRefused { peer } => write!(
                f,
                "rank {peer} refused its arguments to this call (its own error says why)"
            ),
            Cause::LeaderFailed { leader } => write!(
                f,
                "rank {leader}, which leads a host in this call's exchange between hosts, \
                 failed there (its own error says why)"
            ),
            Cause::RemoteRankOutOfRange { rank, remote_size } => write!(
                f,
                "rank {rank} is out of range: the inter-communicator's remote group has \
                 {remote_size} ranks (0 to {})",
                remote_size - 1
            ),
            Cause::InterCommunicator => write!(
                f,
                "not available on an inter-communicator (its collectives are barrier, \
                 all_gather_into, all_reduce_into and all_to_all_into; merge it into an \
                 intra-communicator for the others)"
            ),
            Cause::InvalidInterCommunicator(why) => f.write_str(why),
            Cause::InvalidSpawn(why) => write!(f, "invalid spawn: {why}"),
            Cause::SpawnFailed(why) => write!(f, "spawn failed: {why}"),
            Cause::Window(fault) => fault.fmt(f),
            Cause::TagsDisagree { tag, other, rank } => write!(
                f,
                "this rank passed tag {tag} but group rank {rank} passed {other}: the members \
                 must make the communicator with the same tag"
            ),
        }
    }
}

/// A failed operation: which rank, doing what, and why.
// Boxed: every `Result<_, Error>` of the message path is moved through a few calls, and
// would otherwise be the size of the rare error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(Box<Failure>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Failure {
    rank: Option<Rank>,
    operation: String,
    cause: Cause,
}

impl Error {
    pub(crate) fn new(operation: impl Into<String>, cause: Cause) -> Error {
        Error(Box::new(Failure {
            rank: environment::world_rank(),
            operation: operation.into(),
            cause,
        }))
    }

    /// This process's rank in the world, if it got far enough to have one.
    pub fn rank(&self) -> Option<Rank> {
        self.0.rank
    }

    /// What was being done, e.g. `receive from rank 0 (tag 7)`.
    pub fn operation(&self) -> &str {
        &self.0.operation
    }

    pub fn cause(&self) -> &Cause {
        &self.0.cause
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.rank {
            Some(rank) => write!(f, "rank {rank}: {}: {}", self.0.operation, self.0.cause),
            None => write!(f, "{}: {}", self.0.operation, self.0.cause),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0.cause {
            Cause::Messaging(e) => Some(e),
            _ => None,
        }
    }
}

impl From<PmlError> for Cause {
    fn from(e: PmlError) -> Cause {
        Cause::Messaging(e)
    }
}

/// rsmpi's error type (`mpi::MpiError`), for the calls that return one rather than end the
/// job: a spawn that started too few processes, a string with an interior 0 byte, and (not in
/// rsmpi) mpirt's own error naming the rank, the operation and the cause.
#[derive(Debug)]
pub enum MpiError {
    /// The first count of the second's processes failed to start.
    Spawn(Rank, Rank),
    StringNul(std::ffi::NulError),
    /// An error of mpirt's, such as a spawn, which mpirt cannot do.
    Mpirt(Error),
}

impl fmt::Display for MpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MpiError::Spawn(started, asked) => {
                write!(f, "Failed to spawn {started} of {asked} processes")
            }
            MpiError::StringNul(_) => write!(f, "An interior 0 byte was found in string"),
            MpiError::Mpirt(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for MpiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MpiError::StringNul(e) => Some(e),
            MpiError::Mpirt(e) => Some(e),
            MpiError::Spawn(..) => None,
        }
    }
}

impl From<std::ffi::NulError> for MpiError {
    fn from(e: std::ffi::NulError) -> MpiError {
        MpiError::StringNul(e)
    }
}

/// Prints the error and ends the whole job with a non-zero exit.
pub fn fatal(error: Error) -> ! {
    let message = format!("mpirt: {error}");
    bootstrap::output::say(&message);
    environment::abort_job(1, &message)
}

/// The value, or the error made fatal: how the non-`try_` operations report failure.
pub(crate) fn or_fatal<T>(result: Result<T, Error>) -> T {
    result.unwrap_or_else(|e| fatal(e))
}
