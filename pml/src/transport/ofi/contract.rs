//! OFI under the transport contract: its wire-up from the bootstrap (the endpoint's address
//! published, peers' addresses inserted before the last fence), its limits, its one-sided
//! operations (where the provider has RMA) and its `--verbose` clause.

use std::os::fd::RawFd;
use std::time::Duration;

use bootstrap::libfabric::UNIVERSE_SIZE;

use super::provider::{self, WindowsByRma};
use super::{OfiConfig, OfiTransport};
use crate::config::TransportChoice;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::pml_api::{Counters, EngineError};
use crate::transport::{
    Caps, Exposure, Job, Peer, Polled, Reading, Registration, RmaOp, RmaPosted, Sent, Sink,
    Transport,
};
use crate::wire::RemoteKey;

/// Which way windows go over `f`, as `--verbose` says it: by RMA unasked, only when asked
/// (`MPIRT_WINDOW_PATH=rdma`), or by messages, and why.
fn windows_by(f: &super::fabric::Fabric) -> String {
    let rma = if let Some(cause) = &f.rma_off {
        return format!("windows by messages (one-sided operations turned off: {cause})");
    } else if !f.granted.remote_write {
        return "windows by messages (the provider has no RMA writes)".into();
    } else if f.granted.atomics {
        "windows by fi_write, fi_read and fi_atomic".into()
    } else if let Some(why) = provider::atomics_refused(&f.provider, f.plan) {
        format!(
            "windows by fi_write and fi_read (accumulates by messages: atomics not asked, {why})"
        )
    } else {
        "windows by fi_write and fi_read (accumulates by messages: the provider has no 8-byte \
         fetch-and-add and compare-and-swap)"
            .into()
    };
    match provider::windows_by_rma(&f.provider) {
        WindowsByRma::Default => rma,
        WindowsByRma::OptIn => format!(
            "{rma} only with MPIRT_WINDOW_PATH=rdma, else by messages (the provider emulates \
             RMA in the target's progress, slower than messages)"
        ),
        WindowsByRma::Never => "windows by messages (the provider's RMA crashes ranks, three or \
             more: a transfer entry corrupted inside libfabric 1.17's rxd progress)"
            .into(),
    }
}

impl OfiTransport {
    /// Opens the endpoint when OFI is asked for (every other rank), or (`auto`) when
    /// `remote` (ranks no same-host transport carries) is not empty and a provider with a
    /// real device is there, and publishes it (empty without one: peers then use another
    /// transport for this pair). With `auto`, a failure is a note for `--verbose`.
    pub fn open(
        job: &mut Job,
        remote: &[Rank],
    ) -> Result<(Option<OfiTransport>, Option<String>), EngineError> {
        let config = &job.config;
        let forced = config.transport == TransportChoice::Ofi;
        let peers: Vec<Rank> = if forced {
            (0..job.size).filter(|&r| r != job.rank).collect()
        } else if config.transport == TransportChoice::Auto {
            remote.to_vec()
        } else {
            Vec::new()
        };
        let mut note = None;
        let ofi = if peers.is_empty() {
            None
        } else {
            let ofi_config = OfiConfig {
                provider: config.ofi_provider.as_deref(),
                job_id: &job.job_id,
                fabric_only: !forced && config.ofi_provider.is_none(),
                rma: config.ofi_rma,
                reg_cache: config.ofi_reg_cache,
                eager_limit: config.ofi_eager_limit,
                peer_timeout: config.ofi_peer_timeout,
                rma_timeout: config.ofi_rma_timeout,
                waits_spin: !job.wait_budgets().0.is_zero(),
            };
            match OfiTransport::new(job.rank, job.size, job.host(), &ofi_config) {
                Ok(t) => t,
                Err(e) if forced => {
                    return Err(EngineError::Transport(format!(
                        "ofi on {}: {e}",
                        job.host()
                    )))
                }
                Err(e) => {
                    note = Some(e);
                    None
                }
            }
        };
        let endpoint = match &ofi {
            Some(t) => t
                .endpoint()
                .map_err(|e| EngineError::Transport(format!("ofi on {}: {e}", job.host())))?,
            None => String::new(),
        };
        job.put(&format!("pml.ofi.{}", job.rank), endpoint.as_bytes())?;
        Ok((ofi, note))
    }

    /// Inserts the address of each rank of `unclaimed` that published an endpoint on the
    /// same provider; carries those. With `--transport ofi`, a peer on another provider is
    /// an error; with `auto`, TCP carries it. Where the provider granted RMA, adds this
    /// rank's own address for operations on its own window: failing that is an error with
    /// `--transport ofi`, and with `auto` turns one-sided operations off (`--verbose` says
    /// why; windows go by messages).
    pub fn connect_peers(
        &mut self,
        job: &mut Job,
        unclaimed: &[Rank],
    ) -> Result<Vec<Rank>, EngineError> {
        let forced = job.config.transport == TransportChoice::Ofi;
        let mut carried = Vec::new();
        for &r in unclaimed {
            let endpoint = job.get(r, &format!("pml.ofi.{r}"))?;
            if endpoint.is_empty() {
                continue;
            }
            match self.connect(r, &String::from_utf8_lossy(&endpoint)) {
                Ok(()) => carried.push(r),
                Err(e) if forced => {
                    return Err(EngineError::Transport(format!(
                        "ofi on {}: {e}",
                        job.host()
                    )))
                }
                Err(_) => {}
            }
        }
        if self.fabric.granted.remote_write {
            if let Err(e) = self.connect_self() {
                if forced {
                    return Err(EngineError::Transport(format!(
                        "ofi on {}: {e}",
                        job.host()
                    )));
                }
                // Under auto the messages still go over OFI; windows take them too.
                self.fabric.granted.remote_write = false;
                self.fabric.granted.atomics = false;
                self.fabric.rma_off = Some(e);
            }
        }
        Ok(carried)
    }
}

