//! One job from start to exit code: start the key-value service and the ranks, then supervise.
//!
//! Everything that can happen to a running job arrives as an [`Event`] on one channel (rank
//! exits from the reaper thread, aborts from the key-value service, signals, output streams
//! closing), so the supervisor is a single loop with no shared state.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bootstrap::{random_hex, vars, PARENT_KEY};

use crate::agent::{AgentArgs, Command as AgentCommand, Report};
use crate::cli::{BindTo, Cli};
use crate::hosts::{self, MapBy};
use crate::kvs::{KvsServer, KvsState};
use crate::output::{self, Outputs, Sink};
use crate::rankfile;
use crate::signals;
use crate::spawn::binding::{self, Binding};
use crate::spawn::local::{self, LaunchSpec, RankProcess, Slot};
use crate::spawn::ssh::{self, SshSpec, ToAgent};
use crate::spawn::workdir;
use crate::spawned::{Ended, SpawnedJobs};
use crate::stall::StallBook;
use crate::stdin::ForegroundStdin;
use bootstrap::stall::RankState;
use bootstrap::wire::{SpawnApp, SpawnVerdict};

/// Exit code when `--timeout` ends the job, as timeout(1) uses.
const TIMEOUT_EXIT: i32 = 124;
/// rsrun's exit code when `--stall-timeout` ended a stuck job.
const STALL_EXIT: i32 = 125;
/// Exit code when the program cannot be started, as shells use for "command not found".
const NOT_FOUND_EXIT: i32 = 127;
/// After SIGKILL, how long to wait for the kernel to report the ranks dead.
const KILL_WAIT: Duration = Duration::from_millis(500);
/// How long to wait for the last output lines once the ranks are gone.
const OUTPUT_DRAIN: Duration = Duration::from_millis(300);
/// The same for jobs with remote hosts, whose agents forward output over ssh.
const REMOTE_DRAIN: Duration = Duration::from_secs(3);
/// How long an agent may take to report its ranks started: a hung login or sshd must end the
/// job with a message, not hang it. ssh's own connect timeout is shorter (see `spawn::ssh`).
const AGENT_START_LIMIT: Duration = Duration::from_secs(8);
/// How much of rsrun's stdin one read takes, and how much may be on its way to a remote rank 0
/// before the agent acknowledges it (see `forward_stdin`).
const STDIN_CHUNK: usize = 64 * 1024;
const STDIN_WINDOW: usize = 1 << 20;
/// Variables the agent sets for each rank itself, so rsrun's own values are not forwarded.
const PER_RANK_VARS: [&str; 7] = [
    vars::RANK,
    vars::SIZE,
    vars::LOCAL_RANK,
    vars::LOCAL_SIZE,
    vars::JOB_ID,
    vars::KVS_ADDR,
    vars::KVS_SECRET,
];

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
    /// The agent on host number `host` checked what it can and waits for the word to start.
    AgentReady { host: usize },
    /// A remote agent started a rank, as `pid` on its host.
    RemoteStarted { rank: u32, pid: libc::pid_t },
    /// A remote rank ended; `status` is the raw wait status on its host.
    RemoteExited { rank: u32, status: libc::c_int },
    /// The agent on host number `host` could not start the program; rsrun exits with `code`.
    AgentFailed {
        host: usize,
        code: i32,
        message: String,
    },
    /// The agent link to host number `host` closed (its ssh client exited); `stderr` is
    /// what ssh and the agent wrote there, which explains a failure to connect.
    AgentGone { host: usize, stderr: String },
    /// One rank output stream reached end of file.
    OutputDone,
    /// A rank said what it waits for (`state`, encoded), or that it moved again (`None`).
    Stall { rank: u32, state: Option<Vec<u8>> },
    /// A rank asked for a job of new ranks (MPI's spawn); the verdict goes to `reply`.
    Spawn {
        rank: u32,
        apps: Vec<SpawnApp>,
        parent: String,
        reply: mpsc::Sender<SpawnVerdict>,
    },
    /// Rank `rank`'s spawn of `job` returns an error (`why`) instead of joining its ranks.
    SpawnUnjoined { rank: u32, job: String, why: String },
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

/// The hosts of a job and the ranks each runs.
struct Placement {
    /// Host names, for messages; None for a job given no hosts (everything local, as before).
    names: Option<Vec<String>>,
    hosts: Vec<HostPlan>,
    size: u32,
}

/// One host's part of the job.
struct HostPlan {
    /// Whether it is this machine.
    local: bool,
    /// Its ranks, in local-rank order.
    ranks: Vec<u32>,
    /// A rankfile's CPUs for each of them.
    cpus: Option<Vec<Vec<usize>>>,
}

