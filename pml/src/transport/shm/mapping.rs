//! A shared read-write mapping of a whole file, unmapped on drop: what every file this
//! runtime shares between the processes of a host (the shm segment, the collectives'
//! all-reduce areas) is seen through.

use std::io;
use std::os::fd::RawFd;
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

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mapped in `new`; its owners hand out no reference into it
        // that outlives the mapping (each says why where it makes one).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
