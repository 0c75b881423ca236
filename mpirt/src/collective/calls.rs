//! Each collective call before it runs: its buffers checked against each other and the
//! communicator, the plan of the chosen algorithm, and the buffers the plan runs over. One
//! function per collective, shared by the blocking and the immediate form.

use crate::communicator::{CommData, Grid, Rank};
use pml::Pml;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;

use crate::datatype::{Buffer, BufferMut, Datatype, Layout};
use crate::environment::with_engine_or_lent;
use crate::error::Cause;
use crate::partition::{disjoint, parts, Partition, Partitioned};
use crate::point_to_point::Count;

use super::algorithms::hosts::Placement;
use super::algorithms::Ranks;
use super::build;
use super::hierarchy::Hierarchy;
use super::op::{Operation, Reduction};
use super::plans::{Form, Key, Shape, Side, Sides};
use super::schedule::{Buffers, Checked, Direct, Execution, Plan, Region, Room, Span};
use super::shared;

/// What a collective call runs: its plan over its buffers.
pub(crate) struct Call<'a> {
    plan: Checked,
    buffers: Buffers,
    datatype: Datatype,
    op: Option<Reduction<'a>>,
}

impl<'a> Call<'a> {
    /// The call of `shape` over `buffers`: the plan the communicator keeps for that shape
    /// with these buffers' lengths and a reduction that is `commutative` (true where there is
    /// none), or the one `build` makes, then kept (`plans`).
    fn kept(
        comm: &CommData,
        shape: Shape,
        buffers: Buffers,
        datatype: Datatype,
        commutative: bool,
        build: impl FnOnce() -> Result<Plan, Cause>,
    ) -> Result<Self, Cause> {
        let shape = (shape, Sides::default());
        Call::parted(comm, shape, &[], buffers, datatype, commutative, build)
    }

    /// [`kept`](Self::kept) of a call whose parts `lists` place (`Plans::get`):
    /// `build` checks them as it plans, where the communicator keeps no plan for them.
    fn parted(
        comm: &CommData,
        (shape, sides): (Shape, Sides),
        lists: &[&[Count]],
        buffers: Buffers,
        datatype: Datatype,
        commutative: bool,
        build: impl FnOnce() -> Result<Plan, Cause>,
    ) -> Result<Self, Cause> {
        let key = Key {
            shape,
            send_len: buffers.send_len,
            recv_len: buffers.recv_len,
            commutative,
            sides,
        };
        Ok(Call {
            plan: comm.plans().get(key, lists, build)?,
            buffers,
            datatype,
            op: None,
        })
    }

    fn reducing(mut self, op: impl Operation + 'a) -> Self {
        self.op = Some(op.reduction());
        self
    }

    /// # Safety
    /// The buffers must stay valid (and the receive buffer otherwise untouched) until the
    /// execution is finished or dropped.
    pub unsafe fn start(self, comm: &CommData) -> Execution<'a> {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            Execution::new(
                comm.clone(),
                self.plan,
                self.buffers,
                self.datatype,
                self.op,
            )
        }
    }
}

/// How an immediate call runs: its one round of transfers held by its request, or an
/// execution.
pub(crate) enum Begun<'a> {
    Direct(Direct<'a>),
    Execution(Execution<'a>),
}

impl<'a> Call<'a> {
    /// The immediate call: direct where its plan and buffers let it ([`Direct::serves`]),
    /// in `room`; else its execution.
    ///
    /// # Safety
    /// As for [`start`](Self::start); `room` stays valid, and untouched but through the
    /// call, until it is over (or dropped).
    pub unsafe fn begin(self, comm: &CommData, room: NonNull<Room>) -> Begun<'a> {
        match Direct::serves(
            &self.plan,
            &self.buffers,
            (self.datatype, self.op.as_ref()),
            comm,
        ) {
            // SAFETY: forwarded from this function's contract.
            true => Begun::Direct(unsafe {
                Direct::new(
                    comm,
                    self.plan,
                    self.buffers,
                    (self.datatype, self.op),
                    room,
                )
            }),
            // SAFETY: forwarded from this function's contract.
            false => Begun::Execution(unsafe { self.start(comm) }),
        }
    }
}

/// What a rank knows of a rooted call whose arguments it refused, where it may be the root:
/// enough to plan the root's part in the call its peers make (from the buffer that says the
/// lengths they go by), which the root then runs draining ([`drain`]), so that no peer waits
/// for it. The parts of a call of parts of any length are the peers' alone to know: the
/// root's are planned empty, its own included (every rank's message is received all the
/// same, into none, and every rank sent one).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refused {
    Reduce {
        root: Rank,
        len: usize,
        element: usize,
        commutative: bool,
    },
    Gather {
        root: Rank,
        block: usize,
    },
    GatherVarcount {
        root: Rank,
    },
    Scatter {
        root: Rank,
        block: usize,
    },
    ScatterVarcount {
        root: Rank,
    },
}

impl Refused {
    fn root(self) -> Rank {
        match self {
            Refused::Reduce { root, .. }
            | Refused::Gather { root, .. }
            | Refused::GatherVarcount { root }
            | Refused::Scatter { root, .. }
            | Refused::ScatterVarcount { root } => root,
        }
    }

