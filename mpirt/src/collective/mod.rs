//! Collective operations, shaped like rsmpi's: [`CommunicatorCollectives`] on every
//! communicator, [`Root`] on the process that roots a rooted collective.
//!
//! Each call checks its buffers, plans this rank's part of the chosen algorithm (see `select`
//! for the choices and `MPIRT_COLL_*` to force one) and runs the plan; blocking barriers, and
//! short blocking broadcasts, reductions, all-reductions, all-gathers, all-to-alls, gathers,
//! scatters and reduce-scatters, among ranks of one host go through a shared-memory area
//! instead (`shared`). Collective traffic uses negative tags,
//! which no user receive can match, and each call on a communicator takes the next tag of a
//! per-communicator sequence: successive (or overlapping immediate) collectives never take
//! each other's messages, since every rank calls the collectives of a communicator in the same
//! order.

use crate::communicator::{CommData, Rank};
use crate::datatype::{Buffer, BufferMut};
use crate::error::{or_fatal, Cause, Error};
use crate::point_to_point::Outgoing;
use crate::request::{Lent, Request, Scope, StaticScope};
use crate::stall;

mod algorithms;
mod all;
mod build;
mod calls;
mod hierarchy;
mod neighbor;
mod op;
mod plans;
pub(crate) mod progress;
pub(crate) mod request;
mod root;
mod schedule;
mod select;
mod shared;

pub use all::CommunicatorCollectives;
pub(crate) use all::{all_gather_on, all_reduce_on};
pub(crate) use calls::{check_all_reduce, check_inter_all_gather, check_inter_all_to_all};
pub(crate) use hierarchy::Hosts;
pub use op::{
    DynBuffer, DynBufferMut, Operation, SystemOperation, UnsafeUserFunction, UnsafeUserOperation,
    UserOperation,
};
pub(crate) use plans::Plans;
pub use root::Root;

use calls::Call;
pub(crate) use shared::{over_packed, verbose, AreaSlot};

/// The request of an immediate collective: a [`Request`] like those
/// of point-to-point operations, so that both kinds go into the same `wait_any`, `wait_all`
/// and `test_any` (and collections) when their buffers have the same type.
pub type CollectiveRequest<'a, D, S = StaticScope> = crate::request::Request<'a, D, S>;

/// The collective traits: `use mpirt::collective::traits::*;`.
pub mod traits {
    pub use super::{CommunicatorCollectives, Operation, Root};
}

/// `inoutbuf = inbuf ∘ inoutbuf`, element by element, on this process alone
/// (`MPI_Reduce_local`); buffers of other types or lengths, or an operation not defined for
/// their type, are fatal.
pub fn reduce_local_into<S, R, O>(inbuf: &S, inoutbuf: &mut R, op: O)
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    or_fatal(try_reduce_local_into(inbuf, inoutbuf, op))
}

pub fn try_reduce_local_into<S, R, O>(inbuf: &S, inoutbuf: &mut R, op: O) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    const OPERATION: &str = "reduce_local_into";
    let datatype = calls::check_all_reduce(inbuf, inoutbuf, &op)
        .map_err(|cause| Error::new(OPERATION, cause))?;
    // The operation runs over the elements' packed values, so that a layout with gaps (a
    // column view) neither feeds it the bytes between its blocks nor has them overwritten.
    let incoming = Outgoing::of(inbuf).map_err(|cause| Error::new(OPERATION, cause))?;
    shared::over_packed(inoutbuf, OPERATION, |acc| {
        op.apply(datatype, incoming.bytes(), acc);
        Ok(true)
    })?;
    Ok(())
}

/// Refuses `operation` on an inter-communicator, whose collectives (in `inter`) are not the
/// intra-communicator algorithms' over one group.
fn intra_only(comm: &CommData, operation: &'static str) -> Result<(), Error> {
    match comm.is_inter() {
        true => Err(Error::new(operation, Cause::InterCommunicator)),
        false => Ok(()),
    }
}

