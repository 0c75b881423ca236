//! The one place that names every transport: the enum the engine holds them in (static
//! dispatch, one `match` per method, so that a shared-memory send inlines into the engine's),
//! and the order in which they are opened and claim the peers.

use std::os::fd::RawFd;
use std::time::Duration;

use super::loopback::Loopback;
#[cfg(feature = "ofi")]
use super::ofi::OfiTransport;
use super::shm::{ShmOpening, ShmPeers};
use super::tcp::TcpTransport;
#[cfg(feature = "verbs")]
use super::verbs::VerbsTransport;
use super::{
    BlocksOffer, Caps, Exposure, Job, Peer, Polled, Reading, RmaOp, RmaPosted, Sent, Sink,
    Transport,
};
use crate::blocks::{Blocks, PackedRange};
use crate::config::TransportChoice;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::nap::NapStart;
use crate::pml_api::{Counters, EngineError};
use crate::protocol::RemoteLayout;
use crate::wire::RemoteKey;

/// What a transport did to let peers read a send buffer (a verbs or libfabric memory
/// registration), undone when the send completes; no other transport makes one (without
/// those features, no value exists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    #[cfg(feature = "verbs")]
    Verbs(super::verbs::MrId),
    #[cfg(feature = "ofi")]
    Ofi(super::ofi::OfiMr),
}

/// A plain tag (no niche in a variant's fields): each match is one load and compare. Shared
/// memory, the variant whose sends and polls run on every small message, is tag 0, which
/// a match tests first (one compare fewer a send and a poll).
#[repr(u8)]
pub enum AnyTransport {
    Shm(ShmPeers),
    Loopback(Loopback),
    Tcp(TcpTransport),
    #[cfg(feature = "verbs")]
    Verbs(VerbsTransport),
    #[cfg(feature = "ofi")]
    Ofi(OfiTransport),
}

/// Calls `$call` on whichever transport `$any` holds, as `$t`.
macro_rules! each {
    ($any:expr, $t:ident => $call:expr) => {
        match $any {
            AnyTransport::Shm($t) => $call,
            AnyTransport::Loopback($t) => $call,
            AnyTransport::Tcp($t) => $call,
            #[cfg(feature = "verbs")]
            AnyTransport::Verbs($t) => $call,
            #[cfg(feature = "ofi")]
            AnyTransport::Ofi($t) => $call,
        }
    };
}

/// The transports between the first fence of wire-up and the second: each published what
/// its peers need (and the host's first rank made the shared-memory segment).
pub struct Opening {
    loopback: Loopback,
    shm: Option<ShmOpening>,
    #[cfg(feature = "verbs")]
    verbs: Option<VerbsTransport>,
    #[cfg(feature = "ofi")]
    ofi: Option<OfiTransport>,
    tcp: Option<TcpTransport>,
    /// Why a transport that could have been used is not, for `--verbose`.
    notes: Vec<String>,
}

/// The transports connected, each with the ranks it carries.
pub struct Connected {
    pub transports: Vec<(AnyTransport, Vec<Rank>)>,
    pub notes: Vec<String>,
}

impl Opening {
    /// Opens every transport the configuration and the job's hosts call for: loopback for
    /// this rank, shared memory for the ranks of its host, verbs, libfabric and TCP for the rest.
    pub fn open(job: &mut Job) -> Result<Opening, EngineError> {
        let loopback = Loopback::open(job);
        let shm = ShmOpening::open(job)?;
        let remote: Vec<Rank> = (0..job.size)
            .filter(|&r| r != job.rank && !shm.as_ref().is_some_and(|s| s.carries(r)))
            .collect();
        #[cfg(not(feature = "verbs"))]
        if job.config.transport == TransportChoice::Verbs {
            return Err(EngineError::Config(
                "MPIRT_TRANSPORT=verbs, but this program was built without RDMA verbs \
                 (build it with the cargo feature `verbs`)"
                    .into(),
            ));
        }
        #[cfg(not(feature = "ofi"))]
        if job.config.transport == TransportChoice::Ofi {
            return Err(EngineError::Config(
                "MPIRT_TRANSPORT=ofi, but this program was built without libfabric (build it \
                 with the cargo feature `ofi`)"
                    .into(),
            ));
        }
        #[cfg(not(feature = "verbs"))]
        let verbs_note: Option<String> = None;
        #[cfg(feature = "verbs")]
        let (verbs, verbs_note) = VerbsTransport::open(job, &remote)?;
        #[cfg(not(feature = "ofi"))]
        let ofi_note: Option<String> = None;
        #[cfg(feature = "ofi")]
        let (ofi, ofi_note) = OfiTransport::open(job, &remote)?;
        let tcp = if !remote.is_empty()
            && !matches!(
                job.config.transport,
                TransportChoice::Verbs | TransportChoice::Ofi
            ) {
            Some(TcpTransport::open(job, shm.is_some())?)
        } else {
            None
        };
        let notes = verbs_note
            .map(|n| format!("no verbs: {n}"))
            .into_iter()
            .chain(ofi_note.map(|n| format!("no ofi: {n}")))
            .collect();
        Ok(Opening {
            loopback,
            shm,
            #[cfg(feature = "verbs")]
            verbs,
            #[cfg(feature = "ofi")]
            ofi,
            tcp,
            notes,
        })
    }

