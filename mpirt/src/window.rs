//! One-sided communication (MPI's RMA windows): memory a rank exposes, which the other ranks
//! of the window's communicator read and write with `put`, `get`, accumulates and atomics,
//! inside epochs that say when the operations are complete.
//!
//! ```no_run
//! use mpirt::traits::*;
//! use mpirt::window::{LockKind, Window};
//!
//! let universe = mpirt::initialize().unwrap();
//! let world = universe.world();
//! let window = Window::<u64>::allocate(&world, 4);
//! // Origin buffers outlive the epoch that borrows them.
//! let (mine, mut got) = ([world.rank() as u64; 4], [0u64; 4]);
//! window.fence_epoch(|epoch| {
//!     let next = (world.rank() + 1) % world.size();
//!     epoch.put(&mine, next, 0);
//! });
//! window.lock(0, LockKind::Exclusive, |epoch| {
//!     epoch.get(&mut got, 0, 0);
//! });
//! ```
//!
//! A buffer made inside the epoch cannot be lent to it (it would be gone before the epoch
//! ends):
//!
//! ```compile_fail,E0597
//! use mpirt::window::Window;
//!
//! let universe = mpirt::initialize().unwrap();
//! let window = Window::<u64>::allocate(&universe.world(), 4);
//! window.fence_epoch(|epoch| {
//!     let mut got = [0u64; 4];
//!     epoch.get(&mut got, 0, 0);
//! });
//! ```
//!
//! Nor can memory that lives shorter than the window be attached to it (other ranks would
//! reach it after it is gone):
//!
//! ```compile_fail,E0597
//! use mpirt::window::Window;
//!
//! let universe = mpirt::initialize().unwrap();
//! let window: Window<'static, u64> = Window::create_dynamic(&universe.world());
//! {
//!     let mut short = vec![0u64; 4];
//!     window.attach(&mut short);
//! }
//! ```
//!
//! # The API carries the epoch rules
//! Operations exist only on an epoch, and an epoch exists only inside the closure of the call
//! that opens it and ends it when the closure returns: [`Window::fence_epoch`] (`MPI_Win_fence`
//! before and after), [`Window::start`] (`MPI_Win_start` ... `MPI_Win_complete`),
//! [`Window::lock`] and [`Window::lock_all`] (... `MPI_Win_unlock[_all]`). The exposure side
//! of PSCW is [`Window::post`] (`MPI_Win_post`, the closure, `MPI_Win_wait`). So an operation
//! outside any epoch cannot be written. Origin buffers are borrowed by the epoch (as
//! `std::thread::scope` borrows): a get's buffer cannot be read, nor a put's reused, until
//! the epoch ended; request-based operations (`rget`, ...) hand their buffer back from
//! `wait`. A window's local memory is reached through [`Window::with_local`], which also
//! serves the window first. What the types cannot carry is checked at run time, each misuse a
//! named [`WindowFault`]: a target outside the window's communicator or outside the epoch's
//! ranks, an access past the end of the target's window (target rank, displacement, length
//! and window size named; nothing is written on either side), memory a dynamic window has not
//! attached, a synchronisation that conflicts with an open epoch (a fence inside a lock
//! epoch, a second lock of one target), an accumulate of a type the operations do not know.
//!
//! Displacements count elements of the window's type `T` (`disp_unit = size_of::<T>()`); in
//! a dynamic window they are byte addresses, as [`Window::attach`] returns them (MPI's
//! `disp_unit` 1 from `MPI_BOTTOM`), which must lie whole elements into an attached block.
//! Element types are contiguous [`Equivalence`] types, one type on every rank of a window
//! (checked at its creation, as is that every rank's length fits in memory); accumulates
//! take the primitive numbers and `bool`.
//! User datatypes lay out either side of the typed operations
//! ([`Epoch::put_typed`], [`Epoch::get_typed`], [`Epoch::accumulate_typed`],
//! [`Epoch::get_accumulate_typed`], and their request forms [`Epoch::rput_typed`], ...):
//! MPI's origin and target datatypes, the target side a
//! [`TargetDatatype`] of the window's elements (see `window/typed.rs`). The ranks agree at creation on the path
//! (`MPIRT_WINDOW_PATH`): the shared-memory path only where every rank allows it.
//!
//! # How operations move
//! Every window has a context of its own (a duplicate of its communicator's). Where every
//! rank maps the window's memory (`allocate_shared`, and `allocate` when the ranks share a
//! host), operations are loads, stores and CPU atomics in that mapping, and locks are words
//! in it (see `window/direct.rs`): nothing waits for the target. Elsewhere (`create`,
//! `create_dynamic`, ranks on several hosts, or `MPIRT_WINDOW_PATH=messages`) the portable
//! path, which works on every transport and both PMLs, sends each operation as an active
//! message that the target applies (see `window/messaging.rs`): a window makes progress
//! whenever its target is inside any mpirt call, through the window's own waits and through
//! the PML's progress hooks; a target computing outside mpirt delays passive-target epochs
//! on it until its next call. Its locks are a lock table at the target (exclusive excludes,
//! shared shares, waiting requests granted in arrival order). Where RDMA verbs carries the
//! ranks, or on the UCX PML with `MPIRT_WINDOW_PATH=rdma` (UCX's RMA; not by default, see
//! `pml::RmaReach::by_default`), `allocate` and `create` windows take the RDMA path for
//! what the device does (see `window/rdma.rs`): puts by RDMA WRITE, gets by RDMA READ, and, on windows of 8-byte
//! numbers that every rank reaches with device atomics, every accumulate and atomic by
//! them; the rest (locks, epochs' ends, other windows' accumulates) stays active messages.
//! A dynamic window's puts and gets take it too, into blocks registered as they are
//! attached, which an origin learns from the target when it first reaches into one, and,
//! of 8-byte numbers, its accumulates and atomics, as a fixed window's.
//! `MPIRT_WINDOW_PATH=rdma` leaves out the shared-memory mapping.

mod atomic;
mod direct;
mod fault;
mod messaging;
mod operation;
mod rdma;
mod target;
mod typed;
mod wire;

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::mem::size_of;
use std::rc::Rc;

use direct::{Direct, Notice, LINE};
pub use fault::WindowFault;
use messaging::{Core, Destination};
pub use operation::AccumulateOperation;
use pml::shared_mapping::SharedMapping;
use rdma::{rdma_agreed, Rdma, RmaOffer};
use target::{whole_elements, Memory, Target};
pub use typed::TargetDatatype;
use wire::{Ask, Region, Request};

use crate::collective::{CommunicatorCollectives, Root, SystemOperation};
use crate::communicator::{Communicator, SimpleCommunicator};
use crate::datatype::{datatype_of, Datatype, Equivalence};
use crate::error::{or_fatal, Cause, Error};
use crate::Rank;

/// `MPI_LOCK_SHARED` or `MPI_LOCK_EXCLUSIVE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Shared,
    Exclusive,
}

/// Where a window's memory comes from, kept so that it lives as long as the window.
enum Storage {
    /// `allocate`: a block the window owns, freed with it.
    Owned {
        base: *mut u8,
        layout: std::alloc::Layout,
    },
    /// `create`: the caller's, borrowed for the window's lifetime.
    Borrowed,
    /// `allocate_shared`, or `allocate` where every rank mapped the memory: the mapping
    /// (`Window::shared`) holds it.
    Mapped,
    /// `create_dynamic`: what `attach` adds.
    Dynamic,
}

/// A window (`MPI_Win`) over elements of `T`, whose local memory is borrowed for `'a` (from
/// [`Window::create`] or [`Window::attach`]) or its own. Creating and dropping one are
/// collective over its communicator; dropping waits until every rank is done with it.
pub struct Window<'a, T: Equivalence> {
    comm: SimpleCommunicator,
    core: Rc<RefCell<Core>>,
    storage: Storage,
    /// The memory every rank maps, where it does (see `direct.rs`).
    shared: Option<Direct>,
    /// Whether operations go by loads, stores and atomics in `shared` (else by RDMA or
    /// messages).
    direct: bool,
    /// The RDMA path, where the one-sided transport reaches ranks (see `window/rdma.rs`).
    rdma: Option<Rdma>,
    /// Per rank, whether an operation went to it as a message since its last flush: on the
    /// RDMA path a flush of a rank that got none waits for the device alone.
    messaged: RefCell<Vec<bool>>,
    /// This rank's memory (fixed windows).
    local: Option<(*mut T, usize)>,
    /// Each rank's window length in elements (`None`: a dynamic window).
    sizes: Option<Vec<usize>>,
    /// The access epochs open on this rank, for the synchronisation checks.
    open: Cell<Open>,
    /// `T`'s element code for accumulates and compare_and_swap, once one found it, and the
    /// operations checked for it (a bit per operation), once an accumulate found them:
    /// checking costs more than an 8-byte fetch_and_op on the shared-memory path.
    accumulates: Cell<(Option<u8>, u64)>,
    locked: RefCell<Vec<u32>>,
    /// Whether this rank's memory is exposed to other ranks' PSCW access epochs (`post`).
    exposed: Cell<bool>,
    /// Whether `with_local` lent this rank's memory out: no epoch may open meanwhile.
    lent: Cell<bool>,
    /// Whether `try_free` did the free's collective part: the drop then only gives the
    /// memory back.
    freed: bool,
    /// Invariant in `'a`: a covariant window of `'static` would shrink to a shorter `'a` for
    /// `attach`, which would then lend it a buffer freed while other ranks still reach it.
    _memory: PhantomData<Invariant<'a, T>>,
}

/// A marker that makes a window invariant in its memory's lifetime (see `Window::_memory`).
type Invariant<'a, T> = fn(&'a mut [T]) -> &'a mut [T];

/// Which kind of access epoch is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    None,
    Fence,
    Start,
    Locks,
    LockAll,
}

impl<'a, T: Equivalence> Window<'a, T> {
    /// A window over `len` elements that it allocates and owns, each `T::default()`
    /// (`MPI_Win_allocate`). Collective.
    pub fn allocate<C: Communicator>(comm: &C, len: usize) -> Window<'static, T>
    where
        T: Default + Copy,
    {
        or_fatal(Window::try_allocate(comm, len))
    }

