//! Start-up and shut-down, and the one place the engine lives.
//!
//! The engine lives in one static (`place`). At [`Threading::Single`] and
//! [`Threading::Funneled`] only the thread that called [`initialize`] reaches it: it holds raw
//! pointers to user buffers, so it must never be reached from two threads at once, and a call
//! from another thread is an error ([`Cause::NotInitializingThread`]). At [`Threading::Serialized`]
//! and [`Threading::Multiple`] (cargo feature `threads`) any thread reaches it through a
//! process-wide lock (`shared`), which a call takes only where its thread is not the
//! initializing one at `Single` or `Funneled`: that path pays one thread-local load and
//! branch for the choice, no lock.
//! Communicators, requests and the universe are `!Send` at every level; the handles that
//! cross threads are `crate::threads`'s, which only a universe that provides `Serialized` or
//! `Multiple` can make.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::string::FromUtf8Error;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use bootstrap::Bootstrap;
use pml::host_files::{self, JobLock};
use pml::stall::Awaited;
use pml::{ContextId, Done, EngineConfig, Handle, Pml, PmlError, SourceSel, Status, TagSel};
use pml::{Waiting, Wireup};

use crate::backend::{self, AnyPml, MessageHandle, PmlChoice};
use crate::collective::CommunicatorCollectives;
use crate::communicator::Communicator;
use crate::communicator::{CommData, Rank, SimpleCommunicator};
use crate::error::{fatal, Cause, Error};
use crate::point_to_point::{
    buffer_capacity, buffered_in_flight, finish_buffered_at_finalize, reattach_buffer,
};
use crate::stall::{self, SharedWait};
use crate::threads::Threads;

mod place;
mod shared;

use place::Entry;

/// How much concurrency the program asks for and the runtime provides (`MPI_THREAD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Threading {
    Single,
    Funneled,
    Serialized,
    Multiple,
}

/// `MPI_COMM_WORLD` and `MPI_COMM_SELF`, whose handles all share these: the initializing
/// thread's (their handles are `!Send`; other threads reach the world through
/// `crate::threads`).
struct Predefined {
    world: CommData,
    self_comm: CommData,
}

thread_local! {
    static PREDEFINED: RefCell<Option<Predefined>> = const { RefCell::new(None) };
    /// The PML a call that holds it lent to its progress hooks (see `lend`), else null.
    static LENT: Cell<*mut AnyPml> = const { Cell::new(std::ptr::null_mut()) };
}

/// The launcher link, which any thread may need: to abort the job, for the job's id.
static BOOTSTRAP: Mutex<Option<Bootstrap>> = Mutex::new(None);

/// The launcher link; a thread that panicked holding it left it whole (each use is one call).
fn bootstrap() -> MutexGuard<'static, Option<Bootstrap>> {
    BOOTSTRAP.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This process's shared lock on its job's files under /dev/shm (`pml::host_files`): held
/// from before the engine makes or opens any of them until finalize, so that no other job's
/// sweep takes them for a dead job's.
static JOB_FILES: Mutex<Option<JobLock>> = Mutex::new(None);

/// Whether `initialize` ran in this process, on any thread: it runs once.
static INITIALIZED: AtomicBool = AtomicBool::new(false);
/// Whether the universe was dropped.
static FINALIZED: AtomicBool = AtomicBool::new(false);
/// This process's world rank once known (-1 before), for error messages on any thread.
static WORLD_RANK: AtomicI32 = AtomicI32::new(-1);
/// The origin of [`time`].
static EPOCH: OnceLock<Instant> = OnceLock::new();
/// The threading level `initialize` provided, once it ran (see [`threading_support`]).
static PROVIDED: OnceLock<Threading> = OnceLock::new();

/// The running job, from `initialize` to its drop (which finalizes).
pub struct Universe {
    world: SimpleCommunicator,
    _not_send: PhantomData<*const ()>,
}

impl Universe {
    /// The communicator of every rank in the job (`MPI_COMM_WORLD`).
    pub fn world(&self) -> SimpleCommunicator {
        self.world.clone()
    }

    /// The bytes attached for buffered sends (`Destination::buffered_send`).
    pub fn buffer_size(&self) -> usize {
        buffer_capacity()
    }

