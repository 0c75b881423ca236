//! Datatypes a program builds (`MPI_Type_vector` and friends), references to them, and the
//! views that send or receive a buffer through one, as rsmpi has them.
//!
//! Unlike rsmpi, mpirt checks what it is given: negative counts, strides or displacements
//! are refused by the constructors, and a view whose datatype reaches past its buffer, or a
//! receive view whose blocks overlap, is refused where it is made, naming the cause.

use std::marker::PhantomData;

use super::layout::{self, Layout, TooLarge};
use super::{datatype_of, Buffer, BufferMut, Datatype, Equivalence, USER_DATATYPE};
use crate::point_to_point::Count;

pub use crate::collective::{DynBuffer, DynBufferMut};

/// A byte address or displacement (`MPI_Aint`).
pub type Address = isize;

/// The address of `x`, for the displacements of [`UserDatatype::structured`]
/// (`MPI_Get_address`).
pub fn address_of<T>(x: &T) -> Address {
    (x as *const T) as Address
}

/// Something that describes a layout of elements: a basic type's [`Datatype`], a
/// [`UserDatatype`] (committed or not), or a reference to one.
pub trait UncommittedDatatype {
    /// What [`dup`](Self::dup) makes: a `UserDatatype` from a committed type, an
    /// `UncommittedUserDatatype` from an uncommitted one.
    type DuplicatedDatatype;

    /// A new datatype of the same layout, freed on its own (`MPI_Type_dup`).
    fn dup(&self) -> Self::DuplicatedDatatype;

    /// The datatype mpirt works with.
    #[doc(hidden)]
    fn descriptor(&self) -> Datatype;

    /// Whether the datatype of a Rust type whose `Equivalence` returns this is kept once per
    /// type (a user datatype, which `equivalent_datatype` builds on every call), rather than
    /// asked for on every use (a basic type's, a constant).
    #[doc(hidden)]
    const KEPT_PER_TYPE: bool = false;

    /// The datatype of the Rust type `T` whose `Equivalence` returned this.
    #[doc(hidden)]
    #[inline]
    fn element_of<T: 'static>(self) -> Datatype
    where
        Self: Sized,
    {
        self.descriptor()
    }
}

impl UncommittedDatatype for Datatype {
    type DuplicatedDatatype = UserDatatype;
    fn dup(&self) -> UserDatatype {
        UserDatatype(duplicate(*self))
    }
    #[inline]
    fn descriptor(&self) -> Datatype {
        *self
    }
}

impl<D: UncommittedDatatype + ?Sized> UncommittedDatatype for &D {
    type DuplicatedDatatype = D::DuplicatedDatatype;
    fn dup(&self) -> D::DuplicatedDatatype {
        (**self).dup()
    }
    fn descriptor(&self) -> Datatype {
        (**self).descriptor()
    }
}

/// The layout of `datatype`, or a panic naming `constructor` if it was freed.
fn layout_for(constructor: &str, datatype: &impl UncommittedDatatype) -> std::sync::Arc<Layout> {
    datatype
        .descriptor()
        .layout()
        .unwrap_or_else(|cause| panic!("{constructor}: {cause}"))
}

/// `value` as a non-negative count, or a panic naming `constructor` and `what`.
fn non_negative(constructor: &str, what: &str, value: isize) -> usize {
    usize::try_from(value).unwrap_or_else(|_| {
        panic!(
            "{constructor}: {what} is negative ({value}); mpirt takes non-negative counts, \
             strides and displacements"
        )
    })
}

/// The layout `build` makes, or a panic naming `constructor`, the values it was given and
/// what would pass the bytes any buffer can hold: a wrapped offset or extent would let views
/// of the type reach outside their buffers.
fn checked_layout(
    constructor: &str,
    given: impl FnOnce() -> String,
    build: impl FnOnce() -> Result<Layout, TooLarge>,
) -> Layout {
    build().unwrap_or_else(|cause| panic!("{constructor}: {}: {cause}", given()))
}

/// A datatype built from others (`MPI_Type_create_*`), not yet committed. mpirt needs no
/// commit step, but keeps rsmpi's two types so that programs port.
#[derive(Debug)]
pub struct UncommittedUserDatatype(Datatype);

/// A committed [`UncommittedUserDatatype`]: usable in views, sends and receives. Dropping it
/// frees its layout (`MPI_Type_free`); a [`Datatype`] copied out of it and used afterwards is
/// an error naming it freed, never a read of freed memory.
#[derive(Debug)]
pub struct UserDatatype(Datatype);

impl UncommittedUserDatatype {
    fn build(layout: Layout) -> Self {
        UncommittedUserDatatype(Datatype::of_layout(layout, USER_DATATYPE))
    }

