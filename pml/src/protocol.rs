//! The point-to-point protocol as an I/O-free state machine: events in, actions out.
//!
//! The caller (the engine, or a test) posts sends and receives, feeds in frames that arrived,
//! pulls out frames to transmit and remote reads to perform, and reports back when those are
//! done. Nothing here touches a socket, a clock or a thread, which is what lets tests drive
//! every interleaving.
//!
//! Protocol choice per send: eager (MATCH with the payload) when the message fits the peer's
//! eager limit and the peer still has unexpected-message budget for it; otherwise rendezvous
//! (RTS with no payload; once matched the receiver reads the data, or asks for it with GET
//! when the transport cannot read remote memory). A synchronous eager send waits for an ACK.

mod claim;
mod direct;
pub mod layout;
mod queues;
mod recv_bytes;
mod stored_payload;

use std::collections::VecDeque;

use crate::blocks::{Blocks, PackedRange};
use crate::envelope::{ContextId, Envelope, Rank, SourceSel, Status, Tag, TagSel};
use crate::error::PmlError;
use crate::matching::{Matcher, PostedId};
use crate::requests::{Handle, Requests};
use crate::sequence::{Arrival, Sequencer};
use crate::wire::{
    self, Frame, RemoteKey, WireEnvelope, DATA_HEADER_LEN, MAX_HEADER_LEN, SYNC_MATCH_HEADER_LEN,
};
use claim::Claim;
pub use claim::{ClaimEnd, Started};
pub use direct::{DirectSend, DirectWrite};
pub use layout::RemoteLayout;
pub use recv_bytes::{DataTarget, RecvBytes};
use stored_payload::StoredPayload;

/// What the protocol needs to know about the transport that reaches one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCaps {
    /// Largest payload sent eagerly.
    pub eager_limit: usize,
    /// Largest frame the transport carries, header included.
    pub max_frame: usize,
    /// Whether the receiver can read the sender's memory (process_vm_readv, RDMA READ);
    /// otherwise rendezvous data is streamed in DATA frames after a GET.
    pub remote_read: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// Eager bytes one peer may have outstanding at this rank before its further messages go
    /// by rendezvous. It bounds the memory the unexpected queue can take per peer.
    pub unexpected_budget: usize,
}

/// The default [`CoreConfig::unexpected_budget`]: a window of 64 messages at the 64 KiB eager
/// limit (OSU's bandwidth window; 64 x 64 KiB and their `EAGER_OVERHEAD` come to 4 KiB over
/// 4 MiB) goes eagerly whole, window after window, while up to a return batch (a quarter) of
/// the last window's budget is still on its way back. With 4 MiB the last message of the
/// first window went by rendezvous, and the last 16 of every window after it: over
/// udp;ofi_rxd, whose reads are emulated by packets, that sent 1.18x the packets (osu_bw at
/// 64 KiB).
pub const DEFAULT_UNEXPECTED_BUDGET: usize = 8 << 20;

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            unexpected_budget: DEFAULT_UNEXPECTED_BUDGET,
        }
    }
}

/// What each eager message costs of the budget on top of its payload: the queue entry it
/// takes, so that a flood of zero-length messages is bounded too.
pub const EAGER_OVERHEAD: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    Standard,
    /// Completes only once the receiver has matched the message.
    Synchronous,
}

/// A send's buffer as the protocol sees it: the bytes its message carries, and where a frame
/// takes them from (an eager MATCH, streamed DATA): the contiguous `bytes`, or, for a
/// non-contiguous buffer ([`crate::blocks`]), its `blocks`, which the transport gathers
/// ([`Payload::Blocks`]).
pub trait SendBytes {
    fn message_len(&self) -> usize;
    fn bytes(&self) -> &[u8];
    /// The description of a non-contiguous buffer, whose bytes `bytes` does not hold.
    fn blocks(&self) -> Option<&Blocks> {
        None
    }
}

impl SendBytes for Vec<u8> {
    fn message_len(&self) -> usize {
        self.len()
    }

    fn bytes(&self) -> &[u8] {
        self
    }
}

/// Everything a send needs. `source` is the sender's rank in the communicator; `peer` is the
/// receiver's world rank, which names it for the transport and numbers the messages to it.
pub struct SendArgs<S> {
    pub context: ContextId,
    pub source: Rank,
    pub peer: Rank,
    pub tag: Tag,
    pub mode: SendMode,
    pub buf: S,
    /// How a receiver reaches `buf` if the send goes by rendezvous.
    pub remote: RemoteKey,
    /// A lower eager limit for this send than the peer's, where the caller knows that a
    /// rendezvous is cheap (the buffer lies in memory the receiver has mapped, so reading it
    /// is one memcpy); `None` keeps the peer's.
    pub eager_limit: Option<usize>,
}

/// Work for the caller besides transmitting frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read `len` bytes at `remote` in `peer` into the receive: into `read_blocks(recv)`
    /// where it is laid out in blocks and the transport reads into blocks (then
    /// `read_lands_in_blocks(recv)`), else into `read_target(recv)`; then call
    /// `read_done(recv)` (or `read_failed`). Where the offer carried the send's `layout`
    /// (a non-contiguous send read in place, a run at a time), the first `len` packed
    /// bytes of its runs.
    Read {
        recv: Handle,
        peer: Rank,
        remote: RemoteKey,
        len: usize,
        layout: Option<Box<RemoteLayout>>,
    },
}

/// A frame ready to go: header bytes plus a payload borrowed from the sender's buffer.
pub struct Transmit<'a> {
    header: [u8; MAX_HEADER_LEN],
    header_len: usize,
    pub payload: Payload<'a>,
}

/// Where a frame's payload lies in the sender's buffer.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    Bytes(&'a [u8]),
    /// The packed bytes `range` of a non-contiguous buffer, gathered from its blocks by the
    /// transport (`Transport::try_send_blocks`).
    Blocks {
        blocks: &'a Blocks,
        range: PackedRange,
    },
}

impl Transmit<'_> {
    pub fn header(&self) -> &[u8] {
        &self.header[..self.header_len]
    }
}

/// A finished request, with its buffer handed back.
#[derive(Debug)]
pub enum Completion<S, R> {
    Send {
        buf: S,
        result: Result<(), PmlError>,
    },
    Recv {
        buf: R,
        result: Result<Status, PmlError>,
    },
}

/// A message taken out of the unexpected queue by a matched probe, for one later receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageHandle(Handle);

