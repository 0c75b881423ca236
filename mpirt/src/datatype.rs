//! Which Rust types travel as messages, and how buffers of them are seen as bytes.
//!
//! A message is the bytes of its elements. [`Equivalence`] says a type is plain data whose
//! bytes may be sent (no pointers); types whose bytes are not all valid values (`bool`,
//! `char`, structs holding them) carry a check, and a receive of such a type lands in a
//! staging buffer and is checked before the user's buffer sees it.
//!
//! A datatype whose bytes are not one run from the buffer's start (a struct with padding, a
//! [`UserDatatype`] such as a vector, seen through a [`View`]) has a layout: byte blocks in
//! type-map order, an extent and a signature (see `layout.rs`). Its elements are packed into
//! one contiguous message on the way out, and unpacked into the blocks on the way in; bytes
//! outside the blocks (padding, the gaps of a vector) are never read or written.

use std::any::TypeId;
use std::mem::size_of;
use std::sync::Arc;

use crate::error::Cause;

#[cfg(test)]
mod extremes;
pub(crate) mod layout;
pub(crate) mod pack;
mod user;

use layout::Element;
pub(crate) use layout::Layout;
pub use user::{
    address_of, Address, DatatypeRef, DynBuffer, DynBufferMut, MutView, SystemDatatype,
    UncommittedDatatype, UncommittedDatatypeRef, UncommittedUserDatatype, UserDatatype, View,
};

pub use crate::partition::{
    Partition, PartitionMut, Partitioned, PartitionedBuffer, PartitionedBufferMut,
};

/// The datatype traits: `use mpirt::datatype::traits::*;`. (rsmpi's also holds its
/// `Datatype` trait, `AsDatatype`, `Collection`, `Pointer` and `PointerMut`, which are its
/// buffers' C handle and raw pointer: mpirt's [`Buffer`] says the same in one trait.)
pub mod traits {
    pub use super::{
        Buffer, BufferMut, Equivalence, Partitioned, PartitionedBuffer, PartitionedBufferMut,
        UncommittedDatatype,
    };
}

/// The name of datatypes a program builds (`UserDatatype::vector` and friends), which are
/// not the datatype of a Rust type.
const USER_DATATYPE: &str = "user datatype";

/// What one basic element is, as MPI's type matching sees it: Rust types of the same class and
/// size are the same kind (`usize` and `u64` on a 64-bit target, `isize` and `i64`, and the
/// C-named aliases such as `c_ulong`), as rsmpi maps them to the same MPI datatype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A signed integer of this many bytes.
    Signed(u8),
    /// An unsigned integer of this many bytes.
    Unsigned(u8),
    /// A floating-point number of this many bytes.
    Float(u8),
    /// A complex number of two floats, of this many bytes in all.
    Complex(u8),
    Bool,
    Char,
}

/// What a datatype's elements are made of, for matching a send against a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signature {
    /// `count` basic elements of one kind (a number, or an array of numbers).
    Basic { kind: Kind, count: usize },
    /// A type known only by its name, the datatype's (a struct implementing [`Equivalence`]
    /// by hand).
    Named,
    /// A type with a layout, kept in the registry under this id (a derived struct, a user
    /// datatype).
    Layout(u64),
}

/// The element type of a message: its size, what it is made of (its signature, which a
/// matching send and receive share) and, where not every byte pattern is a value, the check a
/// received element must pass.
#[derive(Clone, Copy, Debug)]
pub struct Datatype {
    /// Bytes of data per element: what one element is in a message.
    size: usize,
    name: &'static str,
    check: Option<fn(&[u8]) -> bool>,
    signature: Signature,
    /// Whether elements lie as they are sent (one run of `size` bytes each, back to back):
    /// every type without a layout, and layouts without gaps.
    contiguous: bool,
    /// Whether a layout's elements include checked ones (`bool`, `char`).
    layout_checked: bool,
}

