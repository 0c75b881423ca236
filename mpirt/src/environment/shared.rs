//! The PML that threads share, at `Threading::Serialized` and `Multiple` (cargo feature
//! `threads`; without it no call comes here, see `with_engine`): one engine per
//! process behind a lock, as Open MPI runs its ob1 PML under `MPI_THREAD_MULTIPLE` (progress
//! made by whichever thread waits), rather than MPICH's virtual communication interfaces (an
//! engine per interface, communicators and streams mapped onto them): mpirt's engine has one
//! set of transport endpoints, wired up with every peer at start, and a second set would need
//! a second wire-up (ARCHITECTURE.md, "Threads", says what that would take).
//!
//! A non-blocking call holds the lock for the call. A blocking one holds it for one look at
//! its condition (a look that moves nothing) and one round of progress at a time, and lets go
//! between rounds, so a thread that waits never keeps another from posting what it waits
//! for, and the threads that wait make progress for each other. One waiting thread of a rank
//! at a time progresses (`PROGRESSOR`): it spins, and once it spun its budget out with
//! nothing moving it sleeps as a rank alone does, woken by a peer's message (the
//! shared-memory futex word, or a wake fd with the engine's eventfd beside it: `pml::nap`),
//! but without the lock, so that its rank's other threads go on (one thread of a rank sleeps
//! so at a time, since the transports keep one sleeper's state). The others pause on a
//! condition variable as soon as a round of theirs moves nothing, so that a rank's waits
//! spin on one CPU, not one each. Either kind of sleeper wakes on another thread's round that
//! moved something, or on the first non-blocking call after it went to sleep that may have
//! moved what it waits for (the engine tells, `Engine::moved_since`: a send the transport
//! took at once, or a receive posted without a match, moved nothing another thread waits for,
//! and wakes no one), and the progressing thread that leaves wakes the paused ones and hands
//! its place to them: the first back takes it, over a thread that started a wait meanwhile
//! and held it lent. Open MPI's waits under `MPI_THREAD_MULTIPLE` are alike (one thread
//! progresses, the others block until their request completes or the progressing one passes
//! its place on), but its progressing thread polls instead of sleeping. Sends keep their
//! order per sending thread: each takes its sequence number under the lock, in the order its
//! thread posts them.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering as StdOrdering};
use std::sync::{OnceLock, PoisonError};
use std::time::{Duration, Instant};

use pml::stall::Awaited;
use pml::{
    ContextId, Done, Handle, Nap, NapStart, Pml, PmlError, SourceSel, Started, Status, TagSel,
    Waiting,
};

use super::place;
use crate::backend::{hooks, AnyPml};
use crate::error::Cause;
use crate::stall::{self, SharedWait};
use crate::sync::{
    sleep_apart, spin_loop, thread_local, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering,
};
use crate::threads::Waits;

