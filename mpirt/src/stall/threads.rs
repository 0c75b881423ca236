//! Stall reports where a rank's threads share the engine (`Serialized`, `Multiple`): each
//! thread's wait says for itself when it has had nothing move for the watch's time
//! ([`SharedWait`], in `environment::shared::block_until`), and the rank tells rsrun only once
//! every thread that uses mpirt waits so ([`Book`]).
//!
//! The rule: a thread counts once it made a call on the shared engine (`count_this_thread`,
//! at its first), until it exits; the rank is stalled while every counted thread waits in a
//! blocking call with nothing moving, and resumes as soon as one of them sees something move,
//! leaves its call, or a thread is counted anew. A thread's exit counts as a move for the
//! threads that wait (their episodes begin again): what it did last (a send to another rank)
//! may let another rank go, which says so only once it has seen it, so the rank says it is
//! stalled only after its waiting threads have again had nothing move for the watch's time
//! (told at the exit, it let rsrun call a slow job stuck). A thread that computes between calls
//! keeps its rank from being reported, since it may yet send what the others wait for; so does a
//! thread that used mpirt and now waits outside it (joining the others): a rank whose stuck
//! threads' parent had called mpirt is not reported while that parent lives. A thread that
//! never called mpirt is not counted, yet may compute what its first call will send: the rank
//! is told stalled only while no thread of the process but its waiting ones runs in the
//! kernel's view (`running`; told at once, rsrun called `threads-late`, a live job, stuck and
//! ended it). Such a thread that sleeps or reads a file between its steps is not seen running.

mod running;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use bootstrap::stall::{RankState, ThreadWait};
use pml::stall::{Awaited, AwaitedRequest, Blocked};
use pml::{Handle, MovedMark, Waiting};

use super::{installed, Watch};
use crate::backend::AnyPml;

/// How many live threads made a call on the shared engine.
static USERS: AtomicUsize = AtomicUsize::new(0);
/// How many of them exited: a wait whose episode saw this change begins it again.
static EXITS: AtomicUsize = AtomicUsize::new(0);

/// A thread counted in `USERS`, until it exits.
struct Counted;

impl Counted {
    fn new() -> Counted {
        USERS.fetch_add(1, Ordering::SeqCst);
        if let Some(watch) = installed() {
            watch.with_book(|book, watch| book.thread_counted(watch));
        }
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        USERS.fetch_sub(1, Ordering::SeqCst);
        EXITS.fetch_add(1, Ordering::SeqCst);
    }
}

std::thread_local! {
    static COUNTED: Counted = Counted::new();
}

/// Counts this thread among those that use mpirt, once (its first call on the shared engine:
/// `environment::shared` remembers that it did).
#[cold]
#[inline(never)]
pub(crate) fn count_this_thread() {
    // Made at the first access; a thread that exits meanwhile (its locals torn down) is not
    // counted again.
    let _ = COUNTED.try_with(|_| ());
}

/// Says that the rank's threads share the engine: the watch tells rsrun only once all of
/// them wait.
pub(crate) fn share_threads() {
    if let Some(watch) = installed() {
        let mut threads = watch.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.get_or_insert_with(Book::default);
    }
}

/// This thread's name for a report: its name, else its id.
pub(super) fn this_thread_s_name() -> String {
    let thread = std::thread::current();
    match thread.name() {
        Some(name) => name.to_string(),
        None => format!("{:?}", thread.id()),
    }
}

impl Watch {
    fn with_book(&self, f: impl FnOnce(&mut Book, &Watch)) {
        if let Some(book) = &mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()) {
            f(book, self);
        }
    }
}

/// Which of a rank's threads wait with nothing moving, and whether rsrun was told.
#[derive(Default)]
pub(super) struct Book {
    /// Each waiting thread's state as it said it waits, oldest first, with its id in the
    /// kernel (`running::this_thread`).
    waiting: Vec<(ThreadId, Option<u32>, RankState)>,
    /// Whether the rank was told stalled, and not yet resumed.
    told: bool,
}

impl Book {
    /// This thread waits, as `state`.
    pub(super) fn stalled(&mut self, state: RankState, watch: &Watch) {
        let me = std::thread::current().id();
        self.waiting.retain(|(thread, ..)| *thread != me);
        self.waiting.push((me, running::this_thread(), state));
        self.tell_if_all_wait(watch);
    }

    /// Something moved for this thread, or its call returned.
    pub(super) fn resumed(&mut self, watch: &Watch) {
        let me = std::thread::current().id();
        self.waiting.retain(|(thread, ..)| *thread != me);
        self.untell(watch);
    }

    /// This thread, if it said it waits, looks again whether all do.
    fn look_again(&mut self, watch: &Watch) {
        let me = std::thread::current().id();
        if self.waiting.iter().any(|(thread, ..)| *thread == me) {
            self.tell_if_all_wait(watch);
        }
    }

    /// A thread made its first call: it runs, so the rank is not stalled.
    fn thread_counted(&mut self, watch: &Watch) {
        self.untell(watch);
    }

    fn untell(&mut self, watch: &Watch) {
        if self.told {
            watch.tell_resumed();
            self.told = false;
        }
    }

    /// Tells the rank stalled where every counted thread waits (as the last of them says it
    /// waits) and no other thread of the process runs: the state of the last to say so (its
    /// queues the latest), with the others' calls. A thread that never called mpirt is not
    /// counted, yet may compute what it will send (its first call): the rank, whose waiting
    /// threads it may let go, is not stalled while it runs (`running`).
    fn tell_if_all_wait(&mut self, watch: &Watch) {
        if self.told || self.waiting.len() < USERS.load(Ordering::SeqCst) {
            return;
        }
        let waiting: Vec<u32> = self.waiting.iter().filter_map(|(_, id, _)| *id).collect();
        if running::another_thread_runs(&waiting) {
            return;
        }
        let Some(((.., last), others)) = self.waiting.split_last() else {
            return;
        };
        watch.tell(&combined(last, others.iter().map(|(.., state)| state)));
        self.told = true;
    }
}

