//! `rsrun -n N [options] PROGRAM [ARGS...]`: start N ranks of an mpirt program on this host or
//! across hosts; `rsrun --agent ...` is the per-host agent rsrun itself starts over ssh.

use launcher::cli::Cli;
use launcher::{agent, fd_limit, job, signals, spawned};

fn main() {
    // Before any thread exists, so that no thread can take SIGINT/SIGTERM/SIGHUP itself.
    if let Err(e) = signals::block() {
        eprintln!("rsrun: cannot block signals: {e}");
        std::process::exit(1);
    }
    // The agent needs the room as much as rsrun: a pipe or two for each rank on its host.
    if let Err(e) = fd_limit::raise_to_hard() {
        eprintln!("rsrun: warning: cannot raise the open-file limit: {e}");
    }
    let args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == agent::FLAG) {
        std::process::exit(agent::main(&args[2..]));
    }
    if args.get(1).is_some_and(|a| a == spawned::EXEC_FLAG) {
        std::process::exit(spawned::exec_main());
    }
    let mut cli = Cli::parse_args(args).unwrap_or_else(|e| e.exit());
    if let Err(e) = cli.resolve_stall_timeout() {
        eprintln!("rsrun: {e}");
        std::process::exit(1);
    }
    let code = job::run(&cli);
    std::process::exit(code);
}
