//! Immediate receives of one value into memory the request owns (rsmpi's `ReceiveFuture`).

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use super::raw::raw_receive;
use super::{one_element, Source, Status, Tag};
use crate::datatype::{datatype_of, Equivalence};
use crate::error::{fatal, Cause, Error};
use crate::request::{end_job_over_unfinished, Lent, Request, StaticScope};

/// A receive of one `T` in flight (`MPI_Irecv` of one element), made by
/// [`immediate_receive`](Source::immediate_receive): the value lands in memory the future
/// owns, so nothing else needs to stay borrowed. Like a request, it must be finished (`get`,
/// or `try` until it succeeds); dropping it unfinished ends the job.
#[must_use = "a receive future must be finished with get or try"]
pub struct ReceiveFuture<T: Equivalence> {
    /// Taken when the receive finishes. While it is here the messaging layer may write into
    /// `room`, so the room must not be freed: dropping the future then ends the job.
    request: Option<Request<'static, ()>>,
    room: Room<T>,
    /// What the receive was, for its errors.
    operation: String,
}

impl<T: Equivalence> ReceiveFuture<T> {
    pub(super) fn start<P: Source + ?Sized>(
        source: &P,
        tag: Option<Tag>,
    ) -> Result<ReceiveFuture<T>, Error> {
        const WHAT: &str = "immediate receive of one value";
        let operation = source.describe(WHAT, tag);
        let room = Room::new();
        // SAFETY: the room holds one `T` and is freed only after the request is taken out
        // finished (see `Drop`); nothing else refers to it meanwhile. If the receive does not
        // start, nothing was left writing it.
        let request = unsafe {
            raw_receive(
                source,
                StaticScope,
                room.ptr.as_ptr(),
                1,
                tag,
                WHAT,
                Lent::shared(&()),
            )
        }?;
        Ok(ReceiveFuture {
            request: Some(request),
            room,
            operation,
        })
    }

    /// Waits for the value (rsmpi's `get`). A message that does not hold exactly one `T`
    /// ends the job, saying both lengths.
    pub fn get(mut self) -> (T, Status) {
        let request = self.request.take().expect("an unfinished receive");
        let status = request.wait();
        (self.take_value(status), status)
    }

    /// The value if it has arrived, else the future back (rsmpi's `try`).
    // rsmpi's shape: the unfinished future comes back by value.
    #[allow(clippy::result_large_err)]
    pub fn r#try(mut self) -> Result<(T, Status), Self> {
        let request = self.request.take().expect("an unfinished receive");
        match request.test() {
            Ok(status) => Ok((self.take_value(status), status)),
            Err(request) => {
                self.request = Some(request);
                Err(self)
            }
        }
    }

    /// The received value, once the request finished with `status`.
    fn take_value(&mut self, status: Status) -> T {
        if status.byte_count() != datatype_of::<T>().size() {
            fatal(Error::new(
                self.operation.as_str(),
                one_element::<T>(status.byte_count()),
            ));
        }
        // SAFETY: the request finished, so nothing writes the room any more; exactly one
        // element arrived, into every byte of `T`'s layout, and passed `T`'s check, so they
        // make a valid `T` (padding outside the layout need not be initialized).
        // Read once: both callers consume the future.
        unsafe { self.room.ptr.as_ptr().read() }
    }
}

impl<T: Equivalence> Drop for ReceiveFuture<T> {
    fn drop(&mut self) {
        if self.request.is_some() {
            // The messaging layer may still write the room, which is freed after this.
            end_job_over_unfinished(Error::new(self.operation.as_str(), Cause::DroppedFuture));
        }
    }
}

/// Heap room for one `T`, made without building a `T` anywhere first (a large `T` built on
/// the stack could overflow it). Freeing it drops no `T`: a value read out is its reader's.
struct Room<T> {
    ptr: NonNull<T>,
    capacity: usize,
}

impl<T> Room<T> {
    fn new() -> Room<T> {
        let mut vec = ManuallyDrop::new(Vec::<T>::with_capacity(1));
        Room {
            ptr: NonNull::new(vec.as_mut_ptr()).expect("a Vec's pointer is never null"),
            capacity: vec.capacity(),
        }
    }
}

impl<T> Drop for Room<T> {
    fn drop(&mut self) {
        // SAFETY: pointer and capacity are those of the `Vec` that `new` kept from dropping,
        // and length 0 holds: no `T` in the room belongs to it.
        drop(unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), 0, self.capacity) });
    }
}

impl<T: Equivalence> std::fmt::Debug for ReceiveFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiveFuture")
            .field("operation", &self.operation)
            .field("finished", &self.request.is_none())
            .finish()
    }
}
