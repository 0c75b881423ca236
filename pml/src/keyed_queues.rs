//! FIFO queues, one per key.
//!
//! An entry that sits in one queue only (a posted receive: it belongs to exactly one selector
//! class) is stored in the queue itself and taken out of it directly. An entry that sits in
//! several queues at once (an unexpected message is reachable by exact (source, tag), by
//! source, by tag and in arrival order) is stored once elsewhere (a slab), and removing it
//! cannot cheaply unlink it from all of them. Instead each queue holds references stamped with
//! the entry's order number; a reference whose slot no longer holds that order is dead and is
//! dropped when it reaches the front. A queue compacts itself once its dead references
//! outnumber its live ones, which keeps both the memory and the amortised cost of every
//! operation O(1).

use std::collections::VecDeque;
use std::hash::Hash;

use slab::Slab;

use crate::fast_hash::FastMap;

/// A reference to a stored entry: its slot in the slab and the order stamp it was stored with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef {
    pub slot: usize,
    pub order: u64,
}

/// Dead references tolerated in a queue before a compaction is even considered.
const COMPACT_MIN_DEAD: usize = 32;

/// Empty queues kept for reuse: a ping-pong empties and refills the same key every message,
/// and dropping the queue each time would cost an allocation per message. Past this many
/// keys, empty queues are dropped so that a run over many distinct tags stays bounded.
const KEEP_EMPTY_KEYS: usize = 64;

/// Memory of queues dropped past `KEEP_EMPTY_KEYS`, kept for the next keys: a run over ever
/// new tags (every collective call takes its communicator's next one) then allocates no
/// queue per key.
const KEEP_SPARE: usize = 8;

/// One key's queue. Its memory stays with it while it is empty (see `KEEP_EMPTY_KEYS`), so
/// a queue that fills and empties every message allocates only the first time.
struct Queue<E> {
    entries: VecDeque<E>,
    /// Dead references among `entries` (always 0 for entries stored in the queue).
    dead: usize,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue {
            entries: VecDeque::new(),
            dead: 0,
        }
    }
}

/// Queues of entries `E` keyed by `K`: by default references to entries stored elsewhere.
pub struct KeyedQueues<K, E = EntryRef> {
    /// Where each key's queue lives in `queues`.
    index: FastMap<K, usize>,
    queues: Slab<Queue<E>>,
    /// The key looked up last and where its queue lives: a stream of messages on one
    /// (context, source, tag) finds its queue without hashing. Cleared when that queue goes.
    last: Option<(K, usize)>,
    /// References held across all queues, live or dead.
    stored: usize,
    /// Emptied queues' memory, for new keys (see `KEEP_SPARE`).
    spare: Vec<VecDeque<E>>,
}

impl<K: Hash + Eq + Copy, E> Default for KeyedQueues<K, E> {
    fn default() -> Self {
        KeyedQueues {
            index: FastMap::default(),
            queues: Slab::new(),
            last: None,
            stored: 0,
            spare: Vec::new(),
        }
    }
}

impl<K: Hash + Eq + Copy, E> KeyedQueues<K, E> {
    /// Where `key`'s queue lives, if it has one.
    #[inline]
    fn find(&mut self, key: K) -> Option<usize> {
        if let Some((last, at)) = self.last {
            if last == key {
                return Some(at);
            }
        }
        let at = *self.index.get(&key)?;
        self.last = Some((key, at));
        Some(at)
    }

    #[inline]
    pub fn push(&mut self, key: K, entry: E) {
        let at = match self.find(key) {
            Some(at) => at,
            None => {
                let entries = self.spare.pop().unwrap_or_default();
                let at = self.queues.insert(Queue { entries, dead: 0 });
                self.index.insert(key, at);
                self.last = Some((key, at));
                at
            }
        };
        self.queues[at].entries.push_back(entry);
        self.stored += 1;
    }

    #[inline(always)]
    fn drop_if_empty(&mut self, key: K, at: usize) {
        if self.index.len() > KEEP_EMPTY_KEYS && self.queues[at].entries.is_empty() {
            self.drop_queue(key, at);
        }
    }

    #[inline(never)]
    fn drop_queue(&mut self, key: K, at: usize) {
        self.index.remove(&key);
        let emptied = self.queues.remove(at).entries;
        if self.spare.len() < KEEP_SPARE && emptied.capacity() > 0 {
            self.spare.push(emptied);
        }
        if self.last.is_some_and(|(last, _)| last == key) {
            self.last = None;
        }
    }

    /// The oldest live entry under `key`, dropping the dead references in front of it.
    pub fn front(&mut self, key: K, is_live: impl Fn(&E) -> bool) -> Option<&E> {
        let at = self.find(key)?;
        let queue = &mut self.queues[at];
        while let Some(head) = queue.entries.front() {
            if is_live(head) {
                return self.queues[at].entries.front();
            }
            queue.entries.pop_front();
            queue.dead -= 1;
            self.stored -= 1;
        }
        self.drop_if_empty(key, at);
        None
    }

    /// Removes and returns the oldest live entry under `key`, in one lookup: for the caller
    /// that takes the front right away, so it need not report the removal with `remove`.
    #[inline]
    pub fn pop_front(&mut self, key: K, is_live: impl Fn(&E) -> bool) -> Option<E> {
        let at = self.find(key)?;
        let queue = &mut self.queues[at];
        let mut found = None;
        while let Some(head) = queue.entries.pop_front() {
            self.stored -= 1;
            if is_live(&head) {
                found = Some(head);
                break;
            }
            queue.dead -= 1;
        }
        self.drop_if_empty(key, at);
        found
    }

