//! The shared arena: large heap blocks that same-host peers can map and copy from directly.
//!
//! `process_vm_readv` pins the sender's pages on every call and copies at a third of
//! `memcpy`'s speed. When [`crate::TrackingAllocator`] is the global allocator and the engine
//! has activated the arena, blocks of [`ARENA_MIN_BYTES`] or more come from one `memfd` file
//! mapped `MAP_SHARED`. A peer maps the same file once (through `/proc/<pid>/fd/<n>`, see
//! `transport::shm::PeerArena`) and a rendezvous from such a block becomes a plain `memcpy`,
//! with page tables that stay populated across messages from the same buffer.
//!
//! Design points:
//! - The allocator runs inside the global allocator: it allocates nothing, and its state is a
//!   fixed-size table of free extents under a futex mutex. Extents are page-granular, first
//!   fit, coalesced on free; virtual space above `top` has never been handed out.
//! - A freed block's pages are punched out of the file (`FALLOC_FL_PUNCH_HOLE`) before the
//!   range can be reused: memory goes back to the kernel, every peer's mapping of those pages
//!   goes with it, and every free extent reads as zeros, so `alloc_zeroed` writes nothing. A
//!   range that cannot be punched is never reused (only address space is lost). Peers never
//!   see stale bytes either way: they map the same file, so they read whatever is there now.
//! - The file is sparse and the mapping `MAP_NORESERVE`: [`ARENA_BYTES`] is address space, not
//!   memory. Touched pages are accounted as shmem (`Shmem` in /proc/meminfo, `RssShmem` of the
//!   process), charged to the same memory cgroup as anonymous memory would be.
//! - Up to [`REUSE_BYTES`] of freed blocks are kept with their pages for a new block of the
//!   same size (scratch buffers freed and allocated again on every call), like glibc keeps its
//!   heap; only zeroed allocations then pay a `memset`.
//! - Under an address-space limit (`RLIMIT_AS`: `ulimit -v`, Slurm's `VSizeFactor`), every
//!   rank's own arena and its mappings of its local peers' arenas count against it, sparse
//!   or not: [`arena_bytes`] gives them a quarter of the limit, or none when that is too
//!   little, so that the program's own allocations still fit.
//! - The engine stops the arena serving new blocks ([`Arena::stop_serving`]) when the host's
//!   peers cannot read from it (no single copy, or an arena that could not be mapped): the
//!   blocks would pay its costs for nothing. Blocks already handed out stay valid.
//! - The engine does not activate the arena where more than `MPIRT_SHM_ARENA_MAX_RANKS` (63)
//!   ranks share the host (`transport::shm`'s `activate_arena`): the program's large blocks
//!   would all be shared memory, mapped by every peer.
//! - Exhaustion (the table or the address space) is not an error: the block comes from the
//!   system allocator and is sent by `process_vm_readv`.
//! - fork: the mapping is `MADV_DONTFORK` and the fd `MFD_CLOEXEC`. A forked child does not
//!   share the parent's large blocks: with the mapping inherited, `MAP_SHARED`, a child's
//!   write to a block it believes its own copy would change the parent's data. The child
//!   would find the range unmapped, though, and the system allocator would place the child's
//!   own large blocks there (a 1 MiB `malloc` does), which the allocator would then take for
//!   arena blocks: a leak on free, and on a same-page-count `realloc` a block returned
//!   unchanged that glibc made smaller than the pages it spans. So a `pthread_atfork` child
//!   handler, registered at activation, maps the range again as `PROT_NONE` anonymous
//!   address space: nothing else can land there, so `contains` stays true only for the
//!   parent's blocks, and a child touching one of those faults at once (as with memory
//!   registered for RDMA) instead of reading or writing the wrong memory. Its own large
//!   blocks come from the system allocator, and its frees of the parent's blocks are no-ops.
//!   exec'd programs never see the fd; `posix_spawn` and `vfork` share the parent's memory
//!   and run no fork handlers.
//! - A rank that dies leaves its peers' mappings valid: the file lives until the last mapping
//!   goes, so a late copy reads stale bytes, never a fault.
//! - Security: a peer opens `/proc/<pid>/fd/<n>`, which the kernel allows only with ptrace read
//!   access to this process (same user, and dumpable), as for CMA. Such a process could also
//!   open the file for writing; that grants nothing the runtime does not grant already, since
//!   it lets every process of the user attach (`PR_SET_PTRACER_ANY`, for CMA under Yama).
//!   Peers map it read-only. Sealing it against writes is not an option: seals also forbid
//!   the hole punching that returns freed memory.
//! - The verbs registration cache is unaffected: [`crate::TrackingAllocator`] logs arena frees
//!   like any other, so registrations over punched pages are dropped before their next use.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Blocks at least this large come from the arena. Rendezvous from an arena block starts
/// past 4 KiB on shm (`MPIRT_SHM_ARENA_EAGER_LIMIT`), but each arena block costs a rounding to whole pages (at most 6% here),
/// a lock and a `getpid`, and once evicted from the reuse list a `fallocate`: small next to
/// filling 64 KiB, not next to a few KiB. Smaller blocks stay with the system allocator and
/// go by `process_vm_readv`.
pub const ARENA_MIN_BYTES: usize = 64 << 10;
/// Address space of the global arena: live large blocks beyond it come from the system.
pub const ARENA_BYTES: usize = 64 << 30;
/// Below this an arena sized under an address-space limit is not worth having.
pub const ARENA_MIN_LEN: usize = 64 << 20;
pub const PAGE: usize = 4096;
/// First page of the file: a peer that maps it checks this word to know it has the right file.
pub const ARENA_MAGIC: u64 = u64::from_le_bytes(*b"mpirtarn");
/// Free extents the table tracks; adjacent ones merge, so only fragmentation fills it.
const FREE_SLOTS: usize = 1024;
/// Freed blocks the global arena keeps, unpunched, for a new block of the same size: a
/// collective's scratch buffer allocated and freed on every call would otherwise take a page
/// fault per page per call (`osu_allreduce` 1–4 MiB, 2 ranks: 100k page faults a rank instead
/// of 3k). glibc keeps freed heap memory in the same way; this bounds what the arena keeps
/// back from the kernel.
pub const REUSE_BYTES: usize = 64 << 20;
const REUSE_SLOTS: usize = 16;

