//! The global allocator that lets the RDMA registration cache stay correct.
//!
//! A cached registration pins the physical pages its virtual range had when it was made. If
//! the program frees that memory and the allocator gives it back to the kernel (glibc does so
//! for large blocks, and for any block of a thread's arena), a later allocation at the same
//! address gets other pages, and the cached registration would read or write the old ones:
//! a silent wrong answer. So the cache only keeps registrations while this allocator is the
//! program's global allocator: it logs each large block freed, and the cache drops the
//! registrations over those ranges before its next look-up. Without it, registrations are
//! dropped as soon as their message is done.
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: pml::TrackingAllocator = pml::TrackingAllocator;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Blocks smaller than this are never registered on their own (they go eagerly), and are
/// not logged. A registration still covers whole pages, so a small block freed inside a
/// registered range is covered by the large one freed around it, or by the page rule below.
const TRACKED_BYTES: usize = 4096;
const LOG_SLOTS: usize = 64;

/// Ranges freed since the cache last looked; on overflow the cache drops every idle entry.
struct FreedLog {
    ranges: [(usize, usize); LOG_SLOTS],
    len: usize,
    overflowed: bool,
}

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Bumped on every logged free, so that the cache takes the lock only when something changed.
static GENERATION: AtomicU64 = AtomicU64::new(0);
// No allocation happens under this lock: the allocator itself takes it.
static LOG: Mutex<FreedLog> = Mutex::new(FreedLog {
    ranges: [(0, 0); LOG_SLOTS],
    len: 0,
    overflowed: false,
});

/// The system allocator, logging frees of blocks the registration cache may cover.
pub struct TrackingAllocator;

fn log_free(start: usize, len: usize) {
    if len < TRACKED_BYTES {
        return;
    }
    let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    if log.len < LOG_SLOTS {
        let at = log.len;
        log.ranges[at] = (start, start + len);
        log.len += 1;
    } else {
        log.overflowed = true;
    }
    GENERATION.fetch_add(1, Ordering::Release);
}

// SAFETY: every call is forwarded to `System` with the same arguments; the logging around it
// allocates nothing and does not touch the memory.
unsafe impl GlobalAlloc for TrackingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        log_free(ptr as usize, layout.size());
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        log_free(ptr as usize, layout.size());
        System.realloc(ptr, layout, new_size)
    }
}

/// Whether the program's global allocator is [`TrackingAllocator`].
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// What was freed since `seen` (updated): `Some(ranges)` to drop registrations over, or
/// `None` when the log overflowed and every idle registration must go.
pub fn freed_since(seen: &mut u64, mut each: impl FnMut(usize, usize)) -> bool {
    let now = GENERATION.load(Ordering::Acquire);
    if now == *seen {
        return true;
    }
    let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    *seen = GENERATION.load(Ordering::Acquire);
    let complete = !log.overflowed;
    for &(start, end) in &log.ranges[..log.len] {
        each(start, end);
    }
    log.len = 0;
    log.overflowed = false;
    complete
}
