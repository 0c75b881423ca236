//! Rendezvous reads in pieces (see [`crate::blocks`]), on either side: a send buffer read in
//! place (the sender's description and block list are read out of its memory, then its
//! blocks in packing order), and a receive laid out in blocks that the bytes land in
//! straight, with no staging copy. From the sender's arena mapped here, one memcpy per piece
//! (a block of the shorter side where blocks differ); else `process_vm_readv` with the
//! sender's runs as remote iovecs and the receiver's as local ones, `UIO_MAXIOV` of each a
//! call.

use std::io;
use std::iter;

use super::{read_remote, PeerArena};
use crate::blocks::{Block, Blocks, Pieces, Runs};
use crate::bulk_copy;

/// The most iovecs one `process_vm_readv` takes on either side (Linux's `UIO_MAXIOV`,
/// POSIX's `IOV_MAX`).
const IOV_MAX: usize = libc::UIO_MAXIOV as usize;

/// What a rendezvous read takes from the sender, by the address its offer named.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// The send's contiguous bytes.
    Bytes(u64),
    /// The description ([`Blocks`]) of a send read in place, in pieces.
    Described(u64),
}

/// Where a read's bytes land, in packing order.
#[derive(Clone, Copy)]
pub enum Local<'a> {
    /// `len` contiguous bytes at `at`, ours alone while the read runs.
    Bytes { at: *mut u8, len: usize },
    /// The first `len` packed bytes of a receive laid out in blocks: a description made in
    /// this process, whose block list is `list` and whose blocks are writable and lent to
    /// the read (`RecvBytes`' promise).
    Blocks {
        blocks: &'a Blocks,
        list: &'a [Block],
        len: usize,
    },
}

impl<'a> Local<'a> {
    fn len(&self) -> usize {
        match *self {
            Local::Bytes { len, .. } | Local::Blocks { len, .. } => len,
        }
    }

    /// The runs the bytes land in, merged where they touch: fewer iovecs.
    fn runs(&self) -> LocalWalk<Runs<'a>> {
        match *self {
            Local::Bytes { at, len } => LocalWalk::One(iter::once((at as u64, len))),
            Local::Blocks { blocks, list, len } => LocalWalk::Blocks(blocks.runs(list, 0, len)),
        }
    }

    /// The blocks the bytes land in, unmerged: the cheaper walk, for copies block by block.
    fn pieces(&self) -> LocalWalk<Pieces<'a>> {
        match *self {
            Local::Bytes { at, len } => LocalWalk::One(iter::once((at as u64, len))),
            Local::Blocks { blocks, list, len } => LocalWalk::Blocks(blocks.pieces(list, 0, len)),
        }
    }
}

/// The (address, length) spans of a [`Local`] in packing order: its one run of contiguous
/// bytes, or the walk `I` of its blocks ([`Local::runs`], [`Local::pieces`]).
enum LocalWalk<I> {
    One(iter::Once<(u64, usize)>),
    Blocks(I),
}

impl<I: Iterator<Item = (u64, usize)>> Iterator for LocalWalk<I> {
    type Item = (u64, usize);

    #[inline]
    fn next(&mut self) -> Option<(u64, usize)> {
        match self {
            LocalWalk::One(one) => one.next(),
            LocalWalk::Blocks(walk) => walk.next(),
        }
    }
}

/// Reads `target.len()` packed bytes of the send whose description lies at `description`
/// in process `pid`; returns whether any of them came by memcpy from `arena`.
pub fn read_in_place(
    pid: i32,
    arena: Option<&PeerArena>,
    description: u64,
    target: &mut [u8],
) -> Result<bool, String> {
    let local = Local::Bytes {
        at: target.as_mut_ptr(),
        len: target.len(),
    };
    // SAFETY: `target` is borrowed mutably, ours alone for the call.
    unsafe { read_into(pid, arena, Source::Described(description), local) }
}

