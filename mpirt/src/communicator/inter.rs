//! Inter-communicators (MPI's section 6.6): two disjoint groups, where the ranks of
//! point-to-point name the other group's processes. Each holds the remote group's world ranks
//! and an intra-communicator of its own group (a context of its own), over which the
//! collectives do their local parts; the groups' leaders (rank 0 of each, or the leaders named
//! at creation) speak for them.
//!
//! Context ids: an inter-communicator takes an id that no process of either group uses, the
//! union of the two groups' agreed sets (see `context`), so its messages match no
//! intra-communicator's on any member.

use crate::collective::{self, CommunicatorCollectives, Operation, Root};
use crate::context::{self, Proposal, WORDS};
use crate::datatype::{Buffer, BufferMut};
use crate::environment::with_engine;
use crate::error::{or_fatal, Cause, Error};
use crate::point_to_point::{check_tag, wait_handle, Destination, Outgoing, Source, Tag};
use pml::{Done, Handle, Pml, SendMode, SourceSel, TagSel};

use super::{AsCommunicator, CommData, Communicator, Context, Rank, SimpleCommunicator, UserGroup};

/// What an inter-communicator holds beyond its context: the other side, and this side's own
/// communicator.
#[derive(Debug)]
pub(crate) struct Sides {
    /// The world ranks of the remote group, in its rank order.
    pub(crate) remote: Vec<u32>,
    /// This process's group, on a context of its own.
    pub(crate) local: CommData,
}

/// A communicator between two disjoint groups (`MPI_Comm` with `MPI_Comm_test_inter` true):
/// ranks of sends and receives name processes of the remote group; [`size`](Communicator::size),
/// [`rank`](Communicator::rank) and [`group`](Communicator::group) are this process's group's.
/// Made by [`Communicator::create_intercommunicator`] (`MPI_Intercomm_create`); rsmpi makes
/// them by spawn only.
///
/// Collectives on it: `barrier`, `all_gather_into`, `all_reduce_into` and `all_to_all_into`,
/// with MPI's inter-communicator meaning (each group receives the other group's
/// contributions); the others are a named error, as are duplicates, splits and topologies of
/// it: [`merge`](InterCommunicator::merge) it into an intra-communicator for those.
///
/// ```no_run
/// use mpirt::topology::{Color, MergeOrder};
/// use mpirt::traits::*;
///
/// let universe = mpirt::initialize().unwrap();
/// let world = universe.world();
/// // Even and odd world ranks, each group led by its lowest world rank.
/// let parity = world.rank() % 2;
/// let half = world.split_by_color(Color::with_value(parity)).unwrap();
/// let inter = half.create_intercommunicator(0, &world, 1 - parity, 7);
/// let to_remote_leader = inter.process_at_rank(0);
/// if inter.rank() == 0 {
///     to_remote_leader.send(&world.rank());
///     let (theirs, _) = to_remote_leader.receive::<i32>();
///     assert_eq!(theirs, 1 - parity);
/// }
/// let both = inter.merge(if parity == 0 { MergeOrder::Low } else { MergeOrder::High });
/// assert_eq!(both.size(), world.size());
/// ```
///
/// Merging is for inter-communicators only:
///
/// ```compile_fail
/// use mpirt::topology::MergeOrder;
/// use mpirt::traits::*;
///
/// let universe = mpirt::initialize().unwrap();
/// universe.world().merge(MergeOrder::Low);
/// ```
#[derive(Clone, Debug)]
pub struct InterCommunicator {
    data: CommData,
}

/// Which group comes first when an inter-communicator merges (`MPI_Intercomm_merge`'s
/// `high`): every process of one group passes `Low` and every process of the other `High`;
/// if both groups pass the same, the group whose leader has the lower world rank comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeOrder {
    /// This group's ranks come first in the merged communicator.
    Low,
    /// This group's ranks come last.
    High,
}

impl InterCommunicator {
    fn sides(&self) -> &Sides {
        self.data
            .sides()
            .expect("an InterCommunicator holds both sides")
    }

    /// The number of processes in the remote group (`MPI_Comm_remote_size`).
    pub fn remote_size(&self) -> Rank {
        self.sides().remote.len() as Rank
    }

    /// The remote group (`MPI_Comm_remote_group`).
    pub fn remote_group(&self) -> UserGroup {
        UserGroup::from_world_ranks(self.sides().remote.clone())
    }

