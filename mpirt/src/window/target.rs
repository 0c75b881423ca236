//! The target side of the active-message protocol: a window's memory, its lock, and what
//! each request does to them. No I/O: `apply` takes a request's frame and hands back the
//! replies to send.

use std::collections::VecDeque;

use super::operation::{element_of, AccumulateOperation};
use super::wire::{decode_blocks, encode_reply, Answer, Ask, Region, Request};

/// The memory a window exposes on this rank.
pub(super) enum Memory {
    /// One block: offsets count from its start.
    Fixed { base: *mut u8, bytes: usize },
    /// Attached blocks (a dynamic window): offsets are addresses.
    Dynamic(Vec<Region>),
}

/// The lock every passive-target epoch on this rank takes: exclusive excludes everyone,
/// shared shares with shared. Requests that must wait queue in arrival order, and a new one
/// queues behind any waiting one, so an exclusive request is not starved by a stream of
/// shared ones.
#[derive(Debug)]
pub(super) struct LockTable {
    /// The origin holding it exclusively.
    exclusive: Option<u32>,
    /// The origins holding it shared (an origin once per lock it holds).
    shared: Vec<u32>,
    /// Waiting requests: origin, exclusive, the id to grant.
    queue: VecDeque<(u32, bool, u64)>,
}

impl LockTable {
    pub fn new() -> LockTable {
        LockTable {
            exclusive: None,
            shared: Vec::new(),
            queue: VecDeque::new(),
        }
    }

    fn admits(&self, exclusive: bool) -> bool {
        self.exclusive.is_none() && (!exclusive || self.shared.is_empty())
    }

    fn take(&mut self, origin: u32, exclusive: bool) {
        if exclusive {
            self.exclusive = Some(origin);
        } else {
            self.shared.push(origin);
        }
    }

    /// A lock request: whether it was granted now (else it waits in the queue).
    pub fn request(&mut self, origin: u32, exclusive: bool, id: u64) -> bool {
        if self.queue.is_empty() && self.admits(exclusive) {
            self.take(origin, exclusive);
            true
        } else {
            self.queue.push_back((origin, exclusive, id));
            false
        }
    }

    /// `origin` unlocks; returns the waiting requests granted now (origin and id).
    pub fn release(&mut self, origin: u32) -> Result<Vec<(u32, u64)>, String> {
        if self.exclusive == Some(origin) {
            self.exclusive = None;
        } else if let Some(at) = self.shared.iter().position(|&o| o == origin) {
            self.shared.swap_remove(at);
        } else {
            return Err(format!("rank {origin} unlocked a lock it does not hold"));
        }
        let mut granted = Vec::new();
        while let Some(&(next, exclusive, id)) = self.queue.front() {
            if !self.admits(exclusive) {
                break;
            }
            self.queue.pop_front();
            self.take(next, exclusive);
            granted.push((next, id));
        }
        Ok(granted)
    }
}

/// A reply for the messaging layer to send.
pub(super) struct Reply {
    pub to: u32,
    pub frame: Vec<u8>,
}

/// This rank as a target: what origins' requests act on, and what they told it.
pub(super) struct Target {
    memory: Memory,
    /// Bytes of the window's element: requests move whole elements, at whole elements from
    /// the start of the memory (of an attached block, in a dynamic window), so that no
    /// element of the window is left holding parts of two (an invalid `char` or `bool`).
    element: usize,
    lock: LockTable,
    /// Origins whose fence epoch ended (their `FenceDone`), since the last fence.
    pub fence_done: u32,
    /// Per origin, the access epochs (`start`) it completed and `wait` has not yet counted.
    pub completed: Vec<u32>,
}

impl Target {
    /// # Safety
    /// A `Fixed` memory's `base` must be valid for reads and writes of `bytes` bytes, and a
    /// `Dynamic` one's blocks (and those `attach` adds) for theirs, as long as the target
    /// lives; nothing else may access them while `apply` runs.
    pub unsafe fn new(memory: Memory, element: usize, ranks: u32) -> Target {
        Target {
            memory,
            element: element.max(1),
            lock: LockTable::new(),
            fence_done: 0,
            completed: vec![0; ranks as usize],
        }
    }

