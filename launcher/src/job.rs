//! One job from start to exit code: start the key-value service and the ranks, then supervise.
//!
//! Everything that can happen to a running job arrives as an [`Event`] on one channel (rank
//! exits from the reaper thread, aborts from the key-value service, signals, output streams
//! closing), so the supervisor is a single loop with no shared state.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ChildStdin;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::agent::AgentArgs;
use crate::cli::{BindTo, Cli};
use crate::hosts;
use crate::kvs::KvsServer;
use crate::output::{self, Sink};
use crate::signals;
use crate::spawn::local::{self, LaunchSpec, RankProcess, Slot};
use crate::spawn::ssh::{self, SshSpec};
use bootstrap::vars;

/// Exit code when `--timeout` ends the job, as timeout(1) uses.
const TIMEOUT_EXIT: i32 = 124;
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
    /// Per host: whether it is this machine, and its ranks in local-rank order.
    hosts: Vec<(bool, Vec<u32>)>,
    size: u32,
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
        if hosts.is_empty() {
            let size = cli
                .ranks
                .expect("the command line requires -n without hosts");
            return Ok(Placement {
                names: None,
                hosts: vec![(true, (0..size).collect())],
                size,
            });
        }
        let layout = hosts::map_ranks(&hosts, cli.ranks, cli.map_by, cli.oversubscribe)?;
        let own = hosts::own_hostname();
        let size = layout.iter().map(|r| r.len() as u32).sum();
        Ok(Placement {
            names: Some(hosts.iter().map(|h| h.name.clone()).collect()),
            hosts: hosts
                .iter()
                .zip(layout)
                .map(|(h, ranks)| (hosts::is_local(&h.name, &own), ranks))
                .collect(),
            size,
        })
    }
}

/// rsrun's link to one remote host's agent.
struct AgentLink {
    /// The ssh client, which leads its own process group.
    pid: libc::pid_t,
    /// Closing it tells the agent to kill its ranks; None once closed.
    stdin: Option<ChildStdin>,
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
}

