//! Starting ranks on this host with fork/exec.
//!
//! Each rank leads its own process group, so rsrun can signal a rank together with anything it
//! started (`kill(-pgid)`), and so a terminal's Ctrl-C reaches rsrun alone, which then forwards it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::process::CommandExt;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, Stdio};

use bootstrap::vars;

/// Everything the ranks of one job share.
pub struct LaunchSpec<'a> {
    pub program: &'a OsStr,
    pub args: &'a [OsString],
    /// Set on top of rsrun's own environment, before the `MPIRT_*` variables.
    pub env: &'a [(String, OsString)],
    pub size: u32,
    pub job_id: &'a str,
    pub kvs_addr: String,
    pub kvs_secret: &'a str,
    /// CPUs to pin ranks to, the rank with local rank i to `cpus[i]`; empty means none. When
    /// this host's ranks outnumber them, none is pinned (see `spawn_rank`).
    pub cpus: &'a [usize],
}

/// Where one rank sits: its rank in the job, its place among the ranks on its host, and whether
/// it reads rsrun's stdin (rank 0 on rsrun's own host only; the others get /dev/null).
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub rank: u32,
    pub local_rank: u32,
    pub local_size: u32,
    pub stdin: bool,
}

/// A started rank: its pid (also its process group id) and the ends of its stdio pipes.
pub struct RankProcess {
    pub rank: u32,
    pub pid: libc::pid_t,
    /// Set when the slot asked for stdin.
    pub stdin: Option<ChildStdin>,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// Starts one rank. Fails (with the exec error, e.g. "No such file or directory") if the
/// program cannot be run; std reports exec failures back to the parent.
pub fn spawn_rank(spec: &LaunchSpec<'_>, slot: Slot) -> io::Result<RankProcess> {
    let rank = slot.rank;
    let mut cmd = Command::new(spec.program);
    cmd.args(spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env(vars::RANK, rank.to_string())
        .env(vars::SIZE, spec.size.to_string())
        .env(vars::LOCAL_RANK, slot.local_rank.to_string())
        .env(vars::LOCAL_SIZE, slot.local_size.to_string())
        .env(vars::JOB_ID, spec.job_id)
        .env(vars::KVS_ADDR, &spec.kvs_addr)
        .env(vars::KVS_SECRET, spec.kvs_secret)
        .stdin(if slot.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // rsrun blocks SIGINT/SIGTERM/SIGHUP in all its threads (see `signals`), and a blocked mask
    // survives exec; std's posix_spawn path does not clear it, so the child does it here.
    let unblock = crate::signals::forwarded_set();
    // As Open MPI does, ranks that outnumber the CPUs are left unbound: two ranks pinned to one
    // CPU can only take turns on it while another CPU may be free, whereas the scheduler runs
    // unbound ones wherever a CPU frees up first (4 ranks on 2 busy cores: all-reduce latency
    // halves).
    let oversubscribed = slot.local_size as usize > spec.cpus.len();
    let bound = (!oversubscribed).then(|| spec.cpus[slot.local_rank as usize]);
    match bound {
        Some(cpu) => cmd.env(vars::BOUND_CPU, cpu.to_string()),
        None => cmd.env_remove(vars::BOUND_CPU),
    };
    let cpu = bound.map(cpu_set_of);
    // A rank must not outlive rsrun (or the agent) when that is SIGKILLed and cannot clean up:
    // the kernel kills it when the spawning thread dies. Ranks are spawned from the thread that
    // supervises the job for its whole life, so this fires only when the launcher is gone.
    let launcher_pid = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed. It makes raw system calls (sigprocmask, prctl, getppid,
    // sched_setaffinity) on values built in the parent, and none allocates or takes locks.
    unsafe {
        cmd.pre_exec(move || {
            let rc = libc::pthread_sigmask(libc::SIG_UNBLOCK, &unblock, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The launcher may have died between fork and prctl: then nobody would tell us.
            if libc::getppid() != launcher_pid {
                return Err(io::Error::other(
                    "rsrun exited while this rank was starting",
                ));
            }
            if let Some(set) = &cpu {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| io::Error::other("child pid out of range"))?;
    // Dropping the std handle later neither kills nor reaps the child: the job's reaper does.
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io::Error::other("child stdio pipes missing"));
    };
    Ok(RankProcess {
        rank,
        pid,
        stdin: child.stdin.take(),
        stdout,
        stderr,
    })
}

/// The CPUs rsrun itself may run on, in order; ranks bound to cores are spread over these.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let mut set = MaybeUninit::<libc::cpu_set_t>::zeroed();
    // SAFETY: `set` is a zeroed (valid, empty) cpu_set_t of exactly the size passed, and
    // sched_getaffinity writes at most that many bytes into it.
    let rc = unsafe {
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set.as_mut_ptr())
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zeroed memory is a valid cpu_set_t, and the call above only filled it in.
    let set = unsafe { set.assume_init() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET only reads `set`, and every index is below the set's capacity.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

fn cpu_set_of(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is the valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from allowed_cpus, so it is below the set's capacity.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_may_run_somewhere() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let set = cpu_set_of(cpus[0]);
        // SAFETY: CPU_ISSET only reads the set, and the index is in range.
        assert!(unsafe { libc::CPU_ISSET(cpus[0], &set) });
    }
}
