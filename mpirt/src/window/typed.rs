//! Operations with datatypes on either side (`MPI_Put(origin, ocount, otype, target, disp,
//! tcount, ttype)` and the gets and accumulates alike): the origin is any [`Buffer`] (a
//! [`View`](crate::datatype::View) of a user datatype over a slice, or a slice), the target
//! side a [`TargetDatatype`]. The origin's data travels packed; the target datatype becomes a
//! list of byte blocks in the target's window, checked at the origin against the window, and
//! the data is applied block by block: one copy per block on the shared-memory path, the
//! block list in the request on the message path, and on the RDMA path one WRITE or READ
//! per piece between the origin's blocks in place and the target's (`pieces`: a piece ends
//! where a block on either side does). The blocking forms complete before they return; the
//! request forms (`rput_typed`, ...) leave in flight what the path lets them: by messages
//! the request is queued and a fetched reply unpacked into the origin's layout where it
//! arrives (`messaging::Destination::Unpacked`), and by RDMA the device's writes and reads
//! run from and into the origin's memory, borrowed for the epoch, while the caller
//! computes. Shared memory's copies are done when issued, as are the device's accumulates
//! that fetch or compute at the origin, and reads into elements that need a validity check
//! (`bool`, `char`), which land in a copy that is checked before it is unpacked.

use std::marker::PhantomData;
use std::mem::size_of;
use std::sync::Arc;

use super::messaging::Destination;
use super::rdma::Rdma;
use super::wire::{encode_blocks, Ask, Blocks, Request};
use super::{data_request, Epoch, Pending, RmaRequest, WindowFault};
use crate::datatype::layout::Layout;
use crate::datatype::{datatype_of, Buffer, BufferMut, Datatype, Equivalence, UncommittedDatatype};
use crate::error::{or_fatal, Cause, Error};
use crate::point_to_point::Outgoing;
use crate::Rank;

use super::AccumulateOperation;

/// The target side of a typed operation: `count` elements of a datatype from the
/// displacement (MPI's `target_count` and `target_datatype`), in bytes of the target's window.
/// Its basic elements must be the window's elements and lie whole elements into it.
pub struct TargetDatatype<'d> {
    datatype: Datatype,
    count: usize,
    /// The user datatype's layout lives while it does.
    _datatype: PhantomData<&'d ()>,
}