/// Free extents as offsets in the file, sorted, never adjacent to each other or to `top`.
struct Extents {
    free: [(usize, usize); FREE_SLOTS],
    n: usize,
    /// Offsets at and above this have never been handed out (or all came back).
    top: usize,
    /// Freed blocks kept with their pages (not free extents), oldest first.
    kept: [(usize, usize); REUSE_SLOTS],
    n_kept: usize,
    kept_bytes: usize,
}

/// Where a peer finds an active arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaInfo {
    pub pid: i32,
    pub fd: i32,
    pub base: usize,
    pub len: usize,
}

impl ArenaInfo {
    /// As published in the key-value service: `pid fd base len`.
    pub fn to_wire(&self) -> String {
        format!("{} {} {:#x} {}", self.pid, self.fd, self.base, self.len)
    }

    pub fn from_wire(s: &str) -> Option<ArenaInfo> {
        let mut it = s.split(' ');
        let pid = it.next()?.parse().ok()?;
        let fd = it.next()?.parse().ok()?;
        let base = usize::from_str_radix(it.next()?.strip_prefix("0x")?, 16).ok()?;
        let len = it.next()?.parse().ok()?;
        it.next()
            .is_none()
            .then_some(ArenaInfo { pid, fd, base, len })
    }
}

/// One memfd-backed region and the allocator over it; inactive (and empty) until
/// [`activate`](Self::activate).
pub struct Arena {
    /// 0 until active; never changes afterwards (blocks may live until the process ends).
    base: AtomicUsize,
    len: AtomicUsize,
    fd: AtomicI32,
    /// The process that activated it: a forked child is another (see the module notes).
    owner: AtomicI32,
    /// Set when the engine finds the arena of no use; only frees run afterwards.
    stopped: AtomicBool,
    /// Bytes of freed blocks kept for reuse instead of punched (see [`REUSE_BYTES`]).
    reuse_bytes: usize,
    extents: Mutex<Extents>,
}

/// The arena [`crate::TrackingAllocator`] serves large blocks from.
pub static GLOBAL: Arena = Arena::with_reuse(REUSE_BYTES);

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

impl Arena {
    /// An arena that punches every freed block at once.
    pub const fn new() -> Arena {
        Self::with_reuse(0)
    }

