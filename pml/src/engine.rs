//! Progress: drives the transports, feeds arriving frames to the protocol core, carries out
//! its actions, and waits without burning a core when nothing moves.
//!
//! One engine per process. It owns the user buffers of in-flight requests only as raw
//! pointers: the layer above (mpirt) guarantees, through blocking calls and request scopes,
//! that a buffer outlives its request — the contract of `post_send` and `post_recv`.

mod api;

use std::collections::VecDeque;
use std::slice;
use std::time::Duration;

use crate::bulk_copy;
use crate::config::{EngineConfig, TransportChoice};
use crate::envelope::{ContextId, Rank, Tag};
use crate::error::PmlError;
use crate::freed_memory;
use crate::pml_api::{Counters, Done, EngineError, RecvBuf, Wireup};
use crate::protocol::{Action, Completion, Core, CoreConfig, PeerCaps, SendArgs, SendMode};
use crate::requests::Handle;
use crate::shared_arena::{self, ArenaInfo};
use crate::transport::shm::{self, PeerArena, ShmConfig, ShmTransport};
use crate::transport::tcp::{self, Sent, TcpConfig, TcpTransport};
#[cfg(feature = "verbs")]
use crate::transport::verbs::{self, VerbsConfig, VerbsTransport};
use crate::wire::{RemoteKey, DATA_HEADER_LEN};

/// What a transport did to let peers read a send buffer (a verbs registration), undone when
/// the send completes.
#[cfg(feature = "verbs")]
type Exposure = verbs::MrId;
#[cfg(not(feature = "verbs"))]
type Exposure = std::convert::Infallible;

/// A send buffer lent to the engine until the send completes.
pub struct SendBuf {
    ptr: *const u8,
    len: usize,
    exposure: Option<Exposure>,
}