/// Plans a collective with `prepare` and runs it to the end; errors name `operation`.
#[track_caller]
fn blocking<'a>(
    comm: &CommData,
    operation: &'static str,
    prepare: impl FnOnce() -> Result<Call<'a>, Cause>,
) -> Result<(), Error> {
    intra_only(comm, operation)?;
    let _in = entered(comm, operation, None);
    let run = || {
        let call = prepare().inspect_err(|_| refused_by_messages(comm))?;
        // SAFETY: the buffers are borrowed by the caller for this whole call, which runs the
        // execution to its end (or abandons it, taking back what is in flight) before
        // returning.
        let mut execution = unsafe { call.start(comm) };
        execution.run()
    };
    run().map_err(|cause| Error::new(operation, cause))
}

/// A call this rank refused, where its peers go by messages: it takes the call's tag all the
/// same, as a started call does, so that its later collectives' tags stay its peers' (else a
/// later call's messages would match a peer's receives of this one: a wrong answer).
pub(crate) fn refused_by_messages(comm: &CommData) {
    comm.next_tag();
}

/// Notes, for the stall report, that this thread is in the blocking collective `operation`
/// on `comm`, rooted at `root` (a rank of `comm`) if rooted: before the shared-memory area's
/// path, which waits for the other ranks as the messages' path does. Called before the
/// arguments are checked: a root that is not a rank of an intra-communicator is left out.
#[track_caller]
fn entered(comm: &CommData, operation: &'static str, root: Option<Rank>) -> stall::InCollective {
    let root = root
        .filter(|_| !comm.is_inter())
        .and_then(|r| comm.check_rank(r).ok());
    stall::collective(
        stall::Call::collective(operation, comm.context, root.map(|r| comm.world_rank(r))),
        Some(comm.entered_count()),
    )
}

/// Runs a blocking `operation` whose buffers were checked: `in_area` over the packed bytes of
/// `send` and `recv` where the shared-memory area takes the call (it says whether it did),
/// else the plan `by_messages` makes over `recv`. The caller has noted the call [`entered`]
/// before its checks, so that a rank whose arguments are refused counts it as the others do.
#[track_caller]
fn area_or_messages<'a, S, R>(
    comm: &CommData,
    operation: &'static str,
    send: &S,
    recv: &mut R,
    in_area: impl FnOnce(&[u8], &mut [u8]) -> Result<bool, Error>,
    by_messages: impl FnOnce(&mut R) -> Result<Call<'a>, Cause>,
) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
{
    intra_only(comm, operation)?;
    let sent = Outgoing::of(send).map_err(|cause| Error::new(operation, cause))?;
    if shared::over_packed(recv, operation, |recv_bytes| {
        in_area(sent.bytes(), recv_bytes)
    })? {
        return Ok(());
    }
    blocking(comm, operation, || by_messages(recv))
}

/// [`area_or_messages`] for a rank that only sends (a rooted call's other ranks, gathering
/// or reducing to the root): `in_area` over the packed bytes of `send`, else the plan
/// `by_messages` makes.
#[track_caller]
fn sent_by_area_or_messages<'a, S: Buffer + ?Sized>(
    comm: &CommData,
    operation: &'static str,
    send: &S,
    in_area: impl FnOnce(&[u8]) -> Result<bool, Error>,
    by_messages: impl FnOnce() -> Result<Call<'a>, Cause>,
) -> Result<(), Error> {
    let sent = Outgoing::of(send).map_err(|cause| Error::new(operation, cause))?;
    if in_area(sent.bytes())? {
        return Ok(());
    }
    blocking(comm, operation, by_messages)
}

