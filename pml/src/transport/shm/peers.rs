//! The shared-memory transport as the engine sees it: the host's segment with the ranks on
//! this host, their processes for single-copy reads (CMA) and their shared arenas, and the
//! wire-up that sets all of that up.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{
    allow_ptrace_from_peers, read_in_place, read_into, read_remote, read_short_blocks,
    ring_bytes_for, Local, PeerArena, ShmConfig, ShmTransport, Source,
};
use crate::blocks::{self, Blocks, PackedRange};
use crate::config::TransportChoice;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::freed_memory;
use crate::nap::NapStart;
use crate::pml_api::{Counters, EngineError};
use crate::shared_arena::{self, ArenaInfo};
use crate::transport::{BlocksOffer, Caps, Exposure, Job, Peer, Reading, Sent, Sink, Transport};
use crate::wire::RemoteKey;

/// No local rank: a world rank this transport does not carry.
const NOT_LOCAL: u32 = u32::MAX;

/// Wire-up between the first and second fence: published, the segment made by the leader.
pub struct ShmOpening {
    /// World rank of each local rank.
    local_ranks: Vec<Rank>,
    my_local: usize,
    name: String,
    /// The segment, made here when this rank leads the host, else attached in `connect`.
    created: Option<ShmTransport>,
    own_arena: Result<ArenaInfo, String>,
    ptrace_allowed: io::Result<()>,
}

/// The shared-memory transport, connected.
pub struct ShmPeers {
    seg: ShmTransport,
    /// Local rank of each world rank (`NOT_LOCAL` where none).
    local_of: Box<[u32]>,
    local_ranks: Vec<Rank>,
    name: String,
    /// Process of each local rank, for CMA reads.
    pids: Vec<i32>,
    /// Peers' shared arenas, by local rank.
    arenas: Vec<Option<PeerArena>>,
    own_arena: Result<ArenaInfo, String>,
    ptrace_allowed: io::Result<()>,
    /// Whether this rank can read its peers' memory (found out in `finish`).
    cma: io::Result<()>,
    arena_note: Option<String>,
    arena_stopped: bool,
    /// The eager limit of sends from our own shared arena, while the peers read it: a
    /// rendezvous from there is one memcpy by the receiver, cheaper than eager's two copies
    /// for all but small messages (see `EngineConfig::shm_arena_eager_limit`).
    arena_eager_limit: Option<usize>,
    eager_limit: usize,
    single_copy: bool,
    arena_wanted: usize,
    /// Successful remote reads whose bytes all came by memcpy from the peer's mapped arena,
    /// not by `process_vm_readv` (`Counters::mapped_reads`).
    mapped_reads: u64,
    /// Successful rendezvous reads of non-contiguous sends in place (`expose_blocks`).
    in_place_reads: u64,
    /// Successful rendezvous reads straight into a receive's blocks (`read_into_blocks`).
    block_reads: u64,
    /// Of those, the reads into short blocks, by their copy loops (`read_short_blocks`).
    short_block_reads: u64,
    /// The shortest mean block read in place, a copy or an iovec a block: a send's outside
    /// the arena (by process_vm_readv), a receive's (see
    /// `EngineConfig::shm_in_place_min_block`).
    in_place_min_block: usize,
    /// Of a receive's blocks shorter than that, the shortest mean block (the send's too) read
    /// a memcpy a block from a peer's arena (`EngineConfig::shm_arena_min_block`).
    arena_min_block: usize,
    /// Where reads into short blocks pass a window at a time (`transport::scratch`, made at
    /// the first that needs one).
    scratch: Box<[u8]>,
}

impl ShmOpening {
    /// Whether this transport will carry `rank` (shares this rank's host).
    pub fn carries(&self, rank: Rank) -> bool {
        self.local_ranks.contains(&rank)
    }

