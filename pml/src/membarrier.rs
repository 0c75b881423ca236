//! Linux's `membarrier`, global expedited: a full memory barrier that the kernel runs on every
//! CPU then running a thread of a process that registered for it (of any program on the host,
//! not only this job's), the caller's included; a thread that was not running has passed a
//! context switch, which is a full barrier too. It lets the frequent side of a store-then-load
//! handshake between processes keep program order with a compiler fence, while the rare side
//! pays the barrier for both (the shared-memory transport's sleep, mpirt's window accumulate
//! lock). `MEMBARRIER_CMD_PRIVATE_EXPEDITED` would not do: it reaches only the caller's own
//! process, and ranks are processes.

use std::io;

// From linux/membarrier.h.
const GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

fn membarrier(cmd: libc::c_int) -> io::Result<()> {
    // SAFETY: membarrier takes integers and touches no memory of ours.
    if unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_uint, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Registers this process, so that the barriers run after this returns reach its threads;
/// whether the kernel allows it (not before Linux 4.16, nor under a seccomp filter that
/// refuses the call). Registering again leaves the registration as it is.
pub fn register_global_expedited() -> bool {
    membarrier(REGISTER_GLOBAL_EXPEDITED).is_ok()
}

/// Runs the barrier. It reaches only registered processes; it does not block on them (one
/// interrupt for each CPU that runs one), and fails only where this kernel lacks it.
pub fn global_expedited() -> io::Result<()> {
    membarrier(GLOBAL_EXPEDITED)
}
