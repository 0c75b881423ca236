//! A rank's wake pipe: an anonymous pipe that a rank waiting in an epoll wait watches, and that
//! a peer waking it writes a byte into. A futex cannot be watched by epoll; a pipe, unlike an
//! eventfd, can be opened from another process, through `/proc/<pid>/fd/<fd>`.
//!
//! It has no name in any file system, so nothing of it outlives its rank, however the job
//! ends: a named FIFO beside the segment stayed in /dev/shm when a job started by a launcher
//! other than rsrun (which removes what its job left there) was killed. The rank publishes
//! the pipe's descriptor and inode in its control block of the segment (mode 0600); a peer
//! opens the descriptor by its path in /proc, which the kernel allows only to processes that
//! may trace the rank (its user's), and writes only into what is that very pipe: a FIFO of
//! this user with the published inode. A rank that exited and whose pid and descriptor number
//! another process now holds is so never written to.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// The device of pipefs, which holds every anonymous pipe, recorded from this process's own
/// pipe: a FIFO of another file system (a named one, in /tmp) is no rank's wake pipe, even
/// with the published inode number.
static PIPEFS_DEVICE: OnceLock<u64> = OnceLock::new();

pub(crate) struct WakePipe {
    /// The read end for the owner; for a waker, its own opening of the pipe.
    fd: OwnedFd,
    /// The owner's write end, which keeps the pipe with a writer, else `None`.
    _write_end: Option<OwnedFd>,
}

/// What a rank publishes for its peers: its read end's descriptor number in the high half,
/// the pipe's inode number (pipefs numbers inodes in 32 bits) in the low half. Never 0: no
/// inode is numbered 0, and 0 says "no pipe yet" where the tag is published.
fn tag(fd: RawFd, inode: u64) -> Option<u64> {
    let inode = u32::try_from(inode).ok().filter(|&i| i != 0)?;
    Some((fd as u64) << 32 | u64::from(inode))
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: `stat` is plain old data, so all-zero is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable stat buffer; a bad descriptor only fails.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn open_path(path: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c_path = CString::new(path).expect("a /proc path holds no NUL");
    // SAFETY: `c_path` is a valid C string that outlives the call.
    let fd = unsafe { libc::open(c_path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("opening {path}: {e}")));
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes a pipe; returns its ends and its stat, whose device is recorded as pipefs's.
fn make_pipe() -> io::Result<(OwnedFd, OwnedFd, libc::stat)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the live array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("making a wake pipe: {e}")));
    }
    // SAFETY: both were just made and nothing else owns them.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let st = fstat(read_end.as_raw_fd())?;
    let _ = PIPEFS_DEVICE.set(st.st_dev);
    Ok((read_end, write_end, st))
}

/// pipefs's device: recorded from this process's first pipe, made here if there was none (a
/// rank that wakes peers before it sleeps on a pipe of its own).
fn pipefs_device() -> io::Result<u64> {
    match PIPEFS_DEVICE.get() {
        Some(&device) => Ok(device),
        None => make_pipe().map(|(_, _, st)| st.st_dev),
    }
}

/// Refuses a file that is not the pipe published as `inode`, of this user.
fn check_ours(st: &libc::stat, inode: u64, path: &str) -> io::Result<()> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let pipefs = pipefs_device()?;
    let wrong = if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        Some("it is not a pipe".to_string())
    } else if st.st_dev != pipefs {
        Some(format!(
            "it is a named FIFO (device {}), not an anonymous pipe (device {pipefs})",
            st.st_dev
        ))
    } else if st.st_ino != inode {
        Some(format!(
            "it is pipe {}, not the published {inode} (its rank is gone)",
            st.st_ino
        ))
    } else if st.st_uid != me {
        Some(format!("it belongs to uid {}, not {me}", st.st_uid))
    } else {
        None
    };
    match wrong {
        Some(why) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{path} is not the rank's wake pipe: {why}"),
        )),
        None => Ok(()),
    }
}

impl WakePipe {
    /// Makes this rank's pipe; returns it and the tag for the rank to publish to its peers.
    pub(crate) fn create() -> io::Result<(WakePipe, u64)> {
        let (read_end, write_end, st) = make_pipe()?;
        let tag = tag(read_end.as_raw_fd(), st.st_ino).ok_or_else(|| {
            io::Error::other(format!(
                "a wake pipe's inode {} does not fit its tag",
                st.st_ino
            ))
        })?;
        Ok((
            WakePipe {
                fd: read_end,
                _write_end: Some(write_end),
            },
            tag,
        ))
    }

