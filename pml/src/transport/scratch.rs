//! The buffer a transport keeps for bytes on their way between a peer and a layout's short
//! blocks (TCP's gathered and scattered short runs, shared memory's windows into short
//! blocks): large enough that a message takes few system calls, small enough to stay in the
//! L2 cache while its bytes are copied in and out.

/// The bytes a scratch holds.
pub(crate) const SCRATCH_LEN: usize = 64 << 10;

/// The scratch kept in `kept` (one a transport is enough: each use is done with it when it
/// returns), allocated on first use, so that a job that never moves short blocks never
/// pays for it.
pub(crate) fn scratch(kept: &mut Box<[u8]>) -> &mut [u8] {
    if kept.is_empty() {
        *kept = vec![0; SCRATCH_LEN].into_boxed_slice();
    }
    kept
}
