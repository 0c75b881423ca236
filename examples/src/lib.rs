//! Scientific kernels on mpirt.
