//! Scientific kernels on mpirt, and what the example programs share.

/// `4096`, `64k`, `1m`, `1g`: sizes on the command line, in the forms `MPIRT_*` settings take.
pub use pml::config::parse_size;
