//! rsrun across real ssh hosts: the test hosts of `ssh-hosts` (network namespaces host1..host4,
//! each with its own sshd, sharing this filesystem), brought up once for this binary.
//!
//! Everything runs in the one test function `across_ssh_hosts`, case after case, because the
//! hosts are shared machine-wide state. `rank_mode` is the rank side of the key-value case (the
//! self-re-exec trick of tests/kvs.rs); run normally, it does nothing.

mod common;

use std::env;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use launcher::Bootstrap;

use common::{
    assert_receive_cycle_over_three_hosts, example, hostname, job_dir, rsrun, run,
    testhosts_ssh_config,
};

const RANK_MODE: &str = "LAUNCHER_TEST_RANK_MODE";

#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    assert_eq!(mode, "exchange");
    let mut b = Bootstrap::from_env().unwrap();
    let (rank, size) = (b.rank(), b.size());
    b.put(&format!("host.{rank}"), hostname().as_bytes())
        .unwrap();
    b.fence().unwrap();
    let hosts: Vec<String> = (0..size)
        .map(|peer| String::from_utf8(b.get(peer, &format!("host.{peer}")).unwrap()).unwrap())
        .collect();
    b.finalize().unwrap();
    println!("rank {rank} saw {}", hosts.join(","));
}

/// The test hosts, up for as long as this lives.
struct Hosts {
    script: PathBuf,
    /// Whether this test brought them up, and so takes them down.
    owned: bool,
    ssh_config: PathBuf,
}

impl Hosts {
    /// Brings up 4 hosts, or says why it cannot and returns None.
    fn up() -> Option<Hosts> {
        // The team's shared/ folder sits beside the repository, in a checkout as in CI.
        let script = env::var_os("MPIRT_SSH_HOSTS").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/testhosts/ssh-hosts"),
            PathBuf::from,
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("skipped: ssh-hosts needs root for its network namespaces");
            return None;
        }
        if !script.exists() {
            // Named explicitly (tools/test-all.sh does): a missing script is a broken setup.
            assert!(
                env::var_os("MPIRT_SSH_HOSTS").is_none(),
                "MPIRT_SSH_HOSTS={} does not exist",
                script.display()
            );
            println!(
                "skipped: {} not found (set MPIRT_SSH_HOSTS)",
                script.display()
            );
            return None;
        }
        // Hosts someone else brought up are used as they are and left up, unless one of them
        // does not answer (say an sshd gone with a run that crashed): then they are made anew.
        let mut owned = hosts_up(&script);
        if let Some(host) = unanswering_host() {
            println!("sshd on test host {host} does not answer: making the hosts anew");
            let _ = Command::new(&script).arg("down").status();
            owned = hosts_up(&script);
            assert!(owned, "ssh-hosts up 4 after down found them still up");
            if let Some(host) = unanswering_host() {
                panic!("ssh-hosts up 4 made the hosts anew, but sshd on {host} does not answer");
            }
        }
        Some(Hosts {
            script,
            owned,
            ssh_config: testhosts_ssh_config(),
        })
    }

    fn ssh_args(&self) -> String {
        format!("-F {}", self.ssh_config.display())
    }

    /// rsrun with this setup's ssh config and `args`.
    fn rsrun(&self, args: &[&str]) -> Command {
        let ssh_args = self.ssh_args();
        let mut all = vec!["--ssh-args", &ssh_args];
        all.extend(args);
        rsrun(&all)
    }
}

/// `ssh-hosts up 4`: true when this brought the hosts up, false when they already were.
fn hosts_up(script: &Path) -> bool {
    let out = Command::new(script).args(["up", "4"]).output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() || said.contains("already up (mode=netns n=4"),
        "ssh-hosts up 4 failed: {said}"
    );
    out.status.success()
}

/// The first of host1..host4 whose sshd does not accept a connection within 5 s.
fn unanswering_host() -> Option<String> {
    (1..=4).map(|k| format!("host{k}")).find(|host| {
        let answers = (host.as_str(), 22)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .is_some_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok());
        !answers
    })
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = Command::new(&self.script).arg("down").status();
    }
}

const EIGHT: &str = "host1:2,host2:2,host3:2,host4:2";
const WHO: &str = "echo $MPIRT_RANK $(hostname) $MPIRT_LOCAL_RANK/$MPIRT_LOCAL_SIZE";

/// One sub-case, run against the hosts.
type Case = fn(&Hosts);

