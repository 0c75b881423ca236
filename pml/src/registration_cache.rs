//! Memory registrations, cached, for the RDMA transports (verbs, and libfabric's): sending
//! again from the same buffer (or reading into it) finds the registration that covers it
//! instead of pinning the pages again.
//!
//! Registrations are kept after their message only while the program's global allocator is
//! [`crate::TrackingAllocator`], which logs the blocks it frees: before each look-up the cache
//! drops the registrations over freed blocks, whose pages the allocator may have given back
//! to the kernel (see `freed_memory.rs`). Only blocks of at least a page are kept: a block
//! that small may share its pages with others.
//!
//! Registrations in use (by a rendezvous send a peer may still read, or a read under way) are
//! counted and never dropped; idle ones are dropped oldest first past a bound on entries.
//!
//! A registration dropped may linger (`with_linger`): out of every look-up, but not yet
//! deregistered, for as long as a peer's device may still send a request under its key. A
//! reliable connection's requester retransmits a READ whose response it has not seen yet,
//! and this rank's device can be asked to answer a retransmission after the first answer
//! completed the read, the peer sent its FIN and the registration was dropped: it then finds
//! no memory under the key and puts the queue pair in error (Soft-RoCE did, in one in three
//! jobs of the threads stress test without the cache), while the peer, which had its data,
//! hears of nothing. Lingering registrations pin their pages (freed ones too, whose pages the
//! kernel gets back only at deregistration), so they are bounded in bytes as well: past the
//! bound the oldest go early, save the newest.
//!
//! The cache owns the registrations of one transport, of a type `R` that deregisters itself
//! when dropped; the transport says how to register a range.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::freed_memory;

/// Registrations cover whole pages.
pub const PAGE: usize = 4096;

/// A registration handed out by [`RegistrationCache::acquire`], to give back with `release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedMr {
    key: (usize, u64),
}

struct Entry<R> {
    end: usize,
    registration: R,
    users: u32,
    last_use: u64,
    /// Whether the entry may outlive its users (see the module comment).
    keep: bool,
    writable: bool,
}

pub struct RegistrationCache<R> {
    /// By start address, then by when registered: ranges may overlap (a larger range
    /// registered over a smaller one still in use).
    entries: BTreeMap<(usize, u64), Entry<R>>,
    cache: bool,
    max_idle: usize,
    clock: u64,
    /// The allocator's free log as of our last look.
    freed_seen: u64,
    /// Registrations made, and look-ups an existing registration answered.
    pub registrations: u64,
    pub hits: u64,
    /// Registrations dropped from the entries, oldest first, with when and their bytes;
    /// deregistered once `linger` has passed (at once where it is zero), or once they hold
    /// more than `max_lingering` bytes together.
    lingering: VecDeque<(Instant, usize, R)>,
    lingering_bytes: usize,
    linger: Duration,
    max_lingering: usize,
}

impl<R> RegistrationCache<R> {
    /// A cache that keeps idle registrations (at most `max_idle`) when asked to and when the
    /// allocator makes that safe.
    pub fn new(cache: bool, max_idle: usize) -> RegistrationCache<R> {
        RegistrationCache {
            entries: BTreeMap::new(),
            cache: cache && freed_memory::installed(),
            max_idle,
            clock: 0,
            freed_seen: 0,
            registrations: 0,
            hits: 0,
            lingering: VecDeque::new(),
            lingering_bytes: 0,
            linger: Duration::ZERO,
            max_lingering: 0,
        }
    }

    /// The cache, keeping each registration it drops registered for `linger` more, while
    /// those lingering hold at most `max_bytes` together (or are only the newest one): see
    /// the module comment.
    #[cfg(any(feature = "verbs", test))]
    pub fn with_linger(mut self, linger: Duration, max_bytes: usize) -> RegistrationCache<R> {
        self.linger = linger;
        self.max_lingering = max_bytes;
        self
    }

    /// Deregisters the oldest lingering registration.
    fn end_oldest(&mut self) {
        if let Some((_, bytes, _)) = self.lingering.pop_front() {
            self.lingering_bytes -= bytes;
        }
    }

