//! What a rank that waits with nothing moving tells its launcher: the call it waits in and
//! what its queues hold ([`RankState`]), in the KVS wire format (a rank sends it in
//! [`Request::Stalled`], rsrun decodes it), and the line a
//! person reads for it ([`RankState::line`]), the same in rsrun's report and in the lines a
//! rank prints itself where no rsrun gathers them. Ranks are world ranks throughout.

use std::io;
use std::net::TcpStream;

use crate::wire::{self, put_bytes, Reader, Request};

/// Who the call waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Nobody in particular (a wait on several requests: see the queues).
    None,
    /// A send's destination.
    To(u32),
    /// A receive's or probe's source.
    From(u32),
    /// A receive or probe from any source of its communicator.
    FromAny,
    /// A rooted collective's root.
    Root(u32),
}

/// A communicator the state names: its context id, its name and its members' world ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comm {
    pub context: u32,
    pub name: String,
    pub ranks: Vec<u32>,
}

/// The call a rank waits in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The operation, as the API names it: `receive`, `synchronous_send`, `barrier`, ...
    pub op: String,
    /// The caller's source line (`src/main.rs:42:5`), empty where unknown.
    pub location: String,
    /// The communicator's context id; `None` for a wait on requests, which may be on
    /// several.
    pub context: Option<u32>,
    pub peer: Peer,
    /// `None` for any tag, or a call with no tag (a collective).
    pub tag: Option<i32>,
    pub bytes: Option<u64>,
    /// Inside a collective, the point-to-point step it waits in.
    pub step: Option<String>,
    /// Whether the call is a collective: every member of its communicator must enter it.
    pub collective: bool,
}

/// A receive posted and not matched, or a message arrived and not received (its source and
/// tag then always set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub context: u32,
    /// `None`: any source.
    pub source: Option<u32>,
    /// `None`: any tag.
    pub tag: Option<i32>,
    pub bytes: u64,
}

/// A send that waits for its receiver: to match it, to acknowledge it (synchronous), or to
/// read its data (rendezvous).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingSend {
    pub context: u32,
    pub peer: u32,
    pub tag: i32,
    pub bytes: u64,
    /// What the send waits for, in words: "a matching receive", "the data to be read".
    pub waits_for: String,
}

/// A request that a wait on requests waits for, and that waits for a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Awaited {
    /// A receive no message matched yet.
    Receive(Envelope),
    /// A send its receiver has not finished.
    Send(PendingSend),
}

/// How many collective calls a rank has entered on one communicator: every member calls a
/// communicator's collectives in the same order, so a member whose count is below the call
/// another waits in never entered that call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entered {
    pub context: u32,
    pub calls: u64,
}

/// Another thread of a rank that waits, at `Serialized` and `Multiple`: the thread's name
/// (its id where it has none), the call it waits in, and, in a wait on requests, those it waits
/// for that wait for a peer (as [`RankState::awaited`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadWait {
    pub thread: String,
    pub call: Call,
    pub awaited: Option<Vec<Awaited>>,
}

/// Everything one stalled rank says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankState {
    pub rank: u32,
    pub host: String,
    /// How long nothing moved, in milliseconds, when the state was taken.
    pub idle_ms: u64,
    pub call: Call,
    pub posted: Vec<Envelope>,
    pub unexpected: Vec<Envelope>,
    pub sends: Vec<PendingSend>,
    /// How many entries of the queues the rank left out, to keep its message small however
    /// long they grew.
    pub left_out: u64,
    /// The communicators the call and the queues name.
    pub comms: Vec<Comm>,
    /// In a wait on requests (`wait`, `wait_all`, `wait_any`, a blocking send), those it
    /// waits for that wait for a peer; `None` in a wait for something else.
    pub awaited: Option<Vec<Awaited>>,
    /// The collective calls the rank has entered on each communicator it is a member of.
    pub entered: Vec<Entered>,
    /// The thread that waits in `call`, by name (its id where it has none), where the rank's
    /// threads share the engine (`Serialized`, `Multiple`); empty where the rank has one
    /// thread that calls mpirt.
    pub thread: String,
    /// The rank's other threads that use mpirt, each waiting in its call: a rank whose threads
    /// share the engine says it waits only once all of them wait.
    pub others: Vec<ThreadWait>,
}

