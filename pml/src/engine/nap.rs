//! The engine's side of a sleep taken apart from it (`crate::nap`): prepared and ended under
//! the lock the engine is behind, woken by the rank's other threads through the engine.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::Engine;
use crate::error::PmlError;
use crate::nap::NapStart;
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
            self.napping = Some(Napping::OnFutex);
            return Ok(NapStart::Sleep(nap));
        }
        match self.own_wake_fd() {
            Ok(own) => {
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
    /// that moved something the sleeper may wait for.
    pub fn wake_nap(&self) {
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
