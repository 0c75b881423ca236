//! User datatypes, views, derived structs with padding, and pack/unpack, with real ranks under
//! rsrun (see `common`).
//!
//! Random layouts (vectors, indexed, structs, nested) are drawn by proptest from one fixed seed,
//! so every rank draws the same ones. Each is checked against a serial model of MPI's type map
//! written here, independent of mpirt's: the packed bytes a message carries, the bytes a
//! receive view writes, and the guard pattern left everywhere else.

use std::env;
use std::mem::offset_of;
use std::panic;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use mpirt::datatype::{
    DynBuffer, DynBufferMut, MutView, Partition, PartitionMut, UserDatatype, View,
};
use mpirt::topology::SimpleCommunicator;
use mpirt::traits::*;

// Shared with p2p.rs and collectives.rs, which use the rest of it.
#[allow(dead_code)]
mod common;

use common::{ok_job_with, RANK_MODE};

#[global_allocator]
static ALLOCATOR: mpirt::TrackingAllocator = mpirt::TrackingAllocator;

const EAGER: usize = 4096;
const GUARD: u8 = 0xA5;
const POISON: u8 = 0xEE;

/// A datatype, as the test draws it; its basic element is a `u32`.
#[derive(Clone, Debug)]
enum Spec {
    Basic,
    /// `count` blocks of `block` inner elements, one every `stride` (>= block).
    Vector {
        count: usize,
        block: usize,
        stride: usize,
        inner: Box<Spec>,
    },
    /// Blocks of (length, displacement) in inner elements, in increasing order from 0.
    Indexed {
        blocks: Vec<(usize, usize)>,
        inner: Box<Spec>,
    },
    /// Fields of (length, inner) one after another, `gap` bytes after each.
    Struct {
        fields: Vec<(usize, usize, Spec)>,
    },
}

/// The serial model: the offset of each data byte of one element, in packed order, and the
/// extent.
fn model(spec: &Spec) -> (Vec<usize>, usize) {
    match spec {
        Spec::Basic => ((0..4).collect(), 4),
        Spec::Vector {
            count,
            block,
            stride,
            inner,
        } => {
            let (bytes, extent) = model(inner);
            let mut all = Vec::new();
            for i in 0..*count {
                for j in 0..*block {
                    let base = (i * stride + j) * extent;
                    all.extend(bytes.iter().map(|b| base + b));
                }
            }
            (all, ((count - 1) * stride + block) * extent)
        }
        Spec::Indexed { blocks, inner } => {
            let (bytes, extent) = model(inner);
            let mut all = Vec::new();
            let mut end = 0;
            for (len, displacement) in blocks {
                for j in 0..*len {
                    let base = (displacement + j) * extent;
                    all.extend(bytes.iter().map(|b| base + b));
                }
                end = end.max((displacement + len) * extent);
            }
            (all, end)
        }
        Spec::Struct { fields } => {
            let mut all = Vec::new();
            let mut at = 0;
            for (len, gap, inner) in fields {
                let (bytes, extent) = model(inner);
                for j in 0..*len {
                    all.extend(bytes.iter().map(|b| at + j * extent + b));
                }
                at += len * extent + gap;
            }
            let end = all.iter().max().map_or(0, |m| m + 1);
            // MPI rounds a struct's extent up to its largest element's alignment: 4 (u32).
            (all, end.div_ceil(4) * 4)
        }
    }
}

/// The datatype mpirt builds for `spec`.
fn build(spec: &Spec) -> UserDatatype {
    match spec {
        Spec::Basic => UserDatatype::contiguous(1, &u32::equivalent_datatype()),
        Spec::Vector {
            count,
            block,
            stride,
            inner,
        } => UserDatatype::vector(*count as i32, *block as i32, *stride as i32, &build(inner)),
        Spec::Indexed { blocks, inner } => {
            let lengths: Vec<i32> = blocks.iter().map(|b| b.0 as i32).collect();
            let displacements: Vec<i32> = blocks.iter().map(|b| b.1 as i32).collect();
            UserDatatype::indexed(&lengths, &displacements, &build(inner))
        }
        Spec::Struct { fields } => {
            let mut displacements = Vec::new();
            let mut at = 0;
            let mut types = Vec::new();
            let mut lengths = Vec::new();
            for (len, gap, inner) in fields {
                displacements.push(at as mpirt::datatype::Address);
                at += len * model(inner).1 + gap;
                types.push(build(inner));
                lengths.push(*len as i32);
            }
            UserDatatype::structured(&lengths, &displacements, &types)
        }
    }
}

fn spec_strategy() -> impl Strategy<Value = Spec> {
    let leaf = Just(Spec::Basic);
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (1usize..4, 1usize..3, 0usize..3, inner.clone()).prop_map(
                |(count, block, extra, i)| {
                    Spec::Vector {
                        count,
                        block,
                        stride: block + extra,
                        inner: Box::new(i),
                    }
                }
            ),
            (
                prop::collection::vec((1usize..3, 0usize..3), 1..4),
                inner.clone()
            )
                .prop_map(|(pieces, i)| {
                    let mut at = 0;
                    let blocks = pieces
                        .into_iter()
                        .enumerate()
                        .map(|(k, (len, skip))| {
                            // The first block at 0, so the lower bound is 0.
                            let displacement = if k == 0 { 0 } else { at + skip };
                            at = displacement + len;
                            (len, displacement)
                        })
                        .collect();
                    Spec::Indexed {
                        blocks,
                        inner: Box::new(i),
                    }
                }),
            prop::collection::vec((1usize..3, 0usize..6, inner), 1..4)
                .prop_map(|fields| Spec::Struct { fields }),
        ]
    })
}

/// The layouts every rank checks, the same on each: (spec, elements in the message).
fn cases() -> Vec<(Spec, usize)> {
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = (spec_strategy(), 0usize..4);
    (0..32)
        .map(|_| {
            let (spec, size_class) = strategy.new_tree(&mut runner).unwrap().current();
            let packed = model(&spec).0.len();
            // Below, at and past the eager limit, and well into rendezvous.
            let target = [64, EAGER, EAGER + 200, 300_000][size_class];
            (spec, (target / packed).max(1))
        })
        .collect()
}

fn source_bytes(len: usize, case: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + case * 7) % 251) as u8)
        .collect()
}

