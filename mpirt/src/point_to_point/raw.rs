//! Immediate receives into raw memory, with C's contract: the escape hatch for programs that,
//! like OSU's bandwidth tests, post a window of receives into one buffer.
//!
//! Safe receives lend each request a `&mut` borrow, so two outstanding receives can never
//! target the same bytes. MPI allows it (the buffer then holds whichever message landed last),
//! and OSU's `osu_bw` relies on it: all 64 receives of a window land in one cache-warm buffer.
//! A safe form over `&[Cell<T>]` is not sound on every transport: an RDMA READ (verbs, UCX)
//! writes the buffer while the program runs, so a `Cell::get` in between would race with the
//! device. Hence an `unsafe` call whose contract is C's.
//!
//! Overlapping targets are harmless to the runtime itself: it only ever writes a receive
//! buffer (eager copies, remote reads, socket reads), never reads it back, so which message's
//! bytes end up there changes nothing it does. Types whose bytes must be checked (`bool`,
//! `char`) land in a staging buffer per request and are copied in when the request completes.

use std::mem::{align_of, size_of};
use std::ptr::NonNull;

use crate::datatype::datatype_of;
use crate::error::{Cause, Error};
use crate::point_to_point::{start_receive, tag_selector, RecvSlot, Source, Tag};
use crate::request::{Lent, Request, Scope};
use crate::traits::Equivalence;

/// Immediate receives into raw pointers (`MPI_Irecv` on a C buffer), for every [`Source`].
pub trait ImmediateReceiveRaw: Source {
    /// Starts a receive of up to `count` elements of `T` into the memory at `ptr`, like
    /// [`immediate_receive_into`](Source::immediate_receive_into) but without a borrow, so
    /// that several outstanding receives may share a buffer. A longer message completes the
    /// request with a truncation error and writes nothing past `count` elements. The request
    /// borrows no data ([`wait_for_data`](crate::request::Request::wait_for_data) gives an
    /// empty slice): the memory stays the caller's.
    ///
    /// # Safety
    /// From this call until the request completes (`wait`, a `test` that succeeds, or the
    /// end of its scope):
    /// - `ptr` is valid for writes of `count` elements of `T` (it may be null, or dangling,
    ///   only when `count` is 0), and that memory is neither freed nor reused;
    /// - the program neither reads nor writes those bytes, nor holds a reference to them; the
    ///   one exception is other receives started by this trait, which may target the same
    ///   bytes: once all have completed, each overlapping byte holds the value from one of
    ///   the messages, which one unspecified (as in MPI).
    unsafe fn immediate_receive_into_raw<'a, S: Scope<'a>, T: Equivalence>(
        &self,
        scope: S,
        ptr: *mut T,
        count: usize,
    ) -> Request<'a, [T], S> {
        // SAFETY: forwarded from this function's contract.
        crate::error::or_fatal(unsafe { self.try_immediate_receive_into_raw(scope, ptr, count) })
    }

    /// [`immediate_receive_into_raw`](Self::immediate_receive_into_raw) of messages with tag
    /// `tag` only.
    ///
    /// # Safety
    /// As for [`immediate_receive_into_raw`](Self::immediate_receive_into_raw).
    unsafe fn immediate_receive_into_raw_with_tag<'a, S: Scope<'a>, T: Equivalence>(
        &self,
        scope: S,
        ptr: *mut T,
        count: usize,
        tag: Tag,
    ) -> Request<'a, [T], S> {
        // SAFETY: forwarded from this function's contract.
        crate::error::or_fatal(unsafe {
            raw_receive(self, scope, ptr, count, Some(tag), RAW, not_lent())
        })
    }

    /// [`immediate_receive_into_raw`](Self::immediate_receive_into_raw), returning the error
    /// (a negative tag, a null or misaligned pointer, a length past `isize::MAX` bytes)
    /// instead of ending the job.
    ///
    /// # Safety
    /// As for [`immediate_receive_into_raw`](Self::immediate_receive_into_raw).
    unsafe fn try_immediate_receive_into_raw<'a, S: Scope<'a>, T: Equivalence>(
        &self,
        scope: S,
        ptr: *mut T,
        count: usize,
    ) -> Result<Request<'a, [T], S>, Error> {
        // SAFETY: forwarded from this function's contract.
        unsafe { raw_receive(self, scope, ptr, count, None, RAW, not_lent()) }
    }

    /// [`try_immediate_receive_into_raw`](Self::try_immediate_receive_into_raw) of messages
    /// with tag `tag` only.
    ///
    /// # Safety
    /// As for [`immediate_receive_into_raw`](Self::immediate_receive_into_raw).
    unsafe fn try_immediate_receive_into_raw_with_tag<'a, S: Scope<'a>, T: Equivalence>(
        &self,
        scope: S,
        ptr: *mut T,
        count: usize,
        tag: Tag,
    ) -> Result<Request<'a, [T], S>, Error> {
        // SAFETY: forwarded from this function's contract.
        unsafe { raw_receive(self, scope, ptr, count, Some(tag), RAW, not_lent()) }
    }
}

