//! `TrackingAllocator` as the real global allocator with the global shared arena active.
//!
//! Its own test binary, without the libtest harness: activating the arena changes where
//! every large block of the process comes from, so no other test may share the process, and
//! the fork test needs a single-threaded parent (the child allocates, which takes locks
//! another thread could have held at the fork).

use std::alloc::{GlobalAlloc, Layout};

use pml::freed_memory::{freed_since, installed};
use pml::shared_arena::{ARENA_BYTES, ARENA_MIN_BYTES, GLOBAL as ARENA, PAGE};
use pml::TrackingAllocator;

#[global_allocator]
static ALLOCATOR: TrackingAllocator = TrackingAllocator;

fn main() {
    assert!(installed());
    ARENA.activate(ARENA_BYTES).unwrap();
    large_blocks_come_from_the_active_arena_and_their_frees_are_logged();
    a_realloc_within_the_same_pages_keeps_the_block();
    a_forked_childs_large_blocks_stay_out_of_the_arena();
    println!("tracking_allocator_arena: 3 tests passed");
}

fn large_blocks_come_from_the_active_arena_and_their_frees_are_logged() {
    let mut seen = 0;
    freed_since(&mut seen, |_, _| {});
    let small = vec![1u8; ARENA_MIN_BYTES - 1];
    assert!(!ARENA.contains(small.as_ptr()));
    let zeroed = vec![0u8; 1 << 20];
    assert!(ARENA.contains(zeroed.as_ptr()) && zeroed.iter().all(|&b| b == 0));
    // A vector grown by pushes moves into the arena once it is large, keeping its bytes.
    let mut grown = Vec::new();
    for i in 0..(ARENA_MIN_BYTES * 3) {
        grown.push(i as u8);
    }
    assert!(ARENA.contains(grown.as_ptr()));
    assert!(grown.iter().enumerate().all(|(i, &b)| b == i as u8));
    // Shrinking far moves it back out, still intact.
    grown.truncate(100);
    grown.shrink_to_fit();
    assert!(!ARENA.contains(grown.as_ptr()));
    assert!(grown.iter().enumerate().all(|(i, &b)| b == i as u8));
    let at = zeroed.as_ptr() as usize;
    drop(zeroed);
    let mut freed = Vec::with_capacity(64);
    freed_since(&mut seen, |s, e| freed.push((s, e)));
    assert!(freed.contains(&(at, at + (1 << 20))), "{freed:x?}");
    // Over-aligned large blocks keep their alignment.
    let layout = Layout::from_size_align(ARENA_MIN_BYTES, 1 << 21).unwrap();
    // SAFETY: a non-zero size; freed below with the same layout.
    let p = unsafe { ALLOCATOR.alloc(layout) };
    assert!(
        ARENA.contains(p) && (p as usize).is_multiple_of(1 << 21),
        "{p:?}"
    );
    // SAFETY: allocated above with this layout.
    unsafe { ALLOCATOR.dealloc(p, layout) };
    drop(small);
}

fn a_realloc_within_the_same_pages_keeps_the_block() {
    let size = ARENA_MIN_BYTES + 100;
    let layout = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: a non-zero size.
    let p = unsafe { ALLOCATOR.alloc(layout) };
    assert!(ARENA.contains(p));
    // SAFETY: a block of `size` bytes, ours alone.
    unsafe { p.write_bytes(9, size) };
    let grown = size.next_multiple_of(PAGE);
    // SAFETY: `p` was allocated with `layout`; `grown` is non-zero.
    let q = unsafe { ALLOCATOR.realloc(p, layout, grown) };
    assert_eq!(q, p, "growing within its last page keeps the block");
    // SAFETY: the block now holds `grown` bytes, all of them in its pages.
    let bytes = unsafe { std::slice::from_raw_parts_mut(q, grown) };
    assert!(bytes[..size].iter().all(|&b| b == 9), "the bytes stayed");
    bytes[size..].fill(1);
    let one_more = grown + 1;
    let layout = Layout::from_size_align(grown, 8).unwrap();
    // SAFETY: `q` was reallocated to `layout`; `one_more` is non-zero.
    let r = unsafe { ALLOCATOR.realloc(q, layout, one_more) };
    assert_ne!(r, q, "a page more moves it");
    assert!(ARENA.contains(r));
    // SAFETY: the new block holds at least `grown` bytes copied from the old one.
    let bytes = unsafe { std::slice::from_raw_parts(r, grown) };
    assert!(bytes[..size].iter().all(|&b| b == 9) && bytes[size..].iter().all(|&b| b == 1));
    // SAFETY: allocated by the realloc above with this size.
    unsafe { ALLOCATOR.dealloc(r, Layout::from_size_align(one_more, 8).unwrap()) };
}

/// The child's verdict, as its exit status (0 when all is well).
fn child_checks(parent_block: &[u8]) -> i32 {
    // Sizes glibc serves by mmap (the range a child lost to MADV_DONTFORK is where they would
    // land) and one it serves from its heap.
    for (i, size) in [1 << 20, 4 << 20, 256 << 10, 100 << 10]
        .into_iter()
        .enumerate()
    {
        let mut v = vec![i as u8 + 1; size];
        if ARENA.contains(v.as_ptr()) {
            return 10 + i as i32;
        }
        // Within the same pages, then past them: both must stay with the system allocator.
        v.reserve_exact(size + 10 - v.len());
        v.resize(size + 10, 0);
        v.reserve_exact(3 * size);
        if ARENA.contains(v.as_ptr()) || v[..size].iter().any(|&b| b != i as u8 + 1) {
            return 20 + i as i32;
        }
    }
    // Freeing the parent's block leaves the parent's pages alone (the parent checks).
    let layout = Layout::from_size_align(parent_block.len(), 1).unwrap();
    // SAFETY: the child's copy of the parent's block, which it never touches again.
    unsafe { ALLOCATOR.dealloc(parent_block.as_ptr().cast_mut(), layout) };
    0
}

fn a_forked_childs_large_blocks_stay_out_of_the_arena() {
    let size = 1 << 20;
    let block = vec![7u8; size].leak();
    assert!(ARENA.contains(block.as_ptr()));
    // SAFETY: this process has one thread, so the child may allocate.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let status = child_checks(block);
        // SAFETY: ends the child without running the test's exit handlers.
        unsafe { libc::_exit(status) };
    }
    assert!(child > 0, "fork failed");
    let mut status = 0;
    // SAFETY: waits for our own child, writing only `status`.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's large blocks were taken for arena blocks (status {status:#x}: \
         10+i = block i inside the arena, 20+i = inside it or changed after realloc)"
    );
    assert!(
        block.iter().all(|&b| b == 7),
        "the child changed the parent's block"
    );
    let layout = Layout::from_size_align(size, 1).unwrap();
    // SAFETY: the block leaked above, no longer used.
    unsafe { ALLOCATOR.dealloc(block.as_mut_ptr(), layout) };
}
