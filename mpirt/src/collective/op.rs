//! Reduction operations: the built-in ones (`MPI_SUM`, ...), closures and C-style functions.
//!
//! An operation combines an incoming vector into an accumulating one, element by element:
//! `acc[i] = incoming[i] ∘ acc[i]`, where `incoming` holds the contributions of lower ranks.
//! That is MPI's `(invec, inoutvec)` convention, so a non-commutative operation is applied in
//! rank order.

use std::ffi::{c_int, c_void};
use std::mem::{align_of, size_of, size_of_val};

use crate::datatype::{Datatype, Equivalence};
use crate::environment;
use crate::error::Cause;

/// An operation usable in reductions and scans: a [`SystemOperation`], a `&`[`UserOperation`]
/// or a `&`[`UnsafeUserOperation`].
pub trait Operation {
    /// Whether operands may be combined in any order.
    fn is_commutative(&self) -> bool;

    /// Checks, before any message moves, that the operation is defined for `datatype`.
    #[doc(hidden)]
    fn check(&self, datatype: Datatype) -> Result<(), Cause>;

    /// `acc = incoming ∘ acc`, over whole elements of `datatype`.
    #[doc(hidden)]
    fn apply(&self, datatype: Datatype, incoming: &[u8], acc: &mut [u8]);

    /// How a call's execution holds this operation, given by value: boxed, unless the
    /// operation says a cheaper way.
    #[doc(hidden)]
    fn reduction<'r>(self) -> Reduction<'r>
    where
        Self: Sized + 'r,
    {
        Reduction::Boxed(Box::new(self))
    }

    /// How a call's execution holds this operation, lent for `'r`: boxed (the reference),
    /// unless the operation says a cheaper way.
    #[doc(hidden)]
    fn reduction_lent<'r>(&'r self) -> Reduction<'r> {
        Reduction::Boxed(Box::new(self))
    }
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
    // A reference is held as the operation it lends, for as long as it lends it.
    fn reduction<'r>(self) -> Reduction<'r>
    where
        Self: 'r,
    {
        T::reduction_lent(self)
    }
    fn reduction_lent<'r>(&'r self) -> Reduction<'r> {
        T::reduction_lent(*self)
    }
}

/// A call's reduction as its execution holds it, without allocating for the operations a
/// program names (rsmpi's forms): a built-in one by value, a [`UserOperation`] by reference
/// (the caller lends it for the call), an [`UnsafeUserOperation`] by its reference; only an
/// operation of another type given by value is boxed. Built by [`Operation::reduction`].
#[doc(hidden)]
pub enum Reduction<'r> {
    Builtin(SystemOperation),
    Lent(&'r (dyn Operation + 'r)),
    Unsafe(&'r UnsafeUserOperation),
    Boxed(Box<dyn Operation + 'r>),
}

impl<'r> Reduction<'r> {
    pub(crate) fn get(&self) -> &(dyn Operation + 'r) {
        match self {
            Reduction::Builtin(builtin) => builtin,
            Reduction::Lent(op) => *op,
            Reduction::Unsafe(op) => op,
            Reduction::Boxed(op) => op.as_ref(),
        }
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

    fn reduction<'r>(self) -> Reduction<'r> {
        Reduction::Builtin(self)
    }

    fn reduction_lent<'r>(&'r self) -> Reduction<'r> {
        Reduction::Builtin(*self)
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
        UserOperation::new(false, function)
    }

    /// An operation that is associative and commutative.
    pub fn commutative<F>(function: F) -> Self
    where
        F: Fn(DynBuffer<'_>, DynBufferMut<'_>) + Sync + 'a,
    {
        UserOperation::new(true, function)
    }

    /// An associative operation, commutative if `commutative` says so (rsmpi's argument
    /// order).
    pub fn new<F>(commutative: bool, function: F) -> Self
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
        // The operands are packed: elements of `size` bytes each.
        let count = |bytes: &[u8]| bytes.len() / datatype.size().max(1);
        environment::as_user_code(|| {
            (self.function)(
                DynBuffer::from_parts(incoming, datatype, count(incoming)),
                DynBufferMut::from_parts(acc, datatype, count(acc)),
            )
        })
    }

    fn reduction_lent<'r>(&'r self) -> Reduction<'r> {
        Reduction::Lent(self)
    }
}

