//! The combined send-receive (`MPI_Sendrecv`, `MPI_Sendrecv_replace`).

use std::mem::MaybeUninit;

use pml::{Pml, SendMode};

use super::{
    finish_receive, one_element, post_receive, post_send, tag_selector, wait_handle, Destination,
    Outgoing, RecvSlot, Source, Status, Tag,
};
use crate::datatype::{datatype_of, Buffer, BufferMut, Equivalence};
use crate::environment::{self, with_engine};
use crate::error::{or_fatal, Cause, Error};

/// A receive posted before the send of a send-receive, so that two ranks exchanging with each
/// other never wait on each other's send.
fn exchange<M, D, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Option<Tag>,
    slot: Result<RecvSlot, Cause>,
) -> Result<Status, Error>
where
    M: Buffer + ?Sized,
    D: Destination,
    S: Source,
{
    let operation = || {
        format!(
            "{}, {}",
            destination.describe_send("send-receive", sendtag),
            source.describe("receive", receivetag)
        )
    };
    let fail = |c| Error::new(operation(), c);
    let mut slot = slot.map_err(fail)?;
    let tag = tag_selector(receivetag).map_err(fail)?;
    // SAFETY: the slot's buffer is borrowed by the caller for this whole call, and the receive
    // completes (or is cancelled and collected) before it returns.
    let recv = unsafe {
        post_receive(
            source.source_comm(),
            source.source_selector(),
            tag,
            &mut slot,
        )
    }
    .map_err(fail)?;
    let sent = Outgoing::to_send(msg).and_then(|mut out| {
        // SAFETY: `msg` and `out` live for this whole call, which waits for the send.
        unsafe {
            post_send(
                destination.destination_comm(),
                destination.destination_rank(),
                sendtag,
                SendMode::Standard,
                &mut out,
            )
        }
        .and_then(wait_handle)
    });
    if let Err(c) = sent {
        // The receive must not outlive the caller's buffer.
        let _ = with_engine(|e| e.cancel(recv)).and_then(|_| environment::wait(recv));
        return Err(fail(c));
    }
    finish_receive(recv, slot).map_err(fail)
}

/// Sends `msg` to `destination` and receives one value from `source` (`MPI_Sendrecv`).
pub fn send_receive<R, M, D, S>(msg: &M, destination: &D, source: &S) -> (R, Status)
where
    R: Equivalence,
    M: Buffer + ?Sized,
    D: Destination,
    S: Source,
{
    exchange_one(msg, destination, 0, source, None)
}

/// As [`send_receive`], with tags.
pub fn send_receive_with_tags<R, M, D, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> (R, Status)
where
    R: Equivalence,
    M: Buffer + ?Sized,
    D: Destination,
    S: Source,
{
    exchange_one(msg, destination, sendtag, source, Some(receivetag))
}

fn exchange_one<R, M, D, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Option<Tag>,
) -> (R, Status)
where
    R: Equivalence,
    M: Buffer + ?Sized,
    D: Destination,
    S: Source,
{
    // Zeroed: the padding of a struct with a layout is not received.
    let mut value = MaybeUninit::<R>::zeroed();
    let datatype = datatype_of::<R>();
    // SAFETY: `value` is valid for writes of one `R`, one element's span, and outlives the
    // blocking exchange.
    let slot = unsafe { RecvSlot::new(value.as_mut_ptr().cast(), datatype.size(), datatype) };
    let status = or_fatal(exchange(
        msg,
        destination,
        sendtag,
        source,
        receivetag,
        slot,
    ));
    if status.bytes != datatype.size() {
        or_fatal(Err(Error::new(
            source.describe("send-receive", receivetag),
            one_element::<R>(status.bytes),
        )))
    }
    // SAFETY: exactly one element arrived and passed `R`'s check; bytes outside its layout
    // (padding) are zero.
    (unsafe { value.assume_init() }, status)
}

/// Sends `msg` to `destination` and receives into `buf` from `source`.
pub fn send_receive_into<M, D, B, S>(msg: &M, destination: &D, buf: &mut B, source: &S) -> Status
where
    M: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    S: Source,
{
    or_fatal(exchange(
        msg,
        destination,
        0,
        source,
        None,
        RecvSlot::for_buffer(buf),
    ))
}

/// As [`send_receive_into`], with tags.
pub fn send_receive_into_with_tags<M, D, B, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    buf: &mut B,
    source: &S,
    receivetag: Tag,
) -> Status
where
    M: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    S: Source,
{
    let slot = RecvSlot::for_buffer(buf);
    or_fatal(exchange(
        msg,
        destination,
        sendtag,
        source,
        Some(receivetag),
        slot,
    ))
}

/// Sends the contents of `buf` to `destination` and replaces them with a message from
/// `source` (`MPI_Sendrecv_replace`).
pub fn send_receive_replace_into<B, D, S>(buf: &mut B, destination: &D, source: &S) -> Status
where
    B: Buffer + BufferMut + ?Sized,
    D: Destination,
    S: Source,
{
    replace(buf, destination, 0, source, None)
}

/// As [`send_receive_replace_into`], with tags.
pub fn send_receive_replace_into_with_tags<B, D, S>(
    buf: &mut B,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> Status
where
    B: Buffer + BufferMut + ?Sized,
    D: Destination,
    S: Source,
{
    replace(buf, destination, sendtag, source, Some(receivetag))
}

fn replace<B, D, S>(
    buf: &mut B,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Option<Tag>,
) -> Status
where
    B: Buffer + BufferMut + ?Sized,
    D: Destination,
    S: Source,
{
    // What goes out is the elements' packed values (a layout with gaps sends neither its
    // padding nor the bytes between its blocks), copied because the receive lands in `buf`.
    let packed = Outgoing::of(buf).map(|out| out.bytes().to_vec());
    let operation = || destination.describe_send("send-receive-replace", sendtag);
    let outgoing: Vec<u8> = or_fatal(packed.map_err(|c| Error::new(operation(), c)));
    or_fatal(exchange(
        &outgoing[..],
        destination,
        sendtag,
        source,
        receivetag,
        RecvSlot::for_buffer(buf),
    ))
}
