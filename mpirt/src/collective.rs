//! Collective operations. For now the barrier, which finalize also needs.

use pml::{Done, SendMode, SourceSel, TagSel};

use crate::communicator::CommData;
use crate::environment::with_engine;
use crate::error::Cause;

/// The runtime's tag for barrier traffic: negative, so no user receive can take it.
const BARRIER_TAG: i32 = -1;

/// Dissemination barrier: in round k each rank signals the rank 2^k ahead and waits for the
/// one 2^k behind; after ceil(log2 n) rounds every rank has heard, transitively, from all.
/// Messages are empty, and per-peer ordering keeps successive barriers apart.
pub(crate) fn barrier(comm: &CommData) -> Result<(), Cause> {
    let (rank, size) = (comm.rank, comm.size);
    let mut distance = 1;
    while distance < size {
        let to = (rank + distance) % size;
        let from = (rank + size - distance) % size;
        let peer = comm.world_rank(to);
        with_engine(|e| {
            // SAFETY: zero-length buffers: the engine reads and writes no bytes through them.
            let recv = unsafe {
                e.post_recv(
                    comm.context,
                    SourceSel::Rank(from),
                    TagSel::Tag(BARRIER_TAG),
                    std::ptr::NonNull::dangling().as_ptr(),
                    0,
                )?
            };
            // SAFETY: as above.
            let send = unsafe {
                e.post_send(
                    comm.context,
                    rank,
                    to,
                    peer,
                    BARRIER_TAG,
                    SendMode::Standard,
                    std::ptr::NonNull::dangling().as_ptr(),
                    0,
                )?
            };
            e.wait(send)?;
            match e.wait(recv)? {
                Done::Received(_) => Ok(()),
                Done::Sent => unreachable!("a receive completed as a send"),
            }
        })?;
        distance *= 2;
    }
    Ok(())
}
