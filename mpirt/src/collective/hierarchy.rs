//! Short blocking barriers, broadcasts, reductions, all-reductions and all-gathers on a
//! communicator whose ranks lie on several hosts, several on some: shared memory inside each
//! host, messages between hosts (MPICH's and Open MPI's hierarchical collectives, UCC's node
//! leaders).
//!
//! The communicator's first blocking collective that may meet in shared memory learns every
//! rank's host (`Hosts`: from the PML's table, which the ranks traded at wire-up, with no
//! message; the UCX PML keeps no such table, and there the ranks all-gather their host
//! names once), and where the ranks span several hosts with more than one on some,
//! makes two parts of the communicator once: its ranks on this host (ranked as here), with
//! their own shared-memory area, and one leader per host (the host's lowest rank; the hosts
//! ordered by their lowest rank), on context ids derived from the communicator's, so no
//! agreement is needed. Every call then runs three phases: the host's ranks give their part
//! to their leader through the host's area; the leaders trade one block each by messages,
//! each to each in one round (`Leaders::exchange`; a broadcast's leader sends to each other);
//! each leader publishes the call's outcome to its host's ranks through the area (`Shape`
//! says what the blocks and the releases carry). The
//! leaders' messages need no plan: the leaders' list, their buffers and their handles are
//! made once and reused. One round of each to each costs every leader a message per other
//! host, which beats a tree's rounds of latency for the few hosts a job spans here; many
//! hosts would want a tree or recursive doubling instead. Each block and each release
//! carries a status ahead of the data: a rank that refused its arguments, or a length its
//! host found wrong, reaches every rank as that rank's error (named by its rank here), never
//! as a hang or a result short of a contribution.
//!
//! Every rank enters the path whatever its length, and the path decides together whether the
//! call fits it ([`HIERARCHY_MAX`]), as the host's area does: each host's area finds whether
//! its ranks' lengths agree, each leader says so in its block with its host's length, and
//! every leader draws the same verdict from all the blocks (an error, lengths that differ
//! between hosts, too long: by messages, or fine), which its release tells its host's ranks.
//! So ranks whose lengths disagree across the limit all fail, naming a rank whose length is
//! not their own, rather than some waiting here for others gone by messages. A broadcast's
//! root's length decides: too long, every rank goes by messages; else the ranks whose length
//! differs fail naming the root. A leader whose messages failed (a receive it could not post
//! leaves its peer's block unmatched, which a later receive would take) says so in every
//! later call instead of receiving, so every rank fails naming it rather than read another
//! call's block (a broadcast, which its root's leader sends without an answer: the failed
//! leader's host's ranks, or where it leads the root's host, the others). `MPIRT_TEST_FAULT`
//! (`fault`) makes such failures happen in the tests.
//!
//! A reduction folds each host's vectors in rank order in the area, then the hosts' partial
//! results in the leaders' order. That is rank order only where each host holds a run of
//! consecutive ranks (`Hierarchy::keeps_rank_order`): a non-commutative operation on other
//! placements goes by messages over the whole communicator instead. An all-gather puts each
//! host's vectors in rank order in its leader's block, and each rank's vector in its place in
//! the result (`Hierarchy::place_in_host`), on any placement; it fits the path where the whole
//! result does. A gather does not take the path: every rank would wait for the verdict, where
//! by messages a rank other than the root leaves once its vector is sent (measured 3 to 4
//! times slower with OSU's gather across 4 hosts). Gathers, scatters, reduce-scatters, short
//! all-to-alls and all-gathers of parts of any length go by messages instead, on plans that
//! go through each host's leader (`algorithms::hosts`) over the hosts found here
//! ([`Hierarchy::placement`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use pml::{Handle, Pml, PmlError, SendMode, SourceSel, Tag, TagSel};

use crate::communicator::{host_record, CommData, HOST_NAME_MAX};
use crate::context;
use crate::datatype::Datatype;
use crate::environment::with_engine;
use crate::error::{Cause, Error};
use crate::point_to_point::wait_handle;

use super::algorithms::hosts::Placement;
use super::op::{Operation, SystemOperation};
use super::shared::{self, Area, SEGMENT, SHARED_MAX};
use super::{blocking, calls};

/// The runtime tag of the leaders' blocks, on the leaders' own context: one message from each
/// leader to each other in every call, posted and received in call order, so the order of a
/// pair's messages keeps calls apart.
const LEADERS_TAG: Tag = -5;

