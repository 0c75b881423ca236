//! Cartesian topologies (`MPI_Cart_*`): [`CartesianCommunicator`], made by
//! [`Communicator::create_cartesian_communicator`], answers where each rank sits in its grid.
//! Its neighbourhood collectives are in `collective::neighbor`.

use super::grid::{self, Grid};
use super::{CommData, Communicator, SimpleCommunicator};
use crate::communicator::{AsCommunicator, Color, Rank};
use crate::context;
use crate::error::{or_fatal, Cause, Error};
use crate::point_to_point::Count;

/// Where a process sits in a Cartesian topology (`MPI_Cart_get`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CartesianLayout {
    /// The extent of each dimension.
    pub dims: Vec<Count>,
    /// Whether each dimension wraps around.
    pub periods: Vec<bool>,
    /// This process's coordinates.
    pub coords: Vec<Count>,
}

/// The topology of a communicator (`MPI_Topo_test`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    Graph,
    Cartesian,
    DistributedGraph,
    Undefined,
}

/// A communicator as the type its topology gives it
/// ([`SimpleCommunicator::into_topology`]).
#[derive(Debug)]
pub enum IntoTopology {
    Graph(GraphCommunicator),
    Cartesian(CartesianCommunicator),
    DistributedGraph(DistributedGraphCommunicator),
    Undefined(SimpleCommunicator),
}

/// A communicator with a graph topology: mpirt makes none (there is no `MPI_Graph_create`),
/// so no value of this type exists; it is here so that matches on [`IntoTopology`] port.
#[derive(Debug)]
pub struct GraphCommunicator(Never);

/// A communicator with a distributed graph topology: like [`GraphCommunicator`], none exists.
#[derive(Debug)]
pub struct DistributedGraphCommunicator(Never);

#[derive(Debug)]
enum Never {}

/// A communicator whose processes form a grid (`MPI_Cart_create`). It is a
/// [`Communicator`] like any other (messages, collectives, duplicates, which keep the
/// topology), and beyond rsmpi has MPI 3's neighbourhood collectives
/// ([`neighbor_all_gather_into`](Self::neighbor_all_gather_into) and its kin).
///
/// ```no_run
/// use mpirt::traits::*;
///
/// let universe = mpirt::initialize().unwrap();
/// let world = universe.world();
/// let mut dims = [0, 0];
/// mpirt::topology::dims_create(world.size(), &mut dims);
/// let grid = world
///     .create_cartesian_communicator(&dims, &[true, false], false)
///     .expect("every rank fits");
/// let (left, right) = grid.shift(0, 1);
/// let layout = grid.get_layout();
/// println!("at {:?}: {left:?} <- me -> {right:?}", layout.coords);
/// ```
#[derive(Clone, Debug)]
pub struct CartesianCommunicator {
    comm: SimpleCommunicator,
}

/// The grid `dims` and `periods` describe, checked to fit in `comm`.
pub(super) fn fitting(comm: &CommData, dims: &[Count], periods: &[bool]) -> Result<Grid, Cause> {
    let grid = Grid::new(dims, periods)?;
    if grid.size() > comm.size as Rank {
        return Err(Cause::GridTooLarge {
            points: grid.size(),
            size: comm.size as Rank,
        });
    }
    Ok(grid)
}

impl CartesianCommunicator {
    /// `comm`, which has a grid.
    pub(super) fn new(comm: SimpleCommunicator) -> CartesianCommunicator {
        debug_assert!(comm.data.grid().is_some());
        CartesianCommunicator { comm }
    }

    pub(crate) fn grid(&self) -> &Grid {
        self.comm
            .data
            .grid()
            .expect("a Cartesian communicator has a grid")
    }

    /// The number of dimensions (`MPI_Cartdim_get`).
    pub fn num_dimensions(&self) -> Count {
        self.grid().num_dimensions() as Count
    }

