//! Inter-communicators (MPI's section 6.6): two disjoint groups, where the ranks of
//! point-to-point name the other group's processes. Each holds the remote group's world ranks
//! and an intra-communicator of its own group (a context of its own), over which the
//! collectives do their local parts; the groups' leaders (rank 0 of each, or the leaders named
//! at creation) speak for them.
//!
//! Context ids: an inter-communicator takes an id that no process of either group uses, the
//! union of the two groups' agreed sets (see `context`), so its messages match no
//! intra-communicator's on any member.

use crate::collective::{self, CommunicatorCollectives, Operation, Root, SystemOperation};
use crate::context::{self, Proposal, WORDS};
use crate::datatype::{Buffer, BufferMut, Datatype};
use crate::environment::with_engine;
use crate::error::{or_fatal, Cause, Error};
use crate::point_to_point::{check_tag, post_runtime_send, wait_handle, Outgoing, Tag};
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
    /// Whether this group comes first when both merge with the same order, where the leaders'
    /// world ranks cannot say: a spawn's parents and children name each other by ranks each
    /// process gives the other side as it meets it, so the parents come first. `None`: the
    /// lower leader's world rank comes first.
    pub(crate) first_on_tie: Option<bool>,
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
/// if both groups pass the same, the group whose rank 0 has the lower world rank comes first
/// (rank 0 of each group, whichever leaders made the inter-communicator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeOrder {
    /// This group's ranks come first in the merged communicator.
    Low,
    /// This group's ranks come last.
    High,
}

impl InterCommunicator {
    /// The inter-communicator whose context and sides `data` holds (see `CommData::inter`).
    pub(super) fn from_data(data: CommData) -> InterCommunicator {
        InterCommunicator { data }
    }

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
    RemoteGroupFailed,
    TagsDiffer,
}

impl TryFrom<u64> for LeaderFailure {
    type Error = ();

    /// The failure a leader's code names; `Err` for 0 (success) and codes no leader sends.
    fn try_from(code: u64) -> Result<LeaderFailure, ()> {
        Ok(match code {
            1 => LeaderFailure::RemoteLeaderOutOfRange,
            2 => LeaderFailure::NegativeTag,
            3 => LeaderFailure::RemoteLeaderFailed,
            4 => LeaderFailure::GroupsOverlap,
            5 => LeaderFailure::ContextIdsExhausted,
            6 => LeaderFailure::RemoteGroupFailed,
            7 => LeaderFailure::TagsDiffer,
            _ => return Err(()),
        })
    }
}

impl LeaderFailure {
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
            LeaderFailure::RemoteGroupFailed => format!(
                "the remote group (led by rank {remote_leader} of the peer communicator) failed \
                 the call (its errors say why)"
            ),
            LeaderFailure::TagsDiffer => format!(
                "the remote group's leader (rank {remote_leader} of the peer communicator) \
                 passed another tag"
            ),
        };
        Cause::InvalidInterCommunicator(format!("local leader (rank {leader}): {why}"))
    }
}

/// The runtime tag of the leaders' exchange on the peer communicator's context (one of those
/// collectives leave free): no user receive, AnySource and AnyTag ones included, matches it,
/// nor does it match a user message; the user's tag travels in the payload.
const LEADERS_TAG: Tag = -3;

/// The first word of a leader's message, which says it is one.
const LEADERS_MAGIC: u64 = 0x6d70_6972_745f_6963;

/// The words of a leader's header before the context ids it offers: [the magic word, the
/// user's tag, its failure code (0 for none), its group's size].
const LEADERS_HEADER: usize = 4;

