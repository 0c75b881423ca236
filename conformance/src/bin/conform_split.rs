//! ranks: 4 5
//! Making communicators as rsmpi programs do: by color and key, from a subgroup collectively
//! over the parent (disjoint groups, and the empty group on some ranks) and over the group's
//! members alone, and the ranks that share a host.

use mpi::collective::SystemOperation;
use mpi::topology::{Color, GroupRelation, Rank, SystemGroup};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (size, rank) = (world.size(), world.rank());

    let odd: Vec<Rank> = (0..size).filter(|r| r % 2 == 1).collect();
    let odd_group = world.group().include(&odd);
    let even_group = world.group().difference(&odd_group);
    let my_group = if rank % 2 == 1 {
        &odd_group
    } else {
        &even_group
    };

    let by_group = world.split_by_subgroup_collective(my_group).unwrap();
    assert_eq!(by_group.group().compare(my_group), GroupRelation::Identical);
    let empty = SystemGroup::empty();
    let odd_only = if rank % 2 == 1 {
        world.split_by_subgroup_collective(&odd_group)
    } else {
        world.split_by_subgroup_collective(&empty)
    };
    assert_eq!(odd_only.is_some(), rank % 2 == 1);

    // Only the members call; a process outside the group gets nothing at once.
    let made = world.split_by_subgroup(my_group).unwrap();
    assert_eq!(made.group().compare(my_group), GroupRelation::Identical);
    let other = if rank % 2 == 1 {
        &even_group
    } else {
        &odd_group
    };
    assert!(world.split_by_subgroup(other).is_none());
    let mut total = 0;
    made.all_reduce_into(&rank, &mut total, SystemOperation::sum());
    println!(
        "rank {rank}: {} of {} by subgroup, members' ranks sum to {total}",
        made.rank(),
        made.size()
    );

    let by_color = world.split_by_color(Color::with_value(rank % 2)).unwrap();
    assert_eq!(by_color.group().compare(my_group), GroupRelation::Identical);
    let descending = world
        .split_by_color_with_key(Color::with_value(rank % 2), -rank)
        .unwrap();
    assert_eq!(descending.rank(), descending.size() - 1 - by_color.rank());
    let nobody = world.split_by_color(if rank == 0 {
        Color::with_value(3)
    } else {
        Color::undefined()
    });
    assert_eq!(nobody.is_some(), rank == 0);
    println!(
        "rank {rank}: by color {} of {}, by descending key {}",
        by_color.rank(),
        by_color.size(),
        descending.rank()
    );

    let host = world.split_shared(rank);
    assert_eq!((host.size(), host.rank()), (size, rank));
}
