//! The RDMA path: where the native engine's one-sided transport (verbs) reaches a window's
//! ranks, puts are RDMA WRITEs and gets RDMA READs straight between the origin's buffer and
//! the target's window memory, registered at the window's creation (each rank's address and
//! key gathered then), with no help from the target's CPU. Completion: each origin keeps the
//! last operation it posted to each target; a flush and every epoch end wait until those
//! completed (a reliable connection completes an operation once the target has it) before
//! the epoch's own messages (the fence's, `complete`'s, the unlock) go out, so a target that
//! got them has the data.
//!
//! Accumulates and atomics keep MPI's atomicity, which device atomics would break if they
//! met the CPU's: the device's atomics are atomic only with each other (`IBV_ATOMIC_HCA`),
//! not with the target's own operations. So a window takes one of two ways for all of its
//! accumulates, agreed by every rank at creation, never both:
//! - by the device, where its elements are 8-byte numbers (`i64`, `u64`, `f64`), every rank
//!   reaches every rank with device atomics (its own window through a loopback queue pair)
//!   and every window is 8-byte aligned: each element of every accumulate, `get_accumulate`,
//!   `fetch_and_op` and `compare_and_swap` (typed ones too) is one device atomic: an
//!   integer sum a fetch-and-add, a no-op that fetches a fetch-and-add of 0, every other
//!   operation (replace, min, max, products, bitwise ones, float sums) a compare-and-swap
//!   loop computed at the origin, its first guess the value one RDMA READ of the whole
//!   range found (0 for a single element): one round trip per element where no other rank
//!   updates it meanwhile, plus the read;
//! - else by active messages (`messaging.rs`), which the target applies, as on TCP.
//!
//! Puts and gets may meet accumulates on one location only erroneously (MPI), so they take
//! RDMA either way. Operand byte order: the device's atomics take the host's (little-endian
//! x86 and Soft-RoCE both).

use std::cell::RefCell;

use pml::transport::RmaOp;
use pml::{RemoteKey, WindowExposure};

use super::operation::{self, AccumulateOperation};
use crate::collective::CommunicatorCollectives;
use crate::communicator::{CommData, Communicator};
use crate::datatype::Datatype;
use crate::environment::{self, with_engine_or_lent};
use crate::error::{Cause, Error};

/// Whether the device may do the accumulates on elements of `code`
/// (`operation::element_code`): 8-byte integers and `f64`.
fn device_element(code: u8) -> bool {
    operation::element_of(code).is_some_and(|d| {
        d.size() == 8 && (operation::is_integer(code) || d == crate::datatype::datatype_of::<f64>())
    })
}
/// `SystemOperation::Sum`'s code, as `AccumulateOperation::code` gives it.
fn is_sum(op: AccumulateOperation) -> bool {
    op == AccumulateOperation::System(crate::collective::SystemOperation::sum())
}

/// A window's RDMA state on this rank.
pub(super) struct Rdma {
    /// Each rank's window (address, key), where this rank reaches it by RDMA.
    targets: Vec<Option<RemoteKey>>,
    /// Each rank's world rank.
    world: Vec<u32>,
    /// Whether this window's accumulates and atomics go by the device (see the module's
    /// documentation); agreed by every rank.
    pub atomics: bool,
    /// This rank's window as exposed, released when the window goes.
    exposure: Option<WindowExposure>,
    /// Per rank, the ticket of the last operation posted to it and not yet waited for.
    pending: RefCell<Vec<u64>>,
}

impl Rdma {
    /// Whether this rank has a transport that does one-sided operations (verbs, in a build
    /// with it): a window's ranks agree on it at creation and `open` only where all have one.
    pub fn available(data: &CommData) -> bool {
        let me = data.world_rank(data.rank);
        cfg!(feature = "verbs")
            && with_engine_or_lent(|e| {
                Ok(e.native()
                    .is_some_and(|engine| engine.rma_reach(me).is_some()))
            })
            .unwrap_or(false)
    }

