//! Byte movers, behind one contract: [`Transport`].
//!
//! A transport reaches some of the job's ranks. It says what it can do as data ([`Caps`]),
//! takes whole frames (`try_send`), hands what arrived to one [`Sink`] (`poll`: frames,
//! rendezvous data landed in place, finished remote reads), reads a peer's memory where it
//! can (`read`), exposes send buffers to such reads (`expose`), and sleeps until something
//! may have arrived (`sleep`, or a wake fd in the engine's one wait). Each transport opens
//! itself from the bootstrap's key-value exchange ([`Job`]) and keeps its own limits.
//!
//! The engine sees the transports only through [`AnyTransport`], one enum with one `match`
//! per method (in `dispatch.rs`): static dispatch, so the shared-memory send inlines into
//! the engine's. Adding a transport is one module implementing [`Transport`], one variant
//! there, and the place where its `open` runs.

mod dispatch;
pub(crate) mod epoll;
mod loopback;
#[cfg(feature = "ofi")]
pub mod ofi;
pub(crate) mod scratch;
pub mod shm;
pub mod tcp;
#[cfg(feature = "verbs")]
pub mod verbs;
mod wake;

use std::os::fd::RawFd;
use std::time::Duration;

pub use dispatch::{AnyTransport, Connected, Opening, Registration};
pub use wake::Polled;
pub(crate) use wake::WakeSet;

use crate::blocks::{Blocks, PackedRange};
use crate::config::EngineConfig;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::nap::NapStart;
use crate::pml_api::{Counters, EngineError, Wireup};
use crate::protocol::{Core, DataTarget, PeerCaps, RecvBytes, RemoteLayout, SendBytes};
use crate::requests::Handle;
use crate::wire::{self, RemoteKey, DATA_HEADER_LEN};

/// What a transport can do, the same for every peer it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Largest payload sent eagerly (the setting the transport was opened with).
    pub eager_limit: usize,
    /// Largest frame `try_send` takes, header included.
    pub max_frame: usize,
    /// Whether `read` can fetch a peer's memory (else rendezvous data comes in DATA frames).
    pub remote_read: bool,
    /// Whether a peer's exposed window memory can be written and read (one-sided puts and
    /// gets by `rma`: verbs, and OFI where the provider has RMA).
    pub remote_write: bool,
    /// Whether a peer's exposed window memory takes 8-byte atomics (fetch-and-add and
    /// compare-and-swap by `rma`), this rank's own included (through the device: atomics
    /// the device does are not atomic with the CPU's).
    pub atomics: bool,
    /// Whether windows take `rma` unasked (`MPIRT_WINDOW_PATH` unset): false where the
    /// operations are emulated slower than the messages they replace (OFI's tcp and shm),
    /// which take them only when asked (`MPIRT_WINDOW_PATH=rdma`).
    pub rma_by_default: bool,
    /// Whether a frame `try_send` took is on its way with nothing left for this rank to do
    /// (copied into memory the peer reads): then a small send completes inside the call,
    /// with no request (the engine's direct path). Such a transport takes a frame whole or
    /// not at all: it never answers `Sent::Part`.
    pub sends_complete_on_return: bool,
    /// How many separate pieces of memory one operation gathers (iovec or SGE entries).
    pub max_pieces: usize,
}

impl Caps {
    /// What the protocol core needs to know of a peer reached this way.
    pub fn peer_caps(&self) -> PeerCaps {
        PeerCaps {
            eager_limit: self.eager_limit,
            max_frame: self.max_frame,
            remote_read: self.remote_read,
        }
    }
}

/// A peer as `try_send` is told it: its world rank, and the transport's own index of it
/// (what [`Transport::peer_index`] said at start, kept in the engine's route table), so that
/// a send looks nothing up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub rank: Rank,
    pub index: u32,
}

/// How much of a frame `try_send` put on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    Whole,
    /// Some of it: the rest must follow before any other frame to that peer, so the caller
    /// passes the same frame again until it went out whole.
    Part,
    /// None of it: no room now; the caller makes progress and tries again.
    Nothing,
}

