//! libfabric (OFI) transport (feature `ofi`): one reliable-datagram endpoint (`FI_EP_RDM`)
//! per rank, frames by `FI_MSG` sends into pre-posted receive buffers (`fi_inject` for those
//! no larger than the provider's inject size), rendezvous by `fi_read` straight into the
//! receive buffer where the provider has RMA, and by the protocol's DATA frames where not.
//! This reaches AWS EFA (`efa`), HPE Slingshot (`cxi`), InfiniBand and RoCE
//! (`verbs;ofi_rxm`), and, for testing anywhere, `tcp;ofi_rxm`, `shm` and `udp;ofi_rxd`.
//!
//! Only untagged messages are used: the native PML's matching, truncation and probe then
//! do not depend on a provider's tagged path (where libfabric 1.17's defects are: no
//! `FI_PEEK` on shm, a truncated tagged receive that tears the connection down on
//! tcp;ofi_rxm). Each frame starts with the sender's rank, so no provider need report
//! source addresses (ofi_rxd does not).
//!
//! Flow control: a rank may have `initial_credits` frames to a peer beyond what the peer
//! said it consumed; receivers tell the count they consumed on the next frame they send the
//! peer anyway, or, once half the credits are consumed unreported (a one-way stream), in a
//! credit frame that needs no credit itself. Progress is manual: every `poll` reads the
//! completion queue, which is what moves data on providers without a progress thread.
//!
//! Dead peers: libfabric 1.17's tcp;ofi_rxm and udp;ofi_rxd never fail a send to a peer
//! that is gone (rxm redials it, rxd retransmits, forever), and a slow peer looks the same:
//! shm and tcp;ofi_rxm complete a frame beyond the inject size only once the receiver's own
//! progress takes it, which a rank computing for minutes does not make. So by default no
//! rank here is taken for dead: rsrun ends the job when one of its ranks exits. With
//! `MPIRT_OFI_PEER_TIMEOUT` (opt-in, where the launcher cannot see ranks die) a send the peer
//! has not taken within that time, or a peer that refused every post (-FI_EAGAIN) for that
//! long and still does, names the peer dead, where the provider completes sends without the
//! peer's software (see `provider::acks_in_software`). A rank that only waits sends nothing,
//! so then a wait idle for [`PROBE_AFTER`] sends a credit frame (harmless: counts only grow)
//! to each peer it has exchanged frames with, which then fails or times out the same way. A
//! rank that finalizes says goodbye to its peers first, so that a probe stuck on it is no
//! error.

mod address;
mod contract;
mod environment;
mod fabric;
mod memory;
mod one_sided;
mod provider;
pub mod signals;
mod sys;

use std::collections::VecDeque;
use std::ffi::c_void;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use slab::Slab;

use super::{Polled, Sink};
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::registration_cache::{CachedMr, RegistrationCache};
use crate::wire::RemoteKey;
use fabric::{Fabric, Request};
use memory::Region;
use one_sided::{Rma, RMA_SLOTS};
use provider::MrPlan;

/// A user buffer's registration, to release when the operation that lent it completes (a
/// send buffer exposed to a peer's `fi_read`, a write's origin): the buffer's own (cached),
/// with the length it covers, or that of a registered copy of it (see `registered_copy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfiMr {
    /// A cached registration of the buffer itself, `len` bytes of it exposed.
    Cached { id: CachedMr, len: usize },
    /// A registered copy, by its index in `OfiTransport::copies`.
    Copy(usize),
}

/// `own`, a registration of the user's buffer, or where the provider refused it, `copy`'s
/// registered copy of the buffer (see `OfiTransport::registered_copy`); where that fails too,
/// one error naming both causes.
fn or_registered_copy<T>(
    own: Result<T, String>,
    copy: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    own.or_else(|e| copy().map_err(|e2| format!("{e}; a registered copy failed too: {e2}")))
}

/// Receive buffers posted on the endpoint, send buffers to copy frames into, and reads in
/// flight at once.
const RECV_BUFFERS: usize = 256;
/// Receive buffers kept for frames sent without credit (credit updates, probes, goodbyes):
/// peers' credits share the rest.
const CONTROL_BUFFERS: usize = 32;
const SEND_BUFFERS: usize = 128;
const READ_SLOTS: usize = 64;
/// Where the contexts of one-sided operations start (after the receive buffers', the send
/// buffers' and the read slots').
const RMA_BASE: usize = RECV_BUFFERS + SEND_BUFFERS + READ_SLOTS;
/// Idle registrations of user buffers kept for reuse.
const CACHED_REGISTRATIONS: usize = 256;
const COMPLETIONS_PER_POLL: usize = 32;
/// Every frame starts with the sender's rank (4 bytes, little-endian); its top bit marks a
/// credit frame, whose 8 bytes that follow count the frames the sender consumed.
const PREFIX: usize = 4;
const CREDIT_FRAME: u32 = 1 << 31;
/// In the prefix, marks the last frame of a rank that finalizes (no payload).
const GOODBYE_FRAME: u32 = 1 << 30;
/// In the prefix of a PML frame, says that the count of frames the sender consumed follows
/// the prefix, before the frame: credits that ride on a frame going the other way anyway,
/// so that a peer that answers (a ping-pong, a window's acknowledgement) needs no credit
/// frame of its own (see `send`).
const WITH_CREDITS: u32 = 1 << 29;
const RANK_BITS: u32 = WITH_CREDITS - 1;
/// The prefix and a consumed count: a credit frame, and the head of a frame with credits.
const CREDIT_LEN: usize = PREFIX + 8;
/// Longest single `fi_read`; larger reads go in pieces.
const MAX_READ_PIECE: usize = 1 << 30;
/// How long a rank that leaves waits for its sends to complete (a dead peer never lets them).
const SEND_DRAIN: Duration = Duration::from_secs(2);
/// How long a wait naps where the provider has no fd to sleep on (it is polled instead) and
/// no transfer is under way (see `polled_step`).
const NAP: Duration = Duration::from_micros(50);
/// How long a wait goes without progress before it probes its peers, and how often it probes
/// again while it stays idle (one small send to each peer a second).
pub const PROBE_AFTER: Duration = Duration::from_secs(1);
/// Polls that delivered nothing between two looks at the clock by a rank that polls without
/// sleeping (a loop of tests), for the address check a wait runs before it sleeps (see
/// `check_address_while_polling`): a few milliseconds of empty polls, so the clock (read
/// without a system call, through the vDSO) costs a poll next to nothing.
const POLLS_PER_CLOCK: u32 = 1024;
/// How long after a frame longer than the inject size arrived a rank without a wait fd keeps
/// polling (see [`transfer_under_way`]): rxd's retry timeout, beyond the 0.2 ms that one
/// 64 KiB frame takes at rxd's 300 MB/s, so that a stream of them keeps the receiver polling
/// and a lone one leaves it napping a millisecond later.
const STREAM_GAP: Duration = Duration::from_millis(1);
/// Refusals further apart than this are not one run (a wait retries a refused probe each
/// [`PROBE_AFTER`], so a run of them is refusals about that far apart).
const REFUSAL_GAP: Duration = Duration::from_secs(3);

/// What a wait's sleep does (see `wait_step`).
#[derive(Debug, PartialEq, Eq)]
enum WaitStep {
    /// Sleeps on the provider's fd until it is ready or the timeout passes.
    Poll(RawFd),
    /// Returns at once: the wait loop polls again.
    Return,
    /// Without an fd: as `polled_step` says.
    Polled(Polled),
}

/// What a wait's sleep does: with the provider's fd, sleeps on it unless a completion may be
/// pending (`fi_trywait` refused); without one (udp;ofi_rxd), as [`polled_step`] says.
fn wait_step(
    wait_fd: Option<RawFd>,
    pending: bool,
    in_flight: bool,
    idle: Duration,
    spins: bool,
) -> WaitStep {
    match wait_fd {
        Some(fd) if !pending => WaitStep::Poll(fd),
        Some(_) => WaitStep::Return,
        None => WaitStep::Polled(polled_step(in_flight, idle, spins)),
    }
}

/// How soon a provider without a wait fd (udp;ofi_rxd) must be polled again, by this
/// transport's own sleep or by the engine's wait on several transports (`WakeSet`). With
/// nothing `in_flight`, within a nap ([`NAP`]); with a transfer under way, not after a nap,
/// since the transfer moves only inside this rank's calls into the provider: rxd answers a
/// peer's fi_read from the target's progress, sends the next window of packets only once
/// that progress read the acknowledgement of the last, and acknowledges only there, and a
/// packet dropped while a rank napped (its socket buffer full) is resent after rxd's retry
/// timeout, 1 ms at first (a napping reader of one 1 MiB osu_bw napped 98,459 times in 12
/// windows). Such a wait polls again at once, where the rank `spins` (MPICH's and Open
/// MPI's waits poll without a pause), and after yielding where it must not spin (ranks
/// outnumbering their cores yield to the peers they wait for). Until the transport has gone
/// [`PROBE_AFTER`] without delivering anything (`idle`, as the probes count it), then it
/// naps again: a send buffer counts as under way from the RTS, before the peer matched it
/// and while nothing moves (this rank cannot tell), and a peer that computes for seconds,
/// or died (rxd never says), must not keep it polling at full CPU. A transfer that long
/// without a completion (hundreds of MB over rxd) goes on napping, at the nap's bandwidth
/// (0.8x the polling's at 1 MiB, idle).
fn polled_step(in_flight: bool, idle: Duration, spins: bool) -> Polled {
    let polled = in_flight && idle < PROBE_AFTER;
    if polled && spins {
        Polled::Now
    } else if polled {
        Polled::AfterYield
    } else {
        Polled::Within(NAP)
    }
}

/// Whether a transfer this rank takes part in is under way, where the provider has no fd and
/// progresses manually, so that it moves only inside this rank's calls into it (see
/// `polled_step`): a read it posted (`reading`), a send buffer of its exposed to a peer's read
/// (`exposures`), a stream of eager frames beyond the inject size going out (`frames` in
/// flight, two or more: rxd sends a window of packets at a time, the next only as the peer's
/// acknowledgements come in) or coming in (`stream_ago`: when the last of two or more such
/// frames received in a row, with no frame sent between them, arrived, while less than
/// [`STREAM_GAP`] ago; the next is arriving packet by packet into a socket buffer that
/// overflows while this rank naps, and a dropped packet costs rxd's 1 ms retry timeout).
/// One such frame each way at a time (a ping-pong of 2-64 KiB) does not count: rxd sends a
/// frame's packets in the send call, and polling without a pause where the ranks' cores are
/// shared with other work made such a ping-pong 10-50 times slower (load 100, 2 cores).
/// Control frames (credit updates, probes, goodbyes) never count: they wait on the peer
/// taking them, and a rank whose peer computes should not poll for that.
fn transfer_under_way(
    reading: bool,
    exposures: usize,
    frames: usize,
    stream_ago: Option<Duration>,
) -> bool {
    reading || exposures > 0 || frames >= 2 || stream_ago.is_some_and(|ago| ago < STREAM_GAP)
}

