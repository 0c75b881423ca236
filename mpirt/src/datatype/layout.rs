//! Where a datatype's bytes lie in memory and what they are: a normalized list of byte blocks
//! in type-map order, the extent one element steps over, and the signature (the basic
//! elements in order) that a matching send and receive share. Packing and unpacking move the
//! blocks' bytes and nothing else, so padding between them is never read or sent.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::slice;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::Kind;

/// The most bytes a datatype's offsets, extent and packed size may reach: what one Rust
/// allocation, and so one pointer offset, can span. Every sum and product on them is checked
/// against it, since a wrapped one would let a view pass its bounds check and reach memory
/// outside its buffer.
pub(crate) const MAX_BYTES: usize = isize::MAX as usize;

/// The most separate blocks one layout keeps: it lists them (16 bytes each), so a vector of
/// billions of blocks, or of the same block over and over, is refused by name rather than
/// ending the process when memory runs out.
pub(crate) const MAX_BLOCKS: usize = 1 << 26;

/// Why a layout cannot be: a quantity that would pass [`MAX_BYTES`], or more blocks, or runs
/// of one kind of element in its signature, than [`MAX_BLOCKS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TooLarge {
    Bytes(&'static str),
    Blocks(usize),
    Runs(usize),
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TooLarge::Bytes(what) => write!(
                f,
                "{what} would pass {MAX_BYTES} bytes (isize::MAX), more than any buffer can hold"
            ),
            TooLarge::Blocks(blocks) => write!(
                f,
                "{blocks} separate blocks would pass {MAX_BLOCKS}, the most mpirt keeps for one \
                 datatype (it lists them)"
            ),
            TooLarge::Runs(runs) => write!(
                f,
                "{runs} runs of one kind of basic element would pass {MAX_BLOCKS}, the most \
                 mpirt keeps for one datatype's signature (it lists them)"
            ),
        }
    }
}

/// `a + b`, if it stays within [`MAX_BYTES`], else which quantity `what` would pass it.
pub(crate) fn add(a: usize, b: usize, what: &'static str) -> Result<usize, TooLarge> {
    a.checked_add(b)
        .filter(|&sum| sum <= MAX_BYTES)
        .ok_or(TooLarge::Bytes(what))
}

/// `a * b`, if it stays within [`MAX_BYTES`], else which quantity `what` would pass it.
pub(crate) fn mul(a: usize, b: usize, what: &'static str) -> Result<usize, TooLarge> {
    a.checked_mul(b)
        .filter(|&product| product <= MAX_BYTES)
        .ok_or(TooLarge::Bytes(what))
}

/// One run of bytes of an element, `offset` bytes from the element's start: the PML's, so
/// that a send's blocks reach it as they are (see `pml::blocks`).
pub(crate) use pml::blocks::Block;

/// A basic element of a signature.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Element {
    /// A number, `bool` or `char` of `size` bytes.
    Basic { kind: Kind, size: usize },
    /// A type known only by its name (an `Equivalence` built with `Datatype::plain` or
    /// `Datatype::checked`), with its check of one element's bytes.
    Opaque {
        name: &'static str,
        size: usize,
        check: Option<fn(&[u8]) -> bool>,
    },
}

impl PartialEq for Element {
    fn eq(&self, other: &Element) -> bool {
        match (self, other) {
            (Element::Basic { kind: a, .. }, Element::Basic { kind: b, .. }) => a == b,
            (
                Element::Opaque { name, size, .. },
                Element::Opaque {
                    name: other_name,
                    size: other_size,
                    ..
                },
            ) => name == other_name && size == other_size,
            _ => false,
        }
    }
}

impl Element {
    pub fn size(&self) -> usize {
        match *self {
            Element::Basic { size, .. } | Element::Opaque { size, .. } => size,
        }
    }

