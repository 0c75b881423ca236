//! Rendezvous reads into a receive whose blocks are short on average (a column of doubles:
//! under `shm_in_place_min_block`). A copy or an iovec a block costs more there than the
//! bytes do (the column read so ran at 0.78 of a staged read and unpack, eec0f28), so the
//! blocks are filled by the layouts' own copy loops, which move a 4-, 8- or 16-byte block
//! with one load and one store. From the sender's arena mapped here that is the only copy: a
//! column into a column block to block ([`Blocks::copy_column_into`]), contiguous bytes
//! unpacked straight from the mapping; other layouts are packed from the mapping into a
//! window and unpacked from it while it is in the cache. Elsewhere `process_vm_readv` brings
//! the sender's bytes a window at a time and each is unpacked before the next is read:
//! never the whole message staged in a buffer of its size and unpacked after, as before.
//! (MPICH's IPC path does the same for a mapped sender: pack where only the sender has
//! gaps, unpack where only the receiver has, and both through a chunk where both do.)

use std::iter;

use super::in_place::{copy_mapped, mapped_span, read_description, read_runs, Local, Source};
use super::{read_remote, PeerArena};
use crate::blocks::{Blocks, Position};
use crate::transport::scratch;

/// Which way a read into short blocks went: what the transport counts (`mapped`) and what
/// the tests check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShortRead {
    /// From the sender's mapped arena, a column into a column, block to block.
    Column,
    /// From the sender's mapped arena, contiguous bytes unpacked straight from the mapping.
    Unpacked,
    /// From the sender's mapped arena, one memcpy a block (of the shorter side), both
    /// sides' blocks averaging at least the arena's threshold (`shm_arena_min_block`).
    Pieces,
    /// From the sender's mapped arena, packed into a window and unpacked from it.
    Window,
    /// By `process_vm_readv`, a window at a time.
    Cma,
}

impl ShortRead {
    /// Whether the bytes came from the sender's mapped arena (`Counters::mapped_reads`).
    pub fn mapped(self) -> bool {
        self != ShortRead::Cma
    }
}

