//! The transport between real sockets on loopback, several ranks in one process: crossing
//! dials, framing, DATA read in place, and what broken or foreign peers get.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::*;
use crate::transport::Placement;
use crate::wire::{self, Frame, DATA_HEADER_LEN, MAX_HEADER_LEN};

/// Records what arrives; DATA payloads land in `target`.
#[derive(Default)]
struct Recorder {
    frames: Vec<(Rank, Vec<u8>)>,
    target: Vec<u8>,
    lent: Vec<(u64, usize)>,
    landed: Vec<(u64, usize)>,
}

// SAFETY: DATA lands in `target`, which the recorder keeps, untouched, while a test runs.
unsafe impl Sink for Recorder {
    const PLACEMENT_HEAD: usize = DATA_HEADER_LEN;

    fn frame(&mut self, peer: Rank, frame: &[u8]) -> Result<(), PmlError> {
        self.frames.push((peer, frame.to_vec()));
        Ok(())
    }
    /// DATA frames land in `target` at their offset, as the protocol core places them.
    fn placement(
        &mut self,
        _peer: Rank,
        head: &[u8],
        len: usize,
    ) -> Result<Placement<'_>, PmlError> {
        if head.len() < wire::KIND_LEN {
            return Ok(Placement::NeedMore);
        }
        if !wire::is_data_frame(head) {
            return Ok(Placement::Staged);
        }
        if head.len() < DATA_HEADER_LEN {
            return Ok(Placement::NeedMore);
        }
        let (recv_request, offset) = wire::decode_data_header(&head[..DATA_HEADER_LEN]).unwrap();
        let payload = len - DATA_HEADER_LEN;
        self.lent.push((recv_request, payload));
        let at = offset as usize;
        Ok(Placement::InPlace {
            header_len: DATA_HEADER_LEN,
            target: &mut self.target[at..at + payload],
            token: recv_request,
        })
    }
    fn data_landed(&mut self, _peer: Rank, token: u64, len: usize) -> Result<(), PmlError> {
        self.landed.push((token, len));
        Ok(())
    }
    /// TCP starts no reads: one finishing is a bug these tests must see.
    fn read_done(&mut self, token: u64, _result: Result<(), String>) -> Result<(), PmlError> {
        Err(PmlError::transport(0, format!("TCP finished read {token}")))
    }
}

const SECRET: JobSecret = [0x42; 32];
/// How long a test rank lets a dialler take over a turn of the handshake.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(1);
/// How long a test rank redials a peer that keeps closing its dials before a challenge.
const DIAL_DEADLINE: Duration = Duration::from_secs(2);

fn config() -> TcpConfig {
    TcpConfig {
        interfaces: parse_selectors("127.0.0.1").unwrap(),
        max_staged_payload: 4096,
        connect_timeout: Duration::from_secs(2),
        handshake_limit: HANDSHAKE_LIMIT,
        dial_deadline: DIAL_DEADLINE,
        verbose: false,
    }
}

/// `n` ranks of one job, each knowing every other's endpoint.
fn ranks(n: u32) -> Vec<TcpTransport> {
    let mut ts: Vec<TcpTransport> = (0..n)
        .map(|r| TcpTransport::new(r, n, &SECRET, config()).unwrap())
        .collect();
    let endpoints: Vec<String> = ts.iter().map(|t| t.endpoint().unwrap()).collect();
    for (r, t) in ts.iter_mut().enumerate() {
        for (p, e) in endpoints.iter().enumerate() {
            if p != r {
                t.add_peer(p as Rank, e, true).unwrap();
            }
        }
    }
    ts
}

/// A frame that is not DATA (the transport looks at nothing but the kind byte of a frame).
fn opaque(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![1u8, 1, 0, 0];
    f.extend_from_slice(&seq.to_le_bytes());
    f.resize(len.max(8), (seq % 251) as u8);
    f
}

/// Sends `frame` from `from` to `to` whole, polling every rank meanwhile.
fn send_whole(
    ts: &mut [TcpTransport],
    sinks: &mut [Recorder],
    from: usize,
    to: Rank,
    frame: &[u8],
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ts[from].send(to, &frame[..8], &frame[8..]).unwrap() {
            Sent::Whole => return,
            Sent::Part | Sent::Nothing => {}
        }
        poll_all(ts, sinks);
        assert!(
            Instant::now() < deadline,
            "frame from {from} to {to} never went out"
        );
    }
}

/// Closes ranks living in one thread: all say goodbye before any waits for its peers to.
fn close(mut ts: Vec<TcpTransport>) {
    for t in &mut ts {
        t.say_goodbye();
    }
}

