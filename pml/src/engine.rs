//! Progress: drives the transports, feeds arriving frames to the protocol core, carries out
//! its actions, and waits without burning a core when nothing moves.
//!
//! One engine per process. It owns the user buffers of in-flight requests only as raw
//! pointers: the layer above (mpirt) guarantees, through blocking calls and request scopes,
//! that a buffer outlives its request — the contract of `post_send` and `post_recv`.

mod api;
mod bridge;
mod nap;
mod one_sided;

use std::slice;
use std::time::Duration;

use crate::blocks::{Blocks, PackedRange};
use crate::config::EngineConfig;
use crate::envelope::{ContextId, Rank, SourceSel, Status, Tag, TagSel};
use crate::error::PmlError;
use crate::pml_api::{Counters, Done, EngineError, RecvBuf, Wireup};
use crate::protocol::{
    layout, Action, Completion, Core, CoreConfig, DirectSend, DirectWrite, MessageHandle, Payload,
    SendArgs, SendBytes,
};
use crate::requests::Handle;
use crate::transport::{
    AnyTransport, Job, Opening, Peer, Reading, Registration, Sent, Transport, WakeSet,
};
use crate::wire::RemoteKey;

pub use crate::protocol::SendMode;
pub use bridge::{Bridge, BridgePeer};

/// A send buffer lent to the engine until the send completes.
pub struct SendBuf {
    ptr: *const u8,
    len: usize,
    /// The description of a non-contiguous buffer (`post_send_blocks`), null for a
    /// contiguous one: then `ptr` is not the bytes, which frames gather from the blocks and
    /// a receiver may read in place.
    blocks: *const Blocks,
    /// What the transport at this index into the engine's did to let the peer read the
    /// buffer, undone when the send completes.
    registration: Option<(usize, Registration)>,
}

impl SendBuf {
    /// A send of the non-contiguous buffer `blocks` describes (`post_send_blocks`): no
    /// contiguous bytes of its own.
    fn of_blocks(blocks: &Blocks) -> SendBuf {
        SendBuf {
            ptr: std::ptr::null(),
            len: blocks.len(),
            blocks,
            registration: None,
        }
    }
}

impl SendBytes for SendBuf {
    #[inline]
    fn message_len(&self) -> usize {
        self.len
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        if !self.blocks.is_null() || self.len == 0 {
            // In blocks (`post_send_blocks`), or nothing, where `ptr` may be null.
            return &[];
        }
        // SAFETY: `post_send`'s caller guarantees `ptr` is valid for `len` bytes and unchanged
        // until the request completes, and the engine drops this `SendBuf` at completion.
        unsafe { slice::from_raw_parts(self.ptr, self.len) }
    }

    #[inline]
    fn blocks(&self) -> Option<&Blocks> {
        // SAFETY: `post_send_blocks`' caller keeps the description valid and unchanged until
        // the request completes, and the engine drops this `SendBuf` at completion.
        unsafe { self.blocks.as_ref() }
    }
}

/// How the engine reaches a rank: the transport that carries it, and that transport's own
/// index of it (see `Transport::peer_index`).
#[derive(Clone, Copy)]
struct Route {
    transport: u8,
    /// The transport completes a send when it takes the frame (see
    /// `Caps::sends_complete_on_return`), so small sends go the direct path. Kept in the
    /// route, where it costs no load of its own (it fills padding), and where it follows
    /// its transport when a bridge moves the transports along: a mask of transports had a
    /// bit for only so many of them.
    direct_send: bool,
    index: u32,
}

/// No transport carries the rank (see `Engine::routes`).
const NO_ROUTE: Route = Route {
    transport: u8::MAX,
    direct_send: false,
    index: u32::MAX,
};

