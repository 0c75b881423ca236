//! The counts and displacements of the collectives that take a count per rank, for one
//! message size at a time, made once per size outside the timed calls, as OSU makes them.

use crate::mpi::Count;

/// One count and one displacement per rank, laid out for the size last asked for.
pub struct Counts {
    /// Rank r's count of `size` elements among `ranks`.
    layout: fn(r: usize, size: usize, ranks: usize) -> usize,
    size: Option<usize>,
    counts: Vec<Count>,
    displs: Vec<Count>,
}

impl Counts {
    /// Every rank's block `size` elements, one after another (OSU's v forms).
    pub fn blocks(ranks: usize) -> Counts {
        Counts::new(ranks, |_, size, _| size)
    }

    /// `size` elements cut into nearly equal parts, the first `size % ranks` ranks one
    /// element more (with fewer elements than ranks, the first ranks one each): OSU's
    /// reduce_scatter.
    pub fn parts(ranks: usize) -> Counts {
        Counts::new(ranks, |r, size, ranks| {
            size / ranks + usize::from(r < size % ranks)
        })
    }

    fn new(ranks: usize, layout: fn(usize, usize, usize) -> usize) -> Counts {
        Counts {
            layout,
            size: None,
            counts: vec![0; ranks],
            displs: vec![0; ranks],
        }
    }

    /// The counts and displacements for `size`.
    pub fn at(&mut self, size: usize) -> (&[Count], &[Count]) {
        if self.size != Some(size) {
            let ranks = self.counts.len();
            let mut next = 0;
            for (r, (count, displ)) in self.counts.iter_mut().zip(&mut self.displs).enumerate() {
                let c = (self.layout)(r, size, ranks);
                *count = Count::try_from(c).expect("a count fits MPI's int");
                *displ = Count::try_from(next).expect("a displacement fits MPI's int");
                next += c;
            }
            self.size = Some(size);
        }
        (&self.counts, &self.displs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_follow_each_other_and_parts_are_nearly_equal() {
        let mut blocks = Counts::blocks(3);
        assert_eq!(blocks.at(4), (&[4, 4, 4][..], &[0, 4, 8][..]));
        let mut parts = Counts::parts(3);
        assert_eq!(parts.at(8), (&[3, 3, 2][..], &[0, 3, 6][..]));
        assert_eq!(parts.at(1), (&[1, 0, 0][..], &[0, 1, 1][..]));
    }
}
