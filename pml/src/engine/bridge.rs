//! Peers met after start-up: the ranks a spawn started and their parents (MPI's dynamic
//! processes). Both sides are running engines, each with its own world, so they meet over a
//! bridge: a TCP transport of their own, over which the parents are ranks `0..parents` and
//! the children `parents..parents + children` (the bridge's numbering, the same on both
//! sides), authenticated by a secret the parents' root made for this spawn. The layer above
//! trades each side's endpoints (`Bridge::endpoint`) between the two groups however it can
//! (mpirt: collectives inside each group, one socket between the roots) and hands them to
//! `join_bridge`, which gives each process of the other side the engine's next free rank
//! (the engine's names are its own: a parent's world ranks, then each spawn's children in
//! turn) and routes it over the bridge.
//!
//! TCP, even between processes of one host: the shared-memory segment is made for a fixed
//! set of ranks at start-up, and TCP needs nothing but a listening socket to take new ones.

use crate::envelope::Rank;
use crate::pml_api::EngineError;
use crate::transport::tcp::{JobSecret, TcpTransport};
use crate::transport::{AnyTransport, Transport, WakeSet};

use super::{Engine, Route};

/// A bridge listening, before it knows the other side: what `Engine::open_bridge` made.
pub struct Bridge {
    tcp: TcpTransport,
    rank: Rank,
    size: u32,
}

/// A process of the other side, as its own side published it.
pub struct BridgePeer {
    /// Its rank on the bridge.
    pub rank: Rank,
    pub host: String,
    /// What its `Bridge::endpoint` said.
    pub endpoint: String,
    /// What errors call it: its rank as users know it, in its own job ("rank 1 of spawned
    /// job 1 (...)"), which neither the bridge's numbering nor the engine's says.
    pub name: String,
}

impl Bridge {
    /// What the other side needs to reach this process over the bridge.
    pub fn endpoint(&self) -> Result<String, EngineError> {
        self.tcp
            .endpoint()
            .map_err(|e| EngineError::Transport(format!("TCP bridge: {e}")))
    }
}

impl Engine {
    /// How many ranks the engine reaches: the world's, then each bridge's in turn.
    pub fn reachable(&self) -> u32 {
        self.routes.len() as u32
    }

    /// Listens as rank `rank` of a bridge of `size` ranks whose members know `secret`.
    pub fn open_bridge(
        &mut self,
        rank: Rank,
        size: u32,
        secret: &JobSecret,
    ) -> Result<Bridge, EngineError> {
        // Route::transport is a u8 whose largest value means "no route".
        if self.transports.len() + 1 >= u8::MAX as usize {
            let bridges = self
                .transports
                .iter()
                .filter(|t| matches!(t, AnyTransport::Tcp(tcp) if tcp.names.is_some()))
                .count();
            return Err(EngineError::Config(format!(
                "this process already joined {bridges} bridges to spawned or parent ranks, the \
                 most one process can (beside its world's {} transports)",
                self.transports.len() - bridges
            )));
        }
        let tcp = TcpTransport::listen(rank, size, secret, &self.config, self.peer_fed > 0)?;
        Ok(Bridge { tcp, rank, size })
    }

    /// Makes every process of `peers` (the other side of the bridge, in its rank order)
    /// reachable, and returns the engine's rank of each, in the same order.
    pub fn join_bridge(
        &mut self,
        bridge: Bridge,
        peers: &[BridgePeer],
    ) -> Result<Vec<Rank>, EngineError> {
        let Bridge {
            mut tcp,
            rank,
            size,
        } = bridge;
        if let Some(stray) = peers.iter().find(|p| p.rank >= size || p.rank == rank) {
            return Err(EngineError::Transport(format!(
                "TCP bridge: rank {} of a bridge of {size} ranks, where this process is rank \
                 {rank}, is not another process of it",
                stray.rank
            )));
        }
        let own_host = crate::transport::hostname();
        let mut names: Vec<Rank> = vec![Rank::MAX; size as usize];
        let first = self.routes.len() as Rank;
        let index = self.peer_fed;
        let caps = tcp.caps();
        let peer_caps = caps.peer_caps();
        let mut engine_ranks = Vec::with_capacity(peers.len());
        for (i, peer) in peers.iter().enumerate() {
            tcp.add_peer(peer.rank, &peer.endpoint, peer.host == own_host)
                .map_err(|e| EngineError::Transport(format!("TCP bridge: {}: {e}", peer.name)))?;
            let name = first + i as Rank;
            names[peer.rank as usize] = name;
            engine_ranks.push(name);
        }
        tcp.names = Some(names.into_boxed_slice());
        // The bridge wakes on its peers' frames, so it goes with the transports peers feed,
        // ahead of those only this rank feeds: their routes move one place on.
        for route in &mut self.routes {
            if route.transport != u8::MAX && route.transport as usize >= index {
                route.transport += 1;
            }
        }
        self.transports.insert(index, AnyTransport::Tcp(tcp));
        self.peer_fed += 1;
        for (peer, &name) in peers.iter().zip(&engine_ranks) {
            self.core.add_peer(peer_caps);
            self.routes.push(Route {
                transport: index as u8,
                direct_send: caps.sends_complete_on_return,
                index: peer.rank,
            });
            debug_assert_eq!(self.routes.len() as Rank, name + 1);
            self.hosts.push(peer.host.clone());
            self.names.push(peer.name.clone());
        }
        // The old set's sleeps stay counted.
        self.counters.wake_set_sleeps += self.wake.as_ref().map_or(0, WakeSet::sleeps);
        self.wake = WakeSet::over(&mut self.transports)?;
        self.description += &format!(
            "; {} spawned or parent ranks over a tcp bridge",
            peers.len()
        );
        Ok(engine_ranks)
    }
}
