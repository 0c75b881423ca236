//! The job's files under /dev/shm, and their removal once no live process of the job uses
//! them, whatever launched it.
//!
//! Every file the runtime names under /dev/shm starts `mpirt-<job id>-`: the shm transport's
//! segment, the communicators' shared areas and the windows' (each unlinked once every rank
//! mapped it), libfabric shm's endpoints (for the endpoint's life). A rank killed while such a
//! name exists leaves it. rsrun's agents remove a dead job's files, but under another launcher
//! (Hydra's mpiexec, Slurm's srun, Open MPI's mpirun) nothing did, and a tmpfs file holds its
//! memory until someone does. Open MPI and MPICH leave this to their launchers' daemons (Open
//! MPI's session directories) and to unlinking a segment once every process has attached.
//!
//! Here, every rank holds a shared `flock` on its job's lock file, `mpirt-<job id>-lock`, from
//! before it makes or opens any of the job's files (start-up) until finalize. The kernel drops
//! a process's locks when it ends, SIGKILL included. So an exclusive lock granted at once
//! (`LOCK_NB`) on a job's lock file says no live process of the job uses this /dev/shm, and
//! whoever holds it may remove the job's files: the next job's first rank on the host does
//! ([`sweep`]), and so does the job's last rank to finalize there ([`JobLock::release`]).
//!
//! Races, each closed by checking, with the lock held, that the locked file is still the one
//! the name leads to (the same inode): a rank that opened the lock file just before a sweep
//! removed it finds its lock on a removed file and opens the name again (`JobLock::hold`); a
//! sweep that took its exclusive lock on a removed file (another sweep finished first, and a
//! starting rank made the file anew) removes nothing. A job's files are removed before its
//! lock file, under the lock, so that a sweep cut short leaves the lock file for the next.
//! Only names of this form are touched, only this user's files, and never through a link; a
//! lock file of the job's name that is another user's leaves the job without a lock (see
//! [`JobLock::hold`]).
//! Files of a job without a lock file (made by an mpirt before this one, or by the PML
//! alone, as pml's own tests run it) are left alone: nothing can tell whether their job lives.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the job's files are.
pub const DIR: &str = "/dev/shm";

/// What starts every name of the runtime's files under [`DIR`].
const PREFIX: &str = "mpirt-";

/// What ends a job's lock file's name: `mpirt-<job id>-lock`.
const LOCK_SUFFIX: &str = "-lock";

/// How many times [`JobLock::hold`] opens the lock file again after finding the one it locked
/// removed (each time a sweep removed it between the opening and the lock): far past any
/// run of sweeps that could meet a starting rank.
const HOLD_TRIES: usize = 64;

/// This process's shared lock on its job's lock file: while it is held, no sweep removes the
/// job's files. Dropped, it is released (as when the process ends).
#[derive(Debug)]
pub struct JobLock {
    file: File,
    dir: PathBuf,
    job_id: String,
}

impl JobLock {
    /// Takes the shared lock on `job_id`'s lock file under [`DIR`], making the file if it is
    /// not there. Call it before making or opening any of the job's files there. `None` where
    /// the name is another user's (a file that user's job of the same id left, as a killed
    /// singleton of the same process id does): there is nothing of this job's to lock, and
    /// nothing to fear, since that user's sweeps remove only that user's files and this
    /// user's judge only this user's lock files; the job runs, its files never swept.
    pub fn hold(job_id: &str) -> io::Result<Option<JobLock>> {
        JobLock::hold_in(Path::new(DIR), job_id)
    }

    fn hold_in(dir: &Path, job_id: &str) -> io::Result<Option<JobLock>> {
        let path = lock_path(dir, job_id)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let anothers = || path.symlink_metadata().is_ok_and(|m| m.uid() != me);
        for _ in 0..HOLD_TRIES {
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
            {
                Ok(file) => file,
                // Refused (its mode, or `fs.protected_regular`), or a link of theirs.
                Err(_) if anothers() => return Ok(None),
                Err(e) => return Err(named(&path, "opening", e)),
            };
            let held = file.metadata().map_err(|e| named(&path, "reading", e))?;
            if held.uid() != me {
                return Ok(None);
            }
            lock(&file, libc::LOCK_SH).map_err(|e| named(&path, "locking", e))?;
            if is_named(&file, &path) {
                return Ok(Some(JobLock {
                    file,
                    dir: dir.to_path_buf(),
                    job_id: job_id.to_string(),
                }));
            }
        }
        Err(io::Error::other(format!(
            "{} was removed under each of {HOLD_TRIES} locks taken on it",
            path.display()
        )))
    }

    /// Releases the lock at finalize (the process makes and opens none of the job's files
    /// after); where no other live process of the job holds one, removes the job's files left
    /// in the directory and its lock file. Returns how many files it removed.
    pub fn release(self) -> usize {
        // Converting the shared lock may drop it before the exclusive one is refused: no
        // matter, it is being released.
        if lock(&self.file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            return 0;
        }
        let path = lock_path(&self.dir, &self.job_id).expect("checked when it was held");
        if !is_named(&self.file, &path) {
            return 0;
        }
        remove_job(&self.dir, &self.job_id, &path)
    }
}

