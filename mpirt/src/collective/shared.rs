//! All-reductions of short vectors among ranks of one host, through a memory area that every
//! rank of the communicator maps: no messages, no matching, one flag per rank and call.
//!
//! Each rank owns two cells of the area and uses them by turns: for call k it writes its
//! vector into cell k % 2, then publishes k in the cell's flag. Every rank waits for each flag
//! of call k and reduces the vectors in rank order, so all ranks get the same result, in rank
//! order for non-commutative operations. A rank writes call k + 2 over call k only once it has
//! finished call k + 1, which needed every rank to have entered k + 1, hence to have finished
//! reading call k: two cells per rank need no other handshake. That argument holds for
//! blocking calls only (an immediate call may still be reading when its rank starts the
//! next), so immediate all-reductions go by messages.
//!
//! The area is set up by the communicator's first blocking all-reduce, whatever its length:
//! rank 0 creates a file under /dev/shm (named after the job, so that rsrun removes it if the
//! job dies), writes a random token in it and broadcasts its name and the token; every rank
//! maps it and checks the token (a rank on another host may find a file of that name that is
//! not this one), and all agree whether every rank could, and on the call's length; the name
//! is removed once agreed. Calls go by messages from then on if not every rank mapped it.
//!
//! Every later blocking all-reduce meets in the area, even one too long for it: such a rank
//! publishes its length with no data, so that ranks whose lengths disagree across the
//! area's limit all get the same error instead of waiting for each other in two places;
//! when every rank's vector is too long they go on by messages together.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pml::shared_mapping::SharedMapping;
use pml::Pml;

use crate::communicator::CommData;
use crate::datatype::Datatype;
use crate::environment::with_engine;
use crate::error::{Cause, Error};

use super::op::{Operation, SystemOperation};
use super::{blocking, calls, select};

/// Longest vector, in bytes, an all-reduce sends through the area.
pub(crate) const SHARED_MAX: usize = 4096;
/// A cell's flag and length, on a cache line of their own ahead of the vector; the area's
/// token takes one such line ahead of the cells.
const HEADER: usize = 64;
/// Most ranks a communicator may have to use the area: every rank reads every rank's vector,
/// so a call's work grows with the ranks, where recursive doubling's grows with their
/// logarithm; 16 is a bound chosen to keep that read within a few cache lines per rank for
/// the short vectors that come here, not a measured crossover.
const MAX_RANKS: u32 = 16;
const CELL: usize = HEADER + SHARED_MAX;
/// Room for the area's name in the broadcast that shares it.
const NAME_BYTES: usize = 64;
const TOKEN_BYTES: usize = 8;

/// Polls of a flag between two rounds of message progress, which a rank waiting here still
/// owes its peers (their sends to it, its immediate collectives).
const PROGRESS_EVERY: u32 = 64;
/// How long a waiting rank spins when every rank has a core of its own: a rank that waits
/// here is usually waiting for a peer that was preempted, and yielding would not run that
/// peer (it is on another core) but could hand this core to another process for a whole
/// time slice (on a busy host, 10 ms here instead of 1 s left 8-byte latencies spread
/// further). Only a wait for a peer that is computing lasts longer: then it yields, then it
/// naps.
const SPIN_FOR: Duration = Duration::from_secs(1);
const YIELD_FOR: Duration = Duration::from_millis(10);
const NAP: Duration = Duration::from_micros(50);
/// Polls between two readings of the clock.
const POLLS_PER_CLOCK: u32 = 256;

/// A cell's header, shared with the other ranks' processes.
#[repr(C)]
struct Flag {
    /// The call whose vector the cell holds (0 before the first).
    call: AtomicU64,
    len: AtomicU64,
}

/// This rank's view of a communicator's area.
pub(crate) struct Area {
    map: SharedMapping,
    rank: u32,
    size: u32,
    /// All-reductions run through the area so far.
    calls: Cell<u64>,
    /// The engine's choice: when ranks share CPUs, a waiting rank yields at once so that the
    /// one it waits for runs.
    spins: bool,
}

