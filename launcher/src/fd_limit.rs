//! Room for the descriptors a launcher holds: a pipe or two per rank, and with
//! `--output-filename` two files per rank in rsrun.

use std::io;

/// Raises the soft limit on open files to the hard limit, as Open MPI's mpirun and orted do,
/// so a job of a few hundred ranks does not fail on the common soft limit of 1024 when the
/// hard limit allows more. Ranks inherit the raised limit, as under Open MPI.
pub fn raise_to_hard() -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill and setrlimit to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}
