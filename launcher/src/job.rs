//! One job from start to exit code: start the key-value service and the ranks, then supervise.
//!
//! Everything that can happen to a running job arrives as an [`Event`] on one channel (rank
//! exits from the reaper thread, aborts from the key-value service, signals, output streams
//! closing), so the supervisor is a single loop with no shared state.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::{BindTo, Cli};
use crate::kvs::KvsServer;
use crate::output::{self, Sink};
use crate::signals;
use crate::spawn::local::{self, LaunchSpec, RankProcess};

/// Exit code when `--timeout` ends the job, as timeout(1) uses.
const TIMEOUT_EXIT: i32 = 124;
/// Exit code when the program cannot be started, as shells use for "command not found".
const NOT_FOUND_EXIT: i32 = 127;
/// After SIGKILL, how long to wait for the kernel to report the ranks dead.
const KILL_WAIT: Duration = Duration::from_millis(500);
/// How long to wait for the last output lines once the ranks are gone.
const OUTPUT_DRAIN: Duration = Duration::from_millis(300);

/// Something that happened to the job.
#[derive(Debug)]
pub enum Event {
    /// A child was reaped; `status` is the raw wait status.
    Exited {
        pid: libc::pid_t,
        status: libc::c_int,
    },
    /// A rank called abort through the key-value service.
    Abort {
        rank: u32,
        code: i32,
        message: String,
    },
    /// rsrun received SIGINT, SIGTERM or SIGHUP.
    Signal(libc::c_int),
    /// One rank output stream reached end of file.
    OutputDone,
}

/// Runs the job the command line describes and returns rsrun's exit code.
/// The caller must have blocked the forwarded signals (see [`signals::block`]) first.
pub fn run(cli: &Cli) -> i32 {
    match Job::start(cli) {
        Ok(job) => {
            let id = job.id.clone();
            let code = job.supervise(cli.timeout);
            remove_shm_segments(&id);
            code
        }
        Err(code) => code,
    }
}

struct Job {
    id: String,
    verbose: bool,
    grace: Duration,
    /// Pid (and process group id) of each rank, by rank.
    pids: Vec<libc::pid_t>,
    /// Ranks not yet reaped.
    running: HashMap<libc::pid_t, u32>,
    open_outputs: usize,
    events: mpsc::Receiver<Event>,
}

impl Job {
    /// Starts the service and every rank. On failure, reports it, cleans up and returns the
    /// exit code.
    fn start(cli: &Cli) -> Result<Job, i32> {
        let fail = |what: &str, e: io::Error| {
            eprintln!("rsrun: {what}: {e}");
            1
        };
        let id = random_hex(8).map_err(|e| fail("cannot read /dev/urandom", e))?;
        let secret = random_hex(16).map_err(|e| fail("cannot read /dev/urandom", e))?;
        let (tx, events) = mpsc::channel();
        signals::forward_to(tx.clone()).map_err(|e| fail("cannot start a thread", e))?;
        let kvs = KvsServer::start(cli.ranks, secret.as_bytes(), tx.clone())
            .map_err(|e| fail("cannot start the key-value service", e))?;
        let cpus = match cli.bind_to {
            BindTo::Core => {
                local::allowed_cpus().map_err(|e| fail("cannot read CPU affinity", e))?
            }
            BindTo::None => Vec::new(),
        };
        let env = cli.rank_env(|name| std::env::var_os(name));
        let (program, args) = cli.command.split_first().expect("clap requires PROGRAM");
        let spec = LaunchSpec {
            program,
            args,
            env: &env,
            size: cli.ranks,
            job_id: &id,
            kvs_addr: kvs.addr().to_string(),
            kvs_secret: &secret,
            cpus: &cpus,
        };
        if cli.verbose {
            eprintln!(
                "rsrun: job {id}: {} rank(s) of {}, key-value service at {}, binding {:?}",
                cli.ranks,
                program.to_string_lossy(),
                kvs.addr(),
                cli.bind_to
            );
        }

        let mut ranks: Vec<RankProcess> = Vec::new();
        for rank in 0..cli.ranks {
            match local::spawn_rank(&spec, rank) {
                Ok(process) => ranks.push(process),
                Err(e) => {
                    eprintln!("rsrun: cannot start '{}': {e}", program.to_string_lossy());
                    kill_and_reap(&ranks);
                    remove_shm_segments(&id);
                    return Err(if e.kind() == io::ErrorKind::NotFound {
                        NOT_FOUND_EXIT
                    } else {
                        1
                    });
                }
            }
        }

        let mut job = Job {
            id,
            verbose: cli.verbose,
            grace: cli.grace,
            pids: ranks.iter().map(|r| r.pid).collect(),
            running: ranks.iter().map(|r| (r.pid, r.rank)).collect(),
            open_outputs: 0,
            events,
        };
        for process in ranks {
            if job.verbose {
                eprintln!("rsrun: rank {} is pid {}", process.rank, process.pid);
            }
            // A rank whose output cannot be forwarded still runs; its output is lost, which
            // beats killing a job that may be nearly done.
            for (source, sink) in [
                (
                    Box::new(process.stdout) as Box<dyn Read + Send>,
                    Sink::Stdout,
                ),
                (Box::new(process.stderr), Sink::Stderr),
            ] {
                match output::forward(source, sink, process.rank, cli.tag_output, tx.clone()) {
                    Ok(()) => job.open_outputs += 1,
                    Err(e) => {
                        eprintln!("rsrun: cannot forward rank {}'s output: {e}", process.rank)
                    }
                }
            }
            if let Some(mut stdin) = process.stdin {
                // rsrun's stdin goes to rank 0; when rank 0 stops reading, the copy ends.
                let _ = thread::Builder::new()
                    .name("stdin".into())
                    .spawn(move || io::copy(&mut io::stdin().lock(), &mut stdin));
            }
        }
        // Started only now: a reaper waiting on any child could otherwise take a child that
        // std's spawn reaps itself when exec fails.
        if let Err(e) = start_reaper(tx) {
            eprintln!("rsrun: cannot start a thread: {e}");
            kill_and_reap_pids(&job.pids);
            return Err(1);
        }
        Ok(job)
    }