/// Whether a communicator has an area, as its first fitting call found out.
#[derive(Default)]
pub(crate) enum AreaState {
    #[default]
    Untried,
    Unavailable,
    Ready(Rc<Area>),
}

/// Where a communicator keeps its [`AreaState`], shared by its handles.
#[derive(Default)]
pub(crate) struct AreaSlot(RefCell<AreaState>);

impl std::fmt::Debug for AreaSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.0.borrow() {
            AreaState::Untried => "untried",
            AreaState::Unavailable => "unavailable",
            AreaState::Ready(_) => "ready",
        };
        f.write_str(state)
    }
}

fn area_bytes(size: u32) -> usize {
    HEADER + 2 * CELL * size as usize
}

/// The area's token, in its first line.
fn token_of(map: &SharedMapping) -> &AtomicU64 {
    // SAFETY: the mapping is page aligned and at least HEADER bytes long; other processes
    // touch the token only atomically.
    unsafe { &*map.base().as_ptr().cast::<AtomicU64>() }
}

/// A name no other area of this host has: the job (first, as rsrun's clean-up of a dead
/// job expects), this process, the communicator's context, and a count of the areas this
/// process made (context ids are reused).
fn unique_name(job_id: &str, context: u32) -> String {
    static MADE: AtomicU32 = AtomicU32::new(0);
    let n = MADE.fetch_add(1, Ordering::Relaxed);
    format!("mpirt-{job_id}-coll-{}-{context}-{n}", std::process::id())
}

/// A new area file, mapped and stamped with `token`; no file is left if that fails.
fn create(name: &str, len: usize, token: u64) -> Option<SharedMapping> {
    let map = SharedMapping::create(name, len).ok()?;
    token_of(&map).store(token, Ordering::Release);
    Some(map)
}

/// The area rank 0 made, if this file is it: of its length and with its token.
fn open(name: &str, len: usize, token: u64) -> Option<SharedMapping> {
    SharedMapping::open(name, len)
        .ok()
        .filter(|map| token_of(map).load(Ordering::Acquire) == token)
}

/// Sets up the communicator's area (collective; see the module's notes) during a call whose
/// vector on this rank is `bytes` long; the error is the ranks' disagreement on that length,
/// found while agreeing on the area, after the area's state is settled.
fn set_up(
    comm: &CommData,
    operation: &'static str,
    bytes: usize,
) -> Result<(Option<Area>, Option<Cause>), Error> {
    let len = area_bytes(comm.size);
    let mut shared_id = [0u8; NAME_BYTES + TOKEN_BYTES];
    let mut mapping = None;
    let mut made = None;
    if comm.rank == 0 {
        let job_id = crate::environment::job_id().map_err(|c| Error::new(operation, c))?;
        let name = unique_name(&job_id, comm.context);
        let token = RandomState::new().hash_one(&name);
        mapping = create(&name, len, token);
        if mapping.is_some() && name.len() < NAME_BYTES {
            shared_id[..name.len()].copy_from_slice(name.as_bytes());
            shared_id[NAME_BYTES..].copy_from_slice(&token.to_le_bytes());
            made = Some(name);
        }
    }
    let agreed = agree(comm, operation, &mut shared_id, &mut mapping, len, bytes);
    if let Some(name) = made {
        // Every rank has mapped it or given up (or the set-up failed): the name is no
        // longer needed.
        let _ = SharedMapping::remove(&name);
    }
    let (everyone_mapped, disagreement) = agreed?;
    let spins = with_engine(|e| Ok(e.waits_spin())).map_err(|c| Error::new(operation, c))?;
    let area = everyone_mapped.then(|| Area {
        map: mapping.expect("every rank mapped the area"),
        rank: comm.rank,
        size: comm.size,
        calls: Cell::new(0),
        spins,
    });
    Ok((area, disagreement))
}

