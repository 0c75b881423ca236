//! `UcxPml`: MPI point-to-point on UCX's tag matching, behind the PML contract ([`Pml`]: post,
//! test, wait, probe, matched probe, cancel) so that the layer above can hold either PML.
//! UCX does the matching, the protocols (eager, rendezvous, synchronous acks) and the
//! transports; this maps envelopes to UCX tags and outcomes to `Done` and `PmlError`.

use std::ffi::c_void;
use std::time::Duration;

use super::datatype::{Data, Generic, InPlace};
use super::failure::PeerFailures;
use super::ffi;
use super::one_sided::Rma;
use super::owned_request::{OwnedRequest, SpareRequests};
use super::request::{self, peek};
use super::status;
use super::tag;
use super::wireup;
use super::worker::{self, Endpoint, Lanes, Worker};
use crate::blocks::Blocks;
use crate::envelope::{ContextId, Envelope, Rank, SourceSel, Status, Tag, TagSel};
use crate::error::PmlError;
use crate::pml_api::{Counters, Done, EngineError, Pml, RecvBuf, Wireup};
use crate::protocol::{SendMode, Started};
use crate::requests::{Handle, Requests};
use crate::stall::{Awaited, AwaitedRequest, QueuedSend, Queues, Selectors};
use crate::waiting::{spin_budget, Waiting};

/// An operation in flight: the request memory UCX runs it in (whose state the callback
/// fills), what kind it is and how many bytes it moves.
struct Op {
    request: OwnedRequest,
    kind: Kind,
    len: usize,
    /// The iov entries of a non-contiguous buffer (`Data::iov`), kept until the operation
    /// completes: UCX reads them through the pointer it was given. `None` for the others.
    #[allow(dead_code)] // Held, not read.
    iov: Option<Box<[ffi::ucp_dt_iov_t]>>,
}

/// What an operation is, with its envelope for the stall report (`queues`), which lists
/// the receives and sends UCX has not finished.
enum Kind {
    Send {
        peer: Rank,
        context: ContextId,
        tag: Tag,
        mode: SendMode,
    },
    Recv {
        buffer_len: usize,
        /// `None` for a message a matched probe took: it matches nothing more.
        posted: Option<Selectors>,
    },
}

/// A message a matched probe took out of UCX's unexpected queue; receive it with
/// `post_matched_recv` (MPI requires it; one dropped unreceived stays in UCX's memory until
/// the worker goes).
#[derive(Debug)]
pub struct UcxMessage {
    handle: ffi::ucp_tag_message_h,
    /// How long it is, for `post_matched_recv_blocks`' choice of staging.
    len: usize,
}

impl UcxMessage {
    fn new(handle: ffi::ucp_tag_message_h, info: ffi::ucp_tag_recv_info_t) -> UcxMessage {
        UcxMessage {
            handle,
            len: info.length as usize,
        }
    }
}

/// Settings of the UCX PML; UCX's own (`UCX_TLS`, ...) come from the environment.
#[derive(Clone, Debug)]
pub struct UcxConfig {
    /// How long a wait spins on progress before it sleeps on the worker's event fd.
    pub spin: Duration,
    /// Endpoints in UCX's peer error mode: a peer that dies makes the waits on it fail
    /// naming it, instead of hanging. UCX 1.13 then cannot use its shared-memory transports
    /// (they cannot detect a dead peer): same-host peers go over TCP or the network, and with
    /// `UCX_TLS=sm,self` no peer is reachable. Open MPI's pml/ucx leaves this off too.
    pub detect_peer_failure: bool,
    /// The shortest mean block of a non-contiguous buffer handed to UCX as an iov of its
    /// runs; shorter ones go as UCX's generic datatype, packed and unpacked by callbacks
    /// (see `datatype`).
    pub iov_min_block: usize,
    /// The shortest non-contiguous message of short blocks (for the generic datatype) that
    /// goes to UCX in place to or from a rank whose active messages UCX carries over TCP (a
    /// receive from any source: where every other rank is so); shorter ones are staged (see
    /// `UcxPml::in_place`). 0 stages none.
    pub tcp_stage_below: usize,
}

pub struct UcxPml {
    pub(super) rank: Rank,
    pub(super) size: u32,
    /// How long a wait spins on progress before it sleeps on the worker's event fd.
    spin: Duration,
    /// One per world rank, this one's included.
    pub(super) endpoints: Vec<Endpoint>,
    /// Per world rank, whether UCX carries its active messages over TCP
    /// (`Lanes::active_messages_over_tcp`), for the choice of staging (`in_place`).
    over_tcp: Vec<bool>,
    /// Whether every rank but this one is `over_tcp`: a receive from any source is staged as
    /// one from such a rank.
    all_over_tcp: bool,
    /// Dropped after `Drop` closed the endpoints.
    pub(super) worker: Worker,
    /// Windows' one-sided operations (`one_sided`): `Drop` settles those in flight before
    /// the endpoints close, and destroys the keys and unmaps the windows after.
    pub(super) rma: Rma,
    /// Declared after the worker: its error callbacks write here until the worker is gone.
    failures: PeerFailures,
    /// The operations in flight, in request memory of ours. Declared after the worker, as
    /// the memory below: destroying the worker may still complete what is in flight.
    ops: Requests<Op>,
    /// Request memory for the next operations.
    spare: SpareRequests,
    /// Where blocking receives build their UCX request: one at a time is in flight.
    blocking: OwnedRequest,
    /// UCX's generic datatype for non-contiguous buffers with short blocks. Declared after
    /// the worker, whose requests in flight name it.
    generic: Generic,
    /// See `UcxConfig::iov_min_block`.
    iov_min_block: usize,
    /// See `UcxConfig::tcp_stage_below`.
    tcp_stage_below: usize,
    /// The non-contiguous sends and receives handed to UCX in place, by kind, and those
    /// left to the caller's staging copy (`Counters::ucx_iov_sends` and its kin, the only
    /// fields set): kept as a `Counters`, which `counters` starts from.
    in_place_counts: Counters,
    /// The bytes of the operations in flight (`ops` and a blocking one being waited for),
    /// which stretch the spin before a wait sleeps (`waiting::spin_budget`).
    bytes_in_flight: usize,
    /// The blocking receive being waited for, for the stall report (`queues`).
    blocking_receive: Option<Selectors>,
    /// Wakes sent to peers asleep on their workers (`wake_peer`).
    wakes_sent: u64,
    description: String,
    /// The failure a wait stopped on (see `stop`); every later call that would move data
    /// returns it.
    failure: Option<PmlError>,
}

