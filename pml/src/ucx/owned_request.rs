//! Request memory this process owns and lends to UCX (`UCP_OP_ATTR_FIELD_REQUEST`), for
//! blocking receives: UCX builds its request header in it instead of taking a request from
//! its pool, and the completion callback writes the outcome into the `RequestState` after
//! it, as in UCX's own requests. A blocking receive so allocates nothing and frees nothing,
//! as Open MPI's pml ucx receives on stack memory.

use std::ffi::c_void;
use std::mem;

use super::request::{self, RequestState};

/// Cache-line units, so that UCX's header starts on a line like the requests of its pool.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

pub struct OwnedRequest {
    /// UCX's header, ending at `offset`, then the `RequestState`.
    storage: Box<[Line]>,
    offset: usize,
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
        let mut owned = OwnedRequest {
            storage: vec![Line([0; 64]); bytes.div_ceil(64)].into_boxed_slice(),
            offset,
        };
        // SAFETY: `pointer()` is followed by room for a RequestState, aligned for it.
        unsafe { request::init(owned.pointer()) };
        owned
    }

    /// The address to give UCX as `ucp_request_param_t::request`: UCX puts its header in
    /// the bytes before it, the `RequestState` follows it. The memory does not move while
    /// `self` lives.
    pub fn pointer(&mut self) -> *mut c_void {
        // In bounds: the storage holds the header and a RequestState after it.
        self.storage
            .as_mut_ptr()
            .cast::<u8>()
            .wrapping_add(self.offset)
            .cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_goes_before_the_address_and_a_fresh_state_after() {
        for request_size in [8, 56, 60, 64, 72, 200, 256] {
            let mut r = OwnedRequest::new(request_size);
            let base = r.storage.as_ptr() as usize;
            let address = r.pointer();
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
}
