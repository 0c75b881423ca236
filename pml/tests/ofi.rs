//! The libfabric transport's failure paths, on the providers that run without a device:
//! a peer that dies is an error naming it, never a hang.

#![cfg(feature = "ofi")]

use std::path::PathBuf;
use std::time::Duration;
use std::{env, fs};

use pml::{Engine, EngineConfig, PmlError, TransportChoice, Wireup};

mod ranks_common;

use ranks_common::{exchange, rank0_saw_rank1_die, run_children, wait_for_dead_rank1, DirWireup};

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
    let error = wait_for_dead_rank1(&mut e, case, 8 << 10);
    let expected = "rank 1 did not take";
    match &error {
        PmlError::Transport { peer: 1, cause, .. } if cause.contains(expected) => {}
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
