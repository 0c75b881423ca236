//! The transport between real sockets on loopback, several ranks in one process: crossing
//! dials, framing, DATA read in place, and what broken or foreign peers get.

use std::io::{Read, Write};
use std::net::TcpStream;
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

impl Sink for Recorder {
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

const JOB: &str = "tcp-unit";

fn config() -> TcpConfig {
    TcpConfig {
        interfaces: parse_selectors("127.0.0.1").unwrap(),
        max_staged_payload: 4096,
        connect_timeout: Duration::from_secs(2),
    }
}

/// `n` ranks of one job, each knowing every other's endpoint.
fn ranks(n: u32) -> Vec<TcpTransport> {
    let mut ts: Vec<TcpTransport> = (0..n)
        .map(|r| TcpTransport::new(r, n, JOB, config()).unwrap())
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

/// Dials rank 0 of `ts` by hand and says hello as `rank`.
fn fake_peer(ts: &[TcpTransport], rank: u32, token: u32) -> TcpStream {
    let port = ts[0].listener.local_addr().unwrap().port();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut hello = [0u8; HELLO_LEN];
    hello[..8].copy_from_slice(HELLO_MAGIC);
    hello[8..12].copy_from_slice(&token.to_le_bytes());
    hello[12..].copy_from_slice(&rank.to_le_bytes());
    s.write_all(&hello).unwrap();
    s
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
    let mut s = fake_peer(&ts, 1, job_token(JOB));
    let mut answer = [0u8; 1];
    let mut sink = Recorder::default();
    s.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.read(&mut answer).is_err() {
        ts[0].poll(&mut sink).unwrap();
        assert!(Instant::now() < deadline, "the hello was never answered");
    }
    assert_eq!(answer, [TAKEN]);
    drop(s);
    let e = poll_for_error(&mut ts[0]);
    assert!(
        e.to_string()
            .contains("rank 1 closed its connection without finalizing"),
        "{e}"
    );
}

#[test]
fn an_oversized_frame_is_a_named_error() {
    let mut ts = ranks(2);
    let mut s = fake_peer(&ts, 1, job_token(JOB));
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
    let other_job = fake_peer(&ts, 1, job_token("another job"));
    let out_of_range = fake_peer(&ts, 9, job_token(JOB));
    let itself = fake_peer(&ts, 0, job_token(JOB));
    // Each is closed unanswered: its read sees end of stream, never the answer byte.
    let mut strangers = [other_job, out_of_range, itself];
    let mut open = [true; 3];
    let deadline = Instant::now() + Duration::from_secs(10);
    while open.iter().any(|&o| o) {
        poll_all(&mut ts, &mut sinks);
        for (s, o) in strangers.iter_mut().zip(open.iter_mut()) {
            s.set_nonblocking(true).unwrap();
            let mut answer = [0u8; 1];
            match s.read(&mut answer) {
                Ok(0) => *o = false,
                Ok(_) => panic!("a stranger's hello was answered"),
                Err(_) => {}
            }
        }
        assert!(
            Instant::now() < deadline,
            "strangers were never turned away"
        );
    }
    send_whole(&mut ts, &mut sinks, 1, 0, &opaque(1, 100));
    poll_until(&mut ts, &mut sinks, |s| s[0].frames.len() == 1);
    assert_eq!(ts[0].connections(), 1);
    close(ts);
}

#[test]
fn an_unreachable_peer_is_a_named_error() {
    let mut t = TcpTransport::new(0, 2, JOB, config()).unwrap();
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    t.add_peer(1, &format!("{port} 127.0.0.1/8"), true).unwrap();
    let e = t.send(1, &opaque(1, 8), &[]).unwrap_err().to_string();
    assert!(
        e.contains("cannot connect to rank 1") && e.contains(&format!("127.0.0.1:{port}")),
        "{e}"
    );
}

#[test]
fn addresses_that_cannot_serve_are_refused_at_wire_up() {
    let none = TcpConfig {
        interfaces: parse_selectors("no-such-interface0").unwrap(),
        ..config()
    };
    let e = TcpTransport::new(0, 2, JOB, none).err().unwrap();
    assert!(e.contains("no network address matches MPIRT_TCP_IF"), "{e}");
    // A peer on another host that offers only loopback cannot be reached from here.
    let mut t = TcpTransport::new(0, 2, JOB, config()).unwrap();
    let e = t.add_peer(1, "4242 127.0.0.1/8", false).unwrap_err();
    assert!(
        e.contains("rank 1 offers no address this rank can reach"),
        "{e}"
    );
    let e = t.add_peer(1, "not an endpoint", true).unwrap_err();
    assert!(e.contains("is not a TCP endpoint"), "{e}");
}
