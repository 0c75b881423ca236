//! Collective operations, shaped like rsmpi's: [`CommunicatorCollectives`] on every
//! communicator, [`Root`] on the process that roots a rooted collective.
//!
//! Each call checks its buffers, plans this rank's part of the chosen algorithm (see
//! `select` for the choices and `MPIRT_COLL_*` to force one) and runs the plan. Collective
//! traffic uses negative tags, which no user receive can match, and each call on a
//! communicator takes the next tag of a per-communicator sequence: successive (or overlapping
//! immediate) collectives never take each other's messages, since every rank calls the
//! collectives of a communicator in the same order.

use crate::communicator::{CommData, Communicator, Process, Rank};
use crate::datatype::{Buffer, BufferMut, Datatype};
use crate::error::{or_fatal, Cause, Error};
use crate::partition::{parts, Partition, Partitioned, PartitionedBuffer, PartitionedBufferMut};
use crate::point_to_point::Count;
use crate::request::{Scope, StaticScope};

mod algorithms;
mod build;
mod op;
mod request;
mod schedule;
mod select;

pub use op::{DynBuffer, DynBufferMut, Operation, SystemOperation, UserOperation};
pub use request::CollectiveRequest;

use algorithms::Ranks;
use schedule::{Buffers, Execution, Plan};

/// The collective traits: `use mpirt::collective::traits::*;`.
pub mod traits {
    pub use super::{CommunicatorCollectives, Operation, Root};
}

fn ranks(comm: &CommData) -> Ranks {
    Ranks {
        rank: comm.rank,
        size: comm.size,
    }
}

fn sending<S: Buffer + ?Sized>(send: &S) -> Buffers {
    Buffers {
        send: send.pointer(),
        send_len: send.byte_len(),
        ..Buffers::none()
    }
}

fn receiving<R: BufferMut + ?Sized>(recv: &mut R) -> Buffers {
    Buffers {
        recv_len: recv.byte_len(),
        recv: recv.pointer_mut(),
        ..Buffers::none()
    }
}

fn both<S: Buffer + ?Sized, R: BufferMut + ?Sized>(send: &S, recv: &mut R) -> Buffers {
    Buffers {
        recv_len: recv.byte_len(),
        recv: recv.pointer_mut(),
        ..sending(send)
    }
}

/// The element type of a send and a receive buffer, which must agree.
fn same_type(send: Datatype, recv: Datatype) -> Result<Datatype, Cause> {
    if send == recv {
        Ok(send)
    } else {
        Err(Cause::TypeMismatch {
            send: send.name(),
            receive: recv.name(),
        })
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

/// A count that must split into one equal block per rank.
fn per_rank(what: &'static str, count: usize, size: u32) -> Result<usize, Cause> {
    let size = size as usize;
    expect_count(what, count.next_multiple_of(size), count)?;
    Ok(count / size)
}

/// Each part of a partitioned buffer in bytes.
fn byte_parts<P: Partitioned + ?Sized>(
    what: &'static str,
    partition: &P,
    elements: usize,
    datatype: Datatype,
    size: u32,
) -> Result<Vec<(usize, usize)>, Cause> {
    let element = datatype.size();
    Ok(parts(what, partition, elements, size as usize)?
        .into_iter()
        .map(|(displ, count)| (displ * element, count * element))
        .collect())
}

/// What a collective call runs: its plan over its buffers.
struct Call<'a> {
    plan: Plan,
    buffers: Buffers,
    datatype: Datatype,
    op: Option<Box<dyn Operation + 'a>>,
}

impl<'a> Call<'a> {
    fn new(plan: Plan, buffers: Buffers, datatype: Datatype) -> Self {
        Call {
            plan,
            buffers,
            datatype,
            op: None,
        }
    }

    fn reducing(mut self, op: impl Operation + 'a) -> Self {
        self.op = Some(Box::new(op));
        self
    }

    /// # Safety
    /// The buffers must stay valid (and the receive buffer otherwise untouched) until the
    /// execution is finished or dropped.
    unsafe fn start(self, comm: &CommData) -> Execution<'a> {
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

/// Plans a collective with `prepare` and runs it to the end; errors name `operation`.
fn blocking<'a>(
    comm: &CommData,
    operation: &'static str,
    prepare: impl FnOnce() -> Result<Call<'a>, Cause>,
) -> Result<(), Error> {
    let run = || {
        let call = prepare()?;
        // SAFETY: the buffers are borrowed by the caller for this whole call, which runs the
        // execution to its end (or abandons it, taking back what is in flight) before
        // returning.
        let mut execution = unsafe { call.start(comm) };
        execution.run()
    };
    run().map_err(|cause| Error::new(operation, cause))
}

/// Plans a collective with `prepare` and starts it as a request of `scope`.
fn immediate<'a, Sc: Scope<'a>>(
    comm: &CommData,
    scope: Sc,
    operation: &'static str,
    prepare: impl FnOnce() -> Result<Call<'a>, Cause>,
) -> Result<CollectiveRequest<'a, Sc>, Error> {
    let call = prepare().map_err(|cause| Error::new(operation, cause))?;
    // SAFETY: the buffers are borrowed for 'a, and the scope does not let 'a end before the
    // request completes.
    let execution = unsafe { call.start(comm) };
    Ok(CollectiveRequest::new(execution, scope, operation))
}

