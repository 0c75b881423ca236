//! ranks: 3 4
//! Groups and communicator comparison as rsmpi programs use them: set operations, the empty
//! group, ranks and their translation, and how communicators of the same or other processes
//! compare.

use mpi::topology::{Color, CommunicatorRelation, GroupRelation, Rank, SystemGroup};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (size, rank) = (world.size(), world.rank());

    let g = world.group();
    assert_eq!((g.size(), g.rank()), (size, Some(rank)));
    assert_eq!(g.compare(&world.group()), GroupRelation::Identical);
    let empty = g.difference(&g);
    assert_eq!(
        SystemGroup::empty().compare(&empty),
        GroupRelation::Identical
    );
    assert_eq!(empty.size(), 0);
    assert_eq!(g.intersection(&empty).size(), 0);

    let first_half: Vec<Rank> = (0..size / 2).collect();
    let f = g.include(&first_half);
    let s = g.exclude(&first_half);
    assert_eq!(f.compare(&s), GroupRelation::Unequal);
    assert_eq!(f.union(&s).compare(&g), GroupRelation::Identical);
    assert_eq!(s.union(&f).compare(&g), GroupRelation::Similar);
    assert_eq!(g.difference(&s).compare(&f), GroupRelation::Identical);
    assert_eq!(f.intersection(&s).compare(&empty), GroupRelation::Identical);
    assert!(f.rank().is_some() != s.rank().is_some());

    let reversed: Vec<Rank> = (0..size).rev().collect();
    let r = g.include(&reversed);
    assert_eq!(r.compare(&g), GroupRelation::Similar);
    let translated = r.translate_ranks(&[0, size - 1], &g);
    assert_eq!(translated, [Some(size - 1), Some(0)]);
    println!(
        "rank {rank}: first half rank {:?}, second half rank {:?}, reversed rank {:?}",
        f.rank(),
        s.rank(),
        r.rank()
    );

    let same = universe.world();
    let dup = world.duplicate();
    let backwards = world
        .split_by_color_with_key(Color::with_value(0), size - rank)
        .unwrap();
    let parity = world.split_by_color(Color::with_value(rank % 2)).unwrap();
    assert_eq!(world.compare(&same), CommunicatorRelation::Identical);
    assert_eq!(world.compare(&dup), CommunicatorRelation::Congruent);
    assert_eq!(world.compare(&backwards), CommunicatorRelation::Similar);
    assert_eq!(world.compare(&parity), CommunicatorRelation::Unequal);
    assert_eq!(dup.compare(&world), CommunicatorRelation::Congruent);
    println!(
        "rank {rank}: world vs itself {:?}, a duplicate {:?}, reversed {:?}, by parity {:?}",
        world.compare(&same),
        world.compare(&dup),
        world.compare(&backwards),
        world.compare(&parity)
    );
}
