//! What opening a connection costs: rank 0's first round trip of 1 byte with rank 1 (which
//! opens their connection, over TCP the dial and the handshake) beside the second one (on
//! the open connection). Run with `rsrun --transport tcp -n 2`; every byte is checked.

use std::process::ExitCode;

use mpirt::traits::*;

fn main() -> ExitCode {
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    if world.size() != 2 {
        eprintln!("first_contact needs exactly 2 ranks, got {}", world.size());
        return ExitCode::FAILURE;
    }
    let other = world.process_at_rank(1 - world.rank());
    let mut took = [0.0f64; 2];
    for (round, took) in took.iter_mut().enumerate() {
        let byte = round as u8 + 1;
        let started = mpirt::time();
        let back = if world.rank() == 0 {
            other.send(&byte);
            other.receive::<u8>().0
        } else {
            let (got, _) = other.receive::<u8>();
            other.send(&got);
            got
        };
        *took = mpirt::time() - started;
        if back != byte {
            eprintln!("first_contact: round {round}: {back} came back for {byte}");
            return ExitCode::FAILURE;
        }
    }
    if world.rank() == 0 {
        println!(
            "first round trip {:.1} us, second {:.1} us",
            took[0] * 1e6,
            took[1] * 1e6
        );
    }
    ExitCode::SUCCESS
}