/// What a peer's consumed `count` (from a credit frame or a frame's credit prefix) makes of
/// the frames it `granted` before, where this rank `sent` it that many: counts only grow
/// (the larger of the two), and one beyond the frames sent is malformed, since a count taken
/// unchecked would let `sent` outrun the peer's buffers or, near `u64::MAX`, wrap the credit
/// sum and stop sends for good.
fn granted_by(sent: u64, granted: u64, count: u64) -> Result<u64, String> {
    if count > sent {
        return Err(format!(
            "said it consumed {count} frames of this rank's, which sent it only {sent} (a \
             malformed frame)"
        ));
    }
    Ok(granted.max(count))
}

/// The settings the transport is opened with (from `EngineConfig`).
pub struct OfiConfig<'a> {
    pub provider: Option<&'a str>,
    /// The job's id, which names this rank's endpoint where the provider names it by a file
    /// on the host (see `provider::host_file_name`).
    pub job_id: &'a str,
    /// Only a provider with a real device (for `--transport auto`).
    pub fabric_only: bool,
    pub rma: bool,
    /// Whether registrations of user buffers are kept for reuse (see `registration_cache`).
    pub reg_cache: bool,
    /// Largest message sent eagerly; `None`: the provider's default (see
    /// `provider::eager_limit`).
    pub eager_limit: Option<usize>,
    /// How long a send may go untaken before its peer counts as dead; `None`: never.
    pub peer_timeout: Option<Duration>,
    /// How long a one-sided operation may stay in flight (`one_sided::rma_overdue`).
    pub rma_timeout: Option<Duration>,
    /// Whether this rank's waits busy-poll (`Pml::waits_spin`): not where ranks outnumber
    /// the cores they may use, or spinning was turned off (see `polled_step`).
    pub waits_spin: bool,
}

/// A peer reached over the endpoint.
struct PeerState {
    addr: sys::fi_addr_t,
    /// Frames sent to the peer, and how many of them it said it consumed.
    sent: u64,
    granted: u64,
    /// Frames consumed from the peer, and how many of those it has been told about.
    consumed: u64,
    reported: u64,
    /// Why talking to the peer failed, once it has.
    broken: Option<String>,
    /// Send buffers on their way to the peer, and whether one of them is a probe.
    in_flight: u32,
    probing: bool,
    /// Whether the peer said goodbye (it finalized).
    gone: bool,
    /// Since when the provider refuses every post to the peer (-FI_EAGAIN: tcp;ofi_rxm
    /// redialling a peer that is gone), and when it last did: a refusal older than
    /// [`REFUSAL_GAP`] ends the run (the peer took something since, or nobody asked).
    refused_since: Option<Instant>,
    last_refused: Option<Instant>,
}

/// What a send buffer carries, for its completion.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SendKind {
    Frame,
    Credit,
    Probe,
}

/// A `read` of one receive, possibly in several pieces.
struct Read {
    token: u64,
    /// The bytes it reads (all its pieces), counted in `reading` until it completes.
    len: usize,
    pieces_left: usize,
    error: Option<String>,
    /// The target's registration, where the provider wants local memory registered: held
    /// until the read completes, then released to the cache.
    target: Option<CachedMr>,
}

struct Piece {
    peer: Rank,
    read: usize,
    local: usize,
    len: usize,
    remote: u64,
    key: u64,
    desc: usize,
}

type ReadDone = (u64, Result<(), String>);

pub struct OfiTransport {
    rank: Rank,
    host: String,
    /// By rank; `None` for ranks reached another way.
    peers: Vec<Option<PeerState>>,
    initial_credits: u64,
    /// Consumed frames that go back in a credit frame of their own when no frame to the
    /// peer took them first: half the credits, so that a one-way stream sends one per half
    /// of them (a quarter, as before, sent twice as many), and its sender still has the
    /// other half to send while the credit frame travels.
    credit_batch: u64,
    /// Whether some peer is owed a credit frame that could not go out yet.
    credits_owed: bool,
    /// Credit frames sent (`Counters::ofi_credit_frames`).
    credit_frames: u64,
    /// Largest frame the PML hands over, and a buffer's size (the frame and its prefix).
    frame_size: usize,
    slot_size: usize,
    eager_limit: usize,
    /// One context per operation that can be in flight: receive buffers, then send
    /// buffers, then read slots, then one-sided operations; an operation's completion names
    /// its context, and so it.
    contexts: Box<[sys::fi_context2]>,
    recv_buf: Vec<u8>,
    send_buf: Vec<u8>,
    /// Which rank each send buffer went to, what it carries, and when it was posted.
    send_peer: Vec<(Rank, SendKind)>,
    send_posted: Vec<Option<Instant>>,
    /// How long sends may stay uncompleted, or refused, before they mean a dead peer; `None`
    /// (the default, and where the provider acknowledges in the peer's software): never.
    send_timeout: Option<Duration>,
    free_send: Vec<usize>,
    /// What each read slot carries while in flight.
    read_slot: Vec<Option<(usize, Rank)>>,
    free_read: Vec<usize>,
    reads: Slab<Read>,
    /// The bytes of `reads`: what a wait is waiting on while no completion comes (see
    /// `bytes_in_flight`).
    reading: usize,
    /// The bytes of the send buffers exposed to peers' reads (`expose`, `expose_copy`), from
    /// the exposure (the RTS, before the peer matched it) until its `release`, which the
    /// engine calls when the peer's FIN says it read them all, or its post failed (or `stop`
    /// forgets them all).
    exposed: usize,
    /// How many send buffers those are (`Counters::ofi_exposed`).
    exposures: usize,
    /// Send buffers carrying PML frames on their way (see `transfer_under_way`).
    frames_in_flight: usize,
    /// When the last frame longer than the inject size arrived, and how many such arrived
    /// since this rank last sent a PML frame (see `transfer_under_way`).
    last_long_frame: Option<Instant>,
    long_frames_in_a_row: u32,
    waiting_pieces: VecDeque<Piece>,
    finished_reads: Vec<ReadDone>,
    /// Frames no longer than the provider's inject size are built here.
    scratch: Vec<u8>,
    /// Keys asked for where the provider does not pick them.
    next_key: u64,
    pub reads_posted: u64,
    /// See `OfiConfig::waits_spin`.
    waits_spin: bool,
    /// Sleeps on the provider's wait fd (`Counters::ofi_fd_sleeps`).
    pub fd_sleeps: u64,
    /// Registrations of the transport's own buffers.
    registrations: u64,
    stopped: bool,
    /// Since when polls found nothing, once a wait went to sleep (or, over IP sockets, a rank
    /// polled [`POLLS_PER_CLOCK`] times in vain), and when idle waits last probed the peers.
    idle_since: Option<Instant>,
    last_probe: Option<Instant>,
    /// The endpoint's IP address, on providers over IP sockets, when an idle wait (or a run
    /// of empty polls) last checked that this host still has it (see `address`), whether
    /// that check found it gone, and the empty polls since the clock was last read for it.
    address: Option<SocketAddr>,
    address_checked: Option<Instant>,
    address_missed: bool,
    empty_polls: u32,
    /// Registrations: ours (where the provider wants local buffers registered), and the
    /// user buffers exposed to peers or read into; all close before the fabric's objects.
    recv_mr: Option<Region>,
    send_mr: Option<Region>,
    /// Boxed, as `fabric` is: the transport sits in `AnyTransport` beside smaller ones.
    user_mrs: Box<RegistrationCache<Region>>,
    /// Copies of send buffers and writes' origins the provider could not register, with
    /// their registrations (closed before the copy is freed, by field order).
    copies: Slab<(Region, Vec<u8>)>,
    /// One-sided operations and the windows exposed to them (their registrations, too,
    /// close before the fabric's objects).
    rma: Box<Rma>,
    /// Boxed: its names and limits are read at start-up and in errors, and the transport
    /// sits in `AnyTransport` beside smaller ones.
    fabric: Box<Fabric>,
}

/// Writes a frame into `buf`, exactly its length: the prefix `word`, the consumed count
/// where the word says it carries `credits`, the PML's header and the payload.
fn write_frame(buf: &mut [u8], word: u32, credits: Option<u64>, header: &[u8], payload: &[u8]) {
    buf[..PREFIX].copy_from_slice(&word.to_le_bytes());
    let mut at = PREFIX;
    if let Some(consumed) = credits {
        buf[PREFIX..CREDIT_LEN].copy_from_slice(&consumed.to_le_bytes());
        at = CREDIT_LEN;
    }
    buf[at..at + header.len()].copy_from_slice(header);
    buf[at + header.len()..].copy_from_slice(payload);
}

/// The next key asked for where the provider does not pick keys.
fn take_key(next_key: &mut u64) -> u64 {
    let key = *next_key;
    *next_key += 1;
    key
}

/// Frames a rank may send a peer beyond what the peer said it consumed, in a job of `size`
/// ranks: the peers' credits share the receive buffers not kept for control frames.
fn initial_credits(size: u32) -> u64 {
    let others = (size as usize).saturating_sub(1).max(1);
    ((RECV_BUFFERS - CONTROL_BUFFERS) / others).clamp(1, 64) as u64
}

fn transport(peer: Rank, cause: impl Into<String>) -> PmlError {
    PmlError::transport(peer, cause.into())
}

