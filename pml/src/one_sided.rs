//! The one-sided operations (MPI windows) a PML offers where it reaches peers' memory
//! directly, behind one interface ([`OneSided`]) that the window layer drives alike: the
//! native engine's one-sided transport (verbs: RDMA WRITE, READ and IB atomics) and the UCX
//! PML (`ucp_put_nbx`, `ucp_get_nbx`, `ucp_atomic_op_nbx` with rkeys).

use crate::envelope::Rank;
use crate::error::PmlError;
use crate::transport::RmaOp;
use crate::wire::RemoteKey;

/// A window's memory exposed to peers' one-sided operations, until `release_window`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowExposure {
    /// What peers name the memory by (with its address), packed: each peer turns it into
    /// its own [`RemoteKey::key`] with [`OneSided::remote_key`].
    pub key: Vec<u8>,
    /// Which transport exposed it (the native engine's index; 0 on UCX).
    pub(crate) transport: usize,
    /// Its id there.
    pub(crate) id: u64,
}

/// How one-sided operations reach a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmaReach {
    /// Whether 8-byte atomics reach it (this rank's own memory too), atomic with each
    /// other whoever posts them.
    pub atomics: bool,
    /// Whether windows take this one-sided path by default (`MPIRT_WINDOW_PATH` unset; a
    /// plain bool each PML or transport sets by its own policy): where false, only
    /// `MPIRT_WINDOW_PATH=rdma` asks for it, and windows go by active messages otherwise.
    /// Verbs and the OFI providers whose NIC does RMA (efa, cxi, verbs;ofi_rxm) set it; OFI
    /// providers that emulate RMA slower than messages do not, nor does UCX's RMA, as a target
    /// waiting in a window's shared-area barrier does not progress UCX, which some of UCX's
    /// transports need to apply an operation.
    pub by_default: bool,
}

/// One-sided operations on peers' exposed memory. Tickets count per peer from 1; an
/// operation is complete once it is done at the target (a later read of anyone's sees a
/// write), which `rma_done` reports for every ticket up to one.
pub trait OneSided {
    /// Exposes a window's `len` bytes at `buf` to peers' one-sided operations; `None` where
    /// this PML does none.
    fn expose_window(
        &mut self,
        buf: *mut u8,
        len: usize,
    ) -> Result<Option<WindowExposure>, PmlError>;

    /// Undoes `expose_window` (every peer is done with the window).
    fn release_window(&mut self, exposure: WindowExposure);

    /// The key this rank names `peer`'s exposed memory by in [`RemoteKey`], from the packed
    /// key that `peer`'s `expose_window` gave; `forget_key` once done with it.
    fn remote_key(&mut self, peer: Rank, packed: &[u8]) -> Result<u64, PmlError>;

    /// Undoes `remote_key` (no operation through the key is in flight).
    fn forget_key(&mut self, key: u64);

    /// Whether one-sided operations reach world rank `peer` (this rank itself included),
    /// and how.
    fn rma_reach(&self, peer: Rank) -> Option<RmaReach>;

    /// Starts `op` on world rank `peer`'s exposed memory at `remote`; returns the ticket
    /// `rma_done` reports. An error fails this operation only.
    ///
    /// # Safety
    /// `op`'s local memory stays valid and untouched until the ticket completed or the PML
    /// stopped.
    unsafe fn rma(&mut self, peer: Rank, op: RmaOp, remote: RemoteKey) -> Result<u64, PmlError>;

    /// Whether every one-sided operation to `peer` up to `ticket` completed at the target;
    /// the error of the first that failed. Makes no progress of its own beyond starting
    /// what completion needs: the caller's wait progresses.
    fn rma_done(&mut self, peer: Rank, ticket: u64) -> Result<bool, PmlError>;

    /// The old value the atomic `ticket` to `peer` fetched, once `rma_done` said so.
    fn rma_result(&self, peer: Rank, ticket: u64) -> u64;
}