    /// Waits for the job to end, one way or another, and returns rsrun's exit code.
    fn supervise(mut self, timeout: Option<Duration>) -> i32 {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let event = match deadline {
                None => self
                    .events
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => self
                    .events
                    .recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            match event {
                Err(RecvTimeoutError::Timeout) => {
                    let secs = timeout.unwrap_or_default().as_secs_f64();
                    eprintln!("rsrun: job timed out after {secs} s; killing all ranks");
                    return self.shut_down(libc::SIGTERM, TIMEOUT_EXIT);
                }
                // Every sender is gone: nothing more can happen. Cannot occur while the
                // signal thread lives, but ending is the only sensible answer.
                Err(RecvTimeoutError::Disconnected) => return 1,
                Ok(Event::OutputDone) => self.open_outputs -= 1,
                Ok(Event::Exited { pid, status }) => {
                    let Some(rank) = self.running.remove(&pid) else {
                        continue;
                    };
                    if let Some(code) = failure_code(status) {
                        eprintln!("rsrun: rank {rank} (pid {pid}) {}", describe(status));
                        return self.shut_down(libc::SIGTERM, code);
                    }
                    if self.running.is_empty() {
                        self.drain_output(Instant::now() + OUTPUT_DRAIN * 4);
                        if self.verbose {
                            eprintln!("rsrun: job {}: all ranks exited normally", self.id);
                        }
                        return 0;
                    }
                }
                Ok(Event::Abort {
                    rank,
                    code,
                    message,
                }) => {
                    eprintln!("rsrun: rank {rank} called abort (code {code}): {message}");
                    return self.shut_down(libc::SIGTERM, if code == 0 { 1 } else { code });
                }
                Ok(Event::Signal(sig)) => {
                    eprintln!(
                        "rsrun: received {}; forwarding it to all ranks",
                        signals::name(sig)
                    );
                    // SIGHUP means "the terminal went away"; ranks are asked to terminate.
                    let forward = if sig == libc::SIGHUP {
                        libc::SIGTERM
                    } else {
                        sig
                    };
                    return self.shut_down(forward, 128 + sig);
                }
            }
        }
    }

