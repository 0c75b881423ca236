//! Collectives as schedules: every algorithm is written once as a list of rounds (messages to
//! post, then local copies and reductions once they complete), and one executor runs a
//! schedule either to the end (blocking calls) or a step per test (immediate calls).
//!
//! Spans name bytes in one of the call's buffers (the send buffer, the receive buffer, or a
//! scratch buffer of the schedule), so a schedule holds no pointers: it is checked against its
//! buffers' lengths once, when it is built ([`Checked`]), and then serves every call of its
//! shape with buffers of those lengths (`plans`), as many at once as the program starts.
//! A rank that cannot know its whole plan when the call starts (a host's leader of a gather
//! of parts of any length, whose ranks alone know their parts' lengths) plans its first
//! rounds, receives lengths in them, and plans the rest from those ([`Plan::learn`]); the
//! rest is checked when it is added to the execution's own copy of the plan. Lengths a
//! message carries ahead of its parts are no values of the call's type, and a receiver that
//! expects lengths of its own checks them against what arrived ([`Plan::recv_with_lengths`]).
//!
//! Ranks whose counts disagree (an erroneous program, which MPI leaves undefined) and run
//! the same algorithm never leave a peer waiting: a rank whose receive brought another length
//! than its span (longer, and truncated, or shorter), or bytes that are not values of its
//! type, keeps that first cause and runs its schedule on to the end, so that every message
//! its peers wait for is sent and every one they send is taken, and fails with it. From then
//! on it passes no data on: its sends from anything but the caller's send buffer (what may
//! derive from the bytes that arrived wrong) go empty, which every receiver that expects
//! bytes finds to disagree, and so on down a tree or round a ring; it runs no local copies
//! or reductions either (garbage must not reach a reduction over a type with invalid
//! values). MPICH (3 and 4) runs its collectives on after such an error as well, marking
//! later sends with an error bit in the tag; Open MPI's coll/base relays return at the failed
//! receive, which its default error handler turns into the job's abort, where `try_` calls
//! here return the error.
//!
//! A rooted call's root that refuses its own arguments (a buffer too short for the counts:
//! checks only it can make) runs its part all the same, draining ([`Plan::drained`],
//! [`Execution::draining`]): its plan's messages, each empty and marked [`REFUSED`], and its
//! receives into none, truncating what arrives (its senders are done). A rank that receives
//! such a message fails naming the root ([`Cause::PeerRefused`]) and marks its own later
//! messages so, so that the ranks below it down a tree name the root too; a rank that only
//! sends to the root (a gather's, a short reduction's) has done its part and succeeds, as in
//! the shared-memory area. Every rank's count of calls stays in step: the communicator stays
//! usable. A rank that refuses any other call, by messages, takes its tag alone, and its
//! peers wait for it (`collective::refused_by_messages`).
//!
//! Ranks whose lengths fall on different sides of a limit in `select` pick different
//! algorithms, whose message patterns differ. Every message of a [`Marked`] plan carries, in
//! its tag's mark (which matching ignores: `pml::match_key`), the algorithms its sender has
//! seen so far, its own included; a rank that receives one naming another algorithm than
//! its own spoils the call with [`Cause::AlgorithmDisagrees`], so it never finishes holding
//! another pattern's bytes. That alone would leave ranks waiting for messages the other
//! pattern never sends; each collective's algorithms are laid out so that they do not:
//! - all-reduce and all-gather: every algorithm starts with the short algorithm's exchanges
//!   (recursive doubling's or Bruck's, which Rabenseifner's halving is, and which the ring
//!   algorithms run first with empty messages), after which every rank has seen every
//!   rank's mark; a [`Plan::checkpoint`] there ends the call (but for its last message to a
//!   folded rank) wherever more than one algorithm was seen, on every rank alike.
//! - broadcast and scatter: both tree algorithms start down the root's binomial tree, each
//!   rank's first message coming from its parent (a direct scatter passes an empty message
//!   down the tree beside the root's parts); a rank that finds its parent on another
//!   algorithm runs that one instead, with no data ([`Plan::follow`]), so every rank ends up
//!   on the root's. The linear broadcast (the root sends to each rank) is chosen by the
//!   number of ranks alone (`select::broadcast`), so no rank meets it beside another.
//! - all-to-all: pairwise and linear send one message each way between each pair: on one
//!   host they go unmarked, across hosts under one mark. Across hosts short blocks go
//!   through each host's leader (`algorithms::hosts`), whose messages the pairwise and
//!   linear plans (chosen by length) run first, empty; after them every rank has heard from
//!   every other, and a checkpoint ends those plans wherever both marks were seen (the
//!   leaders' plan ends there anyway).
//! - reduction to a root and gather: the data flows up to the root, which alone hears from
//!   every rank, so no rank learns first which algorithms ran. The short algorithm goes up a
//!   binomial tree, and the long one runs that tree's messages first, empty; then a
//!   [`Release`] passes an empty message back down the tree, from the tree's root, to every
//!   rank whose message up named the long algorithm (a parent knows each child's mark),
//!   after which those ranks have heard from every rank. A checkpoint there ends the call
//!   wherever both algorithms were seen. So in a call of the short algorithm alone no
//!   message more is sent (the release goes to no one), a call of the long one pays the
//!   tree's depth twice in empty messages, and in a call of both every rank ends: the short
//!   algorithm's ranks whose subtrees ran it alone are done at once (with their data sent,
//!   and no error), every other rank names the other algorithm, the root among them.

use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;

use pml::{Done, Handle, Pml, PmlError, SendMode, SourceSel, TagSel};

use crate::datatype::{Datatype, Layout};
use crate::environment::{self, with_engine_or_lent};
use crate::error::Cause;

use super::op::Reduction;
use super::progress;
use crate::communicator::CommData;

mod direct;

pub(crate) use direct::{Direct, Room, Stepped};

/// Which buffer a span lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Region {
    /// The caller's send buffer: read only.
    Send,
    /// The caller's receive buffer.
    Recv,
    /// A buffer the schedule allocates.
    Scratch(usize),
}

/// `len` bytes at `offset` in `region`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub region: Region,
    pub offset: usize,
    pub len: usize,
}

impl Span {
    pub fn new(region: Region, offset: usize, len: usize) -> Span {
        Span {
            region,
            offset,
            len,
        }
    }

    /// The part `[from, from + len)` of this span.
    pub fn sub(self, from: usize, len: usize) -> Span {
        debug_assert!(from + len <= self.len);
        Span::new(self.region, self.offset + from, len)
    }
}

#[derive(Clone, Debug)]
enum Transfer {
    Send { to: u32, span: Span },
    Recv { from: u32, span: Span },
}

#[derive(Clone, Debug)]
enum Local {
    Copy {
        from: Span,
        to: Span,
    },
    /// `acc = incoming ∘ acc` if the incoming part comes from lower ranks, else
    /// `acc = acc ∘ incoming`.
    Reduce {
        incoming: Span,
        acc: Span,
        incoming_lower: bool,
    },
}

#[derive(Clone, Debug, Default)]
struct Round {
    transfers: Vec<Transfer>,
    locals: Vec<Local>,
    /// The receives of the round whose first bytes are lengths, not values.
    lengths: Vec<Lengths>,
}

/// The bytes of one length a message carries ahead of the parts it relays (little-endian):
/// how a host's leader learns, and passes on, the lengths of parts only their own ranks know
/// (a gather's or a scatter's of parts of any length, `algorithms::hosts`).
pub(crate) const LENGTH: usize = 8;

/// `lengths` as a message carries them.
pub(crate) fn encode_lengths(lengths: impl IntoIterator<Item = usize>) -> Vec<u8> {
    lengths
        .into_iter()
        .flat_map(|len| (len as u64).to_le_bytes())
        .collect()
}

fn decode_lengths(bytes: &[u8]) -> Vec<usize> {
    bytes
        .chunks_exact(LENGTH)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
        .collect()
}

/// The lengths at the start of a receive from `from`, landing on `span`: no values of the
/// call's type (never checked as such); where `expected` names each with the rank a
/// disagreement names and the length this rank expects, the first that differs spoils the
/// call naming that rank, rather than the message's own length, which sums them.
#[derive(Clone, Debug)]
struct Lengths {
    from: u32,
    span: Span,
    expected: Option<Vec<(u32, usize)>>,
}

/// Plans the rest of a rank's part from the lengths it learnt, and which of them it could
/// not make a buffer for (each counted as 0: `Execution::learn`; a part that its rank still
/// sends must be received all the same, or that rank's send waits for ever). Shared, not
/// owned, so that a plan that learns stays a plan an execution may copy (`Execution::learn`
/// changes its own copy, as a checkpoint does: the plan its call's shape keeps stays as it
/// starts).
type Rest = Rc<dyn Fn(&[usize], &[bool]) -> Plan>;

/// A learned length no buffer can hold: which, and the cause that names its sender.
struct Unheld {
    index: usize,
    cause: Cause,
}

/// Once round `after` is done, `build` plans the rest of this rank's part from the lengths
/// that landed on `lengths` (a leader's plan, once its ranks said how long their parts are).
#[derive(Clone)]
struct Learn {
    after: usize,
    lengths: Span,
    build: Rest,
}

impl std::fmt::Debug for Learn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learn")
            .field("after", &self.after)
            .field("lengths", &self.lengths)
            .finish_non_exhaustive()
    }
}

impl Round {
    /// The lengths at the start of the receive from `from` onto `span`, if it brings any.
    fn lengths_of(&self, from: u32, span: Span) -> Option<&Lengths> {
        self.lengths.iter().find(|l| {
            l.from == from && l.span.region == span.region && l.span.offset == span.offset
        })
    }
}

/// An algorithm's plan for this rank: what to send and receive, round by round. Executions
/// share it (`plans` keeps it for the communicator's next call of the same shape); the one
/// that changes it on its way (a checkpoint's release, a switch to the sender's algorithm,
/// the rest of a plan that learns) changes its own copy.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    rounds: Vec<Round>,
    scratch: Vec<usize>,
    /// The algorithm, where the collective chooses among several by length.
    marked: Option<Marked>,
    /// Where a call whose ranks ran more than one algorithm goes on (the module's notes).
    checkpoint: Option<Checkpoint>,
    /// How this rank plans the algorithm of the peer its first message comes from, where it
    /// follows that one's (the module's notes).
    follow: Option<Follow>,
    /// The bytes spans of scratch buffers start with (lengths this rank sends).
    initial: Vec<(Span, Vec<u8>)>,
    /// How the plan goes on from lengths it receives, where it depends on them.
    learn: Option<Learn>,
    /// The call's root, where it has one: a message marked [`REFUSED`] says that the root
    /// refused its arguments, and runs its part draining ([`Plan::drained`]).
    root: Option<u32>,
}

/// The mark bit of a message of a rooted call whose root refused its arguments and runs the
/// call draining (empty messages, receives into none), or of one passed on by a rank that
/// heard so: its receiver fails naming the root ([`Cause::PeerRefused`]) rather than a
/// length. The highest bit, which no refusable call's algorithms take (gathers, scatters and
/// reductions have two; broadcasts, which no root refuses, three).
const REFUSED: u8 = 1 << (pml::MARK_BITS - 1);