/// Two datatypes are equal when their elements are: `usize` equals `u64` on a 64-bit target,
/// and two layouts are equal when their signatures are.
impl PartialEq for Datatype {
    fn eq(&self, other: &Datatype) -> bool {
        if self.size != other.size {
            return false;
        }
        match (self.signature, other.signature) {
            (Signature::Layout(a), Signature::Layout(b)) if a == b => true,
            // A layout and another type (a duplicate of `i32`, a derived struct of one
            // field) are equal when their signatures are.
            (Signature::Layout(_), _) | (_, Signature::Layout(_)) => {
                match (self.layout(), other.layout()) {
                    (Ok(a), Ok(b)) => a.signature == b.signature,
                    _ => false,
                }
            }
            (Signature::Named, Signature::Named) => self.name == other.name,
            (a, b) => a == b,
        }
    }
}

impl Eq for Datatype {}

impl Datatype {
    /// A type every byte pattern of which is a value, known by its name: it matches only
    /// a type of the same name and size.
    pub const fn plain(size: usize, name: &'static str) -> Datatype {
        Datatype {
            size,
            name,
            check: None,
            signature: Signature::Named,
            contiguous: true,
            layout_checked: false,
        }
    }

    /// A type whose received elements must pass `check` (given one element's bytes), known by
    /// its name.
    pub const fn checked(size: usize, name: &'static str, check: fn(&[u8]) -> bool) -> Datatype {
        Datatype {
            size,
            name,
            check: Some(check),
            signature: Signature::Named,
            contiguous: true,
            layout_checked: false,
        }
    }

    /// `count` basic elements of `kind` in `size` bytes, named `name` in errors.
    const fn basic(
        kind: Kind,
        count: usize,
        size: usize,
        name: &'static str,
        check: Option<fn(&[u8]) -> bool>,
    ) -> Datatype {
        Datatype {
            size,
            name,
            check,
            signature: Signature::Basic { kind, count },
            contiguous: true,
            layout_checked: false,
        }
    }

    /// The datatype of `layout`, kept under a new id until [`layout::unregister`].
    pub(crate) fn of_layout(layout: Layout, name: &'static str) -> Datatype {
        let (size, contiguous, checked) =
            (layout.size, layout.is_contiguous(), layout.needs_check());
        Datatype {
            size,
            name,
            check: None,
            signature: Signature::Layout(layout::register(Arc::new(layout))),
            contiguous,
            layout_checked: checked,
        }
    }

    /// The registry id of this datatype's layout, if it has one.
    pub(crate) fn layout_id(&self) -> Option<u64> {
        match self.signature {
            Signature::Layout(id) => Some(id),
            _ => None,
        }
    }

