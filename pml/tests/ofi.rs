//! The libfabric transport's failure paths, on the providers that run without a device:
//! a peer that dies is an error naming it (where `MPIRT_OFI_PEER_TIMEOUT` asks for that),
//! never a hang; a peer that is merely slow is never taken for dead by default; one-sided
//! operations reach the peer's window. And how long a rendezvous send's buffer stays exposed
//! to its peer's read (until the peer's FIN).

#![cfg(feature = "ofi")]

use std::path::PathBuf;
use std::time::{Duration, Instant};
use std::{env, fs};

use pml::transport::RmaOp;
use pml::{
    Done, Engine, EngineConfig, Handle, OneSided, Pml, PmlError, RemoteKey, SendMode, SourceSel,
    TagSel, TransportChoice, Wireup,
};

mod ranks_common;

use ranks_common::{
    every_rank_done, exchange, ofi_on_loopback, pattern, put_and_read_back, rank0_saw_rank1_die,
    recv, rma_waited, run_children, send, swap_windows, wait_for_dead_rank1, DirWireup,
};

const DEATH_ENV: &str = "PML_OFI_TEST_DEATH";
const SLOW_ENV: &str = "PML_OFI_TEST_SLOW";
const EXPOSED_ENV: &str = "PML_OFI_TEST_EXPOSED";
/// The peer timeout the dead-peer test opts in to.
const PEER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the slow rank computes: longer than the 10 s after which the transport used to
/// take a peer for dead, whatever the configuration.
const SLOW_FOR: Duration = Duration::from_secs(11);

/// Rank 1 computes (sleeps, making no progress) for [`SLOW_FOR`] right after wire-up, while
/// rank 0's first send to it, 8 KiB (beyond the inject size, so on shm and tcp;ofi_rxm it
/// completes only once rank 1's progress takes it), waits: with the default configuration
/// both ranks finish, the data intact, where rank 0 used to fail naming rank 1 as dead.
#[test]
fn a_slow_peer_is_not_taken_for_dead() {
    if let Ok(spec) = env::var(SLOW_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        slow_peer_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "a_slow_peer_is_not_taken_for_dead",
        SLOW_ENV,
        &["shm", "tcp;ofi_rxm"],
    );
}

fn slow_peer_rank(dir: PathBuf, rank: u32, provider: &str) {
    let (mut w, mut e) = ofi_rank(dir, rank, provider);
    let data: Vec<u8> = (0..8 << 10).map(|i| (i % 251) as u8).collect();
    let mut inbox = vec![0u8; data.len()];
    if rank == 1 {
        std::thread::sleep(SLOW_FOR);
        // SAFETY: `inbox` outlives the request, waited for here.
        let r = unsafe {
            e.post_recv(
                0,
                SourceSel::Rank(0),
                TagSel::Tag(7),
                inbox.as_mut_ptr(),
                inbox.len(),
            )
        }
        .unwrap();
        e.wait(r).unwrap();
        assert_eq!(inbox, data, "rank 1 received other bytes");
    } else {
        // SAFETY: `data` outlives the request, waited for here.
        let s = unsafe { e.post_send(0, 0, 1, 7, SendMode::Standard, data.as_ptr(), data.len()) }
            .unwrap();
        e.wait(s).unwrap();
    }
    w.fence().unwrap();
    println!("rank {rank} done");
}

/// Runs `test`'s two ranks over each of `providers` (the children get "dir,rank,provider"
/// in `spec_env`); each must exit cleanly, saying it is done.
fn both_ranks_finish(test: &str, spec_env: &str, providers: &[&str]) {
    // The providers' jobs at once: a slow peer's rank 1 sleeps through SLOW_FOR in each, and
    // one after the other they took twice that. Scoped, so that every job has ended (and its
    // directory is gone) before any one's outputs are checked.
    let runs: Vec<_> = std::thread::scope(|s| {
        let jobs: Vec<_> = providers
            .iter()
            .map(|&provider| {
                let dir = env::temp_dir().join(format!(
                    "pml-{test}-{}-{}",
                    provider.replace(';', "_"),
                    std::process::id()
                ));
                fs::create_dir_all(&dir).unwrap();
                let job = {
                    let dir = dir.clone();
                    s.spawn(move || {
                        run_children(
                            test,
                            2,
                            spec_env,
                            |r| format!("{},{r},{provider}", dir.display()),
                            &ofi_on_loopback(),
                            Duration::from_secs(120),
                        )
                    })
                };
                (provider, dir, job)
            })
            .collect();
        jobs.into_iter()
            .map(|(provider, dir, job)| {
                let outputs = job.join().unwrap();
                fs::remove_dir_all(dir).unwrap();
                (provider, outputs)
            })
            .collect()
    });
    for (provider, outputs) in runs {
        print!("{}", every_rank_done(&outputs, &format!("{provider}, ")));
    }
}

