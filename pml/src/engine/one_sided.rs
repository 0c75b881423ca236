//! The native engine's [`OneSided`]: one-sided operations (MPI windows) on the transport
//! that does them without the target's help in matching (verbs: RDMA WRITE, READ and
//! atomics; OFI: `fi_write`, `fi_read` and `fi_atomic` where the provider has them), for the
//! layer above to use where a peer is reached that way. Windows elsewhere go by active
//! messages, which this engine carries as any message.

use super::Engine;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::one_sided::{OneSided, RmaReach, WindowExposure};
use crate::transport::{RmaOp, Transport};
use crate::wire::RemoteKey;

/// A peer's window as this rank names it (`OneSided::remote_key`): the transport's key,
/// and the window's start in the transport's addressing, which differs from the peer's own
/// address where the transport addresses memory by offset into its registration (OFI
/// without `FI_MR_VIRT_ADDR`), and its length. The window layer adds displacements to the
/// peer's own address (`RemoteKey::addr`); `rma` moves them to the transport's, once it
/// found the operation inside the window.
#[derive(Clone, Copy, Debug)]
pub(super) struct PeerWindow {
    key: u64,
    /// The peer's own address of the window's start.
    own: u64,
    /// The transport's address of it.
    named: u64,
    /// The bytes exposed.
    len: u64,
}

impl PeerWindow {
    /// Why `op` at the peer's own address `addr` is refused before it is posted: it reaches
    /// outside the window. Providers do not all answer such an access with an error (OFI's
    /// shm and udp;ofi_rxd never complete it, and tcp;ofi_rxm drops the connection), so it
    /// never reaches them.
    fn refuses(&self, op: &RmaOp, addr: u64) -> Option<String> {
        let bytes = op.bytes() as u64;
        let offset = addr.wrapping_sub(self.own);
        let inside =
            addr >= self.own && offset.checked_add(bytes).is_some_and(|end| end <= self.len);
        (!inside).then(|| {
            format!(
                "{} of {bytes} bytes at byte {} of the window refused before posting: the \
                 window exposes {} bytes",
                op.name(),
                addr as i128 - self.own as i128,
                self.len
            )
        })
    }
}

/// The packed key's length: the transport's key, the window's own address, the transport's
/// address of it and its length, native-endian words (a job's ranks share one build).
const PACKED: usize = 32;

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
                    format!("exposing a window's {len} bytes to one-sided operations: {cause}"),
                )
            })?;
        Ok(exposed.map(|(key, id)| WindowExposure {
            key: [key.key, buf as u64, key.addr, len as u64]
                .iter()
                .flat_map(|w| w.to_ne_bytes())
                .collect(),
            transport,
            id,
        }))
    }

    /// Undoes `expose_window` (every peer is done with the window).
    fn release_window(&mut self, exposure: WindowExposure) {
        self.transports[exposure.transport].release_window(exposure.id);
    }

    /// Unpacks `peer`'s key (its transport's key and addressing) into this rank's table;
    /// the key handed out indexes it.
    fn remote_key(&mut self, peer: Rank, packed: &[u8]) -> Result<u64, PmlError> {
        let words: [u8; PACKED] = packed.try_into().map_err(|_| {
            PmlError::one_sided(
                peer,
                format!(
                    "rank {peer}'s window key has {} bytes, not the {PACKED} of this rank's engine",
                    packed.len()
                ),
            )
        })?;
        let word = |at: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&words[8 * at..8 * at + 8]);
            u64::from_ne_bytes(bytes)
        };
        let window = PeerWindow {
            key: word(0),
            own: word(1),
            named: word(2),
            len: word(3),
        };
        Ok(self.window_keys.insert(window) as u64)
    }

    fn forget_key(&mut self, key: u64) {
        self.window_keys.try_remove(key as usize);
    }

    /// Whether one-sided operations reach world rank `peer` (this rank itself included)
    /// through the hardware, and how.
    fn rma_reach(&self, peer: Rank) -> Option<RmaReach> {
        let transport = self.one_sided()?;
        let carried = peer == self.rank
            || self
                .routes
                .get(peer as usize)
                .is_some_and(|r| r.transport as usize == transport);
        let caps = self.transports[transport].caps();
        carried.then_some(RmaReach {
            atomics: caps.atomics,
            by_default: caps.rma_by_default,
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
        let window =
            *self
                .window_keys
                .get(remote.key as usize)
                .ok_or_else(|| PmlError::OneSided {
                    peer,
                    cause: format!("no window of rank {peer} has key {}", remote.key).into(),
                })?;
        if let Some(cause) = window.refuses(&op, remote.addr) {
            return Err(PmlError::one_sided(
                peer,
                format!("rank {peer}'s window (key {}): {cause}", remote.key),
            ));
        }
        let mut op = op;
        let mut remote = RemoteKey {
            addr: remote
                .addr
                .wrapping_sub(window.own)
                .wrapping_add(window.named),
            key: window.key,
        };
        let mut posted = None;
        loop {
            let started = self.check_running().and_then(|()| {
                // SAFETY: forwarded from this function's contract.
                unsafe { self.transports[transport].rma(peer, op, remote) }
            });
            let waited = match started {
                Ok(Some(part)) if part.len >= op.bytes() => return Ok(part.ticket),
                Ok(Some(part)) => {
                    posted = Some(part.ticket);
                    op = op.rest(part.len);
                    remote.addr += part.len as u64;
                    Ok(())
                }
                Ok(None) => self.progress().map(drop),
                Err(e) => Err(e),
            };
            if let Err(e) = waited {
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
