//! What can go wrong in point-to-point messaging, worded for the person reading the message.
//! The layers above add the rank and the operation; these say the cause.

use std::fmt;

use crate::envelope::{Rank, Status};
use crate::requests::Handle;
use crate::wire::WireError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PmlError {
    /// A handle that names no live request (already completed and collected, or never issued).
    StaleRequest(Handle),
    /// The message was longer than the receive buffer: the first `buffer_len` bytes were
    /// delivered and nothing past the buffer was written.
    Truncated {
        message_len: usize,
        buffer_len: usize,
        status: Status,
    },
    /// The receive was cancelled before any message matched it.
    Cancelled,
    /// A peer sent bytes that are not a frame.
    Wire { peer: Rank, error: WireError },
    /// A peer sent a well-formed frame that makes no sense in the current state.
    Protocol { peer: Rank, what: String },
    /// A peer the runtime has no transport for.
    UnknownPeer(Rank),
    /// Pulling rendezvous data out of a peer failed.
    ReadFailed { peer: Rank, cause: String },
    /// The connection to a peer failed or broke; `host` is where the peer runs, when known,
    /// and `named` what the messages call the peer where its engine rank is not how users
    /// know it (a process met over a spawn's bridge: "rank 1 of spawned job 1 (...)"), else
    /// empty. `cause` refers to the peer as "it": the message names it once.
    Transport {
        peer: Rank,
        host: String,
        named: String,
        cause: String,
    },
    /// An envelope value that the PML in use cannot carry (the UCX PML's tag has room for
    /// fewer bits than the envelope's types); the text names the value and the limit.
    OutOfRange(String),
    /// A UCX call failed (the UCX PML): which operation, and UCX's own words.
    Ucx {
        operation: &'static str,
        cause: String,
    },
    /// A one-sided operation on a peer's window memory failed (at posting, or its
    /// completion came back with an error); the engine goes on. `cause` names the operation,
    /// its length, the peer and why.
    OneSided { peer: Rank, cause: String },
    /// Messaging stopped on this earlier failure, and moves no data any more.
    Stopped(Box<PmlError>),
}

impl PmlError {
    /// A message of `status.len` bytes that arrived for a receive buffer of `buffer_len`.
    pub fn truncated(status: Status, buffer_len: usize) -> PmlError {
        PmlError::Truncated {
            message_len: status.len,
            buffer_len,
            status,
        }
    }

    /// A transport failure with `peer`, whose host the engine adds (see `on_host`).
    pub fn transport(peer: Rank, cause: impl Into<String>) -> PmlError {
        PmlError::Transport {
            peer,
            host: String::new(),
            named: String::new(),
            cause: cause.into(),
        }
    }

    /// Names the host of the peer of a transport failure, so that a job whose rank died
    /// says where to look even when a peer's error reaches the launcher first, and the peer
    /// as users know it (`names`, by engine rank: empty for the world's ranks).
    pub fn on_host(self, hosts: &[String], names: &[String]) -> PmlError {
        match self {
            PmlError::Transport { peer, cause, .. } => PmlError::Transport {
                peer,
                host: hosts.get(peer as usize).cloned().unwrap_or_default(),
                named: names.get(peer as usize).cloned().unwrap_or_default(),
                cause,
            },
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
            PmlError::Truncated {
                message_len,
                buffer_len,
                status,
            } => write!(
                f,
                "message truncated: the message from rank {} with tag {} is {message_len} bytes \
                 but the receive buffer holds only {buffer_len} bytes",
                status.source, status.tag
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
            PmlError::Transport {
                peer,
                host,
                named,
                cause,
            } => {
                match named.is_empty() {
                    true => write!(f, "the connection with rank {peer}")?,
                    false => write!(f, "the connection with {named}")?,
                }
                if !host.is_empty() {
                    write!(f, " on {host}")?;
                }
                write!(f, " failed: {cause}")
            }
            PmlError::OneSided { cause, .. } => f.write_str(cause),
            PmlError::OutOfRange(what) => f.write_str(what),
            PmlError::Ucx { operation, cause } => write!(f, "UCX {operation} failed: {cause}"),
            PmlError::Stopped(first) => {
                write!(f, "messaging stopped after an earlier failure: {first}")
            }
        }
    }
}

impl std::error::Error for PmlError {}
