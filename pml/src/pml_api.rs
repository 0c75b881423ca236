//! The contract every PML keeps, the native engine and UCX's alike: the calls the layer
//! above makes ([`Pml`]) and their vocabulary: how ranks wire up ([`Wireup`]), how a request
//! ended ([`Done`]), the buffers lent to a PML ([`RecvBuf`]), start-up failures
//! ([`EngineError`]) and the counts a PML keeps ([`Counters`]). It lives apart from either PML
//! so that neither imports the other's module.

use std::time::Duration;
use std::{fmt, slice};

use crate::blocks::Blocks;
use crate::envelope::{ContextId, Rank, SourceSel, Status, Tag, TagSel};
use crate::error::PmlError;
use crate::protocol::{SendMode, Started};
use crate::requests::Handle;

/// MPI point-to-point messaging for one process, as mpirt's layer above calls it.
///
/// Requests are [`Handle`]s: a send or receive posted returns one (or [`Handle::SENT`] for a
/// send that finished as it was posted), and the handle is spent once `test`, `collect` or
/// `wait` returned its outcome (`Some`, or an error). Matching follows MPI: messages between
/// two ranks in one context are non-overtaking; wildcards are [`SourceSel::Any`] and
/// [`TagSel::Any`]. A PML is one thread's: nothing here is called concurrently. A failure of
/// messaging itself (a broken connection, a malformed frame) stops the PML, and every later
/// call that would move data fails naming that first failure ([`PmlError::Stopped`]).
///
/// Buffers are lent as raw pointers: the caller keeps them valid, and does not touch them,
/// until the request that holds them completes (the `# Safety` of each call says exactly).
pub trait Pml {
    /// A message a matched probe took out of the PML's unexpected messages, for the one
    /// receive `post_matched_recv` makes of it.
    type Message;

    fn rank(&self) -> Rank;

    fn size(&self) -> u32;

    /// What this rank runs on, for `--verbose`.
    fn description(&self) -> &str;

    /// Whether this rank's waits may spin before they yield or sleep: not when ranks
    /// outnumber the cores they may use, or when spinning was turned off.
    fn waits_spin(&self) -> bool;

    /// How long a wait that does not spin polls, yielding its CPU between polls, before it
    /// sleeps: [`config::YIELD_FOR`](crate::config::YIELD_FOR) for ranks that outnumber the
    /// cores they may use, none otherwise (a PML that does not yield).
    fn yield_budget(&self) -> Duration {
        Duration::ZERO
    }

    /// The host of rank `peer` (this PML's numbering: the world's ranks, then those met
    /// later), as the ranks traded their hosts at wire-up (or at a bridge's): `None` where
    /// this PML does not know it. Every rank's PML knows the same host for a rank, so ranks
    /// that group their peers by it agree without a message.
    fn host_of(&self, _peer: Rank) -> Option<&str> {
        None
    }

    /// Starts a send of `len` bytes at `buf` to world rank `peer` in the communicator
    /// `context`, where this rank is `source`. A send that finished at once returns
    /// [`Handle::SENT`]. Synchronous sends complete once the receiver matched the message.
    ///
    /// # Safety
    /// `buf` must be valid for reads of `len` bytes and must not be written or freed until
    /// the request completes (`test`, `collect` or `wait` reported it).
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_send(
        &mut self,
        context: ContextId,
        source: Rank,
        peer: Rank,
        tag: Tag,
        mode: SendMode,
        buf: *const u8,
        len: usize,
    ) -> Result<Handle, PmlError>;

