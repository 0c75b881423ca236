//! RDMA verbs transport (feature `verbs`): one reliable-connected queue pair per peer, eager
//! frames by SEND into receive buffers on a shared receive queue, rendezvous by RDMA READ.
//!
//! Flow control: a rank may have `initial_credits` SENDs outstanding to a peer beyond what the
//! peer has consumed. Each receiver counts the frames it consumed from each peer and, every
//! few frames, RDMA-WRITEs that count into the sender's credit slot for it. Credit updates so
//! take no receive buffer, which keeps them from ever waiting on credits themselves.
//!
//! Rendezvous: the sender registers its buffer (through the registration cache) and the RTS
//! carries address and rkey; the receiver registers the receive buffer and posts RDMA READs
//! (split at the port's largest message) and reports the read done when the last completes.
//! A receive laid out in blocks (a non-contiguous datatype's) is read straight into them:
//! each READ's local scatter-gather list is the blocks' runs, up to the device's `max_sge`
//! entries a work request (more runs take more work requests), the span of the blocks
//! registered once. Blocks shorter than `sge_min_block` on average are read into a staging
//! buffer and unpacked instead (the caller's, as for any transport that reads only into
//! contiguous bytes), since an entry per few bytes costs the device more than the copy, as
//! are blocks spanning over 16 MiB and 16 times the bytes read (registering the span would
//! pin all of it: `scatter.rs`). A non-contiguous send is read in place likewise: the span of
//! its blocks registered once (`expose_layout`), its offer carrying its layout
//! (`protocol::layout`), and the receiver reads each run of it with READs of its own (a READ
//! reads one remote address), each scattering into the receive's blocks or landing in
//! contiguous bytes (`scatter::plan` cuts both sides' runs into work requests). Sends of
//! blocks shorter than `send_min_block` on average (a READ each would cost more than packing
//! them), of a layout longer than a frame holds, or of a span too wide to register, are
//! packed by the layer above into one buffer, registered as any other.
//! A completion with an error status becomes a named error on the request (reads) or on the
//! transport (sends), with the device's vendor error; the queue pairs give up on a dead peer
//! about 8 s after sending to it. The first failed completion of a queue pair is the one
//! named: the work requests after it are flushed. A flush with no failure of this rank's
//! before it means the queue pair went to error as the responder, on a request of the peer's
//! that this rank's device refused (a READ outside this rank's registrations), which fails on
//! the peer's side unless the peer had it done already (a retransmission): the error says so
//! (`flushed_first`) rather than naming only the flush. Registrations a peer may read stay
//! registered for the retransmissions' time after they are dropped (`registry.rs`).
//! A rank that only waits sends nothing, so a wait idle for [`PROBE_AFTER`] probes its peers
//! (see [`VerbsTransport::probe_idle_peers`]). Once a peer's queue pair fails, the peer is
//! broken: later sends and reads to it fail at once with the first cause.
//!
//! One completion queue takes every queue pair's completions. It is sized for all their send
//! queues and the receives where the device's `max_cqe` allows, else as large as it allows;
//! either way every send-queue work request posted counts against what it holds beside the
//! receives (`completion_queue`, `has_room`), so a full queue never overruns and loses
//! completions: frames and one-sided operations stop short of that cap, keeping room for the
//! control writes (credits, probes), as they do of each queue pair's `SEND_DEPTH`.
//!
//! Windows (one-sided operations, `one_sided.rs`): RDMA WRITE, READ and atomics on memory
//! each rank exposed, on a second queue pair per peer, and a loopback queue pair for a
//! rank's own window (so that its atomics go through the device as everyone else's do).
//! One-sided operations have queue pairs of their own because a reliable connection that
//! completes one work request with an error (a key the target no longer has, a range past
//! its registration) fails every later one: the operation fails, and so do later one-sided
//! operations to that peer, but the peer's messages keep flowing.

mod contract;
mod device;
mod in_place;
mod one_sided;
mod qp;
mod registry;
mod scatter;

use std::collections::VecDeque;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use std::{io, ptr};

use rdma_sys::*;
use slab::Slab;

pub use device::device_names;
pub use in_place::LayoutTarget;
pub use registry::MrId;

use super::Sink;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::pml_api::Counters;
use crate::wire::RemoteKey;
use device::{Device, MAX_SGE};
use qp::{QpAddress, QueuePair, SEND_DEPTH};
use registry::Registry;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    /// Device names, comma-separated; local rank `i` takes the `i % n`-th. Empty: the first.
    pub devices: String,
    pub gid_index: Option<u8>,
    /// Largest frame (header and payload) sent by SEND.
    pub frame_size: usize,
    pub reg_cache: bool,
    /// Longest piece one RDMA WRITE or READ work request carries, where lower than the
    /// port's `max_msg_sz` (`MPIRT_VERBS_MAX_MSG`).
    pub max_msg: Option<usize>,
    /// Scatter-gather entries one RDMA READ takes, where lower than the device's
    /// (`MPIRT_VERBS_MAX_SGE`).
    pub max_sge: Option<usize>,
    /// The shortest mean block of a receive that reads scatter into (see the module's
    /// documentation; `MPIRT_VERBS_SGE_MIN_BLOCK`).
    pub sge_min_block: usize,
    /// Most entries of the completion queue, where lower than the device's `max_cqe`
    /// (`MPIRT_VERBS_CQ_ENTRIES`).
    pub cq_entries: Option<usize>,
    /// The shortest mean block of a non-contiguous send that peers read in place
    /// (`MPIRT_VERBS_SEND_MIN_BLOCK`).
    pub send_min_block: usize,
}

/// Receive buffers on the shared receive queue, and send buffers to copy frames into.
const RECV_BUFFERS: usize = 512;
const SEND_BUFFERS: usize = 128;
const COMPLETIONS_PER_POLL: usize = 32;
/// Idle registrations kept for reuse.
const CACHED_REGISTRATIONS: usize = 256;
/// Frames no longer than this go inline in the work request (no DMA read of the buffer).
const INLINE: usize = 64;
/// How long a wait goes without progress before it probes its peers, and how often it probes
/// again while it stays idle. A probe costs each peer one 8-byte RDMA WRITE and its ACK, so a
/// healthy job that waits a long time pays microseconds a second; a dead peer is named about
/// this long plus the queue pair's retries (about 8 s, see `qp.rs`) after the wait began.
/// Waits that make progress never look at the clock for it (the engine passes how long it
/// was idle).
pub const PROBE_AFTER: Duration = Duration::from_secs(1);
/// How long a rank that leaves waits for its peers to take its goodbye: live peers answer at
/// once, a dead one never does, and this bounds what that costs a finalizing rank.
const GOODBYE_DRAIN: Duration = Duration::from_secs(2);

/// What a work request was, in the top byte of its id; the rest is an index.
const WR_RECV: u64 = 1 << 56;
const WR_SEND: u64 = 2 << 56;
const WR_READ: u64 = 3 << 56;
const WR_CREDIT: u64 = 4 << 56;
const WR_PROBE: u64 = 5 << 56;
const WR_GOODBYE: u64 = 6 << 56;
const WR_RMA: u64 = 7 << 56;
const WR_INDEX: u64 = (1 << 56) - 1;

/// Registered memory owned by the transport: receive and send buffers, credit slots.
struct Region {
    buf: Vec<u8>,
    mr: *mut ibv_mr,
}

