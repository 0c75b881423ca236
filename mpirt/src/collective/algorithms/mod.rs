//! The algorithms, each a function that adds this rank's part to a [`Plan`](super::schedule::Plan).
//! They take spans rather than buffers, so that one algorithm can feed another (a reduction
//! into a scatter) and the API layer decides where data starts and ends.

pub(crate) mod allgather;
pub(crate) mod allreduce;
pub(crate) mod exchange;
pub(crate) mod hosts;
pub(crate) mod tree;

/// Ranks of one collective call: this rank and the communicator's size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ranks {
    pub rank: u32,
    pub size: u32,
}

/// Elements `[start, start + len)` of part `i` when `count` elements are cut into `parts`
/// nearly equal parts.
pub(crate) fn chunk(count: usize, parts: usize, i: usize) -> (usize, usize) {
    let start = count * i / parts;
    (start, count * (i + 1) / parts - start)
}

/// Recursive doubling on any number of ranks: the largest power of two `p2` below the size
/// does the doubling; each of the first `2 * (size - p2)` ranks pairs up, the even one handing
/// its part to the odd one before and getting the result after. Virtual ranks (those of the
/// `p2` that double) keep the order of the real ones, so each virtual rank stands for a
/// contiguous run of real ranks: what keeps non-commutative reductions in rank order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fold {
    pub p2: u32,
    rem: u32,
}

/// What a rank does in a folded recursive doubling.
pub(crate) enum FoldRole {
    /// Hands its part to `partner` (the next rank) and takes the result back.
    Folded { partner: u32 },
    /// Doubles as virtual rank `virtual_rank`, after taking the part of `folded` if any.
    Doubling {
        virtual_rank: u32,
        folded: Option<u32>,
    },
}

impl Fold {
    pub fn new(size: u32) -> Fold {
        let p2 = 1 << (31 - size.leading_zeros());
        Fold { p2, rem: size - p2 }
    }

    pub fn role(&self, rank: u32) -> FoldRole {
        if rank < 2 * self.rem {
            if rank.is_multiple_of(2) {
                FoldRole::Folded { partner: rank + 1 }
            } else {
                FoldRole::Doubling {
                    virtual_rank: rank / 2,
                    folded: Some(rank - 1),
                }
            }
        } else {
            FoldRole::Doubling {
                virtual_rank: rank - self.rem,
                folded: None,
            }
        }
    }

    /// The real rank that doubles as virtual rank `v`.
    pub fn real(&self, v: u32) -> u32 {
        if v < self.rem {
            2 * v + 1
        } else {
            v + self.rem
        }
    }

    /// The lowest real rank that virtual rank `v` stands for (`size` for `v == p2`).
    pub fn first_real(&self, v: u32) -> u32 {
        if v < self.rem {
            2 * v
        } else {
            v + self.rem
        }
    }
}

/// What the algorithms' tests run their plans on (`schedule::simulation`).
#[cfg(test)]
pub(crate) mod plan_checks {
    use crate::collective::schedule::{Region, Span};

    /// A span of `len` bytes at the start of `region`.
    pub(crate) fn span(region: Region, len: usize) -> Span {
        Span::new(region, 0, len)
    }

    /// Rank r's `len` bytes, none alike between ranks.
    pub(crate) fn vector(r: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| (r * 41 + i * 7 + 1) as u8).collect()
    }

    /// The combining function of a plan that reduces nothing.
    pub(crate) fn no_reduction(_: &[u8], _: &[u8]) -> Vec<u8> {
        unreachable!("no reduction here")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_count_in_order() {
        for count in [0, 1, 5, 64, 1000] {
            for parts in 1..10 {
                let mut next = 0;
                for i in 0..parts {
                    let (start, len) = chunk(count, parts, i);
                    assert_eq!(start, next);
                    next += len;
                }
                assert_eq!(next, count);
            }
        }
    }

    #[test]
    fn folding_keeps_virtual_ranks_in_real_order() {
        for size in 1..40 {
            let fold = Fold::new(size);
            assert!(fold.p2 <= size && size < 2 * fold.p2);
            let mut covered = 0;
            for v in 0..fold.p2 {
                assert_eq!(fold.first_real(v), covered);
                covered = fold.first_real(v + 1);
                match fold.role(fold.real(v)) {
                    FoldRole::Doubling { virtual_rank, .. } => assert_eq!(virtual_rank, v),
                    FoldRole::Folded { .. } => panic!("virtual rank {v} is folded"),
                }
            }
            assert_eq!(covered, size);
        }
    }
}