/// One of a collective's algorithms, as its messages' marks name it: bit `index` of the
/// mark, among `names`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Marked {
    bit: u8,
    names: &'static [&'static str],
}

impl Marked {
    pub fn new(names: &'static [&'static str], index: usize) -> Marked {
        assert!(names.len() <= pml::MARK_BITS as usize && index < names.len());
        Marked {
            bit: 1 << index,
            names,
        }
    }

    /// The name of the lowest algorithm of `bits`.
    fn name(&self, bits: u8) -> &'static str {
        self.names[bits.trailing_zeros() as usize]
    }
}

/// Once round `after` is done, a call whose ranks ran more than one algorithm goes on at
/// round `resume`, after the release down a tree where there is one.
#[derive(Clone, Copy, Debug)]
struct Checkpoint {
    after: usize,
    resume: usize,
    release: Option<Release>,
}

/// An empty message down the binomial tree rooted at `tree_root` (`algorithms::tree`), to
/// each rank whose message up the tree named the algorithm of mark `long` (that rank waits
/// for it, and passes it on likewise), so that those ranks hear from every rank: the
/// module's notes. `told`, where the call's root is not the tree's root, is the root: it
/// hears from the tree's root directly as the call's last message up, so its parent sends
/// it no release and it waits for none, but passes it on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Release {
    pub long: Marked,
    pub ranks: super::algorithms::Ranks,
    pub tree_root: u32,
    pub told: Option<u32>,
}

impl Release {
    /// This rank's rounds: the release from its parent, then on to each child whose message
    /// up named the long algorithm (those not in `heard` named this rank's, `own`).
    fn rounds(&self, own: u8, heard: &[(u32, u8)]) -> Vec<Round> {
        let (parent, children) = super::algorithms::tree::links(self.ranks, self.tree_root);
        let (me, long) = (self.ranks.rank, self.long.bit);
        let empty = Span::new(Region::Recv, 0, 0);
        let mut rounds = Vec::new();
        if let Some(from) = parent.filter(|_| self.told != Some(me)) {
            rounds.push(Round {
                transfers: vec![Transfer::Recv { from, span: empty }],
                ..Round::default()
            });
        }
        let mark_of = |child: u32| {
            let heard = heard.iter().rev().find(|h| h.0 == child);
            heard.map_or(own, |&(_, mark)| mark)
        };
        let transfers: Vec<Transfer> = children
            .into_iter()
            .filter(|&child| self.told != Some(child) && mark_of(child) & long != 0)
            .map(|to| Transfer::Send { to, span: empty })
            .collect();
        if !transfers.is_empty() {
            rounds.push(Round {
                transfers,
                ..Round::default()
            });
        }
        rounds
    }
}

/// Plans this rank's part of the algorithm of index `algorithm` (a [`Marked`] index).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Follow {
    pub plan: fn(&Follow, usize) -> Plan,
    pub ranks: super::algorithms::Ranks,
    pub root: u32,
    pub len: usize,
    pub element: usize,
}

impl Plan {
    /// Marks this plan's messages as `marked`'s.
    pub fn mark(&mut self, marked: Marked) -> &mut Self {
        self.marked = Some(marked);
        self.check_refusal_mark();
        self
    }

    /// Makes this the plan of a call rooted at `root` (a rank of the call's communicator),
    /// whose messages may say that the root refused its arguments ([`REFUSED`]).
    pub fn rooted(&mut self, root: u32) -> &mut Self {
        self.root = Some(root);
        self.check_refusal_mark();
        self
    }

    /// A rooted call's algorithms leave the [`REFUSED`] bit free (checked as plans are built,
    /// not as they run).
    fn check_refusal_mark(&self) {
        if let (Some(_), Some(marked)) = (self.root, self.marked) {
            assert!(
                marked.bit & REFUSED == 0 && (marked.names.len() as u32) < pml::MARK_BITS,
                "collective plan: a rooted call's algorithms take the refusal's mark"
            );
        }
    }

    /// This plan as a root that refused its arguments runs it: every transfer of every round
    /// (and of the rounds it learns, or releases) empty, receives into none (a longer message
    /// is truncated, and its sender done), no copies or reductions, no buffers, and its
    /// algorithm its own (it leads, and follows none). Every peer then gets each message it
    /// waits for, and no message of a peer waits for a receive.
    pub fn drained(&self) -> Plan {
        let empty = Span::new(Region::Recv, 0, 0);
        let rounds = self.rounds.iter().map(|round| Round {
            transfers: round
                .transfers
                .iter()
                .map(|transfer| match *transfer {
                    Transfer::Send { to, .. } => Transfer::Send { to, span: empty },
                    Transfer::Recv { from, .. } => Transfer::Recv { from, span: empty },
                })
                .collect(),
            ..Round::default()
        });
        let learn = self.learn.as_ref().map(|learn| {
            // The lengths land on no buffer: the rest is planned as if every part were
            // empty, each received all the same (as a part no buffer could be made for).
            let (parts, build) = (learn.lengths.len / LENGTH, Rc::clone(&learn.build));
            let rest: Rest = Rc::new(move |_: &[usize], _: &[bool]| {
                build(&vec![0; parts], &vec![true; parts]).drained()
            });
            Learn {
                after: learn.after,
                lengths: empty,
                build: rest,
            }
        });
        Plan {
            rounds: rounds.collect(),
            marked: self.marked,
            checkpoint: self.checkpoint,
            learn,
            root: self.root,
            ..Plan::default()
        }
    }

    /// The rounds planned so far.
    pub fn rounds(&self) -> usize {
        self.rounds.len()
    }

    /// Once round `after` is done, a call whose ranks ran more than one algorithm goes on at
    /// round `resume`.
    pub fn checkpoint(&mut self, after: usize, resume: usize) -> &mut Self {
        self.checkpoint = Some(Checkpoint {
            after,
            resume,
            release: None,
        });
        self
    }

    /// [`checkpoint`](Self::checkpoint), once `release` has run where this rank takes part.
    pub fn release(&mut self, after: usize, resume: usize, release: Release) -> &mut Self {
        self.checkpoint = Some(Checkpoint {
            after,
            resume,
            release: Some(release),
        });
        self
    }

    /// Makes this rank run the algorithm its first message's sender runs (`follow.plan`
    /// plans it), where that is not its own: the first round must be that receive alone,
    /// from the same peer, in every algorithm.
    pub fn follow(&mut self, follow: Follow) -> &mut Self {
        self.follow = Some(follow);
        self
    }

    /// The round a rank runs next once round `done` is over, having seen the algorithms
    /// `seen` (its own, `own`, among them) and heard `heard` (each sender of a message that
    /// named another algorithm, with that message's mark): the next one, but at the
    /// checkpoint. The simulation's; an execution's (`Execution::go_on`) first copies a plan
    /// it shares where the checkpoint changes it.
    #[cfg(test)]
    fn go_on(&mut self, done: usize, seen: u8, own: u8, heard: &[(u32, u8)]) -> usize {
        match self.at_checkpoint(done, seen, own) {
            true => self.past_checkpoint(done + 1, seen, own, heard),
            false => done + 1,
        }
    }

    /// Whether the round after `done` is not simply the next one: the checkpoint follows
    /// `done` and this rank saw another algorithm than its own, or takes part in the release.
    /// Nothing to do where this rank saw its own algorithm alone and takes no part in the
    /// release (a call of the short algorithm alone): the common case, inline.
    #[inline]
    fn at_checkpoint(&self, done: usize, seen: u8, own: u8) -> bool {
        self.checkpoint.as_ref().is_some_and(|checkpoint| {
            checkpoint.after == done
                && (seen != own || checkpoint.release.is_some_and(|r| seen & r.long.bit != 0))
        })
    }

    /// At the checkpoint, before round `next`: the release's rounds next where this rank
    /// takes part in it (the checkpoint then follows them), else on at `resume` where the
    /// call is mixed.
    #[inline(never)]
    fn past_checkpoint(&mut self, next: usize, seen: u8, own: u8, heard: &[(u32, u8)]) -> usize {
        let Some(checkpoint) = self.checkpoint.take() else {
            return next;
        };
        let release = checkpoint
            .release
            .filter(|r| seen & r.long.bit != 0)
            .map(|r| r.rounds(own, heard))
            .filter(|rounds| !rounds.is_empty());
        let mixed = self.marked.is_some_and(|m| seen & !m.bit != 0);
        match release {
            Some(rounds) => {
                let added = rounds.len();
                self.rounds.splice(next..next, rounds);
                self.checkpoint(next + added - 1, checkpoint.resume + added);
                next
            }
            None if mixed => checkpoint.resume,
            None => next,
        }
    }

    /// The bytes of scratch the plan takes, and how many local copies and reductions it makes
    /// (what tests check a plan does without).
    #[cfg(test)]
    pub(crate) fn staging(&self) -> (usize, usize) {
        let locals = self.rounds.iter().map(|r| r.locals.len()).sum();
        (self.scratch.iter().sum(), locals)
    }

    /// A scratch buffer of `len` bytes.
    pub fn scratch(&mut self, len: usize) -> Span {
        self.scratch.push(len);
        Span::new(Region::Scratch(self.scratch.len() - 1), 0, len)
    }

    /// A scratch buffer of `len` bytes that starts with `start` when the execution starts
    /// (lengths this rank sends).
    pub fn scratch_with(&mut self, len: usize, start: Vec<u8>) -> Span {
        let span = self.scratch(len);
        self.start_with(span.sub(0, start.len()), start);
        span
    }

    /// `span`, of a scratch buffer, holds `bytes` when the execution starts.
    pub fn start_with(&mut self, span: Span, bytes: Vec<u8>) -> &mut Self {
        assert!(
            matches!(span.region, Region::Scratch(_)) && bytes.len() == span.len,
            "collective plan: {} bytes to start {span:?} with",
            bytes.len()
        );
        self.initial.push((span, bytes));
        self
    }

    /// A receive from `from` of lengths alone ([`LENGTH`] bytes each), which this rank learns.
    pub fn recv_lengths(&mut self, from: u32, span: Span) -> &mut Self {
        self.recv(from, span);
        self.current().lengths.push(Lengths {
            from,
            span,
            expected: None,
        });
        self
    }

    /// A receive from `from` of one length a part (`expected`: the rank a disagreement names
    /// and the length this rank expects), then the parts.
    pub fn recv_with_lengths(
        &mut self,
        from: u32,
        span: Span,
        expected: Vec<(u32, usize)>,
    ) -> &mut Self {
        self.recv(from, span);
        let lengths = span.sub(0, LENGTH * expected.len());
        self.current().lengths.push(Lengths {
            from,
            span: lengths,
            expected: Some(expected),
        });
        self
    }

    /// Once the current round is done, `build` plans the rest from the lengths that landed on
    /// `lengths` (and which of them got no buffer, counted as 0).
    pub fn learn(
        &mut self,
        lengths: Span,
        build: impl Fn(&[usize], &[bool]) -> Plan + 'static,
    ) -> &mut Self {
        self.learn = Some(Learn {
            after: self.rounds.len().saturating_sub(1),
            lengths,
            build: Rc::new(build),
        });
        self
    }

