//! [`CommunicatorCollectives`]: the collectives every process of a communicator takes part in
//! alike (rsmpi's trait of that name).

use crate::communicator::{inter, CommData, Communicator};
use crate::datatype::{Buffer, BufferMut};
use crate::error::{or_fatal, Error};
use crate::partition::{PartitionedBuffer, PartitionedBufferMut};
use crate::point_to_point::Count;
use crate::request::{Scope, StaticScope};

use super::op::Operation;
use super::{
    area_or_messages, blocking, calls, entered, immediate_from, immediate_into, intra_only, select,
    shared, CollectiveRequest,
};

/// Collectives over every process of a communicator. Each has a `try_` form that returns the
/// error (a buffer that does not fit, an operation not defined for the type, ...) instead of
/// ending the job, and the common ones an immediate form, a request that progresses when
/// tested or waited on.
pub trait CommunicatorCollectives: Communicator {
    /// Waits until every process of the communicator has called `barrier`.
    #[track_caller]
    fn barrier(&self) {
        or_fatal(self.try_barrier())
    }
    #[track_caller]
    fn try_barrier(&self) -> Result<(), Error> {
        let comm = self.data();
        let _in = entered(comm, "barrier", None);
        if comm.is_inter() {
            return inter::barrier(comm);
        }
        if shared::try_barrier(comm)? {
            return Ok(());
        }
        blocking(comm, "barrier", || calls::barrier(comm))
    }

    /// Every process's `send` in rank order, in every process's `recv` (`MPI_Allgather`).
    #[track_caller]
    fn all_gather_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(&self, send: &S, recv: &mut R) {
        or_fatal(self.try_all_gather_into(send, recv))
    }
    #[track_caller]
    fn try_all_gather_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error> {
        let comm = self.data();
        let _in = entered(comm, "all_gather_into", None);
        if comm.is_inter() {
            return inter::all_gather(comm, send, recv);
        }
        all_gather_on(comm, send, recv)
    }

