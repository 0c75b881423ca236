//! Communicators and the processes in them (rsmpi's `topology`), and the Cartesian
//! topologies made over them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use pml::Pml;

use crate::attribute::{Attributes, CommAttribute};
use crate::collective::{self, AreaSlot, Plans};
use crate::context::{self, ContextLease, Proposal};
use crate::datatype::{pack, Buffer, BufferMut, UncommittedDatatype};
use crate::environment::{self, with_engine};
use crate::error::{or_fatal, Cause, Error};
pub use crate::group::{Group, GroupRelation, SystemGroup, UserGroup};
use crate::point_to_point::{Count, Tag};
use crate::stall;

mod cartesian;
mod create_group;
mod grid;
pub(crate) mod inter;
pub(crate) mod spawn;

pub use cartesian::{
    dims_create, try_dims_create, CartesianCommunicator, CartesianLayout,
    DistributedGraphCommunicator, GraphCommunicator, IntoTopology, Topology,
};
pub(crate) use grid::Grid;
pub use inter::{InterCommunicator, MergeOrder};

/// The communicator and group traits: `use mpirt::topology::traits::*;`.
pub mod traits {
    pub use super::{AnyCommunicator, AsCommunicator, Communicator, Group};
}
pub(crate) use spawn::{disconnect_parent, join_parents};

/// A process's rank in a communicator.
pub type Rank = i32;

/// What every communicator holds: its context (messages in different contexts never match),
/// this process's rank and the communicator's size, and what its handles share.
#[derive(Clone, Debug)]
#[doc(hidden)]
pub struct CommData {
    pub(crate) context: u32,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    shared: Rc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The world rank of each rank of the communicator.
    group: Vec<u32>,
    /// Collectives started on the communicator: each takes the next tag (see `next_tag`).
    collectives: Cell<u32>,
    /// Blocking collective calls entered, for the stall report (the registry's count; a
    /// view's and an inter-communicator's are their own, never reported).
    entered: stall::EnteredCount,
    /// The shared-memory area of short all-reductions, once the first one set it up.
    area: AreaSlot,
    /// The plans of its collectives' last shapes, for their next calls.
    plans: Plans,
    /// `MPI_Comm_set_name`'s name, which every handle of the communicator sees.
    name: RefCell<String>,
    /// The Cartesian topology, on a communicator made with one (or a duplicate of one).
    grid: Option<Grid>,
    /// The other group and this group's own communicator, on an inter-communicator.
    inter: Option<inter::Sides>,
    /// `MPI_Comm_set_attr`'s values, which every handle of the communicator sees.
    attributes: Attributes,
    /// Whether this is one thread's view of a communicator that threads share
    /// (`crate::threads::SharedCommunicator::local`), which takes point-to-point calls only.
    view: bool,
    /// The context id, given back when the last handle or view drops; `None` for the
    /// world's and self's, which are fixed.
    lease: Option<Arc<ContextLease>>,
}

/// Where a communicator's context id comes from.
enum Context {
    World,
    OfSelf,
    Leased(ContextLease),
}

/// Collective tags count down from here to `pml::MIN_RUNTIME_TAG`, the lowest tag every PML
/// carries (UCX's has 24 bits for it), a step of one mark's room apart: each is the key of
/// the marked tags its call's messages carry (`pml::match_key`; the mark names the sender's
/// algorithm). -1 to -16 stay free for other runtime traffic.
const FIRST_COLLECTIVE_TAG: i32 = pml::MARKED_TAGS - MARK_ROOM + 1;
const MARK_ROOM: i32 = 1 << pml::MARK_BITS;
/// How many tags collectives take turns on. Each communicator's counter wraps here rather
/// than at `u32::MAX`, so the tags wrap without a jump: a tag comes back only after this
/// many later collectives on the communicator, far more than can be in flight at once.
const COLLECTIVE_TAGS: u32 = ((FIRST_COLLECTIVE_TAG - pml::MIN_RUNTIME_TAG) / MARK_ROOM + 1) as u32;
const _: () = assert!(
    pml::MIN_RUNTIME_TAG < FIRST_COLLECTIVE_TAG
        && pml::match_key(FIRST_COLLECTIVE_TAG) == FIRST_COLLECTIVE_TAG
        && pml::MIN_RUNTIME_TAG % MARK_ROOM == 0
);

impl CommData {
    fn new(rank: u32, group: Vec<u32>, context: Context, grid: Option<Grid>) -> CommData {
        let (id, name, lease) = match context {
            Context::World => (context::WORLD, "MPI_COMM_WORLD", None),
            Context::OfSelf => (context::SELF, "MPI_COMM_SELF", None),
            // MPI names a new communicator "": names are not inherited.
            Context::Leased(lease) => (lease.id(), "", Some(Arc::new(lease))),
        };
        CommData::intra(id, rank, group, name, grid, lease, false)
    }

