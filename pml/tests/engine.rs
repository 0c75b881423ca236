//! The engine over real transports: a singleton looping back to itself, and several real
//! processes on one host over shared memory, wired up through files (a stand-in for rsrun's
//! key-value service that keeps this crate's tests free of the launcher).

use std::path::Path;
use std::time::{Duration, Instant};
use std::{env, fs};

use pml::blocks::{Block, Blocks};
use pml::shared_arena::ARENA_MIN_BYTES;
use pml::{
    Done, Engine, EngineConfig, Pml, PmlError, SendMode, SourceSel, TagSel, TransportChoice,
    Waiting,
};

mod ranks_common;

use ranks_common::{
    checksum, ofi_on_loopback, pattern, recv, run_children, send, singleton_wireup, DirWireup,
};

// Lets the verbs test check that the registration cache works.
#[global_allocator]
static ALLOCATOR: pml::TrackingAllocator = pml::TrackingAllocator;

#[test]
fn singleton_sends_to_itself_by_every_protocol() {
    let mut w = singleton_wireup("engine-self");
    let dir = w.dir.clone();
    let config = EngineConfig::default();
    let limit = config.shm_eager_limit;
    let mut e = Engine::new(&mut w, config).unwrap();
    for len in [0, 1, 100, limit, limit + 1, 1 << 20] {
        let data = pattern(len, len);
        let mut buf = vec![0u8; len];
        // SAFETY: both buffers outlive their requests, waited for below.
        let r =
            unsafe { e.post_recv(0, SourceSel::Rank(0), TagSel::Tag(3), buf.as_mut_ptr(), len) }
                .unwrap();
        let s = unsafe { e.post_send(0, 0, 0, 3, SendMode::Standard, data.as_ptr(), len) }.unwrap();
        assert_eq!(e.wait(s).unwrap(), Done::Sent);
        assert!(matches!(e.wait(r).unwrap(), Done::Received(st) if st.len == len));
        assert_eq!(buf, data, "len {len}");
    }
    assert!(
        e.counters().remote_reads >= 2,
        "large self-sends go by rendezvous"
    );
    fs::remove_dir_all(dir).unwrap();
}

#[cfg(not(feature = "verbs"))]
#[test]
fn verbs_without_the_feature_is_a_named_error() {
    let mut w = singleton_wireup("engine-no-verbs");
    let config = EngineConfig {
        transport: TransportChoice::Verbs,
        ..EngineConfig::default()
    };
    let e = Engine::new(&mut w, config).err().unwrap().to_string();
    assert!(e.contains("built without RDMA verbs"), "{e}");
    fs::remove_dir_all(w.dir).unwrap();
}

/// Runs wherever the feature is built, device or not: an unknown device is named.
#[cfg(feature = "verbs")]
#[test]
fn ranks_over_verbs_refuse_an_unknown_device() {
    let mut w = singleton_wireup("engine-bad-device");
    let config = EngineConfig {
        transport: TransportChoice::Verbs,
        verbs_devices: "no-such-hca".into(),
        ..EngineConfig::default()
    };
    let e = Engine::new(&mut w, config).err().unwrap().to_string();
    assert!(e.contains("no RDMA device 'no-such-hca'"), "{e}");
    fs::remove_dir_all(w.dir).unwrap();
}

#[cfg(not(feature = "ofi"))]
#[test]
fn ofi_without_the_feature_is_a_named_error() {
    let mut w = singleton_wireup("engine-no-ofi");
    let config = EngineConfig {
        transport: TransportChoice::Ofi,
        ..EngineConfig::default()
    };
    let e = Engine::new(&mut w, config).err().unwrap().to_string();
    assert!(e.contains("built without libfabric"), "{e}");
    fs::remove_dir_all(w.dir).unwrap();
}

/// A provider libfabric does not have is a named error listing those it has.
#[cfg(feature = "ofi")]
#[test]
fn ofi_refuses_an_unknown_provider() {
    // Rank 0 of two, with rank 1's side of the first fence already written: the provider
    // is looked for before the second.
    let mut w = singleton_wireup("engine-bad-provider");
    w.size = 2;
    fs::write(w.dir.join("pml.host.1"), b"elsewhere").unwrap();
    fs::write(w.dir.join("fence.1.1"), b"").unwrap();
    let config = EngineConfig {
        transport: TransportChoice::Ofi,
        ofi_provider: Some("no-such-provider".into()),
        ..EngineConfig::default()
    };
    let e = Engine::new(&mut w, config).err().unwrap().to_string();
    assert!(
        e.contains("no usable libfabric provider 'no-such-provider'")
            && e.contains("fi_getinfo offers: ")
            && e.contains("tcp;ofi_rxm"),
        "{e}"
    );
    fs::remove_dir_all(w.dir).unwrap();
}

const CHILD_ENV: &str = "PML_ENGINE_TEST_RANK";

/// How the ranks of the multi-process test reach each other.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Shared memory, rendezvous by single copy.
    Read,
    /// Shared memory, rendezvous streamed through the rings.
    Copy,
    Tcp,
    /// RDMA verbs between every pair: SEND for eager, RDMA READ for rendezvous.
    Verbs,
    /// libfabric between every pair on this provider; rendezvous by fi_read when `true`,
    /// else by DATA frames.
    Ofi(&'static str, bool),
}

impl Mode {
    fn parse(name: &str) -> Mode {
        match name {
            "read" => Mode::Read,
            "copy" => Mode::Copy,
            "tcp" => Mode::Tcp,
            "verbs" => Mode::Verbs,
            "ofi-tcp" => Mode::Ofi("tcp;ofi_rxm", true),
            "ofi-tcp-frames" => Mode::Ofi("tcp;ofi_rxm", false),
            "ofi-shm" => Mode::Ofi("shm", true),
            "ofi-udp" => Mode::Ofi("udp;ofi_rxd", true),
            "ofi-verbs" => Mode::Ofi("verbs;ofi_rxm", true),
            other => panic!("unknown mode {other}"),
        }
    }
}