/// `MPI_Intercomm_create`: collective over `local` (an intra-communicator) and, through the
/// two leaders' messages on `peer` (on a runtime tag that carries `tag`), over the remote
/// group's own call. A group that fails (its processes' arguments disagree, every context id
/// is taken) still has the process that passed itself as leader tell the remote leader, so
/// that both groups fail rather than one wait. Only a group with no such process (every one
/// passed a leader out of range), or a leader whose remote leader is no rank of `peer`,
/// cannot reach the remote leader, which then waits as it would under MPI.
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
    let _creating = context::creating();
    let leader = local.check_rank(local_leader);
    let proposal = Proposal {
        valid: leader.is_ok(),
        fingerprint: context::fingerprint([i64::from(local_leader)]),
    };
    let own = context::agree_on_used(local, proposal)
        .map_err(cause_of)
        .and_then(|used| {
            let id = context::lowest_free(&used).ok_or(Cause::ContextIdsExhausted)?;
            let mut offered = used;
            offered[id as usize / 64] |= 1 << (id % 64);
            Ok((id, offered))
        });

    // [failure code, remote size, the inter-communicator's id], then the remote group.
    let mut header = [0u64; 3];
    let mut remote = Vec::new();
    if leader.as_ref() == Ok(&local.rank) {
        let failure = own.as_ref().err().map(|cause| match cause {
            Cause::ContextIdsExhausted => LeaderFailure::ContextIdsExhausted,
            _ => LeaderFailure::RemoteGroupFailed,
        });
        let offered = own.as_ref().map_or([0; WORDS], |(_, offered)| *offered);
        match leaders_agree(local, failure, &offered, peer, remote_leader, tag) {
            Ok((id, members)) => {
                header = [0, members.len() as u64, u64::from(id)];
                remote = members;
            }
            Err(failure) => header[0] = failure as u64,
        }
    }
    let leader = leader?;
    let (own_id, _) = own?;
    let group = SimpleCommunicator::new(local.clone());
    let from_leader = group.process_at_rank(leader as Rank);
    from_leader
        .try_broadcast_into(&mut header[..])
        .map_err(cause_of)?;
    if let Ok(failure) = LeaderFailure::try_from(header[0]) {
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
        data: CommData::inter(own, remote, None, context::lease(header[2] as u32)),
    })
}