    /// An intra-communicator's handle on `context`, with fresh shared state; noted for the
    /// stall report unless it is a thread's view (of a communicator noted already).
    fn intra(
        context: u32,
        rank: u32,
        group: Vec<u32>,
        name: &str,
        grid: Option<Grid>,
        lease: Option<Arc<ContextLease>>,
        view: bool,
    ) -> CommData {
        let entered = if view {
            stall::EnteredCount::default()
        } else {
            stall::remember_comm(context, name, &group)
        };
        CommData {
            context,
            rank,
            size: group.len() as u32,
            shared: Rc::new(Shared {
                group,
                collectives: Cell::new(0),
                entered,
                area: AreaSlot::default(),
                plans: Plans::default(),
                name: RefCell::new(name.to_string()),
                grid,
                inter: None,
                attributes: Attributes::default(),
                view,
                lease,
            }),
        }
    }

    /// The inter-communicator on the context `lease` holds between this process's group
    /// (`local`, an intra-communicator of its own) and `remote`, world ranks in rank order;
    /// `first_on_tie` as `inter::Sides` has it.
    fn inter(
        local: CommData,
        remote: Vec<u32>,
        first_on_tie: Option<bool>,
        lease: ContextLease,
    ) -> CommData {
        CommData {
            context: lease.id(),
            rank: local.rank,
            size: local.size,
            shared: Rc::new(Shared {
                group: local.shared.group.clone(),
                collectives: Cell::new(0),
                entered: stall::EnteredCount::default(),
                area: AreaSlot::default(),
                plans: Plans::default(),
                name: RefCell::new(String::new()),
                grid: None,
                attributes: Attributes::default(),
                inter: Some(inter::Sides {
                    remote,
                    local,
                    first_on_tie,
                }),
                view: false,
                lease: Some(Arc::new(lease)),
            }),
        }
    }

    /// The communicator of `members` (world ranks of this one's, in rank order, this
    /// process among them) on `context`, which the caller derives from this communicator's
    /// own (no agreement: every member derives the same), without a lease of its own: it
    /// must not outlive this communicator, whose id its id is made of.
    pub(crate) fn part(&self, members: Vec<u32>, context: u32) -> CommData {
        let me = self.world_rank(self.rank);
        let rank = members
            .iter()
            .position(|&m| m == me)
            .expect("this process is among the members") as u32;
        CommData::intra(context, rank, members, "", None, None, false)
    }

    /// The world communicator of a job of `size` ranks, seen from `rank`.
    pub(crate) fn world(rank: u32, size: u32) -> CommData {
        CommData::new(rank, (0..size).collect(), Context::World, None)
    }

    /// `MPI_COMM_SELF` of the process at world rank `world_rank`.
    pub(crate) fn of_self(world_rank: u32) -> CommData {
        CommData::new(0, vec![world_rank], Context::OfSelf, None)
    }

    /// The world rank of `rank`, which the caller has checked is in range.
    #[inline]
    pub(crate) fn world_rank(&self, rank: u32) -> u32 {
        self.shared.group[rank as usize]
    }

    /// The other group and this group's own communicator, on an inter-communicator.
    #[inline]
    pub(crate) fn sides(&self) -> Option<&inter::Sides> {
        self.shared.inter.as_ref()
    }

    #[inline]
    pub(crate) fn is_inter(&self) -> bool {
        self.shared.inter.is_some()
    }

    /// How many processes a rank of point-to-point names: the size, or an inter-communicator's
    /// remote size.
    #[inline]
    pub(crate) fn target_size(&self) -> u32 {
        self.sides().map_or(self.size, |s| s.remote.len() as u32)
    }

    /// `rank` as the destination or source of point-to-point: a rank of the communicator, or
    /// of an inter-communicator's remote group.
    #[inline]
    pub(crate) fn check_target(&self, rank: Rank) -> Result<u32, Cause> {
        self.target(rank).map(|_| rank as u32)
    }

    /// The world rank of the process `rank` names in point-to-point (see `check_target`), or
    /// the error naming the rank and the size it is out of.
    #[inline]
    pub(crate) fn target(&self, rank: Rank) -> Result<u32, Cause> {
        // One lookup, bounds and all, in the group that point-to-point names: every send pays
        // for this, and no more than for an intra-communicator's rank check and lookup.
        let targets = match &self.shared.inter {
            None => &self.shared.group,
            Some(sides) => &sides.remote,
        };
        match usize::try_from(rank).ok().and_then(|r| targets.get(r)) {
            Some(&world) => Ok(world),
            None => Err(self.target_out_of_range(rank)),
        }
    }

    #[cold]
    fn target_out_of_range(&self, rank: Rank) -> Cause {
        match self.sides() {
            None => Cause::RankOutOfRange {
                rank,
                size: self.size as Rank,
            },
            Some(sides) => Cause::RemoteRankOutOfRange {
                rank,
                remote_size: sides.remote.len() as Rank,
            },
        }
    }