    /// The root's plan, `root` its index, as its call would have it by messages.
    fn plan(self, comm: &CommData, root: u32) -> Result<Plan, Cause> {
        let ranks = ranks(comm);
        let none = vec![(0, 0); comm.size as usize];
        let hierarchy = serving(comm, |_| true);
        let placement = placement(&hierarchy);
        match self {
            Refused::Reduce {
                len,
                element,
                commutative,
                ..
            } => build::reduce(ranks, root, len, element, commutative),
            Refused::Gather { block, .. } => build::gather(ranks, root, block, placement),
            Refused::GatherVarcount { .. } => {
                build::gather_varcount(ranks, root, 0, Some(&none), placement)
            }
            Refused::Scatter { block, .. } => build::scatter(ranks, root, block, placement),
            Refused::ScatterVarcount { .. } => {
                build::scatter_varcount(ranks, root, Some(&none), 0, placement)
            }
        }
    }
}

/// Where this rank is the root of the call `refused` describes, which it refused for
/// `cause`, and its peers go by messages: runs its part draining (`Execution::draining`),
/// so that every peer's message is taken and every one a peer waits for is sent, empty and
/// marked refused (those peers fail naming the root); `false` where it is not the root, or
/// no plan could be made (then every rank's plan fails alike), and it ran nothing.
pub(crate) fn drain(comm: &CommData, refused: Refused, cause: &Cause) -> bool {
    let Some(root) = comm
        .check_rank(refused.root())
        .ok()
        .filter(|&root| root == comm.rank)
    else {
        return false;
    };
    let Ok(plan) = refused.plan(comm, root) else {
        return false;
    };
    // The root's error is its own cause, whatever its draining met: a peer's disagreement
    // follows from the refusal, and a broken transport is the next call's to report.
    let _ = Execution::draining(comm.clone(), &plan, cause.clone()).run();
    true
}

/// The shape of a call of `form` rooted at `root` (0 where unrooted), and what its buffers'
/// checks read of `send` and `recv`.
fn parted(
    form: Form,
    root: u32,
    hierarchy: &Option<Rc<Hierarchy>>,
    send: Option<Side>,
    recv: Option<Side>,
) -> (Shape, Sides) {
    let shape = Shape::Parted {
        form,
        root,
        hierarchical: hierarchy.is_some(),
    };
    (shape, Sides { send, recv })
}

/// A send buffer as a call's checks read it.
fn sent<B: Buffer + ?Sized>(buf: &B) -> Side {
    Side {
        matched: buf.matched(),
        own: (buf.datatype(), buf.count()),
    }
}

/// A receive buffer as a call's checks read it.
fn received<B: BufferMut + ?Sized>(buf: &B) -> Side {
    Side {
        matched: buf.matched(),
        own: (buf.datatype(), buf.count()),
    }
}

/// The communicator's hierarchy where its collectives go hierarchically
/// (`shared::hierarchy`) and it `serves` the call, else `None`.
fn serving(comm: &CommData, serves: impl FnOnce(&Hierarchy) -> bool) -> Option<Rc<Hierarchy>> {
    shared::hierarchy(comm).filter(|h| serves(h))
}

/// The ranks' hosts, where `hierarchy` is the one serving the call.
fn placement(hierarchy: &Option<Rc<Hierarchy>>) -> Option<Placement<'_>> {
    hierarchy.as_deref().map(Hierarchy::placement)
}

fn ranks(comm: &CommData) -> Ranks {
    Ranks {
        rank: comm.rank,
        size: comm.size,
    }
}

/// How a buffer's elements lie, when they are not one run of bytes: its datatype's layout and
/// how many elements, which the execution packs and unpacks.
fn layout_of(datatype: Datatype, count: usize) -> Result<Option<(Arc<Layout>, usize)>, Cause> {
    match datatype.is_contiguous() {
        true => Ok(None),
        false => Ok(Some((datatype.layout()?, count))),
    }
}

fn sending<S: Buffer + ?Sized>(send: &S) -> Result<Buffers, Cause> {
    Ok(Buffers {
        send: send.pointer(),
        send_len: send.byte_len(),
        send_layout: layout_of(send.datatype(), send.count())?,
        ..Buffers::none()
    })
}

fn receiving<R: BufferMut + ?Sized>(recv: &mut R) -> Result<Buffers, Cause> {
    Ok(Buffers {
        recv_len: recv.byte_len(),
        recv_layout: layout_of(recv.datatype(), recv.count())?,
        recv: recv.pointer_mut(),
        ..Buffers::none()
    })
}

fn both<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    send: &S,
    recv: &mut R,
) -> Result<Buffers, Cause> {
    Ok(Buffers {
        recv_len: recv.byte_len(),
        recv_layout: layout_of(recv.datatype(), recv.count())?,
        recv: recv.pointer_mut(),
        ..sending(send)?
    })
}

/// The element type of a send and a receive buffer, which must agree.
fn same_type(send: Datatype, recv: Datatype) -> Result<Datatype, Cause> {
    if send == recv {
        Ok(send)
    } else {
        Err(send.mismatch(&recv))
    }
}

fn expect_count(what: &'static str, expected: usize, got: usize) -> Result<(), Cause> {
    if expected == got {
        Ok(())
    } else {
        Err(Cause::CountMismatch {
            what,
            expected,
            got,
        })
    }
}

/// Elements of `datatype` in `bytes`.
fn elements(bytes: usize, datatype: Datatype) -> usize {
    bytes / datatype.size().max(1)
}

