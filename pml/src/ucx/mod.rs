//! A PML on UCX's tag-matching API (feature `ucx`): UCX matches, picks protocols and moves
//! the bytes; this module maps MPI envelopes onto UCX tags ([`tag`]) and UCX's outcomes onto
//! the PML vocabulary (`pml_api`: `Done`) and `PmlError`.
//!
//! - [`tag`]: the envelope's layout in the 64-bit UCX tag, and the wildcard masks.
//! - `worker`: the UCP context and worker, endpoints, progress and sleeping.
//! - `failure`: which peers' connections broke, as UCX reports them.
//! - `wireup`: worker addresses through the launcher's key-value service.
//! - `request`: an operation's outcome, kept inside the UCX request itself.
//! - `owned_request`: request memory lent to UCX, for every message.
//! - `datatype`: what an operation hands UCX: bytes, or a non-contiguous buffer in place (an
//!   iov of its runs, or the generic datatype's pack and unpack callbacks).
//! - `status`: UCX status codes as results.
//! - `pml`: [`UcxPml`], the calls the layer above makes.
//! - `one_sided`: windows' puts, gets and atomics on UCX's RMA (`OneSided`).

mod datatype;
mod failure;
mod ffi;
mod one_sided;
mod owned_request;
mod pml;
mod request;
mod status;
pub mod tag;
mod wireup;
mod worker;

pub use pml::{UcxConfig, UcxMessage, UcxPml};
