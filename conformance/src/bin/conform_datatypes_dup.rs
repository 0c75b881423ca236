//! ranks: 2 3
//! Duplicated datatypes and dynamically typed buffers: a duplicate of `i32`'s datatype
//! describes a broadcast buffer through `DynBufferMut`, and a duplicate of a vector datatype
//! sends the same strided elements as the original.

use mpi::datatype::{DynBuffer, DynBufferMut, UserDatatype, View};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let root = world.process_at_rank(0);

    let mut ints = if rank == 0 { [1i32, 2, 3, 4] } else { [0; 4] };
    {
        let mut buffer = DynBufferMut::new(&mut ints[..]);
        assert!(buffer.is::<i32>());
        root.broadcast_into(&mut buffer);
    }
    assert_eq!(ints, [1, 2, 3, 4]);
    println!("rank {rank}: broadcast {ints:?}");

    let strided = UserDatatype::vector(3, 1, 2, &i32::equivalent_datatype());
    let copy = strided.dup();
    drop(strided);
    let source = [7i32, -1, 8, -1, 9, -1];
    if rank == 0 {
        let view = unsafe { View::with_count_and_datatype(&source[..], 1, &copy) };
        world.process_at_rank(1).send(&view);
        world.process_at_rank(1).send(&DynBuffer::new(&source[..2]));
    } else if rank == 1 {
        let mut got = [0i32; 3];
        world.process_at_rank(0).receive_into(&mut got[..]);
        assert_eq!(got, [7, 8, 9]);
        let mut pair = [0i32; 2];
        world.process_at_rank(0).receive_into(&mut pair[..]);
        assert_eq!(pair, [7, -1]);
        println!("rank 1: through the duplicate {got:?}, then {pair:?}");
    }
    let _ = i32::equivalent_datatype().dup();
}
