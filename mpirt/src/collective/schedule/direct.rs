//! Immediate collectives whose transfers all go in one round, posted as the call starts (every
//! short collective on 2 ranks, and the ranks of others whose whole part is one round: a
//! broadcast's root, a tree's leaves). Nothing but the transport moves those transfers on, so
//! such a call builds no execution and registers no progress hook: its request holds the
//! transfers in flight and the scratch its receives land on (a reduction's incoming operand),
//! and runs its copies and reductions once its owner finds the transfers done.
//!
//! Ranks whose lengths chose different algorithms (the module above's notes) send marks that
//! a direct call cannot act on: where a receive names another algorithm than this rank's, the
//! call hands over to an execution past that round ([`Execution::resume`]), which goes on as
//! those notes say (following the sender's algorithm, or on at a checkpoint).

use std::mem::{size_of, MaybeUninit};
use std::ptr::{addr_of_mut, NonNull};
use std::rc::Rc;

use pml::Handle;

use super::{
    disagreement, post, run_locals, settle, take_back, Aligned, Buffers, Cause, Checked, CommData,
    Datatype, Execution, InFlight, Noted, Plan, Posted, Reduction, Region, Regions,
};

/// The most transfers a direct call's round holds (a linear all-to-all's on 5 ranks).
const TRANSFERS: usize = 8;

/// The scratch a direct call's receives may land on: a reduction's incoming operand of up to
/// 256 bytes, or a reduce-scatter's whole vector of that, on 2 ranks.
const SCRATCH_WORDS: usize = 512 / size_of::<Aligned>();

/// Memory for a direct call's scratch buffers, one after another, each at a multiple of an
/// [`Aligned`]; uninitialized until its receives (or the plan's copies) write it.
type Scratch = [MaybeUninit<Aligned>; SCRATCH_WORDS];

/// The memory a direct call's request lends it (its slot's, `collective::request`): it
/// stays put while the request moves, and holds the call's transfers in flight and the
/// scratch its receives land on. Uninitialized until the call starts: a call's start writes
/// the length of its list of transfers alone, so that a call costs no copy of it.
pub(crate) struct Room {
    transfers: Transfers,
    scratch: Scratch,
}

impl Plan {
    /// The one round of transfers of a plan a direct call may run: the rounds before it hold
    /// copies alone (run as the call starts), those after it copies and reductions alone, and
    /// the plan learns nothing from lengths, starts no scratch with bytes, and goes on from
    /// that round as it is wherever every rank runs this rank's algorithm (a checkpoint adds a
    /// release's rounds where the long algorithm is this rank's own).
    pub(super) fn direct_round(&self) -> Option<usize> {
        if self.learn.is_some() || !self.initial.is_empty() {
            return None;
        }
        let words: usize = self.scratch.iter().map(|&len| words(len)).sum();
        let releases = self.checkpoint.is_some_and(|checkpoint| {
            let own = self.marked.map_or(0, |m| m.bit);
            checkpoint.release.is_some_and(|r| r.long.bit & own != 0)
        });
        if words > SCRATCH_WORDS || releases {
            return None;
        }
        let mut with_transfers = (0_usize..)
            .zip(&self.rounds)
            .filter(|(_, r)| !r.transfers.is_empty());
        let (index, round) = with_transfers.next()?;
        let one = with_transfers.next().is_none();
        (one && round.transfers.len() <= TRANSFERS && round.lengths.is_empty()).then_some(index)
    }
}

/// [`Aligned`] words a scratch buffer of `len` bytes takes.
fn words(len: usize) -> usize {
    len.div_ceil(size_of::<Aligned>())
}

/// A direct call's transfers in flight: a round's, held in place.
struct Transfers {
    list: [MaybeUninit<InFlight>; TRANSFERS],
    /// The first `len` of `list` are initialized.
    len: usize,
}

impl Posted for Transfers {
    fn push(&mut self, transfer: InFlight) {
        // A direct call's round has at most `TRANSFERS` (`Plan::direct_round`).
        self.list[self.len].write(transfer);
        self.len += 1;
    }
    fn last(&self) -> Option<InFlight> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }
    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }
    fn get(&self, i: usize) -> Option<InFlight> {
        // SAFETY: the first `len` are initialized.
        (i < self.len).then(|| unsafe { self.list[i].assume_init() })
    }
    fn swap_remove(&mut self, i: usize) {
        assert!(i < self.len, "a transfer in flight");
        self.len -= 1;
        self.list.swap(i, self.len);
    }
    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What a direct call's step came to.
