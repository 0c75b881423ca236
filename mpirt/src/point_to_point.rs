//! Point-to-point messaging: sends to a [`Destination`], receives from a [`Source`], probes,
//! matched probes and the combined send-receive.
//!
//! Sends without a tag use tag 0; receives without a tag take any (user) tag. Every operation
//! has a `try_` twin that returns the error instead of ending the job.

use std::mem::MaybeUninit;
use std::panic::Location;
use std::sync::Arc;

use pml::RecvBuf;
use pml::{Done, Handle, Pml, SendMode, SourceSel, Started, TagSel};

use crate::backend::MessageHandle;
use crate::communicator::{AnyProcess, CommData, Communicator, Process, Rank};
use crate::datatype::{
    datatype_of, Buffer, BufferMut, Datatype, Equivalence, Layout, UncommittedDatatype,
};
use crate::environment::{self, with_engine};
use crate::error::{or_fatal, Cause, Error};
use crate::request::{Lent, Request, Scope};
use crate::stall;
use bootstrap::stall::Peer;

mod buffered;
mod exchange;
mod future;
mod message;
mod raw;

pub(crate) use buffered::{
    any_in_flight as buffered_in_flight, capacity as buffer_capacity,
    finish_at_finalize as finish_buffered_at_finalize, reattach as reattach_buffer,
};
pub use exchange::{
    send_receive, send_receive_into, send_receive_into_with_tags, send_receive_replace_into,
    send_receive_replace_into_with_tags, send_receive_with_tags,
};
pub use future::ReceiveFuture;
pub use message::{MatchedReceiveVec, Message};
pub use raw::ImmediateReceiveRaw;

/// The point-to-point traits: `use mpirt::point_to_point::traits::*;`.
pub mod traits {
    pub use super::{Destination, MatchedReceiveVec, Source};
}

/// A message tag. Non-negative tags are the user's; negative ones belong to the runtime.
pub type Tag = i32;
/// A number of elements.
pub type Count = i32;
/// What [`Status::count`] says of a message that is not a whole number of the datatype's
/// elements (`MPI_UNDEFINED`: Open MPI's and MPICH's value, which an rsmpi program sees there).
pub const UNDEFINED: Count = -32766;

/// What a receive or a probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    source: Rank,
    tag: Tag,
    bytes: usize,
    cancelled: bool,
}

impl Status {
    #[inline]
    pub(crate) fn from_pml(s: pml::Status) -> Status {
        Status {
            source: s.source as Rank,
            tag: s.tag,
            bytes: s.len,
            cancelled: false,
        }
    }

    /// The status of a completed send (MPI leaves it undefined; this names the destination).
    pub(crate) fn of_send(dest: Rank, tag: Tag) -> Status {
        Status {
            source: dest,
            tag,
            bytes: 0,
            cancelled: false,
        }
    }

    /// The status of a finished immediate collective (MPI's empty status: no source, no tag,
    /// no bytes).
    pub(crate) fn of_collective() -> Status {
        Status {
            source: -1,
            tag: -1,
            bytes: 0,
            cancelled: false,
        }
    }

    pub(crate) fn cancelled() -> Status {
        Status {
            source: -1,
            tag: -1,
            bytes: 0,
            cancelled: true,
        }
    }

    /// The rank the message came from, in the communicator it was received on.
    pub fn source_rank(&self) -> Rank {
        self.source
    }

    pub fn tag(&self) -> Tag {
        self.tag
    }

    /// How many elements of `datatype` the message holds (`MPI_Get_count`): a basic type's
    /// datatype, a user datatype or a reference to one, as rsmpi takes them; [`UNDEFINED`]
    /// where the bytes are not a whole number of elements (or more than a `Count` holds).
    pub fn count<D: UncommittedDatatype>(&self, datatype: D) -> Count {
        match datatype.descriptor().size() {
            0 => 0,
            size if !self.bytes.is_multiple_of(size) => UNDEFINED,
            size => Count::try_from(self.bytes / size).unwrap_or(UNDEFINED),
        }
    }

    /// The message's length in bytes.
    pub fn byte_count(&self) -> usize {
        self.bytes
    }

    /// Whether the request this status completes was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
}

#[inline]
pub(crate) fn check_tag(tag: Tag) -> Result<Tag, Cause> {
    if tag < 0 {
        Err(Cause::NegativeTag(tag))
    } else {
        Ok(tag)
    }
}

#[inline]
pub(crate) fn tag_selector(tag: Option<Tag>) -> Result<TagSel, Cause> {
    match tag {
        None => Ok(TagSel::Any),
        Some(tag) => check_tag(tag).map(TagSel::Tag),
    }
}

/// How many whole elements of `datatype` `bytes` make; an error if they do not divide.
#[inline]
fn whole_elements(bytes: usize, datatype: Datatype) -> Result<usize, Cause> {
    // Bytes are elements: no division (tens of cycles) on every receive of bytes.
    if datatype.size() == 1 {
        return Ok(bytes);
    }
    if !bytes.is_multiple_of(datatype.size()) {
        return Err(Cause::PartialElement {
            bytes,
            element: datatype.size(),
            type_name: datatype.name(),
        });
    }
    Ok(bytes.checked_div(datatype.size()).unwrap_or(0))
}

fn describe_tag(tag: Option<Tag>) -> String {
    match tag {
        None => "any tag".to_string(),
        Some(tag) => format!("tag {tag}"),
    }
}

/// Where an incoming message lands: the user's buffer, or a staging buffer when the element
/// type must be checked before its bytes become values.
pub(crate) struct RecvSlot {
    ptr: *mut u8,
    len: usize,
    landing: Landing,
}

/// How arrived bytes become the user's elements: all a receive keeps of its slot once posted.
/// Every immediate receive's request carries it, so the common case is kept to what it needs:
/// the element's size and name.
pub(crate) enum Landing {
    /// Straight into the user's buffer: every byte pattern is a value.
    Direct {
        element: usize,
        type_name: &'static str,
    },
    /// Memory the request owns (a staging buffer, a send's buffer description or packed
    /// copy): boxed, and one
    /// variant, so that only these rare cases pay for its size and for finishing and freeing
    /// it, out of line ([`Owned::finish`]).
    Owned(Box<Owned>),
}

/// What a [`Landing`] other than a direct one owns.
pub(crate) enum Owned {
    /// A staging buffer, checked before the user's buffer sees it.
    Staged(Staging),
    /// Not a receive's: an immediate send's non-contiguous buffer, its description and
    /// any packed copy kept until the send completes.
    #[allow(dead_code)] // Held, not read: it owns what the engine or the receiver reads.
    Sending(Box<Gathered>),
}

