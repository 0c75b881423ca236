//! The matcher against plain lists scanned in order, over many keys: far more exact
//! (source, tag) queues than a matcher keeps when empty, so that queues are dropped and made
//! again, their slots reused, while receives are posted, matched, taken and cancelled.

use std::collections::HashMap;

use pml::matching::{Matcher, PostedId};
use pml::{Envelope, SourceSel, TagSel};
use proptest::prelude::*;

/// A posted receive in the model: its id, context, source and tag selectors, and the
/// matcher's name for it.
type Posted = (usize, u32, Option<u32>, Option<i32>, PostedId);

#[derive(Clone, Debug)]
enum Op {
    Post(u32, Option<u32>, Option<i32>),
    Arrive(u32, u32, i32),
    Cancel(usize),
    Take(u32, Option<u32>, Option<i32>),
}

fn sel(s: Option<u32>, t: Option<i32>) -> (SourceSel, TagSel) {
    (
        s.map_or(SourceSel::Any, SourceSel::Rank),
        t.map_or(TagSel::Any, TagSel::Tag),
    )
}

fn accepts(s: Option<u32>, t: Option<i32>, e: &Envelope) -> bool {
    s.is_none_or(|s| s == e.source) && t.map_or(e.tag >= 0, |t| t == e.tag)
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    // Many tags (well past the 64 empty queues a KeyedQueues keeps), so queues are dropped
    // and remade, their slab slots reused, while receives are posted, matched and cancelled.
    let tag = prop_oneof![1 => Just(-1i32), 6 => 0i32..90];
    let selt = prop::option::weighted(0.85, tag.clone());
    let sels = prop::option::weighted(0.85, 0u32..2);
    let op = prop_oneof![
        5 => (0u32..2, sels.clone(), selt.clone()).prop_map(|(c, s, t)| Op::Post(c, s, t)),
        4 => (0u32..2, 0u32..2, tag).prop_map(|(c, s, t)| Op::Arrive(c, s, t)),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => (0u32..2, sels, selt).prop_map(|(c, s, t)| Op::Take(c, s, t)),
    ];
    prop::collection::vec(op, 1..600)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The matcher against lists scanned in order, with many keys.
    #[test]
    fn matcher_with_many_keys_matches_like_lists(ops in ops()) {
        let mut m: Matcher<usize, usize> = Matcher::default();
        let mut posted: Vec<Posted> = Vec::new();
        let mut unexpected: Vec<(Envelope, usize)> = Vec::new();
        let mut ids: Vec<(usize, PostedId)> = Vec::new();
        let mut got: HashMap<usize, usize> = HashMap::new();
        let (mut next_recv, mut next_msg) = (0usize, 0usize);
        for op in ops {
            match op {
                Op::Post(c, s, t) => {
                    let id = next_recv;
                    next_recv += 1;
                    let (ss, ts) = sel(s, t);
                    let want = unexpected.iter().position(|(e, _)| e.context == c && accepts(s, t, e));
                    let have = m.take_unexpected(c, ss, ts);
                    match want {
                        Some(i) => {
                            let (e, msg) = unexpected.remove(i);
                            prop_assert_eq!(have, Some((e, msg)));
                        }
                        None => {
                            prop_assert_eq!(have, None);
                            let pid = m.post(c, ss, ts, id);
                            posted.push((id, c, s, t, pid));
                            ids.push((id, pid));
                        }
                    }
                }
                Op::Arrive(c, s, t) => {
                    let msg = next_msg;
                    next_msg += 1;
                    let e = Envelope { context: c, source: s, tag: t };
                    let want = posted.iter().position(|&(_, pc, ps, pt, _)| pc == c && accepts(ps, pt, &e));
                    let have = m.match_arrival(e);
                    match want {
                        Some(i) => {
                            let (id, ..) = posted.remove(i);
                            prop_assert_eq!(have, Some(id));
                            got.insert(id, msg);
                        }
                        None => {
                            prop_assert_eq!(have, None);
                            m.queue_unexpected(e, msg);
                            unexpected.push((e, msg));
                        }
                    }
                }
                Op::Cancel(pick) => {
                    if ids.is_empty() {
                        continue;
                    }
                    let (id, pid) = ids[pick % ids.len()];
                    let want = posted.iter().position(|p| p.0 == id);
                    let have = m.cancel(pid);
                    match want {
                        Some(i) => {
                            posted.remove(i);
                            prop_assert_eq!(have, Some(id));
                        }
                        None => prop_assert_eq!(have, None),
                    }
                }
                Op::Take(c, s, t) => {
                    let (ss, ts) = sel(s, t);
                    let want = unexpected.iter().position(|(e, _)| e.context == c && accepts(s, t, e));
                    let have = m.take_unexpected(c, ss, ts);
                    prop_assert_eq!(have, want.map(|i| unexpected.remove(i)));
                }
            }
            prop_assert_eq!(m.posted_len(), posted.len());
            prop_assert_eq!(m.unexpected_len(), unexpected.len());
        }
    }
}
