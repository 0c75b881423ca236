//! TCP transport between ranks on different hosts (and between local ranks on request).
//!
//! One connection per pair of ranks, opened on the first frame either side sends. Both sides
//! may dial at once; the dialler says who it is in a hello and waits for the other side to
//! take the connection, and when two dials cross, the one from the lower rank wins on both
//! sides (the other is refused, and its dialler waits for the winner to arrive). So exactly
//! one connection carries each pair's frames, in order, in both directions.
//!
//! Sockets are non-blocking and watched by one level-triggered epoll set, which a progress
//! round polls and a waiting rank sleeps on. TCP cannot read a peer's memory, so rendezvous
//! data comes in DATA frames after a GET (see `conn.rs` for how they land in place).

mod addrs;
mod conn;
mod contract;
#[cfg(test)]
mod tests;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use slab::Slab;

pub use addrs::parse_selectors;
pub use contract::TCP_MAX_FRAME;

use super::epoll::{interest, Epoll, Ready};
use super::{Sent, Sink};
use crate::envelope::Rank;
use crate::error::PmlError;
use addrs::{IfAddr, Selector};
use conn::{Conn, Received};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Which addresses to offer peers (`--tcp-if`); empty: every external one.
    pub interfaces: Vec<Selector>,
    /// Largest payload of a frame other than DATA this rank accepts.
    pub max_staged_payload: usize,
    pub connect_timeout: Duration,
}

/// The dialler's first 16 bytes: who it is, and of which job (a stray or stale connection
/// from another job must not be taken for a peer).
const HELLO_MAGIC: &[u8; 8] = b"mpirt-tc";
const HELLO_LEN: usize = 16;
/// The answer that takes a dialled connection; a refused one is closed instead.
const TAKEN: u8 = 1;

/// Epoll tokens: a connected peer's token is its rank.
const LISTENER: u64 = u64::MAX;
const DIALLED: u64 = 1 << 62;
const ACCEPTED: u64 = 1 << 61;

/// How long a finalizing rank waits for each peer to close its side.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

enum Link {
    /// No connection yet: the first frame dials.
    Idle,
    /// We dialled and said hello; the peer has not taken the connection yet.
    Dialled(TcpStream),
    /// The peer refused our dial because its own dial to us wins: it is on its way.
    AwaitingPeer,
    Connected(Conn),
    /// The peer finalized and closed.
    Closed,
}

struct Accepted {
    sock: TcpStream,
    hello: [u8; HELLO_LEN],
    got: usize,
}

struct Peer {
    link: Link,
    /// Addresses to dial, best first; empty for peers reached another way.
    dial: Vec<SocketAddr>,
}

pub struct TcpTransport {
    rank: Rank,
    job_token: u32,
    listener: TcpListener,
    offered: Vec<IfAddr>,
    peers: Vec<Peer>,
    accepted: Slab<Accepted>,
    epoll: Epoll,
    ready: Vec<Ready>,
    config: TcpConfig,
    said_goodbye: bool,
    /// Polls left to skip while the sockets are quiet, and how many to skip each time (see
    /// `contract.rs`).
    rounds_to_skip: u32,
    quiet_rounds: u32,
}

fn io_error(what: &str, e: io::Error) -> String {
    format!("{what}: {e}")
}