fn poll_all(ts: &mut [TcpTransport], sinks: &mut [Recorder]) {
    for (t, s) in ts.iter_mut().zip(sinks.iter_mut()) {
        t.poll(s).unwrap();
    }
}

fn poll_until(ts: &mut [TcpTransport], sinks: &mut [Recorder], done: impl Fn(&[Recorder]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(sinks) {
        poll_all(ts, sinks);
        assert!(Instant::now() < deadline, "nothing arrived");
    }
}

#[test]
fn crossing_dials_leave_one_connection_per_pair() {
    let mut ts = ranks(2);
    let mut sinks = [Recorder::default(), Recorder::default()];
    // Both dial before either looks at its listener: the dials cross.
    assert_eq!(ts[0].send(1, &opaque(10, 8), &[]).unwrap(), Sent::Nothing);
    assert_eq!(ts[1].send(0, &opaque(20, 8), &[]).unwrap(), Sent::Nothing);
    assert!(matches!(ts[0].peers[1].link, Link::Dialled(_)));
    assert!(matches!(ts[1].peers[0].link, Link::Dialled(_)));
    send_whole(&mut ts, &mut sinks, 0, 1, &opaque(10, 8));
    send_whole(&mut ts, &mut sinks, 1, 0, &opaque(20, 8));
    poll_until(&mut ts, &mut sinks, |s| {
        !s[0].frames.is_empty() && !s[1].frames.is_empty()
    });
    assert_eq!(sinks[1].frames, [(0, opaque(10, 8))]);
    assert_eq!(sinks[0].frames, [(1, opaque(20, 8))]);
    assert_eq!(ts[0].connections(), 1);
    assert_eq!(ts[1].connections(), 1);
    // The lower rank's dial won: rank 0 holds no accepted socket, rank 1 took 0's.
    assert!(ts[0].accepted.is_empty() && ts[1].accepted.is_empty());
    close(ts);
}

#[test]
fn frames_of_every_size_arrive_whole_and_in_order() {
    let mut ts = ranks(3);
    let mut sinks: Vec<Recorder> = (0..3).map(|_| Recorder::default()).collect();
    let sizes: Vec<usize> = (0..3000).map(|i| 8 + (i * 37) % (4096 + 56 - 8)).collect();
    for (i, &len) in sizes.iter().enumerate() {
        for from in [1usize, 2] {
            send_whole(&mut ts, &mut sinks, from, 0, &opaque(i as u32, len));
        }
    }
    poll_until(&mut ts, &mut sinks, |s| {
        s[0].frames.len() == 2 * sizes.len()
    });
    for from in [1, 2] {
        let got: Vec<&Vec<u8>> = sinks[0]
            .frames
            .iter()
            .filter(|(p, _)| *p == from)
            .map(|(_, f)| f)
            .collect();
        assert_eq!(got.len(), sizes.len());
        for (i, f) in got.iter().enumerate() {
            assert_eq!(**f, opaque(i as u32, sizes[i]), "frame {i} from {from}");
        }
    }
    close(ts);
}

#[test]
fn data_payloads_land_in_place() {
    let mut ts = ranks(2);
    let mut sinks = [Recorder::default(), Recorder::default()];
    let len = 3 << 20;
    sinks[1].target = vec![0; 2 * len];
    let data: Vec<u8> = (0..2 * len).map(|i| (i % 253) as u8).collect();
    let mut header = [0u8; MAX_HEADER_LEN];
    for (chunk, offset) in [(0, 0usize), (1, len)] {
        let n = Frame::Data {
            recv_request: 7,
            offset: offset as u64,
            payload: &[],
        }
        .encode_header(&mut header);
        let payload = &data[offset..offset + len];
        let deadline = Instant::now() + Duration::from_secs(10);
        while ts[0].send(1, &header[..n], payload).unwrap() != Sent::Whole {
            poll_all(&mut ts, &mut sinks);
            assert!(Instant::now() < deadline, "chunk {chunk} never went out");
        }
    }
    poll_until(&mut ts, &mut sinks, |s| s[1].landed.len() == 2);
    assert!(
        sinks[1].frames.is_empty(),
        "DATA went through the staging buffer"
    );
    assert_eq!(sinks[1].lent, [(7, len), (7, len)]);
    assert!(sinks[1].target == data, "payload bytes differ");
    close(ts);
}

/// Dials rank 0 of `ts` by hand.
fn dial_rank_0(ts: &[TcpTransport]) -> TcpStream {
    let port = ts[0].listener.local_addr().unwrap().port();
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

/// Reads `buf` whole from `s`, polling rank 0 meanwhile; `false` if `s` closed first.
fn read_polling(ts: &mut [TcpTransport], s: &mut TcpStream, buf: &mut [u8]) -> bool {
    let mut sink = Recorder::default();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(e) if not_yet(&e) => {}
            Err(_) => return false,
        }
        ts[0].poll(&mut sink).unwrap();
        assert!(Instant::now() < deadline, "rank 0 never answered");
    }
    assert!(sink.frames.is_empty(), "a frame arrived during a handshake");
    true
}

