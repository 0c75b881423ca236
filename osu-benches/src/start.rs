//! What every test does before measuring: start the runtime, read the options, insist on two
//! ranks (at least two for the collective and multi-pair tests), and have rank 0 print the
//! header. Like OSU, only rank 0 speaks.

use std::io::Write;
use std::process::exit;

use crate::mpi;
use crate::mpi::environment::Universe;
use crate::mpi::traits::*;

use crate::options::{parse, Benchmark, Options, Parsed};
use crate::output::{
    collective_header, header, latency_mt_header, message_rate_mt_header, multi_bandwidth_header,
    non_blocking_header, one_sided_header,
};

/// Returns the runtime and the options, or ends the process (help, version, bad options,
/// wrong number of ranks) the way OSU does.
pub fn start(b: Benchmark) -> (Universe, Options) {
    let universe = if b.is_threaded() {
        let (universe, provided) = mpi::initialize_with_threading(mpi::Threading::Multiple)
            .expect("MPI is initialized once");
        if provided != mpi::Threading::Multiple {
            if universe.world().rank() == 0 {
                eprintln!("MPI_Init_thread must return MPI_THREAD_MULTIPLE!");
            }
            drop(universe);
            exit(1);
        }
        universe
    } else {
        mpi::initialize().expect("MPI is initialized once")
    };
    let world = universe.world();
    let rank0 = world.rank() == 0;
    let options = match parse(b, std::env::args().skip(1)) {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help(text)) | Ok(Parsed::Version(text)) => {
            if rank0 {
                print!("{text}");
            }
            drop(universe);
            exit(0);
        }
        Err(e) => {
            if rank0 {
                eprintln!("{e}");
            }
            drop(universe);
            exit(1);
        }
    };
    let (enough, requirement) = if b.takes_many_ranks() {
        (world.size() >= 2, "at least two processes")
    } else {
        (world.size() == 2, "exactly two processes")
    };
    if !enough {
        if rank0 {
            eprintln!("This test requires {requirement}");
        }
        drop(universe);
        exit(1);
    }
    if rank0 {
        let text = match b {
            _ if b.is_non_blocking() => non_blocking_header(b, options.full),
            _ if b.is_collective() => collective_header(b, options.full),
            _ if b.is_one_sided() => {
                one_sided_header(b, options.window_kind, options.sync, options.doubles)
            }
            Benchmark::MultiBandwidth => {
                multi_bandwidth_header(world.size() as usize / 2, options.window)
            }
            Benchmark::LatencyMt => {
                latency_mt_header(options.sender_threads, options.receiver_threads)
            }
            Benchmark::MessageRateMt => {
                message_rate_mt_header(options.sender_threads, options.window)
            }
            _ => header(b),
        };
        print!("{text}");
        let _ = std::io::stdout().flush();
    }
    (universe, options)
}