    /// True when no queue holds anything; lets a matcher skip a whole class of selectors
    /// (most programs post no wildcard receives at all).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.stored == 0
    }

    /// Removes the first entry under `key` that `pick` chooses, wherever it stands: for entries
    /// stored in the queue (a cancelled receive), so O(queue length), which only a rare
    /// operation may pay.
    pub fn take_where(&mut self, key: K, pick: impl Fn(&E) -> bool) -> Option<E> {
        let at = self.find(key)?;
        let entries = &mut self.queues[at].entries;
        let taken = entries.remove(entries.iter().position(pick)?)?;
        self.stored -= 1;
        self.drop_if_empty(key, at);
        Some(taken)
    }

    #[cfg(test)]
    fn stored_refs(&self) -> usize {
        self.queues.iter().map(|(_, q)| q.entries.len()).sum()
    }
}

impl<K: Hash + Eq + Copy> KeyedQueues<K, EntryRef> {
    /// Records that `entry`, queued under `key`, was removed from the store. Every removal
    /// must be reported to every queue holding the entry, exactly once. The front entry (the
    /// common case: messages are mostly taken in arrival order) is unlinked at once; any other
    /// is left as a dead reference.
    pub fn remove(&mut self, key: K, entry: EntryRef, is_live: impl Fn(&EntryRef) -> bool) {
        let Some(at) = self.find(key) else {
            return;
        };
        let queue = &mut self.queues[at];
        if queue.entries.front() == Some(&entry) {
            queue.entries.pop_front();
            self.stored -= 1;
            self.drop_if_empty(key, at);
            return;
        }
        queue.dead += 1;
        if queue.dead >= COMPACT_MIN_DEAD && queue.dead * 2 > queue.entries.len() {
            let before = queue.entries.len();
            queue.entries.retain(is_live);
            queue.dead = 0;
            self.stored -= before - queue.entries.len();
        }
        self.drop_if_empty(key, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn front_skips_dead_and_compaction_bounds_memory() {
        let mut q: KeyedQueues<u32> = KeyedQueues::default();
        let mut live: HashSet<u64> = HashSet::new();
        // One old entry stays live at the front while thousands behind it come and go.
        q.push(7, EntryRef { slot: 0, order: 0 });
        live.insert(0);
        for order in 1..10_000u64 {
            q.push(7, EntryRef { slot: 1, order });
            live.insert(order);
            live.remove(&order);
            q.remove(7, EntryRef { slot: 1, order }, |r| live.contains(&r.order));
        }
        assert!(
            q.stored_refs() < 100,
            "dead references piled up: {}",
            q.stored_refs()
        );
        assert_eq!(q.front(7, |r| live.contains(&r.order)).unwrap().order, 0);
        live.remove(&0);
        q.remove(7, EntryRef { slot: 0, order: 0 }, |r| {
            live.contains(&r.order)
        });
        assert!(q.front(7, |r| live.contains(&r.order)).is_none());
        assert_eq!(q.stored_refs(), 0);
        assert!(q.is_empty());
    }

    #[test]
    fn removing_fronts_in_order_leaves_no_dead_references() {
        let mut q: KeyedQueues<u32> = KeyedQueues::default();
        let entries: Vec<EntryRef> = (0..100u64)
            .map(|order| EntryRef { slot: 0, order })
            .collect();
        for &e in &entries {
            q.push(3, e);
        }
        for (i, &e) in entries.iter().enumerate() {
            q.remove(3, e, |r| r.order > e.order);
            assert_eq!(q.stored_refs(), entries.len() - i - 1);
        }
        assert!(q.is_empty());
        assert!(q.front(3, |_| true).is_none());
    }

    #[test]
    fn queues_of_keys_past_the_kept_ones_reuse_the_memory_of_those_dropped() {
        let mut q: KeyedQueues<u32, u32> = KeyedQueues::default();
        // Ever new keys, each filled and emptied, as collective calls' tags are.
        for key in 0..1000 {
            q.push(key, key);
            assert_eq!(q.pop_front(key, |_| true), Some(key));
        }
        assert_eq!(q.index.len(), KEEP_EMPTY_KEYS);
        assert_eq!(q.spare.len(), 1, "a dropped queue's memory was not kept");
        q.push(1000, 1000);
        assert!(q.spare.is_empty(), "a new key's queue did not take it");
        assert_eq!(q.pop_front(1000, |_| true), Some(1000));
    }

    #[test]
    fn take_where_finds_an_entry_anywhere_in_its_queue() {
        let mut q: KeyedQueues<u8, u32> = KeyedQueues::default();
        for v in 0..6 {
            q.push(1, v);
        }
        q.push(2, 100);
        assert_eq!(q.take_where(1, |&v| v == 0), Some(0));
        assert_eq!(q.take_where(1, |&v| v == 4), Some(4));
        assert_eq!(q.take_where(1, |&v| v == 4), None);
        assert_eq!(q.take_where(3, |_| true), None);
        let rest: Vec<u32> = std::iter::from_fn(|| q.pop_front(1, |_| true)).collect();
        assert_eq!(rest, [1, 2, 3, 5]);
        assert_eq!(q.pop_front(2, |_| true), Some(100));
        assert!(q.is_empty());
    }
}