/// Whether this process may make files under [`DIR`]: where it may not, it makes none of
/// the job's there (nor holds their lock).
pub fn dir_writable() -> bool {
    let dir = std::ffi::CString::new(DIR).expect("DIR holds no NUL");
    // SAFETY: a NUL-terminated path that outlives the call; access only reads it.
    unsafe { libc::access(dir.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// Removes the files of every job under [`DIR`] that no live process holds a lock on (see the
/// module's notes); returns how many files it removed. Best effort: a file it cannot read or
/// remove stays.
pub fn sweep() -> io::Result<usize> {
    sweep_in(Path::new(DIR))
}

fn sweep_in(dir: &Path) -> io::Result<usize> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        let Some(job_id) = name.to_str().and_then(job_of_lock_file) else {
            continue;
        };
        let path = entry.path();
        // Not through a link; O_NONBLOCK so that opening never waits (on a FIFO planted under
        // the name, say).
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        else {
            continue;
        };
        let ours = file.metadata().is_ok_and(|m| m.is_file() && m.uid() == me);
        // Another user's job is not ours to judge; a live job's rank holds a shared lock.
        if !ours || lock(&file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            continue;
        }
        if is_named(&file, &path) {
            removed += remove_job(dir, job_id, &path);
        }
    }
    Ok(removed)
}

/// Removes the files of `job_id` in `dir`, then its lock file `lock`, whose exclusive lock the
/// caller holds (checked to be the file `lock` names); returns how many it removed. The
/// directory is read under the lock: no live process of the job can make a file meanwhile.
fn remove_job(dir: &Path, job_id: &str, lock: &Path) -> usize {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let prefix = format!("{PREFIX}{job_id}-");
    let lock_name = lock.file_name();
    let mut removed = 0;
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let of_job = name
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix) && Some(name.as_os_str()) != lock_name);
            // `symlink_metadata`: a link's own owner, never what it points to.
            let mine = || entry.path().symlink_metadata().is_ok_and(|m| m.uid() == me);
            if of_job && mine() && fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
    }
    if fs::remove_file(lock).is_ok() {
        removed += 1;
    }
    removed
}

/// The job id a lock file's name carries, if `name` is one.
fn job_of_lock_file(name: &str) -> Option<&str> {
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_suffix(LOCK_SUFFIX))
        .filter(|job| !job.is_empty())
}

/// The path of `job_id`'s lock file in `dir`.
fn lock_path(dir: &Path, job_id: &str) -> io::Result<PathBuf> {
    if job_id.is_empty() || job_id.contains('/') || job_id.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad job id {job_id:?} for a file name"),
        ));
    }
    Ok(dir.join(format!("{PREFIX}{job_id}{LOCK_SUFFIX}")))
}

