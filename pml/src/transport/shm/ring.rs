//! Single-producer, single-consumer ring of variable-length records over raw memory.
//!
//! A record is a 4-byte stamp word followed by the frame, padded to a whole number of 16-byte
//! slots. The stamp is the only publication: it holds the frame's length, whether the record
//! is a wrap marker ("continue at the start of the next lap") and the parity of the lap it was
//! written in; zero, or a stamp of the other parity, means "nothing yet". So the consumer of a
//! small frame pulls one cache line, or two where the record straddles a line, and never
//! touches a producer-owned index; the producer reads the consumer's `tail` only when its
//! cached copy says the ring is full.
//!
//! Stale bytes from an earlier lap can never pass for a stamp. The consumer only ever looks
//! for a stamp at a lap's start or where the record before ended, and before publishing a
//! record the producer zeroes the word where the record ends, unless that word lies exactly
//! one lap past the consumer's tail as the producer last read it. A lap's start, and that
//! word, are places where a record (or wrap marker) began a lap ago, so they hold zero, a
//! stamp of the other parity, or the new stamp. Any other such word lies less than a lap past
//! that tail: the consumer is done with it, and zeroing it is safe. So the consumer writes
//! nothing into the ring's data, and never into a line the producer is still filling (it used
//! to zero the slot starts inside each record it read, a store into the producer's line for
//! every message). The producer's zero falls in its record's own line, or in the line its
//! next record starts (with 32-byte records, half the time each).
//!
//! Positions (`head`, `tail`) are byte counts since creation (u64, never wrap in practice); the
//! offset in the data area is `position & (size - 1)`, and the lap's parity `position & size`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::bulk_copy;

/// Records start on slot boundaries, so that only slot starts are ever read as stamps; 16
/// bytes keep an 8-byte message's record (a 20-byte MATCH header after the stamp) at 32
/// bytes, two to a cache line (a 64-byte slot, one record per cache line, cost the message
/// rate 8% for 0.01 us of latency).
const SLOT: usize = 16;
/// The stamp's size: 4 bytes rather than 8 are what bring that record from 48 bytes to 32.
const HEADER: usize = 4;
/// Stamp bits: the lap's parity, the wrap marker, one always set (so that no stamp is zero),
/// then the frame's length.
const ODD_LAP: u32 = 1;
const WRAP: u32 = 2;
const STAMPED: u32 = 4;
const LEN_SHIFT: u32 = 3;
/// The longest frame a stamp can describe (512 MiB less a byte).
const MAX_LEN: usize = (u32::MAX >> LEN_SHIFT) as usize;

/// The consumer's published position, alone on its cache lines (128 bytes: adjacent-line
/// prefetchers pull pairs of lines) so that writing it disturbs nothing else.
#[repr(C, align(128))]
pub(crate) struct RingCtl {
    tail: AtomicU64,
    /// Set by the producer while its last write found no room, so that the consumer wakes it
    /// only then. Written on changes only, which are rare, so sharing the line is cheap.
    blocked: AtomicU32,
}

/// Largest frame a ring of `size` data bytes carries: its record fills an empty ring, or its
/// length fills the stamp.
pub(crate) const fn max_frame(size: usize) -> usize {
    let fills_ring = size - HEADER;
    if fills_ring < MAX_LEN {
        fills_ring
    } else {
        MAX_LEN
    }
}

const fn record_len(len: usize) -> usize {
    (HEADER + len + SLOT - 1) & !(SLOT - 1)
}

/// The memory of one ring; shared by its producer and consumer halves.
#[derive(Clone, Copy)]
struct Raw {
    ctl: *const RingCtl,
    data: *mut u8,
    size: usize,
}

impl Raw {
    fn ctl(&self) -> &RingCtl {
        // SAFETY: `ctl` points to a live RingCtl for the life of the ring (contract of
        // `Producer::new` / `Consumer::new`), and it holds only atomics.
        unsafe { &*self.ctl }
    }