impl RankState {
    /// How many collective calls the rank has entered on the communicator with context
    /// `context`, if it is a member.
    pub fn entered(&self, context: u32) -> Option<u64> {
        self.entered
            .iter()
            .find(|e| e.context == context)
            .map(|e| e.calls)
    }

    /// The communicator with context `context`, if the state names it.
    pub fn comm(&self, context: u32) -> Option<&Comm> {
        self.comms.iter().find(|c| c.context == context)
    }

    /// A communicator's name for a person: its name, else its context id.
    pub fn comm_name(&self, context: u32) -> String {
        match self.comm(context) {
            Some(c) if !c.name.is_empty() => c.name.clone(),
            _ => format!("communicator with context {context}"),
        }
    }

    /// What the rank waits in, as one clause: "synchronous_send to rank 1 (tag 3,
    /// src/main.rs:42:5)", with " [thread 'worker-1']" where the rank's threads share the
    /// engine.
    pub fn waits_in(&self) -> String {
        self.call.in_words(&self.thread)
    }

    /// The rank's line in a report: who, where, what it waits in, on which communicator,
    /// for how long, what its other threads wait in, and what its queues hold.
    pub fn line(&self) -> String {
        let mut out = format!(
            "rank {} on {} waits in {}",
            self.rank,
            self.host,
            self.wait_in_words(&self.call, &self.thread, self.awaited.as_deref())
        );
        out += &format!(", nothing moved for {:.1} s", self.idle_ms as f64 / 1000.0);
        if !self.others.is_empty() {
            let others: Vec<String> = self
                .others
                .iter()
                .map(|t| self.wait_in_words(&t.call, &t.thread, t.awaited.as_deref()))
                .collect();
            let threads = if others.len() == 1 {
                "its other thread waits in"
            } else {
                "its other threads wait in"
            };
            out += &format!("; {threads} {}", others.join("; and in "));
        }
        let queued = self.queues_in_words();
        if !queued.is_empty() {
            out += &format!("; {queued}");
        }
        out
    }

    /// One thread's wait, in words: its call, the communicator, the size, the step of a
    /// collective, and the requests a wait on requests waits for.
    fn wait_in_words(&self, call: &Call, thread: &str, awaited: Option<&[Awaited]>) -> String {
        let mut out = call.in_words(thread);
        if let Some(context) = call.context {
            out += &format!(" on {}", self.comm_name(context));
        }
        if let Some(bytes) = call.bytes {
            out += &format!(", {bytes} bytes");
        }
        if let Some(step) = &call.step {
            out += &format!(", at its step {step}");
        }
        if let Some(awaited) = awaited.filter(|a| !a.is_empty()) {
            let all: Vec<String> = awaited
                .iter()
                .map(|a| match a {
                    Awaited::Receive(e) => format!("its receive {}", self.envelope_in_words(e)),
                    Awaited::Send(s) => format!("its send {}", self.send_in_words(s)),
                })
                .collect();
            out += &format!(", for {}", all.join(" and "));
        }
        out
    }

    /// A posted receive or an arrived message, in words: "from rank 2 tag 7 on
    /// MPI_COMM_WORLD (8 bytes)" (a receive's size is its buffer's).
    pub fn envelope_in_words(&self, e: &Envelope) -> String {
        let source = e
            .source
            .map_or("any rank".to_string(), |r| format!("rank {r}"));
        let tag = e.tag.map_or("any tag".to_string(), |t| format!("tag {t}"));
        format!(
            "from {source} {tag} on {} ({} bytes)",
            self.comm_name(e.context),
            e.bytes
        )
    }

    /// An unfinished send, in words: "to rank 0 tag 3 on MPI_COMM_WORLD (8 bytes) waiting
    /// for a matching receive".
    pub fn send_in_words(&self, s: &PendingSend) -> String {
        format!(
            "to rank {} tag {} on {} ({} bytes) waiting for {}",
            s.peer,
            s.tag,
            self.comm_name(s.context),
            s.bytes,
            s.waits_for
        )
    }