/// How a `read` went: done inside the call, or finishing later through the sink.
#[derive(Debug, PartialEq, Eq)]
pub enum Reading {
    Finished(Result<(), String>),
    /// `Sink::read_done` gets the token from a later `poll`.
    InFlight,
}

/// What a send buffer's exposure gives its rendezvous.
#[derive(Clone, Copy, Debug)]
pub struct Exposure {
    /// How the receiver reaches the buffer.
    pub key: RemoteKey,
    /// A lower eager limit for this send, where reading the buffer is cheap (see
    /// `protocol::SendArgs::eager_limit`).
    pub eager_limit: Option<usize>,
    /// What to `release` once the send completes.
    pub registration: Option<Registration>,
}

impl Exposure {
    /// The buffer at `addr` as it is: readable by its address alone.
    pub fn plain(addr: *const u8) -> Exposure {
        Exposure {
            key: RemoteKey {
                addr: addr as u64,
                key: 0,
            },
            eager_limit: None,
            registration: None,
        }
    }
}

/// How a peer reads a non-contiguous send in place ([`Transport::expose_blocks`]).
#[derive(Clone, Copy, Debug)]
pub struct BlocksOffer {
    /// What the offer carries: with `layout`, the first element's address and the key that
    /// reaches the blocks' span; else whatever the transport reads the send by (shared
    /// memory: the description's address, which the receiver reads the layout out of).
    pub key: RemoteKey,
    /// Whether the offer carries the send's layout (`protocol::layout`), for a receiver that
    /// reads the blocks a run at a time ([`Transport::read_layout`]).
    pub layout: bool,
    /// What to `release` once the send completes.
    pub registration: Option<Registration>,
}

/// A one-sided operation on a peer's window memory that [`Transport::expose_window`]
/// exposed (see [`Transport::rma`]). The local memory is the caller's, lent until the
/// operation completed (`rma_done`).
#[derive(Clone, Copy, Debug)]
pub enum RmaOp {
    /// Writes `len` bytes at `local` to the peer's memory.
    Write { local: *const u8, len: usize },
    /// Reads `len` bytes of the peer's memory into `local`.
    Read { local: *mut u8, len: usize },
    /// Adds `add` to the 8 aligned bytes there; the old value is `rma_result`.
    FetchAdd { add: u64 },
    /// Stores `swap` there if it holds `compare`; the old value is `rma_result`.
    CompareSwap { compare: u64, swap: u64 },
}

impl RmaOp {
    /// The bytes it moves.
    pub fn bytes(&self) -> usize {
        match *self {
            RmaOp::Write { len, .. } | RmaOp::Read { len, .. } => len,
            RmaOp::FetchAdd { .. } | RmaOp::CompareSwap { .. } => 8,
        }
    }

    /// Whether it is an 8-byte atomic.
    pub fn is_atomic(&self) -> bool {
        matches!(self, RmaOp::FetchAdd { .. } | RmaOp::CompareSwap { .. })
    }

    /// What it is, in an error.
    pub fn name(&self) -> &'static str {
        match self {
            RmaOp::Write { .. } => "a write",
            RmaOp::Read { .. } => "a read",
            RmaOp::FetchAdd { .. } => "a fetch-and-add",
            RmaOp::CompareSwap { .. } => "a compare-and-swap",
        }
    }

    /// What is left of a write or read once its first `done` bytes were posted.
    pub fn rest(&self, done: usize) -> RmaOp {
        match *self {
            RmaOp::Write { local, len } => RmaOp::Write {
                local: local.wrapping_add(done),
                len: len - done,
            },
            RmaOp::Read { local, len } => RmaOp::Read {
                local: local.wrapping_add(done),
                len: len - done,
            },
            atomic => atomic,
        }
    }
}

/// What [`Transport::rma`] posted: the ticket `rma_done` reports, and how many of the
/// operation's bytes (from its start) it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmaPosted {
    pub ticket: u64,
    pub len: usize,
}

