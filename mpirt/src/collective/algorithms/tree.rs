//! Binomial trees: broadcast, reduce, gather and scatter in ceil(log2 n) rounds.
//!
//! Ranks are numbered relative to the root, so the root is 0 and the subtree under relative
//! rank `v` is the run `[v, v + lowbit(v))`: gather and scatter move whole subtrees as one
//! contiguous message.

use super::Ranks;
use crate::collective::schedule::{Plan, Span};

fn relative(ranks: Ranks, root: u32) -> u32 {
    (ranks.rank + ranks.size - root) % ranks.size
}

fn absolute(v: u32, root: u32, size: u32) -> u32 {
    (v + root) % size
}

/// The lowest set bit of `v`, or the first power of two at or above `size` for the root: the
/// children of `v` are `v + m` for the powers of two `m` below it.
fn child_limit(v: u32, size: u32) -> u32 {
    if v == 0 {
        size.next_power_of_two()
    } else {
        v & v.wrapping_neg()
    }
}

/// Number of relative ranks in the subtree under `v`.
fn subtree(v: u32, size: u32) -> u32 {
    child_limit(v, size).min(size - v)
}

/// The children of `v`, nearest first: (relative rank, subtree size).
fn children(v: u32, size: u32) -> impl Iterator<Item = (u32, u32)> {
    let limit = child_limit(v, size);
    std::iter::successors(Some(1u32), |m| m.checked_mul(2))
        .take_while(move |&m| m < limit)
        .filter(move |&m| v + m < size)
        .map(move |m| (v + m, subtree(v + m, size)))
}

/// This rank's parent (none at the root) and children, nearest first, in the tree rooted at
/// `root`: what a release down the tree goes by (`schedule::Release`).
pub(crate) fn links(ranks: Ranks, root: u32) -> (Option<u32>, Vec<u32>) {
    let (v, size) = (relative(ranks, root), ranks.size);
    let parent = (v != 0).then(|| absolute(v - child_limit(v, size), root, size));
    let kids = children(v, size).map(|(child, _)| absolute(child, root, size));
    (parent, kids.collect())
}

/// The rank whose tree a reduction to `root` goes up: `root` under a commutative operation,
/// else rank 0, whose subtrees are runs of ranks in order ([`reduce`]).
pub(crate) fn reduce_tree_root(root: u32, commutative: bool) -> u32 {
    if commutative {
        root
    } else {
        0
    }
}

/// Every rank ends with the root's `data`.
pub(crate) fn broadcast(p: &mut Plan, ranks: Ranks, root: u32, data: Span) {
    let (v, size) = (relative(ranks, root), ranks.size);
    if v != 0 {
        let parent = v - child_limit(v, size);
        p.round().recv(absolute(parent, root, size), data);
    }
    // Farthest child first: its subtree is the largest and has the most forwarding to do.
    let kids: Vec<_> = children(v, size).collect();
    p.round();
    for (child, _) in kids.into_iter().rev() {
        p.send(absolute(child, root, size), data);
    }
}

/// Every rank ends with the root's `data`, for long messages (van de Geijn): a binomial scatter
/// hands relative rank v its part `part(v)` of the data, then a ring all-gather passes the
/// parts round. Each rank moves about twice the message instead of log2 n times it. Parts are
/// cut in relative order, so a subtree's parts are one contiguous run of `data`.
pub(crate) fn broadcast_scatter_allgather(
    p: &mut Plan,
    ranks: Ranks,
    root: u32,
    data: Span,
    element: usize,
) {
    let (v, size) = (relative(ranks, root), ranks.size);
    let count = data.len / element;
    // Relative ranks [from, to) hold this run of `data`.
    let run = |from: u32, to: u32| {
        let start = super::chunk(count, size as usize, from as usize).0;
        let end = super::chunk(count, size as usize, to as usize - 1);
        data.sub(start * element, (end.0 + end.1 - start) * element)
    };
    if v != 0 {
        let parent = v - child_limit(v, size);
        p.round()
            .recv(absolute(parent, root, size), run(v, v + subtree(v, size)));
    }
    let kids: Vec<_> = children(v, size).collect();
    p.round();
    for (child, count) in kids.into_iter().rev() {
        p.send(absolute(child, root, size), run(child, child + count));
    }
    let parts: Vec<Span> = (0..size)
        .map(|r| {
            let v = (r + size - root) % size;
            run(v, v + 1)
        })
        .collect();
    super::allgather::ring(p, ranks, &parts);
}

