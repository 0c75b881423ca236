//! rsrun's command line, spelled the way mpirun users expect.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use bootstrap::vars;
use clap::{CommandFactory, Parser, ValueEnum};

use crate::hosts::MapBy;
use crate::output::OutputFiles;
use crate::words;

/// Where each rank may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BindTo {
    /// Rank i is pinned to the i-th CPU rsrun may use (modulo their count).
    Core,
    /// The scheduler places ranks freely.
    None,
}

/// Start N ranks of an mpirt program on this host, or across hosts over ssh.
///
/// Remote hosts are reached with `ssh HOST /path/to/rsrun --agent ...`, using the absolute path
/// of this rsrun, so rsrun must be installed at the same path on every host. rsrun's stdin goes
/// to rank 0, wherever it runs.
#[derive(Debug, Parser)]
#[command(name = "rsrun", version, about)]
pub struct Cli {
    /// Number of ranks to start (`-np` works too). With hosts given, defaults to their slots;
    /// with a rankfile, to the ranks it places.
    #[arg(short = 'n', long = "np", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks: Option<u32>,

    /// Hosts to run on, as `host[:slots],...` (repeatable). Names of this machine (localhost,
    /// 127.x, its host name) start ranks directly; others go through the launch agent.
    #[arg(short = 'H', long = "host", value_name = "HOSTS")]
    pub hosts: Vec<String>,

    /// File listing hosts: `host slots=N` (Open MPI) or `host:N` (MPICH) lines, `#` comments.
    #[arg(long, visible_alias = "machinefile", value_name = "FILE")]
    pub hostfile: Option<std::path::PathBuf>,

    /// Lay ranks out by filling each host's slots in turn (`slot`, the default), round-robin
    /// over the hosts (`node`), or N ranks on each host in turn (`ppr:N:node`).
    #[arg(long, value_name = "slot|node|ppr:N:node", value_parser = MapBy::parse)]
    pub map_by: Option<MapBy>,

    /// N ranks on each host in turn (the same as `--map-by ppr:N:node`).
    #[arg(short = 'N', long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub npernode: Option<u32>,

    /// Place and bind each rank as FILE says, in Open MPI's rankfile format:
    /// `rank N=HOST slot=CPUS` lines, CPUS a CPU number, a range `0-3` or a list `0,2`.
    #[arg(long, value_name = "FILE")]
    pub rankfile: Option<std::path::PathBuf>,

    /// Allow more ranks than the hosts have slots.
    #[arg(long)]
    pub oversubscribe: bool,

    /// How agents reach remote hosts: ssh, or Slurm's srun (the default inside an allocation
    /// when no hosts are given: rsrun then runs on the allocation's nodes).
    #[arg(long, value_enum)]
    pub launcher: Option<Launcher>,

    /// Command that runs a command on a remote host [env: MPIRT_SSH; default: ssh].
    #[arg(long, visible_alias = "ssh", value_name = "CMD")]
    pub launch_agent: Option<String>,

    /// Extra arguments for the launch agent, split into words as a shell would, e.g.
    /// `-F /path/ssh_config -o "ProxyCommand ssh gw -W %h:%p"` [env: MPIRT_SSH_ARGS].
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub ssh_args: Option<String>,

    /// Export VAR from rsrun's environment to every rank, or set it with VAR=VALUE (repeatable).
    #[arg(short = 'x', value_name = "VAR")]
    pub export: Vec<String>,

    /// Set VAR=VALUE in every rank's environment (repeatable).
    #[arg(long = "env", value_name = "VAR=VALUE", value_parser = parse_assignment)]
    pub env: Vec<(String, String)>,

    /// Pin ranks to CPUs.
    #[arg(long, value_enum, default_value_t = BindTo::None)]
    pub bind_to: BindTo,

    /// Prefix every output line with `[rank] `.
    #[arg(long)]
    pub tag_output: bool,

    /// Prefix every output line with the time rsrun received it (UTC, microseconds).
    #[arg(long)]
    pub timestamp_output: bool,

    /// Write each rank's stdout and stderr to DIR/1/rank.N/stdout and .../stderr too, as Open
    /// MPI does; a relative DIR is taken from rsrun's working directory. Qualifiers after a
    /// colon (the last one: `a:b:` is the directory `a:b`), comma-separated, in any case:
    /// `nocopy` (the files only), `nojobid` (DIR/rank.N).
    #[arg(long, value_name = "DIR[:nocopy,nojobid]", value_parser = OutputFiles::parse)]
    pub output_filename: Option<OutputFiles>,