pub(crate) struct Staging {
    datatype: Datatype,
    /// Allocated when the receive is posted into it (`RecvSlot::target`): a receive the PML
    /// lands in the layout's blocks (`in_place`) has none.
    bytes: Vec<u8>,
    /// The user's buffer, where checked bytes go.
    destination: *mut u8,
    /// How they go there, for a datatype whose elements are not one run of bytes: unpacked
    /// into its blocks, leaving the bytes between them as they were.
    layout: Option<Arc<Layout>>,
    /// The destination's blocks described for the PML, for a non-contiguous datatype whose
    /// every byte pattern is a value: the PML may land the message in them directly
    /// (`Pml::post_recv_blocks`), with no staging copy. Its block list is `layout`'s.
    in_place: Option<pml::blocks::Blocks>,
}

impl RecvSlot {
    /// A slot for `len` bytes of packed elements of `datatype`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of the span of `len / datatype.size()` elements of
    /// `datatype` (`len` bytes for a contiguous one) until the slot (or the [`Landing`] it
    /// becomes) is finished or dropped, and bytes that pass `datatype`'s check must make
    /// valid values there.
    #[inline]
    pub(crate) unsafe fn new(
        ptr: *mut u8,
        len: usize,
        datatype: Datatype,
    ) -> Result<RecvSlot, Cause> {
        if datatype.needs_check() || !datatype.is_contiguous() {
            // SAFETY: forwarded from this function's contract.
            return unsafe { RecvSlot::staged(ptr, len, datatype) };
        }
        let landing = Landing::Direct {
            element: datatype.size(),
            type_name: datatype.name(),
        };
        Ok(RecvSlot { ptr, len, landing })
    }

    /// [`new`](Self::new) for a type that lands in a staging buffer: kept out of the way of
    /// receives of plain contiguous types, which every message of numbers is.
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    #[cold]
    unsafe fn staged(ptr: *mut u8, len: usize, datatype: Datatype) -> Result<RecvSlot, Cause> {
        let layout = match datatype.is_contiguous() {
            true => None,
            false => Some(datatype.layout()?),
        };
        let in_place = match &layout {
            Some(layout) if !datatype.needs_check() => {
                Some(layout.describe(len / datatype.size().max(1), ptr))
            }
            _ => None,
        };
        let landing = Landing::Owned(Box::new(Owned::Staged(Staging {
            datatype,
            bytes: Vec::new(),
            destination: ptr,
            layout,
            in_place,
        })));
        Ok(RecvSlot { ptr, len, landing })
    }

    #[inline]
    fn for_buffer<B: BufferMut + ?Sized>(buf: &mut B) -> Result<RecvSlot, Cause> {
        let (len, datatype) = (buf.byte_len(), buf.datatype());
        // SAFETY: `BufferMut` promises the pointer is valid for writes of `byte_len()` bytes
        // while the buffer is borrowed. Blocking receives finish the slot within their borrow
        // of it; immediate ones make it inside `Lent::exclusive`, which keeps the caller's
        // `&'a mut` for the request, so nothing else touches the buffer until the request is
        // over, within `'a`.
        unsafe { RecvSlot::new(buf.pointer_mut(), len, datatype) }
    }

    /// Where the engine should write: stable while the slot moves (a heap buffer or the
    /// user's).
    #[inline]
    pub(crate) fn target(&mut self) -> (*mut u8, usize) {
        match &mut self.landing {
            Landing::Owned(owned) => match &mut **owned {
                Owned::Staged(staging) => (staging.allocate(self.len), self.len),
                Owned::Sending(_) => (self.ptr, self.len),
            },
            Landing::Direct { .. } => (self.ptr, self.len),
        }
    }

    /// The description of the user's blocks for a receive the PML may land in them
    /// (`Pml::post_recv_blocks`), before the slot is posted any other way: stable while the
    /// slot moves (boxed).
    #[inline]
    fn in_place(&self) -> Option<&pml::blocks::Blocks> {
        match &self.landing {
            Landing::Owned(owned) => match &**owned {
                Owned::Staged(staging) if staging.bytes.is_empty() => staging.in_place.as_ref(),
                _ => None,
            },
            Landing::Direct { .. } => None,
        }
    }

    /// Checks what arrived and moves it into the user's buffer.
    #[inline(always)]
    pub(crate) fn finish(self, status: pml::Status) -> Result<Status, Cause> {
        self.landing.finish(status)
    }

    /// What finishing the receive takes, once it is posted.
    #[inline]
    pub(crate) fn into_landing(self) -> Landing {
        self.landing
    }
}

impl Landing {
    /// What an immediate send of a non-contiguous buffer keeps: out of the way of sends of
    /// contiguous buffers.
    #[cold]
    fn sending(gathered: Box<Gathered>) -> Landing {
        Landing::Owned(Box::new(Owned::Sending(gathered)))
    }

    /// Checks what arrived and moves it into the user's buffer.
    // Always: a receive whose message was waiting is finished in a few instructions around
    // this call, which the compiler otherwise leaves out of line.
    #[inline(always)]
    pub(crate) fn finish(self, status: pml::Status) -> Result<Status, Cause> {
        match self {
            Landing::Direct { element, type_name } => {
                // Owns nothing: forgotten, so that no call to the drop glue (out of line, for
                // the owned variant's sake) is left behind on every receive.
                std::mem::forget(self);
                whole_elements(status.len, Datatype::plain(element, type_name))?;
            }
            Landing::Owned(owned) => owned.finish(status.len)?,
        }
        Ok(Status::from_pml(status))
    }
}

impl Owned {
    /// Checks the `len` bytes that arrived and moves them into the user's buffer: out of
    /// line, since only checked types and types with gaps land here, and every wait that may
    /// finish a receive would otherwise carry it (and the freeing of the staging buffer).
    #[cold]
    #[inline(never)]
    #[allow(clippy::boxed_local)] // Taken whole, to be freed here rather than by the caller.
    fn finish(self: Box<Self>, len: usize) -> Result<(), Cause> {
        let Owned::Staged(staging) = &*self else {
            unreachable!("a send completed as a receive")
        };
        staging.finish(len)
    }
}

impl Staging {
    /// The staging buffer of `len` bytes, allocated by the first call.
    #[cold]
    fn allocate(&mut self, len: usize) -> *mut u8 {
        if self.bytes.len() != len {
            self.bytes = vec![0u8; len];
        }
        self.bytes.as_mut_ptr()
    }