impl Transport for OfiTransport {
    fn caps(&self) -> Caps {
        let windows = provider::windows_by_rma(&self.fabric.provider);
        Caps {
            eager_limit: self.eager_limit,
            max_frame: self.frame_size,
            remote_read: self.fabric.granted.remote_read,
            remote_write: self.fabric.granted.remote_write && windows != WindowsByRma::Never,
            atomics: self.fabric.granted.atomics && windows != WindowsByRma::Never,
            rma_by_default: windows == WindowsByRma::Default,
            // A frame `send` took is the provider's copy (an inject) or ours (a send buffer),
            // whole or not at all: the user's buffer is free at once, so a small standard
            // send completes inside the call, with no request to make, queue and collect.
            sends_complete_on_return: true,
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
        OfiTransport::poll(self, sink)
    }

    /// Completions must be read to know (and reading them is what moves data).
    fn has_work(&self) -> bool {
        true
    }

    fn bytes_in_flight(&self) -> usize {
        OfiTransport::bytes_in_flight(self)
    }

    /// Asynchronous: `poll` reports it done when the last piece completes.
    fn read(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        target: &mut [u8],
        token: u64,
    ) -> Result<Reading, PmlError> {
        OfiTransport::read(self, peer, key, target, token)?;
        Ok(Reading::InFlight)
    }

    /// Registers the buffer of a send that goes by rendezvous, for the receiver's fi_read.
    fn expose(
        &mut self,
        peer: Rank,
        buf: *const u8,
        len: usize,
        sends_eagerly: impl FnOnce() -> bool,
    ) -> Result<Exposure, PmlError> {
        let mut exposure = Exposure::plain(buf);
        if self.fabric.granted.remote_read && !sends_eagerly() {
            let (key, mr) = OfiTransport::expose(self, buf, len).map_err(|cause| {
                PmlError::transport(peer, format!("exposing a {len}-byte send buffer: {cause}"))
            })?;
            exposure.key = key;
            exposure.registration = Some(Registration::Ofi(mr));
        }
        Ok(exposure)
    }

    fn release(&mut self, registration: Registration) {
        #[allow(irrefutable_let_patterns)]
        if let Registration::Ofi(mr) = registration {
            OfiTransport::release(self, mr);
        }
    }

    /// Registers the window; peers address it as the provider's mr_mode says.
    fn expose_window(
        &mut self,
        buf: *mut u8,
        len: usize,
    ) -> Result<Option<(RemoteKey, u64)>, String> {
        if !self.fabric.granted.remote_write {
            return Ok(None);
        }
        OfiTransport::expose_window(self, buf, len).map(Some)
    }

    fn release_window(&mut self, id: u64) {
        OfiTransport::release_window(self, id);
    }

    unsafe fn rma(
        &mut self,
        peer: Rank,
        op: RmaOp,
        remote: RemoteKey,
    ) -> Result<Option<RmaPosted>, PmlError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { OfiTransport::rma(self, peer, op, remote) }
    }

    fn rma_done(&self, peer: Rank, ticket: u64) -> Result<bool, PmlError> {
        OfiTransport::rma_done(self, peer, ticket)
    }

    fn rma_result(&self, peer: Rank, ticket: u64) -> u64 {
        OfiTransport::rma_result(self, peer, ticket)
    }

    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        OfiTransport::sleep(self, timeout)
    }

    fn wake_fd(&mut self) -> Result<Option<RawFd>, EngineError> {
        Ok(OfiTransport::wake_fd(self))
    }

    fn before_wait(&mut self) -> Result<bool, PmlError> {
        OfiTransport::before_wait(self)
    }

    fn after_wait(&mut self) {}

    fn polled(&self) -> Option<Polled> {
        OfiTransport::polled(self)
    }

    /// Reads may still be writing into receive buffers: the endpoint closes first.
    fn stop(&mut self) {
        OfiTransport::stop(self);
    }

    fn count(&self, counters: &mut Counters) {
        counters.registrations += self.registrations();
        counters.ofi_exposed += self.exposures() as u64;
        counters.ofi_credit_frames += self.credit_frames();
        counters.ofi_fd_sleeps += self.fd_sleeps;
        self.count_rma(counters);
    }

    fn describe(&self, peers: usize) -> String {
        let f = &self.fabric;
        let passed_over: String = f
            .passed_over
            .iter()
            .map(|why| format!("; passed over: {why}"))
            .collect();
        format!(
            "{peers} ranks over libfabric {} (fabric {}, domain {}, mr_mode {}, \
             {UNIVERSE_SIZE} {}{passed_over}), eager up to {} bytes (inject up to {}), \
             rendezvous by {}, {}",
            f.provider,
            f.fabric_name,
            f.domain_name,
            f.plan.describe(),
            // As libfabric read it at its start: set by the user, rsrun or mpirt's initialize.
            std::env::var(UNIVERSE_SIZE).unwrap_or_else(|_| "unset".into()),
            self.eager_limit,
            f.inject_size,
            if !f.granted.remote_read {
                "DATA frames (the provider has no RMA)"
            } else if self.caching() {
                "fi_read (registrations cached)"
            } else {
                "fi_read (registrations not cached: MPIRT_OFI_REG_CACHE=0, or the program's \
                 allocator is not mpirt's)"
            },
            windows_by(f),
        )
    }
}
