//! Whether a thread of this process that is not waiting in mpirt runs, from the kernel's
//! view of its threads (`/proc/self/task/TID/stat`): a thread that never called mpirt may be
//! computing what it will send, and a rank is not stalled while one does. A thread blocked
//! outside mpirt (joining others, on a lock or a channel) does not run; nor do mpirt's own
//! threads, which sleep in the kernel between events.

use std::fs;

/// This thread's id in the kernel (`gettid`), as `/proc/self/task` names it: the waiting
/// threads are left out of the look by it (read from `/proc/thread-self`, a kernel without that
/// link, older than 3.17, left the looking thread itself counted as running, and its rank was
/// never told stalled).
pub(super) fn this_thread() -> Option<u32> {
    // SAFETY: gettid(2) takes no arguments, touches no memory of ours and cannot fail.
    u32::try_from(unsafe { libc::gettid() }).ok()
}

/// Whether a thread of this process other than those of `waiting` (kernel ids) is running or
/// ready to run (state `R`): a computing thread is, even while another has the CPU. False where
/// the process has no such view (not Linux): the rank is then told stalled as soon as every
/// counted thread waits.
pub(super) fn another_thread_runs(waiting: &[u32]) -> bool {
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks
        .flatten()
        .filter_map(|task| Some((task.file_name().to_str()?.parse::<u32>().ok()?, task.path())))
        .any(|(tid, path)| {
            !waiting.contains(&tid)
                && fs::read_to_string(path.join("stat")).is_ok_and(|stat| runs(&stat))
        })
}

/// Whether a thread's `stat` line says it runs: its state, the field after the name in
/// parentheses (which may itself hold spaces and parentheses), is `R`.
fn runs(stat: &str) -> bool {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        == Some("R")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Barrier;

    #[test]
    fn a_stat_line_s_state_is_read_after_the_name() {
        assert!(runs("4242 (worker (1) x) R 1 2 3"));
        assert!(!runs("4242 (R) S 1 2 3"));
        assert!(!runs("4242 (worker) D 1"));
        assert!(!runs("cut off"));
    }

    #[test]
    fn a_computing_thread_runs() {
        let me = this_thread().expect("gettid");
        let stop = AtomicBool::new(false);
        let started = Barrier::new(2);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                started.wait();
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            started.wait();
            let seen = another_thread_runs(&[me]);
            stop.store(true, Ordering::Relaxed);
            assert!(seen, "a spinning thread is not seen running");
        });
    }
}