/// Every rank sends to every other at once: over TCP, the dials of each pair cross.
fn everyone_to_everyone(e: &mut Engine) {
    let (rank, size) = (e.rank(), e.size());
    let mut inbox = vec![[0u8; 4]; size as usize];
    let outgoing: Vec<[u8; 4]> = (0..size)
        .map(|to| (rank * 100 + to).to_le_bytes())
        .collect();
    let mut handles = Vec::new();
    for (from, slot) in inbox
        .iter_mut()
        .enumerate()
        .filter(|(f, _)| *f as u32 != rank)
    {
        // SAFETY: `inbox` outlives the requests, all waited for below.
        handles.push(
            unsafe {
                e.post_recv(
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
    for to in (0..size).filter(|&to| to != rank) {
        let out = &outgoing[to as usize];
        // SAFETY: `outgoing` outlives the requests, all waited for below.
        handles.push(
            unsafe { e.post_send(0, rank, to, 9, SendMode::Standard, out.as_ptr(), 4) }.unwrap(),
        );
    }
    for h in handles {
        e.wait(h).unwrap();
    }
    for from in (0..size).filter(|&f| f != rank) {
        assert_eq!(inbox[from as usize], (from * 100 + rank).to_le_bytes());
    }
}

/// The spin of a wait with 1 MiB that moves only while the rank polls in flight, where waits
/// spin `idle` without it: 1 ms or more, and none where the `size` ranks of the job (all on
/// this host) outnumber the cores, which must not spin at all (`config::shares_cores`).
fn stretched_spin(idle: Duration, size: u32) -> Duration {
    if pml::config::shares_cores(size as usize) {
        assert_eq!(idle, Duration::ZERO, "{size} ranks sharing cores spin");
        Duration::ZERO
    } else {
        idle.max(Duration::from_millis(1))
    }
}

/// The largest message of the multi-process test: 64 MiB, or `MPIRT_TEST_LARGEST_MESSAGE` (a
/// size: `4m`) where set, as in the Soft-RoCE guest (tools/test-all.sh), where every byte
/// crosses emulated RDMA.
fn largest_message() -> usize {
    env::var("MPIRT_TEST_LARGEST_MESSAGE").map_or(64 << 20, |v| {
        pml::config::parse_size(&v)
            .filter(|&n| n > 1 << 20)
            .unwrap_or_else(|| panic!("MPIRT_TEST_LARGEST_MESSAGE='{v}' is not a size over 1 MiB"))
    })
}

/// What each rank of the multi-process test does; rank 0 checks.
fn rank_main(dir: &Path, rank: u32, size: u32, mode: Mode) {
    let mut w = DirWireup {
        dir: dir.to_path_buf(),
        rank,
        size,
        round: 0,
    };
    let config = EngineConfig {
        shm_eager_limit: 4096,
        tcp_eager_limit: 4096,
        verbs_eager_limit: 4096,
        ofi_eager_limit: Some(4096),
        ofi_provider: match mode {
            Mode::Ofi(provider, _) => Some(provider.into()),
            _ => None,
        },
        ofi_rma: matches!(mode, Mode::Ofi(_, true)),
        // In the RDMA test guest: one device per rank, round robin, so frames cross a link.
        verbs_devices: env::var("MPIRT_VERBS_DEV").unwrap_or_default(),
        single_copy: mode == Mode::Read,
        transport: match mode {
            Mode::Tcp => TransportChoice::Tcp,
            Mode::Verbs => TransportChoice::Verbs,
            Mode::Ofi(..) => TransportChoice::Ofi,
            Mode::Read | Mode::Copy => TransportChoice::Auto,
        },
        ..EngineConfig::default()
    };
    let mut e = Engine::new(&mut w, config).unwrap();
    everyone_to_everyone(&mut e);
    let sizes = [0usize, 1, 4095, 4096, 4097, 1 << 20, largest_message()];
    // Each size a tag of its own (this test's other tags are below 100), whatever the largest:
    // a tag from the length (`len % 1000`) met another size's, or the small messages' 5, for
    // lengths MPIRT_TEST_LARGEST_MESSAGE accepts (1049005), and a wildcard receive then took
    // another sender's message.
    let size_tag = |i: usize| 1000 + i as i32;
    if rank == 0 {
        // Every size from every peer, received by wildcard, checked by checksum.
        for _ in 1..size {
            for (i, &len) in sizes.iter().enumerate() {
                let (buf, st) = recv(&mut e, SourceSel::Any, TagSel::Tag(size_tag(i)), len);
                assert_eq!(st.len, len);
                assert_eq!(
                    checksum(&buf),
                    checksum(&pattern(len, st.source as usize)),
                    "len {len} from {}",
                    st.source
                );
            }
        }
        // 10^4 small messages per sender arrive in order per sender.
        let mut next = vec![0u32; size as usize];
        for _ in 0..(size - 1) * 10_000 {
            let (buf, st) = recv(&mut e, SourceSel::Any, TagSel::Tag(5), 4);
            let n = u32::from_le_bytes(buf.try_into().unwrap());
            assert_eq!(
                n, next[st.source as usize],
                "out of order from {}",
                st.source
            );
            next[st.source as usize] += 1;
        }
        if matches!(mode, Mode::Verbs | Mode::Ofi(_, true)) {
            let again = pattern(1 << 20, 9);
            for _ in 0..5 {
                let (buf, _) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(40), 1 << 20);
                assert!(buf == again, "a re-sent buffer arrived wrong");
            }
            let (buf, _) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(40), 1 << 20);
            assert!(
                buf == pattern(1 << 20, 10),
                "a buffer sent from memory freed and allocated again arrived wrong"
            );
            if matches!(mode, Mode::Ofi(..)) {
                // A read in flight stretches a wait's spin (libfabric moves its bytes only
                // while this rank polls, reporting none until all are in) up to 1 ms, and no
                // longer once it completed.
                let idle = e.spin_budget();
                let mut buf = vec![0u8; 1 << 20];
                // SAFETY: `buf` outlives the request, waited for below.
                let r = unsafe {
                    e.post_recv(
                        0,
                        SourceSel::Rank(1),
                        TagSel::Tag(41),
                        buf.as_mut_ptr(),
                        buf.len(),
                    )
                }
                .unwrap();
                // The round that starts the read reports nothing of it: a later poll does.
                let reads = e.counters().remote_reads;
                while e.counters().remote_reads == reads {
                    e.progress().unwrap();
                }
                assert_eq!(
                    e.spin_budget(),
                    stretched_spin(idle, size),
                    "spin with a 1 MiB read in flight (configured: {idle:?}, {size} ranks)"
                );
                e.wait(r).unwrap();
                assert!(buf == pattern(1 << 20, 11), "the read 1 MiB arrived wrong");
                assert_eq!(
                    e.spin_budget(),
                    idle,
                    "a finished read still stretches the spin"
                );
            }
        }
        // A synchronous send is not complete before its receive is posted.
        let (flag, _) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(77), 1);
        assert_eq!(flag, [1]);
        std::thread::sleep(Duration::from_millis(200));
        let (buf, _) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(78), 8);
        assert_eq!(buf, 200u64.to_le_bytes());
        let reads = e.counters().remote_reads;
        // Each peer's 4097-byte, 1 MiB and largest messages go by rendezvous: read single-copy
        // or by RDMA READ or fi_read, or streamed (through the rings when single copy is off,
        // over the socket on TCP, in DATA frames over libfabric without RMA).
        if matches!(mode, Mode::Read | Mode::Verbs | Mode::Ofi(_, true)) {
            assert!(
                reads >= 3 * u64::from(size - 1),
                "only {reads} remote reads"
            );
        } else {
            assert_eq!(reads, 0, "single copy was off or impossible");
        }
        // The 1 MiB and largest messages come from the senders' shared arenas (this binary
        // installs TrackingAllocator), the 4097-byte one by process_vm_readv.
        let mapped = e.counters().mapped_reads;
        if mode == Mode::Read {
            assert!(
                mapped >= 2 * u64::from(size - 1) && mapped < reads,
                "{mapped} of {reads} remote reads from mapped arenas"
            );
        } else {
            assert_eq!(mapped, 0);
        }
        let frames = e.counters().frames_received;
        assert!(
            frames >= 10_000 * u64::from(size - 1),
            "only {frames} frames arrived"
        );
        println!("remote reads: {reads}, frames received: {frames}");
    } else {
        for (i, &len) in sizes.iter().enumerate() {
            send(
                &mut e,
                0,
                size_tag(i),
                &pattern(len, rank as usize),
                SendMode::Standard,
            );
        }
        for i in 0..10_000u32 {
            send(&mut e, 0, 5, &i.to_le_bytes(), SendMode::Standard);
        }
        if matches!(mode, Mode::Verbs | Mode::Ofi(_, true)) && rank == 1 {
            // Sending again from one buffer registers it once (the registration cache).
            let again = pattern(1 << 20, 9);
            let before = e.counters().registrations;
            for _ in 0..5 {
                send(&mut e, 0, 40, &again, SendMode::Standard);
            }
            let made = e.counters().registrations - before;
            assert!(
                made <= 1,
                "{made} registrations for one buffer sent 5 times"
            );
            // Freed, its range is registered again when reused (the allocator often hands
            // the same addresses back): the cache dropped the stale registration.
            drop(again);
            let fresh = pattern(1 << 20, 10);
            let before = e.counters().registrations;
            send(&mut e, 0, 40, &fresh, SendMode::Standard);
            let made = e.counters().registrations - before;
            assert_eq!(made, 1, "registrations for a buffer allocated after a free");
            if matches!(mode, Mode::Ofi(..)) {
                // A rendezvous in flight stretches a wait's spin (libfabric moves its bytes
                // without reporting any) up to 1 ms, and no longer once it completed.
                let idle = e.spin_budget();
                let data = pattern(1 << 20, 11);
                // SAFETY: `data` outlives the request, waited for below.
                let h = unsafe {
                    e.post_send(0, 1, 0, 41, SendMode::Standard, data.as_ptr(), data.len())
                }
                .unwrap();
                assert_eq!(
                    e.spin_budget(),
                    stretched_spin(idle, size),
                    "spin with a 1 MiB send exposed (configured: {idle:?}, {size} ranks)"
                );
                // The peer's FIN ends the exposure, before the send is collected (a buffered
                // send is collected only at the next one).
                while !e.is_complete(h).unwrap() {
                    e.progress().unwrap();
                }
                assert_eq!(
                    e.spin_budget(),
                    idle,
                    "a send the peer finished reading still stretches the spin, uncollected"
                );
                assert_eq!(e.wait(h).unwrap(), Done::Sent);
                assert_eq!(e.spin_budget(), idle, "a collected send stretches the spin");
            }
        }
        if rank == 1 {
            let data = 200u64.to_le_bytes();
            // SAFETY: `data` outlives the request, waited for below.
            let h = unsafe { e.post_send(0, 1, 0, 78, SendMode::Synchronous, data.as_ptr(), 8) }
                .unwrap();
            // The clock starts before the flag goes: rank 0's 200 ms start after it arrives,
            // however long this rank is kept off its CPU between the two.
            let t = Instant::now();
            send(&mut e, 0, 77, &[1], SendMode::Standard);
            e.wait(h).unwrap();
            let waited = t.elapsed().as_millis() as u64;
            assert!(
                waited >= 150,
                "synchronous send completed {waited} ms after the flag"
            );
        }
    }
    if mode == Mode::Read {
        arena_buffers_reused(&mut e);
    }
    // Every transport without a wake of its own (shared memory has its futex word).
    if !matches!(mode, Mode::Read | Mode::Copy) {
        woken_by_a_frame(&mut e);
    }
    e.flush_all().unwrap();
    assert_eq!(
        e.counters().ofi_exposed,
        0,
        "send buffers stay exposed after every send was collected"
    );
}

/// Rank 0 wakes rank 1's sleep in its PML (`Engine::wake_peer`), as a rank that published a flag
/// outside the PML does (mpirt's collective area), over a transport that has no wake of its own
/// (TCP, verbs, OFI): one WAKE frame, whose arrival ends that sleep of a minute (`ASLEEP_FOR`),
/// which rank 1 then reports by a message. Rank 1 says it goes to sleep first (a send posted, not
/// waited for, so that nothing rank 1 receives is taken before it sleeps), as the area's sleeping
/// word does; rank 0 wakes it once it heard that, and sends nothing else meanwhile, and the other
/// ranks wait for rank 0's word that the report came (a peer that closed its connections would end
/// the sleep too).
fn woken_by_a_frame(e: &mut Engine) {
    const ASLEEP_FOR: Duration = Duration::from_secs(60);
    match e.rank() {
        0 => {
            recv(e, SourceSel::Rank(1), TagSel::Tag(90), 0);
            let before = e.counters().wake_messages;
            e.wake_peer(1).unwrap();
            assert_eq!(e.counters().wake_messages - before, 1, "wake frames sent");
            let (slept, _) = recv(e, SourceSel::Rank(1), TagSel::Tag(91), 8);
            let slept = Duration::from_millis(u64::from_le_bytes(slept.try_into().unwrap()));
            assert!(
                slept < ASLEEP_FOR,
                "rank 1's sleep ran to its timeout ({slept:?}): the wake frame did not end it"
            );
            for peer in 2..e.size() {
                send(e, peer, 92, &[], SendMode::Standard);
            }
        }
        1 => {
            // SAFETY: the empty buffer is static.
            let asleep =
                unsafe { e.post_send(0, 1, 0, 90, SendMode::Standard, [].as_ptr(), 0) }.unwrap();
            let before = e.counters().wake_messages_received;
            let start = Instant::now();
            // Until the frame was taken: a sleep may end before it comes (over verbs, the
            // completion of rank 1's own send ends the first); one the frame does not end
            // runs to its timeout. (On udp;ofi_rxd, which has no wait fd, every sleep is a
            // short nap: there the frame is only seen to come.)
            while e.counters().wake_messages_received == before && start.elapsed() < ASLEEP_FOR {
                e.sleep_until_woken(ASLEEP_FOR.saturating_sub(start.elapsed()))
                    .unwrap();
                e.progress().unwrap();
            }
            let slept = start.elapsed().as_millis() as u64;
            assert_eq!(e.wait(asleep).unwrap(), Done::Sent);
            send(e, 0, 91, &slept.to_le_bytes(), SendMode::Standard);
        }
        _ => {
            recv(e, SourceSel::Rank(0), TagSel::Tag(92), 0);
        }
    }
}

/// Rank 1 sends from a heap buffer, frees it and sends from a fresh one that the arena places
/// at the same address: rank 0 must see the new bytes each time, never the old pages. A stack
/// buffer (outside any arena) goes by process_vm_readv.
fn arena_buffers_reused(e: &mut Engine) {
    const ROUNDS: usize = 4;
    let len = 1 << 20;
    if e.rank() == 0 {
        let before = e.counters();
        for round in 0..ROUNDS {
            let (buf, _) = recv(e, SourceSel::Rank(1), TagSel::Tag(60), len);
            assert!(
                checksum(&buf) == checksum(&pattern(len, 100 + round)),
                "round {round}: stale or wrong data from a reused arena block"
            );
        }
        let (buf, _) = recv(e, SourceSel::Rank(1), TagSel::Tag(61), 32 << 10);
        assert!(buf.iter().all(|&b| b == 0x5a));
        let after = e.counters();
        assert_eq!(after.mapped_reads - before.mapped_reads, ROUNDS as u64);
        assert_eq!(after.remote_reads - before.remote_reads, ROUNDS as u64 + 1);
    } else if e.rank() == 1 {
        let mut addresses = Vec::new();
        for round in 0..ROUNDS {
            let data = pattern(len, 100 + round);
            addresses.push(data.as_ptr() as usize);
            send(e, 0, 60, &data, SendMode::Standard);
        }
        assert!(
            addresses.windows(2).any(|w| w[0] == w[1]),
            "the arena never reused a block: {addresses:x?}"
        );
        let on_stack = [0x5au8; 32 << 10];
        send(e, 0, 61, &on_stack, SendMode::Standard);
    }
}