/// Rank `rank` of two, wired up through `dir`, over `provider` with the default settings.
fn ofi_rank(dir: PathBuf, rank: u32, provider: &str) -> (DirWireup, Engine) {
    let mut w = DirWireup::pair(dir, rank);
    let config = EngineConfig {
        transport: TransportChoice::Ofi,
        ofi_provider: Some(provider.into()),
        ..EngineConfig::default()
    };
    let e = Engine::new(&mut w, config).unwrap();
    (w, e)
}

/// Rank 1 exits without a word right after an exchange. Case `idle`: rank 0 only waits for a
/// message from it, sending nothing, so only the liveness probe can notice. Case `sending`:
/// rank 0 also sends it 8 KiB every 200 ms (from a send buffer, whose completion names the
/// peer). Case `finalized`: rank 1 says goodbye (drops its engine) before it exits, and rank 0
/// sends as in `sending`: past the timeout the transport takes rank 1 for finalized, which is
/// no error of its own, and the send it then refuses is one. Each way rank 0's operation fails
/// naming rank 1 and its host, within about the opted-in [`PEER_TIMEOUT`].
#[test]
fn a_dead_peer_is_an_error_not_a_hang() {
    if let Ok(spec) = env::var(DEATH_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        dead_peer_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2], it[3]);
        return;
    }
    // tcp;ofi_rxm only. udp;ofi_rxd acknowledges in the peer's software, so a long wait there
    // is no sign of death (`provider::acks_in_software`); shm completes a send once it is in
    // the peer's queue, whose memory outlives a crashed peer. On those, rsrun ends a job whose
    // rank died (mpirt's p2p suite checks that on each provider: a_panicking_rank_ends_the_job).
    for provider in ["tcp;ofi_rxm"] {
        for case in ["idle", "sending", "finalized"] {
            let dir = env::temp_dir().join(format!(
                "pml-ofi-death-{}-{case}-{}",
                provider.replace(';', "_"),
                std::process::id()
            ));
            fs::create_dir_all(&dir).unwrap();
            let outputs = run_children(
                "a_dead_peer_is_an_error_not_a_hang",
                2,
                DEATH_ENV,
                |r| format!("{},{r},{case},{provider}", dir.display()),
                &ofi_on_loopback(),
                Duration::from_secs(120),
            );
            let what = format!("{provider} {case}");
            println!("{what}: {}", rank0_saw_rank1_die(&outputs, &what));
            fs::remove_dir_all(dir).unwrap();
        }
    }
}