impl AsRef<[u8]> for SendBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `post_send`'s caller guarantees `ptr` is valid for `len` bytes and unchanged
        // until the request completes, and the engine drops this `SendBuf` at completion.
        unsafe { slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// How frames reach one peer.
#[derive(Clone, Copy)]
enum Link {
    /// This process: frames loop back, reads are plain copies.
    Loopback,
    Shm {
        local: usize,
        pid: i32,
    },
    Tcp,
    #[cfg(feature = "verbs")]
    Verbs,
}

/// A rank with peers on both shared memory and TCP sleeps on the segment's futex, which TCP
/// cannot wake, so it sleeps in short stretches and polls its sockets in between.
const MIXED_SLEEP: Duration = Duration::from_micros(250);

/// Largest TCP frame: rendezvous data is streamed in DATA frames of up to this size, each
/// read in place by the receiver, so it bounds only how long control frames wait behind one.
const TCP_MAX_FRAME: usize = 4 << 20;
/// Progress rounds a rank with shared-memory peers skips polling quiet TCP sockets.
const TCP_QUIET_ROUNDS: u32 = 16;
/// How long dialling one of a peer's addresses may take before the next is tried.
const TCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a rank dialling over TCP may take over each of its turns in the handshake: a
/// genuine rank answers within a progress round, and one busy outside the library longer
/// than this only dials again; a stranger holds a socket no longer.
const TCP_HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

pub struct Engine {
    rank: Rank,
    size: u32,
    core: Core<SendBuf, RecvBuf>,
    links: Vec<Option<Link>>,
    shm: Option<ShmTransport>,
    tcp: Option<TcpTransport>,
    /// Rounds left before quiet TCP sockets are polled again (see `progress`).
    tcp_rounds_to_skip: u32,
    #[cfg(feature = "verbs")]
    verbs: Option<VerbsTransport>,
    /// Host of each rank, for errors that name where a failed peer runs.
    hosts: Vec<String>,
    /// Reads verbs finished, handed from its poll to the core (kept to reuse its memory).
    #[cfg(feature = "verbs")]
    reads_done: Vec<verbs::ReadDone>,
    /// World rank of each local rank index in the shared-memory segment.
    local_ranks: Vec<Rank>,
    loopback: VecDeque<Vec<u8>>,
    /// Peers whose transport refused a frame; retried first on the next progress.
    blocked: Vec<Rank>,
    counters: Counters,
    /// Same-host peers' shared arenas, mapped at wire-up, by world rank.
    peer_arenas: Vec<Option<PeerArena>>,
    /// The eager limit of shared-memory sends from our own shared arena, while the peers read
    /// it: a rendezvous from there is one memcpy by the receiver, cheaper than eager's two
    /// copies for all but small messages (see `EngineConfig::shm_arena_eager_limit`).
    arena_eager_limit: Option<usize>,
    description: String,
    /// Busy-poll budget of a wait: none when ranks outnumber the cores they may use.
    spin: Duration,
    /// The failure that stopped the engine (see `stop`); every later call that would move
    /// data returns it.
    failure: Option<PmlError>,
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for writes of its length; gethostname NUL-terminates within
    // it or truncates, and we stop at the first NUL or the end.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn shm_send_failed(peer: Rank, e: std::io::Error) -> PmlError {
    PmlError::Protocol {
        peer,
        what: format!("shared-memory send failed: {e}"),
    }
}

fn wireup_err(e: String) -> EngineError {
    EngineError::Wireup(e)
}

impl Engine {
    /// Wires up with every peer: publishes this rank's host and process, fences, and opens the
    /// host's shared-memory segment with the ranks that share the host.
    pub fn new(wireup: &mut dyn Wireup, config: EngineConfig) -> Result<Engine, EngineError> {
        let rank = wireup.rank();
        let size = wireup.size();
        let tcp_interfaces = tcp::parse_selectors(&config.tcp_interfaces)
            .map_err(|e| EngineError::Config(format!("MPIRT_TCP_IF (--tcp-if): {e}")))?;
        // Peers read our memory directly (single-copy rendezvous); Yama's ptrace_scope 1
        // forbids that unless we allow it first. Failure only means the copy fallback.
        let ptrace_allowed = shm::allow_ptrace_from_peers();
        let host = hostname();
        wireup
            .put(&format!("pml.host.{rank}"), host.as_bytes())
            .map_err(wireup_err)?;
        wireup.fence().map_err(wireup_err)?;

        let mut hosts = Vec::with_capacity(size as usize);
        for r in 0..size {
            let h = wireup.get(&format!("pml.host.{r}")).map_err(wireup_err)?;
            hosts.push(String::from_utf8_lossy(&h).into_owned());
        }
        let several_hosts = hosts.iter().any(|h| *h != hosts[0]);
        if config.transport == TransportChoice::Shm && several_hosts {
            let elsewhere = hosts.iter().position(|h| *h != host).unwrap_or(0);
            return Err(EngineError::Config(format!(
                "MPIRT_TRANSPORT=shm, but rank {elsewhere} runs on host '{}' and this rank on \
                 '{host}': shared memory reaches only ranks on one host (use auto or tcp)",
                hosts[elsewhere]
            )));
        }
        // Shared memory between the ranks of a host unless TCP is forced; TCP for the rest.
        let network_only = matches!(
            config.transport,
            TransportChoice::Tcp | TransportChoice::Verbs
        );
        let local_ranks: Vec<Rank> = (0..size)
            .filter(|&r| r == rank || (!network_only && hosts[r as usize] == host))
            .collect();
        let mut links = vec![None; size as usize];
        let remote: Vec<Rank> = (0..size).filter(|r| !local_ranks.contains(r)).collect();
        #[cfg(not(feature = "verbs"))]
        if config.transport == TransportChoice::Verbs {
            return Err(EngineError::Config(
                "MPIRT_TRANSPORT=verbs, but this program was built without RDMA verbs \
                 (build it with the cargo feature `verbs`)"
                    .into(),
            ));
        }
        #[cfg(feature = "verbs")]
        let (verbs, verbs_note) = open_verbs(rank, &hosts, &remote, &config)?;
        #[cfg(feature = "verbs")]
        wireup
            .put(
                &format!("pml.verbs.{rank}"),
                verbs
                    .as_ref()
                    .map(|v| v.endpoint())
                    .unwrap_or_default()
                    .as_bytes(),
            )
            .map_err(wireup_err)?;
        let mut tcp = None;
        if !remote.is_empty() && config.transport != TransportChoice::Verbs {
            let secret = wireup.job_secret().map_err(wireup_err)?;
            let t = TcpTransport::new(
                rank,
                size,
                &secret,
                TcpConfig {
                    interfaces: tcp_interfaces,
                    max_staged_payload: config.tcp_eager_limit,
                    connect_timeout: TCP_CONNECT_TIMEOUT,
                    handshake_limit: TCP_HANDSHAKE_LIMIT,
                    verbose: config.verbose,
                },
            )
            .map_err(|e| EngineError::Transport(format!("TCP: {e}")))?;
            let endpoint = t
                .endpoint()
                .map_err(|e| EngineError::Transport(format!("TCP: {e}")))?;
            wireup
                .put(&format!("pml.tcp.{rank}"), endpoint.as_bytes())
                .map_err(wireup_err)?;
            tcp = Some(t);
        }
        let my_local = local_ranks
            .iter()
            .position(|&r| r == rank)
            .expect("self is local");
        let n_local = local_ranks.len();

        // Published before the fences below, read once every rank has passed them.
        let own_arena = if n_local > 1 {
            let arena = activate_arena(&config, n_local);
            let wire = arena.as_ref().map(|a| a.to_wire()).unwrap_or_default();
            wireup
                .put(&format!("pml.arena.{rank}"), wire.as_bytes())
                .map_err(wireup_err)?;
            Some(arena)
        } else {
            None
        };

        // The leader creates the segment, the others attach once it exists, and a last fence
        // makes sure every rank has attached (and so published its pid) before anyone probes.
        let mut shm = None;
        let name = format!("mpirt-{}-{}", wireup.job_id(), local_ranks[0]);
        let shm_config = ShmConfig {
            ring_bytes: config.shm_ring_bytes,
        };
        if n_local > 1 && my_local == 0 {
            shm = Some(
                ShmTransport::create(&name, 0, n_local, &shm_config)
                    .map_err(|e| EngineError::Transport(format!("creating {name}: {e}")))?,
            );
        }
        wireup.fence().map_err(wireup_err)?;
        if n_local > 1 && my_local != 0 {
            shm = Some(
                ShmTransport::attach(&name, my_local, n_local)
                    .map_err(|e| EngineError::Transport(format!("attaching {name}: {e}")))?,
            );
        }
        // Queue pairs connect before the last fence, so that no rank sends to one not yet
        // ready to receive: its packets would be dropped, and once the retries ran out the
        // sender would take the peer for dead.
        #[cfg(feature = "verbs")]
        let mut verbs = verbs;
        #[cfg(feature = "verbs")]
        let mut verbs_peers = Vec::new();
        #[cfg(feature = "verbs")]
        if let Some(v) = &mut verbs {
            for &r in &remote {
                let endpoint = wireup.get(&format!("pml.verbs.{r}")).map_err(wireup_err)?;
                if endpoint.is_empty() {
                    // The peer has no device: TCP carries this pair.
                    continue;
                }
                v.connect(r, &String::from_utf8_lossy(&endpoint))
                    .map_err(|e| EngineError::Transport(format!("verbs: {e}")))?;
                verbs_peers.push(r);
            }
        }
        wireup.fence().map_err(wireup_err)?;

        let mut core = Core::new(
            size as usize,
            CoreConfig {
                unexpected_budget: config.unexpected_budget,
            },
        );
        core.set_peer(
            rank,
            PeerCaps {
                eager_limit: config.shm_eager_limit,
                max_frame: usize::MAX / 2,
                remote_read: true,
            },
        );
        links[rank as usize] = Some(Link::Loopback);
        #[cfg(feature = "verbs")]
        if let Some(v) = &verbs {
            let caps = PeerCaps {
                eager_limit: config.verbs_eager_limit,
                max_frame: v.frame_size(),
                remote_read: true,
            };
            for &r in &verbs_peers {
                core.set_peer(r, caps);
                links[r as usize] = Some(Link::Verbs);
            }
        }
        if let Some(t) = &mut tcp {
            let caps = PeerCaps {
                eager_limit: config.tcp_eager_limit,
                max_frame: TCP_MAX_FRAME,
                remote_read: false,
            };
            for &r in &remote {
                if links[r as usize].is_some() {
                    continue;
                }
                let endpoint = wireup.get(&format!("pml.tcp.{r}")).map_err(wireup_err)?;
                t.add_peer(
                    r,
                    &String::from_utf8_lossy(&endpoint),
                    hosts[r as usize] == host,
                )
                .map_err(|e| EngineError::Transport(format!("TCP: {e}")))?;
                core.set_peer(r, caps);
                links[r as usize] = Some(Link::Tcp);
            }
        }

        let mut description = format!("rank {rank} of {size} on {host}");
        let mut arena_eager_limit = None;
        let mut peer_arenas: Vec<Option<PeerArena>> = (0..size).map(|_| None).collect();
        if let Some(t) = &shm {
            // Whether a rank may read another's memory is a property of the host (Yama,
            // seccomp, containers), so one neighbour speaks for all.
            let cma = if config.single_copy {
                t.probe_cma(if my_local == 0 { 1 } else { 0 })
            } else {
                Err(std::io::Error::other(
                    "turned off by MPIRT_SHM_SINGLE_COPY=0",
                ))
            };
            let caps = PeerCaps {
                eager_limit: config.shm_eager_limit,
                max_frame: t.max_frame(),
                remote_read: cma.is_ok(),
            };
            // The arena path sits on top of CMA: buffers outside arenas still need it.
            let (arena_note, unreadable) = match &cma {
                Ok(()) => {
                    let (mapped, unreadable) =
                        map_peer_arenas(wireup, rank, &local_ranks, &mut peer_arenas)?;
                    let own = own_arena.as_ref().and_then(|a| a.clone().err());
                    (own.or(mapped), unreadable)
                }
                Err(_) => (None, true),
            };
            // Per host, like CMA: when this rank cannot read its peers' arenas (a peer that
            // has none may still read ours), they cannot read its own either, and its large
            // blocks would pay the arena's costs for nothing.
            let arena_stopped = matches!(own_arena, Some(Ok(_))) && unreadable;
            if arena_stopped {
                shared_arena::GLOBAL.stop_serving();
            }
            for (local, &r) in local_ranks.iter().enumerate() {
                if r == rank {
                    continue;
                }
                let pid = t.peer_pid(local).ok_or_else(|| {
                    EngineError::Transport(format!("rank {r} did not attach to {name}"))
                })?;
                core.set_peer(r, caps);
                links[r as usize] = Some(Link::Shm { local, pid });
            }
            description += &format!(
                "; {n_local} ranks on this host over shared memory, eager up to {} bytes; \
                 rendezvous by {}",
                caps.eager_limit.min(caps.max_frame),
                match (&cma, &ptrace_allowed) {
                    (Ok(()), _) => match arena_note {
                        None => format!(
                            "memcpy from the sender's shared arena ({} MiB of address space) \
                             for heap blocks of {} KiB or more, else single copy \
                             (process_vm_readv)",
                            own_arena
                                .as_ref()
                                .and_then(|a| a.as_ref().ok())
                                .map_or(0, |a| a.len >> 20),
                            shared_arena::ARENA_MIN_BYTES >> 10
                        ),
                        Some(why) =>
                            format!("single copy (process_vm_readv); no shared arena: {why}"),
                    },
                    (Err(e), Ok(())) => format!("pipelined copy through the segment ({e})"),
                    (Err(e), Err(p)) => {
                        format!("pipelined copy through the segment ({e}; PR_SET_PTRACER: {p})")
                    }
                }
            );
            if arena_stopped {
                description += "; large heap blocks stay with the system allocator (shared \
                                 arena stopped: peers cannot read it)";
            } else if matches!(own_arena, Some(Ok(_))) && cma.is_ok() {
                let limit = config.shm_arena_eager_limit.min(config.shm_eager_limit);
                arena_eager_limit = Some(limit);
                description +=
                    &format!("; eager from the shared arena up to {limit} bytes (then one memcpy)");
            }
        }
        #[cfg(feature = "verbs")]
        if let Some(v) = &verbs {
            let n = links
                .iter()
                .filter(|l| matches!(l, Some(Link::Verbs)))
                .count();
            description += &format!(
                "; {n} ranks over verbs on {}, eager (SEND) up to {} bytes, rendezvous by RDMA \
                 READ, registration cache {}",
                v.device_name(),
                config.verbs_eager_limit.min(v.frame_size()),
                if v.caching() {
                    "on"
                } else if config.verbs_reg_cache {
                    "off (install mpirt::TrackingAllocator as the global allocator to turn it on)"
                } else {
                    "off (MPIRT_VERBS_REG_CACHE=0)"
                }
            );
        }
        #[cfg(feature = "verbs")]
        if let Some(note) = verbs_note {
            description += &format!("; no verbs: {note}");
        }
        if let Some(t) = &tcp {
            description +=
                &format!(
                "; {} ranks over tcp from {}, eager up to {} bytes, rendezvous by GET with the \
                 data read in place",
                links.iter().filter(|l| matches!(l, Some(Link::Tcp))).count(),
                t.offered(),
                config.tcp_eager_limit.min(TCP_MAX_FRAME - DATA_HEADER_LEN)
            );
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // A rank rsrun bound to a CPU of its own (it says so in MPIRT_BOUND_CPU) sees one CPU,
        // yet it is not oversubscribed, and yielding at once would hand its CPU to other
        // processes. Ranks that merely inherited one CPU between them see the same, and must
        // yield: a spinning rank keeps the peer it waits for off their CPU.
        let bound = std::env::var_os("MPIRT_BOUND_CPU").is_some();
        let spin = if n_local > cores && !bound {
            description += &format!("; {n_local} ranks on {cores} cores: waits yield at once");
            Duration::ZERO
        } else {
            config.spin
        };
        if config.verbose {
            eprintln!("mpirt: {description}");
        }
        Ok(Engine {
            rank,
            size,
            core,
            links,
            shm,
            tcp,
            tcp_rounds_to_skip: 0,
            #[cfg(feature = "verbs")]
            verbs,
            #[cfg(feature = "verbs")]
            reads_done: Vec::new(),
            hosts,
            local_ranks,
            loopback: VecDeque::new(),
            blocked: Vec::new(),
            counters: Counters::default(),
            peer_arenas,
            arena_eager_limit,
            description,
            spin,
            failure: None,
        })
    }

    pub fn counters(&self) -> Counters {
        #[cfg(feature = "verbs")]
        if let Some(v) = &self.verbs {
            return Counters {
                registrations: v.registrations(),
                ..self.counters
            };
        }
        self.counters
    }

    fn check_peer(&self, peer: Rank) -> Result<(), PmlError> {
        match self.links.get(peer as usize) {
            Some(Some(_)) => Ok(()),
            _ => Err(PmlError::UnknownPeer(peer)),
        }
    }

    /// Starts a send of `len` bytes at `buf` to world rank `peer` in the communicator
    /// `context`; `source` is this rank's rank there. A small standard
    /// send that a shared-memory ring took at once returns [`Handle::SENT`], already complete.
    ///
    /// # Safety
    /// `buf` must be valid for reads of `len` bytes and must not be written or freed until the
    /// request completes (`test` or `wait` reported it).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn post_send(
        &mut self,
        context: ContextId,
        source: Rank,
        peer: Rank,
        tag: Tag,
        mode: SendMode,
        buf: *const u8,
        len: usize,
    ) -> Result<Handle, PmlError> {
        self.check_peer(peer)?;
        self.check_running()?;
        #[cfg_attr(not(feature = "verbs"), allow(unused_mut))]
        let mut remote = RemoteKey {
            addr: buf as u64,
            key: 0,
        };
        #[cfg_attr(not(feature = "verbs"), allow(unused_mut))]
        let mut exposure = None;
        #[cfg(feature = "verbs")]
        if matches!(self.links[peer as usize], Some(Link::Verbs))
            && !self.core.sends_eagerly(peer, len)
        {
            let v = self.verbs.as_mut().expect("a verbs link has a transport");
            let (rkey, id) = v.expose(buf as usize, len).map_err(|cause| {
                PmlError::transport(peer, format!("exposing a {len}-byte send buffer: {cause}"))
            })?;
            remote.key = u64::from(rkey);
            exposure = Some(id);
        }
        let mut args = SendArgs {
            context,
            source,
            peer,
            tag,
            mode,
            buf: SendBuf {
                ptr: buf,
                len,
                exposure,
            },
            remote,
            eager_limit: None,
        };
        let h = match self.links[peer as usize] {
            Some(Link::Shm { local, .. }) => {
                // Only a message past the limit pays for the range check.
                args.eager_limit = self
                    .arena_eager_limit
                    .filter(|&limit| len > limit && shared_arena::GLOBAL.contains(buf));
                let shm = self.shm.as_mut().expect("a shm link has a segment");
                let posted = self.core.post_send_direct(args, |header, payload| {
                    shm.try_send(local, header, payload)
                        .map_err(|e| shm_send_failed(peer, e))
                });
                posted.map_err(|e| self.stop(e))?
            }
            _ => self.core.post_send(args)?,
        };
        if h == Handle::SENT {
            self.counters.frames_sent += 1;
            return Ok(h);
        }
        // The frame goes out now: the latency of the next progress call is not its to pay.
        self.flush(peer).map_err(|e| self.stop(e))?;
        Ok(h)
    }

    /// Takes the request's outcome if it finished, looking it up once; makes no progress.
    #[inline]
    pub fn collect(&mut self, h: Handle) -> Result<Option<Done>, PmlError> {
        if h == Handle::SENT {
            return Ok(Some(Done::Sent));
        }
        match self.core.take_completion(h)? {
            None => Ok(None),
            Some(Completion::Send { buf, result }) => {
                if let Some(exposure) = buf.exposure {
                    self.unexpose(exposure);
                }
                result.map(|()| Some(Done::Sent))
            }
            Some(Completion::Recv { result, .. }) => result.map(|s| Some(Done::Received(s))),
        }
    }

    #[cfg(feature = "verbs")]
    fn unexpose(&mut self, exposure: Exposure) {
        if let Some(v) = &mut self.verbs {
            v.release(exposure);
        }
    }

    #[cfg(not(feature = "verbs"))]
    fn unexpose(&mut self, exposure: Exposure) {
        match exposure {}
    }

    /// Sleeps until a transport may have something for us, or `timeout` passes: each wait
    /// returns on a frame for us, and on room where our frame was refused.
    fn sleep_until_woken(&mut self, timeout: Duration) -> Result<(), PmlError> {
        self.sleep_on_transports(timeout)?;
        // Whatever woke us may have come over TCP: look there on the next round.
        self.tcp_rounds_to_skip = 0;
        Ok(())
    }

    fn sleep_on_transports(&mut self, timeout: Duration) -> Result<(), PmlError> {
        #[cfg(feature = "verbs")]
        if let Some(v) = &mut self.verbs {
            v.arm();
            // Completions that came before arming wake nobody: take them first.
            if self.progress()? {
                return Ok(());
            }
            let v = self.verbs.as_mut().expect("checked above");
            if let Some(shm) = &self.shm {
                shm.wait(MIXED_SLEEP);
            } else {
                v.sleep(if self.tcp.is_some() {
                    MIXED_SLEEP
                } else {
                    timeout
                });
            }
            return Ok(());
        }
        match (&self.shm, &mut self.tcp) {
            (Some(shm), None) => shm.wait(timeout),
            (None, Some(tcp)) => tcp.wait(timeout),
            (Some(shm), Some(_)) => shm.wait(MIXED_SLEEP),
            (None, None) => std::thread::yield_now(),
        }
        Ok(())
    }

    /// Probes peers that have been quiet for `idle`: a peer that died completes nothing, so
    /// a wait on it fails instead of hanging.
    #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
    fn probe_idle_peers(&mut self, idle: Duration) -> Result<(), PmlError> {
        #[cfg(feature = "verbs")]
        if let Some(v) = &mut self.verbs {
            v.probe_idle_peers(idle)
                .map_err(|e| e.on_host(&self.hosts))?;
        }
        Ok(())
    }

    /// Whether a round of progress could move anything. Cheaper than the round itself: a
    /// rank whose peers are all on shared memory spins on this alone while nothing comes.
    /// Sockets and verbs must be polled to know.
    #[inline]
    fn may_move(&self) -> bool {
        #[cfg(feature = "verbs")]
        if self.verbs.is_some() {
            return true;
        }
        self.tcp.is_some()
            || self.shm.as_ref().is_some_and(ShmTransport::has_records)
            || !(self.loopback.is_empty() && self.blocked.is_empty())
            || self.core.has_work()
    }

    /// One round of progress; returns whether anything moved.
    #[inline]
    pub fn progress(&mut self) -> Result<bool, PmlError> {
        self.check_running()?;
        self.progress_round().map_err(|e| self.stop(e))
    }

    /// Fails, naming the failure that stopped the engine, if one did.
    #[inline]
    fn check_running(&self) -> Result<(), PmlError> {
        match &self.failure {
            None => Ok(()),
            Some(failure) => Err(PmlError::Stopped(Box::new(failure.clone()))),
        }
    }

    /// Stops the engine after a failure of messaging itself (a connection broke, a peer sent
    /// a malformed frame): the requests whose waits fail now stay in the engine, and their
    /// owners take their buffers back, so nothing may move data into or out of those buffers
    /// any more. MPI, too, leaves a library that reported such an error unusable. Returns
    /// `failure`; every later call fails naming the first one (`PmlError::Stopped`).
    #[cold]
    fn stop(&mut self, failure: PmlError) -> PmlError {
        if self.failure.is_none() {
            // The device may still be writing RDMA READs into receive buffers: it stops
            // first.
            #[cfg(feature = "verbs")]
            if let Some(v) = &mut self.verbs {
                v.stop();
            }
            self.failure = Some(failure.clone());
        }
        failure
    }

    fn progress_round(&mut self) -> Result<bool, PmlError> {
        let mut moved = false;
        // An idle round only looks at the rings' next header words.
        if let Some(shm) = self.shm.as_mut().filter(|shm| shm.has_records()) {
            let core = &mut self.core;
            let local_ranks = &self.local_ranks;
            let mut failure = None;
            let n = shm.poll(|from, frame| {
                if failure.is_none() {
                    if let Err(e) = core.on_frame(local_ranks[from], frame) {
                        failure = Some(e);
                    }
                }
            });
            if let Some(e) = failure {
                return Err(e);
            }
            self.counters.frames_received += n as u64;
            moved |= n > 0;
        }
        if let Some(tcp) = &mut self.tcp {
            if self.tcp_rounds_to_skip == 0 {
                let n = tcp
                    .poll(&mut self.core)
                    .map_err(|e| e.on_host(&self.hosts))?;
                self.counters.frames_received += n as u64;
                moved |= n > 0;
                // Polling sockets is a syscall; a rank that also has shared-memory peers
                // looks at them only every few rounds while nothing comes over TCP.
                if n == 0 && self.shm.is_some() {
                    self.tcp_rounds_to_skip = TCP_QUIET_ROUNDS;
                }
            } else {
                self.tcp_rounds_to_skip -= 1;
            }
        }
        #[cfg(feature = "verbs")]
        if let Some(v) = &mut self.verbs {
            let core = &mut self.core;
            let n = v
                .poll(
                    |peer, frame| core.on_frame(peer, frame),
                    &mut self.reads_done,
                )
                .map_err(|e| e.on_host(&self.hosts))?;
            self.counters.frames_received += n as u64;
            moved |= n > 0;
            for (token, result) in self.reads_done.drain(..) {
                let recv = Handle::from_wire(token);
                match result {
                    Ok(()) => core.read_done(recv)?,
                    Err(cause) => core.read_failed(recv, cause)?,
                }
                moved = true;
            }
        }
        while let Some(frame) = self.loopback.pop_front() {
            self.core.on_frame(self.rank, &frame)?;
            moved = true;
        }
        while let Some(action) = self.core.poll_action() {
            self.perform(action)?;
            moved = true;
        }
        if !self.blocked.is_empty() {
            for peer in std::mem::take(&mut self.blocked) {
                moved |= self.flush(peer)?;
            }
        }
        while let Some(peer) = self.core.next_ready_peer() {
            moved |= self.flush(peer)?;
        }
        Ok(moved)
    }

    fn perform(&mut self, action: Action) -> Result<(), PmlError> {
        let Action::Read {
            recv,
            peer,
            remote,
            len,
        } = action;
        let link = self.links[peer as usize].ok_or(PmlError::UnknownPeer(peer))?;
        let target = self.core.read_target(recv)?;
        #[cfg(feature = "verbs")]
        if let Link::Verbs = link {
            // Asynchronous: `progress` reports it done when the last piece completes.
            let v = self.verbs.as_mut().expect("a verbs link has a transport");
            v.read(peer, remote, target, recv.to_wire())
                .map_err(|e| e.on_host(&self.hosts))?;
            self.counters.remote_reads += 1;
            self.counters.remote_read_bytes += len as u64;
            return Ok(());
        }
        let result = match link {
            Link::Loopback => {
                // SAFETY: the RTS came from this process, so `remote.addr` is the buffer of
                // one of our own sends, valid for `len` bytes until its FIN, which follows
                // this copy; a send buffer and a receive buffer never overlap (the caller
                // borrows one shared and the other exclusively, or for a raw receive promised
                // that nothing else, a send included, uses its memory until it completes).
                unsafe {
                    bulk_copy::copy_nonoverlapping(
                        remote.addr as *const u8,
                        target.as_mut_ptr(),
                        len,
                    )
                };
                Ok(())
            }
            Link::Shm { pid, .. } => {
                let arena = self.peer_arenas[peer as usize].as_ref();
                if arena.is_some_and(|a| a.copy_out(remote.addr, target)) {
                    self.counters.mapped_reads += 1;
                    Ok(())
                } else {
                    shm::read_remote(pid, remote.addr, target)
                }
            }
            Link::Tcp => unreachable!("TCP peers are set up without remote reads"),
            #[cfg(feature = "verbs")]
            Link::Verbs => unreachable!("handled above"),
        };
        match result {
            Ok(()) => {
                self.counters.remote_reads += 1;
                self.counters.remote_read_bytes += len as u64;
                self.core.read_done(recv)
            }
            Err(e) => self.core.read_failed(recv, e.to_string()),
        }
    }

    /// Hands `peer`'s queued frames to its transport until it takes no more.
    fn flush(&mut self, peer: Rank) -> Result<bool, PmlError> {
        let mut sent_any = false;
        let link = self.links[peer as usize].ok_or(PmlError::UnknownPeer(peer))?;
        while let Some(t) = self.core.next_transmit(peer) {
            let mut part_sent = false;
            let taken = match link {
                Link::Loopback => {
                    let mut frame = Vec::with_capacity(t.header().len() + t.payload.len());
                    frame.extend_from_slice(t.header());
                    frame.extend_from_slice(t.payload);
                    self.loopback.push_back(frame);
                    true
                }
                Link::Shm { local, .. } => {
                    let shm = self.shm.as_mut().expect("a shm link has a segment");
                    shm.try_send(local, t.header(), t.payload)
                        .map_err(|e| shm_send_failed(peer, e))?
                }
                #[cfg(feature = "verbs")]
                Link::Verbs => {
                    let v = self.verbs.as_mut().expect("a verbs link has a transport");
                    v.send(peer, t.header(), t.payload)
                        .map_err(|e| e.on_host(&self.hosts))?
                }
                Link::Tcp => {
                    let tcp = self.tcp.as_mut().expect("a tcp link has a transport");
                    match tcp
                        .send(peer, t.header(), t.payload)
                        .map_err(|e| e.on_host(&self.hosts))?
                    {
                        Sent::Whole => true,
                        Sent::Part => {
                            part_sent = true;
                            false
                        }
                        Sent::Nothing => false,
                    }
                }
            };
            if part_sent {
                self.core.hold_front(peer);
            }
            if !taken {
                if !self.blocked.contains(&peer) {
                    self.blocked.push(peer);
                }
                break;
            }
            self.core.transmitted(peer);
            self.counters.frames_sent += 1;
            sent_any = true;
        }
        Ok(sent_any)
    }
}

/// Activates this process's shared arena (see `shared_arena`) when the configuration and the
/// global allocator allow; the error says why not, for `--verbose`.
fn activate_arena(config: &EngineConfig, n_local: usize) -> Result<ArenaInfo, String> {
    if !config.single_copy || !config.shared_arena {
        return Err("turned off by MPIRT_SHM_SINGLE_COPY=0 or MPIRT_SHM_ARENA=0".into());
    }
    if !freed_memory::installed() {
        return Err("the global allocator is not mpirt::TrackingAllocator".into());
    }
    let len = shared_arena::arena_bytes(shared_arena::address_space_limit(), n_local)?;
    shared_arena::GLOBAL
        .activate(len)
        .map_err(|e| e.to_string())
}

/// Maps the arena of every other local rank that published one; says why when one is missing
/// (its messages then go by process_vm_readv), and whether one published could not be mapped.
fn map_peer_arenas(
    wireup: &mut dyn Wireup,
    rank: Rank,
    local_ranks: &[Rank],
    arenas: &mut [Option<PeerArena>],
) -> Result<(Option<String>, bool), EngineError> {
    let mut note = None;
    let mut unreadable = false;
    for &r in local_ranks.iter().filter(|&&r| r != rank) {
        let wire = wireup.get(&format!("pml.arena.{r}")).map_err(wireup_err)?;
        let wire = String::from_utf8_lossy(&wire);
        let mapped = match ArenaInfo::from_wire(&wire) {
            Some(info) => PeerArena::map(&info).map_err(|e| {
                unreadable = true;
                format!("rank {r}: {e}")
            }),
            None => Err(format!("rank {r} has none")),
        };
        match mapped {
            Ok(a) => arenas[r as usize] = Some(a),
            Err(why) => note = note.or(Some(why)),
        }
    }
    Ok((note, unreadable))
}

/// Opens the RDMA device when verbs is asked for, or (`auto`) when ranks span hosts and a
/// device is there; with `auto`, a missing device is a note for `--verbose`, not an error.
#[cfg(feature = "verbs")]
fn open_verbs(
    rank: Rank,
    hosts: &[String],
    remote: &[Rank],
    config: &EngineConfig,
) -> Result<(Option<VerbsTransport>, Option<String>), EngineError> {
    let wanted = match config.transport {
        TransportChoice::Verbs => true,
        TransportChoice::Auto => !remote.is_empty() && config.verbs_devices != "none",
        _ => false,
    };
    if !wanted {
        return Ok((None, None));
    }
    let host = &hosts[rank as usize];
    let local_rank = hosts[..rank as usize].iter().filter(|h| *h == host).count();
    let verbs_config = VerbsConfig {
        devices: config.verbs_devices.clone(),
        gid_index: config.verbs_gid_index,
        frame_size: config.verbs_eager_limit + crate::wire::MAX_HEADER_LEN,
        reg_cache: config.verbs_reg_cache,
    };
    match VerbsTransport::new(rank, hosts.len() as u32, local_rank, remote, &verbs_config) {
        Ok(v) => Ok((Some(v), None)),
        Err(e) if config.transport == TransportChoice::Verbs => {
            Err(EngineError::Transport(format!("verbs: {e}")))
        }
        Err(e) => Ok((None, Some(e))),
    }
}

impl<S: AsRef<[u8]>, R: AsMut<[u8]>> tcp::Sink for Core<S, R> {
    fn frame(&mut self, peer: Rank, frame: &[u8]) -> Result<(), PmlError> {
        self.on_frame(peer, frame)
    }

    fn data_target(
        &mut self,
        peer: Rank,
        recv_request: u64,
        offset: u64,
        len: usize,
    ) -> Result<&mut [u8], PmlError> {
        Core::data_target(self, peer, recv_request, offset, len)
    }

    fn data_landed(&mut self, peer: Rank, recv_request: u64, len: usize) -> Result<(), PmlError> {
        Core::data_landed(self, peer, recv_request, len)
    }
}
