//! All-gather: every rank ends with every rank's block, in rank order, in `output`; each
//! function starts with this rank's own block already in place.

use super::{Fold, FoldRole, Ranks};
use crate::collective::schedule::{Plan, Span};

/// Recursive doubling: log2 rounds, each doubling the run of blocks a rank holds. Virtual
/// ranks stand for runs of real ranks, so what a rank holds is always one contiguous run.
/// `own` holds this rank's block too (its send buffer): the first message, which carries that
/// block alone, goes from there, so that it neither waits for nor reads the copy into `output`
/// (lines this core has just written, which the peer would have to fetch from it).
pub(crate) fn recursive_doubling(p: &mut Plan, ranks: Ranks, own: Span, output: Span) {
    let fold = Fold::new(ranks.size);
    let block = output.len / ranks.size as usize;
    // The blocks of virtual ranks [v, v + count).
    let run = |v: u32, count: u32| {
        let (first, end) = (fold.first_real(v), fold.first_real(v + count));
        output.sub(first as usize * block, (end - first) as usize * block)
    };
    match fold.role(ranks.rank) {
        FoldRole::Folded { partner } => {
            p.round().send(partner, own);
            p.round().recv(partner, output);
        }
        FoldRole::Doubling {
            virtual_rank: v,
            folded,
        } => {
            if let Some(folded) = folded {
                p.round()
                    .recv(folded, output.sub(folded as usize * block, block));
            }
            let mut mask = 1;
            while mask < fold.p2 {
                let partner = v ^ mask;
                let mine = match folded {
                    None if mask == 1 => own,
                    _ => run(v & !(mask - 1), mask),
                };
                let theirs = run(partner & !(mask - 1), mask);
                p.exchange(fold.real(partner), mine, theirs);
                mask <<= 1;
            }
            if let Some(folded) = folded {
                p.round().send(folded, output);
            }
        }
    }
}

/// Bruck: ceil(log2 n) rounds on any n; in round k a rank sends the 2^k blocks it holds to the
/// rank 2^k below and receives as many from the rank 2^k above, in a scratch buffer that holds
/// blocks relative to this rank, rotated into place at the end.
pub(crate) fn bruck(p: &mut Plan, ranks: Ranks, output: Span) {
    let (rank, n) = (ranks.rank as usize, ranks.size as usize);
    let block = output.len / n;
    let tmp = p.scratch(output.len);
    p.copy(output.sub(rank * block, block), tmp.sub(0, block));
    let mut distance = 1;
    while distance < n {
        let count = distance.min(n - distance);
        p.round()
            .send(
                ((rank + n - distance) % n) as u32,
                tmp.sub(0, count * block),
            )
            .recv(
                ((rank + distance) % n) as u32,
                tmp.sub(distance * block, count * block),
            );
        distance *= 2;
    }
    let head = (n - rank) * block;
    p.copy(tmp.sub(0, head), output.sub(rank * block, head));
    p.copy(tmp.sub(head, rank * block), output.sub(0, rank * block));
}

/// Ring: n-1 steps, each passing one block on to the next rank. Bandwidth-optimal for large
/// blocks, and the one that takes blocks of different lengths (`blocks[r]` is rank r's).
pub(crate) fn ring(p: &mut Plan, ranks: Ranks, blocks: &[Span]) {
    let (rank, n) = (ranks.rank as usize, ranks.size as usize);
    let (right, left) = (((rank + 1) % n) as u32, ((rank + n - 1) % n) as u32);
    for step in 0..n - 1 {
        p.round()
            .send(right, blocks[(rank + n - step) % n])
            .recv(left, blocks[(rank + 2 * n - step - 1) % n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::algorithms::plan_checks::{no_reduction, vector};
    use crate::collective::schedule::{simulation, Region};

    /// Recursive doubling and the ring, with this rank's first message sent from its send
    /// buffer as `build::all_gather` plans them (folded ranks on sizes that are not powers of
    /// two included), end with every block in place on every rank.
    #[test]
    fn first_messages_from_the_send_buffer_gather_every_block() {
        let block = 3;
        for size in 1..=17u32 {
            let total = size as usize * block;
            for ring_order in [false, true] {
                let plans = (0..size)
                    .map(|rank| {
                        let mut p = Plan::default();
                        let (own, output) = (
                            Span::new(Region::Send, 0, block),
                            Span::new(Region::Recv, 0, total),
                        );
                        p.copy(own, output.sub(rank as usize * block, block));
                        let ranks = Ranks { rank, size };
                        if ring_order {
                            let mut places: Vec<Span> = (0..size as usize)
                                .map(|r| output.sub(r * block, block))
                                .collect();
                            places[rank as usize] = own;
                            ring(&mut p, ranks, &places);
                        } else {
                            recursive_doubling(&mut p, ranks, own, output);
                        }
                        p
                    })
                    .collect();
                let sends = (0..size).map(|r| vector(r as usize, block)).collect();
                let got =
                    simulation::run(plans, sends, &vec![total; size as usize], 1, no_reduction);
                let everyone: Vec<u8> = (0..size).flat_map(|r| vector(r as usize, block)).collect();
                for (r, got) in got.iter().enumerate() {
                    assert_eq!(got, &everyone, "rank {r} of {size}, ring {ring_order}");
                }
            }
        }
    }
}