    pub fn try_allocate<C: Communicator>(comm: &C, len: usize) -> Result<Window<'static, T>, Error>
    where
        T: Default + Copy,
    {
        let what = "allocate a window";
        let agreed = agree::<T, C>(comm, len, what)?;
        if agreed.path == Path::SharedMemory {
            if let Some(shared) = map_parts::<T, C>(comm, &agreed.lens, what)? {
                return Window::mapped(comm, shared, agreed, what);
            }
        }
        let layout = std::alloc::Layout::array::<T>(len.max(1))
            .expect("every rank's length was checked to fit (agree)");
        // SAFETY: the layout is non-zero (at least one element).
        let base = unsafe { std::alloc::alloc(layout) }.cast::<T>();
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        for i in 0..len {
            // SAFETY: `base` holds `len` elements (the layout above).
            unsafe { base.add(i).write(T::default()) };
        }
        let storage = Storage::Owned {
            base: base.cast(),
            layout,
        };
        // SAFETY: the block is the window's, freed only when the window drops.
        unsafe { Window::fixed(comm, base, agreed, storage, None, what) }
    }

    /// A window over `memory`, which it borrows for its lifetime (`MPI_Win_create`).
    /// Collective.
    pub fn create<C: Communicator>(comm: &C, memory: &'a mut [T]) -> Window<'a, T> {
        or_fatal(Window::try_create(comm, memory))
    }

    pub fn try_create<C: Communicator>(
        comm: &C,
        memory: &'a mut [T],
    ) -> Result<Window<'a, T>, Error> {
        let what = "create a window";
        let agreed = agree::<T, C>(comm, memory.len(), what)?;
        // SAFETY: the memory is borrowed mutably for `'a`, which the window holds.
        unsafe {
            Window::fixed(
                comm,
                memory.as_mut_ptr(),
                agreed,
                Storage::Borrowed,
                None,
                what,
            )
        }
    }

    /// A window of `len` elements on each rank, each `T::default()`, in memory every rank of
    /// the host maps (`MPI_Win_allocate_shared`): [`Window::shared_query`] gives the address
    /// of any rank's part. Every rank must be on one host. Collective.
    pub fn allocate_shared<C: Communicator>(comm: &C, len: usize) -> Window<'static, T>
    where
        T: Default + Copy,
    {
        or_fatal(Window::try_allocate_shared(comm, len))
    }

    pub fn try_allocate_shared<C: Communicator>(
        comm: &C,
        len: usize,
    ) -> Result<Window<'static, T>, Error>
    where
        T: Default + Copy,
    {
        let what = "allocate a shared window";
        let agreed = agree::<T, C>(comm, len, what)?;
        let shared = map_parts::<T, C>(comm, &agreed.lens, what)?.ok_or_else(|| {
            unsupported(
                what,
                "a rank could not map the window's shared memory: allocate_shared needs \
                 every rank on one host"
                    .into(),
            )
        })?;
        Window::mapped(comm, shared, agreed, what)
    }

    /// A window over this rank's part of `shared`, each element `T::default()`.
    fn mapped<C: Communicator>(
        comm: &C,
        shared: Direct,
        agreed: Agreed,
        what: &str,
    ) -> Result<Window<'static, T>, Error>
    where
        T: Default + Copy,
    {
        let base = shared.part(comm.rank() as u32).0.cast::<T>();
        for i in 0..agreed.lens[comm.rank() as usize] {
            // SAFETY: this rank's part holds `len` elements, at a cache-line boundary; no
            // other rank touches it before the window exists.
            unsafe { base.add(i).write(T::default()) };
        }
        // SAFETY: the mapping is the window's, unmapped only when the window drops.
        unsafe { Window::fixed(comm, base, agreed, Storage::Mapped, Some(shared), what) }
    }

