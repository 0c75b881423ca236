//! Model-based tests: the engine's matching against a deliberately naive model of MPI's rules
//! (one list of posted receives and one of arrived messages, each scanned in order), on
//! random interleavings of posts, arrivals out of sequence order, wildcards, probes, matched
//! probes and cancels across several peers and communicators.

use std::collections::HashMap;

use pml::protocol::{Completion, Core, CoreConfig, MessageHandle, PeerCaps};
use pml::wire::{Frame, WireEnvelope};
use pml::{ContextId, Handle, Rank, SourceSel, Status, Tag, TagSel};
use proptest::prelude::*;

mod frames_common;
use frames_common::frame_bytes;

const PEERS: u32 = 3;
const CONTEXTS: u32 = 2;
/// How far out of order a message may arrive within its stream.
const REORDER: usize = 3;
const CAPACITY: usize = 16;

#[derive(Clone, Debug)]
enum Op {
    Post {
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
    },
    Arrive {
        stream: u32,
        skip: usize,
    },
    Probe {
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
    },
    MatchedProbe {
        context: u32,
        source: Option<u32>,
        tag: Option<i32>,
    },
    MatchedRecv {
        pick: usize,
    },
    Cancel {
        pick: usize,
    },
}

/// Tags of messages and of receives: user tags, a runtime tag above the marked ones (-1), and
/// marked ones (`pml::match_key`): -24 to -17 share the key -24, -25's key is -32.
const SENT_TAGS: [i32; 8] = [-1, 0, 1, 2, -24, -21, -17, -25];
const SELECTED_TAGS: [i32; 8] = [-1, 0, 1, 2, -24, -18, -32, -25];

