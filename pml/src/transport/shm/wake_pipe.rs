//! A rank's wake pipe: a FIFO beside the segment (`/dev/shm/<segment>-wake-<local rank>-<tag>`,
//! so that rsrun's clean-up of a dead job removes it too) that a rank waiting in an epoll
//! wait watches, and that a peer waking it writes a byte into. A futex cannot be watched by
//! epoll; a FIFO, unlike an eventfd, can be opened by name from another process.
//!
//! The segment's name follows from the job id, which is no secret; the tag is random, and the
//! rank publishes it in its control block of the segment (mode 0600), so only the job's ranks
//! know the whole name and nobody else can make the FIFO first. The rank makes it itself
//! (mkfifo never reuses a name), and both ends check that what they opened is a FIFO of this
//! user that nobody else may open, refusing it with an error naming it otherwise.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) struct WakePipe {
    fd: OwnedFd,
    /// Set for the owner's read end, which removes the name when dropped.
    path: Option<CString>,
}

fn path(segment: &str, local_rank: usize, tag: u64) -> io::Result<CString> {
    CString::new(format!("/dev/shm/{segment}-wake-{local_rank}-{tag:016x}"))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a segment name"))
}

/// Opens the FIFO at `path` for reading and writing, whoever opens it: a write then never
/// finds the pipe without a reader, so a waker whose sleeper exited gets neither SIGPIPE nor
/// EPIPE (the byte only stays in the pipe, or finds it full), and the owner's read end never
/// reports end of file while no peer has it open. Linux opens a FIFO so without blocking.
fn open_ours(path: &CString) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a valid C string that outlives the call.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("opening the wake pipe {}: {e}", path.to_string_lossy()),
        ));
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    check_ours(&fd, path)?;
    Ok(fd)
}

/// Refuses a file that is not a FIFO of this user closed to everyone else.
fn check_ours(fd: &OwnedFd, path: &CString) -> io::Result<()> {
    // SAFETY: `stat` is plain old data, so all-zero is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a writable stat buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let wrong = if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        Some("it is not a FIFO".to_string())
    } else if st.st_uid != me {
        Some(format!("it belongs to uid {}, not {me}", st.st_uid))
    } else if st.st_mode & 0o077 != 0 {
        Some(format!(
            "others may open it (mode {:o})",
            st.st_mode & 0o777
        ))
    } else {
        None
    };
    match wrong {
        Some(why) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the wake pipe {} is not this job's: {why}",
                path.to_string_lossy()
            ),
        )),
        None => Ok(()),
    }
}

impl WakePipe {
    /// Makes local rank `local_rank`'s pipe under a new random tag and opens its read end;
    /// returns it and the tag, for the rank to publish to its peers.
    pub(crate) fn create(segment: &str, local_rank: usize) -> io::Result<(WakePipe, u64)> {
        let mut tag = [0u8; 8];
        crate::random::fill(&mut tag)?;
        // Never 0, which says "no pipe yet" where the tag is published.
        let tag = u64::from_le_bytes(tag) | 1;
        Ok((Self::create_tagged(segment, local_rank, tag)?, tag))
    }

    fn create_tagged(segment: &str, local_rank: usize, tag: u64) -> io::Result<WakePipe> {
        let path = path(segment, local_rank, tag)?;
        // SAFETY: `path` is a valid C string that outlives the call.
        if unsafe { libc::mkfifo(path.as_ptr(), 0o600) } != 0 {
            let e = io::Error::last_os_error();
            let why = if e.kind() == io::ErrorKind::AlreadyExists {
                "it exists already, and this rank did not make it".to_string()
            } else {
                e.to_string()
            };
            return Err(io::Error::new(
                e.kind(),
                format!("making the wake pipe {}: {why}", path.to_string_lossy()),
            ));
        }
        match open_ours(&path) {
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

    /// Opens local rank `local_rank`'s pipe, which it published under `tag`, for waking it.
    pub(crate) fn open(segment: &str, local_rank: usize, tag: u64) -> io::Result<WakePipe> {
        let path = path(segment, local_rank, tag)?;
        Ok(WakePipe {
            fd: open_ours(&path)?,
            path: None,
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes the pipe readable. A full pipe is readable already, so a write that finds no
    /// room changes nothing that matters.
    pub(crate) fn signal(&self) -> io::Result<()> {
        // SAFETY: writes one byte from a live buffer to our own fd.
        if unsafe { libc::write(self.fd.as_raw_fd(), [1u8].as_ptr().cast(), 1) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(name: &str) -> String {
        format!("mpirt-unit-{}-{name}", std::process::id())
    }

    #[test]
    fn waking_a_rank_that_exited_is_harmless() {
        let seg = segment("exited");
        let (sleeper, tag) = WakePipe::create(&seg, 0).unwrap();
        let waker = WakePipe::open(&seg, 0, tag).unwrap();
        waker.signal().unwrap();
        drop(sleeper);
        // No reader but the waker's own end: no EPIPE (nor SIGPIPE), even once it is full.
        for _ in 0..100_000 {
            waker.signal().unwrap();
        }
    }

    #[test]
    fn a_pipe_made_by_someone_else_is_refused() {
        let seg = segment("planted");
        let tag = 0x1234_5678_9abc_def1;
        let path = path(&seg, 0, tag).unwrap();
        // SAFETY: `path` is a valid C string.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        let e = WakePipe::create_tagged(&seg, 0, tag).err().unwrap();
        assert!(e.to_string().contains("exists already"), "{e}");
        // One others may open, or no FIFO at all, is no job's wake pipe.
        // SAFETY: as above.
        assert_eq!(unsafe { libc::chmod(path.as_ptr(), 0o622) }, 0);
        let e = WakePipe::open(&seg, 0, tag).err().unwrap();
        assert!(
            e.to_string()
                .contains("is not this job's: others may open it (mode 622)"),
            "{e}"
        );
        // SAFETY: as above.
        unsafe { libc::unlink(path.as_ptr()) };
        std::fs::write(path.to_str().unwrap(), b"").unwrap();
        std::fs::set_permissions(
            path.to_str().unwrap(),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let e = WakePipe::open(&seg, 0, tag).err().unwrap();
        assert!(e.to_string().contains("it is not a FIFO"), "{e}");
        // SAFETY: as above.
        unsafe { libc::unlink(path.as_ptr()) };
    }

    #[test]
    fn each_pipe_gets_a_name_nobody_can_guess() {
        let seg = segment("tags");
        let (a, tag_a) = WakePipe::create(&seg, 0).unwrap();
        let (b, tag_b) = WakePipe::create(&seg, 1).unwrap();
        assert_ne!(tag_a, tag_b);
        assert!(WakePipe::open(&seg, 0, tag_b).is_err());
        drop((a, b));
    }
}
