//! The UCX PML between real processes of this test binary, wired up through files (a
//! stand-in for rsrun's key-value service), once over UCX's TCP transport and once over its
//! shared-memory transports.
#![cfg(feature = "ucx")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use std::{env, fs};

use pml::blocks::{Block, Blocks};
use pml::ucx::{tag, UcxConfig, UcxPml};
use pml::{Done, EngineConfig, Pml, PmlError, SendMode, SourceSel, Started, Status, TagSel};

mod ranks_common;

use ranks_common::{
    checksum, every_rank_done, pattern, rank0_saw_rank1_die, run_children, DirWireup,
};

fn send(p: &mut UcxPml, to: u32, tag: i32, data: &[u8], mode: SendMode) {
    // SAFETY: `data` outlives the request: we wait for it before returning.
    let h = unsafe { p.post_send(0, p.rank(), to, tag, mode, data.as_ptr(), data.len()) }.unwrap();
    assert_eq!(p.wait(h).unwrap(), Done::Sent);
}

/// A send waited for at once (`UcxPml::post_awaited_send`: UCX's fast local completion).
fn send_blocking(p: &mut UcxPml, to: u32, tag: i32, data: &[u8], mode: SendMode) {
    // SAFETY: `data` outlives the request: we wait for it before returning.
    let h = unsafe { p.post_awaited_send(0, p.rank(), to, tag, mode, data.as_ptr(), data.len()) }
        .unwrap();
    assert_eq!(p.wait(h).unwrap(), Done::Sent);
}

fn try_recv(
    p: &mut UcxPml,
    context: u32,
    from: SourceSel,
    tag: TagSel,
    len: usize,
) -> Result<(Vec<u8>, Status), PmlError> {
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` outlives the request: we wait for it before returning.
    let h = unsafe { p.post_recv(context, from, tag, buf.as_mut_ptr(), buf.len()) }?;
    match p.wait(h)? {
        Done::Received(s) => Ok((buf, s)),
        Done::Sent => panic!("a receive completed as a send"),
    }
}

fn recv(p: &mut UcxPml, from: SourceSel, tag: TagSel, len: usize) -> (Vec<u8>, Status) {
    try_recv(p, 0, from, tag, len).unwrap()
}

/// The blocking receive (`UcxPml::recv`, in the PML's own request memory).
fn try_receive(
    p: &mut UcxPml,
    from: SourceSel,
    tag: TagSel,
    len: usize,
) -> Result<(Vec<u8>, Status), PmlError> {
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` outlives the call, which returns once the receive is done.
    let status = unsafe { p.recv(0, from, tag, buf.as_mut_ptr(), buf.len()) }?;
    Ok((buf, status))
}

/// How a started receive began, for failure messages (its buffer has no `Debug`).
fn summary<R>(started: &Result<Started<R>, PmlError>) -> String {
    match started {
        Ok(Started::Done { result, .. }) => format!("finished at once: {result:?}"),
        Ok(Started::Posted(h)) => format!("posted as {h}"),
        Ok(Started::Claimed) => "claimed".into(),
        Err(e) => format!("failed: {e}"),
    }
}

const SIZES: [usize; 5] = [0, 1, 8 << 10, 1 << 20, 16 << 20];

/// Every rank sends to every rank, itself included, collected with `wait_any`.
fn everyone_to_everyone(p: &mut UcxPml) {
    let (rank, size) = (p.rank(), p.size());
    let mut inbox = vec![[0u8; 4]; size as usize];
    let outgoing: Vec<[u8; 4]> = (0..size)
        .map(|to| (rank * 100 + to).to_le_bytes())
        .collect();
    let mut handles = Vec::new();
    for (from, slot) in inbox.iter_mut().enumerate() {
        // SAFETY: `inbox` outlives the requests, all waited for below.
        handles.push(
            unsafe {
                p.post_recv(
                    0,
                    SourceSel::Rank(from as u32),
                    TagSel::Tag(9),
                    slot.as_mut_ptr(),
                    4,
                )
            }
            .unwrap(),
        );
    }
    for to in 0..size {
        let out = &outgoing[to as usize];
        // SAFETY: `outgoing` outlives the requests, all waited for below.
        handles.push(
            unsafe { p.post_send(0, rank, to, 9, SendMode::Standard, out.as_ptr(), 4) }.unwrap(),
        );
    }
    while !handles.is_empty() {
        let i = p.wait_any(&handles).unwrap();
        assert!(p.test(handles.swap_remove(i)).unwrap().is_some());
    }
    for from in 0..size {
        assert_eq!(inbox[from as usize], (from * 100 + rank).to_le_bytes());
    }
}

