//! The frames of the active-message protocol, as bytes: a request an origin sends to a
//! target (tag [`REQUEST`] on the window's own context) and a reply a target sends back (tag
//! [`REPLY`]). Encoding only: no I/O.
//!
//! Every frame starts with a 32-byte header; a request's payload follows it (the data of a
//! put or accumulate, the compare and swap operands), and a reply's (the data of a get, the
//! old values of a fetching accumulate, a fault's text).

/// The tag of requests, which the target side consumes.
pub(super) const REQUEST: i32 = 1;
/// The tag of replies and post notices, which the origin side consumes.
pub(super) const REPLY: i32 = 2;

pub(super) const HEADER: usize = 32;

/// What a request asks of its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Ask {
    Put = 1,
    Get = 2,
    /// Accumulate without a reply.
    Accumulate = 3,
    /// Accumulate and reply with the values before it (also fetch_and_op).
    GetAccumulate = 4,
    /// Payload: the compare operand, then the new value.
    CompareAndSwap = 5,
    LockShared = 6,
    LockExclusive = 7,
    Unlock = 8,
    /// Reply once everything the origin asked before is applied.
    Flush = 9,
    /// The origin's last request of a fence epoch.
    FenceDone = 10,
    /// The origin's last request of an access epoch started by `start`.
    Complete = 11,
    /// Which attached block of a dynamic window holds the `len` bytes at address `offset`,
    /// and its key for one-sided operations (answered with `encode_region`).
    Region = 12,
}

impl Ask {
    /// Whether a request of this kind asks nothing back unless it has an id: a put or an
    /// accumulate, answered `Done` once applied where it has one.
    pub fn answers_only_when_asked(self) -> bool {
        matches!(self, Ask::Put | Ask::Accumulate)
    }

    /// The request's operation as its origin called it, for a target's refusal: a fault of
    /// a put or an accumulate may reach the origin calls later (its epoch's end, or the
    /// window's free), where only this names it.
    pub fn named(self) -> &'static str {
        match self {
            Ask::Put => "a put",
            Ask::Get => "a get",
            Ask::Accumulate => "an accumulate",
            Ask::GetAccumulate => "a get_accumulate or fetch_and_op",
            Ask::CompareAndSwap => "a compare_and_swap",
            Ask::LockShared | Ask::LockExclusive => "a lock",
            Ask::Unlock => "an unlock",
            Ask::Flush => "a flush",
            Ask::FenceDone => "a fence",
            Ask::Complete => "a complete",
            Ask::Region => "a look-up of attached memory",
        }
    }

    fn from_byte(byte: u8) -> Option<Ask> {
        use Ask::*;
        [
            Put,
            Get,
            Accumulate,
            GetAccumulate,
            CompareAndSwap,
            LockShared,
            LockExclusive,
            Unlock,
            Flush,
            FenceDone,
            Complete,
            Region,
        ]
        .into_iter()
        .find(|a| *a as u8 == byte)
    }
}

/// What a reply carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Answer {
    /// The bytes a get or fetching operation asked for.
    Data = 1,
    /// A lock was granted.
    Granted = 2,
    /// An unlock or flush is done: everything asked before it is applied.
    Done = 3,
    /// The target opened an exposure epoch for this origin (`post`).
    Posted = 4,
    /// The target refused a request; the payload says why.
    Fault = 5,
}

impl Answer {
    fn from_byte(byte: u8) -> Option<Answer> {
        use Answer::*;
        [Data, Granted, Done, Posted, Fault]
            .into_iter()
            .find(|a| *a as u8 == byte)
    }
}

/// A request's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub ask: Ask,
    /// The accumulate operation's code (see `AccumulateOperation::code`).
    pub op: u8,
    /// The element type's code (see `element`), for accumulates.
    pub element: u8,
    /// What the reply is for, at the origin (0: no reply wanted).
    pub id: u64,
    /// Byte offset in the target's window (an address, in a dynamic window).
    pub offset: u64,
    /// Bytes of the target's window the request touches.
    pub len: u64,
    /// How many blocks a typed request (a target datatype's) lists at the start of its
    /// payload, each its offset from `offset` and its length as two little-endian words, in
    /// the order its data follows (0: one block of `len` bytes at `offset`).
    pub blocks: u32,
}

impl Request {
    pub fn encode(&self, payload: &[&[u8]]) -> Vec<u8> {
        let total = HEADER + payload.iter().map(|p| p.len()).sum::<usize>();
        let mut frame = Vec::with_capacity(total);
        frame.extend_from_slice(&[self.ask as u8, self.op, self.element, 0]);
        frame.extend_from_slice(&self.blocks.to_le_bytes());
        for word in [self.id, self.offset, self.len] {
            frame.extend_from_slice(&word.to_le_bytes());
        }
        for part in payload {
            frame.extend_from_slice(part);
        }
        frame
    }

    /// Gives an encoded request the id `id`, so that its target answers it: a put or an
    /// accumulate held back (see `Core::flush_request`) asks for the flush that follows it.
    pub fn set_id(frame: &mut [u8], id: u64) {
        frame[8..16].copy_from_slice(&id.to_le_bytes());
    }