    /// An arena that keeps up to `reuse_bytes` of freed blocks for reuse by the same size.
    pub const fn with_reuse(reuse_bytes: usize) -> Arena {
        Arena {
            base: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            fd: AtomicI32::new(-1),
            owner: AtomicI32::new(0),
            stopped: AtomicBool::new(false),
            reuse_bytes,
            extents: Mutex::new(Extents {
                free: [(0, 0); FREE_SLOTS],
                n: 0,
                top: PAGE,
                kept: [(0, 0); REUSE_SLOTS],
                n_kept: 0,
                kept_bytes: 0,
            }),
        }
    }

    /// Creates the file and maps `len` bytes of it (once; later calls return the same). `len`
    /// is rounded up to whole pages and must leave room for the header page and one block.
    pub fn activate(&self, len: usize) -> io::Result<ArenaInfo> {
        // The lock also serialises activation: nothing allocates from an inactive arena.
        let _guard = self.extents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(info) = self.info() {
            return Ok(info);
        }
        let len = len.next_multiple_of(PAGE);
        if len < 2 * PAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shared arena of {len} bytes has no room for a block"),
            ));
        }
        // SAFETY: the name is a NUL-terminated literal; flags are plain integers.
        let fd = unsafe { libc::memfd_create(c"mpirt-arena".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_error("memfd_create"));
        }
        let close_on_err = |e: io::Error| {
            // SAFETY: `fd` is ours and not yet published.
            unsafe { libc::close(fd) };
            e
        };
        // SAFETY: plain syscall on our own fd.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return Err(close_on_err(os_error("ftruncate of the shared arena")));
        }
        // SAFETY: a fresh mapping chosen by the kernel, of a file exactly `len` long.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(close_on_err(os_error("mmap of the shared arena")));
        }
        // SAFETY: `base..base+len` is the mapping just made. Failure only means a forked child
        // would share the blocks; say so rather than go on silently.
        if unsafe { libc::madvise(base, len, libc::MADV_DONTFORK) } != 0 {
            let e = os_error("madvise(MADV_DONTFORK) of the shared arena");
            // SAFETY: unmapping the mapping made above, which nothing uses yet.
            unsafe { libc::munmap(base, len) };
            return Err(close_on_err(e));
        }
        // Only the global arena: its handler needs no context, and the allocator's `contains`
        // is asked only about it.
        let rc = if std::ptr::eq(self, &GLOBAL) {
            // SAFETY: registers a function pointer; the handler only makes system calls.
            unsafe { libc::pthread_atfork(None, None, Some(reserve_global_range_in_child)) }
        } else {
            0
        };
        if rc != 0 {
            // SAFETY: unmapping the mapping made above, which nothing uses yet.
            unsafe { libc::munmap(base, len) };
            return Err(close_on_err(io::Error::from_raw_os_error(rc)));
        }
        // SAFETY: the header page is inside the mapping, writable, and no block overlaps it.
        unsafe { (base as *mut u64).write(ARENA_MAGIC) };
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() };
        self.fd.store(fd, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.owner.store(pid, Ordering::Relaxed);
        self.base.store(base as usize, Ordering::Release);
        Ok(ArenaInfo {
            pid,
            fd,
            base: base as usize,
            len,
        })
    }

    /// Where the arena is, once active.
    pub fn info(&self) -> Option<ArenaInfo> {
        let base = self.base.load(Ordering::Acquire);
        (base != 0).then(|| ArenaInfo {
            pid: self.owner.load(Ordering::Relaxed),
            fd: self.fd.load(Ordering::Relaxed),
            base,
            len: self.len.load(Ordering::Relaxed),
        })
    }

    /// Whether `ptr` is a block of this arena.
    pub fn contains(&self, ptr: *const u8) -> bool {
        let base = self.base.load(Ordering::Acquire);
        base != 0 && (ptr as usize).wrapping_sub(base) < self.len.load(Ordering::Relaxed)
    }

    /// Whether this process may use the arena: it is active and we are not a forked child.
    fn usable(&self) -> bool {
        // SAFETY: getpid cannot fail. A syscall, but only on blocks of 64 KiB or more.
        self.base.load(Ordering::Acquire) != 0
            && self.owner.load(Ordering::Relaxed) == unsafe { libc::getpid() }
    }

    /// Hands out no more blocks (for good: the decision is the host's, see the module notes);
    /// frees of blocks already handed out still return them.
    pub fn stop_serving(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// A block of `size` bytes aligned to `align` (a power of two), zeroed; null when the
    /// arena is inactive or full, and the caller goes to the system allocator.
    pub fn alloc(&self, size: usize, align: usize) -> *mut u8 {
        match self.block(size, align) {
            Some((p, true)) => {
                // SAFETY: a block of at least `size` bytes, ours alone; a kept block holds
                // what its last owner left.
                unsafe { p.write_bytes(0, size) };
                p
            }
            Some((p, false)) => p,
            None => std::ptr::null_mut(),
        }
    }

    /// As [`alloc`](Self::alloc), but the block may hold a previous owner's bytes.
    pub fn alloc_uninit(&self, size: usize, align: usize) -> *mut u8 {
        self.block(size, align)
            .map_or(std::ptr::null_mut(), |(p, _)| p)
    }

    /// A block and whether it was kept from a free (so not zeroed).
    fn block(&self, size: usize, align: usize) -> Option<(*mut u8, bool)> {
        if size == 0 || !self.usable() || self.stopped.load(Ordering::Relaxed) {
            return None;
        }
        let size = size.checked_next_multiple_of(PAGE)?;
        let align = align.max(PAGE);
        let base = self.base.load(Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed);
        let mut ext = self.extents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(offset) = ext.take_kept(size, align, base) {
            return Some(((base + offset) as *mut u8, true));
        }
        ext.take(size, align, base, len)
            .map(|offset| ((base + offset) as *mut u8, false))
    }

    /// Returns the block at `ptr` of `size` bytes (as allocated) to the arena: kept for reuse
    /// within the arena's reuse budget (evicting the oldest kept blocks), else its pages go back
    /// to the kernel.
    ///
    /// # Safety
    /// `ptr` and `size` describe a block [`alloc`](Self::alloc) returned and nobody uses any more.
    pub unsafe fn free(&self, ptr: *mut u8, size: usize) {
        if !self.usable() {
            // A forked child: the pages are the parent's, so the file is left alone.
            return;
        }
        let offset = ptr as usize - self.base.load(Ordering::Relaxed);
        let size = size.next_multiple_of(PAGE);
        let mut evicted = [(0, 0); REUSE_SLOTS];
        let mut n_evicted = 0;
        if size <= self.reuse_bytes {
            let mut ext = self.extents.lock().unwrap_or_else(|e| e.into_inner());
            while ext.n_kept == REUSE_SLOTS || ext.kept_bytes + size > self.reuse_bytes {
                evicted[n_evicted] = ext.kept[0];
                n_evicted += 1;
                ext.kept_bytes -= ext.kept[0].1;
                let kept = ext.n_kept;
                ext.kept.copy_within(1..kept, 0);
                ext.n_kept -= 1;
            }
            let at = ext.n_kept;
            ext.kept[at] = (offset, size);
            ext.n_kept += 1;
            ext.kept_bytes += size;
        } else {
            evicted[0] = (offset, size);
            n_evicted = 1;
        }
        // Punched outside the lock, and before the range can be handed out again, so a new
        // owner never loses data.
        for &(offset, size) in &evicted[..n_evicted] {
            if self.punch(offset, size) {
                let mut ext = self.extents.lock().unwrap_or_else(|e| e.into_inner());
                ext.give_back(offset, offset + size);
            }
        }
    }

    fn punch(&self, offset: usize, size: usize) -> bool {
        let fd = self.fd.load(Ordering::Relaxed);
        // SAFETY: plain syscall on our own fd, within the file's length.
        let rc = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                size as libc::off_t,
            )
        };
        if rc == 0 {
            return true;
        }
        let at = self.base.load(Ordering::Relaxed) + offset;
        // SAFETY: the range is a whole-page block of our mapping that nobody uses any more.
        unsafe { libc::madvise(at as *mut libc::c_void, size, libc::MADV_REMOVE) == 0 }
    }

    /// Bytes of the file backed by memory (for tests and diagnostics).
    pub fn resident_bytes(&self) -> io::Result<u64> {
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes only into `st`.
        if unsafe { libc::fstat(self.fd.load(Ordering::Relaxed), &mut st) } != 0 {
            return Err(os_error("fstat of the shared arena"));
        }
        Ok(st.st_blocks as u64 * 512)
    }
}

