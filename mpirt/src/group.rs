//! Groups: ordered sets of processes (`MPI_Group`), as the world ranks of their members. They
//! are local objects; making a communicator of one is the collective step
//! ([`Communicator::split_by_subgroup_collective`](crate::communicator::Communicator)).

use crate::communicator::Rank;
use crate::environment;
use crate::error::{or_fatal, Cause, Error};

/// How two groups compare (`MPI_Group_compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRelation {
    /// The same members in the same order.
    Identical,
    /// The same members in another order.
    Similar,
    Unequal,
}

/// A group of processes made by this program (rsmpi's `UserGroup`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserGroup {
    members: Vec<u32>,
}

impl UserGroup {
    pub(crate) fn from_world_ranks(members: Vec<u32>) -> UserGroup {
        UserGroup { members }
    }

    fn position(&self, world_rank: u32) -> Option<Rank> {
        self.members
            .iter()
            .position(|&m| m == world_rank)
            .map(|p| p as Rank)
    }

    fn check(&self, ranks: &[Rank]) -> Result<(), Cause> {
        let size = self.members.len() as Rank;
        for (i, &rank) in ranks.iter().enumerate() {
            if rank < 0 || rank >= size {
                return Err(Cause::RankOutOfRange { rank, size });
            }
            if ranks[..i].contains(&rank) {
                return Err(Cause::DuplicateRank(rank));
            }
        }
        Ok(())
    }
}

/// The operations of groups (rsmpi's `Group`). Usable as a trait object (`&dyn Group`), as
/// [`Communicator::split_by_subgroup`](crate::communicator::Communicator::split_by_subgroup)
/// takes it; the operations between two groups need a sized `self`, as in rsmpi.
pub trait Group {
    #[doc(hidden)]
    fn members(&self) -> &[u32];

    /// Number of processes in the group.
    fn size(&self) -> Rank {
        self.members().len() as Rank
    }

    /// This process's rank in the group, if it is a member.
    fn rank(&self) -> Option<Rank> {
        let me = environment::world_rank()? as u32;
        self.members()
            .iter()
            .position(|&m| m == me)
            .map(|p| p as Rank)
    }

    /// The members of this group, then those of `other` not in it (`MPI_Group_union`).
    fn union<G: Group + ?Sized>(&self, other: &G) -> UserGroup
    where
        Self: Sized,
    {
        let mut members = self.members().to_vec();
        members.extend(
            other
                .members()
                .iter()
                .filter(|m| !self.members().contains(m)),
        );
        UserGroup { members }
    }

    /// The members of this group that are also in `other`, in this group's order.
    fn intersection<G: Group + ?Sized>(&self, other: &G) -> UserGroup
    where
        Self: Sized,
    {
        let members = self.members().iter().copied();
        UserGroup {
            members: members.filter(|m| other.members().contains(m)).collect(),
        }
    }

    /// The members of this group that are not in `other`, in this group's order.
    fn difference<G: Group + ?Sized>(&self, other: &G) -> UserGroup
    where
        Self: Sized,
    {
        let members = self.members().iter().copied();
        UserGroup {
            members: members.filter(|m| !other.members().contains(m)).collect(),
        }
    }

    /// The members at `ranks`, in that order (`MPI_Group_incl`); out-of-range or repeated
    /// ranks are fatal.
    fn include(&self, ranks: &[Rank]) -> UserGroup {
        or_fatal(self.try_include(ranks))
    }
    fn try_include(&self, ranks: &[Rank]) -> Result<UserGroup, Error> {
        let group = UserGroup::from_world_ranks(self.members().to_vec());
        group
            .check(ranks)
            .map(|()| UserGroup {
                members: ranks.iter().map(|&r| group.members[r as usize]).collect(),
            })
            .map_err(|c| Error::new("group include", c))
    }

