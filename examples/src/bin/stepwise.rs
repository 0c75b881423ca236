//! Two ranks exchange a checked message per round, and rank 0 starts round K only once the
//! file `DIR/go.K` exists: a test can act on the running job between rounds (the tests that
//! play a stranger to the ranks' connections use it). Each rank R writes `DIR/rankR` (its pid
//! and host) once it is initialized, and rank 1 checks at the end that nothing else arrived.
//!
//! Usage: `stepwise DIR ROUNDS`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mpirt::traits::*;

const LEN: usize = 4096;
/// How long rank 0 waits for a go-ahead file before giving up.
const PATIENCE: Duration = Duration::from_secs(120);

fn payload(round: u32) -> Vec<u8> {
    (0..LEN).map(|i| (i as u32 * 7 + round) as u8).collect()
}

fn wait_for(file: &Path) -> Result<(), String> {
    let started = Instant::now();
    while !file.exists() {
        if started.elapsed() > PATIENCE {
            return Err(format!(
                "{} did not appear within {PATIENCE:?}",
                file.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(Ok(rounds))) = (args.get(1), args.get(2).map(|r| r.parse::<u32>())) else {
        eprintln!("usage: stepwise DIR ROUNDS");
        return ExitCode::FAILURE;
    };
    let dir = PathBuf::from(dir);
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    if world.size() != 2 {
        eprintln!("stepwise needs exactly 2 ranks, got {}", world.size());
        return ExitCode::FAILURE;
    }
    let other = world.process_at_rank(1 - world.rank());
    let mut total = 0u64;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let me = format!("{} {}", std::process::id(), host.trim());
    let file = dir.join(format!("rank{}", world.rank()));
    if let Err(e) = std::fs::write(&file, me) {
        eprintln!("stepwise: cannot write {}: {e}", file.display());
        return ExitCode::FAILURE;
    }
    for round in 0..rounds {
        if world.rank() == 0 {
            if let Err(e) = wait_for(&dir.join(format!("go.{round}"))) {
                eprintln!("stepwise: {e}");
                return ExitCode::FAILURE;
            }
            other.send_with_tag(&payload(round)[..], round as i32);
            let (sum, _) = other.receive_with_tag::<u64>(round as i32);
            total += sum;
        } else {
            let (got, status) = other.receive_vec_with_tag::<u8>(round as i32);
            if got != payload(round) || status.source_rank() != 0 {
                eprintln!("stepwise: round {round}: the message arrived changed");
                return ExitCode::FAILURE;
            }
            let sum: u64 = got.iter().map(|&b| u64::from(b)).sum();
            other.send_with_tag(&sum, round as i32);
        }
    }
    if world.rank() == 1 {
        if let Some(stray) = world.any_process().immediate_probe() {
            eprintln!("stepwise: a message nobody sent arrived: {stray:?}");
            return ExitCode::FAILURE;
        }
    } else {
        let expected: u64 = (0..rounds).flat_map(payload).map(u64::from).sum();
        println!("stepwise: {rounds} rounds, sum {total}, expected {expected}");
        if total != expected {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