    /// Attaches `size` bytes for buffered sends (`MPI_Buffer_attach`), after waiting for the
    /// buffered sends in flight, as a detach does.
    pub fn set_buffer_size(&mut self, size: usize) {
        reattach_buffer(size);
    }

    /// Waits for the buffered sends in flight and attaches nothing (`MPI_Buffer_detach`).
    pub fn detach_buffer(&mut self) {
        reattach_buffer(0);
    }

    /// The number of processes the job may hold (`MPI_UNIVERSE_SIZE`): the world's size, as
    /// mpirt starts no processes after the job's own.
    pub fn size(&self) -> Option<usize> {
        Some(self.world.size() as usize)
    }

    /// Which program of a multi-program launch this process runs (`MPI_APPNUM`): 0 under
    /// rsrun, which starts one; Slurm's number under `srun --mpi=pmi2`.
    pub fn appnum(&self) -> Option<isize> {
        Some(bootstrap().as_ref()?.appnum() as isize)
    }

    /// Lets go of the inter-communicator to the parent processes (`MPI_Comm_disconnect` of
    /// `MPI_Comm_get_parent`'s): [`Communicator::parent`] is `None` afterwards. Handles of it
    /// taken before stay usable until they drop (rsmpi's would dangle).
    pub fn disconnect_parent(&mut self) {
        crate::communicator::disconnect_parent();
    }

    /// The transports and protocols in use, as `rsrun --verbose` prints them.
    pub fn description(&self) -> String {
        with_engine(|e| Ok(e.description().to_string())).unwrap_or_default()
    }

    /// What this rank's transports did so far (frames, rendezvous reads, windows' RDMA
    /// WRITEs, READs and atomics...), as the native engine counts it. On the UCX PML, which
    /// keeps its transports' counts to itself, only the non-contiguous sends and receives
    /// handed to UCX in place or left to a staging copy (`ucx_iov_sends` and its kin) and
    /// the one-sided operations are counted; the other fields are 0.
    pub fn counters(&self) -> Option<pml::Counters> {
        with_engine(|e| Ok(e.counters())).unwrap_or_default()
    }

    /// Windows' one-sided operations this rank posted on its PML's one-sided transport so
    /// far (RDMA WRITEs, READs and atomics on verbs; `ucp_put_nbx`, `ucp_get_nbx` and
    /// `ucp_atomic_op_nbx` on UCX), on either PML; `None` where the runtime is not running.
    pub fn one_sided_counters(&self) -> Option<OneSidedCounters> {
        with_engine(|e| Ok(Some(e.one_sided_counters()))).unwrap_or_default()
    }

    /// What lets handles cross threads ([`crate::threads`]): `Some` where the runtime
    /// provides [`Threading::Serialized`] or [`Threading::Multiple`].
    pub fn threads(&self) -> Option<Threads> {
        Threads::provided()
    }
}

/// Windows' one-sided operations posted on a PML's one-sided transport
/// ([`Universe::one_sided_counters`]); on verbs a write or read counts once for each part
/// posted, as `Counters::rma_writes` says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OneSidedCounters {
    /// Puts: RDMA WRITEs, `ucp_put_nbx`.
    pub puts: u64,
    /// Gets: RDMA READs, `ucp_get_nbx`.
    pub gets: u64,
    /// Fetch-and-adds and compare-and-swaps: device atomics, `ucp_atomic_op_nbx`.
    pub atomics: u64,
}