/// Whether `path` still names the open `file` (it was not removed, nor replaced by another).
fn is_named(file: &File, path: &Path) -> bool {
    match (file.metadata(), path.symlink_metadata()) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

/// `flock(file, how)`, again where a signal interrupted it.
fn lock(file: &File, how: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: `file` is an open descriptor for the call's length; flock only sets locks.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn named(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of this test's alone, removed at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(what: &str) -> Scratch {
            let dir = std::env::temp_dir()
                .join(format!("mpirt-host-files-{what}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("a scratch directory");
            Scratch(dir)
        }

        fn plant(&self, name: &str) {
            fs::write(self.0.join(name), b"x").expect("a planted file");
        }

        /// The names in the directory, sorted.
        fn names(&self) -> Vec<String> {
            let mut names: Vec<String> = fs::read_dir(&self.0)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        }
    }

    /// The lock `hold_in` takes on `job`'s lock file in `dir`, which is this user's.
    fn held(dir: &Path, job: &str) -> JobLock {
        JobLock::hold_in(dir, job)
            .unwrap()
            .expect("the lock file is this user's")
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_dead_jobs_files_go_and_a_live_jobs_stay() {
        let dir = Scratch::new("sweep");
        // The live job: a rank holds its lock (flock locks belong to the opening, so a second
        // opening in this process is refused as another process would be).
        let live = held(&dir.0, "live");
        dir.plant("mpirt-live-ofi-0");
        dir.plant("mpirt-live-coll-1-0-0");
        // The dead job: its rank took the lock and is gone (the lock went with it).
        drop(held(&dir.0, "dead"));
        dir.plant("mpirt-dead-0");
        dir.plant("mpirt-dead-ofi-1");
        // Not a job's lock or file: another job whose name the dead one's starts, an older
        // mpirt's job without a lock file, and some other program's file.
        dir.plant("mpirt-deadx-ofi-0");
        dir.plant("mpirt-old-coll-5-0-0");
        dir.plant("12345:1000:0");
        assert_eq!(sweep_in(&dir.0).unwrap(), 3);
        assert_eq!(
            dir.names(),
            [
                "12345:1000:0",
                "mpirt-deadx-ofi-0",
                "mpirt-live-coll-1-0-0",
                "mpirt-live-lock",
                "mpirt-live-ofi-0",
                "mpirt-old-coll-5-0-0",
            ]
        );
        // Released by its last rank, the live job's files go too.
        assert_eq!(live.release(), 3);
        assert_eq!(
            dir.names(),
            ["12345:1000:0", "mpirt-deadx-ofi-0", "mpirt-old-coll-5-0-0"]
        );
    }

    #[test]
    fn a_job_releasing_while_another_rank_holds_its_lock_removes_nothing() {
        let dir = Scratch::new("release");
        let first = held(&dir.0, "j");
        let second = held(&dir.0, "j");
        dir.plant("mpirt-j-win-7-0");
        assert_eq!(first.release(), 0);
        assert_eq!(sweep_in(&dir.0).unwrap(), 0);
        assert_eq!(dir.names(), ["mpirt-j-lock", "mpirt-j-win-7-0"]);
        assert_eq!(second.release(), 2);
        assert!(dir.names().is_empty());
    }

    #[test]
    fn a_lock_on_a_removed_lock_file_protects_nothing_and_is_taken_again() {
        let dir = Scratch::new("removed");
        // A rank opened the lock file, then a sweep removed it before the rank's lock: the
        // rank's lock is on a file no name leads to, which `hold` must not take for held.
        let path = lock_path(&dir.0, "j").unwrap();
        let early = File::create(&path).unwrap();
        fs::remove_file(&path).unwrap();
        lock(&early, libc::LOCK_SH).unwrap();
        assert!(!is_named(&early, &path));
        let held = held(&dir.0, "j");
        assert!(is_named(&held.file, &path));
        dir.plant("mpirt-j-0");
        assert_eq!(sweep_in(&dir.0).unwrap(), 0, "the job's lock is held");
        // A sweep that locked the removed file (another finished first) removes nothing.
        assert_eq!(
            JobLock {
                file: early,
                dir: dir.0.clone(),
                job_id: "j".into(),
            }
            .release(),
            0
        );
        assert_eq!(dir.names(), ["mpirt-j-0", "mpirt-j-lock"]);
    }

    #[test]
    fn links_other_names_and_bad_job_ids_are_left_alone() {
        let dir = Scratch::new("names");
        assert_eq!(job_of_lock_file("mpirt-pmi-0123-lock"), Some("pmi-0123"));
        assert_eq!(job_of_lock_file("mpirt--lock"), None);
        assert_eq!(job_of_lock_file("mpirt-j-0"), None);
        assert_eq!(job_of_lock_file("other-j-lock"), None);
        assert!(JobLock::hold_in(&dir.0, "a/b").is_err());
        assert!(JobLock::hold_in(&dir.0, "").is_err());
        // A lock file that is a link (planted, say, at a file of the user's) is not followed:
        // neither taken by a rank nor judged by a sweep, and what it points to stays.
        dir.plant("target");
        std::os::unix::fs::symlink(dir.0.join("target"), dir.0.join("mpirt-l-lock")).unwrap();
        dir.plant("mpirt-l-0");
        let refused = JobLock::hold_in(&dir.0, "l").unwrap_err();
        assert!(refused.to_string().contains("mpirt-l-lock"), "{refused}");
        assert_eq!(sweep_in(&dir.0).unwrap(), 0);
        assert_eq!(dir.names(), ["mpirt-l-0", "mpirt-l-lock", "target"]);
    }

    /// A lock file of the job's name that another user's job left (a killed singleton of the
    /// same process id) is that user's: the job runs without a lock (before, it failed to
    /// start), and no sweep of this user's takes that file or the job's files for a dead job's.
    #[test]
    fn another_users_lock_file_of_the_jobs_name_is_left_to_them() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            println!("skipped: needs root, to make a file another user owns");
            return;
        }
        let dir = Scratch::new("other-user");
        let path = lock_path(&dir.0, "singleton-7").unwrap();
        fs::write(&path, b"").unwrap();
        // nobody's ids.
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        assert!(JobLock::hold_in(&dir.0, "singleton-7").unwrap().is_none());
        dir.plant("mpirt-singleton-7-coll-7-1-0");
        assert_eq!(sweep_in(&dir.0).unwrap(), 0);
        assert_eq!(
            dir.names(),
            ["mpirt-singleton-7-coll-7-1-0", "mpirt-singleton-7-lock"]
        );
        // A link of another user's under the name is theirs too, and not followed.
        fs::remove_file(&path).unwrap();
        dir.plant("target");
        std::os::unix::fs::symlink(dir.0.join("target"), &path).unwrap();
        std::os::unix::fs::lchown(&path, Some(65534), Some(65534)).unwrap();
        assert!(JobLock::hold_in(&dir.0, "singleton-7").unwrap().is_none());
        assert_eq!(fs::read(dir.0.join("target")).unwrap(), b"x");
    }
}