    /// Say on stderr which CPUs each rank is bound to, one line per rank.
    #[arg(long)]
    pub report_bindings: bool,

    /// Run every rank in DIR (`-wdir` works too); a relative DIR is taken from rsrun's working
    /// directory. Without it ranks run in rsrun's working directory, or where that does not exist
    /// on a host, in the home directory there (with a warning).
    #[arg(long, value_name = "DIR")]
    pub wdir: Option<std::path::PathBuf>,

    /// Kill the job if it runs longer than SECS seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub timeout: Option<Duration>,

    /// This job's number in `--output-filename`'s paths: a spawned job's rsrun is given its
    /// own, so that its ranks' files are not the first job's.
    #[arg(long, hide = true, value_name = "N", default_value_t = 1)]
    pub job_number: u32,

    /// End the job, with a report of what every rank waits for and why, when every rank
    /// still running has waited in an mpirt call with nothing moving for SECS seconds
    /// (default: MPIRT_STALL_TIMEOUT, else never).
    #[arg(long, value_name = "SECS", value_parser = vars::parse_stall_timeout)]
    pub stall_timeout: Option<Duration>,

    /// Also write the stall report (at --stall-timeout or SIGUSR1) to FILE, as JSON.
    #[arg(long, value_name = "FILE")]
    pub stall_report_file: Option<PathBuf>,

    /// How long ranks get to exit after SIGTERM before they are killed.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, default_value = "1")]
    pub grace: Duration,

    /// Describe the launch on stderr and set MPIRT_VERBOSE=1 for the ranks.
    #[arg(short, long)]
    pub verbose: bool,

    /// Transport between ranks (sets MPIRT_TRANSPORT): auto (shared memory on a host, verbs,
    /// a libfabric fabric such as EFA or Slingshot, or TCP between hosts), shm, tcp, verbs or
    /// ofi (that one between every pair, local ones too).
    #[arg(long, value_name = "NAME", value_parser = ["auto", "shm", "tcp", "verbs", "ofi"])]
    pub transport: Option<String>,

    /// libfabric provider for the ofi transport (sets MPIRT_OFI_PROVIDER): efa, cxi, verbs,
    /// tcp, shm, udp, or a full name such as `tcp;ofi_rxm`. Default: the first of efa, cxi,
    /// verbs;ofi_rxm, tcp;ofi_rxm, shm, udp;ofi_rxd that libfabric offers (FI_PROVIDER
    /// narrows what it offers).
    #[arg(long, value_name = "NAME")]
    pub ofi_provider: Option<String>,

    /// RDMA devices, comma-separated; local rank i takes the i-th, round robin (sets
    /// MPIRT_VERBS_DEV). Default: the first device.
    #[arg(long, value_name = "LIST")]
    pub verbs_dev: Option<String>,

    /// Interfaces or subnets TCP uses, comma-separated (`eth0`, `10.0.0.0/8`, `::1/128`;
    /// sets MPIRT_TCP_IF). Default: every interface but loopback.
    #[arg(long, value_name = "LIST")]
    pub tcp_if: Option<String>,

    /// Point-to-point layer (sets MPIRT_PML for every rank): native (mpirt's own engine and
    /// transports) or ucx (UCX's tag matching; programs built with the cargo feature `ucx`).
    #[arg(long, value_name = "NAME", value_parser = ["native", "ucx"])]
    pub pml: Option<String>,

    /// Let the NIC match tags (UCX's tag-matching offload on ConnectX-5 and later: sets
    /// UCX_RC_MLX5_TM_ENABLE=y and UCX_DC_MLX5_TM_ENABLE=y); needs --pml ucx.
    #[arg(long)]
    pub hw_tag_matching: bool,

    /// Largest message sent eagerly, in bytes (sets MPIRT_EAGER_LIMIT).
    #[arg(long, value_name = "BYTES")]
    pub eager_limit: Option<u64>,