fn out_of_range(e: tag::TagError) -> PmlError {
    PmlError::OutOfRange(e.to_string().into())
}

/// A send UCX refused to start, as a failure of the connection to `peer`.
#[cold]
fn send_failed(peer: Rank, e: PmlError) -> PmlError {
    PmlError::transport(peer, e.to_string())
}

fn peer_failed(peer: Rank, status: ffi::ucs_status_t) -> PmlError {
    PmlError::transport(
        peer,
        format!(
            "UCX found the connection broken ({})",
            status::describe(status)
        ),
    )
}

/// A receive's outcome, from the status and information UCX left in its request.
fn received(
    status: ffi::ucs_status_t,
    info: ffi::ucp_tag_recv_info_t,
    buffer_len: usize,
) -> Result<Status, PmlError> {
    let envelope = tag::unpack(info.sender_tag);
    let found = Status {
        source: envelope.source,
        tag: envelope.tag,
        len: info.length as usize,
    };
    match status {
        ffi::UCS_OK => Ok(found),
        ffi::UCS_ERR_MESSAGE_TRUNCATED => Err(PmlError::truncated(found, buffer_len)),
        ffi::UCS_ERR_CANCELED => Err(PmlError::Cancelled),
        other => Err(status::failed("tag receive", other)),
    }
}

/// Checks that a receive started: with `UCP_OP_ATTR_FLAG_NO_IMM_CMPL` UCX hands back its
/// request even when the message was waiting (it then finished inside the call).
fn started_recv(operation: &'static str, started: ffi::ucs_status_ptr_t) -> Result<(), PmlError> {
    match status::started(operation, started)? {
        status::Started::Pending(_) => Ok(()),
        status::Started::Done => Err(PmlError::ucx(
            operation,
            "completed without a request despite UCP_OP_ATTR_FLAG_NO_IMM_CMPL",
        )),
    }
}

fn probed(info: ffi::ucp_tag_recv_info_t) -> Status {
    let envelope = tag::unpack(info.sender_tag);
    Status {
        source: envelope.source,
        tag: envelope.tag,
        len: info.length as usize,
    }
}

/// "rank 1 of 4 over UCX 1.13.1, to peers by tcp/eth0.0, to itself by self/memory0; peer
/// failure detection off"; `lanes` are the endpoints', one per world rank.
fn describe(rank: Rank, size: u32, lanes: &[Lanes], config: &UcxConfig) -> String {
    let mut to_peers: Vec<String> = Vec::new();
    for (_, ep) in lanes.iter().enumerate().filter(|&(p, _)| p as Rank != rank) {
        for t in ep.transports() {
            if !to_peers.contains(&t) {
                to_peers.push(t);
            }
        }
    }
    let to_self = lanes
        .get(rank as usize)
        .map(|ep| ep.transports().join("+"))
        .unwrap_or_default();
    let mut d = format!("rank {rank} of {size} over UCX {}", worker::version());
    if !to_peers.is_empty() {
        d += &format!(", to peers by {}", to_peers.join("+"));
    }
    d += &format!(
        ", to itself by {to_self}; peer failure detection {}; {}",
        if config.detect_peer_failure {
            "on"
        } else {
            "off"
        },
        tag_offload(&to_peers, offload_requested())
    );
    d
}

/// Whether `rsrun --hw-tag-matching` (or the user) asked UCX to offload tag matching.
fn offload_requested() -> bool {
    ["UCX_RC_MLX5_TM_ENABLE", "UCX_DC_MLX5_TM_ENABLE"]
        .iter()
        .any(|var| std::env::var(var).is_ok_and(|v| matches!(v.as_str(), "y" | "yes" | "1")))
}

/// What `--verbose` says about hardware tag matching: only UCX's accelerated RC and DC
/// transports on a ConnectX-5 or later (`rc_mlx5`, `dc_mlx5`) offload it.
fn tag_offload(to_peers: &[String], requested: bool) -> String {
    let capable: Vec<&str> = to_peers
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("rc_mlx5/") || t.starts_with("dc_mlx5/"))
        .collect();
    match (capable.is_empty(), requested) {
        (true, true) => "hardware tag matching asked for, but no offload-capable interface \
                         (rc_mlx5 or dc_mlx5 on a ConnectX-5 or later) carries this rank's \
                         traffic: matching stays in software"
            .into(),
        (true, false) => "no offload-capable interface for hardware tag matching \
                          (rc_mlx5 or dc_mlx5 on a ConnectX-5 or later)"
            .into(),
        (false, true) => format!("hardware tag matching on {}", capable.join("+")),
        (false, false) => format!(
            "hardware tag matching off, though {} could offload it (rsrun --hw-tag-matching)",
            capable.join("+")
        ),
    }
}

