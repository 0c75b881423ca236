//! The per-host shared segment: a tmpfs file under /dev/shm mapped by every local rank.
//!
//! Layout (all offsets fixed by `local_size` and `ring_bytes`, both stored in the header so an
//! attacher recomputes and checks them):
//!
//! ```text
//! 0                      Header (magic, version, layout, attach counter)
//! RANK_CTL               local_size × RankCtl   (futex word, sleeping flag, pid, probe address,
//!                                                wake pipe tag, sleep barrier flag)
//! ring_ctl               n(n-1) × RingCtl       (one consumer tail per ordered pair)
//! data (page aligned)    n(n-1) × ring_bytes    (ring data, sender-major)
//! ```
//!
//! The engine picks `ring_bytes` so that each rank's n - 1 incoming rings fit a budget
//! (`super::ring_bytes_for`): the data grows linearly with the ranks on a host (128 KiB a
//! rank by default, 1 KiB rings at 128 ranks), the control blocks, 128 bytes a pair, with
//! their square (2 MiB at 128 ranks).
//!
//! Creating the file allocates nothing. While all the rings take at most `RESIDENT_RINGS_MAX`
//! and /dev/shm has room for them, each rank makes its outgoing rings resident when it opens
//! the segment; otherwise they take memory page by page as traffic reaches them.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use super::ring::RingCtl;
use crate::shared_mapping::SharedMapping;

const MAGIC: u64 = u64::from_le_bytes(*b"mpirtshm");
/// 7: rings from 512 bytes (a build that knew 4 KiB as the least would call a segment of
/// smaller rings corrupt instead of naming the mismatch).
const VERSION: u32 = 7;
const PAGE: usize = 4096;
const RANK_CTL: usize = 128;

/// Rings are made resident when the job starts while all of a host's rings together take at
/// most this much (with the engine's defaults, every host of up to 362 ranks) and /dev/shm has room
/// for all of them: where it has not, the pages taken at start would leave none for the rings
/// that traffic reaches later, and a page tmpfs cannot back is SIGBUS when touched.
const RESIDENT_RINGS_MAX: usize = 64 << 20;

/// Every field is atomic so that an attacher can read the header while it is being written
/// without undefined behaviour; `magic` is stored last, with Release, by the creator.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    local_size: AtomicU32,
    ring_bytes: AtomicU64,
    total_bytes: AtomicU64,
    attached: AtomicU32,
    /// Non-zero when every rank makes its outgoing rings resident as it opens the segment
    /// (decided once, by the creator, so that all ranks agree).
    rings_resident: AtomicU32,
}

/// Per-rank wait state and identity, one per 128 bytes (see `RingCtl` for why 128).
#[repr(C, align(128))]
pub(crate) struct RankCtl {
    /// Futex word: bumped by anyone who wakes this rank.
    pub(crate) futex: AtomicU32,
    /// Non-zero while this rank is in (or entering) a sleep, saying how to wake it: 1 on the
    /// futex (FUTEX_WAKE), 2 in an epoll wait on its wake pipe (a byte written there);
    /// senders skip the wake syscall when it is zero.
    pub(crate) sleeping: AtomicU32,
    /// This rank's pid once it has created or attached, else 0.
    pub(crate) pid: AtomicI32,
    /// Address in this rank of a known word, for peers to test remote reads on.
    pub(crate) probe_addr: AtomicU64,
    /// This rank's wake pipe's descriptor and inode once it made one, else 0 (see
    /// `wake_pipe.rs`): the segment is the job's alone, so peers open only the job's pipe.
    pub(crate) wake_tag: AtomicU64,
    /// Non-zero once this rank runs the host-wide barrier when it says it sleeps (see
    /// `sleep_barrier.rs`): registered peers then send to it without a fence.
    pub(crate) sleep_barrier: AtomicU32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    local_size: usize,
    ring_bytes: usize,
    ring_ctl: usize,
    data: usize,
    total: usize,
}

