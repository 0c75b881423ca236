//! ranks: 2 3
//! Derived datatypes as rsmpi programs write them: rank 0 sends a column of a row-major matrix
//! with a vector datatype, rank 1 receives it into a contiguous column and, through an indexed
//! datatype, into chosen rows of its own matrix; pack and unpack round-trip a strided view; and
//! every rank all-reduces a `usize` count into a `u64` total, which every MPI accepts.

use mpi::datatype::{MutView, UserDatatype, View};
use mpi::traits::*;

const ROWS: usize = 6;
const COLUMNS: usize = 5;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();

    let matrix: Vec<f64> = (0..ROWS * COLUMNS).map(|i| i as f64).collect();
    // Column 2: ROWS blocks of one f64, a row apart.
    let column = UserDatatype::vector(ROWS as i32, 1, COLUMNS as i32, &f64::equivalent_datatype());
    let rows = UserDatatype::indexed(&[1, 2], &[0, 3], &f64::equivalent_datatype());
    if rank == 0 {
        let view = unsafe { View::with_count_and_datatype(&matrix[2..], 1, &column) };
        world.process_at_rank(1).send(&view);
        world.process_at_rank(1).send(&view);
    } else if rank == 1 {
        let mut got = vec![0.0f64; ROWS];
        world.process_at_rank(0).receive_into(&mut got[..]);
        let expected: Vec<f64> = (0..ROWS).map(|r| (r * COLUMNS + 2) as f64).collect();
        assert_eq!(got, expected);
        println!("column 2: {got:?}");
        // Into a matrix's column 4 through the same datatype: other elements keep -1.
        let mut mine = vec![-1.0f64; ROWS * COLUMNS];
        {
            let mut view = unsafe { MutView::with_count_and_datatype(&mut mine[4..], 1, &column) };
            world.process_at_rank(0).receive_into(&mut view);
        }
        for r in 0..ROWS {
            for c in 0..COLUMNS {
                let want = if c == 4 {
                    (r * COLUMNS + 2) as f64
                } else {
                    -1.0
                };
                assert_eq!(mine[r * COLUMNS + c], want, "row {r} column {c}");
            }
        }
        println!("column 2 landed in column 4");
    }

    // An indexed view of elements 0, 3 and 4, broadcast from rank 0.
    let mut values: Vec<f64> = if rank == 0 {
        vec![10.0, 11.0, 12.0, 13.0, 14.0]
    } else {
        vec![0.0; 5]
    };
    {
        let mut view = unsafe { MutView::with_count_and_datatype(&mut values[..], 1, &rows) };
        world.process_at_rank(0).broadcast_into(&mut view);
    }
    if rank != 0 {
        assert_eq!(values, [10.0, 0.0, 0.0, 13.0, 14.0]);
    }
    println!("rank {rank}: indexed broadcast {values:?}");

    // Pack a strided view and unpack it into a contiguous buffer.
    let every_other = UserDatatype::vector(3, 1, 2, &i32::equivalent_datatype());
    let source = [1i32, -1, 2, -1, 3, -1];
    let view = unsafe { View::with_count_and_datatype(&source[..], 1, &every_other) };
    let packed = world.pack(&view);
    let mut unpacked = [0i32; 3];
    unsafe {
        world.unpack_into(&packed, &mut unpacked[..], 0);
    }
    assert_eq!(unpacked, [1, 2, 3]);
    println!(
        "rank {rank}: packed {} bytes, unpacked {unpacked:?}",
        packed.len()
    );

    // usize into u64, as a distributed sort counts its keys.
    let mine = 1000 + rank as usize;
    let mut total = 0u64;
    world.all_reduce_into(&mine, &mut total, mpi::collective::SystemOperation::sum());
    let n = world.size() as u64;
    assert_eq!(total, 1000 * n + n * (n - 1) / 2);
    println!("rank {rank}: usize into u64 total {total}");
}