    /// The alignment Rust gives the element, which a struct's extent is rounded to: a
    /// number's is its size (as on the platforms mpirt runs on, capped at 16), a complex
    /// number's that of its parts, and a type known only by its name may lie anywhere.
    pub fn align(&self) -> usize {
        match *self {
            Element::Basic {
                kind: Kind::Complex(size),
                ..
            } => usize::from(size) / 2,
            Element::Basic { size, .. } => size.clamp(1, 16),
            Element::Opaque { .. } => 1,
        }
    }

    /// Whether `bytes`, one element's, hold a valid value.
    fn is_valid(&self, bytes: &[u8]) -> bool {
        match *self {
            Element::Basic {
                kind: Kind::Bool, ..
            } => bytes[0] <= 1,
            Element::Basic {
                kind: Kind::Char, ..
            } => char::from_u32(u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                .is_some(),
            Element::Basic { .. } => true,
            Element::Opaque { check, .. } => check.is_none_or(|check| check(bytes)),
        }
    }

    fn needs_check(&self) -> bool {
        match *self {
            Element::Basic { kind, .. } => matches!(kind, Kind::Bool | Kind::Char),
            Element::Opaque { check, .. } => check.is_some(),
        }
    }
}

/// `count` elements of one kind, in a row of the signature.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Run {
    pub element: Element,
    pub count: usize,
}

/// The signature of a type: its basic elements in type-map order, runs of one kind merged.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Signature(Vec<Run>);

impl Signature {
    pub fn one(element: Element, count: usize) -> Signature {
        Signature(match count {
            0 => Vec::new(),
            _ => vec![Run { element, count }],
        })
    }

    fn push(&mut self, element: Element, count: usize) -> Result<(), TooLarge> {
        if count == 0 {
            return Ok(());
        }
        match self.0.last_mut() {
            Some(last) if last.element == element => {
                last.count = add(last.count, count, "the number of basic elements")?;
            }
            _ => self.0.push(Run { element, count }),
        }
        Ok(())
    }

    fn extend(&mut self, other: &Signature, times: usize) -> Result<(), TooLarge> {
        // A signature of one kind repeats as one longer run.
        if let [run] = other.0.as_slice() {
            let count = mul(run.count, times, "the number of basic elements")?;
            return self.push(run.element, count);
        }
        // Runs of two kinds or more repeat as runs: as many as there would be blocks of a
        // type whose blocks merge (a struct of an `i32` and an `f32`), bounded alike.
        let runs = times
            .checked_mul(other.0.len())
            .and_then(|new| new.checked_add(self.0.len()))
            .unwrap_or(usize::MAX);
        if runs > MAX_BLOCKS {
            return Err(TooLarge::Runs(runs));
        }
        for _ in 0..times {
            for run in &other.0 {
                self.push(run.element, run.count)?;
            }
        }
        Ok(())
    }

    /// The only element kind, when there is one.
    pub fn single(&self) -> Option<Element> {
        match self.0.as_slice() {
            [run] => Some(run.element),
            _ => None,
        }
    }

    /// The index of the first basic element where this signature and `other` differ (the
    /// shorter one's length, where one is the other's start).
    pub fn first_difference(&self, other: &Signature) -> usize {
        let mut at = 0;
        for (a, b) in self.0.iter().zip(&other.0) {
            if a.element != b.element {
                return at;
            }
            if a.count != b.count {
                return at + a.count.min(b.count);
            }
            at += a.count;
        }
        at
    }

    pub fn runs(&self) -> &[Run] {
        &self.0
    }
}