    /// The queues, in words: "posted receives: from rank 2 tag 7 on MPI_COMM_WORLD (8
    /// bytes); ...".
    pub fn queues_in_words(&self) -> String {
        let envelope = |e: &Envelope| self.envelope_in_words(e);
        let mut parts = Vec::new();
        if !self.posted.is_empty() {
            let all: Vec<String> = self.posted.iter().map(envelope).collect();
            parts.push(format!("posted receives: {}", all.join(", ")));
        }
        if !self.unexpected.is_empty() {
            let all: Vec<String> = self.unexpected.iter().map(envelope).collect();
            parts.push(format!("unreceived messages: {}", all.join(", ")));
        }
        if !self.sends.is_empty() {
            let all: Vec<String> = self.sends.iter().map(|s| self.send_in_words(s)).collect();
            parts.push(format!("unfinished sends: {}", all.join(", ")));
        }
        if self.left_out > 0 {
            parts.push(format!("{} more queue entries not shown", self.left_out));
        }
        parts.join("; ")
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_u32(&mut out, self.rank);
        put_bytes(&mut out, self.host.as_bytes());
        out.extend_from_slice(&self.idle_ms.to_le_bytes());
        put_call(&mut out, &self.call);
        for queue in [&self.posted, &self.unexpected] {
            put_u32(&mut out, queue.len() as u32);
            for e in queue {
                put_envelope(&mut out, e);
            }
        }
        put_u32(&mut out, self.sends.len() as u32);
        for s in &self.sends {
            put_send(&mut out, s);
        }
        out.extend_from_slice(&self.left_out.to_le_bytes());
        put_u32(&mut out, self.comms.len() as u32);
        for comm in &self.comms {
            put_u32(&mut out, comm.context);
            put_bytes(&mut out, comm.name.as_bytes());
            put_u32(&mut out, comm.ranks.len() as u32);
            for &r in &comm.ranks {
                put_u32(&mut out, r);
            }
        }
        put_awaited(&mut out, self.awaited.as_deref());
        put_u32(&mut out, self.entered.len() as u32);
        for e in &self.entered {
            put_u32(&mut out, e.context);
            out.extend_from_slice(&e.calls.to_le_bytes());
        }
        put_bytes(&mut out, self.thread.as_bytes());
        put_u32(&mut out, self.others.len() as u32);
        for t in &self.others {
            put_bytes(&mut out, t.thread.as_bytes());
            put_call(&mut out, &t.call);
            put_awaited(&mut out, t.awaited.as_deref());
        }
        out
    }

    pub fn decode(body: &[u8]) -> Result<RankState, String> {
        let mut r = Reader(body);
        let rank = r.u32()?;
        let host = r.string()?;
        let idle_ms = u64_of(&mut r)?;
        let call = call_of(&mut r)?;
        let mut queues = [Vec::new(), Vec::new()];
        for queue in &mut queues {
            for _ in 0..r.u32()? {
                queue.push(envelope_of(&mut r)?);
            }
        }
        let [posted, unexpected] = queues;
        let mut sends = Vec::new();
        for _ in 0..r.u32()? {
            sends.push(send_of(&mut r)?);
        }
        let left_out = u64_of(&mut r)?;
        let mut comms = Vec::new();
        for _ in 0..r.u32()? {
            let context = r.u32()?;
            let name = r.string()?;
            let ranks = (0..r.u32()?).map(|_| r.u32()).collect::<Result<_, _>>()?;
            comms.push(Comm {
                context,
                name,
                ranks,
            });
        }
        let awaited = awaited_of(&mut r)?;
        let mut entered = Vec::new();
        for _ in 0..r.u32()? {
            entered.push(Entered {
                context: r.u32()?,
                calls: u64_of(&mut r)?,
            });
        }
        let thread = r.string()?;
        let mut others = Vec::new();
        for _ in 0..r.u32()? {
            others.push(ThreadWait {
                thread: r.string()?,
                call: call_of(&mut r)?,
                awaited: awaited_of(&mut r)?,
            });
        }
        r.finish()?;
        Ok(RankState {
            rank,
            host,
            idle_ms,
            call,
            posted,
            unexpected,
            sends,
            left_out,
            comms,
            awaited,
            entered,
            thread,
            others,
        })
    }
}