    /// Whether the plan goes on from the lengths it received once round `done` is over.
    #[inline]
    fn learns_after(&self, done: usize) -> bool {
        self.learn.as_ref().is_some_and(|learn| learn.after == done)
    }

    /// The plan's way on from the lengths it received, once round `done` is over.
    fn learning(&mut self, done: usize) -> Option<Learn> {
        match self.learns_after(done) {
            true => self.learn.take(),
            false => None,
        }
    }

    /// Counts each of the lengths `learned` (those `learn`, due after round `done`, found)
    /// that no buffer can hold with the others ([`unheld_length`](Self::unheld_length)) as
    /// an empty part; the cause that names the first one's sender.
    fn hold_lengths(&self, done: usize, learn: &Learn, learned: &mut [usize]) -> Option<Cause> {
        let mut first = None;
        while let Some(unheld) = self.unheld_length(done, learn, learned) {
            learned[unheld.index] = 0;
            first.get_or_insert(unheld.cause);
        }
        first
    }

    /// The first of the lengths `learned` past which the rest's message of them would be
    /// longer than any buffer can be: it holds each length and each part (`LENGTH` bytes
    /// each, then the parts) and this rank's own (a buffer's, at most `isize::MAX` bytes), a
    /// sum that, wrapped, would size it short of its parts' spans.
    fn unheld_length(&self, done: usize, learn: &Learn, learned: &[usize]) -> Option<Unheld> {
        let mut total = LENGTH * learned.len();
        let index = learned.iter().position(|&len| {
            total = total.saturating_add(len);
            total > isize::MAX as usize - LENGTH
        })?;
        Some(self.unheld(done, learn, learned, index))
    }

    /// The longest of the lengths `learned`, unless all are empty.
    fn longest_learned(&self, done: usize, learn: &Learn, learned: &[usize]) -> Option<Unheld> {
        let (index, _) = (0..)
            .zip(learned)
            .filter(|(_, &len)| len > 0)
            .max_by_key(|(_, &len)| len)?;
        Some(self.unheld(done, learn, learned, index))
    }

    /// Learned length `index` as unheld, naming the rank whose receive in round `done`
    /// landed it.
    fn unheld(&self, done: usize, learn: &Learn, learned: &[usize], index: usize) -> Unheld {
        let at = learn.lengths.offset + index * LENGTH;
        let sender = self.rounds[done].lengths.iter().find(|l| {
            l.span.region == learn.lengths.region
                && (l.span.offset..l.span.offset + l.span.len).contains(&at)
        });
        let sender = sender.expect("a learned length some receive of the round landed");
        Unheld {
            index,
            cause: Cause::LengthUnheld {
                peer: sender.from as i32,
                length: learned[index],
            },
        }
    }

    /// Appends `rest`'s rounds, its scratch buffers numbered after this plan's; the index of
    /// its first scratch buffer.
    fn append(&mut self, rest: Plan) -> usize {
        let first = self.scratch.len();
        let moved = |span: Span| match span.region {
            Region::Scratch(i) => Span::new(Region::Scratch(first + i), span.offset, span.len),
            _ => span,
        };
        let rounds = self.rounds.len();
        for round in rest.rounds {
            let transfers = round.transfers.into_iter().map(|t| match t {
                Transfer::Send { to, span } => Transfer::Send {
                    to,
                    span: moved(span),
                },
                Transfer::Recv { from, span } => Transfer::Recv {
                    from,
                    span: moved(span),
                },
            });
            let locals = round.locals.into_iter().map(|l| match l {
                Local::Copy { from, to } => Local::Copy {
                    from: moved(from),
                    to: moved(to),
                },
                Local::Reduce {
                    incoming,
                    acc,
                    incoming_lower,
                } => Local::Reduce {
                    incoming: moved(incoming),
                    acc: moved(acc),
                    incoming_lower,
                },
            });
            let lengths = round.lengths.into_iter().map(|l| Lengths {
                span: moved(l.span),
                ..l
            });
            self.rounds.push(Round {
                transfers: transfers.collect(),
                locals: locals.collect(),
                lengths: lengths.collect(),
            });
        }
        self.scratch.extend(rest.scratch);
        let initial = rest
            .initial
            .into_iter()
            .map(|(span, bytes)| (moved(span), bytes));
        self.initial.extend(initial);
        self.learn = rest.learn.map(|learn| Learn {
            after: rounds + learn.after,
            lengths: moved(learn.lengths),
            build: learn.build,
        });
        first
    }

    /// Starts a round: the transfers added next are in flight together.
    pub fn round(&mut self) -> &mut Self {
        self.rounds.push(Round::default());
        self
    }

    fn current(&mut self) -> &mut Round {
        if self.rounds.is_empty() {
            self.rounds.push(Round::default());
        }
        self.rounds.last_mut().expect("a round")
    }

    pub fn send(&mut self, to: u32, span: Span) -> &mut Self {
        self.current().transfers.push(Transfer::Send { to, span });
        self
    }

    pub fn recv(&mut self, from: u32, span: Span) -> &mut Self {
        self.current().transfers.push(Transfer::Recv { from, span });
        self
    }

    /// Sends `out` to `peer` and receives `into` from it, in one round.
    pub fn exchange(&mut self, peer: u32, out: Span, into: Span) -> &mut Self {
        self.round().send(peer, out).recv(peer, into)
    }

    /// A copy done after the current round's transfers (at once in a plan's first round).
    pub fn copy(&mut self, from: Span, to: Span) -> &mut Self {
        debug_assert_eq!(from.len, to.len);
        if from.len > 0 {
            self.current().locals.push(Local::Copy { from, to });
        }
        self
    }

    /// A reduction done after the current round's transfers.
    pub fn reduce(&mut self, incoming: Span, acc: Span, incoming_lower: bool) -> &mut Self {
        debug_assert_eq!(incoming.len, acc.len);
        if incoming.len > 0 {
            self.current().locals.push(Local::Reduce {
                incoming,
                acc,
                incoming_lower,
            });
        }
        self
    }

    /// Every span lies inside its buffer, a send buffer of `send_len` bytes, a receive buffer
    /// of `recv_len` and its scratch buffers, and no transfer's receive overlaps another
    /// transfer of its round, nor does a span the plan starts with bytes (`start_with`):
    /// what makes an execution's pointers valid. A reduction that is
    /// not `commutative` may write its incoming span (`Execution::reduce`). Checked as a plan
    /// is built, for the buffers' lengths its call has (a plan kept for later calls serves
    /// those of the same lengths only, `plans`).
    pub(crate) fn check_spans(&self, send_len: usize, recv_len: usize, commutative: bool) {
        // A non-commutative reduction whose incoming operand is the higher one uses that span
        // as room for the result (`reduce`); one whose incoming operand is the lower only
        // reads it, so its incoming span may lie in the send buffer.
        let spans = self.rounds.iter().flat_map(|round| {
            let transfers = round.transfers.iter().map(|t| match t {
                Transfer::Send { span, .. } => (*span, false),
                Transfer::Recv { span, .. } => (*span, true),
            });
            let locals = round.locals.iter().flat_map(|l| match l {
                Local::Copy { from, to } => [(*from, false), (*to, true)],
                Local::Reduce {
                    incoming,
                    acc,
                    incoming_lower,
                } => [(*incoming, !commutative && !incoming_lower), (*acc, true)],
            });
            transfers.chain(locals)
        });
        let initial = self.initial.iter().map(|(span, _)| (*span, true));
        for (span, written) in spans.chain(initial) {
            let len = match span.region {
                Region::Send => send_len,
                Region::Recv => recv_len,
                Region::Scratch(i) => self.scratch[i],
            };
            // Checked, not wrapped: a learned rest's spans come from lengths a peer sent.
            let end = span.offset.checked_add(span.len);
            assert!(
                end.is_some_and(|end| end <= len) && !(written && span.region == Region::Send),
                "collective schedule: {span:?} does not fit its buffer of {len} bytes"
            );
        }
        for round in &self.rounds {
            check_no_overlap(&round.transfers);
        }
    }
}

/// A plan whose spans fit buffers of the lengths it holds ([`Plan::check_spans`]): what an
/// execution runs, shared by the executions of calls of the same shape (`plans`).
#[derive(Clone, Debug)]
pub(crate) struct Checked {
    plan: Rc<Plan>,
    send_len: usize,
    recv_len: usize,
    /// Whether it was checked for a commutative reduction only (or for no reduction).
    commutative: bool,
    /// The plan's one round of transfers, where a direct call may run it.
    direct: Option<usize>,
}

impl Checked {
    /// Checks `plan` for a send buffer of `send_len` bytes, a receive buffer of `recv_len` and
    /// a reduction that is `commutative` (or none).
    pub fn new(plan: Plan, send_len: usize, recv_len: usize, commutative: bool) -> Checked {
        plan.check_spans(send_len, recv_len, commutative);
        Checked {
            direct: plan.direct_round(),
            plan: Rc::new(plan),
            send_len,
            recv_len,
            commutative,
        }
    }

    /// The plan, for tests.
    #[cfg(test)]
    pub fn plan(&self) -> Rc<Plan> {
        Rc::clone(&self.plan)
    }

    /// Whether it serves `buffers` and a reduction that is `commutative` (or none): a plan
    /// checked for a non-commutative one also serves a commutative one.
    fn serves(&self, buffers: &Buffers, commutative: bool) -> bool {
        (self.send_len, self.recv_len) == (buffers.send_len, buffers.recv_len)
            && (commutative || !self.commutative)
    }
}

/// The caller's buffers, as the engine needs them: raw pointers valid for the whole run.
pub(crate) struct Buffers {
    pub send: *const u8,
    /// Bytes of data: packed, when the elements have gaps.
    pub send_len: usize,
    /// The send buffer's layout and count, when its elements have gaps: packed once as the
    /// execution starts.
    pub send_layout: Option<(Arc<Layout>, usize)>,
    pub recv: *mut u8,
    pub recv_len: usize,
    /// The receive buffer's, likewise: received packed and unpacked as it finishes.
    pub recv_layout: Option<(Arc<Layout>, usize)>,
}

impl Buffers {
    pub fn none() -> Buffers {
        Buffers {
            send: NonNull::dangling().as_ptr(),
            send_len: 0,
            send_layout: None,
            recv: NonNull::dangling().as_ptr(),
            recv_len: 0,
            recv_layout: None,
        }
    }
}

/// Storage aligned for any element type the runtime sends, so that reductions may view scratch
/// bytes as slices of `T`.
type Aligned = u128;

/// How a transfer ended, for a receive of `span` from `from` where `recv` says so: `Ok(None)`
/// where a receive filled its span exactly or a send is done, `Ok(Some(cause))` where the
/// message was of another length (a longer one truncated; none at all where the sender may
/// relay nothing after a failure of its own): the ranks' counts disagree, and the call's
/// messages are still in step. Any other failure is the call's end.
///
/// Also the mark the message carried (0 for a send), and how many bytes of it are known to
/// have landed on the span: none of a truncated one, which a PML may leave unwritten (UCX
/// does).
fn disagreement(
    done: Result<Done, Cause>,
    recv: Option<(u32, Span)>,
) -> Result<(Option<Cause>, u8, usize), Cause> {
    let Some((from, span)) = recv else {
        return done.map(|_| (None, 0, 0));
    };
    let (got, tag) = match done {
        Ok(Done::Received(status)) if status.len == span.len => {
            return Ok((None, pml::mark_of(status.tag), span.len))
        }
        Ok(Done::Received(status)) => (status.len, status.tag),
        Err(Cause::Messaging(PmlError::Truncated(cut))) => (cut.message_len, cut.status.tag),
        done => return done.map(|_| (None, 0, 0)),
    };
    let (peer, expected) = (from as i32, span.len);
    let cause = match got {
        0 => Cause::PeerPassedNothing { peer, expected },
        got => Cause::LengthDisagrees {
            peer,
            expected,
            got,
        },
    };
    let landed = if got > span.len { 0 } else { got };
    Ok((Some(cause), pml::mark_of(tag), landed))
}