/// Sends every case from rank 0 to rank 1 through a view, received packed and through a
/// receive view, and as packed bytes received through a view; then broadcasts it from rank 0
/// to all through views. On shared memory every rendezvous into a view with gaps lands in
/// its blocks (`Counters::block_reads`), by process_vm_readv where the arenas are off:
/// checked where the test side asks ([`BLOCK_READS`]).
fn layouts(universe: &mpirt::environment::Universe, world: &SimpleCommunicator) {
    let check = env::var(BLOCK_READS).ok();
    let shm = check.is_some();
    let cma = check.as_deref() == Some("cma");
    // (reads into blocks, of them from a peer's mapped arena) at this rank so far.
    let reads = || match (&check, universe.counters()) {
        (Some(_), Some(c)) => (c.block_reads, c.mapped_reads),
        (Some(how), None) => panic!("{BLOCK_READS}={how} without the native engine's counters"),
        (None, _) => (0, 0),
    };
    for (case, (spec, count)) in cases().into_iter().enumerate() {
        let (bytes, extent) = model(&spec);
        let datatype = build(&spec);
        let len = count * extent;
        let source = source_bytes(len, case);
        let packed: Vec<u8> = (0..count)
            .flat_map(|e| bytes.iter().map(move |b| e * extent + b))
            .map(|at| source[at])
            .collect();
        let mut expected = vec![GUARD; len];
        for e in 0..count {
            for b in &bytes {
                expected[e * extent + b] = source[e * extent + b];
            }
        }
        // SAFETY: the views lie within their buffers (mpirt checks it too).
        let view = unsafe { View::with_count_and_datatype(&source[..], count as i32, &datatype) };
        if world.rank() == 0 {
            let peer = world.process_at_rank(1);
            peer.send(&view);
            peer.send(&view);
            // Immediate: the request keeps the packed copy until the send completes.
            mpirt::request::scope(|scope| {
                peer.immediate_send(scope, &view).wait();
            });
            // For a matched probe's receive.
            peer.send(&view);
            // Contiguous bytes into a view.
            peer.send(&packed[..]);
            assert_eq!(world.pack(&view), packed, "case {case}: pack");
        } else if world.rank() == 1 {
            let peer = world.process_at_rank(0);
            // What a receive into a view read: one read into its blocks per rendezvous on
            // shared memory where the view has gaps (a gapless one is received as bytes),
            // none from the arena where it is off.
            let gapless = bytes.iter().copied().eq(0..extent);
            let read_into_view = packed.len() > EAGER && !gapless;
            let read_into_blocks = |before: (u64, u64), how: &str| {
                if !shm {
                    return;
                }
                let after = reads();
                assert_eq!(
                    after.0 - before.0,
                    u64::from(read_into_view),
                    "case {case} ({} bytes): {how}: reads into the view's blocks",
                    packed.len()
                );
                if cma {
                    assert_eq!(after.1, before.1, "case {case}: {how}: read from an arena");
                }
            };
            let mut got = vec![0u8; packed.len()];
            let status = peer.receive_into(&mut got[..]);
            assert_eq!(status.byte_count(), packed.len());
            assert_eq!(got, packed, "case {case} {spec:?}: the packed message");
            let mut into = vec![GUARD; len];
            {
                // SAFETY: as above.
                let mut view = unsafe {
                    MutView::with_count_and_datatype(&mut into[..], count as i32, &datatype)
                };
                let before = reads();
                peer.receive_into(&mut view);
                read_into_blocks(before, "receive_into");
            }
            assert!(
                into == expected,
                "case {case} {spec:?}: received through a view"
            );
            let mut immediate = vec![GUARD; len];
            {
                // SAFETY: as above.
                let mut view = unsafe {
                    MutView::with_count_and_datatype(&mut immediate[..], count as i32, &datatype)
                };
                let before = reads();
                mpirt::request::scope(|scope| {
                    peer.immediate_receive_into(scope, &mut view).wait();
                });
                read_into_blocks(before, "immediate_receive_into");
            }
            assert!(immediate == expected, "case {case}: an immediate receive");
            let mut matched = vec![GUARD; len];
            {
                // SAFETY: as above.
                let mut view = unsafe {
                    MutView::with_count_and_datatype(&mut matched[..], count as i32, &datatype)
                };
                let (message, _) = peer.matched_probe();
                let before = reads();
                message.matched_receive_into(&mut view);
                read_into_blocks(before, "matched_receive_into");
            }
            assert!(
                matched == expected,
                "case {case}: a matched probe's receive"
            );
            let mut from_bytes = vec![GUARD; len];
            {
                // SAFETY: as above.
                let mut view = unsafe {
                    MutView::with_count_and_datatype(&mut from_bytes[..], count as i32, &datatype)
                };
                let before = reads();
                peer.receive_into(&mut view);
                read_into_blocks(before, "contiguous bytes into a view");
            }
            assert!(
                from_bytes == expected,
                "case {case}: contiguous bytes received through a view"
            );
            let mut unpacked = vec![GUARD; len];
            {
                // SAFETY: as above.
                let mut view = unsafe {
                    MutView::with_count_and_datatype(&mut unpacked[..], count as i32, &datatype)
                };
                // SAFETY: `packed` holds `count` elements' packed bytes.
                unsafe { world.unpack_into(&packed, &mut view, 0) };
            }
            assert!(unpacked == expected, "case {case}: unpack_into");
        }
        let root = world.process_at_rank(0);
        let mut all = if world.rank() == 0 {
            source.clone()
        } else {
            vec![GUARD; len]
        };
        {
            // SAFETY: as above.
            let mut view =
                unsafe { MutView::with_count_and_datatype(&mut all[..], count as i32, &datatype) };
            root.broadcast_into(&mut view);
        }
        let want = if world.rank() == 0 {
            &source
        } else {
            &expected
        };
        assert!(&all == want, "case {case}: broadcast through views");
    }
    views_against_slices(world);
    if world.rank() == 1 && shm {
        println!("rank 1: block reads checked");
    }
    if let Ok(how) = env::var(UCX_IN_PLACE) {
        ucx_in_place_counted(universe, world.rank(), &how);
    }
    if env::var(VERBS_SGE).is_ok() {
        verbs_sge_counted(universe, world.rank());
    }
    println!("rank {}: layouts ok", world.rank());
}

/// Checks that the UCX PML handed rank 0's sends into views and rank 1's receives into them
/// to UCX as `how` ("iov" or "generic" in place, or "staged", [`UCX_IN_PLACE`]), and nothing
/// of the other kinds on any rank.
fn ucx_in_place_counted(universe: &mpirt::environment::Universe, rank: i32, how: &str) {
    let c = universe
        .counters()
        .unwrap_or_else(|| panic!("rank {rank}: {UCX_IN_PLACE}={how} without counters"));
    let kinds = [
        ("iov", (c.ucx_iov_sends, c.ucx_iov_receives)),
        ("generic", (c.ucx_generic_sends, c.ucx_generic_receives)),
        ("staged", (c.ucx_staged_sends, c.ucx_staged_receives)),
    ];
    let Some(&(_, asked)) = kinds.iter().find(|(kind, _)| *kind == how) else {
        panic!("{UCX_IN_PLACE}={how}: neither iov, generic nor staged");
    };
    for (kind, counts) in kinds.iter().filter(|(kind, _)| *kind != how) {
        assert_eq!(*counts, (0, 0), "rank {rank}: {kind}, not {how}");
    }
    match rank {
        0 => assert!(asked.0 > 0, "rank 0: no send as {how}: {asked:?}"),
        1 => assert!(asked.1 > 0, "rank 1: no receive as {how}: {asked:?}"),
        _ => {}
    }
    println!("rank {rank}: ucx {how} sends and receives {asked:?}");
}