/// Where the rest of a frame that is still arriving goes (see [`Sink::placement`]).
pub enum Placement<'a> {
    /// Not known from the bytes so far: ask again with more.
    NeedMore,
    /// Stage it whole, then hand it to `Sink::frame`.
    Staged,
    /// Its first `header_len` bytes (at most `Sink::PLACEMENT_HEAD`) are a header; the rest
    /// (`target` is exactly as long) lands in `target`, lent to the transport until it
    /// reports `Sink::data_landed` with `token`.
    InPlace {
        header_len: usize,
        target: &'a mut [u8],
        token: u64,
    },
    /// As `InPlace`, for a receive laid out in blocks: the rest is the packed bytes `range`
    /// of the non-contiguous buffer `blocks` describes, scattered into its blocks, which stay
    /// lent to the transport until it reports `Sink::data_landed` with `token`. Only an
    /// `unsafe impl Sink` returns one: its contract says the blocks are real.
    Scattered {
        header_len: usize,
        blocks: &'a Blocks,
        range: PackedRange,
        token: u64,
    },
}

/// Where `poll` delivers (the protocol core, in the engine).
///
/// # Safety
/// A transport writes through what [`placement`](Sink::placement) returns after the borrow
/// ended, until it reports `data_landed` with the placement's token: an implementation must
/// keep an `InPlace` target alive and otherwise unaccessed until then, and a `Scattered`
/// placement's `blocks` must have been made in this process by `Blocks::new` from a live
/// block list and elements, `range` within its bytes, the blocks of the range writable and
/// otherwise unaccessed until then too (a safe `Blocks::new` takes any address, so nothing
/// else stops a made-up description from sending a socket's bytes anywhere).
pub unsafe trait Sink {
    /// How many bytes of a frame's start `placement` needs to see.
    const PLACEMENT_HEAD: usize;

    /// A whole frame from `peer`.
    fn frame(&mut self, peer: Rank, frame: &[u8]) -> Result<(), PmlError>;
    /// Where a `len`-byte frame from `peer` goes, whose first bytes (fewer than `len`) are
    /// `head`: for a transport that reads a stream, so that bulk data lands in its buffer
    /// instead of being staged (TCP's DATA frames). `PLACEMENT_HEAD` bytes always suffice.
    fn placement(&mut self, peer: Rank, head: &[u8], len: usize)
        -> Result<Placement<'_>, PmlError>;
    /// The payload placed with `token` (`len` bytes) has all landed.
    fn data_landed(&mut self, peer: Rank, token: u64, len: usize) -> Result<(), PmlError>;
    /// The read started with `token` finished (or failed, with the cause).
    fn read_done(&mut self, token: u64, result: Result<(), String>) -> Result<(), PmlError>;
}

/// What every transport's wire-up gets: the job as the bootstrap knows it.
pub struct Job<'w> {
    pub rank: Rank,
    pub size: u32,
    /// Host of each rank.
    pub hosts: Vec<String>,
    pub job_id: String,
    pub config: EngineConfig,
    pub wireup: &'w mut dyn Wireup,
}