/// `cause`, a disagreement over a message of `lengths` and parts whose lengths could not be
/// read (a truncated one), over the parts alone: the lengths are the plan's, not the caller's.
fn parts_of(cause: Cause, lengths: &Lengths) -> Cause {
    match cause {
        Cause::LengthDisagrees {
            peer,
            expected,
            got,
        } => Cause::LengthDisagrees {
            peer,
            expected: expected.saturating_sub(lengths.span.len),
            got: got.saturating_sub(lengths.span.len),
        },
        // A message of lengths alone (a rank's empty part's, `hosts::scatter_varcount`)
        // carries a part of none.
        Cause::PeerPassedNothing { peer, expected } if expected == lengths.span.len => {
            Cause::PeerPassedNoLength { peer }
        }
        Cause::PeerPassedNothing { peer, expected } => Cause::PeerPassedNothing {
            peer,
            expected: expected.saturating_sub(lengths.span.len),
        },
        other => other,
    }
}

/// No receive of a round lands on bytes another transfer of the round reads or writes: the
/// engine holds all of them at once.
fn check_no_overlap(transfers: &[Transfer]) {
    let key = |region: Region| match region {
        Region::Send => (0, 0),
        Region::Recv => (1, 0),
        Region::Scratch(i) => (2, i),
    };
    let mut spans: Vec<((u8, usize), usize, usize, bool)> = transfers
        .iter()
        .map(|t| match *t {
            Transfer::Send { span, .. } => (span, false),
            Transfer::Recv { span, .. } => (span, true),
        })
        .filter(|(span, _)| span.len > 0)
        .map(|(s, recv)| (key(s.region), s.offset, s.offset + s.len, recv))
        .collect();
    spans.sort_unstable();
    // Per region, the furthest end of any span so far and of any receive so far.
    let mut ends = ((u8::MAX, 0), 0, 0);
    for (region, start, end, recv) in spans {
        if ends.0 != region {
            ends = (region, 0, 0);
        }
        let (_, any_end, recv_end) = ends;
        assert!(
            start >= recv_end && !(recv && start < any_end),
            "collective schedule: a receive overlaps another transfer of its round"
        );
        ends = (
            region,
            any_end.max(end),
            if recv { recv_end.max(end) } else { recv_end },
        );
    }
}

/// Where a call's regions lie in memory: an execution's buffers, or a direct call's
/// (`direct`).
trait Regions {
    /// The base pointer and length of a region.
    fn region(&self, region: Region) -> (*mut u8, usize);

    /// Where `span` starts.
    fn pointer(&self, span: Span) -> *mut u8 {
        let (base, _) = self.region(span.region);
        // SAFETY: `check_spans` placed the span inside its region's allocation.
        unsafe { base.add(span.offset) }
    }
}

/// Transfers in flight, with room for a round's: an execution's list, or a direct call's.
trait Posted {
    fn push(&mut self, transfer: InFlight);
    fn last(&self) -> Option<InFlight>;
    fn pop(&mut self);
    fn get(&self, i: usize) -> Option<InFlight>;
    fn swap_remove(&mut self, i: usize);
    fn is_empty(&self) -> bool;
}

impl Posted for Vec<InFlight> {
    fn push(&mut self, transfer: InFlight) {
        Vec::push(self, transfer);
    }
    fn last(&self) -> Option<InFlight> {
        self.as_slice().last().copied()
    }
    fn pop(&mut self) {
        Vec::pop(self);
    }
    fn get(&self, i: usize) -> Option<InFlight> {
        self.as_slice().get(i).copied()
    }
    fn swap_remove(&mut self, i: usize) {
        Vec::swap_remove(self, i);
    }
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

/// Posts `round`'s receives, then its sends, on the call's `comm` and `tag` over `places`, into
/// `posted`: in flight they are kept so that the first posted is collected last, and a
/// blocking wait then sees the sends finish first. The sends carry the algorithms `noted`
/// has seen in their mark, and once it is spoiled only the caller's own bytes (the module's
/// notes).
///
/// # Safety
/// `places`' buffers must stay valid, and the spans the receives land on untouched, until
/// the transfers complete (their owner waits for them, or cancels and waits for them when
/// abandoned).
unsafe fn post(
    round: &Round,
    (comm, tag, noted): (&CommData, i32, &Noted),
    places: &impl Regions,
    posted: &mut impl Posted,
) -> Result<(), Cause> {
    let (context, rank) = (comm.context, comm.rank);
    // Matching ignores the mark; receives are posted on the call's tag.
    let marked_tag = noted.marked_tag(tag);
    let spoiled = noted.spoiled.is_some();
    for transfer in &round.transfers {
        if let Transfer::Recv { from, span } = *transfer {
            let ptr = places.pointer(span);
            // SAFETY: the span lies in a buffer that stays valid and untouched until the
            // receive completes (this function's contract).
            let handle = with_engine_or_lent(|e| unsafe {
                e.post_recv(
                    context,
                    SourceSel::Rank(from),
                    TagSel::Tag(tag),
                    ptr,
                    span.len,
                )
            })?;
            posted.push((handle, Some((from, span))));
        }
    }
    for transfer in &round.transfers {
        if let Transfer::Send { to, span } = *transfer {
            let ptr = places.pointer(span);
            let peer = comm.world_rank(to);
            let len = if spoiled && span.region != Region::Send {
                0
            } else {
                span.len
            };
            // SAFETY: as for receives; no receive of the round writes what a send reads
            // (`check_no_overlap`), and locals run only once the round's transfers are done.
            let handle = with_engine_or_lent(|e| unsafe {
                e.post_send(
                    context,
                    rank,
                    peer,
                    marked_tag,
                    SendMode::Standard,
                    ptr,
                    len,
                )
            })?;
            posted.push((handle, None));
        }
    }
    Ok(())
}

/// Takes back the transfers `posted`, so that none outlives its buffers: cancels each receive
/// and waits for every transfer.
fn take_back(posted: &mut impl Posted) {
    while let Some((handle, recv)) = posted.last() {
        posted.pop();
        let cancelled = match recv {
            Some(_) => with_engine_or_lent(|e| e.cancel(handle)).map(drop),
            None => Ok(()),
        };
        let _ = cancelled.and_then(|()| environment::wait_or_lent(handle));
    }
}

/// Takes the outcomes of the transfers `posted` as they finish, each to `done`: all of them
/// with `block`, else those finished, then, where any is left, one round of progress for them
/// all (a test's) and those finished again (a test of each would run a round, and step the
/// hooks, per transfer); whether none is left. A handle leaves `posted` before `done` sees
/// its outcome, so that an error there leaves no spent handle to take back: a wait or test
/// that returned, an error included, has spent its handle, or the error stopped the engine
/// that held it.
fn settle(
    posted: &mut impl Posted,
    block: bool,
    mut done: impl FnMut(Result<Done, Cause>, Option<(u32, Span)>) -> Result<(), Cause>,
) -> Result<bool, Cause> {
    if block {
        while let Some((handle, recv)) = posted.last() {
            let outcome = environment::wait_or_lent(handle);
            posted.pop();
            done(outcome, recv)?;
        }
        return Ok(true);
    }
    // Whatever finished first, so that a wait on the rest sleeps until one more does rather
    // than finding a finished one at once.
    if collect(posted, &mut done)? {
        return Ok(true);
    }
    with_engine_or_lent(|e| e.progress())?;
    collect(posted, &mut done)
}

/// Takes the outcomes of the transfers `posted` that finished, without progress, each to
/// `done` (as [`settle`] does); whether none is left.
fn collect(
    posted: &mut impl Posted,
    done: &mut impl FnMut(Result<Done, Cause>, Option<(u32, Span)>) -> Result<(), Cause>,
) -> Result<bool, Cause> {
    let mut i = 0;
    while let Some((handle, recv)) = posted.get(i) {
        match with_engine_or_lent(|e| e.collect(handle)).transpose() {
            Some(outcome) => {
                posted.swap_remove(i);
                done(outcome, recv)?;
            }
            None => i += 1,
        }
    }
    Ok(posted.is_empty())
}

/// `round`'s copies and reductions over `places`, once its receives brought valid values of
/// `datatype`; none where the call is `spoiled`. The cause that spoils it where a receive
/// brought invalid values.
fn run_locals(
    round: &Round,
    datatype: Datatype,
    op: Option<&Reduction<'_>>,
    places: &impl Regions,
    spoiled: bool,
) -> Option<Cause> {
    if spoiled {
        return None;
    }
    if datatype.needs_check() {
        for transfer in &round.transfers {
            if let Transfer::Recv { from, span } = *transfer {
                // Lengths ahead of the values are no values.
                let skip = round.lengths_of(from, span).map_or(0, |l| l.span.len);
                let span = span.sub(skip, span.len - skip);
                // SAFETY: the span is inside its buffer and its receive completed.
                let bytes = unsafe { std::slice::from_raw_parts(places.pointer(span), span.len) };
                if !datatype.is_valid(bytes) {
                    return Some(Cause::InvalidValue {
                        type_name: datatype.name(),
                    });
                }
            }
        }
    }
    for local in &round.locals {
        match *local {
            Local::Copy { from, to } => {
                // SAFETY: both spans are inside their buffers (`check_spans`), `to` is
                // writable, and plans never copy between overlapping spans.
                unsafe { std::ptr::copy(places.pointer(from), places.pointer(to), from.len) }
            }
            Local::Reduce {
                incoming,
                acc,
                incoming_lower,
            } => {
                let op = op.expect("a reduction plan has an operation");
                reduce(op, datatype, places, incoming, acc, incoming_lower);
            }
        }
    }
    None
}

/// `acc = incoming ∘ acc` under `op` if `incoming_lower`, else `acc = acc ∘ incoming`.
fn reduce(
    op: &Reduction<'_>,
    datatype: Datatype,
    places: &impl Regions,
    incoming: Span,
    acc: Span,
    incoming_lower: bool,
) {
    let op = op.get();
    assert!(
        incoming.region != acc.region
            || incoming.offset + incoming.len <= acc.offset
            || acc.offset + acc.len <= incoming.offset,
        "collective schedule: overlapping reduction operands"
    );
    // SAFETY: both spans are inside their buffers (`check_spans`) and disjoint (asserted
    // above), so the slices do not alias; `acc` is writable.
    let accumulated = unsafe { std::slice::from_raw_parts_mut(places.pointer(acc), acc.len) };
    if incoming_lower || op.is_commutative() {
        // SAFETY: as above; the incoming span is only read.
        let inc = unsafe { std::slice::from_raw_parts(places.pointer(incoming), incoming.len) };
        op.apply(datatype, inc, accumulated);
    } else {
        // SAFETY: as above; `check_spans` let non-commutative reductions write the incoming
        // span.
        let inc = unsafe { std::slice::from_raw_parts_mut(places.pointer(incoming), incoming.len) };
        op.apply(datatype, accumulated, inc);
        accumulated.copy_from_slice(inc);
    }
}

/// A plan in progress over its buffers.
pub(crate) struct Execution<'a> {
    comm: CommData,
    tag: i32,
    /// Shared with other executions of its shape; copied where this one changes it
    /// (`go_on`, `switch`, `learn`).
    plan: Rc<Plan>,
    buffers: Buffers,
    /// The send buffer's elements packed, when they have gaps; `buffers.send` points here.
    #[allow(dead_code)] // Held, not read: it owns the bytes `buffers.send` points to.
    packed_send: Option<Vec<u8>>,
    /// Where the receive buffer's bytes go while they may not be valid values yet, or while
    /// they are packed.
    staging: Option<Vec<u8>>,
    scratch: Vec<Vec<Aligned>>,
    datatype: Datatype,
    op: Option<Reduction<'a>>,
    next_round: usize,
    in_flight: Vec<InFlight>,
    noted: Noted,
    /// Why the execution stopped, once it failed: its own step reports it again.
    failed: Option<Cause>,
}