/// Checks that rank 1's rendezvous reads into views went over verbs by RDMA READs with
/// scatter-gather lists, and that no rank staged one ([`VERBS_SGE`]).
fn verbs_sge_counted(universe: &mpirt::environment::Universe, rank: i32) {
    let c = universe
        .counters()
        .unwrap_or_else(|| panic!("rank {rank}: {VERBS_SGE} without counters"));
    let (sge, requests, staged) = (
        c.verbs_sge_reads,
        c.verbs_sge_read_requests,
        c.verbs_staged_reads,
    );
    assert_eq!(staged, 0, "rank {rank}: reads into views staged");
    if rank == 1 {
        assert!(
            sge > 0 && requests >= sge,
            "rank 1: {sge} reads by scatter-gather lists in {requests} READs"
        );
    }
    println!("rank {rank}: verbs reads by scatter-gather lists {sge} in {requests} READs");
    println!(
        "rank {rank}: verbs sends in place {} packed {} reads of sends in place {}",
        c.verbs_layout_sends, c.verbs_packed_sends, c.verbs_layout_reads
    );
}

/// A view and a slice match when their signatures do, as in MPI: a vector of `f64` is so many
/// `f64`s, reduced element by element; other signatures are named errors.
fn views_against_slices(world: &SimpleCommunicator) {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    // A 4 x 3 row-major matrix; column 1 is a vector of 4 f64, 3 apart.
    let matrix: Vec<f64> = (0..12).map(|i| (i + 100 * rank) as f64).collect();
    let column = UserDatatype::vector(4, 1, 3, &f64::equivalent_datatype());
    // SAFETY: 4 elements 3 apart from element 1 lie within the 11 after it.
    let view = unsafe { View::with_count_and_datatype(&matrix[1..], 1, &column) };
    let mut sums = [0.0f64; 4];
    world.all_reduce_into(
        &view,
        &mut sums[..],
        mpirt::collective::SystemOperation::sum(),
    );
    let ranks: usize = (0..size).sum();
    for (row, sum) in sums.iter().enumerate() {
        assert_eq!(*sum, (size * (row * 3 + 1) + 100 * ranks) as f64);
    }
    let mut columns = vec![0.0f64; 4 * size];
    world.all_gather_into(&view, &mut columns[..]);
    for (r, got) in columns.chunks(4).enumerate() {
        let want: Vec<f64> = (0..4).map(|row| (row * 3 + 1 + 100 * r) as f64).collect();
        assert_eq!(got, want);
    }
    let e = world
        .try_all_gather_into(&view, &mut vec![0i64; 4 * size][..])
        .unwrap_err();
    println!("error: {e}");
    mixed_layouts_in_one_collective(world, &column);
    // Two structs of an i32 then an f32 or an i32: they differ at basic element 1.
    let int = i32::equivalent_datatype();
    let mixed = UserDatatype::structured(&[1, 1], &[0, 4], &[int, f32::equivalent_datatype()]);
    let ints = UserDatatype::structured(&[1, 1], &[0, 4], &[int, int]);
    let out = [0u8; 8];
    let mut into = vec![0u8; 8 * size];
    // SAFETY: one element of each spans 8 bytes, which each buffer holds per rank.
    let (send, mut receive) = unsafe {
        (
            View::with_count_and_datatype(&out[..], 1, &mixed),
            MutView::with_count_and_datatype(&mut into[..], size as i32, &ints),
        )
    };
    let e = world.try_all_gather_into(&send, &mut receive).unwrap_err();
    println!("error: {e}");
}

/// Ranks lay the same elements out differently in one collective (a column view on some, a
/// slice on others), which MPI allows as long as the type signatures match: short ones take
/// the shared-memory area on one host, and every rank must still take the same path.
fn mixed_layouts_in_one_collective(world: &SimpleCommunicator, column: &UserDatatype) {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let ranks: usize = (0..size).sum();
    let sum = mpirt::collective::SystemOperation::sum;
    // Column 1 of a 4 x 3 matrix holds `column_of(x)`, the rest stays -1.
    let column_only = |m: &[f64], x: &dyn Fn(usize) -> f64| {
        for (i, got) in m.iter().enumerate() {
            let want = if i % 3 == 1 { x(i / 3) } else { -1.0 };
            assert_eq!(*got, want, "element {i} on rank {rank}");
        }
    };
    let root = world.process_at_rank(0);
    let row_values: Vec<f64> = (0..4).map(|row| (row * 7) as f64).collect();
    if rank == 0 {
        let mut m: Vec<f64> = (0..12)
            .map(|i| if i % 3 == 1 { row_values[i / 3] } else { -1.0 })
            .collect();
        // SAFETY: 4 elements 3 apart from element 1 lie within the 11 after it.
        let mut v = unsafe { MutView::with_count_and_datatype(&mut m[1..], 1, column) };
        root.broadcast_into(&mut v);
    } else {
        let mut got = [0.0f64; 4];
        root.broadcast_into(&mut got[..]);
        assert_eq!(got.to_vec(), row_values);
    }
    let mine = [rank as f64; 4];
    if rank % 2 == 1 {
        let mut m = vec![-1.0f64; 12];
        // SAFETY: as above.
        let mut v = unsafe { MutView::with_count_and_datatype(&mut m[1..], 1, column) };
        world.all_reduce_into(&mine[..], &mut v, sum());
        column_only(&m, &|_| ranks as f64);
    } else {
        let mut got = [0.0f64; 4];
        world.all_reduce_into(&mine[..], &mut got[..], sum());
        assert_eq!(got, [ranks as f64; 4]);
    }
    if rank == 0 {
        let mut m = vec![-1.0f64; 12];
        // SAFETY: as above.
        let mut v = unsafe { MutView::with_count_and_datatype(&mut m[1..], 1, column) };
        root.reduce_into_root(&mine[..], &mut v, sum());
        column_only(&m, &|_| ranks as f64);
    } else {
        root.reduce_into(&mine[..], sum());
    }
    contiguous_against_slices(world);
    strided_receives_through_the_area(world);
}

