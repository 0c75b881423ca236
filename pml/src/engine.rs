//! Progress: drives the transports, feeds arriving frames to the protocol core, carries out
//! its actions, and waits without burning a core when nothing moves.
//!
//! One engine per process. It owns the user buffers of in-flight requests only as raw
//! pointers: the layer above (mpirt) guarantees, through blocking calls and request scopes,
//! that a buffer outlives its request — the contract of `post_send` and `post_recv`.

use std::time::{Duration, Instant};
use std::{fmt, slice};

use crate::config::EngineConfig;
use crate::envelope::{ContextId, Rank, SourceSel, Status, Tag, TagSel};
use crate::error::PmlError;
use crate::protocol::{
    Action, ClaimEnd, Completion, Core, CoreConfig, MessageHandle, SendArgs, Started,
};
use crate::requests::Handle;
use crate::transport::{
    AnyTransport, Job, Opening, Reading, Registration, Sent, Transport, WakeSet,
};
use crate::waiting::Waiting;

pub use crate::protocol::SendMode;

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
    /// The job's secret, at least 128 random bits that only the job's ranks know: a TCP
    /// connection is a peer's only once it proved to know it. The launcher's key-value
    /// space may hold it, so call this after the first fence.
    fn job_secret(&mut self) -> Result<[u8; 32], String>;
}

/// A send buffer lent to the engine until the send completes.
pub struct SendBuf {
    ptr: *const u8,
    len: usize,
    /// What the transport at this index into the engine's did to let the peer read the
    /// buffer, undone when the send completes.
    registration: Option<(usize, Registration)>,
}

