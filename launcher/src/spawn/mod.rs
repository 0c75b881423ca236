//! Starting ranks. Only local (fork/exec on this host) exists so far; remote spawners (ssh,
//! Slurm) would sit beside it and produce the same [`local::RankProcess`] handles.

pub mod local;
