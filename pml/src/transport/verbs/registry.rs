//! Memory registrations, cached: sending again from the same buffer (or reading into it)
//! finds the registration that covers it instead of pinning the pages again.
//!
//! Registrations are kept after their message only while the program's global allocator is
//! [`crate::TrackingAllocator`], which logs the blocks it frees: before each look-up the cache
//! drops the registrations over freed blocks, whose pages the allocator may have given back
//! to the kernel (see `freed_memory.rs`). Only blocks of at least a page are kept: a block
//! that small may share its pages with others. `MPIRT_VERBS_REG_CACHE=0` turns caching off.
//!
//! Registrations in use (by a rendezvous send a peer may still read, or a read under way) are
//! counted and never dropped; idle ones are dropped oldest first past a bound on entries.

use std::collections::BTreeMap;
use std::io;

use rdma_sys::*;

use crate::freed_memory;

/// A registration handed out by [`Registry::acquire`], to give back with `release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrId {
    key: (usize, u64),
}

#[derive(Clone, Copy, Debug)]
pub struct Keys {
    pub id: MrId,
    pub lkey: u32,
    pub rkey: u32,
}

struct Entry {
    end: usize,
    mr: *mut ibv_mr,
    users: u32,
    last_use: u64,
    /// Whether the entry may outlive its users (see the module comment).
    keep: bool,
    writable: bool,
}

pub struct Registry {
    pd: *mut ibv_pd,
    /// By start address, then by when registered: ranges may overlap (a larger range
    /// registered over a smaller one still in use).
    entries: BTreeMap<(usize, u64), Entry>,
    cache: bool,
    max_idle: usize,
    clock: u64,
    /// The allocator's free log as of our last look.
    freed_seen: u64,
    pub registrations: u64,
}

const PAGE: usize = 4096;
/// Send buffers are only read (by peers), and may be read-only memory (a constant), which a
/// registration that allows writing cannot pin; receive buffers are written (by our reads).
const READ_ONLY: u32 = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
const WRITABLE: u32 =
    ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;

impl Registry {
    /// A registry that caches when asked to and when the allocator makes that safe.
    pub fn new(pd: *mut ibv_pd, cache: bool, max_idle: usize) -> Registry {
        Registry {
            pd,
            entries: BTreeMap::new(),
            cache: cache && freed_memory::installed(),
            max_idle,
            clock: 0,
            freed_seen: 0,
            registrations: 0,
        }
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

    /// Keys for `len` bytes at `addr`, registering (whole pages) if no entry covers them;
    /// `writable` for memory the local device writes into.
    pub fn acquire(&mut self, addr: usize, len: usize, writable: bool) -> io::Result<Keys> {
        self.clock += 1;
        if self.cache {
            self.forget_freed();
        }
        let end = addr + len.max(1);
        let covering = self
            .entries
            .range_mut(..=(addr, u64::MAX))
            .rev()
            .find(|(_, e)| e.end >= end && (e.writable || !writable));
        if let Some((&key, e)) = covering {
            e.users += 1;
            e.last_use = self.clock;
            // SAFETY: `mr` is a live registration owned by this entry.
            let (lkey, rkey) = unsafe { ((*e.mr).lkey, (*e.mr).rkey) };
            return Ok(Keys {
                id: MrId { key },
                lkey,
                rkey,
            });
        }
        let start = addr & !(PAGE - 1);
        let end = end.next_multiple_of(PAGE);
        // SAFETY: the range is mapped memory of this process (the caller's buffer rounded out
        // to its pages); the registration is deregistered when its entry goes.
        let access = if writable { WRITABLE } else { READ_ONLY };
        let mr = unsafe { ibv_reg_mr(self.pd, start as *mut _, end - start, access as i32) };
        if mr.is_null() {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "registering {} bytes at {addr:#x} failed: {e}{}",
                    end - start,
                    if e.raw_os_error() == Some(libc::ENOMEM) {
                        " (is the locked-memory limit, ulimit -l, too low?)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        self.registrations += 1;
        let key = (start, self.clock);
        self.entries.insert(
            key,
            Entry {
                end,
                mr,
                users: 1,
                last_use: self.clock,
                keep: self.cache && len >= PAGE,
                writable,
            },
        );
        self.trim();
        // SAFETY: `mr` was just registered.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(Keys {
            id: MrId { key },
            lkey,
            rkey,
        })
    }

    pub fn release(&mut self, id: MrId) {
        let Some(e) = self.entries.get_mut(&id.key) else {
            return;
        };
        e.users = e.users.saturating_sub(1);
        if e.users == 0 && !e.keep {
            self.evict_if_idle(id.key);
        }
    }

    fn evict_if_idle(&mut self, key: (usize, u64)) {
        if self.entries.get(&key).is_some_and(|e| e.users == 0) {
            let e = self.entries.remove(&key).expect("present");
            // SAFETY: no work request uses an idle registration.
            unsafe { ibv_dereg_mr(e.mr) };
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

impl Drop for Registry {
    fn drop(&mut self) {
        for e in self.entries.values() {
            // SAFETY: the transport drops the registry after its queue pairs, so no work
            // request can still use these registrations.
            unsafe { ibv_dereg_mr(e.mr) };
        }
    }
}
