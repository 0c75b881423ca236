//! Starting ranks: on this host with fork/exec ([`local`]), on other hosts through an agent
//! reached over ssh ([`ssh`]).

pub mod local;
pub mod ssh;