impl OfiTransport {
    /// Opens the provider `config` asks for, with room for `size` ranks, and posts the receive
    /// buffers; `Ok(None)` where only a real fabric was asked for and there is none.
    pub fn new(
        rank: Rank,
        size: u32,
        host: &str,
        config: &OfiConfig,
    ) -> Result<Option<OfiTransport>, String> {
        let host_file_name = provider::host_file_name(config.job_id, rank);
        let request = Request {
            wanted: config.provider,
            host_file_name: &host_file_name,
            fabric_only: config.fabric_only,
            rma: config.rma,
            cq_size: RMA_BASE + RMA_SLOTS + 64,
            ranks: size as usize,
            rx_depth: RECV_BUFFERS,
        };
        let Some(fabric) = Fabric::open(&request)? else {
            return Ok(None);
        };
        let eager_limit = config
            .eager_limit
            .unwrap_or_else(|| provider::eager_limit(&fabric.provider));
        let frame_size = (eager_limit + crate::wire::MAX_HEADER_LEN)
            .min(fabric.max_msg_size.saturating_sub(CREDIT_LEN));
        let eager_room = frame_size
            .checked_sub(crate::wire::MAX_HEADER_LEN)
            .filter(|&room| room > 0 && frame_size >= CREDIT_LEN)
            .ok_or_else(|| {
                format!(
                    "libfabric provider {} sends at most {} bytes per message, too few for a \
                     frame (header {} bytes; set MPIRT_OFI_PROVIDER to another)",
                    fabric.provider,
                    fabric.max_msg_size,
                    crate::wire::MAX_HEADER_LEN + CREDIT_LEN
                )
            })?;
        let slot_size = (frame_size + CREDIT_LEN).next_multiple_of(64);
        // From the job's size, which every rank knows alike (not from this rank's own count of
        // OFI peers, which differs where some go over shared memory): a receiver's credit
        // batch must match what its senders were granted. Past 224 peers a rank could
        // overcommit its buffers; the provider then holds the excess (rxm, shm queue them).
        let initial_credits = initial_credits(size);
        let mut t = OfiTransport {
            rank,
            host: host.to_string(),
            peers: (0..size).map(|_| None).collect(),
            initial_credits,
            credit_batch: (initial_credits / 2).max(1),
            credits_owed: false,
            credit_frames: 0,
            frame_size,
            slot_size,
            eager_limit: eager_limit.min(eager_room),
            // SAFETY: all-zero is a valid fi_context2 (opaque pointers the provider fills).
            contexts: vec![unsafe { std::mem::zeroed() }; RMA_BASE + RMA_SLOTS].into_boxed_slice(),
            recv_buf: vec![0; RECV_BUFFERS * slot_size],
            send_buf: vec![0; SEND_BUFFERS * slot_size],
            send_peer: vec![(0, SendKind::Frame); SEND_BUFFERS],
            send_posted: vec![None; SEND_BUFFERS],
            send_timeout: config
                .peer_timeout
                .filter(|_| !provider::acks_in_software(&fabric.provider)),
            free_send: (0..SEND_BUFFERS).rev().collect(),
            read_slot: (0..READ_SLOTS).map(|_| None).collect(),
            free_read: (0..READ_SLOTS).rev().collect(),
            reads: Slab::new(),
            reading: 0,
            exposed: 0,
            exposures: 0,
            frames_in_flight: 0,
            last_long_frame: None,
            long_frames_in_a_row: 0,
            waiting_pieces: VecDeque::new(),
            finished_reads: Vec::new(),
            scratch: Vec::with_capacity(fabric.inject_size),
            next_key: 1,
            reads_posted: 0,
            waits_spin: config.waits_spin,
            fd_sleeps: 0,
            registrations: 0,
            stopped: false,
            idle_since: None,
            last_probe: None,
            address: None,
            address_checked: None,
            address_missed: false,
            empty_polls: 0,
            recv_mr: None,
            send_mr: None,
            user_mrs: Box::new(RegistrationCache::new(
                config.reg_cache,
                CACHED_REGISTRATIONS,
            )),
            copies: Slab::new(),
            rma: Box::new(Rma::new(size, config.rma_timeout)),
            fabric: Box::new(fabric),
        };
        if t.fabric.plan.local {
            let access = (sys::FI_RECV | sys::FI_SEND) as u64;
            t.recv_mr = Some(t.register(t.recv_buf.as_ptr(), t.recv_buf.len(), access)?);
            t.send_mr = Some(t.register(t.send_buf.as_ptr(), t.send_buf.len(), access)?);
        }
        for slot in 0..RECV_BUFFERS {
            t.post_receive(slot).map_err(|e| e.to_string())?;
        }
        t.address = address::socket_address(&t.fabric.provider, &t.fabric.name()?);
        Ok(Some(t))
    }

    fn register(&mut self, buf: *const u8, len: usize, access: u64) -> Result<Region, String> {
        self.registrations += 1;
        Region::register(&self.fabric, buf, len, access, take_key(&mut self.next_key))
    }

    /// The cached registration of `len` bytes at `buf`, registering if none covers them:
    /// `writable` for a read's target, else for peers' reads.
    fn register_user(
        &mut self,
        buf: *const u8,
        len: usize,
        writable: bool,
    ) -> Result<(CachedMr, &Region), String> {
        let access = MrPlan::user_access(writable);
        let (fabric, next_key) = (&self.fabric, &mut self.next_key);
        self.user_mrs
            .acquire(buf as usize, len, writable, |start, len| {
                Region::register(fabric, start as *const u8, len, access, take_key(next_key))
            })
    }

    /// Whether registrations of user buffers are kept between messages.
    pub fn caching(&self) -> bool {
        self.user_mrs.caching()
    }

    /// What peers publish and read: the provider's name, the largest frame (receive
    /// buffers are that long, so every rank must agree on it) and the endpoint's address.
    pub fn endpoint(&self) -> Result<String, String> {
        let name = self.fabric.name()?;
        Ok(format!(
            "{} {} {}",
            self.fabric.provider,
            self.frame_size,
            bootstrap::hex::encode(&name)
        ))
    }

    /// Puts `peer`'s endpoint (as `endpoint` wrote it) in the address vector. A peer on
    /// another provider cannot be reached: the error says which it has.
    pub fn connect(&mut self, peer: Rank, endpoint: &str) -> Result<(), String> {
        let malformed = || format!("rank {peer}'s OFI endpoint '{endpoint}' is malformed");
        let (provider, rest) = endpoint.split_once(' ').ok_or_else(malformed)?;
        let (frame_size, name) = rest.split_once(' ').ok_or_else(malformed)?;
        if provider != self.fabric.provider {
            return Err(format!(
                "rank {peer} uses libfabric provider {provider}, this rank {} (set \
                 MPIRT_OFI_PROVIDER to one both have)",
                self.fabric.provider
            ));
        }
        let frame_size: usize = frame_size.parse().map_err(|_| malformed())?;
        if frame_size != self.frame_size {
            return Err(format!(
                "rank {peer}'s libfabric frames are up to {frame_size} bytes, this rank's {} \
                 (a longer one would be truncated): set the same MPIRT_OFI_EAGER_LIMIT on every \
                 rank",
                self.frame_size
            ));
        }
        let name = bootstrap::hex::decode(name.as_bytes())
            .ok_or_else(|| format!("rank {peer}'s OFI address '{name}' is not hex"))?;
        let addr = self
            .fabric
            .insert(&name)
            .map_err(|e| format!("adding rank {peer}'s address: {e}"))?;
        self.peers[peer as usize] = Some(PeerState {
            addr,
            sent: 0,
            granted: 0,
            consumed: 0,
            reported: 0,
            broken: None,
            in_flight: 0,
            probing: false,
            gone: false,
            refused_since: None,
            last_refused: None,
        });
        Ok(())
    }

    fn context(&mut self, index: usize) -> *mut c_void {
        (&mut self.contexts[index] as *mut sys::fi_context2).cast()
    }

    fn post_receive(&mut self, slot: usize) -> Result<(), PmlError> {
        let desc = self
            .recv_mr
            .as_ref()
            .map_or(std::ptr::null_mut(), Region::desc);
        let buf = self.recv_buf[slot * self.slot_size..].as_mut_ptr();
        let context = self.context(slot);
        let deadline = Instant::now() + SEND_DRAIN;
        loop {
            // SAFETY: the buffer slot is ours, `slot_size` long, and stays lent to the
            // provider until its completion, as does its context.
            let rc =
                unsafe { sys::recv(self.fabric.ep, buf.cast(), self.slot_size, desc, context) };
            if rc == 0 {
                return Ok(());
            }
            if !sys::is_again(rc) || Instant::now() > deadline {
                return Err(transport(
                    self.rank,
                    format!("posting a receive buffer failed: {}", self.named(rc)),
                ));
            }
            self.progress_only();
        }
    }

    /// Reads the completion queue without taking completions: moves data on providers
    /// with manual progress, for a call that must retry after -FI_EAGAIN.
    fn progress_only(&mut self) {
        // SAFETY: a zero-count read progresses and reports nothing.
        unsafe { sys::cq_read(self.fabric.cq, std::ptr::null_mut(), 0) };
    }

    /// libfabric's words for `rc`, with the provider.
    fn named(&self, rc: isize) -> String {
        format!(
            "{} ({} on {})",
            sys::strerror(rc),
            self.fabric.provider,
            self.host
        )
    }

    /// Sends one frame if the peer has credit and the provider takes it now; `Ok(false)`
    /// if not (the caller retries after progress). The frames this rank consumed from the
    /// peer and has not reported yet ride along (`WITH_CREDITS`: 8 bytes more), so that a
    /// peer that answers each message never gets a credit frame (a ping-pong used to send
    /// one each way every 16 messages: a packet more, and on udp;ofi_rxd its
    /// acknowledgement).
    pub fn send(&mut self, peer: Rank, header: &[u8], payload: &[u8]) -> Result<bool, PmlError> {
        let p = self.peers[peer as usize].as_ref().expect("an OFI peer");
        if let Some(cause) = &p.broken {
            return Err(transport(
                peer,
                format!("a send to rank {peer} was refused: it failed earlier ({cause})"),
            ));
        }
        if p.sent >= self.initial_credits + p.granted {
            return Ok(false);
        }
        let addr = p.addr;
        // Not where the count would push an injected frame past the inject size.
        let plain = PREFIX + header.len() + payload.len();
        let inject = self.fabric.inject_size;
        let credits = (p.consumed > p.reported && (plain + 8 <= inject || plain > inject))
            .then_some(p.consumed);
        let (word, head) = match credits {
            Some(_) => (self.rank | WITH_CREDITS, CREDIT_LEN),
            None => (self.rank, PREFIX),
        };
        let len = head + header.len() + payload.len();
        let sent = if len <= inject {
            self.scratch.resize(len, 0);
            write_frame(&mut self.scratch, word, credits, header, payload);
            // SAFETY: the endpoint is live; inject copies the bytes before returning.
            let rc =
                unsafe { sys::inject(self.fabric.ep, self.scratch.as_ptr().cast(), len, addr) };
            self.check_post(peer, "an inject", rc)?
        } else {
            let Some(slot) = self.free_send.pop() else {
                return Ok(false);
            };
            let at = slot * self.slot_size;
            write_frame(
                &mut self.send_buf[at..at + len],
                word,
                credits,
                header,
                payload,
            );
            self.post_send(slot, peer, SendKind::Frame, len)?
        };
        if sent {
            self.long_frames_in_a_row = 0;
            let p = self.peers[peer as usize].as_mut().expect("an OFI peer");
            p.sent += 1;
            if let Some(consumed) = credits {
                p.reported = consumed;
            }
        }
        Ok(sent)
    }