impl Drop for Universe {
    /// Finalizes: sends what is still queued, waits at a barrier so that no rank exits while a
    /// peer may still read its memory, then says goodbye to the launcher.
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A panicking rank ends the job; waiting for peers at a barrier could hang it.
            abort_job(101, "a rank panicked");
        }
        // At Serialized and Multiple this holds the shared engine's lock through the PML's
        // own wait: what it waits for (queued FINs and credits) leaves without any other
        // thread's call, and only the PML can say when it has (ARCHITECTURE.md, "Threads").
        let flushed = with_engine(|e| e.flush_all()).map_err(|c| Error::new("finalize", c));
        if let Err(e) = flushed {
            fatal(e);
        }
        // An immediate barrier on every rank, as the ranks with buffered sends in flight
        // need one: a blocking barrier (which may meet in a shared-memory area) would not
        // match theirs. Those sends must arrive though nothing waits for them (as
        // `MPI_Finalize`), and one that no rank received must not keep the job waiting for
        // ever.
        let _finalizing = stall::collective(
            stall::Call {
                op: "finalize",
                location: std::panic::Location::caller(),
                context: Some(self.world.data().context),
                peer: bootstrap::stall::Peer::None,
                tag: None,
                bytes: None,
            },
            None,
        );
        let everyone = self.world.immediate_barrier();
        if buffered_in_flight() {
            finish_buffered_at_finalize(everyone);
        } else {
            everyone.wait();
        }
        stall::uninstall();
        // Set before the engine goes, so that a call of another thread that finds it gone
        // (`place::refused`, at `Single` and `Funneled`) says `Finalized`.
        FINALIZED.store(true, Ordering::SeqCst);
        let engine = Entry::enter()
            .ok()
            .and_then(|mut entry| entry.slot().take());
        PREDEFINED.with(|slot| slot.borrow_mut().take());
        let bootstrap = bootstrap().take();
        if let (Some(mut engine), Some(mut bootstrap)) = (engine, bootstrap) {
            let flushed = engine.flush_all();
            drop(engine);
            if let Err(e) = flushed {
                bootstrap::output::say(&format!("mpirt: rank {}: finalize: {e}", bootstrap.rank()));
                bootstrap.abort(1, "finalize failed");
            }
            if let Err(e) = bootstrap.finalize() {
                bootstrap::output::say(&format!("mpirt: rank {}: finalize: {e}", bootstrap.rank()));
            }
        }
        // The engine is gone with its files (the libfabric endpoints' are removed as they
        // close); the job's last rank on the host removes what a killed rank left.
        let held = JOB_FILES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(lock) = held {
            lock.release();
        }
    }
}

/// Takes this rank's lock on its job's files under /dev/shm (`pml::host_files`) once the
/// job's id is known (the PML agreement's fence settles it) and before the engine makes or
/// opens any; first the host's first rank removes the files of jobs none of whose processes
/// live, which a launcher other than rsrun (Hydra, Slurm, mpirun) leaves where a rank was
/// killed. A host where this process cannot make files under /dev/shm (none, or not
/// writable) has none of the job's to lock; where the lock file's name is another user's,
/// the job runs without it (see `JobLock::hold`).
fn hold_job_files(bootstrap: &Bootstrap) -> Result<(), String> {
    if bootstrap.local_rank() == 0 {
        // Before this rank's lock, so that a dead job of this job's id goes too: a killed
        // singleton whose process id this one has again left files this one's names meet.
        // No file of this job's can go: none is made before every rank holds the lock (the
        // engine's first fence), and a rank's lock taken meanwhile keeps the sweep off.
        // Best effort: a dead job's file this rank cannot remove stays, as it did before.
        let _ = host_files::sweep();
    }
    let lock = match JobLock::hold(bootstrap.job_id()) {
        Ok(lock) => lock,
        Err(_) if !host_files::dir_writable() => return Ok(()),
        Err(e) => return Err(format!("the job's files under {}: {e}", host_files::DIR)),
    };
    *JOB_FILES.lock().unwrap_or_else(PoisonError::into_inner) = lock;
    Ok(())
}

/// Lets the engine wire up over the launcher's key-value service.
struct BootstrapWireup<'a>(&'a mut Bootstrap);

impl Wireup for BootstrapWireup<'_> {
    fn rank(&self) -> u32 {
        self.0.rank()
    }
    fn size(&self) -> u32 {
        self.0.size()
    }
    fn job_id(&self) -> String {
        self.0.job_id().to_string()
    }
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        self.0.put(key, value).map_err(|e| e.to_string())
    }
    fn fence(&mut self) -> Result<(), String> {
        self.0.fence().map_err(|e| e.to_string())
    }
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, String> {
        self.0.get(from, key).map_err(|e| e.to_string())
    }
    fn job_secret(&mut self) -> Result<[u8; 32], String> {
        let text = self.0.job_secret().map_err(|e| e.to_string())?;
        bootstrap::hex::decode(&text)
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| "the job's secret in the key-value space is not 64 hex digits".into())
    }
}

/// Starts the runtime: `MPI_Init`. `None` if it was already initialized in this process.
pub fn initialize() -> Option<Universe> {
    initialize_with_threading(Threading::Single).map(|(universe, _)| universe)
}

