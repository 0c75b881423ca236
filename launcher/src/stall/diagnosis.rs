//! Why the job is stuck, from what each rank waits for (the wait-for graph): cycles of
//! ranks each waiting for the next, receives no message sent or being sent can satisfy
//! (with the near misses that explain them), ranks waiting for a rank that finalized or
//! exited, and collectives some members entered and others did not. A rank whose threads
//! share the engine waits in one call a thread (`RankState::others`): each thread's wait is
//! an edge of the graph, so a rank may wait for several. No I/O: rsrun's report and tests
//! feed it the ranks' states.

use std::collections::VecDeque;

use bootstrap::stall::{Awaited, Call, Envelope, Peer, PendingSend, RankState};

/// What rsrun knows of one rank.
#[derive(Clone, Debug)]
pub enum RankView {
    /// Not waiting in an mpirt call with nothing moving (computing, or not yet told).
    Running,
    Waiting(Box<RankState>),
    /// Ended; how, in words.
    Exited(String),
}

/// The op a rank waits in at finalize (mpirt's name for it).
const FINALIZE: &str = "finalize";

/// The diagnosis: one finding a line.
pub fn diagnose(ranks: &[RankView]) -> Vec<String> {
    let mut found = Vec::new();
    let in_cycle = cycles(ranks, &mut found);
    gone_peers(ranks, &mut found);
    unmatched_receives(ranks, &in_cycle, &mut found);
    partial_collectives(ranks, &mut found);
    found
}

fn waiting(ranks: &[RankView], r: u32) -> Option<&RankState> {
    match ranks.get(r as usize)? {
        RankView::Waiting(s) => Some(s),
        _ => None,
    }
}

/// One thread's wait on a rank: the rank's call, or one of its other threads'.
#[derive(Clone, Copy)]
struct Wait<'s> {
    call: &'s Call,
    thread: &'s str,
    awaited: Option<&'s [Awaited]>,
}

/// Every thread's wait of `s`, its call's first.
fn waits(s: &RankState) -> Vec<Wait<'_>> {
    let mut all = vec![Wait {
        call: &s.call,
        thread: &s.thread,
        awaited: s.awaited.as_deref(),
    }];
    all.extend(s.others.iter().map(|t| Wait {
        call: &t.call,
        thread: &t.thread,
        awaited: t.awaited.as_deref(),
    }));
    all
}

/// The rank's call: its first thread's wait.
fn first(s: &RankState) -> Wait<'_> {
    waits(s)[0]
}

/// The one rank the wait `w` of `s` waits for, if its call names one.
fn waits_for(s: &RankState, w: Wait<'_>) -> Option<u32> {
    if w.call.collective {
        return None;
    }
    match w.call.peer {
        Peer::To(p) | Peer::From(p) => Some(p),
        Peer::None => {
            // The user's receives and sends only: a collective's own in flight (negative
            // tag) is not whom it waits for, and a receive from any rank waits for no one
            // rank. Lists cut short (entries left out) may hide another peer it waits for.
            let receives = wanted(s, w);
            if s.left_out > 0 || receives.iter().any(|want| want.source.is_none()) {
                return None;
            }
            let mut peers: Vec<u32> = sends_waited_for(s, w)
                .filter(|q| q.tag >= 0)
                .map(|q| q.peer)
                .chain(receives.iter().filter_map(|want| want.source))
                .collect();
            peers.sort_unstable();
            peers.dedup();
            (peers.len() == 1).then(|| peers[0])
        }
        Peer::FromAny | Peer::Root(_) => None,
    }
}

/// The ranks `s`'s threads wait for, each once, in order.
fn peers(s: &RankState) -> Vec<u32> {
    let mut peers: Vec<u32> = waits(s)
        .into_iter()
        .filter_map(|w| waits_for(s, w))
        .collect();
    peers.sort_unstable();
    peers.dedup();
    peers
}

/// "rank 0 waits in synchronous_send to rank 1 (tag 3, src/main.rs:42:5)".
fn clause(s: &RankState, w: Wait<'_>) -> String {
    format!("rank {} waits in {}", s.rank, w.call.in_words(w.thread))
}