    /// Whether a dynamic window's `bytes` at `address` would overlap memory attached to it
    /// (an error saying so), before `attach` adds them.
    pub fn check_attach(&self, address: usize, bytes: usize) -> Result<(), String> {
        match &self.memory {
            Memory::Dynamic(blocks) => {
                let (address, bytes) = (address as u64, bytes as u64);
                if blocks
                    .iter()
                    .any(|b| address < b.address + b.bytes && b.address < address + bytes)
                {
                    return Err(format!(
                        "the {bytes} byte(s) at {address:#x} overlap memory already attached"
                    ));
                }
                Ok(())
            }
            Memory::Fixed { .. } => Err("only a dynamic window attaches memory".into()),
        }
    }

    /// Adds a block to a dynamic window, with its packed key for one-sided operations (empty
    /// where it is not exposed to them), which origins ask for (`Ask::Region`).
    ///
    /// # Safety
    /// As for `new`: the block stays valid, and untouched while `apply` runs, until
    /// `detach`.
    pub unsafe fn attach(
        &mut self,
        address: usize,
        bytes: usize,
        key: Vec<u8>,
    ) -> Result<(), String> {
        self.check_attach(address, bytes)?;
        if let Memory::Dynamic(blocks) = &mut self.memory {
            blocks.push(Region {
                address: address as u64,
                bytes: bytes as u64,
                key,
            });
        }
        Ok(())
    }

    pub fn detach(&mut self, address: usize) -> Result<(), String> {
        match &mut self.memory {
            Memory::Dynamic(blocks) => {
                let at = blocks
                    .iter()
                    .position(|b| b.address == address as u64)
                    .ok_or_else(|| format!("no memory is attached at {address:#x}"))?;
                blocks.swap_remove(at);
                Ok(())
            }
            Memory::Fixed { .. } => Err("only a dynamic window detaches memory".into()),
        }
    }

    /// The attached block that holds the `len` bytes at address `offset` whole, or why none
    /// does.
    fn region(&self, offset: u64, len: u64) -> Result<&Region, String> {
        match &self.memory {
            Memory::Dynamic(blocks) => {
                blocks.iter().find(|b| b.holds(offset, len)).ok_or_else(|| {
                    format!("no attached memory holds the {len} byte(s) at address {offset:#x}")
                })
            }
            Memory::Fixed { .. } => Err("only a dynamic window's memory is attached".into()),
        }
    }

    /// The window's bytes a request names, or why there are none.
    fn bytes(&mut self, offset: u64, len: u64) -> Result<&mut [u8], String> {
        let (offset, len) = (offset as usize, len as usize);
        let element = self.element;
        let (start, from) = match &self.memory {
            Memory::Fixed { base, bytes } => {
                if offset.checked_add(len).is_none_or(|end| end > *bytes) {
                    return Err(format!(
                        "{len} byte(s) at offset {offset} reach past the window's {bytes} bytes"
                    ));
                }
                (base.wrapping_add(offset), offset)
            }
            Memory::Dynamic(_) => {
                let block = self.region(offset as u64, len as u64)?.address as usize;
                (offset as *mut u8, offset - block)
            }
        };
        whole_elements(from, len, element)?;
        if len == 0 {
            return Ok(&mut []);
        }
        // SAFETY: the bytes lie inside the window's memory (checked above), which `new`'s and
        // `attach`'s contracts keep valid and untouched by anything else during this call;
        // the slice lives only while `self` is borrowed.
        Ok(unsafe { std::slice::from_raw_parts_mut(start, len) })
    }

    /// Applies one request from `origin`, pushing the replies it causes (an unlock may
    /// grant the lock to waiting origins too).
    pub fn apply(&mut self, origin: u32, frame: &[u8], replies: &mut Vec<Reply>) {
        let Some((request, payload)) = Request::decode(frame) else {
            replies.push(fault(origin, 0, "a malformed one-sided request".into()));
            return;
        };
        match self.act(origin, &request, payload, replies) {
            Err(why) => replies.push(fault(
                origin,
                request.id,
                format!("{}: {why}", request.ask.named()),
            )),
            // A put or accumulate with an id carries its origin's flush: answered once
            // applied, as a flush is (everything the origin asked before it came first).
            Ok(()) if request.id != 0 && request.ask.answers_only_when_asked() => {
                replies.push(Reply {
                    to: origin,
                    frame: encode_reply(Answer::Done, request.id, &[]),
                });
            }
            Ok(()) => {}
        }
    }

