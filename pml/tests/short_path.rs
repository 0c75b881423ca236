//! The core's short path for plain eager messages against the general one: the stream a
//! frame is sequenced in, and the bytes and lengths an eager copy delivers.

use pml::protocol::{Completion, Core, CoreConfig, PeerCaps, RecvBytes};
use pml::wire::{Frame, WireEnvelope};

mod frames_common;
use frames_common::frame_bytes;
use pml::{PmlError, SourceSel, TagSel};

fn caps() -> PeerCaps {
    PeerCaps {
        eager_limit: 1 << 12,
        max_frame: 1 << 13,
        remote_read: true,
    }
}

fn frame(context: u32, source: u32, tag: i32, seq: u32, sync: Option<u64>, p: &[u8]) -> Vec<u8> {
    let f = Frame::Match {
        envelope: WireEnvelope {
            context,
            source,
            tag,
            seq,
        },
        sync_request: sync,
        payload: p,
    };
    frame_bytes(&f)
}

/// In a sub-communicator the envelope's source (a communicator rank) is not the transport
/// peer (a world rank). The stream is (context, peer) on both paths; plain and synchronous
/// frames alternate, some early. A short path keyed by the envelope's source would hold the
/// synchronous one forever.
#[test]
fn stream_is_the_transport_peer_on_both_paths() {
    let mut core: Core<Vec<u8>, Vec<u8>> = Core::new(3, CoreConfig::default());
    core.set_peer(1, caps());
    core.set_peer(2, caps());
    // Peer 1 is rank 7 of context 5; seqs 0 (plain), 1 (sync), 2 (plain), 3 (plain, early).
    core.on_frame(1, &frame(5, 7, 3, 0, None, b"a")).unwrap();
    core.on_frame(1, &frame(5, 7, 3, 3, None, b"d")).unwrap();
    core.on_frame(1, &frame(5, 7, 3, 1, Some(9), b"b")).unwrap();
    core.on_frame(1, &frame(5, 7, 3, 2, None, b"c")).unwrap();
    // Peer 2 is rank 1 of the same context: its own stream (sync first).
    core.on_frame(2, &frame(5, 1, 3, 0, Some(4), b"x")).unwrap();
    core.on_frame(2, &frame(5, 1, 3, 1, None, b"y")).unwrap();
    for want in [b"a", b"b", b"c", b"d"] {
        let h = core
            .post_recv(5, SourceSel::Rank(7), TagSel::Tag(3), vec![0; 1])
            .unwrap();
        match core.take_completion(h).unwrap() {
            Some(Completion::Recv { buf, result }) => {
                assert_eq!(&buf, want);
                assert_eq!(result.unwrap().source, 7);
            }
            other => panic!("receive of {want:?} not complete: {other:?}"),
        }
    }
    for want in [b"x", b"y"] {
        let h = core
            .post_recv(5, SourceSel::Rank(1), TagSel::Any, vec![0; 1])
            .unwrap();
        match core.take_completion(h).unwrap() {
            Some(Completion::Recv { buf, .. }) => assert_eq!(&buf, want),
            other => panic!("receive of {want:?} not complete: {other:?}"),
        }
    }
    assert_eq!(core.unexpected_len(), 0);
}

/// A receive buffer that is a window of a larger guarded block, so writes past the
/// window (by the inline small copy) are seen.
#[derive(Debug)]
struct Window {
    block: Vec<u8>,
    at: usize,
    len: usize,
}

impl AsMut<[u8]> for Window {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.block[self.at..self.at + self.len]
    }
}

// SAFETY: never described by blocks.
unsafe impl RecvBytes for Window {}

/// Every payload length 0..=40 into every capacity 0..=40 at several misalignments, on the
/// short path into a posted receive and via the unexpected queue: exact bytes, truncation
/// reported with both lengths, nothing written outside the buffer.
#[test]
fn short_path_copies_and_truncates_exactly() {
    let payload: Vec<u8> = (0..40u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(1))
        .collect();
    let mut seq = 0;
    let mut core: Core<Vec<u8>, Window> = Core::new(1, CoreConfig::default());
    core.set_peer(0, caps());
    for posted_first in [true, false] {
        for len in 0..=40usize {
            for cap in 0..=40usize {
                for at in [16usize, 17, 23] {
                    let win = Window {
                        block: vec![0xEE; 100],
                        at,
                        len: cap,
                    };
                    let f = frame(0, 0, 1, seq, None, &payload[..len]);
                    seq += 1;
                    let h = if posted_first {
                        let h = core
                            .post_recv(0, SourceSel::Rank(0), TagSel::Tag(1), win)
                            .unwrap();
                        core.on_frame(0, &f).unwrap();
                        h
                    } else {
                        core.on_frame(0, &f).unwrap();
                        core.post_recv(0, SourceSel::Any, TagSel::Any, win).unwrap()
                    };
                    let Some(Completion::Recv { buf, result }) = core.take_completion(h).unwrap()
                    else {
                        panic!("not complete")
                    };
                    let n = len.min(cap);
                    assert_eq!(&buf.block[at..at + n], &payload[..n], "len {len} cap {cap}");
                    assert!(buf.block[..at].iter().all(|&b| b == 0xEE));
                    assert!(
                        buf.block[at + n..].iter().all(|&b| b == 0xEE),
                        "len {len} cap {cap} at {at}: written past the copy"
                    );
                    match result {
                        Ok(s) => {
                            assert!(len <= cap);
                            assert_eq!(s.len, len);
                        }
                        Err(PmlError::Truncated(t)) => {
                            assert!(len > cap);
                            assert_eq!((t.message_len, t.buffer_len), (len, cap));
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }
        }
    }
}