/// A contiguous user type (four `i32`s in one element, no gaps) matches a slice of four
/// `i32`s on the other side, as MPI matches type signatures, not datatypes: in a
/// collective (an all-reduce and a broadcast, one rank per layout) and point to point.
fn contiguous_against_slices(world: &SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let four = UserDatatype::contiguous(4, &i32::equivalent_datatype());
    let mine = [rank, rank + 1, rank + 2, rank + 3];
    let ranks: i32 = (0..size).sum();
    let want = [ranks, ranks + size, ranks + 2 * size, ranks + 3 * size];
    let mut sums = [0i32; 4];
    if rank % 2 == 0 {
        // SAFETY: one element of four `i32`s over four `i32`s.
        let send = unsafe { View::with_count_and_datatype(&mine[..], 1, &four) };
        world.all_reduce_into(
            &send,
            &mut sums[..],
            mpirt::collective::SystemOperation::sum(),
        );
    } else {
        // SAFETY: as above.
        let mut receive = unsafe { MutView::with_count_and_datatype(&mut sums[..], 1, &four) };
        world.all_reduce_into(
            &mine[..],
            &mut receive,
            mpirt::collective::SystemOperation::sum(),
        );
    }
    assert_eq!(
        sums, want,
        "all_reduce_into of contiguous(4, i32) and [i32; 4]"
    );
    let mut got = [0i32; 4];
    let root = world.process_at_rank(0);
    if rank == 0 {
        got = [7, 8, 9, 10];
        // SAFETY: as above.
        let mut v = unsafe { MutView::with_count_and_datatype(&mut got[..], 1, &four) };
        root.broadcast_into(&mut v);
    } else {
        root.broadcast_into(&mut got[..]);
    }
    assert_eq!(
        got,
        [7, 8, 9, 10],
        "broadcast_into of contiguous(4, i32) and [i32; 4]"
    );
    // An array of `i32`s is its `i32`s too: pairs against elements of contiguous(2, i32).
    let two = UserDatatype::contiguous(2, &i32::equivalent_datatype());
    let mut pair_sums = [[0i32; 2]; 2];
    if rank % 2 == 0 {
        // SAFETY: two elements of two `i32`s over four `i32`s.
        let send = unsafe { View::with_count_and_datatype(&mine[..], 2, &two) };
        world.all_reduce_into(
            &send,
            &mut pair_sums[..],
            mpirt::collective::SystemOperation::sum(),
        );
    } else {
        let pairs = [[rank, rank + 1], [rank + 2, rank + 3]];
        let mut flat = [0i32; 4];
        // SAFETY: as above.
        let mut receive = unsafe { MutView::with_count_and_datatype(&mut flat[..], 2, &two) };
        world.all_reduce_into(
            &pairs[..],
            &mut receive,
            mpirt::collective::SystemOperation::sum(),
        );
        pair_sums = [[flat[0], flat[1]], [flat[2], flat[3]]];
    }
    assert_eq!(
        pair_sums,
        [[want[0], want[1]], [want[2], want[3]]],
        "all_reduce_into of contiguous(2, i32) and [[i32; 2]]"
    );
    if size > 1 && rank < 2 {
        let peer = world.process_at_rank(1 - rank);
        let mut back = [0i32; 4];
        if rank == 0 {
            // SAFETY: as above.
            let send = unsafe { View::with_count_and_datatype(&mine[..], 1, &four) };
            peer.send(&send);
            peer.receive_into(&mut back[..]);
            assert_eq!(back, [1, 2, 3, 4]);
        } else {
            // SAFETY: as above.
            let mut v = unsafe { MutView::with_count_and_datatype(&mut back[..], 1, &four) };
            peer.receive_into(&mut v);
            assert_eq!(back, [0, 1, 2, 3]);
            peer.send(&mine[..]);
        }
    }
    println!("contiguous(4, i32) matches [i32; 4]");
}

/// `len` f64s two apart in a buffer of -1s received through a view by `call`; the values
/// received, once the -1s between them are checked to have stayed.
fn strided_receive(
    len: usize,
    call: impl FnOnce(&mut MutView<'_, '_, UserDatatype, [f64]>),
) -> Vec<f64> {
    let every_other = UserDatatype::vector(len as i32, 1, 2, &f64::equivalent_datatype());
    let mut m = vec![-1.0f64; 2 * len + 1];
    // SAFETY: `len` elements two apart lie within the buffer's 2 * len + 1.
    call(&mut unsafe { MutView::with_count_and_datatype(&mut m[..], 1, &every_other) });
    for (i, guard) in m.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        assert_eq!(*guard, -1.0, "guard element {i} was written");
    }
    m.iter().step_by(2).take(len).copied().collect()
}

/// Short calls meet in the shared-memory area, which copies into a packed buffer: a strided
/// receive view must get its elements unpacked into place, and nothing between them.
fn strided_receives_through_the_area(world: &SimpleCommunicator) {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let root = world.process_at_rank(0);
    let value = |from: usize, to: usize| (from * 100 + to) as f64;
    let mine = [value(rank, 0), value(rank, 1)];
    if rank == 0 {
        let got = strided_receive(2 * size, |v| root.gather_into_root(&mine[..], v));
        let want: Vec<f64> = (0..size).flat_map(|r| [value(r, 0), value(r, 1)]).collect();
        assert_eq!(got, want, "gather into a strided view");
    } else {
        root.gather_into(&mine[..]);
    }
    let blocks: Vec<f64> = (0..size).flat_map(|r| [value(0, r), value(1, r)]).collect();
    let got = strided_receive(2, |v| {
        if rank == 0 {
            root.scatter_into_root(&blocks[..], v)
        } else {
            root.scatter_into(v)
        }
    });
    assert_eq!(
        got,
        [value(0, rank), value(1, rank)],
        "scatter into a strided view"
    );
    let outgoing: Vec<f64> = (0..size).map(|to| value(rank, to)).collect();
    let got = strided_receive(size, |v| world.all_to_all_into(&outgoing[..], v));
    let want: Vec<f64> = (0..size).map(|from| value(from, rank)).collect();
    assert_eq!(got, want, "all_to_all into a strided view");
    let got = strided_receive(1, |v| {
        world.reduce_scatter_block_into(&outgoing[..], v, mpirt::collective::SystemOperation::sum())
    });
    let sum: f64 = (0..size).map(|from| value(from, rank)).sum();
    assert_eq!(got, [sum], "reduce_scatter_block into a strided view");
}

