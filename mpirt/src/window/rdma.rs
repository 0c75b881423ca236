//! The RDMA path: where the PML's one-sided operations (`pml::OneSided`: the native
//! engine's verbs transport or OFI on a provider with RMA, or UCX's RMA on the UCX PML)
//! reach a window's ranks, puts are RDMA WRITEs (`fi_write`, `ucp_put_nbx`) and gets RDMA
//! READs (`fi_read`, `ucp_get_nbx`) straight between the origin's buffer and the target's
//! window memory, registered at the window's creation (each rank's address and packed key
//! gathered then, and unpacked by each rank for its own use; a dynamic window's blocks as
//! they are attached, each learned by an origin when it first reaches into it: `Attached`),
//! with no help from the target's
//! CPU (where UCX does them in software, over TCP, the target's worker applies them, and
//! OFI's emulating providers ask the target's progress). The device's atomics below are
//! `fi_fetch_atomic`/`fi_compare_atomic` over OFI and `ucp_atomic_op_nbx` on UCX. Over OFI
//! puts and gets to a target go many at a time, but an atomic only alone (libfabric orders
//! RMA and atomics only where a provider promises it: `pml/src/transport/ofi/one_sided.rs`),
//! so the lock word's compare-and-swap and the READ beside it go one after the other: a free
//! lock costs two round trips there, not one. Completion:
//! each origin keeps the last operation it posted to each target; a flush and every epoch end
//! wait until those are done at the target before the epoch's own messages (the fence's,
//! `complete`'s, the unlock) go out, so a target that got them has the data. On verbs and
//! OFI a completed operation is at the target (a reliable connection; OFI's writes ask
//! `FI_DELIVERY_COMPLETE`); on UCX a put's completion is local (its buffer may be reused),
//! and the target has it once an endpoint flush started after it completed, which
//! `rma_done` starts.
//!
//! Accumulates and atomics keep MPI's atomicity, which device atomics would break if they
//! met the CPU's: the device's atomics are atomic only with each other (`IBV_ATOMIC_HCA`),
//! not with the target's own operations. So a window takes one of two ways for all of its
//! accumulates, agreed by every rank at creation, never both:
//! - by the device, where its elements are 8-byte numbers (`i64`, `u64`, `f64`), every rank
//!   reaches every rank with device atomics (its own window through a loopback queue pair),
//!   every window is 8-byte aligned and every rank exposed its accumulate lock word (below);
//!   a dynamic window agrees the same at creation, its elements 8-byte aligned wherever they
//!   are attached, and reaches each block it learned by the device, a block that could not
//!   be registered by messages (each location's accumulates one way, fixed at `attach`);
//! - else by active messages (`messaging.rs`), which the target applies, as on TCP.
//!
//! On the device, each accumulate, `get_accumulate`, `fetch_and_op` and `compare_and_swap`
//! (typed ones too) goes one of two ways, chosen by its operation alone:
//! - element by element with device atomics, for the operations the device does in one
//!   atomic or that must be atomic with `compare_and_swap`: an integer sum is a
//!   fetch-and-add (posted without waiting where nothing is fetched), `compare_and_swap` a
//!   compare-and-swap, and replace a
//!   compare-and-swap loop whose first guess one RDMA READ of the range found (0 for a
//!   single element);
//! - under the target's accumulate lock, for every other operation (float sums, min, max,
//!   products, bitwise and logical ones): take the lock word with a compare-and-swap and
//!   RDMA READ the range (posted together), compute at the origin, RDMA WRITE
//!   it back, wait for the write, release the lock with a fetch-and-add (posted; a flush
//!   or the epoch's end waits for it). Where the lock is free that is two round trips
//!   whatever the length (three on UCX, which orders the read after the take), three with a flush's wait for the release, where a
//!   compare-and-swap loop per element cost one per element (64 KiB of f64 sums: 8192),
//!   and a single element's loop one or two;
//! - a no-op that fetches (`get_accumulate`, `fetch_and_op` with `no_op`) is one RDMA READ
//!   of the range, whatever the datatype.
//!
//! Why by operation, not by length: a locked READ-compute-WRITE is atomic only with others
//! that take the lock. A device atomic on one of its elements between its READ and its
//! WRITE (another rank's one-element `fetch_and_op` of the same operation, say) would be
//! overwritten: a lost update. So all accumulates of one operation must go one way, and
//! the ways meet only where MPI asks for no atomicity: MPI's accumulates are atomic with
//! concurrent ones of the same operation and with no-ops (`accumulate_ops`'s default,
//! `same_op_no_op`). A no-op reads with an RDMA READ, never fetch-and-adds of 0: a
//! fetch-and-add writes its element back under the device's atomics lock, which a locked
//! accumulate's RDMA WRITE does not take (Soft-RoCE's and HCAs' alike), so one that met the
//! write would undo it; a READ writes nothing, and sees each aligned 8-byte element before
//! or after the write of it where the device moves such words whole. Replace stays on the device with `compare_and_swap`, as
//! lock-free queues and MCS locks mix `fetch_and_op(replace)` and `compare_and_swap` on
//! one location and need them atomic with each other. The lock word is 8 bytes of each
//! rank's own, registered beside its window and touched only by device atomics; it holds
//! the holder's world rank (plus 1) and a count in its low half, so that a waiter can name
//! a holder that keeps it (see `lock`).
//!
//! Puts and gets may meet accumulates on one location only erroneously (MPI), so they take
//! RDMA either way. Operand byte order: the device's atomics take the host's (little-endian
//! x86 and Soft-RoCE both).

use std::cell::{Cell, RefCell};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use pml::transport::RmaOp;
use pml::{Pml, PmlError, RemoteKey, WindowExposure};