    /// Connects each transport (after the first fence), in order of preference: each
    /// carries what it can of the ranks the ones before it left.
    pub fn connect(self, job: &mut Job) -> Result<Connected, EngineError> {
        let mut unclaimed: Vec<Rank> = (0..job.size).filter(|&r| r != job.rank).collect();
        let mut transports = Vec::new();
        let mut add = |t: AnyTransport, carried: Vec<Rank>, unclaimed: &mut Vec<Rank>| {
            unclaimed.retain(|r| !carried.contains(r));
            transports.push((t, carried));
        };
        if let Some(shm) = self.shm {
            let shm = shm.connect(job)?;
            let carried = shm
                .ranks()
                .iter()
                .copied()
                .filter(|&r| r != job.rank)
                .collect();
            add(AnyTransport::Shm(shm), carried, &mut unclaimed);
        }
        #[cfg(feature = "verbs")]
        if let Some(mut verbs) = self.verbs {
            let carried = verbs.connect_peers(job, &unclaimed)?;
            add(AnyTransport::Verbs(verbs), carried, &mut unclaimed);
        }
        #[cfg(feature = "ofi")]
        if let Some(mut ofi) = self.ofi {
            let carried = ofi.connect_peers(job, &unclaimed)?;
            add(AnyTransport::Ofi(ofi), carried, &mut unclaimed);
        }
        if let Some(mut tcp) = self.tcp {
            let carried = tcp.connect_peers(job, &unclaimed)?;
            add(AnyTransport::Tcp(tcp), carried, &mut unclaimed);
        }
        // Last: the engine polls the transports that peers feed (`wakes`) every round, in
        // this order, and the others only after it handed them frames.
        add(
            AnyTransport::Loopback(self.loopback),
            vec![job.rank],
            &mut unclaimed,
        );
        Ok(Connected {
            transports,
            notes: self.notes,
        })
    }
}

impl AnyTransport {
    /// Whether a peer can wake this transport's sleep, that is, send it anything: loopback's
    /// frames come from this rank itself, never while it sleeps, and only after it sent them.
    pub fn wakes(&self) -> bool {
        !matches!(self, AnyTransport::Loopback(_))
    }
}

impl Transport for AnyTransport {
    fn finish(&mut self, job: &mut Job) -> Result<(), EngineError> {
        each!(self, t => Transport::finish(t, job))
    }

    #[inline]
    fn caps(&self) -> Caps {
        each!(self, t => Transport::caps(t))
    }

    fn peer_index(&self, peer: Rank) -> u32 {
        each!(self, t => Transport::peer_index(t, peer))
    }

    #[inline]
    fn try_send(&mut self, peer: Peer, header: &[u8], payload: &[u8]) -> Result<Sent, PmlError> {
        each!(self, t => Transport::try_send(t, peer, header, payload))
    }

    #[inline]
    fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError> {
        each!(self, t => Transport::poll(t, sink))
    }

    #[inline]
    fn has_work(&self) -> bool {
        each!(self, t => Transport::has_work(t))
    }

    fn read(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        target: &mut [u8],
        token: u64,
    ) -> Result<Reading, PmlError> {
        each!(self, t => Transport::read(t, peer, key, target, token))
    }

    unsafe fn read_into_blocks(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        blocks: &Blocks,
        len: usize,
        token: u64,
    ) -> Result<Option<Reading>, PmlError> {
        // SAFETY: forwarded from this function's contract.
        each!(self, t => unsafe { Transport::read_into_blocks(t, peer, key, blocks, len, token) })
    }