    /// `post_send` for a send its caller waits for at once (a blocking send): a PML may
    /// then favour local completion (UCX's fast completion, as Open MPI's pml ucx asks for
    /// `MPI_Send`). Its outcome is the same as `post_send`'s, which it is unless a PML has
    /// a better way.
    ///
    /// # Safety
    /// As for `post_send`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    unsafe fn post_awaited_send(
        &mut self,
        context: ContextId,
        source: Rank,
        peer: Rank,
        tag: Tag,
        mode: SendMode,
        buf: *const u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        // SAFETY: forwarded from this function's contract, which is `post_send`'s.
        unsafe { self.post_send(context, source, peer, tag, mode, buf, len) }
    }

    /// Starts a send of the non-contiguous buffer `blocks` describes without packing it,
    /// where this PML moves such a buffer in place to `peer` (for instance a rendezvous that
    /// the receiver reads block by block, or UCX's iov or generic datatype); `None`, having
    /// sent nothing, where it does not: the caller then packs the bytes and calls `post_send`.
    ///
    /// # Safety
    /// `blocks`, and the memory and block list it describes, must stay valid and unchanged
    /// until the request completes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_send_blocks(
        &mut self,
        _context: ContextId,
        _source: Rank,
        _peer: Rank,
        _tag: Tag,
        _mode: SendMode,
        _blocks: &Blocks,
    ) -> Result<Option<Handle>, PmlError> {
        Ok(None)
    }

    /// Starts a receive into `len` bytes at `buf`.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes and must not be accessed otherwise until
    /// the request completes.
    unsafe fn post_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Handle, PmlError>;

    /// Starts a receive into the non-contiguous buffer `blocks` describes (a description
    /// made in this process), each arriving byte unpacked straight into its blocks (an eager
    /// frame's payload, rendezvous data a transport scatters from its socket); `None`,
    /// having posted nothing, where the PML does not: the caller then receives into a
    /// contiguous staging buffer and unpacks it. Bytes between the blocks are never written.
    /// `from` is the rank of this PML (the world's, or one a bridge joined) that `source`
    /// names, `None` for any source: for a PML whose way with the blocks depends on the peer.
    ///
    /// # Safety
    /// `blocks` and the block list it names must stay valid and unchanged, and its
    /// elements' blocks valid for writes and not otherwise accessed, until the request
    /// completes.
    unsafe fn post_recv_blocks(
        &mut self,
        _context: ContextId,
        _source: SourceSel,
        _tag: TagSel,
        _blocks: &Blocks,
        _from: Option<Rank>,
    ) -> Result<Option<Handle>, PmlError> {
        Ok(None)
    }

    /// Starts a receive that finishes at once when its message is already here
    /// ([`Started::Done`]: no request to wait for or collect), else is posted
    /// ([`Started::Posted`]). Never [`Started::Claimed`].
    ///
    /// # Safety
    /// As for `post_recv`.
    unsafe fn start_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Started<RecvBuf>, PmlError>;

    /// Receives into `len` bytes at `buf`, blocking, with no request left behind.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes and not otherwise accessed during the
    /// call.
    unsafe fn recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Status, PmlError>;

    /// Receives the message a matched probe (`improbe`, `mprobe`) took.
    ///
    /// # Safety
    /// As for `post_recv`.
    unsafe fn post_matched_recv(
        &mut self,
        message: Self::Message,
        buf: *mut u8,
        len: usize,
    ) -> Result<Handle, PmlError>;

    /// [`post_matched_recv`](Self::post_matched_recv) into the non-contiguous buffer
    /// `blocks` describes, each arriving byte unpacked straight into its blocks as
    /// [`post_recv_blocks`](Self::post_recv_blocks) does; the message back, having posted
    /// nothing, where the PML does not (the caller then receives it into a staging buffer).
    /// `from` is the rank of this PML that sent the message (`None` where the caller cannot
    /// tell, as `post_recv_blocks`' is for any source).
    ///
    /// # Safety
    /// As for `post_recv_blocks`.
    unsafe fn post_matched_recv_blocks(
        &mut self,
        message: Self::Message,
        _blocks: &Blocks,
        _from: Option<Rank>,
    ) -> Result<Result<Handle, Self::Message>, PmlError> {
        Ok(Err(message))
    }

    /// Collects the request if it finished, after one round of progress if it had not.
    fn test(&mut self, h: Handle) -> Result<Option<Done>, PmlError>;

    /// Takes the request's outcome if it finished; makes no progress.
    fn collect(&mut self, h: Handle) -> Result<Option<Done>, PmlError>;

    /// Whether the request finished, without collecting it.
    fn is_complete(&mut self, h: Handle) -> Result<bool, PmlError>;

    /// Waits for the request and collects it.
    fn wait(&mut self, h: Handle) -> Result<Done, PmlError>;

    /// Waits until any of `handles` finished; returns its index (not yet collected).
    fn wait_any(&mut self, handles: &[Handle]) -> Result<usize, PmlError>;

    /// Looks for a matching message without taking it.
    fn iprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<Status>, PmlError>;

    /// Waits for a matching message without taking it.
    fn probe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Status, PmlError>;

    /// Takes a matching message, if there is one, for `post_matched_recv`.
    fn improbe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<(Self::Message, Status)>, PmlError>;

    /// Waits for a matching message and takes it, for `post_matched_recv`.
    fn mprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<(Self::Message, Status), PmlError>;

    /// Cancels a receive that has not matched yet; returns whether it was cancelled (the
    /// request then completes with [`PmlError::Cancelled`]). Sends are not cancelled.
    fn cancel(&mut self, h: Handle) -> Result<bool, PmlError>;

    /// One round of progress; returns whether anything moved.
    fn progress(&mut self) -> Result<bool, PmlError>;

    /// Waits until everything this rank sent has left (FINs and credits included): peers
    /// may be waiting on them.
    fn flush_all(&mut self) -> Result<(), PmlError>;
}

