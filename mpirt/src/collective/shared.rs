//! Blocking barriers, and short broadcasts, reductions, all-reductions, all-gathers,
//! all-to-alls, gathers, scatters and reduce-scatters, among ranks of one host, through a
//! memory area that every rank of the communicator maps: no messages, no matching, no plan,
//! one flag per rank and call (MPICH's release-gather, Open MPI's xhc and UCC's shared-memory
//! team work this way).
//!
//! Each rank owns `CELLS` cells of the area and uses them by turns: for call k (every
//! blocking collective of the communicator that meets here counts) it writes its data into
//! cell k % `CELLS`, then publishes k in the cell's flag. The calls where every rank gives and
//! takes (all-reduce, all-gather, all-to-all, reduce-scatter) write every rank's whole send
//! buffer, wait for each flag of call k and read what they need from every cell: an
//! all-reduce reduces the vectors in rank order, so all ranks get the same result, in rank
//! order for non-commutative operations; a reduce-scatter does the same over its own part
//! (a rank whose part is empty waits for no one, as a gather's ranks other than the root);
//! an all-gather copies every cell, an all-to-all its own block of every cell. A reduction or
//! a gather does the same on its root alone, the others leaving once they published; a
//! barrier waits for each flag and writes nothing (or, where more than two ranks share CPUs,
//! rank 0 alone waits for every flag and then publishes its own, which releases the others:
//! see [`released_by_rank_0`]); a broadcast's or a scatter's root writes its buffer, and the
//! others wait for the root's flag, copy (the whole buffer or their block), and publish
//! theirs.
//!
//! Before a rank writes its cell for call k it makes sure that every rank has published call
//! k - `CELLS` + 1 (usually known already: an all-reduce or a barrier saw every flag): a rank
//! publishes a call only once it has finished the one before, so every rank has finished call
//! k - `CELLS`, the last to read that cell. A broadcast's or a scatter's root, which waits for
//! no one, thus runs up to `CELLS` - 1 calls ahead of its slowest reader: the segments of a
//! long broadcast (below) are such calls, the root writing the next while the others copy
//! out the ones before. (A benchmark such as OSU's, which puts a barrier after each call,
//! never lets a root run ahead.) Immediate collectives, whose ranks may start the next call
//! while still reading, go by messages.
//!
//! A broadcast longer than the area's limit goes through it too on communicators of more
//! than two ranks ([`segmented_broadcast_max`]), as successive calls of one `SEGMENT` each: the
//! root's first call says the whole length, from which the others count the calls that
//! follow, and the root writes the next segments while the others still copy out the first
//! ones (MPICH's release-gather broadcast pipelines through its cells so). An all-to-all
//! ([`all_to_all_max`]) and a reduce-scatter ([`reduce_scatter_max`]) of such communicators
//! go in rounds the same way: round i carries bytes i * `SEGMENT` onwards of every rank's send
//! buffer, its first call every rank's whole length, and each rank waits only in the rounds
//! that carry its block (a reduce-scatter folds its part of every rank's, in rank order).
//!
//! A reduction's or a gather's vectors past `SEGMENT` (from three ranks on, [`rooted_max`]) go
//! in rounds the same way, which only the root waits for. The ranks of a reduction or a
//! gather whose vectors are too long for the area, or take more than one round, wait for the
//! root's verdict (published once it has seen every length): all too long, by messages
//! together; the lengths disagree, an error; else the rounds follow, so that every rank
//! takes as many calls as the root.
//!
//! A rank that has waited long enough (spinning where every rank has a CPU, yielding its CPU
//! between polls where they share CPUs, as Open MPI's ranks do when oversubscribed) sleeps on
//! its futex word in the area, having said so in its sleeping word; whoever publishes a flag
//! wakes the sleepers (a fence on each side: either the publisher sees the sleeper, or the
//! sleeper sees the flag), so a wait ends a wake-up after the flag it waits for, not after a
//! timeout. A rank whose progress its peers need (any progress hook: a window off the
//! shared-memory path, whose operations come as messages or as RMA that the transport applies
//! in the target's progress, as UCX over TCP and OFI's tcp;ofi_rxm and shm do; an immediate
//! collective in flight) sleeps in its PML instead, having said so in its sleeping word
//! (`IN_PML`), where whatever reaches one of its transports wakes it: on the futex word every
//! operation of an origin on it waited up to `SLEEP` for the target to look, and a contended
//! run of atomics over UCX took minutes. The publisher wakes such a sleeper through its own
//! PML (`AnyPml::wake_peer`), the same fences ordering the flag and the word: the native
//! engine by the sleeper's shared-memory wake, which its PML sleep watches, or, for ranks of
//! one area that shared memory does not join, a WAKE frame, whose arrival ends the sleep on
//! any transport; the UCX PML by an empty active message, which ends a sleep on the armed
//! worker. Without that wake the flag was seen up to `SLEEP` late there.
//!
//! The area is set up by the communicator's first blocking collective that may meet here,
//! whatever its length: rank 0 creates a file under /dev/shm (named after the job, so that
//! rsrun removes it if the job dies), writes a random token in it and broadcasts its name and
//! the token; every rank maps it and checks the token (a rank on another host may find a file
//! of that name that is not this one), and all agree whether every rank could, and on the
//! call's length; the name is removed once agreed. Calls go by messages from then on if not
//! every rank mapped it.
//!
//! Every later such call meets in the area, even one too long for it: such a rank publishes
//! its length with no data, so that ranks whose lengths disagree across the area's limit all
//! get the same error instead of waiting for each other in two places; when the vectors (the
//! root's buffer, for a broadcast or a scatter) are too long they go on by messages together.
//! The all-gather and all-to-all of parts of any length (`_varcount`) meet here too: every
//! rank sees every length, so all take the area only when every rank's buffer fits (an
//! all-to-all's parts, packed, with their table, which the receivers need, knowing their own
//! parts only). The rooted `_varcount` forms meet here too, where a rank knows only its own
//! length: each part that fits goes through the area and each that does not goes by a message
//! between the root and its rank ([`OVERFLOW_TAG`]), once the other side has said it agrees
//! (a gather's root in its verdict, a scatter's receiver in its flag), so that no message waits
//! for a receive that an error left unposted.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pml::shared_mapping::SharedMapping;
use pml::stall::{Awaited, Blocked};
use pml::transport::shm::futex;
use pml::{Handle, Pml, SourceSel, Tag, TagSel, TransportChoice, Waiting};

use crate::backend::hooks;
use crate::communicator::CommData;
use crate::datatype::{BufferMut, Datatype};
use crate::environment::{self, with_engine};
use crate::error::{Cause, Error};
use crate::point_to_point::{post_runtime_send, wait_handle};

use super::calls::{Part, Refused};
use super::hierarchy::{Hierarchy, Hosts};
use super::op::{Operation, SystemOperation};
use super::{blocking, calls, select};

/// Longest buffer, in bytes, a rank writes into its cell in one call (a broadcast's or a
/// scatter's root its whole buffer, an all-to-all's or a reduce-scatter's ranks theirs, a
/// block per rank); longer broadcasts, all-to-alls and reduce-scatters may go in segments,
/// and a gather's or a reduction's vectors in rounds from 3 ranks on ([`rooted_max`]).
pub(crate) const SHARED_MAX: usize = 4096;
/// The bytes a cell holds: `SHARED_MAX` for a call that fits the area, or one segment of a
/// long broadcast or one round of an all-to-all or a reduce-scatter (MPICH's release-gather
/// broadcast pipelines through cells of 8 KiB; larger ones here take an 8-rank all-to-all of
/// 2 KiB blocks in one round).
pub(crate) const SEGMENT: usize = 16384;
/// Cells each rank owns, used in turn: how far a root may run ahead of its readers, and
/// how many segments of a long broadcast are in flight.
const CELLS: u64 = 8;
// A segment holds whatever fits the area in one call.
const _: () = assert!(SEGMENT >= SHARED_MAX);
/// A cell's flag and length, on a cache line of their own ahead of the vector; the area's
/// token takes one such line ahead of the cells, and so do the ranks' sleeping words and
/// their futex words (one line each: written only by a rank going to sleep or waking one).
const HEADER: usize = 64;
/// What a rank's sleeping word says: awake, asleep on its futex word, asleep in its PML.
const AWAKE: u32 = 0;
const ON_FUTEX: u32 = 1;
const IN_PML: u32 = 2;
/// Where the sleeping words and the futex words start, and the first cell.
const SLEEPING_AT: usize = HEADER;
const FUTEX_AT: usize = 2 * HEADER;
const CELLS_AT: usize = 3 * HEADER;
/// Most ranks a communicator may have to use the area: every rank reads every rank's vector,
/// so a call's work grows with the ranks, where recursive doubling's grows with their
/// logarithm; 16 is a bound chosen to keep that read within a few cache lines per rank for
/// the short vectors that come here, not a measured crossover.
const MAX_RANKS: u32 = 16;
// Every rank's sleeping word, and every rank's futex word, fit one line.
const _: () = assert!(MAX_RANKS as usize * 4 <= HEADER);
// A scatter's table of parts (16 bytes a rank), and a gather's root's lengths after the
// culprit (8 bytes a rank, and 8), fit a cell.
const _: () = assert!(MAX_RANKS as usize * 16 <= SHARED_MAX);
const CELL: usize = HEADER + SEGMENT;
/// Room for the area's name in the broadcast that shares it.
const NAME_BYTES: usize = 64;
const TOKEN_BYTES: usize = 8;

/// The runtime tag (one of those collectives leave free) of the parts of a rooted call of parts
/// of any length that do not fit the area and go by messages, between the root and their
/// rank, on the communicator's context: at most one message between a pair in each call, which
/// both ends finish within the call, so the order of a pair's messages keeps calls apart.
const OVERFLOW_TAG: Tag = -4;
/// Where a scatter's table says a part is not in the cell: it comes by a message.
const BY_MESSAGE: u64 = u64::MAX;

/// Polls of a flag between two rounds of message progress, which a rank waiting here still
/// owes its peers (their sends to it, its immediate collectives).
const PROGRESS_EVERY: u32 = 64;
/// How long a waiting rank spins when every rank has a core of its own: a rank that waits
/// here is usually waiting for a peer that was preempted, and sleeping would cost it a
/// wake-up (a spin of 10 ms rather than 1 s left 8-byte latencies on a busy host spread
/// further).
/// Only a wait for a peer that is computing lasts longer: then it sleeps until woken. Ranks
/// that share cores never spin, so that the peer they wait for runs: they yield their CPU
/// between polls (`Area::yield_for`), then sleep.
const SPIN_FOR: Duration = Duration::from_secs(1);
/// The longest one sleep lasts: on the area's futex word, the publisher of the flag wakes the
/// sleeper, but messages for it (which a peer may need moved before it reaches the call) do
/// not; in the PML (a rank whose progress serves its peers), both do where the publisher
/// reaches the sleeper by shared memory.
const SLEEP: Duration = Duration::from_millis(1);
/// How long a sleeper that ran to its timeout with the flag published waits for its
/// publisher's wake before it counts a lost wake-up (`wake_follows`): far longer than a
/// publisher's preemption between storing the flag and waking, on a host where other processes
/// take turns on the CPU; spent only where the two raced.
const WAKE_GRACE: Duration = Duration::from_millis(200);
/// Polls between two readings of the clock.
const POLLS_PER_CLOCK: u32 = 256;

/// A cell's header, shared with the other ranks' processes.
#[repr(C)]
struct Flag {
    /// The call whose vector the cell holds (0 before the first).
    call: AtomicU64,
    len: AtomicU64,
    /// A reduction's or a gather's root's verdict on call k: `k * VERDICTS` plus one of the
    /// verdicts.
    verdict: AtomicU64,
}

/// The verdicts a reduction's or a gather's root publishes for the ranks whose vectors did
/// not fit.
const VERDICTS: u64 = 4;
const IN_AREA: u64 = 1;
const BY_MESSAGES: u64 = 2;
const DISAGREED: u64 = 3;
/// The length a rank publishes for a call whose arguments its own checks refused: it takes
/// the call's number all the same, so that every rank's count of calls stays in step, and
/// every rank that reads its cell for the call fails naming it.
const REFUSED: u64 = u64::MAX;

/// One round of [`Area::in_rounds`] as a rank that wants some of its bytes sees it.
pub(super) struct Carried {
    /// The cells of the round's call, which every rank has published.
    pub(super) phase: usize,
    /// The bytes of every rank's `send` this rank uses in this round.
    wanted: std::ops::Range<usize>,
    /// Where they start in this rank's range, and in the round's bytes.
    into: usize,
    from: usize,
    /// How many bytes of each rank's `send` the round carries.
    carried: usize,
}

