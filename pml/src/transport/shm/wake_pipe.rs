//! A rank's wake pipe: a FIFO beside the segment (`/dev/shm/<segment>-wake-<local rank>`,
//! so that rsrun's clean-up of a dead job removes it too) that a rank waiting in an epoll
//! wait watches, and that a peer waking it writes a byte into. A futex cannot be watched by
//! epoll; a FIFO, unlike an eventfd, can be opened by name from another process.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) struct WakePipe {
    fd: OwnedFd,
    /// Set for the owner's read end, which removes the name when dropped.
    path: Option<CString>,
}

fn path(segment: &str, local_rank: usize) -> io::Result<CString> {
    CString::new(format!("/dev/shm/{segment}-wake-{local_rank}"))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a segment name"))
}

fn open_fd(path: &CString, flags: i32) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a valid C string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl WakePipe {
    /// Makes local rank `local_rank`'s pipe and opens its read end. Read and write, so that
    /// the pipe never reports end of file while no peer has it open.
    pub(crate) fn create(segment: &str, local_rank: usize) -> io::Result<WakePipe> {
        let path = path(segment, local_rank)?;
        // SAFETY: `path` is a valid C string that outlives the call.
        if unsafe { libc::mkfifo(path.as_ptr(), 0o600) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("making the wake pipe {}: {e}", path.to_string_lossy()),
            ));
        }
        match open_fd(&path, libc::O_RDWR) {
            Ok(fd) => Ok(WakePipe {
                fd,
                path: Some(path),
            }),
            Err(e) => {
                // SAFETY: as above.
                unsafe { libc::unlink(path.as_ptr()) };
                Err(e)
            }
        }
    }

    /// Opens local rank `local_rank`'s pipe for waking it.
    pub(crate) fn open(segment: &str, local_rank: usize) -> io::Result<WakePipe> {
        let path = path(segment, local_rank)?;
        Ok(WakePipe {
            fd: open_fd(&path, libc::O_WRONLY)?,
            path: None,
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes the pipe readable. A full pipe is readable already, so a write that finds no
    /// room changes nothing that matters.
    pub(crate) fn signal(&self) {
        // SAFETY: writes one byte from a live buffer to our own fd.
        unsafe { libc::write(self.fd.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    }

    /// Empties the pipe, so that it is readable again only after the next `signal`.
    pub(crate) fn drain(&self) {
        let mut buf = [0u8; 64];
        // SAFETY: reads into a live, writable buffer of its length from our own fd, which is
        // non-blocking, so the loop ends when the pipe is empty.
        while unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

impl Drop for WakePipe {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            // SAFETY: `path` is a valid C string; removing the name leaves open ends working.
            unsafe { libc::unlink(path.as_ptr()) };
        }
    }
}
