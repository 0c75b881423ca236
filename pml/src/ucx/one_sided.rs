//! The UCX PML's [`OneSided`]: windows' memory mapped with `ucp_mem_map` and named to peers
//! by packed rkeys (each peer unpacks them on its endpoint), puts by `ucp_put_nbx`, gets by
//! `ucp_get_nbx`, and 8-byte fetch-and-add and compare-and-swap by `ucp_atomic_op_nbx`. UCX
//! does them in hardware where a transport can, and emulates them by active messages
//! elsewhere (TCP; shared memory's atomics), which the target's worker applies when it
//! progresses, as the target's waits do.
//!
//! Completion at the target: a get or a fetching atomic is done at the target once its
//! request completed (the data or the old value came back); a put's request completes once
//! its buffer may be reused, before the target has it, so a put is done at the target only
//! once a flush of the endpoint (`ucp_ep_flush_nbx`) started after it completed. `rma_done`
//! starts that flush where a ticket it is asked about covers a put.
//!
//! Order: the window layer posts some operations together that must run in order, as a
//! verbs queue pair runs them (a lock word's take and the read behind it; an accumulate and
//! a fetch after it, which MPI orders). UCX need not: its emulated atomics travel as active
//! messages while a get over shared memory (cma) may be done inside the call, so a read
//! posted after an atomic could run first. Rather than lean on `ucp_worker_fence` to order
//! one transport's operations against another's, a get or an atomic is posted only once
//! the atomics before it to its target completed (`settle_atomics`): a round trip more for a
//! locked accumulate (the take, then the read) and for each element of an unfetched integer
//! sum, none for a `fetch_and_op`, which waits for its result anyway. Puts need no order
//! among themselves or after atomics (MPI leaves such conflicts undefined within an epoch),
//! and the window layer waits for them where it needs them done.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::mem;
use std::ptr;

use slab::Slab;

use super::ffi;
use super::pml::UcxPml;
use super::request::{self, peek};
use super::status::{self, Started};
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::one_sided::{OneSided, RmaReach, WindowExposure};
use crate::pml_api::Counters;
use crate::transport::RmaOp;
use crate::wire::RemoteKey;

/// The result slots of each peer, reused round-robin by ticket: an atomic's result stays
/// until `DEPTH` tickets later, long after its caller read it (one atomic is in flight to a
/// peer at a time, `settle_atomics`).
const DEPTH: usize = 64;

/// `ucp_dt_make_contig(8)`: atomics on 8-byte words.
const WORD: ffi::ucp_datatype_t = ((8 as ffi::ucp_datatype_t) << ffi::UCP_DATATYPE_SHIFT)
    | ffi::UCP_DATATYPE_CONTIG as ffi::ucp_datatype_t;

fn failure(peer: Rank, cause: String) -> PmlError {
    PmlError::OneSided {
        peer,
        cause: cause.into(),
    }
}

/// What one-sided operations to one peer have in flight.
struct PeerRma {
    /// The last ticket given.
    posted: u64,
    /// UCX's requests of operations not yet completed, with their tickets and whether each
    /// is an atomic, oldest first.
    in_flight: VecDeque<(u64, *mut c_void, bool)>,
    /// The first put not covered by a flush started since (0: none).
    unflushed: u64,
    /// The flush of the endpoint in flight, with the first put it covers.
    flush: Option<(u64, *mut c_void)>,
    /// The earliest ticket that failed, and why; later tickets' `rma_done` report it.
    failed: Option<(u64, String)>,
    /// Each atomic's operand and result (`ucp_atomic_op_nbx`'s buffer and reply buffer),
    /// at its ticket modulo `DEPTH`: memory UCX reads and writes until it completed.
    slots: Box<[[u64; 2]; DEPTH]>,
}

impl PeerRma {
    fn new() -> PeerRma {
        PeerRma {
            posted: 0,
            in_flight: VecDeque::new(),
            unflushed: 0,
            flush: None,
            failed: None,
            slots: Box::new([[0; 2]; DEPTH]),
        }
    }

    /// Keeps the failure of ticket `at`, where it is the earliest.
    fn fail(&mut self, at: u64, cause: String) {
        if self.failed.as_ref().is_none_or(|(kept, _)| at < *kept) {
            self.failed = Some((at, cause));
        }
    }