/// The root ends with the reduction of every rank's `input` in `output`. A non-commutative
/// operation reduces up a tree rooted at rank 0, where subtrees are runs of ranks in order,
/// and rank 0 hands the result to the root.
pub(crate) fn reduce(
    p: &mut Plan,
    ranks: Ranks,
    root: u32,
    commutative: bool,
    input: Span,
    output: Option<Span>,
) {
    let size = ranks.size;
    let tree_root = reduce_tree_root(root, commutative);
    let v = relative(ranks, tree_root);
    let leaf = v != 0 && children(v, size).next().is_none();
    let acc = match output {
        Some(output) if ranks.rank == tree_root => output,
        // A leaf reduces nothing: it sends its input as it is, with no copy into scratch.
        _ if leaf => input,
        _ => p.scratch(input.len),
    };
    let mut kids = children(v, size);
    match kids.next() {
        // The nearest child's vector lands in the accumulator and this rank's input, lower in
        // rank order, is reduced into it: no copy of the input first.
        Some((child, _)) if !leaf => {
            p.round().recv(absolute(child, tree_root, size), acc);
            p.reduce(input, acc, true);
        }
        _ if !leaf => {
            p.copy(input, acc);
        }
        _ => {}
    }
    let mut incoming = None;
    for (child, _) in kids {
        let tmp = *incoming.get_or_insert_with(|| p.scratch(input.len));
        p.round().recv(absolute(child, tree_root, size), tmp);
        p.reduce(tmp, acc, false);
    }
    if v != 0 {
        let parent = v - child_limit(v, size);
        p.round().send(absolute(parent, tree_root, size), acc);
    }
    if tree_root != root {
        if ranks.rank == tree_root {
            p.round().send(root, acc);
        } else if let Some(output) = output {
            p.round().recv(tree_root, output);
        }
    }
}

/// Copies blocks held in relative order (block `i` of rank `root + i`) to rank order, or back.
fn rotate(p: &mut Plan, from: Span, to: Span, root: u32, size: u32, to_rank_order: bool) {
    let block = from.len / size as usize;
    let (head, tail) = ((size - root) as usize * block, root as usize * block);
    if to_rank_order {
        p.copy(from.sub(0, head), to.sub(tail, head));
        p.copy(from.sub(head, tail), to.sub(0, tail));
    } else {
        p.copy(from.sub(tail, head), to.sub(0, head));
        p.copy(from.sub(0, tail), to.sub(head, tail));
    }
}

/// The root's `output` ends with every rank's `input` block, in rank order.
pub(crate) fn gather(p: &mut Plan, ranks: Ranks, root: u32, input: Span, output: Option<Span>) {
    let (v, size, block) = (relative(ranks, root), ranks.size, input.len);
    let held = subtree(v, size) as usize * block;
    if v != 0 && subtree(v, size) == 1 {
        // A leaf sends its input as it is: a copy into scratch first would cost a pass over
        // the block and hand the parent freshly written lines to read from this core.
        let parent = v - child_limit(v, size);
        p.round().send(absolute(parent, root, size), input);
        return;
    }
    let tmp = match output {
        Some(output) if root == 0 => output,
        _ => p.scratch(held),
    };
    p.copy(input, tmp.sub(0, block));
    p.round();
    for (child, count) in children(v, size) {
        let at = (child - v) as usize * block;
        p.recv(
            absolute(child, root, size),
            tmp.sub(at, count as usize * block),
        );
    }
    if v != 0 {
        let parent = v - child_limit(v, size);
        p.round()
            .send(absolute(parent, root, size), tmp.sub(0, held));
    } else if root != 0 {
        let output = output.expect("the root has a receive buffer");
        rotate(p, tmp, output, root, size, true);
    }
}

