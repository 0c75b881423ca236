//! The arithmetic of Cartesian grids, with no communication: ranks in row-major order (the
//! last dimension varies fastest), coordinates, shifts, the neighbours neighbourhood
//! collectives use, sub-grids and `MPI_Dims_create`.

use crate::communicator::Rank;
use crate::error::Cause;
use crate::point_to_point::Count;

/// The shape of a Cartesian topology: the extent of each dimension and whether it wraps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    dims: Vec<Count>,
    periods: Vec<bool>,
}

fn invalid(why: String) -> Cause {
    Cause::InvalidTopology(why)
}

impl Grid {
    /// A grid of `dims` (each at least 1), wrapping where `periods` says.
    pub fn new(dims: &[Count], periods: &[bool]) -> Result<Grid, Cause> {
        if dims.len() != periods.len() {
            return Err(invalid(format!(
                "{} dimensions but {} periods",
                dims.len(),
                periods.len()
            )));
        }
        if let Some((d, &extent)) = dims.iter().enumerate().find(|(_, &e)| e < 1) {
            return Err(invalid(format!(
                "dimension {d} has extent {extent}; extents must be at least 1"
            )));
        }
        let grid = Grid {
            dims: dims.to_vec(),
            periods: periods.to_vec(),
        };
        if grid.checked_size().is_none() {
            return Err(invalid(format!(
                "the grid {dims:?} has more points than a rank can number"
            )));
        }
        Ok(grid)
    }

    fn checked_size(&self) -> Option<Rank> {
        self.dims
            .iter()
            .try_fold(1 as Rank, |n, &e| n.checked_mul(e))
    }

    /// The number of points: the ranks the grid takes.
    pub fn size(&self) -> Rank {
        self.checked_size().expect("checked in Grid::new")
    }

    pub fn dims(&self) -> &[Count] {
        &self.dims
    }

    pub fn periods(&self) -> &[bool] {
        &self.periods
    }

    pub fn num_dimensions(&self) -> usize {
        self.dims.len()
    }

    /// Checks that `len` coordinates (or flags) are one per dimension.
    pub fn check_len(&self, what: &str, len: usize) -> Result<(), Cause> {
        if len == self.dims.len() {
            Ok(())
        } else {
            Err(invalid(format!(
                "{what} has {len} entries but the grid has {} dimensions",
                self.dims.len()
            )))
        }
    }

    /// The rank at `coords` (`MPI_Cart_rank`): a periodic coordinate wraps, a non-periodic one
    /// outside its dimension is an error.
    pub fn rank_of(&self, coords: &[Count]) -> Result<Rank, Cause> {
        self.check_len("the coordinates", coords.len())?;
        let mut rank: Rank = 0;
        for (d, &c) in coords.iter().enumerate() {
            let extent = self.dims[d];
            let c = if self.periods[d] {
                c.rem_euclid(extent)
            } else if (0..extent).contains(&c) {
                c
            } else {
                return Err(Cause::CoordinateOutOfRange {
                    dimension: d,
                    coordinate: c,
                    extent,
                });
            };
            rank = rank * extent + c;
        }
        Ok(rank)
    }

    /// The coordinates of `rank`, which must be below [`size`](Self::size), into `coords`
    /// (one per dimension).
    pub fn coords_into(&self, rank: Rank, coords: &mut [Count]) -> Result<(), Cause> {
        self.check_len("the coordinates buffer", coords.len())?;
        if !(0..self.size()).contains(&rank) {
            return Err(Cause::RankOutOfRange {
                rank,
                size: self.size(),
            });
        }
        let mut rest = rank;
        for (c, &extent) in coords.iter_mut().zip(&self.dims).rev() {
            *c = rest % extent;
            rest /= extent;
        }
        Ok(())
    }

    fn coords(&self, rank: Rank) -> Vec<Count> {
        let mut coords = vec![0; self.dims.len()];
        self.coords_into(rank, &mut coords)
            .expect("a rank of the grid");
        coords
    }

    /// The ranks `displacement` steps before and after `rank` along `dimension`
    /// (`MPI_Cart_shift`'s source and destination); `None` past a non-periodic edge
    /// (`MPI_PROC_NULL`).
    pub fn shift(
        &self,
        rank: Rank,
        dimension: Count,
        displacement: Count,
    ) -> Result<(Option<Rank>, Option<Rank>), Cause> {
        let d = usize::try_from(dimension)
            .ok()
            .filter(|&d| d < self.dims.len())
            .ok_or_else(|| {
                invalid(format!(
                    "dimension {dimension} does not exist: the grid has {} dimensions",
                    self.dims.len()
                ))
            })?;
        let coords = self.coords(rank);
        let step = |by: i64| {
            let (extent, at) = (i64::from(self.dims[d]), i64::from(coords[d]) + by);
            let at = if self.periods[d] {
                at.rem_euclid(extent)
            } else if (0..extent).contains(&at) {
                at
            } else {
                return None;
            };
            let mut moved = coords.clone();
            moved[d] = at as Count;
            Some(self.rank_of(&moved).expect("coordinates inside the grid"))
        };
        let displacement = i64::from(displacement);
        Ok((step(-displacement), step(displacement)))
    }