    /// `count` elements of `oldtype` back to back (`MPI_Type_contiguous`).
    pub fn contiguous<D: UncommittedDatatype>(count: Count, oldtype: &D) -> Self {
        const NAME: &str = "UserDatatype::contiguous";
        let count = non_negative(NAME, "the count", count as isize);
        let old = layout_for(NAME, oldtype);
        let layout = checked_layout(
            NAME,
            || format!("{count} elements of extent {}", old.extent),
            || {
                let mut layout = Layout::empty();
                layout.append(&old, count, 0, old.extent)?;
                Ok(layout)
            },
        );
        Self::build(layout)
    }

    /// `count` blocks of `blocklength` elements, a block starting every `stride` elements
    /// (`MPI_Type_vector`).
    pub fn vector<D: UncommittedDatatype>(
        count: Count,
        blocklength: Count,
        stride: Count,
        oldtype: &D,
    ) -> Self {
        const NAME: &str = "UserDatatype::vector";
        let old = layout_for(NAME, oldtype);
        let elements = non_negative(NAME, "the stride", stride as isize);
        let stride =
            layout::mul(elements, old.extent, "the stride in bytes").unwrap_or_else(|cause| {
                panic!(
                    "{NAME}: a stride of {elements} elements of extent {}: {cause}",
                    old.extent
                )
            });
        Self::strided(NAME, count, blocklength, stride as Address, &old)
    }

    /// As [`vector`](Self::vector), with the stride in bytes (`MPI_Type_create_hvector`).
    pub fn heterogeneous_vector<D: UncommittedDatatype>(
        count: Count,
        blocklength: Count,
        stride: Address,
        oldtype: &D,
    ) -> Self {
        const NAME: &str = "UserDatatype::heterogeneous_vector";
        let old = layout_for(NAME, oldtype);
        Self::strided(NAME, count, blocklength, stride, &old)
    }

    fn strided(
        name: &str,
        count: Count,
        blocklength: Count,
        stride: Address,
        old: &Layout,
    ) -> Self {
        let count = non_negative(name, "the count", count as isize);
        let blocklength = non_negative(name, "the block length", blocklength as isize);
        let stride = non_negative(name, "the stride", stride);
        let layout = checked_layout(
            name,
            || {
                format!(
                    "{count} blocks of {blocklength} elements of extent {}, {stride} bytes apart",
                    old.extent
                )
            },
            || {
                // No blocks: empty, however long the block it does not have would be.
                let mut layout = Layout::empty();
                if count == 0 {
                    return Ok(layout);
                }
                // One block, repeated: the blocks of a vector whose blocks touch merge into one.
                let mut block = Layout::empty();
                block.append(old, blocklength, 0, old.extent)?;
                layout.append(&block, count, 0, stride)?;
                Ok(layout)
            },
        );
        Self::build(layout)
    }

    /// Blocks of `blocklengths[i]` elements at `displacements[i]` elements
    /// (`MPI_Type_indexed`).
    pub fn indexed<D: UncommittedDatatype>(
        blocklengths: &[Count],
        displacements: &[Count],
        oldtype: &D,
    ) -> Self {
        const NAME: &str = "UserDatatype::indexed";
        let old = layout_for(NAME, oldtype);
        let displacements: Vec<Address> = displacements
            .iter()
            .map(|&d| {
                let elements = non_negative(NAME, "a displacement", d as isize);
                let bytes = layout::mul(elements, old.extent, "a displacement in bytes")
                    .unwrap_or_else(|cause| {
                        panic!(
                            "{NAME}: a displacement of {elements} elements of extent {}: {cause}",
                            old.extent
                        )
                    });
                bytes as Address
            })
            .collect();
        Self::blocks(NAME, blocklengths, &displacements, &old)
    }

    /// As [`indexed`](Self::indexed), with displacements in bytes
    /// (`MPI_Type_create_hindexed`).
    pub fn heterogeneous_indexed<D: UncommittedDatatype>(
        blocklengths: &[Count],
        displacements: &[Address],
        oldtype: &D,
    ) -> Self {
        const NAME: &str = "UserDatatype::heterogeneous_indexed";
        let old = layout_for(NAME, oldtype);
        Self::blocks(NAME, blocklengths, displacements, &old)
    }

    /// Blocks of `blocklength` elements at `displacements[i]` elements
    /// (`MPI_Type_create_indexed_block`).
    pub fn indexed_block<D: UncommittedDatatype>(
        blocklength: Count,
        displacements: &[Count],
        oldtype: &D,
    ) -> Self {
        let blocklengths = vec![blocklength; displacements.len()];
        Self::indexed(&blocklengths, displacements, oldtype)
    }

    /// As [`indexed_block`](Self::indexed_block), with displacements in bytes
    /// (`MPI_Type_create_hindexed_block`).
    pub fn heterogeneous_indexed_block<D: UncommittedDatatype>(
        blocklength: Count,
        displacements: &[Address],
        oldtype: &D,
    ) -> Self {
        let blocklengths = vec![blocklength; displacements.len()];
        Self::heterogeneous_indexed(&blocklengths, displacements, oldtype)
    }

