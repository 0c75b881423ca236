//! One-sided operations over verbs: a window's memory registered for remote write, read and
//! atomics, and puts, gets and 8-byte atomics on a peer's as RDMA WRITE, RDMA READ and IB
//! fetch-and-add / compare-and-swap, on the peer's queue pair (this rank's own window: the
//! loopback queue pair). An operation completes once its completion came back, which for
//! a reliable connection means it is done at the target.
//!
//! Origin memory: a write of at most `INLINE` bytes goes inline (copied when posted); a
//! longer write's and every read's buffer is registered through the registration cache,
//! released when the operation completes. An atomic fetches into a slot of its own in a
//! region the transport registered, read by `rma_result` once it completed.

use std::io;

use rdma_sys::*;
use slab::Slab;

use super::device::Device;
use super::qp::SEND_DEPTH;
use super::registry::MrId;
use super::{Peer, Region, Remote, VerbsTransport, INLINE, WR_RMA};
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::transport::{RmaOp, RmaPosted};
use crate::wire::RemoteKey;

/// Windows may be written, read and updated atomically by peers.
const WINDOW_ACCESS: u32 = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;

/// A posted work request of a one-sided operation.
struct InFlight {
    /// The operation, for its error ("RDMA WRITE", "RDMA READ", "RDMA atomic").
    what: &'static str,
    /// Its bytes.
    len: usize,
    /// The operation's origin registration, on the last work request posted of it
    /// (completions on a queue pair come in order: the earlier ones are done by then).
    mr: Option<MrId>,
}

pub(super) struct Rma {
    /// By rank, the queue pairs for one-sided operations (`None` for peers reached another
    /// way, and once stopped).
    pub peers: Vec<Option<Peer>>,
    /// The queue pair connected to itself, for operations on this rank's own window
    /// (`None` once stopped).
    pub loopback: Option<Peer>,
    /// Registered windows, by the id `expose_window` gave.
    windows: Slab<*mut ibv_mr>,
    /// Where atomics fetch to: `SEND_DEPTH` 8-byte slots per rank, the ticket's slot being
    /// its number modulo `SEND_DEPTH` (more are never in flight to one rank).
    slots: Region,
    /// Each posted work request, until it completes.
    in_flight: Slab<InFlight>,
    pub writes: u64,
    pub reads: u64,
    pub atomics: u64,
}

impl Rma {
    pub fn new(dev: &Device, size: u32, loopback: Peer) -> Result<Rma, String> {
        Ok(Rma {
            peers: (0..size).map(|_| None).collect(),
            loopback: Some(loopback),
            windows: Slab::new(),
            slots: Region::new(dev, size as usize * SEND_DEPTH as usize * 8)?,
            in_flight: Slab::new(),
            writes: 0,
            reads: 0,
            atomics: 0,
        })
    }

    /// Deregisters every window still registered (the transport is going, its queue pairs
    /// gone).
    pub fn deregister(&mut self) {
        for mr in self.windows.drain() {
            // SAFETY: registered in `expose_window`, deregistered once (drained).
            unsafe { ibv_dereg_mr(mr) };
        }
    }

    fn slot_index(peer: Rank, ticket: u64) -> usize {
        peer as usize * SEND_DEPTH as usize + (ticket % u64::from(SEND_DEPTH)) as usize
    }
}

impl VerbsTransport {
    /// Registers a window's `len` bytes at `buf` for peers' writes, reads and atomics;
    /// returns the rkey and the id to release it by.
    pub fn expose_window(&mut self, buf: *mut u8, len: usize) -> Result<(u32, u64), String> {
        // SAFETY: the caller's window memory, mapped and alive until `release_window` (the
        // window outlives its exposure); deregistered there or when the transport drops.
        let mr = unsafe { ibv_reg_mr(self.dev.pd, buf.cast(), len, WINDOW_ACCESS as i32) };
        if mr.is_null() {
            return Err(format!(
                "registering {len} bytes at {buf:p}: {}",
                io::Error::last_os_error()
            ));
        }
        // SAFETY: `mr` is the live registration just made.
        let rkey = unsafe { (*mr).rkey };
        Ok((rkey, self.rma.windows.insert(mr) as u64))
    }

    pub fn release_window(&mut self, id: u64) {
        if let Some(mr) = self.rma.windows.try_remove(id as usize) {
            // SAFETY: registered in `expose_window`, removed from the slab so deregistered
            // once; no peer reaches the window any more (the caller's contract).
            unsafe { ibv_dereg_mr(mr) };
        }
    }

    /// Adds the one-sided operations posted to `counters`.
    pub fn count_rma(&self, counters: &mut crate::pml_api::Counters) {
        counters.rma_writes += self.rma.writes;
        counters.rma_reads += self.rma.reads;
        counters.rma_atomics += self.rma.atomics;
    }

    /// Whether 8-byte atomics are done by the device.
    pub fn does_atomics(&self) -> bool {
        self.dev.atomics
    }

