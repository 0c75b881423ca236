//! A token goes once around the ring of ranks; each rank adds its rank to it. Rank 0 checks
//! the total against N(N-1)/2 and fails the job if it is wrong.

use std::process::ExitCode;

use mpirt::traits::*;

fn main() -> ExitCode {
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);
    let expected = i64::from(size) * i64::from(size - 1) / 2;
    if rank == 0 {
        next.send(&0i64);
        let (total, _) = previous.receive::<i64>();
        println!("ring of {size} ranks: token total {total}, expected {expected}");
        if total != expected {
            eprintln!("ring: wrong total");
            return ExitCode::FAILURE;
        }
    } else {
        let (token, _) = previous.receive::<i64>();
        next.send(&(token + i64::from(rank)));
    }
    ExitCode::SUCCESS
}
