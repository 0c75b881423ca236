//! The vocabulary every PML speaks, the native engine's and UCX's alike: how ranks wire up
//! ([`Wireup`]), how a request ended ([`Done`]), the buffers lent to a PML ([`RecvBuf`]),
//! start-up failures ([`EngineError`]) and the counts a PML keeps ([`Counters`]). It lives
//! apart from either PML so that neither imports the other's module.

use std::{fmt, slice};

use crate::envelope::Status;
use crate::error::PmlError;

/// How the engine learns about its peers: rank, size, and a key-value exchange with a fence
/// (rsrun's service, PMI-2 under Slurm, or a local map for a singleton).
pub trait Wireup {
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    /// Unique per job, so that shared-memory names of two jobs never collide.
    fn job_id(&self) -> String;
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    fn fence(&mut self) -> Result<(), String>;
    fn get(&mut self, key: &str) -> Result<Vec<u8>, String>;
}

/// A receive buffer lent to a PML until the receive completes.
pub struct RecvBuf {
    ptr: *mut u8,
    len: usize,
}

impl RecvBuf {
    /// The `len` bytes at `ptr` that a PML's `post_recv`, `start_recv` or `recv` was lent,
    /// under that call's contract (valid for writes and not otherwise accessed until the
    /// receive completes).
    #[inline]
    pub(crate) fn new(ptr: *mut u8, len: usize) -> RecvBuf {
        RecvBuf { ptr, len }
    }
}

impl AsMut<[u8]> for RecvBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `post_recv`'s caller guarantees `ptr` is valid for writes of `len` bytes and
        // not otherwise accessed until the request completes; this `RecvBuf` is dropped then.
        // Raw receives may share bytes with each other, but a PML is one thread and this
        // slice lives for one copy into it, so no two of them are ever alive at once.
        unsafe { slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// How a finished request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    Sent,
    Received(Status),
}

/// Failures of the engine as a whole, at start-up or from a transport.
#[derive(Debug)]
pub enum EngineError {
    Config(String),
    Wireup(String),
    Transport(String),
    Pml(PmlError),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Config(m) => write!(f, "bad setting: {m}"),
            EngineError::Wireup(m) => write!(f, "wire-up failed: {m}"),
            EngineError::Transport(m) => write!(f, "transport failed: {m}"),
            EngineError::Pml(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<PmlError> for EngineError {
    fn from(e: PmlError) -> Self {
        EngineError::Pml(e)
    }
}

/// Counts of what went which way, for tests and `--verbose`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub frames_sent: u64,
    pub frames_received: u64,
    pub remote_reads: u64,
    pub remote_read_bytes: u64,
    /// Remote reads served by memcpy from a same-host peer's mapped shared arena (the other
    /// shm reads went by process_vm_readv).
    pub mapped_reads: u64,
    /// Memory registrations made (RDMA): a buffer sent from again is not registered again.
    pub registrations: u64,
}
