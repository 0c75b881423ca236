//! rsrun end to end with real processes: environment, output forwarding, stdin, failures,
//! signals, timeouts. Ranks are small shell scripts.

mod common;

use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{finish, pids_in, rsrun, run, scratch_dir, start, survivors};

fn sh(n: &str, script: &str) -> Vec<String> {
    ["-n", n, "sh", "-c", script]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn run_sh(extra: &[&str], n: &str, script: &str) -> common::Run {
    let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    args.extend(sh(n, script));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&mut rsrun(&args), b"")
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[test]
fn ranks_see_their_place_in_the_job() {
    let mut job_ids = HashSet::new();
    for n in [1u32, 2, 4, 8] {
        let r = run_sh(
            &[],
            &n.to_string(),
            "echo $MPIRT_RANK $MPIRT_SIZE $MPIRT_LOCAL_RANK $MPIRT_LOCAL_SIZE \
             $MPIRT_JOB_ID $MPIRT_KVS_ADDR $MPIRT_KVS_SECRET",
        );
        assert_eq!(r.code(), Some(0), "{}", r.stderr);
        let rows: Vec<Vec<&str>> = r.stdout.lines().map(|l| l.split(' ').collect()).collect();
        assert_eq!(rows.len(), n as usize, "{}", r.stdout);
        let mut ranks: Vec<u32> = rows.iter().map(|f| f[0].parse().unwrap()).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, (0..n).collect::<Vec<_>>());
        for f in &rows {
            assert_eq!(f.len(), 7, "{f:?}");
            assert_eq!(f[1], n.to_string());
            assert_eq!(f[2], f[0], "local rank equals rank on one host");
            assert_eq!(f[3], n.to_string());
            assert!(is_hex(f[4], 16), "job id {}", f[4]);
            assert_eq!(f[4], rows[0][4], "one job id per job");
            assert!(f[5].starts_with("127.0.0.1:"), "kvs addr {}", f[5]);
            assert!(is_hex(f[6], 32), "secret {}", f[6]);
        }
        job_ids.insert(rows[0][4].to_string());
    }
    assert_eq!(job_ids.len(), 4, "job ids are unique per job");
}

#[test]
fn tag_output_prefixes_every_line_with_the_rank() {
    let r = run_sh(
        &["--tag-output"],
        "2",
        "printf 'a\\nb\\nno-newline'; echo oops >&2",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(
        r.sorted_lines(),
        [
            "[0] a",
            "[0] b",
            "[0] no-newline",
            "[1] a",
            "[1] b",
            "[1] no-newline"
        ]
    );
    let mut errs: Vec<&str> = r.stderr.lines().collect();
    errs.sort_unstable();
    assert_eq!(errs, ["[0] oops", "[1] oops"]);
}

#[test]
fn lines_from_concurrent_ranks_are_never_split() {
    // awk writes in 4 KiB blocks, so lines straddle writes; 8 ranks write at once.
    let script = "awk -v r=$MPIRT_RANK 'BEGIN { for (i = 0; i < 2000; i++) \
                  printf \"rank %d line %d %0200d\\n\", r, i, i }'";
    let r = run_sh(&[], "8", script);
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let mut next = [0u32; 8];
    for line in r.stdout.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 5, "split or merged line: {line:.80}");
        let rank: usize = f[1].parse().unwrap();
        let i: u32 = f[3].parse().unwrap();
        assert_eq!(i, next[rank], "rank {rank}'s lines out of order");
        assert_eq!(f[4], format!("{i:0200}"));
        next[rank] += 1;
    }
    assert_eq!(next, [2000; 8]);
}