pub(crate) enum Stepped {
    /// Transfers are still in flight.
    Pending,
    /// The call is over, its result in the receive buffer.
    Done,
    /// A receive named another algorithm: [`Direct::hand_over`] makes the call's execution.
    HandOver,
}

/// An immediate collective's one round of transfers in flight (the module's notes).
pub(crate) struct Direct<'a> {
    comm: CommData,
    tag: i32,
    plan: Rc<Plan>,
    /// The plan's round of transfers.
    round: usize,
    buffers: Buffers,
    datatype: Datatype,
    op: Option<Reduction<'a>>,
    noted: Noted,
    /// Where the transfers in flight and the plan's scratch buffers lie, valid as long as
    /// this call; its list of transfers is initialized once the call starts.
    room: NonNull<Room>,
}

impl<'a> Direct<'a> {
    /// Whether a direct call runs `plan` over `buffers`: its plan has one round of transfers
    /// (`Plan::direct_round`), the call moves the caller's bytes as they are (no packing, no
    /// staging of values to check) on a communicator that takes collectives, and it reduces by
    /// a built-in operation or none. A user-defined operation is the program's code, which
    /// MPI's progress runs while the rank waits in any call (Open MPI's libnbc as well); a
    /// direct call runs its reduction only when its own request is tested or waited on, so a
    /// program whose other calls wait on what that code does would wait for ever.
    pub fn serves(
        plan: &Checked,
        buffers: &Buffers,
        (datatype, op): (Datatype, Option<&Reduction<'_>>),
        comm: &CommData,
    ) -> bool {
        plan.direct.is_some()
            && buffers.send_layout.is_none()
            && buffers.recv_layout.is_none()
            && !datatype.needs_check()
            && op.is_none_or(|op| matches!(op, Reduction::Builtin(_)))
            && comm.collectives_allowed().is_ok()
    }

    /// The call of `plan` over `buffers` that [`serves`](Self::serves) says may go direct,
    /// in `room`; nothing posted yet.
    ///
    /// # Safety
    /// As for `Execution::new`; `room` stays valid, and untouched but through this call,
    /// until it is over (or dropped).
    pub unsafe fn new(
        comm: &CommData,
        plan: Checked,
        buffers: Buffers,
        (datatype, op): (Datatype, Option<Reduction<'a>>),
        room: NonNull<Room>,
    ) -> Direct<'a> {
        let commutative = op.as_ref().is_none_or(|op| op.get().is_commutative());
        // What makes the pointers valid: the plan was checked for buffers of these lengths.
        assert!(
            plan.serves(&buffers, commutative),
            "collective schedule: a plan checked for other buffers"
        );
        let round = plan.direct.expect("a plan a direct call serves");
        let noted = Noted::of(&plan.plan);
        Direct {
            comm: comm.clone(),
            tag: comm.next_tag(),
            plan: plan.plan,
            round,
            buffers,
            datatype,
            op,
            noted,
            room,
        }
    }

    /// Runs the copies of the rounds before the plan's round of transfers, and posts it;
    /// then as [`step`](Self::step) without blocking. Made once the call is at the address
    /// it keeps until it is over.
    pub fn start(&mut self) -> Result<Stepped, Cause> {
        // SAFETY: the room is valid and this call's alone (`new`'s contract); its list of
        // transfers is initialized here, before any use.
        unsafe { addr_of_mut!((*self.room.as_ptr()).transfers.len).write(0) };
        let places = Places::of(&self.buffers, &self.plan, self.room);
        for round in &self.plan.rounds[..self.round] {
            // Copies alone, of the caller's bytes: nothing to spoil yet.
            run_locals(round, self.datatype, self.op.as_ref(), &places, false);
        }
        let round = &self.plan.rounds[self.round];
        // SAFETY: the caller's buffers stay valid until the call is over (`new`'s contract),
        // and so does the scratch; the call waits for its transfers, or cancels and waits for
        // them when dropped.
        let call = (&self.comm, self.tag, &self.noted);
        let posted = unsafe { post(round, call, &places, self.posted()) };
        if let Err(cause) = posted {
            take_back(self.posted());
            return Err(cause);
        }
        self.step(false)
    }

    /// Takes the outcomes of the transfers that finished (all of them with `block`, else
    /// after a round of progress where any is left: the round that, as the call starts,
    /// often finds a peer's message already there), and where none is left, ends the call:
    /// its copies and reductions, or its first disagreement, or the hand-over to an execution
    /// where a receive named another algorithm. An error takes back what is still in flight.
    pub fn step(&mut self, block: bool) -> Result<Stepped, Cause> {
        // SAFETY: as in `posted`; this use ends with the settling.
        let posted = unsafe { transfers(self.room) };
        let (plan, round, noted) = (&self.plan, self.round, &mut self.noted);
        let settled = settle(posted, block, |done, recv| {
            let (cause, mark, _) = disagreement(done, recv)?;
            noted.note(plan, round, recv, (cause, mark));
            Ok(())
        });
        match settled {
            Err(cause) => {
                take_back(self.posted());
                Err(cause)
            }
            Ok(false) => Ok(Stepped::Pending),
            Ok(true) if self.noted.heard_another() => Ok(Stepped::HandOver),
            Ok(true) => self.finish().map(|()| Stepped::Done),
        }
    }

    /// The rounds' copies and reductions from the round of transfers on, once its receives
    /// brought what they should; its first disagreement instead.
    fn finish(&mut self) -> Result<(), Cause> {
        if let Some(cause) = self.noted.spoiled.take() {
            return Err(cause);
        }
        let places = Places::of(&self.buffers, &self.plan, self.room);
        for round in &self.plan.rounds[self.round..] {
            if let Some(cause) = run_locals(round, self.datatype, self.op.as_ref(), &places, false)
            {
                return Err(cause);
            }
        }
        Ok(())
    }

    /// The execution that goes on from the call's round of transfers, all done, where a
    /// receive named another algorithm ([`Stepped::HandOver`]).
    pub fn hand_over(self) -> Execution<'a> {
        let direct = std::mem::ManuallyDrop::new(self);
        // SAFETY: each field is read once, from a value never dropped (nothing is in flight
        // to take back); the execution runs the same plan over the same buffers, which stay
        // valid as long (`new`'s contract), the plan checked for them there, and past the
        // round this call ran (its copies before it run).
        unsafe {
            let comm = std::ptr::read(&direct.comm);
            let plan = std::ptr::read(&direct.plan);
            let buffers = std::ptr::read(&direct.buffers);
            let op = std::ptr::read(&direct.op);
            let noted = std::ptr::read(&direct.noted);
            let (tag, round, datatype) = (direct.tag, direct.round, direct.datatype);
            debug_assert!(direct.posted().is_empty());
            Execution::resume(comm, tag, plan, buffers, (datatype, op), round, noted)
        }
    }