    /// Exposes this rank's window (`bytes` at `base`) and learns every rank's, where the
    /// one-sided transport reaches them; `element` is the window's element code for
    /// accumulates, where it has one. `None` where no rank is reached so. Collective.
    pub fn open(
        comm: &impl Communicator,
        data: &CommData,
        base: *mut u8,
        bytes: usize,
        element: Option<u8>,
        what: &str,
    ) -> Result<Option<Rdma>, Error> {
        let fail = |c: Cause| Error::new(what, c);
        let size = comm.size() as u32;
        let world: Vec<u32> = (0..size).map(|r| data.world_rank(r)).collect();
        // A rank whose window cannot be registered (the locked-memory limit, `ulimit -l`)
        // must still reach the all-gather below, or the others wait in it for good: its
        // window is then not exposed, and the others' operations on it go by messages.
        let opened = with_engine_or_lent(|e| {
            let Some(engine) = e.native() else {
                return Ok((Ok(None), false));
            };
            let atomics = world
                .iter()
                .all(|&w| engine.rma_reach(w).is_some_and(|r| r.atomics));
            if bytes == 0 {
                // Nothing to reach here: the rank still takes part in the agreement.
                return Ok((Ok(None), atomics));
            }
            Ok((engine.expose_window(base, bytes), atomics))
        });
        let (exposure, reaches_all) = match opened {
            Ok((Ok(exposure), reaches_all)) => (exposure, reaches_all),
            Ok((Err(e), _)) => {
                Rdma::not_exposed(data, bytes, &Cause::from(e));
                (None, false)
            }
            Err(cause) => {
                Rdma::not_exposed(data, bytes, &cause);
                (None, false)
            }
        };
        let exposed = exposure.is_some() || bytes == 0;
        let aligned = (base as usize).is_multiple_of(8);
        let flags = u64::from(exposed) | u64::from(reaches_all && aligned) << 1;
        let mine = [base as u64, exposure.map_or(0, |e| e.key), flags];
        let mut all = vec![0u64; 3 * size as usize];
        if let Err(e) = comm.try_all_gather_into(&mine[..], &mut all[..]) {
            Rdma::release(exposure);
            return Err(Error::new(what, e.cause().clone()));
        }
        let targets: Vec<Option<RemoteKey>> = with_engine_or_lent(|e| {
            let engine = e.native();
            Ok(all
                .chunks_exact(3)
                .zip(&world)
                .map(|(theirs, &w)| {
                    let reached = engine.as_ref().is_some_and(|e| e.rma_reach(w).is_some());
                    (reached && theirs[2] & 1 != 0).then_some(RemoteKey {
                        addr: theirs[0],
                        key: theirs[1],
                    })
                })
                .collect())
        })
        .map_err(fail)?;
        let atomics =
            element.is_some_and(device_element) && all.chunks_exact(3).all(|theirs| theirs[2] == 3);
        if targets.iter().all(Option::is_none) && exposure.is_none() {
            return Ok(None);
        }
        Ok(Some(Rdma {
            targets,
            world,
            atomics,
            exposure,
            pending: RefCell::new(vec![0; size as usize]),
        }))
    }

    /// Says (under `MPIRT_VERBOSE`) that this rank's window is not reached by RDMA.
    fn not_exposed(data: &CommData, bytes: usize, cause: &Cause) {
        if crate::collective::verbose() {
            bootstrap::output::say(&format!(
                "mpirt: rank {}: registering {bytes} bytes for a window failed ({cause}): \
                 operations on this rank's window go by messages",
                data.world_rank(data.rank)
            ));
        }
    }

    fn release(exposure: Option<WindowExposure>) {
        if let Some(exposure) = exposure {
            let _ = with_engine_or_lent(|e| {
                if let Some(engine) = e.native() {
                    engine.release_window(exposure);
                }
                Ok(())
            });
        }
    }

    /// Gives this rank's window back (every rank is done with it: after the window's
    /// closing barrier).
    pub fn close(&mut self) {
        Rdma::release(self.exposure.take());
    }

    /// Whether operations to `target` go by RDMA.
    pub fn reaches(&self, target: u32) -> bool {
        self.targets[target as usize].is_some()
    }