#[test]
fn across_ssh_hosts() {
    let Some(hosts) = Hosts::up() else { return };
    let cases: [(&str, Case); 28] = [
        ("map by slot", map_by_slot),
        ("map by node from a hostfile", map_by_node_from_hostfile),
        ("tagged output", tagged_output),
        ("key-value service across hosts", kvs_across_hosts),
        ("ring across hosts", ring_across_hosts),
        ("all-to-all across hosts", all_to_all_across_hosts),
        (
            "1 GiB message across hosts (256 MiB debug)",
            gigabyte_across_hosts,
        ),
        (
            "shared memory refused across hosts",
            shm_refused_across_hosts,
        ),
        ("remote rank killed", remote_rank_killed),
        ("rsrun killed", rsrun_killed),
        (
            "a dead rank's files removed by its host's agent",
            dead_rank_files_removed_by_its_agent,
        ),
        ("unreachable host", unreachable_host),
        ("unknown host", unknown_host),
        ("authentication failure", auth_failure),
        (
            "remote rank killed during a TCP exchange",
            killed_during_tcp_exchange,
        ),
        (
            "relative program and input from a shared directory",
            relative_paths_from_a_shared_directory,
        ),
        (
            "working directory the hosts lack",
            working_directory_the_hosts_lack,
        ),
        ("--wdir", wdir_on_every_host),
        ("stdin to a remote rank 0", stdin_to_a_remote_rank_zero),
        ("rsrun in a terminal's background", background_in_a_terminal),
        ("per-rank output files", per_rank_output_files),
        ("--ssh-args with a quoted argument", ssh_args_with_quotes),
        ("--rankfile placement", rankfile_placement),
        ("--npernode placement", npernode_placement),
        ("impossible placements", impossible_placements),
        ("a stranger to a TCP job", stranger_refused),
        ("a flood of strangers against a TCP job", stranger_flood),
        ("a stuck job across hosts", stuck_across_hosts),
    ];
    for (name, case) in cases {
        let started = Instant::now();
        case(&hosts);
        println!("ok: {name} ({:.2} s)", started.elapsed().as_secs_f64());
    }
}

fn shm_refused_across_hosts(hosts: &Hosts) {
    let r = run(
        &mut hosts.rsrun(&[
            "-H",
            "host1:1,host2:1",
            "--transport",
            "shm",
            &example("ring"),
        ]),
        b"",
    );
    assert_ne!(r.code(), Some(0), "{}", r.stdout);
    // Either rank may be the first to see the other's host, so either one may be named.
    let named = |rank: &str, host: &str| {
        r.stderr.contains(&format!(
            "MPIRT_TRANSPORT=shm, but rank {rank} runs on host '{host}'"
        ))
    };
    assert!(
        (named("1", "host2") || named("0", "host1"))
            && r.stderr
                .contains("shared memory reaches only ranks on one host"),
        "{}",
        r.stderr
    );
}

fn map_by_slot(hosts: &Hosts) {
    let r = run(&mut hosts.rsrun(&["-H", EIGHT, "sh", "-c", WHO]), b"");
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let expected: Vec<String> = (0..8)
        .map(|rank| format!("{rank} host{} {}/2", rank / 2 + 1, rank % 2))
        .collect();
    assert_eq!(r.sorted_lines(), expected);
}

