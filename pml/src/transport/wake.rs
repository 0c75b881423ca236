//! The one wait of a rank whose peers are reached by several transports: an epoll set over
//! each transport's wake fd (TCP's own epoll set, the verbs completion channel, the
//! shared-memory wake pipe), so that whichever has something wakes the rank at once. A
//! transport without a wake fd (OFI on udp;ofi_rxd) says how soon it must be polled again
//! ([`Polled`]), and the wait on the others' fds lasts no longer than that.

use std::os::fd::AsRawFd;
use std::time::Duration;

use super::epoll::{interest, Epoll, Ready};
use super::{AnyTransport, Transport};
use crate::error::PmlError;
use crate::nap::{Nap, NapStart};
use crate::pml_api::EngineError;

/// How soon a transport without a wake fd, whose data moves only inside its own calls, must
/// be polled again (`Transport::polled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// At once: a transfer is under way, and the rank may spin.
    Now,
    /// After yielding the CPU: a transfer is under way, and the rank must not spin (ranks
    /// outnumber their cores).
    AfterYield,
    /// Within this long: nothing of this rank's is under way, so a wait may sleep that long
    /// (on the other transports' fds, which wake it sooner).
    Within(Duration),
}

/// What one wait of the set does, from what its transports said.
#[derive(Debug, PartialEq, Eq)]
enum SetWait {
    /// Returns at once: something may be there already, or a transport must be polled now.
    Return,
    /// Yields the CPU, then returns.
    Yield,
    /// Sleeps on the fds at most this long.
    Sleep(Duration),
}

/// The wait, where `ready` says whether some transport may already have something, `polled`
/// is what the transports without a wake fd asked, and `timeout` the caller's bound.
fn set_wait(ready: bool, polled: &[Polled], timeout: Duration) -> SetWait {
    if ready || polled.contains(&Polled::Now) {
        return SetWait::Return;
    }
    if polled.contains(&Polled::AfterYield) {
        return SetWait::Yield;
    }
    let bound = polled.iter().fold(timeout, |bound, p| match p {
        Polled::Within(within) => bound.min(*within),
        Polled::Now | Polled::AfterYield => bound,
    });
    SetWait::Sleep(bound)
}

/// Has each of `transports` say how peers wake it and look once more (`before_wait`), and
/// hands it to `also` after: whether one may have something already, and a failure (the last
/// where several fail; a failed transport counts as ready, so that its poll reports it).
fn before_wait_all(
    transports: &mut [AnyTransport],
    mut also: impl FnMut(&AnyTransport),
) -> (bool, Result<(), PmlError>) {
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
        also(t);
    }
    (ready, failure)
}

pub(crate) struct WakeSet {
    epoll: Epoll,
    ready: Vec<Ready>,
    /// Whether a transport that peers feed has no wake fd (OFI on a provider without a wait
    /// fd, whose `before_wait` says "may be pending" always): this set's sleep is never
    /// taken, and a thread that would sleep apart from the engine pauses instead (`begin_nap`).
    unwatched: bool,
    /// What the transports without a wake fd asked, gathered anew at each wait.
    polled: Vec<Polled>,
    /// Waits that slept on the fds (`Counters::wake_set_sleeps`).
    sleeps: u64,
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
            polled: Vec::with_capacity(1),
            sleeps: 0,
        }))
    }

    /// Waits that slept on the fds so far.
    pub(crate) fn sleeps(&self) -> u64 {
        self.sleeps
    }

    /// Sleeps until one of `transports` may have something or `timeout` passed, or less where
    /// one without a wake fd must be polled sooner. Each says first how peers wake it and
    /// looks once more, so that nothing that came before is slept through; the fds are
    /// level-triggered, so nothing after is either.
    pub(crate) fn sleep(
        &mut self,
        transports: &mut [AnyTransport],
        timeout: Duration,
    ) -> Result<(), PmlError> {
        self.polled.clear();
        let polled = &mut self.polled;
        let (ready, failure) = before_wait_all(transports, |t| polled.extend(t.polled()));
        match set_wait(ready, &self.polled, timeout) {
            SetWait::Return => {}
            SetWait::Yield => std::thread::yield_now(),
            SetWait::Sleep(bound) => {
                self.sleeps += 1;
                // An interrupted or failed wait only returns early; the transports' polls
                // report their errors.
                let _ = self.epoll.wait(bound, &mut self.ready);
            }
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
        let (ready, failure) = before_wait_all(transports, |_| {});
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

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(2);
    const NAP: Duration = Duration::from_micros(50);

    /// With only transports that have wake fds, the set sleeps the caller's timeout unless
    /// one may have something already.
    #[test]
    fn transports_with_fds_alone_sleep_the_whole_timeout() {
        assert_eq!(set_wait(false, &[], TIMEOUT), SetWait::Sleep(TIMEOUT));
        assert_eq!(set_wait(true, &[], TIMEOUT), SetWait::Return);
    }

    /// A transport without an fd shortens the sleep to its own nap (it was taken for "ready"
    /// before, so such a rank's waits polled without ever sleeping), and returns at once or
    /// yields while it has a transfer under way; something already there still returns.
    #[test]
    fn a_transport_without_an_fd_bounds_the_sleep() {
        let within = Polled::Within(NAP);
        assert_eq!(set_wait(false, &[within], TIMEOUT), SetWait::Sleep(NAP));
        assert_eq!(
            set_wait(false, &[Polled::Within(TIMEOUT * 2)], TIMEOUT),
            SetWait::Sleep(TIMEOUT),
            "a nap longer than the timeout"
        );
        assert_eq!(set_wait(true, &[within], TIMEOUT), SetWait::Return);
        assert_eq!(set_wait(false, &[Polled::Now], TIMEOUT), SetWait::Return);
        assert_eq!(
            set_wait(false, &[Polled::AfterYield], TIMEOUT),
            SetWait::Yield
        );
        assert_eq!(
            set_wait(true, &[Polled::AfterYield], TIMEOUT),
            SetWait::Return,
            "something there is taken before yielding"
        );
        assert_eq!(
            set_wait(false, &[within, Polled::AfterYield], TIMEOUT),
            SetWait::Yield
        );
        assert_eq!(
            set_wait(false, &[Polled::AfterYield, Polled::Now], TIMEOUT),
            SetWait::Return
        );
        assert_eq!(
            set_wait(false, &[Polled::Within(NAP * 4), within], TIMEOUT),
            SetWait::Sleep(NAP),
            "the soonest of several"
        );
    }
}