    /// Posts `op` at `offset` in `target`'s window; returns its ticket.
    ///
    /// # Safety
    /// `op`'s local memory must stay valid and untouched until the operation completed
    /// (`complete`, or `wait` on the ticket).
    unsafe fn post(&self, target: u32, op: RmaOp, offset: u64) -> Result<u64, Cause> {
        let key = self.targets[target as usize].expect("reached (checked by the caller)");
        let remote = RemoteKey {
            addr: key.addr + offset,
            key: key.key,
        };
        let peer = self.world[target as usize];
        let ticket = with_engine_or_lent(|e| {
            let engine = e.native().expect("the RDMA path runs on the native engine");
            // SAFETY: forwarded from this function's contract.
            unsafe { engine.rma(peer, op, remote) }
        })?;
        self.pending.borrow_mut()[target as usize] = ticket;
        Ok(ticket)
    }

    /// Waits until the operations to `target` up to `ticket` completed.
    fn wait(&self, target: u32, ticket: u64) -> Result<(), Cause> {
        let peer = self.world[target as usize];
        environment::wait_until_or_lent(pml::stall::Awaited::State, |e| match e.native() {
            Some(engine) => Ok(engine.rma_done(peer, ticket)?),
            None => Ok(true),
        })
    }

    /// Waits until every operation posted to `targets` completed at its target; the first
    /// that failed is the error, once all are done.
    pub fn complete(&self, targets: &[u32]) -> Result<(), Cause> {
        let mut first = Ok(());
        for &t in targets {
            let ticket = self.pending.borrow()[t as usize];
            if ticket != 0 {
                let done = self.wait(t, ticket);
                self.pending.borrow_mut()[t as usize] = 0;
                if first.is_ok() {
                    first = done;
                }
            }
        }
        first
    }

    /// Waits for everything in flight (an epoch that unwinds gives its buffers back).
    pub fn complete_all(&self) -> Result<(), Cause> {
        let all: Vec<u32> = (0..self.targets.len() as u32).collect();
        self.complete(&all)
    }