fn dead_peer_rank(dir: PathBuf, rank: u32, case: &str, provider: &str) {
    let mut w = DirWireup::pair(dir, rank);
    let config = EngineConfig {
        transport: TransportChoice::Ofi,
        ofi_provider: Some(provider.into()),
        ofi_peer_timeout: Some(PEER_TIMEOUT),
        ..EngineConfig::default()
    };
    let mut e = Engine::new(&mut w, config).unwrap();
    exchange(&mut e);
    // Rank 1 leaves only once both ranks have seen the exchange through.
    w.fence().unwrap();
    if rank == 1 {
        if case == "finalized" {
            // The engine's drop says goodbye: to rank 0, a rank that finalized.
            drop(e);
        }
        // Ends the process (without dropping the engine otherwise): to rank 0, a crash.
        std::process::exit(0);
    }
    let error = wait_for_dead_rank1(&mut e, case, 8 << 10);
    let expected = match case {
        "finalized" => "a send to rank 1 was refused: it failed earlier (rank 1 has finalized)",
        _ => "rank 1 did not take",
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
    println!("rank 0 saw rank 1 die");
}

/// Rank 0 sends 128 KiB (a rendezvous: rank 1 reads it by fi_read) and checks that its send
/// buffer counts as exposed until the peer's FIN says it read it all, and no longer then,
/// before the send is collected (a buffered send is collected only at the next one): waits
/// on a provider without a wait fd (udp;ofi_rxd) poll while one is (see `ofi::polled_step`),
/// so an exposure kept longer would keep them polling with nothing moving.
#[test]
fn a_send_buffer_is_exposed_until_the_peer_read_it() {
    if let Ok(spec) = env::var(EXPOSED_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        exposed_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "a_send_buffer_is_exposed_until_the_peer_read_it",
        EXPOSED_ENV,
        &["udp;ofi_rxd", "tcp;ofi_rxm"],
    );
}

fn exposed_rank(dir: PathBuf, rank: u32, provider: &str) {
    let (mut w, mut e) = ofi_rank(dir, rank, provider);
    let data = pattern(128 << 10, 3);
    if rank == 0 {
        assert_eq!(e.counters().ofi_exposed, 0, "exposed before any send");
        // SAFETY: `data` outlives the request, waited for here.
        let s = unsafe { e.post_send(0, 0, 1, 9, SendMode::Standard, data.as_ptr(), data.len()) }
            .unwrap();
        assert_eq!(
            e.counters().ofi_exposed,
            1,
            "a rendezvous send's buffer is not exposed"
        );
        // Rank 1 posts its receive only after this fence.
        w.fence().unwrap();
        while !e.is_complete(s).unwrap() {
            e.progress().unwrap();
        }
        assert_eq!(
            e.counters().ofi_exposed,
            0,
            "a send the peer finished reading stays exposed until it is collected"
        );
        e.wait(s).unwrap();
        assert_eq!(
            e.counters().ofi_exposed,
            0,
            "a collected send's buffer is exposed again"
        );
    } else {
        w.fence().unwrap();
        let mut inbox = vec![0u8; data.len()];
        // SAFETY: `inbox` outlives the request, waited for here.
        let r = unsafe {
            e.post_recv(
                0,
                SourceSel::Rank(0),
                TagSel::Tag(9),
                inbox.as_mut_ptr(),
                inbox.len(),
            )
        }
        .unwrap();
        e.wait(r).unwrap();
        assert!(inbox == data, "rank 1 received other bytes");
        assert!(
            e.counters().remote_reads >= 1,
            "the 128 KiB did not go by fi_read"
        );
    }
    w.fence().unwrap();
    println!("rank {rank} done");
}

const INLINE_ENV: &str = "PML_OFI_TEST_INLINE";

/// With the default settings, 64 KiB goes in one eager frame over udp;ofi_rxd, whose fi_read
/// is emulated by the same packets a send takes (no RTS, read request and FIN around them),
/// and by fi_read over tcp;ofi_rxm, where a read is one request and one stream.
#[test]
fn a_64_kib_message_rides_inline_where_reads_are_emulated() {
    if let Ok(spec) = env::var(INLINE_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        inline_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "a_64_kib_message_rides_inline_where_reads_are_emulated",
        INLINE_ENV,
        &["udp;ofi_rxd", "tcp;ofi_rxm"],
    );
}

fn inline_rank(dir: PathBuf, rank: u32, provider: &str) {
    let (mut w, mut e) = ofi_rank(dir, rank, provider);
    let data = pattern(64 << 10, 5);
    if rank == 0 {
        send(&mut e, 1, 3, &data, SendMode::Standard);
        // The send completed once its frame was copied; over rxd its packets leave only while
        // this rank calls into the provider (the first to a peer wait for its handshake), so
        // it waits in the engine, for the answer, not in the fence, which polls nothing.
        recv(&mut e, SourceSel::Rank(1), TagSel::Tag(4), 1);
    } else {
        let (got, _) = recv(&mut e, SourceSel::Rank(0), TagSel::Tag(3), data.len());
        send(&mut e, 0, 4, &[1], SendMode::Standard);
        assert!(got == data, "rank 1 received other bytes");
        let reads = e.counters().remote_reads;
        if provider == "udp;ofi_rxd" {
            assert_eq!(reads, 0, "64 KiB went by fi_read over {provider}");
        } else {
            assert!(reads >= 1, "64 KiB did not go by fi_read over {provider}");
        }
    }
    w.fence().unwrap();
    println!("rank {rank} done");
}

const STALE_ENV: &str = "PML_OFI_TEST_STALE";

/// A process killed with its shm endpoint open leaves the endpoint's file under /dev/shm;
/// once process ids come round, a rank given that process's id again used to fail to open
/// its own endpoint (`fi_enable`: -FI_EBUSY), as libfabric's shm named the file after the
/// process id and took the file's owner, of the same id, for alive. Each rank here finds
/// files a dead process of its id left under every name shm 1.17 would give its endpoint
/// by itself (`<pid>:<uid>:<n>`); it opens its endpoint all the same, under the job's name
/// (`/dev/shm/mpirt-<job id>-ofi-<rank>`, which rsrun removes with a dead job's other files),
/// talks to its peer, and the file goes when the endpoint closes.
#[test]
fn a_file_a_dead_process_of_the_same_id_left_does_not_stop_shm() {
    if let Ok(spec) = env::var(STALE_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        stale_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "a_file_a_dead_process_of_the_same_id_left_does_not_stop_shm",
        STALE_ENV,
        &["shm"],
    );
}

fn stale_rank(dir: PathBuf, rank: u32, provider: &str) {
    // SAFETY: getuid(2) has no preconditions.
    let uid = unsafe { libc::getuid() };
    // The first endpoints of this process would be numbered 0, 1, ...: a few of them.
    let stale: Vec<PathBuf> = (0..4)
        .map(|n| PathBuf::from(format!("/dev/shm/{}:{uid}:{n}", std::process::id())))
        .collect();
    /// Removes the files it names however the rank ends.
    struct Remove(Vec<PathBuf>);
    impl Drop for Remove {
        fn drop(&mut self) {
            for path in &self.0 {
                let _ = fs::remove_file(path);
            }
        }
    }
    let _stale = Remove(stale.clone());
    for path in &stale {
        fs::write(path, vec![0u8; 4096]).unwrap();
    }
    let job = dir.file_name().unwrap().to_string_lossy().into_owned();
    let own = PathBuf::from(format!("/dev/shm/mpirt-{job}-ofi-{rank}"));
    let (mut w, mut e) = ofi_rank(dir, rank, provider);
    assert!(own.exists(), "no endpoint file {}", own.display());
    exchange(&mut e);
    w.fence().unwrap();
    drop(e);
    assert!(!own.exists(), "{} outlived the endpoint", own.display());
    println!("rank {rank} done");
}

const DIRECT_ENV: &str = "PML_OFI_TEST_DIRECT";

/// A standard send of an eager message completes inside `post_send` (the engine's direct
/// path, no request): the frame is the provider's copy (injected) or in a send buffer of the
/// transport's, whatever its size up to the eager limit; a synchronous send and a
/// rendezvous one still go by a request, and every message arrives intact.
#[test]
fn an_eager_standard_send_completes_inside_the_call() {
    if let Ok(spec) = env::var(DIRECT_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        direct_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "an_eager_standard_send_completes_inside_the_call",
        DIRECT_ENV,
        &["tcp;ofi_rxm", "udp;ofi_rxd", "shm"],
    );
}

fn direct_rank(dir: PathBuf, rank: u32, provider: &str) {
    let (mut w, mut e) = ofi_rank(dir, rank, provider);
    // Injected (8 B), from a send buffer on tcp;ofi_rxm (1 KiB, beyond its 64-byte inject
    // size; injected on udp;ofi_rxd and shm), from a send buffer on every provider (6 KiB,
    // beyond shm's 4 KiB inject size, within every provider's eager limit), and beyond every
    // provider's eager limit (1 MiB).
    let eager = [pattern(8, 1), pattern(1 << 10, 2), pattern(6 << 10, 4)];
    let rendezvous = pattern(1 << 20, 3);
    if rank == 0 {
        // A first exchange, so that rxm's connection is up and no post is refused for it.
        send(&mut e, 1, 1, &[7], SendMode::Standard);
        recv(&mut e, SourceSel::Rank(1), TagSel::Tag(1), 1);
        for (i, data) in eager.iter().enumerate() {
            // SAFETY: `data` outlives the send, which completes inside the call.
            let h =
                unsafe { e.post_send(0, 0, 1, 2, SendMode::Standard, data.as_ptr(), data.len()) }
                    .unwrap();
            assert_eq!(
                h,
                Handle::SENT,
                "{provider}: the standard send of {} bytes (message {i}) made a request",
                data.len()
            );
        }
        for (mode, data) in [
            (SendMode::Synchronous, &eager[0]),
            (SendMode::Standard, &rendezvous),
        ] {
            // SAFETY: `data` outlives the request, waited for here.
            let h = unsafe { e.post_send(0, 0, 1, 2, mode, data.as_ptr(), data.len()) }.unwrap();
            assert_ne!(
                h,
                Handle::SENT,
                "{provider}: a {mode:?} send of {} bytes completed inside the call",
                data.len()
            );
            assert_eq!(e.wait(h).unwrap(), Done::Sent);
        }
    } else {
        recv(&mut e, SourceSel::Rank(0), TagSel::Tag(1), 1);
        send(&mut e, 0, 1, &[7], SendMode::Standard);
        for data in eager.iter().chain([&eager[0], &rendezvous]) {
            let (got, _) = recv(&mut e, SourceSel::Rank(0), TagSel::Tag(2), data.len());
            assert!(
                got == *data,
                "{provider}: rank 1 received other bytes ({})",
                data.len()
            );
        }
    }
    w.fence().unwrap();
    println!("rank {rank} done");
}

const CREDITS_ENV: &str = "PML_OFI_TEST_CREDITS";
/// Round trips of the ping-pong, and messages of the one-way stream after it.
const PING_PONGS: usize = 200;
const STREAMED: usize = 256;

/// Credits ride on frames going the other way: a ping-pong of 8-byte messages sends no
/// credit frame (one each way every 16 messages before), and a one-way stream, with no frame
/// going back to carry them, sends one per half of the peer's 64 credits, 8 for 256
/// messages (16 before) and at least one, since the stream outruns the sender's credits.
#[test]
fn credits_ride_on_frames_going_back() {
    if let Ok(spec) = env::var(CREDITS_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        credits_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "credits_ride_on_frames_going_back",
        CREDITS_ENV,
        &["udp;ofi_rxd", "tcp;ofi_rxm"],
    );
}

fn credits_rank(dir: PathBuf, rank: u32, provider: &str) {
    let (mut w, mut e) = ofi_rank(dir, rank, provider);
    let peer = 1 - rank;
    let before = e.counters().ofi_credit_frames;
    for round in 0..PING_PONGS {
        let data = (round as u64).to_le_bytes();
        if rank == 0 {
            send(&mut e, peer, 1, &data, SendMode::Standard);
        }
        let (got, _) = recv(&mut e, SourceSel::Rank(peer), TagSel::Tag(1), data.len());
        assert_eq!(got, data, "rank {rank}: round {round} carried other bytes");
        if rank == 1 {
            send(&mut e, peer, 1, &data, SendMode::Standard);
        }
    }
    let ping_pong = e.counters().ofi_credit_frames - before;
    assert_eq!(
        ping_pong, 0,
        "rank {rank} sent {ping_pong} credit frames in a ping-pong of {PING_PONGS} rounds"
    );
    for i in 0..STREAMED {
        let data = (i as u64).to_le_bytes();
        if rank == 0 {
            send(&mut e, peer, 2, &data, SendMode::Standard);
        } else {
            let (got, _) = recv(&mut e, SourceSel::Rank(peer), TagSel::Tag(2), data.len());
            assert_eq!(
                got, data,
                "rank 1: message {i} of the stream carried other bytes"
            );
        }
    }
    let streamed = e.counters().ofi_credit_frames - before;
    let expected = if rank == 0 {
        0..=0
    } else {
        1..=STREAMED as u64 / 32
    };
    assert!(
        expected.contains(&streamed),
        "rank {rank} sent {streamed} credit frames in a one-way stream of {STREAMED} \
         messages ({expected:?} expected)"
    );
    w.fence().unwrap();
    println!("rank {rank} done ({streamed} credit frames)");
}

const TWO_WAY_ENV: &str = "PML_OFI_TEST_TWO_WAY";
/// A payload whose frame (prefix, 20-byte match header, payload: 60 bytes) fits tcp;ofi_rxm's
/// 64-byte inject size, and with a consumed count (8 bytes more) would not: no frame of the
/// streams can carry credits back.
const JUST_INJECTED: usize = 36;

/// Both ranks stream frames to each other at once, each too big to inject with credits and
/// small enough to inject without them, so that neither stream's frames carry the other's
/// credits: both ranks run out of credits, take them from credit frames of their own, and
/// every message arrives (a hang here, stopped by the job's timeout, would be credits lost).
#[test]
fn two_way_streams_of_just_injected_frames_return_credits_alone() {
    if let Ok(spec) = env::var(TWO_WAY_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        two_way_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "two_way_streams_of_just_injected_frames_return_credits_alone",
        TWO_WAY_ENV,
        &["tcp;ofi_rxm", "udp;ofi_rxd"],
    );
}

fn two_way_rank(dir: PathBuf, rank: u32, provider: &str) {
    let (mut w, mut e) = ofi_rank(dir, rank, provider);
    let peer = 1 - rank;
    let before = e.counters().ofi_credit_frames;
    for i in 0..STREAMED {
        let data = pattern(JUST_INJECTED, i);
        send(&mut e, peer, 5, &data, SendMode::Standard);
    }
    for i in 0..STREAMED {
        let (got, _) = recv(&mut e, SourceSel::Rank(peer), TagSel::Tag(5), JUST_INJECTED);
        assert!(
            got == pattern(JUST_INJECTED, i),
            "rank {rank}: message {i} of the stream carried other bytes"
        );
    }
    let credit_frames = e.counters().ofi_credit_frames - before;
    if provider == "tcp;ofi_rxm" {
        assert!(
            credit_frames >= 1,
            "rank {rank} sent no credit frame while {STREAMED} frames came in that no frame \
             going back could carry credits for"
        );
    }
    w.fence().unwrap();
    println!("rank {rank} done ({credit_frames} credit frames)");
}

const BESIDE_SHM_ENV: &str = "PML_OFI_TEST_BESIDE_SHM";

/// [`DirWireup`] for a job whose rank 2 says it runs on another host: ranks 0 and 1 then reach
/// each other over shared memory, and rank 2 over OFI (`--transport auto` with a provider
/// named). It rewrites the host rank 2 publishes under the engine's `pml.host.2`.
struct ElsewhereWireup(DirWireup);

impl Wireup for ElsewhereWireup {
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
        let value = if key == "pml.host.2" {
            b"elsewhere".as_slice()
        } else {
            value
        };
        self.0.put(key, value)
    }
    fn fence(&mut self) -> Result<(), String> {
        self.0.fence()
    }
    fn job_secret(&mut self) -> Result<[u8; 32], String> {
        self.0.job_secret()
    }
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, String> {
        self.0.get(from, key)
    }
}

