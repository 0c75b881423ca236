//! What the multi-process tests share: a key-value exchange through a directory (a
//! stand-in for rsrun's service that keeps this crate's tests free of the launcher), test
//! data, and waiting for the rank processes.

// Each test crate compiles this module and uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pml::transport::RmaOp;
use pml::{
    Done, Engine, OneSided, Pml, PmlError, RemoteKey, SendMode, SourceSel, Status, TagSel,
    WindowExposure, Wireup,
};

/// Key-value exchange through a directory: a put is a file, a fence waits for every rank's
/// marker file of that round.
pub struct DirWireup {
    pub dir: PathBuf,
    pub rank: u32,
    pub size: u32,
    pub round: u32,
}

impl DirWireup {
    /// Rank `rank` of a job of two whose key-value exchange is the directory `dir`.
    pub fn pair(dir: PathBuf, rank: u32) -> DirWireup {
        DirWireup {
            dir,
            rank,
            size: 2,
            round: 0,
        }
    }
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

/// A blocking send, waited for.
pub fn send(e: &mut Engine, to: u32, tag: i32, data: &[u8], mode: SendMode) {
    // SAFETY: `data` outlives the request: we wait for it before returning.
    let h = unsafe { e.post_send(0, e.rank(), to, tag, mode, data.as_ptr(), data.len()) }.unwrap();
    assert_eq!(e.wait(h).unwrap(), Done::Sent);
}

/// A blocking receive, as mpirt's: the engine's claim, which takes an eager frame straight
/// from the transport and turns into a request for a rendezvous.
pub fn recv(e: &mut Engine, from: SourceSel, tag: TagSel, len: usize) -> (Vec<u8>, Status) {
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` outlives the call, which returns once the receive is done.
    let status = unsafe { e.recv(0, from, tag, buf.as_mut_ptr(), buf.len()) }.unwrap();
    (buf, status)
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

/// The environment that keeps libfabric's udp and tcp providers on loopback, for ranks that
/// share this host: by default they bind to the first interface they list, which with the
/// SSH test hosts up is their bridge, and another run that takes the hosts down deletes it
/// under the job (whose ranks then fail, naming the lost address). A variable this test's
/// environment sets is the user's, which the children inherit, and stays.
/// (mpirt's tests have their own, `common::ofi_on_loopback`, which also leaves jobs across
/// hosts alone: test helpers cannot cross crates without a crate of their own.)
pub fn ofi_on_loopback() -> Vec<(&'static str, &'static str)> {
    ["FI_UDP_IFACE", "FI_TCP_IFACE"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_none())
        .map(|name| (name, "lo"))
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

/// Checks that every rank of a job succeeded and said "rank R done" (`what` names the job in
/// the failure); returns their output, rank by rank.
pub fn every_rank_done(outputs: &[Output], what: &str) -> String {
    let mut all = String::new();
    for (rank, out) in outputs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("rank {rank} done")),
            "{what}rank {rank}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        all += &stdout;
    }
    all
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

/// Waits for the one-sided operations to `peer` up to `ticket`.
pub fn rma_wait(e: &mut Engine, peer: u32, ticket: u64) -> Result<(), PmlError> {
    while !e.rma_done(peer, ticket)? {
        e.progress()?;
    }
    Ok(())
}

/// Rank 0 and 1 of a pair tell each other how to reach their windows (the address and the
/// packed key that `exposure` of `window` gave) and each returns how it names the other's.
pub fn swap_windows(e: &mut Engine, window: *const u8, exposure: &WindowExposure) -> RemoteKey {
    let peer = 1 - e.rank();
    let mut mine = (window as u64).to_le_bytes().to_vec();
    mine.extend_from_slice(&exposure.key);
    // Both ranks run the same build, so their packed keys have the same length.
    let mut theirs = vec![0u8; mine.len()];
    // SAFETY: both buffers outlive their requests, waited for here.
    unsafe {
        let r = e.post_recv(
            0,
            SourceSel::Rank(peer),
            TagSel::Tag(2),
            theirs.as_mut_ptr(),
            theirs.len(),
        );
        let s = e.post_send(
            0,
            e.rank(),
            peer,
            2,
            SendMode::Standard,
            mine.as_ptr(),
            mine.len(),
        );
        e.wait(s.unwrap()).unwrap();
        e.wait(r.unwrap()).unwrap();
    }
    let (addr, packed) = theirs.split_at(8);
    RemoteKey {
        addr: u64::from_le_bytes(addr.try_into().unwrap()),
        key: e.remote_key(peer, packed).unwrap(),
    }
}

/// Posts `op` to `peer` at `remote` and waits for it; its ticket.
///
/// # Safety
/// `op`'s local memory stays valid and untouched until this returns.
pub unsafe fn rma_waited(
    e: &mut Engine,
    peer: u32,
    op: RmaOp,
    remote: RemoteKey,
) -> Result<u64, PmlError> {
    // SAFETY: forwarded from this function's contract; the wait comes next.
    let ticket = unsafe { e.rma(peer, op, remote) }?;
    rma_wait(e, peer, ticket)?;
    Ok(ticket)
}

/// Writes `data` to `peer`'s window at `remote`, reads it back and checks it (`what` names
/// the transport in the failure).
pub fn put_and_read_back(e: &mut Engine, peer: u32, remote: RemoteKey, data: &[u8], what: &str) {
    let put = RmaOp::Write {
        local: data.as_ptr(),
        len: data.len(),
    };
    // SAFETY: `data` outlives the call, which waits for the write.
    unsafe { rma_waited(e, peer, put, remote) }.unwrap();
    let mut back = vec![0u8; data.len()];
    let get = RmaOp::Read {
        local: back.as_mut_ptr(),
        len: back.len(),
    };
    // SAFETY: `back` outlives the call, which waits for the read.
    unsafe { rma_waited(e, peer, get, remote) }.unwrap();
    assert!(
        back == data,
        "{what}: the window read back differs from what was put"
    );
}

/// One 4-byte message each way between ranks 0 and 1, so both have reached each other.
pub fn exchange(e: &mut Engine) {
    let peer = 1 - e.rank();
    let out = e.rank().to_le_bytes();
    let mut inbox = [0u8; 4];
    // SAFETY: both buffers outlive their requests, waited for below.
    let r = unsafe {
        e.post_recv(
            0,
            SourceSel::Rank(peer),
            TagSel::Tag(1),
            inbox.as_mut_ptr(),
            4,
        )
    }
    .unwrap();
    let s =
        unsafe { e.post_send(0, e.rank(), peer, 1, SendMode::Standard, out.as_ptr(), 4) }.unwrap();
    e.wait(s).unwrap();
    e.wait(r).unwrap();
    assert_eq!(inbox, peer.to_le_bytes());
}

/// Rank 0's side of a dead-peer test once rank 1 is gone: case `idle` only waits for a
/// message from it; any other case also sends it `len` bytes every 200 ms. Returns the
/// error that ended the wait (within 60 s, or the test fails) and prints after how long.
pub fn wait_for_dead_rank1(e: &mut Engine, case: &str, len: usize) -> PmlError {
    let t = Instant::now();
    let mut inbox = [0u8; 8];
    // SAFETY: `inbox` lives until the process ends; the request never completes (the
    // sender is dead), so the engine never writes it after this function.
    let recv = unsafe { e.post_recv(0, SourceSel::Rank(1), TagSel::Tag(5), inbox.as_mut_ptr(), 8) }
        .unwrap();
    let data = vec![7u8; len];
    let error = match case {
        "idle" => e.wait(recv).unwrap_err(),
        _ => loop {
            assert!(t.elapsed() < Duration::from_secs(60), "no error in 60 s");
            // SAFETY: `data` outlives the request, waited for below.
            let sent =
                unsafe { e.post_send(0, 0, 1, 5, SendMode::Standard, data.as_ptr(), data.len()) }
                    .and_then(|h| e.wait(h));
            if let Err(error) = sent {
                break error;
            }
            let until = Instant::now() + Duration::from_millis(200);
            let mut failed = None;
            while failed.is_none() && Instant::now() < until {
                failed = e.progress().err();
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Some(error) = failed {
                break error;
            }
        },
    };
    println!("after {:?}: {error}", t.elapsed());
    error
}
