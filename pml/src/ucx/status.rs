//! UCX's status codes, and the status-or-request pointers its non-blocking calls return,
//! turned into Rust results.

use std::ffi::{c_void, CStr};

use super::ffi;
use crate::error::PmlError;

/// UCX's words for a status.
pub fn describe(status: ffi::ucs_status_t) -> String {
    // SAFETY: ucs_status_string returns a pointer to a static NUL-terminated string for every
    // status value, known or not ("unknown error").
    unsafe { CStr::from_ptr(ffi::ucs_status_string(status)) }
        .to_string_lossy()
        .into_owned()
}

/// `Ok` for UCS_OK, else the failure of `operation`.
pub fn check(operation: &'static str, status: ffi::ucs_status_t) -> Result<(), PmlError> {
    if status == ffi::UCS_OK {
        Ok(())
    } else {
        Err(failed(operation, status))
    }
}

#[cold]
pub fn failed(operation: &'static str, status: ffi::ucs_status_t) -> PmlError {
    PmlError::ucx(operation, describe(status))
}

/// What a non-blocking call (`*_nbx`) returned: done at once, a request still in flight, or
/// an error. UCX folds all three into one pointer (ucs/type/status.h): null is UCS_OK, the
/// top of the address space (a negative status cast to a pointer) is an error.
pub enum Started {
    Done,
    Pending(*mut c_void),
}

#[inline]
pub fn started(operation: &'static str, ptr: ffi::ucs_status_ptr_t) -> Result<Started, PmlError> {
    if ptr.is_null() {
        return Ok(Started::Done);
    }
    // UCS_PTR_IS_ERR: error codes run from -1 down to UCS_ERR_LAST, so as
    // addresses they are the last page of the address space, where no request lives.
    let raw = ptr as isize;
    if raw < 0 && raw >= isize::from(ffi::UCS_ERR_LAST) {
        return Err(failed(operation, raw as ffi::ucs_status_t));
    }
    Ok(Started::Pending(ptr))
}