    /// A window with no memory until [`attach`](Self::attach) adds some
    /// (`MPI_Win_create_dynamic`); displacements are the addresses `attach` returns.
    /// Collective.
    pub fn create_dynamic<C: Communicator>(comm: &C) -> Window<'a, T> {
        or_fatal(Window::try_create_dynamic(comm))
    }

    pub fn try_create_dynamic<C: Communicator>(comm: &C) -> Result<Window<'a, T>, Error> {
        let what = "create a dynamic window";
        let agreed = agree::<T, C>(comm, 0, what)?;
        // SAFETY: a dynamic window starts with no memory.
        let mut window = unsafe {
            Window::build(
                comm,
                Memory::Dynamic(Vec::new()),
                Storage::Dynamic,
                None,
                None,
            )
        }
        .map_err(|c| Error::new(what, c))?;
        // No rank maps another's attached memory: the RDMA path where the ranks agreed on it,
        // with device atomics where a fixed window of `T` would have them and wherever
        // attached memory lies its elements are 8-byte aligned.
        if agreed.path != Path::Messages && agreed.rdma {
            let element = operation::element_code(datatype_of::<T>())
                .filter(|_| std::mem::align_of::<T>().is_multiple_of(8));
            window.rdma = Rdma::dynamic(&window.comm, window.comm.data(), element, what)?;
        }
        Ok(window)
    }

    /// Over `base`, this rank's part of `sizes` (every rank's length, agreed).
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of this rank's length of elements, and not
    /// accessed but through the window, as long as it lives (`storage` keeps it, or `'a`
    /// borrows it).
    unsafe fn fixed<C: Communicator>(
        comm: &C,
        base: *mut T,
        agreed: Agreed,
        storage: Storage,
        shared: Option<Direct>,
        what: &str,
    ) -> Result<Window<'a, T>, Error> {
        let Agreed {
            lens: sizes,
            path,
            rdma,
        } = agreed;
        let len = sizes[comm.rank() as usize];
        let memory = Memory::Fixed {
            base: base.cast(),
            bytes: len * size_of::<T>(),
        };
        // SAFETY: forwarded from this function's contract.
        let mut window =
            unsafe { Window::build(comm, memory, storage, Some((base, len)), Some(sizes)) }
                .map_err(|c| Error::new(what, c))?;
        window.direct = path == Path::SharedMemory && shared.is_some();
        window.shared = shared;
        if window.direct {
            // No other rank's operation waits for this rank's progress (nothing travels as
            // a message: PSCW's notices are counts in the mapping): the progress hook, which
            // every wait of the rank would step, is not needed. So no request on this path
            // may ask another rank for an answer (a free's flush is skipped): only that
            // rank's own window calls would give it.
            messaging::forget(&window.core);
        } else if path != Path::Messages && rdma {
            let element = operation::element_code(datatype_of::<T>());
            let bytes = len * size_of::<T>();
            window.rdma = Rdma::open(
                &window.comm,
                window.comm.data(),
                base.cast(),
                bytes,
                element,
                what,
            )?;
        }
        Ok(window)
    }

    /// # Safety
    /// As for `Target::new`, for as long as the window lives.
    unsafe fn build<C: Communicator>(
        comm: &C,
        memory: Memory,
        storage: Storage,
        local: Option<(*mut T, usize)>,
        sizes: Option<Vec<usize>>,
    ) -> Result<Window<'a, T>, Cause> {
        let comm = comm.try_duplicate().map_err(|e| e.cause().clone())?;
        let size = comm.size() as usize;
        // SAFETY: forwarded from this function's contract.
        let target = unsafe { Target::new(memory, size_of::<T>(), comm.size() as u32) };
        let core = Rc::new(RefCell::new(Core::new(comm.data().clone(), target)));
        messaging::register(&core);
        Ok(Window {
            comm,
            core,
            storage,
            shared: None,
            direct: false,
            rdma: None,
            messaged: RefCell::new(vec![false; size]),
            local,
            sizes,
            open: Cell::new(Open::None),
            accumulates: Cell::new((None, 0)),
            locked: RefCell::new(Vec::new()),
            exposed: Cell::new(false),
            lent: Cell::new(false),
            freed: false,
            _memory: PhantomData,
        })
    }

    /// Frees the window (`MPI_Win_free`, collective), as dropping it does, and says what went
    /// wrong instead of ending the job: the first refusal that a target sent for one of this
    /// rank's operations and that no epoch reported (an operation of an epoch that unwound,
    /// whose end never ran), named with the target rank, the operation and the cause, once
    /// every rank is done with the window. A failure of messaging itself (the PML stopped) is
    /// returned at once, before the free's barrier, as any failed collective's is: the other
    /// ranks' frees are then left without this one.
    pub fn try_free(mut self) -> Result<(), Error> {
        self.free()
    }

    /// The free's collective part, once (see `try_free`): every request this rank sent is
    /// applied and its frames have left, then every rank is done with the window.
    fn free(&mut self) -> Result<(), Error> {
        const OPERATION: &str = "free a window";
        if std::mem::replace(&mut self.freed, true) {
            return Ok(());
        }
        let faults = messaging::serve(&self.core)
            .and_then(|mut core| core.finish(self.direct().is_none().then(|| control(Ask::Flush))))
            .map_err(|c| Error::new(OPERATION, c))?;
        // Every rank's epochs ended before it came here, so every request to this rank
        // was applied; the barrier keeps this rank's memory until all have. A fault waits for
        // it: the other ranks' frees pair with this one.
        self.comm.try_barrier()?;
        faults.map_err(|fault| Error::new(OPERATION, Cause::Window(fault)))
    }

    /// The window's communicator (a duplicate of the one it was made over).
    pub fn communicator(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// The address and length (in elements) of `rank`'s part of a shared window
    /// (`MPI_Win_shared_query`), which this process may load from and store to directly;
    /// MPI's rules for shared memory apply (synchronise with the window's epochs, or with
    /// atomics of your own).
    pub fn shared_query(&self, rank: Rank) -> Result<(*mut T, usize), Error> {
        let what = format!("shared_query of rank {rank}");
        let (Some(shared), Some(sizes)) = (&self.shared, &self.sizes) else {
            return Err(unsupported(
                &what,
                "only a window whose memory every rank maps (allocate_shared) is shared".into(),
            ));
        };
        let r = self
            .comm
            .data()
            .check_rank(rank)
            .map_err(|c| Error::new(&what, c))?;
        Ok((shared.part(r).0.cast(), sizes[r as usize]))
    }

    /// Runs `f` on this rank's window memory, after applying the operations that arrived
    /// for it; none is applied while `f` runs. MPI's rules say when the memory holds other
    /// ranks' operations (after the epoch that issued them ended). Where every rank maps the
    /// memory (the shared-memory path), or reach it by RDMA, other ranks' epochs store into
    /// it directly, so there it is refused inside this rank's epochs and `post`, and holds
    /// this rank's own exclusive lock while `f` runs (waiting for other ranks' lock epochs on
    /// it to end):
    /// fence and PSCW epochs of other ranks reach this rank only while it is inside its own
    /// fence or `post`. `f` may not open an epoch nor use the window (refused, named);
    /// while it runs this rank serves no operation on the window, so other ranks' epochs on
    /// it wait for `f` to return.
    pub fn with_local<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> R {
        or_fatal(self.try_with_local(f))
    }

    pub fn try_with_local<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> Result<R, Error> {
        let what = "with_local";
        let Some((base, len)) = self.local else {
            return Err(unsupported(
                what,
                "a dynamic window has no memory of its own: use the attached buffers".into(),
            ));
        };
        let _own = match self.direct() {
            Some(direct) => {
                if self.open.get() != Open::None || self.exposed.get() || self.lent.get() {
                    return Err(sync_fault(
                        what,
                        "on the shared-memory path other ranks store into this memory during \
                         this rank's epochs and post: call with_local outside them"
                            .into(),
                    ));
                }
                let me = self.comm.rank() as u32;
                self.wait_directly(|| direct.try_lock(me, true))
                    .map_err(|c| Error::new(what, c))?;
                Some(OwnLock::Direct(direct, me))
            }
            None if self.rdma.is_some() => {
                if self.open.get() != Open::None || self.exposed.get() || self.lent.get() {
                    return Err(sync_fault(
                        what,
                        "on the RDMA path other ranks write this memory during this rank's \
                         epochs and post: call with_local outside them"
                            .into(),
                    ));
                }
                let me = self.comm.rank() as u32;
                self.acquire(&[me], LockKind::Exclusive)
                    .map_err(|c| Error::new(what, c))?;
                Some(OwnLock::Messages(&self.core, me))
            }
            None => None,
        };
        let mut core = messaging::serve(&self.core).map_err(|c| Error::new(what, c))?;
        core.drain().map_err(|c| Error::new(what, c))?;
        let _lent = Raised::new(&self.lent);
        // SAFETY: the memory is valid for the window's lifetime (`fixed`'s contract) and
        // reached only through the window, whose core stays borrowed while `f` runs, so no
        // request is applied to it meanwhile; on the shared-memory path this rank holds its
        // own exclusive lock, outside its fence epochs and `post`, so no other rank stores
        // into it, and `lent` keeps `f` from opening an epoch.
        let memory = unsafe { std::slice::from_raw_parts_mut(base, len) };
        Ok(f(memory))
    }

    /// Adds `memory` to a dynamic window (`MPI_Win_attach`); returns its address, the
    /// displacement of its first element for the other ranks.
    pub fn attach(&self, memory: &'a mut [T]) -> usize {
        or_fatal(self.try_attach(memory))
    }

    pub fn try_attach(&self, memory: &'a mut [T]) -> Result<usize, Error> {
        let address = memory.as_mut_ptr() as usize;
        let bytes = std::mem::size_of_val(memory);
        let mut core = messaging::serve(&self.core).map_err(|c| Error::new("attach", c))?;
        core.target
            .check_attach(address, bytes)
            .map_err(|why| unsupported("attach", why))?;
        // On the RDMA path the block is registered, and origins that reach into it learn
        // its key from this rank (see `window/rdma.rs`).
        let key = match &self.rdma {
            Some(rdma) if bytes > 0 => {
                rdma.expose_attached(self.comm.data(), memory.as_mut_ptr().cast(), bytes)
            }
            _ => Vec::new(),
        };
        // SAFETY: the memory is borrowed mutably for the window's lifetime `'a`.
        unsafe { core.target.attach(address, bytes, key) }
            .map_err(|why| unsupported("attach", why))?;
        Ok(address)
    }

    /// Removes the memory attached at `address` (`MPI_Win_detach`); it stays borrowed until
    /// the window drops (and, on the RDMA path, registered: an origin that learned of it
    /// earlier reaches only it, see `window/rdma.rs`).
    pub fn detach(&self, address: usize) -> Result<(), Error> {
        messaging::serve(&self.core)
            .map_err(|c| Error::new("detach", c))?
            .target
            .detach(address)
            .map_err(|why| unsupported("detach", why))
    }

    /// A fence epoch (`MPI_Win_fence` before and after `f`): every rank may access every
    /// rank's window in `f`; when it returns, every operation of the epoch is complete at
    /// its origin and its target. Collective.
    pub fn fence_epoch<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        or_fatal(self.try_fence_epoch(f))
    }

    pub fn try_fence_epoch<'env, F, R>(&'env self, f: F) -> Result<R, Error>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        let what = "fence";
        self.open(Open::Fence).map_err(|c| Error::new(what, c))?;
        let _closed = Closed(&self.open);
        // Local stores before the epoch are complete before any rank's operation lands.
        self.comm.try_barrier()?;
        let out = self
            .run_epoch(Reach::All, "a fence epoch", f, |e| e.end_fence())
            .map_err(|c| Error::new(what, c));
        // Every rank takes the closing barrier, whatever its epoch's end said: one that
        // skipped it would pair its next barrier (another fence's, the window's free) with
        // this one, and hang or run ahead of the others.
        let closed = self.comm.try_barrier();
        let out = out?;
        closed?;
        Ok(out)
    }

    /// The exposure side of PSCW: `MPI_Win_post` to `origins`, `f`, then `MPI_Win_wait`
    /// until each origin completed its access epoch (`start`) on this rank.
    pub fn post<R>(&self, origins: &[Rank], f: impl FnOnce() -> R) -> R {
        or_fatal(self.try_post(origins, f))
    }

    pub fn try_post<R>(&self, origins: &[Rank], f: impl FnOnce() -> R) -> Result<R, Error> {
        let what = "post";
        let origins = self.group(origins, what)?;
        if self.lent.get() || self.exposed.get() {
            return Err(sync_fault(what, in_local_or_post(self.lent.get())));
        }
        let _exposed = Raised::new(&self.exposed);
        if let Some(direct) = self.direct() {
            for &o in &origins {
                direct.notify(o, Notice::Posted);
            }
            let out = f();
            for &o in &origins {
                self.wait_directly(|| direct.try_take(Notice::Completed, o))
                    .map_err(|c| Error::new("wait", c))?;
            }
            return Ok(out);
        }
        {
            let mut core = messaging::serve(&self.core).map_err(|c| Error::new(what, c))?;
            for &o in &origins {
                core.notify_posted(o).map_err(|c| Error::new(what, c))?;
            }
        }
        let out = f();
        let mut core = messaging::serve(&self.core).map_err(|c| Error::new("wait", c))?;
        core.wait_until(|core| {
            origins
                .iter()
                .all(|&o| core.target.completed[o as usize] > 0)
        })
        .map_err(|c| Error::new("wait", c))?;
        for &o in &origins {
            core.target.completed[o as usize] -= 1;
        }
        Ok(out)
    }

    /// The access side of PSCW: `MPI_Win_start` on `targets` (waiting for each one's
    /// `post`), `f` on an epoch that reaches them, then `MPI_Win_complete`.
    pub fn start<'env, F, R>(&'env self, targets: &[Rank], f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        or_fatal(self.try_start(targets, f))
    }

    pub fn try_start<'env, F, R>(&'env self, targets: &[Rank], f: F) -> Result<R, Error>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        let what = "start";
        let targets = self.group(targets, what)?;
        self.open(Open::Start).map_err(|c| Error::new(what, c))?;
        let _closed = Closed(&self.open);
        if let Some(direct) = self.direct() {
            for &t in &targets {
                self.wait_directly(|| direct.try_take(Notice::Posted, t))
                    .map_err(|c| Error::new(what, c))?;
            }
        } else {
            let mut core = messaging::serve(&self.core).map_err(|c| Error::new(what, c))?;
            core.wait_until(|core| targets.iter().all(|&t| core.posted[t as usize] > 0))
                .map_err(|c| Error::new(what, c))?;
            for &t in &targets {
                core.posted[t as usize] -= 1;
            }
        }
        self.run_epoch(Reach::Group(targets), "the group of start", f, |e| {
            e.end_start()
        })
        .map_err(|c| Error::new("complete", c))
    }

    /// A passive-target epoch on `target` (`MPI_Win_lock` ... `MPI_Win_unlock`): `f`'s
    /// operations are complete at the target when this returns.
    pub fn lock<'env, F, R>(&'env self, target: Rank, kind: LockKind, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        or_fatal(self.try_lock(target, kind, f))
    }

    pub fn try_lock<'env, F, R>(&'env self, target: Rank, kind: LockKind, f: F) -> Result<R, Error>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        // Named only on an error: a lock epoch is a short operation's whole synchronisation.
        let what = || format!("lock of rank {target}");
        let t = self
            .comm
            .data()
            .check_rank(target)
            .map_err(|c| Error::new(what(), c))?;
        if self.locked.borrow().contains(&t) {
            return Err(sync_fault(
                &what(),
                format!("rank {target} is already locked by this rank's open lock epoch"),
            ));
        }
        self.open(Open::Locks).map_err(|c| Error::new(what(), c))?;
        self.locked.borrow_mut().push(t);
        let _unlocked = Unlocked(self, t);
        self.acquire(&[t], kind)
            .map_err(|c| Error::new(what(), c))?;
        let held = Held::new(self, Reach::One(t), kind);
        self.run_epoch(Reach::One(t), "a lock epoch", f, |e| {
            held.unlocking();
            e.end_locks(&[t], kind)
        })
        .map_err(|c| Error::new(format!("unlock of rank {target}"), c))
    }

    /// A shared lock of every rank (`MPI_Win_lock_all` ... `MPI_Win_unlock_all`).
    pub fn lock_all<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        or_fatal(self.try_lock_all(f))
    }

    pub fn try_lock_all<'env, F, R>(&'env self, f: F) -> Result<R, Error>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        let what = "lock_all";
        self.open(Open::LockAll).map_err(|c| Error::new(what, c))?;
        let _closed = Closed(&self.open);
        let all: Vec<u32> = (0..self.comm.size() as u32).collect();
        self.acquire(&all, LockKind::Shared)
            .map_err(|c| Error::new(what, c))?;
        let held = Held::new(self, Reach::All, LockKind::Shared);
        self.run_epoch(Reach::All, "lock_all", f, |e| {
            held.unlocking();
            e.end_locks(&all, LockKind::Shared)
        })
        .map_err(|c| Error::new("unlock_all", c))
    }

    /// Runs `f` on a new epoch that reaches `reach`, then `end` (the epoch's closing
    /// synchronisation), whose error it returns.
    fn run_epoch<'env, F, R>(
        &'env self,
        reach: Reach,
        name: &'static str,
        f: F,
        end: impl for<'s> FnOnce(&'s Epoch<'s, 'env, T>) -> Result<(), Cause>,
    ) -> Result<R, Cause>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        let epoch = Epoch::new(self.for_epoch(), reach, name);
        let mut abandon = Abandon {
            core: &self.core,
            rdma: self.rdma.as_ref(),
            reach: &epoch.reach,
            ended: false,
        };
        let out = f(&epoch);
        end(&epoch)?;
        abandon.ended = true;
        Ok(out)
    }

    /// The window as an epoch holds it, its memory's lifetime shortened to the epoch's
    /// borrow of it.
    fn for_epoch<'env>(&'env self) -> &'env Window<'env, T> {
        // SAFETY: the two types differ in a lifetime only (same layout), and `'a: 'env`
        // (the borrow of `self` proves it). `'a` is invariant only so that `attach` takes no
        // memory that lives shorter than `'a`; an epoch never attaches, and reads nothing
        // whose validity depends on `'a` past `'env`, during which `self` lives.
        unsafe { &*(self as *const Window<'a, T>).cast::<Window<'env, T>>() }
    }

    /// Asks `targets` for the lock and waits for every grant.
    fn acquire(&self, targets: &[u32], kind: LockKind) -> Result<(), Cause> {
        if let Some(direct) = self.direct() {
            for &t in targets {
                self.wait_directly(|| direct.try_lock(t, kind == LockKind::Exclusive))?;
            }
            return Ok(());
        }
        let ask = match kind {
            LockKind::Shared => Ask::LockShared,
            LockKind::Exclusive => Ask::LockExclusive,
        };
        let mut core = messaging::serve(&self.core)?;
        let mut ids = Vec::with_capacity(targets.len());
        for &t in targets {
            // SAFETY: a grant carries no data.
            ids.push(unsafe { core.request(t, control(ask), &[], Some(None)) }?);
        }
        core.wait_until(|core| ids.iter().all(|&id| core.is_done(id)))?;
        for id in ids {
            core.take(id).expect("done").map_err(Cause::Window)?;
        }
        Ok(())
    }

    /// `T`'s element code, once `op` is known to be defined for it.
    fn check_accumulate(&self, datatype: Datatype, op: AccumulateOperation) -> Result<u8, Cause> {
        let bit = 1u64 << (op.code() % 64);
        let (element, checked) = self.accumulates.get();
        if let Some(element) = element.filter(|_| checked & bit != 0) {
            return Ok(element);
        }
        let element = self.element_code(datatype).ok_or_else(|| {
            Cause::Window(WindowFault::Unsupported(format!(
                "accumulates take primitive numbers and bool, not {}",
                datatype.name()
            )))
        })?;
        op.check(datatype)?;
        self.accumulates.set((Some(element), checked | bit));
        Ok(element)
    }

    /// `T`'s element code (`datatype` is `T`'s), or `None` for a type accumulates do not
    /// know; kept once known, as a search of the codes costs an atomic's whole work again.
    fn element_code(&self, datatype: Datatype) -> Option<u8> {
        let (element, checked) = self.accumulates.get();
        element.or_else(|| {
            let element = operation::element_code(datatype)?;
            self.accumulates.set((Some(element), checked));
            Some(element)
        })
    }

    /// The shared-memory path, where operations take it.
    fn direct(&self) -> Option<&Direct> {
        self.shared.as_ref().filter(|_| self.direct)
    }

    /// The RDMA path to `target`, where puts and gets to it take it.
    fn rdma_to(&self, target: u32) -> Option<&Rdma> {
        self.rdma.as_ref().filter(|r| r.reaches(target))
    }

    /// The RDMA path for a put or get of `len` bytes at `offset` in `target`'s window: a
    /// fixed window's as `rdma_to` says, a dynamic window's where `attached_rdma` finds it.
    fn rdma_for(&self, target: u32, offset: u64, len: usize) -> Result<Option<&Rdma>, Cause> {
        match &self.sizes {
            Some(_) => Ok(self.rdma_to(target)),
            None => self.attached_rdma(target, offset, len),
        }
    }

    /// The RDMA path to the `len` bytes at address `offset` in `target`'s dynamic window,
    /// where the transport reaches it and the block that holds them is exposed; first
    /// learning that block from the target where this rank does not know one that holds them
    /// (see `window/rdma.rs`). A target that has no such block refuses, named, and nothing
    /// moves; so do bytes that are not whole elements into their block.
    fn attached_rdma(&self, target: u32, offset: u64, len: usize) -> Result<Option<&Rdma>, Cause> {
        let Some(rdma) = self.rdma.as_ref().filter(|r| r.reaches_attached(target)) else {
            return Ok(None);
        };
        let (address, key) = match rdma.known(target, offset, len as u64) {
            Some(known) => known,
            None => rdma.learn(target, self.ask_region(target, offset, len)?)?,
        };
        whole_elements((offset - address) as usize, len, size_of::<T>().max(1)).map_err(|why| {
            Cause::Window(WindowFault::Unsupported(format!(
                "rank {target}'s attached memory: {why}"
            )))
        })?;
        Ok(key.map(|_| rdma))
    }

    /// Asks `target` which of its attached blocks holds the `len` bytes at address `offset`
    /// (a dynamic window's), and waits for the answer.
    fn ask_region(&self, target: u32, offset: u64, len: usize) -> Result<Region, Cause> {
        let mut core = messaging::serve(&self.core)?;
        let id = core.request_kept(target, data_request(Ask::Region, offset, len))?;
        core.wait_until(|core| core.is_done(id))?;
        let answer = core.take_kept(id).expect("done").map_err(Cause::Window)?;
        Region::decode(&answer).ok_or_else(|| {
            Cause::Window(WindowFault::Refused {
                target: target as Rank,
                why: "a malformed answer about its attached memory".into(),
            })
        })
    }

    /// The RDMA path for accumulates and atomics on the `len` bytes at `offset` in
    /// `target`'s window: only on a window whose accumulates go by the device (see
    /// `window/rdma.rs`), and in a dynamic window only inside a block exposed to it (learned
    /// as for puts: `attached_rdma`).
    fn device_atomics(&self, target: u32, offset: u64, len: usize) -> Result<Option<&Rdma>, Cause> {
        match &self.sizes {
            Some(_) => Ok(self.rdma_to(target).filter(|r| r.atomics)),
            None if self.rdma.as_ref().is_some_and(|r| r.atomics) => {
                self.attached_rdma(target, offset, len)
            }
            None => Ok(None),
        }
    }

    /// Waits on the shared-memory path until `ready` holds (it took a lock word or a PSCW
    /// notice), serving this window and the PML meanwhile: the rank it waits for may itself
    /// wait for this rank's messages on another communicator.
    fn wait_directly(&self, mut ready: impl FnMut() -> bool) -> Result<(), Cause> {
        let mut tries = 0u32;
        while !ready() {
            tries += 1;
            if tries.is_multiple_of(64) {
                messaging::serve(&self.core)?.drain()?;
                // Another rank holds the lock for its whole epoch, or computes before its
                // `post` or `complete`: let it run where ranks share cores, then wait at
                // most a moment between tries.
                if tries < 4096 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(20));
                }
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// Records an access epoch of `kind` opening, or says why it may not.
    fn open(&self, kind: Open) -> Result<(), Cause> {
        let fault = |why| Cause::Window(WindowFault::Synchronisation(why));
        if self.lent.get() {
            return Err(fault(in_local_or_post(true)));
        }
        match (self.open.get(), kind) {
            (Open::None, _) => {}
            (Open::Locks, Open::Locks) => return Ok(()),
            (open, _) => {
                return Err(fault(format!(
                    "{} epoch is open on this window; end it first",
                    match open {
                        Open::Fence => "a fence",
                        Open::Start => "a start (PSCW access)",
                        Open::Locks => "a lock",
                        _ => "a lock_all",
                    }
                )))
            }
        }
        self.open.set(kind);
        Ok(())
    }

    /// The ranks of `group`, checked: in the communicator and each once.
    fn group(&self, group: &[Rank], what: &str) -> Result<Vec<u32>, Error> {
        let mut ranks = Vec::with_capacity(group.len());
        for &r in group {
            let rank = self
                .comm
                .data()
                .check_rank(r)
                .map_err(|c| Error::new(what, c))?;
            if ranks.contains(&rank) {
                return Err(Error::new(what, Cause::DuplicateRank(r)));
            }
            ranks.push(rank);
        }
        Ok(ranks)
    }
}

impl<T: Equivalence> Drop for Window<'_, T> {
    /// Frees the window (`MPI_Win_free`, collective): waits for this rank's replies to
    /// leave and for every rank to be done with the window, then gives its memory back. A
    /// fault that `try_free` would return ends the job, named.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            or_fatal(self.free());
        }
        if let Some(rdma) = &mut self.rdma {
            rdma.close();
        }
        messaging::forget(&self.core);
        if let Storage::Owned { base, layout } = self.storage {
            // SAFETY: allocated in `try_allocate` with this layout, and no longer reached:
            // the window is unregistered from the progress hook.
            unsafe { std::alloc::dealloc(base, layout) };
        }
    }
}