    /// [`Owned::finish`] of a staging buffer.
    fn finish(&self, len: usize) -> Result<(), Cause> {
        let datatype = self.datatype;
        whole_elements(len, datatype)?;
        if self.bytes.is_empty() && self.in_place.is_some() {
            // Landed in the user's blocks (`Pml::post_recv_blocks`): every byte pattern is
            // a value of this datatype, so there is nothing to check or move.
            return Ok(());
        }
        let arrived = &self.bytes[..len];
        if !datatype.is_valid(arrived) {
            return Err(Cause::InvalidValue {
                type_name: datatype.name(),
            });
        }
        match &self.layout {
            // SAFETY: `RecvSlot::new`'s caller made `destination` valid for the span of the
            // elements the staging buffer holds, and `arrived` is at most that many elements'
            // packed bytes.
            Some(layout) => unsafe {
                let count = self.bytes.len() / datatype.size().max(1);
                layout.unpack(count, self.destination, arrived)
            },
            // SAFETY: `RecvSlot::new`'s caller made `destination` valid for as many bytes as
            // the staging buffer holds, `len` is at most that (longer messages fail as
            // truncated), and the staging buffer is a separate allocation.
            None => unsafe {
                std::ptr::copy_nonoverlapping(arrived.as_ptr(), self.destination, arrived.len())
            },
        }
        Ok(())
    }
}

/// Posts a receive into `slot`.
///
/// # Safety
/// The slot's buffer must stay valid until the returned request completes.
pub(crate) unsafe fn post_receive(
    comm: &CommData,
    source: SourceSel,
    tag: TagSel,
    slot: &mut RecvSlot,
) -> Result<Handle, Cause> {
    // SAFETY: forwarded from this function's contract.
    if let Some(h) = unsafe { post_in_place(comm, source, tag, slot) }? {
        return Ok(h);
    }
    let (ptr, len) = slot.target();
    // SAFETY: forwarded from this function's contract.
    with_engine(|e| unsafe { e.post_recv(comm.context, source, tag, ptr, len) })
}

/// Posts a receive into the user's blocks where the slot has them described and the PML
/// lands messages there (`Pml::post_recv_blocks`); `None`, having posted nothing, elsewhere.
///
/// # Safety
/// As for [`post_receive`].
#[inline]
unsafe fn post_in_place(
    comm: &CommData,
    source: SourceSel,
    tag: TagSel,
    slot: &RecvSlot,
) -> Result<Option<Handle>, Cause> {
    let Some(blocks) = slot.in_place() else {
        return Ok(None);
    };
    let from = match source {
        SourceSel::Rank(r) => comm.target(r as Rank).ok(),
        SourceSel::Any => None,
    };
    // SAFETY: the description lies in the slot's box, and the blocks and block list it names
    // (the user's buffer and the layout the slot holds) live as long: this function's
    // contract; the slot is not posted otherwise.
    with_engine(|e| unsafe { e.post_recv_blocks(comm.context, source, tag, blocks, from) })
}

/// Starts a receive into `slot` that finishes at once if its eager message is waiting.
///
/// # Safety
/// As for [`post_receive`].
// Inline: out of line, every immediate receive paid for a frame and for the engine's answer
// copied back through memory (70 instructions a message under callgrind).
#[inline]
pub(crate) unsafe fn start_receive(
    comm: &CommData,
    source: SourceSel,
    tag: TagSel,
    slot: &mut RecvSlot,
) -> Result<Started<RecvBuf>, Cause> {
    // SAFETY: forwarded from this function's contract.
    if let Some(h) = unsafe { post_in_place(comm, source, tag, slot) }? {
        return Ok(Started::Posted(h));
    }
    let (ptr, len) = slot.target();
    // SAFETY: forwarded from this function's contract.
    with_engine(|e| unsafe { e.start_recv(comm.context, source, tag, ptr, len) })
}

/// The bytes a send puts on the wire: the buffer's own, or those of a buffer whose datatype
/// has gaps (a vector, a struct with padding), read in place by the receiver where the PML
/// can (`Pml::post_send_blocks`: a shared-memory or verbs rendezvous), else packed once into
/// a copy.
/// Either is kept until the send completes.
pub(crate) struct Outgoing {
    /// The bytes, unless `unpacked`.
    ptr: *const u8,
    len: usize,
    /// A non-contiguous buffer made by [`to_send`](Self::to_send), not packed (yet): `ptr`
    /// is not its bytes. A flag rather than a null `ptr`, which an empty contiguous buffer
    /// may have.
    unpacked: bool,
    gathered: Option<Box<Gathered>>,
}

/// What a send of a non-contiguous buffer keeps: its description for a read in place (in a
/// box, whose address the receiver is given), the layout whose block list that names, and
/// the packed copy where the send went packed.
pub(crate) struct Gathered {
    blocks: pml::blocks::Blocks,
    /// Its block list is the one `blocks` names.
    layout: Arc<Layout>,
    base: *const u8,
    count: usize,
    packed: Vec<u8>,
}

impl Outgoing {
    /// What sending `buf` puts on the wire, packed at once if its datatype has gaps: for the
    /// callers that read the bytes themselves (collectives, buffered sends).
    #[inline]
    pub(crate) fn of<B: Buffer + ?Sized>(buf: &B) -> Result<Outgoing, Cause> {
        let mut out = Outgoing::to_send(buf)?;
        if out.unpacked {
            out.pack();
        }
        Ok(out)
    }

    /// What a point-to-point send of `buf` puts on the wire: a non-contiguous buffer is
    /// packed only if the PML does not read it in place ([`post_send`]).
    #[inline]
    pub(crate) fn to_send<B: Buffer + ?Sized>(buf: &B) -> Result<Outgoing, Cause> {
        let datatype = buf.datatype();
        if !datatype.is_contiguous() {
            // SAFETY: `Buffer` makes the pointer valid for the span of `count()` elements of
            // its datatype (checked where a view is made), initialized where the blocks lie.
            return unsafe { Outgoing::gathered(buf.pointer(), buf.count(), datatype) };
        }
        Ok(Outgoing {
            ptr: buf.pointer(),
            len: buf.byte_len(),
            unpacked: false,
            gathered: None,
        })
    }

    /// `count` elements of `datatype` at `ptr`, described and not yet packed: kept out of
    /// the way of sends of plain contiguous types.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of the span of `count` elements of `datatype`,
    /// initialized where its blocks lie, while the `Outgoing` (or what it is kept as) lives.
    #[cold]
    unsafe fn gathered(
        ptr: *const u8,
        count: usize,
        datatype: Datatype,
    ) -> Result<Outgoing, Cause> {
        let layout = datatype.layout()?;
        let blocks = layout.describe(count, ptr);
        let len = blocks.len();
        Ok(Outgoing {
            ptr: std::ptr::null(),
            len,
            unpacked: true,
            gathered: Some(Box::new(Gathered {
                blocks,
                layout,
                base: ptr,
                count,
                packed: Vec::new(),
            })),
        })
    }

