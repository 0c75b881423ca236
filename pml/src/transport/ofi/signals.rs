//! Taking back the signals that libinfinipath claims as it loads.
//!
//! Debian's libfabric links its psm provider's libpsm_infinipath, and so libinfinipath, whose
//! load-time constructor (unless `IPATH_NO_BACKTRACE` is set) installs one handler for
//! SIGTERM, SIGINT, SIGSEGV, SIGBUS, SIGILL and SIGABRT. On SIGTERM or SIGINT that handler
//! calls `exit(1)`: the process's exit handlers and its libraries' destructors then run in
//! whichever thread took the signal while the others run on. libfabric's destructor
//! (`fi_fini`) frees the provider list that `fi_getinfo` walks without a lock, so a rank
//! whose launcher sent SIGTERM while one of its threads was discovering providers (the
//! rank's thread under libtest, whose main thread took the signal) died of SIGSEGV at
//! `fi_getinfo+0xf0`, or hung in the exit on a lock a running thread held until the
//! launcher's SIGKILL. The rank also exits with status 1 where it was terminated.
//!
//! rsrun sets `IPATH_NO_BACKTRACE` for its ranks (bootstrap's
//! `libfabric::launcher_settings`), as Open MPI's launcher does. Under any other launcher the
//! library has loaded before mpirt runs, so mpirt's `initialize` calls [`restore_defaults`].

use std::ffi::{c_int, c_void, CStr};

/// The signals libinfinipath's constructor takes.
const CLAIMED: [c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGABRT,
];

/// Puts back the default action of each signal whose handler lies in libinfinipath, as
/// though `IPATH_NO_BACKTRACE` had been set when it loaded; a handler that the program or
/// another library installed since is left alone. Returns the signals put back. Safe beside
/// other threads: a signal's action is the process's, and `sigaction` sets it whole.
pub fn restore_defaults() -> Vec<c_int> {
    CLAIMED
        .into_iter()
        .filter(|&signal| handler_library(signal).is_some_and(|path| is_infinipath(&path)))
        .filter(|&signal| set_default(signal))
        .collect()
}

/// Whether `path`, a shared object's, names libinfinipath (`libinfinipath.so.4`).
fn is_infinipath(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|file| file.starts_with("libinfinipath."))
}

/// The path of the shared object holding `signal`'s handler; `None` for the default action,
/// an ignored signal, or an address the loader cannot place.
fn handler_library(signal: c_int) -> Option<String> {
    // SAFETY: all-zero is a valid sigaction (no handler, empty mask).
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `current`, which is valid.
    if unsafe { libc::sigaction(signal, std::ptr::null(), &mut current) } != 0 {
        return None;
    }
    let handler = current.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return None;
    }
    // SAFETY: all-zero is a valid Dl_info (null pointers).
    let mut place: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for the address and fills `place`.
    if unsafe { libc::dladdr(handler as *const c_void, &mut place) } == 0
        || place.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: a non-null dli_fname is the loader's NUL-terminated path of a loaded object.
    Some(
        unsafe { CStr::from_ptr(place.dli_fname) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Gives `signal` its default action; whether that took.
fn set_default(signal: c_int) -> bool {
    // SAFETY: all-zero is a valid sigaction; its handler is then SIG_DFL (0).
    let default: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `default` is a valid action and no old one is asked for.
    unsafe { libc::sigaction(signal, &default, std::ptr::null_mut()) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_libinfinipath_is_taken_for_it() {
        assert!(is_infinipath("/lib/x86_64-linux-gnu/libinfinipath.so.4"));
        assert!(is_infinipath("libinfinipath.so"));
        assert!(!is_infinipath(
            "/lib/x86_64-linux-gnu/libpsm_infinipath.so.1"
        ));
        assert!(!is_infinipath("/usr/lib/libucs.so.0"));
        assert!(!is_infinipath("/opt/libinfinipath.d/libother.so"));
    }

    extern "C" fn ours(_: c_int) {}

    /// This test binary links libfabric, so libinfinipath loaded with it (where this
    /// machine's libfabric links psm): its handlers go, the one this test installed for
    /// SIGINT stays. The signals' actions are the process's, so each is left as found or at
    /// its default.
    #[test]
    fn libinfinipaths_handlers_go_and_others_stay() {
        if std::env::var_os("IPATH_NO_BACKTRACE").is_some() {
            println!("skipped: IPATH_NO_BACKTRACE is set, so libinfinipath installed nothing");
            return;
        }
        let claimed: Vec<c_int> = CLAIMED
            .into_iter()
            .filter(|&s| handler_library(s).is_some_and(|p| is_infinipath(&p)))
            .collect();
        if claimed.is_empty() {
            println!("skipped: libinfinipath holds no signal here (libfabric without psm)");
            return;
        }
        // SAFETY: all-zero is a valid sigaction; `ours` is a plain handler that does nothing.
        let mut own: libc::sigaction = unsafe { std::mem::zeroed() };
        own.sa_sigaction = ours as extern "C" fn(c_int) as libc::sighandler_t;
        // SAFETY: a valid action for SIGINT, no old one asked for.
        assert_eq!(
            unsafe { libc::sigaction(libc::SIGINT, &own, std::ptr::null_mut()) },
            0
        );
        let restored = restore_defaults();
        let own_kept = handler_library(libc::SIGINT);
        set_default(libc::SIGINT);
        let expected: Vec<c_int> = claimed.into_iter().filter(|&s| s != libc::SIGINT).collect();
        assert_eq!(restored, expected);
        for signal in CLAIMED {
            assert!(
                !handler_library(signal).is_some_and(|p| is_infinipath(&p)),
                "signal {signal} still goes to libinfinipath"
            );
        }
        assert!(
            own_kept.is_some_and(|p| !is_infinipath(&p)),
            "the test's own SIGINT handler was not kept"
        );
    }
}