    /// The world rank of `rank` (checked by `check_target`) as point-to-point names it.
    #[inline]
    pub(crate) fn target_world_rank(&self, rank: u32) -> u32 {
        match self.sides() {
            None => self.world_rank(rank),
            Some(sides) => sides.remote[rank as usize],
        }
    }

    #[inline]
    pub(crate) fn check_rank(&self, rank: Rank) -> Result<u32, Cause> {
        if rank >= 0 && (rank as u32) < self.size {
            Ok(rank as u32)
        } else {
            Err(Cause::RankOutOfRange {
                rank,
                size: self.size as Rank,
            })
        }
    }

    /// One thread's view of the communicator on `context` whose members are `group` (world
    /// ranks in rank order), `rank` among them, holding `lease`: point-to-point only, as its
    /// collective sequence and area are the communicator's own (see `crate::threads`).
    pub(crate) fn view(
        context: u32,
        rank: u32,
        group: Vec<u32>,
        lease: Option<Arc<ContextLease>>,
    ) -> CommData {
        CommData::intra(context, rank, group, "", None, lease, true)
    }

    /// The members' world ranks, in rank order, and the lease on the context id that a view
    /// of this communicator holds (see `view`).
    pub(crate) fn members_and_lease(&self) -> (&[u32], Option<Arc<ContextLease>>) {
        (&self.shared.group, self.shared.lease.clone())
    }

    /// Fails where the communicator takes no collectives: a thread's view.
    pub(crate) fn collectives_allowed(&self) -> Result<(), Cause> {
        if self.shared.view {
            Err(Cause::CollectiveOnView)
        } else {
            Ok(())
        }
    }

    /// Fails, saying why, unless this handle is the communicator's only one and holds
    /// nothing another handle on its thread may share: then it may move to another thread
    /// (`crate::threads::SendableCommunicator`).
    pub(crate) fn check_sole_handle(&self) -> Result<(), Cause> {
        let why = if Rc::strong_count(&self.shared) > 1 || Rc::weak_count(&self.shared) > 0 {
            "it has other handles on this thread (clones, the universe's own world, or an \
             immediate collective in flight): duplicate it and move the duplicate"
        } else if !self.shared.attributes.is_empty() {
            "it has attributes cached, whose values may be shared with this thread"
        } else if !self.shared.area.is_unshared() {
            "a collective in flight shares its shared-memory area"
        } else if self.shared.inter.is_some() || self.shared.view {
            "it is an inter-communicator or a thread's view of a shared communicator"
        } else {
            return Ok(());
        };
        Err(Cause::NotSoleHandle(why))
    }

    /// The count of blocking collective calls entered, for the stall report.
    pub(crate) fn entered_count(&self) -> &stall::EnteredCount {
        &self.shared.entered
    }

    pub(crate) fn area_slot(&self) -> &AreaSlot {
        &self.shared.area
    }

    pub(crate) fn plans(&self) -> &Plans {
        &self.shared.plans
    }

    pub(crate) fn grid(&self) -> Option<&Grid> {
        self.shared.grid.as_ref()
    }

    /// The tag of the next collective on this communicator. Every rank starts the
    /// communicator's collectives in the same order, so they agree on each one's tag, and
    /// messages of two collectives in flight at once can never match each other's receives.
    pub(crate) fn next_tag(&self) -> i32 {
        let n = self.shared.collectives.get();
        self.shared.collectives.set((n + 1) % COLLECTIVE_TAGS);
        FIRST_COLLECTIVE_TAG - n as i32 * MARK_ROOM
    }

    /// The communicator `made` describes (its members, world ranks in rank order, or `None`
    /// if this process is not one of them, and its topology), on a context agreed over this
    /// one, or `None` if this process is not a member. `made` is this process's reading of
    /// its arguments: when it failed, the call fails here with its cause and on every other
    /// member through the agreement, as it does when their `fingerprint`s differ. Collective
    /// over this communicator.
    fn derive(
        &self,
        fingerprint: u64,
        made: Result<(Option<Vec<u32>>, Option<Grid>), Cause>,
    ) -> Result<Option<SimpleCommunicator>, Cause> {
        let _creating = context::creating();
        let proposal = Proposal {
            valid: made.is_ok(),
            fingerprint,
        };
        let agreed = context::agree(self, proposal);
        let (members, grid) = made?;
        let id = agreed.map_err(|e| e.cause().clone())?;
        Ok(members.and_then(|group| self.made_of(group, context::lease(id), grid)))
    }

    /// The communicator of `group` on the context `lease` holds, or `None` if this process
    /// is not in `group`.
    fn made_of(
        &self,
        group: Vec<u32>,
        lease: ContextLease,
        grid: Option<Grid>,
    ) -> Option<SimpleCommunicator> {
        let me = self.world_rank(self.rank);
        let rank = group.iter().position(|&m| m == me)? as u32;
        Some(SimpleCommunicator::new(CommData::new(
            rank,
            group,
            Context::Leased(lease),
            grid,
        )))
    }