    /// The members not at `ranks`, in this group's order (`MPI_Group_excl`).
    fn exclude(&self, ranks: &[Rank]) -> UserGroup {
        or_fatal(self.try_exclude(ranks))
    }
    fn try_exclude(&self, ranks: &[Rank]) -> Result<UserGroup, Error> {
        let group = UserGroup::from_world_ranks(self.members().to_vec());
        group
            .check(ranks)
            .map(|()| UserGroup {
                members: (0..group.members.len())
                    .filter(|&r| !ranks.contains(&(r as Rank)))
                    .map(|r| group.members[r])
                    .collect(),
            })
            .map_err(|c| Error::new("group exclude", c))
    }

    /// The rank in `other` of the process at `rank` here, if it is a member of `other`.
    fn translate_rank<G: Group + ?Sized>(&self, rank: Rank, other: &G) -> Option<Rank>
    where
        Self: Sized,
    {
        let member = *self.members().get(usize::try_from(rank).ok()?)?;
        UserGroup::from_world_ranks(other.members().to_vec()).position(member)
    }

    /// [`translate_rank`](Self::translate_rank) of each of `ranks`.
    fn translate_ranks<G: Group + ?Sized>(&self, ranks: &[Rank], other: &G) -> Vec<Option<Rank>>
    where
        Self: Sized,
    {
        ranks
            .iter()
            .map(|&r| self.translate_rank(r, other))
            .collect()
    }

    /// How this group and `other` compare (`MPI_Group_compare`).
    fn compare<G: Group + ?Sized>(&self, other: &G) -> GroupRelation
    where
        Self: Sized,
    {
        let (a, b) = (self.members(), other.members());
        if a == b {
            GroupRelation::Identical
        } else if a.len() == b.len() && a.iter().all(|m| b.contains(m)) {
            GroupRelation::Similar
        } else {
            GroupRelation::Unequal
        }
    }
}

impl Group for UserGroup {
    fn members(&self) -> &[u32] {
        &self.members
    }
}

/// A group the runtime defines: [`SystemGroup::empty`] (`MPI_GROUP_EMPTY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SystemGroup(());

impl SystemGroup {
    /// The group of no processes.
    pub fn empty() -> SystemGroup {
        SystemGroup(())
    }
}

impl Group for SystemGroup {
    fn members(&self) -> &[u32] {
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(members: &[u32]) -> UserGroup {
        UserGroup::from_world_ranks(members.to_vec())
    }

    #[test]
    fn set_operations_keep_the_first_groups_order() {
        let (a, b) = (group(&[5, 1, 3, 7]), group(&[3, 9, 5]));
        assert_eq!(a.union(&b), group(&[5, 1, 3, 7, 9]));
        assert_eq!(a.intersection(&b), group(&[5, 3]));
        assert_eq!(a.difference(&b), group(&[1, 7]));
        assert_eq!(a.include(&[3, 0]), group(&[7, 5]));
        assert_eq!(a.exclude(&[1, 2]), group(&[5, 7]));
        assert_eq!(
            a.translate_ranks(&[0, 1, 2, 9], &b),
            [Some(2), None, Some(0), None]
        );
        assert_eq!(a.compare(&group(&[1, 3, 5, 7])), GroupRelation::Similar);
        assert_eq!(a.compare(&a.clone()), GroupRelation::Identical);
        assert_eq!(a.compare(&b), GroupRelation::Unequal);
        let empty = a.difference(&a);
        assert_eq!(
            SystemGroup::empty().compare(&empty),
            GroupRelation::Identical
        );
        assert_eq!(SystemGroup::empty().size(), 0);
        assert_eq!(a.intersection(&SystemGroup::empty()).size(), 0);
        let as_object: &dyn Group = &a;
        assert_eq!(as_object.size(), 4);
    }

    #[test]
    fn bad_ranks_are_errors() {
        let a = group(&[0, 1, 2]);
        assert!(matches!(
            a.try_include(&[0, 3]).unwrap_err().cause(),
            Cause::RankOutOfRange { rank: 3, size: 3 }
        ));
        assert!(matches!(
            a.try_exclude(&[1, 1]).unwrap_err().cause(),
            Cause::DuplicateRank(1)
        ));
    }
}
