//! Rendezvous reads of a send buffer in pieces, in place (see [`crate::blocks`]): the
//! sender's description and block list are read out of its memory, then its blocks are
//! copied into the target in packing order, with one memcpy per run from the sender's arena
//! mapped here, else with `process_vm_readv` over the runs as remote iovecs, `UIO_MAXIOV` at
//! a time.

use std::io;

use super::{read_remote, PeerArena};
use crate::blocks::{Block, Blocks};
use crate::bulk_copy;

/// The most iovecs one `process_vm_readv` takes (Linux's `UIO_MAXIOV`, POSIX's `IOV_MAX`).
const IOV_MAX: usize = libc::UIO_MAXIOV as usize;

/// Reads `target.len()` packed bytes of the send whose description lies at `description`
/// in process `pid`; returns whether any of them came by memcpy from `arena`.
pub fn read_in_place(
    pid: i32,
    arena: Option<&PeerArena>,
    description: u64,
    target: &mut [u8],
) -> Result<bool, String> {
    let mut wire = [0u8; Blocks::WIRE_LEN];
    copy_from_peer(pid, arena, description, &mut wire)?;
    let blocks = Blocks::from_wire(&wire, target.len())?;
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
    if target.is_empty() {
        return Ok(false);
    }
    // All of the send in the sender's arena: a copy per block from our mapping of it.
    let span = blocks.span(&list);
    let mapping =
        span.and_then(|(low, end)| Some((low, arena?.mapped(low, (end - low) as usize)?)));
    if let Some((low, src)) = mapping {
        let dst = target.as_mut_ptr();
        let mut at = 0;
        let mut below_span = None;
        blocks.for_each_block(&list, target.len(), |addr, len| {
            // `span` bounds every block from below by `low` (`check_list` refused offsets
            // that wrap), so this never fails; a wrap would be a read outside the mapping.
            let Some(from) = addr.checked_sub(low) else {
                debug_assert!(false, "block at {addr:#x} below its span's {low:#x}");
                below_span.get_or_insert(addr);
                return;
            };
            // SAFETY: the block lies within the span (at or above `low`, checked above, and
            // below its end, as `span` computed without wrapping), which `mapped` found
            // readable in our mapping; `at + len` stays within `target`, ours exclusively,
            // which cannot overlap a read-only mapping.
            unsafe { bulk_copy::copy_nonoverlapping(src.add(from as usize), dst.add(at), len) };
            at += len;
        });
        if let Some(addr) = below_span {
            return Err(format!(
                "a send's layout has a block at {addr:#x}, below its span's start {low:#x}"
            ));
        }
        return Ok(true);
    }
    // Not all in the arena: every run by `process_vm_readv`, none from the mapping (a send
    // half in the arena is not one mpirt makes).
    let mut at = 0;
    let mut remote: Vec<libc::iovec> = Vec::new();
    let mut batch_start = 0;
    for (addr, len) in blocks.runs(&list, 0, target.len()) {
        remote.push(libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: len,
        });
        at += len;
        if remote.len() == IOV_MAX {
            read_runs(pid, &mut remote, &mut target[batch_start..at])?;
            batch_start = at;
        }
    }
    if !remote.is_empty() {
        read_runs(pid, &mut remote, &mut target[batch_start..at])?;
    }
    Ok(false)
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

/// Reads the `remote` runs (their lengths summing to `dst.len()`) into `dst`, in one
/// `process_vm_readv` unless the kernel stops short; empties `remote`.
fn read_runs(pid: i32, remote: &mut Vec<libc::iovec>, dst: &mut [u8]) -> Result<(), String> {
    let total = dst.len();
    let mut done = 0;
    let mut first = 0;
    while done < total {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: total - done,
        };
        let runs = &remote[first..];
        // SAFETY: `local` describes the rest of `dst`, which we borrow mutably, so the kernel
        // writes only memory we own exclusively; the remote iovecs are dereferenced by the
        // kernel in the other process only, where a bad address is an EFAULT, not UB here.
        let n =
            unsafe { libc::process_vm_readv(pid, &local, 1, runs.as_ptr(), runs.len() as u64, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!(
                "process_vm_readv of {} runs ({} bytes) of a send's layout in pid {pid}: {e}",
                runs.len(),
                total - done
            ));
        }
        if n == 0 {
            return Err(format!(
                "process_vm_readv in pid {pid}: a send's layout ended after {done} of {total} bytes"
            ));
        }
        // Past the runs the kernel finished; into the one it stopped inside.
        let mut n = n as usize;
        done += n;
        while n > 0 {
            let run = &mut remote[first];
            if n >= run.iov_len {
                n -= run.iov_len;
                first += 1;
            } else {
                run.iov_base = (run.iov_base as usize + n) as *mut libc::c_void;
                run.iov_len -= n;
                n = 0;
            }
        }
    }
    remote.clear();
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
