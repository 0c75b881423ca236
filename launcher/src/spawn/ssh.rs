//! Starting a remote host's ranks: `ssh HOST env VAR=VALUE... /path/to/rsrun --agent ...`.
//!
//! The agent (see [`crate::agent`]) reports over the ssh session's stdout; a reader thread here
//! turns its reports into job events and writes the ranks' output lines. The ssh client's stdin
//! carries rsrun's commands (signals, stdin for rank 0) and stays open for the whole job:
//! closing it (or rsrun dying) is how the agent learns to kill its ranks.

use std::ffi::{OsStr, OsString};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use crate::agent::{self, AgentArgs, Command as AgentCommand, Report};
use crate::job::Event;
use crate::output::{Outputs, Sink};

/// How long ssh may take to connect. Short, so that an unreachable host is reported quickly.
const CONNECT_TIMEOUT_S: u32 = 5;

/// How one job reaches its remote hosts.
pub struct SshSpec<'a> {
    /// The launch agent and its arguments: `ssh`, then `--ssh-args`.
    pub command: &'a [String],
    /// rsrun's own absolute path, which must be the same on every host.
    pub rsrun: &'a Path,
    /// Set in the agent's environment, and so every remote rank's.
    pub env: &'a [(String, OsString)],
    pub secret: &'a str,
    pub outputs: &'a Arc<Outputs>,
}

/// What rsrun sends down an agent link.
#[derive(Debug)]
pub enum ToAgent {
    Command(AgentCommand),
    /// Close the link: the agent then kills its ranks and exits.
    HangUp,
}

/// A running agent: the ssh client's pid (it leads its own process group) and the queue of
/// what to send it. A thread of its own writes the queue into the ssh client's stdin, so that
/// neither the job's supervisor nor the stdin reader ever blocks on a stalled connection.
pub struct Agent {
    pub pid: libc::pid_t,
    pub link: mpsc::Sender<ToAgent>,
    /// What the agent says of the stdin it passes on to rank 0, if rank 0 runs there:
    /// `InputTaken` and `InputClosed` reports. Ends when the agent does.
    pub input_acks: mpsc::Receiver<Report>,
}