enum SendState {
    /// The MATCH or RTS frame is queued; what follows once it is on the wire.
    Transmitting(AfterTransmit),
    AwaitAck,
    /// An RTS is out: the receiver will FIN after reading, or GET to have the data streamed.
    AwaitPull,
    Streaming,
    Done(Outcome<()>),
}

#[derive(Clone, Copy)]
enum AfterTransmit {
    Done,
    AwaitAck,
    AwaitPull,
}

enum RecvState {
    Posted(PostedId),
    Reading {
        status: Status,
        deliver: usize,
        peer: Rank,
        send_request: u64,
        /// The transport reads straight into the receive's blocks
        /// ([`Core::read_lands_in_blocks`]): no staging is to be unpacked.
        in_blocks: bool,
    },
    Pulling {
        status: Status,
        deliver: usize,
        received: usize,
        peer: Rank,
    },
    Done(Outcome<Status>),
}

/// How a request ended, as it waits to be collected: the error boxed, so that every
/// request, which is moved in and out of its slab on every message, is not the size of the
/// rare failure.
pub type Outcome<T> = Result<T, Box<PmlError>>;

enum Request<S, R> {
    Send {
        buf: S,
        peer: Rank,
        /// The send's communicator context and tag, for the stall report (`queues`).
        context: ContextId,
        tag: Tag,
        len: usize,
        remote: RemoteKey,
        state: SendState,
    },
    Recv {
        buf: R,
        state: RecvState,
    },
}

impl<S, R> Request<S, R> {
    fn is_done(&self) -> bool {
        match self {
            Request::Send { state, .. } => matches!(state, SendState::Done(_)),
            Request::Recv { state, .. } => matches!(state, RecvState::Done(_)),
        }
    }
}

/// A message waiting for its receive: an eager payload, or a rendezvous offer with no data.
enum Pending {
    Eager {
        peer: Rank,
        payload: StoredPayload,
        sync_request: Option<u64>,
    },
    Rts {
        peer: Rank,
        len: usize,
        send_request: u64,
        remote: RemoteKey,
        layout: Option<Box<RemoteLayout>>,
    },
}

impl Pending {
    fn len(&self) -> usize {
        match self {
            Pending::Eager { payload, .. } => payload.as_slice().len(),
            Pending::Rts { len, .. } => *len,
        }
    }
}

/// A matched message, its eager payload borrowed from wherever it lies (frame or queue).
enum Incoming<'a> {
    Eager {
        payload: &'a [u8],
        sync_request: Option<u64>,
    },
    Rts {
        len: usize,
        send_request: u64,
        remote: RemoteKey,
        layout: Option<Box<RemoteLayout>>,
    },
}

enum Control {
    Fin(u64),
    Ack(u64),
    Get {
        send_request: u64,
        recv_request: u64,
        len: u64,
    },
    Credit(u64),
    Wake,
}

enum Ordered {
    Match {
        send: Handle,
        envelope: WireEnvelope,
        sync: bool,
    },
    Rts {
        send: Handle,
        envelope: WireEnvelope,
    },
}

struct Stream {
    send: Handle,
    recv_request: u64,
    offset: usize,
    end: usize,
}

impl Stream {
    /// The next DATA frame's payload length: what is left, as much as one frame holds.
    fn chunk(&self, caps: Option<PeerCaps>) -> usize {
        let max_frame = caps.map_or(MAX_HEADER_LEN + 1, |c| c.max_frame);
        (self.end - self.offset).min(max_frame - DATA_HEADER_LEN)
    }
}

#[derive(Default)]
struct Peer {
    caps: Option<PeerCaps>,
    /// Eager bytes we may still send to this peer.
    credit: usize,
    /// Eager bytes from this peer we consumed and have not yet given back.
    to_return: usize,
    /// Served first: small frames that unblock the peer.
    control: VecDeque<Control>,
    /// MATCH and RTS frames, in sequence order.
    ordered: VecDeque<Ordered>,
    /// Rendezvous data being streamed, served last.
    streams: VecDeque<Stream>,
    in_ready: bool,
    /// The queue whose front frame a stream transport has partly sent (`hold_front`).
    held: Option<OutQueue>,
}

/// The three queues of a peer's frames, in the order they are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OutQueue {
    Control,
    Ordered,
    Streams,
}

impl Peer {
    fn has_output(&self) -> bool {
        !(self.control.is_empty() && self.ordered.is_empty() && self.streams.is_empty())
    }

    /// Where the next frame comes from: the held queue, else the first non-empty one.
    fn front_queue(&self) -> Option<OutQueue> {
        if self.held.is_some() {
            self.held
        } else if !self.control.is_empty() {
            Some(OutQueue::Control)
        } else if !self.ordered.is_empty() {
            Some(OutQueue::Ordered)
        } else if !self.streams.is_empty() {
            Some(OutQueue::Streams)
        } else {
            None
        }
    }
}

pub struct Core<S, R> {
    config: CoreConfig,
    requests: Requests<Request<S, R>>,
    matched_messages: Requests<(Envelope, Pending)>,
    matcher: Matcher<Handle, Pending>,
    sequencer: Sequencer<Vec<u8>>,
    peers: Vec<Peer>,
    ready: VecDeque<Rank>,
    actions: VecDeque<Action>,
    /// The blocking receive waiting without a request, if any (see `claim`).
    claim: Option<Claim<R>>,
    /// How the last claim ended, until its receive takes it.
    claim_end: Option<ClaimEnd<R>>,
    /// Where remote reads for receives laid out in blocks land when the transport reads
    /// only into contiguous bytes, until they finish and are unpacked.
    read_staging: Vec<(Handle, Vec<u8>)>,
    /// Rendezvous sends a FIN finished since the engine last asked (`next_pulled_send`): the
    /// peer reads their buffers no more, so what exposed them is given back now, not when the
    /// send is collected, which may be much later (a buffered send, a request waited late).
    pulled: Vec<Handle>,
    /// Eager bytes given back to a peer at once (a quarter of the budget), computed once: the
    /// division is not for every message.
    credit_batch: usize,
    /// The layouts of sends whose RTS carries one (`post_send_offering`), until the RTS is
    /// on its way: apart from the requests, which every message moves, since few sends have
    /// one.
    offers: Vec<(Handle, Box<[u8]>)>,
    /// WAKE frames received: such a frame does nothing but end a sleep, so only this count
    /// shows that one came (`Counters::wake_messages_received`).
    wakes_received: u64,
}

fn protocol(peer: Rank, what: impl Into<Box<str>>) -> PmlError {
    PmlError::Protocol {
        peer,
        what: what.into(),
    }
}

