//! The point-to-point layer (PML) this process runs on: mpirt's own engine (`native`) or,
//! with the cargo feature `ucx`, UCX's tag matching (`MPIRT_PML=ucx`, `rsrun --pml ucx`).
//!
//! Both keep the PML contract ([`Pml`]), and so does [`AnyPml`], which holds either: an enum
//! rather than a trait object, so that each call is one match on a value that never changes,
//! which the branch predictor learns at once, and a build without `ucx` has a one-variant
//! enum whose matches compile away, so the native path pays nothing for the choice.

pub(crate) mod hooks;

use std::env;
use std::time::Duration;

use pml::blocks::Blocks;
#[cfg(feature = "ucx")]
use pml::ucx::{UcxConfig, UcxMessage, UcxPml};
use pml::RecvBuf;
use pml::{
    ContextId, Counters, Done, Engine, EngineConfig, EngineError, Handle, OneSided, Pml, PmlError,
    Rank, SendMode, SourceSel, Started, Status, Tag, TagSel, Waiting, Wireup,
};

use crate::environment::{self, OneSidedCounters, Threading};

/// Which PML the ranks run on; every rank of a job must name the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PmlChoice {
    Native,
    Ucx,
}

impl PmlChoice {
    /// From `MPIRT_PML` (which `rsrun --pml` sets): unset or `native` is the native engine.
    pub fn from_env() -> Result<PmlChoice, String> {
        match env::var("MPIRT_PML").as_deref() {
            Err(_) | Ok("") | Ok("native") => Ok(PmlChoice::Native),
            Ok("ucx") => Ok(PmlChoice::Ucx),
            Ok(other) => Err(format!("MPIRT_PML='{other}' is not a PML (native or ucx)")),
        }
    }

    /// The most concurrency the PML takes: the native engine, built with the feature
    /// `threads`, any, through the lock that threads share it under (`environment`), else
    /// one thread's; UCX's worker is made for one thread
    /// (`UCS_THREAD_MODE_SINGLE`), so the UCX PML stays at `Funneled`.
    pub fn threading_ceiling(self) -> Threading {
        match self {
            PmlChoice::Native if cfg!(feature = "threads") => Threading::Multiple,
            PmlChoice::Native | PmlChoice::Ucx => Threading::Funneled,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PmlChoice::Native => "native",
            PmlChoice::Ucx => "ucx",
        }
    }
}

fn pml_key(rank: u32) -> String {
    format!("mpirt.pml.{rank}")
}

/// Each rank publishes its PML and checks every other's before either PML wires up: the
/// two wire up differently (different keys, different fences), so ranks that disagree would
/// otherwise wait on each other forever. One fence more at start-up buys a clear error.
pub(crate) fn agree(wireup: &mut dyn Wireup, mine: PmlChoice) -> Result<(), String> {
    let rank = wireup.rank();
    wireup.put(&pml_key(rank), mine.name().as_bytes())?;
    wireup.fence()?;
    for peer in 0..wireup.size() {
        let theirs = wireup.get(peer, &pml_key(peer))?;
        if theirs != mine.name().as_bytes() {
            return Err(format!(
                "rank {rank} runs the {} PML but rank {peer} runs '{}': every rank must use \
                 the same one (set it for all with rsrun --pml or MPIRT_PML)",
                mine.name(),
                String::from_utf8_lossy(&theirs)
            ));
        }
    }
    Ok(())
}

/// A message a matched probe took, for the PML that took it.
#[derive(Debug)]
pub(crate) enum MessageHandle {
    Native(pml::MessageHandle),
    #[cfg(feature = "ucx")]
    Ucx(UcxMessage),
}

// One per process, in a thread-local: boxing the engine to shrink the smaller variant would
// cost an indirection per call and save memory that is never multiplied.
#[allow(clippy::large_enum_variant)]
pub(crate) enum AnyPml {
    Native(Engine),
    #[cfg(feature = "ucx")]
    Ucx(UcxPml),
}

// Without `ucx` the enum is the engine itself: no discriminant to store or to test.
#[cfg(not(feature = "ucx"))]
const _: () = assert!(std::mem::size_of::<AnyPml>() == std::mem::size_of::<Engine>());

/// Runs `$call` on whichever PML `$pml` holds, bound to `$p`.
macro_rules! on_pml {
    ($pml:expr, $p:ident => $call:expr) => {
        match $pml {
            AnyPml::Native($p) => $call,
            #[cfg(feature = "ucx")]
            AnyPml::Ucx($p) => $call,
        }
    };
}

