//! What a tag operation hands UCX ([`Data`]): bytes, or a non-contiguous buffer
//! (`Pml::post_send_blocks`, `post_recv_blocks`) described in place, with no staging copy.
//!
//! A non-contiguous buffer goes as UCX's iov datatype (`ucp_dt_make_iov`), an entry per run
//! of bytes, where its blocks average at least `iov_min_block` bytes: UCX then gathers and
//! scatters the runs itself, and sends long runs from where they lie where a transport can
//! (TCP's zero-copy sends). Shorter blocks (a column of doubles: thousands of 8-byte runs)
//! go as UCX's generic datatype, as Open MPI's pml ucx moves derived datatypes: UCX calls
//! back to pack the blocks straight into its own buffers (an eager frame, a rendezvous
//! fragment) and to unpack from them, with mpirt's block loops (`Blocks::pack_range_into`,
//! which copies an 8-byte block as one load and store) rather than a `memcpy` an entry.
//! Either way each byte is copied once on each side, where the staging buffer added a
//! pack before UCX and an unpack after it. At rendezvous sizes that trades one bulk read for
//! fragments: UCX 1.13 (protocol v1) sends no address or key in the RTS of a non-contiguous
//! datatype, so the receiver cannot read it by CMA or RDMA READ and the data comes as
//! active-message fragments: 1.5-4x faster than the staged bulk read on UCX's shared memory
//! from 256 KiB in the halo exchange, slower over UCX's TCP from 4 to 128 KiB
//! (ARCHITECTURE.md). So `UcxPml` stages such short-block messages to and from ranks it
//! reaches over TCP below a size (`UcxConfig::tcp_stage_below`), and hands UCX bytes.

use std::ffi::c_void;
use std::{ptr, slice};

use super::ffi;
use super::status;
use crate::blocks::Blocks;
use crate::error::PmlError;

/// What a tag operation moves, as UCX takes it: `count` items of `datatype` at `buffer`.
pub struct Data {
    pub buffer: *mut c_void,
    pub count: usize,
    /// `None` for bytes (UCX's default datatype, `ucp_dt_make_contig(1)`).
    pub datatype: Option<ffi::ucp_datatype_t>,
    /// The bytes it carries, packed.
    pub len: usize,
    /// The iov entries `buffer` points at (`None` but for the iov datatype): UCX reads them
    /// until the operation completes, so whoever runs the operation keeps them that long.
    /// A boxed slice, two words and a null check, rather than a vector: every operation's
    /// record carries it (`UcxPml`'s `Op`), most of them contiguous.
    pub iov: Option<Box<[ffi::ucp_dt_iov_t]>>,
}

/// How a non-contiguous buffer goes to UCX, for the counts (`Counters::ucx_iov_sends` ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlace {
    Iov,
    Generic,
}

impl InPlace {
    /// An iov of its runs where the blocks of `blocks` average at least `iov_min_block`
    /// bytes (the mean of the blocks as listed, before adjacent ones merge into runs), else
    /// the generic datatype.
    pub fn of(blocks: &Blocks, iov_min_block: usize) -> InPlace {
        if blocks.mean_block() < iov_min_block {
            InPlace::Generic
        } else {
            InPlace::Iov
        }
    }
}

impl Data {
    /// `len` bytes at `buffer`.
    #[inline(always)]
    pub fn bytes(buffer: *const u8, len: usize) -> Data {
        Data {
            buffer: buffer.cast_mut().cast(),
            count: len,
            datatype: None,
            len,
            iov: None,
        }
    }

    /// The non-contiguous buffer `blocks` describes, as `how` says: an iov of its runs, or
    /// one item of the `generic` datatype, `blocks` itself, whose callbacks ([`Generic`])
    /// read through it.
    ///
    /// # Safety
    /// `blocks` must have been made in this process, its block list alive, and stay where it
    /// is, unchanged, until the operation completes (UCX's callbacks read it).
    pub unsafe fn of_blocks(blocks: &Blocks, generic: &Generic, how: InPlace) -> Data {
        let len = blocks.len();
        if how == InPlace::Generic {
            return Data {
                buffer: ptr::from_ref(blocks).cast_mut().cast(),
                count: 1,
                datatype: Some(generic.0),
                len,
                iov: None,
            };
        }
        // SAFETY: made in this process, its list alive (this function's contract).
        let list = unsafe { blocks.local_list() };
        let iov: Box<[ffi::ucp_dt_iov_t]> = blocks
            .runs(list, 0, len)
            .map(|(address, n)| ffi::ucp_dt_iov_t {
                buffer: address as usize as *mut c_void,
                length: n as ffi::size_t,
            })
            .collect();
        Data {
            // The slice's heap memory, which stays put when the box moves.
            buffer: iov.as_ptr().cast_mut().cast(),
            count: iov.len(),
            datatype: Some(ffi::UCP_DATATYPE_IOV as ffi::ucp_datatype_t),
            len,
            iov: Some(iov),
        }
    }

