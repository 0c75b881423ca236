//! Shared-memory transport between ranks on one host.
//!
//! Frames travel through one single-producer, single-consumer ring per ordered pair of local
//! ranks, inside one segment under /dev/shm (its layout is described in `shm/segment.rs`). Sending and
//! receiving a small frame takes no lock, no allocation and no syscall: the only syscall on the
//! path is the futex wake, made only when the receiver has said it is asleep.
//!
//! Rendezvous data does not go through the rings: the receiver copies it straight out of the
//! sender's memory, with `memcpy` from the sender's [`PeerArena`] mapped here when the buffer
//! lies in it, else with [`read_remote`] (Cross Memory Attach). Whether CMA works between two
//! ranks is a property of the host (Yama, seccomp, containers); [`ShmTransport::probe_cma`]
//! tells the PML, which otherwise streams the data through the rings.
//!
//! A sleeping rank says how it sleeps in its `sleeping` word: on its futex (shared memory is
//! all it waits for), or in an epoll wait with other transports, where a futex cannot be
//! watched: then on its wake pipe, an anonymous pipe that a waking peer opens through /proc
//! and writes a byte into (see [`ShmTransport::wake_fd`]).

mod cma;
pub mod futex;
mod in_place;
mod peer_arena;
mod peers;
mod ring;
mod segment;
mod short_blocks;
mod sleep_barrier;
mod wake_pipe;

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{compiler_fence, fence, Ordering};
use std::time::Duration;

pub use cma::{allow_ptrace_from_peers, read_remote};
use in_place::{read_in_place, read_into, Local, Source};
pub use peer_arena::PeerArena;
pub use peers::{ShmOpening, ShmPeers};
pub use segment::unlink_segment;
use short_blocks::read_short_blocks;

use crate::nap::Nap;
use ring::{Consumer, Producer};
use segment::{RankCtl, Segment};
use sleep_barrier::SleepBarrier;
use wake_pipe::WakePipe;

/// How a rank's sleeps on its futex ended (see `Counters`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sleeps {
    pub slept: u64,
    pub woken: u64,
    /// Run to their timeout with a frame, or room, already there.
    pub missed: u64,
}

/// Values of a rank's `sleeping` word: how a peer wakes it.
const AWAKE: u32 = 0;
const ON_FUTEX: u32 = 1;
const ON_PIPE: u32 = 2;

/// How many frames one [`ShmTransport::poll`] hands out at most, so that a flooding peer
/// cannot keep the caller from its other work.
const POLL_BATCH: usize = 64;

/// Smallest and largest per-pair ring; the ring indexes by masking, so sizes are powers of two.
/// The smallest is what many ranks on a host get from their receivers' budget
/// ([`ring_bytes_for`]): a frame of it holds the largest header and 450-odd bytes of data.
const MIN_RING_BYTES: usize = 512;
const MAX_RING_BYTES: usize = 1 << 30;
const _: () = assert!(ring::max_frame(MIN_RING_BYTES) > 8 * crate::wire::MAX_HEADER_LEN);

fn valid_ring_bytes(bytes: usize) -> bool {
    bytes.is_power_of_two() && (MIN_RING_BYTES..=MAX_RING_BYTES).contains(&bytes)
}

/// The size of each of the host's rings when `local_size` ranks share it: a rank's
/// `local_size - 1` incoming rings share `receiver_bytes` (`MPIRT_SHM_RECEIVER_BYTES`), each
/// the largest power of two that fits, from `MIN_RING_BYTES` to `largest`
/// (`MPIRT_SHM_RING_BYTES`); a rank with a single peer keeps a ring of `largest`. So the
/// segment's rings take at most `local_size × receiver_bytes` (up to
/// `receiver_bytes / MIN_RING_BYTES + 1` ranks): they grow linearly with the ranks on a host,
/// where rings of one size grow with their square (128 ranks × 127 rings of 512 KiB: 8.3 GB).
/// Open MPI's shared-memory BTL bounds each process's buffers the same way (one segment a
/// process, whatever the number of peers), and keeps a per-peer buffer (a fast box) only for
/// the few peers that talk most. A `largest` that is no ring size comes back as is, for
/// [`ShmTransport::create`] to refuse by name.
pub fn ring_bytes_for(local_size: usize, largest: usize, receiver_bytes: usize) -> usize {
    if !valid_ring_bytes(largest) || local_size <= 2 {
        return largest;
    }
    let share = receiver_bytes / (local_size - 1);
    let fits = 1usize << share.max(1).ilog2();
    fits.clamp(MIN_RING_BYTES, largest)
}

