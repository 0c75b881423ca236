//! The examples run under rsrun as a user would run them. `cargo build --workspace` must come
//! first: the test finds rsrun and the example binaries beside its own executable's directory.

use std::process::Output;

mod support;
use support::{rsrun, rsrun_with};

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn hello_from_every_rank() {
    let out = stdout(&rsrun(8, "hello", &[]));
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    let mut expected: Vec<String> = (0..8)
        .map(|r| format!("Hello from rank {r} of 8"))
        .collect();
    expected.sort();
    assert_eq!(lines, expected);
}

#[test]
fn ring_on_1_2_4_and_8_ranks() {
    for n in [1u32, 2, 4, 8] {
        let out = stdout(&rsrun(n, "ring", &[]));
        let total = n * (n - 1) / 2;
        assert_eq!(
            out.trim(),
            format!("ring of {n} ranks: token total {total}, expected {total}")
        );
    }
}

#[test]
fn pingpong_checks_every_size() {
    let out = stdout(&rsrun(2, "pingpong", &[]));
    let sizes: Vec<u64> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    let expected: Vec<u64> = (0..=24).map(|k| 1u64 << k).collect();
    assert_eq!(sizes, expected);
}

#[test]
fn pingpong_refuses_the_wrong_size() {
    let o = rsrun(3, "pingpong", &[]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("pingpong needs exactly 2 ranks, got 3"));
}

#[test]
fn alltoall_verifies_every_block() {
    let out = stdout(&rsrun(4, "alltoall", &["256k", "3"]));
    let expected: Vec<String> = (1..=3)
        .map(|round| {
            format!(
                "alltoall: 4 ranks, round {round} of 3: 12 blocks of 4096 to 262144 bytes verified"
            )
        })
        .collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn bigmsg_checks_its_checksum() {
    let out = stdout(&rsrun(3, "bigmsg", &["64m"]));
    assert!(
        out.starts_with("bigmsg: 67108864 bytes from rank 0 to rank 2 in ")
            && out.trim_end().ends_with(" ok"),
        "{out}"
    );
}

#[test]
fn bigmsg_refuses_a_bad_size() {
    let o = rsrun(2, "bigmsg", &["lots"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("usage: bigmsg SIZE"));
}

/// Blocks of 512 bytes sent as a vector and received in another layout (every byte checked
/// by rank 1), past the eager limit, from the sender's shared arena a memcpy a block and,
/// with the arena's threshold above them, through a window.
#[test]
fn reshape_lands_every_byte_either_way() {
    for threshold in ["256", "1g"] {
        let env = format!("--env=MPIRT_SHM_ARENA_MIN_BLOCK={threshold}");
        let out = stdout(&rsrun_with(2, &[&env], "reshape", &["512", "1m", "3"]));
        assert!(
            out.starts_with("reshape: 3 x 1048576 bytes in blocks of 512 in "),
            "{out}"
        );
    }
}

/// A block that is not a multiple of 4, and layouts whose displacements would not fit an
/// `i32` (which would wrap), are refused with the usage line.
#[test]
fn reshape_refuses_a_bad_block_and_layouts_past_i32() {
    for args in [["6", "1m", "3"], ["4", "2g", "1"]] {
        let o = rsrun(2, "reshape", &args);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("usage: reshape BLOCK"), "{args:?}: {err}");
    }
}

#[test]
fn first_contact_times_both_round_trips_over_tcp() {
    let out = stdout(&rsrun_with(
        2,
        &["--transport", "tcp"],
        "first_contact",
        &[],
    ));
    let times: Vec<f64> = out
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        out.starts_with("first round trip ") && times.len() == 2 && times.iter().all(|&t| t > 0.0),
        "{out}"
    );
    let o = rsrun(3, "first_contact", &[]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("first_contact needs exactly 2 ranks"));
}

/// Under a launcher other than rsrun, initialize sizes libfabric itself: an example's ranks
/// run one thread when it starts (a test binary's run libtest's beside theirs, so mpirt's
/// suites cannot check it), and each says the size libfabric read under --verbose. Slurm's
/// variables are set as Hydra inside an allocation of one node leaves them: the size is the
/// job's, not the allocation's.
#[cfg(feature = "ofi")]
#[test]
fn ranks_started_by_hydra_size_libfabric_for_the_job() {
    use std::process::Command;
    if Command::new("mpiexec.hydra")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: no mpiexec.hydra here (MPICH's launcher, package mpich)");
        return;
    }
    let n = 3;
    let mut command = Command::new("mpiexec.hydra");
    command
        .args(["-n", &n.to_string()])
        .arg(support::bin("hello"))
        .env("MPIRT_TRANSPORT", "ofi")
        .env("MPIRT_OFI_PROVIDER", "tcp;ofi_rxm")
        .env("MPIRT_VERBOSE", "1")
        .envs([
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_NTASKS", "1"),
        ])
        .env_remove("FI_UNIVERSE_SIZE");
    // On loopback, as mpirt's OFI suites are: tcp;ofi_rxm binds the first interface it
    // lists, which with the SSH test hosts up is their bridge, and a run that takes the hosts
    // down deletes it under the job. A value the user set stays.
    if std::env::var_os("FI_TCP_IFACE").is_none() {
        command.env("FI_TCP_IFACE", "lo");
    }
    let out = support::output_within_a_minute(command);
    stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for rank in 0..n {
        let head = format!("mpirt: rank {rank} of {n} ");
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("rank {rank} did not report\n{stderr}"));
        assert!(line.contains(&format!("FI_UNIVERSE_SIZE {n})")), "{line}");
    }
}
