//! Reduction operations: the built-in ones (`MPI_SUM`, ...) and closures.
//!
//! An operation combines an incoming vector into an accumulating one, element by element:
//! `acc[i] = incoming[i] ∘ acc[i]`, where `incoming` holds the contributions of lower ranks.
//! That is MPI's `(invec, inoutvec)` convention, so a non-commutative operation is applied in
//! rank order.

use std::mem::{align_of, size_of};

use crate::datatype::{Datatype, Equivalence};
use crate::error::Cause;

/// An operation usable in reductions and scans: a [`SystemOperation`] or a `&`[`UserOperation`].
pub trait Operation {
    /// Whether operands may be combined in any order.
    fn is_commutative(&self) -> bool;

    /// Checks, before any message moves, that the operation is defined for `datatype`.
    #[doc(hidden)]
    fn check(&self, datatype: Datatype) -> Result<(), Cause>;

    /// `acc = incoming ∘ acc`, over whole elements of `datatype`.
    #[doc(hidden)]
    fn apply(&self, datatype: Datatype, incoming: &[u8], acc: &mut [u8]);
}

impl<T: Operation + ?Sized> Operation for &T {
    fn is_commutative(&self) -> bool {
        (**self).is_commutative()
    }
    fn check(&self, datatype: Datatype) -> Result<(), Cause> {
        (**self).check(datatype)
    }
    fn apply(&self, datatype: Datatype, incoming: &[u8], acc: &mut [u8]) {
        (**self).apply(datatype, incoming, acc)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Builtin {
    Sum,
    Product,
    Min,
    Max,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
}

/// A built-in, commutative operation (`MPI_SUM`, `MPI_MAX`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SystemOperation(Builtin);

impl SystemOperation {
    pub fn sum() -> Self {
        SystemOperation(Builtin::Sum)
    }
    pub fn product() -> Self {
        SystemOperation(Builtin::Product)
    }
    pub fn min() -> Self {
        SystemOperation(Builtin::Min)
    }
    pub fn max() -> Self {
        SystemOperation(Builtin::Max)
    }
    pub fn logical_and() -> Self {
        SystemOperation(Builtin::LogicalAnd)
    }
    pub fn logical_or() -> Self {
        SystemOperation(Builtin::LogicalOr)
    }
    pub fn logical_xor() -> Self {
        SystemOperation(Builtin::LogicalXor)
    }
    pub fn bitwise_and() -> Self {
        SystemOperation(Builtin::BitwiseAnd)
    }
    pub fn bitwise_or() -> Self {
        SystemOperation(Builtin::BitwiseOr)
    }
    pub fn bitwise_xor() -> Self {
        SystemOperation(Builtin::BitwiseXor)
    }

    fn name(self) -> &'static str {
        match self.0 {
            Builtin::Sum => "sum",
            Builtin::Product => "product",
            Builtin::Min => "min",
            Builtin::Max => "max",
            Builtin::LogicalAnd => "logical_and",
            Builtin::LogicalOr => "logical_or",
            Builtin::LogicalXor => "logical_xor",
            Builtin::BitwiseAnd => "bitwise_and",
            Builtin::BitwiseOr => "bitwise_or",
            Builtin::BitwiseXor => "bitwise_xor",
        }
    }
}

/// A primitive element that built-in operations know: its bytes in and out, and each
/// operation, `None` where the operation is not defined for it.
trait Element: Copy + Equivalence {
    /// Whether every bit pattern of its size is a value, so that aligned bytes may be viewed
    /// as a slice of it.
    const ANY_BITS: bool = true;
    fn load(bytes: &[u8]) -> Self;
    fn store(self, bytes: &mut [u8]);
    fn combine(op: Builtin, a: Self, b: Self) -> Option<Self>;
}

/// `Element::load` and `store` of a number, in native byte order.
macro_rules! native_bytes {
    ($t:ty) => {
        fn load(bytes: &[u8]) -> Self {
            <$t>::from_ne_bytes(bytes.try_into().expect("one element"))
        }
        fn store(self, bytes: &mut [u8]) {
            bytes.copy_from_slice(&self.to_ne_bytes());
        }
    };
}

macro_rules! integer_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            native_bytes!($t);
            fn combine(op: Builtin, a: Self, b: Self) -> Option<Self> {
                let truth = |x: bool| x as $t;
                Some(match op {
                    Builtin::Sum => a.wrapping_add(b),
                    Builtin::Product => a.wrapping_mul(b),
                    Builtin::Min => a.min(b),
                    Builtin::Max => a.max(b),
                    Builtin::LogicalAnd => truth(a != 0 && b != 0),
                    Builtin::LogicalOr => truth(a != 0 || b != 0),
                    Builtin::LogicalXor => truth((a != 0) != (b != 0)),
                    Builtin::BitwiseAnd => a & b,
                    Builtin::BitwiseOr => a | b,
                    Builtin::BitwiseXor => a ^ b,
                })
            }
        }
    )*};
}

