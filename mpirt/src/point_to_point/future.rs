//! Immediate receives of one value into memory the request owns (rsmpi's `ReceiveFuture`).

use std::mem::{size_of, MaybeUninit};
use std::ptr::NonNull;

use super::raw::raw_receive;
use super::{one_element, Source, Status, Tag};
use crate::datatype::Equivalence;
use crate::error::{fatal, Error};
use crate::request::{Lent, Request, StaticScope};

/// A receive of one `T` in flight (`MPI_Irecv` of one element), made by
/// [`immediate_receive`](Source::immediate_receive): the value lands in memory the future
/// owns, so nothing else needs to stay borrowed. Like a request, it must be finished (`get`,
/// or `try` until it succeeds); dropping it unfinished ends the job.
#[must_use = "a receive future must be finished with get or try"]
pub struct ReceiveFuture<T: Equivalence> {
    /// Taken when the receive finishes. While it is here the messaging layer may write
    /// `value`, so the memory must not be freed: dropping an unfinished request ends the job.
    request: Option<Request<'static, ()>>,
    /// A `Box<MaybeUninit<T>>` turned into a pointer, since the messaging layer writes it
    /// through a pointer of its own while the future moves around.
    value: NonNull<MaybeUninit<T>>,
    /// What the receive was, for the error of a message that is not one `T`.
    operation: String,
}

impl<T: Equivalence> ReceiveFuture<T> {
    pub(super) fn start<P: Source + ?Sized>(
        source: &P,
        tag: Option<Tag>,
    ) -> Result<ReceiveFuture<T>, Error> {
        const WHAT: &str = "immediate receive of one value";
        let operation = source.describe(WHAT, tag);
        let value = NonNull::from(Box::leak(Box::new(MaybeUninit::<T>::uninit())));
        // SAFETY: `value` is a live allocation of one `T`, which this future frees only after
        // the request is taken out finished (see `Drop`); nothing else refers to it meanwhile.
        let started = unsafe {
            raw_receive(
                source,
                StaticScope,
                value.as_ptr().cast::<T>(),
                1,
                tag,
                WHAT,
                Lent::shared(&()),
            )
        };
        match started {
            Ok(request) => Ok(ReceiveFuture {
                request: Some(request),
                value,
                operation,
            }),
            Err(e) => {
                // SAFETY: the receive never started, so the box is ours alone again.
                drop(unsafe { Box::from_raw(value.as_ptr()) });
                Err(e)
            }
        }
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
        if status.byte_count() != size_of::<T>() {
            fatal(Error::new(
                self.operation.as_str(),
                one_element::<T>(status.byte_count()),
            ));
        }
        // SAFETY: the request finished, so nothing writes `value` any more; exactly
        // `size_of::<T>()` bytes arrived and passed `T`'s check, so they make a valid `T`.
        // Read once: the future is consumed by both callers.
        unsafe { self.value.as_ref().assume_init_read() }
    }
}

impl<T: Equivalence> Drop for ReceiveFuture<T> {
    fn drop(&mut self) {
        if let Some(unfinished) = self.request.take() {
            // Ends the job (the messaging layer may still write the value), so the memory
            // below is never freed under it.
            drop(unfinished);
        }
        // SAFETY: `value` came from `Box::leak` in `start`, and the receive is over (its
        // request was taken out finished, or its drop above did not return).
        drop(unsafe { Box::from_raw(self.value.as_ptr()) });
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
