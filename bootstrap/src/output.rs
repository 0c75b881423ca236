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

/// Flushes stdout, then waits until the launcher has read everything this process wrote to
/// its stdout and stderr where they are pipes or sockets, for at most `limit`.
pub fn let_drain(limit: Duration) {
    let _ = std::io::stdout().flush();
    let started = Instant::now();
    for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        if !is_pipe_or_socket(fd) {
            continue;
        }
        while unread(fd) > 0 && started.elapsed() < limit {
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

fn is_pipe_or_socket(fd: libc::c_int) -> bool {
    // SAFETY: an all-zero stat is a valid value of the plain C struct, which fstat fills.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one struct stat through the pointer, which points to a live one;
    // on a closed descriptor it fails and writes nothing.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return false;
    }
    matches!(stat.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK)
}

/// Bytes written to `fd` that its reader has not taken yet (0 where that cannot be told).
fn unread(fd: libc::c_int) -> libc::c_int {
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points to a live c_int.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut unread) };
    if rc == 0 {
        unread
    } else {
        0
    }
}
