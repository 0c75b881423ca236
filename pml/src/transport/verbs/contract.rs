//! Verbs under the transport contract: its wire-up from the bootstrap (device, queue pairs
//! connected before the last fence), its limits and its `--verbose` clause.

use std::os::fd::RawFd;
use std::time::Duration;

use super::{LayoutTarget, VerbsConfig, VerbsTransport};
use crate::blocks::Blocks;
use crate::config::TransportChoice;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::nap::{Nap, NapStart};
use crate::pml_api::{Counters, EngineError};
use crate::protocol::RemoteLayout;
use crate::transport::{
    BlocksOffer, Caps, Exposure, Job, Peer, Reading, Registration, RmaOp, RmaPosted, Sent, Sink,
    Transport,
};
use crate::wire::RemoteKey;

impl VerbsTransport {
    /// Opens the RDMA device when verbs is asked for, or (`auto`) when `remote` (ranks that
    /// no same-host transport carries) is not empty and a device is there, and publishes
    /// the endpoint (empty without a device: peers then use TCP for this pair). With `auto`,
    /// a missing device is a note for `--verbose` (the second value), not an error.
    pub fn open(
        job: &mut Job,
        remote: &[Rank],
    ) -> Result<(Option<VerbsTransport>, Option<String>), EngineError> {
        let config = &job.config;
        let wanted = match config.transport {
            TransportChoice::Verbs => true,
            TransportChoice::Auto => !remote.is_empty() && config.verbs_devices != "none",
            _ => false,
        };
        let (verbs, note) = if wanted {
            let host = job.host();
            let local_rank = job.hosts[..job.rank as usize]
                .iter()
                .filter(|h| *h == host)
                .count();
            let verbs_config = VerbsConfig {
                devices: config.verbs_devices.clone(),
                gid_index: config.verbs_gid_index,
                frame_size: config.verbs_eager_limit + crate::wire::MAX_HEADER_LEN,
                reg_cache: config.verbs_reg_cache,
                max_msg: config.verbs_max_msg,
                max_sge: config.verbs_max_sge,
                sge_min_block: config.verbs_sge_min_block,
                cq_entries: config.verbs_cq_entries,
                send_min_block: config.verbs_send_min_block,
            };
            match VerbsTransport::new(job.rank, job.size, local_rank, remote, &verbs_config) {
                Ok(v) => (Some(v), None),
                Err(e) if config.transport == TransportChoice::Verbs => {
                    return Err(EngineError::Transport(format!("verbs: {e}")))
                }
                Err(e) => (None, Some(e)),
            }
        } else {
            (None, None)
        };
        let endpoint = verbs.as_ref().map(|v| v.endpoint()).unwrap_or_default();
        job.put(&format!("pml.verbs.{}", job.rank), endpoint.as_bytes())?;
        let rma_endpoint = verbs.as_ref().map(|v| v.rma_endpoint()).unwrap_or_default();
        job.put(
            &format!("pml.verbs.rma.{}", job.rank),
            rma_endpoint.as_bytes(),
        )?;
        Ok((verbs, note))
    }

    /// Connects a queue pair to each rank of `unclaimed` that has a device; carries those.
    /// Queue pairs connect before the last fence, so that no rank sends to one not yet ready
    /// to receive: its packets would be dropped, and once the retries ran out the sender
    /// would take the peer for dead.
    pub fn connect_peers(
        &mut self,
        job: &mut Job,
        unclaimed: &[Rank],
    ) -> Result<Vec<Rank>, EngineError> {
        let mut carried = Vec::new();
        for &r in unclaimed {
            if self.peers[r as usize].is_none() {
                continue;
            }
            let endpoint = job.get(r, &format!("pml.verbs.{r}"))?;
            if endpoint.is_empty() {
                // The peer has no device: TCP carries this pair.
                continue;
            }
            let rma_endpoint = job.get(r, &format!("pml.verbs.rma.{r}"))?;
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            self.connect(r, &text(&endpoint), &text(&rma_endpoint))
                .map_err(|e| EngineError::Transport(format!("verbs: {e}")))?;
            carried.push(r);
        }
        Ok(carried)
    }
}