impl<P: Source + ?Sized> ImmediateReceiveRaw for P {}

const RAW: &str = "immediate receive into a raw buffer";

/// The memory of a raw receive is the caller's, not lent: the request hands back an empty
/// slice.
fn not_lent<'a, T>() -> Lent<'a, [T]> {
    Lent::shared(&[])
}

/// # Safety
/// As for [`ImmediateReceiveRaw::immediate_receive_into_raw`].
pub(super) unsafe fn raw_receive<'a, P, S, T, D>(
    source: &P,
    scope: S,
    ptr: *mut T,
    count: usize,
    tag: Option<Tag>,
    what: &str,
    data: Lent<'a, D>,
) -> Result<Request<'a, D, S>, Error>
where
    P: Source + ?Sized,
    S: Scope<'a>,
    T: Equivalence,
    D: ?Sized,
{
    let operation = || source.describe(what, tag);
    let (ptr, bytes) = raw_target(ptr, count).map_err(|cause| Error::new(operation(), cause))?;
    let tag_sel = tag_selector(tag).map_err(|cause| Error::new(operation(), cause))?;
    let source_sel = source.source_selector();
    let datatype = datatype_of::<T>();
    // What arrives for `count` elements: their bytes, or, with gaps, their packed data.
    let packed = match datatype.is_contiguous() {
        true => bytes,
        false => count * datatype.size(),
    };
    // SAFETY: `raw_target` checked that `ptr` is non-null and aligned (or the length is 0)
    // and that `bytes` fits an allocation; the caller keeps the memory writable and otherwise
    // untouched until the request completes; `Equivalence` says checked bytes make valid `T`s.
    let mut slot = unsafe { RecvSlot::new(ptr, packed, datatype) }
        .map_err(|cause| Error::new(operation(), cause))?;
    // SAFETY: as above: the memory outlives the request (the caller's contract).
    let started = unsafe { start_receive(source.source_comm(), source_sel, tag_sel, &mut slot) }
        .map_err(|cause| Error::new(operation(), cause))?;
    Ok(Request::receive(
        started, slot, data, scope, source_sel, tag,
    ))
}

/// The byte pointer and length of `count` elements at `ptr`, or why they cannot be a buffer.
fn raw_target<T>(ptr: *mut T, count: usize) -> Result<(*mut u8, usize), Cause> {
    let type_name = std::any::type_name::<T>();
    let bytes = count
        .checked_mul(size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Cause::InvalidRawBuffer(format!(
                "{count} elements of {type_name} exceed the largest possible buffer"
            ))
        })?;
    if bytes == 0 {
        // Nothing is written through it; a null pointer is fine, as in C.
        return Ok((NonNull::<u8>::dangling().as_ptr(), 0));
    }
    if ptr.is_null() {
        return Err(Cause::InvalidRawBuffer(format!(
            "null pointer for {count} elements of {type_name}"
        )));
    }
    if !(ptr as usize).is_multiple_of(align_of::<T>()) {
        return Err(Cause::InvalidRawBuffer(format!(
            "pointer {ptr:p} is not aligned to {} bytes for {type_name}",
            align_of::<T>()
        )));
    }
    Ok((ptr.cast(), bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_targets_are_checked() {
        let mut words = [0u64; 4];
        assert_eq!(raw_target(words.as_mut_ptr(), 4).map(|(_, n)| n), Ok(32));
        assert_eq!(
            raw_target(std::ptr::null_mut::<u64>(), 0).map(|(_, n)| n),
            Ok(0)
        );
        let null = raw_target(std::ptr::null_mut::<u64>(), 1).unwrap_err();
        assert!(null.to_string().contains("null pointer"), "{null}");
        let misaligned = words
            .as_mut_ptr()
            .cast::<u8>()
            .wrapping_add(1)
            .cast::<u64>();
        let cause = raw_target(misaligned, 1).unwrap_err();
        assert!(
            cause.to_string().contains("not aligned to 8 bytes"),
            "{cause}"
        );
        let huge = raw_target(words.as_mut_ptr(), usize::MAX / 4).unwrap_err();
        assert!(
            huge.to_string().contains("largest possible buffer"),
            "{huge}"
        );
    }
}
