//! rsrun's book of what each rank waits for (`--stall-timeout`, `kill -USR1`): the states
//! ranks sent over their key-value connection when a wait had nothing move for a while, and
//! which ranks exited; from these, whether the whole job is stuck, and the report, for a
//! person (text) and for tools (JSON, `--stall-report-file`).

pub mod diagnosis;

use std::fmt::Write;
use std::time::{Duration, Instant};

use bootstrap::stall::{Call, Peer, RankState};

use diagnosis::{a_message_is_in_flight, diagnose, RankView};

/// What rsrun knows of every rank, and since when each has waited.
pub struct StallBook {
    ranks: Vec<RankView>,
    /// When each waiting rank last saw something move, and when each exited rank exited.
    since: Vec<Option<Instant>>,
}

impl StallBook {
    pub fn new(size: u32) -> StallBook {
        StallBook {
            ranks: vec![RankView::Running; size as usize],
            since: vec![None; size as usize],
        }
    }

    /// Rank `rank` says it waits, as `state` (which it sent `idle` after its last move).
    pub fn stalled(&mut self, rank: u32, state: RankState, now: Instant) {
        // A rank's last words can come after its exit was seen: it stays exited.
        let Some(view) = self.ranks.get_mut(rank as usize) else {
            return;
        };
        if matches!(view, RankView::Exited(_)) {
            return;
        }
        let idle = Duration::from_millis(state.idle_ms);
        self.since[rank as usize] = Some(now.checked_sub(idle).unwrap_or(now));
        *view = RankView::Waiting(Box::new(state));
    }

    /// Brings the idle time of each waiting rank's state to `now`, for a report made then
    /// (a rank says it waits once, well before the job counts as stuck).
    pub fn idle_until(&mut self, now: Instant) {
        for (view, since) in self.ranks.iter_mut().zip(&self.since) {
            if let (RankView::Waiting(state), Some(since)) = (view, since) {
                state.idle_ms = now.saturating_duration_since(*since).as_millis() as u64;
            }
        }
    }

    /// Something moved on rank `rank` since it said it waits.
    pub fn resumed(&mut self, rank: u32) {
        if let Some(view @ RankView::Waiting(_)) = self.ranks.get_mut(rank as usize) {
            *view = RankView::Running;
            self.since[rank as usize] = None;
        }
    }

    /// Rank `rank` exited at `now`. An exit is a move: the ranks that wait may have been
    /// let go by it, and their word of that may reach rsrun after the exit does (the
    /// rank's connection and the process table are read by different threads).
    pub fn exited(&mut self, rank: u32, how: String, now: Instant) {
        if let Some(view) = self.ranks.get_mut(rank as usize) {
            *view = RankView::Exited(how);
            self.since[rank as usize] = Some(now);
        }
    }

    /// When the job became stuck, if it is: every rank not exited waits, no waiting
    /// receive has a message on its way (a long copy of one says nothing until it ends),
    /// and the last of them to stop moving, or the last rank to exit, did then.
    pub fn stuck_since(&self) -> Option<Instant> {
        if a_message_is_in_flight(&self.ranks) {
            return None;
        }
        let mut last = None;
        let mut waiting = false;
        for (view, since) in self.ranks.iter().zip(&self.since) {
            match view {
                RankView::Exited(_) => last = last.max(*since),
                RankView::Waiting(_) => {
                    waiting = true;
                    last = last.max(*since);
                }
                RankView::Running => return None,
            }
        }
        last.filter(|_| waiting)
    }

    /// Why the job waits, one finding a line: for [`report`](Self::report) and
    /// [`json`](Self::json) of the same moment.
    pub fn diagnosis(&self) -> Vec<String> {
        diagnose(&self.ranks)
    }

    /// The report for a person: one line a rank, then the diagnosis `found`.
    pub fn report(&self, headline: &str, found: &[String]) -> String {
        let mut out = format!("rsrun: {headline}\n");
        for (rank, view) in self.ranks.iter().enumerate() {
            let _ = writeln!(out, "rsrun:   {}", rank_line(rank, view));
        }
        if found.is_empty() {
            out += "rsrun: diagnosis: nothing found that explains the wait\n";
        } else {
            out += "rsrun: diagnosis:\n";
            for f in found {
                let _ = writeln!(out, "rsrun:   {f}");
            }
        }
        out
    }

    /// The same as JSON.
    pub fn json(&self, headline: &str, found: &[String]) -> String {
        let mut ranks = Vec::new();
        for (rank, view) in self.ranks.iter().enumerate() {
            let mut fields = vec![format!("\"rank\":{rank}")];
            match view {
                RankView::Running => fields.push("\"status\":\"running\"".into()),
                RankView::Exited(how) => {
                    fields.push("\"status\":\"exited\"".into());
                    fields.push(format!("\"exit\":{}", quote(how)));
                }
                RankView::Waiting(s) => state_fields(s, &mut fields),
            }
            fields.push(format!("\"line\":{}", quote(&rank_line(rank, view))));
            ranks.push(format!("{{{}}}", fields.join(",")));
        }
        let found: Vec<String> = found.iter().map(|f| quote(f)).collect();
        format!(
            "{{\"headline\":{},\"ranks\":[{}],\"diagnosis\":[{}]}}\n",
            quote(headline),
            ranks.join(","),
            found.join(",")
        )
    }
}

fn rank_line(rank: usize, view: &RankView) -> String {
    match view {
        RankView::Running => {
            format!("rank {rank} is not waiting in an mpirt call (it runs, or has not waited long)")
        }
        RankView::Exited(how) => format!("rank {rank} has exited ({how})"),
        RankView::Waiting(s) => s.line(),
    }
}