/// A word with a known value whose address each rank publishes, so that a peer can check that
/// [`read_remote`] really reads this process.
static CMA_PROBE: u64 = u64::from_le_bytes(*b"cmaprobe");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    /// Data bytes of each per-pair ring, a power of two from 512 bytes to 1 GiB. The segment holds
    /// `local_size × (local_size − 1)` rings (the engine sizes them with [`ring_bytes_for`]);
    /// past 64 MiB in all (or what /dev/shm has free), only the pages a ring has used take
    /// memory.
    /// Frames much smaller than this (a quarter or less) keep sender and receiver overlapped.
    pub ring_bytes: usize,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            ring_bytes: 256 << 10,
        }
    }
}

/// This process's end of the host's shared segment.
pub struct ShmTransport {
    local_rank: usize,
    /// Indexed by peer slot: local ranks without ourselves (see `slot`).
    tx: Box<[Producer]>,
    rx: Box<[Consumer]>,
    /// Largest frame a ring carries (kept, as every send checks it).
    max_frame: usize,
    /// Slot whose ring `poll` reads first, rotating so every peer gets served.
    next_rx: usize,
    /// Futex value after our last wait: a change since means someone woke us in between.
    seen_wakes: Cell<u32>,
    /// How this rank's futex sleeps ended, for [`sleeps`](Self::sleeps).
    sleeps: Cell<Sleeps>,
    /// This rank's wake pipe, once it sleeps in an epoll wait (see `wake_fd`).
    own_pipe: Option<WakePipe>,
    /// Peers' wake pipes, by local rank, opened the first time one needs waking there.
    peer_pipes: RefCell<Box<[PeerPipe]>>,
    /// Whether a peer's wake pipe that cannot be opened is said on stderr (`--verbose`).
    says_pipe_failures: bool,
    /// How this rank orders its sleep word before its last look at the rings, and so whether
    /// it needs a fence after publishing a frame or room to a peer (`ordered_before_sleep`).
    sleep_barrier: SleepBarrier,
    /// Last, so that it is unmapped after the rings that point into it are gone.
    seg: Segment,
}