/// The largest payload a send goes eagerly with: the peer's eager limit (or the send's own,
/// if lower), as far as one frame holds.
#[inline]
fn eager_max(caps: PeerCaps, send_limit: Option<usize>) -> usize {
    let limit = send_limit.map_or(caps.eager_limit, |l| l.min(caps.eager_limit));
    limit.min(caps.max_frame - SYNC_MATCH_HEADER_LEN)
}

/// Eager when the message fits the eager limit and the peer still has budget for it.
fn eager_now(p: &Peer, caps: PeerCaps, len: usize, send_limit: Option<usize>) -> bool {
    len <= eager_max(caps, send_limit) && p.credit >= len.saturating_add(EAGER_OVERHEAD)
}

/// Copies a matched eager payload into a receive buffer, as much as fits: a longer message
/// completes the receive as truncated.
// Inline: it runs once a received message, and a call's result, the size of an error,
// comes back through memory.
#[inline(always)]
fn copy_eager<R: RecvBytes>(buf: &mut R, envelope: Envelope, payload: &[u8]) -> Outcome<Status> {
    let capacity = recv_bytes::capacity(buf);
    let n = payload.len().min(capacity);
    recv_bytes::copy_in(buf, 0, &payload[..n]);
    let status = Status {
        source: envelope.source,
        tag: envelope.tag,
        len: payload.len(),
    };
    receive_result(status, capacity)
}

#[inline(always)]
fn receive_result(status: Status, capacity: usize) -> Outcome<Status> {
    if status.len > capacity {
        Err(truncated(status, capacity))
    } else {
        Ok(status)
    }
}

#[cold]
fn truncated(status: Status, capacity: usize) -> Box<PmlError> {
    Box::new(PmlError::truncated(status, capacity))
}

impl<S: SendBytes, R: RecvBytes> Core<S, R> {
    pub fn new(peers: usize, config: CoreConfig) -> Self {
        Core {
            config,
            requests: Requests::default(),
            matched_messages: Requests::default(),
            matcher: Matcher::default(),
            sequencer: Sequencer::default(),
            peers: (0..peers).map(|_| Peer::default()).collect(),
            ready: VecDeque::new(),
            actions: VecDeque::new(),
            claim: None,
            claim_end: None,
            read_staging: Vec::new(),
            pulled: Vec::new(),
            credit_batch: config.unexpected_budget / 4,
            offers: Vec::new(),
            wakes_received: 0,
        }
    }

    /// One more peer, the next rank, reached as `caps` say (a process met after start-up).
    pub fn add_peer(&mut self, caps: PeerCaps) {
        let peer = self.peers.len() as Rank;
        self.peers.push(Peer::default());
        self.set_peer(peer, caps);
    }

    /// Declares how `peer` is reached. Must precede any traffic with it.
    pub fn set_peer(&mut self, peer: Rank, caps: PeerCaps) {
        assert!(
            caps.max_frame > MAX_HEADER_LEN,
            "a transport's frames must hold a header and some data"
        );
        let budget = self.config.unexpected_budget;
        let p = &mut self.peers[peer as usize];
        p.caps = Some(caps);
        p.credit = budget;
    }

    fn peer(&mut self, peer: Rank) -> Result<(&mut Peer, PeerCaps), PmlError> {
        // The error is built only on the way out: one built eagerly (`ok_or`) would be
        // dropped on every call of the hot path.
        if let Some(p) = self.peers.get_mut(peer as usize) {
            if let Some(caps) = p.caps {
                return Ok((p, caps));
            }
        }
        Err(PmlError::UnknownPeer(peer))
    }

    fn mark_ready(&mut self, peer: Rank) {
        let p = &mut self.peers[peer as usize];
        if !p.in_ready {
            p.in_ready = true;
            self.ready.push_back(peer);
        }
    }

    fn push_control(&mut self, peer: Rank, c: Control) {
        self.peers[peer as usize].control.push_back(c);
        self.mark_ready(peer);
    }

    // ---- sends ----

    /// Whether a send of `len` bytes to `peer` posted now goes eagerly; otherwise a transport
    /// that reads remote memory must expose the buffer (register it) before posting.
    pub fn sends_eagerly(&self, peer: Rank, len: usize) -> bool {
        self.peers
            .get(peer as usize)
            .is_some_and(|p| p.caps.is_some_and(|caps| eager_now(p, caps, len, None)))
    }

    pub fn post_send(&mut self, args: SendArgs<S>) -> Result<Handle, PmlError> {
        let len = args.buf.message_len();
        let (p, caps) = self.peer(args.peer)?;
        let eager = eager_now(p, caps, len, args.eager_limit);
        if eager {
            p.credit -= len + EAGER_OVERHEAD;
        }
        let sync = args.mode == SendMode::Synchronous;
        let after = match (eager, sync) {
            (true, false) => AfterTransmit::Done,
            (true, true) => AfterTransmit::AwaitAck,
            (false, _) => AfterTransmit::AwaitPull,
        };
        let envelope = WireEnvelope {
            context: args.context,
            source: args.source,
            tag: args.tag,
            // Numbered per (context, world peer), not per communicator rank: a context id
            // that is freed and reused by a communicator with other members keeps each
            // pair's numbering in step on both sides.
            seq: self.sequencer.next_outgoing(args.context, args.peer),
        };
        let send = self.requests.insert(Request::Send {
            buf: args.buf,
            peer: args.peer,
            context: args.context,
            tag: args.tag,
            len,
            remote: args.remote,
            state: SendState::Transmitting(after),
        });
        let frame = if eager {
            Ordered::Match {
                send,
                envelope,
                sync,
            }
        } else {
            Ordered::Rts { send, envelope }
        };
        self.peers[args.peer as usize].ordered.push_back(frame);
        self.mark_ready(args.peer);
        Ok(send)
    }

    /// Posts a send of a non-contiguous buffer by rendezvous whatever its length, its RTS
    /// carrying `layout` (`layout::encode` of the buffer's description), so that the receiver
    /// reads its blocks in place, a run at a time (`args.remote`: the first element's address
    /// and the key that reaches the blocks). The layout must fit the peer's frames with the
    /// RTS header: the transport that offers it checked.
    pub fn post_send_offering(
        &mut self,
        mut args: SendArgs<S>,
        layout: Box<[u8]>,
    ) -> Result<Handle, PmlError> {
        let peer = args.peer;
        let max_frame = self.peer(peer)?.1.max_frame;
        if wire::RTS_LEN + layout.len() > max_frame {
            return Err(protocol(
                peer,
                format!(
                    "internal error: a send's layout of {} bytes offered past the {max_frame}-byte \
                     frames to rank {peer}",
                    layout.len()
                ),
            ));
        }
        args.eager_limit = Some(0);
        let send = self.post_send(args)?;
        self.offers.push((send, layout));
        Ok(send)
    }