impl Carried {
    /// The `wanted` bytes of `rank`'s `send` (this rank's own `send`).
    fn of<'a>(&self, area: &'a Area, rank: u32, send: &'a [u8]) -> &'a [u8] {
        if rank == area.rank {
            return &send[self.wanted.clone()];
        }
        // SAFETY: `rank` published this round's bytes of its `send` (of this rank's length,
        // checked in the first round), `carried` of them, for this call (the acquire load in
        // `wait_for` ordered them before this read), and does not write the cell again
        // before this rank has published a later call.
        let cell =
            unsafe { std::slice::from_raw_parts(area.cell(rank, self.phase).1, self.carried) };
        &cell[self.from..self.from + self.wanted.len()]
    }
}

/// This rank's view of a communicator's area.
pub(crate) struct Area {
    map: SharedMapping,
    rank: u32,
    size: u32,
    /// Each rank's world rank: how the PML names it, to wake it asleep there.
    world: Box<[u32]>,
    /// Calls run through the area so far.
    calls: Cell<u64>,
    /// The last call every rank is known to have published (see [`Area::guard_write`]).
    reached: Cell<u64>,
    /// How long a waiting rank spins before it sleeps (`SPIN_FOR`, or less: see
    /// [`Area::spin_as_messages`]): where the PML's waits spin, and never where the area's
    /// ranks share CPUs (so that the one it waits for runs).
    spin: Cell<Duration>,
    /// How long a waiting rank that does not spin yields its CPU between polls before it
    /// sleeps: `pml::config::YIELD_FOR` where the area's ranks, or the host's, outnumber the
    /// CPUs (their turns on them then cost a context switch, not a wake-up), else none.
    yield_for: Duration,
    /// Whether rank 0 releases the barrier, after every rank's arrival, rather than every
    /// rank waiting for every other rank's flag: where more than two ranks share CPUs (see
    /// [`released_by_rank_0`]).
    released: bool,
    /// How this rank's sleeps in the area ended, which `rsrun --verbose` reports when the
    /// area goes.
    sleeps: Cell<Sleeps>,
}

/// How waits in an area ended their turns: yields of the CPU (where ranks share CPUs), sleeps,
/// how many sleeps a publisher ended, and how many ran to their timeout with the flag they
/// waited for already published (wake-ups lost, which the protocol rules out); and the sleeps
/// in the PML of a rank whose progress serves its peers, and how many of them the flag ended
/// before their timeout.
#[derive(Clone, Copy, Default)]
struct Sleeps {
    yielded: u64,
    slept: u64,
    woken: u64,
    missed: u64,
    in_pml: u64,
    in_pml_woken: u64,
}

/// Whether a communicator has an area, as its first fitting call found out.
#[derive(Default)]
pub(crate) enum AreaState {
    #[default]
    Untried,
    Unavailable,
    Ready(Rc<Area>),
    /// Ranks on several hosts, more than one on some: the parts of the hierarchical path.
    Hierarchical(Rc<Hierarchy>),
}

/// Where a blocking collective of a communicator meets.
enum Meeting {
    Area(Rc<Area>),
    Hierarchy(Rc<Hierarchy>),
    Messages,
}

impl AreaSlot {
    /// Whether no call in flight shares the area, if there is one.
    pub(crate) fn is_unshared(&self) -> bool {
        match &*self.0.borrow() {
            AreaState::Ready(area) => Rc::strong_count(area) == 1 && Rc::weak_count(area) == 0,
            AreaState::Hierarchical(parts) => {
                Rc::strong_count(parts) == 1 && Rc::weak_count(parts) == 0
            }
            AreaState::Untried | AreaState::Unavailable => true,
        }
    }
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
            AreaState::Hierarchical(_) => "hierarchical",
        };
        f.write_str(state)
    }
}

/// The area's length on a communicator of `size` ranks: 192 bytes, then `CELLS` cells of
/// `CELL` (16448) bytes a rank, 1 MiB on 8 ranks, 2 MiB on 16. Its pages are allocated when
/// rank 0 creates it (`SharedMapping::create`): a `/dev/shm` too full for it leaves the
/// communicator without an area (its collectives go by messages), never a rank that dies
/// of SIGBUS on a page tmpfs cannot give.
fn area_bytes(size: u32) -> usize {
    CELLS_AT + CELLS as usize * CELL * size as usize
}

/// The longest broadcast, in bytes, that goes through the area (in segments past
/// `SHARED_MAX`) on a communicator of `size` ranks; the same on every rank, which follows
/// its root's length. Two ranks keep the messages past `SHARED_MAX`: one copy by CMA between
/// the two, where the area copies twice (mpirt took 0.02 to 0.36 of Open MPI's time there).
/// Measured on 4 and 8 ranks only (REPORT.md, issue 23's notes): 8 to 64 KiB there ran 5 to
/// 50 times faster than by messages, 128 to 512 KiB on 8 ranks about as fast, and 1 MiB's
/// comparison rests on one disturbed run; 3, 5 to 7 and 9 to 16 ranks are unmeasured (their
/// bounds follow their neighbours').
fn segmented_broadcast_max(size: u32) -> usize {
    match size {
        0..=2 => SHARED_MAX,
        3..=7 => 64 << 10,
        _ => 1 << 20,
    }
}

/// The longest send buffer, in bytes, of an all-to-all that goes through the area (in rounds
/// past `SEGMENT`) on a communicator of `size` ranks: from three ranks on up to
/// [`ALL_TO_ALL_MOST`] (on 8 ranks sharing 2 cores, the messages took 1.4 to 6.6 times Open
/// MPI's time at 1-16 KiB blocks; on 3, 1.46 times at 2 KiB blocks); two ranks keep the
/// messages past `SHARED_MAX`: one exchange, copied once by CMA.
fn all_to_all_max(size: u32) -> usize {
    match size {
        0..=2 => SHARED_MAX,
        _ => ALL_TO_ALL_MOST,
    }
}

/// The longest send buffer of an all-to-all through the area from three ranks on: four rounds
/// (blocks up to 21845 bytes on 3 ranks, 16 KiB on 4, 8 KiB on 8, 4 KiB on 16). Every rank
/// writes its whole send buffer and waits in the rounds that carry its block, where pairwise
/// messages copy each block once: on 16 Intel cores, a rank each (Open MPI 4.1.4 beside it,
/// notes/s30/device1), 256 KiB in 16 rounds took 2.74 times Open MPI's time, 128 KiB in 8
/// rounds 1.13 (1.44 on 8 ranks), 64 KiB 0.65 (0.80 on 8 ranks, 0.93 on 4).
const ALL_TO_ALL_MOST: usize = 64 << 10;

/// The longest send buffer, in bytes, of a reduce-scatter that goes through the area (in
/// rounds past `SEGMENT`) on a communicator of `size` ranks. Each rank writes its send buffer
/// and reads its own part of every rank's: about twice the bytes a ring moves a rank, with
/// one wait for all instead of n - 1 messages one after the other (the ring took 1.3 to 3
/// times Open MPI's time at 8-64 KiB on 8 and 16 Intel cores, a rank each, notes/s30/device1).
/// Two ranks keep the messages past `SHARED_MAX`: one exchange of half the buffer, copied once
/// by CMA, where the area copies the whole buffer in and half of it out.
fn reduce_scatter_max(size: u32) -> usize {
    match size {
        0..=2 => SHARED_MAX,
        _ => 256 << 10,
    }
}

/// Whether rank 0 releases the barrier of a communicator of `size` ranks, some of whose ranks
/// share CPUs where `shares` (the same on every rank: [`Agreed::any_shares`]): then rank 0 leaves every barrier first, so that a rooted call after
/// it (a broadcast or a scatter from rank 0, as OSU's benchmarks run them between barriers)
/// finds its root already writing, where with every rank waiting for every flag a rank could
/// leave while rank 0 waited for its turn on a CPU, and then wait that turn out in the next
/// call (4 ranks on 2 CPUs: 3-4x Open MPI's time for broadcasts of 1-256 B, whose tuned
/// barrier on 4 to 7 ranks is released by rank 0 as well). The barrier itself pays a step:
/// the last rank to arrive waits for rank 0 to see it (REPORT.md, issue 23's notes). Two
/// ranks keep the single step; so do ranks with a CPU each, which spin and leave together.
fn released_by_rank_0(size: u32, shares: bool) -> bool {
    size > 2 && shares
}

/// The longest vector, in bytes, a gather's or a reduction's rank sends through the area on a
/// communicator of `size` ranks: from 3 ranks on, up to [`ROOTED_MOST`], in rounds past a
/// cell's `SEGMENT` ([`Area::to_root`]), where the ranks other than the root leave once their
/// vector is in their cells, instead of waiting for the root's verdict and then sending by
/// messages (4 and 8 ranks on 2 CPUs, gathers of 8 and 16 KiB: 0.68-5.95x Open MPI's time by
/// messages, 0.07-0.13x through the area; REPORT.md). Two ranks keep their messages from
/// 4 KiB, which a tree's leaf sends from its own buffer (one copy, where the area's cell
/// costs two).
fn rooted_max(size: u32) -> usize {
    match size {
        0..=2 => SHARED_MAX,
        _ => ROOTED_MOST,
    }
}

/// The longest vector of a gather or a reduction through the area from three ranks on: four
/// rounds, half of a rank's cells, so that the others may still run a call ahead of the root.
/// Past it a reduction's messages go by reduce-scatter and gather (`select::REDUCE_LONG`), and
/// a gather's root copies each rank's vector once, by CMA, where the area copies it twice.
const ROOTED_MOST: usize = 64 << 10;

/// What a rank other than a root makes of the length `published` by `root` in its cell,
/// where this rank expects `len` bytes: a refusal or another length is an error, a length
/// past `most` sends every rank by messages (`false`), else the bytes are in the cell.
fn root_says(root: u32, published: u64, len: usize, most: usize) -> Result<bool, Cause> {
    if published == REFUSED {
        Err(Cause::PeerRefused { peer: root as i32 })
    } else if published as usize > most {
        Ok(false)
    } else if published as usize != len {
        Err(Cause::LengthDisagrees {
            peer: root as i32,
            expected: len,
            got: published as usize,
        })
    } else {
        Ok(true)
    }
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

/// A new area file, mapped and stamped with `token`; no file is left if that fails. A name
/// with no room in the broadcast that shares it makes none: the other ranks could not map it,
/// and nobody would remove it.
fn create(name: &str, len: usize, token: u64) -> Option<SharedMapping> {
    if name.len() >= NAME_BYTES || crate::fault::area_map_fails() {
        return None;
    }
    let map = SharedMapping::create(name, len).ok()?;
    token_of(&map).store(token, Ordering::Release);
    Some(map)
}

/// The area rank 0 made, if this file is it: of its length and with its token.
fn open(name: &str, len: usize, token: u64) -> Option<SharedMapping> {
    if crate::fault::area_map_fails() {
        return None;
    }
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
        if mapping.is_some() {
            shared_id[..name.len()].copy_from_slice(name.as_bytes());
            shared_id[NAME_BYTES..].copy_from_slice(&token.to_le_bytes());
            made = Some(name);
        }
    }
    // The area's ranks are all on this host: they must not spin where they outnumber its
    // CPUs, whatever the PML's own choice (UCX's spins then too), and they yield then.
    let shares = pml::config::shares_cores(comm.size as usize);
    let agreed = agree(
        comm,
        operation,
        &mut shared_id,
        &mut mapping,
        (len, bytes),
        shares,
    );
    if let Some(name) = made {
        // Every rank has mapped it or given up (or the set-up failed): the name is no
        // longer needed.
        let _ = SharedMapping::remove(&name);
    }
    let Agreed {
        everyone_mapped,
        any_shares,
        disagreement,
    } = agreed?;
    let (pml_spins, pml_yields) = with_engine(|e| Ok((e.waits_spin(), e.yield_budget())))
        .map_err(|c| Error::new(operation, c))?;
    let spins = pml_spins && !shares;
    let yield_for = match (spins, shares) {
        (true, _) => Duration::ZERO,
        (false, true) => pml::config::YIELD_FOR,
        (false, false) => pml_yields,
    };
    let area = everyone_mapped.then(|| Area {
        map: mapping.expect("every rank mapped the area"),
        rank: comm.rank,
        size: comm.size,
        world: (0..comm.size).map(|r| comm.world_rank(r)).collect(),
        calls: Cell::new(0),
        reached: Cell::new(0),
        spin: Cell::new(if spins { SPIN_FOR } else { Duration::ZERO }),
        yield_for,
        released: released_by_rank_0(comm.size, any_shares),
        sleeps: Cell::new(Sleeps::default()),
    });
    Ok((area, disagreement))
}