    /// Publishes this rank's shared arena and, on the host's first rank, makes the segment;
    /// `None` when no other rank shares the host (or TCP or verbs was asked for).
    pub fn open(job: &mut Job) -> Result<Option<ShmOpening>, EngineError> {
        let config = &job.config;
        if config.transport == TransportChoice::Shm {
            if let Some(elsewhere) = job.hosts.iter().position(|h| h != job.host()) {
                return Err(EngineError::Config(format!(
                    "MPIRT_TRANSPORT=shm, but rank {elsewhere} runs on host '{}' and this rank \
                     on '{}': shared memory reaches only ranks on one host (use auto or tcp)",
                    job.hosts[elsewhere],
                    job.host()
                )));
            }
        }
        if matches!(
            config.transport,
            TransportChoice::Tcp | TransportChoice::Verbs | TransportChoice::Ofi
        ) {
            return Ok(None);
        }
        let local_ranks: Vec<Rank> = (0..job.size)
            .filter(|&r| job.hosts[r as usize] == job.host())
            .collect();
        let n_local = local_ranks.len();
        if n_local < 2 {
            return Ok(None);
        }
        // Peers read our memory directly (single-copy rendezvous); Yama's ptrace_scope 1
        // forbids that unless we allow it first. Failure only means the copy fallback.
        let ptrace_allowed = allow_ptrace_from_peers();
        let my_local = local_ranks
            .iter()
            .position(|&r| r == job.rank)
            .ok_or_else(|| EngineError::Config("this rank is not on its own host".into()))?;
        // Published before the fences, read once every rank has passed them.
        let own_arena = activate_arena(job, n_local);
        let wire = own_arena.as_ref().map(|a| a.to_wire()).unwrap_or_default();
        job.put(&format!("pml.arena.{}", job.rank), wire.as_bytes())?;
        // The leader creates the segment, the others attach once it exists (after the
        // fence), and the next fence makes sure every rank has attached (and so published
        // its pid) before anyone probes.
        let name = format!("mpirt-{}-{}", job.job_id, local_ranks[0]);
        let created = if my_local == 0 {
            let shm_config = ShmConfig {
                ring_bytes: ring_bytes_for(
                    n_local,
                    job.config.shm_ring_bytes,
                    job.config.shm_receiver_bytes,
                ),
            };
            Some(
                ShmTransport::create(&name, 0, n_local, &shm_config)
                    .map_err(|e| EngineError::Transport(format!("creating {name}: {e}")))?,
            )
        } else {
            None
        };
        Ok(Some(ShmOpening {
            local_ranks,
            my_local,
            name,
            created,
            own_arena,
            ptrace_allowed,
        }))
    }

    /// Attaches to the segment (the leader made it before the fence); carries the ranks of
    /// this host.
    pub fn connect(self, job: &mut Job) -> Result<ShmPeers, EngineError> {
        let n_local = self.local_ranks.len();
        let mut seg = match self.created {
            Some(seg) => seg,
            None => ShmTransport::attach(&self.name, self.my_local, n_local)
                .map_err(|e| EngineError::Transport(format!("attaching {}: {e}", self.name)))?,
        };
        seg.say_pipe_failures(job.config.verbose);
        seg.use_sleep_barrier(crate::config::shares_cores(n_local));
        let mut local_of = vec![NOT_LOCAL; job.size as usize].into_boxed_slice();
        for (local, &r) in self.local_ranks.iter().enumerate() {
            local_of[r as usize] = local as u32;
        }
        Ok(ShmPeers {
            seg,
            local_of,
            local_ranks: self.local_ranks,
            name: self.name,
            pids: Vec::new(),
            arenas: (0..n_local).map(|_| None).collect(),
            own_arena: self.own_arena,
            ptrace_allowed: self.ptrace_allowed,
            cma: Err(io::Error::other("not probed yet")),
            arena_note: None,
            arena_stopped: false,
            arena_eager_limit: None,
            eager_limit: job.config.shm_eager_limit,
            single_copy: job.config.single_copy,
            arena_wanted: job.config.shm_arena_eager_limit,
            mapped_reads: 0,
            in_place_reads: 0,
            block_reads: 0,
            short_block_reads: 0,
            in_place_min_block: job.config.shm_in_place_min_block,
            arena_min_block: job.config.shm_arena_min_block,
            scratch: Box::default(),
        })
    }
}

impl ShmPeers {
    /// The ranks this transport carries, this one included.
    pub fn ranks(&self) -> &[Rank] {
        &self.local_ranks
    }

    /// Maps the arena of every other local rank that published one; says why when one is
    /// missing (its messages then go by process_vm_readv), and whether one published could
    /// not be mapped.
    fn map_peer_arenas(&mut self, job: &mut Job) -> Result<(Option<String>, bool), EngineError> {
        let mut note = None;
        let mut unreadable = false;
        for (local, &r) in self.local_ranks.iter().enumerate() {
            if r == job.rank {
                continue;
            }
            let wire = job.get(r, &format!("pml.arena.{r}"))?;
            let wire = String::from_utf8_lossy(&wire);
            let mapped = match ArenaInfo::from_wire(&wire) {
                Some(info) => PeerArena::map(&info).map_err(|e| {
                    unreadable = true;
                    format!("rank {r}: {e}")
                }),
                None => Err(format!("rank {r} has none")),
            };
            match mapped {
                Ok(a) => self.arenas[local] = Some(a),
                Err(why) => note = note.or(Some(why)),
            }
        }
        Ok((note, unreadable))
    }