fn state_fields(s: &RankState, fields: &mut Vec<String>) {
    fields.extend([
        "\"status\":\"waiting\"".to_string(),
        format!("\"host\":{}", quote(&s.host)),
        format!("\"idle_ms\":{}", s.idle_ms),
    ]);
    call_fields(s, &s.call, &s.thread, fields);
    // The rank's other threads' waits, where its threads share the engine.
    let others: Vec<String> = s
        .others
        .iter()
        .map(|t| {
            let mut fields = Vec::new();
            call_fields(s, &t.call, &t.thread, &mut fields);
            format!("{{{}}}", fields.join(","))
        })
        .collect();
    fields.push(format!("\"other_threads\":[{}]", others.join(",")));
    let opt = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    let envelopes = |list: &[bootstrap::stall::Envelope]| {
        let all: Vec<String> = list
            .iter()
            .map(|e| {
                format!(
                    "{{\"context\":{},\"source\":{},\"tag\":{},\"bytes\":{}}}",
                    e.context,
                    opt(e.source.map(|r| r.to_string())),
                    opt(e.tag.map(|t| t.to_string())),
                    e.bytes
                )
            })
            .collect();
        format!("[{}]", all.join(","))
    };
    fields.push(format!("\"posted\":{}", envelopes(&s.posted)));
    fields.push(format!("\"unexpected\":{}", envelopes(&s.unexpected)));
    let sends: Vec<String> = s
        .sends
        .iter()
        .map(|q| {
            format!(
                "{{\"context\":{},\"peer\":{},\"tag\":{},\"bytes\":{},\"waits_for\":{}}}",
                q.context,
                q.peer,
                q.tag,
                q.bytes,
                quote(&q.waits_for)
            )
        })
        .collect();
    fields.push(format!("\"sends\":[{}]", sends.join(",")));
    fields.push(format!("\"left_out\":{}", s.left_out));
}

/// The fields of one thread's call: `thread`'s (empty where the rank has one thread).
fn call_fields(s: &RankState, c: &Call, thread: &str, fields: &mut Vec<String>) {
    let (role, peer) = match c.peer {
        Peer::None => ("none", None),
        Peer::To(r) => ("to", Some(r)),
        Peer::From(r) => ("from", Some(r)),
        Peer::FromAny => ("from_any", None),
        Peer::Root(r) => ("root", Some(r)),
    };
    let opt = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    fields.extend([
        format!("\"thread\":{}", quote(thread)),
        format!("\"op\":{}", quote(&c.op)),
        format!("\"location\":{}", quote(&c.location)),
        format!(
            "\"communicator\":{}",
            opt(c.context.map(|context| quote(&s.comm_name(context))))
        ),
        format!("\"context\":{}", opt(c.context.map(|c| c.to_string()))),
        format!("\"peer_role\":\"{role}\""),
        format!("\"peer\":{}", opt(peer.map(|p| p.to_string()))),
        format!("\"tag\":{}", opt(c.tag.map(|t| t.to_string()))),
        format!("\"bytes\":{}", opt(c.bytes.map(|b| b.to_string()))),
        format!("\"collective\":{}", c.collective),
        format!("\"step\":{}", opt(c.step.as_deref().map(quote))),
    ]);
}

/// A JSON string.
fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for ch in text.chars() {
        match ch {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            '\n' => out += "\\n",
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_stuck_only_when_every_rank_left_waits() {
        let now = Instant::now();
        let mut book = StallBook::new(2);
        let state = |rank| RankState {
            rank,
            host: "h".into(),
            idle_ms: 1000,
            call: bootstrap::stall::Call {
                op: "receive".into(),
                location: String::new(),
                context: Some(0),
                peer: Peer::From(1 - rank),
                tag: Some(0),
                bytes: None,
                step: None,
                collective: false,
            },
            posted: Vec::new(),
            unexpected: Vec::new(),
            sends: Vec::new(),
            left_out: 0,
            comms: Vec::new(),
            awaited: None,
            entered: Vec::new(),
            thread: String::new(),
            others: Vec::new(),
        };
        book.stalled(0, state(0), now);
        assert_eq!(book.stuck_since(), None);
        // Rank 0 said it had waited 1 s; a report 2.5 s later says 3.5 s.
        book.idle_until(now + Duration::from_millis(2500));
        assert!(book.report("now", &[]).contains("nothing moved for 3.5 s"));
        book.stalled(1, state(1), now);
        assert!(book.stuck_since().is_some());
        book.resumed(1);
        assert_eq!(book.stuck_since(), None);
        // Rank 1 exits after rank 0 last moved: the job is stuck only from the exit on,
        // since rank 0's word that the exit let it go may come later.
        let exit = now + Duration::from_secs(5);
        book.exited(1, "exit code 0".into(), exit);
        assert_eq!(book.stuck_since(), Some(exit));
        book.resumed(0);
        assert_eq!(book.stuck_since(), None);
        book.stalled(0, state(0), now);
        let json = book.json("stuck \"now\"", &book.diagnosis());
        assert!(json.starts_with("{\"headline\":\"stuck \\\"now\\\"\",\"ranks\":[{\"rank\":0,"));
        assert!(json.contains("\"status\":\"exited\""), "{json}");
        // A state that arrives after the exit was seen leaves the rank exited.
        book.stalled(1, state(1), now);
        assert!(book
            .report("late", &[])
            .contains("rank 1 has exited (exit code 0)"));
        // A job whose ranks all exited is over, not stuck.
        let mut gone = StallBook::new(1);
        gone.exited(0, "exit code 0".into(), now);
        assert_eq!(gone.stuck_since(), None);
    }
}
