//! From a collective call to its plan: where the data starts and ends (the send and receive
//! buffers), which algorithm runs, and how the call's buffers are cut into per-rank parts.

use super::algorithms::hosts::{self, Placement};
use super::algorithms::{allgather, allreduce, exchange, tree, Ranks};
use super::schedule::{Follow, Plan, Region, Release, Span};
use super::select::{
    self, Allgather, AllgatherVarcount, Allreduce, Alltoall, Broadcast, Reduce, ReduceScatter,
    Rooted,
};
use crate::error::Cause;

fn send(len: usize) -> Span {
    Span::new(Region::Send, 0, len)
}

fn recv(len: usize) -> Span {
    Span::new(Region::Recv, 0, len)
}

/// Per-rank parts of `region`, from (offset, length) pairs in bytes.
pub(crate) fn parts(region: Region, parts: &[(usize, usize)]) -> Vec<Span> {
    parts
        .iter()
        .map(|&(offset, len)| Span::new(region, offset, len))
        .collect()
}

/// `size` equal blocks of `block` bytes.
fn blocks(region: Region, block: usize, size: u32) -> Vec<Span> {
    parts(region, &equal_parts(block, size))
}

pub(crate) fn barrier(ranks: Ranks) -> Plan {
    let mut p = Plan::default();
    exchange::dissemination_barrier(&mut p, ranks);
    p
}

/// A broadcast of `len` bytes, cut (when scattered) at multiples of `element`, the basic
/// element's size that every rank's type shares ([`Datatype::basic_size`]).
///
/// [`Datatype::basic_size`]: crate::datatype::Datatype::basic_size
///
/// The tree's algorithms start down the root's binomial tree, so a rank other than the root
/// follows the algorithm its parent's message names where that is not its own. The linear
/// one is chosen by the number of ranks alone (`select::broadcast`), the same on every rank
/// whatever its length.
pub(crate) fn broadcast(
    ranks: Ranks,
    root: u32,
    len: usize,
    element: usize,
) -> Result<Plan, Cause> {
    let mut p = broadcast_by(
        select::broadcast(len, ranks.size)?,
        ranks,
        root,
        len,
        element,
    );
    if ranks.rank != root {
        p.follow(Follow {
            plan: broadcast_as,
            ranks,
            root,
            len,
            element,
        });
    }
    Ok(p)
}

const BROADCASTS: [Broadcast; 3] = [
    Broadcast::Binomial,
    Broadcast::ScatterAllgather,
    Broadcast::Linear,
];

/// The broadcast algorithm of mark index `algorithm`, for a rank that follows its parent.
fn broadcast_as(follow: &Follow, algorithm: usize) -> Plan {
    let Follow {
        ranks,
        root,
        len,
        element,
        ..
    } = *follow;
    broadcast_by(BROADCASTS[algorithm], ranks, root, len, element)
}

fn broadcast_by(algorithm: Broadcast, ranks: Ranks, root: u32, len: usize, element: usize) -> Plan {
    let mut p = Plan::default();
    debug_assert_eq!(BROADCASTS[algorithm as usize], algorithm);
    match algorithm {
        Broadcast::Binomial => tree::broadcast(&mut p, ranks, root, recv(len)),
        Broadcast::ScatterAllgather => {
            tree::broadcast_scatter_allgather(&mut p, ranks, root, recv(len), element.max(1))
        }
        Broadcast::Linear => exchange::linear_broadcast(&mut p, ranks, root, recv(len)),
    }
    // Not `rooted`: a broadcast's root has no argument only it can refuse, so it never runs
    // the call draining, and its three algorithms take every bit of the mark, the refusal's
    // included.
    p.mark(algorithm.marked());
    p
}