/// The lock whose holder may reach the engine (`place`), made by `install`.
static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
/// Wakes the threads that pause in a blocking call whenever another thread's round of
/// progress moved something: what it moved may be theirs.
static MOVED: Condvar = Condvar::new();
/// How many threads paused on `MOVED` since the last wake-up: a hold that may have moved
/// something wakes them only where there is one, so that a round or a call with no thread
/// paused pays one load and no futex wake, and of the non-blocking calls that moved
/// something while a thread stays paused only the first wakes it (a call after it found the
/// count at 0: the woken thread takes the lock after that call, and its look sees what later
/// calls moved, or it pauses again and counts itself again). Read and written under the lock
/// only.
static UNWOKEN: AtomicUsize = AtomicUsize::new(0);
/// How many wake-ups there were (`UNWOKEN` set to 0 and `MOVED` notified): a paused thread
/// whose wait ended with this unchanged was counted out by no waker (its pause timed out, or
/// the wake-up was spurious) and counts itself out. Under the lock only, as `UNWOKEN`.
static WAKE_UPS: AtomicUsize = AtomicUsize::new(0);
/// Whether a thread sleeps apart from the engine (`pml::nap`), where a peer's message wakes
/// it as it wakes a rank alone: `NAP_NONE`, `NAP_ASLEEP` (a hold that moved something wakes
/// it, `Engine::wake_nap`) or `NAP_WOKEN` (woken, on its way back to the lock: no second
/// wake-up). Only the thread that progresses (`PROGRESSOR`) sleeps so; the others pause on
/// `MOVED`, and its rounds, as any thread's, wake them. Under the lock only, as `UNWOKEN`.
static NAPPER: AtomicUsize = AtomicUsize::new(NAP_NONE);
const NAP_NONE: usize = 0;
const NAP_ASLEEP: usize = 1;
const NAP_WOKEN: usize = 2;
/// The place of the waiting thread that progresses for the rank's others (`block_until`'s
/// `Progressing`), one of the four `PLACE_` states: one thread at a time, so that a rank's
/// waits spin on one CPU at most; the others pause on `MOVED`. Under the lock only, as
/// `UNWOKEN`.
static PROGRESSOR: AtomicUsize = AtomicUsize::new(PLACE_FREE);
/// No waiting thread progresses: the next to wait takes the place.
const PLACE_FREE: usize = 0;
/// A waiting thread holds the place and progresses.
const PLACE_TAKEN: usize = 1;
/// Given up by a leaving thread to the threads paused then, which it woke: the first of them
/// back at the lock takes it.
const PLACE_HANDED: usize = 2;
/// A handed place that a thread which started its wait after the hand-off holds meanwhile:
/// it progresses (spins, never sleeping apart) until one of the woken threads is back and
/// takes the place over (`PLACE_TAKES` tells it; it pauses then), or until it has spun its
/// budget out (the place is its own then, `PLACE_TAKEN`).
const PLACE_LENT: usize = 3;
/// How many times the place was taken: a `Progressing` keeps the count of its take, so that
/// a thread whose lent place was taken over knows it. Under the lock only, as `UNWOKEN`.
static PLACE_TAKES: AtomicUsize = AtomicUsize::new(0);

/// How often a waiting thread took the place of the one that progresses (`Progressing`), and
/// how often one paused on `MOVED` (the one that progresses too, where no peer wakes the
/// rank), and of those pauses how many a waker ended (the rest ran out or woke spuriously):
/// counts for `threads::Threads::waits`, with std's atomics (not the model's), since nothing
/// synchronizes on them.
static PROGRESSORS: AtomicU64 = AtomicU64::new(0);
static PAUSES: AtomicU64 = AtomicU64::new(0);
static PAUSES_WOKEN: AtomicU64 = AtomicU64::new(0);
/// How often a leaving thread handed the place on to the threads paused beside it
/// (`PLACE_HANDED`), and how often one of those, back, took over a place lent meanwhile
/// (`PLACE_LENT`), for `threads::Threads::waits` too.
static HANDED_ON: AtomicU64 = AtomicU64::new(0);
static TAKEN_OVER: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The hold of a non-blocking call made through `place::Entry` (`hold_for_call`), until
    /// its end (`let_go_after_call`): kept here, so that the call carries nothing for it.
    #[cfg(feature = "threads")]
    static CALL_HOLD: std::cell::RefCell<Option<Held>> = const { std::cell::RefCell::new(None) };
    /// Whether this thread holds `LOCK` (`HOLDS`): a call made while it does (from inside a
    /// PML call) fails as `NestedCall`, instead of waiting for itself. `UNCOUNTED` until its
    /// first hold, which counts it among the threads that use mpirt (`stall::count_this_thread`,
    /// for the stall reports): the hold's one look at this word tells both.
    static HOLDING: Cell<u8> = const { Cell::new(UNCOUNTED) };
}

/// `HOLDING`'s states: a thread that never held the lock, one that does not hold it now, and
/// one that holds it.
const UNCOUNTED: u8 = 0;
const FREE: u8 = 1;
const HOLDS: u8 = 2;

