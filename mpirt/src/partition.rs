//! Buffers split into one part per rank, for the collectives with varying counts
//! (`gather_varcount_into_root`, `all_to_all_varcount_into`, ...): a buffer, a count of
//! elements for each rank and the displacement (in elements) where each rank's part starts.

use std::borrow::Borrow;

use crate::datatype::{Buffer, BufferMut, Datatype};
use crate::point_to_point::Count;

/// Counts and displacements, one of each per rank.
pub trait Partitioned {
    fn counts(&self) -> &[Count];
    fn displs(&self) -> &[Count];
}

/// A partitioned buffer to send from.
pub trait PartitionedBuffer: Partitioned + Buffer {}

/// A partitioned buffer to receive into.
pub trait PartitionedBufferMut: Partitioned + BufferMut {}

/// A buffer to send from, split by rank.
pub struct Partition<'b, B: ?Sized, C, D> {
    buf: &'b B,
    counts: C,
    displs: D,
}

impl<'b, B: Buffer + ?Sized, C: Borrow<[Count]>, D: Borrow<[Count]>> Partition<'b, B, C, D> {
    pub fn new(buf: &'b B, counts: C, displs: D) -> Self {
        Partition {
            buf,
            counts,
            displs,
        }
    }
}

impl<B: ?Sized, C: Borrow<[Count]>, D: Borrow<[Count]>> Partitioned for Partition<'_, B, C, D> {
    fn counts(&self) -> &[Count] {
        self.counts.borrow()
    }
    fn displs(&self) -> &[Count] {
        self.displs.borrow()
    }
}

// SAFETY: the buffer's own pointer, count and datatype, borrowed for as long as the partition.
unsafe impl<B: Buffer + ?Sized, C, D> Buffer for Partition<'_, B, C, D> {
    fn pointer(&self) -> *const u8 {
        self.buf.pointer()
    }
    fn count(&self) -> usize {
        self.buf.count()
    }
    fn datatype(&self) -> Datatype {
        self.buf.datatype()
    }
}

impl<B: Buffer + ?Sized, C: Borrow<[Count]>, D: Borrow<[Count]>> PartitionedBuffer
    for Partition<'_, B, C, D>
{
}

/// A buffer to receive into, split by rank.
pub struct PartitionMut<'b, B: ?Sized, C, D> {
    buf: &'b mut B,
    counts: C,
    displs: D,
}

impl<'b, B: BufferMut + ?Sized, C: Borrow<[Count]>, D: Borrow<[Count]>> PartitionMut<'b, B, C, D> {
    pub fn new(buf: &'b mut B, counts: C, displs: D) -> Self {
        PartitionMut {
            buf,
            counts,
            displs,
        }
    }
}

impl<B: ?Sized, C: Borrow<[Count]>, D: Borrow<[Count]>> Partitioned for PartitionMut<'_, B, C, D> {
    fn counts(&self) -> &[Count] {
        self.counts.borrow()
    }
    fn displs(&self) -> &[Count] {
        self.displs.borrow()
    }
}

// SAFETY: the buffer's own pointer, count and datatype, exclusively borrowed for as long as
// the partition.
unsafe impl<B: BufferMut + ?Sized, C, D> BufferMut for PartitionMut<'_, B, C, D> {
    fn pointer_mut(&mut self) -> *mut u8 {
        self.buf.pointer_mut()
    }
    fn count(&self) -> usize {
        self.buf.count()
    }
    fn datatype(&self) -> Datatype {
        self.buf.datatype()
    }
}

impl<B: BufferMut + ?Sized, C: Borrow<[Count]>, D: Borrow<[Count]>> PartitionedBufferMut
    for PartitionMut<'_, B, C, D>
{
}

/// Each rank's part as (first element, element count), once checked against the buffer's
/// length and the communicator's size.
pub(crate) fn parts<P: Partitioned + ?Sized>(
    what: &str,
    partition: &P,
    elements: usize,
    size: usize,
) -> Result<Vec<(usize, usize)>, crate::error::Cause> {
    let bad = |why: String| crate::error::Cause::InvalidPartition(format!("{what}: {why}"));
    let (counts, displs) = (partition.counts(), partition.displs());
    if counts.len() != size || displs.len() != size {
        return Err(bad(format!(
            "{} counts and {} displacements for {size} ranks",
            counts.len(),
            displs.len()
        )));
    }
    counts
        .iter()
        .zip(displs)
        .enumerate()
        .map(|(rank, (&count, &displ))| {
            if count < 0 || displ < 0 {
                return Err(bad(format!(
                    "rank {rank}'s count {count} or displacement {displ} is negative"
                )));
            }
            let (count, displ) = (count as usize, displ as usize);
            if displ + count > elements {
                return Err(bad(format!(
                    "rank {rank}'s part (elements {displ} to {}) runs past the buffer's \
                     {elements} elements",
                    displ + count
                )));
            }
            Ok((displ, count))
        })
        .collect()
}

/// Checks that no two of `parts` (as [`parts`] returns them) share an element: the parts of
/// a buffer a call writes, where MPI makes it erroneous to write a location twice, and
/// where two transfers landing in one place at once would race. Empty parts share nothing.
/// Part `i` is `owner` `i`'s ("rank", or "neighbour" for a neighbourhood call's).
pub(crate) fn disjoint(
    what: &str,
    owner: &str,
    parts: &[(usize, usize)],
) -> Result<(), crate::error::Cause> {
    let mut by_start: Vec<(usize, usize, usize)> = (0..)
        .zip(parts)
        .filter(|(_, &(_, count))| count > 0)
        .map(|(rank, &(displ, count))| (displ, displ + count, rank))
        .collect();
    by_start.sort_unstable();
    for pair in by_start.windows(2) {
        let ((start, end, rank), (next_start, next_end, next)) = (pair[0], pair[1]);
        if next_start < end {
            return Err(crate::error::Cause::InvalidPartition(format!(
                "{what}: {owner} {next}'s part (elements {next_start} to {next_end}) overlaps \
                 {owner} {rank}'s (elements {start} to {end})"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::disjoint;

    #[test]
    fn parts_sharing_an_element_are_refused_and_touching_or_empty_ones_pass() {
        assert!(disjoint("receive", "rank", &[(0, 2), (2, 2), (4, 0), (1, 0)]).is_ok());
        for (parts, said) in [
            (
                &[(0, 10), (2, 1), (5, 1)][..],
                "rank 1's part (elements 2 to 3) overlaps rank 0's (elements 0 to 10)",
            ),
            (
                &[(6, 2), (0, 4), (3, 1)][..],
                "rank 2's part (elements 3 to 4) overlaps rank 1's (elements 0 to 4)",
            ),
        ] {
            let e = disjoint("receive", "rank", parts).unwrap_err().to_string();
            assert!(e.contains(said), "{e}");
        }
    }
}