    /// Splits by color, ordering each part by key then by rank here; every part gets the
    /// topology `grid` says, where it and `fingerprint` are as for `derive`.
    fn split(
        &self,
        color: Color,
        key: Key,
        fingerprint: u64,
        grid: Result<Option<Grid>, Cause>,
    ) -> Result<Option<SimpleCommunicator>, Cause> {
        let mine = [color.0.is_some() as i32, color.0.unwrap_or(0), key];
        let mut all = vec![[0i32; 3]; self.size as usize];
        collective::all_gather_on(self, &mine, &mut all[..]).map_err(|e| e.cause().clone())?;
        let members = color.0.map(|_| {
            let mut same: Vec<(i32, u32)> = (0..self.size)
                .filter(|&r| all[r as usize][..2] == mine[..2])
                .map(|r| (all[r as usize][2], r))
                .collect();
            same.sort_unstable();
            same.into_iter().map(|(_, r)| self.world_rank(r)).collect()
        });
        self.derive(fingerprint, grid.map(|grid| (members, grid)))
    }

    /// Checks that every member of `group` is in this communicator.
    fn check_subgroup(&self, group: &[u32]) -> Result<(), Cause> {
        match group.iter().find(|m| !self.shared.group.contains(m)) {
            Some(&outsider) => Err(Cause::NotInCommunicator {
                world_rank: outsider as Rank,
            }),
            None => Ok(()),
        }
    }
}

/// The color of a split: processes of one color form one new communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Color(Option<i32>);

impl Color {
    /// The process joins no new communicator (`MPI_UNDEFINED`).
    pub fn undefined() -> Color {
        Color(None)
    }

    pub fn with_value(value: i32) -> Color {
        Color(Some(value))
    }
}

/// The ordering key of a split.
pub type Key = i32;

/// Longest host name the shared-memory split compares (Linux's `HOST_NAME_MAX`).
pub(crate) const HOST_NAME_MAX: usize = 64;

/// This process's host name in a fixed-size record, as ranks trade them to find who shares
/// their host (the shared-memory split, the collectives' hosts).
pub(crate) fn host_record() -> [u8; HOST_NAME_MAX] {
    let mut mine = [0u8; HOST_NAME_MAX];
    let name = pml::transport::hostname();
    let len = name.len().min(HOST_NAME_MAX);
    mine[..len].copy_from_slice(&name.as_bytes()[..len]);
    mine
}

/// How two communicators compare (`MPI_Comm_compare`), from the strongest relation to the
/// weakest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommunicatorRelation {
    /// Handles of one communicator.
    Identical,
    /// The same processes in the same order, with different contexts (a duplicate).
    Congruent,
    /// The same processes in another order.
    Similar,
    Unequal,
}

/// The weaker of two relations: an inter-communicator's, from its two groups'.
fn weaker(a: CommunicatorRelation, b: CommunicatorRelation) -> CommunicatorRelation {
    let strength = |r| match r {
        CommunicatorRelation::Identical => 3,
        CommunicatorRelation::Congruent => 2,
        CommunicatorRelation::Similar => 1,
        CommunicatorRelation::Unequal => 0,
    };
    match strength(a) <= strength(b) {
        true => a,
        false => b,
    }
}

/// A communicator: a group of processes and a context for their messages (`MPI_Comm`).
///
/// Handles clone cheaply; every clone is the same communicator (it compares
/// [`Identical`](CommunicatorRelation::Identical), shares the name and the collective
/// sequence and the attributes).
#[derive(Clone, Debug)]
pub struct SimpleCommunicator {
    data: CommData,
}

impl SimpleCommunicator {
    pub(crate) fn new(data: CommData) -> SimpleCommunicator {
        SimpleCommunicator { data }
    }

    pub(crate) fn into_data(self) -> CommData {
        self.data
    }

    /// The communicator of every rank in the job (`MPI_COMM_WORLD`), as
    /// [`Universe::world`](crate::Universe::world) gives it; a fatal error before
    /// [`initialize`](crate::initialize).
    pub fn world() -> SimpleCommunicator {
        or_fatal(environment::predefined(|world, _| world.clone()).map(SimpleCommunicator::new))
    }

    /// The communicator of this process alone (`MPI_COMM_SELF`).
    pub fn self_comm() -> SimpleCommunicator {
        or_fatal(environment::predefined(|_, own| own.clone()).map(SimpleCommunicator::new))
    }

    /// The topology the communicator was made with (`MPI_Topo_test`).
    pub fn topology(&self) -> Topology {
        match self.data.grid() {
            Some(_) => Topology::Cartesian,
            None => Topology::Undefined,
        }
    }

    /// The communicator as the type of its topology.
    pub fn into_topology(self) -> IntoTopology {
        match self.data.grid() {
            Some(_) => IntoTopology::Cartesian(CartesianCommunicator::new(self)),
            None => IntoTopology::Undefined(self),
        }
    }
}