pub struct Engine {
    rank: Rank,
    size: u32,
    core: Core<SendBuf, RecvBuf>,
    /// Polled in this order: the first `peer_fed` every round; the rest, which no peer
    /// feeds (`AnyTransport::wakes`), only after this rank handed them work (`own_frames`),
    /// so that the round a message costs skips them.
    transports: Vec<AnyTransport>,
    peer_fed: usize,
    /// Whether a transport past `peer_fed` may have something for the next round.
    own_frames: bool,
    /// How each rank is reached, or `NO_ROUTE`.
    routes: Vec<Route>,
    /// The one wait on every transport's wake fd, when more than one has any.
    wake: Option<WakeSet>,
    /// Host of each rank, for errors that name where a failed peer runs, and for the
    /// collectives that group ranks by host (`Pml::host_of`).
    hosts: Vec<String>,
    /// What errors call each rank where `rank N` would not say which process it is: empty
    /// for the world's ranks, a bridge's peers as their side named them (`BridgePeer::name`).
    names: Vec<String>,
    /// Peers whose transport refused a frame; retried first on the next progress.
    blocked: Vec<Rank>,
    counters: Counters,
    description: String,
    /// Busy-poll budget of a wait: none when ranks outnumber the cores they may use.
    spin: Duration,
    /// How long a wait that does not spin yields between polls before it sleeps: only when
    /// ranks outnumber the cores they may use (`config::YIELD_FOR`).
    yield_for: Duration,
    /// The failure that stopped the engine (see `stop`); every later call that would move
    /// data returns it.
    failure: Option<PmlError>,
    /// The settings it opened with, for transports opened later (`bridge.rs`).
    config: EngineConfig,
    /// Peers' window keys this rank unpacked (`OneSided::remote_key`), by the key it hands
    /// out: the transport's key and where its addressing starts (`one_sided.rs`).
    window_keys: slab::Slab<one_sided::PeerWindow>,
    /// How a thread sleeping apart from the engine is woken (`nap.rs`), while one is.
    napping: Option<nap::Napping>,
    /// The eventfd that wakes a sleep apart from the engine on a wake fd, once one was.
    nap_fd: Option<std::os::fd::OwnedFd>,
}

impl Engine {
    /// Wires up with every peer: learns the ranks' hosts, opens the transports they call for
    /// (each publishes what its peers need), connects them, and gives the protocol core each
    /// peer's limits. Two fences: after the transports published, and after they connected.
    pub fn new(wireup: &mut dyn Wireup, config: EngineConfig) -> Result<Engine, EngineError> {
        let mut job = Job::new(wireup, config)?;
        let opening = Opening::open(&mut job)?;
        job.fence()?;
        let connected = opening.connect(&mut job)?;
        job.fence()?;
        let (rank, size) = (job.rank, job.size);
        let mut core = Core::new(
            size as usize,
            CoreConfig {
                unexpected_budget: job.config.unexpected_budget,
            },
        );
        let mut routes = vec![NO_ROUTE; size as usize];
        let mut transports = Vec::new();
        let mut description = format!("rank {rank} of {size} on {}", job.host());
        for (index, (mut transport, carried)) in connected.transports.into_iter().enumerate() {
            transport.finish(&mut job)?;
            let caps = transport.caps();
            for &r in &carried {
                core.set_peer(r, caps.peer_caps());
                routes[r as usize] = Route {
                    transport: index as u8,
                    direct_send: caps.sends_complete_on_return,
                    index: transport.peer_index(r),
                };
            }
            let clause = transport.describe(carried.len());
            if !clause.is_empty() {
                description += &format!("; {clause}");
            }
            transports.push(transport);
        }
        // `Opening::connect` puts the transports that peers feed first; the others get work
        // only from `flush` and `perform`, which mark it (none takes direct sends).
        let peer_fed = transports.iter().take_while(|t| t.wakes()).count();
        debug_assert!(transports[peer_fed..].iter().all(|t| !t.wakes()));
        debug_assert!(routes
            .iter()
            .all(|r| !r.direct_send || (r.transport as usize) < peer_fed));
        for note in connected.notes {
            description += &format!("; {note}");
        }
        let (spin, yield_for) = job.wait_budgets();
        if !yield_for.is_zero() {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            description += &format!(
                "; {} ranks on {cores} cores: waits yield for {} ms, then sleep",
                job.ranks_on_host(),
                yield_for.as_millis()
            );
        }
        if job.config.verbose {
            // One write of the whole line (eprintln! writes each piece of its format on its
            // own), so that a launcher passing output on as it comes (Hydra, mpirun) does not
            // put another rank's words inside it.
            let line = format!("mpirt: {description}\n");
            eprint!("{line}");
        }
        Ok(Engine {
            rank,
            size,
            core,
            wake: WakeSet::over(&mut transports)?,
            transports,
            peer_fed,
            own_frames: false,
            routes,
            names: vec![String::new(); job.hosts.len()],
            hosts: job.hosts,
            blocked: Vec::new(),
            counters: Counters::default(),
            description,
            spin,
            yield_for,
            failure: None,
            config: job.config,
            window_keys: slab::Slab::new(),
            napping: None,
            nap_fd: None,
        })
    }

