//! Buffered-mode sends (`MPI_Bsend`): the message is copied out and the call returns at once,
//! whether or not a receive matches it yet. The copies count against the space the program
//! attached with [`Universe::set_buffer_size`](crate::Universe::set_buffer_size): a send that
//! does not fit is an error, as in MPI, so that a program that floods a slow receiver finds
//! out instead of growing without bound.

use std::cell::RefCell;

use pml::{Handle, SendMode};

use super::{post_send, wait_handle, Rank, Tag};
use crate::communicator::CommData;
use crate::datatype::Buffer;
use crate::environment::with_engine;
use crate::error::{or_fatal, Cause, Error};

/// A copy in flight, freed (and its space given back) when its send completes.
struct InFlight {
    handle: Handle,
    /// Read by the messaging layer until the send completes; never touched here.
    copy: Box<[u8]>,
    dest: Rank,
    tag: Tag,
}

#[derive(Default)]
struct Attached {
    capacity: usize,
    used: usize,
    in_flight: Vec<InFlight>,
}

thread_local! {
    static ATTACHED: RefCell<Attached> = RefCell::new(Attached::default());
}

/// Copies `buf` out and sends the copy to `dest`; returns once it is copied. A send that
/// completes at once (a small one the transport took) gives its space back at once.
pub(super) fn send<B: Buffer + ?Sized>(
    comm: &CommData,
    dest: Rank,
    tag: Tag,
    buf: &B,
) -> Result<(), Cause> {
    let bytes = buf.byte_len();
    ATTACHED.with(|attached| {
        let mut attached = attached.borrow_mut();
        reap(&mut attached)?;
        let free = attached.capacity - attached.used;
        if bytes > free {
            return Err(Cause::BufferFull {
                needed: bytes,
                free,
                capacity: attached.capacity,
            });
        }
        // SAFETY: `Buffer` makes the pointer valid for `byte_len()` bytes while `buf` is
        // borrowed, which it is for this call.
        let copy: Box<[u8]> = unsafe { std::slice::from_raw_parts(buf.pointer(), bytes) }.into();
        // SAFETY: the copy lives on the heap, where moving its box does not move it, and it
        // is kept in `in_flight` until its send completes (`reap`, `detach`).
        let handle = unsafe { post_send(comm, dest, tag, SendMode::Standard, &copy[..]) }?;
        if handle != Handle::SENT {
            attached.used += bytes;
            attached.in_flight.push(InFlight {
                handle,
                copy,
                dest,
                tag,
            });
        }
        Ok(())
    })
}

/// Frees the copies whose sends completed. A send that failed is that send's error.
fn reap(attached: &mut Attached) -> Result<(), Cause> {
    let mut i = 0;
    while i < attached.in_flight.len() {
        let handle = attached.in_flight[i].handle;
        if with_engine(|e| e.test(handle))?.is_some() {
            let done = attached.in_flight.swap_remove(i);
            attached.used -= done.copy.len();
        } else {
            i += 1;
        }
    }
    Ok(())
}

/// Waits for every buffered send in flight, then attaches `capacity` bytes (0: none). Ends
/// the job if one of those sends failed, naming it.
pub(crate) fn reattach(capacity: usize) {
    ATTACHED.with(|attached| {
        let mut attached = attached.borrow_mut();
        for sent in std::mem::take(&mut attached.in_flight) {
            or_fatal(wait_handle(sent.handle).map(drop).map_err(|cause| {
                Error::new(
                    format!("buffered send to rank {} (tag {})", sent.dest, sent.tag),
                    cause,
                )
            }));
        }
        *attached = Attached {
            capacity,
            ..Attached::default()
        };
    });
}

/// The bytes attached for buffered sends.
pub(crate) fn capacity() -> usize {
    ATTACHED.with(|attached| attached.borrow().capacity)
}
