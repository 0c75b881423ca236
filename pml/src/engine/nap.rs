//! The engine's side of a sleep taken apart from it (`crate::nap`): prepared and ended under
//! the lock the engine is behind, woken by the rank's other threads through the engine.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::Engine;
use crate::error::PmlError;
use crate::nap::{MovedMark, NapStart};
use crate::transport::Transport;

/// How the thread that sleeps apart from the engine is woken by the rank's own threads.
#[derive(Clone, Copy)]
pub(super) enum Napping {
    /// Through the shared-memory segment's futex word, as a peer wakes it.
    OnFutex,
    /// Through the engine's eventfd, which the sleep watches beside its wake fd.
    OnFd,
}

impl Engine {
    /// Prepares a sleep until a peer (or `wake_nap`) wakes this rank, to be slept by a thread
    /// that lets go of the engine ([`Nap::sleep`](crate::nap::Nap::sleep)): what
    /// `sleep_until_woken` does before it sleeps. At most one such sleep at a time; `end_nap`
    /// ends a `NapStart::Sleep`.
    pub fn begin_nap(&mut self) -> Result<NapStart, PmlError> {
        self.check_running()?;
        let started = match &mut self.wake {
            Some(set) => set.begin_nap(&mut self.transports),
            None => match self.transports.iter_mut().find(|t| t.wakes()) {
                Some(t) => t.begin_nap(),
                None => Ok(NapStart::Unwakeable),
            },
        };
        let started = started.map_err(|e| self.stop(e.on_host(&self.hosts, &self.names)))?;
        let NapStart::Sleep(nap) = started else {
            return Ok(started);
        };
        if !nap.watches_fd() {
            self.counters.naps += 1;
            self.napping = Some(Napping::OnFutex);
            return Ok(NapStart::Sleep(nap));
        }
        match self.own_wake_fd() {
            Ok(own) => {
                self.counters.naps += 1;
                self.napping = Some(Napping::OnFd);
                Ok(NapStart::Sleep(nap.with_own(own)))
            }
            // No eventfd (the process is out of fds): the rank's own threads could not wake
            // the sleep, so the threads pause as where no peer wakes them; a later wait
            // tries again.
            Err(_) => {
                self.end_transports_nap(false);
                Ok(NapStart::Unwakeable)
            }
        }
    }

    /// Ends what `begin_nap` prepared, after the sleep (`timed_out`: it ran to its timeout).
    pub fn end_nap(&mut self, timed_out: bool) {
        self.napping = None;
        self.end_transports_nap(timed_out);
        if let Some(own) = &self.nap_fd {
            drain(own.as_raw_fd());
        }
    }

    /// Wakes the thread sleeping apart from the engine, if one is: for a thread of the rank
    /// that moved something the sleeper may wait for (`moved_since` says whether a call did).
    pub fn wake_nap(&mut self) {
        if self.napping.is_some() {
            self.counters.nap_wakes += 1;
        }
        match self.napping {
            None => {}
            Some(Napping::OnFutex) => {
                for t in self.transports.iter().filter(|t| t.wakes()) {
                    t.wake_nap();
                }
            }
            Some(Napping::OnFd) => {
                if let Some(own) = &self.nap_fd {
                    signal(own.as_raw_fd());
                }
            }
        }
    }

    /// What the engine has moved so far, for a thread's call that begins now: see
    /// [`moved_since`](Self::moved_since).
    pub fn moved_mark(&self) -> MovedMark {
        MovedMark {
            received: self.counters.frames_received,
            reads: self.counters.remote_reads,
            own_work: self.own_work(),
        }
    }

    /// Whether a call that began at `mark` may have moved what another thread of the rank
    /// waits for (its request's completion, a message its probe looks for, a state its wait
    /// reads), so that it must wake the threads that wait (`wake_nap`, and those the layer
    /// above pauses). What completes a request, or queues a message, is a frame or a read's
    /// end that a round delivered (counted in `frames_received`; loopback frames and the
    /// transports' finished reads too), a read the engine carried out (`remote_reads`), or
    /// work that only this rank's rounds move (`own_work`: a queued acknowledgement, an
    /// action, a frame in the loopback, a frame waiting for room), waiting as the call began
    /// (its round may have moved it, finishing another thread's send) or as it ends (a
    /// thread must make the round that moves it); a stopped engine fails every wait. A call
    /// that did none of these (a send the transport took whole at once, a receive posted
    /// without a match, or matched to an eager message already here) moved nothing another
    /// thread waits for: a peer's frame after it wakes the sleeper as it wakes a rank alone.
    /// Not seen here: a one-sided operation's completion that the call's round took off a
    /// transport (its window's thread finds it at its next look; verbs' completion channel
    /// wakes it anyway).
    pub fn moved_since(&self, mark: MovedMark) -> bool {
        mark.own_work
            || mark.received != self.counters.frames_received
            || mark.reads != self.counters.remote_reads
            || self.own_work()
    }

    /// Whether work waits that only this rank's rounds move, no peer's wake-up announcing it,
    /// or the engine stopped.
    fn own_work(&self) -> bool {
        self.own_frames
            || !self.blocked.is_empty()
            || self.core.has_work()
            || self.failure.is_some()
    }

    /// Every transport that `begin_nap` may have prepared ends its part: a bridge opened
    /// meanwhile adds transports, whose end is harmless where they began nothing.
    fn end_transports_nap(&mut self, timed_out: bool) {
        match &mut self.wake {
            Some(set) => set.end_nap(&mut self.transports),
            None => {
                if let Some(t) = self.transports.iter_mut().find(|t| t.wakes()) {
                    t.end_nap(timed_out);
                }
            }
        }
    }

    /// The engine's eventfd, made on the first sleep on a wake fd.
    fn own_wake_fd(&mut self) -> io::Result<RawFd> {
        if let Some(own) = &self.nap_fd {
            return Ok(own.as_raw_fd());
        }
        // SAFETY: eventfd takes no pointers; a non-negative result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just made and nothing else owns it.
        let own = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = own.as_raw_fd();
        self.nap_fd = Some(own);
        Ok(raw)
    }
}

/// Makes the eventfd readable. A failed write (its counter full) leaves it readable anyway.
fn signal(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64 into an eventfd the engine owns.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Empties the eventfd (non-blocking), so that it wakes only the next sleep it is signalled for.
fn drain(fd: RawFd) {
    let mut count = 0u64;
    // SAFETY: reads at most 8 bytes into a live u64 from an eventfd the engine owns.
    unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) };
}
