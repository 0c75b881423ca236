//! ranks: 2
//! Attributes cached on communicators as rsmpi programs use them: cloned on duplicate or not
//! as their type says, replaced and dropped, set through a trait object, and seen through
//! another handle of the same communicator; and the self communicator. (Not names: rsmpi
//! 0.8.2's `get_name` reads its buffer through a pointer to a temporary that is already gone,
//! and in a release build it returns garbage; mpirt's own tests check names.)

use std::cell::Cell;

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

thread_local! {
    static DROPS: Cell<u32> = const { Cell::new(0) };
}

#[derive(Debug, PartialEq)]
struct Cloned(i32);

impl CommAttribute for Cloned {
    const CLONE_ON_DUP: bool = true;
}

impl Clone for Cloned {
    fn clone(&self) -> Self {
        Cloned(self.0 + 1)
    }
}

impl Drop for Cloned {
    fn drop(&mut self) {
        DROPS.with(|d| d.set(d.get() + 1));
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Kept(&'static str);

impl CommAttribute for Kept {}

fn label(comm: &mut dyn Communicator) {
    comm.set_attr(Kept("through a trait object"));
    assert_eq!(
        comm.get_attr::<Kept>(),
        Some(&Kept("through a trait object"))
    );
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();

    let own = SimpleCommunicator::self_comm();
    assert_eq!((own.size(), own.rank()), (1, 0));
    let mut sum = 0;
    own.all_reduce_into(&rank, &mut sum, mpi::collective::SystemOperation::sum());
    assert_eq!(sum, rank);
    println!("rank {rank}: self has 1 rank");

    let mut comm = world.duplicate();
    comm.set_attr(Cloned(10));
    comm.set_attr(Kept("not cloned"));
    assert_eq!(comm.get_attr::<Cloned>().map(|c| c.0), Some(10));
    let mut dup = comm.duplicate();
    assert_eq!(dup.get_attr::<Cloned>().map(|c| c.0), Some(11));
    assert_eq!(dup.get_attr::<Kept>(), None);
    dup.set_attr(Cloned(20));
    assert_eq!(DROPS.with(Cell::get), 1, "the replaced value drops");
    label(&mut dup);
    drop(dup);
    assert_eq!(
        DROPS.with(Cell::get),
        2,
        "a value drops with its communicator"
    );
    drop(comm);
    assert_eq!(DROPS.with(Cell::get), 3);
    println!("rank {rank}: attributes cloned, replaced and dropped as their types say");

    // Attributes belong to the communicator: a second handle of the world sees them.
    let mut world_again = universe.world();
    world_again.set_attr(Kept("on the world"));
    assert_eq!(world.get_attr::<Kept>(), Some(&Kept("on the world")));
    println!("rank {rank}: another handle of the world sees its attributes");
}