/// A datatype's layout: blocks, extent and signature (MPI's type map, normalized). Its
/// offsets, extent, span and size stay within [`MAX_BYTES`]: [`append`](Self::append) and
/// [`round_extent`](Self::round_extent) refuse what would pass it.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// In type-map order (the order bytes are packed in); neighbours that touch are merged.
    blocks: Vec<Block>,
    /// What one element steps over in an array of them: its upper bound less its lower
    /// bound (MPI's extent; the lower bound is the lowest displacement).
    pub extent: usize,
    lower: Option<usize>,
    /// Where the last-ending block of one element ends: the bytes one element reaches.
    end: usize,
    /// Bytes of data per element: the blocks' lengths summed.
    pub size: usize,
    /// The largest basic element's alignment: what a struct's extent is rounded to.
    pub align: usize,
    pub signature: Signature,
    needs_check: bool,
    /// The blocks as one block repeated at a constant stride, where they are (a vector's
    /// column), found once: a send describes them to the PML in one block instead of a
    /// list as long as the column (see [`regular`](Self::regular)).
    regular: OnceLock<Option<Regular>>,
    /// Whether one element's blocks lie in rising order, none overlapping the next: found
    /// once, so that a receive view's overlap check is a comparison, not a walk of a
    /// column's blocks on every exchange (7% of a 4 MiB halo exchange's cycles under perf).
    rising: OnceLock<bool>,
}

/// One element's blocks as `block` repeated `times` times, `stride` bytes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Regular {
    pub block: Block,
    pub times: usize,
    pub stride: usize,
}

impl Layout {
    /// One basic element (or an element known by its name) of `size` bytes, `count` times:
    /// a Rust type's, whose size is that of a value in memory.
    pub fn basic(element: Element, count: usize) -> Layout {
        let size = element.size() * count;
        Layout {
            blocks: if size == 0 {
                Vec::new()
            } else {
                vec![Block {
                    offset: 0,
                    len: size,
                }]
            },
            extent: size,
            lower: Some(0),
            end: size,
            size,
            align: element.align(),
            needs_check: element.needs_check(),
            signature: Signature::one(element, count),
            regular: OnceLock::new(),
            rising: OnceLock::new(),
        }
    }

    /// An empty layout that pieces are appended to.
    pub fn empty() -> Layout {
        Layout {
            blocks: Vec::new(),
            extent: 0,
            lower: None,
            end: 0,
            size: 0,
            align: 1,
            signature: Signature::default(),
            needs_check: false,
            regular: OnceLock::new(),
            rising: OnceLock::new(),
        }
    }

    /// Appends `count` elements of `piece`, the first at `offset`, each `stride` bytes after
    /// the last; the extent grows to cover them. Refused, naming what would pass
    /// [`MAX_BYTES`], where an offset, the extent or the size would: the layout is then
    /// left half-built, to be dropped.
    pub fn append(
        &mut self,
        piece: &Layout,
        count: usize,
        offset: usize,
        stride: usize,
    ) -> Result<(), TooLarge> {
        self.align = self.align.max(piece.align);
        self.needs_check |= piece.needs_check;
        // An empty piece has no bounds (MPI's empty type map): it adds nothing.
        if count == 0 || piece.lower.is_none() {
            return Ok(());
        }
        // Every bound is checked before a block is pushed: the last element's end bounds
        // every block's offset and length, so the pushes need no checks of their own.
        let last = add(
            offset,
            mul(count - 1, stride, "the offset of the last block")?,
            "the offset of the last block",
        )?;
        let end = add(last, piece.end, "the end of the last block")?;
        let piece_lower = add(offset, piece.lower.unwrap_or(0), "the lower bound")?;
        let upper = add(
            add(last, piece.lower.unwrap_or(0), "the upper bound")?,
            piece.extent,
            "the upper bound",
        )?;
        let size = add(self.size, mul(piece.size, count, "the size")?, "the size")?;
        // Elements of one block each, every one starting where the last ends (a contiguous
        // type, a vector's block), make one block, without a push per element.
        let merged = matches!(piece.blocks.as_slice(), [block] if stride == block.len);
        if !merged {
            let blocks = count
                .checked_mul(piece.blocks.len())
                .and_then(|new| new.checked_add(self.blocks.len()))
                .unwrap_or(usize::MAX);
            if blocks > MAX_BLOCKS {
                return Err(TooLarge::Blocks(blocks));
            }
        }
        self.signature.extend(&piece.signature, count)?;
        match piece.blocks.as_slice() {
            [block] if merged => {
                self.push_block(offset + block.offset, block.len * count);
            }
            blocks => {
                for i in 0..count {
                    let base = offset + i * stride;
                    for block in blocks {
                        self.push_block(base + block.offset, block.len);
                    }
                }
            }
        }
        let upper = self
            .lower
            .map_or(upper, |lower| upper.max(lower + self.extent));
        let lower = self
            .lower
            .map_or(piece_lower, |lower| lower.min(piece_lower));
        self.lower = Some(lower);
        self.extent = upper - lower;
        self.end = self.end.max(end);
        self.size = size;
        Ok(())
    }

