//! `rsrun --stall-timeout 2` on the classic bugs (`stuck BUG`), over shared memory and TCP:
//! the job ends, non-zero, with a report that names the ranks, their calls, the source
//! lines and the cause; a slow job that is not stuck runs to its end. The bound on the time
//! a stuck job takes is generous: it catches a hang, it is not a measurement.

// Only some of the shared helpers are used here.
#[allow(dead_code)]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{bin, output_within_a_minute};

/// Runs `stuck BUG` on `n` ranks over `transport`; the report (stderr), the JSON report
/// and the exit code.
fn stuck(n: u32, transport: &str, bug: &str) -> (String, String, Option<i32>) {
    let file = std::env::temp_dir().join(format!(
        "mpirt-stall-{}-{bug}-{transport}.json",
        std::process::id()
    ));
    let mut command = Command::new(bin("rsrun"));
    command
        .args([
            "-n",
            &n.to_string(),
            "--transport",
            transport,
            "--stall-timeout",
            "2",
        ])
        .arg("--stall-report-file")
        .arg(&file)
        .arg(bin("stuck"))
        .arg(bug);
    let out = output_within_a_minute(command);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    (stderr, json, out.status.code())
}

fn check(n: u32, bug: &str, expected: &[&str]) {
    for transport in ["shm", "tcp"] {
        let (report, json, code) = stuck(n, transport, bug);
        assert_eq!(code, Some(125), "{bug} over {transport}:\n{report}");
        assert!(
            report.contains("is stuck"),
            "{bug} over {transport}:\n{report}"
        );
        for want in expected {
            assert!(
                report.contains(want),
                "{bug} over {transport}: no {want:?} in\n{report}"
            );
        }
        assert!(
            json.starts_with("{\"headline\":") && json.contains("\"diagnosis\":["),
            "{bug} over {transport}: {json}"
        );
        assert!(json.contains("stuck.rs:"), "{bug} over {transport}: {json}");
    }
}

#[test]
fn head_to_head_synchronous_sends_are_a_cycle() {
    check(
        2,
        "head-to-head",
        &["deadlock: rank 0 waits in synchronous_send to rank 1 (tag 3, examples/src/bin/stuck.rs:",
          "rank 1 waits in synchronous_send to rank 0 (tag 3, examples/src/bin/stuck.rs:",
          "a cycle; no message between them is in flight"],
    );
}

#[test]
fn a_receive_cycle_of_three_ranks_is_named() {
    check(
        3,
        "receive-cycle",
        &[
            "deadlock: rank 0 waits in receive from rank 2 (tag 7, examples/src/bin/stuck.rs:",
            "rank 2 waits in receive from rank 1",
            "rank 1 waits in receive from rank 0",
            "a cycle",
        ],
    );
}

#[test]
fn a_tag_mismatch_shows_the_message_with_the_other_tag() {
    check(
        2,
        "tag-mismatch",
        &["rank 1 waits in receive from rank 0 (tag 2, examples/src/bin/stuck.rs:",
          "no message sent or being sent matches it; near misses: rank 0 sent a message with tag 1 on MPI_COMM_WORLD that waits unreceived (same peer, other tag)"],
    );
}

#[test]
fn a_wrong_source_shows_the_message_from_the_other_rank() {
    check(
        3,
        "wrong-source",
        &["rank 2 waits in receive from rank 1 (tag 4, examples/src/bin/stuck.rs:",
          "rank 0 sent a message with tag 4 on MPI_COMM_WORLD that waits unreceived (same tag, other source)",
          "barrier on MPI_COMM_WORLD (examples/src/bin/stuck.rs:"],
    );
}

#[test]
fn a_receive_on_the_wrong_communicator_shows_the_other_communicator() {
    check(
        2,
        "wrong-communicator",
        &["rank 1 waits in receive from rank 0 (tag 6, examples/src/bin/stuck.rs:",
          "rank 0 sent a message with tag 6 on MPI_COMM_WORLD that waits unreceived (same tag, other communicator)"],
    );
}

#[test]
fn a_skipped_barrier_names_the_rank_that_did_not_enter_and_where_it_is() {
    check(
        3,
        "skipped-barrier",
        &["barrier on MPI_COMM_WORLD (examples/src/bin/stuck.rs:",
          "was entered by ranks 0, 1 but not by rank 2: rank 2 waits in receive from rank 0 (tag 11, examples/src/bin/stuck.rs:"],
    );
}

#[test]
fn a_skipped_all_reduce_names_the_rank_that_did_not_enter() {
    check(
        3,
        "skipped-all-reduce",
        &["all_reduce_into on MPI_COMM_WORLD (examples/src/bin/stuck.rs:",
          "was entered by ranks 0, 1 but not by rank 2: rank 2 waits in receive from rank 0 (tag 15, examples/src/bin/stuck.rs:"],
    );
}