/// Collectives over every process of a communicator (rsmpi's `CommunicatorCollectives`).
pub trait CommunicatorCollectives: Communicator {
    /// Waits until every process of the communicator has called `barrier`.
    fn barrier(&self) {
        or_fatal(self.try_barrier())
    }
    fn try_barrier(&self) -> Result<(), Error> {
        let comm = self.data();
        blocking(comm, "barrier", || {
            Ok(Call::new(
                build::barrier(ranks(comm)),
                Buffers::none(),
                Datatype::plain(0, "none"),
            ))
        })
    }

    /// Every process's `send` in rank order, in every process's `recv` (`MPI_Allgather`).
    fn all_gather_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(&self, send: &S, recv: &mut R) {
        or_fatal(self.try_all_gather_into(send, recv))
    }
    fn try_all_gather_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error> {
        let comm = self.data();
        blocking(comm, "all_gather_into", || {
            let datatype = same_type(send.datatype(), recv.datatype())?;
            let n = comm.size as usize;
            expect_count("the receive buffer", send.count() * n, recv.count())?;
            let plan = build::all_gather(ranks(comm), send.byte_len())?;
            Ok(Call::new(plan, both(send, recv), datatype))
        })
    }

    /// Like [`all_gather_into`](Self::all_gather_into) with parts of any length, placed as
    /// `recv`'s counts and displacements say (`MPI_Allgatherv`).
    fn all_gather_varcount_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        or_fatal(self.try_all_gather_varcount_into(send, recv))
    }
    fn try_all_gather_varcount_into<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        let comm = self.data();
        blocking(comm, "all_gather_varcount_into", || {
            let datatype = same_type(send.datatype(), recv.datatype())?;
            let incoming = byte_parts("receive", recv, recv.count(), datatype, comm.size)?;
            let own = incoming[comm.rank as usize].1;
            expect_count(
                "the send buffer",
                own / datatype.size().max(1),
                send.count(),
            )?;
            let plan = build::all_gather_varcount(ranks(comm), &incoming);
            Ok(Call::new(plan, both(send, recv), datatype))
        })
    }

    /// Block r of every process's `send` goes to process r, which keeps it as block s of its
    /// `recv` for the sender s (`MPI_Alltoall`).
    fn all_to_all_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(&self, send: &S, recv: &mut R) {
        or_fatal(self.try_all_to_all_into(send, recv))
    }
    fn try_all_to_all_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error> {
        let comm = self.data();
        blocking(comm, "all_to_all_into", || {
            let datatype = same_type(send.datatype(), recv.datatype())?;
            expect_count("the receive buffer", send.count(), recv.count())?;
            let block = per_rank("the send buffer", send.count(), comm.size)? * datatype.size();
            let equal = build::equal_parts(block, comm.size);
            let plan = build::all_to_all(ranks(comm), &equal, &equal, block)?;
            Ok(Call::new(plan, both(send, recv), datatype))
        })
    }

    /// All-to-all with parts of any length (`MPI_Alltoallv`).
    fn all_to_all_varcount_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: PartitionedBuffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        or_fatal(self.try_all_to_all_varcount_into(send, recv))
    }
    fn try_all_to_all_varcount_into<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: PartitionedBuffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        let comm = self.data();
        blocking(comm, "all_to_all_varcount_into", || {
            let datatype = same_type(send.datatype(), recv.datatype())?;
            let outgoing = byte_parts("send", send, send.count(), datatype, comm.size)?;
            let incoming = byte_parts("receive", recv, recv.count(), datatype, comm.size)?;
            let me = comm.rank as usize;
            expect_count(
                "this rank's receive part from itself",
                outgoing[me].1 / datatype.size().max(1),
                incoming[me].1 / datatype.size().max(1),
            )?;
            let largest = outgoing.iter().map(|p| p.1).max().unwrap_or(0);
            let plan = build::all_to_all(ranks(comm), &outgoing, &incoming, largest)?;
            Ok(Call::new(plan, both(send, recv), datatype))
        })
    }

    /// The reduction under `op` of every process's `send`, in every process's `recv`
    /// (`MPI_Allreduce`).
    fn all_reduce_into<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_all_reduce_into(send, recv, op))
    }
    fn try_all_reduce_into<S, R, O>(&self, send: &S, recv: &mut R, op: O) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        let comm = self.data();
        blocking(comm, "all_reduce_into", || {
            let plan = plan_all_reduce(comm, send, recv, &op)?;
            Ok(Call::new(plan, both(send, recv), send.datatype()).reducing(&op))
        })
    }

    /// Block r of the reduction of every process's `send` in process r's `recv`
    /// (`MPI_Reduce_scatter_block`).
    fn reduce_scatter_block_into<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_reduce_scatter_block_into(send, recv, op))
    }
    fn try_reduce_scatter_block_into<S, R, O>(
        &self,
        send: &S,
        recv: &mut R,
        op: O,
    ) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        let comm = self.data();
        blocking(comm, "reduce_scatter_block_into", || {
            let datatype = same_type(send.datatype(), recv.datatype())?;
            op.check(datatype)?;
            let n = comm.size as usize;
            expect_count("the send buffer", recv.count() * n, send.count())?;
            let parts = build::equal_parts(recv.byte_len(), comm.size);
            let plan =
                build::reduce_scatter(ranks(comm), send.byte_len(), &parts, op.is_commutative())?;
            Ok(Call::new(plan, both(send, recv), datatype).reducing(&op))
        })
    }

    /// Part r of the reduction of every process's `send` in process r's `recv`, the parts cut
    /// by `counts` (`MPI_Reduce_scatter`; not in rsmpi).
    fn reduce_scatter_into<S, R, O>(&self, send: &S, recv: &mut R, counts: &[Count], op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_reduce_scatter_into(send, recv, counts, op))
    }
    fn try_reduce_scatter_into<S, R, O>(
        &self,
        send: &S,
        recv: &mut R,
        counts: &[Count],
        op: O,
    ) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        let comm = self.data();
        blocking(comm, "reduce_scatter_into", || {
            let datatype = same_type(send.datatype(), recv.datatype())?;
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
            let parts = byte_parts("counts", &cut, send.count(), datatype, comm.size)?;
            let total: usize = parts.iter().map(|p| p.1).sum();
            expect_count(
                "the send buffer",
                total / datatype.size().max(1),
                send.count(),
            )?;
            let own = parts[comm.rank as usize].1 / datatype.size().max(1);
            expect_count("the receive buffer", own, recv.count())?;
            let plan = build::reduce_scatter(ranks(comm), total, &parts, op.is_commutative())?;
            Ok(Call::new(plan, both(send, recv), datatype).reducing(&op))
        })
    }

    /// The reduction of the `send` of processes 0 to this one, in `recv` (`MPI_Scan`).
    fn scan_into<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_scan_into(send, recv, op))
    }
    fn try_scan_into<S, R, O>(&self, send: &S, recv: &mut R, op: O) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        scan(self.data(), "scan_into", send, recv, &op, true)
    }

    /// The reduction of the `send` of the processes before this one, in `recv`; process 0's
    /// `recv` is left as it was (`MPI_Exscan`).
    fn exclusive_scan_into<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_exclusive_scan_into(send, recv, op))
    }
    fn try_exclusive_scan_into<S, R, O>(&self, send: &S, recv: &mut R, op: O) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        scan(self.data(), "exclusive_scan_into", send, recv, &op, false)
    }

    /// A barrier that completes when waited on or tested (`MPI_Ibarrier`).
    fn immediate_barrier(&self) -> CollectiveRequest<'static> {
        let comm = self.data();
        or_fatal(immediate(comm, StaticScope, "immediate_barrier", || {
            Ok(Call::new(
                build::barrier(ranks(comm)),
                Buffers::none(),
                Datatype::plain(0, "none"),
            ))
        }))
    }

    /// [`all_reduce_into`](Self::all_reduce_into) as a request (`MPI_Iallreduce`).
    fn immediate_all_reduce_into<'a, Sc, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> CollectiveRequest<'a, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation + 'a,
    {
        let comm = self.data();
        or_fatal(immediate(comm, scope, "immediate_all_reduce_into", || {
            let plan = plan_all_reduce(comm, send, recv, &op)?;
            Ok(Call::new(plan, both(send, recv), send.datatype()).reducing(op))
        }))
    }

    /// [`all_gather_into`](Self::all_gather_into) as a request (`MPI_Iallgather`).
    fn immediate_all_gather_into<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> CollectiveRequest<'a, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        let comm = self.data();
        or_fatal(immediate(comm, scope, "immediate_all_gather_into", || {
            let datatype = same_type(send.datatype(), recv.datatype())?;
            let n = comm.size as usize;
            expect_count("the receive buffer", send.count() * n, recv.count())?;
            let plan = build::all_gather(ranks(comm), send.byte_len())?;
            Ok(Call::new(plan, both(send, recv), datatype))
        }))
    }
}