    fn push_block(&mut self, offset: usize, len: usize) {
        // Found again for the blocks as they will be.
        self.regular = OnceLock::new();
        self.rising = OnceLock::new();
        if len == 0 {
            return;
        }
        match self.blocks.last_mut() {
            Some(last) if last.offset + last.len == offset => last.len += len,
            _ => self.blocks.push(Block { offset, len }),
        }
    }

    /// Rounds the extent up to the largest alignment of its elements, as MPI does for
    /// structs, so that an array of them steps as Rust lays it out.
    pub fn round_extent(&mut self) -> Result<(), TooLarge> {
        self.extent = mul(
            self.extent.div_ceil(self.align),
            self.align,
            "the extent rounded to the alignment",
        )?;
        Ok(())
    }

    /// Sets the bounds to a Rust struct's: from 0 to its size.
    pub fn set_extent(&mut self, extent: usize) {
        self.lower = Some(0);
        self.extent = extent;
    }

    /// Whether `count` elements are one run of bytes from the buffer's start: sent as they
    /// lie, with no packing.
    pub fn is_contiguous(&self) -> bool {
        match self.blocks.as_slice() {
            [] => true,
            [only] => only.offset == 0 && only.len == self.extent,
            _ => false,
        }
    }

    pub fn needs_check(&self) -> bool {
        self.needs_check
    }

    /// Whether every block of one element lies between its lower bound, at byte 0, and its
    /// extent: within one value of a Rust type whose size is the extent.
    pub fn lies_within_extent(&self) -> bool {
        self.lower.unwrap_or(0) == 0 && self.end <= self.extent
    }

    /// Bytes from the buffer's start that `count` elements reach, unless that would pass
    /// [`MAX_BYTES`] (no buffer holds them).
    pub fn span(&self, count: usize) -> Result<usize, TooLarge> {
        if count == 0 || self.blocks.is_empty() {
            return Ok(0);
        }
        let last = mul(count - 1, self.extent, "the span of the elements")?;
        add(last, self.end, "the span of the elements")
    }

    /// Bytes `count` elements take packed, unless that would pass [`MAX_BYTES`].
    pub fn packed_len(&self, count: usize) -> Result<usize, TooLarge> {
        mul(count, self.size, "the packed size of the elements")
    }

    /// Where two blocks of `count` elements overlap, if they do: a receive would write the
    /// same bytes twice. `count` elements' [`span`](Self::span) must be known to fit (every
    /// offset here is below it).
    pub fn overlap(&self, count: usize) -> Option<(usize, usize)> {
        // The common case, a receive view of a vector or a struct, in one pass and without a
        // list of every element's blocks: blocks in rising order, none overlapping the
        // next, and an element that ends before the next one's first block.
        let rising = *self.rising.get_or_init(|| {
            // A block at a stride no shorter than itself rises by construction (a vector).
            self.regular().is_some()
                || self
                    .blocks
                    .windows(2)
                    .all(|w| w[0].offset + w[0].len <= w[1].offset)
        });
        let apart = match (self.blocks.first(), count) {
            (_, 0 | 1) | (None, _) => true,
            (Some(first), _) => self.end <= self.extent + first.offset,
        };
        if rising && apart {
            return None;
        }
        // Element `i + d` is element `i` moved `d` extents on, so any two that overlap are as
        // far apart as element 0 and one that overlaps it: one within the bytes element 0
        // reaches from its lowest block. Those few are listed, not all `count` (a receive
        // view over a large buffer would list gigabytes).
        let lowest = self.blocks.iter().map(|b| b.offset).min().unwrap_or(0);
        let reach = self.end - lowest;
        let listed = match self.extent {
            0 => count.min(2),
            extent => count.min(reach / extent + 1),
        };
        let mut all: Vec<Block> = (0..listed)
            .flat_map(|i| {
                self.blocks.iter().map(move |b| Block {
                    offset: i * self.extent + b.offset,
                    len: b.len,
                })
            })
            .collect();
        all.sort_by_key(|b| b.offset);
        all.windows(2)
            .find(|w| w[0].offset + w[0].len > w[1].offset)
            .map(|w| (w[0].offset, w[1].offset))
    }

