//! Short blocking barriers, broadcasts, reductions and all-reductions on a communicator whose
//! ranks lie on several hosts, several on some: shared memory inside each host, messages
//! between hosts (MPICH's and Open MPI's hierarchical collectives, UCC's node leaders).
//!
//! The communicator's first blocking collective that may meet in shared memory learns every
//! rank's host (`Hosts`), and where the ranks span several hosts with more than one on some,
//! makes two parts of the communicator once: its ranks on this host (ranked as here), with
//! their own shared-memory area, and one leader per host (the host's lowest rank; the hosts
//! ordered by their lowest rank), on context ids derived from the communicator's, so no
//! agreement is needed. Every call then runs three phases: the host's ranks give their part
//! to their leader through the host's area; the leaders trade one block each by messages,
//! each to each in one round (`Leaders::exchange`; a broadcast's leader sends to each other);
//! each leader publishes the call's outcome to its host's ranks through the area. The
//! leaders' messages need no plan: the leaders' list, their buffers and their handles are
//! made once and reused. One round of each to each costs every leader a message per other
//! host, which beats a tree's rounds of latency for the few hosts a job spans here; many
//! hosts would want a tree or recursive doubling instead. Each block and each release
//! carries a status ahead of the data: a rank that refused its arguments, or a length its
//! host found wrong, reaches every rank as that rank's error (named by its rank here), never
//! as a hang or a result short of a contribution. Lengths that differ between hosts (an
//! erroneous program) are found where the leaders' messages arrive, as the messages' path
//! finds them.
//!
//! A reduction folds each host's vectors in rank order in the area, then the hosts' partial
//! results in the leaders' order. That is rank order only where each host holds a run of
//! consecutive ranks (`Hierarchy::keeps_rank_order`): a non-commutative operation on other
//! placements goes by messages over the whole communicator instead.

use std::cell::RefCell;
use std::rc::Rc;

use pml::{Handle, Pml, SendMode, SourceSel, Tag, TagSel};

use crate::communicator::{host_record, CommData, HOST_NAME_MAX};
use crate::context;
use crate::datatype::Datatype;
use crate::environment::with_engine;
use crate::error::{Cause, Error};
use crate::point_to_point::wait_handle;

use super::op::{Operation, SystemOperation};
use super::shared::{self, Area, SHARED_MAX};
use super::{blocking, calls};

/// The runtime tag of the leaders' blocks, on the leaders' own context: one message from each
/// leader to each other in every call, posted and received in call order, so the order of a
/// pair's messages keeps calls apart.
const LEADERS_TAG: Tag = -5;

/// The status ahead of each block and release: what went wrong (`Status`), the rank here it
/// names, and a length.
const STATUS: usize = 16;
/// The longest vector the hierarchical path takes: its release, status and all, fits a cell
/// of the host's area.
pub(crate) const HIERARCHY_MAX: usize = SHARED_MAX - STATUS;

/// Every rank's host, as the communicator's ranks traded them.
pub(crate) struct Hosts {
    /// Each rank's host, numbered by the host's lowest rank (host 0 holds rank 0).
    host_of: Vec<u32>,
    /// The lowest rank of each host: its leader.
    leaders: Vec<u32>,
}

impl Hosts {
    /// Learns every rank's host (collective over `comm`, by messages).
    pub(crate) fn of(comm: &CommData, operation: &'static str) -> Result<Hosts, Error> {
        let mine = host_record();
        let mut all = vec![[0u8; HOST_NAME_MAX]; comm.size as usize];
        blocking(comm, operation, || {
            calls::all_gather(comm, &mine[..], &mut all[..])
        })?;
        let mut leaders: Vec<u32> = Vec::new();
        let host_of = (0..comm.size)
            .map(|r| {
                let name = &all[r as usize];
                match leaders.iter().position(|&l| all[l as usize] == *name) {
                    Some(host) => host as u32,
                    None => {
                        leaders.push(r);
                        leaders.len() as u32 - 1
                    }
                }
            })
            .collect();
        Ok(Hosts { host_of, leaders })
    }

    /// Whether the ranks lie on more than one host.
    fn several(&self) -> bool {
        self.leaders.len() > 1
    }

    /// The ranks on `host`, in rank order.
    fn members(&self, host: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.host_of.len() as u32).filter(move |&r| self.host_of[r as usize] == host)
    }

    /// Whether the hierarchical path helps and can run: several hosts, some with more than
    /// one rank, none with more than the host's area takes.
    pub(crate) fn worth_a_hierarchy(&self, most_in_an_area: u32) -> bool {
        let on = |h: u32| self.members(h).count() as u32;
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
    /// The leaders' messages, on the leader only.
    leaders: Option<Leaders>,
    /// Whether each host holds a run of consecutive ranks, hosts in rank order: then folding
    /// the hosts' partial results in the leaders' order keeps rank order.
    keeps_rank_order: bool,
    /// A release: status, then the call's vector (reused: no allocation per call).
    release: RefCell<Vec<u8>>,
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
}