/// What the finished receives of a call told this rank so far (see the module's notes): kept
/// by an execution, and by a direct call (`direct`) until it hands over to one.
#[derive(Debug)]
pub(crate) struct Noted {
    /// The first disagreement a receive of this rank met: the schedule runs on without
    /// passing data on, and fails with it at its end.
    spoiled: Option<Cause>,
    /// The algorithms this rank has seen (its own included) where the plan is marked: its
    /// sends' mark.
    seen: u8,
    /// This rank's algorithm's mark bit (0 where the plan is unmarked).
    own: u8,
    /// Each sender of a message that named another algorithm than this rank's, with that
    /// message's mark: what a [`Release`] goes by.
    heard: Vec<(u32, u8)>,
    /// The algorithm (a mark bit) the sender of the first message runs, where this plan
    /// follows it and it is not this rank's.
    switch_to: Option<u8>,
    /// [`REFUSED`] where this rank's messages say that the call's root refused its
    /// arguments (it is the root, draining, or heard so), else 0.
    refusal: u8,
}

impl Noted {
    /// Nothing heard yet, on `plan`'s algorithm.
    fn of(plan: &Plan) -> Noted {
        let own = plan.marked.map_or(0, |m| m.bit);
        Noted {
            spoiled: None,
            seen: own,
            own,
            heard: Vec::new(),
            switch_to: None,
            refusal: 0,
        }
    }

    /// Whether a message named another algorithm than this rank's.
    fn heard_another(&self) -> bool {
        self.seen != self.own
    }

    /// The tag this rank's sends carry on the call's `tag`: the algorithms it has seen, and
    /// [`REFUSED`] where it heard of a refusal, in the mark (matching ignores it; receives
    /// are posted on the call's tag).
    fn marked_tag(&self, tag: i32) -> i32 {
        tag + i32::from(self.seen | self.refusal)
    }

    /// Keeps what a finished transfer of round `round` of `plan` says: the algorithms a
    /// receive's mark names, which spoil the call where another than this rank's is among
    /// them (or have it follow the sender's, first), then the first disagreement this rank
    /// met. Inline for the common case of nothing new.
    #[inline]
    fn note(
        &mut self,
        plan: &Plan,
        round: usize,
        recv: Option<(u32, Span)>,
        (disagreement, mark): (Option<Cause>, u8),
    ) {
        if disagreement.is_some() || mark & !self.own != 0 {
            self.note_news(plan, round, recv, disagreement, mark);
        }
    }

    #[cold]
    fn note_news(
        &mut self,
        plan: &Plan,
        round: usize,
        recv: Option<(u32, Span)>,
        disagreement: Option<Cause>,
        mark: u8,
    ) {
        let mark = self.note_refusal(plan, mark);
        if let (Some((from, _)), Some(marked)) = (recv, plan.marked) {
            let others = mark & !marked.bit;
            if others != 0 {
                self.heard.push((from, mark));
                let cause = Cause::AlgorithmDisagrees {
                    peer: from as i32,
                    ours: marked.name(marked.bit),
                    theirs: marked.name(others),
                };
                self.spoiled.get_or_insert(cause);
                if plan.follow.is_some() && round == 0 {
                    self.switch_to = Some(mark & mark.wrapping_neg());
                }
            }
            self.seen |= mark;
        }
        if let Some(cause) = disagreement {
            self.spoiled.get_or_insert(cause);
        }
    }

    /// `mark` without the [`REFUSED`] bit, where the plan's call has a root; a message that
    /// carried it spoils the call naming the root (the cause of any disagreement its empty
    /// bytes make), and this rank's later messages carry it on. The root itself, draining,
    /// keeps its own cause.
    fn note_refusal(&mut self, plan: &Plan, mark: u8) -> u8 {
        match plan.root {
            Some(root) if mark & REFUSED != 0 => {
                if self.refusal == 0 {
                    self.refusal = REFUSED;
                    self.spoiled = Some(Cause::PeerRefused { peer: root as i32 });
                }
                mark & !REFUSED
            }
            _ => mark,
        }
    }
}

