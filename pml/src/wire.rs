//! Frame headers on the wire: an explicit little-endian layout behind a version byte.
//!
//! Every frame starts `[version, kind, flags, 0]`. Decoding treats the bytes as untrusted: it
//! checks the version, the kind, the flags, the reserved bytes and the exact length of every
//! fixed-size frame, and it hands back payloads as slices of the input, so a length field
//! never sizes an allocation.

use std::fmt;

use crate::envelope::{ContextId, Rank, Tag};

pub const VERSION: u8 = 2;

const KIND_MATCH: u8 = 1;
const KIND_RTS: u8 = 2;
const KIND_FIN: u8 = 3;
const KIND_ACK: u8 = 4;
const KIND_GET: u8 = 5;
const KIND_DATA: u8 = 6;
const KIND_CREDIT: u8 = 7;
const KIND_WAKE: u8 = 8;

/// MATCH flag: the sender is synchronous and waits for an ACK once the message matched.
const FLAG_SYNC: u8 = 1;
/// RTS flag: the offer carries the send's layout after its header (see [`Frame::Rts`]).
const FLAG_LAYOUT: u8 = 1;

/// A MATCH header: the first word and the envelope. A synchronous send's adds its request,
/// which asynchronous sends (almost all) leave out: 20 bytes rather than 32 make a small
/// message's shared-memory record 32 bytes, two to a cache line (8-byte latency 0.20 ->
/// 0.18 us in alternated osu_latency runs).
pub const MATCH_HEADER_LEN: usize = 20;
pub const SYNC_MATCH_HEADER_LEN: usize = MATCH_HEADER_LEN + 8;
pub const RTS_LEN: usize = 56;
const SHORT_CONTROL_LEN: usize = 16;
const GET_LEN: usize = 32;
pub const DATA_HEADER_LEN: usize = 24;
/// Room for the largest header; a transport's frames must be able to hold it.
pub const MAX_HEADER_LEN: usize = RTS_LEN;

/// The matching part of MATCH and RTS frames, with the per-(context, peer) sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireEnvelope {
    pub context: ContextId,
    pub source: Rank,
    pub tag: Tag,
    pub seq: u32,
}

/// Where the receiver of an RTS reads the data from: an address in the sender and a
/// transport-specific key (an rkey on verbs; unused on shared memory and TCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RemoteKey {
    pub addr: u64,
    pub key: u64,
}

/// A decoded frame. Payloads borrow from the decoded bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// An eager message; `sync_request` is the sender's request when it waits for an ACK.
    Match {
        envelope: WireEnvelope,
        sync_request: Option<u64>,
        payload: &'a [u8],
    },
    /// A rendezvous offer: the data stays in the sender until the receiver pulls it.
    /// `layout`, where there is one, is a non-contiguous send's layout as
    /// `protocol::layout` writes it, after the header as a MATCH's payload (flagged, so that
    /// an RTS without one stays a fixed-size frame): the receiver reads the send's blocks in
    /// place, `remote.addr` being its first element's address.
    Rts {
        envelope: WireEnvelope,
        send_request: u64,
        len: u64,
        remote: RemoteKey,
        layout: Option<&'a [u8]>,
    },
    /// The receiver has read the data: the sender's buffer is free.
    Fin { send_request: u64 },
    /// A synchronous eager message matched.
    Ack { send_request: u64 },
    /// For transports that cannot read remote memory: please stream `len` bytes.
    Get {
        send_request: u64,
        recv_request: u64,
        len: u64,
    },
    /// A piece of a streamed rendezvous message.
    Data {
        recv_request: u64,
        offset: u64,
        payload: &'a [u8],
    },
    /// The receiver consumed this many eager bytes: the sender may send that many more eagerly.
    Credit { bytes: u64 },
    /// Nothing to apply: its arrival ends the receiver's sleep in its PML, for a rank that
    /// published outside the PML (a flag of mpirt's collective area) what the receiver waits
    /// for, where no transport between them has a wake of its own (`Engine::wake_peer`).
    Wake,
}