/// Starts the runtime asking for `threading`; returns the level provided (`MPI_Init_thread`):
/// the one asked for, up to [`Threading::Multiple`] where mpirt is built with the cargo
/// feature `threads` (and runs its own PML, not UCX's), else up to [`Threading::Funneled`].
/// At [`Threading::Serialized`] and [`Threading::Multiple`], [`Universe::threads`] lets the
/// program make the handles other threads use ([`crate::threads`]).
pub fn initialize_with_threading(threading: Threading) -> Option<(Universe, Threading)> {
    if INITIALIZED.swap(true, Ordering::SeqCst) {
        return None;
    }
    EPOCH.get_or_init(Instant::now);
    // Before anything else: libinfinipath, loaded with libfabric, turns SIGTERM into an
    // exit from inside its handler, racing this rank's other threads (see pml's
    // `ofi::signals`); rsrun's ranks are spared by IPATH_NO_BACKTRACE, any other's here.
    #[cfg(feature = "ofi")]
    pml::transport::ofi::signals::restore_defaults();
    // libfabric takes its settings from the environment only, before it loads, and they
    // are set only while this process runs one thread: before a PMIx bootstrap (its client
    // starts one), else once the bootstrap knows the job's size.
    #[cfg(feature = "ofi")]
    let libfabric_prepared = bootstrap::libfabric::prepare_before_bootstrap();
    let startup = |why: String| fatal(Error::new("initialize", Cause::Startup(why)));
    let mut bootstrap = Bootstrap::from_env().unwrap_or_else(|e| startup(e.to_string()));
    #[cfg(feature = "ofi")]
    if !libfabric_prepared {
        bootstrap::libfabric::prepare_environment(Some(bootstrap.size()));
    }
    WORLD_RANK.store(bootstrap.rank() as i32, Ordering::SeqCst);
    let config = match EngineConfig::from_env() {
        Ok(config) => config,
        Err(why) => startup_abort(&mut bootstrap, why),
    };
    let choice = match PmlChoice::from_env() {
        Ok(choice) => choice,
        Err(why) => startup_abort(&mut bootstrap, why),
    };
    if let Err(why) = backend::agree(&mut BootstrapWireup(&mut bootstrap), choice) {
        startup_abort(&mut bootstrap, why);
    }
    if let Err(why) = hold_job_files(&bootstrap) {
        startup_abort(&mut bootstrap, why);
    }
    let engine = match AnyPml::new(choice, &mut BootstrapWireup(&mut bootstrap), config) {
        Ok(engine) => engine,
        Err(e) => startup_abort(&mut bootstrap, e.to_string()),
    };
    if let Err(why) = stall::install(bootstrap.rank(), bootstrap.stall_line()) {
        startup_abort(&mut bootstrap, why);
    }
    let world = CommData::world(bootstrap.rank(), bootstrap.size());
    let self_comm = CommData::of_self(bootstrap.rank());
    let universe = Universe {
        world: SimpleCommunicator::new(world.clone()),
        _not_send: PhantomData,
    };
    PREDEFINED.with(|slot| *slot.borrow_mut() = Some(Predefined { world, self_comm }));
    *self::bootstrap() = Some(bootstrap);
    let provided = *PROVIDED.get_or_init(|| threading.min(choice.threading_ceiling()));
    let shared = provided >= Threading::Serialized;
    place::install(engine, shared);
    if shared {
        shared::install();
        stall::share_threads();
    }
    if let Err(e) = crate::communicator::join_parents(&universe.world) {
        fatal(e);
    }
    Some((universe, provided))
}

/// Why the runtime is not there to call: `NotInitialized` before `initialize`, `Finalized`
/// once it ran (finalize took the engine, or is taking it).
#[cold]
#[inline(never)]
fn not_running() -> Cause {
    if is_initialized() {
        Cause::Finalized
    } else {
        Cause::NotInitialized
    }
}

/// Whether `initialize` began and has not yet made the engine reachable by the calls that may
/// reach it: it has not chosen the level, or chose `Serialized` or `Multiple`, where a call
/// that finds no right to the engine (`place::refused`, outside a call) came before the
/// shared lock was installed. At `Single` and `Funneled` such a call is another thread's.
fn still_initializing() -> bool {
    PROVIDED
        .get()
        .is_none_or(|&provided| provided >= Threading::Serialized)
}