impl Call {
    /// The call, in words: "synchronous_send to rank 1 (tag 3, src/main.rs:42:5)", and the
    /// thread that waits in it where one is named (" [thread 'worker-1']").
    pub fn in_words(&self, thread: &str) -> String {
        let c = self;
        let mut out = c.op.clone();
        match c.peer {
            Peer::None => {}
            Peer::To(r) => out += &format!(" to rank {r}"),
            Peer::From(r) => out += &format!(" from rank {r}"),
            Peer::FromAny => out += " from any rank",
            Peer::Root(r) => out += &format!(" with root {r}"),
        }
        let mut details = Vec::new();
        if !c.collective {
            details.push(match c.tag {
                Some(tag) => format!("tag {tag}"),
                None if matches!(c.peer, Peer::From(_) | Peer::FromAny) => "any tag".into(),
                None => String::new(),
            });
        }
        if !c.location.is_empty() {
            details.push(c.location.clone());
        }
        details.retain(|d| !d.is_empty());
        if !details.is_empty() {
            out += &format!(" ({})", details.join(", "));
        }
        if !thread.is_empty() {
            out += &format!(" [thread '{thread}']");
        }
        out
    }
}

fn put_call(out: &mut Vec<u8>, c: &Call) {
    put_bytes(out, c.op.as_bytes());
    put_bytes(out, c.location.as_bytes());
    put_opt(out, c.context.map(u64::from));
    let (kind, rank) = match c.peer {
        Peer::None => (0, 0),
        Peer::To(r) => (1, r),
        Peer::From(r) => (2, r),
        Peer::FromAny => (3, 0),
        Peer::Root(r) => (4, r),
    };
    out.push(kind);
    put_u32(out, rank);
    put_opt(out, c.tag.map(|t| t as u32 as u64));
    put_opt(out, c.bytes);
    put_bytes(out, c.step.as_deref().unwrap_or("").as_bytes());
    out.push(u8::from(c.step.is_some()) | u8::from(c.collective) << 1);
}

fn call_of(r: &mut Reader<'_>) -> Result<Call, String> {
    let op = r.string()?;
    let location = r.string()?;
    let context = opt_of(r)?.map(|c| c as u32);
    let kind = r.u8()?;
    let peer_rank = r.u32()?;
    let peer = match kind {
        0 => Peer::None,
        1 => Peer::To(peer_rank),
        2 => Peer::From(peer_rank),
        3 => Peer::FromAny,
        4 => Peer::Root(peer_rank),
        other => return Err(format!("unknown peer kind {other} in a rank's state")),
    };
    let tag = opt_of(r)?.map(|t| t as u32 as i32);
    let bytes = opt_of(r)?;
    let step = r.string()?;
    let flags = r.u8()?;
    Ok(Call {
        op,
        location,
        context,
        peer,
        tag,
        bytes,
        step: (flags & 1 != 0).then_some(step),
        collective: flags & 2 != 0,
    })
}

fn put_awaited(out: &mut Vec<u8>, awaited: Option<&[Awaited]>) {
    out.push(u8::from(awaited.is_some()));
    let awaited = awaited.unwrap_or_default();
    put_u32(out, awaited.len() as u32);
    for a in awaited {
        match a {
            Awaited::Receive(e) => {
                out.push(0);
                put_envelope(out, e);
            }
            Awaited::Send(s) => {
                out.push(1);
                put_send(out, s);
            }
        }
    }
}

fn awaited_of(r: &mut Reader<'_>) -> Result<Option<Vec<Awaited>>, String> {
    let on_requests = r.u8()? != 0;
    let mut awaited = Vec::new();
    for _ in 0..r.u32()? {
        awaited.push(match r.u8()? {
            0 => Awaited::Receive(envelope_of(r)?),
            1 => Awaited::Send(send_of(r)?),
            other => return Err(format!("unknown awaited request kind {other}")),
        });
    }
    Ok(on_requests.then_some(awaited))
}

fn put_envelope(out: &mut Vec<u8>, e: &Envelope) {
    put_u32(out, e.context);
    put_opt(out, e.source.map(u64::from));
    put_opt(out, e.tag.map(|t| t as u32 as u64));
    out.extend_from_slice(&e.bytes.to_le_bytes());
}

