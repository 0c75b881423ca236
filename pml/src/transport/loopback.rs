//! Frames a rank sends itself: queued in this process, and reads are plain copies.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{Caps, Job, Peer, Reading, Sent, Sink, Transport};
use crate::bulk_copy;
use crate::envelope::Rank;
use crate::error::PmlError;
use crate::pml_api::EngineError;
use crate::wire::RemoteKey;

pub struct Loopback {
    rank: Rank,
    eager_limit: usize,
    frames: VecDeque<Vec<u8>>,
}

impl Loopback {
    /// Eager up to the shared-memory limit: a copy within one process costs what one
    /// through a ring does.
    pub fn open(job: &Job) -> Loopback {
        Loopback {
            rank: job.rank,
            eager_limit: job.config.shm_eager_limit,
            frames: VecDeque::new(),
        }
    }
}

impl Transport for Loopback {
    fn caps(&self) -> Caps {
        Caps {
            eager_limit: self.eager_limit,
            max_frame: usize::MAX / 2,
            remote_read: true,
            remote_write: false,
            rma_by_default: false,
            atomics: false,
            sends_complete_on_return: false,
            max_pieces: 2,
        }
    }

    fn try_send(&mut self, _peer: Peer, header: &[u8], payload: &[u8]) -> Result<Sent, PmlError> {
        let mut frame = Vec::with_capacity(header.len() + payload.len());
        frame.extend_from_slice(header);
        frame.extend_from_slice(payload);
        self.frames.push_back(frame);
        Ok(Sent::Whole)
    }

    fn poll(&mut self, sink: &mut impl Sink) -> Result<usize, PmlError> {
        let mut n = 0;
        while let Some(frame) = self.frames.pop_front() {
            sink.frame(self.rank, &frame)?;
            n += 1;
        }
        Ok(n)
    }

    fn has_work(&self) -> bool {
        !self.frames.is_empty()
    }

    fn read(
        &mut self,
        _peer: Rank,
        key: RemoteKey,
        target: &mut [u8],
        _token: u64,
    ) -> Result<Reading, PmlError> {
        // SAFETY: the RTS came from this process, so `key.addr` is the buffer of one of our
        // own sends, valid for `target.len()` bytes until its FIN, which follows this copy;
        // a send buffer and a receive buffer never overlap (the caller borrows one shared and
        // the other exclusively, or for a raw receive promised that nothing else, a send
        // included, uses its memory until it completes).
        unsafe {
            bulk_copy::copy_nonoverlapping(key.addr as *const u8, target.as_mut_ptr(), target.len())
        };
        Ok(Reading::Finished(Ok(())))
    }

    /// Nothing but this rank sends here, and it is not sending while it sleeps.
    fn sleep(&mut self, _timeout: Duration) -> Result<(), PmlError> {
        std::thread::yield_now();
        Ok(())
    }

    fn wake_fd(&mut self) -> Result<Option<RawFd>, EngineError> {
        Ok(None)
    }

    fn before_wait(&mut self) -> Result<bool, PmlError> {
        Ok(!self.frames.is_empty())
    }

    fn after_wait(&mut self) {}

    fn describe(&self, _peers: usize) -> String {
        String::new()
    }
}