    /// The lap-parity bit of a stamp written at `position`.
    #[inline]
    fn lap_parity(&self, position: u64) -> u32 {
        u32::from(position & self.size as u64 != 0)
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset & 3 == 0 && offset < self.size);
        // SAFETY: `data` is 8-aligned and valid for `size` bytes (contract of `new`), and
        // `offset` is a multiple of 4 below `size`, so this is an aligned u32 in the ring.
        // Stamp words are accessed atomically whenever both sides might touch them; the
        // non-atomic payload copies that reuse these bytes in other laps are ordered against
        // them by the head/tail protocol (Release/Acquire on stamp words and on `tail`).
        unsafe { &*self.data.add(offset).cast::<AtomicU32>() }
    }
}

pub(crate) struct Producer {
    raw: Raw,
    head: u64,
    cached_tail: u64,
    /// The last write failed for lack of room (our copy of `RingCtl::blocked`).
    blocked: bool,
}

// SAFETY: the producer half is the only writer of its ring's records; moving it to another
// thread moves that exclusive role with it (there is no thread-local state).
unsafe impl Send for Producer {}

impl Producer {
    /// # Safety
    /// `ctl` points to a `RingCtl` and `data` to `size` bytes, 8-aligned, that stay mapped while
    /// this value lives; `size` is a power of two ≥ 64; ring memory and `tail` were zero when
    /// the ring was created; at most one `Producer` and one `Consumer` use this ring, ever.
    pub(crate) unsafe fn new(ctl: *const RingCtl, data: *mut u8, size: usize) -> Self {
        Producer {
            raw: Raw { ctl, data, size },
            head: 0,
            cached_tail: 0,
            blocked: false,
        }
    }