/// Idle rounds between two looks at the clock while a blocking call spins.
const ROUNDS_BEFORE_CLOCK: u32 = 64;
/// The first and the longest pause of a blocking call that spun its budget out with nothing
/// moving: it sleeps without the lock, so that the threads it shares the rank with run.
const FIRST_PAUSE: Duration = Duration::from_micros(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(1);

/// Makes the engine in its place (`place::install`) the one every thread uses.
pub(super) fn install() {
    LOCK.get_or_init(|| Mutex::new(()));
}

/// The engine's lock, held by this thread until the guard drops.
pub(super) struct Held {
    guard: Option<MutexGuard<'static, ()>>,
    /// Whether letting go wakes the waiting threads (those paused, and the one sleeping apart).
    wakes: Wakes,
}

/// When letting go of a hold wakes the threads that wait.
#[derive(Clone, Copy)]
enum Wakes {
    /// A blocking call's look, which moves nothing, or its idle round: a spinning thread's
    /// every round would otherwise end every other's pause.
    No,
    /// A blocking call's round that moved something, or the waiter that progresses leaving
    /// while others pause (one of them takes its place).
    Yes,
    /// A non-blocking call's hold (or a blocking receive's start), which may have moved
    /// anything: where the engine says it moved something since this mark, taken as the hold
    /// began (`Engine::moved_since`; no mark, always). A send the transport took at once wakes
    /// no one, where before every call woke the sleeper: about two needless wake-ups a
    /// message of `osu_latency_mt -t 1:2`'s receiving rank.
    IfMoved(Option<pml::MovedMark>),
}

impl Held {
    /// Takes the lock; where the engine is not shared, why this thread may not reach it
    /// (`place::refused`), and `NestedCall` where this thread holds the lock already.
    /// `call`: a non-blocking call's hold, which wakes the waiting threads as it ends where it
    /// moved something (`Wakes::IfMoved`).
    fn take(call: bool) -> Result<Held, Cause> {
        let Some(lock) = LOCK.get() else {
            return Err(place::refused());
        };
        let holding = HOLDING.with(Cell::get);
        if holding != FREE {
            if holding == HOLDS {
                return Err(Cause::NestedCall);
            }
            stall::count_this_thread();
        }
        // A thread that panicked holding the lock left the engine as a panic in a PML call
        // at `Single` leaves it: the job ends over the panic anyway.
        let guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        HOLDING.with(|holding| holding.set(HOLDS));
        let mut held = Held {
            guard: Some(guard),
            wakes: Wakes::No,
        };
        if call {
            // Before finalize's call took the engine out of its place, a mark; after, none.
            let mark = held.engine().ok().and_then(|engine| engine.moved_mark());
            held.wakes = Wakes::IfMoved(mark);
        }
        Ok(held)
    }

    /// Lets go of the lock for at most `pause`, or until another thread's round moved
    /// something; then gives it up. Whether no thread woke it.
    fn pause(mut self, pause: Duration) -> bool {
        let mut unwoken = false;
        if let Some(guard) = self.guard.take() {
            HOLDING.with(|holding| holding.set(FREE));
            // Counted under the lock, which the wait lets go of only once this thread waits:
            // a thread that takes the lock after sees the count and wakes it.
            UNWOKEN.fetch_add(1, Ordering::Relaxed);
            let wake_ups = WAKE_UPS.load(Ordering::Relaxed);
            // The wait takes the lock again as it ends; dropping what it returns lets go.
            let (guard, _) = MOVED
                .wait_timeout(guard, pause)
                .unwrap_or_else(PoisonError::into_inner);
            PAUSES.fetch_add(1, StdOrdering::Relaxed);
            unwoken = WAKE_UPS.load(Ordering::Relaxed) == wake_ups;
            if unwoken {
                UNWOKEN.fetch_sub(1, Ordering::Relaxed);
            } else {
                PAUSES_WOKEN.fetch_add(1, StdOrdering::Relaxed);
            }
            drop(guard);
        }
        unwoken
    }

    /// Lets go of the lock and sleeps apart from the engine on `nap` (which `begin_nap`
    /// prepared under this hold) until a peer or a hold of another thread wakes it, or
    /// `LONGEST_PAUSE` passes; then ends the sleep under the lock, and gives it up.
    fn nap(mut self, nap: Nap) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        HOLDING.with(|holding| holding.set(FREE));
        // Said under the lock: a thread that takes it after wakes this one.
        NAPPER.store(NAP_ASLEEP, Ordering::Relaxed);
        drop(guard);
        let timed_out = sleep_apart(&nap, LONGEST_PAUSE);
        // This thread holds no hold now, and the lock exists, so the take succeeds.
        if let Ok(mut held) = Held::take(false) {
            NAPPER.store(NAP_NONE, Ordering::Relaxed);
            // Gone only where another thread finalized meanwhile: nothing to end then.
            if let Ok(engine) = held.engine() {
                engine.end_nap(timed_out);
            }
        }
    }

    /// The engine; `Finalized` after finalize.
    fn engine(&mut self) -> Result<&mut AnyPml, Cause> {
        // SAFETY: this thread holds the lock: a hold keeps its guard until it lets go
        // (`pause` and `nap`, which let go, consume the hold, and the drop calls this before
        // it drops the guard), so this is the one right to the engine there is (see `place`),
        // and the reference lives no longer than the borrow of the hold.
        unsafe { place::engine() }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HOLDING.with(|holding| holding.set(FREE));
        if self.guard.is_none() {
            return;
        }
        let waiting =
            NAPPER.load(Ordering::Relaxed) == NAP_ASLEEP || UNWOKEN.load(Ordering::Relaxed) > 0;
        let wakes = waiting
            && match self.wakes {
                Wakes::No => false,
                Wakes::Yes => true,
                // A call that took the engine out of its place (finalize) wakes every waiter.
                Wakes::IfMoved(mark) => match self.engine() {
                    Ok(engine) => engine.moved_since(mark),
                    Err(_) => true,
                },
            };
        // Woken once per sleep (`NAP_WOKEN`): the holds after this one find it awake.
        if wakes && NAPPER.load(Ordering::Relaxed) == NAP_ASLEEP {
            NAPPER.store(NAP_WOKEN, Ordering::Relaxed);
            if let Ok(engine) = self.engine() {
                engine.wake_nap();
            }
        }
        let Some(guard) = self.guard.take() else {
            return;
        };
        // Counted out under the lock, where every paused thread counted itself in.
        let wake = wakes && UNWOKEN.load(Ordering::Relaxed) > 0;
        if wake {
            UNWOKEN.store(0, Ordering::Relaxed);
            WAKE_UPS.fetch_add(1, Ordering::Relaxed);
        }
        // Lets go first, so that the woken threads find the lock free. A thread that pauses
        // in between counts itself after this hold: a later hold wakes it, and its look,
        // after this hold, saw what this one moved.
        drop(guard);
        if wake {
            MOVED.notify_all();
        }
    }
}