/// Each part of a partitioned buffer of `count` elements of `datatype`, as (offset, length)
/// in packed bytes. The counts and displacements are in the buffer's own elements, which
/// may hold several of the basic elements that type matching compares (a view of a vector
/// type), so `count` and `datatype` are the buffer's, not the matched ones.
fn byte_parts<P: Partitioned + ?Sized>(
    what: &'static str,
    partition: &P,
    count: usize,
    datatype: Datatype,
    size: u32,
) -> Result<Parts, Cause> {
    Ok(in_bytes(
        parts(what, partition, count, size as usize)?,
        datatype,
    ))
}

/// [`byte_parts`] of a buffer the call writes (a receive buffer), whose parts must not
/// overlap ([`disjoint`]) where the call writes both: `written` says whether it writes part
/// `i` (a neighbourhood call leaves an absent neighbour's part untouched, as MPI does
/// `MPI_PROC_NULL`'s, so that part may share elements with another); part `i` is `owner`
/// `i`'s, for errors.
fn written_byte_parts<P: Partitioned + ?Sized>(
    what: &'static str,
    owner: &'static str,
    partition: &P,
    count: usize,
    datatype: Datatype,
    size: u32,
    written: impl Fn(usize) -> bool,
) -> Result<Parts, Cause> {
    let parts = parts(what, partition, count, size as usize)?;
    let landing: Vec<(usize, usize)> = (0..)
        .zip(&parts)
        .map(|(i, &(displ, count))| (displ, if written(i) { count } else { 0 }))
        .collect();
    disjoint(what, owner, &landing)?;
    Ok(in_bytes(parts, datatype))
}

/// Parts in elements of `datatype` as (offset, length) in packed bytes.
fn in_bytes(parts: Vec<(usize, usize)>, datatype: Datatype) -> Parts {
    let element = datatype.size();
    parts
        .into_iter()
        .map(|(displ, count)| (displ * element, count * element))
        .collect()
}

/// Whether this rank is `root`, which must be in range; `call` says what is wrong when the
/// root-only form and the rank disagree.
fn check_root(
    comm: &CommData,
    root: Rank,
    root_form: bool,
    call: &'static str,
) -> Result<u32, Cause> {
    let root = comm.check_rank(root)?;
    if (comm.rank == root) == root_form {
        Ok(root)
    } else {
        Err(Cause::WrongRootCall {
            root: root as Rank,
            call,
        })
    }
}

pub(crate) fn barrier<'a>(comm: &CommData) -> Result<Call<'a>, Cause> {
    let none = Datatype::plain(0, "none");
    Call::kept(comm, Shape::Barrier, Buffers::none(), none, true, || {
        Ok(build::barrier(ranks(comm)))
    })
}

pub(crate) fn broadcast<'a, B: BufferMut + ?Sized>(
    comm: &CommData,
    root: Rank,
    buf: &mut B,
) -> Result<Call<'a>, Cause> {
    let root = comm.check_rank(root)?;
    let datatype = buf.matched().0;
    // Every rank's parts end at the same bytes, whatever type each names the signature by.
    let (len, element) = (buf.byte_len(), datatype.basic_size());
    let shape = Shape::Broadcast { root, element };
    Call::kept(comm, shape, receiving(buf)?, datatype, true, || {
        build::broadcast(ranks(comm), root, len, element)
    })
}

/// The element type of an all-gather's buffers, once they agree.
pub(crate) fn check_all_gather<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    send: &S,
    recv: &R,
) -> Result<Datatype, Cause> {
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let n = comm.size as usize;
    expect_count("the receive buffer", send.matched().1 * n, recv.matched().1)?;
    Ok(datatype)
}

pub(crate) fn all_gather<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
) -> Result<Call<'a>, Cause> {
    let datatype = check_all_gather(comm, send, recv)?;
    let block = send.byte_len();
    Call::kept(
        comm,
        Shape::AllGather,
        both(send, recv)?,
        datatype,
        true,
        || build::all_gather(ranks(comm), block),
    )
}

pub(crate) fn all_gather_varcount<'a, S, R>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + Partitioned + ?Sized,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let hierarchy = serving(comm, |_| true);
    let shape = parted(
        Form::AllGatherVarcount,
        0,
        &hierarchy,
        Some(sent(send)),
        Some(received(recv)),
    );
    let buffers = both(send, recv)?;
    let recv = &*recv;
    let lists = [recv.counts(), recv.displs()];
    Call::parted(comm, shape, &lists, buffers, datatype, true, || {
        let (_, incoming) = check_all_gather_varcount(comm, send, recv)?;
        build::all_gather_varcount(ranks(comm), &incoming, placement(&hierarchy))
    })
}

/// Checks an all-gather of parts of any length; returns the elements' type and each rank's
/// part of the receive buffer (offset, length in packed bytes).
pub(crate) fn check_all_gather_varcount<S, R>(
    comm: &CommData,
    send: &S,
    recv: &R,
) -> Result<(Datatype, Parts), Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + Partitioned + ?Sized,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let incoming = written_byte_parts(
        "receive",
        "rank",
        recv,
        recv.count(),
        recv.datatype(),
        comm.size,
        |_| true,
    )?;
    let own = incoming[comm.rank as usize].1;
    expect_count("the send buffer", elements(own, datatype), send.matched().1)?;
    Ok((datatype, incoming))
}

/// The element type of an all-to-all's buffers, once they agree and hold a whole block per
/// rank.
pub(crate) fn check_all_to_all<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    send: &S,
    recv: &R,
) -> Result<Datatype, Cause> {
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    expect_count("the receive buffer", send.matched().1, recv.matched().1)?;
    let n = comm.size as usize;
    expect_count(
        "the send buffer (a whole block per rank)",
        send.matched().1.next_multiple_of(n),
        send.matched().1,
    )?;
    Ok(datatype)
}