/// Varcount collectives (and a reduce-scatter's counts) in elements of a vector type: a
/// pair of `f64`s one apart, so each element spans 3 `f64`s and packs to 2. The parts are
/// cut in pairs, not in the `f64`s that type matching compares.
fn varcount_views(world: &SimpleCommunicator) {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let pair = UserDatatype::vector(2, 1, 2, &f64::equivalent_datatype());
    // Pair `k` that rank `from` sends to rank `to`.
    let value = |from: usize, to: usize, k: usize| -> [f64; 2] {
        let base = (1000 * from + 100 * to + 2 * k) as f64;
        [base, base + 1.0]
    };
    // `pairs.len()` pairs as laid out by `pair`, every gap -1.
    let spread = |pairs: &[[f64; 2]]| -> Vec<f64> {
        pairs.iter().flat_map(|p| [p[0], -1.0, p[1]]).collect()
    };
    // The receive buffers leave one pair free before each part, which stays -1.
    let cut = |counts: &[i32]| -> (Vec<i32>, usize) {
        let mut at = 0;
        let displs = counts
            .iter()
            .map(|&c| {
                at += 1 + c as usize;
                (at - c as usize) as i32
            })
            .collect();
        (displs, at)
    };
    let gap = [-1.0, -1.0];
    let with_gaps = |parts: &[Vec<[f64; 2]>]| -> Vec<[f64; 2]> {
        parts
            .iter()
            .flat_map(|p| [gap].into_iter().chain(p.iter().copied()))
            .collect()
    };
    let blank = |len: usize| vec![-1.0f64; 3 * len];

    // all_gather_varcount and gather_varcount: rank r gives r + 1 pairs.
    let mine: Vec<[f64; 2]> = (0..=rank).map(|k| value(rank, 0, k)).collect();
    let mine_flat: Vec<f64> = mine.iter().flatten().copied().collect();
    let counts: Vec<i32> = (0..size).map(|r| r as i32 + 1).collect();
    let (displs, len) = cut(&counts);
    let everyone: Vec<Vec<[f64; 2]>> = (0..size)
        .map(|r| (0..=r).map(|k| value(r, 0, k)).collect())
        .collect();
    let want = spread(&with_gaps(&everyone));
    let mut got = blank(len);
    {
        // SAFETY: `len` pairs span 3 * len f64s, which `got` holds.
        let mut view = unsafe { MutView::with_count_and_datatype(&mut got[..], len as i32, &pair) };
        world.all_gather_varcount_into(
            &mine_flat[..],
            &mut PartitionMut::new(&mut view, &counts[..], &displs[..]),
        );
    }
    assert_eq!(got, want, "all_gather_varcount on rank {rank}");
    let spread_mine = spread(&mine);
    // SAFETY: r + 1 pairs span 3 * (r + 1) f64s, which `spread_mine` holds.
    let send = unsafe { View::with_count_and_datatype(&spread_mine[..], rank as i32 + 1, &pair) };
    let root = world.process_at_rank(0);
    if rank == 0 {
        let mut got = blank(len);
        {
            // SAFETY: as for the all-gather.
            let mut view =
                unsafe { MutView::with_count_and_datatype(&mut got[..], len as i32, &pair) };
            root.gather_varcount_into_root(
                &send,
                &mut PartitionMut::new(&mut view, &counts[..], &displs[..]),
            );
        }
        assert_eq!(got, want, "gather_varcount on the root");
    } else {
        root.gather_varcount_into(&send);
    }

    // reduce_scatter: the counts cut the send view in pairs, r + 1 for rank r.
    let total: usize = counts.iter().map(|&c| c as usize).sum();
    let contribution: Vec<[f64; 2]> = (0..total).map(|k| value(rank, 0, k)).collect();
    let spread_contribution = spread(&contribution);
    // SAFETY: `total` pairs span 3 * total f64s, which the buffer holds.
    let send =
        unsafe { View::with_count_and_datatype(&spread_contribution[..], total as i32, &pair) };
    let mut got = vec![0.0f64; 2 * (rank + 1)];
    world.reduce_scatter_into(
        &send,
        &mut got[..],
        &counts,
        mpirt::collective::SystemOperation::sum(),
    );
    let first: usize = (0..rank).map(|r| r + 1).sum();
    let want: Vec<f64> = (first..=first + rank)
        .flat_map(|k| {
            let [a, b] = (0..size).fold([0.0, 0.0], |[a, b], from| {
                let [x, y] = value(from, 0, k);
                [a + x, b + y]
            });
            [a, b]
        })
        .collect();
    assert_eq!(got, want, "reduce_scatter on rank {rank}");

    // all_to_all_varcount: rank `from` sends 1 + (from + to) % 2 pairs to rank `to`.
    let count = |from: usize, to: usize| 1 + (from + to) % 2;
    let outgoing: Vec<Vec<[f64; 2]>> = (0..size)
        .map(|to| (0..count(rank, to)).map(|k| value(rank, to, k)).collect())
        .collect();
    let incoming: Vec<Vec<[f64; 2]>> = (0..size)
        .map(|from| {
            (0..count(from, rank))
                .map(|k| value(from, rank, k))
                .collect()
        })
        .collect();
    let send_counts: Vec<i32> = outgoing.iter().map(|p| p.len() as i32).collect();
    let recv_counts: Vec<i32> = incoming.iter().map(|p| p.len() as i32).collect();
    let (send_displs, send_len) = cut(&send_counts);
    let (recv_displs, recv_len) = cut(&recv_counts);
    let source = spread(&with_gaps(&outgoing));
    let mut got = blank(recv_len);
    {
        // SAFETY: `send_len` and `recv_len` pairs span 3 times as many f64s, which the
        // buffers hold.
        let (send, mut recv) = unsafe {
            (
                View::with_count_and_datatype(&source[..], send_len as i32, &pair),
                MutView::with_count_and_datatype(&mut got[..], recv_len as i32, &pair),
            )
        };
        world.all_to_all_varcount_into(
            &Partition::new(&send, &send_counts[..], &send_displs[..]),
            &mut PartitionMut::new(&mut recv, &recv_counts[..], &recv_displs[..]),
        );
    }
    assert_eq!(
        got,
        spread(&with_gaps(&incoming)),
        "all_to_all_varcount on rank {rank}"
    );
    println!("rank {rank}: varcount views ok");
}

