//! Communicators and the processes in them (rsmpi's `topology`).

use std::cell::Cell;
use std::rc::Rc;

use pml::Pml;

use crate::collective::{AreaSlot, CommunicatorCollectives};
use crate::context::{self, ContextLease};
use crate::datatype::{pack, Buffer, BufferMut, UncommittedDatatype};
use crate::environment::with_engine;
use crate::error::{or_fatal, Cause, Error};
use crate::group::Group;
pub use crate::group::{GroupRelation, UserGroup};
use crate::point_to_point::Count;

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
    /// The shared-memory area of short all-reductions, once the first one set it up.
    area: AreaSlot,
    /// The context id, given back when the last handle drops; `None` for the world's.
    _lease: Option<ContextLease>,
}

/// Collective tags count down from here to `pml::MIN_RUNTIME_TAG`, the lowest tag every PML
/// carries (UCX's has 24 bits for it); -1 to -15 stay free for other runtime traffic.
const FIRST_COLLECTIVE_TAG: i32 = -16;
/// How many tags collectives take turns on. Each communicator's counter wraps here rather
/// than at `u32::MAX`, so the tags wrap without a jump: a tag comes back only after this
/// many later collectives on the communicator, far more than can be in flight at once.
const COLLECTIVE_TAGS: u32 = (FIRST_COLLECTIVE_TAG - pml::MIN_RUNTIME_TAG + 1) as u32;
const _: () = assert!(pml::MIN_RUNTIME_TAG < FIRST_COLLECTIVE_TAG && FIRST_COLLECTIVE_TAG < 0);

impl CommData {
    fn new(rank: u32, group: Vec<u32>, lease: Option<ContextLease>) -> CommData {
        CommData {
            context: lease.as_ref().map_or(context::WORLD, ContextLease::id),
            rank,
            size: group.len() as u32,
            shared: Rc::new(Shared {
                group,
                collectives: Cell::new(0),
                area: AreaSlot::default(),
                _lease: lease,
            }),
        }
    }

    /// The world rank of `rank`, which the caller has checked is in range.
    #[inline]
    pub(crate) fn world_rank(&self, rank: u32) -> u32 {
        self.shared.group[rank as usize]
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

    pub(crate) fn area_slot(&self) -> &AreaSlot {
        &self.shared.area
    }

    /// The tag of the next collective on this communicator. Every rank starts the
    /// communicator's collectives in the same order, so they agree on each one's tag, and
    /// messages of two collectives in flight at once can never match each other's receives.
    pub(crate) fn next_tag(&self) -> i32 {
        let n = self.shared.collectives.get();
        self.shared.collectives.set((n + 1) % COLLECTIVE_TAGS);
        FIRST_COLLECTIVE_TAG - n as i32
    }

    /// A communicator of `members` (world ranks, in rank order) on a context agreed over
    /// this one, or `None` if this process is not a member. Collective over this communicator.
    fn derive(&self, members: Option<Vec<u32>>) -> Result<Option<SimpleCommunicator>, Error> {
        let id = context::agree(self)?;
        let me = self.world_rank(self.rank);
        Ok(members.and_then(|group| {
            let rank = group.iter().position(|&m| m == me)? as u32;
            Some(SimpleCommunicator {
                data: CommData::new(rank, group, Some(context::lease(id))),
            })
        }))
    }

    /// Splits by color, ordering each part by key then by rank here.
    fn split(&self, color: Color, key: Key) -> Result<Option<SimpleCommunicator>, Error> {
        let mine = [color.0.is_some() as i32, color.0.unwrap_or(0), key];
        let mut all = vec![[0i32; 3]; self.size as usize];
        self.try_all_gather_into(&mine, &mut all[..])?;
        let members = color.0.map(|_| {
            let mut same: Vec<(i32, u32)> = (0..self.size)
                .filter(|&r| all[r as usize][..2] == mine[..2])
                .map(|r| (all[r as usize][2], r))
                .collect();
            same.sort_unstable();
            same.into_iter().map(|(_, r)| self.world_rank(r)).collect()
        });
        self.derive(members)
    }
}

impl Communicator for CommData {
    fn data(&self) -> &CommData {
        self
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

/// The name of this process's host, as the processes of one host share it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// Longest host name the shared-memory split compares (Linux's `HOST_NAME_MAX`).
const HOST_NAME_MAX: usize = 64;

/// A communicator: a group of processes and a context for their messages (`MPI_Comm`).
#[derive(Clone, Debug)]
pub struct SimpleCommunicator {
    data: CommData,
}

impl SimpleCommunicator {
    pub(crate) fn world(rank: u32, size: u32) -> SimpleCommunicator {
        SimpleCommunicator {
            data: CommData::new(rank, (0..size).collect(), None),
        }
    }
}

/// The operations of every communicator. Implemented by [`SimpleCommunicator`].
pub trait Communicator {
    #[doc(hidden)]
    fn data(&self) -> &CommData;

    /// This process's rank in the communicator.
    fn rank(&self) -> Rank {
        self.data().rank as Rank
    }

    /// Number of processes in the communicator.
    fn size(&self) -> Rank {
        self.data().size as Rank
    }

    /// The process at `rank`; a rank outside the communicator is a fatal error.
    fn process_at_rank(&self, rank: Rank) -> Process<'_> {
        or_fatal(self.try_process_at_rank(rank))
    }

    /// The process at `rank`, or an error naming the rank and the size.
    fn try_process_at_rank(&self, rank: Rank) -> Result<Process<'_>, Error> {
        let data = self.data();
        data.check_rank(rank)
            .map(|_| Process { comm: data, rank })
            .map_err(|cause| Error::new(format!("process_at_rank({rank})"), cause))
    }

