//! What this rank is blocked in, kept always and cheaply, and said when a wait has had
//! nothing move for a while: to rsrun, which gathers every rank's state and diagnoses the
//! job (`rsrun --stall-timeout`, `kill -USR1`), or on stderr where no rsrun gathers it
//! (`MPIRT_STALL_TIMEOUT` under another launcher).
//!
//! The public blocking calls are `#[track_caller]` and note where they were called from
//! (`at`: one store of a pointer), and those off the 8-byte message's path note the whole
//! call (`enter`, `collective`). Everything else is read only when the PML's waiting loop
//! has slept with nothing moving (`pml::stall`): the PML's queues, the communicators'
//! names and members, and this thread's notes, which are the thread's own, so a wait reads
//! the call that it waits in.
//!
//! Where a rank's threads share the engine (`Serialized`, `Multiple`), each thread that waits
//! with nothing moving says so (`SharedWait`, in the shared engine's waits), and the rank
//! tells rsrun only once every thread that uses mpirt waits so (`threads`): one of them that
//! computes may yet send what the others wait for.

mod threads;

use std::cell::Cell;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bootstrap::stall::{
    Awaited, Call as StateCall, Comm, Entered, Envelope, Peer, PendingSend, RankState, StallLine,
};
use pml::stall::{AwaitedRequest, QueuedSend, Queues, Selectors, StallWatch};
use pml::{SourceSel, TagSel};

pub(crate) use threads::{count_this_thread, share_threads, SharedWait};

/// A blocking call, as noted on entry.
#[derive(Clone, Copy)]
pub(crate) struct Call {
    pub op: &'static str,
    pub location: &'static Location<'static>,
    /// `None` for a wait on requests, which may be on several communicators.
    pub context: Option<u32>,
    pub peer: Peer,
    pub tag: Option<i32>,
    pub bytes: Option<usize>,
}

impl Call {
    /// A call that waits for requests, whose queues say for what.
    #[track_caller]
    pub(crate) fn waiting(op: &'static str) -> Call {
        Call {
            op,
            location: Location::caller(),
            context: None,
            peer: Peer::None,
            tag: None,
            bytes: None,
        }
    }

    /// A collective on the communicator with context `context`, rooted at world rank
    /// `root` if rooted. The root's and the other ranks' calls (`reduce_into_root`,
    /// `reduce_into`) are one collective, noted by its kind, for rsrun to see every rank
    /// of it.
    #[track_caller]
    pub(crate) fn collective(op: &'static str, context: u32, root: Option<u32>) -> Call {
        Call {
            op: op.strip_suffix("_root").unwrap_or(op),
            location: Location::caller(),
            context: Some(context),
            peer: root.map_or(Peer::None, Peer::Root),
            tag: None,
            bytes: None,
        }
    }
}

thread_local! {
    /// Where the last public blocking call was made.
    static LOCATION: Cell<Option<&'static Location<'static>>> = const { Cell::new(None) };
    /// The last blocking call noted in full; it is the one waiting if `LOCATION` is its.
    static CALL: Cell<Option<Call>> = const { Cell::new(None) };
    /// The collective this thread is in, while it is in one.
    static COLLECTIVE: Cell<Option<Call>> = const { Cell::new(None) };
}

/// Notes where a blocking call on the message path was made: one store.
#[inline(always)]
pub(crate) fn at(location: &'static Location<'static>) {
    LOCATION.set(Some(location));
}

/// Notes a blocking call off the message path in full.
pub(crate) fn enter(call: Call) {
    LOCATION.set(Some(call.location));
    CALL.set(Some(call));
}

/// The collective this thread is in, until the guard drops; whether this guard noted it.
pub(crate) struct InCollective(bool);

