//! Running this test binary as the ranks of an rsrun job.
//!
//! Each test starts rsrun on `current_exe()` with only the `rank_mode` test selected and
//! `RANK_MODE` naming what the ranks do. rsrun is found next to the test binary's directory
//! (`target/<profile>/rsrun`): build it first with `cargo build -p launcher`
//! (tools/test-all.sh builds the workspace before testing).

use std::env;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use mpirt::traits::*;

pub const RANK_MODE: &str = "MPIRT_TEST_RANK_MODE";
/// The test binary's arguments that run only `rank_mode`, quietly, as a rank.
pub const RANK_MODE_ARGS: [&str; 5] = [
    "--exact",
    "rank_mode",
    "--nocapture",
    "--test-threads=1",
    "-q",
];
/// Generous: the machine may be shared and slow; a hang is what this guards against.
const LIMIT: Duration = Duration::from_secs(120);

/// How long a job may run: [`LIMIT`], or five times that over libfabric's verbs provider,
/// which runs in the Soft-RoCE guest on an emulated CPU (five ranks of every collective took
/// 63 s there on a quiet host, and over 120 s with the host's two cores loaded 25-fold).
fn job_limit() -> Duration {
    if ofi_test_provider().starts_with("verbs") {
        5 * LIMIT
    } else {
        LIMIT
    }
}

pub fn rsrun_path() -> PathBuf {
    let exe = env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("rsrun");
    assert!(
        path.exists(),
        "{} is missing: build it first with `cargo build -p launcher`",
        path.display()
    );
    path
}