impl Placement {
    fn from_cli(cli: &Cli) -> Result<Placement, String> {
        let mut hosts = Vec::new();
        if let Some(path) = &cli.hostfile {
            let text = fs::read_to_string(path)
                .map_err(|e| format!("cannot read hostfile {}: {e}", path.display()))?;
            let parsed = hosts::parse_hostfile(&text)
                .map_err(|e| format!("hostfile {}: {e}", path.display()))?;
            hosts.extend(parsed);
        }
        for list in &cli.hosts {
            hosts.extend(hosts::parse_host_list(list).map_err(|e| format!("-H {list}: {e}"))?);
        }
        let var = |name: &str| std::env::var(name).ok();
        if cli.in_allocation(var) {
            let nodes = var("SLURM_JOB_NODELIST").unwrap_or_default();
            hosts = hosts::slurm_allocation(&nodes, var("SLURM_TASKS_PER_NODE").as_deref())?;
        }
        let (layout, cpus) = if let Some(path) = &cli.rankfile {
            let in_file = |e: String| format!("rankfile {}: {e}", path.display());
            let text = fs::read_to_string(path)
                .map_err(|e| format!("cannot read rankfile {}: {e}", path.display()))?;
            let entries = rankfile::parse(&text).map_err(in_file)?;
            let placed = rankfile::place(&entries, &hosts, cli.ranks).map_err(in_file)?;
            hosts = placed.hosts;
            placed
                .ranks
                .into_iter()
                .map(|on_host| {
                    let (ranks, cpus): (Vec<u32>, Vec<Vec<usize>>) = on_host.into_iter().unzip();
                    (ranks, Some(cpus))
                })
                .unzip()
        } else if hosts.is_empty() {
            let size = cli
                .ranks
                .expect("the command line requires -n without hosts");
            if let MapBy::PerNode(per) = cli.mapping() {
                if size > per {
                    return Err(format!(
                        "{size} ranks requested, but {per} per node on this one host places \
                         only {per}; give hosts with -H or --hostfile"
                    ));
                }
            }
            return Ok(Placement {
                names: None,
                hosts: vec![HostPlan {
                    local: true,
                    ranks: (0..size).collect(),
                    cpus: None,
                }],
                size,
            });
        } else {
            let layout = hosts::map_ranks(&hosts, cli.ranks, cli.mapping(), cli.oversubscribe)?;
            let cpus = vec![None; layout.len()];
            (layout, cpus)
        };
        let own = hosts::own_hostname();
        let size = layout.iter().map(|r: &Vec<u32>| r.len() as u32).sum();
        Ok(Placement {
            names: Some(hosts.iter().map(|h| h.name.clone()).collect()),
            hosts: hosts
                .iter()
                .zip(layout.into_iter().zip(cpus))
                .map(|(h, (ranks, cpus))| HostPlan {
                    local: hosts::is_local(&h.name, &own),
                    ranks,
                    cpus,
                })
                .collect(),
            size,
        })
    }

    /// How host `host`'s ranks are pinned; `allowed` are the CPUs the launcher there may use.
    fn binding(&self, host: usize, bind_to: BindTo, allowed: &[usize]) -> Binding {
        match (&self.hosts[host].cpus, bind_to) {
            (Some(cpus), _) => Binding::Cpus(cpus.clone()),
            (None, BindTo::Core) => Binding::Core(allowed.to_vec()),
            (None, BindTo::None) => Binding::None,
        }
    }
}

/// This machine's part of the job, checked before anything starts as an agent checks its
/// host's: the working directory, the program and the CPUs.
struct LocalPlan {
    /// The name messages give this machine.
    name: String,
    dir: PathBuf,
    /// The program, resolved against `dir` or `PATH`.
    program: PathBuf,
    /// The local hosts with ranks (indexes into the placement) and how each binds them.
    hosts: Vec<(usize, Binding)>,
}

impl LocalPlan {
    /// None when no rank runs here; an error is rsrun's exit code and what to say.
    fn check(
        cli: &Cli,
        placement: &Placement,
        (wdir, wdir_named): (&Path, bool),
        rank_env: &[(String, OsString)],
        own: &str,
    ) -> Result<Option<LocalPlan>, (i32, String)> {
        let local: Vec<usize> = (0..placement.hosts.len())
            .filter(|&h| placement.hosts[h].local && !placement.hosts[h].ranks.is_empty())
            .collect();
        let Some(&first) = local.first() else {
            return Ok(None);
        };
        let name = placement.names.as_ref().map_or(own, |n| &n[first]);
        let on_host = |e: String| (1, format!("{name}: {e}"));
        let allowed =
            binding::allowed_cpus().map_err(|e| (1, format!("cannot read CPU affinity: {e}")))?;
        let home = std::env::var_os("HOME");
        let place = workdir::choose(wdir, wdir_named, home.as_deref()).map_err(on_host)?;
        if let Some(warning) = &place.fallback {
            eprintln!("rsrun: warning: {name}: {warning}");
        }
        let program = &cli.command[0];
        let path = workdir::rank_path(rank_env);
        let resolved = workdir::resolve(program, &place.dir, path.as_deref()).map_err(|e| {
            let why = workdir::start_error(&e, None, &place.dir);
            let said = format!(
                "cannot start '{}' on {name}: {why}",
                program.to_string_lossy()
            );
            (NOT_FOUND_EXIT, said)
        })?;
        let mut hosts = Vec::new();
        for host in local {
            let binding = placement.binding(host, cli.bind_to, &allowed);
            binding
                .check(&placement.hosts[host].ranks, &allowed)
                .map_err(on_host)?;
            hosts.push((host, binding));
        }
        Ok(Some(LocalPlan {
            name: name.to_string(),
            dir: place.dir,
            program: resolved,
            hosts,
        }))
    }
}

