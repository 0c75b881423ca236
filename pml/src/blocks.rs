//! Memory in pieces: a non-contiguous send buffer described where it lies (a datatype's
//! blocks, repeated element after element), so that a transport that reads a peer's memory
//! reads the blocks in place instead of a packed copy of them.
//!
//! A send publishes the address of its [`Blocks`] in the rendezvous offer ([`IN_PLACE`] in
//! the key); the receiver reads that description and the block list it points to out of the
//! sender's memory, then walks the same [`runs`](Blocks::runs) the sender would pack, in the same order.
//! Both sides run the code here, so the bytes land in the order a serial pack gives them.

use std::mem::size_of;

use crate::bulk_copy;

/// [`RemoteKey::key`](crate::wire::RemoteKey) of a rendezvous whose address is a [`Blocks`]
/// in the sender's memory, not the data itself.
pub const IN_PLACE: u64 = 0x626c_6f63_6b73_0001;

/// The most blocks per element a receiver reads from a sender's description: a bound, so
/// that a corrupt description is a named error rather than an allocation that ends the
/// process (mpirt's datatypes keep at most this many).
pub const MAX_BLOCKS: u64 = 1 << 26;

/// One run of bytes of an element, `offset` bytes from the element's start. `#[repr(C)]`:
/// a receiver reads a sender's list of them out of the sender's memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub offset: usize,
    pub len: usize,
}

/// The packed bytes `start..start + len` of a [`Blocks`]: a part of a non-contiguous send
/// that one frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedRange {
    pub start: usize,
    pub len: usize,
}

/// `count` elements `extent` bytes apart from `base`, each made of `blocks` in the order
/// their bytes travel (MPI's type map). `#[repr(C)]` and plain integers: a receiver reads
/// it whole out of the sender's memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocks {
    base: u64,
    count: u64,
    extent: u64,
    /// The blocks' lengths summed: the bytes one element carries.
    element_len: u64,
    /// Address of the first of `n_blocks` [`Block`]s.
    blocks: u64,
    n_blocks: u64,
}

impl Blocks {
    /// `count` elements at `base`, `extent` apart, made of `blocks`. `None` where the bytes
    /// they carry would overflow a `usize`.
    ///
    /// The description holds addresses only: whoever reads through it (a peer, by
    /// [`runs`](Self::runs)) relies on the caller keeping `base`'s elements and `blocks` alive and
    /// unchanged until the send that publishes it completes.
    pub fn new(base: *const u8, count: usize, extent: usize, blocks: &[Block]) -> Option<Blocks> {
        let element_len = blocks
            .iter()
            .try_fold(0usize, |sum, b| sum.checked_add(b.len))?;
        count.checked_mul(element_len)?;
        Some(Blocks {
            base: base as u64,
            count: count as u64,
            extent: extent as u64,
            element_len: element_len as u64,
            blocks: blocks.as_ptr() as u64,
            n_blocks: blocks.len() as u64,
        })
    }