/// The collective part of [`set_up`]: shares rank 0's area, maps it on the other ranks, and
/// finds out whether every rank did and whether the ranks' call lengths agree.
fn agree(
    comm: &CommData,
    operation: &'static str,
    shared_id: &mut [u8; NAME_BYTES + TOKEN_BYTES],
    mapping: &mut Option<SharedMapping>,
    len: usize,
    bytes: usize,
) -> Result<(bool, Option<Cause>), Error> {
    blocking(comm, operation, || {
        calls::broadcast(comm, 0, &mut shared_id[..])
    })?;
    let end = shared_id[..NAME_BYTES]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(NAME_BYTES);
    let shared = std::str::from_utf8(&shared_id[..end]).unwrap_or("");
    let token = u64::from_le_bytes(shared_id[NAME_BYTES..].try_into().expect("8 bytes"));
    if comm.rank != 0 && !shared.is_empty() {
        *mapping = open(shared, len, token);
    }
    // One minimum finds all three: whether any rank failed to map, and the shortest and
    // longest lengths with a rank holding each (length * size + rank orders by length).
    let key = bytes as i64 * i64::from(comm.size) + i64::from(comm.rank);
    let mine = [i64::from(mapping.is_none()), key, -key];
    let mut everyone = [0i64; 3];
    blocking(comm, operation, || {
        calls::all_reduce(comm, &mine[..], &mut everyone[..], SystemOperation::min())
    })?;
    let size = i64::from(comm.size);
    let (shortest, longest) = (everyone[1], -everyone[2]);
    let disagreement = (shortest / size != longest / size).then(|| {
        let other = if bytes as i64 == shortest / size {
            longest
        } else {
            shortest
        };
        Cause::LengthDisagrees {
            peer: (other % size) as i32,
            expected: bytes,
            got: (other / size) as usize,
        }
    });
    Ok((everyone[0] == 0, disagreement))
}

impl Area {
    /// The flag and the vector bytes of `rank`'s cell for calls of parity `phase`.
    fn cell(&self, rank: u32, phase: usize) -> (&Flag, *mut u8) {
        let offset = (rank as usize * 2 + phase) * CELL;
        debug_assert!(HEADER + offset + CELL <= self.map.len());
        // SAFETY: the cell lies inside the mapping (asserted), which is page aligned, so the
        // header is aligned for its atomics; other processes touch it only atomically.
        unsafe {
            let base = self.map.base().as_ptr().add(HEADER + offset);
            (&*base.cast::<Flag>(), base.add(HEADER))
        }
    }

    /// `recv = send_0 ∘ send_1 ∘ … ∘ send_(n-1)` over every rank's `send`; `false`, with
    /// nothing reduced, when every rank's vector is too long for the area.
    fn all_reduce(
        &self,
        send: &[u8],
        recv: &mut [u8],
        datatype: Datatype,
        op: &dyn Operation,
    ) -> Result<bool, Cause> {
        debug_assert!(send.len() == recv.len());
        let fits = send.len() <= SHARED_MAX;
        let call = self.calls.get() + 1;
        self.calls.set(call);
        let phase = (call % 2) as usize;
        let (flag, data) = self.cell(self.rank, phase);
        if fits {
            // SAFETY: this rank alone writes its cells, and no rank reads this one before its
            // flag says `call` (see the module's notes); the vector fits the cell.
            unsafe { std::ptr::copy_nonoverlapping(send.as_ptr(), data, send.len()) };
        }
        flag.len.store(send.len() as u64, Ordering::Relaxed);
        flag.call.store(call, Ordering::Release);
        // Every flag is awaited even after a disagreement, so that every rank leaves the call
        // having seen every length: then all of them report it, and none is still waiting.
        let mut disagreement = None;
        // From the last rank down, each vector applied from the left keeps rank order.
        for r in (0..self.size).rev() {
            let incoming = if r == self.rank {
                send
            } else {
                let (flag, data) = self.cell(r, phase);
                self.wait_for(&flag.call, call)?;
                let len = flag.len.load(Ordering::Relaxed) as usize;
                if len != send.len() {
                    disagreement.get_or_insert(Cause::LengthDisagrees {
                        peer: r as i32,
                        expected: send.len(),
                        got: len,
                    });
                }
                if disagreement.is_some() || !fits {
                    continue;
                }
                // SAFETY: rank r published these `len` bytes (no more than the cell holds,
                // as they equal this rank's, which fit) for this call (the acquire load in
                // `wait_for` orders them before this read), and does not write the cell
                // again before this rank has finished this call.
                unsafe { std::slice::from_raw_parts(data, len) }
            };
            if disagreement.is_some() || !fits {
                continue;
            }
            if r == self.size - 1 {
                recv.copy_from_slice(incoming);
            } else {
                op.apply(datatype, incoming, recv);
            }
        }
        match disagreement {
            Some(cause) => Err(cause),
            None => Ok(fits),
        }
    }