/// Whether `initialize` has run in this process.
pub fn is_initialized() -> bool {
    INITIALIZED.load(Ordering::SeqCst)
}

/// Whether the universe was dropped, which finalizes (`MPI_Finalized`).
pub fn is_finalized() -> bool {
    FINALIZED.load(Ordering::SeqCst)
}

/// The threading level the runtime provides (`MPI_Query_thread`): what `initialize` returned;
/// [`Threading::Single`] before it ran.
pub fn threading_support() -> Threading {
    PROVIDED.get().copied().unwrap_or(Threading::Single)
}

/// The version of the MPI standard whose semantics mpirt follows (`MPI_Get_version`).
pub fn version() -> (i32, i32) {
    (3, 1)
}

/// The name and version of this library (`MPI_Get_library_version`); an `Err` never comes
/// (rsmpi's shape, where the C library's text may not be UTF-8).
pub fn library_version() -> Result<String, FromUtf8Error> {
    Ok(format!("mpirt {}", env!("CARGO_PKG_VERSION")))
}

/// The name of this process's host (`MPI_Get_processor_name`), as `gethostname` gives it;
/// an `Err` never comes.
pub fn processor_name() -> Result<String, FromUtf8Error> {
    Ok(pml::transport::hostname())
}

/// Runs `pick` on the world's and self's communicator data (`MPI_COMM_WORLD`,
/// `MPI_COMM_SELF`), which exist from `initialize` to finalize.
pub(crate) fn predefined(
    pick: impl FnOnce(&CommData, &CommData) -> CommData,
) -> Result<CommData, Error> {
    PREDEFINED.with(|slot| {
        let predefined = slot.try_borrow().ok();
        match predefined.as_ref().and_then(|r| r.as_ref()) {
            Some(predefined) => Ok(pick(&predefined.world, &predefined.self_comm)),
            // Initialized and not finalized, yet not here: another thread initialized.
            None if is_initialized() && !is_finalized() => Err(Error::new(
                "predefined communicator",
                Cause::PredefinedOnOtherThread,
            )),
            None => Err(Error::new("predefined communicator", not_running())),
        }
    })
}

/// Runs `f` on this process's line to its launcher (spawn's request goes there).
pub(crate) fn with_bootstrap<R>(f: impl FnOnce(&mut Bootstrap) -> R) -> Result<R, Cause> {
    let mut link = bootstrap();
    let Some(bootstrap) = link.as_mut() else {
        return Err(not_running());
    };
    Ok(f(bootstrap))
}

fn startup_abort(bootstrap: &mut Bootstrap, why: String) -> ! {
    let message = format!("mpirt: {}", Error::new("initialize", Cause::Startup(why)));
    bootstrap::output::say(&message);
    bootstrap.abort(1, &message)
}

/// Seconds since an arbitrary moment fixed at start-up (`MPI_Wtime`).
pub fn time() -> f64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// The resolution of [`time`] in seconds (`MPI_Wtick`).
pub fn time_resolution() -> f64 {
    1e-9
}

pub(crate) fn world_rank() -> Option<Rank> {
    let rank = WORLD_RANK.load(Ordering::SeqCst);
    (rank >= 0).then_some(rank)
}

/// Runs `f` on the PML, as this thread reaches it (see `place`).
#[inline]
pub(crate) fn with_engine<R>(
    f: impl FnOnce(&mut AnyPml) -> Result<R, PmlError>,
) -> Result<R, Cause> {
    // One call of `f` whichever way the thread came in, on the engine at its one address: a
    // second call, on the shared PML, made the PML call in `f` one the compiler no longer
    // inlines (an 8-byte send cost 38 instructions more).
    let mut entry = Entry::enter()?;
    f(entry.engine()?).map_err(Cause::from)
}

