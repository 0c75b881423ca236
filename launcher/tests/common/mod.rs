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

/// Runs `bash -c SCRIPT` with job control on (`set -m`), as the leader of a new session whose
/// controlling terminal (and stdin) is a fresh pseudo-terminal, as an interactive shell runs:
/// a job started with `&` is then in the terminal's background. Returns what bash printed.
pub fn in_terminal(script: &str) -> Run {
    use std::ffi::CStr;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: posix_openpt takes flags only; a non-negative result is a new descriptor this
    // function then owns (and closes when `_master` drops, after bash is done).
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(
        master >= 0,
        "posix_openpt: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `master` is the open descriptor from above.
    let _master = unsafe { OwnedFd::from_raw_fd(master) };
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `master` is a pseudo-terminal master; `name` is writable for its whole length and
    // ptsname_r writes a NUL-terminated name into it or fails.
    unsafe {
        assert_eq!(libc::grantpt(master), 0, "grantpt");
        assert_eq!(libc::unlockpt(master), 0, "unlockpt");
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
    }
    // SAFETY: ptsname_r succeeded, so `name` holds a NUL-terminated string.
    let path = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&path)
        .unwrap();
    let mut cmd = Command::new("bash");
    cmd.args(["-c", &format!("set -m\n{script}")])
        .stdin(terminal)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: runs in the child between fork and exec (after std has made the terminal fd 0);
    // setsid and ioctl are async-signal-safe system calls on no shared data.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let child = cmd.spawn().expect("spawn bash");
    finish(child, started)
}

/// The script for [`in_terminal`] that starts `rsrun ARGS... > OUT 2>&1 &` in the background
/// and waits for it, then prints `wait STATUS` (149 = stopped by SIGTTIN) and kills it, should
/// it be stopped.
pub fn background_rsrun(args: &[&str], out: &std::path::Path) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    format!(
        "'{}' {} > '{}' 2>&1 &\nwait $!\necho \"wait $?\"\nkill -9 %1 2>/dev/null\nexit 0\n",
        env!("CARGO_BIN_EXE_rsrun"),
        quoted.join(" "),
        out.display()
    )
}

/// Whether signal `sig` is set in a `/proc/PID/status` mask line such as `SigBlk:\t0000...`.
pub fn mask_has(line: &str, sig: libc::c_int) -> bool {
    let hex = line.split_whitespace().nth(1).unwrap();
    u64::from_str_radix(hex, 16).unwrap() & (1 << (sig - 1)) != 0
}

/// The stall report of `stuck receive-cycle` on three ranks, one on each of host1 to host3,
/// under `--stall-timeout`: each rank's node and call, the cycle, and exit 125.
pub fn assert_receive_cycle_over_three_hosts(r: &Run) {
    assert_eq!(r.code(), Some(125), "{}\n{}", r.stdout, r.stderr);
    for want in [
        "rank 0 on host1 waits in receive from rank 2 (tag 7, examples/src/bin/stuck.rs:",
        "rank 1 on host2 waits in receive from rank 0",
        "rank 2 on host3 waits in receive from rank 1",
        "a cycle; no message between them is in flight",
    ] {
        assert!(r.stderr.contains(want), "no {want:?} in\n{}", r.stderr);
    }
}