fn map_by_node_from_hostfile(hosts: &Hosts) {
    let dir = common::scratch_dir("hostfile");
    let file = dir.join("hosts");
    let text =
        "# Open MPI and MPICH lines mixed\nhost1 slots=2\nhost2:2\n\nhost3 slots=2 \nhost4:2\n";
    std::fs::write(&file, text).unwrap();
    let file = file.to_str().unwrap();
    let r = run(
        &mut hosts.rsrun(&["--hostfile", file, "--map-by", "node", "sh", "-c", WHO]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let expected: Vec<String> = (0..8)
        .map(|rank| format!("{rank} host{} {}/2", rank % 4 + 1, rank / 4))
        .collect();
    assert_eq!(r.sorted_lines(), expected);
    // -n below the slot count uses the first slots.
    let r = run(
        &mut hosts.rsrun(&["--hostfile", file, "-n", "3", "sh", "-c", WHO]),
        b"",
    );
    assert_eq!(
        r.sorted_lines(),
        ["0 host1 0/2", "1 host1 1/2", "2 host2 0/1"]
    );
}

fn tagged_output(hosts: &Hosts) {
    let script = "echo out $(hostname); echo err >&2; printf 'no newline'";
    let r = run(
        &mut hosts.rsrun(&["-H", EIGHT, "--tag-output", "sh", "-c", script]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let mut expected: Vec<String> = (0..8)
        .flat_map(|rank| {
            [
                format!("[{rank}] out host{}", rank / 2 + 1),
                format!("[{rank}] no newline"),
            ]
        })
        .collect();
    expected.sort();
    assert_eq!(r.sorted_lines(), expected);
    assert_eq!(r.stderr.lines().filter(|l| l.ends_with("] err")).count(), 8);
}

fn kvs_across_hosts(hosts: &Hosts) {
    let exe = env::current_exe().unwrap();
    let mut cmd = hosts.rsrun(&[
        "-H",
        EIGHT,
        "-x",
        RANK_MODE,
        exe.to_str().unwrap(),
        "--exact",
        "rank_mode",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ]);
    cmd.env(RANK_MODE, "exchange");
    let r = run(&mut cmd, b"");
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    let all = "host1,host1,host2,host2,host3,host3,host4,host4";
    let saw: Vec<&str> = r
        .sorted_lines()
        .into_iter()
        .filter(|l| l.starts_with("rank "))
        .collect();
    let expected: Vec<String> = (0..8)
        .map(|rank| format!("rank {rank} saw {all}"))
        .collect();
    assert_eq!(saw, expected, "{}", r.stderr);
}

/// The `mpirt: ...` lines ranks print under `--verbose` that name TCP.
fn tcp_reports(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.starts_with("mpirt") && l.contains("tcp"))
        .count()
}

fn ring_across_hosts(hosts: &Hosts) {
    let r = run(
        &mut hosts.rsrun(&["-H", EIGHT, "--verbose", &example("ring")]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.trim(),
        "ring of 8 ranks: token total 28, expected 28"
    );
    // Two ranks a host: every rank has peers on other hosts, reached over TCP.
    assert_eq!(tcp_reports(&r.stderr), 8, "{}", r.stderr);
}

fn stuck_across_hosts(hosts: &Hosts) {
    // A receive cycle of three ranks on three hosts: each rank's state comes to rsrun over
    // its own key-value connection, from another host.
    let r = run(
        &mut hosts.rsrun(&[
            "-H",
            "host1:1,host2:1,host3:1",
            "--stall-timeout",
            "1",
            &example("stuck"),
            "receive-cycle",
        ]),
        b"",
    );
    assert_receive_cycle_over_three_hosts(&r);
}

fn all_to_all_across_hosts(hosts: &Hosts) {
    // Blocks of 16 KiB to 1 MiB: eager and rendezvous, over shared memory within a host and
    // TCP between hosts, all at once.
    let r = run(
        &mut hosts.rsrun(&["-H", EIGHT, &example("alltoall"), "1m", "3"]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    let expected: Vec<String> = (1..=3)
        .map(|round| {
            format!(
                "alltoall: 8 ranks, round {round} of 3: 56 blocks of 16384 to 1048576 bytes \
                 verified"
            )
        })
        .collect();
    assert_eq!(r.stdout.lines().collect::<Vec<_>>(), expected);
}

fn gigabyte_across_hosts(hosts: &Hosts) {
    // A debug build of bigmsg takes about 25 s to fill and check 1 GiB (the transfer itself about
    // 1 s), too near the run limit; a quarter of it still crosses hosts in many pieces.
    let (size, bytes) = if cfg!(debug_assertions) {
        ("256m", 1 << 28)
    } else {
        ("1g", 1 << 30)
    };
    // Rank 0 is on host1, rank 7 on host4.
    let r = run(
        &mut hosts.rsrun(&["-H", EIGHT, &example("bigmsg"), size]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .starts_with(&format!("bigmsg: {bytes} bytes from rank 0 to rank 7 in "))
            && r.stdout.trim_end().ends_with(" ok"),
        "{}",
        r.stdout
    );
    println!("  {}", r.stdout.trim());
}

fn remote_rank_killed(hosts: &Hosts) {
    let script = "if [ \"$MPIRT_RANK\" = 5 ]; then sleep 1; kill -9 $$; fi; exec sleep 60";
    let r = run(&mut hosts.rsrun(&["-H", EIGHT, "sh", "-c", script]), b"");
    assert_eq!(r.code(), Some(137), "{}", r.stderr);
    assert!(
        r.stderr.contains("rsrun: rank 5 on host3 (pid ")
            && r.stderr.contains(") killed by signal 9 (SIGKILL)"),
        "{}",
        r.stderr
    );
    // Startup (about a second), the rank's second, then at most a few seconds to end the job.
    assert!(r.elapsed < Duration::from_secs(7), "took {:?}", r.elapsed);
    println!(
        "  remote SIGKILL: job ended {:.2} s after start",
        r.elapsed.as_secs_f64()
    );
}

fn killed_during_tcp_exchange(hosts: &Hosts) {
    // Ranks of this job carry the marker, so the test finds rank 5 and nothing else.
    let marker = format!("MPIRT_TEST_KILL_MARKER={}", std::process::id());
    let (mut child, started) = common::start(
        &mut hosts.rsrun(&[
            "-H",
            EIGHT,
            "--transport",
            "tcp",
            "--env",
            &marker,
            &example("alltoall"),
            "64k",
            "1000000000",
        ]),
        b"",
    );
    // Rank 0 prints once every rank has finished the first round: all are wired up and
    // exchanging from then on. The pipe is drained to the end, so no rank blocks on output.
    let lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            // Once the first line is taken nobody listens; the rest is drained all the same.
            let _ = tx.send(line);
        }
    });
    let first = rx.recv_timeout(common::LIMIT).expect("no round finished");
    assert!(
        first.starts_with("alltoall: 8 ranks, round 1 of"),
        "{first}"
    );
    let wanted = [marker.as_bytes(), b"MPIRT_RANK=5"];
    let rank5 = processes(|dir| {
        std::fs::read(dir.join("environ")).is_ok_and(|env| {
            wanted
                .iter()
                .all(|w| env.split(|&b| b == 0).any(|v| v == *w))
        })
    });
    assert_eq!(rank5.len(), 1, "rank 5's process: {rank5:?}");
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is rank 5 of this job.
    unsafe { libc::kill(rank5[0] as i32, libc::SIGKILL) };
    let killed_at = started.elapsed();
    let r = common::finish(child, started);
    let took = r.elapsed - killed_at;
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert!(took < Duration::from_secs(5), "took {took:?}\n{}", r.stderr);
    // Whichever report comes first (rsrun's of the death, or a peer's of the broken
    // connection), the user learns which rank died and where.
    assert!(
        r.stderr.contains("rank 5 on host3"),
        "ended {took:?} after the kill, without naming rank 5's host:\n{}",
        r.stderr
    );
    println!(
        "  SIGKILL during a TCP exchange: job ended {:.2} s after, exit {:?}: {}",
        took.as_secs_f64(),
        r.code(),
        r.stderr
            .lines()
            .find(|l| l.contains("rank 5"))
            .unwrap_or("")
    );
}

/// The pids of processes on any host (they share /proc) whose /proc directory passes `test`.
fn processes(test: impl Fn(&Path) -> bool) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| test(&e.path()))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Processes whose whole command line is `sleep MARKER`.
fn sleepers(marker: &str) -> usize {
    let wanted = format!("sleep\0{marker}\0");
    processes(|dir| std::fs::read(dir.join("cmdline")).is_ok_and(|c| c == wanted.as_bytes())).len()
}

/// A rank killed alone on its host: that host's agent removes the job's files under
/// /dev/shm as soon as it has reaped it, not only when rsrun's link ends (the agent may exit
/// first) nor only rsrun, which removes them on its own host once the job is over. Rank 0
/// ignores rsrun's SIGTERM, so rsrun waits out its 20 s grace: the files (the test hosts
/// share one /dev/shm) must go while it does.
fn dead_rank_files_removed_by_its_agent(hosts: &Hosts) {
    let marker = format!("601.{}", std::process::id());
    let tag = format!("-dead-rank-{}.", std::process::id());
    let script = format!(
        "f=/dev/shm/mpirt-$MPIRT_JOB_ID{tag}; echo x > $f$MPIRT_RANK; \
         if [ \"$MPIRT_RANK\" = 1 ]; then while [ ! -e ${{f}}0 ]; do sleep 0.05; done; \
         kill -9 $$; fi; trap '' TERM; exec sleep {marker}"
    );
    let files = || job_files_tagged(&tag);
    let args = [
        "--grace",
        "20",
        "-H",
        "host1:1,host2:1",
        "sh",
        "-c",
        &script,
    ];
    let (mut child, _) = common::start(&mut hosts.rsrun(&args), b"");
    let until = Instant::now() + Duration::from_secs(15);
    // Rank 0 writes its file before it sleeps; rank 1 dies once rank 0's file is there.
    while sleepers(&marker) < 1 {
        assert!(Instant::now() < until, "rank 0 did not start");
        thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    while files() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} of the job's files still under /dev/shm 10 s after rank 1 died",
            files()
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        child.try_wait().unwrap().is_none() && sleepers(&marker) == 1,
        "the job ended before its files went: rsrun may have removed them, not the agent"
    );
    child.kill().unwrap(); // SIGKILL: host1's agent then kills rank 0
    child.wait().unwrap();
    while sleepers(&marker) > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "rank 0 outlived rsrun"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// How many jobs' files under /dev/shm (`mpirt-...`) hold `tag` in their names.
fn job_files_tagged(tag: &str) -> usize {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("mpirt-") && name.contains(tag))
        .count()
}

/// rsrun SIGKILLed: every agent kills its ranks, and removes the job's files under /dev/shm
/// (each rank made one, as the shm transport's segments are named), which the dead rsrun
/// cannot.
fn rsrun_killed(hosts: &Hosts) {
    let marker = format!("600.{}", std::process::id());
    let tag = format!("-killed-rsrun-{}.", std::process::id());
    let script =
        format!("echo x > /dev/shm/mpirt-$MPIRT_JOB_ID{tag}$MPIRT_RANK; exec sleep {marker}");
    let files = || job_files_tagged(&tag);
    let (mut child, _) = common::start(&mut hosts.rsrun(&["-H", EIGHT, "sh", "-c", &script]), b"");
    let until = Instant::now() + Duration::from_secs(15);
    while sleepers(&marker) < 8 || files() < 8 {
        assert!(Instant::now() < until, "the 8 ranks did not start");
        thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let killed = Instant::now();
    while sleepers(&marker) > 0 || files() > 0 {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "{} ranks outlived rsrun by 5 s, {} of their files under /dev/shm",
            sleepers(&marker),
            files()
        );
        thread::sleep(Duration::from_millis(50));
    }
    println!(
        "  rsrun SIGKILL: ranks and their files gone after {:.2} s",
        killed.elapsed().as_secs_f64()
    );
}

/// rsrun on `host_list` with `ssh_args` fails within 10 s with a message naming `name`.
fn fails_naming(host_list: &str, ssh_args: &str, name: &str) -> common::Run {
    let args = ["--ssh-args", ssh_args, "-H", host_list, "sleep", "30"];
    let r = run(&mut rsrun(&args), b"");
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("cannot start ranks on host {name}: ")),
        "{}",
        r.stderr
    );
    assert!(r.elapsed < Duration::from_secs(10), "took {:?}", r.elapsed);
    println!(
        "  {name}: failed after {:.2} s: {}",
        r.elapsed.as_secs_f64(),
        r.stderr.trim()
    );
    r
}

