//! Communicators, groups, the environment and Cartesian topologies with real ranks under
//! rsrun (see `common`).
//!
//! The Cartesian checks compare every answer (layouts, coordinates, ranks, shifts, sub-grids,
//! and what neighbourhood collectives deliver) with a serial reference each rank computes on
//! its own, for every grid of 1 to 4 dimensions with extents 1 to 4 that fits the job, each
//! without wrap-around, wrapping everywhere, and wrapping every other dimension.

use std::cell::Cell;
use std::env;
use std::rc::Rc;

use mpirt::collective::SystemOperation;
use mpirt::datatype::{Partition, PartitionMut};
use mpirt::error::Cause;
use mpirt::request;
use mpirt::topology::{
    CartesianCommunicator, Color, CommunicatorRelation, GroupRelation, IntoTopology, Rank,
    SimpleCommunicator, SystemGroup, Topology,
};
use mpirt::traits::*;
use mpirt::Count;

mod common;

use common::{job, ok_job_on, ok_job_with, slurm_available, text, Launch, RANK_MODE};

#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    let universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    match mode.as_str() {
        "communicators" => {
            relations_names_and_self(&universe, &world);
            attributes(&world);
            subgroups(&world);
            environment(&universe, &world);
        }
        "cartesian" => {
            for dims in shapes(world.size()) {
                for periods in period_patterns(dims.len()) {
                    cartesian(&world, &dims, &periods);
                }
            }
        }
        "errors" => errors(&world),
        other => panic!("unknown mode {other}"),
    }
    println!("rank {} done", world.rank());
}

fn relations_names_and_self(universe: &mpirt::Universe, world: &SimpleCommunicator) {
    let (n, me) = (world.size(), world.rank());
    assert_eq!(
        world.compare(&world.clone()),
        CommunicatorRelation::Identical
    );
    assert_eq!(
        world.compare(&universe.world()),
        CommunicatorRelation::Identical
    );
    assert_eq!(
        world.compare(&SimpleCommunicator::world()),
        CommunicatorRelation::Identical
    );
    let dup = world.duplicate();
    assert_eq!(world.compare(&dup), CommunicatorRelation::Congruent);
    let reversed = world
        .split_by_color_with_key(Color::with_value(0), -me)
        .unwrap();
    let halves = world.split_by_color(Color::with_value(me % 2)).unwrap();
    if n > 1 {
        assert_eq!(world.compare(&reversed), CommunicatorRelation::Similar);
        assert_eq!(world.compare(&halves), CommunicatorRelation::Unequal);
    } else {
        assert_eq!(world.compare(&reversed), CommunicatorRelation::Congruent);
    }

    // Names: shared by every handle, not inherited.
    assert_eq!(world.get_name(), "MPI_COMM_WORLD");
    assert_eq!(dup.get_name(), "");
    let other_handle = SimpleCommunicator::world();
    world.set_name("the world, renamed");
    assert_eq!(other_handle.get_name(), "the world, renamed");
    world.set_name("MPI_COMM_WORLD");

    // Self: one process, its own context, usable for messages and collectives.
    let own = SimpleCommunicator::self_comm();
    assert_eq!((own.size(), own.rank()), (1, 0));
    assert!(own.process_at_rank(0).is_self() && world.this_process().is_self());
    assert_eq!(world.process_at_rank((me + 1) % n).is_self(), n == 1);
    assert_eq!(own.get_name(), "MPI_COMM_SELF");
    assert_eq!(own.group().translate_rank(0, &world.group()), Some(me));
    let expected = if n == 1 {
        CommunicatorRelation::Congruent
    } else {
        CommunicatorRelation::Unequal
    };
    assert_eq!(own.compare(world), expected);
    assert_eq!(
        own.compare(&SimpleCommunicator::self_comm()),
        CommunicatorRelation::Identical
    );
    let mut sum = 0;
    own.all_reduce_into(&(me + 5), &mut sum, SystemOperation::sum());
    assert_eq!(sum, me + 5);
    let (got, _): (i32, _) =
        mpirt::point_to_point::send_receive(&me, &own.process_at_rank(0), &own.process_at_rank(0));
    assert_eq!(got, me);

    // Trait objects: collectives and attributes through `dyn Communicator`.
    let comms: [&dyn Communicator; 3] = [world, &dup, &halves];
    for comm in comms {
        let mut prefix = 0;
        comm.scan_into(&comm.rank(), &mut prefix, SystemOperation::sum());
        assert_eq!(prefix, comm.rank() * (comm.rank() + 1) / 2);
    }
    let mut boxed: Box<dyn Communicator> = Box::new(dup.duplicate());
    boxed.set_attr(Label(7));
    assert_eq!(boxed.get_attr::<Label>(), Some(&Label(7)));
    assert_eq!(boxed.get_name(), "");
    println!("relations, names, self and dyn ok");
}

