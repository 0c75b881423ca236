//! One-sided operations over libfabric, where the provider granted RMA (see
//! `provider::Granted`): a window's memory registered for peers' writes, reads and atomics,
//! and puts, gets and 8-byte atomics on a peer's as `fi_writemsg` (with
//! `FI_DELIVERY_COMPLETE`, so that a completed write is in the target's memory, as the
//! transport contract asks, not only on its way), `fi_read`, `fi_fetch_atomic` (`FI_SUM`)
//! and `fi_compare_atomic` (`FI_CSWAP`) on `FI_UINT64`. This rank's own window is reached
//! through its own address in the address vector, so that its atomics go through the
//! provider as the peers' do (atomic with each other, which the CPU's would not be).
//!
//! What `FI_DELIVERY_COMPLETE` gets, read in libfabric 1.17's sources for the providers that
//! may carry windows: the flag is passed per write, not asked in the hints (as the endpoint's
//! default it would make every frame's send wait for its receiver too). rxm hands a write's
//! flags to its core endpoint's `fi_writemsg` (`rxm_ep_rma_common`); there tcp marks the write
//! for an acknowledgement that the target sends once it has written the bytes, completing it
//! only then (without the flag a write completes once the socket took it), and verbs' reliable
//! connection completes a write once the target's adapter acknowledged it. shm, asked for it,
//! leaves its fast path (the origin's `process_vm_writev`, which is delivered when it returns
//! but skipped under the flag) and its inline and inject protocols (which complete at
//! posting) for a copy the target makes, through its bounce buffers (SAR) or, past 4 KiB where
//! the host lets ranks read each other, by `process_vm_readv` of the origin, completing once
//! the target copied. rxd never carries windows (see `provider::windows_by_rma`); efa and cxi
//! were neither read nor run here. A read completes once its bytes are here, and every atomic
//! fetches (`fi_fetch_atomic`, `fi_compare_atomic`), so it completes once applied. So a
//! completed operation is in the target's memory on each of them, and a flush that waited for
//! its operations' completions returns only then.
//!
//! Completions come through the transport's completion queue, each naming its context: an
//! operation holds one of [`RMA_SLOTS`] contexts until then. Unlike a verbs queue pair, a
//! provider need neither complete nor apply operations in the order posted (libfabric orders
//! RMA and atomics only where `msg_order` and the `max_order_*_size` limits say so, and
//! tcp;ofi_rxm, for one, may defer an atomic behind a read). So writes and reads to a rank go
//! many at a time (as many as there are free contexts, the provider's transmit queue takes
//! and `provider::rma_in_flight` allows): MPI leaves the outcome of conflicting puts and gets
//! within one epoch undefined, so their order does not matter, and a flush or an epoch's end
//! waits for them all. An atomic is ordered both ways: it is posted only once nothing to its
//! rank is in flight, and nothing to the rank is posted until it completed, since the window
//! layer needs atomics applied in order with what is around them (an accumulate lock's take,
//! then the read of its range; MPI's ordering of accumulates, where a no-op's read follows a
//! fetch-and-add). Each peer keeps the set of its tickets in flight: the operations up to a
//! ticket are done when none at or below it is left.
//!
//! Origin memory, where the provider wants local buffers registered (`FI_MR_LOCAL`): each
//! piece of a write or read registers its buffer through the registration cache, released
//! when the piece completes; an atomic's operand, compare value and result sit in the slot
//! of its context (in a region the transport registered), and its result is copied into its
//! peer's book of results by ticket once it completed, where `rma_result` finds it (under
//! `Threading::Multiple`, two threads' atomics to one rank each find their own).