impl UcxPml {
    /// Opens UCX (which reads its own settings, such as UCX_TLS, from the environment) and
    /// connects to every rank through `wireup`'s key-value exchange.
    pub fn new(wireup: &mut dyn Wireup, config: &UcxConfig) -> Result<UcxPml, EngineError> {
        let (rank, size) = (wireup.rank(), wireup.size());
        if size > tag::MAX_RANK + 1 {
            return Err(EngineError::Config(format!(
                "the UCX PML carries ranks below {}; this job has {size}",
                tag::MAX_RANK + 1
            )));
        }
        let worker =
            Worker::new(size as usize).map_err(|e| EngineError::Transport(e.to_string()))?;
        let failures = PeerFailures::new(size as usize);
        let detecting = config.detect_peer_failure.then_some(&failures);
        let endpoints = wireup::connect_all(&worker, wireup, detecting)?;
        let lanes: Vec<Lanes> = endpoints.iter().map(Endpoint::lanes).collect();
        let description = describe(rank, size, &lanes, config);
        let over_tcp: Vec<bool> = lanes.iter().map(Lanes::active_messages_over_tcp).collect();
        let mut others = over_tcp
            .iter()
            .enumerate()
            .filter(|&(p, _)| p as Rank != rank)
            .peekable();
        let all_over_tcp = others.peek().is_some() && others.all(|(_, &tcp)| tcp);
        let spare = SpareRequests::new(worker.request_size());
        let generic = Generic::new().map_err(|e| EngineError::Transport(e.to_string()))?;
        Ok(UcxPml {
            rank,
            size,
            spin: config.spin,
            endpoints,
            over_tcp,
            all_over_tcp,
            worker,
            failures,
            rma: Rma::new(size),
            ops: Requests::default(),
            blocking: spare.fresh(),
            spare,
            generic,
            iov_min_block: config.iov_min_block,
            tcp_stage_below: config.tcp_stage_below,
            in_place_counts: Counters::default(),
            bytes_in_flight: 0,
            blocking_receive: None,
            wakes_sent: 0,
            description,
            failure: None,
        })
    }

    /// `ucp_tag_send_nbx` (or its synchronous kind) of `data` with `envelope` to `peer`, in
    /// the spare request memory, with `flags` added to the operation's attributes; a handle
    /// unless it finished at once.
    ///
    /// # Safety
    /// `data`'s buffer (its bytes, or the blocks it describes) must be valid for reads and
    /// unchanged until the send completes.
    #[inline(always)]
    unsafe fn start_send(
        &mut self,
        envelope: Envelope,
        peer: Rank,
        mode: SendMode,
        data: Data,
        flags: u32,
    ) -> Result<Handle, PmlError> {
        // The error is built only on the way out: `ok_or` built and dropped one per send.
        let Some(ep) = self.endpoints.get(peer as usize) else {
            return Err(PmlError::UnknownPeer(peer));
        };
        let ep = ep.handle();
        self.check_running()?;
        if let Some(status) = self.failures.of(peer) {
            return Err(self.stop(peer_failed(peer, status)));
        }
        let ucx_tag = tag::pack(envelope).map_err(out_of_range)?;
        let mut param = request::owned_send_param(self.spare.next());
        param.op_attr_mask |= flags;
        data.describe_in(&mut param);
        let (buf, count) = (data.buffer.cast_const(), data.count as ffi::size_t);
        // SAFETY: `ep` is a live endpoint of this worker; the caller keeps `data`'s buffer
        // readable and unchanged until the request completes, and its iov entries go with
        // the request (`track`); `param`'s callback is the send kind and its request memory
        // is the spare one, which no operation in flight uses.
        let started = unsafe {
            match mode {
                SendMode::Standard => ffi::ucp_tag_send_nbx(ep, buf, count, ucx_tag, &param),
                SendMode::Synchronous => {
                    ffi::ucp_tag_send_sync_nbx(ep, buf, count, ucx_tag, &param)
                }
            }
        };
        match status::started("tag send", started) {
            Ok(status::Started::Done) => Ok(Handle::SENT),
            Ok(status::Started::Pending(_)) => {
                let kind = Kind::Send {
                    peer,
                    context: envelope.context,
                    tag: envelope.tag,
                    mode,
                };
                Ok(self.track(kind, data.len, data.iov))
            }
            Err(e) => Err(self.stop(send_failed(peer, e))),
        }
    }

