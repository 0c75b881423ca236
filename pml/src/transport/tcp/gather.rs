//! The iovecs of one `sendmsg` of a frame whose payload is a non-contiguous send buffer's
//! blocks ([`crate::blocks`]): the length prefix and header, then the payload's runs in
//! packing order, each long run straight from the sender's memory and consecutive short ones
//! copied into one piece of a small scratch buffer, so that the kernel is not handed an
//! iovec per 8-byte block (a column of doubles): per iovec it costs more than copying a few
//! hundred bytes, and the scratch, reused batch after batch, stays in cache.
//!
//! A receive laid out in blocks is the mirror image (one `readv` of DATA into its runs): long
//! runs are read in place, short ones into the scratch, and copied out to their blocks once
//! the read returned ([`Batch::reserve_runs`], [`scatter_short_runs`]).

use std::iter::Peekable;
use std::mem::MaybeUninit;

use crate::blocks::Runs;
use crate::bulk_copy;

/// The most iovecs one `sendmsg` takes (Linux's `UIO_MAXIOV`, POSIX's `IOV_MAX`).
pub const IOV_MAX: usize = libc::UIO_MAXIOV as usize;
/// Runs shorter than this are copied into the scratch rather than given an iovec.
pub const SHORT_RUN: usize = 256;
/// Room for a batch's iovecs, left uninitialized: a 100-byte eager frame fills two or three
/// of its 16 KiB, and a batch writes each before it hands it out.
pub type IovecRoom = [MaybeUninit<libc::iovec>; IOV_MAX];

/// One batch being built: iovecs into `iov`, short runs copied into `scratch`.
pub struct Batch<'a> {
    iov: &'a mut IovecRoom,
    /// The iovecs written, the first of `iov`.
    n_iov: usize,
    scratch: &'a mut [u8],
    used: usize,
    /// The last iovec is the scratch's piece being filled (a short run may extend it).
    open: bool,
    /// Bytes the iovecs hold.
    pub bytes: usize,
}

impl<'a> Batch<'a> {
    pub fn new(iov: &'a mut IovecRoom, scratch: &'a mut [u8]) -> Batch<'a> {
        Batch {
            iov,
            n_iov: 0,
            scratch,
            used: 0,
            open: false,
            bytes: 0,
        }
    }

    /// Empties the batch for the next, once `sendmsg` took this one whole (it copied the
    /// scratch's bytes, which the next batch overwrites).
    pub fn clear(&mut self) {
        self.n_iov = 0;
        self.used = 0;
        self.open = false;
        self.bytes = 0;
    }

    /// The iovecs built, for `sendmsg`.
    pub fn iovecs(&mut self) -> &mut [libc::iovec] {
        // SAFETY: `point` wrote the first `n_iov` entries; `MaybeUninit<T>` is laid out as `T`.
        unsafe {
            std::slice::from_raw_parts_mut(self.iov.as_mut_ptr().cast::<libc::iovec>(), self.n_iov)
        }
    }

    /// Adds `part`, which must stay readable until the batch is sent, as an iovec of its own;
    /// `false` when the batch has no iovec left.
    pub fn point(&mut self, part: &[u8]) -> bool {
        self.point_at(part.as_ptr(), part.len())
    }

    /// [`point`](Self::point) of `len` bytes at `addr`.
    fn point_at(&mut self, addr: *const u8, len: usize) -> bool {
        if self.n_iov == IOV_MAX {
            return false;
        }
        self.iov[self.n_iov].write(libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        });
        self.n_iov += 1;
        self.open = false;
        self.bytes += len;
        true
    }

    /// Takes the next `len` bytes of the scratch into the batch's iovecs: where they lie,
    /// or `None` when it has no room for them (or they need an iovec and none is left).
    fn reserve(&mut self, len: usize) -> Option<*mut u8> {
        if self.used + len > self.scratch.len() {
            return None;
        }
        let at = self.scratch[self.used..].as_mut_ptr();
        if self.open {
            // SAFETY: `open` says the last iovec, written by `point_at`, is the scratch's.
            unsafe { self.iov[self.n_iov - 1].assume_init_mut() }.iov_len += len;
            self.bytes += len;
        } else if !self.point_at(at, len) {
            return None;
        } else {
            self.open = true;
        }
        self.used += len;
        Some(at)
    }

    /// Adds the next of `runs`, in order, as far as the batch holds them, long runs as
    /// iovecs of their own and short ones as pieces of the scratch, each of which `short`
    /// is given with its run; the first run it has no room for stays in `runs`, for the
    /// next batch.
    fn take(&mut self, runs: &mut Peekable<Runs<'_>>, mut short: impl FnMut(*mut u8, u64, usize)) {
        while let Some(&(addr, n)) = runs.peek() {
            let added = if n >= SHORT_RUN {
                self.point_at(addr as usize as *const u8, n)
            } else if let Some(piece) = self.reserve(n) {
                short(piece, addr, n);
                true
            } else {
                false
            };
            if !added {
                return;
            }
            runs.next();
        }
    }

    /// Adds the next of `runs` to be sent, short ones copied into the scratch (see
    /// [`take`](Self::take)).
    ///
    /// # Safety
    /// Every run must be memory of this process, readable for its length until the batch
    /// is sent, none of it the scratch (the runs of a description made in this process, its
    /// elements and block list alive).
    pub unsafe fn runs(&mut self, runs: &mut Peekable<Runs<'_>>) {
        self.take(runs, |piece, addr, n| {
            // SAFETY: the run is readable and apart from the scratch (this function's
            // contract); `reserve` gave `n` bytes of the scratch at `piece`.
            unsafe { bulk_copy::copy_nonoverlapping(addr as usize as *const u8, piece, n) }
        });
    }

    /// Adds the next of `runs` to be read into, short ones read into the scratch, from which
    /// [`scatter_short_runs`] copies them once the read returned. Safe to build: whoever
    /// reads into the iovecs answers for the runs being writable.
    pub fn reserve_runs(&mut self, runs: &mut Peekable<Runs<'_>>) {
        self.take(runs, |_, _, _| {});
    }
}

