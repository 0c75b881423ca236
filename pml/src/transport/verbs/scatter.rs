//! The work requests of a read: the runs it reads in the peer (one, for a contiguous send;
//! a non-contiguous send's runs, where its offer carried its layout) against the runs it
//! lands in here (one, for contiguous bytes; a receive's blocks), cut into RDMA READs. A
//! READ reads one remote address, so one ends at least where a remote run does; and at
//! `max_sge` local entries and `max_len` bytes. A local run that does not fit in what is left
//! of a work request ends it and goes on in the next, so every work request ends at a remote
//! run's end or full in one of the two limits: the fewest work requests the runs allow in
//! their order.
//!
//! A read into blocks registers their whole span, gaps included, and registering pins
//! every page of it (faulting in those never touched) for as long as the registration
//! cache keeps it: [`span_fits`] says where that span is too wide for the bytes read (and,
//! for a send read in place, too wide for the bytes sent).

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

/// One work request: `len` bytes at `remote` in the peer, into the entries
/// `sges[first..first + count]` of its [`Plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub first: usize,
    pub count: usize,
    pub len: usize,
    pub remote: u64,
}

/// The local entries of a read, and the work requests they are cut into, in order.
pub struct Plan {
    pub sges: Vec<ibv_sge>,
    pub pieces: Vec<Piece>,
}