    /// Deregisters the registrations lingering past their time.
    fn end_lingering(&mut self) {
        let Some(&(since, _, _)) = self.lingering.front() else {
            return;
        };
        let now = Instant::now();
        if now.duration_since(since) < self.linger {
            return;
        }
        while self
            .lingering
            .front()
            .is_some_and(|&(since, _, _)| now.duration_since(since) >= self.linger)
        {
            self.end_oldest();
        }
    }

    /// Deregisters every lingering registration now, whatever its time: for a registration
    /// that failed for want of memory (the lingering ones are pinned).
    #[cfg(any(feature = "verbs", test))]
    pub fn drop_lingering(&mut self) -> bool {
        let any = !self.lingering.is_empty();
        self.lingering.clear();
        self.lingering_bytes = 0;
        any
    }

    /// Whether registrations outlive their messages.
    pub fn caching(&self) -> bool {
        self.cache
    }

    /// Drops idle registrations over memory freed since the last look.
    fn forget_freed(&mut self) {
        let mut freed = Vec::new();
        let complete = freed_memory::freed_since(&mut self.freed_seen, |s, e| freed.push((s, e)));
        if complete && freed.is_empty() {
            return;
        }
        let stale: Vec<(usize, u64)> = self
            .entries
            .iter()
            .filter(|(&(start, _), e)| {
                !complete || freed.iter().any(|&(s, end)| s < e.end && start < end)
            })
            .map(|(&k, _)| k)
            .collect();
        for key in stale {
            self.evict_if_idle(key);
        }
    }

    /// The registration covering `len` bytes at `addr`, made by `register(start, len)` over
    /// the whole pages if no entry covers them; `writable` for memory the local device writes
    /// into. Returns its id and the registration's start, with the registration.
    pub fn acquire<E>(
        &mut self,
        addr: usize,
        len: usize,
        writable: bool,
        register: impl FnOnce(usize, usize) -> Result<R, E>,
    ) -> Result<(CachedMr, &R), E> {
        self.clock += 1;
        self.end_lingering();
        if self.cache {
            self.forget_freed();
        }
        let end = addr + len.max(1);
        let covering = self
            .entries
            .range(..=(addr, u64::MAX))
            .rev()
            .find(|(_, e)| e.end >= end && (e.writable || !writable))
            .map(|(&key, _)| key);
        if let Some(key) = covering {
            self.hits += 1;
            let e = self.entries.get_mut(&key).expect("present");
            e.users += 1;
            e.last_use = self.clock;
            return Ok((CachedMr { key }, &e.registration));
        }
        let start = addr & !(PAGE - 1);
        let end = end.next_multiple_of(PAGE);
        let registration = register(start, end - start)?;
        self.registrations += 1;
        let key = (start, self.clock);
        self.entries.insert(
            key,
            Entry {
                end,
                registration,
                users: 1,
                last_use: self.clock,
                keep: self.cache && len >= PAGE,
                writable,
            },
        );
        self.trim();
        Ok((CachedMr { key }, &self.entries[&key].registration))
    }

    /// Gives back a registration from `acquire`; one already gone (by `clear`) is let be.
    /// Says whether it had a user to give back: false for one gone, or one with no users
    /// left (a release too many, unless `clear` came first).
    pub fn release(&mut self, id: CachedMr) -> bool {
        let Some(e) = self.entries.get_mut(&id.key) else {
            return false;
        };
        if e.users == 0 {
            return false;
        }
        e.users -= 1;
        if e.users == 0 && !e.keep {
            self.evict_if_idle(id.key);
        }
        true
    }

    /// Drops every registration, in use or not: for a transport closing its endpoint, after
    /// which nothing uses them (the OFI transport, which closes its domain's regions first).
    #[cfg(any(feature = "ofi", test))]
    pub fn clear(&mut self) {
        self.entries.clear();
        self.lingering.clear();
        self.lingering_bytes = 0;
    }

