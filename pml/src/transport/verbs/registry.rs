//! Memory registrations with the device's protection domain, through the
//! [registration cache](crate::registration_cache): sending again from the same buffer (or
//! reading into it) finds the registration that covers it instead of pinning the pages again.
//! `MPIRT_VERBS_REG_CACHE=0` turns caching off.

use std::io;

use rdma_sys::*;

use super::qp::RETRANSMIT_WINDOW;
use crate::registration_cache::{CachedMr, RegistrationCache};

/// A registration handed out by `Registry::acquire`, to give back with `release`.
pub type MrId = CachedMr;

#[derive(Clone, Copy, Debug)]
pub struct Keys {
    pub id: MrId,
    pub lkey: u32,
    pub rkey: u32,
}

/// One registered range, deregistered on drop.
struct Mr(*mut ibv_mr);

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the cache drops only idle registrations, which no work request of this
        // rank's uses, and the transport drops the registry after its queue pairs. (A READ a
        // peer retransmits under a dropped key breaks the queue pair but touches no memory:
        // why dropped ones linger, see registration_cache.rs.)
        unsafe { ibv_dereg_mr(self.0) };
    }
}

/// Bytes that dropped registrations may keep pinned while they linger, past which the oldest
/// go early: a program that frees a large buffer after each send and allocates the next would
/// otherwise pin every one it sent in the last 7.5 s (freed memory too, which goes back to
/// the kernel only at deregistration), where the locked-memory limit need not stop it. A late
/// retransmission was sent before the peer's read completed, so it is not on the wire for
/// long; at 25 GB/s 256 MiB is 10 ms of traffic (a judgment, not measured).
const LINGERING_BYTES: usize = 256 << 20;

pub struct Registry {
    pd: *mut ibv_pd,
    cache: RegistrationCache<Mr>,
}

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
            // A peer's READ retransmitted after its read completed and the send was done
            // would find no registration and break the queue pair (registration_cache.rs).
            cache: RegistrationCache::new(cache, max_idle)
                .with_linger(RETRANSMIT_WINDOW, LINGERING_BYTES),
        }
    }

    /// Whether registrations outlive their messages.
    pub fn caching(&self) -> bool {
        self.cache.caching()
    }

    /// Registrations made.
    pub fn registrations(&self) -> u64 {
        self.cache.registrations
    }

    /// Keys for `len` bytes at `addr`, registering (whole pages) if no entry covers them;
    /// `writable` for memory the local device writes into.
    pub fn acquire(&mut self, addr: usize, len: usize, writable: bool) -> io::Result<Keys> {
        match self.try_acquire(addr, len, writable) {
            // The lingering registrations pin memory too: without them it may fit.
            Err(e) if e.kind() == io::ErrorKind::OutOfMemory && self.cache.drop_lingering() => {
                self.try_acquire(addr, len, writable)
            }
            keys => keys,
        }
    }

    fn try_acquire(&mut self, addr: usize, len: usize, writable: bool) -> io::Result<Keys> {
        let pd = self.pd;
        let (id, mr) = self.cache.acquire(addr, len, writable, |start, len| {
            let access = if writable { WRITABLE } else { READ_ONLY };
            // SAFETY: the range is mapped memory of this process (the caller's buffer
            // rounded out to its pages); it is deregistered when its entry goes.
            let mr = unsafe { ibv_reg_mr(pd, start as *mut _, len, access as i32) };
            if mr.is_null() {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "registering {len} bytes at {addr:#x} failed: {e}{}",
                        if e.raw_os_error() == Some(libc::ENOMEM) {
                            " (is the locked-memory limit, ulimit -l, too low?)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            Ok(Mr(mr))
        })?;
        // SAFETY: `mr` is a live registration owned by the cache.
        let (lkey, rkey) = unsafe { ((*mr.0).lkey, (*mr.0).rkey) };
        Ok(Keys { id, lkey, rkey })
    }

    pub fn release(&mut self, id: MrId) {
        self.cache.release(id);
    }
}