/// What a status says.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
enum Status {
    Fine = 0,
    /// The rank it names refused its arguments.
    Refused = 1,
    /// The rank it names gave a vector of the length it carries, which the others did not.
    Disagreed = 2,
    /// The leader it names failed in the exchange between hosts (its own error says why).
    LeaderFailed = 3,
}

/// A status as it travels.
fn status_bytes(status: Status, rank: u32, len: usize) -> [u8; STATUS] {
    let mut bytes = [0u8; STATUS];
    bytes[..4].copy_from_slice(&(status as u32).to_ne_bytes());
    bytes[4..8].copy_from_slice(&rank.to_ne_bytes());
    bytes[8..].copy_from_slice(&(len as u64).to_ne_bytes());
    bytes
}

fn is_fine(bytes: &[u8]) -> bool {
    bytes[..4] == (Status::Fine as u32).to_ne_bytes()
}

/// The error a status is for a rank whose own vector is `len` long, `None` if it is fine.
fn status_cause(bytes: &[u8], len: usize) -> Option<Cause> {
    let word = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let peer = word(4) as i32;
    let got = u64::from_ne_bytes(bytes[8..STATUS].try_into().expect("8 bytes")) as usize;
    match word(0) {
        0 => None,
        1 => Some(Cause::PeerRefused { peer }),
        2 => Some(Cause::LengthDisagrees {
            peer,
            expected: len,
            got,
        }),
        _ => Some(Cause::LeaderFailed { leader: peer }),
    }
}

impl Hierarchy {
    /// Makes the parts (collective over `comm`); `None` where some host's area could not be
    /// set up, which every rank learns: then the calls go by messages.
    pub(crate) fn set_up(
        comm: &CommData,
        operation: &'static str,
        hosts: Hosts,
    ) -> Result<Option<Hierarchy>, Error> {
        let mine = hosts.host_of[comm.rank as usize];
        let members: Vec<u32> = hosts.members(mine).collect();
        let world = |ranks: &[u32]| ranks.iter().map(|&r| comm.world_rank(r)).collect();
        let host = comm.part(world(&members), context::host_part(comm.context));
        let leaders = (members[0] == comm.rank).then(|| Leaders {
            comm: comm.part(world(&hosts.leaders), context::leaders_part(comm.context)),
            ranks: hosts.leaders.clone(),
            blocks: RefCell::default(),
            handles: RefCell::default(),
        });
        let area = shared::area(&host, operation, 0)?;
        if let Some(area) = &area {
            area.spin_as_messages()
                .map_err(|cause| Error::new(operation, cause))?;
        }
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
        Ok(area.filter(|_| everywhere[0] == 1).map(|area| Hierarchy {
            host,
            area,
            members,
            host_of: hosts.host_of,
            leaders,
            keeps_rank_order,
            release: RefCell::default(),
        }))
    }

    /// Whether a reduction under an operation that is `commutative` or not may take this
    /// path: in rank order only where the placement keeps it.
    pub(crate) fn serves(&self, commutative: bool) -> bool {
        commutative || self.keeps_rank_order
    }