/// [`area_or_messages`] for a rank that only receives (a broadcast, a rooted call's other
/// ranks scattered to): `in_area` over the packed bytes of `recv`, else the plan
/// `by_messages` makes over it.
#[track_caller]
fn received_by_area_or_messages<'a, R: BufferMut + ?Sized>(
    comm: &CommData,
    operation: &'static str,
    recv: &mut R,
    in_area: impl FnOnce(&mut [u8]) -> Result<bool, Error>,
    by_messages: impl FnOnce(&mut R) -> Result<Call<'a>, Cause>,
) -> Result<(), Error> {
    if shared::over_packed(recv, operation, in_area)? {
        return Ok(());
    }
    blocking(comm, operation, || by_messages(recv))
}

/// [`immediate`] of a call whose one lent buffer is `send`, only read (a rooted call's other
/// ranks gathering or reducing to the root), planned as `call`; an error is fatal.
fn immediate_from<'a, D: ?Sized, Sc: Scope<'a>>(
    comm: &CommData,
    scope: Sc,
    operation: &'static str,
    send: &'a D,
    call: Result<Call<'a>, Cause>,
) -> CollectiveRequest<'a, D, Sc> {
    or_fatal(immediate(comm, scope, operation, Lent::shared(send), call))
}

/// [`immediate`] of a call that lends `buf`, which it writes, planned by `call` over it; an
/// error is fatal.
fn immediate_into<'a, D: ?Sized, Sc: Scope<'a>>(
    comm: &CommData,
    scope: Sc,
    operation: &'static str,
    buf: &'a mut D,
    call: impl FnOnce(&mut D) -> Result<Call<'a>, Cause>,
) -> CollectiveRequest<'a, D, Sc> {
    let (data, call) = Lent::exclusive(buf, call);
    or_fatal(immediate(comm, scope, operation, data, call))
}

/// Starts a planned collective as a request of `scope` that lends `data`; errors name
/// `operation`.
fn immediate<'a, D: ?Sized, Sc: Scope<'a>>(
    comm: &CommData,
    scope: Sc,
    operation: &'static str,
    data: Lent<'a, D>,
    call: Result<Call<'a>, Cause>,
) -> Result<CollectiveRequest<'a, D, Sc>, Error> {
    intra_only(comm, operation)?;
    let call = call.map_err(|cause| {
        refused_by_messages(comm);
        Error::new(operation, cause)
    })?;
    // SAFETY: the buffers are borrowed for 'a (the one the request hands back lent to it),
    // and the scope does not let 'a end before the request completes.
    let running = unsafe { request::Running::start(call, comm, operation) };
    Ok(Request::collective(running, data, scope))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tag a communicator's second collective takes.
    fn second_tag() -> i32 {
        let comm = CommData::world(1, 2);
        comm.next_tag();
        comm.next_tag()
    }

    fn refusal() -> Cause {
        Cause::CountMismatch {
            what: "the receive buffer",
            expected: 2,
            got: 1,
        }
    }

    /// A call by messages refused for its arguments takes its tag as its peers' started calls
    /// do: the next call's tag is theirs.
    #[test]
    fn a_refused_call_keeps_the_collective_tags_in_step() {
        let comm = CommData::world(1, 2);
        let started = immediate(&comm, StaticScope, "op", Lent::shared(&()), Err(refusal()));
        assert!(started.is_err());
        assert_eq!(comm.next_tag(), second_tag(), "immediate");

        let comm = CommData::world(1, 2);
        assert!(blocking(&comm, "op", || Err(refusal())).is_err());
        assert_eq!(comm.next_tag(), second_tag(), "blocking");

        // Refused before the area's path, by a rank whose calls go by messages.
        let datatype = Buffer::datatype(&[0u8][..]);
        let comm = CommData::world(1, 2);
        shared::refusing(&comm, "op", Ok(false), (datatype, 1))(refusal());
        assert_eq!(comm.next_tag(), second_tag(), "refused before the area");

        let comm = CommData::world(1, 2);
        shared::refusing_hierarchically(&comm, "op", Ok(false), (datatype, 1), true, None)(
            refusal(),
        );
        assert_eq!(
            comm.next_tag(),
            second_tag(),
            "refused before the hierarchy"
        );
    }
}