impl<'w> Job<'w> {
    /// Publishes this rank's host and learns every rank's (a fence): what decides which
    /// transport carries which pair of ranks.
    pub fn new(wireup: &'w mut dyn Wireup, config: EngineConfig) -> Result<Job<'w>, EngineError> {
        let rank = wireup.rank();
        let size = wireup.size();
        let mut job = Job {
            rank,
            size,
            hosts: Vec::with_capacity(size as usize),
            // Known from the first fence on (under PMI it is made from rank 0's nonce).
            job_id: String::new(),
            config,
            wireup,
        };
        job.put(&format!("pml.host.{rank}"), hostname().as_bytes())?;
        job.fence()?;
        job.job_id = job.wireup.job_id();
        for r in 0..size {
            let h = job.get(r, &format!("pml.host.{r}"))?;
            job.hosts.push(String::from_utf8_lossy(&h).into_owned());
        }
        Ok(job)
    }

    pub fn host(&self) -> &str {
        &self.hosts[self.rank as usize]
    }

    /// How many ranks run on this rank's host, this one included.
    pub fn ranks_on_host(&self) -> usize {
        self.hosts.iter().filter(|h| *h == self.host()).count()
    }

    /// A wait's busy-poll budget, and how long a wait that does not spin then yields its CPU
    /// between polls before it sleeps (see `waiting`): no spin and
    /// [`YIELD_FOR`](crate::config::YIELD_FOR) of yielding for ranks that outnumber the cores
    /// they may use, the configured spin and no yielding otherwise.
    pub fn wait_budgets(&self) -> (Duration, Duration) {
        if crate::config::shares_cores(self.ranks_on_host()) {
            (Duration::ZERO, crate::config::YIELD_FOR)
        } else {
            (self.config.spin, Duration::ZERO)
        }
    }

    pub fn fence(&mut self) -> Result<(), EngineError> {
        self.wireup.fence().map_err(EngineError::Wireup)
    }

    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), EngineError> {
        self.wireup.put(key, value).map_err(EngineError::Wireup)
    }

    /// The value rank `from` put under `key`.
    pub fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, EngineError> {
        self.wireup.get(from, key).map_err(EngineError::Wireup)
    }
}

/// The contract every transport keeps once connected. Wire-up runs in three steps with a
/// fence after each of the first two: each transport's `open` publishes what peers need,
/// its connect step reads what they published and says which ranks it carries (see
/// [`Opening`]), and `finish` runs once every rank has connected.
pub trait Transport {
    /// Runs after every rank connected (probes that need the peers ready).
    fn finish(&mut self, _job: &mut Job) -> Result<(), EngineError> {
        Ok(())
    }

    fn caps(&self) -> Caps;

    /// This transport's own index of `peer`, a rank it carries, which every `try_send` to
    /// it is given back (see [`Peer`]); by default the world rank.
    fn peer_index(&self, peer: Rank) -> u32 {
        peer
    }

    /// Puts `header` then `payload` on the way to `peer` as one frame, or some or none of it.
    fn try_send(&mut self, peer: Peer, header: &[u8], payload: &[u8]) -> Result<Sent, PmlError>;

    /// [`try_send`](Self::try_send) of a frame whose payload is the packed bytes `range` of
    /// the non-contiguous buffer `blocks` describes (a description
    /// made in this process), taken straight from its blocks; `None`, having sent nothing,
    /// where this transport does not (the caller packs them). As with `try_send`, a frame
    /// sent in part is passed again, the same, until it went out whole.
    ///
    /// # Safety
    /// `blocks` must have been made in this process by [`Blocks::new`], the elements and
    /// block list it points to must be alive and readable for the call (the transport reads
    /// through its raw addresses), and `range.start + range.len` at most `blocks.len()`.
    unsafe fn try_send_blocks(
        &mut self,
        _peer: Peer,
        _header: &[u8],
        _blocks: &Blocks,
        _range: PackedRange,
    ) -> Result<Option<Sent>, PmlError> {
        Ok(None)
    }

    /// Whether [`try_send_blocks`](Self::try_send_blocks) takes every frame of a queued send
    /// of a non-contiguous buffer, eager MATCH and streamed DATA alike: then such a send is
    /// posted undescribed by any exposure and goes without a packed copy, whatever its size
    /// (a transport whose receiver streams rendezvous data after a GET: TCP).
    fn streams_blocks(&self) -> bool {
        false
    }

    /// Hands what arrived to `sink`; returns how many deliveries (frames, landed DATA
    /// payloads, finished reads) it made. Called every progress round: it returns at once,
    /// as cheaply as `has_work` says so, when nothing is there.
    fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError>;

    /// Whether `poll` may find anything; cheap, for a rank that spins waiting.
    fn has_work(&self) -> bool;