impl AnyPml {
    /// Prepares a sleep apart from the PML for a thread that waits on the shared engine
    /// (`pml::nap`); the UCX PML, which threads do not share, has none.
    pub fn begin_nap(&mut self) -> Result<pml::NapStart, PmlError> {
        match self {
            AnyPml::Native(engine) => engine.begin_nap(),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => Ok(pml::NapStart::Unwakeable),
        }
    }

    /// Ends what `begin_nap` prepared.
    pub fn end_nap(&mut self, timed_out: bool) {
        match self {
            AnyPml::Native(engine) => engine.end_nap(timed_out),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => {}
        }
    }

    /// Wakes `peer`'s sleep in its PML: the native engine by its transport's wake or a WAKE
    /// frame (`pml::Engine::wake_peer`), the UCX PML by an active message
    /// (`pml::ucx::UcxPml::wake_peer`).
    pub fn wake_peer(&mut self, peer: pml::Rank) -> Result<(), PmlError> {
        match self {
            AnyPml::Native(engine) => engine.wake_peer(peer),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(ucx) => {
                ucx.wake_peer(peer);
                Ok(())
            }
        }
    }

    /// Wakes the thread sleeping apart from the PML, if one is.
    pub fn wake_nap(&mut self) {
        match self {
            AnyPml::Native(engine) => engine.wake_nap(),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => {}
        }
    }

    /// What the PML has moved so far, for a call on the shared engine that begins now
    /// (`pml::MovedMark`); `None` for the UCX PML, which threads do not share.
    pub fn moved_mark(&self) -> Option<pml::MovedMark> {
        match self {
            AnyPml::Native(engine) => Some(engine.moved_mark()),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => None,
        }
    }

    /// Whether a call that began at `mark` may have moved what another thread waits for
    /// (`Engine::moved_since`); true where there is no mark to compare.
    pub fn moved_since(&self, mark: Option<pml::MovedMark>) -> bool {
        match (self, mark) {
            (AnyPml::Native(engine), Some(mark)) => engine.moved_since(mark),
            _ => true,
        }
    }

    /// Why this PML cannot take processes after start-up (a spawn's children or parents), if
    /// it cannot: UCX's endpoints are made at wire-up; the native engine opens a bridge.
    pub fn refuses_bridges(&self) -> Option<String> {
        match self {
            AnyPml::Native(_) => None,
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => Some(
                "the UCX PML takes no processes after start-up (a spawn's children or \
                 parents): run the job on the native PML (rsrun --pml native)"
                    .into(),
            ),
        }
    }

    /// A bridge to processes met after start-up (see `pml::Bridge`): the native engine's.
    pub fn open_bridge(
        &mut self,
        rank: Rank,
        size: u32,
        secret: &[u8; 32],
    ) -> Result<pml::Bridge, EngineError> {
        match self {
            AnyPml::Native(engine) => engine.open_bridge(rank, size, secret),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => Err(EngineError::Config(
                self.refuses_bridges().expect("UCX refuses"),
            )),
        }
    }

    /// The one-sided operations of windows' RDMA path: the native engine's (verbs, where
    /// it has that transport) or UCX's RMA.
    pub fn one_sided(&mut self) -> &mut dyn OneSided {
        on_pml!(self, p => p)
    }

    /// What the PML counted: the native engine's transports, or on UCX (which keeps its
    /// transports' counts to itself) only the non-contiguous buffers handed to UCX in place
    /// or left to a staging copy (`Counters::ucx_iov_sends` and its kin) and its one-sided
    /// operations, the other fields 0.
    pub fn counters(&self) -> Option<Counters> {
        match self {
            AnyPml::Native(engine) => Some(engine.counters()),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(ucx) => Some(ucx.counters()),
        }
    }

    /// Windows' one-sided operations as posted on this PML's one-sided transport (verbs,
    /// UCX's RMA): `Counters`' `rma_writes`, `rma_reads` and `rma_atomics`.
    pub fn one_sided_counters(&self) -> OneSidedCounters {
        let counted = match self {
            AnyPml::Native(engine) => engine.counters(),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(ucx) => ucx.counters(),
        };
        OneSidedCounters {
            puts: counted.rma_writes,
            gets: counted.rma_reads,
            atomics: counted.rma_atomics,
        }
    }