    fn rendezvous_text(&self) -> String {
        match (&self.cma, &self.ptrace_allowed) {
            (Ok(()), _) => match &self.arena_note {
                None => format!(
                    "memcpy from the sender's shared arena ({} MiB of address space) for heap \
                     blocks of {} KiB or more, else single copy (process_vm_readv)",
                    self.own_arena.as_ref().map_or(0, |a| a.len >> 20),
                    shared_arena::ARENA_MIN_BYTES >> 10
                ),
                Some(why) => format!("single copy (process_vm_readv); no shared arena: {why}"),
            },
            (Err(e), Ok(())) => format!("pipelined copy through the segment ({e})"),
            (Err(e), Err(p)) => {
                format!("pipelined copy through the segment ({e}; PR_SET_PTRACER: {p})")
            }
        }
    }
}

/// Activates this process's shared arena (see `shared_arena`) when the configuration and the
/// global allocator allow; the error says why not, for `--verbose`.
fn activate_arena(job: &Job, n_local: usize) -> Result<ArenaInfo, String> {
    if !job.config.single_copy || !job.config.shared_arena {
        return Err("turned off by MPIRT_SHM_SINGLE_COPY=0 or MPIRT_SHM_ARENA=0".into());
    }
    // Past this many ranks on a host the program's large blocks stay private. In the arena
    // they would all be shared memory (an all-to-all's buffers hold n blocks a rank: 128 ranks
    // of 32 KiB blocks put 1 GB there, Open MPI 43 MB), every rank would map every other's
    // (n(n - 1) mappings), and such all-to-alls ran slower from the arena than by
    // process_vm_readv on 2 CPUs (osu-benches/REPORT.md, "Many ranks: no shared arena").
    let most = job.config.shm_arena_max_ranks;
    if n_local > most {
        return Err(format!(
            "{n_local} ranks share this host, more than MPIRT_SHM_ARENA_MAX_RANKS ({most})"
        ));
    }
    if !freed_memory::installed() {
        return Err("the global allocator is not mpirt::TrackingAllocator".into());
    }
    let len = shared_arena::arena_bytes(shared_arena::address_space_limit(), n_local)?;
    shared_arena::GLOBAL
        .activate(len)
        .map_err(|e| e.to_string())
}

fn send_failed(peer: Rank, e: io::Error) -> PmlError {
    PmlError::Protocol {
        peer,
        what: format!("shared-memory send failed: {e}").into(),
    }
}

impl Transport for ShmPeers {
    fn finish(&mut self, job: &mut Job) -> Result<(), EngineError> {
        let my_local = self.seg.local_rank();
        for (local, &r) in self.local_ranks.iter().enumerate() {
            let pid = self.seg.peer_pid(local).ok_or_else(|| {
                EngineError::Transport(format!("rank {r} did not attach to {}", self.name))
            })?;
            self.pids.push(pid);
        }
        // Whether a rank may read another's memory is a property of the host (Yama,
        // seccomp, containers), so one neighbour speaks for all.
        self.cma = if self.single_copy {
            self.seg.probe_cma(if my_local == 0 { 1 } else { 0 })
        } else {
            Err(io::Error::other("turned off by MPIRT_SHM_SINGLE_COPY=0"))
        };
        // The arena path sits on top of CMA: buffers outside arenas still need it.
        let unreadable = match &self.cma {
            Ok(()) => {
                let (mapped, unreadable) = self.map_peer_arenas(job)?;
                self.arena_note = self.own_arena.clone().err().or(mapped);
                unreadable
            }
            Err(_) => true,
        };
        // Per host, like CMA: when this rank cannot read its peers' arenas (a peer that has
        // none may still read ours), they cannot read its own either, and its large blocks
        // would pay the arena's costs for nothing.
        self.arena_stopped = self.own_arena.is_ok() && unreadable;
        if self.arena_stopped {
            shared_arena::GLOBAL.stop_serving();
        } else if self.own_arena.is_ok() && self.cma.is_ok() {
            self.arena_eager_limit = Some(self.arena_wanted.min(self.eager_limit));
        }
        Ok(())
    }

    fn caps(&self) -> Caps {
        Caps {
            eager_limit: self.eager_limit,
            max_frame: self.seg.max_frame(),
            remote_read: self.cma.is_ok(),
            remote_write: false,
            rma_by_default: false,
            atomics: false,
            sends_complete_on_return: true,
            max_pieces: 2,
        }
    }