    /// An intra-communicator of both groups (`MPI_Intercomm_merge`): the group that passed
    /// [`MergeOrder::Low`] first, each group in its own rank order. Collective over both
    /// groups; processes of one group that pass different orders are an error on all of them.
    pub fn merge(&self, order: MergeOrder) -> SimpleCommunicator {
        or_fatal(self.try_merge(order))
    }
    pub fn try_merge(&self, order: MergeOrder) -> Result<SimpleCommunicator, Error> {
        merge(&self.data, order).map_err(|cause| Error::new("merge", cause))
    }
}

impl Communicator for InterCommunicator {
    fn data(&self) -> &CommData {
        &self.data
    }
    fn is_owning_handle(&self) -> bool {
        true
    }
}

impl AsCommunicator for InterCommunicator {
    type Out = InterCommunicator;
    fn as_communicator(&self) -> &InterCommunicator {
        self
    }
}

/// Why a leader could not make the inter-communicator: what it tells its group (as a code,
/// 0 meaning none), which has no other way to learn it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaderFailure {
    RemoteLeaderOutOfRange = 1,
    NegativeTag,
    RemoteLeaderFailed,
    GroupsOverlap,
    ContextIdsExhausted,
}

impl LeaderFailure {
    const ALL: [LeaderFailure; 5] = [
        LeaderFailure::RemoteLeaderOutOfRange,
        LeaderFailure::NegativeTag,
        LeaderFailure::RemoteLeaderFailed,
        LeaderFailure::GroupsOverlap,
        LeaderFailure::ContextIdsExhausted,
    ];

    /// The failure a leader's code names; `None` for 0, success.
    fn of(code: u64) -> Option<LeaderFailure> {
        LeaderFailure::ALL.into_iter().find(|f| *f as u64 == code)
    }

    fn cause(self, leader: Rank, remote_leader: Rank) -> Cause {
        let why = match self {
            LeaderFailure::RemoteLeaderOutOfRange => {
                format!("remote leader {remote_leader} is not a rank of the peer communicator")
            }
            LeaderFailure::NegativeTag => {
                "the tag is negative; negative tags are reserved for the runtime".to_string()
            }
            LeaderFailure::RemoteLeaderFailed => format!(
                "the exchange with the remote group's leader (rank {remote_leader} of the peer \
                 communicator) failed"
            ),
            LeaderFailure::GroupsOverlap => {
                "the two groups share processes; an inter-communicator's groups must be \
                 disjoint"
                    .to_string()
            }
            LeaderFailure::ContextIdsExhausted => return Cause::ContextIdsExhausted,
        };
        Cause::InvalidInterCommunicator(format!("local leader (rank {leader}): {why}"))
    }
}

/// `MPI_Intercomm_create`: collective over `local` (an intra-communicator) and, through the
/// two leaders' messages on `peer` with `tag`, over the remote group's own call.
pub(super) fn create(
    local: &CommData,
    local_leader: Rank,
    peer: &dyn Communicator,
    remote_leader: Rank,
    tag: Tag,
) -> Result<InterCommunicator, Cause> {
    if local.is_inter() {
        return Err(Cause::InterCommunicator);
    }
    let leader = local.check_rank(local_leader);
    let proposal = Proposal {
        valid: leader.is_ok(),
        fingerprint: context::fingerprint([i64::from(local_leader)]),
    };
    let agreed = context::agree_on_used(local, proposal);
    let leader = leader?;
    let used = agreed.map_err(cause_of)?;
    let own_id = context::lowest_free(&used).ok_or(Cause::ContextIdsExhausted)?;
    let mut offered = used;
    offered[own_id as usize / 64] |= 1 << (own_id % 64);

    // [failure code, remote size, the inter-communicator's id], then the remote group.
    let mut header = [0u64; 3];
    let mut remote = Vec::new();
    if local.rank == leader {
        match leaders_agree(local, &offered, peer, remote_leader, tag) {
            Ok((id, members)) => {
                header = [0, members.len() as u64, u64::from(id)];
                remote = members;
            }
            Err(failure) => header[0] = failure as u64,
        }
    }
    let group = SimpleCommunicator::new(local.clone());
    let from_leader = group.try_process_at_rank(local_leader).map_err(cause_of)?;
    from_leader
        .try_broadcast_into(&mut header[..])
        .map_err(cause_of)?;
    if let Some(failure) = LeaderFailure::of(header[0]) {
        return Err(failure.cause(local_leader, remote_leader));
    }
    remote.resize(header[1] as usize, 0);
    from_leader
        .try_broadcast_into(&mut remote[..])
        .map_err(cause_of)?;
    let own = CommData::new(
        local.rank,
        local.shared.group.clone(),
        Context::Leased(context::lease(own_id)),
        None,
    );
    Ok(InterCommunicator {
        data: CommData::inter(own, remote, context::lease(header[2] as u32)),
    })
}