    /// Waits until `flag` says `call`, moving messages on meanwhile.
    fn wait_for(&self, flag: &AtomicU64, call: u64) -> Result<(), Cause> {
        let spin = if self.spins { SPIN_FOR } else { Duration::ZERO };
        let mut polls = 0u32;
        let mut idle = Duration::ZERO;
        let mut since = None;
        while flag.load(Ordering::Acquire) != call {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(PROGRESS_EVERY) {
                // Steps the immediate collectives in flight too.
                with_engine(|e| e.progress())?;
            }
            if idle < spin {
                if polls.is_multiple_of(POLLS_PER_CLOCK) {
                    idle = since.get_or_insert_with(Instant::now).elapsed();
                }
                std::hint::spin_loop();
                continue;
            }
            idle = since.get_or_insert_with(Instant::now).elapsed();
            if idle < spin + YIELD_FOR {
                std::thread::yield_now();
            } else {
                std::thread::sleep(NAP);
            }
        }
        Ok(())
    }
}

/// The communicator's area, set up by this call (of `bytes` on this rank) if it is the first
/// to ask.
fn area(comm: &CommData, operation: &'static str, bytes: usize) -> Result<Option<Rc<Area>>, Error> {
    let slot = &comm.area_slot().0;
    let untried = matches!(*slot.borrow(), AreaState::Untried);
    if untried {
        let (area, disagreement) = set_up(comm, operation, bytes)?;
        // The evidence that areas are used: without it a broken set-up would pass unseen,
        // every call going by messages.
        if verbose() {
            bootstrap::output::say(&format!(
                "mpirt: rank {}: all-reduce area of {} ranks {}",
                comm.world_rank(comm.rank),
                comm.size,
                if area.is_some() {
                    "ready"
                } else {
                    "unavailable: all-reduces go by messages"
                }
            ));
        }
        *slot.borrow_mut() = match area {
            Some(area) => AreaState::Ready(Rc::new(area)),
            None => AreaState::Unavailable,
        };
        if let Some(cause) = disagreement {
            return Err(Error::new(operation, cause));
        }
    }
    Ok(match &*slot.borrow() {
        AreaState::Ready(area) => Some(Rc::clone(area)),
        _ => None,
    })
}

/// Whether `rsrun --verbose` (MPIRT_VERBOSE, read as the engine reads it) asked for the
/// set-up choices.
fn verbose() -> bool {
    matches!(std::env::var("MPIRT_VERBOSE").as_deref(), Ok(v) if !v.is_empty() && v != "0")
}

/// Runs a blocking all-reduce through the area; `false` if it must go by messages instead.
/// The buffers were checked against each other by the caller.
pub(crate) fn try_all_reduce(
    comm: &CommData,
    send: &[u8],
    recv: &mut [u8],
    datatype: Datatype,
    op: &dyn Operation,
) -> Result<bool, Error> {
    const OPERATION: &str = "all_reduce_into";
    let wanted =
        select::allreduce_in_shared_memory().map_err(|cause| Error::new(OPERATION, cause))?;
    if !wanted || comm.size == 1 || comm.size > MAX_RANKS || datatype.needs_check() {
        return Ok(false);
    }
    let Some(area) = area(comm, OPERATION, send.len())? else {
        return Ok(false);
    };
    area.all_reduce(send, recv, datatype, op)
        .map_err(|cause| Error::new(OPERATION, cause))
}