    /// The neighbours of `rank` in MPI's order for neighbourhood collectives on a Cartesian
    /// topology: for each dimension, the source then the destination of a shift by 1.
    pub fn neighbours(&self, rank: Rank) -> Vec<Option<Rank>> {
        (0..self.dims.len() as Count)
            .flat_map(|d| {
                let (source, destination) = self.shift(rank, d, 1).expect("a dimension");
                [source, destination]
            })
            .collect()
    }

    /// `MPI_Cart_sub`: for `rank`, the sub-grid of the dimensions `retain` keeps, which of the
    /// sub-grids it is in (its coordinates in the dropped dimensions, numbered row-major) and
    /// its rank there.
    pub fn sub(&self, rank: Rank, retain: &[bool]) -> Result<(Grid, Rank, Rank), Cause> {
        self.check_len("the retained dimensions", retain.len())?;
        let coords = self.coords(rank);
        let (mut dims, mut periods) = (Vec::new(), Vec::new());
        let (mut which, mut within) = (0, 0);
        for d in 0..self.dims.len() {
            if retain[d] {
                dims.push(self.dims[d]);
                periods.push(self.periods[d]);
                within = within * self.dims[d] + coords[d];
            } else {
                which = which * self.dims[d] + coords[d];
            }
        }
        Ok((Grid { dims, periods }, which, within))
    }
}

/// Fills the zero entries of `dims` so that the product of all entries is `nodes`, the filled
/// ones as close to each other as possible and in non-increasing order (`MPI_Dims_create`).
/// Entries already set stay; a negative entry, or set entries whose product does not divide
/// `nodes`, is an error.
pub(crate) fn dims_create(nodes: Count, dims: &mut [Count]) -> Result<(), Cause> {
    if nodes < 1 {
        return Err(invalid(format!(
            "{nodes} nodes: there must be at least one"
        )));
    }
    if let Some((d, &e)) = dims.iter().enumerate().find(|(_, &e)| e < 0) {
        return Err(invalid(format!(
            "dimension {d} is {e}; entries must be 0 (free) or positive"
        )));
    }
    let fixed: i64 = dims
        .iter()
        .filter(|&&e| e > 0)
        .map(|&e| i64::from(e))
        .product();
    let free: Vec<usize> = (0..dims.len()).filter(|&d| dims[d] == 0).collect();
    let nodes = i64::from(nodes);
    if nodes % fixed != 0 || (free.is_empty() && fixed != nodes) {
        return Err(invalid(format!(
            "the set dimensions {dims:?} (product {fixed}) do not make {nodes} \
             nodes"
        )));
    }
    // Open MPI's way: the prime factors of what is left, largest first, each multiplied into
    // the free dimension that is smallest so far.
    let mut filled = vec![1i64; free.len()];
    for prime in prime_factors(nodes / fixed).into_iter().rev() {
        let smallest = (0..filled.len())
            .min_by_key(|&i| filled[i])
            .expect("free dimensions, since the set ones do not make the nodes");
        filled[smallest] *= prime;
    }
    filled.sort_unstable_by(|a, b| b.cmp(a));
    for (&d, &extent) in free.iter().zip(&filled) {
        dims[d] = extent as Count;
    }
    Ok(())
}

