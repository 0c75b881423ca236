//! The one-sided tests' loops (OSU 7.4's `osu_put_latency` and its kin): for each size a
//! window made as `-w` says, and the timed loop in the synchronisation `-s` names, with rank 0
//! the origin and rank 1 the target; in the fence and PSCW modes of the latency tests the two
//! ranks take turns, as OSU's ping-pong does, and half the round trip is printed, and in the
//! bidirectional test both ranks access each other in every epoch. mpirt's epochs are
//! closures, so a fence is `fence_epoch` (a fence before and after the operations) and PSCW
//! is `start` and `post` around them.

use mpirt::collective::SystemOperation;
use mpirt::traits::*;
use mpirt::window::{Epoch, LockKind, Window};
use mpirt::Rank;

use crate::mpi::topology::SimpleCommunicator;
use crate::options::{Options, SyncMode, WindowKind};
use crate::output::row;

/// One operation of a test, issued on an epoch.
pub trait Access<T: Equivalence> {
    /// Issues the operation on `target` at `disp` in `epoch`. `spare` is memory it may lend to
    /// the epoch (a get's buffer, a fetch's result); it hands back what it did not keep.
    fn issue<'s, 'e>(
        &'s self,
        epoch: &'s Epoch<'s, 'e, T>,
        target: Rank,
        disp: usize,
        spare: &'s mut [T],
    ) -> &'s mut [T];

    /// Elements of `spare` an epoch of `operations` of this kind needs.
    fn spare(&self, operations: usize) -> usize;
}

/// `window` puts, back to back in the target's window (one for the latency test), the j-th
/// of the j-th of `window` equal pieces of `data`, as OSU's loop puts from `sbuf + j * size`.
pub struct Put<'a> {
    pub data: &'a [u8],
    pub window: usize,
}

impl Access<u8> for Put<'_> {
    fn issue<'s, 'e>(
        &'s self,
        epoch: &'s Epoch<'s, 'e, u8>,
        target: Rank,
        disp: usize,
        spare: &'s mut [u8],
    ) -> &'s mut [u8] {
        let len = self.data.len() / self.window;
        for j in 0..self.window {
            epoch.put(&self.data[j * len..][..len], target, disp + j * len);
        }
        spare
    }

    fn spare(&self, _: usize) -> usize {
        0
    }
}

/// A get of `len` bytes, whose buffer comes back when it completed.
pub struct Get(pub usize);

impl Access<u8> for Get {
    fn issue<'s, 'e>(
        &'s self,
        epoch: &'s Epoch<'s, 'e, u8>,
        target: Rank,
        disp: usize,
        spare: &'s mut [u8],
    ) -> &'s mut [u8] {
        epoch
            .rget(spare, target, disp)
            .wait()
            .expect("a get lends its buffer")
    }

    fn spare(&self, _: usize) -> usize {
        self.0
    }
}

/// `window` gets of `len` bytes, back to back from the target's window, each into its own
/// part of the spare memory, which comes back once every one completed.
pub struct Gets {
    pub len: usize,
    pub window: usize,
}

impl Access<u8> for Gets {
    fn issue<'s, 'e>(
        &'s self,
        epoch: &'s Epoch<'s, 'e, u8>,
        target: Rank,
        disp: usize,
        spare: &'s mut [u8],
    ) -> &'s mut [u8] {
        assert!(
            spare.len() >= self.len * self.window,
            "spare holds every get"
        );
        // Every piece and the whole that comes back derive from this one pointer, taken
        // once: a reborrow of `spare` would invalidate the pointers taken before it.
        let (base, whole) = (spare.as_mut_ptr(), spare.len());
        let mut requests = Vec::with_capacity(self.window);
        for j in 0..self.window {
            // SAFETY: bytes j * len .. (j + 1) * len of `spare` (asserted to hold them), apart
            // from every other piece; `spare` itself is not used again.
            let into = unsafe { std::slice::from_raw_parts_mut(base.add(j * self.len), self.len) };
            requests.push(epoch.rget(into, target, disp + j * self.len));
        }
        for request in requests {
            request.wait();
        }
        // SAFETY: all of `spare`, which the gets borrowed in parts and handed back (`wait`):
        // nothing else reaches it any more, and the next operation may lend all of it again
        // (as OSU's loop reuses its buffer).
        unsafe { std::slice::from_raw_parts_mut(base, whole) }
    }

    fn spare(&self, _: usize) -> usize {
        self.len * self.window
    }
}

/// An accumulate (sum) of `data`, or with `fetch` a get_accumulate, whose result buffer
/// comes back when it completed.
pub struct Accumulate<'a, T> {
    pub data: &'a [T],
    pub fetch: bool,
}