/// Runs `here` on the PML where this thread owns it (`Single`, `Funneled`), else
/// `elsewhere`: the blocking calls' way in, whose wait on the shared PML takes its lock one
/// round at a time. Every caller's closures, both, move their arguments (`move`; a borrowed
/// closure, `wait_until_or_lent`'s `done`, goes by reference): closures that borrowed them
/// kept them in memory for the out-of-line `elsewhere`, stored on every call (7 instructions
/// a blocking receive at `Single` with the feature `threads`, shm-callgrind.sh).
#[inline(always)]
fn on_engine<F, R>(here: F, elsewhere: impl FnOnce() -> Result<R, Cause>) -> Result<R, Cause>
where
    F: FnOnce(&mut AnyPml) -> Result<R, PmlError>,
{
    // `elsewhere` makes no call that `here` makes, so `here`'s stays inlined (see
    // `with_engine`); it is taken only where this thread does not own the PML. The right is
    // the owner's alone (`OwnersRight`, not `Entry`), so its end stores the mark and tests
    // nothing.
    let Some(mut owned) = place::OwnersRight::take() else {
        return if cfg!(feature = "threads") {
            elsewhere()
        } else {
            Err(place::refused())
        };
    };
    here(owned.engine()?).map_err(Cause::from)
}

/// The counts of the shared engine's waits (`threads::Threads::waits`).
pub(crate) fn thread_waits() -> crate::threads::Waits {
    shared::waits()
}

/// Waits for `handle` to finish (the PML's `wait`).
#[inline]
pub(crate) fn wait(handle: Handle) -> Result<Done, Cause> {
    on_engine(move |e| e.wait(handle), move || shared::wait(handle))
}

/// Sleeps in the PML until a transport may hold something for this rank or `timeout`
/// passes, where this thread owns the PML (`Single`, `Funneled`); `false` where it does not,
/// without sleeping: a sleep on the shared PML would hold its lock, and the other threads out,
/// for all of it.
pub(crate) fn sleep_in_pml(timeout: Duration) -> Result<bool, Cause> {
    on_engine(move |e| e.sleep(timeout).map(|()| true), || Ok(false))
}

/// Whether this thread holds the lock of the engine that threads share (`Serialized`,
/// `Multiple`): inside a call that reached it, where progress hooks wait until it lets go
/// (`hooks::defer`).
pub(crate) fn holds_shared_engine() -> bool {
    shared::holding()
}

/// `wait` for code that runs as a progress hook too (see `with_engine_or_lent`). As a hook at
/// `Single` and `Funneled` it waits on the lent engine; at Serialized and Multiple hooks run
/// without the shared engine's lock (`hooks::defer`), nothing is lent, and it is `wait`,
/// which lets go between rounds.
pub(crate) fn wait_or_lent(handle: Handle) -> Result<Done, Cause> {
    with_lent_or(|e| e.wait(handle), |_| wait(handle))
}

/// Progresses until `done` holds (the waiting loop's `wait_on`, `awaited` saying what
/// `done` waits for); as a progress hook too, on the lent engine where there is one, as in
/// `wait_or_lent`.
pub(crate) fn wait_until_or_lent(
    awaited: Awaited<'_>,
    done: impl Fn(&mut AnyPml) -> Result<bool, PmlError>,
) -> Result<(), Cause> {
    // Moved, as `on_engine` wants: `awaited` is `Copy`, and `done` goes by reference.
    let done = &done;
    with_lent_or(
        move |e| e.wait_on(awaited, done),
        move |_| {
            on_engine(
                move |e| e.wait_on(awaited, done),
                move || {
                    shared::block_until(SharedWait::new(awaited), move |e| {
                        Ok(done(e)?.then_some(()))
                    })
                },
            )
        },
    )
}

/// The PML's blocking receive.
///
/// # Safety
/// As for [`Pml::recv`].
#[inline]
pub(crate) unsafe fn recv(
    context: ContextId,
    source: SourceSel,
    tag: TagSel,
    buf: *mut u8,
    len: usize,
) -> Result<Status, Cause> {
    on_engine(
        // SAFETY: the caller's guarantees are passed on unchanged.
        move |e| unsafe { e.recv(context, source, tag, buf, len) },
        // The shared receive hands its status back in `received`, not in its `Result`, and
        // this closure is inlined (the two measured together): the out-of-line closure's
        // `Result<Status, Cause>` met `here`'s at the join in memory, and a receive at
        // `Single` paid 9 instructions more for it (shm-callgrind.sh); now it pays none.
        #[inline(always)]
        move || {
            let mut received = Status {
                source: 0,
                tag: 0,
                len: 0,
            };
            // SAFETY: as above.
            unsafe { shared::recv(context, source, tag, buf, len, &mut received) }
                .map(|()| received)
        },
    )
}