impl Layout {
    fn new(local_size: usize, ring_bytes: usize) -> io::Result<Layout> {
        let too_big = || invalid(format!("{local_size} ranks × {ring_bytes}-byte rings"));
        // Checked throughout: the control blocks grow with the square of the ranks, and
        // `local_size` is any rank count a job may have.
        let rings = local_size
            .checked_mul(local_size.saturating_sub(1))
            .ok_or_else(too_big)?;
        let ring_ctl = local_size
            .checked_mul(size_of::<RankCtl>())
            .and_then(|c| c.checked_add(RANK_CTL))
            .ok_or_else(too_big)?;
        let data = rings
            .checked_mul(size_of::<RingCtl>())
            .and_then(|c| c.checked_add(ring_ctl))
            .and_then(|c| c.checked_next_multiple_of(PAGE))
            .ok_or_else(too_big)?;
        let total = rings
            .checked_mul(ring_bytes)
            .and_then(|r| r.checked_add(data))
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or_else(too_big)?;
        Ok(Layout {
            local_size,
            ring_bytes,
            ring_ctl,
            data,
            total,
        })
    }

    fn ring_index(&self, from: usize, to: usize) -> usize {
        debug_assert!(from != to && from < self.local_size && to < self.local_size);
        from * (self.local_size - 1) + to - usize::from(to > from)
    }
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

fn os_error(what: &str, name: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what} /dev/shm/{name}: {e}"))
}

fn shm_path(name: &str) -> io::Result<CString> {
    if name.is_empty() || name.len() > 200 || name.contains('/') || name.contains('\0') {
        return Err(invalid(format!("bad shm segment name {name:?}")));
    }
    Ok(CString::new(format!("/{name}")).expect("NUL rejected above"))
}

/// Bytes still free on the file system of `fd` (/dev/shm), if it says.
fn free_bytes(fd: &Fd) -> Option<usize> {
    // SAFETY: `statvfs` is plain old data, so all-zero is a valid value to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a writable statvfs buffer.
    if unsafe { libc::fstatvfs(fd.0, &mut st) } != 0 {
        return None;
    }
    usize::try_from(st.f_bavail.saturating_mul(st.f_frsize)).ok()
}

/// Removes the segment's name, e.g. when a job failed before every rank attached.
pub fn unlink_segment(name: &str) -> io::Result<()> {
    let path = shm_path(name)?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::shm_unlink(path.as_ptr()) } != 0 {
        return Err(os_error("shm_unlink", name));
    }
    Ok(())
}

/// An open file descriptor, closed on drop (the mapping does not need it to stay open).
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own this descriptor and close it once.
        unsafe { libc::close(self.0) };
    }
}

/// A shared mapping of the segment file.
struct Mapping(SharedMapping);

impl Mapping {
    fn new(fd: &Fd, len: usize, name: &str) -> io::Result<Self> {
        SharedMapping::new(fd.0, len)
            .map(Mapping)
            .map_err(|e| io::Error::new(e.kind(), format!("mmap /dev/shm/{name}: {e}")))
    }

    fn base(&self) -> NonNull<u8> {
        self.0.base()
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is page aligned and at least a page long, and Header is
        // atomics only, so any concurrent access by other ranks is race-free. Everything
        // that points into the mapping (rings, control block references) is owned by or
        // borrowed from its owner, so nothing touches it after it is dropped.
        unsafe { &*self.base().as_ptr().cast::<Header>() }
    }
}

/// One process's view of the segment.
pub(crate) struct Segment {
    map: Mapping,
    layout: Layout,
}

