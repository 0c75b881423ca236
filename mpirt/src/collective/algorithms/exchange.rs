//! Collectives where ranks exchange with many peers rather than along a tree: the barrier,
//! all-to-all, the prefix scans, the linear gather and scatter (which take parts of any
//! length), and the linear broadcast of a few ranks.

use super::Ranks;
use crate::collective::schedule::{Plan, Region, Span};

/// Dissemination barrier: in round k each rank signals the rank 2^k ahead and waits for the
/// one 2^k behind; after ceil(log2 n) rounds every rank has heard, transitively, from all.
pub(crate) fn dissemination_barrier(p: &mut Plan, ranks: Ranks) {
    let (rank, n) = (ranks.rank, ranks.size);
    let empty = Span::new(Region::Recv, 0, 0);
    let mut distance = 1;
    while distance < n {
        p.round()
            .send((rank + distance) % n, empty)
            .recv((rank + n - distance) % n, empty);
        distance *= 2;
    }
}

/// All-to-all by pairwise exchange: in step s a rank sends to the rank s ahead and receives
/// from the one s behind, one peer at a time, so large messages never pile up.
/// `outgoing[r]` goes to rank r and `incoming[r]` comes from it.
pub(crate) fn pairwise(p: &mut Plan, ranks: Ranks, outgoing: &[Span], incoming: &[Span]) {
    let (rank, n) = (ranks.rank as usize, ranks.size as usize);
    p.copy(outgoing[rank], incoming[rank]);
    for step in 1..n {
        let (to, from) = ((rank + step) % n, (rank + n - step) % n);
        p.round()
            .send(to as u32, outgoing[to])
            .recv(from as u32, incoming[from]);
    }
}

/// All-to-all with every message in flight at once: one round, best for small messages.
pub(crate) fn linear(p: &mut Plan, ranks: Ranks, outgoing: &[Span], incoming: &[Span]) {
    let (rank, n) = (ranks.rank as usize, ranks.size as usize);
    p.copy(outgoing[rank], incoming[rank]);
    p.round();
    for step in 1..n {
        let (to, from) = ((rank + step) % n, (rank + n - step) % n);
        p.recv(from as u32, incoming[from])
            .send(to as u32, outgoing[to]);
    }
}

/// The root receives `incoming[r]` from each rank r (its own part copied from `own`); the
/// others send `own`.
pub(crate) fn linear_gather(p: &mut Plan, root: u32, own: Span, incoming: Option<&[Span]>) {
    match incoming {
        Some(parts) => {
            p.copy(own, parts[root as usize]);
            p.round();
            for (r, &part) in parts.iter().enumerate() {
                if r as u32 != root {
                    p.recv(r as u32, part);
                }
            }
        }
        None => {
            p.round().send(root, own);
        }
    }
}

/// Every rank ends with the root's `data`, straight from the root: one round of sends at the
/// root, one receive at each other rank. On a few ranks every rank's part is then one round
/// (where a tree's inner ranks wait to pass the data on), which an immediate call posts whole
/// as it starts (`schedule::direct`).
pub(crate) fn linear_broadcast(p: &mut Plan, ranks: Ranks, root: u32, data: Span) {
    p.round();
    if ranks.rank == root {
        for to in (0..ranks.size).filter(|&r| r != root) {
            p.send(to, data);
        }
    } else {
        p.recv(root, data);
    }
}

/// The root sends `outgoing[r]` to each rank r (its own part copied to `own`); the others
/// receive into `own`.
pub(crate) fn linear_scatter(p: &mut Plan, root: u32, outgoing: Option<&[Span]>, own: Span) {
    match outgoing {
        Some(parts) => {
            p.copy(parts[root as usize], own);
            p.round();
            for (r, &part) in parts.iter().enumerate() {
                if r as u32 != root {
                    p.send(r as u32, part);
                }
            }
        }
        None => {
            p.round().recv(root, own);
        }
    }
}

/// Prefix reduction by recursive doubling (on any n): rank r ends with the reduction of ranks
/// `0..=r` (inclusive) or `0..r` (exclusive, left untouched on rank 0) in `output`. `partial`
/// holds the reduction of the aligned run of ranks this rank has heard from, which it passes on.
pub(crate) fn scan(p: &mut Plan, ranks: Ranks, input: Span, output: Span, inclusive: bool) {
    let (rank, n) = (ranks.rank, ranks.size);
    let partial = p.scratch(input.len);
    let tmp = p.scratch(input.len);
    p.copy(input, partial);
    if inclusive {
        p.copy(input, output);
    }
    let mut has_result = inclusive;
    let mut mask = 1;
    while mask < n {
        let partner = rank ^ mask;
        if partner < n {
            p.exchange(partner, partial, tmp);
            if partner < rank {
                if has_result {
                    p.reduce(tmp, output, true);
                } else {
                    p.copy(tmp, output);
                    has_result = true;
                }
                p.reduce(tmp, partial, true);
            } else {
                p.reduce(tmp, partial, false);
            }
        }
        mask <<= 1;
    }
}
