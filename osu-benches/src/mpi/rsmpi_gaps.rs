//! What the benchmarks call that mpirt has and rsmpi 0.8 lacks, written on rsmpi: waiting for
//! a vector of requests at once (rsmpi waits for many only through a `RequestCollection`,
//! whose scope must be opened before the requests) and `MPI_Reduce_scatter` with a count per
//! rank (rsmpi has only the equal-parts `reduce_scatter_block_into`).

/// rsmpi's `request` module with mpirt's `wait_all`.
pub mod request {
    pub use rsmpi::request::*;

    /// Waits for all of `requests` with one `MPI_Waitall`, as OSU does, and empties it.
    pub fn wait_all<'a, D: ?Sized, S: Scope<'a>>(requests: &mut Vec<Request<'a, D, S>>) {
        multiple_scope(requests.len(), |_, collection| {
            for request in requests.drain(..) {
                collection.add(request);
            }
            collection.wait_all(&mut Vec::new());
        });
    }
}

/// rsmpi's traits with mpirt's `reduce_scatter_into`.
pub mod traits {
    pub use super::ReduceScatterInto;
    pub use rsmpi::traits::*;
}

use rsmpi::collective::SystemOperation;
use rsmpi::ffi;
use rsmpi::topology::SimpleCommunicator;
use rsmpi::traits::*;
use rsmpi::Count;

/// mpirt's `reduce_scatter_into`, on rsmpi's communicator.
pub trait ReduceScatterInto {
    /// Part r of the reduction by `op` of every rank's `send` lands in rank r's `recv`, the
    /// parts cut by `counts` (`MPI_Reduce_scatter`).
    fn reduce_scatter_into<T: Equivalence>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[Count],
        op: SystemOperation,
    );
}

impl ReduceScatterInto for SimpleCommunicator {
    fn reduce_scatter_into<T: Equivalence>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[Count],
        op: SystemOperation,
    ) {
        let rank = self.rank();
        let fail = |cause: String| -> ! { panic!("rank {rank}: reduce_scatter_into: {cause}") };
        let ranks = self.size() as usize;
        if counts.len() != ranks {
            fail(format!("{} counts for {ranks} ranks", counts.len()));
        }
        let mut total = 0;
        for &count in counts {
            match usize::try_from(count) {
                Ok(count) => total += count,
                Err(_) => fail(format!("negative count {count}")),
            }
        }
        if send.len() < total {
            fail(format!(
                "{} elements to send, the counts sum to {total}",
                send.len()
            ));
        }
        let own = counts[rank as usize] as usize;
        if recv.len() < own {
            fail(format!(
                "room for {} elements, {own} to receive",
                recv.len()
            ));
        }
        // SAFETY: MPI reads the counts' sum of elements of T's own datatype from `send` and
        // writes this rank's count of them into `recv`, both checked above to fit; `counts`
        // has one entry per rank; the operation and the communicator are live handles.
        unsafe {
            ffi::MPI_Reduce_scatter(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                counts.as_ptr(),
                T::equivalent_datatype().as_raw(),
                op.as_raw(),
                self.as_raw(),
            );
        }
    }
}
