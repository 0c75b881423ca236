//! What can go wrong in point-to-point messaging, worded for the person reading the message.
//! The layers above add the rank and the operation; these say the cause.

use std::fmt;

use crate::envelope::{Rank, Status};
use crate::requests::Handle;
use crate::wire::WireError;

/// Every `Result` of the PML carries one, on the paths each message takes, so it is kept to
/// three words (a test asserts it): what would make it larger (several strings, a truncation's
/// three counts) is boxed, as failures are rare and a box costs only then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PmlError {
    /// A handle that names no live request (already completed and collected, or never issued).
    StaleRequest(Handle),
    /// The message was longer than the receive buffer (see [`Truncation`]).
    Truncated(Box<Truncation>),
    /// The receive was cancelled before any message matched it.
    Cancelled,
    /// A peer sent bytes that are not a frame.
    Wire { peer: Rank, error: Box<WireError> },
    /// A peer sent a well-formed frame that makes no sense in the current state.
    Protocol { peer: Rank, what: Box<str> },
    /// A peer the runtime has no transport for.
    UnknownPeer(Rank),
    /// Pulling rendezvous data out of a peer failed.
    ReadFailed { peer: Rank, cause: Box<str> },
    /// The connection to a peer failed or broke (see [`TransportFailure`]).
    Transport(Box<TransportFailure>),
    /// An envelope value that the PML in use cannot carry (the UCX PML's tag has room for
    /// fewer bits than the envelope's types); the text names the value and the limit.
    OutOfRange(Box<str>),
    /// A UCX call failed (the UCX PML; see [`UcxFailure`]).
    Ucx(Box<UcxFailure>),
    /// A one-sided operation on a peer's window memory failed (at posting, or its
    /// completion came back with an error); the engine goes on. `cause` names the operation,
    /// its length, the peer and why.
    OneSided { peer: Rank, cause: Box<str> },
    /// Messaging stopped on this earlier failure, and moves no data any more.
    Stopped(Box<PmlError>),
}

/// A message longer than the receive buffer: the first `buffer_len` bytes were delivered and
/// nothing past the buffer was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub message_len: usize,
    pub buffer_len: usize,
    pub status: Status,
}

/// A connection to a peer that failed or broke: `host` is where the peer runs, when known,
/// and `named` what the messages call the peer where its engine rank is not how users know it
/// (a process met over a spawn's bridge: "rank 1 of spawned job 1 (...)"), else empty.
/// `cause` refers to the peer as "it": the message names it once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportFailure {
    pub peer: Rank,
    pub host: String,
    pub named: String,
    pub cause: String,
}

/// A UCX call that failed (the UCX PML): which operation, and UCX's own words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UcxFailure {
    pub operation: &'static str,
    pub cause: String,
}

impl PmlError {
    /// A one-sided operation on `peer`'s memory failed; `cause` names the operation, its
    /// length, the peer and why.
    #[cold]
    pub fn one_sided(peer: Rank, cause: impl Into<Box<str>>) -> PmlError {
        PmlError::OneSided {
            peer,
            cause: cause.into(),
        }
    }

    /// A message of `status.len` bytes that arrived for a receive buffer of `buffer_len`.
    #[cold]
    pub fn truncated(status: Status, buffer_len: usize) -> PmlError {
        PmlError::Truncated(Box::new(Truncation {
            message_len: status.len,
            buffer_len,
            status,
        }))
    }

    /// A transport failure with `peer`, whose host the engine adds (see `on_host`).
    #[cold]
    pub fn transport(peer: Rank, cause: impl Into<String>) -> PmlError {
        PmlError::Transport(Box::new(TransportFailure {
            peer,
            host: String::new(),
            named: String::new(),
            cause: cause.into(),
        }))
    }