/// A flag raised while its guard lives (returns or unwinds).
struct Raised<'w>(&'w Cell<bool>);

impl<'w> Raised<'w> {
    fn new(flag: &'w Cell<bool>) -> Raised<'w> {
        flag.set(true);
        Raised(flag)
    }
}

impl Drop for Raised<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// This rank's own exclusive lock, held by `with_local`: its lock word on the shared-memory
/// path, its entry in its own lock table on the RDMA path.
enum OwnLock<'w> {
    Direct(&'w Direct, u32),
    Messages(&'w RefCell<Core>, u32),
}

impl Drop for OwnLock<'_> {
    fn drop(&mut self) {
        match *self {
            OwnLock::Direct(direct, me) => direct.unlock(me, true),
            OwnLock::Messages(core, me) => {
                // Applied at once, so that a rank waiting for the lock gets it: the unlock
                // goes through this rank's loopback, which only a round of progress
                // delivers (`drain`). A send that fails has stopped the PML, which the next
                // call reports.
                if let Ok(mut core) = messaging::serve(core) {
                    // SAFETY: no reply is awaited.
                    let _ = unsafe { core.request(me, control(Ask::Unlock), &[], None) }
                        .and_then(|_| core.drain());
                }
            }
        }
    }
}

/// Marks the access epoch closed when its call returns or unwinds.
struct Closed<'w>(&'w Cell<Open>);

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.set(Open::None);
    }
}