/// Reads `local.len()` bytes of `source` in process `pid` into `local`; returns whether they
/// came by memcpy from `arena` (else by `process_vm_readv`).
///
/// # Safety
/// `local` must be memory of this process, writable and not otherwise accessed for the call
/// (for [`Local::Blocks`], what its description promises).
pub unsafe fn read_into(
    pid: i32,
    arena: Option<&PeerArena>,
    source: Source,
    local: Local<'_>,
) -> Result<bool, String> {
    let len = local.len();
    let description = match source {
        Source::Described(at) => at,
        Source::Bytes(addr) => {
            if let Some(src) = arena.and_then(|a| a.mapped(addr, len)) {
                let mut to = Cursor::new(local.pieces());
                // SAFETY: `mapped` found the `len` bytes readable in our mapping of the
                // peer's arena, read-only, so apart from `local`, which is writable and ours
                // (this function's contract).
                unsafe { to.copy_from(src, len) };
                to.finish(len)?;
                return Ok(true);
            }
            let remote = iter::once((addr, len));
            // SAFETY: this function's contract.
            unsafe { read_runs(pid, remote, local.runs(), len) }?;
            return Ok(false);
        }
    };
    let (blocks, list) = read_description(pid, arena, description, len)?;
    if len == 0 {
        return Ok(false);
    }
    // All of the send in the sender's arena: a copy per block from our mapping of it.
    if let Some(mapping) = mapped_span(&blocks, &list, arena) {
        // SAFETY: `mapped_span` found the span in our mapping; `local` is this function's.
        unsafe { copy_mapped(&blocks, &list, mapping, local) }?;
        return Ok(true);
    }
    // Not all in the arena: every run by `process_vm_readv`, none from the mapping (a send
    // half in the arena is not one mpirt makes).
    // SAFETY: this function's contract.
    unsafe { read_runs(pid, blocks.runs(&list, 0, len), local.runs(), len) }?;
    Ok(false)
}

/// The description of a send read in place, at `at` in process `pid`, and its block list,
/// read out of the sender (from its mapped arena where they lie there) and checked for a
/// read of `len` packed bytes: a peer's layout is untrusted.
pub(super) fn read_description(
    pid: i32,
    arena: Option<&PeerArena>,
    at: u64,
    len: usize,
) -> Result<(Blocks, Vec<Block>), String> {
    let mut wire = [0u8; Blocks::WIRE_LEN];
    copy_from_peer(pid, arena, at, &mut wire)?;
    let blocks = Blocks::from_wire(&wire, len)?;
    let (list_at, n_blocks) = blocks.block_list();
    // The length is the peer's word, bounded by `from_wire` but still large: a failed
    // allocation is this receive's error, not the process's end.
    let mut list = Vec::new();
    list.try_reserve_exact(n_blocks).map_err(|e| {
        format!("a send's layout lists {n_blocks} blocks, more than this rank can hold: {e}")
    })?;
    list.resize(n_blocks, Block { offset: 0, len: 0 });
    // SAFETY: `Block` is `#[repr(C)]` plain integers, every byte pattern a value; the bytes
    // are the list's own allocation, borrowed mutably for this copy alone.
    let list_bytes = unsafe {
        std::slice::from_raw_parts_mut(
            list.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(list.as_slice()),
        )
    };
    copy_from_peer(pid, arena, list_at, list_bytes)?;
    blocks.check_list(&list)?;
    Ok((blocks, list))
}

/// Where a described send (checked by [`read_description`]) lies in our mapping of the
/// sender's arena, when all of it does: the lowest address its blocks reach, in the sender,
/// and where that lies here (every byte up to the span's end readable there).
pub(super) fn mapped_span(
    blocks: &Blocks,
    list: &[Block],
    arena: Option<&PeerArena>,
) -> Option<(u64, *const u8)> {
    let (low, end) = blocks.span(list)?;
    Some((low, arena?.mapped(low, (end - low) as usize)?))
}

/// Copies the first `local.len()` packed bytes of the described send `sent` (`list` its
/// checked block list) into `local`, one memcpy a piece (a block of the shorter side where
/// the two sides' blocks differ), from our mapping of the sender's arena: `mapping` is
/// [`mapped_span`]'s `(low, src)` for them.
///
/// # Safety
/// `mapping` must be what [`mapped_span`] returned for `sent` and `list`, and `local` memory
/// of this process, writable and not otherwise accessed for the call (for
/// [`Local::Blocks`], what its description promises).
pub(super) unsafe fn copy_mapped(
    sent: &Blocks,
    list: &[Block],
    (low, src): (u64, *const u8),
    local: Local<'_>,
) -> Result<(), String> {
    let len = local.len();
    let mut to = Cursor::new(local.pieces());
    let mut below_span = None;
    sent.for_each_block(list, len, |addr, n| {
        // `span` bounds every block from below by `low` (`check_list` refused offsets
        // that wrap), so this never fails; a wrap would be a read outside the mapping.
        let Some(from) = addr.checked_sub(low) else {
            debug_assert!(false, "block at {addr:#x} below its span's {low:#x}");
            below_span.get_or_insert(addr);
            return;
        };
        // SAFETY: the block lies within the span (at or above `low`, checked above, and
        // below its end, as `span` computed without wrapping), which `mapped_span` found
        // readable in our read-only mapping, apart from `local`, which is writable and
        // ours (this function's contract).
        unsafe { to.copy_from(src.add(from as usize), n) };
    });
    if let Some(addr) = below_span {
        return Err(format!(
            "a send's layout has a block at {addr:#x}, below its span's start {low:#x}"
        ));
    }
    to.finish(len)
}