/// Not `#[repr(C)]`: Rust lays it out with padding (`size_of` 16, 11 bytes of data).
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Padded {
    a: u8,
    b: u64,
    c: u16,
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Nested {
    inner: [Padded; 2],
    flag: bool,
}

/// `n` values whose padding bytes hold `fill`.
fn padded_values(n: usize, fill: u8) -> Vec<Padded> {
    let mut values = Vec::<Padded>::with_capacity(n);
    // SAFETY: the capacity holds `n` values; every field is written before `set_len`, and
    // the padding bytes hold `fill`, which no read of a field sees.
    unsafe {
        values
            .as_mut_ptr()
            .cast::<u8>()
            .write_bytes(fill, n * size_of::<Padded>());
        for i in 0..n {
            let p = values.as_mut_ptr().add(i);
            std::ptr::addr_of_mut!((*p).a).write((i % 200) as u8);
            std::ptr::addr_of_mut!((*p).b).write(i as u64 * 1_000_003);
            std::ptr::addr_of_mut!((*p).c).write((i * 3) as u16);
        }
        values.set_len(n);
    }
    values
}

/// Whether each value's padding bytes (outside its fields) still hold `fill`.
fn padding_holds(values: &[Padded], fill: u8) -> bool {
    let data = [
        (offset_of!(Padded, a), 1),
        (offset_of!(Padded, b), 8),
        (offset_of!(Padded, c), 2),
    ];
    // SAFETY: reading the values' bytes, padding included, which hold `fill` (written, so
    // initialized) or field bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    };
    bytes.chunks(size_of::<Padded>()).all(|one| {
        (0..one.len())
            .filter(|i| !data.iter().any(|(o, l)| (*o..o + l).contains(i)))
            .all(|i| one[i] == fill)
    })
}

fn padding(world: &SimpleCommunicator) {
    assert_eq!(Padded::equivalent_datatype().size(), 11);
    for n in [1, 3, EAGER / 11 + 5, 40_000] {
        if world.rank() == 0 {
            let values = padded_values(n, POISON);
            let packed = world.pack(&values[..]);
            // The fields in declaration order, and nothing else (no poisoned padding).
            let fields: Vec<u8> = values
                .iter()
                .flat_map(|v| {
                    let mut one = vec![v.a];
                    one.extend(v.b.to_ne_bytes());
                    one.extend(v.c.to_ne_bytes());
                    one
                })
                .collect();
            assert!(packed == fields, "the packed bytes are the fields' alone");
            world.process_at_rank(1).send(&values[..]);
            world.process_at_rank(1).send(&values[n / 2]);
            world.process_at_rank(1).send(&values[..]);
        } else if world.rank() == 1 {
            let mut got = padded_values(n, 0x11);
            for v in got.iter_mut() {
                v.a = 0;
            }
            world.process_at_rank(0).receive_into(&mut got[..]);
            assert_eq!(got, padded_values(n, 0x11), "{n} values");
            assert!(padding_holds(&got, 0x11), "a receive wrote padding");
            let (one, _) = world.process_at_rank(0).receive::<Padded>();
            assert_eq!(one, padded_values(n, 0)[n / 2]);
            // A matched probe sizes the vector: n values of 11 bytes each, not 16.
            let (all, status) = world.process_at_rank(0).receive_vec::<Padded>();
            assert_eq!(status.byte_count(), n * 11);
            assert_eq!(all, padded_values(n, 0));
        }
    }
    let nested: Vec<Nested> = (0..100)
        .map(|i| Nested {
            inner: [padded_values(2, POISON)[i % 2], padded_values(2, POISON)[1]],
            flag: i % 3 == 0,
        })
        .collect();
    let mut all = nested.clone();
    if world.rank() != 0 {
        all.iter_mut().for_each(|n| n.flag = !n.flag);
    }
    world.process_at_rank(0).broadcast_into(&mut all[..]);
    assert_eq!(all, nested);
    // Buffers whose type is known at run time send and receive as their elements.
    if world.rank() == 0 {
        let values = [5u32, 6, 7];
        world.process_at_rank(1).send(&DynBuffer::new(&values[..]));
    } else if world.rank() == 1 {
        let mut values = [0u32; 3];
        let mut buffer = DynBufferMut::new(&mut values[..]);
        assert!(buffer.is::<u32>() && !buffer.is::<i32>());
        assert_eq!(buffer.len(), 3);
        world.process_at_rank(0).receive_into(&mut buffer);
        assert_eq!(values, [5, 6, 7]);
    }
    println!("rank {}: padding ok", world.rank());
}

/// Bad input names the constructor or view and the cause.
fn errors() {
    let int = i32::equivalent_datatype();
    let messages = [
        panic::catch_unwind(|| UserDatatype::vector(2, 1, -2, &int)),
        panic::catch_unwind(|| UserDatatype::indexed(&[1, 1], &[0, -4], &int)),
        panic::catch_unwind(|| UserDatatype::contiguous(-1, &int)),
    ]
    .into_iter()
    .chain([
        panic::catch_unwind(|| {
            let t = UserDatatype::vector(2, 1, 3, &int);
            let buf = [0i32; 3];
            // SAFETY: mpirt refuses the view before it is used.
            let _ = unsafe { View::with_count_and_datatype(&buf[..], 1, &t) };
            t
        }),
        panic::catch_unwind(|| {
            let t = UserDatatype::indexed(&[2, 2], &[0, 1], &int);
            let mut buf = [0i32; 8];
            // SAFETY: as above.
            let _ = unsafe { MutView::with_count_and_datatype(&mut buf[..], 1, &t) };
            t
        }),
        panic::catch_unwind(|| {
            // An i32 then a u8: extent 8, but one element ends at byte 5, where the buffer
            // does; a view over that view may not reach the 3 bytes after it.
            let t = UserDatatype::structured(&[1, 1], &[0, 4], &[int, u8::equivalent_datatype()]);
            let buf = [0u8; 5];
            let byte = u8::equivalent_datatype();
            // SAFETY: as above; the inner view covers the buffer's 5 bytes.
            let inner = unsafe { View::with_count_and_datatype(&buf[..], 1, &t) };
            // SAFETY: as above.
            let _ = unsafe { View::with_count_and_datatype(&inner, 8, &byte) };
            t
        }),
    ]);
    for outcome in messages {
        let payload = outcome.expect_err("refused");
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        println!("error: {message}");
    }
}

/// The rank side of the tests below, selected by `RANK_MODE`.
#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    let universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    match mode.as_str() {
        "layouts" => layouts(&universe, &world),
        "padding" => padding(&world),
        "varcount views" => varcount_views(&world),
        "errors" => errors(),
        "column" => {
            column(&world);
            let how = env::var(UCX_IN_PLACE).expect("the column's kind");
            ucx_in_place_counted(&universe, world.rank(), &how);
        }
        "staged meets in place" => staged_meets_in_place(&universe, &world),
        other => panic!("unknown rank mode {other}"),
    }
    println!("rank {} done", world.rank());
}

/// Rank 0's column of 8 Ki rows (64 KiB, staged over UCX's TCP at the default threshold)
/// into rank 1's room for 8 such columns (512 KiB, received in place as UCX's generic
/// datatype), then a column of 64 Ki rows (sent in place) into one of 8 Ki (staged): the
/// first lands in its rows, the second is truncated, naming both lengths. Each rank's
/// counts show both forms were used.
fn staged_meets_in_place(universe: &mpirt::environment::Universe, world: &SimpleCommunicator) {
    const COLUMNS: usize = 4;
    let (short, long) = (8usize << 10, 64usize << 10);
    let column = |rows: usize| {
        UserDatatype::vector(rows as i32, 1, COLUMNS as i32, &f64::equivalent_datatype())
    };
    let span = |rows: usize| (rows - 1) * COLUMNS + 1;
    let rank = world.rank();
    if rank == 0 {
        let matrix: Vec<f64> = (0..long * COLUMNS).map(|i| i as f64).collect();
        for rows in [short, long] {
            let vector = column(rows);
            // SAFETY: `rows` elements `COLUMNS` apart lie within the matrix.
            let send = unsafe { View::with_count_and_datatype(&matrix[..span(rows)], 1, &vector) };
            world.process_at_rank(1).send_with_tag(&send, 9);
        }
    } else {
        // Room for 8 columns of 8 Ki rows, one after the other: 512 KiB in place.
        let vector = column(short);
        let mut halo = vec![-1.0f64; 8 * span(short)];
        // SAFETY: 8 elements of the column's extent, `span(short)` values each, fill `halo`.
        let mut receive = unsafe { MutView::with_count_and_datatype(&mut halo[..], 8, &vector) };
        let status = world
            .process_at_rank(0)
            .receive_into_with_tag(&mut receive, 9);
        assert_eq!(status.count(f64::equivalent_datatype()), short as i32);
        for (i, &v) in halo.iter().enumerate() {
            let row_start = i < span(short) && i % COLUMNS == 0;
            assert_eq!(v, if row_start { i as f64 } else { -1.0 }, "value {i}");
        }
        // SAFETY: one column of 8 Ki rows lies within `halo`.
        let mut receive =
            unsafe { MutView::with_count_and_datatype(&mut halo[..span(short)], 1, &vector) };
        let e = world
            .process_at_rank(0)
            .try_receive_into_with_tag(&mut receive, 9)
            .unwrap_err();
        println!("error: {e}");
    }
    let c = universe.counters().expect("counters on UCX");
    let (staged, in_place) = match rank {
        0 => (c.ucx_staged_sends, c.ucx_generic_sends),
        _ => (c.ucx_staged_receives, c.ucx_generic_receives),
    };
    assert_eq!(
        (staged, in_place),
        (1, 1),
        "rank {rank}: staged and in place"
    );
    world.barrier();
}