/// Why bytes from the wire are not a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    Short {
        len: usize,
        need: usize,
    },
    Version(u8),
    Kind(u8),
    Flags {
        kind: u8,
        flags: u8,
    },
    Reserved {
        kind: u8,
    },
    Length {
        kind: u8,
        len: usize,
        expected: usize,
    },
    ZeroRequest {
        kind: u8,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Short { len, need } => {
                write!(
                    f,
                    "malformed frame: {len} bytes, a header needs at least {need}"
                )
            }
            WireError::Version(v) => {
                write!(
                    f,
                    "malformed frame: wire version {v}, this build speaks {VERSION}"
                )
            }
            WireError::Kind(k) => write!(f, "malformed frame: unknown frame kind {k}"),
            WireError::Flags { kind, flags } => {
                write!(
                    f,
                    "malformed frame: kind {kind} with unknown flags {flags:#04x}"
                )
            }
            WireError::Reserved { kind } => {
                write!(
                    f,
                    "malformed frame: kind {kind} with non-zero reserved bytes"
                )
            }
            WireError::Length {
                kind,
                len,
                expected,
            } => write!(
                f,
                "malformed frame: kind {kind} is {len} bytes, expected {expected}"
            ),
            WireError::ZeroRequest { kind } => {
                write!(
                    f,
                    "malformed frame: kind {kind} names request 0, which never exists"
                )
            }
        }
    }
}

impl std::error::Error for WireError {}

// Inlined: with the frame's length checked before, each read is one load.
#[inline(always)]
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut le = [0u8; 4];
    le.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(le)
}

#[inline(always)]
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut le = [0u8; 8];
    le.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(le)
}

#[inline(always)]
fn envelope_at(b: &[u8]) -> WireEnvelope {
    WireEnvelope {
        context: u32_at(b, 4),
        source: u32_at(b, 8),
        tag: u32_at(b, 12) as i32,
        seq: u32_at(b, 16),
    }
}

/// Checks a frame's length against its kind's layout: `exactly` for fixed-size frames,
/// otherwise at least the header.
fn check_len(kind: u8, b: &[u8], expected: usize, exactly: bool) -> Result<(), WireError> {
    let fits = if exactly {
        b.len() == expected
    } else {
        b.len() >= expected
    };
    if fits {
        Ok(())
    } else {
        Err(WireError::Length {
            kind,
            len: b.len(),
            expected,
        })
    }
}

fn request(kind: u8, id: u64) -> Result<u64, WireError> {
    if id == 0 {
        Err(WireError::ZeroRequest { kind })
    } else {
        Ok(id)
    }
}

/// The reserved bytes a kind's layout leaves as padding must be zero, so that a future version
/// can give them meaning without an old reader misreading them.
fn zero(kind: u8, b: &[u8], range: std::ops::Range<usize>) -> Result<(), WireError> {
    if b[range].iter().all(|&x| x == 0) {
        Ok(())
    } else {
        Err(WireError::Reserved { kind })
    }
}

/// Bytes at a frame's start that say its kind (the version, then the kind).
pub const KIND_LEN: usize = 2;

/// Whether `b`, the start of a frame, is a DATA frame: a transport that reads rendezvous data
/// in place must know before the whole frame is in.
pub fn is_data_frame(b: &[u8]) -> bool {
    b.len() >= KIND_LEN && b[1] == KIND_DATA
}

/// A DATA frame's header alone (`DATA_HEADER_LEN` bytes): the receive request and offset.
pub fn decode_data_header(b: &[u8]) -> Result<(u64, u64), WireError> {
    match Frame::decode(b)? {
        Frame::Data {
            recv_request,
            offset,
            ..
        } => Ok((recv_request, offset)),
        _ => Err(WireError::Kind(b[1])),
    }
}

/// The envelope and payload of `b` if it is a well-formed MATCH frame of an asynchronous
/// send, the common frame, else `None` (and [`Frame::decode`] says what it is). Every check
/// `decode` makes of such a frame, made at once: its first word and its length.
#[inline(always)]
pub fn plain_match(b: &[u8]) -> Option<(WireEnvelope, &[u8])> {
    let plain = u32::from_le_bytes([VERSION, KIND_MATCH, 0, 0]);
    (b.len() >= MATCH_HEADER_LEN && u32_at(b, 0) == plain)
        .then(|| (envelope_at(b), &b[MATCH_HEADER_LEN..]))
}