/// Names each cycle; which ranks are in one. From each rank not yet in a named cycle, in
/// order, the shortest path of waits back to it, through ranks in none: a rank whose
/// threads wait for several ranks has several edges, and a cycle through any thread's wait is
/// a cycle (every thread of a waiting rank waits).
fn cycles(ranks: &[RankView], found: &mut Vec<String>) -> Vec<bool> {
    let mut reported = vec![false; ranks.len()];
    for start in 0..ranks.len() as u32 {
        if reported[start as usize] {
            continue;
        }
        if let Some(cycle) = cycle_through(ranks, start, &reported) {
            for &r in &cycle {
                reported[r as usize] = true;
            }
            found.push(cycle_line(ranks, &cycle));
        }
    }
    reported
}

/// The shortest cycle of waits through `start` and ranks not `reported`, from `start` on.
fn cycle_through(ranks: &[RankView], start: u32, reported: &[bool]) -> Option<Vec<u32>> {
    let mut parent: Vec<Option<u32>> = vec![None; ranks.len()];
    let mut queue = VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        let Some(s) = waiting(ranks, at) else {
            continue;
        };
        for next in peers(s) {
            if next == start {
                let mut cycle = vec![at];
                let mut r = at;
                while r != start {
                    r = parent[r as usize].expect("a rank reached from start");
                    cycle.push(r);
                }
                cycle.reverse();
                return Some(cycle);
            }
            let n = next as usize;
            if n < ranks.len() && !reported[n] && parent[n].is_none() {
                parent[n] = Some(at);
                queue.push_back(next);
            }
        }
    }
    None
}

/// The waits of `s` that wait for rank `next`, its threads' in their names' order.
fn waits_on(s: &RankState, next: u32) -> Vec<Wait<'_>> {
    let mut on: Vec<Wait<'_>> = waits(s)
        .into_iter()
        .filter(|&w| waits_for(s, w) == Some(next))
        .collect();
    on.sort_by_key(|w| w.thread);
    on
}

/// "deadlock: rank 0 waits in ...; rank 1 waits in ...: a cycle; ..." for the ranks of
/// `cycle`, each waiting for the next (in each of its threads' waits that do).
fn cycle_line(ranks: &[RankView], cycle: &[u32]) -> String {
    let mut clauses = Vec::new();
    let mut in_flight = false;
    for (i, &r) in cycle.iter().enumerate() {
        let next = cycle[(i + 1) % cycle.len()];
        let Some(s) = waiting(ranks, r) else { continue };
        let on = waits_on(s, next);
        let calls: Vec<String> = on.iter().map(|w| w.call.in_words(w.thread)).collect();
        clauses.push(format!("rank {r} waits in {}", calls.join(" and in ")));
        in_flight |= waiting(ranks, next).is_some_and(|n| {
            on.iter()
                .flat_map(|&w| wanted(s, w))
                .any(|want| satisfier(s.rank, want, n).is_some())
        });
    }
    format!(
        "deadlock: {}: a cycle; {}",
        clauses.join("; "),
        if in_flight {
            "a message between them is still in flight"
        } else {
            "no message between them is in flight"
        }
    )
}

/// A receive rank waits for: its call's, or one its wait on requests posted.
#[derive(Clone, Copy)]
struct Wanted {
    context: u32,
    /// `None`: any source.
    source: Option<u32>,
    /// `None`: any tag.
    tag: Option<i32>,
    /// Whether the call itself is the receive (else a posted one it waits for).
    call: bool,
}

/// The sends a wait with no peer of its own waits for: in a wait on requests those of
/// its requests, else (a wait the rank did not say more of) all it has unfinished, where the
/// rank has one thread that waits (another's sends are not this wait's).
fn sends_waited_for<'s>(
    s: &'s RankState,
    w: Wait<'s>,
) -> Box<dyn Iterator<Item = &'s PendingSend> + 's> {
    match w.awaited {
        Some(awaited) => Box::new(awaited.iter().filter_map(|a| match a {
            Awaited::Send(q) => Some(q),
            Awaited::Receive(_) => None,
        })),
        None if s.others.is_empty() => Box::new(s.sends.iter()),
        None => Box::new(std::iter::empty()),
    }
}

