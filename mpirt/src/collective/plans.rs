//! Plans kept per communicator and call shape: a collective called again with the same
//! arguments (all that its plan depends on: the operation, root, lengths, element size,
//! whether its reduction commutes, whether the communicator's calls go through its hosts'
//! leaders) runs the plan its first call built and checked, so a repeated call, as an
//! iterative program's, builds nothing and checks no span (C MPIs' non-blocking
//! collectives keep their schedules likewise: MPICH's persistent collectives, Open MPI's
//! libnbc handles reused by persistent requests).
//!
//! A kept plan is shared (`Rc`) by the calls of its shape in flight at once, which MPI allows
//! (two immediate broadcasts started before either is waited on): an execution never changes
//! the plan it runs but for a call whose ranks chose different algorithms, and then changes
//! its own copy (`schedule::Execution::go_on`, `switch`). The plans go with their
//! communicator (its last handle), so a communicator that reuses its context id starts with
//! none. Calls whose plan depends on per-rank parts (the `_varcount`, neighbourhood and
//! counted reduce-scatter forms) are kept by their counts and displacements too, and by
//! every type and count of their buffers, which their checks read: a call that matches a
//! kept one's was checked, so neither the parts nor the plan are made again. A plan that
//! goes on from lengths it receives (`schedule::Plan::learn`, a leader's of a gather or
//! scatter of parts of any length across hosts) is kept as it starts; its execution adds
//! the rest to its own copy.

use std::cell::RefCell;

use crate::datatype::Datatype;
use crate::error::Cause;
use crate::point_to_point::Count;

use super::schedule::{Checked, Plan};

/// What a plan depends on besides its communicator (its ranks, their hosts and the
/// `MPIRT_COLL_*` settings, fixed for its life), per collective: the arguments of its
/// builder in `build`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Barrier,
    Broadcast {
        root: u32,
        element: usize,
    },
    AllGather,
    AllToAll {
        hierarchical: bool,
    },
    AllReduce {
        element: usize,
    },
    /// In equal blocks.
    ReduceScatter {
        hierarchical: bool,
    },
    Scan {
        inclusive: bool,
    },
    Reduce {
        root: u32,
        element: usize,
    },
    Gather {
        root: u32,
        hierarchical: bool,
    },
    Scatter {
        root: u32,
        hierarchical: bool,
    },
    /// A call whose parts its counts and displacements say ([`Plans::get`]); its key
    /// holds what its checks read of its buffers too.
    Parted {
        form: Form,
        root: u32,
        hierarchical: bool,
    },
}

/// The collectives of parts that counts and displacements place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    AllGatherVarcount,
    AllToAllVarcount,
    /// Reduce-scatter into parts of counts given per rank.
    ReduceScatterCounted,
    GatherVarcount,
    ScatterVarcount,
    NeighborAllGather,
    NeighborAllGatherVarcount,
    NeighborAllToAll,
    NeighborAllToAllVarcount,
}

/// What a parted call's checks read of its send and receive buffers (each one's matched
/// type and count, its own type and count; `None` for a buffer the rank does not have, and
/// for every other call): a call whose buffers read the same passes the same checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sides {
    pub send: Option<Side>,
    pub recv: Option<Side>,
}

/// One buffer as checks read it: its matched type and count, and its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Side {
    pub matched: (Datatype, usize),
    pub own: (Datatype, usize),
}

/// A call's shape and what its plan was checked for: the lengths of its send and receive
/// buffers (packed bytes; every other length a builder takes derives from these on a given
/// communicator) and whether its reduction commutes (true where it has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    pub shape: Shape,
    pub send_len: usize,
    pub recv_len: usize,
    pub commutative: bool,
    pub sides: Sides,
}

/// Shapes kept per communicator: a program's loop calls a few; one that calls more sees the
/// oldest replaced.
const KEPT: usize = 16;

/// A communicator's kept plans.
#[derive(Debug, Default)]
pub(crate) struct Plans(RefCell<Kept>);

#[derive(Debug, Default)]
struct Kept {
    /// Each plan's key, and for a parted call its counts and displacements (each list after
    /// its length).
    entries: Vec<(Key, Vec<Count>, Checked)>,
    /// The entry replaced next once `KEPT` are kept.
    oldest: usize,
}

impl Plans {
    /// The plan of `key`: the one kept, or the one `build` makes, checked and then kept. A
    /// call whose parts `lists` place (its counts and displacements, each buffer's; none for
    /// the others) finds a plan kept for lists of the same numbers; `build` checks the parts
    /// as it plans, and one that refuses them keeps nothing.
    pub fn get(
        &self,
        key: Key,
        lists: &[&[Count]],
        build: impl FnOnce() -> Result<Plan, Cause>,
    ) -> Result<Checked, Cause> {
        let found = self.0.borrow().entries.iter().find_map(|(k, kept, plan)| {
            (*k == key && same_lists(kept, lists)).then(|| plan.clone())
        });
        if let Some(plan) = found {
            return Ok(plan);
        }
        let plan = Checked::new(build()?, key.send_len, key.recv_len, key.commutative);
        let numbers = lists
            .iter()
            .flat_map(|list| std::iter::once(list.len() as Count).chain(list.iter().copied()))
            .collect();
        let mut kept = self.0.borrow_mut();
        if kept.entries.len() < KEPT {
            kept.entries.push((key, numbers, plan.clone()));
        } else {
            let oldest = kept.oldest;
            kept.entries[oldest] = (key, numbers, plan.clone());
            kept.oldest = (oldest + 1) % KEPT;
        }
        Ok(plan)
    }