    /// Names this data's datatype in `param`, unless it is bytes (UCX's default).
    #[inline(always)]
    pub fn describe_in(&self, param: &mut ffi::ucp_request_param_t) {
        if let Some(datatype) = self.datatype {
            param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_DATATYPE;
            param.datatype = datatype;
        }
    }
}

/// UCX's generic datatype whose items are [`Blocks`]: one per worker, made at start-up.
/// Dropping it destroys the datatype, so its owner must drop it after the worker whose
/// requests in flight name it (`UcxPml` declares it after its worker).
pub struct Generic(ffi::ucp_datatype_t);

impl Generic {
    pub fn new() -> Result<Generic, PmlError> {
        let ops = ffi::ucp_generic_dt_ops_t {
            start_pack: Some(start_pack),
            start_unpack: Some(start_unpack),
            packed_size: Some(packed_size),
            pack: Some(pack),
            unpack: Some(unpack),
            finish: Some(finish),
        };
        let mut datatype: ffi::ucp_datatype_t = 0;
        // SAFETY: `ops` is a complete table (UCX copies it), the context is unused (null),
        // and `datatype` is valid for the write.
        let status = unsafe { ffi::ucp_dt_create_generic(&ops, ptr::null_mut(), &mut datatype) };
        status::check("ucp_dt_create_generic", status)?;
        Ok(Generic(datatype))
    }
}

impl Drop for Generic {
    fn drop(&mut self) {
        // SAFETY: made by ucp_dt_create_generic and destroyed once, here; no request names
        // it any more, as its owner drops it after the worker (see the type's doc).
        unsafe { ffi::ucp_dt_destroy(self.0) };
    }
}

// The callbacks. UCX passes each operation's buffer (a `Blocks`, `Data::of_blocks`) to
// `start_pack` or `start_unpack` and the state they return to the others: the state is that
// `Blocks`, which `of_blocks`' caller keeps alive and unchanged until the operation completes,
// made in this process with its list and elements alive (its contract).

unsafe extern "C" fn start_pack(
    _context: *mut c_void,
    buffer: *const c_void,
    _count: ffi::size_t,
) -> *mut c_void {
    buffer.cast_mut()
}

unsafe extern "C" fn start_unpack(
    _context: *mut c_void,
    buffer: *mut c_void,
    _count: ffi::size_t,
) -> *mut c_void {
    buffer
}

unsafe extern "C" fn packed_size(state: *mut c_void) -> ffi::size_t {
    // SAFETY: the state is a live `Blocks` (see above).
    let blocks = unsafe { &*state.cast::<Blocks>() };
    blocks.len() as ffi::size_t
}

/// Packs the bytes from `offset`, at most `max_length` of them, at `dest`.
unsafe extern "C" fn pack(
    state: *mut c_void,
    offset: ffi::size_t,
    dest: *mut c_void,
    max_length: ffi::size_t,
) -> ffi::size_t {
    // SAFETY: the state is a live `Blocks` (see above).
    let blocks = unsafe { &*state.cast::<Blocks>() };
    let offset = offset as usize;
    let n = (max_length as usize).min(blocks.len().saturating_sub(offset));
    if n == 0 {
        // Nothing left (or an offset past the end): `pack_range_into` wants a range inside.
        return 0;
    }
    // SAFETY: `offset + n` is within the packed bytes; UCX's `dest` holds `max_length`
    // bytes, at least `n`, of its own memory, apart from the send's elements.
    unsafe { blocks.pack_range_into(offset, n, dest.cast()) };
    n as ffi::size_t
}

