//! MPI matching: posted receives against arriving messages, per communicator context.
//!
//! Posted receives fall into four classes by their selectors: (source, tag), (source, ANY_TAG),
//! (ANY_SOURCE, tag) and (ANY_SOURCE, ANY_TAG), each a FIFO keyed by what it fixes. Every
//! receive in one class queue accepts every message that reaches that queue, so the earliest
//! posted receive that accepts a message is the oldest of at most four queue fronts, compared by
//! posting order. A receive sits in one queue only, so it is stored there and taken out there:
//! while no wildcard receive is posted, matching a message is one pop from its exact queue.
//! Unexpected messages are reachable the same four ways (exact, by source, by tag, all), so a
//! receive finds the earliest-arrived message it accepts at one queue front.
//! Neither side's cost grows with unrelated queued entries. The three wildcard ways are built
//! only once a wildcard receive or probe first looks (from the queued messages, in arrival
//! order) and kept from then on, so a program that never uses wildcards indexes each
//! unexpected message once.
//!
//! Sequencing (MPI's non-overtaking rule) happens before this: messages are handed to the
//! matcher in the order their sender sent them.
//!
//! Queues are keyed by a tag's [`match_key`]: a marked runtime tag matches whatever its mark,
//! and the message's whole envelope (mark included) is what its receive reports.

use std::collections::BinaryHeap;

use slab::Slab;

use crate::envelope::{is_user_tag, match_key, ContextId, Envelope, Rank, SourceSel, Tag, TagSel};
use crate::keyed_queues::{EntryRef, KeyedQueues};

/// Names a posted receive so it can be cancelled: its posting order, unique for the
/// matcher's life, and its selectors, which name its queue. Stale once it matched or was
/// cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostedId {
    order: u64,
    context: ContextId,
    source: SourceSel,
    tag: TagSel,
}

struct Posted<P> {
    order: u64,
    item: P,
}

struct Unexpected<U> {
    order: u64,
    envelope: Envelope,
    item: U,
}

/// The matching engine. `P` is what a posted receive carries (a request handle), `U` what an
/// unexpected message carries (its payload or rendezvous key).
pub struct Matcher<P, U> {
    next_order: u64,
    /// Receives posted and not yet matched or cancelled, across the four queues.
    posted: usize,
    posted_exact: KeyedQueues<(ContextId, Rank, Tag), Posted<P>>,
    posted_by_source: KeyedQueues<(ContextId, Rank), Posted<P>>,
    posted_by_tag: KeyedQueues<(ContextId, Tag), Posted<P>>,
    posted_any: KeyedQueues<ContextId, Posted<P>>,
    unexpected: Slab<Unexpected<U>>,
    unexpected_exact: KeyedQueues<(ContextId, Rank, Tag)>,
    /// Whether the three indexes below are kept. They serve only wildcard receives and
    /// probes, which many programs never make: until the first one, a message is indexed
    /// only by (context, source, tag), and that first lookup builds them from the queued
    /// messages in arrival order.
    wildcard_index: bool,
    /// Only user-tagged messages: those are the ones an ANY_TAG receive may take.
    unexpected_by_source: KeyedQueues<(ContextId, Rank)>,
    unexpected_by_tag: KeyedQueues<(ContextId, Tag)>,
    /// Only user-tagged messages, in arrival order.
    unexpected_any: KeyedQueues<ContextId>,
}

impl<P, U> Default for Matcher<P, U> {
    fn default() -> Self {
        Matcher {
            next_order: 0,
            posted: 0,
            posted_exact: KeyedQueues::default(),
            posted_by_source: KeyedQueues::default(),
            posted_by_tag: KeyedQueues::default(),
            posted_any: KeyedQueues::default(),
            unexpected: Slab::new(),
            unexpected_exact: KeyedQueues::default(),
            wildcard_index: false,
            unexpected_by_source: KeyedQueues::default(),
            unexpected_by_tag: KeyedQueues::default(),
            unexpected_any: KeyedQueues::default(),
        }
    }
}

/// The envelope as its queues know it: its tag's [`match_key`].
#[inline]
fn keyed(envelope: Envelope) -> Envelope {
    Envelope {
        tag: match_key(envelope.tag),
        ..envelope
    }
}

#[inline]
fn keyed_sel(tag: TagSel) -> TagSel {
    match tag {
        TagSel::Tag(t) => TagSel::Tag(match_key(t)),
        any => any,
    }
}

