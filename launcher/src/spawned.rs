//! Jobs of new ranks that a running job's ranks asked for (MPI's spawn). Each is a second
//! rsrun, started by this one with the same placement options (so on the same hosts, by the
//! same launch path: fork on this host, agents over ssh or srun), in a process group of its
//! own, whose ranks run [`EXEC_FLAG`]: rsrun itself, which picks its rank's program of the
//! request and becomes it (so that one job runs several programs, as `spawn_multiple`
//! asks). The second rsrun forwards its ranks' output and watches their exits as any job's;
//! this one watches it, and a spawned job that fails ends the whole job, naming it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use bootstrap::vars;
use bootstrap::wire::{Request, SpawnApp};

/// What a spawned job's ranks run: `rsrun --exec-spawned`, which becomes the program of its
/// rank (see [`exec_main`]).
pub const EXEC_FLAG: &str = "--exec-spawned";
/// The variable that carries a spawned job's programs to its ranks (hex of the request).
const APPS_VAR: &str = "MPIRT_SPAWN_APPS";
/// The variable that tells a spawned job's rsrun and ranks the job's name: rsrun's messages
/// about its ranks start with it (so that "rank 1 killed" says which job's rank 1), and the
/// ranks look for their parents.
pub const NAME_VAR: &str = vars::SPAWNED_AS;

/// What this rsrun's messages about its ranks start with: the job's name and a colon when it
/// is a spawned job's rsrun, else nothing.
pub fn label() -> String {
    std::env::var(NAME_VAR)
        .map(|name| format!("{name}: "))
        .unwrap_or_default()
}

/// The spawned jobs still running, by the pid of their rsrun.
#[derive(Default)]
pub struct SpawnedJobs {
    running: HashMap<libc::pid_t, String>,
    started: u32,
}

impl SpawnedJobs {
    /// Starts `apps` as a job of new ranks, whose key-value space holds `parent` (in the
    /// spawned rsrun's own environment on the way: never on a command line, so not in what
    /// goes to remote agents either); `placement` is this rsrun's options that the new job
    /// shares (see [`Cli::placement_args`](crate::cli::Cli::placement_args)). Returns the new
    /// job's name, or why it could not start.
    pub fn start(
        &mut self,
        placement: &[OsString],
        apps: Vec<SpawnApp>,
        parent: String,
    ) -> Result<String, String> {
        let total: u32 = apps.iter().map(|a| a.count).sum();
        let programs: Vec<&str> = apps.iter().map(|a| a.program.as_str()).collect();
        self.started += 1;
        let name = format!(
            "spawned job {} ({total} ranks of {})",
            self.started,
            programs.join(", ")
        );
        let rsrun = std::env::current_exe()
            .map_err(|e| format!("cannot find rsrun's own program to start {name}: {e}"))?;
        let mut command = Command::new(&rsrun);
        command
            .args(placement)
            .arg("--np")
            .arg(total.to_string())
            .arg("--oversubscribe")
            // Its ranks' `--output-filename` files: `DIR/2/...` for the first, as Open MPI's.
            .arg(format!("--job-number={}", self.started + 1));
        let request = Request::Spawn {
            apps,
            parent: String::new(),
        }
        .encode();
        // Exported to the ranks (`-x`): what they run, and that they were spawned.
        for (key, value) in [
            (APPS_VAR, bootstrap::hex::encode(&request)),
            (NAME_VAR, name.clone()),
        ] {
            command.env(key, value).arg("-x").arg(key);
        }
        command
            .env(vars::PARENT, parent)
            // Its stall watch is off (see `placement_args`), whatever this rsrun was given.
            .env_remove(vars::STALL_TIMEOUT)
            .arg(&rsrun)
            .arg(EXEC_FLAG);
        // A group of its own: ending the job signals it apart from this rsrun's terminal.
        command.process_group(0);
        // rsrun's stdin is the parents' rank 0's: a second reader would take part of it.
        command.stdin(Stdio::null());
        // Dead with this rsrun, even a SIGKILLed one, as its ranks are.
        crate::spawn::local::die_with_launcher(&mut command, None);
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        self.running.insert(child.id() as libc::pid_t, name.clone());
        Ok(name)
    }

    /// The spawned job whose rsrun `pid` ended with wait status `status`: `None` when `pid`
    /// is none of them, else whether it succeeded (its failure names it).
    pub fn ended(&mut self, pid: libc::pid_t, status: libc::c_int) -> Option<Result<(), String>> {
        let name = self.running.remove(&pid)?;
        Some(match crate::job::failure_code(status) {
            None => Ok(()),
            Some(_) => Err(format!("{name} {}", crate::job::describe(status))),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    pub fn pids(&self) -> impl Iterator<Item = libc::pid_t> + '_ {
        self.running.keys().copied()
    }
}

/// `rsrun --exec-spawned`, a spawned job's rank: becomes the program the request gave its
/// rank (the apps' ranks in order), with its arguments; returns only on failure.
pub fn exec_main() -> i32 {
    let fail = |why: String| {
        eprintln!("rsrun: a spawned rank cannot start its program: {why}");
        1
    };
    let rank: u32 = match std::env::var(vars::RANK).ok().and_then(|r| r.parse().ok()) {
        Some(rank) => rank,
        None => return fail(format!("{} is not set", vars::RANK)),
    };
    let request = std::env::var(APPS_VAR)
        .ok()
        .and_then(|text| bootstrap::hex::decode(text.as_bytes()))
        .map(|bytes| Request::decode(&bytes[..]));
    let apps = match request {
        Some(Ok(Request::Spawn { apps, .. })) => apps,
        _ => return fail(format!("{APPS_VAR} does not hold the spawn's programs")),
    };
    let mut first = 0;
    for app in apps {
        if rank < first + app.count {
            let error = Command::new(&app.program)
                .args(&app.args)
                .env_remove(APPS_VAR)
                .env_remove(vars::PARENT)
                .exec();
            return fail(format!("{}: {error}", app.program));
        }
        first += app.count;
    }
    fail(format!(
        "rank {rank} is past the {first} ranks the spawn asked for"
    ))
}
