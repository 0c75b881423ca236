//! A receive's buffer as the protocol sees it: contiguous bytes, or, for a non-contiguous
//! receive ([`crate::blocks`]), the blocks of the user's layout, which payload bytes are
//! unpacked into where they arrive (an eager frame's payload, streamed DATA a transport
//! scatters from its socket), with no staging copy of the message.

use crate::blocks::{Blocks, PackedRange};
use crate::bulk_copy;

/// A receive's buffer: `as_mut`'s bytes, or, where [`blocks`](Self::blocks) describes it, the
/// blocks of a non-contiguous layout (then `as_mut` holds none of them).
///
/// # Safety
/// A description `blocks` returns must have been made in this process by [`Blocks::new`],
/// its block list alive and its elements' blocks valid for writes and not otherwise
/// accessed while the buffer is lent to the protocol: the core unpacks into them, and
/// transports scatter into them.
pub unsafe trait RecvBytes: AsMut<[u8]> {
    fn blocks(&self) -> Option<&Blocks> {
        None
    }
}

// SAFETY: never described by blocks.
unsafe impl RecvBytes for Vec<u8> {}

/// The bytes a receive's buffer holds.
#[inline(always)]
pub(super) fn capacity<R: RecvBytes>(buf: &mut R) -> usize {
    match buf.blocks() {
        None => buf.as_mut().len(),
        Some(blocks) => blocks.len(),
    }
}

/// Copies `payload`, the packed bytes from `offset` on, into the receive's buffer; the
/// caller checked they fit.
#[inline(always)]
pub(super) fn copy_in<R: RecvBytes>(buf: &mut R, offset: usize, payload: &[u8]) {
    match buf.blocks() {
        None => bulk_copy::copy_from_slice(&mut buf.as_mut()[offset..][..payload.len()], payload),
        Some(blocks) => unpack(blocks, offset, payload),
    }
}

#[cold]
fn unpack(blocks: &Blocks, offset: usize, payload: &[u8]) {
    // SAFETY: `RecvBytes` makes the description this process's, its blocks writable and lent
    // to the core; the caller checked `offset + payload.len()` fits its bytes; the payload
    // (a frame, a stored message) is memory of the transport or the core, apart from them.
    unsafe { blocks.unpack_range_from(offset, payload) };
}

/// Where the `len` bytes of a DATA frame at `offset` of a pulling receive go (see
/// `Core::data_target`).
pub enum DataTarget<'a> {
    /// These bytes of a contiguous buffer.
    Bytes(&'a mut [u8]),
    /// The packed bytes `range` of a non-contiguous one, scattered into its blocks. The
    /// description is what [`RecvBytes`] promises of it: made in this process, its blocks
    /// writable and lent until the DATA landed.
    Blocks {
        blocks: &'a Blocks,
        range: PackedRange,
    },
}

impl DataTarget<'_> {
    /// Copies the frame's `payload` there (a transport that hands whole frames).
    pub(super) fn fill(self, payload: &[u8]) {
        match self {
            DataTarget::Bytes(target) => bulk_copy::copy_from_slice(target, payload),
            DataTarget::Blocks { blocks, range } => unpack(blocks, range.start, payload),
        }
    }
}