/// How a PML learns about its peers: rank, size, and a key-value exchange with a fence
/// (rsrun's service, PMI-2 under Slurm, or a local map for a singleton).
pub trait Wireup {
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    /// Unique per job, so that shared-memory names of two jobs never collide; the same on
    /// every rank of the job, and known from the first fence on.
    fn job_id(&self) -> String;
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    fn fence(&mut self) -> Result<(), String>;
    /// The value rank `from` put under `key`: a key-value space kept by rank (PMIx) looks
    /// there alone, where a search of every rank's data may not be answered.
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, String>;
    /// The job's secret, at least 128 random bits that only the job's ranks know: a TCP
    /// connection is a peer's only once it proved to know it. The launcher's key-value
    /// space may hold it, so call this after the first fence.
    fn job_secret(&mut self) -> Result<[u8; 32], String>;
}

/// A receive buffer lent to a PML until the receive completes.
pub struct RecvBuf {
    ptr: *mut u8,
    len: usize,
    /// The description of a non-contiguous buffer (`post_recv_blocks`), null for a
    /// contiguous one: then `ptr` is not the bytes, which land in the blocks.
    blocks: *const Blocks,
}

impl RecvBuf {
    /// The `len` bytes at `ptr` that a PML's `post_recv`, `start_recv` or `recv` was lent,
    /// under that call's contract (valid for writes and not otherwise accessed until the
    /// receive completes).
    #[inline]
    pub(crate) fn new(ptr: *mut u8, len: usize) -> RecvBuf {
        RecvBuf {
            ptr,
            len,
            blocks: std::ptr::null(),
        }
    }

    /// The non-contiguous buffer `blocks` describes, lent to `post_recv_blocks` under its
    /// contract.
    pub(crate) fn of_blocks(blocks: &Blocks) -> RecvBuf {
        RecvBuf {
            ptr: std::ptr::null_mut(),
            len: blocks.len(),
            blocks,
        }
    }
}

impl crate::stall::Capacity for RecvBuf {
    fn capacity(&self) -> usize {
        self.len
    }
}