    /// Packs `count` elements at `base` into `out` (`count * size` bytes).
    ///
    /// # Safety
    /// `base` must be valid for reads of `span(count)` bytes, initialized where the blocks lie.
    pub unsafe fn pack(&self, count: usize, base: *const u8, out: &mut [u8]) {
        // Checked, not wrapped: a wrapped product equal to a short buffer's length would let
        // the copies run past it.
        assert_eq!(
            Some(out.len()),
            count.checked_mul(self.size),
            "a packed buffer of the type's size"
        );
        let blocks = self.describe(count, base);
        // SAFETY: described here from `self.blocks`, alive for the call; the elements lie
        // within `span(count)` bytes of `base`, readable (the caller's promise); `out` holds
        // the `count * size` bytes they carry, and a `&mut` overlaps none of them.
        unsafe { blocks.pack_range_into(0, out.len(), out.as_mut_ptr()) };
    }

    /// Unpacks `packed` (whole or the front of `count` elements' packed bytes) into the
    /// blocks of the elements at `base`; bytes outside the blocks are not touched.
    ///
    /// # Safety
    /// `base` must be valid for writes of `span(count)` bytes, apart from `packed`, and
    /// `packed` at most `count * size` bytes long.
    pub unsafe fn unpack(&self, count: usize, base: *mut u8, packed: &[u8]) {
        assert!(
            count
                .checked_mul(self.size)
                .is_some_and(|size| packed.len() <= size),
            "packed bytes of at most count elements"
        );
        let blocks = self.describe(count, base);
        // SAFETY: as in `pack`, with the roles swapped (the caller's promise of writable
        // elements apart from `packed`); `packed` is at most the bytes they carry.
        unsafe { blocks.unpack_range_from(0, packed) };
    }

    /// `count` elements at `base` described for the PML, whose block list is this layout's
    /// (alive as long as the description): for sends and receives in place, and for the
    /// PML's loops, which pack and unpack (see `pml::blocks`). A column is one block at a
    /// stride, not a list as long as the column (for a peer to read, or a loop to walk),
    /// where the elements continue the stride (or are one). `count * size` must fit.
    pub fn describe(&self, count: usize, base: *const u8) -> pml::blocks::Blocks {
        match self.regular() {
            Some(r) if count == 1 || self.extent == r.times * r.stride => {
                pml::blocks::Blocks::new(base, count * r.times, r.stride, slice::from_ref(&r.block))
            }
            _ => pml::blocks::Blocks::new(base, count, self.extent, &self.blocks),
        }
        .expect("the packed size was checked to fit")
    }

    /// Whether packed bytes (the front of some elements) hold valid values element by
    /// element, as the signature says.
    pub fn is_valid_packed(&self, packed: &[u8]) -> bool {
        if !self.needs_check {
            return true;
        }
        let mut rest = packed;
        loop {
            for run in self.signature.runs() {
                let size = run.element.size();
                for _ in 0..run.count {
                    if rest.len() < size {
                        return true;
                    }
                    let (one, after) = rest.split_at(size);
                    if !run.element.is_valid(one) {
                        return false;
                    }
                    rest = after;
                }
            }
            if self.size == 0 {
                return true;
            }
        }
    }