    /// The program to run, then its arguments, passed through untouched.
    /// The first word that is neither an option nor an option's value starts it; an unknown
    /// option before it is an error.
    #[arg(value_name = "PROGRAM", required = true, num_args = 1.., trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

impl Cli {
    /// `--stall-timeout`, else `MPIRT_STALL_TIMEOUT` from rsrun's environment (an error
    /// naming the variable if it is not a number of seconds).
    pub fn resolve_stall_timeout(&mut self) -> Result<(), String> {
        if self.stall_timeout.is_none() {
            if let Ok(text) = std::env::var(vars::STALL_TIMEOUT) {
                self.stall_timeout = Some(
                    vars::parse_stall_timeout(&text)
                        .map_err(|e| format!("{}: {e}", vars::STALL_TIMEOUT))?,
                );
            }
        }
        Ok(())
    }

    /// The options that say where and how ranks run, for the rsrun of a spawned job
    /// (MPI's spawn), rebuilt from what was parsed rather than re-read from argv, so that a
    /// `--` or an option value such as `--ssh-args -n` cannot be taken for something else.
    /// Left out: the rank count and the program (the spawn request gives both), a rankfile
    /// (it places the parents' ranks), `--oversubscribe` (the spawned rsrun is given it),
    /// `--bind-to` (it would pin the children on the CPUs the parents are pinned to) and the
    /// stall watch (it counts one job's ranks only, and would take parents that wait for
    /// computing children, or children that wait for their parents, for stuck ones).
    pub fn placement_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        // One word, `--name=value`: a value that starts with a dash stays a value.
        let option = |name: &str, value: Option<OsString>| match value {
            Some(value) => {
                let mut word = OsString::from(format!("--{name}="));
                word.push(value);
                word
            }
            None => OsString::from(format!("--{name}")),
        };
        let seconds = |d: Duration| Some(OsString::from(d.as_secs_f64().to_string()));
        for host in &self.hosts {
            args.push(option("host", Some(host.into())));
        }
        if let Some(file) = &self.hostfile {
            args.push(option("hostfile", Some(file.into())));
        }
        if let Some(map) = self.map_by {
            args.push(option("map-by", Some(map.to_string().into())));
        }
        if let Some(n) = self.npernode {
            args.push(option("npernode", Some(n.to_string().into())));
        }
        if let Some(launcher) = self.launcher {
            let name = launcher
                .to_possible_value()
                .map(|v| v.get_name().to_string());
            args.push(option("launcher", name.map(OsString::from)));
        }
        if let Some(agent) = &self.launch_agent {
            args.push(option("launch-agent", Some(agent.into())));
        }
        if let Some(ssh_args) = &self.ssh_args {
            args.push(option("ssh-args", Some(ssh_args.into())));
        }
        for var in &self.export {
            args.push("-x".into());
            args.push(var.into());
        }
        for (key, value) in &self.env {
            args.push(option("env", Some(format!("{key}={value}").into())));
        }
        for (set, name) in [
            (self.tag_output, "tag-output"),
            (self.timestamp_output, "timestamp-output"),
            (self.report_bindings, "report-bindings"),
            (self.verbose, "verbose"),
            (self.hw_tag_matching, "hw-tag-matching"),
        ] {
            if set {
                args.push(option(name, None));
            }
        }
        if let Some(files) = &self.output_filename {
            let mut value = OsString::from(&files.dir);
            let qualifiers: Vec<&str> = [(!files.copy, "nocopy"), (!files.job_level, "nojobid")]
                .into_iter()
                .filter_map(|(set, word)| set.then_some(word))
                .collect();
            // Always a colon: a directory with one in its name is then read back whole.
            value.push(format!(":{}", qualifiers.join(",")));
            args.push(option("output-filename", Some(value)));
        }
        if let Some(dir) = &self.wdir {
            args.push(option("wdir", Some(dir.into())));
        }
        if let Some(limit) = self.timeout {
            args.push(option("timeout", seconds(limit)));
        }
        args.push(option("grace", seconds(self.grace)));
        for (value, name) in [
            (&self.transport, "transport"),
            (&self.ofi_provider, "ofi-provider"),
            (&self.verbs_dev, "verbs-dev"),
            (&self.tcp_if, "tcp-if"),
            (&self.pml, "pml"),
        ] {
            if let Some(value) = value {
                args.push(option(name, Some(value.into())));
            }
        }
        if let Some(bytes) = self.eager_limit {
            args.push(option("eager-limit", Some(bytes.to_string().into())));
        }
        args
    }

