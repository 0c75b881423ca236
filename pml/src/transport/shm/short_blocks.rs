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

use super::in_place::{mapped_span, read_description, read_runs, Source};
use super::{read_remote, PeerArena};
use crate::blocks::Blocks;

/// The bytes a window holds: a few of them a message (fewer `process_vm_readv` calls than
/// pieces), each unpacked from the L2 cache.
const WINDOW: usize = 64 << 10;

/// Reads the first `len` packed bytes of `source` in process `pid` into `blocks` (a receive's,
/// its blocks short) by their copy loops; returns whether they came from `arena`, our mapping
/// of the sender's (else by `process_vm_readv`). `scratch` is the transport's window, made
/// [`WINDOW`] bytes long the first time one is needed.
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
    scratch: &mut Vec<u8>,
) -> Result<bool, String> {
    match source {
        Source::Bytes(addr) => {
            if let Some(src) = arena.and_then(|a| a.mapped(addr, len)) {
                // SAFETY: `mapped` found the `len` bytes readable in our read-only mapping,
                // apart from the receive's blocks, ours to write (this function's contract).
                unsafe {
                    blocks.unpack_range_from(0, std::slice::from_raw_parts(src, len));
                }
                return Ok(true);
            }
            // SAFETY: this function's contract.
            unsafe {
                through_window(blocks, len, scratch, |start, window| {
                    read_remote(pid, addr.wrapping_add(start as u64), window)
                        .map_err(|e| e.to_string())
                })
            }?;
            Ok(false)
        }
        Source::Described(at) => {
            let (sent, list) = read_description(pid, arena, at, len)?;
            if len == 0 {
                return Ok(false);
            }
            if let Some((low, here)) = mapped_span(&sent, &list, arena) {
                // The send as mapped here: its first element lies `low - base` bytes before
                // its lowest block (`span` found `low` at or above the base, unwrapped).
                let mapped = sent.mapped_at((here as u64).wrapping_sub(low - sent.base()), &list);
                // SAFETY: every block of `mapped` lies within the span, which `mapped_span`
                // found readable in our read-only mapping, apart from the receive's blocks
                // (this function's contract); `len` is within both (`read_description`
                // checked the send's).
                if unsafe { mapped.copy_column_into(blocks, len) } {
                    return Ok(true);
                }
                // SAFETY: as above; each window is the scratch's own memory.
                unsafe {
                    through_window(blocks, len, scratch, |start, window| {
                        mapped.pack_range_into(start, window.len(), window.as_mut_ptr());
                        Ok(())
                    })
                }?;
                return Ok(true);
            }
            // SAFETY: this function's contract; the kernel writes only the window.
            unsafe {
                through_window(blocks, len, scratch, |start, window| {
                    let n = window.len();
                    let local = iter::once((window.as_mut_ptr() as u64, n));
                    read_runs(pid, sent.runs(&list, start, n), local, n)
                })
            }?;
            Ok(false)
        }
    }
}

