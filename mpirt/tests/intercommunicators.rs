//! Inter-communicators with real ranks under rsrun (see `common`), on shared memory and TCP:
//! the world split by parity into two groups joined by `create_intercommunicator`; what each
//! side sees of the other, point-to-point between them, the collectives, merges in both
//! orders, how they compare, processes used as communicators, and the named errors of bad
//! input.

use std::env;

use mpirt::collective::SystemOperation;
use mpirt::datatype::{MutView, UserDatatype};
use mpirt::Count;
use std::process::Command;

use mpirt::error::{Cause, MpiError};
use mpirt::topology::{
    Color, CommunicatorRelation, GroupRelation, InterCommunicator, MergeOrder, Rank,
    SimpleCommunicator,
};
use mpirt::traits::*;

mod common;

use common::{across_hosts, job, ok_job_on, ok_job_with, slurm_available, text, Launch, RANK_MODE};

#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    let mut universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    match mode.as_str() {
        "inter" => {
            let (local, inter) = by_parity(&world, 7);
            sides(&world, &local, &inter);
            point_to_point(&world, &inter);
            collectives(&world, &inter);
            merges(&world, &inter);
            relations(&world, &local, &inter);
            processes(&world, &inter);
            other_leaders(&world);
        }
        "errors" => errors(&world),
        "churn" => churn(&world),
        "spawn" => spawn(&mut universe, &world),
        other => panic!("unknown mode {other}"),
    }
    println!("rank {} done", world.rank());
}

/// The world ranks of the group of parity `parity`, in order.
fn of_parity(world: &SimpleCommunicator, parity: Rank) -> Vec<Rank> {
    (0..world.size()).filter(|r| r % 2 == parity).collect()
}

/// The even and the odd world ranks, each a group led by its lowest world rank, joined over
/// the world with `tag`.
fn by_parity(world: &SimpleCommunicator, tag: i32) -> (SimpleCommunicator, InterCommunicator) {
    let parity = world.rank() % 2;
    let local = world
        .split_by_color(Color::with_value(parity))
        .expect("every rank has a color");
    let remote_leader = 1 - parity;
    let inter = local.create_intercommunicator(0, world, remote_leader, tag);
    (local, inter)
}

fn sides(world: &SimpleCommunicator, local: &SimpleCommunicator, inter: &InterCommunicator) {
    let parity = world.rank() % 2;
    let (own, remote) = (of_parity(world, parity), of_parity(world, 1 - parity));
    assert!(inter.test_inter());
    assert!(!world.test_inter());
    assert_eq!(inter.size(), own.len() as Rank);
    assert_eq!(inter.rank(), local.rank());
    assert_eq!(inter.remote_size(), remote.len() as Rank);
    assert_eq!(inter.target_size(), remote.len() as Rank);
    assert_eq!(
        inter.group().compare(&local.group()),
        GroupRelation::Identical
    );
    let in_world: Vec<Option<Rank>> = remote.iter().map(|&r| Some(r)).collect();
    assert_eq!(
        inter.remote_group().translate_ranks(
            &(0..remote.len() as Rank).collect::<Vec<_>>(),
            &world.group()
        ),
        in_world
    );
    println!("sides ok");
}

/// Every process sends its world rank to every remote rank; each receives, by rank and then
/// from any, what the remote group's processes sent.
fn point_to_point(world: &SimpleCommunicator, inter: &InterCommunicator) {
    let remote = of_parity(world, 1 - world.rank() % 2);
    let me = world.rank();
    mpirt::request::scope(|scope| {
        let sends: Vec<_> = (0..inter.remote_size())
            .map(|r| {
                inter
                    .process_at_rank(r)
                    .immediate_send_with_tag(scope, &me, 3)
            })
            .collect();
        for (r, &expected) in remote.iter().enumerate() {
            let (got, status) = inter.process_at_rank(r as Rank).receive_with_tag::<Rank>(3);
            assert_eq!(got, expected);
            assert_eq!(status.source_rank(), r as Rank);
        }
        for send in sends {
            send.wait();
        }
    });
    // Wildcard receives: the status names the sender's rank in the remote group.
    let remote_leader = inter.process_at_rank(0);
    if inter.rank() == 0 {
        remote_leader.send_with_tag(&me, 4);
    }
    if inter.rank() == 0 {
        let (got, status) = inter.any_process().receive_with_tag::<Rank>(4);
        assert_eq!((got, status.source_rank()), (remote[0], 0));
    }
    println!("point-to-point ok");
}