/// The local leader's part of `create`: trades this group's members and the context ids it
/// uses (`offered`) for the remote group's, over `peer`; returns the inter-communicator's id and
/// the remote members.
fn leaders_agree(
    local: &CommData,
    offered: &[u64; WORDS],
    peer: &dyn Communicator,
    remote_leader: Rank,
    tag: Tag,
) -> Result<(u32, Vec<u32>), LeaderFailure> {
    check_tag(tag).map_err(|_| LeaderFailure::NegativeTag)?;
    let other = peer
        .try_process_at_rank(remote_leader)
        .map_err(|_| LeaderFailure::RemoteLeaderOutOfRange)?;
    // [the ids this group uses, its members' world ranks]
    let mut mine = offered.to_vec();
    mine.extend(local.shared.group.iter().map(|&m| u64::from(m)));
    let theirs =
        exchange_words(&other, &mine, tag).map_err(|_| LeaderFailure::RemoteLeaderFailed)?;
    if theirs.len() <= WORDS {
        return Err(LeaderFailure::RemoteLeaderFailed);
    }
    let members: Vec<u32> = theirs[WORDS..].iter().map(|&m| m as u32).collect();
    if members.iter().any(|m| local.shared.group.contains(m)) {
        return Err(LeaderFailure::GroupsOverlap);
    }
    let mut union = *offered;
    for (word, theirs) in union.iter_mut().zip(&theirs[..WORDS]) {
        *word |= theirs;
    }
    let id = context::lowest_free(&union).ok_or(LeaderFailure::ContextIdsExhausted)?;
    Ok((id, members))
}

fn cause_of(error: Error) -> Cause {
    error.cause().clone()
}

/// `MPI_Intercomm_merge`. A group whose processes passed different orders fails, and the
/// leaders' swap tells the other group so, which then fails too rather than wait.
fn merge(inter: &CommData, order: MergeOrder) -> Result<SimpleCommunicator, Cause> {
    let sides = inter.sides().ok_or(Cause::InterCommunicator)?;
    let high = order == MergeOrder::High;
    let proposal = Proposal {
        valid: true,
        fingerprint: context::fingerprint([i64::from(high)]),
    };
    let agreed = context::agree_on_used(&sides.local, proposal);
    let tag = inter.next_tag();
    // [whether this group agreed, its order, the ids it uses]
    let mut mine = vec![u64::from(agreed.is_ok()), u64::from(high)];
    mine.extend_from_slice(agreed.as_ref().unwrap_or(&[0; WORDS]));
    let mut theirs = vec![0u64; mine.len()];
    let group = SimpleCommunicator::new(sides.local.clone());
    let mut swapped = Ok(());
    if sides.local.rank == 0 {
        let mut received = vec![0u8; mine.len() * 8];
        swapped = swap_blocks(inter, tag, &words_bytes(&mine), &mut received, 1);
        for (word, bytes) in theirs.iter_mut().zip(received.chunks_exact(8)) {
            *word = u64::from_ne_bytes(bytes.try_into().expect("8 bytes"));
        }
    }
    tell_group(&group, swapped)?;
    group
        .process_at_rank(0)
        .try_broadcast_into(&mut theirs[..])
        .map_err(cause_of)?;
    let used = agreed.map_err(cause_of)?;
    if theirs[0] != 1 {
        return Err(Cause::PeerArguments(
            "the remote group's processes passed different merge orders",
        ));
    }
    let theirs = &theirs[1..];
    let remote_high = theirs[0] != 0;
    let mut union = used;
    for (word, theirs) in union.iter_mut().zip(&theirs[1..]) {
        *word |= theirs;
    }
    let id = context::lowest_free(&union).ok_or(Cause::ContextIdsExhausted)?;
    let own = &sides.local.shared.group;
    // Both groups reach the same answer: the leaders' world ranks differ.
    let own_first = match (high, remote_high) {
        (false, true) => true,
        (true, false) => false,
        _ => own[0] < sides.remote[0],
    };
    let members = match own_first {
        true => [&own[..], &sides.remote[..]].concat(),
        false => [&sides.remote[..], &own[..]].concat(),
    };
    let rank = match own_first {
        true => sides.local.rank,
        false => sides.remote.len() as u32 + sides.local.rank,
    };
    Ok(SimpleCommunicator::new(CommData::new(
        rank,
        members,
        Context::Leased(context::lease(id)),
        None,
    )))
}

