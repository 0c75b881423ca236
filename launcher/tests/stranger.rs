//! Nobody outside a job can talk to its ranks: a stranger who knows the job id and the
//! protocol, but not the job's secret, is refused by a TCP job on this host (the same play
//! runs across the SSH test hosts in tests/ssh.rs and under Slurm in tests/slurm.rs), nor by
//! one under MPICH's Hydra.

mod common;

use std::process::Command;

use common::{example, rsrun, scratch_dir, stranger};
use std::path::Path;

/// `stepwise DIR 2` on two ranks over TCP on this host, saying what the ranks refuse.
fn stepwise_over_tcp(dir: &Path) -> std::process::Command {
    rsrun(&[
        "--transport",
        "tcp",
        "--verbose",
        "-n",
        "2",
        &example("stepwise"),
        dir.to_str().unwrap(),
        "2",
    ])
}

#[test]
fn a_stranger_cannot_join_a_tcp_job_on_this_host() {
    let dir = scratch_dir("stranger");
    stranger::play_against(&mut stepwise_over_tcp(&dir), &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A flood of connections, more than a rank keeps in the handshake, kept up while the ranks
/// connect, does not stop the job: the ranks' own dials are the ones they keep.
#[test]
fn a_flood_of_strangers_does_not_stop_a_tcp_job_on_this_host() {
    let dir = scratch_dir("flood");
    stranger::flood_against(&mut stepwise_over_tcp(&dir), &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under MPICH's `mpiexec.hydra` (PMI-1), rank 0 makes the job's secret and puts it in the
/// job's PMI-1 key-value space before the first fence: a stranger is refused as under rsrun.
#[test]
fn a_stranger_cannot_join_a_job_under_hydra() {
    let hydra = Command::new("mpiexec.hydra").arg("--version").output();
    if !hydra.is_ok_and(|o| o.status.success()) {
        println!("skipped: no mpiexec.hydra here (tools/test-all.sh installs Debian's mpich)");
        return;
    }
    let mut hydra = Command::new("mpiexec.hydra");
    hydra.args(["-n", "2"]);
    stranger::play_against_launcher(hydra, "stranger-hydra");
}