fn collectives(world: &SimpleCommunicator, inter: &InterCommunicator) {
    let remote = of_parity(world, 1 - world.rank() % 2);
    let me = world.rank();
    // The barrier holds every process until both groups reached it: each process leaves a
    // file before it, and after it finds every remote process's.
    let marks = env::var_os("INTER_BARRIER_DIR").map(std::path::PathBuf::from);
    if let Some(dir) = &marks {
        std::fs::write(dir.join(me.to_string()), b"here").unwrap();
    }
    inter.barrier();
    if let Some(dir) = &marks {
        for r in &remote {
            assert!(
                dir.join(r.to_string()).exists(),
                "rank {me} passed the barrier before {r}"
            );
        }
    }

    let mut sum = 0;
    inter.all_reduce_into(&me, &mut sum, SystemOperation::sum());
    assert_eq!(sum, remote.iter().sum::<Rank>());

    let mut gathered = vec![0 as Rank; remote.len()];
    inter.all_gather_into(&me, &mut gathered[..]);
    assert_eq!(gathered, remote);

    // Two elements each: block j of what a process sends goes to remote rank j.
    let out: Vec<Rank> = (0..remote.len() as Rank)
        .flat_map(|j| [me * 100 + j, -me])
        .collect();
    let mut back = vec![0 as Rank; out.len()];
    inter.all_to_all_into(&out[..], &mut back[..]);
    let expected: Vec<Rank> = remote
        .iter()
        .flat_map(|&r| [r * 100 + inter.rank(), -r])
        .collect();
    assert_eq!(back, expected);

    // The groups may pass different counts: the even group one element a process (a block),
    // the odd group two.
    let (mine, theirs) = if me % 2 == 0 { (1, 2) } else { (2, 1) };
    let mut gathered = vec![0 as Rank; remote.len() * theirs];
    inter.all_gather_into(&vec![me; mine][..], &mut gathered[..]);
    let expected: Vec<Rank> = remote.iter().flat_map(|&r| vec![r; theirs]).collect();
    assert_eq!(gathered, expected);
    let out: Vec<Rank> = (0..remote.len() as Rank)
        .flat_map(|j| vec![me * 100 + j; mine])
        .collect();
    let mut back = vec![0 as Rank; remote.len() * theirs];
    inter.all_to_all_into(&out[..], &mut back[..]);
    let expected: Vec<Rank> = remote
        .iter()
        .flat_map(|&r| vec![r * 100 + inter.rank(); theirs])
        .collect();
    assert_eq!(back, expected);

    // Into every other slot of a strided view (a vector datatype): the remote group's values
    // land in the blocks, the guards between them stay.
    let every_other =
        UserDatatype::vector(remote.len() as Count, 1, 2, &Rank::equivalent_datatype());
    let mut strided = vec![-7 as Rank; 2 * remote.len()];
    // SAFETY: the vector's blocks are whole `Rank`s inside `strided` (checked by the view).
    let mut view = unsafe { MutView::with_count_and_datatype(&mut strided[..], 1, &every_other) };
    inter.all_gather_into(&me, &mut view);
    let expected: Vec<Rank> = remote.iter().flat_map(|&r| [r, -7]).collect();
    assert_eq!(strided, expected);
    // The same count in both groups, as an inter-communicator all-reduce needs.
    let pair = UserDatatype::vector(2, 1, 2, &Rank::equivalent_datatype());
    let mut strided = [-7 as Rank; 4];
    // SAFETY: as above.
    let mut view = unsafe { MutView::with_count_and_datatype(&mut strided[..], 1, &pair) };
    inter.all_reduce_into(&[me, -me][..], &mut view, SystemOperation::max());
    let (top, bottom) = (*remote.iter().max().unwrap(), *remote.iter().min().unwrap());
    assert_eq!(strided, [top, -7, -bottom, -7]);
    println!("collectives ok");
}

