//! Nobody outside a job can talk to its ranks: a stranger who knows the job id and the
//! protocol, but not the job's secret, is refused by a TCP job on this host (the same play
//! runs across the SSH test hosts in tests/ssh.rs and under Slurm in tests/slurm.rs).

mod common;

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