#[test]
fn ranks_over_shared_memory_and_tcp() {
    run_ranks(
        "ranks_over_shared_memory_and_tcp",
        &[(2, "read"), (4, "read"), (2, "copy"), (4, "tcp")],
    );
}

/// Needs an RDMA device: `.ci/run` runs it in the Soft-RoCE guest (../shared/rdma-vm).
#[cfg(feature = "verbs")]
#[test]
fn ranks_over_verbs() {
    if env::var(CHILD_ENV).is_err() && pml::transport::verbs::device_names().is_empty() {
        println!("skipped: no RDMA device on this machine (tools/test-all.sh runs this in the Soft-RoCE guest)");
        return;
    }
    run_ranks("ranks_over_verbs", &[(2, "verbs"), (4, "verbs")]);
}

/// libfabric's providers that work on any machine: tcp;ofi_rxm (rendezvous by fi_read, and
/// by DATA frames), shm and udp;ofi_rxd.
#[cfg(feature = "ofi")]
#[test]
fn ranks_over_ofi() {
    run_ranks(
        "ranks_over_ofi",
        &[
            (2, "ofi-tcp"),
            (4, "ofi-tcp"),
            (2, "ofi-tcp-frames"),
            (3, "ofi-shm"),
            (2, "ofi-udp"),
        ],
    );
}

/// libfabric's verbs provider (through ofi_rxm), where there is an RDMA device:
/// `tools/test-all.sh` runs it in the Soft-RoCE guest (../shared/rdma-vm). The rendezvous
/// goes by fi_read, which verbs;ofi_rxm posts as an RDMA READ (`remote_reads` counts them).
#[cfg(feature = "ofi")]
#[test]
fn ranks_over_ofi_verbs() {
    let devices = fs::read_dir("/sys/class/infiniband").map_or(0, |d| d.count());
    if env::var(CHILD_ENV).is_err() && devices == 0 {
        println!(
            "skipped: no RDMA device on this machine, so libfabric has no verbs provider \
             (tools/test-all.sh runs this in the Soft-RoCE guest)"
        );
        return;
    }
    run_ranks(
        "ranks_over_ofi_verbs",
        &[(2, "ofi-verbs"), (3, "ofi-verbs")],
    );
}

/// Runs each (size, mode) case as that many processes of this test binary; in a child, runs
/// its rank instead.
fn run_ranks(test: &str, cases: &[(u32, &str)]) {
    if let Ok(spec) = env::var(CHILD_ENV) {
        let mut it = spec.split(',');
        let (dir, rank, size) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        rank_main(
            Path::new(dir),
            rank.parse().unwrap(),
            size.parse().unwrap(),
            Mode::parse(it.next().unwrap()),
        );
        return;
    }
    // A bad MPIRT_TEST_LARGEST_MESSAGE stops the test here, named, not in every rank.
    largest_message();
    for &(size, mode) in cases {
        let dir = env::temp_dir().join(format!("pml-engine-{}-{size}-{mode}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // What rsrun would set for libfabric for ranks over verbs;ofi_rxm: these ranks are
        // this test binary's children, which set no environment of their own. A value this
        // test's environment sets is the user's, which the children inherit, as rsrun's do.
        let libfabric: Vec<(&str, String)> = match mode {
            "ofi-verbs" => bootstrap::libfabric::settings(
                |name| match name {
                    "MPIRT_TRANSPORT" => Some("ofi".into()),
                    "MPIRT_OFI_PROVIDER" => Some("verbs;ofi_rxm".into()),
                    _ => env::var(name).ok(),
                },
                Some(size),
            ),
            // These ranks share one host, so they talk over loopback.
            "ofi-udp" | "ofi-tcp" | "ofi-tcp-frames" => ofi_on_loopback()
                .into_iter()
                .map(|(name, value)| (name, value.to_string()))
                .collect(),
            _ => Vec::new(),
        };
        let libfabric: Vec<(&str, &str)> =
            libfabric.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let outputs = run_children(
            test,
            size,
            CHILD_ENV,
            |r| format!("{},{r},{size},{mode}", dir.display()),
            &libfabric,
            // The Soft-RoCE guest runs at emulated speed, where a dropped packet waits out the
            // queue pair's 1 s retransmission timeout: 4 ranks over verbs have taken 70-150 s.
            Duration::from_secs(if mode == "verbs" { 400 } else { 120 }),
        );
        assert_all_succeeded(&outputs, &format!("size {size} "));
        let out0 = String::from_utf8_lossy(&outputs[0].stdout);
        assert!(out0.contains("remote reads: "), "{out0}");
        let leftover: Vec<_> = fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .contains(&*dir.file_name().unwrap().to_string_lossy())
            })
            .collect();
        assert!(
            leftover.is_empty(),
            "segment left in /dev/shm: {leftover:?}"
        );
        fs::remove_dir_all(dir).unwrap();
    }
}

const ARENA_LIMIT_ENV: &str = "PML_ENGINE_TEST_ARENA_LIMIT_RANK";

/// Over shared memory, a message from the sender's shared arena goes by rendezvous past the
/// arena's eager limit (the receiver's one memcpy beats eager's two copies), while one from
/// elsewhere stays eager up to the shm eager limit (process_vm_readv costs more than two
/// copies); every message, on each side of each limit, arrives whole.
#[test]
fn shm_eager_limit_depends_on_where_the_send_buffer_lies() {
    const ARENA_LIMIT: usize = 4096;
    const SHM_LIMIT: usize = 32 << 10;
    // (length, from the arena?, how it goes: 0 eager, 1 mapped read, 2 process_vm_readv)
    let cases = [
        (ARENA_LIMIT - 1, true, 0),
        (ARENA_LIMIT, true, 0),
        (ARENA_LIMIT + 1, true, 1),
        (SHM_LIMIT, true, 1),
        (SHM_LIMIT + 1, true, 1),
        (ARENA_LIMIT + 1, false, 0),
        (SHM_LIMIT, false, 0),
        (SHM_LIMIT + 1, false, 2),
    ];
    if let Ok(spec) = env::var(ARENA_LIMIT_ENV) {
        let (dir, rank) = spec.split_once(',').unwrap();
        let mut w = DirWireup {
            dir: dir.into(),
            rank: rank.parse().unwrap(),
            size: 2,
            round: 0,
        };
        let config = EngineConfig {
            shm_eager_limit: SHM_LIMIT,
            shm_arena_eager_limit: ARENA_LIMIT,
            ..EngineConfig::default()
        };
        let mut e = Engine::new(&mut w, config).unwrap();
        // A block this large comes from the arena; the others (small heap blocks, the
        // stack) do not.
        let mut arena_block = vec![0u8; 1 << 20];
        let mut on_stack = [0u8; SHM_LIMIT + 1];
        for (i, &(len, from_arena, path)) in cases.iter().enumerate() {
            let data = pattern(len, i);
            if e.rank() == 1 {
                if from_arena {
                    arena_block[..len].copy_from_slice(&data);
                    send(&mut e, 0, i as i32, &arena_block[..len], SendMode::Standard);
                } else if len > SHM_LIMIT {
                    on_stack[..len].copy_from_slice(&data);
                    send(&mut e, 0, i as i32, &on_stack[..len], SendMode::Standard);
                } else {
                    send(&mut e, 0, i as i32, &data, SendMode::Standard);
                }
                continue;
            }
            let before = e.counters();
            let (buf, st) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(i as i32), len);
            assert_eq!(st.len, len);
            assert!(
                checksum(&buf) == checksum(&data),
                "case {i}: {len} bytes arrived wrong"
            );
            let after = e.counters();
            let reads = after.remote_reads - before.remote_reads;
            let mapped = after.mapped_reads - before.mapped_reads;
            let how = match (reads, mapped) {
                (0, 0) => 0,
                (1, 1) => 1,
                (1, 0) => 2,
                other => panic!("case {i}: remote and mapped reads {other:?}"),
            };
            assert_eq!(
                how, path,
                "case {i}: {len} bytes, from the arena: {from_arena}"
            );
        }
        e.flush_all().unwrap();
        println!("limits ok");
        return;
    }
    let outputs = run_two_ranks(
        "shm_eager_limit_depends_on_where_the_send_buffer_lies",
        ARENA_LIMIT_ENV,
    );
    assert!(String::from_utf8_lossy(&outputs[0].stdout).contains("limits ok"));
}

const IN_PLACE_ENV: &str = "PML_ENGINE_TEST_IN_PLACE_RANK";

