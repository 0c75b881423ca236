//! TCP under the transport contract: its wire-up from the bootstrap, its limits, and how a
//! rank with cheaper transports polls its sockets.

use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use super::{parse_selectors, JobSecret, Renamed, TcpConfig, TcpTransport};
use crate::blocks::{Blocks, PackedRange};
use crate::config::EngineConfig;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::nap::{Nap, NapStart};
use crate::pml_api::EngineError;
use crate::transport::{Caps, Job, Peer, Reading, Sent, Sink, Transport};
use crate::wire::{RemoteKey, DATA_HEADER_LEN};

/// Largest TCP frame: rendezvous data is streamed in DATA frames of up to this size, each
/// read in place by the receiver, so it bounds only how long control frames wait behind one.
pub const TCP_MAX_FRAME: usize = 4 << 20;
/// Progress rounds a rank with shared-memory peers skips polling quiet TCP sockets.
const TCP_QUIET_ROUNDS: u32 = 16;
/// How long dialling one of a peer's addresses may take before the next is tried.
const TCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a rank dialling over TCP may take over each of its turns in the handshake: a
/// genuine rank answers within a progress round, and one busy outside the library longer
/// than this only dials again; a stranger holds a socket no longer.
const TCP_HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);
/// How long a peer may keep closing our dials before challenging us before that is an error:
/// long enough to outlast a flood of strangers' connections that crowds the peer.
const TCP_DIAL_DEADLINE: Duration = Duration::from_secs(60);

fn failed(e: String) -> EngineError {
    EngineError::Transport(format!("TCP: {e}"))
}

impl TcpTransport {
    /// Listens and publishes this rank's endpoint. `polled_cheaply`: another transport is
    /// polled every round at little cost (shared memory), so quiet sockets are polled only
    /// every few rounds, a poll being a syscall.
    pub fn open(job: &mut Job, polled_cheaply: bool) -> Result<TcpTransport, EngineError> {
        let secret = job.wireup.job_secret().map_err(EngineError::Wireup)?;
        let t = TcpTransport::listen(job.rank, job.size, &secret, &job.config, polled_cheaply)?;
        let endpoint = t.endpoint().map_err(failed)?;
        job.put(&format!("pml.tcp.{}", job.rank), endpoint.as_bytes())?;
        Ok(t)
    }

    /// Listens as rank `rank` of `size` ranks that share `secret`, with `config`'s
    /// settings: the part of `open` that needs no key-value exchange, which a bridge to
    /// spawned ranks (`engine/bridge.rs`) makes its own.
    pub fn listen(
        rank: Rank,
        size: u32,
        secret: &JobSecret,
        config: &EngineConfig,
        polled_cheaply: bool,
    ) -> Result<TcpTransport, EngineError> {
        let interfaces = parse_selectors(&config.tcp_interfaces)
            .map_err(|e| EngineError::Config(format!("MPIRT_TCP_IF (--tcp-if): {e}")))?;
        let tcp_config = TcpConfig {
            interfaces,
            max_staged_payload: config.tcp_eager_limit,
            connect_timeout: TCP_CONNECT_TIMEOUT,
            handshake_limit: TCP_HANDSHAKE_LIMIT,
            dial_deadline: TCP_DIAL_DEADLINE,
            verbose: config.verbose,
        };
        let mut t = TcpTransport::new(rank, size, secret, tcp_config).map_err(failed)?;
        if polled_cheaply {
            t.quiet_rounds = TCP_QUIET_ROUNDS;
        }
        Ok(t)
    }

    /// Makes every rank of `unclaimed` but this one reachable; carries them.
    pub fn connect_peers(
        &mut self,
        job: &mut Job,
        unclaimed: &[Rank],
    ) -> Result<Vec<Rank>, EngineError> {
        let peers: Vec<Rank> = unclaimed
            .iter()
            .copied()
            .filter(|&r| r != job.rank)
            .collect();
        for &r in &peers {
            let endpoint = job.get(r, &format!("pml.tcp.{r}"))?;
            let same_host = job.hosts[r as usize] == job.host();
            self.add_peer(r, &String::from_utf8_lossy(&endpoint), same_host)
                .map_err(|e| failed(format!("rank {r}: {e}")))?;
        }
        Ok(peers)
    }
}