/// Whether this thread holds the lock: a call it makes now is a call inside a call.
pub(super) fn holding() -> bool {
    HOLDING.with(Cell::get) == HOLDS
}

/// What `HOLDING` said before `mark_holding`, to put back.
#[cfg(feature = "threads")]
#[derive(Clone, Copy)]
pub(super) struct HoldingMark(u8);

/// Marks this thread as holding the lock (`holding` says so), as user code that runs inside
/// a call does (`place::InUserCode`), or puts back what `HOLDING` said before (`was`).
#[cfg(feature = "threads")]
pub(super) fn mark_holding(was: Option<HoldingMark>) -> HoldingMark {
    let now = was.map_or(HOLDS, |HoldingMark(state)| state);
    HoldingMark(HOLDING.with(|mark| mark.replace(now)))
}

/// Takes the lock for a non-blocking call, kept until `let_go_after_call`; false where the
/// engine is not shared, or where this thread holds the lock already. Out of line, as every
/// way into the shared engine: the `Single` path's callers inline nothing of it.
#[cfg(feature = "threads")]
#[cold]
#[inline(never)]
pub(super) fn hold_for_call() -> bool {
    // `take` refuses a second hold in this thread, so the slot is empty.
    let Ok(held) = Held::take(true) else {
        return false;
    };
    CALL_HOLD.with(|hold| *hold.borrow_mut() = Some(held));
    true
}

