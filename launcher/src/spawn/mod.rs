//! Starting ranks: on this host with fork/exec ([`local`]), on other hosts through an agent
//! reached over ssh ([`ssh`]); where they run ([`workdir`]) and on which CPUs ([`binding`]).

pub mod binding;
pub mod local;
pub mod ssh;
pub mod workdir;
