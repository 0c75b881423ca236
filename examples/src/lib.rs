//! Scientific kernels on mpirt, and what the example programs share.

pub mod npb;

/// `4096`, `64k`, `1m`, `1g`: sizes on the command line, in the forms `MPIRT_*` settings take.
pub use pml::config::parse_size;

/// Every example keeps RDMA registrations between messages (see `mpirt::TrackingAllocator`).
#[global_allocator]
static ALLOCATOR: mpirt::TrackingAllocator = mpirt::TrackingAllocator;