    /// Bytes of the rank's requests that move only while this rank polls (manual progress)
    /// and report nothing until they are all in: on OFI, reads in flight, and send buffers
    /// exposed to peers' reads from the exposure (the RTS) until the peer's FIN, including
    /// while the peer has not matched the send yet and nothing moves (the sender cannot tell
    /// that from a read under way: the provider reports neither to it). A wait spins at least
    /// as long as they take before it sleeps
    /// ([`spin_budget`](crate::waiting::spin_budget)): sleeping would stop them. None by
    /// default: a transport whose bytes move without this rank (shared memory, RDMA, the
    /// kernel's sockets), or that reports them as they come (frames, landed DATA), needs no
    /// longer spin.
    fn bytes_in_flight(&self) -> usize {
        0
    }

    /// Reads `target.len()` bytes at `key` in `peer` into `target`, which stays lent until
    /// the read finished; `token` names the read in `Sink::read_done`.
    fn read(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        target: &mut [u8],
        token: u64,
    ) -> Result<Reading, PmlError>;

    /// [`read`](Self::read) of the first `len` packed bytes of a receive laid out in blocks
    /// straight into its blocks, with no staging copy: `None`, having read nothing, where
    /// this transport reads only into contiguous bytes (the core then stages the read and
    /// unpacks it).
    ///
    /// # Safety
    /// `blocks` must have been made in this process by [`Blocks::new`], its block list alive
    /// and its elements' blocks writable and not otherwise accessed until the read finished
    /// (what [`RecvBytes`] promises of a receive's), and `len` at most `blocks.len()`.
    unsafe fn read_into_blocks(
        &mut self,
        _peer: Rank,
        _key: RemoteKey,
        _blocks: &Blocks,
        _len: usize,
        _token: u64,
    ) -> Result<Option<Reading>, PmlError> {
        Ok(None)
    }

    /// [`read`](Self::read) of a non-contiguous send whose offer carried its `layout` (its
    /// blocks at the peer's addresses, reached under `key.key`): a read per run of them,
    /// into contiguous `target`. Only a transport whose `expose_blocks` offers layouts reads
    /// them; by default a peer's offer of one is a named error.
    fn read_layout(
        &mut self,
        peer: Rank,
        _key: RemoteKey,
        _layout: &RemoteLayout,
        _target: &mut [u8],
        _token: u64,
    ) -> Result<Reading, PmlError> {
        Err(PmlError::Protocol {
            peer,
            what: "a rendezvous offer with its send's layout over a transport that does not read \
                   one"
            .into(),
        })
    }

    /// [`read_layout`](Self::read_layout) straight into a receive laid out in blocks, as
    /// [`read_into_blocks`](Self::read_into_blocks): `None`, having read nothing, where this
    /// transport does not (the engine then reads into a staging buffer by `read_layout`).
    ///
    /// # Safety
    /// As for [`read_into_blocks`](Self::read_into_blocks).
    unsafe fn read_layout_into_blocks(
        &mut self,
        _peer: Rank,
        _key: RemoteKey,
        _layout: &RemoteLayout,
        _blocks: &Blocks,
        _len: usize,
        _token: u64,
    ) -> Result<Option<Reading>, PmlError> {
        Ok(None)
    }

    /// Lets `peer` read the `len` bytes at `buf` of a send; `sends_eagerly` says whether the
    /// send goes eagerly anyway (and so needs no exposure), asked only where it costs. By
    /// default the buffer's address is all a reader needs.
    fn expose(
        &mut self,
        _peer: Rank,
        buf: *const u8,
        _len: usize,
        _sends_eagerly: impl FnOnce() -> bool,
    ) -> Result<Exposure, PmlError> {
        Ok(Exposure::plain(buf))
    }

    /// Lets `peer` read the non-contiguous send buffer `blocks` describes in place, in
    /// pieces, by rendezvous: what its offer carries, or `None` where this transport does
    /// not read a peer's memory that way, or not this buffer (the send is then packed).
    ///
    /// # Safety
    /// `blocks` must have been made in this process by [`Blocks::new`], and it, its block
    /// list and its elements must stay alive and unchanged until the send completes
    /// (`Engine::post_send_blocks`).
    unsafe fn expose_blocks(&mut self, _peer: Rank, _blocks: &Blocks) -> Option<BlocksOffer> {
        None
    }