/// Notes that this thread entered collective `call` (a guard: the note ends with it),
/// unless it is in one already: a collective that runs others as its steps (a barrier
/// that first sets up its shared area) is the one the user called, and the one `count`,
/// its communicator's count of collective calls entered, counts. The collective is also
/// where this thread now is: the point-to-point call noted before it is over.
pub(crate) fn collective(call: Call, count: Option<&EnteredCount>) -> InCollective {
    let outer = COLLECTIVE.get().is_none();
    if outer {
        if let Some(count) = count {
            count.one_more();
        }
        COLLECTIVE.set(Some(call));
        LOCATION.set(Some(call.location));
        CALL.set(None);
    }
    InCollective(outer)
}

impl Drop for InCollective {
    fn drop(&mut self) {
        if self.0 {
            let _ = COLLECTIVE.try_with(|c| c.set(None));
        }
    }
}

/// How many collective calls this rank entered on one communicator, which its handles and
/// the registry of communicators share: every member calls a communicator's collectives in
/// the same order, so rsrun tells a member that never entered the call others wait in
/// from one that passed it by comparing these.
#[derive(Clone, Debug, Default)]
pub(crate) struct EnteredCount(Arc<AtomicU64>);

impl EnteredCount {
    /// One more call entered: a load and a store, not a locked add, since only the thread
    /// that holds the communicator calls its collectives (a handle is not `Send`, a thread's
    /// view takes none), while the watch may read it from another.
    #[inline]
    fn one_more(&self) {
        let calls = self.0.load(Ordering::Relaxed);
        self.0.store(calls + 1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Each communicator's name, members' world ranks and collective calls entered, by context
/// id, for the state to name them (a context id reused by a later communicator is noted
/// again, its count from 0).
static COMMS: Mutex<Option<HashMap<u32, Registered>>> = Mutex::new(None);

/// A communicator's name, its members' world ranks and its count of collective calls.
type Registered = (String, Vec<u32>, EnteredCount);

/// Notes a communicator as it is made; its count of collective calls, for its handles.
pub(crate) fn remember_comm(context: u32, name: &str, group: &[u32]) -> EnteredCount {
    let mut comms = COMMS.lock().unwrap_or_else(|e| e.into_inner());
    let count = EnteredCount::default();
    comms
        .get_or_insert_with(HashMap::new)
        .insert(context, (name.to_string(), group.to_vec(), count.clone()));
    count
}

/// Notes a communicator's new name.
pub(crate) fn rename_comm(context: u32, name: &str) {
    let mut comms = COMMS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((old, _, _)) = comms.as_mut().and_then(|c| c.get_mut(&context)) {
        *old = name.to_string();
    }
}

/// How long a wait sees nothing move before this rank tells rsrun, which decides for the
/// job (`--stall-timeout`) and prints these on `kill -USR1`.
const TELL_RSRUN_AFTER: Duration = Duration::from_secs(1);

/// Installs this rank's watch: towards rsrun where it started the rank (`line`), else on
/// stderr if `MPIRT_STALL_TIMEOUT` asks for it. A timeout that is not a positive number of
/// seconds is an error naming the variable.
pub(crate) fn install(rank: u32, line: Option<StallLine>) -> Result<(), String> {
    let timeout = match std::env::var(bootstrap::vars::STALL_TIMEOUT) {
        Ok(text) => Some(
            bootstrap::vars::parse_stall_timeout(&text)
                .map_err(|e| format!("{}: {e}", bootstrap::vars::STALL_TIMEOUT))?,
        ),
        Err(_) => None,
    };
    let (after, sink) = match (line, timeout) {
        (Some(line), t) => (
            t.map_or(TELL_RSRUN_AFTER, |t| t.min(TELL_RSRUN_AFTER)),
            Sink::Rsrun(line),
        ),
        (None, Some(t)) => (t, Sink::Stderr),
        (None, None) => return Ok(()),
    };
    let host = pml::transport::hostname();
    let watch = Arc::new(Watch {
        rank,
        host,
        after,
        sink: Mutex::new(sink),
        threads: Mutex::new(None),
    });
    *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = Some(watch.clone());
    pml::stall::set_watch(Some(watch));
    Ok(())
}

/// Removes the watch (at finalize: rsrun's connection closes with the bootstrap's).
pub(crate) fn uninstall() {
    pml::stall::set_watch(None);
    *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The watch `install` made, for the count of the threads that use mpirt (`threads`), which
/// changes outside any wait.
static INSTALLED: RwLock<Option<Arc<Watch>>> = RwLock::new(None);

fn installed() -> Option<Arc<Watch>> {
    INSTALLED.read().unwrap_or_else(|e| e.into_inner()).clone()
}

enum Sink {
    Rsrun(StallLine),
    Stderr,
}

struct Watch {
    rank: u32,
    host: String,
    after: Duration,
    sink: Mutex<Sink>,
    /// Where the rank's threads share the engine (`share_threads`), which of them wait: the
    /// rank is told stalled only once all that use mpirt do.
    threads: Mutex<Option<threads::Book>>,
}

impl StallWatch for Watch {
    fn after(&self) -> Duration {
        self.after
    }

    fn stalled(&self, idle: Duration, queues: &Queues) {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let state = self.state(idle, queues, threads.is_some());
        match &mut *threads {
            Some(book) => book.stalled(state, self),
            None => self.tell(&state),
        }
    }

    fn resumed(&self) {
        match &mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(book) => book.resumed(self),
            None => self.tell_resumed(),
        }
    }
}

impl Watch {
    /// Says that the rank waits, as `state`.
    fn tell(&self, state: &RankState) {
        match &mut *self.sink.lock().unwrap_or_else(|e| e.into_inner()) {
            // A failed write means rsrun is gone; the job ends anyway.
            Sink::Rsrun(line) => drop(line.stalled(state)),
            Sink::Stderr => bootstrap::output::say(&format!("mpirt: stalled: {}", state.line())),
        }
    }

    /// Says that something moved since `tell`.
    fn tell_resumed(&self) {
        if let Sink::Rsrun(line) = &mut *self.sink.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = line.resumed();
        }
    }

    /// This rank's state: the call this thread waits in and the PML's queues, in world
    /// ranks, and, `shared` (the rank's threads share the engine), this thread's name. Reads
    /// the communicators it names under the lock, copying only those.
    fn state(&self, idle: Duration, queues: &Queues, shared: bool) -> RankState {
        let comms = COMMS.lock().unwrap_or_else(|e| e.into_inner());
        let comms = comms.as_ref();
        let world = |context: u32, rank: u32| {
            comms
                .and_then(|c| c.get(&context))
                .and_then(|(_, group, _)| group.get(rank as usize).copied())
                .unwrap_or(rank)
        };
        let envelope = |s: &Selectors| Envelope {
            context: s.context,
            source: match s.source {
                SourceSel::Rank(r) => Some(world(s.context, r)),
                SourceSel::Any => None,
            },
            tag: match s.tag {
                TagSel::Tag(t) => Some(t),
                TagSel::Any => None,
            },
            bytes: s.bytes as u64,
        };
        let location = LOCATION.get();
        let noted = CALL.get().filter(|c| Some(c.location) == location);
        let mut call = match (queues.claim, noted) {
            (Some(claim), _) => StateCall {
                op: "receive".into(),
                location: location.map(ToString::to_string).unwrap_or_default(),
                context: Some(claim.context),
                peer: match claim.source {
                    SourceSel::Rank(r) => Peer::From(world(claim.context, r)),
                    SourceSel::Any => Peer::FromAny,
                },
                tag: envelope(&claim).tag,
                bytes: Some(claim.bytes as u64),
                step: None,
                collective: false,
            },
            (None, Some(c)) => state_call(c, false),
            // A standard send or a wait on requests, noted by location only: a wait on one
            // send is the send; otherwise the requests it waits for say.
            (None, None) => {
                let single = match queues.awaited.as_deref() {
                    Some([AwaitedRequest::Send(send)]) => Some(send),
                    _ => None,
                };
                StateCall {
                    op: if single.is_some() { "send" } else { "wait" }.into(),
                    location: location.map(ToString::to_string).unwrap_or_default(),
                    context: single.map(|s| s.context),
                    peer: single.map_or(Peer::None, |s| Peer::To(s.peer)),
                    tag: single.map(|s| s.tag),
                    bytes: single.map(|s| s.bytes as u64),
                    step: None,
                    collective: false,
                }
            }
        };
        if let Some(coll) = COLLECTIVE.get() {
            let inner = call.clone();
            call = state_call(coll, true);
            call.step = Some(if matches!(inner.peer, Peer::None) {
                "waiting for the other ranks".to_string()
            } else {
                inner_state(&inner)
            });
        }
        let mut state = RankState {
            rank: self.rank,
            host: self.host.clone(),
            idle_ms: idle.as_millis() as u64,
            call,
            posted: queues.posted.iter().map(envelope).collect(),
            unexpected: queues.unexpected.iter().map(envelope).collect(),
            sends: queues.sends.iter().map(pending_send).collect(),
            left_out: queues.left_out as u64,
            comms: Vec::new(),
            awaited: queues.awaited.as_ref().map(|awaited| {
                awaited
                    .iter()
                    .map(|a| match a {
                        AwaitedRequest::Receive(r) => Awaited::Receive(envelope(r)),
                        AwaitedRequest::Send(s) => Awaited::Send(pending_send(s)),
                    })
                    .collect()
            }),
            entered: comms
                .into_iter()
                .flatten()
                .map(|(&context, (_, _, count))| Entered {
                    context,
                    calls: count.get(),
                })
                .collect(),
            thread: if shared {
                threads::this_thread_s_name()
            } else {
                String::new()
            },
            others: Vec::new(),
        };
        let mut contexts: Vec<u32> = (state.call.context.into_iter())
            .chain(state.posted.iter().map(|e| e.context))
            .chain(state.unexpected.iter().map(|e| e.context))
            .chain(state.sends.iter().map(|s| s.context))
            .collect();
        contexts.sort_unstable();
        contexts.dedup();
        state.comms = contexts
            .into_iter()
            .filter_map(|context| {
                comms?.get(&context).map(|(name, ranks, _)| Comm {
                    context,
                    name: name.clone(),
                    ranks: ranks.clone(),
                })
            })
            .collect();
        state
    }
}

/// The send as rsrun's diagnosis sees it: under its tag's match key, which the receives that
/// take it wait on (a collective's sends carry a mark there that matching ignores, and rsrun
/// compares tags whole: a marked send would otherwise never count as in flight).
fn pending_send(s: &QueuedSend) -> PendingSend {
    PendingSend {
        context: s.context,
        peer: s.peer,
        tag: pml::match_key(s.tag),
        bytes: s.bytes as u64,
        waits_for: s.waits_for.to_string(),
    }
}

fn state_call(c: Call, collective: bool) -> StateCall {
    StateCall {
        op: c.op.into(),
        location: c.location.to_string(),
        context: c.context,
        peer: c.peer,
        tag: c.tag,
        bytes: c.bytes.map(|b| b as u64),
        step: None,
        collective,
    }
}

/// A point-to-point wait inside a collective, in words.
fn inner_state(inner: &StateCall) -> String {
    let peer = match inner.peer {
        Peer::From(r) => format!(" from rank {r}"),
        Peer::To(r) => format!(" to rank {r}"),
        Peer::FromAny => " from any rank".into(),
        Peer::Root(r) => format!(" with root {r}"),
        Peer::None => String::new(),
    };
    format!("{}{peer}", inner.op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_send_is_reported_under_the_tag_its_receive_waits_on() {
        let send = |tag| QueuedSend {
            context: 3,
            peer: 1,
            tag,
            bytes: 8,
            waits_for: "a matching receive",
        };
        assert_eq!(pending_send(&send(-24 + 5)).tag, -24);
        assert_eq!(pending_send(&send(-5)).tag, -5);
        assert_eq!(pending_send(&send(7)).tag, 7);
    }
}