    fn act(
        &mut self,
        origin: u32,
        request: &Request,
        payload: &[u8],
        replies: &mut Vec<Reply>,
    ) -> Result<(), String> {
        if request.blocks != 0 {
            return self.act_on_blocks(origin, request, payload, replies);
        }
        let reply = |answer, payload: &[u8]| Reply {
            to: origin,
            frame: encode_reply(answer, request.id, payload),
        };
        match request.ask {
            Ask::Put => {
                let bytes = self.bytes(request.offset, request.len)?;
                if payload.len() != bytes.len() {
                    return Err("a put's data is not as long as it says".into());
                }
                bytes.copy_from_slice(payload);
            }
            Ask::Get => {
                let bytes = self.bytes(request.offset, request.len)?;
                replies.push(reply(Answer::Data, bytes));
            }
            Ask::Accumulate | Ask::GetAccumulate => {
                let op = AccumulateOperation::from_code(request.op)
                    .ok_or("an unknown accumulate operation")?;
                let datatype =
                    element_of(request.element).ok_or("an unknown accumulate element type")?;
                let bytes = self.bytes(request.offset, request.len)?;
                if payload.len() != bytes.len() || bytes.len() % datatype.size() != 0 {
                    return Err("an accumulate's data is not whole elements of its window".into());
                }
                if request.ask == Ask::GetAccumulate {
                    let old = reply(Answer::Data, bytes);
                    op.apply(datatype, payload, bytes);
                    replies.push(old);
                } else {
                    op.apply(datatype, payload, bytes);
                }
            }
            Ask::CompareAndSwap => {
                let bytes = self.bytes(request.offset, request.len)?;
                if payload.len() != 2 * bytes.len() {
                    return Err("a compare-and-swap's operands are not one element each".into());
                }
                let (compare, swap) = payload.split_at(bytes.len());
                let old = reply(Answer::Data, bytes);
                if bytes == compare {
                    bytes.copy_from_slice(swap);
                }
                replies.push(old);
            }
            Ask::LockShared | Ask::LockExclusive => {
                if self
                    .lock
                    .request(origin, request.ask == Ask::LockExclusive, request.id)
                {
                    replies.push(reply(Answer::Granted, &[]));
                }
            }
            Ask::Unlock => {
                for (next, id) in self.lock.release(origin)? {
                    replies.push(Reply {
                        to: next,
                        frame: encode_reply(Answer::Granted, id, &[]),
                    });
                }
                // An unlock of an unwinding epoch awaits no answer.
                if request.id != 0 {
                    replies.push(reply(Answer::Done, &[]));
                }
            }
            Ask::Flush => replies.push(reply(Answer::Done, &[])),
            Ask::Region => {
                let region = self.region(request.offset, request.len)?;
                replies.push(reply(Answer::Data, &region.encode()));
            }
            // Answered, where the origin asks (an id), once the origin's operations before
            // it are applied (they came first), so that its epoch end reports their
            // refusals.
            Ask::FenceDone | Ask::Complete => {
                if request.ask == Ask::FenceDone {
                    self.fence_done += 1;
                } else {
                    self.completed[origin as usize] += 1;
                }
                if request.id != 0 {
                    replies.push(reply(Answer::Done, &[]));
                }
            }
        }
        Ok(())
    }

    /// A typed put, get or accumulate: its blocks, each from the request's offset, applied
    /// in the order listed, the data of a put or accumulate packed in that order, and a
    /// get's (an accumulate's old values) replied packed alike. Every block is checked
    /// before any moves.
    fn act_on_blocks(
        &mut self,
        origin: u32,
        request: &Request,
        payload: &[u8],
        replies: &mut Vec<Reply>,
    ) -> Result<(), String> {
        let (blocks, data) = decode_blocks(payload, request.blocks)
            .ok_or("a typed request's block list is cut short")?;
        let accumulate = match request.ask {
            Ask::Put | Ask::Get => None,
            Ask::Accumulate | Ask::GetAccumulate => Some((
                AccumulateOperation::from_code(request.op)
                    .ok_or("an unknown accumulate operation")?,
                element_of(request.element).ok_or("an unknown accumulate element type")?,
            )),
            _ => return Err("only puts, gets and accumulates carry blocks".into()),
        };
        let mut total = 0u64;
        for &(from, len) in &blocks {
            let offset = request
                .offset
                .checked_add(from)
                .ok_or("a block past 2^64")?;
            self.bytes(offset, len)?;
            if accumulate
                .is_some_and(|(_, datatype)| !(len as usize).is_multiple_of(datatype.size()))
            {
                return Err("an accumulate's block is not whole elements".into());
            }
            total = total.checked_add(len).ok_or("blocks past 2^64 bytes")?;
        }
        let carries_data = request.ask != Ask::Get;
        if total != request.len || (carries_data && data.len() as u64 != total) {
            return Err("a typed request's blocks and data are not as long as it says".into());
        }
        let replying = matches!(request.ask, Ask::Get | Ask::GetAccumulate);
        let mut out = Vec::with_capacity(if replying { total as usize } else { 0 });
        let mut at = 0;
        for (from, len) in blocks {
            let bytes = self.bytes(request.offset + from, len)?;
            let incoming = &data[at.min(data.len())..];
            if replying {
                out.extend_from_slice(bytes);
            }
            match accumulate {
                None if carries_data => bytes.copy_from_slice(&incoming[..bytes.len()]),
                None => {}
                Some((op, datatype)) => op.apply(datatype, &incoming[..bytes.len()], bytes),
            }
            at += len as usize;
        }
        if replying {
            replies.push(Reply {
                to: origin,
                frame: encode_reply(Answer::Data, request.id, &out),
            });
        }
        Ok(())
    }
}