    /// Like [`all_gather_into`](Self::all_gather_into) with parts of any length, placed as
    /// `recv`'s counts and displacements say (`MPI_Allgatherv`).
    #[track_caller]
    fn all_gather_varcount_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        or_fatal(self.try_all_gather_varcount_into(send, recv))
    }
    #[track_caller]
    fn try_all_gather_varcount_into<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        const OPERATION: &str = "all_gather_varcount_into";
        let comm = self.data();
        intra_only(comm, OPERATION)?;
        let _in = entered(comm, OPERATION, None);
        // Lengths differ between ranks: the area's set-up agrees on none for this call.
        let (datatype, incoming) =
            calls::check_all_gather_varcount(comm, send, recv).map_err(shared::refusing(
                comm,
                OPERATION,
                select::allgather_in_shared_memory(),
                (send.matched().0, 0),
            ))?;
        area_or_messages(
            comm,
            OPERATION,
            send,
            recv,
            |sent, got| shared::try_all_gather_varcount(comm, sent, got, &incoming, datatype),
            |recv| calls::all_gather_varcount(comm, send, recv),
        )
    }

    /// Block r of every process's `send` goes to process r, which keeps it as block s of its
    /// `recv` for the sender s (`MPI_Alltoall`).
    #[track_caller]
    fn all_to_all_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(&self, send: &S, recv: &mut R) {
        or_fatal(self.try_all_to_all_into(send, recv))
    }
    #[track_caller]
    fn try_all_to_all_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error> {
        const OPERATION: &str = "all_to_all_into";
        let comm = self.data();
        let _in = entered(comm, OPERATION, None);
        if comm.is_inter() {
            return inter::all_to_all(comm, send, recv);
        }
        let datatype = calls::check_all_to_all(comm, send, recv).map_err(shared::refusing(
            comm,
            OPERATION,
            select::alltoall_in_shared_memory(),
            (send.matched().0, send.byte_len()),
        ))?;
        area_or_messages(
            comm,
            OPERATION,
            send,
            recv,
            |sent, got| shared::try_all_to_all(comm, sent, got, datatype),
            |recv| calls::all_to_all(comm, send, recv),
        )
    }

    /// All-to-all with parts of any length (`MPI_Alltoallv`).
    #[track_caller]
    fn all_to_all_varcount_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: PartitionedBuffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        or_fatal(self.try_all_to_all_varcount_into(send, recv))
    }
    #[track_caller]
    fn try_all_to_all_varcount_into<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: PartitionedBuffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        const OPERATION: &str = "all_to_all_varcount_into";
        let comm = self.data();
        intra_only(comm, OPERATION)?;
        let _in = entered(comm, OPERATION, None);
        // Lengths differ between ranks: the area's set-up agrees on none for this call.
        let (datatype, outgoing, incoming) = calls::check_all_to_all_varcount(comm, send, recv)
            .map_err(shared::refusing(
                comm,
                OPERATION,
                select::alltoall_in_shared_memory(),
                (send.matched().0, 0),
            ))?;
        area_or_messages(
            comm,
            OPERATION,
            send,
            recv,
            |sent, got| {
                shared::try_all_to_all_varcount(comm, sent, got, &outgoing, &incoming, datatype)
            },
            |recv| calls::all_to_all_varcount(comm, send, recv),
        )
    }

    /// The reduction under `op` of every process's `send`, in every process's `recv`
    /// (`MPI_Allreduce`).
    #[track_caller]
    fn all_reduce_into<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_all_reduce_into(send, recv, op))
    }
    #[track_caller]
    fn try_all_reduce_into<S, R, O>(&self, send: &S, recv: &mut R, op: O) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        let comm = self.data();
        let _in = entered(comm, "all_reduce_into", None);
        if comm.is_inter() {
            return inter::all_reduce(comm, send, recv, op);
        }
        all_reduce_on(comm, send, recv, op)
    }

    /// Block r of the reduction of every process's `send` in process r's `recv`
    /// (`MPI_Reduce_scatter_block`).
    #[track_caller]
    fn reduce_scatter_block_into<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_reduce_scatter_block_into(send, recv, op))
    }
    #[track_caller]
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
        reduce_scatter_on(
            self.data(),
            "reduce_scatter_block_into",
            send,
            recv,
            None,
            op,
        )
    }

    /// Part r of the reduction of every process's `send` in process r's `recv`, the parts cut
    /// by `counts` (`MPI_Reduce_scatter`; not in rsmpi).
    #[track_caller]
    fn reduce_scatter_into<S, R, O>(&self, send: &S, recv: &mut R, counts: &[Count], op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_reduce_scatter_into(send, recv, counts, op))
    }
    #[track_caller]
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
        let counts = Some(counts);
        reduce_scatter_on(self.data(), "reduce_scatter_into", send, recv, counts, op)
    }

    /// The reduction of the `send` of processes 0 to this one, in `recv` (`MPI_Scan`).
    #[track_caller]
    fn scan_into<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_scan_into(send, recv, op))
    }
    #[track_caller]
    fn try_scan_into<S, R, O>(&self, send: &S, recv: &mut R, op: O) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        let comm = self.data();
        blocking(comm, "scan_into", || {
            calls::scan(comm, send, recv, &op, true)
        })
    }

    /// The reduction of the `send` of the processes before this one, in `recv`; process 0's
    /// `recv` is left as it was (`MPI_Exscan`).
    #[track_caller]
    fn exclusive_scan_into<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_exclusive_scan_into(send, recv, op))
    }
    #[track_caller]
    fn try_exclusive_scan_into<S, R, O>(&self, send: &S, recv: &mut R, op: O) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        let comm = self.data();
        blocking(comm, "exclusive_scan_into", || {
            calls::scan(comm, send, recv, &op, false)
        })
    }

    /// A barrier that completes when waited on or tested (`MPI_Ibarrier`).
    fn immediate_barrier(&self) -> CollectiveRequest<'static, ()> {
        let comm = self.data();
        immediate_from(
            comm,
            StaticScope,
            "immediate_barrier",
            &(),
            calls::barrier(comm),
        )
    }

    /// [`all_gather_into`](Self::all_gather_into) as a request (`MPI_Iallgather`).
    fn immediate_all_gather_into<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        let comm = self.data();
        immediate_into(comm, scope, "immediate_all_gather_into", recv, |recv| {
            calls::all_gather(comm, send, recv)
        })
    }

    /// [`all_to_all_into`](Self::all_to_all_into) as a request (`MPI_Ialltoall`).
    fn immediate_all_to_all_into<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        let comm = self.data();
        immediate_into(comm, scope, "immediate_all_to_all_into", recv, |recv| {
            calls::all_to_all(comm, send, recv)
        })
    }

    /// [`all_gather_varcount_into`](Self::all_gather_varcount_into) as a request
    /// (`MPI_Iallgatherv`).
    fn immediate_all_gather_varcount_into<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        let comm = self.data();
        immediate_into(
            comm,
            scope,
            "immediate_all_gather_varcount_into",
            recv,
            |recv| calls::all_gather_varcount(comm, send, recv),
        )
    }

    /// [`all_to_all_varcount_into`](Self::all_to_all_varcount_into) as a request
    /// (`MPI_Ialltoallv`).
    fn immediate_all_to_all_varcount_into<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: PartitionedBuffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        let comm = self.data();
        immediate_into(
            comm,
            scope,
            "immediate_all_to_all_varcount_into",
            recv,
            |recv| calls::all_to_all_varcount(comm, send, recv),
        )
    }

    /// [`all_reduce_into`](Self::all_reduce_into) as a request (`MPI_Iallreduce`).
    fn immediate_all_reduce_into<'a, Sc, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation + 'a,
    {
        let comm = self.data();
        immediate_into(comm, scope, "immediate_all_reduce_into", recv, |recv| {
            calls::all_reduce(comm, send, recv, op)
        })
    }

    /// [`reduce_scatter_block_into`](Self::reduce_scatter_block_into) as a request
    /// (`MPI_Ireduce_scatter_block`).
    fn immediate_reduce_scatter_block_into<'a, Sc, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation + 'a,
    {
        let comm = self.data();
        immediate_into(
            comm,
            scope,
            "immediate_reduce_scatter_block_into",
            recv,
            |recv| calls::reduce_scatter(comm, send, recv, None, op),
        )
    }

    /// [`reduce_scatter_into`](Self::reduce_scatter_into) as a request
    /// (`MPI_Ireduce_scatter`; not in rsmpi). The counts are read when the call starts.
    fn immediate_reduce_scatter_into<'a, Sc, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        counts: &[Count],
        op: O,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation + 'a,
    {
        let comm = self.data();
        immediate_into(comm, scope, "immediate_reduce_scatter_into", recv, |recv| {
            calls::reduce_scatter(comm, send, recv, Some(counts), op)
        })
    }

    /// [`scan_into`](Self::scan_into) as a request (`MPI_Iscan`).
    fn immediate_scan_into<'a, Sc, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation + 'a,
    {
        let comm = self.data();
        immediate_into(comm, scope, "immediate_scan_into", recv, |recv| {
            calls::scan(comm, send, recv, op, true)
        })
    }

    /// [`exclusive_scan_into`](Self::exclusive_scan_into) as a request (`MPI_Iexscan`).
    fn immediate_exclusive_scan_into<'a, Sc, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation + 'a,
    {
        let comm = self.data();
        immediate_into(comm, scope, "immediate_exclusive_scan_into", recv, |recv| {
            calls::scan(comm, send, recv, op, false)
        })
    }
}

