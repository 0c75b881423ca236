//! Sends that go straight to the transport: a standard-mode eager message to a peer with
//! nothing queued ahead of it is written into the transport at once and completes there, with
//! no request, no queue entry and no second look at the frame.

use super::{Core, SendArgs, SendMode, EAGER_OVERHEAD};
use crate::error::PmlError;
use crate::requests::Handle;
use crate::wire::{Frame, WireEnvelope, MAX_HEADER_LEN};

/// What hands a direct send's frame (`header` then `payload`) to the transport; `Ok(false)`:
/// it had no room. A closure is one; the engine's own is a type whose `write` is always
/// inlined, as a closure cannot be asked to be (see `Engine::post_send`).
pub trait DirectWrite {
    fn write(self, header: &[u8], payload: &[u8]) -> Result<bool, PmlError>;
}

impl<F: FnOnce(&[u8], &[u8]) -> Result<bool, PmlError>> DirectWrite for F {
    #[inline]
    fn write(self, header: &[u8], payload: &[u8]) -> Result<bool, PmlError> {
        self(header, payload)
    }
}

impl<S: AsRef<[u8]>, R: AsMut<[u8]>> Core<S, R> {
    /// Posts a send, first offering it to `write` when it may bypass the
    /// queues; `write` returns whether the transport took the frame. Returns [`Handle::SENT`]
    /// when it did; otherwise the send is posted as by [`post_send`](Self::post_send).
    ///
    /// The bypass keeps what the queued path guarantees: the message takes the next sequence
    /// number (and only once it is really on its way), and it is charged to the peer's
    /// unexpected-message budget exactly as a queued eager send is.
    // Inline (with `ShmTransport::try_send`): the engine's send is inlined into mpirt's, and
    // without the hint these two stay calls across the crate boundary, the arguments going
    // through the stack (45 instructions of a 476-instruction blocking send, callgrind).
    #[inline]
    pub fn post_send_direct(
        &mut self,
        args: SendArgs<S>,
        write: impl DirectWrite,
    ) -> Result<Handle, PmlError> {
        let payload = args.buf.as_ref();
        let len = payload.len();
        let (p, caps) = self.peer(args.peer)?;
        let eager_max = super::eager_max(caps, args.eager_limit);
        let cost = len.saturating_add(EAGER_OVERHEAD);
        // Anything queued for this peer goes first: its MATCH/RTS frames carry earlier
        // sequence numbers, and its control frames unblock the peer.
        let direct = args.mode == SendMode::Standard
            && len <= eager_max
            && p.credit >= cost
            && !p.has_output();
        if !direct {
            return self.post_send(args);
        }
        let seq = self.sequencer.outgoing(args.context, args.peer);
        let frame = Frame::Match {
            envelope: WireEnvelope {
                context: args.context,
                source: args.source,
                tag: args.tag,
                seq: *seq,
            },
            sync_request: None,
            payload,
        };
        let mut header = [0u8; MAX_HEADER_LEN];
        let header_len = frame.encode_header(&mut header);
        if !write.write(&header[..header_len], payload)? {
            // The number was not taken: the queued send gets the same one.
            return self.post_send(args);
        }
        *seq = seq.wrapping_add(1);
        self.peers[args.peer as usize].credit -= cost;
        Ok(Handle::SENT)
    }
}