    fn blocks(name: &str, blocklengths: &[Count], displacements: &[Address], old: &Layout) -> Self {
        assert_eq!(
            blocklengths.len(),
            displacements.len(),
            "{name}: {} block lengths but {} displacements",
            blocklengths.len(),
            displacements.len()
        );
        let mut layout = Layout::empty();
        for (i, (&length, &displacement)) in blocklengths.iter().zip(displacements).enumerate() {
            let length = non_negative(name, "a block length", length as isize);
            let displacement = non_negative(name, "a displacement", displacement);
            layout
                .append(old, length, displacement, old.extent)
                .unwrap_or_else(|cause| {
                    panic!(
                        "{name}: block {i} of {length} elements of extent {} at byte \
                         {displacement}: {cause}",
                        old.extent
                    )
                });
        }
        Self::build(layout)
    }

    /// Blocks of `blocklengths[i]` elements of `types[i]` at byte `displacements[i]`
    /// (`MPI_Type_create_struct`); the extent is rounded up to the largest element's
    /// alignment, as MPI does, so that it matches a Rust struct's size.
    pub fn structured<D: UncommittedDatatype>(
        blocklengths: &[Count],
        displacements: &[Address],
        types: &[D],
    ) -> Self {
        const NAME: &str = "UserDatatype::structured";
        assert!(
            blocklengths.len() == displacements.len() && blocklengths.len() == types.len(),
            "{NAME}: {} block lengths, {} displacements and {} types: they must be as many",
            blocklengths.len(),
            displacements.len(),
            types.len()
        );
        let mut layout = Layout::empty();
        for (i, ((&length, &displacement), datatype)) in blocklengths
            .iter()
            .zip(displacements)
            .zip(types)
            .enumerate()
        {
            let old = layout_for(NAME, datatype);
            let length = non_negative(NAME, "a block length", length as isize);
            let displacement = non_negative(NAME, "a displacement", displacement);
            layout
                .append(&old, length, displacement, old.extent)
                .unwrap_or_else(|cause| {
                    panic!(
                        "{NAME}: block {i} of {length} elements of extent {} at byte \
                         {displacement}: {cause}",
                        old.extent
                    )
                });
        }
        layout.round_extent().unwrap_or_else(|cause| {
            panic!(
                "{NAME}: an extent of {} bytes rounded to an alignment of {}: {cause}",
                layout.extent, layout.align
            )
        });
        Self::build(layout)
    }

    /// Commits the datatype (`MPI_Type_commit`).
    pub fn commit(self) -> UserDatatype {
        let datatype = self.0;
        std::mem::forget(self);
        UserDatatype(datatype)
    }

    pub fn as_ref(&self) -> UncommittedDatatypeRef<'_> {
        UncommittedDatatypeRef(self.0, PhantomData)
    }
}

/// A copy of `datatype` under an id of its own, freed with it (`MPI_Type_dup`).
fn duplicate(datatype: Datatype) -> Datatype {
    duplicate_named(datatype, USER_DATATYPE)
}

/// A copy of `datatype` under an id of its own, named `name`.
fn duplicate_named(datatype: Datatype, name: &'static str) -> Datatype {
    let layout = datatype
        .layout()
        .unwrap_or_else(|cause| panic!("duplicating a user datatype: {cause}"));
    Datatype::of_layout((*layout).clone(), name)
}

impl Clone for UncommittedUserDatatype {
    fn clone(&self) -> Self {
        UncommittedUserDatatype(duplicate(self.0))
    }
}

impl Clone for UserDatatype {
    fn clone(&self) -> Self {
        UserDatatype(duplicate(self.0))
    }
}

impl Drop for UncommittedUserDatatype {
    fn drop(&mut self) {
        layout::unregister(self.0.layout_id().expect("a user datatype has a layout"));
    }
}

impl Drop for UserDatatype {
    fn drop(&mut self) {
        layout::unregister(self.0.layout_id().expect("a user datatype has a layout"));
    }
}

macro_rules! committed_constructors {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*);)*) => {
        impl UserDatatype {
            $(
                $(#[$doc])*
                pub fn $name<D: UncommittedDatatype>($($arg: $ty,)* oldtype: &D) -> UserDatatype {
                    UncommittedUserDatatype::$name($($arg,)* oldtype).commit()
                }
            )*
        }
    };
}

