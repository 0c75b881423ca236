//! The libfabric transport's failure paths, on the providers that run without a device:
//! a peer that dies is an error naming it (where `MPIRT_OFI_PEER_TIMEOUT` asks for that),
//! never a hang; a peer that is merely slow is never taken for dead by default. And how long
//! a rendezvous send's buffer stays exposed to its peer's read (until the peer's FIN).

#![cfg(feature = "ofi")]

use std::path::PathBuf;
use std::time::Duration;
use std::{env, fs};

use pml::{
    Engine, EngineConfig, Pml, PmlError, SendMode, SourceSel, TagSel, TransportChoice, Wireup,
};

mod ranks_common;

use ranks_common::{
    exchange, pattern, rank0_saw_rank1_die, run_children, wait_for_dead_rank1, DirWireup,
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
    for provider in providers {
        let dir = env::temp_dir().join(format!(
            "pml-{test}-{}-{}",
            provider.replace(';', "_"),
            std::process::id()
        ));
        fs::create_dir_all(&dir).unwrap();
        let outputs = run_children(
            test,
            2,
            spec_env,
            |r| format!("{},{r},{provider}", dir.display()),
            &[],
            Duration::from_secs(120),
        );
        for (rank, out) in outputs.iter().enumerate() {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains(&format!("rank {rank} done")),
                "{provider}, rank {rank}:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        fs::remove_dir_all(dir).unwrap();
    }
}

/// Rank `rank` of two, wired up through `dir`, over `provider` with the default settings.
fn ofi_rank(dir: PathBuf, rank: u32, provider: &str) -> (DirWireup, Engine) {
    let mut w = DirWireup {
        dir,
        rank,
        size: 2,
        round: 0,
    };
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
/// peer). Either way rank 0's operation fails naming rank 1, within about the opted-in
/// [`PEER_TIMEOUT`].
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
        for case in ["idle", "sending"] {
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
                &[],
                Duration::from_secs(120),
            );
            let what = format!("{provider} {case}");
            println!("{what}: {}", rank0_saw_rank1_die(&outputs, &what));
            fs::remove_dir_all(dir).unwrap();
        }
    }
}

fn dead_peer_rank(dir: PathBuf, rank: u32, case: &str, provider: &str) {
    let mut w = DirWireup {
        dir,
        rank,
        size: 2,
        round: 0,
    };
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
        // Ends the process without dropping the engine: to rank 0, a crash.
        std::process::exit(0);
    }
    let error = wait_for_dead_rank1(&mut e, case, 8 << 10);
    let expected = "rank 1 did not take";
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

/// Rank 0 sends 64 KiB (a rendezvous: rank 1 reads it by fi_read) and checks that its send
/// buffer counts as exposed until the peer's FIN says it read it all, and no longer then,
/// before the send is collected (a buffered send is collected only at the next one): waits
/// on a provider without a wait fd (udp;ofi_rxd) poll while one is (see `ofi::wait_step`),
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
    let data = pattern(64 << 10, 3);
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
            "the 64 KiB did not go by fi_read"
        );
    }
    w.fence().unwrap();
    println!("rank {rank} done");
}
