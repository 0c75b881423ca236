//! Buffered-mode sends (`MPI_Bsend`): the message is copied out and the call returns at once,
//! whether or not a receive matches it yet. The copies count against the space the program
//! attached with [`Universe::set_buffer_size`](crate::Universe::set_buffer_size): a send that
//! does not fit is an error, as in MPI, so that a program that floods a slow receiver finds
//! out instead of growing without bound.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use pml::{Done, Handle, Pml, SendMode};

use super::{post_send, send_description, wait_handle, Outgoing, Rank, Tag};
use crate::communicator::CommData;
use crate::datatype::Buffer;
use crate::environment::with_engine;
use crate::error::{fatal, or_fatal, Cause, Error};
use crate::request::Request;

/// How long finalize waits, once every rank has reached it, for buffered sends still in
/// flight: a receive posted before finalize completes its send within microseconds (its
/// acknowledgement is on the way); after that no receive can be posted any more.
const FINALIZE_GRACE: Duration = Duration::from_secs(2);

/// A copy in flight, freed (and its space given back) when its send completes.
struct InFlight {
    handle: Handle,
    /// Read by the messaging layer until the send completes; never touched here.
    copy: Box<[u8]>,
    dest: Rank,
    tag: Tag,
}

impl InFlight {
    fn describe(&self) -> String {
        send_description("buffered send", self.dest, self.tag)
    }
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
/// completes at once (a small one the transport took) gives its space back at once. The
/// error of an earlier buffered send that failed comes back here, naming that send.
pub(super) fn send<B: Buffer + ?Sized>(
    comm: &CommData,
    dest: Rank,
    tag: Tag,
    buf: &B,
    what: &str,
) -> Result<(), Error> {
    let own_error = |cause| Error::new(send_description(what, dest, tag), cause);
    let out = Outgoing::of(buf).map_err(own_error)?;
    let bytes = out.bytes().len();
    ATTACHED.with(|attached| {
        let mut attached = attached.borrow_mut();
        reap(&mut attached)?;
        let free = attached.capacity - attached.used;
        if bytes > free {
            return Err(own_error(Cause::BufferFull {
                needed: bytes,
                free,
                capacity: attached.capacity,
            }));
        }
        let copy: Box<[u8]> = out.bytes().into();
        let handle = Outgoing::of(&copy[..])
            .and_then(|mut out| {
                // SAFETY: the copy lives on the heap, where moving its box does not move it,
                // and it is kept in `in_flight` until its send completes (`reap`, `reattach`,
                // `finish_at_finalize`); `out` only points into it. If posting fails, no send
                // was left reading it.
                unsafe { post_send(comm, dest, tag, SendMode::Standard, &mut out) }
            })
            .map_err(own_error)?;
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

/// Frees the copies whose sends completed. A send that failed is taken out (the engine no
/// longer reads its copy once it reported it) and its error returned.
fn reap(attached: &mut Attached) -> Result<(), Error> {
    reap_by(attached, |handle| with_engine(|e| e.test(handle)))
}

/// [`reap`], with `test` telling whether a send finished (the engine's `test`).
fn reap_by(
    attached: &mut Attached,
    mut test: impl FnMut(Handle) -> Result<Option<Done>, Cause>,
) -> Result<(), Error> {
    let mut i = 0;
    while i < attached.in_flight.len() {
        let handle = attached.in_flight[i].handle;
        match test(handle) {
            Ok(None) => i += 1,
            finished => {
                let done = attached.in_flight.swap_remove(i);
                attached.used -= done.copy.len();
                finished.map_err(|cause| Error::new(done.describe(), cause))?;
            }
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
            or_fatal(
                wait_handle(sent.handle)
                    .map(drop)
                    .map_err(|cause| Error::new(sent.describe(), cause)),
            );
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

/// Whether buffered sends are in flight.
pub(crate) fn any_in_flight() -> bool {
    ATTACHED.with(|attached| {
        let mut attached = attached.borrow_mut();
        // A failure ends the job here: finalize has nobody else to report it to.
        or_fatal(reap(&mut attached));
        !attached.in_flight.is_empty()
    })
}

/// Finalize's wait for the buffered sends in flight, alongside `barrier` (the world's), which
/// finishes once every rank has reached finalize. A send still unfinished
/// [`FINALIZE_GRACE`] after that was never received (MPI calls such a program erroneous):
/// the job ends naming it rather than waiting for ever.
pub(crate) fn finish_at_finalize(barrier: Request<'static, ()>) {
    let mut barrier = Some(barrier);
    let mut everyone_since = None;
    while any_in_flight() {
        if let Some(pending) = barrier.take() {
            match pending.test() {
                Ok(_) => everyone_since = Some(Instant::now()),
                Err(pending) => barrier = Some(pending),
            }
        }
        if everyone_since.is_some_and(|since: Instant| since.elapsed() > FINALIZE_GRACE) {
            fatal(Error::new("finalize", Cause::Unreceived(unreceived())));
        }
        std::thread::yield_now();
    }
    if let Some(pending) = barrier {
        pending.wait();
    }
}

/// What is still in flight, for the error of a finalize that cannot finish it.
fn unreceived() -> String {
    ATTACHED.with(|attached| {
        let attached = attached.borrow();
        format!(
            "{} buffered send(s) of {} bytes in all never received (the first: {}); every rank \
             has reached finalize, so none can be",
            attached.in_flight.len(),
            attached.used,
            attached.in_flight[0].describe()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_send_is_its_own_error_and_gives_its_space_back() {
        let copy = |bytes: usize, dest: Rank, tag: Tag| InFlight {
            handle: Handle::SENT,
            copy: vec![0u8; bytes].into(),
            dest,
            tag,
        };
        let mut attached = Attached {
            capacity: 1000,
            used: 300,
            in_flight: vec![copy(100, 1, 6), copy(200, 2, 7)],
        };
        let mut tests = 0;
        let e = reap_by(&mut attached, |_| {
            tests += 1;
            if tests == 1 {
                Err(Cause::NotInitialized)
            } else {
                Ok(None)
            }
        })
        .unwrap_err();
        assert_eq!(e.operation(), "buffered send to rank 1 (tag 6)");
        assert!(matches!(e.cause(), Cause::NotInitialized));
        assert_eq!(attached.used, 200);
        assert_eq!(attached.in_flight.len(), 1);
        assert_eq!(
            (attached.in_flight[0].dest, attached.in_flight[0].tag),
            (2, 7)
        );
        reap_by(&mut attached, |_| Ok(Some(Done::Sent))).unwrap();
        assert_eq!((attached.used, attached.in_flight.len()), (0, 0));
    }
}