impl<'d> TargetDatatype<'d> {
    pub fn new<D: UncommittedDatatype>(datatype: &'d D, count: usize) -> TargetDatatype<'d> {
        TargetDatatype {
            datatype: datatype.descriptor(),
            count,
            _datatype: PhantomData,
        }
    }
}

/// Where a typed operation lands: the target, the displacement's byte offset, and the blocks
/// (offset from it, length) in type-map order, neighbours that touch merged.
struct Placed {
    target: u32,
    offset: u64,
    blocks: Blocks,
    bytes: usize,
}

/// Basic elements in `count` elements of `layout`.
fn basic_elements(layout: &Layout, count: usize) -> usize {
    layout
        .signature
        .runs()
        .iter()
        .map(|r| r.count)
        .sum::<usize>()
        * count
}

/// Where `a_count` elements of `a` and `b_count` of `b` differ in type signature, named.
fn check_signatures(
    what: &str,
    (a, a_count): (&Layout, usize),
    (b, b_count): (&Layout, usize),
) -> Result<(), Cause> {
    match first_difference(a, a_count, b, b_count) {
        None => Ok(()),
        Some(at) => Err(Cause::Window(WindowFault::TypeSignature {
            what: what.into(),
            counts: (basic_elements(a, a_count), basic_elements(b, b_count)),
            at,
        })),
    }
}

/// The index of the first basic element where `a_count` elements of `a` and `b_count` of `b`
/// differ, or `None` where their type signatures are equal.
fn first_difference(a: &Layout, a_count: usize, b: &Layout, b_count: usize) -> Option<usize> {
    let total = basic_elements;
    // The common case, numbers of one kind on both sides, without a walk.
    if let (Some(x), Some(y)) = (a.signature.single(), b.signature.single()) {
        let (n, m) = (total(a, a_count), total(b, b_count));
        return match (n, m) {
            (0, 0) => None,
            _ if x != y => Some(0),
            _ if n != m => Some(n.min(m)),
            _ => None,
        };
    }
    let runs = |layout: &Layout, count: usize| {
        let runs = layout.signature.runs().to_vec();
        (0..count).flat_map(move |_| runs.clone().into_iter().map(|r| (r.element, r.count)))
    };
    let (mut xs, mut ys) = (runs(a, a_count), runs(b, b_count));
    let (mut x, mut y, mut at) = (xs.next(), ys.next(), 0);
    loop {
        match (x, y) {
            (None, None) => return None,
            (Some((ex, nx)), Some((ey, ny))) if ex == ey => {
                let step = nx.min(ny);
                at += step;
                x = if nx > step {
                    Some((ex, nx - step))
                } else {
                    xs.next()
                };
                y = if ny > step {
                    Some((ey, ny - step))
                } else {
                    ys.next()
                };
            }
            _ => return Some(at),
        }
    }
}

impl<'scope, 'env, T: Equivalence> Epoch<'scope, 'env, T> {
    /// Checks the target side of a typed operation against the window and lists its blocks.
    fn place_typed(
        &self,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> Result<(Placed, Arc<Layout>), Cause> {
        let (t, offset) = self.place(target, disp, 0)?;
        let layout = target_type.datatype.layout()?;
        let count = target_type.count;
        let element = size_of::<T>().max(1);
        let unsupported = |why: String| Cause::Window(WindowFault::Unsupported(why));
        layout.span(count).map_err(|cause| {
            unsupported(format!("{count} elements of the target datatype: {cause}"))
        })?;
        let bytes = layout.size * count;
        let window_type = datatype_of::<T>().layout()?;
        // Rounded up where the bytes are not whole elements, so that the signatures differ.
        check_signatures(
            "the target datatype and the window's elements",
            (&layout, count),
            (&window_type, bytes.div_ceil(element)),
        )?;
        let window_bytes = self.window.sizes.as_ref().map(|s| s[t as usize] * element);
        let mut blocks = Blocks::new();
        for i in 0..count {
            for block in layout.blocks() {
                let from = i * layout.extent + block.offset;
                if from % element != 0 || block.len % element != 0 {
                    return Err(unsupported(format!(
                        "the target datatype's block of {} byte(s) at byte {from} is not whole \
                         elements of the window's {element}-byte type",
                        block.len
                    )));
                }
                if let Some(size) = window_bytes {
                    if offset as usize + from + block.len > size {
                        return Err(Cause::Window(WindowFault::BlockOutOfWindow {
                            target,
                            displacement: disp,
                            offset: from,
                            length: block.len,
                            size: size / element,
                        }));
                    }
                }
                match blocks.last_mut() {
                    Some(last) if last.0 + last.1 == from as u64 => last.1 += block.len as u64,
                    _ => blocks.push((from as u64, block.len as u64)),
                }
            }
        }
        let placed = Placed {
            target: t,
            offset,
            blocks,
            bytes,
        };
        Ok((placed, layout))
    }

    /// Checks that the origin's signature is the target's; its layout.
    fn check_origin<B: Buffer + ?Sized>(
        origin: &B,
        target: &Layout,
        target_type: &TargetDatatype,
    ) -> Result<Arc<Layout>, Cause> {
        let layout = origin.datatype().layout()?;
        check_signatures(
            "the origin and the target datatype",
            (&layout, origin.count()),
            (target, target_type.count),
        )?;
        Ok(layout)
    }

    /// Checks that a get's or a fetching accumulate's origin buffer takes the target's
    /// signature; its layout.
    fn check_landing<B: BufferMut + ?Sized>(
        into: &B,
        target: &Layout,
        target_type: &TargetDatatype,
        what: &str,
    ) -> Result<Arc<Layout>, Cause> {
        let layout = into.datatype().layout()?;
        check_signatures(what, (&layout, into.count()), (target, target_type.count))?;
        Ok(layout)
    }

    /// Sends a typed request; `reply`, where given, is where the reply's data goes. Returns
    /// what it leaves in flight.
    ///
    /// # Safety
    /// As for `issue`: the destination must stay valid for writes, and untouched, until the
    /// reply came or the epoch ended.
    unsafe fn issue_typed(
        &self,
        placed: &Placed,
        mut request: Request,
        data: &[u8],
        reply: Option<Destination>,
    ) -> Result<Pending, Cause> {
        // One block is a plain request at its offset.
        let list;
        let payload: [&[u8]; 2] = match placed.blocks.as_slice() {
            [(from, _)] => {
                request.offset += from;
                [&[], data]
            }
            blocks => {
                request.blocks = u32::try_from(blocks.len()).map_err(|_| {
                    Cause::Window(WindowFault::Unsupported(format!(
                        "a target datatype of {} blocks; one request carries at most 2^32",
                        blocks.len()
                    )))
                })?;
                list = encode_blocks(blocks);
                [&list, data]
            }
        };
        let awaited = reply.is_some();
        // SAFETY: forwarded from this function's contract.
        let id = unsafe { self.issue(placed.target, request, &payload, reply.map(Some)) }?;
        Ok(if awaited {
            Pending::reply(id)
        } else {
            Pending::DONE
        })
    }

    /// Waits for what a blocking form's operation left in flight; where the wait for a reply
    /// fails, no reply may write the caller's buffer any more, which goes back to it.
    fn finish(&self, pending: Pending) -> Result<(), Cause> {
        if let Some((target, ticket)) = pending.device {
            let rdma = self
                .window
                .rdma
                .as_ref()
                .expect("an operation by the device");
            rdma.wait(target, ticket)?;
        }
        if pending.reply != 0 {
            let mut core = self.core()?;
            let waited = core.wait_until(|core| core.is_done(pending.reply));
            if waited.is_err() {
                core.abandon(|id, _| id == pending.reply);
            }
            waited?;
            core.take(pending.reply)
                .expect("done")
                .map_err(Cause::Window)?;
        }
        Ok(())
    }

    /// Posts one RDMA operation per piece of `pieces` (see [`pieces`]) to `target` with
    /// `post`, from the origin's memory; what they leave in flight. Where one fails to post,
    /// waits for those posted before it (the caller's buffer may go back to it), and fails.
    fn post_pieces(
        &self,
        rdma: &Rdma,
        placed: &Placed,
        pieces: Vec<(u64, u64, usize)>,
        mut post: impl FnMut(u64, usize, u64) -> Result<u64, Cause>,
    ) -> Result<Pending, Cause> {
        let mut last = 0;
        for (address, from, len) in pieces {
            match post(address, len, placed.offset + from) {
                Ok(ticket) => last = last.max(ticket),
                Err(e) => {
                    let _ = rdma.complete(&[placed.target]);
                    return Err(e);
                }
            }
        }
        Ok(Pending::device(placed.target, last))
    }

    /// `MPI_Put` with datatypes: `origin`'s elements (any buffer or view) into the target's
    /// window as `target_type` lays them from `disp`. The signatures of the two must be equal
    /// (the same basic elements in the same order), and `target_type`'s basic elements the
    /// window's. Complete at the origin when it returns.
    pub fn put_typed<B: Buffer + ?Sized>(
        &self,
        origin: &B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) {
        or_fatal(self.try_put_typed(origin, target, disp, target_type));
    }

    pub fn try_put_typed<B: Buffer + ?Sized>(
        &self,
        origin: &B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> Result<(), Error> {
        // SAFETY: `origin` is borrowed by this call, which waits for the put.
        unsafe { self.put_typed_inner(origin, target, disp, target_type) }
            .and_then(|pending| self.finish(pending))
            .map_err(|c| Error::new(format!("put (typed) to rank {target}"), c))
    }

    /// `MPI_Rput` with datatypes: [`put_typed`](Self::put_typed), with a request. By
    /// messages the origin is packed into the request when it is issued, and on shared
    /// memory copied, so the request is complete at once; on the RDMA path the device
    /// writes from `origin`'s blocks in place, and the request completes with the writes.
    /// `origin` stays borrowed for the epoch, whose end waits for the writes: it cannot be
    /// changed while they may be in flight.
    ///
    /// ```compile_fail,E0506
    /// use mpirt::datatype::UserDatatype;
    /// use mpirt::traits::*;
    /// use mpirt::window::{TargetDatatype, Window};
    ///
    /// let universe = mpirt::initialize().unwrap();
    /// let window = Window::<i64>::allocate(&universe.world(), 8);
    /// let every_other = UserDatatype::vector(4, 1, 2, &i64::equivalent_datatype());
    /// let target_type = TargetDatatype::new(&every_other, 1);
    /// let mut values = [1i64; 4];
    /// window.fence_epoch(|epoch| {
    ///     let put = epoch.rput_typed(&values[..], 0, 0, &target_type);
    ///     values[0] = 2;
    ///     put.wait();
    /// });
    /// ```
    pub fn rput_typed<B: Buffer + ?Sized>(
        &self,
        origin: &'scope B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> RmaRequest<'scope, B> {
        // SAFETY: `origin` is borrowed for the epoch, whose end waits for the writes.
        let issued = unsafe { self.put_typed_inner(origin, target, disp, target_type) };
        or_fatal(
            issued
                .map(|pending| self.request(pending, None))
                .map_err(|c| Error::new(format!("rput (typed) to rank {target}"), c)),
        )
    }

    /// A typed put, issued; what it left in flight.
    ///
    /// # Safety
    /// `origin` must stay borrowed, unchanged, until what this returns completed (on the
    /// RDMA path the device reads it then) or the epoch ended.
    unsafe fn put_typed_inner<B: Buffer + ?Sized>(
        &self,
        origin: &B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> Result<Pending, Cause> {
        let (placed, layout) = self.place_typed(target, disp, target_type)?;
        let origin_layout = Self::check_origin(origin, &layout, target_type)?;
        if let Some(rdma) = self.window.rdma_to(placed.target) {
            let pieces = pieces(&origin_layout, origin.count(), origin.pointer(), &placed);
            return self.post_pieces(rdma, &placed, pieces, |address, len, at| {
                // SAFETY: the piece lies in the origin's blocks, readable for the borrow of
                // `origin` (`Buffer`), which the caller keeps unchanged until the write
                // completed.
                let part = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
                // SAFETY: as above.
                unsafe { rdma.put(placed.target, at, part) }
            });
        }
        let packed = Outgoing::of(origin)?;
        let data = packed.bytes();
        if let Some(direct) = self.window.direct() {
            let mut at = 0;
            for &(from, len) in &placed.blocks {
                direct.put(
                    placed.target,
                    placed.offset + from,
                    &data[at..at + len as usize],
                );
                at += len as usize;
            }
            return Ok(Pending::DONE);
        }
        let request = data_request(Ask::Put, placed.offset, placed.bytes);
        // SAFETY: no reply data is awaited.
        unsafe { self.issue_typed(&placed, request, data, None) }
    }

    /// `MPI_Get` with datatypes: the target's elements as `target_type` lays them from
    /// `disp`, into `into`'s (any buffer or view). Complete when it returns: the data is
    /// in `into`'s layout then.
    pub fn get_typed<B: BufferMut + ?Sized>(
        &self,
        into: &mut B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) {
        or_fatal(self.try_get_typed(into, target, disp, target_type));
    }

    pub fn try_get_typed<B: BufferMut + ?Sized>(
        &self,
        into: &mut B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> Result<(), Error> {
        // SAFETY: `into` is borrowed by this call, which waits for the get (or, where the
        // wait fails, abandons the reply's destination).
        unsafe { self.get_typed_inner(into, target, disp, target_type) }
            .and_then(|pending| self.finish(pending))
            .map_err(|c| Error::new(format!("get (typed) from rank {target}"), c))
    }

    /// `MPI_Rget` with datatypes: [`get_typed`](Self::get_typed), whose request's `wait`
    /// hands `into` back, filled. In flight until then where the path allows: by messages
    /// the reply is unpacked into `into`'s layout where it arrives, and on the RDMA path the
    /// device reads into `into`'s blocks in place (elements that need a validity check,
    /// `bool` and `char`, are read into a copy, checked and unpacked before this returns,
    /// as on shared memory, where the copies are done then). `into` cannot be read until
    /// `wait` hands it back (or the epoch ended):
    ///
    /// ```compile_fail,E0502
    /// use mpirt::datatype::UserDatatype;
    /// use mpirt::traits::*;
    /// use mpirt::window::{TargetDatatype, Window};
    ///
    /// let universe = mpirt::initialize().unwrap();
    /// let window = Window::<i64>::allocate(&universe.world(), 8);
    /// let every_other = UserDatatype::vector(4, 1, 2, &i64::equivalent_datatype());
    /// let target_type = TargetDatatype::new(&every_other, 1);
    /// let mut got = [0i64; 4];
    /// window.fence_epoch(|epoch| {
    ///     let get = epoch.rget_typed(&mut got[..], 0, 0, &target_type);
    ///     println!("{got:?}");
    ///     get.wait();
    /// });
    /// ```
    pub fn rget_typed<B: BufferMut + ?Sized>(
        &self,
        into: &'scope mut B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> RmaRequest<'scope, B> {
        // SAFETY: `into` is borrowed for the epoch, and handed back by the request only once
        // the get completed.
        let issued = unsafe { self.get_typed_inner(&mut *into, target, disp, target_type) };
        or_fatal(
            issued
                .map(|pending| self.request(pending, Some(into)))
                .map_err(|c| Error::new(format!("rget (typed) from rank {target}"), c)),
        )
    }

    /// A typed get, issued; what it left in flight, after which `into` holds the data.
    ///
    /// # Safety
    /// `into` must stay borrowed, untouched, until what this returns completed or the epoch
    /// ended.
    unsafe fn get_typed_inner<B: BufferMut + ?Sized>(
        &self,
        into: &mut B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> Result<Pending, Cause> {
        let (placed, layout) = self.place_typed(target, disp, target_type)?;
        let what = "the origin and the target datatype";
        let into_layout = Self::check_landing(into, &layout, target_type, what)?;
        let (datatype, count) = (into.datatype(), into.count());
        let rdma = self.window.rdma_to(placed.target);
        if let Some(rdma) = rdma.filter(|_| !datatype.needs_check()) {
            let pieces = pieces(&into_layout, count, into.pointer_mut(), &placed);
            return self.post_pieces(rdma, &placed, pieces, |address, len, at| {
                // SAFETY: the piece lies in `into`'s blocks, writable for its borrow
                // (`BufferMut`), which the caller keeps untouched until the read completed;
                // the window's elements are the origin's (the signatures are equal), and
                // they need no check.
                let part = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len) };
                // SAFETY: as above.
                unsafe { rdma.get(placed.target, at, part) }
            });
        }
        if rdma.is_none() && self.window.direct().is_none() {
            // By messages: the reply is unpacked into `into` where it arrives.
            let into = Destination::Unpacked {
                base: into.pointer_mut(),
                count,
                datatype,
                layout: into_layout,
            };
            let request = data_request(Ask::Get, placed.offset, placed.bytes);
            // SAFETY: forwarded from this function's contract.
            return unsafe { self.issue_typed(&placed, request, &[], Some(into)) };
        }
        // Shared memory, or the device into elements that need a check: a copy, checked and
        // unpacked now.
        let mut staging = vec![0u8; placed.bytes];
        let mut at = 0;
        for &(from, len) in &placed.blocks {
            let part = &mut staging[at..at + len as usize];
            if let Some(direct) = self.window.direct() {
                direct.get(placed.target, placed.offset + from, part);
            } else if let Some(rdma) = rdma {
                // SAFETY: `staging` lives until this call returns, after the gets completed
                // (below).
                unsafe { rdma.get(placed.target, placed.offset + from, part) }?;
            }
            at += len as usize;
        }
        if let Some(rdma) = rdma {
            rdma.complete(&[placed.target])?;
        }
        unpack(into, &staging)?;
        Ok(Pending::DONE)
    }

    /// `MPI_Accumulate` with datatypes: `target = origin ∘ target` element by element over
    /// the target's elements as `target_type` lays them from `disp`, atomic per element.
    pub fn accumulate_typed<B: Buffer + ?Sized>(
        &self,
        origin: &B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: impl Into<AccumulateOperation>,
    ) {
        or_fatal(self.try_accumulate_typed(origin, target, disp, target_type, op));
    }

    pub fn try_accumulate_typed<B: Buffer + ?Sized>(
        &self,
        origin: &B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: impl Into<AccumulateOperation>,
    ) -> Result<(), Error> {
        let none = None::<&mut [T]>;
        // SAFETY: nothing is fetched.
        unsafe { self.accumulate_typed_inner(origin, none, target, disp, target_type, op.into()) }
            .and_then(|pending| self.finish(pending))
            .map_err(|c| Error::new(format!("accumulate (typed) to rank {target}"), c))
    }

    /// `MPI_Get_accumulate` with datatypes: `result` (any buffer or view) gets the target's
    /// elements as they were, and the target `origin ∘ target`, atomically per element.
    /// Complete when it returns.
    pub fn get_accumulate_typed<B: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        origin: &B,
        result: &mut R,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: impl Into<AccumulateOperation>,
    ) {
        or_fatal(self.try_get_accumulate_typed(origin, result, target, disp, target_type, op));
    }

    /// `MPI_Raccumulate` with datatypes: [`accumulate_typed`](Self::accumulate_typed), with a
    /// request. The origin is packed when it is issued; by messages it is queued in the
    /// request, and by the device an integer sum's fetch-and-adds are posted, complete by
    /// the epoch's end; other accumulates by the device, which compute at the origin, and
    /// those on shared memory are done before this returns.
    pub fn raccumulate_typed<B: Buffer + ?Sized>(
        &self,
        origin: &'scope B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: impl Into<AccumulateOperation>,
    ) -> RmaRequest<'scope, B> {
        let none = None::<&mut [T]>;
        // SAFETY: nothing is fetched.
        let issued = unsafe {
            self.accumulate_typed_inner(origin, none, target, disp, target_type, op.into())
        };
        or_fatal(
            issued
                .map(|pending| self.request(pending, None))
                .map_err(|c| Error::new(format!("raccumulate (typed) to rank {target}"), c)),
        )
    }

    /// `MPI_Rget_accumulate` with datatypes:
    /// [`get_accumulate_typed`](Self::get_accumulate_typed), whose request's `wait` hands
    /// `result` back, filled. By messages it is in flight until then (the reply is unpacked
    /// into `result`'s layout where it arrives); by the device (which fetches element by
    /// element, or computes at the origin under the target's lock) and on shared memory it
    /// is done before this returns.
    pub fn rget_accumulate_typed<B: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        origin: &'scope B,
        result: &'scope mut R,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: impl Into<AccumulateOperation>,
    ) -> RmaRequest<'scope, R> {
        let into = Some(&mut *result);
        // SAFETY: `result` is borrowed for the epoch, and handed back by the request only
        // once the reply came.
        let issued = unsafe {
            self.accumulate_typed_inner(origin, into, target, disp, target_type, op.into())
        };
        or_fatal(
            issued
                .map(|pending| self.request(pending, Some(result)))
                .map_err(|c| Error::new(format!("rget_accumulate (typed) on rank {target}"), c)),
        )
    }

    pub fn try_get_accumulate_typed<B: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        origin: &B,
        result: &mut R,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: impl Into<AccumulateOperation>,
    ) -> Result<(), Error> {
        let into = Some(result);
        // SAFETY: `result` is borrowed by this call, which waits for the reply (or, where
        // the wait fails, abandons its destination).
        unsafe { self.accumulate_typed_inner(origin, into, target, disp, target_type, op.into()) }
            .and_then(|pending| self.finish(pending))
            .map_err(|c| Error::new(format!("get_accumulate (typed) on rank {target}"), c))
    }

