//! [`Root`]: the collectives with a root process, called on that process's handle
//! (`world.process_at_rank(root).broadcast_into(...)`), with rsmpi's split between the root's
//! `_root` form and the others' form.

use std::process::Command;

use crate::communicator::{spawn, CommData, Communicator, InterCommunicator, Process, Rank};
use crate::datatype::{Buffer, BufferMut, Datatype};
use crate::error::{or_fatal, Cause, Error, MpiError};
use crate::partition::{Partition, PartitionMut, PartitionedBuffer, PartitionedBufferMut};
use crate::point_to_point::Count;
use crate::request::Scope;

use super::calls::Refused;
use super::op::Operation;
use super::{
    area_or_messages, calls, entered, immediate_from, immediate_into, intra_only,
    received_by_area_or_messages, select, sent_by_area_or_messages, shared, CollectiveRequest,
};

/// The others' side of a rooted call has no buffer of the root's; these name its type.
type NoBuffer = [u8];
type NoParts<'b> = Partition<'b, NoBuffer, Vec<Count>, Vec<Count>>;
type NoPartsMut<'b> = PartitionMut<'b, NoBuffer, Vec<Count>, Vec<Count>>;

/// Something that roots a rooted collective: a [`Process`] of a communicator.
pub trait Root {
    /// The root's rank.
    fn root_rank(&self) -> Rank;

    #[doc(hidden)]
    fn root_comm(&self) -> &CommData;

    /// Starts `maxprocs` processes of `command` joined to this communicator's by an
    /// inter-communicator (`MPI_Comm_spawn`), rooted at this process. mpirt cannot start
    /// processes at run time: after checking the root's arguments (a count below 1, a program
    /// that is not found; MPI reads them at the root only) it returns the same
    /// [`MpiError::Mpirt`] naming the cause on every process of the communicator, which all
    /// call it (it is collective), never a hang. Environment variables set on `command` are
    /// ignored (rsmpi refuses them).
    fn spawn(&self, command: &Command, maxprocs: Rank) -> Result<InterCommunicator, MpiError> {
        spawn::spawn(
            "spawn",
            self.root_comm(),
            self.root_rank(),
            &[command],
            &[maxprocs],
        )
    }

    /// Starts `maxprocs[i]` processes of each `commands[i]`, all joined to this communicator's
    /// by one inter-communicator (`MPI_Comm_spawn_multiple`); the same error as
    /// [`spawn`](Self::spawn), and a named one when the two slices' lengths differ.
    fn spawn_multiple(
        &self,
        commands: &[Command],
        maxprocs: &[Rank],
    ) -> Result<InterCommunicator, MpiError> {
        let commands: Vec<&Command> = commands.iter().collect();
        let (comm, root) = (self.root_comm(), self.root_rank());
        spawn::spawn("spawn_multiple", comm, root, &commands, maxprocs)
    }

