//! What a rank waits for once a wait has slept with nothing moving: its queues, as the PML
//! holds them ([`Queues`]), handed to the watch the layer above installed ([`StallWatch`]:
//! mpirt's, which adds the call and tells rsrun). Only the waiting loop's sleeping phase
//! calls in here ([`Blocked`]), so a message that arrives while the rank spins costs nothing
//! more: the bookkeeping lives on the path that already blocks.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::envelope::{ContextId, Rank, SourceSel, Tag, TagSel};
use crate::requests::Handle;

/// A receive's selectors: a posted receive, the blocking receive's claim, or (all fixed) an
/// arrived message no receive took yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selectors {
    pub context: ContextId,
    /// The source's rank in the communicator.
    pub source: SourceSel,
    pub tag: TagSel,
    /// The message's length, or a receive's capacity (its buffer's length).
    pub bytes: usize,
}

/// A send that waits for its receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuedSend {
    pub context: ContextId,
    /// The receiver's world rank.
    pub peer: Rank,
    pub tag: Tag,
    pub bytes: usize,
    /// What it waits for, in words.
    pub waits_for: &'static str,
}

/// A request that a wait on requests waits for and that waits for a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AwaitedRequest {
    /// A receive no message matched yet.
    Receive(Selectors),
    /// A send its receiver has not finished.
    Send(QueuedSend),
}

/// What a wait waits for, as the waiting loop passes it to [`Waiting::queues`](crate::Waiting::queues).
#[derive(Clone, Copy, Debug)]
pub enum Awaited<'h> {
    /// Something only the PML's state says: a blocking receive's message (its claim), a
    /// probe's, a flush, a window's.
    State,
    /// One request (`wait`).
    Request(Handle),
    /// Any or all of these requests.
    Requests(&'h [Handle]),
}

impl Awaited<'_> {
    /// The requests waited on, in a wait on requests.
    pub fn handles(&self) -> Option<&[Handle]> {
        match self {
            Awaited::State => None,
            Awaited::Request(h) => Some(std::slice::from_ref(h)),
            Awaited::Requests(hs) => Some(hs),
        }
    }
}

/// What a PML's queues hold while a rank waits: at most [`SHOWN`] entries of each list
/// (unexpected messages oldest first), with a count of those left out, so that a wait
/// with long queues neither copies them nor sends them all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queues {
    /// The blocking receive that waits without a request, if one does.
    pub claim: Option<Selectors>,
    /// In a wait on requests, those of them that wait for a peer (most [`SHOWN`]); `None`
    /// in a wait for something else. The report names these, not every posted receive, as
    /// what the rank waits for.
    pub awaited: Option<Vec<AwaitedRequest>>,
    pub posted: Vec<Selectors>,
    pub unexpected: Vec<Selectors>,
    pub sends: Vec<QueuedSend>,
    /// How many entries the lists left out.
    pub left_out: usize,
}

/// How many entries of each list [`Queues`] holds.
pub const SHOWN: usize = 64;

impl Selectors {
    /// A receive's selectors and its buffer's length.
    pub fn receive(
        context: ContextId,
        source: SourceSel,
        tag: TagSel,
        capacity: usize,
    ) -> Selectors {
        Selectors {
            context,
            source,
            tag,
            bytes: capacity,
        }
    }
}

/// A receive buffer's length, which the queues show as a posted receive's size.
pub trait Capacity {
    fn capacity(&self) -> usize;
}

impl Queues {
    /// Notes the awaited list of a wait for `awaited`: what `entry` says of each request
    /// waited on, the first [`SHOWN`] that wait for a peer, the others counted left out (the
    /// report must not take a shortened list for the whole of what the rank waits for).
    pub fn note_awaited(
        &mut self,
        awaited: Awaited<'_>,
        mut entry: impl FnMut(Handle) -> Option<AwaitedRequest>,
    ) {
        let Some(handles) = awaited.handles() else {
            return;
        };
        let mut list = Vec::new();
        for request in handles.iter().filter_map(|&h| entry(h)) {
            Queues::add(&mut list, &mut self.left_out, request);
        }
        self.awaited = Some(list);
    }

    /// Lists a request that waits for a peer among the posted receives or the sends.
    pub fn add_request(&mut self, request: AwaitedRequest) {
        match request {
            AwaitedRequest::Receive(receive) => {
                Queues::add(&mut self.posted, &mut self.left_out, receive)
            }
            AwaitedRequest::Send(send) => Queues::add(&mut self.sends, &mut self.left_out, send),
        }
    }

    /// Adds `entry` to `list` if it has room, else counts it left out.
    pub fn add<T>(list: &mut Vec<T>, left_out: &mut usize, entry: T) {
        if list.len() < SHOWN {
            list.push(entry);
        } else {
            *left_out += 1;
        }
    }
}

/// The layer above's side: told when a wait has had nothing move for `after`, and when
/// something moved again (or the call returned) after that.
pub trait StallWatch: Send + Sync {
    /// How long a wait sees nothing move before `stalled`.
    fn after(&self) -> Duration;
    /// The wait has seen nothing move for `idle`; `queues` is what the PML holds.
    fn stalled(&self, idle: Duration, queues: &Queues);
    /// Something moved, or the call returned, since `stalled`.
    fn resumed(&self);
}