/// The prime factors of `n`, smallest first, with repeats.
fn prime_factors(mut n: i64) -> Vec<i64> {
    let mut factors = Vec::new();
    let mut p = 2;
    while p * p <= n {
        while n % p == 0 {
            factors.push(p);
            n /= p;
        }
        p += 1;
    }
    if n > 1 {
        factors.push(n);
    }
    factors
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every grid of 1 to 4 dimensions (extents 1 to 4, each periodic or not) that fits in
    /// 12 ranks.
    fn grids() -> Vec<Grid> {
        let mut shapes: Vec<Vec<Count>> = vec![vec![]];
        let mut all = Vec::new();
        for _ in 0..4 {
            shapes = shapes
                .iter()
                .flat_map(|s| {
                    (1..=4).map(move |e| {
                        let mut s = s.clone();
                        s.push(e);
                        s
                    })
                })
                .filter(|s| s.iter().product::<Count>() <= 12)
                .collect();
            for dims in &shapes {
                for mask in 0..1u32 << dims.len() {
                    let periods: Vec<bool> = (0..dims.len()).map(|d| mask >> d & 1 == 1).collect();
                    all.push(Grid::new(dims, &periods).unwrap());
                }
            }
        }
        all
    }

    /// The serial reference: every point of the grid by nested counting, in row-major order.
    fn points(dims: &[Count]) -> Vec<Vec<Count>> {
        let mut points = vec![vec![]];
        for &extent in dims {
            points = points
                .into_iter()
                .flat_map(|p| {
                    (0..extent).map(move |c| {
                        let mut p = p.clone();
                        p.push(c);
                        p
                    })
                })
                .collect();
        }
        points
    }

    #[test]
    fn ranks_coordinates_and_shifts_match_a_serial_reference() {
        for grid in grids() {
            let points = points(grid.dims());
            assert_eq!(points.len() as Rank, grid.size());
            for (rank, point) in points.iter().enumerate() {
                let rank = rank as Rank;
                assert_eq!(grid.rank_of(point), Ok(rank), "{grid:?} {point:?}");
                assert_eq!(&grid.coords(rank), point);
                for d in 0..grid.num_dimensions() {
                    let extent = grid.dims()[d];
                    for disp in -5..=5 {
                        let moved = |by: Count| {
                            let mut p = point.clone();
                            p[d] += by;
                            if grid.periods()[d] {
                                p[d] = p[d].rem_euclid(extent);
                            } else if !(0..extent).contains(&p[d]) {
                                return None;
                            }
                            points.iter().position(|q| *q == p).map(|r| r as Rank)
                        };
                        assert_eq!(
                            grid.shift(rank, d as Count, disp),
                            Ok((moved(-disp), moved(disp))),
                            "{grid:?} rank {rank} dimension {d} by {disp}"
                        );
                    }
                }
                let neighbours = grid.neighbours(rank);
                assert_eq!(neighbours.len(), 2 * grid.num_dimensions());
                for d in 0..grid.num_dimensions() {
                    let (s, t) = grid.shift(rank, d as Count, 1).unwrap();
                    assert_eq!((neighbours[2 * d], neighbours[2 * d + 1]), (s, t));
                }
            }
        }
    }

    #[test]
    fn periodic_coordinates_wrap_and_others_are_checked() {
        let grid = Grid::new(&[3, 4], &[true, false]).unwrap();
        assert_eq!(grid.rank_of(&[-1, 2]), Ok(2 * 4 + 2));
        assert_eq!(grid.rank_of(&[7, 0]), Ok(4));
        assert_eq!(
            grid.rank_of(&[0, 4]),
            Err(Cause::CoordinateOutOfRange {
                dimension: 1,
                coordinate: 4,
                extent: 4
            })
        );
        assert!(grid.rank_of(&[0]).is_err());
        assert!(grid.coords_into(12, &mut [0, 0]).is_err());
        assert!(grid.shift(0, 2, 1).is_err());
        assert!(grid.shift(0, -1, 1).is_err());
        assert!(Grid::new(&[2, -1], &[false, false]).is_err());
        assert!(Grid::new(&[2, 0], &[false, false]).is_err());
        assert!(Grid::new(&[2], &[false, false]).is_err());
        assert!(Grid::new(&[1 << 16, 1 << 16], &[false, false]).is_err());
    }

    #[test]
    fn sub_grids_number_points_row_major() {
        let grid = Grid::new(&[2, 3, 2], &[true, false, true]).unwrap();
        for rank in 0..grid.size() {
            let c = grid.coords(rank);
            let (sub, which, within) = grid.sub(rank, &[true, false, true]).unwrap();
            assert_eq!(sub, Grid::new(&[2, 2], &[true, true]).unwrap());
            assert_eq!((which, within), (c[1], c[0] * 2 + c[2]));
            let (none, which, within) = grid.sub(rank, &[false; 3]).unwrap();
            assert_eq!((none.size(), which, within), (1, rank, 0));
        }
    }

    #[test]
    fn dims_create_balances_as_open_mpi_does() {
        let made = |nodes, mut dims: Vec<Count>| dims_create(nodes, &mut dims).map(|()| dims);
        assert_eq!(made(12, vec![0, 0]), Ok(vec![4, 3]));
        assert_eq!(made(16, vec![0, 0, 0]), Ok(vec![4, 2, 2]));
        assert_eq!(made(7, vec![0, 0]), Ok(vec![7, 1]));
        assert_eq!(made(12, vec![0, 3, 0]), Ok(vec![2, 3, 2]));
        assert_eq!(made(1, vec![0, 0, 0]), Ok(vec![1, 1, 1]));
        assert_eq!(made(6, vec![2, 3]), Ok(vec![2, 3]));
        assert!(made(12, vec![5, 0]).is_err());
        assert!(made(6, vec![2, 2]).is_err());
        assert!(made(6, vec![-1, 0]).is_err());
        assert!(made(0, vec![0]).is_err());
        for nodes in 1..=64 {
            for ndims in 1..=4 {
                let dims = made(nodes, vec![0; ndims]).unwrap();
                assert_eq!(dims.iter().product::<Count>(), nodes);
                assert!(dims.windows(2).all(|w| w[0] >= w[1]), "{dims:?}");
            }
        }
    }
}
