//! Accumulates on one element of 1, 2, 4 or 8 bytes with a CPU atomic, for the shared-memory
//! path (`direct.rs` says when it may skip the accumulate lock): integer sum and the bitwise
//! operations are one atomic read-modify-write, replace a swap, no-op a load, and every other
//! operation (min, max, product, the logical ones, any operation on floats or `bool`) a
//! compare-and-swap loop that applies the operation to the value it read. Each is atomic with
//! every other on the element, whatever their operations.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use super::operation::AccumulateOperation;
use crate::collective::SystemOperation;
use crate::datatype::Datatype;

/// Whether an element of `bytes` bytes has a CPU atomic.
pub(super) fn fits(bytes: usize) -> bool {
    matches!(bytes, 1 | 2 | 4 | 8)
}

/// An atomic word and the integer it holds.
trait Word {
    type Int: Copy + Eq;
    fn read(bytes: &[u8]) -> Self::Int;
    fn write(value: Self::Int, bytes: &mut [u8]);
    fn load(&self) -> Self::Int;
    fn swap(&self, value: Self::Int) -> Self::Int;
    fn compare_exchange(&self, current: Self::Int, new: Self::Int) -> Result<Self::Int, Self::Int>;
    fn compare_exchange_weak(
        &self,
        current: Self::Int,
        new: Self::Int,
    ) -> Result<Self::Int, Self::Int>;
    fn fetch_add(&self, value: Self::Int) -> Self::Int;
    fn fetch_and(&self, value: Self::Int) -> Self::Int;
    fn fetch_or(&self, value: Self::Int) -> Self::Int;
    fn fetch_xor(&self, value: Self::Int) -> Self::Int;
}

