//! ranks: 2 4
//! Structs as rsmpi programs send them: `#[derive(Equivalence)]` on a struct without
//! `#[repr(C)]` (with padding), arrays and nested structs of it, tuple and unit structs and
//! fields that are tuples (as rsmpi's derive takes them), and a hand-written `Equivalence`
//! that builds a structured user datatype with its fields in reverse order.

use std::mem::size_of;

use mpi::datatype::UserDatatype;
use mpi::traits::*;

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Cell {
    kind: u8,
    mass: f64,
    neighbours: [u16; 3],
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Block {
    cells: [Cell; 2],
    step: u32,
}

/// A tuple struct of a tuple field and an array of tuples: the same elements as `Flat`.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Pairs((i8, bool), [(i8, f64); 2]);

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Flat {
    a: i8,
    b: bool,
    c: i8,
    d: f64,
    e: i8,
    f: f64,
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Nothing;

#[allow(dead_code)] // Its bytes are what is sent; the program never reads the field.
struct Reversed([i32; 3]);

unsafe impl Equivalence for Reversed {
    type Out = UserDatatype;
    fn equivalent_datatype() -> Self::Out {
        UserDatatype::structured(
            &[1, 1, 1],
            &[
                (size_of::<i32>() * 2) as mpi::Address,
                size_of::<i32>() as mpi::Address,
                0,
            ],
            &[i32::equivalent_datatype(); 3],
        )
    }
}

fn cell(i: usize) -> Cell {
    Cell {
        kind: i as u8,
        mass: i as f64 * 0.5,
        neighbours: [i as u16, i as u16 + 1, i as u16 + 2],
    }
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    let root = world.process_at_rank(0);

    let mut cells: Vec<Cell> = if rank == 0 {
        (0..100).map(cell).collect()
    } else {
        vec![Cell::default(); 100]
    };
    root.broadcast_into(&mut cells[..]);
    assert!(cells.iter().enumerate().all(|(i, c)| *c == cell(i)));
    println!("rank {rank}: broadcast 100 cells");

    let mine = Block {
        cells: [cell(rank as usize), cell(rank as usize + 10)],
        step: rank as u32,
    };
    let mut all = vec![Block::default(); size as usize];
    world.all_gather_into(&mine, &mut all[..]);
    for (r, block) in all.iter().enumerate() {
        assert_eq!(block.cells[1], cell(r + 10));
        assert_eq!(block.step, r as u32);
    }
    println!("rank {rank}: gathered {} blocks", all.len());

    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);
    let (got, _) = mpi::point_to_point::send_receive::<Block, _, _, _>(&mine, &next, &previous);
    assert_eq!(got.step, previous.rank() as u32);
    println!("rank {rank}: block from rank {}", got.step);

    // Sent as a Reversed (fields in reverse order), received as plain i32s.
    if rank == 0 {
        world.process_at_rank(1).send(&Reversed([3, 2, 1]));
    } else if rank == 1 {
        let mut ints = [0i32; 3];
        world.process_at_rank(0).receive_into(&mut ints[..]);
        assert_eq!(ints, [1, 2, 3]);
        println!("reversed struct arrived as {ints:?}");
    }

    // Tuples, arrays of tuples and tuple structs match the flat struct of the same elements.
    if rank == 0 {
        let pairs = Pairs((-1, true), [(2, 0.5), (-3, 1.5)]);
        world.process_at_rank(1).send(&pairs);
        world.process_at_rank(1).send(&Nothing);
    } else if rank == 1 {
        let (flat, _) = world.process_at_rank(0).receive::<Flat>();
        let expected = Flat {
            a: -1,
            b: true,
            c: 2,
            d: 0.5,
            e: -3,
            f: 1.5,
        };
        assert_eq!(flat, expected);
        // An empty message: received into a value (rsmpi's `receive` refuses one).
        let mut nothing = Nothing;
        let status = world.process_at_rank(0).receive_into(&mut nothing);
        assert_eq!(status.count(Nothing::equivalent_datatype()), 0);
        println!("tuple struct arrived as {flat:?}, then a unit struct");
    }
}