    /// The bytes the elements carry, packed.
    pub fn len(&self) -> usize {
        (self.count * self.element_len) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the block list lies (in the memory of whoever made the description), and how
    /// many blocks it holds.
    pub fn block_list(&self) -> (u64, usize) {
        (self.blocks, self.n_blocks as usize)
    }

    /// This description as bytes, as a reader finds it in the sender's memory.
    pub const WIRE_LEN: usize = size_of::<Blocks>();

    /// A description read out of a peer's memory, checked for what [`runs`](Self::runs)
    /// relies on: a bounded block list, and at least the `wanted` bytes a receive reads.
    pub fn from_wire(bytes: &[u8; Self::WIRE_LEN], wanted: usize) -> Result<Blocks, String> {
        let field =
            |i: usize| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let blocks = Blocks {
            base: field(0),
            count: field(1),
            extent: field(2),
            element_len: field(3),
            blocks: field(4),
            n_blocks: field(5),
        };
        if blocks.n_blocks > MAX_BLOCKS {
            return Err(format!(
                "a send's layout lists {} blocks, past the {MAX_BLOCKS} a receiver reads",
                blocks.n_blocks
            ));
        }
        // A layout holds no empty blocks, so an element carries at least a byte a block: a
        // peer cannot make a receiver allocate a list longer than the bytes it sends.
        if blocks.n_blocks > blocks.element_len {
            return Err(format!(
                "a send's layout lists {} blocks for {} bytes an element",
                blocks.n_blocks, blocks.element_len
            ));
        }
        if blocks
            .count
            .checked_mul(blocks.element_len)
            .is_none_or(|len| len < wanted as u64)
        {
            return Err(format!(
                "a send's layout carries {} elements of {} bytes, fewer than the {wanted} to \
                 read",
                blocks.count, blocks.element_len
            ));
        }
        Ok(blocks)
    }

    /// Block lengths summed must be the element's length, and no block may reach past the
    /// end of the address space (so that [`runs`](Self::runs), [`span`](Self::span) and
    /// [`for_each_block`](Self::for_each_block) never wrap an offset): checked once the list
    /// is read.
    pub fn check_list(&self, list: &[Block]) -> Result<(), String> {
        if let Some(b) = list.iter().find(|b| b.offset.checked_add(b.len).is_none()) {
            return Err(format!(
                "a send's layout holds a block of {} bytes at offset {}, past the end of the \
                 address space",
                b.len, b.offset
            ));
        }
        let sum = list
            .iter()
            .try_fold(0u64, |sum, b| sum.checked_add(b.len as u64));
        if list.len() as u64 != self.n_blocks || sum != Some(self.element_len) {
            return Err(format!(
                "a send's layout of {} blocks and {} bytes an element does not match its list",
                self.n_blocks, self.element_len
            ));
        }
        Ok(())
    }

    /// The address of the first element.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The bytes from one element's start to the next's.
    pub fn extent(&self) -> u64 {
        self.extent
    }

    /// The bytes one block carries on average: what a copy per block moves.
    pub fn mean_block(&self) -> usize {
        match self.n_blocks {
            0 => 0,
            n => (self.element_len / n) as usize,
        }
    }

    /// The lowest address and the end of the bytes the elements' blocks reach (of `list`,
    /// this description's block list), unless they would pass the end of the address space.
    pub fn span(&self, list: &[Block]) -> Option<(u64, u64)> {
        let low = list.iter().map(|b| b.offset as u64).min()?;
        let high = list
            .iter()
            .map(|b| (b.offset as u64).checked_add(b.len as u64))
            .try_fold(0u64, |high, end| Some(high.max(end?)))?;
        let last = self.count.checked_sub(1)?.checked_mul(self.extent)?;
        let end = self.base.checked_add(last)?.checked_add(high)?;
        Some((self.base.checked_add(low)?, end))
    }

    /// Where the packed byte `start` lies (`list` this description's block list): a walk
    /// of the blocks before it in its element, which a walk in windows does once, carrying
    /// the [`Position`] on, rather than once a window.
    pub(crate) fn position(&self, list: &[Block], start: usize) -> Position {
        let element_len = self.element_len as usize;
        let (element, mut within) = match element_len {
            0 => (0, 0),
            _ => (start / element_len, start % element_len),
        };
        let mut block = 0;
        while block < list.len() && within >= list[block].len {
            within -= list[block].len;
            block += 1;
        }
        Position {
            element: element as u64,
            block,
            within,
        }
    }

    /// Calls `f` with each block's address and length, in packing order, for the first `len`
    /// packed bytes (the last block cut short where they end), skipping empty blocks: a
    /// tight loop, for copies block by block.
    pub fn for_each_block(&self, list: &[Block], len: usize, f: impl FnMut(u64, usize)) {
        self.for_each_block_at(list, Position::START, len, f);
    }

    /// [`for_each_block`](Self::for_each_block) of the `len` packed bytes from `at` (a
    /// position of this description; the first block cut short where it falls inside one);
    /// returns the position where they end. Unlike [`runs`](Self::runs) it merges no blocks
    /// that touch: the loop for copies of short blocks.
    pub(crate) fn for_each_block_at(
        &self,
        list: &[Block],
        at: Position,
        len: usize,
        mut f: impl FnMut(u64, usize),
    ) -> Position {
        let Position {
            mut element,
            mut block,
            mut within,
        } = at;
        let mut left = len;
        let mut addr = self.base.wrapping_add(element.wrapping_mul(self.extent));
        while left > 0 && element < self.count {
            while let Some(b) = list.get(block) {
                // Saturating: a position of another list must not reach past a block.
                let n = b.len.saturating_sub(within).min(left);
                if n > 0 {
                    f(addr.wrapping_add((b.offset + within) as u64), n);
                    left -= n;
                    within += n;
                    if left == 0 {
                        return Position {
                            element,
                            block,
                            within,
                        };
                    }
                }
                block += 1;
                within = 0;
            }
            block = 0;
            element += 1;
            addr = addr.wrapping_add(self.extent);
        }
        Position {
            element,
            block,
            within,
        }
    }

    /// The position `len` packed bytes past `at` (a position of this description; `list`
    /// its block list): a walk of the blocks between, not of those before `at`.
    pub(crate) fn advance(&self, list: &[Block], at: Position, len: usize) -> Position {
        self.for_each_block_at(list, at, len, |_, _| {})
    }

    /// The block list of a description made in this process.
    ///
    /// # Safety
    /// The description must have been made in this process, by [`new`](Self::new) or by
    /// `mapped_at` (the crate's view of a peer's send through a mapping), its block list
    /// still alive (what `new` asks of its caller; for `mapped_at`, the list it was given).
    pub unsafe fn local_list(&self) -> &[Block] {
        // SAFETY: the list `new` or `mapped_at` was given, alive (this function's contract).
        unsafe {
            std::slice::from_raw_parts(self.blocks as usize as *const Block, self.n_blocks as usize)
        }
    }

    /// Packs the packed bytes `start..start + len` at `dst`.
    ///
    /// # Safety
    /// The description must have been made in this process (by [`new`](Self::new), or by
    /// `mapped_at` over a mapping of a peer's memory), its elements and block list still
    /// alive (what `new` asks of its caller), `start + len` at most [`len`](Self::len), and
    /// `dst` valid for writes of `len` bytes that overlap none of the elements'.
    pub unsafe fn pack_range_into(&self, start: usize, len: usize, dst: *mut u8) {
        // SAFETY: this function's contract.
        let at = self.position(unsafe { self.local_list() }, start);
        // SAFETY: this function's contract.
        unsafe { self.pack_at(at, len, dst) };
    }

    /// [`pack_range_into`](Self::pack_range_into) of the `len` packed bytes from `at`, a
    /// position of this description; returns the position where they end, for the next.
    ///
    /// # Safety
    /// As for `pack_range_into`, the bytes from `at` within the first [`len`](Self::len).
    pub(crate) unsafe fn pack_at(&self, at: Position, len: usize, dst: *mut u8) -> Position {
        // SAFETY: this function's contract.
        unsafe { self.copy_range::<false>(at, len, dst) }
    }

    /// Unpacks `src` as the packed bytes `start..start + src.len()` into the blocks: what a
    /// receive laid out in blocks does with a frame's payload. The bytes between the blocks
    /// are left as they are.
    ///
    /// # Safety
    /// The description must have been made in this process, its block list alive and its
    /// elements' blocks valid for writes (a receive's buffer, lent for it),
    /// `start + src.len()` at most [`len`](Self::len), and `src` apart from the elements.
    pub unsafe fn unpack_range_from(&self, start: usize, src: &[u8]) {
        // SAFETY: this function's contract.
        let at = self.position(unsafe { self.local_list() }, start);
        // SAFETY: this function's contract: `src` is readable for its length.
        unsafe { self.unpack_at(at, src.as_ptr(), src.len()) };
    }

    /// [`unpack_range_from`](Self::unpack_range_from) of the `len` bytes at `src` as the
    /// packed bytes from `at`, a position of this description; returns the position where
    /// they end, for the next. `src` is read through raw pointers only, never a reference:
    /// it may be a peer's memory mapped here, which the peer could write.
    ///
    /// # Safety
    /// As for `unpack_range_from`, the bytes from `at` within the first [`len`](Self::len),
    /// `src` valid for reads of `len` bytes.
    pub(crate) unsafe fn unpack_at(&self, at: Position, src: *const u8, len: usize) -> Position {
        // Only read: `copy_range` writes the blocks when unpacking.
        // SAFETY: this function's contract.
        unsafe { self.copy_range::<true>(at, len, src.cast_mut()) }
    }

    /// Copies the `len` packed bytes from `at` between the blocks and `packed`: into the
    /// blocks where `UNPACK`, else out of them; returns the position where they end. A list
    /// of one block of 4, 8 or 16 bytes (a column, as mpirt describes one) gets a loop of its
    /// own in which a whole block is one load and one store of that constant size; other
    /// blocks go by `bulk_copy`, inline where they are short. A call to `memmove` a block
    /// cost 26% of a 4 MiB halo exchange's cycles under perf (packing and unpacking an
    /// 8-byte column).
    ///
    /// # Safety
    /// As for [`pack_at`](Self::pack_at) (`packed` valid for writes of `len` bytes) or,
    /// where `UNPACK`, [`unpack_at`](Self::unpack_at) (`packed` valid for reads of `len`
    /// bytes).
    unsafe fn copy_range<const UNPACK: bool>(
        &self,
        at: Position,
        len: usize,
        packed: *mut u8,
    ) -> Position {
        // SAFETY: this function's contract.
        let list = unsafe { self.local_list() };
        // SAFETY (each arm): this function's contract.
        unsafe {
            match list {
                [b] if b.len == 8 => self.copy_pieces::<8, UNPACK>(list, at, len, packed),
                [b] if b.len == 16 => self.copy_pieces::<16, UNPACK>(list, at, len, packed),
                [b] if b.len == 4 => self.copy_pieces::<4, UNPACK>(list, at, len, packed),
                _ => self.copy_pieces::<0, UNPACK>(list, at, len, packed),
            }
        }
    }

    /// [`copy_range`](Self::copy_range)'s loop, with whole pieces of `N` bytes copied as a
    /// constant size (none where `N` is 0: pieces are never empty).
    ///
    /// # Safety
    /// As for `copy_range`, `list` its block list.
    #[inline(always)]
    unsafe fn copy_pieces<const N: usize, const UNPACK: bool>(
        &self,
        list: &[Block],
        from: Position,
        len: usize,
        packed: *mut u8,
    ) -> Position {
        let mut at = 0;
        let mut copy = |addr: u64, n: usize| {
            let block = addr as usize as *mut u8;
            // SAFETY: `at + n` stays within the `len` packed bytes, as the pieces sum to
            // `len`; the block lies in an element, readable, or writable where `UNPACK`, and
            // apart from the packed bytes (this function's contract).
            unsafe {
                let other = packed.add(at);
                let (src, dst) = match UNPACK {
                    true => (other.cast_const(), block),
                    false => (block.cast_const(), other),
                };
                if n == N {
                    std::ptr::copy_nonoverlapping(src, dst, N);
                } else {
                    bulk_copy::copy_nonoverlapping(src, dst, n);
                }
            }
            at += n;
        };
        let [b] = list else {
            return self.for_each_block_at(list, from, len, copy);
        };
        if len == 0 || b.len == 0 {
            return from;
        }
        // One block an element (a column, as mpirt describes one): a loop of its own, with no
        // walk of the list; `b.len` is the element's length, the range lies within the
        // elements (this function's contract).
        let start = from.element as usize * b.len + from.within;
        let mut skip = start % b.len;
        let first = (start / b.len) as u64;
        let mut element = self.base.wrapping_add(first.wrapping_mul(self.extent));
        let offset = b.offset as u64;
        let mut left = len;
        while left > 0 {
            let n = (b.len - skip).min(left);
            copy(element.wrapping_add(offset + skip as u64), n);
            left -= n;
            skip = 0;
            element = element.wrapping_add(self.extent);
        }
        let end = start + len;
        Position {
            element: (end / b.len) as u64,
            block: 0,
            within: end % b.len,
        }
    }

    /// This description of a peer's send as this process sees it through a mapping of the
    /// peer's memory: its first element at `base` here, its block list `list` (read out of
    /// the peer and checked by [`check_list`](Self::check_list)), so that the copy loops here
    /// ([`pack_range_into`](Self::pack_range_into), [`copy_column_into`](Self::copy_column_into))
    /// read it where it is mapped.
    pub(crate) fn mapped_at(&self, base: u64, list: &[Block]) -> Blocks {
        Blocks {
            base,
            blocks: list.as_ptr() as u64,
            n_blocks: list.len() as u64,
            ..*self
        }
    }

    /// Copies the first `len` packed bytes of these blocks into the first `len` of `dst`'s,
    /// where both lay out one block an element, of the same length (a column into a column,
    /// as a halo exchange sends and receives one): one copy, a block of 4, 8 or 16 bytes
    /// being one load and one store of that constant size, as in `copy_range`. `false`,
    /// copying nothing, for other layouts.
    ///
    /// # Safety
    /// Both descriptions made in this process ([`new`](Self::new), or
    /// [`mapped_at`](Self::mapped_at) over a mapping), their block lists alive, these
    /// elements' blocks readable and `dst`'s writable and apart from them, `len` at most
    /// either's [`len`](Self::len).
    pub(crate) unsafe fn copy_column_into(&self, dst: &Blocks, len: usize) -> bool {
        // SAFETY: this function's contract.
        let (from, into) = unsafe { (self.local_list(), dst.local_list()) };
        let ([from], [into]) = (from, into) else {
            return false;
        };
        if from.len != into.len {
            return false;
        }
        // SAFETY (each arm): this function's contract, the blocks' one length `from.len`.
        unsafe {
            match from.len {
                8 => self.copy_column::<8>(dst, *from, *into, len),
                16 => self.copy_column::<16>(dst, *from, *into, len),
                4 => self.copy_column::<4>(dst, *from, *into, len),
                _ => self.copy_column::<0>(dst, *from, *into, len),
            }
        }
        true
    }

    /// [`copy_column_into`](Self::copy_column_into)'s loop: whole blocks of `N` bytes copied
    /// as a constant size (none where `N` is 0, or where the blocks are not `N` long).
    ///
    /// # Safety
    /// As for `copy_column_into`, `from` and `into` the two lists' one block, of one length.
    #[inline(always)]
    unsafe fn copy_column<const N: usize>(
        &self,
        dst: &Blocks,
        from: Block,
        into: Block,
        len: usize,
    ) {
        let block = from.len;
        if len == 0 || block == 0 {
            return;
        }
        let mut src = self.base.wrapping_add(from.offset as u64);
        let mut to = dst.base.wrapping_add(into.offset as u64);
        for _ in 0..len / block {
            // SAFETY: a whole block of each side's next element, within their `len` packed
            // bytes: readable, and writable apart from it (this function's contract).
            unsafe {
                let (s, d) = (src as usize as *const u8, to as usize as *mut u8);
                if block == N {
                    std::ptr::copy_nonoverlapping(s, d, N);
                } else {
                    bulk_copy::copy_nonoverlapping(s, d, block);
                }
            }
            src = src.wrapping_add(self.extent);
            to = to.wrapping_add(dst.extent);
        }
        let tail = len % block;
        if tail > 0 {
            // SAFETY: the front of the next block on each side, where the `len` bytes end.
            unsafe {
                bulk_copy::copy_nonoverlapping(
                    src as usize as *const u8,
                    to as usize as *mut u8,
                    tail,
                )
            };
        }
    }

    /// [`runs`](Self::runs) without merging blocks that touch: a block (or its part in the
    /// range) at a time, cheaper to walk, for copies block by block.
    pub fn pieces<'a>(&self, list: &'a [Block], start: usize, len: usize) -> Pieces<'a> {
        Pieces(self.runs(list, start, len))
    }

    /// The packed bytes `start..start + len` as runs of addresses, in packing order, with
    /// neighbouring runs that touch merged; `list` is the description's block list.
    pub fn runs<'a>(&self, list: &'a [Block], start: usize, len: usize) -> Runs<'a> {
        self.runs_at(list, self.position(list, start), len)
    }

    /// [`runs`](Self::runs) of the `len` packed bytes from `at`, a position of this
    /// description; [`Runs::position`] gives where they end once walked.
    pub(crate) fn runs_at<'a>(&self, list: &'a [Block], at: Position, len: usize) -> Runs<'a> {
        Runs {
            base: self.base,
            extent: self.extent,
            list,
            element: at.element,
            block: at.block,
            within: at.within,
            left: len,
        }
    }
}