// Acquire and release on every access: a flush orders the epoch's operations with a full
// fence anyway, and on x86 every locked instruction is one.
macro_rules! word {
    ($($atomic:ty => $int:ty),*) => {$(
        impl Word for $atomic {
            type Int = $int;
            fn read(bytes: &[u8]) -> $int {
                <$int>::from_ne_bytes(bytes.try_into().expect("one element"))
            }
            fn write(value: $int, bytes: &mut [u8]) {
                bytes.copy_from_slice(&value.to_ne_bytes());
            }
            fn load(&self) -> $int {
                <$atomic>::load(self, Ordering::Acquire)
            }
            fn swap(&self, value: $int) -> $int {
                <$atomic>::swap(self, value, Ordering::AcqRel)
            }
            fn compare_exchange(&self, current: $int, new: $int) -> Result<$int, $int> {
                <$atomic>::compare_exchange(self, current, new, Ordering::AcqRel, Ordering::Acquire)
            }
            fn compare_exchange_weak(&self, current: $int, new: $int) -> Result<$int, $int> {
                <$atomic>::compare_exchange_weak(
                    self,
                    current,
                    new,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
            }
            fn fetch_add(&self, value: $int) -> $int {
                <$atomic>::fetch_add(self, value, Ordering::AcqRel)
            }
            fn fetch_and(&self, value: $int) -> $int {
                <$atomic>::fetch_and(self, value, Ordering::AcqRel)
            }
            fn fetch_or(&self, value: $int) -> $int {
                <$atomic>::fetch_or(self, value, Ordering::AcqRel)
            }
            fn fetch_xor(&self, value: $int) -> $int {
                <$atomic>::fetch_xor(self, value, Ordering::AcqRel)
            }
        }
    )*};
}

word!(AtomicU8 => u8, AtomicU16 => u16, AtomicU32 => u32, AtomicU64 => u64);

/// How an operation is done on an element: one instruction, or the loop.
#[derive(Clone, Copy)]
enum Way {
    Add,
    And,
    Or,
    Xor,
    Swap,
    Load,
    Loop,
}

fn way(op: AccumulateOperation, integer: bool) -> Way {
    match op {
        AccumulateOperation::Replace => Way::Swap,
        AccumulateOperation::NoOp => Way::Load,
        AccumulateOperation::System(op) if integer => {
            if op == SystemOperation::sum() {
                Way::Add
            } else if op == SystemOperation::bitwise_and() {
                Way::And
            } else if op == SystemOperation::bitwise_or() {
                Way::Or
            } else if op == SystemOperation::bitwise_xor() {
                Way::Xor
            } else {
                Way::Loop
            }
        }
        AccumulateOperation::System(_) => Way::Loop,
    }
}

/// `*at = incoming ∘ *at` on one element, atomically; `old` gets the value before.
///
/// # Safety
/// `at` must be valid for reads and writes of `incoming.len()` bytes (1, 2, 4 or 8), aligned
/// to them, and accessed meanwhile by nothing but atomics (the accumulate lock's protocol in
/// `direct.rs`). `op` must be defined for `datatype` (checked by the window) and `integer`
/// say whether `datatype` is an integer type.
pub(super) unsafe fn accumulate(
    at: *mut u8,
    op: AccumulateOperation,
    datatype: Datatype,
    integer: bool,
    incoming: &[u8],
    old: Option<&mut [u8]>,
) {
    let how = way(op, integer);
    // SAFETY: forwarded from this function's contract, for the word of the element's size.
    unsafe {
        match incoming.len() {
            1 => on::<AtomicU8>(at, how, op, datatype, incoming, old),
            2 => on::<AtomicU16>(at, how, op, datatype, incoming, old),
            4 => on::<AtomicU32>(at, how, op, datatype, incoming, old),
            8 => on::<AtomicU64>(at, how, op, datatype, incoming, old),
            n => unreachable!("no atomic of {n} bytes (checked by `fits`)"),
        }
    }
}

/// # Safety
/// As for `accumulate`, with `W` the atomic of the element's size.
unsafe fn on<W: Word>(
    at: *mut u8,
    how: Way,
    op: AccumulateOperation,
    datatype: Datatype,
    incoming: &[u8],
    old: Option<&mut [u8]>,
) {
    // SAFETY: `at` is valid and aligned for a `W`, reached only atomically (the contract).
    let word = unsafe { &*at.cast::<W>() };
    let value = W::read(incoming);
    let before = match how {
        Way::Add => word.fetch_add(value),
        Way::And => word.fetch_and(value),
        Way::Or => word.fetch_or(value),
        Way::Xor => word.fetch_xor(value),
        Way::Swap => word.swap(value),
        Way::Load => word.load(),
        Way::Loop => {
            let mut current = word.load();
            let mut next = [0u8; 8];
            let next = &mut next[..incoming.len()];
            loop {
                W::write(current, next);
                op.apply(datatype, incoming, next);
                match word.compare_exchange_weak(current, W::read(next)) {
                    Ok(_) => break current,
                    Err(now) => current = now,
                }
            }
        }
    };
    if let Some(old) = old {
        W::write(before, old);
    }
}

/// Stores `swap` if the element equals `compare` (bitwise), atomically; `old` gets the value
/// before.
///
/// # Safety
/// As for `accumulate`, for `swap.len()` bytes.
pub(super) unsafe fn compare_and_swap(at: *mut u8, compare: &[u8], swap: &[u8], old: &mut [u8]) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match swap.len() {
            1 => cas::<AtomicU8>(at, compare, swap, old),
            2 => cas::<AtomicU16>(at, compare, swap, old),
            4 => cas::<AtomicU32>(at, compare, swap, old),
            8 => cas::<AtomicU64>(at, compare, swap, old),
            n => unreachable!("no atomic of {n} bytes (checked by `fits`)"),
        }
    }
}