    /// Posts `op` on `peer`'s memory at `remote`, or of a write or read as many pieces of
    /// it as its queue pair has room for now: the last one's ticket and the bytes they
    /// cover (the caller posts the rest later). `None` when there is no room at all.
    ///
    /// # Safety
    /// As `Transport::rma`.
    pub unsafe fn rma(
        &mut self,
        peer: Rank,
        op: RmaOp,
        remote: RemoteKey,
    ) -> Result<Option<RmaPosted>, PmlError> {
        let piece_max = self.dev.max_piece();
        let Some(p) = self.lane_ref(peer, WR_RMA) else {
            return Err(PmlError::one_sided(
                peer,
                format!("rank {peer} is not reached over verbs"),
            ));
        };
        if let Some(cause) = &p.broken {
            return Err(PmlError::one_sided(
                peer,
                format!(
                    "a one-sided operation to rank {peer} was refused: an earlier one failed, \
                     which ends one-sided operations to it ({cause})"
                ),
            ));
        }
        // The queue pair carries nothing else (credits, probes and goodbyes go on the
        // peer's messages' one), but the completion queue is every queue pair's: the
        // messages' control writes keep their room there.
        let room = self.room(p.in_flight, super::CONTROL_SENDS);
        if room == 0 {
            return Ok(None);
        }
        // Of a write or read, the pieces that fit now.
        let part = |len: usize| len.min(room * piece_max);
        let rkey = remote.key as u32;
        let failed = |what: &str, len: usize, rc: i32| {
            PmlError::one_sided(
                peer,
                format!(
                    "posting an {what} of {len} bytes to rank {peer} failed: {}",
                    io::Error::from_raw_os_error(rc)
                ),
            )
        };
        let unregistered = |what: &str, len: usize, e: String| {
            PmlError::one_sided(
                peer,
                format!("an {what} of {len} bytes to rank {peer}: its local buffer: {e}"),
            )
        };
        let (what, len, ticket) = match op {
            RmaOp::Write { local, len } => {
                let len = part(len);
                let mr = if len <= INLINE {
                    None
                } else {
                    Some(
                        self.registry
                            .acquire(local as usize, len, false)
                            .map_err(|e| unregistered("RDMA WRITE", len, e.to_string()))?,
                    )
                };
                let lkey = mr.map_or(0, |k| k.lkey);
                self.rma.writes += 1;
                let mr_id = mr.map(|k| k.id);
                let ticket = self.post_pieces(peer, "RDMA WRITE", mr_id, piece_max, len, |off| {
                    (
                        ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                        local as u64 + off as u64,
                        lkey,
                        Remote::Rdma {
                            addr: remote.addr + off as u64,
                            rkey,
                        },
                    )
                });
                ("RDMA WRITE", len, ticket)
            }
            RmaOp::Read { local, len } => {
                let len = part(len);
                let keys = self
                    .registry
                    .acquire(local as usize, len, true)
                    .map_err(|e| unregistered("RDMA READ", len, e.to_string()))?;
                self.rma.reads += 1;
                let ticket =
                    self.post_pieces(peer, "RDMA READ", Some(keys.id), piece_max, len, |off| {
                        (
                            ibv_wr_opcode::IBV_WR_RDMA_READ,
                            local as u64 + off as u64,
                            keys.lkey,
                            Remote::Rdma {
                                addr: remote.addr + off as u64,
                                rkey,
                            },
                        )
                    });
                ("RDMA READ", len, ticket)
            }
            RmaOp::FetchAdd { .. } | RmaOp::CompareSwap { .. } => {
                let (opcode, compare_add, swap) = match op {
                    RmaOp::FetchAdd { add } => (ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD, add, 0),
                    RmaOp::CompareSwap { compare, swap } => {
                        (ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP, compare, swap)
                    }
                    _ => unreachable!("matched above"),
                };
                let ticket = p.rma_posted + 1;
                let slot = Rma::slot_index(peer, ticket) * 8;
                let local = self.rma.slots.buf.as_ptr() as u64 + slot as u64;
                let lkey = self.rma.slots.lkey();
                self.rma.atomics += 1;
                let ticket = self.post_pieces(peer, "RDMA atomic", None, 8, 8, |_| {
                    (
                        opcode,
                        local,
                        lkey,
                        Remote::Atomic {
                            addr: remote.addr,
                            rkey,
                            compare_add,
                            swap,
                        },
                    )
                });
                ("RDMA atomic", 8, ticket)
            }
        };
        let ticket = ticket.map_err(|rc| failed(what, len, rc))?;
        Ok(Some(RmaPosted { ticket, len }))
    }

