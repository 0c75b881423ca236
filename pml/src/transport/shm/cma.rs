//! Cross Memory Attach: single-copy reads of a peer's memory with `process_vm_readv`.

use std::io;

/// The kernel caps one transfer at MAX_RW_COUNT (just under 2 GiB); asking for 1 GiB at a
/// time keeps every call a full one on the common path.
const MAX_CHUNK: usize = 1 << 30;

/// Copies `dst.len()` bytes from `remote_addr` in process `pid` into `dst`.
///
/// Needs ptrace-level access to `pid` (same user, and under Yama `ptrace_scope` 1 the peer must
/// have called [`allow_ptrace_from_peers`]).
pub fn read_remote(pid: i32, remote_addr: u64, dst: &mut [u8]) -> io::Result<()> {
    let total = dst.len();
    let context = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("process_vm_readv of {total} bytes at {remote_addr:#x} in pid {pid}: {e}"),
        )
    };
    remote_addr
        .checked_add(total as u64)
        .ok_or_else(|| context(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let mut done = 0;
    while done < total {
        let len = (total - done).min(MAX_CHUNK);
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: (remote_addr + done as u64) as usize as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `local` describes `len` bytes inside `dst`, which we borrow mutably, so the
        // kernel writes only memory we exclusively own. `remote` is only dereferenced by the
        // kernel inside the other process, where a bad address is an EFAULT, not UB here.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(context(e));
        }
        if n == 0 {
            return Err(context(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("remote memory ended after {done} bytes"),
            )));
        }
        done += n as usize;
    }
    Ok(())
}

/// Lets any process of this user read our memory with [`read_remote`]. Yama's `ptrace_scope` 1
/// otherwise allows only ancestors, and ranks are siblings. Without Yama this is a no-op.
pub fn allow_ptrace_from_peers() -> io::Result<()> {
    // SAFETY: PR_SET_PTRACER takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    // EINVAL: the kernel has no Yama, so nothing restricts ptrace between siblings.
    if e.raw_os_error() == Some(libc::EINVAL) {
        return Ok(());
    }
    Err(io::Error::new(
        e.kind(),
        format!("prctl(PR_SET_PTRACER): {e}"),
    ))
}