/// Fills the first `len` packed bytes of `blocks` a window at a time: `fill(start, window)`
/// puts the packed bytes from `start` into the window it is lent, which are unpacked into the
/// blocks before the next window is filled.
///
/// # Safety
/// As for [`read_short_blocks`]; `fill` writes only the window it is lent.
unsafe fn through_window(
    blocks: &Blocks,
    len: usize,
    scratch: &mut Vec<u8>,
    mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), String>,
) -> Result<(), String> {
    if scratch.len() < WINDOW {
        scratch.resize(WINDOW, 0);
    }
    let mut start = 0;
    while start < len {
        let window = &mut scratch[..WINDOW.min(len - start)];
        fill(start, window)?;
        // SAFETY: the window's packed bytes lie within the first `len`, and the scratch is
        // apart from the receive's blocks (this function's contract).
        unsafe { blocks.unpack_range_from(start, window) };
        start += window.len();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::Block;
    use crate::shared_arena::{Arena, PAGE};

    const GUARD: u8 = 0xA5;

    /// `count` elements of one `block`-byte block at offset 4, `block + 12` bytes apart, in a
    /// buffer of the guard, with the serial unpack of `packed` into them.
    fn column(count: usize, block: usize, packed: &[u8]) -> (Vec<u8>, Vec<u8>, [Block; 1]) {
        let extent = block + 12;
        let list = [Block {
            offset: 4,
            len: block,
        }];
        let mut expected = vec![GUARD; count * extent];
        for (el, bytes) in packed.chunks(block).enumerate() {
            expected[el * extent + 4..][..bytes.len()].copy_from_slice(bytes);
        }
        (vec![GUARD; count * extent], expected, list)
    }

    /// Reads `source` into a column of `block`-byte blocks holding `packed`'s bytes and checks
    /// them against a serial unpack, the gaps' guard kept; returns whether it was mapped.
    fn land(
        arena: Option<&PeerArena>,
        source: Source,
        packed: &[u8],
        block: usize,
    ) -> Result<bool, String> {
        let count = packed.len().div_ceil(block);
        let (mut buf, expected, list) = column(count, block, packed);
        let blocks = Blocks::new(buf.as_mut_ptr(), count, block + 12, &list).unwrap();
        let pid = std::process::id() as i32;
        let mut scratch = Vec::new();
        // SAFETY: `buf` is ours, borrowed by nothing else while the read writes it.
        let mapped =
            unsafe { read_short_blocks(pid, arena, source, &blocks, packed.len(), &mut scratch) }?;
        assert!(
            buf == expected,
            "{source:?} into {block}-byte blocks: landed wrong"
        );
        Ok(mapped)
    }

    /// Bytes past several windows (a block cut by each window's end: 12-byte blocks), read by
    /// `process_vm_readv` from this process as from a peer: contiguous bytes, a column of
    /// 8-byte blocks and one of 12 into a column of 12-byte blocks.
    #[test]
    fn windows_of_a_peers_bytes_land_in_short_blocks() {
        let count = 3 * WINDOW / 12 + 7;
        let bytes: Vec<u8> = (0..count * 12).map(|i| (i % 251) as u8).collect();
        assert!(land(None, Source::Bytes(bytes.as_ptr() as u64), &bytes, 12) == Ok(false));
        for block in [8, 12] {
            let n = count * 12 / block;
            let list = [Block {
                offset: 3,
                len: block,
            }];
            let matrix: Vec<u8> = (0..n * (block + 5)).map(|i| (i % 241) as u8).collect();
            let sent = Blocks::new(matrix.as_ptr(), n, block + 5, &list).unwrap();
            let mut packed = vec![0u8; sent.len()];
            // SAFETY: the description lies within `matrix`; `packed` holds its bytes.
            unsafe { sent.pack_range_into(0, sent.len(), packed.as_mut_ptr()) };
            let source = Source::Described(&sent as *const Blocks as u64);
            assert!(land(None, source, &packed, 12) == Ok(false));
        }
    }

    /// From an arena mapped here as a peer's: contiguous bytes, a column into a column of the
    /// same block (one copy a block) and of another (through a window), all counted as
    /// mapped; a truncated read takes the front.
    #[test]
    fn a_peers_arena_lands_in_short_blocks_in_one_pass() {
        let owner = Arena::new();
        let info = owner.activate(1024 * PAGE).unwrap();
        let peer = PeerArena::map(&info).unwrap();
        let rows = 2 * WINDOW / 8 + 3;
        let len = rows * 32;
        let p = owner.alloc(len, 8);
        assert!(!p.is_null(), "the arena has room for the matrix");
        // SAFETY: a fresh block of `len` bytes, ours alone.
        let matrix = unsafe { std::slice::from_raw_parts_mut(p, len) };
        for (i, b) in matrix.iter_mut().enumerate() {
            *b = (i % 253) as u8;
        }
        let list = [Block { offset: 8, len: 8 }];
        let sent = Blocks::new(p, rows, 32, &list).unwrap();
        let mut packed = vec![0u8; sent.len()];
        // SAFETY: the description lies within the block; `packed` holds its bytes.
        unsafe { sent.pack_range_into(0, sent.len(), packed.as_mut_ptr()) };
        let described = Source::Described(&sent as *const Blocks as u64);
        for block in [8, 12] {
            assert!(land(Some(&peer), described, &packed, block) == Ok(true));
            assert!(land(Some(&peer), described, &packed[..1000], block) == Ok(true));
        }
        let contiguous = Source::Bytes(p as u64);
        assert!(land(Some(&peer), contiguous, &matrix[..len / 2], 8) == Ok(true));
        // SAFETY: allocated above, no longer used.
        unsafe { owner.free(p, len) };
    }
}