    /// A typed accumulate, issued; what it left in flight, after which `result` (where
    /// given) holds the target's elements as they were.
    ///
    /// # Safety
    /// `result` must stay borrowed, untouched, until what this returns completed or the
    /// epoch ended.
    unsafe fn accumulate_typed_inner<B: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        origin: &B,
        result: Option<&mut R>,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: AccumulateOperation,
    ) -> Result<Pending, Cause> {
        let datatype = datatype_of::<T>();
        let element = self.window.check_accumulate(datatype, op)?;
        let (placed, layout) = self.place_typed(target, disp, target_type)?;
        Self::check_origin(origin, &layout, target_type)?;
        let packed = Outgoing::of(origin)?;
        let data = packed.bytes();
        let result_layout = match &result {
            Some(result) => Some(Self::check_landing(
                *result,
                &layout,
                target_type,
                "the result and the target",
            )?),
            None => None,
        };
        // The device's way to each block: one for all of a fixed window's, and in a dynamic
        // window each block's own (its attached memory is exposed, or reached by messages).
        let mut ways = Vec::with_capacity(placed.blocks.len());
        for &(from, len) in &placed.blocks {
            let offset = placed.offset + from;
            ways.push(
                self.window
                    .device_atomics(placed.target, offset, len as usize)?,
            );
        }
        let ask = match result {
            Some(_) => Ask::GetAccumulate,
            None => Ask::Accumulate,
        };
        let request = |offset: u64, len: usize| Request {
            op: op.code(),
            element,
            ..data_request(ask, offset, len)
        };
        let direct = self.window.direct();
        if direct.is_none() && ways.iter().all(Option::is_none) {
            // By messages: the origin's data goes in the request, and a fetched result is
            // unpacked into `result` where the reply arrives.
            let into = result
                .zip(result_layout)
                .map(|(result, layout)| Destination::Unpacked {
                    base: result.pointer_mut(),
                    count: result.count(),
                    datatype: result.datatype(),
                    layout,
                });
            let request = request(placed.offset, placed.bytes);
            // SAFETY: forwarded from this function's contract.
            return unsafe { self.issue_typed(&placed, request, data, into) };
        }
        // Shared memory, or the device: done now. A dynamic window's blocks that the device
        // does not reach go after the others, a message each, waited for here.
        let mut old = result.as_ref().map(|_| vec![0u8; placed.bytes]);
        let mut by_messages = Vec::new();
        let mut at = 0;
        for (&(from, len), way) in placed.blocks.iter().zip(ways) {
            let range = at..at + len as usize;
            at += len as usize;
            let before = old.as_mut().map(|old| &mut old[range.clone()]);
            let offset = placed.offset + from;
            if let Some(direct) = direct {
                let kind = (datatype, element);
                direct.accumulate(placed.target, offset, op, kind, &data[range], before)?;
            } else if let Some(rdma) = way {
                rdma.accumulate(placed.target, offset, op, datatype, &data[range], before)?;
            } else {
                by_messages.push((offset, range));
            }
        }
        let staging = old.as_mut().map(|old| old.as_mut_ptr());
        let mut replies = Vec::with_capacity(by_messages.len());
        for (offset, range) in by_messages {
            let len = range.len();
            let one = Placed {
                target: placed.target,
                offset,
                blocks: vec![(0, len as u64)],
                bytes: len,
            };
            // SAFETY: `range` lies in `old`, whose bytes `staging` points to.
            let into =
                staging.map(|base| Destination::Bytes(unsafe { base.add(range.start) }, len));
            // SAFETY: `old` lives until this call returns, after the replies came (below);
            // where a send failed, the PML stopped, and no reply comes.
            let pending =
                unsafe { self.issue_typed(&one, request(offset, len), &data[range], into) }?;
            replies.push(pending);
        }
        for pending in replies {
            self.finish(pending)?;
        }
        if let (Some(result), Some(old)) = (result, old) {
            unpack(result, &old)?;
        }
        Ok(Pending::DONE)
    }
}

