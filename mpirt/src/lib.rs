//! mpirt: the library MPI-model programs link. Its API follows rsmpi (the `mpi` crate, 0.8):
//! a program ports by renaming the crate.
//!
//! ```no_run
//! use mpirt::traits::*;
//!
//! let universe = mpirt::initialize().unwrap();
//! let world = universe.world();
//! let next = (world.rank() + 1) % world.size();
//! let previous = (world.rank() + world.size() - 1) % world.size();
//! let (got, _status): (i32, _) = mpirt::point_to_point::send_receive(
//!     &world.rank(),
//!     &world.process_at_rank(next),
//!     &world.process_at_rank(previous),
//! );
//! assert_eq!(got, previous);
//! ```
//!
//! Non-blocking operations return a [`request::Request`] that borrows its buffer within a
//! scope and, as in rsmpi, hands it back when it finishes; a [`request::RequestCollection`]
//! completes many at once, each reporting its index, status and buffer:
//!
//! ```no_run
//! use mpirt::traits::*;
//!
//! let universe = mpirt::initialize().unwrap();
//! let world = universe.world();
//! let me = world.this_process();
//! let (sent, mut received) = ([1u32, 2, 3], [0u32; 3]);
//! mpirt::request::scope(|scope| {
//!     let receive = me.immediate_receive_into(scope, &mut received[..]);
//!     let send = me.immediate_send(scope, &sent[..]);
//!     assert_eq!(receive.wait_for_data(), [1, 2, 3]);
//!     send.wait();
//! });
//! let mut slots = [0u32; 3];
//! mpirt::request::multiple_scope(6, |scope, requests| {
//!     for slot in slots.iter_mut() {
//!         requests.add(me.immediate_receive_into(scope, slot));
//!     }
//!     for value in &sent {
//!         requests.add(me.immediate_send(scope, value));
//!     }
//!     let mut finished = Vec::new();
//!     requests.wait_all(&mut finished);
//!     for (index, _status, data) in finished {
//!         println!("request {index} lent {data}");
//!     }
//! });
//! ```
//!
//! Threading: every level, as asked for with [`initialize_with_threading`] (`Serialized` and
//! `Multiple` with the cargo feature `threads`; `Funneled` at most without). Communicators and
//! requests are `!Send` at every level, so a program at [`Threading::Single`] or
//! [`Threading::Funneled`] cannot reach the runtime from another thread; at
//! [`Threading::Serialized`] and [`Threading::Multiple`], [`threads`] makes the handles that
//! cross threads.
//!
//! Errors end the job with a message naming the rank, the operation and the cause; the
//! `try_` variants return an [`Error`] instead. A failure of messaging itself (a peer died,
//! a connection broke, a malformed frame) stops the runtime: every later call returns it, and
//! nothing writes into the buffers of requests left unfinished.

// Lets `#[derive(Equivalence)]`'s `::mpirt::` paths resolve inside this crate's own tests.
extern crate self as mpirt;

pub mod attribute;
mod backend;
pub mod collective;
pub mod communicator;
mod context;
pub mod datatype;
pub mod environment;
pub mod error;
mod fault;
pub mod group;
mod partition;
pub mod point_to_point;
pub mod request;
mod stall;
mod sync;
pub mod threads;
pub mod traits;
pub mod window;

/// rsmpi's name for the communicator module.
pub use communicator as topology;
pub use communicator::Rank;
pub use datatype::Address;
pub use environment::{
    initialize, initialize_with_threading, is_finalized, is_initialized, time, time_resolution,
    OneSidedCounters, Threading, Universe,
};
pub use error::{Error, MpiError};
/// What a rank's transports counted (see [`Universe::counters`]).
pub use pml::Counters;
/// The global allocator that lets the runtime keep RDMA registrations of buffers between
/// messages (see `pml::freed_memory`), and that puts large blocks where same-host peers copy
/// them with a plain memcpy (see `pml::shared_arena`); programs that send large messages
/// install it:
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: mpirt::TrackingAllocator = mpirt::TrackingAllocator;
/// ```
pub use pml::TrackingAllocator;
pub use point_to_point::{Count, Tag};

/// `#[derive(Equivalence)]` for structs of `Equivalence` fields (named, tuple or unit structs;
/// fields may be tuples or arrays), `#[repr(C)]` or not, as rsmpi accepts them. The datatype comes from the fields' offsets: padding is never read or
/// sent (uninitialized bytes do not cross the wire), a struct whose fields lie back to back is
/// sent as it lies, and one with gaps is packed. The code it generates names this crate as the
/// deriving crate's manifest does: `mpi` in a program ported from rsmpi that depends on
/// `mpi = { package = "mpirt", ... }`.
///
/// ```
/// use mpirt::traits::*;
///
/// #[derive(Equivalence, Clone, Copy)]
/// #[repr(C)]
/// struct Particle {
///     position: [f64; 3],
///     id: u64,
/// }
/// assert_eq!(Particle::equivalent_datatype().size(), 32);
///
/// // 7 bytes of padding after `small`: 9 bytes of data a struct.
/// #[derive(Equivalence)]
/// struct Padded {
///     small: u8,
///     large: u64,
/// }
/// assert_eq!(Padded::equivalent_datatype().size(), 9);
/// assert!(!Padded::equivalent_datatype().is_contiguous());
/// ```
///
/// Generic structs are refused too (implement `Equivalence` by hand for those):
///
/// ```compile_fail
/// use mpirt::traits::*;
///
/// #[derive(Equivalence)]
/// #[repr(C)]
/// struct Pair<T> {
///     a: T,
///     b: T,
/// }
/// ```
pub use mpirt_derive::Equivalence;
