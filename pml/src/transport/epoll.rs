//! A level-triggered epoll set: what the TCP transport polls in its progress round and sleeps
//! on when a rank waits, and what a rank with several transports sleeps on (their wake fds).
//!
//! Level-triggered on purpose: a socket (or wake fd) that still has bytes (or room) is
//! reported again, so a wait that only sleeps and discards its events loses nothing.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set once `epoll_pwait2` proved not there to call ([`pwait2_missing`]).
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

/// The kernel's `struct __kernel_timespec`, which `epoll_pwait2` reads: 64-bit fields on
/// every architecture (libc's `timespec` has 32-bit ones on some 32-bit targets).
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// Whether `epoll_pwait2` failing with `errno` means the call is not there: ENOSYS before
/// Linux 5.11, and EPERM from a seccomp filter written before it (a container's default
/// profile denies calls it does not know so). Then waits use `epoll_wait`; other errors are
/// the wait's own.
fn pwait2_missing(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::ENOSYS | libc::EPERM))
}

pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

/// One readiness report: the token the fd was registered with and what it is ready for.
#[derive(Clone, Copy, Debug)]
pub struct Ready {
    pub token: u64,
    pub readable: bool,
    pub writable: bool,
}

/// Interest in reading, and in writing while a frame waits for room.
pub fn interest(write: bool) -> u32 {
    let mut bits = libc::EPOLLIN | libc::EPOLLRDHUP;
    if write {
        bits |= libc::EPOLLOUT;
    }
    bits as u32
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new fd we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: `fd` was just returned by epoll_create1 and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
        })
    }

    fn ctl(&self, op: i32, fd: RawFd, token: u64, bits: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: bits,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call; the kernel copies it.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn add(&self, fd: &impl AsRawFd, token: u64, bits: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd.as_raw_fd(), token, bits)
    }

    pub fn modify(&self, fd: &impl AsRawFd, token: u64, bits: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd.as_raw_fd(), token, bits)
    }

    pub fn remove(&self, fd: &impl AsRawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd.as_raw_fd(), 0, 0)
    }

    /// Puts the ready fds in `out` (emptied first), waiting at most `timeout` (zero: just
    /// look). `out` is the caller's so that a progress round allocates nothing. A timeout
    /// under a millisecond (a nap of 50 us) waits that long where `epoll_pwait2` can be
    /// called (Linux 5.11; see `pwait2_missing`), else a whole millisecond: `epoll_wait`
    /// counts whole milliseconds, and rounding such a nap down to zero would make the wait a
    /// busy loop.
    pub fn wait(&mut self, timeout: Duration, out: &mut Vec<Ready>) -> io::Result<()> {
        out.clear();
        let short = !timeout.is_zero() && timeout < Duration::from_millis(1);
        let mut n = -1;
        if short && !NO_PWAIT2.load(Ordering::Relaxed) {
            let ts = KernelTimespec {
                tv_sec: 0,
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            // SAFETY: as epoll_wait below, and `ts` is a valid `__kernel_timespec` for the
            // call; a null signal mask leaves the mask as it is (the size is then not read).
            // Called by number: glibc wraps epoll_pwait2 only from 2.35.
            n = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd.as_raw_fd(),
                    self.events.as_mut_ptr(),
                    self.events.len() as libc::c_int,
                    &ts as *const KernelTimespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            } as i32;
            if n < 0 && pwait2_missing(io::Error::last_os_error().raw_os_error()) {
                NO_PWAIT2.store(true, Ordering::Relaxed);
            }
        }
        if !short || NO_PWAIT2.load(Ordering::Relaxed) {
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32 + i32::from(short);
            // SAFETY: `events` is a valid, writable array of `events.len()` epoll_event
            // structs, and the kernel writes at most that many.
            n = unsafe {
                libc::epoll_wait(
                    self.fd.as_raw_fd(),
                    self.events.as_mut_ptr(),
                    self.events.len() as i32,
                    ms,
                )
            };
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(self.events[..n as usize].iter().map(|ev| {
            let bits = ev.events as i32;
            let hangup = bits & (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) != 0;
            Ready {
                token: ev.u64,
                readable: bits & libc::EPOLLIN != 0 || hangup,
                writable: bits & libc::EPOLLOUT != 0 || hangup,
            }
        }));
        Ok(())
    }
}

/// The set's own fd: readable while a wait on the set would return at once, so that another
/// epoll set can watch this one.
impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seccomp filter's EPERM falls back to `epoll_wait` as a missing call's ENOSYS does
    /// (it failed every short wait at once before, so the wait set's naps busy-polled); an
    /// interrupted wait does not.
    #[test]
    fn pwait2_counts_as_missing_on_enosys_and_eperm_only() {
        assert!(pwait2_missing(Some(libc::ENOSYS)));
        assert!(pwait2_missing(Some(libc::EPERM)));
        assert!(!pwait2_missing(Some(libc::EINTR)));
        assert!(!pwait2_missing(Some(libc::EBADF)));
    }

    /// A wait under a millisecond (`epoll_pwait2`'s timespec) reports a ready fd, and one
    /// with nothing ready returns empty and without an error.
    #[test]
    fn a_wait_under_a_millisecond_reports_ready_fds() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut epoll = Epoll::new().unwrap();
        epoll.add(&ours, 7, interest(false)).unwrap();
        let mut out = Vec::new();
        let nap = Duration::from_micros(50);
        epoll.wait(nap, &mut out).unwrap();
        assert!(out.is_empty(), "nothing sent yet: {out:?}");
        std::io::Write::write_all(&mut &theirs, b"x").unwrap();
        epoll.wait(nap, &mut out).unwrap();
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].token, 7);
        assert!(out[0].readable);
    }
}