impl<'a> Frame<'a> {
    /// Decodes one whole frame (the transport delimits frames).
    pub fn decode(b: &'a [u8]) -> Result<Frame<'a>, WireError> {
        if let Some((envelope, payload)) = plain_match(b) {
            return Ok(Frame::Match {
                envelope,
                sync_request: None,
                payload,
            });
        }
        if b.len() < 4 {
            return Err(WireError::Short {
                len: b.len(),
                need: 4,
            });
        }
        let (version, kind, flags) = (b[0], b[1], b[2]);
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let allowed_flags = match kind {
            KIND_MATCH => FLAG_SYNC,
            KIND_RTS => FLAG_LAYOUT,
            _ => 0,
        };
        if flags & !allowed_flags != 0 {
            return Err(WireError::Flags { kind, flags });
        }
        zero(kind, b, 3..4)?;
        match kind {
            // Only a short one gets here: a long enough one was `plain_match`'s.
            KIND_MATCH if flags & FLAG_SYNC == 0 => Err(WireError::Length {
                kind,
                len: b.len(),
                expected: MATCH_HEADER_LEN,
            }),
            KIND_MATCH => {
                check_len(kind, b, SYNC_MATCH_HEADER_LEN, false)?;
                Ok(Frame::Match {
                    envelope: envelope_at(b),
                    sync_request: Some(request(kind, u64_at(b, MATCH_HEADER_LEN))?),
                    payload: &b[SYNC_MATCH_HEADER_LEN..],
                })
            }
            KIND_RTS => {
                let layout = flags & FLAG_LAYOUT != 0;
                check_len(kind, b, RTS_LEN, !layout)?;
                zero(kind, b, 20..24)?;
                Ok(Frame::Rts {
                    envelope: envelope_at(b),
                    send_request: request(kind, u64_at(b, 24))?,
                    len: u64_at(b, 32),
                    remote: RemoteKey {
                        addr: u64_at(b, 40),
                        key: u64_at(b, 48),
                    },
                    layout: layout.then(|| &b[RTS_LEN..]),
                })
            }
            KIND_FIN | KIND_ACK | KIND_CREDIT => {
                check_len(kind, b, SHORT_CONTROL_LEN, true)?;
                zero(kind, b, 4..8)?;
                let value = u64_at(b, 8);
                Ok(match kind {
                    KIND_FIN => Frame::Fin {
                        send_request: request(kind, value)?,
                    },
                    KIND_ACK => Frame::Ack {
                        send_request: request(kind, value)?,
                    },
                    _ => Frame::Credit { bytes: value },
                })
            }
            KIND_WAKE => {
                check_len(kind, b, SHORT_CONTROL_LEN, true)?;
                zero(kind, b, 4..SHORT_CONTROL_LEN)?;
                Ok(Frame::Wake)
            }
            KIND_GET => {
                check_len(kind, b, GET_LEN, true)?;
                zero(kind, b, 4..8)?;
                Ok(Frame::Get {
                    send_request: request(kind, u64_at(b, 8))?,
                    recv_request: request(kind, u64_at(b, 16))?,
                    len: u64_at(b, 24),
                })
            }
            KIND_DATA => {
                check_len(kind, b, DATA_HEADER_LEN, false)?;
                zero(kind, b, 4..8)?;
                Ok(Frame::Data {
                    recv_request: request(kind, u64_at(b, 8))?,
                    offset: u64_at(b, 16),
                    payload: &b[DATA_HEADER_LEN..],
                })
            }
            other => Err(WireError::Kind(other)),
        }
    }

    /// Writes this frame's header into `out` and returns its length; the payload of MATCH and
    /// DATA frames (and an RTS's layout) is not copied: the transport sends it as a second
    /// part after the header.
    // Inline: every small send encodes a MATCH header, whose few stores then need no call
    // (and mpirt's send, where the PML's inlines, could not inline it without the hint).
    #[inline]
    pub fn encode_header(&self, out: &mut [u8; MAX_HEADER_LEN]) -> usize {
        let mut w = Writer { out, at: 0 };
        match *self {
            Frame::Match {
                envelope,
                sync_request,
                ..
            } => match sync_request {
                None => {
                    w.start(KIND_MATCH, 0);
                    w.envelope(envelope);
                }
                Some(request) => {
                    w.start(KIND_MATCH, FLAG_SYNC);
                    w.envelope(envelope);
                    w.u64(request);
                }
            },
            Frame::Rts {
                envelope,
                send_request,
                len,
                remote,
                layout,
            } => {
                w.start(KIND_RTS, if layout.is_some() { FLAG_LAYOUT } else { 0 });
                w.envelope(envelope);
                w.u32(0);
                w.u64(send_request);
                w.u64(len);
                w.u64(remote.addr);
                w.u64(remote.key);
            }
            Frame::Fin { send_request } => w.control(KIND_FIN, send_request),
            Frame::Ack { send_request } => w.control(KIND_ACK, send_request),
            Frame::Credit { bytes } => w.control(KIND_CREDIT, bytes),
            Frame::Wake => w.control(KIND_WAKE, 0),
            Frame::Get {
                send_request,
                recv_request,
                len,
            } => {
                w.start(KIND_GET, 0);
                w.u32(0);
                w.u64(send_request);
                w.u64(recv_request);
                w.u64(len);
            }
            Frame::Data {
                recv_request,
                offset,
                ..
            } => {
                w.start(KIND_DATA, 0);
                w.u32(0);
                w.u64(recv_request);
                w.u64(offset);
            }
        }
        w.at
    }

    /// The payload that follows the header (empty for header-only frames).
    pub fn payload(&self) -> &'a [u8] {
        match *self {
            Frame::Match { payload, .. } | Frame::Data { payload, .. } => payload,
            Frame::Rts {
                layout: Some(layout),
                ..
            } => layout,
            _ => &[],
        }
    }
}