/// Forgets a lock epoch's target when its call returns or unwinds.
struct Unlocked<'w, 'a, T: Equivalence>(&'w Window<'a, T>, u32);

impl<T: Equivalence> Drop for Unlocked<'_, '_, T> {
    fn drop(&mut self) {
        let mut locked = self.0.locked.borrow_mut();
        locked.retain(|&t| t != self.1);
        if locked.is_empty() {
            self.0.open.set(Open::None);
        }
    }
}

/// Which ranks an epoch reaches.
enum Reach {
    All,
    One(u32),
    Group(Vec<u32>),
}

impl Reach {
    #[inline]
    fn reaches(&self, rank: u32) -> bool {
        match self {
            Reach::All => true,
            Reach::One(one) => *one == rank,
            Reach::Group(group) => group.contains(&rank),
        }
    }

    /// The ranks reached, of a window of `size` ranks.
    fn ranks(&self, size: u32) -> Vec<u32> {
        match self {
            Reach::All => (0..size).collect(),
            Reach::One(t) => vec![*t],
            Reach::Group(group) => group.clone(),
        }
    }
}

/// An open access epoch: the operations on the window's ranks that it reaches. Buffers are
/// borrowed for `'scope`, the whole epoch.
pub struct Epoch<'scope, 'env: 'scope, T: Equivalence> {
    window: &'env Window<'env, T>,
    reach: Reach,
    /// What the epoch is, for errors.
    name: &'static str,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// A request-based operation (`rput`, `rget`, ...): `wait` completes it at the origin and
/// hands back the buffer it filled. An unwaited one completes when its epoch ends.
pub struct RmaRequest<'scope, D: ?Sized> {
    core: &'scope RefCell<Core>,
    /// The reply to wait for (0: none).
    id: u64,
    /// The RDMA operations to wait for, where the operation went by the device: the path,
    /// the target, and the ticket of the last one.
    device: Option<(&'scope Rdma, u32, u64)>,
    data: Option<&'scope mut D>,
}

/// What an issued operation leaves in flight: the reply it awaits (its id; 0: none) and,
/// where it went by the device, the target and the ticket of its last RDMA operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    reply: u64,
    device: Option<(u32, u64)>,
}

impl Pending {
    /// Complete at once.
    const DONE: Pending = Pending {
        reply: 0,
        device: None,
    };

    fn reply(id: u64) -> Pending {
        Pending {
            reply: id,
            device: None,
        }
    }

    /// The RDMA operations to `target` up to `ticket` (0: none was posted).
    fn device(target: u32, ticket: u64) -> Pending {
        Pending {
            reply: 0,
            device: (ticket != 0).then_some((target, ticket)),
        }
    }
}

impl<D: ?Sized> Drop for RmaRequest<'_, D> {
    /// A request dropped unwaited leaves its outcome to the end of its epoch (whose end
    /// waits for the device's operations too).
    fn drop(&mut self) {
        // A request with no reply (id 0) is not awaited.
        if self.id != 0 {
            if let Ok(mut core) = self.core.try_borrow_mut() {
                core.hold(self.id, false);
            }
        }
    }
}

impl<'scope, D: ?Sized> RmaRequest<'scope, D> {
    /// Waits until the operation completed at the origin; returns the buffer a get filled.
    pub fn wait(self) -> Option<&'scope mut D> {
        or_fatal(self.try_wait())
    }

    pub fn try_wait(mut self) -> Result<Option<&'scope mut D>, Error> {
        if let Some((rdma, target, ticket)) = self.device {
            rdma.wait(target, ticket)
                .map_err(|c| Error::new("wait for a one-sided request", c))?;
        }
        if self.id != 0 {
            let mut core = messaging::serve(self.core)
                .map_err(|c| Error::new("wait for a one-sided request", c))?;
            let id = self.id;
            core.wait_until(|core| core.is_done(id))
                .map_err(|c| Error::new("wait for a one-sided request", c))?;
            core.take(id)
                .expect("done")
                .map_err(|f| Error::new("wait for a one-sided request", Cause::Window(f)))?;
        }
        Ok(self.data.take())
    }

    /// Whether the operation completed at the origin, after serving the window once.
    pub fn test(&self) -> Result<bool, Error> {
        let what = "test a one-sided request";
        let mut core = messaging::serve(self.core).map_err(|c| Error::new(what, c))?;
        core.drain().map_err(|c| Error::new(what, c))?;
        let device = match self.device {
            Some((rdma, target, ticket)) => {
                rdma.done(target, ticket).map_err(|c| Error::new(what, c))?
            }
            None => true,
        };
        Ok(device && core.is_done(self.id))
    }
}

impl<'scope, 'env, T: Equivalence> Epoch<'scope, 'env, T> {
    fn new(window: &'env Window<'env, T>, reach: Reach, name: &'static str) -> Self {
        Epoch {
            window,
            reach,
            name,
            _scope: PhantomData,
            _env: PhantomData,
        }
    }