impl ShmTransport {
    /// Creates the segment `name` (a single path component, e.g. `mpirt-<jobid>-<node>`); by
    /// convention local rank 0 does this. The other ranks [`attach`](Self::attach) after a barrier with this call.
    pub fn create(
        name: &str,
        local_rank: usize,
        local_size: usize,
        cfg: &ShmConfig,
    ) -> io::Result<Self> {
        check_rank(local_rank, local_size)?;
        if !valid_ring_bytes(cfg.ring_bytes) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "shm ring size {} is not a power of two from {MIN_RING_BYTES} to {MAX_RING_BYTES}",
                    cfg.ring_bytes
                ),
            ));
        }
        let seg = Segment::create(name, local_rank, local_size, cfg.ring_bytes)?;
        Ok(Self::open(seg, local_rank))
    }

    /// Attaches to the segment `name` made by [`create`](Self::create). When every local rank
    /// has attached, the name is removed from /dev/shm; the memory lives on in the mappings.
    pub fn attach(name: &str, local_rank: usize, local_size: usize) -> io::Result<Self> {
        check_rank(local_rank, local_size)?;
        let seg = Segment::attach(name, local_rank, local_size)?;
        Ok(Self::open(seg, local_rank))
    }

    fn open(seg: Segment, local_rank: usize) -> Self {
        let n = seg.local_size();
        let size = seg.ring_bytes();
        let peers = || (0..n).filter(move |&r| r != local_rank);
        let resident = seg.rings_resident();
        let tx = peers()
            .map(|to| {
                let (ctl, data) = seg.ring(local_rank, to);
                // SAFETY: the segment maps this ring for as long as the transport (which owns
                // both) lives; ring memory was zeroed by ftruncate; and ring (me → to) is only
                // ever produced by local rank `me`, which the segment's claim made unique.
                let producer = unsafe { Producer::new(ctl, data, size) };
                if resident {
                    producer.make_resident();
                }
                producer
            })
            .collect();
        let rx = peers()
            .map(|from| {
                let (ctl, data) = seg.ring(from, local_rank);
                // SAFETY: as above; ring (from → me) is only consumed by local rank `me`.
                unsafe { Consumer::new(ctl, data, size) }
            })
            .collect();
        let me = seg.rank_ctl(local_rank);
        me.probe_addr
            .store(&CMA_PROBE as *const u64 as u64, Ordering::Release);
        let seen = me.futex.load(Ordering::Acquire);
        ShmTransport {
            local_rank,
            tx,
            rx,
            max_frame: ring::max_frame(size),
            next_rx: 0,
            seen_wakes: Cell::new(seen),
            sleeps: Cell::new(Sleeps::default()),
            own_pipe: None,
            peer_pipes: RefCell::new((0..n).map(|_| PeerPipe::Unopened).collect()),
            says_pipe_failures: false,
            sleep_barrier: SleepBarrier::Fence,
            seg,
        }
    }

    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    pub fn local_size(&self) -> usize {
        self.seg.local_size()
    }

    /// Largest frame [`try_send`](Self::try_send) accepts.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Data bytes of each of the segment's rings.
    pub fn ring_bytes(&self) -> usize {
        self.seg.ring_bytes()
    }

    fn slot(&self, peer: usize) -> usize {
        peer - usize::from(peer > self.local_rank)
    }

    /// Sends `header` then `payload` as one frame to local rank `to`, copying each once,
    /// straight into the ring. `Ok(false)`: the ring is full; nothing was sent, so make
    /// progress (drain our own rings) and try again.
    // Inline: see `Core::send_direct`, which calls it on every small send.
    #[inline]
    pub fn try_send(&mut self, to: usize, header: &[u8], payload: &[u8]) -> io::Result<bool> {
        self.send_frame(to, header.len() + payload.len(), |ring| {
            ring.try_write(header, payload)
        })
    }

    /// [`try_send`](Self::try_send) of a payload of `len` bytes that `fill` writes at the
    /// pointer it is given, in the ring: a non-contiguous buffer packed once, into its frame.
    pub fn try_send_packed(
        &mut self,
        to: usize,
        header: &[u8],
        len: usize,
        fill: impl FnOnce(*mut u8),
    ) -> io::Result<bool> {
        self.send_frame(to, header.len() + len, |ring| {
            ring.try_write_with(header, len, fill)
        })
    }

    /// Checks a frame of `len` bytes to local rank `to`, has `write` put it in that rank's
    /// ring, and wakes the rank if it sleeps.
    #[inline(always)]
    fn send_frame(
        &mut self,
        to: usize,
        len: usize,
        write: impl FnOnce(&mut Producer) -> bool,
    ) -> io::Result<bool> {
        if to >= self.local_size() || to == self.local_rank {
            return Err(self.no_such_peer(to));
        }
        if len > self.max_frame {
            return Err(self.too_long(len));
        }
        // Looked up here, where the check above covers its range check: after the fence
        // below, the segment's length would be read and checked again.
        let peer = self.seg.rank_ctl(to);
        let slot = self.slot(to);
        if !write(&mut self.tx[slot]) {
            return Ok(false);
        }
        // Either the receiver's ring check sees this frame, or we see its sleeping flag and
        // wake it.
        self.ordered_before_sleep(peer);
        let sleeping = peer.sleeping.load(Ordering::Relaxed);
        if sleeping != AWAKE {
            self.wake_sleeper(to, sleeping);
        }
        Ok(true)
    }

    // `try_send`'s refusals are built out of line, so that the send inlined into the
    // engine's stays small enough for its callers to inline; and by one function each, so
    // that its checks stay branches instead of being merged into one condition.

    /// Why `try_send` refused a frame to local rank `to`.
    #[cold]
    #[inline(never)]
    fn no_such_peer(&self, to: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "shm send from local rank {} to {to} (local size {})",
                self.local_rank,
                self.local_size()
            ),
        )
    }

    /// Why `try_send` refused a frame of `len` bytes.
    #[cold]
    #[inline(never)]
    fn too_long(&self, len: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "shm frame of {len} bytes exceeds max_frame {}",
                self.max_frame
            ),
        )
    }

    /// Has this rank run the host-wide barrier when it sleeps (see `sleep_barrier.rs`), where
    /// the kernel allows and `local_size` ranks on the host, none sharing a core
    /// (`shares_cores`), make that cheaper than a fence per message; then peers that do too
    /// publish frames and room to it without one. Call once, before the first wait: a rank
    /// that said it runs the barrier must run it in every sleep after, since peers that read
    /// its word no longer fence.
    pub fn use_sleep_barrier(&mut self, shares_cores: bool) {
        debug_assert_eq!(self.sleep_barrier, SleepBarrier::Fence, "chosen twice");
        self.sleep_barrier = SleepBarrier::for_host(self.local_size(), shares_cores);
        if self.sleep_barrier == SleepBarrier::Global {
            self.seg
                .rank_ctl(self.local_rank)
                .sleep_barrier
                .store(1, Ordering::Relaxed);
        }
    }

    /// Orders what this rank just published to `peer` (a frame, or room in its ring) before
    /// the loads that follow of whether `peer` sleeps. Pairs with `announce_sleep`: where
    /// both ranks use the barrier, `peer`'s sleep runs it and program order is enough here
    /// (as long as the compiler keeps it); else a fence.
    #[inline(always)]
    fn ordered_before_sleep(&self, peer: &RankCtl) {
        if self.sleep_barrier == SleepBarrier::Global
            && peer.sleep_barrier.load(Ordering::Relaxed) != 0
        {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// Hands received frames to `f(from_local_rank, frame)`, at most a bounded batch, in order
    /// per sender; returns how many. The frame borrows the ring and is released after `f`.
    pub fn poll(&mut self, mut f: impl FnMut(usize, &[u8])) -> usize {
        let peers = self.rx.len();
        let mut total = 0;
        for k in 0..peers {
            let mut slot = self.next_rx + k;
            if slot >= peers {
                slot -= peers;
            }
            let from = slot + usize::from(slot >= self.local_rank);
            let before = self.rx[slot].position();
            let got = self.rx[slot].drain(POLL_BATCH - total, |frame| f(from, frame));
            // Room was made whenever the position moved, also by stepping over a wrap marker
            // alone (no frame), which is what a sender blocked on a record too long for the
            // lap's end waits for.
            if self.rx[slot].position() != before {
                // A sender that found this ring full (and said so before sleeping) either
                // sees the room we just made, or we see it blocked and asleep and wake it.
                let sender = self.seg.rank_ctl(from);
                self.ordered_before_sleep(sender);
                if self.rx[slot].producer_blocked() {
                    let sleeping = sender.sleeping.load(Ordering::Relaxed);
                    if sleeping != AWAKE {
                        self.wake_sleeper(from, sleeping);
                    }
                }
            }
            total += got;
            if total == POLL_BATCH {
                self.next_rx = if slot + 1 == peers { 0 } else { slot + 1 };
                return total;
            }
        }
        if peers > 0 {
            self.next_rx = if self.next_rx + 1 == peers {
                0
            } else {
                self.next_rx + 1
            };
        }
        total
    }

    /// Whether [`poll`](Self::poll) has anything to do now; cheaper than calling it, for a
    /// rank that spins waiting.
    #[inline]
    pub fn has_records(&self) -> bool {
        self.rx.iter().any(Consumer::has_record)
    }

    /// Whether [`poll`](Self::poll) would find a frame now.
    pub fn has_frames(&self) -> bool {
        self.rx.iter().any(Consumer::has_frame)
    }

    /// Sleeps until a frame may have arrived, a ring that [`try_send`](Self::try_send) found full
    /// may have room, [`wake`](Self::wake) was called for this rank (also before this call, since
    /// the previous `wait`), or `timeout` passed. Spurious returns happen; callers poll, retry
    /// and decide.
    pub fn wait(&self, timeout: Duration) {
        let futex = &self.seg.rank_ctl(self.local_rank).futex;
        let seen = futex.load(Ordering::Acquire);
        if !self.announce_sleep(ON_FUTEX) {
            // A wake after we read `seen` changed the word, so this returns at once.
            let timed_out = futex::wait(futex, seen, timeout);
            self.count_sleep(seen, timed_out);
        }
        self.end_sleep();
    }

    /// [`wait`](Self::wait)'s sleep, for a thread that sleeps apart from the transport
    /// (`crate::nap`): announces it as `wait` does and returns it, or `None` where something
    /// is there already (the sleep is over then). [`end_nap`](Self::end_nap) follows a sleep.
    pub fn begin_nap(&self) -> Option<Nap> {
        if self.announce_sleep(ON_FUTEX) {
            self.end_sleep();
            return None;
        }
        // The value `announce_sleep` found unchanged since the last sleep: a wake after it
        // changed the word, so the sleep returns at once.
        let futex = &self.seg.rank_ctl(self.local_rank).futex;
        Some(Nap::on_futex(futex.as_ptr(), self.seen_wakes.get()))
    }

    /// Ends the sleep of [`begin_nap`](Self::begin_nap), counted as [`wait`](Self::wait)'s.
    pub fn end_nap(&self, timed_out: bool) {
        self.count_sleep(self.seen_wakes.get(), timed_out);
        self.end_sleep();
    }

    /// Counts a sleep on the futex that started at value `seen`: woken by a peer, or run to
    /// its timeout with something already there that should have woken it. The second is
    /// told from a wake in flight (a sender that saw this rank asleep and has yet to bump
    /// the word) by the word, read after the frames.
    fn count_sleep(&self, seen: u32, timed_out: bool) {
        let mut sleeps = self.sleeps.get();
        sleeps.slept += 1;
        let waiting = timed_out && (self.has_frames() || self.tx.iter().any(Producer::space_freed));
        let futex = &self.seg.rank_ctl(self.local_rank).futex;
        if futex.load(Ordering::Acquire) != seen {
            sleeps.woken += 1;
        } else if waiting {
            sleeps.missed += 1;
        }
        self.sleeps.set(sleeps);
    }

    /// How this rank's sleeps on its futex ended so far.
    pub fn sleeps(&self) -> Sleeps {
        self.sleeps.get()
    }

    /// Says that this rank is about to sleep `how` (so peers wake it), then looks once more;
    /// returns whether something is there already (or a wake came since the last sleep): then
    /// it must not sleep. Either way [`end_sleep`](Self::end_sleep) follows.
    fn announce_sleep(&self, how: u32) -> bool {
        let me = self.seg.rank_ctl(self.local_rank);
        if me.futex.load(Ordering::Acquire) != self.seen_wakes.get() {
            return true;
        }
        // Release: a peer that sees ON_PIPE sees the wake pipe's tag, published before.
        me.sleeping.store(how, Ordering::Release);
        // Pairs with `ordered_before_sleep` in `try_send` and `poll` (see there).
        match self.sleep_barrier {
            SleepBarrier::Fence => fence(Ordering::SeqCst),
            // Peers that skipped their fence may have missed the sleep word: a rank that
            // cannot order it before their frames must not sleep.
            SleepBarrier::Global => {
                if !sleep_barrier::global() {
                    return true;
                }
            }
        }
        self.has_frames() || self.tx.iter().any(Producer::space_freed)
    }

    fn end_sleep(&self) {
        let me = self.seg.rank_ctl(self.local_rank);
        me.sleeping.store(AWAKE, Ordering::Relaxed);
        self.seen_wakes.set(me.futex.load(Ordering::Acquire));
        if let Some(pipe) = &self.own_pipe {
            pipe.drain();
        }
    }

    /// The fd a rank that waits on other transports too sleeps on: this rank's wake pipe,
    /// made on the first call, where [`before_wait`](Self::before_wait) makes peers wake
    /// it. Peers open it through /proc when they first wake this rank there.
    pub fn wake_fd(&mut self) -> io::Result<RawFd> {
        if self.own_pipe.is_none() {
            let (pipe, tag) = WakePipe::create()?;
            // Published before this rank says it sleeps on the pipe, with a Release store
            // (see `announce_sleep`): a peer that sees the one sees the other (`write_pipe`).
            self.seg
                .rank_ctl(self.local_rank)
                .wake_tag
                .store(tag, Ordering::Release);
            self.own_pipe = Some(pipe);
        }
        Ok(self.own_pipe.as_ref().map_or(-1, WakePipe::fd))
    }

    /// Before an epoll wait on [`wake_fd`](Self::wake_fd): returns whether something is there
    /// already (then do not sleep). [`after_wait`](Self::after_wait) follows either way.
    pub fn before_wait(&self) -> bool {
        self.announce_sleep(if self.own_pipe.is_some() {
            ON_PIPE
        } else {
            ON_FUTEX
        })
    }

    pub fn after_wait(&self) {
        self.end_sleep();
    }

    /// Makes local rank `local_rank`'s current or next [`wait`](Self::wait) return.
    pub fn wake(&self, local_rank: usize) {
        let ctl = self.seg.rank_ctl(local_rank);
        // SeqCst bump then SeqCst load: a waiter either has not read the futex word yet (and
        // sees the bump), or set `sleeping` before our load (and we make the syscall).
        ctl.futex.fetch_add(1, Ordering::SeqCst);
        match ctl.sleeping.load(Ordering::SeqCst) {
            ON_FUTEX => futex::wake(&ctl.futex),
            ON_PIPE => self.write_pipe(local_rank),
            _ => {}
        }
    }

    /// Wakes local rank `local`, which said it sleeps `how`.
    #[cold]
    #[inline(never)]
    fn wake_sleeper(&self, local: usize, how: u32) {
        let ctl = self.seg.rank_ctl(local);
        ctl.futex.fetch_add(1, Ordering::Release);
        if how == ON_PIPE {
            self.write_pipe(local);
        } else {
            futex::wake(&ctl.futex);
        }
    }

    /// Says on stderr, once per peer, a peer's wake pipe that cannot be opened (`--verbose`).
    pub fn say_pipe_failures(&mut self, on: bool) {
        self.says_pipe_failures = on;
    }

    /// Writes a byte into `local`'s wake pipe, opening it the first time under the tag that
    /// rank published. A pipe that cannot be opened (its rank is gone, or it is not the job's,
    /// or /proc does not show its process: another PID namespace, `hidepid`) is remembered,
    /// never tried again, and said once under `--verbose`; its rank's sleep has a timeout
    /// anyway. A write that fails only means its rank needs no waking.
    fn write_pipe(&self, local: usize) {
        let mut pipes = self.peer_pipes.borrow_mut();
        let pipe = &mut pipes[local];
        if let PeerPipe::Unopened = pipe {
            // After the load of `sleeping` that said ON_PIPE: pairs with its Release store.
            fence(Ordering::Acquire);
            let ctl = self.seg.rank_ctl(local);
            let tag = ctl.wake_tag.load(Ordering::Relaxed);
            let pid = ctl.pid.load(Ordering::Relaxed);
            if tag != 0 && pid != 0 {
                *pipe = match WakePipe::open(pid, tag) {
                    Ok(opened) => PeerPipe::Open(opened),
                    Err(e) => {
                        if self.says_pipe_failures {
                            eprintln!(
                                "mpirt: shm local rank {}: cannot wake local rank {local} \
                                 through its wake pipe ({e}); its waits end by their timeout",
                                self.local_rank
                            );
                        }
                        PeerPipe::Unreachable
                    }
                };
            }
        }
        if let PeerPipe::Open(pipe) = pipe {
            let _ = pipe.signal();
        }
    }

    /// Process id of a local rank that has created or attached, for [`read_remote`].
    pub fn peer_pid(&self, local_rank: usize) -> Option<i32> {
        match self.seg.rank_ctl(local_rank).pid.load(Ordering::Acquire) {
            0 => None,
            pid => Some(pid),
        }
    }

    /// Checks that [`read_remote`] can read `local_rank`'s memory, by reading a word whose
    /// address and value that rank published. Call after every rank has attached; an error
    /// says why single-copy reads are unavailable.
    pub fn probe_cma(&self, local_rank: usize) -> io::Result<()> {
        let ctl = self.seg.rank_ctl(local_rank);
        // The pid is claimed before the probe address is published.
        let addr = ctl.probe_addr.load(Ordering::Acquire);
        let pid = self
            .peer_pid(local_rank)
            .filter(|_| addr != 0)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!("shm local rank {local_rank} has not attached"),
                )
            })?;
        let mut word = [0u8; 8];
        read_remote(pid, addr, &mut word)?;
        if u64::from_ne_bytes(word) != CMA_PROBE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("remote read from pid {pid} returned the wrong bytes"),
            ));
        }
        Ok(())
    }
}