/// A point in a description's packed bytes: the element, the block of it, and the bytes of
/// that block before the point. A walk in windows carries it from one window to the next,
/// so that none seeks from its element's first block: a seek a window would cost, for an
/// element of many blocks, about the element's blocks over two a window (quadratic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    element: u64,
    block: usize,
    within: usize,
}

impl Position {
    /// The first packed byte.
    pub(crate) const START: Position = Position {
        element: 0,
        block: 0,
        within: 0,
    };
}

/// The runs of [`Blocks::runs`]: `(address, length)`, never empty.
pub struct Runs<'a> {
    base: u64,
    extent: u64,
    list: &'a [Block],
    element: u64,
    block: usize,
    /// Bytes of the current block already given.
    within: usize,
    left: usize,
}

impl Runs<'_> {
    /// Where the runs given so far end: once all are walked, the position after the range.
    pub(crate) fn position(&self) -> Position {
        Position {
            element: self.element,
            block: self.block,
            within: self.within,
        }
    }

    /// The next block's piece, unmerged.
    fn piece(&mut self) -> Option<(u64, usize)> {
        if self.left == 0 || self.list.is_empty() {
            return None;
        }
        while self.list[self.block].len == self.within {
            self.block += 1;
            self.within = 0;
            if self.block == self.list.len() {
                self.block = 0;
                self.element += 1;
            }
        }
        let b = self.list[self.block];
        let addr = self
            .base
            .wrapping_add(self.element.wrapping_mul(self.extent))
            .wrapping_add((b.offset + self.within) as u64);
        let len = (b.len - self.within).min(self.left);
        self.within += len;
        self.left -= len;
        Some((addr, len))
    }
}