impl Extents {
    /// Offset of a free range of `size` bytes whose address (`base` + offset) is a multiple
    /// of `align`, first fit.
    fn take(&mut self, size: usize, align: usize, base: usize, len: usize) -> Option<usize> {
        let aligned = |offset: usize| {
            base.checked_add(offset)?
                .checked_next_multiple_of(align)
                .map(|a| a - base)
        };
        for i in 0..self.n {
            let (start, end) = self.free[i];
            let at = aligned(start)?;
            let Some(stop) = at.checked_add(size).filter(|&s| s <= end) else {
                continue;
            };
            match (at > start, stop < end) {
                (false, false) => self.remove(i),
                (false, true) => self.free[i].0 = stop,
                (true, false) => self.free[i].1 = at,
                (true, true) => {
                    // Split in two: needs a slot; without one, try elsewhere.
                    if self.n == FREE_SLOTS {
                        continue;
                    }
                    self.free[i].1 = at;
                    self.insert(i + 1, (stop, end));
                }
            }
            return Some(at);
        }
        let at = aligned(self.top)?;
        let stop = at.checked_add(size).filter(|&s| s <= len)?;
        if at > self.top {
            // The gap left by alignment is free space; untracked (table full), it is only
            // address space lost until everything below it comes back.
            let gap = (self.top, at);
            self.top = stop;
            self.give_back(gap.0, gap.1);
        }
        self.top = stop;
        Some(at)
    }