/// The status ahead of each block and release (`Status`): its kind, a rank here, a length.
const STATUS: usize = 16;
/// A disagreement's status: the status, then the other rank and length it names.
const DISAGREED: usize = 2 * STATUS;
/// The bytes of a leader's block and of a host's release, status and all: a cell of the
/// host's area, which carries the release in one call.
const SLOT: usize = SEGMENT;
/// The longest vector of a barrier, a broadcast or a reduction that the hierarchical path
/// takes: its release, status and all, fits the area's one-call limit, as the host's
/// reduction does. Longer vectors go by messages over the whole communicator, on every
/// rank together: the hierarchy decides that (`Status::ByMessages`), not each rank alone.
pub(crate) const HIERARCHY_MAX: usize = SHARED_MAX - STATUS;
/// The longest result of an all-gather that the hierarchical path takes: its release, status
/// and all, fills a slot (each rank's vector still fits the area's one-call limit on its
/// way to its leader). At `HIERARCHY_MAX`, 8 ranks of 512 bytes passed it and ran the
/// path's agreement, then the messages: 1.48 times the time by messages alone.
const ALL_GATHER_MAX: usize = SLOT - STATUS;

/// Every rank's host, as the PML learned them at wire-up (or the ranks traded them).
pub(crate) struct Hosts {
    /// Each rank's host, numbered by the host's lowest rank (host 0 holds rank 0).
    host_of: Vec<u32>,
    /// The lowest rank of each host: its leader.
    leaders: Vec<u32>,
}

impl Hosts {
    /// Learns every rank's host: from the PML's table of its ranks' hosts, through the
    /// communicator's group, where the PML has one (every rank's holds the same hosts, so
    /// no message is needed); else by trading host names (collective over `comm`).
    pub(crate) fn of(comm: &CommData, operation: &'static str) -> Result<Hosts, Error> {
        let known = with_engine(|e| {
            let host = |r: u32| e.host_of(comm.world_rank(r));
            Ok((0..comm.size)
                .map(host)
                .all(|h| h.is_some())
                .then(|| Hosts::grouped(comm.size, |a, b| host(a) == host(b))))
        })
        .map_err(|cause| Error::new(operation, cause))?;
        if let Some(hosts) = known {
            return Ok(hosts);
        }
        let mine = host_record();
        let mut all = vec![[0u8; HOST_NAME_MAX]; comm.size as usize];
        blocking(comm, operation, || {
            calls::all_gather(comm, &mine[..], &mut all[..])
        })?;
        Ok(Hosts::grouped(comm.size, |a, b| {
            all[a as usize] == all[b as usize]
        }))
    }

    /// The hosts of `size` ranks, where `same_host` says whether two ranks share one.
    fn grouped(size: u32, same_host: impl Fn(u32, u32) -> bool) -> Hosts {
        let mut leaders: Vec<u32> = Vec::new();
        let host_of = (0..size)
            .map(|r| match leaders.iter().position(|&l| same_host(l, r)) {
                Some(host) => host as u32,
                None => {
                    leaders.push(r);
                    leaders.len() as u32 - 1
                }
            })
            .collect();
        Hosts { host_of, leaders }
    }

    /// The host of `rank`, numbered by the host's lowest rank.
    pub(crate) fn host(&self, rank: u32) -> u32 {
        self.host_of[rank as usize]
    }

    /// Whether the ranks lie on more than one host.
    fn several(&self) -> bool {
        self.leaders.len() > 1
    }

    /// Every rank's host, as the plans through each host's leader take them (which rank is
    /// on which host, in rank order).
    fn placement(&self) -> Placement<'_> {
        Placement::new(&self.host_of)
    }

    /// Whether the hierarchical path helps and can run: several hosts, some with more than
    /// one rank, none with more than the host's area takes.
    pub(crate) fn worth_a_hierarchy(&self, most_in_an_area: u32) -> bool {
        let on = |h: u32| self.placement().members(h).len() as u32;
        let hosts = self.leaders.len() as u32;
        self.several()
            && (0..hosts).any(|h| on(h) > 1)
            && (0..hosts).all(|h| on(h) <= most_in_an_area)
    }
}

/// A communicator's parts for the hierarchical path, made by its first fitting collective.
pub(crate) struct Hierarchy {
    /// The communicator's ranks on this host, ranked as there, and their area.
    host: CommData,
    area: Rc<Area>,
    /// The ranks here of this host's ranks, in rank order (a host rank's rank here).
    members: Vec<u32>,
    /// Each rank's host (see `Hosts`).
    host_of: Vec<u32>,
    /// Each rank's place among its host's ranks, in rank order: where its vector lies in its
    /// leader's block of an all-gather.
    place_in_host: Vec<u32>,
    /// The leaders' messages, on the leader only.
    leaders: Option<Leaders>,
    /// Whether each host holds a run of consecutive ranks, hosts in rank order: then folding
    /// the hosts' partial results in the leaders' order keeps rank order.
    keeps_rank_order: bool,
    /// A release: status, then the call's vector (reused: no allocation per call).
    release: RefCell<Vec<u8>>,
}

