//! FIFO queues, one per key, over entries stored once elsewhere (a slab).
//!
//! One entry may sit in several queues at once (an unexpected message is reachable by exact
//! (source, tag), by source, by tag and in arrival order), so removing it cannot cheaply unlink
//! it from all of them. Instead each queue holds references stamped with the entry's order
//! number; a reference whose slot no longer holds that order is dead and is dropped when it
//! reaches the front. A queue compacts itself once its dead references outnumber its live
//! ones, which keeps both the memory and the amortised cost of every operation O(1).

use std::collections::VecDeque;
use std::hash::Hash;

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

/// One key's queue: its front entry kept inline, so that the common queue of one entry costs
/// no allocation and a lookup touches no second cache line.
#[derive(Default)]
struct Queue {
    head: Option<EntryRef>,
    rest: VecDeque<EntryRef>,
    dead: usize,
}

impl Queue {
    fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    fn push(&mut self, entry: EntryRef) {
        if self.head.is_none() {
            self.head = Some(entry);
        } else {
            self.rest.push_back(entry);
        }
    }

    fn take_head(&mut self) -> Option<EntryRef> {
        let head = self.head.take();
        self.head = self.rest.pop_front();
        head
    }

    fn retain(&mut self, keep: impl Fn(EntryRef) -> bool) {
        let all: Vec<EntryRef> = self
            .head
            .take()
            .into_iter()
            .chain(self.rest.drain(..))
            .collect();
        for e in all.into_iter().filter(|e| keep(*e)) {
            self.push(e);
        }
    }
}

/// Queues keyed by `K`.
pub struct KeyedQueues<K> {
    queues: FastMap<K, Queue>,
    /// References held across all queues, live or dead.
    stored: usize,
}

impl<K: Hash + Eq + Copy> Default for KeyedQueues<K> {
    fn default() -> Self {
        KeyedQueues {
            queues: FastMap::default(),
            stored: 0,
        }
    }
}

impl<K: Hash + Eq + Copy> KeyedQueues<K> {
    pub fn push(&mut self, key: K, entry: EntryRef) {
        self.queues.entry(key).or_default().push(entry);
        self.stored += 1;
    }

    fn drop_if_empty(&mut self, key: K) {
        if self.queues.len() > KEEP_EMPTY_KEYS
            && self.queues.get(&key).is_some_and(|q| q.len() == 0)
        {
            self.queues.remove(&key);
        }
    }

    /// The oldest live entry under `key`, dropping the dead references in front of it.
    pub fn front(&mut self, key: K, is_live: impl Fn(EntryRef) -> bool) -> Option<EntryRef> {
        let queue = self.queues.get_mut(&key)?;
        while let Some(head) = queue.head {
            if is_live(head) {
                return Some(head);
            }
            queue.take_head();
            queue.dead -= 1;
            self.stored -= 1;
        }
        self.drop_if_empty(key);
        None
    }

    /// Removes and returns the oldest live entry under `key`, in one lookup: for the caller
    /// that takes the front right away, so it need not report the removal with `note_dead`.
    pub fn pop_front(&mut self, key: K, is_live: impl Fn(EntryRef) -> bool) -> Option<EntryRef> {
        let queue = self.queues.get_mut(&key)?;
        let mut found = None;
        while let Some(head) = queue.take_head() {
            self.stored -= 1;
            if is_live(head) {
                found = Some(head);
                break;
            }
            queue.dead -= 1;
        }
        self.drop_if_empty(key);
        found
    }

    /// True when no queue holds anything; lets a matcher skip a whole class of selectors
    /// (most programs post no wildcard receives at all).
    pub fn is_empty(&self) -> bool {
        self.stored == 0
    }

    /// Records that one reference under `key` now points at a removed entry. Every removal
    /// must be reported to every queue holding the entry, exactly once.
    pub fn note_dead(&mut self, key: K, is_live: impl Fn(EntryRef) -> bool) {
        let Some(queue) = self.queues.get_mut(&key) else {
            return;
        };
        queue.dead += 1;
        if queue.dead >= COMPACT_MIN_DEAD && queue.dead * 2 > queue.len() {
            let before = queue.len();
            queue.retain(is_live);
            queue.dead = 0;
            self.stored -= before - queue.len();
        }
        self.drop_if_empty(key);
    }

    #[cfg(test)]
    fn stored_refs(&self) -> usize {
        self.queues.values().map(Queue::len).sum()
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
            q.note_dead(7, |r| live.contains(&r.order));
        }
        assert!(
            q.stored_refs() < 100,
            "dead references piled up: {}",
            q.stored_refs()
        );
        assert_eq!(q.front(7, |r| live.contains(&r.order)).unwrap().order, 0);
        live.remove(&0);
        q.note_dead(7, |r| live.contains(&r.order));
        assert!(q.front(7, |r| live.contains(&r.order)).is_none());
        assert_eq!(q.stored_refs(), 0);
        assert!(q.is_empty());
    }
}