/// The READs of `remote` runs (address in the peer, length; never empty) into `local` runs
/// (never empty, under `lkey`) of as many bytes, at most `max_sge` entries (at least 1) and
/// `max_len` bytes (at least 1, at most `u32::MAX`) a work request. Remote addresses are a
/// peer's, only added to (wrapping: a peer's layout may name any).
pub fn plan(
    remote: impl IntoIterator<Item = (u64, usize)>,
    local: impl IntoIterator<Item = (u64, usize)>,
    lkey: u32,
    max_sge: usize,
    max_len: usize,
) -> Plan {
    let mut sges = Vec::new();
    let mut pieces = Vec::new();
    let mut local = local.into_iter();
    // What is left of the local run the last work request ended inside.
    let mut rest: Option<(u64, usize)> = None;
    'runs: for (mut at, mut run) in remote {
        while run > 0 {
            let mut piece = Piece {
                first: sges.len(),
                count: 0,
                len: 0,
                remote: at,
            };
            let room = run.min(max_len);
            while piece.len < room && piece.count < max_sge {
                let Some((addr, n)) = rest.take().or_else(|| local.next()) else {
                    break;
                };
                let take = n.min(room - piece.len);
                sges.push(ibv_sge {
                    addr,
                    length: take as u32,
                    lkey,
                });
                piece.count += 1;
                piece.len += take;
                if take < n {
                    rest = Some((addr + take as u64, n - take));
                }
            }
            if piece.count == 0 {
                // The local runs ended first (the caller gives as many bytes each side).
                break 'runs;
            }
            pieces.push(piece);
            (at, run) = (at.wrapping_add(piece.len as u64), run - piece.len);
        }
    }
    Plan { sges, pieces }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entries(s: &Plan) -> Vec<(u64, u32)> {
        s.sges.iter().map(|e| (e.addr, e.length)).collect()
    }

    fn requests(s: &Plan) -> Vec<(u64, usize, usize)> {
        s.pieces
            .iter()
            .map(|p| (p.remote, p.count, p.len))
            .collect()
    }

    #[test]
    fn a_column_goes_max_sge_runs_a_work_request() {
        let runs = (0..10u64).map(|i| (i * 1024 + 256, 256));
        let s = plan([(1 << 40, 2560)], runs, 7, 4, 1 << 20);
        assert_eq!(s.sges.len(), 10);
        assert!(s.sges.iter().all(|e| e.lkey == 7));
        let pieces: Vec<_> = s.pieces.iter().map(|p| (p.first, p.count, p.len)).collect();
        assert_eq!(pieces, [(0, 4, 1024), (4, 4, 1024), (8, 2, 512)]);
        let remote: Vec<_> = s.pieces.iter().map(|p| p.remote - (1 << 40)).collect();
        assert_eq!(
            remote,
            [0, 1024, 2048],
            "each READ goes on where the last ended"
        );
    }

    #[test]
    fn a_run_longer_than_a_work_request_is_cut_where_one_ends() {
        let s = plan([(0, 10_100)], [(1000, 100), (5000, 10_000)], 1, 4, 4096);
        assert_eq!(
            entries(&s),
            [(1000, 100), (5000, 3996), (8996, 4096), (13_092, 1908)]
        );
        let lens: Vec<_> = s.pieces.iter().map(|p| p.len).collect();
        assert_eq!(lens, [4096, 4096, 1908]);
    }

    #[test]
    fn a_non_contiguous_send_takes_a_read_a_run_into_contiguous_bytes() {
        // A column of 1 KiB blocks every 4 KiB, and a block longer than a work request.
        let remote = [(0x1000, 1024), (0x2000, 1024), (0x9000, 5000)];
        let s = plan(remote, [(0x50_0000, 7048)], 3, 4, 4096);
        assert_eq!(
            requests(&s),
            [
                (0x1000, 1, 1024),
                (0x2000, 1, 1024),
                (0x9000, 1, 4096),
                (0xA000, 1, 904)
            ]
        );
        assert_eq!(
            entries(&s),
            [
                (0x50_0000, 1024),
                (0x50_0400, 1024),
                (0x50_0800, 4096),
                (0x50_1800, 904)
            ]
        );
    }

    #[test]
    fn runs_cut_differently_on_each_side_meet_in_work_requests() {
        // Remote runs of 300 against local ones of 200: each READ ends at a remote run's
        // end, the local run it ends inside going on in the next.
        let remote = [(10_000, 300), (20_000, 300)];
        let local = [(0, 200), (1000, 200), (2000, 200)];
        let s = plan(remote, local, 0, 4, 1 << 20);
        assert_eq!(requests(&s), [(10_000, 2, 300), (20_000, 2, 300)]);
        assert_eq!(
            entries(&s),
            [(0, 200), (1000, 100), (1100, 100), (2000, 200)]
        );
        // One entry a READ: each READ takes what one local run holds.
        let s = plan(remote, local, 0, 1, 1 << 20);
        assert_eq!(
            requests(&s),
            [
                (10_000, 1, 200),
                (10_200, 1, 100),
                (20_000, 1, 100),
                (20_100, 1, 200)
            ]
        );
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

    /// Runs of `lens` bytes from `start`, with gaps between (so that none touch).
    fn runs_of(start: u64, lens: &[usize]) -> Vec<(u64, usize)> {
        let mut at = start;
        lens.iter()
            .map(|&n| {
                let run = (at, n);
                at += n as u64 + 3;
                run
            })
            .collect()
    }

    /// `pieces` merged back where they touch.
    fn merged(pieces: impl Iterator<Item = (u64, usize)>) -> Vec<(u64, usize)> {
        let mut out: Vec<(u64, usize)> = Vec::new();
        for (at, len) in pieces {
            match out.last_mut() {
                Some((addr, n)) if *addr + *n as u64 == at => *n += len,
                _ => out.push((at, len)),
            }
        }
        out
    }

    /// Cuts `total` bytes into runs of the lengths `cuts` gives, in turn, the last one short.
    fn lens_of(total: usize, cuts: &[usize]) -> Vec<usize> {
        let mut left = total;
        let mut lens = Vec::new();
        for &n in cuts.iter().cycle() {
            if left == 0 {
                break;
            }
            lens.push(n.min(left));
            left -= n.min(left);
        }
        lens
    }

    proptest! {
        /// Whatever the runs on each side and the limits: the entries are the local runs in
        /// order, and the work requests' remote ranges the remote runs, each cut only where
        /// a work request ends; every work request is within both limits and lies in one
        /// remote run, and all but the last end at a remote run's end or full in one of
        /// the limits; the pieces cover the entries one after another.
        #[test]
        fn work_requests_cover_both_sides_runs_within_the_limits(
            total in 1usize..60_000,
            remote_cuts in prop::collection::vec(1usize..9000, 1..6),
            local_cuts in prop::collection::vec(1usize..5000, 1..6),
            max_sge in 1usize..8,
            max_len in 1usize..9000,
        ) {
            let remote = runs_of(1 << 40, &lens_of(total, &remote_cuts));
            let local = runs_of(0, &lens_of(total, &local_cuts));
            let s = plan(remote.iter().copied(), local.iter().copied(), 9, max_sge, max_len);
            prop_assert!(s.sges.iter().all(|e| e.lkey == 9));
            let entries = s.sges.iter().map(|e| (e.addr, e.length as usize));
            prop_assert_eq!(merged(entries), local);
            prop_assert_eq!(merged(s.pieces.iter().map(|p| (p.remote, p.len))), remote.clone());
            let run_ends: Vec<u64> = remote.iter().map(|&(at, n)| at + n as u64).collect();
            let mut next = 0;
            for (i, p) in s.pieces.iter().enumerate() {
                prop_assert_eq!(p.first, next);
                prop_assert!(p.count >= 1 && p.count <= max_sge && p.len <= max_len);
                let len: usize = s.sges[p.first..p.first + p.count]
                    .iter()
                    .map(|e| e.length as usize)
                    .sum();
                prop_assert_eq!(len, p.len);
                let end = p.remote + p.len as u64;
                prop_assert!(
                    remote.iter().any(|&(at, n)| at <= p.remote && end <= at + n as u64),
                    "a READ across a gap"
                );
                if i + 1 < s.pieces.len() {
                    prop_assert!(
                        p.count == max_sge || p.len == max_len || run_ends.contains(&end)
                    );
                }
                next += p.count;
            }
            prop_assert_eq!(next, s.sges.len());
        }
    }
}
