//! Nobody outside a job can talk to its ranks: a stranger who knows the job id and the
//! protocol, but not the job's secret, is refused by a TCP job on this host (the same play
//! runs across the SSH test hosts in tests/ssh.rs and under Slurm in tests/slurm.rs), nor by
//! one under MPICH's Hydra.

mod common;

use std::process::Command;

use common::{example, rsrun, scratch_dir, stranger};

#[test]
fn a_stranger_cannot_join_a_tcp_job_on_this_host() {
    let dir = scratch_dir("stranger");
    let dir_arg = dir.to_str().unwrap();
    let mut job = rsrun(&[
        "--transport",
        "tcp",
        "--verbose",
        "-n",
        "2",
        &example("stepwise"),
        dir_arg,
        "2",
    ]);
    stranger::play_against(&mut job, &dir);
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
