//! ranks: 2 3
//! Duplicated datatypes and dynamically typed buffers: a duplicate of `i32`'s datatype
//! describes a broadcast buffer through `DynBufferMut` (and through its reborrows, which see
//! the same elements; it is a send buffer too), and a duplicate of a vector datatype sends the
//! same strided elements as the original.

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

    let mut pair = if rank == 0 { [5i64, 6] } else { [0; 2] };
    {
        let mut buffer = DynBufferMut::new(&mut pair[..]);
        let read = buffer.reborrow().as_ptr();
        assert_eq!(read, buffer.as_mut_ptr().cast_const());
        root.broadcast_into(&mut buffer.reborrow_mut());
        assert_eq!(buffer.downgrade().downcast::<i64>(), Some(&[5i64, 6][..]));
    }
    println!("rank {rank}: broadcast through a reborrow {pair:?}");
    if rank == 0 {
        let mut three = [10u16, 20, 30];
        world
            .process_at_rank(1)
            .send(&DynBufferMut::new(&mut three[..]));
    } else if rank == 1 {
        let (three, _) = world.process_at_rank(0).receive_vec::<u16>();
        assert_eq!(three, [10, 20, 30]);
        println!("rank 1: sent from a DynBufferMut {three:?}");
    }

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