    fn core(&self) -> Result<messaging::Served<'_>, Cause> {
        messaging::serve(&self.window.core)
    }

    /// Checks that `target` is in reach and `count` elements at `disp` lie in its window;
    /// returns the target and the byte offset.
    fn place(&self, target: Rank, disp: usize, count: usize) -> Result<(u32, u64), Cause> {
        let t = self.window.comm.data().check_rank(target)?;
        if !self.reach.reaches(t) {
            return Err(Cause::Window(WindowFault::NotInEpoch {
                target,
                epoch: self.name.into(),
            }));
        }
        match &self.window.sizes {
            Some(sizes) => {
                let size = sizes[t as usize];
                if disp.checked_add(count).is_none_or(|end| end > size) {
                    return Err(Cause::Window(WindowFault::OutOfWindow {
                        target,
                        displacement: disp,
                        count,
                        size,
                    }));
                }
                Ok((t, (disp * size_of::<T>()) as u64))
            }
            // A dynamic window's target checks its attached memory (on the RDMA path the
            // origin too, against the block it learned: `attached_rdma`).
            None => Ok((t, disp as u64)),
        }
    }

    /// Sends one operation: every operation goes through here, where a transport that can
    /// do it natively would take it over.
    ///
    /// # Safety
    /// `into`, where given, must stay valid for writes of its length, and untouched, until
    /// the reply came or the epoch ended.
    unsafe fn issue(
        &self,
        target: u32,
        request: Request,
        payload: &[&[u8]],
        reply: Option<Option<Destination>>,
    ) -> Result<u64, Cause> {
        self.window.messaged.borrow_mut()[target as usize] = true;
        // SAFETY: forwarded from this function's contract.
        unsafe { self.core()?.request(target, request, payload, reply) }
    }

    /// `MPI_Put`: `origin`'s elements to `target`'s window at `disp`.
    pub fn put(&self, origin: &'scope [T], target: Rank, disp: usize) {
        or_fatal(self.try_put(origin, target, disp));
    }

    pub fn try_put(&self, origin: &'scope [T], target: Rank, disp: usize) -> Result<(), Error> {
        self.rput_inner(origin, target, disp)
            .map(drop)
            .map_err(|c| Error::new(format!("put to rank {target}"), c))
    }

    /// `MPI_Rput`. On the shared-memory and message paths the data is copied when the put is
    /// issued, and the request is complete at once; on the RDMA path the device reads
    /// `origin` later, and the request completes with the write. `origin` stays borrowed for
    /// the epoch (`'scope`), whose end waits for the write: the borrow keeps it unchanged
    /// until then either way.
    pub fn rput(&self, origin: &'scope [T], target: Rank, disp: usize) -> RmaRequest<'scope, [T]> {
        or_fatal(
            self.rput_inner(origin, target, disp)
                .map_err(|c| Error::new(format!("rput to rank {target}"), c)),
        )
    }

    fn rput_inner(
        &self,
        origin: &'scope [T],
        target: Rank,
        disp: usize,
    ) -> Result<RmaRequest<'scope, [T]>, Cause> {
        let (t, offset) = self.place(target, disp, origin.len())?;
        let bytes = as_bytes(origin);
        if let Some(direct) = self.window.direct() {
            direct.put(t, offset, bytes);
            return Ok(self.request(Pending::DONE, None));
        }
        if let Some(rdma) = self.window.rdma_for(t, offset, bytes.len())? {
            // SAFETY: `origin` is borrowed for the epoch, whose end waits for the put.
            let ticket = unsafe { rdma.put(t, offset, bytes) }?;
            return Ok(self.request(Pending::device(t, ticket), None));
        }
        // SAFETY: no reply data is awaited.
        unsafe {
            self.issue(
                t,
                data_request(Ask::Put, offset, bytes.len()),
                &[bytes],
                None,
            )
        }?;
        Ok(self.request(Pending::DONE, None))
    }

    /// The request of an operation that left `pending` in flight, handing back `data`.
    fn request<D: ?Sized>(
        &self,
        pending: Pending,
        data: Option<&'scope mut D>,
    ) -> RmaRequest<'scope, D> {
        let core: &'scope RefCell<Core> = extend(&self.window.core);
        if pending.reply != 0 {
            // The core was just lent to issue the request.
            core.borrow_mut().hold(pending.reply, true);
        }
        let device = pending
            .device
            .zip(self.window.rdma.as_ref())
            .map(|((target, ticket), rdma)| (rdma, target, ticket));
        RmaRequest {
            core,
            id: pending.reply,
            device,
            data,
        }
    }

    /// `MPI_Get`: `target`'s elements at `disp` into `into`, there when the epoch ends.
    pub fn get(&self, into: &'scope mut [T], target: Rank, disp: usize) {
        or_fatal(self.try_get(into, target, disp));
    }

    pub fn try_get(&self, into: &'scope mut [T], target: Rank, disp: usize) -> Result<(), Error> {
        self.rget_inner(into, target, disp)
            .map(drop)
            .map_err(|c| Error::new(format!("get from rank {target}"), c))
    }

    /// `MPI_Rget`: a get whose `wait` hands `into` back, filled (on the RDMA path once the
    /// READ landed, by messages once the reply came).
    pub fn rget(
        &self,
        into: &'scope mut [T],
        target: Rank,
        disp: usize,
    ) -> RmaRequest<'scope, [T]> {
        or_fatal(
            self.rget_inner(into, target, disp)
                .map_err(|c| Error::new(format!("rget from rank {target}"), c)),
        )
    }

    /// A get, whose request hands `into` back once it landed.
    fn rget_inner(
        &self,
        into: &'scope mut [T],
        target: Rank,
        disp: usize,
    ) -> Result<RmaRequest<'scope, [T]>, Cause> {
        let (t, offset) = self.place(target, disp, into.len())?;
        if let Some(direct) = self.window.direct() {
            direct.get(t, offset, as_bytes_mut(into));
            return Ok(self.request(Pending::DONE, Some(into)));
        }
        if let Some(rdma) = self
            .window
            .rdma_for(t, offset, std::mem::size_of_val(into))?
        {
            // SAFETY: `into` is borrowed for the epoch, whose end waits for the read, and
            // handed back by the request only once the read landed.
            let ticket = unsafe { rdma.get(t, offset, as_bytes_mut(into)) }?;
            return Ok(self.request(Pending::device(t, ticket), Some(into)));
        }
        let len = std::mem::size_of_val(into);
        let ptr = into.as_mut_ptr().cast::<u8>();
        // SAFETY: `into` is borrowed for the epoch, and handed back only once the reply
        // came (`RmaRequest::wait`) or the epoch ended.
        let id = unsafe {
            self.issue(
                t,
                data_request(Ask::Get, offset, len),
                &[],
                Some(Some(Destination::Bytes(ptr, len))),
            )
        }?;
        Ok(self.request(Pending::reply(id), Some(into)))
    }

    /// `MPI_Accumulate`: `target[disp..] = origin ∘ target[disp..]`, element by element,
    /// atomic with respect to other accumulates of the same operation and type.
    pub fn accumulate(
        &self,
        origin: &'scope [T],
        target: Rank,
        disp: usize,
        op: impl Into<AccumulateOperation>,
    ) {
        or_fatal(self.try_accumulate(origin, target, disp, op));
    }

    pub fn try_accumulate(
        &self,
        origin: &'scope [T],
        target: Rank,
        disp: usize,
        op: impl Into<AccumulateOperation>,
    ) -> Result<(), Error> {
        self.accumulate_inner(origin, None, target, disp, op.into())
            .map(drop)
            .map_err(|c| Error::new(format!("accumulate to rank {target}"), c))
    }

    /// `MPI_Raccumulate`.
    pub fn raccumulate(
        &self,
        origin: &'scope [T],
        target: Rank,
        disp: usize,
        op: impl Into<AccumulateOperation>,
    ) -> RmaRequest<'scope, [T]> {
        or_fatal(
            self.accumulate_inner(origin, None, target, disp, op.into())
                .map_err(|c| Error::new(format!("raccumulate to rank {target}"), c)),
        )
    }

    /// `MPI_Get_accumulate`: `result` gets the target's elements as they were, and the
    /// target `origin ∘ target`, atomically.
    pub fn get_accumulate(
        &self,
        origin: &'scope [T],
        result: &'scope mut [T],
        target: Rank,
        disp: usize,
        op: impl Into<AccumulateOperation>,
    ) {
        or_fatal(
            self.accumulate_inner(origin, Some(result), target, disp, op.into())
                .map(drop)
                .map_err(|c| Error::new(format!("get_accumulate on rank {target}"), c)),
        );
    }

    /// `MPI_Rget_accumulate`: `wait` hands `result` back, filled.
    pub fn rget_accumulate(
        &self,
        origin: &'scope [T],
        result: &'scope mut [T],
        target: Rank,
        disp: usize,
        op: impl Into<AccumulateOperation>,
    ) -> RmaRequest<'scope, [T]> {
        or_fatal(
            self.accumulate_inner(origin, Some(result), target, disp, op.into())
                .map_err(|c| Error::new(format!("rget_accumulate on rank {target}"), c)),
        )
    }

    /// `MPI_Fetch_and_op`: the one-element `get_accumulate`.
    pub fn fetch_and_op(
        &self,
        origin: &'scope T,
        result: &'scope mut T,
        target: Rank,
        disp: usize,
        op: impl Into<AccumulateOperation>,
    ) {
        or_fatal(self.try_fetch_and_op(origin, result, target, disp, op));
    }

    pub fn try_fetch_and_op(
        &self,
        origin: &'scope T,
        result: &'scope mut T,
        target: Rank,
        disp: usize,
        op: impl Into<AccumulateOperation>,
    ) -> Result<(), Error> {
        self.accumulate_inner(
            std::slice::from_ref(origin),
            Some(std::slice::from_mut(result)),
            target,
            disp,
            op.into(),
        )
        .map(drop)
        .map_err(|c| Error::new(format!("fetch_and_op on rank {target}"), c))
    }

    fn accumulate_inner(
        &self,
        origin: &'scope [T],
        result: Option<&'scope mut [T]>,
        target: Rank,
        disp: usize,
        op: AccumulateOperation,
    ) -> Result<RmaRequest<'scope, [T]>, Cause> {
        let datatype = datatype_of::<T>();
        let element = self.window.check_accumulate(datatype, op)?;
        if let Some(result) = &result {
            if result.len() != origin.len() {
                return Err(Cause::CountMismatch {
                    what: "the result buffer",
                    expected: origin.len(),
                    got: result.len(),
                });
            }
        }
        let (t, offset) = self.place(target, disp, origin.len())?;
        let bytes = as_bytes(origin);
        if let Some(direct) = self.window.direct() {
            let mut result = result;
            let old = result.as_deref_mut().map(as_bytes_mut);
            direct.accumulate(t, offset, op, (datatype, element), bytes, old)?;
            return Ok(self.request(Pending::DONE, result));
        }
        if let Some(rdma) = self.window.device_atomics(t, offset, bytes.len())? {
            let mut result = result;
            let old = result.as_deref_mut().map(as_bytes_mut);
            rdma.accumulate(t, offset, op, datatype, bytes, old)?;
            return Ok(self.request(Pending::DONE, result));
        }
        let mut request = data_request(Ask::Accumulate, offset, bytes.len());
        request.op = op.code();
        request.element = element;
        match result {
            None => {
                // SAFETY: no reply data is awaited.
                unsafe { self.issue(t, request, &[bytes], None) }?;
                Ok(self.request(Pending::DONE, None))
            }
            Some(result) => {
                request.ask = Ask::GetAccumulate;
                let into = Destination::Bytes(result.as_mut_ptr().cast(), bytes.len());
                // SAFETY: `result` is borrowed for the epoch, and handed back only once the
                // reply came or the epoch ended.
                let id = unsafe { self.issue(t, request, &[bytes], Some(Some(into))) }?;
                Ok(self.request(Pending::reply(id), Some(result)))
            }
        }
    }

    /// `MPI_Compare_and_swap`: `result` gets the target element; the target becomes
    /// `origin` if it equalled `compare` (bytewise), atomically.
    pub fn compare_and_swap(
        &self,
        origin: &'scope T,
        compare: &'scope T,
        result: &'scope mut T,
        target: Rank,
        disp: usize,
    ) {
        or_fatal(self.try_compare_and_swap(origin, compare, result, target, disp));
    }

    pub fn try_compare_and_swap(
        &self,
        origin: &'scope T,
        compare: &'scope T,
        result: &'scope mut T,
        target: Rank,
        disp: usize,
    ) -> Result<(), Error> {
        let what = || format!("compare_and_swap on rank {target}");
        let mut run = || -> Result<(), Cause> {
            // MPI's integers, logicals and bytes, and (mpirt's extension) floats, compared
            // bit for bit; any other type may hold padding, whose bytes are not values.
            let datatype = datatype_of::<T>();
            if self.window.element_code(datatype).is_none() {
                return Err(Cause::Window(WindowFault::Unsupported(format!(
                    "compare_and_swap takes primitive numbers and bool, not {}",
                    datatype.name()
                ))));
            }
            let (t, offset) = self.place(target, disp, 1)?;
            let (new, old) = (
                as_bytes(std::slice::from_ref(origin)),
                as_bytes(std::slice::from_ref(compare)),
            );
            if let Some(direct) = self.window.direct() {
                let result = as_bytes_mut(std::slice::from_mut(result));
                direct.compare_and_swap(t, offset, old, new, result)?;
                return Ok(());
            }
            if let Some(rdma) = self.window.device_atomics(t, offset, new.len())? {
                let result = as_bytes_mut(std::slice::from_mut(result));
                return rdma.compare_and_swap(t, offset, old, new, result);
            }
            let into = Destination::Bytes((result as *mut T).cast(), new.len());
            let request = data_request(Ask::CompareAndSwap, offset, new.len());
            // SAFETY: `result` is borrowed for the epoch, which waits for the reply.
            unsafe { self.issue(t, request, &[old, new], Some(Some(into))) }?;
            Ok(())
        };
        run().map_err(|c| Error::new(what(), c))
    }

    /// `MPI_Win_flush`: every operation this epoch issued to `target` is complete there.
    pub fn flush(&self, target: Rank) -> Result<(), Error> {
        // No element at displacement 0 fits every window: this checks the rank alone.
        self.place(target, 0, 0)
            .and_then(|(t, _)| self.flush_targets(&[t]))
            .map_err(|c| Error::new(format!("flush of rank {target}"), c))
    }

    /// `MPI_Win_flush_all`: every operation this epoch issued is complete at its target.
    pub fn flush_all(&self) -> Result<(), Error> {
        let targets = self.targets();
        self.flush_targets(&targets)
            .map_err(|c| Error::new("flush_all", c))
    }

    /// `MPI_Win_flush_local`: the operations to `target` are complete at this origin. The
    /// portable path copies origin data when it issues an operation, so this waits only for
    /// the gets' data, which a flush also does: it flushes.
    pub fn flush_local(&self, target: Rank) -> Result<(), Error> {
        self.flush(target)
    }

    /// `MPI_Win_flush_local_all` (see `flush_local`).
    pub fn flush_local_all(&self) -> Result<(), Error> {
        self.flush_all()
    }

    /// `MPI_Win_sync`: orders this process's loads and stores to its window memory with
    /// the window's (a full memory fence; the portable path applies operations in this
    /// thread).
    pub fn sync(&self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    fn targets(&self) -> Vec<u32> {
        self.reach.ranks(self.window.comm.size() as u32)
    }

    /// Waits until this rank's RDMA operations on `targets` completed there: before the
    /// messages that tell a target an epoch's operations are done (see `window/rdma.rs`).
    fn complete_rdma(&self, targets: &[u32]) -> Result<(), Cause> {
        match &self.window.rdma {
            Some(rdma) => rdma.complete(targets),
            None => Ok(()),
        }
    }

    /// Runs a flush's or an epoch end's messages (`messages`) after the RDMA operations on
    /// `targets` completed, even where one of those failed: the targets wait for the
    /// messages (a fence's, a `complete`, an unlock that frees the lock for other ranks),
    /// and a failed operation is this origin's error alone. Returns the first error.
    fn after_rdma(
        &self,
        targets: &[u32],
        messages: impl FnOnce() -> Result<(), Cause>,
    ) -> Result<(), Cause> {
        let rdma = self.complete_rdma(targets);
        let messages = messages();
        rdma.and(messages)
    }

    fn flush_targets(&self, targets: &[u32]) -> Result<(), Cause> {
        if self.window.direct().is_some() {
            // Every operation completed as it was issued; order them before what follows.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            return Ok(());
        }
        self.after_rdma(targets, || self.flush_messages(targets))
    }

    /// A flush's messages: to the targets that got operations by message since the last.
    fn flush_messages(&self, targets: &[u32]) -> Result<(), Cause> {
        let messaged: Vec<u32> = match &self.window.rdma {
            // Targets that got only RDMA operations are flushed: the device completed them.
            Some(_) => {
                let mut messaged = self.window.messaged.borrow_mut();
                targets
                    .iter()
                    .copied()
                    .filter(|&t| std::mem::take(&mut messaged[t as usize]))
                    .collect()
            }
            None => targets.to_vec(),
        };
        let mut core = self.core()?;
        let mut ids = Vec::with_capacity(messaged.len());
        for &t in &messaged {
            ids.extend(core.flush_request(t, control(Ask::Flush))?);
        }
        // A target answers in order: once every reply awaited from it came (the flush's
        // among them, where one was asked for), it applied everything this rank sent it.
        core.wait_until(|core| {
            ids.iter().all(|&id| core.is_done(id))
                && messaged.iter().all(|&t| core.all_done(Some(t)))
        })?;
        for &t in &messaged {
            core.settle(Some(t), false).map_err(Cause::Window)?;
        }
        Ok(())
    }

    /// Ends a fence epoch: tells every rank this rank's operations are sent, then waits
    /// until every rank said so to it (so all of theirs are applied here) and every rank
    /// answered that it applied this rank's.
    fn end_fence(&self) -> Result<(), Cause> {
        if self.window.direct().is_some() {
            // Every operation completed as it was issued: the closing barrier is enough.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            return Ok(());
        }
        self.after_rdma(&self.targets(), || self.fence_messages())
    }

    /// A fence's messages: `FenceDone` to every rank, and their answers.
    fn fence_messages(&self) -> Result<(), Cause> {
        let mut core = self.core()?;
        for t in 0..self.window.comm.size() as u32 {
            // SAFETY: the reply carries no data. Each target answers after it applied this
            // rank's operations (they came before, in order), so a refusal among them
            // arrives before that answer and is reported by this fence.
            unsafe { core.request(t, control(Ask::FenceDone), &[], Some(None)) }?;
        }
        let size = self.window.comm.size() as u32;
        core.wait_until(|core| core.target.fence_done == size && core.all_done(None))?;
        core.target.fence_done = 0;
        core.settle(None, true).map_err(Cause::Window)
    }

    /// Ends a PSCW access epoch: tells each target, and waits for this rank's replies (each
    /// target's answer to `Complete` among them).
    fn end_start(&self) -> Result<(), Cause> {
        let targets = self.targets();
        if let Some(direct) = self.window.direct() {
            // Every operation completed as it was issued, and refuses nothing late; the
            // notice publishes its stores. No answer is awaited: it would block until the
            // target's `wait`, which MPI does not let `complete` do.
            for &t in &targets {
                direct.notify(t, Notice::Completed);
            }
            return Ok(());
        }
        self.after_rdma(&targets, || self.complete_messages(&targets))
    }

    /// `complete`'s messages to `targets`, and their answers.
    fn complete_messages(&self, targets: &[u32]) -> Result<(), Cause> {
        // The target answers after it applied this rank's operations, so their refusals are
        // reported here (as for a fence).
        let mut core = self.core()?;
        for &t in targets {
            // SAFETY: the answer carries no data.
            unsafe { core.request(t, control(Ask::Complete), &[], Some(None)) }?;
        }
        core.wait_until(|core| core.all_done(None))?;
        core.settle(None, true).map_err(Cause::Window)
    }

    /// Ends a lock epoch: unlocks each target, which replies once all this rank's
    /// operations on it are applied.
    fn end_locks(&self, targets: &[u32], kind: LockKind) -> Result<(), Cause> {
        if let Some(direct) = self.window.direct() {
            // Every operation completed as it was issued.
            for &t in targets {
                direct.unlock(t, kind == LockKind::Exclusive);
            }
            return Ok(());
        }
        self.after_rdma(targets, || self.unlock_messages(targets))
    }

    /// The unlocks of `targets`, and their answers.
    fn unlock_messages(&self, targets: &[u32]) -> Result<(), Cause> {
        let mut core = self.core()?;
        let mut ids = Vec::with_capacity(targets.len());
        for &t in targets {
            // SAFETY: an unlock's reply carries no data.
            ids.push(unsafe { core.request(t, control(Ask::Unlock), &[], Some(None)) }?);
        }
        core.wait_until(|core| ids.iter().all(|&id| core.is_done(id)) && core.all_done(None))?;
        let mut first = Ok(());
        for &t in targets {
            let settled = core.settle(Some(t), true);
            if first.is_ok() {
                first = settled;
            }
        }
        first.map_err(Cause::Window)
    }
}