/// A non-contiguous send past the eager limit is read in place by the receiver, block by
/// block: by memcpy from the sender's mapped arena when its buffer lies there, else by
/// process_vm_readv with the blocks as remote iovecs (more of them than one call takes). The
/// bytes arrive as a serial pack of the blocks gives them; a short receive takes the front.
/// Below the eager limit a standard send is packed straight into its frame.
#[test]
fn non_contiguous_sends_are_read_in_place() {
    const LIMIT: usize = 4096;
    // Column 1 of a row-major matrix of 4 u64 a row: one 8-byte block every 32 bytes.
    let list = [Block { offset: 8, len: 8 }];
    // (rows, from the arena?, receive capacity)
    let cases = [
        (4096, true, 4096 * 8),
        (4096, false, 4096 * 8),
        (3000, false, 100),
    ];
    let Ok(spec) = env::var(IN_PLACE_ENV) else {
        let outputs = run_two_ranks("non_contiguous_sends_are_read_in_place", IN_PLACE_ENV);
        assert!(String::from_utf8_lossy(&outputs[0].stdout).contains("in place ok"));
        return;
    };
    let (dir, rank) = spec.split_once(',').unwrap();
    let mut w = DirWireup {
        dir: dir.into(),
        rank: rank.parse().unwrap(),
        size: 2,
        round: 0,
    };
    let config = EngineConfig {
        shm_eager_limit: LIMIT,
        // Outside the arena, 8-byte blocks are read in place too (by default they are packed).
        shm_in_place_min_block: 8,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(&mut w, config).unwrap();
    // 1 MiB comes from the arena; the stack does not.
    let arena_matrix: Vec<u64> = (0..1 << 17).collect();
    let mut stack_matrix = [0u64; 4096 * 4];
    for (i, v) in stack_matrix.iter_mut().enumerate() {
        *v = i as u64 * 3;
    }
    for (i, &(rows, from_arena, capacity)) in cases.iter().enumerate() {
        let matrix: &[u64] = if from_arena {
            &arena_matrix
        } else {
            &stack_matrix
        };
        let column: Vec<u8> = (0..rows)
            .flat_map(|r| matrix[r * 4 + 1].to_ne_bytes())
            .collect();
        let tag = i as i32;
        if e.rank() == 1 {
            let blocks = Blocks::new(matrix.as_ptr().cast(), rows, 32, &list).unwrap();
            // SAFETY: the matrix and the description outlive the send, waited for here.
            let h = unsafe { e.post_send_blocks(0, 1, 0, tag, SendMode::Standard, &blocks) }
                .unwrap()
                .expect("a column past the eager limit is sent in place");
            assert_eq!(e.wait(h).unwrap(), Done::Sent);
            continue;
        }
        let before = e.counters();
        let mut buf = vec![0u8; capacity];
        let outcome = receive_from_rank_1(&mut e, tag, &mut buf);
        let after = e.counters();
        if capacity < column.len() {
            assert!(outcome.is_err(), "case {i}: a short receive is truncated");
        } else {
            assert!(matches!(outcome, Ok(Done::Received(st)) if st.len == column.len()));
        }
        assert!(
            buf[..] == column[..capacity],
            "case {i}: the column arrived wrong"
        );
        assert_eq!(after.in_place_reads - before.in_place_reads, 1, "case {i}");
        let mapped = after.mapped_reads - before.mapped_reads;
        assert_eq!(mapped, u64::from(from_arena), "case {i}: from the arena");
    }
    // Eager: a standard send is packed straight into its frame and complete at once; a
    // synchronous one, which waits for its match, is left to the caller to pack.
    let small: Vec<u64> = (100..132).collect();
    let small_column: Vec<u8> = (0..8)
        .flat_map(|r| small[r * 4 + 1].to_ne_bytes())
        .collect();
    if e.rank() == 1 {
        let blocks = Blocks::new(small.as_ptr().cast(), 8, 32, &list).unwrap();
        // SAFETY: as above.
        let sent = unsafe { e.post_send_blocks(0, 1, 0, 98, SendMode::Standard, &blocks) };
        assert_eq!(
            sent.unwrap(),
            Some(pml::Handle::SENT),
            "packed into the frame"
        );
        // SAFETY: as above; nothing is sent.
        let sent = unsafe { e.post_send_blocks(0, 1, 0, 99, SendMode::Synchronous, &blocks) };
        assert_eq!(
            sent.unwrap(),
            None,
            "a synchronous eager send is left to pack"
        );
    } else {
        let (buf, st) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(98), 64);
        assert_eq!(st.len, 64);
        assert_eq!(buf, small_column, "the eager column arrived wrong");
    }
    e.flush_all().unwrap();
    println!("in place ok");
}

const GATHERED_ENV: &str = "PML_ENGINE_TEST_GATHERED_RANK";
const GUARD: u8 = 0xA5;
const POISON: u8 = 0xEE;

/// Receives rank 1's message of `tag` into the whole of `buf` and waits for it: the outcome.
fn receive_from_rank_1(e: &mut Engine, tag: i32, buf: &mut [u8]) -> Result<Done, PmlError> {
    // SAFETY: `buf` outlives the receive, waited for here.
    let h = unsafe {
        e.post_recv(
            0,
            SourceSel::Rank(1),
            TagSel::Tag(tag),
            buf.as_mut_ptr(),
            buf.len(),
        )
    }
    .unwrap();
    e.wait(h)
}

/// A random layout: its block list (ascending, gaps between), extent and element count.
fn random_layout(rng: &mut u64, packed_target: usize) -> (Vec<Block>, usize, usize) {
    let mut next = |bound: usize| {
        // xorshift64: the same cases on both ranks, from one seed.
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        (*rng % bound as u64) as usize
    };
    let mut list = Vec::new();
    let mut at = next(16);
    for _ in 0..1 + next(5) {
        // Short blocks (gathered through a scratch over TCP) and long ones (an iovec each).
        let len = match next(3) {
            0 => 1 + next(16),
            1 => 1 + next(300),
            _ => 256 + next(2000),
        };
        list.push(Block { offset: at, len });
        at += len + 1 + next(40);
    }
    let extent = at + next(8);
    let element: usize = list.iter().map(|b| b.len).sum();
    let count = (packed_target / element).max(1);
    (list, extent, count)
}

/// The eager limits of `layout_test_engine`'s engines.
const LAYOUT_EAGER_LIMIT: usize = 4096;
/// Over verbs, the most scatter-gather entries and bytes one READ of `layout_test_engine`'s
/// engines takes: far below Soft-RoCE's 32 and 2 GiB, so that a layout takes many work
/// requests and long runs are cut where one ends.
const VERBS_MAX_SGE: usize = 4;
const VERBS_MAX_MSG: usize = 4096;
/// Over verbs, the shortest mean block of a non-contiguous send that `layout_test_engine`'s
/// receivers read in place (below the 16 KiB default, so that short layouts test both sides
/// of it); shorter ones are packed.
const VERBS_SEND_MIN_BLOCK: usize = 1024;

/// The engine of rank `rank` of the two ranks a child's `mode,dir,rank` spec names (`tcp`,
/// `verbs`, or shared memory), with eager limits of `LAYOUT_EAGER_LIMIT`,
/// `single_copy(mode, rank)` and `shm_in_place_min_block` (and verbs' `verbs_sge_min_block`)
/// of `in_place_min_block(rank)`; over verbs, READs of at most `VERBS_MAX_SGE` entries and
/// `VERBS_MAX_MSG` bytes. The mode and rank.
fn layout_test_engine(
    spec: &str,
    single_copy: impl Fn(&str, u32) -> bool,
    in_place_min_block: impl Fn(u32) -> usize,
) -> (String, u32, Engine) {
    let mut parts = spec.splitn(3, ',');
    let (mode, dir, rank) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let rank: u32 = rank.parse().unwrap();
    let mut w = DirWireup {
        dir: dir.into(),
        rank,
        size: 2,
        round: 0,
    };
    let config = EngineConfig {
        shm_eager_limit: LAYOUT_EAGER_LIMIT,
        tcp_eager_limit: LAYOUT_EAGER_LIMIT,
        single_copy: single_copy(mode, rank),
        shared_arena: mode != "shm-no-arena",
        shm_in_place_min_block: in_place_min_block(rank),
        verbs_eager_limit: LAYOUT_EAGER_LIMIT,
        verbs_devices: env::var("MPIRT_VERBS_DEV").unwrap_or_default(),
        verbs_sge_min_block: in_place_min_block(rank),
        verbs_send_min_block: VERBS_SEND_MIN_BLOCK,
        verbs_max_sge: Some(VERBS_MAX_SGE),
        verbs_max_msg: Some(VERBS_MAX_MSG),
        transport: match mode {
            "tcp" => TransportChoice::Tcp,
            "verbs" => TransportChoice::Verbs,
            _ => TransportChoice::Shm,
        },
        ..EngineConfig::default()
    };
    (mode.to_string(), rank, Engine::new(&mut w, config).unwrap())
}

/// Runs `test`'s two ranks (their spec in `env`, as `layout_test_engine` reads it) once in
/// each of `modes`, and checks that rank 0 printed "MODE `done` ok".
fn run_layout_test(test: &str, env: &str, modes: &[&str], done: &str) {
    for mode in modes {
        let dir = TempDir::new(&format!("pml-engine-{done}-{mode}-{}", std::process::id()));
        let outputs = run_children(
            test,
            2,
            env,
            |r| format!("{mode},{},{r}", dir.0.display()),
            &[],
            // The Soft-RoCE guest's CPU is emulated (see `run_ranks`).
            Duration::from_secs(if *mode == "verbs" { 400 } else { 120 }),
        );
        assert_all_succeeded(&outputs, &format!("{mode}: "));
        let out = String::from_utf8_lossy(&outputs[0].stdout);
        assert!(out.contains(&format!("{mode} {done} ok")), "{out}");
    }
}

/// `count` elements of `list`, `extent` apart, their blocks filled and their gaps poisoned,
/// and a serial pack of the blocks.
fn layout_source(list: &[Block], extent: usize, count: usize) -> (Vec<u8>, Vec<u8>) {
    let mut source = vec![POISON; extent * count];
    let mut serial = Vec::new();
    for el in 0..count {
        for b in list {
            for i in 0..b.len {
                let at = el * extent + b.offset + i;
                // Never the poison: a poisoned byte that arrives was a gap's.
                source[at] = (at % 233) as u8;
                serial.push(source[at]);
            }
        }
    }
    (source, serial)
}

/// Non-contiguous sends of random layouts, below and past the eager limit, past a frame
/// (several DATA frames) and past `IOV_MAX` runs: over TCP every frame gathers the sender's
/// blocks (no packed copy); on shared memory a receiver with CMA off (`single_copy: false`)
/// gets a send the sender exposed to be read in place by GET, each DATA frame packed from the
/// blocks into the ring. The bytes that arrive are a serial pack of the blocks (never the
/// poisoned gaps between them), and the receive buffer past the message keeps its guard.
#[test]
fn non_contiguous_sends_gather_their_blocks() {
    if let Ok(spec) = env::var(GATHERED_ENV) {
        // The receiver, rank 0, does not read its peer's memory; the sender does, and so
        // offers every send to be read in place.
        let (mode, rank, mut e) = layout_test_engine(
            &spec,
            |mode, rank| !(mode == "shm-no-cma" && rank == 0),
            |_| 1,
        );
        let mode = mode.as_str();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let targets = [100, 4096, 4097, 70_000, 300_000, 5 << 20];
        for case in 0..24 {
            let target = targets[case % targets.len()];
            let (list, extent, count) = random_layout(&mut rng, target);
            let (source, serial) = layout_source(&list, extent, count);
            let tag = case as i32;
            if rank == 1 {
                let blocks = Blocks::new(source.as_ptr(), count, extent, &list).unwrap();
                let send_mode = if case % 4 == 3 {
                    SendMode::Synchronous
                } else {
                    SendMode::Standard
                };
                // SAFETY: the source, list and description outlive the send, waited for here.
                let h = unsafe { e.post_send_blocks(0, 1, 0, tag, send_mode, &blocks) }.unwrap();
                match h {
                    Some(h) => assert_eq!(e.wait(h).unwrap(), Done::Sent),
                    // On shared memory an eager send the ring has no room for, or a
                    // synchronous one, is the caller's to pack; TCP leaves none.
                    None => {
                        assert!(
                            mode != "tcp" && serial.len() <= 4096,
                            "case {case}: {} bytes left to the caller to pack",
                            serial.len()
                        );
                        send(&mut e, 0, tag, &serial, send_mode);
                    }
                }
                continue;
            }
            let before = e.counters();
            let capacity = serial.len() + 64;
            let mut buf = vec![GUARD; capacity];
            let st = match receive_from_rank_1(&mut e, tag, &mut buf).unwrap() {
                Done::Received(st) => st,
                other => panic!("case {case}: {other:?}"),
            };
            assert_eq!(st.len, serial.len(), "case {case}");
            assert!(
                buf[..serial.len()] == serial[..],
                "case {case}: {} blocks of {list:?}, extent {extent}: the bytes differ from a \
                 serial pack",
                count
            );
            assert!(
                buf[serial.len()..].iter().all(|&b| b == GUARD),
                "case {case}: written past the message"
            );
            let reads = e.counters().remote_reads - before.remote_reads;
            assert_eq!(reads, 0, "case {case}: read in place by a rank without CMA");
        }
        if mode == "tcp" {
            gathered_and_contiguous_sends_keep_their_order(&mut e, rank);
        }
        e.flush_all().unwrap();
        println!("{mode} gathered ok");
        return;
    }
    run_layout_test(
        "non_contiguous_sends_gather_their_blocks",
        GATHERED_ENV,
        &["tcp", "shm-no-cma"],
        "gathered",
    );
}