    /// The grid and this process's place in it (`MPI_Cart_get`).
    pub fn get_layout(&self) -> CartesianLayout {
        let grid = self.grid();
        let mut coords = vec![0; grid.num_dimensions()];
        or_fatal(self.try_rank_to_coordinates_into(self.rank(), &mut coords));
        CartesianLayout {
            dims: grid.dims().to_vec(),
            periods: grid.periods().to_vec(),
            coords,
        }
    }

    /// [`get_layout`](Self::get_layout) into slices of one entry per dimension; slices of
    /// other lengths are fatal.
    pub fn get_layout_into(&self, dims: &mut [Count], periods: &mut [bool], coords: &mut [Count]) {
        or_fatal(self.try_get_layout_into(dims, periods, coords))
    }
    pub fn try_get_layout_into(
        &self,
        dims: &mut [Count],
        periods: &mut [bool],
        coords: &mut [Count],
    ) -> Result<(), Error> {
        let grid = self.grid();
        let fail = |cause| Error::new("get_layout_into", cause);
        grid.check_len("dims", dims.len()).map_err(fail)?;
        grid.check_len("periods", periods.len()).map_err(fail)?;
        grid.coords_into(self.rank(), coords).map_err(fail)?;
        dims.copy_from_slice(grid.dims());
        periods.copy_from_slice(grid.periods());
        Ok(())
    }

    /// [`get_layout_into`](Self::get_layout_into), kept for rsmpi programs.
    ///
    /// # Safety
    /// None needed: mpirt checks the lengths as the checked form does.
    pub unsafe fn get_layout_into_unchecked(
        &self,
        dims: &mut [Count],
        periods: &mut [bool],
        coords: &mut [Count],
    ) {
        self.get_layout_into(dims, periods, coords)
    }

    /// The rank at `coords` (`MPI_Cart_rank`): periodic coordinates wrap; a non-periodic
    /// coordinate outside its dimension, or coordinates of another length, are fatal. (rsmpi
    /// refuses coordinate 0 of non-periodic dimensions by mistake; mpirt takes it.)
    pub fn coordinates_to_rank(&self, coords: &[Count]) -> Rank {
        or_fatal(self.try_coordinates_to_rank(coords))
    }
    pub fn try_coordinates_to_rank(&self, coords: &[Count]) -> Result<Rank, Error> {
        self.grid()
            .rank_of(coords)
            .map_err(|cause| Error::new(format!("coordinates_to_rank({coords:?})"), cause))
    }

    /// [`coordinates_to_rank`](Self::coordinates_to_rank), kept for rsmpi programs.
    ///
    /// # Safety
    /// None needed: mpirt checks the coordinates as the checked form does.
    pub unsafe fn coordinates_to_rank_unchecked(&self, coords: &[Count]) -> Rank {
        self.coordinates_to_rank(coords)
    }

    /// The coordinates of `rank` (`MPI_Cart_coords`); a rank outside the communicator is fatal.
    pub fn rank_to_coordinates(&self, rank: Rank) -> Vec<Count> {
        let mut coords = vec![0; self.grid().num_dimensions()];
        self.rank_to_coordinates_into(rank, &mut coords);
        coords
    }

    /// [`rank_to_coordinates`](Self::rank_to_coordinates) into `coords`, one per dimension.
    pub fn rank_to_coordinates_into(&self, rank: Rank, coords: &mut [Count]) {
        or_fatal(self.try_rank_to_coordinates_into(rank, coords))
    }
    pub fn try_rank_to_coordinates_into(
        &self,
        rank: Rank,
        coords: &mut [Count],
    ) -> Result<(), Error> {
        self.grid()
            .coords_into(rank, coords)
            .map_err(|cause| Error::new(format!("rank_to_coordinates({rank})"), cause))
    }