    /// Sends the `len` bytes in send buffer `slot` to `peer`; `Ok(false)`: not now, and the
    /// slot is free again.
    fn post_send(
        &mut self,
        slot: usize,
        peer: Rank,
        kind: SendKind,
        len: usize,
    ) -> Result<bool, PmlError> {
        let desc = self
            .send_mr
            .as_ref()
            .map_or(std::ptr::null_mut(), Region::desc);
        let buf = self.send_buf[slot * self.slot_size..].as_ptr();
        let context = self.context(RECV_BUFFERS + slot);
        let addr = self.peers[peer as usize]
            .as_ref()
            .expect("an OFI peer")
            .addr;
        self.send_peer[slot] = (peer, kind);
        // SAFETY: the buffer slot holds the frame and, with its context, stays the
        // provider's until the send's completion returns the slot.
        let rc = unsafe { sys::send(self.fabric.ep, buf.cast(), len, desc, addr, context) };
        let sent = self.check_post(peer, "a send", rc);
        if matches!(sent, Ok(true)) {
            self.send_posted[slot] = Some(Instant::now());
            self.frames_in_flight += usize::from(kind == SendKind::Frame);
            let p = self.peers[peer as usize].as_mut().expect("an OFI peer");
            p.in_flight += 1;
            p.probing |= kind == SendKind::Probe;
        } else {
            self.free_send.push(slot);
        }
        sent
    }

    /// Sends `peer` a frame of the prefix `word` and the bytes of `body` from a send buffer,
    /// so that its completion, failed or not, names the peer; `Ok(false)`: not now.
    fn send_control(
        &mut self,
        peer: Rank,
        word: u32,
        body: &[u8],
        kind: SendKind,
    ) -> Result<bool, PmlError> {
        let Some(slot) = self.free_send.pop() else {
            return Ok(false);
        };
        let at = slot * self.slot_size;
        self.send_buf[at..at + PREFIX].copy_from_slice(&word.to_le_bytes());
        self.send_buf[at + PREFIX..at + PREFIX + body.len()].copy_from_slice(body);
        self.post_send(slot, peer, kind, PREFIX + body.len())
    }

    /// Whether a post went (`true`), must wait for progress (`false`), or failed.
    /// A post refused for now starts the peer's refusal clock (see `fail_stuck_sends`); one
    /// taken stops it.
    fn check_post(&mut self, peer: Rank, what: &str, rc: isize) -> Result<bool, PmlError> {
        if rc == 0 {
            if let Some(p) = self.peers[peer as usize].as_mut() {
                p.refused_since = None;
            }
            Ok(true)
        } else if sys::is_again(rc) {
            if let Some(p) = self.peers[peer as usize].as_mut() {
                let now = Instant::now();
                // Only an unbroken run of refusals counts: one that lapsed starts anew.
                if p.refused_since.is_none() || p.last_refused.is_none_or(|t| now - t > REFUSAL_GAP)
                {
                    p.refused_since = Some(now);
                }
                p.last_refused = Some(now);
            }
            self.progress_only();
            Ok(false)
        } else {
            let cause = format!("{what} to rank {peer} failed: {}", self.named(rc));
            Err(self
                .peer_failed(peer, cause.clone())
                .unwrap_or_else(|| transport(peer, cause)))
        }
    }

    /// Tells `peer` how many of its frames this rank consumed, once enough have piled up;
    /// leaves it owed where the provider cannot take it now.
    fn return_credits(&mut self, peer: Rank) -> Result<(), PmlError> {
        let Some(p) = self.peers[peer as usize].as_ref() else {
            return Ok(());
        };
        if p.consumed - p.reported < self.credit_batch || p.broken.is_some() {
            return Ok(());
        }
        let consumed = p.consumed;
        let word = self.rank | CREDIT_FRAME;
        let sent = self.send_control(peer, word, &consumed.to_le_bytes(), SendKind::Credit)?;
        if sent {
            self.credit_frames += 1;
            self.peers[peer as usize]
                .as_mut()
                .expect("an OFI peer")
                .reported = consumed;
        } else {
            self.credits_owed = true;
        }
        Ok(())
    }

    /// Registers `len` bytes at `buf` for peers' `fi_read`; returns how they address it.
    pub fn expose(&mut self, buf: *const u8, len: usize) -> Result<(RemoteKey, OfiMr), String> {
        let own = self
            .register_user(buf, len, false)
            .map(|(id, region)| (id, region.base, region.key()))
            .map(|registered| self.exposed_own(buf, len, registered));
        if self.fabric.plan.local {
            or_registered_copy(own, || self.expose_copy(buf, len))
        } else {
            own
        }
    }

    /// The exposure of the user's own buffer, `len` bytes at `buf`, by its cached
    /// registration `id` (of the region at `base` with `key`).
    fn exposed_own(
        &mut self,
        buf: *const u8,
        len: usize,
        (id, base, key): (CachedMr, usize, u64),
    ) -> (RemoteKey, OfiMr) {
        let key = RemoteKey {
            addr: self.fabric.plan.remote_addr(buf as usize, base),
            key,
        };
        self.exposed += len;
        self.exposures += 1;
        (key, OfiMr::Cached { id, len })
    }

    /// Exposes a registered copy of a send buffer the provider cannot register (see
    /// `registered_copy`): MPI forbids changing a send buffer before its send completes, so
    /// the copy serves the peer's read.
    fn expose_copy(&mut self, buf: *const u8, len: usize) -> Result<(RemoteKey, OfiMr), String> {
        let at = self.registered_copy(buf, len)?;
        let (region, copy) = &self.copies[at];
        let key = RemoteKey {
            addr: self
                .fabric
                .plan
                .remote_addr(copy.as_ptr() as usize, region.base),
            key: region.key(),
        };
        self.exposed += len;
        self.exposures += 1;
        Ok((key, OfiMr::Copy(at)))
    }

    /// Copies the `len` bytes at `buf` into memory of ours and registers that, for a buffer
    /// the provider cannot register: one in read-only memory (a constant), since verbs and
    /// efa ask for local write access on every registration, which pinning read-only pages
    /// refuses (-FI_EFAULT). Returns the copy's index in `copies`.
    fn registered_copy(&mut self, buf: *const u8, len: usize) -> Result<usize, String> {
        // SAFETY: the caller lends `len` readable bytes at `buf` (a send's buffer, a write's
        // origin) for the operation that copies them here.
        let copy = unsafe { std::slice::from_raw_parts(buf, len) }.to_vec();
        let region = self.register(copy.as_ptr(), len, MrPlan::user_access(false))?;
        Ok(self.copies.insert((region, copy)))
    }

    /// Gives an exposure back; one already closed (by `stop`) is let be. A release of one
    /// already given back is the engine's bug: a debug assertion, and in a release build
    /// left without effect on the counts, so that they never wrap (an `exposed` near
    /// `usize::MAX` would stretch every later wait's spin, and keep rxd's waits polling, for
    /// the rest of the run). Such a double release goes unseen where the exposure's place is
    /// taken again: a cached registration another live exposure shares (the cache counts
    /// users per range, not per send), or a copy whose slot a later exposure reuses; it then
    /// gives back the other's.
    pub fn release(&mut self, mr: OfiMr) {
        let Some(len) = self.unregister(mr) else {
            return;
        };
        // `stop` forgot them all and set the counts to zero.
        if !self.stopped {
            let balanced = self.exposures > 0 && self.exposed >= len;
            debug_assert!(
                balanced,
                "released {len} exposed bytes of {} in {} exposures",
                self.exposed, self.exposures
            );
            self.exposed = self.exposed.saturating_sub(len);
            self.exposures = self.exposures.saturating_sub(1);
        }
    }

    /// Gives a registration back, returning how many bytes it covered; one already closed
    /// (by `stop`) is let be. One given back already is `None` (and, before `stop`, the
    /// engine's bug: a debug assertion).
    fn unregister(&mut self, mr: OfiMr) -> Option<usize> {
        let live = !self.stopped;
        match mr {
            OfiMr::Cached { id, len } => {
                if !self.user_mrs.release(id) && live {
                    debug_assert!(false, "cached exposure {id:?} released twice");
                    return None;
                }
                Some(len)
            }
            OfiMr::Copy(at) => match self.copies.try_remove(at) {
                Some((region, copy)) => {
                    drop(region);
                    Some(copy.len())
                }
                None => {
                    debug_assert!(!live, "copy exposure {at} released twice");
                    None
                }
            },
        }
    }

    /// The bytes of the reads in flight and of the send buffers exposed to peers' reads:
    /// their requests complete only once all of them moved, which at 1 MiB takes longer
    /// than a wait's spin, while libfabric moves them inside the polls that report nothing.
    pub fn bytes_in_flight(&self) -> usize {
        self.reading + self.exposed
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
        if let Some(cause) = &self.peers[peer as usize]
            .as_ref()
            .expect("an OFI peer")
            .broken
        {
            return Err(transport(
                peer,
                format!("a read from rank {peer} was refused: it failed earlier ({cause})"),
            ));
        }
        let (region, desc) = if self.fabric.plan.local {
            let (id, region) = self
                .register_user(target.as_ptr(), target.len(), true)
                .map_err(|e| transport(peer, e))?;
            (Some(id), region.desc() as usize)
        } else {
            (None, 0)
        };
        let piece_max = self.fabric.max_msg_size.clamp(1, MAX_READ_PIECE);
        let pieces = target.len().div_ceil(piece_max).max(1);
        self.reading += target.len();
        let read = self.reads.insert(Read {
            token,
            len: target.len(),
            pieces_left: pieces,
            error: None,
            target: region,
        });
        for i in 0..pieces {
            let off = i * piece_max;
            self.waiting_pieces.push_back(Piece {
                peer,
                read,
                local: target.as_ptr() as usize + off,
                len: piece_max.min(target.len() - off),
                remote: remote.addr + off as u64,
                key: remote.key,
                desc,
            });
        }
        self.post_waiting_pieces()
    }