    /// Sends `first` to every running rank, escalates to SIGKILL after the grace period (or at
    /// a second signal to rsrun), waits for the ranks and their output, returns `code`.
    fn shut_down(mut self, first: libc::c_int, code: i32) -> i32 {
        for &pid in self.running.keys() {
            signal_group(pid, first);
        }
        let grace_end = Instant::now() + self.grace;
        while !self.running.is_empty() {
            match self
                .events
                .recv_timeout(grace_end.saturating_duration_since(Instant::now()))
            {
                Ok(Event::Signal(_)) | Err(_) => break,
                Ok(event) => self.note(event),
            }
        }
        // Every rank's group, exited or not: a rank's children may outlive it.
        for &pid in &self.pids {
            signal_group(pid, libc::SIGKILL);
        }
        let kill_end = Instant::now() + KILL_WAIT;
        while !self.running.is_empty() {
            match self
                .events
                .recv_timeout(kill_end.saturating_duration_since(Instant::now()))
            {
                Ok(event) => self.note(event),
                Err(_) => break,
            }
        }
        self.drain_output(Instant::now() + OUTPUT_DRAIN);
        code
    }

    /// Records an exit or closed output seen while the job is already ending.
    fn note(&mut self, event: Event) {
        match event {
            Event::Exited { pid, status } => {
                if let Some(rank) = self.running.remove(&pid) {
                    if self.verbose {
                        eprintln!("rsrun: rank {rank} (pid {pid}) {}", describe(status));
                    }
                }
            }
            Event::OutputDone => self.open_outputs -= 1,
            Event::Abort { .. } | Event::Signal(_) => {}
        }
    }

    /// Waits until every output stream is closed or `until` passes. A rank's background child
    /// can hold a pipe open forever, so the wait is bounded.
    fn drain_output(&mut self, until: Instant) {
        while self.open_outputs > 0 {
            match self
                .events
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(event) => self.note(event),
                Err(_) => return,
            }
        }
    }
}

/// Reaps every child of rsrun as it exits and reports it; ends when no children are left.
fn start_reaper(events: mpsc::Sender<Event>) -> io::Result<()> {
    thread::Builder::new()
        .name("reaper".into())
        .spawn(move || loop {
            let mut status: libc::c_int = 0;
            // SAFETY: `status` is a valid place for waitpid to store the wait status.
            let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
            if pid > 0 {
                if events.send(Event::Exited { pid, status }).is_err() {
                    return;
                }
            } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return; // ECHILD: every rank has been reaped
            }
        })?;
    Ok(())
}

/// Sends `sig` to the process group led by rank `pid`.
fn signal_group(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions. A negative pid addresses the process
    // group the rank leads (set up at spawn); ESRCH (group already gone) is harmless.
    unsafe {
        libc::kill(-pid, sig);
    }
}

/// Kills ranks started before a later rank failed to start, and reaps them.
fn kill_and_reap(ranks: &[RankProcess]) {
    kill_and_reap_pids(&ranks.iter().map(|r| r.pid).collect::<Vec<_>>());
}

fn kill_and_reap_pids(pids: &[libc::pid_t]) {
    for &pid in pids {
        signal_group(pid, libc::SIGKILL);
        let mut status = 0;
        // SAFETY: `status` is a valid place for the wait status; `pid` is our own child.
        unsafe {
            libc::waitpid(pid, &mut status, 0);
        }
    }
}

/// rsrun's exit code for a rank's wait status, or None when the rank succeeded.
fn failure_code(status: libc::c_int) -> Option<i32> {
    if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status)).filter(|&code| code != 0)
    } else if libc::WIFSIGNALED(status) {
        Some(128 + libc::WTERMSIG(status))
    } else {
        Some(1)
    }
}

/// "exited with status 2", "killed by signal 9 (SIGKILL)".
fn describe(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        format!("killed by signal {sig} ({})", signals::name(sig))
    } else {
        format!("ended with wait status {status:#x}")
    }
}

/// `bytes` random bytes from the kernel, as lowercase hex.
fn random_hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Removes the job's shared-memory segments (`/dev/shm/mpirt-<job id>...`), which the shm
/// transport creates and a crashed rank cannot unlink.
fn remove_shm_segments(job_id: &str) {
    let prefix = format!("mpirt-{job_id}");
    let Ok(entries) = fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_map_to_exit_codes_and_messages() {
        let exited = |code: i32| code << 8;
        assert_eq!(failure_code(exited(0)), None);
        assert_eq!(failure_code(exited(2)), Some(2));
        assert_eq!(describe(exited(2)), "exited with status 2");
        assert_eq!(failure_code(libc::SIGKILL), Some(137));
        assert_eq!(describe(libc::SIGKILL), "killed by signal 9 (SIGKILL)");
    }

    #[test]
    fn job_ids_are_random_hex() {
        let a = random_hex(8).unwrap();
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_hex(8).unwrap());
    }
}
