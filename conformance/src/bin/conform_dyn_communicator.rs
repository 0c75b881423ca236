//! ranks: 4 5
//! Communicators as trait objects, as rsmpi programs pass them: one prefix sum written over
//! `&dyn Communicator` runs on the world and on communicators made from groups.

use mpi::collective::SystemOperation;
use mpi::topology::Communicator;
use mpi::traits::{CommunicatorCollectives, Group};

fn prefix_sum(comm: &dyn Communicator, name: &str) {
    let rank = comm.rank() as usize;
    let mut sum = 0;
    comm.scan_into(&rank, &mut sum, SystemOperation::sum());
    assert_eq!(sum, rank * (rank + 1) / 2);
    println!(
        "{name}: rank {rank} of {} has prefix sum {sum}",
        comm.size()
    );
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    prefix_sum(&world, "world");
    let odd: Vec<_> = (0..world.size()).filter(|r| r % 2 == 1).collect();
    let even: Vec<_> = (0..world.size()).filter(|r| r % 2 == 0).collect();
    let odd_group = world.group().include(&odd);
    let even_group = world.group().include(&even);
    if let Some(c) = world.split_by_subgroup_collective(&odd_group) {
        prefix_sum(&c, "odd");
    }
    if let Some(c) = world.split_by_subgroup_collective(&even_group) {
        prefix_sum(&c, "even");
    }
    let boxed: Box<dyn Communicator> = Box::new(world.duplicate());
    prefix_sum(boxed.as_ref(), "boxed duplicate");
}
