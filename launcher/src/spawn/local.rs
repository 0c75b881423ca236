//! Starting ranks on this host with fork/exec.
//!
//! Each rank leads its own process group, so rsrun can signal a rank together with anything it
//! started (`kill(-pgid)`), and so a terminal's Ctrl-C reaches rsrun alone, which then forwards it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, Stdio};

use bootstrap::vars;

use crate::spawn::binding::{cpu_set_of, Binding};

/// The variables Open MPI's and MPICH's (Hydra's) launchers give a rank, which wrapper scripts
/// read (to pick a GPU by local rank, say), with this rank's values: rank and size in the job,
/// then on its host. rsrun runs one job step, so Open MPI's node rank is the local rank.
/// PMI_RANK and PMI_SIZE are left out on purpose: PMI clients (MPICH's, and mpirt's own once it
/// speaks PMI-1) take them for "a PMI process manager started me", which rsrun is not.
pub fn compat_vars(
    rank: u32,
    size: u32,
    local_rank: u32,
    local_size: u32,
) -> [(&'static str, u32); 7] {
    [
        ("OMPI_COMM_WORLD_RANK", rank),
        ("OMPI_COMM_WORLD_SIZE", size),
        ("OMPI_COMM_WORLD_LOCAL_RANK", local_rank),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", local_size),
        ("OMPI_COMM_WORLD_NODE_RANK", local_rank),
        ("MPI_LOCALRANKID", local_rank),
        ("MPI_LOCALNRANKS", local_size),
    ]
}

/// Everything the ranks of one host share.
pub struct LaunchSpec<'a> {
    /// The program's path, already resolved against `dir` or `PATH` (see `workdir::resolve`).
    pub program: &'a Path,
    /// The program as the user gave it, which ranks get as their `argv[0]`, as from a shell.
    pub arg0: &'a OsStr,
    pub args: &'a [OsString],
    /// Set on top of rsrun's own environment, before the `MPIRT_*` variables.
    pub env: &'a [(String, OsString)],
    pub size: u32,
    pub job_id: &'a str,
    pub kvs_addr: String,
    pub kvs_secret: &'a str,
    /// The directory ranks start in.
    pub dir: &'a Path,
    pub binding: &'a Binding,
}

/// Where one rank sits: its rank in the job, its place among the ranks on its host, and whether
/// it reads rsrun's stdin (rank 0; the others get /dev/null).
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
    /// Whether it was pinned to CPUs.
    pub pinned: bool,
}

/// Readies `cmd`'s process to start with rsrun's forwarded signals unblocked, to die with
/// this thread (PR_SET_PDEATHSIG), and, given `cpu`, pinned to it. For ranks and for a spawned
/// job's rsrun alike: neither may outlive a SIGKILLed rsrun, which cannot clean up.
pub(crate) fn die_with_launcher(cmd: &mut Command, cpu: Option<libc::cpu_set_t>) {
    // rsrun blocks SIGINT/SIGTERM/SIGHUP in all its threads (see `signals`), and a blocked mask
    // survives exec; std's posix_spawn path does not clear it, so the child does it here.
    let unblock = crate::signals::forwarded_set();
    // A rank must not outlive rsrun (or the agent) when that is SIGKILLed and cannot clean up:
    // the kernel kills it when the spawning thread dies. Ranks and spawned jobs are started from
    // the thread that supervises the job for its whole life, so this fires only when the
    // launcher is gone.
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
                    "rsrun exited while this process was starting",
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
}

/// Starts one rank. Fails (with the exec error, e.g. "No such file or directory") if the
/// program cannot be run; std reports exec failures back to the parent.
pub fn spawn_rank(spec: &LaunchSpec<'_>, slot: Slot) -> io::Result<RankProcess> {
    let rank = slot.rank;
    let mut cmd = Command::new(spec.program);
    cmd.arg0(spec.arg0)
        .args(spec.args)
        .current_dir(spec.dir)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        // As Open MPI does: PWD is the rank's directory by the (logical) path it was given as,
        // not the launcher's own; shells and `pwd` trust PWD when it names the directory.
        .env("PWD", spec.dir)
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
    for (name, value) in compat_vars(rank, spec.size, slot.local_rank, slot.local_size) {
        cmd.env(name, value.to_string());
    }
    // libfabric's settings for mpirt's OFI transport, here so that no rank need change its
    // own environment, and the one that keeps libinfinipath off the rank's signals, which
    // only a launcher can set (see bootstrap's `libfabric`); what the rank's environment
    // sets wins.
    let rank_var = |name: &str| {
        spec.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .or_else(|| std::env::var(name).ok())
    };
    for (name, value) in bootstrap::libfabric::launcher_settings(rank_var, Some(spec.size)) {
        cmd.env(name, value);
    }
    let pinned = spec.binding.cpus_of(slot.local_rank, slot.local_size);
    match pinned {
        Some([cpu]) => cmd.env(vars::BOUND_CPU, cpu.to_string()),
        _ => cmd.env_remove(vars::BOUND_CPU),
    };
    let cpu = pinned.map(cpu_set_of);
    die_with_launcher(&mut cmd, cpu);
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
        pinned: pinned.is_some(),
    })
}