/// The C signature of an [`UnsafeUserOperation`]'s function, `MPI_User_function`'s:
/// `(invec, inoutvec, len, datatype)`. The one difference from rsmpi: the last argument
/// points to mpirt's [`Datatype`] where rsmpi's points to a C `MPI_Datatype` handle.
pub type UnsafeUserFunction =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Datatype);

/// An operation defined by a C-style function (rsmpi's `UnsafeUserOperation`), for code
/// written against MPI's C interface; [`UserOperation`] is the safe way. A reference to it
/// is an [`Operation`].
///
/// The function sees the elements' values packed, one after another, as their type lies in
/// memory only where it has no gaps: a view of `f64`s reaches it as `f64`s, but a type with
/// gaps (a derived struct with padding, as a non-`#[repr(C)]` struct often has) would have it
/// walk past them, so a reduction over such a type is refused with
/// [`Cause::UnsupportedOperation`](crate::error::Cause::UnsupportedOperation) naming the type;
/// use a [`UserOperation`] for it.
#[derive(Clone, Copy, Debug)]
pub struct UnsafeUserOperation {
    function: UnsafeUserFunction,
    commutative: bool,
}

impl UnsafeUserOperation {
    /// An associative operation that need not be commutative.
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    pub unsafe fn associative(function: UnsafeUserFunction) -> Self {
        // SAFETY: forwarded from this function's contract.
        unsafe { UnsafeUserOperation::new(false, function) }
    }

    /// An operation that is associative and commutative.
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    pub unsafe fn commutative(function: UnsafeUserFunction) -> Self {
        // SAFETY: forwarded from this function's contract.
        unsafe { UnsafeUserOperation::new(true, function) }
    }

    /// An associative operation, commutative if `commutative` says so. Each reduction step
    /// calls `function(invec, inoutvec, &mut len, &mut datatype)`, which must leave
    /// `invec[i] ∘ inoutvec[i]` in `inoutvec[i]` for the `len` elements of `datatype`.
    ///
    /// # Safety
    /// `function` must be sound to call with two pointers to `len` valid, aligned elements of
    /// the reduction's element type (the datatype says which): it may read both and write
    /// valid elements to the second, but must not write through `invec`, which may be the
    /// caller's send buffer; it must not keep the pointers past the call, nor unwind.
    pub unsafe fn new(commutative: bool, function: UnsafeUserFunction) -> Self {
        UnsafeUserOperation {
            function,
            commutative,
        }
    }
}

// As in rsmpi, a reference is the operation: the one that builds the operation says the
// function is sound, and the reference keeps that promise tied to it.
impl Operation for &UnsafeUserOperation {
    fn is_commutative(&self) -> bool {
        self.commutative
    }
    fn reduction<'r>(self) -> Reduction<'r>
    where
        Self: 'r,
    {
        Reduction::Unsafe(self)
    }
    fn reduction_lent<'r>(&'r self) -> Reduction<'r> {
        Reduction::Unsafe(self)
    }
    // The function casts its pointers to the element type and walks `len` of them, where a
    // reduction hands it the packed values: for a type with gaps those are shorter than
    // `len` elements in memory, so such a type is refused before any message moves.
    fn check(&self, datatype: Datatype) -> Result<(), Cause> {
        if datatype.is_contiguous() {
            return Ok(());
        }
        Err(Cause::UnsupportedOperation {
            operation: "UnsafeUserOperation (its C function takes elements without gaps)",
            type_name: datatype.name(),
        })
    }
    fn apply(&self, datatype: Datatype, incoming: &[u8], acc: &mut [u8]) {
        let element = datatype.size();
        if element == 0 || acc.is_empty() {
            return;
        }
        // The C function casts the pointers to its element type, so they must be aligned
        // for it: to the largest power of two dividing the element size (a type's alignment
        // divides its size), at most 16. Operands that are not (parts of a collective's
        // buffers at odd offsets) are copied to aligned scratch first.
        let align = (1 << element.trailing_zeros()).min(16);
        let aligned = |bytes: &[u8]| (bytes.as_ptr() as usize).is_multiple_of(align);
        if !aligned(incoming) || !aligned(acc) {
            let mut scratch_in = vec![0u128; incoming.len().div_ceil(16)];
            let mut scratch_acc = vec![0u128; acc.len().div_ceil(16)];
            let (scratch_in, scratch_acc) = (
                &mut bytes_of_words(&mut scratch_in)[..incoming.len()],
                &mut bytes_of_words(&mut scratch_acc)[..acc.len()],
            );
            scratch_in.copy_from_slice(incoming);
            scratch_acc.copy_from_slice(acc);
            self.apply(datatype, scratch_in, scratch_acc);
            acc.copy_from_slice(scratch_acc);
            return;
        }
        let mut len = (acc.len() / element) as c_int;
        let mut datatype = datatype;
        // SAFETY: both pointers hold `len` whole, aligned elements of `datatype` (the
        // reduction's operands, each as long as the other); `new`'s caller promised that
        // the function only reads `invec`, writes valid elements to `inoutvec`, and keeps
        // nothing; `len` and `datatype` are locals that outlive the call.
        environment::as_user_code(|| unsafe {
            (self.function)(
                incoming.as_ptr().cast_mut().cast(),
                acc.as_mut_ptr().cast(),
                &mut len,
                &mut datatype,
            )
        })
    }
}