    /// The header and the payload, or `None` for a frame no origin of this protocol sends.
    pub fn decode(frame: &[u8]) -> Option<(Request, &[u8])> {
        let (header, payload) = frame.split_at_checked(HEADER)?;
        Some((
            Request {
                ask: Ask::from_byte(header[0])?,
                op: header[1],
                element: header[2],
                id: word(header, 8),
                offset: word(header, 16),
                len: word(header, 24),
                blocks: u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")),
            },
            payload,
        ))
    }
}

/// A typed request's blocks: each one's bytes from the request's offset, and its length.
pub(super) type Blocks = Vec<(u64, u64)>;

/// A typed request's block list, as its payload starts with it.
pub(super) fn encode_blocks(blocks: &[(u64, u64)]) -> Vec<u8> {
    blocks
        .iter()
        .flat_map(|&(offset, len)| [offset.to_le_bytes(), len.to_le_bytes()])
        .flatten()
        .collect()
}

/// The block list at the start of a typed request's payload, and the data after it, or
/// `None` where the payload is shorter than `blocks` blocks.
pub(super) fn decode_blocks(payload: &[u8], blocks: u32) -> Option<(Blocks, &[u8])> {
    let (list, data) = payload.split_at_checked((blocks as usize).checked_mul(16)?)?;
    let blocks = list
        .chunks_exact(16)
        .map(|pair| (word(pair, 0), word(pair, 8)))
        .collect();
    Some((blocks, data))
}

/// A reply's frame: the answer, the id of the request it answers, and its payload.
pub(super) fn encode_reply(answer: Answer, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER + payload.len());
    frame.extend_from_slice(&[answer as u8, 0, 0, 0, 0, 0, 0, 0]);
    frame.extend_from_slice(&id.to_le_bytes());
    frame.extend_from_slice(&[0; 16]);
    frame.extend_from_slice(payload);
    frame
}

pub(super) fn decode_reply(frame: &[u8]) -> Option<(Answer, u64, &[u8])> {
    let (header, payload) = frame.split_at_checked(HEADER)?;
    Some((Answer::from_byte(header[0])?, word(header, 8), payload))
}

/// An attached block of a dynamic window as the target tells an origin of it: its address,
/// its length in bytes, and its packed key for one-sided operations (empty where it is not
/// exposed to them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Region {
    pub address: u64,
    pub bytes: u64,
    pub key: Vec<u8>,
}

impl Region {
    /// The answer to an `Ask::Region`.
    pub fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::with_capacity(16 + self.key.len());
        payload.extend_from_slice(&self.address.to_le_bytes());
        payload.extend_from_slice(&self.bytes.to_le_bytes());
        payload.extend_from_slice(&self.key);
        payload
    }

    pub fn decode(payload: &[u8]) -> Option<Region> {
        let (words, key) = payload.split_at_checked(16)?;
        Some(Region {
            address: word(words, 0),
            bytes: word(words, 8),
            key: key.to_vec(),
        })
    }

    /// Whether the block holds the `len` bytes at `address` whole.
    pub fn holds(&self, address: u64, len: u64) -> bool {
        address >= self.address
            && address
                .checked_add(len)
                .is_some_and(|end| end <= self.address.saturating_add(self.bytes))
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let request = Request {
            ask: Ask::CompareAndSwap,
            op: 3,
            element: 7,
            id: 0x0102_0304_0506_0708,
            offset: 1 << 40,
            len: 8,
            blocks: 0x0a0b_0c0d,
        };
        let frame = request.encode(&[&[1; 8], &[2; 8]]);
        let (back, payload) = Request::decode(&frame).unwrap();
        assert_eq!(back, request);
        assert_eq!(payload, [[1u8; 8], [2; 8]].concat());
        let reply = encode_reply(Answer::Data, 99, &[5, 6]);
        assert_eq!(
            decode_reply(&reply),
            Some((Answer::Data, 99, &[5u8, 6][..]))
        );
    }

    #[test]
    fn block_lists_round_trip() {
        let blocks = [(0, 8), (24, 16), (1 << 33, 4)];
        let mut payload = encode_blocks(&blocks);
        payload.extend_from_slice(&[7; 3]);
        let (back, data) = decode_blocks(&payload, 3).unwrap();
        assert_eq!(back, blocks);
        assert_eq!(data, [7; 3]);
        assert_eq!(decode_blocks(&payload[..40], 3), None);
    }

    #[test]
    fn regions_round_trip_and_hold_only_what_lies_inside() {
        let region = Region {
            address: 0x7f00_0000_1000,
            bytes: 64,
            key: vec![9; 24],
        };
        assert_eq!(Region::decode(&region.encode()), Some(region.clone()));
        assert_eq!(Region::decode(&[0; 15]), None);
        assert!(region.holds(0x7f00_0000_1000, 64));
        assert!(region.holds(0x7f00_0000_1038, 8));
        assert!(region.holds(0x7f00_0000_1040, 0));
        assert!(!region.holds(0x7f00_0000_1039, 8), "past the end");
        assert!(!region.holds(0x7f00_0000_0ff8, 16), "before the start");
        assert!(!region.holds(u64::MAX - 4, 8), "wrapping past 2^64");
    }

    #[test]
    fn foreign_frames_are_refused() {
        assert_eq!(Request::decode(&[1; 31]), None);
        let mut frame = vec![0u8; HEADER];
        frame[0] = 200;
        assert_eq!(Request::decode(&frame), None);
        assert_eq!(decode_reply(&frame), None);
    }
}