    /// Packs a non-contiguous buffer into its copy, which the send then sends.
    #[cold]
    fn pack(&mut self) {
        let gathered = self
            .gathered
            .as_mut()
            .expect("only a gathered buffer is unpacked");
        let mut packed = vec![0u8; self.len];
        // SAFETY: `to_send`'s buffer holds `count` elements at `base`, valid for reads while
        // this `Outgoing` lives.
        unsafe {
            gathered
                .layout
                .pack(gathered.count, gathered.base, &mut packed)
        };
        self.ptr = packed.as_ptr();
        self.unpacked = false;
        gathered.packed = packed;
    }

    /// The bytes, for a copy of them.
    pub(crate) fn bytes(&self) -> &[u8] {
        debug_assert!(!self.unpacked, "bytes of an unpacked send");
        if self.ptr.is_null() {
            // Only an empty buffer's pointer may be null, which a slice's may not. Others keep
            // their pointer, empty or not: a user operation reads the alignment of its operands.
            debug_assert_eq!(self.len, 0, "a null pointer to {} bytes", self.len);
            return &[];
        }
        // SAFETY: the packed copy, or a `Buffer`'s contiguous bytes, borrowed while the
        // `Outgoing` made from it lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// What an immediate send posted as `handle` keeps until it completes: the description
    /// and packed copy of a non-contiguous buffer, unless the transport took the send as it
    /// started.
    #[inline]
    pub(crate) fn into_kept(self, handle: Handle) -> Option<Landing> {
        match self.gathered {
            Some(gathered) if handle != Handle::SENT => Some(Landing::sending(gathered)),
            _ => None,
        }
    }
}

/// Posts a send of `out` to `dest`.
///
/// # Safety
/// `out`, and the buffer it was made from, must stay alive and unchanged until the returned
/// request completes.
#[inline]
pub(crate) unsafe fn post_send(
    comm: &CommData,
    dest: Rank,
    tag: Tag,
    mode: SendMode,
    buf: &mut Outgoing,
) -> Result<Handle, Cause> {
    if buf.unpacked {
        // SAFETY: forwarded from this function's contract.
        return unsafe { post_unpacked(comm, dest, tag, mode, buf, false) };
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { post_send_as(comm, dest, tag, mode, buf, false) }
}

/// Posts a send of `buf` to `dest` that the caller waits for at once (a blocking send),
/// which lets the PML favour local completion (see `Pml::post_awaited_send`).
///
/// # Safety
/// As for [`post_send`].
#[inline]
pub(crate) unsafe fn post_awaited_send(
    comm: &CommData,
    dest: Rank,
    tag: Tag,
    mode: SendMode,
    buf: &mut Outgoing,
) -> Result<Handle, Cause> {
    if buf.unpacked {
        // SAFETY: forwarded from this function's contract.
        return unsafe { post_unpacked(comm, dest, tag, mode, buf, true) };
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { post_send_as(comm, dest, tag, mode, buf, true) }
}

/// # Safety
/// As for [`post_send`], with `buf` packed or contiguous.
#[inline]
unsafe fn post_send_as(
    comm: &CommData,
    dest: Rank,
    tag: Tag,
    mode: SendMode,
    buf: &Outgoing,
    awaited: bool,
) -> Result<Handle, Cause> {
    let peer = comm.target(dest)?;
    let tag = check_tag(tag)?;
    let (ptr, len) = (buf.ptr, buf.len);
    let (context, source) = (comm.context, comm.rank);
    // SAFETY: `Outgoing` makes `ptr` valid for `len` bytes; this function's caller keeps it so
    // until completion.
    with_engine(|e| unsafe {
        if awaited {
            e.post_awaited_send(context, source, peer, tag, mode, ptr, len)
        } else {
            e.post_send(context, source, peer, tag, mode, ptr, len)
        }
    })
}

/// A send of a non-contiguous buffer not packed yet: read in place by the receiver where the
/// PML can, else packed now and sent as the copy. Out of line, so that sends of contiguous
/// buffers pay one test for it.
///
/// # Safety
/// As for [`post_send`].
#[cold]
#[inline(never)]
unsafe fn post_unpacked(
    comm: &CommData,
    dest: Rank,
    tag: Tag,
    mode: SendMode,
    buf: &mut Outgoing,
    awaited: bool,
) -> Result<Handle, Cause> {
    let peer = comm.target(dest)?;
    let checked_tag = check_tag(tag)?;
    let gathered = buf.gathered.as_ref().expect("an unpacked send is gathered");
    let blocks = &gathered.blocks;
    // SAFETY: the description lies in the box the `Outgoing` keeps, and the memory and block
    // list it names live as long (this function's contract, and the layout `Gathered` holds).
    let sent = with_engine(|e| unsafe {
        e.post_send_blocks(comm.context, comm.rank, peer, checked_tag, mode, blocks)
    })?;
    if let Some(handle) = sent {
        return Ok(handle);
    }
    buf.pack();
    // SAFETY: forwarded from this function's contract; `buf` is packed now.
    unsafe { post_send_as(comm, dest, tag, mode, buf, awaited) }
}

/// A blocking probe, as the stall report names it.
#[track_caller]
fn probe_call(
    op: &'static str,
    comm: &CommData,
    source: SourceSel,
    tag: Option<Tag>,
) -> stall::Call {
    stall::Call {
        op,
        location: Location::caller(),
        context: Some(comm.context),
        peer: match source {
            SourceSel::Rank(r) => Peer::From(comm.world_rank(r)),
            SourceSel::Any => Peer::FromAny,
        },
        tag,
        bytes: None,
    }
}

/// Waits for a request and returns how it ended.
#[inline]
pub(crate) fn wait_handle(handle: Handle) -> Result<Done, Cause> {
    // A send the transport took as it was posted left nothing in the engine to wait for.
    if handle == Handle::SENT {
        return Ok(Done::Sent);
    }
    // Finished already (a window of receives: the first wait's progress delivered them
    // all): collected without entering a wait.
    if let Some(done) = with_engine(|e| e.collect(handle))? {
        return Ok(done);
    }
    // The wait steps the immediate collectives in flight, if any: a peer may wait for their
    // next round before it sends what this one waits for.
    environment::wait(handle)
}

/// Receives one message into `slot`, blocking.
#[inline]
fn receive_slot(
    comm: &CommData,
    source: SourceSel,
    tag: TagSel,
    mut slot: RecvSlot,
) -> Result<Status, Cause> {
    // SAFETY: the slot's buffer outlives this call, which returns once the receive is done.
    if let Some(h) = unsafe { post_in_place(comm, source, tag, &slot) }? {
        return finish_receive(h, slot);
    }
    let (ptr, len) = slot.target();
    // SAFETY: the slot's buffer outlives this call, which returns once the receive is done.
    let status = unsafe { environment::recv(comm.context, source, tag, ptr, len) }?;
    slot.finish(status)
}

pub(crate) fn finish_receive(handle: Handle, slot: RecvSlot) -> Result<Status, Cause> {
    match wait_handle(handle)? {
        Done::Received(status) => slot.finish(status),
        Done::Sent => unreachable!("a receive completed as a send"),
    }
}

fn receive_one<T: Equivalence>(
    comm: &CommData,
    source: SourceSel,
    tag: TagSel,
) -> Result<(T, Status), Cause> {
    // Zeroed, not uninitialized: the padding of a struct with a layout is not received.
    let mut value = MaybeUninit::<T>::zeroed();
    let datatype = datatype_of::<T>();
    // SAFETY: `value` is valid for writes of `size_of::<T>()` bytes, one element's span, and
    // outlives the blocking receive; `Equivalence` says checked bytes make a valid `T`.
    let slot = unsafe { RecvSlot::new(value.as_mut_ptr().cast(), datatype.size(), datatype)? };
    let status = receive_slot(comm, source, tag, slot)?;
    if status.bytes != datatype.size() {
        return Err(one_element::<T>(status.bytes));
    }
    // SAFETY: one element arrived and passed `T`'s check, into every byte its layout covers;
    // the rest (padding) is zero.
    Ok((unsafe { value.assume_init() }, status))
}

pub(crate) fn one_element<T: Equivalence>(bytes: usize) -> Cause {
    let datatype = datatype_of::<T>();
    Cause::NotOneElement {
        bytes,
        element: datatype.size(),
        type_name: datatype.name(),
    }
}

/// Receives a message of any length into a new vector, after a matched probe fixed which
/// message it is.
pub(crate) fn receive_matched_vec<T: Equivalence>(
    message: MessageHandle,
    status: pml::Status,
    from: Option<u32>,
) -> Result<(Vec<T>, Status), Cause> {
    let datatype = datatype_of::<T>();
    let count = whole_elements(status.len, datatype)?;
    let mut vec = Vec::<T>::with_capacity(count);
    if !datatype.is_contiguous() {
        // The padding a layout leaves out is not received: zero, not uninitialized.
        // SAFETY: the capacity holds `count` elements.
        unsafe { vec.as_mut_ptr().write_bytes(0, count) };
    }
    // SAFETY: the vector's capacity holds `count` elements, their span, and it outlives the
    // blocking receive below.
    let mut slot =
        unsafe { RecvSlot::new(vec.as_mut_ptr().cast(), count * datatype.size(), datatype)? };
    // SAFETY: as above; the receive completes before this function returns.
    let handle = unsafe { post_matched_receive(message, from, &mut slot) }?;
    let status = finish_receive(handle, slot)?;
    // SAFETY: all `count` elements arrived and passed `T`'s check.
    unsafe { vec.set_len(count) };
    Ok((vec, status))
}

pub(crate) fn receive_matched_into<B: BufferMut + ?Sized>(
    message: MessageHandle,
    from: Option<u32>,
    buf: &mut B,
) -> Result<Status, Cause> {
    let mut slot = RecvSlot::for_buffer(buf)?;
    // SAFETY: `buf` is borrowed for this whole call, which waits for completion.
    let handle = unsafe { post_matched_receive(message, from, &mut slot) }?;
    finish_receive(handle, slot)
}

/// Posts the receive of the message a matched probe took into `slot`: straight into the
/// user's blocks where the slot has them described and the PML lands messages there
/// (`Pml::post_matched_recv_blocks`), else into the slot's contiguous target. `from` is the
/// engine rank of the message's sender (`Message::from`).
///
/// # Safety
/// As for [`post_receive`].
pub(crate) unsafe fn post_matched_receive(
    message: MessageHandle,
    from: Option<u32>,
    slot: &mut RecvSlot,
) -> Result<Handle, Cause> {
    let message = match slot.in_place() {
        // SAFETY: the description lies in the slot's box, and the blocks and block list it
        // names live as long (this function's contract), as in `post_in_place`.
        Some(blocks) => {
            match with_engine(|e| unsafe { e.post_matched_recv_blocks(message, blocks, from) })? {
                Ok(handle) => return Ok(handle),
                Err(message) => message,
            }
        }
        None => message,
    };
    let (ptr, len) = slot.target();
    // SAFETY: forwarded from this function's contract.
    with_engine(|e| unsafe { e.post_matched_recv(message, ptr, len) })
}

/// A source of messages: a [`Process`] or [`AnyProcess`].
pub trait Source {
    #[doc(hidden)]
    fn source_comm(&self) -> &CommData;
    #[doc(hidden)]
    fn source_selector(&self) -> SourceSel;

    /// The rank received from: a [`Process`]'s rank, or for [`AnyProcess`] `-1`
    /// (`MPI_ANY_SOURCE` as Open MPI numbers it, which rsmpi gives there: never a rank).
    fn source_rank(&self) -> Rank {
        match self.source_selector() {
            SourceSel::Rank(rank) => rank as Rank,
            SourceSel::Any => -1,
        }
    }

    #[doc(hidden)]
    fn describe(&self, what: &str, tag: Option<Tag>) -> String {
        let from = match self.source_selector() {
            SourceSel::Any => "any rank".to_string(),
            SourceSel::Rank(r) => format!("rank {r}"),
        };
        format!("{what} from {from} ({})", describe_tag(tag))
    }

    #[doc(hidden)]
    #[track_caller]
    fn try_receive_tagged<T: Equivalence>(&self, tag: Option<Tag>) -> Result<(T, Status), Error> {
        stall::at(Location::caller());
        tag_selector(tag)
            .and_then(|t| receive_one(self.source_comm(), self.source_selector(), t))
            .map_err(|c| Error::new(self.describe("receive", tag), c))
    }

    #[doc(hidden)]
    #[track_caller]
    fn try_receive_into_tagged<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        tag: Option<Tag>,
    ) -> Result<Status, Error> {
        stall::at(Location::caller());
        tag_selector(tag)
            .and_then(|t| {
                receive_slot(
                    self.source_comm(),
                    self.source_selector(),
                    t,
                    RecvSlot::for_buffer(buf)?,
                )
            })
            .map_err(|c| Error::new(self.describe("receive", tag), c))
    }

    #[doc(hidden)]
    #[track_caller]
    fn try_matched_probe_tagged(&self, tag: Option<Tag>) -> Result<(Message, Status), Error> {
        self.try_matched_probe_in("matched_probe", tag)
    }

    /// A matched probe that the stall report calls `op`: the call the user made, which
    /// probes first (`receive` for [`receive_vec`](Source::receive_vec)).
    #[doc(hidden)]
    #[track_caller]
    fn try_matched_probe_in(
        &self,
        op: &'static str,
        tag: Option<Tag>,
    ) -> Result<(Message, Status), Error> {
        let comm = self.source_comm();
        stall::enter(probe_call(op, comm, self.source_selector(), tag));
        tag_selector(tag)
            .and_then(|t| environment::mprobe(comm.context, self.source_selector(), t))
            .map(|(handle, status)| Message::new(handle, status, comm))
            .map_err(|c| Error::new(self.describe("matched probe", tag), c))
    }

    #[doc(hidden)]
    #[track_caller]
    fn try_receive_vec_tagged<T: Equivalence>(
        &self,
        tag: Option<Tag>,
    ) -> Result<(Vec<T>, Status), Error> {
        let (message, _) = self.try_matched_probe_in("receive", tag)?;
        receive_matched_vec(message.handle, message.status, message.from)
            .map_err(|c| Error::new(self.describe("receive", tag), c))
    }

    #[doc(hidden)]
    #[track_caller]
    fn try_probe_tagged(&self, tag: Option<Tag>) -> Result<Status, Error> {
        let comm = self.source_comm();
        stall::enter(probe_call("probe", comm, self.source_selector(), tag));
        tag_selector(tag)
            .and_then(|t| environment::probe(comm.context, self.source_selector(), t))
            .map(Status::from_pml)
            .map_err(|c| Error::new(self.describe("probe", tag), c))
    }

    #[doc(hidden)]
    fn try_immediate_probe_tagged(&self, tag: Option<Tag>) -> Result<Option<Status>, Error> {
        let comm = self.source_comm();
        tag_selector(tag)
            .and_then(|t| with_engine(|e| e.iprobe(comm.context, self.source_selector(), t)))
            .map(|found| found.map(Status::from_pml))
            .map_err(|c| Error::new(self.describe("immediate probe", tag), c))
    }

    #[doc(hidden)]
    fn try_immediate_matched_probe_tagged(
        &self,
        tag: Option<Tag>,
    ) -> Result<Option<(Message, Status)>, Error> {
        let comm = self.source_comm();
        tag_selector(tag)
            .and_then(|t| with_engine(|e| e.improbe(comm.context, self.source_selector(), t)))
            .map(|found| found.map(|(handle, status)| Message::new(handle, status, comm)))
            .map_err(|c| Error::new(self.describe("immediate matched probe", tag), c))
    }

    #[doc(hidden)]
    fn try_immediate_receive_into_tagged<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
        tag: Option<Tag>,
    ) -> Result<Request<'a, B, S>, Error> {
        let tag_option = tag;
        let operation = || self.describe("immediate receive", tag_option);
        let tag = tag_selector(tag).map_err(|c| Error::new(operation(), c))?;
        let source = self.source_selector();
        let (data, slot) = Lent::exclusive(buf, |buf| RecvSlot::for_buffer(buf));
        let mut slot = slot.map_err(|c| Error::new(operation(), c))?;
        // SAFETY: the request keeps `buf` lent for `'a`, and the scope does not end before the
        // request completes.
        let started = unsafe { start_receive(self.source_comm(), source, tag, &mut slot) }
            .map_err(|c| Error::new(operation(), c))?;
        Ok(Request::receive(
            started, slot, data, scope, source, tag_option,
        ))
    }