    fn read_layout(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        layout: &RemoteLayout,
        target: &mut [u8],
        token: u64,
    ) -> Result<Reading, PmlError> {
        each!(self, t => Transport::read_layout(t, peer, key, layout, target, token))
    }

    unsafe fn read_layout_into_blocks(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        layout: &RemoteLayout,
        blocks: &Blocks,
        len: usize,
        token: u64,
    ) -> Result<Option<Reading>, PmlError> {
        // SAFETY: forwarded from this function's contract.
        each!(self, t => unsafe {
            Transport::read_layout_into_blocks(t, peer, key, layout, blocks, len, token)
        })
    }

    #[inline]
    fn expose(
        &mut self,
        peer: Rank,
        buf: *const u8,
        len: usize,
        sends_eagerly: impl FnOnce() -> bool,
    ) -> Result<Exposure, PmlError> {
        each!(self, t => Transport::expose(t, peer, buf, len, sends_eagerly))
    }

    unsafe fn try_send_blocks(
        &mut self,
        peer: Peer,
        header: &[u8],
        blocks: &Blocks,
        range: PackedRange,
    ) -> Result<Option<Sent>, PmlError> {
        // SAFETY: this function's contract, passed on unchanged to the transport it holds.
        each!(self, t => unsafe { Transport::try_send_blocks(t, peer, header, blocks, range) })
    }

    fn streams_blocks(&self) -> bool {
        each!(self, t => Transport::streams_blocks(t))
    }

    unsafe fn expose_blocks(&mut self, peer: Rank, blocks: &Blocks) -> Option<BlocksOffer> {
        // SAFETY: forwarded from this function's contract.
        each!(self, t => unsafe { Transport::expose_blocks(t, peer, blocks) })
    }

    fn release(&mut self, registration: Registration) {
        each!(self, t => Transport::release(t, registration))
    }

    fn expose_window(
        &mut self,
        buf: *mut u8,
        len: usize,
    ) -> Result<Option<(RemoteKey, u64)>, String> {
        each!(self, t => Transport::expose_window(t, buf, len))
    }

    fn release_window(&mut self, id: u64) {
        each!(self, t => Transport::release_window(t, id))
    }

    unsafe fn rma(
        &mut self,
        peer: Rank,
        op: RmaOp,
        remote: RemoteKey,
    ) -> Result<Option<RmaPosted>, PmlError> {
        // SAFETY: forwarded from this function's contract.
        each!(self, t => unsafe { Transport::rma(t, peer, op, remote) })
    }

    fn rma_done(&self, peer: Rank, ticket: u64) -> Result<bool, PmlError> {
        each!(self, t => Transport::rma_done(t, peer, ticket))
    }

    fn rma_result(&self, peer: Rank, ticket: u64) -> u64 {
        each!(self, t => Transport::rma_result(t, peer, ticket))
    }

    fn bytes_in_flight(&self) -> usize {
        each!(self, t => Transport::bytes_in_flight(t))
    }

    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        each!(self, t => Transport::sleep(t, timeout))
    }

    fn wake_fd(&mut self) -> Result<Option<RawFd>, EngineError> {
        each!(self, t => Transport::wake_fd(t))
    }

    fn before_wait(&mut self) -> Result<bool, PmlError> {
        each!(self, t => Transport::before_wait(t))
    }

    fn after_wait(&mut self) {
        each!(self, t => Transport::after_wait(t))
    }

    fn begin_nap(&mut self) -> Result<NapStart, PmlError> {
        each!(self, t => Transport::begin_nap(t))
    }

    fn end_nap(&mut self, timed_out: bool) {
        each!(self, t => Transport::end_nap(t, timed_out))
    }

    fn wake_nap(&self) {
        each!(self, t => Transport::wake_nap(t))
    }

    fn wake_peer(&self, peer: Rank) -> bool {
        each!(self, t => Transport::wake_peer(t, peer))
    }

    fn polled(&self) -> Option<Polled> {
        each!(self, t => Transport::polled(t))
    }

    fn stop(&mut self) {
        each!(self, t => Transport::stop(t))
    }

    fn count(&self, counters: &mut Counters) {
        each!(self, t => Transport::count(t, counters))
    }

    fn describe(&self, peers: usize) -> String {
        each!(self, t => Transport::describe(t, peers))
    }
}
