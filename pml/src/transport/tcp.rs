//! TCP transport between ranks on different hosts (and between local ranks on request).
//!
//! One connection per pair of ranks, opened on the first frame either side sends. Both sides
//! may dial at once; the dialler says who it is in a hello, both prove they know the job's
//! secret (`handshake.rs`), and the dialler waits for the other side to take the connection;
//! when two dials cross, the one from the lower rank wins on both sides (the other is refused,
//! and its dialler waits for the winner to arrive). So exactly one connection carries each
//! pair's frames, in order, in both directions. A connection that fails the handshake, or
//! keeps silent past a short deadline, is closed and forgotten: it never becomes a peer's.
//! A flood of such connections cannot crowd out a rank's: each hello is read as soon as its
//! connection is accepted, and when too many are in the handshake, those that have not said a
//! whole hello go first; a dial dropped before its challenge is dialled again (`redial.rs`).
//!
//! Sockets are non-blocking and watched by one level-triggered epoll set, which a progress
//! round polls and a waiting rank sleeps on. TCP cannot read a peer's memory, so rendezvous
//! data comes in DATA frames after a GET (see `conn.rs` for how they land in place).

mod addrs;
mod conn;
mod contract;
mod gather;
mod handshake;
mod redial;
mod renamed;
#[cfg(test)]
mod tests;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use slab::Slab;

pub use addrs::parse_selectors;
pub use contract::TCP_MAX_FRAME;
pub use handshake::JobSecret;
/// The handshake, for a link outside the transport that two sides who share a secret must
/// open (a spawn's port): the same challenge and response in each direction.
pub mod port_proof {
    pub use super::handshake::{
        challenge, derive_key, nonce, Challenged, Dialler, Refusal, CHALLENGE_LEN, HELLO_LEN,
        PROOF_LEN,
    };
}
pub(crate) use renamed::Renamed;

use super::epoll::{interest, Epoll, Ready};
use super::{scratch, Sent, Sink};
use crate::blocks::{Blocks, PackedRange};
use crate::envelope::Rank;
use crate::error::PmlError;
use addrs::{IfAddr, Selector};
use conn::{Conn, Received};
use handshake::{Challenged, Dialler, Incoming, Refusal, CHALLENGE_LEN, HELLO_LEN, PROOF_LEN};
use redial::{DialEnd, Redial};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Which addresses to offer peers (`--tcp-if`); empty: every external one.
    pub interfaces: Vec<Selector>,
    /// Largest payload of a frame other than DATA this rank accepts.
    pub max_staged_payload: usize,
    pub connect_timeout: Duration,
    /// How long a dialler may take over each of its turns in the handshake before the
    /// connection is dropped (a genuine one answers within a progress round; a silent
    /// stranger must not hold a socket for long).
    pub handshake_limit: Duration,
    /// How long a peer may keep closing our dials before it challenged us (crowded by
    /// strangers' connections, or something else listens at its address) before that is an
    /// error naming it.
    pub dial_deadline: Duration,
    /// Name refused connections on stderr (`--verbose`).
    pub verbose: bool,
}

/// Connections in the handshake at once, beyond one per peer, before one is dropped: a
/// stranger opening connections by the thousand must not run the rank out of descriptors.
const SPARE_HANDSHAKES: usize = 64;
/// How long a rank's hello may take to follow its connection before the connection counts as
/// silent when one must be evicted (the dialler writes it right after connecting).
const HELLO_GRACE: Duration = Duration::from_millis(100);
/// Connections accepted in one poll at most, so that a flood of them cannot keep a poll from
/// the rank's own connections (the listener stays ready: the next poll takes more).
const ACCEPTS_PER_POLL: usize = 16;
/// How long the listener rests after accept(2) ran out of descriptors or memory: the pending
/// connection stays ready, and retrying at once would only spin (nginx rests 500 ms).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Refused connections named one by one under `--verbose`; after that, the first refused for
/// each reason and one line each time the count doubles, so that a flood of them cannot flood
/// the log.
const REFUSALS_NAMED: u64 = 8;

/// Epoll tokens: a connected peer's token is its rank.
const LISTENER: u64 = u64::MAX;
const DIALLED: u64 = 1 << 62;
const ACCEPTED: u64 = 1 << 61;

/// How long a finalizing rank waits for each peer to close its side.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