/// # Safety
/// As for `compare_and_swap`, with `W` the atomic of the element's size.
unsafe fn cas<W: Word>(at: *mut u8, compare: &[u8], swap: &[u8], old: &mut [u8]) {
    // SAFETY: as in `on`.
    let word = unsafe { &*at.cast::<W>() };
    let before = match word.compare_exchange(W::read(compare), W::read(swap)) {
        Ok(v) | Err(v) => v,
    };
    W::write(before, old);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::datatype_of;

    /// Every way, on each size, against the element-wise operation the lock path applies.
    #[test]
    fn atomics_agree_with_the_element_wise_operations() {
        let ops = [
            AccumulateOperation::System(SystemOperation::sum()),
            AccumulateOperation::System(SystemOperation::product()),
            AccumulateOperation::System(SystemOperation::min()),
            AccumulateOperation::System(SystemOperation::max()),
            AccumulateOperation::System(SystemOperation::bitwise_and()),
            AccumulateOperation::System(SystemOperation::bitwise_or()),
            AccumulateOperation::System(SystemOperation::bitwise_xor()),
            AccumulateOperation::System(SystemOperation::logical_and()),
            AccumulateOperation::System(SystemOperation::logical_or()),
            AccumulateOperation::System(SystemOperation::logical_xor()),
            AccumulateOperation::Replace,
            AccumulateOperation::NoOp,
        ];
        fn check<T: crate::datatype::Equivalence + Copy>(
            ops: &[AccumulateOperation],
            integer: bool,
            start: T,
            incoming: T,
        ) {
            let bytes = |v: &T| {
                // SAFETY: a primitive number's bytes.
                unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
                    .to_vec()
            };
            let datatype = datatype_of::<T>();
            for &op in ops {
                if op.check(datatype).is_err() {
                    continue;
                }
                let mut expected = bytes(&start);
                op.apply(datatype, &bytes(&incoming), &mut expected);
                let mut cell = [0u64; 1];
                let at = cell.as_mut_ptr().cast::<u8>();
                let start_bytes = bytes(&start);
                let mut old = vec![0u8; size_of::<T>()];
                // SAFETY: `cell` is 8 aligned bytes, reached only here.
                unsafe {
                    std::ptr::copy_nonoverlapping(start_bytes.as_ptr(), at, start_bytes.len());
                    accumulate(at, op, datatype, integer, &bytes(&incoming), Some(&mut old));
                }
                // SAFETY: as above.
                let now = unsafe { std::slice::from_raw_parts(at, size_of::<T>()) };
                assert_eq!(now, &expected[..], "{op:?} on {}", datatype.name());
                assert_eq!(old, start_bytes, "{op:?} fetched");
            }
        }
        check(&ops, true, -7i8, 3i8);
        // Signed sums and products wrap at the edges, as the element-wise operation does.
        check(&ops, true, i8::MAX, 1i8);
        check(&ops, true, i8::MIN, -1i8);
        check(&ops, true, i16::MAX, 2i16);
        check(&ops, true, i16::MIN, -1i16);
        check(&ops, true, 300u16, 65000u16);
        check(&ops, true, -70000i32, 12345i32);
        check(&ops, true, u64::MAX - 2, 9u64);
        check(&ops, false, 1.5f32, -2.25f32);
        check(&ops, false, 1e300f64, 3.0f64);
        // Min and max of NaN and of both zeros: the loop gives what the element-wise
        // operation gives, bit for bit.
        check(&ops, false, f64::NAN, 1.0f64);
        check(&ops, false, 1.0f32, f32::NAN);
        check(&ops, false, 0.0f64, -0.0f64);
        check(&ops, false, -0.0f32, 0.0f32);
        check(&ops, false, true, false);
    }

    #[test]
    fn signed_sums_wrap() {
        let mut cell = [i8::MAX];
        let mut old = [0u8];
        let sum = AccumulateOperation::System(SystemOperation::sum());
        let datatype = datatype_of::<i8>();
        // SAFETY: `cell` is an aligned i8 reached only here.
        unsafe {
            accumulate(
                cell.as_mut_ptr().cast(),
                sum,
                datatype,
                true,
                &[1],
                Some(&mut old[..]),
            )
        };
        assert_eq!((cell[0], old[0] as i8), (i8::MIN, i8::MAX));
        let mut cell = [i16::MIN];
        let minus_one = (-1i16).to_ne_bytes();
        // SAFETY: `cell` is an aligned i16 reached only here.
        unsafe {
            accumulate(
                cell.as_mut_ptr().cast(),
                sum,
                datatype_of::<i16>(),
                true,
                &minus_one,
                None,
            )
        };
        assert_eq!(cell[0], i16::MAX);
    }

    #[test]
    fn compare_and_swap_swaps_only_on_equal_bits() {
        let mut cell = [5u32];
        let at = cell.as_mut_ptr().cast::<u8>();
        let mut old = [0u8; 4];
        // SAFETY: `cell` is an aligned u32 reached only here.
        unsafe { compare_and_swap(at, &4u32.to_ne_bytes(), &9u32.to_ne_bytes(), &mut old) };
        assert_eq!((cell[0], u32::from_ne_bytes(old)), (5, 5));
        let at = cell.as_mut_ptr().cast::<u8>();
        // SAFETY: as above.
        unsafe { compare_and_swap(at, &5u32.to_ne_bytes(), &9u32.to_ne_bytes(), &mut old) };
        assert_eq!((cell[0], u32::from_ne_bytes(old)), (9, 5));
    }
}