#[derive(Clone, Debug, PartialEq)]
struct Label(i32);
impl CommAttribute for Label {}

/// Counts the drops and clones of its values.
#[derive(Debug)]
struct Tracked {
    value: i32,
    drops: Rc<Cell<u32>>,
}
impl Clone for Tracked {
    fn clone(&self) -> Tracked {
        Tracked {
            value: self.value + 1,
            drops: self.drops.clone(),
        }
    }
}
impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.set(self.drops.get() + 1);
    }
}
impl CommAttribute for Tracked {
    const CLONE_ON_DUP: bool = true;
}

fn attributes(world: &SimpleCommunicator) {
    let drops = Rc::new(Cell::new(0));
    let mut comm = world.duplicate();
    assert!(comm.get_attr::<Tracked>().is_none());
    comm.set_attr(Tracked {
        value: 10,
        drops: drops.clone(),
    });
    comm.set_attr(Label(3));
    assert_eq!(comm.get_attr::<Tracked>().map(|t| t.value), Some(10));
    let dup = comm.duplicate();
    assert_eq!(
        dup.get_attr::<Tracked>().map(|t| t.value),
        Some(11),
        "cloned on duplicate"
    );
    assert!(dup.get_attr::<Label>().is_none(), "not cloned on duplicate");
    comm.set_attr(Tracked {
        value: 20,
        drops: drops.clone(),
    });
    assert_eq!(drops.get(), 1, "a replaced value drops");
    drop(comm);
    assert_eq!(drops.get(), 2, "values drop with their communicator");
    drop(dup);
    assert_eq!(drops.get(), 3);

    // The values belong to the communicator: every handle of it sees them.
    let mut comm = world.duplicate();
    let mut other = comm.clone();
    other.set_attr(Label(5));
    assert_eq!(
        comm.get_attr::<Label>(),
        Some(&Label(5)),
        "set through a clone"
    );
    comm.set_attr(Tracked {
        value: 30,
        drops: drops.clone(),
    });
    let held = other
        .get_attr::<Tracked>()
        .expect("set through the first handle");
    // Replaced through a third handle while `held` lives: kept, not dropped.
    let mut third = comm.clone();
    third.set_attr(Tracked {
        value: 31,
        drops: drops.clone(),
    });
    assert_eq!(
        held.value, 30,
        "a reference through another handle stays valid"
    );
    assert_eq!(drops.get(), 3, "kept while other handles may hold it");
    assert_eq!(comm.get_attr::<Tracked>().map(|t| t.value), Some(31));
    drop((other, third));
    comm.set_attr(Tracked {
        value: 32,
        drops: drops.clone(),
    });
    assert_eq!(drops.get(), 5, "the last handle drops both replaced values");
    drop(comm);
    assert_eq!(
        drops.get(),
        6,
        "the value drops with the communicator's last handle"
    );

    // A process borrows its communicator's handle, which may hold a reference meanwhile.
    let mut comm = world.duplicate();
    comm.set_attr(Tracked {
        value: 40,
        drops: drops.clone(),
    });
    let held = comm.get_attr::<Tracked>().expect("set");
    let mut process = comm.any_process();
    process.set_attr(Tracked {
        value: 41,
        drops: drops.clone(),
    });
    assert_eq!(held.value, 40, "a reference beside a process stays valid");
    assert_eq!(drops.get(), 6, "kept where a process set its successor");
    let mut rank_zero = comm.process_at_rank(0);
    rank_zero.set_attr(Tracked {
        value: 42,
        drops: drops.clone(),
    });
    assert_eq!(drops.get(), 7, "a value never read drops at once");
    drop(comm);
    assert_eq!(drops.get(), 9);

    // A world attribute set each step: the world is always shared with the universe, yet
    // values nobody read are not kept.
    let mut world_again = SimpleCommunicator::world();
    for step in 0..10 {
        world_again.set_attr(Tracked {
            value: step,
            drops: drops.clone(),
        });
    }
    assert_eq!(
        drops.get(),
        18,
        "each unread world value drops when replaced"
    );
    let mut world_again = SimpleCommunicator::world();
    world_again.set_attr(Label(9));
    assert_eq!(
        world.get_attr::<Label>(),
        Some(&Label(9)),
        "a second world handle"
    );
    println!("attributes ok");
}