committed_constructors! {
    /// A committed [`UncommittedUserDatatype::contiguous`].
    fn contiguous(count: Count);
    /// A committed [`UncommittedUserDatatype::vector`].
    fn vector(count: Count, blocklength: Count, stride: Count);
    /// A committed [`UncommittedUserDatatype::heterogeneous_vector`].
    fn heterogeneous_vector(count: Count, blocklength: Count, stride: Address);
    /// A committed [`UncommittedUserDatatype::indexed`].
    fn indexed(blocklengths: &[Count], displacements: &[Count]);
    /// A committed [`UncommittedUserDatatype::heterogeneous_indexed`].
    fn heterogeneous_indexed(blocklengths: &[Count], displacements: &[Address]);
    /// A committed [`UncommittedUserDatatype::indexed_block`].
    fn indexed_block(blocklength: Count, displacements: &[Count]);
    /// A committed [`UncommittedUserDatatype::heterogeneous_indexed_block`].
    fn heterogeneous_indexed_block(blocklength: Count, displacements: &[Address]);
}

impl UserDatatype {
    /// A committed [`UncommittedUserDatatype::structured`].
    pub fn structured<D: UncommittedDatatype>(
        blocklengths: &[Count],
        displacements: &[Address],
        types: &[D],
    ) -> UserDatatype {
        UncommittedUserDatatype::structured(blocklengths, displacements, types).commit()
    }

    pub fn as_ref(&self) -> DatatypeRef<'_> {
        DatatypeRef(self.0, PhantomData)
    }
}

impl UncommittedDatatype for UserDatatype {
    type DuplicatedDatatype = UserDatatype;
    fn dup(&self) -> UserDatatype {
        self.clone()
    }
    fn descriptor(&self) -> Datatype {
        self.0
    }

    const KEPT_PER_TYPE: bool = true;

    /// A copy of the layout that outlives `self`, which `datatype_of` keeps for `T`, checked to
    /// step as an array of `T` does.
    fn element_of<T: 'static>(self) -> Datatype {
        // An array of `T` steps by its size, so elements sent back to back must too.
        let layout = layout_for("Equivalence", &self);
        let extent = layout.extent;
        assert_eq!(
            extent,
            size_of::<T>(),
            "Equivalence for {}: the datatype's extent is {extent} bytes but the type's size is {}",
            std::any::type_name::<T>(),
            size_of::<T>()
        );
        // Within one `T`: a slice's views are checked against its elements' extents, so a
        // block past them (an hindexed block at byte 4 of a 4-byte type) would reach past
        // the slice.
        assert!(
            layout.lies_within_extent(),
            "Equivalence for {}: the datatype's blocks reach {} bytes from a lower bound above \
             byte 0 or past the type's {extent} bytes",
            std::any::type_name::<T>(),
            memory_len(1, &self.0)
        );
        // Each byte of a `T` at most once: a receive into a slice of them must not write the
        // same bytes twice, and so a slice's packed size stays within its memory.
        if let Some((first, second)) = layout.overlap(2) {
            panic!(
                "Equivalence for {}: the datatype's blocks at bytes {first} and {second} overlap",
                std::any::type_name::<T>()
            );
        }
        // Named after `T`: the datatype of a Rust type, which a user operation's buffers
        // are of (see `Datatype::matched`).
        duplicate_named(self.0, std::any::type_name::<T>())
    }
}

impl UncommittedDatatype for UncommittedUserDatatype {
    type DuplicatedDatatype = UncommittedUserDatatype;
    fn dup(&self) -> UncommittedUserDatatype {
        self.clone()
    }
    fn descriptor(&self) -> Datatype {
        self.0
    }
}

/// A reference to a committed datatype, valid while it lives.
#[derive(Clone, Copy, Debug)]
pub struct DatatypeRef<'a>(Datatype, PhantomData<&'a UserDatatype>);

/// A reference to a datatype, committed or not.
#[derive(Clone, Copy, Debug)]
pub struct UncommittedDatatypeRef<'a>(Datatype, PhantomData<&'a UserDatatype>);

/// A basic type's datatype (`MPI_INT` and friends): what `equivalent_datatype` returns for
/// numbers, `bool` and `char`.
pub type SystemDatatype = Datatype;

impl UncommittedDatatype for DatatypeRef<'_> {
    type DuplicatedDatatype = UserDatatype;
    fn dup(&self) -> UserDatatype {
        UserDatatype(duplicate(self.0))
    }
    fn descriptor(&self) -> Datatype {
        self.0
    }
}

impl UncommittedDatatype for UncommittedDatatypeRef<'_> {
    type DuplicatedDatatype = UncommittedUserDatatype;
    fn dup(&self) -> UncommittedUserDatatype {
        UncommittedUserDatatype(duplicate(self.0))
    }
    fn descriptor(&self) -> Datatype {
        self.0
    }
}

impl<'a> From<DatatypeRef<'a>> for UncommittedDatatypeRef<'a> {
    fn from(datatype: DatatypeRef<'a>) -> Self {
        UncommittedDatatypeRef(datatype.0, PhantomData)
    }
}