/// Runs `command` with a hard time limit.
pub fn run_limited(mut command: Command) -> Output {
    let started = Instant::now();
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let watchdog = thread::spawn(move || child.wait_with_output().expect("wait"));
    let limit = job_limit();
    while !watchdog.is_finished() {
        if started.elapsed() > limit {
            // SAFETY: kill(2) with a pid of a child this test spawned; the watchdog thread
            // has not reaped it yet, since it is still waiting.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the job did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
    watchdog.join().unwrap()
}

/// What starts the ranks.
#[derive(Clone, Copy, Debug)]
pub enum Launch {
    /// rsrun, or the launcher MPIRT_TEST_LAUNCHER names (see [`test_launcher`]).
    Rsrun,
    /// Slurm's `srun --mpi=pmi2` across this many nodes (see [`slurm_available`]).
    #[allow(dead_code)] // each test binary compiles this module; threads.rs does not use it
    Srun { nodes: u32 },
    /// rsrun with `args` before the program, itself under `taskset -c cpus`, so that its
    /// ranks inherit those CPUs.
    #[allow(dead_code)] // each test binary compiles this module; only collectives.rs uses it
    RsrunOn {
        cpus: &'static str,
        args: &'static [&'static str],
    },
    /// rsrun across MPIRT_TEST_HOSTS with `ranks` ranks on each host in turn
    /// (`--map-by ppr:<ranks>:node`) rather than one at a time.
    #[allow(dead_code)] // each test binary compiles this module; only collectives.rs uses it
    RsrunPerHost { ranks: u32 },
    /// rsrun across MPIRT_TEST_HOSTS's hosts with `slots[i]` slots on the i-th, the ranks
    /// mapped by `map` (rsrun's `--map-by`: `slot` fills each host in turn, `node` deals
    /// them round): uneven placements.
    #[allow(dead_code)] // each test binary compiles this module; only collectives.rs uses it
    RsrunSlots {
        slots: &'static [u32],
        map: &'static str,
    },
}

/// Whether a Slurm is up for the srun tests: tools/test-all.sh starts one across the test
/// hosts (../shared/testhosts/slurm-local) and sets MPIRT_TEST_SLURM for them.
#[allow(dead_code)] // each test binary compiles this module; threads.rs does not use it
pub fn slurm_available() -> bool {
    let up = env::var_os("MPIRT_TEST_SLURM").is_some();
    if !up {
        println!(
            "skipped: no Slurm here (tools/test-all.sh starts one on the test hosts and sets \
             MPIRT_TEST_SLURM)"
        );
    }
    up
}

/// The PML the rsrun jobs of this run use: tools/test-all.sh's UCX phase sets
/// MPIRT_TEST_PML=ucx to run the suites again on `rsrun --pml ucx`.
pub fn test_pml() -> String {
    env::var("MPIRT_TEST_PML").unwrap_or_else(|_| "native".into())
}

/// The libfabric provider the suites' jobs over OFI use: tools/test-all.sh's OFI phase
/// sets MPIRT_TEST_OFI_PROVIDER to run them on each provider libfabric has here.
pub fn ofi_test_provider() -> String {
    env::var("MPIRT_TEST_OFI_PROVIDER").unwrap_or_else(|_| "tcp;ofi_rxm".into())
}

/// The environment that keeps libfabric's udp and tcp providers on loopback where the jobs'
/// ranks share this host (none where they are spread over hosts): by default they bind to
/// the first interface they list, which with the SSH test hosts up is their bridge, and a run
/// that takes the hosts down deletes it under the job. A variable this test's environment
/// sets is the user's, which the ranks inherit, and stays.
/// (pml's tests have their own, `ranks_common::ofi_on_loopback`, for one host only: test
/// helpers cannot cross crates without a crate of their own.)
#[allow(dead_code)] // each test binary compiles this module; the suites over OFI use it
pub fn ofi_on_loopback() -> Vec<(&'static str, &'static str)> {
    if spread_over_hosts() {
        return Vec::new();
    }
    ["FI_UDP_IFACE", "FI_TCP_IFACE"]
        .into_iter()
        .filter(|name| env::var_os(name).is_none())
        .map(|name| (name, "lo"))
        .collect()
}

/// rsrun's arguments for this run: `--pml` (MPIRT_TEST_PML) and, where MPIRT_TEST_HOSTS names
/// hosts (`host1:2,host2:2`), ranks spread over them round-robin, as many as a job asks for.
fn rsrun_args() -> Vec<String> {
    rsrun_args_mapped("node")
}

/// [`rsrun_args`] with the ranks mapped to the hosts by `map` (rsrun's `--map-by`).
fn rsrun_args_mapped(map: &str) -> Vec<String> {
    let mut args = vec!["--pml".to_string(), test_pml()];
    if let Ok(hosts) = env::var("MPIRT_TEST_HOSTS") {
        args.extend(["-H", &hosts, "--map-by", map, "--oversubscribe"].map(String::from));
    }
    args
}

/// What starts the suites' jobs: rsrun, or the launcher MPIRT_TEST_LAUNCHER names, which
/// tools/test-all.sh sets to run the suites again under each launcher a cluster uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestLauncher {
    Rsrun,
    /// MPICH's `mpiexec.hydra` (PMI-1 on PMI_FD).
    Hydra,
    /// Open MPI's `mpirun.openmpi` (PMIx: the `pmix` feature).
    OpenMpi,
    /// Slurm's `srun --mpi=pmix` (the `pmix` feature) or `srun --mpi=pmi2`, across
    /// MPIRT_TEST_SLURM_NODES nodes.
    SrunPmix,
    SrunPmi2,
}

pub fn test_launcher() -> TestLauncher {
    match env::var("MPIRT_TEST_LAUNCHER").as_deref() {
        Err(_) | Ok("rsrun") => TestLauncher::Rsrun,
        Ok("hydra") => TestLauncher::Hydra,
        Ok("mpirun") => TestLauncher::OpenMpi,
        Ok("srun-pmix") => TestLauncher::SrunPmix,
        Ok("srun-pmi2") => TestLauncher::SrunPmi2,
        Ok(other) => {
            panic!("MPIRT_TEST_LAUNCHER={other}: not rsrun, hydra, mpirun, srun-pmix or srun-pmi2")
        }
    }
}