    /// One element's blocks, in type-map order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// One element's blocks as one block at a constant stride, if they are: two or more of
    /// one length at rising offsets, each the same distance from the last.
    pub fn regular(&self) -> Option<&Regular> {
        self.regular
            .get_or_init(|| {
                let [first, second, ..] = self.blocks[..] else {
                    return None;
                };
                let stride = second.offset.checked_sub(first.offset)?;
                let regular = self.blocks.windows(2).all(|w| {
                    w[1].len == first.len && w[1].offset.checked_sub(w[0].offset) == Some(stride)
                });
                (regular && stride >= first.len).then_some(Regular {
                    block: first,
                    times: self.blocks.len(),
                    stride,
                })
            })
            .as_ref()
    }
}

/// The layouts that datatypes name by id: user datatypes while they live, and the layouts of
/// derived structs and of types whose `Equivalence` builds a user datatype, for the program's
/// life (one per type).
struct Registry {
    layouts: HashMap<u64, Arc<Layout>>,
    next: u64,
    by_type: HashMap<std::any::TypeId, super::Datatype>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    // A panic while the registry was held left it whole (every change is one insert or
    // remove), so a poisoned lock is taken as it is.
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    guard.get_or_insert_with(|| Registry {
        layouts: HashMap::new(),
        next: 1,
        by_type: HashMap::new(),
    });
    guard
}

/// Keeps `layout` under a new id.
pub(crate) fn register(layout: Arc<Layout>) -> u64 {
    let mut guard = registry();
    let registry = guard.as_mut().expect("set up by registry()");
    let id = registry.next;
    registry.next += 1;
    registry.layouts.insert(id, layout);
    id
}

/// Forgets the layout of a user datatype that was dropped.
pub(crate) fn unregister(id: u64) {
    if let Some(registry) = registry().as_mut() {
        registry.layouts.remove(&id);
    }
}

/// The layout under `id`, if its datatype still lives.
pub(crate) fn lookup(id: u64) -> Option<Arc<Layout>> {
    registry()
        .as_ref()
        .and_then(|r| r.layouts.get(&id).cloned())
}

thread_local! {
    /// This thread's copies of `Registry::by_type`'s entries it has used: a send of a type
    /// kept there looks it up here, without the registry's lock.
    static KEPT: RefCell<HashMap<std::any::TypeId, super::Datatype>> =
        RefCell::new(HashMap::new());
}

/// The datatype kept for the Rust type `type_id`, made by `make` the first time.
pub(crate) fn for_type(
    type_id: std::any::TypeId,
    make: impl FnOnce() -> super::Datatype,
) -> super::Datatype {
    // A send from another thread-local's destructor may run after this cache is gone: it
    // then goes to the registry each time.
    if let Ok(Some(found)) = KEPT.try_with(|kept| kept.borrow().get(&type_id).copied()) {
        return found;
    }
    let kept = kept_for_type(type_id, make);
    // Not kept where the cache is gone (see above): the registry still has it.
    let _ = KEPT.try_with(|cache| cache.borrow_mut().insert(type_id, kept));
    kept
}