impl AsMut<[u8]> for RecvBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        if !self.blocks.is_null() {
            // In blocks (`post_recv_blocks`): no contiguous bytes, and `ptr` is null.
            return &mut [];
        }
        // SAFETY: `post_recv`'s caller guarantees `ptr` is valid for writes of `len` bytes and
        // not otherwise accessed until the request completes; this `RecvBuf` is dropped then.
        // Raw receives may share bytes with each other, but a PML is one thread and this
        // slice lives for one copy into it, so no two of them are ever alive at once.
        unsafe { slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// SAFETY: a description is only ever that of `post_recv_blocks`, whose caller keeps it, its
// block list and its writable blocks lent until the request completes, when the engine drops
// this `RecvBuf`.
unsafe impl crate::protocol::RecvBytes for RecvBuf {
    #[inline]
    fn blocks(&self) -> Option<&Blocks> {
        // SAFETY: as above: null, or `post_recv_blocks`' description, alive.
        unsafe { self.blocks.as_ref() }
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
#[non_exhaustive]
pub struct Counters {
    pub frames_sent: u64,
    /// What rounds of progress took from the transports: frames, and the remote reads and
    /// (over libfabric and verbs) the windows' one-sided operations that finished.
    pub frames_received: u64,
    /// Probes (`iprobe`, `improbe`) that found nothing queued and made a round of progress
    /// (a poll of every transport: a system call over TCP) to look again.
    pub probe_rounds: u64,
    /// Matched receives (`post_matched_recv`) whose message was not here whole, which made a
    /// round of progress to start its rendezvous.
    pub matched_receive_rounds: u64,
    pub remote_reads: u64,
    pub remote_read_bytes: u64,
    /// One-sided operations of windows done by the device (verbs): RDMA WRITEs (puts),
    /// RDMA READs (gets) and atomics (fetch-and-add, compare-and-swap), as posted. A write
    /// or read counts once for each part posted (`RmaPosted`): one for an operation that the
    /// send queue had room for, one more each time a longer one is posted further as room
    /// opens; its work requests of the port's `max_msg_sz` within a part are not counted.
    pub rma_writes: u64,
    pub rma_reads: u64,
    pub rma_atomics: u64,
    /// Successful shared-memory reads whose bytes all came by memcpy from a same-host peer's
    /// mapped shared arena (the other shm reads went by process_vm_readv).
    pub mapped_reads: u64,
    /// Successful rendezvous reads of non-contiguous sends, block by block in the sender's
    /// memory (shared memory; one that came by memcpy from the mapped arena counts in
    /// `mapped_reads` too).
    pub in_place_reads: u64,
    /// Successful shared-memory rendezvous reads that landed straight in a receive laid out
    /// in blocks (a non-contiguous datatype's), with no staging copy (they count in
    /// `mapped_reads` and `in_place_reads` too where those apply).
    pub block_reads: u64,
    /// Of `block_reads`, those into a receive whose blocks average under
    /// `MPIRT_SHM_IN_PLACE_MIN_BLOCK` bytes: filled by the layouts' copy loops (from the
    /// sender's mapped arena in one pass, else a window at a time through a cache-sized
    /// scratch), not by a copy or an iovec a block.
    pub short_block_reads: u64,
    /// Non-contiguous sends the UCX PML handed to UCX in place, with no staging copy, as an
    /// iov of their runs (blocks of `MPIRT_UCX_IOV_MIN_BLOCK` bytes or more on average,
    /// `ucp_dt_make_iov`).
    pub ucx_iov_sends: u64,
    /// Non-contiguous receives the UCX PML handed to UCX in place as an iov of their runs
    /// (as `ucx_iov_sends`).
    pub ucx_iov_receives: u64,
    /// Non-contiguous sends the UCX PML handed to UCX in place as its generic datatype,
    /// packed into UCX's buffers by mpirt's callbacks (blocks shorter than
    /// `MPIRT_UCX_IOV_MIN_BLOCK` on average).
    pub ucx_generic_sends: u64,
    /// Non-contiguous receives the UCX PML handed to UCX in place as its generic datatype,
    /// unpacked from UCX's buffers by mpirt's callbacks (as `ucx_generic_sends`).
    pub ucx_generic_receives: u64,
    /// Non-contiguous sends of short blocks the UCX PML left to the caller's staging copy
    /// (packed, then sent as bytes): under `MPIRT_UCX_TCP_STAGE_BELOW` bytes to a rank whose
    /// active messages UCX carries over TCP. Counted when the PML declines them.
    pub ucx_staged_sends: u64,
    /// Non-contiguous receives the UCX PML left to the caller's staging buffer (received as
    /// bytes, then unpacked), as `ucx_staged_sends`, where every other rank is over TCP: by
    /// the receive's length, or for a matched receive by its message's.
    pub ucx_staged_receives: u64,
    /// Rendezvous reads over verbs that landed straight in a receive laid out in blocks, by
    /// RDMA READs whose local scatter-gather lists are the blocks' runs (blocks of
    /// `MPIRT_VERBS_SGE_MIN_BLOCK` bytes or more on average), as posted.
    pub verbs_sge_reads: u64,
    /// Their READ work requests: a read takes one per `max_sge` runs (and per `max_msg_sz`
    /// bytes) of the receive's blocks, and, of a send read in place, one a run of its blocks
    /// at least (`verbs_layout_reads`).
    pub verbs_sge_read_requests: u64,
    /// Rendezvous reads over verbs into a receive laid out in blocks that went into a
    /// staging buffer, unpacked when they finished (blocks shorter than
    /// `MPIRT_VERBS_SGE_MIN_BLOCK` on average, or a span of blocks over 16 MiB and 16 times
    /// the bytes read, or one that could not be registered).
    pub verbs_staged_reads: u64,
    /// Non-contiguous sends over verbs offered to be read in place, their layout in the
    /// offer (blocks of `MPIRT_VERBS_SEND_MIN_BLOCK` bytes or more on average, a span that
    /// `verbs_staged_reads`' rule lets register, a layout a frame holds).
    pub verbs_layout_sends: u64,
    /// Non-contiguous rendezvous sends over verbs left to the caller to pack into one
    /// registered copy (the blocks too short, the span too wide, the layout longer than a
    /// frame, or a span that could not be registered).
    pub verbs_packed_sends: u64,
    /// Rendezvous reads over verbs of a non-contiguous send in place (whose offer carried
    /// its layout), into contiguous bytes or a receive's blocks, as posted.
    pub verbs_layout_reads: u64,
    /// Their READ work requests: one or more a run of the send's blocks (more where a run
    /// passes `max_msg_sz`, or its bytes land in more than `max_sge` runs here).
    pub verbs_layout_read_requests: u64,
    /// Memory registrations made (RDMA): a buffer sent from again is not registered again.
    pub registrations: u64,
    /// Send buffers exposed to peers' reads over libfabric and not yet released, now (a
    /// level, not a running count): a rendezvous send's lasts until the peer's FIN says it
    /// read the buffer all, or its post failed, or the engine stopped. It counts from the
    /// RTS, while the peer has not matched the send yet too.
    pub ofi_exposed: u64,
    /// Credit frames sent over libfabric: a receiver's count of the frames it consumed,
    /// sent alone where no frame to the peer carried it first (a one-way stream: one per
    /// half of the peer's credits; a ping-pong: none).
    pub ofi_credit_frames: u64,
    /// Sleeps of this rank on its libfabric completion queue's wait fd.
    pub ofi_fd_sleeps: u64,
    /// Sleeps of this rank on its shared-memory futex (a wait that outlasted its spin).
    pub shm_sleeps: u64,
    /// Of those, the sleeps a peer ended by waking this rank.
    pub shm_sleeps_woken: u64,
    /// Of those, the sleeps that ran to their timeout while a frame for this rank, or the
    /// room its refused frame waited for, was already there: an upper bound on the wake-ups
    /// the protocol lost (a sender preempted between writing its frame and waking this rank
    /// for longer than the sleep counts too).
    pub shm_missed_wakes: u64,
    /// Waits of this rank on the wake fds of several transports at once (shared memory
    /// beside TCP or OFI) that slept, rather than returning at once or yielding: beside OFI
    /// without a wait fd (udp;ofi_rxd), each of its naps is one.
    pub wake_set_sleeps: u64,
    /// Wakes sent as messages to peers asleep in their PML, for a flag published outside it
    /// (mpirt's collective area): the native engine's WAKE frames, to a rank that no
    /// transport with a wake of its own (shared memory) reaches, and the UCX PML's active
    /// messages.
    pub wake_messages: u64,
    /// WAKE frames this rank received (the native engine's; each ended a sleep in its PML, or
    /// came while it was not asleep).
    pub wake_messages_received: u64,
    /// Sleeps apart from the engine (`pml::nap`) by a thread of a rank whose threads share
    /// it (mpirt at `Serialized` and `Multiple`).
    pub naps: u64,
    /// Wake-ups of such a sleep by the rank's own threads (`Engine::wake_nap`), each after a
    /// call that may have moved what the sleeper waits for; its peers' wake-ups are not
    /// counted here.
    pub nap_wakes: u64,
}