    /// The most recently kept block of exactly `size` bytes at an address aligned to `align`.
    fn take_kept(&mut self, size: usize, align: usize, base: usize) -> Option<usize> {
        let i = (0..self.n_kept)
            .rev()
            .find(|&i| self.kept[i].1 == size && (base + self.kept[i].0).is_multiple_of(align))?;
        let offset = self.kept[i].0;
        self.kept.copy_within(i + 1..self.n_kept, i);
        self.n_kept -= 1;
        self.kept_bytes -= size;
        Some(offset)
    }

    /// Marks `[start, end)` free, merging with neighbours and with `top`.
    fn give_back(&mut self, start: usize, end: usize) {
        let i = self.free[..self.n].partition_point(|&(s, _)| s < start);
        let joins_prev = i > 0 && self.free[i - 1].1 == start;
        let joins_next = i < self.n && self.free[i].0 == end;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.free[i - 1].1 = self.free[i].1;
                self.remove(i);
            }
            (true, false) => self.free[i - 1].1 = end,
            (false, true) => self.free[i].0 = start,
            (false, false) => {
                if end == self.top {
                    self.top = start;
                    return;
                }
                if self.n == FREE_SLOTS {
                    return;
                }
                self.insert(i, (start, end));
            }
        }
        // The last extent may now reach `top`: the space above it is all free.
        if self.n > 0 && self.free[self.n - 1].1 == self.top {
            self.top = self.free[self.n - 1].0;
            self.n -= 1;
        }
    }

    fn remove(&mut self, i: usize) {
        self.free.copy_within(i + 1..self.n, i);
        self.n -= 1;
    }

    fn insert(&mut self, i: usize, extent: (usize, usize)) {
        self.free.copy_within(i..self.n, i + 1);
        self.free[i] = extent;
        self.n += 1;
    }
}

/// The length of each arena when `n_local` ranks share a host under the address-space limit
/// `limit` (`None`: unlimited): each rank maps its own and its peers', `n_local` in all, and
/// they get a quarter of the limit. An error says why there is none.
pub fn arena_bytes(limit: Option<u64>, n_local: usize) -> Result<usize, String> {
    let Some(limit) = limit else {
        return Ok(ARENA_BYTES);
    };
    let share = usize::try_from(limit / 4 / n_local.max(1) as u64).unwrap_or(usize::MAX);
    let len = share.min(ARENA_BYTES) / PAGE * PAGE;
    if len < ARENA_MIN_LEN {
        return Err(format!(
            "an address-space limit (RLIMIT_AS) of {} MiB leaves too little for {n_local} \
             arenas of {} MiB",
            limit >> 20,
            ARENA_MIN_LEN >> 20
        ));
    }
    Ok(len)
}