/// What a hand-made dial to rank 0 sent, and what came of it.
struct HandDial {
    sock: TcpStream,
    hello: [u8; handshake::HELLO_LEN],
    proof: [u8; handshake::PROOF_LEN],
    /// The verdict byte, or `None` if rank 0 closed the connection instead.
    verdict: Option<u8>,
}

/// Dials rank 0 of `ts` as rank `me` knowing `secret`, and sends `proof` (the right one
/// when `None`).
fn hand_dial(
    ts: &mut [TcpTransport],
    me: Rank,
    secret: &JobSecret,
    proof: Option<[u8; handshake::PROOF_LEN]>,
) -> HandDial {
    let mut sock = dial_rank_0(ts);
    let (dialler, hello) = Dialler::new(secret, me, 0, handshake::nonce().unwrap());
    sock.write_all(&hello).unwrap();
    let mut challenge = [0u8; CHALLENGE_LEN];
    assert!(
        read_polling(ts, &mut sock, &mut challenge),
        "rank 0 sent no challenge"
    );
    let proof = proof.unwrap_or_else(|| dialler.answer(&challenge).unwrap());
    sock.write_all(&proof).unwrap();
    let mut verdict = [0u8];
    let verdict = read_polling(ts, &mut sock, &mut verdict).then_some(verdict[0]);
    HandDial {
        sock,
        hello,
        proof,
        verdict,
    }
}

/// Polls rank 0 until `s` sees its connection closed; panics if anything but the end of the
/// stream arrives on it.
fn closed_unanswered(ts: &mut [TcpTransport], s: &mut TcpStream) {
    let mut sink = Recorder::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut byte = [0u8];
        match s.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => panic!("a stranger was answered beyond its challenge"),
            Err(e) if not_yet(&e) => {}
            Err(_) => break,
        }
        ts[0].poll(&mut sink).unwrap();
        assert!(
            Instant::now() < deadline,
            "the stranger was never turned away"
        );
    }
    assert!(sink.frames.is_empty(), "a stranger's frame arrived");
}

fn poll_for_error(t: &mut TcpTransport) -> PmlError {
    let mut sink = Recorder::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Err(e) = t.poll(&mut sink) {
            return e;
        }
        assert!(Instant::now() < deadline, "no error reported");
    }
}

#[test]
fn a_peer_that_vanishes_without_goodbye_is_named() {
    let mut ts = ranks(2);
    let dial = hand_dial(&mut ts, 1, &SECRET, None);
    assert_eq!(dial.verdict, Some(handshake::TAKEN));
    drop(dial);
    let e = poll_for_error(&mut ts[0]);
    assert!(
        e.to_string().contains(
            "the connection with rank 1 failed: it closed its connection without finalizing"
        ),
        "{e}"
    );
}

#[test]
fn an_oversized_frame_is_a_named_error() {
    let mut ts = ranks(2);
    let mut s = hand_dial(&mut ts, 1, &SECRET, None).sock;
    s.set_nonblocking(false).unwrap();
    let mut frame = 1_000_000u32.to_le_bytes().to_vec();
    frame.extend_from_slice(&[1, 1, 0, 0]);
    s.write_all(&frame).unwrap();
    let e = poll_for_error(&mut ts[0]);
    let text = e.to_string();
    assert!(
        text.contains("rank 1") && text.contains("malformed frame: 1000000 bytes"),
        "{text}"
    );
}

