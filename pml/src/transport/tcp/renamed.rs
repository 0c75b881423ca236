//! A sink that hands on what a bridge's TCP transport delivers under the engine's names of
//! the ranks: a bridge to spawned ranks numbers its ranks its own way (the parents first,
//! then the children), while the engine names each process it reaches once, in the order it
//! met them (see `engine/bridge.rs`).

use crate::envelope::Rank;
use crate::error::PmlError;
use crate::transport::{Placement, Sink};

pub(crate) struct Renamed<'a, S> {
    pub sink: &'a mut S,
    /// The engine's rank of each of the transport's ranks.
    pub names: &'a [Rank],
}

impl<S: Sink> Renamed<'_, S> {
    fn name(&self, peer: Rank) -> Rank {
        self.names[peer as usize]
    }
}

// SAFETY: its placements are the wrapped sink's, under the same contract.
unsafe impl<S: Sink> Sink for Renamed<'_, S> {
    const PLACEMENT_HEAD: usize = S::PLACEMENT_HEAD;

    fn frame(&mut self, peer: Rank, frame: &[u8]) -> Result<(), PmlError> {
        let peer = self.name(peer);
        self.sink.frame(peer, frame)
    }

    fn placement(
        &mut self,
        peer: Rank,
        head: &[u8],
        len: usize,
    ) -> Result<Placement<'_>, PmlError> {
        let peer = self.name(peer);
        self.sink.placement(peer, head, len)
    }

    fn data_landed(&mut self, peer: Rank, token: u64, len: usize) -> Result<(), PmlError> {
        let peer = self.name(peer);
        self.sink.data_landed(peer, token, len)
    }

    fn read_done(&mut self, token: u64, result: Result<(), String>) -> Result<(), PmlError> {
        self.sink.read_done(token, result)
    }
}