/// A short fingerprint of the job id (FNV-1a), enough to tell jobs apart on one port.
fn job_token(job_id: &str) -> u32 {
    job_id.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

impl TcpTransport {
    /// Listens on every address, for peers to dial.
    pub fn new(
        rank: Rank,
        size: u32,
        job_id: &str,
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
        let epoll = Epoll::new().map_err(|e| io_error("epoll", e))?;
        epoll
            .add(&listener, LISTENER, interest(false))
            .map_err(|e| io_error("epoll", e))?;
        let peers = (0..size)
            .map(|_| Peer {
                link: Link::Idle,
                dial: Vec::new(),
            })
            .collect();
        Ok(TcpTransport {
            rank,
            job_token: job_token(job_id),
            listener,
            offered,
            peers,
            accepted: Slab::new(),
            epoll,
            ready: Vec::with_capacity(64),
            config,
            said_goodbye: false,
            rounds_to_skip: 0,
            quiet_rounds: 0,
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
                "rank {peer} offers no address this rank can reach ('{endpoint}'; loopback \
                 addresses reach only the same host): check MPIRT_TCP_IF (--tcp-if)"
            ));
        }
        self.peers[peer as usize].dial = dial;
        Ok(())
    }

    /// Writes what the connection takes of one frame to `peer` (dialling first if needed).
    /// After `Sent::Part`, the caller passes the same frame again until it went out whole.
    pub fn send(&mut self, peer: Rank, header: &[u8], payload: &[u8]) -> Result<Sent, PmlError> {
        let p = &mut self.peers[peer as usize];
        match &mut p.link {
            Link::Connected(conn) => {
                if !conn.writable {
                    return Ok(Sent::Nothing);
                }
                let sent = conn.send(header, payload).map_err(|e| {
                    PmlError::transport(
                        peer,
                        format!("connection lost while sending: {e} (did rank {peer} die?)"),
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
                self.dial(peer)?;
                Ok(Sent::Nothing)
            }
            Link::Dialled(_) | Link::AwaitingPeer => Ok(Sent::Nothing),
            Link::Closed => Err(PmlError::transport(
                peer,
                format!("rank {peer} has finalized and closed its connection"),
            )),
        }
    }

    fn dial(&mut self, peer: Rank) -> Result<(), PmlError> {
        let p = &mut self.peers[peer as usize];
        let mut failures = Vec::new();
        for addr in &p.dial {
            match TcpStream::connect_timeout(addr, self.config.connect_timeout) {
                Ok(mut sock) => {
                    let mut hello = [0u8; HELLO_LEN];
                    hello[..8].copy_from_slice(HELLO_MAGIC);
                    hello[8..12].copy_from_slice(&self.job_token.to_le_bytes());
                    hello[12..].copy_from_slice(&self.rank.to_le_bytes());
                    let ready = sock
                        .set_nodelay(true)
                        .and_then(|()| sock.write_all(&hello))
                        .and_then(|()| sock.set_nonblocking(true));
                    if let Err(e) = ready {
                        failures.push(format!("{addr}: {e}"));
                        continue;
                    }
                    self.epoll
                        .add(&sock, DIALLED | u64::from(peer), interest(false))
                        .map_err(|e| epoll_failed(peer, e))?;
                    p.link = Link::Dialled(sock);
                    return Ok(());
                }
                Err(e) => failures.push(format!("{addr}: {e}")),
            }
        }
        Err(PmlError::transport(
            peer,
            format!("cannot connect to rank {peer} ({})", failures.join("; ")),
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
                LISTENER => self.accept_all(),
                t if t & DIALLED != 0 => self.on_dial_answer((t & !DIALLED) as Rank),
                t if t & ACCEPTED != 0 => self.on_hello((t & !ACCEPTED) as usize),
                t => self.on_connection(t as Rank, *r, sink).map(|n| frames += n),
            };
            if let Err(e) = step {
                result = Err(e);
                break;
            }
        }
        self.ready = ready;
        result.map(|()| frames)
    }

    /// Sleeps until a socket is ready or `timeout` passed (level-triggered: nothing is lost).
    pub fn wait(&mut self, timeout: Duration) {
        // An interrupted or failed wait only returns early; the next poll reports errors.
        let _ = self.epoll.wait(timeout, &mut self.ready);
    }

    fn accept_all(&mut self) -> Result<(), PmlError> {
        loop {
            match self.listener.accept() {
                Ok((sock, _)) => {
                    if sock.set_nonblocking(true).is_err() || sock.set_nodelay(true).is_err() {
                        continue;
                    }
                    let entry = self.accepted.vacant_entry();
                    self.epoll
                        .add(&sock, ACCEPTED | entry.key() as u64, interest(false))
                        .map_err(|e| epoll_failed(self.rank, e))?;
                    entry.insert(Accepted {
                        sock,
                        hello: [0; HELLO_LEN],
                        got: 0,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of descriptors and the like: the dialler retries nothing, so say so.
                Err(e) => {
                    return Err(PmlError::transport(
                        self.rank,
                        format!("accepting a peer's connection failed: {e}"),
                    ))
                }
            }
        }
    }

    /// Reads a dialler's hello and takes or refuses its connection.
    fn on_hello(&mut self, key: usize) -> Result<(), PmlError> {
        let Some(a) = self.accepted.get_mut(key) else {
            return Ok(());
        };
        let got = a.got;
        match a.sock.read(&mut a.hello[got..]) {
            Ok(0) => {
                self.forget_accepted(key);
                return Ok(());
            }
            Ok(n) => a.got += n,
            Err(e) if not_yet(&e) => return Ok(()),
            Err(_) => {
                self.forget_accepted(key);
                return Ok(());
            }
        }
        if a.got < HELLO_LEN {
            return Ok(());
        }
        let hello = a.hello;
        let from = u32::from_le_bytes(hello[12..].try_into().expect("4 bytes"));
        let genuine = &hello[..8] == HELLO_MAGIC
            && hello[8..12] == self.job_token.to_le_bytes()
            && (from as usize) < self.peers.len()
            && from != self.rank;
        if !genuine {
            // Not a rank of this job (a port scanner, a stale job): not ours to answer.
            self.forget_accepted(key);
            return Ok(());
        }
        let take = match self.peers[from as usize].link {
            Link::Idle | Link::AwaitingPeer => true,
            Link::Dialled(_) => from < self.rank,
            Link::Connected(_) | Link::Closed => false,
        };
        let Accepted { mut sock, .. } = self.accepted.remove(key);
        if !take {
            let _ = self.epoll.remove(&sock);
            return Ok(());
        }
        if let Link::Dialled(ours) = &self.peers[from as usize].link {
            let _ = self.epoll.remove(ours);
        }
        sock.write_all(&[TAKEN]).map_err(|e| {
            PmlError::transport(
                from,
                format!("answering rank {from}'s connection failed: {e}"),
            )
        })?;
        self.epoll
            .modify(&sock, u64::from(from), interest(false))
            .map_err(|e| epoll_failed(from, e))?;
        self.peers[from as usize].link = Link::Connected(Conn::new(sock, self.staged_frame()));
        Ok(())
    }

    fn forget_accepted(&mut self, key: usize) {
        let a = self.accepted.remove(key);
        let _ = self.epoll.remove(&a.sock);
    }

    fn staged_frame(&self) -> usize {
        self.config.max_staged_payload + crate::wire::MAX_HEADER_LEN
    }

    /// The peer took our dial (and frames may follow), or refused it because its own wins.
    fn on_dial_answer(&mut self, peer: Rank) -> Result<(), PmlError> {
        let max_frame = self.staged_frame();
        let p = &mut self.peers[peer as usize];
        let Link::Dialled(sock) = &mut p.link else {
            return Ok(());
        };
        let mut answer = [0u8; 1];
        let taken = match sock.read(&mut answer) {
            Ok(1) if answer[0] == TAKEN => true,
            Ok(_) => false,
            Err(e) if not_yet(&e) => return Ok(()),
            Err(_) => false,
        };
        let Link::Dialled(sock) = std::mem::replace(&mut p.link, Link::AwaitingPeer) else {
            unreachable!("checked above");
        };
        if taken {
            self.epoll
                .modify(&sock, u64::from(peer), interest(false))
                .map_err(|e| epoll_failed(peer, e))?;
            p.link = Link::Connected(Conn::new(sock, max_frame));
        } else {
            let _ = self.epoll.remove(&sock);
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
        let (frames, state) = conn.receive(peer, sink)?;
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