impl Iterator for Runs<'_> {
    type Item = (u64, usize);

    fn next(&mut self) -> Option<(u64, usize)> {
        let (addr, mut len) = self.piece()?;
        // Merged while the next piece starts where this one ends (a vector of whole
        // elements, a struct without padding): fewer iovecs, longer copies.
        loop {
            let save = (self.element, self.block, self.within, self.left);
            match self.piece() {
                Some((next, more)) if next == addr.wrapping_add(len as u64) => len += more,
                Some(_) => {
                    (self.element, self.block, self.within, self.left) = save;
                    return Some((addr, len));
                }
                None => return Some((addr, len)),
            }
        }
    }
}

/// The pieces of [`Blocks::pieces`]: `(address, length)`, never empty.
pub struct Pieces<'a>(Runs<'a>);

impl Iterator for Pieces<'_> {
    type Item = (u64, usize);

    #[inline]
    fn next(&mut self) -> Option<(u64, usize)> {
        self.0.piece()
    }
}

/// The bytes of `blocks` as the wire carries them (a description made in this process over
/// live memory, as the tests' are).
#[cfg(test)]
pub(crate) fn pack(blocks: &Blocks) -> Vec<u8> {
    let mut packed = vec![0u8; blocks.len()];
    // SAFETY: the tests' descriptions lie within their live buffers and lists.
    unsafe { blocks.pack_range_into(0, blocks.len(), packed.as_mut_ptr()) };
    packed
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn column() -> (Vec<u8>, Vec<Block>) {
        let buf: Vec<u8> = (0..64).collect();
        (buf, vec![Block { offset: 8, len: 8 }])
    }

    #[test]
    fn a_column_runs_one_block_an_element() {
        let (buf, list) = column();
        let blocks = Blocks::new(buf.as_ptr(), 2, 32, &list).unwrap();
        assert_eq!(blocks.len(), 16);
        let base = buf.as_ptr() as u64;
        let runs: Vec<_> = blocks.runs(&list, 0, 16).collect();
        assert_eq!(runs, vec![(base + 8, 8), (base + 40, 8)]);
        // A range that starts and ends inside blocks.
        let runs: Vec<_> = blocks.runs(&list, 3, 7).collect();
        assert_eq!(runs, vec![(base + 11, 5), (base + 40, 2)]);
    }

    #[test]
    fn touching_blocks_merge_across_elements() {
        let buf = [0u8; 32];
        let list = [Block { offset: 0, len: 4 }, Block { offset: 4, len: 4 }];
        let blocks = Blocks::new(buf.as_ptr(), 4, 8, &list).unwrap();
        let runs: Vec<_> = blocks.runs(&list, 0, 32).collect();
        assert_eq!(runs, vec![(buf.as_ptr() as u64, 32)]);
    }

    #[test]
    fn a_description_read_back_is_checked() {
        let (buf, list) = column();
        let blocks = Blocks::new(buf.as_ptr(), 2, 32, &list).unwrap();
        // SAFETY: `Blocks` is plain integers, `#[repr(C)]`, with no padding.
        let wire: [u8; Blocks::WIRE_LEN] = unsafe { std::mem::transmute(blocks) };
        assert_eq!(Blocks::from_wire(&wire, 16), Ok(blocks));
        assert_eq!(Blocks::from_wire(&wire, 10), Ok(blocks));
        let err = Blocks::from_wire(&wire, 17).unwrap_err();
        assert!(err.contains("fewer than the 17 to read"), "{err}");
        assert!(blocks.check_list(&list).is_ok());
        let err = blocks
            .check_list(&[Block { offset: 0, len: 9 }])
            .unwrap_err();
        assert!(err.contains("does not match its list"), "{err}");
    }

    /// A peer's list whose block starts before the element (an offset that wraps) is
    /// refused, rather than spanning 8 bytes while a block reads a GiB below the base.
    #[test]
    fn a_block_that_wraps_the_address_space_is_refused() {
        let buf = [0u8; 16];
        let list = [
            Block { offset: 0, len: 8 },
            Block {
                offset: (1usize << 30).wrapping_neg(),
                len: (1 << 30) + 8,
            },
        ];
        let element_len = 8 + (1u64 << 30) + 8;
        let wire_fields = [buf.as_ptr() as u64, 1, 16, element_len, 0, 2];
        let mut wire = [0u8; Blocks::WIRE_LEN];
        for (i, f) in wire_fields.iter().enumerate() {
            wire[i * 8..i * 8 + 8].copy_from_slice(&f.to_ne_bytes());
        }
        let blocks = Blocks::from_wire(&wire, 16).unwrap();
        let err = blocks.check_list(&list).unwrap_err();
        assert!(err.contains("past the end of the address space"), "{err}");
        assert_eq!(blocks.span(&list), None);
    }

    #[test]
    fn more_blocks_than_bytes_is_refused() {
        let fields = [0u64, 1, 16, 4, 0, 5];
        let mut wire = [0u8; Blocks::WIRE_LEN];
        for (i, f) in fields.iter().enumerate() {
            wire[i * 8..i * 8 + 8].copy_from_slice(&f.to_ne_bytes());
        }
        let err = Blocks::from_wire(&wire, 4).unwrap_err();
        assert!(err.contains("lists 5 blocks for 4 bytes"), "{err}");
    }

    proptest! {
        /// A column copied into a column (one block an element on both sides, of the same
        /// length: constant-size copies for 4, 8 and 16 bytes, others by `bulk_copy`), any
        /// prefix of it, lands as an unpack of its pack would put it, the gaps keeping their
        /// guard; a destination whose block differs in length is refused, untouched.
        #[test]
        fn a_column_copied_into_a_column_is_its_pack_unpacked(
            pick in 0usize..6,
            from in (0usize..8, 0usize..20),
            into in (0usize..8, 0usize..20),
            count in 1usize..40,
            cut in 0usize..1000,
        ) {
            const GUARD: u8 = 0xEE;
            let block = [1, 3, 4, 8, 16, 24][pick];
            let (sextent, dextent) = (from.0 + block + from.1, into.0 + block + into.1);
            let source: Vec<u8> = (0..sextent * count).map(|i| (i * 7 % 251) as u8).collect();
            let slist = [Block { offset: from.0, len: block }];
            let sent = Blocks::new(source.as_ptr(), count, sextent, &slist).unwrap();
            let packed = pack(&sent);
            let len = cut % (packed.len() + 1);
            let dlist = [Block { offset: into.0, len: block }];
            let mut expected = vec![GUARD; dextent * count];
            let reference = Blocks::new(expected.as_mut_ptr(), count, dextent, &dlist).unwrap();
            // SAFETY: the description lies within `expected`, borrowed by nothing else for
            // the call; the packed bytes are a buffer of their own.
            unsafe { reference.unpack_range_from(0, &packed[..len]) };
            // A buffer of its own for the refused target, of the size it describes: were it
            // not refused, the copy would land in the buffer and fail the guard check, not
            // write past it.
            let mut spare = vec![GUARD; (dextent + 1) * count];
            let longer = [Block { offset: into.0, len: block + 1 }];
            let other = Blocks::new(spare.as_mut_ptr(), count, dextent + 1, &longer).unwrap();
            // SAFETY: both descriptions lie within their live buffers and lists, apart; `len`
            // is at most either's bytes.
            let refused = !unsafe { sent.copy_column_into(&other, len) };
            prop_assert!(refused);
            prop_assert!(spare.iter().all(|&b| b == GUARD), "a refused copy wrote");
            let mut landed = vec![GUARD; dextent * count];
            let target = Blocks::new(landed.as_mut_ptr(), count, dextent, &dlist).unwrap();
            // SAFETY: both descriptions lie within their live buffers and lists, apart; `len`
            // is at most either's bytes.
            let copied = unsafe { sent.copy_column_into(&target, len) };
            prop_assert!(copied);
            prop_assert_eq!(landed, expected);
        }

        /// Any range of the packed bytes, walked as runs, packed or unpacked, is that range
        /// of a serial pack; an unpack writes no byte outside the range's. `single` forces
        /// a list of one 4-, 8- or 16-byte block (the constant-size copies).
        #[test]
        fn runs_of_a_range_are_that_range_of_the_pack(
            pieces in prop::collection::vec((0usize..5, 0usize..20), 1..5),
            single in 0usize..4,
            count in 1usize..6,
            gap in 0usize..5,
            cut in (0usize..1000, 0usize..1000),
        ) {
            let mut list = Vec::new();
            let mut at = 0;
            let pieces = match single {
                0 => pieces,
                n => vec![(pieces[0].0, 2 << n)],
            };
            for (skip, len) in pieces {
                list.push(Block { offset: at + skip, len });
                at += skip + len;
            }
            let extent = at + gap;
            let buf: Vec<u8> = (0..extent * count).map(|i| (i * 7 % 251) as u8).collect();
            let blocks = Blocks::new(buf.as_ptr(), count, extent, &list).unwrap();
            let mut serial = Vec::new();
            for e in 0..count {
                for b in &list {
                    serial.extend_from_slice(&buf[e * extent + b.offset..][..b.len]);
                }
            }
            prop_assert_eq!(pack(&blocks), serial.clone());
            let start = cut.0 % (serial.len() + 1);
            let len = cut.1 % (serial.len() - start + 1);
            let runs: Vec<(u64, usize)> = blocks.runs(&list, start, len).collect();
            prop_assert!(runs.iter().all(|&(_, n)| n > 0));
            let got: Vec<u8> = runs
                .iter()
                .flat_map(|&(addr, n)| {
                    let offset = (addr - buf.as_ptr() as u64) as usize;
                    buf[offset..offset + n].iter().copied()
                })
                .collect();
            prop_assert_eq!(got, serial[start..start + len].to_vec());
            let mut range = vec![0u8; len];
            // SAFETY: the description lies within its live buffer and list; `range` holds
            // `len` bytes of its own.
            unsafe { blocks.pack_range_into(start, len, range.as_mut_ptr()) };
            prop_assert_eq!(&range, &serial[start..start + len]);
            // The range unpacked (from mid-block where `start` falls so) into a buffer of the
            // same layout holding a guard, 16 bytes past its end too.
            const GUARD: u8 = 0xEE;
            let mut expected = vec![GUARD; extent * count + 16];
            let mut p = 0;
            for e in 0..count {
                for b in &list {
                    for i in 0..b.len {
                        if (start..start + len).contains(&p) {
                            expected[e * extent + b.offset + i] = serial[p];
                        }
                        p += 1;
                    }
                }
            }
            let mut into = vec![GUARD; extent * count + 16];
            let target = Blocks::new(into.as_mut_ptr(), count, extent, &list).unwrap();
            // SAFETY: the description lies within `into`, live and borrowed by nothing else
            // for the call, and `range` is `len` packed bytes from `start`, within its own.
            unsafe { target.unpack_range_from(start, &range) };
            prop_assert_eq!(into, expected);
        }
    }
}