/// The halo exchange's column (a vector of `f64`, one every 4), from eager sizes to past
/// UCX's rendezvous threshold, rank 0 to rank 1 into column 0 of a halo matrix: received by
/// source, by any source and by a matched probe. Every value lands in its row, and the
/// halo's other columns keep their guard.
fn column(world: &SimpleCommunicator) {
    const COLUMNS: usize = 4;
    let rank = world.rank();
    for rows in [512usize, 8 << 10, 64 << 10] {
        let vector =
            UserDatatype::vector(rows as i32, 1, COLUMNS as i32, &f64::equivalent_datatype());
        let span = (rows - 1) * COLUMNS + 1;
        if rank == 0 {
            let matrix: Vec<f64> = (0..rows * COLUMNS).map(|i| i as f64).collect();
            // SAFETY: `rows` elements `COLUMNS` apart from element 1 lie within the matrix.
            let send = unsafe { View::with_count_and_datatype(&matrix[1..1 + span], 1, &vector) };
            for _ in 0..3 {
                world.process_at_rank(1).send(&send);
            }
            continue;
        }
        for how in ["by source", "by any source", "by a matched probe"] {
            let mut halo = vec![-1.0f64; rows * COLUMNS];
            // SAFETY: as above, from element 0 of the halo matrix.
            let mut receive =
                unsafe { MutView::with_count_and_datatype(&mut halo[..span], 1, &vector) };
            let status = match how {
                "by source" => world.process_at_rank(0).receive_into(&mut receive),
                "by any source" => world.any_process().receive_into(&mut receive),
                _ => {
                    let (message, _) = world.process_at_rank(0).matched_probe();
                    message.matched_receive_into(&mut receive)
                }
            };
            assert_eq!(
                status.count(f64::equivalent_datatype()),
                rows as i32,
                "{rows} rows {how}"
            );
            for (row, four) in halo.chunks(COLUMNS).enumerate() {
                assert_eq!(
                    four[0],
                    (row * COLUMNS + 1) as f64,
                    "row {row} of {rows} {how}"
                );
                assert!(
                    four[1..].iter().all(|&v| v == -1.0),
                    "row {row} of {rows} {how}: guard"
                );
            }
        }
    }
    println!("rank {rank}: columns ok");
}

// ---- the test side ----

fn tcp() -> Vec<(&'static str, String)> {
    vec![
        ("MPIRT_TRANSPORT", "tcp".to_string()),
        ("MPIRT_TCP_EAGER_LIMIT", EAGER.to_string()),
    ]
}

/// Asks the ranks of `layouts` to check their reads into views' blocks (`Counters::block_reads`)
/// as on shared memory ("shm"), and with none from the arenas ("cma").
const BLOCK_READS: &str = "DATATYPES_BLOCK_READS";

/// Asks the ranks of `layouts`, on the UCX PML, to check that their views went to UCX in
/// place as this kind only ("iov" or "generic", `Counters::ucx_iov_sends` and its kin).
const UCX_IN_PLACE: &str = "DATATYPES_UCX_IN_PLACE";

/// Asks the ranks of `layouts`, over verbs, to check that their reads into views went by
/// scatter-gather lists, none staged (`Counters::verbs_sge_reads` and its kin).
const VERBS_SGE: &str = "DATATYPES_VERBS_SGE";

