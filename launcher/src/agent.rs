//! `rsrun --agent`: the small process rsrun starts on each remote host over ssh.
//!
//! It checks what only this host can (the CPUs, the working directory, the program) and reports
//! `Ready`; it starts that host's ranks only at rsrun's `Go`, which comes once every host is
//! ready, so a job that cannot start anywhere starts nowhere. It sends everything rsrun needs
//! to know back over its stdout (the ssh session's stdout) as [`Report`]s, and takes
//! [`Command`]s on its stdin: first the job's secret (kept off every command line), then `Go`,
//! then signals to pass on and rsrun's stdin for rank 0.
//! At end of file on stdin, which is what the remote side sees when rsrun or its ssh client dies
//! (plain ssh does not kill remote processes), it kills its ranks with SIGKILL and exits.
//!
//! rsrun runs the agent as the absolute path of its own executable, so rsrun must be installed
//! at the same path on every host (as mpirun's `--prefix` assumes).

use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::ChildStdin;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::hosts;
use crate::job::remove_shm_segments;
use crate::spawn::binding::{self, Binding};
use crate::spawn::local::{self, LaunchSpec, Slot};
use crate::spawn::workdir;

/// The flag that selects agent mode; it must be rsrun's first argument.
pub const FLAG: &str = "--agent";

/// How long the agent waits for its ranks' last output once they have all exited.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// One message from an agent to rsrun.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Everything this host can check passed; the agent waits for `Command::Go`.
    Ready,
    /// A rank is running, as this pid on the remote host.
    Started { rank: u32, pid: i32 },
    /// One line (or the unterminated last piece) of a rank's stdout or stderr.
    Output {
        rank: u32,
        stderr: bool,
        bytes: Vec<u8>,
    },
    /// A rank ended with this raw wait status.
    Exited { rank: u32, status: i32 },
    /// The ranks could not be started; rsrun exits with `code`.
    Failed { code: i32, message: String },
    /// Something the user should know about this host; rsrun prints it as a warning naming
    /// the host.
    Warning { message: String },
    /// A line rsrun prints on its stderr as it is (`--report-bindings`).
    Note { line: String },
    /// Rank 0 took this many more bytes of the stdin rsrun forwards: rsrun may send more.
    InputTaken { bytes: u32 },
    /// Rank 0 no longer reads its stdin: rsrun stops forwarding it.
    InputClosed,
}

/// Writes one report with a single `write_all`, so reports from different threads sharing the
/// writer under a lock never interleave. Text header line, then a byte payload where there is one.
pub fn write_report(out: &mut impl Write, report: &Report) -> io::Result<()> {
    let mut buf = Vec::new();
    match report {
        Report::Ready => buf.extend(b"R 0 0\n"),
        Report::Started { rank, pid } => buf.extend(format!("S {rank} {pid}\n").bytes()),
        Report::Output {
            rank,
            stderr,
            bytes,
        } => {
            let kind = if *stderr { 'E' } else { 'O' };
            buf.extend(format!("{kind} {rank} {}\n", bytes.len()).bytes());
            buf.extend_from_slice(bytes);
        }
        Report::Exited { rank, status } => buf.extend(format!("X {rank} {status}\n").bytes()),
        Report::InputTaken { bytes } => buf.extend(format!("T {bytes} 0\n").bytes()),
        Report::InputClosed => buf.extend(b"C 0 0\n"),
        Report::Failed { code, message } => {
            buf.extend(format!("F {code} {}\n", message.len()).bytes());
            buf.extend(message.bytes());
        }
        Report::Warning { message: text } | Report::Note { line: text } => {
            let kind = if matches!(report, Report::Warning { .. }) {
                'W'
            } else {
                'N'
            };
            buf.extend(format!("{kind} 0 {}\n", text.len()).bytes());
            buf.extend(text.bytes());
        }
    }
    out.write_all(&buf)?;
    out.flush()
}