/// The local leader's part of `create`: trades this group's members and the context ids it
/// uses (`offered`), or why it failed (`failure`), for the remote group's, over `peer`;
/// returns the inter-communicator's id and the remote members. A leader whose own group
/// failed, or who passed a negative tag, still trades, so that the remote leader learns it.
fn leaders_agree(
    local: &CommData,
    failure: Option<LeaderFailure>,
    offered: &[u64; WORDS],
    peer: &dyn Communicator,
    remote_leader: Rank,
    tag: Tag,
) -> Result<(u32, Vec<u32>), LeaderFailure> {
    let failure = failure.or(check_tag(tag).err().map(|_| LeaderFailure::NegativeTag));
    let other = peer
        .data()
        .check_target(remote_leader)
        .map_err(|_| LeaderFailure::RemoteLeaderOutOfRange)?;
    let group = &local.shared.group;
    let mut mine = vec![
        LEADERS_MAGIC,
        tag as u64,
        failure.map_or(0, |f| f as u64),
        group.len() as u64,
    ];
    mine.extend_from_slice(offered);
    let members: Vec<u64> = group.iter().map(|&m| u64::from(m)).collect();
    let (theirs, their_members) = exchange_with_leader(peer.data(), other, &mine, &members)
        .map_err(|_| LeaderFailure::RemoteLeaderFailed)?;
    if theirs[2] != 0 {
        return Err(failure.unwrap_or(LeaderFailure::RemoteGroupFailed));
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    if theirs[1] != tag as u64 {
        return Err(LeaderFailure::TagsDiffer);
    }
    let members: Vec<u32> = their_members.iter().map(|&m| m as u32).collect();
    if members.iter().any(|m| group.contains(m)) {
        return Err(LeaderFailure::GroupsOverlap);
    }
    let mut union = *offered;
    for (word, theirs) in union.iter_mut().zip(&theirs[LEADERS_HEADER..]) {
        *word |= theirs;
    }
    let id = context::lowest_free(&union).ok_or(LeaderFailure::ContextIdsExhausted)?;
    Ok((id, members))
}

/// Trades a leader's header (`mine`: [`LEADERS_HEADER`] words, then the context ids) and
/// its group's members with the remote leader, `other` (a rank of `peer`), on the runtime
/// tag: every request is posted before any is waited for, so that neither leader's send of
/// a large group waits for the other's. Checks that what arrived is a leader's message: the
/// magic word, and a group of world ranks, not empty, none past the world.
fn exchange_with_leader(
    peer: &CommData,
    other: u32,
    mine: &[u64],
    members: &[u64],
) -> Result<(Vec<u64>, Vec<u64>), Cause> {
    let mut theirs = vec![0u8; mine.len() * 8];
    let (mine, members) = (words_bytes(mine), words_bytes(members));
    let to = peer.target_world_rank(other);
    let send = |bytes: &[u8]| {
        // SAFETY: `bytes` borrows `mine` or `members`, which live until this function
        // returns, after it waits for both sends.
        unsafe { post_runtime_send(peer, to, LEADERS_TAG, bytes) }
    };
    let receive = |into: &mut [u8]| {
        // SAFETY: `into` borrows a buffer of this function's, which waits for the receive
        // before it returns or reads the buffer.
        with_engine(|e| unsafe {
            e.post_recv(
                peer.context,
                SourceSel::Rank(other),
                TagSel::Tag(LEADERS_TAG),
                into.as_mut_ptr(),
                into.len(),
            )
        })
    };
    let header = receive(&mut theirs)?;
    let sends = [send(&mine), send(&members)];
    let arrived = wait_handle(header);
    for sent in sends {
        wait_handle(sent?)?;
    }
    let not_a_leader = || Cause::InvalidInterCommunicator("not a leader's message".to_string());
    match arrived? {
        Done::Received(status) if status.len == theirs.len() => {}
        _ => return Err(not_a_leader()),
    }
    let theirs = bytes_words(&theirs);
    // Ranks this process reaches: the world's, and those a spawn joined (a merged parent
    // and child communicator's members).
    let world = with_engine(|e| Ok(e.reachable()))? as u64;
    let size = theirs[3];
    if theirs[0] != LEADERS_MAGIC || size == 0 || size > world {
        return Err(not_a_leader());
    }
    let mut their_members = vec![0u8; size as usize * 8];
    let arrived = wait_handle(receive(&mut their_members)?)?;
    let their_members = bytes_words(&their_members);
    match arrived {
        Done::Received(status)
            if status.len == size as usize * 8 && their_members.iter().all(|&m| m < world) =>
        {
            Ok((theirs, their_members))
        }
        _ => Err(not_a_leader()),
    }
}

fn cause_of(error: Error) -> Cause {
    error.cause().clone()
}

/// `MPI_Intercomm_merge`. A group whose processes passed different orders fails, and the
/// leaders' swap tells the other group so, which then fails too rather than wait.
fn merge(inter: &CommData, order: MergeOrder) -> Result<SimpleCommunicator, Cause> {
    let sides = inter.sides().ok_or(Cause::InterCommunicator)?;
    let _creating = context::creating();
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
        swapped = swap_blocks(inter, tag, &words_bytes(&mine), &mut received, 1, &[0]);
        theirs = bytes_words(&received);
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
        _ => sides.first_on_tie.unwrap_or(own[0] < sides.remote[0]),
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

/// Block j of `out` to remote rank j and block j of `into` from it, for each j in `with`, of
/// `blocks` equal blocks each way (at least 1: a group is never empty), on the
/// inter-communicator's context with the collective tag `tag`. Every request posted is waited
/// for, even after one failed, so that no receive is left writing into `into`.
fn swap_blocks(
    inter: &CommData,
    tag: Tag,
    out: &[u8],
    into: &mut [u8],
    blocks: usize,
    with: &[u32],
) -> Result<(), Cause> {
    let (block_out, block_in) = (out.len() / blocks, into.len() / blocks);
    let base = into.as_mut_ptr();
    let mut posted: Vec<(Option<u32>, Handle)> = Vec::with_capacity(2 * with.len());
    let mut first_failure = None;
    for &j in with {
        // SAFETY: block j (below `blocks`), `block_in` bytes from j * block_in, lies inside
        // `into` (`blocks` blocks of `into.len() / blocks` bytes), which is borrowed mutably
        // for this whole function, not otherwise touched here, and every receive posted is
        // waited for before it returns.
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
    for &j in with {
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

/// The words of a header that partners swap before their data: [whether this process's
/// side of the call passed its checks, the bytes it sends the partner, the bytes it takes
/// from it].
const HEADER_WORDS: usize = 3;

/// Why the pair of this process (header `mine`) and remote rank `partner` (header `theirs`)
/// swaps no data; `None` where both sides are sound and each takes what the other sends. Both
/// partners reach the same verdict from the same two headers.
fn pair_refused(mine: &[u64], theirs: &[u64], partner: u32) -> Option<Cause> {
    let peer = partner as Rank;
    if mine[0] != 1 {
        Some(Cause::InvalidInterCommunicator(
            "this process's own checks failed".to_string(),
        ))
    } else if theirs[0] != 1 {
        Some(Cause::InvalidInterCommunicator(format!(
            "remote rank {peer} failed the call (its own error says why)"
        )))
    } else if theirs[1] != mine[2] {
        Some(Cause::LengthDisagrees {
            peer,
            expected: mine[2] as usize,
            got: theirs[1] as usize,
        })
    } else if theirs[2] != mine[1] {
        Some(Cause::InvalidInterCommunicator(format!(
            "remote rank {peer} takes {} bytes where this rank sends {}: the groups' counts \
             disagree",
            theirs[2], mine[1]
        )))
    } else {
        None
    }
}

/// Swaps blocks of `out` and `into` with remote ranks 0 to `partners - 1`, as
/// [`swap_blocks`], after a header to each saying whether this process passed its checks
/// (`own`) and how long the blocks are: a pair whose headers disagree swaps no data, so no
/// partner waits for data that will not come, and every process returns an error naming
/// why. Arrived bytes of a type whose values need a check (`bool`, `char`) land in a staging
/// buffer and reach `into` only once checked.
fn checked_swap(
    inter: &CommData,
    tag: Tag,
    own: Result<(), Cause>,
    out: &[u8],
    into: &mut [u8],
    partners: u32,
    datatype: Datatype,
) -> Result<(), Cause> {
    let n = partners as usize;
    let (block_out, block_in) = (out.len() / n, into.len() / n);
    let mine = [u64::from(own.is_ok()), block_out as u64, block_in as u64];
    let mut headers = vec![0u8; n * HEADER_WORDS * 8];
    let everyone: Vec<u32> = (0..partners).collect();
    swap_blocks(
        inter,
        tag,
        &words_bytes(&mine.repeat(n)),
        &mut headers,
        n,
        &everyone,
    )?;
    let mut failure = own.err();
    let mut with = Vec::new();
    for (j, header) in (0..partners).zip(headers.chunks_exact(HEADER_WORDS * 8)) {
        match pair_refused(&mine, &bytes_words(header), j) {
            None => with.push(j),
            Some(cause) => {
                failure.get_or_insert(cause);
            }
        }
    }
    if !datatype.needs_check() {
        if let Err(cause) = swap_blocks(inter, tag, out, into, n, &with) {
            failure.get_or_insert(cause);
        }
        return failure.map_or(Ok(()), Err);
    }
    let mut staged = vec![0u8; into.len()];
    if let Err(cause) = swap_blocks(inter, tag, out, &mut staged, n, &with) {
        failure.get_or_insert(cause);
    }
    for &j in &with {
        let block = j as usize * block_in..(j as usize + 1) * block_in;
        match datatype.is_valid(&staged[block.clone()]) {
            true => into[block.clone()].copy_from_slice(&staged[block]),
            false => {
                failure.get_or_insert(Cause::InvalidValue {
                    type_name: datatype.name(),
                });
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

/// The words whose native-endian bytes `bytes` holds.
fn bytes_words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        .collect()
}

/// [`checked_swap`] into `recv`'s packed elements, sending `out` (`None`: `recv`'s own
/// packed elements, as they were before the swap). A buffer that cannot be packed still
/// sends its header, as a failure, so that its partners do not wait.
fn swap_into<R: BufferMut + ?Sized>(
    inter: &CommData,
    tag: Tag,
    own: Result<(), Cause>,
    out: Option<&[u8]>,
    recv: &mut R,
    partners: u32,
    operation: &'static str,
) -> Result<(), Cause> {
    let datatype = recv.datatype();
    let mut swapped = None;
    let packed = collective::over_packed(recv, operation, |bytes| {
        let result = match out {
            Some(out) => checked_swap(inter, tag, own.clone(), out, bytes, partners, datatype),
            None => {
                let before = bytes.to_vec();
                checked_swap(inter, tag, own.clone(), &before, bytes, partners, datatype)
            }
        };
        let done = result.is_ok();
        swapped = Some(result);
        Ok(done)
    });
    match (swapped, packed) {
        (Some(result), _) => result,
        (None, Err(e)) => {
            let cause = cause_of(e);
            let refused = Err(cause.clone());
            let _ = checked_swap(inter, tag, refused, &[], &mut [], partners, datatype);
            Err(cause)
        }
        (None, Ok(_)) => unreachable!("over_packed runs its path or fails"),
    }
}

/// Whether every member of `group` passed its checks (`own`: the bytes it sends and
/// receives, which must be the same on every member, or why it failed); each learns the
/// verdict, a member whose checks failed its own error. Runs on every member whatever its own
/// result, so that none waits.
fn group_agrees(group: &SimpleCommunicator, own: &Result<[usize; 2], Cause>) -> Result<(), Cause> {
    let [sent, received] = own.as_ref().map_or([0, 0], |lens| lens.map(|l| l as u64));
    // The maxima of each length and of its complement: a length and the complement of its
    // maximum agree only where every member passed the same.
    let mine = [u64::from(own.is_err()), sent, !sent, received, !received];
    let mut all = [0u64; 5];
    group
        .try_all_reduce_into(&mine[..], &mut all[..], SystemOperation::max())
        .map_err(cause_of)?;
    if let Err(cause) = own {
        return Err(cause.clone());
    }
    match (all[0], all[1] == !all[2] && all[3] == !all[4]) {
        (0, true) => Ok(()),
        (0, false) => Err(Cause::PeerArguments(
            "the processes of this group passed different counts",
        )),
        _ => Err(Cause::InvalidInterCommunicator(
            "another process of this group failed the call (its own error says why)".to_string(),
        )),
    }
}

/// Tells the group whether its leader's swap with the remote leader (`swapped`; on the other
/// members, how their own part went) went through, so that a failure there fails the call on
/// every member instead of leaving them waiting for what the leader would have passed on.
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
/// it (each group's agreement, the leaders' swap, then each leader's word to its group).
pub(crate) fn barrier(inter: &CommData) -> Result<(), Error> {
    const OPERATION: &str = "barrier";
    let sides = sides_for(inter, OPERATION)?;
    let group = SimpleCommunicator::new(sides.local.clone());
    let agreed = group_agrees(&group, &Ok([0, 0]));
    let tag = inter.next_tag();
    let mut swapped = agreed.clone();
    if sides.local.rank == 0 {
        let none = Datatype::plain(0, "none");
        swapped = checked_swap(inter, tag, agreed, &[], &mut [], 1, none);
    }
    // Each leader speaks only once the remote group has all arrived.
    tell_group(&group, swapped).map_err(|cause| Error::new(OPERATION, cause))
}

/// `MPI_Allgather` on an inter-communicator: `recv` holds the remote group's `send`s in its
/// rank order. This group's parts gather at its leader, the leaders swap, and each leader
/// broadcasts what it received. The groups may send different counts (each process's
/// `recv` holds a whole block per remote rank); every process fails, none waits, where
/// anything disagrees.
pub(crate) fn all_gather<S, R>(inter: &CommData, send: &S, recv: &mut R) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
{
    const OPERATION: &str = "all_gather_into";
    let fail = |cause| Error::new(OPERATION, cause);
    let sides = sides_for(inter, OPERATION)?;
    let remote = sides.remote.len();
    let part =
        collective::check_inter_all_gather(send, recv, remote).and_then(|_| Outgoing::of(send));
    let group = SimpleCommunicator::new(sides.local.clone());
    let tag = inter.next_tag();
    let lens = part.as_ref().map(|p| [p.bytes().len(), recv.byte_len()]);
    let agreed = group_agrees(&group, &lens.map_err(Clone::clone));
    let leader = group.process_at_rank(0);
    let mut gathered = Vec::new();
    let own = agreed.and_then(|()| {
        let part = part.as_ref().map_err(Clone::clone)?.bytes();
        match sides.local.rank {
            0 => {
                gathered = vec![0u8; part.len() * sides.local.size as usize];
                leader.try_gather_into_root(part, &mut gathered[..])
            }
            _ => leader.try_gather_into(part),
        }
        .map_err(cause_of)
    });
    let swapped = match sides.local.rank {
        0 => swap_into(inter, tag, own, Some(&gathered), recv, 1, OPERATION),
        _ => own,
    };
    tell_group(&group, swapped).map_err(fail)?;
    leader.try_broadcast_into(recv)
}

/// `MPI_Allreduce` on an inter-communicator: `recv` holds the reduction of the remote group's
/// `send`s. Each group reduces its own, the leaders swap the results, and each broadcasts
/// what it received; every process fails, none waits, where anything disagrees.
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
    let fail = |cause| Error::new(OPERATION, cause);
    let sides = sides_for(inter, OPERATION)?;
    let group = SimpleCommunicator::new(sides.local.clone());
    let checked = collective::check_all_reduce(send, recv, &op).map(|_| [recv.byte_len(); 2]);
    let tag = inter.next_tag();
    let own = group_agrees(&group, &checked)
        .and_then(|()| group.try_all_reduce_into(send, recv, op).map_err(cause_of));
    let swapped = match sides.local.rank {
        0 => swap_into(inter, tag, own, None, recv, 1, OPERATION),
        _ => own,
    };
    tell_group(&group, swapped).map_err(fail)?;
    group.process_at_rank(0).try_broadcast_into(recv)
}

/// `MPI_Alltoall` on an inter-communicator: block j of `send` goes to remote rank j, and
/// block j of `recv` comes from it. The blocks each way may differ in length (as the groups'
/// counts do); a process whose checks fail still tells each partner so, and every pair that
/// disagrees fails on both sides rather than wait.
pub(crate) fn all_to_all<S, R>(inter: &CommData, send: &S, recv: &mut R) -> Result<(), Error>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
{
    const OPERATION: &str = "all_to_all_into";
    let sides = sides_for(inter, OPERATION)?;
    let remote = sides.remote.len();
    let sent =
        collective::check_inter_all_to_all(send, recv, remote).and_then(|_| Outgoing::of(send));
    let tag = inter.next_tag();
    let (own, out) = match &sent {
        Ok(sent) => (Ok(()), sent.bytes()),
        Err(cause) => (Err(cause.clone()), &[][..]),
    };
    swap_into(inter, tag, own, Some(out), recv, remote as u32, OPERATION)
        .map_err(|cause| Error::new(OPERATION, cause))
}