/// Memory a read lands in, filled piece by piece in packing order.
struct Cursor<I> {
    pieces: I,
    at: u64,
    left: usize,
    /// Bytes offered past the last piece, copied nowhere: [`finish`](Self::finish) names
    /// them.
    dropped: usize,
}

impl<I: Iterator<Item = (u64, usize)>> Cursor<I> {
    fn new(pieces: I) -> Cursor<I> {
        Cursor {
            pieces,
            at: 0,
            left: 0,
            dropped: 0,
        }
    }

    /// Copies `n` bytes at `src` into the next `n` bytes of the pieces; those past the last
    /// piece are counted, not copied.
    ///
    /// # Safety
    /// `src` must be readable for `n` bytes, and the pieces writable memory of this process
    /// apart from it.
    #[inline]
    unsafe fn copy_from(&mut self, mut src: *const u8, mut n: usize) {
        while n > 0 {
            if self.left == 0 {
                let Some((at, left)) = self.pieces.next() else {
                    self.dropped += n;
                    return;
                };
                (self.at, self.left) = (at, left);
            }
            let k = n.min(self.left);
            // SAFETY: `k` bytes within `src`'s `n` and within the current piece (this
            // function's contract).
            unsafe { bulk_copy::copy_nonoverlapping(src, self.at as usize as *mut u8, k) };
            // SAFETY: at most `n` bytes on, the end of `src`'s range.
            src = unsafe { src.add(k) };
            n -= k;
            self.at += k as u64;
            self.left -= k;
        }
    }

    /// Whether all `total` bytes copied found a place: the pieces are `Local`'s, which
    /// promise `total`, so a shortfall is a description that broke its word, and the read
    /// an error rather than a receive missing bytes.
    fn finish(self, total: usize) -> Result<(), String> {
        match self.dropped {
            0 => Ok(()),
            dropped => Err(format!(
                "a receive's blocks took only {} of the {total} bytes read: {dropped} had no \
                 place",
                total - dropped
            )),
        }
    }
}

/// `dst.len()` bytes at `addr` in the peer: from its mapped arena where they lie there.
fn copy_from_peer(
    pid: i32,
    arena: Option<&PeerArena>,
    addr: u64,
    dst: &mut [u8],
) -> Result<(), String> {
    if arena.is_some_and(|a| a.copy_out(addr, dst)) {
        return Ok(());
    }
    read_remote(pid, addr, dst).map_err(|e| format!("reading a send's layout: {e}"))
}

/// Iovecs for one side of `process_vm_readv`, taken from `runs` up to [`IOV_MAX`] at a
/// time, and moved past the bytes each call moved.
struct Iovecs<I> {
    runs: I,
    list: Vec<libc::iovec>,
    /// The first iovec not done.
    first: usize,
}

impl<I: Iterator<Item = (u64, usize)>> Iovecs<I> {
    fn new(runs: I) -> Iovecs<I> {
        Iovecs {
            runs,
            list: Vec::new(),
            first: 0,
        }
    }

    /// Drops the iovecs done and takes runs until [`IOV_MAX`] are pending.
    fn fill(&mut self) {
        self.list.drain(..self.first);
        self.first = 0;
        while self.list.len() < IOV_MAX {
            let Some((addr, len)) = self.runs.next() else {
                break;
            };
            self.list.push(libc::iovec {
                iov_base: addr as usize as *mut libc::c_void,
                iov_len: len,
            });
        }
    }

    fn pending(&self) -> &[libc::iovec] {
        &self.list[self.first..]
    }

    /// Moves past `n` bytes, into the iovec the kernel stopped inside.
    fn consume(&mut self, mut n: usize) {
        while n > 0 {
            let v = &mut self.list[self.first];
            if n >= v.iov_len {
                n -= v.iov_len;
                self.first += 1;
            } else {
                v.iov_base = (v.iov_base as usize + n) as *mut libc::c_void;
                v.iov_len -= n;
                n = 0;
            }
        }
    }
}