    /// Receives one value (`MPI_Recv` of one element); the message must hold exactly one.
    #[track_caller]
    fn receive<T: Equivalence>(&self) -> (T, Status) {
        or_fatal(self.try_receive_tagged(None))
    }
    #[track_caller]
    fn receive_with_tag<T: Equivalence>(&self, tag: Tag) -> (T, Status) {
        or_fatal(self.try_receive_tagged(Some(tag)))
    }
    #[track_caller]
    fn try_receive<T: Equivalence>(&self) -> Result<(T, Status), Error> {
        self.try_receive_tagged(None)
    }
    #[track_caller]
    fn try_receive_with_tag<T: Equivalence>(&self, tag: Tag) -> Result<(T, Status), Error> {
        self.try_receive_tagged(Some(tag))
    }

    /// Receives into `buf`; a longer message is an error (truncation), a shorter one fills
    /// the front of `buf` (see the status for how much arrived).
    #[track_caller]
    fn receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Status {
        or_fatal(self.try_receive_into_tagged(buf, None))
    }
    #[track_caller]
    fn receive_into_with_tag<B: BufferMut + ?Sized>(&self, buf: &mut B, tag: Tag) -> Status {
        or_fatal(self.try_receive_into_tagged(buf, Some(tag)))
    }
    #[track_caller]
    fn try_receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<Status, Error> {
        self.try_receive_into_tagged(buf, None)
    }
    #[track_caller]
    fn try_receive_into_with_tag<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        tag: Tag,
    ) -> Result<Status, Error> {
        self.try_receive_into_tagged(buf, Some(tag))
    }

    /// Receives a message of any length into a new vector.
    #[track_caller]
    fn receive_vec<T: Equivalence>(&self) -> (Vec<T>, Status) {
        or_fatal(self.try_receive_vec_tagged(None))
    }
    #[track_caller]
    fn receive_vec_with_tag<T: Equivalence>(&self, tag: Tag) -> (Vec<T>, Status) {
        or_fatal(self.try_receive_vec_tagged(Some(tag)))
    }
    #[track_caller]
    fn try_receive_vec<T: Equivalence>(&self) -> Result<(Vec<T>, Status), Error> {
        self.try_receive_vec_tagged(None)
    }
    #[track_caller]
    fn try_receive_vec_with_tag<T: Equivalence>(
        &self,
        tag: Tag,
    ) -> Result<(Vec<T>, Status), Error> {
        self.try_receive_vec_tagged(Some(tag))
    }

    /// Waits for a message and describes it without receiving it (`MPI_Probe`).
    #[track_caller]
    fn probe(&self) -> Status {
        or_fatal(self.try_probe_tagged(None))
    }
    #[track_caller]
    fn probe_with_tag(&self, tag: Tag) -> Status {
        or_fatal(self.try_probe_tagged(Some(tag)))
    }
    #[track_caller]
    fn try_probe(&self) -> Result<Status, Error> {
        self.try_probe_tagged(None)
    }

    /// Describes a waiting message, if there is one (`MPI_Iprobe`).
    fn immediate_probe(&self) -> Option<Status> {
        or_fatal(self.try_immediate_probe_tagged(None))
    }
    fn immediate_probe_with_tag(&self, tag: Tag) -> Option<Status> {
        or_fatal(self.try_immediate_probe_tagged(Some(tag)))
    }

    /// Waits for a message and takes it out of matching, so that exactly it is received
    /// by the returned [`Message`] (`MPI_Mprobe`).
    #[track_caller]
    fn matched_probe(&self) -> (Message, Status) {
        or_fatal(self.try_matched_probe_tagged(None))
    }
    #[track_caller]
    fn matched_probe_with_tag(&self, tag: Tag) -> (Message, Status) {
        or_fatal(self.try_matched_probe_tagged(Some(tag)))
    }
    #[track_caller]
    fn try_matched_probe(&self) -> Result<(Message, Status), Error> {
        self.try_matched_probe_tagged(None)
    }

    /// `MPI_Improbe`.
    fn immediate_matched_probe(&self) -> Option<(Message, Status)> {
        or_fatal(self.try_immediate_matched_probe_tagged(None))
    }
    fn immediate_matched_probe_with_tag(&self, tag: Tag) -> Option<(Message, Status)> {
        or_fatal(self.try_immediate_matched_probe_tagged(Some(tag)))
    }

    /// Starts a receive of one value into memory the returned future owns (`MPI_Irecv` of
    /// one element); [`ReceiveFuture::get`] waits for it.
    fn immediate_receive<T: Equivalence>(&self) -> ReceiveFuture<T> {
        or_fatal(ReceiveFuture::start(self, None))
    }
    fn immediate_receive_with_tag<T: Equivalence>(&self, tag: Tag) -> ReceiveFuture<T> {
        or_fatal(ReceiveFuture::start(self, Some(tag)))
    }
    fn try_immediate_receive<T: Equivalence>(&self) -> Result<ReceiveFuture<T>, Error> {
        ReceiveFuture::start(self, None)
    }
    fn try_immediate_receive_with_tag<T: Equivalence>(
        &self,
        tag: Tag,
    ) -> Result<ReceiveFuture<T>, Error> {
        ReceiveFuture::start(self, Some(tag))
    }

    /// Starts a receive into `buf`, which stays borrowed until the request completes
    /// (`MPI_Irecv`).
    fn immediate_receive_into<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
    ) -> Request<'a, B, S> {
        or_fatal(self.try_immediate_receive_into_tagged(scope, buf, None))
    }
    fn immediate_receive_into_with_tag<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        or_fatal(self.try_immediate_receive_into_tagged(scope, buf, Some(tag)))
    }
    fn try_immediate_receive_into<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
    ) -> Result<Request<'a, B, S>, Error> {
        self.try_immediate_receive_into_tagged(scope, buf, None)
    }
}

