//! All-reduce: every rank ends with the reduction of every rank's vector; and the reduce that
//! shares Rabenseifner's halving.
//!
//! Recursive doubling and ring start from `acc` holding this rank's own vector and leave the
//! result there; the Rabenseifner forms take the vector in `own`.

use super::{chunk, Fold, FoldRole, Ranks};
use crate::collective::schedule::{Plan, Span};

/// Recursive doubling: log2 rounds, each exchanging the whole vector. Best for short vectors.
pub(crate) fn recursive_doubling(p: &mut Plan, ranks: Ranks, acc: Span) {
    let fold = Fold::new(ranks.size);
    let tmp = p.scratch(acc.len);
    match fold.role(ranks.rank) {
        FoldRole::Folded { partner } => {
            p.round().send(partner, acc);
            p.round().recv(partner, acc);
        }
        FoldRole::Doubling {
            virtual_rank: v,
            folded,
        } => {
            if let Some(folded) = folded {
                p.round().recv(folded, tmp);
                p.reduce(tmp, acc, true);
            }
            let mut mask = 1;
            while mask < fold.p2 {
                let partner = v ^ mask;
                p.exchange(fold.real(partner), acc, tmp);
                p.reduce(tmp, acc, partner < v);
                mask <<= 1;
            }
            if let Some(folded) = folded {
                p.round().send(folded, acc);
            }
        }
    }
}

/// Rabenseifner: a reduce-scatter by recursive halving, then an all-gather by recursive
/// doubling, each moving half as much as the round before. Best for long vectors.
///
/// Starts from this rank's vector in `own` and leaves the result in `acc`. The halving
/// exchanges with the peers recursive doubling does, in its order: where a rank saw another
/// algorithm there, it skips the all-gather (a checkpoint; the schedule's notes).
pub(crate) fn rabenseifner(
    p: &mut Plan,
    ranks: Ranks,
    own: Span,
    acc: Span,
    element: usize,
    commutative: bool,
) {
    let halved = match halving(p, ranks, own, acc, element, commutative) {
        Ok(halved) => halved,
        Err(Folded { partner }) => {
            // A folded rank gets the whole result from the partner it handed its vector to.
            p.round().recv(partner, acc);
            return;
        }
    };
    let halving_done = p.rounds().checked_sub(1);
    for step in halved.steps.iter().rev() {
        p.round()
            .send(step.peer, halved.elements(step.kept))
            .recv(step.peer, halved.elements(step.given));
    }
    if let Some(after) = halving_done {
        let last = p.rounds();
        p.checkpoint(after, last);
    }
    if let Some(folded) = halved.folded {
        p.round().send(folded, acc);
    }
}

/// Reduce by reduce-scatter then gather (Rabenseifner's reduce): the halving of
/// [`rabenseifner`], then the parts travel back up the halving's pairs toward the rank that
/// collects them (the root, or its partner if the root is folded into it). Each rank moves
/// about its vector once instead of log2 n times. The root ends with the result in `output`.
pub(crate) fn reduce_scatter_gather(
    p: &mut Plan,
    ranks: Ranks,
    root: u32,
    own: Span,
    output: Option<Span>,
    element: usize,
    commutative: bool,
) {
    let fold = Fold::new(ranks.size);
    let collector = match fold.role(root) {
        FoldRole::Folded { partner } => partner,
        FoldRole::Doubling { .. } => root,
    };
    let acc = match output {
        Some(output) => output,
        None => p.scratch(own.len),
    };
    let Ok(halved) = halving(p, ranks, own, acc, element, commutative) else {
        if ranks.rank == root {
            p.round().recv(collector, acc);
        }
        return;
    };
    let target = match fold.role(collector) {
        FoldRole::Doubling { virtual_rank, .. } => virtual_rank,
        FoldRole::Folded { .. } => unreachable!("the collector doubles"),
    };
    for step in halved.steps.iter().rev() {
        if halved.v & step.mask != target & step.mask {
            // This rank's part goes to the side of the collector; it is done.
            p.round().send(step.peer, halved.elements(step.kept));
            return;
        }
        p.round().recv(step.peer, halved.elements(step.given));
    }
    if ranks.rank != root {
        p.round().send(root, acc);
    }
}

/// One round of recursive halving: the ranges (in elements) this rank kept and gave away.
struct Halving {
    mask: u32,
    peer: u32,
    kept: (usize, usize),
    given: (usize, usize),
}

/// Where a rank stands after [`halving`].
struct Halved {
    /// Its virtual rank, and the rank folded into it if any.
    v: u32,
    folded: Option<u32>,
    steps: Vec<Halving>,
    acc: Span,
    element: usize,
}

impl Halved {
    /// The span of `acc` that holds elements `[lo, hi)`.
    fn elements(&self, (lo, hi): (usize, usize)) -> Span {
        self.acc.sub(lo * self.element, (hi - lo) * self.element)
    }
}