fn merges(world: &SimpleCommunicator, inter: &InterCommunicator) {
    let n = world.size();
    let me = world.rank();
    let (evens, odds) = (of_parity(world, 0), of_parity(world, 1));
    let is_even = me % 2 == 0;
    for (even_order, odd_order, evens_first) in [
        (MergeOrder::Low, MergeOrder::High, true),
        (MergeOrder::High, MergeOrder::Low, false),
        // The same order on both: the group whose leader has the lower world rank first.
        (MergeOrder::High, MergeOrder::High, true),
    ] {
        let order = if is_even { even_order } else { odd_order };
        let merged = inter.merge(order);
        assert!(!merged.test_inter());
        assert_eq!(merged.size(), n);
        let expected = if evens_first {
            [&evens[..], &odds[..]].concat()
        } else {
            [&odds[..], &evens[..]].concat()
        };
        let mut all = vec![0 as Rank; n as usize];
        merged.all_gather_into(&me, &mut all[..]);
        assert_eq!(all, expected);
        assert_eq!(expected[merged.rank() as usize], me);
        // A context of its own: the same tag on the world and the merged communicator, each
        // message received where it was sent.
        let next = (merged.rank() + 1) % n;
        let prev = (merged.rank() + n - 1) % n;
        let (to_merged, to_world) = (me + 1000, me + 2000);
        mpirt::request::scope(|scope| {
            let a = merged
                .process_at_rank(next)
                .immediate_send_with_tag(scope, &to_merged, 9);
            let b = world
                .process_at_rank((me + 1) % n)
                .immediate_send_with_tag(scope, &to_world, 9);
            let (from_world, _) = world
                .process_at_rank((me + n - 1) % n)
                .receive_with_tag::<Rank>(9);
            let (from_merged, _) = merged.process_at_rank(prev).receive_with_tag::<Rank>(9);
            assert_eq!(from_world, (me + n - 1) % n + 2000);
            assert_eq!(from_merged, expected[prev as usize] + 1000);
            a.wait();
            b.wait();
        });
    }
    println!("merges ok");
}

fn relations(world: &SimpleCommunicator, local: &SimpleCommunicator, inter: &InterCommunicator) {
    assert_eq!(inter.compare(inter), CommunicatorRelation::Identical);
    assert_eq!(
        inter.compare(&inter.clone()),
        CommunicatorRelation::Identical
    );
    assert_eq!(inter.compare(local), CommunicatorRelation::Unequal);
    assert_eq!(world.compare(inter), CommunicatorRelation::Unequal);
    // Made again from the same groups: the same processes on both sides, another context.
    let (_, again) = by_parity(world, 8);
    assert_eq!(inter.compare(&again), CommunicatorRelation::Congruent);
    println!("relations ok");
}

/// Processes are communicators too, as in rsmpi: their own communicator's size and rank,
/// collectives on it, and `as_communicator`.
fn processes(world: &SimpleCommunicator, inter: &InterCommunicator) {
    let me = world.this_process();
    assert!(me.is_self());
    assert_eq!(me.rank(), world.rank());
    assert_eq!(me.size(), world.size());
    assert_eq!(me.as_communicator().rank(), world.rank());
    assert_eq!(me.as_communicator().size(), world.size());
    assert_eq!(me.target_size(), world.size());
    let root = world.process_at_rank(0);
    assert_eq!(root.is_self(), world.rank() == 0);
    let mut total = 0;
    root.all_reduce_into(&1, &mut total, SystemOperation::sum());
    assert_eq!(total, world.size());
    root.barrier();
    assert_eq!(
        root.as_communicator().compare(world),
        CommunicatorRelation::Identical
    );

    let remote0 = inter.process_at_rank(0);
    assert!(!remote0.is_self());
    assert_eq!(remote0.size(), inter.size());
    assert_eq!(remote0.target_size(), inter.remote_size());
    assert!(remote0.as_communicator().test_inter());
    println!("processes ok");
}