    /// Parses rsrun's arguments (the first item is the program name), accepting mpirun's
    /// single-dash long options (`-np`, `-hostfile`, `-wdir`, ...).
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let mut cli = Cli::try_parse_from(rewrite_single_dash(
            args.into_iter().map(Into::into).collect(),
        )?)?;
        if let Some(files) = &mut cli.output_filename {
            files.job = cli.job_number;
        }
        let conflict = |text: &str| {
            Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{text}\n"),
            ))
        };
        if cli.hw_tag_matching && cli.pml.as_deref() != Some("ucx") {
            return conflict("--hw-tag-matching turns on UCX's offload, so it needs --pml ucx");
        }
        if let (Some(n), Some(map)) = (cli.npernode, cli.map_by) {
            if map != MapBy::PerNode(n) {
                return conflict(&format!(
                    "--npernode {n} and --map-by {map} ask for two different layouts"
                ));
            }
        }
        if cli.rankfile.is_some() {
            if cli.npernode.is_some() || cli.map_by.is_some() {
                return conflict("--rankfile places every rank itself: drop --map-by/--npernode");
            }
            if cli.bind_to == BindTo::Core {
                return conflict("--rankfile binds every rank to its slot: drop --bind-to");
            }
        }
        let allocated = std::env::var_os("SLURM_JOB_NODELIST").is_some();
        if cli.ranks.is_none()
            && cli.hosts.is_empty()
            && cli.hostfile.is_none()
            && cli.rankfile.is_none()
            && !allocated
        {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::MissingRequiredArgument,
                "-n N is required unless hosts are given with -H, --hostfile or --rankfile, or \
                 by a Slurm allocation\n",
            ));
        }
        Ok(cli)
    }

    /// How ranks are laid out over the hosts.
    pub fn mapping(&self) -> MapBy {
        match (self.npernode, self.map_by) {
            (Some(n), _) => MapBy::PerNode(n),
            (None, map) => map.unwrap_or(MapBy::Slot),
        }
    }

    /// Whether the hosts come from the Slurm allocation rsrun runs in.
    pub fn in_allocation(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        self.hosts.is_empty() && self.hostfile.is_none() && lookup("SLURM_JOB_NODELIST").is_some()
    }

    /// The launch agent command and its arguments, before the host name: srun's when asked
    /// for (or by default in an allocation); else the flags, else `MPIRT_SSH` and
    /// `MPIRT_SSH_ARGS`, else plain `ssh`. Words are split as a shell splits them (quotes
    /// group words); an unclosed quote is an error naming the setting.
    pub fn launch_command(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<String>, String> {
        let srun = match self.launcher {
            Some(l) => l == Launcher::Srun,
            None => self.in_allocation(&lookup),
        };
        if srun {
            // One task on the named node, its output passed on as it comes.
            return Ok([
                "srun",
                "--nodes=1",
                "--ntasks=1",
                "--unbuffered",
                "--kill-on-bad-exit=1",
                "--nodelist",
            ]
            .map(String::from)
            .to_vec());
        }
        let (agent, agent_from) = match &self.launch_agent {
            Some(agent) => (agent.clone(), "--launch-agent"),
            None => match lookup("MPIRT_SSH") {
                Some(agent) => (agent, "MPIRT_SSH"),
                None => ("ssh".into(), ""),
            },
        };
        let (args, args_from) = match &self.ssh_args {
            Some(args) => (args.clone(), "--ssh-args"),
            None => (
                lookup("MPIRT_SSH_ARGS").unwrap_or_default(),
                "MPIRT_SSH_ARGS",
            ),
        };
        let mut command = words::split(&agent).map_err(|e| format!("{agent_from}: {e}"))?;
        command.extend(words::split(&args).map_err(|e| format!("{args_from}: {e}"))?);
        if command.is_empty() {
            return Err(format!("{agent_from} names no command"));
        }
        Ok(command)
    }

    /// The environment every rank gets on top of rsrun's own, in the order to apply it:
    /// `-x`, then `--env`, then the settings flags, so a flag wins over a stray `--env`.
    pub fn rank_env(&self, lookup: impl Fn(&str) -> Option<OsString>) -> Vec<(String, OsString)> {
        let mut env = Vec::new();
        for item in &self.export {
            match item.split_once('=') {
                Some((name, value)) => env.push((name.to_string(), value.into())),
                None => {
                    if let Some(value) = lookup(item) {
                        env.push((item.clone(), value));
                    } else {
                        eprintln!("rsrun: warning: -x {item}: {item} is not set, not exported");
                    }
                }
            }
        }
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.into())));
        if self.verbose {
            env.push((vars::VERBOSE.into(), "1".into()));
        }
        if let Some(transport) = &self.transport {
            env.push((vars::TRANSPORT.into(), transport.into()));
        }
        if let Some(list) = &self.tcp_if {
            env.push((vars::TCP_IF.into(), list.into()));
        }
        if let Some(list) = &self.verbs_dev {
            env.push((vars::VERBS_DEV.into(), list.into()));
        }
        if let Some(provider) = &self.ofi_provider {
            env.push((vars::OFI_PROVIDER.into(), provider.into()));
        }
        if let Some(limit) = self.eager_limit {
            env.push((vars::EAGER_LIMIT.into(), limit.to_string().into()));
        }
        if let Some(pml) = &self.pml {
            env.push((vars::PML.into(), pml.into()));
        }
        if let Some(secs) = self.stall_timeout {
            env.push((
                vars::STALL_TIMEOUT.into(),
                secs.as_secs_f64().to_string().into(),
            ));
        }
        if self.hw_tag_matching {
            for var in ["UCX_RC_MLX5_TM_ENABLE", "UCX_DC_MLX5_TM_ENABLE"] {
                env.push((var.into(), "y".into()));
            }
        }
        env
    }
}