    /// `iprobe` that makes no progress, for the shared engine's waits, which make their
    /// rounds themselves and must know whether each moved anything (`environment::shared`).
    /// UCX's probes progress its worker: it is never shared (`initialize_with_threading`
    /// keeps it at `Funneled`), and its `iprobe` stands in.
    pub(crate) fn probe_queued(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<Status>, PmlError> {
        match self {
            AnyPml::Native(p) => Ok(p.probe_queued(context, source, tag)),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => self.iprobe(context, source, tag),
        }
    }

    /// `improbe` that makes no progress on the native PML, as
    /// [`probe_queued`](Self::probe_queued) (UCX's `improbe` progresses its worker).
    pub(crate) fn matched_probe_queued(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<(MessageHandle, Status)>, PmlError> {
        match self {
            AnyPml::Native(p) => Ok(p
                .matched_probe_queued(context, source, tag)
                .map(|(m, s)| (MessageHandle::Native(m), s))),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => self.improbe(context, source, tag),
        }
    }

    /// How many ranks this PML reaches: the world's, then those a bridge joined.
    pub fn reachable(&self) -> u32 {
        match self {
            AnyPml::Native(engine) => engine.reachable(),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(ucx) => ucx.size(),
        }
    }

    /// Joins the bridge `open_bridge` made with `peers`; their ranks for this PML.
    pub fn join_bridge(
        &mut self,
        bridge: pml::Bridge,
        peers: &[pml::BridgePeer],
    ) -> Result<Vec<Rank>, EngineError> {
        match self {
            AnyPml::Native(engine) => engine.join_bridge(bridge, peers),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(_) => unreachable!("no bridge opens on UCX"),
        }
    }

    /// Opens the chosen PML and wires it up with every rank.
    pub fn new(
        choice: PmlChoice,
        wireup: &mut dyn Wireup,
        config: EngineConfig,
    ) -> Result<AnyPml, EngineError> {
        match choice {
            PmlChoice::Native => Engine::new(wireup, config).map(AnyPml::Native),
            #[cfg(feature = "ucx")]
            PmlChoice::Ucx => open_ucx(wireup, &config).map(AnyPml::Ucx),
            #[cfg(not(feature = "ucx"))]
            PmlChoice::Ucx => Err(EngineError::Config(
                "MPIRT_PML=ucx, but this program was built without UCX (build it with mpirt's \
                 cargo feature `ucx`)"
                    .into(),
            )),
        }
    }
}

impl Pml for AnyPml {
    type Message = MessageHandle;

    #[inline]
    fn rank(&self) -> Rank {
        on_pml!(self, p => p.rank())
    }

    #[inline]
    fn size(&self) -> u32 {
        on_pml!(self, p => p.size())
    }

    fn description(&self) -> &str {
        on_pml!(self, p => p.description())
    }

    fn waits_spin(&self) -> bool {
        on_pml!(self, p => p.waits_spin())
    }

    fn yield_budget(&self) -> Duration {
        on_pml!(self, p => p.yield_budget())
    }

    fn host_of(&self, peer: Rank) -> Option<&str> {
        on_pml!(self, p => p.host_of(peer))
    }

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
        // SAFETY: the caller's guarantees are passed on unchanged.
        on_pml!(self, p => unsafe { p.post_send(context, source, peer, tag, mode, buf, len) })
    }

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
        // SAFETY: the caller's guarantees are passed on unchanged.
        on_pml!(self, p => unsafe {
            p.post_awaited_send(context, source, peer, tag, mode, buf, len)
        })
    }

    unsafe fn post_send_blocks(
        &mut self,
        context: ContextId,
        source: Rank,
        peer: Rank,
        tag: Tag,
        mode: SendMode,
        blocks: &Blocks,
    ) -> Result<Option<Handle>, PmlError> {
        // SAFETY: the caller's guarantees are passed on unchanged.
        on_pml!(self, p => unsafe {
            p.post_send_blocks(context, source, peer, tag, mode, blocks)
        })
    }