impl Transport for VerbsTransport {
    fn caps(&self) -> Caps {
        Caps {
            eager_limit: self.eager_limit,
            max_frame: self.frame_size(),
            remote_read: true,
            remote_write: true,
            rma_by_default: true,
            atomics: self.does_atomics(),
            sends_complete_on_return: false,
            max_pieces: 1,
        }
    }

    fn try_send(&mut self, peer: Peer, header: &[u8], payload: &[u8]) -> Result<Sent, PmlError> {
        Ok(if self.send(peer.rank, header, payload)? {
            Sent::Whole
        } else {
            Sent::Nothing
        })
    }

    fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError> {
        VerbsTransport::poll(self, sink)
    }

    /// Completions must be polled to know.
    fn has_work(&self) -> bool {
        true
    }

    /// Asynchronous: `poll` reports it done when the last piece completes.
    fn read(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        target: &mut [u8],
        token: u64,
    ) -> Result<Reading, PmlError> {
        VerbsTransport::read(self, peer, key, target, token)?;
        Ok(Reading::InFlight)
    }

    /// Asynchronous as `read`; `None` where the blocks are short (see `read_blocks`).
    unsafe fn read_into_blocks(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        blocks: &Blocks,
        len: usize,
        token: u64,
    ) -> Result<Option<Reading>, PmlError> {
        // SAFETY: forwarded from this function's contract.
        let reading = unsafe { VerbsTransport::read_blocks(self, peer, key, blocks, len, token) }?;
        Ok(reading.then_some(Reading::InFlight))
    }

    /// Asynchronous as `read`, a READ a run of the send at least.
    fn read_layout(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        layout: &RemoteLayout,
        target: &mut [u8],
        token: u64,
    ) -> Result<Reading, PmlError> {
        // SAFETY: contiguous bytes, lent until the read finished (`Transport::read`'s terms).
        unsafe {
            VerbsTransport::read_layout(self, peer, key, layout, LayoutTarget::Bytes(target), token)
        }?;
        Ok(Reading::InFlight)
    }

    /// Asynchronous as `read`; `None` where the blocks are short (see `read_blocks`).
    unsafe fn read_layout_into_blocks(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        layout: &RemoteLayout,
        blocks: &Blocks,
        len: usize,
        token: u64,
    ) -> Result<Option<Reading>, PmlError> {
        let into = LayoutTarget::Blocks(blocks, len);
        // SAFETY: forwarded from this function's contract.
        let reading = unsafe { VerbsTransport::read_layout(self, peer, key, layout, into, token) }?;
        Ok(reading.then_some(Reading::InFlight))
    }

    /// Offers a non-contiguous send to be read in place, its layout in the offer, where
    /// `expose_layout` takes it.
    unsafe fn expose_blocks(&mut self, _peer: Rank, blocks: &Blocks) -> Option<BlocksOffer> {
        // SAFETY: forwarded from this function's contract.
        let (rkey, id) = unsafe { VerbsTransport::expose_layout(self, blocks) }?;
        Some(BlocksOffer {
            key: RemoteKey {
                addr: blocks.base(),
                key: u64::from(rkey),
            },
            layout: true,
            registration: Some(Registration::Verbs(id)),
        })
    }

    /// Registers the buffer of a send that goes by rendezvous, for the receiver's RDMA READ.
    fn expose(
        &mut self,
        peer: Rank,
        buf: *const u8,
        len: usize,
        sends_eagerly: impl FnOnce() -> bool,
    ) -> Result<Exposure, PmlError> {
        let mut exposure = Exposure::plain(buf);
        if !sends_eagerly() {
            let (rkey, id) = VerbsTransport::expose(self, buf as usize, len).map_err(|cause| {
                PmlError::transport(peer, format!("exposing a {len}-byte send buffer: {cause}"))
            })?;
            exposure.key.key = u64::from(rkey);
            exposure.registration = Some(Registration::Verbs(id));
        }
        Ok(exposure)
    }