    /// The root's `buf` in every process's `buf` (`MPI_Bcast`).
    #[track_caller]
    fn broadcast_into<B: BufferMut + ?Sized>(&self, buf: &mut B) {
        or_fatal(self.try_broadcast_into(buf))
    }
    #[track_caller]
    fn try_broadcast_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        intra_only(comm, "broadcast_into")?;
        let _in = entered(comm, "broadcast_into", Some(root));
        let checked = comm
            .check_rank(root)
            .map_err(|c| Error::new("broadcast_into", c))?;
        let datatype = buf.datatype();
        received_by_area_or_messages(
            comm,
            "broadcast_into",
            buf,
            |bytes| shared::try_broadcast(comm, checked, bytes, datatype),
            |buf| calls::broadcast(comm, root, buf),
        )
    }

    /// A non-root's part of a reduction to the root (`MPI_Reduce`).
    #[track_caller]
    fn reduce_into<S: Buffer + ?Sized, O: Operation>(&self, send: &S, op: O) {
        or_fatal(self.try_reduce_into(send, op))
    }
    #[track_caller]
    fn try_reduce_into<S: Buffer + ?Sized, O: Operation>(
        &self,
        send: &S,
        op: O,
    ) -> Result<(), Error> {
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, "reduce_into", Some(root));
        intra_only(comm, "reduce_into")?;
        let (checked, datatype) = calls::check_reduce(comm, root, send, None::<&NoBuffer>, &op)
            .map_err(refusing_reduce(comm, "reduce_into", root, send, &op))?;
        sent_by_area_or_messages(
            comm,
            "reduce_into",
            send,
            |sent| shared::try_reduce(comm, checked, sent, None, datatype, &op),
            || calls::reduce(comm, root, send, None::<&mut NoBuffer>, &op),
        )
    }

    /// The root's part of a reduction: the reduction of every process's `send` in `recv`.
    #[track_caller]
    fn reduce_into_root<S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        or_fatal(self.try_reduce_into_root(send, recv, op))
    }
    #[track_caller]
    fn try_reduce_into_root<S, R, O>(&self, send: &S, recv: &mut R, op: O) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
        O: Operation,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, "reduce_into_root", Some(root));
        intra_only(comm, "reduce_into_root")?;
        let (checked, datatype) = calls::check_reduce(comm, root, send, Some(&*recv), &op)
            .map_err(refusing_reduce(comm, "reduce_into_root", root, send, &op))?;
        area_or_messages(
            comm,
            "reduce_into_root",
            send,
            recv,
            |sent, got| shared::try_reduce(comm, checked, sent, Some(got), datatype, &op),
            |recv| calls::reduce(comm, root, send, Some(recv), &op),
        )
    }

    /// A non-root's part of a gather (`MPI_Gather`).
    #[track_caller]
    fn gather_into<S: Buffer + ?Sized>(&self, send: &S) {
        or_fatal(self.try_gather_into(send))
    }
    #[track_caller]
    fn try_gather_into<S: Buffer + ?Sized>(&self, send: &S) -> Result<(), Error> {
        const OPERATION: &str = "gather_into";
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, "gather_into", Some(root));
        intra_only(comm, OPERATION)?;
        let (checked, datatype) = calls::check_gather(comm, root, send, None::<&NoBuffer>)
            .map_err(shared::refusing_root(
                comm,
                OPERATION,
                select::gather_in_shared_memory(),
                own(send),
                Refused::Gather {
                    root,
                    block: send.byte_len(),
                },
            ))?;
        sent_by_area_or_messages(
            comm,
            OPERATION,
            send,
            |sent| shared::try_gather(comm, checked, sent, None, datatype),
            || calls::gather(comm, root, send, None::<&mut NoBuffer>),
        )
    }

    /// The root's part of a gather: every process's `send`, in rank order, in `recv`.
    #[track_caller]
    fn gather_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(&self, send: &S, recv: &mut R) {
        or_fatal(self.try_gather_into_root(send, recv))
    }
    #[track_caller]
    fn try_gather_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error> {
        const OPERATION: &str = "gather_into_root";
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, "gather_into_root", Some(root));
        intra_only(comm, OPERATION)?;
        let (checked, datatype) =
            calls::check_gather(comm, root, send, Some(&*recv)).map_err(shared::refusing_root(
                comm,
                OPERATION,
                select::gather_in_shared_memory(),
                own(send),
                Refused::Gather {
                    root,
                    block: send.byte_len(),
                },
            ))?;
        area_or_messages(
            comm,
            OPERATION,
            send,
            recv,
            |sent, got| shared::try_gather(comm, checked, sent, Some(got), datatype),
            |recv| calls::gather(comm, root, send, Some(recv)),
        )
    }

    /// A non-root's part of a gather of parts of any length (`MPI_Gatherv`).
    #[track_caller]
    fn gather_varcount_into<S: Buffer + ?Sized>(&self, send: &S) {
        or_fatal(self.try_gather_varcount_into(send))
    }
    #[track_caller]
    fn try_gather_varcount_into<S: Buffer + ?Sized>(&self, send: &S) -> Result<(), Error> {
        const OPERATION: &str = "gather_varcount_into";
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, OPERATION, Some(root));
        intra_only(comm, OPERATION)?;
        let (checked, datatype, _) =
            calls::check_gather_varcount(comm, root, send, None::<&NoPartsMut>).map_err(
                shared::refusing_root(
                    comm,
                    OPERATION,
                    select::gather_in_shared_memory(),
                    own_kind(send.matched()),
                    Refused::GatherVarcount { root },
                ),
            )?;
        sent_by_area_or_messages(
            comm,
            OPERATION,
            send,
            |sent| shared::try_gather_varcount(comm, checked, sent, None, datatype),
            || calls::gather_varcount(comm, root, send, None::<&mut NoPartsMut>),
        )
    }

    /// The root's part of a gather of parts of any length, placed as `recv` says.
    #[track_caller]
    fn gather_varcount_into_root<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        or_fatal(self.try_gather_varcount_into_root(send, recv))
    }
    #[track_caller]
    fn try_gather_varcount_into_root<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        const OPERATION: &str = "gather_varcount_into_root";
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, OPERATION, Some(root));
        intra_only(comm, OPERATION)?;
        let (checked, datatype, incoming) =
            calls::check_gather_varcount(comm, root, send, Some(&*recv)).map_err(
                shared::refusing_root(
                    comm,
                    OPERATION,
                    select::gather_in_shared_memory(),
                    own_kind(send.matched()),
                    Refused::GatherVarcount { root },
                ),
            )?;
        let incoming = incoming.expect("the root has the parts");
        area_or_messages(
            comm,
            OPERATION,
            send,
            recv,
            |sent, got| {
                let recv = Some((got, &incoming[..]));
                shared::try_gather_varcount(comm, checked, sent, recv, datatype)
            },
            |recv| calls::gather_varcount(comm, root, send, Some(recv)),
        )
    }

    /// A non-root's part of a scatter: its block of the root's buffer in `recv`
    /// (`MPI_Scatter`).
    #[track_caller]
    fn scatter_into<R: BufferMut + ?Sized>(&self, recv: &mut R) {
        or_fatal(self.try_scatter_into(recv))
    }
    #[track_caller]
    fn try_scatter_into<R: BufferMut + ?Sized>(&self, recv: &mut R) -> Result<(), Error> {
        const OPERATION: &str = "scatter_into";
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, "scatter_into", Some(root));
        intra_only(comm, OPERATION)?;
        let (checked, datatype) = calls::check_scatter(comm, root, None::<&NoBuffer>, recv)
            .map_err(shared::refusing_root(
                comm,
                OPERATION,
                select::scatter_in_shared_memory(),
                (recv.matched().0, recv.byte_len()),
                Refused::Scatter {
                    root,
                    block: recv.byte_len(),
                },
            ))?;
        received_by_area_or_messages(
            comm,
            OPERATION,
            recv,
            |got| shared::try_scatter(comm, checked, None, got, datatype),
            |recv| calls::scatter(comm, root, None::<&NoBuffer>, recv),
        )
    }

    /// The root's part of a scatter: block r of `send` goes to process r.
    #[track_caller]
    fn scatter_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(&self, send: &S, recv: &mut R) {
        or_fatal(self.try_scatter_into_root(send, recv))
    }
    #[track_caller]
    fn try_scatter_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error> {
        const OPERATION: &str = "scatter_into_root";
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, "scatter_into_root", Some(root));
        intra_only(comm, OPERATION)?;
        let (checked, datatype) =
            calls::check_scatter(comm, root, Some(send), recv).map_err(shared::refusing_root(
                comm,
                OPERATION,
                select::scatter_in_shared_memory(),
                (recv.matched().0, recv.byte_len()),
                Refused::Scatter {
                    root,
                    block: recv.byte_len(),
                },
            ))?;
        area_or_messages(
            comm,
            OPERATION,
            send,
            recv,
            |sent, got| shared::try_scatter(comm, checked, Some(sent), got, datatype),
            |recv| calls::scatter(comm, root, Some(send), recv),
        )
    }

    /// A non-root's part of a scatter of parts of any length (`MPI_Scatterv`).
    #[track_caller]
    fn scatter_varcount_into<R: BufferMut + ?Sized>(&self, recv: &mut R) {
        or_fatal(self.try_scatter_varcount_into(recv))
    }
    #[track_caller]
    fn try_scatter_varcount_into<R: BufferMut + ?Sized>(&self, recv: &mut R) -> Result<(), Error> {
        const OPERATION: &str = "scatter_varcount_into";
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, OPERATION, Some(root));
        intra_only(comm, OPERATION)?;
        let (checked, datatype, _) =
            calls::check_scatter_varcount(comm, root, None::<&NoParts>, recv).map_err(
                shared::refusing_root(
                    comm,
                    OPERATION,
                    select::scatter_in_shared_memory(),
                    own_kind(recv.matched()),
                    Refused::ScatterVarcount { root },
                ),
            )?;
        received_by_area_or_messages(
            comm,
            OPERATION,
            recv,
            |got| shared::try_scatter_varcount(comm, checked, None, got, datatype),
            |recv| calls::scatter_varcount(comm, root, None::<&NoParts>, recv),
        )
    }

    /// The root's part of a scatter of parts of any length, cut as `send` says.
    #[track_caller]
    fn scatter_varcount_into_root<S, R>(&self, send: &S, recv: &mut R)
    where
        S: PartitionedBuffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        or_fatal(self.try_scatter_varcount_into_root(send, recv))
    }
    #[track_caller]
    fn try_scatter_varcount_into_root<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: PartitionedBuffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const OPERATION: &str = "scatter_varcount_into_root";
        let (comm, root) = (self.root_comm(), self.root_rank());
        let _in = entered(comm, OPERATION, Some(root));
        intra_only(comm, OPERATION)?;
        let (checked, datatype, outgoing) =
            calls::check_scatter_varcount(comm, root, Some(send), recv).map_err(
                shared::refusing_root(
                    comm,
                    OPERATION,
                    select::scatter_in_shared_memory(),
                    own_kind(recv.matched()),
                    Refused::ScatterVarcount { root },
                ),
            )?;
        let outgoing = outgoing.expect("the root has the parts");
        area_or_messages(
            comm,
            OPERATION,
            send,
            recv,
            |sent, got| {
                let send = Some((sent, &outgoing[..]));
                shared::try_scatter_varcount(comm, checked, send, got, datatype)
            },
            |recv| calls::scatter_varcount(comm, root, Some(send), recv),
        )
    }

    /// [`broadcast_into`](Self::broadcast_into) as a request (`MPI_Ibcast`).
    fn immediate_broadcast_into<'a, Sc, B>(
        &self,
        scope: Sc,
        buf: &'a mut B,
    ) -> CollectiveRequest<'a, B, Sc>
    where
        Sc: Scope<'a>,
        B: BufferMut + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        immediate_into(comm, scope, "immediate_broadcast_into", buf, |buf| {
            calls::broadcast(comm, root, buf)
        })
    }

    /// [`reduce_into`](Self::reduce_into) as a request (`MPI_Ireduce`).
    fn immediate_reduce_into<'a, Sc, S, O>(
        &self,
        scope: Sc,
        send: &'a S,
        op: O,
    ) -> CollectiveRequest<'a, S, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        O: Operation + 'a,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        let call = calls::reduce(comm, root, send, None::<&mut NoBuffer>, op);
        immediate_from(comm, scope, "immediate_reduce_into", send, call)
    }

    /// [`reduce_into_root`](Self::reduce_into_root) as a request (`MPI_Ireduce`).
    fn immediate_reduce_into_root<'a, Sc, S, R, O>(
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
        let (comm, root) = (self.root_comm(), self.root_rank());
        immediate_into(comm, scope, "immediate_reduce_into_root", recv, |recv| {
            calls::reduce(comm, root, send, Some(recv), op)
        })
    }

    /// [`gather_into`](Self::gather_into) as a request (`MPI_Igather`).
    fn immediate_gather_into<'a, Sc, S>(
        &self,
        scope: Sc,
        send: &'a S,
    ) -> CollectiveRequest<'a, S, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        let call = calls::gather(comm, root, send, None::<&mut NoBuffer>);
        immediate_from(comm, scope, "immediate_gather_into", send, call)
    }

    /// [`gather_into_root`](Self::gather_into_root) as a request (`MPI_Igather`).
    fn immediate_gather_into_root<'a, Sc, S, R>(
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
        let (comm, root) = (self.root_comm(), self.root_rank());
        immediate_into(comm, scope, "immediate_gather_into_root", recv, |recv| {
            calls::gather(comm, root, send, Some(recv))
        })
    }

    /// [`scatter_into`](Self::scatter_into) as a request (`MPI_Iscatter`).
    fn immediate_scatter_into<'a, Sc, R>(
        &self,
        scope: Sc,
        recv: &'a mut R,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        R: BufferMut + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        immediate_into(comm, scope, "immediate_scatter_into", recv, |recv| {
            calls::scatter(comm, root, None::<&NoBuffer>, recv)
        })
    }

    /// [`scatter_into_root`](Self::scatter_into_root) as a request (`MPI_Iscatter`).
    fn immediate_scatter_into_root<'a, Sc, S, R>(
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
        let (comm, root) = (self.root_comm(), self.root_rank());
        immediate_into(comm, scope, "immediate_scatter_into_root", recv, |recv| {
            calls::scatter(comm, root, Some(send), recv)
        })
    }

    /// [`gather_varcount_into`](Self::gather_varcount_into) as a request (`MPI_Igatherv`).
    fn immediate_gather_varcount_into<'a, Sc, S>(
        &self,
        scope: Sc,
        send: &'a S,
    ) -> CollectiveRequest<'a, S, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        let call = calls::gather_varcount(comm, root, send, None::<&mut NoPartsMut>);
        immediate_from(comm, scope, "immediate_gather_varcount_into", send, call)
    }

    /// [`gather_varcount_into_root`](Self::gather_varcount_into_root) as a request
    /// (`MPI_Igatherv`).
    fn immediate_gather_varcount_into_root<'a, Sc, S, R>(
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
        let (comm, root) = (self.root_comm(), self.root_rank());
        immediate_into(
            comm,
            scope,
            "immediate_gather_varcount_into_root",
            recv,
            |recv| calls::gather_varcount(comm, root, send, Some(recv)),
        )
    }

    /// [`scatter_varcount_into`](Self::scatter_varcount_into) as a request (`MPI_Iscatterv`).
    fn immediate_scatter_varcount_into<'a, Sc, R>(
        &self,
        scope: Sc,
        recv: &'a mut R,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        R: BufferMut + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        immediate_into(
            comm,
            scope,
            "immediate_scatter_varcount_into",
            recv,
            |recv| calls::scatter_varcount(comm, root, None::<&NoParts>, recv),
        )
    }

    /// [`scatter_varcount_into_root`](Self::scatter_varcount_into_root) as a request
    /// (`MPI_Iscatterv`).
    fn immediate_scatter_varcount_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> CollectiveRequest<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: PartitionedBuffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        let (comm, root) = (self.root_comm(), self.root_rank());
        immediate_into(
            comm,
            scope,
            "immediate_scatter_varcount_into_root",
            recv,
            |recv| calls::scatter_varcount(comm, root, Some(send), recv),
        )
    }
}