impl Source for Process<'_> {
    #[inline]
    fn source_comm(&self) -> &CommData {
        self.data()
    }
    #[inline]
    fn source_selector(&self) -> SourceSel {
        // Not checked again on every receive: a Process is made only for ranks in range.
        SourceSel::Rank(self.rank as u32)
    }
}

impl Source for AnyProcess<'_> {
    fn source_comm(&self) -> &CommData {
        self.data()
    }
    fn source_selector(&self) -> SourceSel {
        SourceSel::Any
    }
}

/// "send to rank 3 (tag 7)", for errors.
pub(crate) fn send_description(what: &str, dest: Rank, tag: Tag) -> String {
    format!("{what} to rank {dest} (tag {tag})")
}

/// A destination of messages: a [`Process`].
pub trait Destination {
    #[doc(hidden)]
    fn destination_comm(&self) -> &CommData;
    /// The destination's rank in its communicator.
    fn destination_rank(&self) -> Rank;

    #[doc(hidden)]
    fn describe_send(&self, what: &str, tag: Tag) -> String {
        send_description(what, self.destination_rank(), tag)
    }

    #[doc(hidden)]
    #[track_caller]
    fn try_send_mode<B: Buffer + ?Sized>(
        &self,
        buf: &B,
        tag: Tag,
        mode: SendMode,
    ) -> Result<(), Error> {
        let what = match mode {
            SendMode::Standard => "send",
            SendMode::Synchronous => "synchronous send",
        };
        stall::at(Location::caller());
        if mode == SendMode::Synchronous {
            // Off the 8-byte message's path (a standard send notes its location only): the
            // whole call, for the report to name it.
            let comm = self.destination_comm();
            stall::enter(stall::Call {
                op: "synchronous_send",
                location: Location::caller(),
                context: Some(comm.context),
                peer: comm
                    .check_rank(self.destination_rank())
                    .map_or(Peer::None, |r| Peer::To(comm.world_rank(r))),
                tag: Some(tag),
                bytes: Some(buf.byte_len()),
            });
        }
        Outgoing::to_send(buf)
            .and_then(|mut out| {
                // SAFETY: `buf` and `out` live for this whole call, which waits for completion.
                unsafe {
                    post_awaited_send(
                        self.destination_comm(),
                        self.destination_rank(),
                        tag,
                        mode,
                        &mut out,
                    )
                }
                .and_then(wait_handle)
            })
            .map(drop)
            .map_err(|c| Error::new(self.describe_send(what, tag), c))
    }

