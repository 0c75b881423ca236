//! A stranger to a running two-rank TCP job (the `stepwise` example): it knows the job id and
//! the protocol, not the job's secret. It dials rank 1 as rank 0 with the hello that used to
//! be enough (magic, a hash of the job id, a rank), with a hello of the present protocol and a
//! guessed proof, and with a hello and proof recorded (by strace) from rank 0's genuine dial,
//! and it holds a connection open saying nothing. Each must be refused without a byte of
//! answer past the challenge, and the job must end normally with the right answer. Or it
//! floods both ranks with connections while they connect to each other (`flood_against`).

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::{example, finish, scratch_dir, start, Run};

/// Generous: the machine may be shared and slow. The ranks drop a silent dialler after 10 s.
const PATIENCE: Duration = Duration::from_secs(40);
const HELLO_LEN: usize = 32;
const CHALLENGE_LEN: usize = 48;
const PROOF_LEN: usize = 32;

/// A rank of the running job, as the stranger finds it.
struct Rank {
    pid: u32,
    host: String,
}

/// Plays the stranger against two ranks of `stepwise` over TCP started by `launcher` (a
/// command with its arguments up to the program: srun, mpiexec.hydra), in a scratch directory
/// named after `name`.
pub fn play_against_launcher(mut launcher: Command, name: &str) {
    let dir = scratch_dir(name);
    launcher
        .arg(example("stepwise"))
        .arg(&dir)
        .arg("2")
        .env("MPIRT_TRANSPORT", "tcp")
        .env("MPIRT_VERBOSE", "1");
    play_against(&mut launcher, &dir);
    let _ = fs::remove_dir_all(&dir);
}

/// Runs `job` (which starts `stepwise DIR 2` on two ranks over TCP, verbose) while playing the
/// stranger against it, and checks that it ended well; returns the run.
pub fn play_against(job: &mut Command, dir: &Path) -> Run {
    let (child, _) = start(job, b"");
    let mut job = Running(Some(child));
    let rank0 = wait_for_rank(dir, 0);
    let rank1 = wait_for_rank(dir, 1);
    let job_id = job_id_of(rank1.pid);
    let target = listening_address(&rank1);
    println!(
        "stranger: job {job_id}, rank 1 (pid {}) listens at {target}",
        rank1.pid
    );

    // The earlier hello: magic, FNV-1a of the job id, the rank claimed.
    let token = job_id.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let mut old = b"mpirt-tc".to_vec();
    old.extend_from_slice(&token.to_le_bytes());
    old.extend_from_slice(&0u32.to_le_bytes());
    refused_unanswered(&mut dial(target, &old));

    // A present hello as rank 0, then a guessed proof.
    let mut guess = dial(target, &hello(0, 1, [0x5a; 16]));
    let _challenge = read_exactly(&mut guess, CHALLENGE_LEN);
    guess.write_all(&[0u8; PROOF_LEN]).unwrap();
    refused_unanswered(&mut guess);

    // Silent from the start.
    let mut silent = dial(target, &[]);

    // Rank 0's genuine dial, recorded, then replayed.
    let recorder = Recorder::attach(rank0.pid, dir);
    fs::write(dir.join("go.0"), b"").unwrap();
    match recorder {
        Some(recorder) => {
            let (hello, proof) = recorder.handshake();
            let mut replay = dial(target, &hello);
            let _challenge = read_exactly(&mut replay, CHALLENGE_LEN);
            replay.write_all(&proof).unwrap();
            refused_unanswered(&mut replay);
        }
        None => println!("stranger: replay SKIPPED: no strace here to record a handshake"),
    }

    refused_unanswered(&mut silent);
    fs::write(dir.join("go.1"), b"").unwrap();
    let r = finish(job.0.take().unwrap(), Instant::now());
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&stepwise_result(2)), "{}", r.stdout);
    for why in [
        "not an mpirt handshake",
        "wrong proof of the job's secret",
        "said nothing within the handshake deadline",
    ] {
        let named = r
            .stderr
            .lines()
            .any(|l| l.starts_with("mpirt: rank 1: refused a connection from ") && l.contains(why));
        assert!(named, "'{why}' not named:\n{}", r.stderr);
    }
    r
}

/// Connections a rank of two keeps in the handshake at once at most (one per peer and 64
/// more); a flood makes more, so that the rank must evict some.
const HANDSHAKES_KEPT: usize = 2 + 64;
/// Connections a flooding stranger holds open at each rank at once.
const FLOOD_HELD: usize = 200;

