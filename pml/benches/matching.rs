//! The cost of one match against queue depth, beside a linear-list baseline.
//!
//! Each iteration matches one message against `depth` posted receives (or posts one receive
//! against `depth` unexpected messages) and then restores the queue, so the depth stays put.
//! The matched entry is the newest, the worst place for a list scanned from the front.
//! `wild` is the share of the other entries that are wildcards (ANY_SOURCE or ANY_TAG with
//! selectors that do not take the measured message).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pml::matching::Matcher;
use pml::{Envelope, SourceSel, TagSel};

const DEPTHS: [usize; 4] = [1, 64, 1024, 16384];
const SOURCES: u32 = 64;

/// The selectors of the i-th filler entry: distinct from the measured (source 0, tag 0) and
/// from each other; every tenth one a wildcard when `wild` is set.
fn filler(i: usize, wild: bool) -> (SourceSel, TagSel) {
    let source = 1 + (i as u32 % (SOURCES - 1));
    let tag = 1 + (i / SOURCES as usize) as i32;
    if wild && i.is_multiple_of(10) {
        if i.is_multiple_of(20) {
            (SourceSel::Any, TagSel::Tag(tag))
        } else {
            (SourceSel::Rank(source), TagSel::Any)
        }
    } else {
        (SourceSel::Rank(source), TagSel::Tag(tag))
    }
}

const TARGET: Envelope = Envelope {
    context: 0,
    source: 0,
    tag: 0,
};

/// The baseline: one list, scanned in order, as in the textbook description of matching.
struct Linear {
    posted: Vec<(SourceSel, TagSel, usize)>,
}

impl Linear {
    fn match_arrival(&mut self, e: Envelope) -> Option<usize> {
        let i = self
            .posted
            .iter()
            .position(|(s, t, _)| s.accepts(e.source) && t.accepts(e.tag))?;
        Some(self.posted.remove(i).2)
    }
}

fn posted(c: &mut Criterion) {
    let mut g = c.benchmark_group("posted");
    for wild in [false, true] {
        let pct = if wild { "10pct-wild" } else { "0pct-wild" };
        for depth in DEPTHS {
            let mut m: Matcher<usize, ()> = Matcher::default();
            let mut lin = Linear { posted: Vec::new() };
            for i in 0..depth - 1 {
                let (s, t) = filler(i, wild);
                m.post(0, s, t, i);
                lin.posted.push((s, t, i));
            }
            m.post(0, SourceSel::Rank(0), TagSel::Tag(0), depth);
            lin.posted.push((SourceSel::Rank(0), TagSel::Tag(0), depth));
            g.bench_with_input(
                BenchmarkId::new(format!("engine/{pct}"), depth),
                &depth,
                |b, _| {
                    b.iter(|| {
                        let got = m.match_arrival(black_box(TARGET)).unwrap();
                        m.post(0, SourceSel::Rank(0), TagSel::Tag(0), got);
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new(format!("linear/{pct}"), depth),
                &depth,
                |b, _| {
                    b.iter(|| {
                        let got = lin.match_arrival(black_box(TARGET)).unwrap();
                        lin.posted.push((SourceSel::Rank(0), TagSel::Tag(0), got));
                    })
                },
            );
        }
    }
    g.finish();
}

fn unexpected(c: &mut Criterion) {
    let mut g = c.benchmark_group("unexpected");
    for depth in DEPTHS {
        let mut m: Matcher<(), usize> = Matcher::default();
        let mut lin: Vec<(Envelope, usize)> = Vec::new();
        for i in 0..depth - 1 {
            let (s, t) = filler(i, false);
            let (SourceSel::Rank(source), TagSel::Tag(tag)) = (s, t) else {
                unreachable!()
            };
            let e = Envelope {
                context: 0,
                source,
                tag,
            };
            m.queue_unexpected(e, i);
            lin.push((e, i));
        }
        m.queue_unexpected(TARGET, depth);
        lin.push((TARGET, depth));
        g.bench_with_input(BenchmarkId::new("engine", depth), &depth, |b, _| {
            b.iter(|| {
                let (e, v) = m
                    .take_unexpected(0, SourceSel::Rank(0), black_box(TagSel::Tag(0)))
                    .unwrap();
                m.queue_unexpected(e, v);
            })
        });
        g.bench_with_input(BenchmarkId::new("linear", depth), &depth, |b, _| {
            b.iter(|| {
                let i = lin
                    .iter()
                    .position(|(e, _)| e.source == 0 && black_box(TagSel::Tag(0)).accepts(e.tag))
                    .unwrap();
                let entry = lin.remove(i);
                lin.push(entry);
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1));
    targets = posted, unexpected
}
criterion_main!(benches);