pub(crate) fn all_to_all<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
) -> Result<Call<'a>, Cause> {
    let datatype = check_all_to_all(comm, send, recv)?;
    let n = comm.size as usize;
    let block = send.byte_len() / n;
    let hierarchy = serving(comm, |_| true);
    let shape = Shape::AllToAll {
        hierarchical: hierarchy.is_some(),
    };
    Call::kept(comm, shape, both(send, recv)?, datatype, true, || {
        let equal = build::equal_parts(block, comm.size);
        let (on_host, shares) = ranks_on_host(comm)?;
        let placement = placement(&hierarchy);
        build::all_to_all(
            ranks(comm),
            &equal,
            &equal,
            block,
            placement,
            on_host,
            shares,
        )
    })
}

/// How many of the communicator's ranks share this rank's host, as the PML's table of its
/// ranks' hosts says (every rank's holds the same hosts; 1 where it knows none), and whether
/// they outnumber the CPUs this rank may run on (`pml::config::shares_cores`).
fn ranks_on_host(comm: &CommData) -> Result<(u32, bool), Cause> {
    let on_host = with_engine_or_lent(|e| {
        let mine = e.host_of(comm.world_rank(comm.rank));
        Ok(match mine {
            None => 1,
            Some(_) => (0..comm.size)
                .filter(|&r| e.host_of(comm.world_rank(r)) == mine)
                .count() as u32,
        })
    })?;
    Ok((on_host, pml::config::shares_cores(on_host as usize)))
}

pub(crate) fn all_to_all_varcount<'a, S, R>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + Partitioned + ?Sized,
    R: BufferMut + Partitioned + ?Sized,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let shape = parted(
        Form::AllToAllVarcount,
        0,
        &None,
        Some(sent(send)),
        Some(received(recv)),
    );
    let buffers = both(send, recv)?;
    let recv = &*recv;
    let lists = [send.counts(), send.displs(), recv.counts(), recv.displs()];
    Call::parted(comm, shape, &lists, buffers, datatype, true, || {
        let (_, outgoing, incoming) = check_all_to_all_varcount(comm, send, recv)?;
        let largest = outgoing.iter().map(|p| p.1).max().unwrap_or(0);
        let (on_host, shares) = ranks_on_host(comm)?;
        build::all_to_all(
            ranks(comm),
            &outgoing,
            &incoming,
            largest,
            None,
            on_host,
            shares,
        )
    })
}

/// A part of a buffer for one rank: its offset and length in packed bytes.
pub(crate) type Part = (usize, usize);
/// The parts of a buffer, one per rank.
pub(crate) type Parts = Vec<Part>;

/// Checks an all-to-all of parts of any length; returns the elements' type and each rank's
/// part of the send and of the receive buffer.
pub(crate) fn check_all_to_all_varcount<S, R>(
    comm: &CommData,
    send: &S,
    recv: &R,
) -> Result<(Datatype, Parts, Parts), Cause>
where
    S: Buffer + Partitioned + ?Sized,
    R: BufferMut + Partitioned + ?Sized,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let outgoing = byte_parts("send", send, send.count(), send.datatype(), comm.size)?;
    let incoming = written_byte_parts(
        "receive",
        "rank",
        recv,
        recv.count(),
        recv.datatype(),
        comm.size,
        |_| true,
    )?;
    let me = comm.rank as usize;
    expect_count(
        "this rank's receive part from itself",
        elements(outgoing[me].1, datatype),
        elements(incoming[me].1, datatype),
    )?;
    Ok((datatype, outgoing, incoming))
}

/// The element type of an inter-communicator all-gather's buffers, once they agree and the
/// receive buffer holds a whole block per remote rank (`remote` of them). How long a block is
/// is the remote group's to say: its leader's swap checks it.
pub(crate) fn check_inter_all_gather<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    send: &S,
    recv: &R,
    remote: usize,
) -> Result<Datatype, Cause> {
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let got = recv.matched().1;
    expect_count(
        "the receive buffer (a whole block per remote rank)",
        got.next_multiple_of(remote),
        got,
    )?;
    Ok(datatype)
}

/// The element type of an inter-communicator all-to-all's buffers, once they agree and each
/// holds a whole block per remote rank (`remote` of them); the blocks each way may differ in
/// length, which the swap with each partner checks.
pub(crate) fn check_inter_all_to_all<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    send: &S,
    recv: &R,
    remote: usize,
) -> Result<Datatype, Cause> {
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    for (what, got) in [
        (
            "the send buffer (a whole block per remote rank)",
            send.matched().1,
        ),
        (
            "the receive buffer (a whole block per remote rank)",
            recv.matched().1,
        ),
    ] {
        expect_count(what, got.next_multiple_of(remote), got)?;
    }
    Ok(datatype)
}

/// The element type of an all-reduce's buffers, once they and the operation agree.
pub(crate) fn check_all_reduce<S, R, O>(send: &S, recv: &R, op: &O) -> Result<Datatype, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    op.check(datatype)?;
    expect_count("the receive buffer", send.matched().1, recv.matched().1)?;
    Ok(datatype)
}

pub(crate) fn all_reduce<'a, S, R, O>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
    op: O,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation + 'a,
{
    let datatype = check_all_reduce(send, recv, &op)?;
    all_reduce_checked(comm, send, recv, op, datatype)
}

