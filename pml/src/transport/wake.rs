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
        for (i, t) in transports.iter_mut().enumerate() {
            if let Some(fd) = t.wake_fd()? {
                epoll
                    .add(&fd, i as u64, interest(false))
                    .map_err(|e| EngineError::Transport(format!("epoll: {e}")))?;
            }
        }
        Ok(Some(WakeSet {
            epoll,
            ready: Vec::with_capacity(8),
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
    /// epoll set, unless one found something (`Busy`, the wait over).
    pub(crate) fn begin_nap(
        &mut self,
        transports: &mut [AnyTransport],
    ) -> Result<NapStart, PmlError> {
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