impl<'a> Execution<'a> {
    /// Prepares `plan` over `buffers`, which must have the lengths it was checked for (and
    /// `op` be commutative if it was checked for a commutative one).
    ///
    /// # Safety
    /// `buffers.send` must be valid for reads of `send_len` bytes, and `buffers.recv` for
    /// writes of `recv_len` bytes (and not otherwise accessed), until the execution is finished
    /// or dropped; bytes that pass `datatype`'s check must be valid values in the receive
    /// buffer.
    pub unsafe fn new(
        comm: CommData,
        plan: Checked,
        buffers: Buffers,
        datatype: Datatype,
        op: Option<Reduction<'a>>,
    ) -> Execution<'a> {
        let commutative = op.as_ref().is_none_or(|op| op.get().is_commutative());
        // What makes the pointers below valid: cheap, unlike the spans' check itself.
        assert!(
            plan.serves(&buffers, commutative),
            "collective schedule: a plan checked for other buffers"
        );
        let tag = comm.next_tag();
        // SAFETY: forwarded from this function's contract.
        unsafe { Execution::on_tag(comm, tag, plan.plan, buffers, datatype, op) }
    }

    /// [`new`](Self::new) on the call's `tag`, taken.
    ///
    /// # Safety
    /// As for `new`, whose check of the plan against the buffers the caller made.
    unsafe fn on_tag(
        comm: CommData,
        tag: i32,
        plan: Rc<Plan>,
        buffers: Buffers,
        datatype: Datatype,
        op: Option<Reduction<'a>>,
    ) -> Execution<'a> {
        let mut buffers = buffers;
        let packed_send = buffers.send_layout.as_ref().map(|(layout, count)| {
            let mut packed = vec![0u8; buffers.send_len];
            // SAFETY: the caller made `send` valid for the span of `count` elements of the
            // layout, initialized where its blocks lie.
            unsafe { layout.pack(*count, buffers.send, &mut packed) };
            packed
        });
        if let Some(packed) = &packed_send {
            // The heap bytes stay where they are while the vector moves into the execution.
            buffers.send = packed.as_ptr();
        }
        let staging = (datatype.needs_check() || buffers.recv_layout.is_some()).then(|| {
            let mut staging = vec![0u8; buffers.recv_len];
            // A collective may read what the receive buffer holds (a broadcast root sends
            // from it).
            match &buffers.recv_layout {
                // SAFETY: the caller made `recv` valid for the span of `count` elements of
                // the layout, initialized where its blocks lie.
                Some((layout, count)) => unsafe { layout.pack(*count, buffers.recv, &mut staging) },
                // SAFETY: the caller made `recv` valid for `recv_len` bytes.
                None => unsafe {
                    std::ptr::copy_nonoverlapping(
                        buffers.recv,
                        staging.as_mut_ptr(),
                        buffers.recv_len,
                    )
                },
            }
            staging
        });
        let Lists {
            in_flight,
            scratch: mut scratch_buffers,
        } = lists::take();
        scratch_buffers.extend(plan.scratch.iter().map(|&len| scratch::take(len)));
        let noted = Noted::of(&plan);
        // A communicator that takes no collectives fails the execution's first step.
        let comm_refusal = comm.collectives_allowed().err();
        let execution = Execution {
            comm,
            tag,
            plan,
            buffers,
            packed_send,
            staging,
            scratch: scratch_buffers,
            datatype,
            op,
            next_round: 0,
            in_flight,
            noted,
            failed: comm_refusal,
        };
        if cfg!(debug_assertions) {
            execution.check_spans();
        }
        execution.write_initial(0);
        execution
    }

    /// The execution of a direct call (`direct`) on `tag` whose one round of transfers,
    /// round `round` of `plan`, is done, and whose receives told it `noted`: one named
    /// another algorithm, which spoiled the call, and the plan goes on as the module's notes
    /// say (following the sender's, at a checkpoint). Spoiled, it passes none of the bytes
    /// its receives brought on (the scratch buffers they landed on stay the direct call's).
    ///
    /// # Safety
    /// As for [`new`](Self::new), whose check of the plan against the buffers the caller
    /// made; the rounds before `round` are done too (their copies and reductions run).
    pub(super) unsafe fn resume(
        comm: CommData,
        tag: i32,
        plan: Rc<Plan>,
        buffers: Buffers,
        (datatype, op): (Datatype, Option<Reduction<'a>>),
        round: usize,
        noted: Noted,
    ) -> Execution<'a> {
        debug_assert!(noted.spoiled.is_some() && noted.heard_another());
        // SAFETY: forwarded from this function's contract.
        let mut execution = unsafe { Execution::on_tag(comm, tag, plan, buffers, datatype, op) };
        execution.next_round = round;
        execution.noted = noted;
        execution.round_done();
        execution
    }

    /// This rank's part of `plan`, a rooted call's plan for this rank as its root, run
    /// draining ([`Plan::drained`]) after the root refused its arguments for `refusal`: on
    /// no buffer, every message it sends marked [`REFUSED`], so that each peer that hears
    /// from it (or from a rank that heard so) fails naming it; it fails with `refusal`.
    pub fn draining(comm: CommData, plan: &Plan, refusal: Cause) -> Execution<'static> {
        let none = Datatype::plain(0, "none");
        let drained = Checked::new(plan.drained(), 0, 0, true);
        // SAFETY: the drained plan's spans are all empty, in a receive buffer of none, and
        // it has no scratch: nothing is read or written through the buffers' pointers.
        let mut execution = unsafe { Execution::new(comm, drained, Buffers::none(), none, None) };
        execution.noted.spoiled = Some(refusal);
        execution.noted.refusal = REFUSED;
        execution
    }

    /// Writes the bytes the plan's scratch buffers from index `first` on start with.
    fn write_initial(&self, first: usize) {
        for (span, bytes) in &self.plan.initial {
            if matches!(span.region, Region::Scratch(i) if i >= first) {
                // SAFETY: `Plan::check_spans` placed the span inside its scratch buffer (as
                // the plan was checked, `Checked`, or as a learned rest was added, `learn`),
                // which nothing else uses before the execution's first round (a learned
                // rest's before that rest's first); `start_with` made the bytes as long as
                // the span.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.pointer(*span), span.len)
                };
            }
        }
    }

    /// [`Plan::check_spans`] of this execution's plan against its buffers.
    fn check_spans(&self) {
        let commutative = self.op.as_ref().is_none_or(|op| op.get().is_commutative());
        let (send_len, recv_len) = (self.region(Region::Send).1, self.region(Region::Recv).1);
        self.plan.check_spans(send_len, recv_len, commutative);
    }

    /// Runs the schedule to the end.
    pub fn run(&mut self) -> Result<(), Cause> {
        self.step(true).map(drop)
    }

    /// Advances this schedule as far as possible: to its end with `block`, else until its
    /// transfers are in flight; `true` once it is done. The immediate collectives in flight
    /// beside it move on meanwhile: each call this makes into the PML steps them (`progress`).
    pub fn step(&mut self, block: bool) -> Result<bool, Cause> {
        let me: *const Execution<'_> = self;
        progress::stepping(me, || self.step_alone(block))
    }

    /// Whether this schedule has nothing left to step: it failed, or its last round is done
    /// (its owner's next step finishes it, if none did yet).
    pub fn is_over(&self) -> bool {
        self.failed.is_some()
            || (self.in_flight.is_empty() && self.next_round == self.plan.rounds.len())
    }

    /// Advances this schedule alone; a failure is kept and reported again.
    pub fn step_alone(&mut self, block: bool) -> Result<bool, Cause> {
        if let Some(cause) = &self.failed {
            return Err(cause.clone());
        }
        let result = self.advance(block);
        if let Err(cause) = &result {
            self.fail(cause.clone());
        }
        result
    }

    fn fail(&mut self, cause: Cause) {
        self.abandon();
        self.failed = Some(cause);
    }

    fn advance(&mut self, block: bool) -> Result<bool, Cause> {
        loop {
            if self.in_flight.is_empty() {
                if self.next_round == self.plan.rounds.len() {
                    self.finish()?;
                    return Ok(true);
                }
                self.post_round()?;
            }
            if !self.settle(block)? {
                return Ok(false);
            }
            self.round_done();
        }
    }

    /// What follows the end of the round in flight, its transfers all done: a switch to the
    /// algorithm the first message's sender runs, the round's copies and reductions, the rest
    /// of a plan that learns, and the round to post next.
    #[inline]
    fn round_done(&mut self) {
        if let Some(bit) = self.noted.switch_to.take() {
            self.switch(bit);
        }
        self.run_locals();
        if self.plan.learns_after(self.next_round) {
            self.learn();
        }
        self.next_round = self.go_on();
    }

    /// Takes the outcomes of the transfers in flight as they finish ([`settle`]), each noted
    /// as [`outcome`](Self::outcome) finds it; whether none is left.
    fn settle(&mut self, block: bool) -> Result<bool, Cause> {
        // The execution's fields lent one by one, so that the list in flight changes beside
        // the places its receives landed on (no move of the list out and back).
        let places = Held::of(&self.buffers, &self.staging, &self.scratch, &self.plan);
        let (plan, round, noted) = (&*self.plan, self.next_round, &mut self.noted);
        settle(&mut self.in_flight, block, |done, recv| {
            let outcome = Execution::outcome(plan, round, &places, done, recv)?;
            noted.note(plan, round, recv, outcome);
            Ok(())
        })
    }

    /// The round to run once the current one is done, as the plan's checkpoint says: this
    /// execution's own copy of the plan is made where the checkpoint changes it.
    #[inline]
    fn go_on(&mut self) -> usize {
        let (done, seen, own) = (self.next_round, self.noted.seen, self.noted.own);
        match self.plan.at_checkpoint(done, seen, own) {
            true => {
                let heard = &self.noted.heard;
                Rc::make_mut(&mut self.plan).past_checkpoint(done + 1, seen, own, heard)
            }
            false => done + 1,
        }
    }

    /// [`disagreement`] of a finished transfer, where a receive's lengths that differ from
    /// those this rank expects name the rank whose part it is instead.
    /// Of round `round` of `plan`, over `places`.
    #[inline]
    fn outcome(
        plan: &Plan,
        round: usize,
        places: &Held<'_>,
        done: Result<Done, Cause>,
        recv: Option<(u32, Span)>,
    ) -> Result<(Option<Cause>, u8), Cause> {
        let (cause, mark, landed) = disagreement(done, recv)?;
        let round = &plan.rounds[round];
        let lengths = match recv {
            Some((from, span)) if !round.lengths.is_empty() => round.lengths_of(from, span),
            _ => None,
        };
        match lengths {
            Some(lengths) => {
                let named = Execution::lengths_differ(places, lengths, landed);
                Ok((named.or_else(|| cause.map(|c| parts_of(c, lengths))), mark))
            }
            None => Ok((cause, mark)),
        }
    }

    /// The first of `lengths` that differs from what this rank expects, where it expects
    /// some and all of them landed (`landed` bytes of the receive did).
    #[cold]
    fn lengths_differ(places: &Held<'_>, lengths: &Lengths, landed: usize) -> Option<Cause> {
        let expected = lengths.expected.as_ref()?;
        if landed < lengths.span.len {
            return None;
        }
        // SAFETY: the span lies inside its buffer (`check_spans`) and its receive is done.
        let bytes =
            unsafe { std::slice::from_raw_parts(places.pointer(lengths.span), lengths.span.len) };
        expected
            .iter()
            .zip(decode_lengths(bytes))
            .find(|((_, wanted), got)| wanted != got)
            .map(|(&(peer, expected), got)| Cause::LengthDisagrees {
                peer: peer as i32,
                expected,
                got,
            })
    }

    /// Plans the rest of this rank's part from the lengths it received (the plan's `learn`,
    /// due after the round just done), with the scratch buffers that rest takes, on this
    /// execution's own copy of the plan.
    ///
    /// A length no buffer can hold (bytes a peer on another algorithm sent) spoils the call
    /// naming its sender ([`Cause::LengthUnheld`]) and counts as an empty part, so that the
    /// rest still runs, passing nothing on, and no peer waits for it; a part its rank sends
    /// all the same (one no buffer could be made for) is received into none (`Rest`).
    #[cold]
    fn learn(&mut self) {
        let done = self.next_round;
        let plan = Rc::make_mut(&mut self.plan);
        let learn = plan.learning(done).expect("a plan that learns now");
        // SAFETY: the span lies inside its buffer (`check_spans`) and its receives are done.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.pointer(learn.lengths), learn.lengths.len) };
        let mut learned = decode_lengths(bytes);
        if let Some(cause) = self.plan.hold_lengths(done, &learn, &mut learned) {
            self.noted.spoiled.get_or_insert(cause);
        }
        // Lengths a rank may well have, whose parts it sends: received into no buffer.
        let mut unmade = vec![false; learned.len()];
        let (rest, scratch) = loop {
            let rest = (learn.build)(&learned, &unmade);
            let taken = rest.scratch.iter().map(|&len| scratch::try_take(len));
            let taken: Result<Vec<_>, ()> = match crate::fault::learned_buffer_fails() {
                true if learned.iter().any(|&len| len > 0) => Err(()),
                _ => taken.collect(),
            };
            match (taken, self.plan.longest_learned(done, &learn, &learned)) {
                (Ok(scratch), _) => break (rest, scratch),
                // No buffer that long could be made: the longest learned goes.
                (Err(()), Some(longest)) => {
                    self.noted.spoiled.get_or_insert(longest.cause);
                    learned[longest.index] = 0;
                    unmade[longest.index] = true;
                }
                // Nothing learned is long: this rank's own lengths, whose buffers fail as
                // any allocation does.
                (Err(()), None) => {
                    let scratch = rest.scratch.iter().map(|&len| scratch::take(len));
                    let scratch = scratch.collect();
                    break (rest, scratch);
                }
            }
        };
        let first = Rc::make_mut(&mut self.plan).append(rest);
        self.scratch.extend(scratch);
        self.check_spans();
        self.write_initial(first);
    }

    /// Replaces the plan by this rank's part of the algorithm of mark `bit` (the first
    /// message's sender's), past its first round (that message's receive, done), to run
    /// spoiled; its marks name that algorithm alone, so that the ranks this one sends to
    /// follow it in turn.
    fn switch(&mut self, bit: u8) {
        let follow = self.plan.follow.expect("a plan that follows");
        let marked = self.plan.marked.expect("a plan that follows is marked");
        let index = bit.trailing_zeros() as usize;
        let mut plan = (follow.plan)(&follow, index);
        debug_assert!(matches!(
            plan.rounds.first().map(|r| r.transfers.as_slice()),
            Some([Transfer::Recv { .. }])
        ));
        plan.follow = None;
        plan.marked = Some(Marked::new(marked.names, index));
        for buffer in self.scratch.drain(..) {
            scratch::give_back(buffer);
        }
        self.scratch
            .extend(plan.scratch.iter().map(|&len| scratch::take(len)));
        self.plan = Rc::new(plan);
        self.noted.seen = bit;
        self.noted.own = bit;
        self.check_spans();
        self.write_initial(0);
    }

    /// Posts the next round's transfers ([`post`]).
    fn post_round(&mut self) -> Result<(), Cause> {
        // The places lent field by field, beside the list in flight that `post` fills.
        let places = Held::of(&self.buffers, &self.staging, &self.scratch, &self.plan);
        let round = &self.plan.rounds[self.next_round];
        // SAFETY: the buffers stay valid and the receives' spans untouched until the
        // transfers complete: this execution waits for them, or cancels and waits for them
        // when abandoned (`new`'s contract keeps the caller's buffers valid as long).
        let call = (&self.comm, self.tag, &self.noted);
        unsafe { post(round, call, &places, &mut self.in_flight) }
    }

    /// The round's copies and reductions ([`run_locals`]).
    fn run_locals(&mut self) {
        let round = &self.plan.rounds[self.next_round];
        let spoiled = self.noted.spoiled.is_some();
        if let Some(cause) = run_locals(round, self.datatype, self.op.as_ref(), &*self, spoiled) {
            self.noted.spoiled = Some(cause);
        }
    }

    /// Moves checked staging bytes into the caller's receive buffer; a spoiled call's first
    /// disagreement instead, its staging left unread.
    fn finish(&mut self) -> Result<(), Cause> {
        if let Some(cause) = self.noted.spoiled.take() {
            return Err(cause);
        }
        if let Some(staging) = self.staging.take() {
            if !self.datatype.is_valid(&staging) {
                return Err(Cause::InvalidValue {
                    type_name: self.datatype.name(),
                });
            }
            match &self.buffers.recv_layout {
                // SAFETY: `new`'s caller made `recv` valid for the span of `count` elements,
                // whose packed bytes the staging buffer holds.
                Some((layout, count)) => unsafe {
                    layout.unpack(*count, self.buffers.recv, &staging)
                },
                // SAFETY: `new`'s caller made `recv` valid for `recv_len` bytes, the staging
                // buffer's length.
                None => unsafe {
                    std::ptr::copy_nonoverlapping(
                        staging.as_ptr(),
                        self.buffers.recv,
                        staging.len(),
                    )
                },
            }
        }
        Ok(())
    }

    /// After an error: takes back what is in flight, so no transfer outlives the buffers.
    fn abandon(&mut self) {
        take_back(&mut self.in_flight);
        self.next_round = self.plan.rounds.len();
    }
}

