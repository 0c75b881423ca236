//! mpirt: the library MPI-model programs link.