    #[doc(hidden)]
    fn try_immediate_send_mode<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
        mode: SendMode,
    ) -> Result<Request<'a, B, S>, Error> {
        let what = match mode {
            SendMode::Standard => "immediate send",
            SendMode::Synchronous => "immediate synchronous send",
        };
        let dest = self.destination_rank();
        let mut out =
            Outgoing::to_send(buf).map_err(|c| Error::new(self.describe_send(what, tag), c))?;
        // SAFETY: the request keeps `buf` lent for `'a`, and what `out` holds of a
        // non-contiguous buffer (its description, a packed copy) until it completes; the scope
        // does not end before the request completes.
        match unsafe { post_send(self.destination_comm(), dest, tag, mode, &mut out) } {
            Ok(handle) => {
                let kept = out.into_kept(handle);
                Ok(Request::send(
                    handle,
                    kept,
                    Lent::shared(buf),
                    scope,
                    mode,
                    dest,
                    tag,
                ))
            }
            Err(c) => Err(Error::new(self.describe_send(what, tag), c)),
        }
    }

    /// Sends `buf` with tag 0 (`MPI_Send`).
    #[track_caller]
    fn send<B: Buffer + ?Sized>(&self, buf: &B) {
        or_fatal(self.try_send_mode(buf, 0, SendMode::Standard))
    }
    #[track_caller]
    fn send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        or_fatal(self.try_send_mode(buf, tag, SendMode::Standard))
    }
    #[track_caller]
    fn try_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<(), Error> {
        self.try_send_mode(buf, 0, SendMode::Standard)
    }
    #[track_caller]
    fn try_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<(), Error> {
        self.try_send_mode(buf, tag, SendMode::Standard)
    }

    /// Sends `buf` and returns only once the receiver has matched it (`MPI_Ssend`).
    #[track_caller]
    fn synchronous_send<B: Buffer + ?Sized>(&self, buf: &B) {
        or_fatal(self.try_send_mode(buf, 0, SendMode::Synchronous))
    }
    #[track_caller]
    fn synchronous_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        or_fatal(self.try_send_mode(buf, tag, SendMode::Synchronous))
    }
    #[track_caller]
    fn try_synchronous_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<(), Error> {
        self.try_send_mode(buf, 0, SendMode::Synchronous)
    }
    #[track_caller]
    fn try_synchronous_send_with_tag<B: Buffer + ?Sized>(
        &self,
        buf: &B,
        tag: Tag,
    ) -> Result<(), Error> {
        self.try_send_mode(buf, tag, SendMode::Synchronous)
    }

    /// Starts a send of `buf`, which stays borrowed until the request completes (`MPI_Isend`).
    fn immediate_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Request<'a, B, S> {
        or_fatal(self.try_immediate_send_mode(scope, buf, 0, SendMode::Standard))
    }
    fn immediate_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        or_fatal(self.try_immediate_send_mode(scope, buf, tag, SendMode::Standard))
    }
    fn try_immediate_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Result<Request<'a, B, S>, Error> {
        self.try_immediate_send_mode(scope, buf, 0, SendMode::Standard)
    }

    /// `MPI_Issend`.
    fn immediate_synchronous_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Request<'a, B, S> {
        or_fatal(self.try_immediate_send_mode(scope, buf, 0, SendMode::Synchronous))
    }
    fn immediate_synchronous_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        or_fatal(self.try_immediate_send_mode(scope, buf, tag, SendMode::Synchronous))
    }

    /// Copies `buf` out and sends the copy (`MPI_Bsend`): returns at once, whether or not a
    /// receive matches it yet. The copy counts against the space attached with
    /// [`Universe::set_buffer_size`](crate::Universe::set_buffer_size) until its send
    /// completes; a message that does not fit is an error, as in MPI.
    #[track_caller]
    fn buffered_send<B: Buffer + ?Sized>(&self, buf: &B) {
        or_fatal(self.try_buffered_send_with_tag(buf, 0))
    }
    #[track_caller]
    fn buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        or_fatal(self.try_buffered_send_with_tag(buf, tag))
    }
    #[track_caller]
    fn try_buffered_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<(), Error> {
        self.try_buffered_send_with_tag(buf, 0)
    }
    #[track_caller]
    fn try_buffered_send_with_tag<B: Buffer + ?Sized>(
        &self,
        buf: &B,
        tag: Tag,
    ) -> Result<(), Error> {
        let (comm, dest) = (self.destination_comm(), self.destination_rank());
        buffered::send(comm, dest, tag, buf, "buffered send")
    }

    /// `MPI_Ibsend`: as [`buffered_send`](Self::buffered_send), whose copy is made at once,
    /// so the request is finished as it starts.
    fn immediate_buffered_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Request<'a, B, S> {
        self.immediate_buffered_send_with_tag(scope, buf, 0)
    }
    fn immediate_buffered_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        or_fatal(self.try_immediate_buffered_send_with_tag(scope, buf, tag))
    }
    fn try_immediate_buffered_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Result<Request<'a, B, S>, Error> {
        self.try_immediate_buffered_send_with_tag(scope, buf, 0)
    }
    fn try_immediate_buffered_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a, B, S>, Error> {
        let (comm, dest) = (self.destination_comm(), self.destination_rank());
        buffered::send(comm, dest, tag, buf, "immediate buffered send")?;
        let data = Lent::shared(buf);
        Ok(Request::send(
            Handle::SENT,
            None,
            data,
            scope,
            SendMode::Standard,
            dest,
            tag,
        ))
    }

    /// Sends `buf` in ready mode (`MPI_Rsend`), which mpirt sends as a standard send, as MPI
    /// allows (ready mode lets an implementation skip a handshake; mpirt's eager sends have
    /// none to skip). Its errors name it a send.
    ///
    /// # Safety
    /// As in rsmpi: MPI calls a ready send erroneous unless the matching receive has already
    /// been started. mpirt delivers such a message all the same.
    unsafe fn ready_send<B: Buffer + ?Sized>(&self, buf: &B) {
        self.send(buf)
    }
    /// # Safety
    /// As for [`ready_send`](Self::ready_send).
    unsafe fn ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        self.send_with_tag(buf, tag)
    }

    /// Starts a ready-mode send (`MPI_Irsend`), as a standard one (see
    /// [`ready_send`](Self::ready_send)).
    ///
    /// # Safety
    /// As for [`ready_send`](Self::ready_send).
    unsafe fn immediate_ready_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Request<'a, B, S> {
        self.immediate_send(scope, buf)
    }
    /// # Safety
    /// As for [`ready_send`](Self::ready_send).
    unsafe fn immediate_ready_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        self.immediate_send_with_tag(scope, buf, tag)
    }
}