/// Whether this run's jobs are rsrun's; where not, a test of rsrun's own behaviour says it
/// skips.
#[allow(dead_code)] // each test binary compiles this module; only p2p.rs uses it
pub fn under_rsrun(what: &str) -> bool {
    let launcher = test_launcher();
    if launcher != TestLauncher::Rsrun {
        println!("skipped under {launcher:?}: {what} is rsrun's");
    }
    launcher == TestLauncher::Rsrun
}

/// Whether the jobs' ranks are spread over hosts (MPIRT_TEST_HOSTS, or srun over
/// MPIRT_TEST_SLURM_NODES nodes), where a test that needs `what` between its ranks says it
/// skips.
#[allow(dead_code)] // each test binary compiles this module; p2p.rs and intercommunicators.rs use it
pub fn across_hosts(what: &str) -> bool {
    let spread = spread_over_hosts();
    if spread {
        println!("skipped: the ranks are on different hosts; this needs {what}");
    }
    spread
}

/// Whether the jobs' ranks are spread over hosts (MPIRT_TEST_HOSTS, or srun over
/// MPIRT_TEST_SLURM_NODES nodes).
pub fn spread_over_hosts() -> bool {
    let srun = matches!(
        test_launcher(),
        TestLauncher::SrunPmix | TestLauncher::SrunPmi2
    );
    env::var_os("MPIRT_TEST_HOSTS").is_some() || (srun && slurm_nodes() > 1)
}

/// How many Slurm nodes the srun launchers spread a job over (MPIRT_TEST_SLURM_NODES).
fn slurm_nodes() -> u32 {
    env::var("MPIRT_TEST_SLURM_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// A program that runs `ssh` with MPIRT_SSH_ARGS (the test hosts' config): Hydra and Open
/// MPI take the program to start their remote daemons with, not a command line. Written once
/// per test process beside the test binary (written whole under a name of this process's, then
/// renamed, so that a test binary running beside never runs half a script).
fn ssh_program() -> PathBuf {
    static PROGRAM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            let dir = env::current_exe().unwrap().parent().unwrap().to_path_buf();
            let path = dir.join("mpirt-test-ssh");
            let written = dir.join(format!("mpirt-test-ssh.{}", std::process::id()));
            let args = env::var("MPIRT_SSH_ARGS").unwrap_or_default();
            std::fs::write(&written, format!("#!/bin/sh\nexec ssh {args} \"$@\"\n")).unwrap();
            let mut perms = std::fs::metadata(&written).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&written, perms).unwrap();
            std::fs::rename(&written, &path).unwrap();
            path
        })
        .clone()
}

