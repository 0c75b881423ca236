//! ranks: 3 4
//! Reductions with a C-style operation (`UnsafeUserOperation`, which rsmpi has without its
//! libffi feature) and local reductions. The function is generic over what its last argument
//! points to: rsmpi passes a C `MPI_Datatype` handle and mpirt its own datatype, and the
//! function, like most, does not look at it.

use std::os::raw::{c_int, c_void};

use mpi::collective::{self, SystemOperation, UnsafeUserOperation};
use mpi::traits::*;

/// A run of decimal digits: its value, and 10 to the power of its length.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Digits {
    value: i64,
    scale: i64,
}

impl Digits {
    fn of(digit: i64) -> Digits {
        Digits {
            value: digit,
            scale: 10,
        }
    }
}

/// `inoutvec[i] = invec[i]` followed by `inoutvec[i]`: associative, not commutative, so the
/// result shows the rank order the runtime combined in.
unsafe extern "C" fn concatenate<D>(
    invec: *mut c_void,
    inoutvec: *mut c_void,
    len: *mut c_int,
    _datatype: *mut D,
) {
    let (a, b) = (invec as *const Digits, inoutvec as *mut Digits);
    for i in 0..*len as usize {
        let (first, then) = (*a.add(i), *b.add(i));
        *b.add(i) = Digits {
            value: first.value * then.scale + then.value,
            scale: first.scale * then.scale,
        };
    }
}

/// `inoutvec[i] += invec[i]` over i32s.
unsafe extern "C" fn add<D>(invec: *mut c_void, inoutvec: *mut c_void, len: *mut c_int, _: *mut D) {
    let (a, b) = (invec as *const i32, inoutvec as *mut i32);
    for i in 0..*len as usize {
        *b.add(i) += *a.add(i);
    }
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (size, rank) = (world.size(), world.rank());

    let sum = unsafe { UnsafeUserOperation::commutative(add) };
    let mut total = [0; 3];
    world.all_reduce_into(&[rank + 1, 1, -rank][..], &mut total[..], &sum);
    assert_eq!(
        total,
        [size * (size + 1) / 2, size, -(size * (size - 1) / 2)]
    );

    let digits = unsafe { UnsafeUserOperation::associative(concatenate) };
    let mine = Digits::of(i64::from(rank) + 1);
    let mut number = Digits::of(0);
    world.all_reduce_into(&mine, &mut number, &digits);
    let expected = (1..=i64::from(size)).fold(0, |n, d| n * 10 + d);
    assert_eq!(number.value, expected, "applied in rank order");
    let mut prefix = Digits::of(0);
    world.scan_into(&mine, &mut prefix, &digits);
    let expected = (1..=i64::from(rank) + 1).fold(0, |n, d| n * 10 + d);
    assert_eq!(prefix.value, expected);
    println!(
        "rank {rank}: sums {total:?}, digits {}, prefix {}",
        number.value, prefix.value
    );

    let mut local = [Digits::of(5), Digits::of(6)];
    collective::reduce_local_into(&[Digits::of(1), Digits::of(2)][..], &mut local[..], &digits);
    assert_eq!((local[0].value, local[1].value), (15, 26));
    let mut bits = 0b1100u16;
    collective::reduce_local_into(&0b1010u16, &mut bits, SystemOperation::bitwise_xor());
    assert_eq!(bits, 0b0110);
}