impl<C: Communicator + ?Sized> CommunicatorCollectives for C {}

/// [`CommunicatorCollectives::try_all_gather_into`] on a communicator's data: what the runtime
/// itself runs while it makes communicators.
#[track_caller]
pub(crate) fn all_gather_on<S, R>(comm: &CommData, send: &S, recv: &mut R) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
{
    const OPERATION: &str = "all_gather_into";
    let _in = entered(comm, OPERATION, None);
    let datatype =
        calls::check_all_gather(comm, send, recv).map_err(shared::refusing_hierarchically(
            comm,
            OPERATION,
            select::allgather_in_shared_memory(),
            (send.matched().0, send.byte_len()),
            true,
            None,
        ))?;
    area_or_messages(
        comm,
        OPERATION,
        send,
        recv,
        |sent, got| shared::try_all_gather(comm, sent, got, datatype),
        |recv| calls::all_gather(comm, send, recv),
    )
}

/// [`CommunicatorCollectives::try_all_reduce_into`] on a communicator's data.
#[track_caller]
pub(crate) fn all_reduce_on<S, R, O>(
    comm: &CommData,
    send: &S,
    recv: &mut R,
    op: O,
) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    const OPERATION: &str = "all_reduce_into";
    let _in = entered(comm, OPERATION, None);
    let datatype =
        calls::check_all_reduce(send, recv, &op).map_err(shared::refusing_hierarchically(
            comm,
            OPERATION,
            select::allreduce_in_shared_memory(),
            (send.matched().0, send.byte_len()),
            op.is_commutative(),
            None,
        ))?;
    area_or_messages(
        comm,
        OPERATION,
        send,
        recv,
        |sent, got| shared::try_all_reduce(comm, sent, got, datatype, &op),
        |recv| calls::all_reduce_checked(comm, send, recv, &op, datatype),
    )
}

/// A blocking reduce-scatter (`operation`) into parts of `counts[r]` elements, equal blocks
/// when `counts` is `None`: through the shared-memory area where it serves, else by
/// messages.
#[track_caller]
fn reduce_scatter_on<S, R, O>(
    comm: &CommData,
    operation: &'static str,
    send: &S,
    recv: &mut R,
    counts: Option<&[Count]>,
    op: O,
) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    // Before the argument checks, which count by this group's size alone.
    intra_only(comm, operation)?;
    let _in = entered(comm, operation, None);
    let (datatype, own) = calls::check_reduce_scatter_part(comm, send, recv, counts, &op).map_err(
        shared::refusing(
            comm,
            operation,
            select::reduce_scatter_in_shared_memory(),
            (send.matched().0, send.byte_len()),
        ),
    )?;
    area_or_messages(
        comm,
        operation,
        send,
        recv,
        |sent, got| shared::try_reduce_scatter(comm, operation, (sent, own), got, datatype, &op),
        |recv| calls::reduce_scatter(comm, send, recv, counts, &op),
    )
}