/// This process's address-space limit (`RLIMIT_AS`), `None` when unlimited.
pub fn address_space_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into `lim`.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// The `pthread_atfork` child handler of [`GLOBAL`] (see the module notes on fork): the range
/// the child lost to `MADV_DONTFORK` becomes inaccessible address space of its own.
extern "C" fn reserve_global_range_in_child() {
    let base = GLOBAL.base.load(Ordering::Acquire);
    let len = GLOBAL.len.load(Ordering::Relaxed);
    // SAFETY: the range is the parent's arena, which `MADV_DONTFORK` left unmapped here, so
    // `MAP_FIXED` replaces nothing; no memory is reserved for it.
    let got = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if got == libc::MAP_FAILED {
        // The system allocator could then place blocks the allocator takes for arena blocks:
        // stop the child (async-signal-safe calls only) rather than corrupt its heap.
        let msg = b"mpirt: a forked child could not reserve the shared arena's range\n";
        // SAFETY: writes a static buffer to stderr, then ends the child.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
}

fn os_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena(pages: usize) -> Arena {
        let a = Arena::new();
        a.activate(pages * PAGE).unwrap();
        a
    }

    fn free_list(a: &Arena) -> (Vec<(usize, usize)>, usize) {
        let e = a.extents.lock().unwrap();
        (e.free[..e.n].to_vec(), e.top)
    }

    #[test]
    fn blocks_are_page_aligned_disjoint_and_zeroed() {
        let a = arena(64);
        let sizes = [1, PAGE, PAGE + 1, 3 * PAGE, 5000];
        let blocks: Vec<_> = sizes.iter().map(|&s| (a.alloc(s, 8), s)).collect();
        for (i, &(p, s)) in blocks.iter().enumerate() {
            assert!(a.contains(p) && (p as usize).is_multiple_of(PAGE), "{p:?}");
            // SAFETY: `p` is a fresh block of `s` bytes.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, s) };
            assert!(bytes.iter().all(|&b| b == 0));
            bytes.fill(i as u8 + 1);
        }
        for (i, &(p, s)) in blocks.iter().enumerate() {
            // SAFETY: as above; every block was filled with its own byte.
            let bytes = unsafe { std::slice::from_raw_parts(p, s) };
            assert!(
                bytes.iter().all(|&b| b == i as u8 + 1),
                "block {i} overwritten"
            );
        }
        for &(p, s) in &blocks {
            // SAFETY: allocated above with this size, no longer used.
            unsafe { a.free(p, s) };
        }
        assert_eq!(
            free_list(&a),
            (vec![], PAGE),
            "everything merged back into top"
        );
    }

    #[test]
    fn freed_blocks_are_reused_zeroed_and_merge() {
        let a = arena(16);
        let x = a.alloc(2 * PAGE, 1);
        let y = a.alloc(2 * PAGE, 1);
        let z = a.alloc(2 * PAGE, 1);
        // SAFETY: fresh blocks of 2 pages.
        unsafe { y.write_bytes(7, 2 * PAGE) };
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(y, 2 * PAGE) };
        let y2 = a.alloc(PAGE, 1);
        assert_eq!(y2, y, "first fit reuses the hole");
        // SAFETY: a fresh block of a page.
        assert_eq!(unsafe { *y2 }, 0, "a reused block reads as zeros");
        // SAFETY: allocated above, no longer used.
        unsafe {
            a.free(x, 2 * PAGE);
            a.free(y2, PAGE);
        }
        let (free, top) = free_list(&a);
        assert_eq!(
            free.len(),
            1,
            "x, y2 and y's tail merged into one: {free:x?}"
        );
        assert_eq!(free[0], (PAGE, PAGE + 4 * PAGE));
        assert_eq!(top, PAGE + 6 * PAGE);
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(z, 2 * PAGE) };
        assert_eq!(free_list(&a), (vec![], PAGE));
    }

    #[test]
    fn alignment_beyond_a_page_is_honoured() {
        let a = arena(256);
        let small = a.alloc(PAGE, 1);
        let big_align = 64 * PAGE;
        let p = a.alloc(PAGE, big_align);
        assert!((p as usize).is_multiple_of(big_align), "{p:?}");
        let gap = a.alloc(PAGE, 1);
        assert!(
            p as usize == small as usize + PAGE || gap < p,
            "the gap left by alignment is reused"
        );
        // SAFETY: all allocated above, no longer used.
        unsafe {
            a.free(small, PAGE);
            a.free(p, PAGE);
            a.free(gap, PAGE);
        }
        assert_eq!(free_list(&a), (vec![], PAGE));
    }

    #[test]
    fn exhaustion_returns_null_so_the_caller_falls_back() {
        let a = arena(4);
        let p = a.alloc(3 * PAGE, 1);
        assert!(!p.is_null());
        assert!(a.alloc(PAGE, 1).is_null(), "header page plus three: full");
        assert!(a.alloc(usize::MAX - 5, 1).is_null(), "no overflow");
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(p, 3 * PAGE) };
        assert!(!a.alloc(3 * PAGE, 1).is_null(), "room again after a free");
        assert!(Arena::new().alloc(PAGE, 1).is_null(), "inactive arena");
    }

    #[test]
    fn freeing_punches_the_pages_out_of_the_file() {
        let a = arena(1024);
        let size = 256 * PAGE;
        let p = a.alloc(size, 1);
        let before = a.resident_bytes().unwrap();
        // SAFETY: a fresh block of `size` bytes.
        unsafe { p.write_bytes(1, size) };
        let touched = a.resident_bytes().unwrap();
        assert!(touched >= before + size as u64, "{before} -> {touched}");
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(p, size) };
        let after = a.resident_bytes().unwrap();
        assert!(after <= before, "{touched} -> {after}: pages not returned");
    }

    #[test]
    fn the_free_table_survives_fragmentation() {
        let a = arena(4 * FREE_SLOTS + 8);
        let blocks: Vec<_> = (0..2 * FREE_SLOTS + 2).map(|_| a.alloc(PAGE, 1)).collect();
        assert!(blocks.iter().all(|p| !p.is_null()));
        // Every other block: more holes than the table holds; the excess is lost space only.
        for p in blocks.iter().step_by(2) {
            // SAFETY: allocated above, no longer used.
            unsafe { a.free(*p, PAGE) };
        }
        assert_eq!(free_list(&a).0.len(), FREE_SLOTS);
        for p in blocks.iter().skip(1).step_by(2) {
            // SAFETY: allocated above, no longer used.
            unsafe { a.free(*p, PAGE) };
        }
        let (free, top) = free_list(&a);
        assert!(free.len() <= 1, "{free:x?}");
        assert!(top <= PAGE + (2 * FREE_SLOTS + 2) * PAGE);
    }

    #[test]
    fn threads_allocate_and_free_concurrently() {
        // Without and with the reuse list, whose blocks come back dirty.
        for reuse in [0, 16 * PAGE] {
            let a = Arena::with_reuse(reuse);
            a.activate(4096 * PAGE).unwrap();
            std::thread::scope(|s| {
                for t in 0..4u8 {
                    let a = &a;
                    s.spawn(move || {
                        for round in 0..500usize {
                            let size = (1 + (round + t as usize) % 7) * PAGE;
                            let p = a.alloc(size, 1);
                            assert!(!p.is_null());
                            // SAFETY: a fresh block of `size` bytes, ours alone.
                            let bytes = unsafe { std::slice::from_raw_parts_mut(p, size) };
                            assert!(bytes.iter().all(|&b| b == 0), "a block in use elsewhere");
                            bytes.fill(t + 1);
                            std::thread::yield_now();
                            assert!(bytes.iter().all(|&b| b == t + 1), "overlapping blocks");
                            // SAFETY: allocated above, no longer used.
                            unsafe { a.free(p, size) };
                        }
                    });
                }
            });
            let e = a.extents.lock().unwrap();
            assert!(e.kept_bytes <= reuse);
            let kept: usize = e.kept[..e.n_kept].iter().map(|k| k.1).sum();
            assert_eq!(kept, e.kept_bytes);
            if reuse == 0 {
                assert_eq!((e.n, e.top), (0, PAGE), "everything merged back into top");
            }
        }
    }

    #[test]
    fn a_forked_child_neither_allocates_from_nor_punches_the_parents_arena() {
        let a = arena(64);
        let size = 4 * PAGE;
        let p = a.alloc(size, 1);
        // SAFETY: a fresh block of `size` bytes.
        unsafe { p.write_bytes(3, size) };
        // SAFETY: the child only calls the arena (no allocation, no locks another thread of
        // this test process could hold: the arena's lock is free here) and _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let refused = a.alloc(PAGE, 1).is_null();
            // SAFETY: the parent's block; in the child this must leave the file alone.
            unsafe { a.free(p, size) };
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(if refused { 0 } else { 1 }) };
        }
        assert!(child > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for our own child, writing only `status`.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child allocated from the parent's arena"
        );
        // SAFETY: our block, still allocated.
        let bytes = unsafe { std::slice::from_raw_parts(p, size) };
        assert!(
            bytes.iter().all(|&b| b == 3),
            "the child punched the parent's pages"
        );
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(p, size) };
    }

    #[test]
    fn freed_blocks_are_kept_for_the_same_size_within_the_budget() {
        let a = Arena::with_reuse(8 * PAGE);
        a.activate(64 * PAGE).unwrap();
        let p = a.alloc(3 * PAGE, 1);
        // SAFETY: a fresh block of 3 pages.
        unsafe { p.write_bytes(5, 3 * PAGE) };
        let resident = a.resident_bytes().unwrap();
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(p, 3 * PAGE) };
        assert_eq!(a.resident_bytes().unwrap(), resident, "kept, not punched");
        assert_ne!(
            a.alloc_uninit(2 * PAGE, 1),
            p,
            "another size does not take it"
        );
        let again = a.alloc_uninit(3 * PAGE, 1);
        assert_eq!(again, p, "the same size reuses it");
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(again, 3 * PAGE) };
        let zeroed = a.alloc(3 * PAGE, 1);
        assert_eq!(zeroed, p);
        // SAFETY: a block of 3 pages.
        let bytes = unsafe { std::slice::from_raw_parts(zeroed, 3 * PAGE) };
        assert!(
            bytes.iter().all(|&b| b == 0),
            "a zeroed allocation is zeroed"
        );
        // Over budget: the oldest kept block is punched and becomes a free extent again.
        let q = a.alloc(6 * PAGE, 1);
        // SAFETY: allocated above, no longer used.
        unsafe {
            a.free(zeroed, 3 * PAGE);
            a.free(q, 6 * PAGE);
        }
        let e = a.extents.lock().unwrap();
        assert_eq!(
            &e.kept[..e.n_kept],
            &[(q as usize - a.info().unwrap().base, 6 * PAGE)]
        );
        // A block larger than the whole budget is never kept.
        drop(e);
        let big = a.alloc(9 * PAGE, 1);
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(big, 9 * PAGE) };
        assert_eq!(a.extents.lock().unwrap().kept_bytes, 6 * PAGE);
    }

    #[test]
    fn an_address_space_limit_sizes_the_arenas_to_a_quarter_of_it() {
        assert_eq!(arena_bytes(None, 8), Ok(ARENA_BYTES));
        assert_eq!(arena_bytes(Some(u64::MAX), 8), Ok(ARENA_BYTES));
        assert_eq!(arena_bytes(Some(80 << 30), 2), Ok(10 << 30));
        assert_eq!(arena_bytes(Some((1 << 30) + 5), 1), Ok(256 << 20));
        let e = arena_bytes(Some(1 << 30), 8).unwrap_err();
        assert!(
            e.contains("(RLIMIT_AS) of 1024 MiB") && e.contains("8 arenas"),
            "{e}"
        );
    }

    #[test]
    fn a_stopped_arena_hands_out_nothing_but_takes_its_blocks_back() {
        let a = arena(64);
        let p = a.alloc(2 * PAGE, 1);
        assert!(!p.is_null());
        a.stop_serving();
        assert!(a.alloc(PAGE, 1).is_null() && a.alloc_uninit(PAGE, 1).is_null());
        // SAFETY: allocated above, no longer used.
        unsafe { a.free(p, 2 * PAGE) };
        assert_eq!(free_list(&a), (vec![], PAGE), "the block came back");
    }

    #[test]
    fn info_round_trips_through_the_wire_form() {
        let info = ArenaInfo {
            pid: 42,
            fd: 7,
            base: 0x7f00_0000_0000,
            len: ARENA_BYTES,
        };
        assert_eq!(ArenaInfo::from_wire(&info.to_wire()), Some(info));
        assert_eq!(ArenaInfo::from_wire("42 7 12 3"), None);
        assert_eq!(ArenaInfo::from_wire(""), None);
    }
}
