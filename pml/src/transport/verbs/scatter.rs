//! The local scatter-gather lists of a read into a receive's blocks: the blocks' runs cut
//! into work requests of at most `max_sge` entries and `max_len` bytes each. A run that does
//! not fit in what is left of a work request ends it and goes on in the next, so every work
//! request but the last is full in one of the two limits: the fewest work requests the runs
//! allow in their order.
//!
//! The read registers the whole span of the blocks, gaps included, and registering pins
//! every page of it (faulting in those never touched) for as long as the registration
//! cache keeps it: [`span_fits`] says where that span is too wide for the bytes read.

use rdma_sys::ibv_sge;

/// A span of blocks up to this many bytes is registered whatever it reads.
pub const SPAN_FLOOR: u64 = 16 << 20;
/// A wider span is registered where it is at most this many times the bytes read.
pub const SPAN_PER_BYTE_READ: u64 = 16;

/// Whether a read of `len` bytes into blocks spanning `span` bytes registers the span and
/// scatters into it: not where it would pin far more than it reads (a few columns of a large
/// matrix), which is staged instead (a registration of `len` bytes and a copy).
pub fn span_fits(span: u64, len: usize) -> bool {
    span <= SPAN_FLOOR.max((len as u64).saturating_mul(SPAN_PER_BYTE_READ))
}

/// One work request's entries: `sges[first..first + count]` of its [`Scatter`], `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub first: usize,
    pub count: usize,
    pub len: usize,
}

/// The entries of a read, and the work requests they are cut into, in order.
pub struct Scatter {
    pub sges: Vec<ibv_sge>,
    pub pieces: Vec<Piece>,
}

/// `runs` (address, length; never empty) under `lkey`, cut into work requests of at most
/// `max_sge` entries (at least 1) and `max_len` bytes (at least 1, at most `u32::MAX`).
pub fn scatter(
    runs: impl IntoIterator<Item = (u64, usize)>,
    lkey: u32,
    max_sge: usize,
    max_len: usize,
) -> Scatter {
    let mut sges = Vec::new();
    let mut pieces = Vec::new();
    let mut open = Piece {
        first: 0,
        count: 0,
        len: 0,
    };
    for (mut addr, mut run) in runs {
        while run > 0 {
            let n = run.min(max_len - open.len);
            sges.push(ibv_sge {
                addr,
                length: n as u32,
                lkey,
            });
            (addr, run) = (addr + n as u64, run - n);
            open.count += 1;
            open.len += n;
            if open.len == max_len || open.count == max_sge {
                pieces.push(open);
                open = Piece {
                    first: sges.len(),
                    count: 0,
                    len: 0,
                };
            }
        }
    }
    if open.count > 0 {
        pieces.push(open);
    }
    Scatter { sges, pieces }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entries(s: &Scatter) -> Vec<(u64, u32)> {
        s.sges.iter().map(|e| (e.addr, e.length)).collect()
    }

    #[test]
    fn a_column_goes_max_sge_runs_a_work_request() {
        let runs = (0..10u64).map(|i| (i * 1024 + 256, 256));
        let s = scatter(runs, 7, 4, 1 << 20);
        assert_eq!(s.sges.len(), 10);
        assert!(s.sges.iter().all(|e| e.lkey == 7));
        let pieces: Vec<_> = s.pieces.iter().map(|p| (p.first, p.count, p.len)).collect();
        assert_eq!(pieces, [(0, 4, 1024), (4, 4, 1024), (8, 2, 512)]);
    }

    #[test]
    fn a_run_longer_than_a_work_request_is_cut_where_one_ends() {
        let s = scatter([(1000, 100), (5000, 10_000)], 1, 4, 4096);
        assert_eq!(
            entries(&s),
            [(1000, 100), (5000, 3996), (8996, 4096), (13_092, 1908)]
        );
        let lens: Vec<_> = s.pieces.iter().map(|p| p.len).collect();
        assert_eq!(lens, [4096, 4096, 1908]);
    }

    #[test]
    fn a_span_wider_than_the_floor_and_the_ratio_is_not_registered() {
        assert!(span_fits(SPAN_FLOOR, 1), "anything up to the floor");
        assert!(!span_fits(SPAN_FLOOR + 1, 1));
        // A column of 1 KiB blocks every 64 KiB of a 1 GiB matrix: 16 MiB in a 1 GiB span.
        assert!(!span_fits(1 << 30, 16 << 20));
        // Wider than the floor, within the ratio.
        let len = 4 << 20;
        assert!(span_fits(len as u64 * SPAN_PER_BYTE_READ, len));
        assert!(!span_fits(len as u64 * SPAN_PER_BYTE_READ + 1, len));
        assert!(span_fits(u64::MAX, usize::MAX), "no overflow");
    }

    proptest! {
        /// Whatever the runs and limits: the entries are the runs in order, cut only where a
        /// work request ends; every work request is within both limits and all but the last
        /// full in one of them; the pieces cover the entries one after another.
        #[test]
        fn work_requests_cover_the_runs_within_the_limits(
            lens in prop::collection::vec(1usize..5000, 0..60),
            max_sge in 1usize..8,
            max_len in 1usize..9000,
        ) {
            let mut at = 0u64;
            let runs: Vec<(u64, usize)> = lens
                .iter()
                .map(|&n| {
                    let run = (at, n);
                    at += n as u64 + 3;
                    run
                })
                .collect();
            let s = scatter(runs.iter().copied(), 9, max_sge, max_len);
            // Entries merged back where they touch are the runs (which never touch).
            let mut merged: Vec<(u64, usize)> = Vec::new();
            for e in &s.sges {
                match merged.last_mut() {
                    Some((addr, n)) if *addr + *n as u64 == e.addr => *n += e.length as usize,
                    _ => merged.push((e.addr, e.length as usize)),
                }
            }
            prop_assert_eq!(&merged, &runs);
            let mut next = 0;
            for (i, p) in s.pieces.iter().enumerate() {
                prop_assert_eq!(p.first, next);
                prop_assert!(p.count >= 1 && p.count <= max_sge && p.len <= max_len);
                let len: usize = s.sges[p.first..p.first + p.count]
                    .iter()
                    .map(|e| e.length as usize)
                    .sum();
                prop_assert_eq!(len, p.len);
                if i + 1 < s.pieces.len() {
                    prop_assert!(p.count == max_sge || p.len == max_len);
                }
                next += p.count;
            }
            prop_assert_eq!(next, s.sges.len());
        }
    }
}