impl<T: Equivalence + Default + Copy> Access<T> for Accumulate<'_, T> {
    fn issue<'s, 'e>(
        &'s self,
        epoch: &'s Epoch<'s, 'e, T>,
        target: Rank,
        disp: usize,
        spare: &'s mut [T],
    ) -> &'s mut [T] {
        if !self.fetch {
            epoch.accumulate(self.data, target, disp, SystemOperation::sum());
            return spare;
        }
        epoch
            .rget_accumulate(self.data, spare, target, disp, SystemOperation::sum())
            .wait()
            .expect("a get_accumulate lends its result buffer")
    }

    fn spare(&self, _: usize) -> usize {
        if self.fetch {
            self.data.len()
        } else {
            0
        }
    }
}

/// `osu_acc_latency` (`osu_get_acc_latency` with `fetch`): the latency of accumulating each
/// size's worth of bytes, or with `-T mpi_double` of `f64`s (size / 8 of them).
pub fn accumulate_latency(world: &SimpleCommunicator, options: &Options, fetch: bool) {
    if options.doubles {
        let data = vec![1f64; options.max_size / 8];
        run::<f64, _>(
            world,
            options,
            Report::Latency,
            |size| size / 8,
            |size| Accumulate {
                data: &data[..size / 8],
                fetch,
            },
        );
    } else {
        let data = vec![1u8; options.max_size];
        run::<u8, _>(
            world,
            options,
            Report::Latency,
            |size| size,
            |size| Accumulate {
                data: &data[..size],
                fetch,
            },
        );
    }
}

/// A fetch-and-add of one 8-byte element; each lends one result element to its epoch.
pub struct FetchAndAdd(pub u64);

impl Access<u64> for FetchAndAdd {
    fn issue<'s, 'e>(
        &'s self,
        epoch: &'s Epoch<'s, 'e, u64>,
        target: Rank,
        disp: usize,
        spare: &'s mut [u64],
    ) -> &'s mut [u64] {
        let (result, rest) = spare.split_first_mut().expect("a result element per fetch");
        epoch.fetch_and_op(&self.0, result, target, disp, SystemOperation::sum());
        rest
    }

    fn spare(&self, operations: usize) -> usize {
        operations
    }
}

/// A compare-and-swap of one 8-byte element; each lends one result element to its epoch.
pub struct CompareAndSwap {
    pub value: u64,
    pub compare: u64,
}

impl Access<u64> for CompareAndSwap {
    fn issue<'s, 'e>(
        &'s self,
        epoch: &'s Epoch<'s, 'e, u64>,
        target: Rank,
        disp: usize,
        spare: &'s mut [u64],
    ) -> &'s mut [u64] {
        let (result, rest) = spare.split_first_mut().expect("a result element per swap");
        epoch.compare_and_swap(&self.value, &self.compare, result, target, disp);
        rest
    }

    fn spare(&self, operations: usize) -> usize {
        operations
    }
}

/// What a test prints per size.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Report {
    Latency,
    /// MB/s of `window` messages of the size per iteration.
    Bandwidth {
        window: usize,
    },
    /// MB/s of `window` messages of the size per iteration each way: both ranks access each
    /// other in every epoch (OSU prints twice one way's bandwidth).
    BiBandwidth {
        window: usize,
    },
}

/// Runs the test over OSU's sizes: `access(size)` is the operation of one iteration, on a
/// window of `len(size)` elements on each rank.
pub fn run<T, A>(
    world: &SimpleCommunicator,
    options: &Options,
    report: Report,
    len: impl Fn(usize) -> usize,
    access: impl Fn(usize) -> A,
) where
    T: Equivalence + Default + Copy,
    A: Access<T>,
{
    for size in options.sizes() {
        let (iterations, skip) = options.loops(size);
        let access = access(size);
        let seconds = on_window::<T, _>(world, options.window_kind, len(size), |window, disp| {
            timed(
                world,
                window,
                disp,
                options.sync,
                report,
                &access,
                iterations,
                skip,
            )
        });
        if world.rank() == 0 {
            let value = match report {
                // The fence and PSCW loops are ping-pongs: half the round trip.
                Report::Latency if matches!(options.sync, SyncMode::Fence | SyncMode::Pscw) => {
                    seconds * 1e6 / iterations as f64 / 2.0
                }
                Report::Latency => seconds * 1e6 / iterations as f64,
                Report::Bandwidth { window } => {
                    size as f64 / 1e6 * (window * iterations) as f64 / seconds
                }
                Report::BiBandwidth { window } => {
                    2.0 * size as f64 / 1e6 * (window * iterations) as f64 / seconds
                }
            };
            print!("{}", row(size, value));
        }
    }
}

