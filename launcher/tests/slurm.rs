//! rsrun inside a Slurm allocation, on a real Slurm across the test hosts
//! (../shared/testhosts/slurm-local): tools/test-all.sh brings it up and sets MPIRT_TEST_SLURM.

mod common;

use std::env;
use std::process::Command;

use common::{
    assert_receive_cycle_over_three_hosts, example, job_dir, run, stranger, testhosts_ssh_config,
};

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
    srun_started_agents_honour_the_working_directory_and_stdin();
}

/// Agents started by srun put their ranks where ssh-started ones do: in rsrun's working
/// directory or `--wdir`, with relative programs and inputs found there, stdin reaching rank 0,
/// and `--npernode` placing within the allocation. (Part of the test above: two tests at once
/// would wait for each other's nodes.)
fn srun_started_agents_honour_the_working_directory_and_stdin() {
    let dir = job_dir("slurm-wdir");
    let d = dir.to_str().unwrap();
    let hosts_and_dirs = |r: &common::Run| -> Vec<String> {
        r.sorted_lines()
            .iter()
            .map(|line| line.split_once(' ').unwrap().1.to_string())
            .collect()
    };
    for (args, from) in [
        (&["./job.sh"][..], d),
        (&["--wdir", d, "./job.sh"][..], "/"),
        (&["-wdir", d, "./job.sh"][..], "/"),
    ] {
        let mut cmd = salloc("2", args);
        cmd.current_dir(from);
        let r = run(&mut cmd, b"");
        assert_eq!(r.code(), Some(0), "{args:?}: {}\n{}", r.stdout, r.stderr);
        let seen = hosts_and_dirs(&r);
        assert_eq!(seen.len(), 2, "{args:?}: {}", r.stdout);
        for line in &seen {
            assert!(
                line.starts_with("host") && line.ends_with(&format!(" {d} input-data")),
                "{args:?}: {line}"
            );
        }
        assert_ne!(seen[0], seen[1], "one rank a node: {seen:?}");
    }
    // Rank 0's stdin; the other rank reads nothing.
    let script = "if [ $MPIRT_RANK = 0 ]; then echo 0 $(cat); else echo $MPIRT_RANK $(wc -c); fi";
    let r = run(
        &mut salloc("2", &["sh", "-c", script]),
        b"line one\nline two\n",
    );
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.sorted_lines(), ["0 line one line two", "1 0"]);
    // Two tasks a node in the allocation, one rank a node asked for.
    let mut cmd = Command::new("salloc");
    cmd.args([
        "-N",
        "2",
        "--ntasks-per-node",
        "2",
        env!("CARGO_BIN_EXE_rsrun"),
    ])
    .args([
        "--npernode",
        "1",
        "sh",
        "-c",
        "echo $MPIRT_LOCAL_SIZE $(hostname)",
    ]);
    let r = run(&mut cmd, b"");
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    let lines = r.sorted_lines();
    assert_eq!(lines.len(), 2, "{}", r.stdout);
    assert!(lines.iter().all(|l| l.starts_with("1 host")), "{lines:?}");
    assert_ne!(lines[0], lines[1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Under `srun --mpi=pmi2` rank 0 makes the job's secret: a stranger who knows the job id
/// (`squeue` shows it) still cannot join.
#[test]
fn a_stranger_cannot_join_a_job_under_srun_with_pmi2() {
    if !slurm_up() {
        return;
    }
    let mut srun = Command::new("srun");
    srun.args(["--mpi=pmi2", "-N", "2", "-n", "2"]);
    stranger::play_against_launcher(srun, "stranger-srun");
}

/// `--stall-timeout` inside an allocation: the ranks on three nodes, started by agents that
/// srun started, tell rsrun what they wait for over their own connections, and the report
/// names each rank's node and the cycle.
#[test]
fn a_stuck_job_inside_an_allocation_is_reported() {
    if !slurm_up() {
        return;
    }
    let r = run(
        &mut salloc(
            "3",
            &["--stall-timeout", "1", &example("stuck"), "receive-cycle"],
        ),
        b"",
    );
    assert_receive_cycle_over_three_hosts(&r);
}