    // ---- receives ----

    /// Posts a receive; it matches an already-arrived message at once if there is one.
    pub fn post_recv(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: R,
    ) -> Result<Handle, PmlError> {
        if let Some((envelope, pending)) = self.matcher.take_unexpected(context, source, tag) {
            let recv = self.unmatched_request(buf, envelope);
            self.deliver_pending(recv, envelope, pending)?;
            return Ok(recv);
        }
        Ok(self.post_unmatched(context, source, tag, buf))
    }

    /// Posts a receive that no waiting message matches (the caller looked).
    #[inline]
    fn post_unmatched(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        buf: R,
    ) -> Handle {
        let matcher = &mut self.matcher;
        self.requests.insert_with(|recv| Request::Recv {
            buf,
            state: RecvState::Posted(matcher.post(context, source, tag, recv)),
        })
    }

    /// Looks for a message the selectors accept without taking it.
    pub fn probe(&mut self, context: ContextId, source: SourceSel, tag: TagSel) -> Option<Status> {
        self.matcher
            .peek_unexpected(context, source, tag)
            .map(|(e, p)| Status {
                source: e.source,
                tag: e.tag,
                len: p.len(),
            })
    }

    /// Takes a message the selectors accept out of the queue, so that no other receive can
    /// have it; `matched_recv` delivers it later.
    pub fn matched_probe(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Option<(MessageHandle, Status)> {
        let (envelope, pending) = self.matcher.take_unexpected(context, source, tag)?;
        let status = Status {
            source: envelope.source,
            tag: envelope.tag,
            len: pending.len(),
        };
        let handle = self.matched_messages.insert((envelope, pending));
        Some((MessageHandle(handle), status))
    }

    pub fn matched_recv(&mut self, message: MessageHandle, buf: R) -> Result<Handle, PmlError> {
        let (envelope, pending) = self
            .matched_messages
            .remove(message.0)
            .map_err(|s| PmlError::StaleRequest(s.0))?;
        let recv = self.unmatched_request(buf, envelope);
        self.deliver_pending(recv, envelope, pending)?;
        Ok(recv)
    }

    /// Cancels a receive that has not matched; returns whether it was cancelled.
    pub fn cancel(&mut self, h: Handle) -> Result<bool, PmlError> {
        let Request::Recv { state, .. } = self.request_mut(h)? else {
            return Ok(false);
        };
        let RecvState::Posted(id) = *state else {
            return Ok(false);
        };
        if self.matcher.cancel(id).is_none() {
            return Ok(false);
        }
        self.set_recv_state(h, RecvState::Done(Err(Box::new(PmlError::Cancelled))));
        Ok(true)
    }

    fn request_mut(&mut self, h: Handle) -> Result<&mut Request<S, R>, PmlError> {
        self.requests
            .get_mut(h)
            .map_err(|s| PmlError::StaleRequest(s.0))
    }

    fn set_recv_state(&mut self, h: Handle, new: RecvState) {
        if let Ok(Request::Recv { state, .. }) = self.requests.get_mut(h) {
            *state = new;
        }
    }

    fn deliver_pending(
        &mut self,
        recv: Handle,
        envelope: Envelope,
        pending: Pending,
    ) -> Result<(), PmlError> {
        match pending {
            Pending::Eager {
                peer,
                payload,
                sync_request,
            } => self.deliver(
                recv,
                envelope,
                peer,
                Incoming::Eager {
                    payload: payload.as_slice(),
                    sync_request,
                },
            ),
            Pending::Rts {
                peer,
                len,
                send_request,
                remote,
                layout,
            } => self.deliver(
                recv,
                envelope,
                peer,
                Incoming::Rts {
                    len,
                    send_request,
                    remote,
                    layout,
                },
            ),
        }
    }

    /// Copies a matched eager message into its receive, which is done then.
    #[inline(always)]
    fn deliver_eager(
        &mut self,
        recv: Handle,
        envelope: Envelope,
        peer: Rank,
        payload: &[u8],
        sync_request: Option<u64>,
    ) {
        let Ok(Request::Recv { buf, state }) = self.requests.get_mut(recv) else {
            unreachable!("a matched receive handle is live until delivered");
        };
        *state = RecvState::Done(copy_eager(buf, envelope, payload));
        self.eager_consumed(peer, payload.len(), sync_request);
    }

    /// Hands a matched message to its receive: copies an eager payload, or starts pulling a
    /// rendezvous one.
    fn deliver(
        &mut self,
        recv: Handle,
        envelope: Envelope,
        peer: Rank,
        incoming: Incoming<'_>,
    ) -> Result<(), PmlError> {
        let (len, send_request, remote, layout) = match incoming {
            Incoming::Eager {
                payload,
                sync_request,
            } => {
                self.deliver_eager(recv, envelope, peer, payload, sync_request);
                return Ok(());
            }
            Incoming::Rts {
                len,
                send_request,
                remote,
                layout,
            } => (len, send_request, remote, layout),
        };
        let remote_read = self.peer(peer)?.1.remote_read;
        let Ok(Request::Recv { buf, state }) = self.requests.get_mut(recv) else {
            unreachable!("a matched receive handle is live until delivered");
        };
        let capacity = recv_bytes::capacity(buf);
        let status = Status {
            source: envelope.source,
            tag: envelope.tag,
            len,
        };
        let deliver = len.min(capacity);
        if remote_read {
            if deliver == 0 {
                *state = RecvState::Done(receive_result(status, capacity));
                self.push_control(peer, Control::Fin(send_request));
            } else {
                *state = RecvState::Reading {
                    status,
                    deliver,
                    peer,
                    send_request,
                    in_blocks: false,
                };
                self.actions.push_back(Action::Read {
                    recv,
                    peer,
                    remote,
                    len: deliver,
                    layout,
                });
            }
        } else {
            *state = if deliver == 0 {
                RecvState::Done(receive_result(status, capacity))
            } else {
                RecvState::Pulling {
                    status,
                    deliver,
                    received: 0,
                    peer,
                }
            };
            self.push_control(
                peer,
                Control::Get {
                    send_request,
                    recv_request: recv.to_wire(),
                    len: deliver as u64,
                },
            );
        }
        Ok(())
    }

    /// An eager message of `len` bytes from `peer` reached its receive: a synchronous sender
    /// learns it matched, and the budget it took goes back.
    #[inline]
    fn eager_consumed(&mut self, peer: Rank, len: usize, sync_request: Option<u64>) {
        if let Some(s) = sync_request {
            self.push_control(peer, Control::Ack(s));
        }
        self.return_credit(peer, len + EAGER_OVERHEAD);
    }

    /// Gives eager budget back in batches, so that credit frames stay rare.
    // Inline, the batch's frame out of line: it runs for every received message.
    #[inline(always)]
    fn return_credit(&mut self, peer: Rank, bytes: usize) {
        let p = &mut self.peers[peer as usize];
        p.to_return += bytes;
        if p.to_return >= self.credit_batch {
            self.send_credit(peer);
        }
    }

    /// Queues a WAKE frame for `peer`: whatever it waits for was published outside the
    /// PML, and the frame's arrival ends its sleep in its PML (see `Engine::wake_peer`).
    pub fn wake(&mut self, peer: Rank) -> Result<(), PmlError> {
        self.peer(peer)?;
        self.push_control(peer, Control::Wake);
        Ok(())
    }

    /// WAKE frames received so far.
    pub fn wakes_received(&self) -> u64 {
        self.wakes_received
    }

    #[inline(never)]
    fn send_credit(&mut self, peer: Rank) {
        let n = std::mem::take(&mut self.peers[peer as usize].to_return);
        self.push_control(peer, Control::Credit(n as u64));
    }

    // ---- frames in ----

    /// Feeds one whole frame that arrived from `peer`.
    pub fn on_frame(&mut self, peer: Rank, bytes: &[u8]) -> Result<(), PmlError> {
        self.peer(peer)?;
        // The common frame, an eager message in order, takes a path of its own, kept small
        // so that what it carries stays in registers; every other frame goes out of line.
        if let Some((envelope, payload)) = wire::plain_match(bytes) {
            let (c, seq) = (envelope.context, envelope.seq);
            if self.sequencer.arrive_in_order(c, peer, seq) {
                self.on_eager(peer, envelope, None, payload)?;
                if self.sequencer.holds_any() {
                    return self.release_held(peer, c);
                }
                return Ok(());
            }
        }
        self.on_other_frame(peer, bytes)
    }

    /// Hands on the frames held for arriving early whose turn has come.
    #[inline]
    fn release_held(&mut self, peer: Rank, context: ContextId) -> Result<(), PmlError> {
        while let Some(held) = self.sequencer.release_next(context, peer) {
            let frame = Frame::decode(&held).map_err(|error| PmlError::Wire {
                peer,
                error: Box::new(error),
            })?;
            self.on_matching_frame(peer, frame)?;
        }
        Ok(())
    }

    /// Every frame but an eager message in order: rendezvous offers, early or invalid
    /// sequence numbers, and the control frames.
    #[inline(never)]
    fn on_other_frame(&mut self, peer: Rank, bytes: &[u8]) -> Result<(), PmlError> {
        let frame = Frame::decode(bytes).map_err(|error| PmlError::Wire {
            peer,
            error: Box::new(error),
        })?;
        match frame {
            Frame::Match { envelope, .. } | Frame::Rts { envelope, .. } => {
                let (c, s, seq) = (envelope.context, peer, envelope.seq);
                match self.sequencer.arrive(c, s, seq) {
                    Arrival::InOrder => {
                        self.on_matching_frame(peer, frame)?;
                        self.release_held(peer, c)
                    }
                    Arrival::Early => {
                        self.sequencer.hold(c, s, seq, bytes.to_vec());
                        Ok(())
                    }
                    Arrival::Invalid { expected } => Err(protocol(
                        peer,
                        format!(
                            "message number {seq} from rank {s} in context {c} \
                             when {expected} was next"
                        ),
                    )),
                }
            }
            Frame::Fin { send_request } => {
                self.send_step(peer, send_request, "FIN", |state| match state {
                    SendState::AwaitPull => Some(SendState::Done(Ok(()))),
                    _ => None,
                })?;
                self.pulled.push(Handle::from_wire(send_request));
                Ok(())
            }
            Frame::Ack { send_request } => {
                self.send_step(peer, send_request, "ACK", |state| match state {
                    SendState::AwaitAck => Some(SendState::Done(Ok(()))),
                    _ => None,
                })
            }
            Frame::Get {
                send_request,
                recv_request,
                len,
            } => self.on_get(peer, send_request, recv_request, len),
            Frame::Data {
                recv_request,
                offset,
                payload,
            } => self.on_data(peer, recv_request, offset, payload),
            Frame::Credit { bytes } => {
                let budget = self.config.unexpected_budget;
                let (p, _) = self.peer(peer)?;
                let credit = usize::try_from(bytes)
                    .ok()
                    .and_then(|b| p.credit.checked_add(b))
                    .filter(|&c| c <= budget)
                    .ok_or_else(|| {
                        protocol(peer, format!("credit of {bytes} bytes exceeds the budget"))
                    })?;
                p.credit = credit;
                Ok(())
            }
            // Its arrival ended this rank's sleep, which is all it was for.
            Frame::Wake => {
                self.wakes_received += 1;
                Ok(())
            }
        }
    }

    /// An eager message whose turn it is: to the earliest posted receive that accepts it,
    /// else to the claim, else to the unexpected queue.
    // Inline into `on_frame`, even though the compiler would call it: 30 instructions fewer
    // a received message, 8-byte ping-pong and window alike (callgrind).
    #[inline(always)]
    fn on_eager(
        &mut self,
        peer: Rank,
        envelope: WireEnvelope,
        sync_request: Option<u64>,
        payload: &[u8],
    ) -> Result<(), PmlError> {
        let envelope = Envelope {
            context: envelope.context,
            source: envelope.source,
            tag: envelope.tag,
        };
        if let Some(recv) = self.matcher.match_arrival(envelope) {
            self.deliver_eager(recv, envelope, peer, payload, sync_request);
            return Ok(());
        }
        self.unmatched(
            envelope,
            peer,
            Incoming::Eager {
                payload,
                sync_request,
            },
        )
    }

    fn on_matching_frame(&mut self, peer: Rank, frame: Frame<'_>) -> Result<(), PmlError> {
        let (envelope, incoming) = match frame {
            Frame::Match {
                envelope,
                sync_request,
                payload,
            } => return self.on_eager(peer, envelope, sync_request, payload),
            Frame::Rts {
                envelope,
                send_request,
                len,
                remote,
                layout,
            } => {
                let len = usize::try_from(len).map_err(|_| {
                    protocol(
                        peer,
                        format!("a message of {len} bytes is beyond this machine"),
                    )
                })?;
                let layout = match layout {
                    None => None,
                    Some(bytes) => Some(Box::new(self.offered_layout(peer, remote, bytes, len)?)),
                };
                (
                    envelope,
                    Incoming::Rts {
                        len,
                        send_request,
                        remote,
                        layout,
                    },
                )
            }
            _ => unreachable!("only MATCH and RTS are sequenced"),
        };
        let envelope = Envelope {
            context: envelope.context,
            source: envelope.source,
            tag: envelope.tag,
        };
        if let Some(recv) = self.matcher.match_arrival(envelope) {
            return self.deliver(recv, envelope, peer, incoming);
        }
        self.unmatched(envelope, peer, incoming)
    }

    /// The layout `bytes` that `peer`'s offer of a `len`-byte send at `remote` carried,
    /// checked: only a peer reached by a transport that reads its memory offers one.
    #[cold]
    fn offered_layout(
        &mut self,
        peer: Rank,
        remote: RemoteKey,
        bytes: &[u8],
        len: usize,
    ) -> Result<RemoteLayout, PmlError> {
        if !self.peer(peer)?.1.remote_read {
            return Err(protocol(
                peer,
                "a rendezvous offer with its send's layout over a transport that does not read \
                 a peer's memory",
            ));
        }
        RemoteLayout::decode(remote.addr, bytes, len).map_err(|e| protocol(peer, e))
    }

    /// A message no posted receive accepted: to the claim if it accepts it, else to the
    /// unexpected queue.
    fn unmatched(
        &mut self,
        envelope: Envelope,
        peer: Rank,
        incoming: Incoming<'_>,
    ) -> Result<(), PmlError> {
        // Every posted receive came before the claim's, so it may have the message only now.
        if self.claim.as_ref().is_some_and(|c| c.accepts(envelope)) {
            return self.deliver_to_claim(envelope, peer, incoming);
        }
        let pending = match incoming {
            Incoming::Eager {
                payload,
                sync_request,
            } => Pending::Eager {
                peer,
                payload: StoredPayload::copy_of(payload),
                sync_request,
            },
            Incoming::Rts {
                len,
                send_request,
                remote,
                layout,
            } => Pending::Rts {
                peer,
                len,
                send_request,
                remote,
                layout,
            },
        };
        self.matcher.queue_unexpected(envelope, pending);
        Ok(())
    }

    /// Moves a send along on a control frame, after checking that the frame is one this send
    /// can take from this peer.
    fn send_step(
        &mut self,
        from: Rank,
        send_request: u64,
        kind: &str,
        step: impl FnOnce(&SendState) -> Option<SendState>,
    ) -> Result<(), PmlError> {
        let h = Handle::from_wire(send_request);
        match self.requests.get_mut(h) {
            Ok(Request::Send { peer, state, .. }) if *peer == from => match step(state) {
                Some(next) => {
                    *state = next;
                    Ok(())
                }
                None => Err(protocol(
                    from,
                    format!("{kind} for send {h} in the wrong state"),
                )),
            },
            _ => Err(protocol(
                from,
                format!("{kind} for send {h}, which it was not sent"),
            )),
        }
    }

    fn on_get(
        &mut self,
        from: Rank,
        send_request: u64,
        recv_request: u64,
        len: u64,
    ) -> Result<(), PmlError> {
        let h = Handle::from_wire(send_request);
        let stream = match self.requests.get_mut(h) {
            Ok(Request::Send {
                buf,
                peer,
                state,
                len: send_len,
                ..
            }) if *peer == from && matches!(state, SendState::AwaitPull) => {
                let end = usize::try_from(len)
                    .ok()
                    .filter(|&n| n <= *send_len)
                    .ok_or_else(|| {
                        protocol(
                            from,
                            format!("GET of {len} bytes from a {send_len}-byte send"),
                        )
                    })?;
                if end == 0 {
                    *state = SendState::Done(Ok(()));
                    return Ok(());
                }
                *state = SendState::Streaming;
                Stream {
                    send: h,
                    recv_request,
                    offset: 0,
                    end,
                }
            }
            _ => {
                return Err(protocol(
                    from,
                    format!("GET for send {h}, which is not waiting for one"),
                ))
            }
        };
        self.peers[from as usize].streams.push_back(stream);
        self.mark_ready(from);
        Ok(())
    }

    fn on_data(
        &mut self,
        from: Rank,
        recv_request: u64,
        offset: u64,
        payload: &[u8],
    ) -> Result<(), PmlError> {
        self.data_target(from, recv_request, offset, payload.len())?
            .fill(payload);
        self.data_landed(from, recv_request, payload.len())
    }

    /// The pulling receive `recv_request` and its progress, if `from` may send it DATA.
    fn pulling(
        &mut self,
        from: Rank,
        recv_request: u64,
    ) -> Result<(&mut R, &mut RecvState, usize, usize), PmlError> {
        let h = Handle::from_wire(recv_request);
        let Ok(Request::Recv { buf, state }) = self.requests.get_mut(h) else {
            return Err(protocol(
                from,
                format!("DATA for receive {h}, which does not exist"),
            ));
        };
        match state {
            RecvState::Pulling {
                deliver,
                received,
                peer,
                ..
            } if *peer == from => {
                let (deliver, received) = (*deliver, *received);
                Ok((buf, state, deliver, received))
            }
            _ => Err(protocol(
                from,
                format!("DATA for receive {h}, which is not pulling from rank {from}"),
            )),
        }
    }

    /// Where `len` bytes of DATA at `offset` for `recv_request` go: the transport writes them
    /// there (a stream transport reads them from its socket straight into the user's buffer),
    /// then reports `data_landed`. The frame's place and length are checked first, so no
    /// frame writes outside the part of the buffer the receive still expects.
    pub fn data_target(
        &mut self,
        from: Rank,
        recv_request: u64,
        offset: u64,
        len: usize,
    ) -> Result<DataTarget<'_>, PmlError> {
        let (buf, _, deliver, received) = self.pulling(from, recv_request)?;
        if offset != received as u64 || len > deliver - received {
            return Err(protocol(
                from,
                format!(
                    "DATA of {len} bytes at offset {offset} for a receive expecting offset \
                     {received} of {deliver}"
                ),
            ));
        }
        if buf.blocks().is_none() {
            return Ok(DataTarget::Bytes(
                &mut buf.as_mut()[received..received + len],
            ));
        }
        let blocks = buf.blocks().expect("checked above");
        Ok(DataTarget::Blocks {
            blocks,
            range: PackedRange {
                start: received,
                len,
            },
        })
    }