/// What the ranks found together while setting up an area ([`agree`]).
struct Agreed {
    /// Whether every rank mapped the area.
    everyone_mapped: bool,
    /// Whether any rank shares CPUs (`pml::config::shares_cores`, which each rank answers
    /// from its own CPUs and environment): the barrier's kind follows it on every rank, since
    /// a rank that waited for rank 0's release while rank 0 did not wait for every rank
    /// could leave before every rank arrived.
    any_shares: bool,
    /// The ranks' disagreement on the call's length, if they disagree.
    disagreement: Option<Cause>,
}

/// The collective part of [`set_up`]: shares rank 0's area (of `len` bytes), maps it on the
/// other ranks, and finds out whether every rank did, whether any `shares` CPUs, and whether
/// the ranks' call lengths (`bytes` on this rank) agree.
fn agree(
    comm: &CommData,
    operation: &'static str,
    shared_id: &mut [u8; NAME_BYTES + TOKEN_BYTES],
    mapping: &mut Option<SharedMapping>,
    (len, bytes): (usize, usize),
    shares: bool,
) -> Result<Agreed, Error> {
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
    // One minimum finds all four: whether any rank failed to map (-1: a minimum of 0 had
    // taken one rank that mapped it for all), whether any shares CPUs (-1 likewise), and the
    // shortest and longest lengths with a rank holding each (length * size + rank orders by
    // length).
    let key = bytes as i64 * i64::from(comm.size) + i64::from(comm.rank);
    let mine = [-i64::from(mapping.is_none()), -i64::from(shares), key, -key];
    let mut everyone = [0i64; 4];
    blocking(comm, operation, || {
        calls::all_reduce(comm, &mine[..], &mut everyone[..], SystemOperation::min())
    })?;
    let size = i64::from(comm.size);
    let (shortest, longest) = (everyone[2], -everyone[3]);
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
    Ok(Agreed {
        everyone_mapped: everyone[0] == 0,
        any_shares: everyone[1] < 0,
        disagreement,
    })
}

impl Area {
    /// The flag and the vector bytes of `rank`'s cell for the calls of `phase`.
    fn cell(&self, rank: u32, phase: usize) -> (&Flag, *mut u8) {
        let offset = CELLS_AT + (rank as usize * CELLS as usize + phase) * CELL;
        debug_assert!(offset + CELL <= self.map.len());
        // SAFETY: the cell lies inside the mapping (asserted), which is page aligned, so the
        // header is aligned for its atomics; other processes touch it only atomically.
        unsafe {
            let base = self.map.base().as_ptr().add(offset);
            (&*base.cast::<Flag>(), base.add(HEADER))
        }
    }

    /// `rank`'s word among the words that start at `at` (its sleeping or futex word).
    fn word(&self, at: usize, rank: u32) -> &AtomicU32 {
        debug_assert!(rank < MAX_RANKS);
        // SAFETY: `MAX_RANKS` words of 4 bytes fill the line at `at`, inside the mapping and
        // 4-aligned (the mapping is page aligned); other processes touch them only atomically.
        unsafe {
            &*self
                .map
                .base()
                .as_ptr()
                .add(at + 4 * rank as usize)
                .cast::<AtomicU32>()
        }
    }

    /// Makes a waiting rank that spins spin no longer than the PML's own waits before it
    /// sleeps: for a host's area in the hierarchical path, whose waits include the leaders'
    /// exchange by messages (a spin of `SPIN_FOR` there kept the CPUs of test hosts that
    /// share one machine busy for a second at each call: a 4-host run of the collectives
    /// suite took 21 s instead of 1.2). The configured spin, not the budget of this moment:
    /// this lasts the communicator's life, and bytes in flight now stretch only the waits
    /// they are moving in.
    pub(super) fn spin_as_messages(&self) -> Result<(), Cause> {
        if !self.spin.get().is_zero() {
            self.spin.set(with_engine(|e| Ok(e.configured_spin()))?);
        }
        Ok(())
    }

    /// Numbers the next call; returns it and the cells it uses (its phase).
    fn next_call(&self) -> (u64, usize) {
        let call = self.calls.get() + 1;
        self.calls.set(call);
        (call, (call % CELLS) as usize)
    }

    /// Waits until this rank may write its cell for `call`: every rank has published
    /// `call - CELLS + 1`, so has finished `call - CELLS`, the last call that read the cell.
    fn guard_write(&self, call: u64) -> Result<(), Cause> {
        let before = call.saturating_sub(CELLS - 1);
        if self.reached.get() < before {
            let phase = (before % CELLS) as usize;
            for r in (0..self.size).filter(|&r| r != self.rank) {
                self.wait_for(&self.cell(r, phase).0.call, before)?;
            }
            self.reached.set(before);
        }
        Ok(())
    }

    /// Publishes `value` in `word` (one of this rank's), and wakes the ranks asleep in the
    /// area.
    fn publish(&self, word: &AtomicU64, value: u64) {
        word.store(value, Ordering::Release);
        // Pairs with the fence in `sleep`: either the sleeper sees the flag, or this sees it
        // asleep and wakes it.
        fence(Ordering::SeqCst);
        for r in (0..self.size).filter(|&r| r != self.rank) {
            match self.word(SLEEPING_AT, r).load(Ordering::Relaxed) {
                AWAKE => {}
                IN_PML => self.wake_in_pml(r),
                _ => {
                    let futex = self.word(FUTEX_AT, r);
                    futex.fetch_add(1, Ordering::Release);
                    futex::wake(futex);
                }
            }
        }
    }

    /// Wakes rank `r`, asleep in its PML, through this rank's PML (`AnyPml::wake_peer`). A
    /// failure to reach it (this PML stopped, or taken by a call this one is inside) only
    /// leaves that sleep to its timeout, `SLEEP`; a connection that broke on the way is the
    /// PML's next call's to report.
    #[cold]
    #[inline(never)]
    fn wake_in_pml(&self, r: u32) {
        let peer = self.world[r as usize];
        let _ = with_engine(|e| e.wake_peer(peer));
    }

    /// Waits until every other rank's flag for `call` says it.
    fn wait_for_all(&self, call: u64, phase: usize) -> Result<(), Cause> {
        for r in (0..self.size).filter(|&r| r != self.rank) {
            self.wait_for(&self.cell(r, phase).0.call, call)?;
        }
        self.reached.set(call);
        Ok(())
    }

    /// Meets every rank of the communicator: each rank publishes the call and waits for
    /// every other rank's flag, or, where rank 0 releases the barrier ([`Area::released`]),
    /// rank 0 waits for every flag before it publishes its own, which the others wait for.
    fn barrier(&self) -> Result<(), Cause> {
        let (call, phase) = self.next_call();
        let own = &self.cell(self.rank, phase).0.call;
        if !self.released {
            self.publish(own, call);
            return self.wait_for_all(call, phase);
        }
        if self.rank == 0 {
            self.wait_for_all(call, phase)?;
            self.publish(own, call);
            return Ok(());
        }
        self.publish(own, call);
        self.wait_for(&self.cell(0, phase).0.call, call)?;
        // Rank 0 published the call only once every rank had.
        self.reached.set(call);
        Ok(())
    }

    /// `root`'s `buf` in every rank's `buf`; `false`, with nothing copied, when the root's
    /// buffer is too long for the area (then every rank goes on by messages). Up to
    /// `SHARED_MAX` in one call; longer, up to [`segmented_broadcast_max`], in segments.
    pub(super) fn broadcast(&self, root: u32, buf: &mut [u8]) -> Result<bool, Cause> {
        let most = segmented_broadcast_max(self.size);
        if self.rank != root {
            return self.receive_segments(root, buf, most);
        }
        if buf.len() <= SHARED_MAX || buf.len() > most {
            // In one call, or only the length: too long, every rank goes by messages.
            return self.spread_from(root, Some(buf), None, SHARED_MAX, |_| {});
        }
        // The first segment's length says the whole buffer's.
        let mut said = buf.len() as u64;
        for segment in buf.chunks(SEGMENT) {
            let (call, phase) = self.next_call();
            self.fill(call, phase, said, segment.len(), |cell| {
                cell.copy_from_slice(segment)
            })?;
            said = segment.len() as u64;
        }
        Ok(true)
    }

    /// A broadcast's rank other than the root: the root's first call says its length, which
    /// decides, whatever `buf`'s (longer than `most`: by messages, with no more calls; a
    /// refusal or another length than `buf`'s: an error, once this rank has taken its part in
    /// every call of the root's segments, to stay in step), then `buf` segment by segment,
    /// each cell's flag published once copied.
    fn receive_segments(&self, root: u32, buf: &mut [u8], most: usize) -> Result<bool, Cause> {
        let (call, phase) = self.next_call();
        let (root_flag, root_data) = self.cell(root, phase);
        self.wait_for(&root_flag.call, call)?;
        let published = root_flag.len.load(Ordering::Relaxed) as usize;
        let outcome = root_says(root, published as u64, buf.len(), most);
        // The first call's cell holds the whole vector up to a segment: a short broadcast's
        // only call costs what it did before segments (one wait, one copy, one flag).
        if let Ok(true) = outcome {
            let first = published.min(SEGMENT);
            // SAFETY: the root published this segment (at most SEGMENT bytes) for this call
            // (the acquire load in `wait_for` orders it before this read), and does not write
            // the cell again before this rank has published this call, below.
            buf[..first].copy_from_slice(unsafe { std::slice::from_raw_parts(root_data, first) });
        }
        self.publish(&self.cell(self.rank, phase).0.call, call);
        let segments = match outcome {
            Err(Cause::PeerRefused { .. }) | Ok(false) => 1,
            _ => published.div_ceil(SEGMENT).max(1),
        };
        for s in 1..segments {
            let (call, phase) = self.next_call();
            let (root_flag, root_data) = self.cell(root, phase);
            self.wait_for(&root_flag.call, call)?;
            if let Ok(true) = outcome {
                let into = &mut buf[s * SEGMENT..((s + 1) * SEGMENT).min(published)];
                // SAFETY: as for the first segment, for this call.
                into.copy_from_slice(unsafe { std::slice::from_raw_parts(root_data, into.len()) });
            }
            self.publish(&self.cell(self.rank, phase).0.call, call);
        }
        outcome
    }

    /// `root`'s `sent` (`Some` on the root only, at most `SEGMENT` bytes), of a length the
    /// other ranks learn from it, handed to `take` on each of them: the hierarchical path's
    /// releases, whose length says what they carry.
    pub(super) fn broadcast_any(
        &self,
        root: u32,
        sent: Option<&[u8]>,
        take: impl FnOnce(&[u8]),
    ) -> Result<(), Cause> {
        assert!(
            sent.is_none_or(|sent| sent.len() <= SEGMENT),
            "a release fits one cell"
        );
        match self.spread_from(root, sent, None, SEGMENT, take)? {
            true => Ok(()),
            // The root's release is at most `SEGMENT` (asserted there), so no rank reads a
            // longer one, which would send every rank by messages where there are none.
            false => unreachable!("a release longer than a cell"),
        }
    }

    /// Block `rank` of the root's `send` (`Some` on the root only) in each rank's `recv`;
    /// `false`, with nothing copied, when the root's buffer is too long for the area.
    fn scatter(&self, root: u32, send: Option<&[u8]>, recv: &mut [u8]) -> Result<bool, Cause> {
        let block = recv.len();
        let at = self.rank as usize * block;
        let size = self.size as usize;
        let fits = self
            .spread_from(root, send, Some(block * size), SHARED_MAX, |data| {
                recv.copy_from_slice(&data[at..at + block])
            })
            .map_err(|cause| match cause {
                // Name the block the root sends this rank, not its whole buffer (a multiple of
                // the ranks, checked on the root).
                Cause::LengthDisagrees {
                    peer,
                    expected,
                    got,
                } => Cause::LengthDisagrees {
                    peer,
                    expected: expected / size,
                    got: got / size,
                },
                other => other,
            })?;
        if let (true, Some(send)) = (fits, send) {
            recv.copy_from_slice(&send[at..at + block]);
        }
        Ok(fits)
    }

    /// A call whose root publishes `sent` (`Some` on the root only) and whose other ranks
    /// hand the root's bytes to `take` (`expected` bytes, where given, else as many as the
    /// root published), then publish their flag to say they read them; `false`, with nothing
    /// taken, when the root's bytes are longer than `most` (at most `SEGMENT`; then every rank
    /// goes on by messages). The root waits for no one: `guard_write` keeps it from
    /// overwriting a cell still being read.
    fn spread_from(
        &self,
        root: u32,
        sent: Option<&[u8]>,
        expected: Option<usize>,
        most: usize,
        take: impl FnOnce(&[u8]),
    ) -> Result<bool, Cause> {
        assert!(most <= SEGMENT, "a call's bytes fit one cell");
        let (call, phase) = self.next_call();
        if let Some(sent) = sent {
            return self.contribute_with(call, phase, sent.len(), most, |cell| {
                cell.copy_from_slice(sent)
            });
        }
        let flag = self.cell(self.rank, phase).0;
        let (root_flag, root_data) = self.cell(root, phase);
        self.wait_for(&root_flag.call, call)?;
        let published = root_flag.len.load(Ordering::Relaxed);
        let len = expected.unwrap_or(published as usize);
        let outcome = root_says(root, published, len, most);
        if let Ok(true) = outcome {
            // SAFETY: the root published these `len` bytes (at most `most`, at most
            // `SEGMENT`) for this call (the acquire load in `wait_for` orders them before
            // this read), and does not write the cell again before this rank has published
            // this call, below.
            take(unsafe { std::slice::from_raw_parts(root_data, len) });
        }
        self.publish(&flag.call, call);
        outcome
    }

