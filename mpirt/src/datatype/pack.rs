//! `MPI_Pack` and `MPI_Unpack`: a buffer's elements as the bytes a message of them carries,
//! and back. mpirt's packed form is the message form: the datatype's blocks in type-map
//! order, with nothing added, so `pack_size` is the data's size.

use super::{Buffer, BufferMut, UncommittedDatatype};
use crate::error::{Cause, Error};
use crate::point_to_point::{Count, Outgoing};

/// Bytes `count` elements of `datatype` take packed (`MPI_Pack_size`).
pub(crate) fn pack_size<D: UncommittedDatatype>(count: Count, datatype: &D) -> Count {
    (count.max(0) as usize * datatype.descriptor().size()) as Count
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
    let start = position.max(0) as usize;
    let end = start + bytes.len();
    if end > out.len() {
        return Err(fail(Cause::PackOverflow {
            needed: end,
            room: out.len(),
        }));
    }
    out[start..end].copy_from_slice(bytes);
    Ok(end as Count)
}

/// Unpacks from `packed` at `position` into `buf`'s elements; returns the position after them.
pub(crate) fn unpack_into<B: BufferMut + ?Sized>(
    packed: &[u8],
    buf: &mut B,
    position: Count,
) -> Result<Count, Error> {
    let fail = |cause| Error::new("unpack_into", cause);
    let datatype = buf.datatype();
    let start = position.max(0) as usize;
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
    let layout = datatype.layout().map_err(fail)?;
    // SAFETY: `BufferMut` makes the pointer valid for writes of the span of `count()`
    // elements (checked where a view is made), and the bytes passed the datatype's checks.
    unsafe { layout.unpack(buf.count(), buf.pointer_mut(), bytes) };
    Ok(end as Count)
}