    /// The kind of this type's elements, when it is made of basic elements of one kind.
    pub fn kind(&self) -> Option<Kind> {
        match self.signature {
            Signature::Basic { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// Whether elements lie in memory as they are sent: one run of bytes each, back to back.
    /// Others are packed and unpacked through their layout.
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    /// This type's layout: its byte blocks, extent and signature.
    pub(crate) fn layout(&self) -> Result<Arc<Layout>, Cause> {
        match self.signature {
            Signature::Basic { kind, count } => Ok(Arc::new(Layout::basic(
                Element::Basic {
                    kind,
                    size: self.size / count.max(1),
                },
                count,
            ))),
            Signature::Named => Ok(Arc::new(Layout::basic(
                Element::Opaque {
                    name: self.name,
                    size: self.size,
                    check: self.check,
                },
                1,
            ))),
            Signature::Layout(id) => layout::lookup(id).ok_or(Cause::FreedDatatype {
                type_name: self.name,
            }),
        }
    }

    /// The datatype and count that type matching and reductions see of `count` elements of
    /// this one: a layout whose basic elements are all of one kind is that many of them (a
    /// vector of `f64` is its `f64`s, as MPI matches by signature), any other type itself.
    /// A contiguous user datatype is no exception: `contiguous(4, i32)` matches four `i32`s,
    /// and so does an array `[i32; 4]`. A contiguous layout of a Rust type (a derived struct
    /// of two `u64`s) stays that type, which a user operation's buffers then downcast to.
    pub(crate) fn matched(self, count: usize) -> (Datatype, usize) {
        // One basic element of `kind` and `size` bytes, `per_element` times per element.
        let (kind, size, per_element) = match self.signature {
            // An array of numbers is its numbers too, so that `[[i32; 2]]` matches
            // `contiguous(2, i32)`, which is `i32`s.
            Signature::Basic {
                kind,
                count: per_element,
            } if per_element > 1 => (kind, self.size / per_element, per_element),
            Signature::Layout(_) if !self.contiguous || self.name == USER_DATATYPE => {
                let Ok(layout) = self.layout() else {
                    return (self, count);
                };
                match layout.signature.single() {
                    Some(Element::Basic { kind, size }) => (kind, size, layout.size / size.max(1)),
                    _ => return (self, count),
                }
            }
            _ => return (self, count),
        };
        let check = match kind {
            Kind::Bool => Some(bool_is_valid as fn(&[u8]) -> bool),
            Kind::Char => Some(char_is_valid as fn(&[u8]) -> bool),
            _ => None,
        };
        let basic = Datatype::basic(kind, 1, size, kind_name(kind), check);
        (basic, count * per_element)
    }

    /// Why a send of this type does not match a receive of `other`: the two types' names, or,
    /// where either is a layout (whose name says little), the first basic element where their
    /// signatures differ.
    pub(crate) fn mismatch(&self, other: &Datatype) -> Cause {
        let type_mismatch = Cause::TypeMismatch {
            send: self.name,
            receive: other.name,
        };
        if self.layout_id().is_none() && other.layout_id().is_none() {
            return type_mismatch;
        }
        match (self.layout(), other.layout()) {
            (Ok(send), Ok(receive)) => Cause::SignatureMismatch {
                element: send.signature.first_difference(&receive.signature),
            },
            (Err(cause), _) | (_, Err(cause)) => cause,
        }
    }

    /// Bytes of the basic element this type is made of, where it is made of one kind (a
    /// struct of two `u64`s: 8), else one element's size. Ranks may name one signature by
    /// different types (a root's pairs, the others' `u64`s), whose sizes differ but whose
    /// basic element is the same: a collective that cuts a buffer into parts cuts at
    /// multiples of this, so that every rank finds the same boundaries. A signature of
    /// several kinds keeps its own size: two types of it whose elements group its kinds
    /// differently still cut apart.
    pub(crate) fn basic_size(&self) -> usize {
        match self.signature {
            Signature::Basic { count, .. } => self.size / count.max(1),
            Signature::Named => self.size,
            Signature::Layout(_) => match self.layout().ok().and_then(|l| l.signature.single()) {
                Some(element) => element.size(),
                None => self.size,
            },
        }
    }

    /// Bytes of data per element: one element's length in a message (for a type with gaps,
    /// less than its extent in memory).
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether a received element must be checked before it becomes a value.
    pub fn needs_check(&self) -> bool {
        self.check.is_some() || self.layout_checked
    }

    /// Whether every element in `bytes` (packed, a whole number of them) is a valid value.
    pub fn is_valid(&self, bytes: &[u8]) -> bool {
        if self.layout_checked {
            return self.layout().is_ok_and(|l| l.is_valid_packed(bytes));
        }
        match self.check {
            None => true,
            Some(check) if self.size == 0 => bytes.is_empty() || check(bytes),
            Some(check) => bytes.chunks_exact(self.size).all(check),
        }
    }

    /// The datatype of a struct `S` (`size_of::<S>()` bytes) whose fields are at the given
    /// offsets, in declaration order: what `#[derive(Equivalence)]` builds, once per type.
    /// Bytes between and after the fields (padding) are not part of it, so they are never
    /// read or sent; a struct whose fields lie back to back in declaration order is sent as
    /// it lies.
    #[doc(hidden)]
    pub fn derived<S: 'static>(name: &'static str, fields: &[(usize, Datatype)]) -> Datatype {
        layout::for_type(TypeId::of::<S>(), || {
            let mut layout = Layout::empty();
            for (offset, field) in fields {
                let field = field
                    .layout()
                    .unwrap_or_else(|cause| panic!("derive(Equivalence) of {name}: {cause}"));
                layout
                    .append(&field, 1, *offset, 0)
                    .unwrap_or_else(|cause| panic!("derive(Equivalence) of {name}: {cause}"));
            }
            layout.set_extent(size_of::<S>());
            Datatype::of_layout(layout, name)
        })
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Signed(1) => "i8",
        Kind::Signed(2) => "i16",
        Kind::Signed(4) => "i32",
        Kind::Signed(8) => "i64",
        Kind::Signed(_) => "i128",
        Kind::Unsigned(1) => "u8",
        Kind::Unsigned(2) => "u16",
        Kind::Unsigned(4) => "u32",
        Kind::Unsigned(8) => "u64",
        Kind::Unsigned(_) => "u128",
        Kind::Float(4) => "f32",
        Kind::Float(_) => "f64",
        Kind::Complex(8) => "Complex<f32>",
        Kind::Complex(_) => "Complex<f64>",
        Kind::Bool => "bool",
        Kind::Char => "char",
    }
}

/// The datatype of `T`'s elements, whatever type its `Equivalence` gives (a [`Datatype`], or
/// a [`UserDatatype`] built on each call, which is built once per type and kept: a send of a
/// `T` then costs a lookup, not a layout registered and freed).
#[doc(hidden)]
#[inline]
pub fn datatype_of<T: Equivalence>() -> Datatype {
    if <T::Out as UncommittedDatatype>::KEPT_PER_TYPE {
        return layout::for_type(TypeId::of::<T>(), || {
            T::equivalent_datatype().element_of::<T>()
        });
    }
    T::equivalent_datatype().element_of::<T>()
}

/// A type whose values are sent as their bytes: `MPI_Datatype` equivalence.
///
/// # Safety
/// The type must be plain data: every byte its datatype's layout covers is initialized
/// (padding outside the layout is never read), it holds no pointers or references, it needs
/// no drop, and a value whose covered bytes pass the datatype's checks is valid. The
/// datatype's extent must be `size_of::<Self>()`. `#[derive(Equivalence)]` checks all of this
/// at compile time.
pub unsafe trait Equivalence: Sized + 'static {
    /// The datatype's type: [`Datatype`] for the types mpirt provides and derives, or
    /// [`UserDatatype`] where a program builds one, as in rsmpi.
    type Out: UncommittedDatatype;
    fn equivalent_datatype() -> Self::Out;
}

macro_rules! plain_equivalence {
    ($class:ident: $($t:ty),*) => {$(
        // SAFETY: primitive numbers have no padding, no pointers, and every bit pattern is a
        // value.
        unsafe impl Equivalence for $t {
            type Out = Datatype;
            fn equivalent_datatype() -> Datatype {
                let size = size_of::<$t>();
                Datatype::basic(Kind::$class(size as u8), 1, size, stringify!($t), None)
            }
        }
    )*};
}

plain_equivalence!(Signed: i8, i16, i32, i64, i128, isize);
plain_equivalence!(Unsigned: u8, u16, u32, u64, u128, usize);
plain_equivalence!(Float: f32, f64);

/// `Equivalence` for `num_complex`'s `Complex<f32>` and `Complex<f64>` (feature `complex`),
/// under rsmpi's module name.
#[cfg(feature = "complex")]
pub mod complex_datatype {
    use super::{Datatype, Equivalence, Kind};