/// How a call's data follows the statuses where the call is fine: what this leader's block
/// and this host's release carry after their status.
#[derive(Clone, Copy)]
struct Shape {
    /// Whether the call fits the path, by this rank's length (the same on every rank whose
    /// length agrees with it).
    fits: bool,
    /// The bytes after the status in this leader's block: its host's part.
    block: usize,
    /// The bytes after the status in this host's release.
    release: usize,
}

impl Shape {
    /// One vector of `len` bytes in every block and every release: a barrier's (no bytes),
    /// a reduction's.
    fn same(len: usize) -> Shape {
        Shape {
            fits: len <= HIERARCHY_MAX,
            block: len,
            release: len,
        }
    }
}

/// The leaders' part: each leader's rank here, and the blocks they trade.
struct Leaders {
    comm: CommData,
    /// Each leader's rank here, in the leaders' order (the hosts').
    ranks: Vec<u32>,
    /// Every leader's block of the current call, in the leaders' order (reused).
    blocks: RefCell<Vec<u8>>,
    /// The handles of a call's messages (reused).
    handles: RefCell<Vec<Handle>>,
    /// Whether this leader's messages failed in an earlier call (see
    /// [`Leaders::refuse_if_broken`]).
    broken: Cell<bool>,
}

/// What a status says: a leader's block says it for its host, a release for the call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    /// The vector follows: `len` bytes (a broadcast's root's, `rank` here).
    Fine { rank: u32, len: usize },
    /// The vectors are `len` bytes, too long for the path: every rank goes by messages.
    ByMessages { len: usize },
    /// The rank it names refused its arguments.
    Refused { rank: u32 },
    /// Rank `rank` gave `len` bytes where rank `with` gave `with_len`.
    Disagreed {
        rank: u32,
        len: usize,
        with: u32,
        with_len: usize,
    },
    /// The leader it names failed in the exchange between hosts (its own error says why).
    LeaderFailed { leader: u32 },
}

impl Status {
    /// The length of the vectors it is for, where it names one the hosts agree on.
    fn agreed_len(self) -> Option<usize> {
        match self {
            Status::Fine { len, .. } | Status::ByMessages { len } => Some(len),
            _ => None,
        }
    }

    /// Writes the status at the start of `out`; its length (a `Fine` one's data follows it).
    fn write(self, out: &mut [u8]) -> usize {
        let (kind, rank, len) = match self {
            Status::Fine { rank, len } => (0u32, rank, len),
            Status::ByMessages { len } => (1, 0, len),
            Status::Refused { rank } => (2, rank, 0),
            Status::Disagreed { rank, len, .. } => (3, rank, len),
            Status::LeaderFailed { leader } => (4, leader, 0),
        };
        out[..4].copy_from_slice(&kind.to_ne_bytes());
        out[4..8].copy_from_slice(&rank.to_ne_bytes());
        out[8..STATUS].copy_from_slice(&(len as u64).to_ne_bytes());
        if let Status::Disagreed { with, with_len, .. } = self {
            out[STATUS..STATUS + 4].copy_from_slice(&with.to_ne_bytes());
            out[STATUS + 8..DISAGREED].copy_from_slice(&(with_len as u64).to_ne_bytes());
            return DISAGREED;
        }
        STATUS
    }

    /// The length of a block or release it starts that carries, where fine, `data` bytes
    /// after it.
    fn carrying(self, data: usize) -> usize {
        match self {
            Status::Fine { .. } => STATUS + data,
            Status::Disagreed { .. } => DISAGREED,
            _ => STATUS,
        }
    }

    /// The length of the block or release it starts, where a `Fine` one carries its vector.
    fn block_len(self) -> usize {
        match self {
            Status::Fine { len, .. } => self.carrying(len),
            _ => self.carrying(0),
        }
    }

    /// The status at the start of `bytes`, a block or a release that `write` made.
    fn read(bytes: &[u8]) -> Status {
        let word = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let long =
            |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes")) as usize;
        let (rank, len) = (word(4), long(8));
        match word(0) {
            0 => Status::Fine { rank, len },
            1 => Status::ByMessages { len },
            2 => Status::Refused { rank },
            3 => Status::Disagreed {
                rank,
                len,
                with: word(STATUS),
                with_len: long(STATUS + 8),
            },
            _ => Status::LeaderFailed { leader: rank },
        }
    }

