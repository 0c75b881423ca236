//! rsrun's library half: the pieces of the `rsrun` launcher. The bootstrap client every
//! mpirt rank uses to find its peers is the `bootstrap` crate, whose wire format and
//! variable names rsrun's side shares; its client is re-exported for rsrun's tests.

pub mod agent;
pub mod cli;
pub mod fd_limit;
pub mod hosts;
pub mod job;
pub mod kvs;
pub mod output;
pub mod rankfile;
pub mod signals;
pub mod spawn;
pub mod spawned;
pub mod stall;
pub mod stdin;
pub mod words;

pub use bootstrap::wire::{Request, Response};
pub use bootstrap::{Bootstrap, BootstrapError};