    /// The `len` bytes `data_target` lent were written.
    pub fn data_landed(
        &mut self,
        from: Rank,
        recv_request: u64,
        len: usize,
    ) -> Result<(), PmlError> {
        let (buf, state, deliver, received) = self.pulling(from, recv_request)?;
        if len > deliver - received {
            return Err(protocol(
                from,
                format!("{len} DATA bytes landed past the {deliver} the receive expects"),
            ));
        }
        let capacity = recv_bytes::capacity(buf);
        let RecvState::Pulling {
            status, received, ..
        } = state
        else {
            unreachable!("checked by pulling");
        };
        *received += len;
        if *received == deliver {
            *state = RecvState::Done(receive_result(*status, capacity));
        }
        Ok(())
    }

    // ---- frames out ----

    /// The next peer with frames to send, if any. The caller sends as many as its transport
    /// takes; a peer it could not finish must be retried by the caller.
    pub fn next_ready_peer(&mut self) -> Option<Rank> {
        let peer = self.ready.pop_front()?;
        self.peers[peer as usize].in_ready = false;
        Some(peer)
    }

    /// Whether frames wait to go out or remote reads to be made (the caller's work after
    /// frames came in).
    #[inline]
    pub fn has_work(&self) -> bool {
        !(self.ready.is_empty() && self.actions.is_empty())
    }