    /// The peer's local rank.
    fn peer_index(&self, peer: Rank) -> u32 {
        self.local_of[peer as usize]
    }

    #[inline]
    fn try_send(&mut self, peer: Peer, header: &[u8], payload: &[u8]) -> Result<Sent, PmlError> {
        match self.seg.try_send(peer.index as usize, header, payload) {
            Ok(true) => Ok(Sent::Whole),
            Ok(false) => Ok(Sent::Nothing),
            Err(e) => Err(send_failed(peer.rank, e)),
        }
    }

    unsafe fn try_send_blocks(
        &mut self,
        peer: Peer,
        header: &[u8],
        blocks: &Blocks,
        PackedRange { start, len }: PackedRange,
    ) -> Result<Option<Sent>, PmlError> {
        // SAFETY: this function's contract: a description made in this process, its elements
        // and list alive for the call, the range within its bytes; the ring's free space
        // overlaps no element of it.
        let fill = |at: *mut u8| unsafe { blocks.pack_range_into(start, len, at) };
        match self
            .seg
            .try_send_packed(peer.index as usize, header, len, fill)
        {
            Ok(true) => Ok(Some(Sent::Whole)),
            Ok(false) => Ok(Some(Sent::Nothing)),
            Err(e) => Err(send_failed(peer.rank, e)),
        }
    }

    #[inline]
    fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError> {
        // An idle round only looks at the rings' next header words.
        if !self.seg.has_records() {
            return Ok(0);
        }
        let local_ranks = &self.local_ranks;
        let mut failure = None;
        let n = self.seg.poll(|from, frame| {
            if failure.is_none() {
                if let Err(e) = sink.frame(local_ranks[from], frame) {
                    failure = Some(e);
                }
            }
        });
        match failure {
            None => Ok(n),
            Some(e) => Err(e),
        }
    }

    #[inline]
    fn has_work(&self) -> bool {
        self.seg.has_records()
    }

    fn read(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        target: &mut [u8],
        _token: u64,
    ) -> Result<Reading, PmlError> {
        let local = self.local_of[peer as usize] as usize;
        let arena = self.arenas.get(local).and_then(Option::as_ref);
        if key.key == blocks::IN_PLACE {
            let result = read_in_place(self.pids[local], arena, key.addr, target);
            // Only reads that finished count: a refused layout moved no bytes.
            if let Ok(mapped) = result {
                self.mapped_reads += u64::from(mapped);
                self.in_place_reads += 1;
            }
            return Ok(Reading::Finished(result.map(drop)));
        }
        if arena.is_some_and(|a| a.copy_out(key.addr, target)) {
            self.mapped_reads += 1;
            return Ok(Reading::Finished(Ok(())));
        }
        let result = read_remote(self.pids[local], key.addr, target).map_err(|e| e.to_string());
        Ok(Reading::Finished(result))
    }

    /// Every read into a receive's blocks lands there. Blocks of `in_place_min_block` bytes or
    /// more on average: from the peer's arena one memcpy a piece, else by `process_vm_readv`
    /// with the blocks as local iovecs. Shorter ones (a column of doubles), for which a copy
    /// or an iovec a block costs more than the bytes: by the layouts' copy loops, from the
    /// arena in one pass (a memcpy a block where both sides' blocks average at least
    /// `arena_min_block`), else a window at a time (`short_blocks`).
    unsafe fn read_into_blocks(
        &mut self,
        peer: Rank,
        key: RemoteKey,
        blocks: &Blocks,
        len: usize,
        _token: u64,
    ) -> Result<Option<Reading>, PmlError> {
        let local = self.local_of[peer as usize] as usize;
        let arena = self.arenas.get(local).and_then(Option::as_ref);
        let source = match key.key {
            blocks::IN_PLACE => Source::Described(key.addr),
            _ => Source::Bytes(key.addr),
        };
        let short = blocks.mean_block() < self.in_place_min_block;
        let pid = self.pids[local];
        let result = if short {
            let (arena_min_block, scratch) = (self.arena_min_block, &mut self.scratch);
            // SAFETY: this function's contract: a description made in this process, its list
            // alive (and its blocks writable and lent to the read, `len` within its bytes).
            unsafe { read_short_blocks(pid, arena, source, blocks, len, arena_min_block, scratch) }
                .map(|read| read.mapped())
        } else {
            // SAFETY: as above.
            let list = unsafe { blocks.local_list() };
            let into = Local::Blocks { blocks, list, len };
            // SAFETY: as above, the blocks are ours to write for the call.
            unsafe { read_into(pid, arena, source, into) }
        };
        // Only reads that finished count: a refused layout moved no bytes.
        if let Ok(mapped) = result {
            self.mapped_reads += u64::from(mapped);
            self.in_place_reads += u64::from(matches!(source, Source::Described(_)));
            self.block_reads += 1;
            self.short_block_reads += u64::from(short);
        }
        Ok(Some(Reading::Finished(result.map(drop))))
    }