pub(crate) fn reduce(
    ranks: Ranks,
    root: u32,
    len: usize,
    element: usize,
    commutative: bool,
) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    let is_root = ranks.rank == root;
    let output = is_root.then(|| recv(len));
    let (algorithm, by_length) = select::reduce(len)?;
    p.mark(algorithm.marked()).rooted(root);
    // Chosen by length, ranks may straddle the limit: the long algorithm runs the tree's
    // messages first, empty, and both release the ranks down the tree (the schedule's notes).
    let tree_root = tree::reduce_tree_root(root, commutative);
    let release = (ranks.size > 1 && by_length).then_some(Release {
        long: Reduce::ReduceScatterGather.marked(),
        ranks,
        tree_root,
        told: (tree_root != root).then_some(root),
    });
    let mut after = None;
    match algorithm {
        Reduce::Binomial => tree::reduce(&mut p, ranks, root, commutative, send(len), output),
        Reduce::ReduceScatterGather => {
            if release.is_some() {
                tree::reduce(
                    &mut p,
                    ranks,
                    root,
                    commutative,
                    send(0),
                    is_root.then(|| recv(0)),
                );
                after = Some(p.rounds() - 1);
            }
            let element = element.max(1);
            allreduce::reduce_scatter_gather(
                &mut p,
                ranks,
                root,
                send(len),
                output,
                element,
                commutative,
            )
        }
    }
    if let Some(release) = release {
        let end = p.rounds();
        p.release(after.unwrap_or(end - 1), end, release);
    }
    Ok(p)
}

pub(crate) fn all_reduce(
    ranks: Ranks,
    len: usize,
    element: usize,
    commutative: bool,
) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    let (own, acc) = (send(len), recv(len));
    let element = element.max(1);
    let algorithm = select::allreduce(len, commutative)?;
    p.mark(algorithm.marked());
    match algorithm {
        Allreduce::RecursiveDoubling => {
            p.copy(own, acc);
            allreduce::recursive_doubling(&mut p, ranks, acc)
        }
        Allreduce::Rabenseifner => {
            allreduce::rabenseifner(&mut p, ranks, own, acc, element, commutative)
        }
        Allreduce::Ring => {
            p.copy(own, acc);
            // Recursive doubling's exchanges first, empty: what a rank that chose it (or
            // Rabenseifner's halving) sends, so that every rank learns whether all chose
            // the ring before it starts (the schedule's notes).
            let preamble = (ranks.size > 1 && select::allreduce_by_length()?).then(|| {
                allreduce::recursive_doubling(&mut p, ranks, recv(0));
                p.rounds() - 1
            });
            allreduce::ring(&mut p, ranks, acc, element);
            if let Some(after) = preamble {
                let end = p.rounds();
                p.checkpoint(after, end);
            }
        }
    }
    Ok(p)
}

/// Reduce-scatter: rank r ends with part r (offset, length in bytes) of the reduction of
/// every rank's send vector of `total` bytes. `placement` is the ranks' hosts where the
/// hierarchical plan may take the call (see `select::reduce_scatter`).
pub(crate) fn reduce_scatter(
    ranks: Ranks,
    total: usize,
    parts: &[(usize, usize)],
    commutative: bool,
    placement: Option<Placement>,
) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    let own = parts[ranks.rank as usize].1;
    match select::reduce_scatter(commutative, placement.is_some())? {
        ReduceScatter::Hierarchical => {
            let placement = placement.expect("chosen across hosts only");
            hosts::reduce_scatter(&mut p, ranks, placement, send(total), parts, recv(own));
        }
        ReduceScatter::Ring => {
            let acc = p.scratch(total);
            p.copy(send(total), acc);
            let spans: Vec<Span> = parts.iter().map(|&(at, len)| acc.sub(at, len)).collect();
            allreduce::ring_reduce_scatter(&mut p, ranks, &spans);
            p.copy(spans[ranks.rank as usize], recv(own));
        }
        ReduceScatter::ReduceThenScatter => {
            let whole = (ranks.rank == 0).then(|| p.scratch(total));
            tree::reduce(&mut p, ranks, 0, commutative, send(total), whole);
            if parts.iter().all(|part| part.1 == own) {
                tree::scatter(
                    &mut p,
                    ranks,
                    0,
                    whole.map(|w| w.sub(0, own * parts.len())),
                    recv(own),
                );
            } else {
                let outgoing: Option<Vec<Span>> =
                    whole.map(|w| parts.iter().map(|&(at, len)| w.sub(at, len)).collect());
                exchange::linear_scatter(&mut p, 0, outgoing.as_deref(), recv(own));
            }
        }
    }
    Ok(p)
}