    /// Writes this rank's `send` for `call` into its cell (unless it is too long for it: then
    /// the length alone) and publishes it; whether it fit.
    fn contribute(&self, call: u64, phase: usize, send: &[u8]) -> Result<bool, Cause> {
        self.contribute_with(call, phase, send.len(), SHARED_MAX, |cell| {
            cell.copy_from_slice(send)
        })
    }

    /// As [`Area::contribute`], for `len` bytes that `write` fills in the cell (given them
    /// only when they fit: at most `most`, itself at most `SEGMENT`).
    fn contribute_with(
        &self,
        call: u64,
        phase: usize,
        len: usize,
        most: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<bool, Cause> {
        let fits = len <= most;
        let bytes = if fits { len } else { 0 };
        self.fill(call, phase, len as u64, bytes, |cell| {
            if fits {
                write(cell)
            }
        })?;
        Ok(fits)
    }

    /// Has `write` fill `bytes` bytes (at most `SEGMENT`) of this rank's cell for `call`,
    /// says `said` in its length, and publishes it.
    fn fill(
        &self,
        call: u64,
        phase: usize,
        said: u64,
        bytes: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<(), Cause> {
        // Checked in release builds too: the slice below is built on it.
        assert!(bytes <= SEGMENT, "{bytes} bytes do not fit a cell");
        let (flag, data) = self.cell(self.rank, phase);
        self.guard_write(call)?;
        // SAFETY: this rank alone writes its cells, and no rank reads this one for this call
        // before its flag says so, nor still for call - CELLS (`guard_write`); the `bytes`
        // fit the cell (asserted).
        write(unsafe { std::slice::from_raw_parts_mut(data, bytes) });
        flag.len.store(said, Ordering::Relaxed);
        self.publish(&flag.call, call);
        Ok(())
    }

    /// The first rank whose published length for the call in cells `phase` (which every
    /// rank has published) is not `len`: one that refused its arguments first.
    fn disagreement(&self, phase: usize, len: usize) -> Option<Cause> {
        self.refusal(phase).or_else(|| {
            (0..self.size).filter(|&r| r != self.rank).find_map(|r| {
                let got = self.cell(r, phase).0.len.load(Ordering::Relaxed) as usize;
                (got != len).then_some(Cause::LengthDisagrees {
                    peer: r as i32,
                    expected: len,
                    got,
                })
            })
        })
    }

    /// The first rank that refused its arguments to the call in cells `phase`, which every
    /// rank has published.
    fn refusal(&self, phase: usize) -> Option<Cause> {
        (0..self.size)
            .filter(|&r| r != self.rank)
            .find(|&r| self.cell(r, phase).0.len.load(Ordering::Relaxed) == REFUSED)
            .map(|r| Cause::PeerRefused { peer: r as i32 })
    }

    /// Takes part in the next call only to say that this rank refused its arguments (see
    /// [`REFUSED`]); as a root, its verdict tells the ranks waiting for one to fail too.
    pub(super) fn refuse(&self) -> Result<(), Cause> {
        let (call, phase) = self.next_call();
        let flag = self.cell(self.rank, phase).0;
        self.guard_write(call)?;
        flag.len.store(REFUSED, Ordering::Relaxed);
        flag.verdict
            .store(call * VERDICTS + DISAGREED, Ordering::Release);
        self.publish(&flag.call, call);
        Ok(())
    }

    /// What `rank` published in its cell `phase` for this call, of `send`'s length (`send`
    /// itself for this rank): every rank has published, all of `send`'s length, which fit.
    fn published<'s>(&'s self, rank: u32, phase: usize, send: &'s [u8]) -> &'s [u8] {
        if rank == self.rank {
            send
        } else {
            self.published_any(rank, phase)
        }
    }

    /// `recv = v_0 ∘ v_1 ∘ … ∘ v_(n-1)` over every rank's published vector `v_r` (this
    /// rank's `send`), of `recv`'s length.
    fn fold(
        &self,
        phase: usize,
        send: &[u8],
        recv: &mut [u8],
        datatype: Datatype,
        op: &dyn Operation,
    ) {
        self.fold_from(recv, datatype, op, |r| self.published(r, phase, send));
    }

    /// `recv = b_0 ∘ b_1 ∘ … ∘ b_(n-1)`, where `b_r` is `incoming(r)`, `recv`'s length.
    fn fold_from<'a>(
        &self,
        recv: &mut [u8],
        datatype: Datatype,
        op: &dyn Operation,
        incoming: impl Fn(u32) -> &'a [u8],
    ) {
        // From the last rank down, each vector applied from the left keeps rank order.
        for r in (0..self.size).rev() {
            if r == self.size - 1 {
                recv.copy_from_slice(incoming(r));
            } else {
                op.apply(datatype, incoming(r), recv);
            }
        }
    }

    /// Publishes `send` and waits for every rank's vector; the phase of the cells they are
    /// in, or `None` when every rank's is too long for the area. Every flag is awaited even
    /// after a disagreement, so that every rank leaves the call having seen every length:
    /// then all of them report it, and none is still waiting.
    fn exchange(&self, send: &[u8]) -> Result<Option<usize>, Cause> {
        let (call, phase) = self.next_call();
        let fits = self.contribute(call, phase, send)?;
        self.wait_for_all(call, phase)?;
        if let Some(cause) = self.disagreement(phase, send.len()) {
            return Err(cause);
        }
        Ok(fits.then_some(phase))
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
        let Some(phase) = self.exchange(send)? else {
            return Ok(false);
        };
        self.fold(phase, send, recv, datatype, op);
        Ok(true)
    }

    /// Every rank's `send`, in rank order, in `recv`; `false`, with nothing copied, when
    /// they are too long for the area.
    fn all_gather(&self, send: &[u8], recv: &mut [u8]) -> Result<bool, Cause> {
        debug_assert!(recv.len() == send.len() * self.size as usize);
        let Some(phase) = self.exchange(send)? else {
            return Ok(false);
        };
        self.gather_into(phase, send, recv);
        Ok(true)
    }

    /// Every rank's published `send` (each rank's of `send`'s length), in rank order, in
    /// `recv`.
    pub(super) fn gather_into(&self, phase: usize, send: &[u8], recv: &mut [u8]) {
        for (r, part) in (0..self.size).zip(recv.chunks_exact_mut(send.len().max(1))) {
            part.copy_from_slice(self.published(r, phase, send));
        }
    }

    /// Publishes `send`, of any length on each rank, and waits for every rank's; the phase
    /// of the cells, or `None` when some rank's is too long for the area (every rank saw
    /// every length, so all go on by messages together).
    fn exchange_any(&self, send: &[u8]) -> Result<Option<usize>, Cause> {
        let (call, phase) = self.next_call();
        self.contribute(call, phase, send)?;
        self.wait_for_all(call, phase)?;
        if let Some(cause) = self.refusal(phase) {
            return Err(cause);
        }
        Ok(self.all_fit(phase).then_some(phase))
    }

    /// Whether every rank's vector in cells `phase`, which every rank has published, fit.
    fn all_fit(&self, phase: usize) -> bool {
        (0..self.size)
            .all(|r| self.cell(r, phase).0.len.load(Ordering::Relaxed) as usize <= SHARED_MAX)
    }

    /// What `rank` published in its cell `phase` for this call, of the length it published:
    /// every rank has published, and every vector fit.
    fn published_any(&self, rank: u32, phase: usize) -> &[u8] {
        let (flag, data) = self.cell(rank, phase);
        let len = flag.len.load(Ordering::Relaxed) as usize;
        // SAFETY: `rank` published these `len` bytes (at most the call's limit, itself at most
        // SEGMENT, the cell's room: the caller checked that every rank's vector fit, as
        // `all_fit`, or `exchange` and `to_root` with `disagreement`, do) for
        // this call (the acquire load in `wait_for` ordered them before
        // this read), and does not write the cell again before this rank has finished this
        // call (`guard_write`).
        unsafe { std::slice::from_raw_parts(data, len) }
    }

    /// Every rank's `send`, of any length, in its part of `recv` (offset, length);
    /// `false`, with nothing copied, when some rank's is too long for the area; a rank whose
    /// length is not its part's is an error.
    fn all_gather_varcount(
        &self,
        send: &[u8],
        recv: &mut [u8],
        parts: &[Part],
    ) -> Result<bool, Cause> {
        let Some(phase) = self.exchange_any(send)? else {
            return Ok(false);
        };
        for (r, &(at, len)) in (0..self.size).zip(parts) {
            let got = self.published_any(r, phase);
            if got.len() != len {
                return Err(Cause::LengthDisagrees {
                    peer: r as i32,
                    expected: len,
                    got: got.len(),
                });
            }
            recv[at..at + len].copy_from_slice(got);
        }
        Ok(true)
    }

    /// Each rank's part for this rank of its `send` (its parts `outgoing`) in this rank's
    /// part for it of `recv` (`incoming`); `false`, with nothing copied, when some rank's
    /// parts and its table of them are too long for the area; a part of another length than
    /// this rank's part for it is an error. A rank publishes its table of parts (offset among
    /// the parts and length, 4 bytes each, per rank) ahead of the parts, packed back to back
    /// (the send buffer's gaps, and what other ranks' parts skip, stay out of the cell): the
    /// others know only their own parts.
    fn all_to_all_varcount(
        &self,
        send: &[u8],
        recv: &mut [u8],
        outgoing: &[Part],
        incoming: &[Part],
    ) -> Result<bool, Cause> {
        let table = 8 * self.size as usize;
        let (call, phase) = self.next_call();
        let len = table + outgoing.iter().map(|&(_, part)| part).sum::<usize>();
        self.contribute_with(call, phase, len, SHARED_MAX, |cell| {
            let (entries, parts) = cell.split_at_mut(table);
            let mut packed = 0;
            for (entry, &(at, part)) in entries.chunks_exact_mut(8).zip(outgoing) {
                // Parts that fit a 4 KiB cell fit u32.
                entry[..4].copy_from_slice(&(packed as u32).to_ne_bytes());
                entry[4..].copy_from_slice(&(part as u32).to_ne_bytes());
                parts[packed..packed + part].copy_from_slice(&send[at..at + part]);
                packed += part;
            }
        })?;
        self.wait_for_all(call, phase)?;
        if let Some(cause) = self.refusal(phase) {
            return Err(cause);
        }
        if !self.all_fit(phase) {
            return Ok(false);
        }
        let me = 8 * self.rank as usize;
        for (r, &(into, expected)) in (0..self.size).zip(incoming) {
            let published = self.published_any(r, phase);
            let entry = |i: usize| {
                u32::from_ne_bytes(published[me + i..me + i + 4].try_into().expect("4 bytes"))
                    as usize
            };
            let (at, got) = (table + entry(0), entry(4));
            if got != expected {
                return Err(Cause::LengthDisagrees {
                    peer: r as i32,
                    expected,
                    got,
                });
            }
            if at + got > published.len() {
                // The sender checked its parts against its buffer: a table that says
                // otherwise is not one this protocol wrote.
                return Err(Cause::InvalidPartition(format!(
                    "rank {r}'s part for this rank (bytes {} to {}) runs past the {} bytes it \
                     published",
                    at - table,
                    at - table + got,
                    published.len() - table
                )));
            }
            recv[into..into + got].copy_from_slice(&published[at..at + got]);
        }
        Ok(true)
    }

    /// Block `rank` of every rank's `send` (a block per rank), as block r of `recv` for
    /// sender r; `false`, with nothing copied, when the vectors are too long for the area
    /// ([`all_to_all_max`]), in rounds ([`Area::in_rounds`]).
    fn all_to_all(&self, send: &[u8], recv: &mut [u8]) -> Result<bool, Cause> {
        debug_assert!(send.len() == recv.len());
        let block = send.len() / self.size as usize;
        let mine = self.rank as usize * block..(self.rank as usize + 1) * block;
        self.in_rounds(send, all_to_all_max(self.size), mine, |carried| {
            for r in 0..self.size {
                let part = &mut recv[r as usize * block + carried.into..][..carried.wanted.len()];
                part.copy_from_slice(carried.of(self, r, send));
            }
        })
    }

    /// This rank's part (at `at`, `recv`'s length) of the reduction of every rank's `send`
    /// in `recv`; `false`, with nothing reduced, when the vectors are too long for the area
    /// ([`reduce_scatter_max`]), in rounds ([`Area::in_rounds`]): each rank writes its whole
    /// `send` once and reads its own part of every rank's, one wait for every rank's flag in
    /// each round that carries its part, where a ring sends a message a step, n - 1 steps.
    /// A rank whose part is empty and whose vector fits one round leaves once it has published
    /// its vector, as a gather's ranks other than the root do: it waits for no one, and a
    /// disagreement is the other ranks' to report (4 and 8 ranks on 2 CPUs, OSU's 1-4 B, parts
    /// of 0 elements on most ranks: 1.4-1.8x Open MPI's time when every rank waited for all).
    fn reduce_scatter(
        &self,
        send: &[u8],
        at: usize,
        recv: &mut [u8],
        datatype: Datatype,
        op: &dyn Operation,
    ) -> Result<bool, Cause> {
        debug_assert!(at + recv.len() <= send.len());
        let (mine, most) = (at..at + recv.len(), reduce_scatter_max(self.size));
        if mine.is_empty() && send.len() <= SEGMENT.min(most) {
            // `in_rounds`'s only round, without its wait.
            let (call, phase) = self.next_call();
            self.fill(call, phase, send.len() as u64, send.len(), |cell| {
                cell.copy_from_slice(send)
            })?;
            return Ok(true);
        }
        let element = datatype.size();
        if element == 0 || SEGMENT.is_multiple_of(element) {
            // Rounds end between elements: each round's bytes fold on their own.
            return self.in_rounds(send, most, mine, |carried| {
                let into = &mut recv[carried.into..carried.into + carried.wanted.len()];
                self.fold_from(into, datatype, op, |r| carried.of(self, r, send));
            });
        }
        // Rounds end inside elements, which an operation takes whole: every rank's part is
        // copied out round by round, then folded at once. The rounds are the same whatever
        // the element, so ranks stay in step.
        let part = recv.len();
        let mut parts = vec![0u8; self.size as usize * part];
        let copied = self.in_rounds(send, most, mine, |carried| {
            for r in 0..self.size {
                let into = &mut parts[r as usize * part + carried.into..][..carried.wanted.len()];
                into.copy_from_slice(carried.of(self, r, send));
            }
        })?;
        if copied {
            let of = |r: u32| &parts[r as usize * part..(r as usize + 1) * part];
            self.fold_from(recv, datatype, op, of);
        }
        Ok(copied)
    }

    /// Publishes every rank's `send` (all of one length, up to `most`) in rounds, and has
    /// `take` use the bytes of range `mine` of every rank's in each round that carries some:
    /// `false`, with nothing taken, when the vectors are longer than `most`. Round i carries
    /// bytes i * `SEGMENT` onwards of every rank's `send`; the first, every rank's whole
    /// length (every rank waits for all of them, so that all see a disagreement, or all go
    /// by messages); after it, a rank waits for the others only in the rounds that carry part
    /// of `mine`. `most` must be the same on every rank (a function of the communicator's
    /// size): a rank that wrote no bytes where another expects them would be read as data.
    fn in_rounds(
        &self,
        send: &[u8],
        most: usize,
        mine: std::ops::Range<usize>,
        mut take: impl FnMut(&Carried),
    ) -> Result<bool, Cause> {
        let len = send.len();
        let fits = len <= most;
        let rounds = len.div_ceil(SEGMENT).max(1);
        for round in 0..rounds {
            let (call, phase) = self.next_call();
            let carried = round * SEGMENT..((round + 1) * SEGMENT).min(len);
            let bytes = if fits { carried.len() } else { 0 };
            self.fill(call, phase, len as u64, bytes, |cell| {
                cell.copy_from_slice(&send[carried.start..carried.start + bytes])
            })?;
            let wanted = carried.start.max(mine.start)..carried.end.min(mine.end);
            if round == 0 {
                self.wait_for_all(call, phase)?;
                if let Some(cause) = self.disagreement(phase, len) {
                    return Err(cause);
                }
                if !fits {
                    return Ok(false);
                }
            } else if !wanted.is_empty() {
                self.wait_for_all(call, phase)?;
            }
            if wanted.is_empty() {
                continue;
            }
            take(&Carried {
                phase,
                into: wanted.start - mine.start,
                from: wanted.start - carried.start,
                carried: carried.len(),
                wanted,
            });
        }
        Ok(true)
    }

    /// The reduction of every rank's `send` in the root's `recv` (`Some` on the root only);
    /// `false`, with nothing reduced, when every rank's vector is longer than `most` (the
    /// same on every rank; past `SEGMENT`, in rounds: [`Area::to_root`]).
    pub(super) fn reduce(
        &self,
        root: u32,
        send: &[u8],
        recv: Option<&mut [u8]>,
        datatype: Datatype,
        op: &dyn Operation,
        most: usize,
    ) -> Result<bool, Cause> {
        let element = datatype.size();
        if send.len() <= SEGMENT || element == 0 || SEGMENT.is_multiple_of(element) {
            // One round, or rounds that end between elements: each round's bytes fold on
            // their own.
            return self.to_root(root, send, recv, most, |carried, recv| {
                let into = &mut recv[carried.into..carried.into + carried.wanted.len()];
                self.fold_from(into, datatype, op, |r| carried.of(self, r, send));
            });
        }
        // Rounds end inside elements, which an operation takes whole: the root copies every
        // rank's vector out round by round, then folds them at once. The rounds are the same
        // whatever the element, so the ranks stay in step.
        let Some(recv) = recv else {
            return self.to_root(root, send, None, most, |_, _| {});
        };
        let len = send.len();
        let room = if len <= most {
            self.size as usize * len
        } else {
            0
        };
        let mut vectors = vec![0u8; room];
        let gathered = self.to_root(root, send, Some(&mut vectors[..]), most, |carried, all| {
            self.gather_round(carried, send, all)
        })?;
        if gathered {
            let of = |r: u32| &vectors[r as usize * len..(r as usize + 1) * len];
            self.fold_from(recv, datatype, op, of);
        }
        Ok(gathered)
    }

    /// Every rank's `send` in rank order in the root's `recv` (`Some` on the root only);
    /// `false`, with nothing copied, when every rank's vector is too long for the area.
    pub(super) fn gather(
        &self,
        root: u32,
        send: &[u8],
        recv: Option<&mut [u8]>,
    ) -> Result<bool, Cause> {
        self.to_root(root, send, recv, rooted_max(self.size), |carried, recv| {
            self.gather_round(carried, send, recv)
        })
    }

    /// The bytes a round of [`Area::to_root`] carries of every rank's `send`, each in its
    /// rank's block of `recv`.
    fn gather_round(&self, carried: &Carried, send: &[u8], recv: &mut [u8]) {
        let len = send.len();
        for r in 0..self.size {
            let at = r as usize * len + carried.into;
            recv[at..at + carried.wanted.len()].copy_from_slice(carried.of(self, r, send));
        }
    }

    /// A call whose ranks publish `send`, all of one length, for the root alone, which hands
    /// each round's bytes of every rank's (a [`Carried`] of the whole vector) and its `recv`
    /// to `finish` once every rank has published them; `false`, with nothing finished, when
    /// every rank's vector is longer than `most` (the same on every rank: then they go by
    /// messages). A vector past `SEGMENT` goes in rounds of `SEGMENT` bytes, a call each, the
    /// first saying the whole length.
    ///
    /// A rank other than the root whose vector fit one round leaves once it is published.
    /// One whose vector did not fit the area, or needs more rounds, waits for the root's
    /// verdict, which the root gives once it has seen every length: by messages together, an
    /// error (the lengths disagree), or, for the rounds, in the area; so that every rank
    /// takes as many calls as the root, whatever lengths the others said (one, after a
    /// disagreement). That wait meets the root once where messages would (a rendezvous
    /// per vector, and up a tree), and the rank leaves as soon as its rounds are written.
    pub(super) fn to_root(
        &self,
        root: u32,
        send: &[u8],
        recv: Option<&mut [u8]>,
        most: usize,
        mut finish: impl FnMut(&Carried, &mut [u8]),
    ) -> Result<bool, Cause> {
        let len = send.len();
        let fits = len <= most;
        let rounds = if fits {
            len.div_ceil(SEGMENT).max(1)
        } else {
            1
        };
        let is_root = recv.is_some();
        // The root's own vector goes straight from `send` (`Carried::of`): its cell carries
        // only its length.
        let first = if fits && !is_root {
            len.min(SEGMENT)
        } else {
            0
        };
        let (call, phase) = self.next_call();
        self.fill(call, phase, len as u64, first, |cell| {
            cell.copy_from_slice(&send[..first])
        })?;
        let root_flag = self.cell(root, phase).0;
        let Some(recv) = recv else {
            if fits && rounds == 1 {
                return Ok(true);
            }
            self.wait_for(&root_flag.verdict, call * VERDICTS)?;
            return match root_flag.verdict.load(Ordering::Acquire) % VERDICTS {
                // The root found every length this rank's, which fit.
                IN_AREA => {
                    for round in 1..rounds {
                        let (call, phase) = self.next_call();
                        let carried = round * SEGMENT..((round + 1) * SEGMENT).min(len);
                        self.fill(call, phase, len as u64, carried.len(), |cell| {
                            cell.copy_from_slice(&send[carried.clone()])
                        })?;
                    }
                    Ok(true)
                }
                BY_MESSAGES => Ok(false),
                _ => Err(match root_flag.len.load(Ordering::Relaxed) {
                    REFUSED => Cause::PeerRefused { peer: root as i32 },
                    same if same == len as u64 => Cause::PeerArguments(
                        "the root found another rank's arguments not its own (the root's \
                         error names that rank)",
                    ),
                    got => Cause::LengthDisagrees {
                        peer: root as i32,
                        expected: len,
                        got: got as usize,
                    },
                }),
            };
        };
        self.wait_for_all(call, phase)?;
        let disagreement = self.disagreement(phase, len);
        let verdict = match (&disagreement, fits) {
            (Some(_), _) => DISAGREED,
            (None, false) => BY_MESSAGES,
            (None, true) => IN_AREA,
        };
        self.publish(&root_flag.verdict, call * VERDICTS + verdict);
        if let Some(cause) = disagreement {
            return Err(cause);
        }
        if !fits {
            return Ok(false);
        }
        for round in 0..rounds {
            let phase = if round == 0 {
                phase
            } else {
                // The root's flag for each later round says only that it is here, so that
                // the ranks' counts of calls, and the cells' turns, stay in step.
                let (call, phase) = self.next_call();
                self.say(call, phase, len as u64)?;
                self.wait_for_all(call, phase)?;
                phase
            };
            let carried = round * SEGMENT..((round + 1) * SEGMENT).min(len);
            finish(
                &Carried {
                    phase,
                    into: carried.start,
                    from: 0,
                    carried: carried.len(),
                    wanted: carried,
                },
                recv,
            );
        }
        Ok(true)
    }

    /// Every rank's `send`, of any length, in its part of the root's `recv` (`Some` on the
    /// root only, with the parts: offset, length). A part that fits the cell goes through it,
    /// and its rank leaves once it is published; one that does not waits for the root's
    /// verdict, given once the root has seen every length: by a message to the root, or an
    /// error. For that error the root writes into its cell the first rank whose length it
    /// found wrong and the lengths it expected: that rank names the root's length for it,
    /// the others the root's refusal (whose own error names that rank).
    fn gather_varcount(
        &self,
        comm: &CommData,
        root: u32,
        send: &[u8],
        recv: Option<(&mut [u8], &[Part])>,
    ) -> Result<(), Cause> {
        let (call, phase) = self.next_call();
        let (root_flag, root_data) = self.cell(root, phase);
        let Some((recv, parts)) = recv else {
            if self.contribute(call, phase, send)? {
                return Ok(());
            }
            self.wait_for(&root_flag.verdict, call * VERDICTS)?;
            if root_flag.verdict.load(Ordering::Acquire) % VERDICTS == BY_MESSAGES {
                return send_part(comm, root, send);
            }
            let refused = Cause::PeerRefused { peer: root as i32 };
            if root_flag.len.load(Ordering::Relaxed) == REFUSED {
                return Err(refused);
            }
            // SAFETY: the root wrote the culprit and its lengths (`8 * (size + 1)` bytes, which
            // fit the cell) into its cell before its verdict, whose acquire load above orders
            // them before this read, and does not write the cell again before this rank has
            // published a later call.
            let words =
                unsafe { std::slice::from_raw_parts(root_data, 8 * (self.size as usize + 1)) };
            let word =
                |i: usize| u64::from_ne_bytes(words[8 * i..8 * i + 8].try_into().expect("8"));
            return Err(if word(0) == u64::from(self.rank) {
                Cause::LengthDisagrees {
                    peer: root as i32,
                    expected: send.len(),
                    got: word(1 + self.rank as usize) as usize,
                }
            } else {
                refused
            });
        };
        // The root's own part goes straight from `send` to `recv`: its cell carries no copy,
        // only its length (and, after a disagreement, the verdict's words below).
        self.say(call, phase, send.len() as u64)?;
        self.wait_for_all(call, phase)?;
        let disagreement = self.refusal(phase).or_else(|| {
            (0..self.size).filter(|&r| r != root).find_map(|r| {
                let got = self.cell(r, phase).0.len.load(Ordering::Relaxed) as usize;
                let expected = parts[r as usize].1;
                (got != expected).then_some(Cause::LengthDisagrees {
                    peer: r as i32,
                    expected,
                    got,
                })
            })
        });
        let overflow = (0..self.size).any(|r| r != root && parts[r as usize].1 > SHARED_MAX);
        let verdict = match (&disagreement, overflow) {
            (Some(cause), _) => {
                let culprit = match *cause {
                    Cause::LengthDisagrees { peer, .. } | Cause::PeerRefused { peer } => peer,
                    _ => unreachable!("a disagreement names a length or a refusal"),
                };
                let words =
                    std::iter::once(culprit as u64).chain(parts.iter().map(|&(_, len)| len as u64));
                // SAFETY: this rank alone writes its cell, which no rank reads for this call
                // before the verdict below; `8 * (size + 1)` bytes fit it (MAX_RANKS).
                let cell = unsafe {
                    std::slice::from_raw_parts_mut(root_data, 8 * (self.size as usize + 1))
                };
                for (bytes, word) in cell.chunks_exact_mut(8).zip(words) {
                    bytes.copy_from_slice(&word.to_ne_bytes());
                }
                DISAGREED
            }
            (None, true) => BY_MESSAGES,
            (None, false) => IN_AREA,
        };
        self.publish(&root_flag.verdict, call * VERDICTS + verdict);
        if let Some(cause) = disagreement {
            return Err(cause);
        }
        let mut arriving = InFlight::default();
        for (r, &(at, len)) in (0..self.size).zip(parts) {
            let part = &mut recv[at..at + len];
            if r == root {
                part.copy_from_slice(send);
            } else if len <= SHARED_MAX {
                part.copy_from_slice(self.published_any(r, phase));
            } else {
                arriving.receive(post_part(comm, r, part)?);
            }
        }
        arriving.finish()
    }

    /// The root's parts of `send` (`Some` on the root only, with the parts: offset, length)
    /// in each rank's `recv`. The root publishes a table of the parts (where in its cell, or
    /// by a message, and how long) and the parts that fit after it, in rank order; a rank
    /// copies its part, or says it agrees and receives it by a message, which the root sends
    /// once that rank has said so (a rank that refused, or whose length disagrees, gets
    /// none, and the root reports it).
    fn scatter_varcount(
        &self,
        comm: &CommData,
        root: u32,
        send: Option<(&[u8], &[Part])>,
        recv: &mut [u8],
    ) -> Result<(), Cause> {
        let (call, phase) = self.next_call();
        let table = 16 * self.size as usize;
        let Some((send, parts)) = send else {
            let (root_flag, root_data) = self.cell(root, phase);
            self.wait_for(&root_flag.call, call)?;
            let outcome = if root_flag.len.load(Ordering::Relaxed) == REFUSED {
                Err(Cause::PeerRefused { peer: root as i32 })
            } else {
                // SAFETY: the root published its table (every rank's entry, `table` bytes at
                // most SHARED_MAX) and the parts it points to for this call (the acquire load
                // in `wait_for` orders them before this read), and does not write the cell
                // again before this rank has published this call, below.
                let data = unsafe { std::slice::from_raw_parts(root_data, SHARED_MAX) };
                let entry = 16 * self.rank as usize;
                let word = |i: usize| u64::from_ne_bytes(data[i..i + 8].try_into().expect("8"));
                let (at, len) = (word(entry), word(entry + 8) as usize);
                if len != recv.len() {
                    Err(Cause::LengthDisagrees {
                        peer: root as i32,
                        expected: recv.len(),
                        got: len,
                    })
                } else if at == BY_MESSAGE {
                    Ok(true)
                } else {
                    recv.copy_from_slice(&data[at as usize..at as usize + len]);
                    Ok(false)
                }
            };
            // Its own length, even where it disagrees: the root then names both.
            self.say(call, phase, recv.len() as u64)?;
            return match outcome? {
                true => receive_part(comm, root, recv),
                false => Ok(()),
            };
        };
        // In rank order, each part that still fits after the table and the parts before it.
        let mut packed = table;
        let placed: Vec<u64> = (0..self.size as usize)
            .map(|r| {
                let len = parts[r].1;
                if r as u32 == root || packed + len > SHARED_MAX {
                    return BY_MESSAGE;
                }
                packed += len;
                (packed - len) as u64
            })
            .collect();
        self.contribute_with(call, phase, packed, SHARED_MAX, |cell| {
            for (r, (&(from, len), &at)) in parts.iter().zip(&placed).enumerate() {
                cell[16 * r..16 * r + 8].copy_from_slice(&at.to_ne_bytes());
                cell[16 * r + 8..16 * r + 16].copy_from_slice(&(len as u64).to_ne_bytes());
                if at != BY_MESSAGE {
                    let at = at as usize;
                    cell[at..at + len].copy_from_slice(&send[from..from + len]);
                }
            }
        })?;
        let (from, len) = parts[root as usize];
        recv.copy_from_slice(&send[from..from + len]);
        let mut refused = None;
        let mut leaving = InFlight::default();
        for r in (0..self.size).filter(|&r| r != root && placed[r as usize] == BY_MESSAGE) {
            let flag = self.cell(r, phase).0;
            self.wait_for(&flag.call, call)?;
            let (from, len) = parts[r as usize];
            let expects = flag.len.load(Ordering::Relaxed);
            if expects == REFUSED {
                refused.get_or_insert(Cause::PeerRefused { peer: r as i32 });
                continue;
            }
            if expects != len as u64 {
                refused.get_or_insert(Cause::PartDisagrees {
                    peer: r as i32,
                    expected: expects as usize,
                    sending: len,
                });
                continue;
            }
            leaving.send(post_send_part(comm, r, &send[from..from + len])?);
        }
        leaving.finish()?;
        refused.map_or(Ok(()), Err)
    }

    /// Publishes this rank's flag for `call` with `len` in its cell's length and no data.
    fn say(&self, call: u64, phase: usize, len: u64) -> Result<(), Cause> {
        let flag = self.cell(self.rank, phase).0;
        self.guard_write(call)?;
        flag.len.store(len, Ordering::Relaxed);
        self.publish(&flag.call, call);
        Ok(())
    }

    /// Waits until `flag` says `call` (or a later call of the same cell), moving messages on
    /// meanwhile. A flag already published costs a load and a comparison where this is
    /// called: the waiting loop, out of line since the segmented calls gave it more callers,
    /// cost a call, its set-up and its return on every flag (about 35 instructions; a
    /// 4-rank barrier's 3 flags and a broadcast reader's, measured under callgrind).
    #[inline(always)]
    fn wait_for(&self, flag: &AtomicU64, call: u64) -> Result<(), Cause> {
        if flag.load(Ordering::Acquire) >= call {
            return Ok(());
        }
        self.wait_until_published(flag, call)
    }

    /// [`Area::wait_for`]'s loop, for a flag not published yet.
    #[inline(never)]
    fn wait_until_published(&self, flag: &AtomicU64, call: u64) -> Result<(), Cause> {
        let spin = self.spin.get();
        let mut polls = 0u32;
        let mut since = None;
        // Made at the first sleep: a wait that never sleeps never looks at the stall watch.
        let mut blocked: Option<Blocked> = None;
        while flag.load(Ordering::Acquire) < call {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(PROGRESS_EVERY) {
                // Steps the immediate collectives in flight too.
                with_engine(|e| e.progress())?;
            }
            if polls.is_multiple_of(POLLS_PER_CLOCK) || spin.is_zero() {
                let idle = since.get_or_insert_with(Instant::now).elapsed();
                if idle < self.yield_for {
                    // Hands the CPU to the ranks that share it, the one waited for among
                    // them; each turn looks at the messages too.
                    std::thread::yield_now();
                    let mut sleeps = self.sleeps.get();
                    sleeps.yielded += 1;
                    self.sleeps.set(sleeps);
                    with_engine(|e| e.progress())?;
                    continue;
                }
                if idle >= spin {
                    let blocked = blocked.get_or_insert_with(Blocked::new);
                    blocked.idle(idle, || {
                        with_engine(|e| Ok(e.queues(Awaited::State))).unwrap_or_default()
                    });
                    if !(hooks::any() && self.sleep_in_pml(flag, call)?) {
                        self.sleep(flag, call);
                    }
                    with_engine(|e| e.progress())?;
                    continue;
                }
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Sleeps in the PML until something reaches one of its transports (a peer's operation
    /// on a window this rank exposes, a message, a publisher's wake: see `publish`) or
    /// `SLEEP` passes, unless `flag` says `call` already, where this thread owns the PML:
    /// `false` where it does not, and sleeps not (the shared PML's lock would be held through
    /// the sleep).
    fn sleep_in_pml(&self, flag: &AtomicU64, call: u64) -> Result<bool, Cause> {
        let sleeping = self.word(SLEEPING_AT, self.rank);
        sleeping.store(IN_PML, Ordering::Relaxed);
        // Pairs with the fence in `publish`: either the publisher sees this rank asleep and
        // wakes its PML (a wake before the PML's sleep starts ends that sleep at once), or
        // this sees the flag.
        fence(Ordering::SeqCst);
        if flag.load(Ordering::Acquire) >= call {
            sleeping.store(AWAKE, Ordering::Relaxed);
            return Ok(true);
        }
        let start = Instant::now();
        let slept = environment::sleep_in_pml(SLEEP);
        sleeping.store(AWAKE, Ordering::Relaxed);
        if slept? {
            let mut sleeps = self.sleeps.get();
            sleeps.in_pml += 1;
            // Ended by the flag before its timeout: woken, most likely by its publisher
            // (`--verbose` tells these apart from sleeps that ran their `SLEEP`).
            if flag.load(Ordering::Acquire) >= call && start.elapsed() < SLEEP {
                sleeps.in_pml_woken += 1;
            }
            self.sleeps.set(sleeps);
            return Ok(true);
        }
        Ok(false)
    }

    /// Sleeps until a publisher wakes this rank (or `SLEEP` passes), unless `flag` says
    /// `call` already.
    fn sleep(&self, flag: &AtomicU64, call: u64) {
        let sleeping = self.word(SLEEPING_AT, self.rank);
        let futex = self.word(FUTEX_AT, self.rank);
        sleeping.store(ON_FUTEX, Ordering::Relaxed);
        let seen = futex.load(Ordering::Acquire);
        // Pairs with the fence in `publish` (see there).
        fence(Ordering::SeqCst);
        if flag.load(Ordering::Acquire) < call {
            // A wake after `seen` was read changed the word: this returns at once.
            let timed_out = futex::wait(futex, seen, SLEEP);
            let published = flag.load(Ordering::Acquire) >= call;
            let mut sleeps = self.sleeps.get();
            sleeps.slept += 1;
            if futex.load(Ordering::Acquire) != seen {
                sleeps.woken += 1;
            } else if timed_out && published && !wake_follows(futex, seen) {
                sleeps.missed += 1;
            }
            self.sleeps.set(sleeps);
        }
        sleeping.store(AWAKE, Ordering::Relaxed);
    }
}

/// Whether a publisher that stored the flag after a sleep on `futex` ran to its timeout wakes
/// the sleeper all the same, changing the word from `seen`: the sleeper is still marked asleep
/// then, so a publisher that keeps the protocol reads it asleep and wakes it, if preempted
/// between the two (ranks sharing one CPU, the timeout's wake-up running first) only later.
/// Only a publisher that read the sleeper awake while it slept (a lost wake-up) leaves the word
/// as it was; `WAKE_GRACE` bounds the wait for the other kind.
#[cold]
fn wake_follows(futex: &AtomicU32, seen: u32) -> bool {
    let start = Instant::now();
    while futex.load(Ordering::Acquire) == seen {
        if start.elapsed() >= WAKE_GRACE {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

impl Drop for Area {
    fn drop(&mut self) {
        if verbose() {
            let sleeps = self.sleeps.get();
            bootstrap::output::say(&format!(
                "mpirt: collective area, rank {} of {}: {} calls, {} yields, {} sleeps, {} woken \
                 by a publisher, {} lost wake-ups, {} sleeps in the PML (serving peers), {} of \
                 them ended by the flag",
                self.rank,
                self.size,
                self.calls.get(),
                sleeps.yielded,
                sleeps.slept,
                sleeps.woken,
                sleeps.missed,
                sleeps.in_pml,
                sleeps.in_pml_woken
            ));
        }
    }
}

/// The communicator's area, set up by this call (of `bytes` on this rank) if it is the first
/// to ask; `None` where its calls go by messages or by the hierarchical path.
pub(super) fn area(
    comm: &CommData,
    operation: &'static str,
    bytes: usize,
) -> Result<Option<Rc<Area>>, Error> {
    Ok(match meeting_place(comm, operation, bytes)? {
        Meeting::Area(area) => Some(area),
        Meeting::Hierarchy(_) | Meeting::Messages => None,
    })
}

/// The communicator's parts for the hierarchical path, where a blocking collective (the
/// calling one's area check included) found its ranks on several hosts, more than one on some
/// (see [`meeting_place`]): the plans by messages of gathers, scatters, reduce-scatters and
/// short all-to-alls go through each host's leader there. Every rank finds the same here at
/// the same call, since every rank meets in the same calls.
pub(crate) fn hierarchy(comm: &CommData) -> Option<Rc<Hierarchy>> {
    match &*comm.area_slot().0.borrow() {
        AreaState::Hierarchical(parts) => Some(Rc::clone(parts)),
        _ => None,
    }
}

/// Where the communicator's blocking collectives meet, settled by this call (of `bytes` on
/// this rank) if it is the first to ask: each rank's host (`Hosts`); ranks on several
/// hosts, more than one on some, take the hierarchical path (`hierarchy`), and other
/// communicators of at most `MAX_RANKS` ranks set up an area, which serves where every rank
/// maps it.
fn meeting_place(comm: &CommData, operation: &'static str, bytes: usize) -> Result<Meeting, Error> {
    comm.collectives_allowed()
        .map_err(|c| Error::new(operation, c))?;
    let slot = &comm.area_slot().0;
    let untried = matches!(*slot.borrow(), AreaState::Untried);
    if untried && !over_shared_memory() {
        *slot.borrow_mut() = AreaState::Unavailable;
    } else if untried {
        let hosts = Hosts::of(comm, operation)?;
        if hosts.worth_a_hierarchy(MAX_RANKS) {
            let parts = Hierarchy::set_up(comm, operation, hosts)?;
            if verbose() {
                bootstrap::output::say(&format!(
                    "mpirt: rank {}: collectives of {} ranks {}",
                    comm.world_rank(comm.rank),
                    comm.size,
                    match &parts {
                        Some(parts) => parts.describe(),
                        None => "not hierarchical (a host's area is unavailable): by messages"
                            .to_string(),
                    }
                ));
            }
            *slot.borrow_mut() = match parts {
                Some(parts) => AreaState::Hierarchical(Rc::new(parts)),
                None => AreaState::Unavailable,
            };
        } else if comm.size > MAX_RANKS {
            *slot.borrow_mut() = AreaState::Unavailable;
        } else {
            set_up_area(comm, operation, bytes)?;
        }
    }
    Ok(match &*slot.borrow() {
        AreaState::Ready(area) => Meeting::Area(Rc::clone(area)),
        AreaState::Hierarchical(parts) => Meeting::Hierarchy(Rc::clone(parts)),
        AreaState::Untried | AreaState::Unavailable => Meeting::Messages,
    })
}

/// Sets up the communicator's area and settles its slot; the error is the ranks'
/// disagreement on the call's length, found meanwhile.
fn set_up_area(comm: &CommData, operation: &'static str, bytes: usize) -> Result<(), Error> {
    let (area, disagreement) = set_up(comm, operation, bytes)?;
    // The evidence that areas are used: without it a broken set-up would pass unseen,
    // every call going by messages.
    if verbose() {
        bootstrap::output::say(&format!(
            "mpirt: rank {}: collective area of {} ranks {}",
            comm.world_rank(comm.rank),
            comm.size,
            match &area {
                Some(area) if area.released => "ready, its barrier released by rank 0",
                Some(_) => "ready",
                None => "unavailable: collectives go by messages",
            }
        ));
    }
    *comm.area_slot().0.borrow_mut() = match area {
        Some(area) => AreaState::Ready(Rc::new(area)),
        None => AreaState::Unavailable,
    };
    match disagreement {
        Some(cause) => Err(Error::new(operation, cause)),
        None => Ok(()),
    }
}

/// Whether the job's ranks on a host reach each other by shared memory: not when the job
/// forced another transport (`MPIRT_TRANSPORT`, the same on every rank), whose paths the
/// collectives then take too.
fn over_shared_memory() -> bool {
    matches!(
        pml::EngineConfig::from_env().map(|c| c.transport),
        Ok(TransportChoice::Auto | TransportChoice::Shm)
    )
}

/// Posts the receive of `rank`'s part of a rooted call that did not fit the area into `part`,
/// which must stay untouched until the returned handle is waited on.
fn post_part(comm: &CommData, rank: u32, part: &mut [u8]) -> Result<Handle, Cause> {
    // SAFETY: `part` is a buffer of the caller's, which waits for the receive before it
    // returns or reads the buffer: at once, or through an `InFlight`, which on an error
    // cancels and waits for it before the buffer can go.
    with_engine(|e| unsafe {
        e.post_recv(
            comm.context,
            SourceSel::Rank(rank),
            TagSel::Tag(OVERFLOW_TAG),
            part.as_mut_ptr(),
            part.len(),
        )
    })
}

/// Posts the send of `part` to `rank`, a part of a rooted call that did not fit the area,
/// which must stay untouched until the returned handle is waited on.
fn post_send_part(comm: &CommData, rank: u32, part: &[u8]) -> Result<Handle, Cause> {
    // SAFETY: `part` is a buffer of the caller's, which waits for the send before it returns:
    // at once, or through an `InFlight`, which waits for it on an error too.
    unsafe { post_runtime_send(comm, comm.world_rank(rank), OVERFLOW_TAG, part) }
}

/// The transfers of a call's parts that did not fit the area, in flight on the caller's
/// buffers. Every one is finished before it goes, on an error too (as a schedule's
/// `abandon` does): a receive is cancelled first, since the peer that failed may never send,
/// and then waited for with the sends, so that no transfer outlives its buffer.
#[derive(Default)]
struct InFlight {
    /// Each handle, and whether it is a receive's.
    handles: Vec<(Handle, bool)>,
}

impl InFlight {
    fn receive(&mut self, handle: Handle) {
        self.handles.push((handle, true));
    }

    fn send(&mut self, handle: Handle) {
        self.handles.push((handle, false));
    }

    /// Waits for every transfer, all of them even after one fails; the first error.
    fn finish(mut self) -> Result<(), Cause> {
        self.handles
            .drain(..)
            .map(|(handle, _)| wait_handle(handle).map(drop))
            .fold(Ok(()), Result::and)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        for (handle, receive) in self.handles.drain(..) {
            let cancelled = match receive {
                true => with_engine(|e| e.cancel(handle)).map(drop),
                false => Ok(()),
            };
            // The call fails with its own error already: this one would only hide it.
            let _ = cancelled.and_then(|()| wait_handle(handle));
        }
    }
}

/// Sends this rank's part, which did not fit the area, to `root`, and waits for it.
fn send_part(comm: &CommData, root: u32, part: &[u8]) -> Result<(), Cause> {
    wait_handle(post_send_part(comm, root, part)?).map(drop)
}

/// Receives this rank's part, which did not fit the area, from `root`.
fn receive_part(comm: &CommData, root: u32, part: &mut [u8]) -> Result<(), Cause> {
    wait_handle(post_part(comm, root, part)?).map(drop)
}

/// Whether `rsrun --verbose` (MPIRT_VERBOSE, read as the engine reads it) asked for the
/// set-up choices.
pub(crate) fn verbose() -> bool {
    matches!(std::env::var("MPIRT_VERBOSE").as_deref(), Ok(v) if !v.is_empty() && v != "0")
}

/// Where a blocking `operation` of `bytes` of `datatype` on this rank meets, settled by
/// this call if it is the first; `wanted` says whether `operation`'s algorithm is the
/// area's (the same on every rank: it must not depend on a rank's length). Types whose
/// values need a check go by messages, whose receives check them.
fn meeting(
    comm: &CommData,
    operation: &'static str,
    wanted: Result<bool, Cause>,
    datatype: Datatype,
    bytes: usize,
) -> Result<Meeting, Error> {
    super::intra_only(comm, operation)?;
    let wanted = wanted.map_err(|cause| Error::new(operation, cause))?;
    if !wanted || datatype.needs_check() || comm.size == 1 {
        return Ok(Meeting::Messages);
    }
    meeting_place(comm, operation, bytes)
}

/// The communicator's area for a blocking `operation` of `bytes` of `datatype` on this rank,
/// if it has one and the area serves the communicator (see [`meeting`]). A communicator of
/// more than `MAX_RANKS` ranks has none, but its first such call still settles where its
/// calls meet: the hosts it finds choose the plans by messages through each host's leader
/// (`hierarchy`), from this call on.
fn usable_area(
    comm: &CommData,
    operation: &'static str,
    wanted: Result<bool, Cause>,
    datatype: Datatype,
    bytes: usize,
) -> Result<Option<Rc<Area>>, Error> {
    Ok(match meeting(comm, operation, wanted, datatype, bytes)? {
        Meeting::Area(area) => Some(area),
        Meeting::Hierarchy(_) | Meeting::Messages => None,
    })
}

/// Runs `path`, an area path of `operation`, over `buf`'s elements as one run of bytes: their
/// own bytes where they lie back to back, else a packed copy of their values, unpacked back
/// into `buf` where `path` took the call. Ranks may lay the same elements out differently (a
/// vector view on one, a slice on another): the area decides on the packed length alone,
/// which type matching makes the same on every rank, so they still take the same path.
pub(crate) fn over_packed<B: BufferMut + ?Sized>(
    buf: &mut B,
    operation: &'static str,
    path: impl FnOnce(&mut [u8]) -> Result<bool, Error>,
) -> Result<bool, Error> {
    let datatype = buf.datatype();
    if datatype.is_contiguous() {
        // SAFETY: `BufferMut` makes the pointer valid for writes of `byte_len` bytes, one run
        // (the elements are contiguous), borrowed mutably for this whole call.
        return path(unsafe { std::slice::from_raw_parts_mut(buf.pointer_mut(), buf.byte_len()) });
    }
    let layout = datatype
        .layout()
        .map_err(|cause| Error::new(operation, cause))?;
    let mut packed = vec![0u8; buf.byte_len()];
    let (count, base) = (buf.count(), buf.pointer_mut());
    // SAFETY: `BufferMut` makes `base` valid for the span of `count` elements of the layout
    // (checked where the view was made), whose blocks hold initialized values.
    unsafe { layout.pack(count, base, &mut packed) };
    if !path(&mut packed)? {
        return Ok(false);
    }
    // SAFETY: as above, for writes; `path` took the call, so `packed` holds values: the area
    // takes no type whose values need a check (any bytes are values), `reduce_local_into`'s
    // operation makes values of values, and the inter-communicator collectives check what
    // arrives for such a type before it reaches `packed`.
    unsafe { layout.unpack(count, base, &packed) };
    Ok(true)
}

/// What makes a cause, this rank's refusal of its arguments to `operation`, its error; where
/// the call would have met in the area (`wanted` as for `operation`, with the type and the
/// byte length that its area path goes by: a reduction's or a gather's send buffer's, a
/// scatter's receive buffer's), this rank takes its part all the same, to say so: the other
/// ranks' counts of calls stay in step with this one's, and those that read its part fail
/// naming it rather than wait or read a later call's bytes.
pub(crate) fn refusing<'c>(
    comm: &'c CommData,
    operation: &'static str,
    wanted: Result<bool, Cause>,
    own: (Datatype, usize),
) -> impl FnOnce(Cause) -> Error + 'c {
    refusing_as(comm, operation, wanted, own, None)
}

/// [`refusing`] for a rooted call, which `refused` describes: where the ranks go by
/// messages and this rank is the root, it runs its part of the call draining
/// (`calls::drain`), so that no peer waits for it.
pub(crate) fn refusing_root<'c>(
    comm: &'c CommData,
    operation: &'static str,
    wanted: Result<bool, Cause>,
    own: (Datatype, usize),
    refused: Refused,
) -> impl FnOnce(Cause) -> Error + 'c {
    refusing_as(comm, operation, wanted, own, Some(refused))
}

fn refusing_as<'c>(
    comm: &'c CommData,
    operation: &'static str,
    wanted: Result<bool, Cause>,
    (datatype, bytes): (Datatype, usize),
    refused: Option<Refused>,
) -> impl FnOnce(Cause) -> Error + 'c {
    move |cause| {
        match usable_area(comm, operation, wanted, datatype, bytes) {
            // A failure to take part (a peer's broken messaging) leaves this rank's own cause
            // the one to report.
            Ok(Some(area)) => drop(area.refuse()),
            Ok(None) => refused_by_messages(comm, refused, &cause),
            Err(_) => super::refused_by_messages(comm),
        }
        Error::new(operation, cause)
    }
}

/// [`refusing`] for a call that may take the hierarchical path: a reduction or an all-reduce
/// under an operation that is `commutative` or not, or an all-gather (`true`: the vectors go
/// to their ranks' places whatever the hosts' order). On a communicator whose such
/// calls take that path, this rank takes its part in that path's phases to say so; by
/// messages, a reduction's root that `refused` describes runs its part draining.
pub(crate) fn refusing_hierarchically<'c>(
    comm: &'c CommData,
    operation: &'static str,
    wanted: Result<bool, Cause>,
    (datatype, bytes): (Datatype, usize),
    commutative: bool,
    refused: Option<Refused>,
) -> impl FnOnce(Cause) -> Error + 'c {
    move |cause| {
        match meeting(comm, operation, wanted, datatype, bytes) {
            // A failure to take part (a peer's broken messaging) leaves this rank's own cause
            // the one to report.
            Ok(Meeting::Area(area)) => drop(area.refuse()),
            Ok(Meeting::Hierarchy(parts)) if parts.serves(commutative) => parts.refuse(),
            Ok(_) => refused_by_messages(comm, refused, &cause),
            Err(_) => super::refused_by_messages(comm),
        }
        Error::new(operation, cause)
    }
}