fn unreachable_host(hosts: &Hosts) {
    fails_naming("host1,10.77.0.99", &hosts.ssh_args(), "10.77.0.99");
}

fn unknown_host(hosts: &Hosts) {
    let r = fails_naming(
        "host1,no-such-host.invalid",
        &hosts.ssh_args(),
        "no-such-host.invalid",
    );
    assert!(
        r.stderr.contains("Could not resolve hostname"),
        "{}",
        r.stderr
    );
}

/// The stranger dials rank 1 on host2 from this host, and records rank 0's dial on host1.
fn stranger_refused(hosts: &Hosts) {
    let dir = common::scratch_dir("stranger");
    let mut job = hosts.rsrun(&[
        "-H",
        "host1:1,host2:1",
        "--verbose",
        &example("stepwise"),
        dir.to_str().unwrap(),
        "2",
    ]);
    common::stranger::play_against(&mut job, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The stranger floods rank 0 on host1 and rank 1 on host2 with connections from this host
/// while they connect to each other.
fn stranger_flood(hosts: &Hosts) {
    let dir = common::scratch_dir("flood");
    let mut job = hosts.rsrun(&[
        "-H",
        "host1:1,host2:1",
        "--verbose",
        &example("stepwise"),
        dir.to_str().unwrap(),
        "2",
    ]);
    common::stranger::flood_against(&mut job, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

fn auth_failure(hosts: &Hosts) {
    // `-o IdentityFile=/dev/null` would not do: identity files add up, and the config's key
    // still works. Turning public-key authentication off leaves sshd no method to accept.
    let ssh_args = format!("{} -o PubkeyAuthentication=no", hosts.ssh_args());
    let r = fails_naming("host2", &ssh_args, "host2");
    assert!(r.stderr.contains("Permission denied"), "{}", r.stderr);
}

/// What `job.sh` prints for each rank of EIGHT run in `dir`.
fn job_lines(dir: &Path) -> Vec<String> {
    (0..8)
        .map(|rank| format!("{rank} host{} {} input-data", rank / 2 + 1, dir.display()))
        .collect()
}

fn relative_paths_from_a_shared_directory(hosts: &Hosts) {
    let dir = job_dir("relative");
    let r = run(
        hosts.rsrun(&["-H", EIGHT, "./job.sh"]).current_dir(&dir),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(r.sorted_lines(), job_lines(&dir));
    assert_eq!(r.stderr, "", "no warning where the directory exists");
    // A relative program missing there: the host, the path tried and the directory.
    let r = run(
        hosts
            .rsrun(&["-H", "host2:1", "./missing.sh"])
            .current_dir(&dir),
        b"",
    );
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    let d = dir.display();
    assert!(
        r.stderr.contains(&format!(
            "cannot start './missing.sh' on host2: No such file or directory (os error 2) \
             (tried {d}/missing.sh, in directory {d})"
        )),
        "{}",
        r.stderr
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// rsrun runs in a directory that exists only in its own mount namespace (a tmpfs mounted
/// over a scratch directory there), so the hosts' sshd, in the machine's namespace, lack it.
fn working_directory_the_hosts_lack(hosts: &Hosts) {
    let over = common::scratch_dir("hidden");
    let only_here = over.join("only-here");
    let ssh_args = hosts.ssh_args();
    let script = format!(
        "mount -t tmpfs rsrun-test {o} && mkdir {h} && cd {h} && \
         exec {rsrun} --ssh-args '{ssh_args}' -H host1:2,host2:1 \
         sh -c 'echo $MPIRT_RANK $(hostname) $(pwd) $HOME'",
        o = over.display(),
        h = only_here.display(),
        rsrun = env!("CARGO_BIN_EXE_rsrun"),
    );
    let r = run(
        Command::new("unshare").args(["-m", "sh", "-c", &script]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let lines = r.sorted_lines();
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    for (rank, line) in lines.iter().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[..2], [rank.to_string(), format!("host{}", rank / 2 + 1)]);
        assert_eq!(f[2], f[3], "rank {rank} runs in its home directory: {line}");
    }
    let warnings: Vec<&str> = r.stderr.lines().collect();
    let said = |host: &str| {
        format!(
            "rsrun: warning: {host}: working directory {} does not exist there; its ranks run \
             in ",
            only_here.display()
        )
    };
    assert_eq!(warnings.len(), 2, "one warning a host: {}", r.stderr);
    for host in ["host1", "host2"] {
        assert!(
            warnings.iter().any(|w| w.starts_with(&said(host))),
            "{}",
            r.stderr
        );
    }
    std::fs::remove_dir_all(&over).unwrap();
}

fn wdir_on_every_host(hosts: &Hosts) {
    let dir = job_dir("wdir");
    let d = dir.to_str().unwrap();
    for flag in ["--wdir", "-wdir"] {
        let r = run(
            hosts
                .rsrun(&[flag, d, "-H", EIGHT, "./job.sh"])
                .current_dir("/"),
            b"",
        );
        assert_eq!(r.code(), Some(0), "{flag}: {}", r.stderr);
        assert_eq!(r.sorted_lines(), job_lines(&dir));
    }
    // A --wdir missing on the hosts is an error naming the host and the directory.
    let missing = dir.join("missing");
    let m = missing.to_str().unwrap();
    let r = run(
        &mut hosts.rsrun(&["--wdir", m, "-H", "host3:1", "pwd"]),
        b"",
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "cannot start 'pwd' on host3: --wdir {m}: No such file or directory"
        )),
        "{}",
        r.stderr
    );
    // From a directory reached through a symlink (PWD the logical path, as a shell sets it),
    // remote ranks start in the logical path and their PWD names their own directory.
    let real = dir.join("real");
    std::fs::create_dir_all(real.join("sub")).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let l = link.to_str().unwrap();
    for (wdir, expected) in [(None, l.to_string()), (Some("sub"), format!("{l}/sub"))] {
        let mut args = vec!["-H", "host2:1,host3:1"];
        if let Some(w) = wdir {
            args.extend(["--wdir", w]);
        }
        args.extend(["sh", "-c", "echo $(hostname) $(printenv PWD)"]);
        let r = run(hosts.rsrun(&args).current_dir(&link).env("PWD", &link), b"");
        assert_eq!(r.code(), Some(0), "{wdir:?}: {}", r.stderr);
        assert_eq!(
            r.sorted_lines(),
            [format!("host2 {expected}"), format!("host3 {expected}")],
            "{wdir:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn stdin_to_a_remote_rank_zero(hosts: &Hosts) {
    // Three times rsrun's window of unacknowledged input, with every byte value: the input
    // only gets through if the agent's acknowledgements do, and binary data must too.
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let script = "if [ $MPIRT_RANK = 0 ]; then echo $(hostname) $(cksum); \
                  else echo $(hostname) $(wc -c); fi";
    let r = run(
        &mut hosts.rsrun(&["-H", "host2:1,host3:1", "sh", "-c", script]),
        &input,
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let mut cksum = Command::new("cksum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = cksum.stdin.take().unwrap();
    let data = input.clone();
    let writer = thread::spawn(move || std::io::Write::write_all(&mut pipe, &data));
    let expected = cksum.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let expected = String::from_utf8(expected.stdout).unwrap();
    assert_eq!(
        r.sorted_lines(),
        [format!("host2 {}", expected.trim()), "host3 0".to_string()]
    );
    // A rank 0 that reads part of its input, then leaves its stdin open but unread (the agent's
    // writes to it block) or closes it (they fail with EPIPE): either way the job ends when the
    // ranks do, normally and without a word about the input left over.
    for rest in ["exec sleep 1", "exec sleep 1 <&-"] {
        let script = format!("if [ $MPIRT_RANK = 0 ]; then head -c 100 | wc -c; {rest}; fi");
        let r = run(
            &mut hosts.rsrun(&["-H", "host2:1,host3:1", "sh", "-c", &script]),
            &input,
        );
        assert_eq!(r.code(), Some(0), "{rest}: {}", r.stderr);
        assert_eq!(r.stdout.trim(), "100", "{rest}");
        assert_eq!(r.stderr, "", "{rest}");
    }
}

fn background_in_a_terminal(hosts: &Hosts) {
    // `rsrun -H host2:1,host3:1 ... > out &` from an interactive shell: rsrun must not read
    // the terminal for the remote rank 0, or the kernel stops it ("Stopped (tty input)").
    let dir = common::scratch_dir("background-remote");
    let out = dir.join("out");
    let ssh_args = hosts.ssh_args();
    let script = "echo rank $MPIRT_RANK done";
    let args = [
        "--ssh-args",
        &ssh_args,
        "-H",
        "host2:1,host3:1",
        "sh",
        "-c",
        script,
    ];
    let r = common::in_terminal(&common::background_rsrun(&args, &out));
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(r.stdout, "wait 0\n", "{}\n{said}", r.stderr);
    let mut lines: Vec<&str> = said.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["rank 0 done", "rank 1 done"], "{said}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn per_rank_output_files(hosts: &Hosts) {
    let dir = common::scratch_dir("output-files");
    let out = dir.join("out");
    let r = run(
        &mut hosts.rsrun(&[
            "-H",
            EIGHT,
            "--output-filename",
            &format!("{}:nocopy", out.display()),
            "sh",
            "-c",
            "echo out $MPIRT_RANK $(hostname); echo err $MPIRT_RANK >&2",
        ]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""), "nocopy");
    for rank in 0..8 {
        let read = |name: &str| {
            std::fs::read_to_string(out.join(format!("1/rank.{rank}/{name}"))).unwrap()
        };
        assert_eq!(read("stdout"), format!("out {rank} host{}\n", rank / 2 + 1));
        assert_eq!(read("stderr"), format!("err {rank}\n"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn ssh_args_with_quotes(hosts: &Hosts) {
    // host2 and host3 reached through host1: their sshd then sees host1 as the client. Split
    // at spaces, the ProxyCommand would be five words and ssh would fail.
    let config = hosts.ssh_config.display();
    let ssh_args = format!("-F {config} -o \"ProxyCommand ssh -F {config} -W %h:%p host1\"");
    let r = run(
        &mut rsrun(&[
            "--ssh-args",
            &ssh_args,
            "-H",
            "host2:1,host3:1",
            "sh",
            "-c",
            "echo $(hostname) ${SSH_CONNECTION%% *}",
        ]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let host1 = ("host1", 22)
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap()
        .ip();
    assert_eq!(
        r.sorted_lines(),
        [format!("host2 {host1}"), format!("host3 {host1}")]
    );
    // The same from MPIRT_SSH_ARGS; a whole job (the ring) wires up through the proxy.
    let mut cmd = rsrun(&["-H", "host2:1,host3:1", &example("ring")]);
    cmd.env("MPIRT_SSH_ARGS", &ssh_args);
    let r = run(&mut cmd, b"");
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(
        r.stdout.trim(),
        "ring of 2 ranks: token total 1, expected 1"
    );
}

/// Each rank's `rank host cpus` (its Cpus_allowed_list), sorted by rank.
const WHERE: &str = "echo $MPIRT_RANK $(hostname) $(grep Cpus_allowed_list /proc/self/status | \
                     cut -f2)";

fn rankfile_placement(hosts: &Hosts) {
    let dir = common::scratch_dir("rankfile");
    let file = dir.join("rankfile");
    let text = "rank 0=host2 slot=1\nrank 1=host1 slot=0\nrank 2=host2 slot=0\n\
                rank 3=host3 slot=0-1\n";
    std::fs::write(&file, text).unwrap();
    let f = file.to_str().unwrap();
    let r = run(
        &mut hosts.rsrun(&["--rankfile", f, "--report-bindings", "sh", "-c", WHERE]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(
        r.sorted_lines(),
        ["0 host2 1", "1 host1 0", "2 host2 0", "3 host3 0-1"]
    );
    for said in [
        "[host2:",
        "] MCW rank 0 bound to CPU 1: [./B]",
        "] MCW rank 3 bound to CPUs 0-1: [B/B]",
    ] {
        assert!(r.stderr.contains(said), "{said}: {}", r.stderr);
    }
    // Within -H's hosts it places as it says; a host outside them is an error.
    let r = run(
        &mut hosts.rsrun(&[
            "-H",
            "host1:2,host2:2,host3:2",
            "--rankfile",
            f,
            "sh",
            "-c",
            WHERE,
        ]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(r.sorted_lines().len(), 4);
    let r = run(
        &mut hosts.rsrun(&["-H", "host1:2,host2:2", "--rankfile", f, "sh", "-c", WHERE]),
        b"",
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("line 4: host 'host3' is not among the job's hosts (host1, host2)")
            && r.stdout.is_empty(),
        "{}",
        r.stderr
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn npernode_placement(hosts: &Hosts) {
    // Two a host, bound to a core each: local rank i on CPU i of its host.
    let r = run(
        &mut hosts.rsrun(&[
            "-H",
            "host1:4,host2:4,host3:4",
            "--npernode",
            "2",
            "-n",
            "5",
            "--bind-to",
            "core",
            "sh",
            "-c",
            WHERE,
        ]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(
        r.sorted_lines(),
        [
            "0 host1 0",
            "1 host1 1",
            "2 host2 0",
            "3 host2 1",
            "4 host3 0"
        ]
    );
    // ppr:1:node: one a host, all hosts' worth without -n.
    let r = run(
        &mut hosts.rsrun(&["-H", EIGHT, "--map-by", "ppr:1:node", "sh", "-c", WHO]),
        b"",
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let expected: Vec<String> = (0..4)
        .map(|rank| format!("{rank} host{} 0/1", rank + 1))
        .collect();
    assert_eq!(r.sorted_lines(), expected);
}

fn impossible_placements(hosts: &Hosts) {
    let r = run(
        &mut hosts.rsrun(&["-H", EIGHT, "--npernode", "2", "-n", "9", "sh", "-c", WHO]),
        b"",
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("9 ranks requested, but 2 per node on 4 host(s) places only 8")
            && r.stdout.is_empty(),
        "{}",
        r.stderr
    );
    // A CPU host2 lacks is refused by its agent before any rank runs, on any host: the ranks
    // of this machine and host3 would start at once, but every host must be ready first.
    let dir = common::scratch_dir("rankfile-cpu");
    let file = dir.join("rankfile");
    std::fs::write(
        &file,
        "rank 0=localhost slot=0\nrank 1=host3 slot=0\nrank 2=host2 slot=1000\n",
    )
    .unwrap();
    let touch = format!("touch {}/started.$MPIRT_RANK", dir.display());
    let r = run(
        &mut hosts.rsrun(&["--rankfile", file.to_str().unwrap(), "sh", "-c", &touch]),
        b"",
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "cannot start 'sh' on host2: the rankfile binds rank 2 to CPU 1000, but rsrun may \
             use only CPUs "
        ) && r.stdout.is_empty(),
        "{}",
        r.stderr
    );
    let started: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|name| name.to_string_lossy().starts_with("started."))
        .collect();
    assert!(started.is_empty(), "ranks started: {started:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
