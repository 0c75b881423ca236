//! Why a window call was refused: each misuse named, with the rank, displacement, length and
//! window size it involved.

use std::fmt;

use crate::Rank;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowFault {
    /// An operation reaches past the end of its target's window: nothing was read or written.
    OutOfWindow {
        target: Rank,
        /// In elements of the window's type.
        displacement: usize,
        /// In elements of the window's type.
        count: usize,
        /// The target window's length, in elements.
        size: usize,
    },
    /// A block of a target datatype reaches past the end of its target's window: nothing was
    /// read or written.
    BlockOutOfWindow {
        target: Rank,
        /// In elements of the window's type.
        displacement: usize,
        /// The block's bytes from the displacement, and its length in bytes.
        offset: usize,
        length: usize,
        /// The target window's length, in elements.
        size: usize,
    },
    /// The origin's and the target's type signatures differ (MPI requires them equal), or
    /// a target datatype's basic elements are not the window's elements.
    TypeSignature {
        /// The two sides, as "the origin and the target datatype".
        what: String,
        /// Each side's number of basic elements.
        counts: (usize, usize),
        /// The first basic element where they differ.
        at: usize,
    },
    /// An operation on a rank the epoch does not reach (a lock epoch's other ranks, ranks
    /// outside the group of `start`).
    NotInEpoch { target: Rank, epoch: String },
    /// A synchronisation MPI does not allow here (a fence inside a lock epoch, ...).
    Synchronisation(String),
    /// A type or kind of window the call cannot serve.
    Unsupported(String),
    /// A one-sided operation by the device (RDMA, or a PML's RMA) on rank `target` of the
    /// window's communicator failed; `why` is the PML's text, which names that rank by its
    /// world rank, `world`.
    OneSided {
        target: Rank,
        world: Rank,
        why: String,
    },
    /// The target refused the request; its reason (memory a dynamic window has not
    /// attached, a displacement that is not whole elements, ...).
    Refused { target: Rank, why: String },
}

impl fmt::Display for WindowFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowFault::OutOfWindow {
                target,
                displacement,
                count,
                size,
            } => write!(
                f,
                "{count} element(s) at displacement {displacement} reach past the end of rank \
                 {target}'s window, which holds {size} element(s); nothing was moved"
            ),
            WindowFault::BlockOutOfWindow {
                target,
                displacement,
                offset,
                length,
                size,
            } => write!(
                f,
                "the target datatype's block of {length} byte(s) at byte {offset} from \
                 displacement {displacement} reaches past the end of rank {target}'s window, \
                 which holds {size} element(s); nothing was moved"
            ),
            WindowFault::TypeSignature { what, counts, at } => write!(
                f,
                "{what} ({} and {} basic elements) differ in type signature at basic element \
                 {at}; they must be equal",
                counts.0, counts.1
            ),
            WindowFault::NotInEpoch { target, epoch } => write!(
                f,
                "rank {target} is not a target of this access epoch ({epoch})"
            ),
            WindowFault::Synchronisation(why) => write!(f, "{why}"),
            WindowFault::Unsupported(why) => write!(f, "{why}"),
            WindowFault::OneSided { target, world, why } => write!(
                f,
                "{why} (world rank {world} is rank {target} of the window's communicator)"
            ),
            WindowFault::Refused { target, why } => write!(f, "rank {target} refused: {why}"),
        }
    }
}