/// Whether `len` bytes at `from` bytes into a window's memory (an attached block's, in a
/// dynamic window) are whole elements of `element` bytes, or why not: a request that is not
/// would leave elements holding parts of two (an invalid `char` or `bool`).
pub(super) fn whole_elements(from: usize, len: usize, element: usize) -> Result<(), String> {
    if !from.is_multiple_of(element) || !len.is_multiple_of(element) {
        return Err(format!(
            "{len} byte(s) at {from} byte(s) into the memory are not whole elements of the \
             window's {element}-byte type"
        ));
    }
    Ok(())
}

fn fault(to: u32, id: u64, why: String) -> Reply {
    Reply {
        to,
        frame: encode_reply(Answer::Fault, id, why.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::decode_reply;
    use super::*;

    #[test]
    fn exclusive_excludes_and_shared_shares() {
        let mut lock = LockTable::new();
        assert!(lock.request(0, false, 1));
        assert!(lock.request(1, false, 2));
        assert!(!lock.request(2, true, 3), "exclusive granted beside shared");
        assert!(
            !lock.request(3, false, 4),
            "shared overtook a waiting exclusive"
        );
        assert_eq!(lock.release(0), Ok(vec![]));
        assert_eq!(lock.release(1), Ok(vec![(2, 3)]));
        assert_eq!(lock.release(2), Ok(vec![(3, 4)]));
        assert!(lock.release(2).is_err(), "a lock released twice");
    }

    fn request(ask: Ask, offset: u64, len: u64, id: u64) -> Request {
        Request {
            ask,
            op: 0,
            element: 0,
            id,
            offset,
            len,
            blocks: 0,
        }
    }

    /// A target over `memory`, of `element`-byte elements, in a window of 2 ranks.
    ///
    /// # Safety
    /// As for `Target::new`: `memory` outlives the target and is touched only through it.
    unsafe fn fixed_target(memory: &mut [u8], element: usize) -> Target {
        let fixed = Memory::Fixed {
            base: memory.as_mut_ptr(),
            bytes: memory.len(),
        };
        // SAFETY: this function's contract.
        unsafe { Target::new(fixed, element, 2) }
    }

    #[test]
    fn requests_act_on_the_memory_and_refuse_what_lies_outside() {
        let mut memory = [0u8; 16];
        // SAFETY: `memory` outlives the target and is touched only through it meanwhile.
        let mut target = unsafe { fixed_target(&mut memory, 1) };
        let mut replies = Vec::new();
        let put = request(Ask::Put, 4, 4, 0).encode(&[&[1, 2, 3, 4]]);
        target.apply(1, &put, &mut replies);
        assert!(replies.is_empty());
        target.apply(1, &request(Ask::Get, 2, 4, 7).encode(&[]), &mut replies);
        let (answer, id, data) = decode_reply(&replies[0].frame).unwrap();
        assert_eq!((answer, id, data), (Answer::Data, 7, &[0u8, 0, 1, 2][..]));
        let outside = request(Ask::Put, 14, 4, 0).encode(&[&[9; 4]]);
        target.apply(1, &outside, &mut replies);
        let (answer, _, why) = decode_reply(&replies[1].frame).unwrap();
        assert_eq!(answer, Answer::Fault);
        assert!(String::from_utf8_lossy(why).contains("past the window's 16 bytes"));
        drop(target);
        assert_eq!(memory[..8], [0, 0, 0, 0, 1, 2, 3, 4]);
        let attached = [0u32; 2];
        let address = attached.as_ptr() as u64;
        // SAFETY: `attached` is not touched while the target lives (it only reads).
        let mut target = unsafe { Target::new(Memory::Dynamic(Vec::new()), 4, 2) };
        // SAFETY: as above.
        unsafe { target.attach(address as usize, 8, vec![3; 5]) }.unwrap();
        let mut replies = Vec::new();
        target.apply(
            1,
            &request(Ask::Get, address + 4, 4, 1).encode(&[]),
            &mut replies,
        );
        target.apply(
            1,
            &request(Ask::Get, address + 1, 4, 2).encode(&[]),
            &mut replies,
        );
        target.apply(
            1,
            &request(Ask::Get, address, 3, 3).encode(&[]),
            &mut replies,
        );
        // Where the block lies, with its key; nothing for bytes past its end.
        target.apply(
            1,
            &request(Ask::Region, address + 4, 4, 4).encode(&[]),
            &mut replies,
        );
        target.apply(
            1,
            &request(Ask::Region, address + 4, 8, 5).encode(&[]),
            &mut replies,
        );
        let answers: Vec<Answer> = replies
            .iter()
            .map(|r| decode_reply(&r.frame).unwrap().0)
            .collect();
        assert_eq!(
            answers,
            [
                Answer::Data,
                Answer::Fault,
                Answer::Fault,
                Answer::Data,
                Answer::Fault
            ]
        );
        let (_, _, why) = decode_reply(&replies[1].frame).unwrap();
        assert!(String::from_utf8_lossy(why).contains("not whole elements"));
        let (_, id, region) = decode_reply(&replies[3].frame).unwrap();
        let expected = Region {
            address,
            bytes: 8,
            key: vec![3; 5],
        };
        assert_eq!((id, Region::decode(region)), (4, Some(expected)));
        let (_, _, why) = decode_reply(&replies[4].frame).unwrap();
        assert!(String::from_utf8_lossy(why).contains("no attached memory holds the 8 byte(s)"));
        // Once detached, the block is neither reached nor found.
        target.detach(address as usize).unwrap();
        target.apply(
            1,
            &request(Ask::Region, address, 4, 6).encode(&[]),
            &mut replies,
        );
        assert_eq!(decode_reply(&replies[5].frame).unwrap().0, Answer::Fault);
        assert_eq!(memory[14..], [0, 0], "a refused put wrote");
    }

    #[test]
    fn typed_requests_act_block_by_block_and_move_nothing_when_one_lies_outside() {
        use super::super::wire::encode_blocks;
        let mut memory = [0u8; 16];
        // SAFETY: `memory` outlives the target and is touched only through it meanwhile.
        let mut target = unsafe { fixed_target(&mut memory, 2) };
        let mut replies = Vec::new();
        let typed = |ask, blocks: &[(u64, u64)], len, id| {
            let mut request = request(ask, 2, len, id);
            request.blocks = blocks.len() as u32;
            (request, encode_blocks(blocks))
        };
        // Blocks out of address order: type-map order is the data's.
        let (put, list) = typed(Ask::Put, &[(8, 2), (0, 4)], 6, 0);
        target.apply(1, &put.encode(&[&list, &[1, 2, 3, 4, 5, 6]]), &mut replies);
        assert!(replies.is_empty());
        assert_eq!(memory[..12], [0, 0, 3, 4, 5, 6, 0, 0, 0, 0, 1, 2]);
        let (get, list) = typed(Ask::Get, &[(2, 2), (8, 2)], 4, 5);
        target.apply(1, &get.encode(&[&list]), &mut replies);
        let (answer, id, data) = decode_reply(&replies[0].frame).unwrap();
        assert_eq!((answer, id, data), (Answer::Data, 5, &[5u8, 6, 1, 2][..]));
        // The second block reaches past the end: the first is not written either.
        let (outside, list) = typed(Ask::Put, &[(0, 2), (12, 4)], 6, 0);
        target.apply(1, &outside.encode(&[&list, &[9; 6]]), &mut replies);
        let (answer, _, why) = decode_reply(&replies[1].frame).unwrap();
        assert_eq!(answer, Answer::Fault);
        assert!(String::from_utf8_lossy(why).contains("past the window's 16 bytes"));
        // A list shorter than it says.
        let (cut, list) = typed(Ask::Put, &[(0, 2), (4, 2)], 4, 0);
        target.apply(1, &cut.encode(&[&list[..20]]), &mut replies);
        let (_, _, why) = decode_reply(&replies[2].frame).unwrap();
        assert!(String::from_utf8_lossy(why).contains("cut short"));
        drop(target);
        assert_eq!(memory[2..4], [3, 4], "a refused typed put wrote");
    }
}
