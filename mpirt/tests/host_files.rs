//! The job's files under /dev/shm where no launcher of ours removes them (`pml::host_files`):
//! a job one of whose ranks is SIGKILLed under Hydra's mpiexec leaves its files; the next job
//! removes them, while a job still running keeps its own through that sweep and completes.
//! A singleton sweeps the files a killed singleton of its process id left. Files are counted,
//! never timed. The tests are in a binary of their own, and the dead job's lock is held by
//! the test until its files are counted: a job of a test running beside it (this binary's
//! singleton, another binary's or another checkout's jobs) would otherwise sweep them first.

use std::env;
use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use mpirt::traits::*;

#[allow(dead_code)] // each test binary uses part of it
mod common;

use common::{ok_job_with, text, RANK_MODE, RANK_MODE_ARGS};

/// The directory where the test and the ranks leave word for each other.
const SIDE: &str = "MPIRT_TEST_SIDE";
/// Far past any preemption: a wait this long is a failure, not a slow machine.
const BOUND: Duration = Duration::from_secs(120);

#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    // What a killed singleton of this process id left (the id names a singleton's job): its
    // lock file, locked no more, and a file of its job's.
    let stale = (mode == "reused-pid").then(|| {
        let job = format!("/dev/shm/mpirt-singleton-{}", std::process::id());
        fs::write(format!("{job}-lock"), b"").expect("a lock file under /dev/shm");
        let stale = PathBuf::from(format!("{job}-test-stale"));
        fs::write(&stale, b"x").expect("a file under /dev/shm");
        stale
    });
    let universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    let rank = world.rank();
    let side = PathBuf::from(env::var(SIDE).expect("the test names its side directory"));
    // A file of the job's, as the runtime names them (`mpirt-<job id>-...`), that lasts as long
    // as the rank does not remove it: as libfabric shm's endpoint does.
    let job = own_job();
    let mine = Path::new("/dev/shm").join(format!("mpirt-{job}-test-{rank}"));
    fs::write(&mine, b"x").expect("a file of the job's under /dev/shm");
    match mode.as_str() {
        "live" => {
            world.barrier();
            if rank == 0 {
                say(&side, "live", &job);
            }
            wait_for(&side.join("go"));
            assert!(mine.exists(), "rank {rank}: {} was removed", mine.display());
            fs::remove_file(&mine).expect("the rank's own file");
            println!("rank {rank} kept its file");
        }
        "killed" => {
            say(
                &side,
                &format!("pid-{rank}"),
                &std::process::id().to_string(),
            );
            world.barrier();
            if rank == 0 {
                say(&side, "killed", &job);
            }
            if rank == 1 {
                // Once the test holds the job's lock too (see `hold_job_lock`).
                wait_for(&side.join("kill"));
                // SAFETY: raise has no preconditions; SIGKILL ends this process here.
                unsafe { libc::raise(libc::SIGKILL) };
            }
            // Never answered: the rank is killed by its launcher, or fails naming rank 1.
            let _ = world.process_at_rank(1).receive::<i32>();
        }
        "sweep" => fs::remove_file(&mine).expect("the rank's own file"),
        "reused-pid" => {
            let stale = stale.expect("planted before initialize");
            assert!(!stale.exists(), "{} outlived initialize", stale.display());
            fs::remove_file(&mine).expect("the rank's own file");
            println!("job {job}");
        }
        other => panic!("unknown rank mode {other}"),
    }
    println!("rank {rank} done");
}

/// The job's id, from the lock on its files this rank holds: the link of one of its
/// descriptors to `/dev/shm/mpirt-<job id>-lock`.
fn own_job() -> String {
    let held: Vec<String> = fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter_map(|target| {
            let name = target.strip_prefix("/dev/shm").ok()?.to_str()?;
            let job = name.strip_prefix("mpirt-")?.strip_suffix("-lock")?;
            Some(job.to_string())
        })
        .collect();
    assert_eq!(held.len(), 1, "the rank holds one job's lock: {held:?}");
    held[0].clone()
}