/// Posted receives live in their queue until taken out of it: none is ever dead.
fn stored<P>(_: &Posted<P>) -> bool {
    true
}

fn unexpected_live<U>(slab: &Slab<Unexpected<U>>, r: &EntryRef) -> bool {
    slab.get(r.slot).is_some_and(|u| u.order == r.order)
}

impl PostedId {
    /// The receive's context and selectors.
    pub fn selectors(&self) -> (ContextId, SourceSel, TagSel) {
        (self.context, self.source, self.tag)
    }
}

impl<P, U> Matcher<P, U> {
    /// The `n` oldest arrived messages no receive took yet, with what each carries, in
    /// arrival order, and how many more there are. Keeps `n` at a time, however many
    /// wait (a heap of the newest kept on top, to drop).
    pub fn oldest_unexpected(&self, n: usize) -> (Vec<(Envelope, &U)>, usize) {
        let mut kept = BinaryHeap::with_capacity(n + 1);
        for (slot, u) in self.unexpected.iter() {
            kept.push((u.order, slot));
            if kept.len() > n {
                kept.pop();
            }
        }
        let more = self.unexpected.len() - kept.len();
        let oldest = kept
            .into_sorted_vec()
            .into_iter()
            .map(|(_, slot)| {
                let u = &self.unexpected[slot];
                (u.envelope, &u.item)
            })
            .collect();
        (oldest, more)
    }

    fn take_order(&mut self) -> u64 {
        let order = self.next_order;
        self.next_order += 1;
        order
    }

    /// Finds and removes the earliest posted receive that accepts a message with `envelope`.
    #[inline]
    pub fn match_arrival(&mut self, envelope: Envelope) -> Option<P> {
        // The common case of a message that arrives before its receive: nothing to look up.
        if self.posted == 0 {
            return None;
        }
        let envelope = keyed(envelope);
        let Envelope {
            context: c,
            source: s,
            tag: t,
        } = envelope;
        let matched = if self.posted_by_source.is_empty()
            && self.posted_by_tag.is_empty()
            && self.posted_any.is_empty()
        {
            // No wildcard receive anywhere: the exact queue's front is the match.
            self.posted_exact.pop_front((c, s, t), stored)
        } else {
            self.match_posted(envelope)
        }?;
        self.posted -= 1;
        Some(matched.item)
    }

    /// The earliest posted receive that accepts the message, among the fronts of the queues
    /// of each class, when a wildcard receive is posted. Out of line, so that the common
    /// case above stays small enough to inline where messages arrive. `envelope` is keyed.
    #[inline(never)]
    fn match_posted(&mut self, envelope: Envelope) -> Option<Posted<P>> {
        let Envelope {
            context: c,
            source: s,
            tag: t,
        } = envelope;
        let user = is_user_tag(t);
        let by_source = user && !self.posted_by_source.is_empty();
        let by_tag = !self.posted_by_tag.is_empty();
        let any = user && !self.posted_any.is_empty();
        if !(by_source || by_tag || any) {
            return self.posted_exact.pop_front((c, s, t), stored);
        }
        let order = |p: Option<&Posted<P>>| p.map(|p| p.order);
        let candidates = [
            order(self.posted_exact.front((c, s, t), stored)),
            by_source
                .then(|| order(self.posted_by_source.front((c, s), stored)))
                .flatten(),
            by_tag
                .then(|| order(self.posted_by_tag.front((c, t), stored)))
                .flatten(),
            any.then(|| order(self.posted_any.front(c, stored)))
                .flatten(),
        ];
        let (class, _) = candidates
            .iter()
            .enumerate()
            .filter_map(|(i, order)| order.map(|order| (i, order)))
            .min_by_key(|&(_, order)| order)?;
        // The winner is the front of its class queue: pop it there.
        let taken = match class {
            0 => self.posted_exact.pop_front((c, s, t), stored),
            1 => self.posted_by_source.pop_front((c, s), stored),
            2 => self.posted_by_tag.pop_front((c, t), stored),
            _ => self.posted_any.pop_front(c, stored),
        };
        Some(taken.expect("the front found above is still there"))
    }

    /// Queues a message no posted receive accepted.
    pub fn queue_unexpected(&mut self, envelope: Envelope, item: U) {
        let order = self.take_order();
        let slot = self.unexpected.insert(Unexpected {
            order,
            envelope,
            item,
        });
        let r = EntryRef { slot, order };
        let Envelope {
            context: c,
            source: s,
            tag: t,
        } = keyed(envelope);
        self.unexpected_exact.push((c, s, t), r);
        if self.wildcard_index {
            self.index_for_wildcards(envelope, r);
        }
    }

