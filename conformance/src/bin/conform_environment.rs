//! ranks: 1 3
//! Environment queries as rsmpi programs make them, printing what is the same on every
//! implementation: the MPI version, the threading level asked for and given, the host name,
//! and the application number of a single-program launch.

use mpi::Threading;

fn main() {
    let (version, subversion) = mpi::environment::version();
    assert!(version >= 3);
    let library = mpi::environment::library_version().unwrap();
    assert!(!library.is_empty());
    let (universe, provided) = mpi::initialize_with_threading(Threading::Funneled).unwrap();
    assert!(mpi::is_initialized());
    assert!(!mpi::is_finalized());
    assert_eq!(mpi::environment::threading_support(), provided);
    let world = universe.world();
    let rank = mpi::traits::Communicator::rank(&world);

    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(mpi::environment::processor_name().unwrap(), host.trim());
    let resolution = mpi::time_resolution();
    assert!(resolution > 0.0 && resolution <= 1e-3, "{resolution}");
    let start = mpi::time();
    assert!(mpi::time() >= start);
    assert!(universe.size().is_some());
    println!(
        "rank {rank}: MPI {version}.{subversion}, threading {provided:?}, appnum {:?}, \
         processor name is the host name",
        universe.appnum()
    );
}
