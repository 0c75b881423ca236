//! What the core's queues hold, for a rank that waits with nothing moving (see `stall`):
//! the blocking receive's claim, posted receives, arrived messages no receive took, and
//! sends that wait for their receiver. Read only by a wait that slept, never on a message's
//! path.

use super::{Core, Pending, RecvState, Request, SendState};
use crate::envelope::{SourceSel, TagSel};
use crate::stall::{Awaited, AwaitedRequest, Capacity, QueuedSend, Queues, Selectors, SHOWN};

impl<S, R: Capacity> Core<S, R> {
    /// The queues, and of `awaited` (the requests a wait on requests waits for) those that
    /// wait for a peer.
    pub fn queues(&self, awaited: Awaited<'_>) -> Queues {
        let mut queues = Queues {
            claim: self.claim.as_ref().map(|c| c.selectors()),
            ..Queues::default()
        };
        queues.note_awaited(awaited, |h| {
            self.requests.get(h).ok().and_then(waiting_for_a_peer)
        });
        for entry in self.requests.iter().filter_map(waiting_for_a_peer) {
            queues.add_request(entry);
        }
        let (oldest, more) = self.matcher.oldest_unexpected(SHOWN);
        queues.left_out += more;
        for (envelope, pending) in oldest {
            let bytes = match pending {
                Pending::Eager { payload, .. } => payload.as_slice().len(),
                Pending::Rts { len, .. } => *len,
            };
            let message = Selectors {
                context: envelope.context,
                source: SourceSel::Rank(envelope.source),
                tag: TagSel::Tag(envelope.tag),
                bytes,
            };
            queues.unexpected.push(message);
        }
        queues
    }
}

/// `request` as the queues list it: a receive no message matched, a send not finished.
fn waiting_for_a_peer<S, R: Capacity>(request: &Request<S, R>) -> Option<AwaitedRequest> {
    match request {
        Request::Recv {
            state: RecvState::Posted(id),
            buf,
        } => {
            let (context, source, tag) = id.selectors();
            let receive = Selectors::receive(context, source, tag, buf.capacity());
            Some(AwaitedRequest::Receive(receive))
        }
        Request::Send {
            peer,
            context,
            tag,
            len,
            state,
            ..
        } => {
            let waits_for = match state {
                SendState::Transmitting(_) => "room to send",
                SendState::AwaitAck => "a matching receive (synchronous send)",
                SendState::AwaitPull => "a matching receive to read its data",
                SendState::Streaming => "its data to be streamed",
                SendState::Done(_) => return None,
            };
            Some(AwaitedRequest::Send(QueuedSend {
                context: *context,
                peer: *peer,
                tag: *tag,
                bytes: *len,
                waits_for,
            }))
        }
        Request::Recv { .. } => None,
    }
}
