//! The end of a non-blocking call on the shared engine (feature `threads`), called from the
//! middle of the owner's way out without the registers a call may change.
//!
//! Why: an `Entry`'s drop, inlined into every non-blocking call, branches to this end where
//! its thread's call went through the shared engine's lock. A plain call there, though never
//! taken at `Single`, told the register allocator that the caller-saved registers die at it,
//! so the caller's loop kept its values apart from them, in other registers or on the stack:
//! osu_bw's receiver at `Single` ran 5 to 7 instructions a message more with the feature than
//! without it (moves around the immediate receive, osu-benches/compare/shm-callgrind.sh). On
//! x86-64 the branch calls a stub that saves and restores every register the C ABI lets a
//! callee change, so that to the compiler it changes none (only the flags and memory) and the
//! loop keeps the registers it has without the feature.
//!
//! A progress hook that the end runs (`shared::let_go_after_call` steps the hooks the call
//! deferred) may panic in a user-defined operation: the panic is caught in the stub's callee,
//! which must not unwind through the stub, and resumed once the stub has returned.

use std::any::Any;
use std::cell::RefCell;

use super::{mark, shared, OWNER};
use crate::sync::thread_local;

thread_local! {
    /// A panic of the hooks the end ran, resumed once the stub has returned.
    static PANICKED: RefCell<Option<Box<dyn Any + Send>>> = const { RefCell::new(None) };
}

/// Ends a non-blocking call on the shared engine: marks this thread outside a call and lets
/// go of the lock, stepping the hooks the call deferred.
#[inline(always)]
pub(super) fn let_go_shared() {
    #[cfg(all(target_arch = "x86_64", not(target_feature = "avx")))]
    let panicked: u64;
    #[cfg(all(target_arch = "x86_64", not(target_feature = "avx")))]
    // SAFETY: `keeping_registers` saves every general-purpose and vector register that the C
    // ABI lets a callee change and that this target has (no AVX: the vector registers are
    // xmm0-15 alone), but rax, which holds `let_go_c`'s answer, declared written here; it
    // calls `let_go_c` on a 16-byte aligned stack (the asm block's stack is aligned for a
    // call, and the stub pushes 8 registers and 264 bytes after its return address), restores
    // them and returns; the block declares the flags and memory changed (neither
    // `preserves_flags` nor `nomem`) and uses the stack (not `nostack`). `let_go_c` never
    // unwinds (it catches the hooks' panics, and an `extern "C"` function that panics
    // otherwise aborts), so nothing unwinds through the stub.
    unsafe {
        std::arch::asm!("call {stub}", stub = sym keeping_registers, lateout("rax") panicked);
    }
    #[cfg(not(all(target_arch = "x86_64", not(target_feature = "avx"))))]
    let panicked = let_go_c();
    if panicked != 0 {
        resume_a_hooks_panic();
    }
}

/// Resumes the panic of a hook that the end ran. Never returns, so that the caller keeps
/// nothing alive across its call.
#[cold]
#[inline(never)]
fn resume_a_hooks_panic() -> ! {
    let payload = PANICKED.with(|panicked| panicked.borrow_mut().take());
    std::panic::resume_unwind(payload.expect("a hook's panic kept for its resumption"))
}

/// What the stub calls: the end itself; whether a hook panicked, its panic kept for
/// `resume_a_hooks_panic` (1), or not (0).
#[cold]
#[inline(never)]
extern "C" fn let_go_c() -> u64 {
    OWNER.with(|owner| owner.set(mark::NO));
    match std::panic::catch_unwind(shared::let_go_after_call) {
        Ok(()) => 0,
        Err(payload) => {
            PANICKED.with(|panicked| *panicked.borrow_mut() = Some(payload));
            1
        }
    }
}

/// `let_go_c` with every caller-saved register but its answer's kept: rcx, rdx, rsi, rdi and
/// r8-r11 pushed, 8 bytes of padding, xmm0-15 stored below them, in the order they come back.
#[cfg(all(target_arch = "x86_64", not(target_feature = "avx")))]
#[unsafe(naked)]
extern "C" fn keeping_registers() {
    std::arch::naked_asm!(
        "push rcx",
        "push rdx",
        "push rsi",
        "push rdi",
        "push r8",
        "push r9",
        "push r10",
        "push r11",
        "sub rsp, 264",
        "movaps [rsp], xmm0",
        "movaps [rsp + 16], xmm1",
        "movaps [rsp + 32], xmm2",
        "movaps [rsp + 48], xmm3",
        "movaps [rsp + 64], xmm4",
        "movaps [rsp + 80], xmm5",
        "movaps [rsp + 96], xmm6",
        "movaps [rsp + 112], xmm7",
        "movaps [rsp + 128], xmm8",
        "movaps [rsp + 144], xmm9",
        "movaps [rsp + 160], xmm10",
        "movaps [rsp + 176], xmm11",
        "movaps [rsp + 192], xmm12",
        "movaps [rsp + 208], xmm13",
        "movaps [rsp + 224], xmm14",
        "movaps [rsp + 240], xmm15",
        "call {let_go}",
        "movaps xmm0, [rsp]",
        "movaps xmm1, [rsp + 16]",
        "movaps xmm2, [rsp + 32]",
        "movaps xmm3, [rsp + 48]",
        "movaps xmm4, [rsp + 64]",
        "movaps xmm5, [rsp + 80]",
        "movaps xmm6, [rsp + 96]",
        "movaps xmm7, [rsp + 112]",
        "movaps xmm8, [rsp + 128]",
        "movaps xmm9, [rsp + 144]",
        "movaps xmm10, [rsp + 160]",
        "movaps xmm11, [rsp + 176]",
        "movaps xmm12, [rsp + 192]",
        "movaps xmm13, [rsp + 208]",
        "movaps xmm14, [rsp + 224]",
        "movaps xmm15, [rsp + 240]",
        "add rsp, 264",
        "pop r11",
        "pop r10",
        "pop r9",
        "pop r8",
        "pop rdi",
        "pop rsi",
        "pop rdx",
        "pop rcx",
        "ret",
        let_go = sym let_go_c,
    )
}

#[cfg(all(test, not(feature = "model-check")))]
mod tests {
    use super::{let_go_shared, mark, OWNER};
    use crate::backend::hooks;

    const MESSAGE: &str = "a hook failed at the end of a call on the shared engine";

    fn panics() {
        panic!("{MESSAGE}");
    }

    /// A hook that panics as a non-blocking call on the shared engine ends (a user-defined
    /// operation's): the panic comes out of the call's end, as it did before the stub (caught
    /// where it may not unwind, resumed once the stub has returned), and leaves the thread
    /// marked outside a call. Without the catch the process aborts; without the resumption
    /// the end returns.
    #[test]
    fn a_hooks_panic_at_a_shared_calls_end_comes_out_of_the_call() {
        let hook = hooks::register(panics);
        hooks::defer();
        OWNER.with(|owner| owner.set(mark::SHARED_CALL.wrapping_sub(1)));
        let ended = std::panic::catch_unwind(let_go_shared);
        hooks::unregister(hook);
        let payload = ended.expect_err("the hook's panic did not come out of the call's end");
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some(MESSAGE)
        );
        assert!(
            OWNER.with(|owner| owner.get()) == mark::NO,
            "the call's end left the thread marked inside a call"
        );
    }
}