#[test]
fn strangers_are_turned_away_and_ranks_still_connect() {
    let mut ts = ranks(2);
    let mut sinks = [Recorder::default(), Recorder::default()];
    // The hello of the earlier protocol, which a job id (as `ps` shows it) was enough for.
    let mut old_hello = dial_rank_0(&ts);
    old_hello
        .write_all(b"mpirt-tc\x01\x02\x03\x04\x01\0\0\0")
        .unwrap();
    closed_unanswered(&mut ts, &mut old_hello);
    // Hellos from no peer, or to another rank, are closed before any challenge.
    for (from, to) in [(9u32, 0u32), (0, 0), (1, 1)] {
        let mut s = dial_rank_0(&ts);
        let (_, hello) = Dialler::new(&SECRET, from, to, [3; 16]);
        s.write_all(&hello).unwrap();
        closed_unanswered(&mut ts, &mut s);
    }
    // Another job's rank (or a guess) fails its proof.
    let other_job = hand_dial(&mut ts, 1, &[0x43; 32], Some([0; handshake::PROOF_LEN]));
    assert_eq!(other_job.verdict, None);
    assert_eq!(ts[0].connections(), 0);
    assert_eq!(ts[0].refused(), 5);
    send_whole(&mut ts, &mut sinks, 1, 0, &opaque(1, 100));
    poll_until(&mut ts, &mut sinks, |s| s[0].frames.len() == 1);
    assert_eq!(ts[0].connections(), 1);
    close(ts);
}

#[test]
fn a_recorded_handshake_replayed_is_refused() {
    // A genuine dial as rank 1, recorded.
    let mut ts = ranks(2);
    let genuine = hand_dial(&mut ts, 1, &SECRET, None);
    assert_eq!(genuine.verdict, Some(handshake::TAKEN));
    // Replayed to a rank 0 of the same job that has no connection from rank 1 yet, which
    // would take a genuine one: its challenge is new, so the recorded proof fails.
    let mut ts = ranks(2);
    let mut s = dial_rank_0(&ts);
    s.write_all(&genuine.hello).unwrap();
    let mut challenge = [0u8; CHALLENGE_LEN];
    assert!(read_polling(&mut ts, &mut s, &mut challenge));
    s.write_all(&genuine.proof).unwrap();
    closed_unanswered(&mut ts, &mut s);
    assert_eq!((ts[0].connections(), ts[0].refused()), (0, 1));
    // The pair still connects.
    let mut sinks = [Recorder::default(), Recorder::default()];
    send_whole(&mut ts, &mut sinks, 1, 0, &opaque(1, 100));
    poll_until(&mut ts, &mut sinks, |s| s[0].frames.len() == 1);
    close(ts);
}

#[test]
fn silent_and_truncated_handshakes_are_dropped_and_hold_no_slot() {
    let mut ts = ranks(2);
    let mut sinks = [Recorder::default(), Recorder::default()];
    // Says nothing; says half a hello; says a whole hello and then nothing.
    let silent = dial_rank_0(&ts);
    let mut half = dial_rank_0(&ts);
    let (_, hello) = Dialler::new(&SECRET, 1, 0, [3; 16]);
    half.write_all(&hello[..10]).unwrap();
    let mut no_proof = dial_rank_0(&ts);
    no_proof.write_all(&hello).unwrap();
    // Meanwhile rank 1 connects and talks: the strangers hold no slot of its.
    send_whole(&mut ts, &mut sinks, 1, 0, &opaque(1, 100));
    poll_until(&mut ts, &mut sinks, |s| s[0].frames.len() == 1);
    assert_eq!(ts[0].connections(), 1);
    let mut challenge = [0u8; CHALLENGE_LEN];
    assert!(read_polling(&mut ts, &mut no_proof, &mut challenge));
    for mut s in [silent, half, no_proof] {
        closed_unanswered(&mut ts, &mut s);
    }
    assert_eq!(ts[0].refused(), 3);
    // A hello cut short by the close of its connection is refused at once.
    let mut cut = dial_rank_0(&ts);
    cut.write_all(&hello[..10]).unwrap();
    cut.shutdown(std::net::Shutdown::Write).unwrap();
    closed_unanswered(&mut ts, &mut cut);
    assert_eq!(ts[0].refused(), 4);
    // A stranger still waiting when the ranks finalize keeps neither waiting.
    let _waiting = dial_rank_0(&ts);
    close(ts);
}

#[test]
fn a_proof_that_came_while_the_rank_was_busy_is_still_taken() {
    let mut ts = ranks(2);
    let mut s = dial_rank_0(&ts);
    let (dialler, hello) = Dialler::new(&SECRET, 1, 0, handshake::nonce().unwrap());
    s.write_all(&hello).unwrap();
    let mut challenge = [0u8; CHALLENGE_LEN];
    assert!(read_polling(&mut ts, &mut s, &mut challenge));
    s.write_all(&dialler.answer(&challenge).unwrap()).unwrap();
    // Rank 0 computes past the deadline before it polls again: the proof waits for it.
    std::thread::sleep(HANDSHAKE_LIMIT * 2);
    let mut verdict = [0u8];
    assert!(read_polling(&mut ts, &mut s, &mut verdict));
    assert_eq!(verdict, [handshake::TAKEN]);
    assert_eq!((ts[0].connections(), ts[0].refused()), (1, 0));
}