/// Reads the next report; None at end of stream.
pub fn read_report(input: &mut impl BufRead) -> io::Result<Option<Report>> {
    let mut header = Vec::new();
    if input.read_until(b'\n', &mut header)? == 0 {
        return Ok(None);
    }
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "malformed report from the agent",
        )
    };
    let text = std::str::from_utf8(&header).map_err(|_| bad())?.trim_end();
    let mut words = text.split(' ');
    let kind = words.next().ok_or_else(bad)?;
    let mut number =
        || -> io::Result<i64> { words.next().and_then(|w| w.parse().ok()).ok_or_else(bad) };
    let (a, b) = (number()?, number()?);
    let rank = u32::try_from(a).map_err(|_| bad());
    let int = |v: i64| i32::try_from(v).map_err(|_| bad());
    let mut payload = |len: i64| -> io::Result<Vec<u8>> {
        let mut bytes = vec![0; usize::try_from(len).map_err(|_| bad())?];
        input.read_exact(&mut bytes)?;
        Ok(bytes)
    };
    Ok(Some(match kind {
        "R" => Report::Ready,
        "S" => Report::Started {
            rank: rank?,
            pid: int(b)?,
        },
        "O" | "E" => Report::Output {
            rank: rank?,
            stderr: kind == "E",
            bytes: payload(b)?,
        },
        "X" => Report::Exited {
            rank: rank?,
            status: int(b)?,
        },
        "F" => Report::Failed {
            code: int(a)?,
            message: String::from_utf8_lossy(&payload(b)?).into_owned(),
        },
        "W" => Report::Warning {
            message: String::from_utf8_lossy(&payload(b)?).into_owned(),
        },
        "N" => Report::Note {
            line: String::from_utf8_lossy(&payload(b)?).into_owned(),
        },
        "T" => Report::InputTaken { bytes: rank? },
        "C" => Report::InputClosed,
        _ => return Err(bad()),
    }))
}

/// One instruction from rsrun to an agent, after the secret line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Every host is ready: start the ranks.
    Go,
    /// Send this signal to every rank.
    Signal(i32),
    /// The next bytes of rsrun's stdin, for rank 0.
    Input(Vec<u8>),
    /// rsrun's stdin ended: close rank 0's.
    InputEnd,
}

/// Writes one command with a single `write_all`: `go`, `signal N` or `input-end` lines, or an
/// `input LEN` line followed by the bytes.
pub fn write_command(out: &mut impl Write, command: &Command) -> io::Result<()> {
    let mut buf = Vec::new();
    match command {
        Command::Go => buf.extend(b"go\n"),
        Command::Signal(sig) => buf.extend(format!("signal {sig}\n").bytes()),
        Command::Input(bytes) => {
            buf.extend(format!("input {}\n", bytes.len()).bytes());
            buf.extend_from_slice(bytes);
        }
        Command::InputEnd => buf.extend(b"input-end\n"),
    }
    out.write_all(&buf)?;
    out.flush()
}

/// Reads the next command; None at end of stream.
pub fn read_command(input: &mut impl BufRead) -> io::Result<Option<Command>> {
    let mut line = String::new();
    if input.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("bad command '{line}'"));
    let line = line.trim_end();
    match line {
        "go" => return Ok(Some(Command::Go)),
        "input-end" => return Ok(Some(Command::InputEnd)),
        _ => {}
    }
    let (word, number) = line.split_once(' ').ok_or_else(bad)?;
    match word {
        "signal" => Ok(Some(Command::Signal(number.parse().map_err(|_| bad())?))),
        "input" => {
            let mut bytes = vec![0; number.parse().map_err(|_| bad())?];
            input.read_exact(&mut bytes)?;
            Ok(Some(Command::Input(bytes)))
        }
        _ => Err(bad()),
    }
}

/// What rsrun tells the agent on its command line (after `--agent`, in this order).
#[derive(Debug, PartialEq, Eq)]
pub struct AgentArgs {
    pub job_id: String,
    pub size: u32,
    pub kvs_port: u16,
    /// How the ranks are pinned; `Binding::Core` travels as a word and takes the agent's CPUs.
    pub binding: Binding,
    /// The ranks this host runs, in local-rank order.
    pub ranks: Vec<u32>,
    /// The directory the ranks should run in, and whether the user named it (`--wdir`), which
    /// makes its absence an error instead of a fallback to the home directory.
    pub wdir: OsString,
    pub wdir_named: bool,
    pub report_bindings: bool,
    pub program: OsString,
    pub args: Vec<OsString>,
}