    /// `ucp_tag_recv_nbx` into `data`, in the spare request memory.
    ///
    /// # Safety
    /// As for `post_recv`, for `data`'s buffer (its bytes, or the blocks it describes), and
    /// `data`'s iov entries must go with the request (`track`).
    #[inline]
    unsafe fn start_tag_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        data: &Data,
    ) -> Result<(), PmlError> {
        self.check_running()?;
        let (wanted, mask) = tag::selector(context, source, tag).map_err(out_of_range)?;
        let mut param = request::owned_recv_param(self.spare.next());
        data.describe_in(&mut param);
        // SAFETY: the worker is live; the caller lends `data`'s buffer until the request
        // completes; `param`'s callback is the tag-receive kind and its request memory is
        // the spare one, which no operation in flight uses.
        let started = unsafe {
            ffi::ucp_tag_recv_nbx(
                self.worker.handle(),
                data.buffer,
                data.count as ffi::size_t,
                wanted,
                mask,
                &param,
            )
        };
        started_recv("ucp_tag_recv_nbx", started)
    }

    /// `ucp_tag_msg_recv_nbx` of the message a matched probe took into `data`, in the spare
    /// request memory.
    ///
    /// # Safety
    /// As for `start_tag_recv`.
    unsafe fn start_matched_recv(
        &mut self,
        message: UcxMessage,
        data: &Data,
    ) -> Result<(), PmlError> {
        self.check_running()?;
        let mut param = request::owned_recv_param(self.spare.next());
        data.describe_in(&mut param);
        // SAFETY: as in `start_tag_recv`; `message` came from a removing probe on this
        // worker and is consumed here, so it is received once.
        let started = unsafe {
            ffi::ucp_tag_msg_recv_nbx(
                self.worker.handle(),
                data.buffer,
                data.count as ffi::size_t,
                message.handle,
                &param,
            )
        };
        started_recv("ucp_tag_msg_recv_nbx", started)
    }

    /// How the non-contiguous buffer `blocks` of a message of `len` bytes to or from world
    /// rank `peer` (`None`: a receive from any source) goes to UCX in place, or `None`
    /// (counted as staged) where the caller's staging copy moves it faster: short blocks
    /// (the generic datatype) in a message under `tcp_stage_below` bytes to or from a rank
    /// whose active messages UCX carries over TCP, or from any source where every other rank
    /// is so. Either form on either side meets the other (UCX matches bytes), so a choice
    /// that differs from the sender's (a receive from any source in a job of both kinds of
    /// peer) costs speed, never correctness. UCX 1.13 moves a non-contiguous rendezvous as active-message
    /// fragments (its RTS carries no address for one), which over TCP measured slower than
    /// packing, sending the bytes contiguously and unpacking (`halo.sh -u`, ARCHITECTURE.md);
    /// on shared memory the fragments won at every size.
    fn in_place(
        &mut self,
        blocks: &Blocks,
        peer: Option<Rank>,
        len: usize,
        send: bool,
    ) -> Option<InPlace> {
        let how = InPlace::of(blocks, self.iov_min_block);
        let over_tcp = match peer {
            Some(world_rank) => self
                .over_tcp
                .get(world_rank as usize)
                .copied()
                .unwrap_or(false),
            None => self.all_over_tcp,
        };
        if how == InPlace::Generic && len < self.tcp_stage_below && over_tcp {
            let counted = &mut self.in_place_counts;
            *match send {
                true => &mut counted.ucx_staged_sends,
                false => &mut counted.ucx_staged_receives,
            } += 1;
            return None;
        }
        Some(how)
    }

    /// The non-contiguous buffer `blocks` describes as UCX takes it in place, `how`.
    ///
    /// # Safety
    /// As for `Data::of_blocks`.
    unsafe fn data_of(&self, blocks: &Blocks, how: InPlace) -> Data {
        // SAFETY: forwarded from this function's contract.
        unsafe { Data::of_blocks(blocks, &self.generic, how) }
    }

    /// Counts a non-contiguous send or receive that UCX took (started) in place, as `how`.
    fn count_in_place(&mut self, how: InPlace, send: bool) {
        let counted = &mut self.in_place_counts;
        let count = match (how, send) {
            (InPlace::Iov, true) => &mut counted.ucx_iov_sends,
            (InPlace::Iov, false) => &mut counted.ucx_iov_receives,
            (InPlace::Generic, true) => &mut counted.ucx_generic_sends,
            (InPlace::Generic, false) => &mut counted.ucx_generic_receives,
        };
        *count += 1;
    }

    /// A handle for the receive just started in the spare request memory; `posted` is what
    /// it matches, if it was posted to match.
    fn track_recv(&mut self, data: Data, posted: Option<Selectors>) -> Handle {
        let buffer_len = data.len;
        self.track(Kind::Recv { buffer_len, posted }, buffer_len, data.iov)
    }

    /// A handle for the operation just started in the spare request memory, which keeps
    /// the iov entries UCX reads (if any) until it completes.
    fn track(&mut self, kind: Kind, len: usize, iov: Option<Box<[ffi::ucp_dt_iov_t]>>) -> Handle {
        self.bytes_in_flight += len;
        self.ops.insert(Op {
            request: self.spare.take_next(),
            kind,
            len,
            iov,
        })
    }

    /// After a blocking receive's wait failed: cancels the receive, and if UCX still holds
    /// its request memory (a message already matched), leaves that memory to UCX for good
    /// rather than reuse what it may yet write.
    fn abandon_blocking(&mut self, request: *mut c_void) {
        // SAFETY: `request` is a live receive of this worker, in `self.blocking`; cancelling
        // an unmatched receive completes it at once, through its callback.
        unsafe { ffi::ucp_request_cancel(self.worker.handle(), request) };
        // SAFETY: as above.
        if unsafe { peek(request) }.is_some() {
            // SAFETY: finished, so its state is read and made fresh for the next receive.
            unsafe { request::take(request) };
        } else {
            let fresh = self.spare.fresh();
            std::mem::forget(std::mem::replace(&mut self.blocking, fresh));
        }
    }

    /// Adds to `queues` the messages UCX holds unreceived near the receives that wait. UCX
    /// shows its unexpected queue only through probes, each the first message it matches
    /// (`tag::near_misses`), so these are the oldest user message and, for each receive, the
    /// first with another tag from its source, with its tag from another source, and with
    /// both on another communicator: the near misses a report explains a wait with, not the
    /// whole queue.
    fn unreceived_near(&self, queues: &mut Queues) {
        let mut seen: Vec<u64> = Vec::new();
        let receives: Vec<Selectors> = queues.claim.iter().chain(&queues.posted).copied().collect();
        for receive in receives {
            let Ok(probes) = tag::near_misses(receive.context, receive.source, receive.tag) else {
                continue;
            };
            for (wanted, mask) in probes {
                let Some((_, info)) = self.worker.probe(wanted, mask, false) else {
                    continue;
                };
                if seen.contains(&info.sender_tag) {
                    continue;
                }
                seen.push(info.sender_tag);
                let found = tag::unpack(info.sender_tag);
                let message = Selectors {
                    context: found.context,
                    source: SourceSel::Rank(found.source),
                    tag: TagSel::Tag(found.tag),
                    bytes: info.length as usize,
                };
                Queues::add(&mut queues.unexpected, &mut queues.left_out, message);
            }
        }
    }

    /// Fails, naming the failure that stopped this PML, if one did.
    #[inline]
    pub(super) fn check_running(&self) -> Result<(), PmlError> {
        match &self.failure {
            None => Ok(()),
            Some(failure) => Err(PmlError::Stopped(Box::new(failure.clone()))),
        }
    }

    /// What this PML counts: windows' puts, gets and atomics, and wakes sent (the native
    /// engine's other counts are of its own transports, which UCX keeps to itself).
    pub fn counters(&self) -> Counters {
        let mut counters = self.in_place_counts;
        self.rma.count(&mut counters);
        counters.wake_messages = self.wakes_sent;
        counters
    }

    /// Wakes `peer`'s sleep on its worker (`Worker::wake`), for a rank that published
    /// outside the PML what `peer` waits for (a flag of mpirt's collective area); nothing
    /// once this PML stopped.
    pub fn wake_peer(&mut self, peer: Rank) {
        if let (None, Some(endpoint)) = (&self.failure, self.endpoints.get(peer as usize)) {
            self.worker.wake(endpoint);
            self.wakes_sent += 1;
        }
    }

    /// Stops this PML on a broken peer: the requests whose waits fail stay in UCX, and their
    /// owners take their buffers back, so UCX must not write those buffers any more. UCX
    /// moves data (on shared memory and TCP) and matches messages only when the worker is
    /// progressed, which a stopped PML no longer does, not even to close its endpoints.
    /// Returns `failure`; every later call fails naming the first one (`PmlError::Stopped`).
    #[cold]
    fn stop(&mut self, failure: PmlError) -> PmlError {
        self.failure.get_or_insert_with(|| failure.clone());
        failure
    }
}