/// Groups led by their last ranks, joined over the world in reverse order; the even group
/// alone holds a duplicate of itself, so the groups' context ids in use differ, and the same
/// tag on that duplicate and on the inter-communicator keeps their messages apart; a probe
/// from any source names a remote rank.
fn other_leaders(world: &SimpleCommunicator) {
    let (n, me, parity) = (world.size(), world.rank(), world.rank() % 2);
    let reversed = world
        .split_by_color_with_key(Color::with_value(0), -me)
        .unwrap();
    assert_eq!(reversed.rank(), n - 1 - me);
    let local = world.split_by_color(Color::with_value(parity)).unwrap();
    let held = (parity == 0).then(|| local.duplicate());
    let (own, remote) = (of_parity(world, parity), of_parity(world, 1 - parity));
    let remote_leader = n - 1 - remote.last().unwrap();
    let inter = local.create_intercommunicator(own.len() as Rank - 1, &reversed, remote_leader, 11);
    let remote_members: Vec<Rank> = (0..inter.remote_size())
        .map(|r| {
            inter
                .remote_group()
                .translate_rank(r, &world.group())
                .unwrap()
        })
        .collect();
    assert_eq!(remote_members, remote);
    // World rank 1 sends to world rank 2 on the inter-communicator, from remote rank 0, before
    // world rank 0 sends to it on the duplicate, from rank 0, both with tag 5: were the two
    // contexts one, the duplicate's receive would take the inter-communicator's message.
    if n >= 3 {
        if me == 1 {
            inter.process_at_rank(1).send_with_tag(&111i32, 5);
        }
        world.barrier();
        if me == 0 {
            held.as_ref()
                .unwrap()
                .process_at_rank(1)
                .send_with_tag(&222i32, 5);
        }
        if me == 2 {
            let dup = held.as_ref().unwrap();
            let (on_dup, _) = dup.process_at_rank(0).receive_with_tag::<i32>(5);
            let (on_inter, _) = inter.process_at_rank(0).receive_with_tag::<i32>(5);
            assert_eq!((on_dup, on_inter), (222, 111));
        }
    }
    // A probe from any source on the inter-communicator names the remote sender's rank.
    if inter.rank() == 0 {
        inter.process_at_rank(0).send_with_tag(&me, 9);
        let status = inter.any_process().probe_with_tag(9);
        assert_eq!(status.source_rank(), 0);
        let (got, _) = inter.any_process().receive_with_tag::<Rank>(9);
        assert_eq!(got, remote[0]);
    }
    println!("other leaders ok");
}

