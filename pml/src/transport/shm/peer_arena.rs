//! A same-host peer's [shared arena](crate::shared_arena), mapped read-only into this process
//! so that rendezvous data from the peer's large blocks is one `memcpy` away.

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;

use crate::bulk_copy;
use crate::shared_arena::{ArenaInfo, ARENA_MAGIC, PAGE};

/// The mapping lasts as long as this value (for the job): page tables filled by one message
/// serve the next from the same buffer. If the peer dies, the file lives on in the mapping.
pub struct PeerArena {
    map: NonNull<u8>,
    /// Where the arena lies in the peer's address space.
    base: usize,
    len: usize,
}

impl PeerArena {
    /// Maps the arena `info` describes, through `/proc/<pid>/fd/<fd>` (which needs ptrace read
    /// access to the peer, like CMA), and checks that the file is an arena.
    pub fn map(info: &ArenaInfo) -> io::Result<PeerArena> {
        let path = format!("/proc/{}/fd/{}", info.pid, info.fd);
        let context =
            |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what} {path}: {e}"));
        let c_path = CString::new(path.clone()).expect("no NUL in a /proc path");
        // SAFETY: a NUL-terminated path; flags are plain integers.
        let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(context("open", io::Error::last_os_error()));
        }
        // SAFETY: an all-zero `stat` is a valid value to be overwritten; fstat writes only it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let size_ok = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size as usize >= info.len;
        // SAFETY: a read-only shared mapping of `len` bytes of a file at least that long (so
        // no access inside it can SIGBUS), at a place the kernel picks.
        let map = size_ok.then(|| unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                info.len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd,
                0,
            )
        });
        let mapped_err = io::Error::last_os_error();
        // SAFETY: our own fd; the mapping keeps the file.
        unsafe { libc::close(fd) };
        let map = match map {
            None => {
                return Err(context(
                    "sizing",
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("shorter than the {} bytes published", info.len),
                    ),
                ))
            }
            Some(libc::MAP_FAILED) => return Err(context("mmap of", mapped_err)),
            Some(p) => NonNull::new(p.cast::<u8>()).expect("mmap never returns null on success"),
        };
        let arena = PeerArena {
            map,
            base: info.base,
            len: info.len,
        };
        // SAFETY: the first word of the mapping, readable; the owner wrote it before publishing.
        let magic = unsafe { map.as_ptr().cast::<u64>().read_volatile() };
        if magic != ARENA_MAGIC {
            return Err(context(
                "checking",
                io::Error::new(io::ErrorKind::InvalidData, "not an mpirt shared arena"),
            ));
        }
        Ok(arena)
    }

    /// Where the peer's `len` bytes at `remote_addr` lie in our mapping, when they lie inside
    /// its arena (past the header page). Every byte there is readable (a hole reads as
    /// zeros), for as long as this `PeerArena` lives.
    pub fn mapped(&self, remote_addr: u64, len: usize) -> Option<*const u8> {
        let offset = (remote_addr as usize).checked_sub(self.base)?;
        if offset < PAGE || offset.checked_add(len).is_none_or(|end| end > self.len) {
            return None;
        }
        // SAFETY: `offset + len <= self.len`, within our mapping.
        Some(unsafe { self.map.as_ptr().add(offset).cast_const() })
    }

    /// Copies `dst.len()` bytes from the peer's address `remote_addr` when they lie inside its
    /// arena (past the header page); false, copying nothing, when they do not.
    pub fn copy_out(&self, remote_addr: u64, dst: &mut [u8]) -> bool {
        let Some(src) = self.mapped(remote_addr, dst.len()) else {
            return false;
        };
        // SAFETY: `mapped` found the bytes inside our read-only mapping of a file at least
        // `self.len` long, so every byte is readable. `dst` is ours exclusively and cannot
        // overlap a read-only mapping. The peer leaves its send buffer alone until our FIN
        // (MPI's rule); if a faulty program wrote to it anyway, we would copy unspecified
        // bytes, never fault.
        unsafe { bulk_copy::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        true
    }
}

impl Drop for PeerArena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, which nothing borrows beyond `copy_out` calls.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.len) };
    }
}

// SAFETY: a read-only mapping owned by this value; reading it from any thread is fine.
unsafe impl Send for PeerArena {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_arena::Arena;

    #[test]
    fn a_mapped_arena_reads_what_its_owner_wrote_and_sees_frees() {
        let owner = Arena::new();
        let info = owner.activate(64 * PAGE).unwrap();
        let peer = PeerArena::map(&info).unwrap();
        let len = 5 * PAGE + 123;
        let p = owner.alloc(len, 1);
        // SAFETY: a fresh block of `len` bytes.
        let block = unsafe { std::slice::from_raw_parts_mut(p, len) };
        for (i, b) in block.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let mut got = vec![0u8; len];
        assert!(peer.copy_out(p as u64, &mut got));
        assert_eq!(&got[..], &block[..]);
        // SAFETY: allocated above, no longer used.
        unsafe { owner.free(p, len) };
        let again = owner.alloc(len, 1);
        assert_eq!(again, p);
        // SAFETY: a fresh block of `len` bytes.
        unsafe { again.write_bytes(9, PAGE) };
        assert!(peer.copy_out(p as u64, &mut got));
        assert!(
            got[..PAGE].iter().all(|&b| b == 9),
            "new contents, not stale ones"
        );
        assert!(
            got[PAGE..].iter().all(|&b| b == 0),
            "the punched pages read as zeros"
        );
    }

    #[test]
    fn ranges_outside_the_arena_are_refused() {
        let owner = Arena::new();
        let info = owner.activate(8 * PAGE).unwrap();
        let peer = PeerArena::map(&info).unwrap();
        let mut buf = [0u8; 16];
        let base = info.base as u64;
        assert!(!peer.copy_out(base, &mut buf), "the header page");
        assert!(!peer.copy_out(base - 4096, &mut buf));
        assert!(
            !peer.copy_out(base + 8 * PAGE as u64 - 8, &mut buf),
            "runs past the end"
        );
        assert!(!peer.copy_out(u64::MAX - 4, &mut buf));
        assert!(peer.copy_out(base + PAGE as u64, &mut buf));
    }

    #[test]
    fn a_file_that_is_no_arena_is_refused() {
        let info = ArenaInfo {
            pid: std::process::id() as i32,
            fd: 0,
            base: 1 << 30,
            len: PAGE,
        };
        // Our stdin: not an arena (a terminal, a pipe or /dev/null, none of them one).
        assert!(PeerArena::map(&info).is_err());
    }
}