impl<'a> From<&'a UserDatatype> for DatatypeRef<'a> {
    fn from(datatype: &'a UserDatatype) -> Self {
        datatype.as_ref()
    }
}

// rsmpi's `SystemDatatype` is a `DatatypeRef<'static>`, so a basic type's datatype converts as
// a reference does (`bool::equivalent_datatype().into()` in a `structured` call).
impl From<Datatype> for DatatypeRef<'_> {
    fn from(datatype: Datatype) -> Self {
        DatatypeRef(datatype, PhantomData)
    }
}

impl From<Datatype> for UncommittedDatatypeRef<'_> {
    fn from(datatype: Datatype) -> Self {
        UncommittedDatatypeRef(datatype, PhantomData)
    }
}

impl<'a> From<&'a UserDatatype> for UncommittedDatatypeRef<'a> {
    fn from(datatype: &'a UserDatatype) -> Self {
        datatype.as_ref().into()
    }
}

impl<'a> From<&'a UncommittedUserDatatype> for UncommittedDatatypeRef<'a> {
    fn from(datatype: &'a UncommittedUserDatatype) -> Self {
        datatype.as_ref()
    }
}

/// A view of `count` elements of a datatype over a buffer, to send (`MPI_Send(buf, count,
/// datatype)`).
pub struct View<'d, 'b, D: UncommittedDatatype, B: Buffer + ?Sized> {
    datatype: &'d D,
    count: Count,
    buffer: &'b B,
}

/// A view of `count` elements of a datatype over a buffer, to receive into.
pub struct MutView<'d, 'b, D: UncommittedDatatype, B: BufferMut + ?Sized> {
    datatype: &'d D,
    count: Count,
    buffer: &'b mut B,
}

/// Checks that `count` elements of `datatype` lie within a buffer of `bytes` bytes (and, for a
/// receive, that no two blocks overlap), else panics naming `view` and the cause.
fn check_view(view: &str, datatype: &Datatype, count: Count, bytes: usize, receive: bool) {
    let count = non_negative(view, "the count", count as isize);
    let layout = datatype
        .layout()
        .unwrap_or_else(|cause| panic!("{view}: {cause}"));
    let span = layout.span(count).unwrap_or_else(|cause| {
        panic!(
            "{view}: {count} elements of a datatype of extent {}: {cause}",
            layout.extent
        )
    });
    assert!(
        span <= bytes,
        "{view}: {count} elements of the datatype reach {span} bytes into the buffer, which \
         holds {bytes}"
    );
    // What a message of them carries (more than the span where blocks overlap in a send).
    if let Err(cause) = layout.packed_len(count) {
        panic!(
            "{view}: {count} elements of a datatype of {} bytes each: {cause}",
            layout.size
        );
    }
    if receive {
        if let Some((first, second)) = layout.overlap(count) {
            panic!(
                "{view}: the datatype's blocks at bytes {first} and {second} overlap: a receive \
                 would write the same bytes twice"
            );
        }
    }
}

/// The bytes from a buffer's start that its `count` elements of `datatype` reach: up to the
/// last block, not a whole extent, since a view over a view may only use what the inner
/// view's blocks cover (a struct of an `i32` and a `u8` has extent 8 but ends at byte 5).
fn memory_len(count: usize, datatype: &Datatype) -> usize {
    let span = match datatype.layout() {
        Ok(layout) => layout.span(count),
        Err(_) => layout::mul(count, datatype.size(), "the buffer's bytes"),
    };
    // A buffer in memory spans at most `isize::MAX` bytes, and so does a view checked here:
    // this is a buffer whose `Buffer` implementation is wrong.
    span.unwrap_or_else(|cause| panic!("a view over a buffer of {count} elements: {cause}"))
}

impl<'d, 'b, D: UncommittedDatatype, B: Buffer + ?Sized> View<'d, 'b, D, B> {
    /// `count` elements of `datatype` over `buffer`.
    ///
    /// # Safety
    /// Kept `unsafe` as in rsmpi. mpirt checks what rsmpi leaves to the caller: a datatype
    /// reaching past the buffer's elements, or a negative count, panics here naming the cause.
    /// The caller must still promise what mpirt cannot see: the datatype's blocks cover only
    /// initialized bytes of the buffer (never padding inside its elements), and each basic
    /// element of the datatype lies where the buffer's element type holds a value of that
    /// type, so that what is sent is a valid value.
    pub unsafe fn with_count_and_datatype(
        buffer: &'b B,
        count: Count,
        datatype: &'d D,
    ) -> View<'d, 'b, D, B> {
        let bytes = memory_len(buffer.count(), &buffer.datatype());
        check_view("View", &datatype.descriptor(), count, bytes, false);
        View {
            datatype,
            count,
            buffer,
        }
    }
}