/// A peer's wake pipe as this rank knows it.
enum PeerPipe {
    /// Not needed yet, or not published yet.
    Unopened,
    Open(WakePipe),
    /// Could not be opened: not tried again.
    Unreachable,
}

// SAFETY: the transport owns its mapping and ring halves; nothing in it is tied to the thread
// that made it (the futex and rings are process-shared anyway). `Cell` keeps it !Sync.
unsafe impl Send for ShmTransport {}

fn check_rank(local_rank: usize, local_size: usize) -> io::Result<()> {
    if local_size == 0 || local_rank >= local_size || local_size > u32::MAX as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("shm local rank {local_rank} of {local_size}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// How many of the pages of the `len` bytes at `addr` (page aligned) are in memory.
    fn resident_pages(addr: *mut u8, len: usize) -> usize {
        let mut pages = vec![0u8; len.div_ceil(PAGE)];
        // SAFETY: `addr..addr + len` lies in a live mapping (a ring of the caller's segment),
        // and `pages` holds the one byte per page that mincore writes.
        let rc = unsafe { libc::mincore(addr.cast(), len, pages.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
        pages.iter().filter(|&&p| p & 1 != 0).count()
    }

    #[test]
    fn outgoing_rings_are_resident_only_while_a_hosts_rings_are_few() {
        // 6 rings of 64 KiB, then 72 of 1 MiB (past the 64 MiB the host's rings may take).
        for (local_size, ring_bytes) in [(3, 64 << 10), (9, 1 << 20)] {
            let name = format!("mpirt-unit-{}-resident-{local_size}", std::process::id());
            let t = ShmTransport::create(&name, 0, local_size, &ShmConfig { ring_bytes });
            unlink_segment(&name).unwrap();
            let t = t.unwrap();
            // The first fits the 64 MiB limit (and this host's /dev/shm), the second not.
            let expected = if local_size == 3 {
                ring_bytes / PAGE
            } else {
                0
            };
            assert_eq!(t.seg.rings_resident(), expected > 0);
            for peer in 1..local_size {
                let (_, outgoing) = t.seg.ring(0, peer);
                assert_eq!(resident_pages(outgoing, ring_bytes), expected, "to {peer}");
                // The peer makes its own outgoing rings resident; it never attached.
                let (_, incoming) = t.seg.ring(peer, 0);
                assert_eq!(resident_pages(incoming, ring_bytes), 0, "from {peer}");
            }
        }
    }

    #[test]
    fn a_rank_waiting_in_epoll_is_woken_through_its_wake_pipe() {
        use crate::transport::epoll::{interest, Epoll};
        let name = format!("mpirt-unit-{}-wake-pipe", std::process::id());
        let mut sleeper = ShmTransport::create(&name, 0, 2, &ShmConfig::default()).unwrap();
        // The last rank to attach removes the segment's name.
        let mut waker = ShmTransport::attach(&name, 1, 2).unwrap();
        let mut epoll = Epoll::new().unwrap();
        epoll
            .add(&sleeper.wake_fd().unwrap(), 7, interest(false))
            .unwrap();
        assert!(!sleeper.before_wait(), "nothing sent yet");
        // The peer sends once the sleeper said it sleeps on its pipe (it may already be in
        // epoll_wait or not yet: the pipe stays readable either way).
        let sender = std::thread::spawn(move || {
            assert!(waker.try_send(0, b"hello", &[]).unwrap());
            waker
        });
        let mut ready = Vec::new();
        epoll.wait(Duration::from_secs(60), &mut ready).unwrap();
        sleeper.after_wait();
        let _waker = sender.join().unwrap();
        assert!(
            ready.iter().any(|r| r.token == 7 && r.readable),
            "the wait ended without the wake pipe being readable: {ready:?}"
        );
        let mut got = Vec::new();
        sleeper.poll(|from, frame| got.push((from, frame.to_vec())));
        assert_eq!(got, vec![(1, b"hello".to_vec())]);
        // Drained: a second wait with nothing sent finds the pipe quiet.
        assert!(!sleeper.before_wait());
        epoll.wait(Duration::ZERO, &mut ready).unwrap();
        sleeper.after_wait();
        assert!(ready.is_empty(), "{ready:?}");
    }

    #[test]
    fn a_rank_that_sleeps_with_the_barrier_is_woken_by_every_frame() {
        let name = format!("mpirt-unit-{}-sleep-barrier", std::process::id());
        let mut sleeper = ShmTransport::create(&name, 0, 2, &ShmConfig::default()).unwrap();
        let mut sender = ShmTransport::attach(&name, 1, 2).unwrap();
        sleeper.use_sleep_barrier(true);
        assert_eq!(
            sleeper.sleep_barrier,
            SleepBarrier::Fence,
            "ranks share cores"
        );
        sleeper.use_sleep_barrier(false);
        sender.use_sleep_barrier(false);
        if sleeper.sleep_barrier == SleepBarrier::Fence {
            eprintln!("skipped: this kernel refuses membarrier's global expedited registration");
            return;
        }
        assert_eq!(sender.sleep_barrier, SleepBarrier::Global);
        // Frames sent while the sleeper is about to sleep, sleeping, or between two sleeps,
        // with no fence on the sender: each wait must end by a wake or by the frame seen, never
        // by running to its timeout with a frame there (a lost wake-up).
        const FRAMES: u32 = 2000;
        let (tx, rx) = std::sync::mpsc::channel::<u32>();
        let sending = std::thread::spawn(move || {
            for i in 0..FRAMES {
                // Sent once the sleeper asks, after a pause of varying length.
                rx.recv().unwrap();
                for _ in 0..(i * 7919) % 3000 {
                    std::hint::spin_loop();
                }
                assert!(sender.try_send(0, &i.to_le_bytes(), &[]).unwrap());
            }
            sender
        });
        for i in 0..FRAMES {
            tx.send(i).unwrap();
            let mut got = None;
            while got.is_none() {
                sleeper.wait(Duration::from_secs(20));
                sleeper.poll(|_, frame| got = Some(frame.to_vec()));
            }
            assert_eq!(got.unwrap(), i.to_le_bytes());
        }
        let _sender = sending.join().unwrap();
        let sleeps = sleeper.sleeps();
        assert_eq!(sleeps.missed, 0, "{sleeps:?}");
        assert!(sleeps.slept > 0, "the sleeper never slept: {sleeps:?}");
    }

    #[test]
    fn a_wake_pipe_that_cannot_be_opened_is_not_tried_again() {
        let name = format!("mpirt-unit-{}-unreachable-pipe", std::process::id());
        let mut sleeper = ShmTransport::create(&name, 0, 2, &ShmConfig::default()).unwrap();
        let waker = ShmTransport::attach(&name, 1, 2).unwrap();
        let tag = sleeper.seg.rank_ctl(0).wake_tag.load(Ordering::Relaxed);
        assert_eq!(tag, 0, "no pipe yet");
        sleeper.wake_fd().unwrap();
        let ctl = sleeper.seg.rank_ctl(0);
        let tag = ctl.wake_tag.load(Ordering::Relaxed);
        // A descriptor number this process has not open: as a pipe /proc does not show.
        ctl.wake_tag.store(tag | 0xffff << 32, Ordering::Relaxed);
        assert!(!sleeper.before_wait(), "nothing sent yet");
        waker.wake(0);
        assert!(matches!(
            waker.peer_pipes.borrow()[0],
            PeerPipe::Unreachable
        ));
        // Before, every wake tried again (two syscalls and a path each); now the pipe,
        // published right, stays untried.
        ctl.wake_tag.store(tag, Ordering::Relaxed);
        waker.wake(0);
        assert!(matches!(
            waker.peer_pipes.borrow()[0],
            PeerPipe::Unreachable
        ));
        sleeper.after_wait();
    }
}