/// A refusal where the ranks go by messages: the root of the call `refused` describes runs
/// its part draining; any other rank takes the call's tag alone.
fn refused_by_messages(comm: &CommData, refused: Option<Refused>, cause: &Cause) {
    if !refused.is_some_and(|refused| calls::drain(comm, refused, cause)) {
        super::refused_by_messages(comm);
    }
}

/// Runs a blocking barrier through the area; `false` if it must go by messages instead.
pub(crate) fn try_barrier(comm: &CommData) -> Result<bool, Error> {
    const OPERATION: &str = "barrier";
    let wanted = select::barrier_in_shared_memory();
    let none = Datatype::plain(0, "none");
    let met = match meeting(comm, OPERATION, wanted, none, 0)? {
        Meeting::Area(area) => area.barrier(),
        Meeting::Hierarchy(parts) => parts.barrier(),
        Meeting::Messages => return Ok(false),
    };
    met.map_err(|cause| Error::new(OPERATION, cause))?;
    Ok(true)
}

/// Runs a blocking broadcast from `root` (a rank of `comm`) through the area; `false` if it
/// must go by messages instead.
pub(crate) fn try_broadcast(
    comm: &CommData,
    root: u32,
    buf: &mut [u8],
    datatype: Datatype,
) -> Result<bool, Error> {
    const OPERATION: &str = "broadcast_into";
    let wanted = select::broadcast_in_shared_memory();
    let spread = match meeting(comm, OPERATION, wanted, datatype, buf.len())? {
        Meeting::Area(area) => area.broadcast(root, buf),
        Meeting::Hierarchy(parts) => parts.broadcast(root, buf),
        Meeting::Messages => return Ok(false),
    };
    spread.map_err(|cause| Error::new(OPERATION, cause))
}