impl<'d, 'b, D: UncommittedDatatype, B: BufferMut + ?Sized> MutView<'d, 'b, D, B> {
    /// `count` elements of `datatype` over `buffer`.
    ///
    /// # Safety
    /// Kept `unsafe` as in rsmpi. mpirt checks what rsmpi leaves to the caller: a datatype
    /// reaching past the buffer's elements, blocks that overlap, or a negative count, panics
    /// here naming the cause. The caller must still promise what mpirt cannot see: the
    /// datatype's blocks cover only bytes of the buffer's elements that hold values (never
    /// padding), and each basic element of the datatype lies where the buffer's element type
    /// holds a value of that type, so that any value received there leaves a valid element.
    pub unsafe fn with_count_and_datatype(
        buffer: &'b mut B,
        count: Count,
        datatype: &'d D,
    ) -> MutView<'d, 'b, D, B> {
        let bytes = memory_len(buffer.count(), &buffer.datatype());
        check_view("MutView", &datatype.descriptor(), count, bytes, true);
        MutView {
            datatype,
            count,
            buffer,
        }
    }
}

// SAFETY: the view was checked to lie within the buffer, whose bytes `Buffer` says are
// initialized and borrowed for as long as the view; the layout is what is read.
unsafe impl<D: UncommittedDatatype, B: Buffer + ?Sized> Buffer for View<'_, '_, D, B> {
    fn pointer(&self) -> *const u8 {
        self.buffer.pointer()
    }
    fn count(&self) -> usize {
        self.count as usize
    }
    fn datatype(&self) -> Datatype {
        self.datatype.descriptor()
    }
}

// SAFETY: as for `View`; the blocks do not overlap, and what is written there are values of
// the datatype's basic elements, which the buffer's element type is made of (the caller's
// promise in `with_count_and_datatype`).
unsafe impl<D: UncommittedDatatype, B: BufferMut + ?Sized> BufferMut for MutView<'_, '_, D, B> {
    fn pointer_mut(&mut self) -> *mut u8 {
        self.buffer.pointer_mut()
    }
    fn count(&self) -> usize {
        self.count as usize
    }
    fn datatype(&self) -> Datatype {
        self.datatype.descriptor()
    }
}

// SAFETY: as for `View`: a mutable view is read too, as the send side of a send-receive-
// replace or the incoming operand of a local reduction, and as in rsmpi it is a `Buffer`.
unsafe impl<D: UncommittedDatatype, B: Buffer + BufferMut + ?Sized> Buffer
    for MutView<'_, '_, D, B>
{
    fn pointer(&self) -> *const u8 {
        self.buffer.pointer()
    }
    fn count(&self) -> usize {
        BufferMut::count(self)
    }
    fn datatype(&self) -> Datatype {
        BufferMut::datatype(self)
    }
}

impl<'b> DynBuffer<'b> {
    /// A buffer of `T`s whose type is known at run time.
    pub fn new<T: Equivalence>(buf: &'b [T]) -> Self {
        // SAFETY: `Equivalence` says the slice's bytes are initialized.
        let bytes =
            unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), std::mem::size_of_val(buf)) };
        DynBuffer::from_parts(bytes, datatype_of::<T>(), buf.len())
    }

    /// Whether the elements are `T`s.
    pub fn is<T: Equivalence>(&self) -> bool {
        self.parts().1 == datatype_of::<T>()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.count_of_parts()
    }

    pub fn is_empty(&self) -> bool {
        self.parts().0.is_empty()
    }
}

impl<'b> DynBufferMut<'b> {
    /// A buffer of `T`s whose type is known at run time.
    pub fn new<T: Equivalence>(buf: &'b mut [T]) -> Self {
        let (len, count) = (std::mem::size_of_val(buf), buf.len());
        // SAFETY: `Equivalence` says the slice's bytes are initialized; the slice is
        // exclusively borrowed for `'b`, and what is written through it must be values of
        // `T`'s datatype, as `BufferMut` requires of every receive.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast(), len) };
        DynBufferMut::from_parts(bytes, datatype_of::<T>(), count)
    }

    /// Whether the elements are `T`s.
    pub fn is<T: Equivalence>(&self) -> bool {
        self.datatype_of_parts() == datatype_of::<T>()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        BufferMut::count(self)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// SAFETY: the bytes are exclusively borrowed for the buffer's life; what a receive writes
// there passes the datatype's checks, which `DynBufferMut::new`'s `T` makes valid values.
unsafe impl BufferMut for DynBufferMut<'_> {
    fn pointer_mut(&mut self) -> *mut u8 {
        self.bytes_mut().as_mut_ptr()
    }
    fn count(&self) -> usize {
        self.count_of_parts()
    }
    fn datatype(&self) -> Datatype {
        self.datatype_of_parts()
    }
}

// SAFETY: the bytes are borrowed for the buffer's life and initialized (`new` took them
// from initialized `T`s); sending from them only reads them, as rsmpi's `Buffer` impl does.
unsafe impl Buffer for DynBufferMut<'_> {
    fn pointer(&self) -> *const u8 {
        self.as_ptr().cast()
    }
    fn count(&self) -> usize {
        self.count_of_parts()
    }
    fn datatype(&self) -> Datatype {
        self.datatype_of_parts()
    }
}

