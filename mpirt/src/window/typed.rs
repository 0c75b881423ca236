//! Operations with datatypes on either side (`MPI_Put(origin, ocount, otype, target, disp,
//! tcount, ttype)` and the gets and accumulates alike): the origin is any [`Buffer`] (a
//! [`View`](crate::datatype::View) of a user datatype over a slice, or a slice), the target
//! side a [`TargetDatatype`]. The origin's data travels packed; the target datatype becomes a
//! list of byte blocks in the target's window, checked at the origin against the window, and
//! the data is applied block by block: one copy per block on the shared-memory path, the
//! block list in the request on the message path. Each completes at the origin before it
//! returns, so the request forms (`rput_typed`, ...) hand back requests complete at once.

use std::marker::PhantomData;
use std::mem::size_of;

use super::wire::{encode_blocks, Ask, Blocks};
use super::{data_request, Epoch, RmaRequest, WindowFault};
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
    ) -> Result<(Placed, std::sync::Arc<Layout>), Cause> {
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

    /// Packs the origin, once its signature is the target's.
    fn pack_origin<B: Buffer + ?Sized>(
        origin: &B,
        target: &Layout,
        target_type: &TargetDatatype,
    ) -> Result<Outgoing, Cause> {
        let layout = origin.datatype().layout()?;
        check_signatures(
            "the origin and the target datatype",
            (&layout, origin.count()),
            (target, target_type.count),
        )?;
        Outgoing::of(origin)
    }

    /// Checks that a get's or a fetching accumulate's origin buffer takes the target's
    /// signature.
    fn check_landing<B: BufferMut + ?Sized>(
        into: &B,
        target: &Layout,
        target_type: &TargetDatatype,
        what: &str,
    ) -> Result<(), Cause> {
        let layout = into.datatype().layout()?;
        check_signatures(what, (&layout, into.count()), (target, target_type.count))
    }

    /// Sends a typed request; `reply`, where given, receives the reply's packed data, and
    /// this waits for it.
    fn issue_typed(
        &self,
        placed: &Placed,
        mut request: super::wire::Request,
        data: &[u8],
        reply: Option<&mut [u8]>,
    ) -> Result<(), Cause> {
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
        let Some(into) = reply else {
            // SAFETY: no reply data is awaited.
            unsafe { self.issue(placed.target, request, &payload, None) }?;
            return Ok(());
        };
        let staging = (into.as_mut_ptr(), into.len());
        // SAFETY: `into` is borrowed by this call, which waits for the reply below; where
        // the wait fails the window is unusable and the caller's error ends the program or
        // the epoch, which abandons the destination (`Core::abandon`).
        let id = unsafe { self.issue(placed.target, request, &payload, Some(Some(staging))) }?;
        let mut core = self.core()?;
        let waited = core.wait_until(|core| core.is_done(id));
        if waited.is_err() {
            core.abandon();
        }
        waited?;
        core.take(id).expect("done").map_err(Cause::Window)
    }

    /// `MPI_Put` with datatypes: `origin`'s elements (any buffer or view) into the target's
    /// window as `target_type` lays them from `disp`. The signatures of the two must be equal
    /// (the same basic elements in the same order), and `target_type`'s basic elements the
    /// window's.
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
        self.put_typed_inner(origin, target, disp, target_type)
            .map_err(|c| Error::new(format!("put (typed) to rank {target}"), c))
    }

    /// `MPI_Rput` with datatypes: [`put_typed`](Self::put_typed), with a request. Complete
    /// at the origin when it returns, as the blocking form is (its origin packed and sent,
    /// or, on the RDMA path, written), so the request is complete at once.
    pub fn rput_typed<B: Buffer + ?Sized>(
        &self,
        origin: &'scope B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> RmaRequest<'scope, B> {
        or_fatal(
            self.put_typed_inner(origin, target, disp, target_type)
                .map(|()| self.request(0, None))
                .map_err(|c| Error::new(format!("rput (typed) to rank {target}"), c)),
        )
    }

    fn put_typed_inner<B: Buffer + ?Sized>(
        &self,
        origin: &B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> Result<(), Cause> {
        let (placed, layout) = self.place_typed(target, disp, target_type)?;
        let packed = Self::pack_origin(origin, &layout, target_type)?;
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
            return Ok(());
        }
        if let Some(rdma) = self.window.rdma_to(placed.target) {
            let mut at = 0;
            for &(from, len) in &placed.blocks {
                let part = &data[at..at + len as usize];
                // SAFETY: `data` lives until this call returns, after the puts completed.
                unsafe { rdma.put(placed.target, placed.offset + from, part) }?;
                at += len as usize;
            }
            // The packed origin goes with this call.
            return rdma.complete(&[placed.target]);
        }
        let request = data_request(Ask::Put, placed.offset, placed.bytes);
        self.issue_typed(&placed, request, data, None)
    }

    /// `MPI_Get` with datatypes: the target's elements as `target_type` lays them from
    /// `disp`, into `into`'s (any buffer or view). Complete when it returns: the data is
    /// unpacked into `into`'s layout then.
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
        self.get_typed_inner(into, target, disp, target_type)
            .map_err(|c| Error::new(format!("get (typed) from rank {target}"), c))
    }

    /// `MPI_Rget` with datatypes: [`get_typed`](Self::get_typed), whose request's `wait`
    /// hands `into` back. Complete when it returns, as the blocking form is (the data is
    /// unpacked into `into`'s layout then), so the request is complete at once.
    pub fn rget_typed<B: BufferMut + ?Sized>(
        &self,
        into: &'scope mut B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> RmaRequest<'scope, B> {
        let got = self.get_typed_inner(&mut *into, target, disp, target_type);
        or_fatal(
            got.map(|()| self.request(0, Some(into)))
                .map_err(|c| Error::new(format!("rget (typed) from rank {target}"), c)),
        )
    }

    fn get_typed_inner<B: BufferMut + ?Sized>(
        &self,
        into: &mut B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
    ) -> Result<(), Cause> {
        let (placed, layout) = self.place_typed(target, disp, target_type)?;
        Self::check_landing(
            into,
            &layout,
            target_type,
            "the origin and the target datatype",
        )?;
        let mut staging = vec![0u8; placed.bytes];
        if let Some(direct) = self.window.direct() {
            let mut at = 0;
            for &(from, len) in &placed.blocks {
                let part = &mut staging[at..at + len as usize];
                direct.get(placed.target, placed.offset + from, part);
                at += len as usize;
            }
        } else if let Some(rdma) = self.window.rdma_to(placed.target) {
            let mut at = 0;
            for &(from, len) in &placed.blocks {
                let part = &mut staging[at..at + len as usize];
                // SAFETY: `staging` lives until this call returns, after the gets
                // completed (below).
                unsafe { rdma.get(placed.target, placed.offset + from, part, false) }?;
                at += len as usize;
            }
            rdma.complete(&[placed.target])?;
        } else {
            let request = data_request(Ask::Get, placed.offset, placed.bytes);
            self.issue_typed(&placed, request, &[], Some(&mut staging))?;
        }
        unpack(into, &staging)
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
        self.accumulate_typed_inner(
            origin,
            None::<&mut [T]>,
            target,
            disp,
            target_type,
            op.into(),
        )
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
    /// request. Complete at the origin when it returns, as the blocking form is, so the
    /// request is complete at once.
    pub fn raccumulate_typed<B: Buffer + ?Sized>(
        &self,
        origin: &'scope B,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: impl Into<AccumulateOperation>,
    ) -> RmaRequest<'scope, B> {
        let done = self.accumulate_typed_inner(
            origin,
            None::<&mut [T]>,
            target,
            disp,
            target_type,
            op.into(),
        );
        or_fatal(
            done.map(|()| self.request(0, None))
                .map_err(|c| Error::new(format!("raccumulate (typed) to rank {target}"), c)),
        )
    }

    /// `MPI_Rget_accumulate` with datatypes:
    /// [`get_accumulate_typed`](Self::get_accumulate_typed), whose request's `wait` hands
    /// `result` back. Complete when it returns, as the blocking form is, so the request is
    /// complete at once.
    pub fn rget_accumulate_typed<B: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        origin: &'scope B,
        result: &'scope mut R,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: impl Into<AccumulateOperation>,
    ) -> RmaRequest<'scope, R> {
        let done = self.accumulate_typed_inner(
            origin,
            Some(&mut *result),
            target,
            disp,
            target_type,
            op.into(),
        );
        or_fatal(
            done.map(|()| self.request(0, Some(result)))
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
        self.accumulate_typed_inner(origin, Some(result), target, disp, target_type, op.into())
            .map_err(|c| Error::new(format!("get_accumulate (typed) on rank {target}"), c))
    }

    fn accumulate_typed_inner<B: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        origin: &B,
        result: Option<&mut R>,
        target: Rank,
        disp: usize,
        target_type: &TargetDatatype,
        op: AccumulateOperation,
    ) -> Result<(), Cause> {
        let datatype = datatype_of::<T>();
        let element = self.window.check_accumulate(datatype, op)?;
        let (placed, layout) = self.place_typed(target, disp, target_type)?;
        let packed = Self::pack_origin(origin, &layout, target_type)?;
        let data = packed.bytes();
        if let Some(result) = &result {
            Self::check_landing(*result, &layout, target_type, "the result and the target")?;
        }
        let mut old = result.as_ref().map(|_| vec![0u8; placed.bytes]);
        if let Some(direct) = self.window.direct() {
            let mut at = 0;
            for &(from, len) in &placed.blocks {
                let range = at..at + len as usize;
                let before = old.as_mut().map(|old| &mut old[range.clone()]);
                let offset = placed.offset + from;
                direct.accumulate(
                    placed.target,
                    offset,
                    op,
                    (datatype, element),
                    &data[range],
                    before,
                )?;
                at += len as usize;
            }
        } else if let Some(rdma) = self.window.device_atomics(placed.target) {
            let mut at = 0;
            for &(from, len) in &placed.blocks {
                let range = at..at + len as usize;
                let before = old.as_mut().map(|old| &mut old[range.clone()]);
                let offset = placed.offset + from;
                rdma.accumulate(placed.target, offset, op, datatype, &data[range], before)?;
                at += len as usize;
            }
        } else {
            let ask = match old {
                Some(_) => Ask::GetAccumulate,
                None => Ask::Accumulate,
            };
            let mut request = data_request(ask, placed.offset, placed.bytes);
            request.op = op.code();
            request.element = element;
            self.issue_typed(&placed, request, data, old.as_deref_mut())?;
        }
        match (result, old) {
            (Some(result), Some(old)) => unpack(result, &old),
            _ => Ok(()),
        }
    }
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