/// A rank the halving folded into `partner`, which did its part.
struct Folded {
    partner: u32,
}

/// A reduce-scatter by recursive halving, from `own` into `acc`: each round, the pair
/// exchanges half of what it still holds and reduces the half it keeps, so virtual rank v ends
/// with the reduction of its last kept range. The halving pairs nearest ranks first so that
/// each partial result covers a run of ranks in order (non-commutative operations keep rank
/// order). [`Folded`] on a folded rank, which only hands its vector to its partner.
///
/// For a commutative operation on a rank that folds in no other, the first round sends from
/// `own` and receives straight into `acc`, reducing `own`'s kept half into it: the vector is
/// never copied whole (with two ranks, nothing is copied but by the transfers).
fn halving(
    p: &mut Plan,
    ranks: Ranks,
    own: Span,
    acc: Span,
    element: usize,
    commutative: bool,
) -> Result<Halved, Folded> {
    let fold = Fold::new(ranks.size);
    let (v, folded) = match fold.role(ranks.rank) {
        FoldRole::Folded { partner } => {
            p.round().send(partner, own);
            return Err(Folded { partner });
        }
        FoldRole::Doubling {
            virtual_rank,
            folded,
        } => (virtual_rank, folded),
    };
    let mut direct = commutative && fold.p2 > 1 && folded.is_none();
    if !direct {
        p.copy(own, acc);
    }
    let tmp = p.scratch(acc.len);
    if let Some(folded) = folded {
        p.round().recv(folded, tmp);
        p.reduce(tmp, acc, true);
    }
    let within = |span: Span, (lo, hi): (usize, usize)| span.sub(lo * element, (hi - lo) * element);
    let (mut lo, mut hi) = (0, acc.len / element);
    let mut steps = Vec::new();
    let mut mask = 1;
    while mask < fold.p2 {
        let partner = v ^ mask;
        let mid = lo + (hi - lo) / 2;
        let (kept, given) = if v & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let peer = fold.real(partner);
        if direct {
            p.round()
                .send(peer, within(own, given))
                .recv(peer, within(acc, kept));
            p.reduce(within(own, kept), within(acc, kept), v < partner);
            direct = false;
        } else {
            p.round()
                .send(peer, within(acc, given))
                .recv(peer, within(tmp, kept));
            p.reduce(within(tmp, kept), within(acc, kept), partner < v);
        }
        steps.push(Halving {
            mask,
            peer,
            kept,
            given,
        });
        (lo, hi) = kept;
        mask <<= 1;
    }
    Ok(Halved {
        v,
        folded,
        steps,
        acc,
        element,
    })
}

/// Ring: a reduce-scatter then an all-gather around the ring, n-1 steps each, every step
/// moving 1/n of the vector to the next rank. Bandwidth-optimal for long vectors; the partial
/// sums travel around the ring, so only for commutative operations.
pub(crate) fn ring(p: &mut Plan, ranks: Ranks, acc: Span, element: usize) {
    let (rank, n) = (ranks.rank as usize, ranks.size as usize);
    let count = acc.len / element;
    let part = |c: usize| {
        let (start, len) = chunk(count, n, c % n);
        acc.sub(start * element, len * element)
    };
    let tmp = p.scratch(chunk(count, n, n - 1).1 * element);
    let (right, left) = (((rank + 1) % n) as u32, ((rank + n - 1) % n) as u32);
    for step in 0..n - 1 {
        let (out, into) = (part(rank + n - step), part(rank + 2 * n - step - 1));
        let landing = tmp.sub(0, into.len);
        p.round().send(right, out).recv(left, landing);
        p.reduce(landing, into, false);
    }
    // Rank r now holds the whole reduction of part r + 1.
    for step in 0..n - 1 {
        p.round()
            .send(right, part(rank + 1 + n - step))
            .recv(left, part(rank + n - step));
    }
}

/// Reduce-scatter around the ring: rank r ends with the reduction of `parts[r]` (spans of
/// the vector in `acc`, of any lengths) in that part. Commutative operations only, as for
/// [`ring`].
pub(crate) fn ring_reduce_scatter(p: &mut Plan, ranks: Ranks, parts: &[Span]) {
    let (rank, n) = (ranks.rank as usize, ranks.size as usize);
    let longest = parts.iter().map(|s| s.len).max().unwrap_or(0);
    let tmp = p.scratch(longest);
    let (right, left) = (((rank + 1) % n) as u32, ((rank + n - 1) % n) as u32);
    for step in 0..n - 1 {
        let out = parts[(rank + 2 * n - step - 1) % n];
        let into = parts[(rank + 2 * n - step - 2) % n];
        let landing = tmp.sub(0, into.len);
        p.round().send(right, out).recv(left, landing);
        p.reduce(landing, into, false);
    }
}
