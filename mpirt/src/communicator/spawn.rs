//! Dynamic processes (MPI's chapter 10): `spawn`, `spawn_multiple` and a spawned job's parent,
//! as rsmpi has them. mpirt does not start processes at run time: a spawn checks its root's
//! arguments as MPI would and then fails with the same named error on every process of the
//! communicator, rather than hang or start processes that could not reach their parents. What it would take: rsrun
//! starting ranks on a running job's request, and the messaging layer taking peers after
//! wire-up (see the README's "Not supported").

use std::path::Path;
use std::process::Command;

use crate::error::{Cause, Error, MpiError};

use super::{CommData, Communicator, InterCommunicator, Rank, SimpleCommunicator};
use crate::collective::Root;

/// `MPI_Comm_spawn_multiple` of `maxprocs[i]` processes of `commands[i]` each, rooted at
/// `root` of `comm`; the error names `operation`. Collective over `comm`: as in MPI, only the
/// root's arguments count, so the root checks them and broadcasts its verdict, and every
/// process returns the same error.
pub(crate) fn spawn(
    operation: &'static str,
    comm: &CommData,
    root: Rank,
    commands: &[&Command],
    maxprocs: &[Rank],
) -> Result<InterCommunicator, MpiError> {
    let fail = |cause| MpiError::Mpirt(Error::new(operation, cause));
    if comm.is_inter() {
        return Err(fail(Cause::InterCommunicator));
    }
    let root = comm.check_rank(root).map_err(fail)?;
    // Why the root's arguments are wrong; empty where they are right.
    let mut why = Vec::new();
    if comm.rank == root {
        if let Err(invalid) = check(commands, maxprocs) {
            why = invalid.into_bytes();
        }
    }
    let group = SimpleCommunicator::new(comm.clone());
    let from_root = group.process_at_rank(root as Rank);
    let mut len = [why.len() as u64];
    from_root
        .try_broadcast_into(&mut len[..])
        .map_err(MpiError::Mpirt)?;
    why.resize(len[0] as usize, 0);
    from_root
        .try_broadcast_into(&mut why[..])
        .map_err(MpiError::Mpirt)?;
    match why.is_empty() {
        true => Err(fail(Cause::SpawnUnsupported)),
        false => Err(fail(Cause::InvalidSpawn(
            String::from_utf8_lossy(&why).into_owned(),
        ))),
    }
}

/// Why the arguments of a spawn are not what MPI takes, if they are not.
fn check(commands: &[&Command], maxprocs: &[Rank]) -> Result<(), String> {
    if commands.len() != maxprocs.len() {
        return Err(format!(
            "{} commands but {} process counts",
            commands.len(),
            maxprocs.len()
        ));
    }
    for (command, &count) in commands.iter().zip(maxprocs) {
        let program = command.get_program();
        if count < 1 {
            return Err(format!(
                "{count} processes of {} asked for; at least 1 is needed",
                program.to_string_lossy()
            ));
        }
        if !runnable(Path::new(program)) {
            return Err(format!(
                "the program {} was not found (not a path to an executable file, nor on PATH)",
                program.to_string_lossy()
            ));
        }
    }
    Ok(())
}

/// Whether `program` names an executable file, as a path or through PATH.
fn runnable(program: &Path) -> bool {
    let executable = |path: &Path| {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 {
        return executable(program);
    }
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| executable(&dir.join(program)))
    })
}