/// Lets go of what `hold_for_call` took.
#[cfg(feature = "threads")]
#[cold]
#[inline(never)]
pub(super) fn let_go_after_call() {
    let held = CALL_HOLD.with(|hold| hold.borrow_mut().take());
    if hooks::deferred() {
        let_go_and_step_hooks(held);
    } else {
        drop(held);
    }
}

/// `let_go_after_call` where the call left progress hooks to step (a test's, `step_hooks`):
/// they run once the lock is let go, but not where a panic unwinds through the call (a hook
/// that panicked too would abort). Apart, so that a call without them lets go in a tail call:
/// with the steps inline, a round trip of `osu_latency_mt -t 1:1` cost its sending rank 20
/// instructions more (callgrind).
#[cfg(feature = "threads")]
#[cold]
#[inline(never)]
fn let_go_and_step_hooks(held: Option<Held>) {
    drop(held);
    if !std::thread::panicking() {
        hooks::step_deferred();
    }
}

/// Progresses until `ready`, a look that makes no progress, gives a value, holding the lock
/// for one look and one round of progress at a time. One waiting thread of the rank
/// progresses (`PROGRESSOR`): it spins while the engine's budget lasts, then, between rounds
/// and without the lock, sleeps apart from the engine (`Held::nap`, woken by a peer or another
/// thread's hold, at most `LONGEST_PAUSE`; where no peer can wake a sleep apart, it pauses,
/// each pause twice the last up to `LONGEST_PAUSE`). The rank's other waiting threads pause on
/// `MOVED` after their first idle round (which steps their thread's progress hooks), without
/// spinning, until a round moves something (what it moved may be theirs) or the progressing
/// thread leaves, handing its place on (`Progressing`'s end wakes them, and the first back at
/// the lock takes the place; a thread that starts a wait before then holds it lent until that
/// one is back, then pauses): a rank's waits never spin on more CPUs than the one a rank has
/// (`osu_latency_mt -t 1:2` ran three spinning threads on two CPUs, and a run whose thread
/// was descheduled read 14-75 us a message).
/// Open MPI's waits are alike (`ompi_sync_wait_mt`: one thread progresses, the others wait
/// on their own condition until their request completes or the progressing one passes its
/// place on), its progressing thread polling where this one sleeps apart once its spin ends.
/// Out of line, as every way into the shared engine: the thread-local path's callers inline
/// nothing of it.
///
/// A round's progress hooks (this thread's immediate collectives) run after the round, without
/// the lock (`hooks::defer`), and the thread that progresses gives its place up before them,
/// so that a user-defined operation they apply holds no other thread up, nor keeps the rank's
/// other waits paused; the look after them comes before this thread pauses.
///
/// `waits` is what it waits for, for its thread's stall report: the bookkeeping of that begins
/// only where the wait has gone idle (it spun its budget out, or a pause of its ended with
/// no waker), and is made before each pause or sleep from then on.
#[cold]
#[inline(never)]
pub(super) fn block_until<R>(
    mut waits: SharedWait<'_>,
    mut ready: impl FnMut(&mut AnyPml) -> Result<Option<R>, PmlError>,
) -> Result<R, Cause> {
    let mut idle_rounds = 0u32;
    let mut idle_since: Option<Instant> = None;
    let mut pausing = false;
    let mut pause = FIRST_PAUSE;
    // Whether this wait paused beside the thread that progresses: one of the threads a
    // leaving one handed its place to.
    let mut paused = false;
    // Whether this wait's last pause beside the thread that progresses ended with no waker:
    // nothing moved for a pause's time.
    let mut unwoken = false;
    // Dropped after each iteration's hold (declared before it): a wait that fails hands its
    // place on as it leaves.
    let mut progressing: Option<Progressing> = None;
    // Where this thread's hooks just ran after an idle round, what the engine had moved as
    // that round ended: the look that follows them goes on to that round's pause, without a
    // round of its own, unless something moved since.
    let mut after_idle_hooks: Option<Option<pml::MovedMark>> = None;
    // Rounds made since the last pause because something moved while the hooks ran: at most
    // `ROUNDS_BEFORE_CLOCK` in a row, should the engine keep work that only its rounds move
    // (a frame waiting for room), so that such a thread still pauses (its pause is bounded).
    let mut hooks_again = 0u32;
    let value = loop {
        // The hooks the last round left (`AnyPml::step_hooks` defers them under the lock),
        // stepped holding nothing; the look below sees what they did. The thread that
        // progresses gives its place up first, as it does leaving (to the threads paused beside
        // it, which it wakes, or free for the next to wait): what the hooks run (an immediate
        // collective's user-defined operation) may take long, and a place kept meanwhile left
        // the rank's other waits one round each `LONGEST_PAUSE`, no round of the rank waking
        // them. Back from the hooks, it takes the place again like any waiter (lent, where
        // the threads it woke are not yet back), or pauses beside the one that took it.
        if hooks::deferred() {
            if let Some(place) = progressing.take() {
                place.hand_on(&mut Held::take(false)?);
                paused = false;
            }
            hooks::step_deferred();
        }
        let look_at_clock = idle_rounds > 0 && idle_rounds.is_multiple_of(ROUNDS_BEFORE_CLOCK);
        let idle = look_at_clock.then(|| idle_since.get_or_insert_with(Instant::now).elapsed());
        let mut held = Held::take(false)?;
        // A lent place that a thread back from its pause took over: this thread pauses after
        // its next idle round, as any beside the one that progresses.
        if let Some(lost) = progressing.take_if(|place| !place.held()) {
            lost.taken_over();
        }
        // The first paused thread back after a hand-off takes the place, lent or not, before
        // it looks, so that a look that finds its condition met hands it on again as it leaves
        // (to the threads paused since, which nothing else may wake).
        if paused && progressing.is_none() {
            let place = PROGRESSOR.load(Ordering::Relaxed);
            if place == PLACE_HANDED || place == PLACE_LENT {
                progressing = Some(Progressing::take(false));
                if place == PLACE_LENT {
                    TAKEN_OVER.fetch_add(1, StdOrdering::Relaxed);
                }
            }
        }
        let engine = held.engine()?;
        engine.check_running()?;
        if let Some(idle) = idle {
            engine.check_peers(idle)?;
        }
        // A look that moves nothing (`collect`, not `test`): what a round inside it moved
        // (another thread's request that a message for it completed) would be lost to the
        // threads paused on it, where the round below says.
        if let Some(value) = ready(engine)? {
            break leave(value, progressing, &mut held);
        }
        if let Some(mark) = after_idle_hooks.take() {
            // Moved since the idle round (another thread's round, or a call of the hooks, took
            // a message off the wire or left work): perhaps work for the hooks that ran before
            // it moved, which no round of this thread's would step while it pauses, and the
            // round that moved it woke no one, this thread not yet paused. A round of its own,
            // and its hooks again, before it pauses: it pauses only after hooks that ran with
            // nothing moving since, and a move after it paused wakes it.
            if engine.moved_since(mark) && hooks_again < ROUNDS_BEFORE_CLOCK {
                hooks_again += 1;
                // Counted as an idle round, so that the clock (and the peers' check) is
                // looked at as it is while spinning.
                idle_rounds = idle_rounds.wrapping_add(1);
                continue;
            }
            hooks_again = 0;
        } else {
            if engine.progress()? {
                // Looks again in this hold: a round that took this thread's message returns
                // at once, rather than letting go (and waking the paused threads, a system
                // call) before its next look.
                let again = ready(engine);
                // Wakes the paused threads as the hold lets go, whatever the look found.
                held.wakes = Wakes::Yes;
                if let Some(value) = again? {
                    break leave(value, progressing, &mut held);
                }
                idle_rounds = 0;
                idle_since = None;
                pausing = false;
                pause = FIRST_PAUSE;
                continue;
            }
            // An idle round, which left this thread's progress hooks to step (its immediate
            // collectives, which only its own rounds step): they run without the lock, and
            // what they did moves nothing the round reports, yet may meet the condition (a
            // collective that finished, which a wait on a set of requests waits for; a
            // request its hooks' tests completed): the next look, after them, comes before
            // this thread pauses or sleeps, since no other thread's round would wake it.
            // A hook's own wait (`hooks::stepping`) steps no hooks: nothing to look again for.
            if hooks::any() && !hooks::stepping() {
                after_idle_hooks = Some(engine.moved_mark());
                drop(held);
                continue;
            }
        }
        // A thread that waits beside the one that progresses pauses now, until a round moves
        // something or that thread leaves (at most `LONGEST_PAUSE`, a bound should a wake-up
        // be lost). One that finds the place handed on to the threads paused before it came
        // holds it until one of them is back (lent): `osu_latency_mt -t 1:2`'s receiving
        // thread, back from its answer, took the place for good, so that where its ping
        // came after the woken thread had paused again (from 4 KiB on this host's 2 CPUs)
        // the woken thread waited for a second wake-up; now it takes the place over and is
        // the one spinning when its ping comes, while a ping that came before it was back is
        // taken by the lent place's round, as before.
        // A progress hook's own wait (a window serving a long message, a failed collective
        // taking its transfers back) pauses so too: its thread gave its place up before the
        // hooks ran (above), so the place is another waiter's, whose rounds wake it.
        if progressing.is_none() {
            let place = PROGRESSOR.load(Ordering::Relaxed);
            if place != PLACE_FREE && place != PLACE_HANDED {
                waits.idle(engine, unwoken);
                unwoken = held.pause(LONGEST_PAUSE);
                paused = true;
                continue;
            }
            // Not yet paused in this wait, else it would have taken a handed place above.
            progressing = Some(Progressing::take(place == PLACE_HANDED));
        }
        idle_rounds = idle_rounds.wrapping_add(1);
        pausing |= idle.is_some_and(|idle| idle >= engine.spin_budget());
        if pausing {
            // The woken threads had the spin budget's time to come back: a lent place is this
            // thread's own now, since a thread sleeping apart cannot be taken over.
            if PROGRESSOR.load(Ordering::Relaxed) == PLACE_LENT {
                PROGRESSOR.store(PLACE_TAKEN, Ordering::Relaxed);
            }
            waits.idle(engine, true);
            // This thread sleeps apart from the engine, woken by a peer's message; the others
            // pause on `MOVED` until a round moves something.
            match engine.begin_nap()? {
                NapStart::Sleep(nap) => held.nap(nap),
                // Something came: the next round takes it.
                NapStart::Busy => drop(held),
                // Only this rank's threads move anything: pause until one does, as a sleep
                // after letting go of the lock would, but wake as soon as a round moves
                // something.
                NapStart::Unwakeable => {
                    let _ = held.pause(pause);
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
            }
        } else {
            drop(held);
            spin_loop();
        }
    };
    // The hooks of the round whose look found the condition met, now that its hold let go
    // (a wait that failed leaves them to the thread's next call).
    hooks::step_deferred();
    Ok(value)
}

/// A wait's end, in the hold that found its condition met: the thread that progressed hands
/// its place on.
fn leave<R>(value: R, progressing: Option<Progressing>, held: &mut Held) -> R {
    if let Some(place) = progressing {
        place.hand_on(held);
    }
    value
}

/// The place of the thread that progresses for a rank's waiting threads (`PROGRESSOR`),
/// taken under the lock by a blocking call that found it free or handed on. Given up under
/// the lock: by `hand_on` as its wait ends, in the hold that saw its condition met, or by the
/// drop where the wait failed; either hands it to the threads paused meanwhile and wakes them,
/// and the first back takes it. Holds the count of its take (`PLACE_TAKES`): a lent place
/// taken over is no longer its to give up.
struct Progressing(usize);

impl Progressing {
    /// Takes the place, free, handed on or lent (taken over), or, `lent`, a handed place
    /// until a thread it was handed to is back; the caller holds the lock.
    fn take(lent: bool) -> Progressing {
        let place = if lent { PLACE_LENT } else { PLACE_TAKEN };
        PROGRESSOR.store(place, Ordering::Relaxed);
        PROGRESSORS.fetch_add(1, StdOrdering::Relaxed);
        let take = PLACE_TAKES.load(Ordering::Relaxed).wrapping_add(1);
        PLACE_TAKES.store(take, Ordering::Relaxed);
        Progressing(take)
    }

    /// Whether this thread still holds the place (a lent one may have been taken over); the
    /// caller holds the lock.
    fn held(&self) -> bool {
        PLACE_TAKES.load(Ordering::Relaxed) == self.0
    }

    /// Drops a lent place that another thread took over: nothing to give up.
    fn taken_over(self) {
        std::mem::forget(self);
    }

    /// Gives the place up in `held`, where this thread still holds it: to the threads paused
    /// now, which it wakes as it lets go, or, lent, back to those it was handed to, which are
    /// on their way (`PLACE_HANDED`), else free.
    fn hand_on(self, held: &mut Held) {
        if self.held() {
            let place = if UNWOKEN.load(Ordering::Relaxed) > 0 {
                held.wakes = Wakes::Yes;
                HANDED_ON.fetch_add(1, StdOrdering::Relaxed);
                PLACE_HANDED
            } else if PROGRESSOR.load(Ordering::Relaxed) == PLACE_LENT {
                PLACE_HANDED
            } else {
                PLACE_FREE
            };
            PROGRESSOR.store(place, Ordering::Relaxed);
        }
        std::mem::forget(self);
    }
}

impl Drop for Progressing {
    /// A wait that failed: its hold has let go (see `block_until`), so the place is given up
    /// under a hold of its own. A take fails only where the lock was never made.
    fn drop(&mut self) {
        if let Ok(mut held) = Held::take(false) {
            Progressing(self.0).hand_on(&mut held);
        }
    }
}

/// The counts of the shared engine's waits so far.
pub(crate) fn waits() -> Waits {
    Waits {
        progressors: PROGRESSORS.load(StdOrdering::Relaxed),
        handed_on: HANDED_ON.load(StdOrdering::Relaxed),
        taken_over: TAKEN_OVER.load(StdOrdering::Relaxed),
        pauses: PAUSES.load(StdOrdering::Relaxed),
        pauses_woken: PAUSES_WOKEN.load(StdOrdering::Relaxed),
    }
}

/// Waits for `handle` to finish.
#[cold]
#[inline(never)]
pub(super) fn wait(handle: Handle) -> Result<Done, Cause> {
    block_until(SharedWait::new(Awaited::Request(handle)), |e| {
        e.collect(handle)
    })
}

/// A blocking receive: started, then waited for; its status goes to `received` where it
/// returns `Ok`, and a failure leaves `received` as it was.
///
/// # Safety
/// As for [`Pml::recv`].
#[cold]
#[inline(never)]
pub(super) unsafe fn recv(
    context: ContextId,
    source: SourceSel,
    tag: TagSel,
    buf: *mut u8,
    len: usize,
    received: &mut Status,
) -> Result<(), Cause> {
    // Its start wakes the paused threads as a non-blocking call does: a receive that matches
    // as it starts leaves what completes another thread's send (a synchronous send's
    // acknowledgement, in the loopback or on the wire) for a round of progress, and that
    // thread, paused, would otherwise sleep out its pause (the model check
    // `a_paused_waiter_is_woken_by_a_blocking_receive_that_matches_as_it_starts`).
    // SAFETY: the caller's guarantees, which cover the whole call, are passed on: the
    // receive finishes (or fails) before this returns.
    let started = unsafe {
        Held::take(true)?
            .engine()?
            .start_recv(context, source, tag, buf, len)
    }?;
    *received = match started {
        Started::Done { result, .. } => result.map_err(|e| Cause::from(*e))?,
        Started::Posted(handle) => {
            match block_until(SharedWait::receive(handle), |e| e.collect(handle))? {
                Done::Received(status) => status,
                Done::Sent => unreachable!("a receive completed as a send"),
            }
        }
        Started::Claimed => unreachable!("only a PML's own blocking receive claims"),
    };
    Ok(())
}

#[cfg(all(test, feature = "model-check", feature = "threads"))]
mod model;