/// Rank 0 checks; the others send. Each step ends before the next starts, since every
/// sender finishes its sends in order and rank 0 takes them in order.
fn rank_main(dir: &Path, rank: u32, size: u32, config: &UcxConfig) {
    let mut w = DirWireup {
        dir: dir.to_path_buf(),
        rank,
        size,
        round: 0,
    };
    let mut p = UcxPml::new(&mut w, config).unwrap();
    everyone_to_everyone(&mut p);
    if rank == 0 {
        println!("{}", p.description());
        // UCX_TLS is obeyed: TCP only, or shared memory only, between the ranks.
        let to_peers = p
            .description()
            .split("to peers by ")
            .nth(1)
            .unwrap_or_default();
        let to_peers = to_peers.split(',').next().unwrap_or_default();
        let by_tcp = to_peers.split('+').all(|t| t.starts_with("tcp/"));
        let by_shm = to_peers.split('+').all(|t| {
            ["posix/", "sysv/", "cma/", "knem/", "xpmem/"]
                .iter()
                .any(|s| t.starts_with(s))
        });
        match env::var("UCX_TLS").as_deref() {
            Ok("tcp") => assert!(by_tcp, "{}", p.description()),
            _ => assert!(by_shm, "{}", p.description()),
        }
        // Every size from every peer, received by ANY_SOURCE, checked by checksum; every
        // other size by the blocking receive.
        for _ in 1..size {
            for (i, &len) in SIZES.iter().enumerate() {
                let (from, tag) = (SourceSel::Any, TagSel::Tag(i as i32));
                let (buf, st) = if i % 2 == 0 {
                    recv(&mut p, from, tag, len)
                } else {
                    try_receive(&mut p, from, tag, len).unwrap()
                };
                assert_eq!(st.len, len);
                assert_eq!(st.tag, i as i32);
                assert_eq!(
                    checksum(&buf),
                    checksum(&pattern(len, st.source as usize)),
                    "len {len} from {}",
                    st.source
                );
            }
        }
        // ANY_TAG passes over a runtime (negative-tag) message that came first.
        let st = p.probe(0, SourceSel::Rank(1), TagSel::Tag(60)).unwrap();
        assert_eq!((st.source, st.tag, st.len), (1, 60, 3));
        let (buf, st) = recv(&mut p, SourceSel::Rank(1), TagSel::Any, 3);
        assert_eq!((buf.as_slice(), st.tag), (&b"usr"[..], 60));
        let (buf, st) = recv(&mut p, SourceSel::Rank(1), TagSel::Tag(-5), 3);
        assert_eq!((buf.as_slice(), st.tag), (&b"rt!"[..], -5));

        // Probe leaves the message; matched probe takes it, so no one else can.
        let st = p.probe(0, SourceSel::Any, TagSel::Tag(50)).unwrap();
        assert_eq!((st.source, st.len), (1, 100));
        assert_eq!(
            p.iprobe(0, SourceSel::Rank(1), TagSel::Tag(50)).unwrap(),
            Some(st)
        );
        let (message, mst) = p.mprobe(0, SourceSel::Rank(1), TagSel::Tag(50)).unwrap();
        assert_eq!(mst, st);
        assert_eq!(p.iprobe(0, SourceSel::Any, TagSel::Tag(50)).unwrap(), None);
        assert!(p
            .improbe(0, SourceSel::Any, TagSel::Tag(50))
            .unwrap()
            .is_none());
        let mut buf = vec![0u8; 100];
        // SAFETY: `buf` outlives the request, waited for below.
        let h = unsafe { p.post_matched_recv(message, buf.as_mut_ptr(), 100) }.unwrap();
        assert_eq!(p.wait(h).unwrap(), Done::Received(st));
        assert_eq!(buf, pattern(100, 50));
        let (message, st) = loop {
            if let Some(found) = p.improbe(0, SourceSel::Any, TagSel::Tag(51)).unwrap() {
                break found;
            }
        };
        assert_eq!((st.source, st.len), (1, 1 << 20));
        let mut buf = vec![0u8; 1 << 20];
        // SAFETY: `buf` outlives the request, waited for below.
        let h = unsafe { p.post_matched_recv(message, buf.as_mut_ptr(), 1 << 20) }.unwrap();
        assert_eq!(p.wait(h).unwrap(), Done::Received(st));
        assert!(
            buf == pattern(1 << 20, 51),
            "a matched 1 MiB receive arrived wrong"
        );

        // A synchronous send is not complete before its receive is posted.
        let (flag, _) = recv(&mut p, SourceSel::Rank(1), TagSel::Tag(77), 1);
        assert_eq!(flag, [1]);
        std::thread::sleep(Duration::from_millis(200));
        let (buf, _) = recv(&mut p, SourceSel::Rank(1), TagSel::Tag(78), 8);
        assert_eq!(buf, 200u64.to_le_bytes());

        // Messages longer than the buffer: the native PML's truncation error, both lengths,
        // from the posted receive and from the blocking one; the blocking receive's request
        // memory serves again after a failed receive.
        for (tag, len, room) in [(90, 1000, 10), (91, 1 << 20, 4096), (92, 1000, 10)] {
            let from = (SourceSel::Rank(1), TagSel::Tag(tag));
            let outcome = if tag == 92 {
                try_receive(&mut p, from.0, from.1, room)
            } else {
                try_recv(&mut p, 0, from.0, from.1, room)
            };
            match outcome {
                Err(PmlError::Truncated(t)) => {
                    assert_eq!((t.message_len, t.buffer_len), (len, room));
                    assert_eq!((t.status.source, t.status.tag), (1, tag));
                }
                other => panic!("a {len}-byte message into {room} bytes gave {other:?}"),
            }
        }

        // A receive whose message waits finishes as it starts, with no request left (the
        // immediate receive's fast path), a too-long one with the truncation error; one
        // whose message has not come is a request.
        p.probe(0, SourceSel::Rank(1), TagSel::Tag(94)).unwrap();
        let mut buf = [0u8; 10];
        // SAFETY: `buf` outlives the receive, which finished inside the call.
        match unsafe { p.start_recv(0, SourceSel::Rank(1), TagSel::Tag(93), buf.as_mut_ptr(), 10) }
        {
            Ok(Started::Done { result: Err(e), .. }) => assert!(
                matches!(&*e, PmlError::Truncated(t) if t.message_len == 1000),
                "{e}"
            ),
            other => panic!(
                "a waiting 1000-byte message into 10 bytes: {}",
                summary(&other)
            ),
        }
        // SAFETY: as above.
        match unsafe { p.start_recv(0, SourceSel::Any, TagSel::Tag(94), buf.as_mut_ptr(), 10) } {
            Ok(Started::Done { result: Ok(st), .. }) => {
                assert_eq!((st.source, st.tag, st.len), (1, 94, 8));
                assert_eq!(buf[..8], pattern(8, 94)[..]);
            }
            other => panic!("a waiting 8-byte message: {}", summary(&other)),
        }
        // SAFETY: `buf` outlives the request, cancelled and waited for below.
        let h = match unsafe {
            p.start_recv(0, SourceSel::Any, TagSel::Tag(95), buf.as_mut_ptr(), 4)
        } {
            Ok(Started::Posted(h)) => h,
            other => panic!("a receive with no message yet: {}", summary(&other)),
        };
        assert!(p.cancel(h).unwrap());
        assert_eq!(p.wait(h), Err(PmlError::Cancelled));

        // A receive nothing matches can be cancelled.
        let mut buf = [0u8; 4];
        // SAFETY: `buf` outlives the request, waited for below.
        let h = unsafe { p.post_recv(0, SourceSel::Any, TagSel::Tag(999), buf.as_mut_ptr(), 4) }
            .unwrap();
        assert!(p.cancel(h).unwrap());
        assert_eq!(p.wait(h), Err(PmlError::Cancelled));

        // Envelopes that do not fit the UCX tag are refused, not cut short.
        let data = [0u8; 1];
        // SAFETY: refused before UCX sees the buffer.
        let refused =
            unsafe { p.post_send(0, 0, 1, -(1 << 30), SendMode::Standard, data.as_ptr(), 1) };
        match refused {
            Err(PmlError::OutOfRange(what)) => assert!(what.contains("-1073741824"), "{what}"),
            other => panic!("a tag of -2^30 gave {other:?}"),
        }
        assert!(matches!(
            p.iprobe(tag::MAX_CONTEXT + 1, SourceSel::Any, TagSel::Any),
            Err(PmlError::OutOfRange(_))
        ));

        sleeps_until_woken(&mut p);
        blocks_in_place(&mut p);

        // Everyone is done: release the senders.
        for peer in 1..size {
            recv(&mut p, SourceSel::Rank(peer), TagSel::Tag(100), 0);
            send(&mut p, peer, 101, &[], SendMode::Standard);
        }
        println!("rank 0 checked {} peers", size - 1);
    } else {
        // Every other size by the blocking send, in the other order than rank 0 receives.
        for (i, &len) in SIZES.iter().enumerate() {
            let sender = if i % 2 == 0 { send_blocking } else { send };
            sender(
                &mut p,
                0,
                i as i32,
                &pattern(len, rank as usize),
                SendMode::Standard,
            );
        }
        if rank == 1 {
            send(&mut p, 0, -5, b"rt!", SendMode::Standard);
            send(&mut p, 0, 60, b"usr", SendMode::Standard);
            send(&mut p, 0, 50, &pattern(100, 50), SendMode::Standard);
            send_blocking(&mut p, 0, 51, &pattern(1 << 20, 51), SendMode::Standard);

            let data = 200u64.to_le_bytes();
            // SAFETY: `data` outlives the request, waited for below.
            let h = unsafe { p.post_send(0, 1, 0, 78, SendMode::Synchronous, data.as_ptr(), 8) }
                .unwrap();
            send(&mut p, 0, 77, &[1], SendMode::Standard);
            let t = Instant::now();
            assert_eq!(p.wait(h).unwrap(), Done::Sent);
            let waited = t.elapsed().as_millis();
            assert!(
                waited >= 150,
                "synchronous send completed {waited} ms after the flag"
            );

            send(&mut p, 0, 90, &pattern(1000, 90), SendMode::Standard);
            send(&mut p, 0, 91, &pattern(1 << 20, 91), SendMode::Standard);
            send(&mut p, 0, 92, &pattern(1000, 92), SendMode::Standard);
            send(&mut p, 0, 93, &pattern(1000, 93), SendMode::Standard);
            send(&mut p, 0, 94, &pattern(8, 94), SendMode::Standard);

            // The other side of `sleeps_until_woken`.
            std::thread::sleep(Duration::from_millis(300));
            send(&mut p, 0, 110, &[], SendMode::Standard);
            for _ in 0..PING_PONGS {
                try_receive(&mut p, SourceSel::Rank(0), TagSel::Tag(111), 8).unwrap();
                send(&mut p, 0, 112, &[0; 8], SendMode::Standard);
            }
            blocks_in_place(&mut p);
        }
        send(&mut p, 0, 100, &[], SendMode::Standard);
        recv(&mut p, SourceSel::Rank(0), TagSel::Tag(101), 0);
    }
    p.flush_all().unwrap();
}