/// Copies the short runs among `runs` (the runs a [`Batch::reserve_runs`] took, walked again
/// from the same start) out of `scratch`, where a read put them, as far as the read's `got`
/// bytes reach; long runs were read in place.
///
/// # Safety
/// Every run must be memory of this process, writable for its length and apart from the
/// scratch (the runs of a receive's description made in this process, lent to the caller).
pub unsafe fn scatter_short_runs(runs: Runs<'_>, scratch: &[u8], got: usize) {
    let (mut left, mut used) = (got, 0);
    for (addr, n) in runs {
        if left == 0 {
            return;
        }
        let landed = n.min(left);
        if n < SHORT_RUN {
            // SAFETY: the run is writable and apart from the scratch (this function's
            // contract); the batch gave the short runs consecutive pieces of the scratch, in
            // order, so this one's bytes are the `landed` at `used`.
            unsafe {
                bulk_copy::copy_nonoverlapping(
                    scratch[used..used + landed].as_ptr(),
                    addr as usize as *mut u8,
                    landed,
                )
            };
            used += n;
        }
        left -= landed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{Block, Blocks};

    /// Short runs share one scratch piece until it is full; long runs point at the buffer.
    #[test]
    fn short_runs_share_the_scratch_and_long_ones_point_in_place() {
        let buf: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        // An 8-byte block then a 300-byte one, 400 bytes apart.
        let list = [
            Block { offset: 0, len: 8 },
            Block {
                offset: 8 + 50,
                len: 300,
            },
        ];
        let blocks = Blocks::new(buf.as_ptr(), 10, 400, &list).unwrap();
        let mut iov = [MaybeUninit::uninit(); IOV_MAX];
        let mut scratch = vec![0u8; 16];
        let mut batch = Batch::new(&mut iov, &mut scratch);
        let mut runs = blocks.runs(&list, 4, blocks.len() - 4).peekable();
        // SAFETY: the description lies within `buf`, alive for the batch.
        unsafe { batch.runs(&mut runs) };
        // 4 bytes of the first block, 300, 8, 300, then the next 8 does not fit the 16-byte
        // scratch (12 used): it is the next batch's first.
        assert_eq!(batch.bytes, 4 + 300 + 8 + 300);
        assert_eq!(runs.peek(), Some(&(buf.as_ptr() as u64 + 800, 8)));
        let iovecs: Vec<(usize, usize)> = batch
            .iovecs()
            .iter()
            .map(|v| (v.iov_base as usize, v.iov_len))
            .collect();
        let base = buf.as_ptr() as usize;
        let scratch_at = iovecs[0].0;
        assert_eq!(
            iovecs,
            vec![
                (scratch_at, 4),
                (base + 58, 300),
                (scratch_at + 4, 8),
                (base + 400 + 58, 300),
            ]
        );
        assert_eq!(&scratch[..4], &buf[4..8]);
        assert_eq!(&scratch[4..12], &buf[400..408]);
    }
}