pub(crate) fn scan(ranks: Ranks, len: usize, inclusive: bool) -> Plan {
    let mut p = Plan::default();
    exchange::scan(&mut p, ranks, send(len), recv(len), inclusive);
    p
}

/// Gather of `block` bytes from every rank; `is_root` ranks have the receive buffer.
/// `placement` is the ranks' hosts where they lie on several, more than one on some.
pub(crate) fn gather(
    ranks: Ranks,
    root: u32,
    block: usize,
    placement: Option<Placement>,
) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    p.rooted(root);
    let is_root = ranks.rank == root;
    let total = block * ranks.size as usize;
    let (algorithm, by_length) = select::gather(total, placement.is_some())?;
    if algorithm != Rooted::Hierarchical {
        // Across hosts the plan goes by placement alone, the same on every rank: unmarked.
        p.mark(algorithm.gather_marked());
    }
    // By length, as the reduction's: the tree's messages first in the linear plan, and a
    // release down the tree in both.
    let release = (ranks.size > 1 && by_length).then_some(Release {
        long: Rooted::Linear.gather_marked(),
        ranks,
        tree_root: root,
        told: None,
    });
    let mut after = None;
    match algorithm {
        Rooted::Hierarchical => {
            let placement = placement.expect("chosen across hosts only");
            let output = is_root.then(|| recv(total));
            hosts::gather(&mut p, ranks, placement, root, send(block), output);
        }
        Rooted::Binomial => {
            let output = is_root.then(|| recv(total));
            tree::gather(&mut p, ranks, root, send(block), output);
        }
        Rooted::Linear => {
            if release.is_some() {
                tree::gather(&mut p, ranks, root, send(0), is_root.then(|| recv(0)));
                after = Some(p.rounds() - 1);
            }
            let incoming = is_root.then(|| blocks(Region::Recv, block, ranks.size));
            exchange::linear_gather(&mut p, root, send(block), incoming.as_deref());
        }
    }
    if let Some(release) = release {
        let end = p.rounds();
        p.release(after.unwrap_or(end - 1), end, release);
    }
    Ok(p)
}

/// Gather of parts of any length: `incoming` (on the root) places each rank's part.
/// `placement` is the ranks' hosts where they lie on several, more than one on some.
pub(crate) fn gather_varcount(
    ranks: Ranks,
    root: u32,
    own: usize,
    incoming: Option<&[(usize, usize)]>,
    placement: Option<Placement>,
) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    p.rooted(root);
    let incoming = incoming.map(|i| parts(Region::Recv, i));
    match (select::gather_varcount(placement.is_some())?, placement) {
        (Rooted::Hierarchical, Some(placement)) => hosts::gather_varcount(
            &mut p,
            ranks,
            placement,
            root,
            send(own),
            incoming.as_deref(),
        ),
        _ => exchange::linear_gather(&mut p, root, send(own), incoming.as_deref()),
    }
    Ok(p)
}