/// Where the ranks should run: `--wdir` (relative to rsrun's working directory), else rsrun's
/// working directory, as the shell names it (see `workdir::logical_cwd`); and whether the user
/// named it.
fn wanted_dir(cli: &Cli) -> io::Result<(PathBuf, bool)> {
    let cwd = workdir::logical_cwd()?;
    Ok(match &cli.wdir {
        Some(dir) => (cwd.join(dir), true),
        None => (cwd, false),
    })
}

/// rsrun's link to one remote host's agent.
struct AgentLink {
    /// The ssh client, which leads its own process group.
    pid: libc::pid_t,
    /// Signals and stdin for the agent; hanging up tells it to kill its ranks.
    link: mpsc::Sender<ToAgent>,
    /// The agent's acknowledgements of stdin passed on to rank 0 (taken by the stdin thread).
    input_acks: Option<mpsc::Receiver<Report>>,
    ranks: Vec<u32>,
    gone: bool,
}

struct Job {
    id: String,
    verbose: bool,
    grace: Duration,
    program: String,
    /// Host names, when the job was given hosts; messages then say where a rank ran.
    host_names: Option<Vec<String>>,
    /// Host index of each rank.
    host_of: Vec<usize>,
    /// Pid (and process group id) of each local rank.
    pids: Vec<libc::pid_t>,
    /// Local ranks not yet reaped.
    running: HashMap<libc::pid_t, u32>,
    /// Remote ranks not yet exited, with their pid on their host once reported started.
    remote: HashMap<u32, Option<libc::pid_t>>,
    /// Agents by host index (None for hosts that are this machine or run no ranks).
    agents: Vec<Option<AgentLink>>,
    /// When every agent must have reported its ranks started.
    start_deadline: Option<Instant>,
    open_outputs: usize,
    events: mpsc::Receiver<Event>,
    /// What each rank waits for, as the ranks said (see `stall`).
    stalls: StallBook,
    stall_timeout: Option<Duration>,
    stall_report_file: Option<PathBuf>,
    /// Jobs of new ranks the ranks asked for (MPI's spawn), still running.
    spawned: SpawnedJobs,
    /// This rsrun's options that a spawned job's rsrun is given (`Cli::placement_args`).
    placement: Vec<std::ffi::OsString>,
}