    /// Posts waiting read pieces while read slots are free and the provider takes them.
    fn post_waiting_pieces(&mut self) -> Result<(), PmlError> {
        while let Some(piece) = self.waiting_pieces.front() {
            let Some(slot) = self.free_read.pop() else {
                return Ok(());
            };
            let (peer, read) = (piece.peer, piece.read);
            let addr = self.peers[peer as usize]
                .as_ref()
                .expect("an OFI peer")
                .addr;
            let (local, len, remote, key, desc) =
                (piece.local, piece.len, piece.remote, piece.key, piece.desc);
            let context = self.context(RECV_BUFFERS + SEND_BUFFERS + slot);
            // SAFETY: the target stays lent until the read's completion (the engine keeps
            // the receive buffer until `read_done`), as does the slot's context.
            let rc = unsafe {
                sys::read(
                    self.fabric.ep,
                    local as *mut c_void,
                    len,
                    desc as *mut c_void,
                    addr,
                    remote,
                    key,
                    context,
                )
            };
            if rc != 0 {
                self.free_read.push(slot);
                if sys::is_again(rc) {
                    self.progress_only();
                    return Ok(());
                }
                let cause = format!("fi_read from rank {peer} failed: {}", self.named(rc));
                return Err(self
                    .peer_failed(peer, cause.clone())
                    .unwrap_or_else(|| transport(peer, cause)));
            }
            self.waiting_pieces.pop_front();
            self.read_slot[slot] = Some((read, peer));
            self.reads_posted += 1;
        }
        Ok(())
    }

    /// Marks `peer` failed by `cause`; returns the error to report, the first time only.
    fn peer_failed(&mut self, peer: Rank, cause: String) -> Option<PmlError> {
        let p = self.peers.get_mut(peer as usize).and_then(Option::as_mut)?;
        if p.broken.is_some() {
            return None;
        }
        p.broken = Some(cause.clone());
        Some(transport(peer, cause))
    }

    /// Takes completions: frames and finished reads go to `sink`. Returns how many arrived,
    /// or the first failure. A peer's failure lets the rest of the batch be taken first; a
    /// failure of the sink's, or of reposting a receive buffer, returns at once and leaves
    /// the rest of the batch's completions untaken (the engine stops on such an error).
    pub fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError> {
        // SAFETY: all-zero is a valid completion entry; cq_read overwrites those it reports.
        let mut entries: [sys::fi_cq_data_entry; COMPLETIONS_PER_POLL] =
            unsafe { std::mem::zeroed() };
        // SAFETY: `entries` has room for COMPLETIONS_PER_POLL entries.
        let n = unsafe { sys::cq_read(self.fabric.cq, entries.as_mut_ptr(), COMPLETIONS_PER_POLL) };
        let mut delivered = 0;
        let mut failure = None;
        if n > 0 {
            for entry in &entries[..n as usize] {
                let len = entry.len;
                delivered += self.completed(entry.op_context, Ok(len), sink, &mut failure)?;
            }
        } else if n == -(sys::FI_EAVAIL as isize) {
            // SAFETY: all-zero is a valid error entry; readerr fills it.
            let mut err: sys::fi_cq_err_entry = unsafe { std::mem::zeroed() };
            // SAFETY: the queue is live and `err` valid for the call.
            if unsafe { sys::cq_readerr(self.fabric.cq, &mut err) } > 0 {
                // SAFETY: the entry came from this queue.
                let cause = unsafe { sys::cq_strerror(self.fabric.cq, &err) };
                let mut cause = format!("{cause} ({} on {})", self.fabric.provider, self.host);
                if err.err == sys::FI_ETRUNC as i32 {
                    cause += &self.truncated_from(err.op_context);
                }
                delivered += self.completed(err.op_context, Err(cause), sink, &mut failure)?;
            }
        } else if n < 0 && !sys::is_again(n) {
            return Err(transport(
                self.rank,
                format!("reading the completion queue failed: {}", self.named(n)),
            ));
        }
        if self.credits_owed {
            self.credits_owed = false;
            for peer in 0..self.peers.len() {
                self.return_credits(peer as Rank)?;
            }
        }
        self.post_waiting_pieces()?;
        for (token, result) in std::mem::take(&mut self.finished_reads) {
            sink.read_done(token, result)?;
            delivered += 1;
        }
        if delivered > 0 {
            self.idle_since = None;
        }
        match failure {
            Some(e) => Err(e),
            // Here, not before a sleep only: `Engine::rma` waiting for room behind an
            // unanswered operation polls without sleeping.
            None if delivered == 0 => {
                self.rma_overdue()?;
                self.check_address_while_polling().map(|()| 0)
            }
            None => Ok(delivered),
        }
    }

    /// One completion, of the operation whose context is `context`: `Ok(len)` or the
    /// error's cause. Returns how many deliveries it made.
    fn completed(
        &mut self,
        context: *mut c_void,
        result: Result<usize, String>,
        sink: &mut impl Sink,
        failure: &mut Option<PmlError>,
    ) -> Result<usize, PmlError> {
        let base = self.contexts.as_ptr() as usize;
        let index = (context as usize).wrapping_sub(base) / size_of::<sys::fi_context2>();
        if context.is_null() || index >= self.contexts.len() {
            // An operation without a context of ours (an inject): its failure is the
            // transport's, with no peer to name.
            if let Err(cause) = result {
                *failure = failure.take().or(Some(transport(
                    self.rank,
                    format!("a send failed: {cause}"),
                )));
            }
            return Ok(0);
        }
        if index < RECV_BUFFERS {
            return self.received(index, result, sink, failure);
        }
        if index < RECV_BUFFERS + SEND_BUFFERS {
            let slot = index - RECV_BUFFERS;
            self.free_send.push(slot);
            self.send_posted[slot] = None;
            let (peer, kind) = self.send_peer[slot];
            self.frames_in_flight -= usize::from(kind == SendKind::Frame);
            let Some(p) = self.peers[peer as usize].as_mut() else {
                return Ok(0);
            };
            p.in_flight -= 1;
            p.probing &= kind != SendKind::Probe;
            let gone = p.gone;
            if let Err(cause) = result {
                let cause = match kind {
                    // A peer that finalized took its endpoint along: control frames to it
                    // fail, and are moot.
                    SendKind::Credit | SendKind::Probe if gone => {
                        self.peer_failed(peer, format!("rank {peer} has finalized"));
                        return Ok(0);
                    }
                    SendKind::Probe => format!(
                        "rank {peer} did not answer a liveness probe (a credit frame sent after \
                         a wait made no progress for {PROBE_AFTER:?}): {cause}; it has exited, \
                         or its host is down"
                    ),
                    SendKind::Credit => format!("a credit update to rank {peer} failed: {cause}"),
                    SendKind::Frame => {
                        format!("a send to rank {peer} failed: {cause} (did it die?)")
                    }
                };
                let error = self.peer_failed(peer, cause);
                *failure = failure.take().or(error);
            }
            return Ok(0);
        }
        if index >= RMA_BASE {
            self.rma_completed(index - RMA_BASE, result.map(drop));
            // Counted as delivered, as a finished read is: a wait for the operation (a flush)
            // looks again only after a round that moved something, so, uncounted, an origin's
            // flush waited for its spin budget to run out before it saw its write complete
            // (gdb of osu_put_latency's origin over tcp;ofi_rxm: every flush ended in the
            // wait's sleep).
            return Ok(1);
        }
        let slot = index - RECV_BUFFERS - SEND_BUFFERS;
        let (read, peer) = self.read_slot[slot].take().expect("a read in flight");
        self.free_read.push(slot);
        let r = &mut self.reads[read];
        r.pieces_left -= 1;
        if let Err(cause) = &result {
            r.error
                .get_or_insert_with(|| format!("fi_read from rank {peer} failed: {cause}"));
        }
        if r.pieces_left == 0 {
            let r = self.reads.remove(read);
            self.reading -= r.len;
            if let Some(id) = r.target {
                self.user_mrs.release(id);
            }
            self.finished_reads
                .push((r.token, r.error.map_or(Ok(()), Err)));
        }
        // The read's request carries the error; the peer is broken all the same.
        if let Err(cause) = result {
            self.peer_failed(peer, cause);
        }
        Ok(0)
    }

    /// Who sent the frame too long for the receive buffer of `context`: a truncated receive
    /// still holds the frame's first bytes, whose prefix names the sender.
    fn truncated_from(&self, context: *mut c_void) -> String {
        let index = (context as usize).wrapping_sub(self.contexts.as_ptr() as usize)
            / size_of::<sys::fi_context2>();
        if context.is_null() || index >= RECV_BUFFERS {
            return String::new();
        }
        let at = index * self.slot_size;
        let word = u32::from_le_bytes(self.recv_buf[at..at + PREFIX].try_into().expect("4"));
        format!(
            ": a frame from rank {} longer than this rank's {} bytes (do all ranks set the same \
             MPIRT_OFI_EAGER_LIMIT?)",
            word & RANK_BITS,
            self.frame_size
        )
    }

