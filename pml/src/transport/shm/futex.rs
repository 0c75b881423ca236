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
    wait_at(word.as_ptr(), expected, timeout)
}

/// [`wait`] on a word by its address, which need not be mapped any more: a thread that sleeps
/// apart from the engine that maps it (`pml::nap`) holds no reference to it. The kernel reads
/// the word itself; an address no longer mapped only makes the call fail at once (EFAULT).
pub(crate) fn wait_at(word: *mut u32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT only reads the 4-byte word at `word` (aligned: every caller's word
    // is an `AtomicU32`) and `ts`, which outlives the call; the kernel reads the word
    // atomically and fails the call, without touching memory, where it is not mapped.
    let slept = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
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
