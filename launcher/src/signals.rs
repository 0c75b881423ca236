//! Turning SIGINT, SIGTERM and SIGHUP sent to rsrun into job events.
//!
//! The signals are blocked in every rsrun thread and taken synchronously by one thread in
//! `sigwait`, so no code runs in signal-handler context and the job learns *which* signal came
//! (the `ctrlc` crate hides that, but SIGINT must be forwarded as SIGINT and end in exit 130).
//! Ranks must not inherit the mask: `spawn::local` unblocks the signals in the child before exec.

use std::io;
use std::mem::MaybeUninit;
use std::sync::mpsc;
use std::thread;

use crate::job::Event;

/// SIGUSR1 is taken too, but not forwarded: it asks for the stall report (see `job`).
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1];

/// A set holding the forwarded signals.
pub(crate) fn forwarded_set() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initializes the set it is given; sigaddset only needs an initialized
    // set and a valid signal number, which the constants are.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for sig in FORWARDED {
            libc::sigaddset(set.as_mut_ptr(), sig);
        }
        set.assume_init()
    }
}

/// Blocks the forwarded signals in the calling thread, and so in every thread it spawns later.
/// Call it first thing in `main`, before any thread exists, or a thread that missed the mask
/// could take a signal and die with its default action.
pub fn block() -> io::Result<()> {
    let set = forwarded_set();
    // SAFETY: `set` is an initialized sigset_t; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Starts the thread that waits for the (blocked) signals and sends each as `Event::Signal`.
pub fn forward_to(events: mpsc::Sender<Event>) -> io::Result<()> {
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let set = forwarded_set();
            loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is initialized and `sig` is a valid place for the result.
                let rc = unsafe { libc::sigwait(&set, &mut sig) };
                if rc == 0 && events.send(Event::Signal(sig)).is_err() {
                    return; // the job is over
                }
            }
        })?;
    Ok(())
}

/// The conventional name of a signal, for messages: "SIGKILL".
pub fn name(sig: libc::c_int) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGXCPU, "SIGXCPU"),
    ];
    known
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or_else(|| format!("SIG{sig}"), |(_, name)| name.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_signals() {
        assert_eq!(super::name(libc::SIGKILL), "SIGKILL");
        assert_eq!(super::name(libc::SIGINT), "SIGINT");
        assert_eq!(super::name(99), "SIG99");
    }
}