impl Segment {
    /// Creates, sizes and initialises the segment, and counts the creator as attached.
    pub(crate) fn create(
        name: &str,
        local_rank: usize,
        local_size: usize,
        ring_bytes: usize,
    ) -> io::Result<Self> {
        let layout = Layout::new(local_size, ring_bytes)?;
        let path = shm_path(name)?;
        // SAFETY: `path` is a valid C string; O_EXCL makes a leftover segment an error
        // instead of something we would silently share.
        let fd = unsafe {
            libc::shm_open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(os_error("shm_open (create)", name));
        }
        let fd = Fd(fd);
        let mapped = (|| {
            // SAFETY: `fd` is an open shm descriptor; ftruncate only changes the file size.
            if unsafe { libc::ftruncate(fd.0, layout.total as libc::off_t) } != 0 {
                return Err(os_error("ftruncate", name));
            }
            Mapping::new(&fd, layout.total, name)
        })();
        let map = match mapped {
            Ok(map) => map,
            Err(e) => {
                // Nobody can use a half-made segment; do not leave it behind. The original
                // error is the one worth reporting.
                let _ = unlink_segment(name);
                return Err(e);
            }
        };
        // A fresh tmpfs file reads as zeros, which is the initial state of every ring and
        // control block; only the header needs values.
        let rings = layout.total - layout.data;
        let resident = rings <= RESIDENT_RINGS_MAX && free_bytes(&fd).is_some_and(|f| f >= rings);
        let segment = Segment { map, layout };
        segment.claim(local_rank)?;
        let h = segment.map.header();
        h.rings_resident
            .store(u32::from(resident), Ordering::Relaxed);
        h.version.store(VERSION, Ordering::Relaxed);
        h.local_size.store(local_size as u32, Ordering::Relaxed);
        h.ring_bytes.store(ring_bytes as u64, Ordering::Relaxed);
        h.total_bytes.store(layout.total as u64, Ordering::Relaxed);
        h.attached.store(1, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        if local_size == 1 {
            unlink_segment(name)?;
        }
        Ok(segment)
    }

    /// Maps and validates a segment made by [`Segment::create`]; the last rank to attach
    /// removes its name, so that no crash after that point can leave it behind.
    pub(crate) fn attach(name: &str, local_rank: usize, local_size: usize) -> io::Result<Self> {
        let path = shm_path(name)?;
        // SAFETY: `path` is a valid C string.
        let fd = unsafe { libc::shm_open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return Err(os_error("shm_open (attach)", name));
        }
        let fd = Fd(fd);
        // SAFETY: `stat` is plain old data, so all-zero is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is a writable stat buffer.
        if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
            return Err(os_error("fstat", name));
        }
        let bad = |what: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/dev/shm/{name} is not a usable mpirt segment: {what}"),
            )
        };
        let file_len = st.st_size as usize;
        if file_len < PAGE {
            return Err(bad(format!("{file_len} bytes (not initialised yet?)")));
        }
        // Map just the header first: its values decide the layout we validate against.
        let probe = Mapping::new(&fd, PAGE, name)?;
        let h = probe.header();
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(bad("bad magic (not initialised yet?)".into()));
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != VERSION {
            return Err(bad(format!("version {version}, expected {VERSION}")));
        }
        let size = h.local_size.load(Ordering::Relaxed) as usize;
        if size != local_size {
            return Err(bad(format!(
                "made for {size} local ranks, not {local_size}"
            )));
        }
        let ring_bytes = h.ring_bytes.load(Ordering::Relaxed) as usize;
        let layout = Layout::new(local_size, ring_bytes)?;
        if !super::valid_ring_bytes(ring_bytes)
            || layout.total as u64 != h.total_bytes.load(Ordering::Relaxed)
            || layout.total != file_len
        {
            return Err(bad(format!(
                "ring size {ring_bytes} and length {file_len} disagree"
            )));
        }
        drop(probe);
        let segment = Segment {
            map: Mapping::new(&fd, layout.total, name)?,
            layout,
        };
        // Claim first: a rank that fails to attach must not count towards the unlink.
        segment.claim(local_rank)?;
        let attached = segment.map.header().attached.fetch_add(1, Ordering::AcqRel) + 1;
        if attached as usize == local_size {
            unlink_segment(name)?;
        }
        Ok(segment)
    }

    /// Records our pid as `local_rank`'s, failing if another process (or mapping) has it.
    fn claim(&self, local_rank: usize) -> io::Result<()> {
        let pid = std::process::id() as i32;
        let ctl = self.rank_ctl(local_rank);
        match ctl
            .pid
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(other) => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("shm local rank {local_rank} is already taken by pid {other}"),
            )),
        }
    }

    pub(crate) fn local_size(&self) -> usize {
        self.layout.local_size
    }

    /// Whether each rank makes its outgoing rings resident as it opens the segment.
    pub(crate) fn rings_resident(&self) -> bool {
        self.map.header().rings_resident.load(Ordering::Relaxed) != 0
    }

    pub(crate) fn ring_bytes(&self) -> usize {
        self.layout.ring_bytes
    }

    #[inline]
    pub(crate) fn rank_ctl(&self, rank: usize) -> &RankCtl {
        assert!(
            rank < self.layout.local_size,
            "local rank {rank} out of range"
        );
        // SAFETY: RANK_CTL + rank × 128 lies before `layout.ring_ctl` inside the mapping and
        // is 128-aligned; RankCtl is atomics only, shared by all ranks without data races.
        unsafe {
            &*self
                .map
                .base()
                .as_ptr()
                .add(RANK_CTL + rank * size_of::<RankCtl>())
                .cast::<RankCtl>()
        }
    }

    /// Control block and data of the ring carrying frames from `from` to `to`.
    pub(crate) fn ring(&self, from: usize, to: usize) -> (*const RingCtl, *mut u8) {
        let i = self.layout.ring_index(from, to);
        // SAFETY (both `add`s): `i < n(n-1)`, so both offsets stay inside the mapping,
        // whose length `layout.total` covers every control block and data area.
        unsafe {
            let ctl = self
                .map
                .base()
                .as_ptr()
                .add(self.layout.ring_ctl + i * size_of::<RingCtl>());
            let data = self
                .map
                .base()
                .as_ptr()
                .add(self.layout.data + i * self.layout.ring_bytes);
            (ctl.cast::<RingCtl>(), data)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_aligned_and_indexes_are_dense() {
        let l = Layout::new(5, 8192).unwrap();
        assert_eq!(l.ring_ctl % 128, 0);
        assert_eq!(l.data % PAGE, 0);
        assert_eq!(l.total, l.data + 20 * 8192);
        let mut seen = Vec::new();
        for from in 0..5 {
            for to in (0..5).filter(|&t| t != from) {
                seen.push(l.ring_index(from, to));
            }
        }
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
    }

    /// With the engine's defaults (rings of 512 KiB, 128 KiB a receiver), each rank's incoming
    /// rings fit its budget up to 257 ranks on a host, so the rings grow linearly with the
    /// ranks; 2 ranks keep whole rings. Rings of one size took 8.3 GB at 128 ranks.
    #[test]
    fn a_hosts_rings_grow_linearly_with_its_ranks() {
        let (largest, budget) = (512 << 10, 128 << 10);
        let ring = |n| super::super::ring_bytes_for(n, largest, budget);
        assert_eq!((ring(2), ring(3), ring(4)), (largest, 64 << 10, 32 << 10));
        for n in 3..=257 {
            let l = Layout::new(n, ring(n)).unwrap();
            let rings = l.total - l.data;
            assert!(rings <= n * budget, "{n} ranks: {rings} bytes of rings");
            // Not shrunk further than a power of two needs.
            assert!(
                2 * (n - 1) * ring(n) > budget,
                "{n} ranks: rings of {}",
                ring(n)
            );
        }
        assert_eq!((ring(64), ring(128)), (2 << 10, 1 << 10));
        let l = Layout::new(128, ring(128)).unwrap();
        assert!(l.total < 19 << 20, "{} bytes at 128 ranks", l.total);
        // Past the floor each ring keeps the smallest size a frame needs.
        assert_eq!(ring(4096), 512);
    }

    #[test]
    fn rejects_bad_names_and_oversized_layouts() {
        assert!(shm_path("a/b").is_err());
        assert!(shm_path("").is_err());
        assert!(Layout::new(1 << 20, 1 << 40).is_err());
        // Control blocks alone past the address space (as many ranks as a job may name on
        // one host): an error, not an overflow.
        assert!(Layout::new(u32::MAX as usize, 512).is_err());
        assert!(Layout::new(usize::MAX, 512).is_err());
    }

    /// A rank of a build whose ring protocol differs (a segment of another version) is told
    /// so by name, instead of reading records the other way.
    #[test]
    fn a_segment_of_another_version_is_refused_by_name() {
        let name = format!("mpirt-unit-{}-other-version", std::process::id());
        let made = Segment::create(&name, 0, 2, 4096).unwrap();
        made.map
            .header()
            .version
            .store(VERSION - 1, Ordering::Relaxed);
        let attached = Segment::attach(&name, 1, 2);
        unlink_segment(&name).unwrap();
        let message = attached
            .err()
            .expect("attached to another version")
            .to_string();
        let named = format!("/dev/shm/{name} is not a usable mpirt segment");
        let versions = format!("version {}, expected {VERSION}", VERSION - 1);
        assert!(
            message.contains(&named) && message.contains(&versions),
            "{message}"
        );
    }
}