/// Runs `job` (as for `play_against`) while a stranger floods both ranks with connections
/// that stay silent or say something that is no hello, from before the ranks connect to each
/// other until the job ends; checks that it ended well, and that the flood crowded rank 1.
pub fn flood_against(job: &mut Command, dir: &Path) -> Run {
    let (child, _) = start(job, b"");
    let mut job = Running(Some(child));
    let targets = [wait_for_rank(dir, 0), wait_for_rank(dir, 1)].map(|r| listening_address(&r));
    let stop = Arc::new(AtomicBool::new(false));
    let floods: Vec<_> = targets
        .iter()
        .map(|&target| {
            let stop = stop.clone();
            thread::spawn(move || flood(target, &stop))
        })
        .collect();
    // Flooding before the ranks dial each other, and on while they do.
    let flooding = |floods: &[thread::JoinHandle<usize>]| {
        thread::sleep(Duration::from_millis(300));
        assert!(floods.iter().all(|f| !f.is_finished()), "a flood stopped");
    };
    flooding(&floods);
    fs::write(dir.join("go.0"), b"").unwrap();
    flooding(&floods);
    fs::write(dir.join("go.1"), b"").unwrap();
    let r = finish(job.0.take().unwrap(), Instant::now());
    stop.store(true, Ordering::Relaxed);
    let dialled: Vec<usize> = floods.into_iter().map(|f| f.join().unwrap()).collect();
    println!("stranger: {dialled:?} connections to ranks 0 and 1");
    assert_eq!(r.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&stepwise_result(2)), "{}", r.stdout);
    // A rank outside the library meanwhile (rank 0 waits for the go-ahead files) takes no
    // more than its listener's backlog.
    assert!(dialled.iter().all(|&n| n > HANDSHAKES_KEPT), "{dialled:?}");
    assert!(
        r.stderr
            .contains("evicted from too many connections in the handshake at once"),
        "the flood never crowded a rank:\n{}",
        r.stderr
    );
    r
}

/// Dials `target` until `stop`, holding the last `FLOOD_HELD` connections open; every
/// tenth says something that is no hello. Returns how many it made.
fn flood(target: SocketAddr, stop: &AtomicBool) -> usize {
    let mut held = std::collections::VecDeque::new();
    let mut made = 0;
    while !stop.load(Ordering::Relaxed) {
        // The rank may have ended already; the job's result says whether that was right.
        if let Ok(mut s) = TcpStream::connect_timeout(&target, Duration::from_secs(1)) {
            made += 1;
            if made % 10 == 0 {
                let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
            }
            held.push_back(s);
            if held.len() > FLOOD_HELD {
                held.pop_front();
            }
        }
        thread::sleep(Duration::from_millis(1));
    }
    made
}

/// What `stepwise` prints after `rounds` rounds: byte i of round r is i * 7 + r, modulo 256.
fn stepwise_result(rounds: u32) -> String {
    let sum: u64 = (0..rounds)
        .flat_map(|r| (0..4096u32).map(move |i| u64::from((i * 7 + r) as u8)))
        .sum();
    format!("stepwise: {rounds} rounds, sum {sum}, expected {sum}")
}

/// The job, killed if the stranger's play fails before it ends.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn hello(from: u32, to: u32, nonce: [u8; 16]) -> Vec<u8> {
    let mut h = b"mpirt-h1".to_vec();
    h.extend_from_slice(&from.to_le_bytes());
    h.extend_from_slice(&to.to_le_bytes());
    h.extend_from_slice(&nonce);
    assert_eq!(h.len(), HELLO_LEN);
    h
}

fn dial(target: SocketAddr, first: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&target, Duration::from_secs(10)).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(first).unwrap();
    s
}

fn read_exactly(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("no {n}-byte challenge from rank 1: {e}"));
    buf
}

/// The rank closes the connection without another byte.
fn refused_unanswered(s: &mut TcpStream) {
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => {}
        // A reset (the rank closed with our bytes unread) is a refusal too.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the stranger's connection was not closed: {e}"),
    }
    assert!(rest.is_empty(), "the stranger was answered: {rest:?}");
}