impl AgentArgs {
    /// The words that follow `--agent` on the remote command line.
    pub fn to_words(&self) -> Vec<OsString> {
        let ranks: Vec<String> = self.ranks.iter().map(u32::to_string).collect();
        let mut flags = Vec::new();
        if self.wdir_named {
            flags.push("wdir");
        }
        if self.report_bindings {
            flags.push("report-bindings");
        }
        let flags = if flags.is_empty() {
            "-".to_string()
        } else {
            flags.join(",")
        };
        let mut words: Vec<OsString> = vec![
            self.job_id.clone().into(),
            self.size.to_string().into(),
            self.kvs_port.to_string().into(),
            self.binding.to_word().into(),
            ranks.join(",").into(),
            flags.into(),
            self.wdir.clone(),
            self.program.clone(),
        ];
        words.extend(self.args.iter().cloned());
        words
    }

    pub fn parse(words: &[OsString]) -> Result<AgentArgs, String> {
        let text = |i: usize| {
            words
                .get(i)
                .and_then(|w| w.to_str())
                .ok_or_else(|| format!("agent argument {i} is missing or not UTF-8"))
        };
        let num = |i: usize| text(i)?.parse::<u32>().map_err(|e| format!("arg {i}: {e}"));
        let ranks = text(4)?
            .split(',')
            .map(|r| r.parse::<u32>().map_err(|e| format!("rank '{r}': {e}")))
            .collect::<Result<_, _>>()?;
        let flags: Vec<&str> = text(5)?.split(',').collect();
        if let Some(unknown) = flags
            .iter()
            .find(|f| !["-", "wdir", "report-bindings"].contains(f))
        {
            return Err(format!("unknown agent flag '{unknown}'"));
        }
        Ok(AgentArgs {
            job_id: text(0)?.to_string(),
            size: num(1)?,
            kvs_port: u16::try_from(num(2)?).map_err(|e| e.to_string())?,
            binding: Binding::from_word(text(3)?)?,
            ranks,
            wdir_named: flags.contains(&"wdir"),
            report_bindings: flags.contains(&"report-bindings"),
            wdir: words.get(6).ok_or("the directory is missing")?.clone(),
            program: words.get(7).ok_or("the program is missing")?.clone(),
            args: words[8..].to_vec(),
        })
    }
}

/// rsrun's address on the route to this host, set in the agent's environment by rsrun.
pub const KVS_HOST: &str = "MPIRT_KVS_HOST";

/// The key-value service's address as seen from this host: the address rsrun gave in
/// `MPIRT_KVS_HOST`, else rsrun's end of the ssh connection (`$SSH_CONNECTION` is
/// "client-ip client-port server-ip server-port"), by construction an address of rsrun's
/// machine that routes here.
pub fn kvs_addr(
    kvs_host: Option<&OsStr>,
    ssh_connection: Option<&OsStr>,
    port: u16,
) -> Result<SocketAddr, String> {
    if let Some(ip) = kvs_host
        .and_then(OsStr::to_str)
        .and_then(|s| s.parse::<IpAddr>().ok())
    {
        return Ok(SocketAddr::new(ip, port));
    }
    let conn = ssh_connection.and_then(OsStr::to_str).ok_or(
        "neither MPIRT_KVS_HOST nor SSH_CONNECTION is set: was the agent started by rsrun?",
    )?;
    let client = conn.split_whitespace().next().unwrap_or("");
    let ip: IpAddr = client
        .parse()
        .map_err(|_| format!("SSH_CONNECTION '{conn}' does not start with an IP address"))?;
    Ok(SocketAddr::new(ip, port))
}

