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
//! It also serves large blocks from the [shared arena](crate::shared_arena) once the engine has
//! activated it, so that same-host peers copy rendezvous data straight out of them.
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: pml::TrackingAllocator = pml::TrackingAllocator;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::shared_arena::{ARENA_MIN_BYTES, GLOBAL as ARENA, PAGE};

/// Blocks smaller than this are never registered on their own (they go eagerly), and are
/// not logged. A registration still covers whole pages, so a small block freed inside a
/// registered range is covered by the large one freed around it, or by the page rule below.
const TRACKED_BYTES: usize = 4096;
const LOG_SLOTS: usize = 64;

/// The last [`LOG_SLOTS`] ranges freed, the one freed as number `n` (counting from 0) in
/// slot `n % LOG_SLOTS`. Each cache reads from where it last looked, so that several caches
/// (one per RDMA transport, or tests in parallel) each see every free; one that fell more
/// than the ring behind drops every idle entry.
struct FreedLog {
    ranges: [(usize, usize); LOG_SLOTS],
}

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// How many frees were logged, bumped under the lock, so that a cache takes the lock only
/// when something changed.
static GENERATION: AtomicU64 = AtomicU64::new(0);
// No allocation happens under this lock: the allocator itself takes it.
static LOG: Mutex<FreedLog> = Mutex::new(FreedLog {
    ranges: [(0, 0); LOG_SLOTS],
});

/// The system allocator, logging frees of blocks the registration cache may cover.
pub struct TrackingAllocator;

fn log_free(start: usize, len: usize) {
    if len < TRACKED_BYTES {
        return;
    }
    let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    let n = GENERATION.load(Ordering::Relaxed);
    log.ranges[(n % LOG_SLOTS as u64) as usize] = (start, start + len);
    GENERATION.store(n + 1, Ordering::Release);
}

fn note_installed() {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

/// A large block from the shared arena when it is active and has room, else null.
fn arena_alloc(layout: Layout, zeroed: bool) -> *mut u8 {
    if layout.size() < ARENA_MIN_BYTES {
        std::ptr::null_mut()
    } else if zeroed {
        ARENA.alloc(layout.size(), layout.align())
    } else {
        ARENA.alloc_uninit(layout.size(), layout.align())
    }
}

// SAFETY: blocks come either from `System` or from the shared arena, which hands out
// disjoint, suitably aligned (and, from `alloc`, zeroed) ranges of its own mapping;
// `contains` tells which on the way back (in a forked child too, see `shared_arena`), so each
// block is returned to the allocator that made it. The logging allocates nothing.
unsafe impl GlobalAlloc for TrackingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_installed();
        let p = arena_alloc(layout, false);
        if !p.is_null() {
            return p;
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_installed();
        let p = arena_alloc(layout, true);
        if !p.is_null() {
            return p;
        }
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        log_free(ptr as usize, layout.size());
        if ARENA.contains(ptr) {
            ARENA.free(ptr, layout.size());
        } else {
            System.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let in_arena = ARENA.contains(ptr);
        if !in_arena && (new_size < ARENA_MIN_BYTES || ARENA.info().is_none()) {
            log_free(ptr as usize, layout.size());
            return System.realloc(ptr, layout, new_size);
        }
        // Same pages either way: the block stays where it is.
        if in_arena && new_size.next_multiple_of(PAGE) == layout.size().next_multiple_of(PAGE) {
            return ptr;
        }
        // Moving into, out of or within the arena: a fresh block, a copy, then the old one
        // freed (and logged). Growing a vector doubles it, so copies stay amortised.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let fresh = self.alloc(new_layout);
        if !fresh.is_null() {
            std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        fresh
    }
}

/// Whether the program's global allocator is [`TrackingAllocator`].
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Calls `each` with every range freed since `seen` (which is updated); returns false when
/// more were freed than the log holds, so that every idle registration must go.
pub fn freed_since(seen: &mut u64, mut each: impl FnMut(usize, usize)) -> bool {
    if GENERATION.load(Ordering::Acquire) == *seen {
        return true;
    }
    // Copied out so that `each` runs without the lock: if it allocated and freed a large
    // block, the allocator would take the lock again.
    let (ranges, from, now) = {
        let log = LOG.lock().unwrap_or_else(|e| e.into_inner());
        (log.ranges, *seen, GENERATION.load(Ordering::Acquire))
    };
    *seen = now;
    if now - from > LOG_SLOTS as u64 {
        return false;
    }
    for n in from..now {
        let (start, end) = ranges[(n % LOG_SLOTS as u64) as usize];
        each(start, end);
    }
    true
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