/// The bytes of a scratch buffer of `u128`s.
fn bytes_of_words(words: &mut [u128]) -> &mut [u8] {
    // SAFETY: u128 has no padding and every byte pattern is a u8; the slice borrows `words`
    // exclusively for its whole length in bytes.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), size_of_val(words)) }
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
#[derive(Clone, Copy, Debug)]
pub struct DynBuffer<'b> {
    bytes: &'b [u8],
    datatype: Datatype,
    /// How many elements `bytes` holds: packed, `size` bytes each; in memory, an extent each.
    count: usize,
}

impl<'b> DynBuffer<'b> {
    pub(crate) fn from_parts(bytes: &'b [u8], datatype: Datatype, count: usize) -> Self {
        DynBuffer {
            bytes,
            datatype,
            count,
        }
    }

    pub(crate) fn count_of_parts(&self) -> usize {
        self.count
    }

    pub(crate) fn parts(&self) -> (&'b [u8], Datatype) {
        (self.bytes, self.datatype)
    }

    /// The first byte of the elements, as rsmpi's `as_ptr` gives it.
    pub fn as_ptr(&self) -> *const c_void {
        self.bytes.as_ptr().cast()
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
#[derive(Debug)]
pub struct DynBufferMut<'b> {
    bytes: &'b mut [u8],
    datatype: Datatype,
    /// As [`DynBuffer`]'s.
    count: usize,
}

impl<'b> DynBufferMut<'b> {
    pub(crate) fn from_parts(bytes: &'b mut [u8], datatype: Datatype, count: usize) -> Self {
        DynBufferMut {
            bytes,
            datatype,
            count,
        }
    }

    pub(crate) fn count_of_parts(&self) -> usize {
        self.count
    }

    pub(crate) fn datatype_of_parts(&self) -> Datatype {
        self.datatype
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }

    /// The first byte of the elements, as rsmpi's `as_ptr` gives it.
    pub fn as_ptr(&self) -> *const c_void {
        self.bytes.as_ptr().cast()
    }

    /// The first byte of the elements, as rsmpi's `as_mut_ptr` gives it.
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        self.bytes.as_mut_ptr().cast()
    }