    /// What the status of a release means for a rank whose own vector is `own` bytes long:
    /// `true` where the vector follows, `false` where every rank goes by messages, else the
    /// error, naming a rank whose length is not `own` for a disagreement.
    fn outcome(self, own: usize) -> Result<bool, Cause> {
        match self {
            Status::Fine { len, .. } if len == own => Ok(true),
            Status::Fine { rank, len } => Err(Cause::LengthDisagrees {
                peer: rank as i32,
                expected: own,
                got: len,
            }),
            Status::ByMessages { .. } => Ok(false),
            Status::Refused { rank } => Err(Cause::PeerRefused { peer: rank as i32 }),
            Status::Disagreed {
                rank,
                len,
                with,
                with_len,
            } => {
                let (peer, got) = if len == own {
                    (with, with_len)
                } else {
                    (rank, len)
                };
                Err(Cause::LengthDisagrees {
                    peer: peer as i32,
                    expected: own,
                    got,
                })
            }
            Status::LeaderFailed { leader } => Err(Cause::LeaderFailed {
                leader: leader as i32,
            }),
        }
    }
}

impl Hierarchy {
    /// Makes the parts (collective over `comm`); `None` where some host's area could not be
    /// set up, which every rank learns: then the calls go by messages, on every rank
    /// together (a rank that failed here says why under `rsrun --verbose`).
    pub(crate) fn set_up(
        comm: &CommData,
        operation: &'static str,
        hosts: Hosts,
    ) -> Result<Option<Hierarchy>, Error> {
        let mine = hosts.host_of[comm.rank as usize];
        let members = hosts.placement().members(mine);
        let world = |ranks: &[u32]| ranks.iter().map(|&r| comm.world_rank(r)).collect();
        let host = comm.part(world(&members), context::host_part(comm.context));
        let leaders = (members[0] == comm.rank).then(|| Leaders {
            comm: comm.part(world(&hosts.leaders), context::leaders_part(comm.context)),
            ranks: hosts.leaders.clone(),
            blocks: RefCell::default(),
            handles: RefCell::default(),
            broken: Cell::new(false),
        });
        // A failure here must not keep this rank from the agreement below, which the other
        // hosts' ranks wait in: it makes this host's area unavailable instead.
        let area = shared::area(&host, operation, 0).and_then(|area| {
            if let Some(area) = &area {
                area.spin_as_messages()
                    .map_err(|cause| Error::new(operation, cause))?;
            }
            Ok(area)
        });
        let area = area.unwrap_or_else(|error| {
            if shared::verbose() {
                bootstrap::output::say(&format!(
                    "mpirt: rank {}: this host's area for the hierarchical collectives \
                     failed: {error}",
                    comm.world_rank(comm.rank)
                ));
            }
            None
        });
        // Every host must have its area, or no host uses the hierarchy.
        let ready = [u8::from(area.is_some())];
        let mut everywhere = [0u8];
        blocking(comm, operation, || {
            calls::all_reduce(
                comm,
                &ready[..],
                &mut everywhere[..],
                SystemOperation::min(),
            )
        })?;
        let keeps_rank_order = hosts.host_of.windows(2).all(|w| w[0] <= w[1]);
        let mut on_host = vec![0u32; hosts.leaders.len()];
        let place_in_host = (hosts.host_of.iter())
            .map(|&h| {
                on_host[h as usize] += 1;
                on_host[h as usize] - 1
            })
            .collect();
        Ok(area.filter(|_| everywhere[0] == 1).map(|area| Hierarchy {
            host,
            area,
            members,
            host_of: hosts.host_of,
            place_in_host,
            leaders,
            keeps_rank_order,
            release: RefCell::new(vec![0; SLOT]),
        }))
    }

    /// Whether a reduction under an operation that is `commutative` or not may take this
    /// path: in rank order only where the placement keeps it.
    pub(crate) fn serves(&self, commutative: bool) -> bool {
        commutative || self.keeps_rank_order
    }

