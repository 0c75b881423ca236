//! Sends that go straight to the transport: a standard-mode eager message to a peer with
//! nothing queued ahead of it is written into the transport at once and completes there, with
//! no request, no queue entry and no second look at the frame.

use super::{Core, RecvBytes, SendBytes, EAGER_OVERHEAD};
use crate::envelope::{ContextId, Rank, Tag};
use crate::error::PmlError;
use crate::wire::{Frame, WireEnvelope, MAX_HEADER_LEN};

/// What hands a direct send's frame (`header`, then the payload it holds: a slice, or a
/// non-contiguous buffer it packs straight into the frame) to the transport; `Ok(false)`: it
/// had no room. A closure is one; the engine's own are types whose `write` is always
/// inlined, as a closure cannot be asked to be (see `Engine::post_send`).
pub trait DirectWrite {
    fn write(self, header: &[u8]) -> Result<bool, PmlError>;
}

impl<F: FnOnce(&[u8]) -> Result<bool, PmlError>> DirectWrite for F {
    #[inline]
    fn write(self, header: &[u8]) -> Result<bool, PmlError> {
        self(header)
    }
}

/// A standard-mode send offered to the transport before it is posted: what its frame needs.
/// The caller builds the full [`SendArgs`](super::SendArgs) only when the offer is refused, so that the
/// common case writes none of them to memory.
#[derive(Clone, Copy)]
pub struct DirectSend {
    pub context: ContextId,
    pub source: Rank,
    pub peer: Rank,
    pub tag: Tag,
    /// The payload's length (the [`DirectWrite`] holds the payload).
    pub len: usize,
    /// As [`SendArgs::eager_limit`](super::SendArgs::eager_limit).
    pub eager_limit: Option<usize>,
}

impl<S: SendBytes, R: RecvBytes> Core<S, R> {
    /// Offers a standard-mode send to `write` when it may bypass the queues; `write` returns
    /// whether the transport took the frame. `Ok(true)`: it did, and the send is complete;
    /// `Ok(false)`: nothing happened, and the caller posts the send with
    /// [`post_send`](Self::post_send).
    ///
    /// The bypass keeps what the queued path guarantees: the message takes the next sequence
    /// number (and only once it is really on its way), and it is charged to the peer's
    /// unexpected-message budget exactly as a queued eager send is.
    // Inline (with `ShmTransport::try_send`): the engine's send is inlined into mpirt's, and
    // without the hint these two stay calls across the crate boundary, the arguments going
    // through the stack (45 instructions of a 476-instruction blocking send, callgrind).
    #[inline]
    pub fn send_direct(
        &mut self,
        send: DirectSend,
        write: impl DirectWrite,
    ) -> Result<bool, PmlError> {
        let len = send.len;
        let (p, caps) = self.peer(send.peer)?;
        let eager_max = super::eager_max(caps, send.eager_limit);
        let cost = len.saturating_add(EAGER_OVERHEAD);
        // Anything queued for this peer goes first: its MATCH/RTS frames carry earlier
        // sequence numbers, and its control frames unblock the peer.
        let direct = len <= eager_max && p.credit >= cost && !p.has_output();
        if !direct {
            return Ok(false);
        }
        let seq = self.sequencer.outgoing(send.context, send.peer);
        let frame = Frame::Match {
            envelope: WireEnvelope {
                context: send.context,
                source: send.source,
                tag: send.tag,
                seq: *seq,
            },
            sync_request: None,
            // The header says nothing of the payload (the transport frames its length).
            payload: &[],
        };
        let mut header = [0u8; MAX_HEADER_LEN];
        let header_len = frame.encode_header(&mut header);
        if !write.write(&header[..header_len])? {
            // The number was not taken: the queued send gets the same one.
            return Ok(false);
        }
        *seq = seq.wrapping_add(1);
        self.peers[send.peer as usize].credit -= cost;
        Ok(true)
    }
}
