//! What the OSU micro-benchmark ports share, written once: OSU's command-line options, its
//! loop counts, and its output format to the character (OSU 7.4).

mod counts;
mod measure;
pub mod mpi;
/// The one-sided tests (mpirt only: rsmpi has no windows).
#[cfg(not(feature = "rsmpi"))]
pub mod one_sided;
mod options;
mod output;
mod start;
mod window;

pub use counts::Counts;
pub use measure::{measure, measure_collective, measure_non_blocking, measure_summed};
pub use options::{parse, Benchmark, Options, Parsed, SyncMode, WindowKind};
pub use output::{
    collective_header, collective_row, header, latency_mt_header, message_rate_mt_header,
    multi_bandwidth_header, non_blocking_header, non_blocking_row, rate_row, row, Latencies,
    Overlapped,
};
pub use start::start;
pub use window::{receive_window, receive_window_on, send_window, send_window_on};

/// The benchmarks send from the same buffers again and again: keep their RDMA registrations.
/// On rsmpi the C MPI keeps whatever registrations it makes itself: the system allocator.
#[cfg(not(feature = "rsmpi"))]
#[global_allocator]
static ALLOCATOR: mpirt::TrackingAllocator = mpirt::TrackingAllocator;
