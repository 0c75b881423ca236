//! One established connection: frames in and out of a non-blocking stream socket.
//!
//! On the wire each frame is a little-endian `u32` length and then the frame; a length of zero
//! is the goodbye a finalizing rank sends before it closes, so that its end of file is not
//! taken for a crash. Small frames are read through a staging buffer. A frame the sink places
//! in memory of its own (a DATA frame's rendezvous data, in the receive buffer it belongs to;
//! see `Sink::placement`) is read straight there: once its head is in, the rest of the frame
//! is `read` into that memory, and after one such frame only the next head is read ahead, so
//! a stream of them is never staged. DATA for a receive laid out in blocks is scattered the
//! same way, by `readv` into its runs (see `gather.rs`).

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::gather::{scatter_short_runs, Batch, IovecRoom, IOV_MAX, SHORT_RUN};
use super::{scratch, Sent, Sink};
use crate::blocks::{Block, Blocks, PackedRange, Position};
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::transport::Placement;

/// Bytes of the length before every frame.
pub const PREFIX_LEN: usize = 4;
const GOODBYE: [u8; PREFIX_LEN] = [0; PREFIX_LEN];

/// What a `receive` found besides frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    Open,
    /// The peer said goodbye and closed.
    Closed,
}

/// The rest of a frame landing where the sink placed it.
struct Direct {
    target: Target,
    len: usize,
    filled: usize,
    token: u64,
}

/// Where a frame read in place lands (see `Placement`).
enum Target {
    /// `len` bytes from here.
    Bytes(*mut u8),
    /// A range of a receive's packed bytes in its blocks; `at` is where the next byte
    /// lands (the range's start and the bytes filled), carried from one read to the next
    /// so that none seeks from its element's first block: a seek a readiness event walked,
    /// for an element of many blocks, the blocks before the point each time (quadratic).
    Blocks { blocks: Blocks, at: Position },
}

pub struct Conn {
    pub sock: TcpStream,
    rx: Box<[u8]>,
    start: usize,
    end: usize,
    /// Longest staged frame accepted: the staging buffer holds one whole.
    max_staged_frame: usize,
    direct: Option<Direct>,
    /// The last frame was read in place: read only the next head, since the next frame
    /// probably is read in place too.
    header_first: bool,
    /// Bytes of the frame being sent that are already on the wire.
    sent_of_frame: usize,
    /// Of a frame gathered from blocks (`send_blocks`) and partly sent: the packed offset
    /// its payload goes on from and that offset's position in the blocks, so that the next
    /// call resumes there rather than seek from its element's first block.
    send_at: Option<(usize, Position)>,
    /// Of a frame of short blocks (`send_packed`) whose last piece the socket took only in
    /// part: the rest of the piece, packed, to go out next.
    unsent: Option<Unsent>,
    pub writable: bool,
    goodbye_received: bool,
}

/// Packed bytes of a frame that the socket has not taken yet (see `Conn::send_packed`).
struct Unsent {
    /// The scratch they were packed into, kept until they went out.
    scratch: Box<[u8]>,
    /// The packed offset of the send at which they begin.
    resumed: usize,
    /// Where they lie in the scratch.
    from: usize,
    to: usize,
    /// The position in the send's blocks just past them.
    end: Position,
}

fn peer_error(peer: Rank, cause: impl Into<String>) -> PmlError {
    PmlError::transport(peer, cause.into())
}

/// The length before a frame of `total` bytes.
fn frame_prefix(total: usize) -> io::Result<[u8; PREFIX_LEN]> {
    u32::try_from(total)
        .map(u32::to_le_bytes)
        .map_err(|_| io::Error::other(format!("a frame of {total} bytes is too long")))
}

/// Calls `each` with what is left of each of `parts`, in order, once their first `sent`
/// bytes are on the wire; returns how many of `sent` lie past them all.
fn for_each_unsent<'a>(
    parts: &[&'a [u8]],
    mut sent: usize,
    mut each: impl FnMut(&'a [u8]),
) -> usize {
    for part in parts {
        if sent >= part.len() {
            sent -= part.len();
            continue;
        }
        each(&part[sent..]);
        sent = 0;
    }
    sent
}

/// One read: `Some(n)` bytes (0 at end of stream), `None` when the socket has nothing.
fn read_some(sock: &mut TcpStream, peer: Rank, buf: &mut [u8]) -> Result<Option<usize>, PmlError> {
    loop {
        match sock.read(buf) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(lost_receiving(peer, e)),
        }
    }
}

fn lost_receiving(peer: Rank, e: io::Error) -> PmlError {
    peer_error(
        peer,
        format!("connection lost while receiving: {e} (did it die?)"),
    )
}

impl Conn {
    pub fn new(sock: TcpStream, max_staged_frame: usize) -> Conn {
        Conn {
            sock,
            rx: vec![0; (max_staged_frame + PREFIX_LEN).max(256 << 10)].into_boxed_slice(),
            start: 0,
            end: 0,
            max_staged_frame,
            direct: None,
            header_first: false,
            sent_of_frame: 0,
            send_at: None,
            unsent: None,
            writable: true,
            goodbye_received: false,
        }
    }

    /// Writes what the socket takes of the frame `header` + `payload`, resuming after the part
    /// a previous call wrote. The caller passes the same frame until it went out whole.
    pub fn send(&mut self, header: &[u8], payload: &[u8]) -> io::Result<Sent> {
        let total = header.len() + payload.len();
        let prefix = frame_prefix(total)?;
        self.sent_of_frame += self.write_unsent([&prefix, header, payload], self.sent_of_frame)?;
        Ok(self.sent(PREFIX_LEN + total))
    }

