//! rsrun's library half: the bootstrap client every mpirt rank uses to find its peers
//! ([`bootstrap`]), and the pieces of the `rsrun` launcher itself.

pub mod agent;
pub mod bootstrap;
pub mod cli;
pub mod fd_limit;
pub mod hosts;
pub mod job;
pub mod kvs;
pub mod output;
pub mod pmi2;
pub mod rankfile;
pub mod signals;
pub mod spawn;
pub mod stdin;
mod wire;
pub mod words;

pub use bootstrap::{Bootstrap, BootstrapError};
pub use wire::{Request, Response};
