//! One established connection: frames in and out of a non-blocking stream socket.
//!
//! On the wire each frame is a little-endian `u32` length and then the frame; a length of zero
//! is the goodbye a finalizing rank sends before it closes, so that its end of file is not
//! taken for a crash. Small frames are read through a staging buffer. A frame the sink places
//! in memory of its own (a DATA frame's rendezvous data, in the receive buffer it belongs to;
//! see `Sink::placement`) is read straight there: once its head is in, the rest of the frame
//! is `read` into that memory, and after one such frame only the next head is read ahead, so
//! a stream of them is never staged.

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::gather::{Batch, IovecRoom, IOV_MAX, SHORT_RUN};
use super::{Sent, Sink};
use crate::blocks::{Blocks, PackedRange};
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
    ptr: *mut u8,
    len: usize,
    filled: usize,
    token: u64,
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
    pub writable: bool,
    goodbye_received: bool,
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
            Err(e) => {
                return Err(peer_error(
                    peer,
                    format!("connection lost while receiving: {e} (did it die?)"),
                ))
            }
        }
    }
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
            writable: true,
            goodbye_received: false,
        }
    }

    /// Writes what the socket takes of the frame `header` + `payload`, resuming after the part
    /// a previous call wrote. The caller passes the same frame until it went out whole.
    pub fn send(&mut self, header: &[u8], payload: &[u8]) -> io::Result<Sent> {
        let total = header.len() + payload.len();
        let prefix = frame_prefix(total)?;
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3];
        let mut n_iov = 0;
        for_each_unsent(&[&prefix, header, payload], self.sent_of_frame, |rest| {
            iov[n_iov] = libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            };
            n_iov += 1;
        });
        // SAFETY: the iovecs point into `prefix`, `header` and `payload`, alive for the call.
        self.sent_of_frame += unsafe { Self::sendmsg(&self.sock, &mut iov[..n_iov]) }?;
        Ok(self.sent(PREFIX_LEN + total))
    }

    /// [`send`](Self::send) of a frame whose payload is the packed bytes `range` of `blocks`,
    /// gathered from its blocks (see `gather.rs`) through `scratch` (of `SCRATCH_LEN` bytes,
    /// reused once `sendmsg` returns), in batches of at most `IOV_MAX` iovecs, as many as the
    /// socket takes.
    ///
    /// # Safety
    /// `blocks` must have been made in this process, its elements and block list alive and
    /// readable for the call, the range within its bytes, and `scratch` apart from them.
    pub unsafe fn send_blocks(
        &mut self,
        header: &[u8],
        blocks: &Blocks,
        range: PackedRange,
        scratch: &mut [u8],
    ) -> io::Result<Sent> {
        let total = header.len() + range.len;
        let prefix = frame_prefix(total)?;
        let whole = PREFIX_LEN + total;
        // A scratch that holds no short run would leave batches that take none of them.
        debug_assert!(
            scratch.len() >= SHORT_RUN,
            "a {}-byte scratch",
            scratch.len()
        );
        // SAFETY: this function's contract.
        let list = unsafe { blocks.local_list() };
        let mut iov: IovecRoom = [MaybeUninit::uninit(); IOV_MAX];
        let mut batch = Batch::new(&mut iov, scratch);
        let sent_of_payload = for_each_unsent(&[&prefix, header], self.sent_of_frame, |rest| {
            batch.point(rest);
        });
        // The runs are found once, from where this call resumes the frame (a walk of the
        // block list from its start); each batch takes up where the one before stopped.
        let mut runs = blocks
            .runs(
                list,
                range.start + sent_of_payload,
                range.len - sent_of_payload,
            )
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
        Ok(self.sent(whole))
    }

    /// How much of a frame of `whole` bytes is on its way, after the writes so far.
    fn sent(&mut self, whole: usize) -> Sent {
        if self.sent_of_frame == whole {
            self.sent_of_frame = 0;
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
    pub fn receive<S: Sink>(
        &mut self,
        peer: Rank,
        sink: &mut S,
    ) -> Result<(usize, Received), PmlError> {
        let mut frames = 0;
        loop {
            if let Some(d) = &mut self.direct {
                // SAFETY: `ptr` is the target `sink.placement` lent for `len` bytes; the
                // receive it belongs to cannot complete, and nothing else writes the buffer,
                // until `data_landed` accounts for all of them.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(d.ptr.add(d.filled), d.len - d.filled)
                };
                let want = dst.len();
                let Some(n) = read_some(&mut self.sock, peer, dst)? else {
                    return Ok((frames, Received::Open));
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
                        ptr: target.as_mut_ptr(),
                        len: target.len(),
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
    use crate::blocks::Block;
    use crate::transport::tcp::gather::SCRATCH_LEN;
    use std::net::TcpListener;

    /// A connected pair whose sender's socket buffer is small, so that a frame goes out in
    /// many partial writes.
    fn small_buffered_pair() -> (Conn, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rx, _) = listener.accept().unwrap();
        let small: libc::c_int = 16 << 10;
        // SAFETY: an int option of a socket this test owns, read from a live int.
        let rc = unsafe {
            libc::setsockopt(
                tx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&small as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        tx.set_nodelay(true).unwrap();
        tx.set_nonblocking(true).unwrap();
        rx.set_nonblocking(true).unwrap();
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

    /// A frame gathered from short blocks (through the scratch) and long ones (in place),
    /// past `IOV_MAX` runs, comes out whole and in the order of a serial pack however the
    /// socket cuts its writes, and from wherever a write stopped: in the prefix, in the
    /// header, inside a scratch piece (mid short block) or inside a long run.
    #[test]
    fn gathered_frames_resume_where_a_write_stopped() {
        // Per element: 7 and 5 bytes (gathered into one scratch piece), then 300 in place.
        let list = [
            Block { offset: 0, len: 7 },
            Block { offset: 10, len: 5 },
            Block {
                offset: 20,
                len: 300,
            },
        ];
        let (extent, count) = (340, 600);
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
        let element_len = 312;
        let resume_points = [
            0,
            2,
            PREFIX_LEN + 6,
            payload_at,
            // Inside the scratch piece of element 100, mid its 7-byte block.
            payload_at + 100 * element_len + 3,
            // Inside a scratch piece, mid its 5-byte block.
            payload_at + 300 * element_len + 9,
            // Inside a long run.
            payload_at + 500 * element_len + 12 + 150,
            frame.len() - 1,
        ];
        let (mut conn, mut rx) = small_buffered_pair();
        let mut scratch = vec![0u8; SCRATCH_LEN];
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
                "resumed at {from}: the bytes differ from a serial pack"
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
