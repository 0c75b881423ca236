//! A sleep until a peer wakes the rank, taken apart from the engine: by a thread of a rank
//! whose engine its threads share behind a lock (mpirt at `Serialized` and `Multiple`), which
//! lets go of the lock for the sleep so that its other threads go on using the engine.
//!
//! The engine prepares the sleep under the lock (`Engine::begin_nap`: each transport says how
//! peers wake it and looks once more, as before its own sleep), the thread sleeps on what that
//! gave ([`Nap::sleep`], holding nothing of the engine), and ends it under the lock again
//! (`Engine::end_nap`). The sleep is the one a rank alone sleeps: on the shared-memory
//! segment's futex word where that transport is the only one peers wake, else on a wake fd
//! (TCP's epoll set, the verbs completion channel, or the epoll set over several transports'
//! wake fds). Another thread of the rank that moved something the sleeper may wait for wakes
//! it under the lock (`Engine::wake_nap`): through the futex word as a peer does, or through
//! the engine's own eventfd, which a sleep on a wake fd watches beside it.
//!
//! At most one thread of a rank sleeps so at a time (the engine keeps one set of wake-up
//! state per transport: who announced the sleep, which wake it last saw); its other waiting
//! threads pause where the layer above lets them, woken by it when it comes back.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::transport::shm::futex;

/// What `Engine::begin_nap` found.
pub enum NapStart {
    /// Something may be there already: a round of progress, rather than a sleep, comes next
    /// (nothing to end).
    Busy,
    /// Sleep this, then end it with `Engine::end_nap`.
    Sleep(Nap),
    /// No peer can wake this rank's sleep apart from the engine (no transport that peers
    /// reach, or one whose own sleep decides between polling and sleeping, OFI's): only the
    /// rank's own threads wake its waiting threads.
    Unwakeable,
}

/// What the engine had moved when a thread's call on it began (`Engine::moved_mark`), to
/// tell as the call ends whether it may have moved anything another thread of the rank waits
/// for (`Engine::moved_since`): the sleeper apart, or a thread paused beside it, is woken only
/// then. A mark of the rounds' own counts, so that the message path keeps nothing for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovedMark {
    /// Frames and finished reads the transports had delivered (`Counters::frames_received`).
    pub(crate) received: u64,
    /// Reads the engine had carried out (`Counters::remote_reads`).
    pub(crate) reads: u64,
    /// Whether work was waiting that only this rank's rounds move (`Engine::own_work`).
    pub(crate) own_work: bool,
}

/// A prepared sleep, slept without the engine. It holds no reference into the engine, only
/// addresses: a thread that sleeps on it while another finalizes the engine (an erroneous
/// program) is woken at once by a word no longer mapped or a closed fd, or sleeps out its
/// timeout, and then finds the engine gone.
pub struct Nap {
    on: On,
}

enum On {
    /// This rank's futex word in the shared-memory segment, at the value it had when the
    /// sleep was announced: a peer's wake (or the rank's own, `ShmTransport::wake`) changes it.
    Futex { word: *mut u32, seen: u32 },
    /// A wake fd, readable once a peer may have woken the rank, and the engine's own eventfd
    /// (negative until the engine gives it: `poll` skips it).
    Fd { fd: RawFd, own: RawFd },
}

impl Nap {
    /// A sleep on the futex word at `word` while it holds `seen`.
    pub(crate) fn on_futex(word: *mut u32, seen: u32) -> Nap {
        Nap {
            on: On::Futex { word, seen },
        }
    }

    /// A sleep until `fd` is readable (the engine adds its own eventfd: `with_own`).
    pub(crate) fn on_fd(fd: RawFd) -> Nap {
        Nap {
            on: On::Fd { fd, own: -1 },
        }
    }

    /// Whether this sleep is on a wake fd, where the engine's eventfd wakes it.
    pub(crate) fn watches_fd(&self) -> bool {
        matches!(self.on, On::Fd { .. })
    }

    /// Watches `own` beside the wake fd (a sleep on the futex word has no fd to add).
    pub(crate) fn with_own(mut self, own: RawFd) -> Nap {
        if let On::Fd { own: slot, .. } = &mut self.on {
            *slot = own;
        }
        self
    }

    /// Sleeps until woken (or anything else ends the wait early: a signal, a word already
    /// changed, an fd already readable), at most `timeout`; returns whether it ran to its
    /// timeout. A zero `timeout` only looks: false where a wake came.
    pub fn sleep(&self, timeout: Duration) -> bool {
        match self.on {
            On::Futex { word, seen } => futex::wait_at(word, seen, timeout),
            On::Fd { fd, own } => {
                let mut fds = [fd, own].map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
                // SAFETY: `fds` is a live array of two pollfds for the call; the kernel
                // reads and writes nothing else, and a closed fd is only reported (POLLNVAL).
                let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
                ready == 0
            }
        }
    }
}