/// The pieces in which a typed operation's packed bytes move between `count` elements of
/// `layout` at `base` (the origin's buffer) and the target's blocks of `placed`: (origin
/// address, offset from the displacement, length), in packing order, each one RDMA
/// operation from or into the origin's memory in place; a piece ends where a block on
/// either side does. The signatures were checked equal, so both sides carry the same bytes.
fn pieces(
    layout: &Layout,
    count: usize,
    base: *const u8,
    placed: &Placed,
) -> Vec<(u64, u64, usize)> {
    let origin = pml::blocks::Blocks::new(base, count, layout.extent, layout.blocks())
        .expect("the origin's packed size is the target's, which fits");
    let mut runs = origin.runs(layout.blocks(), 0, placed.bytes);
    let mut run: Option<(u64, usize)> = None;
    let mut out = Vec::with_capacity(placed.blocks.len());
    for &(from, len) in &placed.blocks {
        let (mut at, mut left) = (from, len as usize);
        while left > 0 {
            let (address, have) = run
                .take()
                .or_else(|| runs.next())
                .expect("the origin carries the target's bytes (equal signatures)");
            let n = have.min(left);
            out.push((address, at, n));
            if have > n {
                run = Some((address + n as u64, have - n));
            }
            at += n as u64;
            left -= n;
        }
    }
    out
}

/// Unpacks `packed` into `into`'s layout, once its values are valid there.
fn unpack<B: BufferMut + ?Sized>(into: &mut B, packed: &[u8]) -> Result<(), Cause> {
    let datatype = into.datatype();
    if !datatype.is_valid(packed) {
        return Err(Cause::InvalidValue {
            type_name: datatype.name(),
        });
    }
    let layout = datatype.layout()?;
    // SAFETY: `BufferMut` makes the pointer valid for writes of the span of `count()`
    // elements (checked where a view is made), and `packed` is their packed size (the
    // signatures were checked equal) with values valid for the datatype.
    unsafe { layout.unpack(into.count(), into.pointer_mut(), packed) };
    Ok(())
}