#[test]
fn a_flood_of_strangers_is_bounded_and_ranks_still_connect() {
    let mut ts = ranks(2);
    let mut sinks = [Recorder::default(), Recorder::default()];
    let flood = 2 + SPARE_HANDSHAKES + 10;
    let mut strangers: Vec<TcpStream> = (0..flood).map(|_| dial_rank_0(&ts)).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ts[0].refused() < 10 {
        ts[0].poll(&mut sinks[0]).unwrap();
        assert!(Instant::now() < deadline, "the flood was never bounded");
    }
    assert!(ts[0].accepted.len() <= 2 + SPARE_HANDSHAKES);
    // The oldest of those that said no hello went first.
    closed_unanswered(&mut ts, &mut strangers[0]);
    send_whole(&mut ts, &mut sinks, 1, 0, &opaque(1, 100));
    poll_until(&mut ts, &mut sinks, |s| s[0].frames.len() == 1);
    assert_eq!(ts[0].connections(), 1);
    close(ts);
}

/// Strangers can say hellos that name a rank of the job (a hello holds no secret) and be
/// challenged: past the handshakes a rank keeps, one drawn at random is evicted, and a
/// challenged dial so evicted is told it was crowded out, so that a genuine rank dials again
/// instead of taking it as a refusal.
#[test]
fn a_dial_evicted_after_its_challenge_is_told_it_was_crowded() {
    let mut ts = ranks(2);
    let mut genuine = dial_rank_0(&ts);
    let (_, hello) = Dialler::new(&SECRET, 1, 0, handshake::nonce().unwrap());
    genuine.write_all(&hello).unwrap();
    let mut challenge = [0u8; CHALLENGE_LEN];
    assert!(read_polling(&mut ts, &mut genuine, &mut challenge));
    // It has not proved itself yet when strangers' hellos crowd in, until a draw evicts it
    // (each new one past the cap evicts one of 67: after 2000, it stayed with odds of 1e-13).
    genuine.set_nonblocking(true).unwrap();
    let mut strangers = std::collections::VecDeque::new();
    let mut sink = Recorder::default();
    let mut verdict = [0u8];
    for _ in 0..2000 {
        let mut s = dial_rank_0(&ts);
        let (_, hello) = Dialler::new(&[0x43; 32], 1, 0, handshake::nonce().unwrap());
        s.write_all(&hello).unwrap();
        strangers.push_back(s);
        if strangers.len() > 100 {
            strangers.pop_front();
        }
        ts[0].poll(&mut sink).unwrap();
        match genuine.read(&mut verdict) {
            Ok(0) => panic!("the evicted dial was closed without a word"),
            Ok(_) => break,
            Err(e) if not_yet(&e) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(verdict[0], handshake::CROWDED);
    assert!(ts[0].accepted.len() <= 2 + SPARE_HANDSHAKES);
    drop(strangers);
    close(ts);
}

/// A genuine dial among bursts of strangers' connections, more of them than the handshakes a
/// rank keeps, that arrive while the rank is not polling, gets through: the strangers are the
/// ones evicted, or the genuine dial, evicted by chance, dials again. `hellos`: the strangers
/// say whole hellos that name rank 1 (anyone can: a hello holds no secret) and then wait for
/// a proof never to come, rather than keeping silent.
fn dial_into_a_flood(hellos: bool) {
    let mut ts = ranks(2);
    // Each burst evicts the genuine dial with some chance (a random draw, once its hello is in):
    // it gets through after a few dials, which on a slow machine (a debug build on 2 busy
    // cores) can take longer than the other tests' short deadline. The flood's own 20 s bound
    // below is the test's; a real job has 60 s.
    ts[1].config.dial_deadline = Duration::from_secs(20);
    let mut sinks = [Recorder::default(), Recorder::default()];
    let mut strangers = std::collections::VecDeque::new();
    let mut burst = |ts: &[TcpTransport], n: usize| {
        for i in 0..n {
            let mut s = dial_rank_0(ts);
            if i % 10 == 9 {
                // Some say something that is no hello, and are refused at once.
                let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
            } else if hellos {
                let (_, hello) = Dialler::new(&[0x43; 32], 1, 0, handshake::nonce().unwrap());
                let _ = s.write_all(&hello);
            }
            strangers.push_back(s);
        }
        while strangers.len() > 400 {
            strangers.pop_front();
        }
    };
    let frame = opaque(1, 100);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        burst(&ts, 20);
        // Rank 1 dials (or sends, once connected) between the bursts.
        if ts[1].send(0, &frame[..8], &frame[8..]).unwrap() == Sent::Whole {
            break;
        }
        burst(&ts, 2 + SPARE_HANDSHAKES + 20);
        // Enough polls to accept the bursts (a poll accepts a bounded number).
        for _ in 0..(2 + SPARE_HANDSHAKES + 40) / ACCEPTS_PER_POLL + 1 {
            ts[0].poll(&mut sinks[0]).unwrap();
        }
        ts[1].poll(&mut sinks[1]).unwrap();
        assert!(Instant::now() < deadline, "rank 1 never got through");
    }
    poll_until(&mut ts, &mut sinks, |s| s[0].frames.len() == 1);
    assert!(ts[0].refused() > 0, "no stranger was turned away");
    assert!(ts[0].accepted.len() <= 2 + SPARE_HANDSHAKES);
    drop(strangers);
    close(ts);
}

/// A peer whose listen queue is full (strangers' connections made while it computed outside
/// the library) lets new connections time out: that is dialled again after a pause, until the
/// deadline, not an error at once.
#[test]
fn a_dial_that_times_out_is_dialled_again() {
    let mut ts = ranks(2);
    let full = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: `full` owns a listening socket; listen(2) on it again only sets its backlog (0:
    // one queued connection).
    assert_eq!(unsafe { libc::listen(full.as_raw_fd(), 0) }, 0);
    let queued: Vec<_> = (0..3)
        .filter_map(|_| {
            TcpStream::connect_timeout(&full.local_addr().unwrap(), Duration::from_millis(200)).ok()
        })
        .collect();
    assert!(!queued.is_empty());
    ts[1].peers[0].dial = vec![full.local_addr().unwrap()];
    ts[1].config.connect_timeout = Duration::from_millis(200);
    let frame = opaque(1, 100);
    let sent = ts[1].send(0, &frame[..8], &frame[8..]).unwrap();
    assert_eq!(sent, Sent::Nothing);
    assert!(matches!(ts[1].peers[0].link, Link::Idle));
    assert!(
        !ts[1].peers[0].redial.may_dial(),
        "no pause before dialling again"
    );
    // Past the deadline it is an error naming the peer.
    ts[1].config.dial_deadline = Duration::ZERO;
    std::thread::sleep(Duration::from_millis(300));
    let e = ts[1]
        .send(0, &frame[..8], &frame[8..])
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 0") && e.contains("timed out"), "{e}");
    drop(queued);
}

#[test]
fn a_rank_dialling_into_a_flood_of_silent_strangers_still_connects() {
    dial_into_a_flood(false);
}

/// Under a fixed eviction order, strangers' whole hellos evicted the genuine dial every time
/// (it was the oldest waiting for a proof, or the only one whose hello was still on its way).
#[test]
fn a_rank_dialling_into_a_flood_of_strangers_hellos_still_connects() {
    dial_into_a_flood(true);
}

#[test]
fn accept_errors_of_one_connection_are_passed_over_and_running_out_of_descriptors_rests() {
    let mut ts = ranks(2);
    for errno in [
        libc::EINTR,
        libc::ECONNABORTED,
        libc::EPROTO,
        libc::ENETDOWN,
        libc::EHOSTUNREACH,
        libc::ENOPROTOOPT,
        libc::EHOSTDOWN,
        libc::ENONET,
        libc::EOPNOTSUPP,
        libc::ENETUNREACH,
        libc::EPERM,
    ] {
        let e = io::Error::from_raw_os_error(errno);
        assert!(ts[0].accept_failed(&e).unwrap(), "{e}");
    }
    assert!(ts[0].accepts_paused_until.is_none());
    // Out of descriptors: the listener rests, so a pending connection cannot make the
    // rank's waits return at once (and spin) meanwhile.
    for errno in [libc::EMFILE, libc::ENFILE] {
        let mut ts = ranks(2);
        let mut sinks = [Recorder::default(), Recorder::default()];
        let e = io::Error::from_raw_os_error(errno);
        assert!(!ts[0].accept_failed(&e).unwrap(), "{e}");
        let _pending = dial_rank_0(&ts);
        let mut ready = Vec::new();
        ts[0].epoll.wait(Duration::ZERO, &mut ready).unwrap();
        assert!(
            !ready.iter().any(|r| r.token == LISTENER),
            "the listener was watched while resting"
        );
        // After the rest, rank 1 still connects.
        send_whole(&mut ts, &mut sinks, 1, 0, &opaque(1, 100));
        poll_until(&mut ts, &mut sinks, |s| s[0].frames.len() == 1);
        assert!(ts[0].accepts_paused_until.is_none());
        close(ts);
    }
    let e = ts[0]
        .accept_failed(&io::Error::from_raw_os_error(libc::EBADF))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rank 0") && e.contains("accepting a peer's connection failed"),
        "{e}"
    );
    close(ts);
}

/// Connections made while a rank computes outside the library wait in its listener's queue,
/// which takes more of them than a rank keeps in the handshake: strangers' connections made
/// meanwhile do not make a rank's dial time out.
#[test]
fn a_rank_not_polling_queues_more_connections_than_std_would() {
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let want = 600.min(somaxconn);
    if want <= 128 + 1 {
        println!("SKIPPED: net.core.somaxconn is {somaxconn}, no more than std's backlog");
        return;
    }
    let ts = ranks(2);
    let port = ts[0].listener.local_addr().unwrap().port();
    let target = SocketAddr::from(([127, 0, 0, 1], port));
    let queued: Vec<TcpStream> = (0..want)
        .map(|i| {
            TcpStream::connect_timeout(&target, Duration::from_secs(2))
                .unwrap_or_else(|e| panic!("connection {i} of {want}: {e}"))
        })
        .collect();
    assert_eq!(queued.len(), want);
    close(ts);
}

/// A listener that plays rank 1 for rank 0's dials: it reads each hello and answers the
/// `n`th connection (from 0) as `answer` says, until dropped.
struct FakeAcceptor {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    serve: Option<std::thread::JoinHandle<()>>,
}

/// What a fake acceptor does with a connection after reading its hello.
enum Answer {
    /// Writes these bytes, then closes.
    Bytes(Vec<u8>),
    /// The whole handshake, knowing this secret: challenge, check the proof, take it.
    Genuine(JobSecret),
    /// Holds the connection open, saying nothing.
    Silent,
}

impl FakeAcceptor {
    fn new(answer: impl Fn(usize, &[u8; handshake::HELLO_LEN]) -> Answer + Send + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let serve = std::thread::spawn(move || {
            let mut held = Vec::new();
            for (n, s) in listener.incoming().enumerate() {
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let mut s = s.unwrap();
                let mut hello = [0u8; handshake::HELLO_LEN];
                if s.read_exact(&mut hello).is_err() {
                    continue;
                }
                match answer(n, &hello) {
                    Answer::Bytes(b) => {
                        let _ = s.write_all(&b);
                    }
                    Answer::Genuine(secret) => {
                        let (challenged, ch) =
                            handshake::challenge(&secret, 1, 2, &hello, [4; 16]).unwrap();
                        let mut proof = [0u8; handshake::PROOF_LEN];
                        s.write_all(&ch).unwrap();
                        s.read_exact(&mut proof).unwrap();
                        assert_eq!(challenged.check(&secret, &proof), Ok(0));
                        s.write_all(&[handshake::TAKEN]).unwrap();
                        held.push(s);
                    }
                    Answer::Silent => held.push(s),
                }
            }
        });
        FakeAcceptor {
            addr,
            stop,
            serve: Some(serve),
        }
    }

    fn endpoint(&self) -> String {
        format!("{} 127.0.0.1/8", self.addr.port())
    }
}

impl Drop for FakeAcceptor {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Wakes its accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(serve) = self.serve.take() {
            let _ = serve.join();
        }
    }
}

