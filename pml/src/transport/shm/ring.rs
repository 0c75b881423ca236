//! Single-producer, single-consumer ring of variable-length records over raw memory.
//!
//! A record is an 8-byte header word followed by the frame, padded to 8 bytes. The header word
//! is the only publication: 0 means "nothing yet", [`WRAP`] means "continue at the start of the
//! next lap", anything else is `len + 1`. So the consumer of a small frame pulls one cache line
//! (header and payload together) and never touches a producer-owned index; the producer reads
//! the consumer's `tail` only when its cached copy says the ring is full.
//!
//! Stale bytes from an earlier lap can never pass for a header: before publishing a record (or a
//! wrap marker) the producer stores 0 where the *next* record will start, and that store is
//! ordered before the Release store of the header. A consumer that acquired the header therefore
//! reads either that 0 or a later header at the next position, never old payload.
//!
//! Positions (`head`, `tail`) are byte counts since creation (u64, never wrap in practice); the
//! offset in the data area is `position & (size - 1)`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::bulk_copy;

const EMPTY: u64 = 0;
const WRAP: u64 = u64::MAX;
const HEADER: usize = 8;

/// The consumer's published position, alone on its cache lines (128 bytes: adjacent-line
/// prefetchers pull pairs of lines) so that writing it disturbs nothing else.
#[repr(C, align(128))]
pub(crate) struct RingCtl {
    tail: AtomicU64,
    /// Set by the producer while its last write found no room, so that the consumer wakes it
    /// only then. Written on changes only, which are rare, so sharing the line is cheap.
    blocked: AtomicU32,
}

/// Largest frame a ring of `size` data bytes carries: its record plus the zeroed next header
/// must fit in an otherwise empty ring.
pub(crate) const fn max_frame(size: usize) -> usize {
    size - 2 * HEADER
}