    fn release(&mut self, registration: Registration) {
        #[allow(irrefutable_let_patterns)]
        if let Registration::Verbs(id) = registration {
            VerbsTransport::release(self, id);
        }
    }

    /// Peers address the window by its virtual address.
    fn expose_window(
        &mut self,
        buf: *mut u8,
        len: usize,
    ) -> Result<Option<(RemoteKey, u64)>, String> {
        let (rkey, id) = VerbsTransport::expose_window(self, buf, len)?;
        let key = RemoteKey {
            addr: buf as u64,
            key: u64::from(rkey),
        };
        Ok(Some((key, id)))
    }

    fn release_window(&mut self, id: u64) {
        VerbsTransport::release_window(self, id);
    }

    unsafe fn rma(
        &mut self,
        peer: Rank,
        op: RmaOp,
        remote: RemoteKey,
    ) -> Result<Option<RmaPosted>, PmlError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { VerbsTransport::rma(self, peer, op, remote) }
    }

    fn rma_done(&self, peer: Rank, ticket: u64) -> Result<bool, PmlError> {
        VerbsTransport::rma_done(self, peer, ticket)
    }

    fn rma_result(&self, peer: Rank, ticket: u64) -> u64 {
        VerbsTransport::rma_result(self, peer, ticket)
    }

    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        VerbsTransport::sleep(self, timeout)
    }

    fn wake_fd(&mut self) -> Result<Option<RawFd>, EngineError> {
        Ok(Some(VerbsTransport::wake_fd(self)))
    }

    fn before_wait(&mut self) -> Result<bool, PmlError> {
        VerbsTransport::before_wait(self)
    }

    fn after_wait(&mut self) {
        VerbsTransport::after_wait(self);
    }

    /// On the completion channel, as `sleep`, after arming it and looking once more.
    fn begin_nap(&mut self) -> Result<NapStart, PmlError> {
        if VerbsTransport::before_wait(self)? {
            VerbsTransport::after_wait(self);
            return Ok(NapStart::Busy);
        }
        Ok(NapStart::Sleep(Nap::on_fd(VerbsTransport::wake_fd(self))))
    }

    fn end_nap(&mut self, _timed_out: bool) {
        VerbsTransport::after_wait(self);
    }

    /// The device may still be writing RDMA READs into receive buffers: it stops first.
    fn stop(&mut self) {
        VerbsTransport::stop(self);
    }

    fn count(&self, counters: &mut Counters) {
        self.count_reads(counters);
        self.count_rma(counters);
    }

    fn describe(&self, peers: usize) -> String {
        format!(
            "{peers} ranks over verbs on {}, eager (SEND) up to {} bytes, rendezvous by RDMA \
             READ (into a receive's blocks by scatter-gather lists of up to {} entries where \
             they average {} bytes or more; of a send's blocks in place, a READ a run, where \
             they average {} bytes or more), windows by RDMA WRITE, READ and {}, at most {} \
             sends in flight (the completion queue's room), registration cache {}",
            self.device_name(),
            self.eager_limit.min(self.frame_size()),
            self.max_read_sge(),
            self.sge_min_block(),
            self.send_min_block(),
            if self.does_atomics() {
                "atomics"
            } else {
                "active messages for atomics (the device has none)"
            },
            self.send_cap(),
            if self.caching() {
                "on"
            } else if self.reg_cache_wanted {
                "off (install mpirt::TrackingAllocator as the global allocator to turn it on)"
            } else {
                "off (MPIRT_VERBS_REG_CACHE=0)"
            }
        )
    }
}