use super::operation::{self, AccumulateOperation};
use super::wire::Region;
use super::WindowFault;
use crate::collective::CommunicatorCollectives;
use crate::communicator::{CommData, Communicator};
use crate::datatype::Datatype;
use crate::environment::{self, with_engine_or_lent};
use crate::error::{Cause, Error};
use crate::Rank;

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

/// Whether the device does accumulates of `op` on elements of `datatype` element by element
/// (else under the target's accumulate lock; see the module's documentation).
fn per_element(op: AccumulateOperation, datatype: Datatype) -> bool {
    let integer = operation::element_code(datatype).is_some_and(operation::is_integer);
    matches!(op, AccumulateOperation::NoOp | AccumulateOperation::Replace) || integer && is_sum(op)
}

/// The most bytes a locked accumulate moves under one take of the lock: MPI's atomicity is
/// per element, so a longer one goes in turns, each holding the lock for a bounded time (a
/// 256 KiB READ and WRITE), so that other ranks get turns between and a waiter's
/// [`LOCK_PATIENCE`] only runs out on a holder that failed, never on one moving a long range.
/// A multiple of every element's size.
const LOCKED_TURN: usize = 256 << 10;

/// How long a rank waits for an accumulate lock that one holder keeps before it names the
/// holder in an error: a holder keeps it for two round trips plus moving its range, so
/// this only passes where the holder failed (its queue pair to the target broke) holding it.
const LOCK_PATIENCE: Duration = Duration::from_secs(60);

/// How many times the pause between takes of an accumulate lock held by another rank doubles
/// (see `backoff`): from half a round trip to 16.
const BACKOFF_DOUBLINGS: u32 = 5;

/// How long a rank pauses before its next compare-and-swap on an accumulate lock word that
/// its last `failures` takes (at least 1) found held, each of which took `round_trip`: half a
/// round trip after the first, doubling with each further failure up to 16 round trips
/// ([`BACKOFF_DOUBLINGS`]), scaled by `jitter` (0 to 255: 50% to 100%) so that ranks that
/// failed together do not retry together. A holder keeps the lock for at least two round
/// trips of its own (its READ, its WRITE), so compare-and-swaps back to back mostly fail, each
/// an atomic that the target's device (or its CPU, where a provider emulates them) serves for
/// nothing, delaying the holder's own operations there.
fn backoff(round_trip: Duration, failures: u32, jitter: u8) -> Duration {
    let half_trips = 1u32 << failures.saturating_sub(1).min(BACKOFF_DOUBLINGS);
    round_trip * half_trips / 2 * (256 + u32::from(jitter)) / 512
}