impl Job {
    /// Starts the service and every rank. On failure, reports it, cleans up and returns the
    /// exit code. Everything that can be checked (placement, the launch command, the output
    /// files, and on every host the working directory, the program and the CPUs) is, before
    /// any rank starts anywhere: agents check their hosts and wait for the word to start.
    fn start(cli: &Cli) -> Result<Job, i32> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            eprintln!("rsrun: {what}: {e}");
            1
        };
        let said = |e: String| {
            eprintln!("rsrun: {e}");
            1
        };
        let placement = Placement::from_cli(cli).map_err(said)?;
        let size = placement.size;
        let any_remote = placement
            .hosts
            .iter()
            .any(|h| !h.local && !h.ranks.is_empty());
        let launch_command = if any_remote {
            cli.launch_command(|name| std::env::var(name).ok())
                .map_err(said)?
        } else {
            Vec::new()
        };
        let (wdir, wdir_named) =
            wanted_dir(cli).map_err(|e| fail("cannot read the working directory", &e))?;
        let env = cli.rank_env(|name| std::env::var_os(name));
        let (program, args) = cli.command.split_first().expect("clap requires PROGRAM");
        let own = hosts::own_hostname();
        let local_plan = LocalPlan::check(cli, &placement, (&wdir, wdir_named), &env, &own)
            .map_err(|(code, e)| {
                eprintln!("rsrun: {e}");
                code
            })?;
        let outputs = Outputs::new(
            cli.tag_output,
            cli.timestamp_output,
            cli.output_filename.as_ref(),
            size,
        )
        .map_err(|e| fail("cannot create the output files", &e))?;
        let outputs = Arc::new(outputs);
        let id = random_hex(8).map_err(|e| fail("cannot read /dev/urandom", &e))?;
        let secret = random_hex(16).map_err(|e| fail("cannot read /dev/urandom", &e))?;
        // The ranks' own connections prove they know another secret, which they get from
        // the key-value service (so it crosses no command line, environment or file).
        let job_secret = random_hex(32).map_err(|e| fail("cannot read /dev/urandom", &e))?;
        let (tx, events) = mpsc::channel();
        signals::forward_to(tx.clone()).map_err(|e| fail("cannot start a thread", &e))?;
        let bind_ip = if any_remote {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        let mut state = KvsState::new(size, secret.as_bytes()).with_job_secret(&job_secret);
        // A spawned job's: where its ranks' parents wait (see `spawned.rs`).
        if let Some(parent) = std::env::var_os(vars::PARENT) {
            state = state.with_value(PARENT_KEY, parent.as_encoded_bytes());
        }
        let kvs = KvsServer::start(state, bind_ip, tx.clone())
            .map_err(|e| fail("cannot start the key-value service", &e))?;
        let kvs_local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), kvs.addr().port());
        if cli.verbose {
            eprintln!(
                "rsrun: job {id}: {size} rank(s) of {}, key-value service at {}, binding {:?}, \
                 in {}",
                program.to_string_lossy(),
                kvs.addr(),
                cli.bind_to,
                wdir.display()
            );
        }
        let mut host_of = vec![0; size as usize];
        for (host, plan) in placement.hosts.iter().enumerate() {
            for &rank in &plan.ranks {
                host_of[rank as usize] = host;
            }
        }

        let mut job = Job {
            id: id.clone(),
            verbose: cli.verbose,
            grace: cli.grace,
            program: program.to_string_lossy().into_owned(),
            host_names: placement.names.clone(),
            host_of,
            pids: Vec::new(),
            running: HashMap::new(),
            remote: HashMap::new(),
            agents: Vec::new(),
            start_deadline: None,
            stalls: StallBook::new(size),
            stall_timeout: cli.stall_timeout,
            stall_report_file: cli.stall_report_file.clone(),
            spawned: SpawnedJobs::default(),
            placement: cli.placement_args(),
            open_outputs: 0,
            events,
        };
        if any_remote {
            let how = AgentSetup {
                command: &launch_command,
                rank_env: &env,
                secret: &secret,
                kvs_port: kvs.addr().port(),
                wdir: &wdir,
                wdir_named,
                outputs: &outputs,
            };
            if let Err(e) = job.start_agents(cli, &placement, &how, &tx) {
                eprintln!("rsrun: cannot start the launch agent: {e}");
                job.kill_all_now();
                return Err(1);
            }
            job.wait_until_ready()?;
        }
        let mut ranks: Vec<RankProcess> = Vec::new();
        if let Some(plan) = &local_plan {
            for (host, binding) in &plan.hosts {
                let spec = LaunchSpec {
                    program: &plan.program,
                    arg0: program,
                    args,
                    env: &env,
                    size,
                    job_id: &id,
                    kvs_addr: kvs_local.to_string(),
                    kvs_secret: &secret,
                    dir: &plan.dir,
                    binding,
                };
                let on_host = &placement.hosts[*host].ranks;
                let local_size = on_host.len() as u32;
                for (local_rank, &rank) in (0..).zip(on_host) {
                    let slot = Slot {
                        rank,
                        local_rank,
                        local_size,
                        stdin: rank == 0,
                    };
                    match local::spawn_rank(&spec, slot) {
                        Ok(process) => ranks.push(process),
                        Err(e) => {
                            eprintln!(
                                "rsrun: cannot start '{}' on {}: {}",
                                program.to_string_lossy(),
                                plan.name,
                                workdir::start_error(&e, Some(&plan.program), &plan.dir)
                            );
                            kill_and_reap(&ranks);
                            job.kill_all_now();
                            remove_shm_segments(&id);
                            return Err(if e.kind() == io::ErrorKind::NotFound {
                                NOT_FOUND_EXIT
                            } else {
                                1
                            });
                        }
                    }
                }
            }
        }
        job.pids = ranks.iter().map(|r| r.pid).collect();
        job.running = ranks.iter().map(|r| (r.pid, r.rank)).collect();
        // Every host is ready and this one's ranks run: the agents start theirs.
        for agent in job.agents.iter().flatten() {
            let _ = agent.link.send(ToAgent::Command(AgentCommand::Go));
        }
        if any_remote {
            job.start_deadline = Some(Instant::now() + AGENT_START_LIMIT);
        }
        for process in ranks {
            if job.verbose {
                eprintln!("rsrun: rank {} is pid {}", process.rank, process.pid);
            }
            if cli.report_bindings {
                let line = binding::report(&own, process.rank, process.pid, process.pinned);
                eprintln!("{line}");
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
                let outputs = Arc::clone(&outputs);
                match output::forward(source, sink, process.rank, outputs, tx.clone()) {
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
                    .spawn(move || io::copy(&mut ForegroundStdin::for_this_thread()?, &mut stdin));
            }
        }
        let rank0_host = job.host_of[0];
        if let Some(Some(agent)) = job.agents.get_mut(rank0_host) {
            if let Some(acks) = agent.input_acks.take() {
                if let Err(e) = forward_stdin(agent.link.clone(), acks) {
                    eprintln!("rsrun: warning: cannot pass stdin on to rank 0: {e}");
                }
            }
        }
        // Started only now: a reaper waiting on any child could otherwise take a child that
        // std's spawn reaps itself when exec fails.
        if let Err(e) = start_reaper(tx) {
            eprintln!("rsrun: cannot start a thread: {e}");
            job.kill_all_now();
            return Err(1);
        }
        Ok(job)
    }

    /// Starts one agent per remote host that has ranks, all at once.
    fn start_agents(
        &mut self,
        cli: &Cli,
        placement: &Placement,
        how: &AgentSetup<'_>,
        events: &mpsc::Sender<Event>,
    ) -> io::Result<()> {
        let rsrun = std::env::current_exe()?;
        // rsrun's own MPIRT_* and UCX_* settings (UCX_TLS, ... for --pml ucx) reach local
        // ranks by inheritance; remote ones get them explicitly, before the command line's,
        // which win. The per-rank variables the agent sets itself are left out.
        let mut env: Vec<(String, OsString)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
            .filter(|(k, _)| {
                (k.starts_with("MPIRT_") || k.starts_with("UCX_"))
                    && !PER_RANK_VARS.contains(&k.as_str())
            })
            .collect();
        env.sort();
        env.extend(how.rank_env.iter().cloned());
        let spec = SshSpec {
            command: how.command,
            rsrun: &rsrun,
            env: &env,
            secret: how.secret,
            outputs: how.outputs,
        };
        let names = placement.names.as_deref().unwrap_or_default();
        let (program, args) = cli.command.split_first().expect("clap requires PROGRAM");
        for (host, plan) in placement.hosts.iter().enumerate() {
            if plan.local || plan.ranks.is_empty() {
                self.agents.push(None);
                continue;
            }
            let agent_args = AgentArgs {
                job_id: self.id.clone(),
                size: placement.size,
                kvs_port: how.kvs_port,
                // `Core` travels as a word: the agent pins to its own host's CPUs.
                binding: placement.binding(host, cli.bind_to, &[]),
                ranks: plan.ranks.clone(),
                wdir: how.wdir.as_os_str().to_owned(),
                wdir_named: how.wdir_named,
                report_bindings: cli.report_bindings,
                program: program.clone(),
                args: args.to_vec(),
            };
            let agent = ssh::start_agent(&spec, host, &names[host], &agent_args, events.clone())?;
            if self.verbose {
                eprintln!(
                    "rsrun: ranks {:?} on {} through agent pid {}",
                    plan.ranks, names[host], agent.pid
                );
            }
            self.remote.extend(plan.ranks.iter().map(|&r| (r, None)));
            self.open_outputs += 1;
            self.agents.push(Some(AgentLink {
                pid: agent.pid,
                link: agent.link,
                input_acks: Some(agent.input_acks),
                ranks: plan.ranks.clone(),
                gone: false,
            }));
        }
        Ok(())
    }

    /// Waits until every agent has reported its host ready (CPUs, working directory and
    /// program checked there), so that no rank starts anywhere in a job that cannot start
    /// everywhere. On a failure, says why, stops the agents and returns rsrun's exit code.
    fn wait_until_ready(&mut self) -> Result<(), i32> {
        let mut waiting: Vec<usize> = (0..self.agents.len())
            .filter(|&h| self.agents[h].is_some())
            .collect();
        let deadline = Instant::now() + AGENT_START_LIMIT;
        while let Some(&first) = waiting.first() {
            let code = match self
                .events
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(Event::AgentReady { host }) => {
                    waiting.retain(|&h| h != host);
                    continue;
                }
                Ok(Event::AgentFailed {
                    host,
                    code,
                    message,
                }) => {
                    self.say_start_failed(host, &message);
                    code
                }
                Ok(Event::AgentGone { host, stderr }) => {
                    self.agent_gone(host);
                    if let Some(message) = self.lost_ranks_message(host, &stderr) {
                        eprintln!("rsrun: {message}");
                    }
                    1
                }
                Ok(Event::Signal(libc::SIGUSR1)) => continue,
                Ok(Event::Signal(sig)) => {
                    eprintln!(
                        "rsrun: received {} before the ranks started; ending the job",
                        signals::name(sig)
                    );
                    128 + sig
                }
                // Nothing else happens before a rank runs: the reaper is not started yet.
                Ok(_) => continue,
                Err(_) => {
                    eprintln!(
                        "rsrun: host {} did not report its ranks started within {} s; ending \
                         the job",
                        self.host_name(first),
                        AGENT_START_LIMIT.as_secs()
                    );
                    1
                }
            };
            self.kill_all_now();
            return Err(code);
        }
        Ok(())
    }

    /// Waits for the job to end, one way or another, and returns rsrun's exit code.
    fn supervise(mut self, timeout: Option<Duration>) -> i32 {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let starting = self.start_deadline.filter(|_| self.unstarted() > 0);
            let stuck = self.stuck_deadline();
            let next = [deadline, starting, stuck].into_iter().flatten().min();
            let event = match next {
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
                    if self.stuck_deadline().is_some_and(|d| d <= Instant::now()) {
                        let secs = self.stall_timeout.unwrap_or_default().as_secs_f64();
                        self.say_stalls(&format!(
                            "job {} is stuck: every rank still running has waited in an mpirt \
                             call with nothing moving for {secs} s; ending the job",
                            self.id
                        ));
                        return self.shut_down(libc::SIGTERM, STALL_EXIT);
                    }
                    if let Some(host) = self.slow_host() {
                        eprintln!(
                            "rsrun: host {} did not report its ranks started within {} s; \
                             ending the job",
                            self.host_name(host),
                            AGENT_START_LIMIT.as_secs()
                        );
                        return self.shut_down(libc::SIGTERM, 1);
                    }
                    let secs = timeout.unwrap_or_default().as_secs_f64();
                    eprintln!("rsrun: job timed out after {secs} s; killing all ranks");
                    return self.shut_down(libc::SIGTERM, TIMEOUT_EXIT);
                }
                // Every sender is gone: nothing more can happen. Cannot occur while the
                // signal thread lives, but ending is the only sensible answer.
                Err(RecvTimeoutError::Disconnected) => return 1,
                Ok(Event::OutputDone) => self.open_outputs -= 1,
                Ok(Event::Spawn {
                    rank,
                    apps,
                    parent,
                    reply,
                }) => {
                    let verdict = match self.spawned.start(&self.placement, apps, parent) {
                        Ok(name) => {
                            if self.verbose {
                                eprintln!("rsrun: rank {rank} started {name}");
                            }
                            SpawnVerdict::Started(name)
                        }
                        Err(why) => SpawnVerdict::Refused(why),
                    };
                    let _ = reply.send(verdict);
                }
                Ok(Event::SpawnUnjoined { rank, job, why }) => {
                    // An unknown name (a job that already ended) leaves nothing to mark.
                    if self.spawned.unjoined(&job, why) && self.verbose {
                        eprintln!("rsrun: rank {rank}'s spawn of {job} returned an error");
                    }
                }
                Ok(Event::Stall { rank, state }) => self.note_stall(rank, state),
                Ok(Event::Signal(libc::SIGUSR1)) => self.say_usr1_report(),
                // Every agent was ready before any rank started (see `wait_until_ready`).
                Ok(Event::AgentReady { .. }) => {}
                Ok(Event::RemoteStarted { rank, pid }) => {
                    if let Some(slot) = self.remote.get_mut(&rank) {
                        *slot = Some(pid);
                    }
                }
                Ok(Event::Exited { pid, status }) => {
                    match self.spawned.ended(pid, status) {
                        Some(Ended::Failed(failure)) => {
                            eprintln!("rsrun: {failure}; ending the job");
                            let code = failure_code(status).unwrap_or(1);
                            return self.shut_down(libc::SIGTERM, code);
                        }
                        Some(ended) => {
                            if let Ended::Unjoined(report) = ended {
                                eprintln!("rsrun: {report}");
                            }
                            if let Some(code) = self.finished() {
                                return code;
                            }
                            continue;
                        }
                        None => {}
                    }
                    let Some(rank) = self.running.remove(&pid) else {
                        continue; // an ssh client; its agent's reports tell what happened
                    };
                    self.stalls.exited(rank, describe(status), Instant::now());
                    if let Some(code) = self.check_exit(rank, pid, status) {
                        return self.shut_down(libc::SIGTERM, code);
                    }
                    if let Some(code) = self.finished() {
                        return code;
                    }
                }
                Ok(Event::RemoteExited { rank, status }) => {
                    let Some(pid) = self.remote.remove(&rank) else {
                        continue;
                    };
                    self.stalls.exited(rank, describe(status), Instant::now());
                    if let Some(code) = self.check_exit(rank, pid.unwrap_or(0), status) {
                        return self.shut_down(libc::SIGTERM, code);
                    }
                    if let Some(code) = self.finished() {
                        return code;
                    }
                }
                Ok(Event::AgentFailed {
                    host,
                    code,
                    message,
                }) => {
                    self.say_start_failed(host, &message);
                    return self.shut_down(libc::SIGTERM, code);
                }
                Ok(Event::AgentGone { host, stderr }) => {
                    self.agent_gone(host);
                    if let Some(message) = self.lost_ranks_message(host, &stderr) {
                        eprintln!("rsrun: {message}");
                        return self.shut_down(libc::SIGTERM, 1);
                    }
                    if let Some(code) = self.finished() {
                        return code;
                    }
                }
                Ok(Event::Abort {
                    rank,
                    code,
                    message,
                }) => {
                    let job = crate::spawned::label();
                    eprintln!("rsrun: {job}rank {rank} called abort (code {code}): {message}");
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

    /// When the job counts as stuck, with `--stall-timeout`: that long after every rank
    /// still running said it waits with nothing moving.
    fn stuck_deadline(&self) -> Option<Instant> {
        Some(self.stalls.stuck_since()? + self.stall_timeout?)
    }

    /// Records a rank's word about what it waits for; a state that does not decode is
    /// said and dropped (the rank then counts as running).
    fn note_stall(&mut self, rank: u32, state: Option<Vec<u8>>) {
        match state.map(|bytes| RankState::decode(&bytes)) {
            None => self.stalls.resumed(rank),
            Some(Ok(state)) => self.stalls.stalled(rank, state, Instant::now()),
            Some(Err(why)) => {
                eprintln!("rsrun: rank {rank} sent a stall state rsrun cannot read: {why}")
            }
        }
    }

    /// Prints the stall report, and writes it as JSON where `--stall-report-file` says.
    fn say_stalls(&mut self, headline: &str) {
        self.stalls.idle_until(Instant::now());
        let found = self.stalls.diagnosis();
        eprint!("{}", self.stalls.report(headline, &found));
        if let Some(path) = &self.stall_report_file {
            // Written aside and renamed, so that a reader never sees half a report.
            let mut aside = path.clone().into_os_string();
            aside.push(".tmp");
            let written = std::fs::write(&aside, self.stalls.json(headline, &found))
                .and_then(|()| std::fs::rename(&aside, path));
            if let Err(e) = written {
                eprintln!(
                    "rsrun: cannot write the stall report to {}: {e}",
                    path.display()
                );
            }
        }
    }

    /// The report `kill -USR1` asks for.
    fn say_usr1_report(&mut self) {
        self.say_stalls(&format!(
            "job {}: what each rank waits for (SIGUSR1)",
            self.id
        ));
    }

    /// Reports a failed rank and returns rsrun's exit code for it; None if the rank succeeded.
    fn check_exit(&self, rank: u32, pid: libc::pid_t, status: libc::c_int) -> Option<i32> {
        let code = failure_code(status)?;
        let on = match &self.host_names {
            Some(_) => format!(" on {}", self.host_name(self.host_of[rank as usize])),
            None => String::new(),
        };
        let job = crate::spawned::label();
        eprintln!(
            "rsrun: {job}rank {rank}{on} (pid {pid}) {}",
            describe(status)
        );
        Some(code)
    }

    /// The exit code once every rank has exited normally and every spawned job has ended,
    /// after the last output is in: the parents' spawn of an unjoined job returned its error
    /// to them, so their exits, not its, decide the code.
    fn finished(&mut self) -> Option<i32> {
        if !self.running.is_empty() || !self.remote.is_empty() {
            return None;
        }
        if !self.spawned.is_empty() {
            // Spawned jobs that no parent joined have no one left to join: ended, not
            // waited for (one whose ranks never dialled would otherwise run on).
            for pid in self.spawned.end_unjoined() {
                signal_group(pid, libc::SIGTERM);
            }
            return None;
        }
        self.drain_output(Instant::now() + self.drain_time());
        if self.verbose {
            eprintln!("rsrun: job {}: all ranks exited normally", self.id);
        }
        Some(0)
    }

    /// Why the loss of host `host`'s agent ends the job, if it still had ranks.
    fn lost_ranks_message(&self, host: usize, stderr: &str) -> Option<String> {
        let agent = self.agents.get(host)?.as_ref()?;
        let left: Vec<u32> = agent
            .ranks
            .iter()
            .copied()
            .filter(|r| self.remote.contains_key(r))
            .collect();
        if left.is_empty() {
            return None;
        }
        let name = self.host_name(host);
        let said = if stderr.is_empty() {
            "its agent exited without a word".to_string()
        } else {
            stderr.replace('\n', "; ")
        };
        Some(if left.iter().any(|r| self.remote[r].is_none()) {
            format!("cannot start ranks on host {name}: {said}")
        } else {
            format!("lost contact with host {name} (ranks {left:?} were running): {said}")
        })
    }

    /// Remote ranks not yet reported started.
    fn unstarted(&self) -> usize {
        self.remote.values().filter(|pid| pid.is_none()).count()
    }

    /// The first host with a rank not yet reported started.
    fn slow_host(&self) -> Option<usize> {
        let rank = self
            .remote
            .iter()
            .filter(|(_, pid)| pid.is_none())
            .map(|(&rank, _)| rank)
            .min()?;
        Some(self.host_of[rank as usize])
    }

    /// Says that an agent could not start its host's ranks, and why.
    fn say_start_failed(&self, host: usize, message: &str) {
        eprintln!(
            "rsrun: cannot start '{}' on {}: {message}",
            self.program,
            self.host_name(host)
        );
    }

    fn host_name(&self, host: usize) -> &str {
        self.host_names
            .as_ref()
            .and_then(|names| names.get(host))
            .map_or("localhost", String::as_str)
    }

    fn agent_gone(&mut self, host: usize) {
        if let Some(Some(agent)) = self.agents.get_mut(host) {
            if !agent.gone {
                agent.gone = true;
                self.open_outputs -= 1;
            }
        }
    }

    /// Remote output arrives through ssh, so it gets longer to drain than local pipes.
    fn drain_time(&self) -> Duration {
        if self.agents.iter().any(Option::is_some) {
            REMOTE_DRAIN
        } else {
            OUTPUT_DRAIN * 4
        }
    }

    /// Sends `first` to every running rank, escalates to SIGKILL after the grace period (or at
    /// a second signal to rsrun), waits for the ranks and their output, returns `code`.
    fn shut_down(mut self, first: libc::c_int, code: i32) -> i32 {
        // A spawned job's rsrun passes the signal on to its ranks and waits for them.
        for pid in self.running.keys().copied().chain(self.spawned.pids()) {
            signal_group(pid, first);
        }
        for agent in self.agents.iter().flatten() {
            // A failed send means the link's writer is gone with the agent and its ranks.
            let _ = agent
                .link
                .send(ToAgent::Command(AgentCommand::Signal(first)));
        }
        let grace_end = Instant::now() + self.grace;
        while !self.running.is_empty() || !self.remote.is_empty() || !self.spawned.is_empty() {
            match self
                .events
                .recv_timeout(grace_end.saturating_duration_since(Instant::now()))
            {
                // SIGUSR1 asks for the report, as while the job runs; it does not end the
                // grace period.
                Ok(Event::Signal(libc::SIGUSR1)) => self.say_usr1_report(),
                Ok(Event::Signal(_)) | Err(_) => break,
                Ok(event) => self.note(event),
            }
        }
        // Every rank's group, exited or not: a rank's children may outlive it.
        for &pid in &self.pids {
            signal_group(pid, libc::SIGKILL);
        }
        // End of file on its stdin makes an agent SIGKILL its ranks and exit.
        for agent in self.agents.iter().flatten() {
            let _ = agent.link.send(ToAgent::HangUp);
        }
        // A spawned job's rsrun takes a second signal as this one does: it kills its ranks
        // now, then waits for them and their output; it is given that long.
        for pid in self.spawned.pids() {
            signal_group(pid, first);
        }
        let kill_end = Instant::now() + KILL_WAIT;
        let spawned_end = kill_end + REMOTE_DRAIN;
        while !self.running.is_empty() || !self.spawned.is_empty() {
            let end = if self.spawned.is_empty() {
                kill_end
            } else {
                spawned_end
            };
            match self
                .events
                .recv_timeout(end.saturating_duration_since(Instant::now()))
            {
                Ok(event) => self.note(event),
                Err(_) => break,
            }
        }
        let drain = if self.agents.iter().any(Option::is_some) {
            REMOTE_DRAIN
        } else {
            OUTPUT_DRAIN
        };
        self.drain_output(Instant::now() + drain);
        // An ssh client still running talks to a host that did not answer; it has nothing
        // more to say.
        for agent in self.agents.iter().flatten().filter(|a| !a.gone) {
            signal_group(agent.pid, libc::SIGKILL);
        }
        code
    }

    /// Kills whatever started before the job failed to start, without waiting for news.
    fn kill_all_now(&mut self) {
        for agent in self.agents.iter().flatten() {
            let _ = agent.link.send(ToAgent::HangUp);
            signal_group(agent.pid, libc::SIGKILL);
        }
        kill_and_reap_pids(&self.pids);
    }

    /// Records an event seen while the job is already ending.
    fn note(&mut self, event: Event) {
        match event {
            Event::Spawn { reply, .. } => {
                let _ = reply.send(SpawnVerdict::Refused("the job is ending".to_string()));
            }
            Event::Exited { pid, status } => {
                let _ = self.spawned.ended(pid, status);
                if let Some(rank) = self.running.remove(&pid) {
                    if self.verbose {
                        eprintln!("rsrun: rank {rank} (pid {pid}) {}", describe(status));
                    }
                }
            }
            Event::RemoteExited { rank, .. } => {
                self.remote.remove(&rank);
            }
            Event::AgentGone { host, .. } => {
                self.agent_gone(host);
                // Its ranks are gone with it: the agent kills them before it exits.
                if let Some(Some(agent)) = self.agents.get(host) {
                    for rank in agent.ranks.clone() {
                        self.remote.remove(&rank);
                    }
                }
            }
            Event::OutputDone => self.open_outputs -= 1,
            Event::Stall { .. }
            | Event::RemoteStarted { .. }
            | Event::AgentReady { .. }
            | Event::AgentFailed { .. }
            | Event::Abort { .. }
            | Event::SpawnUnjoined { .. }
            | Event::Signal(_) => {}
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

/// What every agent of a job is started with, beside its host's ranks.
struct AgentSetup<'a> {
    command: &'a [String],
    rank_env: &'a [(String, OsString)],
    secret: &'a str,
    kvs_port: u16,
    wdir: &'a Path,
    wdir_named: bool,
    outputs: &'a Arc<Outputs>,
}

/// Sends rsrun's stdin to rank 0's agent, which writes it into rank 0's, from a thread of its
/// own; the end of it closes rank 0's stdin. At most `STDIN_WINDOW` bytes are on their way at
/// once: more is read only as the agent reports rank 0 took what came before (`acks`), so a
/// rank 0 that reads slowly holds back rsrun's stdin as a local one would, instead of piling it
/// up in the agent's memory. Ends early when rank 0 stops reading or the agent is gone.
fn forward_stdin(link: mpsc::Sender<ToAgent>, acks: mpsc::Receiver<Report>) -> io::Result<()> {
    thread::Builder::new().name("stdin".into()).spawn(move || {
        let Ok(mut stdin) = ForegroundStdin::for_this_thread() else {
            let _ = link.send(ToAgent::Command(AgentCommand::InputEnd));
            return;
        };
        let mut buf = vec![0; STDIN_CHUNK];
        let mut in_flight = 0;
        loop {
            // Blocks only while the window is full; otherwise takes what has come.
            while in_flight > 0 {
                let ack = if in_flight + STDIN_CHUNK > STDIN_WINDOW {
                    acks.recv().ok()
                } else {
                    match acks.try_recv() {
                        Ok(ack) => Some(ack),
                        Err(mpsc::TryRecvError::Empty) => break,
                        Err(mpsc::TryRecvError::Disconnected) => None,
                    }
                };
                match ack {
                    Some(Report::InputTaken { bytes }) => {
                        in_flight = in_flight.saturating_sub(bytes as usize)
                    }
                    // Rank 0 closed its stdin, or the agent is gone.
                    _ => return,
                }
            }
            // ForegroundStdin retries an interrupted read, so an error here is a real one.
            let command = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => AgentCommand::InputEnd,
                Ok(n) => {
                    in_flight += n;
                    AgentCommand::Input(buf[..n].to_vec())
                }
            };
            let end = command == AgentCommand::InputEnd;
            if link.send(ToAgent::Command(command)).is_err() || end {
                return;
            }
        }
    })?;
    Ok(())
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
pub(crate) fn failure_code(status: libc::c_int) -> Option<i32> {
    if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status)).filter(|&code| code != 0)
    } else if libc::WIFSIGNALED(status) {
        Some(128 + libc::WTERMSIG(status))
    } else {
        Some(1)
    }
}

/// "exited with status 2", "killed by signal 9 (SIGKILL)".
pub(crate) fn describe(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        format!("killed by signal {sig} ({})", signals::name(sig))
    } else {
        format!("ended with wait status {status:#x}")
    }
}

/// Removes the job's files under /dev/shm (`mpirt-<job id>...`: the shm transport's
/// segments, the communicators' shared areas, libfabric shm's endpoints), which a crashed
/// rank cannot unlink.
pub(crate) fn remove_shm_segments(job_id: &str) {
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
