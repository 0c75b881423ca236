//! The host-wide memory barrier a rank runs when it says it sleeps, so that the peers sending
//! to it need none per message (Linux `membarrier`).
//!
//! A sender publishes a frame (its stamp) and then reads whether the receiver sleeps; a
//! receiver says it sleeps and then looks at its rings. Each side's store must be ordered
//! before its load, or both can miss the other's and the receiver sleeps through the frame.
//! A fence on each side does that, but the sender's, one per message, waits until the stamp's
//! cache line has come over from the receiver's core (osu_mbw_mr's 8-byte rate was 1.12x
//! without it, paired, on a loaded Intel Xeon). Instead a rank that registered
//! ([`SleepBarrier::for_host`]) runs [`global`] after it says it sleeps: every CPU then running
//! a thread of a registered process runs a full barrier before the call returns. A registered
//! sender's stamp store precedes its load of the sleep word in program order (a compiler fence
//! keeps it so): if the load comes after that barrier it sees the sleep, and if it came before,
//! the store did too and the sleeper's look at its rings sees the frame. A thread that was not
//! running has passed a context switch, a full barrier too. The same holds for the room a
//! receiver makes and the sender that said it waits for room.
//!
//! Each call interrupts every CPU then running a registered process, other jobs' ranks on the
//! host included, so a job uses it only while its ranks on the host are few and have cores of
//! their own ([`SleepBarrier::for_host`]: ranks that share cores sleep often, and the sharing
//! changes only that cost, not the ordering); where it cannot (a kernel before 4.16, a seccomp
//! filter), ranks fence as before.

use crate::membarrier;

/// Most ranks on a host that use the barrier: each sleep interrupts the CPUs of all the others
/// that run at the time.
const MAX_RANKS: usize = 16;

/// Whether this process runs the barrier when it sleeps (and so is reached by its peers').
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SleepBarrier {
    /// Senders to this rank fence per message, and so does this rank as a sender.
    Fence,
    /// Registered: this rank's sleeps run [`global`], and it reaches registered peers'.
    Global,
}

impl SleepBarrier {
    /// Registers this process where `local_size` ranks on the host, none sharing a core
    /// (`shares_cores`), may use the barrier; says which way it sleeps.
    pub(crate) fn for_host(local_size: usize, shares_cores: bool) -> Self {
        if local_size <= MAX_RANKS && !shares_cores && membarrier::register_global_expedited() {
            SleepBarrier::Global
        } else {
            SleepBarrier::Fence
        }
    }
}

/// Runs a full memory barrier on every CPU running a thread of a registered process, this
/// one's included. False when the kernel refused, which a process that registered never sees
/// in practice; its caller then must not sleep.
pub(crate) fn global() -> bool {
    membarrier::global_expedited().is_ok()
}