    /// [`rank_to_coordinates_into`](Self::rank_to_coordinates_into), kept for rsmpi programs.
    ///
    /// # Safety
    /// None needed: mpirt checks the rank and the length as the checked form does.
    pub unsafe fn rank_to_coordinates_into_unchecked(&self, rank: Rank, coords: &mut [Count]) {
        self.rank_to_coordinates_into(rank, coords)
    }

    /// The ranks `displacement` steps before and after this process along `dimension`
    /// (`MPI_Cart_shift`): the source and the destination of a shift, `None` past the edge
    /// of a non-periodic dimension (`MPI_PROC_NULL`). A dimension that does not exist is
    /// fatal.
    pub fn shift(&self, dimension: Count, displacement: Count) -> (Option<Rank>, Option<Rank>) {
        or_fatal(self.try_shift(dimension, displacement))
    }
    pub fn try_shift(
        &self,
        dimension: Count,
        displacement: Count,
    ) -> Result<(Option<Rank>, Option<Rank>), Error> {
        self.grid()
            .shift(self.rank(), dimension, displacement)
            .map_err(|cause| Error::new(format!("shift({dimension}, {displacement})"), cause))
    }

    /// [`shift`](Self::shift), kept for rsmpi programs.
    ///
    /// # Safety
    /// None needed: mpirt checks the dimension as the checked form does.
    pub unsafe fn shift_unchecked(
        &self,
        dimension: Count,
        displacement: Count,
    ) -> (Option<Rank>, Option<Rank>) {
        self.shift(dimension, displacement)
    }

    /// The sub-grid of this process over the dimensions `retain` keeps (`MPI_Cart_sub`): the
    /// processes that share its coordinates in the other dimensions, ranked row-major in the
    /// kept ones. Collective.
    pub fn subgroup(&self, retain: &[bool]) -> CartesianCommunicator {
        or_fatal(self.try_subgroup(retain))
    }
    pub fn try_subgroup(&self, retain: &[bool]) -> Result<CartesianCommunicator, Error> {
        // A rank whose `retain` is wrong still takes part, so that the others fail with it.
        let (color, key, grid) = match self.grid().sub(self.rank(), retain) {
            Ok((grid, which, within)) => (Color::with_value(which), within, Ok(Some(grid))),
            Err(cause) => (Color::undefined(), 0, Err(cause)),
        };
        let fingerprint = context::fingerprint(retain.iter().map(|&kept| kept as i64));
        let comm = self
            .comm
            .data
            .split(color, key, fingerprint, grid)
            .map_err(|cause| Error::new("subgroup", cause))?;
        Ok(CartesianCommunicator::new(
            comm.expect("every process has a color"),
        ))
    }

    /// [`subgroup`](Self::subgroup), kept for rsmpi programs.
    ///
    /// # Safety
    /// None needed: mpirt checks `retain`'s length as the checked form does.
    pub unsafe fn subgroup_unchecked(&self, retain: &[bool]) -> CartesianCommunicator {
        self.subgroup(retain)
    }
}

impl Communicator for CartesianCommunicator {
    fn data(&self) -> &CommData {
        &self.comm.data
    }
    fn is_owning_handle(&self) -> bool {
        true
    }
}

impl AsCommunicator for CartesianCommunicator {
    type Out = CartesianCommunicator;
    fn as_communicator(&self) -> &CartesianCommunicator {
        self
    }
}

/// Fills the zero entries of `dims` with extents whose product, with the entries already
/// set, is `nodes`, as close to each other as possible and in non-increasing order
/// (`MPI_Dims_create`, as Open MPI computes it). A negative entry, or set entries that do not
/// divide `nodes`, are fatal.
pub fn dims_create(nodes: Count, dims: &mut [Count]) {
    or_fatal(try_dims_create(nodes, dims))
}

pub fn try_dims_create(nodes: Count, dims: &mut [Count]) -> Result<(), Error> {
    grid::dims_create(nodes, dims).map_err(|cause| Error::new("dims_create", cause))
}