/// Scatter of `block` bytes to every rank; `placement` as for [`gather`]. Both algorithms by
/// length start down the root's binomial tree, so a rank other than the root follows the
/// algorithm its parent's message names; across hosts the plan goes by placement alone, the
/// same on every rank, so it has nothing to follow.
pub(crate) fn scatter(
    ranks: Ranks,
    root: u32,
    block: usize,
    placement: Option<Placement>,
) -> Result<Plan, Cause> {
    let total = block * ranks.size as usize;
    let algorithm = select::scatter(total, placement.is_some())?;
    if algorithm == Rooted::Hierarchical {
        let mut p = Plan::default();
        p.rooted(root);
        let placement = placement.expect("chosen across hosts only");
        let input = (ranks.rank == root).then(|| send(total));
        hosts::scatter(&mut p, ranks, placement, root, input, recv(block));
        return Ok(p);
    }
    let mut p = scatter_by(algorithm, ranks, root, block);
    if ranks.rank != root {
        p.follow(Follow {
            plan: scatter_as,
            ranks,
            root,
            len: block,
            element: 1,
        });
    }
    Ok(p)
}

/// The scatter algorithms by length, in their marks' order.
const ROOTED: [Rooted; 2] = [Rooted::Binomial, Rooted::Linear];

/// The scatter algorithm of mark index `algorithm`, for a rank that follows its parent.
fn scatter_as(follow: &Follow, algorithm: usize) -> Plan {
    scatter_by(ROOTED[algorithm], follow.ranks, follow.root, follow.len)
}

/// A scatter by length's plan (`ROOTED`'s algorithms only).
fn scatter_by(algorithm: Rooted, ranks: Ranks, root: u32, block: usize) -> Plan {
    let mut p = Plan::default();
    let is_root = ranks.rank == root;
    let total = block * ranks.size as usize;
    debug_assert_eq!(ROOTED[algorithm as usize], algorithm);
    match algorithm {
        Rooted::Hierarchical => unreachable!("a scatter across hosts is planned by `scatter`"),
        Rooted::Binomial => {
            let input = is_root.then(|| send(total));
            tree::scatter(&mut p, ranks, root, input, recv(block));
        }
        Rooted::Linear => {
            let outgoing = is_root.then(|| blocks(Region::Send, block, ranks.size));
            tree::scatter_direct(&mut p, ranks, root, outgoing.as_deref(), recv(block));
        }
    }
    p.mark(algorithm.scatter_marked()).rooted(root);
    p
}

/// Scatter of parts of any length: `outgoing` (on the root) cuts each rank's part;
/// `placement` as for [`gather_varcount`].
pub(crate) fn scatter_varcount(
    ranks: Ranks,
    root: u32,
    outgoing: Option<&[(usize, usize)]>,
    own: usize,
    placement: Option<Placement>,
) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    p.rooted(root);
    let outgoing = outgoing.map(|o| parts(Region::Send, o));
    match (select::scatter_varcount(placement.is_some())?, placement) {
        (Rooted::Hierarchical, Some(placement)) => hosts::scatter_varcount(
            &mut p,
            ranks,
            placement,
            root,
            outgoing.as_deref(),
            recv(own),
        ),
        _ => exchange::linear_scatter(&mut p, root, outgoing.as_deref(), recv(own)),
    }
    Ok(p)
}

pub(crate) fn all_gather(ranks: Ranks, block: usize) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    let total = block * ranks.size as usize;
    let output = recv(total);
    p.copy(send(block), output.sub(ranks.rank as usize * block, block));
    let algorithm = select::allgather(total, ranks.size)?;
    p.mark(algorithm.marked());
    match algorithm {
        Allgather::RecursiveDoubling => {
            allgather::recursive_doubling(&mut p, ranks, send(block), output)
        }
        Allgather::Bruck => allgather::bruck(&mut p, ranks, output),
        Allgather::Ring => {
            // The short algorithm's exchanges first, empty (as for the all-reduce's ring).
            let preamble = match ranks.size > 1 && select::allgather_by_length()? {
                false => None,
                true => {
                    match select::allgather(0, ranks.size)? {
                        Allgather::RecursiveDoubling => {
                            allgather::recursive_doubling(&mut p, ranks, recv(0), recv(0))
                        }
                        _ => allgather::bruck(&mut p, ranks, recv(0)),
                    }
                    Some(p.rounds() - 1)
                }
            };
            // The ring's first message carries this rank's own block alone: from the send
            // buffer, as recursive doubling's does (see there).
            let mut places = blocks(Region::Recv, block, ranks.size);
            places[ranks.rank as usize] = send(block);
            allgather::ring(&mut p, ranks, &places);
            if let Some(after) = preamble {
                let end = p.rounds();
                p.checkpoint(after, end);
            }
        }
    }
    Ok(p)
}

