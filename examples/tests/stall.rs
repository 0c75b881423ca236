//! `rsrun --stall-timeout 1` on the classic bugs (`stuck BUG`), over shared memory and TCP
//! (or, where tools/test-all.sh's UCX phase sets MPIRT_TEST_PML=ucx, on `--pml ucx`): the job
//! ends, non-zero, with a report that names the ranks, their calls, the source lines and the
//! cause; a slow job that is not stuck runs to its end. The bound on the time a stuck job
//! takes is generous: it catches a hang, it is not a measurement. One second, as long as a rank
//! waits with nothing moving before it tells rsrun (`mpirt::stall`): a stuck job ends as soon
//! as its last rank has told (a shorter timeout ends none sooner), and the slow job's rank that
//! computes (2.5 s) never tells, however long the others, which told after a second, wait.

// Only some of the shared helpers are used here.
#[allow(dead_code)]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{bin, output_within_a_minute, slurm_up};

/// rsrun's options for each way the tests run the ranks: shared memory and TCP on the native
/// PML, or the UCX PML where MPIRT_TEST_PML=ucx (UCX_TLS as the environment sets it).
fn setups() -> Vec<[&'static str; 2]> {
    match std::env::var("MPIRT_TEST_PML").as_deref() {
        Ok("ucx") => vec![["--pml", "ucx"]],
        _ => vec![["--transport", "shm"], ["--transport", "tcp"]],
    }
}

/// Runs `stuck BUG` on `n` ranks with rsrun's options `setup`; the report (stderr), the
/// JSON report and the exit code.
fn stuck(n: u32, setup: [&str; 2], bug: &str) -> (String, String, Option<i32>) {
    let file = std::env::temp_dir().join(format!(
        "mpirt-stall-{}-{bug}-{}.json",
        std::process::id(),
        setup[1]
    ));
    let mut command = Command::new(bin("rsrun"));
    command
        .args(["-n", &n.to_string()])
        .args(setup)
        .args(["--stall-timeout", "1"])
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
    check_absent(n, bug, expected, &[]);
}

/// `check`, and the report says none of `absent`. The jobs of every setup run at once: each
/// waits out the stall timeout, mostly asleep, and one after the other they doubled this
/// suite's time.
fn check_absent(n: u32, bug: &str, expected: &[&str], absent: &[&str]) {
    let runs: Vec<_> = std::thread::scope(|s| {
        let jobs: Vec<_> = setups()
            .into_iter()
            .map(|setup| (setup, s.spawn(move || stuck(n, setup, bug))))
            .collect();
        jobs.into_iter()
            .map(|(setup, job)| (setup, job.join().unwrap()))
            .collect()
    });
    for (setup, (report, json, code)) in runs {
        let transport = setup.join(" ");
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
        for unwanted in absent {
            assert!(
                !report.contains(unwanted),
                "{bug} over {transport}: {unwanted:?} in\n{report}"
            );
        }
        assert!(
            json.starts_with("{\"headline\":") && json.contains("\"diagnosis\":["),
            "{bug} over {transport}: {json}"
        );
        assert!(json.contains("stuck.rs:"), "{bug} over {transport}: {json}");
        assert_valid_json(&json, &format!("{bug} over {transport}"));
    }
}