integer_element!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

macro_rules! float_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            native_bytes!($t);
            fn combine(op: Builtin, a: Self, b: Self) -> Option<Self> {
                match op {
                    Builtin::Sum => Some(a + b),
                    Builtin::Product => Some(a * b),
                    Builtin::Min => Some(a.min(b)),
                    Builtin::Max => Some(a.max(b)),
                    _ => None,
                }
            }
        }
    )*};
}

float_element!(f32, f64);

impl Element for bool {
    const ANY_BITS: bool = false;
    fn load(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn store(self, bytes: &mut [u8]) {
        bytes[0] = self as u8;
    }
    fn combine(op: Builtin, a: Self, b: Self) -> Option<Self> {
        match op {
            Builtin::LogicalAnd | Builtin::BitwiseAnd | Builtin::Min => Some(a && b),
            Builtin::LogicalOr | Builtin::BitwiseOr | Builtin::Max => Some(a || b),
            Builtin::LogicalXor | Builtin::BitwiseXor => Some(a != b),
            Builtin::Sum | Builtin::Product => None,
        }
    }
}

/// `acc = incoming ∘ acc`, element by element. Each operation gets a loop of its own, with
/// the operation known inside it, so that the compiler can vectorize it.
fn combine_all<T: Element>(op: Builtin, incoming: &[u8], acc: &mut [u8]) {
    macro_rules! each {
        ($($op:ident),*) => {
            match op {
                $(Builtin::$op => combine_with::<T>(incoming, acc, |a, b| {
                    T::combine(Builtin::$op, a, b)
                }),)*
            }
        };
    }
    each!(
        Sum, Product, Min, Max, LogicalAnd, LogicalOr, LogicalXor, BitwiseAnd, BitwiseOr,
        BitwiseXor
    )
}

#[inline(always)]
fn combine_with<T: Element>(incoming: &[u8], acc: &mut [u8], f: impl Fn(T, T) -> Option<T>) {
    let apply = |a, b| f(a, b).expect("checked before the call");
    if T::ANY_BITS {
        // SAFETY: every bit pattern is a `T` (`ANY_BITS`), and only the aligned middle is used.
        let ((pre_in, inc, post_in), (pre_acc, accs, post_acc)) =
            unsafe { (incoming.align_to::<T>(), acc.align_to_mut::<T>()) };
        if pre_in.is_empty() && post_in.is_empty() && pre_acc.is_empty() && post_acc.is_empty() {
            for (a, b) in inc.iter().zip(accs) {
                *b = apply(*a, *b);
            }
            return;
        }
    }
    let size = size_of::<T>();
    for (a, b) in incoming.chunks_exact(size).zip(acc.chunks_exact_mut(size)) {
        apply(T::load(a), T::load(b)).store(b);
    }
}

/// Calls `$f::<T>($args)` with `T` the primitive type `$datatype` is, or evaluates `$none`.
macro_rules! for_primitive {
    ($datatype:expr, $f:ident $args:tt, $none:expr) => {
        for_primitive!(@types $datatype, $f $args, $none;
            i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64, bool)
    };
    (@types $datatype:expr, $f:ident $args:tt, $none:expr; $($ty:ty),*) => {{
        let datatype = $datatype;
        $(if datatype == <$ty as Equivalence>::equivalent_datatype() {
            $f::<$ty> $args
        } else)* {
            $none
        }
    }};
}

fn defined<T: Element>(op: Builtin) -> bool {
    let zero = T::load(&vec![0u8; size_of::<T>()]);
    T::combine(op, zero, zero).is_some()
}

impl Operation for SystemOperation {
    fn is_commutative(&self) -> bool {
        true
    }

