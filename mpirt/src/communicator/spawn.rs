//! Dynamic processes (MPI's chapter 10): `spawn`, `spawn_multiple` and a spawned job's parent,
//! as rsmpi has them. mpirt does not start processes at run time: a spawn checks its arguments
//! as MPI would and then fails with a named error on every process that calls it, rather than
//! hang or start processes that could not reach their parents. What it would take: rsrun
//! starting ranks on a running job's request, and the messaging layer taking peers after
//! wire-up (see the README's "Not supported").

use std::path::Path;
use std::process::Command;

use crate::error::{Cause, Error, MpiError};

use super::{InterCommunicator, Rank};

/// `MPI_Comm_spawn_multiple` of `maxprocs[i]` processes of `commands[i]` each; the error names
/// `operation`.
pub(crate) fn spawn(
    operation: &'static str,
    commands: &[&Command],
    maxprocs: &[Rank],
) -> Result<InterCommunicator, MpiError> {
    let fail = |cause| MpiError::Mpirt(Error::new(operation, cause));
    if commands.len() != maxprocs.len() {
        return Err(fail(Cause::InvalidSpawn(format!(
            "{} commands but {} process counts",
            commands.len(),
            maxprocs.len()
        ))));
    }
    for (command, &count) in commands.iter().zip(maxprocs) {
        let program = command.get_program();
        if count < 1 {
            return Err(fail(Cause::InvalidSpawn(format!(
                "{count} processes of {} asked for; at least 1 is needed",
                program.to_string_lossy()
            ))));
        }
        if !runnable(Path::new(program)) {
            return Err(fail(Cause::InvalidSpawn(format!(
                "the program {} was not found (not a path to an executable file, nor on PATH)",
                program.to_string_lossy()
            ))));
        }
    }
    Err(fail(Cause::SpawnUnsupported))
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