    /// A frame in receive buffer `slot`: to the sink, or a credit update; then the buffer
    /// is posted again.
    fn received(
        &mut self,
        slot: usize,
        result: Result<usize, String>,
        sink: &mut impl Sink,
        failure: &mut Option<PmlError>,
    ) -> Result<usize, PmlError> {
        let len = match result {
            Ok(len) => len,
            Err(cause) => {
                self.post_receive(slot)?;
                *failure = failure.take().or(Some(transport(
                    self.rank,
                    format!("a receive failed: {cause}"),
                )));
                return Ok(0);
            }
        };
        let at = slot * self.slot_size;
        if len < PREFIX || len > self.slot_size {
            self.post_receive(slot)?;
            return Err(transport(self.rank, format!("a {len}-byte frame arrived")));
        }
        let word = u32::from_le_bytes(self.recv_buf[at..at + PREFIX].try_into().expect("4"));
        let peer = word & RANK_BITS;
        if peer as usize >= self.peers.len() || self.peers[peer as usize].is_none() {
            self.post_receive(slot)?;
            return Err(transport(
                self.rank,
                format!("a frame arrived from rank {peer}, which this transport does not carry"),
            ));
        }
        let mut delivered = 0;
        if word & GOODBYE_FRAME != 0 {
            self.peers[peer as usize]
                .as_mut()
                .expect("checked above")
                .gone = true;
        } else if word & CREDIT_FRAME != 0 {
            if len != CREDIT_LEN {
                self.post_receive(slot)?;
                return Err(transport(
                    peer,
                    format!(
                        "a {len}-byte credit frame came from rank {peer} ({CREDIT_LEN} expected)"
                    ),
                ));
            }
            self.take_credits(peer, at, slot)?;
        } else {
            let mut start = at + PREFIX;
            if word & WITH_CREDITS != 0 {
                if len < CREDIT_LEN {
                    self.post_receive(slot)?;
                    return Err(transport(
                        peer,
                        format!(
                            "a {len}-byte frame came from rank {peer}, too short for the \
                             credits its prefix says it carries"
                        ),
                    ));
                }
                self.take_credits(peer, at, slot)?;
                start = at + CREDIT_LEN;
            }
            if len > self.fabric.inject_size && self.fabric.wait_fd.is_none() {
                self.last_long_frame = Some(Instant::now());
                self.long_frames_in_a_row = self.long_frames_in_a_row.saturating_add(1);
            }
            sink.frame(peer, &self.recv_buf[start..at + len])?;
            self.peers[peer as usize]
                .as_mut()
                .expect("checked above")
                .consumed += 1;
            delivered = 1;
        }
        self.post_receive(slot)?;
        if delivered > 0 {
            self.return_credits(peer)?;
        }
        Ok(delivered)
    }

    /// Takes the consumed count after the prefix of the frame at `at` in the receive
    /// buffers from `peer`: frames this rank may send it beyond its initial credits. A count
    /// beyond the frames sent is a malformed frame (see [`granted_by`]); its buffer is
    /// posted again before the error returns.
    fn take_credits(&mut self, peer: Rank, at: usize, slot: usize) -> Result<(), PmlError> {
        let count = self.recv_buf[at + PREFIX..at + CREDIT_LEN]
            .try_into()
            .expect("8");
        let p = self.peers[peer as usize].as_mut().expect("an OFI peer");
        match granted_by(p.sent, p.granted, u64::from_le_bytes(count)) {
            Ok(granted) => {
                p.granted = granted;
                Ok(())
            }
            Err(cause) => {
                self.post_receive(slot)?;
                Err(transport(peer, format!("rank {peer} {cause}")))
            }
        }
    }

    /// Credit frames sent so far (for tests and benchmarks: answers carry credits instead).
    pub fn credit_frames(&self) -> u64 {
        self.credit_frames
    }

    /// Probes the peers when a wait has been idle for `idle` (at least [`PROBE_AFTER`], and
    /// no probe in the last `PROBE_AFTER`), where a peer timeout is set: a rank that only
    /// waits for a peer sends it nothing, so without a probe it never learns that the peer
    /// died. Peers with sends on their way are skipped (those fail the same way if the peer
    /// is gone), and so are peers never talked to: probing those would open a connection
    /// to every rank of the job, once a second. A probe refused for now goes again next round.
    fn probe_idle_peers(&mut self, idle: Duration) -> Result<(), PmlError> {
        if self.send_timeout.is_none()
            || idle < PROBE_AFTER
            || self.last_probe.is_some_and(|t| t.elapsed() < PROBE_AFTER)
        {
            return Ok(());
        }
        self.last_probe = Some(Instant::now());
        self.fail_stuck_sends()?;
        for peer in 0..self.peers.len() {
            let Some(p) = &self.peers[peer] else {
                continue;
            };
            let talked = p.sent > 0 || p.consumed > 0;
            if !talked || p.probing || p.gone || p.broken.is_some() || p.in_flight > 0 {
                continue;
            }
            let (word, count) = (self.rank | CREDIT_FRAME, p.reported);
            self.send_control(peer as Rank, word, &count.to_le_bytes(), SendKind::Probe)?;
        }
        Ok(())
    }

    /// Takes the peer of a send still uncompleted after the peer timeout, or one the provider
    /// has refused every post for that long and still refuses, for dead (where the provider
    /// completes sends without the peer's software): the first such is the error.
    fn fail_stuck_sends(&mut self) -> Result<(), PmlError> {
        let Some(timeout) = self.send_timeout else {
            return Ok(());
        };
        let mut failure = None;
        for peer in 0..self.peers.len() {
            let Some(p) = &self.peers[peer] else {
                continue;
            };
            let (Some(since), Some(last)) = (p.refused_since, p.last_refused) else {
                continue;
            };
            let waited = since.elapsed();
            if waited < timeout || last.elapsed() > REFUSAL_GAP || p.broken.is_some() {
                continue;
            }
            let cause = if p.gone {
                self.peer_failed(peer as Rank, format!("rank {peer} has finalized"));
                continue;
            } else {
                format!(
                    "rank {peer} did not take a send for {waited:.1?} (every one refused: {} on \
                     {}; MPIRT_OFI_PEER_TIMEOUT={timeout:?}); it has exited, or its host is down",
                    self.fabric.provider, self.host
                )
            };
            let error = self.peer_failed(peer as Rank, cause);
            failure = failure.or(error);
        }
        for slot in 0..SEND_BUFFERS {
            let Some(posted) = self.send_posted[slot] else {
                continue;
            };
            let waited = posted.elapsed();
            if waited < timeout {
                continue;
            }
            let (peer, kind) = self.send_peer[slot];
            let Some(p) = self.peers[peer as usize].as_ref() else {
                continue;
            };
            if p.gone {
                self.peer_failed(peer, format!("rank {peer} has finalized"));
                continue;
            }
            let what = match kind {
                SendKind::Probe => {
                    "a liveness probe (a credit frame sent after a wait made no \
                                    progress)"
                }
                SendKind::Credit => "a credit update",
                SendKind::Frame => "a send",
            };
            let cause = format!(
                "rank {peer} did not take {what} in {waited:.1?} ({} on {}; \
                 MPIRT_OFI_PEER_TIMEOUT={timeout:?}); it has exited, its host is down, or it \
                 computes for longer than that timeout",
                self.fabric.provider, self.host
            );
            let error = self.peer_failed(peer, cause);
            failure = failure.or(error);
        }
        failure.map_or(Ok(()), Err)
    }

    /// Fails, naming the address, once this rank's endpoint lost its IP address (see
    /// `address`: the provider would resend into the void, and report nothing, for minutes):
    /// looked at when a wait has delivered nothing for [`PROBE_AFTER`], and then once per
    /// `PROBE_AFTER` (a socket, a bind and a close). Two checks in a row must find it gone:
    /// an address lost for less than that (an interface taken down and up again, a lease
    /// renewed) costs the provider some resends, not the job.
    fn check_address(&mut self, idle: Duration) -> Result<(), PmlError> {
        let Some(address) = self.address else {
            return Ok(());
        };
        if idle < PROBE_AFTER
            || self
                .address_checked
                .is_some_and(|t| t.elapsed() < PROBE_AFTER)
        {
            return Ok(());
        }
        let previous = self.address_checked.replace(Instant::now());
        let lost = address::lost(address);
        // The checks in a row: an earlier miss counts only from the check just before, about
        // a second ago (two brief losses an hour apart are two brief losses).
        let missed_before = std::mem::replace(&mut self.address_missed, lost.is_some())
            && previous.is_some_and(|t| t.elapsed() < 2 * PROBE_AFTER);
        match lost {
            None => Ok(()),
            Some(_) if !missed_before => Ok(()),
            Some(e) => Err(transport(
                self.rank,
                format!(
                    "this rank's libfabric endpoint lost its address {} ({} on {}: binding to it \
                     now fails: {e}): its interface was deleted or lost the address, so no \
                     message to or from this rank can move; run on an interface that stays up \
                     (FI_UDP_IFACE or FI_TCP_IFACE names one)",
                    address.ip(),
                    self.fabric.provider,
                    self.host
                ),
            )),
        }
    }

    /// [`check_address`](Self::check_address) for a rank that polls without ever sleeping (a
    /// loop of tests), which prepares no wait: every [`POLLS_PER_CLOCK`] polls that delivered
    /// nothing read the clock, and the address is checked as a wait checks it, once idle for
    /// [`PROBE_AFTER`] and then at most once per `PROBE_AFTER`. Nothing on providers that are
    /// not over IP sockets.
    fn check_address_while_polling(&mut self) -> Result<(), PmlError> {
        if self.address.is_none() {
            return Ok(());
        }
        self.empty_polls += 1;
        if self.empty_polls < POLLS_PER_CLOCK {
            return Ok(());
        }
        self.empty_polls = 0;
        let idle = self.idle_since.get_or_insert_with(Instant::now).elapsed();
        self.check_address(idle)
    }

    /// Prepares a sleep: probes idle peers, checks the endpoint's address, and says whether
    /// something may be pending (`fi_trywait` refuses): then do not sleep. Without an fd (the provider has none) it
    /// cannot tell: `polled` says how soon to look.
    pub fn before_wait(&mut self) -> Result<bool, PmlError> {
        let idle = self.idle_since.get_or_insert_with(Instant::now).elapsed();
        // A peer that died completes nothing: probe, so the wait fails instead of hanging.
        self.probe_idle_peers(idle)?;
        self.check_address(idle)?;
        Ok(self.fabric.wait_fd.is_some() && !self.fabric.may_sleep())
    }

    /// Without a wait fd, how soon a wait must poll this transport again (see
    /// `polled_step`); `None` with one. Asked after `before_wait`, which starts the idle
    /// clock.
    ///
    /// Also with one, while this rank exposes a window to peers' RMA that the provider applies
    /// only in this rank's progress (`serves_rma_by_polling`): as with a transfer under way,
    /// at once or after yielding, never after a nap.
    pub fn polled(&self) -> Option<Polled> {
        if self.serves_rma_by_polling() {
            return Some(polled_step(true, Duration::ZERO, self.waits_spin));
        }
        self.fabric.wait_fd.is_none().then(|| {
            let idle = self.idle_since.map_or(Duration::ZERO, |t| t.elapsed());
            polled_step(self.moves_while_polled(), idle, self.waits_spin)
        })
    }