/// Runs a blocking reduction to `root` (a rank of `comm`) through the area; `recv` is the
/// root's and only the root's, checked against `send` by the caller; `false` if it must go
/// by messages instead.
pub(crate) fn try_reduce(
    comm: &CommData,
    root: u32,
    send: &[u8],
    recv: Option<&mut [u8]>,
    datatype: Datatype,
    op: &dyn Operation,
) -> Result<bool, Error> {
    let operation = if recv.is_some() {
        "reduce_into_root"
    } else {
        "reduce_into"
    };
    let wanted = select::reduce_in_shared_memory();
    let reduced = match meeting(comm, operation, wanted, datatype, send.len())? {
        Meeting::Area(area) => {
            let most = rooted_max(area.size);
            area.reduce(root, send, recv, datatype, op, most)
        }
        Meeting::Hierarchy(parts) if parts.serves(op.is_commutative()) => {
            parts.reduce(send, recv, datatype, op)
        }
        Meeting::Hierarchy(_) | Meeting::Messages => return Ok(false),
    };
    reduced.map_err(|cause| Error::new(operation, cause))
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
    let wanted = select::allreduce_in_shared_memory();
    let reduced = match meeting(comm, OPERATION, wanted, datatype, send.len())? {
        Meeting::Area(area) => area.all_reduce(send, recv, datatype, op),
        Meeting::Hierarchy(parts) if parts.serves(op.is_commutative()) => {
            parts.reduce(send, Some(recv), datatype, op)
        }
        Meeting::Hierarchy(_) | Meeting::Messages => return Ok(false),
    };
    reduced.map_err(|cause| Error::new(OPERATION, cause))
}