/// Runs the agent with the words after `--agent`; returns its exit code.
pub fn main(words: &[OsString]) -> i32 {
    let out = Arc::new(Mutex::new(io::stdout()));
    let fail = |code: i32, message: String| {
        let _ = write_report(&mut *lock(&out), &Report::Failed { code, message });
        code
    };
    let args = match AgentArgs::parse(words) {
        Ok(args) => args,
        Err(e) => return fail(1, format!("bad agent arguments: {e}")),
    };
    let mut stdin = BufReader::new(io::stdin());
    let mut secret = String::new();
    if stdin.read_line(&mut secret).is_err() || !secret.ends_with('\n') {
        return fail(1, "no job secret on the agent's stdin".into());
    }
    let kvs = match kvs_addr(
        std::env::var_os(KVS_HOST).as_deref(),
        std::env::var_os("SSH_CONNECTION").as_deref(),
        args.kvs_port,
    ) {
        Ok(addr) => addr,
        Err(e) => return fail(1, e),
    };
    let allowed = match binding::allowed_cpus() {
        Ok(cpus) => cpus,
        Err(e) => return fail(1, format!("cannot read CPU affinity: {e}")),
    };
    if let Err(e) = args.binding.check(&args.ranks, &allowed) {
        return fail(1, e);
    }
    let home = std::env::var_os("HOME");
    let place = match workdir::choose(Path::new(&args.wdir), args.wdir_named, home.as_deref()) {
        Ok(place) => place,
        Err(e) => return fail(1, e),
    };
    if let Some(message) = place.fallback {
        let _ = write_report(&mut *lock(&out), &Report::Warning { message });
    }
    // The rank environment came with the agent's own (`env VAR=VALUE rsrun --agent`).
    let path = std::env::var_os("PATH");
    let program = match workdir::resolve(&args.program, &place.dir, path.as_deref()) {
        Ok(program) => program,
        Err(e) => return fail(127, workdir::start_error(&e, None, &place.dir)),
    };
    if write_report(&mut *lock(&out), &Report::Ready).is_err() || !go_ahead(&mut stdin) {
        return 1; // rsrun gave up on the job: another host could not start its ranks
    }
    let spec = LaunchSpec {
        program: &program,
        arg0: &args.program,
        args: &args.args,
        env: &[],
        size: args.size,
        job_id: &args.job_id,
        kvs_addr: kvs.to_string(),
        kvs_secret: secret.trim_end(),
        dir: &place.dir,
        binding: &args.binding,
    };
    let host = hosts::own_hostname();
    let local_size = u32::try_from(args.ranks.len()).unwrap_or(u32::MAX);
    let mut pids = Vec::new();
    let mut rank0_input = None;
    let (done_tx, done_rx) = mpsc::channel();
    let mut streams = 0;
    for (local_rank, &rank) in (0..).zip(&args.ranks) {
        let slot = Slot {
            rank,
            local_rank,
            local_size,
            stdin: rank == 0,
        };
        let process = match local::spawn_rank(&spec, slot) {
            Ok(process) => process,
            Err(e) => {
                kill_all(pids.iter().map(|&(pid, _)| pid), libc::SIGKILL);
                let code = if e.kind() == io::ErrorKind::NotFound {
                    127
                } else {
                    1
                };
                return fail(code, workdir::start_error(&e, Some(&program), &place.dir));
            }
        };
        pids.push((process.pid, rank));
        let mut reports = vec![Report::Started {
            rank,
            pid: process.pid,
        }];
        if args.report_bindings {
            let line = binding::report(&host, rank, process.pid, process.pinned);
            reports.push(Report::Note { line });
        }
        if reports
            .iter()
            .any(|report| write_report(&mut *lock(&out), report).is_err())
        {
            kill_all(pids.iter().map(|&(pid, _)| pid), libc::SIGKILL);
            return 1;
        }
        if let Some(pipe) = process.stdin {
            match feed_stdin(pipe, Arc::clone(&out)) {
                Ok(input) => rank0_input = Some(input),
                // Rank 0 then reads end of file at once; its output still counts.
                Err(e) => {
                    let message = format!("cannot pass stdin on to rank 0: {e}");
                    let _ = write_report(&mut *lock(&out), &Report::Warning { message });
                }
            }
        }
        for (source, stderr) in [
            (Box::new(process.stdout) as Box<dyn Read + Send>, false),
            (Box::new(process.stderr), true),
        ] {
            let (out, done) = (Arc::clone(&out), done_tx.clone());
            let spawned = thread::Builder::new()
                .name(format!("output-{rank}"))
                .spawn(move || {
                    forward_output(source, rank, stderr, &out);
                    let _ = done.send(());
                });
            // Without the thread the rank's output is lost, but the rank still runs.
            if spawned.is_ok() {
                streams += 1;
            }
        }
    }
    let rank_pids: Vec<i32> = pids.iter().map(|&(pid, _)| pid).collect();
    let job_id = args.job_id.clone();
    if let Err(e) = thread::Builder::new()
        .name("commands".into())
        .spawn(move || obey(stdin, &rank_pids, rank0_input, &job_id))
    {
        kill_all(pids.iter().map(|&(pid, _)| pid), libc::SIGKILL);
        return fail(1, format!("cannot start a thread: {e}"));
    }
    if reap(&pids, &out) {
        // This host's ranks are all gone, one of them failed, and the job with it: its files
        // go now, since this agent may exit before rsrun's link ends (its last rank was the
        // one that died) and rsrun removes only its own host's.
        remove_shm_segments(&args.job_id);
    }
    let drain_end = Instant::now() + OUTPUT_DRAIN;
    for _ in 0..streams {
        if done_rx
            .recv_timeout(drain_end.saturating_duration_since(Instant::now()))
            .is_err()
        {
            break;
        }
    }
    0
}