#[test]
fn exported_and_set_variables_reach_every_rank() {
    let mut cmd = rsrun(&[
        "-x",
        "RSRUN_TEST_FROM_PARENT",
        "-x",
        "RSRUN_TEST_ASSIGNED=x1",
        "--env",
        "RSRUN_TEST_ENV=a=b",
        "--transport",
        "tcp",
        "--eager-limit",
        "4096",
        "--verbose",
        "-n",
        "2",
        "sh",
        "-c",
        "echo $RSRUN_TEST_FROM_PARENT $RSRUN_TEST_ASSIGNED $RSRUN_TEST_ENV \
         $MPIRT_TRANSPORT $MPIRT_EAGER_LIMIT $MPIRT_VERBOSE",
    ]);
    cmd.env("RSRUN_TEST_FROM_PARENT", "parent value");
    let r = run(&mut cmd, b"");
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let line = "parent value x1 a=b tcp 4096 1";
    assert_eq!(r.sorted_lines(), [line, line]);
    assert!(
        r.stderr.contains("rsrun: job "),
        "verbose says what it does"
    );
}

#[test]
fn stdin_goes_to_rank_zero_only() {
    let mut cmd = rsrun(&[
        "--tag-output",
        "-n",
        "3",
        "sh",
        "-c",
        "read line; echo \"got:$line\"",
    ]);
    let r = run(&mut cmd, b"hello\n");
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(r.sorted_lines(), ["[0] got:hello", "[1] got:", "[2] got:"]);
}

