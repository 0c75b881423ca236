//! ranks: 2 3 4
//! Inter-communicators as rsmpi programs use them: the world split by parity into two groups
//! joined by an inter-communicator; what each side sees of the other, point-to-point between
//! them, the collectives an inter-communicator has, merges in both orders, comparisons, and
//! processes used as communicators.
//!
//! rsmpi makes inter-communicators by spawn only; the two groups here are joined by
//! `MPI_Intercomm_create` through rsmpi's raw handles, and by `create_intercommunicator` on
//! mpirt (the one place the two sources differ: the `rsmpi` feature picks which).

use mpi::collective::SystemOperation;
use mpi::topology::{
    Color, CommunicatorRelation, GroupRelation, InterCommunicator, MergeOrder, Rank,
    SimpleCommunicator,
};
use mpi::traits::*;

#[cfg(feature = "rsmpi")]
fn join(
    local: &SimpleCommunicator,
    world: &SimpleCommunicator,
    remote_leader: Rank,
    tag: i32,
) -> InterCommunicator {
    use mpi::raw::traits::{AsRaw, FromRaw};
    // SAFETY: both handles are live communicators of this process; MPI writes the new one
    // into `raw`, which `from_raw` then owns (and frees on drop).
    unsafe {
        let mut raw = mpi::ffi::RSMPI_COMM_NULL;
        mpi::ffi::MPI_Intercomm_create(
            local.as_raw(),
            0,
            world.as_raw(),
            remote_leader,
            tag,
            &mut raw,
        );
        InterCommunicator::from_raw(raw)
    }
}

#[cfg(not(feature = "rsmpi"))]
fn join(
    local: &SimpleCommunicator,
    world: &SimpleCommunicator,
    remote_leader: Rank,
    tag: i32,
) -> InterCommunicator {
    local.create_intercommunicator(0, world, remote_leader, tag)
}

fn of_parity(size: Rank, parity: Rank) -> Vec<Rank> {
    (0..size).filter(|r| r % 2 == parity).collect()
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (size, me) = (world.size(), world.rank());
    let parity = me % 2;
    let (own, remote) = (of_parity(size, parity), of_parity(size, 1 - parity));
    let local = world.split_by_color(Color::with_value(parity)).unwrap();
    let inter = join(&local, &world, 1 - parity, 7);

    // The two sides.
    assert_eq!(inter.size(), own.len() as Rank);
    assert_eq!(inter.rank(), local.rank());
    assert_eq!(inter.remote_size(), remote.len() as Rank);
    assert_eq!(
        inter.group().compare(&local.group()),
        GroupRelation::Identical
    );
    let in_world = inter.remote_group().translate_ranks(
        &(0..inter.remote_size()).collect::<Vec<_>>(),
        &world.group(),
    );
    assert_eq!(
        in_world,
        remote.iter().map(|&r| Some(r)).collect::<Vec<_>>()
    );
    println!(
        "[{me}] local rank {} of {}, remote group {:?}",
        inter.rank(),
        inter.size(),
        in_world
    );

    // Point-to-point: ranks name the remote group.
    mpi::request::scope(|scope| {
        let sends: Vec<_> = (0..inter.remote_size())
            .map(|r| {
                inter
                    .process_at_rank(r)
                    .immediate_send_with_tag(scope, &me, 3)
            })
            .collect();
        let mut got = Vec::new();
        for r in 0..inter.remote_size() {
            let (value, status) = inter.process_at_rank(r).receive_with_tag::<Rank>(3);
            assert_eq!(status.source_rank(), r);
            got.push(value);
        }
        assert_eq!(got, remote);
        println!("[{me}] received {got:?} from the remote group");
        for send in sends {
            send.wait();
        }
    });
    if inter.rank() == 0 {
        inter.process_at_rank(0).send_with_tag(&(me * 10), 4);
        let (value, status) = inter.any_process().receive_with_tag::<Rank>(4);
        assert_eq!(status.source_rank(), 0);
        println!("[{me}] the remote leader sent {value}");
    }

    // Collectives: each group gets the other's contributions.
    inter.barrier();
    let mut sum: Rank = 0;
    inter.all_reduce_into(&me, &mut sum, SystemOperation::sum());
    assert_eq!(sum, remote.iter().sum::<Rank>());
    let mut gathered = vec![0 as Rank; remote.len()];
    inter.all_gather_into(&me, &mut gathered[..]);
    assert_eq!(gathered, remote);
    let out: Vec<Rank> = (0..inter.remote_size()).map(|j| me * 100 + j).collect();
    let mut back = vec![0 as Rank; out.len()];
    inter.all_to_all_into(&out[..], &mut back[..]);
    println!("[{me}] all_reduce {sum}, all_gather {gathered:?}, all_to_all {back:?}");

    // Merges: the Low group first; the same order on both puts either group first (MPI leaves
    // it open), so only its size and membership are printed.
    let even = parity == 0;
    for (even_order, odd_order) in [
        (MergeOrder::Low, MergeOrder::High),
        (MergeOrder::High, MergeOrder::Low),
        (MergeOrder::Low, MergeOrder::Low),
    ] {
        let merged = inter.merge(if even { even_order } else { odd_order });
        let mut all = vec![0 as Rank; size as usize];
        merged.all_gather_into(&me, &mut all[..]);
        if even_order as u8 == odd_order as u8 {
            let mut sorted = all.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..size).collect::<Vec<_>>());
            println!("[{me}] merged with one order: {} ranks", merged.size());
        } else {
            println!(
                "[{me}] merged evens {:?}: rank {} of {}, order {all:?}",
                even_order as u8,
                merged.rank(),
                merged.size()
            );
        }
    }

    // Comparisons.
    assert_eq!(inter.compare(&inter), CommunicatorRelation::Identical);
    assert_eq!(inter.compare(&local), CommunicatorRelation::Unequal);
    let again = join(&local, &world, 1 - parity, 8);
    println!(
        "[{me}] inter vs itself {:?}, vs local {:?}, vs a second one {:?}",
        inter.compare(&inter),
        inter.compare(&local),
        inter.compare(&again)
    );

    // Processes are communicators.
    let root = world.process_at_rank(0);
    let mut total = 0;
    root.all_reduce_into(&1, &mut total, SystemOperation::sum());
    assert_eq!(total, size);
    println!(
        "[{me}] process 0: size {}, its communicator's rank {}, is self {}, all_reduce {total}",
        root.size(),
        root.as_communicator().rank(),
        root.is_self()
    );
    let leader = inter.process_at_rank(0);
    println!(
        "[{me}] remote process 0: rank {}, size {}, its communicator's size {}",
        leader.rank(),
        leader.size(),
        leader.as_communicator().size()
    );
}