enum Link {
    /// No connection yet: the first frame dials.
    Idle,
    /// We dialled and are in the handshake; the peer has not taken the connection yet.
    Dialled(Dialling),
    /// The peer refused our dial because its own dial to us wins: it is on its way.
    AwaitingPeer,
    Connected(Conn),
    /// The peer finalized and closed.
    Closed,
}

/// Our dial, in the handshake.
struct Dialling {
    sock: TcpStream,
    /// Index of the address dialled in the peer's `dial`.
    at: usize,
    hand: Dialler,
    since: Instant,
    /// `None` while the challenge arrives; then when our proof went out.
    proved_at: Option<Instant>,
    challenge: Incoming<CHALLENGE_LEN>,
}

/// A connection someone dialled to us, in the handshake: nothing it says reaches a peer's
/// state until it proved it knows the job's secret.
struct Accepted {
    sock: TcpStream,
    addr: SocketAddr,
    /// When the dialler's turn to speak began.
    turn_since: Instant,
    stage: AcceptStage,
}

/// Where an accepted connection's handshake stands after reading from it.
enum Step {
    Wait,
    Proved(Rank),
    Refuse(Refusal),
}

enum AcceptStage {
    Hello(Incoming<HELLO_LEN>),
    Proof(Challenged, Incoming<PROOF_LEN>),
}

struct Peer {
    link: Link,
    /// Addresses to dial, best first; empty for peers reached another way.
    dial: Vec<SocketAddr>,
    /// Where and when to dial next, and when to give up.
    redial: Redial,
}

pub struct TcpTransport {
    rank: Rank,
    secret: JobSecret,
    listener: TcpListener,
    offered: Vec<IfAddr>,
    peers: Vec<Peer>,
    accepted: Slab<Accepted>,
    epoll: Epoll,
    ready: Vec<Ready>,
    config: TcpConfig,
    said_goodbye: bool,
    /// Connections refused in the handshake, for tests and `--verbose`.
    refused: u64,
    /// The reasons for refusals seen so far, for `--verbose`.
    refusal_kinds: Vec<std::mem::Discriminant<Refusal>>,
    /// Peers whose link is `Dialled`: while there are any, `poll` looks for silent ones.
    dialling: usize,
    /// Set while the listener rests after accept(2) ran out of resources (see `ACCEPT_PAUSE`).
    accepts_paused_until: Option<Instant>,
    /// Times it did, for `--verbose`.
    accept_pauses: u64,
    /// Polls left to skip while the sockets are quiet, and how many to skip each time (see
    /// `contract.rs`).
    rounds_to_skip: u32,
    quiet_rounds: u32,
    /// The engine's rank of each of this transport's ranks, where they differ: a bridge to
    /// spawned ranks numbers its ranks its own way (`engine/bridge.rs`); `None` for the
    /// world's TCP, whose ranks are the engine's.
    pub(crate) names: Option<Box<[Rank]>>,
    /// Where `send_blocks` gathers short runs, and where DATA for a receive laid out in
    /// blocks is read before its short runs are scattered, for every connection: `sendmsg`
    /// and `readv` are done with it when they return, so one is enough. Allocated on first
    /// use (`transport::scratch`).
    scratch: Box<[u8]>,
}

fn io_error(what: &str, e: io::Error) -> String {
    format!("{what}: {e}")
}