    pub fn counters(&self) -> Counters {
        let mut counters = self.counters;
        for t in &self.transports {
            t.count(&mut counters);
        }
        counters.wake_set_sleeps += self.wake.as_ref().map_or(0, WakeSet::sleeps);
        counters.wake_messages_received = self.core.wakes_received();
        counters
    }

    /// Index into `transports` of the one that carries `peer`, `peer` as it knows it, and
    /// whether it takes direct sends (`Route::direct_send`).
    #[inline]
    fn route(&self, peer: Rank) -> Result<(usize, Peer, bool), PmlError> {
        match self.routes.get(peer as usize) {
            Some(route) if route.transport != NO_ROUTE.transport => Ok((
                route.transport as usize,
                Peer {
                    rank: peer,
                    index: route.index,
                },
                route.direct_send,
            )),
            _ => Err(PmlError::UnknownPeer(peer)),
        }
    }

    /// Starts a send of `len` bytes at `buf` to world rank `peer` in the communicator
    /// `context`; `source` is this rank's rank there. A small standard send that a transport
    /// which completes sends on return took at once returns [`Handle::SENT`], already
    /// complete.
    ///
    /// # Safety
    /// `buf` must be valid for reads of `len` bytes and must not be written or freed until the
    /// request completes (`test` or `wait` reported it).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn post_send(
        &mut self,
        context: ContextId,
        source: Rank,
        peer: Rank,
        tag: Tag,
        mode: SendMode,
        buf: *const u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        let (route, to, direct_send) = self.route(peer)?;
        self.check_running()?;
        // SAFETY: `routes` holds only indices into `transports` (both set in `new`, and
        // `join_bridge` moves the routes with the transports it shifts); unchecked, as every
        // send pays for this.
        let transport = unsafe { self.transports.get_unchecked_mut(route) };
        let core = &mut self.core;
        let exposure = transport.expose(peer, buf, len, || core.sends_eagerly(peer, len))?;
        if mode == SendMode::Standard && direct_send {
            let send = DirectSend {
                context,
                source,
                peer,
                tag,
                len,
                eager_limit: exposure.eager_limit,
            };
            // SAFETY: this function's caller keeps `buf` valid for `len` bytes.
            let payload = unsafe { slice::from_raw_parts(buf, len) };
            let sent = core.send_direct(
                send,
                DirectTo {
                    transport,
                    to,
                    payload,
                },
            );
            // As `flush` names a failed peer's host, so that OFI's refusal of a send to a
            // peer that failed earlier reads alike on either path.
            if sent.map_err(|e| self.stop(e.on_host(&self.hosts, &self.names)))? {
                self.counters.frames_sent += 1;
                return Ok(Handle::SENT);
            }
        }
        let args = SendArgs {
            context,
            source,
            peer,
            tag,
            mode,
            buf: SendBuf {
                ptr: buf,
                len,
                blocks: std::ptr::null(),
                registration: exposure.registration.map(|r| (route, r)),
            },
            remote: exposure.key,
            eager_limit: exposure.eager_limit,
        };
        let h = match self.core.post_send(args) {
            Ok(h) => h,
            Err(e) => {
                if let Some(registration) = exposure.registration {
                    self.transports[route].release(registration);
                }
                return Err(e);
            }
        };
        // The frame goes out now: the latency of the next progress call is not its to pay.
        self.flush(peer).map_err(|e| self.stop(e))?;
        Ok(h)
    }

    /// Starts a send of the non-contiguous buffer `blocks` describes without a packed copy:
    /// an eager one packed by the transport straight into its frame, where a standard send
    /// completes as the frame is taken (`Transport::try_send_blocks`, [`Handle::SENT`]); a
    /// rendezvous read in place by the receiver, over a transport that reads a peer's memory
    /// in pieces (`Transport::expose_blocks`; its offer carries the layout where the
    /// transport says so, `protocol::layout`), or streamed to a receiver that asks for it
    /// with GET, each DATA frame gathered from the blocks; any send, over a transport whose
    /// every frame gathers them (`Transport::streams_blocks`). `None`, having sent nothing,
    /// elsewhere: the caller then packs the bytes and sends them with `post_send`.
    ///
    /// # Safety
    /// `blocks`, and the blocks of memory and block list it describes, must stay valid and
    /// unchanged until the request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn post_send_blocks(
        &mut self,
        context: ContextId,
        source: Rank,
        peer: Rank,
        tag: Tag,
        mode: SendMode,
        blocks: &Blocks,
    ) -> Result<Option<Handle>, PmlError> {
        let (route, to, direct_send) = self.route(peer)?;
        self.check_running()?;
        let len = blocks.len();
        if len == 0 {
            return Ok(None);
        }
        let eager = self.core.sends_eagerly(peer, len);
        let streams = self.transports[route].streams_blocks();
        if eager && !streams {
            // Packed once, by the transport, straight into the frame: where a send completes
            // as its frame is taken. Elsewhere the caller packs and posts the copy.
            if mode != SendMode::Standard || !direct_send {
                return Ok(None);
            }
            let send = DirectSend {
                context,
                source,
                peer,
                tag,
                len,
                eager_limit: None,
            };
            let transport = &mut self.transports[route];
            let sent = self.core.send_direct(
                send,
                DirectBlocks {
                    transport,
                    to,
                    blocks,
                },
            );
            if !sent.map_err(|e| self.stop(e.on_host(&self.hosts, &self.names)))? {
                return Ok(None);
            }
            self.counters.frames_sent += 1;
            return Ok(Some(Handle::SENT));
        }
        let mut args = SendArgs {
            context,
            source,
            peer,
            tag,
            mode,
            buf: SendBuf::of_blocks(blocks),
            remote: RemoteKey::default(),
            eager_limit: None,
        };
        // Every frame gathers the blocks where the transport streams them, eager or after a
        // GET: nothing to expose, and the peer's eager limit. Elsewhere rendezvous whatever
        // the size: read in place, or streamed after a GET.
        let offer = if streams {
            None
        } else {
            // SAFETY: this function's contract: the description, its list and its elements
            // stay alive and unchanged until the send completes.
            let Some(offer) = (unsafe { self.transports[route].expose_blocks(peer, blocks) })
            else {
                return Ok(None);
            };
            Some(offer)
        };
        let posted = match offer {
            None => self.core.post_send(args),
            Some(offer) => {
                args.remote = offer.key;
                args.eager_limit = Some(0);
                args.buf.registration = offer.registration.map(|r| (route, r));
                if offer.layout {
                    // SAFETY: as above, the list alive.
                    let list = unsafe { blocks.local_list() };
                    let layout = layout::encode(blocks.extent(), list);
                    self.core.post_send_offering(args, layout)
                } else {
                    self.core.post_send(args)
                }
            }
        };
        let h = match posted {
            Ok(h) => h,
            Err(e) => {
                if let Some(registration) = offer.and_then(|o| o.registration) {
                    self.transports[route].release(registration);
                }
                return Err(e);
            }
        };
        self.flush(peer).map_err(|e| self.stop(e))?;
        Ok(Some(h))
    }

    /// Looks for a message the selectors accept without taking it, making no progress
    /// (`iprobe` makes a round where none is there): for a caller that makes its rounds
    /// itself and must know whether each moved anything (mpirt's threads, which wake one
    /// another on a round that did).
    pub fn probe_queued(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Option<Status> {
        self.core.probe(context, source, tag)
    }

    /// Takes a message the selectors accept, for `post_matched_recv`, making no progress: as
    /// [`probe_queued`](Self::probe_queued), for `improbe`.
    pub fn matched_probe_queued(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Option<(MessageHandle, Status)> {
        self.core.matched_probe(context, source, tag)
    }

    /// Takes the request's outcome if it finished, looking it up once; makes no progress.
    #[inline]
    pub fn collect(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        if h == Handle::SENT {
            return Ok(Some(Done::Sent));
        }
        match self.core.take_completion(h)? {
            None => Ok(None),
            Some(Completion::Send { buf, result }) => {
                // A send a FIN finished gave its registration back then (`progress_round`).
                if let Some((route, registration)) = buf.registration {
                    self.transports[route].release(registration);
                }
                result.map(|()| Some(Done::Sent))
            }
            Some(Completion::Recv { result, .. }) => result.map(|s| Some(Done::Received(s))),
        }
    }

    /// Sleeps until a transport may have something for this rank (a frame for it, room where
    /// its frame was refused, a finished read) or `timeout` passed; spurious returns happen.
    /// With one transport that peers wake, that one sleeps its own way; with several, on one
    /// epoll wait over their wake fds, which any of them wakes.
    pub fn sleep_until_woken(&mut self, timeout: Duration) -> Result<(), PmlError> {
        self.check_running()?;
        let slept = match &mut self.wake {
            Some(set) => set.sleep(&mut self.transports, timeout),
            None => match self.transports.iter_mut().find(|t| t.wakes()) {
                Some(t) => t.sleep(timeout),
                None => {
                    std::thread::yield_now();
                    Ok(())
                }
            },
        };
        slept.map_err(|e| self.stop(e.on_host(&self.hosts, &self.names)))
    }

    /// Wakes `peer`'s sleep in its PML (`sleep_until_woken`), for a rank that published
    /// outside the PML what `peer` waits for (a flag of mpirt's collective area): by the
    /// wake of the transport that carries it where it has one (shared memory: the futex word
    /// or wake pipe), else by a WAKE frame, whose arrival ends a sleep on any transport (TCP,
    /// verbs, OFI: ranks of one area that shared memory does not join) and which the peer
    /// takes as nothing. A failure to send it stops the engine, as any send's would.
    pub fn wake_peer(&mut self, peer: Rank) -> Result<(), PmlError> {
        self.check_running()?;
        let (route, _, _) = self.route(peer)?;
        if self.transports[route].wake_peer(peer) {
            return Ok(());
        }
        self.core.wake(peer)?;
        self.counters.wake_messages += 1;
        self.flush(peer).map_err(|e| self.stop(e))?;
        Ok(())
    }

    /// Whether a round of progress could move anything. Cheaper than the round itself: a
    /// rank whose transports can tell without a syscall spins on this alone while nothing
    /// comes.
    #[inline]
    fn may_move(&self) -> bool {
        self.transports.iter().any(Transport::has_work)
            || !self.blocked.is_empty()
            || self.core.has_work()
    }

    /// One round of progress; returns whether anything moved.
    #[inline]
    pub fn progress(&mut self) -> Result<bool, PmlError> {
        self.check_running()?;
        self.progress_round().map_err(|e| self.stop(e))
    }

    /// A round of progress for a receive just matched, unless it finished as it matched (an
    /// eager message, here whole): a rendezvous has its read or its answer to start, while a
    /// round after a finished one polls for nothing, a system call over TCP between a
    /// window's request and its reply (strace of a put and its flush). What a finished one
    /// queued (a synchronous sender's acknowledgement, credit to return, the answer to an
    /// empty rendezvous) goes with the next round, as after a receive that finds its message
    /// here (`start_recv`, `recv`).
    #[inline]
    fn progress_unless_done(&mut self, h: Handle) -> Result<(), PmlError> {
        if !self.core.is_complete(h)? {
            self.counters.matched_receive_rounds += 1;
            self.progress()?;
        }
        Ok(())
    }

    /// Fails, naming the failure that stopped the engine, if one did.
    #[inline]
    fn check_running(&self) -> Result<(), PmlError> {
        match &self.failure {
            None => Ok(()),
            Some(failure) => Err(PmlError::Stopped(Box::new(failure.clone()))),
        }
    }

    /// Stops the engine after a failure of messaging itself (a connection broke, a peer sent
    /// a malformed frame): the requests whose waits fail now stay in the engine, and their
    /// owners take their buffers back, so nothing may move data into or out of those buffers
    /// any more. MPI, too, leaves a library that reported such an error unusable. Returns
    /// `failure`; every later call fails naming the first one (`PmlError::Stopped`).
    #[cold]
    fn stop(&mut self, failure: PmlError) -> PmlError {
        if self.failure.is_none() {
            for t in &mut self.transports {
                t.stop();
            }
            self.failure = Some(failure.clone());
        }
        failure
    }

    fn progress_round(&mut self) -> Result<bool, PmlError> {
        let mut received = 0;
        let polled = if self.own_frames {
            self.own_frames = false;
            self.transports.len()
        } else {
            self.peer_fed
        };
        for t in &mut self.transports[..polled] {
            received += t
                .poll(&mut self.core)
                .map_err(|e| e.on_host(&self.hosts, &self.names))?;
        }
        self.counters.frames_received += received as u64;
        let mut moved = received > 0;
        while let Some(buf) = self.core.next_pulled_send() {
            if let Some((route, registration)) = buf.registration.take() {
                self.transports[route].release(registration);
            }
        }
        while let Some(action) = self.core.poll_action() {
            self.perform(action)?;
            moved = true;
        }
        if !self.blocked.is_empty() {
            for peer in std::mem::take(&mut self.blocked) {
                moved |= self.flush(peer)?;
            }
        }
        while let Some(peer) = self.core.next_ready_peer() {
            moved |= self.flush(peer)?;
        }
        Ok(moved)
    }

    fn perform(&mut self, action: Action) -> Result<(), PmlError> {
        let Action::Read {
            recv,
            peer,
            remote,
            len,
            layout,
        } = action;
        let (route, _, _) = self.route(peer)?;
        let token = recv.to_wire();
        let transport = &mut self.transports[route];
        // A receive laid out in blocks is read straight into them where the transport can,
        // else into contiguous bytes (a staging buffer the core unpacks); a send whose offer
        // carried its layout, a run of it at a time.
        let in_blocks = match self.core.read_blocks(recv)? {
            // SAFETY: the description of a receive posted by `post_recv_blocks` or
            // `post_matched_recv_blocks`, whose caller keeps it, its list and its blocks
            // alive, writable and lent to the engine until the receive completes, which it
            // does not before this read finished; `len` is what the core delivers, at most
            // its bytes.
            Some(blocks) => unsafe {
                match &layout {
                    None => transport.read_into_blocks(peer, remote, &blocks, len, token),
                    Some(layout) => {
                        transport.read_layout_into_blocks(peer, remote, layout, &blocks, len, token)
                    }
                }
            },
            None => Ok(None),
        };
        let reading = match in_blocks {
            Ok(Some(reading)) => {
                self.core.read_lands_in_blocks(recv)?;
                Ok(reading)
            }
            Ok(None) => {
                let target = self.core.read_target(recv)?;
                let transport = &mut self.transports[route];
                match &layout {
                    None => transport.read(peer, remote, target, token),
                    Some(layout) => transport.read_layout(peer, remote, layout, target, token),
                }
            }
            Err(e) => Err(e),
        }
        .map_err(|e| e.on_host(&self.hosts, &self.names))?;
        if !matches!(reading, Reading::Finished(Err(_))) {
            self.counters.remote_reads += 1;
            self.counters.remote_read_bytes += len as u64;
        }
        match reading {
            Reading::InFlight => {
                self.own_frames |= route >= self.peer_fed;
                Ok(())
            }
            Reading::Finished(Ok(())) => self.core.read_done(recv),
            Reading::Finished(Err(cause)) => self.core.read_failed(recv, cause),
        }
    }

    /// Hands `peer`'s queued frames to its transport until it takes no more.
    fn flush(&mut self, peer: Rank) -> Result<bool, PmlError> {
        let mut sent_any = false;
        let (route, to, _) = self.route(peer)?;
        self.own_frames |= route >= self.peer_fed;
        while let Some(t) = self.core.next_transmit(peer) {
            let transport = &mut self.transports[route];
            let sent = match t.payload {
                Payload::Bytes(payload) => transport.try_send(to, t.header(), payload),
                Payload::Blocks { blocks, range } => {
                    // SAFETY: a send's blocks, which `post_send_blocks`' caller keeps alive
                    // and unchanged until it completes; the core's range lies within them.
                    unsafe { transport.try_send_blocks(to, t.header(), blocks, range) }.and_then(
                        |sent| {
                            sent.ok_or_else(|| {
                                PmlError::transport(
                                    peer,
                                    "a frame of a non-contiguous send over a transport that \
                                     does not gather one"
                                        .to_string(),
                                )
                            })
                        },
                    )
                }
            }
            .map_err(|e| e.on_host(&self.hosts, &self.names))?;
            if sent == Sent::Part {
                self.core.hold_front(peer);
            }
            if sent != Sent::Whole {
                if !self.blocked.contains(&peer) {
                    self.blocked.push(peer);
                }
                break;
            }
            self.core.transmitted(peer);
            self.counters.frames_sent += 1;
            sent_any = true;
        }
        Ok(sent_any)
    }
}

/// The direct path's hand-over to the transport that carries `to`.
struct DirectTo<'t> {
    transport: &'t mut AnyTransport,
    to: Peer,
    payload: &'t [u8],
}