impl Root for Process<'_> {
    fn root_rank(&self) -> Rank {
        self.rank
    }
    fn root_comm(&self) -> &CommData {
        self.data()
    }
}

/// The refusal of a reduction to `root` of `send` under `op` ([`shared::refusing_hierarchically`]):
/// by messages its root runs its part draining (`calls::drain`), but not where `op` is not
/// defined for `send`'s type: every rank's checks refuse that alike, so no peer takes part
/// for a draining root to wait for. Asked only once the call is refused: a call that passes
/// pays nothing for it.
fn refusing_reduce<'c, S: Buffer + ?Sized, O: Operation>(
    comm: &'c CommData,
    operation: &'static str,
    root: Rank,
    send: &'c S,
    op: &'c O,
) -> impl FnOnce(Cause) -> Error + 'c {
    move |cause| {
        let refused = op.check(send.matched().0).is_ok().then(|| Refused::Reduce {
            root,
            len: send.byte_len(),
            element: send.matched().0.size(),
            commutative: op.is_commutative(),
        });
        shared::refusing_hierarchically(
            comm,
            operation,
            select::reduce_in_shared_memory(),
            own(send),
            op.is_commutative(),
            refused,
        )(cause)
    }
}

/// The type and the byte length of the buffer by which a rooted call's area path goes, for
/// `shared::refusing`.
fn own<B: Buffer + ?Sized>(buf: &B) -> (Datatype, usize) {
    (buf.matched().0, buf.byte_len())
}

/// The type of the buffer by which a rooted call of parts of any length goes (of its type and
/// count, `matched`), for `shared::refusing`, with no length: the ranks' lengths differ, and
/// the area's set-up agrees on none for such calls.
fn own_kind((datatype, _): (Datatype, usize)) -> (Datatype, usize) {
    (datatype, 0)
}
