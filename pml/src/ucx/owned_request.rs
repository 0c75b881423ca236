//! Request memory this process owns and lends to UCX (`UCP_OP_ATTR_FIELD_REQUEST`): UCX
//! builds its request header in it instead of taking a request from its pool, and the
//! completion callback writes the outcome into the `RequestState` after it, as in UCX's own
//! requests. An operation so takes nothing from UCX's pool and gives nothing back
//! (`ucp_request_free`), as Open MPI's pml ucx receives on stack memory; operations that
//! finish at once leave the memory unused, for the next one.

use std::ffi::c_void;
use std::mem;
use std::ptr::NonNull;

use super::request::{self, RequestState};

/// Cache-line units, so that UCX's header starts on a line like the requests of its pool.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

pub struct OwnedRequest {
    /// UCX's header, then the `RequestState` at `address`. Held as a raw allocation (from
    /// a `Box`, given back in `Drop`) because UCX writes it behind Rust's back: no Rust
    /// reference to these bytes ever exists.
    storage: NonNull<[Line]>,
    address: *mut c_void,
}

impl OwnedRequest {
    /// Room for one request of a context whose header takes `request_size` bytes
    /// (`Worker::request_size`), with a fresh state.
    pub fn new(request_size: usize) -> OwnedRequest {
        // UCX wants at least the header's size before the address, and the state after it
        // must be aligned: a header of a whole number of words (as UCX's are) starts the
        // storage, on a cache line like the requests of UCX's pool.
        let offset = request_size.next_multiple_of(mem::align_of::<RequestState>());
        let bytes = offset + mem::size_of::<RequestState>();
        let boxed = vec![Line([0; 64]); bytes.div_ceil(64)].into_boxed_slice();
        let storage = NonNull::from(Box::leak(boxed));
        // In bounds: the storage holds the header and a RequestState after it.
        let address = storage.cast::<u8>().as_ptr().wrapping_add(offset).cast();
        // SAFETY: `address` is followed by room for a RequestState, aligned for it.
        unsafe { request::init(address) };
        OwnedRequest { storage, address }
    }

    /// The address to give UCX as `ucp_request_param_t::request`: UCX puts its header in
    /// the bytes before it, the `RequestState` follows it. The memory does not move while
    /// `self` lives.
    pub fn address(&self) -> *mut c_void {
        self.address
    }
}

impl Drop for OwnedRequest {
    fn drop(&mut self) {
        // SAFETY: `storage` came from `Box::leak` in `new` and is given back once. Whoever
        // drops an OwnedRequest knows UCX is done with it (an operation that failed to end
        // leaks its memory instead, `mem::forget`).
        drop(unsafe { Box::from_raw(self.storage.as_ptr()) });
    }
}

/// Request memory not lent to an operation in flight, reused so that an operation
/// allocates only when more are in flight than ever before. The memory the next operation
/// starts in is kept apart, so that starting one costs a load and one that finishes at once
/// (most small sends) costs nothing more.
pub struct SpareRequests {
    next: OwnedRequest,
    spare: Vec<OwnedRequest>,
    request_size: usize,
}

impl SpareRequests {
    pub fn new(request_size: usize) -> SpareRequests {
        SpareRequests {
            next: OwnedRequest::new(request_size),
            spare: Vec::new(),
            request_size,
        }
    }

    /// The address of the memory the next operation starts in, without taking it: an
    /// operation that finishes at once leaves it here for the one after.
    #[inline]
    pub fn next(&self) -> *mut c_void {
        self.next.address()
    }

    /// Takes the memory `next` named, for an operation that stays in flight.
    #[inline]
    pub fn take_next(&mut self) -> OwnedRequest {
        let after = self.spare.pop().unwrap_or_else(|| self.fresh());
        std::mem::replace(&mut self.next, after)
    }

    /// Memory whose operation finished and whose state was taken (made fresh again).
    #[inline]
    pub fn give_back(&mut self, request: OwnedRequest) {
        self.spare.push(request);
    }

    /// A fresh request of this context's size, outside the spares (for the blocking
    /// operations' own memory).
    pub fn fresh(&self) -> OwnedRequest {
        OwnedRequest::new(self.request_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_goes_before_the_address_and_a_fresh_state_after() {
        for request_size in [8, 56, 60, 64, 72, 200, 256] {
            let r = OwnedRequest::new(request_size);
            let base = r.storage.cast::<u8>().as_ptr() as usize;
            let address = r.address();
            assert_eq!(base % 64, 0);
            let before = address as usize - base;
            assert!(before >= request_size && before < request_size + 8);
            assert_eq!(address as usize % mem::align_of::<RequestState>(), 0);
            let end = address as usize + mem::size_of::<RequestState>();
            assert!(end <= base + r.storage.len() * 64);
            // SAFETY: `new` set up the state after the address.
            assert_eq!(unsafe { request::peek(address) }, None);
        }
    }

    #[test]
    fn spare_memory_is_reused_until_taken() {
        let mut spare = SpareRequests::new(64);
        let first = spare.next();
        assert_eq!(spare.next(), first, "an unused spare serves again");
        let taken = spare.take_next();
        assert_eq!(taken.address(), first);
        let second = spare.next();
        assert_ne!(second, first, "memory in flight is not handed out twice");
        spare.give_back(taken);
        assert_eq!(spare.next(), second);
        assert_eq!(spare.take_next().address(), second);
        assert_eq!(spare.next(), first, "memory given back serves again");
    }
}