impl Pml for UcxPml {
    type Message = UcxMessage;

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    /// What this rank runs on, for `--verbose`: UCX's version and the transports it chose.
    fn description(&self) -> &str {
        &self.description
    }

    /// Whether this rank's waits spin before they sleep (not when spinning was turned off).
    fn waits_spin(&self) -> bool {
        !self.spin.is_zero()
    }

    /// Starts a send of `len` bytes at `buf` to world rank `peer` in the communicator
    /// `context`, where this rank is `source`. A send UCX finished at once (a small eager
    /// message) returns [`Handle::SENT`]. Synchronous sends complete once the receiver
    /// matched the message (`ucp_tag_send_sync_nbx`).
    ///
    /// # Safety
    /// `buf` must be valid for reads of `len` bytes and must not be written or freed until the
    /// request completes (`test` or `wait` reported it).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    unsafe fn post_send(
        &mut self,
        context: ContextId,
        source: Rank,
        peer: Rank,
        tag: Tag,
        mode: SendMode,
        buf: *const u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        let envelope = Envelope {
            context,
            source,
            tag,
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { self.start_send(envelope, peer, mode, Data::bytes(buf, len), 0) }
    }

    /// `post_send` for a send its caller waits for at once (`MPI_Send`), as Open MPI's pml
    /// ucx sends it: UCX is told that only local completion is awaited
    /// (`UCP_OP_ATTR_FLAG_FAST_CMPL`), and then keeps messages eager up to its larger
    /// threshold for such sends (`tag_send_nbr` in `ucx_info -e`: 256 KiB on shared memory
    /// and on TCP, where other sends go rendezvous from 8 KiB). A 16 KiB ping-pong takes half
    /// the time on shared memory, and a third on TCP, whose rendezvous costs some 30 us.
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
        let envelope = Envelope {
            context,
            source,
            tag,
        };
        let fast = match mode {
            SendMode::Standard => ffi::UCP_OP_ATTR_FLAG_FAST_CMPL,
            _ => 0,
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { self.start_send(envelope, peer, mode, Data::bytes(buf, len), fast) }
    }

