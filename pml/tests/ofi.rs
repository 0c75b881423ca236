//! The libfabric transport's failure paths, on the providers that run without a device:
//! a peer that dies is an error naming it, never a hang.

#![cfg(feature = "ofi")]

use std::path::PathBuf;
use std::time::{Duration, Instant};
use std::{env, fs, thread};

use pml::{
    Engine, EngineConfig, Pml, PmlError, SendMode, SourceSel, TagSel, TransportChoice, Wireup,
};

mod ranks_common;

use ranks_common::{rank0_saw_rank1_die, run_children, DirWireup};

/// One 4-byte message each way between ranks 0 and 1, so both have reached each other.
fn exchange(e: &mut Engine) {
    let peer = 1 - e.rank();
    let out = e.rank().to_le_bytes();
    let mut inbox = [0u8; 4];
    // SAFETY: both buffers outlive their requests, waited for below.
    let r = unsafe {
        e.post_recv(
            0,
            SourceSel::Rank(peer),
            TagSel::Tag(1),
            inbox.as_mut_ptr(),
            4,
        )
    }
    .unwrap();
    let s =
        unsafe { e.post_send(0, e.rank(), peer, 1, SendMode::Standard, out.as_ptr(), 4) }.unwrap();
    e.wait(s).unwrap();
    e.wait(r).unwrap();
    assert_eq!(inbox, peer.to_le_bytes());
}

const DEATH_ENV: &str = "PML_OFI_TEST_DEATH";

/// Rank 1 exits without a word right after an exchange. Case `idle`: rank 0 only waits for a
/// message from it, sending nothing, so only the liveness probe can notice. Case `sending`:
/// rank 0 also sends it 8 KiB every 200 ms (from a send buffer, whose completion names the
/// peer). Either way rank 0's operation fails naming rank 1, within about `SEND_TIMEOUT`.
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
    let t = Instant::now();
    let mut inbox = [0u8; 8];
    // SAFETY: `inbox` lives until the process ends; the request never completes (the
    // sender is dead), so the engine never writes it after this function.
    let recv = unsafe { e.post_recv(0, SourceSel::Rank(1), TagSel::Tag(5), inbox.as_mut_ptr(), 8) }
        .unwrap();
    let data = vec![7u8; 8 << 10];
    let error = match case {
        "idle" => e.wait(recv).unwrap_err(),
        _ => loop {
            assert!(t.elapsed() < Duration::from_secs(60), "no error in 60 s");
            // SAFETY: `data` outlives the request, waited for below.
            let sent =
                unsafe { e.post_send(0, 0, 1, 5, SendMode::Standard, data.as_ptr(), data.len()) }
                    .and_then(|h| e.wait(h));
            if let Err(error) = sent {
                break error;
            }
            let until = Instant::now() + Duration::from_millis(200);
            let mut failed = None;
            while failed.is_none() && Instant::now() < until {
                failed = e.progress().err();
                thread::sleep(Duration::from_millis(1));
            }
            if let Some(error) = failed {
                break error;
            }
        },
    };
    println!("after {:?}: {error}", t.elapsed());
    let expected = "rank 1 did not take";
    match &error {
        PmlError::Transport { peer: 1, cause, .. } if cause.contains(expected) => {}
        other => panic!("expected a transport error with rank 1 ({expected}), got {other:?}"),
    }
    println!("rank 0 saw rank 1 die");
}
