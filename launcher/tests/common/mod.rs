//! Running rsrun as a real process from tests, with a hard time limit so no test can hang.

// Each test crate compiles this module and uses only part of it.
#![allow(dead_code)]

pub mod stranger;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Generous: the machine may be shared and slow; a hang is what this guards against.
pub const LIMIT: Duration = Duration::from_secs(30);

pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Stdout lines, sorted, since ranks print in any order.
    pub fn sorted_lines(&self) -> Vec<&str> {
        let mut lines: Vec<&str> = self.stdout.lines().collect();
        lines.sort_unstable();
        lines
    }
}

/// `rsrun ARGS...`, with SIGINT at its default action even if the test runner ignores it.
pub fn rsrun(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsrun"));
    cmd.args(args);
    // SAFETY: runs in the child between fork and exec; signal() is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd
}

/// Starts `cmd` with piped stdio, feeding it `stdin`.
pub fn start(cmd: &mut Command, stdin: &[u8]) -> (Child, Instant) {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rsrun");
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    thread::spawn(move || pipe.write_all(&input));
    (child, started)
}

/// Waits for `child` (at most LIMIT, else kills it and panics) and collects the output the
/// caller has not taken.
pub fn finish(mut child: Child, started: Instant) -> Run {
    let out = child.stdout.take().map(reader);
    let err = child.stderr.take().map(reader);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            child.kill().unwrap();
            panic!("rsrun did not finish within {LIMIT:?}");
        }
        thread::sleep(Duration::from_millis(5));
    };
    let elapsed = started.elapsed();
    Run {
        status,
        stdout: out.as_ref().map(collect).unwrap_or_default(),
        stderr: err.as_ref().map(collect).unwrap_or_default(),
        elapsed,
    }
}

/// Runs `cmd` to completion with `stdin` as input.
pub fn run(cmd: &mut Command, stdin: &[u8]) -> Run {
    let (child, started) = start(cmd, stdin);
    finish(child, started)
}

fn reader(mut source: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = source.read_to_end(&mut bytes);
        let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    rx
}

/// A pipe still open after rsrun exited means something rsrun started outlived it.
fn collect(output: &mpsc::Receiver<String>) -> String {
    output
        .recv_timeout(Duration::from_secs(5))
        .expect("an rsrun output pipe stayed open after rsrun exited")
}

/// A fresh empty directory for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rsrun-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether a process is still alive (a zombie waiting for its reaper counts as dead).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
    }
}

/// The pids that ranks wrote, one file each, into `dir`.
pub fn pids_in(dir: &std::path::Path) -> Vec<u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

/// The processes of `pids` still alive after up to two seconds (orphans are reaped by init,
/// which may take a moment).
pub fn survivors(pids: &[u32]) -> Vec<u32> {
    for _ in 0..200 {
        if !pids.iter().any(|&p| alive(p)) {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    pids.iter().copied().filter(|&p| alive(p)).collect()
}

/// A program of the examples crate, built beside rsrun by `cargo build --workspace`.
pub fn example(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_BIN_EXE_rsrun")).with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace` (same profile) first",
        path.display()
    );
    path.to_str().unwrap().to_string()
}

/// The ssh config `ssh-hosts up` writes for its test hosts.
pub fn testhosts_ssh_config() -> PathBuf {
    let dir = std::env::var_os("SSH_HOSTS_DIR").map_or_else(
        || {
            let tmp = std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into());
            std::path::Path::new(&tmp).join("mpirt-testhosts/ssh")
        },
        PathBuf::from,
    );
    dir.join("ssh_config")
}

/// This machine's host name, as `hostname` prints it (a test host's own, run on one).
pub fn hostname() -> String {
    let out = Command::new("hostname").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A fresh directory every test host sees (they share this filesystem) holding `job.sh`, which
/// prints the rank, the host, its working directory and the contents of `input.txt` there.
pub fn job_dir(name: &str) -> PathBuf {
    let dir = scratch_dir(name);
    let script = dir.join("job.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho $MPIRT_RANK $(hostname) $(pwd) $(cat input.txt)\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("input.txt"), "input-data").unwrap();
    dir
}
