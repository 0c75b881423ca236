//! Shared (cross-process) futex calls on words that live in memory that processes map from
//! one file: the segment, and mpirt's shared-memory collective areas.
//!
//! Deliberately not FUTEX_PRIVATE_FLAG: waiter and waker are different processes that map the
//! same tmpfs file, so the kernel must key the futex on the file page, not on one address space.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, at most `timeout`. Any return (woken, value already
/// changed, timeout, signal) is fine: callers re-check their condition. Returns whether the
/// sleep ran to its timeout.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, 4-byte aligned atomic (a reference guarantees both) and `ts`
    // outlives the call; FUTEX_WAIT only reads them. The kernel compares the word atomically.
    let slept = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    slept != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}

/// Wakes the (single) process sleeping on `word`, if any.
pub fn wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned atomic; FUTEX_WAKE does not access user memory beyond
    // using the address as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1i32);
    }
}