impl Regions for Execution<'_> {
    fn region(&self, region: Region) -> (*mut u8, usize) {
        Held::of(&self.buffers, &self.staging, &self.scratch, &self.plan).region(region)
    }
}

/// Where an execution's regions lie: its fields that say so, lent apart from the others (its
/// list of transfers in flight, what its receives told it).
struct Held<'e> {
    buffers: &'e Buffers,
    /// A `Vec`'s, whose pointer (not a slice's) the receives may write through.
    staging: Option<&'e Vec<u8>>,
    scratch: &'e [Vec<Aligned>],
    /// The scratch buffers' lengths.
    lens: &'e [usize],
}

impl<'e> Held<'e> {
    /// An execution's places, from the fields that say where they lie.
    #[inline]
    fn of(
        buffers: &'e Buffers,
        staging: &'e Option<Vec<u8>>,
        scratch: &'e [Vec<Aligned>],
        plan: &'e Plan,
    ) -> Held<'e> {
        Held {
            buffers,
            staging: staging.as_ref(),
            scratch,
            lens: &plan.scratch,
        }
    }
}

impl Regions for Held<'_> {
    /// The base pointer and length of a region.
    fn region(&self, region: Region) -> (*mut u8, usize) {
        match region {
            Region::Send => (self.buffers.send.cast_mut(), self.buffers.send_len),
            Region::Recv => match self.staging {
                Some(staging) => (staging.as_ptr().cast_mut(), staging.len()),
                None => (self.buffers.recv, self.buffers.recv_len),
            },
            Region::Scratch(i) => (
                self.scratch[i].as_ptr().cast::<u8>().cast_mut(),
                self.lens[i],
            ),
        }
    }
}

impl Drop for Execution<'_> {
    fn drop(&mut self) {
        // Only an abandoned or finished execution is dropped by the API; anything else in
        // flight is taken back before its buffers go.
        self.abandon();
        for buffer in self.scratch.drain(..) {
            scratch::give_back(buffer);
        }
        lists::give_back(Lists {
            in_flight: std::mem::take(&mut self.in_flight),
            scratch: std::mem::take(&mut self.scratch),
        });
    }
}

/// A transfer in flight: its handle, and for a receive its sender and span.
type InFlight = (Handle, Option<(u32, Span)>);

/// An execution's lists, emptied.
#[derive(Default)]
struct Lists {
    in_flight: Vec<InFlight>,
    scratch: Vec<Vec<Aligned>>,
}

/// Executions' lists kept from one execution for the next, with their capacity: a collective
/// called again (a loop's, whose plan is kept) allocates none.
mod lists {
    use std::cell::RefCell;

    use super::Lists;

    /// Lists kept per thread: as many as executions usually overlap; more are freed.
    const KEPT: usize = 16;

    thread_local! {
        static SPARE: RefCell<Vec<Lists>> = const { RefCell::new(Vec::new()) };
    }

    pub fn take() -> Lists {
        // During thread-local teardown, new lists.
        SPARE
            .try_with(|spare| spare.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    pub fn give_back(lists: Lists) {
        let empty = lists.in_flight.is_empty() && lists.scratch.is_empty();
        debug_assert!(empty, "lists given back with transfers or scratch in them");
        // Kept only empty, in release too: the next execution numbers its scratch from 0
        // (`Plan::append` too), which a list holding old buffers would shift.
        if !empty {
            return;
        }
        // During thread-local teardown the lists are simply freed.
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < KEPT {
                spare.push(lists);
            }
        });
    }
}

/// Scratch buffers kept from one collective for the next: a fresh long buffer costs a page
/// fault per page (or zeroing), which for a 1 MiB all-reduce is a good part of the call.
mod scratch {
    use std::cell::RefCell;
    use std::mem::size_of;

    use super::Aligned;

    /// Buffers kept per thread; more are freed.
    const KEPT: usize = 8;

    thread_local! {
        static FREE: RefCell<Vec<Vec<Aligned>>> = const { RefCell::new(Vec::new()) };
    }

    /// A buffer of at least `len` bytes; its bytes are whatever the last user left (any
    /// bytes are valid `Aligned` values, and plans write scratch before reading it).
    pub fn take(len: usize) -> Vec<Aligned> {
        let words = len.div_ceil(size_of::<Aligned>());
        if words == 0 {
            // The empty messages' plans (`Release`, preambles): no kept buffer is held idle.
            return Vec::new();
        }
        kept(words).unwrap_or_else(|| vec![0; words])
    }

    /// A kept buffer of at least `words` words, if one is.
    fn kept(words: usize) -> Option<Vec<Aligned>> {
        FREE.with(|free| {
            let mut free = free.borrow_mut();
            let fit = free.iter().position(|b| b.len() >= words)?;
            Some(free.swap_remove(fit))
        })
    }

    /// [`take`] of a length a peer's message set (a learned rest's), where the memory may
    /// not be there: `Err` rather than the process's abort.
    pub fn try_take(len: usize) -> Result<Vec<Aligned>, ()> {
        let words = len.div_ceil(size_of::<Aligned>());
        if words == 0 {
            return Ok(Vec::new());
        }
        if let Some(buffer) = kept(words) {
            return Ok(buffer);
        }
        let mut buffer = Vec::new();
        buffer.try_reserve_exact(words).map_err(drop)?;
        buffer.resize(words, Aligned::default());
        Ok(buffer)
    }

    pub fn give_back(buffer: Vec<Aligned>) {
        if buffer.capacity() == 0 {
            return;
        }
        // During thread-local teardown the buffer is simply freed.
        let _ = FREE.try_with(|free| {
            let mut free = free.borrow_mut();
            if free.len() == KEPT {
                // The shortest goes: the long ones are the costly ones to make again.
                let shortest = (0..KEPT).min_by_key(|&i| free[i].len()).expect("KEPT > 0");
                if free[shortest].len() >= buffer.len() {
                    return;
                }
                free.swap_remove(shortest);
            }
            free.push(buffer);
        });
    }
}

/// Every rank's plan run in one process, for the algorithms' unit tests: messages are byte
/// vectors queued between each pair of ranks in the order they were posted (a receive takes
/// the oldest from its sender, as the collectives' one tag a call does), and reductions fold
/// elements with a function of the tests'. A round ends once its receives have their
/// messages and its sends have met their receives: a send past the eager limit waits for the
/// receive it matches, so a plan must not depend on sends finishing alone.
///
/// [`run_marked`] runs plans whose ranks may disagree, as the executor does: messages carry
/// their sender's marks, checkpoints and releases run, and no bytes move.
#[cfg(test)]
pub(crate) mod simulation {
    use std::collections::{HashMap, VecDeque};

    use super::{decode_lengths, Local, Plan, Region, Span, Transfer, LENGTH};

    /// One rank's buffers and where its plan stands.
    struct Rank {
        plan: Plan,
        send: Vec<u8>,
        recv: Vec<u8>,
        scratch: Vec<Vec<u8>>,
        round: usize,
        /// The sends of the round in flight, once posted: each peer, and how many messages
        /// this rank had sent it before (the receive that matches it is the peer's next).
        sends: Option<Vec<(u32, usize)>>,
        /// The marks seen, this rank's own, and the senders of others with their marks, as
        /// the executor keeps them.
        seen: u8,
        own: u8,
        heard: Vec<(u32, u8)>,
    }

    /// A message in flight: its bytes (none in a marked run) and its sender's marks.
    type Message = (Vec<u8>, u8);

    /// The plan's scratch buffers from index `first` on, as they start: filled with a byte
    /// no plan relies on, but for the bytes the plan starts them with.
    fn scratch_of(plan: &Plan, first: usize) -> Vec<Vec<u8>> {
        let mut scratch: Vec<Vec<u8>> = plan.scratch[first..]
            .iter()
            .map(|&len| vec![0xa5; len])
            .collect();
        for (span, bytes) in &plan.initial {
            if let Region::Scratch(i) = span.region {
                if i >= first {
                    scratch[i - first][span.offset..][..span.len].copy_from_slice(bytes);
                }
            }
        }
        scratch
    }

    /// Runs `plans` (their ranks' lengths may disagree, so no bytes move): each rank's marks
    /// seen at its end; a panic where the ranks wait for each other, or where a message is
    /// left over.
    pub(crate) fn run_marked(plans: Vec<Plan>) -> Vec<u8> {
        let n = plans.len();
        let ranks = simulate(
            plans,
            vec![Vec::new(); n],
            &vec![0; n],
            1,
            |_, _| vec![],
            false,
        );
        ranks.iter().map(|r| r.seen).collect()
    }

    impl Rank {
        fn bytes(&self, span: Span) -> &[u8] {
            let buffer = match span.region {
                Region::Send => &self.send,
                Region::Recv => &self.recv,
                Region::Scratch(i) => &self.scratch[i],
            };
            &buffer[span.offset..span.offset + span.len]
        }

        fn bytes_mut(&mut self, span: Span) -> &mut [u8] {
            let buffer = match span.region {
                Region::Send => panic!("a plan writes its send buffer"),
                Region::Recv => &mut self.recv,
                Region::Scratch(i) => &mut self.scratch[i],
            };
            &mut buffer[span.offset..span.offset + span.len]
        }
    }

    /// Runs `plans[r]` over rank r's `send` and a receive buffer of `recv_lens[r]` bytes;
    /// `combine(lower, higher)` reduces two elements of `element` bytes (the lower rank's
    /// first). Every rank's receive buffer at the end; a panic where a message is of another
    /// length than its receive, or where the ranks wait for each other (sends that wait for
    /// their receives included).
    pub(crate) fn run(
        plans: Vec<Plan>,
        send: Vec<Vec<u8>>,
        recv_lens: &[usize],
        element: usize,
        combine: impl Fn(&[u8], &[u8]) -> Vec<u8>,
    ) -> Vec<Vec<u8>> {
        let ranks = simulate(plans, send, recv_lens, element, combine, true);
        ranks.into_iter().map(|r| r.recv).collect()
    }

