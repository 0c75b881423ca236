//! Every protocol path, driven through two cores wired back to back by a harness that plays
//! the transport: it carries frames, records their kinds, and serves remote reads.

use std::collections::HashMap;

use pml::protocol::{
    Action, ClaimEnd, Completion, Core, CoreConfig, DataTarget, DirectSend, Payload, PeerCaps,
    SendArgs, SendMode, Started, Transmit,
};
use pml::transport::{Placement, Sink};
use pml::wire::{Frame, RemoteKey, WireEnvelope, DATA_HEADER_LEN, MAX_HEADER_LEN};
use pml::{Handle, PmlError, SourceSel, Status, TagSel};

mod frames_common;
use frames_common::frame_bytes;

type TestCore = Core<Vec<u8>, Vec<u8>>;

/// A frame's payload: every send here is of contiguous bytes.
fn payload_of<'a>(t: &Transmit<'a>) -> &'a [u8] {
    match t.payload {
        Payload::Bytes(bytes) => bytes,
        Payload::Blocks { .. } => panic!("a contiguous send's frame gathers blocks"),
    }
}

const EAGER: usize = 1024;

fn caps(remote_read: bool) -> PeerCaps {
    PeerCaps {
        eager_limit: EAGER,
        max_frame: 4096,
        remote_read,
    }
}