/// Runs a blocking reduce-scatter (`operation`) through the area: `send` and where this
/// rank's part of it starts, `recv` that part's length; `false` if it must go by messages
/// instead. The buffers and the parts were checked against each other by the caller.
pub(crate) fn try_reduce_scatter(
    comm: &CommData,
    operation: &'static str,
    (send, at): (&[u8], usize),
    recv: &mut [u8],
    datatype: Datatype,
    op: &dyn Operation,
) -> Result<bool, Error> {
    let wanted = select::reduce_scatter_in_shared_memory();
    let Some(area) = usable_area(comm, operation, wanted, datatype, send.len())? else {
        return Ok(false);
    };
    area.reduce_scatter(send, at, recv, datatype, op)
        .map_err(|cause| Error::new(operation, cause))
}

/// Runs a blocking all-gather through the area; `false` if it must go by messages instead.
/// The buffers were checked against each other by the caller.
pub(crate) fn try_all_gather(
    comm: &CommData,
    send: &[u8],
    recv: &mut [u8],
    datatype: Datatype,
) -> Result<bool, Error> {
    const OPERATION: &str = "all_gather_into";
    let wanted = select::allgather_in_shared_memory();
    let gathered = match meeting(comm, OPERATION, wanted, datatype, send.len())? {
        Meeting::Area(area) => area.all_gather(send, recv),
        Meeting::Hierarchy(parts) => parts.all_gather(send, recv),
        Meeting::Messages => return Ok(false),
    };
    gathered.map_err(|cause| Error::new(OPERATION, cause))
}

