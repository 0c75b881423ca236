//! Where an operation's outcome lands: a `RequestState` inside each UCX request, right
//! after UCX's own header. Messages run in request memory of ours (`OwnedRequest`) with the
//! state after it; the rare operations on UCX's pooled requests (flushes, closes) find it in
//! the room UCX leaves for it (`ucp_params_t::request_size`). Either way a completion
//! callback writes straight into the request it completes, with no lookup.

use std::ffi::c_void;
use std::{mem, ptr};

use super::ffi;

/// The outcome of one UCX operation, written by its completion callback.
#[repr(C)]
pub struct RequestState {
    pub done: bool,
    pub status: ffi::ucs_status_t,
    /// For receives: the sender's tag and the message's full length.
    pub info: ffi::ucp_tag_recv_info_t,
}

impl RequestState {
    const FRESH: RequestState = RequestState {
        done: false,
        status: ffi::UCS_INPROGRESS,
        info: ffi::ucp_tag_recv_info_t {
            sender_tag: 0,
            length: 0,
        },
    };
}

// The casts of request pointers to RequestState rely on UCX's user area being aligned for
// it: UCX places it after its own request struct, which holds pointers.
const _: () = assert!(mem::align_of::<RequestState>() <= mem::align_of::<*mut c_void>());

/// Sets up a request's state. UCX calls it once per request when its pool grows, not per
/// operation, so `take_and_free` puts the state back to fresh before the request is reused.
pub unsafe extern "C" fn init(request: *mut c_void) {
    // SAFETY: UCX passes the user area of a new request, `request_size` bytes (the size of a
    // RequestState) aligned as its own request struct, which holds pointers (8 bytes).
    unsafe { ptr::write(request.cast::<RequestState>(), RequestState::FRESH) };
}

pub unsafe extern "C" fn send_done(
    request: *mut c_void,
    status: ffi::ucs_status_t,
    _user_data: *mut c_void,
) {
    // SAFETY: UCX passes the user area of the request it completes, which `init` set up.
    let state = unsafe { &mut *request.cast::<RequestState>() };
    state.status = status;
    state.done = true;
}

pub unsafe extern "C" fn recv_done(
    request: *mut c_void,
    status: ffi::ucs_status_t,
    info: *const ffi::ucp_tag_recv_info_t,
    _user_data: *mut c_void,
) {
    // SAFETY: as in `send_done`; `info` points at the request's receive information for
    // every outcome (UCX passes its own copy inside the request), or is null.
    let state = unsafe { &mut *request.cast::<RequestState>() };
    if let Some(info) = unsafe { info.as_ref() } {
        state.info = *info;
    }
    state.status = status;
    state.done = true;
}

/// The operation's status once it finished, `None` while it runs.
///
/// # Safety
/// `request` must be a request UCX returned and that has not been freed.
pub unsafe fn peek(request: *mut c_void) -> Option<ffi::ucs_status_t> {
    // SAFETY: the caller guarantees the request is live, so its user area is a RequestState.
    let state = unsafe { &*request.cast::<RequestState>() };
    state.done.then_some(state.status)
}

/// Parameters for sends, flushes and closes: completion lands in the request's state. An
/// operation that finishes at once returns no request and calls nothing.
pub fn send_param() -> ffi::ucp_request_param_t {
    // SAFETY: all-zero is a valid ucp_request_param_t (null pointers, no callback, empty
    // masks); the fields that matter are set below and named in `op_attr_mask`.
    let mut param: ffi::ucp_request_param_t = unsafe { mem::zeroed() };
    param.op_attr_mask = ffi::UCP_OP_ATTR_FIELD_CALLBACK;
    param.cb.send = Some(send_done);
    param
}

/// Parameters for a send in request memory we own (`OwnedRequest`) at `request`: a send
/// that finishes at once touches nothing; one that stays in flight has UCX's header before
/// `request` and its outcome lands in the `RequestState` after it.
pub fn owned_send_param(request: *mut c_void) -> ffi::ucp_request_param_t {
    let mut param = send_param();
    param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_REQUEST;
    param.request = request;
    param
}

/// Parameters for a receive in request memory we own at `request`. Immediate completion
/// is refused: a receive whose message was waiting finishes inside the call all the same,
/// through the callback, so that its state holds the sender's tag and the length whichever
/// way it finished (UCX 1.13 leaves `UCP_OP_ATTR_FIELD_RECV_INFO` unwritten when the
/// request memory is the caller's).
pub fn owned_recv_param(request: *mut c_void) -> ffi::ucp_request_param_t {
    // SAFETY: as in `send_param`.
    let mut param: ffi::ucp_request_param_t = unsafe { mem::zeroed() };
    param.op_attr_mask = ffi::UCP_OP_ATTR_FIELD_CALLBACK
        | ffi::UCP_OP_ATTR_FIELD_REQUEST
        | ffi::UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = Some(recv_done);
    param.request = request;
    param
}

/// Reads the outcome of a finished request and resets its state for the next operation.
///
/// # Safety
/// `request` must be a request (UCX's, or `OwnedRequest`'s) whose operation finished
/// (`peek`), so that UCX no longer writes its state.
pub unsafe fn take(request: *mut c_void) -> (ffi::ucs_status_t, ffi::ucp_tag_recv_info_t) {
    // SAFETY: the caller guarantees the request is live; its user area is a RequestState.
    let state = unsafe { &mut *request.cast::<RequestState>() };
    let outcome = (state.status, state.info);
    *state = RequestState::FRESH;
    outcome
}

/// Reads the outcome of a finished request, resets its state and hands it back to UCX.
///
/// # Safety
/// `request` must be a live request UCX returned whose operation finished (`peek`); it is
/// freed here and must not be used again.
pub unsafe fn take_and_free(request: *mut c_void) -> (ffi::ucs_status_t, ffi::ucp_tag_recv_info_t) {
    // SAFETY: forwarded from this function's contract.
    let outcome = unsafe { take(request) };
    // SAFETY: the request is finished, so UCX no longer touches it; nothing here keeps it.
    unsafe { ffi::ucp_request_free(request) };
    outcome
}