use std::collections::{BTreeSet, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use slab::Slab;

use super::memory::Region;
use super::provider::{self, MrPlan};
use super::{or_registered_copy, sys, OfiMr, OfiTransport, MAX_READ_PIECE, RMA_BASE};
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::transport::{RmaOp, RmaPosted};
use crate::wire::RemoteKey;

/// One-sided operations (pieces of writes and reads, atomics) in flight at once.
pub(super) const RMA_SLOTS: usize = 128;

/// How many fetched values each peer's book keeps: a caller reads its atomic's in the
/// engine borrow that saw it complete, before as many more to the rank completed.
const RESULTS_KEPT: usize = RMA_SLOTS;

/// Where an 8-byte atomic's operand and compare value are read from and its old value lands.
/// Atomic fields, so that this rank writes one slot's operands through a shared borrow while
/// the provider may be writing another slot's result, and the pointers handed to the
/// provider come from the field itself.
#[repr(C)]
#[derive(Default)]
struct AtomicSlot {
    operand: AtomicU64,
    compare: AtomicU64,
    result: AtomicU64,
}

/// A posted operation (or piece of one), until its completion.
struct InFlight {
    peer: Rank,
    ticket: u64,
    /// The operation, for its error ("fi_write", "fi_read", "fi_fetch_atomic", ...).
    what: &'static str,
    len: usize,
    /// The peer's key it names, for its error.
    key: u64,
    /// When it was posted, for the timeout (`rma_overdue`).
    posted_at: Instant,
    /// Its origin buffer's registration (or a registered copy's), where the provider wants
    /// one.
    mr: Option<OfiMr>,
}

/// One rank's one-sided operations from this rank.
#[derive(Default)]
struct PeerRma {
    /// The last ticket handed out.
    posted: u64,
    /// Tickets posted and not yet completed.
    in_flight: BTreeSet<u64>,
    /// How many of them are atomics (0 or 1: see the module's documentation on order).
    atomics_in_flight: usize,
    /// The earliest ticket that failed, and why: later operations to the rank are refused.
    failed: Option<(u64, String)>,
    /// The last atomics' fetched values, by ticket, oldest first.
    results: VecDeque<(u64, u64)>,
}

impl PeerRma {
    /// Whether `op` may be posted now, given what is in flight to the rank: writes and reads
    /// beside each other, up to `most` of them, an atomic alone (see the module's
    /// documentation on order).
    fn may_post(&self, op: &RmaOp, most: usize) -> bool {
        self.atomics_in_flight == 0
            && if op.is_atomic() {
                self.in_flight.is_empty()
            } else {
                self.in_flight.len() < most
            }
    }

    /// Whether every operation up to `ticket` completed.
    fn done(&self, ticket: u64) -> bool {
        self.in_flight.first().is_none_or(|&oldest| oldest > ticket)
    }

    /// Keeps the value atomic `ticket` fetched, forgetting the oldest past `RESULTS_KEPT`.
    fn record(&mut self, ticket: u64, fetched: u64) {
        if self.results.len() == RESULTS_KEPT {
            self.results.pop_front();
        }
        self.results.push_back((ticket, fetched));
    }

    /// The value atomic `ticket` fetched, if kept.
    fn result(&self, ticket: u64) -> Option<u64> {
        self.results
            .iter()
            .rev()
            .find(|&&(t, _)| t == ticket)
            .map(|&(_, v)| v)
    }

    /// Records the failure of `ticket`, keeping the earliest: a later operation's failure
    /// must not hide an earlier one's from its waiter.
    fn fail(&mut self, ticket: u64, cause: String) {
        if self.failed.as_ref().is_none_or(|(at, _)| ticket < *at) {
            self.failed = Some((ticket, cause));
        }
    }
}

pub(super) struct Rma {
    /// By rank, this rank included.
    peers: Vec<PeerRma>,
    /// This rank's own address in the address vector, once inserted (`connect_self`).
    self_addr: Option<sys::fi_addr_t>,
    /// Registered windows, by the id `expose_window` gave.
    windows: Slab<Region>,
    /// One slot per context slot (an atomic's operands and result stay there until its
    /// completion), boxed so that they stay where the provider writes.
    slots: Box<[AtomicSlot]>,
    slots_mr: Option<Region>,
    /// By context slot, the operation holding it.
    ops: Vec<Option<InFlight>>,
    free: Vec<usize>,
    /// How long an operation may stay in flight before it stops the transport
    /// (`rma_overdue`); `None`: without end.
    timeout: Option<Duration>,
    pub writes: u64,
    pub reads: u64,
    pub atomics: u64,
}

fn failure(peer: Rank, cause: String) -> PmlError {
    PmlError::OneSided {
        peer,
        cause: cause.into(),
    }
}

impl Rma {
    pub fn new(size: u32, timeout: Option<Duration>) -> Rma {
        Rma {
            timeout,
            peers: (0..size).map(|_| PeerRma::default()).collect(),
            self_addr: None,
            windows: Slab::new(),
            slots: (0..RMA_SLOTS).map(|_| AtomicSlot::default()).collect(),
            slots_mr: None,
            ops: (0..RMA_SLOTS).map(|_| None).collect(),
            free: (0..RMA_SLOTS).rev().collect(),
            writes: 0,
            reads: 0,
            atomics: 0,
        }
    }

    /// Whether a window of this rank's is registered for peers' RMA.
    pub fn exposes_windows(&self) -> bool {
        !self.windows.is_empty()
    }

    /// Whether an operation is still in flight (a rank that leaves waits for them).
    pub fn busy(&self) -> bool {
        self.free.len() < RMA_SLOTS
    }

    /// Closes the registrations (before the endpoint they may be bound to).
    pub fn close(&mut self) {
        self.windows.clear();
        self.slots_mr = None;
    }
}

impl OfiTransport {
    /// Puts this rank's own address in the address vector, for operations on its own
    /// window, and registers the atomics' slots where the provider wants local buffers
    /// registered.
    pub(super) fn connect_self(&mut self) -> Result<(), String> {
        let name = self.fabric.name()?;
        let addr = self
            .fabric
            .insert(&name)
            .map_err(|e| format!("adding this rank's own address: {e}"))?;
        self.rma.self_addr = Some(addr);
        if self.fabric.plan.local && self.fabric.granted.atomics {
            let slots = &self.rma.slots;
            let (buf, len) = (
                slots.as_ptr().cast::<u8>(),
                std::mem::size_of_val(&slots[..]),
            );
            let access = (sys::FI_READ | sys::FI_WRITE) as u64;
            self.rma.slots_mr = Some(self.register(buf, len, access)?);
        }
        Ok(())
    }

    /// Registers a window's `len` bytes at `buf` for peers' writes, reads and atomics;
    /// returns how peers address its start and the id to release it by.
    pub fn expose_window(&mut self, buf: *mut u8, len: usize) -> Result<(RemoteKey, u64), String> {
        let region = self.register(buf, len, MrPlan::window_access())?;
        let key = RemoteKey {
            addr: self.fabric.plan.remote_addr(buf as usize, region.base),
            key: region.key(),
        };
        Ok((key, self.rma.windows.insert(region) as u64))
    }

    pub fn release_window(&mut self, id: u64) {
        self.rma.windows.try_remove(id as usize);
    }

    /// Adds the one-sided operations posted to `counters`.
    pub fn count_rma(&self, counters: &mut crate::pml_api::Counters) {
        counters.rma_writes += self.rma.writes;
        counters.rma_reads += self.rma.reads;
        counters.rma_atomics += self.rma.atomics;
    }

    /// `peer`'s address for one-sided operations, or why there is none.
    fn rma_addr(&self, peer: Rank) -> Result<sys::fi_addr_t, PmlError> {
        if peer == self.rank {
            return self.rma.self_addr.ok_or_else(|| {
                failure(
                    peer,
                    "this rank's own window is not reached over OFI".into(),
                )
            });
        }
        let Some(p) = self.peers.get(peer as usize).and_then(Option::as_ref) else {
            return Err(failure(
                peer,
                format!("rank {peer} is not reached over OFI"),
            ));
        };
        if let Some(cause) = &p.broken {
            return Err(failure(
                peer,
                format!(
                    "a one-sided operation to rank {peer} was refused: messaging to it failed \
                     ({cause})"
                ),
            ));
        }
        Ok(p.addr)
    }

    /// Posts `op` on `peer`'s memory at `remote`, or of a write or read as many pieces of
    /// it (each at most the provider's largest message) as there are free contexts for and
    /// the provider takes now: the last one's ticket and the bytes they cover (the caller
    /// posts the rest later). `None` when nothing could be posted now, which includes while
    /// an atomic to `peer` is in flight, an atomic while anything to it is, and a write or
    /// read past `provider::rma_in_flight` (see the module's documentation).
    ///
    /// # Safety
    /// As `Transport::rma`.
    pub unsafe fn rma(
        &mut self,
        peer: Rank,
        op: RmaOp,
        remote: RemoteKey,
    ) -> Result<Option<RmaPosted>, PmlError> {
        let addr = self.rma_addr(peer)?;
        let p = &self.rma.peers[peer as usize];
        if let Some((_, cause)) = &p.failed {
            return Err(failure(
                peer,
                format!(
                    "a one-sided operation to rank {peer} was refused: an earlier one failed, \
                     which ends one-sided operations to it ({cause})"
                ),
            ));
        }
        if !p.may_post(&op, provider::rma_in_flight(&self.fabric.provider)) {
            return Ok(None);
        }
        match op {
            // SAFETY (both): forwarded from this function's contract.
            RmaOp::Write { local, len } => unsafe {
                self.post_pieces(peer, addr, "fi_write", local as usize, len, remote)
            },
            RmaOp::Read { local, len } => unsafe {
                self.post_pieces(peer, addr, "fi_read", local as usize, len, remote)
            },
            RmaOp::FetchAdd { .. } | RmaOp::CompareSwap { .. } => {
                self.post_atomic(peer, addr, op, remote)
            }
        }
    }

    /// Posts the write or read `what` of `len` bytes at `local` in pieces, while contexts
    /// are free and the provider takes them.
    ///
    /// # Safety
    /// As `Transport::rma`, for the `len` bytes at `local`.
    unsafe fn post_pieces(
        &mut self,
        peer: Rank,
        addr: sys::fi_addr_t,
        what: &'static str,
        local: usize,
        len: usize,
        remote: RemoteKey,
    ) -> Result<Option<RmaPosted>, PmlError> {
        let reading = what == "fi_read";
        if len == 0 {
            // Nothing to move: done once the operations before it are.
            let ticket = self.rma.peers[peer as usize].posted;
            return Ok(Some(RmaPosted { ticket, len: 0 }));
        }
        let piece_max = self.fabric.max_msg_size.clamp(1, MAX_READ_PIECE);
        let mut done = 0;
        let mut ticket = None;
        while done < len {
            let Some(&slot) = self.rma.free.last() else {
                break;
            };
            let piece = piece_max.min(len - done);
            let at_ptr = (local + done) as *const u8;
            let (mr, desc) = if self.fabric.plan.local {
                let own = self
                    .register_user(at_ptr, piece, reading)
                    .map(|(id, region)| (OfiMr::Cached { id, len: piece }, region.desc()));
                // The provider refuses to pin read-only memory (a constant's), since verbs
                // and efa ask for local write access. MPI forbids changing a put's origin
                // until its epoch or a flush completes it, so a copy taken now is what the
                // write must carry. A read's target must be writable anyway.
                let registered = if reading {
                    own
                } else {
                    or_registered_copy(own, || {
                        let c = self.registered_copy(at_ptr, piece)?;
                        Ok((OfiMr::Copy(c), self.copies[c].0.desc()))
                    })
                };
                match registered {
                    Ok((mr, desc)) => (Some(mr), desc),
                    Err(e) => {
                        let buffer = if reading { "local" } else { "origin" };
                        let cause = format!(
                            "{what} of {piece} bytes on rank {peer}: registering its {buffer} \
                             buffer: {e}"
                        );
                        return self.piece_failed(peer, ticket, done, len, cause);
                    }
                }
            } else {
                (None, std::ptr::null_mut())
            };
            let context = self.context(RMA_BASE + slot);
            let at = remote.addr + done as u64;
            let buf = match mr {
                Some(OfiMr::Copy(c)) => self.copies[c].1.as_ptr() as *mut c_void,
                _ => at_ptr as *mut c_void,
            };
            // SAFETY: the caller lends `len` bytes at `local` until the ticket completed
            // (`Transport::rma`'s contract), and a copy's `piece` bytes stay in `copies`
            // until `mr` is released at the piece's completion; the context stays the
            // provider's until that completion frees its slot.
            let rc = unsafe {
                if reading {
                    sys::read(
                        self.fabric.ep,
                        buf,
                        piece,
                        desc,
                        addr,
                        at,
                        remote.key,
                        context,
                    )
                } else {
                    sys::write(
                        self.fabric.ep,
                        buf,
                        piece,
                        desc,
                        addr,
                        at,
                        remote.key,
                        context,
                        (sys::FI_COMPLETION | sys::FI_DELIVERY_COMPLETE) as u64,
                    )
                }
            };
            if rc != 0 {
                if let Some(mr) = mr {
                    self.unregister(mr);
                }
                if sys::is_again(rc) {
                    self.progress_only();
                    break;
                }
                let cause = format!(
                    "{what} of {piece} bytes on rank {peer} failed: {}",
                    self.named(rc)
                );
                return self.piece_failed(peer, ticket, done, len, cause);
            }
            ticket = Some(self.took(slot, peer, (what, piece, remote.key), mr));
            done += piece;
        }
        let Some(ticket) = ticket else {
            return Ok(None);
        };
        if reading {
            self.rma.reads += 1;
        } else {
            self.rma.writes += 1;
        }
        Ok(Some(RmaPosted { ticket, len: done }))
    }

    /// A piece that could not be posted: with none posted before it, the error (nothing was
    /// posted); else the pieces before it use the caller's memory, so the failure goes on a
    /// ticket after theirs, which the caller's wait reports once they completed.
    fn piece_failed(
        &mut self,
        peer: Rank,
        posted: Option<u64>,
        done: usize,
        len: usize,
        cause: String,
    ) -> Result<Option<RmaPosted>, PmlError> {
        if posted.is_none() {
            return Err(failure(peer, cause));
        }
        let p = &mut self.rma.peers[peer as usize];
        p.posted += 1;
        let ticket = p.posted;
        p.fail(
            ticket,
            format!("{cause} (after {done} of its {len} bytes were posted)"),
        );
        Ok(Some(RmaPosted { ticket, len }))
    }

    /// Posts the 8-byte atomic `op` at `remote`; `None` when no context is free or the
    /// provider refuses for now.
    fn post_atomic(
        &mut self,
        peer: Rank,
        addr: sys::fi_addr_t,
        op: RmaOp,
        remote: RemoteKey,
    ) -> Result<Option<RmaPosted>, PmlError> {
        if !self.fabric.granted.atomics {
            return Err(failure(
                peer,
                format!(
                    "libfabric provider {} has no 8-byte fetch-and-add and compare-and-swap",
                    self.fabric.provider
                ),
            ));
        }
        let Some(&slot) = self.rma.free.last() else {
            return Ok(None);
        };
        let entry = &self.rma.slots[slot];
        let (what, swap) = match op {
            RmaOp::FetchAdd { add } => {
                entry.operand.store(add, Ordering::Relaxed);
                ("fi_fetch_atomic (FI_SUM)", false)
            }
            RmaOp::CompareSwap { compare, swap } => {
                entry.operand.store(swap, Ordering::Relaxed);
                entry.compare.store(compare, Ordering::Relaxed);
                ("fi_compare_atomic (FI_CSWAP)", true)
            }
            _ => unreachable!("atomics only"),
        };
        let desc = self
            .rma
            .slots_mr
            .as_ref()
            .map_or(std::ptr::null_mut(), Region::desc);
        let entry = &self.rma.slots[slot];
        let operand = entry.operand.as_ptr().cast::<c_void>();
        let compare_at = entry.compare.as_ptr().cast::<c_void>();
        let result = entry.result.as_ptr().cast::<c_void>();
        let context = self.context(RMA_BASE + slot);
        // SAFETY: the slot is this atomic's alone until it completed (it holds the context
        // slot of the same index, taken below and freed by its completion), in the boxed
        // slots, which live as long as the transport, its fields written only through their
        // atomics' own pointers; the context stays the provider's until the completion.
        let rc = unsafe {
            if !swap {
                sys::fetch_atomic(
                    self.fabric.ep,
                    operand,
                    desc,
                    result,
                    desc,
                    addr,
                    remote.addr,
                    remote.key,
                    sys::FI_UINT64,
                    sys::FI_SUM,
                    context,
                )
            } else {
                sys::compare_atomic(
                    self.fabric.ep,
                    operand,
                    desc,
                    compare_at,
                    desc,
                    result,
                    desc,
                    addr,
                    remote.addr,
                    remote.key,
                    sys::FI_UINT64,
                    context,
                )
            }
        };
        if sys::is_again(rc) {
            self.progress_only();
            return Ok(None);
        }
        if rc != 0 {
            return Err(failure(
                peer,
                format!("{what} on rank {peer} failed: {}", self.named(rc)),
            ));
        }
        let ticket = self.took(slot, peer, (what, 8, remote.key), None);
        self.rma.atomics += 1;
        Ok(Some(RmaPosted { ticket, len: 8 }))
    }

    /// Context slot `slot` holds a piece just posted to `peer` (`what`, of `len` bytes,
    /// through `key`): its ticket.
    fn took(
        &mut self,
        slot: usize,
        peer: Rank,
        (what, len, key): (&'static str, usize, u64),
        mr: Option<OfiMr>,
    ) -> u64 {
        self.rma.free.pop();
        let p = &mut self.rma.peers[peer as usize];
        p.posted += 1;
        let ticket = p.posted;
        p.in_flight.insert(ticket);
        p.atomics_in_flight += usize::from(what.contains("_atomic"));
        self.rma.ops[slot] = Some(InFlight {
            peer,
            ticket,
            what,
            len,
            key,
            posted_at: Instant::now(),
            mr,
        });
        ticket
    }

    /// The operation in context slot `slot` completed, or failed for `cause`.
    pub(super) fn rma_completed(&mut self, slot: usize, result: Result<(), String>) {
        let Some(op) = self.rma.ops[slot].take() else {
            return;
        };
        self.rma.free.push(slot);
        if let Some(mr) = op.mr {
            self.unregister(mr);
        }
        let p = &mut self.rma.peers[op.peer as usize];
        p.in_flight.remove(&op.ticket);
        p.atomics_in_flight -= usize::from(op.what.contains("_atomic"));
        if result.is_ok() && op.what.contains("_atomic") {
            // The provider wrote the slot before the completion this thread just read from
            // the completion queue, whose read orders it after the write.
            let fetched = self.rma.slots[slot].result.load(Ordering::Acquire);
            p.record(op.ticket, fetched);
        }
        if let Err(cause) = result {
            let (what, len, peer) = (op.what, op.len, op.peer);
            let cause = format!("{what} of {len} bytes on rank {peer} failed: {cause}");
            p.fail(op.ticket, cause.clone());
            // On the connected providers a failed operation has broken the pair's connection
            // (tcp;ofi_rxm drops it, a verbs queue pair goes to its error state), where
            // messages to the peer would wait for good: on every provider they fail naming
            // this instead.
            self.peer_failed(
                peer,
                format!("a one-sided operation to rank {peer} failed: {cause}"),
            );
        }
    }

    /// The error that stops the transport once an operation has been in flight longer than
    /// the one-sided timeout (`MPIRT_OFI_RMA_TIMEOUT`): some providers never answer an
    /// operation their target refused (shm, udp;ofi_rxd, for a key or range the target does
    /// not know), and on those that apply operations in the target's software a target that
    /// stopped making progress looks the same. Checked at each poll that took nothing; the
    /// engine stops on it, which closes the endpoint, so that the provider touches the
    /// operation's memory no more once its caller's wait failed and took it back.
    pub(super) fn rma_overdue(&self) -> Result<(), PmlError> {
        let Some(timeout) = self.rma.timeout.filter(|_| self.rma.busy()) else {
            return Ok(());
        };
        let oldest = self.rma.ops.iter().flatten().min_by_key(|op| op.posted_at);
        match oldest {
            Some(op) if op.posted_at.elapsed() > timeout => {
                let peer = op.peer;
                Err(failure(
                    peer,
                    format!(
                        "{} of {} bytes on rank {peer} (its window's key {:#x}) over libfabric \
                         {} did not complete within {timeout:?} (MPIRT_OFI_RMA_TIMEOUT): the \
                         target's provider refused it without an answer (a key or range it \
                         does not know), or rank {peer} stopped making progress",
                        op.what, op.len, op.key, self.fabric.provider
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether every operation to `peer` up to `ticket` completed; the error of the first
    /// that failed, once all did (the provider is then done with their memory).
    pub fn rma_done(&self, peer: Rank, ticket: u64) -> Result<bool, PmlError> {
        if self.stopped {
            return Ok(false);
        }
        let Some(p) = self.rma.peers.get(peer as usize) else {
            return Ok(false);
        };
        if !p.done(ticket) {
            return Ok(false);
        }
        match &p.failed {
            Some((at, cause)) if *at <= ticket => Err(failure(peer, cause.clone())),
            _ => Ok(true),
        }
    }

    /// The value the atomic `ticket` to `peer` fetched, once it completed (and before
    /// `RESULTS_KEPT` more atomics to `peer` did).
    pub fn rma_result(&self, peer: Rank, ticket: u64) -> u64 {
        self.rma.peers[peer as usize]
            .result(ticket)
            .unwrap_or_else(|| {
                panic!("no fetched value of one-sided atomic {ticket} to rank {peer} is kept")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::PeerRma;
    use crate::transport::RmaOp;

    #[test]
    fn tickets_complete_in_any_order() {
        let mut p = PeerRma::default();
        p.in_flight.extend([1, 2, 3]);
        p.posted = 3;
        p.in_flight.remove(&2);
        assert!(!p.done(1) && !p.done(2) && !p.done(3));
        p.in_flight.remove(&1);
        assert!(p.done(1) && p.done(2) && !p.done(3));
        p.in_flight.remove(&3);
        assert!(p.done(3));
    }

    #[test]
    fn writes_and_reads_go_together_atomics_alone() {
        let (mut p, mut word) = (PeerRma::default(), 0u8);
        let write = RmaOp::Write {
            local: &word,
            len: 1,
        };
        let read = RmaOp::Read {
            local: &mut word,
            len: 1,
        };
        let add = RmaOp::FetchAdd { add: 1 };
        assert!(p.may_post(&write, 2) && p.may_post(&add, 2));
        // A write in flight: more writes and reads go beside it, up to the most, an atomic
        // waits.
        p.in_flight.insert(1);
        assert!(p.may_post(&write, 2) && p.may_post(&read, 2) && !p.may_post(&add, 2));
        assert!(!p.may_post(&write, 1) && !p.may_post(&read, 1));
        // An atomic in flight alone: nothing goes beside it.
        p.in_flight = [2].into();
        p.atomics_in_flight = 1;
        assert!(!p.may_post(&write, 2) && !p.may_post(&read, 2) && !p.may_post(&add, 2));
    }

    #[test]
    fn each_atomic_finds_its_own_result() {
        let mut p = PeerRma::default();
        // Two threads' atomics to one rank, completed before either read its value.
        p.record(4, 40);
        p.record(5, 50);
        assert_eq!(
            (p.result(4), p.result(5), p.result(6)),
            (Some(40), Some(50), None)
        );
        for t in 6..6 + super::RESULTS_KEPT as u64 {
            p.record(t, t * 10);
        }
        assert_eq!((p.result(4), p.result(6)), (None, Some(60)));
    }

    #[test]
    fn the_earliest_failure_is_kept() {
        let mut p = PeerRma::default();
        p.fail(5, "five".into());
        p.fail(7, "seven".into());
        assert_eq!(p.failed.as_ref().unwrap().0, 5);
        p.fail(3, "three".into());
        assert_eq!(p.failed, Some((3, "three".to_string())));
    }
}
