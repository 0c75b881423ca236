//! The engine's side of the PML contract ([`Pml`]): the calls mpirt makes, over the
//! protocol core and the engine's progress, and its side of the waiting loop ([`Waiting`]).
//! Sends, collection, progress and sleeping themselves live with the transports, in the
//! engine's own module.

use std::time::Duration;

use super::{Engine, RecvBuf};
use crate::blocks::Blocks;
use crate::envelope::{ContextId, Rank, SourceSel, Status, Tag, TagSel};
use crate::error::PmlError;
use crate::pml_api::{Done, Pml};
use crate::protocol::{ClaimEnd, MessageHandle, SendMode, Started};
use crate::requests::Handle;
use crate::stall::{Awaited, Queues};
use crate::transport::Transport;
use crate::waiting::{spin_budget, Waiting};

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

impl Pml for Engine {
    type Message = MessageHandle;

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    /// What transports and protocols are in use (what `--verbose` prints).
    fn description(&self) -> &str {
        &self.description
    }

    /// Whether this rank's waits may spin before yielding: not when it shares its CPUs with
    /// more local ranks than they hold, or when spinning was turned off.
    fn waits_spin(&self) -> bool {
        !self.spin.is_zero()
    }

    fn yield_budget(&self) -> Duration {
        self.yield_for
    }

    fn host_of(&self, peer: Rank) -> Option<&str> {
        self.hosts.get(peer as usize).map(String::as_str)
    }

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
        // SAFETY: forwarded from this function's contract, which is the inherent one's.
        unsafe { Engine::post_send(self, context, source, peer, tag, mode, buf, len) }
    }

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
        // SAFETY: forwarded from this function's contract, which is the inherent one's.
        unsafe { Engine::post_send_blocks(self, context, source, peer, tag, mode, blocks) }
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
        self.check_running()?;
        // No progress here: whoever waits or tests on the receive makes it.
        self.core
            .post_recv(context, source, tag, RecvBuf::new(buf, len))
    }

    /// Every receive laid out in blocks is taken: transports that hand whole frames have the
    /// core unpack them, TCP scatters DATA from its socket, a shared-memory rendezvous reads
    /// into the blocks (`Transport::read_into_blocks`), and other remote reads land in a
    /// staging buffer the core unpacks.
    ///
    /// # Safety
    /// As for `Pml::post_recv_blocks`.
    unsafe fn post_recv_blocks(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        blocks: &Blocks,
        _from: Option<Rank>,
    ) -> Result<Option<Handle>, PmlError> {
        self.check_running()?;
        self.core
            .post_recv(context, source, tag, RecvBuf::of_blocks(blocks))
            .map(Some)
    }

    /// Starts a receive into `len` bytes at `buf` that finishes at once when its eager
    /// message is already here ([`Started::Done`]: no request to wait for), else is posted
    /// ([`Started::Posted`]). Never [`Started::Claimed`].
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
        self.check_running()?;
        self.core
            .start_recv(context, source, tag, RecvBuf::new(buf, len))
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
    unsafe fn recv(
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
            .claim_recv(context, source, tag, RecvBuf::new(buf, len))?;
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
    unsafe fn post_matched_recv(
        &mut self,
        message: MessageHandle,
        buf: *mut u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        self.check_running()?;
        let h = self.core.matched_recv(message, RecvBuf::new(buf, len))?;
        self.progress_unless_done(h)?;
        Ok(h)
    }

    /// Every matched receive laid out in blocks is taken, as by `post_recv_blocks`.
    ///
    /// # Safety
    /// As for `Pml::post_matched_recv_blocks`.
    unsafe fn post_matched_recv_blocks(
        &mut self,
        message: MessageHandle,
        blocks: &Blocks,
        _from: Option<Rank>,
    ) -> Result<Result<Handle, MessageHandle>, PmlError> {
        self.check_running()?;
        let h = self
            .core
            .matched_recv(message, RecvBuf::of_blocks(blocks))?;
        self.progress_unless_done(h)?;
        Ok(Ok(h))
    }

    /// Collects the request if it finished; the handle is spent once this returns `Some`.
    fn test(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        if let Some(done) = self.collect(h)? {
            return Ok(Some(done));
        }
        self.progress()?;
        self.collect(h)
    }

    #[inline]
    fn collect(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        Engine::collect(self, h)
    }

    /// Whether the request finished, without collecting it.
    fn is_complete(&mut self, h: Handle) -> Result<bool, PmlError> {
        if h == Handle::SENT {
            return Ok(true);
        }
        self.core.is_complete(h)
    }

    fn wait(&mut self, h: Handle) -> Result<Done, PmlError> {
        self.wait_collect(h)
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
        if let Some(s) = self.core.probe(context, source, tag) {
            return Ok(Some(s));
        }
        self.counters.probe_rounds += 1;
        self.progress()?;
        Ok(self.core.probe(context, source, tag))
    }

    fn probe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Status, PmlError> {
        self.wait_for(Awaited::State, |e| Ok(e.core.probe(context, source, tag)))
    }

    fn improbe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<(MessageHandle, Status)>, PmlError> {
        if let Some(m) = self.core.matched_probe(context, source, tag) {
            return Ok(Some(m));
        }
        self.counters.probe_rounds += 1;
        self.progress()?;
        Ok(self.core.matched_probe(context, source, tag))
    }

    fn mprobe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<(MessageHandle, Status), PmlError> {
        self.wait_for(Awaited::State, |e| {
            Ok(e.core.matched_probe(context, source, tag))
        })
    }

    /// Cancels a receive that has not matched yet; returns whether it was cancelled (the
    /// request then completes with `PmlError::Cancelled`).
    fn cancel(&mut self, h: Handle) -> Result<bool, PmlError> {
        if h == Handle::SENT {
            return Ok(false);
        }
        self.core.cancel(h)
    }

    #[inline]
    fn progress(&mut self) -> Result<bool, PmlError> {
        Engine::progress(self)
    }

    /// Sends everything still queued (FINs, credits): peers may be waiting on them.
    fn flush_all(&mut self) -> Result<(), PmlError> {
        self.wait_until(|e| Ok(e.blocked.is_empty() && (0..e.size).all(|p| !e.core.has_output(p))))
    }
}

impl Waiting for Engine {
    /// A round only when one could move anything (see `may_move`).
    #[inline]
    fn poll(&mut self) -> Result<bool, PmlError> {
        Ok(self.may_move() && self.progress()?)
    }

    /// The configured spin, or longer while transports have bytes in flight that move only
    /// while this rank polls (`Transport::bytes_in_flight`; see `waiting::spin_budget`).
    fn spin_budget(&self) -> Duration {
        let moving = self.transports.iter().map(Transport::bytes_in_flight).sum();
        spin_budget(self.spin, moving)
    }

    fn configured_spin(&self) -> Duration {
        self.spin
    }

    /// Nothing to do here: a transport that must probe quiet peers to find a dead one (verbs)
    /// keeps its own idle clock and probes while it polls and sleeps.
    fn check_peers(&mut self, _idle: Duration) -> Result<(), PmlError> {
        Ok(())
    }

    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        self.sleep_until_woken(timeout).map_err(|e| self.stop(e))
    }

    #[inline]
    fn queues(&self, awaited: Awaited<'_>) -> Queues {
        self.core.queues(awaited)
    }

    #[inline]
    fn check_running(&self) -> Result<(), PmlError> {
        Engine::check_running(self)
    }
}