/// Ends an epoch whose closure unwinds or whose end failed: its buffers go back to the
/// caller, so no reply may write them any more.
struct Abandon<'w> {
    core: &'w RefCell<Core>,
    /// The RDMA path's operations, which the device may still be moving.
    rdma: Option<&'w Rdma>,
    /// The ranks the epoch reaches, whose replies it awaits (lock epochs on other ranks
    /// may be open around it, awaiting theirs).
    reach: &'w Reach,
    /// Whether the epoch's end succeeded (every reply came).
    ended: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if !self.ended {
            if let Ok(mut core) = self.core.try_borrow_mut() {
                core.abandon(|_, target| self.reach.reaches(target));
            }
            // The buffers go back to the caller: the device must be done with them. A
            // failure stopped the PML, whose transports stop moving data.
            if let Some(rdma) = self.rdma {
                let _ = rdma.complete_all();
            }
        }
    }
}

/// The locks of a lock or lock_all epoch, released if the epoch unwinds before its end
/// unlocks them: a lock word left taken, or a holder left in a target's lock table, would
/// keep every other rank waiting for it forever.
struct Held<'w, 'a, T: Equivalence> {
    window: &'w Window<'a, T>,
    /// The locked ranks (listed only where they must be unlocked: the epoch unwound).
    targets: Reach,
    kind: LockKind,
    /// Set once the epoch's end took over the unlocking.
    unlocking: Cell<bool>,
}

impl<'w, 'a, T: Equivalence> Held<'w, 'a, T> {
    fn new(window: &'w Window<'a, T>, targets: Reach, kind: LockKind) -> Self {
        Held {
            window,
            targets,
            kind,
            unlocking: Cell::new(false),
        }
    }

    fn unlocking(&self) {
        self.unlocking.set(true);
    }
}

impl<T: Equivalence> Drop for Held<'_, '_, T> {
    fn drop(&mut self) {
        if self.unlocking.get() {
            return;
        }
        let targets = self.targets.ranks(self.window.comm.size() as u32);
        if let Some(direct) = self.window.direct() {
            for &t in &targets {
                direct.unlock(t, self.kind == LockKind::Exclusive);
            }
            return;
        }
        // Unlocks that wait for no answer: the caller is unwinding, and the targets serve
        // them whenever they are inside mpirt.
        if let Ok(mut core) = self.window.core.try_borrow_mut() {
            for &t in &targets {
                // SAFETY: no reply is awaited. A send that fails has stopped the PML, which
                // the next call reports.
                let _ = unsafe { core.request(t, control(Ask::Unlock), &[], None) };
            }
        }
    }
}

/// The window's core, for a request of an epoch: the window outlives the epoch.
fn extend<'scope, 'env: 'scope>(core: &'env RefCell<Core>) -> &'scope RefCell<Core> {
    core
}