static WATCH: RwLock<Option<Arc<dyn StallWatch>>> = RwLock::new(None);

/// Installs `watch` for every wait of this process (`None` removes it).
pub fn set_watch(watch: Option<Arc<dyn StallWatch>>) {
    *WATCH.write().unwrap_or_else(|e| e.into_inner()) = watch;
}

/// One wait's sleeping phase, as the watch sees it: says `stalled` once the idle time
/// reaches the watch's `after`, and `resumed` when the idle clock restarts (something
/// moved) or the wait ends after that.
pub struct Blocked {
    watch: Option<Arc<dyn StallWatch>>,
    reported: bool,
    last_idle: Duration,
}

impl Blocked {
    pub fn new() -> Blocked {
        Blocked {
            watch: WATCH.read().unwrap_or_else(|e| e.into_inner()).clone(),
            reported: false,
            last_idle: Duration::ZERO,
        }
    }

    /// Before each sleep: `idle` since the last move; `queues` takes the PML's queues, only
    /// when they are to be told.
    pub fn idle(&mut self, idle: Duration, queues: impl FnOnce() -> Queues) {
        let Some(watch) = &self.watch else { return };
        if idle < self.last_idle && self.reported {
            watch.resumed();
            self.reported = false;
        }
        self.last_idle = idle;
        if !self.reported && idle >= watch.after() {
            watch.stalled(idle, &queues());
            self.reported = true;
        }
    }

    /// Something moved: says `resumed` at once if the wait was told stalled, so that a wait
    /// whose traffic now flows without a pause (no sleep, no return for a while) does not
    /// still count as stalled.
    #[inline]
    pub fn moved(&mut self) {
        if self.reported {
            self.resume();
        }
    }

    #[cold]
    fn resume(&mut self) {
        if let Some(watch) = &self.watch {
            watch.resumed();
        }
        self.reported = false;
        self.last_idle = Duration::ZERO;
    }
}

impl Default for Blocked {
    fn default() -> Self {
        Blocked::new()
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        if let (true, Some(watch)) = (self.reported, &self.watch) {
            watch.resumed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);

    impl StallWatch for Seen {
        fn after(&self) -> Duration {
            Duration::from_millis(10)
        }
        fn stalled(&self, idle: Duration, queues: &Queues) {
            let claim = queues.claim.map(|c| c.tag);
            self.0
                .lock()
                .unwrap()
                .push(format!("stalled {} {claim:?}", idle.as_millis()));
        }
        fn resumed(&self) {
            self.0.lock().unwrap().push("resumed".into());
        }
    }

    #[test]
    fn awaited_requests_past_those_shown_are_counted_left_out() {
        let handles: Vec<Handle> = (0..SHOWN as u64 + 3).map(Handle::from_wire).collect();
        let mut queues = Queues::default();
        queues.note_awaited(Awaited::Requests(&handles), |h| {
            Some(AwaitedRequest::Send(QueuedSend {
                context: 0,
                peer: h.to_wire() as Rank,
                tag: 0,
                bytes: 0,
                waits_for: "its receiver",
            }))
        });
        assert_eq!(queues.awaited.as_ref().map(Vec::len), Some(SHOWN));
        assert_eq!(queues.left_out, 3);
        // A wait on the state alone has no awaited list.
        let mut queues = Queues::default();
        queues.note_awaited(Awaited::State, |_| unreachable!("no requests"));
        assert_eq!((queues.awaited, queues.left_out), (None, 0));
    }

    #[test]
    fn a_move_after_a_stall_says_resumed_at_once() {
        let seen = Arc::new(Seen::default());
        let mut blocked = Blocked {
            watch: Some(seen.clone()),
            reported: false,
            last_idle: Duration::ZERO,
        };
        blocked.moved();
        blocked.idle(Duration::from_millis(12), Queues::default);
        blocked.moved();
        assert_eq!(*seen.0.lock().unwrap(), ["stalled 12 None", "resumed"]);
        // Nothing more to say when the wait ends: the resume was said.
        drop(blocked);
        assert_eq!(seen.0.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_wait_says_it_stalled_once_and_resumed_when_something_moved_and_when_it_ended() {
        let seen = Arc::new(Seen::default());
        let queues = || Queues {
            claim: Some(Selectors {
                context: 0,
                source: SourceSel::Rank(1),
                tag: TagSel::Tag(3),
                bytes: 0,
            }),
            ..Queues::default()
        };
        let mut blocked = Blocked {
            watch: Some(seen.clone()),
            reported: false,
            last_idle: Duration::ZERO,
        };
        blocked.idle(Duration::from_millis(5), queues);
        blocked.idle(Duration::from_millis(12), queues);
        blocked.idle(Duration::from_millis(14), queues);
        // Something moved: the idle clock restarted.
        blocked.idle(Duration::from_millis(1), queues);
        blocked.idle(Duration::from_millis(11), queues);
        drop(blocked);
        assert_eq!(
            *seen.0.lock().unwrap(),
            [
                "stalled 12 Some(Tag(3))",
                "resumed",
                "stalled 11 Some(Tag(3))",
                "resumed"
            ]
        );
    }
}
