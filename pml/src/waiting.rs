//! How every PML waits: one loop, written once, with one set of constants. A blocking call
//! (`wait`, `wait_any`, the blocking probes and receives, `flush_all`) progresses until its
//! condition holds; each PML supplies the steps ([`Waiting`]: a round of progress, its spin
//! budget, what only time reveals, a sleep until woken), and the loop decides when to spin
//! and when to sleep. Whenever something moved, the loop also steps the hooks the layer above
//! registered ([`Waiting::step_hooks`]: mpirt's immediate collectives, which post their next
//! round only when stepped), so that every blocking call moves them on.
//!
//! A waiting rank busy-polls for a while (a message about to arrive is caught at once), then
//! sleeps until a peer's message wakes it. A rank with a core of its own never yields its core
//! instead: a yielding rank is runnable, so a peer that sends to it sees it awake and wakes
//! nothing, and the process it yielded to (any process on that core, the tail of a job that
//! just ended) keeps the core for the rest of its time slice, milliseconds, while the message
//! waits. A sleeping rank is woken by the send, and the scheduler runs a task just woken ahead
//! of one that has been running. Ranks that outnumber their cores spin not at all, and yield
//! between polls for a while (the PML's `yield_budget`) before they sleep, as Open MPI's do
//! when oversubscribed: the processes they yield to are mostly the peers they wait for, which
//! then run at the price of a context switch, where a sleeping rank costs its peer a wake-up
//! for every message. Rounds are counted first so the clock is read rarely;
//! while spinning, only every so many rounds read it (a read costs as much as a round). Rounds
//! follow each other at once, as in Open MPI's progress loop: a `pause` instruction between
//! them (about 12 ns here) delayed seeing a message that had landed, and the 8-byte
//! shared-memory latency went from 0.23-0.24 us with it to 0.21-0.22 without (alternated
//! osu_latency runs). The spin is short (`MPIRT_SPIN_US`) and only for ranks with a CPU each.

use std::time::{Duration, Instant};

use crate::error::PmlError;
use crate::pml_api::{Done, Pml};
use crate::requests::Handle;
use crate::stall::{Awaited, Blocked, Queues};

/// Idle rounds of progress between two looks at the clock while spinning.
const SPIN_ROUNDS_BEFORE_CLOCK: u32 = 64;
/// The longest one sleep lasts: a bound, in case a wake-up is missed, not the expected one
/// (a peer's message wakes the rank sooner).
const SLEEP: Duration = Duration::from_millis(2);
/// The slowest rate (bytes per nanosecond: 1 GB/s) at which messages in flight are expected
/// to move: a wait spins at least as long as its bytes take at this rate before it sleeps.
/// A rendezvous of 1 MiB leaves the waiting side idle for about the peer's copy, 100 us and
/// more, past the spin budget; sleeping then cost 8% of shared-memory bandwidth at 1 MiB
/// over UCX (10.0 GB/s against 10.9 spinning throughout), and Open MPI's pml ucx never
/// sleeps.
const SLOWEST_BYTES_PER_NS: usize = 1;
/// The longest spin the bytes in flight stretch a wait to: the gap to cover is one message's
/// transfer (the idle clock restarts whenever progress moves anything), and on a host shared
/// with other work a rank that spins long, rather than sleeping until woken, answers later
/// (osu_bw at 64 KiB to 1 MiB over UCX lost 20-30% spinning for all 64 MiB of its window,
/// load 8).
const MAX_SPIN_FOR_BYTES: Duration = Duration::from_millis(1);

/// How long a wait spins on idle progress before it sleeps: the configured `spin`, or
/// longer while many bytes are in flight (`SLOWEST_BYTES_PER_NS`, up to
/// `MAX_SPIN_FOR_BYTES`). No spin stays none: that is the setting for ranks that share
/// cores, which must not spin at all.
pub fn spin_budget(spin: Duration, bytes_in_flight: usize) -> Duration {
    if spin.is_zero() {
        return Duration::ZERO;
    }
    let moving = Duration::from_nanos((bytes_in_flight / SLOWEST_BYTES_PER_NS) as u64);
    spin.max(moving.min(MAX_SPIN_FOR_BYTES))
}

/// A PML's side of the waiting loop; the loop itself and the waits built on it are provided.
pub trait Waiting: Pml + Sized {
    /// One round of progress, as cheap as it can be while nothing comes; whether anything
    /// moved. Requests, queues and probes change only when something moves, so the loop
    /// looks at its condition again only then.
    fn poll(&mut self) -> Result<bool, PmlError>;

    /// How long a wait that sees nothing move busy-polls before it sleeps: zero for ranks
    /// that must not spin.
    fn spin_budget(&self) -> Duration;

    /// The spin this rank's waits start from (`MPIRT_SPIN_US`; zero for ranks that must not
    /// spin), before the bytes in flight now stretch it (`spin_budget`): for a setting that
    /// outlives the transfers in flight when it is taken.
    fn configured_spin(&self) -> Duration;

    /// At each look at the clock, `idle` after the last move: fails, naming the peer, if a
    /// peer is found dead, so that a wait on it fails rather than hang.
    fn check_peers(&mut self, idle: Duration) -> Result<(), PmlError>;

    /// Sleeps until a peer may have woken this rank (a message for it, room where its
    /// message was refused), or `timeout` passes. It may make progress itself: the loop
    /// looks at its condition after every sleep.
    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError>;

    /// Fails, naming the failure that stopped the PML, if one did: a stopped PML moves
    /// nothing, so a wait on it could never end.
    fn check_running(&self) -> Result<(), PmlError>;