/// Writes `what` to the side file `name`, whole (under another name first).
fn say(side: &Path, name: &str, what: &str) {
    let partial = side.join(format!("{name}.{}", std::process::id()));
    fs::write(&partial, what).expect("a side file");
    fs::rename(&partial, side.join(name)).expect("a side file");
}

/// Waits until `path` exists.
fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < BOUND,
            "{} did not appear within {BOUND:?}",
            path.display()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// A shared lock on job `job`'s lock file, taken while its ranks hold theirs: as long as it
/// is held, no job's sweep (of a test running beside this one on the host: another binary's,
/// another checkout's) takes the job for dead and removes its files before they are counted.
fn hold_job_lock(job: &str) -> fs::File {
    let path = format!("/dev/shm/mpirt-{job}-lock");
    let file = fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // SAFETY: `file` is an open descriptor for the call's length; flock only sets a lock.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) };
    assert_eq!(locked, 0, "{path}: {}", std::io::Error::last_os_error());
    file
}

/// The names under /dev/shm of job `job`'s files, sorted.
fn files_of(job: &str) -> Vec<String> {
    let prefix = format!("mpirt-{job}-");
    let mut names: Vec<String> = fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

/// Asserts that `files` (of job `job`) hold its lock file and the file each of its 2 ranks made
/// (a transport may have made more: libfabric shm's endpoints).
fn assert_holds(files: &[String], job: &str) {
    for made in ["lock", "test-0", "test-1"] {
        let name = format!("mpirt-{job}-{made}");
        assert!(files.contains(&name), "{name} is not among {files:?}");
    }
}

/// `mpiexec.hydra -n 2` on this binary in rank mode `mode`.
fn hydra(mode: &str, side: &Path) -> Command {
    let mut c = Command::new("mpiexec.hydra");
    c.args(["-n", "2"])
        .arg(env::current_exe().unwrap())
        .args(RANK_MODE_ARGS)
        .env(RANK_MODE, mode)
        .env(SIDE, side);
    c
}

/// The job that runs through the sweep: told to end (and waited for, killed past [`BOUND`])
/// when dropped, so that a failing test leaves no job behind.
struct Live {
    child: Option<Child>,
    go: PathBuf,
}

impl Live {
    /// Waits until the job's rank 0 says `path`, failing with the job's output if it ended
    /// first.
    fn wait_for(&mut self, path: &Path) {
        let start = Instant::now();
        while !path.exists() {
            let child = self.child.as_mut().unwrap();
            if child.try_wait().expect("the job's status").is_some() {
                let output = self.child.take().unwrap().wait_with_output().expect("wait");
                let (stdout, stderr) = text(&output);
                panic!(
                    "the job ended before it said {}\n{stdout}\n{stderr}",
                    path.display()
                );
            }
            assert!(
                start.elapsed() < BOUND,
                "{} did not appear within {BOUND:?}",
                path.display()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Tells the ranks to end and returns the job's output.
    fn finish(mut self) -> std::process::Output {
        fs::write(&self.go, b"").expect("the go file");
        self.child.take().unwrap().wait_with_output().expect("wait")
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = fs::write(&self.go, b"");
            let start = Instant::now();
            while child.try_wait().is_ok_and(|status| status.is_none()) {
                if start.elapsed() > BOUND {
                    let _ = child.kill();
                }
                thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

#[test]
fn a_killed_jobs_files_are_removed_by_the_next_job_and_a_running_jobs_are_kept() {
    if Command::new("mpiexec.hydra")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: no mpiexec.hydra here (MPICH's hydra package)");
        return;
    }
    let side = env::temp_dir().join(format!("mpirt-test-host-files-{}", std::process::id()));
    let _ = fs::remove_dir_all(&side);
    fs::create_dir_all(&side).unwrap();
    // A job that runs through the sweep, holding its files.
    let mut live = hydra("live", &side);
    live.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut live = Live {
        child: Some(live.spawn().expect("mpiexec.hydra")),
        go: side.join("go"),
    };
    live.wait_for(&side.join("live"));
    let live_job = fs::read_to_string(side.join("live")).unwrap();
    let live_files = files_of(&live_job);
    assert_holds(&live_files, &live_job);

    // A job whose rank 1 is SIGKILLed: no launcher of ours removes its files. The test holds
    // its lock until they are counted, then lets it go as the ranks' went.
    let holder = {
        let side = side.clone();
        thread::spawn(move || {
            wait_for(&side.join("killed"));
            let job = fs::read_to_string(side.join("killed")).unwrap();
            let held = hold_job_lock(&job);
            say(&side, "kill", "");
            (job, held)
        })
    };
    let killed = common::run_limited(hydra("killed", &side));
    let (stdout, stderr) = text(&killed);
    assert!(!killed.status.success(), "{stdout}\n{stderr}");
    assert!(
        side.join("kill").exists(),
        "the job ended before its rank 1 was told to die\n{stdout}\n{stderr}"
    );
    let (killed_job, held) = holder.join().expect("the job's lock held");
    for rank in 0..2 {
        let pid = fs::read_to_string(side.join(format!("pid-{rank}")))
            .unwrap_or_else(|e| panic!("rank {rank} said no pid ({e})\n{stdout}\n{stderr}"));
        // Hydra ended the job; its ranks' lock goes once each is reaped.
        let start = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                start.elapsed() < BOUND,
                "rank {rank} (pid {pid}) outlived its job"
            );
            thread::sleep(Duration::from_millis(5));
        }
    }
    assert_holds(&files_of(&killed_job), &killed_job);
    drop(held);

    // The next job, under any launcher: its first rank on the host sweeps.
    ok_job_with(2, "sweep", &[(SIDE, side.to_str().unwrap())]);
    // Gone, or going: a job of another run on this host may have taken the dead job's lock
    // just before this one's sweep and be removing its files still (this sweep then skips
    // them).
    let start = Instant::now();
    while !files_of(&killed_job).is_empty() {
        assert!(
            start.elapsed() < BOUND,
            "the killed job's files outlived the next job's sweep: {:?}",
            files_of(&killed_job)
        );
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(files_of(&live_job), live_files, "the running job's files");

    // The running job finds its files and completes; its last rank removes its lock file.
    let output = live.finish();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("rank {rank} kept its file")),
            "{stdout}\n{stderr}"
        );
    }
    assert_eq!(files_of(&live_job), Vec::<String>::new());
    fs::remove_dir_all(&side).unwrap();
}

/// A singleton whose process id a killed singleton had (its job's id, hence its files'
/// names) removes what that one left as it starts: its sweep comes before it takes its own
/// lock, which would have kept the dead one's lock file, and its files, as its own. Its last
/// rank (itself) removes its own lock file at finalize.
#[test]
fn a_singleton_removes_what_a_killed_one_of_its_process_id_left() {
    let mut command = Command::new(env::current_exe().unwrap());
    command
        .args(RANK_MODE_ARGS)
        .env(RANK_MODE, "reused-pid")
        .env(SIDE, env::temp_dir());
    for var in ["MPIRT_RANK", "MPIRT_SIZE", "MPIRT_KVS_ADDR", "MPIRT_JOB_ID"] {
        command.env_remove(var);
    }
    let output = common::run_limited(command);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("rank 0 done"), "{stdout}\n{stderr}");
    let job = stdout
        .lines()
        .find_map(|line| line.strip_prefix("job "))
        .unwrap_or_else(|| panic!("the singleton named no job\n{stdout}\n{stderr}"));
    assert!(job.starts_with("singleton-"), "{job}");
    assert_eq!(files_of(job), Vec::<String>::new());
}