const SCATTERED_ENV: &str = "PML_ENGINE_TEST_SCATTERED_RANK";

/// Non-contiguous receives of random layouts (`post_recv_blocks`) of messages sent from other
/// random layouts, 100 bytes to 5 MiB: eager, rendezvous, past a frame and past `IOV_MAX`
/// runs. Over TCP rendezvous data is scattered from the socket into the blocks; on shared
/// memory eager frames and DATA (CMA off) are unpacked from the ring, and a read (CMA on)
/// lands in the blocks, from the sender's mapped arena or by process_vm_readv (the arena
/// off), counted as such, by the layouts' copy loops where the receive's blocks average
/// under `SHORT_BLOCK` bytes (`short_block_reads`), which some cases' do and some not, and a
/// halo column last (`a_column_lands_in_a_column`). Every case: the blocks hold a serial
/// unpack of what was sent, the gaps between them keep their poison and the bytes past the
/// buffer their guard; some receives are posted after their message arrived (unexpected),
/// and some layouts are too small (truncated, eager and rendezvous, posted and unexpected:
/// the error naming both lengths, and the bytes that fit still unpacked).
#[test]
fn non_contiguous_receives_scatter_into_their_blocks() {
    if let Ok(spec) = env::var(SCATTERED_ENV) {
        scattered_rank(&spec);
        return;
    }
    run_layout_test(
        "non_contiguous_receives_scatter_into_their_blocks",
        SCATTERED_ENV,
        &["tcp", "shm", "shm-no-arena", "shm-no-cma"],
        "scattered",
    );
}

/// `non_contiguous_receives_scatter_into_their_blocks` over verbs, where there is an RDMA
/// device (`tools/test-all.sh` runs it in the Soft-RoCE guest): a rendezvous into blocks of
/// `SHORT_BLOCK` bytes or more on average is read straight into them by RDMA READs with
/// scatter-gather lists, a shorter one into a staging buffer (both counted, both seen), then
/// a vector column and an indexed layout (`verbs_column_and_indexed`).
#[cfg(feature = "verbs")]
#[test]
fn non_contiguous_receives_scatter_into_their_blocks_over_verbs() {
    if let Ok(spec) = env::var(SCATTERED_ENV) {
        scattered_rank(&spec);
        return;
    }
    if pml::transport::verbs::device_names().is_empty() {
        println!("skipped: no RDMA device on this machine (tools/test-all.sh runs this in the Soft-RoCE guest)");
        return;
    }
    run_layout_test(
        "non_contiguous_receives_scatter_into_their_blocks_over_verbs",
        SCATTERED_ENV,
        &["verbs"],
        "scattered",
    );
}

/// A rank of `non_contiguous_receives_scatter_into_their_blocks` (its `mode,dir,rank` spec).
fn scattered_rank(spec: &str) {
    // The sender offers every layout in place (however short its blocks); the receiver
    // reads into blocks shorter than `SHORT_BLOCK` on average by their copy loops.
    let (mode, rank, mut e) = layout_test_engine(
        spec,
        |mode, _| mode != "shm-no-cma",
        |rank| if rank == 0 { SHORT_BLOCK } else { 1 },
    );
    let mode = mode.as_str();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    // Reads into blocks (of long blocks, of short ones).
    let mut reads_by_length = [0u32; 2];
    let targets = [100, 4096, 4097, 70_000, 300_000, 5 << 20];
    // (rendezvous, unexpected) of each truncated case.
    let mut truncations = std::collections::BTreeSet::<(bool, bool)>::new();
    for case in 0..24 {
        let target = targets[case % targets.len()];
        let (list, extent, count) = random_layout(&mut rng, target);
        let (source, serial) = layout_source(&list, extent, count);
        // The receive's own layout, holding the message (or, truncated, less of it).
        let (mut rlist, rextent, _) = random_layout(&mut rng, serial.len());
        // Coprime to the targets' 6 and the unexpected cases' 4: truncated eager and
        // rendezvous messages, each posted and unexpected (cases 1, 6, 11, 16, 21).
        let truncated = case % 5 == 1;
        if truncated {
            // Elements of at most half the message, so that the receive holds less.
            let most = serial.len() / 2;
            rlist[0].len = rlist[0].len.min(most);
            let mut element = 0;
            rlist.retain(|b| {
                element += b.len;
                element <= most
            });
            truncations.insert((serial.len() > LAYOUT_EAGER_LIMIT, case % 4 == 1));
        }
        let relement: usize = rlist.iter().map(|b| b.len).sum();
        let rcount = match truncated {
            false => serial.len().div_ceil(relement),
            true => (serial.len() / relement / 2).max(1),
        };
        let capacity = rcount * relement;
        let tag = case as i32;
        if rank == 1 {
            let blocks = Blocks::new(source.as_ptr(), count, extent, &list).unwrap();
            // SAFETY: the source, list and description outlive the send, waited for here.
            let h =
                unsafe { e.post_send_blocks(0, 1, 0, tag, SendMode::Standard, &blocks) }.unwrap();
            match h {
                Some(h) => assert_eq!(e.wait(h).unwrap(), Done::Sent),
                None => send(&mut e, 0, tag, &serial, SendMode::Standard),
            }
            continue;
        }
        if case % 4 == 1 {
            // Posted once the message (its eager frame or rendezvous offer) is here.
            e.probe(0, SourceSel::Rank(1), TagSel::Tag(tag)).unwrap();
        }
        let span = rextent * rcount;
        let mut buf = vec![POISON; span + 64];
        buf[span..].fill(GUARD);
        let rblocks = Blocks::new(buf.as_mut_ptr(), rcount, rextent, &rlist).unwrap();
        let before = e.counters();
        // SAFETY: `buf`, `rlist` and the description outlive the receive, waited for here.
        let h = unsafe {
            e.post_recv_blocks(0, SourceSel::Rank(1), TagSel::Tag(tag), &rblocks, Some(1))
        }
        .unwrap()
        .expect("the engine lands every receive in its blocks");
        let landed = match e.wait(h) {
            Ok(Done::Received(st)) => {
                assert!(!truncated, "case {case}: {} bytes into {capacity}", st.len);
                assert_eq!(st.len, serial.len(), "case {case}");
                st.len
            }
            Err(err) => {
                let text = err.to_string();
                assert!(
                    truncated
                        && text.contains(&format!("is {} bytes", serial.len()))
                        && text.contains(&format!("holds only {capacity} bytes")),
                    "case {case}: {text}"
                );
                capacity
            }
            Ok(other) => panic!("case {case}: {other:?}"),
        };
        // With CMA a shared-memory rendezvous is read straight into the receive's blocks,
        // with no staging copy: one memcpy a piece from the sender's mapped arena where the
        // send's buffer lies in it (`ARENA_MIN_BYTES` or more), else by process_vm_readv
        // (without the arena always; `a_column_lands_in_a_receives_blocks` in
        // shm/in_place.rs reads past `IOV_MAX` runs).
        // Blocks shorter than `SHORT_BLOCK` on average are filled by the layouts' copy
        // loops (from the arena in one pass, else a window at a time).
        let after = e.counters();
        let read_into_blocks =
            mode.starts_with("shm") && mode != "shm-no-cma" && serial.len() > LAYOUT_EAGER_LIMIT;
        let mapped = read_into_blocks && mode == "shm" && source.len() >= ARENA_MIN_BYTES;
        let short = read_into_blocks && rblocks.mean_block() < SHORT_BLOCK;
        assert_eq!(
            (
                after.block_reads - before.block_reads,
                after.mapped_reads - before.mapped_reads,
                after.short_block_reads - before.short_block_reads,
            ),
            (
                u64::from(read_into_blocks),
                u64::from(mapped),
                u64::from(short)
            ),
            "case {case} ({mode}): reads into the receive's blocks, of them from the \
             arena, of them into short blocks"
        );
        if read_into_blocks {
            reads_by_length[usize::from(short)] += 1;
        }
        // Over verbs a rendezvous reads the sender's packed copy: straight into the receive's
        // blocks by scatter-gather lists where they average `SHORT_BLOCK` bytes or more,
        // else into a staging buffer, unpacked once read.
        // A send whose blocks average `VERBS_SEND_MIN_BLOCK` bytes or more is read in place,
        // a READ a run of it, into either.
        let rendezvous = mode == "verbs" && serial.len() > LAYOUT_EAGER_LIMIT;
        let scattered = rendezvous && rblocks.mean_block() >= SHORT_BLOCK;
        let sent_blocks = Blocks::new(source.as_ptr(), count, extent, &list).unwrap();
        let in_place = rendezvous && sent_blocks.mean_block() >= VERBS_SEND_MIN_BLOCK;
        assert_eq!(
            (
                after.verbs_sge_reads - before.verbs_sge_reads,
                after.verbs_staged_reads - before.verbs_staged_reads,
                after.verbs_layout_reads - before.verbs_layout_reads,
            ),
            (
                u64::from(scattered),
                u64::from(rendezvous && !scattered),
                u64::from(in_place)
            ),
            "case {case} ({mode}): reads by scatter-gather lists, staged, of a send in place"
        );
        if rendezvous {
            reads_by_length[usize::from(!scattered)] += 1;
        }
        // A serial unpack of what fits, into a copy of the poisoned buffer.
        let mut expected = vec![POISON; span + 64];
        expected[span..].fill(GUARD);
        let mut at = 0;
        'unpack: for el in 0..rcount {
            for b in &rlist {
                for i in 0..b.len {
                    if at == landed {
                        break 'unpack;
                    }
                    expected[el * rextent + b.offset + i] = serial[at];
                    at += 1;
                }
            }
        }
        if let Some(i) = (0..buf.len()).find(|&i| buf[i] != expected[i]) {
            let place = match i >= span {
                true => "the guard past the buffer",
                false => "a block or gap",
            };
            panic!(
                "case {case} ({mode}): byte {i} of {span}, in {place}, is {:#x}, not {:#x} \
                 ({rcount} elements of {rlist:?}, extent {rextent})",
                buf[i], expected[i]
            );
        }
    }
    let reads_into_blocks = mode == "shm" || mode == "shm-no-arena" || mode == "verbs";
    if reads_into_blocks {
        assert!(
            rank == 1 || reads_by_length.iter().all(|&n| n > 0),
            "{mode}: reads into long blocks and into short ones: {reads_by_length:?}"
        );
    }
    match mode {
        "verbs" => {
            verbs_column_and_indexed(&mut e, rank);
            verbs_sends_read_in_place(&mut e, rank);
        }
        "shm" | "shm-no-arena" => a_column_lands_in_a_column(&mut e, rank, mode),
        _ => {}
    }
    elements_of_many_blocks_land_whole(&mut e, rank, mode);
    e.flush_all().unwrap();
    assert_eq!(
        truncations.len(),
        4,
        "truncated cases (rendezvous, unexpected): {truncations:?}"
    );
    println!("{mode} scattered ok");
}