/// Rank 0 of 2 whose rank 1 is at `endpoint`, sending it a frame until that fails.
fn dial_until_error(endpoint: &str) -> String {
    let mut t = TcpTransport::new(0, 2, &SECRET, config()).unwrap();
    t.add_peer(1, endpoint, true).unwrap();
    let mut sink = Recorder::default();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Err(e) = t
            .send(1, &opaque(1, 8), &[])
            .and_then(|_| t.poll(&mut sink))
        {
            return e.to_string();
        }
        assert!(Instant::now() < deadline, "the dial never failed");
    }
}

#[test]
fn a_dialled_process_that_cannot_prove_the_secret_is_a_named_error() {
    let fake = FakeAcceptor::new(|_, hello| {
        let (challenged, challenge) =
            handshake::challenge(&[0x43; 32], 1, 2, hello, [4; 16]).unwrap();
        assert_eq!(challenged.from, 0);
        Answer::Bytes(challenge.to_vec())
    });
    let e = dial_until_error(&fake.endpoint());
    assert!(
        e.contains(&format!(
            "the connection with rank 1 failed: what answers at {}, its address, does not know \
             the secret we share with it",
            fake.addr
        )) && e.contains("wrong proof"),
        "{e}"
    );
}

#[test]
fn a_peer_that_keeps_dropping_our_dial_after_its_challenge_is_a_named_error() {
    let fake = FakeAcceptor::new(|_, hello| {
        let (_, challenge) = handshake::challenge(&SECRET, 1, 2, hello, [4; 16]).unwrap();
        Answer::Bytes(challenge.to_vec())
    });
    let e = dial_until_error(&fake.endpoint());
    assert!(
        e.contains(&format!(
            "the connection with rank 1 failed: it closed our connection at {} after \
             challenging us 3 times",
            fake.addr
        )),
        "{e}"
    );
}