    pub fn has_output(&self, peer: Rank) -> bool {
        self.peers.get(peer as usize).is_some_and(Peer::has_output)
    }

    /// The next frame for `peer`; after the transport took it, call `transmitted(peer)`.
    pub fn next_transmit(&self, peer: Rank) -> Option<Transmit<'_>> {
        let p = self.peers.get(peer as usize)?;
        let queue = p.front_queue()?;
        // The frames' payloads are not encoded (only their headers are): they travel as
        // `payload`.
        let (frame, payload): (Frame<'_>, Payload<'_>) = if queue == OutQueue::Control {
            let c = p.control.front().expect("the front queue has a frame");
            let f = match *c {
                Control::Fin(s) => Frame::Fin { send_request: s },
                Control::Ack(s) => Frame::Ack { send_request: s },
                Control::Credit(bytes) => Frame::Credit { bytes },
                Control::Wake => Frame::Wake,
                Control::Get {
                    send_request,
                    recv_request,
                    len,
                } => Frame::Get {
                    send_request,
                    recv_request,
                    len,
                },
            };
            (f, Payload::Bytes(&[]))
        } else if queue == OutQueue::Ordered {
            let o = p.ordered.front().expect("the front queue has a frame");
            match *o {
                Ordered::Match {
                    send,
                    envelope,
                    sync,
                } => {
                    let payload = self.send_payload(send, 0, None);
                    let frame = Frame::Match {
                        envelope,
                        sync_request: sync.then(|| send.to_wire()),
                        payload: &[],
                    };
                    (frame, payload)
                }
                Ordered::Rts { send, envelope } => {
                    let Ok(Request::Send { len, remote, .. }) = self.requests.get(send) else {
                        unreachable!("a queued RTS's send is live");
                    };
                    let layout = self.offer_of(send);
                    let frame = Frame::Rts {
                        envelope,
                        send_request: send.to_wire(),
                        len: *len as u64,
                        remote: *remote,
                        layout: layout.map(|_| &[][..]),
                    };
                    (frame, Payload::Bytes(layout.unwrap_or(&[])))
                }
            }
        } else {
            let s = p.streams.front().expect("the front queue has a frame");
            let chunk = s.chunk(p.caps);
            let payload = self.send_payload(s.send, s.offset, Some(chunk));
            let frame = Frame::Data {
                recv_request: s.recv_request,
                offset: s.offset as u64,
                payload: &[],
            };
            (frame, payload)
        };
        let mut header = [0u8; MAX_HEADER_LEN];
        let header_len = frame.encode_header(&mut header);
        Some(Transmit {
            header,
            header_len,
            payload,
        })
    }

    /// The layout `send`'s RTS carries, if it has one (`post_send_offering`).
    fn offer_of(&self, send: Handle) -> Option<&[u8]> {
        if self.offers.is_empty() {
            return None;
        }
        self.offers
            .iter()
            .find(|(h, _)| *h == send)
            .map(|(_, layout)| &layout[..])
    }

    /// The bytes of `send` from `start`, `len` of them (all the rest if `None`).
    #[inline]
    fn send_payload(&self, send: Handle, start: usize, len: Option<usize>) -> Payload<'_> {
        let Ok(Request::Send { buf, .. }) = self.requests.get(send) else {
            unreachable!("a queued frame's send is live");
        };
        if let Some(blocks) = buf.blocks() {
            let len = len.unwrap_or(buf.message_len() - start);
            return Payload::Blocks {
                blocks,
                range: PackedRange { start, len },
            };
        }
        let bytes = &buf.bytes()[start..];
        Payload::Bytes(len.map_or(bytes, |n| &bytes[..n]))
    }

    /// A stream transport wrote part of the frame `next_transmit(peer)` returned and must
    /// finish it before any other: until `transmitted(peer)`, `next_transmit(peer)` returns
    /// that same frame, whatever is queued for the peer meanwhile.
    pub fn hold_front(&mut self, peer: Rank) {
        let p = &mut self.peers[peer as usize];
        p.held = p.front_queue();
    }

    /// The frame `next_transmit(peer)` returned is on its way: advance the state it belongs to.
    pub fn transmitted(&mut self, peer: Rank) {
        let p = &mut self.peers[peer as usize];
        let queue = p.front_queue();
        p.held = None;
        if queue == Some(OutQueue::Control) {
            p.control.pop_front();
            return;
        }
        if queue == Some(OutQueue::Ordered) {
            let o = p.ordered.pop_front().expect("the front queue has a frame");
            let send = match o {
                Ordered::Match { send, .. } => send,
                Ordered::Rts { send, .. } => {
                    if !self.offers.is_empty() {
                        self.offers.retain(|(h, _)| *h != send);
                    }
                    send
                }
            };
            if let Ok(Request::Send { state, .. }) = self.requests.get_mut(send) {
                if let SendState::Transmitting(after) = *state {
                    *state = match after {
                        AfterTransmit::Done => SendState::Done(Ok(())),
                        AfterTransmit::AwaitAck => SendState::AwaitAck,
                        AfterTransmit::AwaitPull => SendState::AwaitPull,
                    };
                }
            }
            return;
        }
        let caps = p.caps;
        let Some(s) = p.streams.front_mut() else {
            return;
        };
        s.offset += s.chunk(caps);
        if s.offset == s.end {
            let send = s.send;
            p.streams.pop_front();
            if let Ok(Request::Send { state, .. }) = self.requests.get_mut(send) {
                *state = SendState::Done(Ok(()));
            }
        }
    }

    // ---- remote reads ----

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The blocks a `Read` action's bytes may land in straight (the first `len` packed
    /// bytes), where the receive is laid out in blocks: a transport that reads into them
    /// (`Transport::read_into_blocks`) needs no [`read_target`](Self::read_target), and its
    /// caller says so with [`read_lands_in_blocks`](Self::read_lands_in_blocks). The
    /// description is what [`RecvBytes`] promises of it.
    pub fn read_blocks(&self, recv: Handle) -> Result<Option<Blocks>, PmlError> {
        match self.requests.get(recv) {
            Ok(Request::Recv {
                buf,
                state: RecvState::Reading { .. },
            }) => Ok(buf.blocks().copied()),
            _ => Err(PmlError::StaleRequest(recv)),
        }
    }

    /// The transport took a `Read` action's bytes straight into the receive's blocks (from
    /// [`read_blocks`](Self::read_blocks)): the read finishes with nothing to unpack.
    pub fn read_lands_in_blocks(&mut self, recv: Handle) -> Result<(), PmlError> {
        match self.requests.get_mut(recv) {
            Ok(Request::Recv {
                buf,
                state: RecvState::Reading { in_blocks, .. },
            }) if buf.blocks().is_some() => {
                *in_blocks = true;
                Ok(())
            }
            _ => Err(PmlError::StaleRequest(recv)),
        }
    }

    /// Where a `Read` action's bytes go as contiguous bytes: the first `len` bytes of the
    /// receive buffer, or, where the receive is laid out in blocks, a staging buffer made
    /// here, which is unpacked once the read finished.
    pub fn read_target(&mut self, recv: Handle) -> Result<&mut [u8], PmlError> {
        match self.requests.get_mut(recv) {
            Ok(Request::Recv {
                buf,
                state: RecvState::Reading { deliver, .. },
            }) => {
                let n = *deliver;
                if buf.blocks().is_none() {
                    return Ok(&mut buf.as_mut()[..n]);
                }
                let at = match self.read_staging.iter().position(|(h, _)| *h == recv) {
                    Some(at) => at,
                    None => {
                        self.read_staging.push((recv, vec![0; n]));
                        self.read_staging.len() - 1
                    }
                };
                Ok(&mut self.read_staging[at].1[..n])
            }
            _ => Err(PmlError::StaleRequest(recv)),
        }
    }

    pub fn read_done(&mut self, recv: Handle) -> Result<(), PmlError> {
        self.finish_read(recv, None)
    }

    /// The read failed: the receive completes with the cause, and the sender is released
    /// (its data is no longer wanted) rather than left waiting forever.
    pub fn read_failed(&mut self, recv: Handle, cause: String) -> Result<(), PmlError> {
        self.finish_read(recv, Some(cause))
    }

    fn finish_read(&mut self, recv: Handle, failure: Option<String>) -> Result<(), PmlError> {
        let request = self
            .requests
            .get_mut(recv)
            .map_err(|s| PmlError::StaleRequest(s.0))?;
        let Request::Recv { buf, state } = request else {
            return Err(PmlError::StaleRequest(recv));
        };
        let RecvState::Reading {
            status,
            peer,
            send_request,
            in_blocks,
            ..
        } = *state
        else {
            return Err(PmlError::StaleRequest(recv));
        };
        let capacity = recv_bytes::capacity(buf);
        // A read into blocks that went through a staging buffer (`read_target`) is unpacked
        // now; one the transport took into the blocks (`read_lands_in_blocks`) is in place.
        if buf.blocks().is_some() {
            match self.read_staging.iter().position(|(h, _)| *h == recv) {
                Some(at) => {
                    let (_, staging) = self.read_staging.swap_remove(at);
                    if failure.is_none() {
                        recv_bytes::copy_in(buf, 0, &staging);
                    }
                }
                // Neither: the bytes read are nowhere, and completing would hand back a
                // buffer never written.
                None if !in_blocks => {
                    return Err(protocol(
                        peer,
                        "internal error: a read into a receive laid out in blocks finished, \
                         but it neither had a staging buffer nor landed in the blocks",
                    ));
                }
                None => {}
            }
        }
        *state = RecvState::Done(match failure {
            None => receive_result(status, capacity),
            Some(cause) => Err(Box::new(PmlError::ReadFailed {
                peer,
                cause: cause.into(),
            })),
        });
        self.push_control(peer, Control::Fin(send_request));
        Ok(())
    }

    // ---- completion ----

    /// The buffer of a rendezvous send a FIN finished since the last call and that is not
    /// collected yet, once each: the peer no longer reads it.
    pub fn next_pulled_send(&mut self) -> Option<&mut S> {
        // A send collected since its FIN is stale here: its collection gave it back.
        let h = loop {
            let h = self.pulled.pop()?;
            if self.requests.get(h).is_ok() {
                break h;
            }
        };
        match self.requests.get_mut(h) {
            Ok(Request::Send { buf, .. }) => Some(buf),
            _ => unreachable!("a pulled handle names a send"),
        }
    }

    pub fn is_complete(&self, h: Handle) -> Result<bool, PmlError> {
        self.requests
            .get(h)
            .map(Request::is_done)
            .map_err(|s| PmlError::StaleRequest(s.0))
    }

    /// The request's outcome and buffer if it finished; the handle is spent after that.
    pub fn take_completion(&mut self, h: Handle) -> Result<Option<Completion<S, R>>, PmlError> {
        let Some(request) = self
            .requests
            .remove_if(h, Request::is_done)
            .map_err(|s| PmlError::StaleRequest(s.0))?
        else {
            return Ok(None);
        };
        let completion = match request {
            Request::Send {
                buf,
                state: SendState::Done(result),
                ..
            } => Completion::Send {
                buf,
                result: result.map_err(|e| *e),
            },
            Request::Recv {
                buf,
                state: RecvState::Done(result),
            } => Completion::Recv {
                buf,
                result: result.map_err(|e| *e),
            },
            _ => unreachable!("checked complete above"),
        };
        Ok(Some(completion))
    }

    /// Requests not yet collected (for leak checks and diagnostics).
    pub fn live_requests(&self) -> usize {
        self.requests.len()
    }

    pub fn unexpected_len(&self) -> usize {
        self.matcher.unexpected_len()
    }
}
