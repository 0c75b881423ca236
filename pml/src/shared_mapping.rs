//! A shared read-write mapping of a whole file, unmapped on drop: what every file this
//! runtime shares between the processes of a host (the shm segment, the collectives'
//! shared-memory areas) is seen through. Named files live under /dev/shm, where rsrun removes
//! those of a job that died (their names start with `mpirt-<job id>`).

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
    /// only this user may open, and maps it; no file is left if that fails.
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
