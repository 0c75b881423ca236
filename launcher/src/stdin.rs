//! rsrun's own stdin, read only while rsrun may read it.
//!
//! A job started in the background of an interactive shell (`rsrun ... > out &`) shares the
//! terminal with the shell: reading it there makes the kernel stop rsrun with SIGTTIN ("Stopped
//! (tty input)"), and the job with it. Open MPI reads stdin only when it is not a terminal or
//! mpirun is in the terminal's foreground process group, so does rsrun: in the background it
//! waits, and once brought to the foreground (`fg`) it passes stdin on to rank 0 as usual.

use std::io::{self, Read};
use std::mem::MaybeUninit;
use std::thread;
use std::time::Duration;

/// How often a background rsrun looks whether it is in the foreground yet. Open MPI waits for
/// SIGCONT instead; a look now and then needs no signal handler and costs nothing noticeable.
const FOREGROUND_POLL: Duration = Duration::from_millis(100);

/// rsrun's stdin (fd 0) for the thread that reads it, where it waits while rsrun is in the
/// background of its terminal.
pub struct ForegroundStdin {
    stdin: io::Stdin,
}

impl ForegroundStdin {
    /// Must be made on the thread that reads, which it prepares: SIGTTIN is blocked in that
    /// thread only, so a read that races with the job going to the background fails with EIO
    /// (taken as "not now") instead of stopping rsrun. Ranks are spawned from other threads,
    /// and the spawn unblocks every signal in the child, so they keep SIGTTIN's default action.
    pub fn for_this_thread() -> io::Result<ForegroundStdin> {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initializes the set it is given; sigaddset needs an initialized
        // set and a valid signal number; pthread_sigmask takes the initialized set and a null
        // old-set pointer, which is allowed.
        let rc = unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            libc::sigaddset(set.as_mut_ptr(), libc::SIGTTIN);
            libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(ForegroundStdin { stdin: io::stdin() })
    }
}

impl Read for ForegroundStdin {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if in_background() {
                thread::sleep(FOREGROUND_POLL);
                continue;
            }
            match self.stdin.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The job went to the background between the look and the read.
                Err(e) if e.raw_os_error() == Some(libc::EIO) && in_background() => continue,
                result => return result,
            }
        }
    }
}

/// Whether stdin is rsrun's controlling terminal and another process group has its
/// foreground. Not a terminal, or a terminal that is not rsrun's: stdin may be read.
fn in_background() -> bool {
    // SAFETY: tcgetpgrp and getpgrp take no pointers; tcgetpgrp fails (-1) when fd 0 is not
    // this process's controlling terminal, which counts as "may read".
    let (foreground, own) = unsafe { (libc::tcgetpgrp(0), libc::getpgrp()) };
    foreground != -1 && foreground != own
}
