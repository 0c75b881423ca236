//! Receives that need no request. A receive that finds its eager message already waiting
//! copies it and is done at once. A blocking receive that finds nothing becomes the core's
//! *claim*: an arriving eager message that no posted receive wants and the claim accepts is
//! copied from the transport's frame straight into the claim's buffer — no request, no
//! posted-queue entry and no unexpected-queue entry on either side of the copy.
//!
//! Matching order is unchanged: a blocking receive is the last one its thread posted (the
//! thread is inside it until it completes), so every posted receive came before it and is
//! offered each message first; and the claim takes messages in arrival (sequence) order, as
//! any posted receive does. A rendezvous offer, which needs a request to read the data into,
//! turns the claim into an ordinary request at the moment it matches.

use super::{
    copy_eager, Core, Incoming, Outcome, Pending, RecvBytes, RecvState, Request, SendBytes,
};
use crate::envelope::{ContextId, Envelope, Rank, SourceSel, Status, TagSel};
use crate::error::PmlError;
use crate::requests::Handle;

/// How a receive started.
#[derive(Debug, PartialEq, Eq)]
pub enum Started<R> {
    /// Its message was waiting: it is finished, with its buffer handed back.
    Done {
        buf: R,
        /// Boxed: the enum is moved through every receive call, and the rare error made it
        /// 72 bytes.
        result: Outcome<Status>,
    },
    /// It is a request, to be waited on or tested.
    Posted(Handle),
    /// It is the core's claim: wait until [`Core::claim_ended`], then [`Core::take_claim`].
    Claimed,
}

/// How the claim ended.
#[derive(Debug, PartialEq, Eq)]
pub enum ClaimEnd<R> {
    /// An eager message was copied into its buffer, handed back.
    Done {
        buf: R,
        /// Boxed: the enum is moved through every receive call, and the rare error made it
        /// 72 bytes.
        result: Outcome<Status>,
    },
    /// A rendezvous offer matched: the receive goes on as this request.
    Request(Handle),
}

/// A blocking receive waiting for its message.
pub(super) struct Claim<R> {
    context: ContextId,
    source: SourceSel,
    tag: TagSel,
    buf: R,
}

impl<R> Claim<R> {
    /// The receive's selectors and capacity, for the stall report.
    pub(super) fn selectors(&self) -> crate::stall::Selectors
    where
        R: crate::stall::Capacity,
    {
        crate::stall::Selectors::receive(self.context, self.source, self.tag, self.buf.capacity())
    }

    pub(super) fn accepts(&self, envelope: Envelope) -> bool {
        envelope.context == self.context
            && self.source.accepts(envelope.source)
            && self.tag.accepts(envelope.tag)
    }
}

impl<S: SendBytes, R: RecvBytes> Core<S, R> {
    /// Starts a receive that may be tested or waited on later: done at once when an eager
    /// message it accepts is waiting, else posted.
    pub fn start_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: R,
    ) -> Result<Started<R>, PmlError> {
        match self.take_waiting(context, source, tag, buf)? {
            Ok(started) => Ok(started),
            Err(buf) => Ok(Started::Posted(
                self.post_unmatched(context, source, tag, buf),
            )),
        }
    }

    /// Starts a blocking receive: done at once when an eager message it accepts is waiting,
    /// else it becomes the claim. There is one claim at a time: the caller waits for it to
    /// end, and takes it (ended or not) before starting another.
    pub fn claim_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: R,
    ) -> Result<Started<R>, PmlError> {
        assert!(
            self.claim.is_none() && self.claim_end.is_none(),
            "a claim was left behind: take_claim must follow every claim_recv"
        );
        let buf = match self.take_waiting(context, source, tag, buf)? {
            Ok(started) => return Ok(started),
            Err(buf) => buf,
        };
        self.claim = Some(Claim {
            context,
            source,
            tag,
            buf,
        });
        Ok(Started::Claimed)
    }

    /// Whether the claim has a message (an outcome to take).
    #[inline]
    pub fn claim_ended(&self) -> bool {
        self.claim_end.is_some()
    }

    /// Ends the claim: how it ended, or `None` if it was still waiting, which withdraws it
    /// (a wait that failed), so that no later message lands in its buffer.
    pub fn take_claim(&mut self) -> Option<ClaimEnd<R>> {
        self.claim = None;
        self.claim_end.take()
    }

    /// Takes a waiting message the selectors accept: an eager one is copied into `buf` and
    /// done; a rendezvous offer becomes a request. `Err(buf)` when none is waiting.
    // Inline, with the look out of line: in the common case of a receive posted ahead of its
    // message nothing is queued, and the buffer then never travels through a call's result.
    #[inline]
    fn take_waiting(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: R,
    ) -> Result<Result<Started<R>, R>, PmlError> {
        if self.matcher.unexpected_len() == 0 {
            return Ok(Err(buf));
        }
        self.take_queued(context, source, tag, buf)
    }

    #[inline(never)]
    fn take_queued(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        mut buf: R,
    ) -> Result<Result<Started<R>, R>, PmlError> {
        let Some((envelope, pending)) = self.matcher.take_unexpected(context, source, tag) else {
            return Ok(Err(buf));
        };
        if let Pending::Eager {
            peer,
            payload,
            sync_request,
        } = &pending
        {
            let result = copy_eager(&mut buf, envelope, payload.as_slice());
            self.eager_consumed(*peer, payload.as_slice().len(), *sync_request);
            return Ok(Ok(Started::Done { buf, result }));
        }
        let recv = self.unmatched_request(buf, envelope);
        self.deliver_pending(recv, envelope, pending)?;
        Ok(Ok(Started::Posted(recv)))
    }

    /// A request for a receive about to be delivered `envelope`'s message, which sets its
    /// state before its handle is handed out: the state it starts with is never read, and is
    /// one that allocates nothing (a receive matched on arrival is every message's path
    /// where the sender is ahead).
    pub(super) fn unmatched_request(&mut self, buf: R, envelope: Envelope) -> Handle {
        let unread = Status {
            source: envelope.source,
            tag: envelope.tag,
            len: 0,
        };
        self.requests.insert(Request::Recv {
            buf,
            state: RecvState::Done(Ok(unread)),
        })
    }

    /// Hands a matched message to the claim (which accepted it).
    pub(super) fn deliver_to_claim(
        &mut self,
        envelope: Envelope,
        peer: Rank,
        incoming: Incoming<'_>,
    ) -> Result<(), PmlError> {
        let Claim { mut buf, .. } = self.claim.take().expect("the claim accepted the message");
        let end = match incoming {
            Incoming::Eager {
                payload,
                sync_request,
            } => {
                let result = copy_eager(&mut buf, envelope, payload);
                self.eager_consumed(peer, payload.len(), sync_request);
                ClaimEnd::Done { buf, result }
            }
            rts @ Incoming::Rts { .. } => {
                let recv = self.unmatched_request(buf, envelope);
                self.claim_end = Some(ClaimEnd::Request(recv));
                return self.deliver(recv, envelope, peer, rts);
            }
        };
        self.claim_end = Some(end);
        Ok(())
    }
}