    fn index_for_wildcards(&mut self, envelope: Envelope, r: EntryRef) {
        let Envelope {
            context: c,
            source: s,
            tag: t,
        } = keyed(envelope);
        self.unexpected_by_tag.push((c, t), r);
        if is_user_tag(t) {
            self.unexpected_by_source.push((c, s), r);
            self.unexpected_any.push(c, r);
        }
    }

    /// Starts keeping the wildcard indexes, indexing the messages already queued in the
    /// order they arrived.
    fn start_wildcard_index(&mut self) {
        self.wildcard_index = true;
        let mut queued: Vec<(Envelope, EntryRef)> = self
            .unexpected
            .iter()
            .map(|(slot, u)| {
                (
                    u.envelope,
                    EntryRef {
                        slot,
                        order: u.order,
                    },
                )
            })
            .collect();
        queued.sort_unstable_by_key(|&(_, r)| r.order);
        for (envelope, r) in queued {
            self.index_for_wildcards(envelope, r);
        }
    }

    /// Inlined so that a receive posted with nothing queued (the common case of a
    /// latency-bound exchange) pays one comparison for the look.
    #[inline]
    fn find_unexpected(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Option<EntryRef> {
        if self.unexpected.is_empty() {
            return None;
        }
        self.find_queued(context, source, tag)
    }

    fn find_queued(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Option<EntryRef> {
        let tag = keyed_sel(tag);
        let wildcard = !matches!((source, tag), (SourceSel::Rank(_), TagSel::Tag(_)));
        if wildcard && !self.wildcard_index {
            self.start_wildcard_index();
        }
        let unexpected = &self.unexpected;
        let live = |r: &EntryRef| unexpected_live(unexpected, r);
        match (source, tag) {
            (SourceSel::Rank(s), TagSel::Tag(t)) => {
                self.unexpected_exact.front((context, s, t), live)
            }
            (SourceSel::Rank(s), TagSel::Any) => {
                self.unexpected_by_source.front((context, s), live)
            }
            (SourceSel::Any, TagSel::Tag(t)) => self.unexpected_by_tag.front((context, t), live),
            (SourceSel::Any, TagSel::Any) => self.unexpected_any.front(context, live),
        }
        .copied()
    }

    /// The earliest-arrived unexpected message the selectors accept, left in the queue (probe).
    pub fn peek_unexpected(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Option<(Envelope, &U)> {
        let r = self.find_unexpected(context, source, tag)?;
        let u = &self.unexpected[r.slot];
        Some((u.envelope, &u.item))
    }

    /// Removes and returns the earliest-arrived unexpected message the selectors accept (a
    /// receive being posted, or a matched probe).
    #[inline]
    pub fn take_unexpected(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Option<(Envelope, U)> {
        // The common case of a receive posted before its message: nothing to look up.
        if self.unexpected.is_empty() {
            return None;
        }
        self.take_queued(context, source, tag)
    }

    fn take_queued(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
    ) -> Option<(Envelope, U)> {
        if let (SourceSel::Rank(s), TagSel::Tag(t), false) =
            (source, keyed_sel(tag), self.wildcard_index)
        {
            // An exact receive while no wildcard has looked: the entry is in one queue only,
            // and one lookup finds and unlinks it.
            let unexpected = &self.unexpected;
            let live = |r: &EntryRef| unexpected_live(unexpected, r);
            let r = self.unexpected_exact.pop_front((context, s, t), live)?;
            let u = self.unexpected.remove(r.slot);
            return Some((u.envelope, u.item));
        }
        let r = self.find_unexpected(context, source, tag)?;
        let u = self.unexpected.remove(r.slot);
        let Envelope {
            context: c,
            source: s,
            tag: t,
        } = keyed(u.envelope);
        let unexpected = &self.unexpected;
        let live = |r: &EntryRef| unexpected_live(unexpected, r);
        self.unexpected_exact.remove((c, s, t), r, live);
        if !self.wildcard_index {
            return Some((u.envelope, u.item));
        }
        self.unexpected_by_tag.remove((c, t), r, live);
        if is_user_tag(t) {
            self.unexpected_by_source.remove((c, s), r, live);
            self.unexpected_any.remove(c, r, live);
        }
        Some((u.envelope, u.item))
    }

    /// Posts a receive that found no unexpected message (the caller tried `take_unexpected`).
    pub fn post(
        &mut self,
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        item: P,
    ) -> PostedId {
        let order = self.take_order();
        let posted = Posted { order, item };
        match (source, keyed_sel(tag)) {
            (SourceSel::Rank(s), TagSel::Tag(t)) => {
                self.posted_exact.push((context, s, t), posted);
            }
            (SourceSel::Rank(s), TagSel::Any) => self.posted_by_source.push((context, s), posted),
            (SourceSel::Any, TagSel::Tag(t)) => self.posted_by_tag.push((context, t), posted),
            (SourceSel::Any, TagSel::Any) => self.posted_any.push(context, posted),
        }
        self.posted += 1;
        PostedId {
            order,
            context,
            source,
            tag,
        }
    }

    /// Removes a posted receive that has not matched yet; `None` if it already matched.
    pub fn cancel(&mut self, id: PostedId) -> Option<P> {
        let PostedId {
            order,
            context: c,
            source,
            tag,
        } = id;
        let this = |p: &Posted<P>| p.order == order;
        let taken = match (source, keyed_sel(tag)) {
            (SourceSel::Rank(s), TagSel::Tag(t)) => self.posted_exact.take_where((c, s, t), this),
            (SourceSel::Rank(s), TagSel::Any) => self.posted_by_source.take_where((c, s), this),
            (SourceSel::Any, TagSel::Tag(t)) => self.posted_by_tag.take_where((c, t), this),
            (SourceSel::Any, TagSel::Any) => self.posted_any.take_where(c, this),
        }?;
        self.posted -= 1;
        Some(taken.item)
    }

    pub fn posted_len(&self) -> usize {
        self.posted
    }

    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(source: Rank, tag: Tag) -> Envelope {
        Envelope {
            context: 0,
            source,
            tag,
        }
    }

    #[test]
    fn the_oldest_unexpected_are_kept_and_the_rest_counted() {
        let mut m: Matcher<(), u32> = Matcher::default();
        for i in 0..10 {
            m.queue_unexpected(env(1, i as Tag), i);
        }
        // Taking some from the middle frees slab slots that later arrivals reuse.
        for tag in [2, 3] {
            assert!(m
                .take_unexpected(0, SourceSel::Rank(1), TagSel::Tag(tag))
                .is_some());
        }
        m.queue_unexpected(env(1, 10), 10);
        let (oldest, more) = m.oldest_unexpected(4);
        let items: Vec<u32> = oldest.iter().map(|(_, &i)| i).collect();
        assert_eq!((items, more), (vec![0, 1, 4, 5], 5));
    }

    #[test]
    fn earliest_posted_wins_across_classes() {
        let mut m: Matcher<&str, ()> = Matcher::default();
        m.post(0, SourceSel::Any, TagSel::Any, "any-any");
        m.post(0, SourceSel::Rank(1), TagSel::Tag(5), "exact");
        assert_eq!(m.match_arrival(env(1, 5)), Some("any-any"));
        assert_eq!(m.match_arrival(env(1, 5)), Some("exact"));
        assert_eq!(m.match_arrival(env(1, 5)), None);
    }

    #[test]
    fn runtime_tags_skip_wildcards() {
        let mut m: Matcher<&str, u8> = Matcher::default();
        m.post(0, SourceSel::Rank(1), TagSel::Any, "by-source");
        m.post(0, SourceSel::Any, TagSel::Any, "any");
        assert_eq!(m.match_arrival(env(1, -3)), None);
        m.queue_unexpected(env(1, -3), 9);
        assert!(m.peek_unexpected(0, SourceSel::Any, TagSel::Any).is_none());
        assert!(m
            .peek_unexpected(0, SourceSel::Rank(1), TagSel::Any)
            .is_none());
        assert_eq!(
            m.take_unexpected(0, SourceSel::Any, TagSel::Tag(-3))
                .map(|x| x.1),
            Some(9)
        );
    }

    #[test]
    fn contexts_are_separate() {
        let mut m: Matcher<u8, ()> = Matcher::default();
        m.post(1, SourceSel::Any, TagSel::Any, 1);
        assert_eq!(m.match_arrival(env(0, 0)), None);
        assert_eq!(
            m.match_arrival(Envelope {
                context: 1,
                source: 0,
                tag: 0
            }),
            Some(1)
        );
    }

    #[test]
    fn first_wildcard_lookup_sees_earlier_messages_in_arrival_order() {
        let mut m: Matcher<(), u8> = Matcher::default();
        m.queue_unexpected(env(2, 7), 1);
        m.queue_unexpected(env(1, 5), 2);
        m.queue_unexpected(env(2, 5), 3);
        m.queue_unexpected(env(1, -4), 4);
        // Exact takes before any wildcard: the wildcard indexes do not exist yet.
        assert_eq!(
            m.take_unexpected(0, SourceSel::Rank(1), TagSel::Tag(5))
                .map(|x| x.1),
            Some(2)
        );
        m.queue_unexpected(env(1, 7), 5);
        let take = |m: &mut Matcher<(), u8>, s, t| m.take_unexpected(0, s, t).map(|x| x.1);
        assert_eq!(take(&mut m, SourceSel::Any, TagSel::Tag(5)), Some(3));
        assert_eq!(take(&mut m, SourceSel::Rank(1), TagSel::Any), Some(5));
        // Indexed from now on: a later arrival joins every index.
        m.queue_unexpected(env(2, 9), 6);
        assert_eq!(take(&mut m, SourceSel::Any, TagSel::Any), Some(1));
        assert_eq!(take(&mut m, SourceSel::Any, TagSel::Any), Some(6));
        assert_eq!(take(&mut m, SourceSel::Any, TagSel::Any), None);
        assert_eq!(take(&mut m, SourceSel::Any, TagSel::Tag(-4)), Some(4));
        assert_eq!(m.unexpected_len(), 0);
    }

    #[test]
    fn marked_tags_match_whatever_their_mark_and_keep_it() {
        let mut m: Matcher<u32, u32> = Matcher::default();
        // Posted first: the arrival with another mark takes it.
        m.post(0, SourceSel::Rank(1), TagSel::Tag(-24), 7);
        assert_eq!(m.match_arrival(env(1, -21)), Some(7));
        // Arrived first: the receive finds it, whole envelope and all, and cancels cleanly.
        m.queue_unexpected(env(1, -19), 8);
        assert_eq!(m.peek_unexpected(0, SourceSel::Rank(1), TagSel::Any), None);
        let (found, item) = m
            .take_unexpected(0, SourceSel::Rank(1), TagSel::Tag(-24))
            .expect("the marked message");
        assert_eq!((found.tag, item), (-19, 8));
        // Another key never matches, nor a tag above the marked ones.
        m.queue_unexpected(env(1, -25), 9);
        m.queue_unexpected(env(1, -16), 10);
        assert!(m
            .take_unexpected(0, SourceSel::Rank(1), TagSel::Tag(-24))
            .is_none());
        assert!(m
            .take_unexpected(0, SourceSel::Any, TagSel::Tag(-17))
            .is_none());
        assert_eq!(
            m.take_unexpected(0, SourceSel::Any, TagSel::Tag(-32))
                .map(|(e, _)| e.tag),
            Some(-25)
        );
        let id = m.post(0, SourceSel::Rank(2), TagSel::Tag(-18), 11);
        assert_eq!(m.cancel(id), Some(11));
    }

    #[test]
    fn cancel_only_before_match() {
        let mut m: Matcher<u8, ()> = Matcher::default();
        let a = m.post(0, SourceSel::Rank(0), TagSel::Tag(1), 1);
        let b = m.post(0, SourceSel::Rank(0), TagSel::Tag(1), 2);
        assert_eq!(m.cancel(a), Some(1));
        assert_eq!(m.cancel(a), None);
        assert_eq!(m.match_arrival(env(0, 1)), Some(2));
        assert_eq!(m.cancel(b), None);
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn cancel_from_the_middle_keeps_the_others_in_order() {
        let mut m: Matcher<u8, ()> = Matcher::default();
        let ids: Vec<PostedId> = (0..5)
            .map(|i| m.post(0, SourceSel::Rank(2), TagSel::Tag(9), i))
            .collect();
        let wildcard = m.post(0, SourceSel::Any, TagSel::Tag(9), 5);
        assert_eq!(m.cancel(ids[2]), Some(2));
        assert_eq!(m.cancel(ids[2]), None);
        assert_eq!(m.cancel(wildcard), Some(5));
        assert_eq!(m.posted_len(), 4);
        let matched: Vec<u8> = (0..5).filter_map(|_| m.match_arrival(env(2, 9))).collect();
        assert_eq!(matched, [0, 1, 3, 4]);
        assert_eq!(m.posted_len(), 0);
    }
}