    #[inline]
    fn expose(
        &mut self,
        _peer: Rank,
        buf: *const u8,
        len: usize,
        _sends_eagerly: impl FnOnce() -> bool,
    ) -> Result<Exposure, PmlError> {
        let mut exposure = Exposure::plain(buf);
        // Only a message past the limit pays for the range check.
        exposure.eager_limit = self
            .arena_eager_limit
            .filter(|&limit| len > limit && shared_arena::GLOBAL.contains(buf));
        Ok(exposure)
    }

    /// Where this rank reads its peers' memory (CMA works), a peer reads a non-contiguous
    /// send in place, from our arena or in blocks of `in_place_min_block` bytes or more: the
    /// description's address, which the send keeps alive, and the peer reads the layout there.
    unsafe fn expose_blocks(&mut self, _peer: Rank, blocks: &Blocks) -> Option<BlocksOffer> {
        // From our arena, which the peers map, a copy per block; elsewhere each iovec pins
        // the pages it covers, which short blocks do not repay (the send is packed).
        let from_arena = self.arena_eager_limit.is_some()
            && shared_arena::GLOBAL.contains(blocks.base() as usize as *const u8);
        let read_in_place = from_arena || blocks.mean_block() >= self.in_place_min_block;
        (self.cma.is_ok() && read_in_place).then_some(BlocksOffer {
            key: RemoteKey {
                addr: blocks as *const Blocks as u64,
                key: blocks::IN_PLACE,
            },
            layout: false,
            registration: None,
        })
    }

    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        self.seg.wait(timeout);
        Ok(())
    }

    fn wake_fd(&mut self) -> Result<Option<RawFd>, EngineError> {
        self.seg
            .wake_fd()
            .map(Some)
            .map_err(|e| EngineError::Transport(format!("shared memory: {e}")))
    }

    fn before_wait(&mut self) -> Result<bool, PmlError> {
        Ok(self.seg.before_wait())
    }

    fn after_wait(&mut self) {
        self.seg.after_wait();
    }

    fn begin_nap(&mut self) -> Result<NapStart, PmlError> {
        Ok(match self.seg.begin_nap() {
            Some(nap) => NapStart::Sleep(nap),
            None => NapStart::Busy,
        })
    }

    fn end_nap(&mut self, timed_out: bool) {
        self.seg.end_nap(timed_out);
    }

    fn wake_nap(&self) {
        self.seg.wake(self.seg.local_rank());
    }

    fn wake_peer(&self, peer: Rank) -> bool {
        match self.local_of.get(peer as usize) {
            Some(&local) if local != NOT_LOCAL => {
                self.seg.wake(local as usize);
                true
            }
            _ => false,
        }
    }

    fn count(&self, counters: &mut Counters) {
        counters.mapped_reads += self.mapped_reads;
        counters.in_place_reads += self.in_place_reads;
        counters.block_reads += self.block_reads;
        counters.short_block_reads += self.short_block_reads;
        let sleeps = self.seg.sleeps();
        counters.shm_sleeps += sleeps.slept;
        counters.shm_sleeps_woken += sleeps.woken;
        counters.shm_missed_wakes += sleeps.missed;
    }

    fn describe(&self, _peers: usize) -> String {
        let caps = self.caps();
        // Many ranks on a host get rings of less than a KiB.
        let ring = match self.seg.ring_bytes() {
            b if b < 1 << 10 => format!("{b} bytes"),
            b => format!("{} KiB", b >> 10),
        };
        // What the engine sends eagerly: a frame holds the largest MATCH header too.
        let eager = caps
            .eager_limit
            .min(caps.max_frame - crate::wire::SYNC_MATCH_HEADER_LEN);
        let mut text = format!(
            "{} ranks on this host over shared memory (rings of {ring}), eager up to {eager} \
             bytes; rendezvous by {}",
            self.local_ranks.len(),
            self.rendezvous_text()
        );
        if self.arena_stopped {
            text += "; large heap blocks stay with the system allocator (shared arena \
                     stopped: peers cannot read it)";
        } else if let Some(limit) = self.arena_eager_limit {
            text += &format!("; eager from the shared arena up to {limit} bytes (then one memcpy)");
        }
        text
    }
}