    /// The handles of the transfers still in flight, for a wait on several requests.
    pub fn awaited(&self, into: &mut Vec<Handle>) {
        let posted = self.posted();
        into.extend((0..posted.len).filter_map(|i| posted.get(i).map(|t| t.0)));
    }

    /// The transfers in flight, in the room.
    #[allow(clippy::mut_from_ref)] // The room is this call's alone (`new`'s contract).
    fn posted(&self) -> &mut Transfers {
        // SAFETY: the room is valid and this call's alone (`new`'s contract), its list
        // initialized as the call started (`start`, before any other use); each use of it
        // ends before the next begins.
        unsafe { transfers(self.room) }
    }
}

/// The list of transfers in `room`.
///
/// # Safety
/// `room` is valid, its list initialized, and no other reference to the list is live while
/// the one returned is.
unsafe fn transfers<'r>(room: NonNull<Room>) -> &'r mut Transfers {
    // SAFETY: as the caller promises.
    unsafe { &mut *addr_of_mut!((*room.as_ptr()).transfers) }
}

/// Where a direct call's regions lie: the caller's buffers, and its scratch buffers one after
/// another in its scratch.
struct Places<'p> {
    buffers: &'p Buffers,
    /// The scratch buffers' lengths.
    lens: &'p [usize],
    scratch: NonNull<Scratch>,
}