impl AsRef<[u8]> for SendBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `post_send`'s caller guarantees `ptr` is valid for `len` bytes and unchanged
        // until the request completes, and the engine drops this `SendBuf` at completion.
        unsafe { slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A receive buffer lent to the engine until the receive completes.
pub struct RecvBuf {
    ptr: *mut u8,
    len: usize,
}

impl RecvBuf {
    /// The buffer a receive that another PML finished at once hands back
    /// (`Started::Done`), under the same contract as `post_recv`'s.
    #[cfg(feature = "ucx")]
    pub(crate) fn new(ptr: *mut u8, len: usize) -> RecvBuf {
        RecvBuf { ptr, len }
    }
}

impl AsMut<[u8]> for RecvBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `post_recv`'s caller guarantees `ptr` is valid for writes of `len` bytes and
        // not otherwise accessed until the request completes; this `RecvBuf` is dropped then.
        // Raw receives may share bytes with each other, but the engine is one thread and this
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

/// A waiting rank busy-polls for a while (a message about to arrive is caught at once), then
/// yields its core for a while (ranks that outnumber cores let their peers run), then sleeps
/// until a peer's frame wakes it. Rounds are counted first so the clock is read rarely; while
/// spinning, only every so many rounds read it (a read costs as much as a round). Rounds follow
/// each other at once, as in Open MPI's progress loop: a `pause` instruction between them
/// (about 12 ns here) delayed seeing a message that had landed, and the 8-byte shared-memory
/// latency went from 0.23-0.24 us with it to 0.21-0.22 without (alternated osu_latency runs).
/// The spin is short (`MPIRT_SPIN_US`) and only for ranks with a CPU each.
const SPIN_ROUNDS_BEFORE_CLOCK: u32 = 64;
const YIELD_FOR: Duration = Duration::from_millis(1);
const SLEEP: Duration = Duration::from_millis(2);

/// No transport carries the rank (see `Engine::routes`).
const NO_ROUTE: u8 = u8::MAX;

pub struct Engine {
    rank: Rank,
    size: u32,
    core: Core<SendBuf, RecvBuf>,
    /// Polled in this order each round.
    transports: Vec<AnyTransport>,
    /// Index into `transports` of the one that carries each rank, or `NO_ROUTE`.
    routes: Vec<u8>,
    /// Bit `i` set: `transports[i]` completes a send when it takes the frame (see
    /// `Caps::sends_complete_on_return`), so small sends go the direct path. Kept here
    /// because every send asks.
    direct_send: u32,
    /// The one wait on every transport's wake fd, when more than one has any.
    wake: Option<WakeSet>,
    /// Host of each rank, for errors that name where a failed peer runs.
    hosts: Vec<String>,
    /// Peers whose transport refused a frame; retried first on the next progress.
    blocked: Vec<Rank>,
    counters: Counters,
    description: String,
    /// Busy-poll budget of a wait: none when ranks outnumber the cores they may use.
    spin: Duration,
    /// The failure that stopped the engine (see `stop`); every later call that would move
    /// data returns it.
    failure: Option<PmlError>,
}

/// Withdraws the core's claim when dropped, also when a wait fails or unwinds: a claim left
/// waiting would have a later message written into a buffer its receive no longer owns. A
/// claim a rendezvous offer already turned into a request stays in the engine when its wait
/// fails, like any request; the failure stopped the engine, so nothing writes it any more.
struct ClaimGuard<'e>(&'e mut Engine);

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        self.0.core.take_claim();
    }
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
        let mut direct_send = 0;
        let mut transports = Vec::new();
        let mut description = format!("rank {rank} of {size} on {}", job.host());
        for (index, (mut transport, carried)) in connected.transports.into_iter().enumerate() {
            transport.finish(&mut job)?;
            let caps = transport.caps();
            for &r in &carried {
                core.set_peer(r, caps.peer_caps());
                routes[r as usize] = index as u8;
            }
            if caps.sends_complete_on_return {
                direct_send |= 1 << index;
            }
            let clause = transport.describe(carried.len());
            if !clause.is_empty() {
                description += &format!("; {clause}");
            }
            transports.push(transport);
        }
        for note in connected.notes {
            description += &format!("; {note}");
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let on_host = job.hosts.iter().filter(|h| *h == job.host()).count();
        // A rank rsrun bound to a CPU of its own (it says so in MPIRT_BOUND_CPU) sees one CPU,
        // yet it is not oversubscribed, and yielding at once would hand its CPU to other
        // processes. Ranks that merely inherited one CPU between them see the same, and must
        // yield: a spinning rank keeps the peer it waits for off their CPU.
        let bound = std::env::var_os("MPIRT_BOUND_CPU").is_some();
        let spin = if on_host > cores && !bound {
            description += &format!("; {on_host} ranks on {cores} cores: waits yield at once");
            Duration::ZERO
        } else {
            job.config.spin
        };
        if job.config.verbose {
            eprintln!("mpirt: {description}");
        }
        Ok(Engine {
            rank,
            size,
            core,
            wake: WakeSet::over(&mut transports)?,
            transports,
            routes,
            direct_send,
            hosts: job.hosts,
            blocked: Vec::new(),
            counters: Counters::default(),
            description,
            spin,
            failure: None,
        })
    }

    /// Whether this rank's waits may spin before yielding: not when it shares its CPUs with
    /// more local ranks than they hold, or when spinning was turned off.
    pub fn waits_spin(&self) -> bool {
        !self.spin.is_zero()
    }

    pub fn rank(&self) -> Rank {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// What transports and protocols are in use (what `--verbose` prints).
    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn counters(&self) -> Counters {
        let mut counters = self.counters;
        for t in &self.transports {
            t.count(&mut counters);
        }
        counters
    }

    /// Index into `transports` of the one that carries `peer`.
    #[inline]
    fn route(&self, peer: Rank) -> Result<usize, PmlError> {
        match self.routes.get(peer as usize) {
            Some(&route) if route != NO_ROUTE => Ok(route as usize),
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
        let route = self.route(peer)?;
        self.check_running()?;
        let transport = &mut self.transports[route];
        let core = &mut self.core;
        let exposure = transport.expose(peer, buf, len, || core.sends_eagerly(peer, len))?;
        let args = SendArgs {
            context,
            source,
            peer,
            tag,
            mode,
            buf: SendBuf {
                ptr: buf,
                len,
                registration: exposure.registration.map(|r| (route, r)),
            },
            remote: exposure.key,
            eager_limit: exposure.eager_limit,
        };
        let h = if self.direct_send & (1 << route) != 0 {
            let posted = core.post_send_direct(args, |header, payload| {
                Ok(transport.try_send(peer, header, payload)? == Sent::Whole)
            });
            posted.map_err(|e| self.stop(e))?
        } else {
            core.post_send(args)?
        };
        if h == Handle::SENT {
            self.counters.frames_sent += 1;
            return Ok(h);
        }
        // The frame goes out now: the latency of the next progress call is not its to pay.
        self.flush(peer).map_err(|e| self.stop(e))?;
        Ok(h)
    }

    /// Starts a receive into `len` bytes at `buf`.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes and must not be accessed otherwise until
    /// the request completes.
    pub unsafe fn post_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        self.check_running()?;
        // No progress here: whoever waits or tests on the receive makes it.
        self.core
            .post_recv(context, source, tag, RecvBuf { ptr: buf, len })
    }

    /// Starts a receive into `len` bytes at `buf` that finishes at once when its eager
    /// message is already here ([`Started::Done`]: no request to wait for), else is posted
    /// ([`Started::Posted`]). Never [`Started::Claimed`].
    ///
    /// # Safety
    /// As for `post_recv`.
    #[inline]
    pub unsafe fn start_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Started<RecvBuf>, PmlError> {
        self.check_running()?;
        self.core
            .start_recv(context, source, tag, RecvBuf { ptr: buf, len })
    }

    /// Receives into `len` bytes at `buf`, blocking. An eager message is copied from the
    /// transport's frame straight into `buf`, with no request (see `protocol::claim`).
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes and not otherwise accessed during the
    /// call.
    // Inline: mpirt's blocking receive calls this once, and as a call across the crate
    // boundary it cost 42 instructions a receive more (callgrind, osu_latency 8 B).
    #[inline]
    pub unsafe fn recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Status, PmlError> {
        self.check_running()?;
        let started = self
            .core
            .claim_recv(context, source, tag, RecvBuf { ptr: buf, len })?;
        let h = match started {
            Started::Done { result, .. } => return result.map_err(|e| *e),
            Started::Posted(h) => h,
            Started::Claimed => {
                let claim = ClaimGuard(self);
                claim.0.wait_until(|e| Ok(e.core.claim_ended()))?;
                let end = claim.0.core.take_claim();
                drop(claim);
                match end.expect("the wait returns once the claim ended") {
                    ClaimEnd::Done { result, .. } => return result.map_err(|e| *e),
                    ClaimEnd::Request(h) => h,
                }
            }
        };
        match self.wait(h)? {
            Done::Received(status) => Ok(status),
            Done::Sent => unreachable!("a receive completed as a send"),
        }
    }

    /// Receives a message a matched probe took.
    ///
    /// # Safety
    /// As for `post_recv`.
    pub unsafe fn post_matched_recv(
        &mut self,
        message: MessageHandle,
        buf: *mut u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        self.check_running()?;
        let h = self.core.matched_recv(message, RecvBuf { ptr: buf, len })?;
        self.progress()?;
        Ok(h)
    }

    /// Collects the request if it finished; the handle is spent once this returns `Some`.
    pub fn test(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        if let Some(done) = self.collect(h)? {
            return Ok(Some(done));
        }
        self.progress()?;
        self.collect(h)
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
                if let Some((route, registration)) = buf.registration {
                    self.transports[route].release(registration);
                }
                result.map(|()| Some(Done::Sent))
            }
            Some(Completion::Recv { result, .. }) => result.map(|s| Some(Done::Received(s))),
        }
    }

    /// Whether the request finished, without collecting it.
    pub fn is_complete(&mut self, h: Handle) -> Result<bool, PmlError> {
        if h == Handle::SENT {
            return Ok(true);
        }
        self.core.is_complete(h)
    }

    pub fn wait(&mut self, h: Handle) -> Result<Done, PmlError> {
        self.wait_collect(h)
    }

    /// Waits until any of `handles` finished; returns its index (not yet collected).
    pub fn wait_any(&mut self, handles: &[Handle]) -> Result<usize, PmlError> {
        self.wait_first(handles)
    }

    /// Looks for a matching message without taking it.
    pub fn iprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<Status>, PmlError> {
        if let Some(s) = self.core.probe(context, source, tag) {
            return Ok(Some(s));
        }
        self.progress()?;
        Ok(self.core.probe(context, source, tag))
    }

    pub fn probe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Status, PmlError> {
        self.wait_for(|e| Ok(e.core.probe(context, source, tag)))
    }

    pub fn improbe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<(MessageHandle, Status)>, PmlError> {
        if let Some(m) = self.core.matched_probe(context, source, tag) {
            return Ok(Some(m));
        }
        self.progress()?;
        Ok(self.core.matched_probe(context, source, tag))
    }

    pub fn mprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<(MessageHandle, Status), PmlError> {
        self.wait_for(|e| Ok(e.core.matched_probe(context, source, tag)))
    }

    /// Cancels a receive that has not matched yet; returns whether it was cancelled (the
    /// request then completes with `PmlError::Cancelled`).
    pub fn cancel(&mut self, h: Handle) -> Result<bool, PmlError> {
        if h == Handle::SENT {
            return Ok(false);
        }
        self.core.cancel(h)
    }

    /// Progresses until `done` holds: spin, then yield, then sleep until a peer's frame
    /// wakes this rank.
    fn wait_until(
        &mut self,
        mut done: impl FnMut(&mut Engine) -> Result<bool, PmlError>,
    ) -> Result<(), PmlError> {
        let mut idle_rounds = 0u32;
        let mut idle_since = None;
        let mut spinning = true;
        // A stopped engine moves nothing, so `done` could never come to hold.
        self.check_running()?;
        loop {
            if done(self)? {
                return Ok(());
            }
            // Requests, queues and probes change only when progress moves something: until
            // then a round is one look at the transports, which keeps the spin short and a
            // frame's arrival noticed sooner.
            while !(self.may_move() && self.progress()?) {
                idle_rounds = idle_rounds.wrapping_add(1);
                if idle_rounds < SPIN_ROUNDS_BEFORE_CLOCK
                    || (spinning && !idle_rounds.is_multiple_of(SPIN_ROUNDS_BEFORE_CLOCK))
                {
                    continue;
                }
                let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
                spinning = idle < self.spin;
                if spinning {
                    continue;
                }
                if idle < self.spin + YIELD_FOR {
                    std::thread::yield_now();
                } else {
                    self.sleep_until_woken(SLEEP)?;
                }
            }
            idle_rounds = 0;
            idle_since = None;
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
        slept.map_err(|e| self.stop(e.on_host(&self.hosts)))
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
        for t in &mut self.transports {
            received += t.poll(&mut self.core).map_err(|e| e.on_host(&self.hosts))?;
        }
        self.counters.frames_received += received as u64;
        let mut moved = received > 0;
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
        } = action;
        let route = self.route(peer)?;
        let target = self.core.read_target(recv)?;
        let reading = self.transports[route]
            .read(peer, remote, target, recv.to_wire())
            .map_err(|e| e.on_host(&self.hosts))?;
        if !matches!(reading, Reading::Finished(Err(_))) {
            self.counters.remote_reads += 1;
            self.counters.remote_read_bytes += len as u64;
        }
        match reading {
            Reading::InFlight => Ok(()),
            Reading::Finished(Ok(())) => self.core.read_done(recv),
            Reading::Finished(Err(cause)) => self.core.read_failed(recv, cause),
        }
    }

    /// Hands `peer`'s queued frames to its transport until it takes no more.
    fn flush(&mut self, peer: Rank) -> Result<bool, PmlError> {
        let mut sent_any = false;
        let route = self.route(peer)?;
        while let Some(t) = self.core.next_transmit(peer) {
            let sent = self.transports[route]
                .try_send(peer, t.header(), t.payload)
                .map_err(|e| e.on_host(&self.hosts))?;
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

    /// Sends everything still queued (FINs, credits): peers may be waiting on them.
    pub fn flush_all(&mut self) -> Result<(), PmlError> {
        self.wait_until(|e| Ok(e.blocked.is_empty() && (0..e.size).all(|p| !e.core.has_output(p))))
    }
}

impl Waiting for Engine {
    fn wait_until(
        &mut self,
        done: impl FnMut(&mut Engine) -> Result<bool, PmlError>,
    ) -> Result<(), PmlError> {
        Engine::wait_until(self, done)
    }

    fn collect(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        Engine::collect(self, h)
    }

    fn finished(&mut self, h: Handle) -> Result<bool, PmlError> {
        self.is_complete(h)
    }
}