    /// `bytes` into `target`'s window at `offset`, by RDMA WRITE.
    ///
    /// # Safety
    /// `bytes` must stay unchanged until the put completed (`complete`).
    pub unsafe fn put(&self, target: u32, offset: u64, bytes: &[u8]) -> Result<(), Cause> {
        if bytes.is_empty() {
            return Ok(());
        }
        let op = RmaOp::Write {
            local: bytes.as_ptr(),
            len: bytes.len(),
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { self.post(target, op, offset) }.map(drop)
    }

    /// `target`'s window at `offset` into `into`, by RDMA READ; `wait` waits for the data.
    ///
    /// # Safety
    /// `into` must stay valid for writes, and untouched, until the get completed
    /// (`complete`), unless `wait`.
    pub unsafe fn get(
        &self,
        target: u32,
        offset: u64,
        into: &mut [u8],
        wait: bool,
    ) -> Result<(), Cause> {
        if into.is_empty() {
            return Ok(());
        }
        let op = RmaOp::Read {
            local: into.as_mut_ptr(),
            len: into.len(),
        };
        // SAFETY: forwarded from this function's contract.
        let ticket = unsafe { self.post(target, op, offset) }?;
        if wait {
            self.wait(target, ticket)?;
        }
        Ok(())
    }

    /// One device atomic on the 8 bytes at `offset` in `target`'s window; the old value.
    fn atomic(&self, target: u32, offset: u64, op: RmaOp) -> Result<u64, Cause> {
        // SAFETY: an atomic has no local memory of the caller's (it fetches into the
        // transport's).
        let ticket = unsafe { self.post(target, op, offset) }?;
        let peer = self.world[target as usize];
        // The result is read in the borrow that saw the completion: between two borrows
        // another thread (`Threading::Multiple`) could post atomics that reuse its slot.
        let found = std::cell::Cell::new(0);
        environment::wait_until_or_lent(pml::stall::Awaited::State, |e| {
            let Some(engine) = e.native() else {
                return Ok(true);
            };
            let done = engine.rma_done(peer, ticket)?;
            if done {
                found.set(engine.rma_result(peer, ticket));
            }
            Ok(done)
        })?;
        Ok(found.get())
    }

    /// `target[offset..] = incoming ∘ target[offset..]`, each 8-byte element one device
    /// atomic (see the module's documentation); `old`, where given, gets the elements as
    /// they were. Only on a window whose `atomics` hold.
    pub fn accumulate(
        &self,
        target: u32,
        offset: u64,
        op: AccumulateOperation,
        datatype: Datatype,
        incoming: &[u8],
        mut old: Option<&mut [u8]>,
    ) -> Result<(), Cause> {
        let integer = operation::element_code(datatype).is_some_and(operation::is_integer);
        // The compare-and-swap loops' first guesses: the elements as one RDMA READ finds
        // them, so that each costs one round trip where no other rank meets it, rather
        // than two (a blind guess and the retry); a single element guesses 0 instead (a
        // fresh counter's), as a read would cost the round trip the guess may save.
        let swapped = !(op == AccumulateOperation::NoOp || integer && is_sum(op));
        let elements = incoming.len() / 8;
        let mut guesses = vec![
            0u8;
            if swapped && elements > 1 {
                8 * elements
            } else {
                0
            }
        ];
        if !guesses.is_empty() {
            // SAFETY: `guesses` is this function's, waited for here.
            unsafe { self.get(target, offset, &mut guesses, true) }?;
        }
        for (i, value) in incoming.chunks_exact(8).enumerate() {
            let at = offset + 8 * i as u64;
            let value = u64::from_ne_bytes(value.try_into().expect("8 bytes"));
            let before = match op {
                AccumulateOperation::NoOp if old.is_none() => continue,
                AccumulateOperation::NoOp => self.atomic(target, at, RmaOp::FetchAdd { add: 0 })?,
                _ if integer && is_sum(op) && old.is_none() => {
                    // Nothing fetched: posted, and complete by the epoch's end or a flush.
                    // SAFETY: an atomic has no local memory of the caller's.
                    unsafe { self.post(target, RmaOp::FetchAdd { add: value }, at) }?;
                    continue;
                }
                _ if integer && is_sum(op) => {
                    self.atomic(target, at, RmaOp::FetchAdd { add: value })?
                }
                _ => self.swap_loop(target, at, guesses.get(8 * i..8 * i + 8), |current| {
                    let mut next = current.to_ne_bytes();
                    op.apply(datatype, &value.to_ne_bytes(), &mut next);
                    u64::from_ne_bytes(next)
                })?,
            };
            if let Some(old) = old.as_deref_mut() {
                old[8 * i..8 * i + 8].copy_from_slice(&before.to_ne_bytes());
            }
        }
        Ok(())
    }

    /// Replaces the element at `offset` by `next(current)` with compare-and-swaps, the first
    /// comparing with `guess` (0 where none), until one finds the value it computed from;
    /// returns that value.
    fn swap_loop(
        &self,
        target: u32,
        offset: u64,
        guess: Option<&[u8]>,
        next: impl Fn(u64) -> u64,
    ) -> Result<u64, Cause> {
        let mut guess = guess.map_or(0, |g| u64::from_ne_bytes(g.try_into().expect("8 bytes")));
        loop {
            let swap = next(guess);
            let found = self.atomic(
                target,
                offset,
                RmaOp::CompareSwap {
                    compare: guess,
                    swap,
                },
            )?;
            if found == guess {
                return Ok(found);
            }
            guess = found;
        }
    }

    /// `MPI_Compare_and_swap` on one 8-byte element, by the device.
    pub fn compare_and_swap(
        &self,
        target: u32,
        offset: u64,
        compare: &[u8],
        swap: &[u8],
        old: &mut [u8],
    ) -> Result<(), Cause> {
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
        let op = RmaOp::CompareSwap {
            compare: word(compare),
            swap: word(swap),
        };
        let found = self.atomic(target, offset, op)?;
        old.copy_from_slice(&found.to_ne_bytes());
        Ok(())
    }
}