    /// A UCX call, `operation`, that failed for `cause` (UCX's own words).
    #[cold]
    pub fn ucx(operation: &'static str, cause: impl Into<String>) -> PmlError {
        PmlError::Ucx(Box::new(UcxFailure {
            operation,
            cause: cause.into(),
        }))
    }

    /// Names the host of the peer of a transport failure, so that a job whose rank died
    /// says where to look even when a peer's error reaches the launcher first, and the peer
    /// as users know it (`names`, by engine rank: empty for the world's ranks).
    pub fn on_host(self, hosts: &[String], names: &[String]) -> PmlError {
        match self {
            PmlError::Transport(mut failure) => {
                let at = failure.peer as usize;
                failure.host = hosts.get(at).cloned().unwrap_or_default();
                failure.named = names.get(at).cloned().unwrap_or_default();
                PmlError::Transport(failure)
            }
            other => other,
        }
    }
}

impl fmt::Display for PmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmlError::StaleRequest(h) => write!(
                f,
                "request {h} does not exist (it already completed, or was never issued)"
            ),
            PmlError::Truncated(t) => write!(
                f,
                "message truncated: the message from rank {} with tag {} is {} bytes but the \
                 receive buffer holds only {} bytes",
                t.status.source, t.status.tag, t.message_len, t.buffer_len
            ),
            PmlError::Cancelled => write!(f, "the receive was cancelled"),
            PmlError::Wire { peer, error } => write!(f, "from rank {peer}: {error}"),
            PmlError::Protocol { peer, what } => {
                write!(f, "protocol error from rank {peer}: {what}")
            }
            PmlError::UnknownPeer(peer) => write!(f, "rank {peer} has no transport"),
            PmlError::ReadFailed { peer, cause } => {
                write!(
                    f,
                    "reading rendezvous data from rank {peer} failed: {cause}"
                )
            }
            PmlError::Transport(t) => {
                match t.named.is_empty() {
                    true => write!(f, "the connection with rank {}", t.peer)?,
                    false => write!(f, "the connection with {}", t.named)?,
                }
                if !t.host.is_empty() {
                    write!(f, " on {}", t.host)?;
                }
                write!(f, " failed: {}", t.cause)
            }
            PmlError::OneSided { cause, .. } => f.write_str(cause),
            PmlError::OutOfRange(what) => f.write_str(what),
            PmlError::Ucx(u) => write!(f, "UCX {} failed: {}", u.operation, u.cause),
            PmlError::Stopped(first) => {
                write!(f, "messaging stopped after an earlier failure: {first}")
            }
        }
    }
}

impl std::error::Error for PmlError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three words, as the type's comment says: a larger error would widen every `Result`
    /// of the PML (a transport failure's strings took 80 bytes).
    #[test]
    fn an_error_is_three_words() {
        assert!(
            std::mem::size_of::<PmlError>() <= 24,
            "{}",
            std::mem::size_of::<PmlError>()
        );
        assert!(std::mem::size_of::<Result<usize, PmlError>>() <= 24);
    }

    /// The texts are those of the unboxed fields.
    #[test]
    fn boxed_failures_read_as_before() {
        let status = Status {
            source: 2,
            tag: 7,
            len: 100,
        };
        assert_eq!(
            PmlError::truncated(status, 10).to_string(),
            "message truncated: the message from rank 2 with tag 7 is 100 bytes but the \
             receive buffer holds only 10 bytes"
        );
        let failure = PmlError::transport(1, "it died").on_host(
            &["a".into(), "b".into()],
            &[String::new(), "rank 0 of job 2".into()],
        );
        assert_eq!(
            failure.to_string(),
            "the connection with rank 0 of job 2 on b failed: it died"
        );
        assert_eq!(
            PmlError::transport(3, "it died").to_string(),
            "the connection with rank 3 failed: it died"
        );
        assert_eq!(
            PmlError::ucx("ucp_tag_send_nbx", "timed out").to_string(),
            "UCX ucp_tag_send_nbx failed: timed out"
        );
    }
}