    /// Starts a send of the non-contiguous buffer `blocks` describes in place, as an iov of
    /// its runs or UCX's generic datatype (see `datatype`): `None` for an empty one, which
    /// the caller sends as bytes, and one better staged (`in_place`), which it packs.
    ///
    /// # Safety
    /// As for `Pml::post_send_blocks`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_send_blocks(
        &mut self,
        context: ContextId,
        source: Rank,
        peer: Rank,
        tag: Tag,
        mode: SendMode,
        blocks: &Blocks,
    ) -> Result<Option<Handle>, PmlError> {
        if blocks.is_empty() {
            return Ok(None);
        }
        let envelope = Envelope {
            context,
            source,
            tag,
        };
        let Some(how) = self.in_place(blocks, Some(peer), blocks.len(), true) else {
            return Ok(None);
        };
        // SAFETY: `post_send_blocks`' caller made `blocks` here and keeps it, its list and
        // its blocks alive and unchanged until the send completes.
        let data = unsafe { self.data_of(blocks, how) };
        // SAFETY: as above.
        let handle = unsafe { self.start_send(envelope, peer, mode, data, 0) }?;
        self.count_in_place(how, true);
        Ok(Some(handle))
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
    ) -> Result<Handle, PmlError> {
        let data = Data::bytes(buf, len);
        // SAFETY: forwarded from this function's contract; `data` goes with the request.
        unsafe { self.start_tag_recv(context, source, tag, &data) }?;
        Ok(self.track_recv(data, Some(Selectors::receive(context, source, tag, len))))
    }

    /// Starts a receive into the non-contiguous buffer `blocks` describes, in place, as an
    /// iov of its runs or UCX's generic datatype (see `datatype`): `None` for an empty one
    /// and one better staged (`in_place`, by the blocks' length and `from`'s transport). A
    /// message longer than the blocks hold fails as truncated, against their packed length.
    ///
    /// # Safety
    /// As for `Pml::post_recv_blocks`.
    unsafe fn post_recv_blocks(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        blocks: &Blocks,
        from: Option<Rank>,
    ) -> Result<Option<Handle>, PmlError> {
        if blocks.is_empty() {
            return Ok(None);
        }
        let Some(how) = self.in_place(blocks, from, blocks.len(), false) else {
            return Ok(None);
        };
        // SAFETY: `post_recv_blocks`' caller made `blocks` here and keeps it, its list and
        // its blocks (lent for writes) alive until the receive completes.
        let data = unsafe { self.data_of(blocks, how) };
        // SAFETY: as above; `data` goes with the request.
        unsafe { self.start_tag_recv(context, source, tag, &data) }?;
        self.count_in_place(how, false);
        let posted = Selectors::receive(context, source, tag, data.len);
        Ok(Some(self.track_recv(data, Some(posted))))
    }

    /// Starts a receive that finishes at once when its message was waiting: then no
    /// request is left to wait on or collect (`Started::Done`).
    ///
    /// # Safety
    /// As for `post_recv`.
    #[inline]
    unsafe fn start_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Started<RecvBuf>, PmlError> {
        let data = Data::bytes(buf, len);
        // SAFETY: forwarded from this function's contract; `data` goes with the request.
        unsafe { self.start_tag_recv(context, source, tag, &data) }?;
        let request = self.spare.next();
        // SAFETY: the spare memory the receive runs in, whose state the callback writes.
        if unsafe { peek(request) }.is_none() {
            let posted = Selectors::receive(context, source, tag, len);
            return Ok(Started::Posted(self.track_recv(data, Some(posted))));
        }
        // Finished inside the call: UCX is done with the memory, which stays spare.
        // SAFETY: finished (peeked above).
        let (outcome, info) = unsafe { request::take(request) };
        Ok(Started::Done {
            buf: RecvBuf::new(buf, len),
            result: received(outcome, info, len).map_err(Box::new),
        })
    }

    /// Receives into `len` bytes at `buf` and returns once the message is there: a blocking
    /// receive in request memory this PML owns (no pool to take from and give back, no
    /// handle), as Open MPI's pml ucx does it.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes for the duration of the call.
    unsafe fn recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Status, PmlError> {
        self.check_running()?;
        let (wanted, mask) = tag::selector(context, source, tag).map_err(out_of_range)?;
        let request = self.blocking.address();
        let param = request::owned_recv_param(request);
        // SAFETY: the worker is live; `buf` is writable for `len` bytes until this returns,
        // and the receive is finished (or cancelled and abandoned) before it does; the
        // request memory is `self.blocking`, which no other operation uses meanwhile.
        let started = unsafe {
            ffi::ucp_tag_recv_nbx(
                self.worker.handle(),
                buf.cast(),
                len as ffi::size_t,
                wanted,
                mask,
                &param,
            )
        };
        started_recv("ucp_tag_recv_nbx", started)?;
        // Its bytes count as in flight while it waits (for the spin budget), as a request's.
        self.bytes_in_flight += len;
        self.blocking_receive = Some(Selectors::receive(context, source, tag, len));
        // SAFETY: the receive runs in `self.blocking`, whose state the callback writes.
        let waited = self.wait_until(|_| Ok(unsafe { peek(request) }.is_some()));
        self.blocking_receive = None;
        self.bytes_in_flight -= len;
        if let Err(e) = waited {
            self.abandon_blocking(request);
            return Err(e);
        }
        // SAFETY: finished (waited for above); its state is read and made fresh again.
        let (outcome, info) = unsafe { request::take(request) };
        received(outcome, info, len)
    }

    /// Receives the message a matched probe took.
    ///
    /// # Safety
    /// As for `post_recv`.
    unsafe fn post_matched_recv(
        &mut self,
        message: UcxMessage,
        buf: *mut u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        let data = Data::bytes(buf, len);
        // SAFETY: forwarded from this function's contract; `data` goes with the request.
        unsafe { self.start_matched_recv(message, &data) }?;
        Ok(self.track_recv(data, None))
    }

    /// Receives the message a matched probe took into the non-contiguous buffer `blocks`
    /// describes, in place (as `post_recv_blocks`); the message back, having posted
    /// nothing, for an empty one and one better staged (`in_place`, by the message's
    /// length and its sender's transport).
    ///
    /// # Safety
    /// As for `Pml::post_matched_recv_blocks`.
    unsafe fn post_matched_recv_blocks(
        &mut self,
        message: UcxMessage,
        blocks: &Blocks,
        from: Option<Rank>,
    ) -> Result<Result<Handle, UcxMessage>, PmlError> {
        if blocks.is_empty() {
            return Ok(Err(message));
        }
        let Some(how) = self.in_place(blocks, from, message.len, false) else {
            return Ok(Err(message));
        };
        // SAFETY: as in `post_recv_blocks`.
        let data = unsafe { self.data_of(blocks, how) };
        // SAFETY: as above; `data` goes with the request.
        unsafe { self.start_matched_recv(message, &data) }?;
        self.count_in_place(how, false);
        Ok(Ok(self.track_recv(data, None)))
    }

    /// Collects the request if it finished; the handle is spent once this returns `Some`
    /// (or an error).
    fn test(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        if let Some(done) = self.collect(h)? {
            return Ok(Some(done));
        }
        self.progress()?;
        self.collect(h)
    }

    /// Takes the request's outcome if it finished; makes no progress.
    fn collect(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        if h == Handle::SENT {
            return Ok(Some(Done::Sent));
        }
        // SAFETY: the memory of requests in `ops` lives as long as they are there.
        let finished = |op: &Op| unsafe { peek(op.request.address()) }.is_some();
        let Some(op) = self
            .ops
            .remove_if(h, finished)
            .map_err(|_| PmlError::StaleRequest(h))?
        else {
            return Ok(None);
        };
        // SAFETY: finished (checked above), so UCX no longer writes the state.
        let (status, info) = unsafe { request::take(op.request.address()) };
        self.spare.give_back(op.request);
        self.bytes_in_flight -= op.len;
        match op.kind {
            Kind::Send { peer, .. } => match status {
                ffi::UCS_OK => Ok(Some(Done::Sent)),
                other => Err(self.stop(PmlError::transport(peer, status::describe(other)))),
            },
            Kind::Recv { buffer_len, .. } => {
                received(status, info, buffer_len).map(|s| Some(Done::Received(s)))
            }
        }
    }

    /// Whether the request finished, without collecting it.
    fn is_complete(&mut self, h: Handle) -> Result<bool, PmlError> {
        if h == Handle::SENT {
            return Ok(true);
        }
        let op = self.ops.get(h).map_err(|_| PmlError::StaleRequest(h))?;
        // SAFETY: the memory of requests in `ops` lives as long as they are there.
        Ok(unsafe { peek(op.request.address()) }.is_some())
    }

    fn wait(&mut self, h: Handle) -> Result<Done, PmlError> {
        if h != Handle::SENT {
            let request = self
                .ops
                .get(h)
                .map_err(|_| PmlError::StaleRequest(h))?
                .request
                .address();
            // The request is found once, not on every round: while this waits only UCX's
            // progress runs, which writes its state but neither moves nor frees it.
            // SAFETY: the memory of requests in `ops` lives until they are collected, which
            // is after this wait.
            self.wait_on(Awaited::Request(h), |_| {
                Ok(unsafe { peek(request) }.is_some())
            })?;
        }
        Ok(self
            .collect(h)?
            .expect("a request that was waited for has finished"))
    }

    /// Waits until any of `handles` finished; returns its index (not yet collected).
    fn wait_any(&mut self, handles: &[Handle]) -> Result<usize, PmlError> {
        self.wait_first(handles)
    }

    /// Looks for a matching message without taking it.
    fn iprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<Status>, PmlError> {
        let (wanted, mask) = tag::selector(context, source, tag).map_err(out_of_range)?;
        self.progress()?;
        Ok(self
            .worker
            .probe(wanted, mask, false)
            .map(|(_, info)| probed(info)))
    }

    fn probe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Status, PmlError> {
        let (wanted, mask) = tag::selector(context, source, tag).map_err(out_of_range)?;
        self.wait_for(Awaited::State, |p| {
            Ok(p.worker
                .probe(wanted, mask, false)
                .map(|(_, info)| probed(info)))
        })
    }

    /// Takes a matching message, if there is one, for `post_matched_recv`.
    fn improbe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<(UcxMessage, Status)>, PmlError> {
        let (wanted, mask) = tag::selector(context, source, tag).map_err(out_of_range)?;
        self.progress()?;
        Ok(self
            .worker
            .probe(wanted, mask, true)
            .map(|(message, info)| (UcxMessage::new(message, info), probed(info))))
    }

    fn mprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<(UcxMessage, Status), PmlError> {
        let (wanted, mask) = tag::selector(context, source, tag).map_err(out_of_range)?;
        self.wait_for(Awaited::State, |p| {
            Ok(p.worker
                .probe(wanted, mask, true)
                .map(|(message, info)| (UcxMessage::new(message, info), probed(info))))
        })
    }

    /// Cancels a receive that has not matched yet; returns whether it was cancelled (the
    /// request then completes with `PmlError::Cancelled`). Sends are not cancelled.
    fn cancel(&mut self, h: Handle) -> Result<bool, PmlError> {
        if h == Handle::SENT {
            return Ok(false);
        }
        let op = self.ops.get(h).map_err(|_| PmlError::StaleRequest(h))?;
        if matches!(op.kind, Kind::Send { .. }) {
            return Ok(false);
        }
        let request = op.request.address();
        // SAFETY: the memory of requests in `ops` lives as long as they are there.
        if unsafe { peek(request) }.is_none() {
            // SAFETY: a receive of this worker in flight. UCX completes an unmatched
            // receive at once with UCS_ERR_CANCELED and leaves a matched one alone.
            unsafe { ffi::ucp_request_cancel(self.worker.handle(), request) };
        }
        // SAFETY: as above; cancelling completes a request but does not free its memory.
        Ok(unsafe { peek(request) } == Some(ffi::UCS_ERR_CANCELED))
    }

    /// One round of progress; returns whether anything moved.
    #[inline]
    fn progress(&mut self) -> Result<bool, PmlError> {
        self.check_running()?;
        Ok(self.worker.progress())
    }

    /// Waits until everything this rank sent has left (UCX's worker flush).
    fn flush_all(&mut self) -> Result<(), PmlError> {
        self.check_running()?;
        let request = match self.worker.start_flush()? {
            status::Started::Done => return Ok(()),
            status::Started::Pending(request) => request,
        };
        // SAFETY: the flush request stays live until freed below, after it finished.
        self.wait_until(|_| Ok(unsafe { peek(request) }.is_some()))?;
        // SAFETY: finished (waited for above), freed once.
        let (status, _) = unsafe { request::take_and_free(request) };
        status::check("ucp_worker_flush_nbx", status)
    }
}