/// Makes a window of `len` elements as `kind` says and runs `f` on it with the displacement
/// of the peer's memory (its address, in a dynamic window).
fn on_window<T, R>(
    world: &SimpleCommunicator,
    kind: WindowKind,
    len: usize,
    f: impl FnOnce(&Window<'_, T>, usize) -> R,
) -> R
where
    T: Equivalence + Default + Copy,
{
    let len = len.max(1);
    match kind {
        WindowKind::Allocate => f(&Window::allocate(world, len), 0),
        WindowKind::Create => {
            let mut memory = vec![T::default(); len];
            let window = Window::create(world, &mut memory[..]);
            f(&window, 0)
        }
        WindowKind::Dynamic => {
            let mut memory = vec![T::default(); len];
            let window = Window::create_dynamic(world);
            let address = window.attach(&mut memory[..]) as u64;
            let mut addresses = [0u64; 2];
            world.all_gather_into(&address, &mut addresses[..]);
            let peer = addresses[1 - world.rank() as usize] as usize;
            f(&window, peer)
        }
    }
}

/// One size's loop; returns rank 0's seconds for the timed iterations.
#[allow(clippy::too_many_arguments)]
fn timed<T: Equivalence + Default + Copy, A: Access<T>>(
    world: &SimpleCommunicator,
    window: &Window<'_, T>,
    disp: usize,
    sync: SyncMode,
    report: Report,
    access: &A,
    iterations: usize,
    skip: usize,
) -> f64 {
    let rank = world.rank();
    let peer = 1 - rank;
    let total = iterations + skip;
    let mut spare = vec![T::default(); access.spare(total)];
    let one = access.spare(1);
    world.barrier();
    let mut start = 0.0;
    let mut clock = |i: usize| {
        if i == skip {
            start = mpirt::time();
        }
    };
    let ping_pong = report == Report::Latency;
    let both = matches!(report, Report::BiBandwidth { .. });
    match sync {
        SyncMode::Lock if rank == 0 => {
            for i in 0..total {
                clock(i);
                window.lock(1, LockKind::Shared, |e| {
                    access.issue(e, 1, disp, &mut spare[..one]);
                });
            }
        }
        SyncMode::LockAll if rank == 0 => {
            for i in 0..total {
                clock(i);
                window.lock_all(|e| {
                    access.issue(e, 1, disp, &mut spare[..one]);
                });
            }
        }
        SyncMode::Flush | SyncMode::FlushLocal if rank == 0 => {
            window.lock(1, LockKind::Shared, |e| {
                let mut spare = &mut spare[..];
                for i in 0..total {
                    clock(i);
                    spare = access.issue(e, 1, disp, spare);
                    let flushed = match sync {
                        SyncMode::Flush => e.flush(1),
                        _ => e.flush_local(1),
                    };
                    flushed.expect("flush");
                }
            });
        }
        SyncMode::Fence => {
            for i in 0..total {
                clock(i);
                if rank == 0 {
                    window.fence_epoch(|e| {
                        access.issue(e, 1, disp, &mut spare[..one]);
                    });
                    if ping_pong {
                        window.fence_epoch(|_| ());
                    }
                } else {
                    window.fence_epoch(|e| {
                        if both {
                            access.issue(e, 0, disp, &mut spare[..one]);
                        }
                    });
                    if ping_pong {
                        window.fence_epoch(|e| {
                            access.issue(e, 0, disp, &mut spare[..one]);
                        });
                    }
                }
            }
        }
        SyncMode::Pscw if both => {
            for i in 0..total {
                clock(i);
                window.post(&[peer], || {
                    window.start(&[peer], |e| {
                        access.issue(e, peer, disp, &mut spare[..one]);
                    })
                });
            }
        }
        SyncMode::Pscw => {
            for i in 0..total {
                clock(i);
                if rank == 0 {
                    window.start(&[peer], |e| {
                        access.issue(e, peer, disp, &mut spare[..one]);
                    });
                    if ping_pong {
                        window.post(&[peer], || ());
                    }
                } else {
                    window.post(&[peer], || ());
                    if ping_pong {
                        window.start(&[peer], |e| {
                            access.issue(e, peer, disp, &mut spare[..one]);
                        });
                    }
                }
            }
        }
        // The target of a passive-target test waits at the barrier.
        _ => {}
    }
    let end = mpirt::time();
    world.barrier();
    end - start
}