/// Reads the first `len` packed bytes of `source` in process `pid` into `blocks` (a receive's,
/// its blocks short) by their copy loops, from `arena`, our mapping of the sender's, where
/// the bytes lie there, else by `process_vm_readv`; returns which way it went. From the
/// mapping, a send and a receive whose blocks both average at least `arena_min_block` bytes
/// are copied a block at a time instead (one copy a byte, where a block is long enough that
/// a copy call costs less than a second pass through a window). `scratch` is
/// the transport's (`transport::scratch`): each window of the bytes passes through it, a
/// few windows a message (fewer `process_vm_readv` calls than pieces), each unpacked from
/// the L2 cache.
///
/// # Safety
/// `blocks` must have been made in this process, its block list alive and its blocks
/// writable and not otherwise accessed for the call (what `RecvBytes` promises of a
/// receive's), `len` at most its bytes.
pub unsafe fn read_short_blocks(
    pid: i32,
    arena: Option<&PeerArena>,
    source: Source,
    blocks: &Blocks,
    len: usize,
    arena_min_block: usize,
    scratch: &mut Box<[u8]>,
) -> Result<ShortRead, String> {
    match source {
        Source::Bytes(addr) => {
            if let Some(src) = arena.and_then(|a| a.mapped(addr, len)) {
                // SAFETY: `mapped` found the `len` bytes readable in our mapping of the
                // peer's arena, which the peer leaves unchanged until our FIN (the
                // rendezvous rule) and `unpack_at` reads through raw pointers only; they are
                // apart from the receive's blocks, ours to write (this function's contract).
                unsafe { blocks.unpack_at(Position::START, src, len) };
                return Ok(ShortRead::Unpacked);
            }
            // SAFETY: this function's contract.
            unsafe {
                through_window(blocks, len, scratch, |start, window| {
                    read_remote(pid, addr.wrapping_add(start as u64), window)
                        .map_err(|e| e.to_string())
                })
            }?;
            Ok(ShortRead::Cma)
        }
        Source::Described(at) => {
            let (sent, list) = read_description(pid, arena, at, len)?;
            if len == 0 {
                return Ok(ShortRead::Cma);
            }
            // Each window goes on from where the last ended in the send's blocks: a seek from
            // the element's first block a window would be quadratic in a long element.
            let mut from = Position::START;
            if let Some((low, here)) = mapped_span(&sent, &list, arena) {
                // The send as mapped here: its first element lies `low - base` bytes before
                // its lowest block (`span` found `low` at or above the base, unwrapped).
                let mapped = sent.mapped_at((here as u64).wrapping_sub(low - sent.base()), &list);
                // SAFETY: every block of `mapped` lies within the span, which `mapped_span`
                // found readable in our mapping (unchanged until our FIN, and read through
                // raw pointers only), apart from the receive's blocks (this function's
                // contract); `len` is within both (`read_description` checked the send's).
                if unsafe { mapped.copy_column_into(blocks, len) } {
                    return Ok(ShortRead::Column);
                }
                if sent.mean_block().min(blocks.mean_block()) >= arena_min_block {
                    // SAFETY: this function's contract: the receive's block list is alive.
                    let into = unsafe { blocks.local_list() };
                    let local = Local::Blocks {
                        blocks,
                        list: into,
                        len,
                    };
                    // SAFETY: the receive's blocks are ours to write for the call, `len`
                    // within them (this function's contract); `(low, here)` is what
                    // `mapped_span` found for the send's description and list.
                    unsafe { copy_mapped(&sent, &list, (low, here), local) }?;
                    return Ok(ShortRead::Pieces);
                }
                // SAFETY: as above; each window is the scratch's own memory.
                unsafe {
                    through_window(blocks, len, scratch, |_, window| {
                        from = mapped.pack_at(from, window.len(), window.as_mut_ptr());
                        Ok(())
                    })
                }?;
                return Ok(ShortRead::Window);
            }
            // SAFETY: this function's contract; the kernel writes only the window.
            unsafe {
                through_window(blocks, len, scratch, |_, window| {
                    let n = window.len();
                    let local = iter::once((window.as_mut_ptr() as u64, n));
                    let mut runs = sent.runs_at(&list, from, n);
                    // A read of all `n` bytes walked all the runs.
                    read_runs(pid, &mut runs, local, n)?;
                    from = runs.position();
                    Ok(())
                })
            }?;
            Ok(ShortRead::Cma)
        }
    }
}