    /// Frees the requests that completed (and the flush, where it did), keeping the first
    /// failure among them.
    fn reap(&mut self, peer: Rank) {
        let mut failed = Vec::new();
        self.in_flight.retain(|&(ticket, req, _)| {
            // SAFETY: a request UCX returned, freed only here once it finished.
            if unsafe { peek(req) }.is_none() {
                return true;
            }
            // SAFETY: finished (peeked above), freed once: it leaves `in_flight`.
            let (status, _) = unsafe { request::take_and_free(req) };
            if status != ffi::UCS_OK {
                failed.push((ticket, status));
            }
            false
        });
        if let Some((from, req)) = self.flush {
            // SAFETY: the flush's request, live until freed here once it finished.
            if unsafe { peek(req) }.is_some() {
                // SAFETY: finished, freed once (the flush is forgotten below).
                let (status, _) = unsafe { request::take_and_free(req) };
                self.flush = None;
                if status != ffi::UCS_OK {
                    failed.push((from, status));
                }
            }
        }
        for (ticket, status) in failed {
            self.fail(
                ticket,
                format!(
                    "a one-sided operation to rank {peer} failed at UCX: {}",
                    status::describe(status)
                ),
            );
        }
    }

    /// Gives UCX back what is still in flight (the PML is going): each request is released
    /// by UCX once it completes.
    fn abandon(&mut self) {
        let flush = self.flush.take().map(|(_, req)| req);
        for req in self.in_flight.drain(..).map(|(_, req, _)| req).chain(flush) {
            // SAFETY: a live request of this worker, freed once (drained).
            unsafe { ffi::ucp_request_free(req) };
        }
    }
}

/// The UCX PML's one-sided state: mapped windows, unpacked rkeys, and each peer's
/// operations.
pub struct Rma {
    /// Windows mapped by `expose_window`, by the id in their exposure.
    windows: Slab<ffi::ucp_mem_h>,
    /// Peers' rkeys unpacked by `remote_key`, by the key it gave.
    rkeys: Slab<ffi::ucp_rkey_h>,
    peers: Vec<PeerRma>,
    writes: u64,
    reads: u64,
    atomics: u64,
}

impl Rma {
    pub fn new(size: u32) -> Rma {
        Rma {
            windows: Slab::new(),
            rkeys: Slab::new(),
            peers: (0..size).map(|_| PeerRma::new()).collect(),
            writes: 0,
            reads: 0,
            atomics: 0,
        }
    }

    /// Adds the puts, gets and atomics posted to `counters` (`rma_writes`, `rma_reads`,
    /// `rma_atomics`).
    pub fn count(&self, counters: &mut Counters) {
        counters.rma_writes += self.writes;
        counters.rma_reads += self.reads;
        counters.rma_atomics += self.atomics;
    }

    /// Releases everything before the endpoints close and the worker goes: requests in
    /// flight, rkeys and mapped windows (of windows never freed).
    ///
    /// # Safety
    /// `context` is the live context every window was mapped in.
    pub unsafe fn release(&mut self, context: ffi::ucp_context_h) {
        for peer in &mut self.peers {
            peer.abandon();
        }
        for rkey in self.rkeys.drain() {
            // SAFETY: unpacked in `remote_key`, destroyed once (drained).
            unsafe { ffi::ucp_rkey_destroy(rkey) };
        }
        for memh in self.windows.drain() {
            // SAFETY: mapped in `context` by `expose_window`, unmapped once (drained).
            unsafe { ffi::ucp_mem_unmap(context, memh) };
        }
    }
}

impl UcxPml {
    /// Waits, progressing the worker, until every atomic posted to `peer` completed (see
    /// the module's documentation on order).
    fn settle_atomics(&mut self, peer: Rank) -> Result<(), PmlError> {
        loop {
            let p = &mut self.rma.peers[peer as usize];
            p.reap(peer);
            if !p.in_flight.iter().any(|&(_, _, atomic)| atomic) {
                return Ok(());
            }
            self.check_running()?;
            self.worker.progress();
        }
    }
}