    fn check(&self, datatype: Datatype) -> Result<(), Cause> {
        if for_primitive!(datatype, defined(self.0), false) {
            Ok(())
        } else {
            Err(Cause::UnsupportedOperation {
                operation: self.name(),
                type_name: datatype.name(),
            })
        }
    }

    fn apply(&self, datatype: Datatype, incoming: &[u8], acc: &mut [u8]) {
        for_primitive!(
            datatype,
            combine_all(self.0, incoming, acc),
            unreachable!("{} was checked for {}", self.name(), datatype.name())
        )
    }
}

type UserFunction<'a> = dyn Fn(DynBuffer<'_>, DynBufferMut<'_>) + Sync + 'a;

/// An operation defined by a closure `f(incoming, acc)` that must leave `incoming ∘ acc` in
/// `acc`; it must be associative. A reference to it is an [`Operation`].
pub struct UserOperation<'a> {
    function: Box<UserFunction<'a>>,
    commutative: bool,
}

impl<'a> UserOperation<'a> {
    /// An associative operation that need not be commutative: it is applied in rank order.
    pub fn associative<F>(function: F) -> Self
    where
        F: Fn(DynBuffer<'_>, DynBufferMut<'_>) + Sync + 'a,
    {
        UserOperation::new(function, false)
    }

    /// An operation that is associative and commutative.
    pub fn commutative<F>(function: F) -> Self
    where
        F: Fn(DynBuffer<'_>, DynBufferMut<'_>) + Sync + 'a,
    {
        UserOperation::new(function, true)
    }

    pub fn new<F>(function: F, commutative: bool) -> Self
    where
        F: Fn(DynBuffer<'_>, DynBufferMut<'_>) + Sync + 'a,
    {
        UserOperation {
            function: Box::new(function),
            commutative,
        }
    }
}

impl Operation for UserOperation<'_> {
    fn is_commutative(&self) -> bool {
        self.commutative
    }
    fn check(&self, _datatype: Datatype) -> Result<(), Cause> {
        Ok(())
    }
    fn apply(&self, datatype: Datatype, incoming: &[u8], acc: &mut [u8]) {
        (self.function)(
            DynBuffer {
                bytes: incoming,
                datatype,
            },
            DynBufferMut {
                bytes: acc,
                datatype,
            },
        )
    }
}

/// Whether `bytes` may be seen as a slice of `T`: the element type, the alignment, whole
/// elements, and (for types with a check) valid values.
fn fits<T: Equivalence>(datatype: Datatype, bytes: &[u8]) -> bool {
    // Packed elements with gaps are not `T`s as they lie in memory.
    datatype.is_contiguous()
        && datatype == crate::datatype::datatype_of::<T>()
        && size_of::<T>() != 0
        && (bytes.as_ptr() as usize).is_multiple_of(align_of::<T>())
        && bytes.len().is_multiple_of(size_of::<T>())
        && datatype.is_valid(bytes)
}

/// The incoming operand of a [`UserOperation`]: elements of a type known at run time.
pub struct DynBuffer<'b> {
    bytes: &'b [u8],
    datatype: Datatype,
}

impl<'b> DynBuffer<'b> {
    pub(crate) fn from_parts(bytes: &'b [u8], datatype: Datatype) -> Self {
        DynBuffer { bytes, datatype }
    }

    pub(crate) fn parts(&self) -> (&'b [u8], Datatype) {
        (self.bytes, self.datatype)
    }