/// The command that starts `n` ranks under `launcher`, spread over MPIRT_TEST_HOSTS where
/// set; `envs` are the variables the ranks need (Open MPI forwards only those it is told).
fn launcher_command(launcher: TestLauncher, n: u32, envs: &[(&str, &str)]) -> Command {
    let hosts = env::var("MPIRT_TEST_HOSTS").ok();
    let n = n.to_string();
    match launcher {
        TestLauncher::Rsrun => {
            let mut c = Command::new(rsrun_path());
            c.args(rsrun_args()).arg("-n").arg(n);
            c
        }
        TestLauncher::Hydra => {
            let mut c = Command::new("mpiexec.hydra");
            if let Some(hosts) = hosts {
                // Round-robin over the hosts, one rank at a time, as rsrun's --map-by node;
                // the proxies call back to mpiexec over the hosts' bridge.
                let one_each: Vec<String> = hosts
                    .split(',')
                    .map(|h| format!("{}:1", h.split(':').next().unwrap()))
                    .collect();
                c.args(["-hosts", &one_each.join(","), "-launcher", "ssh"])
                    .arg("-launcher-exec")
                    .arg(ssh_program())
                    .args(["-iface", "rsbr0"]);
            }
            c.args(["-n", &n]);
            c
        }
        TestLauncher::OpenMpi => {
            let mut c = Command::new("mpirun.openmpi");
            c.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
            ]);
            if let Some(hosts) = hosts {
                c.args(["-H", &hosts, "--map-by", "node", "--mca", "plm_rsh_agent"])
                    .arg(ssh_program())
                    .args(["--mca", "oob_tcp_if_include", "10.77.0.0/24"]);
            }
            for name in envs.iter().map(|(k, _)| *k).chain([RANK_MODE]) {
                c.args(["-x", name]);
            }
            for (name, _) in env::vars().filter(|(k, _)| k.starts_with("MPIRT_")) {
                if !envs.iter().any(|(k, _)| *k == name) && name != RANK_MODE {
                    c.args(["-x", &name]);
                }
            }
            c.args(["-n", &n]);
            c
        }
        TestLauncher::SrunPmix | TestLauncher::SrunPmi2 => {
            let mpi = match launcher {
                TestLauncher::SrunPmix => "--mpi=pmix",
                _ => "--mpi=pmi2",
            };
            // No more nodes than ranks: srun refuses a step with an idle node.
            let nodes = slurm_nodes().min(n.parse().unwrap()).to_string();
            let mut c = Command::new("srun");
            c.args([mpi, "--kill-on-bad-exit=1", "-N", &nodes, "-n", &n]);
            c
        }
    }
}

/// Runs `n` ranks of this binary in rank mode `mode`, with `envs` set.
pub fn job(n: u32, mode: &str, envs: &[(&str, &str)]) -> Output {
    job_on(Launch::Rsrun, n, mode, envs)
}

/// Runs `n` ranks of this binary in rank mode `mode` started by `launch`, with `envs` set.
pub fn job_on(launch: Launch, n: u32, mode: &str, envs: &[(&str, &str)]) -> Output {
    let mut command = match launch {
        Launch::Rsrun => launcher_command(test_launcher(), n, envs),
        Launch::Srun { nodes } => {
            let mut c = Command::new("srun");
            c.args(["--mpi=pmi2", "--kill-on-bad-exit=1", "-n"])
                .arg(n.to_string())
                .arg("-N")
                .arg(nodes.to_string());
            c
        }
        Launch::RsrunPerHost { ranks } => {
            let mut c = Command::new(rsrun_path());
            c.args(rsrun_args_mapped(&format!("ppr:{ranks}:node")))
                .arg("-n")
                .arg(n.to_string());
            c
        }
        Launch::RsrunSlots { slots, map } => {
            let hosts = env::var("MPIRT_TEST_HOSTS").expect("MPIRT_TEST_HOSTS names the hosts");
            let names = hosts.split(',').map(|h| h.split(':').next().unwrap_or(h));
            let hosts: Vec<String> = names
                .zip(slots)
                .map(|(name, slots)| format!("{name}:{slots}"))
                .collect();
            assert_eq!(
                hosts.len(),
                slots.len(),
                "MPIRT_TEST_HOSTS has too few hosts"
            );
            let mut c = Command::new(rsrun_path());
            c.args([
                "--pml",
                &test_pml(),
                "-H",
                &hosts.join(","),
                "--map-by",
                map,
            ])
            .arg("-n")
            .arg(n.to_string());
            c
        }
        Launch::RsrunOn { cpus, args } => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus])
                .arg(rsrun_path())
                .args(args)
                .arg("-n")
                .arg(n.to_string());
            c
        }
    };
    command
        .arg(env::current_exe().unwrap())
        .args(RANK_MODE_ARGS)
        .env(RANK_MODE, mode);
    for (k, v) in envs {
        command.env(k, v);
    }
    run_limited(command)
}

pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs a job that must succeed, each rank printing `rank <r> done`; returns its stdout and
/// stderr.
pub fn ok_job_with(n: u32, mode: &str, envs: &[(&str, &str)]) -> (String, String) {
    ok_job_on(Launch::Rsrun, n, mode, envs)
}

/// As [`ok_job_with`], with the ranks started by `launch`.
pub fn ok_job_on(launch: Launch, n: u32, mode: &str, envs: &[(&str, &str)]) -> (String, String) {
    let output = job_on(launch, n, mode, envs);
    let (stdout, stderr) = text(&output);
    assert!(
        output.status.success(),
        "{mode} on {n} ranks ({launch:?}, {envs:?}) failed\n{stdout}\n{stderr}"
    );
    for rank in 0..n {
        assert!(
            stdout.contains(&format!("rank {rank} done")),
            "{stdout}\n{stderr}"
        );
    }
    (stdout, stderr)
}

/// Files by which ranks say where they are while one of them stays outside mpirt (so cannot
/// answer a message): in a directory that rank 0 makes afresh, named by its pid, which every
/// rank reaches (the suite's ranks share one file system, test hosts included).
#[allow(dead_code)] // each test binary compiles this module; windows.rs and collectives.rs use it
pub struct SideFiles {
    dir: std::path::PathBuf,
}

#[allow(dead_code)] // each test binary compiles this module; windows.rs and collectives.rs use it
impl SideFiles {
    /// Collective: rank 0 makes the directory for `what` (empty), then every rank learns its
    /// name.
    pub fn of_rank_0(world: &mpirt::topology::SimpleCommunicator, what: &str) -> SideFiles {
        let mut pid = std::process::id();
        world.process_at_rank(0).broadcast_into(&mut pid);
        let dir = env::temp_dir().join(format!("mpirt-test-{what}-{pid}"));
        if world.rank() == 0 {
            // Left by an earlier process of this pid that crashed: its files would say too much.
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("rank 0's side directory");
        }
        world.barrier();
        SideFiles { dir }
    }

    /// Says `name`.
    pub fn say(&self, name: &str) {
        std::fs::write(self.dir.join(name), b"").expect("a side file");
    }

    /// Waits, outside mpirt, until another rank said `name`: a bound far past any preemption,
    /// so that a rank that never says it fails the job rather than hanging it.
    pub fn wait_for(&self, name: &str) {
        let start = std::time::Instant::now();
        while !self.dir.join(name).exists() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "no rank said {name:?} in {} within 60 s",
                self.dir.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Collective: once every rank is past its waits, rank 0 removes the files.
    pub fn remove(self, world: &mpirt::topology::SimpleCommunicator) {
        world.barrier();
        if world.rank() == 0 {
            std::fs::remove_dir_all(&self.dir).expect("rank 0's side directory");
        }
    }
}

/// The sums over `comm` of `sends`, one immediate all-reduction each, all in flight at once
/// and waited on out of order (the odd ones first, then the even ones last first): more of
/// them than a thread keeps slots for (16) gives each call's execution a slot of its own.
#[allow(dead_code)] // each test binary compiles this module; collectives.rs and threads.rs use it
pub fn sums_in_flight(
    comm: &mpirt::topology::SimpleCommunicator,
    sends: &[[u64; 2]],
) -> Vec<[u64; 2]> {
    let mut sums = vec![[0u64; 2]; sends.len()];
    mpirt::request::scope(|scope| {
        let mut requests: Vec<_> = sends
            .iter()
            .zip(sums.iter_mut())
            .map(|(send, sum)| {
                let op = mpirt::collective::SystemOperation::sum();
                Some(comm.immediate_all_reduce_into(scope, &send[..], &mut sum[..], op))
            })
            .collect();
        let odd = (1..requests.len()).step_by(2);
        let even_last_first = (0..requests.len()).step_by(2).rev();
        for k in odd.chain(even_last_first) {
            requests[k].take().expect("waited once").wait();
        }
    });
    sums
}