#[test]
fn a_peer_that_keeps_dropping_our_dial_before_its_challenge_is_a_named_error_in_time() {
    let fake = FakeAcceptor::new(|_, _| Answer::Bytes(Vec::new()));
    let started = Instant::now();
    let e = dial_until_error(&fake.endpoint());
    assert!(
        e.contains(&format!(
            "the connection with rank 1 failed: it closed our connections at {} before \
             challenging us",
            fake.addr
        )),
        "{e}"
    );
    // Many drops, none of which alone ended the dialling.
    let times: u32 = e
        .split(" times in ")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(times > redial::MAX_DROPPED_DIALS, "{e}");
    assert!(
        started.elapsed() >= DIAL_DEADLINE,
        "gave up before the deadline: {e}"
    );
}

#[test]
fn a_dial_dropped_before_its_challenge_is_dialled_again() {
    // A peer crowded by strangers evicts our first dials before it challenges them.
    let fake = FakeAcceptor::new(|n, _| {
        if n < 5 {
            Answer::Bytes(Vec::new())
        } else {
            Answer::Genuine(SECRET)
        }
    });
    let mut t = TcpTransport::new(0, 2, &SECRET, config()).unwrap();
    t.add_peer(1, &fake.endpoint(), true).unwrap();
    let mut sink = Recorder::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.connections() == 0 {
        t.send(1, &opaque(1, 8), &[]).unwrap();
        t.poll(&mut sink).unwrap();
        assert!(Instant::now() < deadline, "never connected");
    }
    t.say_goodbye();
    drop(fake);
}

