//! The protocol core's cost per small message, without transport or waiting: one eager
//! send through two cores, receive posted first (the ping-pong case) and after (unexpected).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use pml::protocol::{Completion, Core, CoreConfig, Payload, PeerCaps, SendArgs, SendMode};
use pml::{RemoteKey, SourceSel, TagSel};

type TestCore = Core<Vec<u8>, Vec<u8>>;

fn pair() -> (TestCore, TestCore) {
    let caps = PeerCaps {
        eager_limit: 4096,
        max_frame: 65536,
        remote_read: true,
    };
    let mut a = Core::new(2, CoreConfig::default());
    let mut b = Core::new(2, CoreConfig::default());
    a.set_peer(1, caps);
    b.set_peer(0, caps);
    (a, b)
}

/// Sends one 8-byte message from `a` to `b`, carrying the frame by hand, and collects both
/// requests; `recv_first` posts the receive before the frame arrives.
fn one_message(a: &mut TestCore, b: &mut TestCore, frame: &mut Vec<u8>, recv_first: bool) {
    let post = |b: &mut TestCore| {
        b.post_recv(0, SourceSel::Rank(0), TagSel::Tag(1), vec![0u8; 8])
            .unwrap()
    };
    let r = recv_first.then(|| post(b));
    let s = a
        .post_send(SendArgs {
            context: 0,
            source: 0,
            peer: 1,
            tag: 1,
            mode: SendMode::Standard,
            buf: vec![7u8; 8],
            remote: RemoteKey::default(),
            eager_limit: None,
        })
        .unwrap();
    while let Some(p) = a.next_ready_peer() {
        while let Some(t) = a.next_transmit(p) {
            frame.clear();
            frame.extend_from_slice(t.header());
            let Payload::Bytes(payload) = t.payload else {
                unreachable!("a contiguous send's frame gathers blocks");
            };
            frame.extend_from_slice(payload);
            a.transmitted(p);
            b.on_frame(0, black_box(frame)).unwrap();
        }
    }
    let r = r.unwrap_or_else(|| post(b));
    assert!(matches!(
        a.take_completion(s),
        Ok(Some(Completion::Send { .. }))
    ));
    assert!(matches!(
        b.take_completion(r),
        Ok(Some(Completion::Recv { .. }))
    ));
    // Credit frames go back, or the sender's eager budget runs dry.
    while let Some(p) = b.next_ready_peer() {
        while let Some(t) = b.next_transmit(p) {
            frame.clear();
            frame.extend_from_slice(t.header());
            b.transmitted(p);
            a.on_frame(1, frame).unwrap();
        }
    }
}

fn eager(c: &mut Criterion) {
    let mut g = c.benchmark_group("eager-8B");
    for recv_first in [true, false] {
        let (mut a, mut b) = pair();
        let mut frame = Vec::with_capacity(256);
        let name = if recv_first {
            "receive-posted-first"
        } else {
            "unexpected"
        };
        g.bench_function(name, |bench| {
            bench.iter(|| one_message(&mut a, &mut b, &mut frame, recv_first))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = eager
}
criterion_main!(benches);