struct Writer<'o> {
    out: &'o mut [u8; MAX_HEADER_LEN],
    at: usize,
}

// Inlined so that every offset is a constant: a header then costs a few stores, not a
// bounds-checked copy per field (it is written once per message).
impl Writer<'_> {
    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        self.out[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    #[inline(always)]
    fn start(&mut self, kind: u8, flags: u8) {
        self.bytes(&[VERSION, kind, flags, 0]);
    }
    #[inline(always)]
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    #[inline(always)]
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    #[inline(always)]
    fn envelope(&mut self, e: WireEnvelope) {
        self.u32(e.context);
        self.u32(e.source);
        self.u32(e.tag as u32);
        self.u32(e.seq);
    }
    #[inline(always)]
    fn control(&mut self, kind: u8, value: u64) {
        self.start(kind, 0);
        self.u32(0);
        self.u64(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(frame: Frame<'_>) {
        let mut hdr = [0u8; MAX_HEADER_LEN];
        let n = frame.encode_header(&mut hdr);
        let mut bytes = hdr[..n].to_vec();
        bytes.extend_from_slice(frame.payload());
        assert_eq!(Frame::decode(&bytes).unwrap(), frame);
    }

    const ENV: WireEnvelope = WireEnvelope {
        context: 7,
        source: 3,
        tag: -12,
        seq: u32::MAX,
    };

    #[test]
    fn every_kind_roundtrips() {
        roundtrip(Frame::Match {
            envelope: ENV,
            sync_request: None,
            payload: b"hello",
        });
        roundtrip(Frame::Match {
            envelope: ENV,
            sync_request: Some(99),
            payload: b"",
        });
        roundtrip(Frame::Rts {
            envelope: ENV,
            send_request: 5,
            len: 1 << 40,
            remote: RemoteKey {
                addr: 0xdead_beef,
                key: 42,
            },
            layout: None,
        });
        roundtrip(Frame::Rts {
            envelope: ENV,
            send_request: 6,
            len: 4096,
            remote: RemoteKey {
                addr: 0x1000,
                key: 43,
            },
            layout: Some(&[9; 24]),
        });
        roundtrip(Frame::Fin { send_request: 1 });
        roundtrip(Frame::Ack {
            send_request: u64::MAX,
        });
        roundtrip(Frame::Credit { bytes: 0 });
        roundtrip(Frame::Wake);
        roundtrip(Frame::Get {
            send_request: 1,
            recv_request: 2,
            len: 3,
        });
        roundtrip(Frame::Data {
            recv_request: 4,
            offset: 1 << 33,
            payload: &[1, 2, 3],
        });
    }

    #[test]
    fn plain_match_takes_only_what_decode_reads_as_an_asynchronous_match() {
        let mut hdr = [0u8; MAX_HEADER_LEN];
        let plain = Frame::Match {
            envelope: ENV,
            sync_request: None,
            payload: b"xy",
        };
        let n = plain.encode_header(&mut hdr);
        let mut bytes = hdr[..n].to_vec();
        bytes.extend_from_slice(b"xy");
        assert_eq!(plain_match(&bytes), Some((ENV, &b"xy"[..])));
        let sync = Frame::Match {
            envelope: ENV,
            sync_request: Some(3),
            payload: b"",
        };
        let n = sync.encode_header(&mut hdr);
        assert_eq!(plain_match(&hdr[..n]), None, "a synchronous MATCH");
        assert_eq!(Frame::decode(&hdr[..n]), Ok(sync));
        for broken_at in [0, 1, 2, 3] {
            let mut b = bytes.clone();
            b[broken_at] ^= 0x40;
            assert_eq!(plain_match(&b), None, "byte {broken_at} changed");
            assert!(Frame::decode(&b).is_err(), "byte {broken_at} changed");
        }
        assert_eq!(plain_match(&bytes[..MATCH_HEADER_LEN - 1]), None);
    }

    #[test]
    fn layout_is_little_endian_and_fixed() {
        let mut hdr = [0u8; MAX_HEADER_LEN];
        let n = Frame::Fin {
            send_request: 0x0102_0304_0506_0708,
        }
        .encode_header(&mut hdr);
        assert_eq!(
            &hdr[..n],
            &[VERSION, KIND_FIN, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
    }

    #[test]
    fn only_a_flagged_rts_carries_a_layout() {
        let rts = Frame::Rts {
            envelope: ENV,
            send_request: 5,
            len: 100,
            remote: RemoteKey { addr: 1, key: 2 },
            layout: None,
        };
        let mut hdr = [0u8; MAX_HEADER_LEN];
        let n = rts.encode_header(&mut hdr);
        let mut longer = hdr[..n].to_vec();
        longer.extend_from_slice(&[0; 24]);
        assert!(matches!(
            Frame::decode(&longer),
            Err(WireError::Length { expected: 56, .. })
        ));
        longer[2] = FLAG_LAYOUT;
        assert!(matches!(
            Frame::decode(&longer),
            Ok(Frame::Rts { layout: Some(l), .. }) if l == [0; 24]
        ));
        longer[2] = FLAG_LAYOUT << 1;
        assert!(matches!(
            Frame::decode(&longer),
            Err(WireError::Flags { .. })
        ));
    }

    #[test]
    fn bad_bytes_are_named_errors() {
        assert_eq!(
            Frame::decode(&[1, 3]),
            Err(WireError::Short { len: 2, need: 4 })
        );
        assert_eq!(Frame::decode(&[9, 3, 0, 0]), Err(WireError::Version(9)));
        assert_eq!(
            Frame::decode(&[VERSION, 200, 0, 0]),
            Err(WireError::Kind(200))
        );
        assert!(matches!(
            Frame::decode(&[VERSION, KIND_FIN, 0, 0]),
            Err(WireError::Length { expected: 16, .. })
        ));
        assert!(matches!(
            Frame::decode(&[VERSION, KIND_FIN, 1, 0]),
            Err(WireError::Flags { .. })
        ));
        assert!(matches!(
            Frame::decode(&[VERSION, KIND_MATCH, 0, 0, 1, 2]),
            Err(WireError::Length { expected: 20, .. })
        ));
        let mut sync = [0u8; SYNC_MATCH_HEADER_LEN];
        sync[..4].copy_from_slice(&[VERSION, KIND_MATCH, FLAG_SYNC, 0]);
        assert!(matches!(
            Frame::decode(&sync[..SYNC_MATCH_HEADER_LEN - 1]),
            Err(WireError::Length { expected: 28, .. })
        ));
        assert_eq!(
            Frame::decode(&sync),
            Err(WireError::ZeroRequest { kind: KIND_MATCH })
        );
        let mut fin = [0u8; 16];
        fin[0] = VERSION;
        fin[1] = KIND_FIN;
        assert_eq!(
            Frame::decode(&fin),
            Err(WireError::ZeroRequest { kind: KIND_FIN })
        );
        let mut wake = [0u8; SHORT_CONTROL_LEN];
        wake[..2].copy_from_slice(&[VERSION, KIND_WAKE]);
        assert_eq!(Frame::decode(&wake), Ok(Frame::Wake));
        assert!(matches!(
            Frame::decode(&wake[..SHORT_CONTROL_LEN - 1]),
            Err(WireError::Length { expected: 16, .. })
        ));
        for at in 4..SHORT_CONTROL_LEN {
            let mut b = wake;
            b[at] = 1;
            assert_eq!(
                Frame::decode(&b),
                Err(WireError::Reserved { kind: KIND_WAKE }),
                "a WAKE frame with byte {at} set"
            );
        }
        let msg = WireError::Length {
            kind: 2,
            len: 3,
            expected: 56,
        }
        .to_string();
        assert!(msg.contains("3 bytes") && msg.contains("56"), "{msg}");
    }
}