/// Starts the thread that writes rsrun's stdin into rank 0's, so that a rank 0 slow to read
/// never holds up the commands (a signal must get through even then); returns its queue.
/// Dropping the queue closes rank 0's stdin. Each write is acknowledged to rsrun, which keeps
/// only a window of bytes unacknowledged, so the queue stays small however much input there is.
fn feed_stdin(
    mut pipe: ChildStdin,
    out: Arc<Mutex<io::Stdout>>,
) -> io::Result<mpsc::Sender<Vec<u8>>> {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    thread::Builder::new().name("stdin".into()).spawn(move || {
        for bytes in rx {
            let report = if pipe.write_all(&bytes).is_ok() {
                Report::InputTaken {
                    bytes: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
                }
            } else {
                // Rank 0 closed its stdin or exited; the rest of the input has no reader.
                Report::InputClosed
            };
            let closed = report == Report::InputClosed;
            if write_report(&mut *lock(&out), &report).is_err() || closed {
                return;
            }
        }
    })?;
    Ok(tx)
}

/// Sends each line of a rank stream as a report.
fn forward_output(source: impl Read, rank: u32, stderr: bool, out: &Mutex<io::Stdout>) {
    let mut reader = BufReader::with_capacity(64 * 1024, source);
    loop {
        let mut bytes = Vec::new();
        match reader.read_until(b'\n', &mut bytes) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let report = Report::Output {
                    rank,
                    stderr,
                    bytes,
                };
                // rsrun is gone; the stdin watcher is about to kill the ranks.
                if write_report(&mut *lock(out), &report).is_err() {
                    return;
                }
            }
        }
    }
}

/// Waits for rsrun's `Go`; false when rsrun closes the link (or sends what is not its)
/// instead. Nothing else comes before `Go`: stdin and signals are for ranks, which do not
/// exist yet.
fn go_ahead(stdin: &mut impl BufRead) -> bool {
    loop {
        match read_command(stdin) {
            Ok(Some(Command::Go)) => return true,
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return false,
        }
    }
}

/// Carries out rsrun's commands until its stdin ends, then kills the ranks, removes the
/// job's files under /dev/shm (the rsrun that would have may be dead: SIGKILLed, or its host
/// gone) and exits.
fn obey(
    mut stdin: impl BufRead,
    pids: &[i32],
    mut rank0_input: Option<mpsc::Sender<Vec<u8>>>,
    job_id: &str,
) {
    // A malformed command means the stream is not rsrun's: treated as the end of it.
    while let Ok(Some(command)) = read_command(&mut stdin) {
        match command {
            Command::Go => {}
            Command::Signal(sig) => kill_all(pids.iter().copied(), sig),
            Command::Input(bytes) => {
                // A send fails once rank 0 stopped reading; the bytes are dropped, as a pipe
                // with no reader would.
                if let Some(input) = &rank0_input {
                    let _ = input.send(bytes);
                }
            }
            Command::InputEnd => rank0_input = None,
        }
    }
    kill_all(pids.iter().copied(), libc::SIGKILL);
    remove_shm_segments(job_id);
    std::process::exit(1);
}

/// Reports each rank's exit until all have exited; says whether any failed (a non-zero exit
/// or a signal).
fn reap(pids: &[(i32, u32)], out: &Mutex<io::Stdout>) -> bool {
    let mut left = pids.len();
    let mut failed = false;
    while left > 0 {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid place for waitpid to store the wait status.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return failed; // ECHILD: nothing left to wait for
        }
        if let Some(&(_, rank)) = pids.iter().find(|(p, _)| *p == pid) {
            left -= 1;
            failed |= status != 0;
            let _ = write_report(&mut *lock(out), &Report::Exited { rank, status });
        }
    }
    failed
}

