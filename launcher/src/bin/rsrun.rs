//! `rsrun -n N [options] PROGRAM [ARGS...]`: start N ranks of an mpirt program on this host.

use launcher::cli::Cli;
use launcher::{job, signals};

fn main() {
    // Before any thread exists, so that no thread can take SIGINT/SIGTERM/SIGHUP itself.
    if let Err(e) = signals::block() {
        eprintln!("rsrun: cannot block signals: {e}");
        std::process::exit(1);
    }
    let cli = Cli::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let code = job::run(&cli);
    std::process::exit(code);
}
