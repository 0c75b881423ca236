//! MPI's non-overtaking rule: per (context, sender), messages are matched in the order they
//! were sent. Senders number them; a receiver holds an early arrival until its turn.
//! Numbers are `u32` and wrap: order is decided by the wrapping distance from the expected
//! number, so a long run never breaks it.

use crate::envelope::{ContextId, Rank};
use crate::fast_hash::FastMap;

/// How far ahead of the expected number an arrival may be. Further than that is not reordering
/// but a corrupt or hostile peer, and holding it would let that peer consume unbounded memory.
pub const REORDER_WINDOW: u32 = 1 << 20;

type Stream = (ContextId, Rank);

/// Where an arriving sequence number stands against the stream's expected one.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    InOrder,
    Early,
    /// Behind the expected number (a duplicate) or beyond the reorder window.
    Invalid {
        expected: u32,
    },
}

/// One number per stream, starting at 0. The stream used last is remembered with where its
/// number lives, so that a run of messages on one stream finds it without hashing.
#[derive(Default)]
struct Numbers {
    index: FastMap<Stream, usize>,
    values: Vec<u32>,
    last: Option<(Stream, usize)>,
}

impl Numbers {
    #[inline(always)]
    fn of(&mut self, stream: Stream) -> &mut u32 {
        let at = match self.last {
            Some((last, at)) if last == stream => at,
            _ => self.look_up(stream),
        };
        &mut self.values[at]
    }

    /// Where `stream`'s number lives, made on first use; out of line, so that the hit of
    /// `of` above inlines into every message's path.
    #[inline(never)]
    fn look_up(&mut self, stream: Stream) -> usize {
        let values = &mut self.values;
        let at = *self.index.entry(stream).or_insert_with(|| {
            values.push(0);
            values.len() - 1
        });
        self.last = Some((stream, at));
        at
    }
}

/// Numbers a sender's outgoing messages and orders a receiver's incoming ones.
pub struct Sequencer<F> {
    next_send: Numbers,
    expected: Numbers,
    held: FastMap<(Stream, u32), F>,
}

impl<F> Default for Sequencer<F> {
    fn default() -> Self {
        Sequencer {
            next_send: Numbers::default(),
            expected: Numbers::default(),
            held: FastMap::default(),
        }
    }
}

impl<F> Sequencer<F> {
    /// The number for the next message to `peer` in `context`.
    pub fn next_outgoing(&mut self, context: ContextId, peer: Rank) -> u32 {
        let n = self.outgoing(context, peer);
        let seq = *n;
        *n = n.wrapping_add(1);
        seq
    }

    /// The number the next message to `peer` in `context` will take, for a sender that
    /// advances it only once the message is really on its way.
    #[inline]
    pub fn outgoing(&mut self, context: ContextId, peer: Rank) -> &mut u32 {
        self.next_send.of((context, peer))
    }

    /// Where `seq` stands in its stream. An in-order arrival is accepted at once: the stream
    /// then expects the next number (one lookup on the hot path).
    #[inline]
    pub fn arrive(&mut self, context: ContextId, source: Rank, seq: u32) -> Arrival {
        let expected = self.expected.of((context, source));
        match seq.wrapping_sub(*expected) {
            0 => {
                *expected = expected.wrapping_add(1);
                Arrival::InOrder
            }
            d if d < REORDER_WINDOW => Arrival::Early,
            _ => Arrival::Invalid {
                expected: *expected,
            },
        }
    }

    /// Accepts `seq` if it is the stream's expected number; otherwise changes nothing, and
    /// [`arrive`](Self::arrive) says where it stands.
    #[inline]
    pub fn arrive_in_order(&mut self, context: ContextId, source: Rank, seq: u32) -> bool {
        let expected = self.expected.of((context, source));
        let in_order = *expected == seq;
        if in_order {
            *expected = expected.wrapping_add(1);
        }
        in_order
    }

    /// Keeps an early arrival until its predecessors are through.
    pub fn hold(&mut self, context: ContextId, source: Rank, seq: u32, frame: F) {
        self.held.insert(((context, source), seq), frame);
    }

    /// The held frame whose turn it now is, if it already arrived; it is accepted as it is
    /// returned.
    #[inline]
    pub fn release_next(&mut self, context: ContextId, source: Rank) -> Option<F> {
        if self.held.is_empty() {
            return None;
        }
        let expected = self.expected.of((context, source));
        let frame = self.held.remove(&((context, source), *expected))?;
        *expected = expected.wrapping_add(1);
        Some(frame)
    }

    /// Whether any stream has an early arrival held.
    #[inline]
    pub fn holds_any(&self) -> bool {
        !self.held.is_empty()
    }

    pub fn held_len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_frames_wait_and_release_in_order_across_wrap() {
        let mut s: Sequencer<&str> = Sequencer::default();
        *s.expected.of((0, 1)) = u32::MAX;
        assert_eq!(s.arrive(0, 1, 0), Arrival::Early);
        s.hold(0, 1, 0, "after-wrap");
        assert_eq!(s.release_next(0, 1), None, "its predecessor is missing");
        assert_eq!(s.arrive(0, 1, u32::MAX), Arrival::InOrder);
        assert_eq!(s.release_next(0, 1), Some("after-wrap"));
        assert_eq!(s.release_next(0, 1), None);
        assert_eq!(s.arrive(0, 1, 2), Arrival::Early);
        assert_eq!(s.arrive(0, 1, 0), Arrival::Invalid { expected: 1 });
        assert_eq!(
            s.arrive(0, 1, 1 + REORDER_WINDOW),
            Arrival::Invalid { expected: 1 }
        );
        assert_eq!(s.arrive(0, 1, 1), Arrival::InOrder);
    }

    #[test]
    fn outgoing_numbers_per_stream_wrap() {
        let mut s: Sequencer<()> = Sequencer::default();
        *s.next_send.of((1, 2)) = u32::MAX;
        assert_eq!(s.next_outgoing(1, 2), u32::MAX);
        assert_eq!(s.next_outgoing(1, 2), 0);
        assert_eq!(s.next_outgoing(1, 3), 0);
        assert_eq!(s.next_outgoing(2, 2), 0);
    }
}
