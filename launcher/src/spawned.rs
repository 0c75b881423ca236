//! Jobs of new ranks that a running job's ranks asked for (MPI's spawn). Each is a second
//! rsrun, started by this one with the same placement options (so on the same hosts, by the
//! same launch path: fork on this host, agents over ssh or srun), in a process group of its
//! own, whose ranks run [`EXEC_FLAG`]: rsrun itself, which picks its rank's program of the
//! request and becomes it (so that one job runs several programs, as `spawn_multiple`
//! asks). The second rsrun forwards its ranks' output and watches their exits as any job's;
//! this one watches it, and a spawned job that fails ends the whole job, naming it, unless
//! its parents' spawn returned an error instead of joining it (MPI_Comm_spawn's error, which
//! the parents may handle): then its end is reported, and it is ended once the parents have.

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
    running: HashMap<libc::pid_t, Spawned>,
    started: u32,
}

/// A spawned job's rsrun, while it runs.
struct Spawned {
    name: String,
    /// Why its parents' spawn returned an error instead of joining its ranks, once the
    /// parents said so: its ranks end without them, and that does not end this job.
    unjoined: Option<String>,
    /// Whether it was told to end because the parents it did not join had all exited.
    told_to_end: bool,
}

/// How a spawned job ended (see [`SpawnedJobs::ended`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    Succeeded,
    /// It failed after joining its parents (or before they knew): the whole job ends. The
    /// text names it and says how.
    Failed(String),
    /// Its parents' spawn had returned an error instead of joining it: reported, and the
    /// job goes on. The text names it, says how it ended and why it was not joined.
    Unjoined(String),
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
        let spawned = Spawned {
            name: name.clone(),
            unjoined: None,
            told_to_end: false,
        };
        self.running.insert(child.id() as libc::pid_t, spawned);
        Ok(name)
    }

    /// The parents' spawn of the job named `job` returns `why` as its error instead of
    /// joining the job's ranks (MPI_Comm_spawn's error, which the parents may handle): the
    /// job's end is then reported and does not end the whole job. `false` when no running
    /// job has that name.
    pub fn unjoined(&mut self, job: &str, why: String) -> bool {
        match self.running.values_mut().find(|s| s.name == job) {
            Some(spawned) => {
                spawned.unjoined = Some(why);
                true
            }
            None => false,
        }
    }

    /// The rsrun pids of the unjoined jobs not yet told to end, marked told: once their
    /// parents have all exited, nothing will ever join them, and nothing is left running.
    pub fn end_unjoined(&mut self) -> Vec<libc::pid_t> {
        self.running
            .iter_mut()
            .filter(|(_, s)| s.unjoined.is_some() && !s.told_to_end)
            .map(|(&pid, s)| {
                s.told_to_end = true;
                pid
            })
            .collect()
    }

    /// The spawned job whose rsrun `pid` ended with wait status `status`: `None` when `pid`
    /// is none of them, else how it ended (see [`Ended`]).
    pub fn ended(&mut self, pid: libc::pid_t, status: libc::c_int) -> Option<Ended> {
        let spawned = self.running.remove(&pid)?;
        let how = crate::job::describe(status);
        Some(match (spawned.unjoined, crate::job::failure_code(status)) {
            (Some(why), _) => Ended::Unjoined(format!(
                "{} {how}; its parents' spawn returned an error instead of joining it: {why}",
                spawned.name
            )),
            (None, None) => Ended::Succeeded,
            (None, Some(_)) => Ended::Failed(format!("{} {how}", spawned.name)),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs() -> SpawnedJobs {
        let mut jobs = SpawnedJobs::default();
        for (pid, name) in [
            (10, "spawned job 1 (1 ranks of a)"),
            (20, "spawned job 2 (1 ranks of b)"),
        ] {
            let spawned = Spawned {
                name: name.to_string(),
                unjoined: None,
                told_to_end: false,
            };
            jobs.running.insert(pid, spawned);
        }
        jobs
    }

    /// A wait status of a process that exited with `code`.
    fn exited(code: i32) -> libc::c_int {
        code << 8
    }

    #[test]
    fn an_unjoined_jobs_end_is_reported_not_a_failure_and_it_is_ended_once() {
        let mut jobs = jobs();
        assert!(jobs.unjoined("spawned job 1 (1 ranks of a)", "no bridge".to_string()));
        assert!(!jobs.unjoined("spawned job 9 (1 ranks of z)", "no bridge".to_string()));
        assert_eq!(jobs.end_unjoined(), [10]);
        assert!(jobs.end_unjoined().is_empty(), "told to end twice");
        assert_eq!(
            jobs.ended(10, exited(1)),
            Some(Ended::Unjoined(
                "spawned job 1 (1 ranks of a) exited with status 1; its parents' spawn returned \
                 an error instead of joining it: no bridge"
                    .to_string()
            ))
        );
        // A joined job's failure still ends the job; its success does not.
        assert_eq!(
            jobs.ended(20, exited(3)),
            Some(Ended::Failed(
                "spawned job 2 (1 ranks of b) exited with status 3".to_string()
            ))
        );
        assert_eq!(jobs.ended(20, exited(0)), None, "reported once");
        assert!(jobs.is_empty());
    }
}