    /// Whether this rank exposes a window (`expose_window`) on a provider that applies peers'
    /// RMA on it only inside this rank's calls into the provider (tcp;ofi_rxm and shm:
    /// `WindowsByRma::OptIn`): a peer's fi_write reaches this rank's sockets, but writes
    /// nothing to its completion queue, so it never makes the queue's wait fd readable. A
    /// target that slept there while a peer wrote to it (osu_put_latency's, in a barrier)
    /// applied the write, and answered it, only when its sleep ran out: 2.2-2.7 ms an 8-byte
    /// put and flush. Such a rank's waits poll instead, as long as the window is exposed.
    fn serves_rma_by_polling(&self) -> bool {
        self.rma.exposes_windows()
            && provider::windows_by_rma(&self.fabric.provider) == provider::WindowsByRma::OptIn
    }

    pub fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        let pending = self.before_wait()?;
        let idle = self.idle_since.map_or(Duration::ZERO, |t| t.elapsed());
        let step = match self.polled() {
            Some(polled) if self.serves_rma_by_polling() => WaitStep::Polled(polled),
            _ => wait_step(
                self.fabric.wait_fd,
                pending,
                self.moves_while_polled(),
                idle,
                self.waits_spin,
            ),
        };
        match step {
            WaitStep::Poll(fd) => {
                self.fd_sleeps += 1;
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: `pfd` is valid for the call.
                unsafe { libc::poll(&mut pfd, 1, timeout.as_millis().max(1) as i32) };
            }
            WaitStep::Return | WaitStep::Polled(Polled::Now) => {}
            WaitStep::Polled(Polled::AfterYield) => std::thread::yield_now(),
            WaitStep::Polled(Polled::Within(nap)) => std::thread::sleep(nap.min(timeout)),
        }
        Ok(())
    }

    /// Whether a transfer this rank takes part in is under way (see [`transfer_under_way`]).
    fn moves_while_polled(&self) -> bool {
        transfer_under_way(
            !self.reads.is_empty(),
            self.exposures,
            self.frames_in_flight,
            self.last_long_frame
                .filter(|_| self.long_frames_in_a_row >= 2)
                .map(|t| t.elapsed()),
        )
    }

    /// Send buffers exposed to peers' reads and not yet released (a rendezvous send's is
    /// released when the peer's FIN says it read it all).
    pub fn exposures(&self) -> usize {
        self.exposures
    }

    pub fn wake_fd(&self) -> Option<RawFd> {
        self.fabric.wait_fd
    }

    /// Stops moving data into this process, for an engine that stopped on a failure:
    /// closes the endpoint, so reads in flight write no more into receive buffers whose
    /// owners stopped waiting. Nothing may use the transport afterwards but its drop (and
    /// `release`, a no-op then).
    pub fn stop(&mut self) {
        self.waiting_pieces.clear();
        self.stopped = true;
        for peer in &mut self.peers {
            *peer = None;
        }
        self.close();
    }

    /// Closes the registrations, then the endpoint: a provider that binds regions to the
    /// endpoint (cxi: FI_MR_ENDPOINT) refuses to close an endpoint with regions bound
    /// (-FI_EBUSY), which would leave it live, and reads in flight writing on.
    fn close(&mut self) {
        self.reads.clear();
        self.reading = 0;
        self.close_registrations();
        self.fabric.close_endpoint();
    }

    fn close_registrations(&mut self) {
        self.rma.close();
        self.user_mrs.clear();
        self.copies.clear();
        self.exposed = 0;
        self.exposures = 0;
        self.recv_mr = None;
        self.send_mr = None;
    }

    /// Waits (at most [`SEND_DRAIN`]) for sends still in flight, which on providers with
    /// manual progress move only while this rank reads its completion queue, and retries
    /// the goodbyes to `unsaid`.
    fn drain(&mut self, mut unsaid: Vec<Rank>) {
        let deadline = Instant::now() + SEND_DRAIN;
        // SAFETY: all-zero is a valid completion entry.
        let mut entries: [sys::fi_cq_data_entry; COMPLETIONS_PER_POLL] =
            unsafe { std::mem::zeroed() };
        while (self.free_send.len() < SEND_BUFFERS
            || !self.reads.is_empty()
            || self.rma.busy()
            || !unsaid.is_empty())
            && Instant::now() < deadline
        {
            if !unsaid.is_empty() {
                unsaid = self.say_goodbye(unsaid);
            }
            // SAFETY: `entries` has room for COMPLETIONS_PER_POLL entries.
            let n =
                unsafe { sys::cq_read(self.fabric.cq, entries.as_mut_ptr(), COMPLETIONS_PER_POLL) };
            if n == -(sys::FI_EAVAIL as isize) {
                // SAFETY: as in `poll`.
                let mut err: sys::fi_cq_err_entry = unsafe { std::mem::zeroed() };
                // SAFETY: as in `poll`.
                unsafe { sys::cq_readerr(self.fabric.cq, &mut err) };
                self.retire(err.op_context);
            }
            for entry in &entries[..n.max(0) as usize] {
                self.retire(entry.op_context);
            }
        }
    }

    /// Tells `peers` that this rank is leaving (a peer whose probe then fails knows it
    /// finalized rather than died); returns those not told yet (no free send buffer, or
    /// the provider refused for now), for `drain` to retry while it waits for the goodbyes
    /// to go.
    fn say_goodbye(&mut self, peers: Vec<Rank>) -> Vec<Rank> {
        let mut unsaid = Vec::new();
        for peer in peers {
            let Some(p) = &self.peers[peer as usize] else {
                continue;
            };
            if p.gone || p.broken.is_some() {
                continue;
            }
            let word = self.rank | GOODBYE_FRAME;
            // A goodbye that failed outright leaves the peer broken, and untold: its probe
            // then names this rank, as it would a crash.
            if let Ok(false) = self.send_control(peer, word, &[], SendKind::Credit) {
                unsaid.push(peer);
            }
        }
        unsaid
    }

    /// Frees what the operation with `context` held, at exit.
    fn retire(&mut self, context: *mut c_void) {
        let index = (context as usize).wrapping_sub(self.contexts.as_ptr() as usize)
            / size_of::<sys::fi_context2>();
        if (RECV_BUFFERS..RECV_BUFFERS + SEND_BUFFERS).contains(&index) {
            let slot = index - RECV_BUFFERS;
            self.free_send.push(slot);
            self.frames_in_flight -= usize::from(self.send_peer[slot].1 == SendKind::Frame);
        } else if (RMA_BASE..self.contexts.len()).contains(&index) {
            self.rma_completed(index - RMA_BASE, Ok(()));
        } else if (RECV_BUFFERS + SEND_BUFFERS..RMA_BASE).contains(&index) {
            let slot = index - RECV_BUFFERS - SEND_BUFFERS;
            if let Some((read, _)) = self.read_slot[slot].take() {
                let r = &mut self.reads[read];
                r.pieces_left -= 1;
                if r.pieces_left == 0 {
                    let r = self.reads.remove(read);
                    self.reading -= r.len;
                    if let Some(id) = r.target {
                        self.user_mrs.release(id);
                    }
                }
            }
        }
    }

    /// Registrations made so far, of the transport's buffers and of user buffers (for
    /// tests: a repeated send from one buffer makes one).
    pub fn registrations(&self) -> u64 {
        self.registrations + self.user_mrs.registrations
    }
}