impl Region {
    fn new(dev: &Device, len: usize) -> Result<Region, String> {
        let mut buf = vec![0u8; len];
        // SAFETY: `buf` is a live allocation of `len` bytes that outlives the registration
        // (deregistered in `Drop`, before `buf` is freed).
        let mr = unsafe {
            ibv_reg_mr(
                dev.pd,
                buf.as_mut_ptr().cast(),
                len,
                (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
                    | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0) as i32,
            )
        };
        if mr.is_null() {
            return Err(format!(
                "registering {len} bytes of buffers: {}",
                io::Error::last_os_error()
            ));
        }
        Ok(Region { buf, mr })
    }

    fn lkey(&self) -> u32 {
        // SAFETY: `mr` is live while the region is.
        unsafe { (*self.mr).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: registered once in `new`; the transport destroys its queue pairs first.
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// A peer reached over verbs.
struct Peer {
    qp: QueuePair,
    /// Frames sent to the peer, and what it consumed (its writes to our credit slot).
    sent: u64,
    /// Frames consumed from the peer, and how many of those it has been told about.
    consumed: u64,
    reported: u64,
    /// Where in the peer our credit slot and our goodbye slot are (0 until connected).
    credit_addr: u64,
    goodbye_addr: u64,
    credit_rkey: u32,
    /// Work requests on the send queue not yet completed.
    in_flight: u32,
    /// Whether a liveness probe is on the send queue.
    probing: bool,
    /// Why the queue pair failed, once it has: it then completes nothing more.
    broken: Option<String>,
    /// One-sided operations (work requests) posted to the peer, and completed: completions
    /// come in order, so a ticket (the count when it was posted) is done once reached.
    rma_posted: u64,
    rma_completed: u64,
    /// The ticket of the first one-sided work request that failed (0: none): it and every
    /// later one failed (`broken` says why), the earlier ones succeeded.
    rma_failed_at: u64,
}

impl Peer {
    fn new(qp: QueuePair) -> Peer {
        Peer {
            qp,
            sent: 0,
            consumed: 0,
            reported: 0,
            credit_addr: 0,
            goodbye_addr: 0,
            credit_rkey: 0,
            in_flight: 0,
            probing: false,
            broken: None,
            rma_posted: 0,
            rma_completed: 0,
            rma_failed_at: 0,
        }
    }
}

/// Where a send-queue work request reaches in the peer.
#[derive(Clone, Copy)]
enum Remote {
    /// Nowhere: a SEND.
    None,
    /// RDMA WRITE or READ at an address, under a key.
    Rdma { addr: u64, rkey: u32 },
    /// An atomic on 8 bytes: fetch-and-add of `compare_add`, or compare-and-swap.
    Atomic {
        addr: u64,
        rkey: u32,
        compare_add: u64,
        swap: u64,
    },
}

/// An RDMA READ of one receive, possibly in several pieces (work requests).
struct Read {
    token: u64,
    peer: Rank,
    pieces_left: usize,
    mr: MrId,
    error: Option<String>,
    /// The bytes it reads, and where in the peer (its first byte, and the key it reads
    /// under), for the error of a failed completion.
    len: usize,
    remote: RemoteKey,
    /// The local scatter-gather entries of a planned read (`scatter::plan`), each piece's a
    /// range of them; empty for a read of contiguous bytes into contiguous bytes.
    sges: Vec<ibv_sge>,
    /// Its work requests, and whether it reads a send's runs in place (the offer's layout)
    /// and lands in a receive's blocks.
    requests: usize,
    of_layout: bool,
    into_blocks: bool,
}

impl Read {
    /// What failed, for the error of a failed completion.
    fn describe(&self) -> String {
        let of = match self.of_layout {
            true => " of a non-contiguous send in place (a READ a run)",
            false => "",
        };
        let into = match self.into_blocks {
            true => format!(
                " into a receive's blocks ({} scatter-gather entries)",
                self.sges.len()
            ),
            false => String::new(),
        };
        format!(
            "an RDMA READ of {} bytes from rank {} (at {:#x} under key {:#x}){of} in {} work \
             requests{into}",
            self.len, self.peer, self.remote.addr, self.remote.key, self.requests
        )
    }
}

/// One READ work request: `len` bytes at `remote` in `peer`.
struct Piece {
    peer: Rank,
    read: usize,
    local: Local,
    remote: u64,
    rkey: u32,
    len: u32,
}

/// Where a piece lands.
#[derive(Clone, Copy)]
enum Local {
    /// Contiguous bytes at `addr`, registered under `lkey`.
    Bytes { addr: u64, lkey: u32 },
    /// The entries `first..first + count` of its read's `sges`.
    Scattered { first: usize, count: usize },
}

/// A finished read: the token `read` was given, and the error if it failed.
type ReadDone = (u64, Result<(), String>);

pub struct VerbsTransport {
    rank: Rank,
    local_psn: u32,
    initial_credits: u64,
    credit_batch: u64,
    frame_size: usize,
    /// By rank, the queue pairs for messages; `None` for peers reached another way.
    peers: Vec<Option<Peer>>,
    /// Queue pair number -> rank, for completions (a work request's kind says which of the
    /// rank's queue pairs it was on).
    by_qpn: Vec<(u32, Rank)>,
    reads: Slab<Read>,
    waiting_pieces: VecDeque<Piece>,
    free_send: Vec<usize>,
    srq: *mut ibv_srq,
    cq: *mut ibv_cq,
    channel: *mut ibv_comp_channel,
    recv_region: Region,
    send_region: Region,
    /// Slot `r` holds how many of our frames rank `r` has consumed, and slot `size + r` is set
    /// once rank `r` has finalized (both written by `r`).
    credit_slots: Region,
    /// One-sided operations: windows exposed, what is in flight, and the loopback queue
    /// pair (see `one_sided.rs`); boxed, as the engine holds every transport in one enum.
    /// Before `dev`: fields drop in order, and its registrations need the device open.
    rma: Box<one_sided::Rma>,
    /// Boxed, as `rma` is (the registration cache and its lingering registrations).
    registry: Box<Registry>,
    dev: Device,
    pub reads_posted: u64,
    /// The shortest mean block of a receive that reads scatter into.
    sge_min_block: usize,
    /// The shortest mean block of a non-contiguous send that peers read in place.
    send_min_block: usize,
    /// Reads into a receive's blocks by scatter-gather lists, their work requests, and reads
    /// into a receive's blocks left to a staging buffer; sends offered in place with their
    /// layout and those left to be packed; reads of sends in place and their work requests
    /// (see `Counters`).
    sge_reads: u64,
    sge_read_requests: u64,
    staged_reads: u64,
    layout_sends: u64,
    packed_sends: u64,
    layout_reads: u64,
    layout_read_requests: u64,
    /// When idle waits last probed the peers.
    last_probe: Option<Instant>,
    /// Since when polls found nothing, once a wait went to sleep (see `probe_idle_peers`).
    idle_since: Option<Instant>,
    /// Reads finished in a poll, handed to the sink at its end (kept to reuse its memory).
    finished_reads: Vec<ReadDone>,
    /// Completions taken by the look that follows arming (see `before_wait`), the first
    /// `stashed` of them, for the next poll.
    stash: Box<[ibv_wc; COMPLETIONS_PER_POLL]>,
    stashed: usize,
    /// Eager limit the engine was configured with (see `contract.rs`).
    eager_limit: usize,
    /// Whether the registration cache was asked for (`--verbose` says why it is off).
    reg_cache_wanted: bool,
    /// Send-queue work requests of every queue pair in flight, and the most there may be
    /// (what the completion queue holds beside the receives: see `completion_queue`).
    sends_in_flight: usize,
    send_cap: usize,
}

/// A failed completion's status, with the device's own code for it (`vendor_err`, which
/// says more than the status on some devices).
fn status_text(wc: &ibv_wc) -> String {
    // SAFETY: ibv_wc_status_str returns a static string for any value.
    let name = unsafe { CStr::from_ptr(ibv_wc_status_str(wc.status)) };
    format!(
        "{} (status {}, vendor error {:#x})",
        name.to_string_lossy(),
        wc.status,
        wc.vendor_err
    )
}

/// The cause for `peer`'s queue pair where the first of its failed completions here was a
/// flush (`cause` names the work request flushed): the queue pair went to error with none of
/// this rank's work requests failing first, so from the responder's side, on a request of the
/// peer's that this rank's device refused (an RDMA READ or WRITE outside this rank's
/// registrations, or a malformed request). The peer's request fails with a status of its own
/// (remote access, or invalid request), named there, unless it was a retransmission of one
/// the peer had completed (see `registration_cache.rs`), which the peer never hears of.
fn flushed_first(peer: Rank, cause: &str) -> String {
    format!(
        "{cause}; none of this rank's work requests to rank {peer} failed before it, so its \
         queue pair went to error on a request from rank {peer} that this rank's device \
         refused (an RDMA READ or WRITE outside this rank's registrations, or a malformed \
         request), whose failure rank {peer} names unless it had that request done already \
         (a retransmission)"
    )
}

fn transport(peer: Rank, cause: impl Into<String>) -> PmlError {
    PmlError::transport(peer, cause.into())
}

/// Send-queue work requests kept free, across all queue pairs, for the messages' control
/// writes (credits, probes) and read pieces: frames and one-sided operations stop short of
/// them, as they do of each queue pair's `SEND_DEPTH`.
const CONTROL_SENDS: usize = 8;

/// The fewest send-queue work requests in flight a completion queue must leave room for: a
/// frame beside the control writes.
const FEWEST_SENDS: usize = 2 * CONTROL_SENDS;

/// The completion queue's size, and the send-queue work requests (of every queue pair
/// together) that may be in flight at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CqSize {
    entries: i32,
    sends: usize,
}

/// The completion queue for `peers` peers: as many entries as their two queue pairs' send
/// queues (messages and one-sided operations), the loopback queue pair's and the shared
/// receive queue hold, or fewer where the device's `max_cqe` (or `asked`,
/// `MPIRT_VERBS_CQ_ENTRIES`) is lower; then the sends in flight across the queue pairs are
/// capped to what it holds beside the receives, since a full completion queue loses
/// completions (an overrun). Refused, naming the limits, where that leaves fewer than
/// `FEWEST_SENDS`.
fn completion_queue(peers: usize, max_cqe: usize, asked: Option<usize>) -> Result<CqSize, String> {
    let needed = RECV_BUFFERS + (2 * peers + 1) * SEND_DEPTH as usize;
    let most = asked.map_or(max_cqe, |asked| asked.min(max_cqe));
    let entries = needed.min(most).min(i32::MAX as usize);
    let sends = entries.saturating_sub(RECV_BUFFERS);
    if sends < FEWEST_SENDS {
        let limit = match asked {
            Some(asked) if asked < max_cqe => {
                format!("MPIRT_VERBS_CQ_ENTRIES={asked} (the device's max_cqe is {max_cqe})")
            }
            _ => format!("the device's max_cqe of {max_cqe}"),
        };
        return Err(format!(
            "a completion queue of at most {entries} entries ({limit}) leaves {sends} for \
             sends beside its {RECV_BUFFERS} receives, fewer than the {FEWEST_SENDS} needed"
        ));
    }
    Ok(CqSize {
        entries: entries as i32,
        sends,
    })
}

/// Digits of one queue pair number in an endpoint: QPNs are 24 bits, six hex digits.
const QPN_DIGITS: usize = 6;

/// The queue pair numbers of `lanes` in rank order (0 where there is none), each in
/// `QPN_DIGITS` hex digits without separators: 768 bytes for 128 ranks, where decimal with
/// commas took up to 9 a rank.
fn qpn_list(lanes: &[Option<Peer>]) -> String {
    lanes
        .iter()
        .map(|p| format!("{:06x}", p.as_ref().map_or(0, |p| p.qp.qpn())))
        .collect()
}

/// The queue pair number for `rank` in a `qpn_list`; `None` where there is none or the list
/// is malformed.
fn qpn_in(list: &str, rank: Rank) -> Option<u32> {
    let at = rank as usize * QPN_DIGITS;
    list.get(at..at + QPN_DIGITS)
        .and_then(|q| u32::from_str_radix(q, 16).ok())
        .filter(|&q| q != 0)
}

/// The error for work that `peer`'s broken queue pair would never complete.
fn refused(peer: Rank, work: &str, cause: &str) -> PmlError {
    transport(
        peer,
        format!("a {work} to rank {peer} was refused: the connection broke earlier ({cause})"),
    )
}

impl VerbsTransport {
    /// Opens this rank's device and creates a queue pair for each rank in `peers`.
    pub fn new(
        rank: Rank,
        size: u32,
        local_rank: usize,
        peers: &[Rank],
        config: &VerbsConfig,
    ) -> Result<VerbsTransport, String> {
        let names: Vec<&str> = config
            .devices
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        let wanted = if names.is_empty() {
            ""
        } else {
            names[local_rank % names.len()]
        };
        let mut dev = Device::open(wanted, config.gid_index)?;
        let frame_size = config.frame_size.min(dev.max_msg as usize);
        dev.lower_max_piece(config.max_msg);
        dev.lower_max_read_sge(config.max_sge);
        let cq_size = completion_queue(peers.len(), dev.max_cqe, config.cq_entries)
            .map_err(|e| format!("{}: {e}", dev.name))?;
        let depth = cq_size.entries;
        // SAFETY: the context is open; each object is destroyed in `Drop`, in reverse order.
        let (channel, cq, srq) = unsafe {
            let channel = ibv_create_comp_channel(dev.ctx);
            if channel.is_null() {
                return Err(format!(
                    "creating a completion channel: {}",
                    io::Error::last_os_error()
                ));
            }
            let cq = ibv_create_cq(dev.ctx, depth, ptr::null_mut(), channel, 0);
            if cq.is_null() {
                ibv_destroy_comp_channel(channel);
                return Err(format!(
                    "creating a completion queue of {depth}: {}",
                    io::Error::last_os_error()
                ));
            }
            let mut attr = ibv_srq_init_attr {
                srq_context: ptr::null_mut(),
                attr: ibv_srq_attr {
                    max_wr: RECV_BUFFERS as u32,
                    max_sge: 1,
                    srq_limit: 0,
                },
            };
            let srq = ibv_create_srq(dev.pd, &mut attr);
            if srq.is_null() {
                ibv_destroy_cq(cq);
                ibv_destroy_comp_channel(channel);
                return Err(format!(
                    "creating a shared receive queue: {}",
                    io::Error::last_os_error()
                ));
            }
            // Waiting reads the channel's fd after poll() says it is ready; never block.
            let fd = (*channel).fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            (channel, cq, srq)
        };
        let recv_region = Region::new(&dev, RECV_BUFFERS * frame_size)?;
        let send_region = Region::new(&dev, SEND_BUFFERS * frame_size)?;
        let credit_slots = Region::new(&dev, size as usize * 16)?;
        let registry = Box::new(Registry::new(
            dev.pd,
            config.reg_cache,
            CACHED_REGISTRATIONS,
        ));
        let local_psn = (u32::from(rank as u16) << 8 | 0x5a) & 0xff_ffff;
        let loopback = QueuePair::new(&dev, cq, srq)?;
        loopback
            .connect(
                &dev,
                local_psn,
                &QpAddress {
                    qpn: loopback.qpn(),
                    psn: local_psn,
                    lid: dev.lid,
                    gid: dev.gid,
                    mtu: dev.mtu,
                },
            )
            .map_err(|e| format!("connecting the loopback queue pair: {e}"))?;
        let by_qpn = vec![(loopback.qpn(), rank)];
        let rma = Box::new(one_sided::Rma::new(&dev, size, Peer::new(loopback))?);
        let initial_credits = (RECV_BUFFERS / peers.len().max(1)).clamp(4, 64) as u64;
        let mut t = VerbsTransport {
            rank,
            local_psn,
            initial_credits,
            credit_batch: (initial_credits / 4).max(1),
            frame_size,
            peers: (0..size).map(|_| None).collect(),
            by_qpn,
            reads: Slab::new(),
            waiting_pieces: VecDeque::new(),
            free_send: (0..SEND_BUFFERS).rev().collect(),
            srq,
            cq,
            channel,
            recv_region,
            send_region,
            credit_slots,
            registry,
            dev,
            reads_posted: 0,
            sge_min_block: config.sge_min_block,
            send_min_block: config.send_min_block,
            sge_reads: 0,
            sge_read_requests: 0,
            staged_reads: 0,
            layout_sends: 0,
            packed_sends: 0,
            layout_reads: 0,
            layout_read_requests: 0,
            rma,
            last_probe: None,
            idle_since: None,
            finished_reads: Vec::new(),
            // SAFETY: all-zero is a valid ibv_wc.
            stash: Box::new(unsafe { std::mem::zeroed() }),
            stashed: 0,
            eager_limit: config
                .frame_size
                .saturating_sub(crate::wire::MAX_HEADER_LEN),
            reg_cache_wanted: config.reg_cache,
            sends_in_flight: 0,
            send_cap: cq_size.sends,
        };
        for i in 0..RECV_BUFFERS {
            t.post_receive(i).map_err(|e| e.to_string())?;
        }
        for &p in peers {
            let qp = QueuePair::new(&t.dev, cq, srq)?;
            t.by_qpn.push((qp.qpn(), p));
            t.peers[p as usize] = Some(Peer::new(qp));
            let qp = QueuePair::new(&t.dev, cq, srq)?;
            t.by_qpn.push((qp.qpn(), p));
            t.rma.peers[p as usize] = Some(Peer::new(qp));
        }
        Ok(t)
    }

    /// Largest frame SEND carries.
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    pub fn device_name(&self) -> &str {
        &self.dev.name
    }

    /// Scatter-gather entries one READ into a receive's blocks takes.
    pub fn max_read_sge(&self) -> usize {
        self.dev.max_read_sge
    }

    /// The shortest mean block of a receive that reads scatter into.
    pub fn sge_min_block(&self) -> usize {
        self.sge_min_block
    }

    /// The most send-queue work requests of every queue pair in flight at once (what the
    /// completion queue holds beside the receives).
    pub fn send_cap(&self) -> usize {
        self.send_cap
    }

    /// The shortest mean block of a non-contiguous send that peers read in place.
    pub fn send_min_block(&self) -> usize {
        self.send_min_block
    }

    /// Whether registrations are kept between messages (see `registry.rs`).
    pub fn caching(&self) -> bool {
        self.registry.caching()
    }

    /// What peers need to connect to this rank: addressing, the credit slots, and the
    /// queue pair numbers meant for each rank, for messages (`qpn_list`). The one-sided
    /// queue pairs' list is `rma_endpoint`, published under a key of its own: PMI-1 and
    /// PMI-2 hold 1024 bytes a value, which both lists together would pass from about 60
    /// ranks on.
    pub fn endpoint(&self) -> String {
        let gid: String = self.dev.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{} {gid} {} {} {} {} {}",
            self.dev.lid,
            self.dev.mtu,
            self.local_psn,
            self.credit_slots.buf.as_ptr() as u64,
            self.credit_slots.rkey(),
            qpn_list(&self.peers)
        )
    }

    /// The one-sided queue pair numbers meant for each rank (`qpn_list`).
    pub fn rma_endpoint(&self) -> String {
        qpn_list(&self.rma.peers)
    }

    /// Connects the queue pair for `peer` to the one the peer made for this rank.
    pub fn connect(
        &mut self,
        peer: Rank,
        endpoint: &str,
        rma_endpoint: &str,
    ) -> Result<(), String> {
        let bad = || {
            format!(
                "rank {peer}'s verbs endpoint '{endpoint}' (one-sided '{rma_endpoint}') is \
                 malformed"
            )
        };
        let w: Vec<&str> = endpoint.split_ascii_whitespace().collect();
        if w.len() != 7 || w[1].len() != 32 {
            return Err(bad());
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&w[1][2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        let qpn_for_me = |list: &str| qpn_in(list, self.rank).ok_or_else(bad);
        let address = QpAddress {
            qpn: qpn_for_me(w[6])?,
            psn: w[3].parse().map_err(|_| bad())?,
            lid: w[0].parse().map_err(|_| bad())?,
            gid,
            mtu: w[2].parse().map_err(|_| bad())?,
        };
        let rma_address = QpAddress {
            qpn: qpn_for_me(rma_endpoint)?,
            ..address
        };
        let credit_addr: u64 = w[4].parse().map_err(|_| bad())?;
        let credit_rkey: u32 = w[5].parse().map_err(|_| bad())?;
        let size = self.peers.len() as u64;
        let p = self.peers[peer as usize]
            .as_mut()
            .ok_or_else(|| format!("rank {peer} has no queue pair here"))?;
        p.qp.connect(&self.dev, self.local_psn, &address)
            .map_err(|e| format!("connecting to rank {peer}: {e}"))?;
        p.credit_addr = credit_addr + 8 * u64::from(self.rank);
        p.goodbye_addr = credit_addr + 8 * (size + u64::from(self.rank));
        p.credit_rkey = credit_rkey;
        let r = self.rma.peers[peer as usize]
            .as_mut()
            .ok_or_else(|| format!("rank {peer} has no one-sided queue pair here"))?;
        r.qp.connect(&self.dev, self.local_psn, &rma_address)
            .map_err(|e| format!("connecting the one-sided queue pair to rank {peer}: {e}"))?;
        Ok(())
    }

    fn post_receive(&mut self, slot: usize) -> Result<(), PmlError> {
        let mut sge = ibv_sge {
            addr: self.recv_region.buf.as_ptr() as u64 + (slot * self.frame_size) as u64,
            length: self.frame_size as u32,
            lkey: self.recv_region.lkey(),
        };
        let mut wr = ibv_recv_wr {
            wr_id: WR_RECV | slot as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: `wr` and `sge` are valid for the call; the buffer slot is registered and
        // stays ours until its completion comes back.
        let rc = unsafe { ibv_post_srq_recv(self.srq, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(transport(
                self.rank,
                format!(
                    "posting a receive buffer failed: {}",
                    io::Error::from_raw_os_error(rc)
                ),
            ));
        }
        Ok(())
    }

    /// The queue pair that carries work of `kind` (a `WR_` tag) to `peer`: one-sided
    /// operations go on the peer's own queue pair for them (this rank's: the loopback one),
    /// everything else on its messages' one.
    fn lane_mut(&mut self, peer: Rank, kind: u64) -> Option<&mut Peer> {
        let lanes = match kind {
            WR_RMA if peer == self.rank => return self.rma.loopback.as_mut(),
            WR_RMA => &mut self.rma.peers,
            _ => &mut self.peers,
        };
        lanes.get_mut(peer as usize).and_then(Option::as_mut)
    }

    fn lane_ref(&self, peer: Rank, kind: u64) -> Option<&Peer> {
        let lanes = match kind {
            WR_RMA if peer == self.rank => return self.rma.loopback.as_ref(),
            WR_RMA => &self.rma.peers,
            _ => &self.peers,
        };
        lanes.get(peer as usize).and_then(Option::as_ref)
    }

    /// Posts one send-queue work request to `peer`, on the queue pair its kind goes by.
    #[allow(clippy::too_many_arguments)]
    fn post(
        &mut self,
        peer: Rank,
        wr_id: u64,
        opcode: ibv_wr_opcode::Type,
        local: u64,
        len: u32,
        lkey: u32,
        remote: Remote,
    ) -> Result<(), i32> {
        let mut sge = ibv_sge {
            addr: local,
            length: len,
            lkey,
        };
        self.post_list(peer, wr_id, opcode, std::slice::from_mut(&mut sge), remote)
    }

    /// [`post`](Self::post) of a work request whose local memory is the scatter-gather list
    /// `sges` (at most the device's `max_read_sge` entries).
    fn post_list(
        &mut self,
        peer: Rank,
        wr_id: u64,
        opcode: ibv_wr_opcode::Type,
        sges: &mut [ibv_sge],
        remote: Remote,
    ) -> Result<(), i32> {
        let p = self
            .lane_mut(peer, wr_id & !WR_INDEX)
            .expect("a verbs peer");
        let len: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        // SAFETY: all-zero is a valid ibv_send_wr (null pointers, no flags).
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = sges.len() as i32;
        wr.opcode = opcode;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        // Only what the device reads from this rank's memory may go inline.
        let reads_local =
            opcode == ibv_wr_opcode::IBV_WR_SEND || opcode == ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        if len <= INLINE as u64 && reads_local {
            wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        match remote {
            Remote::None => {}
            Remote::Rdma { addr, rkey } => {
                wr.wr.rdma = rdma_t {
                    remote_addr: addr,
                    rkey,
                }
            }
            Remote::Atomic {
                addr,
                rkey,
                compare_add,
                swap,
            } => {
                wr.wr.atomic = atomic_t {
                    remote_addr: addr,
                    compare_add,
                    swap,
                    rkey,
                }
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: `wr` and `sges` are valid for the call (the queue pair was made for
        // `max_read_sge` entries, which no list passes); the local memory is registered under
        // each entry's key and stays untouched until the completion (or was copied, if
        // inline).
        let rc = unsafe { ibv_post_send(p.qp.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(rc);
        }
        p.in_flight += 1;
        self.sends_in_flight += 1;
        debug_assert!(
            self.sends_in_flight <= self.send_cap,
            "{} sends in flight, past the completion queue's {}",
            self.sends_in_flight,
            self.send_cap
        );
        Ok(())
    }

    /// Whether a send-queue work request may be posted to a queue pair with `in_flight` of
    /// its own in flight, keeping `reserve` free on it and across every queue pair (the
    /// completion queue's room, `send_cap`).
    fn has_room(&self, in_flight: u32, reserve: usize) -> bool {
        (in_flight as usize) + reserve < SEND_DEPTH as usize
            && self.sends_in_flight + reserve < self.send_cap
    }

    /// How many send-queue work requests may be posted now to a queue pair with `in_flight`
    /// of its own in flight, keeping `reserve` free across every queue pair.
    fn room(&self, in_flight: u32, reserve: usize) -> usize {
        (SEND_DEPTH.saturating_sub(in_flight) as usize)
            .min(self.send_cap.saturating_sub(self.sends_in_flight + reserve))
    }

    /// Sends one frame if the peer has credit and a send buffer is free; `Ok(false)` if not
    /// now (the caller retries after progress).
    pub fn send(&mut self, peer: Rank, header: &[u8], payload: &[u8]) -> Result<bool, PmlError> {
        let len = header.len() + payload.len();
        let p = self.peers[peer as usize].as_ref().expect("a verbs peer");
        if let Some(cause) = &p.broken {
            return Err(refused(peer, "SEND", cause));
        }
        let consumed = self.credit_slot(peer).load(Ordering::Acquire);
        if p.sent >= self.initial_credits + consumed || !self.has_room(p.in_flight, CONTROL_SENDS) {
            return Ok(false);
        }
        let Some(slot) = self.free_send.pop() else {
            return Ok(false);
        };
        let at = slot * self.frame_size;
        let buf = &mut self.send_region.buf[at..at + len];
        buf[..header.len()].copy_from_slice(header);
        buf[header.len()..].copy_from_slice(payload);
        let local = buf.as_ptr() as u64;
        let lkey = self.send_region.lkey();
        if let Err(rc) = self.post(
            peer,
            WR_SEND | slot as u64,
            ibv_wr_opcode::IBV_WR_SEND,
            local,
            len as u32,
            lkey,
            Remote::None,
        ) {
            self.free_send.push(slot);
            return Err(transport(
                peer,
                format!(
                    "posting a SEND failed: {}",
                    io::Error::from_raw_os_error(rc)
                ),
            ));
        }
        self.peers[peer as usize]
            .as_mut()
            .expect("a verbs peer")
            .sent += 1;
        Ok(true)
    }

    fn credit_slot(&self, peer: Rank) -> &AtomicU64 {
        self.slot(peer as usize)
    }

    /// Whether `peer` said goodbye: it finalized, and its queue pair is gone or going.
    fn said_goodbye(&self, peer: Rank) -> bool {
        self.slot(self.peers.len() + peer as usize)
            .load(Ordering::Acquire)
            != 0
    }

    fn slot(&self, index: usize) -> &AtomicU64 {
        let at = index * 8;
        // SAFETY: the slot is 8 aligned bytes inside the region (Vec<u8> of a multiple of 8
        // from the allocator, which aligns it to 8 or more); the NIC writes it with RDMA
        // WRITE, and we only read it atomically.
        unsafe { &*(self.credit_slots.buf.as_ptr().add(at) as *const AtomicU64) }
    }

    /// Exposes `len` bytes at `addr` for a peer's RDMA READ; returns the rkey and the
    /// registration to release once the send completes.
    pub fn expose(&mut self, addr: usize, len: usize) -> Result<(u32, MrId), String> {
        let keys = self
            .registry
            .acquire(addr, len, false)
            .map_err(|e| e.to_string())?;
        Ok((keys.rkey, keys.id))
    }

    pub fn release(&mut self, id: MrId) {
        self.registry.release(id);
    }

    /// Starts reading `target.len()` bytes at `remote` in `peer` into `target`; `token` comes
    /// back to the sink of a later `poll` when the data is in.
    pub fn read(
        &mut self,
        peer: Rank,
        remote: RemoteKey,
        target: &mut [u8],
        token: u64,
    ) -> Result<(), PmlError> {
        self.check_readable(peer)?;
        let keys = self
            .registry
            .acquire(target.as_ptr() as usize, target.len(), true)
            .map_err(|e| transport(peer, e.to_string()))?;
        let piece_max = self.dev.max_piece();
        let pieces = target.len().div_ceil(piece_max);
        let read = self.reads.insert(Read {
            token,
            peer,
            pieces_left: pieces,
            mr: keys.id,
            error: None,
            len: target.len(),
            remote,
            sges: Vec::new(),
            requests: pieces,
            of_layout: false,
            into_blocks: false,
        });
        for i in 0..pieces {
            let off = i * piece_max;
            let len = piece_max.min(target.len() - off);
            self.waiting_pieces.push_back(Piece {
                peer,
                read,
                local: Local::Bytes {
                    addr: target.as_ptr() as u64 + off as u64,
                    lkey: keys.lkey,
                },
                remote: remote.addr + off as u64,
                rkey: remote.key as u32,
                len: len as u32,
            });
        }
        self.reads_posted += 1;
        self.post_waiting_pieces()
    }

    /// The error for a read from `peer` once its queue pair broke.
    fn check_readable(&self, peer: Rank) -> Result<(), PmlError> {
        match &self.peers[peer as usize]
            .as_ref()
            .expect("a verbs peer")
            .broken
        {
            Some(cause) => Err(refused(peer, "RDMA READ", cause)),
            None => Ok(()),
        }
    }

    /// Posts waiting read pieces while their queue pairs have room.
    fn post_waiting_pieces(&mut self) -> Result<(), PmlError> {
        while let Some(piece) = self.waiting_pieces.front() {
            let p = self.peers[piece.peer as usize]
                .as_ref()
                .expect("a verbs peer");
            if let Some(cause) = &p.broken {
                // Never posted: a queue pair that failed need not complete work posted after,
                // and the read must still count every piece to finish.
                let cause = format!(
                    "{} was cut short: the connection to rank {} broke earlier ({cause})",
                    self.reads[piece.read].describe(),
                    piece.peer
                );
                let piece = self.waiting_pieces.pop_front().expect("front");
                self.piece_done(piece.read, Some(cause));
                continue;
            }
            if !self.has_room(p.in_flight, CONTROL_SENDS / 2) {
                return Ok(());
            }
            let piece = self.waiting_pieces.pop_front().expect("front");
            let mut list = [ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; MAX_SGE];
            let sges = match piece.local {
                Local::Bytes { addr, lkey } => {
                    list[0] = ibv_sge {
                        addr,
                        length: piece.len,
                        lkey,
                    };
                    &mut list[..1]
                }
                Local::Scattered { first, count } => {
                    list[..count].copy_from_slice(&self.reads[piece.read].sges[first..][..count]);
                    &mut list[..count]
                }
            };
            self.post_list(
                piece.peer,
                WR_READ | piece.read as u64,
                ibv_wr_opcode::IBV_WR_RDMA_READ,
                sges,
                Remote::Rdma {
                    addr: piece.remote,
                    rkey: piece.rkey,
                },
            )
            .map_err(|rc| {
                transport(
                    piece.peer,
                    format!(
                        "posting an RDMA READ failed: {}",
                        io::Error::from_raw_os_error(rc)
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// Accounts for one piece of read `index` (`cause`: why it failed), and finishes the read
    /// once its last piece is in: its first failure, if any, is the read's.
    fn piece_done(&mut self, index: usize, cause: Option<String>) {
        let r = &mut self.reads[index];
        r.pieces_left -= 1;
        if r.error.is_none() {
            r.error = cause;
        }
        if r.pieces_left == 0 {
            let r = self.reads.remove(index);
            self.registry.release(r.mr);
            self.finished_reads
                .push((r.token, r.error.map_or(Ok(()), Err)));
        }
    }

    /// Tells `peer` how many of its frames this rank consumed, once enough have piled up.
    fn return_credits(&mut self, peer: Rank) -> Result<(), PmlError> {
        let p = self.peers[peer as usize].as_ref().expect("a verbs peer");
        if p.consumed - p.reported < self.credit_batch
            || !self.has_room(p.in_flight, CONTROL_SENDS / 4)
            || p.broken.is_some()
        {
            return Ok(());
        }
        self.write_credits(peer, WR_CREDIT)
    }

    /// RDMA-WRITEs into `peer`'s credit slot for this rank how many of its frames this rank
    /// consumed. The count only grows, so writing it again early is harmless, which is what
    /// lets a liveness probe be one of these.
    fn write_credits(&mut self, peer: Rank, wr_id: u64) -> Result<(), PmlError> {
        let p = self.peers[peer as usize].as_mut().expect("a verbs peer");
        p.reported = p.consumed;
        let (value, addr) = (p.consumed, p.credit_addr);
        self.write_word(peer, wr_id, value, addr).map_err(|rc| {
            transport(
                peer,
                format!(
                    "posting a credit update failed: {}",
                    io::Error::from_raw_os_error(rc)
                ),
            )
        })
    }

    /// RDMA-WRITEs `value` to `addr` in `peer`'s slots.
    fn write_word(&mut self, peer: Rank, wr_id: u64, value: u64, addr: u64) -> Result<(), i32> {
        let rkey = self.peers[peer as usize]
            .as_ref()
            .expect("a verbs peer")
            .credit_rkey;
        // Inline: the value is copied at posting, so later updates cannot tear it.
        let bytes = value.to_le_bytes();
        self.post(
            peer,
            wr_id,
            ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            bytes.as_ptr() as u64,
            8,
            0,
            Remote::Rdma { addr, rkey },
        )
    }

    /// Destroys every queue pair, for an engine that stopped on a failure: the device drops
    /// the work still on them (RDMA READs into receive buffers whose owners stopped waiting)
    /// and writes no more into this process; peers reading our send buffers fail. Nothing
    /// may use the transport afterwards but its drop.
    pub fn stop(&mut self) {
        self.waiting_pieces.clear();
        for peer in self.peers.iter_mut().chain(&mut self.rma.peers) {
            *peer = None;
        }
        self.rma.loopback = None;
    }

    /// Probes the peers when a wait has been idle for `idle` (at least [`PROBE_AFTER`], and
    /// no round in the last `PROBE_AFTER`): a rank that only waits for a peer sends it
    /// nothing, so without a probe its queue pair never learns that the peer died. The probe
    /// is a credit update sent early; one that is not acknowledged fails after the queue
    /// pair's retries, and `poll` names the peer. Peers with work already on the send queue
    /// are skipped: that work fails the same way if the peer is gone.
    pub fn probe_idle_peers(&mut self, idle: Duration) -> Result<(), PmlError> {
        if idle < PROBE_AFTER || self.last_probe.is_some_and(|t| t.elapsed() < PROBE_AFTER) {
            return Ok(());
        }
        self.last_probe = Some(Instant::now());
        for peer in 0..self.peers.len() {
            let Some(p) = &self.peers[peer] else {
                continue;
            };
            if p.probing
                || p.broken.is_some()
                || p.in_flight > 0
                || !self.has_room(0, 1)
                || self.said_goodbye(peer as Rank)
            {
                continue;
            }
            self.write_credits(peer as Rank, WR_PROBE)?;
            self.peers[peer].as_mut().expect("checked above").probing = true;
        }
        Ok(())
    }

    /// Marks `peer` broken by `cause`; returns the error to report, the first time only: the
    /// work requests that fail after the first do so because the queue pair already had.
    fn peer_failed(&mut self, peer: Rank, cause: String) -> Option<PmlError> {
        if let Some(p) = self.lane_mut(peer, WR_SEND) {
            if p.broken.is_some() {
                return None;
            }
            p.broken = Some(cause.clone());
        }
        Some(transport(peer, cause))
    }

    fn peer_of_qpn(&self, qpn: u32) -> Option<Rank> {
        self.by_qpn.iter().find(|(q, _)| *q == qpn).map(|(_, r)| *r)
    }

    /// Takes completions: frames and finished reads go to `sink`. Returns how many of them
    /// arrived, with the window operations (`WR_RMA`) that completed, or the first failure
    /// of a peer's queue pair; the rest of the batch is still taken, so that buffers and
    /// reads of other peers are not lost.
    pub fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError> {
        // SAFETY: all-zero is a valid ibv_wc; poll_cq overwrites the entries it reports.
        let mut wcs: [ibv_wc; COMPLETIONS_PER_POLL] = unsafe { std::mem::zeroed() };
        let n = if self.stashed == 0 {
            // SAFETY: `wcs` has room for COMPLETIONS_PER_POLL entries.
            let n = unsafe { ibv_poll_cq(self.cq, COMPLETIONS_PER_POLL as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(transport(self.rank, "polling the completion queue failed"));
            }
            n as usize
        } else {
            std::mem::swap(&mut wcs, &mut *self.stash);
            std::mem::take(&mut self.stashed)
        };
        let mut frames = 0;
        let mut failure = None;
        // Peers whose queue pair flushed a work request, with its cause, until the batch is
        // through: a failure of their own in it (before or after) is the one to report.
        let mut flushed: Vec<(Rank, String)> = Vec::new();
        for wc in &wcs[..n] {
            let peer = self.peer_of_qpn(wc.qp_num).unwrap_or(self.rank);
            let index = (wc.wr_id & WR_INDEX) as usize;
            let kind = wc.wr_id & !WR_INDEX;
            if kind != WR_RECV {
                self.sends_in_flight -= 1;
                if let Some(p) = self.lane_mut(peer, kind) {
                    p.in_flight -= 1;
                    p.probing &= kind != WR_PROBE;
                    p.rma_completed += u64::from(kind == WR_RMA);
                }
            }
            let status = (wc.status != ibv_wc_status::IBV_WC_SUCCESS).then(|| status_text(wc));
            let cause = match kind {
                WR_RECV => {
                    if status.is_none() {
                        let at = index * self.frame_size;
                        let frame = &self.recv_region.buf[at..at + wc.byte_len as usize];
                        sink.frame(peer, frame)?;
                        frames += 1;
                        if let Some(p) = self.peers[peer as usize].as_mut() {
                            p.consumed += 1;
                        }
                    }
                    self.post_receive(index)?;
                    if status.is_none() {
                        self.return_credits(peer)?;
                    }
                    status.map(|s| format!("a receive from rank {peer} failed: {s}"))
                }
                WR_SEND => {
                    self.free_send.push(index);
                    // A flush says nothing of the peer (see `flushed_first`).
                    let hint = match wc.status {
                        ibv_wc_status::IBV_WC_WR_FLUSH_ERR => "",
                        _ => " (did it die?)",
                    };
                    status.map(|s| format!("a SEND to rank {peer} failed: {s}{hint}"))
                }
                WR_READ => {
                    let mut cause =
                        status.map(|s| format!("{} failed: {s}", self.reads[index].describe()));
                    // Flushed before any failure here: the peer's request broke the queue pair.
                    if wc.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR
                        && self.check_readable(peer).is_ok()
                    {
                        cause = cause.map(|c| flushed_first(peer, &c));
                    }
                    self.piece_done(index, cause.clone());
                    // The read's request carries the error; the peer is broken all the same.
                    if let Some(cause) = cause {
                        self.peer_failed(peer, cause);
                    }
                    None
                }
                WR_RMA => {
                    // The operation's waiter gets the error; the engine goes on.
                    let (what, len) = self.rma_completed(index);
                    if let Some(s) = status {
                        // Completions come in order: this one's ticket is the count so far.
                        let at = self.lane_ref(peer, kind).map_or(0, |p| p.rma_completed);
                        let cause = format!("an {what} of {len} bytes to rank {peer} failed: {s}");
                        self.rma_failed(peer, at, cause);
                    }
                    // Counted as arrived, as a finished read is: a wait for the operation (a
                    // window's flush) looks at it again only after a round that moved
                    // something, and this completion, taken from the queue here, wakes no
                    // later sleep on the completion channel.
                    frames += 1;
                    None
                }
                WR_PROBE => status.map(|s| {
                    format!(
                        "rank {peer} did not answer a liveness probe (an RDMA WRITE sent after a \
                         wait made no progress for {PROBE_AFTER:?}): {s}; it has exited, or its \
                         host or port is down"
                    )
                }),
                _ => status.map(|s| format!("a credit update to rank {peer} failed: {s}")),
            };
            if let Some(cause) = cause {
                // A peer that finalized took its queue pair along: writes to it fail, and
                // are moot. Anything else that fails is a broken connection.
                if matches!(kind, WR_CREDIT | WR_PROBE) && self.said_goodbye(peer) {
                    self.peer_failed(peer, format!("rank {peer} has finalized"));
                } else if wc.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                    flushed.push((peer, cause));
                } else {
                    let error = self.peer_failed(peer, cause);
                    failure = failure.or(error);
                }
            }
        }
        for (peer, cause) in flushed {
            let error = self.peer_failed(peer, flushed_first(peer, &cause));
            failure = failure.or(error);
        }
        self.post_waiting_pieces()?;
        for (token, result) in self.finished_reads.drain(..) {
            sink.read_done(token, result)?;
            frames += 1;
        }
        if frames > 0 {
            self.idle_since = None;
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(frames),
        }
    }

    /// Prepares a sleep: probes idle peers, asks for a wake-up on the next completion, and
    /// looks once more, since completions that came before arming wake nobody (those it finds
    /// wait for the next poll). Returns whether it found any: then do not sleep.
    pub fn before_wait(&mut self) -> Result<bool, PmlError> {
        let idle = self.idle_since.get_or_insert_with(Instant::now).elapsed();
        // A peer that died completes nothing: probe, so the wait fails instead of hanging.
        self.probe_idle_peers(idle)?;
        if self.stashed > 0 {
            return Ok(true);
        }
        // SAFETY: the CQ is live.
        unsafe { ibv_req_notify_cq(self.cq, 0) };
        // SAFETY: the stash has room for COMPLETIONS_PER_POLL entries.
        let n = unsafe {
            ibv_poll_cq(
                self.cq,
                COMPLETIONS_PER_POLL as i32,
                self.stash.as_mut_ptr(),
            )
        };
        if n < 0 {
            return Err(transport(self.rank, "polling the completion queue failed"));
        }
        self.stashed = n as usize;
        Ok(n > 0)
    }

    /// The completion channel's fd: readable once a completion came after `before_wait`.
    pub fn wake_fd(&self) -> std::os::fd::RawFd {
        // SAFETY: the channel is live for as long as the transport.
        unsafe { (*self.channel).fd }
    }

    /// Takes the channel's event, if one came, so that its fd is not readable for it again.
    pub fn after_wait(&mut self) {
        let mut cq = ptr::null_mut();
        let mut ctx = ptr::null_mut();
        // SAFETY: the channel is live and its fd non-blocking, so this returns at once.
        if unsafe { ibv_get_cq_event(self.channel, &mut cq, &mut ctx) } == 0 {
            // SAFETY: `cq` is the CQ the event was for, ours.
            unsafe { ibv_ack_cq_events(cq, 1) };
        }
    }

    /// Sleeps until a completion arrives or `timeout` passes.
    pub fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        if !self.before_wait()? {
            let mut pfd = libc::pollfd {
                fd: self.wake_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is valid for the call.
            unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
        }
        self.after_wait();
        Ok(())
    }

    /// Registrations made so far (for tests: a repeated send from one buffer makes one).
    pub fn registrations(&self) -> u64 {
        self.registry.registrations()
    }

    /// Adds the registrations and the reads into receives' blocks to `counters`.
    pub fn count_reads(&self, counters: &mut Counters) {
        counters.registrations += self.registrations();
        counters.verbs_sge_reads += self.sge_reads;
        counters.verbs_sge_read_requests += self.sge_read_requests;
        counters.verbs_staged_reads += self.staged_reads;
        counters.verbs_layout_sends += self.layout_sends;
        counters.verbs_packed_sends += self.packed_sends;
        counters.verbs_layout_reads += self.layout_reads;
        counters.verbs_layout_read_requests += self.layout_read_requests;
    }
}

impl VerbsTransport {
    /// Tells each connected peer that this rank is leaving, and waits (at most
    /// [`GOODBYE_DRAIN`]) until they have it, and so everything sent before it on each queue
    /// pair: a peer whose writes to this rank then fail knows it finalized rather than died.
    fn say_goodbye(&mut self) {
        let mut unanswered = 0;
        for peer in 0..self.peers.len() {
            let Some(p) = &self.peers[peer] else {
                continue;
            };
            // A peer past the completion queue's room goes without (it would take this
            // rank's silence for a death only if it wrote to it later).
            if p.goodbye_addr == 0
                || p.broken.is_some()
                || !self.has_room(p.in_flight, 0)
                || self.said_goodbye(peer as Rank)
            {
                continue;
            }
            let addr = p.goodbye_addr;
            if self.write_word(peer as Rank, WR_GOODBYE, 1, addr).is_ok() {
                unanswered += 1;
            }
        }
        let deadline = Instant::now() + GOODBYE_DRAIN;
        // SAFETY: all-zero is a valid ibv_wc; poll_cq overwrites the entries it reports.
        let mut wcs: [ibv_wc; COMPLETIONS_PER_POLL] = unsafe { std::mem::zeroed() };
        while unanswered > 0 && Instant::now() < deadline {
            // SAFETY: `wcs` has room for COMPLETIONS_PER_POLL entries.
            let n = unsafe { ibv_poll_cq(self.cq, COMPLETIONS_PER_POLL as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return;
            }
            // Completions in order per queue pair: the goodbye's comes after all before it.
            unanswered -= wcs[..n as usize]
                .iter()
                .filter(|wc| wc.wr_id & !WR_INDEX == WR_GOODBYE)
                .count();
            if n == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
}

impl Drop for VerbsTransport {
    fn drop(&mut self) {
        self.say_goodbye();
        // Queue pairs first: they use the SRQ, the CQ and every registration.
        self.peers.clear();
        self.rma.peers.clear();
        self.rma.loopback = None;
        self.rma.deregister();
        // SAFETY: nothing uses the SRQ, CQ or channel any more; each is destroyed once.
        // The regions, registry and device drop after this, in field order.
        unsafe {
            ibv_destroy_srq(self.srq);
            ibv_destroy_cq(self.cq);
            ibv_destroy_comp_channel(self.channel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{completion_queue, qpn_in, CqSize, QPN_DIGITS, RECV_BUFFERS, SEND_DEPTH};

    #[test]
    fn an_endpoint_of_128_ranks_fits_pmi() {
        // PMI-1 and PMI-2 hold 1024 bytes a value. The longest message endpoint: the
        // header's widest fields, then 128 ranks' queue pair numbers (4 nodes of 32).
        let header = format!(
            "{} {} {} {} {} {} ",
            u16::MAX,
            "f".repeat(32),
            5,
            u32::MAX,
            u64::MAX,
            u32::MAX
        );
        let list: String = (0..128u32)
            .map(|r| format!("{:06x}", 0xff_ff00 + r))
            .collect();
        assert!(
            header.len() + list.len() <= 1024,
            "{} bytes",
            header.len() + list.len()
        );
        assert_eq!(list.len(), 128 * QPN_DIGITS);
        assert_eq!(qpn_in(&list, 0), Some(0xff_ff00));
        assert_eq!(qpn_in(&list, 127), Some(0xff_ff00 + 127));
        assert_eq!(qpn_in(&list, 128), None, "past the list");
        assert_eq!(qpn_in("000000", 0), None, "no queue pair for this rank");
        assert_eq!(qpn_in("00zz00", 0), None);
    }

    /// The completion queue holds every queue pair's send queue and the receives where the
    /// device allows, else as many as it allows with the sends in flight capped to what it
    /// holds beside the receives; too few for a frame and the control writes is refused,
    /// naming the limit.
    #[test]
    fn the_completion_queue_is_clamped_to_the_device_and_caps_the_sends() {
        // Soft-RoCE's max_cqe.
        const RXE: usize = 32768;
        let whole = RECV_BUFFERS + (2 * 62 + 1) * SEND_DEPTH as usize;
        assert_eq!(
            completion_queue(62, RXE, None),
            Ok(CqSize {
                entries: whole as i32,
                sends: whole - RECV_BUFFERS
            })
        );
        // 63 peers, refused before the clamp, and 1000.
        for peers in [63, 1000] {
            assert_eq!(
                completion_queue(peers, RXE, None),
                Ok(CqSize {
                    entries: RXE as i32,
                    sends: RXE - RECV_BUFFERS
                })
            );
        }
        assert_eq!(
            completion_queue(1, RXE, Some(RECV_BUFFERS + 64)),
            Ok(CqSize {
                entries: (RECV_BUFFERS + 64) as i32,
                sends: 64
            })
        );
        let refused = completion_queue(1, RXE, Some(RECV_BUFFERS + 15)).unwrap_err();
        for named in [
            "MPIRT_VERBS_CQ_ENTRIES=527 (the device's max_cqe is 32768)",
            "leaves 15 for sends",
            "fewer than the 16 needed",
        ] {
            assert!(
                refused.contains(named),
                "{refused:?} does not say {named:?}"
            );
        }
        let refused = completion_queue(8, 520, None).unwrap_err();
        assert!(
            refused.contains("the device's max_cqe of 520") && refused.contains("leaves 8"),
            "{refused:?}"
        );
    }
}