/// [`all_reduce`] of buffers [`check_all_reduce`] found to hold `datatype`.
pub(crate) fn all_reduce_checked<'a, S, R, O>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
    op: O,
    datatype: Datatype,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation + 'a,
{
    let (len, element, commutative) = (send.byte_len(), datatype.size(), op.is_commutative());
    let shape = Shape::AllReduce { element };
    let call = Call::kept(
        comm,
        shape,
        both(send, recv)?,
        datatype,
        commutative,
        || build::all_reduce(ranks(comm), len, element, commutative),
    )?;
    Ok(call.reducing(op))
}

/// The element type of a reduce-scatter's buffers in equal blocks, once they and the
/// operation agree.
pub(crate) fn check_reduce_scatter_block<S, R, O>(
    comm: &CommData,
    send: &S,
    recv: &R,
    op: &O,
) -> Result<Datatype, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    op.check(datatype)?;
    let n = comm.size as usize;
    expect_count("the send buffer", recv.matched().1 * n, send.matched().1)?;
    Ok(datatype)
}

/// Reduce-scatter into parts of `counts[r]` elements (equal blocks when `counts` is `None`).
pub(crate) fn reduce_scatter<'a, S, R, O>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
    counts: Option<&[Count]>,
    op: O,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation + 'a,
{
    let (len, commutative) = (send.byte_len(), op.is_commutative());
    let hierarchy = serving(comm, |h| h.serves(commutative));
    let call = match counts {
        None => {
            let datatype = check_reduce_scatter_block(comm, send, recv, &op)?;
            let shape = Shape::ReduceScatter {
                hierarchical: hierarchy.is_some(),
            };
            let block = recv.byte_len();
            Call::kept(
                comm,
                shape,
                both(send, recv)?,
                datatype,
                commutative,
                || {
                    let parts = build::equal_parts(block, comm.size);
                    let placement = placement(&hierarchy);
                    build::reduce_scatter(ranks(comm), len, &parts, commutative, placement)
                },
            )?
        }
        Some(counts) => {
            let datatype = same_type(send.matched().0, recv.matched().0)?;
            op.check(datatype)?;
            let form = Form::ReduceScatterCounted;
            let shape = parted(form, 0, &hierarchy, Some(sent(send)), Some(received(recv)));
            let buffers = both(send, recv)?;
            let recv = &*recv;
            Call::parted(
                comm,
                shape,
                &[counts],
                buffers,
                datatype,
                commutative,
                || {
                    let (_, parts) = check_reduce_scatter(comm, send, recv, counts, &op)?;
                    let placement = placement(&hierarchy);
                    build::reduce_scatter(ranks(comm), len, &parts, commutative, placement)
                },
            )?
        }
    };
    Ok(call.reducing(op))
}

/// Checks a reduce-scatter into parts of `counts[r]` elements (equal blocks when `counts` is
/// `None`); returns the elements' type and where this rank's part of the send buffer starts,
/// in packed bytes. Counts that are plainly right (one per rank, none negative, as many as
/// the send buffer holds, this rank's as many as its receive buffer) are taken without
/// building the parts, which the short calls of the shared-memory area would pay for; any
/// other counts get [`check_reduce_scatter`]'s verdict.
pub(crate) fn check_reduce_scatter_part<S, R, O>(
    comm: &CommData,
    send: &S,
    recv: &R,
    counts: Option<&[Count]>,
    op: &O,
) -> Result<(Datatype, usize), Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    let me = comm.rank as usize;
    match counts {
        None => {
            let datatype = check_reduce_scatter_block(comm, send, recv, op)?;
            Ok((datatype, me * recv.byte_len()))
        }
        Some(counts)
            if counts.len() == comm.size as usize
                && counts.iter().all(|&c| c >= 0)
                && counts.iter().map(|&c| c as usize).sum::<usize>() == send.count()
                && counts[me] as usize * send.datatype().size() == recv.byte_len() =>
        {
            let datatype = same_type(send.matched().0, recv.matched().0)?;
            op.check(datatype)?;
            let before: usize = counts[..me].iter().map(|&c| c as usize).sum();
            Ok((datatype, before * send.datatype().size()))
        }
        Some(counts) => {
            let (datatype, parts) = check_reduce_scatter(comm, send, recv, counts, op)?;
            Ok((datatype, parts[me].0))
        }
    }
}

/// Checks a reduce-scatter into parts of `counts[r]` elements; returns the elements' type
/// and each rank's part of the send buffer (offset, length in packed bytes).
pub(crate) fn check_reduce_scatter<S, R, O>(
    comm: &CommData,
    send: &S,
    recv: &R,
    counts: &[Count],
    op: &O,
) -> Result<(Datatype, Parts), Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    op.check(datatype)?;
    let displs: Vec<Count> = counts
        .iter()
        .scan(0, |at, &c| {
            let d = *at;
            *at += c.max(0);
            Some(d)
        })
        .collect();
    let cut = Partition::new(send, counts, &displs[..]);
    let parts = byte_parts("counts", &cut, send.count(), send.datatype(), comm.size)?;
    let total: usize = parts.iter().map(|p| p.1).sum();
    expect_count(
        "the send buffer",
        elements(total, datatype),
        send.matched().1,
    )?;
    let own = elements(parts[comm.rank as usize].1, datatype);
    expect_count("the receive buffer", own, recv.matched().1)?;
    Ok((datatype, parts))
}