    /// Every rank's host, for the plans by messages that go through each host's leader.
    pub(crate) fn placement(&self) -> Placement<'_> {
        Placement::new(&self.host_of)
    }

    /// The number of hosts and the ranks on this one, for `rsrun --verbose`.
    pub(crate) fn describe(&self) -> String {
        let hosts = self.placement().hosts();
        format!(
            "hierarchical over {hosts} hosts, {} of them on this host",
            self.host.size
        )
    }

    /// This rank's rank here.
    fn me(&self) -> u32 {
        self.members[self.host.rank as usize]
    }

    /// A cause the host's area found, its peer (a rank of the host) named by its rank here.
    fn named_here(&self, cause: Cause) -> Cause {
        let here = |peer: i32| self.members[peer as usize] as i32;
        match cause {
            Cause::PeerRefused { peer } => Cause::PeerRefused { peer: here(peer) },
            Cause::LengthDisagrees {
                peer,
                expected,
                got,
            } => Cause::LengthDisagrees {
                peer: here(peer),
                expected,
                got,
            },
            other => other,
        }
    }

    /// The status a leader (`me`, its rank here) sends for its host, whose phase in the
    /// area found `found` (its peers named by rank here) for the leader's vector of `len`
    /// bytes, for a call that `fits` the path by that length: whether it fit, or the first
    /// cause.
    fn status_of(found: &Result<bool, Cause>, me: u32, len: usize, fits: bool) -> Status {
        match *found {
            Ok(true) if fits => Status::Fine { rank: me, len },
            Ok(_) => Status::ByMessages { len },
            Err(Cause::PeerRefused { peer }) => Status::Refused { rank: peer as u32 },
            Err(Cause::LengthDisagrees { peer, got, .. }) => Status::Disagreed {
                rank: peer as u32,
                len: got,
                with: me,
                with_len: len,
            },
            // This leader's own refusal, or its failure in the area.
            Err(_) => Status::Refused { rank: me },
        }
    }

    /// Publishes the leader's `release` (its status `verdict`, `Some` on the leader only,
    /// written at its start, then `data` bytes where fine) to the host's ranks (each takes
    /// part, whatever it found before); this rank's error is its own earlier one (`found`),
    /// else the release's, for a vector of `len` bytes: `true` where the call is fine (the
    /// release carries its data), `false` where every rank goes by messages.
    fn release(
        &self,
        release: &mut [u8],
        (verdict, data): (Option<Status>, usize),
        found: Result<bool, Cause>,
        len: usize,
    ) -> Result<bool, Cause> {
        let released = match verdict {
            Some(verdict) => {
                verdict.write(release);
                let end = verdict.carrying(data);
                self.area.broadcast_any(0, Some(&release[..end]), |_| {})
            }
            None => self
                .area
                .broadcast_any(0, None, |data| release[..data.len()].copy_from_slice(data)),
        };
        let released = released.map_err(|c| self.named_here(c));
        found?;
        released?;
        Status::read(release).outcome(len)
    }

    /// The leaders' exchange of their hosts' statuses (`mine`, this leader's, its host's
    /// part in `release` after the status where fine, as `shape` says), then the call's
    /// verdict, the same on every leader: the first error in the leaders' order, else a
    /// disagreement between the hosts' lengths (named against rank 0's, the first leader's),
    /// else by messages where the vectors are too long, else fine, with `combine` over every
    /// leader's block in the leaders' order into `release`'s data. This leader's own failure
    /// in the exchange is its error, and the call's verdict for its host's ranks.
    fn settle(
        leaders: &Leaders,
        mine: Status,
        shape: Shape,
        release: &mut [u8],
        combine: impl FnOnce(&[u8], &mut [u8]),
    ) -> (Status, Result<(), Cause>) {
        mine.write(release);
        let end = mine.carrying(shape.block);
        let failed = Status::LeaderFailed {
            leader: leaders.me(),
        };
        if let Err(cause) = leaders.exchange(&release[..end]) {
            return (failed, Err(cause));
        }
        let blocks = leaders.blocks.borrow();
        let statuses = || blocks.chunks_exact(SLOT).map(Status::read);
        if let Some(bad) = statuses().find(|s| s.agreed_len().is_none()) {
            return (bad, Ok(()));
        }
        // Every status names a length now, in the leaders' order.
        let mut lens = statuses().filter_map(Status::agreed_len).enumerate();
        let (_, reference) = lens.next().expect("at least one leader");
        if let Some((l, len)) = lens.find(|&(_, len)| len != reference) {
            let disagreed = Status::Disagreed {
                rank: leaders.ranks[l],
                len,
                with: leaders.ranks[0],
                with_len: reference,
            };
            return (disagreed, Ok(()));
        }
        if statuses().any(|s| matches!(s, Status::ByMessages { .. })) {
            return (Status::ByMessages { len: reference }, Ok(()));
        }
        combine(&blocks, &mut release[STATUS..STATUS + shape.release]);
        (
            Status::Fine {
                rank: leaders.me(),
                len: reference,
            },
            Ok(()),
        )
    }

    /// The host's phase's outcome on this rank (`found`, for its vector of `len` bytes; on
    /// the leader, its host's part in `release` after the status, as `shape` says), then the
    /// leaders' exchange and the release: `true` where `release` carries the call's data,
    /// `false` where every rank goes by messages, else this rank's error.
    fn finish(
        &self,
        release: &mut [u8],
        found: Result<bool, Cause>,
        len: usize,
        shape: Shape,
        combine: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<bool, Cause> {
        let Some(leaders) = &self.leaders else {
            return self.release(release, (None, shape.release), found, len);
        };
        let mine = Self::status_of(&found, leaders.me(), len, shape.fits);
        let (verdict, exchanged) = Self::settle(leaders, mine, shape, release, combine);
        let found = found.and_then(|fit| exchanged.map(|()| fit));
        self.release(release, (Some(verdict), shape.release), found, len)
    }

    /// Meets every rank of the communicator.
    pub(crate) fn barrier(&self) -> Result<(), Cause> {
        let leader = self.host.rank == 0;
        let gathered = self.area.gather(0, &[], leader.then_some(&mut [][..]));
        let found = gathered.map_err(|c| self.named_here(c));
        let mut release = self.release.borrow_mut();
        self.finish(&mut release, found, 0, Shape::same(0), |_, _| {})
            .map(drop)
    }

    /// `recv = send_0 ∘ … ∘ send_(n-1)` over every rank's `send`, in `recv` where given
    /// (every rank's for an all-reduce, the root's for a reduction: the others learn only
    /// of errors); `false`, with nothing reduced, where the vectors are too long for the
    /// path (every rank learns it: then all go by messages).
    pub(crate) fn reduce(
        &self,
        send: &[u8],
        recv: Option<&mut [u8]>,
        datatype: Datatype,
        op: &dyn Operation,
    ) -> Result<bool, Cause> {
        let len = send.len();
        let mut release = self.release.borrow_mut();
        // The host's partial result, where its vectors fit the area (longer ones it only
        // counts, and then nothing is written here).
        let partial = &mut release[STATUS..STATUS + len.min(SHARED_MAX)];
        let partial = self.leaders.is_some().then_some(partial);
        let reduced = self.area.reduce(0, send, partial, datatype, op, SHARED_MAX);
        let found = reduced.map_err(|c| self.named_here(c));
        let fine = self.finish(
            &mut release,
            found,
            len,
            Shape::same(len),
            |blocks, result| {
                // From the last host down, each partial result applied from the left keeps
                // the hosts' order.
                let mut parts = blocks
                    .chunks_exact(SLOT)
                    .map(|block| &block[STATUS..STATUS + len])
                    .rev();
                result.copy_from_slice(parts.next().expect("at least one leader"));
                for part in parts {
                    op.apply(datatype, part, result);
                }
            },
        )?;
        if let (true, Some(recv)) = (fine, recv) {
            recv.copy_from_slice(&release[STATUS..STATUS + len]);
        }
        Ok(fine)
    }

    /// Every rank's `send` in rank order in every rank's `recv`; `false`, with nothing
    /// copied, where the vectors are too long for the path (every rank learns it: then all go
    /// by messages). Each host's vectors go to its leader through the area, each leader's
    /// block to every leader, and the vectors in rank order in the releases.
    pub(crate) fn all_gather(&self, send: &[u8], recv: &mut [u8]) -> Result<bool, Cause> {
        let len = send.len();
        let whole = len * self.host_of.len();
        let shape = Shape {
            fits: whole <= ALL_GATHER_MAX,
            block: len * self.members.len(),
            release: whole,
        };
        let mut release = self.release.borrow_mut();
        // The host's vectors in its leader's block, where the call fits the path (else the
        // area only counts them, and nothing is written here).
        let room = if shape.fits { shape.block } else { 0 };
        let part = &mut release[STATUS..STATUS + room];
        let part = self.leaders.is_some().then_some(part);
        let gathered = self
            .area
            .to_root(0, send, part, SHARED_MAX, |carried, part| {
                if shape.fits {
                    self.area.gather_into(carried.phase, send, part);
                }
            });
        let found = gathered.map_err(|c| self.named_here(c));
        let fine = self.finish(&mut release, found, len, shape, |blocks, result| {
            for (r, vector) in result.chunks_exact_mut(len.max(1)).enumerate() {
                let at =
                    self.host_of[r] as usize * SLOT + STATUS + self.place_in_host[r] as usize * len;
                vector.copy_from_slice(&blocks[at..at + len]);
            }
        })?;
        if fine {
            recv.copy_from_slice(&release[STATUS..STATUS + whole]);
        }
        Ok(fine)
    }

    /// Takes part in a call (a reduction, an all-reduce or an all-gather) only to
    /// say that this rank refused its arguments: in its host's area, and as a leader among
    /// the leaders, so that every rank fails naming it instead of waiting.
    pub(crate) fn refuse(&self) {
        // A failure here leaves this rank's own cause the one to report.
        let _ = self.area.refuse();
        let found = Err(Cause::PeerRefused {
            peer: self.me() as i32,
        });
        let mut release = self.release.borrow_mut();
        let _ = self.finish(&mut release, found, 0, Shape::same(0), |_, _| {});
    }

    /// The root's `buf` (`root` a rank here) in every rank's `buf`; the root's length
    /// decides, as in the host's area: `false`, with nothing copied, where the root's is too
    /// long for the path (every rank learns it: then all go by messages); a rank whose
    /// length is not the root's fails naming it.
    pub(crate) fn broadcast(&self, root: u32, buf: &mut [u8]) -> Result<bool, Cause> {
        let len = buf.len();
        let mut release = self.release.borrow_mut();
        let root_host = self.host_of[root as usize];
        let on_root_host = self.host_of[self.members[0] as usize] == root_host;
        let mut found = Ok(());
        if on_root_host {
            // The root's host: its ranks take the root's release from the area at once.
            let in_host = self.members.binary_search(&root).expect("the root's host") as u32;
            let got = if self.host.rank == in_host {
                let said = match len <= HIERARCHY_MAX {
                    true => Status::Fine { rank: root, len },
                    false => Status::ByMessages { len },
                };
                said.write(&mut release);
                let end = said.block_len();
                if len <= HIERARCHY_MAX {
                    release[STATUS..end].copy_from_slice(buf);
                }
                self.area
                    .broadcast_any(in_host, Some(&release[..end]), |_| {})
            } else {
                self.area.broadcast_any(in_host, None, |data| {
                    release[..data.len()].copy_from_slice(data)
                })
            };
            found = got.map_err(|c| self.named_here(c));
        }
        if let Some(leaders) = &self.leaders {
            if found.is_err() {
                // The other hosts fail with this one rather than wait for bytes it lacks.
                let failed = Status::LeaderFailed {
                    leader: leaders.me(),
                };
                failed.write(&mut release);
            }
            if let Err(cause) = leaders.spread(&mut release, root_host) {
                let failed = Status::LeaderFailed {
                    leader: leaders.me(),
                };
                failed.write(&mut release);
                found = found.and(Err(cause));
            }
        }
        let fine = match on_root_host {
            true => {
                found?;
                Status::read(&release).outcome(len)?
            }
            false => {
                let verdict = self.leaders.is_some().then(|| Status::read(&release));
                // The root's vector, whose length may not be this leader's.
                let data = match verdict {
                    Some(Status::Fine { len, .. }) => len,
                    _ => 0,
                };
                let found = found.map(|()| true);
                self.release(&mut release, (verdict, data), found, len)?
            }
        };
        if fine {
            buf.copy_from_slice(&release[STATUS..STATUS + len]);
        }
        Ok(fine)
    }
}

