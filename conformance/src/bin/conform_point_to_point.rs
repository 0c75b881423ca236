//! ranks: 2 4
//! Point to point as rsmpi programs write it: a token travels once around the ring, each rank
//! adding its own rank, with blocking sends and receives; every rank exchanges a value with
//! both neighbours through `send_receive`; and a matched probe's message is received into a
//! vector through the pair the probe returns (`MatchedReceiveVec`).

use mpi::datatype::UserDatatype;
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);

    if rank == 0 {
        next.send(&0i64);
        let (token, status) = previous.receive::<i64>();
        assert_eq!(status.source_rank(), previous.rank());
        let expected: i64 = (0..size as i64).sum();
        assert_eq!(
            token, expected,
            "the token should hold the sum of all ranks"
        );
        println!("ring of {size}: token {token}");
    } else {
        let (token, _) = previous.receive::<i64>();
        next.send(&(token + rank as i64));
    }

    let (from_previous, _): (u32, _) =
        mpi::point_to_point::send_receive(&(rank as u32 * 10), &next, &previous);
    assert_eq!(from_previous, previous.rank() as u32 * 10);
    println!(
        "rank {rank} got {from_previous} from rank {}",
        previous.rank()
    );

    let counted: Vec<u16> = (0..=rank as u16).collect();
    next.send(&counted[..]);
    let (message, status) = previous.matched_probe();
    assert!(!message.is_no_proc());
    assert_eq!(status.source_rank(), previous.rank());
    assert_eq!(previous.source_rank(), previous.rank());
    // Any source is no rank.
    assert!(world.any_process().source_rank() < 0);
    // MPI_Get_count with a user datatype, by reference and as a DatatypeRef.
    let one = UserDatatype::contiguous(1, &u16::equivalent_datatype());
    assert_eq!(status.count(&one), previous.rank() + 1);
    assert_eq!(status.count(one.as_ref()), previous.rank() + 1);
    let (got, _) = (message, status).matched_receive_vec::<u16>();
    assert_eq!(got, (0..=previous.rank() as u16).collect::<Vec<_>>());
    println!("rank {rank} probed and received {got:?}");
}