pub(crate) fn scan<'a, S, R, O>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
    op: O,
    inclusive: bool,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation + 'a,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    op.check(datatype)?;
    expect_count("the receive buffer", send.matched().1, recv.matched().1)?;
    let (len, commutative) = (send.byte_len(), op.is_commutative());
    let shape = Shape::Scan { inclusive };
    let call = Call::kept(
        comm,
        shape,
        both(send, recv)?,
        datatype,
        commutative,
        || Ok(build::scan(ranks(comm), len, inclusive)),
    )?;
    Ok(call.reducing(op))
}

/// A reduction to `root`; `recv` is the root's and only the root's.
pub(crate) fn reduce<'a, S, R, O>(
    comm: &CommData,
    root: Rank,
    send: &S,
    recv: Option<&mut R>,
    op: O,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation + 'a,
{
    let (root, datatype) = check_reduce(comm, root, send, recv.as_deref(), &op)?;
    let (len, element, commutative) = (send.byte_len(), datatype.size(), op.is_commutative());
    let buffers = match recv {
        Some(recv) => both(send, recv)?,
        None => sending(send)?,
    };
    let shape = Shape::Reduce { root, element };
    let call = Call::kept(comm, shape, buffers, datatype, commutative, || {
        build::reduce(ranks(comm), root, len, element, commutative)
    })?;
    Ok(call.reducing(op))
}

/// Checks a reduction to `root` (`recv` is the root's and only the root's); returns the
/// root's index and the elements' type.
pub(crate) fn check_reduce<S, R, O>(
    comm: &CommData,
    root: Rank,
    send: &S,
    recv: Option<&R>,
    op: &O,
) -> Result<(u32, Datatype), Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    let root = check_root(
        comm,
        root,
        recv.is_some(),
        "the root calls reduce_into_root, the others reduce_into",
    )?;
    op.check(send.matched().0)?;
    let datatype = match recv {
        Some(recv) => {
            let datatype = same_type(send.matched().0, recv.matched().0)?;
            expect_count("the receive buffer", send.matched().1, recv.matched().1)?;
            datatype
        }
        None => send.matched().0,
    };
    Ok((root, datatype))
}

/// A gather to `root`; `recv` is the root's and only the root's.
pub(crate) fn gather<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    root: Rank,
    send: &S,
    recv: Option<&mut R>,
) -> Result<Call<'a>, Cause> {
    let (root, datatype) = check_gather(comm, root, send, recv.as_deref())?;
    let block = send.byte_len();
    let buffers = match recv {
        Some(recv) => both(send, recv)?,
        None => sending(send)?,
    };
    let hierarchy = serving(comm, |_| true);
    let shape = Shape::Gather {
        root,
        hierarchical: hierarchy.is_some(),
    };
    Call::kept(comm, shape, buffers, datatype, true, || {
        build::gather(ranks(comm), root, block, placement(&hierarchy))
    })
}

/// Checks a gather to `root` (`recv` is the root's and only the root's); returns the root's
/// index and the elements' type.
pub(crate) fn check_gather<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    root: Rank,
    send: &S,
    recv: Option<&R>,
) -> Result<(u32, Datatype), Cause> {
    check_rooted(
        comm,
        root,
        "the root calls gather_into_root, the others gather_into",
        send.matched(),
        recv.map(|recv| (recv.matched(), "the receive buffer")),
        same_type,
    )
}