/// A failure of a bridge's connection under the engine's name of the peer (so that the
/// engine's errors name its host), as `Renamed` hands on what arrives.
fn renamed_error(e: PmlError, names: Option<&[Rank]>) -> PmlError {
    match (e, names) {
        (PmlError::Transport(mut failure), Some(names)) => {
            failure.peer = names
                .get(failure.peer as usize)
                .copied()
                .unwrap_or(failure.peer);
            PmlError::Transport(failure)
        }
        (e, _) => e,
    }
}

impl Transport for TcpTransport {
    fn caps(&self) -> Caps {
        Caps {
            eager_limit: self.config.max_staged_payload,
            max_frame: TCP_MAX_FRAME,
            remote_read: false,
            remote_write: false,
            rma_by_default: false,
            atomics: false,
            sends_complete_on_return: false,
            max_pieces: 3,
        }
    }

    /// `peer.index` is this transport's rank of the peer: the world rank, or its rank
    /// among a bridge's ranks (see `names`).
    fn try_send(&mut self, peer: Peer, header: &[u8], payload: &[u8]) -> Result<Sent, PmlError> {
        self.send(peer.index, header, payload)
            .map_err(|e| renamed_error(e, self.names.as_deref()))
    }

    unsafe fn try_send_blocks(
        &mut self,
        peer: Peer,
        header: &[u8],
        blocks: &Blocks,
        range: PackedRange,
    ) -> Result<Option<Sent>, PmlError> {
        // SAFETY: this function's contract, passed on.
        unsafe { self.send_blocks(peer.index, header, blocks, range) }
            .map(Some)
            .map_err(|e| renamed_error(e, self.names.as_deref()))
    }

    /// Every frame: a send of a non-contiguous buffer is never packed into a copy.
    fn streams_blocks(&self) -> bool {
        true
    }

    fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError> {
        if self.rounds_to_skip > 0 {
            self.rounds_to_skip -= 1;
            return Ok(0);
        }
        let n = match self.names.take() {
            None => TcpTransport::poll(self, sink)?,
            Some(names) => {
                let polled = TcpTransport::poll(
                    self,
                    &mut Renamed {
                        sink,
                        names: &names,
                    },
                );
                self.names = Some(names);
                polled?
            }
        };
        if n == 0 {
            self.rounds_to_skip = self.quiet_rounds;
        }
        Ok(n)
    }

    /// Sockets must be polled to know.
    fn has_work(&self) -> bool {
        true
    }

    fn read(
        &mut self,
        peer: Rank,
        _key: RemoteKey,
        _target: &mut [u8],
        _token: u64,
    ) -> Result<Reading, PmlError> {
        Err(PmlError::transport(
            peer,
            "a remote read over TCP, which cannot read a peer's memory (its rendezvous data \
             comes in DATA frames)"
                .to_string(),
        ))
    }

    fn sleep(&mut self, timeout: Duration) -> Result<(), PmlError> {
        self.wait(timeout);
        self.rounds_to_skip = 0;
        Ok(())
    }

    fn wake_fd(&mut self) -> Result<Option<RawFd>, EngineError> {
        Ok(Some(self.epoll.as_raw_fd()))
    }

    /// Level-triggered: whatever is ready keeps the wake fd readable.
    fn before_wait(&mut self) -> Result<bool, PmlError> {
        Ok(false)
    }

    /// Whatever woke the rank may have come over TCP: look there on the next round.
    fn after_wait(&mut self) {
        self.rounds_to_skip = 0;
    }

    /// On the epoll set, as `sleep`: level-triggered, so nothing is slept through.
    fn begin_nap(&mut self) -> Result<NapStart, PmlError> {
        Ok(NapStart::Sleep(Nap::on_fd(self.epoll.as_raw_fd())))
    }

    fn end_nap(&mut self, _timed_out: bool) {
        self.after_wait();
    }

    fn describe(&self, peers: usize) -> String {
        format!(
            "{peers} ranks over tcp from {}, eager up to {} bytes, rendezvous by GET with the \
             data read in place",
            self.offered(),
            self.config
                .max_staged_payload
                .min(TCP_MAX_FRAME - DATA_HEADER_LEN)
        )
    }
}