fn thread_cpu_time() -> Duration {
    // SAFETY: all-zero is a valid rusage, which getrusage fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid rusage to write; RUSAGE_THREAD asks for this thread only,
    // leaving out UCX's own threads.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
        0
    );
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

const PING_PONGS: usize = 200;

/// A rank blocked in a wait sleeps (it does not burn its core while rank 1 dawdles), and a
/// peer's message wakes it through the worker's event fd: a wake-up missed would cost the
/// 10 ms sleep bound each time, 2 s over the ping-pongs, and with no spin every wait sleeps.
fn sleeps_until_woken(p: &mut UcxPml) {
    let (wall, cpu) = (Instant::now(), thread_cpu_time());
    // The blocking receive sleeps on the worker's event fd as a posted receive's wait does.
    try_receive(p, SourceSel::Rank(1), TagSel::Tag(110), 0).unwrap();
    let (wall, cpu) = (wall.elapsed(), thread_cpu_time() - cpu);
    assert!(
        wall >= Duration::from_millis(250),
        "rank 1 sent after only {wall:?}"
    );
    assert!(cpu < wall / 2, "a {wall:?} wait used {cpu:?} of CPU");
    let t = Instant::now();
    for _ in 0..PING_PONGS {
        send(p, 1, 111, &[0; 8], SendMode::Standard);
        recv(p, SourceSel::Rank(1), TagSel::Tag(112), 8);
    }
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "{PING_PONGS} ping-pongs took {took:?}"
    );
    println!("{PING_PONGS} ping-pongs in {took:?}; a {wall:?} wait used {cpu:?} of CPU");
}