/// Checks a rooted call whose root alone holds a buffer of a block per rank (`whole`, named:
/// a gather's receive buffer, a scatter's send buffer) beside each rank's block (`own`), both
/// as type and count that type matching compares; `compare` checks `own`'s type against
/// `whole`'s in the call's order (send, receive). The root's rank and the elements' type.
fn check_rooted(
    comm: &CommData,
    root: Rank,
    call: &'static str,
    own: (Datatype, usize),
    whole: Option<((Datatype, usize), &'static str)>,
    compare: impl FnOnce(Datatype, Datatype) -> Result<Datatype, Cause>,
) -> Result<(u32, Datatype), Cause> {
    let root = check_root(comm, root, whole.is_some(), call)?;
    let Some(((whole_type, whole_count), what)) = whole else {
        return Ok((root, own.0));
    };
    let datatype = compare(own.0, whole_type)?;
    expect_count(what, own.1 * comm.size as usize, whole_count)?;
    Ok((root, datatype))
}

/// A gather of parts of any length to `root`, placed as the root's `recv` says.
pub(crate) fn gather_varcount<'a, S, R>(
    comm: &CommData,
    root: Rank,
    send: &S,
    recv: Option<&mut R>,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + Partitioned + ?Sized,
{
    let root_index = check_root(comm, root, recv.is_some(), GATHER_VARCOUNT_CALL)?;
    let datatype = match &recv {
        Some(recv) => same_type(send.matched().0, recv.matched().0)?,
        None => send.matched().0,
    };
    let hierarchy = serving(comm, |_| true);
    let recv_side = recv.as_deref().map(received);
    let form = Form::GatherVarcount;
    let shape = parted(form, root_index, &hierarchy, Some(sent(send)), recv_side);
    let (buffers, recv) = match recv {
        Some(recv) => (both(send, recv)?, Some(&*recv)),
        None => (sending(send)?, None),
    };
    let lists = recv.map_or([&[][..]; 2], |recv| [recv.counts(), recv.displs()]);
    Call::parted(comm, shape, &lists, buffers, datatype, true, || {
        let (root, _, incoming) = check_gather_varcount(comm, root, send, recv)?;
        let (own, incoming) = (send.byte_len(), incoming.as_deref());
        build::gather_varcount(ranks(comm), root, own, incoming, placement(&hierarchy))
    })
}

/// What a gather of parts of any length's rank calls, for an error where it called the other.
const GATHER_VARCOUNT_CALL: &str =
    "the root calls gather_varcount_into_root, the others gather_varcount_into";

/// Checks a gather of parts of any length to `root` (`recv` is the root's and only the
/// root's); returns the root's index, the elements' type and, on the root, each rank's part
/// of the receive buffer (offset, length in packed bytes).
pub(crate) fn check_gather_varcount<S, R>(
    comm: &CommData,
    root: Rank,
    send: &S,
    recv: Option<&R>,
) -> Result<(u32, Datatype, Option<Parts>), Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + Partitioned + ?Sized,
{
    let root = check_root(comm, root, recv.is_some(), GATHER_VARCOUNT_CALL)?;
    let Some(recv) = recv else {
        return Ok((root, send.matched().0, None));
    };
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let incoming = written_byte_parts(
        "receive",
        "rank",
        recv,
        recv.count(),
        recv.datatype(),
        comm.size,
        |_| true,
    )?;
    let own = elements(incoming[root as usize].1, datatype);
    expect_count("the send buffer", own, send.matched().1)?;
    Ok((root, datatype, Some(incoming)))
}

/// A scatter from `root`; `send` is the root's and only the root's.
pub(crate) fn scatter<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    root: Rank,
    send: Option<&S>,
    recv: &mut R,
) -> Result<Call<'a>, Cause> {
    let (root, datatype) = check_scatter(comm, root, send, recv)?;
    let block = recv.byte_len();
    let buffers = match send {
        Some(send) => both(send, recv)?,
        None => receiving(recv)?,
    };
    let hierarchy = serving(comm, |_| true);
    let shape = Shape::Scatter {
        root,
        hierarchical: hierarchy.is_some(),
    };
    Call::kept(comm, shape, buffers, datatype, true, || {
        build::scatter(ranks(comm), root, block, placement(&hierarchy))
    })
}

/// Checks a scatter from `root` (`send` is the root's and only the root's); returns the
/// root's index and the elements' type.
pub(crate) fn check_scatter<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    root: Rank,
    send: Option<&S>,
    recv: &R,
) -> Result<(u32, Datatype), Cause> {
    check_rooted(
        comm,
        root,
        "the root calls scatter_into_root, the others scatter_into",
        recv.matched(),
        send.map(|send| (send.matched(), "the send buffer")),
        |own, whole| same_type(whole, own),
    )
}

/// A scatter of parts of any length from `root`, cut as the root's `send` says.
pub(crate) fn scatter_varcount<'a, S, R>(
    comm: &CommData,
    root: Rank,
    send: Option<&S>,
    recv: &mut R,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + Partitioned + ?Sized,
    R: BufferMut + ?Sized,
{
    let root_index = check_root(comm, root, send.is_some(), SCATTER_VARCOUNT_CALL)?;
    let datatype = match send {
        Some(send) => same_type(send.matched().0, recv.matched().0)?,
        None => recv.matched().0,
    };
    let hierarchy = serving(comm, |_| true);
    let form = Form::ScatterVarcount;
    let shape = parted(
        form,
        root_index,
        &hierarchy,
        send.map(sent),
        Some(received(recv)),
    );
    let buffers = match send {
        Some(send) => both(send, recv)?,
        None => receiving(recv)?,
    };
    let recv = &*recv;
    let lists = send.map_or([&[][..]; 2], |send| [send.counts(), send.displs()]);
    Call::parted(comm, shape, &lists, buffers, datatype, true, || {
        let (root, _, outgoing) = check_scatter_varcount(comm, root, send, recv)?;
        let (outgoing, own) = (outgoing.as_deref(), recv.byte_len());
        build::scatter_varcount(ranks(comm), root, outgoing, own, placement(&hierarchy))
    })
}

/// What a scatter of parts of any length's rank calls, for an error where it called the
/// other.
const SCATTER_VARCOUNT_CALL: &str =
    "the root calls scatter_varcount_into_root, the others scatter_varcount_into";

/// Checks a scatter of parts of any length from `root` (`send` is the root's and only the
/// root's); returns the root's index, the elements' type and, on the root, each rank's part
/// of the send buffer (offset, length in packed bytes).
pub(crate) fn check_scatter_varcount<S, R>(
    comm: &CommData,
    root: Rank,
    send: Option<&S>,
    recv: &R,
) -> Result<(u32, Datatype, Option<Parts>), Cause>
where
    S: Buffer + Partitioned + ?Sized,
    R: BufferMut + ?Sized,
{
    let root = check_root(comm, root, send.is_some(), SCATTER_VARCOUNT_CALL)?;
    let Some(send) = send else {
        return Ok((root, recv.matched().0, None));
    };
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let outgoing = byte_parts("send", send, send.count(), send.datatype(), comm.size)?;
    let own = elements(outgoing[root as usize].1, datatype);
    expect_count("the receive buffer", own, recv.matched().1)?;
    Ok((root, datatype, Some(outgoing)))
}

