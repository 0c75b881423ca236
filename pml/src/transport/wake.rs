//! The one wait of a rank whose peers are reached by several transports: an epoll set over
//! each transport's wake fd (TCP's own epoll set, the verbs completion channel, the
//! shared-memory wake pipe), so that whichever has something wakes the rank at once.

use std::os::fd::AsRawFd;
use std::time::Duration;

use super::epoll::{interest, Epoll, Ready};
use super::{AnyTransport, Transport};
use crate::error::PmlError;
use crate::nap::{Nap, NapStart};
use crate::pml_api::EngineError;

pub(crate) struct WakeSet {
    epoll: Epoll,
    ready: Vec<Ready>,
    /// Whether a transport that peers feed has no wake fd (OFI on a provider without a wait
    /// fd, whose `before_wait` says "may be pending" always): this set's sleep is never
    /// taken, and a thread that would sleep apart from the engine pauses instead (`begin_nap`).
    unwatched: bool,
}

impl WakeSet {
    /// The set over the wake fds of `transports`, or `None` when at most one has any: that
    /// one then sleeps its own way (the shared-memory futex, say).
    pub(crate) fn over(transports: &mut [AnyTransport]) -> Result<Option<WakeSet>, EngineError> {
        let sources = transports.iter().filter(|t| t.wakes()).count();
        if sources < 2 {
            return Ok(None);
        }
        let epoll = Epoll::new().map_err(|e| EngineError::Transport(format!("epoll: {e}")))?;
        let mut unwatched = false;
        for (i, t) in transports.iter_mut().enumerate() {
            match t.wake_fd()? {
                Some(fd) => epoll
                    .add(&fd, i as u64, interest(false))
                    .map_err(|e| EngineError::Transport(format!("epoll: {e}")))?,
                None => unwatched |= t.wakes(),
            }
        }
        Ok(Some(WakeSet {
            epoll,
            ready: Vec::with_capacity(8),
            unwatched,
        }))
    }

    /// Sleeps until one of `transports` may have something or `timeout` passed. Each says
    /// first how peers wake it and looks once more, so that nothing that came before is
    /// slept through; the fds are level-triggered, so nothing after is either.
    pub(crate) fn sleep(
        &mut self,
        transports: &mut [AnyTransport],
        timeout: Duration,
    ) -> Result<(), PmlError> {
        let mut ready = false;
        let mut failure = Ok(());
        for t in transports.iter_mut() {
            match t.before_wait() {
                Ok(r) => ready |= r,
                Err(e) => {
                    failure = Err(e);
                    ready = true;
                }
            }
        }
        if !ready {
            // An interrupted or failed wait only returns early; the transports' polls
            // report their errors.
            let _ = self.epoll.wait(timeout, &mut self.ready);
        }
        for t in transports.iter_mut() {
            t.after_wait();
        }
        failure
    }

    /// `sleep`'s first half, for a thread that sleeps apart from the engine (`crate::nap`):
    /// each transport says how peers wake it and looks once more; then the sleep is on the
    /// epoll set, unless one found something (`Busy`, the wait over). `Unwakeable` where a
    /// transport has no wake fd: its "may be pending" would make every try `Busy`, and the
    /// rank's waiting threads would poll without pause.
    pub(crate) fn begin_nap(
        &mut self,
        transports: &mut [AnyTransport],
    ) -> Result<NapStart, PmlError> {
        if self.unwatched {
            return Ok(NapStart::Unwakeable);
        }
        let mut ready = false;
        let mut failure = Ok(());
        for t in transports.iter_mut() {
            match t.before_wait() {
                Ok(r) => ready |= r,
                Err(e) => {
                    failure = Err(e);
                    ready = true;
                }
            }
        }
        if !ready {
            return Ok(NapStart::Sleep(Nap::on_fd(self.epoll.as_raw_fd())));
        }
        self.end_nap(transports);
        failure.map(|()| NapStart::Busy)
    }

    /// `sleep`'s second half, after a sleep that `begin_nap` prepared.
    pub(crate) fn end_nap(&mut self, transports: &mut [AnyTransport]) {
        for t in transports.iter_mut() {
            t.after_wait();
        }
    }
}