impl<C: Communicator + ?Sized> CommunicatorCollectives for C {}

fn plan_all_reduce<S, R, O>(comm: &CommData, send: &S, recv: &R, op: &O) -> Result<Plan, Cause>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    let datatype = same_type(send.datatype(), recv.datatype())?;
    op.check(datatype)?;
    expect_count("the receive buffer", send.count(), recv.count())?;
    build::all_reduce(
        ranks(comm),
        send.byte_len(),
        datatype.size(),
        op.is_commutative(),
    )
}

fn scan<S, R, O>(
    comm: &CommData,
    operation: &'static str,
    send: &S,
    recv: &mut R,
    op: &O,
    inclusive: bool,
) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    blocking(comm, operation, || {
        let datatype = same_type(send.datatype(), recv.datatype())?;
        op.check(datatype)?;
        expect_count("the receive buffer", send.count(), recv.count())?;
        let plan = build::scan(ranks(comm), send.byte_len(), inclusive);
        Ok(Call::new(plan, both(send, recv), datatype).reducing(op))
    })
}

/// Something that roots a rooted collective: a [`Process`] of a communicator.
pub trait Root {
    /// The root's rank.
    fn root_rank(&self) -> Rank;

    #[doc(hidden)]
    fn root_comm(&self) -> &CommData;