fn selectors() -> impl Strategy<Value = (u32, Option<u32>, Option<i32>)> {
    (
        0..CONTEXTS,
        prop::option::weighted(0.7, 0..PEERS),
        prop::option::weighted(0.7, prop::sample::select(&SELECTED_TAGS[..])),
    )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => selectors().prop_map(|(context, source, tag)| Op::Post { context, source, tag }),
        5 => (0..PEERS * CONTEXTS, 0..REORDER).prop_map(|(stream, skip)| Op::Arrive { stream, skip }),
        1 => selectors().prop_map(|(context, source, tag)| Op::Probe { context, source, tag }),
        1 => selectors().prop_map(|(context, source, tag)| Op::MatchedProbe { context, source, tag }),
        1 => any::<usize>().prop_map(|pick| Op::MatchedRecv { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Msg {
    id: u32,
    context: ContextId,
    source: Rank,
    tag: Tag,
    seq: u32,
}

impl Msg {
    /// Lengths vary with the id, so a status alone tells messages apart.
    fn payload(&self) -> Vec<u8> {
        let mut p = self.id.to_le_bytes().to_vec();
        p.resize(4 + (self.id as usize % 7), 0);
        p
    }
    fn status(&self) -> Status {
        Status {
            source: self.source,
            tag: self.tag,
            len: 4 + (self.id as usize % 7),
        }
    }
}

fn accepts(source: Option<u32>, tag: Option<i32>, m: &Msg) -> bool {
    source.is_none_or(|s| s == m.source)
        && tag.map_or(m.tag >= 0, |t| pml::match_key(t) == pml::match_key(m.tag))
}

/// The reference: everything is a list scanned front to back.
#[derive(Default)]
struct Model {
    /// (receive id, context, source, tag), in posting order.
    posted: Vec<(usize, u32, Option<u32>, Option<i32>)>,
    /// Matchable messages, in the order they became matchable.
    unexpected: Vec<Msg>,
    /// Arrived ahead of their turn.
    early: Vec<Msg>,
    expected: HashMap<(u32, u32), u32>,
    /// What each receive got.
    matched: HashMap<usize, Msg>,
}

impl Model {
    fn arrive(&mut self, m: Msg) {
        self.early.push(m);
        // Release every message whose turn has come, repeatedly.
        while let Some(i) = self.early.iter().position(|e| {
            self.expected
                .get(&(e.context, e.source))
                .copied()
                .unwrap_or(0)
                == e.seq
        }) {
            let e = self.early.remove(i);
            *self.expected.entry((e.context, e.source)).or_insert(0) += 1;
            match self
                .posted
                .iter()
                .position(|&(_, c, s, t)| c == e.context && accepts(s, t, &e))
            {
                Some(p) => {
                    let (id, ..) = self.posted.remove(p);
                    self.matched.insert(id, e);
                }
                None => self.unexpected.push(e),
            }
        }
    }

    fn find(&self, context: u32, source: Option<u32>, tag: Option<i32>) -> Option<usize> {
        self.unexpected
            .iter()
            .position(|m| m.context == context && accepts(source, tag, m))
    }
}

fn sel(source: Option<u32>, tag: Option<i32>) -> (SourceSel, TagSel) {
    (
        source.map_or(SourceSel::Any, SourceSel::Rank),
        tag.map_or(TagSel::Any, TagSel::Tag),
    )
}

/// A message's frame; every third is synchronous, so that the core's path for plain eager
/// messages and its general one meet in the same streams.
fn frame(m: &Msg) -> Vec<u8> {
    let payload = m.payload();
    let f = Frame::Match {
        envelope: WireEnvelope {
            context: m.context,
            source: m.source,
            tag: m.tag,
            seq: m.seq,
        },
        sync_request: m.id.is_multiple_of(3).then_some(u64::from(m.id) + 1),
        payload: &payload,
    };
    frame_bytes(&f)
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut core: Core<Vec<u8>, Vec<u8>> = Core::new(
        PEERS as usize,
        CoreConfig {
            unexpected_budget: usize::MAX / 2,
        },
    );
    for p in 0..PEERS {
        core.set_peer(
            p,
            PeerCaps {
                eager_limit: 1 << 16,
                max_frame: 1 << 17,
                remote_read: true,
            },
        );
    }
    let mut model = Model::default();
    // Per stream (context, source): messages made but not yet delivered, in sequence order.
    let mut unsent: HashMap<u32, Vec<Msg>> = HashMap::new();
    let mut next_seq: HashMap<u32, u32> = HashMap::new();
    let mut next_id = 0u32;
    // Receives the engine has outstanding: receive id -> handle.
    let mut open: Vec<(usize, Handle)> = Vec::new();
    let mut next_recv = 0usize;
    // Matched-probed messages: the engine's handle beside the model's message.
    let mut held: Vec<(MessageHandle, Msg)> = Vec::new();

    for op in ops {
        match op {
            Op::Post {
                context,
                source,
                tag,
            } => {
                let id = next_recv;
                next_recv += 1;
                let (s, t) = sel(source, tag);
                let h = core.post_recv(context, s, t, vec![0; CAPACITY]).unwrap();
                match model.find(context, source, tag) {
                    Some(i) => {
                        let m = model.unexpected.remove(i);
                        model.matched.insert(id, m);
                    }
                    None => model.posted.push((id, context, source, tag)),
                }
                open.push((id, h));
            }
            Op::Arrive { stream, skip } => {
                let (context, source) = (stream / PEERS, stream % PEERS);
                let queue = unsent.entry(stream).or_default();
                while queue.len() < REORDER {
                    let seq = next_seq.entry(stream).or_insert(0);
                    queue.push(Msg {
                        id: next_id,
                        context,
                        source,
                        tag: SENT_TAGS
                            [(next_id.wrapping_mul(2654435761) >> 29) as usize % SENT_TAGS.len()],
                        seq: *seq,
                    });
                    *seq += 1;
                    next_id += 1;
                }
                let m = queue.remove(skip.min(queue.len() - 1));
                core.on_frame(m.source, &frame(&m)).unwrap();
                model.arrive(m);
            }
            Op::Probe {
                context,
                source,
                tag,
            } => {
                let (s, t) = sel(source, tag);
                let got = core.probe(context, s, t);
                let want = model
                    .find(context, source, tag)
                    .map(|i| model.unexpected[i].status());
                prop_assert_eq!(got, want);
            }
            Op::MatchedProbe {
                context,
                source,
                tag,
            } => {
                let (s, t) = sel(source, tag);
                let got = core.matched_probe(context, s, t);
                let want = model
                    .find(context, source, tag)
                    .map(|i| model.unexpected.remove(i));
                prop_assert_eq!(got.map(|g| g.1), want.map(|m| m.status()));
                if let (Some((h, _)), Some(m)) = (got, want) {
                    held.push((h, m));
                }
            }
            Op::MatchedRecv { pick } => {
                if held.is_empty() {
                    continue;
                }
                let (h, m) = held.remove(pick % held.len());
                let r = core.matched_recv(h, vec![0; CAPACITY]).unwrap();
                let id = next_recv;
                next_recv += 1;
                model.matched.insert(id, m);
                open.push((id, r));
            }
            Op::Cancel { pick } => {
                if open.is_empty() {
                    continue;
                }
                let (id, h) = open[pick % open.len()];
                let was_posted = model.posted.iter().position(|p| p.0 == id);
                let cancelled = core.cancel(h).unwrap();
                prop_assert_eq!(cancelled, was_posted.is_some());
                if let Some(i) = was_posted {
                    model.posted.remove(i);
                    open.retain(|&(o, _)| o != id);
                    let done = core.take_completion(h).unwrap();
                    let cancelled_ok =
                        matches!(done, Some(Completion::Recv { result: Err(_), .. }));
                    prop_assert!(
                        cancelled_ok,
                        "a cancelled receive must complete as cancelled"
                    );
                }
            }
        }
        // Every receive the model matched, the engine completed with the same message; and
        // none other.
        let mut still_open = Vec::new();
        for (id, h) in open.drain(..) {
            match core.take_completion(h).unwrap() {
                Some(Completion::Recv { buf, result }) => {
                    let m = model.matched.remove(&id);
                    prop_assert!(
                        m.is_some(),
                        "engine completed receive {} the model did not",
                        id
                    );
                    let m = m.unwrap();
                    prop_assert_eq!(result.unwrap(), m.status());
                    prop_assert_eq!(&buf[..m.payload().len()], &m.payload()[..]);
                }
                Some(Completion::Send { .. }) => unreachable!(),
                None => {
                    prop_assert!(
                        !model.matched.contains_key(&id),
                        "model matched receive {} but the engine did not",
                        id
                    );
                    still_open.push((id, h));
                }
            }
        }
        open = still_open;
        prop_assert_eq!(core.unexpected_len(), model.unexpected.len());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_like_the_reference_model(ops in prop::collection::vec(op(), 1..200)) {
        run(ops)?;
    }
}