/// All-gather of parts of any length: rank r's into `incoming[r]` (offset, length in bytes)
/// of every receive buffer. `placement` is the ranks' hosts where they lie on several, more
/// than one on some.
pub(crate) fn all_gather_varcount(
    ranks: Ranks,
    incoming: &[(usize, usize)],
    placement: Option<Placement>,
) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    let incoming = parts(Region::Recv, incoming);
    let own = send(incoming[ranks.rank as usize].len);
    match (select::allgather_varcount(placement.is_some())?, placement) {
        (AllgatherVarcount::Hierarchical, Some(placement)) => {
            hosts::all_gather_varcount(&mut p, ranks, placement, own, &incoming)
        }
        _ => {
            p.copy(own, incoming[ranks.rank as usize]);
            allgather::ring(&mut p, ranks, &incoming);
        }
    }
    Ok(p)
}

/// All-to-all: `outgoing[r]` (offset, length in bytes) of the send buffer to rank r, into
/// `incoming[r]` of its receive buffer. `placement` is the ranks' hosts where they lie on
/// several, more than one on some, for equal blocks of `largest` bytes; `ranks_on_host` how
/// many of the ranks share this rank's host, and `shares` whether they outnumber its CPUs
/// (see `select::alltoall`).
pub(crate) fn all_to_all(
    ranks: Ranks,
    outgoing: &[(usize, usize)],
    incoming: &[(usize, usize)],
    largest: usize,
    placement: Option<Placement>,
    ranks_on_host: u32,
    shares: bool,
) -> Result<Plan, Cause> {
    let mut p = Plan::default();
    let total = |parts: &[(usize, usize)]| parts.iter().map(|part| part.1).sum();
    let (sent, received) = (send(total(outgoing)), recv(total(incoming)));
    let (outgoing, incoming) = (parts(Region::Send, outgoing), parts(Region::Recv, incoming));
    let algorithm = select::alltoall(largest, placement.is_some(), ranks_on_host, shares)?;
    // Across hosts, ranks whose blocks straddle the leaders' limit would run two plans that
    // do not meet: there, chosen by length, both are marked, and the pairwise plan starts
    // with the leaders' plan's messages, empty, after which every rank has heard from every
    // other; a call whose ranks ran both ends there (the schedule's notes).
    let straddles = match placement {
        Some(placement) if select::alltoall_by_length()? => Some(placement),
        _ => None,
    };
    if straddles.is_some() {
        p.mark(algorithm.marked());
    }
    match algorithm {
        Alltoall::Hierarchical => {
            let placement = placement.expect("chosen across hosts only");
            hosts::all_to_all(&mut p, ranks, placement, sent, received);
        }
        Alltoall::Pairwise | Alltoall::Linear => {
            // Linear too (hosts with many ranks choose it, others pairwise, `select::alltoall`).
            let preamble = straddles.map(|placement| {
                hosts::all_to_all_messages(&mut p, ranks, placement, recv(0));
                p.rounds() - 1
            });
            match algorithm {
                Alltoall::Pairwise => exchange::pairwise(&mut p, ranks, &outgoing, &incoming),
                _ => exchange::linear(&mut p, ranks, &outgoing, &incoming),
            }
            if let Some(after) = preamble {
                let end = p.rounds();
                p.checkpoint(after, end);
            }
        }
    }
    Ok(p)
}

/// `size` equal parts of `block` bytes, as (offset, length) pairs.
pub(crate) fn equal_parts(block: usize, size: u32) -> Vec<(usize, usize)> {
    (0..size as usize).map(|r| (r * block, block)).collect()
}