    /// The root's `buf` in every process's `buf` (`MPI_Bcast`).
    fn broadcast_into<B: BufferMut + ?Sized>(&self, buf: &mut B) {
        or_fatal(self.try_broadcast_into(buf))
    }
    fn try_broadcast_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank() as u32);
        blocking(comm, "broadcast_into", || {
            let plan = build::broadcast(ranks(comm), root, buf.byte_len(), buf.datatype().size())?;
            Ok(Call::new(plan, receiving(buf), buf.datatype()))
        })
    }

    /// [`broadcast_into`](Self::broadcast_into) as a request (`MPI_Ibcast`).
    fn immediate_broadcast_into<'a, Sc, B>(
        &self,
        scope: Sc,
        buf: &'a mut B,
    ) -> CollectiveRequest<'a, Sc>
    where
        Sc: Scope<'a>,
        B: BufferMut + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank() as u32);
        or_fatal(immediate(comm, scope, "immediate_broadcast_into", || {
            let plan = build::broadcast(ranks(comm), root, buf.byte_len(), buf.datatype().size())?;
            Ok(Call::new(plan, receiving(buf), buf.datatype()))
        }))
    }

    /// A non-root's part of a reduction to the root (`MPI_Reduce`).
    fn reduce_into<S: Buffer + ?Sized, O: Operation>(&self, send: &S, op: O) {
        or_fatal(self.try_reduce_into(send, op))
    }
    fn try_reduce_into<S: Buffer + ?Sized, O: Operation>(
        &self,
        send: &S,
        op: O,
    ) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "reduce_into", || {
            not_root(
                comm,
                root,
                "reduce_into is for the other ranks; the root calls reduce_into_root",
            )?;
            op.check(send.datatype())?;
            let plan = build::reduce(
                ranks(comm),
                root as u32,
                send.byte_len(),
                op.is_commutative(),
            );
            Ok(Call::new(plan, sending(send), send.datatype()).reducing(&op))
        })
    }

    /// The root's part of a reduction: the reduction of every process's `send` in `recv`.
    fn reduce_into_root<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_reduce_into_root(send, recv, op))
    }
    fn try_reduce_into_root<S, R, O>(&self, send: &S, recv: &mut R, op: O) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "reduce_into_root", || {
            is_root(
                comm,
                root,
                "reduce_into_root is for the root; the others call reduce_into",
            )?;
            let datatype = same_type(send.datatype(), recv.datatype())?;
            op.check(datatype)?;
            expect_count("the receive buffer", send.count(), recv.count())?;
            let plan = build::reduce(
                ranks(comm),
                root as u32,
                send.byte_len(),
                op.is_commutative(),
            );
            Ok(Call::new(plan, both(send, recv), datatype).reducing(&op))
        })
    }

    /// A non-root's part of a gather (`MPI_Gather`).
    fn gather_into<S: Buffer + ?Sized>(&self, send: &S) {
        or_fatal(self.try_gather_into(send))
    }
    fn try_gather_into<S: Buffer + ?Sized>(&self, send: &S) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "gather_into", || {
            not_root(
                comm,
                root,
                "gather_into is for the other ranks; the root calls gather_into_root",
            )?;
            let plan = build::gather(ranks(comm), root as u32, send.byte_len())?;
            Ok(Call::new(plan, sending(send), send.datatype()))
        })
    }

    /// The root's part of a gather: every process's `send`, in rank order, in `recv`.
    fn gather_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(&self, send: &S, recv: &mut R) {
        or_fatal(self.try_gather_into_root(send, recv))
    }
    fn try_gather_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "gather_into_root", || {
            is_root(
                comm,
                root,
                "gather_into_root is for the root; the others call gather_into",
            )?;
            let datatype = same_type(send.datatype(), recv.datatype())?;
            let n = comm.size as usize;
            expect_count("the receive buffer", send.count() * n, recv.count())?;
            let plan = build::gather(ranks(comm), root as u32, send.byte_len())?;
            Ok(Call::new(plan, both(send, recv), datatype))
        })
    }

    /// A non-root's part of a gather of parts of any length (`MPI_Gatherv`).
    fn gather_varcount_into<S: Buffer + ?Sized>(&self, send: &S) {
        or_fatal(self.try_gather_varcount_into(send))
    }
    fn try_gather_varcount_into<S: Buffer + ?Sized>(&self, send: &S) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "gather_varcount_into", || {
            not_root(
                comm,
                root,
                "gather_varcount_into is for the other ranks; the root calls \
                 gather_varcount_into_root",
            )?;
            let plan = build::gather_varcount(root as u32, send.byte_len(), None);
            Ok(Call::new(plan, sending(send), send.datatype()))
        })
    }

    /// The root's part of a gather of parts of any length, placed as `recv` says.
    fn gather_varcount_into_root<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        or_fatal(self.try_gather_varcount_into_root(send, recv))
    }
    fn try_gather_varcount_into_root<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "gather_varcount_into_root", || {
            is_root(
                comm,
                root,
                "gather_varcount_into_root is for the root; the others call gather_varcount_into",
            )?;
            let datatype = same_type(send.datatype(), recv.datatype())?;
            let incoming = byte_parts("receive", recv, recv.count(), datatype, comm.size)?;
            let own = incoming[root as usize].1;
            expect_count(
                "the send buffer",
                own / datatype.size().max(1),
                send.count(),
            )?;
            let plan = build::gather_varcount(root as u32, send.byte_len(), Some(&incoming));
            Ok(Call::new(plan, both(send, recv), datatype))
        })
    }

    /// A non-root's part of a scatter: its block of the root's buffer in `recv`
    /// (`MPI_Scatter`).
    fn scatter_into<R: BufferMut + ?Sized>(&self, recv: &mut R) {
        or_fatal(self.try_scatter_into(recv))
    }
    fn try_scatter_into<R: BufferMut + ?Sized>(&self, recv: &mut R) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "scatter_into", || {
            not_root(
                comm,
                root,
                "scatter_into is for the other ranks; the root calls scatter_into_root",
            )?;
            let plan = build::scatter(ranks(comm), root as u32, recv.byte_len())?;
            Ok(Call::new(plan, receiving(recv), recv.datatype()))
        })
    }

    /// The root's part of a scatter: block r of `send` goes to process r.
    fn scatter_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(&self, send: &S, recv: &mut R) {
        or_fatal(self.try_scatter_into_root(send, recv))
    }
    fn try_scatter_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "scatter_into_root", || {
            is_root(
                comm,
                root,
                "scatter_into_root is for the root; the others call scatter_into",
            )?;
            let datatype = same_type(send.datatype(), recv.datatype())?;
            let n = comm.size as usize;
            expect_count("the send buffer", recv.count() * n, send.count())?;
            let plan = build::scatter(ranks(comm), root as u32, recv.byte_len())?;
            Ok(Call::new(plan, both(send, recv), datatype))
        })
    }

    /// A non-root's part of a scatter of parts of any length (`MPI_Scatterv`).
    fn scatter_varcount_into<R: BufferMut + ?Sized>(&self, recv: &mut R) {
        or_fatal(self.try_scatter_varcount_into(recv))
    }
    fn try_scatter_varcount_into<R: BufferMut + ?Sized>(&self, recv: &mut R) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "scatter_varcount_into", || {
            not_root(
                comm,
                root,
                "scatter_varcount_into is for the other ranks; the root calls \
                 scatter_varcount_into_root",
            )?;
            let plan = build::scatter_varcount(root as u32, None, recv.byte_len());
            Ok(Call::new(plan, receiving(recv), recv.datatype()))
        })
    }

    /// The root's part of a scatter of parts of any length, cut as `send` says.
    fn scatter_varcount_into_root<S, R>(&self, send: &S, recv: &mut R)
    where
        S: PartitionedBuffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        or_fatal(self.try_scatter_varcount_into_root(send, recv))
    }
    fn try_scatter_varcount_into_root<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: PartitionedBuffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        blocking(comm, "scatter_varcount_into_root", || {
            is_root(
                comm,
                root,
                "scatter_varcount_into_root is for the root; the others call \
                 scatter_varcount_into",
            )?;
            let datatype = same_type(send.datatype(), recv.datatype())?;
            let outgoing = byte_parts("send", send, send.count(), datatype, comm.size)?;
            let own = outgoing[root as usize].1;
            expect_count(
                "the receive buffer",
                own / datatype.size().max(1),
                recv.count(),
            )?;
            let plan = build::scatter_varcount(root as u32, Some(&outgoing), recv.byte_len());
            Ok(Call::new(plan, both(send, recv), datatype))
        })
    }
}

fn is_root(comm: &CommData, root: Rank, call: &'static str) -> Result<(), Cause> {
    comm.check_rank(root)?;
    if comm.rank as Rank == root {
        Ok(())
    } else {
        Err(Cause::WrongRootCall { root, call })
    }
}

fn not_root(comm: &CommData, root: Rank, call: &'static str) -> Result<(), Cause> {
    comm.check_rank(root)?;
    if comm.rank as Rank != root {
        Ok(())
    } else {
        Err(Cause::WrongRootCall { root, call })
    }
}

impl Root for Process<'_> {
    fn root_rank(&self) -> Rank {
        self.rank
    }
    fn root_comm(&self) -> &CommData {
        self.comm
    }
}