/// What starts rsrun's agents on remote hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Launcher {
    Ssh,
    Srun,
}

/// mpirun accepts its long options with one dash (`-np 4`, `-hostfile FILE`, `-host a,b`,
/// `-oversubscribe`), which clap would read as clustered short flags (`-hostfile` as `-h`, i.e.
/// help). So among rsrun's own words (never the program's) a single-dash `-word` or
/// `-word=VALUE` whose `--word` is an option or an alias becomes `--word`; any other
/// single-dash word longer than one letter is an error naming it, except a number attached to
/// `-n` or `-N` (`-n4`), which clap reads as the value.
fn rewrite_single_dash(mut args: Vec<OsString>) -> Result<Vec<OsString>, clap::Error> {
    let command = Cli::command();
    let options: Vec<_> = command
        .get_arguments()
        .filter(|a| !a.is_positional())
        .collect();
    let longs: Vec<String> = options
        .iter()
        .flat_map(|a| a.get_long_and_visible_aliases().unwrap_or_default())
        .map(|l| format!("--{l}"))
        .collect();
    let takes_value: Vec<String> = options
        .iter()
        .filter(|a| a.get_action().takes_values())
        .flat_map(|a| {
            let short = a.get_short_and_visible_aliases().unwrap_or_default();
            let long = a.get_long_and_visible_aliases().unwrap_or_default();
            let short = short.into_iter().map(|c| format!("-{c}"));
            short.chain(long.into_iter().map(|l| format!("--{l}")))
        })
        .collect();
    let mut i = 1;
    while i < args.len() {
        let Some(arg) = args[i].to_str() else { break };
        let mut arg = arg.to_string();
        if arg.len() > 2 && arg.starts_with('-') && !arg.starts_with("--") {
            let (name, value) = arg.split_once('=').unwrap_or((&arg, ""));
            let long = format!("-{name}");
            let attached_count = ["-n", "-N"].iter().any(|s| {
                arg.strip_prefix(s)
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            });
            if longs.contains(&long) {
                arg = if arg.contains('=') {
                    format!("{long}={value}")
                } else {
                    long
                };
                args[i] = arg.clone().into();
            } else if !attached_count {
                return Err(clap::Error::raw(
                    clap::error::ErrorKind::UnknownArgument,
                    format!(
                        "unknown option '{arg}' (rsrun takes long options with one dash or two, \
                         e.g. -hostfile or --hostfile; see --help)\n"
                    ),
                ));
            }
        }
        if takes_value.contains(&arg) {
            i += 2;
        } else if arg.starts_with('-') && arg != "-" && arg != "--" {
            i += 1;
        } else {
            break; // the program: everything from here on is its own
        }
    }
    Ok(args)
}

