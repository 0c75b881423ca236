//! Messages taken by a matched probe, and their receives (`MPI_Mprobe` / `MPI_Mrecv`).

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use pml::{SourceSel, Started};

use super::{
    finish_receive, one_element, post_matched_receive, receive_matched_into, receive_matched_vec,
    RecvSlot, Status,
};
use crate::backend::MessageHandle;
use crate::communicator::{CommData, Rank};
use crate::datatype::{datatype_of, BufferMut, Equivalence};
use crate::error::{or_fatal, Error};
use crate::request::{Lent, Request, Scope};

/// A message taken out of matching by a matched probe: only this handle can receive it.
/// Dropping it unreceived leaves the message queued forever (as `MPI_Mprobe` does).
#[derive(Debug)]
pub struct Message {
    pub(super) handle: MessageHandle,
    pub(super) status: pml::Status,
    /// The engine rank (world, or joined by a bridge) of the sender: the PML may choose how
    /// the message lands in a layout's blocks by the sender's transport.
    pub(super) from: Option<u32>,
    _not_send: PhantomData<*const ()>,
}

impl Message {
    /// The message a matched probe on `comm` took (`status.source` a rank of `comm`).
    pub(super) fn new(
        handle: MessageHandle,
        status: pml::Status,
        comm: &CommData,
    ) -> (Message, Status) {
        let message = Message {
            handle,
            status,
            from: comm.target(status.source as Rank).ok(),
            _not_send: PhantomData,
        };
        (message, Status::from_pml(status))
    }

    fn describe(&self) -> String {
        format!(
            "matched receive from rank {} (tag {})",
            self.status.source, self.status.tag
        )
    }

    /// Whether the probe's source was the null process (`MPI_MESSAGE_NO_PROC`, as rsmpi
    /// asks): no source a program can name here is (rsmpi's `Process` and `AnyProcess` are
    /// the only ones, as here), so a message is always a real one.
    pub fn is_no_proc(&self) -> bool {
        false
    }

    /// Receives the message as one value (`MPI_Mrecv`).
    pub fn matched_receive<T: Equivalence>(self) -> (T, Status) {
        or_fatal(self.try_matched_receive())
    }

    pub fn try_matched_receive<T: Equivalence>(self) -> Result<(T, Status), Error> {
        let operation = self.describe();
        let datatype = datatype_of::<T>();
        if self.status.len != datatype.size() {
            return Err(Error::new(operation, one_element::<T>(self.status.len)));
        }
        // Zeroed: the padding of a struct with a layout is not received.
        let mut value = MaybeUninit::<T>::zeroed();
        // SAFETY: `value` is valid for writes of one `T`, one element's span, and outlives the
        // blocking receive.
        let mut slot =
            unsafe { RecvSlot::new(value.as_mut_ptr().cast(), datatype.size(), datatype) }
                .map_err(|c| Error::new(operation.clone(), c))?;
        // SAFETY: as above; the receive completes before this function returns.
        let status = unsafe { post_matched_receive(self.handle, self.from, &mut slot) }
            .and_then(|h| finish_receive(h, slot))
            .map_err(|c| Error::new(operation, c))?;
        // SAFETY: exactly one element arrived and passed `T`'s check.
        Ok((unsafe { value.assume_init() }, status))
    }

    /// Receives the message into `buf`.
    pub fn matched_receive_into<B: BufferMut + ?Sized>(self, buf: &mut B) -> Status {
        or_fatal(self.try_matched_receive_into(buf))
    }

    pub fn try_matched_receive_into<B: BufferMut + ?Sized>(
        self,
        buf: &mut B,
    ) -> Result<Status, Error> {
        let operation = self.describe();
        receive_matched_into(self.handle, self.from, buf).map_err(|c| Error::new(operation, c))
    }

    /// Starts receiving the message into `buf`, which stays lent to the request until it
    /// completes (`MPI_Imrecv`).
    pub fn immediate_matched_receive_into<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        self,
        scope: S,
        buf: &'a mut B,
    ) -> Request<'a, B, S> {
        or_fatal(self.try_immediate_matched_receive_into(scope, buf))
    }

    pub fn try_immediate_matched_receive_into<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        self,
        scope: S,
        buf: &'a mut B,
    ) -> Result<Request<'a, B, S>, Error> {
        let operation = self.describe();
        let (handle, status, from) = (self.handle, self.status, self.from);
        let (data, slot) = Lent::exclusive(buf, |buf| RecvSlot::for_buffer(buf));
        let mut slot = slot.map_err(|c| Error::new(operation.clone(), c))?;
        // SAFETY: the request keeps `buf` lent for `'a`, and the scope does not end before the
        // request completes.
        let posted = unsafe { post_matched_receive(handle, from, &mut slot) }
            .map_err(|c| Error::new(operation, c))?;
        Ok(Request::receive(
            Started::Posted(posted),
            slot,
            data,
            scope,
            SourceSel::Rank(status.source),
            Some(status.tag),
        ))
    }

    /// Receives the message into a new vector of the right length.
    pub fn matched_receive_vec<T: Equivalence>(self) -> (Vec<T>, Status) {
        or_fatal(self.try_matched_receive_vec())
    }

    pub fn try_matched_receive_vec<T: Equivalence>(self) -> Result<(Vec<T>, Status), Error> {
        let operation = self.describe();
        receive_matched_vec(self.handle, self.status, self.from)
            .map_err(|c| Error::new(operation, c))
    }
}

/// rsmpi's receive of a matched probe's message into a vector, on the pair the probe returns:
/// `process.matched_probe().matched_receive_vec::<T>()`.
pub trait MatchedReceiveVec {
    /// Receives the message into a new vector of the right length.
    fn matched_receive_vec<Msg: Equivalence>(self) -> (Vec<Msg>, Status);
}

impl MatchedReceiveVec for (Message, Status) {
    fn matched_receive_vec<Msg: Equivalence>(self) -> (Vec<Msg>, Status) {
        self.0.matched_receive_vec()
    }
}
