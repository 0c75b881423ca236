//! `MPI_Pack` and `MPI_Unpack`: a buffer's elements as the bytes a message of them carries,
//! and back. mpirt's packed form is the message form: the datatype's blocks in type-map
//! order, with nothing added, so `pack_size` is the data's size.

use super::{Buffer, BufferMut, UncommittedDatatype};
use crate::error::{Cause, Error};
use crate::point_to_point::{Count, Outgoing};

/// Bytes `count` elements of `datatype` take packed (`MPI_Pack_size`).
pub(crate) fn pack_size<D: UncommittedDatatype>(
    count: Count,
    datatype: &D,
) -> Result<Count, Error> {
    let fail = |why| Error::new("pack_size", Cause::InvalidPack(why));
    let size = datatype.descriptor().size();
    let elements =
        usize::try_from(count).map_err(|_| fail(format!("the count is negative ({count})")))?;
    elements
        .checked_mul(size)
        .and_then(|bytes| Count::try_from(bytes).ok())
        .ok_or_else(|| {
            fail(format!(
                "{count} elements of {size} bytes take more than {} bytes, the largest Count",
                Count::MAX
            ))
        })
}

/// `position` as a byte offset, refused where negative.
fn start(position: Count) -> Result<usize, Cause> {
    usize::try_from(position)
        .map_err(|_| Cause::InvalidPack(format!("the position is negative ({position})")))
}

/// The position after `end` bytes, refused where it is past what a `Count` holds.
fn position_after(end: usize) -> Result<Count, Cause> {
    Count::try_from(end).map_err(|_| {
        Cause::InvalidPack(format!(
            "the position after the elements, byte {end}, is past {}, the largest Count",
            Count::MAX
        ))
    })
}

/// Appends `buf`'s elements, packed, to `out` at `position`; returns the position after them.
pub(crate) fn pack_into<B: Buffer + ?Sized>(
    buf: &B,
    out: &mut [u8],
    position: Count,
) -> Result<Count, Error> {
    let fail = |cause| Error::new("pack_into", cause);
    let packed = Outgoing::of(buf).map_err(fail)?;
    let bytes = packed.bytes();
    let start = start(position).map_err(fail)?;
    let end = start + bytes.len();
    if end > out.len() {
        return Err(fail(Cause::PackOverflow {
            needed: end,
            room: out.len(),
        }));
    }
    let after = position_after(end).map_err(fail)?;
    out[start..end].copy_from_slice(bytes);
    Ok(after)
}

/// Unpacks from `packed` at `position` into `buf`'s elements; returns the position after them.
pub(crate) fn unpack_into<B: BufferMut + ?Sized>(
    packed: &[u8],
    buf: &mut B,
    position: Count,
) -> Result<Count, Error> {
    let fail = |cause| Error::new("unpack_into", cause);
    let datatype = buf.datatype();
    let start = start(position).map_err(fail)?;
    let end = start + buf.byte_len();
    if end > packed.len() {
        return Err(fail(Cause::PackOverflow {
            needed: end,
            room: packed.len(),
        }));
    }
    let bytes = &packed[start..end];
    if !datatype.is_valid(bytes) {
        return Err(fail(Cause::InvalidValue {
            type_name: datatype.name(),
        }));
    }
    let after = position_after(end).map_err(fail)?;
    let layout = datatype.layout().map_err(fail)?;
    // SAFETY: `BufferMut` makes the pointer valid for writes of the span of `count()`
    // elements (checked where a view is made), and the bytes passed the datatype's checks.
    unsafe { layout.unpack(buf.count(), buf.pointer_mut(), bytes) };
    Ok(after)
}
