//! ranks: 4 6
//! Cartesian topologies as rsmpi programs use them: a 2 x n/2 grid, periodic in its second
//! dimension only, checked for its layout, coordinates, ranks, shifts, sub-grids, a duplicate
//! that keeps the topology, and `cartesian_map`; every rank prints where it sits.

use mpi::topology::{CartesianLayout, IntoTopology, Topology};
use mpi::traits::*;
use mpi::Count;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let size = world.size();
    let columns = size / 2;

    let cart = world
        .create_cartesian_communicator(&[2, columns], &[false, true], false)
        .expect("the grid holds every rank");
    assert_eq!(cart.num_dimensions(), 2);
    let CartesianLayout {
        dims,
        periods,
        coords,
    } = cart.get_layout();
    assert_eq!(dims, [2 as Count, columns]);
    assert_eq!(periods, [false, true]);
    let rank = cart.rank();
    assert_eq!(coords, [rank / columns, rank % columns]);
    let (mut d, mut p, mut c) = ([0; 2], [false; 2], [0; 2]);
    cart.get_layout_into(&mut d, &mut p, &mut c);
    assert_eq!(
        (&d[..], &p[..], &c[..]),
        (&dims[..], &periods[..], &coords[..])
    );

    for r in 0..size {
        let at = cart.rank_to_coordinates(r);
        assert_eq!(at, [r / columns, r % columns]);
        let mut into = [0; 2];
        cart.rank_to_coordinates_into(r, &mut into);
        assert_eq!(into[..], at[..]);
    }

    // The first dimension stops at its edges; the second wraps.
    let (up, down) = cart.shift(0, 1);
    let (left, right) = cart.shift(1, 1);
    let (left2, right2) = cart.shift(1, 2);
    assert_eq!(up.is_some(), coords[0] == 1);
    assert_eq!(down.is_some(), coords[0] == 0);
    let wrap = |by: Count| coords[0] * columns + (coords[1] + by).rem_euclid(columns);
    assert_eq!((left, right), (Some(wrap(-1)), Some(wrap(1))));
    assert_eq!((left2, right2), (Some(wrap(-2)), Some(wrap(2))));
    println!(
        "rank {rank} at {coords:?}: dimension 0 {up:?} -> me -> {down:?}, dimension 1 {left:?} -> \
         me -> {right:?}, by 2 {left2:?} -> me -> {right2:?}"
    );

    // Sub-grids: a row (dimension 1 kept) and a column (dimension 0 kept).
    let row = cart.subgroup(&[false, true]);
    let column = cart.subgroup(&[true, false]);
    assert_eq!((row.size(), row.rank()), (columns, coords[1]));
    assert_eq!((column.size(), column.rank()), (2, coords[0]));
    let row_layout = row.get_layout();
    assert_eq!(
        (row_layout.dims, row_layout.periods),
        (vec![columns], vec![true])
    );
    let mut row_sum = 0;
    row.all_reduce_into(&rank, &mut row_sum, mpi::collective::SystemOperation::sum());
    println!(
        "rank {rank}: row {} of {columns} sums to {row_sum}, column {} of 2",
        row.rank(),
        column.rank()
    );

    // A duplicate keeps the topology.
    let dup = cart.duplicate();
    assert_eq!(dup.topology(), Topology::Cartesian);
    match dup.into_topology() {
        IntoTopology::Cartesian(c) => assert_eq!(c.get_layout().coords, coords),
        _ => panic!("the duplicate lost its topology"),
    }
    assert_eq!(world.topology(), Topology::Undefined);

    // A fully periodic grid takes coordinates outside its extents.
    let torus = world
        .create_cartesian_communicator(&[2, columns], &[true, true], false)
        .unwrap();
    let wrapped = torus.coordinates_to_rank(&[coords[0] + 2, coords[1] - columns]);
    assert_eq!(wrapped, rank);

    // A grid smaller than the world leaves the last ranks out.
    let small = world.create_cartesian_communicator(&[size - 1], &[false], false);
    assert_eq!(small.is_some(), rank < size - 1);
    // Only the ranks inside the grid are printed: MPI says the others get MPI_UNDEFINED
    // (mpirt's None), but Open MPI 4.1 gives them their own rank.
    let mapped = world.cartesian_map(&[2, columns - 1], &[false, false]);
    if rank < 2 * (columns - 1) {
        assert_eq!(mapped, Some(rank));
        println!(
            "rank {rank}: cartesian_map onto 2 x {} gives {mapped:?}",
            columns - 1
        );
    }
}