/// `wire` asking for `layouts`' check of its reads into blocks, `how`, where the ranks meet on
/// shared memory and the native engine counts (not across hosts, nor on the UCX PML); and
/// whether it asked.
fn block_reads(
    mut wire: Vec<(&'static str, String)>,
    how: &str,
) -> (Vec<(&'static str, String)>, bool) {
    let asked = common::test_pml() == "native" && !common::spread_over_hosts();
    if asked {
        // Every read into a view lands in its blocks: those of blocks shorter than
        // MPIRT_SHM_IN_PLACE_MIN_BLOCK by their copy loops (the default, 4 KiB, so most views
        // here), longer ones a copy or an iovec a block (`cma` sets it to 1: every view so).
        wire.push((BLOCK_READS, how.to_string()));
    } else {
        println!("the reads into views' blocks are not checked: the ranks are on other hosts or the PML is not native");
    }
    (wire, asked)
}

/// `layouts` on `wire`, its block reads checked as `how` where `block_reads` asks; the
/// output.
fn layouts_on(wire: Vec<(&'static str, String)>, how: &str) -> String {
    let (wire, asked) = block_reads(wire, how);
    let out = ok(3, "layouts", &wire);
    assert_eq!(out.matches("layouts ok").count(), 3, "{out}");
    assert_eq!(out.contains("rank 1: block reads checked"), asked, "{out}");
    out
}

fn ok(n: u32, mode: &str, wire: &[(&'static str, String)]) -> String {
    let mut envs: Vec<(&str, &str)> = vec![("MPIRT_EAGER_LIMIT", "4096")];
    envs.extend(wire.iter().map(|(k, v)| (*k, v.as_str())));
    ok_job_with(n, mode, &envs).0
}

#[test]
fn random_layouts_match_the_serial_model_on_shared_memory() {
    let out = layouts_on(Vec::new(), "shm");
    for expected in [
        "all_gather_into: the send buffer holds f64 elements but the receive buffer i64",
        "all_gather_into: the send and receive datatypes' signatures differ at basic element 1 \
         (their element kinds in order must be the same)",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in\n{out}");
    }
}

/// Shared memory with the arenas off: rendezvous reads of non-contiguous sends go by
/// process_vm_readv over the sender's blocks, however short (with the arenas on, by memcpy
/// from the sender's).
fn cma() -> Vec<(&'static str, String)> {
    vec![
        ("MPIRT_SHM_ARENA", "0".to_string()),
        ("MPIRT_SHM_IN_PLACE_MIN_BLOCK", "1".to_string()),
    ]
}

#[test]
fn random_layouts_match_the_serial_model_on_shared_memory_by_cma() {
    layouts_on(cma(), "cma");
}

#[test]
fn random_layouts_match_the_serial_model_over_tcp() {
    let out = ok(3, "layouts", &tcp());
    assert_eq!(out.matches("layouts ok").count(), 3, "{out}");
}

/// Over verbs (in the Soft-RoCE guest: tools/test-all.sh) every rendezvous into a view is
/// read straight into its blocks by RDMA READs with scatter-gather lists (of the device's
/// `max_sge` entries: Soft-RoCE's 32, so that a view of 4-byte blocks, an entry each, takes
/// hundreds of READs), however short its blocks (`MPIRT_VERBS_SGE_MIN_BLOCK=1`), and every
/// rendezvous send of a view whose layout fits an offer is read in place, a READ a run
/// (`MPIRT_VERBS_SEND_MIN_BLOCK=1`): the views hold what the serial model says, rank 1
/// counts the reads (none staged), and the ranks together offered sends in place and read
/// them.
#[cfg(feature = "verbs")]
#[test]
fn random_layouts_match_the_serial_model_over_verbs() {
    if !std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some()) {
        println!("skipped: no RDMA device on this machine (tools/test-all.sh runs this in the Soft-RoCE guest)");
        return;
    }
    let wire = [
        ("MPIRT_TRANSPORT", "verbs".to_string()),
        ("MPIRT_VERBS_EAGER_LIMIT", EAGER.to_string()),
        ("MPIRT_VERBS_SGE_MIN_BLOCK", "1".to_string()),
        ("MPIRT_VERBS_SEND_MIN_BLOCK", "1".to_string()),
        (VERBS_SGE, "1".to_string()),
    ];
    let out = ok(3, "layouts", &wire);
    assert_eq!(out.matches("layouts ok").count(), 3, "{out}");
    assert_eq!(
        out.matches("verbs reads by scatter-gather lists").count(),
        3,
        "{out}"
    );
    // Each rank's "sends in place N packed N reads of sends in place N", summed.
    let mut totals = [0u64; 3];
    for line in out.lines().filter(|l| l.contains("verbs sends in place")) {
        let numbers = line
            .split_whitespace()
            .filter_map(|w| w.parse::<u64>().ok());
        for (total, n) in totals.iter_mut().zip(numbers) {
            *total += n;
        }
    }
    assert!(
        totals[0] > 0 && totals[2] > 0,
        "no send offered in place, or none read so: {totals:?}\n{out}"
    );
}

/// On the UCX PML a non-contiguous buffer goes to UCX in place: as UCX's iov datatype where
/// its blocks average `MPIRT_UCX_IOV_MIN_BLOCK` bytes or more, else as its generic datatype.
/// `how` is the one every layout takes here, with the threshold at `min_block`: each rank
/// checks its counts ([`UCX_IN_PLACE`]).
fn layouts_through_ucx(how: &str, min_block: &str) {
    if common::test_pml() != "ucx" {
        println!("UCX's {how} datatype not tested: the PML is not UCX (MPIRT_TEST_PML=ucx)");
        return;
    }
    let wire = [
        ("MPIRT_UCX_IOV_MIN_BLOCK", min_block.to_string()),
        // In place over UCX's TCP too, at every size.
        ("MPIRT_UCX_TCP_STAGE_BELOW", "0".to_string()),
        (UCX_IN_PLACE, how.to_string()),
    ];
    let out = ok(3, "layouts", &wire);
    assert_eq!(out.matches("layouts ok").count(), 3, "{out}");
    let checked = format!("ucx {how} sends and receives");
    assert_eq!(out.matches(&checked).count(), 3, "{out}");
}

/// Every layout as an iov, however short its blocks.
#[test]
fn random_layouts_match_the_serial_model_through_ucx_iovs() {
    layouts_through_ucx("iov", "1");
}

/// Every layout through the generic datatype's callbacks, however long its blocks.
#[test]
fn random_layouts_match_the_serial_model_through_ucx_generic() {
    layouts_through_ucx("generic", "1g");
}

/// The halo's column on the UCX PML over `tls` (UCX_TLS), with `settings`, goes to UCX as
/// `how` only, as each rank's counts say ([`UCX_IN_PLACE`]), and lands in its rows.
fn column_through_ucx(tls: &str, how: &str, settings: &[(&'static str, &str)]) {
    if common::test_pml() != "ucx" {
        println!("the column on UCX not tested: the PML is not UCX (MPIRT_TEST_PML=ucx)");
        return;
    }
    let mut wire = vec![("UCX_TLS", tls), (UCX_IN_PLACE, how)];
    wire.extend_from_slice(settings);
    let (out, _) = ok_job_with(2, "column", &wire);
    assert_eq!(out.matches("columns ok").count(), 2, "{out}");
    let checked = format!("ucx {how} sends and receives");
    assert_eq!(out.matches(&checked).count(), 2, "{out}");
}

/// Over UCX's TCP a column shorter than `MPIRT_UCX_TCP_STAGE_BELOW` is packed into a staging
/// copy and sent as bytes, and received into one and unpacked (faster there than UCX's
/// fragments of a non-contiguous rendezvous); from that size on it goes in place, as UCX's
/// generic datatype.
#[test]
fn a_column_over_ucx_tcp_is_staged_below_the_threshold() {
    column_through_ucx("tcp", "staged", &[("MPIRT_UCX_TCP_STAGE_BELOW", "1g")]);
    column_through_ucx("tcp", "generic", &[("MPIRT_UCX_TCP_STAGE_BELOW", "0")]);
}

/// A column as UCX's iov datatype, an entry per 8-byte block, is never staged; on UCX's
/// shared memory a column goes in place as the generic datatype whatever the TCP threshold.
#[test]
fn a_column_over_ucx_goes_as_an_iov_or_in_place_on_shared_memory() {
    let every_size = ("MPIRT_UCX_TCP_STAGE_BELOW", "1g");
    column_through_ucx(
        "tcp",
        "iov",
        &[("MPIRT_UCX_IOV_MIN_BLOCK", "1"), every_size],
    );
    if common::spread_over_hosts() {
        println!("the column over UCX's shared memory not tested: the ranks are on other hosts");
        return;
    }
    column_through_ucx("sm,self", "generic", &[every_size]);
}

/// Over UCX's TCP, a staged send meets a receive in place and an in-place send a staged
/// receive (UCX matches bytes); the second, longer than the receive, fails as truncated
/// with both lengths.
#[test]
fn a_staged_column_over_ucx_tcp_meets_one_in_place() {
    if common::test_pml() != "ucx" {
        println!("staged against in place not tested: the PML is not UCX (MPIRT_TEST_PML=ucx)");
        return;
    }
    let (out, _) = ok_job_with(2, "staged meets in place", &[("UCX_TLS", "tcp")]);
    assert!(
        out.contains(
            "error: rank 1: receive from rank 0 (tag 9): message truncated: the message from \
             rank 0 with tag 9 is 524288 bytes but the receive buffer holds only 65536 bytes"
        ),
        "{out}"
    );
    for rank in 0..2 {
        assert!(out.contains(&format!("rank {rank} done")), "{out}");
    }
}

#[test]
fn padding_is_never_sent_nor_written_on_shared_memory() {
    let out = ok(2, "padding", &[]);
    assert_eq!(out.matches("padding ok").count(), 2, "{out}");
}

#[test]
fn padding_is_never_sent_nor_written_on_shared_memory_by_cma() {
    let out = ok(2, "padding", &cma());
    assert_eq!(out.matches("padding ok").count(), 2, "{out}");
}

#[test]
fn padding_is_never_sent_nor_written_over_tcp() {
    let out = ok(2, "padding", &tcp());
    assert_eq!(out.matches("padding ok").count(), 2, "{out}");
}

#[test]
fn varcount_parts_count_view_elements_on_shared_memory() {
    let out = ok(3, "varcount views", &[]);
    assert_eq!(out.matches("varcount views ok").count(), 3, "{out}");
}

#[test]
fn varcount_parts_count_view_elements_over_tcp() {
    let out = ok(3, "varcount views", &tcp());
    assert_eq!(out.matches("varcount views ok").count(), 3, "{out}");
}

#[test]
fn bad_datatypes_and_views_are_named_errors() {
    let out = ok(1, "errors", &[]);
    for expected in [
        "UserDatatype::vector: the stride is negative (-2)",
        "UserDatatype::indexed: a displacement is negative (-4)",
        "UserDatatype::contiguous: the count is negative (-1)",
        "View: 1 elements of the datatype reach 16 bytes into the buffer, which holds 12",
        "MutView: the datatype's blocks at bytes 0 and 4 overlap",
        "View: 8 elements of the datatype reach 8 bytes into the buffer, which holds 5",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in\n{out}");
    }
}