    /// The number of hosts and the ranks on this one, for `rsrun --verbose`.
    pub(crate) fn describe(&self) -> String {
        let hosts = self.host_of.iter().max().map_or(0, |&h| h + 1);
        format!(
            "hierarchical over {hosts} hosts, {} of them on this host",
            self.host.size
        )
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

    /// The status a leader (`me`, its rank here) sends for its host: fine, or the first
    /// cause its host's phase found, named by rank here.
    fn status_of(found: &Result<(), Cause>, me: u32) -> [u8; STATUS] {
        match found {
            Ok(()) => status_bytes(Status::Fine, 0, 0),
            Err(Cause::PeerRefused { peer }) => status_bytes(Status::Refused, *peer as u32, 0),
            Err(Cause::LengthDisagrees { peer, got, .. }) => {
                status_bytes(Status::Disagreed, *peer as u32, *got)
            }
            // This leader's own refusal.
            Err(_) => status_bytes(Status::Refused, me, 0),
        }
    }

    /// Publishes the leader's `release` to the host's ranks (each takes part, whatever it
    /// found before); this rank's error is its own earlier one (`found`), else the
    /// release's, for a vector of `len` bytes.
    fn release(
        &self,
        release: &mut [u8],
        found: Result<(), Cause>,
        len: usize,
    ) -> Result<(), Cause> {
        let released = self
            .area
            .broadcast(0, release)
            .map_err(|c| self.named_here(c));
        found?;
        match released? {
            true => status_cause(&release[..STATUS], len).map_or(Ok(()), Err),
            false => unreachable!("a release fits the host's area"),
        }
    }

    /// The leaders' exchange of the blocks in `release` (status, then `len` bytes), then
    /// `combine` over every leader's block in the leaders' order into `release`'s vector
    /// where every status is fine; else the first status that is not goes into `release`.
    /// This leader's own failure in the exchange is its error, and its host's ranks learn
    /// of it as the leader's.
    fn settle(
        leaders: &Leaders,
        release: &mut [u8],
        combine: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<(), Cause> {
        let block = release.len();
        if let Err(cause) = leaders.exchange(release) {
            release[..STATUS].copy_from_slice(&status_bytes(Status::LeaderFailed, leaders.me(), 0));
            return Err(cause);
        }
        let blocks = leaders.blocks.borrow();
        match blocks.chunks_exact(block).find(|b| !is_fine(b)) {
            Some(bad) => release[..STATUS].copy_from_slice(&bad[..STATUS]),
            None => combine(&blocks, &mut release[STATUS..]),
        }
        Ok(())
    }

    /// Meets every rank of the communicator.
    pub(crate) fn barrier(&self) -> Result<(), Cause> {
        let leader = self.host.rank == 0;
        let gathered = self.area.gather(0, &[], leader.then_some(&mut [][..]));
        let mut found = gathered.map(drop).map_err(|c| self.named_here(c));
        let mut release = self.release.borrow_mut();
        release.resize(STATUS, 0);
        if let Some(leaders) = &self.leaders {
            release.copy_from_slice(&Self::status_of(&found, leaders.me()));
            found = found.and(Self::settle(leaders, &mut release, |_, _| {}));
        }
        self.release(&mut release, found, 0)
    }

    /// `recv = send_0 ∘ … ∘ send_(n-1)` over every rank's `send`, in `recv` where given
    /// (every rank's for an all-reduce, the root's for a reduction: the others learn only
    /// of errors).
    pub(crate) fn reduce(
        &self,
        send: &[u8],
        recv: Option<&mut [u8]>,
        datatype: Datatype,
        op: &dyn Operation,
    ) -> Result<(), Cause> {
        let len = send.len();
        let mut release = self.release.borrow_mut();
        release.resize(STATUS + len, 0);
        let partial = self.leaders.is_some().then_some(&mut release[STATUS..]);
        let reduced = self.area.reduce(0, send, partial, datatype, op);
        let mut found = reduced.map(drop).map_err(|c| self.named_here(c));
        if let Some(leaders) = &self.leaders {
            release[..STATUS].copy_from_slice(&Self::status_of(&found, leaders.me()));
            let exchanged = Self::settle(leaders, &mut release, |blocks, result| {
                // From the last host down, each partial result applied from the left keeps
                // the hosts' order.
                let mut parts = blocks.chunks_exact(STATUS + len).rev();
                let last = parts.next().expect("at least one leader");
                result.copy_from_slice(&last[STATUS..]);
                for part in parts {
                    op.apply(datatype, &part[STATUS..], result);
                }
            });
            found = found.and(exchanged);
        }
        self.release(&mut release, found, len)?;
        if let Some(recv) = recv {
            recv.copy_from_slice(&release[STATUS..]);
        }
        Ok(())
    }

    /// Takes part in a reduction or an all-reduce only to say that this rank refused its
    /// arguments (its vector `len` bytes long): in its host's area, and as a leader among
    /// the leaders, so that every rank fails naming it instead of waiting.
    pub(crate) fn refuse_reduction(&self, len: usize) {
        // A failure here leaves this rank's own cause the one to report.
        let _ = self.area.refuse();
        let me = self.members[self.host.rank as usize];
        let found = Err(Cause::PeerRefused { peer: me as i32 });
        let mut release = self.release.borrow_mut();
        release.resize(STATUS + len.min(HIERARCHY_MAX), 0);
        if let Some(leaders) = &self.leaders {
            release[..STATUS].copy_from_slice(&status_bytes(Status::Refused, me, 0));
            let _ = Self::settle(leaders, &mut release, |_, _| {});
        }
        let len = release.len() - STATUS;
        let _ = self.release(&mut release, found, len);
    }

    /// The root's `buf` (`root` a rank here) in every rank's `buf`.
    pub(crate) fn broadcast(&self, root: u32, buf: &mut [u8]) -> Result<(), Cause> {
        let len = buf.len();
        let mut release = self.release.borrow_mut();
        release.resize(STATUS + len, 0);
        let root_host = self.host_of[root as usize];
        let on_root_host = self.host_of[self.members[0] as usize] == root_host;
        let mut found = Ok(());
        if on_root_host {
            // The root's host: its ranks take the root's buffer from the area at once.
            let in_host = self.members.binary_search(&root).expect("the root's host") as u32;
            if self.host.rank == in_host {
                release[..STATUS].copy_from_slice(&status_bytes(Status::Fine, 0, 0));
                release[STATUS..].copy_from_slice(buf);
            }
            let got = self.area.broadcast(in_host, &mut release);
            found = got.map(drop).map_err(|c| self.named_here(c));
        }
        if let Some(leaders) = &self.leaders {
            if on_root_host && found.is_err() {
                // The other hosts fail with this one rather than take bytes it disagreed on.
                release[..STATUS].copy_from_slice(&Self::status_of(&found, leaders.me()));
            }
            let spread = leaders.spread(&mut release, root_host);
            if let Err(cause) = spread {
                release[..STATUS].copy_from_slice(&status_bytes(
                    Status::LeaderFailed,
                    leaders.me(),
                    0,
                ));
                found = found.and(Err(cause));
            }
        }
        if !on_root_host {
            self.release(&mut release, found, len)?;
        } else {
            found?;
        }
        buf.copy_from_slice(&release[STATUS..]);
        Ok(())
    }
}

impl Leaders {
    /// This leader's rank in the communicator.
    fn me(&self) -> u32 {
        self.ranks[self.comm.rank as usize]
    }

    /// Every leader's `mine` (of one length on all) in `blocks`, in the leaders' order: one
    /// message from each to each, all posted before any is awaited. A block of another
    /// length is its leader's disagreement, put in its status.
    fn exchange(&self, mine: &[u8]) -> Result<(), Cause> {
        let block = mine.len();
        let me = self.comm.rank as usize;
        let mut blocks = self.blocks.borrow_mut();
        blocks.resize(self.ranks.len() * block, 0);
        let mut handles = self.handles.borrow_mut();
        handles.clear();
        let mut posted = Ok(());
        for (l, slot) in blocks.chunks_exact_mut(block).enumerate() {
            if l == me {
                slot.copy_from_slice(mine);
                continue;
            }
            // SAFETY: the slot lies in `blocks`, borrowed until every handle is waited on
            // below (on an error too).
            let receive = with_engine(|e| unsafe {
                e.post_recv(
                    self.comm.context,
                    SourceSel::Rank(l as u32),
                    TagSel::Tag(LEADERS_TAG),
                    slot.as_mut_ptr(),
                    block,
                )
            });
            match receive {
                Ok(handle) => handles.push(handle),
                Err(cause) => posted = posted.and(Err(cause)),
            }
        }
        for l in (0..self.ranks.len() as u32).filter(|&l| l as usize != me) {
            match self.post_send(l, mine) {
                Ok(handle) => handles.push(handle),
                Err(cause) => posted = posted.and(Err(cause)),
            }
        }
        let waited = wait_all(&mut handles, |done| {
            if let pml::Done::Received(status) = done {
                if status.len != block {
                    let at = status.source as usize * block;
                    let bad = status_bytes(
                        Status::Disagreed,
                        self.ranks[status.source as usize],
                        status.len.saturating_sub(STATUS),
                    );
                    blocks[at..at + STATUS].copy_from_slice(&bad);
                }
            }
        });
        posted.and(waited)
    }

    /// The block in `release` from the leader of host `from` in every leader's `release`.
    fn spread(&self, release: &mut [u8], from: u32) -> Result<(), Cause> {
        if self.comm.rank != from {
            // SAFETY: `release` is borrowed until the receive is waited on, at once.
            let handle = with_engine(|e| unsafe {
                e.post_recv(
                    self.comm.context,
                    SourceSel::Rank(from),
                    TagSel::Tag(LEADERS_TAG),
                    release.as_mut_ptr(),
                    release.len(),
                )
            })?;
            return match wait_handle(handle)? {
                pml::Done::Received(status) if status.len != release.len() => {
                    Err(Cause::LengthDisagrees {
                        peer: self.ranks[from as usize] as i32,
                        expected: release.len() - STATUS,
                        got: status.len.saturating_sub(STATUS),
                    })
                }
                _ => Ok(()),
            };
        }
        let mut handles = self.handles.borrow_mut();
        handles.clear();
        let mut posted = Ok(());
        for l in (0..self.ranks.len() as u32).filter(|&l| l != from) {
            match self.post_send(l, release) {
                Ok(handle) => handles.push(handle),
                Err(cause) => posted = posted.and(Err(cause)),
            }
        }
        let waited = wait_all(&mut handles, drop);
        posted.and(waited)
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
/// the caller's), handing each completion to `each`; the first error.
fn wait_all(handles: &mut Vec<Handle>, mut each: impl FnMut(pml::Done)) -> Result<(), Cause> {
    let mut first = Ok(());
    for handle in handles.drain(..) {
        match wait_handle(handle) {
            Ok(done) => each(done),
            Err(cause) => first = first.and(Err(cause)),
        }
    }
    first
}
