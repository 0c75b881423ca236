//! All-reduce: every rank ends with the reduction of every rank's vector.
//!
//! Each function starts from `acc` holding this rank's own vector and leaves the result there.

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
/// doubling, each moving half as much as the round before. Best for long vectors; the halving
/// pairs nearest ranks first so that each partial result covers a run of ranks in order.
///
/// Starts from this rank's vector in `own` and leaves the result in `acc`. For a commutative
/// operation on a rank that folds in no other, the first halving sends from `own` and
/// receives straight into `acc`, reducing `own`'s kept half into it: the vector is never
/// copied whole (with two ranks, nothing is copied but by the transfers).
pub(crate) fn rabenseifner(
    p: &mut Plan,
    ranks: Ranks,
    own: Span,
    acc: Span,
    element: usize,
    commutative: bool,
) {
    let fold = Fold::new(ranks.size);
    let role = fold.role(ranks.rank);
    let mut direct =
        commutative && fold.p2 > 1 && matches!(role, FoldRole::Doubling { folded: None, .. });
    if !direct {
        p.copy(own, acc);
    }
    let tmp = p.scratch(acc.len);
    let (v, folded) = match role {
        FoldRole::Folded { partner } => {
            p.round().send(partner, acc);
            p.round().recv(partner, acc);
            return;
        }
        FoldRole::Doubling {
            virtual_rank,
            folded,
        } => (virtual_rank, folded),
    };
    if let Some(folded) = folded {
        p.round().recv(folded, tmp);
        p.reduce(tmp, acc, true);
    }
    let within = |span: Span, (lo, hi): (usize, usize)| span.sub(lo * element, (hi - lo) * element);
    let elements = |range| within(acc, range);
    let (mut lo, mut hi) = (0, acc.len / element);
    let mut halvings = Vec::new();
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
                .recv(peer, elements(kept));
            p.reduce(within(own, kept), elements(kept), v < partner);
            direct = false;
        } else {
            p.round()
                .send(peer, elements(given))
                .recv(peer, within(tmp, kept));
            p.reduce(within(tmp, kept), elements(kept), partner < v);
        }
        halvings.push((peer, kept, given));
        (lo, hi) = kept;
        mask <<= 1;
    }
    for (peer, kept, given) in halvings.into_iter().rev() {
        p.round()
            .send(peer, elements(kept))
            .recv(peer, elements(given));
    }
    if let Some(folded) = folded {
        p.round().send(folded, acc);
    }
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