impl Waiting for UcxPml {
    #[inline]
    fn poll(&mut self) -> Result<bool, PmlError> {
        Ok(self.worker.progress())
    }

    /// The configured spin, or longer while many bytes are in flight (see
    /// `waiting::spin_budget`).
    fn spin_budget(&self) -> Duration {
        spin_budget(self.spin, self.bytes_in_flight)
    }

    fn configured_spin(&self) -> Duration {
        self.spin
    }

    /// Once a peer's connection broke, a wait that cannot finish fails naming that peer
    /// rather than hang on it.
    fn check_peers(&mut self, _idle: Duration) -> Result<(), PmlError> {
        match self.failures.first() {
            Some((peer, status)) => Err(self.stop(peer_failed(peer, status))),
            None => Ok(()),
        }
    }

    /// Sleeps on the worker's event fd, so that oversubscribed ranks give their cores away.
    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        self.worker.sleep(timeout).map_err(|e| self.stop(e))
    }

    /// The receives and sends in flight that UCX has not finished, from this PML's own
    /// table of them (of `awaited`'s requests too), and what UCX's probes find unreceived
    /// near the receives that wait (`unreceived_near`).
    fn queues(&self, awaited: Awaited<'_>) -> Queues {
        let mut queues = Queues {
            claim: self.blocking_receive,
            ..Queues::default()
        };
        queues.note_awaited(awaited, |h| {
            self.ops.get(h).ok().and_then(waiting_for_a_peer)
        });
        for entry in self.ops.iter().filter_map(waiting_for_a_peer) {
            queues.add_request(entry);
        }
        self.unreceived_near(&mut queues);
        queues
    }

    #[inline]
    fn check_running(&self) -> Result<(), PmlError> {
        UcxPml::check_running(self)
    }
}