impl Leaders {
    /// This leader's rank in the communicator.
    fn me(&self) -> u32 {
        self.ranks[self.comm.rank as usize]
    }

    /// Every leader's `mine` (at most `SLOT` bytes; each leader's of its own length)
    /// in its slot of `blocks` (`SLOT` bytes a leader), in the leaders' order: one
    /// message from each to each, all posted before any is awaited. A leader whose messages
    /// failed before (`broken`) sends only that, and receives nothing.
    fn exchange(&self, mine: &[u8]) -> Result<(), Cause> {
        let me = self.comm.rank as usize;
        let mut blocks = self.blocks.borrow_mut();
        blocks.resize(self.ranks.len() * SLOT, 0);
        let mut handles = self.handles.borrow_mut();
        handles.clear();
        let mut posted = self.receives_fail().and(self.refuse_if_broken());
        for (l, slot) in blocks.chunks_exact_mut(SLOT).enumerate() {
            if l == me {
                slot[..mine.len()].copy_from_slice(mine);
                continue;
            }
            if posted.is_err() {
                break;
            }
            match self.post_recv(l as u32, slot) {
                Ok(handle) => handles.push(handle),
                Err(cause) => posted = Err(cause),
            }
        }
        let mut failed = [0u8; STATUS];
        let sent = match posted {
            Ok(()) => mine,
            Err(_) => {
                // The leaders that wait for this one's block learn of its failure.
                let end = Status::LeaderFailed { leader: self.me() }.write(&mut failed);
                &failed[..end]
            }
        };
        for l in (0..self.ranks.len() as u32).filter(|&l| l as usize != me) {
            match self.post_send(l, sent) {
                Ok(handle) => handles.push(handle),
                Err(cause) => posted = posted.and(Err(cause)),
            }
        }
        let waited = wait_all(&mut handles);
        self.mark_if_failed(posted.and(waited))
    }