/// The mean block under which `non_contiguous_receives_scatter_into_their_blocks`' receiver
/// reads into blocks by their copy loops (`short_blocks` in the shared-memory transport).
const SHORT_BLOCK: usize = 64;

/// The halo exchange's column past the eager limit, 1 MiB (in the sender's arena where it
/// has one), into a column of a halo matrix (one 8-byte block every 32 bytes on both sides):
/// one read into short blocks, by one copy a block from the mapped arena (`shm`) or a window
/// at a time by process_vm_readv (`shm-no-arena`); the halo's other columns keep their guard.
fn a_column_lands_in_a_column(e: &mut Engine, rank: u32, mode: &str) {
    const ROWS: usize = 1 << 17;
    let list = [Block { offset: 8, len: 8 }];
    let matrix: Vec<u64> = (0..ROWS as u64 * 4).map(|i| i * 5 + 1).collect();
    if rank == 1 {
        let blocks = Blocks::new(matrix.as_ptr().cast(), ROWS, 32, &list).unwrap();
        // SAFETY: the matrix and the description outlive the send, waited for here.
        let h = unsafe { e.post_send_blocks(0, 1, 0, 77, SendMode::Standard, &blocks) }
            .unwrap()
            .expect("a column past the eager limit is sent in place");
        assert_eq!(e.wait(h).unwrap(), Done::Sent);
        return;
    }
    let halo_list = [Block { offset: 0, len: 8 }];
    let mut halo = vec![u64::MAX; ROWS * 4];
    let blocks = Blocks::new(halo.as_mut_ptr().cast::<u8>(), ROWS, 32, &halo_list).unwrap();
    let before = e.counters();
    // SAFETY: `halo`, its list and the description outlive the receive, waited for here.
    let h = unsafe { e.post_recv_blocks(0, SourceSel::Rank(1), TagSel::Tag(77), &blocks, Some(1)) }
        .unwrap()
        .expect("the engine lands every receive in its blocks");
    assert!(matches!(e.wait(h), Ok(Done::Received(st)) if st.len == ROWS * 8));
    let after = e.counters();
    assert_eq!(
        (
            after.short_block_reads - before.short_block_reads,
            after.mapped_reads - before.mapped_reads
        ),
        (1, u64::from(mode == "shm")),
        "{mode}: the column's reads into short blocks, of them from the arena"
    );
    for (row, four) in halo.chunks(4).enumerate() {
        assert_eq!(
            four[0],
            matrix[row * 4 + 1],
            "{mode}: row {row} of the halo"
        );
        assert!(
            four[1..].iter().all(|&v| v == u64::MAX),
            "{mode}: row {row}'s gaps"
        );
    }
}

/// Over verbs, through the engine: a vector column (a 256-byte block every KiB, 1024 rows)
/// and an indexed layout (blocks of 100 to 2900 bytes), each sent from its layout and
/// received into the same layout, arrive exactly (the gaps keep their poison, the bytes past
/// the buffer their guard) by RDMA READs with scatter-gather lists: the column in 256 READs
/// of `VERBS_MAX_SGE` entries, counted. A column of doubles (8-byte blocks) is staged.
fn verbs_column_and_indexed(e: &mut Engine, rank: u32) {
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
    let doubles = [Block { offset: 8, len: 8 }];
    // (layout, extent, count)
    let cases: [(&[Block], usize, usize); 3] = [
        (&column, 1024, 1024),
        (&indexed, 4800, 60),
        (&doubles, 32, 4096),
    ];
    for (case, &(list, extent, count)) in cases.iter().enumerate() {
        let tag = 90 + case as i32;
        let (source, serial) = layout_source(list, extent, count);
        if rank == 1 {
            let blocks = Blocks::new(source.as_ptr(), count, extent, list).unwrap();
            // SAFETY: the source, list and description outlive the send, waited for here.
            let h =
                unsafe { e.post_send_blocks(0, 1, 0, tag, SendMode::Standard, &blocks) }.unwrap();
            match h {
                Some(h) => assert_eq!(e.wait(h).unwrap(), Done::Sent),
                // Verbs reads only contiguous sends: the caller packs (as mpirt does).
                None => send(e, 0, tag, &serial, SendMode::Standard),
            }
            continue;
        }
        let span = extent * count;
        let mut buf = vec![POISON; span + 64];
        buf[span..].fill(GUARD);
        let blocks = Blocks::new(buf.as_mut_ptr(), count, extent, list).unwrap();
        let before = e.counters();
        // SAFETY: `buf`, `list` and the description outlive the receive, waited for here.
        let h = unsafe {
            e.post_recv_blocks(0, SourceSel::Rank(1), TagSel::Tag(tag), &blocks, Some(1))
        }
        .unwrap()
        .expect("the engine lands every receive in its blocks");
        assert!(
            matches!(e.wait(h), Ok(Done::Received(st)) if st.len == serial.len()),
            "layout {case}"
        );
        let after = e.counters();
        let got = (
            after.verbs_sge_reads - before.verbs_sge_reads,
            after.verbs_sge_read_requests - before.verbs_sge_read_requests,
            after.verbs_staged_reads - before.verbs_staged_reads,
        );
        // The indexed layout's blocks average 1075 bytes: read in place, a READ a run (4 an
        // element); the columns' are packed.
        assert_eq!(
            (
                after.verbs_layout_reads - before.verbs_layout_reads,
                after.verbs_layout_read_requests - before.verbs_layout_read_requests
            ),
            if case == 1 { (1, 240) } else { (0, 0) },
            "layout {case}: reads of the send in place, their READs"
        );
        // The column's 1024 runs in READs of `VERBS_MAX_SGE` (1 KiB each); the doubles staged.
        let scattered = blocks.mean_block() >= SHORT_BLOCK;
        let runs = (count * list.len()) as u64;
        let least = runs.div_ceil(VERBS_MAX_SGE as u64);
        let requests_ok = match case {
            0 => got.1 == least,
            _ => scattered == (got.1 >= least),
        };
        assert!(
            (got.0, got.2) == (u64::from(scattered), u64::from(!scattered)) && requests_ok,
            "layout {case}: (reads by scatter-gather lists, their READs, staged) {got:?}"
        );
        let mut expected = vec![POISON; span + 64];
        expected[span..].fill(GUARD);
        let mut packed = serial.iter();
        for el in 0..count {
            for b in list {
                for byte in &mut expected[el * extent + b.offset..][..b.len] {
                    *byte = *packed.next().unwrap();
                }
            }
        }
        if let Some(i) = (0..buf.len()).find(|&i| buf[i] != expected[i]) {
            panic!(
                "layout {case}: byte {i} of {span} is {:#x}, not {:#x}",
                buf[i], expected[i]
            );
        }
    }
}