impl Drop for OfiTransport {
    fn drop(&mut self) {
        if !self.stopped {
            let unsaid = self.say_goodbye((0..self.peers.len() as Rank).collect());
            self.drain(unsaid);
            // Registrations close before the endpoint they may be bound to, and the endpoint
            // here, before the fields drop: closing it may still land frames in the posted
            // receive buffers (a peer's goodbye), which must be live then. The rest of the
            // fabric's objects close in its own drop.
            self.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Placement;

    /// A buffer the provider registers is not copied; one it refuses goes by a registered
    /// copy; where the copy's registration fails too, the error names both causes, the
    /// buffer's first (a put's origin in read-only pages under a locked-memory limit: no
    /// provider here needs local registration, so no job reaches this).
    #[test]
    fn a_refused_buffer_goes_by_a_registered_copy_naming_both_failures() {
        let copies = std::cell::Cell::new(0);
        let copy = |result: Result<u8, String>| {
            copies.set(copies.get() + 1);
            result
        };
        assert_eq!(or_registered_copy(Ok(1), || copy(Ok(2))), Ok(1));
        assert_eq!(copies.get(), 0, "a registered buffer was copied");
        assert_eq!(
            or_registered_copy(Err("Bad address".into()), || copy(Ok(2))),
            Ok(2)
        );
        assert_eq!(
            or_registered_copy(Err("fi_mr_reg: Bad address".into()), || copy(Err(
                "fi_mr_reg: Cannot allocate memory".into()
            ))),
            Err::<u8, _>(
                "fi_mr_reg: Bad address; a registered copy failed too: fi_mr_reg: Cannot \
                 allocate memory"
                    .into()
            )
        );
        assert_eq!(copies.get(), 2);
    }

    /// A transport of a job of one rank over udp;ofi_rxd, whose endpoint has an IP address, for
    /// the address checks' tests; `None` (the test skipped, saying why) where any address binds
    /// here, so that no address could be found gone.
    fn alone_over_rxd(job_id: &'static str, waits_spin: bool) -> Option<OfiTransport> {
        let nonlocal_bind = std::fs::read_to_string("/proc/sys/net/ipv4/ip_nonlocal_bind")
            .is_ok_and(|v| v.trim() != "0");
        if nonlocal_bind {
            println!("skipped: net.ipv4.ip_nonlocal_bind lets any address bind");
            return None;
        }
        let config = OfiConfig {
            provider: Some("udp;ofi_rxd"),
            job_id,
            fabric_only: false,
            rma: false,
            reg_cache: false,
            eager_limit: None,
            peer_timeout: None,
            rma_timeout: None,
            waits_spin,
        };
        let t = OfiTransport::new(0, 1, "here", &config)
            .expect("udp;ofi_rxd opens")
            .expect("udp;ofi_rxd is a provider");
        Some(t)
    }

    /// An idle wait finds the endpoint's own address still there, and fails naming one this
    /// host no longer has (standing in for it: 192.0.2.1, of the documentation's range, RFC
    /// 5737, which no interface here has), with the provider, the host and the variables that
    /// pin an interface, once two checks in a row (a second apart) missed it (one miss, then
    /// the address back, passes, as does a miss long after the last check); it looks at most
    /// once per `PROBE_AFTER`.
    #[test]
    fn an_endpoint_whose_address_is_gone_fails_naming_it() {
        let Some(mut t) = alone_over_rxd("address-gone", false) else {
            return;
        };
        assert!(
            t.address.is_some(),
            "udp;ofi_rxd names its endpoint by IP address"
        );
        assert!(
            t.check_address(PROBE_AFTER).is_ok(),
            "its own address is there"
        );
        t.address = Some(SocketAddr::from(([192, 0, 2, 1], 9)));
        assert!(
            t.check_address(PROBE_AFTER).is_ok(),
            "looked again within PROBE_AFTER"
        );
        t.address_checked = None;
        assert!(
            t.check_address(Duration::ZERO).is_ok(),
            "not idle long enough"
        );
        assert!(
            t.check_address(PROBE_AFTER).is_ok(),
            "a first check that misses it passes (the address may come back)"
        );
        // The next check, a second on.
        let a_second_ago = || Some(Instant::now() - PROBE_AFTER);
        let own = t.address.replace(SocketAddr::from(([127, 0, 0, 1], 0)));
        t.address_checked = a_second_ago();
        assert!(t.check_address(PROBE_AFTER).is_ok(), "it came back");
        t.address = own;
        t.address_checked = a_second_ago();
        assert!(
            t.check_address(PROBE_AFTER).is_ok(),
            "a miss after it came back is a first miss again"
        );
        t.address_checked = Some(Instant::now() - 3 * PROBE_AFTER);
        assert!(
            t.check_address(PROBE_AFTER).is_ok(),
            "a miss long after the last check is a first miss again"
        );
        t.address_checked = a_second_ago();
        let e = t.check_address(PROBE_AFTER).unwrap_err().to_string();
        for said in [
            "lost its address 192.0.2.1 (udp;ofi_rxd on here",
            "FI_UDP_IFACE or FI_TCP_IFACE",
        ] {
            assert!(e.contains(said), "missing {said:?} in {e}");
        }
    }

    /// Takes nothing: the transports these tests open have no peer to deliver from.
    struct NoDelivery;

    // SAFETY: it places nothing anywhere (`placement` never returns a target).
    unsafe impl Sink for NoDelivery {
        const PLACEMENT_HEAD: usize = 0;

        fn frame(&mut self, peer: Rank, _frame: &[u8]) -> Result<(), PmlError> {
            panic!("a frame from rank {peer}, on a transport with no peer")
        }
        fn placement(
            &mut self,
            peer: Rank,
            _head: &[u8],
            _len: usize,
        ) -> Result<Placement<'_>, PmlError> {
            panic!("a frame from rank {peer}, on a transport with no peer")
        }
        fn data_landed(&mut self, peer: Rank, _token: u64, _len: usize) -> Result<(), PmlError> {
            panic!("data from rank {peer}, on a transport with no peer")
        }
        fn read_done(&mut self, token: u64, _result: Result<(), String>) -> Result<(), PmlError> {
            panic!("read {token} finished, on a transport that started none")
        }
    }

    /// A rank that polls without sleeping (a loop of tests) checks its endpoint's address
    /// too: its polls count, and each [`POLLS_PER_CLOCK`]-th that delivered nothing reads the
    /// clock and checks as an idle wait does. Counted polls, not time: a second miss in a
    /// row is due before the run starts, and only the run's last poll finds it.
    #[test]
    fn a_rank_that_polls_without_sleeping_checks_its_address() {
        let Some(mut t) = alone_over_rxd("address-polled", true) else {
            return;
        };
        let own = t.address.replace(SocketAddr::from(([192, 0, 2, 1], 9)));
        assert!(
            own.is_some(),
            "udp;ofi_rxd names its endpoint by IP address"
        );
        // Polls just begun: the run's last poll starts the idle clock and checks nothing.
        for _ in 0..POLLS_PER_CLOCK {
            assert_eq!(t.poll(&mut NoDelivery).expect("not checked yet"), 0);
        }
        assert!(t.idle_since.is_some(), "the idle clock started");
        assert_eq!(
            t.address_checked, None,
            "checked before idle for PROBE_AFTER"
        );
        // Idle a second, with a first miss a second ago: the next check fails.
        let a_second_ago = Some(Instant::now() - PROBE_AFTER);
        (t.idle_since, t.address_checked, t.address_missed) = (a_second_ago, a_second_ago, true);
        for _ in 1..POLLS_PER_CLOCK {
            assert_eq!(t.poll(&mut NoDelivery).expect("no clock read yet"), 0);
        }
        // Again just before the poll that reads the clock: a miss counts only from the check
        // just before (within two seconds), and this thread may have been off its CPU for
        // longer than the second left during the polls above.
        let a_second_ago = Some(Instant::now() - PROBE_AFTER);
        (t.idle_since, t.address_checked, t.address_missed) = (a_second_ago, a_second_ago, true);
        let e = t.poll(&mut NoDelivery).unwrap_err().to_string();
        assert!(
            e.contains("lost its address 192.0.2.1 (udp;ofi_rxd on here"),
            "{e}"
        );
        // Over its own address, the check passes as often as it comes.
        t.address = own;
        (t.idle_since, t.address_checked) = (a_second_ago, a_second_ago);
        for _ in 0..POLLS_PER_CLOCK {
            assert_eq!(t.poll(&mut NoDelivery).expect("its address is there"), 0);
        }
        assert!(!t.address_missed, "checked, and found");
        assert!(t.address_checked > a_second_ago, "checked again");
    }

    /// With a wait fd, a wait sleeps on it unless a completion may be pending, whatever is in
    /// flight; without one, it naps while nothing is in flight, and with a transfer under way
    /// polls again at once where the rank spins, yields where it must not, until it has been
    /// idle for `PROBE_AFTER`: then it naps again.
    #[test]
    fn a_wait_without_an_fd_naps_only_with_nothing_in_flight() {
        let fresh = Duration::ZERO;
        let just_short = PROBE_AFTER - Duration::from_millis(1);
        let nap = WaitStep::Polled(Polled::Within(NAP));
        for idle in [fresh, just_short, PROBE_AFTER] {
            for in_flight in [false, true] {
                for spins in [false, true] {
                    assert_eq!(
                        wait_step(Some(7), false, in_flight, idle, spins),
                        WaitStep::Poll(7)
                    );
                    assert_eq!(
                        wait_step(Some(7), true, in_flight, idle, spins),
                        WaitStep::Return
                    );
                    assert_eq!(wait_step(None, false, false, idle, spins), nap);
                }
            }
        }
        for idle in [fresh, just_short] {
            assert_eq!(
                wait_step(None, false, true, idle, true),
                WaitStep::Polled(Polled::Now)
            );
            assert_eq!(
                wait_step(None, false, true, idle, false),
                WaitStep::Polled(Polled::AfterYield)
            );
        }
        for spins in [false, true] {
            assert_eq!(
                wait_step(None, false, true, PROBE_AFTER, spins),
                nap,
                "idle for PROBE_AFTER with a transfer under way"
            );
        }
    }

    /// Without a wait fd, a rank polls while a read or an exposed send buffer of its is on
    /// its way, while two or more eager frames are, and for [`STREAM_GAP`] after the last of a
    /// stream of them came in; one frame each way (a ping-pong), or none, and it naps.
    #[test]
    fn streams_of_eager_frames_keep_a_rank_polling_a_ping_pong_does_not() {
        assert!(!transfer_under_way(false, 0, 0, None));
        assert!(
            !transfer_under_way(false, 0, 1, None),
            "one frame in flight"
        );
        assert!(
            !transfer_under_way(false, 0, 0, Some(STREAM_GAP)),
            "a stream 1 ms ago"
        );
        assert!(transfer_under_way(true, 0, 0, None), "a read");
        assert!(transfer_under_way(false, 1, 0, None), "an exposure");
        assert!(transfer_under_way(false, 0, 2, None), "a stream going out");
        let just_now = Some(STREAM_GAP - Duration::from_micros(1));
        assert!(
            transfer_under_way(false, 0, 0, just_now),
            "a stream coming in"
        );
        assert!(transfer_under_way(false, 0, 0, Some(Duration::ZERO)));
    }

    /// The frame a `send` writes: the prefix, the consumed count only where the prefix says
    /// credits ride along, then the header and the payload.
    #[test]
    fn credits_ride_between_the_prefix_and_the_frame() {
        let (header, payload) = ([1u8, 2, 3], [9u8; 5]);
        let mut plain = vec![0xEE; PREFIX + 8];
        write_frame(&mut plain, 3, None, &header, &payload);
        assert_eq!(plain[..PREFIX], 3u32.to_le_bytes());
        assert_eq!(plain[PREFIX..PREFIX + 3], header);
        assert_eq!(plain[PREFIX + 3..], payload);
        let mut with = vec![0xEE; CREDIT_LEN + 8];
        write_frame(&mut with, 3 | WITH_CREDITS, Some(70), &header, &payload);
        assert_eq!(
            u32::from_le_bytes(with[..PREFIX].try_into().unwrap()) & RANK_BITS,
            3
        );
        assert_eq!(with[PREFIX..CREDIT_LEN], 70u64.to_le_bytes());
        assert_eq!(with[CREDIT_LEN..CREDIT_LEN + 3], header);
        assert_eq!(with[CREDIT_LEN + 3..], payload);
    }

    /// A consumed count only grows what a peer granted, and one beyond the frames sent to
    /// it is an error naming both numbers, never credit that wraps the sum in `send`.
    #[test]
    fn a_consumed_count_beyond_the_frames_sent_is_malformed() {
        assert_eq!(granted_by(10, 4, 7), Ok(7));
        assert_eq!(granted_by(10, 7, 4), Ok(7), "an older count");
        assert_eq!(granted_by(10, 0, 10), Ok(10));
        let err = granted_by(10, 4, u64::MAX).unwrap_err();
        assert!(
            err.contains(&u64::MAX.to_string()) && err.contains("only 10"),
            "{err}"
        );
        assert!(granted_by(0, 0, 1).is_err());
    }

    #[test]
    fn credits_leave_the_control_buffers_free_up_to_224_peers() {
        for size in 2..=(RECV_BUFFERS - CONTROL_BUFFERS + 1) as u32 {
            let granted = initial_credits(size) as usize * (size as usize - 1);
            assert!(
                granted <= RECV_BUFFERS - CONTROL_BUFFERS,
                "{size} ranks: {granted} credits for {} buffers",
                RECV_BUFFERS - CONTROL_BUFFERS
            );
        }
        assert_eq!(initial_credits(2), 64);
        assert_eq!(initial_credits(1000), 1);
    }
}