fn wait_for_rank(dir: &Path, rank: u32) -> Rank {
    let file = dir.join(format!("rank{rank}"));
    let started = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(&file) {
            if let Some((pid, host)) = text.split_once(' ') {
                return Rank {
                    pid: pid.parse().unwrap(),
                    host: host.to_string(),
                };
            }
        }
        assert!(started.elapsed() < PATIENCE, "rank {rank} never started");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The job id as `ps` shows it on the agents' command lines (here from the rank's
/// environment, which holds the same): rsrun's, or Slurm's job and step.
fn job_id_of(pid: u32) -> String {
    let environ = fs::read(format!("/proc/{pid}/environ")).unwrap();
    let var = |name: &str| {
        environ.split(|&b| b == 0).find_map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            entry.strip_prefix(&format!("{name}=")).map(str::to_string)
        })
    };
    var("MPIRT_JOB_ID").unwrap_or_else(|| {
        format!(
            "slurm-{}-{}",
            var("SLURM_JOB_ID").unwrap_or_default(),
            var("SLURM_STEP_ID").unwrap_or_default()
        )
    })
}

/// The inodes of the sockets process `pid` holds open.
fn socket_inodes(pid: u32) -> Vec<String> {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(|fd| fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(
                link.strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect()
}

/// Where rank 1 listens for its peers: its one listening TCP socket (as `ss -ltnp` shows it),
/// on its host's address. A socket its parent holds too is the launcher's, inherited (Hydra's
/// proxy leaks its own listening socket into the ranks), not the rank's.
fn listening_address(rank: &Rank) -> SocketAddr {
    let stat = fs::read_to_string(format!("/proc/{}/stat", rank.pid)).unwrap();
    // The parent's pid is the second field after the command's closing parenthesis.
    let parent: u32 = stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let inherited = socket_inodes(parent);
    let inodes: Vec<String> = socket_inodes(rank.pid)
        .into_iter()
        .filter(|inode| !inherited.contains(inode))
        .collect();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = fs::read_to_string(format!("/proc/{}/net/{table}", rank.pid)).unwrap();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // st 0A is LISTEN; the local address ends in the port, in hex.
            if fields.len() > 9 && fields[3] == "0A" && inodes.iter().any(|i| i == fields[9]) {
                let port = fields[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    assert_eq!(ports.len(), 1, "rank 1 listens on {ports:?}");
    let own = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    if rank.host == own.trim() {
        return SocketAddr::from(([127, 0, 0, 1], ports[0]));
    }
    (rank.host.as_str(), ports[0])
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap()
}

/// strace on rank 0, recording what it sends: its hello and proof among it.
struct Recorder {
    strace: Child,
    log: PathBuf,
}

impl Recorder {
    fn attach(pid: u32, dir: &Path) -> Option<Recorder> {
        let log = dir.join("strace.log");
        let strace = Command::new("strace")
            .args(["-f", "-e", "trace=write,sendto", "-xx", "-s", "64", "-o"])
            .arg(&log)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // Attached once the kernel names a tracer.
        let started = Instant::now();
        while !fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .any(|l| l.starts_with("TracerPid:") && l.trim_end() != "TracerPid:\t0")
        {
            assert!(
                started.elapsed() < PATIENCE,
                "strace never attached to rank 0"
            );
            thread::sleep(Duration::from_millis(10));
        }
        Some(Recorder { strace, log })
    }

    /// Waits until rank 0 wrote its hello and its proof; returns them and stops tracing.
    fn handshake(mut self) -> (Vec<u8>, Vec<u8>) {
        let started = Instant::now();
        let found = loop {
            let log = fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(found) = hello_and_proof(&log) {
                break found;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "rank 0 wrote no handshake:\n{log}"
            );
            thread::sleep(Duration::from_millis(10));
        };
        // Our own child; stopping it detaches it from rank 0.
        let _ = self.strace.kill();
        let _ = self.strace.wait();
        found
    }
}

/// From strace lines like `123 sendto(7, "\x6d\x70...", 32, MSG_NOSIGNAL, NULL, 0) = 32`:
/// the send that starts with the hello's magic, and the next 32-byte send on its descriptor.
fn hello_and_proof(log: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let writes: Vec<(String, Vec<u8>)> = log
        .lines()
        .filter_map(|line| {
            let call = ["sendto(", "write("]
                .iter()
                .find_map(|name| Some(&line[line.find(name)? + name.len()..]))?;
            let (fd, rest) = call.split_once(", \"")?;
            let hex = &rest[..rest.find('"')?];
            let bytes = hex
                .split("\\x")
                .skip(1)
                .map(|b| u8::from_str_radix(b, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            Some((fd.to_string(), bytes))
        })
        .collect();
    let at = writes
        .iter()
        .position(|(_, b)| b.len() == HELLO_LEN && b.starts_with(b"mpirt-h1"))?;
    let fd = &writes[at].0;
    let proof = writes[at + 1..]
        .iter()
        .find(|(f, b)| f == fd && b.len() == PROOF_LEN)?;
    Some((writes[at].1.clone(), proof.1.clone()))
}
