//! The bootstrap client against rsrun's real key-value service.
//!
//! The ranks are this test binary itself: each test starts rsrun on `current_exe()` with only
//! the `rank_mode` test selected and `RANK_MODE` naming what the rank does. Run normally,
//! without `RANK_MODE`, `rank_mode` does nothing.

mod common;

use std::env;
use std::time::Duration;

use launcher::Bootstrap;

use common::{rsrun, run};

const RANK_MODE: &str = "LAUNCHER_TEST_RANK_MODE";

/// The rank side of the tests below, selected by `RANK_MODE`.
#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    match mode.as_str() {
        "exchange" => exchange(),
        "wrong-secret" => wrong_secret(),
        "abort" => abort(),
        "bad-env" => println!("error: {}", Bootstrap::from_env().err().unwrap()),
        other => panic!("unknown rank mode {other}"),
    }
}

/// Puts a binary value, fences, reads everyone's, twice over under the same keys: the client
/// reads the space whole at its first get after a fence, and a fence makes it read anew.
fn exchange() {
    let mut b = Bootstrap::from_env().unwrap();
    assert!(!b.is_singleton());
    let (rank, size) = (b.rank(), b.size());
    assert_eq!((b.local_rank(), b.local_size()), (rank, size));
    assert_eq!(b.job_id(), env::var("MPIRT_JOB_ID").unwrap());
    let value = |round: u32, r: u32| vec![r as u8, 0, b'\n', 255, round as u8];
    for round in 0..2 {
        b.put(&format!("test.{rank}"), &value(round, rank)).unwrap();
        b.fence().unwrap();
        for peer in 0..size {
            let got = b.get(peer, &format!("test.{peer}")).unwrap();
            assert_eq!(got, value(round, peer), "round {round}");
        }
        // Every rank has read this round's values before any is put anew.
        b.fence().unwrap();
    }
    // A rank's own put is there for its own get before any fence.
    b.put(&format!("test.{rank}"), b"own").unwrap();
    assert_eq!(b.get(rank, &format!("test.{rank}")).unwrap(), b"own");
    let missing = b.get(0, "test.missing").unwrap_err().to_string();
    assert!(missing.contains("'test.missing'"), "{missing}");
    b.finalize().unwrap();
    println!("rank {rank} of {size} exchanged");
}

/// Tries the service with a wrong secret, then joins properly and fences with its peer.
fn wrong_secret() {
    let secret = env::var("MPIRT_KVS_SECRET").unwrap();
    env::set_var("MPIRT_KVS_SECRET", "0123456789abcdef0123456789abcdef");
    let refused = Bootstrap::from_env()
        .err()
        .expect("a wrong secret is refused");
    println!("refused: {refused}");
    env::set_var("MPIRT_KVS_SECRET", secret);
    let mut b = Bootstrap::from_env().unwrap();
    b.put(&format!("k{}", b.rank()), b"v").unwrap();
    b.fence().unwrap();
    assert_eq!(
        b.get(1 - b.rank(), &format!("k{}", 1 - b.rank())).unwrap(),
        b"v"
    );
    b.finalize().unwrap();
    println!("rank {} joined after the refusal", b.rank());
}

/// Rank 1 aborts while rank 0 waits in a fence that will never complete.
fn abort() {
    let mut b = Bootstrap::from_env().unwrap();
    if b.rank() == 1 {
        b.abort(7, "input file is corrupt");
    }
    b.fence().unwrap();
    std::thread::sleep(Duration::from_secs(100));
}

/// rsrun running this binary's `rank_mode` on `n` ranks in `mode`.
fn job(n: &str, mode: &str) -> common::Run {
    let exe = env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let mut cmd = rsrun(&[
        "-n",
        n,
        exe,
        "--exact",
        "rank_mode",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ]);
    cmd.env(RANK_MODE, mode);
    run(&mut cmd, b"")
}

fn lines_with<'a>(r: &'a common::Run, prefix: &str) -> Vec<&'a str> {
    let mut lines: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with(prefix)).collect();
    lines.sort_unstable();
    lines
}

#[test]
fn put_fence_get_across_four_ranks() {
    let r = job("4", "exchange");
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        lines_with(&r, "rank "),
        [
            "rank 0 of 4 exchanged",
            "rank 1 of 4 exchanged",
            "rank 2 of 4 exchanged",
            "rank 3 of 4 exchanged"
        ]
    );
}

#[test]
fn a_wrong_secret_is_refused_and_the_service_goes_on() {
    let r = job("2", "wrong-secret");
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    let refused = lines_with(&r, "refused: ");
    assert_eq!(refused.len(), 2, "{}", r.stdout);
    assert!(refused[0].contains("wrong job secret"), "{}", refused[0]);
    assert_eq!(lines_with(&r, "rank ").len(), 2, "{}", r.stdout);
}

#[test]
fn abort_ends_the_job_with_the_rank_code() {
    let r = job("2", "abort");
    assert_eq!(r.code(), Some(7), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("rsrun: rank 1 called abort (code 7): input file is corrupt"),
        "{}",
        r.stderr
    );
    assert!(r.elapsed < Duration::from_secs(3), "took {:?}", r.elapsed);
}

/// This binary as one rank with a hand-made environment, no rsrun.
fn bad_env_rank(vars: &[(&str, &str)]) -> String {
    let mut cmd = std::process::Command::new(env::current_exe().unwrap());
    cmd.args(["--exact", "rank_mode", "--nocapture", "-q"])
        .env(RANK_MODE, "bad-env");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let r = run(&mut cmd, b"");
    r.stdout
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error line in {}", r.stdout))
        .to_string()
}

#[test]
fn unusable_environments_give_clear_errors() {
    let good = [
        ("MPIRT_RANK", "0"),
        ("MPIRT_SIZE", "1"),
        ("MPIRT_LOCAL_RANK", "0"),
        ("MPIRT_LOCAL_SIZE", "1"),
        ("MPIRT_JOB_ID", "j"),
        ("MPIRT_KVS_SECRET", "s"),
        // Port 1 on loopback: nothing listens there.
        ("MPIRT_KVS_ADDR", "127.0.0.1:1"),
    ];
    let error = bad_env_rank(&good);
    assert!(
        error.starts_with("cannot reach rsrun's key-value service at 127.0.0.1:1: "),
        "{error}"
    );
    let mut bad_size = good.to_vec();
    bad_size[1] = ("MPIRT_SIZE", "x");
    assert_eq!(bad_env_rank(&bad_size), "MPIRT_SIZE is not a number: 'x'");
}

#[test]
fn without_rsrun_a_program_is_a_singleton() {
    if env::var_os("MPIRT_RANK").is_some() {
        return; // this test process itself runs under rsrun
    }
    let mut b = Bootstrap::from_env().unwrap();
    assert!(b.is_singleton());
    assert_eq!((b.rank(), b.size()), (0, 1));
    b.put("a", b"1").unwrap();
    b.fence().unwrap();
    assert_eq!(b.get(0, "a").unwrap(), b"1");
    b.finalize().unwrap();
}