/// Starts the agent for host number `host` (named `name`), which runs the ranks `args.ranks`.
pub fn start_agent(
    spec: &SshSpec<'_>,
    host: usize,
    name: &str,
    args: &AgentArgs,
    events: mpsc::Sender<Event>,
) -> io::Result<Agent> {
    let (program, launcher_args) = spec
        .command
        .split_first()
        .ok_or_else(|| io::Error::other("the launch agent command is empty"))?;
    let mut cmd = Command::new(program);
    cmd.args(launcher_args);
    if Path::new(program).file_name() == Some(OsStr::new("ssh")) {
        // After the user's arguments: for ssh the first value given wins, so theirs do. No
        // password prompts (they would hang a batch job), no pty (it would merge stderr into
        // stdout), no X11.
        cmd.args(["-o", "BatchMode=yes", "-T", "-x", "-o"])
            .arg(format!("ConnectTimeout={CONNECT_TIMEOUT_S}"));
    }
    cmd.arg(name);
    if Path::new(program).file_name() == Some(OsStr::new("srun")) {
        // srun runs a program, not a shell command line.
        cmd.args(["sh", "-c"]);
    }
    let mut env = spec.env.to_vec();
    if let Some(ip) = route_from_here(name) {
        // The agent's end of an srun has no SSH_CONNECTION to find rsrun by.
        env.push((agent::KVS_HOST.to_string(), ip.to_string().into()));
    }
    cmd.arg(remote_command(spec.rsrun, &env, args))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Ctrl-C at a terminal goes to rsrun alone, which forwards it through the agents.
        .process_group(0);
    let unblock = crate::signals::forwarded_set();
    // SAFETY: runs in the forked child before exec; pthread_sigmask is async-signal-safe and
    // the set was built in the parent. rsrun's blocked signals must not stay blocked in ssh.
    unsafe {
        cmd.pre_exec(move || {
            match libc::pthread_sigmask(libc::SIG_UNBLOCK, &unblock, std::ptr::null_mut()) {
                0 => Ok(()),
                rc => Err(io::Error::from_raw_os_error(rc)),
            }
        });
    }
    let mut child = cmd.spawn()?;
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| io::Error::other("child pid out of range"))?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(io::Error::other("ssh stdio pipes missing"));
    };
    // The secret goes over the session, never on a command line where `ps` shows it. A small
    // write to a fresh pipe does not block; if ssh already died, the reader reports it.
    let _ = stdin.write_all(format!("{}\n", spec.secret).as_bytes());
    let link = start_writer(stdin, host)?;
    let (err_tx, err_rx) = mpsc::channel();
    thread::Builder::new()
        .name(format!("ssh-stderr-{host}"))
        .spawn(move || {
            let mut text = Vec::new();
            let _ = BufReader::new(stderr).read_to_end(&mut text);
            let _ = err_tx.send(String::from_utf8_lossy(&text).trim().to_string());
        })?;
    let outputs = Arc::clone(spec.outputs);
    let host_name = name.to_string();
    let (acks, input_acks) = mpsc::channel();
    thread::Builder::new()
        .name(format!("ssh-{host}"))
        .spawn(move || {
            let mut reports = BufReader::with_capacity(64 * 1024, stdout);
            while let Ok(Some(report)) = agent::read_report(&mut reports) {
                let event = match report {
                    Report::Started { rank, pid } => Event::RemoteStarted { rank, pid },
                    Report::Output {
                        rank,
                        stderr,
                        bytes,
                    } => {
                        let sink = if stderr { Sink::Stderr } else { Sink::Stdout };
                        // A write error means rsrun's own output is gone; the line is dropped.
                        let _ = outputs.write(rank, sink, &bytes);
                        continue;
                    }
                    Report::Warning { message } => {
                        eprintln!("rsrun: warning: {host_name}: {message}");
                        continue;
                    }
                    Report::Note { line } => {
                        eprintln!("{line}");
                        continue;
                    }
                    Report::InputTaken { .. } | Report::InputClosed => {
                        // Nobody listens unless rank 0 runs there and rsrun forwards stdin.
                        let _ = acks.send(report);
                        continue;
                    }
                    Report::Exited { rank, status } => Event::RemoteExited { rank, status },
                    Report::Failed { code, message } => Event::AgentFailed {
                        host,
                        code,
                        message,
                    },
                };
                if events.send(event).is_err() {
                    return;
                }
            }
            // ssh closes both streams as it exits; a stuck stderr must not delay the news.
            let stderr = err_rx
                .recv_timeout(Duration::from_secs(1))
                .unwrap_or_default();
            let _ = events.send(Event::AgentGone { host, stderr });
        })?;
    Ok(Agent {
        pid,
        link,
        input_acks,
    })
}

/// Starts the thread that writes what is queued for an agent into its ssh client's stdin, and
/// closes that at `HangUp` or when every sender is gone.
fn start_writer(mut stdin: ChildStdin, host: usize) -> io::Result<mpsc::Sender<ToAgent>> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name(format!("ssh-stdin-{host}"))
        .spawn(move || {
            for item in rx {
                match item {
                    // A failed write means the agent is gone, and its ranks with it; what is
                    // still queued has nowhere to go.
                    ToAgent::Command(command) => {
                        if agent::write_command(&mut stdin, &command).is_err() {
                            return;
                        }
                    }
                    ToAgent::HangUp => return,
                }
            }
        })?;
    Ok(tx)
}

/// This machine's address on the route to `host`: connecting a UDP socket sends nothing, but
/// makes the kernel choose the source address it would use.
fn route_from_here(host: &str) -> Option<std::net::IpAddr> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let target = (host, 9).to_socket_addrs().ok()?.next()?;
    let any = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = UdpSocket::bind(any).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// The command line the remote login shell runs, every word quoted for it:
