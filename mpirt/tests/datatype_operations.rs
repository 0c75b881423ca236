//! Operations that take one buffer both ways, or hand its elements to the user, with types
//! whose elements have gaps: a column view of a matrix and a derived struct with padding,
//! with real ranks under rsrun (see `common`). Their data must move as the elements' values
//! (never the padding or the bytes between a view's blocks), land in the layout, and leave
//! everything else as it was.

use std::env;
use std::ffi::{c_int, c_void};
use std::ops::AddAssign;

use mpirt::collective::{self, SystemOperation, UnsafeUserOperation};
use mpirt::datatype::{Datatype, MutView, UserDatatype, View};
use mpirt::point_to_point as p2p;
use mpirt::topology::SimpleCommunicator;
use mpirt::traits::*;

// Shared with p2p.rs and collectives.rs, which use the rest of it.
#[allow(dead_code)]
mod common;

use common::{ok_job_with, RANK_MODE};

const EAGER: usize = 4096;
/// What the bytes a buffer does not hold data in start as; never seen in a message.
const POISON: u8 = 0xEE;

/// Not `#[repr(C)]`: Rust lays it out with padding (`size_of` 16, 9 bytes of data).
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Padded {
    a: f64,
    b: u8,
}

/// `n` values made from `seed`, whose padding bytes hold `fill`.
fn padded_values(n: usize, seed: usize, fill: u8) -> Vec<Padded> {
    let mut values = vec![Padded { a: 0.0, b: 0 }; n];
    // SAFETY: the bytes lie within the vector's `n` values, and any bytes make an f64 and a
    // u8, so the fields stay valid; writing each field below leaves the padding as filled.
    unsafe {
        values
            .as_mut_ptr()
            .cast::<u8>()
            .write_bytes(fill, std::mem::size_of_val(&values[..]))
    };
    for (i, v) in values.iter_mut().enumerate() {
        v.a = (seed * 1000 + i) as f64;
        v.b = ((seed * 7 + i) % 251) as u8;
    }
    values
}