    /// Opens the pipe of the rank with process id `pid`, which published it as `tag`, for
    /// waking that rank.
    pub(crate) fn open(pid: i32, tag: u64) -> io::Result<WakePipe> {
        let (fd, inode) = (tag >> 32, tag & u64::from(u32::MAX));
        let path = format!("/proc/{pid}/fd/{fd}");
        // A path-only opening has no effect on what it opens (were it another process's
        // terminal, say), so it is checked before the real opening, made through it: the
        // check and the opening are of one file.
        let located = open_path(&path, libc::O_PATH)?;
        check_ours(&fstat(located.as_raw_fd())?, inode, &path)?;
        // Read and write, so that a write never finds the pipe without a reader: a waker
        // whose sleeper exited gets neither SIGPIPE nor EPIPE (the byte only stays in the
        // pipe, or finds it full). Linux opens a pipe so without blocking.
        let fd = open_path(
            &format!("/proc/self/fd/{}", located.as_raw_fd()),
            libc::O_RDWR | libc::O_NONBLOCK,
        )?;
        Ok(WakePipe {
            fd,
            _write_end: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> i32 {
        std::process::id() as i32
    }

    #[test]
    fn a_peer_opens_the_pipe_by_its_tag_and_wakes_its_rank() {
        let (sleeper, tag) = WakePipe::create().unwrap();
        let waker = WakePipe::open(me(), tag).unwrap();
        waker.signal().unwrap();
        let mut byte = [0u8; 1];
        // SAFETY: reads into a live buffer of its length from the sleeper's read end.
        let got = unsafe { libc::read(sleeper.fd(), byte.as_mut_ptr().cast(), 1) };
        assert_eq!(got, 1);
    }

    #[test]
    fn waking_a_rank_that_exited_is_harmless() {
        let (sleeper, tag) = WakePipe::create().unwrap();
        let waker = WakePipe::open(me(), tag).unwrap();
        waker.signal().unwrap();
        drop(sleeper);
        // No reader but the waker's own end: no EPIPE (nor SIGPIPE), even once it is full.
        for _ in 0..100_000 {
            waker.signal().unwrap();
        }
    }

    #[test]
    fn the_pipe_has_no_name_to_leave_behind() {
        // Before, a FIFO named after the segment stayed in /dev/shm when the job was killed.
        // The link of an anonymous pipe's descriptor names no path, only the pipe.
        let (pipe, tag) = WakePipe::create().unwrap();
        let target = std::fs::read_link(format!("/proc/self/fd/{}", tag >> 32)).unwrap();
        assert!(target.to_string_lossy().starts_with("pipe:["), "{target:?}");
        drop(pipe);
    }

    #[test]
    fn what_the_tag_no_longer_names_is_refused() {
        // The rank's pipe is gone and its descriptor number now holds another pipe (the tag
        // names another inode), or a file that is no pipe at all.
        let (pipe, tag) = WakePipe::create().unwrap();
        let e = WakePipe::open(me(), tag + 1).err().unwrap();
        assert!(
            e.to_string()
                .contains("is not the rank's wake pipe: it is pipe"),
            "{e}"
        );
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let not_a_pipe = (file.as_raw_fd() as u64) << 32 | (tag & u64::from(u32::MAX));
        let e = WakePipe::open(me(), not_a_pipe).err().unwrap();
        assert!(e.to_string().contains("it is not a pipe"), "{e}");
        drop(pipe);
        let e = WakePipe::open(i32::MAX, tag).err().unwrap();
        assert!(
            e.to_string().contains(&format!("/proc/{}/fd/", i32::MAX)),
            "{e}"
        );
    }

    #[test]
    fn a_named_fifo_with_the_published_inode_is_refused() {
        // Before, a FIFO of this user whose inode matched passed for the rank's pipe.
        let path = std::env::temp_dir().join(format!("mpirt-unit-{}-fifo", me()));
        let c_path = CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: `c_path` is a valid C string that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let fifo = open_path(path.to_str().unwrap(), libc::O_RDWR | libc::O_NONBLOCK);
        std::fs::remove_file(&path).unwrap();
        let fifo = fifo.unwrap();
        let inode = fstat(fifo.as_raw_fd()).unwrap().st_ino;
        let Some(tag) = tag(fifo.as_raw_fd(), inode) else {
            println!("skipped: the FIFO's inode {inode} does not fit a tag");
            return;
        };
        let e = WakePipe::open(me(), tag).err().unwrap();
        assert!(e.to_string().contains("it is a named FIFO"), "{e}");
    }
}
