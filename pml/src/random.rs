//! Random bytes from the kernel, for what a stranger to the job must not guess: handshake
//! nonces, and the names of the files a job's ranks make for each other.

use std::io;

/// Fills `buf` from the kernel's random source (getrandom(2), which blocks only until the
/// source is seeded, early in boot).
pub(crate) fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the buffer is valid for writes of the `buf.len() - got` bytes from `got`.
        let r = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        got += r as usize;
    }
    Ok(())
}
