//! Which peers' connections broke. With peer failure detection on (`UcxConfig`), UCX
//! reports a broken endpoint (a peer that died, a reset connection) through the endpoint's
//! error callback, which writes the status into that
//! peer's cell here; the PML turns it into an error naming the peer instead of waiting on a
//! peer that is gone.

use std::cell::Cell;
use std::ffi::c_void;

use super::ffi;
use crate::envelope::Rank;

pub struct PeerFailures {
    /// One cell per world rank, UCS_OK while its connection is sound. Boxed, so that the
    /// cells the callbacks hold stay put when the PML moves.
    cells: Box<[Cell<ffi::ucs_status_t>]>,
}

impl PeerFailures {
    pub fn new(peers: usize) -> PeerFailures {
        PeerFailures {
            cells: (0..peers).map(|_| Cell::new(ffi::UCS_OK)).collect(),
        }
    }

    /// The argument for `peer`'s endpoint error callback (`on_error`); valid while `self`
    /// lives.
    pub fn callback_arg(&self, peer: Rank) -> *mut c_void {
        let cell: *const Cell<ffi::ucs_status_t> = &self.cells[peer as usize];
        cell.cast_mut().cast()
    }

    /// How `peer`'s connection failed, if it did.
    pub fn of(&self, peer: Rank) -> Option<ffi::ucs_status_t> {
        let status = self.cells.get(peer as usize)?.get();
        (status != ffi::UCS_OK).then_some(status)
    }

    /// The lowest rank whose connection failed, and how.
    pub fn first(&self) -> Option<(Rank, ffi::ucs_status_t)> {
        (0..self.cells.len() as Rank).find_map(|peer| self.of(peer).map(|s| (peer, s)))
    }
}

/// UCX's endpoint error callback (`ucp_err_handler_t`): records the failure.
pub unsafe extern "C" fn on_error(arg: *mut c_void, _ep: ffi::ucp_ep_h, status: ffi::ucs_status_t) {
    // SAFETY: `arg` is a `callback_arg` of a PeerFailures that outlives the worker whose
    // progress calls this (the PML drops the worker first), and only this thread touches it.
    let cell = unsafe { &*arg.cast::<Cell<ffi::ucs_status_t>>() };
    cell.set(status);
}