impl Job {
    /// Starts the service and every rank. On failure, reports it, cleans up and returns the
    /// exit code.
    fn start(cli: &Cli) -> Result<Job, i32> {
        let fail = |what: &str, e: io::Error| {
            eprintln!("rsrun: {what}: {e}");
            1
        };
        let placement = Placement::from_cli(cli).map_err(|e| {
            eprintln!("rsrun: {e}");
            1
        })?;
        let size = placement.size;
        let any_remote = placement
            .hosts
            .iter()
            .any(|(local, ranks)| !local && !ranks.is_empty());
        let id = random_hex(8).map_err(|e| fail("cannot read /dev/urandom", e))?;
        let secret = random_hex(16).map_err(|e| fail("cannot read /dev/urandom", e))?;
        let (tx, events) = mpsc::channel();
        signals::forward_to(tx.clone()).map_err(|e| fail("cannot start a thread", e))?;
        let bind_ip = if any_remote {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        let kvs = KvsServer::start(size, secret.as_bytes(), bind_ip, tx.clone())
            .map_err(|e| fail("cannot start the key-value service", e))?;
        let kvs_local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), kvs.addr().port());
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
            size,
            job_id: &id,
            kvs_addr: kvs_local.to_string(),
            kvs_secret: &secret,
            cpus: &cpus,
        };
        if cli.verbose {
            eprintln!(
                "rsrun: job {id}: {size} rank(s) of {}, key-value service at {}, binding {:?}",
                program.to_string_lossy(),
                kvs.addr(),
                cli.bind_to
            );
        }
        let mut host_of = vec![0; size as usize];
        for (host, (_, ranks)) in placement.hosts.iter().enumerate() {
            for &rank in ranks {
                host_of[rank as usize] = host;
            }
        }

        let mut ranks: Vec<RankProcess> = Vec::new();
        for (_, on_host) in placement.hosts.iter().filter(|(local, _)| *local) {
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
        }

        let mut job = Job {
            id,
            verbose: cli.verbose,
            grace: cli.grace,
            program: program.to_string_lossy().into_owned(),
            host_names: placement.names.clone(),
            host_of,
            pids: ranks.iter().map(|r| r.pid).collect(),
            running: ranks.iter().map(|r| (r.pid, r.rank)).collect(),
            remote: HashMap::new(),
            agents: Vec::new(),
            start_deadline: None,
            open_outputs: 0,
            events,
        };
        if any_remote {
            if let Err(e) = job.start_agents(cli, &placement, &env, &secret, kvs.addr().port(), &tx)
            {
                eprintln!("rsrun: cannot start the launch agent: {e}");
                job.kill_all_now();
                return Err(1);
            }
        }
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
        rank_env: &[(String, OsString)],
        secret: &str,
        kvs_port: u16,
        events: &mpsc::Sender<Event>,
    ) -> io::Result<()> {
        let rsrun = std::env::current_exe()?;
        let command = cli.launch_command(|name| std::env::var(name).ok());
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
        env.extend(rank_env.iter().cloned());
        let spec = SshSpec {
            command: &command,
            rsrun: &rsrun,
            env: &env,
            secret,
            tag_output: cli.tag_output,
        };
        let names = placement.names.as_deref().unwrap_or_default();
        let (program, args) = cli.command.split_first().expect("clap requires PROGRAM");
        for (host, (local, ranks)) in placement.hosts.iter().enumerate() {
            if *local || ranks.is_empty() {
                self.agents.push(None);
                continue;
            }
            let agent_args = AgentArgs {
                job_id: self.id.clone(),
                size: placement.size,
                kvs_port,
                bind_to: cli.bind_to,
                ranks: ranks.clone(),
                program: program.clone(),
                args: args.to_vec(),
            };
            let agent = ssh::start_agent(&spec, host, &names[host], &agent_args, events.clone())?;
            if self.verbose {
                eprintln!(
                    "rsrun: ranks {ranks:?} on {} through agent pid {}",
                    names[host], agent.pid
                );
            }
            self.remote.extend(ranks.iter().map(|&r| (r, None)));
            self.open_outputs += 1;
            self.agents.push(Some(AgentLink {
                pid: agent.pid,
                stdin: Some(agent.stdin),
                ranks: ranks.clone(),
                gone: false,
            }));
        }
        self.start_deadline = Some(Instant::now() + AGENT_START_LIMIT);
        Ok(())
    }

    /// Waits for the job to end, one way or another, and returns rsrun's exit code.
    fn supervise(mut self, timeout: Option<Duration>) -> i32 {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let starting = self.start_deadline.filter(|_| self.unstarted() > 0);
            let next = [deadline, starting].into_iter().flatten().min();
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
                Ok(Event::RemoteStarted { rank, pid }) => {
                    if let Some(slot) = self.remote.get_mut(&rank) {
                        *slot = Some(pid);
                    }
                }
                Ok(Event::Exited { pid, status }) => {
                    let Some(rank) = self.running.remove(&pid) else {
                        continue; // an ssh client; its agent's reports tell what happened
                    };
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
                    eprintln!(
                        "rsrun: cannot start '{}' on {}: {message}",
                        self.program,
                        self.host_name(host)
                    );
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

    /// Reports a failed rank and returns rsrun's exit code for it; None if the rank succeeded.
    fn check_exit(&self, rank: u32, pid: libc::pid_t, status: libc::c_int) -> Option<i32> {
        let code = failure_code(status)?;
        let on = match &self.host_names {
            Some(_) => format!(" on {}", self.host_name(self.host_of[rank as usize])),
            None => String::new(),
        };
        eprintln!("rsrun: rank {rank}{on} (pid {pid}) {}", describe(status));
        Some(code)
    }

    /// The exit code once every rank has exited normally, after the last output is in.
    fn finished(&mut self) -> Option<i32> {
        if !self.running.is_empty() || !self.remote.is_empty() {
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
        for &pid in self.running.keys() {
            signal_group(pid, first);
        }
        for agent in self.agents.iter_mut().flatten() {
            if let Some(stdin) = &mut agent.stdin {
                // A failed write means the agent is gone, and its ranks with it.
                let _ = writeln!(stdin, "signal {first}");
            }
        }
        let grace_end = Instant::now() + self.grace;
        while !self.running.is_empty() || !self.remote.is_empty() {
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
        // End of file on its stdin makes an agent SIGKILL its ranks and exit.
        for agent in self.agents.iter_mut().flatten() {
            agent.stdin = None;
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
        for agent in self.agents.iter_mut().flatten() {
            agent.stdin = None;
            signal_group(agent.pid, libc::SIGKILL);
        }
        kill_and_reap_pids(&self.pids);
    }

    /// Records an event seen while the job is already ending.
    fn note(&mut self, event: Event) {
        match event {
            Event::Exited { pid, status } => {
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
            Event::RemoteStarted { .. }
            | Event::AgentFailed { .. }
            | Event::Abort { .. }
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