/// The PML's blocking probe.
pub(crate) fn probe(context: ContextId, source: SourceSel, tag: TagSel) -> Result<Status, Cause> {
    on_engine(
        move |e| e.probe(context, source, tag),
        move || {
            shared::block_until(SharedWait::new(Awaited::State), move |e| {
                e.probe_queued(context, source, tag)
            })
        },
    )
}

/// The PML's blocking matched probe.
pub(crate) fn mprobe(
    context: ContextId,
    source: SourceSel,
    tag: TagSel,
) -> Result<(MessageHandle, Status), Cause> {
    on_engine(
        move |e| e.mprobe(context, source, tag),
        move || {
            shared::block_until(SharedWait::new(Awaited::State), move |e| {
                e.matched_probe_queued(context, source, tag)
            })
        },
    )
}

/// `with_engine` for code that runs as a progress hook too (an immediate collective's
/// step): inside the PML call that runs the hooks, which holds the PML, on the PML it lent
/// them (see `lend`; at `Serialized` and `Multiple` the hooks run after the call let go of
/// the shared engine's lock, nothing is lent, and this is `with_engine`). The message path's `with_engine` stays as it was: a second way in
/// there made it larger than the compiler inlines (16 to 50 instructions more a message).
pub(crate) fn with_engine_or_lent<R>(
    f: impl FnOnce(&mut AnyPml) -> Result<R, PmlError>,
) -> Result<R, Cause> {
    with_lent_or(f, with_engine)
}

/// Runs `user_code` (a user-defined operation) with this thread marked inside a call, so
/// that a call it makes into mpirt fails as `NestedCall` wherever it runs, as MPI forbids it.
pub(crate) fn as_user_code<R>(user_code: impl FnOnce() -> R) -> R {
    let _marked = place::InUserCode::mark();
    user_code()
}

/// Runs `here` on the PML lent to this thread's progress hooks while they run (see `lend`),
/// else `elsewhere` with it.
fn with_lent_or<F, R>(here: F, elsewhere: impl FnOnce(F) -> Result<R, Cause>) -> Result<R, Cause>
where
    F: FnOnce(&mut AnyPml) -> Result<R, PmlError>,
{
    let lent = LENT.with(Cell::get);
    if lent.is_null() {
        return elsewhere(here);
    }
    // SAFETY: `lend` set the pointer from the `&mut` it holds for the duration of `run`,
    // which is this call's caller, and uses that reference for nothing else meanwhile; no
    // other reference made from the pointer is alive, since each lives for one `here` (a
    // PML call), which does not come back here.
    here(unsafe { &mut *lent }).map_err(Cause::from)
}

/// Runs `run` (the progress hooks) with `pml`, which the caller holds inside
/// `with_engine`, lent to the `with_engine` calls `run` makes.
pub(crate) fn lend(pml: &mut AnyPml, run: impl FnOnce()) {
    /// Takes the loan back when `run` returns or unwinds.
    struct Loan(*mut AnyPml);
    impl Drop for Loan {
        fn drop(&mut self) {
            LENT.with(|lent| lent.set(self.0));
        }
    }
    let _loan = Loan(LENT.with(|lent| lent.replace(pml)));
    run();
}

/// The job's id, which starts the names of the job's files under /dev/shm (rsrun removes
/// them by it if the job dies).
pub(crate) fn job_id() -> Result<String, Cause> {
    match bootstrap().as_ref() {
        Some(bootstrap) => Ok(bootstrap.job_id().to_string()),
        None => Err(not_running()),
    }
}

/// Ends the whole job through the launcher (or exits, when there is no runtime to go through).
pub(crate) fn abort_job(code: i32, message: &str) -> ! {
    let code = if code == 0 { 1 } else { code };
    // `try_lock`: a thread that aborts while another holds the link (or while this one
    // does, in a call that failed) exits without it rather than wait.
    if let Ok(mut bootstrap) = BOOTSTRAP.try_lock() {
        if let Some(bootstrap) = bootstrap.as_mut() {
            bootstrap.abort(code, message);
        }
    }
    std::process::exit(code)
}