    /// Registrations held now (in use or idle).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn evict_if_idle(&mut self, key: (usize, u64)) {
        if self.entries.get(&key).is_some_and(|e| e.users == 0) {
            let e = self.entries.remove(&key).expect("present");
            if !self.linger.is_zero() {
                let bytes = e.end - key.0;
                self.lingering
                    .push_back((Instant::now(), bytes, e.registration));
                self.lingering_bytes += bytes;
                while self.lingering_bytes > self.max_lingering && self.lingering.len() > 1 {
                    self.end_oldest();
                }
            }
        }
    }

    /// Evicts the least recently used idle registrations past the bound.
    fn trim(&mut self) {
        let idle = self.entries.values().filter(|e| e.users == 0).count();
        if idle <= self.max_idle {
            return;
        }
        let mut by_age: Vec<(u64, (usize, u64))> = self
            .entries
            .iter()
            .filter(|(_, e)| e.users == 0)
            .map(|(&k, e)| (e.last_use, k))
            .collect();
        by_age.sort_unstable();
        for (_, key) in by_age.into_iter().take(idle - self.max_idle) {
            self.evict_if_idle(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    // freed_memory's tests install the tracking allocator for this whole test binary, as
    // an mpirt program does, so that the cache keeps registrations.

    /// A registration that records its range, and its deregistration in `closed`.
    struct Fake {
        range: (usize, usize),
        closed: Rc<RefCell<Vec<(usize, usize)>>>,
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.closed.borrow_mut().push(self.range);
        }
    }

    type Closed = Rc<RefCell<Vec<(usize, usize)>>>;

    fn acquire(
        cache: &mut RegistrationCache<Fake>,
        closed: &Closed,
        buf: &[u8],
        writable: bool,
    ) -> (CachedMr, (usize, usize)) {
        let (id, r) = cache
            .acquire(buf.as_ptr() as usize, buf.len(), writable, |start, len| {
                Ok::<_, ()>(Fake {
                    range: (start, start + len),
                    closed: closed.clone(),
                })
            })
            .expect("registered");
        (id, r.range)
    }

    #[test]
    fn a_buffer_sent_from_again_hits_the_cache() {
        let closed = Closed::default();
        let mut cache = RegistrationCache::new(true, 8);
        assert!(cache.caching());
        let buf = vec![7u8; 64 << 10];
        let (id, range) = acquire(&mut cache, &closed, &buf, false);
        let at = buf.as_ptr() as usize;
        assert!(range.0 <= at && range.1 >= at + buf.len() && range.0 % PAGE == 0);
        cache.release(id);
        assert!(closed.borrow().is_empty(), "kept after its message");
        let (again, _) = acquire(&mut cache, &closed, &buf[100..40000], false);
        assert_eq!(again, id);
        assert_eq!((cache.registrations, cache.hits), (1, 1));
        // A read into the buffer needs a writable registration: a new one.
        let (written, _) = acquire(&mut cache, &closed, &buf, true);
        assert_ne!(written, id);
        assert_eq!((cache.registrations, cache.hits), (2, 1));
        cache.release(again);
        cache.release(written);
        drop(buf);
    }

    #[test]
    fn a_freed_and_reallocated_range_is_registered_again() {
        let closed = Closed::default();
        let mut cache = RegistrationCache::new(true, 8);
        let buf = vec![1u8; 256 << 10];
        let (id, range) = acquire(&mut cache, &closed, &buf, false);
        cache.release(id);
        drop(buf);
        // Whatever the allocator hands out now (often the same addresses), the old
        // registration is gone before the next look-up.
        let other = vec![2u8; 256 << 10];
        let (fresh, _) = acquire(&mut cache, &closed, &other, false);
        assert!(closed.borrow().contains(&range), "{:x?}", closed.borrow());
        assert_eq!((cache.registrations, cache.hits), (2, 0));
        cache.release(fresh);
    }

    #[test]
    fn registrations_in_use_survive_frees_and_the_bound() {
        let closed = Closed::default();
        let mut cache = RegistrationCache::new(true, 1);
        let a = vec![1u8; 64 << 10];
        let (held, range) = acquire(&mut cache, &closed, &a, false);
        let bufs: Vec<Vec<u8>> = (0..3).map(|_| vec![0u8; 64 << 10]).collect();
        for b in &bufs {
            let (id, _) = acquire(&mut cache, &closed, b, false);
            cache.release(id);
        }
        // Trimmed to one idle entry at each registration: the in-use one, the idle one kept
        // then, and the one released since (fewer where frees elsewhere dropped some).
        assert!(cache.len() <= 3, "{} registrations kept", cache.len());
        drop(a);
        drop(bufs);
        let c = vec![3u8; 64 << 10];
        let (id, _) = acquire(&mut cache, &closed, &c, false);
        assert!(!closed.borrow().contains(&range), "in use, yet dropped");
        cache.release(held);
        cache.release(id);
        cache.clear();
        assert!(closed.borrow().contains(&range));
    }

    #[test]
    fn a_release_too_many_is_told_apart() {
        let closed = Closed::default();
        let mut cache = RegistrationCache::new(true, 8);
        let buf = vec![1u8; 64 << 10];
        let (id, _) = acquire(&mut cache, &closed, &buf, false);
        assert!(cache.release(id));
        assert!(
            !cache.release(id),
            "kept idle, with no user left to give back"
        );
        cache.clear();
        assert!(!cache.release(id), "gone");
    }

    #[test]
    fn a_dropped_registration_lingers_out_of_sight_until_its_time() {
        let closed = Closed::default();
        let mut cache =
            RegistrationCache::new(false, 8).with_linger(Duration::from_secs(3600), usize::MAX);
        let buf = vec![1u8; 64 << 10];
        let (id, range) = acquire(&mut cache, &closed, &buf, false);
        cache.release(id);
        assert!(closed.borrow().is_empty(), "deregistered while it lingers");
        // Out of every look-up: the same buffer again is a registration of its own.
        let (again, _) = acquire(&mut cache, &closed, &buf, false);
        assert_ne!(again, id);
        assert_eq!((cache.registrations, cache.hits), (2, 0));
        cache.release(again);
        assert!(closed.borrow().is_empty());
        assert!(cache.drop_lingering());
        assert_eq!(closed.borrow().len(), 2, "{:x?}", closed.borrow());
        assert!(closed.borrow().contains(&range));
        assert!(!cache.drop_lingering(), "none left");
        // Its time passed, a lingering registration goes at the next look-up.
        let mut cache =
            RegistrationCache::new(false, 8).with_linger(Duration::from_nanos(1), usize::MAX);
        let (id, range) = acquire(&mut cache, &closed, &buf, false);
        cache.release(id);
        std::thread::sleep(Duration::from_millis(1));
        let (last, _) = acquire(&mut cache, &closed, &buf, false);
        assert_eq!(closed.borrow().iter().filter(|&&r| r == range).count(), 3);
        cache.release(last);
    }

    #[test]
    fn lingering_registrations_are_bounded_in_bytes_save_the_newest() {
        let closed = Closed::default();
        let buf = vec![1u8; 64 << 10];
        let cycle = |cache: &mut RegistrationCache<Fake>| {
            let (id, range) = acquire(cache, &closed, &buf, false);
            cache.release(id);
            range
        };
        let mut probe = RegistrationCache::new(false, 8);
        let range = cycle(&mut probe);
        closed.borrow_mut().clear();
        // Two registrations' bytes: a third dropped ends the oldest's lingering early.
        let mut cache = RegistrationCache::new(false, 8)
            .with_linger(Duration::from_secs(3600), 2 * (range.1 - range.0));
        cycle(&mut cache);
        cycle(&mut cache);
        assert!(closed.borrow().is_empty(), "within the bound");
        cycle(&mut cache);
        assert_eq!(closed.borrow().len(), 1, "past the bound, the oldest goes");
        cycle(&mut cache);
        assert_eq!(closed.borrow().len(), 2);
        assert!(cache.drop_lingering());
        assert_eq!(closed.borrow().len(), 4);
        // One registration larger than the bound still lingers while it is the newest.
        closed.borrow_mut().clear();
        let mut cache = RegistrationCache::new(false, 8).with_linger(Duration::from_secs(3600), 0);
        cycle(&mut cache);
        assert!(closed.borrow().is_empty(), "the newest lingers");
        cycle(&mut cache);
        assert_eq!(closed.borrow().len(), 1, "only the newest lingers");
        cache.drop_lingering();
    }

    #[test]
    fn without_caching_a_registration_goes_with_its_message() {
        let closed = Closed::default();
        let mut cache = RegistrationCache::new(false, 8);
        let buf = vec![1u8; 64 << 10];
        let (id, range) = acquire(&mut cache, &closed, &buf, false);
        cache.release(id);
        assert_eq!(*closed.borrow(), vec![range]);
        let (again, _) = acquire(&mut cache, &closed, &buf, false);
        assert_eq!((cache.registrations, cache.hits), (2, 0));
        cache.release(again);
    }
}