impl TcpTransport {
    /// Listens on every address, for peers to dial; only ranks that know `secret` get in.
    pub fn new(
        rank: Rank,
        size: u32,
        secret: &JobSecret,
        config: TcpConfig,
    ) -> Result<TcpTransport, String> {
        let all = addrs::interfaces().map_err(|e| io_error("listing network interfaces", e))?;
        let offered = addrs::choose(&all, &config.interfaces);
        if offered.is_empty() {
            let have: Vec<String> = all
                .iter()
                .map(|a| format!("{} {}/{}", a.interface, a.ip, a.prefix))
                .collect();
            return Err(format!(
                "no network address matches MPIRT_TCP_IF (this host has: {})",
                have.join(", ")
            ));
        }
        // A dual-stack socket takes IPv4 and IPv6 peers alike; IPv4 alone where IPv6 is off.
        let v6 = offered.iter().any(|a| a.ip.is_ipv6());
        let listener = TcpListener::bind("[::]:0")
            .or_else(|e| {
                if v6 {
                    Err(e)
                } else {
                    TcpListener::bind("0.0.0.0:0")
                }
            })
            .map_err(|e| io_error("listening for peers", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| io_error("listening for peers", e))?;
        // std listens with a backlog of 128, which strangers' connections made while this
        // rank computes outside the library could fill, and a rank's dial would then time
        // out; the kernel cuts a larger backlog to net.core.somaxconn (4096 by default).
        // SAFETY: listen(2) on a socket this function owns, bound above; no memory is passed.
        if unsafe { libc::listen(listener.as_raw_fd(), libc::c_int::MAX) } != 0 {
            return Err(io_error("listening for peers", io::Error::last_os_error()));
        }
        let epoll = Epoll::new().map_err(|e| io_error("epoll", e))?;
        epoll
            .add(&listener, LISTENER, interest(false))
            .map_err(|e| io_error("epoll", e))?;
        let peers = (0..size)
            .map(|_| Peer {
                link: Link::Idle,
                dial: Vec::new(),
                redial: Redial::default(),
            })
            .collect();
        Ok(TcpTransport {
            rank,
            secret: *secret,
            listener,
            offered,
            peers,
            accepted: Slab::new(),
            epoll,
            ready: Vec::with_capacity(64),
            config,
            said_goodbye: false,
            refused: 0,
            refusal_kinds: Vec::new(),
            dialling: 0,
            accepts_paused_until: None,
            accept_pauses: 0,
            rounds_to_skip: 0,
            quiet_rounds: 0,
            names: None,
            scratch: Box::default(),
        })
    }

    /// What peers need to reach this rank, for the key-value service.
    pub fn endpoint(&self) -> Result<String, String> {
        let port = self
            .listener
            .local_addr()
            .map_err(|e| io_error("listening for peers", e))?
            .port();
        Ok(addrs::encode_endpoint(port, &self.offered))
    }

    /// The addresses offered, for `--verbose`.
    pub fn offered(&self) -> String {
        let port = self.listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let list: Vec<String> = self
            .offered
            .iter()
            .map(|a| format!("{} ({})", SocketAddr::new(a.ip, port), a.interface))
            .collect();
        list.join(", ")
    }

    /// Makes `peer`, whose endpoint is `endpoint`, reachable over TCP.
    pub fn add_peer(&mut self, peer: Rank, endpoint: &str, same_host: bool) -> Result<(), String> {
        let published = addrs::decode_endpoint(endpoint)?;
        let dial = addrs::dial_order(&published, &self.offered, same_host);
        if dial.is_empty() {
            return Err(format!(
                "it offers no address this rank can reach ('{endpoint}'; loopback addresses \
                 reach only the same host): check MPIRT_TCP_IF (--tcp-if)"
            ));
        }
        self.peers[peer as usize].dial = dial;
        Ok(())
    }

    /// Writes what the connection takes of one frame to `peer` (dialling first if needed).
    /// After `Sent::Part`, the caller passes the same frame again until it went out whole.
    pub fn send(&mut self, peer: Rank, header: &[u8], payload: &[u8]) -> Result<Sent, PmlError> {
        self.send_with(peer, |conn| conn.send(header, payload))
    }

    /// [`send`](Self::send) of a frame whose payload is the packed bytes `range` of
    /// `blocks`, gathered from its blocks.
    ///
    /// # Safety
    /// As for `Transport::try_send_blocks`.
    pub unsafe fn send_blocks(
        &mut self,
        peer: Rank,
        header: &[u8],
        blocks: &Blocks,
        range: PackedRange,
    ) -> Result<Sent, PmlError> {
        // Lent out of `self` for the write, which borrows the peer's connection from it too.
        let mut scratch = std::mem::take(&mut self.scratch);
        // SAFETY: this function's contract; the scratch is this transport's own, apart from
        // the send's memory.
        let sent = self.send_with(peer, |conn| unsafe {
            conn.send_blocks(header, blocks, range, &mut scratch)
        });
        // Empty where the connection kept it for bytes it packed and the socket did not
        // take: made again at its next use.
        self.scratch = scratch;
        sent
    }

    /// A frame to `peer`, written by `write` on its connection (dialling first if needed).
    fn send_with(
        &mut self,
        peer: Rank,
        write: impl FnOnce(&mut Conn) -> io::Result<Sent>,
    ) -> Result<Sent, PmlError> {
        let p = &mut self.peers[peer as usize];
        match &mut p.link {
            Link::Connected(conn) => {
                if !conn.writable {
                    return Ok(Sent::Nothing);
                }
                let sent = write(conn).map_err(|e| {
                    PmlError::transport(
                        peer,
                        format!("connection lost while sending: {e} (did it die?)"),
                    )
                })?;
                if !conn.writable {
                    // Wake when there is room again.
                    self.epoll
                        .modify(&conn.sock, u64::from(peer), interest(true))
                        .map_err(|e| epoll_failed(peer, e))?;
                }
                Ok(sent)
            }
            Link::Idle => {
                if p.redial.may_dial() {
                    self.dial(peer)?;
                }
                Ok(Sent::Nothing)
            }
            Link::Dialled(_) | Link::AwaitingPeer => Ok(Sent::Nothing),
            Link::Closed => Err(PmlError::transport(
                peer,
                "it has finalized and closed its connection".to_string(),
            )),
        }
    }

    /// Dials `peer`'s addresses from the one `redial` names, round all of them but those
    /// found to be no rank of this job, until one connects.
    fn dial(&mut self, peer: Rank) -> Result<(), PmlError> {
        let p = &mut self.peers[peer as usize];
        let mut failures = Vec::new();
        // Whether every address tried timed out (rather than refusing or failing otherwise).
        let mut all_timed_out = true;
        let count = p.dial.len();
        for at in (0..count).map(|k| (p.redial.next + k) % count) {
            if p.redial.is_impostor(at) {
                continue;
            }
            let addr = p.dial[at];
            match TcpStream::connect_timeout(&addr, self.config.connect_timeout) {
                Ok(mut sock) => {
                    let nonce = handshake::nonce()
                        .map_err(|e| PmlError::transport(peer, format!("getrandom: {e}")))?;
                    let (hand, hello) = Dialler::new(&self.secret, self.rank, peer, nonce);
                    let ready = sock
                        .set_nodelay(true)
                        .and_then(|()| sock.write_all(&hello))
                        .and_then(|()| sock.set_nonblocking(true));
                    if let Err(e) = ready {
                        all_timed_out = false;
                        failures.push(format!("{addr}: {e}"));
                        continue;
                    }
                    self.epoll
                        .add(&sock, DIALLED | u64::from(peer), interest(false))
                        .map_err(|e| epoll_failed(peer, e))?;
                    p.link = Link::Dialled(Dialling {
                        sock,
                        at,
                        hand,
                        since: Instant::now(),
                        proved_at: None,
                        challenge: Incoming::new(),
                    });
                    self.dialling += 1;
                    return Ok(());
                }
                Err(e) => {
                    all_timed_out &= e.kind() == io::ErrorKind::TimedOut;
                    failures.push(format!("{addr}: {e}"));
                }
            }
        }
        if all_timed_out && !failures.is_empty() {
            // A peer's listen queue may be full of strangers' connections made while it
            // computed outside the library: the kernel then drops new connections. Dial again
            // after a pause, until the deadline, as for a dial dropped before its challenge.
            let at = p.redial.next;
            return p
                .redial
                .ended(
                    &p.dial,
                    at,
                    DialEnd::DroppedBeforeChallenge,
                    self.config.dial_deadline,
                )
                .map_err(|e| PmlError::transport(peer, format!("{e} ({})", failures.join("; "))));
        }
        Err(PmlError::transport(
            peer,
            format!(
                "cannot connect to it ({}{})",
                failures.join("; "),
                p.redial.impostor_note()
            ),
        ))
    }

    /// Accepts, answers and reads whatever is ready; returns how many frames reached `sink`.
    pub fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError> {
        self.epoll
            .wait(Duration::ZERO, &mut self.ready)
            .map_err(|e| epoll_failed(self.rank, e))?;
        let ready = std::mem::take(&mut self.ready);
        let mut frames = 0;
        let mut result = Ok(());
        for r in &ready {
            let step = match r.token {
                LISTENER => self.accept_some(),
                t if t & DIALLED != 0 => self.on_dial_answer((t & !DIALLED) as Rank),
                t if t & ACCEPTED != 0 => self.on_accepted((t & !ACCEPTED) as usize),
                t => self.on_connection(t as Rank, *r, sink).map(|n| frames += n),
            };
            if let Err(e) = step {
                result = Err(e);
                break;
            }
        }
        self.ready = ready;
        if result.is_ok() && !self.accepted.is_empty() {
            result = self.drop_silent();
        }
        if result.is_ok() && self.dialling > 0 {
            result = self.leave_silent_addresses();
        }
        if result.is_ok() {
            result = self.resume_accepting();
        }
        result.map(|()| frames)
    }

    /// Sleeps until a socket is ready or `timeout` passed (level-triggered: nothing is lost).
    pub fn wait(&mut self, timeout: Duration) {
        // An interrupted or failed wait only returns early; the next poll reports errors.
        let _ = self.epoll.wait(timeout, &mut self.ready);
    }

    /// Accepts a bounded number of the connections waiting, reading each one's hello at once.
    fn accept_some(&mut self) -> Result<(), PmlError> {
        for _ in 0..ACCEPTS_PER_POLL {
            match self.listener.accept() {
                Ok((sock, addr)) => self.admit(sock, addr)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    if !self.accept_failed(&e)? {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// Handles an accept(2) error other than "none waiting"; returns whether to accept on.
    fn accept_failed(&mut self, e: &io::Error) -> Result<bool, PmlError> {
        match e.raw_os_error() {
            // What accept(2) says to treat like EAGAIN on Linux (a connection that broke,
            // or a network error, already pending on it), and a firewall's refusal: that
            // connection is lost, the others are not.
            Some(
                libc::EINTR
                | libc::ECONNABORTED
                | libc::EPROTO
                | libc::ENETDOWN
                | libc::EHOSTUNREACH
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH
                | libc::EPERM,
            ) => Ok(true),
            // Out of descriptors or memory: the connection stays pending and the listener
            // ready, so rest instead of spinning (as nginx and libuv do), and say so.
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                self.epoll
                    .remove(&self.listener)
                    .map_err(|e| epoll_failed(self.rank, e))?;
                self.accepts_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                self.accept_pauses += 1;
                if self.config.verbose && self.accept_pauses.is_power_of_two() {
                    eprintln!(
                        "mpirt: rank {}: cannot accept a peer's connection: {e}; trying again \
                         in {} ms ({} times so far; raise the limit on open files, ulimit -n, \
                         if this lasts)",
                        self.rank,
                        ACCEPT_PAUSE.as_millis(),
                        self.accept_pauses
                    );
                }
                Ok(false)
            }
            _ => Err(PmlError::transport(
                self.rank,
                format!("accepting a peer's connection failed: {e}"),
            )),
        }
    }

    /// Watches the listener again once its rest after running out of resources is over.
    fn resume_accepting(&mut self) -> Result<(), PmlError> {
        if self
            .accepts_paused_until
            .is_some_and(|t| Instant::now() >= t)
        {
            self.accepts_paused_until = None;
            self.epoll
                .add(&self.listener, LISTENER, interest(false))
                .map_err(|e| epoll_failed(self.rank, e))?;
        }
        Ok(())
    }

    /// Starts the handshake on a connection just accepted.
    fn admit(&mut self, sock: TcpStream, addr: SocketAddr) -> Result<(), PmlError> {
        if sock.set_nonblocking(true).is_err() || sock.set_nodelay(true).is_err() {
            return Ok(());
        }
        let entry = self.accepted.vacant_entry();
        let key = entry.key();
        self.epoll
            .add(&sock, ACCEPTED | key as u64, interest(false))
            .map_err(|e| epoll_failed(self.rank, e))?;
        entry.insert(Accepted {
            sock,
            addr,
            turn_since: Instant::now(),
            stage: AcceptStage::Hello(Incoming::new()),
        });
        // A rank's hello usually came with its connection: read it now, so that a genuine
        // dial is challenged, and safe from eviction, before more strangers crowd in.
        self.on_accepted(key)?;
        if self.accepted.len() > self.peers.len() + SPARE_HANDSHAKES {
            self.evict();
        }
        Ok(())
    }

    /// Reads what a dialler sent so far and takes its handshake one step on: challenges a
    /// hello, checks a proof, and takes or refuses a connection that proved itself.
    fn on_accepted(&mut self, key: usize) -> Result<(), PmlError> {
        match self.accepted_step(key)? {
            Step::Wait => Ok(()),
            Step::Proved(from) => self.take_or_refuse(key, from),
            Step::Refuse(why) => {
                self.refuse(key, why);
                Ok(())
            }
        }
    }

    fn accepted_step(&mut self, key: usize) -> Result<Step, PmlError> {
        let Some(a) = self.accepted.get_mut(key) else {
            return Ok(Step::Wait);
        };
        let rest = match &mut a.stage {
            AcceptStage::Hello(hello) => hello.rest(),
            AcceptStage::Proof(_, proof) => proof.rest(),
        };
        let n = match a.sock.read(rest) {
            Ok(0) => return Ok(Step::Refuse(Refusal::Closed)),
            Ok(n) => n,
            Err(e) if not_yet(&e) => return Ok(Step::Wait),
            Err(_) => return Ok(Step::Refuse(Refusal::Closed)),
        };
        match &mut a.stage {
            AcceptStage::Hello(hello) => {
                hello.got += n;
                if handshake::not_a_hello(&hello.buf[..hello.got]) {
                    return Ok(Step::Refuse(Refusal::NotAHandshake));
                }
                if !hello.complete() {
                    return Ok(Step::Wait);
                }
                let nonce = handshake::nonce()
                    .map_err(|e| PmlError::transport(self.rank, format!("getrandom: {e}")))?;
                let size = self.peers.len() as u32;
                match handshake::challenge(&self.secret, self.rank, size, &hello.buf, nonce) {
                    Ok((challenged, message)) => {
                        // A fresh socket's buffer takes these few bytes whole.
                        if a.sock.write_all(&message).is_err() {
                            return Ok(Step::Refuse(Refusal::Closed));
                        }
                        a.stage = AcceptStage::Proof(challenged, Incoming::new());
                        a.turn_since = Instant::now();
                        Ok(Step::Wait)
                    }
                    Err(why) => Ok(Step::Refuse(why)),
                }
            }
            AcceptStage::Proof(challenged, proof) => {
                proof.got += n;
                if !proof.complete() {
                    return Ok(Step::Wait);
                }
                Ok(match challenged.check(&self.secret, &proof.buf) {
                    Ok(from) => Step::Proved(from),
                    Err(why) => Step::Refuse(why),
                })
            }
        }
    }

    /// A dialler that proved to be rank `from` is taken, unless the crossing-dials rule gives
    /// the pair to another connection.
    fn take_or_refuse(&mut self, key: usize, from: Rank) -> Result<(), PmlError> {
        let take = match self.peers[from as usize].link {
            Link::Idle | Link::AwaitingPeer => true,
            Link::Dialled(_) => from < self.rank,
            Link::Connected(_) | Link::Closed => false,
        };
        let Accepted { mut sock, .. } = self.accepted.remove(key);
        if !take {
            let _ = self.epoll.remove(&sock);
            // Best effort: the dialler may have taken our own dial already and dropped this.
            let _ = sock.write_all(&[handshake::REFUSED]);
            return Ok(());
        }
        if let Link::Dialled(ours) = &self.peers[from as usize].link {
            let _ = self.epoll.remove(&ours.sock);
            self.dialling -= 1;
        }
        sock.write_all(&[handshake::TAKEN]).map_err(|e| {
            PmlError::transport(from, format!("answering its connection failed: {e}"))
        })?;
        self.epoll
            .modify(&sock, u64::from(from), interest(false))
            .map_err(|e| epoll_failed(from, e))?;
        self.peers[from as usize].link = Link::Connected(Conn::new(sock, self.staged_frame()));
        Ok(())
    }

    /// Closes and forgets a connection that failed the handshake, and counts it.
    fn refuse(&mut self, key: usize, why: Refusal) {
        let a = self.accepted.remove(key);
        if why == Refusal::Crowded && matches!(a.stage, AcceptStage::Proof(..)) {
            // A challenged dialler may be a rank of the job crowded out by strangers' hellos:
            // it is told so, to dial again rather than count this as a refusal. Best effort:
            // a stranger's full socket buffer must not hold the rank up.
            let _ = (&a.sock).write(&[handshake::CROWDED]);
        }
        let _ = self.epoll.remove(&a.sock);
        self.refused += 1;
        let kind = std::mem::discriminant(&why);
        let new_kind = !self.refusal_kinds.contains(&kind);
        if new_kind {
            self.refusal_kinds.push(kind);
        }
        if self.config.verbose
            && (self.refused <= REFUSALS_NAMED || self.refused.is_power_of_two() || new_kind)
        {
            // One write (see Engine::new's report), so that the line stays whole.
            let line = format!(
                "mpirt: rank {}: refused a connection from {}: {why} ({} refused so far)\n",
                self.rank, a.addr, self.refused
            );
            eprint!("{line}");
        }
    }

    /// Refuses the connections whose dialler let its turn pass the handshake deadline.
    fn drop_silent(&mut self) -> Result<(), PmlError> {
        let limit = self.config.handshake_limit;
        let expired: Vec<usize> = self
            .accepted
            .iter()
            .filter(|(_, a)| a.turn_since.elapsed() > limit)
            .map(|(key, _)| key)
            .collect();
        for key in expired {
            // What arrived while this rank was busy elsewhere still counts.
            self.on_accepted(key)?;
            if self
                .accepted
                .get(key)
                .is_some_and(|a| a.turn_since.elapsed() > limit)
            {
                self.refuse(key, Refusal::Silent);
            }
        }
        Ok(())
    }

    /// Refuses one connection of too many in the handshake: the one that has waited longest
    /// for a whole hello, where it has waited past `HELLO_GRACE` (a rank's hello comes with its
    /// dial, a silent stranger's never); else one drawn at random. Strangers can say whole
    /// hellos (a hello holds no secret) and so fill the handshake with connections that wait
    /// for a proof never to come: under any fixed order a flood of them would evict a genuine
    /// dial every time (the oldest waiting, or the only one whose hello is still on its way),
    /// while a random draw lets it through after a few dials.
    fn evict(&mut self) {
        let silent = self
            .accepted
            .iter()
            .filter(|(_, a)| {
                matches!(a.stage, AcceptStage::Hello(..)) && a.turn_since.elapsed() > HELLO_GRACE
            })
            .min_by_key(|(_, a)| a.turn_since)
            .map(|(key, _)| key);
        let victim = silent.or_else(|| {
            // Without randomness (getrandom failed), the first: still bounded, if unfair.
            let mut draw = [0u8; 8];
            let nth = crate::random::fill(&mut draw)
                .map(|()| u64::from_le_bytes(draw) % self.accepted.len() as u64)
                .unwrap_or(0);
            self.accepted.iter().nth(nth as usize).map(|(key, _)| key)
        });
        if let Some(key) = victim {
            self.refuse(key, Refusal::Crowded);
        }
    }

    /// Connections refused in the handshake so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    fn staged_frame(&self) -> usize {
        self.config.max_staged_payload + crate::wire::MAX_HEADER_LEN
    }

    /// Takes our dial's handshake one step on: checks the peer's challenge and proves
    /// ourselves, then reads whether the peer took the connection (frames may follow) or
    /// refused it because its own dial wins.
    fn on_dial_answer(&mut self, peer: Rank) -> Result<(), PmlError> {
        let limit = self.config.handshake_limit;
        let p = &mut self.peers[peer as usize];
        let Link::Dialled(d) = &mut p.link else {
            return Ok(());
        };
        let verdict = if d.proved_at.is_none() {
            match d.sock.read(d.challenge.rest()) {
                Ok(0) => Err(DialEnd::DroppedBeforeChallenge),
                Ok(n) => {
                    d.challenge.got += n;
                    if !d.challenge.complete() {
                        return Ok(());
                    }
                    match d.hand.answer(&d.challenge.buf) {
                        Ok(proof) => {
                            p.redial.challenged();
                            if d.sock.write_all(&proof).is_ok() {
                                d.proved_at = Some(Instant::now());
                                return Ok(());
                            }
                            Err(DialEnd::DroppedAfterChallenge { late: false })
                        }
                        Err(why) => Err(DialEnd::Impostor(why.to_string())),
                    }
                }
                Err(e) if not_yet(&e) => return Ok(()),
                Err(_) => Err(DialEnd::DroppedBeforeChallenge),
            }
        } else {
            let mut answer = [0u8; 1];
            match d.sock.read(&mut answer) {
                Ok(1) if answer[0] == handshake::TAKEN || answer[0] == handshake::REFUSED => {
                    Ok(answer[0])
                }
                Ok(1) if answer[0] == handshake::CROWDED => Err(DialEnd::Crowded),
                Err(e) if not_yet(&e) => return Ok(()),
                // Dropped without a verdict. The peer drops a dialler that let its turn pass
                // the deadline (we were busy outside the library): then simply dial again.
                Ok(_) | Err(_) => Err(DialEnd::DroppedAfterChallenge {
                    late: d.proved_at.is_some_and(|t| t - d.since > limit / 2),
                }),
            }
        };
        self.dial_ended(peer, verdict)
    }

    /// Our dial to `peer` got its verdict, or ended without one.
    fn dial_ended(&mut self, peer: Rank, verdict: Result<u8, DialEnd>) -> Result<(), PmlError> {
        let max_frame = self.staged_frame();
        let p = &mut self.peers[peer as usize];
        let Link::Dialled(d) = std::mem::replace(&mut p.link, Link::AwaitingPeer) else {
            unreachable!("only a dial in the handshake ends");
        };
        self.dialling -= 1;
        match verdict {
            Ok(handshake::TAKEN) => {
                p.redial.answered();
                self.epoll
                    .modify(&d.sock, u64::from(peer), interest(false))
                    .map_err(|e| epoll_failed(peer, e))?;
                p.link = Link::Connected(Conn::new(d.sock, max_frame));
            }
            Ok(_) => {
                p.redial.answered();
                let _ = self.epoll.remove(&d.sock);
            }
            Err(end) => {
                let _ = self.epoll.remove(&d.sock);
                p.redial
                    .ended(&p.dial, d.at, end, self.config.dial_deadline)
                    .map_err(|e| PmlError::transport(peer, e))?;
                p.link = Link::Idle;
            }
        }
        Ok(())
    }

    /// Gives up dials that got no challenge within the handshake deadline where the peer has
    /// another address: what listens at this one may be silent and no rank of the job. (With
    /// one address the dial waits: a rank busy outside the library answers when it is back.)
    fn leave_silent_addresses(&mut self) -> Result<(), PmlError> {
        let limit = self.config.handshake_limit;
        let silent: Vec<Rank> = (0..self.peers.len() as Rank)
            .filter(|&r| {
                let p = &self.peers[r as usize];
                let Link::Dialled(d) = &p.link else {
                    return false;
                };
                !d.challenge.complete()
                    && d.since.elapsed() > limit
                    && (0..p.dial.len()).any(|i| i != d.at && !p.redial.is_impostor(i))
            })
            .collect();
        for peer in silent {
            self.dial_ended(peer, Err(DialEnd::Silent))?;
        }
        Ok(())
    }

    fn on_connection(
        &mut self,
        peer: Rank,
        ready: Ready,
        sink: &mut impl Sink,
    ) -> Result<usize, PmlError> {
        let Some(p) = self.peers.get_mut(peer as usize) else {
            return Ok(0);
        };
        let Link::Connected(conn) = &mut p.link else {
            return Ok(0);
        };
        if ready.writable && !conn.writable {
            conn.writable = true;
            self.epoll
                .modify(&conn.sock, u64::from(peer), interest(false))
                .map_err(|e| epoll_failed(peer, e))?;
        }
        if !ready.readable {
            return Ok(0);
        }
        let (frames, state) = conn.receive(peer, sink, &mut self.scratch)?;
        if state == Received::Closed {
            let _ = self.epoll.remove(&conn.sock);
            p.link = Link::Closed;
        }
        Ok(frames)
    }

    /// How many peers this rank has a connection to (for tests and `--verbose`).
    pub fn connections(&self) -> usize {
        self.peers
            .iter()
            .filter(|p| matches!(p.link, Link::Connected(_)))
            .count()
    }
}

/// A non-blocking read that found nothing yet (or was interrupted): try again when ready.
fn not_yet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

fn epoll_failed(peer: Rank, e: io::Error) -> PmlError {
    PmlError::transport(peer, format!("epoll failed: {e}"))
}

impl TcpTransport {
    /// Says goodbye on every connection and stops sending: a peer that sees this rank's end
    /// of file then knows it finalized rather than crashed. Dropping the transport does this
    /// first if it was not done.
    pub fn say_goodbye(&mut self) {
        for p in &mut self.peers {
            if let Link::Connected(conn) = &mut p.link {
                if conn.say_goodbye().is_err() {
                    p.link = Link::Closed;
                }
            }
        }
        self.said_goodbye = true;
    }
}

impl Drop for TcpTransport {
    /// Waits for each peer to close its side too, so that no frame this rank sent last is
    /// lost to a reset (closing with unread bytes resets the connection).
    fn drop(&mut self) {
        if !self.said_goodbye {
            self.say_goodbye();
        }
        for p in &mut self.peers {
            if let Link::Connected(conn) = &mut p.link {
                let _ = conn.drain(DRAIN_LIMIT);
            }
        }
    }
}