/// Reads the bytes of the `remote` runs in process `pid`, in order, into the `local` runs,
/// both `total` bytes long, by `process_vm_readv`s of [`IOV_MAX`] iovecs a side at most.
///
/// # Safety
/// Every local run must be memory of this process, writable and not otherwise accessed for
/// the call.
pub(super) unsafe fn read_runs(
    pid: i32,
    remote: impl Iterator<Item = (u64, usize)>,
    local: impl Iterator<Item = (u64, usize)>,
    total: usize,
) -> Result<(), String> {
    let (mut remote, mut local) = (Iovecs::new(remote), Iovecs::new(local));
    let mut done = 0;
    while done < total {
        remote.fill();
        local.fill();
        let (from, into) = (remote.pending(), local.pending());
        // SAFETY: the local iovecs are runs writable and ours for the call (this function's
        // contract), so the kernel writes only memory we own exclusively; the remote ones
        // are dereferenced by the kernel in the other process only, where a bad address is
        // an EFAULT, not UB here.
        let n = unsafe {
            libc::process_vm_readv(
                pid,
                into.as_ptr(),
                into.len() as u64,
                from.as_ptr(),
                from.len() as u64,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!(
                "process_vm_readv of {} remote runs into {} local runs ({} bytes) of a \
                 rendezvous in pieces in pid {pid}: {e}",
                from.len(),
                into.len(),
                total - done
            ));
        }
        if n == 0 {
            return Err(format!(
                "process_vm_readv in pid {pid}: a rendezvous in pieces ended after {done} of \
                 {total} bytes"
            ));
        }
        let n = n as usize;
        remote.consume(n);
        local.consume(n);
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process reads its own memory, as a peer's: the runs of a column land packed.
    #[test]
    fn a_column_is_read_in_place_packed() {
        let matrix: Vec<u64> = (0..6000).collect();
        let list = [Block { offset: 8, len: 8 }];
        // Column 1 of a 1500 x 4 matrix: more runs than one process_vm_readv takes.
        let blocks = Blocks::new(matrix.as_ptr().cast(), 1500, 32, &list).unwrap();
        let mut target = vec![0u8; blocks.len()];
        let pid = std::process::id() as i32;
        let mapped =
            read_in_place(pid, None, &blocks as *const Blocks as u64, &mut target).unwrap();
        assert!(!mapped);
        let column: Vec<u64> = target
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(column, (0..1500).map(|r| r * 4 + 1).collect::<Vec<_>>());
        // A shorter target (a truncated receive) takes the front.
        let mut short = vec![0u8; 20];
        read_in_place(pid, None, &blocks as *const Blocks as u64, &mut short).unwrap();
        assert_eq!(short[..], target[..20]);
    }

    /// A column read into another column's blocks by process_vm_readv, with more runs than
    /// one call takes on either side and blocks of other lengths on the two sides: the
    /// bytes land in packing order, and the gaps keep their guard.
    #[test]
    fn a_column_lands_in_a_receives_blocks() {
        let matrix: Vec<u64> = (0..6000).collect();
        let send_list = [Block { offset: 8, len: 8 }];
        let sent = Blocks::new(matrix.as_ptr().cast(), 1500, 32, &send_list).unwrap();
        // 4-byte blocks every 12 bytes: each sent block lands in two of them.
        let recv_list = [Block { offset: 4, len: 4 }];
        let mut halo = vec![0xA5u8; 3000 * 12];
        let pid = std::process::id() as i32;
        for source in [
            Source::Described(&sent as *const Blocks as u64),
            Source::Bytes(matrix.as_ptr() as u64),
        ] {
            halo.fill(0xA5);
            // Made after the fill: the description's pointer is the last use of `halo`
            // before the read writes through it.
            let received = Blocks::new(halo.as_mut_ptr(), 3000, 12, &recv_list).unwrap();
            let into = Local::Blocks {
                blocks: &received,
                list: &recv_list,
                len: received.len(),
            };
            // SAFETY: `halo` is ours, borrowed by nothing else while the read writes it.
            let mapped = unsafe { read_into(pid, None, source, into) }.unwrap();
            assert!(!mapped);
            let mut expected = vec![0xA5u8; halo.len()];
            let packed: Vec<u8> = match source {
                Source::Described(_) => (0..1500u64)
                    .flat_map(|r| (r * 4 + 1).to_ne_bytes())
                    .collect(),
                Source::Bytes(_) => matrix[..1500]
                    .iter()
                    .flat_map(|v| v.to_ne_bytes())
                    .collect(),
            };
            for (i, four) in packed.chunks(4).enumerate() {
                expected[i * 12 + 4..i * 12 + 8].copy_from_slice(four);
            }
            assert!(halo == expected, "{source:?}: the column landed wrong");
        }
    }

    /// `count` blocks of `len` bytes, `stride` apart (the first at `stride - len`), and a
    /// buffer for them holding the guard 0xA5: a column with its gaps.
    fn strided(count: usize, len: usize, stride: usize) -> ([Block; 1], Vec<u8>) {
        let list = [Block {
            offset: stride - len,
            len,
        }];
        (list, vec![0xA5; count * stride])
    }

    /// Blocks whose lengths do not divide each other, more than one call takes on both
    /// sides (so the kernel stops inside a local iovec on one call and a remote one on
    /// another), 8-byte blocks into 12-byte ones and back, and the same runs into
    /// contiguous bytes: the bytes land in packing order, the gaps keep their guard.
    #[test]
    fn runs_of_other_lengths_split_on_both_sides() {
        let pid = std::process::id() as i32;
        // (sent blocks' length, count; received blocks' length, count): 24 000 bytes.
        for (slen, scount, rlen, rcount) in [(8, 3000, 12, 2000), (12, 2000, 8, 3000)] {
            assert!(scount > IOV_MAX && rcount > IOV_MAX);
            let (send_list, mut source) = strided(scount, slen, slen + 8);
            for (i, b) in source.iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            let sent = Blocks::new(source.as_ptr(), scount, slen + 8, &send_list).unwrap();
            let packed: Vec<u8> = source
                .chunks(slen + 8)
                .flat_map(|el| el[8..].to_vec())
                .collect();
            let rstride = rlen + 4;
            let (recv_list, mut halo) = strided(rcount, rlen, rstride);
            let received = Blocks::new(halo.as_mut_ptr(), rcount, rstride, &recv_list).unwrap();
            let into = Local::Blocks {
                blocks: &received,
                list: &recv_list,
                len: packed.len(),
            };
            let source_at = Source::Described(&sent as *const Blocks as u64);
            // SAFETY: `halo` is ours, borrowed by nothing else while the read writes it.
            let mapped = unsafe { read_into(pid, None, source_at, into) }.unwrap();
            assert!(!mapped);
            let mut expected = vec![0xA5u8; halo.len()];
            for (el, block) in packed.chunks(rlen).enumerate() {
                expected[el * rstride + 4..(el + 1) * rstride].copy_from_slice(block);
            }
            assert!(halo == expected, "{slen} into {rlen}: landed wrong");
            // Contiguous bytes as the local side: one iovec against every remote run.
            let mut target = vec![0u8; packed.len()];
            read_in_place(pid, None, &sent as *const Blocks as u64, &mut target).unwrap();
            assert!(
                target == packed,
                "{slen} into contiguous bytes: landed wrong"
            );
        }
    }

    /// Bytes past a cursor's pieces land nowhere and make `finish` an error naming them.
    #[test]
    fn a_cursor_names_bytes_past_its_pieces() {
        let mut dst = [0u8; 6];
        let src = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        let at = dst.as_mut_ptr() as u64;
        let mut to = Cursor::new([(at, 4), (at + 4, 2)].into_iter());
        // SAFETY: `src` is readable for its 9 bytes; the pieces are `dst`, ours and apart.
        unsafe { to.copy_from(src.as_ptr(), 9) };
        let err = to.finish(9).unwrap_err();
        assert!(err.contains("took only 6 of the 9 bytes") && err.contains("3 had no place"));
        assert_eq!(dst, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn a_description_longer_than_its_offer_is_refused() {
        let data = [7u8; 16];
        let list = [Block { offset: 0, len: 4 }];
        let blocks = Blocks::new(data.as_ptr(), 2, 8, &list).unwrap();
        let mut target = vec![0u8; 9];
        let pid = std::process::id() as i32;
        let err =
            read_in_place(pid, None, &blocks as *const Blocks as u64, &mut target).unwrap_err();
        assert!(err.contains("fewer than the 9"), "{err}");
    }
}