    /// Undoes an exposure once its send completed.
    fn release(&mut self, _registration: Registration) {}

    /// Lets peers write, read and (where `Caps::atomics`) update atomically the `len`
    /// bytes at `buf`, a window's memory, until `release_window`: the address and key they
    /// name `buf` by (an address a peer adds its displacements to: `buf`'s own, or 0 where
    /// the transport addresses memory by offset into its registration) and the exposure's
    /// id, or `None` where this transport has no one-sided operations.
    fn expose_window(
        &mut self,
        _buf: *mut u8,
        _len: usize,
    ) -> Result<Option<(RemoteKey, u64)>, String> {
        Ok(None)
    }

    /// Undoes `expose_window`'s exposure `id` (no operation of a peer reaches it any more).
    fn release_window(&mut self, _id: u64) {}

    /// Starts `op` on `peer`'s memory at `remote` (an address and a key that peer's
    /// `expose_window` gave), or of a write or read as much of it from its start as there
    /// is room for now (post the rest after): a ticket that `rma_done` reports, or `None`
    /// where there is no room now (make progress and try again). Operations to one peer
    /// complete in order, and complete at the target: a write is in its memory when it
    /// completed. An error here posted nothing, and leaves the transport working.
    ///
    /// # Safety
    /// `op`'s local memory must stay valid (for reads, where it is read into) and untouched
    /// until `rma_done` says the ticket completed (or failed), or the transport stopped.
    unsafe fn rma(
        &mut self,
        peer: Rank,
        _op: RmaOp,
        _remote: RemoteKey,
    ) -> Result<Option<RmaPosted>, PmlError> {
        Err(PmlError::transport(
            peer,
            "this transport has no one-sided operations".to_string(),
        ))
    }

    /// Whether every operation to `peer` up to `ticket` completed; the error of the first
    /// of them that failed, once all did (the transport goes on: only that operation, and
    /// those after it to `peer` that could no longer be done, failed).
    fn rma_done(&self, _peer: Rank, _ticket: u64) -> Result<bool, PmlError> {
        Ok(true)
    }

    /// The old value an atomic's `ticket` fetched, once it completed.
    fn rma_result(&self, _peer: Rank, _ticket: u64) -> u64 {
        0
    }

    /// Sleeps until something may have arrived for this rank, room opened where a frame was
    /// refused, or `timeout` passed; spurious returns are fine.
    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError>;

    /// The fd that becomes readable when this transport's `sleep` would return, for a rank
    /// that waits on several transports at once; `None`: nothing to wait for.
    fn wake_fd(&mut self) -> Result<Option<RawFd>, EngineError>;

    /// Before a wait on the wake fds: tells peers how to wake this rank; returns whether
    /// something may already be there (then the caller does not sleep).
    fn before_wait(&mut self) -> Result<bool, PmlError>;

    /// After a wait on the wake fds (slept or not).
    fn after_wait(&mut self);

    /// Prepares a sleep that a thread takes apart from the engine (`crate::nap`), where this
    /// is the one transport that peers wake: tells peers how to wake this rank and looks once
    /// more, as `sleep` does first. None by default (`Unwakeable`): OFI's sleep decides
    /// between polling, yielding and sleeping as it goes, which a sleep apart cannot.
    fn begin_nap(&mut self) -> Result<NapStart, PmlError> {
        Ok(NapStart::Unwakeable)
    }

    /// Ends what `begin_nap` prepared (`timed_out`: the sleep ran to its timeout).
    fn end_nap(&mut self, _timed_out: bool) {}

    /// Wakes this rank's sleep apart from the engine its own way, where it is not on a wake
    /// fd (the shared-memory futex word).
    fn wake_nap(&self) {}

