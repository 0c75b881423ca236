//! Communicators and the processes in them (rsmpi's `topology`).

use std::marker::PhantomData;
use std::rc::Rc;

use crate::environment::with_engine;
use crate::error::{or_fatal, Cause, Error};

/// A process's rank in a communicator.
pub type Rank = i32;

/// Context id of the world communicator's traffic.
const WORLD_CONTEXT: u32 = 0;

/// What every communicator holds: its context (messages in different contexts never match),
/// this process's rank and the communicator's size, and its group: the world rank of each
/// of its ranks.
#[derive(Debug)]
#[doc(hidden)]
pub struct CommData {
    pub(crate) context: u32,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    group: Vec<u32>,
    /// The engine lives in the initializing thread (`Threading::Funneled`).
    _not_send: PhantomData<*const ()>,
}

impl CommData {
    /// The world rank of `rank`, which the caller has checked is in range.
    pub(crate) fn world_rank(&self, rank: u32) -> u32 {
        self.group[rank as usize]
    }

    pub(crate) fn check_rank(&self, rank: Rank) -> Result<u32, Cause> {
        if rank >= 0 && (rank as u32) < self.size {
            Ok(rank as u32)
        } else {
            Err(Cause::RankOutOfRange {
                rank,
                size: self.size as Rank,
            })
        }
    }
}

/// A communicator: a group of processes and a context for their messages (`MPI_Comm`).
#[derive(Clone, Debug)]
pub struct SimpleCommunicator {
    data: Rc<CommData>,
}

impl SimpleCommunicator {
    pub(crate) fn world(rank: u32, size: u32) -> SimpleCommunicator {
        SimpleCommunicator {
            data: Rc::new(CommData {
                context: WORLD_CONTEXT,
                rank,
                size,
                group: (0..size).collect(),
                _not_send: PhantomData,
            }),
        }
    }
}

/// The operations of every communicator. Implemented by [`SimpleCommunicator`].
pub trait Communicator {
    #[doc(hidden)]
    fn data(&self) -> &CommData;

    /// This process's rank in the communicator.
    fn rank(&self) -> Rank {
        self.data().rank as Rank
    }

    /// Number of processes in the communicator.
    fn size(&self) -> Rank {
        self.data().size as Rank
    }

    /// The process at `rank`; a rank outside the communicator is a fatal error.
    fn process_at_rank(&self, rank: Rank) -> Process<'_> {
        or_fatal(self.try_process_at_rank(rank))
    }

    /// The process at `rank`, or an error naming the rank and the size.
    fn try_process_at_rank(&self, rank: Rank) -> Result<Process<'_>, Error> {
        let data = self.data();
        data.check_rank(rank)
            .map(|_| Process { comm: data, rank })
            .map_err(|cause| Error::new(format!("process_at_rank({rank})"), cause))
    }

    /// Any process of the communicator, as the source of a wildcard receive.
    fn any_process(&self) -> AnyProcess<'_> {
        AnyProcess { comm: self.data() }
    }

    /// This process.
    fn this_process(&self) -> Process<'_> {
        Process {
            comm: self.data(),
            rank: self.rank(),
        }
    }

    /// Waits until every process of the communicator has called `barrier`.
    fn barrier(&self) {
        or_fatal(self.try_barrier())
    }

    fn try_barrier(&self) -> Result<(), Error> {
        crate::collective::barrier(self.data()).map_err(|cause| Error::new("barrier", cause))
    }

    /// Ends the whole job with exit code `errorcode` (1 if 0).
    fn abort(&self, errorcode: i32) -> ! {
        let message = format!("rank {} called abort({errorcode})", self.rank());
        crate::environment::abort_job(errorcode, &message)
    }

    /// Lets progress happen without waiting for anything (useful while computing).
    fn progress(&self) {
        or_fatal(
            with_engine(|e| e.progress())
                .map(drop)
                .map_err(|c| Error::new("progress", c)),
        )
    }
}

impl Communicator for SimpleCommunicator {
    fn data(&self) -> &CommData {
        &self.data
    }
}

/// A process of a communicator: the destination of sends and the source of receives.
#[derive(Clone, Copy, Debug)]
pub struct Process<'a> {
    pub(crate) comm: &'a CommData,
    pub(crate) rank: Rank,
}

impl Process<'_> {
    /// The process's rank in its communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }
}

/// Every process of a communicator, as the source of a receive (`MPI_ANY_SOURCE`).
#[derive(Clone, Copy, Debug)]
pub struct AnyProcess<'a> {
    pub(crate) comm: &'a CommData,
}