/// Unpacks the `length` bytes at `src` as the packed bytes from `offset` into the blocks;
/// bytes past the blocks' are refused (UCX checks a message's length against
/// `packed_size` first).
unsafe extern "C" fn unpack(
    state: *mut c_void,
    offset: ffi::size_t,
    src: *const c_void,
    length: ffi::size_t,
) -> ffi::ucs_status_t {
    // SAFETY: the state is a live `Blocks`, a receive's (see above): its blocks are lent
    // for writes until it completes.
    let blocks = unsafe { &*state.cast::<Blocks>() };
    let (offset, length) = (offset as usize, length as usize);
    if offset
        .checked_add(length)
        .is_none_or(|end| end > blocks.len())
    {
        return ffi::UCS_ERR_MESSAGE_TRUNCATED;
    }
    if length == 0 {
        return ffi::UCS_OK;
    }
    // SAFETY: UCX's `src` holds `length` readable bytes of its own memory, apart from the
    // receive's blocks; the range lies within the packed bytes (checked above).
    unsafe { blocks.unpack_range_from(offset, slice::from_raw_parts(src.cast(), length)) };
    ffi::UCS_OK
}

unsafe extern "C" fn finish(_state: *mut c_void) {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::Block;

    #[test]
    fn long_blocks_go_as_an_iov_of_runs_and_short_ones_by_the_callbacks() {
        let generic = Generic::new().unwrap();
        let buf = vec![0u8; 64 << 10];
        let list = [Block {
            offset: 16,
            len: 8 << 10,
        }];
        let blocks = Blocks::new(buf.as_ptr(), 4, 16 << 10, &list).unwrap();
        assert_eq!(InPlace::of(&blocks, 8 << 10), InPlace::Iov);
        // SAFETY: the description, its list and buffer outlive `data`, which UCX never sees.
        let data = unsafe { Data::of_blocks(&blocks, &generic, InPlace::Iov) };
        let iov = data.iov.as_deref().unwrap();
        assert_eq!((data.count, data.len, iov.len()), (4, 32 << 10, 4));
        assert_eq!(data.buffer, iov.as_ptr().cast_mut().cast());
        let second = buf.as_ptr() as usize + (16 << 10) + 16;
        assert_eq!(iov[1].buffer as usize, second);
        assert_eq!(iov[1].length as usize, 8 << 10);
        assert_eq!(InPlace::of(&blocks, (8 << 10) + 1), InPlace::Generic);
        // SAFETY: as above.
        let data = unsafe { Data::of_blocks(&blocks, &generic, InPlace::Generic) };
        assert_eq!((data.count, data.len), (1, 32 << 10));
        assert!(data.iov.is_none());
        assert_eq!(data.buffer.cast_const(), ptr::from_ref(&blocks).cast());
    }

    #[test]
    fn the_callbacks_pack_and_unpack_any_range_and_refuse_bytes_past_the_blocks() {
        let source: Vec<u8> = (0..=255).collect();
        let list = [Block { offset: 1, len: 3 }, Block { offset: 6, len: 2 }];
        let send = Blocks::new(source.as_ptr(), 10, 16, &list).unwrap();
        let state = ptr::from_ref(&send).cast_mut().cast();
        // SAFETY: `state` is a live description of this process, as UCX would pass it.
        unsafe {
            assert_eq!(packed_size(state), 50);
            let mut packed = vec![0u8; 60];
            // Two pieces, the first cut inside a block, and the second asked for more
            // than is left.
            assert_eq!(pack(state, 0, packed.as_mut_ptr().cast(), 7), 7);
            assert_eq!(pack(state, 7, packed[7..].as_mut_ptr().cast(), 53), 43);
            // Past the end (UCX asks for nothing there, but a range outside must not pack).
            assert_eq!(pack(state, 60, packed.as_mut_ptr().cast(), 8), 0);
            let expected: Vec<u8> = (0..10u8)
                .flat_map(|e| [1, 2, 3, 6, 7].map(|b| e * 16 + b))
                .collect();
            assert_eq!(packed[..50], expected[..]);

            let mut into = vec![0xeeu8; 160];
            let receive = Blocks::new(into.as_mut_ptr(), 10, 16, &list).unwrap();
            let state = ptr::from_ref(&receive).cast_mut().cast();
            assert_eq!(
                unpack(state, 20, packed[20..].as_ptr().cast(), 30),
                ffi::UCS_OK
            );
            assert_eq!(unpack(state, 0, packed.as_ptr().cast(), 20), ffi::UCS_OK);
            assert_eq!(
                unpack(state, 45, packed.as_ptr().cast(), 6),
                ffi::UCS_ERR_MESSAGE_TRUNCATED
            );
            for (i, &b) in into.iter().enumerate() {
                let inside = [1, 2, 3, 6, 7].contains(&(i % 16));
                assert_eq!(b, if inside { source[i] } else { 0xee }, "byte {i}");
            }
        }
    }
}
