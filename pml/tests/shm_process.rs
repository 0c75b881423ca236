//! The shm transport between real processes: the test binary re-runs itself as the peer
//! ("child mode", chosen by environment variables) so that nothing here depends on fork in a
//! threaded test harness. Every loop has a deadline and every child is killed on failure.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pml::transport::shm::{allow_ptrace_from_peers, read_remote, ShmConfig, ShmTransport};

mod shm_common;
use shm_common::Name;

const MODE: &str = "MPIRT_SHM_TEST_CHILD";
const NAME: &str = "MPIRT_SHM_TEST_NAME";
const FRAMES: u64 = 100_000;
const TIMEOUT: Duration = Duration::from_secs(120);

/// The peer process's entry point; an ordinary (empty) test when run by the harness.
#[test]
fn child() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    let name = std::env::var(NAME).unwrap_or_default();
    match mode.as_str() {
        "exchange" => {
            let mut t = ShmTransport::attach(&name, 1, 2).expect("child attach");
            exchange(&mut t, 0);
        }
        "pingpong" => {
            let mut t = ShmTransport::attach(&name, 1, 2).expect("child attach");
            let mut buf = [0u8; 8];
            let deadline = Instant::now() + TIMEOUT;
            loop {
                recv_one(&mut t, &mut buf, deadline);
                send(&mut t, 0, &buf, &[], deadline);
                if buf == [0xff; 8] {
                    break;
                }
            }
        }
        "wake" => {
            let mut t = ShmTransport::attach(&name, 1, 2).expect("child attach");
            allow_ptrace_from_peers().unwrap();
            let deadline = Instant::now() + TIMEOUT;
            let probe = match t.probe_cma(0) {
                Ok(()) => "ok".to_string(),
                Err(e) => e.to_string(),
            };
            send(&mut t, 0, b"ready:", probe.as_bytes(), deadline);
            // The parent wakes us once it has our frame; without that this would take 30 s.
            let start = Instant::now();
            t.wait(Duration::from_secs(30));
            let waited = start.elapsed().as_millis() as u64;
            send(&mut t, 0, &waited.to_le_bytes(), &[], deadline);
        }
        "memory" => {
            allow_ptrace_from_peers().unwrap();
            let buf = pattern(3 << 20 | 123);
            println!("ADDR {:#x} {}", buf.as_ptr() as usize, buf.len());
            std::io::stdout().flush().unwrap();
            // Keep `buf` alive until the parent is done reading and closes our stdin.
            std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
            drop(buf);
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// A child process that is killed if the test fails before it exits.
struct Peer(Child);

impl Peer {
    fn spawn(mode: &str, name: &str) -> Peer {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["child", "--exact", "--nocapture", "--test-threads=1"])
            .env(MODE, mode)
            .env(NAME, name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        Peer(child)
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    fn finish(mut self) {
        drop(self.0.stdin.take());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                assert!(status.success(), "child failed: {status}");
                return;
            }
            assert!(Instant::now() < deadline, "child did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 + i / 251) as u8).collect()
}

/// Payload of frame `seq` from `from`: its length varies up to 4 KiB, its bytes depend on both.
fn payload(from: usize, seq: u64, buf: &mut Vec<u8>) {
    let len = if seq % 1000 == 999 {
        4096
    } else {
        (seq * 7 % 300) as usize
    };
    buf.clear();
    buf.extend((0..len).map(|j| (seq as usize * 13 + j * 7 + from) as u8));
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Makes progress without burning a core forever: spin a little, then sleep on the futex.
fn idle(t: &ShmTransport, idle_rounds: &mut u32, deadline: Instant) {
    *idle_rounds += 1;
    if *idle_rounds > 200 {
        t.wait(Duration::from_millis(2));
        *idle_rounds = 0;
    } else {
        std::hint::spin_loop();
    }
    assert!(Instant::now() < deadline, "shm test timed out");
}

/// Sends FRAMES frames to `peer` while receiving as many from it, checking every byte.
fn exchange(t: &mut ShmTransport, peer: usize) {
    let me = t.local_rank();
    let deadline = Instant::now() + TIMEOUT;
    let (mut sent, mut received) = (0u64, 0u64);
    let (mut out, mut expect) = (Vec::new(), Vec::new());
    let mut rounds = 0;
    while sent < FRAMES || received < FRAMES {
        let mut progress = false;
        if sent < FRAMES {
            payload(me, sent, &mut out);
            let meta = [sent.to_le_bytes(), checksum(&out).to_le_bytes()].concat();
            if t.try_send(peer, &meta, &out).unwrap() {
                sent += 1;
                progress = true;
            }
        }
        let got = t.poll(|from, frame| {
            assert_eq!(from, peer);
            let seq = u64::from_le_bytes(frame[..8].try_into().unwrap());
            let sum = u64::from_le_bytes(frame[8..16].try_into().unwrap());
            assert_eq!(seq, received, "frames out of order");
            assert_eq!(checksum(&frame[16..]), sum, "frame {seq} corrupted");
            payload(peer, seq, &mut expect);
            assert_eq!(frame[16..], expect[..], "frame {seq} has the wrong bytes");
            received += 1;
        });
        if progress || got > 0 {
            rounds = 0;
        } else {
            idle(t, &mut rounds, deadline);
        }
    }
}

fn send(t: &mut ShmTransport, to: usize, header: &[u8], payload: &[u8], deadline: Instant) {
    let mut rounds = 0;
    while !t.try_send(to, header, payload).unwrap() {
        t.poll(|_, _| panic!("unexpected frame while sending"));
        idle(t, &mut rounds, deadline);
    }
}

fn recv_one(t: &mut ShmTransport, buf: &mut [u8], deadline: Instant) -> usize {
    let mut rounds = 0;
    loop {
        let mut len = 0;
        if t.poll(|_, frame| {
            buf[..frame.len()].copy_from_slice(frame);
            len = frame.len();
        }) > 0
        {
            return len;
        }
        idle(t, &mut rounds, deadline);
    }
}

#[test]
fn two_processes_exchange_frames_and_the_name_disappears() {
    let name = Name::new("exchange");
    let mut t = ShmTransport::create(
        &name.0,
        0,
        2,
        &ShmConfig {
            ring_bytes: 64 << 10,
        },
    )
    .expect("create");
    assert!(
        name.exists(),
        "segment should exist until every rank attached"
    );
    let peer = Peer::spawn("exchange", &name.0);
    exchange(&mut t, 1);
    assert!(!name.exists(), "the last rank to attach removes the name");
    peer.finish();
}

#[test]
fn pingpong_latency() {
    let iters: u32 = std::env::var("MPIRT_SHM_PINGPONG_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let name = Name::new("pingpong");
    let mut t = ShmTransport::create(&name.0, 0, 2, &ShmConfig::default()).expect("create");
    let peer = Peer::spawn("pingpong", &name.0);
    let deadline = Instant::now() + TIMEOUT;
    let mut buf = [0u8; 8];
    let warmup = iters / 10 + 1;
    let mut start = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            start = Instant::now();
        }
        let msg = u64::from(i).to_le_bytes();
        send(&mut t, 1, &msg, &[], deadline);
        assert_eq!(recv_one(&mut t, &mut buf, deadline), 8);
        assert_eq!(buf, msg);
    }
    let one_way = start.elapsed() / iters / 2;
    println!("shm pingpong: 8-byte frames, one-way latency {one_way:?} over {iters} round trips");
    send(&mut t, 1, &[0xff; 8], &[], deadline);
    recv_one(&mut t, &mut buf, deadline);
    peer.finish();
}

#[test]
fn wait_and_wake_across_processes() {
    let name = Name::new("wake");
    let mut t = ShmTransport::create(&name.0, 0, 2, &ShmConfig::default()).expect("create");
    allow_ptrace_from_peers().unwrap();
    let peer = Peer::spawn("wake", &name.0);
    let deadline = Instant::now() + TIMEOUT;
    // Sleep on the futex until the child's first frame wakes us.
    let mut frame = Vec::new();
    while frame.is_empty() {
        t.wait(Duration::from_secs(5));
        t.poll(|from, f| {
            assert_eq!(from, 1);
            frame = f.to_vec();
        });
        assert!(Instant::now() < deadline, "no frame from the child");
    }
    assert_eq!(
        std::str::from_utf8(&frame).unwrap(),
        "ready:ok",
        "child's CMA probe"
    );
    assert_eq!(t.peer_pid(1), Some(peer.pid()));
    t.probe_cma(1).expect("CMA probe of the child");
    std::thread::sleep(Duration::from_millis(100));
    t.wake(1);
    let mut buf = [0u8; 8];
    assert_eq!(recv_one(&mut t, &mut buf, deadline), 8);
    let waited = u64::from_le_bytes(buf);
    assert!(waited < 20_000, "child slept {waited} ms despite wake");
    peer.finish();
}

#[test]
fn read_remote_from_a_child_process() {
    let mut peer = Peer::spawn("memory", "");
    let stdout = peer.0.stdout.take().unwrap();
    // Read on a thread so that a silent child fails the test instead of hanging it, and to
    // the end so that the child's later output does not hit a closed pipe. The harness
    // prints "test child ... " on the same line before our output.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("ADDR ") {
                let _ = tx.send(line[at..].to_string());
            }
        }
    });
    let line = rx
        .recv_timeout(TIMEOUT)
        .expect("child prints its buffer address");
    let mut words = line.split_whitespace().skip(1);
    let addr = u64::from_str_radix(words.next().unwrap().trim_start_matches("0x"), 16).unwrap();
    let len: usize = words.next().unwrap().parse().unwrap();
    let expected = pattern(len);

    let mut all = vec![0u8; len];
    read_remote(peer.pid(), addr, &mut all).unwrap();
    assert!(all == expected, "whole-buffer read differs");

    let mut part = vec![0u8; 1001];
    read_remote(peer.pid(), addr + 4097, &mut part).unwrap();
    assert_eq!(part[..], expected[4097..5098]);

    read_remote(peer.pid(), addr, &mut []).unwrap();

    let err = read_remote(peer.pid(), 8, &mut [0u8; 16]).unwrap_err();
    assert!(err.to_string().contains("process_vm_readv"), "{err}");
    peer.finish();
}

#[test]
fn read_remote_from_self() {
    let src = pattern(100_000);
    let mut dst = vec![0u8; src.len()];
    read_remote(std::process::id() as i32, src.as_ptr() as u64, &mut dst).unwrap();
    assert!(dst == src);
}