struct Pair {
    cores: [TestCore; 2],
    /// What remote reads find: the sender's bytes, by the key its RTS carried.
    exposed: HashMap<u64, Vec<u8>>,
    next_key: u64,
    /// Kinds of the frames carried, in order, as (from, kind name).
    log: Vec<(u32, &'static str)>,
    /// The eager limit the sends carry of their own (`SendArgs::eager_limit`).
    send_eager_limit: Option<usize>,
}

fn kind(frame: &Frame<'_>) -> &'static str {
    match frame {
        Frame::Match {
            sync_request: None, ..
        } => "MATCH",
        Frame::Match { .. } => "MATCH+SYNC",
        Frame::Rts { .. } => "RTS",
        Frame::Fin { .. } => "FIN",
        Frame::Ack { .. } => "ACK",
        Frame::Get { .. } => "GET",
        Frame::Data { .. } => "DATA",
        Frame::Credit { .. } => "CREDIT",
        Frame::Wake => "WAKE",
    }
}

impl Pair {
    fn new(remote_read: bool, config: CoreConfig) -> Pair {
        Pair::with_caps(caps(remote_read), config)
    }

    fn with_caps(c: PeerCaps, config: CoreConfig) -> Pair {
        let mut cores = [Core::new(2, config), Core::new(2, config)];
        cores[0].set_peer(1, c);
        cores[1].set_peer(0, c);
        Pair {
            cores,
            exposed: HashMap::new(),
            next_key: 1,
            log: Vec::new(),
            send_eager_limit: None,
        }
    }

    fn send(&mut self, from: usize, tag: i32, data: Vec<u8>, mode: SendMode) -> Handle {
        let key = self.next_key;
        self.next_key += 1;
        self.exposed.insert(key, data.clone());
        self.cores[from]
            .post_send(SendArgs {
                context: 0,
                source: from as u32,
                peer: 1 - from as u32,
                tag,
                mode,
                buf: data,
                remote: RemoteKey { addr: key, key: 0 },
                eager_limit: self.send_eager_limit,
            })
            .unwrap()
    }

    /// Offers a send to `send_direct`, with a transport that takes the frame (and delivers
    /// it at once, logged as "DIRECT") only when `room` says so; a standard send it does not
    /// take, and any other, is posted as the engine posts it.
    fn send_direct(
        &mut self,
        from: usize,
        tag: i32,
        data: Vec<u8>,
        mode: SendMode,
        room: bool,
    ) -> Handle {
        let to = 1 - from;
        let mut delivered = false;
        if mode == SendMode::Standard {
            let [a, b] = &mut self.cores;
            let (sender, receiver) = if from == 0 { (a, b) } else { (b, a) };
            let send = DirectSend {
                context: 0,
                source: from as u32,
                peer: to as u32,
                tag,
                len: data.len(),
                eager_limit: self.send_eager_limit,
            };
            let sent = sender
                .send_direct(send, |header: &[u8]| {
                    if room {
                        let mut bytes = header.to_vec();
                        bytes.extend_from_slice(&data);
                        receiver.on_frame(from as u32, &bytes)?;
                        delivered = true;
                    }
                    Ok(room)
                })
                .unwrap();
            assert_eq!(sent, delivered);
        }
        let h = if delivered {
            Handle::SENT
        } else {
            let key = self.next_key;
            self.next_key += 1;
            self.exposed.insert(key, data.clone());
            self.cores[from]
                .post_send(SendArgs {
                    context: 0,
                    source: from as u32,
                    peer: to as u32,
                    tag,
                    mode,
                    buf: data,
                    remote: RemoteKey { addr: key, key: 0 },
                    eager_limit: self.send_eager_limit,
                })
                .unwrap()
        };
        assert_eq!(delivered, h == Handle::SENT);
        if delivered {
            self.log.push((from as u32, "DIRECT"));
        }
        h
    }

    fn recv(&mut self, at: usize, source: SourceSel, tag: TagSel, capacity: usize) -> Handle {
        self.cores[at]
            .post_recv(0, source, tag, vec![0xEE; capacity])
            .unwrap()
    }

    /// Carries at most one frame each way per round, and performs reads; returns whether
    /// anything moved.
    fn step(&mut self) -> bool {
        let mut moved = false;
        for from in 0..2 {
            let to = 1 - from;
            if let Some(t) = self.cores[from].next_transmit(to as u32) {
                let mut bytes = t.header().to_vec();
                bytes.extend_from_slice(payload_of(&t));
                self.cores[from].transmitted(to as u32);
                self.log
                    .push((from as u32, kind(&Frame::decode(&bytes).unwrap())));
                self.cores[to].on_frame(from as u32, &bytes).unwrap();
                moved = true;
            }
            while let Some(Action::Read {
                recv, remote, len, ..
            }) = self.cores[from].poll_action()
            {
                let src = self.exposed[&remote.addr][..len].to_vec();
                self.cores[from]
                    .read_target(recv)
                    .unwrap()
                    .copy_from_slice(&src);
                self.cores[from].read_done(recv).unwrap();
                moved = true;
            }
        }
        moved
    }

    fn run(&mut self) {
        while self.step() {}
    }

    fn kinds(&self) -> Vec<&'static str> {
        self.log.iter().map(|(_, k)| *k).collect()
    }

    fn recv_result(&mut self, at: usize, h: Handle) -> (Vec<u8>, Result<Status, PmlError>) {
        match self.cores[at].take_completion(h).unwrap() {
            Some(Completion::Recv { buf, result }) => (buf, result),
            other => panic!("receive not complete: {other:?}"),
        }
    }

    /// Starts a blocking receive at `at` as the core's claim.
    fn claim(
        &mut self,
        at: usize,
        source: SourceSel,
        tag: TagSel,
        capacity: usize,
    ) -> Started<Vec<u8>> {
        self.cores[at]
            .claim_recv(0, source, tag, vec![0xEE; capacity])
            .unwrap()
    }

    /// The claim's bytes and outcome, once an eager message ended it.
    fn claim_result(&mut self, at: usize) -> (Vec<u8>, Result<Status, PmlError>) {
        assert!(self.cores[at].claim_ended(), "the claim is still waiting");
        match self.cores[at].take_claim() {
            Some(ClaimEnd::Done { buf, result }) => (buf, result.map_err(|e| *e)),
            other => panic!("the claim did not end with a copy: {other:?}"),
        }
    }

    fn send_done(&mut self, at: usize, h: Handle) -> bool {
        self.cores[at].is_complete(h).unwrap()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn threshold_boundaries_pick_the_protocol() {
    for (len, expect) in [
        (0, "MATCH"),
        (1, "MATCH"),
        (EAGER - 1, "MATCH"),
        (EAGER, "MATCH"),
        (EAGER + 1, "RTS"),
    ] {
        for remote_read in [true, false] {
            let mut p = Pair::new(remote_read, CoreConfig::default());
            let data = pattern(len, 3);
            let s = p.send(0, 5, data.clone(), SendMode::Standard);
            let r = p.recv(1, SourceSel::Rank(0), TagSel::Tag(5), len);
            p.run();
            assert_eq!(p.kinds()[0], expect, "len {len}");
            let (buf, status) = p.recv_result(1, r);
            assert_eq!(buf, data, "len {len}");
            assert_eq!(
                status.unwrap(),
                Status {
                    source: 0,
                    tag: 5,
                    len
                }
            );
            assert!(p.send_done(0, s));
        }
    }
}

#[test]
fn eager_limit_is_capped_by_the_frame_size() {
    let c = PeerCaps {
        eager_limit: 1 << 20,
        max_frame: 256,
        remote_read: true,
    };
    let mut p = Pair::with_caps(c, CoreConfig::default());
    // Room for the larger MATCH header, a synchronous send's.
    let largest_eager = 256 - pml::wire::SYNC_MATCH_HEADER_LEN;
    p.send(0, 1, pattern(largest_eager, 0), SendMode::Standard);
    p.send(0, 1, pattern(largest_eager + 1, 0), SendMode::Standard);
    p.run();
    assert_eq!(p.kinds(), ["MATCH", "RTS"]);
}

#[test]
fn eager_send_completes_before_any_receive() {
    let mut p = Pair::new(true, CoreConfig::default());
    let s = p.send(0, 1, pattern(100, 1), SendMode::Standard);
    p.run();
    assert!(p.send_done(0, s));
    assert_eq!(p.cores[1].unexpected_len(), 1);
    let r = p.recv(1, SourceSel::Any, TagSel::Any, 100);
    let (buf, status) = p.recv_result(1, r);
    assert_eq!(buf, pattern(100, 1));
    assert_eq!(status.unwrap().source, 0);
}

/// A WAKE frame (`Core::wake`, for a peer asleep in its PML) is carried and taken as
/// nothing: the messages sent around it arrive and match in order, the receiver answers
/// nothing, and a wake to a rank that is no peer is refused by name.
#[test]
fn a_wake_is_carried_and_taken_as_nothing() {
    let mut p = Pair::new(true, CoreConfig::default());
    let first = p.send(0, 1, pattern(10, 1), SendMode::Standard);
    p.cores[0].wake(1).unwrap();
    let second = p.send(0, 1, pattern(10, 2), SendMode::Standard);
    p.run();
    assert!(p.send_done(0, first) && p.send_done(0, second));
    let mut kinds = p.kinds();
    kinds.sort_unstable();
    assert_eq!(kinds, ["MATCH", "MATCH", "WAKE"], "frames carried");
    assert_eq!(p.cores[1].unexpected_len(), 2);
    for seed in [1, 2] {
        let r = p.recv(1, SourceSel::Rank(0), TagSel::Tag(1), 10);
        assert_eq!(p.recv_result(1, r).0, pattern(10, seed));
    }
    assert!(matches!(p.cores[0].wake(7), Err(PmlError::UnknownPeer(7))));
}

#[test]
fn synchronous_eager_send_waits_for_the_match() {
    let mut p = Pair::new(true, CoreConfig::default());
    let s = p.send(0, 9, pattern(10, 2), SendMode::Synchronous);
    p.run();
    assert!(!p.send_done(0, s), "completed before the receiver matched");
    let r = p.recv(1, SourceSel::Rank(0), TagSel::Tag(9), 10);
    p.run();
    assert!(p.send_done(0, s));
    assert_eq!(p.kinds(), ["MATCH+SYNC", "ACK"]);
    assert_eq!(p.recv_result(1, r).0, pattern(10, 2));
}

#[test]
fn synchronous_rendezvous_send_waits_for_the_match() {
    let mut p = Pair::new(true, CoreConfig::default());
    let s = p.send(0, 9, pattern(5000, 2), SendMode::Synchronous);
    p.run();
    assert!(!p.send_done(0, s));
    let r = p.recv(1, SourceSel::Rank(0), TagSel::Tag(9), 5000);
    p.run();
    assert!(p.send_done(0, s));
    assert_eq!(p.recv_result(1, r).0, pattern(5000, 2));
}

#[test]
fn rendezvous_by_remote_read() {
    let mut p = Pair::new(true, CoreConfig::default());
    let data = pattern(100_000, 7);
    let s = p.send(0, 2, data.clone(), SendMode::Standard);
    p.run();
    assert_eq!(p.kinds(), ["RTS"], "an unmatched RTS carries no data");
    assert!(
        !p.send_done(0, s),
        "the sender's buffer stays put until FIN"
    );
    let r = p.recv(1, SourceSel::Rank(0), TagSel::Any, 100_000);
    p.run();
    assert_eq!(p.kinds(), ["RTS", "FIN"]);
    assert!(p.send_done(0, s));
    assert_eq!(p.recv_result(1, r).0, data);
}

#[test]
fn rendezvous_by_get_streams_data_frames() {
    let mut p = Pair::new(false, CoreConfig::default());
    let data = pattern(10_000, 9);
    let r = p.recv(1, SourceSel::Any, TagSel::Tag(4), 10_000);
    let s = p.send(0, 4, data.clone(), SendMode::Standard);
    p.run();
    let kinds = p.kinds();
    assert_eq!(kinds[..2], ["RTS", "GET"]);
    // 4096-byte frames carry 4072 bytes of data each: three frames for 10 000 bytes.
    assert_eq!(kinds[2..], ["DATA", "DATA", "DATA"]);
    assert!(p.send_done(0, s));
    assert_eq!(p.recv_result(1, r).0, data);
}

#[test]
fn truncation_names_both_lengths_and_writes_nothing_past_the_buffer() {
    for (len, remote_read) in [(100, true), (5000, true), (5000, false)] {
        let mut p = Pair::new(remote_read, CoreConfig::default());
        let data = pattern(len, 4);
        let s = p.send(0, 3, data.clone(), SendMode::Standard);
        let r = p.recv(1, SourceSel::Rank(0), TagSel::Tag(3), 40);
        p.run();
        let (buf, result) = p.recv_result(1, r);
        assert_eq!(buf.len(), 40);
        assert_eq!(
            buf,
            data[..40],
            "the buffer holds the message's first bytes"
        );
        let err = result.unwrap_err();
        assert!(matches!(
            &err,
            PmlError::Truncated(t) if t.message_len == len && t.buffer_len == 40
        ));
        let text = err.to_string();
        assert!(
            text.contains(&len.to_string()) && text.contains("40"),
            "{text}"
        );
        assert!(
            p.send_done(0, s),
            "a truncated receive still releases the sender"
        );
    }
}

#[test]
fn zero_length_messages_by_every_protocol() {
    // Standard eager.
    let mut p = Pair::new(true, CoreConfig::default());
    let s = p.send(0, 0, vec![], SendMode::Standard);
    let r = p.recv(1, SourceSel::Any, TagSel::Any, 0);
    p.run();
    assert!(p.send_done(0, s));
    assert_eq!(p.recv_result(1, r).1.unwrap().len, 0);
    // Rendezvous (no eager budget left), both read and GET: no read, no DATA.
    for remote_read in [true, false] {
        let tiny = CoreConfig {
            unexpected_budget: 10,
        };
        let mut p = Pair::new(remote_read, tiny);
        let s = p.send(0, 0, vec![], SendMode::Synchronous);
        let r = p.recv(1, SourceSel::Any, TagSel::Any, 0);
        p.run();
        assert!(p.send_done(0, s));
        assert_eq!(p.recv_result(1, r).1.unwrap().len, 0);
        assert!(!p.kinds().contains(&"DATA"));
    }
}

#[test]
fn unexpected_budget_turns_eager_into_rendezvous_and_credit_restores_it() {
    let config = CoreConfig {
        unexpected_budget: 4 * (100 + pml::protocol::EAGER_OVERHEAD),
    };
    let mut p = Pair::new(true, config);
    for _ in 0..6 {
        p.send(0, 1, pattern(100, 0), SendMode::Standard);
    }
    p.run();
    assert_eq!(
        p.kinds(),
        ["MATCH", "MATCH", "MATCH", "MATCH", "RTS", "RTS"]
    );
    // Receiving gives the budget back in batches; the next message goes eagerly again.
    let recvs: Vec<_> = (0..6)
        .map(|_| p.recv(1, SourceSel::Rank(0), TagSel::Tag(1), 100))
        .collect();
    p.run();
    assert!(p.kinds().contains(&"CREDIT"));
    for r in recvs {
        assert_eq!(p.recv_result(1, r).0, pattern(100, 0));
    }
    p.log.clear();
    p.send(0, 1, pattern(100, 0), SendMode::Standard);
    p.run();
    assert_eq!(p.kinds(), ["MATCH"]);
}

/// With the default budget, OSU's bandwidth window (64 messages, here at a 64 KiB eager limit,
/// as on shared memory, TCP and udp;ofi_rxd) goes eagerly whole, window after window, the
/// budget coming back between windows: with 4 MiB the first window's last message went by
/// rendezvous, and the last 16 of every window after it.
#[test]
fn the_default_budget_keeps_windows_of_64_kib_messages_eager() {
    const LIMIT: usize = 64 << 10;
    let c = PeerCaps {
        eager_limit: LIMIT,
        max_frame: LIMIT + MAX_HEADER_LEN + 64,
        remote_read: true,
    };
    let mut p = Pair::with_caps(c, CoreConfig::default());
    for window in 0..3 {
        p.log.clear();
        let recvs: Vec<_> = (0..64)
            .map(|_| p.recv(1, SourceSel::Rank(0), TagSel::Tag(1), LIMIT))
            .collect();
        for i in 0..64 {
            p.send(0, 1, pattern(LIMIT, i), SendMode::Standard);
        }
        p.run();
        let rendezvous = p.kinds().iter().filter(|&&k| k == "RTS").count();
        assert_eq!(
            rendezvous, 0,
            "window {window}: {rendezvous} of its 64 messages went by rendezvous"
        );
        for (i, r) in recvs.into_iter().enumerate() {
            assert!(p.recv_result(1, r).0 == pattern(LIMIT, i as u8));
        }
    }
}

#[test]
fn direct_sends_are_charged_to_the_budget_like_queued_ones() {
    let config = CoreConfig {
        unexpected_budget: 4 * (100 + pml::protocol::EAGER_OVERHEAD),
    };
    let mut p = Pair::new(true, config);
    let sends: Vec<_> = (0..6)
        .map(|i| p.send_direct(0, i, pattern(100, i as u8), SendMode::Standard, true))
        .collect();
    p.run();
    assert_eq!(
        p.kinds(),
        ["DIRECT", "DIRECT", "DIRECT", "DIRECT", "RTS", "RTS"]
    );
    assert!(sends[..4].iter().all(|&h| h == Handle::SENT));
    assert_eq!(p.cores[1].unexpected_len(), 6);
    let recvs: Vec<_> = (0..6)
        .map(|_| p.recv(1, SourceSel::Rank(0), TagSel::Any, 100))
        .collect();
    p.run();
    for (i, r) in recvs.into_iter().enumerate() {
        let (buf, status) = p.recv_result(1, r);
        assert_eq!(buf, pattern(100, i as u8));
        assert_eq!(status.unwrap().tag, i as i32);
    }
    for &h in &sends[4..] {
        assert!(p.send_done(0, h));
    }
}

#[test]
fn direct_sends_never_overtake_queued_ones() {
    let mut p = Pair::new(true, CoreConfig::default());
    // A full transport queues the first send, with the number it would have had.
    let first = p.send_direct(0, 1, pattern(10, 1), SendMode::Standard, false);
    assert_ne!(first, Handle::SENT);
    // Room again, but the queued send must go first: the second queues behind it.
    let second = p.send_direct(0, 2, pattern(10, 2), SendMode::Standard, true);
    assert_ne!(second, Handle::SENT);
    p.run();
    assert_eq!(p.kinds(), ["MATCH", "MATCH"]);
    // Now nothing is queued: the third goes straight out, numbered after the other two.
    assert_eq!(
        p.send_direct(0, 3, pattern(10, 3), SendMode::Standard, true),
        Handle::SENT
    );
    for tag in 1..=3 {
        let r = p.recv(1, SourceSel::Rank(0), TagSel::Any, 10);
        let (buf, status) = p.recv_result(1, r);
        assert_eq!((buf, status.unwrap().tag), (pattern(10, tag as u8), tag));
    }
    assert_eq!(p.cores[1].unexpected_len(), 0);
}

#[test]
fn a_send_s_own_eager_limit_lowers_the_peer_s_on_both_paths() {
    let cases = [(1, 100), (2, 101), (3, EAGER + 1)];
    for direct in [false, true] {
        let mut p = Pair::new(true, CoreConfig::default());
        p.send_eager_limit = Some(100);
        let mut handles = Vec::new();
        for &(tag, len) in &cases[..2] {
            let data = pattern(len, tag as u8);
            handles.push(if direct {
                p.send_direct(0, tag, data, SendMode::Standard, true)
            } else {
                p.send(0, tag, data, SendMode::Standard)
            });
        }
        // A limit above the peer's does not raise it.
        p.send_eager_limit = Some(10 * EAGER);
        handles.push(p.send(0, 3, pattern(EAGER + 1, 3), SendMode::Standard));
        let recvs: Vec<_> = cases
            .iter()
            .map(|&(tag, len)| p.recv(1, SourceSel::Rank(0), TagSel::Tag(tag), len))
            .collect();
        p.run();
        let first = if direct { "DIRECT" } else { "MATCH" };
        assert_eq!(
            p.kinds(),
            [first, "RTS", "RTS", "FIN", "FIN"],
            "direct: {direct}"
        );
        for (r, &(tag, len)) in recvs.into_iter().zip(&cases) {
            assert_eq!(p.recv_result(1, r).0, pattern(len, tag as u8));
        }
        // A direct send completed as it went (`Handle::SENT`): nothing to ask the core.
        assert!(handles
            .iter()
            .all(|&h| h == Handle::SENT || p.send_done(0, h)));
    }
}

#[test]
fn synchronous_and_large_sends_are_never_direct() {
    let mut p = Pair::new(true, CoreConfig::default());
    let sync = p.send_direct(0, 1, pattern(10, 1), SendMode::Synchronous, true);
    let large = p.send_direct(0, 2, pattern(EAGER + 1, 2), SendMode::Standard, true);
    assert_ne!(sync, Handle::SENT);
    assert_ne!(large, Handle::SENT);
    p.run();
    assert!(
        !p.send_done(0, sync),
        "a synchronous send waits for the match"
    );
    let r1 = p.recv(1, SourceSel::Rank(0), TagSel::Tag(1), 10);
    let r2 = p.recv(1, SourceSel::Rank(0), TagSel::Tag(2), EAGER + 1);
    p.run();
    assert_eq!(p.kinds(), ["MATCH+SYNC", "RTS", "ACK", "FIN"]);
    assert!(p.send_done(0, sync) && p.send_done(0, large));
    assert_eq!(p.recv_result(1, r1).0, pattern(10, 1));
    assert_eq!(p.recv_result(1, r2).0, pattern(EAGER + 1, 2));
}

#[test]
fn stale_handle_is_an_error() {
    let mut p = Pair::new(true, CoreConfig::default());
    let s = p.send(0, 1, vec![1], SendMode::Standard);
    p.run();
    assert!(matches!(
        p.cores[0].take_completion(s),
        Ok(Some(Completion::Send { result: Ok(()), .. }))
    ));
    assert_eq!(
        p.cores[0].take_completion(s).unwrap_err(),
        PmlError::StaleRequest(s)
    );
    let s2 = p.send(0, 1, vec![1], SendMode::Standard);
    assert_ne!(s, s2);
    assert_eq!(p.cores[0].is_complete(s), Err(PmlError::StaleRequest(s)));
}

#[test]
fn cancel_a_posted_receive() {
    let mut p = Pair::new(true, CoreConfig::default());
    let r = p.recv(1, SourceSel::Rank(0), TagSel::Tag(1), 8);
    assert!(p.cores[1].cancel(r).unwrap());
    let (_, result) = p.recv_result(1, r);
    assert_eq!(result, Err(PmlError::Cancelled));
    // A cancelled receive takes no message: the next one waits in the unexpected queue.
    p.send(0, 1, vec![1], SendMode::Standard);
    p.run();
    assert_eq!(p.cores[1].unexpected_len(), 1);
    // A matched receive cannot be cancelled.
    let r = p.recv(1, SourceSel::Rank(0), TagSel::Tag(1), 8);
    assert!(!p.cores[1].cancel(r).unwrap());
}

#[test]
fn probe_leaves_and_matched_probe_takes() {
    let mut p = Pair::new(true, CoreConfig::default());
    p.send(0, 6, pattern(30, 1), SendMode::Standard);
    p.send(0, 6, pattern(5000, 2), SendMode::Standard);
    p.run();
    let st = p.cores[1].probe(0, SourceSel::Any, TagSel::Tag(6)).unwrap();
    assert_eq!(st.len, 30);
    assert_eq!(
        p.cores[1].probe(0, SourceSel::Any, TagSel::Tag(6)),
        Some(st)
    );
    let (m, st) = p.cores[1]
        .matched_probe(0, SourceSel::Rank(0), TagSel::Any)
        .unwrap();
    assert_eq!(st.len, 30);
    // The probed message is no longer visible: the next probe sees the rendezvous one.
    let (m2, st2) = p.cores[1]
        .matched_probe(0, SourceSel::Any, TagSel::Any)
        .unwrap();
    assert_eq!(st2.len, 5000);
    let r2 = p.cores[1].matched_recv(m2, vec![0; 5000]).unwrap();
    let r = p.cores[1].matched_recv(m, vec![0; 30]).unwrap();
    p.run();
    assert_eq!(p.recv_result(1, r).0, pattern(30, 1));
    assert_eq!(p.recv_result(1, r2).0, pattern(5000, 2));
    assert!(
        p.cores[1].matched_recv(m, vec![]).is_err(),
        "a message is received once"
    );
}

fn match_frame(seq: u32, tag: i32, payload: &[u8]) -> Vec<u8> {
    let f = Frame::Match {
        envelope: WireEnvelope {
            context: 0,
            source: 0,
            tag,
            seq,
        },
        sync_request: None,
        payload,
    };
    frame_bytes(&f)
}

#[test]
fn early_arrivals_wait_for_their_turn() {
    let mut core: TestCore = Core::new(1, CoreConfig::default());
    core.set_peer(0, caps(true));
    let r = core
        .post_recv(0, SourceSel::Rank(0), TagSel::Any, vec![0; 1])
        .unwrap();
    core.on_frame(0, &match_frame(2, 1, b"c")).unwrap();
    core.on_frame(0, &match_frame(1, 1, b"b")).unwrap();
    assert!(
        !core.is_complete(r).unwrap(),
        "matched a message sent after an earlier one"
    );
    core.on_frame(0, &match_frame(0, 1, b"a")).unwrap();
    let Some(Completion::Recv { buf, .. }) = core.take_completion(r).unwrap() else {
        panic!("not complete");
    };
    assert_eq!(buf, b"a");
    for want in [b"b", b"c"] {
        let r = core
            .post_recv(0, SourceSel::Any, TagSel::Any, vec![0; 1])
            .unwrap();
        let Some(Completion::Recv { buf, .. }) = core.take_completion(r).unwrap() else {
            panic!("not complete");
        };
        assert_eq!(&buf, want);
    }
}

#[test]
fn bad_frames_are_errors_not_panics() {
    let mut core: TestCore = Core::new(2, CoreConfig::default());
    core.set_peer(0, caps(true));
    assert!(matches!(
        core.on_frame(0, &[1, 2]),
        Err(PmlError::Wire { peer: 0, .. })
    ));
    // A duplicate sequence number.
    core.on_frame(0, &match_frame(0, 1, b"")).unwrap();
    let err = core.on_frame(0, &match_frame(0, 1, b"")).unwrap_err();
    assert!(err.to_string().contains("when 1 was next"), "{err}");
    // Control frames for requests that do not exist.
    let mut h = [0u8; MAX_HEADER_LEN];
    let n = Frame::Fin { send_request: 77 }.encode_header(&mut h);
    assert!(matches!(
        core.on_frame(0, &h[..n]),
        Err(PmlError::Protocol { peer: 0, .. })
    ));
    let n = Frame::Data {
        recv_request: 5,
        offset: 0,
        payload: b"",
    }
    .encode_header(&mut h);
    assert!(matches!(
        core.on_frame(0, &h[..n]),
        Err(PmlError::Protocol { .. })
    ));
    let n = Frame::Credit { bytes: u64::MAX }.encode_header(&mut h);
    assert!(matches!(
        core.on_frame(0, &h[..n]),
        Err(PmlError::Protocol { .. })
    ));
    // A peer with no transport.
    assert_eq!(core.on_frame(1, &h[..n]), Err(PmlError::UnknownPeer(1)));
}

#[test]
fn a_failed_read_completes_with_the_cause_and_releases_the_sender() {
    let mut p = Pair::new(true, CoreConfig::default());
    let s = p.send(0, 1, pattern(5000, 0), SendMode::Standard);
    let r = p.recv(1, SourceSel::Any, TagSel::Any, 5000);
    while p.cores[0].next_transmit(1).is_some() {
        let t = p.cores[0].next_transmit(1).unwrap();
        let mut bytes = t.header().to_vec();
        bytes.extend_from_slice(payload_of(&t));
        p.cores[0].transmitted(1);
        p.cores[1].on_frame(0, &bytes).unwrap();
    }
    let Some(Action::Read { recv, .. }) = p.cores[1].poll_action() else {
        panic!("no read");
    };
    p.cores[1].read_failed(recv, "EPERM".into()).unwrap();
    p.run();
    assert!(p.send_done(0, s));
    let err = p.recv_result(1, r).1.unwrap_err();
    assert!(err.to_string().contains("EPERM"), "{err}");
}

#[test]
fn a_held_frame_stays_in_front_of_control_frames_queued_meanwhile() {
    let mut p = Pair::new(false, CoreConfig::default());
    // Rank 1 has a GET for rank 0 in flight and rank 0 then streams DATA to it.
    let data = pattern(10_000, 3);
    let r = p.recv(1, SourceSel::Any, TagSel::Tag(1), 10_000);
    let s = p.send(0, 1, data.clone(), SendMode::Standard);
    p.step(); // RTS to rank 1, and its GET back
    let first = p.cores[0].next_transmit(1).unwrap();
    let (header, payload) = (first.header().to_vec(), payload_of(&first).to_vec());
    assert_eq!(
        kind(&Frame::decode(&[&header[..], &payload[..]].concat()).unwrap()),
        "DATA"
    );
    // A stream transport wrote part of it; then a synchronous send queues a frame for rank 1,
    // and a control frame (FIN for a rendezvous rank 1 reads) would go first if not held.
    p.cores[0].hold_front(1);
    let sync = p.send(0, 2, vec![1, 2, 3], SendMode::Synchronous);
    let again = p.cores[0].next_transmit(1).unwrap();
    assert_eq!(
        (again.header(), payload_of(&again)),
        (&header[..], &payload[..])
    );
    p.cores[0].transmitted(1);
    p.cores[1]
        .on_frame(0, &[&header[..], &payload[..]].concat())
        .unwrap();
    p.log.push((0, "DATA"));
    let r2 = p.recv(1, SourceSel::Any, TagSel::Tag(2), 3);
    p.run();
    assert!(p.send_done(0, s) && p.send_done(0, sync));
    assert_eq!(p.recv_result(1, r).0, data);
    assert_eq!(p.recv_result(1, r2).0, [1, 2, 3]);
}

#[test]
fn data_lands_in_place_only_where_the_receive_expects_it() {
    let mut p = Pair::new(false, CoreConfig::default());
    let data = pattern(6000, 5);
    let r = p.recv(1, SourceSel::Any, TagSel::Tag(7), 6000);
    let s = p.send(0, 7, data.clone(), SendMode::Standard);
    p.step(); // RTS to rank 1, and its GET back
    let t = p.cores[0].next_transmit(1).unwrap();
    let Frame::Data { recv_request, .. } = Frame::decode(t.header()).unwrap() else {
        panic!("not DATA");
    };
    // Wrong offset, too long, and another peer are refused before anything is written.
    let c = &mut p.cores[1];
    assert!(c.data_target(0, recv_request, 8, 10).is_err());
    assert!(c.data_target(0, recv_request, 0, 6001).is_err());
    assert!(c.data_target(1, recv_request, 0, 10).is_err());
    assert!(c.data_target(0, recv_request + 1, 0, 10).is_err());
    // The whole message in two pieces, written straight into the lent bytes.
    fn lent(target: DataTarget<'_>) -> &mut [u8] {
        match target {
            DataTarget::Bytes(bytes) => bytes,
            DataTarget::Blocks { .. } => panic!("a contiguous receive lent as blocks"),
        }
    }
    lent(c.data_target(0, recv_request, 0, 4000).unwrap()).copy_from_slice(&data[..4000]);
    c.data_landed(0, recv_request, 4000).unwrap();
    assert!(!c.is_complete(r).unwrap());
    let rest = lent(c.data_target(0, recv_request, 4000, 2000).unwrap());
    assert_eq!(rest.len(), 2000);
    rest.copy_from_slice(&data[4000..]);
    assert!(
        c.data_landed(0, recv_request, 2001).is_err(),
        "more than expected"
    );
    c.data_landed(0, recv_request, 2000).unwrap();
    assert_eq!(p.recv_result(1, r).0, data);
    assert!(!p.send_done(0, s), "the sender still streams its own copy");
}

/// A stream transport asks where a DATA frame goes with whatever of its head has arrived: a
/// sender's partial write can cut the stream anywhere in the header. Until the header is
/// whole the core asks for more; taking the frame for one to stage made TCP refuse a 1 MiB
/// DATA frame as longer than any staged frame (a rare failure of the threads stress test
/// over TCP on a loaded machine).
#[test]
fn a_data_frame_cut_in_its_header_is_placed_once_the_header_is_whole() {
    let mut p = Pair::new(false, CoreConfig::default());
    p.recv(1, SourceSel::Any, TagSel::Tag(7), 6000);
    p.send(0, 7, pattern(6000, 9), SendMode::Standard);
    p.step(); // RTS to rank 1, and its GET back
    let t = p.cores[0].next_transmit(1).unwrap();
    let frame = [t.header(), payload_of(&t)].concat();
    assert_eq!(kind(&Frame::decode(&frame).unwrap()), "DATA");
    let c = &mut p.cores[1];
    for cut in 0..DATA_HEADER_LEN {
        match Sink::placement(c, 0, &frame[..cut], frame.len()).unwrap() {
            Placement::NeedMore => {}
            Placement::Staged => panic!(
                "a DATA frame cut {cut} bytes into its header is to be staged, and a stream \
                 transport refuses a frame of {} bytes as longer than it stages",
                frame.len()
            ),
            _ => panic!("a DATA frame placed from {cut} bytes of its header"),
        }
    }
    let (target, token) =
        match Sink::placement(c, 0, &frame[..DATA_HEADER_LEN + 1], frame.len()).unwrap() {
            Placement::InPlace {
                header_len,
                target,
                token,
            } => {
                assert_eq!(header_len, DATA_HEADER_LEN);
                (target, token)
            }
            _ => panic!("a DATA frame with its whole header is not placed in the receive"),
        };
    assert_eq!(target.len(), frame.len() - DATA_HEADER_LEN);
    target.copy_from_slice(&frame[DATA_HEADER_LEN..]);
    Sink::data_landed(c, 0, token, frame.len() - DATA_HEADER_LEN).unwrap();
    // A frame of another kind is staged once its kind is known, and not before.
    let other = frame_bytes(&Frame::Fin { send_request: 3 });
    for (cut, staged) in [(0, false), (1, false), (2, true)] {
        let placed = Sink::placement(&mut p.cores[1], 0, &other[..cut], other.len()).unwrap();
        assert_eq!(
            matches!(placed, Placement::Staged),
            staged,
            "{cut} bytes of a FIN"
        );
    }
}

#[test]
fn a_receive_that_finds_its_eager_message_waiting_is_done_at_once() {
    let mut p = Pair::new(true, CoreConfig::default());
    p.send(0, 4, pattern(40, 4), SendMode::Standard);
    p.send(0, 5, pattern(40, 5), SendMode::Standard);
    p.run();
    let started = p.cores[1]
        .start_recv(0, SourceSel::Rank(0), TagSel::Tag(5), vec![0; 40])
        .unwrap();
    let status = Status {
        source: 0,
        tag: 5,
        len: 40,
    };
    assert_eq!(
        started,
        Started::Done {
            buf: pattern(40, 5),
            result: Ok(status)
        }
    );
    // Too short a buffer: done at once too, truncated, nothing written past it.
    let Started::Done { buf, result } = p.cores[1]
        .start_recv(0, SourceSel::Any, TagSel::Any, vec![0; 8])
        .unwrap()
    else {
        panic!("the waiting message was not taken");
    };
    assert_eq!(buf, pattern(40, 4)[..8]);
    assert!(matches!(
        result.map_err(|e| *e),
        Err(PmlError::Truncated(t)) if t.message_len == 40 && t.buffer_len == 8
    ));
    assert_eq!(p.cores[1].live_requests(), 0, "no request was made");
    assert_eq!(p.cores[1].unexpected_len(), 0);
    // Nothing waiting: posted as a request, which the next message completes.
    let Started::Posted(r) = p.cores[1]
        .start_recv(0, SourceSel::Rank(0), TagSel::Any, vec![0; 40])
        .unwrap()
    else {
        panic!("a receive with nothing waiting must be posted");
    };
    p.send(0, 6, pattern(40, 6), SendMode::Standard);
    p.run();
    assert_eq!(p.recv_result(1, r).0, pattern(40, 6));
}

#[test]
fn a_claim_takes_an_arriving_message_with_no_request_or_queue_entry() {
    let mut p = Pair::new(true, CoreConfig::default());
    assert_eq!(
        p.claim(1, SourceSel::Rank(0), TagSel::Tag(3), 64),
        Started::Claimed
    );
    assert!(!p.cores[1].claim_ended());
    p.send_direct(0, 3, pattern(64, 3), SendMode::Standard, true);
    let (buf, status) = p.claim_result(1);
    assert_eq!(buf, pattern(64, 3));
    assert_eq!(
        status.unwrap(),
        Status {
            source: 0,
            tag: 3,
            len: 64
        }
    );
    assert_eq!(p.cores[1].live_requests(), 0);
    assert_eq!(p.cores[1].unexpected_len(), 0);
    assert_eq!(p.cores[1].take_claim(), None, "a claim ends once");
}

#[test]
fn earlier_posted_receives_and_earlier_messages_come_before_the_claim() {
    let mut p = Pair::new(true, CoreConfig::default());
    // A message already waiting is the claim's at once, in arrival order.
    p.send(0, 7, pattern(8, 1), SendMode::Standard);
    p.run();
    let Started::Done { buf, .. } = p.claim(1, SourceSel::Any, TagSel::Any, 8) else {
        panic!("a waiting message must end the claim at once");
    };
    assert_eq!(buf, pattern(8, 1));
    // An earlier posted receive that accepts the message has it first.
    let posted = p.recv(1, SourceSel::Rank(0), TagSel::Any, 8);
    assert_eq!(
        p.claim(1, SourceSel::Any, TagSel::Tag(7), 8),
        Started::Claimed
    );
    p.send(0, 7, pattern(8, 2), SendMode::Standard);
    p.run();
    assert!(!p.cores[1].claim_ended());
    assert_eq!(p.recv_result(1, posted).0, pattern(8, 2));
    // A message the claim does not accept waits as unexpected; the next one it accepts.
    p.send(0, 8, pattern(8, 3), SendMode::Standard);
    p.send(0, 7, pattern(8, 4), SendMode::Standard);
    p.run();
    assert_eq!(p.claim_result(1).0, pattern(8, 4));
    assert_eq!(p.cores[1].unexpected_len(), 1);
    let Started::Done { buf, .. } = p.claim(1, SourceSel::Any, TagSel::Any, 8) else {
        panic!("the waiting message must end the claim at once");
    };
    assert_eq!(buf, pattern(8, 3));
    // Runtime (negative) tags never reach an any-tag claim.
    assert_eq!(p.claim(1, SourceSel::Any, TagSel::Any, 8), Started::Claimed);
    p.send(0, -5, pattern(8, 5), SendMode::Standard);
    p.run();
    assert!(!p.cores[1].claim_ended());
    assert_eq!(p.cores[1].take_claim(), None);
}

#[test]
fn a_claim_takes_early_arrivals_in_sequence_order() {
    let mut core: TestCore = Core::new(1, CoreConfig::default());
    core.set_peer(0, caps(true));
    assert_eq!(
        core.claim_recv(0, SourceSel::Rank(0), TagSel::Any, vec![0; 1])
            .unwrap(),
        Started::Claimed
    );
    core.on_frame(0, &match_frame(1, 1, b"b")).unwrap();
    assert!(
        !core.claim_ended(),
        "took a message sent after an earlier one"
    );
    core.on_frame(0, &match_frame(0, 1, b"a")).unwrap();
    let Some(ClaimEnd::Done { buf, .. }) = core.take_claim() else {
        panic!("the claim did not end");
    };
    assert_eq!(buf, b"a");
    assert_eq!(core.unexpected_len(), 1);
}

#[test]
fn a_rendezvous_offer_turns_the_claim_into_a_request() {
    for remote_read in [true, false] {
        let mut p = Pair::new(remote_read, CoreConfig::default());
        assert_eq!(
            p.claim(1, SourceSel::Rank(0), TagSel::Any, EAGER + 10),
            Started::Claimed
        );
        let s = p.send(0, 1, pattern(EAGER + 10, 9), SendMode::Standard);
        p.run();
        let Some(ClaimEnd::Request(r)) = p.cores[1].take_claim() else {
            panic!("an RTS must turn the claim into a request");
        };
        assert_eq!(p.recv_result(1, r).0, pattern(EAGER + 10, 9));
        assert!(p.send_done(0, s));
    }
}

#[test]
fn a_synchronous_send_to_a_claim_is_acknowledged() {
    let mut p = Pair::new(true, CoreConfig::default());
    assert_eq!(
        p.claim(1, SourceSel::Rank(0), TagSel::Tag(2), 10),
        Started::Claimed
    );
    let s = p.send(0, 2, pattern(10, 2), SendMode::Synchronous);
    p.run();
    assert_eq!(p.kinds(), ["MATCH+SYNC", "ACK"]);
    assert!(p.send_done(0, s));
    assert_eq!(p.claim_result(1).0, pattern(10, 2));
}

#[test]
fn claims_give_the_unexpected_budget_back() {
    let config = CoreConfig {
        unexpected_budget: 4 * (100 + pml::protocol::EAGER_OVERHEAD),
    };
    let mut p = Pair::new(true, config);
    // Far more eager bytes than the budget, each taken by a claim: credit keeps them eager.
    for i in 0..20u8 {
        assert_eq!(
            p.claim(1, SourceSel::Rank(0), TagSel::Any, 100),
            Started::Claimed
        );
        p.send(0, 1, pattern(100, i), SendMode::Standard);
        p.run();
        assert_eq!(p.claim_result(1).0, pattern(100, i));
    }
    assert!(!p.kinds().contains(&"RTS"), "{:?}", p.kinds());
    assert!(p.kinds().contains(&"CREDIT"));
}

#[test]
fn a_withdrawn_claim_takes_nothing() {
    let mut p = Pair::new(true, CoreConfig::default());
    assert_eq!(p.claim(1, SourceSel::Any, TagSel::Any, 8), Started::Claimed);
    assert_eq!(p.cores[1].take_claim(), None);
    p.send(0, 1, pattern(8, 1), SendMode::Standard);
    p.run();
    assert!(!p.cores[1].claim_ended());
    assert_eq!(p.cores[1].unexpected_len(), 1);
}

/// A receive laid out in blocks: 4 bytes of every 8 in storage the test owns.
struct Strided {
    blocks: pml::blocks::Blocks,
    _list: Box<[pml::blocks::Block]>,
}

impl AsMut<[u8]> for Strided {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut []
    }
}

// SAFETY: `blocks` is made by `Blocks::new` over `_list`, which it owns, and over storage each
// test keeps alive and leaves alone until the receive completed.
unsafe impl pml::protocol::RecvBytes for Strided {
    fn blocks(&self) -> Option<&pml::blocks::Blocks> {
        Some(&self.blocks)
    }
}

/// How the test's transport lands a rendezvous read into a receive laid out in blocks.
#[derive(Clone, Copy, Debug)]
enum Landing {
    /// Into the blocks, said with `read_lands_in_blocks`.
    Blocks,
    /// Into the core's staging (`read_target`).
    Staging,
    /// Nowhere: `read_done` is called with neither.
    Nowhere,
}

/// A rendezvous of 512 4-byte elements into a receive whose blocks lie 8 bytes apart, read
/// as `landing` says; the receiver's storage and `read_done`'s result.
fn read_into_strided(landing: Landing) -> (Vec<u8>, Result<(), PmlError>) {
    let data = pattern(2 * EAGER, 7);
    let mut storage = vec![0xEEu8; 2 * data.len()];
    let list: Box<[pml::blocks::Block]> = Box::new([pml::blocks::Block { offset: 0, len: 4 }]);
    let blocks = pml::blocks::Blocks::new(storage.as_mut_ptr(), data.len() / 4, 8, &list).unwrap();
    let mut sender: TestCore = Core::new(2, CoreConfig::default());
    let mut receiver: Core<Vec<u8>, Strided> = Core::new(2, CoreConfig::default());
    sender.set_peer(1, caps(true));
    receiver.set_peer(0, caps(true));
    let recv = receiver
        .post_recv(
            0,
            SourceSel::Rank(0),
            TagSel::Tag(1),
            Strided {
                blocks,
                _list: list,
            },
        )
        .unwrap();
    sender
        .post_send(SendArgs {
            context: 0,
            source: 0,
            peer: 1,
            tag: 1,
            mode: SendMode::Standard,
            buf: data.clone(),
            remote: RemoteKey { addr: 1, key: 0 },
            eager_limit: None,
        })
        .unwrap();
    let t = sender.next_transmit(1).expect("the RTS");
    let mut bytes = t.header().to_vec();
    bytes.extend_from_slice(payload_of(&t));
    sender.transmitted(1);
    assert_eq!(kind(&Frame::decode(&bytes).unwrap()), "RTS");
    receiver.on_frame(0, &bytes).unwrap();
    let Some(Action::Read {
        recv: read, len, ..
    }) = receiver.poll_action()
    else {
        panic!("a rendezvous into a posted receive reads");
    };
    assert_eq!((read, len), (recv, data.len()));
    match landing {
        Landing::Blocks => {
            let blocks = receiver.read_blocks(recv).unwrap().expect("the blocks");
            // SAFETY: the receive's description over `storage`, which nothing else touches
            // until the receive completes; `data` is its packed length.
            unsafe { blocks.unpack_range_from(0, &data) };
            receiver.read_lands_in_blocks(recv).unwrap();
        }
        Landing::Staging => receiver.read_target(recv).unwrap().copy_from_slice(&data),
        Landing::Nowhere => {}
    }
    let done = receiver.read_done(recv);
    if done.is_ok() {
        assert!(matches!(
            receiver.take_completion(recv).unwrap(),
            Some(Completion::Recv { result: Ok(_), .. })
        ));
    }
    (storage, done)
}

#[test]
fn a_read_into_blocks_lands_in_them_or_in_staging_and_never_nowhere() {
    let data = pattern(2 * EAGER, 7);
    for landing in [Landing::Blocks, Landing::Staging] {
        let (storage, done) = read_into_strided(landing);
        assert!(done.is_ok(), "{landing:?}: {done:?}");
        for (i, pair) in storage.chunks(8).enumerate() {
            assert_eq!(
                pair[..4],
                data[4 * i..4 * i + 4],
                "{landing:?}: element {i}"
            );
            assert_eq!(
                pair[4..],
                [0xEE; 4],
                "{landing:?}: the gap after element {i}"
            );
        }
    }
    let (storage, done) = read_into_strided(Landing::Nowhere);
    let err = done.expect_err("a read that landed nowhere completed");
    assert!(
        err.to_string()
            .contains("neither had a staging buffer nor landed in the blocks"),
        "{err}"
    );
    assert!(storage.iter().all(|&b| b == 0xEE));
}

/// The frame `core` transmits next to `peer`, as bytes, taken off its queue.
fn take_frame(core: &mut TestCore, peer: u32) -> Vec<u8> {
    let t = core.next_transmit(peer).expect("a frame");
    let mut bytes = t.header().to_vec();
    bytes.extend_from_slice(payload_of(&t));
    core.transmitted(peer);
    bytes
}

/// A send whose offer carries its layout (`post_send_offering`) goes by RTS whatever its
/// length, the layout after the header; the receiver's read carries it decoded, its runs
/// the sender's at the sender's addresses, whether the receive was posted first or came
/// after (unexpected), and a short receive's read covers only the runs of what it holds.
/// The layout goes with its frame: the sender's next RTS carries none. A layout that does
/// not fit a frame is refused at the sender; one offered where the peer does not read
/// remote memory, or not of whole elements, is a named protocol error at the receiver.
#[test]
fn a_layout_offer_reaches_its_read() {
    use pml::blocks::{Block, Blocks};
    use pml::protocol::layout;
    let list = [
        Block {
            offset: 16,
            len: 1000,
        },
        Block {
            offset: 2000,
            len: 24,
        },
    ];
    let base = 0x4000_0000u64;
    let offer = |len: usize, tag: i32| SendArgs {
        context: 0,
        source: 0,
        peer: 1,
        tag,
        mode: SendMode::Standard,
        buf: vec![0u8; len],
        remote: RemoteKey {
            addr: base,
            key: 77,
        },
        eager_limit: None,
    };
    for unexpected in [false, true] {
        let mut pair = Pair::new(true, CoreConfig::default());
        let capacity = 3 * 1024 - 100;
        let posted =
            (!unexpected).then(|| pair.recv(1, SourceSel::Rank(0), TagSel::Tag(5), capacity));
        let send = pair.cores[0]
            .post_send_offering(offer(3 * 1024, 5), layout::encode(4096, &list))
            .unwrap();
        let bytes = take_frame(&mut pair.cores[0], 1);
        match Frame::decode(&bytes).unwrap() {
            Frame::Rts {
                layout: Some(l), ..
            } => assert_eq!(l, &*layout::encode(4096, &list)),
            other => panic!("{other:?}"),
        }
        pair.cores[1].on_frame(0, &bytes).unwrap();
        let recv =
            posted.unwrap_or_else(|| pair.recv(1, SourceSel::Rank(0), TagSel::Tag(5), capacity));
        let Some(Action::Read {
            recv: read,
            len,
            remote,
            layout: Some(got),
            ..
        }) = pair.cores[1].poll_action()
        else {
            panic!("unexpected {unexpected}: no read with the layout");
        };
        assert_eq!((read, len, remote.key), (recv, capacity, 77));
        let sent = Blocks::new(base as usize as *const u8, 3, 4096, &list).unwrap();
        let want: Vec<_> = sent.runs(&list, 0, capacity).collect();
        assert_eq!(got.runs(len).collect::<Vec<_>>(), want);
        pair.cores[1].read_target(recv).unwrap().fill(1);
        pair.cores[1].read_done(recv).unwrap();
        pair.run();
        assert!(
            pair.cores[0].is_complete(send).unwrap(),
            "the FIN came back"
        );
        // The next rendezvous from the same core is a plain RTS.
        pair.send(0, 6, pattern(2 * EAGER, 1), SendMode::Standard);
        let bytes = take_frame(&mut pair.cores[0], 1);
        assert!(
            matches!(Frame::decode(&bytes), Ok(Frame::Rts { layout: None, .. })),
            "unexpected {unexpected}: a plain send's RTS"
        );
    }
    // Too long for the peer's 4096-byte frames with the RTS header: refused, nothing queued.
    let mut pair = Pair::new(true, CoreConfig::default());
    let long: Vec<Block> = (0..300)
        .map(|i| Block {
            offset: i * 20,
            len: 10,
        })
        .collect();
    let e = pair.cores[0]
        .post_send_offering(offer(3000, 7), layout::encode(6000, &long))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("layout of 4808 bytes offered past the 4096-byte frames"),
        "{e}"
    );
    assert!(pair.cores[0].next_transmit(1).is_none());
    // Over a transport that does not read, and not whole elements: named at the receiver.
    for (remote_read, len, named) in [
        (false, 3 * 1024, "a transport that does not read"),
        (
            true,
            3000,
            "does not make the 3000-byte message of whole elements",
        ),
    ] {
        let mut pair = Pair::new(remote_read, CoreConfig::default());
        pair.cores[0]
            .post_send_offering(offer(len, 8), layout::encode(4096, &list))
            .unwrap();
        let bytes = take_frame(&mut pair.cores[0], 1);
        let e = pair.cores[1].on_frame(0, &bytes).unwrap_err().to_string();
        assert!(e.contains(named) && e.contains("rank 0"), "{e}");
    }
}