fn parse_assignment(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected VAR=VALUE, got '{s}'")),
    }
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| format!("expected a number of seconds, got '{s}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_args(std::iter::once("rsrun").chain(args.iter().copied()))
    }

    #[test]
    fn program_arguments_pass_through_untouched() {
        let cli = parse(&["-n", "2", "prog", "--foo", "-n", "7", "-np", "3"]).unwrap();
        assert_eq!(cli.ranks, Some(2));
        assert_eq!(cli.command, ["prog", "--foo", "-n", "7", "-np", "3"]);
    }

    #[test]
    fn a_stall_timeout_of_no_time_is_refused() {
        for bad in ["0", "0.0"] {
            let e = parse(&["-n", "2", "--stall-timeout", bad, "prog"]).unwrap_err();
            assert!(
                e.to_string()
                    .contains("expected a positive number of seconds"),
                "{e}"
            );
        }
        let cli = parse(&["-n", "2", "--stall-timeout", "0.5", "prog"]).unwrap();
        assert_eq!(cli.stall_timeout, Some(Duration::from_millis(500)));
    }

    #[test]
    fn np_is_accepted() {
        assert_eq!(parse(&["-np", "4", "prog"]).unwrap().ranks, Some(4));
        assert_eq!(parse(&["--np", "5", "prog"]).unwrap().ranks, Some(5));
    }

    #[test]
    fn all_options_parse() {
        let cli = parse(&[
            "-n",
            "8",
            "-x",
            "HOME",
            "-x",
            "A=b",
            "--env",
            "K=v=w",
            "--bind-to",
            "core",
            "--tag-output",
            "--timeout",
            "2.5",
            "--verbose",
            "--transport",
            "tcp",
            "--tcp-if",
            "lo,10.0.0.0/8",
            "--ofi-provider",
            "tcp;ofi_rxm",
            "--eager-limit",
            "4096",
            "--pml",
            "ucx",
            "--hw-tag-matching",
            "prog",
        ])
        .unwrap();
        assert_eq!(cli.export, ["HOME", "A=b"]);
        assert_eq!(cli.env, [("K".to_string(), "v=w".to_string())]);
        assert_eq!(cli.bind_to, BindTo::Core);
        assert!(cli.tag_output && cli.verbose);
        assert_eq!(cli.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(cli.grace, Duration::from_secs(1));
        let env = cli.rank_env(|name| (name == "HOME").then(|| "/h".into()));
        let names: Vec<_> = env.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        assert_eq!(
            names,
            [
                "HOME=\"/h\"",
                "A=\"b\"",
                "K=\"v=w\"",
                "MPIRT_VERBOSE=\"1\"",
                "MPIRT_TRANSPORT=\"tcp\"",
                "MPIRT_TCP_IF=\"lo,10.0.0.0/8\"",
                "MPIRT_OFI_PROVIDER=\"tcp;ofi_rxm\"",
                "MPIRT_EAGER_LIMIT=\"4096\"",
                "MPIRT_PML=\"ucx\"",
                "UCX_RC_MLX5_TM_ENABLE=\"y\"",
                "UCX_DC_MLX5_TM_ENABLE=\"y\""
            ]
        );
    }

    #[test]
    fn host_options_parse() {
        let cli = parse(&[
            "-H",
            "a:2,b",
            "--host",
            "c",
            "--map-by",
            "node",
            "--oversubscribe",
            "--ssh",
            "/usr/bin/ssh -q",
            "--ssh-args",
            "-F /x/cfg -o \"ProxyCommand ssh gw -W %h:%p\"",
            "prog",
            "-H",
        ])
        .unwrap();
        assert_eq!(cli.ranks, None);
        assert_eq!(cli.hosts, ["a:2,b", "c"]);
        assert_eq!(cli.mapping(), MapBy::Node);
        assert!(cli.oversubscribe);
        assert_eq!(cli.command, ["prog", "-H"]);
        assert_eq!(
            cli.launch_command(|_| None).unwrap(),
            [
                "/usr/bin/ssh",
                "-q",
                "-F",
                "/x/cfg",
                "-o",
                "ProxyCommand ssh gw -W %h:%p"
            ]
        );
        let from_env = parse(&["--hostfile", "f", "prog"]).unwrap();
        let env = |name: &str| match name {
            "MPIRT_SSH" => Some("myssh".to_string()),
            "MPIRT_SSH_ARGS" => Some(" -p  22 -o 'User=a b'".to_string()),
            _ => None,
        };
        assert_eq!(
            from_env.launch_command(env).unwrap(),
            ["myssh", "-p", "22", "-o", "User=a b"]
        );
        assert_eq!(from_env.launch_command(|_| None).unwrap(), ["ssh"]);
        let bad = |name: &str| (name == "MPIRT_SSH_ARGS").then(|| "-o 'x".to_string());
        let e = from_env.launch_command(bad).unwrap_err();
        assert!(
            e.starts_with("MPIRT_SSH_ARGS: unclosed single quote"),
            "{e}"
        );
    }

    #[test]
    fn unknown_options_are_errors_naming_them() {
        let e = parse(&["-n", "2", "--no-such-option", "./app"]).unwrap_err();
        assert!(e.to_string().contains("'--no-such-option'"), "{e}");
        let e = parse(&["-n", "2", "-q", "./app"]).unwrap_err();
        assert!(e.to_string().contains("'-q'"), "{e}");
        // After the program, every word is the program's.
        let cli = parse(&["-n", "2", "./app", "--no-such-option"]).unwrap();
        assert_eq!(cli.command, ["./app", "--no-such-option"]);
    }

    #[test]
    fn single_dash_long_options_are_mpiruns() {
        let cli = parse(&[
            "-np",
            "4",
            "-hostfile",
            "nodes",
            "-host",
            "a:2",
            "-oversubscribe",
            "-report-bindings",
            "-tag-output",
            "-npernode",
            "2",
            "-output-filename=out",
            "-bind-to",
            "core",
            "prog",
            "-hostfile",
        ])
        .unwrap();
        assert_eq!(cli.ranks, Some(4));
        assert_eq!(cli.hostfile.as_deref(), Some(std::path::Path::new("nodes")));
        assert_eq!(cli.hosts, ["a:2"]);
        assert!(cli.oversubscribe && cli.report_bindings && cli.tag_output);
        assert_eq!(cli.mapping(), MapBy::PerNode(2));
        assert!(cli.output_filename.is_some());
        assert_eq!(cli.bind_to, BindTo::Core);
        assert_eq!(cli.command, ["prog", "-hostfile"]);
        let machine = parse(&["-machinefile", "m", "-rankfile", "r", "p"]).unwrap();
        assert_eq!(machine.hostfile.as_deref(), Some(std::path::Path::new("m")));
        assert_eq!(machine.rankfile.as_deref(), Some(std::path::Path::new("r")));
        assert_eq!(parse(&["-n4", "p"]).unwrap().ranks, Some(4));
        for word in ["-hosts", "-nolocal", "-vV", "-xFOO"] {
            let e = parse(&["-n", "2", word, "p"]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
            assert!(e.to_string().contains(&format!("'{word}'")), "{e}");
        }
    }

    #[test]
    fn placement_and_output_options_parse() {
        let cli = parse(&[
            "-wdir",
            "/w",
            "--npernode",
            "2",
            "--output-filename",
            "out",
            "--timestamp-output",
            "--report-bindings",
            "-H",
            "a:2",
            "prog",
            "-wdir",
        ])
        .unwrap();
        assert_eq!(cli.wdir.as_deref(), Some(std::path::Path::new("/w")));
        assert_eq!(cli.mapping(), MapBy::PerNode(2));
        assert_eq!(
            cli.output_filename,
            Some(OutputFiles::parse("out").unwrap())
        );
        assert!(cli.timestamp_output && cli.report_bindings);
        assert_eq!(cli.command, ["prog", "-wdir"]);
        let ppr = parse(&["--map-by", "ppr:3:node", "-N", "3", "-H", "a", "p"]).unwrap();
        assert_eq!(ppr.mapping(), MapBy::PerNode(3));
        let ranked = parse(&["--rankfile", "rf", "prog"]).unwrap();
        assert_eq!(
            ranked.ranks, None,
            "a rankfile alone gives the hosts and ranks"
        );
        for (args, said) in [
            (
                &["--npernode", "2", "--map-by", "node", "-H", "a", "p"][..],
                "two different",
            ),
            (
                &["--rankfile", "rf", "--npernode", "1", "p"],
                "--rankfile places",
            ),
            (
                &["--rankfile", "rf", "--bind-to", "core", "p"],
                "--rankfile binds",
            ),
            (&["--map-by", "ppr:0:node", "-n", "1", "p"], "ppr:N:node"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(said), "{args:?}: {e}");
        }
    }

    #[test]
    fn bad_input_is_rejected() {
        assert!(parse(&["-n", "2"]).is_err(), "program is required");
        assert!(parse(&["prog"]).is_err(), "-n is required");
        assert!(parse(&["-n", "0", "prog"]).is_err());
        assert!(parse(&["-n", "x", "prog"]).is_err());
        assert!(parse(&["-n", "1", "--env", "NOEQUALS", "prog"]).is_err());
        assert!(parse(&["-n", "1", "--timeout", "soon", "prog"]).is_err());
        assert!(parse(&["-n", "1", "--bind-to", "socket", "prog"]).is_err());
        assert!(parse(&["-n", "1", "--pml", "ob2", "prog"]).is_err());
        let tm = parse(&["-n", "1", "--hw-tag-matching", "prog"]).unwrap_err();
        assert!(tm.to_string().contains("needs --pml ucx"), "{tm}");
    }

    fn words(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_spawned_job_keeps_the_placement_but_not_the_count_nor_the_program() {
        let cli = parse(&[
            "-np",
            "2",
            "--host",
            "a,b",
            "-x",
            "V",
            "--ssh-args",
            "-n",
            "--bind-to",
            "core",
            "--stall-timeout",
            "5",
            "--stall-report-file",
            "r",
            "--",
            "prog",
            "-n",
            "5",
        ])
        .unwrap();
        let placement = cli.placement_args();
        assert_eq!(
            words(&placement),
            ["--host=a,b", "--ssh-args=-n", "-x", "V", "--grace=1"]
        );
        // What the spawned rsrun is given parses back to the same placement (the program
        // stands for the spawned rank's).
        let again = Cli::parse_args(
            std::iter::once(OsString::from("rsrun"))
                .chain(placement)
                .chain(["--np", "3", "child"].map(OsString::from)),
        )
        .unwrap();
        assert_eq!(again.hosts, ["a,b"]);
        assert_eq!(again.export, ["V"]);
        assert_eq!(again.ssh_args.as_deref(), Some("-n"));
        assert_eq!(again.bind_to, BindTo::None);
        assert_eq!(again.stall_timeout, None);
        assert_eq!(again.command, ["child"]);
    }

    #[test]
    fn a_spawned_job_keeps_every_option_it_shares_as_given() {
        let cli = parse(&[
            "-n",
            "2",
            "--hostfile",
            "hf",
            "--map-by",
            "ppr:2:node",
            "--launcher",
            "ssh",
            "--launch-agent",
            "ssh -q",
            "--env",
            "A=b c",
            "--tag-output",
            "--output-filename",
            "out:nocopy",
            "--wdir",
            "/w",
            "--timeout",
            "1.5",
            "--tcp-if",
            "lo",
            "--eager-limit",
            "4096",
            "prog",
        ])
        .unwrap();
        let again = Cli::parse_args(
            std::iter::once(OsString::from("rsrun"))
                .chain(cli.placement_args())
                .chain(["-n", "1", "child"].map(OsString::from)),
        )
        .unwrap();
        assert_eq!(again.hostfile, cli.hostfile);
        assert_eq!(again.map_by, cli.map_by);
        assert_eq!(again.launcher, cli.launcher);
        assert_eq!(again.launch_agent, cli.launch_agent);
        assert_eq!(again.env, cli.env);
        assert!(again.tag_output);
        assert_eq!(again.output_filename, cli.output_filename);
        assert_eq!(again.wdir, cli.wdir);
        assert_eq!(again.timeout, cli.timeout);
        assert_eq!(again.tcp_if, cli.tcp_if);
        assert_eq!(again.eager_limit, cli.eager_limit);
        // The spawned rsrun's job number reaches its output files' paths.
        let second = Cli::parse_args(
            std::iter::once(OsString::from("rsrun"))
                .chain(cli.placement_args())
                .chain(["--job-number=2", "-n", "1", "child"].map(OsString::from)),
        )
        .unwrap();
        let files = second.output_filename.unwrap();
        assert_eq!(files.rank_dir(0, 1), std::path::Path::new("out/2/rank.0"));
    }
}