/// Fills the first `len` packed bytes of `blocks` a window at a time: `fill(start, window)`
/// puts the packed bytes from `start` into the window it is lent, which are unpacked into the
/// blocks, from where the last window's ended, before the next window is filled.
///
/// # Safety
/// As for [`read_short_blocks`]; `fill` writes only the window it is lent.
unsafe fn through_window(
    blocks: &Blocks,
    len: usize,
    scratch: &mut Box<[u8]>,
    mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), String>,
) -> Result<(), String> {
    let scratch = scratch::scratch(scratch);
    let mut start = 0;
    let mut at = Position::START;
    while start < len {
        let n = scratch.len().min(len - start);
        let window = &mut scratch[..n];
        fill(start, window)?;
        // SAFETY: the window's packed bytes lie within the first `len`, and the scratch is
        // apart from the receive's blocks (this function's contract).
        at = unsafe { blocks.unpack_at(at, window.as_ptr(), window.len()) };
        start += window.len();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{pack, Block};
    use crate::shared_arena::{Arena, PAGE};
    use crate::transport::scratch::SCRATCH_LEN;

    const GUARD: u8 = 0xA5;

    /// Reads `source`'s first `packed.len()` bytes (`packed` their serial pack) into `count`
    /// elements `extent` apart laid out as `list`, in a buffer of the guard, checks them
    /// against a serial unpack of `packed`, the gaps' guard kept, and returns which way the
    /// read went.
    fn land_in(
        arena: Option<&PeerArena>,
        source: Source,
        packed: &[u8],
        list: &[Block],
        extent: usize,
    ) -> Result<ShortRead, String> {
        land_at(arena, source, packed, list, extent, ARENA_MIN_BLOCK)
    }

    /// The default `shm_arena_min_block`.
    const ARENA_MIN_BLOCK: usize = 512;

    /// [`land_in`] with `arena_min_block` as the arena's threshold.
    fn land_at(
        arena: Option<&PeerArena>,
        source: Source,
        packed: &[u8],
        list: &[Block],
        extent: usize,
        arena_min_block: usize,
    ) -> Result<ShortRead, String> {
        let element_len: usize = list.iter().map(|b| b.len).sum();
        let count = packed.len().div_ceil(element_len);
        let mut expected = vec![GUARD; count * extent];
        let mut bytes = packed.iter();
        'serial: for el in 0..count {
            for b in list {
                for at in &mut expected[el * extent + b.offset..][..b.len] {
                    let Some(&byte) = bytes.next() else {
                        break 'serial;
                    };
                    *at = byte;
                }
            }
        }
        let mut buf = vec![GUARD; count * extent];
        let blocks = Blocks::new(buf.as_mut_ptr(), count, extent, list).unwrap();
        let pid = std::process::id() as i32;
        let mut scratch = Box::default();
        // SAFETY: `buf` is ours, borrowed by nothing else while the read writes it.
        let len = packed.len();
        let read = unsafe {
            read_short_blocks(
                pid,
                arena,
                source,
                &blocks,
                len,
                arena_min_block,
                &mut scratch,
            )
        }?;
        assert!(
            buf == expected,
            "{source:?} into {} blocks an element ({read:?}): landed wrong",
            list.len()
        );
        Ok(read)
    }

    /// [`land_in`] a column of `block`-byte blocks at offset 4, `block + 12` bytes apart.
    fn land(
        arena: Option<&PeerArena>,
        source: Source,
        packed: &[u8],
        block: usize,
    ) -> Result<ShortRead, String> {
        let list = [Block {
            offset: 4,
            len: block,
        }];
        land_in(arena, source, packed, &list, block + 12)
    }

    /// One element of `n` blocks of 3, 5 or 7 bytes (short, as `short_blocks` gets them),
    /// `gap` bytes apart: a layout whose seek from its first block costs a walk of them.
    fn ragged(n: usize, gap: usize) -> (Vec<Block>, usize) {
        let mut at = 0;
        let list = (0..n)
            .map(|i| {
                let b = Block {
                    offset: at + gap,
                    len: [3, 5, 7][i % 3],
                };
                at = b.offset + b.len;
                b
            })
            .collect();
        (list, at + gap)
    }

    /// Reads `len` bytes of `source` into a column of 8-byte blocks, whatever they are: for
    /// descriptions that must be refused.
    fn read_column(
        arena: Option<&PeerArena>,
        source: Source,
        len: usize,
    ) -> Result<ShortRead, String> {
        let list = [Block { offset: 4, len: 8 }];
        let count = len.div_ceil(8);
        let mut buf = vec![GUARD; count * 20];
        let blocks = Blocks::new(buf.as_mut_ptr(), count, 20, &list).unwrap();
        let pid = std::process::id() as i32;
        let mut scratch = Box::default();
        // SAFETY: `buf` is ours, borrowed by nothing else while the read writes it.
        unsafe { read_short_blocks(pid, arena, source, &blocks, len, 0, &mut scratch) }
    }

    /// An arena of this process mapped as a peer's, and `len` bytes of it holding a pattern.
    fn arena_with(len: usize) -> (Arena, PeerArena, *mut u8) {
        let owner = Arena::new();
        let info = owner.activate(1024 * PAGE).unwrap();
        let peer = PeerArena::map(&info).unwrap();
        let p = owner.alloc(len, 8);
        assert!(!p.is_null(), "the arena has room for {len} bytes");
        // SAFETY: a fresh block of `len` bytes, ours alone.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p, len) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i % 253) as u8;
        }
        (owner, peer, p)
    }

    /// Bytes past several windows (a block cut by each window's end: 12-byte blocks), read by
    /// `process_vm_readv` from this process as from a peer: contiguous bytes, a column of
    /// 8-byte blocks and one of 12 into a column of 12-byte blocks.
    #[test]
    fn windows_of_a_peers_bytes_land_in_short_blocks() {
        let count = 3 * SCRATCH_LEN / 12 + 7;
        let bytes: Vec<u8> = (0..count * 12).map(|i| (i % 251) as u8).collect();
        let contiguous = Source::Bytes(bytes.as_ptr() as u64);
        assert_eq!(land(None, contiguous, &bytes, 12), Ok(ShortRead::Cma));
        for block in [8, 12] {
            let n = count * 12 / block;
            let list = [Block {
                offset: 3,
                len: block,
            }];
            let matrix: Vec<u8> = (0..n * (block + 5)).map(|i| (i % 241) as u8).collect();
            let sent = Blocks::new(matrix.as_ptr(), n, block + 5, &list).unwrap();
            let source = Source::Described(&sent as *const Blocks as u64);
            assert_eq!(land(None, source, &pack(&sent), 12), Ok(ShortRead::Cma));
        }
    }

    /// One element of many short blocks, sent and received, across more than three windows:
    /// each window goes on from where the last ended on both sides (the send's runs by
    /// `process_vm_readv`, the receive's unpack), a block cut at each window's edge.
    #[test]
    fn an_element_of_many_blocks_lands_across_windows() {
        let (recv, recv_extent) = ragged(3 * SCRATCH_LEN / 5 + 11, 2);
        let (send, send_extent) = ragged(3 * SCRATCH_LEN / 5 + 23, 1);
        let matrix: Vec<u8> = (0..send_extent).map(|i| (i % 241) as u8).collect();
        let sent = Blocks::new(matrix.as_ptr(), 1, send_extent, &send).unwrap();
        assert!(sent.len() > 3 * SCRATCH_LEN, "the element spans 3 windows");
        let packed = pack(&sent);
        let recv_len: usize = recv.iter().map(|b| b.len).sum();
        let packed = &packed[..recv_len.min(packed.len())];
        let described = Source::Described(&sent as *const Blocks as u64);
        assert_eq!(
            land_in(None, described, packed, &recv, recv_extent),
            Ok(ShortRead::Cma)
        );
        assert_eq!(land(None, described, packed, 8), Ok(ShortRead::Cma));
        let contiguous = Source::Bytes(packed.as_ptr() as u64);
        assert_eq!(
            land_in(None, contiguous, packed, &recv, recv_extent),
            Ok(ShortRead::Cma)
        );
    }

    /// From an arena mapped here as a peer's: a column into a column of the same block
    /// (block to block), of another (through a window), contiguous bytes (unpacked from the
    /// mapping), and one element of many short blocks into another (windows, each packed and
    /// unpacked from where the last ended); a truncated read takes the front.
    #[test]
    fn a_peers_arena_lands_in_short_blocks_in_one_pass() {
        let rows = 2 * SCRATCH_LEN / 8 + 3;
        let len = rows * 32;
        let (send, send_extent) = ragged(3 * SCRATCH_LEN / 5 + 23, 1);
        let (owner, peer, p) = arena_with(len.max(send_extent));
        let list = [Block { offset: 8, len: 8 }];
        let sent = Blocks::new(p, rows, 32, &list).unwrap();
        let packed = pack(&sent);
        let described = Source::Described(&sent as *const Blocks as u64);
        for (block, way) in [(8, ShortRead::Column), (12, ShortRead::Window)] {
            assert_eq!(land(Some(&peer), described, &packed, block), Ok(way));
            assert_eq!(
                land(Some(&peer), described, &packed[..1000], block),
                Ok(way)
            );
        }
        // SAFETY: the arena's block, filled by `arena_with`, no longer written.
        let front = unsafe { std::slice::from_raw_parts(p, len / 2) };
        let contiguous = Source::Bytes(p as u64);
        assert_eq!(
            land(Some(&peer), contiguous, front, 8),
            Ok(ShortRead::Unpacked)
        );
        let (recv, recv_extent) = ragged(3 * SCRATCH_LEN / 5 + 11, 2);
        let long = Blocks::new(p, 1, send_extent, &send).unwrap();
        assert!(long.len() > 3 * SCRATCH_LEN, "the element spans 3 windows");
        let packed = pack(&long);
        let recv_len: usize = recv.iter().map(|b| b.len).sum();
        let packed = &packed[..recv_len.min(packed.len())];
        let described = Source::Described(&long as *const Blocks as u64);
        let landed = land_in(Some(&peer), described, packed, &recv, recv_extent);
        assert_eq!(landed, Ok(ShortRead::Window));
        assert_eq!(
            land(Some(&peer), described, packed, 8),
            Ok(ShortRead::Window)
        );
        // SAFETY: allocated by `arena_with`, no longer used.
        unsafe { owner.free(p, len.max(send_extent)) };
    }

    /// From an arena mapped here as a peer's, blocks of a few hundred bytes in another layout
    /// on each side (a 512-byte column into elements of a 384- and a 640-byte block, and
    /// the reverse) are copied a block at a time, no window, when both sides average at
    /// least the threshold; through a window when it is higher, or when one side's blocks
    /// are shorter (an 8-byte column into the 384/640 elements). A truncated read takes the
    /// front either way.
    #[test]
    fn a_peers_arena_lands_in_blocks_of_hundreds_of_bytes_one_copy_a_block() {
        let rows = 3 * SCRATCH_LEN / 512 + 5;
        let len = rows * 600;
        let (owner, peer, p) = arena_with(len);
        let column = [Block {
            offset: 40,
            len: 512,
        }];
        let pair = [
            Block {
                offset: 0,
                len: 384,
            },
            Block {
                offset: 400,
                len: 640,
            },
        ];
        let column_send = Blocks::new(p, rows, 600, &column).unwrap();
        let pair_send = Blocks::new(p, rows / 2, 1100, &pair).unwrap();
        let eight = [Block { offset: 0, len: 8 }];
        let eights = Blocks::new(p, len / 16, 16, &eight).unwrap();
        let cases = [
            (&column_send, &pair[..], 1100, ShortRead::Pieces),
            (&pair_send, &column[..], 600, ShortRead::Pieces),
            (&eights, &pair[..], 1100, ShortRead::Window),
        ];
        for (sent, list, extent, way) in cases {
            let packed = pack(sent);
            let described = Source::Described(sent as *const Blocks as u64);
            for front in [packed.len(), 1000] {
                let packed = &packed[..front];
                let landed = land_in(Some(&peer), described, packed, list, extent);
                assert_eq!(landed, Ok(way));
                let above = land_at(Some(&peer), described, packed, list, extent, 513);
                assert_eq!(above, Ok(ShortRead::Window));
            }
        }
        // SAFETY: allocated by `arena_with`, no longer used.
        unsafe { owner.free(p, len) };
    }

    /// A peer's description is untrusted on the mapped path too: one whose first block lies
    /// in the arena but whose elements run past its end is not read through the mapping (an
    /// error, or `process_vm_readv`, never a fault); a list that does not sum to the element
    /// and a send shorter than the receive are named errors.
    #[test]
    fn a_hostile_description_is_not_read_through_the_mapping() {
        let (owner, peer, p) = arena_with(64);
        for arena in [Some(&peer), None] {
            let list = [Block { offset: 0, len: 8 }];
            let past = Blocks::new(p, 8, 64 << 20, &list).unwrap();
            let source = Source::Described(&past as *const Blocks as u64);
            let read = read_column(arena, source, 64);
            assert!(
                !matches!(read, Ok(way) if way.mapped()),
                "elements past the arena read through the mapping: {read:?}"
            );

            let long = [Block { offset: 0, len: 16 }];
            let fields: [u64; 6] = [p as u64, 4, 32, 8, long.as_ptr() as u64, 1];
            let source = Source::Described(fields.as_ptr() as u64);
            let err = read_column(arena, source, 32).unwrap_err();
            assert!(err.contains("does not match its list"), "{err}");

            let short = Blocks::new(p, 4, 16, &list).unwrap();
            let source = Source::Described(&short as *const Blocks as u64);
            let err = read_column(arena, source, 64).unwrap_err();
            assert!(err.contains("fewer than the 64 to read"), "{err}");
        }
        // SAFETY: allocated by `arena_with`, no longer used.
        unsafe { owner.free(p, 64) };
    }
}