    /// The same elements, read-only, for as long as this borrow.
    pub fn reborrow(&self) -> DynBuffer<'_> {
        DynBuffer::from_parts(&*self.bytes, self.datatype, self.count)
    }

    /// The same elements, for as long as this borrow.
    pub fn reborrow_mut(&mut self) -> DynBufferMut<'_> {
        DynBufferMut::from_parts(&mut *self.bytes, self.datatype, self.count)
    }

    /// The same elements, read-only, for the whole of `'b`.
    pub fn downgrade(self) -> DynBuffer<'b> {
        DynBuffer::from_parts(self.bytes, self.datatype, self.count)
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

    /// Left out of the model checks' build (the feature `model-check`): a user operation runs
    /// as user code (`environment::as_user_code`), which marks the thread's place with
    /// `crate::sync`'s thread-local, shuttle's there, which lives only inside its scheduler.
    #[cfg(not(feature = "model-check"))]
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

    /// `inoutvec[i] += invec[i]` over u32s, as a C program would write it; checks what it
    /// is given.
    #[cfg(not(feature = "model-check"))]
    unsafe extern "C" fn add_u32(
        invec: *mut c_void,
        inoutvec: *mut c_void,
        len: *mut c_int,
        datatype: *mut Datatype,
    ) {
        // SAFETY: the runtime passes `len` aligned u32s at both pointers and valid `len` and
        // `datatype` (what `UnsafeUserOperation::apply` promises).
        unsafe {
            assert_eq!(*datatype, u32::equivalent_datatype());
            assert!((invec as usize).is_multiple_of(4) && (inoutvec as usize).is_multiple_of(4));
            let n = *len as usize;
            let (a, b) = (invec as *const u32, inoutvec as *mut u32);
            for i in 0..n {
                *b.add(i) += *a.add(i);
            }
        }
    }

    /// A call holds the operations a program names without a box (what lets a call of a kept
    /// plan allocate nothing): given by value or by reference, a reference of a reference
    /// included (a blocking call lends its own operation on).
    #[cfg(not(feature = "model-check"))]
    #[test]
    fn calls_hold_the_named_operations_unboxed() {
        let held = |reduction: Reduction<'_>| match reduction {
            Reduction::Builtin(_) => "builtin",
            Reduction::Lent(_) => "lent",
            Reduction::Unsafe(_) => "unsafe",
            Reduction::Boxed(_) => "boxed",
        };
        let sum = SystemOperation::sum();
        assert_eq!(held(sum.reduction()), "builtin");
        assert_eq!(held((&sum).reduction()), "builtin");
        let user = UserOperation::commutative(|_, _| {});
        assert_eq!(held((&user).reduction()), "lent");
        assert_eq!(held((&&user).reduction()), "lent");
        // SAFETY: `add_u32` reads `invec`, writes valid u32s to `inoutvec` and keeps nothing.
        let unsafe_op = unsafe { UnsafeUserOperation::commutative(add_u32) };
        assert_eq!(held((&unsafe_op).reduction()), "unsafe");
        assert_eq!(held((&&unsafe_op).reduction()), "unsafe");
        let lent: &dyn Operation = &user;
        assert_eq!(held(lent.reduction()), "lent");
        // Given by value, an operation that is not built in has nothing else to lend from.
        assert_eq!(held(user.reduction()), "boxed");
    }

    /// Left out of the model checks' build, as `user_operations_see_typed_slices` is.
    #[cfg(not(feature = "model-check"))]
    #[test]
    fn unsafe_user_operations_get_aligned_elements_and_their_datatype() {
        // SAFETY: `add_u32` reads `invec`, writes valid u32s to `inoutvec` and keeps nothing.
        let op = unsafe { UnsafeUserOperation::commutative(add_u32) };
        let op = &op;
        assert!(op.is_commutative());
        let dt = u32::equivalent_datatype();
        let incoming = bytes(&[1u32, 2, 3]);
        // Operands at every offset of a byte buffer: misaligned ones go through scratch.
        for offset in 0..4 {
            let mut storage = vec![0u8; 12 + offset];
            storage[offset..].copy_from_slice(&bytes(&[10u32, 20, 30]));
            let mut shifted_in = vec![0u8; 12 + offset];
            shifted_in[offset..].copy_from_slice(&incoming);
            op.apply(dt, &shifted_in[offset..], &mut storage[offset..]);
            assert_eq!(&storage[offset..], &bytes(&[11u32, 22, 33])[..]);
        }
        let mut acc = bytes(&[5u32]);
        let mut total = 0u32;
        crate::collective::reduce_local_into(&7u32, &mut total, op);
        assert_eq!(total, 7);
        op.apply(dt, &bytes(&[1u32]), &mut acc);
        assert_eq!(acc, bytes(&[6u32]));
    }
}