    /// Any process of the communicator, as the source of a wildcard receive.
    fn any_process(&self) -> AnyProcess<'_> {
        AnyProcess { comm: self.data() }
    }

    /// Bytes `count` elements of `datatype` take packed (`MPI_Pack_size`).
    fn pack_size<D: UncommittedDatatype>(&self, count: Count, datatype: &D) -> Count
    where
        Self: Sized,
    {
        pack::pack_size(count, datatype)
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

    /// This process.
    fn this_process(&self) -> Process<'_> {
        Process {
            comm: self.data(),
            rank: self.rank(),
        }
    }

    /// A communicator of the same processes with a context of its own (`MPI_Comm_dup`).
    /// Collective.
    fn duplicate(&self) -> SimpleCommunicator {
        or_fatal(self.try_duplicate())
    }
    fn try_duplicate(&self) -> Result<SimpleCommunicator, Error> {
        let data = self.data();
        data.derive(Some(data.shared.group.clone()))
            .map(|c| c.expect("every process is a member of its duplicate"))
            .map_err(|e| Error::new("duplicate", e.cause().clone()))
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
            .split(color, key)
            .map_err(|e| Error::new("split_by_color", e.cause().clone()))
    }

    /// The processes of this one that share this process's host, ranked by `key` then by rank
    /// here (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`). Collective.
    fn split_shared(&self, key: Key) -> SimpleCommunicator {
        or_fatal(self.try_split_shared(key))
    }
    fn try_split_shared(&self, key: Key) -> Result<SimpleCommunicator, Error> {
        let data = self.data();
        let fail = |e: Error| Error::new("split_shared", e.cause().clone());
        let mut mine = [0u8; HOST_NAME_MAX];
        let name = hostname();
        let len = name.len().min(HOST_NAME_MAX);
        mine[..len].copy_from_slice(&name.as_bytes()[..len]);
        let mut all = vec![[0u8; HOST_NAME_MAX]; data.size as usize];
        data.try_all_gather_into(&mine, &mut all[..])
            .map_err(fail)?;
        let host = all
            .iter()
            .position(|h| *h == mine)
            .expect("this process's own host");
        data.split(Color::with_value(host as i32), key)
            .map(|c| c.expect("every process has a host"))
            .map_err(fail)
    }

    /// The communicator's group (`MPI_Comm_group`).
    fn group(&self) -> UserGroup {
        UserGroup::from_world_ranks(self.data().shared.group.clone())
    }

    /// A communicator of `group`'s members, ranked as in the group (`MPI_Comm_create`); `None`
    /// on processes outside it. Collective over this communicator, whose processes must all
    /// pass the same group, a subset of this one's.
    fn split_by_subgroup_collective<G: Group + ?Sized>(
        &self,
        group: &G,
    ) -> Option<SimpleCommunicator> {
        or_fatal(self.try_split_by_subgroup_collective(group))
    }
    fn try_split_by_subgroup_collective<G: Group + ?Sized>(
        &self,
        group: &G,
    ) -> Result<Option<SimpleCommunicator>, Error> {
        let data = self.data();
        let operation = "split_by_subgroup_collective";
        let members = group.members();
        if let Some(&outsider) = members.iter().find(|m| !data.shared.group.contains(m)) {
            return Err(Error::new(
                operation,
                Cause::NotInCommunicator {
                    world_rank: outsider as Rank,
                },
            ));
        }
        data.derive(Some(members.to_vec()))
            .map_err(|e| Error::new(operation, e.cause().clone()))
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
}

impl Communicator for SimpleCommunicator {
    fn data(&self) -> &CommData {
        &self.data
    }
}

/// A process of a communicator: the destination of sends and the source of receives.
#[derive(Clone, Copy, Debug)]
pub struct Process<'a> {
    pub(crate) comm: &'a CommData,
    pub(crate) rank: Rank,
}

impl Process<'_> {
    /// The process's rank in its communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }
}

/// Every process of a communicator, as the source of a receive (`MPI_ANY_SOURCE`).
#[derive(Clone, Copy, Debug)]
pub struct AnyProcess<'a> {
    pub(crate) comm: &'a CommData,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_tags_stay_in_the_runtime_range_and_wrap_without_a_jump() {
        let comm = CommData::new(0, vec![0], None);
        assert_eq!(comm.next_tag(), FIRST_COLLECTIVE_TAG);
        assert_eq!(comm.next_tag(), FIRST_COLLECTIVE_TAG - 1);
        comm.shared.collectives.set(COLLECTIVE_TAGS - 1);
        assert_eq!(comm.next_tag(), pml::MIN_RUNTIME_TAG);
        assert_eq!(comm.next_tag(), FIRST_COLLECTIVE_TAG);
    }
}