fn envelope_of(r: &mut Reader<'_>) -> Result<Envelope, String> {
    Ok(Envelope {
        context: r.u32()?,
        source: opt_of(r)?.map(|s| s as u32),
        tag: opt_of(r)?.map(|t| t as u32 as i32),
        bytes: u64_of(r)?,
    })
}

fn put_send(out: &mut Vec<u8>, s: &PendingSend) {
    put_u32(out, s.context);
    put_u32(out, s.peer);
    put_u32(out, s.tag as u32);
    out.extend_from_slice(&s.bytes.to_le_bytes());
    put_bytes(out, s.waits_for.as_bytes());
}

fn send_of(r: &mut Reader<'_>) -> Result<PendingSend, String> {
    Ok(PendingSend {
        context: r.u32()?,
        peer: r.u32()?,
        tag: r.u32()? as i32,
        bytes: u64_of(r)?,
        waits_for: r.string()?,
    })
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_opt(out: &mut Vec<u8>, v: Option<u64>) {
    out.push(u8::from(v.is_some()));
    out.extend_from_slice(&v.unwrap_or(0).to_le_bytes());
}

fn u64_of(r: &mut Reader<'_>) -> Result<u64, String> {
    let b = r.take(8)?;
    Ok(u64::from_le_bytes(b.try_into().expect("took 8 bytes")))
}

fn opt_of(r: &mut Reader<'_>) -> Result<Option<u64>, String> {
    let some = r.u8()? != 0;
    let v = u64_of(r)?;
    Ok(some.then_some(v))
}

/// A rank's own line to rsrun for stall reports: a second handle on its key-value
/// connection, which only writes one-way requests (rsrun answers them nothing), so it can
/// be used from inside a waiting loop while the bootstrap client is idle.
pub struct StallLine(TcpStream);

impl StallLine {
    pub(crate) fn new(stream: TcpStream) -> StallLine {
        StallLine(stream)
    }

    /// Tells rsrun what this rank waits for.
    pub fn stalled(&mut self, state: &RankState) -> io::Result<()> {
        let request = Request::Stalled {
            state: state.encode(),
        };
        wire::write_frame(&mut self.0, &request.encode())
    }

    /// Tells rsrun that something moved since the last `stalled`.
    pub fn resumed(&mut self) -> io::Result<()> {
        wire::write_frame(&mut self.0, &Request::Resumed.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RankState {
        RankState {
            rank: 1,
            host: "node1".into(),
            idle_ms: 2100,
            call: Call {
                op: "synchronous_send".into(),
                location: "src/main.rs:42:5".into(),
                context: Some(0),
                peer: Peer::To(0),
                tag: Some(3),
                bytes: Some(8),
                step: None,
                collective: false,
            },
            posted: vec![Envelope {
                context: 0,
                source: None,
                tag: Some(-4),
                bytes: 16,
            }],
            unexpected: vec![Envelope {
                context: 0,
                source: Some(0),
                tag: Some(3),
                bytes: 8,
            }],
            sends: vec![PendingSend {
                context: 0,
                peer: 0,
                tag: 3,
                bytes: 8,
                waits_for: "a matching receive".into(),
            }],
            left_out: 3,
            comms: vec![Comm {
                context: 0,
                name: "MPI_COMM_WORLD".into(),
                ranks: vec![0, 1],
            }],
            awaited: None,
            entered: vec![Entered {
                context: 0,
                calls: 3,
            }],
            thread: String::new(),
            others: Vec::new(),
        }
    }

    #[test]
    fn a_state_round_trips_through_the_wire() {
        let state = sample();
        assert_eq!(RankState::decode(&state.encode()), Ok(state));
    }

    #[test]
    fn a_truncated_state_is_an_error() {
        let bytes = sample().encode();
        assert!(RankState::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn the_line_names_the_call_the_peer_the_tag_and_the_source_line() {
        let line = sample().line();
        assert!(
            line.starts_with(
                "rank 1 on node1 waits in synchronous_send to rank 0 (tag 3, src/main.rs:42:5) \
                 on MPI_COMM_WORLD, 8 bytes"
            ),
            "{line}"
        );
        assert!(
            line.contains("unreceived messages: from rank 0 tag 3"),
            "{line}"
        );
        assert!(
            line.contains("posted receives: from any rank tag -4 on MPI_COMM_WORLD (16 bytes)")
                && line.ends_with("; 3 more queue entries not shown"),
            "{line}"
        );
    }

    #[test]
    fn a_wait_on_requests_names_no_communicator() {
        let mut state = sample();
        state.call = Call {
            op: "wait_all".into(),
            location: "src/main.rs:50:5".into(),
            context: None,
            peer: Peer::None,
            tag: None,
            bytes: None,
            step: None,
            collective: false,
        };
        assert_eq!(RankState::decode(&state.encode()), Ok(state.clone()));
        let line = state.line();
        assert!(
            line.starts_with("rank 1 on node1 waits in wait_all (src/main.rs:50:5), nothing moved"),
            "{line}"
        );
        // The requests it waits for, not every posted receive, are what it waits for.
        state.awaited = Some(vec![
            Awaited::Receive(Envelope {
                context: 0,
                source: Some(0),
                tag: Some(2),
                bytes: 8,
            }),
            Awaited::Send(state.sends[0].clone()),
        ]);
        assert_eq!(RankState::decode(&state.encode()), Ok(state.clone()));
        let line = state.line();
        assert!(
            line.starts_with(
                "rank 1 on node1 waits in wait_all (src/main.rs:50:5), for its receive from \
                 rank 0 tag 2 on MPI_COMM_WORLD (8 bytes) and its send to rank 0 tag 3 on \
                 MPI_COMM_WORLD (8 bytes) waiting for a matching receive, nothing moved"
            ),
            "{line}"
        );
        // A wait on requests none of which waits for a peer says so on the wire too.
        state.awaited = Some(Vec::new());
        assert_eq!(RankState::decode(&state.encode()), Ok(state));
    }

    #[test]
    fn a_state_with_threads_round_trips_and_names_every_thread_s_call() {
        let mut state = sample();
        state.thread = "worker-1".into();
        state.call = Call {
            op: "receive".into(),
            location: "src/bin/stuck.rs:88:9".into(),
            context: Some(0),
            peer: Peer::From(0),
            tag: Some(3),
            bytes: Some(8),
            step: None,
            collective: false,
        };
        state.others = vec![
            ThreadWait {
                thread: "ThreadId(3)".into(),
                call: Call {
                    op: "wait".into(),
                    location: "src/bin/stuck.rs:97:13".into(),
                    context: None,
                    peer: Peer::None,
                    tag: None,
                    bytes: None,
                    step: None,
                    collective: false,
                },
                awaited: Some(vec![Awaited::Receive(Envelope {
                    context: 0,
                    source: Some(2),
                    tag: Some(4),
                    bytes: 16,
                })]),
            },
            ThreadWait {
                thread: "main".into(),
                call: Call {
                    op: "barrier".into(),
                    location: "src/bin/stuck.rs:99:5".into(),
                    context: Some(0),
                    peer: Peer::None,
                    tag: None,
                    bytes: None,
                    step: Some("waiting for the other ranks".into()),
                    collective: true,
                },
                awaited: None,
            },
        ];
        assert_eq!(RankState::decode(&state.encode()), Ok(state.clone()));
        let line = state.line();
        assert!(
            line.starts_with(
                "rank 1 on node1 waits in receive from rank 0 (tag 3, src/bin/stuck.rs:88:9) \
                 [thread 'worker-1'] on MPI_COMM_WORLD, 8 bytes, nothing moved for 2.1 s; its \
                 other threads wait in wait (src/bin/stuck.rs:97:13) [thread 'ThreadId(3)'], \
                 for its receive from rank 2 tag 4 on MPI_COMM_WORLD (16 bytes); and in \
                 barrier (src/bin/stuck.rs:99:5) [thread 'main'] on MPI_COMM_WORLD, at its \
                 step waiting for the other ranks; posted receives:"
            ),
            "{line}"
        );
        // Cut anywhere in a thread's wait, the state is refused, not misread.
        let bytes = state.encode();
        assert!(RankState::decode(&bytes[..bytes.len() - 3]).is_err());
    }
}