#[test]
fn a_barrier_after_a_synchronous_send_is_reported_as_the_barrier() {
    for transport in ["shm", "tcp"] {
        let (report, _, code) = stuck(2, transport, "barrier-after-send");
        assert_eq!(code, Some(125), "over {transport}:\n{report}");
        assert!(
            report.contains("barrier on MPI_COMM_WORLD (examples/src/bin/stuck.rs:")
                && report.contains("was entered by rank 0 but not by rank 1"),
            "over {transport}:\n{report}"
        );
        assert!(
            !report.contains("synchronous_send"),
            "over {transport}:\n{report}"
        );
    }
}

#[test]
fn a_rank_waiting_for_a_finalized_one_is_named() {
    check(
        2,
        "finalized-peer",
        &[
            "rank 1 waits in receive from rank 0 (tag 12, examples/src/bin/stuck.rs:",
            "but rank 0 has already finalized",
        ],
    );
}

#[test]
fn a_slow_job_is_not_stuck() {
    for transport in ["shm", "tcp"] {
        let (report, _, code) = stuck(3, transport, "slow");
        assert_eq!(code, Some(0), "slow over {transport}:\n{report}");
        assert!(
            !report.contains("is stuck"),
            "slow over {transport}:\n{report}"
        );
    }
}

#[test]
fn sigusr1_prints_the_report_and_the_job_goes_on() {
    let dir = std::env::temp_dir().join(format!("mpirt-stall-usr1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (report_file, go) = (dir.join("report.json"), dir.join("go"));
    // --verbose: rsrun's first line on stderr says it runs, past the start of `main`, where it
    // takes SIGUSR1 for itself (before that, the signal's default action would end it).
    let mut child = Command::new(bin("rsrun"))
        .args(["-n", "3", "--verbose", "--stall-report-file"])
        .arg(&report_file)
        .arg(bin("stuck"))
        .arg("until-file")
        .arg(&go)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    lines
        .recv_timeout(Duration::from_secs(50))
        .expect("rsrun said nothing");
    // Asks for the report until it shows ranks 1 and 2 waiting (each tells rsrun after a
    // second with nothing moving), then lets rank 0 send.
    let deadline = Instant::now() + Duration::from_secs(50);
    loop {
        assert!(
            Instant::now() < deadline,
            "no report with the waiting ranks"
        );
        let asked = Command::new("kill")
            .args(["-USR1", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(asked.success());
        std::thread::sleep(Duration::from_millis(200));
        let json = std::fs::read_to_string(&report_file).unwrap_or_default();
        if json.matches("\"status\":\"waiting\"").count() == 2 {
            assert!(json.contains("\"rank\":0,\"status\":\"running\""), "{json}");
            break;
        }
    }
    std::fs::write(&go, b"").unwrap();
    let status = child.wait().unwrap();
    let stderr: Vec<String> = lines.iter().collect();
    let stderr = stderr.join("\n");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("what each rank waits for (SIGUSR1)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("rank 1 on") && stderr.contains("waits in receive from rank 0 (tag 14"),
        "{stderr}"
    );
    assert!(
        stderr.contains("rank 0 is not waiting in an mpirt call"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lines `source` writes, as they come.
fn lines_of(source: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(source)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[test]
fn without_rsrun_a_stalled_rank_says_what_it_waits_for_on_stderr() {
    // A singleton receiving from itself waits for ever, as a rank under srun would: with
    // MPIRT_STALL_TIMEOUT it prints its own line. The test ends it once the line is there.
    let mut child = Command::new(bin("stuck"))
        .arg("receive-cycle")
        .env("MPIRT_STALL_TIMEOUT", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(child.stderr.take().unwrap());
    let line = rx.recv_timeout(Duration::from_secs(50));
    child.kill().unwrap();
    child.wait().unwrap();
    let line = line.expect("the rank said nothing");
    assert!(
        line.starts_with("mpirt: stalled: rank 0 on ")
            && line.contains("waits in receive from rank 0 (tag 7, examples/src/bin/stuck.rs:"),
        "{line}"
    );
}

/// The UCX PML keeps its queues to itself: the report names each rank's call (a blocking
/// receive's peer and tag, a synchronous send's, a collective) and source line, without the
/// queues, so deadlock cycles and collectives some ranks skipped are found, near misses not.
#[cfg(feature = "ucx")]
#[test]
fn under_ucx_the_calls_and_cycles_are_reported() {
    for (n, bug, want) in [
        (
            2,
            "head-to-head",
            "deadlock: rank 0 waits in synchronous_send to rank 1 (tag 3, examples/src/bin/stuck.rs:",
        ),
        (
            2,
            "tag-mismatch",
            "rank 1 waits in receive from rank 0 (tag 2, examples/src/bin/stuck.rs:",
        ),
        (
            3,
            "skipped-barrier",
            "was entered by ranks 0, 1 but not by rank 2: rank 2 waits in receive from rank 0 (tag 11",
        ),
    ] {
        let mut command = Command::new(bin("rsrun"));
        command
            .args(["-n", &n.to_string(), "--pml", "ucx", "--stall-timeout", "2"])
            .arg(bin("stuck"))
            .arg(bug);
        let out = output_within_a_minute(command);
        let report = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{bug}:\n{report}");
        assert!(report.contains(want), "{bug}: no {want:?} in\n{report}");
    }
}
