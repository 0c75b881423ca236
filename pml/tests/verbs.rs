//! The verbs transport's failure paths, each provoked for real: a peer that dies, a port that
//! is down, a GID that cannot be used, a queue pair that cannot connect, memory that cannot be
//! registered. Each must be an error that names the peer or device, the operation and the
//! cause, never a hang. They need an RDMA device: tools/test-all.sh runs them in the Soft-RoCE
//! guest (../shared/rdma-vm), with `MPIRT_VERBS_DEV=rxe0,rxe1`.
#![cfg(feature = "verbs")]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use std::{env, fs, thread};

use pml::blocks::{Block, Blocks};
use pml::protocol::{layout, RemoteLayout};
use pml::transport::verbs::{device_names, LayoutTarget, VerbsConfig, VerbsTransport};
use pml::transport::{Placement, Sink};
use pml::{
    Counters, Engine, EngineConfig, OneSided, Pml, PmlError, RemoteKey, SendMode, TransportChoice,
    Wireup,
};

mod ranks_common;

use ranks_common::{
    every_rank_done, exchange, put_and_read_back, rank0_saw_rank1_die, rma_wait, run_children,
    singleton_wireup, swap_windows, wait_for_dead_rank1, DirWireup,
};

/// Whether the tests can run; says why not where they cannot.
fn have_device() -> bool {
    let present = !device_names().is_empty();
    if !present {
        println!(
            "skipped: no RDMA device on this machine (tools/test-all.sh runs this in the \
             Soft-RoCE guest)"
        );
    }
    present
}

/// The devices to use, one per rank, as the guest's test run names them.
fn devices() -> Vec<String> {
    let listed = env::var("MPIRT_VERBS_DEV").unwrap_or_default();
    let named: Vec<String> = listed
        .split(',')
        .filter(|d| !d.is_empty())
        .map(String::from)
        .collect();
    if named.is_empty() {
        device_names()
    } else {
        named
    }
}

fn verbs_config(gid_index: Option<u8>) -> EngineConfig {
    EngineConfig {
        transport: TransportChoice::Verbs,
        verbs_devices: env::var("MPIRT_VERBS_DEV").unwrap_or_default(),
        verbs_gid_index: gid_index,
        ..EngineConfig::default()
    }
}

const DEATH_ENV: &str = "PML_VERBS_TEST_DEATH";

