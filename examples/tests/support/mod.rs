//! Running the workspace's programs under rsrun from integration tests, shared by the crates
//! whose binaries users launch (examples, osu-benches). `cargo build --workspace` (same profile)
//! must come first: the binaries are found beside the test executable's directory.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn bin(name: &str) -> PathBuf {
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/<name>
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace` (same profile) first",
        path.display()
    );
    path
}

/// Runs `rsrun -n N program args`, killing it if it takes more than a minute.
pub fn rsrun(n: u32, program: &str, args: &[&str]) -> Output {
    rsrun_with(n, &[], program, args)
}

/// Runs `rsrun -n N options program args` (`options` are rsrun's own, such as
/// `--transport tcp`), killing it if it takes more than a minute.
pub fn rsrun_with(n: u32, options: &[&str], program: &str, args: &[&str]) -> Output {
    let mut command = Command::new(bin("rsrun"));
    command
        .args(["-n", &n.to_string()])
        .args(options)
        .arg(bin(program))
        .args(args);
    output_within_a_minute(command)
}

/// Runs `command` with its output captured, killing it if it takes more than a minute.
pub fn output_within_a_minute(mut command: Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{command:?} did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Whether a Slurm is up for the srun tests: tools/test-all.sh starts one across the test
/// hosts (../shared/testhosts/slurm-local) and sets MPIRT_TEST_SLURM for them. Says why a
/// test skips where it is not.
#[allow(dead_code)] // Only the suites with srun tests use it.
pub fn slurm_up() -> bool {
    let up = std::env::var_os("MPIRT_TEST_SLURM").is_some();
    if !up {
        println!(
            "skipped: no Slurm here (tools/test-all.sh starts one on the test hosts and sets \
             MPIRT_TEST_SLURM)"
        );
    }
    up
}