/// Something that is no rank of the job listens at rank 1's first address: rank 0 still
/// reaches rank 1 at its second, whether the first answers with a wrong challenge, closes
/// every dial, or says nothing.
#[test]
fn an_impostor_at_one_address_does_not_hide_the_peer_at_another() {
    let impostors = [
        FakeAcceptor::new(|_, hello| {
            let (_, challenge) = handshake::challenge(&[0x43; 32], 1, 2, hello, [4; 16]).unwrap();
            Answer::Bytes(challenge.to_vec())
        }),
        FakeAcceptor::new(|_, _| Answer::Bytes(Vec::new())),
        FakeAcceptor::new(|_, _| Answer::Silent),
    ];
    for impostor in &impostors {
        let mut ts = ranks(2);
        let mut sinks = [Recorder::default(), Recorder::default()];
        let genuine = ts[0].peers[1].dial[0];
        ts[0].peers[1].dial = vec![impostor.addr, genuine];
        send_whole(&mut ts, &mut sinks, 0, 1, &opaque(1, 100));
        poll_until(&mut ts, &mut sinks, |s| s[1].frames.len() == 1);
        assert_eq!(ts[0].connections(), 1);
        close(ts);
    }
}

#[test]
fn an_unreachable_peer_is_a_named_error() {
    let mut t = TcpTransport::new(0, 2, &SECRET, config()).unwrap();
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    t.add_peer(1, &format!("{port} 127.0.0.1/8"), true).unwrap();
    let e = t.send(1, &opaque(1, 8), &[]).unwrap_err().to_string();
    assert!(
        e.contains("cannot connect to it") && e.contains(&format!("127.0.0.1:{port}")),
        "{e}"
    );
}

#[test]
fn addresses_that_cannot_serve_are_refused_at_wire_up() {
    let none = TcpConfig {
        interfaces: parse_selectors("no-such-interface0").unwrap(),
        ..config()
    };
    let e = TcpTransport::new(0, 2, &SECRET, none).err().unwrap();
    assert!(e.contains("no network address matches MPIRT_TCP_IF"), "{e}");
    // A peer on another host that offers only loopback cannot be reached from here.
    let mut t = TcpTransport::new(0, 2, &SECRET, config()).unwrap();
    let e = t.add_peer(1, "4242 127.0.0.1/8", false).unwrap_err();
    assert!(
        e.contains("it offers no address this rank can reach"),
        "{e}"
    );
    let e = t.add_peer(1, "not an endpoint", true).unwrap_err();
    assert!(e.contains("is not a TCP endpoint"), "{e}");
}