impl Destination for Process<'_> {
    #[inline]
    fn destination_comm(&self) -> &CommData {
        self.data()
    }
    #[inline]
    fn destination_rank(&self) -> Rank {
        self.rank
    }
}

/// Posts a standard send of `bytes` to engine rank `peer`, from `comm`'s rank in its context,
/// on `tag`: the runtime's own messages on its own tags (a collective's parts that did not
/// fit the shared area, the leaders' words of an inter-communicator, a group's agreement).
///
/// # Safety
/// `bytes` must stay alive and unchanged until the returned handle is waited on.
pub(crate) unsafe fn post_runtime_send(
    comm: &CommData,
    peer: pml::Rank,
    tag: Tag,
    bytes: &[u8],
) -> Result<Handle, Cause> {
    // SAFETY: forwarded from this function's contract.
    with_engine(|e| unsafe {
        e.post_send(
            comm.context,
            comm.rank,
            peer,
            tag,
            SendMode::Standard,
            bytes.as_ptr(),
            bytes.len(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user's empty buffer whose pointer is null: a contiguous buffer, not one left unpacked.
    struct NullEmpty;

    // SAFETY: no elements, so the pointer is read for no bytes.
    unsafe impl Buffer for NullEmpty {
        fn pointer(&self) -> *const u8 {
            std::ptr::null()
        }
        fn count(&self) -> usize {
            0
        }
        fn datatype(&self) -> Datatype {
            datatype_of::<u64>()
        }
    }

    #[test]
    fn a_count_of_part_of_an_element_is_undefined() {
        let status = |bytes| Status {
            source: 0,
            tag: 0,
            bytes,
            cancelled: false,
        };
        let int = datatype_of::<i32>();
        assert_eq!(status(12).count(int), 3);
        assert_eq!(status(0).count(int), 0);
        assert_eq!(status(10).count(int), UNDEFINED);
        assert_eq!(status(4 * (1 << 31)).count(int), UNDEFINED);
    }

    #[test]
    fn an_empty_buffer_with_a_null_pointer_is_sent_as_it_is() {
        let out = Outgoing::of(&NullEmpty).unwrap();
        assert!(!out.unpacked);
        assert!(out.gathered.is_none());
        assert_eq!(out.bytes(), &[] as &[u8]);
    }
}
