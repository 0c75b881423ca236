//! The native engine's [`OneSided`]: one-sided operations (MPI windows) on the transport
//! that does them in hardware (verbs: RDMA WRITE, READ and atomics), for the layer above to
//! use where a peer is reached that way. Windows elsewhere go by active messages, which this
//! engine carries as any message.

use super::Engine;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::one_sided::{OneSided, RmaReach, WindowExposure};
use crate::transport::{RmaOp, Transport};
use crate::wire::RemoteKey;

impl Engine {
    /// The transport that does one-sided operations, if one is open.
    fn one_sided(&self) -> Option<usize> {
        self.transports.iter().position(|t| t.caps().remote_write)
    }
}

impl OneSided for Engine {
    /// Exposes a window's `len` bytes at `buf` to peers' one-sided operations, where a
    /// transport does them; `None` where none does.
    fn expose_window(
        &mut self,
        buf: *mut u8,
        len: usize,
    ) -> Result<Option<WindowExposure>, PmlError> {
        self.check_running()?;
        let Some(transport) = self.one_sided() else {
            return Ok(None);
        };
        let exposed = self.transports[transport]
            .expose_window(buf, len)
            .map_err(|cause| {
                PmlError::transport(
                    self.rank,
                    format!("exposing a window's {len} bytes to RDMA: {cause}"),
                )
            })?;
        Ok(exposed.map(|(key, id)| WindowExposure {
            key: key.to_ne_bytes().to_vec(),
            transport,
            id,
        }))
    }

    /// Undoes `expose_window` (every peer is done with the window).
    fn release_window(&mut self, exposure: WindowExposure) {
        self.transports[exposure.transport].release_window(exposure.id);
    }

    /// The transport's key is the packed one itself (an rkey, the same for every peer).
    fn remote_key(&mut self, peer: Rank, packed: &[u8]) -> Result<u64, PmlError> {
        let word: [u8; 8] = packed.try_into().map_err(|_| {
            PmlError::one_sided(
                peer,
                format!(
                    "rank {peer}'s window key has {} bytes, not the 8 of this rank's transport",
                    packed.len()
                ),
            )
        })?;
        Ok(u64::from_ne_bytes(word))
    }

    fn forget_key(&mut self, _key: u64) {}

    /// Whether one-sided operations reach world rank `peer` (this rank itself included)
    /// through the hardware, and how.
    fn rma_reach(&self, peer: Rank) -> Option<RmaReach> {
        let transport = self.one_sided()?;
        let carried = peer == self.rank
            || self
                .routes
                .get(peer as usize)
                .is_some_and(|r| r.transport as usize == transport);
        carried.then(|| RmaReach {
            atomics: self.transports[transport].caps().atomics,
            by_default: true,
        })
    }

    /// Starts `op` on world rank `peer`'s exposed memory at `remote`, making progress while
    /// the transport has no room (a write or read longer than its queue holds goes in
    /// parts); returns the ticket `rma_done` reports. An error fails this operation only:
    /// the engine goes on (where parts of it were posted, once they completed).
    ///
    /// # Safety
    /// As `Transport::rma`: `op`'s local memory stays valid and untouched until the ticket
    /// completed or the engine stopped.
    unsafe fn rma(&mut self, peer: Rank, op: RmaOp, remote: RemoteKey) -> Result<u64, PmlError> {
        let transport = self.one_sided().ok_or(PmlError::UnknownPeer(peer))?;
        let (mut op, mut remote) = (op, remote);
        let mut posted = None;
        loop {
            self.check_running()?;
            // SAFETY: forwarded from this function's contract.
            match unsafe { self.transports[transport].rma(peer, op, remote) } {
                Ok(Some(part)) if part.len >= op.bytes() => return Ok(part.ticket),
                Ok(Some(part)) => {
                    posted = Some(part.ticket);
                    op = op.rest(part.len);
                    remote.addr += part.len as u64;
                }
                Ok(None) => {
                    self.progress()?;
                }
                Err(e) => {
                    // The parts posted use the caller's memory: done before it goes back.
                    if let Some(ticket) = posted {
                        while !self.rma_done(peer, ticket).unwrap_or(true) {
                            self.progress()?;
                        }
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Whether every one-sided operation to `peer` up to `ticket` completed (at the
    /// target); the error of the first that failed.
    fn rma_done(&mut self, peer: Rank, ticket: u64) -> Result<bool, PmlError> {
        match self.one_sided() {
            Some(t) => self.transports[t].rma_done(peer, ticket),
            None => Ok(true),
        }
    }

    /// The old value the atomic `ticket` to `peer` fetched, once `rma_done` said so.
    fn rma_result(&self, peer: Rank, ticket: u64) -> u64 {
        self.one_sided()
            .map_or(0, |t| self.transports[t].rma_result(peer, ticket))
    }
}