    /// The elements as `T`, or `None` if they are of another type.
    pub fn downcast<T: Equivalence>(self) -> Option<&'b [T]> {
        if !fits::<T>(self.datatype, self.bytes) {
            return None;
        }
        // SAFETY: `fits` checked that the bytes are whole, aligned `T`s of `T`'s datatype,
        // valid where `T` has a check; `Equivalence` makes such bytes valid values.
        Some(unsafe {
            std::slice::from_raw_parts(
                self.bytes.as_ptr().cast(),
                self.bytes.len() / size_of::<T>(),
            )
        })
    }
}

/// The accumulating operand of a [`UserOperation`].
pub struct DynBufferMut<'b> {
    bytes: &'b mut [u8],
    datatype: Datatype,
}

impl<'b> DynBufferMut<'b> {
    pub(crate) fn from_parts(bytes: &'b mut [u8], datatype: Datatype) -> Self {
        DynBufferMut { bytes, datatype }
    }

    pub(crate) fn datatype_of_parts(&self) -> Datatype {
        self.datatype
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }

    pub(crate) fn byte_count(&self) -> usize {
        self.bytes.len()
    }

    /// The elements as `T`, or `None` if they are of another type.
    pub fn downcast<T: Equivalence>(self) -> Option<&'b mut [T]> {
        if !fits::<T>(self.datatype, self.bytes) {
            return None;
        }
        let len = self.bytes.len() / size_of::<T>();
        // SAFETY: as in `DynBuffer::downcast`; the bytes are exclusively borrowed for 'b, and
        // whatever `T` values the closure stores there are valid bytes of the datatype.
        Some(unsafe { std::slice::from_raw_parts_mut(self.bytes.as_mut_ptr().cast(), len) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Element>(values: &[T]) -> Vec<u8> {
        let mut out = vec![0u8; std::mem::size_of_val(values)];
        for (v, chunk) in values.iter().zip(out.chunks_exact_mut(size_of::<T>())) {
            v.store(chunk);
        }
        out
    }

    #[test]
    fn builtins_combine_elementwise() {
        let dt = i32::equivalent_datatype();
        let mut acc = bytes(&[5i32, -2, 12]);
        SystemOperation::sum().apply(dt, &bytes(&[1i32, 2, 3]), &mut acc);
        assert_eq!(acc, bytes(&[6i32, 0, 15]));
        SystemOperation::bitwise_xor().apply(dt, &bytes(&[3i32, 3, 3]), &mut acc);
        assert_eq!(acc, bytes(&[5i32, 3, 12]));
        let mut flags = vec![1u8, 0, 1];
        SystemOperation::logical_and().apply(bool::equivalent_datatype(), &[1, 1, 0], &mut flags);
        assert_eq!(flags, vec![1, 0, 0]);
    }

    #[test]
    fn undefined_builtins_are_refused() {
        assert!(SystemOperation::bitwise_or()
            .check(f64::equivalent_datatype())
            .is_err());
        assert!(SystemOperation::sum()
            .check(bool::equivalent_datatype())
            .is_err());
        assert!(SystemOperation::max()
            .check(<[u8; 2]>::equivalent_datatype())
            .is_err());
        assert!(SystemOperation::max()
            .check(f32::equivalent_datatype())
            .is_ok());
    }

    #[test]
    fn user_operations_see_typed_slices() {
        let concat = UserOperation::associative(|a, b| {
            let a: &[u64] = a.downcast().unwrap();
            let b: &mut [u64] = b.downcast().unwrap();
            for (x, y) in a.iter().zip(b) {
                *y += *x * 10;
            }
        });
        let storage = [1u64, 2];
        let mut acc = [3u64, 4];
        // SAFETY: plain u64s viewed as their bytes, for the test only.
        let (inc, acc_bytes) = unsafe {
            (
                std::slice::from_raw_parts(storage.as_ptr().cast::<u8>(), 16),
                std::slice::from_raw_parts_mut(acc.as_mut_ptr().cast::<u8>(), 16),
            )
        };
        concat.apply(u64::equivalent_datatype(), inc, acc_bytes);
        assert_eq!(acc, [13, 24]);
        assert!(!concat.is_commutative());
    }
}
