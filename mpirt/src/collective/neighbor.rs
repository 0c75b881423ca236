//! MPI 3's neighbourhood collectives on Cartesian communicators (beyond rsmpi): every process
//! exchanges with its grid neighbours only, in the order MPI fixes: for each dimension, the
//! source then the destination of a shift by 1 (`2 * num_dimensions()` neighbours, the part
//! of a neighbour past a non-periodic edge left untouched, as for `MPI_PROC_NULL`).

use crate::communicator::{CartesianCommunicator, Communicator};
use crate::datatype::{Buffer, BufferMut};
use crate::error::{or_fatal, Error};
use crate::partition::{PartitionedBuffer, PartitionedBufferMut};
use crate::request::{Lent, Scope};

use super::{blocking, calls, immediate, CollectiveRequest};

impl CartesianCommunicator {
    /// This process's `send` to each neighbour, whose `send`s land in `recv` one block per
    /// neighbour, in neighbour order (`MPI_Neighbor_allgather`). Collective.
    pub fn neighbor_all_gather_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        or_fatal(self.try_neighbor_all_gather_into(send, recv))
    }
    pub fn try_neighbor_all_gather_into<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        let (comm, grid) = (self.data(), self.grid());
        blocking(comm, "neighbor_all_gather_into", || {
            calls::neighbor_all_gather(comm, grid, send, recv)
        })
    }

    /// [`neighbor_all_gather_into`](Self::neighbor_all_gather_into) with parts of any length,
    /// placed as `recv`'s counts and displacements (one per neighbour) say
    /// (`MPI_Neighbor_allgatherv`).
    pub fn neighbor_all_gather_varcount_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        or_fatal(self.try_neighbor_all_gather_varcount_into(send, recv))
    }
    pub fn try_neighbor_all_gather_varcount_into<S, R>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        let (comm, grid) = (self.data(), self.grid());
        blocking(comm, "neighbor_all_gather_varcount_into", || {
            calls::neighbor_all_gather_varcount(comm, grid, send, recv)
        })
    }

    /// Block i of `send` to neighbour i, whose block for this process lands in block i of
    /// `recv` (`MPI_Neighbor_alltoall`). Collective.
    pub fn neighbor_all_to_all_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        or_fatal(self.try_neighbor_all_to_all_into(send, recv))
    }
    pub fn try_neighbor_all_to_all_into<S, R>(&self, send: &S, recv: &mut R) -> Result<(), Error>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        let (comm, grid) = (self.data(), self.grid());
        blocking(comm, "neighbor_all_to_all_into", || {
            calls::neighbor_all_to_all(comm, grid, send, recv)
        })
    }

    /// [`neighbor_all_to_all_into`](Self::neighbor_all_to_all_into) with parts of any length
    /// (`MPI_Neighbor_alltoallv`).
    pub fn neighbor_all_to_all_varcount_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: PartitionedBuffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        or_fatal(self.try_neighbor_all_to_all_varcount_into(send, recv))
    }
    pub fn try_neighbor_all_to_all_varcount_into<S, R>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<(), Error>
    where
        S: PartitionedBuffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        let (comm, grid) = (self.data(), self.grid());
        blocking(comm, "neighbor_all_to_all_varcount_into", || {
            calls::neighbor_all_to_all_varcount(comm, grid, send, recv)
        })
    }

    /// [`neighbor_all_gather_into`](Self::neighbor_all_gather_into) as a request
    /// (`MPI_Ineighbor_allgather`).
    pub fn immediate_neighbor_all_gather_into<'a, Sc, S, R>(
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
        let (comm, grid) = (self.data(), self.grid());
        let (data, call) = Lent::exclusive(recv, |recv| {
            calls::neighbor_all_gather(comm, grid, send, recv)
        });
        let operation = "immediate_neighbor_all_gather_into";
        or_fatal(immediate(comm, scope, operation, data, call))
    }

    /// [`neighbor_all_gather_varcount_into`](Self::neighbor_all_gather_varcount_into) as a
    /// request (`MPI_Ineighbor_allgatherv`).
    pub fn immediate_neighbor_all_gather_varcount_into<'a, Sc, S, R>(
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
        let (comm, grid) = (self.data(), self.grid());
        let (data, call) = Lent::exclusive(recv, |recv| {
            calls::neighbor_all_gather_varcount(comm, grid, send, recv)
        });
        let operation = "immediate_neighbor_all_gather_varcount_into";
        or_fatal(immediate(comm, scope, operation, data, call))
    }

    /// [`neighbor_all_to_all_into`](Self::neighbor_all_to_all_into) as a request
    /// (`MPI_Ineighbor_alltoall`).
    pub fn immediate_neighbor_all_to_all_into<'a, Sc, S, R>(
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
        let (comm, grid) = (self.data(), self.grid());
        let (data, call) = Lent::exclusive(recv, |recv| {
            calls::neighbor_all_to_all(comm, grid, send, recv)
        });
        let operation = "immediate_neighbor_all_to_all_into";
        or_fatal(immediate(comm, scope, operation, data, call))
    }

    /// [`neighbor_all_to_all_varcount_into`](Self::neighbor_all_to_all_varcount_into) as a
    /// request (`MPI_Ineighbor_alltoallv`).
    pub fn immediate_neighbor_all_to_all_varcount_into<'a, Sc, S, R>(
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
        let (comm, grid) = (self.data(), self.grid());
        let (data, call) = Lent::exclusive(recv, |recv| {
            calls::neighbor_all_to_all_varcount(comm, grid, send, recv)
        });
        let operation = "immediate_neighbor_all_to_all_varcount_into";
        or_fatal(immediate(comm, scope, operation, data, call))
    }
}