impl<'p> Places<'p> {
    fn of(buffers: &'p Buffers, plan: &'p Plan, room: NonNull<Room>) -> Places<'p> {
        // SAFETY: the room is valid (`Direct::new`'s contract): a place, not a read.
        let scratch = unsafe { NonNull::new_unchecked(addr_of_mut!((*room.as_ptr()).scratch)) };
        Places {
            buffers,
            lens: &plan.scratch,
            scratch,
        }
    }
}

impl Regions for Places<'_> {
    fn region(&self, region: Region) -> (*mut u8, usize) {
        match region {
            Region::Send => (self.buffers.send.cast_mut(), self.buffers.send_len),
            Region::Recv => (self.buffers.recv, self.buffers.recv_len),
            Region::Scratch(i) => {
                let at: usize = self.lens[..i].iter().map(|&len| words(len)).sum();
                // SAFETY: the buffers before this one take `at` words of the scratch, which
                // holds them all (`Plan::direct_round`).
                let base = unsafe { self.scratch.cast::<Aligned>().as_ptr().add(at) };
                (base.cast(), self.lens[i])
            }
        }
    }
}

impl Drop for Direct<'_> {
    fn drop(&mut self) {
        // Only a finished call is dropped by the API; anything else in flight is taken back
        // before its buffers go.
        take_back(self.posted());
    }
}

#[cfg(test)]
mod tests {
    use crate::collective::algorithms::Ranks;
    use crate::collective::build;

    use super::super::Plan;

    /// Each short collective's plan on `ranks`, by name.
    fn short_plans(ranks: Ranks) -> Vec<(&'static str, Plan)> {
        let n = ranks.size as usize;
        let blocks: Vec<(usize, usize)> = (0..n).map(|r| (r * 8, 8)).collect();
        vec![
            ("barrier", build::barrier(ranks)),
            (
                "broadcast",
                build::broadcast(ranks, 0, 256, 4).expect("a plan"),
            ),
            (
                "reduce",
                build::reduce(ranks, 0, 256, 4, true).expect("a plan"),
            ),
            (
                "all_reduce",
                build::all_reduce(ranks, 256, 4, true).expect("a plan"),
            ),
            ("all_gather", build::all_gather(ranks, 8).expect("a plan")),
            (
                "all_to_all",
                build::all_to_all(ranks, &blocks, &blocks, 8, None, ranks.size, false)
                    .expect("a plan"),
            ),
            ("gather", build::gather(ranks, 0, 8, None).expect("a plan")),
            (
                "scatter",
                build::scatter(ranks, 0, 8, None).expect("a plan"),
            ),
            (
                "reduce_scatter",
                build::reduce_scatter(ranks, 8 * n, &blocks, true, None).expect("a plan"),
            ),
        ]
    }

    /// On 2 ranks every short collective's part is one round of transfers, which a direct
    /// call runs; so is a linear broadcast's and all-to-all's on 4, every rank's.
    #[test]
    fn every_short_collective_on_two_ranks_goes_direct() {
        for rank in 0..2 {
            for (name, plan) in short_plans(Ranks { rank, size: 2 }) {
                assert!(plan.direct_round().is_some(), "{name}, rank {rank} of 2");
            }
        }
        for rank in 0..4 {
            for (name, plan) in short_plans(Ranks { rank, size: 4 }) {
                let direct = plan.direct_round().is_some();
                match name {
                    "broadcast" | "all_to_all" => assert!(direct, "{name}, rank {rank} of 4"),
                    "barrier" | "all_reduce" | "all_gather" | "reduce_scatter" => {
                        assert!(!direct, "{name}, rank {rank} of 4: rounds after rounds")
                    }
                    _ => {}
                }
            }
        }
    }

    /// Plans a direct call cannot hold go by execution: a reduction's operand longer than
    /// its scratch, and the long reduction's release rounds, which it adds even where every
    /// rank runs it.
    #[test]
    fn plans_past_a_direct_calls_reach_go_by_execution() {
        let ranks = Ranks { rank: 0, size: 2 };
        let long_operand = build::all_reduce(ranks, 1024, 4, true).expect("a plan");
        assert!(long_operand.direct_round().is_none());
        let released = build::reduce(ranks, 0, (64 << 10) + 8, 4, true).expect("a plan");
        assert!(released.direct_round().is_none());
    }
}