    #[inline]
    unsafe fn post_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        // SAFETY: the caller's guarantees are passed on unchanged.
        on_pml!(self, p => unsafe { p.post_recv(context, source, tag, buf, len) })
    }

    unsafe fn post_recv_blocks(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        blocks: &Blocks,
        from: Option<Rank>,
    ) -> Result<Option<Handle>, PmlError> {
        // SAFETY: the caller's guarantees are passed on unchanged.
        on_pml!(self, p => unsafe { p.post_recv_blocks(context, source, tag, blocks, from) })
    }

    #[inline]
    unsafe fn start_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Started<RecvBuf>, PmlError> {
        // SAFETY: the caller's guarantees are passed on unchanged.
        on_pml!(self, p => unsafe { p.start_recv(context, source, tag, buf, len) })
    }

    /// The PML's own blocking receive, unless progress hooks are registered: that cannot
    /// step them, so the receive is started and waited for here.
    #[inline]
    unsafe fn recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Status, PmlError> {
        if hooks::any() {
            // SAFETY: the caller's guarantees are passed on unchanged.
            return unsafe { self.recv_stepping_hooks(context, source, tag, buf, len) };
        }
        // SAFETY: the caller's guarantees are passed on unchanged.
        on_pml!(self, p => unsafe { p.recv(context, source, tag, buf, len) })
    }

    unsafe fn post_matched_recv(
        &mut self,
        message: MessageHandle,
        buf: *mut u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        // SAFETY (both arms): the caller's guarantees are passed on unchanged.
        match (self, message) {
            (AnyPml::Native(p), MessageHandle::Native(m)) => unsafe {
                p.post_matched_recv(m, buf, len)
            },
            #[cfg(feature = "ucx")]
            (AnyPml::Ucx(p), MessageHandle::Ucx(m)) => unsafe { p.post_matched_recv(m, buf, len) },
            #[cfg(feature = "ucx")]
            _ => unreachable!("a process runs one PML, so its messages come from that PML"),
        }
    }

    unsafe fn post_matched_recv_blocks(
        &mut self,
        message: MessageHandle,
        blocks: &Blocks,
        from: Option<Rank>,
    ) -> Result<Result<Handle, MessageHandle>, PmlError> {
        // SAFETY (both arms): the caller's guarantees are passed on unchanged.
        match (self, message) {
            (AnyPml::Native(p), MessageHandle::Native(m)) => {
                unsafe { p.post_matched_recv_blocks(m, blocks, from) }
                    .map(|posted| posted.map_err(MessageHandle::Native))
            }
            #[cfg(feature = "ucx")]
            (AnyPml::Ucx(p), MessageHandle::Ucx(m)) => {
                unsafe { p.post_matched_recv_blocks(m, blocks, from) }
                    .map(|posted| posted.map_err(MessageHandle::Ucx))
            }
            #[cfg(feature = "ucx")]
            _ => unreachable!("a process runs one PML, so its messages come from that PML"),
        }
    }

    /// Steps the progress hooks too, if any are registered: a test moves things on.
    #[inline]
    fn test(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        let done = on_pml!(self, p => p.test(h))?;
        if hooks::any() {
            self.step_hooks()?;
        }
        Ok(done)
    }

    #[inline]
    fn collect(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        on_pml!(self, p => p.collect(h))
    }

    #[inline]
    fn is_complete(&mut self, h: Handle) -> Result<bool, PmlError> {
        on_pml!(self, p => p.is_complete(h))
    }

    /// The PML's own wait, unless progress hooks are registered: then the waiting loop runs
    /// here, where it can step them.
    #[inline]
    fn wait(&mut self, h: Handle) -> Result<Done, PmlError> {
        if hooks::any() {
            return self.wait_stepping_hooks(h);
        }
        on_pml!(self, p => p.wait(h))
    }

    fn wait_any(&mut self, handles: &[Handle]) -> Result<usize, PmlError> {
        if hooks::any() {
            self.step_hooks()?;
            return self.wait_first(handles);
        }
        on_pml!(self, p => p.wait_any(handles))
    }

    fn iprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<Status>, PmlError> {
        on_pml!(self, p => p.iprobe(context, source, tag))
    }

    fn probe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Status, PmlError> {
        on_pml!(self, p => p.probe(context, source, tag))
    }

    fn improbe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<(MessageHandle, Status)>, PmlError> {
        match self {
            AnyPml::Native(p) => Ok(p
                .improbe(context, source, tag)?
                .map(|(m, s)| (MessageHandle::Native(m), s))),
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(p) => Ok(p
                .improbe(context, source, tag)?
                .map(|(m, s)| (MessageHandle::Ucx(m), s))),
        }
    }

    fn mprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<(MessageHandle, Status), PmlError> {
        match self {
            AnyPml::Native(p) => {
                let (m, s) = p.mprobe(context, source, tag)?;
                Ok((MessageHandle::Native(m), s))
            }
            #[cfg(feature = "ucx")]
            AnyPml::Ucx(p) => {
                let (m, s) = p.mprobe(context, source, tag)?;
                Ok((MessageHandle::Ucx(m), s))
            }
        }
    }

    fn cancel(&mut self, h: Handle) -> Result<bool, PmlError> {
        on_pml!(self, p => p.cancel(h))
    }

    /// Steps the progress hooks too, if any are registered.
    fn progress(&mut self) -> Result<bool, PmlError> {
        let moved = on_pml!(self, p => p.progress())?;
        if hooks::any() {
            self.step_hooks()?;
        }
        Ok(moved)
    }

    fn flush_all(&mut self) -> Result<(), PmlError> {
        on_pml!(self, p => p.flush_all())
    }
}