impl OneSided for UcxPml {
    /// Maps the window's memory (`ucp_mem_map` of the buffer, registering it where a
    /// transport needs that) and packs its rkey.
    fn expose_window(
        &mut self,
        buf: *mut u8,
        len: usize,
    ) -> Result<Option<WindowExposure>, PmlError> {
        self.check_running()?;
        let me = self.rank;
        let failed = |what: &str, status| {
            failure(
                me,
                format!(
                    "{what} of a window's {len} bytes at {buf:p}: {}",
                    status::describe(status)
                ),
            )
        };
        // SAFETY: all-zero is a valid ucp_mem_map_params_t; the fields set are named in
        // the field mask.
        let mut params: ffi::ucp_mem_map_params_t = unsafe { mem::zeroed() };
        params.field_mask =
            u64::from(ffi::UCP_MEM_MAP_PARAM_FIELD_ADDRESS | ffi::UCP_MEM_MAP_PARAM_FIELD_LENGTH);
        params.address = buf.cast();
        params.length = len as ffi::size_t;
        let mut memh = ptr::null_mut();
        // SAFETY: the context is live; the caller's window memory stays mapped until
        // `release_window` (the window outlives its exposure); `memh` receives the handle.
        let mapped = unsafe { ffi::ucp_mem_map(self.worker.context(), &params, &mut memh) };
        if mapped != ffi::UCS_OK {
            return Err(failed("ucp_mem_map", mapped));
        }
        let (mut packed, mut size): (*mut c_void, ffi::size_t) = (ptr::null_mut(), 0);
        // SAFETY: `memh` was just mapped in this context; UCX fills both out-parameters.
        let status =
            unsafe { ffi::ucp_rkey_pack(self.worker.context(), memh, &mut packed, &mut size) };
        if status != ffi::UCS_OK {
            // SAFETY: mapped above, unmapped once.
            unsafe { ffi::ucp_mem_unmap(self.worker.context(), memh) };
            return Err(failed("ucp_rkey_pack", status));
        }
        // SAFETY: UCX returned `size` readable bytes at `packed`, copied before release.
        let key =
            unsafe { std::slice::from_raw_parts(packed.cast::<u8>(), size as usize) }.to_vec();
        // SAFETY: `packed` came from ucp_rkey_pack, released once.
        unsafe { ffi::ucp_rkey_buffer_release(packed) };
        let id = self.rma.windows.insert(memh) as u64;
        Ok(Some(WindowExposure {
            key,
            transport: 0,
            id,
        }))
    }

    fn release_window(&mut self, exposure: WindowExposure) {
        if let Some(memh) = self.rma.windows.try_remove(exposure.id as usize) {
            // SAFETY: mapped in `expose_window` in this context, removed so unmapped once;
            // no peer reaches the window any more (the caller's contract).
            unsafe { ffi::ucp_mem_unmap(self.worker.context(), memh) };
        }
    }

    /// `ucp_ep_rkey_unpack` on the endpoint to `peer`.
    fn remote_key(&mut self, peer: Rank, packed: &[u8]) -> Result<u64, PmlError> {
        let Some(ep) = self.endpoints.get(peer as usize) else {
            return Err(PmlError::UnknownPeer(peer));
        };
        let mut rkey = ptr::null_mut();
        // SAFETY: `ep` is a live endpoint of this worker; `packed` is a peer's
        // ucp_rkey_pack output, which UCX parses (copying what it needs) during the call.
        let status =
            unsafe { ffi::ucp_ep_rkey_unpack(ep.handle(), packed.as_ptr().cast(), &mut rkey) };
        if status != ffi::UCS_OK {
            return Err(failure(
                peer,
                format!(
                    "unpacking rank {peer}'s window rkey ({} bytes): {}",
                    packed.len(),
                    status::describe(status)
                ),
            ));
        }
        Ok(self.rma.rkeys.insert(rkey) as u64)
    }

    fn forget_key(&mut self, key: u64) {
        if let Some(rkey) = self.rma.rkeys.try_remove(key as usize) {
            // SAFETY: unpacked in `remote_key`, removed so destroyed once; no operation
            // through it is in flight (the caller's contract).
            unsafe { ffi::ucp_rkey_destroy(rkey) };
        }
    }

    /// Every rank: UCX does puts, gets and 8-byte atomics on every endpoint (emulating
    /// them where a transport lacks them), atomic with each other whichever way.
    fn rma_reach(&self, peer: Rank) -> Option<RmaReach> {
        (peer < self.size).then_some(RmaReach {
            atomics: true,
            by_default: true,
        })
    }