// SAFETY: the bytes are borrowed for the buffer's life and initialized.
unsafe impl Buffer for DynBuffer<'_> {
    fn pointer(&self) -> *const u8 {
        self.parts().0.as_ptr()
    }
    fn count(&self) -> usize {
        self.len()
    }
    fn datatype(&self) -> Datatype {
        self.parts().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_basic_types_datatype_converts_to_references_as_rsmpis_system_datatype_does() {
        let uncommitted: UncommittedDatatypeRef<'_> = bool::equivalent_datatype().into();
        let committed: DatatypeRef<'_> = u16::equivalent_datatype().into();
        assert_eq!(uncommitted.descriptor(), bool::equivalent_datatype());
        assert_eq!(committed.descriptor(), u16::equivalent_datatype());
    }

    #[test]
    fn tuples_are_laid_out_from_their_elements_offsets() {
        let pair = <(u8, f64)>::equivalent_datatype();
        // 7 bytes of padding are not part of it.
        assert_eq!(pair.size(), 9);
        assert!(!pair.is_contiguous());
        assert_eq!(<(u32, u32)>::equivalent_datatype().size(), 8);
    }

    fn extent(datatype: &UserDatatype) -> usize {
        layout_for("test", datatype).extent
    }

    #[test]
    fn a_struct_of_an_opaque_type_steps_as_rust_lays_it_out() {
        #[repr(C)]
        struct TwelveThenCount {
            name: [u8; 12],
            count: u32,
        }
        let twelve = UserDatatype::structured(
            &[1, 1],
            &[0, 12],
            &[
                Datatype::plain(12, "twelve bytes"),
                u32::equivalent_datatype(),
            ],
        );
        assert_eq!(extent(&twelve), size_of::<TwelveThenCount>());
    }

    #[cfg(feature = "complex")]
    #[test]
    fn a_struct_of_a_complex_number_steps_as_rust_lays_it_out() {
        use num_complex::Complex;
        #[repr(C)]
        struct ComplexThenCount {
            value: Complex<f64>,
            count: u32,
        }
        let complex = UserDatatype::structured(
            &[1, 1],
            &[0, 16],
            &[
                Complex::<f64>::equivalent_datatype(),
                u32::equivalent_datatype(),
            ],
        );
        assert_eq!(extent(&complex), size_of::<ComplexThenCount>());
    }

    #[test]
    #[should_panic(
        expected = "UserDatatype::heterogeneous_indexed: block 1 of 1 elements of \
                               extent 1 at byte 9223372036854775807: the end of the last block \
                               would pass"
    )]
    fn a_displacement_at_the_end_of_memory_is_refused() {
        // Before the checks, its extent (2^63) made the span of two elements wrap to 0, so a
        // view of them over an empty buffer passed and a send read 2^63 bytes past it.
        UserDatatype::heterogeneous_indexed(&[1, 1], &[0, isize::MAX], &u8::equivalent_datatype());
    }

    #[test]
    #[should_panic(
        expected = "UserDatatype::vector: a stride of 2147483647 elements of extent \
                               17179869176: the stride in bytes would pass"
    )]
    fn a_stride_in_elements_past_memory_is_refused() {
        let big = UserDatatype::contiguous(Count::MAX, &u32::equivalent_datatype());
        let bigger = UserDatatype::contiguous(2, &big);
        UserDatatype::vector(2, 1, Count::MAX, &bigger);
    }

    #[test]
    #[should_panic(expected = "UserDatatype::contiguous: 2147483647 elements of extent \
                               4611686014132420609: the offset of the last block would pass")]
    fn an_extent_past_memory_is_refused() {
        let u8s = UserDatatype::contiguous(Count::MAX, &u8::equivalent_datatype());
        let wide = UserDatatype::contiguous(Count::MAX, &u8s);
        UserDatatype::contiguous(Count::MAX, &wide);
    }

    #[test]
    #[should_panic(
        expected = "UserDatatype::heterogeneous_vector: 3 blocks of 1 elements of \
                               extent 4611686014132420609, 0 bytes apart: the size would pass"
    )]
    fn a_size_past_memory_is_refused() {
        // The same 2^62 bytes three times: an extent that fits, a packed size that does not.
        let u8s = UserDatatype::contiguous(Count::MAX, &u8::equivalent_datatype());
        let wide = UserDatatype::contiguous(Count::MAX, &u8s);
        UserDatatype::heterogeneous_vector(2, 1, 0, &wide);
        UserDatatype::heterogeneous_vector(3, 1, 0, &wide);
    }

    #[test]
    #[should_panic(
        expected = "UserDatatype::heterogeneous_vector: 3 blocks of 1 elements of \
                               extent 8, 4611686018427387904 bytes apart: the offset of the \
                               last block would pass"
    )]
    fn blocks_strided_past_memory_are_refused() {
        UserDatatype::heterogeneous_vector(3, 1, 1 << 62, &f64::equivalent_datatype());
    }

    #[test]
    #[should_panic(
        expected = "UserDatatype::structured: an extent of 9223372036854775806 \
                               bytes rounded to an alignment of 8: the extent rounded to the \
                               alignment would pass"
    )]
    fn a_struct_rounded_past_memory_is_refused() {
        UserDatatype::structured(
            &[1, 1],
            &[0, isize::MAX - 2],
            &[f64::equivalent_datatype(), u8::equivalent_datatype()],
        );
    }

    #[test]
    #[should_panic(
        expected = "View: 4 elements of a datatype of extent 4611686018427387904: \
                               the span of the elements would pass"
    )]
    fn a_view_whose_span_would_wrap_is_refused() {
        // Four elements of extent 2^62 span 2^64 bytes: 0, wrapped, which an empty buffer held.
        let far = UserDatatype::heterogeneous_indexed(
            &[1, 1],
            &[0, (1 << 62) - 1],
            &u8::equivalent_datatype(),
        );
        let empty: [u8; 0] = [];
        // SAFETY: refused before any use.
        let _ = unsafe { View::with_count_and_datatype(&empty[..], 4, &far) };
    }

    #[test]
    #[should_panic(
        expected = "UserDatatype::heterogeneous_vector: 2147483647 blocks of 1 \
                               elements of extent 1, 0 bytes apart: 2147483647 separate blocks \
                               would pass 67108864"
    )]
    fn a_layout_of_too_many_blocks_is_refused() {
        // The same byte 2^31 times: a list of 2^31 blocks would take 32 GiB.
        UserDatatype::heterogeneous_vector(Count::MAX, 1, 0, &u8::equivalent_datatype());
    }

    #[test]
    #[should_panic(
        expected = "the datatype's blocks reach 8 bytes from a lower bound above \
                               byte 0 or past the type's 4 bytes"
    )]
    fn a_rust_type_needs_its_datatype_within_its_bytes() {
        // Extent 4, the type's size, but the one block is bytes 4 to 8: a slice's last
        // element would be read past the slice.
        let shifted = UserDatatype::heterogeneous_indexed(&[1], &[4], &u32::equivalent_datatype());
        shifted.element_of::<u32>();
    }

    #[test]
    #[should_panic(
        expected = "UserDatatype::contiguous: 268435456 elements of extent 8: \
                               536870912 runs of one kind of basic element would pass 67108864"
    )]
    fn a_signature_of_too_many_runs_is_refused() {
        // One block per element (no padding), so the blocks merge, but each element adds two
        // runs to the signature: 2^29 of them would take 8 GiB.
        let mixed = UserDatatype::structured(
            &[1, 1],
            &[0, 4],
            &[i32::equivalent_datatype(), f32::equivalent_datatype()],
        );
        UserDatatype::contiguous(1 << 28, &mixed);
    }

    #[test]
    fn a_dynamic_buffer_of_padded_values_counts_its_values() {
        /// Five bytes of data in eight.
        #[derive(Clone, Copy)]
        #[repr(C)]
        struct Padded {
            value: u32,
            flag: u8,
        }
        // SAFETY: the datatype covers the fields, not the padding after them.
        unsafe impl Equivalence for Padded {
            type Out = UserDatatype;
            fn equivalent_datatype() -> UserDatatype {
                UserDatatype::structured(
                    &[1, 1],
                    &[0, 4],
                    &[u32::equivalent_datatype(), u8::equivalent_datatype()],
                )
            }
        }
        let mut values = [Padded { value: 1, flag: 0 }; 2];
        let values_bytes = memory_len(2, &datatype_of::<Padded>());
        let buffer = DynBuffer::new(&values[..]);
        assert_eq!(buffer.len(), 2, "16 bytes of values of size 5 and extent 8");
        assert!(memory_len(Buffer::count(&buffer), &Buffer::datatype(&buffer)) <= values_bytes);
        let buffer = DynBufferMut::new(&mut values[..]);
        assert_eq!(buffer.len(), 2);
    }

    #[test]
    #[should_panic(expected = "the datatype's extent is 12 bytes but the type's size is 16")]
    fn a_rust_type_needs_its_datatype_to_span_its_size() {
        let three = UserDatatype::contiguous(3, &u32::equivalent_datatype());
        three.element_of::<[u32; 4]>();
    }
}