/// The waits while progress hooks are registered, out of the way of the others: inlined into
/// the message path, they made an 8-byte message cost the sender 50 instructions more.
impl AnyPml {
    #[cold]
    #[inline(never)]
    fn wait_stepping_hooks(&mut self, h: Handle) -> Result<Done, PmlError> {
        self.step_hooks()?;
        self.wait_collect(h)
    }

    /// A PML's own blocking receive cannot step the hooks: the receive is started and
    /// waited for here.
    ///
    /// # Safety
    /// As for `recv`.
    #[cold]
    #[inline(never)]
    unsafe fn recv_stepping_hooks(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: *mut u8,
        len: usize,
    ) -> Result<Status, PmlError> {
        // SAFETY: the caller's guarantees, which cover the whole call, are passed on: the
        // receive finishes (or fails) before this returns.
        match unsafe { self.start_recv(context, source, tag, buf, len) }? {
            Started::Done { result, .. } => result.map_err(|e| *e),
            Started::Posted(h) => match self.wait_stepping_hooks(h)? {
                Done::Received(status) => Ok(status),
                Done::Sent => unreachable!("a receive completed as a send"),
            },
            Started::Claimed => unreachable!("only a PML's own blocking receive claims"),
        }
    }
}

/// The waiting loop of whichever PML runs, and the hooks: the loop runs here only while
/// hooks are registered (see `wait`); otherwise the PML's own waits run.
impl Waiting for AnyPml {
    #[inline]
    fn poll(&mut self) -> Result<bool, PmlError> {
        on_pml!(self, p => p.poll())
    }

    fn spin_budget(&self) -> Duration {
        on_pml!(self, p => p.spin_budget())
    }

    fn configured_spin(&self) -> Duration {
        on_pml!(self, p => p.configured_spin())
    }

    fn check_peers(&mut self, idle: Duration) -> Result<(), PmlError> {
        on_pml!(self, p => p.check_peers(idle))
    }

    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        on_pml!(self, p => p.sleep(timeout))
    }

    fn check_running(&self) -> Result<(), PmlError> {
        on_pml!(self, p => p.check_running())
    }

    fn queues(&self, awaited: pml::stall::Awaited<'_>) -> pml::stall::Queues {
        on_pml!(self, p => p.queues(awaited))
    }

    /// Runs the registered hooks with this PML lent to them: they call it through
    /// `with_engine`, which this call already holds. Where this thread holds the lock of the
    /// engine that threads share, defers them instead, to run once it lets go
    /// (`hooks::defer`): run under the lock, an immediate collective's user-defined operation
    /// held every other thread of the rank out for as long as it ran.
    #[cold]
    #[inline(never)]
    fn step_hooks(&mut self) -> Result<(), PmlError> {
        if environment::holds_shared_engine() {
            hooks::defer();
        } else {
            environment::lend(self, hooks::step_all);
        }
        Ok(())
    }
}

/// The UCX PML, with the spin budget and verbosity of the native settings. Peer-failure
/// detection stays off unless `MPIRT_UCX_PEER_FAILURE=1`: with it, UCX 1.13 cannot use its
/// shared-memory transports (see `UcxConfig`); a rank that dies still ends the job, because
/// rsrun ends every rank then.
#[cfg(feature = "ucx")]
fn open_ucx(wireup: &mut dyn Wireup, config: &EngineConfig) -> Result<UcxPml, EngineError> {
    let detect_peer_failure = match env::var("MPIRT_UCX_PEER_FAILURE").as_deref() {
        Err(_) | Ok("") | Ok("0") => false,
        Ok("1") => true,
        Ok(other) => {
            return Err(EngineError::Config(format!(
                "MPIRT_UCX_PEER_FAILURE='{other}' is neither 0 nor 1"
            )))
        }
    };
    let ucx = UcxPml::new(
        wireup,
        &UcxConfig {
            spin: config.spin,
            detect_peer_failure,
            iov_min_block: config.ucx_iov_min_block,
            tcp_stage_below: config.ucx_tcp_stage_below,
        },
    )?;
    if config.verbose {
        bootstrap::output::say(&format!("mpirt: {}", ucx.description()));
    }
    Ok(ucx)
}