/// `op` as the queues list it, if UCX has not finished it: a posted receive (not a matched
/// probe's, whose data is on the way), or a send.
fn waiting_for_a_peer(op: &Op) -> Option<AwaitedRequest> {
    // SAFETY: the memory of requests in `ops` lives as long as they are there.
    if unsafe { peek(op.request.address()) }.is_some() {
        return None; // finished, not yet collected
    }
    match op.kind {
        Kind::Recv { posted, .. } => posted.map(AwaitedRequest::Receive),
        Kind::Send {
            peer,
            context,
            tag,
            mode,
        } => Some(AwaitedRequest::Send(QueuedSend {
            context,
            peer,
            tag,
            bytes: op.len,
            waits_for: match mode {
                SendMode::Synchronous => "a matching receive (synchronous send)",
                SendMode::Standard => {
                    "UCX to finish it (a large message waits for a matching receive)"
                }
            },
        })),
    }
}

impl Drop for UcxPml {
    fn drop(&mut self) {
        // A stopped PML closes every endpoint at once, without progress, which could still
        // deliver data into the buffers of receives whose waits failed.
        let stopped = self.failure.is_some();
        // One-sided operations in flight still read their keys and windows: they finish
        // (or are given back to UCX) before the endpoints close, and the keys and windows
        // go only after.
        self.rma.settle(&self.worker, !stopped);
        let failures = &self.failures;
        self.worker.close(
            !stopped,
            self.endpoints
                .drain(..)
                .enumerate()
                .map(|(peer, ep)| (ep, stopped || failures.of(peer as Rank).is_some())),
        );
        // SAFETY: the worker's context, live until the worker drops after this; the
        // endpoints the keys were unpacked on are closed.
        unsafe { self.rma.release(self.worker.context()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_offload_is_reported_only_for_mlx5_rc_and_dc() {
        let tcp = vec!["tcp/eth0".to_string()];
        assert!(tag_offload(&tcp, false).starts_with("no offload-capable interface"));
        assert!(tag_offload(&tcp, true).contains("matching stays in software"));
        let rc = vec!["tcp/eth0".to_string(), "rc_mlx5/mlx5_0:1".to_string()];
        assert_eq!(
            tag_offload(&rc, true),
            "hardware tag matching on rc_mlx5/mlx5_0:1"
        );
        assert!(tag_offload(&rc, false).contains("rsrun --hw-tag-matching"));
    }
}