    /// Steps the progress hooks registered with this PML, after a round that moved
    /// something: their transfers may have finished. A PML alone has none (mpirt's, which
    /// holds either PML, has its immediate collectives).
    #[inline]
    fn step_hooks(&mut self) -> Result<(), PmlError> {
        Ok(())
    }

    /// What the PML's queues hold, for a wait for `awaited` that has slept with nothing
    /// moving (see `stall`). A PML that cannot tell says nothing.
    fn queues(&self, awaited: Awaited<'_>) -> Queues {
        let _ = awaited;
        Queues::default()
    }

    /// Progresses until `done` holds: [`wait_on`](Self::wait_on) for a wait that is not on
    /// requests.
    #[inline]
    fn wait_until(
        &mut self,
        done: impl FnMut(&mut Self) -> Result<bool, PmlError>,
    ) -> Result<(), PmlError> {
        self.wait_on(Awaited::State, done)
    }

    /// Progresses until `done` holds: spins while the PML's budget lasts, then sleeps until
    /// woken (`wait_asleep`). The idle clock starts at the first idle round and again
    /// whenever something moved. `awaited` is what `done` waits for, for the stall report.
    #[inline]
    fn wait_on(
        &mut self,
        awaited: Awaited<'_>,
        mut done: impl FnMut(&mut Self) -> Result<bool, PmlError>,
    ) -> Result<(), PmlError> {
        let mut idle_rounds = 0u32;
        let mut idle_since = None;
        self.check_running()?;
        loop {
            if done(self)? {
                return Ok(());
            }
            while !self.poll()? {
                idle_rounds = idle_rounds.wrapping_add(1);
                if !idle_rounds.is_multiple_of(SPIN_ROUNDS_BEFORE_CLOCK) {
                    continue;
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                let idle = since.elapsed();
                self.check_peers(idle)?;
                if idle >= self.spin_budget() {
                    return self.wait_asleep(awaited, &mut done, since);
                }
            }
            self.step_hooks()?;
            idle_rounds = 0;
            idle_since = None;
        }
    }

    /// The rest of a wait that spun its budget out with nothing moving (idle since
    /// `idle_since`): yields its CPU while idle within the PML's `yield_budget`, else sleeps
    /// until woken, looks at `done`, and spins its budget again only after something moved (a
    /// rank woken with nothing for it sleeps again at once). Out of
    /// line, with the stall watch (`stall::Blocked`), so that a wait that never sleeps pays
    /// for neither.
    #[cold]
    #[inline(never)]
    fn wait_asleep(
        &mut self,
        awaited: Awaited<'_>,
        done: &mut impl FnMut(&mut Self) -> Result<bool, PmlError>,
        idle_since: Instant,
    ) -> Result<(), PmlError> {
        let mut blocked = Blocked::new();
        let mut idle_since = Some(idle_since);
        let mut spinning = false;
        let mut idle_rounds = 0u32;
        'wait: loop {
            if !spinning {
                let idle = idle_since.map_or(Duration::ZERO, |s| s.elapsed());
                blocked.idle(idle, || self.queues(awaited));
                if idle < self.yield_budget() {
                    std::thread::yield_now();
                } else {
                    self.sleep(SLEEP)?;
                }
            }
            loop {
                // The sleep may have made progress itself: `done` may hold now.
                if done(self)? {
                    return Ok(());
                }
                while !self.poll()? {
                    idle_rounds = idle_rounds.wrapping_add(1);
                    if spinning && !idle_rounds.is_multiple_of(SPIN_ROUNDS_BEFORE_CLOCK) {
                        continue;
                    }
                    let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
                    self.check_peers(idle)?;
                    spinning = idle < self.spin_budget();
                    if !spinning {
                        continue 'wait;
                    }
                }
                self.step_hooks()?;
                idle_rounds = 0;
                idle_since = None;
                blocked.moved();
                spinning = true;
            }
        }
    }

    /// Progresses until `found` finds something, and returns that; `awaited` as for
    /// [`wait_on`](Self::wait_on).
    fn wait_for<T>(
        &mut self,
        awaited: Awaited<'_>,
        mut found: impl FnMut(&mut Self) -> Result<Option<T>, PmlError>,
    ) -> Result<T, PmlError> {
        let mut result = None;
        self.wait_on(awaited, |p| {
            result = found(p)?;
            Ok(result.is_some())
        })?;
        Ok(result.expect("wait_on returns once found"))
    }

    /// Waits for the request and collects it.
    fn wait_collect(&mut self, h: Handle) -> Result<Done, PmlError> {
        self.wait_for(Awaited::Request(h), |p| p.collect(h))
    }

    /// Waits until any of `handles` finished; returns its index (not yet collected).
    fn wait_first(&mut self, handles: &[Handle]) -> Result<usize, PmlError> {
        self.wait_for(Awaited::Requests(handles), |p| {
            for (i, &h) in handles.iter().enumerate() {
                if p.is_complete(h)? {
                    return Ok(Some(i));
                }
            }
            Ok(None)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_spin_longer_while_many_bytes_are_in_flight() {
        let spin = Duration::from_micros(100);
        assert_eq!(spin_budget(spin, 0), spin);
        assert_eq!(
            spin_budget(spin, 16 << 10),
            spin,
            "small messages keep the spin"
        );
        assert_eq!(
            spin_budget(spin, 512 << 10),
            Duration::from_nanos(512 << 10)
        );
        assert_eq!(spin_budget(spin, 64 << 20), MAX_SPIN_FOR_BYTES, "capped");
        assert_eq!(
            spin_budget(Duration::from_secs(1), 1 << 20),
            Duration::from_secs(1)
        );
        assert_eq!(spin_budget(Duration::ZERO, 1 << 30), Duration::ZERO);
    }
}
