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

/// Calls `each` with every range freed since `seen` (which is updated); returns false when
/// the log overflowed, so that every idle registration must go.
pub fn freed_since(seen: &mut u64, mut each: impl FnMut(usize, usize)) -> bool {
    let now = GENERATION.load(Ordering::Acquire);
    if now == *seen {
        return true;
    }
    // Copied out so that `each` runs without the lock: if it allocated and freed a large
    // block, the allocator would take the lock again.
    let (ranges, len, complete) = {
        let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
        *seen = GENERATION.load(Ordering::Acquire);
        let taken = (log.ranges, log.len, !log.overflowed);
        log.len = 0;
        log.overflowed = false;
        taken
    };
    for &(start, end) in &ranges[..len] {
        each(start, end);
    }
    complete
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOCATOR: TrackingAllocator = TrackingAllocator;

    #[test]
    fn large_frees_are_logged_and_small_ones_not() {
        assert!(installed());
        let mut seen = 0;
        freed_since(&mut seen, |_, _| {});
        let big = vec![1u8; 64 << 10];
        let at = big.as_ptr() as usize;
        drop(big);
        drop(vec![2u8; 100]);
        let mut freed = Vec::with_capacity(LOG_SLOTS);
        // Other tests may free memory meanwhile: look for ours among whatever was logged.
        assert!(freed_since(&mut seen, |s, e| freed.push((s, e))));
        assert!(freed.contains(&(at, at + (64 << 10))), "{freed:x?}");
        assert!(freed.iter().all(|&(s, e)| e - s >= TRACKED_BYTES));
    }
}