/// [`for_type`] past this thread's cache: the registry's entry, made if there is none.
#[cold]
fn kept_for_type(
    type_id: std::any::TypeId,
    make: impl FnOnce() -> super::Datatype,
) -> super::Datatype {
    if let Some(found) = registry()
        .as_ref()
        .and_then(|r| r.by_type.get(&type_id).copied())
    {
        return found;
    }
    // Made without the lock: `make` registers layouts (and may look up its fields' types).
    let made = make();
    let mut guard = registry();
    let registry = guard.as_mut().expect("set up by registry()");
    let kept = *registry.by_type.entry(type_id).or_insert(made);
    // Another thread made one first: this one's layout is not needed.
    if let (Some(mine), Some(theirs)) = (made.layout_id(), kept.layout_id()) {
        if mine != theirs {
            registry.layouts.remove(&mine);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> Layout {
        Layout::basic(
            Element::Basic {
                kind: Kind::Signed(4),
                size: 4,
            },
            1,
        )
    }

    #[test]
    fn a_column_is_one_block_at_a_stride() {
        let mut column = Layout::empty();
        column.append(&int(), 5, 4, 16).unwrap();
        let regular = column.regular().copied();
        let block = Block { offset: 4, len: 4 };
        let want = Regular {
            block,
            times: 5,
            stride: 16,
        };
        assert_eq!(regular, Some(want));
        // Displacements that fall back (8, 4, 0), or steps that differ: a list it stays.
        let mut backwards = Layout::empty();
        for offset in [8, 4, 0] {
            backwards.append(&int(), 1, offset, 0).unwrap();
        }
        assert_eq!(backwards.regular(), None);
        let mut uneven = Layout::empty();
        for offset in [0, 8, 24] {
            uneven.append(&int(), 1, offset, 0).unwrap();
        }
        assert_eq!(uneven.regular(), None);
    }

    #[test]
    fn blocks_merge_and_pack_in_type_map_order() {
        let mut l = Layout::empty();
        // Displacements 8, 4, 0: packed in that order, not memory order.
        for offset in [8, 4, 0] {
            l.append(&int(), 1, offset, 0).unwrap();
        }
        assert_eq!(l.extent, 12);
        assert_eq!(l.size, 12);
        assert!(!l.is_contiguous());
        let data = [1i32, 2, 3];
        let mut out = vec![0u8; 12];
        // SAFETY: `data` is 12 bytes, the span.
        unsafe { l.pack(1, data.as_ptr().cast(), &mut out) };
        let got: Vec<i32> = out
            .chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [3, 2, 1]);
        let mut contiguous = Layout::empty();
        contiguous.append(&int(), 3, 0, 4).unwrap();
        assert!(contiguous.is_contiguous());
        assert_eq!(contiguous.blocks(), &[Block { offset: 0, len: 12 }]);
    }

    #[test]
    fn signatures_differ_at_the_first_other_element() {
        let float = Layout::basic(
            Element::Basic {
                kind: Kind::Float(8),
                size: 8,
            },
            1,
        );
        let mut a = Layout::empty();
        a.append(&int(), 3, 0, 4).unwrap();
        a.append(&float, 1, 12, 8).unwrap();
        let mut b = Layout::empty();
        b.append(&int(), 2, 0, 4).unwrap();
        b.append(&float, 2, 8, 8).unwrap();
        assert_eq!(a.signature.first_difference(&b.signature), 2);
        assert_eq!(a.signature.first_difference(&a.signature), 4);
    }

    #[test]
    fn overlapping_blocks_are_found() {
        let mut l = Layout::empty();
        l.append(&int(), 2, 0, 2).unwrap();
        assert_eq!(l.overlap(1), Some((0, 2)));
        let mut vector = Layout::empty();
        vector.append(&int(), 2, 0, 8).unwrap();
        assert_eq!(vector.overlap(3), None);
        // An extent shorter than the span: the second element lands on the first.
        vector.set_extent(2);
        assert!(vector.overlap(2).is_some());
        // Blocks out of order that meet only between elements far apart: two blocks of one
        // byte, at 9 then 0, with an extent of 3, so element 3's first block lands on
        // element 0's second one.
        let byte = Layout::basic(
            Element::Basic {
                kind: Kind::Unsigned(1),
                size: 1,
            },
            1,
        );
        let mut falling = Layout::empty();
        falling.append(&byte, 1, 9, 0).unwrap();
        falling.append(&byte, 1, 0, 0).unwrap();
        falling.set_extent(3);
        assert_eq!(falling.overlap(3), None);
        assert_eq!(falling.overlap(4), Some((9, 9)));
        assert_eq!(falling.overlap(1 << 40), Some((9, 9)));
        // The blocks' order is found once and kept, until blocks are appended: a layout
        // checked before an append that lands on its block is checked again.
        let mut grown = Layout::empty();
        grown.append(&int(), 1, 8, 0).unwrap();
        assert_eq!(grown.overlap(1), None);
        grown.append(&int(), 1, 10, 0).unwrap();
        assert_eq!(grown.overlap(1), Some((8, 10)));
        assert_eq!(grown.overlap(1), Some((8, 10)));
    }
}