/// The receives a wait with no peer of its own waits for, as `sends_waited_for`.
fn receives_waited_for<'s>(
    s: &'s RankState,
    w: Wait<'s>,
) -> Box<dyn Iterator<Item = &'s Envelope> + 's> {
    match w.awaited {
        Some(awaited) => Box::new(awaited.iter().filter_map(|a| match a {
            Awaited::Receive(e) => Some(e),
            Awaited::Send(_) => None,
        })),
        None if s.others.is_empty() => Box::new(s.posted.iter()),
        None => Box::new(std::iter::empty()),
    }
}

/// The receives the wait `w` of `s` waits for: its blocking receive or probe, or, in a wait on
/// requests, the user's receives among the requests it waits for (runtime traffic, with
/// negative tags, is the collectives' own and not a user's receive).
fn wanted(s: &RankState, w: Wait<'_>) -> Vec<Wanted> {
    if w.call.collective {
        return Vec::new();
    }
    match (w.call.peer, w.call.context) {
        (Peer::From(_) | Peer::FromAny, Some(context)) => vec![Wanted {
            context,
            source: match w.call.peer {
                Peer::From(p) => Some(p),
                _ => None,
            },
            tag: w.call.tag,
            call: true,
        }],
        (Peer::None, _) => receives_waited_for(s, w)
            .filter(|e| e.tag.is_none_or(|t| t >= 0))
            .map(|e| Wanted {
                context: e.context,
                source: e.source,
                tag: e.tag,
                call: false,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A message sent or being sent by `peer` to rank `to` that the receive `want` would take,
/// in words.
fn satisfier(to: u32, want: Wanted, peer: &RankState) -> Option<String> {
    peer.sends
        .iter()
        .find(|q| {
            // A receive of any tag takes user tags only (as pml's TagSel::Any): never a
            // collective's own send, whose tag is negative.
            q.peer == to && q.context == want.context && want.tag.map_or(q.tag >= 0, |t| t == q.tag)
        })
        .map(|q| format!("rank {}'s send with tag {}", peer.rank, q.tag))
}

/// A message sent or being sent to `s`'s receive `want` by the rank it names or, for a
/// receive from any rank, by any waiting rank, in words.
fn sent_to(ranks: &[RankView], s: &RankState, want: Wanted) -> Option<String> {
    match want.source {
        Some(p) => waiting(ranks, p).and_then(|peer| satisfier(s.rank, want, peer)),
        None => ranks.iter().find_map(|view| match view {
            RankView::Waiting(peer) => satisfier(s.rank, want, peer),
            _ => None,
        }),
    }
}

/// Whether a waiting receive has a message on its way from a waiting sender: the transfer
/// goes on (one long copy moves nothing the waits can see until it ends), so the job is
/// slow, not stuck.
pub fn a_message_is_in_flight(ranks: &[RankView]) -> bool {
    ranks.iter().any(|view| match view {
        RankView::Waiting(s) => waits(s)
            .into_iter()
            .flat_map(|w| wanted(s, w))
            .any(|want| sent_to(ranks, s, want).is_some()),
        _ => false,
    })
}

fn gone_peers(ranks: &[RankView], found: &mut Vec<String>) {
    for view in ranks {
        let RankView::Waiting(s) = view else { continue };
        for w in waits(s) {
            if w.call.op == FINALIZE {
                continue;
            }
            let Some(p) = waits_for(s, w) else { continue };
            match ranks.get(p as usize) {
                Some(RankView::Exited(how)) => found.push(format!(
                    "{}, but rank {p} has already exited ({how})",
                    clause(s, w)
                )),
                Some(RankView::Waiting(peer)) if peer.call.op == FINALIZE => found.push(format!(
                    "{}, but rank {p} has already finalized (it waits in finalize for the \
                     others)",
                    clause(s, w)
                )),
                _ => {}
            }
        }
    }
}

/// Receives nothing sent matches; a rank in a cycle only where a near miss says more.
fn unmatched_receives(ranks: &[RankView], in_cycle: &[bool], found: &mut Vec<String>) {
    for view in ranks {
        let RankView::Waiting(s) = view else { continue };
        for (w, want) in waits(s)
            .into_iter()
            .flat_map(|w| wanted(s, w).into_iter().map(move |want| (w, want)))
        {
            if sent_to(ranks, s, want).is_some() {
                continue;
            }
            let misses = near_misses(ranks, s, want);
            if misses.is_empty() && in_cycle[s.rank as usize] {
                continue;
            }
            let mut line = if want.call {
                format!("{} on {}", clause(s, w), s.comm_name(want.context))
            } else {
                let source = want
                    .source
                    .map_or("any rank".to_string(), |r| format!("rank {r}"));
                let tag = want
                    .tag
                    .map_or("any tag".to_string(), |t| format!("tag {t}"));
                format!(
                    "{}: its receive from {source} with {tag} on {}",
                    clause(s, w),
                    s.comm_name(want.context)
                )
            };
            line += ": no message sent or being sent matches it";
            if !misses.is_empty() {
                line += &format!("; near misses: {}", misses.join("; "));
            }
            found.push(line);
        }
    }
}

/// What nearly matches `s`'s receive `want`: messages arrived at `s` with another tag,
/// source or communicator, and the named source's sends to `s` that wait.
fn near_misses(ranks: &[RankView], s: &RankState, want: Wanted) -> Vec<String> {
    let mut misses = Vec::new();
    for e in &s.unexpected {
        // Runtime traffic (collectives, finalize) has negative tags: never the user's.
        let (Some(from), Some(t @ 0..)) = (e.source, e.tag) else {
            continue;
        };
        let same_source = want.source.is_none_or(|p| p == from);
        let same_tag = want.tag.is_none_or(|wanted| wanted == t);
        let same_comm = e.context == want.context;
        let miss = match (same_source, same_tag, same_comm) {
            (true, false, true) => "same peer, other tag",
            (true, true, false) => "same tag, other communicator",
            (false, true, true) => "same tag, other source",
            _ => continue,
        };
        misses.push(format!(
            "rank {from} sent a message with tag {t} on {} that waits unreceived ({miss})",
            s.comm_name(e.context)
        ));
    }
    // The peer's own sends to this rank that wait, with another tag or communicator.
    if let Some(peer) = want.source.and_then(|p| waiting(ranks, p)) {
        // A collective's own sends (negative tags) are no user's message.
        for q in peer.sends.iter().filter(|q| q.peer == s.rank && q.tag >= 0) {
            let miss = if q.context == want.context {
                "same peer, other tag"
            } else {
                "other communicator"
            };
            misses.push(format!(
                "rank {} sends with tag {} on {} ({miss})",
                peer.rank,
                q.tag,
                peer.comm_name(q.context)
            ));
        }
    }
    misses
}

/// Collectives some members entered and others did not. Every member calls a
/// communicator's collectives in the same order and counts those it entered, so where the
/// ranks' counts are known, a member whose count is below the call a rank waits in never
/// entered it, and one whose count reaches it entered it (a rank other than a rooted
/// collective's root leaves once its part is done); a member in another collective as that
/// same call entered the wrong one.
fn partial_collectives(ranks: &[RankView], found: &mut Vec<String>) {
    let mut seen: Vec<(u32, String, Option<u64>)> = Vec::new();
    let collectives = ranks.iter().flat_map(|view| match view {
        RankView::Waiting(s) => waits(s).into_iter().map(|w| (&**s, w)).collect(),
        _ => Vec::new(),
    });
    for (s, w) in collectives {
        if !w.call.collective || w.call.op == FINALIZE {
            continue;
        }
        let Some(context) = w.call.context else {
            continue;
        };
        let call = s.entered(context);
        let key = (context, kind(&w.call.op).to_string(), call);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let Some(comm) = s.comm(context) else {
            continue;
        };
        let mut entered = Vec::new();
        let mut missing = Vec::new();
        let mut whereabouts = Vec::new();
        let mut unknown = false;
        for &r in &comm.ranks {
            match (ranks.get(r as usize), call) {
                (Some(RankView::Waiting(o)), Some(call)) => match o.entered(context) {
                    Some(calls) if calls < call => {
                        missing.push(r);
                        whereabouts.push(instead(
                            o,
                            &format!("having entered {calls} collective calls there"),
                        ));
                    }
                    Some(calls) if calls == call && in_collective(o, context) && !same(o, w) => {
                        missing.push(r);
                        whereabouts.push(instead(
                            o,
                            &format!("as collective call {call} there instead"),
                        ));
                    }
                    Some(_) => entered.push(r),
                    None => {
                        unknown = true;
                        missing.push(r);
                        whereabouts.push(clause(o, first(o)));
                    }
                },
                // Without counts, only the ranks waiting in it are known to have entered.
                (Some(RankView::Waiting(o)), None) => {
                    if in_collective(o, context) && same(o, w) {
                        entered.push(r);
                    } else {
                        unknown = true;
                        missing.push(r);
                        whereabouts.push(clause(o, first(o)));
                    }
                }
                (Some(RankView::Exited(how)), _) => {
                    unknown = true;
                    missing.push(r);
                    whereabouts.push(format!("rank {r} has exited ({how})"));
                }
                _ => {
                    unknown = true;
                    missing.push(r);
                    whereabouts.push(format!("rank {r} runs outside any mpirt call"));
                }
            }
        }
        if missing.is_empty() {
            continue;
        }
        let number = call.map_or(String::new(), |n| format!(", collective call {n} there,"));
        let mut line = format!(
            "{} on {} ({}){number} was entered by {} but not by {}: {}",
            kind(&w.call.op),
            s.comm_name(context),
            w.call.location,
            ranks_in_words(&entered),
            ranks_in_words(&missing),
            whereabouts.join("; ")
        );
        // A rank that is not the root leaves a rooted collective once its own part is done
        // (a reduce's or gather's contribution sent): one whose count is not known may
        // have been in it.
        if let Peer::Root(root) = w.call.peer {
            if unknown && missing.iter().any(|&r| r != root) {
                line += "; ranks other than the root leave a rooted collective once their \
                         part is done, and a rank named here that said nothing of its calls \
                         may have passed it";
            }
        }
        found.push(line);
    }
}

/// Whether a thread of `o` waits in a collective (not finalize) on the communicator with
/// `context`.
fn in_collective(o: &RankState, context: u32) -> bool {
    waits(o)
        .into_iter()
        .any(|w| w.call.collective && w.call.op != FINALIZE && w.call.context == Some(context))
}

/// Whether a thread of `o` waits in the same kind of collective as `w`, on its communicator.
fn same(o: &RankState, w: Wait<'_>) -> bool {
    waits(o).into_iter().any(|ow| {
        ow.call.collective
            && ow.call.context == w.call.context
            && kind(&ow.call.op) == kind(&w.call.op)
    })
}

/// Where a rank that did not enter a collective is instead: finalized, or in its own call
/// (`how`: how its count compares).
fn instead(o: &RankState, how: &str) -> String {
    if o.call.op == FINALIZE {
        format!("rank {} has finalized ({how})", o.rank)
    } else {
        format!("{}, {how}", clause(o, first(o)))
    }
}

/// The collective `op` is a part of: the root's and the other ranks' calls of a rooted
/// collective (`reduce_into_root`, `reduce_into`) are one.
fn kind(op: &str) -> &str {
    op.strip_suffix("_root").unwrap_or(op)
}

fn ranks_in_words(ranks: &[u32]) -> String {
    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match ranks.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootstrap::stall::{Call, Comm, Entered, Envelope};

    fn state(rank: u32, op: &str, peer: Peer, tag: Option<i32>) -> RankState {
        RankState {
            rank,
            host: "h".into(),
            idle_ms: 2000,
            call: Call {
                op: op.into(),
                location: format!("src/main.rs:{}:5", 40 + rank),
                context: Some(0),
                peer,
                tag,
                bytes: None,
                step: None,
                collective: op == "barrier" || op.starts_with("reduce_into"),
            },
            posted: Vec::new(),
            unexpected: Vec::new(),
            sends: Vec::new(),
            left_out: 0,
            comms: vec![Comm {
                context: 0,
                name: "MPI_COMM_WORLD".into(),
                ranks: vec![0, 1, 2],
            }],
            awaited: None,
            entered: Vec::new(),
            thread: String::new(),
            others: Vec::new(),
        }
    }

    /// `s` having entered `calls` collective calls on the world.
    fn counted(mut s: RankState, calls: u64) -> RankState {
        s.entered = vec![Entered { context: 0, calls }];
        s
    }

    #[test]
    fn a_rooted_collective_names_only_the_ranks_whose_count_says_they_never_entered_it() {
        // Rank 1 gave its part to rank 0's reduce and went on; rank 2 never entered it.
        let ranks = [
            w(counted(
                state(0, "reduce_into_root", Peer::Root(0), None),
                1,
            )),
            w(counted(state(1, "receive", Peer::From(2), Some(8)), 1)),
            w(counted(state(2, "receive", Peer::From(0), Some(7)), 0)),
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains(
                "reduce_into on MPI_COMM_WORLD (src/main.rs:40:5), collective call 1 there, was \
                 entered by ranks 0, 1 but not by rank 2: rank 2 waits in receive from rank 0 \
                 (tag 7, src/main.rs:42:5), having entered 0 collective calls there"
            ),
            "{found}"
        );
        assert!(!found.contains("may have passed it"), "{found}");
        // A rank that finalized before entering it, and one that entered another
        // collective as that same call.
        let mut r1 = counted(state(1, "all_reduce_into", Peer::None, None), 3);
        r1.call.collective = true;
        let ranks = [
            w(counted(state(0, "barrier", Peer::None, None), 3)),
            w(r1),
            w(counted(state(2, "finalize", Peer::None, None), 2)),
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains(
                "barrier on MPI_COMM_WORLD (src/main.rs:40:5), collective call 3 there, was \
                 entered by rank 0 but not by ranks 1, 2: rank 1 waits in all_reduce_into \
                 (src/main.rs:41:5), as collective call 3 there instead; rank 2 has finalized \
                 (having entered 2 collective calls there)"
            ),
            "{found}"
        );
    }

    #[test]
    fn a_wait_on_requests_waits_for_its_requests_not_every_posted_receive() {
        // Rank 0 posted a receive from rank 2 and waits on another, from rank 1, which
        // waits for rank 0: a cycle, and nothing said of the receive it does not wait on.
        let mut r0 = state(0, "wait", Peer::None, None);
        r0.call.context = None;
        r0.posted.extend([envelope(2, 30, 8), envelope(1, 31, 8)]);
        r0.awaited = Some(vec![Awaited::Receive(envelope(1, 31, 8))]);
        let ranks = [
            w(r0),
            w(state(1, "receive", Peer::From(0), Some(32))),
            w(state(2, "receive", Peer::From(0), Some(33))),
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains(
                "deadlock: rank 0 waits in wait (src/main.rs:40:5); rank 1 waits in receive \
                 from rank 0 (tag 32, src/main.rs:41:5): a cycle"
            ),
            "{found}"
        );
        assert!(!found.contains("tag 30"), "{found}");
    }

    #[test]
    fn a_wait_on_requests_some_of_them_left_out_waits_for_no_one_rank() {
        // Rank 0 waits on 64 receives from rank 1 that the list shows and one from rank 2
        // it left out; rank 1 waits for rank 0. Were the list taken for the whole, rank 0
        // would wait for rank 1 alone, a cycle.
        let mut r0 = state(0, "wait", Peer::None, None);
        r0.call.context = None;
        r0.awaited = Some(
            (0..64)
                .map(|t| Awaited::Receive(envelope(1, t, 8)))
                .collect(),
        );
        r0.left_out = 1;
        let ranks = [
            w(r0.clone()),
            w(state(1, "receive", Peer::From(0), Some(70))),
            RankView::Running,
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(!found.contains("deadlock"), "{found}");
        assert_eq!(waits_for(&r0, first(&r0)), None);
        // The same list, whole, is a wait for rank 1.
        r0.left_out = 0;
        assert_eq!(waits_for(&r0, first(&r0)), Some(1));
    }

    fn w(s: RankState) -> RankView {
        RankView::Waiting(Box::new(s))
    }

    /// An envelope on MPI_COMM_WORLD (context 0) from `source` with `tag`, of `bytes`.
    fn envelope(source: u32, tag: i32, bytes: u64) -> Envelope {
        Envelope {
            context: 0,
            source: Some(source),
            tag: Some(tag),
            bytes,
        }
    }

    #[test]
    fn a_cycle_of_synchronous_sends_is_named() {
        let ranks = [
            w(state(0, "synchronous_send", Peer::To(1), Some(3))),
            w(state(1, "synchronous_send", Peer::To(0), Some(3))),
            RankView::Running,
        ];
        let found = diagnose(&ranks);
        assert_eq!(
            found[0],
            "deadlock: rank 0 waits in synchronous_send to rank 1 (tag 3, src/main.rs:40:5); \
             rank 1 waits in synchronous_send to rank 0 (tag 3, src/main.rs:41:5): a cycle; \
             no message between them is in flight"
        );
    }

    #[test]
    fn a_tag_mismatch_is_a_near_miss() {
        let mut r1 = state(1, "receive", Peer::From(0), Some(2));
        r1.unexpected.push(envelope(0, 1, 8));
        let ranks = [
            RankView::Exited("exit code 0".into()),
            w(r1),
            RankView::Running,
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(found.contains("but rank 0 has already exited"), "{found}");
        assert!(
            found.contains(
                "rank 0 sent a message with tag 1 on MPI_COMM_WORLD that waits \
                            unreceived (same peer, other tag)"
            ),
            "{found}"
        );
    }

    #[test]
    fn a_wait_on_a_posted_receive_nothing_matches_shows_its_near_misses() {
        let mut r1 = state(1, "wait", Peer::None, None);
        r1.call.context = None;
        let posted = |source, tag| Envelope {
            context: 0,
            source,
            tag,
            bytes: 0,
        };
        // The user's receive from rank 0 with tag 2, and a collective's own (negative tag).
        r1.posted
            .extend([posted(Some(0), Some(2)), posted(Some(2), Some(-16))]);
        r1.unexpected.push(envelope(0, 1, 8));
        let r0 = state(0, "receive", Peer::From(1), Some(9));
        let found = diagnose(&[w(r0), w(r1), RankView::Running]).join("\n");
        assert!(
            found.contains(
                "rank 1 waits in wait (src/main.rs:41:5): its receive from rank 0 with tag 2 on \
                 MPI_COMM_WORLD: no message sent or being sent matches it; near misses: rank 0 \
                 sent a message with tag 1 on MPI_COMM_WORLD that waits unreceived (same peer, \
                 other tag)"
            ),
            "{found}"
        );
        assert!(
            found.contains("deadlock: rank 0 waits in receive from rank 1"),
            "{found}"
        );
        assert!(!found.contains("tag -16"), "{found}");
        // A send to that receive on its way: not stuck, nothing unmatched.
        let mut r0 = state(0, "send", Peer::To(1), Some(2));
        r0.sends.push(bootstrap::stall::PendingSend {
            context: 0,
            peer: 1,
            tag: 2,
            bytes: 1 << 30,
            waits_for: "a matching receive to read its data".into(),
        });
        let mut r1 = state(1, "wait", Peer::None, None);
        r1.posted.push(posted(Some(0), Some(2)));
        let ranks = [w(r0), w(r1), RankView::Running];
        assert!(a_message_is_in_flight(&ranks));
        assert!(!diagnose(&ranks).join("\n").contains("no message sent"));
    }

    #[test]
    fn a_collective_some_ranks_skipped_names_the_missing_and_where_they_are() {
        let ranks = [
            w(state(0, "barrier", Peer::None, None)),
            w(state(1, "barrier", Peer::None, None)),
            w(state(2, "receive", Peer::From(0), Some(7))),
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains(
                "barrier on MPI_COMM_WORLD (src/main.rs:40:5) was entered by ranks 0, 1 but \
                 not by rank 2: rank 2 waits in receive from rank 0 (tag 7, src/main.rs:42:5)"
            ),
            "{found}"
        );
    }

    #[test]
    fn the_root_and_the_others_of_a_rooted_collective_are_in_the_same_one() {
        let root = state(0, "reduce_into_root", Peer::Root(0), None);
        let ranks = [
            w(root),
            w(state(1, "reduce_into", Peer::Root(0), None)),
            w(state(2, "reduce_into", Peer::Root(0), None)),
        ];
        let found = diagnose(&ranks);
        assert!(found.is_empty(), "{found:?}");
        let ranks = [
            w(state(0, "reduce_into_root", Peer::Root(0), None)),
            w(state(1, "reduce_into", Peer::Root(0), None)),
            w(state(2, "receive", Peer::From(0), Some(7))),
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains("reduce_into on MPI_COMM_WORLD (src/main.rs:40:5) was entered by ranks 0, 1 but not by rank 2"),
            "{found}"
        );
        assert!(found.contains("may have passed it"), "{found}");
        // The root missing is certain: the others wait for its part.
        let ranks = [
            w(state(0, "reduce_into", Peer::Root(2), None)),
            w(state(1, "reduce_into", Peer::Root(2), None)),
            w(state(2, "receive", Peer::From(0), Some(7))),
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains("but not by rank 2: rank 2 waits in receive"),
            "{found}"
        );
        assert!(!found.contains("may have passed it"), "{found}");
    }

    #[test]
    fn a_receive_from_any_rank_sees_a_send_to_it_from_any_waiting_rank() {
        let r0 = state(0, "receive", Peer::FromAny, Some(4));
        let mut r2 = state(2, "send", Peer::To(0), Some(4));
        r2.sends.push(bootstrap::stall::PendingSend {
            context: 0,
            peer: 0,
            tag: 4,
            bytes: 1 << 30,
            waits_for: "a matching receive to read its data".into(),
        });
        let ranks = [w(r0), RankView::Running, w(r2)];
        let found = diagnose(&ranks).join("\n");
        assert!(
            !found.contains("no message sent or being sent matches it"),
            "{found}"
        );
        assert!(a_message_is_in_flight(&ranks));
        let ranks = [
            w(state(0, "receive", Peer::FromAny, Some(4))),
            RankView::Running,
            w(state(2, "receive", Peer::From(0), Some(4))),
        ];
        assert!(!a_message_is_in_flight(&ranks));
    }

    fn collective_send(to: u32) -> bootstrap::stall::PendingSend {
        bootstrap::stall::PendingSend {
            context: 0,
            peer: to,
            tag: -16,
            bytes: 1 << 20,
            waits_for: "a matching receive to read its data".into(),
        }
    }

    #[test]
    fn a_receive_of_any_tag_is_not_satisfied_by_a_collective_send() {
        // Rank 0 waits in a large reduce's rendezvous send to rank 1, which receives any
        // tag from rank 0: mpirt never matches the two (TagSel::Any takes user tags only).
        let mut r0 = state(0, "reduce_into", Peer::Root(1), None);
        r0.sends.push(collective_send(1));
        let ranks = [
            w(r0),
            w(state(1, "receive", Peer::From(0), None)),
            RankView::Running,
        ];
        assert!(!a_message_is_in_flight(&ranks));
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains("rank 1 waits in receive from rank 0"),
            "{found}"
        );
        assert!(
            found.contains("no message sent or being sent matches it"),
            "{found}"
        );
    }

    #[test]
    fn a_collective_send_is_no_near_miss() {
        let mut r0 = state(0, "reduce_into", Peer::Root(1), None);
        r0.sends.push(collective_send(1));
        let ranks = [
            w(r0),
            w(state(1, "receive", Peer::From(0), Some(5))),
            RankView::Running,
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains("no message sent or being sent matches it"),
            "{found}"
        );
        assert!(!found.contains("tag -16"), "{found}");
    }

    #[test]
    fn a_collective_send_in_flight_hides_no_cycle_of_a_wait() {
        // Rank 1 waits on its receive from rank 0 with a collective's send to rank 2 still
        // pending: it waits for rank 0 alone, which waits for it.
        let mut r1 = state(1, "wait", Peer::None, None);
        r1.call.context = None;
        r1.posted.push(envelope(0, 2, 0));
        r1.sends.push(collective_send(2));
        let ranks = [
            w(state(0, "receive", Peer::From(1), Some(9))),
            w(r1),
            RankView::Running,
        ];
        let found = diagnose(&ranks).join("\n");
        assert!(
            found.contains("deadlock: rank 0 waits in receive from rank 1"),
            "{found}"
        );
    }

    #[test]
    fn a_long_chain_ending_in_a_cycle_is_one_cycle() {
        let n = 2000;
        let mut ranks: Vec<RankView> = (0..n)
            .map(|r| w(state(r, "receive", Peer::From(r + 1), Some(1))))
            .collect();
        ranks[n as usize - 1] = w(state(n - 1, "receive", Peer::From(n - 2), Some(1)));
        let cycles: Vec<String> = diagnose(&ranks)
            .into_iter()
            .filter(|f| f.starts_with("deadlock"))
            .collect();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert!(
            cycles[0].starts_with("deadlock: rank 1998 waits in receive from rank 1999"),
            "{}",
            cycles[0]
        );
    }
}
