//! Gathers, scatters and reduce-scatters by messages that cross the network once per host:
//! each host's ranks give their parts to one rank of their host (the root on the root's host,
//! else the host's lowest rank, its leader) over the host's own transport, and the leaders
//! trade one message per pair of hosts (Open MPI's coll/han and MPICH's node-aware
//! collectives do the same). A flat binomial tree or a ring, on ranks dealt round the hosts,
//! crosses the network on nearly every message, and a tree passes some bytes across it more
//! than once.
//!
//! Inside a host the parts go linearly, each rank to its leader in one round: a host holds
//! few ranks. Between hosts the gather's and the scatter's leaders go straight to the root,
//! and the reduce-scatter's leaders each to each, one round: the few hosts a job spans here;
//! many hosts would want a tree there.

use super::Ranks;
use crate::collective::schedule::{encode_lengths, Plan, Span, LENGTH};

/// Every rank's host, numbered by the host's lowest rank (host 0 holds rank 0): what the
/// node-aware plans need to know of where the ranks lie.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement<'a> {
    host_of: &'a [u32],
}

impl<'a> Placement<'a> {
    pub fn new(host_of: &'a [u32]) -> Placement<'a> {
        Placement { host_of }
    }

    fn host(&self, rank: u32) -> u32 {
        self.host_of[rank as usize]
    }

    /// How many hosts the ranks lie on.
    pub(crate) fn hosts(&self) -> u32 {
        self.host_of.iter().max().map_or(0, |&h| h + 1)
    }

    /// The ranks on `host`, in rank order: the first is its leader.
    pub(crate) fn members(&self, host: u32) -> Vec<u32> {
        (0..self.host_of.len() as u32)
            .filter(|&r| self.host(r) == host)
            .collect()
    }

    /// The rank that collects or hands out `host`'s parts of a call rooted at `root`: the
    /// root on its own host, else the host's leader.
    fn collector(&self, host: u32, root: u32) -> u32 {
        match self.host(root) == host {
            true => root,
            false => self.members(host)[0],
        }
    }
}

/// Whether `ranks` follow each other with no gap: then their blocks of a buffer in rank
/// order are one run of it.
fn consecutive(ranks: &[u32]) -> bool {
    ranks.windows(2).all(|w| w[1] == w[0] + 1)
}

/// The root's `output` ends with every rank's `input` block, in rank order: each rank of the
/// root's host sends its block to the root, each other host's ranks theirs to their leader,
/// which sends the host's blocks to the root in one message. Where a host's ranks follow each
/// other, that message lands in place; else in a scratch buffer, copied out block by block.
pub(crate) fn gather(
    p: &mut Plan,
    ranks: Ranks,
    hosts: Placement,
    root: u32,
    input: Span,
    output: Option<Span>,
) {
    let (me, block) = (ranks.rank, input.len);
    let mine = hosts.host(me);
    let collector = hosts.collector(mine, root);
    if me == root {
        let output = output.expect("the root has a receive buffer");
        let at = |rank: u32| output.sub(rank as usize * block, block);
        p.copy(input, at(root));
        p.round();
        let mut scattered = Vec::new();
        for host in 0..hosts.hosts() {
            let members = hosts.members(host);
            if host == mine {
                for &rank in members.iter().filter(|&&r| r != root) {
                    p.recv(rank, at(rank));
                }
            } else if consecutive(&members) {
                let run = output.sub(members[0] as usize * block, members.len() * block);
                p.recv(members[0], run);
            } else {
                let held = p.scratch(members.len() * block);
                p.recv(members[0], held);
                scattered.push((members, held));
            }
        }
        for (members, held) in scattered {
            for (i, &rank) in members.iter().enumerate() {
                p.copy(held.sub(i * block, block), at(rank));
            }
        }
    } else if me == collector {
        let members = hosts.members(mine);
        if members.len() == 1 {
            p.round().send(root, input);
            return;
        }
        let held = p.scratch(members.len() * block);
        p.copy(input, held.sub(0, block));
        p.round();
        for (i, &rank) in members.iter().enumerate().skip(1) {
            p.recv(rank, held.sub(i * block, block));
        }
        p.round().send(root, held);
    } else {
        p.round().send(collector, input);
    }
}

/// Every rank's part `parts[r]` of its receive buffer ends with rank r's `input` (this rank's
/// own part's length): each rank of a host sends its part to its leader, each leader sends
/// each other leader its host's parts and receives that host's, then hands each rank of its
/// host every part but the rank's own. Three rounds in all, one across the network, where the
/// ring takes a round a rank, most of them across it on ranks dealt round the hosts (Open
/// MPI's coll/han and MPICH's node-aware all-gathers go the same way). Every part goes in a
/// message of its own: each receive is then one rank's part as the receiving rank counts it,
/// so that ranks whose counts disagree fail naming the sender, as around the ring, where one
/// message of a host's parts back to back could match in length and cut them wrong.
pub(crate) fn all_gather_varcount(
    p: &mut Plan,
    ranks: Ranks,
    hosts: Placement,
    input: Span,
    parts: &[Span],
) {
    let me = ranks.rank;
    let mine = hosts.host(me);
    let members = hosts.members(mine);
    let leader = members[0];
    p.copy(input, parts[me as usize]);
    let everyone_but = |rank: u32| (0..ranks.size).filter(move |&r| r != rank);
    if me != leader {
        p.send(leader, input);
        p.round();
        for r in everyone_but(me) {
            p.recv(leader, parts[r as usize]);
        }
        return;
    }
    for &rank in &members[1..] {
        p.recv(rank, parts[rank as usize]);
    }
    p.round();
    for host in (0..hosts.hosts()).filter(|&h| h != mine) {
        let theirs = hosts.members(host);
        for &rank in &members {
            p.send(theirs[0], parts[rank as usize]);
        }
        for &rank in &theirs {
            p.recv(theirs[0], parts[rank as usize]);
        }
    }
    p.round();
    for &member in &members[1..] {
        for r in everyone_but(member) {
            p.send(member, parts[r as usize]);
        }
    }
}

/// The bytes of a message of `lengths` and the parts they measure. A leader learns some of
/// them from its ranks' messages, which it counts as empty parts where they would not fit
/// (`Plan::hold_lengths`, naming the sender): a sum that does not fit is no plan (wrapped, in
/// a release build, it would let spans past their buffers through `Plan::check_spans`).
fn with_lengths(lengths: &[usize]) -> usize {
    lengths
        .iter()
        .try_fold(LENGTH * lengths.len(), |sum, &len| sum.checked_add(len))
        .expect("collective plan: parts' lengths that overflow")
}

/// The root's `parts[r]` end with rank r's `input`, parts of any length that only the root
/// and rank r know: each rank of the root's host sends its part to the root; each rank of
/// another host tells its leader its part's length, then sends it (no message for an empty
/// one); the leader, once it has the lengths, receives the parts and sends the root one
/// message of its host's lengths and parts, in rank order. The root checks those lengths
/// against its own: ranks whose counts disagree fail naming the rank whose part it is, where
/// the message's length alone would let parts of equal sum land cut wrong (Open MPI's
/// coll/han gathers the lengths to the leaders the same way).
pub(crate) fn gather_varcount(
    p: &mut Plan,
    ranks: Ranks,
    hosts: Placement,
    root: u32,
    input: Span,
    parts: Option<&[Span]>,
) {
    let me = ranks.rank;
    let mine = hosts.host(me);
    let members = hosts.members(mine);
    if me == root {
        let parts = parts.expect("the root has a receive buffer");
        let (others, held) = other_hosts_messages(p, hosts, mine, parts);
        p.copy(input, parts[root as usize]);
        p.round();
        for &rank in members.iter().filter(|&&r| r != root) {
            p.recv(rank, parts[rank as usize]);
        }
        let mut at = 0;
        for theirs in &others {
            let message = held.sub(at, host_message_len(theirs, parts));
            let expected = theirs.iter().map(|&r| (r, parts[r as usize].len));
            p.recv_with_lengths(theirs[0], message, expected.collect());
            at += message.len;
        }
        let mut at = 0;
        for theirs in &others {
            at += LENGTH * theirs.len();
            for &rank in theirs {
                let part = parts[rank as usize];
                p.copy(held.sub(at, part.len), part);
                at += part.len;
            }
        }
    } else if hosts.host(root) == mine {
        p.round().send(root, input);
    } else if me != members[0] {
        let length = p.scratch_with(LENGTH, encode_lengths([input.len]));
        p.round().send(members[0], length);
        if input.len > 0 {
            p.send(members[0], input);
        }
    } else {
        let others = members[1..].to_vec();
        let lengths = learned_lengths(p, &others);
        p.learn(lengths, move |learned, unmade| {
            let mut p = Plan::default();
            let all: Vec<usize> = [input.len]
                .into_iter()
                .chain(learned.iter().copied())
                .collect();
            let message = p.scratch_with(with_lengths(&all), encode_lengths(all.clone()));
            let mut at = LENGTH * all.len();
            p.copy(input, message.sub(at, input.len));
            at += input.len;
            p.round();
            for ((&rank, &len), &unmade) in others.iter().zip(learned).zip(unmade) {
                if len > 0 || unmade {
                    // A part this leader could make no buffer for lands in none: its
                    // rank's send ends (truncated here, an error naming that rank) rather
                    // than wait for a receive that never comes.
                    p.recv(rank, message.sub(at, len));
                }
                at += len;
            }
            p.round().send(root, message);
            p
        });
    }
}

/// The root's side of a gather or scatter of parts of any length across hosts: every other
/// host's ranks, and one buffer for those hosts' messages back to back, each its ranks'
/// lengths and then their parts (`host_message_len`).
fn other_hosts_messages(
    p: &mut Plan,
    hosts: Placement,
    mine: u32,
    parts: &[Span],
) -> (Vec<Vec<u32>>, Span) {
    let others: Vec<Vec<u32>> = (0..hosts.hosts())
        .filter(|&h| h != mine)
        .map(|h| hosts.members(h))
        .collect();
    let held = p.scratch(
        others
            .iter()
            .map(|theirs| host_message_len(theirs, parts))
            .sum(),
    );
    (others, held)
}

/// The length of the message between the root and the leader of `ranks`' host: each rank's
/// length, then its part.
fn host_message_len(ranks: &[u32], parts: &[Span]) -> usize {
    ranks.iter().map(|&r| LENGTH + parts[r as usize].len).sum()
}

/// A leader's first round: the lengths of the parts of `others` (its host's other ranks),
/// each from its rank; where they land.
fn learned_lengths(p: &mut Plan, others: &[u32]) -> Span {
    let lengths = p.scratch_with(LENGTH * others.len(), vec![0; LENGTH * others.len()]);
    p.round();
    for (i, &rank) in others.iter().enumerate() {
        p.recv_lengths(rank, lengths.sub(i * LENGTH, LENGTH));
    }
    lengths
}

/// Every rank's `output` ends with its part `parts[r]` of the root's send buffer, parts of
/// any length that only the root and rank r know: the root sends each rank of its host its
/// part, and each other host's leader one message of the host's lengths and parts, in rank
/// order; each rank of another host tells its leader its part's length, and the leader,
/// once it has the lengths, receives the root's message, checks the root's lengths against
/// its ranks' (a disagreement fails it, naming the root, and its ranks with it, where the
/// message's length alone would let parts of equal sum go out cut wrong) and hands each
/// rank its part (for an empty one, the root's length for it, which a failed leader sends
/// empty as it does every part, so that a rank whose empty part the root counts otherwise
/// fails too).
pub(crate) fn scatter_varcount(
    p: &mut Plan,
    ranks: Ranks,
    hosts: Placement,
    root: u32,
    parts: Option<&[Span]>,
    output: Span,
) {
    let me = ranks.rank;
    let mine = hosts.host(me);
    let members = hosts.members(mine);
    if me == root {
        let parts = parts.expect("the root has a send buffer");
        // Each host's lengths written as the execution starts, and its parts copied in.
        let (others, held) = other_hosts_messages(p, hosts, mine, parts);
        p.copy(parts[root as usize], output);
        let mut messages = Vec::with_capacity(others.len());
        let mut at = 0;
        for theirs in &others {
            let message = held.sub(at, host_message_len(theirs, parts));
            let lengths = encode_lengths(theirs.iter().map(|&r| parts[r as usize].len));
            p.start_with(message.sub(0, LENGTH * theirs.len()), lengths);
            at += LENGTH * theirs.len();
            for &rank in theirs {
                let part = parts[rank as usize];
                p.copy(part, held.sub(at, part.len));
                at += part.len;
            }
            messages.push((theirs[0], message));
        }
        p.round();
        for &rank in members.iter().filter(|&&r| r != root) {
            p.send(rank, parts[rank as usize]);
        }
        for (leader, message) in messages {
            p.send(leader, message);
        }
    } else if hosts.host(root) == mine {
        p.round().recv(root, output);
    } else if me != members[0] {
        let length = p.scratch_with(LENGTH, encode_lengths([output.len]));
        p.round().send(members[0], length);
        match output.len {
            // The root's length for this rank's empty part, which a leader that failed
            // passes on empty like any part: no message at all would end this rank well
            // where the root counts its part otherwise.
            0 => {
                let roots = p.scratch(LENGTH);
                p.recv_with_lengths(members[0], roots, vec![(root, 0)])
            }
            _ => p.recv(members[0], output),
        };
    } else {
        let others = members[1..].to_vec();
        let lengths = learned_lengths(p, &others);
        // A rank's part that got no buffer here goes out as the root's length for it, which
        // fails that rank; the root's message, longer than this leader's buffer, ends
        // truncated.
        p.learn(lengths, move |learned, _unmade| {
            let mut p = Plan::default();
            let all: Vec<usize> = [output.len]
                .into_iter()
                .chain(learned.iter().copied())
                .collect();
            let expected = all.iter().map(|&len| (root, len)).collect();
            let message = p.scratch(with_lengths(&all));
            p.round().recv_with_lengths(root, message, expected);
            let mut at = LENGTH * all.len();
            p.copy(message.sub(at, output.len), output);
            at += output.len;
            p.round();
            for (i, (&rank, &len)) in others.iter().zip(learned).enumerate() {
                match len {
                    // The root's length for it, after the leader's own.
                    0 => p.send(rank, message.sub(LENGTH * (1 + i), LENGTH)),
                    _ => p.send(rank, message.sub(at, len)),
                };
                at += len;
            }
            p
        });
    }
}

/// Every rank's `output` ends with its block of the root's `input`: the root sends each rank
/// of its host its block and each other host's leader the host's blocks in one message (in
/// place where the host's ranks follow each other, else packed into a scratch buffer first),
/// which the leader hands out to its host's ranks.
pub(crate) fn scatter(
    p: &mut Plan,
    ranks: Ranks,
    hosts: Placement,
    root: u32,
    input: Option<Span>,
    output: Span,
) {
    let (me, block) = (ranks.rank, output.len);
    let mine = hosts.host(me);
    let collector = hosts.collector(mine, root);
    if me == root {
        let input = input.expect("the root has a send buffer");
        let at = |rank: u32| input.sub(rank as usize * block, block);
        p.copy(at(root), output);
        let mut sends = Vec::new();
        for host in 0..hosts.hosts() {
            let members = hosts.members(host);
            if host == mine {
                let others = members.iter().filter(|&&r| r != root);
                sends.extend(others.map(|&rank| (rank, at(rank))));
            } else if consecutive(&members) {
                let run = input.sub(members[0] as usize * block, members.len() * block);
                sends.push((members[0], run));
            } else {
                let held = p.scratch(members.len() * block);
                for (i, &rank) in members.iter().enumerate() {
                    p.copy(at(rank), held.sub(i * block, block));
                }
                sends.push((members[0], held));
            }
        }
        p.round();
        for (to, span) in sends {
            p.send(to, span);
        }
    } else if me == collector {
        let members = hosts.members(mine);
        if members.len() == 1 {
            p.round().recv(root, output);
            return;
        }
        let held = p.scratch(members.len() * block);
        p.round().recv(root, held);
        p.copy(held.sub(0, block), output);
        p.round();
        for (i, &rank) in members.iter().enumerate().skip(1) {
            p.send(rank, held.sub(i * block, block));
        }
    } else {
        p.round().recv(collector, output);
    }
}

/// Rank r's `output` ends with part r (`parts[r]`, offset and length in bytes) of the
/// reduction of every rank's `input`: each host's ranks send their vectors to their leader,
/// which reduces them in rank order; each leader sends each other leader the parts of that
/// one's host (one run where its ranks follow each other, else packed), and reduces what it
/// gets in the hosts' order; then it hands each rank of its host its part. The hosts' order
/// is rank order only where each host holds a run of consecutive ranks: the caller takes this
/// plan for a non-commutative operation only there.
pub(crate) fn reduce_scatter(
    p: &mut Plan,
    ranks: Ranks,
    hosts: Placement,
    input: Span,
    parts: &[(usize, usize)],
    output: Span,
) {
    reduce_scatter_holding(p, ranks, hosts, input, parts, output, HELD_AT_ONCE);
}

/// The most bytes of its ranks' vectors a reduce-scatter's leader receives at once: past it,
/// one vector at a time into one buffer, each reduced before the next comes (15 ranks' vectors
/// of 64 MiB would take a GiB where the ring takes one vector's room).
const HELD_AT_ONCE: usize = 8 << 20;

/// [`reduce_scatter`], its leader receiving at once up to `held_at_once` bytes of its ranks'
/// vectors (the ranks' messages are the same either way).
fn reduce_scatter_holding(
    p: &mut Plan,
    ranks: Ranks,
    hosts: Placement,
    input: Span,
    parts: &[(usize, usize)],
    output: Span,
    held_at_once: usize,
) {
    let me = ranks.rank;
    let members = hosts.members(hosts.host(me));
    if me != members[0] {
        p.round().send(members[0], input);
        p.round().recv(members[0], output);
        return;
    }
    // The host's partial result, its ranks' vectors reduced in rank order (the leader's
    // first: it is the host's lowest rank).
    let partial = p.scratch(input.len);
    p.copy(input, partial);
    if (members.len() - 1) * input.len <= held_at_once {
        p.round();
        let incoming: Vec<Span> = members[1..]
            .iter()
            .map(|&rank| {
                let vector = p.scratch(input.len);
                p.recv(rank, vector);
                vector
            })
            .collect();
        for vector in incoming {
            p.reduce(vector, partial, false);
        }
    } else {
        let vector = p.scratch(input.len);
        for &rank in &members[1..] {
            p.round().recv(rank, vector);
            p.reduce(vector, partial, false);
        }
    }
    // Each host's parts of the partial result, packed in its ranks' order.
    let portion = |p: &mut Plan, host: u32| -> (Span, Vec<u32>) {
        let members = hosts.members(host);
        let len = members.iter().map(|&r| parts[r as usize].1).sum();
        let first = parts[members[0] as usize].0;
        let runs_on = members
            .windows(2)
            .all(|w| parts[w[1] as usize].0 == parts[w[0] as usize].0 + parts[w[0] as usize].1);
        if runs_on {
            return (partial.sub(first, len), members);
        }
        let packed = p.scratch(len);
        let mut at = 0;
        for &rank in &members {
            let (offset, part) = parts[rank as usize];
            p.copy(partial.sub(offset, part), packed.sub(at, part));
            at += part;
        }
        (packed, members)
    };
    let mine = hosts.host(me);
    let (own, _) = portion(p, mine);
    let outgoing: Vec<(u32, Span)> = (0..hosts.hosts())
        .filter(|&h| h != mine)
        .map(|h| {
            let (span, members) = portion(p, h);
            (members[0], span)
        })
        .collect();
    // Every host's portion for this host, in the hosts' order: this leader's own, and one
    // from each other leader.
    p.round();
    let from_hosts: Vec<Span> = (0..hosts.hosts())
        .map(|h| match h == mine {
            true => own,
            false => {
                let from = hosts.members(h)[0];
                let theirs = p.scratch(own.len);
                p.recv(from, theirs);
                theirs
            }
        })
        .collect();
    for (to, span) in outgoing {
        p.send(to, span);
    }
    let result = p.scratch(own.len);
    p.copy(from_hosts[0], result);
    for &later in &from_hosts[1..] {
        p.reduce(later, result, false);
    }
    // Each rank of the host its part.
    p.round();
    let mut at = 0;
    for &rank in &members {
        let part = parts[rank as usize].1;
        match rank == me {
            true => p.copy(result.sub(at, part), output),
            false => p.send(rank, result.sub(at, part)),
        };
        at += part;
    }
}

/// Every rank's `output` ends with block r of rank r's `input` in its place r (blocks of
/// `block` bytes), for short blocks: each rank sends its whole `input` to its host's leader
/// and takes its whole `output` back from it; each leader sends each other leader, in one
/// message, the blocks its host's ranks send to that host's ranks (sender by sender, each
/// sender's blocks in the receivers' order), and builds its ranks' outputs from its own
/// host's inputs and the other leaders' messages. A pair of hosts of m and k ranks trades 2
/// messages across the network instead of 2 * m * k, the same bytes; each leader copies
/// every block of its host twice more, which pays while a block costs less to copy than a
/// message costs to send.
pub(crate) fn all_to_all(p: &mut Plan, ranks: Ranks, hosts: Placement, input: Span, output: Span) {
    let (me, n) = (ranks.rank, ranks.size as usize);
    let block = input.len / n.max(1);
    let members = hosts.members(hosts.host(me));
    if me != members[0] {
        p.round().send(members[0], input).recv(members[0], output);
        return;
    }
    let m = members.len();
    // Every input of this host, in its ranks' order.
    let inputs = p.scratch(m * input.len);
    p.copy(input, inputs.sub(0, input.len));
    p.round();
    for (i, &rank) in members.iter().enumerate().skip(1) {
        p.recv(rank, inputs.sub(i * input.len, input.len));
    }
    let sent_by = |i: usize, to: u32| inputs.sub(i * input.len + to as usize * block, block);
    // What each other host gets from this one, packed after the receives.
    let others: Vec<(u32, Vec<u32>)> = (0..hosts.hosts())
        .filter(|&h| h != hosts.host(me))
        .map(|h| (h, hosts.members(h)))
        .collect();
    let outgoing: Vec<Span> = others
        .iter()
        .map(|(_, theirs)| {
            let packed = p.scratch(m * theirs.len() * block);
            let mut at = 0;
            for i in 0..m {
                for &to in theirs {
                    p.copy(sent_by(i, to), packed.sub(at, block));
                    at += block;
                }
            }
            packed
        })
        .collect();
    p.round();
    let incoming: Vec<Span> = others
        .iter()
        .map(|(_, theirs)| {
            let packed = p.scratch(theirs.len() * m * block);
            p.recv(theirs[0], packed);
            packed
        })
        .collect();
    for ((_, theirs), &packed) in others.iter().zip(&outgoing) {
        p.send(theirs[0], packed);
    }
    // Each rank of this host's output, block by block in the senders' order: a block from
    // this host's inputs, or from the message of the sender's host.
    let mut whence: Vec<Option<(usize, usize)>> = vec![None; n];
    for (o, (_, theirs)) in others.iter().enumerate() {
        for (i, &from) in theirs.iter().enumerate() {
            whence[from as usize] = Some((o, i));
        }
    }
    let outputs: Vec<Span> = (0..m)
        .map(|j| match j {
            0 => output,
            _ => p.scratch(output.len),
        })
        .collect();
    for (j, &out) in outputs.iter().enumerate() {
        let to = members[j];
        for from in 0..n as u32 {
            let piece = match whence[from as usize] {
                Some((o, i)) => incoming[o].sub((i * m + j) * block, block),
                None => {
                    let i = members.binary_search(&from).expect("a rank of this host");
                    sent_by(i, to)
                }
            };
            p.copy(piece, out.sub(from as usize * block, block));
        }
    }
    p.round();
    for (j, &out) in outputs.iter().enumerate().skip(1) {
        p.send(members[j], out);
    }
}

/// The messages of [`all_to_all`], each of `empty` (no bytes), in its order: each rank sends
/// its host's leader one and takes one back, and the leaders trade one between each pair of
/// hosts. A leader passes on what it heard after hearing it (its ranks', then the other
/// leaders'), so every rank has heard from every other, through the leaders, by the end: what
/// a plan runs first that may meet ranks running [`all_to_all`] (the schedule's notes).
pub(crate) fn all_to_all_messages(p: &mut Plan, ranks: Ranks, hosts: Placement, empty: Span) {
    let me = ranks.rank;
    let mine = hosts.host(me);
    let members = hosts.members(mine);
    if me != members[0] {
        p.round().send(members[0], empty).recv(members[0], empty);
        return;
    }
    p.round();
    for &rank in &members[1..] {
        p.recv(rank, empty);
    }
    let leaders: Vec<u32> = (0..hosts.hosts())
        .filter(|&h| h != mine)
        .map(|h| hosts.members(h)[0])
        .collect();
    p.round();
    for &leader in &leaders {
        p.recv(leader, empty);
    }
    for &leader in &leaders {
        p.send(leader, empty);
    }
    p.round();
    for &rank in &members[1..] {
        p.send(rank, empty);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::algorithms::plan_checks::{no_reduction, span, vector};
    use crate::collective::schedule::{simulation, Region};

    /// Every placement of `n` ranks on hosts numbered by their lowest rank (each rank on a
    /// host already used, or on the next one).
    fn placements(n: usize) -> Vec<Vec<u32>> {
        let mut all = vec![vec![0u32]];
        for _ in 1..n {
            all = all
                .into_iter()
                .flat_map(|p: Vec<u32>| {
                    let next = p.iter().max().expect("a rank") + 1;
                    (0..=next).map(move |h| [&p[..], &[h]].concat())
                })
                .collect();
        }
        all
    }

    /// Placements of 1 to 5 ranks, every one, and some of 8 and 9: hosts of 1, 2 and 3
    /// ranks dealt round or in runs.
    fn some_placements() -> Vec<Vec<u32>> {
        let mut all: Vec<Vec<u32>> = (1..=5).flat_map(placements).collect();
        all.push(vec![0, 1, 2, 3, 1, 2, 3, 2]);
        all.push(vec![0, 1, 1, 2, 2, 2, 3, 3]);
        all.push(vec![0, 0, 0, 1, 2, 2, 1, 0, 2]);
        all
    }

    fn ranks(rank: usize, n: usize) -> Ranks {
        Ranks {
            rank: rank as u32,
            size: n as u32,
        }
    }

    #[test]
    fn gathers_and_scatters_on_every_placement_and_root() {
        let block = 3;
        for host_of in some_placements() {
            let (n, hosts) = (host_of.len(), Placement::new(&host_of));
            let everyone: Vec<u8> = (0..n).flat_map(|r| vector(r, block)).collect();
            for root in 0..n {
                let plans = (0..n)
                    .map(|r| {
                        let mut p = Plan::default();
                        let output = (r == root).then(|| span(Region::Recv, n * block));
                        let input = span(Region::Send, block);
                        gather(&mut p, ranks(r, n), hosts, root as u32, input, output);
                        p
                    })
                    .collect();
                let sends = (0..n).map(|r| vector(r, block)).collect();
                let lens: Vec<usize> = (0..n)
                    .map(|r| if r == root { n * block } else { 0 })
                    .collect();
                let got = simulation::run(plans, sends, &lens, 1, no_reduction);
                assert_eq!(got[root], everyone, "gather to {root} on {host_of:?}");

                let plans = (0..n)
                    .map(|r| {
                        let mut p = Plan::default();
                        let input = (r == root).then(|| span(Region::Send, n * block));
                        let output = span(Region::Recv, block);
                        scatter(&mut p, ranks(r, n), hosts, root as u32, input, output);
                        p
                    })
                    .collect();
                let sends = (0..n)
                    .map(|r| {
                        if r == root {
                            everyone.clone()
                        } else {
                            Vec::new()
                        }
                    })
                    .collect();
                let got = simulation::run(plans, sends, &vec![block; n], 1, no_reduction);
                for (r, got) in got.iter().enumerate() {
                    assert_eq!(*got, vector(r, block), "scatter from {root} on {host_of:?}");
                }
            }
        }
    }

    /// All-gathers of parts of any length (rank r's `r % 3 * 2` bytes: some empty), placed
    /// in reverse rank order with a gap before each, on every placement: every rank's
    /// buffer ends with every part in its place and the gaps untouched.
    #[test]
    fn all_gathers_of_uneven_parts_on_every_placement() {
        for host_of in some_placements() {
            let (n, hosts) = (host_of.len(), Placement::new(&host_of));
            let lens: Vec<usize> = (0..n).map(|r| r % 3 * 2).collect();
            let mut at = 0;
            let mut placed = vec![(0, 0); n];
            for r in (0..n).rev() {
                placed[r] = (at + 1, lens[r]);
                at += 1 + lens[r];
            }
            let plans = (0..n)
                .map(|r| {
                    let mut p = Plan::default();
                    let parts = crate::collective::build::parts(Region::Recv, &placed);
                    let input = span(Region::Send, lens[r]);
                    all_gather_varcount(&mut p, ranks(r, n), hosts, input, &parts);
                    p
                })
                .collect();
            let sends = (0..n).map(|r| vector(r, lens[r])).collect();
            let got = simulation::run(plans, sends, &vec![at; n], 1, no_reduction);
            for (r, got) in got.iter().enumerate() {
                let mut expected = vec![0x5a; at];
                for (s, &(offset, len)) in placed.iter().enumerate() {
                    expected[offset..offset + len].copy_from_slice(&vector(s, len));
                }
                assert_eq!(*got, expected, "rank {r} on {host_of:?}");
            }
        }
    }

    /// Gathers and scatters of parts of any length (rank r's `r % 3 * 2` bytes: some empty),
    /// placed in reverse rank order with a gap before each, on every placement and to and
    /// from every root: the root's buffer ends with every part in its place and the gaps
    /// untouched, every rank's with its part; every leader's lengths match the root's (the
    /// simulation checks each lengths it carries against those the receiver expects).
    #[test]
    fn gathers_and_scatters_of_uneven_parts_on_every_placement_and_root() {
        for host_of in some_placements() {
            let (n, hosts) = (host_of.len(), Placement::new(&host_of));
            let lens: Vec<usize> = (0..n).map(|r| r % 3 * 2).collect();
            let mut at = 0;
            let mut placed = vec![(0, 0); n];
            for r in (0..n).rev() {
                placed[r] = (at + 1, lens[r]);
                at += 1 + lens[r];
            }
            let whole = |fill: u8| {
                let mut whole = vec![fill; at];
                for (s, &(offset, len)) in placed.iter().enumerate() {
                    whole[offset..offset + len].copy_from_slice(&vector(s, len));
                }
                whole
            };
            for root in 0..n {
                let plans = (0..n)
                    .map(|r| {
                        let mut p = Plan::default();
                        let parts = crate::collective::build::parts(Region::Recv, &placed);
                        let parts = (r == root).then_some(&parts[..]);
                        let input = span(Region::Send, lens[r]);
                        let me = ranks(r, n);
                        gather_varcount(&mut p, me, hosts, root as u32, input, parts);
                        p
                    })
                    .collect();
                let sends = (0..n).map(|r| vector(r, lens[r])).collect();
                let recv_lens: Vec<usize> =
                    (0..n).map(|r| if r == root { at } else { 0 }).collect();
                let got = simulation::run(plans, sends, &recv_lens, 1, no_reduction);
                assert_eq!(got[root], whole(0x5a), "gather to {root} on {host_of:?}");

                let plans = (0..n)
                    .map(|r| {
                        let mut p = Plan::default();
                        let parts = crate::collective::build::parts(Region::Send, &placed);
                        let parts = (r == root).then_some(&parts[..]);
                        let output = span(Region::Recv, lens[r]);
                        let me = ranks(r, n);
                        scatter_varcount(&mut p, me, hosts, root as u32, parts, output);
                        p
                    })
                    .collect();
                let sends = (0..n)
                    .map(|r| if r == root { whole(0) } else { Vec::new() })
                    .collect();
                let got = simulation::run(plans, sends, &lens, 1, no_reduction);
                for (r, got) in got.iter().enumerate() {
                    assert_eq!(
                        *got,
                        vector(r, lens[r]),
                        "scatter from {root} on {host_of:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn all_to_alls_on_every_placement() {
        let block = 2;
        for host_of in some_placements() {
            let (n, hosts) = (host_of.len(), Placement::new(&host_of));
            let plans = (0..n)
                .map(|r| {
                    let mut p = Plan::default();
                    let (input, output) =
                        (span(Region::Send, n * block), span(Region::Recv, n * block));
                    all_to_all(&mut p, ranks(r, n), hosts, input, output);
                    p
                })
                .collect();
            let sends: Vec<Vec<u8>> = (0..n).map(|r| vector(r, n * block)).collect();
            let got = simulation::run(plans, sends.clone(), &vec![n * block; n], 1, no_reduction);
            for (to, got) in got.iter().enumerate() {
                let expected: Vec<u8> = (0..n)
                    .flat_map(|from| sends[from][to * block..][..block].to_vec())
                    .collect();
                assert_eq!(*got, expected, "all_to_all to {to} on {host_of:?}");
            }
        }
    }

    /// Ranks running the leaders' all-to-all beside ranks running its messages empty (the
    /// pairwise plan's start across hosts), any of them either way: every rank ends.
    #[test]
    fn the_leaders_all_to_all_meets_its_messages_on_any_mix_of_ranks() {
        for host_of in some_placements() {
            let (n, hosts) = (host_of.len(), Placement::new(&host_of));
            for leaders_plan in 0..1u32 << n.min(5) {
                let plans = (0..n)
                    .map(|r| {
                        let mut p = Plan::default();
                        let empty = span(Region::Recv, 0);
                        match (leaders_plan >> r) & 1 {
                            1 => all_to_all(&mut p, ranks(r, n), hosts, empty, empty),
                            _ => all_to_all_messages(&mut p, ranks(r, n), hosts, empty),
                        }
                        p
                    })
                    .collect();
                let got = simulation::run(plans, vec![vec![]; n], &vec![0; n], 1, no_reduction);
                assert_eq!(
                    got,
                    vec![Vec::<u8>::new(); n],
                    "{host_of:?}, {leaders_plan:b}"
                );
            }
        }
    }

    /// `higher ∘ lower` of two affine maps of bytes, `x -> a * x + b` (mod 256), as two bytes:
    /// associative, not commutative.
    fn compose(lower: &[u8], higher: &[u8]) -> Vec<u8> {
        let a = higher[0].wrapping_mul(lower[0]);
        let b = higher[0].wrapping_mul(lower[1]).wrapping_add(higher[1]);
        vec![a, b]
    }

    /// The sum of two pairs of bytes: commutative.
    fn sum(x: &[u8], y: &[u8]) -> Vec<u8> {
        vec![x[0].wrapping_add(y[0]), x[1].wrapping_add(y[1])]
    }

    /// How two elements reduce: `fold(lower, higher)`.
    type Fold = fn(&[u8], &[u8]) -> Vec<u8>;

    #[test]
    fn reduce_scatters_keep_rank_order_on_runs_of_ranks() {
        for host_of in some_placements() {
            let (n, hosts) = (host_of.len(), Placement::new(&host_of));
            // Parts of 0 to 2 maps (2 bytes each), uneven.
            let parts: Vec<(usize, usize)> = (0..n)
                .scan(0, |at, r| {
                    let len = 2 * (r % 3);
                    *at += len;
                    Some((*at - len, len))
                })
                .collect();
            let total: usize = parts.iter().map(|p| p.1).sum();
            let sends: Vec<Vec<u8>> = (0..n)
                .map(|r| {
                    vector(r, total)
                        .chunks(2)
                        .flat_map(|m| [m[0] | 1, m[1]])
                        .collect()
                })
                .collect();
            let runs = host_of.windows(2).all(|w| w[0] <= w[1]);
            let (commutative, fold): (bool, Fold) = match runs {
                true => (false, compose),
                false => (true, sum),
            };
            let whole: Vec<u8> = (0..total / 2)
                .flat_map(|e| {
                    (1..n).fold(sends[0][2 * e..2 * e + 2].to_vec(), |acc, r| {
                        fold(&acc, &sends[r][2 * e..2 * e + 2])
                    })
                })
                .collect();
            // The leaders' ranks' vectors all at once, and one at a time.
            for held in [usize::MAX, 0] {
                let plans = (0..n)
                    .map(|r| {
                        let mut p = Plan::default();
                        let (input, output) =
                            (span(Region::Send, total), span(Region::Recv, parts[r].1));
                        let (me, all) = (ranks(r, n), &parts);
                        reduce_scatter_holding(&mut p, me, hosts, input, all, output, held);
                        p
                    })
                    .collect();
                let lens: Vec<usize> = parts.iter().map(|p| p.1).collect();
                let got = simulation::run(plans, sends.clone(), &lens, 2, fold);
                for (r, got) in got.iter().enumerate() {
                    let (at, len) = parts[r];
                    assert_eq!(
                        got[..],
                        whole[at..at + len],
                        "rank {r} on {host_of:?} (commutative: {commutative}, held {held})"
                    );
                }
            }
        }
    }

    #[test]
    fn a_collector_is_the_root_on_its_host_else_the_lowest_rank() {
        // Ranks dealt round 3 hosts of 1, 2 and 3 ranks: 0 1 2 1 2 2.
        let host_of = [0, 1, 2, 1, 2, 2];
        let hosts = Placement::new(&host_of);
        assert_eq!(hosts.hosts(), 3);
        assert_eq!(hosts.members(2), [2, 4, 5]);
        assert_eq!(hosts.collector(2, 4), 4);
        assert_eq!(hosts.collector(1, 4), 1);
        assert_eq!(hosts.collector(0, 4), 0);
        assert!(consecutive(&[3, 4, 5]));
        assert!(!consecutive(&[2, 4, 5]));
    }
}