/// Runs a blocking all-to-all through the area; `false` if it must go by messages instead.
/// The buffers were checked against each other by the caller.
pub(crate) fn try_all_to_all(
    comm: &CommData,
    send: &[u8],
    recv: &mut [u8],
    datatype: Datatype,
) -> Result<bool, Error> {
    const OPERATION: &str = "all_to_all_into";
    let wanted = select::alltoall_in_shared_memory();
    let Some(area) = usable_area(comm, OPERATION, wanted, datatype, send.len())? else {
        return Ok(false);
    };
    area.all_to_all(send, recv)
        .map_err(|cause| Error::new(OPERATION, cause))
}

/// Runs a blocking gather to `root` (a rank of `comm`) through the area; `recv` is the
/// root's and only the root's, checked against `send` by the caller; `false` if it must go
/// by messages instead.
pub(crate) fn try_gather(
    comm: &CommData,
    root: u32,
    send: &[u8],
    recv: Option<&mut [u8]>,
    datatype: Datatype,
) -> Result<bool, Error> {
    let operation = if recv.is_some() {
        "gather_into_root"
    } else {
        "gather_into"
    };
    let wanted = select::gather_in_shared_memory();
    let Some(area) = usable_area(comm, operation, wanted, datatype, send.len())? else {
        return Ok(false);
    };
    area.gather(root, send, recv)
        .map_err(|cause| Error::new(operation, cause))
}

/// Runs a blocking scatter from `root` (a rank of `comm`) through the area; `send` is the
/// root's and only the root's, checked against `recv` by the caller; `false` if it must go
/// by messages instead.
pub(crate) fn try_scatter(
    comm: &CommData,
    root: u32,
    send: Option<&[u8]>,
    recv: &mut [u8],
    datatype: Datatype,
) -> Result<bool, Error> {
    let operation = if send.is_some() {
        "scatter_into_root"
    } else {
        "scatter_into"
    };
    let wanted = select::scatter_in_shared_memory();
    let Some(area) = usable_area(comm, operation, wanted, datatype, recv.len())? else {
        return Ok(false);
    };
    area.scatter(root, send, recv)
        .map_err(|cause| Error::new(operation, cause))
}

/// Runs a blocking all-gather of parts of any length through the area; `false` if it must go
/// by messages instead. `parts` are the receive buffer's (offset, length in packed bytes),
/// checked against `send` by the caller.
pub(crate) fn try_all_gather_varcount(
    comm: &CommData,
    send: &[u8],
    recv: &mut [u8],
    parts: &[Part],
    datatype: Datatype,
) -> Result<bool, Error> {
    const OPERATION: &str = "all_gather_varcount_into";
    let wanted = select::allgather_in_shared_memory();
    // Lengths differ between ranks: the set-up has none to agree on.
    let Some(area) = usable_area(comm, OPERATION, wanted, datatype, 0)? else {
        return Ok(false);
    };
    area.all_gather_varcount(send, recv, parts)
        .map_err(|cause| Error::new(OPERATION, cause))
}

/// Runs a blocking all-to-all of parts of any length through the area; `false` if it must go
/// by messages instead. `outgoing` and `incoming` are the send and the receive buffer's parts,
/// checked by the caller.
pub(crate) fn try_all_to_all_varcount(
    comm: &CommData,
    send: &[u8],
    recv: &mut [u8],
    outgoing: &[Part],
    incoming: &[Part],
    datatype: Datatype,
) -> Result<bool, Error> {
    const OPERATION: &str = "all_to_all_varcount_into";
    let wanted = select::alltoall_in_shared_memory();
    // Lengths differ between ranks: the set-up has none to agree on.
    let Some(area) = usable_area(comm, OPERATION, wanted, datatype, 0)? else {
        return Ok(false);
    };
    area.all_to_all_varcount(send, recv, outgoing, incoming)
        .map_err(|cause| Error::new(OPERATION, cause))
}

/// Runs a blocking gather of parts of any length to `root` (a rank of `comm`) through the area;
/// `recv` and its parts (offset, length in packed bytes) are the root's and only the root's,
/// checked against `send` by the caller; `false` if it must go by messages instead.
pub(crate) fn try_gather_varcount(
    comm: &CommData,
    root: u32,
    send: &[u8],
    recv: Option<(&mut [u8], &[Part])>,
    datatype: Datatype,
) -> Result<bool, Error> {
    let operation = if recv.is_some() {
        "gather_varcount_into_root"
    } else {
        "gather_varcount_into"
    };
    let wanted = select::gather_in_shared_memory();
    // Lengths differ between ranks: the set-up has none to agree on.
    let Some(area) = usable_area(comm, operation, wanted, datatype, 0)? else {
        return Ok(false);
    };
    area.gather_varcount(comm, root, send, recv)
        .map_err(|cause| Error::new(operation, cause))?;
    Ok(true)
}

/// Runs a blocking scatter of parts of any length from `root` (a rank of `comm`) through the
/// area; `send` and its parts (offset, length in packed bytes) are the root's and only the
/// root's, checked against `recv` by the caller; `false` if it must go by messages instead.
pub(crate) fn try_scatter_varcount(
    comm: &CommData,
    root: u32,
    send: Option<(&[u8], &[Part])>,
    recv: &mut [u8],
    datatype: Datatype,
) -> Result<bool, Error> {
    let operation = if send.is_some() {
        "scatter_varcount_into_root"
    } else {
        "scatter_varcount_into"
    };
    let wanted = select::scatter_in_shared_memory();
    // Lengths differ between ranks: the set-up has none to agree on.
    let Some(area) = usable_area(comm, operation, wanted, datatype, 0)? else {
        return Ok(false);
    };
    area.scatter_varcount(comm, root, send, recv)
        .map_err(|cause| Error::new(operation, cause))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_no_room_in_the_broadcast_makes_no_file() {
        // Before, rank 0 made the file and then found the name too long to share: the
        // file stayed in /dev/shm after the job.
        let name = format!(
            "mpirt-test-{}-{}",
            std::process::id(),
            "x".repeat(NAME_BYTES)
        );
        assert!(create(&name, area_bytes(2), 1).is_none());
        assert!(
            SharedMapping::remove(&name).is_err(),
            "{name} was left behind"
        );
        let name = format!("mpirt-test-{}-fits", std::process::id());
        assert!(create(&name, area_bytes(2), 1).is_some());
        SharedMapping::remove(&name).unwrap();
    }
}