    /// How many plans are kept, for tests.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.borrow().entries.len()
    }
}

/// Whether `kept` holds `lists`, each after its length (so that lists cut elsewhere, with
/// the same numbers in all, differ), without making a list of them.
fn same_lists(kept: &[Count], lists: &[&[Count]]) -> bool {
    let mut at = 0;
    for list in lists {
        let Some(&len) = kept.get(at) else {
            return false;
        };
        let end = at + 1 + list.len();
        if len as usize != list.len() || kept.get(at + 1..end) != Some(list) {
            return false;
        }
        at = end;
    }
    at == kept.len()
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::super::algorithms::Ranks;
    use super::super::build;
    use super::*;

    fn key(len: usize) -> Key {
        Key {
            shape: Shape::AllReduce { element: 4 },
            send_len: len,
            recv_len: len,
            commutative: true,
            sides: Sides::default(),
        }
    }

    /// Builds `len`'s all-reduce on 2 ranks, counting the builds in `built`.
    fn counted(built: &Cell<u32>, len: usize) -> impl FnOnce() -> Result<Plan, Cause> + '_ {
        move || {
            built.set(built.get() + 1);
            build::all_reduce(Ranks { rank: 0, size: 2 }, len, 4, true)
        }
    }

    #[test]
    fn a_shape_called_again_is_built_once_and_shared() {
        let (plans, built) = (Plans::default(), Cell::new(0));
        let first = plans.get(key(8), &[], counted(&built, 8)).expect("a plan");
        let again = plans.get(key(8), &[], counted(&built, 8)).expect("a plan");
        assert_eq!(built.get(), 1);
        assert!(Rc::ptr_eq(&first.plan(), &again.plan()));
        let other = plans
            .get(key(16), &[], counted(&built, 16))
            .expect("a plan");
        assert_eq!(built.get(), 2);
        assert!(!Rc::ptr_eq(&first.plan(), &other.plan()));
    }

    #[test]
    fn at_most_kept_shapes_are_kept_and_the_oldest_go_first() {
        let (plans, built) = (Plans::default(), Cell::new(0));
        for len in 1..=KEPT + 4 {
            plans
                .get(key(len), &[], counted(&built, len))
                .expect("a plan");
        }
        assert_eq!(plans.len(), KEPT);
        assert_eq!(built.get(), KEPT as u32 + 4);
        // The last KEPT are kept; the first 4 were replaced, and are built again.
        plans
            .get(key(KEPT + 4), &[], counted(&built, KEPT + 4))
            .expect("a plan");
        assert_eq!(built.get(), KEPT as u32 + 4);
        plans.get(key(1), &[], counted(&built, 1)).expect("a plan");
        assert_eq!(built.get(), KEPT as u32 + 5);
    }

    /// A parted call's plan serves the calls whose counts and displacements hold the same
    /// numbers, cut the same way, alone.
    #[test]
    fn a_parted_call_is_kept_by_its_lists() {
        let (plans, built) = (Plans::default(), Cell::new(0));
        let (counts, displs): (&[Count], &[Count]) = (&[1, 1], &[0, 1]);
        plans
            .get(key(8), &[counts, displs], counted(&built, 8))
            .expect("a plan");
        plans
            .get(key(8), &[counts, displs], counted(&built, 8))
            .expect("a plan");
        assert_eq!(built.get(), 1);
        for other in [
            &[&[1, 1][..], &[1, 0][..]][..],
            &[&[1, 1, 0], &[1]],
            &[&[1, 1]],
            &[&[1, 1], &[0, 1], &[]],
        ] {
            plans
                .get(key(8), other, counted(&built, 8))
                .expect("a plan");
        }
        assert_eq!(built.get(), 5);
        plans.get(key(8), &[], counted(&built, 8)).expect("a plan");
        assert_eq!(built.get(), 6, "a call with no lists is not a parted one's");
    }

    #[test]
    fn a_plan_that_fails_to_build_is_not_kept() {
        let plans = Plans::default();
        let refused = plans.get(key(8), &[], || Err(Cause::NotCancellable));
        assert!(refused.is_err());
        assert_eq!(plans.len(), 0);
    }

    #[test]
    #[should_panic(expected = "does not fit its buffer")]
    fn a_plan_is_checked_for_the_lengths_of_its_key() {
        // A key whose lengths are shorter than the plan's spans.
        let key = Key {
            send_len: 4,
            recv_len: 4,
            ..key(8)
        };
        let _ = Plans::default().get(key, &[], || {
            build::all_reduce(Ranks { rank: 0, size: 2 }, 8, 4, true)
        });
    }
}
