//! The MPI library the benchmarks run on, under one name: mpirt by default, or with the
//! feature `rsmpi` the crates.io `mpi` crate (rsmpi) over the system's C MPI (Open MPI or
//! MPICH), so that one benchmark source measures every runtime. mpirt follows rsmpi's API,
//! so this is a re-export; `rsmpi_gaps` adds, for rsmpi, the two mpirt calls the benchmarks
//! make that rsmpi 0.8 does not have.

#[cfg(not(any(feature = "mpirt", feature = "rsmpi")))]
compile_error!(
    "osu-benches runs on mpirt (feature mpirt, the default) or on rsmpi (feature rsmpi)"
);

#[cfg(not(feature = "rsmpi"))]
pub use mpirt::*;

#[cfg(feature = "rsmpi")]
pub use rsmpi::*;

#[cfg(feature = "rsmpi")]
mod rsmpi_gaps;
// Named imports shadow the glob's modules of the same names.
#[cfg(feature = "rsmpi")]
pub use rsmpi_gaps::{request, traits};