/// The native-endian bytes of `words`, as a swap sends them.
fn words_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// Block j of `out` to remote rank j and block j of `into` from it, for j below `partners`
/// (at least 1: a group is never empty), on the inter-communicator's context with the
/// collective tag `tag`. Every request posted is waited for, even after one failed, so that no
/// receive is left writing into `into`.
fn swap_blocks(
    inter: &CommData,
    tag: Tag,
    out: &[u8],
    into: &mut [u8],
    partners: u32,
) -> Result<(), Cause> {
    let n = partners as usize;
    let (block_out, block_in) = (out.len() / n, into.len() / n);
    let base = into.as_mut_ptr();
    let mut posted: Vec<(Option<u32>, Handle)> = Vec::with_capacity(2 * n);
    let mut first_failure = None;
    for j in 0..partners {
        // SAFETY: block j, `block_in` bytes from j * block_in, lies inside `into` (n blocks of
        // `into.len() / n` bytes), which is borrowed mutably for this whole function, not
        // otherwise touched here, and every receive posted is waited for before it returns.
        let posted_recv = with_engine(|e| unsafe {
            e.post_recv(
                inter.context,
                SourceSel::Rank(j),
                TagSel::Tag(tag),
                base.add(j as usize * block_in),
                block_in,
            )
        });
        match posted_recv {
            Ok(handle) => posted.push((Some(j), handle)),
            Err(cause) => {
                first_failure = Some(cause);
                break;
            }
        }
    }
    for j in 0..partners {
        if first_failure.is_some() {
            break;
        }
        let block = &out[j as usize * block_out..(j as usize + 1) * block_out];
        let peer = inter.target_world_rank(j);
        // SAFETY: `block` borrows `out` for this whole function, which waits for the send
        // below before it returns.
        let posted_send = with_engine(|e| unsafe {
            e.post_send(
                inter.context,
                inter.rank,
                peer,
                tag,
                SendMode::Standard,
                block.as_ptr(),
                block.len(),
            )
        });
        match posted_send {
            Ok(handle) => posted.push((None, handle)),
            Err(cause) => first_failure = Some(cause),
        }
    }
    for (from, handle) in posted {
        let failure = match (wait_handle(handle), from) {
            (Ok(Done::Received(status)), Some(j)) if status.len != block_in => {
                Some(Cause::LengthDisagrees {
                    peer: j as Rank,
                    expected: block_in,
                    got: status.len,
                })
            }
            (Ok(_), _) => None,
            (Err(cause), _) => Some(cause),
        };
        if let Some(cause) = failure {
            first_failure.get_or_insert(cause);
        }
    }
    first_failure.map_or(Ok(()), Err)
}

/// Tells the group whether its leader's swap with the remote leader (`swapped`, `Ok` on the
/// other members) went through, so that a failure there fails the call on every member
/// instead of leaving them waiting for what the leader would have passed on.
fn tell_group(group: &SimpleCommunicator, swapped: Result<(), Cause>) -> Result<(), Cause> {
    let mut failed = [u8::from(swapped.is_err())];
    group
        .process_at_rank(0)
        .try_broadcast_into(&mut failed[..])
        .map_err(cause_of)?;
    swapped?;
    match failed[0] {
        0 => Ok(()),
        _ => Err(Cause::InvalidInterCommunicator(
            "this group's leader failed its exchange with the remote group's (its own error \
             says why)"
                .to_string(),
        )),
    }
}

/// The sides of `inter`, for the collective `operation`.
fn sides_for<'c>(inter: &'c CommData, operation: &'static str) -> Result<&'c Sides, Error> {
    inter
        .sides()
        .ok_or_else(|| Error::new(operation, Cause::InterCommunicator))
}

/// `MPI_Barrier` on an inter-communicator: returns once every process of both groups called
/// it (each group's barrier, the leaders' swap, then each leader's word to its group).
pub(crate) fn barrier(inter: &CommData) -> Result<(), Error> {
    const OPERATION: &str = "barrier";
    let sides = sides_for(inter, OPERATION)?;
    let group = SimpleCommunicator::new(sides.local.clone());
    group.try_barrier()?;
    let tag = inter.next_tag();
    let mut swapped = Ok(());
    if sides.local.rank == 0 {
        swapped = swap_blocks(inter, tag, &[], &mut [], 1);
    }
    // Each leader speaks only once the remote group has all arrived.
    tell_group(&group, swapped).map_err(|cause| Error::new(OPERATION, cause))
}

