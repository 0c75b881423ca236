//! Request memory this process owns and lends to UCX (`UCP_OP_ATTR_FIELD_REQUEST`), for
//! blocking calls: UCX builds its request header in it instead of taking a request from its
//! pool, so a blocking receive allocates nothing, runs no completion callback and frees
//! nothing; the caller polls the request itself. Open MPI's pml ucx receives the same way,
//! on stack memory.

use std::ffi::c_void;

/// Cache-line units, so that UCX's header starts on a line like the requests of its pool.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

pub struct OwnedRequest {
    /// UCX's header from the first line on, then a spare line that the address UCX gets
    /// points into.
    storage: Box<[Line]>,
    request_size: usize,
}

impl OwnedRequest {
    /// Room for one request of a context whose header takes `request_size` bytes
    /// (`Worker::request_size`).
    pub fn new(request_size: usize) -> OwnedRequest {
        OwnedRequest {
            storage: vec![Line([0; 64]); request_size.div_ceil(64) + 1].into_boxed_slice(),
            request_size,
        }
    }

    /// The address to give UCX as `ucp_request_param_t::request`: UCX puts its header in
    /// the `request_size` bytes before it. The memory does not move while `self` lives.
    pub fn pointer(&mut self) -> *mut c_void {
        // In bounds: the storage holds `request_size` bytes and at least one more.
        self.storage
            .as_mut_ptr()
            .cast::<u8>()
            .wrapping_add(self.request_size)
            .cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_fills_whole_lines_before_the_address() {
        for request_size in [1, 63, 64, 65, 200, 256] {
            let mut r = OwnedRequest::new(request_size);
            let base = r.storage.as_ptr() as usize;
            let address = r.pointer() as usize;
            assert_eq!(base % 64, 0);
            assert_eq!(address - base, request_size);
            assert!(address < base + r.storage.len() * 64);
        }
    }
}
