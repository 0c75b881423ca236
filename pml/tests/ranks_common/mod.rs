//! What the multi-process tests share: a key-value exchange through a directory (a
//! stand-in for rsrun's service that keeps this crate's tests free of the launcher), test
//! data, and waiting for the rank processes.

// Each test crate compiles this module and uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pml::Wireup;

/// Key-value exchange through a directory: a put is a file, a fence waits for every rank's
/// marker file of that round.
pub struct DirWireup {
    pub dir: PathBuf,
    pub rank: u32,
    pub size: u32,
    pub round: u32,
}

impl Wireup for DirWireup {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn job_id(&self) -> String {
        self.dir.file_name().unwrap().to_string_lossy().into_owned()
    }
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let tmp = self.dir.join(format!(".{key}.tmp"));
        fs::write(&tmp, value).map_err(|e| e.to_string())?;
        fs::rename(&tmp, self.dir.join(key)).map_err(|e| e.to_string())
    }
    fn fence(&mut self) -> Result<(), String> {
        self.round += 1;
        fs::write(
            self.dir.join(format!("fence.{}.{}", self.round, self.rank)),
            b"",
        )
        .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(30);
        for r in 0..self.size {
            while !self.dir.join(format!("fence.{}.{r}", self.round)).exists() {
                if Instant::now() > deadline {
                    return Err(format!(
                        "fence {} timed out waiting for rank {r}",
                        self.round
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }
    /// Every rank of a test job knows the same secret (the tests never meet strangers).
    fn job_secret(&mut self) -> Result<[u8; 32], String> {
        Ok([0x5a; 32])
    }
    fn get(&mut self, _from: u32, key: &str) -> Result<Vec<u8>, String> {
        fs::read(self.dir.join(key)).map_err(|e| format!("{key}: {e}"))
    }
}

/// A singleton's wire-up, in a fresh directory named after `name`.
pub fn singleton_wireup(name: &str) -> DirWireup {
    let dir = std::env::temp_dir().join(format!("pml-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    DirWireup {
        dir,
        rank: 0,
        size: 1,
        round: 0,
    }
}

pub fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

pub fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + seed * 13) % 251) as u8)
        .collect()
}

/// Waits for every rank; once one fails or the deadline passes, kills the rest, since they
/// may wait forever on the one that is gone.
pub fn wait_all(
    mut children: Vec<std::process::Child>,
    limit: Duration,
) -> Vec<std::process::Output> {
    let deadline = Instant::now() + limit;
    loop {
        let mut all_done = true;
        let mut failed = false;
        for c in &mut children {
            match c.try_wait().unwrap() {
                Some(st) => failed |= !st.success(),
                None => all_done = false,
            }
        }
        if all_done {
            break;
        }
        if failed || Instant::now() > deadline {
            for c in &mut children {
                let _ = c.kill();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

/// Runs `size` processes of this test binary as the ranks of a job, each running only `test`
/// with `key` set to `spec(rank)` and `envs` set, and waits for them as [`wait_all`] does.
pub fn run_children(
    test: &str,
    size: u32,
    key: &str,
    spec: impl Fn(u32) -> String,
    envs: &[(&str, &str)],
    limit: Duration,
) -> Vec<Output> {
    let children = (0..size)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", test, "--nocapture"])
                .env(key, spec(r))
                .envs(envs.iter().copied())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    wait_all(children, limit)
}

/// Checks that rank 0 of a job whose rank 1 died said "rank 0 saw rank 1 die", and returns
/// its line that says after how long it noticed ("after ...").
pub fn rank0_saw_rank1_die(outputs: &[Output], what: &str) -> String {
    let out0 = String::from_utf8_lossy(&outputs[0].stdout);
    assert!(
        outputs[0].status.success() && out0.contains("rank 0 saw rank 1 die"),
        "{what}, rank 0:\n{out0}\n{}",
        String::from_utf8_lossy(&outputs[0].stderr)
    );
    out0.lines()
        .find(|l| l.starts_with("after"))
        .unwrap_or_default()
        .to_string()
}
