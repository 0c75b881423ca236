//! The NPB kernels (EP, IS, CG, MG) and heat2d verify their answers on several rank counts, over shared memory
//! and over TCP. `cargo build --release --workspace` must come first (see `support`).

use std::process::Output;

mod support;
use support::{rsrun, rsrun_with};

const TRANSPORTS: [&str; 2] = ["shm", "tcp"];

/// Runs `program args` on `n` ranks over `transport` and returns its standard output, failing
/// the test (with the job's standard error) unless the job succeeded.
fn run(n: u32, transport: &str, program: &str, args: &[&str]) -> String {
    let o: Output = rsrun_with(n, &["--transport", transport], program, args);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "rsrun -n {n} --transport {transport} {program} {args:?} failed: {}\n{stdout}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// Class S of an NPB kernel passes NPB's verification on each of `ranks`, on both transports.
fn verifies_class_s(program: &str, ranks: &[u32]) {
    for transport in TRANSPORTS {
        for &n in ranks {
            let out = run(n, transport, program, &["S"]);
            let context = format!("{program} on {n} ranks over {transport}:\n{out}");
            assert!(
                out.contains(" Class           =                        S\n"),
                "{context}"
            );
            assert!(
                out.contains(&format!(" Total processes = {n:>24}\n")),
                "{context}"
            );
            assert!(
                out.contains(" Verification    =               SUCCESSFUL\n"),
                "{context}"
            );
        }
    }
}

#[test]
fn npb_ep_class_s_verifies() {
    verifies_class_s("npb_ep", &[1, 2, 4, 8]);
}

#[test]
fn npb_is_class_s_verifies() {
    verifies_class_s("npb_is", &[1, 2, 4, 8]);
}

#[test]
fn npb_cg_class_s_verifies() {
    verifies_class_s("npb_cg", &[1, 2, 4, 8]);
}

#[test]
fn npb_mg_class_s_verifies() {
    verifies_class_s("npb_mg", &[1, 2, 4, 8]);
}

#[test]
fn npb_kernels_refuse_what_npb_does_not_allow() {
    for (program, n, args, message) in [
        (
            "npb_cg",
            3,
            &["S"][..],
            "npb_cg needs a power-of-two number of processes (1, 2, 4, 8, ...), got 3",
        ),
        (
            "npb_is",
            6,
            &["S"][..],
            "npb_is needs a power-of-two number of processes (1, 2, 4, 8, ...), got 6",
        ),
        (
            "npb_mg",
            5,
            &["S"][..],
            "npb_mg needs a power-of-two number of processes (1, 2, 4, 8, ...), got 5",
        ),
        ("npb_ep", 1, &["Q"][..], "usage: npb_ep CLASS"),
        ("npb_cg", 1, &[][..], "usage: npb_cg CLASS"),
    ] {
        let o = rsrun(n, program, args);
        assert!(!o.status.success(), "{program} {args:?} on {n} ranks");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(message), "{program}: {stderr}");
    }
}

#[test]
fn heat2d_matches_the_serial_run() {
    let mut checksums = Vec::new();
    for transport in TRANSPORTS {
        for n in [1, 2, 4, 6] {
            let out = run(n, transport, "heat2d", &["60", "45", "50"]);
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 2, "{out}");
            assert_eq!(lines[1], "heat2d: matches the serial run bit for bit");
            // The checksum must not depend on the decomposition either.
            let checksum = lines[0].rsplit("checksum ").next().unwrap().to_owned();
            checksums.push(checksum);
        }
    }
    checksums.dedup();
    assert_eq!(checksums.len(), 1, "{checksums:?}");
}