fn subgroups(world: &SimpleCommunicator) {
    let (n, me) = (world.size(), world.rank());
    let odd: Vec<Rank> = (0..n).filter(|r| r % 2 == 1).collect();
    let odd_group = world.group().include(&odd);
    let even_group = world.group().difference(&odd_group);
    let (mine, other) = if me % 2 == 1 {
        (&odd_group, &even_group)
    } else {
        (&even_group, &odd_group)
    };
    // MPI_Comm_create with disjoint groups, and the empty group on some ranks.
    let by_parity = world.split_by_subgroup_collective(mine).unwrap();
    assert_eq!(by_parity.group().compare(mine), GroupRelation::Identical);
    let empty = SystemGroup::empty();
    let odd_only = world.split_by_subgroup_collective(if me % 2 == 1 {
        &odd_group as &dyn Group
    } else {
        &empty
    });
    assert_eq!(odd_only.is_some(), me % 2 == 1);
    // MPI_Comm_create_group: only the members call; others get None at once.
    let made = world.split_by_subgroup(mine).expect("a member");
    assert_eq!(made.group().compare(mine), GroupRelation::Identical);
    assert_eq!(made.rank(), me / 2);
    let mut total = 0;
    made.all_reduce_into(&me, &mut total, SystemOperation::sum());
    let members = (0..n).filter(|r| r % 2 == me % 2);
    assert_eq!(total, members.clone().sum::<Rank>());
    assert!(world.split_by_subgroup(other).is_none());
    // Reversed, with a tag: ranked as in the group.
    let backwards: Vec<Rank> = members.rev().collect();
    let group = world.group().include(&backwards);
    let reversed = world.split_by_subgroup_with_tag(&group, 77).unwrap();
    assert_eq!(
        reversed.rank() as usize,
        backwards.iter().position(|&r| r == me).unwrap()
    );
    // Members that pass different tags all get the same error, and nobody waits for ever.
    let tag = if made.rank() == 1 { 5 } else { 4 };
    let result = world.try_split_by_subgroup_with_tag(mine, tag);
    if made.size() > 1 {
        let e = result.unwrap_err();
        assert!(
            matches!(
                e.cause(),
                Cause::TagsDisagree {
                    tag: 4,
                    other: 5,
                    rank: 1
                }
            ),
            "{e}"
        );
    } else {
        assert!(result.unwrap().is_some());
    }
    println!("subgroups ok");
}

fn environment(universe: &mpirt::Universe, world: &SimpleCommunicator) {
    assert_eq!(mpirt::environment::version(), (3, 1));
    assert!(mpirt::environment::library_version()
        .unwrap()
        .starts_with("mpirt "));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(mpirt::environment::processor_name().unwrap(), host.trim());
    assert_eq!(
        mpirt::environment::threading_support(),
        mpirt::Threading::Single
    );
    assert!(mpirt::time_resolution() > 0.0 && mpirt::time_resolution() < 1e-3);
    assert_eq!(universe.size(), Some(world.size() as usize));
    assert_eq!(universe.appnum(), Some(0));
    assert!(mpirt::is_initialized() && !mpirt::is_finalized());
    println!("environment ok");
}

