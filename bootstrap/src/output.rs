//! A rank's words on stderr, whole, and an aborting rank's last words: a launcher that ends the job when told of an abort (Hydra,
//! Slurm) kills the ranks at once, and what a rank wrote to its stdout and stderr pipes just
//! before, which the launcher had not read yet, was lost (under Hydra, most runs of a fatal
//! error printed nothing at all).

use std::io::Write;
use std::time::{Duration, Instant};

/// Writes `line` and a newline to stderr in one write: `eprintln!` writes each piece of its
/// format on its own, and a launcher that passes on what it reads as it comes (Hydra) can
/// put another rank's words inside this rank's line.
pub fn say(line: &str) {
    let mut text = String::with_capacity(line.len() + 1);
    text.push_str(line);
    text.push('\n');
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// Flushes stdout, then waits until what this process wrote to its stdout and stderr has left
/// it (what `unsent` counts), for at most `limit`.
pub fn let_drain(limit: Duration) {
    let _ = std::io::stdout().flush();
    let started = Instant::now();
    for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        while unsent(fd) > 0 && started.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// How long the launcher is given to pass on what it read before it hears of the abort.
const PASS_ON: Duration = Duration::from_millis(100);

/// Lets the launcher take this process's last words before it is told of an abort: waits as
/// [`let_drain`] does, then closes stdout and stderr (pointing them at /dev/null), so that the
/// launcher sees their end and passes on what it holds (Slurm's step daemon forwards it to srun;
/// an abort that reached srun first cancelled the step with the words unsent).
pub fn hand_over(limit: Duration) {
    let_drain(limit);
    // SAFETY: open(2) with a NUL-terminated path; the descriptor it returns is ours alone.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY) };
    if null < 0 {
        return;
    }
    for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 onto the standard descriptors, which the process no longer writes
        // through Rust's buffered stdout (flushed above) and which stay open, on /dev/null.
        unsafe { libc::dup2(null, fd) };
    }
    // SAFETY: `null` was opened above and is not used again.
    unsafe { libc::close(null) };
    std::thread::sleep(PASS_ON);
}

/// How much of what was written to `fd` its reader has not taken yet, as the kernel counts it
/// (0 where that cannot be told): a pipe's content (`FIONREAD`, which on a pipe counts the one
/// buffer both ends share); a socket's send queue (`SIOCOUTQ`: on a Unix socket what the peer
/// has not read, on TCP what the peer has not acknowledged), where `FIONREAD` would count what
/// this end has to read; a terminal's output queue (`TIOCOUTQ`; Linux's pseudo-terminals keep
/// none of their own and say 0, so under a launcher that gives ranks a pty, as Open MPI's may,
/// only the pause of [`hand_over`] is left).
fn unsent(fd: libc::c_int) -> libc::c_int {
    // SAFETY: an all-zero stat is a valid value of the plain C struct, which fstat fills.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one struct stat through the pointer, which points to a live one;
    // on a closed descriptor it fails and writes nothing.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return 0;
    }
    // Linux's SIOCOUTQ is TIOCOUTQ (linux/sockios.h), which libc names only so.
    let request = match stat.st_mode & libc::S_IFMT {
        libc::S_IFIFO => libc::FIONREAD,
        libc::S_IFSOCK => libc::TIOCOUTQ,
        // SAFETY: isatty only looks at the descriptor.
        libc::S_IFCHR if unsafe { libc::isatty(fd) } == 1 => libc::TIOCOUTQ,
        _ => return 0,
    };
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD and TIOCOUTQ write one int through the pointer, which points to a live
    // c_int.
    let rc = unsafe { libc::ioctl(fd, request, &mut queued) };
    if rc == 0 {
        queued
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_socket_counts_what_its_peer_has_not_read() {
        // A launcher that reads its ranks' output from sockets (Slurm's step daemon, Hydra
        // with some options): what this end wrote waits in its send queue, not its receive
        // queue, which FIONREAD would have counted (always 0 here).
        let (mut rank, mut launcher) = UnixStream::pair().unwrap();
        assert_eq!(unsent(rank.as_raw_fd()), 0);
        rank.write_all(b"last words\n").unwrap();
        assert!(unsent(rank.as_raw_fd()) > 0);
        let mut got = [0u8; 11];
        launcher.read_exact(&mut got).unwrap();
        assert_eq!(unsent(rank.as_raw_fd()), 0);
        // What the launcher sends this end is no output of the rank's.
        launcher.write_all(b"input").unwrap();
        assert_eq!(unsent(rank.as_raw_fd()), 0);
    }

    #[test]
    fn a_pipe_counts_what_its_reader_has_not_read() {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the live array, ours to close below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: writes 5 bytes from a live buffer into the pipe just made.
        assert_eq!(
            unsafe { libc::write(fds[1], b"words".as_ptr().cast(), 5) },
            5
        );
        assert_eq!(unsent(fds[1]), 5);
        let mut got = [0u8; 5];
        // SAFETY: reads into a live buffer of its length from the pipe just made.
        assert_eq!(unsafe { libc::read(fds[0], got.as_mut_ptr().cast(), 5) }, 5);
        assert_eq!(unsent(fds[1]), 0);
        for fd in fds {
            // SAFETY: both were made above and are not used again.
            unsafe { libc::close(fd) };
        }
    }
}