impl DirectWrite for DirectTo<'_> {
    // Always: as a closure this stayed a call of its own on every small send, 19 of its
    // instructions spent passing arguments and saving registers (callgrind, osu_bw 8 B).
    #[inline(always)]
    fn write(self, header: &[u8]) -> Result<bool, PmlError> {
        let sent = self.transport.try_send(self.to, header, self.payload)?;
        // Only transports whose sends complete on return take this path, and they take a
        // frame whole or not at all (`Caps::sends_complete_on_return`). Part of one sent
        // cannot be told "not taken": the queued send would send it again from its start.
        debug_assert_ne!(sent, Sent::Part, "a direct send went out in part");
        Ok(sent == Sent::Whole)
    }
}

/// The direct path's hand-over of a non-contiguous buffer, packed by the transport straight
/// into the frame (`Transport::try_send_blocks`); not taken where the transport does not.
/// Made only by [`Engine::post_send_blocks`], whose caller vouches that `blocks` and what it
/// describes are alive.
struct DirectBlocks<'t> {
    transport: &'t mut AnyTransport,
    to: Peer,
    blocks: &'t Blocks,
}

impl DirectWrite for DirectBlocks<'_> {
    fn write(self, header: &[u8]) -> Result<bool, PmlError> {
        // SAFETY: `blocks` came from `post_send_blocks`, whose contract keeps the description,
        // its elements and its list alive and unchanged until the send completes.
        let sent = unsafe {
            self.transport.try_send_blocks(
                self.to,
                header,
                self.blocks,
                PackedRange {
                    start: 0,
                    len: self.blocks.len(),
                },
            )?
        };
        debug_assert_ne!(sent, Some(Sent::Part), "a direct send went out in part");
        Ok(sent == Some(Sent::Whole))
    }
}