/// A rank that reaches one peer over shared memory and another over udp;ofi_rxd (which has
/// no wait fd) sleeps while it waits, woken by its shared-memory peer: rank 0 waits for
/// rank 1's replies, each 3 ms late, while rank 2 is idle over OFI. Before, its waits took
/// OFI's missing fd for "something may be there" and polled without ever sleeping (no wake
/// set sleep at all); now each sleeps on the shared-memory wake fd for at most OFI's nap.
/// Counted, not timed.
#[test]
fn a_rank_beside_an_fd_less_provider_sleeps() {
    const ROUNDS: u64 = 20;
    let Ok(spec) = env::var(BESIDE_SHM_ENV) else {
        let dir = env::temp_dir().join(format!("pml-beside-shm-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let outputs = run_children(
            "a_rank_beside_an_fd_less_provider_sleeps",
            3,
            BESIDE_SHM_ENV,
            |r| format!("{},{r}", dir.display()),
            &ofi_on_loopback(),
            Duration::from_secs(120),
        );
        fs::remove_dir_all(dir).unwrap();
        print!("{}", every_rank_done(&outputs, "udp;ofi_rxd beside shm, "));
        return;
    };
    let (dir, rank) = spec.split_once(',').unwrap();
    let rank: u32 = rank.parse().unwrap();
    let mut w = ElsewhereWireup(DirWireup {
        dir: dir.into(),
        rank,
        size: 3,
        round: 0,
    });
    let config = EngineConfig {
        transport: TransportChoice::Auto,
        ofi_provider: Some("udp;ofi_rxd".into()),
        ..EngineConfig::default()
    };
    let mut e = Engine::new(&mut w, config).unwrap();
    if rank == 0 {
        // Else the set could be shared memory beside TCP, which sleeps with or without the
        // change.
        let d = e.description();
        assert!(
            d.contains("1 ranks over libfabric udp;ofi_rxd ") && d.contains("over shared memory"),
            "rank 0 should reach rank 1 over shared memory and rank 2 over udp;ofi_rxd: {d}"
        );
    }
    // Rank 2 and rank 0 exchange a message over OFI first, so that the transport carries
    // a peer it has talked to.
    let standard = SendMode::Standard;
    if rank == 0 {
        send(&mut e, 2, 3, &7u64.to_le_bytes(), standard);
        let (word, _) = recv(&mut e, SourceSel::Rank(2), TagSel::Tag(3), 8);
        assert_eq!(word, 8u64.to_le_bytes(), "rank 2's reply over OFI");
    } else if rank == 2 {
        let (word, _) = recv(&mut e, SourceSel::Rank(0), TagSel::Tag(3), 8);
        let next = u64::from_le_bytes(word.try_into().unwrap()) + 1;
        send(&mut e, 0, 3, &next.to_le_bytes(), standard);
    }
    if rank < 2 {
        for i in 0..ROUNDS {
            if rank == 1 {
                let (inbox, _) = recv(&mut e, SourceSel::Rank(0), TagSel::Tag(1), 8);
                std::thread::sleep(Duration::from_millis(3));
                let next = u64::from_le_bytes(inbox.try_into().unwrap()) + 1;
                send(&mut e, 0, 2, &next.to_le_bytes(), standard);
            } else {
                send(&mut e, 1, 1, &i.to_le_bytes(), standard);
                let (inbox, _) = recv(&mut e, SourceSel::Rank(1), TagSel::Tag(2), 8);
                assert_eq!(inbox, (i + 1).to_le_bytes());
            }
        }
    }
    if rank == 0 {
        let c = e.counters();
        println!("rank 0 slept {} times on the wake set", c.wake_set_sleeps);
        assert!(
            c.wake_set_sleeps >= ROUNDS,
            "rank 0 waited without sleeping: {c:?}"
        );
    }
    e.flush_all().unwrap();
    w.fence().unwrap();
    println!("rank {rank} done");
}

const ONE_SIDED_ENV: &str = "PML_OFI_TEST_ONE_SIDED";
/// Rank 1's window in `one_sided_rank`.
const WINDOW: usize = 1 << 20;

/// One-sided operations over libfabric on tcp;ofi_rxm and shm (windows' transport contract:
/// `fi_writemsg`, `fi_read`, `fi_fetch_atomic`, `fi_compare_atomic`): rank 0 puts rank 1's
/// whole window and gets it back, adds to and compare-and-swaps one of its words (the old
/// values fetched), the counters show each kind, and messages still flow both ways after.
/// Failures are `a_failed_one_sided_operation_is_named_not_a_hang`'s.
#[test]
fn one_sided_operations_reach_the_peer() {
    if let Ok(spec) = env::var(ONE_SIDED_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        one_sided_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "one_sided_operations_reach_the_peer",
        ONE_SIDED_ENV,
        &["tcp;ofi_rxm", "shm"],
    );
}

fn one_sided_rank(dir: PathBuf, rank: u32, provider: &str) {
    let (mut w, mut e) = ofi_rank(dir, rank, provider);
    let mut window = vec![0u8; WINDOW];
    let exposure = e
        .expose_window(window.as_mut_ptr(), WINDOW)
        .unwrap()
        .unwrap_or_else(|| panic!("{provider} exposes no windows"));
    let remote = swap_windows(&mut e, window.as_ptr(), &exposure);
    let data: Vec<u8> = (0..WINDOW).map(|i| (i % 251) as u8).collect();
    if rank == 0 {
        put_and_read_back(&mut e, 1, remote, &data, provider);
        // The first word: 8 bytes of the pattern, then +5, then swapped for 77.
        let word = u64::from_ne_bytes(data[..8].try_into().unwrap());
        // SAFETY: an atomic reads and writes no local memory.
        let add = unsafe { rma_waited(&mut e, 1, RmaOp::FetchAdd { add: 5 }, remote) }.unwrap();
        assert_eq!(e.rma_result(1, add), word, "{provider}: fetch-and-add");
        let swap = RmaOp::CompareSwap {
            compare: word + 5,
            swap: 77,
        };
        // SAFETY: an atomic reads and writes no local memory.
        let swapped = unsafe { rma_waited(&mut e, 1, swap, remote) }.unwrap();
        assert_eq!(
            e.rma_result(1, swapped),
            word + 5,
            "{provider}: compare-and-swap"
        );
        let counted = e.counters();
        assert!(
            counted.rma_writes >= 1 && counted.rma_reads >= 1 && counted.rma_atomics == 2,
            "{provider}: {} fi_writes, {} fi_reads, {} atomics counted",
            counted.rma_writes,
            counted.rma_reads,
            counted.rma_atomics
        );
    }
    // Messages still flow both ways, and rank 1's window holds the put and the atomics.
    exchange(&mut e);
    if rank == 1 {
        let mut expected = data;
        expected[..8].copy_from_slice(&77u64.to_ne_bytes());
        assert!(
            window == expected,
            "rank 1's window does not hold rank 0's operations"
        );
    }
    exchange(&mut e);
    e.release_window(exposure);
    w.fence().unwrap();
    println!("rank {rank} done");
}

const FAILED_RMA_ENV: &str = "PML_OFI_TEST_FAILED_RMA";
/// The one-sided timeout the failure test opts in to (the default is none).
const RMA_TIMEOUT: Duration = Duration::from_secs(3);
/// Rank 1's window in `failed_rma_rank`.
const SMALL_WINDOW: usize = 4096;

/// One-sided operations that cannot succeed end with an error that names them, never a hang,
/// and write nothing: rank 0 writes 16 bytes reaching 8 past the end of rank 1's window and 8
/// before its start (both refused before posting, naming the window's size; messages still
/// flow after), then writes through a key rank 1 never gave out (its transport key
/// corrupted). tcp;ofi_rxm answers that with an error completion (its connection with rank 1
/// then breaks, so a message after it fails naming the write); shm never completes it, so the
/// one-sided timeout (here [`RMA_TIMEOUT`]; off by default) names it and stops the engine,
/// also under a read that waits for room behind it. Rank 1's window stays untouched
/// throughout.
#[test]
fn a_failed_one_sided_operation_is_named_not_a_hang() {
    if let Ok(spec) = env::var(FAILED_RMA_ENV) {
        let it: Vec<&str> = spec.split(',').collect();
        failed_rma_rank(PathBuf::from(it[0]), it[1].parse().unwrap(), it[2]);
        return;
    }
    both_ranks_finish(
        "a_failed_one_sided_operation_is_named_not_a_hang",
        FAILED_RMA_ENV,
        &["tcp;ofi_rxm", "shm"],
    );
}

fn failed_rma_rank(dir: PathBuf, rank: u32, provider: &str) {
    let mut w = DirWireup::pair(dir.clone(), rank);
    // Rank 0's read buffer, declared before the engine so that it outlives it.
    let mut back = [0u8; 16];
    let config = EngineConfig {
        transport: TransportChoice::Ofi,
        ofi_provider: Some(provider.into()),
        ofi_rma_timeout: Some(RMA_TIMEOUT),
        ..EngineConfig::default()
    };
    let mut e = Engine::new(&mut w, config).unwrap();
    let mut window = vec![0u8; SMALL_WINDOW];
    let exposure = e
        .expose_window(window.as_mut_ptr(), SMALL_WINDOW)
        .unwrap()
        .unwrap_or_else(|| panic!("{provider} exposes no windows"));
    let remote = swap_windows(&mut e, window.as_ptr(), &exposure);
    // The directory's keys are not per rank: rank 1's alone.
    if rank == 1 {
        w.put("packed-key", &exposure.key).unwrap();
    }
    w.fence().unwrap();
    let rank0_done = dir.join("rank0-done");
    if rank == 1 {
        exchange(&mut e);
        // Progress (the providers apply and refuse operations in the target's progress)
        // until rank 0 saw its failures; this rank's engine may fail once the connection
        // breaks.
        while !rank0_done.exists() {
            match e.progress() {
                Ok(true) => {}
                Ok(false) => std::thread::sleep(Duration::from_millis(1)),
                Err(_) => break,
            }
        }
        while !rank0_done.exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            window.iter().all(|&b| b == 0),
            "{provider}: a failed operation wrote into rank 1's window"
        );
    } else {
        let data = [7u8; 16];
        let write = RmaOp::Write {
            local: data.as_ptr(),
            len: data.len(),
        };
        for (addr, at) in [
            (remote.addr + SMALL_WINDOW as u64 - 8, "4088"),
            (remote.addr - 8, "-8"),
        ] {
            let outside = RemoteKey { addr, ..remote };
            // SAFETY: `data` outlives the call; a refused write posts nothing.
            let refused = unsafe { e.rma(1, write, outside) }.unwrap_err().to_string();
            assert!(
                refused.contains("rank 1")
                    && refused.contains(&format!("a write of 16 bytes at byte {at} of the window"))
                    && refused.contains("exposes 4096 bytes"),
                "{provider}: {refused}"
            );
        }
        exchange(&mut e);
        let mut packed = w.get(1, "packed-key").unwrap();
        // The transport's key, the packed key's first word, as no registration has it.
        packed[7] ^= 0x5a;
        let corrupted = RemoteKey {
            key: e.remote_key(1, &packed).unwrap(),
            ..remote
        };
        let started = Instant::now();
        // SAFETY: `data` outlives the write, waited for (or the engine stopped) here.
        let ticket = unsafe { e.rma(1, write, corrupted) }.unwrap();
        if provider == "shm" {
            // shm takes one write or read to a rank at a time: a read posted now waits for
            // room behind the unanswered write, polling without sleeping, and the timeout
            // ends that too.
            let read = RmaOp::Read {
                local: back.as_mut_ptr(),
                len: back.len(),
            };
            // SAFETY: `back` outlives the engine (declared before it); nothing is posted.
            let blocked = unsafe { e.rma(1, read, remote) }.unwrap_err().to_string();
            assert!(
                blocked.contains("fi_write of 16 bytes on rank 1")
                    && blocked.contains("MPIRT_OFI_RMA_TIMEOUT"),
                "{provider}: {blocked}"
            );
        }
        let failed = loop {
            match e.rma_done(1, ticket) {
                Ok(true) => panic!("{provider}: a write through a corrupted key completed"),
                Ok(false) => {}
                Err(error) => break error,
            }
            let waited = match e.progress() {
                Ok(true) => Ok(()),
                Ok(false) => e.sleep_until_woken(Duration::from_millis(10)),
                Err(error) => Err(error),
            };
            if let Err(error) = waited {
                break error;
            }
        }
        .to_string();
        let elapsed = started.elapsed();
        assert!(
            failed.contains("fi_write of 16 bytes on rank 1") && failed.contains(provider),
            "{provider}: {failed}"
        );
        assert!(elapsed < Duration::from_secs(30), "{provider}: {elapsed:?}");
        println!("{provider}: the corrupted key's write failed after {elapsed:.1?}: {failed}");
        // Messaging with rank 1 is over (a broken connection, or a stopped engine): a send
        // fails, naming why, rather than waiting.
        // SAFETY: `data` outlives the send, waited for here.
        let sent = unsafe { e.post_send(0, 0, 1, 9, SendMode::Standard, data.as_ptr(), 16) }
            .and_then(|s| e.wait(s));
        let refused = sent.unwrap_err().to_string();
        assert!(refused.contains("fi_write"), "{provider}: {refused}");
        fs::write(&rank0_done, b"").unwrap();
    }
    e.release_window(exposure);
    w.fence().unwrap();
    println!("rank {rank} done");
}