fn errors(world: &SimpleCommunicator) {
    let n = world.size();
    let parity = world.rank() % 2;
    let (_, inter) = by_parity(world, 7);
    let remote = inter.remote_size();
    let e = inter.try_process_at_rank(remote).unwrap_err();
    assert!(
        matches!(e.cause(), Cause::RemoteRankOutOfRange { .. }),
        "{e}"
    );
    println!("error: {e}");
    if inter.rank() == 0 {
        inter.process_at_rank(0).send(&1u8);
        let (_, status) = inter.process_at_rank(0).receive::<u8>();
        assert_eq!(status.source_rank(), 0);
    }
    let e = inter
        .process_at_rank(0)
        .try_broadcast_into(&mut [0u8][..])
        .unwrap_err();
    assert!(matches!(e.cause(), Cause::InterCommunicator), "{e}");
    println!("error: {e}");
    let mut out = 0;
    let e = inter
        .try_scan_into(&1, &mut out, SystemOperation::sum())
        .unwrap_err();
    println!("error: {e}");
    // Buffers whose counts fit no local size: the inter-communicator is named first.
    let mut one = [0i32];
    let e = inter
        .try_reduce_scatter_block_into(&[1i32; 7][..], &mut one[..], SystemOperation::sum())
        .unwrap_err();
    assert!(matches!(e.cause(), Cause::InterCommunicator), "{e}");
    let e = inter
        .process_at_rank(0)
        .try_reduce_into(&[1i32; 3][..], SystemOperation::sum())
        .unwrap_err();
    assert!(matches!(e.cause(), Cause::InterCommunicator), "{e}");
    let e = inter
        .process_at_rank(0)
        .try_gather_into_root(&1i32, &mut one[..])
        .unwrap_err();
    assert!(matches!(e.cause(), Cause::InterCommunicator), "{e}");
    // This process's rank names another process among the remote group's.
    let e = inter.try_this_process().unwrap_err();
    assert!(matches!(e.cause(), Cause::InterCommunicator), "{e}");
    let e = inter.try_duplicate().unwrap_err();
    assert!(matches!(e.cause(), Cause::InterCommunicator), "{e}");
    println!("error: {e}");
    let e = inter
        .try_split_by_color_with_key(Color::with_value(0), 0)
        .unwrap_err();
    println!("error: {e}");
    let e = inter
        .try_create_intercommunicator(0, world, 0, 1)
        .unwrap_err();
    println!("error: {e}");

    // Groups that pass different counts to an all-reduce: the leaders see it, and tell their
    // groups, so that every process fails the call rather than wait.
    let count = if parity == 0 { 1 } else { 2 };
    let mut sum = vec![0; count];
    let e = inter
        .try_all_reduce_into(&vec![1; count][..], &mut sum[..], SystemOperation::sum())
        .unwrap_err();
    println!("all_reduce error: {e}");

    // Buffers of different types: refused by each process, which still tells the others.
    let mut floats = vec![0f32; remote as usize];
    let e = inter
        .try_all_gather_into(&1i32, &mut floats[..])
        .unwrap_err();
    assert!(matches!(e.cause(), Cause::TypeMismatch { .. }), "{e}");
    println!("typed all_gather error: {e}");
    // Bytes that are no `bool`: the odd group sends 2s into the even group's booleans, which
    // refuse them; the odd group receives the even group's booleans as bytes.
    if parity == 0 {
        let mut flags = vec![false; remote as usize];
        let e = inter
            .try_all_gather_into(&true, &mut flags[..])
            .unwrap_err();
        // The leader checks what arrives; the other members hear of it from the leader.
        let invalid = matches!(e.cause(), Cause::InvalidValue { .. });
        assert_eq!(invalid, inter.rank() == 0, "{e}");
        println!("bool all_gather error: {e}");
        let mut flags = vec![false; remote as usize];
        let e = inter
            .try_all_to_all_into(&vec![true; remote as usize][..], &mut flags[..])
            .unwrap_err();
        assert!(matches!(e.cause(), Cause::InvalidValue { .. }), "{e}");
        println!("bool all_to_all error: {e}");
    } else {
        let mut bytes = vec![9u8; remote as usize];
        inter.all_gather_into(&2u8, &mut bytes[..]);
        assert_eq!(bytes, vec![1u8; remote as usize]);
        let mut bytes = vec![9u8; remote as usize];
        inter.all_to_all_into(&vec![2u8; remote as usize][..], &mut bytes[..]);
        assert_eq!(bytes, vec![1u8; remote as usize]);
    }
    // Blocks that do not divide among the remote ranks (3 to the even group's 2): the odd
    // process refuses them, counted in elements, and the even group hears of it.
    let sent = vec![1i32; if parity == 1 { 3 } else { remote as usize }];
    let mut back = sent.clone();
    let e = inter
        .try_all_to_all_into(&sent[..], &mut back[..])
        .unwrap_err();
    println!("all_to_all error: {e}");
    // One process of the even group alone sends one element where the others send two:
    // every process of both groups fails, none waits.
    let count = if world.rank() == 2 { 1 } else { 2 };
    let mut gathered = vec![0i32; remote as usize * count];
    let e = inter.try_all_gather_into(&vec![1i32; count][..], &mut gathered[..]);
    println!("all_gather error: {}", e.unwrap_err());

    // A group whose processes pass different orders fails the merge, and the other group
    // hears of it: both fail, nobody waits.
    let order = match (parity, inter.rank()) {
        (0, 0) => MergeOrder::High,
        _ => MergeOrder::Low,
    };
    let e = inter.try_merge(order).unwrap_err();
    println!("merge error: {e}");

    // One group fails before its leader speaks, or at it: the other group's leader hears of
    // it, and every process of both groups fails rather than wait. The even group's leader
    // passes a negative tag; then the even group's processes disagree on their leader.
    let local = world.split_by_color(Color::with_value(parity)).unwrap();
    let remote_leader = 1 - parity;
    let tag = if parity == 0 { -4 } else { 4 };
    let e = local
        .try_create_intercommunicator(0, world, remote_leader, tag)
        .unwrap_err();
    println!("one-sided create error: {e}");
    let leader = if world.rank() == 2 { 5 } else { 0 };
    let e = local
        .try_create_intercommunicator(leader, world, remote_leader, 4)
        .unwrap_err();
    println!("one-sided create error: {e}");
    // A user receive from any source with any tag, pending on the peer communicator while
    // the leaders trade, does not take their messages.
    let mut slot = [0u8; 1];
    mpirt::request::scope(|scope| {
        let pending = world
            .any_process()
            .immediate_receive_into(scope, &mut slot[..]);
        let inter = local.create_intercommunicator(0, world, remote_leader, 4);
        assert_eq!(
            inter.remote_size(),
            of_parity(world, 1 - parity).len() as Rank
        );
        world.barrier();
        world.process_at_rank(world.rank()).send(&[7u8][..]);
        pending.wait();
    });
    assert_eq!(slot, [7]);

    // One group alone: a leader that is no rank, a remote leader that is no rank of the peer,
    // a negative tag, and a "remote" group that is this one.
    let e = world
        .try_create_intercommunicator(n, world, 0, 1)
        .unwrap_err();
    assert!(matches!(e.cause(), Cause::RankOutOfRange { .. }), "{e}");
    println!("error: {e}");
    let e = world
        .try_create_intercommunicator(0, world, n + 3, 1)
        .unwrap_err();
    println!("error: {e}");
    let e = world
        .try_create_intercommunicator(0, world, 0, -1)
        .unwrap_err();
    println!("error: {e}");
    let e = world
        .try_create_intercommunicator(0, world, 0, 1)
        .unwrap_err();
    println!("error: {e}");
    println!("errors ok");
}