    /// The block in `release` from the leader of host `from` in every leader's `release`
    /// (each leader's buffer takes any block).
    fn spread(&self, release: &mut [u8], from: u32) -> Result<(), Cause> {
        let mut handles = self.handles.borrow_mut();
        handles.clear();
        if self.comm.rank != from {
            self.mark_if_failed(self.receives_fail().and(self.refuse_if_broken()))?;
            let handle = self.post_recv(from, release);
            let received = handle.and_then(|handle| wait_handle(handle).map(drop));
            return self.mark_if_failed(received);
        }
        let mut failed = [0u8; STATUS];
        let sent = match self.refuse_if_broken() {
            Ok(()) => &release[..Status::read(release).block_len()],
            Err(_) => {
                Status::LeaderFailed { leader: self.me() }.write(&mut failed);
                &failed[..]
            }
        };
        let mut posted = Ok(());
        for l in (0..self.ranks.len() as u32).filter(|&l| l != from) {
            match self.post_send(l, sent) {
                Ok(handle) => handles.push(handle),
                Err(cause) => posted = posted.and(Err(cause)),
            }
        }
        let waited = wait_all(&mut handles);
        self.mark_if_failed(self.refuse_if_broken().and(posted).and(waited))
    }

    /// This leader's error where its messages failed in an earlier call: a receive it
    /// could not post left that call's message from its peer unmatched, which a later
    /// receive would take as its own.
    fn refuse_if_broken(&self) -> Result<(), Cause> {
        match self.broken.get() {
            true => Err(Cause::LeaderFailed {
                leader: self.me() as i32,
            }),
            false => Ok(()),
        }
    }

