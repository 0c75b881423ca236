//! rsrun's command line, spelled the way mpirun users expect.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::hosts::MapBy;
use bootstrap::vars;

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
/// of this rsrun, so rsrun must be installed at the same path on every host. Only ranks on
/// rsrun's own host read rsrun's stdin (rank 0, if it runs here).
#[derive(Debug, Parser)]
#[command(name = "rsrun", version, about)]
pub struct Cli {
    /// Number of ranks to start (`-np` works too). With hosts given, defaults to their slots.
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

    /// Lay ranks out by filling each host's slots in turn, or round-robin over the hosts.
    #[arg(long, value_enum, default_value_t = MapBy::Slot)]
    pub map_by: MapBy,

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

    /// Extra arguments for the launch agent, split at spaces, e.g. "-F /path/ssh_config"
    /// [env: MPIRT_SSH_ARGS].
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

    /// Kill the job if it runs longer than SECS seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub timeout: Option<Duration>,

    /// How long ranks get to exit after SIGTERM before they are killed.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, default_value = "1")]
    pub grace: Duration,

    /// Describe the launch on stderr and set MPIRT_VERBOSE=1 for the ranks.
    #[arg(short, long)]
    pub verbose: bool,

    /// Transport between ranks (sets MPIRT_TRANSPORT): auto (shared memory on a host, verbs
    /// or TCP between hosts), shm, tcp or verbs (that one between every pair, local ones too).
    #[arg(long, value_name = "NAME", value_parser = ["auto", "shm", "tcp", "verbs"])]
    pub transport: Option<String>,

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
    #[arg(value_name = "PROGRAM", required = true, num_args = 1..,
          trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

impl Cli {
    /// Parses rsrun's arguments (the first item is the program name), accepting `-np`.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let cli = Cli::try_parse_from(rewrite_np(args.into_iter().map(Into::into).collect()))?;
        if cli.hw_tag_matching && cli.pml.as_deref() != Some("ucx") {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                "--hw-tag-matching turns on UCX's offload, so it needs --pml ucx\n",
            ));
        }
        let allocated = std::env::var_os("SLURM_JOB_NODELIST").is_some();
        if cli.ranks.is_none() && cli.hosts.is_empty() && cli.hostfile.is_none() && !allocated {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::MissingRequiredArgument,
                "-n N is required unless hosts are given with -H or --hostfile, or by a Slurm \
                 allocation\n",
            ));
        }
        Ok(cli)
    }

    /// Whether the hosts come from the Slurm allocation rsrun runs in.
    pub fn in_allocation(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        self.hosts.is_empty() && self.hostfile.is_none() && lookup("SLURM_JOB_NODELIST").is_some()
    }

    /// The launch agent command and its arguments, before the host name: srun's when asked
    /// for (or by default in an allocation); else the flags, else `MPIRT_SSH` and
    /// `MPIRT_SSH_ARGS`, else plain `ssh`. Words are split at whitespace.
    pub fn launch_command(&self, lookup: impl Fn(&str) -> Option<String>) -> Vec<String> {
        let srun = match self.launcher {
            Some(l) => l == Launcher::Srun,
            None => self.in_allocation(&lookup),
        };
        if srun {
            // One task on the named node, its output passed on as it comes.
            return [
                "srun",
                "--nodes=1",
                "--ntasks=1",
                "--unbuffered",
                "--kill-on-bad-exit=1",
                "--nodelist",
            ]
            .map(String::from)
            .to_vec();
        }
        let agent = self
            .launch_agent
            .clone()
            .or_else(|| lookup("MPIRT_SSH"))
            .unwrap_or_else(|| "ssh".into());
        let args = self.ssh_args.clone().or_else(|| lookup("MPIRT_SSH_ARGS"));
        agent
            .split_whitespace()
            .chain(args.as_deref().unwrap_or("").split_whitespace())
            .map(String::from)
            .collect()
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
        if let Some(limit) = self.eager_limit {
            env.push((vars::EAGER_LIMIT.into(), limit.to_string().into()));
        }
        if let Some(pml) = &self.pml {
            env.push((vars::PML.into(), pml.into()));
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

/// clap reads `-np 4` as `-n p`, so `-np` (mpirun's spelling) becomes `--np` — but only among
/// rsrun's own options, never in the program's arguments.
fn rewrite_np(mut args: Vec<OsString>) -> Vec<OsString> {
    const TAKES_VALUE: [&str; 21] = [
        "-n",
        "-H",
        "--host",
        "--hostfile",
        "--machinefile",
        "--map-by",
        "--launch-agent",
        "--ssh",
        "--ssh-args",
        "--np",
        "-x",
        "--env",
        "--bind-to",
        "--timeout",
        "--grace",
        "--transport",
        "--tcp-if",
        "--verbs-dev",
        "--launcher",
        "--eager-limit",
        "--pml",
    ];
    let mut i = 1;
    while i < args.len() {
        let Some(arg) = args[i].to_str() else { break };
        if arg == "-np" {
            args[i] = "--np".into();
            i += 2;
        } else if TAKES_VALUE.contains(&arg) {
            i += 2;
        } else if arg.starts_with('-') && arg != "-" && arg != "--" {
            i += 1;
        } else {
            break; // the program: everything from here on is its own
        }
    }
    args
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
            "-F /x/cfg",
            "prog",
            "-H",
        ])
        .unwrap();
        assert_eq!(cli.ranks, None);
        assert_eq!(cli.hosts, ["a:2,b", "c"]);
        assert_eq!(cli.map_by, MapBy::Node);
        assert!(cli.oversubscribe);
        assert_eq!(cli.command, ["prog", "-H"]);
        assert_eq!(
            cli.launch_command(|_| None),
            ["/usr/bin/ssh", "-q", "-F", "/x/cfg"]
        );
        let from_env = parse(&["--hostfile", "f", "prog"]).unwrap();
        let env = |name: &str| match name {
            "MPIRT_SSH" => Some("myssh".to_string()),
            "MPIRT_SSH_ARGS" => Some(" -p  22 ".to_string()),
            _ => None,
        };
        assert_eq!(from_env.launch_command(env), ["myssh", "-p", "22"]);
        assert_eq!(from_env.launch_command(|_| None), ["ssh"]);
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
}