/// `env VAR=VALUE... /path/to/rsrun --agent AGENT-ARGS...`.
pub fn remote_command(rsrun: &Path, env: &[(String, OsString)], args: &AgentArgs) -> OsString {
    let mut words: Vec<OsString> = vec!["env".into()];
    for (name, value) in env {
        let mut word = OsString::from(format!("{name}="));
        word.push(value);
        words.push(word);
    }
    words.push(rsrun.into());
    words.push(agent::FLAG.into());
    words.extend(args.to_words());
    let mut line = Vec::new();
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            line.push(b' ');
        }
        line.extend(shell_quote(word));
    }
    OsString::from_vec(line)
}

/// Quotes one word for a POSIX shell (sh, bash, zsh): words of only safe characters stay as
/// they are, anything else goes in single quotes, where nothing is special but the quote itself,
/// written `'\''`. Newlines survive inside single quotes; the empty word becomes `''`.
pub fn shell_quote(word: &OsStr) -> Vec<u8> {
    let bytes = word.as_bytes();
    let safe = |b: &u8| b.is_ascii_alphanumeric() || b"_-./,:=@%+".contains(b);
    if !bytes.is_empty() && bytes.iter().all(safe) {
        return bytes.to_vec();
    }
    let mut quoted = vec![b'\''];
    for &b in bytes {
        if b == b'\'' {
            quoted.extend_from_slice(b"'\\''");
        } else {
            quoted.push(b);
        }
    }
    quoted.push(b'\'');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    const NASTY: [&str; 12] = [
        "plain",
        "",
        "two words",
        "it's",
        "\"double\"",
        "$HOME ${x} $(id) `id`",
        "back\\slash\\",
        "new\nline",
        "*.rs ? [a]",
        "semi; colon & amp | pipe > gt",
        "'",
        "~tilde #hash !bang",
    ];

    #[test]
    fn quoting_keeps_safe_words_and_quotes_the_rest() {
        assert_eq!(shell_quote(OsStr::new("a-b/c.d=e")), b"a-b/c.d=e");
        assert_eq!(shell_quote(OsStr::new("")), b"''");
        assert_eq!(shell_quote(OsStr::new("it's")), b"'it'\\''s'");
        assert_eq!(shell_quote(OsStr::new("$x")), b"'$x'");
    }

    /// Each shell reads the quoted words back as exactly the original words.
    #[test]
    fn shells_read_quoted_words_back_exactly() {
        let mut script = b"printf '%s\\0'".to_vec();
        for word in NASTY {
            script.push(b' ');
            script.extend(shell_quote(OsStr::new(word)));
        }
        script.extend(b" non-utf8-follows ");
        script.extend(shell_quote(OsStr::from_bytes(b"\xff\xfe")));
        for shell in ["sh", "bash"] {
            let out = Command::new(shell)
                .arg("-c")
                .arg(OsStr::from_bytes(&script))
                .output()
                .unwrap();
            assert!(out.status.success(), "{shell}");
            let words: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
            let mut expected: Vec<&[u8]> = NASTY.iter().map(|w| w.as_bytes()).collect();
            expected.extend([&b"non-utf8-follows"[..], b"\xff\xfe", b""]);
            assert_eq!(words, expected, "{shell}");
        }
    }

    #[test]
    fn remote_command_quotes_environment_and_arguments() {
        let args = AgentArgs {
            job_id: "j".into(),
            size: 2,
            kvs_port: 9,
            binding: crate::spawn::binding::Binding::None,
            ranks: vec![0, 1],
            wdir: "/w".into(),
            wdir_named: false,
            report_bindings: false,
            program: "/bin/echo".into(),
            args: vec!["a b".into(), "".into()],
        };
        let env = [("V".to_string(), OsString::from("x y'z"))];
        let line = remote_command(Path::new("/opt/rs run"), &env, &args);
        assert_eq!(
            line,
            "env 'V=x y'\\''z' '/opt/rs run' --agent j 2 9 none 0,1 - /w /bin/echo 'a b' ''"
        );
    }
}