/// MPI 3's neighbourhood exchange on a Cartesian grid: `outgoing[i]` goes to neighbour `i`
/// and `incoming[i]` comes from it, in one round, where the neighbours are in
/// `Grid::neighbours`' order (per dimension, the source then the destination of a shift by
/// 1) and `None` is past a non-periodic edge (no transfer; the part is left as it was).
///
/// A peer may be a neighbour twice (both sides of a periodic dimension of extent 1 or 2):
/// the messages between two ranks share a tag, so they match in the order they were posted.
/// Receives go in neighbour order, the source's before the destination's of each
/// dimension; sends, per dimension, to the destination first: what a rank sends towards its
/// destination is what that rank receives from its source, so both ends order a pair's
/// messages by (dimension, direction) alike.
pub(crate) fn neighbor_exchange(
    neighbours: &[Option<i32>],
    outgoing: &[Span],
    incoming: &[Span],
) -> Plan {
    let mut p = Plan::default();
    p.round();
    for (neighbour, &span) in neighbours.iter().zip(incoming) {
        if let Some(from) = *neighbour {
            p.recv(from as u32, span);
        }
    }
    for pair in (0..neighbours.len()).step_by(2) {
        for i in [pair + 1, pair] {
            if let Some(to) = neighbours[i] {
                p.send(to as u32, outgoing[i]);
            }
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::schedule::simulation;

    /// The choices of the ranks whose length is the long one on `n` ranks (a bit a rank):
    /// every one up to 9 ranks; beyond, each rank alone long, each alone short, and some
    /// pseudo-random others.
    fn mixes(n: u32) -> Vec<u32> {
        let all = ((1u64 << n) - 1) as u32;
        if n <= 9 {
            return (0..=all).collect();
        }
        let mut mixes: Vec<u32> = (0..n).flat_map(|r| [1 << r, all & !(1 << r)]).collect();
        let mut x = 0x9e37_79b9u32;
        for _ in 0..24 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            mixes.push(x & all);
        }
        mixes
    }

    /// Runs `plan(rank, long)` on every rank of `n`, for each choice of the ranks whose
    /// length is the long one ([`mixes`]): every rank ends (the simulation panics where ranks
    /// wait for each other or a message is left over), and where both lengths ran, the ranks
    /// `told` of a call's ranks have seen both algorithms.
    fn every_mix(n: u32, told: impl Fn(u32) -> bool, plan: impl Fn(Ranks, bool) -> Plan) {
        for longs in mixes(n) {
            let plans = (0..n)
                .map(|rank| plan(Ranks { rank, size: n }, (longs >> rank) & 1 == 1))
                .collect();
            let seen = simulation::run_marked(plans);
            if longs != 0 && longs != (1 << n) - 1 {
                for rank in (0..n).filter(|&r| told(r)) {
                    assert_eq!(
                        seen[rank as usize].count_ones(),
                        2,
                        "{n} ranks, long {longs:b}"
                    );
                }
            }
        }
    }

    #[test]
    fn reductions_to_a_root_straddling_their_limit_end_on_every_rank() {
        let short = 64 << 10;
        for n in 1..=16 {
            for root in 0..n {
                for commutative in [true, false] {
                    every_mix(
                        n,
                        |rank| rank == root,
                        |me, long| {
                            let len = if long { short + 8 } else { short };
                            reduce(me, root, len, 4, commutative).expect("a plan")
                        },
                    );
                }
            }
        }
    }

    #[test]
    fn gathers_straddling_their_limit_end_on_every_rank() {
        for n in 1..=16 {
            let block = (256 << 10) / n as usize;
            for root in 0..n {
                every_mix(
                    n,
                    |rank| rank == root,
                    |me, long| gather(me, root, block + long as usize, None).expect("a plan"),
                );
            }
        }
    }

    /// A rooted call's plan for a rank, on the ranks' hosts where they are told.
    type RootedPlan<'p> = dyn Fn(Ranks, Option<Placement>) -> Plan + 'p;

    /// A root that refused its arguments runs its plan drained (`Plan::drained`), the
    /// other ranks theirs: every rank ends (the simulation panics where ranks wait for each
    /// other or a message is left over), for every rooted call on 1 to 9 ranks from every
    /// root, short and long (the long algorithms, and the gather's release down the tree),
    /// on one host and on three (the plans through the hosts' leaders, which learn their
    /// parts' lengths for a scatter of parts of any length).
    #[test]
    fn a_root_that_refused_drains_its_plan_and_every_rank_ends() {
        for n in 1..=9u32 {
            let three_hosts: Vec<u32> = (0..n).map(|r| r % 3).collect();
            for root in 0..n {
                for hosts in [None, Some(&three_hosts[..])] {
                    for block in [8, 64 << 10] {
                        // The root plans the parts of any length empty, its own included
                        // (`calls::Refused`).
                        let none = vec![(0, 0); n as usize];
                        let is_root = |me: Ranks| me.rank == root;
                        let own = |me: Ranks| if is_root(me) { 0 } else { block };
                        let calls: [&RootedPlan; 6] = [
                            &|me, _| reduce(me, root, block, 4, true).expect("a plan"),
                            &|me, _| reduce(me, root, block, 4, false).expect("a plan"),
                            &|me, at| gather(me, root, block, at).expect("a plan"),
                            &|me, at| scatter(me, root, block, at).expect("a plan"),
                            &|me, at| {
                                let incoming = is_root(me).then_some(&none[..]);
                                gather_varcount(me, root, own(me), incoming, at).expect("a plan")
                            },
                            &|me, at| {
                                let outgoing = is_root(me).then_some(&none[..]);
                                scatter_varcount(me, root, outgoing, own(me), at).expect("a plan")
                            },
                        ];
                        for call in calls {
                            let plans = (0..n)
                                .map(|rank| {
                                    let me = Ranks { rank, size: n };
                                    let plan = call(me, hosts.map(Placement::new));
                                    match is_root(me) {
                                        true => plan.drained(),
                                        false => plan,
                                    }
                                })
                                .collect();
                            simulation::run_marked(plans);
                        }
                    }
                }
            }
        }
    }

    /// The ranks' plans of an all-to-all of `block(r)`-byte blocks on `n` ranks, where rank
    /// r shares its host with `on_host(r)` of them, and `placement` is their hosts, if the
    /// plans are told them; no rank shares its CPUs (which `select`'s own test covers), so
    /// that the plans do not depend on this host's.
    fn all_to_all_plans(
        n: u32,
        block: impl Fn(u32) -> usize,
        on_host: impl Fn(u32) -> u32,
        placement: Option<&[u32]>,
    ) -> Vec<Plan> {
        (0..n)
            .map(|rank| {
                let (me, block) = (Ranks { rank, size: n }, block(rank));
                let equal = equal_parts(block, n);
                let placement = placement.map(Placement::new);
                let shares = false;
                all_to_all(me, &equal, &equal, block, placement, on_host(rank), shares)
                    .expect("a plan")
            })
            .collect()
    }

    /// `first` ranks on host 0, then `second` on host 1.
    fn two_hosts(first: u32, second: u32) -> Vec<u32> {
        (0..first + second).map(|r| u32::from(r >= first)).collect()
    }

    #[test]
    fn long_all_to_alls_go_at_once_with_many_ranks_on_a_host() {
        // Rounds of a rank's plan: its own block's copy, then pairwise a peer a round (n in
        // all), linear every message at once (2).
        for (n, on_host, rounds) in [(16, 16, 16), (63, 63, 63), (64, 64, 2), (128, 128, 2)] {
            let plan = &all_to_all_plans(n, |_| 32 << 10, |_| on_host, None)[0];
            assert_eq!(plan.rounds(), rounds, "{n} ranks, {on_host} on the host");
        }
        // Short blocks go at once whatever the ranks on the host.
        assert_eq!(all_to_all_plans(4, |_| 256, |_| 1, None)[0].rounds(), 2);
    }

    #[test]
    fn hosts_that_choose_differently_still_exchange_every_block() {
        // 64 ranks on the first host go at once, the other 6 pairwise: with the hosts
        // unknown to the plans (no hierarchy), and known (the pairwise plan's leaders'
        // messages first, marked).
        let (n, block) = (70u32, 257);
        let hosts = two_hosts(64, 6);
        for placement in [None, Some(&hosts[..])] {
            let on_host = |rank| if rank < 64 { 64 } else { 6 };
            let plans = || all_to_all_plans(n, |_| block, on_host, placement);
            let seen = simulation::run_marked(plans());
            assert!(
                seen.iter().all(|s| s.count_ones() <= 1),
                "{placement:?}: {seen:?}"
            );
            let byte = |from: u32, to: u32| (from * 7 + to * 13) as u8;
            let sends = (0..n)
                .map(|from| (0..n).flat_map(|to| vec![byte(from, to); block]).collect())
                .collect();
            let got = simulation::run(
                plans(),
                sends,
                &vec![n as usize * block; n as usize],
                1,
                crate::collective::algorithms::plan_checks::no_reduction,
            );
            for (to, recv) in got.iter().enumerate() {
                for (from, part) in recv.chunks(block).enumerate() {
                    let want = byte(from as u32, to as u32);
                    assert!(part.iter().all(|&b| b == want), "{from} -> {to}");
                }
            }
        }
    }

    #[test]
    fn all_to_alls_straddling_the_leaders_limit_end_with_many_ranks_on_a_host() {
        // 64 ranks on host 0 (long blocks at once), 2 on host 1 (pairwise); `mixes` takes
        // at most 32 ranks, so some ranks alone on the other side of the limit.
        let (n, hosts) = (66u32, two_hosts(64, 2));
        let mixes: [fn(u32) -> bool; 6] = [
            |_| true,
            |r| r != 0,
            |r| r == 0,
            |r| r != 65,
            |r| r == 65,
            |r| r < 64,
        ];
        for long in mixes {
            let longs: Vec<bool> = (0..n).map(long).collect();
            let block = |r: u32| 256 + usize::from(longs[r as usize]);
            let on_host = |r| if r < 64 { 64 } else { 2 };
            let seen = simulation::run_marked(all_to_all_plans(n, block, on_host, Some(&hosts)));
            let both = longs.iter().any(|&l| l) && !longs.iter().all(|&l| l);
            for (rank, seen) in seen.iter().enumerate() {
                assert_eq!(
                    seen.count_ones(),
                    1 + u32::from(both),
                    "rank {rank}, {longs:?}"
                );
            }
        }
    }

    #[test]
    fn all_to_alls_across_hosts_straddling_the_leaders_limit_end_on_every_rank() {
        let placements: [&[u32]; 7] = [
            &[0, 1, 2, 3, 0],
            &[0, 1, 2, 3, 0, 1, 2, 3],
            &[0, 0, 1, 1, 1],
            &[0, 1, 0, 2, 2, 1, 2],
            &[0, 0, 0, 1, 2, 2, 1, 0, 2],
            &[0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        ];
        for host_of in placements {
            let n = host_of.len() as u32;
            every_mix(
                n,
                |_| true,
                |me, long| {
                    let block = if long { 257 } else { 256 };
                    let equal = equal_parts(block, n);
                    let placement = Some(Placement::new(host_of));
                    let on_host = host_of.iter().filter(|&&h| h == host_of[me.rank as usize]);
                    let on_host = on_host.count() as u32;
                    // Odd ranks share their CPUs: long blocks go linearly there, pairwise on
                    // the even ones, and the two still meet.
                    let shares = me.rank % 2 == 1;
                    all_to_all(me, &equal, &equal, block, placement, on_host, shares)
                        .expect("a plan")
                },
            );
        }
    }
}