/// `MPI_Allgather` on an inter-communicator: `recv` holds the remote group's `send`s in its
/// rank order. This group's parts gather at its leader, the leaders swap, and each leader
/// broadcasts what it received.
pub(crate) fn all_gather<S, R>(inter: &CommData, send: &S, recv: &mut R) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
{
    const OPERATION: &str = "all_gather_into";
    let fail = |cause| Error::new(OPERATION, cause);
    let sides = sides_for(inter, OPERATION)?;
    let part = Outgoing::of(send).map_err(fail)?;
    let part = part.bytes();
    let remote = sides.remote.len();
    if recv.byte_len() != part.len() * remote {
        return Err(fail(Cause::CountMismatch {
            what: "the receive buffer (in bytes)",
            expected: part.len() * remote,
            got: recv.byte_len(),
        }));
    }
    let group = SimpleCommunicator::new(sides.local.clone());
    let tag = inter.next_tag();
    let leader = group.process_at_rank(0);
    let mut swapped = Ok(());
    if sides.local.rank == 0 {
        let mut gathered = vec![0u8; part.len() * sides.local.size as usize];
        leader.try_gather_into_root(part, &mut gathered[..])?;
        collective::over_packed(recv, OPERATION, |bytes| {
            swapped = swap_blocks(inter, tag, &gathered, bytes, 1);
            Ok(swapped.is_ok())
        })?;
    } else {
        leader.try_gather_into(part)?;
    }
    tell_group(&group, swapped).map_err(fail)?;
    leader.try_broadcast_into(recv)
}

/// `MPI_Allreduce` on an inter-communicator: `recv` holds the reduction of the remote group's
/// `send`s. Each group reduces its own, the leaders swap the results, and each broadcasts
/// what it received.
pub(crate) fn all_reduce<S, R, O>(
    inter: &CommData,
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
    let sides = sides_for(inter, OPERATION)?;
    let group = SimpleCommunicator::new(sides.local.clone());
    group.try_all_reduce_into(send, recv, op)?;
    let tag = inter.next_tag();
    let mut swapped = Ok(());
    if sides.local.rank == 0 {
        collective::over_packed(recv, OPERATION, |bytes| {
            let own = bytes.to_vec();
            swapped = swap_blocks(inter, tag, &own, bytes, 1);
            Ok(swapped.is_ok())
        })?;
    }
    tell_group(&group, swapped).map_err(|cause| Error::new(OPERATION, cause))?;
    group.process_at_rank(0).try_broadcast_into(recv)
}

/// `MPI_Alltoall` on an inter-communicator: block j of `send` goes to remote rank j, and
/// block j of `recv` comes from it.
pub(crate) fn all_to_all<S, R>(inter: &CommData, send: &S, recv: &mut R) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
{
    const OPERATION: &str = "all_to_all_into";
    let fail = |cause| Error::new(OPERATION, cause);
    let sides = sides_for(inter, OPERATION)?;
    let remote = sides.remote.len();
    let sent = Outgoing::of(send).map_err(fail)?;
    let sent = sent.bytes();
    if sent.len() % remote != 0 || recv.byte_len() != sent.len() {
        return Err(fail(Cause::CountMismatch {
            what: "the receive buffer (in bytes, a block per remote rank)",
            expected: sent.len() - sent.len() % remote,
            got: recv.byte_len(),
        }));
    }
    let tag = inter.next_tag();
    collective::over_packed(recv, OPERATION, |bytes| {
        swap_blocks(inter, tag, sent, bytes, remote as u32).map_err(fail)?;
        Ok(true)
    })?;
    Ok(())
}

/// Exchanges a vector of words with `other` on its communicator with the user tag `tag`
/// (`MPI_Sendrecv` with a receive of unknown length).
fn exchange_words(other: &super::Process<'_>, mine: &[u64], tag: Tag) -> Result<Vec<u64>, Error> {
    crate::request::scope(|scope| {
        let sent = other.try_immediate_send_mode(scope, mine, tag, SendMode::Standard)?;
        let received = other.try_receive_vec_with_tag::<u64>(tag);
        sent.wait();
        received.map(|(words, _)| words)
    })
}