/// Signals each rank's process group (each rank leads one, see `spawn::local`).
fn kill_all(pids: impl IntoIterator<Item = i32>, sig: libc::c_int) {
    for pid in pids {
        // SAFETY: kill has no memory-safety preconditions; a vanished group gives ESRCH.
        unsafe {
            libc::kill(-pid, sig);
        }
    }
}

/// Locks the report writer; a thread that panicked mid-report cannot have left it half-written
/// in a way the lock could repair, so poisoning is ignored.
fn lock(out: &Mutex<io::Stdout>) -> std::sync::MutexGuard<'_, io::Stdout> {
    out.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        let reports = [
            Report::Ready,
            Report::Started { rank: 5, pid: 1234 },
            Report::Output {
                rank: 5,
                stderr: false,
                bytes: b"a line\n".to_vec(),
            },
            Report::Output {
                rank: 0,
                stderr: true,
                bytes: b"X 1 2\nno newline \xff".to_vec(),
            },
            Report::Exited { rank: 5, status: 9 },
            Report::Failed {
                code: 127,
                message: "No such file\nor directory".into(),
            },
            Report::Warning {
                message: "dir /x\nis missing".into(),
            },
            Report::Note {
                line: "[h:1] MCW rank 0 bound to CPU 0: [B]".into(),
            },
            Report::InputTaken { bytes: 65536 },
            Report::InputClosed,
        ];
        let mut buf = Vec::new();
        for r in &reports {
            write_report(&mut buf, r).unwrap();
        }
        let mut input = &buf[..];
        for r in &reports {
            assert_eq!(read_report(&mut input).unwrap().as_ref(), Some(r));
        }
        assert_eq!(read_report(&mut input).unwrap(), None);
        assert!(read_report(&mut &b"Q 1 2\n"[..]).is_err());
    }

    #[test]
    fn agent_arguments_round_trip() {
        let args = AgentArgs {
            job_id: "abc".into(),
            size: 8,
            kvs_port: 4000,
            binding: Binding::Cpus(vec![vec![0, 1], vec![3]]),
            ranks: vec![1, 5],
            wdir: "/work/dir with space".into(),
            wdir_named: true,
            report_bindings: true,
            program: "/bin/prog".into(),
            args: vec!["-n".into(), "".into()],
        };
        assert_eq!(AgentArgs::parse(&args.to_words()).unwrap(), args);
        let plain = AgentArgs {
            binding: Binding::None,
            wdir_named: false,
            report_bindings: false,
            ..args
        };
        assert_eq!(plain.to_words()[5], "-");
        assert_eq!(AgentArgs::parse(&plain.to_words()).unwrap(), plain);
        assert!(AgentArgs::parse(&[]).is_err());
    }

    #[test]
    fn commands_round_trip() {
        let commands = [
            Command::Go,
            Command::Signal(15),
            Command::Input(b"line\ninput 3\n\xff".to_vec()),
            Command::Input(Vec::new()),
            Command::InputEnd,
        ];
        let mut buf = Vec::new();
        for c in &commands {
            write_command(&mut buf, c).unwrap();
        }
        let mut input = &buf[..];
        for c in &commands {
            assert_eq!(read_command(&mut input).unwrap().as_ref(), Some(c));
        }
        assert_eq!(read_command(&mut input).unwrap(), None);
        assert!(read_command(&mut &b"reboot now\n"[..]).is_err());
    }

    #[test]
    fn kvs_address_comes_from_the_ssh_connection() {
        let v4 = kvs_addr(None, Some(OsStr::new("10.77.0.1 5555 10.77.0.12 22")), 7).unwrap();
        assert_eq!(v4.to_string(), "10.77.0.1:7");
        let v6 = kvs_addr(None, Some(OsStr::new("fe80::1 5555 fe80::2 22")), 7).unwrap();
        assert_eq!(v6.to_string(), "[fe80::1]:7");
        assert!(kvs_addr(None, None, 7).is_err());
        assert!(kvs_addr(None, Some(OsStr::new("garbage")), 7).is_err());
        let given = kvs_addr(Some(OsStr::new("10.77.0.1")), None, 7).unwrap();
        assert_eq!(given.to_string(), "10.77.0.1:7");
    }
}