/// Every byte of `values`, padding included: only values from `padded_values` (whose padding
/// is written), changed by field writes alone, may be seen this way.
fn image(values: &[Padded]) -> &[u8] {
    // SAFETY: the caller's values have every byte initialized (see above), and the slice
    // borrows them for as long as it lives.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

/// A 4 x 3 row-major matrix whose column 1 holds `column(row)` and every other element -1.
fn matrix_with_column(column: impl Fn(usize) -> f64) -> Vec<f64> {
    (0..12)
        .map(|i| if i % 3 == 1 { column(i / 3) } else { -1.0 })
        .collect()
}

/// Column 1 of a 4 x 3 row-major matrix of f64: 4 elements, 3 apart.
fn column_type() -> UserDatatype {
    UserDatatype::vector(4, 1, 3, &f64::equivalent_datatype())
}

/// `MPI_Sendrecv_replace` around a ring, with a padded struct and with a column view: what
/// arrives is the neighbour's values, in the layout, with padding and the other columns
/// untouched.
fn replace(world: &SimpleCommunicator) {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let next = world.process_at_rank(((rank + 1) % size) as i32);
    let previous = world.process_at_rank(((rank + size - 1) % size) as i32);
    let from = (rank + size - 1) % size;
    for n in [1, 5, EAGER / 9 + 3] {
        let mut values = padded_values(n, rank, POISON);
        p2p::send_receive_replace_into(&mut values[..], &next, &previous);
        // The neighbour's fields, and this rank's padding still poisoned.
        let want = padded_values(n, from, POISON);
        assert!(image(&values) == image(&want), "n = {n} on rank {rank}");
    }
    let column = column_type();
    let mut matrix = matrix_with_column(|row| (100 * rank + row) as f64);
    // SAFETY: 4 elements 3 apart from element 1 lie within the 11 after it.
    let mut view = unsafe { MutView::with_count_and_datatype(&mut matrix[1..], 1, &column) };
    p2p::send_receive_replace_into(&mut view, &next, &previous);
    assert_eq!(
        matrix,
        matrix_with_column(|row| (100 * from + row) as f64),
        "rank {rank}"
    );
    println!("rank {rank}: replace ok");
}

/// `MPI_Reduce_local` into a column view: the operation runs over the column's elements
/// alone, with the incoming operand a slice, a column view, or a mutable one.
fn reduce_local(world: &SimpleCommunicator) {
    let rank = world.rank();
    let column = column_type();
    let sum = SystemOperation::sum;
    let incoming = [10.0f64, 20.0, 30.0, 40.0];
    let mut matrix = matrix_with_column(|row| row as f64);
    // SAFETY: as in `replace`.
    let mut view = unsafe { MutView::with_count_and_datatype(&mut matrix[1..], 1, &column) };
    collective::reduce_local_into(&incoming[..], &mut view, sum());
    assert_eq!(matrix, matrix_with_column(|row| (11 * row + 10) as f64));

    let other = matrix_with_column(|row| (1000 * (row + 1)) as f64);
    let mut matrix = matrix_with_column(|row| row as f64);
    // SAFETY: as above, over each matrix.
    let (from_view, mut into) = unsafe {
        (
            View::with_count_and_datatype(&other[1..], 1, &column),
            MutView::with_count_and_datatype(&mut matrix[1..], 1, &column),
        )
    };
    collective::reduce_local_into(&from_view, &mut into, sum());
    assert_eq!(matrix, matrix_with_column(|row| (1001 * row + 1000) as f64));

    let mut other = matrix_with_column(|row| (row * row) as f64);
    let mut matrix = matrix_with_column(|row| row as f64);
    // SAFETY: as above.
    let (from_view, mut into) = unsafe {
        (
            MutView::with_count_and_datatype(&mut other[1..], 1, &column),
            MutView::with_count_and_datatype(&mut matrix[1..], 1, &column),
        )
    };
    collective::reduce_local_into(&from_view, &mut into, sum());
    assert_eq!(matrix, matrix_with_column(|row| (row * row + row) as f64));
    println!("rank {rank}: reduce_local ok");
}

impl AddAssign for Padded {
    fn add_assign(&mut self, other: Padded) {
        self.a += other.a;
        self.b = self.b.wrapping_add(other.b);
    }
}

/// `inoutvec[i] += invec[i]` over `T`s, as a C program would write it: it walks `len`
/// elements of `T` as Rust lays them out.
unsafe extern "C" fn add<T: AddAssign + Copy>(
    invec: *mut c_void,
    inoutvec: *mut c_void,
    len: *mut c_int,
    _datatype: *mut Datatype,
) {
    // SAFETY: the runtime passes `len` aligned `T`s at both pointers (what an
    // `UnsafeUserOperation`'s function is promised), which this one relies on.
    unsafe {
        let (a, b) = (invec as *const T, inoutvec as *mut T);
        for i in 0..*len as usize {
            *b.add(i) += *a.add(i);
        }
    }
}

/// A C-style operation over a type with gaps is a named error before it runs (its function
/// would walk past the packed values it is handed), in a local reduction and in a
/// collective one; over a view of a contiguous type it works on the view's elements.
fn unsafe_operations(world: &SimpleCommunicator) {
    let rank = world.rank();
    // SAFETY: each function reads `invec`, writes valid elements to `inoutvec` and keeps
    // nothing, given what it is promised.
    let (padded_op, f64_op) = unsafe {
        (
            UnsafeUserOperation::commutative(add::<Padded>),
            UnsafeUserOperation::commutative(add::<f64>),
        )
    };
    let incoming = padded_values(64, 1, POISON);
    let mut acc = padded_values(64, 2, POISON);
    let e = collective::try_reduce_local_into(&incoming[..], &mut acc[..], &padded_op).unwrap_err();
    println!("error: {e}");
    assert_eq!(acc, padded_values(64, 2, 0), "an error leaves the values");
    let mut all = padded_values(64, 3, POISON);
    let e = world
        .try_all_reduce_into(&incoming[..], &mut all[..], &padded_op)
        .unwrap_err();
    println!("error: {e}");

    // A column view is so many f64s, which reach the function packed, as f64s lie.
    let column = column_type();
    let other = matrix_with_column(|row| (10 * row) as f64);
    let mut matrix = matrix_with_column(|row| row as f64);
    // SAFETY: as in `replace`, over each matrix.
    let (from_view, mut into) = unsafe {
        (
            View::with_count_and_datatype(&other[1..], 1, &column),
            MutView::with_count_and_datatype(&mut matrix[1..], 1, &column),
        )
    };
    collective::reduce_local_into(&from_view, &mut into, &f64_op);
    assert_eq!(matrix, matrix_with_column(|row| (11 * row) as f64));
    println!("rank {rank}: unsafe operations ok");
}

/// The rank side of the tests below, selected by `RANK_MODE`.
#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    let universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    match mode.as_str() {
        "replace" => replace(&world),
        "reduce_local" => reduce_local(&world),
        "unsafe_operations" => unsafe_operations(&world),
        other => panic!("unknown rank mode {other}"),
    }
    println!("rank {} done", world.rank());
}

// ---- the test side ----

/// Runs `mode` on `n` ranks, over TCP where `tcp` says so, with small eager limits so that
/// long messages take the rendezvous path; the job's output.
fn ok(n: u32, mode: &str, tcp: bool) -> String {
    let eager = EAGER.to_string();
    let mut envs = vec![("MPIRT_EAGER_LIMIT", eager.as_str())];
    if tcp {
        envs.extend([
            ("MPIRT_TRANSPORT", "tcp"),
            ("MPIRT_TCP_EAGER_LIMIT", &eager),
        ]);
    }
    ok_job_with(n, mode, &envs).0
}

#[test]
fn send_receive_replace_moves_values_with_gaps_on_shared_memory() {
    let out = ok(3, "replace", false);
    assert_eq!(out.matches("replace ok").count(), 3, "{out}");
}

#[test]
fn send_receive_replace_moves_values_with_gaps_over_tcp() {
    let out = ok(2, "replace", true);
    assert_eq!(out.matches("replace ok").count(), 2, "{out}");
}

#[test]
fn reduce_local_touches_only_a_views_elements() {
    let out = ok(1, "reduce_local", false);
    assert_eq!(out.matches("reduce_local ok").count(), 1, "{out}");
}

#[test]
fn unsafe_user_operations_refuse_types_with_gaps() {
    let out = ok(2, "unsafe_operations", false);
    assert_eq!(out.matches("unsafe operations ok").count(), 2, "{out}");
    let refused = "UnsafeUserOperation (its C function takes elements without gaps) is not \
                   defined for";
    for (operation, count) in [("reduce_local_into", 2), ("all_reduce_into", 2)] {
        let named = out
            .lines()
            .filter(|l| l.contains(&format!("{operation}: the operation {refused}")))
            .count();
        assert_eq!(named, count, "{operation} in\n{out}");
    }
}