    /// One `sendmsg` of what is left of `parts` past their first `sent` bytes: how many
    /// bytes it wrote.
    fn write_unsent(&self, parts: [&[u8]; 3], sent: usize) -> io::Result<usize> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3];
        let mut n_iov = 0;
        for_each_unsent(&parts, sent, |rest| {
            iov[n_iov] = libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            };
            n_iov += 1;
        });
        // SAFETY: the iovecs point into `parts`, alive for the call.
        unsafe { Self::sendmsg(&self.sock, &mut iov[..n_iov]) }
    }

    /// [`send_blocks`](Self::send_blocks) of blocks short on average (a column of doubles):
    /// the payload packed into the scratch a piece at a time by the tight loop of
    /// `Blocks::pack_range_into`, each piece one iovec; finding runs (merged where they
    /// touch) costs more than the copy for such blocks. A piece the socket takes only in part
    /// keeps its scratch ([`Unsent`]) until the rest went out: its bytes are never packed
    /// again (a full socket, taking a few KiB a call, would have them packed many times).
    ///
    /// # Safety
    /// As for `send_blocks`.
    unsafe fn send_packed(
        &mut self,
        header: &[u8],
        blocks: &Blocks,
        range: PackedRange,
        scratch: &mut Box<[u8]>,
    ) -> io::Result<Sent> {
        let total = header.len() + range.len;
        let prefix = frame_prefix(total)?;
        let head = PREFIX_LEN + header.len();
        // SAFETY: this function's contract.
        let list = unsafe { blocks.local_list() };
        let mut sent_of_payload = self.sent_of_frame.saturating_sub(head);
        let resumed = range.start + sent_of_payload;
        // Packed bytes of another frame, or from elsewhere than where this one goes on, are
        // not this frame's: packed afresh.
        let mut unsent = self
            .unsent
            .take()
            .filter(|u| self.sent_of_frame > 0 && u.resumed == resumed);
        let mut at = match &unsent {
            Some(u) => u.end,
            None => self.send_position(blocks, list, resumed),
        };
        loop {
            let (piece, end) = match &unsent {
                Some(u) => (&u.scratch[u.from..u.to], at),
                None => {
                    let scratch = scratch::scratch(scratch);
                    let n = (range.len - sent_of_payload).min(scratch.len());
                    // SAFETY: this function's contract: the range's blocks are readable,
                    // apart from the scratch, and the `n` bytes from `at` (byte
                    // `sent_of_payload` of the range) lie within the range.
                    let end = unsafe { blocks.pack_at(at, n, scratch.as_mut_ptr()) };
                    (&scratch[..n], end)
                }
            };
            let n = piece.len();
            let sent_of_parts = self.sent_of_frame - sent_of_payload;
            let built = head + n - sent_of_parts;
            let got = self.write_unsent([&prefix, header, piece], sent_of_parts)?;
            self.sent_of_frame += got;
            let taken = self.sent_of_frame.saturating_sub(head) - sent_of_payload;
            sent_of_payload += taken;
            if taken < n && self.sent_of_frame == 0 {
                // Nothing of the frame is on the wire: the next call may start another frame
                // (which would not take these bytes), so the scratch stays the transport's.
                return Ok(self.sent(head + range.len));
            }
            if taken < n {
                // The rest of the piece waits, packed, in its scratch, which this connection
                // keeps (the transport makes another at its next use).
                let mut kept = match unsent {
                    Some(kept) => kept,
                    None => Unsent {
                        scratch: std::mem::take(scratch),
                        resumed: 0,
                        from: 0,
                        to: n,
                        end,
                    },
                };
                kept.from += taken;
                kept.resumed = range.start + sent_of_payload;
                self.unsent = Some(kept);
                return Ok(self.sent(head + range.len));
            }
            at = end;
            if let Some(done) = unsent.take() {
                // Sent whole: the scratch goes back to the transport, unless it made another.
                if scratch.is_empty() {
                    *scratch = done.scratch;
                }
            }
            if got < built || self.sent_of_frame == head + range.len {
                self.send_at = Some((range.start + sent_of_payload, at));
                return Ok(self.sent(head + range.len));
            }
        }
    }

    /// The position of the packed byte `offset` of `blocks` (`list` its block list), the
    /// next of the frame being sent: where the last call left off, if it was this frame's
    /// and stopped there, else found by a seek.
    fn send_position(&self, blocks: &Blocks, list: &[Block], offset: usize) -> Position {
        match self.send_at {
            Some((resumed, at)) if self.sent_of_frame > 0 && resumed == offset => at,
            _ => blocks.position(list, offset),
        }
    }

    /// [`send`](Self::send) of a frame whose payload is the packed bytes `range` of `blocks`,
    /// gathered from its blocks (see `gather.rs`) through `scratch` (the transport's, see
    /// `transport::scratch`: reused once `sendmsg` returns, or kept by the connection for
    /// packed bytes the socket did not take, leaving it empty), in batches of at most
    /// `IOV_MAX` iovecs, as many as the socket takes.
    ///
    /// # Safety
    /// `blocks` must have been made in this process, its elements and block list alive and
    /// readable for the call, the range within its bytes, and `scratch` apart from them.
    pub unsafe fn send_blocks(
        &mut self,
        header: &[u8],
        blocks: &Blocks,
        range: PackedRange,
        scratch: &mut Box<[u8]>,
    ) -> io::Result<Sent> {
        if blocks.mean_block() < SHORT_RUN {
            // SAFETY: this function's contract.
            return unsafe { self.send_packed(header, blocks, range, scratch) };
        }
        let scratch = scratch::scratch(scratch);
        let total = header.len() + range.len;
        let prefix = frame_prefix(total)?;
        let whole = PREFIX_LEN + total;
        // SAFETY: this function's contract.
        let list = unsafe { blocks.local_list() };
        let mut iov: IovecRoom = [MaybeUninit::uninit(); IOV_MAX];
        let mut batch = Batch::new(&mut iov, scratch);
        let sent_of_payload = for_each_unsent(&[&prefix, header], self.sent_of_frame, |rest| {
            batch.point(rest);
        });
        // The runs are found once, from where the last call left the frame; each batch takes
        // up where the one before stopped.
        let at = self.send_position(blocks, list, range.start + sent_of_payload);
        let mut runs = blocks
            .runs_at(list, at, range.len - sent_of_payload)
            .peekable();
        loop {
            // SAFETY: the runs lie in the send's elements, readable and apart from the
            // scratch (this function's contract).
            unsafe { batch.runs(&mut runs) };
            let built = batch.bytes;
            // SAFETY: the iovecs point into `prefix` and `header`, alive here, the scratch,
            // and the send's elements (readable: this function's contract).
            let n = unsafe { Self::sendmsg(&self.sock, batch.iovecs()) }?;
            self.sent_of_frame += n;
            if n < built || self.sent_of_frame == whole {
                break;
            }
            batch.clear();
        }
        if self.sent_of_frame < whole {
            // Where the next call goes on: past what the socket took of the payload.
            let head = whole - range.len;
            let taken = self.sent_of_frame.saturating_sub(head) - sent_of_payload;
            let resumed = range.start + sent_of_payload + taken;
            self.send_at = Some((resumed, blocks.advance(list, at, taken)));
        }
        Ok(self.sent(whole))
    }

    /// How much of a frame of `whole` bytes is on its way, after the writes so far.
    fn sent(&mut self, whole: usize) -> Sent {
        if self.sent_of_frame == whole {
            self.sent_of_frame = 0;
            self.send_at = None;
            return Sent::Whole;
        }
        self.writable = false;
        if self.sent_of_frame > 0 {
            Sent::Part
        } else {
            Sent::Nothing
        }
    }

    /// One `sendmsg` of `iov` (retried when interrupted); how many bytes it wrote, none when
    /// the socket is full.
    ///
    /// # Safety
    /// Every iovec must describe memory readable for its length for the call.
    unsafe fn sendmsg(sock: &TcpStream, iov: &mut [libc::iovec]) -> io::Result<usize> {
        // SAFETY: a zeroed msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len();
        loop {
            // SAFETY: `msg` points at `iov`, whose entries describe readable memory (this
            // function's contract); MSG_NOSIGNAL turns a broken connection into EPIPE instead
            // of a signal.
            let n = unsafe {
                libc::sendmsg(
                    sock.as_raw_fd(),
                    &msg,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(e),
            }
        }
    }

    /// Reads what the socket has and hands the frames in it to `sink`; returns how many.
    /// `scratch`: the transport's, for DATA scattered into a receive's blocks.
    pub fn receive<S: Sink>(
        &mut self,
        peer: Rank,
        sink: &mut S,
        scratch: &mut Box<[u8]>,
    ) -> Result<(usize, Received), PmlError> {
        let mut frames = 0;
        loop {
            if let Some(d) = &mut self.direct {
                let want = d.len - d.filled;
                let read = match &mut d.target {
                    &mut Target::Bytes(ptr) => {
                        // SAFETY: `ptr` is the target `sink.placement` lent for `len` bytes,
                        // alive and untouched by anything else until `data_landed` accounts
                        // for all of them (`Sink`'s contract, an unsafe trait).
                        let dst =
                            unsafe { std::slice::from_raw_parts_mut(ptr.add(d.filled), want) };
                        read_some(&mut self.sock, peer, dst)?
                    }
                    Target::Blocks { blocks, at } => {
                        // SAFETY: `sink.placement` lent the blocks of the range, made in this
                        // process and writable, until `data_landed` accounts for all of them
                        // (`Sink`'s contract for `Placement::Scattered`); `at` is the
                        // position of the range's byte `filled`, and `want` bytes from it
                        // lie within the range; the scratch is the transport's, apart
                        // from them.
                        unsafe {
                            Self::read_scattered(
                                &mut self.sock,
                                peer,
                                blocks,
                                at,
                                want,
                                scratch::scratch(scratch),
                            )
                        }?
                    }
                };
                let n = match read {
                    None => return Ok((frames, Received::Open)),
                    // The peer closed with the frame unfinished: under level-triggered
                    // epoll, taking this for "nothing yet" would poll the socket forever.
                    Some(0) => return self.end_of_stream(peer).map(|r| (frames, r)),
                    Some(n) => n,
                };
                let d = self.direct.as_mut().expect("reading in place");
                d.filled += n;
                if d.filled == d.len {
                    let d = self.direct.take().expect("reading in place");
                    sink.data_landed(peer, d.token, d.len)?;
                    frames += 1;
                    self.header_first = true;
                } else if n < want {
                    return Ok((frames, Received::Open));
                }
                continue;
            }
            frames += self.deliver_staged(peer, sink)?;
            if self.direct.is_some() {
                continue;
            }
            if self.start > 0 {
                self.rx.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let want = if self.header_first {
                (PREFIX_LEN + S::PLACEMENT_HEAD)
                    .saturating_sub(self.end)
                    .max(1)
            } else {
                self.rx.len() - self.end
            };
            let end = self.end;
            match read_some(&mut self.sock, peer, &mut self.rx[end..end + want])? {
                None => return Ok((frames, Received::Open)),
                Some(0) => return self.end_of_stream(peer).map(|r| (frames, r)),
                Some(n) => {
                    self.end += n;
                    if n < want {
                        frames += self.deliver_staged(peer, sink)?;
                        if self.direct.is_none() {
                            return Ok((frames, Received::Open));
                        }
                    }
                }
            }
        }
    }

    fn end_of_stream(&mut self, peer: Rank) -> Result<Received, PmlError> {
        if self.goodbye_received && self.start == self.end && self.direct.is_none() {
            return Ok(Received::Closed);
        }
        Err(peer_error(
            peer,
            if self.goodbye_received {
                "the connection closed in the middle of a frame".to_string()
            } else {
                "it closed its connection without finalizing (it died, or exited before MPI \
                 finalize)"
                    .to_string()
            },
        ))
    }

    /// Hands every whole staged frame to `sink`, and starts reading the rest of a frame in
    /// place once its head is staged, where the sink places it so.
    fn deliver_staged<S: Sink>(&mut self, peer: Rank, sink: &mut S) -> Result<usize, PmlError> {
        let mut frames = 0;
        while self.end - self.start >= PREFIX_LEN {
            let at = self.start;
            let len = u32::from_le_bytes(self.rx[at..at + PREFIX_LEN].try_into().expect("4 bytes"))
                as usize;
            let body = at + PREFIX_LEN;
            if len == 0 {
                self.goodbye_received = true;
                self.start = body;
                continue;
            }
            let staged = self.end - body;
            if staged >= len {
                sink.frame(peer, &self.rx[body..body + len])?;
                self.start = body + len;
                self.header_first = false;
                frames += 1;
                continue;
            }
            match sink.placement(peer, &self.rx[body..self.end], len)? {
                Placement::NeedMore => {}
                Placement::Staged => {
                    self.header_first = false;
                    if len > self.max_staged_frame {
                        return Err(PmlError::transport(
                            peer,
                            format!(
                                "malformed frame: {len} bytes, more than the {} this rank \
                                 accepts (do the ranks' MPIRT_TCP_EAGER_LIMIT settings differ?)",
                                self.max_staged_frame
                            ),
                        ));
                    }
                }
                Placement::InPlace {
                    header_len,
                    target,
                    token,
                } => {
                    let have = staged - header_len;
                    target[..have].copy_from_slice(&self.rx[body + header_len..self.end]);
                    self.direct = Some(Direct {
                        target: Target::Bytes(target.as_mut_ptr()),
                        len: target.len(),
                        filled: have,
                        token,
                    });
                    self.start = 0;
                    self.end = 0;
                }
                Placement::Scattered {
                    header_len,
                    blocks,
                    range,
                    token,
                } => {
                    let have = &self.rx[body + header_len..self.end];
                    // SAFETY: `Sink`'s contract for `Placement::Scattered`: the range's
                    // blocks were made in this process, their list alive, writable and lent
                    // until `data_landed`; `have` is less than the frame's payload, the
                    // range's length; the staging buffer is this connection's own.
                    let at = unsafe {
                        let at = blocks.position(blocks.local_list(), range.start);
                        blocks.unpack_at(at, have.as_ptr(), have.len())
                    };
                    let have = have.len();
                    self.direct = Some(Direct {
                        target: Target::Blocks {
                            blocks: *blocks,
                            at,
                        },
                        len: range.len,
                        filled: have,
                        token,
                    });
                    self.start = 0;
                    self.end = 0;
                }
            }
            break;
        }
        Ok(frames)
    }

    /// One read of the `len` packed bytes of a receive's `blocks` from `at`, as much as the
    /// socket has: `Some(n)` bytes landed (0 at end of stream), `None` when the socket has
    /// nothing; `at` moves on past the bytes landed. Short blocks on average (a column of
    /// doubles) are read through the scratch and unpacked block by block, a tight loop: an
    /// iovec a block costs the kernel more than the copy, and finding a batch's runs, then
    /// its short runs again, more still. Longer ones are read in place, by `readv` into
    /// their runs (see `gather.rs`).
    ///
    /// # Safety
    /// `blocks` must have been made in this process, its block list alive and the `len`
    /// bytes' blocks from `at` (a position of `blocks`) writable and not otherwise accessed
    /// for the call, `scratch` apart from them.
    unsafe fn read_scattered(
        sock: &mut TcpStream,
        peer: Rank,
        blocks: &Blocks,
        at: &mut Position,
        len: usize,
        scratch: &mut [u8],
    ) -> Result<Option<usize>, PmlError> {
        if blocks.mean_block() >= SHORT_RUN {
            // SAFETY: this function's contract.
            return unsafe { Self::read_batches(sock, peer, blocks, at, len, scratch) };
        }
        // Each scratchful unpacked from where the last ended.
        let mut landed = 0;
        loop {
            let want = (len - landed).min(scratch.len());
            let Some(got) = read_some(sock, peer, &mut scratch[..want])? else {
                return Ok((landed > 0).then_some(landed));
            };
            // SAFETY: the blocks are writable, apart from the scratch (this function's
            // contract), and the `got` bytes from `at` lie within the `len`.
            *at = unsafe { blocks.unpack_at(*at, scratch.as_ptr(), got) };
            landed += got;
            if got < want || landed == len {
                return Ok(Some(landed));
            }
        }
    }

    /// [`read_scattered`](Self::read_scattered) by `readv` into the range's runs, in
    /// batches of at most `IOV_MAX` iovecs, runs shorter than `SHORT_RUN` read into the
    /// scratch and copied out once the read returned.
    ///
    /// # Safety
    /// As for `read_scattered`.
    unsafe fn read_batches(
        sock: &TcpStream,
        peer: Rank,
        blocks: &Blocks,
        at: &mut Position,
        len: usize,
        scratch: &mut [u8],
    ) -> Result<Option<usize>, PmlError> {
        // SAFETY: this function's contract.
        let list = unsafe { blocks.local_list() };
        let mut iov: IovecRoom = [MaybeUninit::uninit(); IOV_MAX];
        // No more than the socket holds (or one byte, to learn of an empty socket or its
        // end): building a batch walks its runs, in vain past what arrived.
        let len = Self::bytes_ready(sock).max(1).min(len);
        // The runs are found once; each batch takes up where the one before stopped.
        let mut runs = blocks.runs_at(list, *at, len).peekable();
        let mut landed = 0;
        loop {
            let mut batch = Batch::new(&mut iov, scratch);
            batch.reserve_runs(&mut runs);
            let built = batch.bytes;
            // SAFETY: the iovecs point into the blocks (writable: this function's contract)
            // and the scratch.
            let got = unsafe { Self::readv(sock, batch.iovecs()) }
                .map_err(|e| lost_receiving(peer, e))?;
            let Some(got) = got else {
                return Ok((landed > 0).then_some(landed));
            };
            // The batch's runs again, from its start: the short ones wait in the scratch.
            let batch_runs = blocks.runs_at(list, *at, built);
            // SAFETY: the runs lie in the blocks, writable and apart from the scratch (this
            // function's contract).
            unsafe { scatter_short_runs(batch_runs, scratch, got) };
            *at = blocks.advance(list, *at, got);
            landed += got;
            if got < built || landed == len {
                return Ok(Some(landed));
            }
        }
    }

    /// How many bytes the socket holds to read (0 where it cannot say).
    fn bytes_ready(sock: &TcpStream) -> usize {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int, into `n`, alive for the call.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::FIONREAD, &mut n) };
        if rc == 0 {
            n.max(0) as usize
        } else {
            0
        }
    }

    /// One `readv` into `iov` (retried when interrupted): how many bytes it read (0 at end
    /// of stream), `None` when the socket has nothing.
    ///
    /// # Safety
    /// Every iovec must describe memory writable for its length, not otherwise accessed
    /// during the call.
    unsafe fn readv(sock: &TcpStream, iov: &mut [libc::iovec]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: the iovecs describe writable memory (this function's contract), at most
            // `IOV_MAX` of them.
            let n =
                unsafe { libc::readv(sock.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
            if n >= 0 {
                return Ok(Some(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(None),
                _ => return Err(e),
            }
        }
    }

    /// Says goodbye and stops sending; the peer's remaining bytes are read by `drain`.
    pub fn say_goodbye(&mut self) -> io::Result<()> {
        if self.sent_of_frame != 0 {
            return Err(io::Error::other("a frame is half sent"));
        }
        self.sock.set_nonblocking(false)?;
        self.sock.set_write_timeout(Some(Duration::from_secs(10)))?;
        self.sock.write_all(&GOODBYE)?;
        self.sock.shutdown(Shutdown::Write)
    }

    /// Reads until the peer closes too, so that closing never resets a connection whose last
    /// frames the peer has not read yet (a reset may discard them).
    pub fn drain(&mut self, limit: Duration) -> io::Result<()> {
        self.sock.set_nonblocking(false)?;
        self.sock.set_read_timeout(Some(limit))?;
        let mut sink = [0u8; 64 << 10];
        while self.sock.read(&mut sink)? > 0 {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::pack;
    use crate::transport::scratch::SCRATCH_LEN;
    use std::net::TcpListener;

    /// A connected loopback pair `(tx, rx)`, both non-blocking, `rx` accepted from a listener
    /// whose receive buffer was set to `rcvbuf` bytes where given.
    fn loopback_pair(rcvbuf: Option<usize>) -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        if let Some(bytes) = rcvbuf {
            set_buffer(listener.as_raw_fd(), libc::SO_RCVBUF, bytes);
        }
        let tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rx, _) = listener.accept().unwrap();
        tx.set_nonblocking(true).unwrap();
        rx.set_nonblocking(true).unwrap();
        (tx, rx)
    }

    /// Sets the socket buffer `option` (`SO_SNDBUF`, `SO_RCVBUF`) of `fd` to `bytes`; returns
    /// what the kernel made of it (doubled, capped by its maximum).
    fn set_buffer(fd: libc::c_int, option: libc::c_int, bytes: usize) -> usize {
        let set = bytes as libc::c_int;
        let int_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: an int option of a socket this test owns, read from a live int.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&set as *const libc::c_int).cast(),
                int_len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        let (mut got, mut len): (libc::c_int, libc::socklen_t) = (0, int_len);
        // SAFETY: as above, written into a live int whose length `len` holds.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&mut got as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        got as usize
    }

    /// A connected pair whose sender's socket buffer is small, so that a frame goes out in
    /// many partial writes.
    fn small_buffered_pair() -> (Conn, TcpStream) {
        let (tx, rx) = loopback_pair(None);
        set_buffer(tx.as_raw_fd(), libc::SO_SNDBUF, 16 << 10);
        tx.set_nodelay(true).unwrap();
        (Conn::new(tx, 1 << 16), rx)
    }

    /// Reads what `rx` has into `out`, without waiting.
    fn read_available(rx: &mut TcpStream, out: &mut Vec<u8>) {
        let mut buf = [0u8; 64 << 10];
        loop {
            match rx.read(&mut buf) {
                Ok(0) => panic!("the sender closed"),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Places every frame's payload, after an 8-byte header, in the blocks `blocks`
    /// describes, and records what landed.
    struct ScatterSink {
        blocks: Blocks,
        landed: Vec<(u64, usize)>,
    }

    const SCATTER_HEADER: usize = 8;

    // SAFETY: `blocks` is made by each test from its own live target and block list, which
    // outlive the connection's reads, and nothing else touches the target meanwhile.
    unsafe impl Sink for ScatterSink {
        const PLACEMENT_HEAD: usize = SCATTER_HEADER;

        fn frame(&mut self, _peer: Rank, frame: &[u8]) -> Result<(), PmlError> {
            panic!("a {}-byte frame staged", frame.len())
        }
        fn placement(
            &mut self,
            _peer: Rank,
            head: &[u8],
            len: usize,
        ) -> Result<Placement<'_>, PmlError> {
            if head.len() < SCATTER_HEADER {
                return Ok(Placement::NeedMore);
            }
            Ok(Placement::Scattered {
                header_len: SCATTER_HEADER,
                blocks: &self.blocks,
                range: PackedRange {
                    start: 0,
                    len: len - SCATTER_HEADER,
                },
                token: 7,
            })
        }
        fn data_landed(&mut self, _peer: Rank, token: u64, len: usize) -> Result<(), PmlError> {
            self.landed.push((token, len));
            Ok(())
        }
        fn read_done(&mut self, token: u64, _: Result<(), String>) -> Result<(), PmlError> {
            panic!("read {token} done over TCP")
        }
    }

    /// A frame scattered into short blocks and long ones, past `IOV_MAX` runs, lands as a
    /// serial unpack, the gaps and the bytes past the buffer untouched, however the stream is
    /// cut: in the length prefix, in the header, in the payload staged with the head, mid a
    /// short block, at and mid a long run, at the end of a full batch of iovecs and just past
    /// it, and after more than a batch (one read going on to a second batch, checked where
    /// the kernel allows a receive buffer that holds the frame). Both ways a frame is
    /// scattered: blocks short on average (7, 5 and 256 bytes: read through the scratch and
    /// unpacked) and long (7, 5 and 1000: `readv` into the runs, the short ones through the
    /// scratch).
    #[test]
    fn scattered_frames_resume_where_a_read_stopped() {
        for long in [SHORT_RUN, 1000] {
            scattered_frame_resumes(long);
        }
    }

    /// Per element: 7 and 5 bytes (one scratch piece in a batch), then `long` at offset 20:
    /// two iovecs an element in a batch, so a batch of `IOV_MAX` ends after 512 elements.
    fn short_short_long(long: usize) -> [Block; 3] {
        [
            Block { offset: 0, len: 7 },
            Block { offset: 10, len: 5 },
            Block {
                offset: 20,
                len: long,
            },
        ]
    }

    fn scattered_frame_resumes(long: usize) {
        let list = short_short_long(long);
        let (extent, count) = (20 + long + 9, 1200);
        let element_len = 12 + long;
        let poison = 0xEE;
        let guard = 0xA5;
        let span = extent * count;
        let mut target = vec![poison; span + 64];
        target[span..].fill(guard);
        let blocks = Blocks::new(target.as_mut_ptr(), count, extent, &list).unwrap();
        let payload: Vec<u8> = (0..blocks.len()).map(|i| (i % 251) as u8).collect();
        let mut expected = target.clone();
        let mut at = 0;
        for el in 0..count {
            for b in &list {
                let place = el * extent + b.offset;
                expected[place..place + b.len].copy_from_slice(&payload[at..at + b.len]);
                at += b.len;
            }
        }
        let header = [3u8; SCATTER_HEADER];
        let mut frame = ((SCATTER_HEADER + payload.len()) as u32)
            .to_le_bytes()
            .to_vec();
        frame.extend_from_slice(&header);
        frame.extend_from_slice(&payload);
        let payload_at = PREFIX_LEN + SCATTER_HEADER;
        let batch_end = payload_at + IOV_MAX / 2 * element_len;
        let cuts = [
            2,
            PREFIX_LEN + 5,
            payload_at + 3,
            // Mid a scratch piece, in its 5-byte block.
            payload_at + 40 * element_len + 9,
            // At a long run, then mid one.
            payload_at + 100 * element_len + 12,
            payload_at + 200 * element_len + 12 + 100,
            batch_end,
            batch_end + 3,
            // More than a batch (688 elements) in one go.
            frame.len() - 1,
            frame.len(),
        ];
        // Buffers that hold the whole frame, so that a write is read whole by the next
        // receive: past a full batch of `IOV_MAX` where the kernel allows them.
        let (mut tx, rx) = loopback_pair(Some(4 * frame.len()));
        set_buffer(tx.as_raw_fd(), libc::SO_SNDBUF, 4 * frame.len());
        let rcvbuf = set_buffer(rx.as_raw_fd(), libc::SO_RCVBUF, 4 * frame.len());
        let mut conn = Conn::new(rx, 1 << 16);
        let mut sink = ScatterSink {
            blocks,
            landed: Vec::new(),
        };
        let mut scratch = Box::default();
        let mut written = 0;
        // The most of the payload one receive read in place.
        let mut largest_step = 0;
        for cut in cuts {
            // Until the connection has read all up to the cut (the socket's buffers may take
            // it in several writes, and loopback hand it over in several reads).
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                match tx.write(&frame[written..cut]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
                let filled_before = conn.direct.as_ref().map(|d| d.filled);
                let (delivered, state) = conn.receive(0, &mut sink, &mut scratch).unwrap();
                assert_eq!(state, Received::Open);
                let read = match &conn.direct {
                    Some(d) => payload_at + d.filled,
                    None if delivered > 0 => frame.len(),
                    None => conn.end - conn.start,
                };
                if let Some(before) = filled_before {
                    largest_step = largest_step.max(read - payload_at - before);
                }
                if read == cut {
                    break;
                }
                assert!(read <= written, "read {read} of {written} bytes");
                assert!(
                    std::time::Instant::now() < deadline,
                    "stuck at {read} of {cut}"
                );
            }
        }
        assert_eq!(sink.landed, vec![(7, payload.len())]);
        // One receive reads in place by one `read_scattered`, which reads no more than one
        // batch's bytes unless it went on to a second batch.
        let batch_bytes = IOV_MAX / 2 * element_len;
        if blocks.mean_block() < SHORT_RUN {
            // Read through the scratch, in no batches.
        } else if rcvbuf >= 2 * frame.len() {
            assert!(
                largest_step > batch_bytes,
                "blocks of {long}: no receive read past one batch ({largest_step} bytes at most, \
                 a batch is {batch_bytes})"
            );
        } else {
            eprintln!(
                "blocks of {long}: not checking that a read went on to a second batch: the \
                 kernel allowed a {rcvbuf}-byte receive buffer, less than twice the {}-byte \
                 frame (net.core.rmem_max)",
                frame.len()
            );
        }
        if let Some(i) = (0..target.len()).find(|&i| target[i] != expected[i]) {
            panic!(
                "blocks of {long}: byte {i} of {span} is {:#x}, not {:#x} (element {}, offset {})",
                target[i],
                expected[i],
                i / extent,
                i % extent
            );
        }
    }

    /// A DATA frame whose stream is cut inside its header (a sender's partial write) lands
    /// in its receive once the header is whole, with the protocol core as the sink: the core
    /// once took such a head for a frame to stage, and the connection refused the frame as
    /// longer than any it stages (the threads stress test over TCP, rarely, when loaded).
    #[test]
    fn a_data_frame_cut_in_its_header_lands_in_its_receive() {
        use crate::protocol::{
            Completion, Core, CoreConfig, Payload, PeerCaps, SendArgs, SendMode, Transmit,
        };
        use crate::wire::{RemoteKey, DATA_HEADER_LEN, MAX_HEADER_LEN};
        use crate::{SourceSel, TagSel};

        fn frame_of(t: &Transmit<'_>) -> Vec<u8> {
            let Payload::Bytes(payload) = t.payload else {
                panic!("a contiguous send's frame gathers blocks");
            };
            [t.header(), payload].concat()
        }
        let eager = 4096;
        let caps = PeerCaps {
            eager_limit: eager,
            max_frame: 1 << 20,
            remote_read: false,
        };
        let mut cores: [Core<Vec<u8>, Vec<u8>>; 2] = [
            Core::new(2, CoreConfig::default()),
            Core::new(2, CoreConfig::default()),
        ];
        cores[0].set_peer(1, caps);
        cores[1].set_peer(0, caps);
        let data: Vec<u8> = (0..64 << 10).map(|i| (i % 251) as u8).collect();
        let recv = cores[1]
            .post_recv(0, SourceSel::Any, TagSel::Tag(5), vec![0; data.len()])
            .unwrap();
        cores[0]
            .post_send(SendArgs {
                context: 0,
                source: 0,
                peer: 1,
                tag: 5,
                mode: SendMode::Standard,
                buf: data.clone(),
                remote: RemoteKey { addr: 0, key: 0 },
                eager_limit: None,
            })
            .unwrap();
        // The RTS to rank 1 and its GET back, carried by hand.
        for (from, to) in [(0, 1), (1, 0)] {
            let frame = frame_of(&cores[from].next_transmit(to as Rank).unwrap());
            cores[from].transmitted(to as Rank);
            cores[to].on_frame(from as Rank, &frame).unwrap();
        }
        let data_frame = frame_of(&cores[0].next_transmit(1).unwrap());
        assert_eq!(data_frame.len(), DATA_HEADER_LEN + data.len());
        let mut wire = (data_frame.len() as u32).to_le_bytes().to_vec();
        wire.extend_from_slice(&data_frame);
        let (mut tx, rx) = loopback_pair(None);
        let mut conn = Conn::new(rx, eager + MAX_HEADER_LEN);
        let mut scratch = Box::default();
        let cut = PREFIX_LEN + 10;
        let mut written = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        for upto in [cut, wire.len()] {
            loop {
                match tx.write(&wire[written..upto]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
                let (_, state) = conn
                    .receive(0, &mut cores[1], &mut scratch)
                    .unwrap_or_else(|e| panic!("the stream cut at byte {cut}: {e}"));
                assert_eq!(state, Received::Open);
                let read = match &conn.direct {
                    Some(d) => PREFIX_LEN + DATA_HEADER_LEN + d.filled,
                    None if cores[1].is_complete(recv).unwrap() => wire.len(),
                    None => conn.end - conn.start,
                };
                if read == upto {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "stuck at {read} of {upto}"
                );
            }
        }
        match cores[1].take_completion(recv).unwrap() {
            Some(Completion::Recv { buf, result }) => {
                result.unwrap();
                assert!(buf == data, "the received bytes differ from the sent");
            }
            other => panic!("the receive is not complete: {other:?}"),
        }
    }

    /// A peer that closes in the middle of a frame read in place is an error naming it,
    /// whichever way the frame is read (through the scratch, by `readv`): not a socket that
    /// level-triggered epoll reports readable forever, read as "nothing yet" each time.
    #[test]
    fn a_peer_closing_mid_frame_read_in_place_is_an_error() {
        for long in [SHORT_RUN, 1000] {
            let list = short_short_long(long);
            let (extent, count) = (20 + long, 100);
            let mut target = vec![0u8; extent * count];
            let blocks = Blocks::new(target.as_mut_ptr(), count, extent, &list).unwrap();
            let mut frame = ((SCATTER_HEADER + blocks.len()) as u32)
                .to_le_bytes()
                .to_vec();
            frame.extend_from_slice(&[3u8; SCATTER_HEADER]);
            frame.resize(PREFIX_LEN + SCATTER_HEADER + blocks.len() / 2, 9);
            let (mut tx, rx) = loopback_pair(None);
            tx.set_nonblocking(false).unwrap();
            tx.write_all(&frame).unwrap();
            drop(tx);
            let mut conn = Conn::new(rx, 1 << 16);
            let mut sink = ScatterSink {
                blocks,
                landed: Vec::new(),
            };
            let mut scratch = Box::default();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let error = loop {
                match conn.receive(3, &mut sink, &mut scratch) {
                    Ok(_) => assert!(
                        std::time::Instant::now() < deadline,
                        "blocks of {long}: still reading after the peer closed mid-frame"
                    ),
                    Err(e) => break e.to_string(),
                }
            };
            assert!(
                error.contains("rank 3") && error.contains("closed"),
                "blocks of {long}: {error}"
            );
            assert!(sink.landed.is_empty(), "{:?}", sink.landed);
        }
    }

    /// A frame gathered from short blocks (through the scratch) and long ones (in place),
    /// past `IOV_MAX` runs, comes out whole and in the order of a serial pack however the
    /// socket cuts its writes, and from wherever a write stopped: in the prefix, in the
    /// header, inside a scratch piece (mid short block) or inside a long run.
    #[test]
    fn gathered_frames_resume_where_a_write_stopped() {
        for long in [300, 1000] {
            gathered_frame_resumes(long);
        }
    }

    /// Bytes packed for a frame of short blocks and not yet taken by the socket go out as
    /// they were packed, not packed again: the send's blocks are rewritten after the first
    /// partial write (which a send may not do; here it shows which bytes were read when), and
    /// the frame still carries the old bytes up to the end of the pieces packed by then, the
    /// new ones after. The scratch comes back to the caller once the frame is out.
    #[test]
    fn packed_bytes_the_socket_did_not_take_are_not_packed_again() {
        let list = [Block { offset: 3, len: 8 }];
        let (extent, count) = (20, 8 * SCRATCH_LEN / 8 + 5);
        let mut source: Vec<u8> = (0..extent * count).map(|i| (i % 251) as u8).collect();
        let blocks = Blocks::new(source.as_ptr(), count, extent, &list).unwrap();
        let range = PackedRange {
            start: 0,
            len: blocks.len(),
        };
        let old = pack(&blocks);
        let header = [9u8; 13];
        let head = PREFIX_LEN + header.len();
        let (mut conn, mut rx) = small_buffered_pair();
        let mut scratch = Box::default();
        let mut got = Vec::new();
        // SAFETY: the description was made here from `source` and `list`, alive and unchanged
        // for the call; the range is its bytes; the scratch is the test's own.
        let first = unsafe { conn.send_blocks(&header, &blocks, range, &mut scratch) }.unwrap();
        assert_eq!(
            first,
            Sent::Part,
            "a {}-byte frame went out whole",
            range.len
        );
        assert!(
            scratch.is_empty(),
            "the connection kept the scratch of the unsent bytes"
        );
        let unsent = conn.unsent.as_ref().expect("packed bytes wait");
        let packed_by_then = unsent.resumed + (unsent.to - unsent.from);
        assert_eq!(unsent.resumed, conn.sent_of_frame - head);
        assert!(
            packed_by_then < range.len,
            "everything was packed by the first write"
        );
        for b in source.iter_mut() {
            *b = b.wrapping_add(1);
        }
        // SAFETY: as `blocks`, over the same, rewritten, memory.
        let blocks = Blocks::new(source.as_ptr(), count, extent, &list).unwrap();
        let new = pack(&blocks);
        loop {
            read_available(&mut rx, &mut got);
            // SAFETY: as above.
            let sent = unsafe { conn.send_blocks(&header, &blocks, range, &mut scratch) };
            conn.writable = true;
            if sent.unwrap() == Sent::Whole {
                break;
            }
        }
        rx.set_nonblocking(false).unwrap();
        let mut rest = vec![0u8; head + range.len - got.len()];
        rx.read_exact(&mut rest).unwrap();
        got.extend_from_slice(&rest);
        let payload = &got[head..];
        let cut = packed_by_then;
        let differs = |a: &[u8], b: &[u8]| a.iter().zip(b).position(|(x, y)| x != y);
        assert_eq!(
            differs(&payload[..cut], &old[..cut]),
            None,
            "the bytes packed first"
        );
        assert_eq!(
            differs(&payload[cut..], &new[cut..]),
            None,
            "the bytes packed after"
        );
        assert_eq!(scratch.len(), SCRATCH_LEN, "the scratch came back");
    }

    /// A frame of short blocks that finds the socket full takes none of its scratch: nothing
    /// of it is on the wire, so the next call may be another frame's, which could not use
    /// its packed bytes, and the transport keeps its scratch rather than make another.
    #[test]
    fn a_frame_the_full_socket_takes_nothing_of_leaves_the_scratch_to_the_caller() {
        let list = [Block { offset: 3, len: 8 }];
        let (extent, count) = (20, 1000);
        let source = vec![7u8; extent * count];
        let blocks = Blocks::new(source.as_ptr(), count, extent, &list).unwrap();
        let range = PackedRange {
            start: 0,
            len: blocks.len(),
        };
        let (mut conn, _rx) = small_buffered_pair();
        let filler = [0u8; 4096];
        loop {
            let mut iov = [libc::iovec {
                iov_base: filler.as_ptr() as *mut libc::c_void,
                iov_len: filler.len(),
            }];
            // SAFETY: the iovec describes `filler`, alive for the call.
            if unsafe { Conn::sendmsg(&conn.sock, &mut iov) }.unwrap() == 0 {
                break;
            }
        }
        let mut scratch = Box::default();
        // SAFETY: the description was made here from `source` and `list`, alive and unchanged
        // for the call; the range is its bytes; the scratch is the test's own.
        let sent = unsafe { conn.send_blocks(&[9u8; 13], &blocks, range, &mut scratch) };
        assert_eq!(sent.unwrap(), Sent::Nothing);
        assert_eq!(
            scratch.len(),
            SCRATCH_LEN,
            "the connection kept the scratch"
        );
        assert!(
            conn.unsent.is_none(),
            "bytes of no frame on the wire were kept"
        );
    }

    /// Blocks of 7, 5 and `long` bytes an element: 300 is short on average (the payload
    /// packed into the scratch a piece at a time), 1000 long (gathered in batches, the short
    /// blocks through the scratch, the long in place).
    fn gathered_frame_resumes(long: usize) {
        let list = short_short_long(long);
        let (extent, count) = (long + 40, 600);
        let source: Vec<u8> = (0..extent * count).map(|i| (i % 251) as u8).collect();
        let mut serial = Vec::new();
        for el in 0..count {
            for b in &list {
                serial.extend_from_slice(&source[el * extent + b.offset..][..b.len]);
            }
        }
        let blocks = Blocks::new(source.as_ptr(), count, extent, &list).unwrap();
        let header: Vec<u8> = (100..113).collect();
        let range = PackedRange {
            start: 0,
            len: blocks.len(),
        };
        let mut frame = ((header.len() + serial.len()) as u32)
            .to_le_bytes()
            .to_vec();
        frame.extend_from_slice(&header);
        frame.extend_from_slice(&serial);
        let payload_at = PREFIX_LEN + header.len();
        let element_len = 12 + long;
        let resume_points = [
            0,
            2,
            PREFIX_LEN + 6,
            payload_at,
            // Mid element 100's 7-byte block (inside a scratch piece, when gathered).
            payload_at + 100 * element_len + 3,
            // Mid element 300's 5-byte block.
            payload_at + 300 * element_len + 9,
            // Inside the long block.
            payload_at + 500 * element_len + 12 + 150,
            frame.len() - 1,
        ];
        let (mut conn, mut rx) = small_buffered_pair();
        let mut scratch = Box::default();
        for from in resume_points {
            conn.sent_of_frame = from;
            let mut got = Vec::new();
            let mut partial_writes = 0;
            loop {
                // SAFETY: the description was made here from `source` and `list`, alive; the
                // range is its bytes; the scratch is the test's own.
                let sent = unsafe { conn.send_blocks(&header, &blocks, range, &mut scratch) };
                read_available(&mut rx, &mut got);
                match sent.unwrap() {
                    Sent::Whole => break,
                    Sent::Part => partial_writes += 1,
                    Sent::Nothing => {}
                }
                conn.writable = true;
            }
            rx.set_nonblocking(false).unwrap();
            let mut rest = vec![0u8; frame.len() - from - got.len()];
            rx.read_exact(&mut rest).unwrap();
            rx.set_nonblocking(true).unwrap();
            got.extend_from_slice(&rest);
            assert!(
                got == frame[from..],
                "blocks of {long}, resumed at {from}: the bytes differ from a serial pack"
            );
            if from < payload_at {
                assert!(
                    partial_writes > 1,
                    "resumed at {from}: {partial_writes} partial writes"
                );
            }
        }
    }
}
