//! What the core's queues hold, for a rank that waits with nothing moving (see `stall`):
//! the blocking receive's claim, posted receives, arrived messages no receive took, and
//! sends that wait for their receiver. Read only by a wait that slept, never on a message's
//! path.

use super::{Core, Pending, RecvState, Request, SendState};
use crate::envelope::{SourceSel, TagSel};
use crate::stall::{QueuedSend, Queues, Selectors, SHOWN};

impl<S, R> Core<S, R> {
    pub fn queues(&self) -> Queues {
        let mut queues = Queues {
            claim: self.claim.as_ref().map(|c| c.selectors()),
            ..Queues::default()
        };
        for request in self.requests.iter() {
            match request {
                Request::Recv {
                    state: RecvState::Posted(id),
                    ..
                } => {
                    let (context, source, tag) = id.selectors();
                    let receive = Selectors::receive(context, source, tag);
                    Queues::add(&mut queues.posted, &mut queues.left_out, receive);
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
                        SendState::Done(_) => continue,
                    };
                    let send = QueuedSend {
                        context: *context,
                        peer: *peer,
                        tag: *tag,
                        bytes: *len,
                        waits_for,
                    };
                    Queues::add(&mut queues.sends, &mut queues.left_out, send);
                }
                Request::Recv { .. } => {}
            }
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