/// The operations of every communicator. Implemented by [`SimpleCommunicator`] and
/// [`CartesianCommunicator`]; usable as a trait object (`&dyn Communicator`), which the
/// collectives take too.
pub trait Communicator {
    #[doc(hidden)]
    fn data(&self) -> &CommData;

    /// Whether this handle holds its own share of the communicator (a clone of the shared
    /// state), rather than borrowing another handle's as a [`Process`] does: only then does
    /// the shared state's count of holders count this handle, which
    /// [`set_attr`](AnyCommunicator::set_attr) relies on to free a replaced value.
    #[doc(hidden)]
    fn is_owning_handle(&self) -> bool {
        false
    }

    /// This process's rank in the communicator.
    fn rank(&self) -> Rank {
        self.data().rank as Rank
    }

    /// Number of processes in the communicator.
    fn size(&self) -> Rank {
        self.data().size as Rank
    }

    /// The number of processes a rank names: the size, or an inter-communicator's remote
    /// size (rsmpi's).
    fn target_size(&self) -> Rank {
        self.data().target_size() as Rank
    }

    /// Whether this is an inter-communicator (`MPI_Comm_test_inter`).
    fn test_inter(&self) -> bool {
        self.data().is_inter()
    }

    /// The process at `rank` (of the remote group, on an inter-communicator); a rank outside
    /// the communicator is a fatal error.
    fn process_at_rank(&self, rank: Rank) -> Process<'_> {
        or_fatal(self.try_process_at_rank(rank))
    }

    /// The process at `rank`, or an error naming the rank and the size.
    fn try_process_at_rank(&self, rank: Rank) -> Result<Process<'_>, Error> {
        let data = self.data();
        data.check_target(rank)
            .map(|_| Process {
                comm: self.any_process(),
                rank,
            })
            .map_err(|cause| Error::new(format!("process_at_rank({rank})"), cause))
    }

    /// Any process of the communicator (of the remote group, on an inter-communicator), as the
    /// source of a wildcard receive.
    fn any_process(&self) -> AnyProcess<'_> {
        AnyProcess { comm: self.data() }
    }

    /// Bytes `count` elements of `datatype` take packed (`MPI_Pack_size`).
    fn pack_size<D: UncommittedDatatype>(&self, count: Count, datatype: &D) -> Count
    where
        Self: Sized,
    {
        or_fatal(pack::pack_size(count, datatype))
    }

    /// `buf`'s elements packed into a new vector (`MPI_Pack`): the bytes a message of them
    /// carries, padding and gaps left out.
    fn pack<B: Buffer + ?Sized>(&self, buf: &B) -> Vec<u8>
    where
        Self: Sized,
    {
        let mut out = vec![0u8; buf.byte_len()];
        or_fatal(pack::pack_into(buf, &mut out, 0));
        out
    }

    /// Packs `buf` into `out` from `position`; returns the position after it.
    fn pack_into<B: Buffer + ?Sized>(&self, buf: &B, out: &mut [u8], position: Count) -> Count
    where
        Self: Sized,
    {
        or_fatal(pack::pack_into(buf, out, position))
    }

    /// Unpacks `packed` from `position` into `buf` (`MPI_Unpack`); returns the position after
    /// what it took.
    ///
    /// # Safety
    /// Kept `unsafe` as in rsmpi; mpirt checks the bounds of `packed` and the values of
    /// checked types (`bool`, `char`), so a bad input is an error, not undefined behaviour.
    unsafe fn unpack_into<B: BufferMut + ?Sized>(
        &self,
        packed: &[u8],
        buf: &mut B,
        position: Count,
    ) -> Count
    where
        Self: Sized,
    {
        or_fatal(pack::unpack_into(packed, buf, position))
    }

    /// This process. On an inter-communicator, whose point-to-point ranks name the remote
    /// group, this process's rank would name another process: that ends the job with a named
    /// error (see [`try_this_process`](Self::try_this_process)).
    fn this_process(&self) -> Process<'_> {
        or_fatal(self.try_this_process())
    }
    /// [`this_process`](Self::this_process), with the inter-communicator's error returned.
    fn try_this_process(&self) -> Result<Process<'_>, Error> {
        match self.data().is_inter() {
            true => Err(Error::new("this_process", Cause::InterCommunicator)),
            false => Ok(Process {
                comm: self.any_process(),
                rank: self.rank(),
            }),
        }
    }

    /// How this communicator and `other` compare (`MPI_Comm_compare`): handles of one
    /// communicator are identical, communicators of the same processes in the same order
    /// congruent, in another order similar. Inter-communicators compare by both groups, the
    /// weaker relation of the two; an inter- and an intra-communicator are unequal.
    fn compare(&self, other: &dyn Communicator) -> CommunicatorRelation {
        let (a, b) = (self.data(), other.data());
        if Rc::ptr_eq(&a.shared, &b.shared) {
            return CommunicatorRelation::Identical;
        }
        let relation = |x: &[u32], y: &[u32]| {
            let group = |members: &[u32]| UserGroup::from_world_ranks(members.to_vec());
            match group(x).compare(&group(y)) {
                GroupRelation::Identical => CommunicatorRelation::Congruent,
                GroupRelation::Similar => CommunicatorRelation::Similar,
                GroupRelation::Unequal => CommunicatorRelation::Unequal,
            }
        };
        let local = relation(&a.shared.group, &b.shared.group);
        match (a.sides(), b.sides()) {
            (None, None) => local,
            (Some(x), Some(y)) => weaker(local, relation(&x.remote, &y.remote)),
            _ => CommunicatorRelation::Unequal,
        }
    }

    /// A communicator of the same processes with a context of its own (`MPI_Comm_dup`): it
    /// keeps the topology, and gets clones of the attributes whose type says
    /// [`CommAttribute::CLONE_ON_DUP`]. Collective.
    fn duplicate(&self) -> SimpleCommunicator {
        or_fatal(self.try_duplicate())
    }
    fn try_duplicate(&self) -> Result<SimpleCommunicator, Error> {
        let data = self.data();
        let duplicate = data
            .derive(
                0,
                Ok((Some(data.shared.group.clone()), data.grid().cloned())),
            )
            .map(|c| c.expect("every process is a member of its duplicate"))
            .map_err(|cause| Error::new("duplicate", cause))?;
        (data.shared.attributes).copy_for_duplicate(&duplicate.data.shared.attributes);
        Ok(duplicate)
    }

    /// Splits the communicator: the processes of each color form a new one, ranked as here
    /// (`MPI_Comm_split` with key 0). `None` for [`Color::undefined`]. Collective.
    fn split_by_color(&self, color: Color) -> Option<SimpleCommunicator> {
        self.split_by_color_with_key(color, 0)
    }

    /// Splits by color, ranking each new communicator by `key`, then by rank here.
    fn split_by_color_with_key(&self, color: Color, key: Key) -> Option<SimpleCommunicator> {
        or_fatal(self.try_split_by_color_with_key(color, key))
    }
    fn try_split_by_color_with_key(
        &self,
        color: Color,
        key: Key,
    ) -> Result<Option<SimpleCommunicator>, Error> {
        self.data()
            .split(color, key, 0, Ok(None))
            .map_err(|cause| Error::new("split_by_color", cause))
    }

    /// The processes of this one that share this process's host, ranked by `key` then by rank
    /// here (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`). Collective.
    fn split_shared(&self, key: Key) -> SimpleCommunicator {
        or_fatal(self.try_split_shared(key))
    }
    fn try_split_shared(&self, key: Key) -> Result<SimpleCommunicator, Error> {
        let data = self.data();
        // The PML's table of hosts where it has one (no message), as the collectives learn
        // them: the split and the collectives' hierarchy group the ranks alike.
        let host = collective::Hosts::of(data, "split_shared")?.host(data.rank);
        data.split(Color::with_value(host as i32), key, 0, Ok(None))
            .map(|c| c.expect("every process has a host"))
            .map_err(|cause| Error::new("split_shared", cause))
    }

    /// The communicator's group (`MPI_Comm_group`).
    fn group(&self) -> UserGroup {
        UserGroup::from_world_ranks(self.data().shared.group.clone())
    }

    /// A communicator of `group`'s members, ranked as in the group (`MPI_Comm_create`); `None`
    /// on processes outside it. Collective over this communicator, whose processes pass
    /// subgroups of it: the same one on all its members, the empty group or disjoint groups
    /// elsewhere.
    fn split_by_subgroup_collective(&self, group: &dyn Group) -> Option<SimpleCommunicator> {
        or_fatal(self.try_split_by_subgroup_collective(group))
    }
    fn try_split_by_subgroup_collective(
        &self,
        group: &dyn Group,
    ) -> Result<Option<SimpleCommunicator>, Error> {
        let data = self.data();
        let members = group.members();
        let made = data
            .check_subgroup(members)
            .map(|()| (Some(members.to_vec()), None));
        data.derive(0, made)
            .map_err(|cause| Error::new("split_by_subgroup_collective", cause))
    }

    /// A communicator of `group`'s members, ranked as in the group (`MPI_Comm_create_group`):
    /// collective over the group's members only; `None` at once on a process outside it.
    fn split_by_subgroup(&self, group: &dyn Group) -> Option<SimpleCommunicator> {
        self.split_by_subgroup_with_tag(group, 0)
    }

    /// [`split_by_subgroup`](Self::split_by_subgroup) with a tag, which every member passes
    /// alike (a member that passes another is an error on all of them). Members that make
    /// several communicators this way must make them in the same order.
    fn split_by_subgroup_with_tag(
        &self,
        group: &dyn Group,
        tag: Tag,
    ) -> Option<SimpleCommunicator> {
        or_fatal(self.try_split_by_subgroup_with_tag(group, tag))
    }
    fn try_split_by_subgroup_with_tag(
        &self,
        group: &dyn Group,
        tag: Tag,
    ) -> Result<Option<SimpleCommunicator>, Error> {
        let data = self.data();
        let fail = |cause| Error::new("split_by_subgroup", cause);
        if data.is_inter() {
            return Err(fail(Cause::InterCommunicator));
        }
        data.check_subgroup(group.members()).map_err(fail)?;
        create_group::create(data, group.members(), tag).map_err(fail)
    }

    /// An inter-communicator between this communicator's group and another, disjoint one
    /// (`MPI_Intercomm_create`): every process of this communicator names the same
    /// `local_leader` (a rank here); the two leaders reach each other on `peer`, a communicator
    /// both are in, where this group's leader is `remote_leader`'s peer and they trade with
    /// `tag` (significant at the leaders only). Collective over both groups. Bad arguments,
    /// overlapping groups or a remote leader that failed are an error on every process of the
    /// group that sees them.
    fn create_intercommunicator(
        &self,
        local_leader: Rank,
        peer: &dyn Communicator,
        remote_leader: Rank,
        tag: Tag,
    ) -> InterCommunicator {
        or_fatal(self.try_create_intercommunicator(local_leader, peer, remote_leader, tag))
    }
    fn try_create_intercommunicator(
        &self,
        local_leader: Rank,
        peer: &dyn Communicator,
        remote_leader: Rank,
        tag: Tag,
    ) -> Result<InterCommunicator, Error> {
        inter::create(self.data(), local_leader, peer, remote_leader, tag)
            .map_err(|cause| Error::new("create_intercommunicator", cause))
    }

    /// The inter-communicator to the processes that spawned this job (`MPI_Comm_get_parent`),
    /// or `None` for a job rsrun started itself (see
    /// [`Root::spawn`](crate::collective::Root::spawn)). The same one every call, until
    /// [`Universe::disconnect_parent`](crate::Universe::disconnect_parent).
    fn parent(&self) -> Option<InterCommunicator> {
        spawn::parent()
    }

    /// Ends the whole job with exit code `errorcode` (1 if 0).
    fn abort(&self, errorcode: i32) -> ! {
        let message = format!("rank {} called abort({errorcode})", self.rank());
        crate::environment::abort_job(errorcode, &message)
    }

    /// Lets progress happen without waiting for anything (useful while computing).
    fn progress(&self) {
        or_fatal(
            with_engine(|e| e.progress())
                .map(drop)
                .map_err(|c| Error::new("progress", c)),
        )
    }

    /// Names the communicator (`MPI_Comm_set_name`), for every handle of it on this process.
    /// The name is kept whole (MPI implementations cut it at `MPI_MAX_OBJECT_NAME`).
    fn set_name(&self, name: &str) {
        *self.data().shared.name.borrow_mut() = name.to_string();
        stall::rename_comm(self.data().context, name);
    }

    /// The communicator's name (`MPI_Comm_get_name`): `MPI_COMM_WORLD`, `MPI_COMM_SELF`, the
    /// one set, or empty (names are not inherited by duplicates or splits).
    fn get_name(&self) -> String {
        self.data().shared.name.borrow().clone()
    }

    /// A communicator with the Cartesian topology `dims` (`MPI_Cart_create`), of the first
    /// ranks of this one (as many as the grid has points), ranked as here: `reorder` is
    /// allowed, never done. `None` on the ranks left over. More points than ranks, a
    /// non-positive extent or `periods` of another length are fatal. Collective.
    fn create_cartesian_communicator(
        &self,
        dims: &[Count],
        periods: &[bool],
        reorder: bool,
    ) -> Option<CartesianCommunicator> {
        or_fatal(self.try_create_cartesian_communicator(dims, periods, reorder))
    }
    fn try_create_cartesian_communicator(
        &self,
        dims: &[Count],
        periods: &[bool],
        _reorder: bool,
    ) -> Result<Option<CartesianCommunicator>, Error> {
        let data = self.data();
        let made = cartesian::fitting(data, dims, periods).map(|grid| {
            let points = grid.size() as usize;
            let members = (data.rank as usize) < points;
            (
                members.then(|| data.shared.group[..points].to_vec()),
                Some(grid),
            )
        });
        let shape = dims.iter().map(|&d| i64::from(d));
        let fingerprint = context::fingerprint(shape.chain(periods.iter().map(|&p| p as i64)));
        let made = data
            .derive(fingerprint, made)
            .map_err(|cause| Error::new("create_cartesian_communicator", cause))?;
        Ok(made.map(CartesianCommunicator::new))
    }

    /// This process's rank in the topology `dims` would give it (`MPI_Cart_map`), or `None`
    /// if it would be left out; the same rule as
    /// [`create_cartesian_communicator`](Self::create_cartesian_communicator). Local.
    fn cartesian_map(&self, dims: &[Count], periods: &[bool]) -> Option<Rank> {
        or_fatal(self.try_cartesian_map(dims, periods))
    }
    fn try_cartesian_map(&self, dims: &[Count], periods: &[bool]) -> Result<Option<Rank>, Error> {
        let data = self.data();
        let grid = cartesian::fitting(data, dims, periods)
            .map_err(|cause| Error::new("cartesian_map", cause))?;
        Ok((self.rank() < grid.size()).then(|| self.rank()))
    }
}