    /// [`run`], moving bytes where `bytes`, else [`run_marked`].
    fn simulate(
        plans: Vec<Plan>,
        send: Vec<Vec<u8>>,
        recv_lens: &[usize],
        element: usize,
        combine: impl Fn(&[u8], &[u8]) -> Vec<u8>,
        bytes: bool,
    ) -> Vec<Rank> {
        let mut ranks: Vec<Rank> = plans
            .into_iter()
            .zip(send)
            .zip(recv_lens)
            .map(|((plan, send), &len)| Rank {
                scratch: match bytes {
                    true => scratch_of(&plan, 0),
                    false => Vec::new(),
                },
                seen: plan.marked.map_or(0, |m| m.bit),
                own: plan.marked.map_or(0, |m| m.bit),
                heard: Vec::new(),
                plan,
                send,
                recv: vec![0x5a; len],
                round: 0,
                sends: None,
            })
            .collect();
        let mut queues: HashMap<(u32, u32), VecDeque<Message>> = HashMap::new();
        // The messages each rank has sent each other so far, and the receives each has
        // posted from each other so far, by (sender, receiver).
        let mut sent: HashMap<(u32, u32), usize> = HashMap::new();
        let mut receives: HashMap<(u32, u32), usize> = HashMap::new();
        loop {
            let mut moved = false;
            for (me, rank) in ranks.iter_mut().enumerate() {
                let Some(round) = rank.plan.rounds.get(rank.round) else {
                    continue;
                };
                if rank.sends.is_none() {
                    let mut sends = Vec::new();
                    for transfer in &round.transfers {
                        match *transfer {
                            Transfer::Send { to, span } => {
                                let message = match bytes {
                                    true => rank.bytes(span).to_vec(),
                                    false => Vec::new(),
                                };
                                queues
                                    .entry((me as u32, to))
                                    .or_default()
                                    .push_back((message, rank.seen));
                                let before = sent.entry((me as u32, to)).or_default();
                                sends.push((to, *before));
                                *before += 1;
                            }
                            Transfer::Recv { from, .. } => {
                                *receives.entry((from, me as u32)).or_default() += 1;
                            }
                        }
                    }
                    rank.sends = Some(sends);
                    moved = true;
                }
                // The round's receives from each sender, in the order they were posted.
                let mut wanted: HashMap<u32, usize> = HashMap::new();
                let received = round.transfers.iter().all(|t| match *t {
                    Transfer::Recv { from, .. } => {
                        let nth = wanted.entry(from).or_default();
                        *nth += 1;
                        queues.get(&(from, me as u32)).map_or(0, VecDeque::len) >= *nth
                    }
                    Transfer::Send { .. } => true,
                });
                let sends = rank.sends.as_deref().unwrap_or_default();
                let matched = sends.iter().all(|&(to, before)| {
                    receives.get(&(me as u32, to)).copied().unwrap_or(0) > before
                });
                if !received || !matched {
                    continue;
                }
                let round = std::mem::take(&mut rank.plan.rounds[rank.round]);
                for transfer in &round.transfers {
                    if let Transfer::Recv { from, span } = *transfer {
                        let queue = queues.get_mut(&(from, me as u32)).expect("a message");
                        let (message, mark) = queue.pop_front().expect("a message");
                        if mark & !rank.own != 0 {
                            rank.heard.push((from, mark));
                        }
                        rank.seen |= mark;
                        if bytes {
                            assert_eq!(message.len(), span.len, "rank {me}: from {from}");
                            rank.bytes_mut(span).copy_from_slice(&message);
                            let lengths = round.lengths_of(from, span);
                            if let Some(expected) = lengths.and_then(|l| l.expected.as_ref()) {
                                let got = decode_lengths(&message[..LENGTH * expected.len()]);
                                let wanted: Vec<usize> = expected.iter().map(|e| e.1).collect();
                                assert_eq!(got, wanted, "rank {me}: lengths from {from}");
                            }
                        }
                    }
                }
                for local in round.locals.iter().filter(|_| bytes) {
                    match *local {
                        Local::Copy { from, to } => {
                            let bytes = rank.bytes(from).to_vec();
                            rank.bytes_mut(to).copy_from_slice(&bytes);
                        }
                        Local::Reduce {
                            incoming,
                            acc,
                            incoming_lower,
                        } => {
                            let incoming = rank.bytes(incoming).to_vec();
                            let acc = rank.bytes_mut(acc);
                            for (x, y) in incoming.chunks(element).zip(acc.chunks_mut(element)) {
                                let folded = match incoming_lower {
                                    true => combine(x, y),
                                    false => combine(y, x),
                                };
                                y.copy_from_slice(&folded);
                            }
                        }
                    }
                }
                if let Some(learn) = rank.plan.learning(rank.round) {
                    let mut lengths = match bytes {
                        true => decode_lengths(rank.bytes(learn.lengths)),
                        false => vec![0; learn.lengths.len / LENGTH],
                    };
                    rank.plan.hold_lengths(rank.round, &learn, &mut lengths);
                    let unmade = vec![false; lengths.len()];
                    let first = rank.plan.append((learn.build)(&lengths, &unmade));
                    if bytes {
                        let added = scratch_of(&rank.plan, first);
                        rank.scratch.extend(added);
                    }
                }
                rank.round = rank
                    .plan
                    .go_on(rank.round, rank.seen, rank.own, &rank.heard);
                rank.sends = None;
                moved = true;
            }
            if ranks.iter().all(|r| r.round == r.plan.rounds.len()) {
                assert!(
                    queues.values().all(VecDeque::is_empty),
                    "a message left over"
                );
                return ranks;
            }
            assert!(moved, "the ranks wait for each other");
        }
    }

    mod tests {
        use super::super::{Plan, Region, Span};
        use super::run;

        /// Two ranks' plans: each sends its byte to the other in `send_round` and receives
        /// the other's in round 1.
        fn crossing(send_round: usize) -> Vec<Plan> {
            (0..2u32)
                .map(|me| {
                    let mut p = Plan::default();
                    let (mine, theirs) =
                        (Span::new(Region::Send, 0, 1), Span::new(Region::Recv, 0, 1));
                    match send_round {
                        1 => p.round().round().send(1 - me, mine).recv(1 - me, theirs),
                        _ => p.round().send(1 - me, mine).round().recv(1 - me, theirs),
                    };
                    p
                })
                .collect()
        }

        #[test]
        fn an_exchange_in_one_round_runs() {
            let got = run(
                crossing(1),
                vec![vec![7], vec![9]],
                &[1, 1],
                1,
                |_, _| vec![],
            );
            assert_eq!(got, [vec![9], vec![7]]);
        }

        /// Sends that only an eager protocol lets finish before their receives are posted:
        /// past the eager limit each rank waits in its send for the other's receive.
        #[test]
        #[should_panic(expected = "the ranks wait for each other")]
        fn sends_before_their_receives_on_both_sides_wait_for_each_other() {
            run(
                crossing(0),
                vec![vec![7], vec![9]],
                &[1, 1],
                1,
                |_, _| vec![],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::algorithms::hosts::{self, Placement};
    use super::super::algorithms::Ranks;
    use super::{scratch, Cause, Plan, Region, Span};

    /// A span whose end does not fit a `usize` lies past its buffer, however its end wraps
    /// (a learned rest's spans come from lengths a peer sent).
    #[test]
    #[should_panic(expected = "does not fit its buffer of 16 bytes")]
    fn a_span_whose_end_wraps_does_not_fit() {
        let mut p = Plan::default();
        let scratch = p.scratch(16);
        let wrapping = Span::new(scratch.region, 8, usize::MAX - 3);
        p.round().recv(1, wrapping);
        p.check_spans(0, 0, true);
    }

    /// A leader's plan of a gather (`scatter` false) or scatter of parts of any length on
    /// `host_of`, rooted at rank 0, whose parts are 4 bytes each.
    fn leader_of_varcount(host_of: &[u32], leader: u32, scatter: bool) -> Plan {
        let (n, hosts) = (host_of.len() as u32, Placement::new(host_of));
        let me = Ranks {
            rank: leader,
            size: n,
        };
        let mut p = Plan::default();
        match scatter {
            true => {
                hosts::scatter_varcount(&mut p, me, hosts, 0, None, Span::new(Region::Recv, 0, 4))
            }
            false => {
                hosts::gather_varcount(&mut p, me, hosts, 0, Span::new(Region::Send, 0, 4), None)
            }
        }
        p
    }

    /// A leader that learns lengths whose sum with its own part's would not fit a buffer (no
    /// rank's lengths, but bytes a peer sent) counts each that does not fit as an empty part
    /// and names the first one's sender (`Plan::hold_lengths`): wrapped, the sum would size
    /// its message's buffer short of the parts' spans, and before, it panicked.
    #[test]
    fn a_leader_counts_learned_lengths_that_do_not_fit_as_empty_naming_their_sender() {
        let half = isize::MAX as usize / 2;
        for scatter in [false, true] {
            for (host_of, learned, unheld, sender) in [
                (&[0, 1, 1][..], vec![usize::MAX - 3], vec![0], 2),
                (&[0, 1, 1, 1], vec![half, half], vec![1], 3),
                (&[0, 1, 1, 1], vec![4, isize::MAX as usize], vec![1], 3),
                (&[0, 1, 1, 1], vec![usize::MAX, usize::MAX], vec![0, 1], 2),
            ] {
                let what = format!("{learned:?} by leader 1 of {host_of:?}, scatter {scatter}");
                let mut plan = leader_of_varcount(host_of, 1, scatter);
                let learn = plan
                    .learning(0)
                    .expect("a leader learns after its first round");
                let mut held = learned.clone();
                let cause = plan.hold_lengths(0, &learn, &mut held);
                let expected = (0..learned.len())
                    .map(|i| if unheld.contains(&i) { 0 } else { learned[i] })
                    .collect::<Vec<_>>();
                assert_eq!(held, expected, "{what}");
                let first = learned[unheld[0]];
                assert!(
                    matches!(cause, Some(Cause::LengthUnheld { peer, length })
                        if peer == sender && length == first),
                    "{what}: {cause:?}"
                );
                // The rest plans from what it holds, with spans inside their buffers.
                plan.append((learn.build)(&held, &vec![false; held.len()]));
                plan.check_spans(4, 4, true);
            }
            // Lengths that fit are held as they came.
            let mut plan = leader_of_varcount(&[0, 1, 1], 1, scatter);
            let learn = plan.learning(0).expect("a leader learns");
            let mut held = vec![1 << 40];
            assert!(plan.hold_lengths(0, &learn, &mut held).is_none());
            assert_eq!(held, [1 << 40]);
        }
    }

    /// A gather's leader receives the part of a rank whose length it could make no buffer
    /// for (`Execution::learn`), into none: that rank sends it all the same, and by
    /// rendezvous its send would wait for ever for a receive that never came. A part it
    /// holds as empty because its rank said so is no message, and is not received.
    #[test]
    fn a_gather_leader_receives_a_part_it_made_no_buffer_for() {
        let receives_from_2 = |unmade: bool| {
            let plan = leader_of_varcount(&[0, 1, 1], 1, false);
            let learn = plan.learn.clone().expect("a leader learns");
            let rest = (learn.build)(&[0], &[unmade]);
            let receives = rest.rounds.iter().flat_map(|r| &r.transfers);
            let receives = receives.filter(|t| matches!(t, super::Transfer::Recv { from: 2, .. }));
            receives.count()
        };
        assert_eq!(receives_from_2(true), 1);
        assert_eq!(receives_from_2(false), 0);
    }

    /// A buffer no allocator can make is refused, not the process's abort (a learned
    /// length's, `Execution::learn`).
    #[test]
    fn a_scratch_buffer_that_cannot_be_made_is_refused() {
        assert!(scratch::try_take(1 << 62).is_err());
        assert!(scratch::try_take(usize::MAX).is_err());
        assert!(scratch::try_take(64).is_ok_and(|b| b.len() >= 4));
    }
}