/// Over verbs, through the engine: non-contiguous sends of each kind of layout on either side
/// of `VERBS_SEND_MIN_BLOCK` (a vector column of 1 KiB blocks and one of 1023-byte blocks;
/// an indexed layout with a block longer than a READ takes; a struct of two blocks that
/// touch, element after element, so one run, and a column whose blocks touch likewise; one
/// element of 200 blocks, and of 300, more than an offer's frame holds; 1 KiB blocks a MiB
/// apart, a span too wide to register), each into a contiguous receive, a receive of other
/// blocks, or one of 8-byte blocks (read into a staging buffer), one truncated (only the
/// runs of the bytes it holds read). The sender offers in place exactly those at or above the
/// threshold that fit (its counters), the receiver reads those a READ a run or more (exactly
/// a run where runs are shorter than a READ's limit) and the packed ones as before; every
/// receive holds a serial pack, or unpack, of what was sent, its gaps their poison and the
/// bytes past it their guard.
fn verbs_sends_read_in_place(e: &mut Engine, rank: u32) {
    let b = |offset: usize, len: usize| Block { offset, len };
    let many = |n: usize| -> Vec<Block> { (0..n).map(|i| b(i * 2560, 2048)).collect() };
    /// How the receive lays out its buffer.
    #[derive(Clone, Copy, Debug)]
    enum Receive {
        Bytes,
        /// Blocks of 2000 and 700 bytes, 3000 apart: scattered into.
        Blocks,
        /// 8-byte blocks 16 apart: read into a staging buffer.
        Doubles,
    }
    // (layout, extent, count, in place, READs of it where exact, receive, bytes it holds short)
    #[allow(clippy::type_complexity)]
    let cases: [(Vec<Block>, usize, usize, bool, Option<u64>, Receive, usize); 8] = [
        (
            vec![b(512, 1024)],
            3072,
            200,
            true,
            Some(200),
            Receive::Bytes,
            0,
        ),
        (
            vec![b(512, 1023)],
            3072,
            200,
            false,
            None,
            Receive::Bytes,
            0,
        ),
        (
            vec![b(0, 100), b(200, 3000), b(3300, 5000)],
            8400,
            30,
            true,
            None,
            Receive::Blocks,
            0,
        ),
        (
            vec![b(0, 1500), b(1500, 1000)],
            2500,
            50,
            true,
            Some(31),
            Receive::Doubles,
            0,
        ),
        (
            many(200),
            200 * 2560,
            1,
            true,
            Some(198),
            Receive::Bytes,
            5000,
        ),
        (many(300), 300 * 2560, 1, false, None, Receive::Blocks, 0),
        (
            vec![b(0, 1024)],
            1 << 20,
            20,
            false,
            None,
            Receive::Bytes,
            0,
        ),
        (
            vec![b(0, 1024)],
            1024,
            300,
            true,
            Some(75),
            Receive::Bytes,
            0,
        ),
    ];
    for (case, (list, extent, count, in_place, exact, into, short)) in cases.iter().enumerate() {
        let tag = 100 + case as i32;
        let (source, serial) = layout_source(list, *extent, *count);
        if rank == 1 {
            let blocks = Blocks::new(source.as_ptr(), *count, *extent, list).unwrap();
            let before = e.counters();
            // SAFETY: the source, list and description outlive the send, waited for here.
            let h =
                unsafe { e.post_send_blocks(0, 1, 0, tag, SendMode::Standard, &blocks) }.unwrap();
            let after = e.counters();
            assert_eq!(
                (
                    h.is_some(),
                    after.verbs_layout_sends - before.verbs_layout_sends,
                    after.verbs_packed_sends - before.verbs_packed_sends,
                ),
                (*in_place, u64::from(*in_place), u64::from(!*in_place)),
                "send {case}: offered in place, counted so"
            );
            match h {
                Some(h) => assert_eq!(e.wait(h).unwrap(), Done::Sent),
                None => send(e, 0, tag, &serial, SendMode::Standard),
            }
            continue;
        }
        let capacity = serial.len() - short;
        let before = e.counters();
        // The receive's buffer (poisoned, a guard past it), its blocks where it has some, and
        // what it must hold once the message landed.
        let (rlist, rextent) = match into {
            Receive::Bytes => (vec![b(0, capacity)], capacity),
            Receive::Blocks => (vec![b(0, 2000), b(2100, 700)], 3000),
            Receive::Doubles => (vec![b(0, 8)], 16),
        };
        let relement: usize = rlist.iter().map(|b| b.len).sum();
        let rcount = capacity.div_ceil(relement);
        let span = rextent * rcount;
        let mut buf = vec![POISON; span + 64];
        buf[span..].fill(GUARD);
        let mut expected = buf.clone();
        let mut packed = serial[..capacity.min(serial.len())].iter();
        'unpack: for el in 0..rcount {
            for rb in &rlist {
                for byte in &mut expected[el * rextent + rb.offset..][..rb.len] {
                    let Some(&p) = packed.next() else {
                        break 'unpack;
                    };
                    *byte = p;
                }
            }
        }
        let result = match into {
            Receive::Bytes => receive_from_rank_1(e, tag, &mut buf[..capacity]),
            Receive::Blocks | Receive::Doubles => {
                let rblocks = Blocks::new(buf.as_mut_ptr(), rcount, rextent, &rlist).unwrap();
                // SAFETY: `buf`, `rlist` and the description outlive the receive, waited for
                // here.
                let h = unsafe {
                    e.post_recv_blocks(0, SourceSel::Rank(1), TagSel::Tag(tag), &rblocks, Some(1))
                }
                .unwrap()
                .expect("the engine lands every receive in its blocks");
                e.wait(h)
            }
        };
        match result {
            Ok(Done::Received(st)) if *short == 0 => assert_eq!(st.len, serial.len()),
            Err(err) if *short > 0 => {
                let text = err.to_string();
                assert!(
                    text.contains(&format!("is {} bytes", serial.len()))
                        && text.contains(&format!("holds only {capacity} bytes")),
                    "case {case}: {text}"
                );
            }
            other => panic!("case {case} ({into:?}): {other:?}"),
        }
        let after = e.counters();
        let layout_reads = after.verbs_layout_reads - before.verbs_layout_reads;
        let requests = after.verbs_layout_read_requests - before.verbs_layout_read_requests;
        assert_eq!(
            layout_reads,
            u64::from(*in_place),
            "case {case}: reads in place"
        );
        if let Some(exact) = exact {
            assert_eq!(requests, *exact, "case {case}: READs");
        }
        // At least a READ a run of the send's (blocks that touch being one run).
        let runs = Blocks::new(source.as_ptr(), *count, *extent, list)
            .unwrap()
            .runs(list, 0, capacity)
            .count() as u64;
        assert!(
            !*in_place || requests >= runs,
            "case {case}: {requests} READs for {runs} runs"
        );
        let staged = after.verbs_staged_reads - before.verbs_staged_reads;
        assert_eq!(
            staged,
            u64::from(matches!(into, Receive::Doubles)),
            "case {case}"
        );
        if let Some(i) = (0..buf.len()).find(|&i| buf[i] != expected[i]) {
            let place = if i >= span {
                "the guard"
            } else {
                "a block or gap"
            };
            panic!(
                "case {case} ({into:?}): byte {i} of {span}, in {place}, is {:#x}, not {:#x}",
                buf[i], expected[i]
            );
        }
    }
}

/// One element of very many blocks each way, past a frame (4 MiB over TCP): 7-byte blocks
/// 12 apart into 5-byte ones 9 apart (short: packed and unpacked a scratchful at a time), and
/// 300-byte blocks into 400-byte ones (long: gathered and scattered by iovecs), the blocks of
/// each side cut where the other's are not. Over TCP every read into the blocks and every
/// write from them goes on from the position the last left (`Conn`'s `Target::Blocks` and
/// `send_at`) rather than seek from the element's first block; a position carried wrong puts
/// bytes in the wrong blocks. The receive's blocks hold a serial unpack, its gaps their
/// poison.
fn elements_of_many_blocks_land_whole(e: &mut Engine, rank: u32, mode: &str) {
    // (blocks, length, stride) of the send's element, then of the receive's.
    let shapes = [
        ((700_000, 7, 12), (980_000, 5, 9)),
        ((20_000, 300, 310), (15_000, 400, 450)),
    ];
    let element = |(n, len, stride): (usize, usize, usize)| -> (Vec<Block>, usize) {
        let list = (0..n)
            .map(|i| Block {
                offset: i * stride,
                len,
            })
            .collect();
        (list, n * stride)
    };
    for (i, (sent, receive)) in shapes.into_iter().enumerate() {
        let tag = 80 + i as i32;
        let (list, extent) = element(sent);
        let (source, serial) = layout_source(&list, extent, 1);
        if rank == 1 {
            let blocks = Blocks::new(source.as_ptr(), 1, extent, &list).unwrap();
            // SAFETY: the source, list and description outlive the send, waited for here.
            let h =
                unsafe { e.post_send_blocks(0, 1, 0, tag, SendMode::Standard, &blocks) }.unwrap();
            match h {
                Some(h) => assert_eq!(e.wait(h).unwrap(), Done::Sent),
                None => send(e, 0, tag, &serial, SendMode::Standard),
            }
            continue;
        }
        let (rlist, rextent) = element(receive);
        assert_eq!(
            receive.0 * receive.1,
            serial.len(),
            "shape {i}: the lengths"
        );
        let mut buf = vec![POISON; rextent];
        let rblocks = Blocks::new(buf.as_mut_ptr(), 1, rextent, &rlist).unwrap();
        // SAFETY: `buf`, `rlist` and the description outlive the receive, waited for here.
        let h = unsafe {
            e.post_recv_blocks(0, SourceSel::Rank(1), TagSel::Tag(tag), &rblocks, Some(1))
        }
        .unwrap()
        .expect("the engine lands every receive in its blocks");
        assert!(
            matches!(e.wait(h), Ok(Done::Received(st)) if st.len == serial.len()),
            "shape {i} ({mode})"
        );
        let mut expected = vec![POISON; rextent];
        for (b, bytes) in rlist.iter().zip(serial.chunks(receive.1)) {
            expected[b.offset..b.offset + b.len].copy_from_slice(bytes);
        }
        if let Some(at) = (0..rextent).find(|&at| buf[at] != expected[at]) {
            panic!(
                "shape {i} ({mode}): byte {at} (block {} of {}) is {:#x}, not {:#x}",
                at / receive.2,
                receive.0,
                buf[at],
                expected[at]
            );
        }
    }
}

/// A wire-up directory, removed when dropped, so that a failed assertion leaves none behind.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = env::temp_dir().join(name);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("could not remove {}: {e}", self.0.display());
        }
    }
}

/// Rank 1 posts, all at once to rank 0 over TCP, gathered sends (an eager column, a
/// rendezvous one) between contiguous ones (eager and rendezvous), with varied tags; rank 0
/// receives them with wildcard source and tag, one at a time, and must get them in the
/// order they were posted (MPI's non-overtaking rule), whichever path each took.
fn gathered_and_contiguous_sends_keep_their_order(e: &mut Engine, rank: u32) {
    const MESSAGES: usize = 10;
    let extent = 24;
    let list = [Block { offset: 8, len: 8 }];
    // (gathered, elements or bytes) per message: columns of 12 and 40 000 doubles.
    let shapes = |i: usize| match i % 5 {
        0 => (false, 100),
        1 => (true, 12),
        2 => (false, 9000),
        3 => (true, 40_000),
        _ => (false, 0),
    };
    let sources: Vec<Vec<u8>> = (0..MESSAGES)
        .map(|i| match shapes(i) {
            (true, count) => pattern(count * extent, i),
            (false, len) => pattern(len, i),
        })
        .collect();
    let expected = |i: usize| -> Vec<u8> {
        match shapes(i) {
            (true, count) => (0..count)
                .flat_map(|el| sources[i][el * extent + 8..][..8].to_vec())
                .collect(),
            (false, _) => sources[i].clone(),
        }
    };
    let tag = |i: usize| 1000 + (i % 3) as i32;
    if rank == 1 {
        let descriptions: Vec<Option<Blocks>> = (0..MESSAGES)
            .map(|i| match shapes(i) {
                (true, count) => {
                    Some(Blocks::new(sources[i].as_ptr(), count, extent, &list).unwrap())
                }
                (false, _) => None,
            })
            .collect();
        let mut handles = Vec::new();
        for (i, description) in descriptions.iter().enumerate() {
            // SAFETY: the sources, list and descriptions outlive the sends, waited for below.
            let h = unsafe {
                match description {
                    Some(blocks) => e
                        .post_send_blocks(0, 1, 0, tag(i), SendMode::Standard, blocks)
                        .unwrap()
                        .expect("TCP gathers every send's frames"),
                    None => e
                        .post_send(
                            0,
                            1,
                            0,
                            tag(i),
                            SendMode::Standard,
                            sources[i].as_ptr(),
                            sources[i].len(),
                        )
                        .unwrap(),
                }
            };
            handles.push(h);
        }
        for h in handles {
            assert_eq!(e.wait(h).unwrap(), Done::Sent);
        }
        return;
    }
    let capacity = (0..MESSAGES).map(|i| expected(i).len()).max().unwrap();
    for i in 0..MESSAGES {
        let (buf, st) = recv(e, SourceSel::Any, TagSel::Any, capacity);
        let want = expected(i);
        assert_eq!(
            (st.source, st.tag, st.len),
            (1, tag(i), want.len()),
            "message {i} ({:?}) overtaken",
            shapes(i)
        );
        assert!(buf[..want.len()] == want[..], "message {i}: wrong bytes");
    }
}

const LIMITED_ENV: &str = "PML_ENGINE_TEST_LIMITED_RANK";
/// Address space the limited ranks get beyond what they use before the engine starts.
const HEADROOM: u64 = 80 << 30;

/// Bytes of address space this process uses now (`VmSize`).
fn address_space_used() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map(|v| v.trim().parse::<u64>().unwrap())
        .unwrap();
    kib << 10
}