/// A request that moves `len` bytes at `offset`.
fn data_request(ask: Ask, offset: u64, len: usize) -> Request {
    Request {
        ask,
        op: 0,
        element: 0,
        id: 0,
        offset,
        len: len as u64,
        blocks: 0,
    }
}

/// A request that moves no data (a lock, an unlock, a flush, an epoch's end).
fn control(ask: Ask) -> Request {
    data_request(ask, 0, 0)
}

fn as_bytes_mut<T: Equivalence>(values: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; the bytes written into it are a window's, which holds
    // values of `T` only (every operation on it moves whole elements of `T`).
    unsafe {
        std::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), std::mem::size_of_val(values))
    }
}

fn as_bytes<T: Equivalence>(values: &[T]) -> &[u8] {
    // SAFETY: `Equivalence` types are plain data whose contiguous datatype covers every
    // byte (checked at the window's creation: `check_type`), so their bytes are initialized.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), std::mem::size_of_val(values)) }
}

/// Windows hold contiguous types: their elements lie as they travel.
fn check_type<T: Equivalence>(what: &str) -> Result<(), Error> {
    let datatype = datatype_of::<T>();
    if datatype.is_contiguous() && datatype.size() == size_of::<T>() {
        Ok(())
    } else {
        Err(unsupported(
            what,
            format!(
                "windows hold contiguous types; {} has gaps (user datatypes come later)",
                datatype.name()
            ),
        ))
    }
}

fn unsupported(what: &str, why: String) -> Error {
    Error::new(what, Cause::Window(WindowFault::Unsupported(why)))
}

fn sync_fault(what: &str, why: String) -> Error {
    Error::new(what, Cause::Window(WindowFault::Synchronisation(why)))
}

/// Why a synchronisation may not start inside `with_local` (`lent`) or a second `post`.
fn in_local_or_post(lent: bool) -> String {
    if lent {
        "the window's memory is lent to with_local; open epochs outside it".into()
    } else {
        "a post is already exposing this window; end it first".into()
    }
}

/// What the ranks creating a window agreed on.
struct Agreed {
    /// Each rank's length, in elements.
    lens: Vec<usize>,
    /// The path every rank allows (`window_path`): the shared-memory path where all allow
    /// it, else RDMA where all allow that, else messages.
    path: Path,
    /// Whether windows go by one-sided operations (`rdma_agreed`: every rank's PML does
    /// them, and they are asked for or taken unasked), without which no rank tries the
    /// RDMA path (whose set-up is collective).
    rdma: bool,
}

/// Which way a window's operations may go (`MPIRT_WINDOW_PATH`), each falling back to the
/// next where it cannot: loads and stores in memory every rank maps, RDMA where the
/// transport does it, active messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Path {
    SharedMemory,
    Rdma,
    Messages,
}

/// Gathers what each rank brings to a window's creation (its length, its choice of path,
/// its element type), so that every rank decides alike: a rank that alone took another
/// path, or alone refused, would leave the others in a collective it never joins.
/// Collective.
fn agree<T: Equivalence, C: Communicator>(
    comm: &C,
    len: usize,
    what: &str,
) -> Result<Agreed, Error> {
    let datatype = datatype_of::<T>();
    let path = window_path(what);
    let mine = [
        len as u64,
        match path {
            Ok(Path::SharedMemory) => 1,
            Ok(Path::Messages) => 0,
            Ok(Path::Rdma) => 3,
            Err(_) => 2,
        },
        size_of::<T>() as u64,
        signature(datatype.name()),
        Rdma::available(comm.data()) as u64,
    ];
    let mut all = vec![0u64; 5 * comm.size() as usize];
    comm.try_all_gather_into(&mine[..], &mut all[..])
        .map_err(|e| Error::new(what, e.cause().clone()))?;
    let path = path?;
    let ranks = all.chunks_exact(5).enumerate();
    let mut lens = Vec::with_capacity(comm.size() as usize);
    for (rank, theirs) in ranks {
        if theirs[1] == 2 {
            return Err(unsupported(
                what,
                format!(
                    "rank {rank}'s MPIRT_WINDOW_PATH is none of shared_memory, rdma and messages"
                ),
            ));
        }
        if theirs[2..4] != mine[2..4] {
            return Err(unsupported(
                what,
                format!(
                    "rank {rank} creates the window over another element type ({} bytes) than \
                     this rank's {} ({} bytes): every rank must use one type",
                    theirs[2],
                    datatype.name(),
                    size_of::<T>()
                ),
            ));
        }
        let n = usize::try_from(theirs[0]).unwrap_or(usize::MAX);
        if n.checked_mul(size_of::<T>())
            .is_none_or(|bytes| bytes > isize::MAX as usize)
        {
            return Err(unsupported(
                what,
                format!(
                    "rank {rank}'s {n} elements of {} do not fit in memory",
                    datatype.name()
                ),
            ));
        }
        lens.push(n);
    }
    check_type::<T>(what)?;
    // The most restrictive path any rank allows.
    let path = all.chunks_exact(5).fold(path, |path, theirs| {
        path.max(match theirs[1] {
            1 => Path::SharedMemory,
            3 => Path::Rdma,
            _ => Path::Messages,
        })
    });
    let offers = all.chunks_exact(5).map(|theirs| match theirs[4] {
        2 => RmaOffer::Default,
        1 => RmaOffer::Asked,
        _ => RmaOffer::None,
    });
    let rdma = rdma_agreed(offers, path == Path::Rdma);
    Ok(Agreed { lens, path, rdma })
}

/// A datatype's signature as the ranks compare it: its name, hashed (FNV-1a).
fn signature(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Which paths windows may take (`MPIRT_WINDOW_PATH`): `shared_memory` or nothing, every
/// path (the shared-memory one where every rank maps the memory); `rdma`, RDMA where the
/// transport does it, else messages (never the mapping); `messages`, every operation as a
/// message (as on a network without RDMA).
fn window_path(what: &str) -> Result<Path, Error> {
    const VARIABLE: &str = "MPIRT_WINDOW_PATH";
    match std::env::var(VARIABLE).as_deref() {
        Err(_) | Ok("shared_memory") => Ok(Path::SharedMemory),
        Ok("rdma") => Ok(Path::Rdma),
        Ok("messages") => Ok(Path::Messages),
        Ok(other) => Err(Error::new(
            what,
            Cause::UnknownAlgorithm {
                variable: VARIABLE.into(),
                value: other.into(),
                choices: &["shared_memory", "rdma", "messages"],
            },
        )),
    }
}

/// Memory for a window of `len` elements of `T` on each rank that every rank of `comm` maps
/// (laid out as `direct.rs` says), or `None` where some rank could not (it is on another
/// host). Collective.
fn map_parts<T, C: Communicator>(
    comm: &C,
    lens: &[usize],
    what: &str,
) -> Result<Option<Direct>, Error> {
    // Each rank's part starts on a cache line of its own, after every rank's control lines
    // and PSCW notices (`direct::header`). Every rank computes this from the same lengths,
    // so all refuse alike.
    let too_large = || {
        unsupported(
            what,
            format!(
                "the {} ranks' parts ({} elements in all) do not fit in one mapping",
                lens.len(),
                lens.iter().fold(0u128, |sum, &n| sum + n as u128)
            ),
        )
    };
    let mut parts = Vec::with_capacity(lens.len());
    let mut total = direct::header(lens.len()).ok_or_else(too_large)?;
    for &n in lens {
        // `agree` checked that each part fits.
        let bytes = n * size_of::<T>();
        parts.push((total, bytes));
        total = bytes
            .checked_next_multiple_of(LINE)
            .and_then(|padded| total.checked_add(padded))
            .filter(|&end| end <= isize::MAX as usize)
            .ok_or_else(too_large)?;
    }
    let me = comm.rank() as u32;
    Ok(map_shared(comm, total, what)?
        .map(|(map, lock_free)| Direct::new(map, parts, me, lock_free)))
}

/// A /dev/shm name this rank made, removed when the guard drops.
struct Unlink(Option<String>);

impl Drop for Unlink {
    fn drop(&mut self) {
        if let Some(name) = self.0.take() {
            // Nothing is left to do where the name is already gone.
            let _ = SharedMapping::remove(&name);
        }
    }
}

/// A mapping of `bytes` that every rank of `comm` shares: rank 0 creates it, the others
/// open it by name; `None` if any rank could not (it is on another host). With it, whether
/// every rank registered for the memory barrier that lets short accumulates skip the lock
/// (`direct.rs`).
fn map_shared<C: Communicator>(
    comm: &C,
    bytes: usize,
    what: &str,
) -> Result<Option<(SharedMapping, bool)>, Error> {
    const NAME: usize = 128;
    let mut name = [0u8; NAME];
    let mut map = None;
    // Removes the name on every way out (the others opened it by then, or never will).
    let mut made = Unlink(None);
    if comm.rank() == 0 {
        let job = crate::environment::job_id().map_err(|c| Error::new(what, c))?;
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let text = format!("mpirt-{job}-win-{}-{n}", std::process::id());
        // A window larger than /dev/shm has room for is refused here (the file's pages are
        // allocated at its creation): such a window stays private.
        map = SharedMapping::create(&text, bytes).ok();
        if map.is_some() {
            if text.len() < NAME {
                name[..text.len()].copy_from_slice(text.as_bytes());
            } else {
                // The others cannot open it: the window stays private, and all agree below.
                map = None;
            }
            made = Unlink(Some(text));
        }
    }
    comm.process_at_rank(0).try_broadcast_into(&mut name[..])?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(NAME);
    let shared = std::str::from_utf8(&name[..end]).unwrap_or("");
    if comm.rank() != 0 && !shared.is_empty() {
        map = SharedMapping::open(shared, bytes).ok();
    }
    let mine = [
        i32::from(map.is_some()),
        i32::from(direct::barrier::registered()),
    ];
    let mut everyone = [0i32; 2];
    let agreed = comm.try_all_reduce_into(&mine[..], &mut everyone[..], SystemOperation::min());
    drop(made);
    agreed?;
    Ok(map
        .filter(|_| everyone[0] == 1)
        .map(|map| (map, everyone[1] == 1)))
}