    // SAFETY: a `Complex<T>` is `#[repr(C)]` of two `T`s, real then imaginary, with no
    // padding; every bit pattern of the floats is a value.
    unsafe impl Equivalence for num_complex::Complex<f32> {
        type Out = Datatype;
        fn equivalent_datatype() -> Datatype {
            Datatype::basic(Kind::Complex(8), 1, 8, "Complex<f32>", None)
        }
    }

    // SAFETY: as for `Complex<f32>`.
    unsafe impl Equivalence for num_complex::Complex<f64> {
        type Out = Datatype;
        fn equivalent_datatype() -> Datatype {
            Datatype::basic(Kind::Complex(16), 1, 16, "Complex<f64>", None)
        }
    }
}

/// Tuples of `Equivalence` types: as fields of a derived struct, where rsmpi's derive takes
/// them, and on their own. Laid out as a derived struct is, from the elements' offsets: a
/// tuple's padding is never read or sent.
macro_rules! tuple_equivalence {
    ($($element:ident $index:tt),+) => {
        // SAFETY: every element is `Equivalence` (plain data, checked as its type says); the
        // datatype covers exactly the elements' bytes at their offsets, so padding is never
        // read, and received bytes pass each element's checks.
        unsafe impl<$($element: Equivalence),+> Equivalence for ($($element,)+) {
            type Out = Datatype;
            fn equivalent_datatype() -> Datatype {
                Datatype::derived::<Self>(
                    "tuple",
                    &[$((std::mem::offset_of!(Self, $index), datatype_of::<$element>())),+],
                )
            }
        }
    };
}

tuple_equivalence!(A 0);
tuple_equivalence!(A 0, B 1);
tuple_equivalence!(A 0, B 1, C 2);
tuple_equivalence!(A 0, B 1, C 2, D 3);
tuple_equivalence!(A 0, B 1, C 2, D 3, E 4);
tuple_equivalence!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_equivalence!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_equivalence!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_equivalence!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_equivalence!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_equivalence!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_equivalence!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

fn bool_is_valid(bytes: &[u8]) -> bool {
    bytes[0] <= 1
}

fn char_is_valid(bytes: &[u8]) -> bool {
    let code = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    char::from_u32(code).is_some()
}

// SAFETY: a bool is one initialized byte; received bytes other than 0 and 1 are refused.
unsafe impl Equivalence for bool {
    type Out = Datatype;
    fn equivalent_datatype() -> Datatype {
        Datatype::basic(Kind::Bool, 1, 1, "bool", Some(bool_is_valid))
    }
}

// SAFETY: a char is four initialized bytes; received values that are not Unicode scalar
// values are refused.
unsafe impl Equivalence for char {
    type Out = Datatype;
    fn equivalent_datatype() -> Datatype {
        Datatype::basic(Kind::Char, 1, 4, "char", Some(char_is_valid))
    }
}

fn array_is_valid<T: Equivalence>(bytes: &[u8]) -> bool {
    datatype_of::<T>().is_valid(bytes)
}

// SAFETY: an array has no padding between or around its elements, so it is plain data when
// its element type is; each element is checked as the element type says.
unsafe impl<T: Equivalence, const N: usize> Equivalence for [T; N] {
    type Out = Datatype;
    fn equivalent_datatype() -> Datatype {
        let element = datatype_of::<T>();
        let size = size_of::<[T; N]>();
        let check = match element.needs_check() {
            true => Some(array_is_valid::<T> as fn(&[u8]) -> bool),
            false => None,
        };
        match element.signature {
            // An array of numbers is that many numbers: `[u64; 4]` matches `[usize; 4]`.
            Signature::Basic { kind, count } => {
                Datatype::basic(kind, count * N, size, "array", check)
            }
            // Named after its element, which is what it matches.
            Signature::Named => Datatype {
                size,
                name: element.name,
                check,
                signature: Signature::Named,
                contiguous: true,
                layout_checked: false,
            },
            // An array of structs with a layout: N of them, a struct's extent apart.
            Signature::Layout(_) => layout::for_type(TypeId::of::<[T; N]>(), || {
                let mut layout = Layout::empty();
                let piece = element
                    .layout()
                    .unwrap_or_else(|cause| panic!("the datatype of an array: {cause}"));
                layout
                    .append(&piece, N, 0, piece.extent)
                    .unwrap_or_else(|cause| panic!("the datatype of an array of {N}: {cause}"));
                Datatype::of_layout(layout, "array")
            }),
        }
    }
}

/// Something that can be sent: a run of `Equivalence` elements in memory.
///
/// # Safety
/// `pointer()` must be valid for reads of the span of `count()` elements of `datatype()` (from
/// the pointer to the end of the last element's last block, each element one extent after the
/// last) for as long as `self` is borrowed, and the bytes where the datatype's blocks lie must
/// be initialized; gaps between blocks (padding, the columns a vector skips) are never read.
/// `byte_len()` is the packed length, what a message carries, not the memory spanned.
pub unsafe trait Buffer {
    fn pointer(&self) -> *const u8;
    /// Number of elements.
    fn count(&self) -> usize;
    fn datatype(&self) -> Datatype;
    fn byte_len(&self) -> usize {
        self.count() * self.datatype().size()
    }
    /// The element type and count that collectives match and reduce (see `Datatype::matched`).
    #[doc(hidden)]
    fn matched(&self) -> (Datatype, usize) {
        self.datatype().matched(self.count())
    }
}

/// Something that can be received into.
///
/// # Safety
/// `pointer_mut()` must be valid for writes of the span of `count()` elements of `datatype()`
/// (as for [`Buffer`]) for as long as `self` is mutably borrowed, the bytes where the
/// datatype's blocks lie must be initialized, and any bytes that pass the datatype's check
/// written there must leave valid values; the gaps between blocks are never written.
pub unsafe trait BufferMut {
    fn pointer_mut(&mut self) -> *mut u8;
    fn count(&self) -> usize;
    fn datatype(&self) -> Datatype;
    fn byte_len(&self) -> usize {
        self.count() * self.datatype().size()
    }
    /// The element type and count that collectives match and reduce (see `Datatype::matched`).
    #[doc(hidden)]
    fn matched(&self) -> (Datatype, usize) {
        self.datatype().matched(self.count())
    }
}

// SAFETY: one value, borrowed for the borrow of `self`; `Equivalence` says its bytes are
// initialized.
unsafe impl<T: Equivalence> Buffer for T {
    fn pointer(&self) -> *const u8 {
        (self as *const T).cast()
    }
    fn count(&self) -> usize {
        1
    }
    fn datatype(&self) -> Datatype {
        datatype_of::<T>()
    }
}

// SAFETY: the slice's elements are contiguous and initialized.
unsafe impl<T: Equivalence> Buffer for [T] {
    fn pointer(&self) -> *const u8 {
        self.as_ptr().cast()
    }
    fn count(&self) -> usize {
        self.len()
    }
    fn datatype(&self) -> Datatype {
        datatype_of::<T>()
    }
}

// SAFETY: as for the slice of the vector's initialized elements.
unsafe impl<T: Equivalence> Buffer for Vec<T> {
    fn pointer(&self) -> *const u8 {
        self.as_ptr().cast()
    }
    fn count(&self) -> usize {
        self.len()
    }
    fn datatype(&self) -> Datatype {
        datatype_of::<T>()
    }
}

// SAFETY: one value, exclusively borrowed; `Equivalence` says checked bytes make a value.
unsafe impl<T: Equivalence> BufferMut for T {
    fn pointer_mut(&mut self) -> *mut u8 {
        (self as *mut T).cast()
    }
    fn count(&self) -> usize {
        1
    }
    fn datatype(&self) -> Datatype {
        datatype_of::<T>()
    }
}

// SAFETY: the slice is exclusively borrowed and its elements are contiguous.
unsafe impl<T: Equivalence> BufferMut for [T] {
    fn pointer_mut(&mut self) -> *mut u8 {
        self.as_mut_ptr().cast()
    }
    fn count(&self) -> usize {
        self.len()
    }
    fn datatype(&self) -> Datatype {
        datatype_of::<T>()
    }
}

// SAFETY: as for the slice of the vector's elements (its length, not its capacity).
unsafe impl<T: Equivalence> BufferMut for Vec<T> {
    fn pointer_mut(&mut self) -> *mut u8 {
        self.as_mut_ptr().cast()
    }
    fn count(&self) -> usize {
        self.len()
    }
    fn datatype(&self) -> Datatype {
        datatype_of::<T>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_types_refuse_invalid_bytes() {
        let b = bool::equivalent_datatype();
        assert!(b.is_valid(&[0, 1, 1]));
        assert!(!b.is_valid(&[0, 2]));
        let c = char::equivalent_datatype();
        assert!(c.is_valid(&('x' as u32).to_ne_bytes()));
        assert!(!c.is_valid(&0xD800u32.to_ne_bytes()));
        let a = <[bool; 2]>::equivalent_datatype();
        assert_eq!(a.size(), 2);
        assert!(a.is_valid(&[1, 0, 0, 1]));
        assert!(!a.is_valid(&[1, 0, 0, 7]));
        assert!(!<[u8; 4]>::equivalent_datatype().needs_check());
    }

    #[cfg(feature = "complex")]
    #[test]
    fn complex_numbers_are_their_own_kind() {
        use num_complex::Complex;
        let c64 = Complex::<f64>::equivalent_datatype();
        assert_eq!(c64.size(), 16);
        assert_eq!(c64.kind(), Some(Kind::Complex(16)));
        assert_ne!(c64, <[f64; 2]>::equivalent_datatype());
        assert_ne!(c64, Complex::<f32>::equivalent_datatype());
        assert_eq!(
            <[Complex<f32>; 2]>::equivalent_datatype().kind(),
            Some(Kind::Complex(8))
        );
    }

    /// A type whose `Equivalence` builds a user datatype, counting how often it is asked.
    #[derive(Clone, Copy)]
    #[repr(C)]
    struct Pair {
        first: u32,
        second: u32,
    }

    static PAIR_BUILT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    // SAFETY: two `u32`s without padding, as the datatype says.
    unsafe impl Equivalence for Pair {
        type Out = UserDatatype;
        fn equivalent_datatype() -> UserDatatype {
            PAIR_BUILT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            UserDatatype::contiguous(2, &u32::equivalent_datatype())
        }
    }

    #[test]
    fn a_user_datatype_of_a_rust_type_is_built_once() {
        let first = datatype_of::<Pair>();
        let pairs = [Pair {
            first: 1,
            second: 2,
        }; 3];
        for _ in 0..1000 {
            assert_eq!(Buffer::datatype(&pairs[..]), first);
        }
        let other_thread = std::thread::spawn(datatype_of::<Pair>).join().unwrap();
        assert_eq!(other_thread.layout_id(), first.layout_id());
        assert_eq!(
            PAIR_BUILT.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "equivalent_datatype is asked once, not per use"
        );
        assert_eq!(first.size(), 8);
    }

    #[test]
    fn same_size_integers_of_one_sign_match() {
        assert_eq!(usize::equivalent_datatype(), u64::equivalent_datatype());
        assert_eq!(isize::equivalent_datatype(), i64::equivalent_datatype());
        assert_eq!(
            std::ffi::c_ulong::equivalent_datatype(),
            usize::equivalent_datatype()
        );
        assert_eq!(
            <[usize; 3]>::equivalent_datatype(),
            <[u64; 3]>::equivalent_datatype()
        );
        assert_ne!(u64::equivalent_datatype(), u32::equivalent_datatype());
        assert_ne!(u64::equivalent_datatype(), i64::equivalent_datatype());
        assert_ne!(u64::equivalent_datatype(), f64::equivalent_datatype());
        assert_ne!(i32::equivalent_datatype(), f32::equivalent_datatype());
        assert_ne!(
            <[u64; 2]>::equivalent_datatype(),
            <[u64; 3]>::equivalent_datatype()
        );
    }
}