/// Every rank's `output` ends with its block of the root's `input`.
pub(crate) fn scatter(p: &mut Plan, ranks: Ranks, root: u32, input: Option<Span>, output: Span) {
    let (v, size, block) = (relative(ranks, root), ranks.size, output.len);
    let held = subtree(v, size) as usize * block;
    if v != 0 && subtree(v, size) == 1 {
        // A leaf receives its part straight into its output, with no scratch to copy out of.
        let parent = v - child_limit(v, size);
        p.round().recv(absolute(parent, root, size), output);
        return;
    }
    let tmp = match input {
        Some(input) if root == 0 => input,
        Some(input) => {
            let tmp = p.scratch(held);
            rotate(p, input, tmp, root, size, false);
            tmp
        }
        None => p.scratch(held),
    };
    if v != 0 {
        let parent = v - child_limit(v, size);
        p.round()
            .recv(absolute(parent, root, size), tmp.sub(0, held));
    }
    let kids: Vec<_> = children(v, size).collect();
    p.round();
    for (child, count) in kids.into_iter().rev() {
        let at = (child - v) as usize * block;
        p.send(
            absolute(child, root, size),
            tmp.sub(at, count as usize * block),
        );
    }
    p.copy(tmp.sub(0, block), output);
}

/// Scatter of long parts: the root sends each rank its part directly, and an empty message
/// goes down the binomial tree beside them, so that each rank's first message comes from its
/// tree parent, as in [`scatter`] (the root's children's first message is their part): a
/// rank whose parent runs the other algorithm follows it (the schedule's notes).
pub(crate) fn scatter_direct(
    p: &mut Plan,
    ranks: Ranks,
    root: u32,
    parts: Option<&[Span]>,
    output: Span,
) {
    if parts.is_some() {
        return super::exchange::linear_scatter(p, root, parts, output);
    }
    let (v, size) = (relative(ranks, root), ranks.size);
    let parent = v - child_limit(v, size);
    let nothing = output.sub(0, 0);
    let first = if parent == 0 { output } else { nothing };
    p.round().recv(absolute(parent, root, size), first);
    p.round();
    for (child, _) in children(v, size) {
        p.send(absolute(child, root, size), nothing);
    }
    if parent != 0 {
        p.recv(root, output);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::algorithms::plan_checks::{no_reduction, span, vector};
    use crate::collective::schedule::{simulation, Region};

    fn ranks(rank: u32, size: u32) -> Ranks {
        Ranks { rank, size }
    }

    /// A leaf of the tree (a rank with no children) moves its block straight between the
    /// caller's buffer and the wire: no scratch, no copy; the others' results are unchanged,
    /// empty blocks included (every rank then "holds" as many bytes as a leaf).
    #[test]
    fn leaves_send_and_receive_in_place() {
        for size in 1..=17u32 {
            for root in [0, size / 2, size - 1] {
                for block in [0, 3] {
                    let is_leaf = |r: u32| {
                        let v = relative(ranks(r, size), root);
                        v != 0 && children(v, size).next().is_none()
                    };
                    let gathers: Vec<Plan> = (0..size)
                        .map(|r| {
                            let mut p = Plan::default();
                            let output =
                                (r == root).then(|| span(Region::Recv, size as usize * block));
                            gather(
                                &mut p,
                                ranks(r, size),
                                root,
                                span(Region::Send, block),
                                output,
                            );
                            p
                        })
                        .collect();
                    let scatters: Vec<Plan> = (0..size)
                        .map(|r| {
                            let mut p = Plan::default();
                            let input =
                                (r == root).then(|| span(Region::Send, size as usize * block));
                            scatter(
                                &mut p,
                                ranks(r, size),
                                root,
                                input,
                                span(Region::Recv, block),
                            );
                            p
                        })
                        .collect();
                    for r in (0..size).filter(|&r| is_leaf(r)) {
                        assert_eq!(
                            gathers[r as usize].staging(),
                            (0, 0),
                            "gather leaf {r}/{size}"
                        );
                        assert_eq!(
                            scatters[r as usize].staging(),
                            (0, 0),
                            "scatter leaf {r}/{size}"
                        );
                    }
                    let everyone: Vec<u8> =
                        (0..size).flat_map(|r| vector(r as usize, block)).collect();
                    let lens: Vec<usize> = (0..size)
                        .map(|r| if r == root { everyone.len() } else { 0 })
                        .collect();
                    let sends = (0..size).map(|r| vector(r as usize, block)).collect();
                    let got = simulation::run(gathers, sends, &lens, 1, no_reduction);
                    assert_eq!(got[root as usize], everyone, "gather to {root} of {size}");
                    let sends = (0..size)
                        .map(|r| if r == root { everyone.clone() } else { vec![] })
                        .collect();
                    let got = simulation::run(
                        scatters,
                        sends,
                        &vec![block; size as usize],
                        1,
                        no_reduction,
                    );
                    for r in 0..size {
                        assert_eq!(
                            got[r as usize],
                            vector(r as usize, block),
                            "scatter from {root} to {r} of {size}"
                        );
                    }
                }
            }
        }
    }

    /// Composition of byte pairs (a, b) standing for x -> a x + b: associative, and not
    /// commutative, so a reduction in another order than the ranks' gives another result.
    fn compose(lower: &[u8], higher: &[u8]) -> Vec<u8> {
        let (a1, b1, a2, b2) = (lower[0], lower[1], higher[0], higher[1]);
        vec![a1.wrapping_mul(a2), a1.wrapping_mul(b2).wrapping_add(b1)]
    }

    /// As above for a reduction: leaves send their input as it is, and a rank with children
    /// receives its nearest child's vector into its accumulator and reduces its own input
    /// into it (no copy of the input), in rank order for an operation that is not commutative.
    #[test]
    fn reductions_copy_no_input() {
        for size in 1..=17u32 {
            for root in [0, size / 2, size - 1] {
                for commutative in [true, false] {
                    let plans: Vec<Plan> = (0..size)
                        .map(|r| {
                            let mut p = Plan::default();
                            let output = (r == root).then(|| span(Region::Recv, 8));
                            let input = span(Region::Send, 8);
                            reduce(&mut p, ranks(r, size), root, commutative, input, output);
                            p
                        })
                        .collect();
                    let tree_root = if commutative { root } else { 0 };
                    for r in 0..size {
                        let v = relative(ranks(r, size), tree_root);
                        let kids = children(v, size).count();
                        let (scratch, locals) = plans[r as usize].staging();
                        // Only a single rank copies (its input to its output); otherwise one
                        // reduction a child.
                        let want_locals = if size == 1 { 1 } else { kids };
                        assert_eq!(locals, want_locals, "rank {r} of {size}");
                        // The accumulator is the output where this rank is the tree's root
                        // and the call's, scratch elsewhere.
                        let acc_in_scratch = kids > 0 && !(r == tree_root && r == root);
                        assert_eq!(scratch > 0, kids > 1 || acc_in_scratch, "rank {r}/{size}");
                    }
                    let sends = (0..size).map(|r| vector(r as usize, 8)).collect();
                    let lens: Vec<usize> =
                        (0..size).map(|r| if r == root { 8 } else { 0 }).collect();
                    // A commutative operation: pairs added element-wise.
                    let add =
                        |x: &[u8], y: &[u8]| vec![x[0].wrapping_add(y[0]), x[1].wrapping_add(y[1])];
                    let combine = |x: &[u8], y: &[u8]| match commutative {
                        true => add(x, y),
                        false => compose(x, y),
                    };
                    let got = simulation::run(plans, sends, &lens, 2, combine);
                    let want: Vec<u8> = (0..4)
                        .flat_map(|i| {
                            let pair = |r: u32| vector(r as usize, 8)[2 * i..2 * i + 2].to_vec();
                            (1..size).fold(pair(0), |acc, r| combine(&acc, &pair(r)))
                        })
                        .collect();
                    assert_eq!(got[root as usize], want, "reduce to {root} of {size}");
                }
            }
        }
    }

    #[test]
    fn subtrees_partition_the_ranks() {
        for size in 1..40u32 {
            assert_eq!(subtree(0, size), size);
            for v in 0..size {
                let below: u32 = children(v, size).map(|(_, n)| n).sum();
                assert_eq!(below + 1, subtree(v, size), "size {size} rank {v}");
            }
        }
    }
}