/// Rank 1 exits without a word right after wire-up. Case `idle`: rank 0 only waits for a
/// message from it, sending nothing, so only the liveness probe can notice. Case `sending`:
/// rank 0 also sends it 8 bytes every 200 ms, and the SEND's retries run out. Either way rank
/// 0's operation fails naming rank 1, and later work for rank 1 is refused at once.
#[test]
fn a_dead_peer_is_an_error_not_a_hang() {
    if let Ok(spec) = env::var(DEATH_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        dead_peer_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    if !have_device() {
        return;
    }
    for case in ["idle", "sending"] {
        let dir = env::temp_dir().join(format!("pml-verbs-death-{case}-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // Generous: the guest's CPU is emulated. A hang is what this bounds.
        let outputs = run_children(
            "a_dead_peer_is_an_error_not_a_hang",
            2,
            DEATH_ENV,
            |r| format!("{},{r},{case}", dir.display()),
            &[],
            Duration::from_secs(120),
        );
        println!("{case}: {}", rank0_saw_rank1_die(&outputs, case));
        fs::remove_dir_all(dir).unwrap();
    }
}

fn dead_peer_rank(dir: PathBuf, rank: u32, case: &str) {
    let mut w = DirWireup {
        dir,
        rank,
        size: 2,
        round: 0,
    };
    let mut e = Engine::new(&mut w, verbs_config(None)).unwrap();
    exchange(&mut e);
    // Rank 1 leaves only once both ranks have seen the exchange through: had it left at
    // once, its acknowledgement of rank 0's message could have gone with it, and rank 0's
    // SEND fails then, although the message arrived.
    w.fence().unwrap();
    if rank == 1 {
        // Ends the process without dropping the engine: to rank 0, a crash.
        std::process::exit(0);
    }
    let error = wait_for_dead_rank1(&mut e, case, 8);
    let expected = if case == "idle" {
        "rank 1 did not answer a liveness probe"
    } else {
        "a SEND to rank 1 failed"
    };
    match &error {
        PmlError::Transport(t) if t.peer == 1 && t.cause.contains(expected) => {}
        other => panic!("expected a transport error with rank 1 ({expected}), got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .starts_with("the connection with rank 1 on "),
        "the host is not named: {error}"
    );
    // The failure stopped the engine: later work is refused at once, with the same error.
    let data = [7u8; 8];
    // SAFETY: `data` outlives the request, which is waited on before this function returns.
    let again = unsafe { e.post_send(0, 0, 1, 6, SendMode::Standard, data.as_ptr(), 8) }
        .and_then(|h| e.wait(h));
    assert_eq!(
        again,
        Err(PmlError::Stopped(Box::new(error))),
        "a send after rank 1 died"
    );
    println!("rank 0 saw rank 1 die");
}

/// A GID index that names no GID of the port is refused when the device opens, naming it.
#[test]
fn an_empty_gid_index_is_named() {
    if !have_device() {
        return;
    }
    let dev = &devices()[0];
    let mut w = singleton_wireup("verbs-empty-gid");
    let config = EngineConfig {
        verbs_devices: dev.clone(),
        ..verbs_config(Some(200))
    };
    let e = Engine::new(&mut w, config).err().unwrap().to_string();
    assert!(
        e.contains(&format!("GID 200 of {dev}")) && e.contains("MPIRT_VERBS_GID_INDEX"),
        "{e}"
    );
    println!("{e}");
    fs::remove_dir_all(w.dir).unwrap();
}

/// A transport of one rank on `dev`, ready to connect to rank `peer`.
fn transport(rank: u32, peer: u32, dev: &str) -> VerbsTransport {
    transport_with(rank, peer, dev, None, None)
}

/// Rank 0 (the reader: `MAX_SGE` entries a work request, READs of `MAX_MSG` bytes at most) on
/// the first device and rank 1 (the sender) on the last, connected to each other.
fn reader_and_sender() -> (VerbsTransport, VerbsTransport) {
    let devs = devices();
    let mut reader = transport_with(0, 1, &devs[0], Some(MAX_SGE), Some(MAX_MSG));
    let mut sender = transport(1, 0, &devs[devs.len() - 1]);
    reader
        .connect(1, &sender.endpoint(), &sender.rma_endpoint())
        .unwrap();
    sender
        .connect(0, &reader.endpoint(), &reader.rma_endpoint())
        .unwrap();
    (reader, sender)
}

/// `transport` whose READs take at most `max_sge` scatter-gather entries and `max_msg` bytes
/// a work request, where given, and scatter into blocks of `SGE_MIN_BLOCK` bytes or more.
fn transport_with(
    rank: u32,
    peer: u32,
    dev: &str,
    max_sge: Option<usize>,
    max_msg: Option<usize>,
) -> VerbsTransport {
    let config = VerbsConfig {
        devices: dev.to_string(),
        gid_index: None,
        frame_size: 4096,
        reg_cache: false,
        max_msg,
        max_sge,
        sge_min_block: SGE_MIN_BLOCK,
        cq_entries: None,
        send_min_block: SEND_MIN_BLOCK,
    };
    VerbsTransport::new(rank, 2, 0, &[peer], &config).unwrap()
}

/// The scatter-gather limits of `reads_scatter_into_a_receives_blocks`' reader: far below
/// Soft-RoCE's 32 entries and 2 GiB, so that its layouts take many work requests and runs
/// are cut where a work request ends.
const SGE_MIN_BLOCK: usize = 64;
/// The shortest mean block of a send that the tests' transports offer in place: below the
/// 16 KiB default, so that short layouts test both sides of it.
const SEND_MIN_BLOCK: usize = 1024;
const MAX_SGE: usize = 4;
const MAX_MSG: usize = 4096;
const GUARD: u8 = 0xA5;
const POISON: u8 = 0xEE;

/// What a bare transport's poll delivers in these tests: finished reads only.
#[derive(Default)]
struct Reads(Vec<(u64, Result<(), String>)>);

// SAFETY: it places nothing (every frame staged), so no transport writes through it.
unsafe impl Sink for Reads {
    const PLACEMENT_HEAD: usize = 0;

    fn frame(&mut self, peer: u32, frame: &[u8]) -> Result<(), PmlError> {
        panic!(
            "a {}-byte frame from rank {peer}: nobody sends one",
            frame.len()
        )
    }

    fn placement(&mut self, _: u32, _: &[u8], _: usize) -> Result<Placement<'_>, PmlError> {
        Ok(Placement::Staged)
    }

    fn data_landed(&mut self, peer: u32, _: u64, len: usize) -> Result<(), PmlError> {
        panic!("{len} bytes landed from rank {peer}: nothing was placed")
    }

    fn read_done(&mut self, token: u64, result: Result<(), String>) -> Result<(), PmlError> {
        self.0.push((token, result));
        Ok(())
    }
}

/// Polls `t` until the read `token` finished; its result. Every read finishes once: a
/// second report of it, or none within the (emulated-CPU generous) deadline, fails.
fn finish_read(t: &mut VerbsTransport, token: u64) -> Result<(), String> {
    let mut reads = Reads::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while reads.0.is_empty() {
        assert!(Instant::now() < deadline, "read {token} never finished");
        t.poll(&mut reads).unwrap();
    }
    // Anything else still in flight would come now.
    t.poll(&mut reads).unwrap();
    assert_eq!(
        reads.0.len(),
        1,
        "one report of read {token}: {:?}",
        reads.0
    );
    let (got, result) = reads.0.pop().unwrap();
    assert_eq!(got, token);
    result
}

/// A receive of `count` elements of `list`, `extent` apart: its buffer (blocks and gaps
/// poisoned, 64 guard bytes past it) and, for `packed` landed as its first bytes, what the
/// buffer must then hold (a serial unpack, written here independently of `Blocks`).
fn receive_of(list: &[Block], extent: usize, count: usize, packed: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let span = extent * count;
    let mut buf = vec![POISON; span + 64];
    buf[span..].fill(GUARD);
    let mut expected = buf.clone();
    let mut at = 0;
    'unpack: for el in 0..count {
        for b in list {
            for i in 0..b.len {
                if at == packed.len() {
                    break 'unpack;
                }
                expected[el * extent + b.offset + i] = packed[at];
                at += 1;
            }
        }
    }
    (buf, expected)
}

/// The reader's counters now.
fn counted(t: &VerbsTransport) -> Counters {
    let mut c = Counters::default();
    t.count_reads(&mut c);
    c
}

/// RDMA READs into a receive laid out in blocks, between two transports of this process (rank
/// 0 on the first device reads a packed send that rank 1 exposed on the last, as a rendezvous
/// does; at most `MAX_SGE` entries and `MAX_MSG` bytes a work request): a vector column, a
/// 256-byte block every KiB (2048 runs: 512 READs of 4 entries, counted exactly), and an
/// indexed layout (blocks of 100 to 2900 bytes, some longer than a work request takes beside
/// others: runs cut where one ends), read short of its last element. Each lands as a serial
/// unpack of what was sent, the gaps and the bytes past the buffer untouched. A column of
/// 8-byte blocks, and 1 KiB blocks a MiB apart (a span too wide to register), are left to
/// staging (counted, nothing read). Then a
/// read under a key rank 1 never gave fails at the device: it reports once, after all its
/// work requests are accounted for, naming the operation and the status, and a later read
/// from rank 1 is refused naming that first cause.
#[test]
fn reads_scatter_into_a_receives_blocks() {
    if !have_device() {
        return;
    }
    let (mut reader, mut sender) = reader_and_sender();
    let packed: Vec<u8> = (0..1usize << 20).map(|i| (i % 251) as u8).collect();
    let (rkey, _exposed) = sender
        .expose(packed.as_ptr() as usize, packed.len())
        .unwrap();
    let remote = RemoteKey {
        addr: packed.as_ptr() as u64,
        key: u64::from(rkey),
    };
    let column = [Block {
        offset: 256,
        len: 256,
    }];
    let indexed = [
        Block {
            offset: 0,
            len: 100,
        },
        Block {
            offset: 150,
            len: 300,
        },
        Block {
            offset: 700,
            len: 1000,
        },
        Block {
            offset: 1800,
            len: 2900,
        },
    ];
    // (layout, extent, count, bytes read)
    let cases: [(&[Block], usize, usize, usize); 2] = [
        (&column, 1024, 2048, 2048 * 256),
        (&indexed, 4800, 100, 100 * 4300 - 777),
    ];
    for (token, &(list, extent, count, len)) in cases.iter().enumerate() {
        let (mut buf, expected) = receive_of(list, extent, count, &packed[..len]);
        let blocks = Blocks::new(buf.as_mut_ptr(), count, extent, list).unwrap();
        let before = counted(&reader);
        // SAFETY: `buf` and `list` outlive the read, finished below, and nothing else
        // touches them meanwhile; `len` is within the blocks.
        let reading = unsafe { reader.read_blocks(1, remote, &blocks, len, token as u64) };
        assert!(
            reading.unwrap(),
            "layout {token}: blocks of {list:?} not read in place"
        );
        finish_read(&mut reader, token as u64).unwrap();
        let after = counted(&reader);
        let requests = after.verbs_sge_read_requests - before.verbs_sge_read_requests;
        if token == 0 {
            assert_eq!(requests, 512, "the column's READs");
        }
        // At least one READ per `MAX_SGE` runs and per `MAX_MSG` bytes.
        let runs = (count * list.len()) as u64;
        let least = runs
            .div_ceil(MAX_SGE as u64)
            .max(len.div_ceil(MAX_MSG) as u64);
        assert!(
            requests >= least,
            "layout {token}: {requests} READs for {runs} runs"
        );
        assert_eq!(
            (
                after.verbs_sge_reads - before.verbs_sge_reads,
                after.verbs_staged_reads - before.verbs_staged_reads
            ),
            (1, 0),
            "layout {token}: reads by scatter-gather lists, staged"
        );
        if let Some(i) = (0..buf.len()).find(|&i| buf[i] != expected[i]) {
            panic!(
                "layout {token}: byte {i} of {} is {:#x}, not {:#x}",
                buf.len(),
                buf[i],
                expected[i]
            );
        }
    }
    // A column of doubles: an entry per 8 bytes costs more than the copy; staged.
    let doubles = [Block { offset: 8, len: 8 }];
    let (mut buf, _) = receive_of(&doubles, 32, 1000, &[]);
    let untouched = buf.clone();
    let blocks = Blocks::new(buf.as_mut_ptr(), 1000, 32, &doubles).unwrap();
    let before = counted(&reader);
    // SAFETY: as above (nothing is read: the blocks are short).
    let reading = unsafe { reader.read_blocks(1, remote, &blocks, 8000, 7) };
    assert!(!reading.unwrap(), "8-byte blocks read in place");
    let after = counted(&reader);
    assert_eq!(
        (
            after.verbs_sge_reads - before.verbs_sge_reads,
            after.verbs_staged_reads - before.verbs_staged_reads
        ),
        (0, 1)
    );
    assert!(buf == untouched, "a staged read wrote into the blocks");
    // 1 KiB blocks a MiB apart: registering their 20 MiB span for 20 KiB would pin a
    // thousand times the bytes read; staged.
    let sparse = [Block {
        offset: 0,
        len: 1024,
    }];
    let (mut buf, _) = receive_of(&sparse, 1 << 20, 20, &[]);
    let blocks = Blocks::new(buf.as_mut_ptr(), 20, 1 << 20, &sparse).unwrap();
    let before = counted(&reader);
    // SAFETY: as above (nothing is read: the span is too wide).
    let reading = unsafe { reader.read_blocks(1, remote, &blocks, 20 << 10, 8) };
    assert!(!reading.unwrap(), "a 20 MiB span registered for 20 KiB");
    let after = counted(&reader);
    assert_eq!(
        (
            after.verbs_sge_reads - before.verbs_sge_reads,
            after.verbs_staged_reads - before.verbs_staged_reads
        ),
        (0, 1)
    );
    // Under a key rank 1 never gave: the device refuses the first READ, the queue pair fails,
    // and the 511 others are flushed or never posted; the read reports once.
    let (mut buf, _) = receive_of(&column, 1024, 2048, &[]);
    let blocks = Blocks::new(buf.as_mut_ptr(), 2048, 1024, &column).unwrap();
    let forged = RemoteKey {
        key: u64::from(rkey ^ 0x00ff_ff00),
        ..remote
    };
    // SAFETY: as above.
    let reading = unsafe { reader.read_blocks(1, forged, &blocks, 2048 * 256, 9) };
    assert!(reading.unwrap());
    let cause = finish_read(&mut reader, 9).unwrap_err();
    println!("{cause}");
    assert!(
        cause.contains(&format!(
            "an RDMA READ of 524288 bytes from rank 1 (at {:#x} under key {:#x}) in 512 work \
             requests into a receive's blocks (2048 scatter-gather entries) failed: ",
            forged.addr, forged.key
        )) && cause.contains("(status "),
        "{cause}"
    );
    // SAFETY: as above (refused before anything is posted).
    let refused = unsafe { reader.read_blocks(1, remote, &blocks, 256, 10) }.unwrap_err();
    let refused = refused.to_string();
    println!("{refused}");
    assert!(
        refused.contains("RDMA READ to rank 1 was refused: the connection broke earlier")
            && refused.contains("scatter-gather entries) failed: "),
        "{refused}"
    );
}

/// `count` elements of `list`, `extent` apart, their blocks filled and the gaps poisoned
/// (64 guard bytes past them), and a serial pack of the blocks, written here independently
/// of `Blocks`.
fn send_of(list: &[Block], extent: usize, count: usize) -> (Vec<u8>, Vec<u8>) {
    let span = extent * count;
    let mut source = vec![POISON; span + 64];
    source[span..].fill(GUARD);
    let mut serial = Vec::new();
    for el in 0..count {
        for b in list {
            let start = el * extent + b.offset;
            for (at, byte) in source[start..start + b.len].iter_mut().enumerate() {
                // Never the poison: a poisoned byte that arrives was a gap's.
                *byte = ((start + at) % 241) as u8;
                serial.push(*byte);
            }
        }
    }
    (source, serial)
}

/// RDMA READs of a non-contiguous send in place, between two transports of this process:
/// rank 1 (on the last device) exposes each send's span as its offer would
/// (`expose_layout`), and rank 0 (on the first; at most `MAX_SGE` entries and `MAX_MSG`
/// bytes a work request) reads it through the layout the offer carries (encoded and decoded
/// as on the wire), into contiguous bytes and into a receive's blocks (another layout):
/// a vector column of 1 KiB blocks (a READ a block), an indexed layout with a block longer
/// than a READ takes (cut), a struct whose blocks touch (one run, cut into READs of
/// `MAX_MSG`), one element of 200 blocks, read short. Each lands as a serial pack (or its
/// unpack), the gaps and the bytes past the buffer untouched. The sender offers none of a
/// column of 1023-byte blocks (under `SEND_MIN_BLOCK`), of 300 blocks an element (a layout
/// longer than its 4 KiB frames) or of blocks a MiB apart (a span too wide): counted as
/// packed. A receive of 8-byte blocks is left to staging (nothing read). Then a read under a
/// key rank 1 never gave reports once, naming the peer, the bytes, the READs and the status.
#[test]
fn reads_a_non_contiguous_send_in_place() {
    if !have_device() {
        return;
    }
    let (mut reader, mut sender) = reader_and_sender();
    let b = |offset: usize, len: usize| Block { offset, len };
    let many = |n: usize| -> Vec<Block> { (0..n).map(|i| b(i * 2560, 2048)).collect() };
    // The receive's layout: blocks of 2000 and 700 bytes, 3000 apart.
    let into = [b(0, 2000), b(2100, 700)];
    // (layout, extent, count, offered in place, bytes read short)
    let cases: [(Vec<Block>, usize, usize, bool, usize); 7] = [
        (vec![b(512, 1024)], 3072, 300, true, 0),
        (
            vec![b(0, 100), b(200, 3000), b(3300, 5000)],
            8400,
            20,
            true,
            0,
        ),
        (vec![b(0, 1500), b(1500, 1000)], 2500, 40, true, 0),
        (many(200), 200 * 2560, 1, true, 7777),
        (vec![b(512, 1023)], 3072, 300, false, 0),
        (many(300), 300 * 2560, 1, false, 0),
        (vec![b(0, 1024)], 1 << 20, 20, false, 0),
    ];
    let mut token = 0;
    for (case, (list, extent, count, offered, short)) in cases.iter().enumerate() {
        let (source, serial) = send_of(list, *extent, *count);
        let sent = Blocks::new(source.as_ptr(), *count, *extent, list).unwrap();
        let before = counted(&sender);
        // SAFETY: made here over `source` and `list`, which outlive the exposure.
        let exposed = unsafe { sender.expose_layout(&sent) };
        let after = counted(&sender);
        assert_eq!(
            (
                exposed.is_some(),
                after.verbs_layout_sends - before.verbs_layout_sends,
                after.verbs_packed_sends - before.verbs_packed_sends
            ),
            (*offered, u64::from(*offered), u64::from(!*offered)),
            "send {case}: offered in place, counted so"
        );
        let Some((rkey, id)) = exposed else {
            continue;
        };
        let remote = RemoteKey {
            addr: sent.base(),
            key: u64::from(rkey),
        };
        let wire = layout::encode(sent.extent(), list);
        let layout = RemoteLayout::decode(sent.base(), &wire, sent.len()).unwrap();
        let len = serial.len() - short;
        let runs = sent.runs(list, 0, len).count() as u64;
        // Into contiguous bytes, a guard past them.
        let mut bytes = vec![POISON; len + 64];
        bytes[len..].fill(GUARD);
        let before = counted(&reader);
        token += 1;
        // SAFETY: contiguous bytes, which outlive the read (finished below).
        let reading = unsafe {
            reader.read_layout(
                1,
                remote,
                &layout,
                LayoutTarget::Bytes(&mut bytes[..len]),
                token,
            )
        };
        assert!(reading.unwrap(), "send {case}: into bytes");
        finish_read(&mut reader, token).unwrap();
        let after = counted(&reader);
        let requests = after.verbs_layout_read_requests - before.verbs_layout_read_requests;
        assert_eq!(after.verbs_layout_reads - before.verbs_layout_reads, 1);
        // A READ a run, more where a run passes `MAX_MSG`.
        let least = sent
            .runs(list, 0, len)
            .map(|(_, n)| n.div_ceil(MAX_MSG) as u64)
            .sum::<u64>();
        assert!(
            requests == least && requests >= runs,
            "send {case}: {requests} READs for {runs} runs ({least} expected)"
        );
        assert!(
            bytes[..len] == serial[..len],
            "send {case}: bytes differ from a serial pack"
        );
        assert!(
            bytes[len..].iter().all(|&g| g == GUARD),
            "send {case}: past the bytes"
        );
        // Into a receive's blocks.
        let rcount = len.div_ceil(2700);
        let (mut buf, expected) = receive_of(&into, 3000, rcount, &serial[..len]);
        let blocks = Blocks::new(buf.as_mut_ptr(), rcount, 3000, &into).unwrap();
        let before = counted(&reader);
        token += 1;
        // SAFETY: `buf` and `into` outlive the read, finished below, and nothing else
        // touches them meanwhile; `len` is within the blocks.
        let reading = unsafe {
            reader.read_layout(
                1,
                remote,
                &layout,
                LayoutTarget::Blocks(&blocks, len),
                token,
            )
        };
        assert!(reading.unwrap(), "send {case}: into blocks");
        finish_read(&mut reader, token).unwrap();
        let after = counted(&reader);
        assert_eq!(
            (
                after.verbs_layout_reads - before.verbs_layout_reads,
                after.verbs_sge_reads - before.verbs_sge_reads,
                after.verbs_staged_reads - before.verbs_staged_reads
            ),
            (1, 1, 0),
            "send {case}: into blocks, in place on both sides"
        );
        assert!(
            after.verbs_layout_read_requests - before.verbs_layout_read_requests >= least,
            "send {case}: fewer READs than runs"
        );
        if let Some(i) = (0..buf.len()).find(|&i| buf[i] != expected[i]) {
            panic!(
                "send {case}: byte {i} of {} is {:#x}, not {:#x}",
                buf.len(),
                buf[i],
                expected[i]
            );
        }
        assert!(
            source[*extent * *count..].iter().all(|&g| g == GUARD),
            "send {case}: the sender's bytes changed"
        );
        sender.release(id);
    }
    // A receive of 8-byte blocks: staged by the caller, nothing read here.
    let (source, serial) = send_of(&[b(512, 1024)], 3072, 40);
    let sent = Blocks::new(source.as_ptr(), 40, 3072, &[b(512, 1024)]).unwrap();
    // SAFETY: as above.
    let (rkey, _id) = unsafe { sender.expose_layout(&sent) }.expect("a column of 1 KiB");
    let remote = RemoteKey {
        addr: sent.base(),
        key: u64::from(rkey),
    };
    let wire = layout::encode(sent.extent(), &[b(512, 1024)]);
    let layout = RemoteLayout::decode(sent.base(), &wire, sent.len()).unwrap();
    let doubles = [b(8, 8)];
    let (mut buf, _) = receive_of(&doubles, 32, serial.len() / 8, &[]);
    let untouched = buf.clone();
    let blocks = Blocks::new(buf.as_mut_ptr(), serial.len() / 8, 32, &doubles).unwrap();
    let before = counted(&reader);
    // SAFETY: as above (nothing is read: the blocks are short).
    let reading = unsafe {
        reader.read_layout(
            1,
            remote,
            &layout,
            LayoutTarget::Blocks(&blocks, serial.len()),
            50,
        )
    };
    assert!(!reading.unwrap(), "8-byte blocks read in place");
    let after = counted(&reader);
    assert_eq!(
        (
            after.verbs_layout_reads - before.verbs_layout_reads,
            after.verbs_staged_reads - before.verbs_staged_reads
        ),
        (0, 1)
    );
    assert!(buf == untouched, "a staged read wrote into the blocks");
    // Under a key rank 1 never gave: the first READ fails, the queue pair with it; the
    // read reports once, after all its 40 READs are accounted for.
    let forged = RemoteKey {
        key: u64::from(rkey ^ 0x00ff_ff00),
        ..remote
    };
    let mut bytes = vec![0u8; serial.len()];
    // SAFETY: contiguous bytes, which outlive the read (finished below).
    let reading =
        unsafe { reader.read_layout(1, forged, &layout, LayoutTarget::Bytes(&mut bytes), 51) };
    assert!(reading.unwrap());
    let cause = finish_read(&mut reader, 51).unwrap_err();
    println!("{cause}");
    assert!(
        cause.contains(&format!(
            "an RDMA READ of 40960 bytes from rank 1 (at {:#x} under key {:#x}) of a \
             non-contiguous send in place (a READ a run) in 40 work requests failed: ",
            forged.addr, forged.key
        )) && cause.contains("(status "),
        "{cause}"
    );
}

/// A queue pair that cannot reach the peer's address fails its INIT -> RTR transition, and
/// the error names the peer, the transition and the kernel's reason.
#[test]
fn a_queue_pair_that_cannot_connect_is_named() {
    if !have_device() {
        return;
    }
    let devs = devices();
    let mut a = transport(0, 1, &devs[0]);
    let b = transport(1, 0, &devs[devs.len() - 1]);
    // An endpoint is "lid gid mtu psn credit-address credit-rkey qpns"; the GID becomes
    // 192.0.2.1 (TEST-NET-1, IPv4-mapped), which no route leads to.
    let mut fields: Vec<String> = b
        .endpoint()
        .split_ascii_whitespace()
        .map(String::from)
        .collect();
    fields[1] = "00000000000000000000ffffc0000201".into();
    let e = a
        .connect(1, &fields.join(" "), &b.rma_endpoint())
        .unwrap_err();
    println!("{e}");
    assert!(
        e.contains("connecting to rank 1: queue pair INIT -> RTR failed: "),
        "{e}"
    );
}

/// Registering memory that is not mapped fails, naming the range and the kernel's reason (a
/// buffer pointer gone bad looks like this to the transport).
#[test]
fn registering_unmapped_memory_is_named() {
    if !have_device() {
        return;
    }
    let mut t = transport(0, 1, &devices()[0]);
    // Below vm.mmap_min_addr (64 KiB by default), where nothing can be mapped. Not a range
    // unmapped by the test: another thread could map something there meanwhile. Nor one
    // mapped PROT_NONE: the kernel pins that for a read-only registration (FOLL_FORCE).
    let (addr, len) = (4096, 8192);
    let e = t.expose(addr, len).unwrap_err();
    println!("{e}");
    assert!(
        e.contains(&format!(
            "registering {len} bytes at {addr:#x} failed: Bad address"
        )),
        "{e}"
    );
}

/// An RDMA READ that the sender's device refuses (under a key the sender never gave, as a
/// read of a send buffer deregistered too soon would be) fails on the reader's side naming
/// the READ, where it read and the status; the refusal puts the sender's queue pair in error
/// with none of the sender's own work requests failing, so its next SEND is flushed, and the
/// sender names that cause rather than the flush alone (which said only "did it die?").
#[test]
fn a_read_the_sender_refuses_is_named_on_both_sides() {
    if !have_device() {
        return;
    }
    let (mut reader, mut sender) = reader_and_sender();
    let buf = vec![7u8; 8192];
    let (rkey, _registration) = sender.expose(buf.as_ptr() as usize, buf.len()).unwrap();
    // The same registration's index with another key: no registration of the sender's.
    let wrong = RemoteKey {
        addr: buf.as_ptr() as u64,
        key: u64::from(rkey ^ 1),
    };
    let mut target = vec![0u8; 4096];
    reader.read(1, wrong, &mut target, 9).unwrap();
    let cause = finish_read(&mut reader, 9).unwrap_err();
    println!("reader: {cause}");
    assert!(
        cause.contains(&format!(
            "an RDMA READ of 4096 bytes from rank 1 (at {:#x} under key {:#x}) in 1 work \
             requests failed: ",
            wrong.addr, wrong.key
        )) && cause.contains("vendor error"),
        "{cause}"
    );
    assert!(
        sender.send(0, b"after", &[]).unwrap(),
        "the SEND was not posted"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let error = loop {
        assert!(
            Instant::now() < deadline,
            "the sender's SEND never completed"
        );
        match sender.poll(&mut Reads::default()) {
            Ok(_) => thread::yield_now(),
            Err(e) => break e.to_string(),
        }
    };
    println!("sender: {error}");
    assert!(
        error.contains("a SEND to rank 0 failed: Work Request Flushed Error (status 5")
            && error.contains(
                "none of this rank's work requests to rank 0 failed before it, so its queue \
                 pair went to error"
            ),
        "{error}"
    );
}

const PORT_DOWN_ENV: &str = "MPIRT_TEST_VERBS_PORT_DOWN";

/// The network device under an RDMA device's port 1, and that port's state.
fn port_netdev(dev: &str) -> String {
    let path = format!("/sys/class/infiniband/{dev}/ports/1/gid_attrs/ndevs/0");
    fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .to_string()
}

fn port_state(dev: &str) -> String {
    fs::read_to_string(format!("/sys/class/infiniband/{dev}/ports/1/state"))
        .unwrap()
        .trim()
        .to_string()
}

fn set_link(netdev: &str, dev: &str, up: bool) {
    let how = if up { "up" } else { "down" };
    let st = Command::new("ip")
        .args(["link", "set", netdev, how])
        .status()
        .unwrap();
    assert!(st.success(), "ip link set {netdev} {how}: {st}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while port_state(dev).contains("ACTIVE") != up {
        assert!(
            Instant::now() < deadline,
            "{dev} stayed {}",
            port_state(dev)
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Puts the link back up even when the test fails.
struct LinkDown<'a> {
    netdev: String,
    dev: &'a str,
}

impl Drop for LinkDown<'_> {
    fn drop(&mut self) {
        set_link(&self.netdev, self.dev, true);
    }
}

/// A port that is not active is refused when the device opens, naming device, port and
/// state. Takes a network link down, so it runs only where asked to, by naming the RDMA
/// device in MPIRT_TEST_VERBS_PORT_DOWN (the Soft-RoCE guest does; never a shared host).
#[test]
fn a_port_that_is_down_is_named() {
    let Ok(dev) = env::var(PORT_DOWN_ENV) else {
        println!(
            "skipped: it takes a link down, so it runs only with {PORT_DOWN_ENV}=<rdma device> \
             (tools/test-all.sh sets it in the Soft-RoCE guest)"
        );
        return;
    };
    let netdev = port_netdev(&dev);
    set_link(&netdev, &dev, false);
    let _restore = LinkDown { netdev, dev: &dev };
    let mut w = singleton_wireup("verbs-port-down");
    let config = EngineConfig {
        verbs_devices: dev.clone(),
        ..verbs_config(None)
    };
    let e = Engine::new(&mut w, config).err().unwrap().to_string();
    println!("{e}");
    assert!(
        e.contains(&format!("port 1 of RDMA device {dev} is not active"))
            && e.contains("(state down)"),
        "{e}"
    );
    fs::remove_dir_all(w.dir).unwrap();
}

const ONE_SIDED_ENV: &str = "PML_VERBS_TEST_ONE_SIDED";
/// Rank 1's window in `one_sided_rank`, and the longest piece one work request carries there
/// (`MPIRT_VERBS_MAX_MSG`, far below Soft-RoCE's 2 GiB): a put of the whole window is 1024
/// pieces, four times what one queue pair holds.
const WINDOW: usize = 4 << 20;
const PIECE: usize = 4 << 10;

/// One-sided operations over verbs, failures provoked for real. Rank 0 puts rank 1's whole
/// window (more work requests than a queue pair holds: posted in parts) and gets it back;
/// then a write past the end of rank 1's window is refused before posting (the engine knows
/// the window's length), and an RDMA WRITE through a key rank 1 never gave out fails at the
/// device (a remote access error): that operation's wait fails naming it, its length, rank 1
/// and the status, a later one to rank 1 is refused naming the first cause, and messages
/// between the two still flow both ways, the engines going on.
#[test]
fn a_failed_one_sided_operation_fails_alone() {
    if let Ok(spec) = env::var(ONE_SIDED_ENV) {
        let (dir, rank) = spec.split_once(',').unwrap();
        one_sided_rank(PathBuf::from(dir), rank.parse().unwrap());
        return;
    }
    if !have_device() {
        return;
    }
    let dir = env::temp_dir().join(format!("pml-verbs-one-sided-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let outputs = run_children(
        "a_failed_one_sided_operation_fails_alone",
        2,
        ONE_SIDED_ENV,
        |r| format!("{},{r}", dir.display()),
        &[("MPIRT_VERBS_MAX_MSG", &PIECE.to_string())],
        Duration::from_secs(300),
    );
    print!("{}", every_rank_done(&outputs, ""));
    fs::remove_dir_all(dir).unwrap();
}

fn one_sided_rank(dir: PathBuf, rank: u32) {
    let mut w = DirWireup {
        dir,
        rank,
        size: 2,
        round: 0,
    };
    let config = EngineConfig {
        verbs_max_msg: env::var("MPIRT_VERBS_MAX_MSG")
            .ok()
            .map(|v| v.parse().unwrap()),
        ..verbs_config(None)
    };
    let mut e = Engine::new(&mut w, config).unwrap();
    let mut window = vec![0u8; WINDOW];
    let exposure = e
        .expose_window(window.as_mut_ptr(), WINDOW)
        .unwrap()
        .expect("verbs exposes windows");
    let remote = swap_windows(&mut e, window.as_ptr(), &exposure);
    // The directory's keys are not per rank: rank 1's alone.
    if rank == 1 {
        w.put("packed-key", &exposure.key).unwrap();
    }
    w.fence().unwrap();
    let data = (0..WINDOW).map(|i| (i % 251) as u8).collect::<Vec<u8>>();
    if rank == 0 {
        put_and_read_back(&mut e, 1, remote, &data, "verbs");
        // Posted in pieces: each is one work request, counted.
        let counted = e.counters();
        assert!(
            counted.rma_writes >= 4 && counted.rma_reads >= 4,
            "rank 0: a {WINDOW}-byte put and get with MPIRT_VERBS_MAX_MSG={PIECE} were not \
             split: {} RDMA WRITEs and {} READs counted",
            counted.rma_writes,
            counted.rma_reads
        );
        let sixteen = [1u8; 16];
        let write = pml::transport::RmaOp::Write {
            local: sixteen.as_ptr(),
            len: 16,
        };
        // Past the end of rank 1's window: refused before posting.
        let past = pml::RemoteKey {
            addr: remote.addr + WINDOW as u64 - 8,
            ..remote
        };
        // SAFETY: a refused write posts nothing, and `sixteen` outlives the call.
        let refused = unsafe { e.rma(1, write, past) }.unwrap_err().to_string();
        assert!(
            refused.contains(&format!(
                "a write of 16 bytes at byte {} of the window",
                WINDOW - 8
            )) && refused.contains(&format!("exposes {WINDOW} bytes")),
            "{refused}"
        );
        // Through an rkey rank 1 never gave out (its low byte, the key's variant, changed):
        // the device refuses it at the target.
        let mut packed = w.get(1, "packed-key").unwrap();
        packed[0] ^= 0x5a;
        let corrupted = pml::RemoteKey {
            key: e.remote_key(1, &packed).unwrap(),
            ..remote
        };
        // SAFETY: `sixteen` outlives the write, whose wait comes next.
        let bad = unsafe { e.rma(1, write, corrupted) }.unwrap();
        let error = rma_wait(&mut e, 1, bad).unwrap_err().to_string();
        println!("rank 0: the write through a corrupted key: {error}");
        assert!(
            error.starts_with("an RDMA WRITE of 16 bytes to rank 1 failed: ")
                && error.contains("(status "),
            "{error}"
        );
        // SAFETY: nothing is posted (refused), and `sixteen` outlives the call.
        let again = unsafe { e.rma(1, write, remote) }.unwrap_err().to_string();
        println!("rank 0: a later write: {again}");
        assert!(
            again.contains("was refused: an earlier one failed") && again.contains(&error),
            "{again}"
        );
    }
    // Messages still flow both ways, and rank 1's window holds the put.
    exchange(&mut e);
    if rank == 1 {
        assert!(window == data, "rank 1's window does not hold rank 0's put");
    }
    exchange(&mut e);
    e.release_window(exposure);
    println!("rank {rank} done");
}