    /// Backs the whole ring with memory now, so that the first lap's frames do not each stop
    /// for a page fault that allocates and zeroes their page (about 1 us a page here; the
    /// first lap of 8-byte messages ran at half their later rate). Where the kernel cannot
    /// (before 5.14, or no room left in /dev/shm, which it reports where touching the pages
    /// would be SIGBUS), the call fails and the pages are taken as traffic reaches them.
    pub(crate) fn make_resident(&self) {
        // SAFETY: the range is this ring's memory, mapped for as long as the producer lives
        // (contract of `new`; a segment's rings of a page or more are also page aligned, and
        // an unaligned start only makes the call fail; a smaller ring at a page's start
        // populates the whole page, its neighbours' too); populating allocates zeroed pages
        // where there are none and changes no byte a reader can see.
        unsafe {
            libc::madvise(
                self.raw.data.cast(),
                self.raw.size,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }

    /// Whether `bytes` more bytes from `head` on are free, refreshing the consumer's tail only
    /// when the cached one says no.
    fn room(&mut self, bytes: usize) -> bool {
        let limit = self.raw.size as u64;
        if self.head + bytes as u64 - self.cached_tail <= limit {
            return true;
        }
        // Acquire: the consumer finished reading everything before `tail` before publishing it.
        self.cached_tail = self.raw.ctl().tail.load(Ordering::Acquire);
        self.head + bytes as u64 - self.cached_tail <= limit
    }

    /// Whether the last write failed for room and the consumer has freed some since.
    pub(crate) fn space_freed(&self) -> bool {
        self.blocked && self.raw.ctl().tail.load(Ordering::Acquire) != self.cached_tail
    }

    /// Writes `header` then `payload` (at most `max_frame(size)` bytes together) as one
    /// record: a frame's two parts, each copied once, straight into the ring. Returns false
    /// when the ring is too full, having written at most a wrap marker (the record did not
    /// fit at the lap's end, nor yet at its start).
    pub(crate) fn try_write(&mut self, header: &[u8], payload: &[u8]) -> bool {
        // SAFETY: `fill` gets `payload.len()` writable bytes, which the copy fills, from a
        // slice that cannot overlap the ring's free space.
        self.try_write_with(header, payload.len(), |at| unsafe {
            bulk_copy::copy_nonoverlapping(payload.as_ptr(), at, payload.len())
        })
    }

    /// [`try_write`](Self::try_write) of a payload of `len` bytes that `fill` writes at the
    /// pointer it is given (every one of them), straight into the ring: a non-contiguous send
    /// packed once, where its frame lies.
    #[inline]
    pub(crate) fn try_write_with(
        &mut self,
        header: &[u8],
        len: usize,
        fill: impl FnOnce(*mut u8),
    ) -> bool {
        let written = self.write(header, len, fill);
        if written == self.blocked {
            self.blocked = !written;
            self.raw
                .ctl()
                .blocked
                .store(u32::from(self.blocked), Ordering::Relaxed);
        }
        written
    }

    fn write(&mut self, header: &[u8], payload_len: usize, fill: impl FnOnce(*mut u8)) -> bool {
        let len = header.len() + payload_len;
        debug_assert!(len <= max_frame(self.raw.size));
        let size = self.raw.size;
        let record = record_len(len);
        let mut offset = (self.head as usize) & (size - 1);
        if offset + record > size {
            let skip = size - offset;
            if !self.room(skip) {
                return false;
            }
            let marker = STAMPED | WRAP | self.raw.lap_parity(self.head);
            self.raw.word(offset).store(marker, Ordering::Release);
            self.head += skip as u64;
            offset = 0;
        }
        if !self.room(record) {
            return false;
        }
        let at = offset + HEADER;
        // SAFETY: `at + len <= offset + record <= size`, so both destinations lie in the
        // ring; `room` guaranteed the consumer is done with these bytes (it published a tail
        // past them, acquired above) and will not read them until the stamp below is
        // published. The parts cannot alias that free space: nothing hands out references to it.
        unsafe {
            bulk_copy::copy_nonoverlapping(header.as_ptr(), self.raw.data.add(at), header.len());
            fill(self.raw.data.add(at + header.len()));
        }
        // Where the consumer looks next (see the module comment). Exactly a lap past the
        // tail last read, a record began a lap ago; a lap's start (masked to 0) is zeroed
        // only where the consumer is done with it, which is harmless.
        let next = self.head + record as u64;
        if next - self.cached_tail < size as u64 {
            self.raw
                .word(next as usize & (size - 1))
                .store(0, Ordering::Relaxed);
        }
        let stamp = (len as u32) << LEN_SHIFT | STAMPED | self.raw.lap_parity(self.head);
        // Release: the payload and the zero after it become visible with the stamp.
        self.raw.word(offset).store(stamp, Ordering::Release);
        self.head = next;
        true
    }
}

pub(crate) struct Consumer {
    raw: Raw,
    tail: u64,
}

// SAFETY: as for `Producer`: the consumer half is the only reader role of its ring.
unsafe impl Send for Consumer {}

impl Consumer {
    /// # Safety
    /// Same contract as [`Producer::new`].
    pub(crate) unsafe fn new(ctl: *const RingCtl, data: *mut u8, size: usize) -> Self {
        Consumer {
            raw: Raw { ctl, data, size },
            tail: 0,
        }
    }

    /// How far the consumer has read: moves with every record drained, wrap markers too.
    pub(crate) fn position(&self) -> u64 {
        self.tail
    }

    /// Whether the producer's last write found the ring full.
    pub(crate) fn producer_blocked(&self) -> bool {
        self.raw.ctl().blocked.load(Ordering::Relaxed) != 0
    }

    /// The stamp published for the record at `position`, if there is one yet.
    #[inline]
    fn stamp_at(&self, position: u64) -> Option<u32> {
        let offset = (position as usize) & (self.raw.size - 1);
        let word = self.raw.word(offset).load(Ordering::Acquire);
        (word & (STAMPED | ODD_LAP) == STAMPED | self.raw.lap_parity(position)).then_some(word)
    }

    /// Whether `drain` has anything to do: a frame, or a wrap marker to step over (which a
    /// producer waiting for room needs passed even while no frame follows it yet).
    #[inline]
    pub(crate) fn has_record(&self) -> bool {
        self.stamp_at(self.tail).is_some()
    }

    /// Whether a frame is (or may soon be, behind a wrap marker) ready to read.
    pub(crate) fn has_frame(&self) -> bool {
        match self.stamp_at(self.tail) {
            Some(stamp) if stamp & WRAP != 0 => {
                let next_lap = self.tail.next_multiple_of(self.raw.size as u64);
                self.stamp_at(next_lap).is_some()
            }
            found => found.is_some(),
        }
    }

    /// Hands up to `max` frames to `f`, in order, then gives their space back to the producer.
    // Inline into `ShmTransport::poll`, its one caller: the compiler's choice flipped with
    // unrelated edits, and the outlined copy cost 26 instructions a received frame (callgrind).
    #[inline]
    pub(crate) fn drain(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let size = self.raw.size;
        let start = self.tail;
        let mut count = 0;
        while count < max {
            let offset = (self.tail as usize) & (size - 1);
            let Some(stamp) = self.stamp_at(self.tail) else {
                break;
            };
            if stamp & WRAP != 0 {
                self.tail += (size - offset) as u64;
                continue;
            }
            let len = (stamp >> LEN_SHIFT) as usize;
            // A peer that breaks the format would make us read outside the ring (a length past
            // the ring's size is capped only so that the sum cannot overflow).
            let record = record_len(len.min(size));
            assert!(
                offset + record <= size,
                "corrupt shm ring record: length {len} at offset {offset}"
            );
            // SAFETY: the bytes lie inside the ring (checked above); the Acquire load of the
            // stamp made the producer's payload writes visible, and the producer will not
            // write them again until we publish a tail past them, after `f` returns.
            let frame =
                unsafe { std::slice::from_raw_parts(self.raw.data.add(offset + HEADER), len) };
            f(frame);
            self.tail += record as u64;
            count += 1;
        }
        if self.tail != start {
            // Release: our reads of these records happen before the producer reuses the space.
            self.raw.ctl().tail.store(self.tail, Ordering::Release);
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring over heap memory: u64s give the 8-byte alignment the ring needs.
    struct HeapRing {
        ctl: Box<RingCtl>,
        data: Vec<u64>,
    }

    impl HeapRing {
        fn new(size: usize) -> Self {
            HeapRing {
                ctl: Box::new(RingCtl {
                    tail: AtomicU64::new(0),
                    blocked: AtomicU32::new(0),
                }),
                data: vec![0; size / 8],
            }
        }

        fn halves(&mut self) -> (Producer, Consumer) {
            let size = self.data.len() * 8;
            let data = self.data.as_mut_ptr().cast::<u8>();
            let ctl: *const RingCtl = &*self.ctl;
            // SAFETY: `ctl` and `data` are zeroed, aligned, and outlive both halves (tests drop
            // the halves before the HeapRing); `halves` is called once per ring.
            unsafe {
                (
                    Producer::new(ctl, data, size),
                    Consumer::new(ctl, data, size),
                )
            }
        }
    }

    fn drain_all(c: &mut Consumer) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        c.drain(usize::MAX, |f| out.push(f.to_vec()));
        out
    }

    #[test]
    fn empty_ring_has_nothing() {
        let mut ring = HeapRing::new(256);
        let (_p, mut c) = ring.halves();
        assert!(!c.has_frame());
        assert_eq!(c.drain(10, |_| panic!("no frame expected")), 0);
    }

    #[test]
    fn zero_length_and_two_part_frames() {
        let mut ring = HeapRing::new(256);
        let (mut p, mut c) = ring.halves();
        assert!(p.try_write(&[], &[]));
        assert!(p.try_write(b"header", b"+payload"));
        assert!(c.has_frame());
        assert_eq!(
            drain_all(&mut c),
            vec![Vec::new(), b"header+payload".to_vec()]
        );
        assert!(!c.has_frame());
    }

    #[test]
    fn full_ring_refuses_then_accepts_after_drain() {
        let mut ring = HeapRing::new(256);
        let (mut p, mut c) = ring.halves();
        let frame = [7u8; 24]; // 32-byte records
        let mut written = 0;
        while p.try_write(&frame, &[]) {
            written += 1;
        }
        // 8 records of 32 bytes fill 256.
        assert_eq!(written, 8);
        assert!(c.producer_blocked());
        assert!(!p.space_freed());
        assert_eq!(c.drain(1, |f| assert_eq!(f, frame)), 1);
        assert!(p.space_freed());
        assert!(p.try_write(&frame, &[]));
        assert!(!c.producer_blocked());
        assert!(!p.try_write(&frame, &[]));
        assert_eq!(drain_all(&mut c).len(), 8);
    }

    /// A payload word, four bytes from `at`, made to look like a stamp of either lap parity,
    /// wrap marker or frame, with a length that fits the ring. Frame bytes `4k..4k + 4` are
    /// the ones that land on slot starts (the frame starts 4 bytes into its record).
    fn stamp_lookalike(at: usize) -> [u8; 4] {
        let len = (at * 8) % 200;
        ((len as u32) << LEN_SHIFT | STAMPED | (at as u32 & (ODD_LAP | WRAP))).to_le_bytes()
    }

    fn lookalike_frame(first: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| stamp_lookalike(first + i / 4)[i % 4])
            .collect()
    }

    #[test]
    fn stale_payload_never_reads_as_a_stamp() {
        // Frames made of stamp look-alikes, of lengths that move record starts across every
        // slot of a small ring over many laps, read in batches of every size: a slot start that
        // held payload or skipped bytes a lap ago, and was not cleared, would show up as a
        // frame that was never sent.
        let mut ring = HeapRing::new(512);
        let (mut p, mut c) = ring.halves();
        let mut sent = std::collections::VecDeque::new();
        for round in 0..3000usize {
            let len = 8 + (round * 53) % 240;
            let frame = lookalike_frame(round, len);
            while !p.try_write(&frame[..len / 2], &frame[len / 2..]) {
                let batch = 1 + round % 3;
                c.drain(batch, |f| assert_eq!(Some(f.to_vec()), sent.pop_front()));
            }
            sent.push_back(frame);
            if round % 7 == 0 {
                c.drain(usize::MAX, |f| {
                    assert_eq!(Some(f.to_vec()), sent.pop_front())
                });
                assert!(sent.is_empty());
                assert!(
                    !c.has_record(),
                    "round {round}: a stale word reads as a record"
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 300,
            ..Default::default()
        })]

        /// The ring against a queue: frames of every length up to the largest, made of stamp
        /// look-alikes, written while there is room and read in batches of every size, come
        /// out whole and in order, and nothing else does.
        #[test]
        fn ring_delivers_like_a_queue(
            size_log in 6u32..11,
            ops in proptest::collection::vec((0usize..2048, 0usize..4), 1..400),
        ) {
            let size = 1usize << size_log;
            let mut ring = HeapRing::new(size);
            let (mut p, mut c) = ring.halves();
            let mut queued = std::collections::VecDeque::new();
            for (at, (len_seed, batch)) in ops.into_iter().enumerate() {
                // A quarter of the frames are the largest, which wrap at almost any offset; the
                // rest take every length up to 199 bytes that the ring carries (the seed's low
                // bits picked the quarter, so the length comes from the others: every residue
                // mod 4 occurs).
                let largest = max_frame(size);
                let len = if len_seed % 4 == 0 {
                    largest
                } else {
                    len_seed / 4 % (largest.min(199) + 1)
                };
                let frame = lookalike_frame(at, len);
                if p.try_write(&frame[..len / 3], &frame[len / 3..]) {
                    queued.push_back(frame);
                    continue;
                }
                let max = if batch == 0 { usize::MAX } else { batch };
                c.drain(max, |f| assert_eq!(Some(f.to_vec()), queued.pop_front()));
            }
            c.drain(usize::MAX, |f| assert_eq!(Some(f.to_vec()), queued.pop_front()));
            proptest::prop_assert!(queued.is_empty(), "{} frames never came out", queued.len());
            proptest::prop_assert!(!c.has_record() && !c.has_frame());
        }
    }

    #[test]
    #[should_panic(expected = "corrupt shm ring record: length")]
    fn a_length_past_the_ring_is_refused() {
        let mut ring = HeapRing::new(256);
        let (_p, mut c) = ring.halves();
        // What a broken peer could publish: a frame stamp whose record would end past the ring.
        ring.data[0] = u64::from((300 << LEN_SHIFT) | STAMPED);
        c.drain(1, |_| panic!("no frame can be handed out"));
    }

    #[test]
    fn a_wrap_marker_with_no_frame_after_it_still_needs_draining() {
        let mut ring = HeapRing::new(256);
        let (mut p, mut c) = ring.halves();
        assert!(p.try_write(&[1u8; 120], &[]));
        assert!(p.try_write(&[2u8; 56], &[]));
        assert_eq!(c.drain(1, |f| assert_eq!(f.len(), 120)), 1);
        // Room for the wrap marker at the end of the lap, not for the frame after it.
        assert!(!p.try_write(&[3u8; 184], &[]));
        assert_eq!(c.drain(1, |f| assert_eq!(f.len(), 56)), 1);
        assert!(!c.has_frame());
        assert!(
            c.has_record(),
            "the producer waits for the marker to be passed"
        );
        assert_eq!(c.drain(1, |_| panic!("no frame yet")), 0);
        assert!(!c.has_record());
        assert!(p.try_write(&[3u8; 184], &[]));
        assert_eq!(drain_all(&mut c), vec![vec![3u8; 184]]);
    }

    #[test]
    fn max_frame_fits_only_an_empty_ring_at_any_offset() {
        let size = 256;
        let max = max_frame(size);
        for shift in [0usize, 16, 48, 128, 240] {
            let mut ring = HeapRing::new(size);
            let (mut p, mut c) = ring.halves();
            if shift > 0 {
                let len = shift - HEADER;
                assert!(p.try_write(&vec![1u8; len], &[]));
                assert_eq!(drain_all(&mut c).len(), 1);
            }
            let frame: Vec<u8> = (0..max).map(|i| i as u8).collect();
            // Wrapping may take a second attempt once the consumer has skipped the marker.
            let mut sent = p.try_write(&[], &frame);
            if !sent {
                assert!(drain_all(&mut c).is_empty());
                sent = p.try_write(&[], &frame);
            }
            assert!(sent, "max frame at offset {shift}");
            assert!(!p.try_write(&[], &[]));
            assert_eq!(drain_all(&mut c), vec![frame]);
            assert!(p.try_write(b"x", &[]));
            assert_eq!(drain_all(&mut c), vec![b"x".to_vec()]);
        }
    }

    #[test]
    fn wraparound_keeps_order_and_content() {
        let mut ring = HeapRing::new(512);
        let (mut p, mut c) = ring.halves();
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        for round in 0..2000usize {
            let len = (round * 37) % 100;
            let frame: Vec<u8> = (0..len).map(|i| (next_in as usize + i) as u8).collect();
            while !p.try_write(&next_in.to_le_bytes(), &frame) {
                c.drain(3, |f| {
                    assert_eq!(f[..4], next_out.to_le_bytes());
                    let body = &f[4..];
                    assert!(body
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == (next_out as usize + i) as u8));
                    next_out += 1;
                });
            }
            next_in += 1;
        }
        c.drain(usize::MAX, |_| next_out += 1);
        assert_eq!(next_in, next_out);
    }

    #[test]
    fn two_thread_stress_with_checksums() {
        const FRAMES: u64 = 200_000;
        let mut ring = HeapRing::new(4096);
        let (mut p, mut c) = ring.halves();
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut buf = [0u8; 200];
                for i in 0..FRAMES {
                    let len = (i as usize * 7919) % 200;
                    for (j, b) in buf[..len].iter_mut().enumerate() {
                        *b = (i as usize).wrapping_mul(31).wrapping_add(j) as u8;
                    }
                    let sum: u64 = buf[..len].iter().map(|&b| u64::from(b)).sum();
                    let meta = [i.to_le_bytes(), sum.to_le_bytes()].concat();
                    while !p.try_write(&meta, &buf[..len]) {
                        std::hint::spin_loop();
                    }
                }
            });
            let mut expected = 0u64;
            while expected < FRAMES {
                let got = c.drain(64, |f| {
                    let seq = u64::from_le_bytes(f[..8].try_into().unwrap());
                    let sum = u64::from_le_bytes(f[8..16].try_into().unwrap());
                    assert_eq!(seq, expected);
                    assert_eq!(f.len() - 16, (seq as usize * 7919) % 200);
                    assert_eq!(f[16..].iter().map(|&b| u64::from(b)).sum::<u64>(), sum);
                    expected += 1;
                });
                if got == 0 {
                    std::hint::spin_loop();
                }
            }
        });
    }
}