#[test]
fn a_background_rsrun_is_not_stopped_by_its_terminal() {
    // `rsrun ... > out &` in an interactive shell: rsrun must not read the terminal, which
    // the kernel answers with SIGTTIN ("Stopped (tty input)"). Each rank shows its signal
    // masks: SIGTTIN must be neither blocked nor ignored in a rank.
    let dir = scratch_dir("background");
    let out = dir.join("out");
    let script = "echo rank $MPIRT_RANK done; grep -E '^Sig(Blk|Ign)' /proc/self/status";
    let r = common::in_terminal(&common::background_rsrun(
        &["-n", "2", "sh", "-c", script],
        &out,
    ));
    let said = fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(r.stdout, "wait 0\n", "{}\n{said}", r.stderr);
    let mut done: Vec<&str> = said.lines().filter(|l| l.starts_with("rank")).collect();
    done.sort_unstable();
    assert_eq!(done, ["rank 0 done", "rank 1 done"], "{said}");
    let masks: Vec<&str> = said.lines().filter(|l| l.starts_with("Sig")).collect();
    assert_eq!(masks.len(), 4, "{said}");
    for line in masks {
        assert!(!common::mask_has(line, libc::SIGTTIN), "{line}");
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn arguments_after_the_program_belong_to_it() {
    let r = run(
        &mut rsrun(&[
            "-n",
            "1",
            "sh",
            "-c",
            "echo \"$@\"",
            "sh",
            "--foo",
            "-n",
            "5",
        ]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "--foo -n 5\n");
}

#[test]
fn a_failing_rank_ends_the_job_and_leaves_no_process_behind() {
    let dir = scratch_dir("failing-rank");
    let d = dir.display();
    // Every rank records its pid and its background child's; rank 3 fails once all have.
    let script = format!(
        "sleep 100 & echo $! > {d}/child.$MPIRT_RANK; echo $$ > {d}/pid.$MPIRT_RANK; \
         if [ $MPIRT_RANK = 3 ]; then \
           while [ $(ls {d} | wc -l) -lt 8 ]; do sleep 0.02; done; exit 3; \
         fi; wait"
    );
    let r = run_sh(&[], "4", &script);
    assert_eq!(r.code(), Some(3), "exit code is the rank's status");
    assert!(
        r.stderr.contains("rsrun: rank 3 (pid ") && r.stderr.contains("exited with status 3"),
        "{}",
        r.stderr
    );
    let pids = pids_in(&dir);
    assert_eq!(pids.len(), 8);
    let left = survivors(&pids);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_rank_killed_by_a_signal_is_reported_within_two_seconds() {
    let r = run_sh(
        &[],
        "2",
        "if [ $MPIRT_RANK = 1 ]; then kill -9 $$; fi; sleep 100",
    );
    assert_eq!(r.code(), Some(128 + 9));
    assert!(
        r.stderr.contains("rsrun: rank 1 (pid ")
            && r.stderr.contains("killed by signal 9 (SIGKILL)"),
        "{}",
        r.stderr
    );
    assert!(r.elapsed < Duration::from_secs(2), "took {:?}", r.elapsed);
}

#[test]
fn ranks_ignoring_sigterm_are_killed_after_the_grace_period() {
    let dir = scratch_dir("ignoring-sigterm");
    let d = dir.display();
    // Rank 0 fails only once the others have said they ignore SIGTERM.
    let script = format!(
        "trap '' TERM; if [ $MPIRT_RANK = 0 ]; then \
           while [ $(ls {d} | wc -l) -lt 2 ]; do sleep 0.02; done; exit 1; \
         fi; echo > {d}/ignoring.$MPIRT_RANK; sleep 100"
    );
    let r = run_sh(&["--grace", "0.5"], "3", &script);
    assert_eq!(r.code(), Some(1));
    assert!(
        r.elapsed >= Duration::from_millis(500) && r.elapsed < Duration::from_secs(2),
        "took {:?}",
        r.elapsed
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigusr1_in_the_grace_period_prints_the_report_and_kills_nothing() {
    let dir = scratch_dir("usr1-in-grace");
    let d = dir.display();
    // Rank 0 fails once rank 1 is ready; rank 1 takes its SIGTERM slowly, exiting on its own
    // once told to go.
    let script = format!(
        "if [ $MPIRT_RANK = 0 ]; then \
           while [ ! -e {d}/ready ]; do sleep 0.02; done; exit 1; \
         fi; \
         trap 'echo > {d}/term; while [ ! -e {d}/go ]; do sleep 0.02; done; \
               echo > {d}/done; exit 0' TERM; \
         echo > {d}/ready; while true; do sleep 0.05; done"
    );
    let mut cmd = rsrun(&["-n", "2", "--grace", "50", "sh", "-c", &script]);
    let (mut child, started) = start(&mut cmd, b"");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    while !dir.join("term").exists() {
        assert!(started.elapsed() < common::LIMIT, "rank 1 got no SIGTERM");
        thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is our live child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) }, 0);
    let mut said = Vec::new();
    while !said
        .iter()
        .any(|l: &String| l.contains("what each rank waits for (SIGUSR1)"))
    {
        match rx.recv_timeout(common::LIMIT) {
            Ok(line) => said.push(line),
            Err(_) => panic!(
                "no report on SIGUSR1 in the grace period:\n{}",
                said.join("\n")
            ),
        }
    }
    fs::write(dir.join("go"), b"").unwrap();
    let r = finish(child, started);
    assert_eq!(r.code(), Some(1), "{}", said.join("\n"));
    assert!(
        dir.join("done").exists(),
        "rank 1 was killed before it finished its SIGTERM handler"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigint_to_rsrun_reaches_every_rank() {
    let dir = scratch_dir("sigint");
    let d = dir.display();
    let script = format!(
        "trap 'echo > {d}/got-int.$MPIRT_RANK; exit 0' INT; echo ready; \
         while true; do sleep 0.05; done"
    );
    let mut cmd = rsrun(&["-n", "2", "sh", "-c", &script]);
    let (mut child, started) = start(&mut cmd, b"");
    // Signal only once both ranks have set their trap and said so.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    for _ in 0..2 {
        let line = rx.recv_timeout(common::LIMIT).expect("ranks said ready");
        assert_eq!(line, "ready");
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is our live child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let r = finish(child, started);
    assert_eq!(r.code(), Some(130), "{}", r.stderr);
    assert!(r.stderr.contains("SIGINT"), "{}", r.stderr);
    for rank in 0..2 {
        assert!(
            dir.join(format!("got-int.{rank}")).exists(),
            "rank {rank} saw SIGINT"
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn timeout_ends_the_job() {
    let r = run(
        &mut rsrun(&["--timeout", "0.3", "-n", "2", "sleep", "100"]),
        b"",
    );
    assert_eq!(r.code(), Some(124));
    assert!(r.stderr.contains("timed out"), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(2), "took {:?}", r.elapsed);
}

#[test]
fn a_missing_program_is_named_and_fails_fast() {
    let r = run(
        &mut rsrun(&["-n", "4", "/nonexistent/rsrun-test-program"]),
        b"",
    );
    assert_eq!(r.code(), Some(127));
    assert!(
        r.stderr
            .contains("cannot start '/nonexistent/rsrun-test-program'"),
        "{}",
        r.stderr
    );
    assert!(r.elapsed < Duration::from_secs(1), "took {:?}", r.elapsed);
}

#[test]
fn a_crashed_job_leaves_nothing_in_dev_shm() {
    let r = run_sh(
        &[],
        "2",
        "echo x > /dev/shm/mpirt-$MPIRT_JOB_ID-seg.$MPIRT_RANK; echo $MPIRT_JOB_ID; \
         kill -9 $$",
    );
    assert_eq!(r.code(), Some(137), "{}", r.stderr);
    let job_id = r.stdout.lines().next().expect("rank printed the job id");
    let left: Vec<String> = fs::read_dir("/dev/shm")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(job_id))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

/// The CPUs each rank of a `--bind-to core` job of `ranks` ranks may run on, each with the
/// CPU its MPIRT_BOUND_CPU names (`none` when unset).
fn allowed_cpus_of_ranks(ranks: usize) -> Vec<(String, String)> {
    let r = run_sh(
        &["--bind-to", "core"],
        &ranks.to_string(),
        "echo $(grep Cpus_allowed_list /proc/self/status | cut -f2) ${MPIRT_BOUND_CPU:-none}",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let lists: Vec<(String, String)> = r
        .stdout
        .lines()
        .map(|line| {
            let (cpus, marker) = line.split_once(' ').unwrap();
            (cpus.to_string(), marker.to_string())
        })
        .collect();
    assert_eq!(lists.len(), ranks);
    lists
}

fn cpu_count() -> usize {
    thread::available_parallelism().unwrap().get()
}

#[test]
fn bind_to_core_pins_each_rank_to_one_cpu() {
    for (cpus, marker) in allowed_cpus_of_ranks(cpu_count()) {
        assert!(cpus.parse::<usize>().is_ok(), "pinned to one cpu: {cpus}");
        assert_eq!(marker, cpus, "a bound rank is told its CPU");
    }
}

/// As with Open MPI, ranks that outnumber the CPUs are not bound: they keep rsrun's CPUs.
#[test]
fn bind_to_core_leaves_ranks_that_outnumber_the_cpus_unbound() {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let own = status
        .lines()
        .find(|line| line.starts_with("Cpus_allowed_list"))
        .and_then(|line| line.split_whitespace().last())
        .unwrap()
        .to_string();
    for (cpus, marker) in allowed_cpus_of_ranks(cpu_count() + 1) {
        assert_eq!(cpus, own, "an oversubscribed rank is left unbound");
        assert_eq!(marker, "none", "an unbound rank is not told it is bound");
    }
}

#[test]
fn ranks_die_with_a_killed_rsrun() {
    let dir = scratch_dir("killed-rsrun");
    let d = dir.display();
    let script = format!("echo $$ > {d}/pid.$MPIRT_RANK; exec sleep 100");
    let (mut child, _) = start(
        rsrun(&["-n", "3", "sh", "-c", &script]).current_dir(&dir),
        b"",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs::read_dir(&dir).unwrap().count() < 3 {
        assert!(Instant::now() < deadline, "ranks did not start");
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(50));
    let pids = pids_in(&dir);
    // SIGKILL: rsrun gets no chance to clean up; the kernel must end the ranks.
    child.kill().unwrap();
    child.wait().unwrap();
    let left = survivors(&pids);
    assert!(left.is_empty(), "ranks outlived rsrun: {left:?}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_option_is_an_error_naming_it_and_nothing_starts() {
    let dir = scratch_dir("unknown-option");
    let marker = dir.join("started");
    let script = format!("touch {}", marker.display());
    let r = run(
        &mut rsrun(&["-n", "2", "--no-such-option", "sh", "-c", &script]),
        b"",
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("'--no-such-option'") && !r.stderr.contains("cannot start"),
        "{}",
        r.stderr
    );
    assert!(!marker.exists(), "a rank started");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mpirun_single_dash_options_work_and_unknown_ones_are_named() {
    let dir = scratch_dir("single-dash");
    let hostfile = dir.join("nodes");
    fs::write(&hostfile, "localhost slots=2\n").unwrap();
    let script = "echo rank $MPIRT_RANK of $MPIRT_SIZE";
    let h = hostfile.to_str().unwrap();
    for args in [
        &["-np", "2", "-hostfile", h][..],
        &["-np", "2", "-host", "localhost:2"][..],
    ] {
        let mut all = args.to_vec();
        all.extend(["sh", "-c", script]);
        let r = run(&mut rsrun(&all), b"");
        assert_eq!(r.code(), Some(0), "{args:?}: {}", r.stderr);
        assert_eq!(
            r.sorted_lines(),
            ["rank 0 of 2", "rank 1 of 2"],
            "{args:?}: {}",
            r.stderr
        );
    }
    let marker = dir.join("started");
    let touch = format!("touch {}", marker.display());
    let r = run(
        &mut rsrun(&["-np", "2", "-hostfiel", h, "sh", "-c", &touch]),
        b"",
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("unknown option '-hostfiel'") && !r.stdout.contains("Usage"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(!marker.exists(), "a rank started");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn version_is_printed() {
    let r = run(&mut rsrun(&["--version"]), b"");
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, format!("rsrun {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn output_filename_writes_each_ranks_streams_to_files() {
    let dir = scratch_dir("output-files");
    let script = "echo out $MPIRT_RANK; echo err $MPIRT_RANK >&2; printf 'last'";
    // As Open MPI: to the files and rsrun's streams, or with `nocopy` to the files alone;
    // `nojobid` leaves out the job's level.
    for (qualifiers, level, copied) in [("", "1/", true), (":nocopy,nojobid", "", false)] {
        let out = dir.join(format!("out{}", qualifiers.len()));
        let arg = format!("{}{qualifiers}", out.display());
        let r = run_sh(&["--output-filename", &arg], "2", script);
        assert_eq!(r.code(), Some(0), "{}", r.stderr);
        if copied {
            // Untagged, a last line without its newline runs into the next rank's line.
            assert_eq!(r.stdout.matches("last").count(), 2, "{}", r.stdout);
            assert!(r.stdout.contains("out 0\n") && r.stdout.contains("out 1\n"));
            let mut err: Vec<&str> = r.stderr.lines().collect();
            err.sort_unstable();
            assert_eq!(err, ["err 0", "err 1"], "{arg}");
        } else {
            assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""), "{arg}");
        }
        for rank in 0..2 {
            let read = |name: &str| {
                fs::read_to_string(out.join(format!("{level}rank.{rank}/{name}"))).unwrap()
            };
            assert_eq!(read("stdout"), format!("out {rank}\nlast"), "{arg}");
            assert_eq!(read("stderr"), format!("err {rank}\n"), "{arg}");
        }
    }
    // A directory that cannot be made is an error before anything starts.
    let blocked = dir.join("file");
    fs::write(&blocked, "").unwrap();
    let r = run_sh(
        &["--output-filename", blocked.to_str().unwrap()],
        "1",
        "echo never",
    );
    assert_eq!(r.code(), Some(1));
    assert!(
        r.stderr.contains("cannot create the output files") && r.stdout.is_empty(),
        "{}",
        r.stderr
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn output_files_for_many_ranks_fit_a_low_soft_open_file_limit() {
    // 40 ranks need 80 output files and about as many pipes in rsrun: more than a soft limit
    // of 64, which rsrun raises to the hard limit as mpirun does.
    let dir = scratch_dir("output-files-limit");
    let out = dir.join("out");
    let spec = format!("{}:nocopy", out.display());
    let mut cmd = rsrun(&[
        "-n",
        "40",
        "--output-filename",
        &spec,
        "sh",
        "-c",
        "echo out $MPIRT_RANK",
    ]);
    // SAFETY: runs in the child between fork and exec; getrlimit and setrlimit are system
    // calls on a local struct.
    unsafe {
        cmd.pre_exec(|| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit.rlim_cur = 64;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = run(&mut cmd, b"");
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    for rank in 0..40 {
        let file = out.join(format!("1/rank.{rank:02}/stdout"));
        assert_eq!(fs::read_to_string(&file).unwrap(), format!("out {rank}\n"));
    }
    fs::remove_dir_all(&dir).unwrap();
}

/// `[2026-11-25T18:04:05.123456Z] `: the length and the fixed characters.
fn starts_with_timestamp(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 30
        && b[0] == b'['
        && b[5] == b'-'
        && b[11] == b'T'
        && b[20] == b'.'
        && &line[27..30] == "Z] "
        && line[1..5].parse::<u32>().is_ok_and(|year| year >= 2024)
}

#[test]
fn timestamp_output_prefixes_every_line_with_the_time() {
    let r = run_sh(
        &["--timestamp-output", "--tag-output"],
        "2",
        "echo a; echo b >&2",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    for line in r.stdout.lines().chain(r.stderr.lines()) {
        assert!(starts_with_timestamp(line), "{line}");
    }
    let mut rest: Vec<&str> = r.stdout.lines().map(|l| &l[30..]).collect();
    rest.sort_unstable();
    assert_eq!(rest, ["[0] a", "[1] a"]);
}

#[test]
fn report_bindings_says_which_cpus_each_rank_has() {
    let n = cpu_count();
    let r = run_sh(
        &["--bind-to", "core", "--report-bindings"],
        &n.to_string(),
        "echo $MPIRT_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let host = common::hostname();
    for line in r.stdout.lines() {
        let (rank, cpu) = line.split_once(' ').unwrap();
        let said = r
            .stderr
            .lines()
            .find(|l| l.contains(&format!("] MCW rank {rank} ")))
            .unwrap_or_else(|| panic!("no report for rank {rank}: {}", r.stderr));
        assert!(said.starts_with(&format!("[{host}:")), "{said}");
        assert!(said.contains(&format!(" bound to CPU {cpu}: [")), "{said}");
        let map = said.rsplit_once('[').unwrap().1.trim_end_matches(']');
        let marks: Vec<&str> = map.split('/').collect();
        assert_eq!(marks[cpu.parse::<usize>().unwrap()], "B", "{said}");
        assert_eq!(marks.iter().filter(|&&m| m == "B").count(), 1, "{said}");
    }
    assert_eq!(r.stdout.lines().count(), n);
    let r = run_sh(&["--report-bindings"], "1", "true");
    assert!(
        r.stderr
            .contains("MCW rank 0 is not bound (or bound to all available processors)"),
        "{}",
        r.stderr
    );
}

#[test]
fn ranks_get_the_variables_open_mpi_and_mpich_scripts_read() {
    let r = run_sh(
        &[],
        "3",
        "echo $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_SIZE $OMPI_COMM_WORLD_LOCAL_RANK \
         $OMPI_COMM_WORLD_LOCAL_SIZE $OMPI_COMM_WORLD_NODE_RANK $MPI_LOCALRANKID \
         $MPI_LOCALNRANKS ${PMI_RANK-unset} ${PMI_SIZE-unset}",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let expected: Vec<String> = (0..3)
        .map(|i| format!("{i} 3 {i} 3 {i} {i} 3 unset unset"))
        .collect();
    assert_eq!(r.sorted_lines(), expected);
    // mpirt's own programs see them too and still wire up through rsrun, not as started by
    // another launcher: every example run under rsrun (examples/tests) shows that.
}

#[test]
fn wdir_sets_where_ranks_run_and_relative_programs_are_found_there() {
    let dir = common::job_dir("wdir");
    let d = dir.to_str().unwrap();
    let host = common::hostname();
    for flag in ["--wdir", "-wdir"] {
        // rsrun runs in /, the ranks in the directory.
        let r = run(
            rsrun(&[flag, d, "-n", "2", "./job.sh"]).current_dir("/"),
            b"",
        );
        assert_eq!(r.code(), Some(0), "{flag}: {}", r.stderr);
        assert_eq!(
            r.sorted_lines(),
            [
                format!("0 {host} {d} input-data"),
                format!("1 {host} {d} input-data")
            ]
        );
    }
    // Without --wdir: rsrun's own directory.
    let r = run(rsrun(&["-n", "1", "./job.sh"]).current_dir(&dir), b"");
    assert_eq!(
        r.stdout,
        format!("0 {host} {d} input-data\n"),
        "{}",
        r.stderr
    );
    // A --wdir that does not exist is an error naming it, before anything starts.
    let missing = dir.join("missing");
    let m = missing.to_str().unwrap();
    let r = run(&mut rsrun(&["--wdir", m, "-n", "1", "./job.sh"]), b"");
    assert_eq!(r.code(), Some(1));
    assert!(
        r.stderr
            .contains(&format!("--wdir {m}: No such file or directory")),
        "{}",
        r.stderr
    );
    // A relative program missing there names the path tried and the directory.
    let r = run(
        &mut rsrun(&["--wdir", d, "-n", "1", "./no-such-script"]),
        b"",
    );
    assert_eq!(r.code(), Some(127));
    assert!(
        r.stderr.contains(&format!(
            "cannot start './no-such-script' on {host}: No such file or directory (os error 2) \
             (tried {d}/no-such-script, in directory {d})"
        )),
        "{}",
        r.stderr
    );
    // A bare name is looked up in PATH, and the error says which.
    let r = run(
        rsrun(&["-n", "1", "rsrun-no-such-program"]).env("PATH", "/nonexistent-bin"),
        b"",
    );
    assert_eq!(r.code(), Some(127));
    assert!(
        r.stderr.contains(&format!(
            "cannot start 'rsrun-no-such-program' on {host}: not found in PATH=/nonexistent-bin"
        )),
        "{}",
        r.stderr
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// Every rank starts with IPATH_NO_BACKTRACE=1, whatever its transport: libinfinipath, which
/// loads with Debian's libfabric, reads it in its constructor before `main` (else it claims
/// SIGTERM and exits from inside its handler beside the rank's threads: pml's `ofi::signals`),
/// so only the launcher can set it in time. A value the rank's environment has stays.
#[test]
fn ranks_start_with_libinfinipath_kept_off_their_signals_unless_the_user_chose() {
    let script = ["sh", "-c", "printenv IPATH_NO_BACKTRACE"];
    for transport in [None, Some("tcp"), Some("ofi")] {
        let mut args = vec!["-n", "2"];
        if let Some(t) = transport {
            args.extend(["--transport", t]);
        }
        args.extend(script);
        let r = run(rsrun(&args).env_remove("IPATH_NO_BACKTRACE"), b"");
        assert_eq!(r.code(), Some(0), "{transport:?}: {}", r.stderr);
        assert_eq!(r.sorted_lines(), ["1", "1"], "{transport:?}");
    }
    let mut args = vec!["-n", "1"];
    args.extend(script);
    let r = run(rsrun(&args).env("IPATH_NO_BACKTRACE", "0"), b"");
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(r.sorted_lines(), ["0"]);
}

#[test]
fn ranks_start_in_the_logical_working_directory_and_pwd_names_theirs() {
    // rsrun runs in `link`, a symlink to `real`, as a shell that `cd`ed through it would: PWD
    // is the logical path. That is the path ranks must get (on other hosts it may be the only
    // one), and each rank's PWD must name its own directory, --wdir included.
    let dir = common::job_dir("logical-cwd");
    let real = dir.join("real");
    fs::create_dir_all(real.join("sub")).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let l = link.to_str().unwrap();
    let script = "printenv PWD";
    for (wdir, expected) in [
        (None, l.to_string()),
        (Some("sub"), format!("{l}/sub")),
        (
            Some(dir.to_str().unwrap()),
            dir.to_str().unwrap().to_string(),
        ),
    ] {
        let mut args = vec!["-n", "2"];
        if let Some(w) = wdir {
            args.extend(["--wdir", w]);
        }
        args.extend(["sh", "-c", script]);
        let r = run(rsrun(&args).current_dir(&link).env("PWD", &link), b"");
        assert_eq!(r.code(), Some(0), "{wdir:?}: {}", r.stderr);
        assert_eq!(r.sorted_lines(), [&expected, &expected], "{wdir:?}");
    }
    // A program that is not there is reported by the logical path too.
    let r = run(
        rsrun(&["-n", "1", "./no-such-script"])
            .current_dir(&link)
            .env("PWD", &link),
        b"",
    );
    assert_eq!(r.code(), Some(127));
    assert!(
        r.stderr
            .contains(&format!("(tried {l}/no-such-script, in directory {l})")),
        "{}",
        r.stderr
    );
    // A PWD that names another directory is not believed.
    let r = run(
        rsrun(&["-n", "1", "sh", "-c", script])
            .current_dir(&real)
            .env("PWD", &dir),
        b"",
    );
    assert_eq!(r.stdout, format!("{}\n", real.display()), "{}", r.stderr);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn npernode_beyond_one_host_is_an_error_before_anything_starts() {
    let r = run_sh(&["--npernode", "2"], "3", "echo started");
    assert_eq!(r.code(), Some(1));
    assert!(
        r.stderr.contains("3 ranks requested, but 2 per node") && r.stdout.is_empty(),
        "{}",
        r.stderr
    );
}

/// Runs `rsrun --rankfile FILE ARGS... sh -c SCRIPT` with `text` as the rankfile.
fn with_rankfile(text: &str, args: &[&str], script: &str) -> common::Run {
    static JOBS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let job = JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch_dir(&format!("rankfile-{job}"));
    let file = dir.join("rankfile");
    fs::write(&file, text).unwrap();
    let mut all = vec!["--rankfile", file.to_str().unwrap()];
    all.extend(args);
    all.extend(["sh", "-c", script]);
    let r = run(&mut rsrun(&all), b"");
    fs::remove_dir_all(&dir).unwrap();
    r
}

#[test]
fn a_rankfile_places_and_binds_each_rank() {
    let last = cpu_count() - 1;
    let text = format!("rank 1=localhost slot=0\nrank 0=localhost slot={last}\n");
    let r = with_rankfile(
        &text,
        &["--report-bindings"],
        "echo $MPIRT_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2) \
         ${MPIRT_BOUND_CPU:-none}",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(
        r.sorted_lines(),
        [format!("0 {last} {last}"), "1 0 0".to_string()]
    );
    assert!(
        r.stderr
            .contains(&format!("MCW rank 0 bound to CPU {last}: ")),
        "{}",
        r.stderr
    );
}

#[test]
fn impossible_rankfiles_are_errors_before_anything_starts() {
    let cpus = cpu_count();
    for (text, args, said) in [
        (
            "rank 0=localhost slot=0\n".to_string(),
            &["-n", "2"][..],
            "the job has 2 ranks, but rank 1 is not in the rankfile".to_string(),
        ),
        (
            "rank 0=localhost slot=0\nrank 1=elsewhere slot=0\n".to_string(),
            &["-H", "localhost:2"][..],
            "line 2: host 'elsewhere' is not among the job's hosts (localhost)".to_string(),
        ),
        (
            format!("rank 0=localhost slot={cpus}\n"),
            &[][..],
            format!("the rankfile binds rank 0 to CPU {cpus}, but rsrun may use only CPUs "),
        ),
        (
            "rank 0=localhost slot=0:1\n".to_string(),
            &[][..],
            "socket:core".to_string(),
        ),
    ] {
        let r = with_rankfile(&text, args, "echo started");
        assert_eq!(r.code(), Some(1), "{text}: {}", r.stderr);
        assert!(r.stderr.contains(&said), "{text}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{text}: a rank started");
    }
}