    unsafe fn rma(&mut self, peer: Rank, op: RmaOp, remote: RemoteKey) -> Result<u64, PmlError> {
        self.check_running()?;
        let Some(&rkey) = self.rma.rkeys.get(remote.key as usize) else {
            return Err(failure(
                peer,
                format!("a one-sided operation to rank {peer} names no unpacked rkey"),
            ));
        };
        let ep = match self.endpoints.get(peer as usize) {
            Some(ep) => ep.handle(),
            None => return Err(PmlError::UnknownPeer(peer)),
        };
        let ticket = self.rma.peers[peer as usize].posted + 1;
        let atomic = matches!(op, RmaOp::FetchAdd { .. } | RmaOp::CompareSwap { .. });
        if !matches!(op, RmaOp::Write { .. }) {
            self.settle_atomics(peer)?;
        }
        let p = &mut self.rma.peers[peer as usize];
        if let Some((_, cause)) = &p.failed {
            return Err(failure(
                peer,
                format!(
                    "a one-sided operation to rank {peer} was refused: an earlier one failed, \
                     which ends one-sided operations to it ({cause})"
                ),
            ));
        }
        let mut param = request::send_param();
        let (what, len, started) = match op {
            RmaOp::Write { local, len } => {
                // SAFETY: the caller keeps `local` readable and unchanged until the ticket
                // completed; `ep` and `rkey` (unpacked on it) are live; `param`'s callback
                // is the send kind, writing the request's state.
                let started = unsafe {
                    ffi::ucp_put_nbx(
                        ep,
                        local.cast(),
                        len as ffi::size_t,
                        remote.addr,
                        rkey,
                        &param,
                    )
                };
                ("ucp_put_nbx", len, started)
            }
            RmaOp::Read { local, len } => {
                // SAFETY: as for the put, `local` writable and untouched until completed.
                let started = unsafe {
                    ffi::ucp_get_nbx(
                        ep,
                        local.cast(),
                        len as ffi::size_t,
                        remote.addr,
                        rkey,
                        &param,
                    )
                };
                ("ucp_get_nbx", len, started)
            }
            RmaOp::FetchAdd { .. } | RmaOp::CompareSwap { .. } => {
                // Fetch-add: the operand is the addend and the reply the old value;
                // compare-and-swap: the operand is the value compared with, the reply
                // holds the new value going in and the old value coming back.
                let (opcode, operand, reply) = match op {
                    RmaOp::FetchAdd { add } => (ffi::UCP_ATOMIC_OP_ADD, add, 0),
                    RmaOp::CompareSwap { compare, swap } => {
                        (ffi::UCP_ATOMIC_OP_CSWAP, compare, swap)
                    }
                    _ => unreachable!("matched above"),
                };
                let slot = &mut p.slots[ticket as usize % DEPTH];
                *slot = [operand, reply];
                param.op_attr_mask |=
                    ffi::UCP_OP_ATTR_FIELD_DATATYPE | ffi::UCP_OP_ATTR_FIELD_REPLY_BUFFER;
                param.datatype = WORD;
                param.reply_buffer = ptr::from_mut(&mut slot[1]).cast();
                // SAFETY: the slot's operand and reply stay in place (boxed) and untouched
                // until the atomic completed (a newer atomic waits for it, and takes
                // another slot); `ep` and `rkey` as above; one 8-byte element.
                let started = unsafe {
                    ffi::ucp_atomic_op_nbx(
                        ep,
                        opcode,
                        ptr::from_ref(&slot[0]).cast(),
                        1,
                        remote.addr,
                        rkey,
                        &param,
                    )
                };
                ("ucp_atomic_op_nbx", 8, started)
            }
        };
        match status::started(what, started) {
            Ok(Started::Done) => {}
            Ok(Started::Pending(req)) => p.in_flight.push_back((ticket, req, atomic)),
            Err(e) => {
                return Err(failure(
                    peer,
                    format!("{what} of {len} bytes to rank {peer} failed: {e}"),
                ))
            }
        }
        p.posted = ticket;
        match op {
            RmaOp::Write { .. } => {
                self.rma.writes += 1;
                if p.unflushed == 0 {
                    p.unflushed = ticket;
                }
            }
            RmaOp::Read { .. } => self.rma.reads += 1,
            _ => self.rma.atomics += 1,
        }
        Ok(ticket)
    }

    fn rma_done(&mut self, peer: Rank, ticket: u64) -> Result<bool, PmlError> {
        let Some(ep) = self.endpoints.get(peer as usize).map(|ep| ep.handle()) else {
            return Err(PmlError::UnknownPeer(peer));
        };
        let p = &mut self.rma.peers[peer as usize];
        p.reap(peer);
        if p.in_flight
            .front()
            .is_some_and(|&(oldest, _, _)| oldest <= ticket)
            || p.flush.is_some_and(|(from, _)| from <= ticket)
        {
            return Ok(false);
        }
        if let Some((at, cause)) = &p.failed {
            if *at <= ticket {
                return Err(failure(peer, cause.clone()));
            }
        }
        if p.unflushed == 0 || p.unflushed > ticket {
            return Ok(true);
        }
        if p.flush.is_some() {
            // A flush of earlier puts only is still running: the next one goes after it.
            return Ok(false);
        }
        let from = mem::replace(&mut p.unflushed, 0);
        let param = request::send_param();
        // SAFETY: `ep` is a live endpoint of this worker; `param`'s callback is the send
        // kind, writing the flush request's state.
        let started = unsafe { ffi::ucp_ep_flush_nbx(ep, &param) };
        match status::started("ucp_ep_flush_nbx", started) {
            Ok(Started::Done) => Ok(true),
            Ok(Started::Pending(req)) => {
                p.flush = Some((from, req));
                Ok(false)
            }
            Err(e) => {
                let cause = format!("completing puts to rank {peer}: {e}");
                p.fail(from, cause.clone());
                Err(failure(peer, cause))
            }
        }
    }

    fn rma_result(&self, peer: Rank, ticket: u64) -> u64 {
        self.rma.peers[peer as usize].slots[ticket as usize % DEPTH][1]
    }
}