/// Under `ulimit -v` (RLIMIT_AS), a rank's arena and its mappings of its peers' arenas must
/// leave room for the program's own allocations, and still carry large messages.
#[test]
fn an_address_space_limit_leaves_room_beside_the_arenas() {
    if let Ok(spec) = env::var(LIMITED_ENV) {
        let (dir, rank) = spec.split_once(',').unwrap();
        let limit = address_space_used() + HEADROOM;
        let lim = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: setrlimit reads only `lim`; this process is a rank of this test alone.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
        let mut w = DirWireup {
            dir: dir.into(),
            rank: rank.parse().unwrap(),
            size: 2,
            round: 0,
        };
        let mut e = Engine::new(&mut w, EngineConfig::default()).unwrap();
        println!("{}", e.description());
        let arena = pml::shared_arena::GLOBAL
            .info()
            .expect("an arena under the limit");
        assert!(arena.len as u64 <= limit / 8, "{} bytes", arena.len);
        // Half the headroom, as address space only: it fits beside both arenas.
        let half = (HEADROOM / 2) as usize;
        // SAFETY: a fresh inaccessible mapping chosen by the kernel, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                half,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "the arenas left no room for 40 GiB");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, half) };
        let data = pattern(1 << 20, 4);
        if e.rank() == 1 {
            send(&mut e, 0, 9, &data, SendMode::Standard);
        } else {
            let (buf, _) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(9), 1 << 20);
            assert!(buf == data, "1 MiB arrived wrong");
            assert_eq!(e.counters().mapped_reads, 1, "not from the peer's arena");
        }
        e.flush_all().unwrap();
        return;
    }
    let outputs = run_two_ranks(
        "an_address_space_limit_leaves_room_beside_the_arenas",
        LIMITED_ENV,
    );
    let out0 = String::from_utf8_lossy(&outputs[0].stdout);
    assert!(out0.contains("MiB of address space"), "{out0}");
}

const UNREADABLE_ENV: &str = "PML_ENGINE_TEST_UNREADABLE_RANK";

/// Publishes rank 0's arena at a descriptor that does not exist, so rank 1 cannot map it.
struct BadArenaWireup(DirWireup);

impl pml::Wireup for BadArenaWireup {
    fn rank(&self) -> u32 {
        self.0.rank()
    }
    fn size(&self) -> u32 {
        self.0.size()
    }
    fn job_id(&self) -> String {
        self.0.job_id()
    }
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let wire = String::from_utf8_lossy(value);
        match pml::shared_arena::ArenaInfo::from_wire(&wire) {
            Some(info) if key == "pml.arena.0" => {
                let bad = pml::shared_arena::ArenaInfo { fd: 99_999, ..info };
                self.0.put(key, bad.to_wire().as_bytes())
            }
            _ => self.0.put(key, value),
        }
    }
    fn fence(&mut self) -> Result<(), String> {
        self.0.fence()
    }
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, String> {
        self.0.get(from, key)
    }
    fn job_secret(&mut self) -> Result<[u8; 32], String> {
        self.0.job_secret()
    }
}

/// A rank that cannot map its peer's arena takes the host for one where peers cannot read
/// arenas, and stops serving large blocks from its own.
#[test]
fn an_arena_peers_cannot_read_stops_serving() {
    if let Ok(spec) = env::var(UNREADABLE_ENV) {
        let (dir, rank) = spec.split_once(',').unwrap();
        let mut w = BadArenaWireup(DirWireup {
            dir: dir.into(),
            rank: rank.parse().unwrap(),
            size: 2,
            round: 0,
        });
        let e = Engine::new(&mut w, EngineConfig::default()).unwrap();
        // Each rank maps its peer's arena after the engine's last fence: without this one,
        // rank 1 could exit first, and rank 0 then fails to map it and stops serving too.
        pml::Wireup::fence(&mut w).unwrap();
        let block = vec![1u8; 1 << 20];
        let in_arena = pml::shared_arena::GLOBAL.contains(block.as_ptr());
        if e.rank() == 1 {
            assert!(!in_arena, "a large block still came from the arena");
            assert!(
                e.description().contains("shared arena stopped"),
                "{}",
                e.description()
            );
        } else {
            assert!(in_arena, "rank 0 reads rank 1's arena, so keeps its own");
        }
        return;
    }
    run_two_ranks("an_arena_peers_cannot_read_stops_serving", UNREADABLE_ENV);
}

/// Runs `test` as two child ranks (`key` tells each its meeting directory and rank, as
/// `dir,rank`), asserts that both succeeded, and returns their outputs.
fn run_two_ranks(test: &str, key: &str) -> Vec<std::process::Output> {
    let dir = env::temp_dir().join(format!("pml-engine-{test}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let outputs = run_children(
        test,
        2,
        key,
        |r| format!("{},{r}", dir.display()),
        &[],
        Duration::from_secs(120),
    );
    assert_all_succeeded(&outputs, "");
    fs::remove_dir_all(dir).unwrap();
    outputs
}

/// Asserts that every child rank exited successfully, showing a failed one's output: one
/// that failed by itself first, as `wait_all` kills the others once one fails.
fn assert_all_succeeded(outputs: &[std::process::Output], case: &str) {
    use std::os::unix::process::ExitStatusExt;
    let killed = |o: &std::process::Output| o.status.signal() == Some(libc::SIGKILL);
    let mut order: Vec<usize> = (0..outputs.len()).collect();
    order.sort_by_key(|&r| killed(&outputs[r]));
    for r in order {
        let o = &outputs[r];
        assert!(
            o.status.success(),
            "{case}rank {r} failed ({}):\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

const FAILED_PEER_ENV: &str = "PML_ENGINE_TEST_FAILED_PEER_RANK";

/// A failure of messaging itself stops the engine: a receive whose wait failed keeps its
/// buffer pointer in the engine, and its owner takes the buffer back, so no later message
/// may land there. Rank 1 dies (exits without finalizing) while rank 0 waits on a wildcard
/// receive; rank 0 then sends to itself a message that would match it.
#[test]
fn a_failure_stops_the_engine() {
    let Ok(spec) = env::var(FAILED_PEER_ENV) else {
        run_two_ranks("a_failure_stops_the_engine", FAILED_PEER_ENV);
        return;
    };
    let (dir, rank) = spec.split_once(',').unwrap();
    let mut w = DirWireup {
        dir: dir.into(),
        rank: rank.parse().unwrap(),
        size: 2,
        round: 0,
    };
    let config = EngineConfig {
        transport: TransportChoice::Tcp,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(&mut w, config).unwrap();
    if e.rank() == 1 {
        // Connects, and learns that rank 0 has its message before dying.
        send(&mut e, 0, 1, b"hello", SendMode::Standard);
        recv(&mut e, SourceSel::Rank(0), TagSel::Tag(2), 0);
        std::process::exit(0);
    }
    recv(&mut e, SourceSel::Rank(1), TagSel::Tag(1), 5);
    send(&mut e, 1, 2, b"", SendMode::Standard);
    let mut inbox = [0u8; 8];
    // SAFETY: `inbox` outlives the engine, dropped at the end of this function.
    let waiting =
        unsafe { e.post_recv(0, SourceSel::Any, TagSel::Tag(7), inbox.as_mut_ptr(), 8) }.unwrap();
    let failure = e.wait(waiting).unwrap_err();
    assert!(
        matches!(&failure, pml::PmlError::Transport(t)
            if t.peer == 1 && t.cause.contains("without finalizing")),
        "{failure:?}"
    );
    let stopped = Err(pml::PmlError::Stopped(Box::new(failure)));
    let data = [9u8; 8];
    // SAFETY: `data` outlives the engine.
    let sent = unsafe { e.post_send(0, 0, 0, 7, SendMode::Standard, data.as_ptr(), 8) };
    assert_eq!(sent.map(drop), stopped, "a send after the failure");
    assert_eq!(
        e.progress().map(drop),
        stopped,
        "progress after the failure"
    );
    assert_eq!(
        e.test(waiting).map(drop),
        stopped,
        "a test after the failure"
    );
    assert_eq!(
        e.wait(waiting).map(drop),
        stopped,
        "a wait after the failure"
    );
    assert_eq!(e.flush_all(), stopped, "flush after the failure");
    let mut other = [0u8; 8];
    // SAFETY: `other` outlives the engine.
    let received = unsafe { e.recv(0, SourceSel::Any, TagSel::Any, other.as_mut_ptr(), 8) };
    assert_eq!(received.map(drop), stopped, "a receive after the failure");
    assert_eq!(
        inbox, [0; 8],
        "a message landed in a receive whose wait failed"
    );
    println!("rank 0 stopped on rank 1's failure");
}

const WOKEN_ENV: &str = "PML_ENGINE_TEST_WOKEN_RANK";

/// A rank that waits longer than its spin sleeps, and its peer's message wakes it: of rank
/// 0's sleeps while rank 1 takes 3 ms over each reply, the one the reply came in ends by the
/// reply's wake, and none runs to its timeout with the reply already there (a lost
/// wake-up, which would cost the rest of the sleep). Counted, not timed: a wait resumes a
/// wake-up after its peer is ready however busy the host.
#[test]
fn a_sleeping_rank_is_woken_by_its_peers_message() {
    const ROUNDS: u64 = 50;
    let Ok(spec) = env::var(WOKEN_ENV) else {
        let outputs = run_two_ranks("a_sleeping_rank_is_woken_by_its_peers_message", WOKEN_ENV);
        println!("{}", String::from_utf8_lossy(&outputs[0].stdout));
        return;
    };
    let (dir, rank) = spec.split_once(',').unwrap();
    let mut w = DirWireup {
        dir: dir.into(),
        rank: rank.parse().unwrap(),
        size: 2,
        round: 0,
    };
    let mut e = Engine::new(&mut w, EngineConfig::default()).unwrap();
    for i in 0..ROUNDS {
        if e.rank() == 0 {
            send(&mut e, 1, 1, &i.to_le_bytes(), SendMode::Standard);
            let (buf, _) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(2), 8);
            assert_eq!(buf, (i + 1).to_le_bytes());
        } else {
            let (buf, _) = recv(&mut e, SourceSel::Rank(0), TagSel::Tag(1), 8);
            std::thread::sleep(Duration::from_millis(3));
            let next = u64::from_le_bytes(buf.try_into().unwrap()) + 1;
            send(&mut e, 0, 2, &next.to_le_bytes(), SendMode::Standard);
        }
    }
    e.flush_all().unwrap();
    if e.rank() == 0 {
        let c = e.counters();
        println!(
            "rank 0 slept {} times: {} woken by rank 1, {} lost wake-ups",
            c.shm_sleeps, c.shm_sleeps_woken, c.shm_missed_wakes
        );
        assert!(c.shm_sleeps >= ROUNDS, "rank 0 waited without sleeping");
        // The count is an upper bound: a sender preempted for longer than a sleep between
        // writing its frame and waking the sleeper counts as a miss too. A lost-wake-up
        // protocol loses most wakes; a busy host, a few.
        assert!(
            c.shm_missed_wakes <= ROUNDS / 10,
            "sleeps outlived a reply: {c:?}"
        );
        assert!(
            c.shm_sleeps_woken >= ROUNDS / 2,
            "most replies came without waking rank 0: {c:?}"
        );
    }
}