/// Each round holds three context ids (a group's own, the inter-communicator's, the merged
/// one's) and gives them back when its communicators drop: more rounds than there are ids.
fn churn(world: &SimpleCommunicator) {
    for round in 0..4200 {
        let (_, inter) = by_parity(world, round % 100);
        let merged = inter.merge(MergeOrder::Low);
        assert_eq!(merged.size(), world.size());
    }
    println!("churn ok");
}

/// Every process of the communicator gets the same named error from a spawn whose root's
/// arguments are wrong (spawns that work are `tests/spawn.rs`'s); a job rsrun started has
/// no parent.
fn spawn(universe: &mut mpirt::Universe, world: &SimpleCommunicator) {
    assert!(world.parent().is_none());
    universe.disconnect_parent();
    let root = world.process_at_rank(0);
    let fail = |result: Result<InterCommunicator, MpiError>| match result {
        Err(MpiError::Mpirt(e)) => {
            println!("spawn error: {e}");
            e.cause().clone()
        }
        Err(other) => panic!("not mpirt's error: {other}"),
        Ok(_) => panic!("spawn succeeded"),
    };
    let me = Command::new(env::current_exe().unwrap());
    let commands = [me, Command::new("true")];
    assert!(matches!(
        fail(root.spawn_multiple(&commands, &[1])),
        Cause::InvalidSpawn(_)
    ));
    assert!(matches!(
        fail(root.spawn(&commands[0], 0)),
        Cause::InvalidSpawn(_)
    ));
    let missing = Command::new("/nonexistent/mpirt-test-program");
    assert!(matches!(
        fail(root.spawn(&missing, 1)),
        Cause::InvalidSpawn(_)
    ));
    println!("spawn ok");
}

#[test]
fn spawn_is_a_named_error_on_every_process() {
    let output = job(2, "spawn", &[]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}\n{err}");
    for expected in [
        "spawn_multiple: invalid spawn: 2 commands but 1 process counts",
        "spawn: invalid spawn: 0 processes of",
        "spawn: invalid spawn: the program /nonexistent/mpirt-test-program was not found",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in\n{out}");
    }
    assert_eq!(out.matches("spawn ok").count(), 2, "{out}");
}