/// Every shape of 1 to 4 dimensions with extents 1 to 4 and at most `n` points.
fn shapes(n: Rank) -> Vec<Vec<Count>> {
    let mut all = Vec::new();
    let mut last: Vec<Vec<Count>> = vec![vec![]];
    for _ in 0..4 {
        last = last
            .iter()
            .flat_map(|s| {
                (1..=4).map(move |e| {
                    let mut s = s.clone();
                    s.push(e);
                    s
                })
            })
            .filter(|s| s.iter().product::<Count>() <= n)
            .collect();
        all.extend(last.iter().cloned());
    }
    all
}

fn period_patterns(ndims: usize) -> Vec<Vec<bool>> {
    vec![
        vec![false; ndims],
        vec![true; ndims],
        (0..ndims).map(|d| d % 2 == 0).collect(),
    ]
}

/// The serial reference: the coordinates of `rank`, row-major.
fn coords_of(dims: &[Count], rank: Rank) -> Vec<Count> {
    let mut coords = vec![0; dims.len()];
    let mut rest = rank;
    for d in (0..dims.len()).rev() {
        coords[d] = rest % dims[d];
        rest /= dims[d];
    }
    coords
}

fn rank_of(dims: &[Count], coords: &[Count]) -> Rank {
    coords
        .iter()
        .zip(dims)
        .fold(0, |rank, (&c, &extent)| rank * extent + c)
}

/// The rank `by` steps along `d` from `rank`, or `None` past a non-periodic edge.
fn moved(dims: &[Count], periods: &[bool], rank: Rank, d: usize, by: Count) -> Option<Rank> {
    let mut c = coords_of(dims, rank);
    c[d] += by;
    if periods[d] {
        c[d] = c[d].rem_euclid(dims[d]);
    } else if !(0..dims[d]).contains(&c[d]) {
        return None;
    }
    Some(rank_of(dims, &c))
}

/// The neighbours in MPI's order: per dimension, the one before, then the one after.
fn neighbours(dims: &[Count], periods: &[bool], rank: Rank) -> Vec<Option<Rank>> {
    (0..dims.len())
        .flat_map(|d| {
            [
                moved(dims, periods, rank, d, -1),
                moved(dims, periods, rank, d, 1),
            ]
        })
        .collect()
}

fn cartesian(world: &SimpleCommunicator, dims: &[Count], periods: &[bool]) {
    let points: Rank = dims.iter().product();
    let me = world.rank();
    let made = world.create_cartesian_communicator(dims, periods, true);
    assert_eq!(
        world.cartesian_map(dims, periods),
        (me < points).then_some(me)
    );
    let Some(cart) = made else {
        assert!(me >= points);
        return;
    };
    let context = format!("grid {dims:?} periods {periods:?} rank {me}");
    assert_eq!(cart.size(), points, "{context}");
    assert_eq!(cart.rank(), me, "{context}: ranks are not reordered");
    assert_eq!(cart.num_dimensions() as usize, dims.len());
    let layout = cart.get_layout();
    assert_eq!(
        (&layout.dims[..], &layout.periods[..]),
        (dims, periods),
        "{context}"
    );
    assert_eq!(layout.coords, coords_of(dims, me), "{context}");
    for r in 0..points {
        let c = coords_of(dims, r);
        assert_eq!(cart.rank_to_coordinates(r), c, "{context}");
        assert_eq!(cart.coordinates_to_rank(&c), r, "{context}");
    }
    for d in 0..dims.len() {
        for by in -3..=3 {
            assert_eq!(
                cart.shift(d as Count, by),
                (
                    moved(dims, periods, me, d, -by),
                    moved(dims, periods, me, d, by)
                ),
                "{context}: shift({d}, {by})"
            );
        }
    }
    // A message along each dimension's shift: what arrives is the source's rank.
    for d in 0..dims.len() {
        let (source, destination) = cart.shift(d as Count, 1);
        let mut got = -1;
        request::scope(|scope| {
            let receive = source.map(|s| {
                cart.process_at_rank(s)
                    .immediate_receive_into(scope, &mut got)
            });
            if let Some(t) = destination {
                cart.process_at_rank(t).send(&me);
            }
            if let Some(r) = receive {
                r.wait();
            }
        });
        assert_eq!(Some(got).filter(|_| source.is_some()), source, "{context}");
    }
    let dup = cart.duplicate();
    assert_eq!(dup.topology(), Topology::Cartesian);
    assert!(matches!(dup.into_topology(), IntoTopology::Cartesian(c) if c.get_layout() == layout));
    neighbourhood(&cart, dims, periods, &context);
    sub_grids(&cart, dims, periods, &context);
}

