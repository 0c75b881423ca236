//! rsrun inside a Slurm allocation, on a real Slurm across the test hosts
//! (../shared/testhosts/slurm-local): tools/test-all.sh brings it up and sets MPIRT_TEST_SLURM.

mod common;

use std::env;
use std::process::Command;

use common::{example, run, scratch_dir, stranger, testhosts_ssh_config};

/// `salloc -N NODES rsrun ARGS...`: rsrun runs here, inside the allocation it is given.
fn salloc(nodes: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("salloc");
    cmd.args(["-N", nodes, env!("CARGO_BIN_EXE_rsrun")])
        .args(args);
    cmd
}

/// Whether a Slurm is up; says why the test is skipped when not.
fn slurm_up() -> bool {
    let up = env::var_os("MPIRT_TEST_SLURM").is_some();
    if !up {
        println!(
            "skipped: no Slurm here (tools/test-all.sh starts one on the test hosts and sets \
             MPIRT_TEST_SLURM)"
        );
    }
    up
}

#[test]
fn rsrun_inside_an_allocation_uses_its_nodes() {
    if !slurm_up() {
        return;
    }
    // No hosts and no -n: the allocation's three nodes, one task each, agents started by srun.
    let r = run(&mut salloc("3", &["--verbose", &example("ring")]), b"");
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("ring of 3 ranks: token total 3, expected 3"),
        "{}",
        r.stdout
    );
    for host in ["host1", "host2", "host3"] {
        assert!(
            r.stderr.contains(&format!("on {host} through agent")),
            "{host}: {}",
            r.stderr
        );
    }
    // The same allocation reached over ssh instead.
    let config = testhosts_ssh_config();
    let ssh_args = format!("-F {}", config.display());
    let r = run(
        &mut salloc(
            "2",
            &[
                "--launcher",
                "ssh",
                "--ssh-args",
                &ssh_args,
                &example("ring"),
            ],
        ),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("ring of 2 ranks: token total 1, expected 1"),
        "{}",
        r.stdout
    );
}

/// Under `srun --mpi=pmi2` rank 0 makes the job's secret: a stranger who knows the job id
/// (`squeue` shows it) still cannot join.
#[test]
fn a_stranger_cannot_join_a_job_under_srun_with_pmi2() {
    if !slurm_up() {
        return;
    }
    let dir = scratch_dir("stranger-srun");
    let mut job = Command::new("srun");
    job.args(["--mpi=pmi2", "-N", "2", "-n", "2", &example("stepwise")])
        .arg(&dir)
        .arg("2")
        .env("MPIRT_TRANSPORT", "tcp")
        .env("MPIRT_VERBOSE", "1");
    stranger::play_against(&mut job, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}
