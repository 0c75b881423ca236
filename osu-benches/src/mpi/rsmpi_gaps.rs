//! What the benchmarks call that mpirt has and rsmpi 0.8 lacks, written on rsmpi: waiting for
//! a vector of requests at once (rsmpi waits for many only through a `RequestCollection`,
//! whose scope must be opened before the requests), `MPI_Reduce_scatter` with a count per
//! rank (rsmpi has only the equal-parts `reduce_scatter_block_into`), and immediate receives
//! into raw memory (`MPI_Irecv` on a C buffer), which the bandwidth tests post a window of
//! into one buffer, as OSU does.

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

/// rsmpi's traits with mpirt's `reduce_scatter_into` and raw immediate receives.
pub mod traits {
    pub use super::{ImmediateReceiveRaw, ReduceScatterInto};
    pub use rsmpi::traits::*;
}

use std::mem::MaybeUninit;

use rsmpi::collective::SystemOperation;
use rsmpi::ffi;
use rsmpi::point_to_point::Source;
use rsmpi::request::{Request, Scope};
use rsmpi::topology::SimpleCommunicator;
use rsmpi::traits::*;
use rsmpi::{Count, Tag};

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

/// mpirt's `immediate_receive_into_raw_with_tag`, on rsmpi's sources.
pub trait ImmediateReceiveRaw: Source {
    /// Starts a receive of up to `count` elements of `T` from this source with tag `tag` into
    /// the memory at `ptr` (`MPI_Irecv`), with no borrow, so that several receives in flight
    /// may share one buffer.
    ///
    /// # Safety
    /// C's contract: `ptr` is valid for writes of `count` elements until the request
    /// completes, and the program does not touch that memory meanwhile (other receives from
    /// this call may write it too; it then holds one of the messages).
    unsafe fn immediate_receive_into_raw_with_tag<'a, S: Scope<'a>, T: Equivalence>(
        &self,
        scope: S,
        ptr: *mut T,
        count: usize,
        tag: Tag,
    ) -> Request<'a, [T], S> {
        let rank = self.as_communicator().rank();
        let Ok(count) = Count::try_from(count) else {
            panic!(
                "rank {rank}: immediate receive into a raw buffer: {count} elements exceed \
                 MPI's int count"
            );
        };
        let mut request = MaybeUninit::uninit();
        // SAFETY: the caller keeps `count` elements at `ptr` writable and otherwise untouched
        // until the request completes (this function's contract); the datatype is `T`'s own,
        // and the communicator a live handle.
        unsafe {
            ffi::MPI_Irecv(
                ptr.cast(),
                count,
                T::equivalent_datatype().as_raw(),
                self.source_rank(),
                tag,
                self.as_communicator().as_raw(),
                request.as_mut_ptr(),
            );
        }
        // SAFETY: MPI_Irecv returned (errors abort under MPI's default handler), so the
        // request is initialised and live; the request borrows no data of its own (the
        // static empty slice), which is why the caller's contract covers the buffer.
        unsafe { Request::from_raw(request.assume_init(), &[], scope) }
    }
}

impl<P: Source> ImmediateReceiveRaw for P {}
