//! Reads in place of non-contiguous memory on either side: into a receive's blocks, by
//! scatter-gather lists of their runs, and of a peer's non-contiguous send whose offer
//! carried its layout, a READ a run of it at least (`scatter::plan` cuts both sides' runs);
//! and the sender's side of the latter, its blocks' span exposed once (`expose_layout`).

use super::registry::MrId;
use super::{scatter, transport, Local, Piece, Read, VerbsTransport};
use crate::blocks::Blocks;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::protocol::{layout, RemoteLayout};
use crate::wire::{self, RemoteKey};

/// Where a read of a non-contiguous send in place lands ([`VerbsTransport::read_layout`]).
pub enum LayoutTarget<'a> {
    /// Contiguous bytes, as long as the read.
    Bytes(&'a mut [u8]),
    /// The first `len` packed bytes of a receive laid out in blocks.
    Blocks(&'a Blocks, usize),
}

impl VerbsTransport {
    /// Starts reading the first `len` packed bytes of a receive laid out in `blocks` from
    /// `remote` in `peer` straight into its blocks: READs whose local scatter-gather lists are
    /// the blocks' runs, at most `max_read_sge` entries and the port's longest message a
    /// work request, the span of the blocks registered once. `Ok(false)`, having read
    /// nothing, where the blocks average under `sge_min_block` bytes, or their span is too
    /// wide for `len` (`scatter::span_fits`) or could not be registered (the caller stages
    /// the read: its own registration, of the message's length only, fails with a named
    /// error if memory is short).
    ///
    /// # Safety
    /// `blocks` must have been made in this process by [`Blocks::new`], its block list alive
    /// and its elements' blocks writable and not otherwise accessed until the read finished
    /// (or the transport stopped), and `len` at most `blocks.len()`.
    pub unsafe fn read_blocks(
        &mut self,
        peer: Rank,
        remote: RemoteKey,
        blocks: &Blocks,
        len: usize,
        token: u64,
    ) -> Result<bool, PmlError> {
        // SAFETY: this function's contract.
        unsafe { self.read_planned(peer, remote, None, blocks, len, token) }
    }

    /// Starts reading the first `len` packed bytes of `peer`'s non-contiguous send that its
    /// offer described (`layout`, under `remote.key`), a READ a run of it at least, into
    /// contiguous `target` (`len` its length) or, `Ok(true)`, straight into the blocks of a
    /// receive: as [`read_blocks`](Self::read_blocks), `Ok(false)` having read nothing where
    /// those blocks are not read into (the caller stages the read, and reads the send into
    /// the staging buffer with `target`).
    ///
    /// # Safety
    /// Where `blocks` is given, as for [`read_blocks`](Self::read_blocks); `target` must stay
    /// lent until the read finished (what `Transport::read` asks).
    pub unsafe fn read_layout(
        &mut self,
        peer: Rank,
        remote: RemoteKey,
        layout: &RemoteLayout,
        into: LayoutTarget<'_>,
        token: u64,
    ) -> Result<bool, PmlError> {
        // SAFETY: this function's contract.
        unsafe {
            match into {
                LayoutTarget::Bytes(target) => {
                    self.read_layout_into(peer, remote, layout, target, token)?;
                    Ok(true)
                }
                LayoutTarget::Blocks(blocks, len) => {
                    self.read_planned(peer, remote, Some(layout), blocks, len, token)
                }
            }
        }
    }

    /// A read into `blocks` (of `remote`'s contiguous bytes, or of the runs of `layout`),
    /// where their mean block and span let them be registered; `Ok(false)` otherwise.
    ///
    /// # Safety
    /// As for [`read_blocks`](Self::read_blocks).
    unsafe fn read_planned(
        &mut self,
        peer: Rank,
        remote: RemoteKey,
        layout: Option<&RemoteLayout>,
        blocks: &Blocks,
        len: usize,
        token: u64,
    ) -> Result<bool, PmlError> {
        self.check_readable(peer)?;
        // SAFETY: a description made in this process, its list alive (this function's
        // contract).
        let list = unsafe { blocks.local_list() };
        let span = blocks.span(list).filter(|_| len > 0);
        let keys = match span {
            Some((low, high))
                if blocks.mean_block() >= self.sge_min_block
                    && scatter::span_fits(high - low, len) =>
            {
                self.registry
                    .acquire(low as usize, (high - low) as usize, true)
                    .ok()
            }
            _ => None,
        };
        let Some(keys) = keys else {
            self.staged_reads += 1;
            return Ok(false);
        };
        let local = blocks.runs(list, 0, len);
        let plan = match layout {
            None => self.plan(std::iter::once((remote.addr, len)), local, keys.lkey),
            Some(layout) => self.plan(layout.runs(len), local, keys.lkey),
        };
        self.start_planned(
            peer,
            remote,
            plan,
            keys.id,
            len,
            token,
            layout.is_some(),
            true,
        );
        self.post_waiting_pieces()?;
        Ok(true)
    }

    /// A read of `layout`'s runs into `target`, a READ a run at least (a registration of
    /// `target` that fails is a named error).
    fn read_layout_into(
        &mut self,
        peer: Rank,
        remote: RemoteKey,
        layout: &RemoteLayout,
        target: &mut [u8],
        token: u64,
    ) -> Result<(), PmlError> {
        self.check_readable(peer)?;
        let (addr, len) = (target.as_mut_ptr() as u64, target.len());
        let keys = self
            .registry
            .acquire(addr as usize, len, true)
            .map_err(|e| transport(peer, e.to_string()))?;
        let plan = self.plan(layout.runs(len), std::iter::once((addr, len)), keys.lkey);
        self.start_planned(peer, remote, plan, keys.id, len, token, true, false);
        self.post_waiting_pieces()
    }

    /// `scatter::plan` within this device's limits.
    fn plan(
        &self,
        remote: impl IntoIterator<Item = (u64, usize)>,
        local: impl IntoIterator<Item = (u64, usize)>,
        lkey: u32,
    ) -> scatter::Plan {
        scatter::plan(
            remote,
            local,
            lkey,
            self.dev.max_read_sge,
            self.dev.max_piece(),
        )
    }

    /// Queues `plan`'s work requests as one read of `len` bytes under registration `mr`,
    /// reported with `token`, and counts it.
    #[allow(clippy::too_many_arguments)]
    fn start_planned(
        &mut self,
        peer: Rank,
        remote: RemoteKey,
        plan: scatter::Plan,
        mr: MrId,
        len: usize,
        token: u64,
        of_layout: bool,
        into_blocks: bool,
    ) {
        let scatter::Plan { sges, pieces } = plan;
        let read = self.reads.vacant_key();
        for piece in &pieces {
            self.waiting_pieces.push_back(Piece {
                peer,
                read,
                local: Local::Scattered {
                    first: piece.first,
                    count: piece.count,
                },
                remote: piece.remote,
                rkey: remote.key as u32,
                len: piece.len as u32,
            });
        }
        let requests = pieces.len();
        let inserted = self.reads.insert(Read {
            token,
            peer,
            pieces_left: requests,
            mr,
            error: None,
            len,
            remote,
            sges,
            requests,
            of_layout,
            into_blocks,
        });
        debug_assert_eq!(inserted, read);
        self.reads_posted += 1;
        if into_blocks {
            self.sge_reads += 1;
            self.sge_read_requests += requests as u64;
        }
        if of_layout {
            self.layout_reads += 1;
            self.layout_read_requests += requests as u64;
        }
    }

    /// Lets peers read the non-contiguous send `blocks` describes in place, a run at a time:
    /// the span of its blocks registered (read-only) once, where its blocks average
    /// `send_min_block` bytes or more, its layout fits a frame with the RTS header, and the
    /// span is not too wide for the bytes sent (`scatter::span_fits`); the rkey and the
    /// registration to release once the send completes. `None` otherwise (the caller packs
    /// the send), counted.
    ///
    /// # Safety
    /// `blocks` must have been made in this process by [`Blocks::new`], its block list alive.
    pub unsafe fn expose_layout(&mut self, blocks: &Blocks) -> Option<(u32, MrId)> {
        // SAFETY: this function's contract.
        let list = unsafe { blocks.local_list() };
        let fits = wire::RTS_LEN + layout::encoded_len(list.len()) <= self.frame_size;
        let keys = match blocks.span(list) {
            Some((low, high))
                if fits
                    && !blocks.is_empty()
                    && blocks.mean_block() >= self.send_min_block
                    && scatter::span_fits(high - low, blocks.len()) =>
            {
                self.registry
                    .acquire(low as usize, (high - low) as usize, false)
                    .ok()
            }
            _ => None,
        };
        match keys {
            Some(keys) => {
                self.layout_sends += 1;
                Some((keys.rkey, keys.id))
            }
            None => {
                self.packed_sends += 1;
                None
            }
        }
    }
}
