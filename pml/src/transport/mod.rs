//! Byte movers: each transport carries whole frames and, where it can, reads remote memory.

pub mod shm;
pub mod tcp;
#[cfg(feature = "verbs")]
pub mod verbs;