/// Each neighbourhood collective, blocking and immediate, against the serial reference;
/// parts of absent neighbours keep their guard value.
fn neighbourhood(cart: &CartesianCommunicator, dims: &[Count], periods: &[bool], context: &str) {
    let me = cart.rank();
    let near = neighbours(dims, periods, me);
    let k = near.len();
    const GUARD: i32 = -7;

    // All-gather: two values from every neighbour.
    let mine = [me, 1000 + me];
    let expected: Vec<i32> = near
        .iter()
        .flat_map(|n| n.map_or([GUARD; 2], |n| [n, 1000 + n]))
        .collect();
    let mut got = vec![GUARD; 2 * k];
    cart.neighbor_all_gather_into(&mine[..], &mut got[..]);
    assert_eq!(got, expected, "{context}: neighbor_all_gather_into");
    let mut got = vec![GUARD; 2 * k];
    request::scope(|scope| {
        cart.immediate_neighbor_all_gather_into(scope, &mine[..], &mut got[..])
            .wait();
    });
    assert_eq!(
        got, expected,
        "{context}: immediate_neighbor_all_gather_into"
    );

    // All-to-all: block i goes to neighbour i, which keeps it in the opposite direction's
    // block (what one sends to its destination, the other receives from its source).
    let send: Vec<i32> = (0..k as i32).map(|i| me * 100 + i).collect();
    let expected: Vec<i32> = near
        .iter()
        .enumerate()
        .map(|(i, n)| n.map_or(GUARD, |n| n * 100 + (i ^ 1) as i32))
        .collect();
    let mut got = vec![GUARD; k];
    cart.neighbor_all_to_all_into(&send[..], &mut got[..]);
    assert_eq!(got, expected, "{context}: neighbor_all_to_all_into");
    let mut got = vec![GUARD; k];
    request::scope(|scope| {
        cart.immediate_neighbor_all_to_all_into(scope, &send[..], &mut got[..])
            .wait();
    });
    assert_eq!(
        got, expected,
        "{context}: immediate_neighbor_all_to_all_into"
    );

    // Varying counts: rank r gathers r % 3 + 1 copies of r from each neighbour r.
    let own = vec![me; me as usize % 3 + 1];
    let counts: Vec<Count> = near.iter().map(|n| n.map_or(0, |n| n % 3 + 1)).collect();
    let displs: Vec<Count> = offsets(&counts);
    let total = counts.iter().sum::<Count>() as usize;
    let expected: Vec<i32> = near
        .iter()
        .flat_map(|n| n.map_or(vec![], |n| vec![n; n as usize % 3 + 1]))
        .collect();
    let mut got = vec![GUARD; total];
    cart.neighbor_all_gather_varcount_into(
        &own[..],
        &mut PartitionMut::new(&mut got[..], &counts[..], &displs[..]),
    );
    assert_eq!(
        got, expected,
        "{context}: neighbor_all_gather_varcount_into"
    );
    let mut got = vec![GUARD; total];
    {
        let mut partition = PartitionMut::new(&mut got[..], &counts[..], &displs[..]);
        request::scope(|scope| {
            cart.immediate_neighbor_all_gather_varcount_into(scope, &own[..], &mut partition)
                .wait();
        });
    }
    assert_eq!(
        got, expected,
        "{context}: immediate_neighbor_all_gather_varcount_into"
    );
    // An absent neighbour's part is left untouched, so it may share elements with a present
    // one's (none is written twice, as with MPI_PROC_NULL): here each absent neighbour's part
    // is the buffer's first element, which a present neighbour's part holds. Every rank
    // takes the call, as a collective must (one more element where it has no part at all).
    let (counts, displs) = absent_at_start(&near, &counts, &displs);
    let mut got = vec![GUARD; total.max(1)];
    cart.neighbor_all_gather_varcount_into(
        &own[..],
        &mut PartitionMut::new(&mut got[..], &counts[..], &displs[..]),
    );
    assert_eq!(
        got[..total],
        expected[..],
        "{context}: neighbor_all_gather_varcount_into, absent neighbours' parts overlapping"
    );

    // Varying counts both ways: (i + r) % 3 elements of r * 100 + i from rank r to its
    // neighbour i.
    let send_counts: Vec<Count> = (0..k as i32).map(|i| (i + me) % 3).collect();
    let send: Vec<i32> = (0..k as i32)
        .flat_map(|i| vec![me * 100 + i; ((i + me) % 3) as usize])
        .collect();
    let recv_counts: Vec<Count> = near
        .iter()
        .enumerate()
        .map(|(i, n)| n.map_or(0, |n| ((i ^ 1) as i32 + n) % 3))
        .collect();
    let expected: Vec<i32> = near
        .iter()
        .enumerate()
        .flat_map(|(i, n)| {
            n.map_or(vec![], |n| {
                let j = (i ^ 1) as i32;
                vec![n * 100 + j; ((j + n) % 3) as usize]
            })
        })
        .collect();
    let (send_displs, recv_displs) = (offsets(&send_counts), offsets(&recv_counts));
    let outgoing = Partition::new(&send[..], &send_counts[..], &send_displs[..]);
    let mut got = vec![GUARD; expected.len()];
    cart.neighbor_all_to_all_varcount_into(
        &outgoing,
        &mut PartitionMut::new(&mut got[..], &recv_counts[..], &recv_displs[..]),
    );
    assert_eq!(
        got, expected,
        "{context}: neighbor_all_to_all_varcount_into"
    );
    let mut got = vec![GUARD; expected.len()];
    {
        let mut incoming = PartitionMut::new(&mut got[..], &recv_counts[..], &recv_displs[..]);
        request::scope(|scope| {
            cart.immediate_neighbor_all_to_all_varcount_into(scope, &outgoing, &mut incoming)
                .wait();
        });
    }
    assert_eq!(
        got, expected,
        "{context}: immediate_neighbor_all_to_all_varcount_into"
    );
    let (recv_counts, recv_displs) = absent_at_start(&near, &recv_counts, &recv_displs);
    let mut got = vec![GUARD; expected.len().max(1)];
    cart.neighbor_all_to_all_varcount_into(
        &outgoing,
        &mut PartitionMut::new(&mut got[..], &recv_counts[..], &recv_displs[..]),
    );
    assert_eq!(
        got[..expected.len()],
        expected[..],
        "{context}: neighbor_all_to_all_varcount_into, absent neighbours' parts overlapping"
    );
}

