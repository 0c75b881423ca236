//! A shared read-write mapping of a whole file, unmapped on drop: what every file this
//! runtime shares between the processes of a host (the shm segment, the collectives'
//! shared-memory areas) is seen through. Named files live under /dev/shm, where rsrun, or
//! else the next job (`host_files`), removes those of a job that died (their names start with
//! `mpirt-<job id>-`).

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::ptr::NonNull;

pub struct SharedMapping {
    base: NonNull<u8>,
    len: usize,
}

impl SharedMapping {
    /// Maps the first `len` bytes of `fd`, which the caller checked (or made) at least that
    /// long, so that every mapped page is backed.
    pub fn new(fd: RawFd, len: usize) -> io::Result<SharedMapping> {
        // SAFETY: a fresh shared mapping of an open descriptor at an address the kernel picks;
        // it aliases no Rust object, and the file backs every page (see above).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMapping {
            base: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
        })
    }

    /// Creates the file `name` under /dev/shm (it must not exist), `len` bytes of zeros that
    /// only this user may open, with every page allocated, and maps it; no file is left if
    /// that fails. The pages are allocated here, not as they are first written: a sized but
    /// sparse tmpfs file maps fine on a `/dev/shm` too full for it, and the process that
    /// later touches a page tmpfs cannot give dies of SIGBUS; allocated, such a file is an
    /// error (`ENOSPC`) at its creation, which the callers turn into a slower path.
    pub fn create(name: &str, len: usize) -> io::Result<SharedMapping> {
        let path = host_path(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let mapped = file
            .set_len(len as u64)
            .and_then(|()| allocate(file.as_raw_fd(), len))
            .and_then(|()| SharedMapping::new(file.as_raw_fd(), len));
        if mapped.is_err() {
            let _ = fs::remove_file(&path);
        }
        mapped
    }

    /// Maps the file `name` under /dev/shm that another process made with
    /// [`create`](Self::create), checking that it is `len` bytes long.
    pub fn open(name: &str, len: usize) -> io::Result<SharedMapping> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(host_path(name)?)?;
        let found = file.metadata()?.len();
        if found != len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/dev/shm/{name} is {found} bytes, not {len}"),
            ));
        }
        SharedMapping::new(file.as_raw_fd(), len)
    }

    /// Removes the name of a file [`create`](Self::create) made; the mappings stay.
    pub fn remove(name: &str) -> io::Result<()> {
        fs::remove_file(host_path(name)?)
    }

    /// The first byte, page aligned.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Gives the first `len` bytes of `fd` their pages. A file system without `fallocate`
/// (`EOPNOTSUPP`, `EINVAL`: a /dev/shm that is not tmpfs) keeps the file sparse, as before.
fn allocate(fd: RawFd, len: usize) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: `fd` is an open descriptor of a regular file the caller made; the call only
    // gives the file's range [0, len) storage (it returns an error number, not -1).
    match unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) } {
        0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// The path of the host-shared file `name`, which must be one path component.
fn host_path(name: &str) -> io::Result<String> {
    if name.is_empty() || name.contains('/') || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad shared file name {name:?}"),
        ));
    }
    Ok(format!("/dev/shm/{name}"))
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mapped in `new`; its owners hand out no reference into it
        // that outlives the mapping (each says why where it makes one).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes /dev/shm holds in all, used or not.
    fn shm_size() -> u64 {
        // SAFETY: `statvfs` is plain data, for which zero bytes are a value.
        let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a `statvfs` the call may write.
        assert_eq!(
            unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut stats) },
            0
        );
        stats.f_blocks as u64 * stats.f_frsize as u64
    }

    #[test]
    fn a_file_larger_than_dev_shm_is_refused_at_creation_and_left_nowhere() {
        // Sparse, this file would map and kill its first writer past /dev/shm's size with
        // SIGBUS; allocated, it is refused here (tmpfs refuses a range past its size at once,
        // allocating nothing).
        let name = format!("mpirt-test-too-large-{}", std::process::id());
        let len = shm_size() + (1 << 20);
        let made = SharedMapping::create(&name, len as usize);
        let error = made.err().expect("a file past /dev/shm's size is refused");
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
        assert!(!std::path::Path::new(&format!("/dev/shm/{name}")).exists());
    }

    #[test]
    fn a_created_file_is_allocated_and_reads_as_zeros() {
        use std::os::unix::fs::MetadataExt;
        let name = format!("mpirt-test-allocated-{}", std::process::id());
        let len = 3 << 12;
        let map = SharedMapping::create(&name, len).expect("a small /dev/shm file");
        let blocks = fs::metadata(format!("/dev/shm/{name}")).map(|m| m.blocks());
        SharedMapping::remove(&name).expect("the file's name goes");
        // st_blocks counts 512-byte units: every page of the file has its storage.
        assert!(blocks.expect("the file's metadata") * 512 >= len as u64);
        // SAFETY: the mapping is `len` bytes long and nothing else writes it.
        let bytes = unsafe { std::slice::from_raw_parts(map.base().as_ptr(), len) };
        assert!(bytes.iter().all(|&b| b == 0));
    }
}