impl Communicator for SimpleCommunicator {
    fn data(&self) -> &CommData {
        &self.data
    }
    fn is_owning_handle(&self) -> bool {
        true
    }
}

/// Attributes on every communicator, trait objects included (rsmpi's `AnyCommunicator`):
/// see [`attribute`](crate::attribute).
pub trait AnyCommunicator: Communicator {
    /// The value of type `A` cached on the communicator (`MPI_Comm_get_attr`), which every
    /// handle of it sees.
    fn get_attr<A: CommAttribute>(&self) -> Option<&A>;

    /// Caches `value` on the communicator, replacing the `A` it held (`MPI_Comm_set_attr`):
    /// that one drops now where it was never read or where this is the communicator's only
    /// handle, else when the communicator is freed, since another handle may hold a
    /// reference to it.
    fn set_attr<A: CommAttribute>(&mut self, value: A);
}

impl<C: Communicator + ?Sized> AnyCommunicator for C {
    fn get_attr<A: CommAttribute>(&self) -> Option<&A> {
        self.data().shared.attributes.get()
    }

    fn set_attr<A: CommAttribute>(&mut self, value: A) {
        let shared = &self.data().shared;
        // A borrowing handle (a `Process`) is not among the counted holders, and the handle
        // it borrows may hold a reference from `get_attr` while it lives.
        let sole_handle = self.is_owning_handle() && Rc::strong_count(shared) == 1;
        shared.attributes.set(value, sole_handle)
    }
}