const fn record_len(len: usize) -> usize {
    HEADER + ((len + 7) & !7)
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

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset & (HEADER - 1) == 0 && offset < self.size);
        // SAFETY: `data` is 8-aligned and valid for `size` bytes (contract of `new`), and
        // `offset` is a multiple of 8 below `size`, so this is an aligned u64 in the ring.
        // Header words are accessed atomically whenever both sides might touch them; the
        // non-atomic payload copies that reuse these bytes in other laps are ordered against
        // them by the head/tail protocol (Release/Acquire on header words and on `tail`).
        unsafe { &*self.data.add(offset).cast::<AtomicU64>() }
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

    /// Writes the concatenation of `parts` (`len` bytes in all, at most `max_frame(size)`) as
    /// one record. Returns false, having written nothing visible, when the ring is too full.
    pub(crate) fn try_write(&mut self, parts: &[&[u8]], len: usize) -> bool {
        let written = self.write(parts, len);
        if written == self.blocked {
            self.blocked = !written;
            self.raw
                .ctl()
                .blocked
                .store(u32::from(self.blocked), Ordering::Relaxed);
        }
        written
    }

    fn write(&mut self, parts: &[&[u8]], len: usize) -> bool {
        debug_assert!(len <= max_frame(self.raw.size));
        debug_assert_eq!(len, parts.iter().map(|p| p.len()).sum::<usize>());
        let size = self.raw.size;
        let record = record_len(len);
        let mut offset = (self.head as usize) & (size - 1);
        if offset + record > size {
            let skip = size - offset;
            // Room for the skipped tail end plus the next lap's first header word.
            if !self.room(skip + HEADER) {
                return false;
            }
            self.raw.word(0).store(EMPTY, Ordering::Relaxed);
            self.raw.word(offset).store(WRAP, Ordering::Release);
            self.head += skip as u64;
            offset = 0;
        }
        if !self.room(record + HEADER) {
            return false;
        }
        let mut at = offset + HEADER;
        for part in parts {
            // SAFETY: `at + part.len() <= offset + record <= size`, so the destination lies in
            // the ring; `room` guaranteed the consumer is done with these bytes (it published a
            // tail past them, acquired above) and will not read them until the header below is
            // published. `part` cannot alias that free space: nothing hands out references to it.
            unsafe {
                bulk_copy::copy_nonoverlapping(part.as_ptr(), self.raw.data.add(at), part.len());
            }
            at += part.len();
        }
        self.raw
            .word((offset + record) & (size - 1))
            .store(EMPTY, Ordering::Relaxed);
        // Release: payload and the zeroed next header become visible with the header.
        self.raw
            .word(offset)
            .store(len as u64 + 1, Ordering::Release);
        self.head += record as u64;
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

    /// Whether the producer's last write found the ring full.
    pub(crate) fn producer_blocked(&self) -> bool {
        self.raw.ctl().blocked.load(Ordering::Relaxed) != 0
    }

    /// Whether `drain` has anything to do: a frame, or a wrap marker to step over (which a
    /// producer waiting for room needs passed even while no frame follows it yet).
    #[inline]
    pub(crate) fn has_record(&self) -> bool {
        let offset = (self.tail as usize) & (self.raw.size - 1);
        self.raw.word(offset).load(Ordering::Acquire) != EMPTY
    }

    /// Whether a frame is (or may soon be, behind a wrap marker) ready to read.
    pub(crate) fn has_frame(&self) -> bool {
        let offset = (self.tail as usize) & (self.raw.size - 1);
        match self.raw.word(offset).load(Ordering::Acquire) {
            EMPTY => false,
            WRAP => self.raw.word(0).load(Ordering::Acquire) != EMPTY,
            _ => true,
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
            let header = self.raw.word(offset).load(Ordering::Acquire);
            if header == EMPTY {
                break;
            }
            if header == WRAP {
                self.tail += (size - offset) as u64;
                continue;
            }
            let len = (header - 1) as usize;
            // A peer that breaks the format would make us read outside the ring.
            assert!(
                offset + record_len(len) <= size,
                "corrupt shm ring record: length {len} at offset {offset}"
            );
            // SAFETY: the bytes lie inside the ring (checked above); the Acquire load of the
            // header made the producer's payload writes visible, and the producer will not
            // write them again until we publish a tail past them, after `f` returns.
            let frame =
                unsafe { std::slice::from_raw_parts(self.raw.data.add(offset + HEADER), len) };
            f(frame);
            self.tail += record_len(len) as u64;
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
    fn zero_length_and_multi_part_frames() {
        let mut ring = HeapRing::new(256);
        let (mut p, mut c) = ring.halves();
        assert!(p.try_write(&[], 0));
        assert!(p.try_write(&[b"head", b"", b"er+payload"], 14));
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
        while p.try_write(&[&frame], 24) {
            written += 1;
        }
        // 8 records of 32 bytes fill 256, but the zeroed next header needs 8 more bytes.
        assert_eq!(written, 7);
        assert!(c.producer_blocked());
        assert!(!p.space_freed());
        assert_eq!(c.drain(1, |f| assert_eq!(f, frame)), 1);
        assert!(p.space_freed());
        assert!(p.try_write(&[&frame], 24));
        assert!(!c.producer_blocked());
        assert!(!p.try_write(&[&frame], 24));
        assert_eq!(drain_all(&mut c).len(), 7);
    }

    #[test]
    fn a_wrap_marker_with_no_frame_after_it_still_needs_draining() {
        let mut ring = HeapRing::new(256);
        let (mut p, mut c) = ring.halves();
        assert!(p.try_write(&[&[1u8; 120]], 120));
        assert!(p.try_write(&[&[2u8; 56]], 56));
        assert_eq!(c.drain(1, |f| assert_eq!(f.len(), 120)), 1);
        // Room for the wrap marker at the end of the lap, not for the frame after it.
        assert!(!p.try_write(&[&[3u8; 184]], 184));
        assert_eq!(c.drain(1, |f| assert_eq!(f.len(), 56)), 1);
        assert!(!c.has_frame());
        assert!(
            c.has_record(),
            "the producer waits for the marker to be passed"
        );
        assert_eq!(c.drain(1, |_| panic!("no frame yet")), 0);
        assert!(!c.has_record());
        assert!(p.try_write(&[&[3u8; 184]], 184));
        assert_eq!(drain_all(&mut c), vec![vec![3u8; 184]]);
    }

    #[test]
    fn max_frame_fits_only_an_empty_ring_at_any_offset() {
        let size = 256;
        let max = max_frame(size);
        for shift in [0usize, 8, 40, 128, 240] {
            let mut ring = HeapRing::new(size);
            let (mut p, mut c) = ring.halves();
            if shift > 0 {
                assert!(p.try_write(&[&vec![1u8; shift - 8]], shift - 8));
                assert_eq!(drain_all(&mut c).len(), 1);
            }
            let frame: Vec<u8> = (0..max).map(|i| i as u8).collect();
            // Wrapping may take a second attempt once the consumer has skipped the marker.
            let mut sent = p.try_write(&[&frame], max);
            if !sent {
                assert!(drain_all(&mut c).is_empty());
                sent = p.try_write(&[&frame], max);
            }
            assert!(sent, "max frame at offset {shift}");
            assert!(!p.try_write(&[], 0));
            assert_eq!(drain_all(&mut c), vec![frame]);
            assert!(p.try_write(&[b"x"], 1));
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
            while !p.try_write(&[&next_in.to_le_bytes(), &frame], 4 + len) {
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
                    while !p.try_write(&[&meta, &buf[..len]], 16 + len) {
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