/// The neighbourhood collectives' common step: the call of `form` over `buffers`, whose
/// lists of counts and displacements are `lists`; `parts` checks them and gives the parts of
/// the send and receive buffers (offset, length in bytes) for each of `grid`'s neighbours of
/// this rank, `None` for a send part meaning the whole send buffer.
fn neighbor<'a>(
    comm: &CommData,
    grid: &Grid,
    (form, sides): (Form, Sides),
    lists: &[&[Count]],
    buffers: Buffers,
    datatype: Datatype,
    parts: impl FnOnce() -> Result<(Option<Parts>, Parts), Cause>,
) -> Result<Call<'a>, Cause> {
    let shape = parted(form, 0, &None, sides.send, sides.recv);
    let send_len = buffers.send_len;
    Call::parted(comm, shape, lists, buffers, datatype, true, || {
        let (outgoing, incoming) = parts()?;
        let neighbours = grid.neighbours(comm.rank as Rank);
        let outgoing = match outgoing {
            Some(parts) => build::parts(Region::Send, &parts),
            None => vec![Span::new(Region::Send, 0, send_len); neighbours.len()],
        };
        let incoming = build::parts(Region::Recv, &incoming);
        Ok(build::neighbor_exchange(&neighbours, &outgoing, &incoming))
    })
}

/// How many neighbours each rank of `grid` has: a buffer of a neighbourhood call holds a
/// part per neighbour.
fn neighbours(grid: &Grid) -> u32 {
    2 * grid.num_dimensions() as u32
}

/// A neighbourhood call's form with what its checks read of its buffers.
fn neighbourhood<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    form: Form,
    send: &S,
    recv: &R,
) -> (Form, Sides) {
    let sides = Sides {
        send: Some(sent(send)),
        recv: Some(received(recv)),
    };
    (form, sides)
}

/// `MPI_Neighbor_allgather` on a Cartesian grid.
pub(crate) fn neighbor_all_gather<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    grid: &Grid,
    send: &S,
    recv: &mut R,
) -> Result<Call<'a>, Cause> {
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let k = 2 * grid.num_dimensions();
    expect_count(
        "the receive buffer (a block per neighbour)",
        send.matched().1 * k,
        recv.matched().1,
    )?;
    let form = neighbourhood(Form::NeighborAllGather, send, recv);
    let block = send.byte_len();
    neighbor(comm, grid, form, &[], both(send, recv)?, datatype, || {
        Ok((None, build::equal_parts(block, k as u32)))
    })
}

/// `MPI_Neighbor_allgatherv` on a Cartesian grid.
pub(crate) fn neighbor_all_gather_varcount<'a, S, R>(
    comm: &CommData,
    grid: &Grid,
    send: &S,
    recv: &mut R,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + Partitioned + ?Sized,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let form = neighbourhood(Form::NeighborAllGatherVarcount, send, recv);
    let buffers = both(send, recv)?;
    let recv = &*recv;
    let lists = [recv.counts(), recv.displs()];
    neighbor(comm, grid, form, &lists, buffers, datatype, || {
        let present = grid.neighbours(comm.rank as Rank);
        let incoming = written_byte_parts(
            "receive (a part per neighbour)",
            "neighbour",
            recv,
            recv.count(),
            recv.datatype(),
            neighbours(grid),
            |i| present[i].is_some(),
        )?;
        Ok((None, incoming))
    })
}

/// `MPI_Neighbor_alltoall` on a Cartesian grid.
pub(crate) fn neighbor_all_to_all<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    comm: &CommData,
    grid: &Grid,
    send: &S,
    recv: &mut R,
) -> Result<Call<'a>, Cause> {
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let k = 2 * grid.num_dimensions();
    expect_count("the receive buffer", send.matched().1, recv.matched().1)?;
    let whole_blocks = if k == 0 {
        0
    } else {
        send.matched().1.next_multiple_of(k)
    };
    expect_count(
        "the send buffer (a whole block per neighbour)",
        whole_blocks,
        send.matched().1,
    )?;
    let form = neighbourhood(Form::NeighborAllToAll, send, recv);
    let block = send.byte_len() / k.max(1);
    neighbor(comm, grid, form, &[], both(send, recv)?, datatype, || {
        let parts = build::equal_parts(block, k as u32);
        Ok((Some(parts.clone()), parts))
    })
}

/// `MPI_Neighbor_alltoallv` on a Cartesian grid.
pub(crate) fn neighbor_all_to_all_varcount<'a, S, R>(
    comm: &CommData,
    grid: &Grid,
    send: &S,
    recv: &mut R,
) -> Result<Call<'a>, Cause>
where
    S: Buffer + Partitioned + ?Sized,
    R: BufferMut + Partitioned + ?Sized,
{
    let datatype = same_type(send.matched().0, recv.matched().0)?;
    let form = neighbourhood(Form::NeighborAllToAllVarcount, send, recv);
    let buffers = both(send, recv)?;
    let recv = &*recv;
    let lists = [send.counts(), send.displs(), recv.counts(), recv.displs()];
    neighbor(comm, grid, form, &lists, buffers, datatype, || {
        let outgoing = byte_parts(
            "send (a part per neighbour)",
            send,
            send.count(),
            send.datatype(),
            neighbours(grid),
        )?;
        let present = grid.neighbours(comm.rank as Rank);
        let incoming = written_byte_parts(
            "receive (a part per neighbour)",
            "neighbour",
            recv,
            recv.count(),
            recv.datatype(),
            neighbours(grid),
            |i| present[i].is_some(),
        )?;
        Ok((Some(outgoing), incoming))
    })
}