/// Something that holds a communicator (rsmpi's `AsCommunicator`).
pub trait AsCommunicator {
    type Out: Communicator;
    fn as_communicator(&self) -> &Self::Out;
}

impl AsCommunicator for SimpleCommunicator {
    type Out = SimpleCommunicator;
    fn as_communicator(&self) -> &SimpleCommunicator {
        self
    }
}

/// A process of a communicator: the destination of sends and the source of receives. As in
/// rsmpi it is a [`Communicator`] too, its own (collectives on it are the communicator's, and
/// [`as_communicator`](AsCommunicator::as_communicator) gives the communicator as an
/// [`AnyProcess`]); its rank is the process's, not the caller's.
#[derive(Clone, Copy, Debug)]
pub struct Process<'a> {
    comm: AnyProcess<'a>,
    pub(crate) rank: Rank,
}

impl Process<'_> {
    /// The process's rank in its communicator (in the remote group, on an
    /// inter-communicator).
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Whether this is the calling process: never a process of an inter-communicator's
    /// remote group.
    pub fn is_self(&self) -> bool {
        let comm = self.comm.comm;
        !comm.is_inter() && self.rank == comm.rank as Rank
    }
}

/// Every process of a communicator, as the source of a receive (`MPI_ANY_SOURCE`); the
/// communicator a [`Process`] holds, as rsmpi's `AnyProcess` is.
#[derive(Clone, Copy, Debug)]
pub struct AnyProcess<'a> {
    pub(crate) comm: &'a CommData,
}