/// `last`, the state of the thread that waited last, with the calls of the `others` and the
/// communicators they name.
fn combined<'s>(last: &RankState, others: impl Iterator<Item = &'s RankState>) -> RankState {
    let mut state = last.clone();
    for other in others {
        state.others.push(ThreadWait {
            thread: other.thread.clone(),
            call: other.call.clone(),
            awaited: other.awaited.clone(),
        });
        for comm in &other.comms {
            if state.comm(comm.context).is_none() {
                state.comms.push(comm.clone());
            }
        }
    }
    state
}

/// A blocking call's wait on the shared engine, as its stall report sees it: what it waits
/// for, and, once it has gone idle, the episode in which nothing moved.
pub(crate) struct SharedWait<'h> {
    awaited: Awaited<'h>,
    /// Whether the wait is a blocking receive's, on its request: its report names the
    /// receive, as a rank alone's does.
    receive: bool,
    episode: Option<Episode>,
}

/// A stretch of a wait with nothing moving in the engine and no counted thread exiting: since
/// `since`, what the engine had moved then (`mark`) and how many had exited (`exits`), and the
/// watch's view of it.
struct Episode {
    blocked: Blocked,
    mark: Option<MovedMark>,
    exits: usize,
    since: Instant,
    /// When, in the episode, to look again whether the rank is stalled (`RETRY`).
    retry_at: Duration,
}

/// How often a waiting thread looks again whether its rank is stalled: a look that found
/// another thread running (`Book::tell_if_all_wait`) is not the last, since that thread may
/// since have blocked for good.
const RETRY: Duration = Duration::from_secs(1);

impl<'h> SharedWait<'h> {
    pub(crate) fn new(awaited: Awaited<'h>) -> SharedWait<'h> {
        SharedWait {
            awaited,
            receive: false,
            episode: None,
        }
    }

    /// The wait of a blocking receive, posted as `handle`: the selectors the report names
    /// are the request's, read only once the wait has gone idle (carried here, they cost
    /// `osu_latency_mt -t 1:1`'s rank 0 9 instructions an iteration more, callgrind; read
    /// there, none).
    pub(crate) fn receive(handle: Handle) -> SharedWait<'static> {
        SharedWait {
            awaited: Awaited::Request(handle),
            receive: true,
            episode: None,
        }
    }

    /// Before a pause or a sleep of the wait, under the engine's lock. `idle`: the wait has
    /// gone idle (it spun its budget out with nothing moving, or its last pause ended with
    /// no waker); an episode that began goes on until something moves in the engine or a
    /// counted thread exits, which ends it (saying resumed where it was told). Nothing is kept
    /// before the wait goes idle, so that a wait woken for each message pays nothing more.
    pub(crate) fn idle(&mut self, engine: &AnyPml, idle: bool) {
        if self.episode.as_ref().is_some_and(|episode| {
            engine.moved_since(episode.mark) || episode.exits != EXITS.load(Ordering::SeqCst)
        }) {
            self.episode = None;
        }
        if !idle && self.episode.is_none() {
            return;
        }
        let episode = self.episode.get_or_insert_with(|| Episode {
            blocked: Blocked::new(),
            mark: engine.moved_mark(),
            exits: EXITS.load(Ordering::SeqCst),
            since: Instant::now(),
            retry_at: RETRY,
        });
        let (awaited, receive) = (self.awaited, self.receive);
        let idle = episode.since.elapsed();
        if idle >= episode.retry_at {
            episode.retry_at = idle + RETRY;
            if let Some(watch) = installed() {
                watch.with_book(|book, watch| book.look_again(watch));
            }
        }
        episode.blocked.idle(idle, || {
            let mut queues = engine.queues(awaited);
            // The receive is the call, not a wait on its request.
            if let (true, Some(&[AwaitedRequest::Receive(selectors)])) =
                (receive, queues.awaited.as_deref())
            {
                queues.claim = Some(selectors);
                queues.awaited = None;
            }
            queues
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootstrap::stall::{Call, Comm, Peer};

    fn state(thread: &str, context: u32, tag: i32) -> RankState {
        RankState {
            rank: 0,
            host: "h".into(),
            idle_ms: 1000,
            call: Call {
                op: "receive".into(),
                location: format!("src/main.rs:{tag}:9"),
                context: Some(context),
                peer: Peer::From(1),
                tag: Some(tag),
                bytes: Some(8),
                step: None,
                collective: false,
            },
            posted: Vec::new(),
            unexpected: Vec::new(),
            sends: Vec::new(),
            left_out: 0,
            comms: vec![Comm {
                context,
                name: format!("comm {context}"),
                ranks: vec![0, 1],
            }],
            awaited: None,
            entered: Vec::new(),
            thread: thread.into(),
            others: Vec::new(),
        }
    }

    #[test]
    fn the_combined_state_names_every_thread_s_call_and_communicator() {
        let first = state("worker-1", 0, 41);
        let last = state("worker-2", 3, 42);
        let both = combined(&last, [&first].into_iter());
        assert_eq!(both.thread, "worker-2");
        assert_eq!(both.call.tag, Some(42));
        assert_eq!(both.others.len(), 1);
        assert_eq!(both.others[0].thread, "worker-1");
        assert_eq!(both.others[0].call, first.call);
        let contexts: Vec<u32> = both.comms.iter().map(|c| c.context).collect();
        assert_eq!(contexts, [3, 0]);
    }
}