    /// The failure `MPIRT_TEST_FAULT` asks of the receives of this exchange, if any (see
    /// `fault`): as if the first could not be posted.
    fn receives_fail(&self) -> Result<(), Cause> {
        if !crate::fault::leader_recv_fails() {
            return Ok(());
        }
        let me = self.comm.rank;
        let from = (0..self.ranks.len() as u32).find(|&l| l != me);
        let from = self.comm.world_rank(from.expect("another leader"));
        let why = "the receive of its block could not be posted (MPIRT_TEST_FAULT)";
        Err(Cause::Messaging(PmlError::transport(from, why)))
    }

    /// Marks this leader's messages broken where `outcome` is an error (see
    /// [`Leaders::refuse_if_broken`]).
    fn mark_if_failed(&self, outcome: Result<(), Cause>) -> Result<(), Cause> {
        if outcome.is_err() {
            self.broken.set(true);
        }
        outcome
    }

    /// Posts the receive of leader `from`'s block into `slot`; the caller waits for it
    /// before `slot` may move or be read.
    fn post_recv(&self, from: u32, slot: &mut [u8]) -> Result<Handle, Cause> {
        // SAFETY: `slot` is the caller's, which waits for the receive (on an error too)
        // before it uses or frees it.
        with_engine(|e| unsafe {
            e.post_recv(
                self.comm.context,
                SourceSel::Rank(from),
                TagSel::Tag(LEADERS_TAG),
                slot.as_mut_ptr(),
                slot.len(),
            )
        })
    }

    /// Posts the send of `block` to leader `to`; the caller waits for it before `block`
    /// may change.
    fn post_send(&self, to: u32, block: &[u8]) -> Result<Handle, Cause> {
        let peer = self.comm.world_rank(to);
        // SAFETY: `block` is the caller's, which waits for the send before it returns.
        with_engine(|e| unsafe {
            e.post_send(
                self.comm.context,
                self.comm.rank,
                peer,
                LEADERS_TAG,
                SendMode::Standard,
                block.as_ptr(),
                block.len(),
            )
        })
    }
}

/// Waits for every handle of `handles` (all of them even after one fails: their buffers are
/// the caller's); the first error.
fn wait_all(handles: &mut Vec<Handle>) -> Result<(), Cause> {
    let mut first = Ok(());
    for handle in handles.drain(..) {
        first = first.and(wait_handle(handle).map(drop));
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_numbered_by_their_lowest_rank() {
        // Ranks dealt round 3 hosts, and a communicator whose ranks 1 and 4 share one.
        let of = |host: &[u32]| {
            Hosts::grouped(host.len() as u32, |a, b| {
                host[a as usize] == host[b as usize]
            })
        };
        let dealt = of(&[7, 8, 9, 7, 8, 9, 7]);
        assert_eq!(dealt.host_of, [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(dealt.leaders, [0, 1, 2]);
        assert_eq!(dealt.placement().members(0), [0, 3, 6]);
        assert!(dealt.worth_a_hierarchy(16));
        assert!(!dealt.worth_a_hierarchy(2));
        let split = of(&[5, 3, 4, 6, 3]);
        assert_eq!(split.host_of, [0, 1, 2, 3, 1]);
        assert_eq!(split.leaders, [0, 1, 2, 3]);
        assert!(split.worth_a_hierarchy(16));
        assert!(!of(&[5, 3, 4]).worth_a_hierarchy(16), "one rank a host");
        assert!(!of(&[5, 5, 5]).worth_a_hierarchy(16), "one host");
    }
}