    /// Posts the operation `what` of `len` bytes as work requests of at most `piece_max`
    /// bytes each, `wr(offset)` saying what each is; the last carries the origin
    /// registration `mr`. Returns the last one's ticket. Where the first piece fails to
    /// post, nothing was: the error. Where a later one fails, the pieces before it are on
    /// the queue pair, reading or writing the caller's memory: the ticket of the last of
    /// them, which carries the registration and fails the operation (and the queue pair's
    /// later ones) for its waiter.
    fn post_pieces(
        &mut self,
        peer: Rank,
        what: &'static str,
        mr: Option<MrId>,
        piece_max: usize,
        len: usize,
        wr: impl Fn(usize) -> (ibv_wr_opcode::Type, u64, u32, Remote),
    ) -> Result<u64, i32> {
        let pieces = len.div_ceil(piece_max).max(1);
        let mut posted: Option<usize> = None;
        for i in 0..pieces {
            let off = i * piece_max;
            let last = i + 1 == pieces;
            let index = self.rma.in_flight.insert(InFlight {
                what,
                len,
                mr: if last { mr } else { None },
            });
            let (opcode, local, lkey, remote) = wr(off);
            let piece = piece_max.min(len - off) as u32;
            if let Err(rc) = self.post(
                peer,
                WR_RMA | index as u64,
                opcode,
                local,
                piece,
                lkey,
                remote,
            ) {
                self.rma.in_flight.remove(index);
                let Some(earlier) = posted else {
                    if let Some(mr) = mr {
                        self.registry.release(mr);
                    }
                    return Err(rc);
                };
                self.rma.in_flight[earlier].mr = mr;
                let ticket = self
                    .lane_ref(peer, WR_RMA)
                    .expect("posted to it")
                    .rma_posted;
                self.rma_failed(
                    peer,
                    ticket,
                    format!(
                        "posting piece {} of {pieces} of an {what} of {len} bytes to rank \
                         {peer} failed: {}",
                        i + 1,
                        io::Error::from_raw_os_error(rc)
                    ),
                );
                return Ok(ticket);
            }
            posted = Some(index);
            self.lane_mut(peer, WR_RMA)
                .expect("posted to it")
                .rma_posted += 1;
        }
        Ok(self
            .lane_ref(peer, WR_RMA)
            .expect("posted to it")
            .rma_posted)
    }

    /// The one-sided operation of ticket `at` to `peer` failed for `cause`: so does every
    /// later one, its queue pair being in the error state. The earliest ticket's failure is
    /// kept, not the first reported: a posting error names the operation being posted while
    /// earlier ones are still in flight, and one of those that fails later must fail its
    /// waiter rather than report success.
    pub(super) fn rma_failed(&mut self, peer: Rank, at: u64, cause: String) {
        if let Some(p) = self.lane_mut(peer, WR_RMA) {
            if earlier_failure(p.rma_failed_at, at) {
                p.rma_failed_at = at;
                p.broken = Some(cause);
            }
        }
    }

    /// The work request posted as `index` completed: its origin registration goes back.
    /// Returns its operation and length, for an error.
    pub(super) fn rma_completed(&mut self, index: usize) -> (&'static str, usize) {
        let done = self.rma.in_flight.remove(index);
        if let Some(mr) = done.mr {
            self.registry.release(mr);
        }
        (done.what, done.len)
    }

    /// Whether every operation to `peer` up to `ticket` completed (false for a peer whose
    /// queue pair is gone: the engine stopped, and its waits fail); the error of the first
    /// that failed, once all completed (the device is then done with their memory).
    pub fn rma_done(&self, peer: Rank, ticket: u64) -> Result<bool, PmlError> {
        let Some(p) = self.lane_ref(peer, WR_RMA) else {
            return Ok(false);
        };
        if p.rma_completed < ticket {
            return Ok(false);
        }
        match &p.broken {
            Some(cause) if p.rma_failed_at != 0 && p.rma_failed_at <= ticket => {
                Err(PmlError::one_sided(peer, cause.clone()))
            }
            _ => Ok(true),
        }
    }

    /// The value the atomic `ticket` to `peer` fetched, once it completed.
    pub fn rma_result(&self, peer: Rank, ticket: u64) -> u64 {
        let at = Rma::slot_index(peer, ticket) * 8;
        // The device wrote the slot before the completion that `rma_done` saw, and the
        // provider's `ibv_poll_cq`, which reported that completion, orders its reads after
        // the device's writes (a memory barrier of its own); a fence here would add nothing.
        // The caller reads the result in the engine borrow that saw the completion, before
        // another atomic may reuse the slot.
        let bytes = &self.rma.slots.buf[at..at + 8];
        u64::from_ne_bytes(bytes.try_into().expect("8 bytes"))
    }
}

/// Whether a failure at ticket `at` comes before the one kept at `kept` (0: none kept).
fn earlier_failure(kept: u64, at: u64) -> bool {
    kept == 0 || at < kept
}

#[cfg(test)]
mod tests {
    use super::earlier_failure;

    #[test]
    fn the_earliest_ticket_keeps_the_failure() {
        assert!(earlier_failure(0, 7), "the first failure is kept");
        assert!(
            earlier_failure(7, 3),
            "an earlier op failing later replaces it"
        );
        assert!(!earlier_failure(3, 7), "a later op's failure does not");
        assert!(!earlier_failure(3, 3));
    }
}