/// `counts` and `displs` with each absent neighbour's part made the buffer's first element.
fn absent_at_start(
    near: &[Option<Rank>],
    counts: &[Count],
    displs: &[Count],
) -> (Vec<Count>, Vec<Count>) {
    near.iter()
        .zip(counts.iter().zip(displs))
        .map(|(n, (&c, &d))| if n.is_some() { (c, d) } else { (1, 0) })
        .unzip()
}

fn offsets(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

/// Each way to keep some dimensions: the sub-grid holds the ranks that share this one's
/// coordinates in the others, ranked row-major in the kept ones.
fn sub_grids(cart: &CartesianCommunicator, dims: &[Count], periods: &[bool], context: &str) {
    let me = cart.rank();
    let mine = coords_of(dims, me);
    for mask in 0..1u32 << dims.len() {
        let retain: Vec<bool> = (0..dims.len()).map(|d| mask >> d & 1 == 1).collect();
        let sub = cart.subgroup(&retain);
        let members: Vec<Rank> = (0..cart.size())
            .filter(|&r| {
                let c = coords_of(dims, r);
                (0..dims.len()).all(|d| retain[d] || c[d] == mine[d])
            })
            .collect();
        let layout = sub.get_layout();
        let kept = |d: &usize| retain[*d];
        let sub_dims: Vec<Count> = (0..dims.len()).filter(kept).map(|d| dims[d]).collect();
        let sub_periods: Vec<bool> = (0..dims.len()).filter(kept).map(|d| periods[d]).collect();
        let sub_coords: Vec<Count> = (0..dims.len()).filter(kept).map(|d| mine[d]).collect();
        assert_eq!(layout.dims, sub_dims, "{context}: subgroup {retain:?}");
        assert_eq!(
            layout.periods, sub_periods,
            "{context}: subgroup {retain:?}"
        );
        assert_eq!(layout.coords, sub_coords, "{context}: subgroup {retain:?}");
        assert_eq!(sub.rank(), rank_of(&sub_dims, &sub_coords));
        let mut world_ranks = vec![0; sub.size() as usize];
        sub.all_gather_into(&me, &mut world_ranks[..]);
        assert_eq!(world_ranks, members, "{context}: subgroup {retain:?}");
    }
}

/// Bad input is an error that names it, on every rank alike.
fn errors(world: &SimpleCommunicator) {
    let n = world.size();
    let e = world
        .try_create_cartesian_communicator(&[n + 1], &[false], false)
        .unwrap_err();
    assert!(matches!(e.cause(), Cause::GridTooLarge { .. }), "{e}");
    println!("error: {e}");
    let e = world
        .try_create_cartesian_communicator(&[-2, 1], &[false, false], false)
        .unwrap_err();
    println!("error: {e}");
    let e = world.try_cartesian_map(&[1, 1], &[false]).unwrap_err();
    println!("error: {e}");
    let cart = world
        .create_cartesian_communicator(&[n], &[false], false)
        .unwrap();
    let e = cart.try_coordinates_to_rank(&[n]).unwrap_err();
    println!("error: {e}");
    let e = cart.try_rank_to_coordinates_into(n, &mut [0]).unwrap_err();
    println!("error: {e}");
    let e = cart.try_shift(1, 1).unwrap_err();
    println!("error: {e}");
    let e = mpirt::topology::try_dims_create(n * 2 + 1, &mut [2, 0]).unwrap_err();
    println!("error: {e}");
    let e = cart
        .try_neighbor_all_gather_into(&[1][..], &mut [0; 3][..])
        .unwrap_err();
    println!("error: {e}");
    // Both neighbours of every rank of a ring are there, and their parts share an element:
    // every rank refuses the call.
    let ring = world
        .create_cartesian_communicator(&[n], &[true], false)
        .unwrap();
    let e = ring
        .try_neighbor_all_gather_varcount_into(
            &[1][..],
            &mut PartitionMut::new(&mut [0; 2][..], vec![1, 1], vec![0, 0]),
        )
        .unwrap_err();
    println!("error: {e}");

    // One rank's bad arguments fail the call on every rank, and arguments that must agree
    // but differ fail it everywhere: nobody waits for ever, nobody gets a wrong grid.
    let me = world.rank();
    let extent = if me == 0 { n + 1 } else { n };
    let e = world
        .try_create_cartesian_communicator(&[extent], &[false], false)
        .unwrap_err();
    match me {
        0 => assert!(matches!(e.cause(), Cause::GridTooLarge { .. }), "{e}"),
        _ => println!("peer error: {e}"),
    }
    let dims = if me == 0 { [1, n] } else { [n, 1] };
    let e = world
        .try_create_cartesian_communicator(&dims, &[false, false], false)
        .unwrap_err();
    println!("disagreement: {e}");
    let retain: &[bool] = if me == 0 { &[true, true] } else { &[true] };
    let e = cart.try_subgroup(retain).unwrap_err();
    if me != 0 {
        println!("peer error: {e}");
    }
    let half = world.split_by_color(Color::with_value(me % 2)).unwrap();
    let group = if me == 0 { world.group() } else { half.group() };
    let made = half.try_split_by_subgroup_collective(&group);
    match (me % 2, made) {
        (0, Err(e)) if me != 0 => println!("peer error: {e}"),
        (0, Err(e)) => assert!(matches!(e.cause(), Cause::NotInCommunicator { .. }), "{e}"),
        (_, made) => assert!(made.unwrap().is_some()),
    }
    // The runtime is fine afterwards.
    let fine = world
        .create_cartesian_communicator(&[n], &[true], false)
        .unwrap();
    assert_eq!(fine.shift(0, 1).1, Some((me + 1) % n));
    println!("errors ok");
}

#[test]
fn communicators_groups_and_environment_on_1_to_4_ranks() {
    for n in 1..=4 {
        let (out, _) = ok_job_with(n, "communicators", &[]);
        for part in [
            "relations",
            "attributes ok",
            "subgroups ok",
            "environment ok",
        ] {
            assert_eq!(out.matches(part).count(), n as usize, "{out}");
        }
    }
}

#[test]
fn cartesian_grids_on_1_2_and_4_ranks() {
    for n in [1, 2, 4] {
        ok_job_with(n, "cartesian", &[]);
    }
}

#[test]
fn cartesian_grids_on_7_ranks() {
    ok_job_with(7, "cartesian", &[]);
}

#[test]
fn cartesian_grids_on_12_ranks() {
    ok_job_with(12, "cartesian", &[]);
}

/// Across the Slurm test hosts: messages between hosts, and `appnum` from PMI-2.
#[test]
fn communicators_and_grids_under_srun_with_pmi2() {
    if slurm_available() {
        ok_job_on(Launch::Srun { nodes: 4 }, 8, "communicators", &[]);
        ok_job_on(Launch::Srun { nodes: 4 }, 8, "cartesian", &[]);
    }
}

#[test]
fn bad_topology_input_is_a_named_error() {
    let output = job(3, "errors", &[]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}\n{err}");
    for expected in [
        "create_cartesian_communicator: the grid has 4 points but the communicator only 3 ranks",
        "dimension 0 has extent -2",
        "cartesian_map: invalid topology: 2 dimensions but 1 periods",
        "coordinates_to_rank([3]): coordinate 3 is outside dimension 0",
        "rank_to_coordinates(3): rank 3 is out of range",
        "shift(1, 1): invalid topology: dimension 1 does not exist",
        "dims_create: invalid topology: the set dimensions [2, 0] (product 2) do not make 7",
        "neighbor_all_gather_into: the receive buffer (a block per neighbour) holds 3 elements where 2 are needed",
        "neighbor_all_gather_varcount_into: invalid partition: receive (a part per neighbour): \
         neighbour 1's part (elements 0 to 1) overlaps neighbour 0's (elements 0 to 1)",
        "disagreement: rank", // on every rank, with the next line's text
        "create_cartesian_communicator: the ranks passed different arguments where MPI needs the same on all",
        "errors ok",
    ] {
        assert_eq!(out.matches(expected).count(), 3, "{expected}\n{out}\n{err}");
    }
    // Ranks 1 and 2 on the grid too large for rank 0's extent and on rank 0's wrong retain
    // flags; rank 2 alone (rank 0's half) on rank 0's group with an outsider.
    let peer = "another rank passed arguments that are not valid (its own error says which)";
    for (operation, count) in [
        ("create_cartesian_communicator", 2),
        ("subgroup", 2),
        ("split_by_subgroup_collective", 1),
    ] {
        let lines = out
            .lines()
            .filter(|l| {
                l.starts_with("peer error: rank") && l.contains(&format!("{operation}: {peer}"))
            })
            .count();
        assert_eq!(lines, count, "{operation}\n{out}\n{err}");
    }
}