/// The layouts `blocks_in_place` moves, each at two counts, eager and rendezvous: a column
/// of doubles (8-byte blocks, by UCX's generic datatype) and two 4 KiB blocks an element (by
/// UCX's iov), as (extent, blocks, counts).
fn block_layouts() -> [(usize, Vec<Block>, [usize; 2]); 2] {
    let column = vec![Block { offset: 8, len: 8 }];
    let wide = vec![
        Block {
            offset: 16,
            len: 4096,
        },
        Block {
            offset: 4200,
            len: 4096,
        },
    ];
    [
        (32, column, [16, 1 << 17]),
        ((8 << 10) + 200, wide, [1, 128]),
    ]
}

const GUARD: u8 = 0xee;

/// Non-contiguous buffers go to UCX in place (`post_send_blocks`, `post_recv_blocks`,
/// `post_matched_recv_blocks`), with no staging copy, from rank 1 to rank 0: the bytes of the
/// blocks are the sender's, those between them keep their guard, the counts say which way
/// each went (the generic datatype for 8-byte blocks, an iov for 4 KiB ones); a message
/// longer than the blocks fails as truncated against their packed length, eager or by
/// rendezvous, posted or matched; a cancelled receive writes nothing; a zero-length message
/// leaves the blocks as they were.
fn blocks_in_place(p: &mut UcxPml) {
    let before = p.counters();
    let mut cases = 0;
    for (layout, (extent, list, counts)) in block_layouts().into_iter().enumerate() {
        for count in counts {
            // Tags of their own for each case's two messages, received in order.
            let seed = 120 + cases * 2;
            let span = count * extent;
            if p.rank() == 1 {
                let source = pattern(span, seed);
                let blocks = Blocks::new(source.as_ptr(), count, extent, &list).unwrap();
                for tag in [seed, seed + 1] {
                    // SAFETY: `source` and `list` outlive the send, waited for here.
                    let h = unsafe {
                        p.post_send_blocks(0, 1, 0, tag as i32, SendMode::Standard, &blocks)
                    }
                    .unwrap()
                    .expect("a non-empty send goes in place");
                    assert_eq!(p.wait(h).unwrap(), Done::Sent);
                }
                cases += 1;
                continue;
            }
            let source = pattern(span, seed);
            let inside = |i: usize| {
                list.iter()
                    .any(|b| (b.offset..b.offset + b.len).contains(&(i % extent)))
            };
            for matched in [false, true] {
                let mut into = vec![GUARD; span];
                let blocks = Blocks::new(into.as_mut_ptr(), count, extent, &list).unwrap();
                let (from, tag) = (
                    SourceSel::Rank(1),
                    TagSel::Tag((seed + usize::from(matched)) as i32),
                );
                let h = if matched {
                    let (message, _) = p.mprobe(0, from, tag).unwrap();
                    // SAFETY: `into` and `list` outlive the receive, waited for here.
                    unsafe { p.post_matched_recv_blocks(message, &blocks, Some(1)) }
                        .unwrap()
                        .expect("a non-empty receive goes in place")
                } else {
                    // SAFETY: as above.
                    unsafe { p.post_recv_blocks(0, from, tag, &blocks, Some(1)) }
                        .unwrap()
                        .expect("a non-empty receive goes in place")
                };
                match p.wait(h).unwrap() {
                    Done::Received(st) => assert_eq!(st.len, blocks.len()),
                    Done::Sent => panic!("a receive completed as a send"),
                }
                let wrong =
                    (0..span).find(|&i| into[i] != if inside(i) { source[i] } else { GUARD });
                assert_eq!(
                    wrong, None,
                    "layout {layout}, {count} elements, matched {matched}: first wrong byte"
                );
            }
            cases += 1;
        }
    }
    assert_eq!(cases, 4);
    // Longer than the blocks, by the generic datatype and by the iov, eager and at rendezvous
    // size (1 MiB and more), posted and matched (`mprobe`, then `post_matched_recv_blocks`):
    // the receive fails as truncated, the bytes between the blocks keep their guard, and the
    // sender's send completes (UCX ends a truncated rendezvous too).
    let mut tag = 160;
    for (layout, (extent, list, counts)) in block_layouts().into_iter().enumerate() {
        for count in counts {
            let room = count * list.iter().map(|b| b.len).sum::<usize>();
            for matched in [false, true] {
                tag += 1;
                if p.rank() == 1 {
                    send(p, 0, tag, &pattern(room + 100, 140), SendMode::Standard);
                    continue;
                }
                let mut into = vec![GUARD; count * extent];
                let blocks = Blocks::new(into.as_mut_ptr(), count, extent, &list).unwrap();
                let from = SourceSel::Rank(1);
                let h = if matched {
                    let (message, _) = p.mprobe(0, from, TagSel::Tag(tag)).unwrap();
                    // SAFETY: as above.
                    unsafe { p.post_matched_recv_blocks(message, &blocks, Some(1)) }
                        .unwrap()
                        .expect("in place")
                } else {
                    // SAFETY: as above.
                    unsafe { p.post_recv_blocks(0, from, TagSel::Tag(tag), &blocks, Some(1)) }
                        .unwrap()
                        .expect("in place")
                };
                let what = format!(
                    "layout {layout}: {} bytes into blocks of {room}, matched {matched}",
                    room + 100
                );
                match p.wait(h) {
                    Err(PmlError::Truncated(t)) => {
                        assert_eq!((t.message_len, t.buffer_len), (room + 100, room), "{what}")
                    }
                    other => panic!("{what}: {other:?}"),
                }
                let inside = |i: usize| {
                    list.iter()
                        .any(|b| (b.offset..b.offset + b.len).contains(&(i % extent)))
                };
                let gap = (0..into.len()).find(|&i| !inside(i) && into[i] != GUARD);
                assert_eq!(gap, None, "{what}: a byte between the blocks written");
            }
        }
    }
    // A receive into blocks cancelled before any message came, by either datatype: cancel
    // says so, the wait answers Cancelled, the blocks keep their guard, and the next message
    // with that tag lands in the next receive whole.
    for (layout, (extent, list, counts)) in block_layouts().into_iter().enumerate() {
        let tag = 180 + layout as i32;
        let span = counts[0] * extent;
        let source = pattern(span, tag as usize);
        let blocks_of = |buf: *const u8| Blocks::new(buf, counts[0], extent, &list).unwrap();
        if p.rank() == 1 {
            // Only once rank 0 has cancelled its receive (tag 190 says so).
            recv(p, SourceSel::Rank(0), TagSel::Tag(190), 0);
            let blocks = blocks_of(source.as_ptr());
            // SAFETY: `source` and `list` outlive the send, waited for here.
            let h = unsafe { p.post_send_blocks(0, 1, 0, tag, SendMode::Standard, &blocks) }
                .unwrap()
                .expect("in place");
            assert_eq!(p.wait(h).unwrap(), Done::Sent);
            continue;
        }
        let mut into = vec![GUARD; span];
        let blocks = blocks_of(into.as_mut_ptr());
        let from = SourceSel::Rank(1);
        // SAFETY: as above.
        let h = unsafe { p.post_recv_blocks(0, from, TagSel::Tag(tag), &blocks, Some(1)) }
            .unwrap()
            .expect("in place");
        assert!(p.cancel(h).unwrap(), "layout {layout}: cancel");
        assert_eq!(p.wait(h), Err(PmlError::Cancelled), "layout {layout}");
        assert!(
            into.iter().all(|&b| b == GUARD),
            "layout {layout}: cancelled, yet written"
        );
        send(p, 1, 190, &[], SendMode::Standard);
        // SAFETY: as above.
        let h = unsafe { p.post_recv_blocks(0, from, TagSel::Tag(tag), &blocks, Some(1)) }
            .unwrap()
            .expect("in place");
        match p.wait(h).unwrap() {
            Done::Received(st) => assert_eq!(st.len, blocks.len(), "layout {layout}"),
            Done::Sent => panic!("a receive completed as a send"),
        }
        let inside = |i: usize| {
            list.iter()
                .any(|b| (b.offset..b.offset + b.len).contains(&(i % extent)))
        };
        let wrong = (0..span).find(|&i| into[i] != if inside(i) { source[i] } else { GUARD });
        assert_eq!(
            wrong, None,
            "layout {layout}: after a cancel, first wrong byte"
        );
    }
    // A zero-length message into non-empty blocks, by either datatype: received as 0 bytes,
    // nothing written.
    for (layout, (extent, list, counts)) in block_layouts().into_iter().enumerate() {
        let tag = 185 + layout as i32;
        if p.rank() == 1 {
            send(p, 0, tag, &[], SendMode::Standard);
            continue;
        }
        let mut into = vec![GUARD; counts[0] * extent];
        let blocks = Blocks::new(into.as_mut_ptr(), counts[0], extent, &list).unwrap();
        // SAFETY: as above.
        let h = unsafe {
            p.post_recv_blocks(0, SourceSel::Rank(1), TagSel::Tag(tag), &blocks, Some(1))
        }
        .unwrap()
        .expect("in place");
        match p.wait(h).unwrap() {
            Done::Received(st) => assert_eq!(st.len, 0, "layout {layout}"),
            Done::Sent => panic!("a receive completed as a send"),
        }
        assert!(
            into.iter().all(|&b| b == GUARD),
            "layout {layout}: 0 bytes, yet written"
        );
    }
    let after = p.counters();
    let (iov, generic) = match p.rank() {
        1 => (
            after.ucx_iov_sends - before.ucx_iov_sends,
            after.ucx_generic_sends - before.ucx_generic_sends,
        ),
        _ => (
            after.ucx_iov_receives - before.ucx_iov_receives,
            after.ucx_generic_receives - before.ucx_generic_receives,
        ),
    };
    // Two messages at each of two counts of each layout and one after a cancel; receiving,
    // four too long, the cancelled receive and the zero-length one too.
    let extra = if p.rank() == 0 { 7 } else { 1 };
    assert_eq!(
        (iov, generic),
        (4 + extra, 4 + extra),
        "in place by iov, generic"
    );
    println!(
        "rank {}: non-contiguous buffers in place: {iov} by iov, {generic} by the generic datatype",
        p.rank()
    );
}