    /// Wakes `peer`'s sleep in its own PML by a wake of this transport's own (the
    /// shared-memory futex word or wake pipe of a rank on this host), for a rank that
    /// published what `peer` may be waiting for outside the PML (a flag of the collective
    /// area); whether it could. `false` by default: the engine then sends `peer` a WAKE
    /// frame, whose arrival wakes it (`Engine::wake_peer`).
    fn wake_peer(&self, _peer: Rank) -> bool {
        false
    }

    /// For a transport without a wake fd, whose data moves only inside its own calls (OFI
    /// where the provider has no wait fd: udp;ofi_rxd): how soon a wait on the other
    /// transports' wake fds must come back to poll it. Asked after `before_wait`. `None`
    /// (the default): it has a wake fd, or nothing that needs polling.
    fn polled(&self) -> Option<Polled> {
        None
    }

    /// Stops moving data into this process, for an engine that stopped on a failure (a
    /// transport whose data moves only inside its own calls has nothing to stop).
    fn stop(&mut self) {}

    /// Adds what this transport counts itself.
    fn count(&self, _counters: &mut Counters) {}

    /// One clause of `--verbose`; `peers`: how many ranks this transport carries.
    fn describe(&self, peers: usize) -> String;
}

/// The name of this process's host, as `gethostname` gives it ("localhost" if it cannot be
/// read). The one source of host names in a job: the engine's table of each rank's host and
/// the bridges' entries both come from it, so every process names a host the same way and
/// the ranks of a communicator agree on who shares a host.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for writes of its length; gethostname NUL-terminates within
    // it or truncates, and we stop at the first NUL or the end.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

// SAFETY: its placements are the user's receive buffer or the blocks describing it
// (`RecvBytes`'s contract: made in this process, writable), checked by `data_target` to lie
// in the part the receive still expects, and the receive stays pending, its buffer lent to
// the engine and touched by nothing else, until `data_landed` accounts for every byte.
unsafe impl<S: SendBytes, R: RecvBytes> Sink for Core<S, R> {
    const PLACEMENT_HEAD: usize = DATA_HEADER_LEN;

    #[inline]
    fn frame(&mut self, peer: Rank, frame: &[u8]) -> Result<(), PmlError> {
        self.on_frame(peer, frame)
    }

    /// DATA frames (rendezvous data after a GET) land in their receive's buffer, or its
    /// blocks. A head too short to tell the kind, or a DATA frame's header not yet whole,
    /// asks for more: a stream cuts a frame anywhere (a sender's partial write), and a DATA
    /// frame taken for one to stage would be refused as longer than any staged frame.
    fn placement(
        &mut self,
        peer: Rank,
        head: &[u8],
        len: usize,
    ) -> Result<Placement<'_>, PmlError> {
        if head.len() < wire::KIND_LEN {
            return Ok(Placement::NeedMore);
        }
        if !(wire::is_data_frame(head) && len > DATA_HEADER_LEN) {
            return Ok(Placement::Staged);
        }
        if head.len() < DATA_HEADER_LEN {
            return Ok(Placement::NeedMore);
        }
        let (recv_request, offset) =
            wire::decode_data_header(&head[..DATA_HEADER_LEN]).map_err(|error| PmlError::Wire {
                peer,
                error: Box::new(error),
            })?;
        Ok(
            match self.data_target(peer, recv_request, offset, len - DATA_HEADER_LEN)? {
                DataTarget::Bytes(target) => Placement::InPlace {
                    header_len: DATA_HEADER_LEN,
                    target,
                    token: recv_request,
                },
                DataTarget::Blocks { blocks, range } => Placement::Scattered {
                    header_len: DATA_HEADER_LEN,
                    blocks,
                    range,
                    token: recv_request,
                },
            },
        )
    }

    fn data_landed(&mut self, peer: Rank, token: u64, len: usize) -> Result<(), PmlError> {
        Core::data_landed(self, peer, token, len)
    }

    fn read_done(&mut self, token: u64, result: Result<(), String>) -> Result<(), PmlError> {
        let recv = Handle::from_wire(token);
        match result {
            Ok(()) => Core::read_done(self, recv),
            Err(cause) => self.read_failed(recv, cause),
        }
    }
}