impl Communicator for Process<'_> {
    fn data(&self) -> &CommData {
        self.comm.comm
    }
}

impl Communicator for AnyProcess<'_> {
    fn data(&self) -> &CommData {
        self.comm
    }
}

impl<'a> AsCommunicator for Process<'a> {
    type Out = AnyProcess<'a>;
    fn as_communicator(&self) -> &AnyProcess<'a> {
        &self.comm
    }
}

impl<'a> AsCommunicator for AnyProcess<'a> {
    type Out = AnyProcess<'a>;
    fn as_communicator(&self) -> &AnyProcess<'a> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_tags_stay_in_the_runtime_range_and_wrap_without_a_jump() {
        let comm = CommData::world(0, 1);
        assert_eq!(comm.next_tag(), FIRST_COLLECTIVE_TAG);
        assert_eq!(comm.next_tag(), FIRST_COLLECTIVE_TAG - MARK_ROOM);
        comm.shared.collectives.set(COLLECTIVE_TAGS - 1);
        assert_eq!(comm.next_tag(), pml::MIN_RUNTIME_TAG);
        assert_eq!(comm.next_tag(), FIRST_COLLECTIVE_TAG);
        // Every tag is a key, and its marks stay its own.
        for n in [0, 1, COLLECTIVE_TAGS / 2, COLLECTIVE_TAGS - 1] {
            comm.shared.collectives.set(n);
            let tag = comm.next_tag();
            assert_eq!(pml::match_key(tag), tag);
            assert_eq!(pml::match_key(tag + MARK_ROOM - 1), tag);
            assert_eq!(pml::mark_of(tag + MARK_ROOM - 1) as i32, MARK_ROOM - 1);
        }
    }
}