/// The first state of world rank `me`'s draws (`Rdma::jitter`): an odd number times a
/// non-zero one, never the zero state that xorshift stays in, and another on each rank.
fn first_draw(me: u32) -> u64 {
    (u64::from(me) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Rank `rank` of a window's communicator as errors name it: with its world rank `world`,
/// where the two differ.
fn named(rank: u32, world: u32) -> String {
    if rank == world {
        rank.to_string()
    } else {
        format!("{rank} (world rank {world})")
    }
}

/// The failure `cause` of a one-sided operation on rank `target` of the window's
/// communicator, world rank `world`: the PML names its peers by world rank, while the
/// window's errors (and the operation, "put to rank 1") name the communicator's, so where
/// the two differ the text says which rank of the window the PML's is.
fn in_communicator(cause: Cause, target: u32, world: u32) -> Cause {
    match cause {
        Cause::Messaging(PmlError::OneSided { cause, .. }) if target != world => {
            Cause::Window(WindowFault::OneSided {
                target: target as Rank,
                world: world as Rank,
                why: cause.into(),
            })
        }
        other => other,
    }
}

/// A window's RDMA state on this rank.
pub(super) struct Rdma {
    /// Each rank's window (address, key), where this rank reaches it by RDMA.
    targets: Vec<Option<RemoteKey>>,
    /// Each rank's accumulate lock word (address, key), on a window whose `atomics` hold.
    locks: Vec<Option<RemoteKey>>,
    /// This rank's lock word, which only the device touches (peers' atomics, and this
    /// rank's through the loopback queue pair): kept, never read here, until the window
    /// goes, after `close` released its exposure.
    _lock_word: Box<AtomicU64>,
    lock_exposure: Option<WindowExposure>,
    /// Locks this rank took, for the low half of its lock values.
    locks_taken: Cell<u32>,
    /// The state of this rank's pseudo-random draws (`jitter`).
    draws: Cell<u64>,
    /// This rank's world rank.
    me: u32,
    /// Each rank's world rank.
    world: Vec<u32>,
    /// Whether this window's accumulates and atomics go by the device (see the module's
    /// documentation); agreed by every rank.
    pub atomics: bool,
    /// This rank's window as exposed, released when the window goes.
    exposure: Option<WindowExposure>,
    /// Per rank, the ticket of the last operation posted to it and not yet waited for.
    pending: RefCell<Vec<u64>>,
    /// A dynamic window's attached memory, on this rank and as learned of the others.
    attached: Option<Attached>,
}

/// The blocks of one rank's dynamic window that this rank learned (their keys left out),
/// each with the key unpacked for this rank (`None`: not exposed, reached by messages).
type Learned = Vec<(Region, Option<u64>)>;

/// A dynamic window's memory on the RDMA path. Attaching is local (`MPI_Win_attach` is not
/// collective), so an origin learns of a target's block when it first reaches into it: it
/// asks the target (`Ask::Region`, by message), which answers with the block that holds the
/// bytes whole (its address, length and key) or refuses, named, as it refuses an operation
/// by messages, and keeps what it learned. Every later operation inside a learned block goes
/// by RDMA, checked against the block's bounds here (and by the engine against the key's),
/// so nothing reaches past a block the target attached; one that a learned block does not
/// hold asks again.
///
/// Detaching does not race a lookup: the target answers lookups in its own progress, so it
/// answers with the blocks attached at that moment. An origin that learned a block before it
/// was detached can still reach it: MPI makes such accesses erroneous, and here they land in
/// that block alone, which the window still borrows (`attach` lends memory for the window's
/// lifetime) and keeps registered until it is freed, so that a late operation neither
/// writes memory handed back nor breaks the connection with a key the device no longer
/// knows.
struct Attached {
    /// Whether one-sided operations reach each rank at all.
    reached: Vec<bool>,
    /// Per rank, the blocks this rank learned.
    known: RefCell<Vec<Learned>>,
    /// This rank's attached blocks as exposed, released when the window goes.
    exposed: RefCell<Vec<WindowExposure>>,
}

/// What one-sided operations a rank offers windows (`Rdma::available`), ordered from none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum RmaOffer {
    None = 0,
    /// Only where asked (`MPIRT_WINDOW_PATH=rdma`).
    Asked = 1,
    /// Unasked too.
    Default = 2,
}

/// Whether a window goes by one-sided operations, from what its ranks offer: where every
/// rank has them, and either a rank asked for the RDMA path (`asked`) or every rank takes
/// them unasked. A window on providers that emulate RMA slower than messages (OFI's tcp
/// and shm) so goes by messages unless asked.
pub(super) fn rdma_agreed(offers: impl IntoIterator<Item = RmaOffer>, asked: bool) -> bool {
    let least = offers.into_iter().min().unwrap_or(RmaOffer::None);
    least == RmaOffer::Default || (asked && least == RmaOffer::Asked)
}

impl Rdma {
    /// Whether this rank's PML does one-sided operations (the native engine with verbs, or
    /// OFI on a provider with RMA, in a build with either; UCX's RMA), and whether windows
    /// take them unasked (`RmaReach::by_default`): a window's ranks agree on it at creation
    /// (`rdma_agreed`) and `open` only where all have one.
    pub fn available(data: &CommData) -> RmaOffer {
        let me = data.world_rank(data.rank);
        if !cfg!(any(feature = "verbs", feature = "ofi", feature = "ucx")) {
            return RmaOffer::None;
        }
        match with_engine_or_lent(|e| Ok(e.one_sided().rma_reach(me))) {
            Ok(Some(reach)) if reach.by_default => RmaOffer::Default,
            Ok(Some(_)) => RmaOffer::Asked,
            _ => RmaOffer::None,
        }
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
        Rdma::open_with(comm, data, (base, bytes), element, what, None)
    }

    /// `open`, for a dynamic window too (`attached`: its memory, none yet), which is kept
    /// though no rank exposes fixed memory.
    fn open_with(
        comm: &impl Communicator,
        data: &CommData,
        (base, bytes): (*mut u8, usize),
        element: Option<u8>,
        what: &str,
        attached: Option<Attached>,
    ) -> Result<Option<Rdma>, Error> {
        let size = comm.size() as u32;
        let world: Vec<u32> = (0..size).map(|r| data.world_rank(r)).collect();
        // A rank whose window cannot be registered (the locked-memory limit, `ulimit -l`)
        // must still reach the all-gather below, or the others wait in it for good: its
        // window is then not exposed, and the others' operations on it go by messages.
        let opened = with_engine_or_lent(|e| {
            let engine = e.one_sided();
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
        // The accumulate lock word, where accumulates may go by the device: a rank that
        // cannot register it takes the window's accumulates to messages, for every rank.
        let lock_word = Box::new(AtomicU64::new(0));
        let lock_exposure = if reaches_all && element.is_some_and(device_element) {
            with_engine_or_lent(|e| {
                Ok(e.one_sided()
                    .expose_window(lock_word.as_ptr().cast(), 8)
                    .ok()
                    .flatten())
            })
            .unwrap_or(None)
        } else {
            None
        };
        let exposed = exposure.is_some() || bytes == 0;
        let aligned = (base as usize).is_multiple_of(8);
        let flags = u64::from(exposed)
            | u64::from(reaches_all && aligned) << 1
            | u64::from(lock_exposure.is_some()) << 2;
        let key_len = |e: &Option<WindowExposure>| e.as_ref().map_or(0, |e| e.key.len() as u64);
        let mine = [
            base as u64,
            key_len(&exposure),
            flags,
            lock_word.as_ptr() as u64,
            key_len(&lock_exposure),
        ];
        let mut all = vec![0u64; 5 * size as usize];
        let mut keys = Vec::new();
        let gathered = comm
            .try_all_gather_into(&mine[..], &mut all[..])
            .and_then(|()| {
                keys = Rdma::gather_keys(comm, &all, [&exposure, &lock_exposure])?;
                Ok(())
            });
        if let Err(e) = gathered {
            Rdma::release(exposure);
            Rdma::release(lock_exposure);
            return Err(Error::new(what, e.cause().clone()));
        }
        let atomics =
            element.is_some_and(device_element) && all.chunks_exact(5).all(|theirs| theirs[2] == 7);
        // Each reached rank's keys, unpacked for this rank (UCX's rkeys, on its endpoint to
        // that rank); a rank of a zero-length window has none, and nothing to reach. A key
        // that fails to unpack is recorded, not returned: this rank must still reach the
        // agreement below, or it alone would release its window while the others put into it.
        let mut failed: Option<(u32, Cause)> = None;
        let unpacked = with_engine_or_lent(|e| {
            let engine = e.one_sided();
            let mut unpack = |rank: usize, at: usize, len: u64, wanted: bool| {
                let peer = world[rank];
                if failed.is_some() || !wanted || len == 0 || engine.rma_reach(peer).is_none() {
                    return None;
                }
                let packed = &keys[rank][at][..len as usize];
                match engine.remote_key(peer, packed) {
                    Ok(key) => Some(RemoteKey {
                        addr: all[5 * rank + if at == 0 { 0 } else { 3 }],
                        key,
                    }),
                    Err(e) => {
                        failed = Some((peer, Cause::from(e)));
                        None
                    }
                }
            };
            let mut targets = Vec::with_capacity(size as usize);
            let mut locks = Vec::with_capacity(size as usize);
            for (rank, theirs) in all.chunks_exact(5).enumerate() {
                targets.push(unpack(rank, 0, theirs[1], theirs[2] & 1 != 0));
                locks.push(unpack(rank, 1, theirs[4], atomics));
            }
            Ok((targets, locks))
        });
        let (targets, locks) = unpacked.unwrap_or_else(|cause| {
            failed = Some((data.world_rank(data.rank), cause));
            (Vec::new(), Vec::new())
        });
        // Every rank learns whether every rank unpacked every key it needs: where one did
        // not, no rank may reach another by RDMA (the failed one could not reach all).
        let mut verdicts = vec![0u64; size as usize];
        let agreed = comm.try_all_gather_into(&[u64::from(failed.is_some())], &mut verdicts[..]);
        if agreed.is_err() || verdicts.iter().any(|&v| v != 0) {
            Rdma::forget(&targets);
            Rdma::forget(&locks);
            Rdma::release(exposure);
            Rdma::release(lock_exposure);
            return match agreed {
                Err(e) => Err(Error::new(what, e.cause().clone())),
                Ok(()) => {
                    if let Some((peer, cause)) = failed {
                        Rdma::not_unpacked(data, peer, &cause);
                    }
                    Ok(None)
                }
            };
        }
        if attached.is_none() && targets.iter().all(Option::is_none) && exposure.is_none() {
            Rdma::forget(&locks);
            Rdma::release(lock_exposure);
            return Ok(None);
        }
        Ok(Some(Rdma {
            targets,
            locks,
            _lock_word: lock_word,
            lock_exposure,
            locks_taken: Cell::new(0),
            draws: Cell::new(first_draw(data.world_rank(data.rank))),
            me: data.world_rank(data.rank),
            world,
            atomics,
            exposure,
            pending: RefCell::new(vec![0; size as usize]),
            attached,
        }))
    }

    /// The RDMA state of a dynamic window over `data`'s ranks, where the one-sided transport
    /// reaches one (the ranks agreed on the RDMA path at creation); no memory yet.
    /// Collective. Its accumulates go by the device where a fixed window's would, agreed as
    /// `open` agrees (here over no bytes): `element` is the window's element code where its
    /// elements are 8-byte aligned wherever they lie (every block attached later holds
    /// them). A block that cannot be registered is reached by messages, its accumulates
    /// too: each location's accumulates still go one way, fixed when its block is attached.
    pub fn dynamic(
        comm: &impl Communicator,
        data: &CommData,
        element: Option<u8>,
        what: &str,
    ) -> Result<Option<Rdma>, Error> {
        let world: Vec<u32> = (0..data.size).map(|r| data.world_rank(r)).collect();
        let reached: Vec<bool> = with_engine_or_lent(|e| {
            let engine = e.one_sided();
            Ok(world
                .iter()
                .map(|&w| engine.rma_reach(w).is_some())
                .collect())
        })
        .unwrap_or_default();
        let anyone = reached.contains(&true);
        let attached = Attached {
            reached,
            known: RefCell::new(vec![Vec::new(); world.len()]),
            exposed: RefCell::new(Vec::new()),
        };
        let memory = (std::ptr::null_mut(), 0);
        match Rdma::open_with(comm, data, memory, element, what, Some(attached))? {
            // This rank reaches no rank, so not every one: the window's accumulates go by
            // messages on every rank, and no rank uses this rank's lock word.
            Some(mut rdma) if !anyone => {
                rdma.close();
                Ok(None)
            }
            rdma => Ok(rdma),
        }
    }

    /// Exposes `bytes` at `base`, attached to this rank's dynamic window, to the one-sided
    /// transport until the window goes (see `Attached` on detaching): its packed key for
    /// origins that ask, or none where it cannot be registered (the locked-memory limit), so
    /// that origins reach it by messages.
    pub fn expose_attached(&self, data: &CommData, base: *mut u8, bytes: usize) -> Vec<u8> {
        let Some(attached) = &self.attached else {
            return Vec::new();
        };
        match with_engine_or_lent(|e| e.one_sided().expose_window(base, bytes)) {
            Ok(Some(exposure)) => {
                let key = exposure.key.clone();
                attached.exposed.borrow_mut().push(exposure);
                key
            }
            Ok(None) => Vec::new(),
            Err(cause) => {
                Rdma::not_exposed(data, bytes, &cause);
                Vec::new()
            }
        }
    }

    /// Whether operations on `target`'s attached memory may go by RDMA (it is reached so).
    pub fn reaches_attached(&self, target: u32) -> bool {
        self.attached
            .as_ref()
            .is_some_and(|a| a.reached[target as usize])
    }

    /// The block of `target`'s dynamic window that this rank learned and that holds the
    /// `len` bytes at `address` whole: its address, and its key (`None`: by messages).
    pub fn known(&self, target: u32, address: u64, len: u64) -> Option<(u64, Option<u64>)> {
        let attached = self.attached.as_ref()?;
        let known = attached.known.borrow();
        known[target as usize]
            .iter()
            .find(|(block, _)| block.holds(address, len))
            .map(|(block, key)| (block.address, *key))
    }

    /// Keeps `block`, which `target` said is attached there, unpacking its key; returns its
    /// address and the key (`None`: not exposed, by messages).
    pub fn learn(&self, target: u32, block: Region) -> Result<(u64, Option<u64>), Cause> {
        let attached = self.attached.as_ref().expect("a dynamic window's");
        let peer = self.world[target as usize];
        let key = if block.key.is_empty() {
            None
        } else {
            let unpacked = with_engine_or_lent(|e| e.one_sided().remote_key(peer, &block.key));
            Some(unpacked.map_err(|c| in_communicator(c, target, peer))?)
        };
        let address = block.address;
        let block = Region {
            key: Vec::new(),
            ..block
        };
        attached.known.borrow_mut()[target as usize].push((block, key));
        Ok((address, key))
    }

    /// Says (under `MPIRT_VERBOSE`) that this rank could not unpack `peer`'s window key (the
    /// world rank; this rank's own where its engine was not to be had), so that the window
    /// goes by messages on every rank.
    fn not_unpacked(data: &CommData, peer: u32, cause: &Cause) {
        if crate::collective::verbose() {
            bootstrap::output::say(&format!(
                "mpirt: rank {}: unpacking rank {peer}'s window key failed ({cause}): \
                 operations on this window go by messages, on every rank",
                data.world_rank(data.rank)
            ));
        }
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

    /// Every rank's packed keys (its window's, its lock word's), each padded to the longest
    /// any rank has, from `all` (5 words a rank, the key lengths at 1 and 4) and this rank's
    /// `exposures`: by rank, the two keys' bytes. Collective.
    fn gather_keys(
        comm: &impl Communicator,
        all: &[u64],
        exposures: [&Option<WindowExposure>; 2],
    ) -> Result<Vec<[Vec<u8>; 2]>, Error> {
        let longest = all
            .chunks_exact(5)
            .map(|theirs| theirs[1].max(theirs[4]))
            .max()
            .unwrap_or(0);
        let words = (longest as usize).div_ceil(8);
        let ranks = all.len() / 5;
        if words == 0 {
            return Ok(vec![[Vec::new(), Vec::new()]; ranks]);
        }
        let mut mine = vec![0u64; 2 * words];
        for (part, exposure) in mine.chunks_exact_mut(words).zip(exposures) {
            if let Some(exposure) = exposure {
                for (word, bytes) in part.iter_mut().zip(exposure.key.chunks(8)) {
                    let mut padded = [0u8; 8];
                    padded[..bytes.len()].copy_from_slice(bytes);
                    *word = u64::from_ne_bytes(padded);
                }
            }
        }
        let mut theirs = vec![0u64; 2 * words * ranks];
        comm.try_all_gather_into(&mine[..], &mut theirs[..])?;
        let bytes = |words: &[u64]| words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(theirs
            .chunks_exact(2 * words)
            .map(|keys| [bytes(&keys[..words]), bytes(&keys[words..])])
            .collect())
    }

    fn release(exposure: Option<WindowExposure>) {
        if let Some(exposure) = exposure {
            let _ = with_engine_or_lent(|e| {
                e.one_sided().release_window(exposure);
                Ok(())
            });
        }
    }

    /// Gives back the keys unpacked for `keys` (no operation through them is in flight).
    fn forget(keys: &[Option<RemoteKey>]) {
        let _ = with_engine_or_lent(|e| {
            let engine = e.one_sided();
            for key in keys.iter().flatten() {
                engine.forget_key(key.key);
            }
            Ok(())
        });
    }

    /// Gives this rank's window back (every rank is done with it: after the window's
    /// closing barrier).
    pub fn close(&mut self) {
        if let Some(attached) = self.attached.take() {
            for known in attached.known.into_inner() {
                let keys: Vec<Option<RemoteKey>> = known
                    .into_iter()
                    .map(|(block, key)| {
                        key.map(|key| RemoteKey {
                            addr: block.address,
                            key,
                        })
                    })
                    .collect();
                Rdma::forget(&keys);
            }
            for exposure in attached.exposed.into_inner() {
                Rdma::release(Some(exposure));
            }
        }
        Rdma::forget(&self.targets);
        Rdma::forget(&self.locks);
        self.targets.iter_mut().for_each(|t| *t = None);
        self.locks.iter_mut().for_each(|l| *l = None);
        Rdma::release(self.exposure.take());
        Rdma::release(self.lock_exposure.take());
    }

    /// Whether operations to `target`'s window go by RDMA (a fixed window's: see
    /// `reaches_attached` for a dynamic one's).
    pub fn reaches(&self, target: u32) -> bool {
        self.targets[target as usize].is_some()
    }

    /// Posts `op` at `offset` in `target`'s window; returns its ticket.
    ///
    /// # Safety
    /// `op`'s local memory must stay valid and untouched until the operation completed
    /// (`complete`, or `wait` on the ticket).
    unsafe fn post(&self, target: u32, op: RmaOp, offset: u64) -> Result<u64, Cause> {
        let remote = self.remote(target, offset, op.bytes())?;
        // SAFETY: forwarded from this function's contract.
        unsafe { self.post_at(target, op, remote) }
    }

    /// Where the `bytes` at `offset` in `target`'s window lie for the device.
    fn remote(&self, target: u32, offset: u64, bytes: usize) -> Result<RemoteKey, Cause> {
        match self.targets[target as usize] {
            Some(key) => Ok(RemoteKey {
                addr: key.addr + offset,
                key: key.key,
            }),
            // A dynamic window's offsets are addresses, inside a block learned with a key
            // (`Window::attached_rdma` checked).
            None => match self.known(target, offset, bytes as u64) {
                Some((_, Some(key))) => Ok(RemoteKey { addr: offset, key }),
                _ => Err(Cause::Window(WindowFault::Unsupported(format!(
                    "no block of rank {}'s dynamic window known here holds the {bytes} byte(s) \
                     at address {offset:#x}",
                    self.named(target),
                )))),
            },
        }
    }

    /// Posts `op` at `remote` (in `target`'s window or its lock word); returns its ticket.
    ///
    /// # Safety
    /// As `post`.
    unsafe fn post_at(&self, target: u32, op: RmaOp, remote: RemoteKey) -> Result<u64, Cause> {
        let peer = self.world[target as usize];
        let ticket = with_engine_or_lent(|e| {
            // SAFETY: forwarded from this function's contract.
            unsafe { e.one_sided().rma(peer, op, remote) }
        })
        .map_err(|c| in_communicator(c, target, peer))?;
        self.pending.borrow_mut()[target as usize] = ticket;
        Ok(ticket)
    }

    /// Waits until the operations to `target` up to `ticket` completed.
    pub fn wait(&self, target: u32, ticket: u64) -> Result<(), Cause> {
        let peer = self.world[target as usize];
        environment::wait_until_or_lent(pml::stall::Awaited::State, |e| {
            e.one_sided().rma_done(peer, ticket)
        })
        .map_err(|c| in_communicator(c, target, peer))
    }

    /// Whether the operations to `target` up to `ticket` completed, after moving the PML
    /// once (a request's `test`).
    pub fn done(&self, target: u32, ticket: u64) -> Result<bool, Cause> {
        let peer = self.world[target as usize];
        with_engine_or_lent(|e| {
            e.progress()?;
            e.one_sided().rma_done(peer, ticket)
        })
        .map_err(|c| in_communicator(c, target, peer))
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

    /// `bytes` into `target`'s window at `offset`, by RDMA WRITE; its ticket (0: nothing to
    /// write).
    ///
    /// # Safety
    /// `bytes` must stay unchanged until the put completed (`complete`, or `wait` on the
    /// ticket).
    pub unsafe fn put(&self, target: u32, offset: u64, bytes: &[u8]) -> Result<u64, Cause> {
        if bytes.is_empty() {
            return Ok(0);
        }
        let op = RmaOp::Write {
            local: bytes.as_ptr(),
            len: bytes.len(),
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { self.post(target, op, offset) }
    }

    /// `target`'s window at `offset` into `into`, by RDMA READ; its ticket (0: nothing to
    /// read).
    ///
    /// # Safety
    /// `into` must stay valid for writes, and untouched, until the get completed
    /// (`complete`, or `wait` on the ticket).
    pub unsafe fn get(&self, target: u32, offset: u64, into: &mut [u8]) -> Result<u64, Cause> {
        if into.is_empty() {
            return Ok(0);
        }
        let op = RmaOp::Read {
            local: into.as_mut_ptr(),
            len: into.len(),
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { self.post(target, op, offset) }
    }

    /// `target`'s window at `offset` into `into`, by RDMA READ, waited for.
    fn read(&self, target: u32, offset: u64, into: &mut [u8]) -> Result<(), Cause> {
        // SAFETY: `into` is borrowed by this call, which waits for the read.
        let ticket = unsafe { self.get(target, offset, into) }?;
        if ticket != 0 {
            self.wait(target, ticket)?;
        }
        Ok(())
    }

    /// One device atomic on the 8 bytes at `offset` in `target`'s window; the old value.
    fn atomic(&self, target: u32, offset: u64, op: RmaOp) -> Result<u64, Cause> {
        let remote = self.remote(target, offset, 8)?;
        self.atomic_at(target, remote, op)
    }

    /// One device atomic on the 8 bytes at `remote` (in `target`'s window or its lock
    /// word); the old value.
    fn atomic_at(&self, target: u32, remote: RemoteKey, op: RmaOp) -> Result<u64, Cause> {
        // SAFETY: an atomic has no local memory of the caller's (it fetches into the
        // transport's).
        let ticket = unsafe { self.post_at(target, op, remote) }?;
        self.atomic_result(target, ticket, ticket)
    }

    /// Waits until the operations to `target` up to `last` completed; the old value the
    /// atomic `ticket` (posted no later) fetched.
    fn atomic_result(&self, target: u32, ticket: u64, last: u64) -> Result<u64, Cause> {
        let peer = self.world[target as usize];
        // The result is read in the borrow that saw the completion: between two borrows
        // another thread (`Threading::Multiple`) could post atomics that reuse its slot.
        let found = Cell::new(0);
        environment::wait_until_or_lent(pml::stall::Awaited::State, |e| {
            let engine = e.one_sided();
            let done = engine.rma_done(peer, last)?;
            if done {
                found.set(engine.rma_result(peer, ticket));
            }
            Ok(done)
        })
        .map_err(|c| in_communicator(c, target, peer))?;
        Ok(found.get())
    }

    /// `target[offset..] = incoming ∘ target[offset..]`, element by element with device
    /// atomics or under `target`'s accumulate lock, as `op` says (see the module's
    /// documentation); `old`, where given, gets the elements as they were. Only on a window
    /// whose `atomics` hold.
    pub fn accumulate(
        &self,
        target: u32,
        offset: u64,
        op: AccumulateOperation,
        datatype: Datatype,
        incoming: &[u8],
        mut old: Option<&mut [u8]>,
    ) -> Result<(), Cause> {
        if !per_element(op, datatype) {
            return self.locked(target, offset, op, datatype, incoming, old);
        }
        if op == AccumulateOperation::NoOp {
            // One RDMA READ, which writes nothing: a fetch-and-add of 0 per element would
            // write each back, undoing a locked accumulate's RDMA WRITE that landed in
            // between (see `lock_and_read`).
            return match old {
                Some(old) => self.read(target, offset, old),
                None => Ok(()),
            };
        }
        let integer = operation::element_code(datatype).is_some_and(operation::is_integer);
        // A replace's compare-and-swap loops' first guesses: the elements as one RDMA READ
        // finds them, so that each costs one round trip where no other rank meets it,
        // rather than two (a blind guess and the retry); a single element guesses 0
        // instead (a fresh counter's), as a read would cost the round trip the guess may
        // save.
        let swapped = op == AccumulateOperation::Replace;
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
            self.read(target, offset, &mut guesses)?;
        }
        for (i, value) in incoming.chunks_exact(8).enumerate() {
            let at = offset + 8 * i as u64;
            let value = u64::from_ne_bytes(value.try_into().expect("8 bytes"));
            let before = match op {
                _ if integer && is_sum(op) && old.is_none() => {
                    // Nothing fetched: posted, and complete by the epoch's end or a flush.
                    // SAFETY: an atomic has no local memory of the caller's.
                    unsafe { self.post(target, RmaOp::FetchAdd { add: value }, at) }?;
                    continue;
                }
                _ if integer && is_sum(op) => {
                    self.atomic(target, at, RmaOp::FetchAdd { add: value })?
                }
                _ => self.swap_loop(target, at, guesses.get(8 * i..8 * i + 8), value)?,
            };
            if let Some(old) = old.as_deref_mut() {
                old[8 * i..8 * i + 8].copy_from_slice(&before.to_ne_bytes());
            }
        }
        Ok(())
    }

    /// `target[offset..] = incoming ∘ target[offset..]` under `target`'s accumulate lock, in
    /// turns of at most [`LOCKED_TURN`] bytes (`locked_turn` each).
    fn locked(
        &self,
        target: u32,
        offset: u64,
        op: AccumulateOperation,
        datatype: Datatype,
        incoming: &[u8],
        mut old: Option<&mut [u8]>,
    ) -> Result<(), Cause> {
        for (turn, incoming) in incoming.chunks(LOCKED_TURN).enumerate() {
            let from = turn * LOCKED_TURN;
            let old = old
                .as_deref_mut()
                .map(|o| &mut o[from..from + incoming.len()]);
            self.locked_turn(target, offset + from as u64, op, datatype, incoming, old)?;
        }
        Ok(())
    }

    /// One turn of `locked`: lock and RDMA READ, compute here, RDMA WRITE, unlock. The unlock is posted after the
    /// write completed (at the target), so the next holder's read finds it; the epoch's end
    /// waits for the unlock. Where the write failed, the unlock still goes (it fails too
    /// where the queue pair to `target` broke, leaving the lock to `take_lock`'s patience).
    fn locked_turn(
        &self,
        target: u32,
        offset: u64,
        op: AccumulateOperation,
        datatype: Datatype,
        incoming: &[u8],
        old: Option<&mut [u8]>,
    ) -> Result<(), Cause> {
        let word = self.locks[target as usize].expect("a device-atomics window has lock words");
        let mut range = vec![0u8; incoming.len()];
        let held = self.lock_and_read(target, word, offset, &mut range)?;
        if let Some(old) = old {
            old.copy_from_slice(&range);
        }
        op.apply(datatype, incoming, &mut range);
        let write = RmaOp::Write {
            local: range.as_ptr(),
            len: range.len(),
        };
        // SAFETY: `range` is this function's, and the write is waited for here (or failed
        // to post, having posted nothing still in flight).
        let written =
            unsafe { self.post(target, write, offset) }.and_then(|t| self.wait(target, t));
        written.and(self.unlock(target, word, held))
    }

    /// Takes `target`'s accumulate lock word at `word` and reads `range` at `offset`: the
    /// first try posts the compare-and-swap and an RDMA READ together, as the target runs a
    /// queue pair's requests in order (a read after a take that succeeded sees the last
    /// holder's write, which completed before its unlock went), so a free lock costs one
    /// round trip on verbs (two on UCX, which posts the read only once the take completed,
    /// as `pml/src/ucx/one_sided.rs` says on order); after a take that failed, compare-and-swaps alone until one takes it,
    /// then the read again. The read is never fetch-and-adds of 0, which need no
    /// registration: after a take that failed the holder's RDMA WRITE of the range may be
    /// in flight, and a fetch-and-add writes its element back (the device reads and writes
    /// it under its atomics' own lock, which a WRITE does not take), undoing the holder's
    /// update. Returns the value that unlocks it; on an error nothing is held.
    fn lock_and_read(
        &self,
        target: u32,
        word: RemoteKey,
        offset: u64,
        range: &mut [u8],
    ) -> Result<u64, Cause> {
        let taken = self.locks_taken.get().wrapping_add(1);
        self.locks_taken.set(taken);
        let mine = (u64::from(self.me) + 1) << 32 | u64::from(taken);
        let take = RmaOp::CompareSwap {
            compare: 0,
            swap: mine,
        };
        let asked = Instant::now();
        // SAFETY: an atomic has no local memory of the caller's.
        let ticket = unsafe { self.post_at(target, take, word) }?;
        let read = RmaOp::Read {
            local: range.as_mut_ptr(),
            len: range.len(),
        };
        // SAFETY: `range` is the caller's until this function returns, and the read is
        // waited for (by `atomic_result`, which waits for it as the later) before it does.
        let read = unsafe { self.post(target, read, offset) };
        let found = self.atomic_result(target, ticket, *read.as_ref().unwrap_or(&ticket))?;
        let held = match (found, read) {
            (0, read) => read.map(drop),
            (_, Err(e)) => return Err(e),
            (held_by, Ok(_)) => {
                self.take_lock(target, word, mine, held_by, asked.elapsed())?;
                self.read(target, offset, range)
            }
        };
        match held {
            Ok(()) => Ok(mine),
            Err(e) => {
                // Taken, but the read failed: give it back.
                let _ = self.unlock(target, word, mine);
                Err(e)
            }
        }
    }

    /// Releases the lock word at `word`, taken with `held`: subtracting it leaves 0. Posted;
    /// the epoch's end (or the next operation's wait) waits for it.
    fn unlock(&self, target: u32, word: RemoteKey, held: u64) -> Result<(), Cause> {
        let unlock = RmaOp::FetchAdd {
            add: held.wrapping_neg(),
        };
        // SAFETY: an atomic has no local memory of the caller's.
        unsafe { self.post_at(target, unlock, word) }.map(drop)
    }

    /// Compare-and-swaps of 0 to `mine` on `target`'s lock word at `word` until one finds
    /// 0 (the last take found `found`, and took `round_trip`), pausing before each as
    /// `backoff` says, from the shortest take seen. A holder that keeps it for [`LOCK_PATIENCE`] (the same value seen
    /// throughout) is named in an error, rather than waited for without end: it failed
    /// holding it.
    fn take_lock(
        &self,
        target: u32,
        word: RemoteKey,
        mine: u64,
        found: u64,
        round_trip: Duration,
    ) -> Result<(), Cause> {
        let mut seen = (found, Instant::now());
        let (mut failures, mut round_trip) = (1, round_trip);
        loop {
            self.pause(backoff(round_trip, failures, self.jitter()))?;
            let take = RmaOp::CompareSwap {
                compare: 0,
                swap: mine,
            };
            let asked = Instant::now();
            let found = self.atomic_at(target, word, take)?;
            // The shortest take so far: one the scheduler preempted (ranks that share cores)
            // or the first, which waited for the range's READ too, would otherwise stretch
            // the next pause to 16 times that.
            round_trip = round_trip.min(asked.elapsed());
            if found == 0 {
                return Ok(());
            }
            failures += 1;
            if found != seen.0 {
                seen = (found, Instant::now());
            } else if seen.1.elapsed() > LOCK_PATIENCE {
                let holder = ((found >> 32) as u32).wrapping_sub(1);
                return Err(Cause::Window(WindowFault::Synchronisation(format!(
                    "rank {}'s accumulate lock has been held by {} for {} s without a \
                     release: did that rank fail holding it?",
                    self.named(target),
                    self.world.iter().position(|&w| w == holder).map_or_else(
                        || format!("world rank {holder}"),
                        |r| format!("rank {}", self.named(r as u32))
                    ),
                    LOCK_PATIENCE.as_secs()
                ))));
            }
        }
    }

    /// Waits for `pause`, making progress meanwhile: the holder's release may need this
    /// rank's progress to land (where UCX does atomics in software, the target's worker
    /// applies them, and a take on this rank's own word completes at once, without the wait
    /// that would progress it).
    fn pause(&self, pause: Duration) -> Result<(), Cause> {
        let until = Instant::now() + pause;
        loop {
            with_engine_or_lent(|e| e.progress())?;
            if Instant::now() >= until {
                return Ok(());
            }
            std::hint::spin_loop();
        }
    }

    /// The next of this rank's pseudo-random bytes for `backoff` (xorshift64*).
    fn jitter(&self) -> u8 {
        let mut x = self.draws.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.draws.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
    }

    /// Rank `target` of the window's communicator as errors name it: with its world rank,
    /// where the two differ, as the PML's own texts name world ranks.
    fn named(&self, target: u32) -> String {
        named(target, self.world[target as usize])
    }

    /// Replaces the element at `offset` by `value` with compare-and-swaps, the first
    /// comparing with `guess` (0 where none), until one finds what it compared with;
    /// returns that (the element as it was).
    fn swap_loop(
        &self,
        target: u32,
        offset: u64,
        guess: Option<&[u8]>,
        value: u64,
    ) -> Result<u64, Cause> {
        let mut guess = guess.map_or(0, |g| u64::from_ne_bytes(g.try_into().expect("8 bytes")));
        loop {
            let swap = RmaOp::CompareSwap {
                compare: guess,
                swap: value,
            };
            let found = self.atomic(target, offset, swap)?;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{backoff, in_communicator, named, rdma_agreed, RmaOffer::*, BACKOFF_DOUBLINGS};
    use crate::error::Cause;
    use pml::PmlError;

    #[test]
    fn lock_takes_back_off_boundedly() {
        let trip = Duration::from_micros(40);
        // Half a round trip after the first failure, doubling, at most 16 round trips.
        assert_eq!(backoff(trip, 1, 255), trip * 511 / 1024);
        assert_eq!(backoff(trip, 1, 0), trip / 4);
        let pauses: Vec<Duration> = (1..12).map(|n| backoff(trip, n, 255)).collect();
        assert!(pauses.windows(2).all(|p| p[0] <= p[1]), "{pauses:?}");
        assert!(pauses[1] > pauses[0] && pauses[4] > pauses[3], "{pauses:?}");
        let most = trip * 16 * 511 / 512;
        assert_eq!(backoff(trip, BACKOFF_DOUBLINGS + 1, 255), most);
        assert_eq!(backoff(trip, u32::MAX, 255), most, "the pause is bounded");
        // Jitter spreads ranks that failed together.
        assert!(backoff(trip, 3, 0) < backoff(trip, 3, 255));
    }

    #[test]
    fn device_failures_name_the_windows_rank() {
        let failed = || {
            Cause::Messaging(PmlError::one_sided(
                5,
                "posting an RDMA WRITE of 8 bytes to rank 5 failed: Invalid argument",
            ))
        };
        let text = in_communicator(failed(), 1, 5).to_string();
        assert_eq!(
            text,
            "posting an RDMA WRITE of 8 bytes to rank 5 failed: Invalid argument (world rank \
             5 is rank 1 of the window's communicator)"
        );
        // Where the ranks agree, the PML's text stands as it is.
        assert_eq!(in_communicator(failed(), 5, 5), failed());
        assert_eq!(named(2, 2), "2");
        assert_eq!(named(0, 3), "0 (world rank 3)");
    }

    #[test]
    fn emulated_rma_only_where_asked() {
        // verbs, efa, cxi, UCX: unasked.
        assert!(rdma_agreed([Default, Default], false));
        // OFI's tcp;ofi_rxm and shm: only with MPIRT_WINDOW_PATH=rdma, on every rank.
        assert!(!rdma_agreed([Asked, Asked], false));
        assert!(!rdma_agreed([Default, Asked], false));
        assert!(rdma_agreed([Default, Asked], true));
        // A rank without one-sided operations (udp;ofi_rxd, TCP) keeps every rank off.
        assert!(!rdma_agreed([Default, None], true));
        assert!(!rdma_agreed([], true));
    }
}