/// Checks that `json` parses, with Python's json module where python3 is installed (the
/// report's writer is hand-made: a quoting slip would give tools a file they cannot read).
fn assert_valid_json(json: &str, what: &str) {
    use std::io::Write;
    let Ok(mut python) = Command::new("python3")
        .args(["-c", "import json, sys; json.load(sys.stdin)"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        println!("{what}: the JSON report's syntax is not checked: no python3 here");
        return;
    };
    python
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = python.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: the JSON report does not parse: {}\n{json}",
        String::from_utf8_lossy(&out.stderr)
    );
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
fn a_tag_mismatch_of_a_posted_receive_shows_the_message_with_the_other_tag() {
    // The posted receive's size is its buffer's, on every PML (UCX's too).
    check(
        2,
        "posted-tag-mismatch",
        &["rank 1 waits in wait (examples/src/bin/stuck.rs:",
          "posted receives: from rank 0 tag 2 on MPI_COMM_WORLD (8 bytes)",
          "its receive from rank 0 with tag 2 on MPI_COMM_WORLD: no message sent or being sent matches it; near misses: rank 0 sent a message with tag 1 on MPI_COMM_WORLD that waits unreceived (same peer, other tag)"],
    );
}

#[test]
fn a_wait_on_one_request_is_diagnosed_by_that_request_not_every_posted_receive() {
    // The receive from rank 2 is posted, not waited on: no finding names it.
    check_absent(
        3,
        "unrelated-receive",
        &[
            "deadlock: rank 0 waits in wait (examples/src/bin/stuck.rs:",
            "rank 1 waits in receive from rank 0 (tag 32, examples/src/bin/stuck.rs:",
            "a cycle; no message between them is in flight",
            "for its receive from rank 1 tag 31 on MPI_COMM_WORLD (8 bytes)",
        ],
        &["with tag 30"],
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
fn a_collective_one_rank_refused_counts_on_every_rank() {
    // Only where the ranks meet in the shared-memory area are the others told of the
    // refusal; by messages they would wait in the all-reduce itself.
    let setup = ["--transport", "shm"];
    if !setups().contains(&setup) {
        println!("skipped: the refusal reaches the other ranks only over --transport shm");
        return;
    }
    let (report, _, code) = stuck(3, setup, "refused-all-reduce");
    assert_eq!(code, Some(125), "{report}");
    assert!(
        report.contains(
            "collective call 2 there, was entered by ranks 0, 1 but not by rank 2: rank 2 \
             waits in receive from rank 0 (tag 22, examples/src/bin/stuck.rs:"
        ),
        "{report}"
    );
    assert!(!report.contains("not by ranks"), "{report}");
}

#[test]
fn a_stuck_inter_communicator_collective_is_reported_under_its_own_name() {
    for setup in setups() {
        let transport = setup.join(" ");
        let (report, _, code) = stuck(4, setup, "skipped-inter-all-reduce");
        assert_eq!(code, Some(125), "over {transport}:\n{report}");
        // Ranks 0, 1 and 2 wait in the user's call, not in its steps on the local groups.
        let in_call = report
            .lines()
            .filter(|l| l.contains("waits in all_reduce_into (examples/src/bin/stuck.rs:"))
            .count();
        assert_eq!(in_call, 3, "over {transport}:\n{report}");
    }
}

#[test]
fn a_gather_its_root_waits_in_names_the_rank_that_skipped_it() {
    check(
        2,
        "skipped-gather",
        &["gather_into on MPI_COMM_WORLD (examples/src/bin/stuck.rs:",
          "was entered by rank 0 but not by rank 1: rank 1 waits in receive from rank 0 (tag 19, examples/src/bin/stuck.rs:"],
    );
}

#[test]
fn a_reduce_a_rank_skipped_names_it_and_not_the_rank_that_gave_its_part() {
    check_absent(
        3,
        "skipped-reduce",
        &["reduce_into on MPI_COMM_WORLD (examples/src/bin/stuck.rs:",
          ", collective call 1 there, was entered by ranks 0, 1 but not by rank 2: rank 2 waits in receive from rank 0 (tag 21, examples/src/bin/stuck.rs:",
          "having entered 0 collective calls there"],
        &["may have passed it"],
    );
}

#[test]
fn a_broadcast_whose_root_skipped_it_names_the_root_and_where_it_is() {
    check(
        3,
        "skipped-broadcast",
        &["waits in broadcast_into with root 2 (examples/src/bin/stuck.rs:",
          "broadcast_into on MPI_COMM_WORLD (examples/src/bin/stuck.rs:",
          "was entered by ranks 0, 1 but not by rank 2: rank 2 waits in receive from rank 0 (tag 18, examples/src/bin/stuck.rs:"],
    );
}

#[test]
fn a_barrier_after_a_synchronous_send_is_reported_as_the_barrier() {
    for setup in setups() {
        let transport = setup.join(" ");
        let (report, _, code) = stuck(2, setup, "barrier-after-send");
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

/// Runs `stuck BUG` on 3 ranks over every setup: it finishes, and rsrun never calls it stuck.
fn finishes_unstuck(bug: &str) {
    for setup in setups() {
        let transport = setup.join(" ");
        let (report, _, code) = stuck(3, setup, bug);
        assert_eq!(code, Some(0), "{bug} over {transport}:\n{report}");
        assert!(
            !report.contains("is stuck"),
            "{bug} over {transport}:\n{report}"
        );
    }
}

#[test]
fn a_slow_job_is_not_stuck() {
    finishes_unstuck("slow");
}

/// Whether the ranks here get `Threading::Multiple`: mpirt built with the feature `threads`
/// (examples' feature of that name, which tools/test-all.sh's features build turns on), on the
/// native PML (the UCX PML's ranks get `Funneled` at most); the threaded tests say they skip
/// where not.
fn multiple_provided() -> bool {
    let why = if !cfg!(feature = "threads") {
        "mpirt is built without the feature `threads` (tools/test-all.sh runs the threaded \
         stall tests with --features threads)"
    } else if setups().iter().any(|setup| setup[0] == "--pml") {
        "the UCX PML provides Funneled at most"
    } else {
        return true;
    };
    println!("skipped: {why}, so the ranks cannot run threads that share the engine");
    false
}

/// Two threads a rank wait, one for a message no one sends, the other in a cycle with the other
/// rank's: the report names each thread's call and source line, and the cycle.
#[test]
fn threaded_ranks_that_are_stuck_name_every_thread_s_call() {
    if !multiple_provided() {
        return;
    }
    check(
        2,
        "threads-stuck",
        &[
            "receive from rank 1 (tag 41, examples/src/bin/stuck.rs:",
            "receive from rank 0 (tag 41, examples/src/bin/stuck.rs:",
            "receive from rank 1 (tag 42, examples/src/bin/stuck.rs:",
            "receive from rank 0 (tag 42, examples/src/bin/stuck.rs:",
            "[thread 'worker-1']",
            "[thread 'worker-2']",
            // The cycle, through both threads' waits of each rank.
            "deadlock: rank 0 waits in receive from rank 1 (tag 41, examples/src/bin/stuck.rs:",
            "[thread 'worker-1'] and in receive from rank 1 (tag 42, examples/src/bin/stuck.rs:",
        ],
    );
}

/// A rank one of whose threads waits while another computes (and will send) is not stuck.
#[test]
fn a_slow_threaded_job_is_not_stuck() {
    if !multiple_provided() {
        return;
    }
    finishes_unstuck("threads-slow");
}

/// A rank one of whose threads waits while another that has made no call yet computes (its
/// first call a send) is not stuck: the computing thread is not counted, yet runs.
#[test]
fn a_threaded_rank_whose_thread_computes_before_its_first_call_is_not_stuck() {
    if !multiple_provided() {
        return;
    }
    finishes_unstuck("threads-late");
}

/// `threads-late` whose computing thread ends without sending: running when its rank's waiting
/// thread first said it waits, it kept the rank from being told stalled then; the waiting
/// thread looks again, and the job is stuck.
#[test]
fn a_threaded_rank_whose_uncounted_thread_ends_without_sending_is_stuck() {
    if !multiple_provided() {
        return;
    }
    check(
        3,
        "threads-lost",
        &[
            "rank 0 on ",
            "waits in receive from rank 0 (tag 13, examples/src/bin/stuck.rs:",
            "[thread 'waiter']",
        ],
    );
}

#[test]
fn sigusr1_prints_the_report_and_the_job_goes_on() {
    let dir = std::env::temp_dir().join(format!("mpirt-stall-usr1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (report_file, go) = (dir.join("report.json"), dir.join("go"));
    // --verbose: rsrun's first line on stderr says it runs, past the start of `main`, where it
    // takes SIGUSR1 for itself (before that, the signal's default action would end it).
    let mut child = Command::new(bin("rsrun"))
        .args(["-n", "3", "--verbose"])
        .args(setups()[0])
        .arg("--stall-report-file")
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
            assert_valid_json(&json, "the SIGUSR1 report");
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

#[test]
fn a_stall_timeout_of_no_time_is_refused_by_rsrun_and_by_a_rank() {
    // rsrun's option, and MPIRT_STALL_TIMEOUT in rsrun's environment: refused before a rank
    // starts, naming the option or the variable.
    for (option, variable, named) in [
        (Some("0"), None, "--stall-timeout"),
        (None, Some("0"), "MPIRT_STALL_TIMEOUT"),
    ] {
        let mut command = Command::new(bin("rsrun"));
        command.args(["-n", "2"]);
        if let Some(secs) = option {
            command.args(["--stall-timeout", secs]);
        }
        if let Some(secs) = variable {
            command.env("MPIRT_STALL_TIMEOUT", secs);
        }
        command.arg(bin("stuck")).arg("slow");
        let out = output_within_a_minute(command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{named}: {stderr}");
        assert!(
            stderr.contains(named)
                && stderr.contains("expected a positive number of seconds, got '0'"),
            "{named}: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{named}: a rank ran: {:?}",
            out.stdout
        );
    }
    // A rank that no rsrun started refuses it at initialize, naming the variable.
    let mut command = Command::new(bin("stuck"));
    command.arg("slow").env("MPIRT_STALL_TIMEOUT", "0");
    let out = output_within_a_minute(command);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("MPIRT_STALL_TIMEOUT: expected a positive number of seconds, got '0'"),
        "{stderr}"
    );
}

/// Under `srun --mpi=pmi2` (no rsrun) each rank prints its own line on stderr once it has
/// waited MPIRT_STALL_TIMEOUT: a receive cycle over two nodes of the test Slurm, which the
/// test then ends. tools/test-all.sh's Slurm phase brings Slurm up and sets MPIRT_TEST_SLURM.
#[test]
fn under_srun_each_stalled_rank_says_what_it_waits_for_on_stderr() {
    if !slurm_up() {
        return;
    }
    // A name of its own, for scancel should srun outlive the SIGTERM.
    let job = format!("mpirt-stall-test-{}", std::process::id());
    let mut child = Command::new("srun")
        .args(["--mpi=pmi2", "-N", "2", "-n", "2", "-J", &job])
        .arg(bin("stuck"))
        .arg("receive-cycle")
        .env("MPIRT_STALL_TIMEOUT", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    let mut said = [None, None];
    let deadline = Instant::now() + Duration::from_secs(50);
    while said.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            break;
        };
        for (rank, slot) in said.iter_mut().enumerate() {
            if line.contains(&format!("mpirt: stalled: rank {rank} on ")) {
                *slot = Some(line.clone());
            }
        }
    }
    // srun passes SIGTERM to its tasks, which end; the step with them.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let ended = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > ended {
            let _ = child.kill();
            let _ = Command::new("scancel").args(["-n", &job]).status();
            let _ = child.wait();
            panic!("srun did not end within 20 s of SIGTERM: killed, job {job} cancelled");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (rank, line) in said.iter().enumerate() {
        let from = 1 - rank;
        let line = line
            .as_deref()
            .unwrap_or_else(|| panic!("rank {rank} said nothing: {said:?}"));
        assert!(
            line.contains(&format!(
                "waits in receive from rank {from} (tag 7, examples/src/bin/stuck.rs:"
            )) && line.contains("on MPI_COMM_WORLD"),
            "{line}"
        );
    }
}
