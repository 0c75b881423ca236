//! ranks: 2
//! Spawn as rsmpi programs use it: the world's rank 0 spawns two more processes of this
//! program, which find their parents through `parent()`; each parent sends each child a
//! number and checks its answer, over the inter-communicator; then both sides merge, the
//! parents first, and sum their merged ranks.

use std::process::Command;

use mpi::collective::SystemOperation;
use mpi::topology::{InterCommunicator, MergeOrder, Rank};
use mpi::traits::*;

const CHILDREN: Rank = 2;

fn main() {
    let universe = mpi::initialize().expect("initialize");
    let world = universe.world();
    match world.parent() {
        None => {
            let child = Command::new(std::env::current_exe().expect("this program"));
            let children = world
                .process_at_rank(0)
                .spawn(&child, CHILDREN)
                .expect("spawn");
            assert_eq!(children.remote_size(), CHILDREN);
            for c in 0..CHILDREN {
                children.process_at_rank(c).send(&(10 * world.rank() + c));
            }
            for c in 0..CHILDREN {
                let (answer, _) = children.process_at_rank(c).receive::<Rank>();
                assert_eq!(answer, 100 * (10 * world.rank() + c));
            }
            println!("parent {}: {CHILDREN} children answered", world.rank());
            merged("parent", world.rank(), &children, MergeOrder::Low);
        }
        Some(parents) => {
            assert_eq!(parents.remote_size(), 2);
            for p in 0..parents.remote_size() {
                let (x, _) = parents.process_at_rank(p).receive::<Rank>();
                assert_eq!(x, 10 * p + world.rank());
                parents.process_at_rank(p).send(&(100 * x));
            }
            println!(
                "child {} of {}: answered {} parents",
                world.rank(),
                world.size(),
                parents.remote_size()
            );
            merged("child", world.rank(), &parents, MergeOrder::High);
        }
    }
}

/// Merges the two sides (the parents pass `Low`, so they come first) and sums the ranks.
fn merged(side: &str, rank: Rank, inter: &InterCommunicator, order: MergeOrder) {
    let all = inter.merge(order);
    let size = inter.size() + inter.remote_size();
    assert_eq!(all.size(), size);
    let mut sum: Rank = 0;
    all.all_reduce_into(&all.rank(), &mut sum, SystemOperation::sum());
    assert_eq!(sum, size * (size - 1) / 2);
    println!("{side} {rank}: merged rank {} of {size}", all.rank());
}
