//! Copies of message payloads that avoid a slow path of the C library's `memcpy`.
//!
//! glibc copies from about 2 KiB to 1 MiB with `rep movsb`. On CPUs with fast short `rep movsb`
//! (AMD Zen 3 and 4 among them) that instruction crawls when the destination lies a few bytes
//! past the source modulo the page size: measured here (glibc 2.36, Zen 4), 64 KiB at a
//! distance of 8 bytes copy at 1.3 bytes per cycle instead of 23, and distances of 16 and 24
//! cost twice the time. glibc avoids it only where it knows the CPU needs it. A message lands
//! at whatever distance its sender's and receiver's buffers happen to have, so one program can
//! hit this on every message (a receive buffer 8 bytes into a page-aligned block suffices).
//! Copies at such a distance go in pieces below glibc's `rep movsb` threshold, which it copies
//! with vector loads and stores, near full speed (18.5 bytes per cycle in the case above);
//! copies too long for `rep movsb` go whole. Copies of a few dozen bytes (a small message, a
//! frame header) go inline, without the call.

const PAGE: usize = 4096;
/// Distances (destination minus source, modulo the page size) below this take pieces.
const SHORT_DISTANCE: usize = 64;
/// Below glibc's `rep movsb` threshold (2112 bytes where AVX is used).
const PIECE: usize = 2048;
/// From about the L2 size up (1 MiB a core on the Zen 4 measured) glibc copies with vector
/// loops again, which pieces only slow down (by 15-30% at 1 and 4 MiB, measured).
const REP_MOVSB_STOP: usize = 1 << 20;

/// Copies `len` bytes from `src` to `dst`, as `ptr::copy_nonoverlapping`.
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`]: `src` valid for reads and `dst` for writes of
/// `len` bytes, the two ranges not overlapping.
#[inline]
pub(crate) unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, len: usize) {
    if len <= SMALL {
        // SAFETY: the caller's contract.
        unsafe { copy_small(src, dst, len) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { copy_large(src, dst, len) }
}

/// Copies of at most this many bytes (a small message, a frame header) go inline: a call
/// to `memcpy` costs more than the copy.
const SMALL: usize = 32;

/// Copies `len <= SMALL` bytes as two possibly overlapping loads and stores of the widest
/// size that fits, as `memcpy` does for short lengths, without the call.
///
/// # Safety
/// As for [`copy_nonoverlapping`], and `len <= SMALL`.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY (each arm): the arm's width `n` satisfies `n <= len <= 2n` (`len <= SMALL` is
    // 2 × 16), which `copy_halves` needs; the rest is the caller's contract.
    unsafe {
        match len {
            16.. => copy_halves::<u128>(src, dst, len),
            8.. => copy_halves::<u64>(src, dst, len),
            4.. => copy_halves::<u32>(src, dst, len),
            _ => {
                for i in 0..len {
                    *dst.add(i) = *src.add(i);
                }
            }
        }
    }
}

/// Copies `len` bytes as the first and the last `W` of them (overlapping when `len < 2W`).
///
/// # Safety
/// As for [`copy_nonoverlapping`], and `size_of::<W>() <= len <= 2 * size_of::<W>()`.
#[inline(always)]
unsafe fn copy_halves<W: Copy>(src: *const u8, dst: *mut u8, len: usize) {
    let last = len - std::mem::size_of::<W>();
    // SAFETY: the accesses cover `[0, W)` and `[last, len)`, inside both of the caller's
    // ranges; unaligned accesses are allowed, and the ranges do not overlap, so both loads
    // may come before both stores.
    unsafe {
        let (first, end) = (
            src.cast::<W>().read_unaligned(),
            src.add(last).cast::<W>().read_unaligned(),
        );
        dst.cast::<W>().write_unaligned(first);
        dst.add(last).cast::<W>().write_unaligned(end);
    }
}

/// # Safety
/// As for [`copy_nonoverlapping`].
unsafe fn copy_large(src: *const u8, dst: *mut u8, len: usize) {
    let distance = (dst as usize).wrapping_sub(src as usize) % PAGE;
    if len <= PIECE || len >= REP_MOVSB_STOP || !(1..SHORT_DISTANCE).contains(&distance) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut done = 0;
    while done < len {
        let n = PIECE.min(len - done);
        // SAFETY: `done + n <= len`, so both pieces lie inside the caller's ranges.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), n) };
        done += n;
    }
}

/// Copies `src` into `dst`, which must be as long.
// Inline: called for every received message, whose copy is a few instructions.
#[inline(always)]
pub(crate) fn copy_from_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy of {} bytes into a slice of {}",
        src.len(),
        dst.len()
    );
    // SAFETY: both slices are `src.len()` bytes long, and a `&mut` never overlaps a `&`.
    unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_distance_and_length_around_a_piece_copies_exactly() {
        let src: Vec<u8> = (0..3 * PIECE + 100)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let mut area = vec![0u8; 2 * PAGE + src.len() + 2 * PAGE];
        // Page-aligned start inside `area`, so distances are exact modulo the page.
        let base = area.as_ptr() as usize;
        let page_start = base.next_multiple_of(PAGE) - base;
        for distance in [0, 1, 8, 16, 24, 63, 64, 100, PAGE - 8] {
            let small = 0..=SMALL + 1;
            let pieces = [PIECE - 1, PIECE, PIECE + 1, 2 * PIECE + 7, src.len()];
            for len in small.chain(pieces) {
                area.fill(0xEE);
                let at = page_start + distance;
                let offset_in_page = (src.as_ptr() as usize) % PAGE;
                let at = at + offset_in_page;
                copy_from_slice(&mut area[at..at + len], &src[..len]);
                assert_eq!(
                    &area[at..at + len],
                    &src[..len],
                    "distance {distance}, {len} bytes"
                );
                assert!(area[..at].iter().all(|&b| b == 0xEE), "nothing before");
                assert!(area[at + len..].iter().all(|&b| b == 0xEE), "nothing after");
            }
        }
    }
}