#[test]
fn intercommunicators_on_2_to_5_ranks_over_shared_memory() {
    let shared_dir = !across_hosts("a directory the ranks share (the barrier's check)");
    for n in 2..=5 {
        let dir = env::temp_dir().join(format!("mpirt-inter-barrier-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dir_var = dir.to_str().unwrap();
        let envs: &[(&str, &str)] = match shared_dir {
            true => &[("INTER_BARRIER_DIR", dir_var)],
            false => &[],
        };
        let (out, _) = ok_job_with(n, "inter", envs);
        std::fs::remove_dir_all(&dir).unwrap();
        for part in [
            "sides ok",
            "point-to-point ok",
            "collectives ok",
            "merges ok",
            "relations ok",
            "processes ok",
            "other leaders ok",
        ] {
            assert_eq!(out.matches(part).count(), n as usize, "{out}");
        }
    }
}

#[test]
fn context_ids_of_dropped_intercommunicators_are_given_back() {
    let (out, _) = ok_job_with(3, "churn", &[]);
    assert_eq!(out.matches("churn ok").count(), 3, "{out}");
}

#[test]
fn intercommunicators_on_3_and_4_ranks_over_tcp() {
    for n in [3, 4] {
        let (out, _) = ok_job_with(n, "inter", &[("MPIRT_TRANSPORT", "tcp")]);
        assert_eq!(out.matches("merges ok").count(), n as usize, "{out}");
    }
}

/// Across the Slurm test hosts: the groups' leaders and members on different nodes.
#[test]
fn intercommunicators_under_srun_with_pmi2() {
    if slurm_available() {
        ok_job_on(Launch::Srun { nodes: 2 }, 4, "inter", &[]);
    }
}

#[test]
fn bad_intercommunicator_input_is_a_named_error() {
    let output = job(3, "errors", &[]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}\n{err}");
    for expected in [
        "process_at_rank(1): rank 1 is out of range: the inter-communicator's remote group has \
         1 ranks (0 to 0)",
        "process_at_rank(2): rank 2 is out of range: the inter-communicator's remote group has \
         2 ranks (0 to 1)",
        "broadcast_into: not available on an inter-communicator",
        "scan_into: not available on an inter-communicator",
        "duplicate: not available on an inter-communicator",
        "split_by_color: not available on an inter-communicator",
        "create_intercommunicator: not available on an inter-communicator",
        "merge error: rank 0: merge: the ranks passed different arguments where MPI needs the \
         same on all",
        "merge: the remote group's processes passed different merge orders",
        "all_reduce error: rank 2: all_reduce_into: this group's leader failed its exchange \
         with the remote group's",
        "all_reduce error: rank 1: all_reduce_into: rank 0 sent 4 bytes where this rank \
         expected 8",
        "typed all_gather error: rank 0: all_gather_into: the send buffer holds i32 elements",
        "typed all_gather error: rank 1: all_gather_into: the send buffer holds i32 elements",
        "bool all_gather error: rank 0: all_gather_into: the message's bytes are not a valid \
         bool",
        "bool all_gather error: rank 2: all_gather_into: this group's leader failed",
        "bool all_to_all error: rank 2: all_to_all_into: the message's bytes are not a valid \
         bool",
        "all_to_all error: rank 1: all_to_all_into: the send buffer (a whole block per remote \
         rank) holds 3 elements where 4 are needed",
        "all_to_all error: rank 0: all_to_all_into: remote rank 0 failed the call",
        "all_to_all error: rank 2: all_to_all_into: remote rank 0 failed the call",
        "all_gather error: rank 2: all_gather_into: the processes of this group passed \
         different counts",
        "all_gather error: rank 0: all_gather_into: the processes of this group passed \
         different counts",
        "all_gather error: rank 1: all_gather_into: remote rank 0 failed the call",
        "one-sided create error: rank 0: create_intercommunicator: local leader (rank 0): the \
         tag is negative",
        "one-sided create error: rank 2: create_intercommunicator: local leader (rank 0): the \
         tag is negative",
        "one-sided create error: rank 1: create_intercommunicator: local leader (rank 0): the \
         remote group (led by rank 0 of the peer communicator) failed the call",
        "one-sided create error: rank 2: create_intercommunicator: rank 5 is out of range",
        "one-sided create error: rank 0: create_intercommunicator: another rank passed \
         arguments that are not valid",
        "create_intercommunicator: rank 3 is out of range",
        "create_intercommunicator: local leader (rank 0): remote leader 6 is not a rank of the \
         peer communicator",
        "create_intercommunicator: local leader (rank 0): the tag is negative",
        "create_intercommunicator: local leader (rank 0): the two groups share processes",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in\n{out}");
    }
    assert_eq!(out.matches("errors ok").count(), 3, "{out}");
}