const CHILD_ENV: &str = "PML_UCX_TEST_RANK";

#[test]
fn ranks_over_ucx_tcp_and_shared_memory() {
    if let Ok(spec) = env::var(CHILD_ENV) {
        let mut it = spec.split(',');
        let (dir, rank, size) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let config = UcxConfig {
            spin: Duration::from_micros(it.next().unwrap().parse().unwrap()),
            detect_peer_failure: it.next() == Some("detect"),
            iov_min_block: EngineConfig::default().ucx_iov_min_block,
            // In place at every size over TCP too: the block tests count every message so.
            tcp_stage_below: 0,
        };
        rank_main(
            Path::new(dir),
            rank.parse().unwrap(),
            size.parse().unwrap(),
            &config,
        );
        return;
    }
    // A spin of 0 makes every wait sleep on the worker's event fd. UCX's shared-memory
    // transports cannot detect dead peers, so only TCP runs with detection (see UcxConfig).
    for (size, transports, spin_us, failures) in [
        (2, "tcp", 100, "detect"),
        (3, "tcp", 0, "detect"),
        (3, "tcp", 0, "ignore"),
        (2, "sm,self", 100, "ignore"),
        (3, "sm,self", 0, "ignore"),
    ] {
        let name = format!(
            "pml-ucx-{}-{size}-{}-{failures}",
            std::process::id(),
            transports.replace(',', "-")
        );
        let dir = env::temp_dir().join(name);
        fs::create_dir_all(&dir).unwrap();
        let outputs = run_children(
            "ranks_over_ucx_tcp_and_shared_memory",
            size,
            CHILD_ENV,
            |r| format!("{},{r},{size},{spin_us},{failures}", dir.display()),
            &[("UCX_TLS", transports)],
            Duration::from_secs(120),
        );
        for (r, o) in outputs.iter().enumerate() {
            assert!(
                o.status.success(),
                "UCX_TLS={transports} size {size} rank {r} failed:\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let out0 = String::from_utf8_lossy(&outputs[0].stdout);
        assert!(
            out0.contains(&format!("rank 0 checked {} peers", size - 1)),
            "{out0}"
        );
        println!(
            "{}",
            out0.lines()
                .find(|l| l.contains("over UCX"))
                .unwrap_or_default()
        );
        println!(
            "UCX_TLS={transports}, {size} ranks, spin {spin_us} us, peer failures: {failures}: \
             passed; {}",
            out0.lines()
                .find(|l| l.contains("ping-pongs"))
                .unwrap_or_default()
        );
        fs::remove_dir_all(dir).unwrap();
    }
}

const MIXED_ENV: &str = "PML_UCX_TEST_MIXED";

/// In a job whose ranks 0 and 1 share memory while rank 2 is reached over TCP only (its
/// `UCX_TLS`), a receive of a column (8-byte blocks: the generic datatype) under the staging
/// threshold is staged when it names rank 2 as its source, by source or matched, and goes in
/// place when it names rank 1 or any source (not every other rank is over TCP); the senders
/// decide alike by their peer. Every value lands in its block either way.
#[test]
fn receives_stage_by_their_sources_transport() {
    const ROWS: usize = 4096;
    let list = [Block { offset: 8, len: 8 }];
    if let Ok(spec) = env::var(MIXED_ENV) {
        let (dir, rank) = spec.split_once(',').unwrap();
        let rank: u32 = rank.parse().unwrap();
        // Read by UcxPml::new: TCP alone on rank 2, whose peers then reach it so.
        env::set_var("UCX_TLS", if rank == 2 { "tcp" } else { "sm,self,tcp" });
        let mut w = DirWireup {
            dir: PathBuf::from(dir),
            rank,
            size: 3,
            round: 0,
        };
        let config = UcxConfig {
            spin: Duration::from_micros(100),
            detect_peer_failure: false,
            iov_min_block: EngineConfig::default().ucx_iov_min_block,
            tcp_stage_below: 1 << 30,
        };
        let mut p = UcxPml::new(&mut w, &config).unwrap();
        if rank > 0 {
            let source = pattern(ROWS * 32, rank as usize);
            let blocks = Blocks::new(source.as_ptr(), ROWS, 32, &list).unwrap();
            // Tags of its own: a receive from any source takes this rank's message only.
            for tag in [1, 2, 3].map(|t| t + 10 * rank as i32) {
                // SAFETY: `source` and `list` outlive the send, waited for here.
                let posted =
                    unsafe { p.post_send_blocks(0, rank, 0, tag, SendMode::Standard, &blocks) }
                        .unwrap();
                let h = match posted {
                    Some(h) => h,
                    None => {
                        let packed: Vec<u8> = (0..ROWS)
                            .flat_map(|r| source[r * 32 + 8..r * 32 + 16].to_vec())
                            .collect();
                        send(&mut p, 0, tag, &packed, SendMode::Standard);
                        continue;
                    }
                };
                assert_eq!(p.wait(h).unwrap(), Done::Sent);
            }
            let c = p.counters();
            let sends = (c.ucx_staged_sends, c.ucx_generic_sends);
            assert_eq!(
                sends,
                [(0, 0), (0, 3), (3, 0)][rank as usize],
                "rank {rank}: staged, generic sends"
            );
            println!("rank {rank} done");
            return;
        }
        for peer in [1u32, 2] {
            let source = pattern(ROWS * 32, peer as usize);
            for (tag, how) in [(1, "by source"), (2, "matched"), (3, "by any source")] {
                let tag = tag + 10 * peer as i32;
                let mut into = vec![GUARD; ROWS * 32];
                let blocks = Blocks::new(into.as_mut_ptr(), ROWS, 32, &list).unwrap();
                let from = SourceSel::Rank(peer);
                let landed = match how {
                    "by source" => {
                        // SAFETY: `into` and `list` outlive the receive, waited for here.
                        unsafe {
                            p.post_recv_blocks(0, from, TagSel::Tag(tag), &blocks, Some(peer))
                        }
                        .unwrap()
                        .map(|h| p.wait(h).unwrap())
                    }
                    "matched" => {
                        let (message, _) = p.mprobe(0, from, TagSel::Tag(tag)).unwrap();
                        // SAFETY: as above.
                        match unsafe { p.post_matched_recv_blocks(message, &blocks, Some(peer)) }
                            .unwrap()
                        {
                            Ok(h) => Some(p.wait(h).unwrap()),
                            Err(message) => {
                                let mut packed = vec![0u8; ROWS * 8];
                                // SAFETY: `packed` outlives the receive, waited for here.
                                let h = unsafe {
                                    p.post_matched_recv(message, packed.as_mut_ptr(), packed.len())
                                }
                                .unwrap();
                                p.wait(h).unwrap();
                                for (r, v) in packed.chunks(8).enumerate() {
                                    into[r * 32 + 8..r * 32 + 16].copy_from_slice(v);
                                }
                                None
                            }
                        }
                    }
                    _ => {
                        // SAFETY: as above.
                        unsafe {
                            p.post_recv_blocks(0, SourceSel::Any, TagSel::Tag(tag), &blocks, None)
                        }
                        .unwrap()
                        .map(|h| p.wait(h).unwrap())
                    }
                };
                if how == "by source" && landed.is_none() {
                    let (packed, _) = recv(&mut p, from, TagSel::Tag(tag), ROWS * 8);
                    for (r, v) in packed.chunks(8).enumerate() {
                        into[r * 32 + 8..r * 32 + 16].copy_from_slice(v);
                    }
                }
                let staged = landed.is_none();
                assert_eq!(
                    staged,
                    peer == 2 && how != "by any source",
                    "from rank {peer} {how}: staged"
                );
                let wrong = (0..ROWS * 32).find(|&i| {
                    into[i]
                        != if i % 32 >= 8 && i % 32 < 16 {
                            source[i]
                        } else {
                            GUARD
                        }
                });
                assert_eq!(wrong, None, "from rank {peer} {how}: first wrong byte");
            }
        }
        let c = p.counters();
        assert_eq!(
            (c.ucx_staged_receives, c.ucx_generic_receives),
            (2, 4),
            "rank 0: staged, generic receives"
        );
        println!("rank 0 done");
        return;
    }
    let dir = env::temp_dir().join(format!("pml-ucx-mixed-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let outputs = run_children(
        "receives_stage_by_their_sources_transport",
        3,
        MIXED_ENV,
        |r| format!("{},{r}", dir.display()),
        &[],
        Duration::from_secs(120),
    );
    every_rank_done(
        &outputs,
        "ranks 0 and 1 on shared memory, rank 2 over TCP: ",
    );
    fs::remove_dir_all(dir).unwrap();
}

const DEATH_ENV: &str = "PML_UCX_TEST_DEATH";

/// Rank 1 dies (exits without a word, as a crash would) while rank 0 waits for a message
/// from it: rank 0's wait fails naming rank 1 instead of hanging, and the failure stops the
/// PML: later sends, waits and progress fail with it, and nothing lands in a posted receive.
#[test]
fn a_dead_peer_is_an_error_not_a_hang() {
    if let Ok(spec) = env::var(DEATH_ENV) {
        let mut it = spec.split(',');
        let (dir, rank) = (it.next().unwrap(), it.next().unwrap().parse().unwrap());
        let mut w = DirWireup {
            dir: PathBuf::from(dir),
            rank,
            size: 2,
            round: 0,
        };
        let config = UcxConfig {
            spin: Duration::from_micros(100),
            detect_peer_failure: true,
            iov_min_block: EngineConfig::default().ucx_iov_min_block,
            tcp_stage_below: EngineConfig::default().ucx_tcp_stage_below,
        };
        let mut p = UcxPml::new(&mut w, &config).unwrap();
        everyone_to_everyone(&mut p);
        if rank == 1 {
            // Dies once rank 0 holds "late" unreceived and has answered: a rank that died
            // at once could take messages of the exchange along with it.
            send(&mut p, 0, 8, b"late", SendMode::Standard);
            recv(&mut p, SourceSel::Rank(0), TagSel::Tag(9), 0);
            // SAFETY: _exit ends the process at once, closing nothing: a crash, to the peer.
            unsafe { libc::_exit(0) };
        }
        p.probe(0, SourceSel::Rank(1), TagSel::Tag(8)).unwrap();
        send(&mut p, 1, 9, b"", SendMode::Standard);
        let mut inbox = [0u8; 8];
        // SAFETY: `inbox` outlives `p`, dropped at the end of this function.
        let waiting =
            unsafe { p.post_recv(0, SourceSel::Any, TagSel::Tag(7), inbox.as_mut_ptr(), 8) }
                .unwrap();
        let t = Instant::now();
        // The blocking receive, in the PML's own request memory, cancelled when it fails.
        let failure = match try_receive(&mut p, SourceSel::Rank(1), TagSel::Tag(6), 4) {
            Err(e) if matches!(&e, PmlError::Transport(t) if t.peer == 1) => e,
            other => panic!("a blocking receive from a dead rank gave {other:?}"),
        };
        println!("after {:?}: {failure}", t.elapsed());
        // The failure stopped the PML: every later call fails naming it, and nothing lands
        // in a buffer, neither the waiting "late" nor, in the wildcard receive posted before
        // the failure, a message sent to itself.
        let stopped = Err(PmlError::Stopped(Box::new(failure)));
        let mut late = [0u8; 4];
        // SAFETY: `late` outlives the call.
        let received =
            unsafe { p.recv(0, SourceSel::Rank(1), TagSel::Tag(8), late.as_mut_ptr(), 4) };
        assert_eq!(
            received.map(drop),
            stopped,
            "a blocking receive after the failure"
        );
        assert_eq!(late, [0; 4], "a waiting message landed after the failure");
        let immediate = try_recv(&mut p, 0, SourceSel::Rank(1), TagSel::Tag(5), 4);
        assert_eq!(immediate.map(drop), stopped, "a receive after the failure");
        for to in [1, 0] {
            let data = [9u8; 8];
            // SAFETY: refused before UCX sees the buffer.
            let sent = unsafe { p.post_send(0, 0, to, 7, SendMode::Standard, data.as_ptr(), 8) };
            assert_eq!(
                sent.map(drop),
                stopped,
                "a send to rank {to} after the failure"
            );
        }
        assert_eq!(
            p.progress().map(drop),
            stopped,
            "progress after the failure"
        );
        assert_eq!(
            p.test(waiting).map(drop),
            stopped,
            "a test after the failure"
        );
        assert_eq!(
            p.wait(waiting).map(drop),
            stopped,
            "a wait after the failure"
        );
        assert_eq!(p.flush_all(), stopped, "flush after the failure");
        assert_eq!(
            inbox, [0; 8],
            "a message landed in a receive whose wait failed"
        );
        println!("rank 0 saw rank 1 die");
        return;
    }
    let dir = env::temp_dir().join(format!("pml-ucx-death-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let outputs = run_children(
        "a_dead_peer_is_an_error_not_a_hang",
        2,
        DEATH_ENV,
        |r| format!("{},{r}", dir.display()),
        &[("UCX_TLS", "tcp")],
        Duration::from_secs(60),
    );
    println!("{}", rank0_saw_rank1_die(&outputs, "UCX_TLS=tcp"));
    fs::remove_dir_all(dir).unwrap();
}

/// What a stall report reads of the UCX PML (`Waiting::queues`), on one rank sending to
/// itself: the receive it posted, the synchronous send no receive matched, and of the
/// messages UCX holds unreceived, those its probes find near the posted receive (the oldest
/// one here, which is the synchronous send's; UCX shows no more of its queue).
#[test]
fn the_stall_queues_list_what_ucx_has_not_finished() {
    use pml::stall::{Awaited, AwaitedRequest, QueuedSend, Selectors};
    use pml::Waiting;

    let dir = env::temp_dir().join(format!("pml-ucx-queues-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let mut wireup = DirWireup {
        dir: dir.clone(),
        rank: 0,
        size: 1,
        round: 0,
    };
    let config = UcxConfig {
        spin: Duration::from_micros(100),
        detect_peer_failure: false,
        iov_min_block: EngineConfig::default().ucx_iov_min_block,
        tcp_stage_below: EngineConfig::default().ucx_tcp_stage_below,
    };
    let mut p = UcxPml::new(&mut wireup, &config).unwrap();
    let mut posted_buf = [0u8; 8];
    // SAFETY: the buffer outlives the request, cancelled and collected below.
    let receive = unsafe {
        p.post_recv(
            4,
            SourceSel::Rank(0),
            TagSel::Tag(5),
            posted_buf.as_mut_ptr(),
            8,
        )
    }
    .unwrap();
    let data = [7u8; 24];
    // SAFETY: `data` outlives the request, received and collected below.
    let synchronous =
        unsafe { p.post_send(4, 0, 0, 6, SendMode::Synchronous, data.as_ptr(), 24) }.unwrap();
    send(&mut p, 0, 7, &[1], SendMode::Standard);
    for _ in 0..1000 {
        p.progress().unwrap();
    }
    // A wait on the receive: it is what the wait waits for, with its buffer's size.
    let queues = p.queues(Awaited::Request(receive));
    assert_eq!(queues.claim, None);
    let posted = Selectors::receive(4, SourceSel::Rank(0), TagSel::Tag(5), 8);
    assert_eq!(queues.posted, [posted]);
    assert_eq!(queues.awaited, Some(vec![AwaitedRequest::Receive(posted)]));
    assert_eq!(
        queues.sends,
        [QueuedSend {
            context: 4,
            peer: 0,
            tag: 6,
            bytes: 24,
            waits_for: "a matching receive (synchronous send)",
        }]
    );
    assert_eq!(
        queues.unexpected,
        [Selectors {
            context: 4,
            source: SourceSel::Rank(0),
            tag: TagSel::Tag(6),
            bytes: 24,
        }]
    );
    // Everything finished: nothing is listed.
    assert!(p.cancel(receive).unwrap());
    assert!(p.wait(receive).is_err());
    try_recv(&mut p, 4, SourceSel::Rank(0), TagSel::Tag(6), 24).unwrap();
    recv(&mut p, SourceSel::Rank(0), TagSel::Tag(7), 1);
    assert_eq!(p.wait(synchronous).unwrap(), Done::Sent);
    assert_eq!(p.queues(Awaited::State), pml::stall::Queues::default());
    drop(p);
    fs::remove_dir_all(dir).unwrap();
}
