//! Point-to-point, requests and errors, with real ranks under rsrun (see `common`).

use std::collections::HashSet;
use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;
use std::time::Duration;

use mpirt::point_to_point as p2p;
use mpirt::request::{self, CancelGuard, Request, RequestCollection, Scope, WaitGuard};
use mpirt::traits::*;

mod common;

use common::{
    job_on, ok_job_on, ok_job_with, rsrun_path, run_limited, slurm_available, text, under_rsrun,
    Launch, RANK_MODE, RANK_MODE_ARGS,
};

// The ranks run this binary: keep RDMA registrations between messages, as programs should.
#[global_allocator]
static ALLOCATOR: mpirt::TrackingAllocator = mpirt::TrackingAllocator;

const SIDE_DIR: &str = "MPIRT_TEST_SIDE_DIR";
const EAGER: usize = 4096;

/// The lengths of the size tests: either side of the eager limit, 1 MiB, and the largest:
/// 64 MiB, or `MPIRT_TEST_LARGEST_MESSAGE` (a size: `4m`) where set, as in the Soft-RoCE
/// guest (tools/test-all.sh), where every byte crosses emulated RDMA.
fn message_lens() -> [usize; 7] {
    let largest = env::var("MPIRT_TEST_LARGEST_MESSAGE").map_or(64 << 20, |v| {
        pml::config::parse_size(&v)
            .filter(|&n| n > 1 << 20)
            .unwrap_or_else(|| panic!("MPIRT_TEST_LARGEST_MESSAGE='{v}' is not a size over 1 MiB"))
    });
    [0, 1, EAGER - 1, EAGER, EAGER + 1, 1 << 20, largest]
}

/// The rank side of the tests below, selected by `RANK_MODE`.
#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    let mut universe = mpirt::initialize().expect("first initialize");
    assert!(
        mpirt::initialize().is_none(),
        "a second initialize is refused"
    );
    let world = universe.world();
    match mode.as_str() {
        "sizes" => sizes(&world),
        "arena" => arena_buffers(&world),
        "wildcard" => wildcard(&world),
        "order" => order(&world),
        "probe" => probe(&world),
        "ssend" => ssend(&world),
        "truncate" => truncate(&world),
        "try-errors" => try_errors(&world),
        "fatal-rank" => {
            world.process_at_rank(world.size() + 3);
        }
        "negative-tag" => world.process_at_rank(0).send_with_tag(&1u8, -3),
        "singleton" => singleton(&world),
        "ring" => ring(&world),
        "immediate" => immediate(&world),
        "raw" => raw_receives(&world),
        "request-data" => request_data(&world),
        "collection" => collections(&world),
        "guards" => guards(&world),
        "receive-future" => receive_futures(&world),
        "buffered" => buffered(&mut universe),
        "buffered-finalize" | "buffered-unreceived" => {
            // Rank 0 leaves a rendezvous-sized buffered send in flight at finalize; rank 1
            // receives it late, or never.
            let large = vec![3u64; 20_000];
            if world.rank() == 0 {
                universe.set_buffer_size(1 << 20);
                world
                    .process_at_rank(1)
                    .buffered_send_with_tag(&large[..], 6);
            } else if mode == "buffered-finalize" {
                std::thread::sleep(std::time::Duration::from_millis(100));
                let (got, _) = world.process_at_rank(0).receive_vec_with_tag::<u64>(6);
                assert_eq!(got, large);
            }
        }
        "future-dropped" => drop(world.this_process().immediate_receive::<u32>()),
        "receive-future-short" => {
            if world.rank() == 0 {
                world.process_at_rank(1).send_with_tag(&[0u8; 0][..], 9);
            } else {
                world
                    .process_at_rank(0)
                    .immediate_receive_with_tag::<u64>(9)
                    .get();
                unreachable!("an empty message for one value is fatal");
            }
        }
        "panic" => panic_rank(&world),
        "killed" => {
            world.barrier();
            if world.rank() == 1 {
                // SAFETY: raise(2) with a valid signal number; SIGKILL ends this process.
                unsafe { libc::raise(libc::SIGKILL) };
            }
            world.process_at_rank(1).receive::<u8>();
        }
        "terminated" => {
            // The last rank sends its own process SIGTERM, as a launcher tearing a job down
            // does, after wire-up; any other waits for it (over OFI, inside libfabric).
            world.barrier();
            let last = world.size() - 1;
            if world.rank() == last {
                // SAFETY: kill(2) of this process with a valid signal number.
                unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                std::thread::sleep(std::time::Duration::from_secs(60));
                eprintln!("rank {last} outlived its SIGTERM");
            } else {
                world.process_at_rank(last).receive::<u8>();
            }
        }
        "abort" => {
            world.barrier();
            if world.rank() == 1 {
                world.abort(3);
            }
            // Rank 0 stays out of mpirt calls, so it cannot notice rank 1's closed connection
            // and end by itself: only the abort, through the launcher or PMI, ends it, well
            // before this sleep does (the tests run it under a 120 s limit).
            std::thread::sleep(std::time::Duration::from_secs(60));
            eprintln!("rank 0 outlived rank 1's abort");
        }
        "derive" => derive(&world),
        "leak" => {
            let mut slot = 0u8;
            request::scope(|scope| {
                let pending = world
                    .this_process()
                    .immediate_receive_into(scope, &mut slot);
                std::mem::forget(pending);
            });
        }
        "drop" => {
            let mut slot = 0u8;
            request::scope(|scope| {
                drop(
                    world
                        .this_process()
                        .immediate_receive_into(scope, &mut slot),
                );
            });
        }
        "unfinished-collection" => {
            let mut slot = 0u8;
            request::multiple_scope(1, |scope, coll| {
                coll.add(
                    world
                        .this_process()
                        .immediate_receive_into(scope, &mut slot),
                );
            });
        }
        other => panic!("unknown rank mode {other}"),
    }
    println!("rank {} done", world.rank());
}

/// Byte `i` of a test message of `len` bytes: differs per position and per length.
fn pattern(len: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ len.wrapping_mul(7) ^ (i >> 11)) as u8
}

fn sizes(world: &mpirt::topology::SimpleCommunicator) {
    let lens = message_lens();
    if world.rank() == 0 {
        let peer = world.process_at_rank(1);
        for &len in &lens {
            let msg: Vec<u8> = (0..len).map(|i| pattern(len, i)).collect();
            peer.send_with_tag(&msg[..], 1);
            // The same again, received into a fixed buffer on the other side.
            peer.send_with_tag(&msg, 2);
        }
    } else if world.rank() == 1 {
        let peer = world.process_at_rank(0);
        for &len in &lens {
            let (got, status) = peer.receive_vec_with_tag::<u8>(1);
            assert_eq!(got.len(), len);
            assert_eq!(status.count(u8::equivalent_datatype()), len as i32);
            assert!(
                got.iter().enumerate().all(|(i, &b)| b == pattern(len, i)),
                "len {len}"
            );
            let mut buf = vec![0u8; len + 16];
            let status = peer.receive_into_with_tag(&mut buf[..], 2);
            assert_eq!((status.source_rank(), status.tag()), (0, 2));
            assert_eq!(status.byte_count(), len);
            assert!(buf[..len]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == pattern(len, i)));
            assert!(
                buf[len..].iter().all(|&b| b == 0),
                "nothing past the message"
            );
            println!("size {len} ok");
        }
    }
}

/// Large messages from heap buffers (in the sender's shared arena when it is on), each checked
/// whole; then one buffer freed and another allocated in its place, several times, so that a
/// receiver reading through a stale mapping would see the previous message.
fn arena_buffers(world: &mpirt::topology::SimpleCommunicator) {
    let lens = [64 << 20, 1 << 20, 1 << 20, 1 << 20, 64 << 20, 1 << 20];
    let seeded = |len: usize, round: usize| -> Vec<u8> {
        (0..len).map(|i| pattern(len, i + round * 977)).collect()
    };
    if world.rank() == 0 {
        let peer = world.process_at_rank(1);
        for (round, &len) in lens.iter().enumerate() {
            peer.send_with_tag(&seeded(len, round)[..], 3);
        }
    } else if world.rank() == 1 {
        let peer = world.process_at_rank(0);
        let mut buf = vec![0u8; 64 << 20];
        for (round, &len) in lens.iter().enumerate() {
            let status = peer.receive_into_with_tag(&mut buf[..len], 3);
            assert_eq!(status.byte_count(), len);
            let want = seeded(len, round);
            assert!(
                buf[..len] == want[..],
                "round {round}, {len} bytes: wrong or stale data"
            );
        }
        println!("arena ok");
    }
}

fn wildcard(world: &mpirt::topology::SimpleCommunicator) {
    if world.rank() == 0 {
        let mut seen = HashSet::new();
        for _ in 1..world.size() {
            let (value, status) = world.any_process().receive::<i32>();
            assert_eq!(value, status.source_rank() * 10);
            assert_eq!(status.tag(), status.source_rank() + 100);
            assert!(seen.insert(status.source_rank()));
        }
        assert_eq!(seen.len() as i32, world.size() - 1);
        println!("wildcard ok");
    } else {
        world
            .process_at_rank(0)
            .send_with_tag(&(world.rank() * 10), world.rank() + 100);
    }
}

const ORDER_COUNT: u32 = 10_000;

fn order(world: &mpirt::topology::SimpleCommunicator) {
    if world.rank() == 0 {
        let mut next = vec![0u32; world.size() as usize];
        for _ in 0..ORDER_COUNT * (world.size() as u32 - 1) {
            let (seq, status) = world.any_process().receive::<u32>();
            let from = status.source_rank() as usize;
            assert_eq!(seq, next[from], "message from rank {from} out of order");
            assert_eq!(status.tag(), (seq % 3) as i32);
            next[from] += 1;
        }
        assert!(next[1..].iter().all(|&n| n == ORDER_COUNT));
        println!("order ok");
    } else {
        let root = world.process_at_rank(0);
        for seq in 0..ORDER_COUNT {
            root.send_with_tag(&seq, (seq % 3) as i32);
        }
    }
}

fn probe(world: &mpirt::topology::SimpleCommunicator) {
    if world.rank() == 0 {
        let peer = world.process_at_rank(1);
        let values: Vec<f64> = (0..100).map(|i| i as f64 * 0.5).collect();
        peer.send_with_tag(&values[..], 5);
        peer.send_with_tag(&values[..10], 6);
        peer.send_with_tag(&[7u16; 3000][..], 8);
    } else if world.rank() == 1 {
        let peer = world.process_at_rank(0);
        let status = peer.probe_with_tag(5);
        assert_eq!(status.count(f64::equivalent_datatype()), 100);
        let mut buf = vec![0f64; status.count(f64::equivalent_datatype()) as usize];
        peer.receive_into_with_tag(&mut buf[..], 5);
        assert_eq!(buf[99], 49.5);

        let status = loop {
            if let Some(status) = world.any_process().immediate_probe() {
                break status;
            }
        };
        assert_eq!((status.source_rank(), status.tag()), (0, 6));
        let (message, status) = world.any_process().matched_probe_with_tag(6);
        assert_eq!(status.count(f64::equivalent_datatype()), 10);
        let (got, _) = message.matched_receive_vec::<f64>();
        assert_eq!(got[9], 4.5);

        // Above the eager limit: the matched receive pulls rendezvous data.
        let (message, status) = peer.matched_probe();
        assert_eq!(status.tag(), 8);
        let mut big = vec![0u16; 3000];
        message.matched_receive_into(&mut big[..]);
        assert!(big.iter().all(|&v| v == 7));
        println!("probe ok");
    }
}

fn side_file(name: &str) -> PathBuf {
    Path::new(&env::var(SIDE_DIR).expect("side directory")).join(name)
}

fn ssend(world: &mpirt::topology::SimpleCommunicator) {
    if world.rank() == 0 {
        world.process_at_rank(1).synchronous_send(&42u64);
        // The receiver creates the file just before posting its receive, so a synchronous
        // send that completed early finds no file.
        assert!(
            side_file("posted").exists(),
            "synchronous send completed before the receive was posted"
        );
        println!("ssend ok");
    } else if world.rank() == 1 {
        thread::sleep(Duration::from_millis(300));
        std::fs::write(side_file("posted"), b"").unwrap();
        let (v, _) = world.process_at_rank(0).receive::<u64>();
        assert_eq!(v, 42);
    }
}

fn truncate(world: &mpirt::topology::SimpleCommunicator) {
    if world.rank() == 0 {
        world.process_at_rank(1).send_with_tag(&[1u8; 64][..], 7);
        world.barrier();
    } else {
        let mut small = [0u8; 8];
        world
            .process_at_rank(0)
            .receive_into_with_tag(&mut small[..], 7);
        unreachable!("the truncated receive is fatal");
    }
}

fn try_errors(world: &mpirt::topology::SimpleCommunicator) {
    let size = world.size();
    let e = world.try_process_at_rank(size).unwrap_err();
    println!("error: {e}");
    assert_eq!(e.rank(), Some(world.rank()));
    let e = world.try_process_at_rank(-1).unwrap_err();
    println!("error: {e}");
    let peer = world.process_at_rank(1 - world.rank());
    let e = peer.try_send_with_tag(&1u8, -3).unwrap_err();
    println!("error: {e}");
    assert!(matches!(e.cause(), mpirt::error::Cause::NegativeTag(-3)));
    let e = peer.try_receive_with_tag::<u8>(-1).unwrap_err();
    println!("error: {e}");
    if world.rank() == 0 {
        peer.send_with_tag(&[1u8, 2, 3, 4, 5, 6][..], 1);
        peer.send_with_tag(&7u8, 2);
        peer.send_with_tag(&[0u8; 0][..], 3);
    } else {
        let mut words = [0u32; 4];
        let e = peer
            .try_receive_into_with_tag(&mut words[..], 1)
            .unwrap_err();
        println!("error: {e}");
        let e = peer.try_receive_with_tag::<bool>(2).unwrap_err();
        println!("error: {e}");
        let e = peer.try_receive_with_tag::<u32>(3).unwrap_err();
        println!("error: {e}");
    }
    // A truncated immediate receive that the engine finished before it was waited for (the
    // wait for the one sent after it delivered it): collected, it says so.
    if world.rank() == 0 {
        world.barrier();
        peer.send_with_tag(&[1u8; 64][..], 5);
        peer.send_with_tag(&9u8, 4);
    } else {
        let (mut later, mut small) = (0u8, [0u8; 8]);
        request::scope(|scope| {
            let truncated = peer.immediate_receive_into_with_tag(scope, &mut small[..], 5);
            let after = peer.immediate_receive_into_with_tag(scope, &mut later, 4);
            world.barrier();
            after.wait();
            let e = truncated.try_wait().unwrap_err();
            println!("error: {e}");
        });
        assert_eq!(later, 9);
    }
    world.barrier();
}

fn singleton(world: &mpirt::topology::SimpleCommunicator) {
    assert_eq!((world.rank(), world.size()), (0, 1));
    let me = world.this_process();
    me.send_with_tag(&[3i64; 10][..], 4);
    let (got, status) = me.receive_vec::<i64>();
    assert_eq!((got, status.tag()), (vec![3i64; 10], 4));
    // Above the eager limit a blocking send to self would wait for a receive: post it first.
    let big: Vec<u32> = (0..100_000).collect();
    let mut back = vec![0u32; big.len()];
    request::scope(|scope| {
        let recv = me.immediate_receive_into(scope, &mut back[..]);
        me.send(&big[..]);
        recv.wait();
    });
    assert_eq!(back, big);
    world.barrier();
    assert!(mpirt::time() > 0.0);
    println!("singleton ok");
}

fn ring(world: &mpirt::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);
    let (got, status): (i32, _) = p2p::send_receive(&rank, &next, &previous);
    assert_eq!(
        (got, status.source_rank()),
        ((rank + size - 1) % size, (rank + size - 1) % size)
    );
    // A token goes round once, each rank adding its rank.
    let mut token = vec![0i64; 1000];
    if rank == 0 {
        // Receive posted first: on one rank, `next` is this rank, and a rendezvous-sized
        // blocking send to self would wait for a receive not yet posted.
        let start = token.clone();
        request::scope(|scope| {
            let back = previous.immediate_receive_into(scope, &mut token[..]);
            next.send(&start[..]);
            back.wait();
        });
        assert!(token.iter().all(|&t| t == (size * (size - 1) / 2) as i64));
    } else {
        previous.receive_into(&mut token[..]);
        token.iter_mut().for_each(|t| *t += rank as i64);
        next.send(&token[..]);
    }
    let mut value = [rank; 5];
    p2p::send_receive_replace_into(&mut value[..], &next, &previous);
    assert_eq!(value, [(rank + size - 1) % size; 5]);
    world.barrier();
    println!("ring ok");
}

fn immediate(world: &mpirt::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);
    // Small and rendezvous-sized messages, waited on with wait_all.
    let small = [rank as u64; 4];
    let large: Vec<u64> = (0..10_000).map(|i| i + rank as u64).collect();
    let mut got_small = [0u64; 4];
    let mut got_large = vec![0u64; 10_000];
    request::scope(|scope| {
        let mut requests = vec![
            previous.immediate_receive_into_with_tag(scope, &mut got_small[..], 1),
            previous.immediate_receive_into_with_tag(scope, &mut got_large[..], 2),
            next.immediate_send_with_tag(scope, &small[..], 1),
            next.immediate_synchronous_send_with_tag(scope, &large[..], 2),
        ];
        let statuses = request::wait_all(&mut requests);
        assert_eq!(statuses.len(), 4);
        assert!(requests.is_empty());
    });
    let from = ((rank + size - 1) % size) as u64;
    assert_eq!(got_small, [from; 4]);
    assert!(got_large
        .iter()
        .enumerate()
        .all(|(i, &v)| v == i as u64 + from));

    // wait_any and test_any over a collection.
    let mut slots = [0i32; 8];
    let values: Vec<i32> = (0..8).map(|i| rank * 100 + i).collect();
    request::multiple_scope(16, |scope, coll| {
        for (i, slot) in slots.iter_mut().enumerate() {
            coll.add(previous.immediate_receive_into_with_tag(scope, slot, i as i32));
        }
        for (i, value) in values.iter().enumerate().rev() {
            coll.add(next.immediate_send_with_tag(scope, value, i as i32));
        }
        let mut finished = 0;
        while finished < 8 {
            if coll.test_any().is_some() {
                finished += 1;
            }
        }
        while let Some((index, status, _)) = coll.wait_any() {
            if index < 8 {
                assert_eq!(status.tag(), index as i32);
            }
            finished += 1;
        }
        assert_eq!((finished, coll.incomplete(), coll.len()), (16, 0, 16));
    });
    assert_eq!(
        slots.to_vec(),
        (0..8).map(|i| from as i32 * 100 + i).collect::<Vec<_>>()
    );

    // The free wait_any, and a guard.
    let mut a = 0u8;
    let mut b = 0u8;
    request::scope(|scope| {
        let _sent = WaitGuard::from(next.immediate_send_with_tag(scope, &9u8, 30));
        let mut requests = vec![
            previous.immediate_receive_into_with_tag(scope, &mut a, 31),
            previous.immediate_receive_into_with_tag(scope, &mut b, 30),
        ];
        let (index, status) = request::wait_any(&mut requests).unwrap();
        assert_eq!((index, status.tag()), (1, 30));
        let pending = requests.pop().unwrap();
        pending.cancel();
        assert!(pending.wait().is_cancelled());
    });
    assert_eq!((a, b), (0, 9));

    // Messages already here (the probe waits for them): an immediate receive finishes as it
    // starts, too late to cancel, and a truncated one fails when waited on.
    next.send_with_tag(&[5u16, 6, 7][..], 40);
    next.send_with_tag(&[8u16; 4][..], 41);
    previous.probe_with_tag(40);
    previous.probe_with_tag(41);
    let mut three = [0u16; 3];
    let mut two = [0u16; 2];
    request::scope(|scope| {
        let r = previous.immediate_receive_into_with_tag(scope, &mut three[..], 40);
        r.cancel();
        let status = r.wait();
        assert!(!status.is_cancelled());
        assert_eq!((status.tag(), status.byte_count()), (40, 6));
        let e = previous
            .immediate_receive_into_with_tag(scope, &mut two[..], 41)
            .try_wait()
            .unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    });
    assert_eq!(three, [5, 6, 7]);

    // ... and the checks of what arrived hold for them too: a partial element and an invalid
    // value fail when waited on, naming the receive; a valid checked value lands.
    next.send_with_tag(&[1u8; 6][..], 42);
    next.send_with_tag(&2u8, 43);
    next.send_with_tag(&1u8, 44);
    previous.probe_with_tag(42);
    previous.probe_with_tag(43);
    previous.probe_with_tag(44);
    let mut words = [0u32; 4];
    let mut invalid = false;
    let mut valid = false;
    request::scope(|scope| {
        let e = previous
            .immediate_receive_into_with_tag(scope, &mut words[..], 42)
            .try_wait()
            .unwrap_err();
        assert!(e.to_string().contains("not a whole number of u32"), "{e}");
        assert!(e.to_string().contains("immediate receive"), "{e}");
        let e = previous
            .immediate_receive_into_with_tag(scope, &mut invalid, 43)
            .try_wait()
            .unwrap_err();
        assert!(e.to_string().contains("not a valid bool"), "{e}");
        let status = previous
            .immediate_receive_into_with_tag(scope, &mut valid, 44)
            .wait();
        assert_eq!((status.tag(), status.byte_count()), (44, 1));
    });
    // The invalid byte never reached the program's bool (plain words land where they are
    // received, so theirs hold what came).
    assert_eq!((invalid, valid), (false, true));
    world.barrier();
    println!("immediate ok");
}

/// `immediate_receive` (rsmpi's `ReceiveFuture`): one value from the previous rank by `get` (a derived
/// struct), and, with a tag, by `try` until it arrives.
fn receive_futures(world: &mpirt::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);
    let from = (rank + size - 1) % size;
    let particle = |r: i32| Particle {
        position: [f64::from(r) / 4.0, 0.5, -1.0],
        id: r as u32,
        charge: -2,
        alive: r % 2 == 0,
        kind: 3,
    };
    let e = previous
        .try_immediate_receive_with_tag::<u8>(-2)
        .unwrap_err();
    println!("error: {e}");
    let pending = previous.immediate_receive::<Particle>();
    next.send(&particle(rank));
    let (got, status) = pending.get();
    assert_eq!((got, status.source_rank()), (particle(from), from));

    let mut pending = previous.immediate_receive_with_tag::<u64>(31);
    // No rank sends with tag 31 before it has passed the barrier below.
    pending = pending.r#try().expect_err("no message with tag 31 yet");
    world.barrier();
    next.send_with_tag(&(u64::from(rank as u32) << 40), 31);
    let mut tries = 1;
    let (value, status) = loop {
        match pending.r#try() {
            Ok(done) => break done,
            Err(again) => pending = again,
        }
        tries += 1;
    };
    assert_eq!((value, status.tag()), (u64::from(from as u32) << 40, 31));
    let pending = previous.immediate_receive_with_tag::<u8>(32);
    let shown = format!("{pending:?}");
    assert!(shown.contains("finished: false"), "{shown}");
    next.send_with_tag(&9u8, 32);
    assert_eq!(pending.get().0, 9);

    // Ready sends, each after every rank has posted its receive (the barrier).
    let first = previous.immediate_receive_with_tag::<i32>(33);
    let second = previous.immediate_receive_with_tag::<i32>(34);
    world.barrier();
    // SAFETY: the matching receives were posted before the barrier.
    unsafe { next.ready_send_with_tag(&(rank * 3), 33) };
    let value = rank * 5;
    request::scope(|scope| {
        // SAFETY: as above.
        unsafe { next.immediate_ready_send_with_tag(scope, &value, 34) }.wait();
    });
    assert_eq!((first.get().0, second.get().0), (from * 3, from * 5));
    println!("rank {rank}: receive futures ok after {tries} tries");
}

/// Buffered sends: with nothing attached, an error; a rendezvous-sized buffered send returns
/// before its receive is posted (a standard one would wait for the match); a second that does
/// not fit the space left is an error naming both sizes; an immediate one is finished as it
/// starts; detaching waits for what is in flight. Two ranks.
fn buffered(universe: &mut mpirt::Universe) {
    let world = universe.world();
    let rank = world.rank();
    let large: Vec<u64> = (0..20_000).map(|i| i * 7 + 1).collect();
    if rank == 0 {
        let peer = world.process_at_rank(1);
        let e = peer.try_buffered_send_with_tag(&1u8, 5).unwrap_err();
        println!("error: {e}");
        let small = [rank; 4];
        request::scope(|scope| {
            let e = peer
                .try_immediate_buffered_send_with_tag(scope, &small, 9)
                .unwrap_err();
            println!("error: {e}");
        });
        universe.set_buffer_size(200_000);
        assert_eq!(universe.buffer_size(), 200_000);
        peer.buffered_send_with_tag(&large[..], 6);
        let e = peer.try_buffered_send_with_tag(&large[..], 7).unwrap_err();
        println!("error: {e}");
        request::scope(|scope| {
            peer.immediate_buffered_send_with_tag(scope, &small, 8)
                .wait();
        });
        // The receiver posts its receives only after this barrier.
        world.barrier();
        universe.detach_buffer();
        assert_eq!(universe.buffer_size(), 0);
    } else {
        world.barrier();
        let peer = world.process_at_rank(0);
        let mut got = vec![0u64; large.len()];
        peer.receive_into_with_tag(&mut got[..], 6);
        assert_eq!(got, large);
        let (small, _) = peer.receive_vec_with_tag::<i32>(8);
        assert_eq!(small, [0; 4]);
    }
    world.barrier();
    println!("buffered ok");
}

/// Requests hand back their buffers once finished: `wait_for_data` and `test_with_data` give
/// a receive's buffer holding the message (eager and rendezvous-sized) and a send's own
/// buffer; a request moves into a shorter scope.
fn request_data(world: &mpirt::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);
    let from = (rank + size - 1) % size;
    let small = [rank, rank * 10, rank * 100];
    let large: Vec<u64> = (0..10_000).map(|i| i * 3 + rank as u64).collect();
    let mut got_small = [0i32; 3];
    let mut got_large = vec![0u64; large.len()];
    request::scope(|scope| {
        let receive_small = previous.immediate_receive_into_with_tag(scope, &mut got_small[..], 50);
        let receive_large = previous.immediate_receive_into_with_tag(scope, &mut got_large[..], 51);
        let send_small = next.immediate_send_with_tag(scope, &small[..], 50);
        let send_large = next.immediate_synchronous_send_with_tag(scope, &large[..], 51);
        let data: &[i32] = receive_small.wait_for_data();
        assert_eq!(data, [from, from * 10, from * 100]);
        let data: &[u64] = receive_large.wait_for_data();
        assert!(data
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u64 * 3 + from as u64));
        assert!(std::ptr::eq(send_small.wait_for_data(), &small[..]));
        assert!(std::ptr::eq(send_large.wait_for_data(), &large[..]));
    });

    // test_with_data, until done, on a rendezvous-sized receive and its send.
    let mut got_large = vec![0u64; large.len()];
    let mut tests = 0;
    request::scope(|scope| {
        let mut receive = previous.immediate_receive_into_with_tag(scope, &mut got_large[..], 52);
        let mut send = next.immediate_send_with_tag(scope, &large[..], 52);
        let (status, data) = loop {
            match receive.test_with_data() {
                Ok(done) => break done,
                Err(pending) => receive = pending,
            }
            tests += 1;
        };
        assert_eq!((status.source_rank(), status.tag()), (from, 52));
        assert_eq!(status.byte_count(), 8 * large.len());
        assert!(data
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u64 * 3 + from as u64));
        let sent = loop {
            match send.test_with_data() {
                Ok((_, sent)) => break sent,
                Err(pending) => send = pending,
            }
        };
        assert!(std::ptr::eq(sent, &large[..]));
    });
    println!("rank {rank}: test_with_data tested {tests} time(s) before the data was there");

    // A request of an outer scope, and a static one, finished in an inner scope.
    let mut word = 0u16;
    let one = rank as u16 + 7;
    request::scope(|outer| {
        let receive = previous.immediate_receive_into_with_tag(outer, &mut word, 53);
        let send = next.immediate_send_with_tag(outer, &one, 53);
        let barrier = world.immediate_barrier();
        request::scope(|inner| {
            let receive = receive.shrink_scope_to(inner);
            assert_eq!(*receive.wait_for_data(), from as u16 + 7);
            let barrier: Request<'_, (), _> = barrier.shrink_scope_to(inner);
            barrier.wait();
        });
        send.wait();
    });

    // A message taken by a matched probe, received by an immediate request.
    next.send_with_tag(&[rank as u8; 5][..], 54);
    let (message, status) = previous.matched_probe_with_tag(54);
    assert_eq!(status.byte_count(), 5);
    let mut five = [0u8; 5];
    request::scope(|scope| {
        let receive = message.immediate_matched_receive_into(scope, &mut five[..]);
        assert_eq!(receive.wait_for_data(), [from as u8; 5]);
    });
    world.barrier();
    println!("request data ok");
}

/// The receive from rank `from` of this rank's collection test `round`: each rank sends every
/// rank one such message.
fn collection_message(from: i32, to: i32, round: u32) -> [u32; 4] {
    [from as u32, to as u32, round, 0xC0FFEE]
}

/// Posts a receive from every rank into `slots` (collection index `r` for rank `r`), and sends
/// every rank its message, waited for by the caller.
fn receive_from_every_rank<'a, S: Scope<'a> + Copy>(
    world: &mpirt::topology::SimpleCommunicator,
    scope: S,
    coll: &mut RequestCollection<'a, [u32; 4]>,
    slots: &'a mut [[u32; 4]],
    outgoing: &'a [[u32; 4]],
    round: u32,
) -> Vec<Request<'a, [u32; 4], S>> {
    let tag = 60 + round as i32;
    for (r, slot) in slots.iter_mut().enumerate() {
        let index = coll.add(
            world
                .process_at_rank(r as i32)
                .immediate_receive_into_with_tag(scope, slot, tag),
        );
        assert_eq!(index, r);
    }
    outgoing
        .iter()
        .enumerate()
        .map(|(r, message)| {
            world
                .process_at_rank(r as i32)
                .immediate_send_with_tag(scope, message, tag)
        })
        .collect()
}

/// Every finished request reported once: indices 0..n, each with the message from that rank,
/// in the buffer that receive was given.
fn check_reported(
    me: i32,
    round: u32,
    mut finished: Vec<(usize, i32, [u32; 4], *const [u32; 4])>,
    slots: &[*const [u32; 4]],
) {
    finished.sort_by_key(|f| f.0);
    let indices: Vec<usize> = finished.iter().map(|f| f.0).collect();
    assert_eq!(
        indices,
        (0..slots.len()).collect::<Vec<_>>(),
        "round {round}"
    );
    for (index, source, data, address) in finished {
        assert_eq!(source, index as i32, "round {round}");
        assert_eq!(
            data,
            collection_message(index as i32, me, round),
            "round {round}"
        );
        assert_eq!(
            address, slots[index],
            "round {round}: the buffer of receive {index}"
        );
    }
}

/// Collections of receives from every rank, completed by each of `wait_any`, `wait_some`,
/// `wait_all`, `test_any`, `test_some` and `test_all`.
fn collections(world: &mpirt::topology::SimpleCommunicator) {
    let (me, n) = (world.rank(), world.size());
    for round in 0..6u32 {
        let outgoing: Vec<[u32; 4]> = (0..n).map(|to| collection_message(me, to, round)).collect();
        let mut slots = vec![[0u32; 4]; n as usize];
        let addresses: Vec<*const [u32; 4]> = slots.iter().map(|s| s as *const _).collect();
        let mut finished = Vec::new();
        request::multiple_scope(n as usize, |scope, coll| {
            let mut sends =
                receive_from_every_rank(world, scope, coll, &mut slots, &outgoing, round);
            let mut batch = Vec::new();
            let mut record = |batch: &[(usize, mpirt::point_to_point::Status, &[u32; 4])]| {
                for &(index, status, data) in batch {
                    finished.push((index, status.source_rank(), *data, data as *const _));
                }
            };
            match round {
                0 => {
                    while let Some(one) = coll.wait_any() {
                        record(&[one]);
                    }
                }
                1 => {
                    while coll.incomplete() > 0 {
                        coll.wait_some(&mut batch);
                        assert!(!batch.is_empty(), "wait_some returns at least one");
                        record(&batch);
                    }
                    coll.wait_some(&mut batch);
                    assert!(batch.is_empty(), "nothing left for wait_some");
                }
                2 => {
                    coll.wait_all(&mut batch);
                    assert_eq!(batch.len(), n as usize);
                    record(&batch);
                }
                3 => {
                    while coll.incomplete() > 0 {
                        if let Some(one) = coll.test_any() {
                            record(&[one]);
                        }
                    }
                    assert!(coll.test_any().is_none());
                }
                4 => {
                    while coll.incomplete() > 0 {
                        coll.test_some(&mut batch);
                        record(&batch);
                    }
                }
                _ => {
                    while !coll.test_all(&mut batch) {
                        assert!(batch.is_empty(), "test_all reports all or nothing");
                    }
                    assert_eq!(batch.len(), n as usize);
                    record(&batch);
                    assert!(
                        coll.test_all(&mut batch) && batch.is_empty(),
                        "reported once"
                    );
                }
            }
            assert_eq!((coll.incomplete(), coll.len()), (0, n as usize));
            request::wait_all(&mut sends);
        });
        check_reported(me, round, finished, &addresses);
    }

    // An immediate collective outside the set moves on while a collection waits or tests:
    // rank 0 sends to the last rank only after the barrier, which the last rank enters
    // before its collection waits for that message (once by wait_any, once by test_some). A
    // rank alone would wait for its own send.
    let last = n - 1;
    for round in (0..2).filter(|_| n > 1) {
        let barrier = world.immediate_barrier();
        if me == last {
            let mut got = 0u32;
            request::multiple_scope(1, |scope, coll| {
                coll.add(
                    world
                        .process_at_rank(0)
                        .immediate_receive_into_with_tag(scope, &mut got, 70),
                );
                let mut batch = Vec::new();
                if round == 0 {
                    assert!(coll.wait_any().is_some());
                } else {
                    while coll.incomplete() > 0 {
                        coll.test_some(&mut batch);
                    }
                }
            });
            assert_eq!(got, 42 + round);
        }
        barrier.wait();
        if me == 0 {
            world.process_at_rank(last).send_with_tag(&(42 + round), 70);
        }
    }
    world.barrier();
    println!("collections ok");
}

/// Guards wait for (or cancel, then wait for) their request when dropped, and convert to and
/// from requests and each other.
fn guards(world: &mpirt::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);
    let from = (rank + size - 1) % size;
    let (mut waited, mut converted, mut cancelled, mut unguarded) = (0i64, 0i64, -1i64, 0i64);
    let values = [rank as i64 + 1, rank as i64 + 2];
    request::scope(|scope| {
        let _sent = WaitGuard::from(next.immediate_send_with_tag(scope, &values[0], 80));
        let _received =
            WaitGuard::from(previous.immediate_receive_into_with_tag(scope, &mut waited, 80));
        // No message has tag 82: the guard's cancel takes, and nothing is written.
        let _never =
            CancelGuard::from(previous.immediate_receive_into_with_tag(scope, &mut cancelled, 82));
        // Request -> WaitGuard -> CancelGuard -> WaitGuard -> Request: still the same receive.
        let guard: WaitGuard<'_, i64, _> = previous
            .immediate_receive_into_with_tag(scope, &mut converted, 81)
            .into();
        let guard: CancelGuard<'_, i64, _> = guard.into();
        let guard: WaitGuard<'_, i64, _> = guard.into();
        let receive: Request<'_, i64, _> = guard.into();
        next.send_with_tag(&values[1], 81);
        assert_eq!(*receive.wait_for_data(), from as i64 + 2);
        // A guard turned back into a request before its message arrives is not waited for
        // twice: the request then completes normally.
        let pending: Request<'_, i64, _> =
            WaitGuard::from(previous.immediate_receive_into_with_tag(scope, &mut unguarded, 83))
                .into();
        next.send_with_tag(&values[0], 83);
        pending.wait();
    });
    assert_eq!(
        (waited, converted, cancelled, unguarded),
        (from as i64 + 1, from as i64 + 2, -1, from as i64 + 1)
    );
    world.barrier();
    println!("guards ok");
}

/// Immediate receives into raw memory (C's contract): windows of receives into one buffer, as
/// OSU's bandwidth tests post them, at eager and rendezvous sizes; disjoint raw slices of one
/// buffer; truncation; and the errors of bad raw buffers.
fn raw_receives(world: &mpirt::topology::SimpleCommunicator) {
    const WINDOW: usize = 8;
    const GUARD: u8 = 0xA5;
    let lens = [1, EAGER - 1, EAGER, EAGER + 1, 1 << 20];
    let slices = [0, 3, EAGER + 1, 1 << 20, 5];
    let peer = world.process_at_rank(1 - world.rank());
    if world.rank() == 0 {
        for &len in &lens {
            let msg: Vec<u8> = (0..len).map(|i| pattern(len, i)).collect();
            request::scope(|scope| {
                let mut sends: Vec<_> = (0..WINDOW)
                    .map(|_| peer.immediate_send_with_tag(scope, &msg[..], 5))
                    .collect();
                request::wait_all(&mut sends);
            });
        }
        for (k, &len) in slices.iter().enumerate() {
            let msg: Vec<u8> = (0..len).map(|i| pattern(len + k, i)).collect();
            peer.send_with_tag(&msg[..], 6);
        }
        peer.send_with_tag(&[7u32; 64][..], 7);
        let long: Vec<u8> = (0..4 * EAGER).map(|i| pattern(3, i)).collect();
        peer.send_with_tag(&long[..], 8);
        peer.send_with_tag(&[1u8, 0, 1][..], 9);
        peer.send_with_tag(&[2u8][..], 10);
    } else {
        let mut buf = vec![GUARD; (1 << 20) + 64];
        for &len in &lens {
            buf.fill(GUARD);
            let statuses = request::scope(|scope| {
                let mut recvs: Vec<_> = (0..WINDOW)
                    // SAFETY: `buf` outlives the scope, which ends only once every receive
                    // has completed; nothing touches it meanwhile but these receives.
                    .map(|_| unsafe {
                        peer.immediate_receive_into_raw_with_tag(scope, buf.as_mut_ptr(), len, 5)
                    })
                    .collect();
                request::wait_all(&mut recvs)
            });
            assert_eq!(statuses.len(), WINDOW);
            for s in &statuses {
                assert_eq!((s.source_rank(), s.tag(), s.byte_count()), (0, 5, len));
            }
            assert!(
                buf[..len]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(len, i)),
                "a window of {len}-byte messages into one buffer"
            );
            assert!(
                buf[len..].iter().all(|&b| b == GUARD),
                "nothing past {len} bytes"
            );
        }

        // Disjoint raw slices of one buffer, each a message of its own length.
        buf.fill(GUARD);
        let total: usize = slices.iter().sum();
        let mut joined = vec![GUARD; total + 16];
        let base = joined.as_mut_ptr();
        request::scope(|scope| {
            let mut offset = 0;
            let mut recvs = Vec::new();
            for &len in &slices {
                // SAFETY: `offset + len <= total` lies inside `joined`, which outlives the
                // scope and is not touched until every receive has completed.
                recvs.push(unsafe {
                    peer.immediate_receive_into_raw_with_tag(scope, base.add(offset), len, 6)
                });
                offset += len;
            }
            for (s, &len) in request::wait_all(&mut recvs).iter().zip(&slices) {
                assert_eq!(s.byte_count(), len);
            }
        });
        let mut offset = 0;
        for (k, &len) in slices.iter().enumerate() {
            assert!(
                joined[offset..offset + len]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(len + k, i)),
                "slice {k} of {len} bytes"
            );
            offset += len;
        }
        assert!(joined[total..].iter().all(|&b| b == GUARD));

        // Too long for the raw buffer: an error naming both lengths, nothing written past it.
        let mut words = [0u32; 12];
        let e = request::scope(|scope| {
            // SAFETY: `words` outlives the scope; only this receive writes it.
            unsafe { peer.immediate_receive_into_raw_with_tag(scope, words.as_mut_ptr(), 8, 7) }
                .try_wait()
                .unwrap_err()
        });
        println!("error: {e}");
        assert!(e.to_string().contains("256 bytes"), "{e}");
        // The native PML fills the buffer with the message's first bytes; UCX leaves a
        // truncated receive's buffer unwritten (so it does under Open MPI's pml ucx too).
        if !on_ucx() {
            assert_eq!(words[..8], [7; 8]);
        }
        assert_eq!(words[8..], [0; 4]);
        let mut short = vec![GUARD; 2 * EAGER];
        let e = request::scope(|scope| {
            // SAFETY: as above.
            unsafe { peer.immediate_receive_into_raw_with_tag(scope, short.as_mut_ptr(), EAGER, 8) }
                .try_wait()
                .unwrap_err()
        });
        println!("error: {e}");
        assert!(
            e.to_string().contains(&format!("{} bytes", 4 * EAGER)),
            "{e}"
        );
        assert!(short[EAGER..].iter().all(|&b| b == GUARD));

        // Bad raw buffers are named errors, never writes.
        request::scope(|scope| {
            // SAFETY: the calls fail before posting anything.
            let null = unsafe {
                peer.try_immediate_receive_into_raw(scope, std::ptr::null_mut::<u64>(), 3)
            };
            let e = null.expect_err("a null buffer is refused");
            println!("error: {e}");
            assert!(e.to_string().contains("null pointer"), "{e}");
            let negative = unsafe {
                peer.try_immediate_receive_into_raw_with_tag(scope, words.as_mut_ptr(), 1, -2)
            };
            let e = negative.expect_err("a negative tag is refused");
            assert!(matches!(e.cause(), mpirt::error::Cause::NegativeTag(-2)));
        });

        // Types with invalid bit patterns land through a staging buffer, checked: a byte that
        // is no `bool` is an error and never reaches the program's memory.
        let mut flags = [false; 3];
        request::scope(|scope| {
            // SAFETY: `flags` outlives the scope; only this receive writes it.
            unsafe { peer.immediate_receive_into_raw_with_tag(scope, flags.as_mut_ptr(), 3, 9) }
                .wait();
        });
        assert_eq!(flags, [true, false, true]);
        let mut flag = false;
        let e = request::scope(|scope| {
            // SAFETY: as above.
            unsafe { peer.immediate_receive_into_raw_with_tag(scope, &mut flag, 1, 10) }
                .try_wait()
                .unwrap_err()
        });
        println!("error: {e}");
        assert!(e.to_string().contains("bool"), "{e}");
        assert!(!flag);
    }
    world.barrier();
    println!("raw ok");
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

fn panic_rank(world: &mpirt::topology::SimpleCommunicator) {
    // rsrun's job id names the files under /dev/shm it removes when the job dies.
    println!(
        "job {} pid {}",
        env::var("MPIRT_JOB_ID").unwrap_or_else(|_| "-".into()),
        std::process::id()
    );
    world.barrier();
    if world.rank() == 1 {
        println!("panic at {}", unix_millis());
        panic!("rank 1 gives up");
    }
    world.process_at_rank(1).receive::<u8>();
}

/// Whether process `pid` ends within a few seconds: a launcher that kills its ranks with
/// SIGKILL (Hydra) returns before they are gone, and one that exited leaves them to an init
/// that may never reap them, so a zombie counts as ended.
fn ends(pid: &str) -> bool {
    for _ in 0..500 {
        match std::fs::read_to_string(format!("/proc/{pid}/status")) {
            Err(_) => return true,
            Ok(status) if status.lines().any(|l| l.starts_with("State:\tZ")) => return true,
            Ok(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
    false
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Particle {
    position: [f64; 3],
    id: u32,
    charge: i16,
    alive: bool,
    kind: u8,
}

fn derive(world: &mpirt::topology::SimpleCommunicator) {
    let particles: Vec<Particle> = (0..50)
        .map(|i| Particle {
            position: [i as f64, -1.5, 2.25],
            id: i,
            charge: -(i as i16),
            alive: i % 2 == 0,
            kind: 3,
        })
        .collect();
    if world.rank() == 0 {
        let peer = world.process_at_rank(1);
        peer.send(&particles[..]);
        peer.send(&particles[7]);
        // A bool field holding 2 is refused on receipt.
        let mut bytes = [0u8; 32];
        bytes[30] = 2;
        peer.send(&bytes[..]);
    } else if world.rank() == 1 {
        let peer = world.process_at_rank(0);
        let (got, _) = peer.receive_vec::<Particle>();
        assert_eq!(got, particles);
        let (one, _) = peer.receive::<Particle>();
        assert_eq!(one, particles[7]);
        let e = peer.try_receive::<Particle>().unwrap_err();
        println!("error: {e}");
        println!("derive ok");
    }
}

// ---- the test side ----

/// What the ranks of a job talk over on this one host.
#[derive(Clone, Copy, Debug)]
enum Wire {
    /// The default: shared memory.
    Shm,
    /// TCP between every pair, with its own eager limit set to the tests' EAGER so the size
    /// boundaries fall where they do on shared memory.
    Tcp,
    /// TCP over the IPv6 loopback only.
    Tcp6,
    /// RDMA verbs between every pair (in the Soft-RoCE guest), eager limit EAGER too.
    #[cfg(feature = "verbs")]
    Verbs,
    /// libfabric between every pair, on `common::ofi_test_provider()`, eager limit EAGER too.
    #[cfg(feature = "ofi")]
    Ofi,
}

/// Whether this machine has an RDMA device; tests over verbs say they skip where it has none
/// (tools/test-all.sh runs them again in the Soft-RoCE guest).
#[cfg(feature = "verbs")]
fn rdma_device_present() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

impl Wire {
    fn settings(self) -> Vec<(&'static str, String)> {
        let tcp = vec![
            ("MPIRT_TRANSPORT", "tcp".to_string()),
            ("MPIRT_TCP_EAGER_LIMIT", EAGER.to_string()),
            // Each rank then names its transports, which `assert_used` checks: a TCP test that ran
            // over shared memory would prove nothing.
            ("MPIRT_VERBOSE", "1".to_string()),
        ];
        match self {
            // On UCX, each rank names the transports UCX chose, which `assert_used` checks.
            Wire::Shm if on_ucx() => vec![("MPIRT_VERBOSE", "1".to_string())],
            Wire::Shm => vec![],
            Wire::Tcp => tcp,
            Wire::Tcp6 => [tcp, vec![("MPIRT_TCP_IF", "::1/128".to_string())]].concat(),
            #[cfg(feature = "verbs")]
            Wire::Verbs => vec![
                ("MPIRT_TRANSPORT", "verbs".to_string()),
                ("MPIRT_VERBS_EAGER_LIMIT", EAGER.to_string()),
                ("MPIRT_VERBOSE", "1".to_string()),
            ],
            #[cfg(feature = "ofi")]
            Wire::Ofi => [
                ("MPIRT_TRANSPORT", "ofi".to_string()),
                ("MPIRT_OFI_PROVIDER", common::ofi_test_provider()),
                ("MPIRT_OFI_EAGER_LIMIT", EAGER.to_string()),
                ("MPIRT_VERBOSE", "1".to_string()),
            ]
            .into_iter()
            .chain(
                common::ofi_on_loopback()
                    .into_iter()
                    .map(|(name, value)| (name, value.to_string())),
            )
            .collect(),
        }
    }

    /// Checks, once a job has got past wire-up, that each of its `n` ranks said (under
    /// MPIRT_VERBOSE) that it reaches every other rank over TCP, with the tests' eager limit,
    /// and over the IPv6 loopback where asked.
    fn assert_used(self, n: u32, stderr: &str) {
        if on_ucx() {
            assert_over_ucx(n, stderr);
            return;
        }
        let (over, from) = match self {
            Wire::Shm => return,
            Wire::Tcp => ("tcp", ""),
            Wire::Tcp6 => ("tcp", " from [::1]:"),
            #[cfg(feature = "verbs")]
            Wire::Verbs => ("verbs", ""),
            #[cfg(feature = "ofi")]
            Wire::Ofi => ("libfabric ", ""),
        };
        for rank in 0..n {
            let head = format!("mpirt: rank {rank} of {n} ");
            let line = stderr
                .lines()
                .find(|l| l.starts_with(&head))
                .unwrap_or_else(|| panic!("{self:?}: rank {rank} did not report\n{stderr}"));
            // A lone rank has no peer, so no transport to report.
            if n > 1 {
                assert!(
                    line.contains(&format!("{} ranks over {over}{from}", n - 1))
                        && line.contains(&format!("up to {EAGER} bytes")),
                    "{self:?}: {line}"
                );
            }
            // rsrun sized libfabric for the job, unless this environment did. Under other
            // launchers initialize would, but a test binary's ranks run libtest's thread
            // beside theirs, so it sets nothing (see test_example_ranks_under_hydra_size_ofi).
            #[cfg(feature = "ofi")]
            if matches!(self, Wire::Ofi)
                && n > 1
                && common::test_launcher() == common::TestLauncher::Rsrun
            {
                let universe = std::env::var("FI_UNIVERSE_SIZE").unwrap_or_else(|_| n.to_string());
                assert!(
                    line.contains(&format!("FI_UNIVERSE_SIZE {universe})")),
                    "{line}"
                );
            }
        }
    }
}

/// Whether this run's jobs go over UCX (see `common::test_pml`).
fn on_ucx() -> bool {
    common::test_pml() == "ucx"
}

/// Checks that each of a job's `n` ranks said (under MPIRT_VERBOSE) that it runs over UCX, on
/// a transport UCX_TLS allows where it names one.
fn assert_over_ucx(n: u32, stderr: &str) {
    let allowed = env::var("UCX_TLS").unwrap_or_default();
    for rank in 0..n {
        let head = format!("mpirt: rank {rank} of {n} over UCX ");
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("rank {rank} did not report UCX\n{stderr}"));
        if allowed == "tcp" && n > 1 {
            assert!(line.contains("to peers by tcp/"), "{line}");
        }
    }
}

/// Skips a test of mpirt's own transports on the UCX PML, saying why.
fn native_transports_only() -> bool {
    if on_ucx() {
        println!(
            "skipped: this picks one of mpirt's own transports; on the UCX PML UCX_TLS picks \
             the transport, and the test's `shm` variant (the default wire) runs on it"
        );
    }
    on_ucx()
}

/// Defines a module `$name` holding the test `$body` once per wire, as tests `$name::shm` and
/// `$name::tcp`, with `$wire` naming the wire inside the body.
macro_rules! on_each_wire {
    (fn $name:ident($wire:ident: Wire) $body:block) => {
        mod $name {
            use super::*;

            fn body($wire: Wire) $body

            #[test]
            fn shm() {
                body(Wire::Shm)
            }

            #[test]
            fn tcp() {
                if native_transports_only() {
                    return;
                }
                body(Wire::Tcp)
            }

            #[cfg(feature = "verbs")]
            #[test]
            fn verbs() {
                if !rdma_device_present() {
                    println!("skipped: no RDMA device here (tools/test-all.sh runs this in the Soft-RoCE guest)");
                    return;
                }
                body(Wire::Verbs)
            }

            #[cfg(feature = "ofi")]
            #[test]
            fn ofi() {
                if native_transports_only() {
                    return;
                }
                body(Wire::Ofi)
            }
        }
    };
}

/// The settings of a job over `wire`, with the tests' eager limit.
fn settings(wire: Wire) -> Vec<(&'static str, String)> {
    let mut all = vec![("MPIRT_EAGER_LIMIT", EAGER.to_string())];
    all.extend(wire.settings());
    all
}

fn job(wire: Wire, n: u32, mode: &str, envs: &[(&str, &str)]) -> Output {
    let owned = settings(wire);
    let mut all: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend_from_slice(envs);
    common::job(n, mode, &all)
}

/// Runs a job that must succeed and returns its stdout.
fn ok_job(wire: Wire, n: u32, mode: &str) -> String {
    let owned = settings(wire);
    let all: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (stdout, stderr) = ok_job_with(n, mode, &all);
    wire.assert_used(n, &stderr);
    stdout
}

fn message_sizes(wire: Wire) {
    // Read first: a bad MPIRT_TEST_LARGEST_MESSAGE stops the test here, not in the ranks.
    let lens = message_lens();
    let out = ok_job(wire, 2, "sizes");
    for len in lens {
        assert!(out.contains(&format!("size {len} ok")), "{out}");
    }
}

on_each_wire! {
    fn message_sizes_around_the_eager_limit_and_large(wire: Wire) {
        message_sizes(wire);
    }
}

#[test]
fn message_sizes_over_ipv6_loopback() {
    if native_transports_only() {
        return;
    }
    if common::across_hosts("one loopback") {
        return;
    }
    // The IPv6 loopback is missing where IPv6 is disabled (some containers): nothing to test.
    if let Err(e) = std::net::TcpListener::bind("[::1]:0") {
        println!("skipped: this machine has no IPv6 loopback (binding [::1]: {e})");
        return;
    }
    message_sizes(Wire::Tcp6);
}

/// Over shared memory, large heap buffers go by memcpy from the sender's shared arena (the
/// ranks install TrackingAllocator), or by process_vm_readv when it is turned off or when more
/// ranks share the host than `MPIRT_SHM_ARENA_MAX_RANKS` (63 by default; 1 here, so that 2
/// ranks take the path of 64 and more): each delivers every byte, and `--verbose` says which
/// path is in use.
#[test]
fn large_messages_from_shared_arenas() {
    if on_ucx() {
        // UCX moves the data its own way: only the bytes can be checked there.
        let (out, _) = ok_job_with(2, "arena", &[]);
        assert!(out.contains("arena ok"), "{out}");
        println!("the path check is skipped: the shared arena is the native PML's");
        return;
    }
    if common::across_hosts("shared memory") {
        return;
    }
    let verbose = ("MPIRT_VERBOSE", "1");
    for (envs, path) in [
        (
            vec![verbose],
            "rendezvous by memcpy from the sender's shared arena",
        ),
        (
            vec![verbose, ("MPIRT_SHM_ARENA", "0")],
            "single copy (process_vm_readv); no shared arena: turned off",
        ),
        (
            vec![verbose, ("MPIRT_SHM_ARENA_MAX_RANKS", "1")],
            "single copy (process_vm_readv); no shared arena: 2 ranks share this host, more \
             than MPIRT_SHM_ARENA_MAX_RANKS (1)",
        ),
    ] {
        let (out, err) = ok_job_with(2, "arena", &envs);
        assert!(out.contains("arena ok"), "{out}");
        for rank in 0..2 {
            let line = err
                .lines()
                .find(|l| l.starts_with(&format!("mpirt: rank {rank} of 2 ")))
                .unwrap_or_else(|| panic!("rank {rank} did not report\n{err}"));
            assert!(line.contains(path), "{line}");
        }
    }
}

/// Ranks of a host that disagree on having a shared arena (`MPIRT_SHM_ARENA_MAX_RANKS=1` set
/// for one rank only, sender or receiver in turn) still deliver every byte: the rank without
/// one still maps its peer's, the peer reads it by process_vm_readv, and `--verbose` says so
/// on each side.
#[test]
fn ranks_that_disagree_on_the_arena_deliver_every_byte() {
    if on_ucx() {
        println!(
            "skipped: the shared arena is the native PML's (UCX moves large data its own way)"
        );
        return;
    }
    for without in 0..2 {
        let script = format!(
            "[ \"$MPIRT_RANK\" = {without} ] && export MPIRT_SHM_ARENA_MAX_RANKS=1; \
             exec \"$0\" --exact rank_mode --nocapture --test-threads=1 -q"
        );
        let mut command = Command::new(rsrun_path());
        command
            .args(["-n", "2", "sh", "-c", &script])
            .arg(env::current_exe().unwrap())
            .env(RANK_MODE, "arena")
            .env("MPIRT_VERBOSE", "1");
        let output = run_limited(command);
        let (stdout, stderr) = text(&output);
        assert!(
            output.status.success() && stdout.contains("arena ok"),
            "rank {without} without an arena\n{stdout}\n{stderr}"
        );
        for rank in 0..2 {
            let line = stderr
                .lines()
                .find(|l| l.starts_with(&format!("mpirt: rank {rank} of 2 ")))
                .unwrap_or_else(|| panic!("rank {rank} did not report\n{stderr}"));
            let why = if rank == without {
                "no shared arena: 2 ranks share this host, more than MPIRT_SHM_ARENA_MAX_RANKS (1)"
                    .to_string()
            } else {
                format!("no shared arena: rank {without} has none")
            };
            assert!(line.contains(&why), "{line}");
        }
    }
}

/// `MPIRT_SHM_ARENA_MAX_RANKS` that is not a number of ranks stops the job at start-up with
/// an error naming the rank, the operation and the value, rather than being ignored.
#[test]
fn a_bad_arena_rank_limit_stops_the_job() {
    let output = job_on(
        Launch::Rsrun,
        2,
        "ring",
        &[("MPIRT_SHM_ARENA_MAX_RANKS", "lots")],
    );
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        (0..2).any(|rank| stderr.contains(&format!(
            "mpirt: rank {rank}: initialize: MPIRT_SHM_ARENA_MAX_RANKS='lots' is not a number \
             of ranks"
        ))),
        "{stderr}"
    );
}

/// Rings of the least size, 512 bytes (what each pair gets past 257 ranks on a host; here
/// 3 ranks sharing 1 KiB a receiver): every message size still arrives whole, eager ones cut
/// to what a frame holds, the rest by rendezvous, and streamed in DATA frames through the
/// ring where single copy is off; `--verbose` names the ring size and the eager limit the
/// engine really keeps.
#[test]
fn the_smallest_rings_carry_every_size() {
    if on_ucx() {
        println!("skipped: the rings are the native PML's shared memory (UCX has its own)");
        return;
    }
    if common::across_hosts("shared memory") {
        return;
    }
    let small = [
        ("MPIRT_VERBOSE", "1"),
        ("MPIRT_EAGER_LIMIT", "4096"),
        ("MPIRT_SHM_RECEIVER_BYTES", "1k"),
    ];
    let lens = message_lens();
    let (out, err) = ok_job_with(3, "sizes", &small);
    for len in lens {
        assert!(out.contains(&format!("size {len} ok")), "{out}");
    }
    for rank in 0..3 {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("mpirt: rank {rank} of 3 ")))
            .unwrap_or_else(|| panic!("rank {rank} did not report\n{err}"));
        assert!(
            line.contains("(rings of 512 bytes), eager up to 480 bytes"),
            "{line}"
        );
    }
    let streamed = [small[1], small[2], ("MPIRT_SHM_SINGLE_COPY", "0")];
    ok_job_with(3, "ring", &streamed);
}

on_each_wire! {
    fn wildcard_receives_take_every_sender(wire: Wire) {
        assert!(ok_job(wire, 4, "wildcard").contains("wildcard ok"));
    }
}

on_each_wire! {
    fn messages_from_each_sender_arrive_in_order(wire: Wire) {
        assert!(ok_job(wire, 4, "order").contains("order ok"));
    }
}

on_each_wire! {
    fn probe_and_matched_probe(wire: Wire) {
        assert!(ok_job(wire, 2, "probe").contains("probe ok"));
    }
}

on_each_wire! {
    fn synchronous_send_waits_for_the_match(wire: Wire) {
        let dir = env::temp_dir().join(format!("mpirt-ssend-{}-{wire:?}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let output = job(wire, 2, "ssend", &[(SIDE_DIR, dir.to_str().unwrap())]);
        let (stdout, stderr) = text(&output);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(output.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("ssend ok"));
        wire.assert_used(2, &stderr);
    }
}

on_each_wire! {
    fn truncation_is_fatal_and_names_both_lengths(wire: Wire) {
        let output = job(wire, 2, "truncate", &[]);
        let (stdout, stderr) = text(&output);
        assert!(!output.status.success(), "{stdout}\n{stderr}");
        assert!(
            stderr.contains(
                "mpirt: rank 1: receive from rank 0 (tag 7): message truncated: the message from \
                 rank 0 with tag 7 is 64 bytes but the receive buffer holds only 8 bytes"
            ),
            "{stderr}"
        );
        wire.assert_used(2, &stderr);
    }
}

on_each_wire! {
    fn try_variants_return_errors(wire: Wire) {
        let out = ok_job(wire, 2, "try-errors");
        for expected in [
            "error: rank 0: process_at_rank(2): rank 2 is out of range: the communicator has 2 ranks",
            "error: rank 1: process_at_rank(-1): rank -1 is out of range",
            "error: rank 0: send to rank 1 (tag -3): tag -3 is negative; negative tags are reserved \
             for the runtime",
            "error: rank 1: receive from rank 0 (tag -1): tag -1 is negative",
            "error: rank 1: receive from rank 0 (tag 1): the message is 6 bytes, not a whole number \
             of u32 elements of 4 bytes",
            "error: rank 1: receive from rank 0 (tag 2): the message's bytes are not a valid bool",
            "error: rank 1: receive from rank 0 (tag 3): the message is 0 bytes but one u32 is 4 bytes",
            "error: rank 1: immediate receive from rank 0 (tag 5): message truncated: the message from \
             rank 0 with tag 5 is 64 bytes but the receive buffer holds only 8 bytes",
        ] {
            assert!(out.contains(expected), "missing '{expected}' in\n{out}");
        }
    }
}

#[test]
fn rank_out_of_range_is_fatal() {
    let output = job(Wire::Shm, 2, "fatal-rank", &[]);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("process_at_rank(5): rank 5 is out of range: the communicator has 2 ranks"),
        "{stderr}"
    );
}

#[test]
fn negative_tag_is_fatal() {
    let output = job(Wire::Shm, 1, "negative-tag", &[]);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "mpirt: rank 0: send to rank 0 (tag -3): tag -3 is negative; negative tags are \
             reserved for the runtime"
        ),
        "{stderr}"
    );
}

/// Ranks that disagree on the PML would wire up with different keys and fences and wait on
/// each other forever: they stop at start-up instead, naming the ranks and the PMLs.
#[test]
fn ranks_that_disagree_on_the_pml_stop_with_an_error() {
    let script = "export MPIRT_PML=native; [ \"$MPIRT_RANK\" = 1 ] && export MPIRT_PML=ucx; \
                  exec \"$0\" --exact rank_mode --nocapture --test-threads=1 -q";
    let mut command = Command::new(rsrun_path());
    command
        .args(["-n", "2", "sh", "-c", script])
        .arg(env::current_exe().unwrap())
        .env(RANK_MODE, "ring");
    let output = run_limited(command);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "rank 0 runs the native PML but rank 1 runs 'ucx': every rank must use the same \
             one (set it for all with rsrun --pml or MPIRT_PML)"
        ) || stderr.contains("rank 1 runs the ucx PML but rank 0 runs 'native'"),
        "{stderr}"
    );
}

/// On UCX, `--verbose` says whether the NIC can match tags once `--hw-tag-matching` (the two
/// variables it sets) asks for it: where no ConnectX-5 or later carries the traffic, each rank
/// says matching stays in software.
#[test]
fn hardware_tag_matching_is_reported() {
    if !on_ucx() {
        println!("skipped: hardware tag matching is UCX's (MPIRT_TEST_PML=ucx runs this)");
        return;
    }
    let envs = [
        ("MPIRT_VERBOSE", "1"),
        ("UCX_RC_MLX5_TM_ENABLE", "y"),
        ("UCX_DC_MLX5_TM_ENABLE", "y"),
    ];
    let (_, stderr) = ok_job_with(2, "ring", &envs);
    for rank in 0..2 {
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("mpirt: rank {rank} of 2 over UCX ")))
            .unwrap_or_else(|| panic!("rank {rank} did not report\n{stderr}"));
        assert!(
            line.contains("hardware tag matching on ")
                || line
                    .contains("hardware tag matching asked for, but no offload-capable interface"),
            "{line}"
        );
    }
}

#[test]
fn unfinished_requests_end_the_job() {
    for (mode, expected) in [
        (
            "leak",
            "mpirt: rank 0: end of request scope: 1 request(s) did not complete before their \
             scope ended",
        ),
        (
            "drop",
            "mpirt: rank 0: drop of a request: a request was dropped before it completed",
        ),
        (
            "unfinished-collection",
            "mpirt: rank 0: end of multiple_scope: 1 request(s) of its collection were \
             unfinished when the closure returned",
        ),
    ] {
        let output = job(Wire::Shm, 1, mode, &[]);
        let (stdout, stderr) = text(&output);
        assert!(!output.status.success(), "{stdout}\n{stderr}");
        assert!(stderr.contains(expected), "{mode}: {stderr}");
    }
}

#[test]
fn singleton_without_rsrun() {
    let mut command = Command::new(env::current_exe().unwrap());
    command.args(RANK_MODE_ARGS).env(RANK_MODE, "singleton");
    for var in ["MPIRT_RANK", "MPIRT_SIZE", "MPIRT_KVS_ADDR", "MPIRT_JOB_ID"] {
        command.env_remove(var);
    }
    let output = run_limited(command);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("singleton ok"), "{stdout}");
}

on_each_wire! {
    fn ring_on_1_2_4_and_8_ranks(wire: Wire) {
        for n in [1, 2, 4, 8] {
            assert!(ok_job(wire, n, "ring").contains("ring ok"));
        }
    }
}

on_each_wire! {
    fn immediate_operations_in_scopes(wire: Wire) {
        for n in [1, 3] {
            assert!(ok_job(wire, n, "immediate").contains("immediate ok"));
        }
    }
}

on_each_wire! {
    fn buffered_sends_return_before_their_match(wire: Wire) {
        let out = ok_job(wire, 2, "buffered");
        assert!(out.contains("buffered ok"), "{out}");
        for expected in [
            "error: rank 0: buffered send to rank 1 (tag 5): the message needs 1 bytes of the \
             space attached for buffered sends, which has 0 of 0 bytes free",
            "error: rank 0: buffered send to rank 1 (tag 7): the message needs 160000 bytes of \
             the space attached for buffered sends, which has 40000 of 200000 bytes free",
            "error: rank 0: immediate buffered send to rank 1 (tag 9): the message needs 16 \
             bytes of the space attached for buffered sends, which has 0 of 0 bytes free",
        ] {
            assert!(out.contains(expected), "{expected}\n{out}");
        }
    }
}

on_each_wire! {
    fn buffered_sends_in_flight_at_finalize_arrive_or_are_an_error(wire: Wire) {
        ok_job(wire, 2, "buffered-finalize");
        let output = job(wire, 2, "buffered-unreceived", &[]);
        let (stdout, stderr) = text(&output);
        assert!(!output.status.success(), "{stdout}\n{stderr}");
        assert!(
            stderr.contains("mpirt: rank 0: ") && stderr.contains("buffered send to rank 1 (tag 6)"),
            "{stderr}"
        );
    }
}

#[test]
fn a_dropped_receive_future_ends_the_job() {
    let output = job(Wire::Shm, 1, "future-dropped", &[]);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "mpirt: rank 0: immediate receive of one value from rank 0 (any tag): the future was \
             dropped before its value arrived"
        ),
        "{stderr}"
    );
}

on_each_wire! {
    fn receive_futures_get_one_value(wire: Wire) {
        for n in [1, 3] {
            let out = ok_job(wire, n, "receive-future");
            assert!(out.contains("receive futures ok"), "{out}");
            let previous = n - 1;
            assert!(
                out.contains(&format!(
                    "error: rank 0: immediate receive of one value from rank {previous} (tag -2): \
                     tag -2 is negative"
                )),
                "{out}"
            );
        }
        let output = job(wire, 2, "receive-future-short", &[]);
        let (stdout, stderr) = text(&output);
        assert!(!output.status.success(), "{stdout}\n{stderr}");
        assert!(
            stderr.contains(
                "mpirt: rank 1: immediate receive of one value from rank 0 (tag 9): the message is \
                 0 bytes but one u64 is 8 bytes"
            ),
            "{stderr}"
        );
    }
}

on_each_wire! {
    fn requests_hand_back_their_data(wire: Wire) {
        for n in [1, 3] {
            assert!(ok_job(wire, n, "request-data").contains("request data ok"));
            assert!(ok_job(wire, n, "guards").contains("guards ok"));
        }
        for n in [1, 2, 5] {
            assert!(ok_job(wire, n, "collection").contains("collections ok"));
        }
    }
}

/// The rsmpi-shaped example (`mpirt/examples/immediate_multiple.rs`) runs, as well as
/// compiles; `cargo test -p mpirt` builds it, a run of only this suite may not have. Where
/// `MPIRT_TEST_EXAMPLES_BUILT` is set (tools/test-all.sh builds the examples first), a missing
/// example is a failure, not a skip.
#[test]
fn rsmpi_shaped_collection_example_runs() {
    let exe = env::current_exe().unwrap();
    let release = exe.parent().unwrap().parent().unwrap();
    let example = release.join("examples").join("immediate_multiple");
    if !example.exists() {
        assert!(
            env::var_os("MPIRT_TEST_EXAMPLES_BUILT").is_none(),
            "MPIRT_TEST_EXAMPLES_BUILT is set but {} is not built",
            example.display()
        );
        println!("skipped: {} is not built", example.display());
        return;
    }
    let mut command = Command::new(rsrun_path());
    command.args(["-n", "3"]).arg(&example);
    let output = run_limited(command);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for rank in 0..3 {
        for style in [
            "wait_any",
            "wait_some",
            "wait_all",
            "test_any",
            "test_some",
            "test_all",
        ] {
            assert!(
                stdout.contains(&format!("rank {rank}: {style} ok")),
                "{stdout}"
            );
        }
    }
}

on_each_wire! {
    fn raw_receives_share_one_buffer(wire: Wire) {
        assert!(ok_job(wire, 2, "raw").contains("raw ok"));
    }
}

on_each_wire! {
    fn derived_struct_round_trips(wire: Wire) {
        let out = ok_job(wire, 2, "derive");
        assert!(out.contains("derive ok"));
        assert!(
            out.contains("error: rank 1: receive from rank 0 (any tag): the message's bytes are not a valid Particle"),
            "{out}"
        );
    }
}

on_each_wire! {
    fn a_panicking_rank_ends_the_job(wire: Wire) {
        // Files under /dev/shm older than this were none of the job's (below); the second
        // covers the coarse clock a tmpfs stamps files with.
        let started = std::time::SystemTime::now() - Duration::from_secs(1);
        let output = job(wire, 2, "panic", &[]);
        let (stdout, stderr) = text(&output);
        assert!(!output.status.success(), "{stdout}\n{stderr}");
        assert!(stderr.contains("rank 1 gives up"), "{stderr}");
        wire.assert_used(2, &stderr);
        // Rank 0 waits forever for a message: only the abort ends the job, within 2 s of the
        // panic under rsrun (wall clock, which both processes share); verbs (and OFI's verbs
        // provider) runs in a guest whose CPU is emulated, ten times slower or worse, and another launcher ends the job
        // at its own pace (mpirun's daemons over ssh), so there the bound only rules out a hang.
        let limit_ms = match wire {
            #[cfg(feature = "verbs")]
            Wire::Verbs => 20_000,
            // libfabric's verbs provider runs in the same guest.
            #[cfg(feature = "ofi")]
            Wire::Ofi if common::ofi_test_provider().starts_with("verbs") => 20_000,
            _ if common::test_launcher() != common::TestLauncher::Rsrun => 20_000,
            _ => 2000,
        };
        let ended = unix_millis();
        let panicked: u128 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("panic at "))
            .expect("rank 1 prints when it panics")
            .parse()
            .unwrap();
        assert!(
            ended - panicked < limit_ms,
            "the job ended {} ms after the panic",
            ended - panicked
        );
        let job_id = stdout
            .lines()
            .find_map(|l| l.strip_prefix("job "))
            .and_then(|l| l.split(' ').next())
            .expect("the ranks print the job id");
        let pids: Vec<&str> = stdout.lines().filter_map(|l| l.split(" pid ").nth(1)).collect();
        for pid in &pids {
            assert!(ends(pid), "rank pid {pid} is left behind");
        }
        // No file is named after a rank's process (as libfabric's shm names its endpoint's
        // by itself), where no clean-up would find it and a later process of the same id
        // could not open its own endpoint. Only the job's files count: one a dead process
        // left long before, whose id a rank now has again, is older than the job.
        let named_by_pid: Vec<_> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                pids.iter().any(|pid| name.starts_with(&format!("{pid}:")))
            })
            .filter(|e| e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= started))
            .map(|e| e.file_name())
            .collect();
        assert!(named_by_pid.is_empty(), "left in /dev/shm: {named_by_pid:?}");
        if !under_rsrun("removing a dead job's files under /dev/shm") {
            return;
        }
        let prefix = format!("mpirt-{job_id}");
        let left: Vec<_> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "left in /dev/shm: {left:?}");
    }
}

/// A rank sent SIGTERM dies of it, not of an exit from libinfinipath's handler (which loads
/// with libfabric and ran the process's exit in whichever thread took the signal, racing the
/// rank's thread inside libfabric: pml's `ofi::signals`). Under rsrun over OFI, whose ranks
/// rsrun starts with IPATH_NO_BACKTRACE (rsrun then exits with the code of that death); and
/// as a singleton, as under any other launcher, where `initialize` takes the signals back.
/// Before, each exited with status 1.
#[cfg(feature = "ofi")]
#[test]
fn a_terminated_rank_dies_of_sigterm_beside_ofi() {
    use std::os::unix::process::ExitStatusExt;
    let mut singleton = Command::new(env::current_exe().unwrap());
    singleton.args(RANK_MODE_ARGS).env(RANK_MODE, "terminated");
    for var in [
        "MPIRT_RANK",
        "MPIRT_SIZE",
        "MPIRT_KVS_ADDR",
        "MPIRT_JOB_ID",
        "IPATH_NO_BACKTRACE",
    ] {
        singleton.env_remove(var);
    }
    let output = run_limited(singleton);
    let (stdout, stderr) = text(&output);
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGTERM),
        "a singleton: {:?}\n{stdout}\n{stderr}",
        output.status
    );
    if native_transports_only() {
        return;
    }
    if common::test_launcher() != common::TestLauncher::Rsrun {
        println!("the job's part is skipped: it reads rsrun's report of each rank's end");
        return;
    }
    let output = job(Wire::Ofi, 2, "terminated", &[]);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    Wire::Ofi.assert_used(2, &stderr);
    assert!(
        // "rsrun: rank 1 (pid N) ...", or "rsrun: rank 1 on HOST (pid N) ..." across hosts.
        stderr.lines().any(|l| l.starts_with("rsrun: rank 1 ")
            && l.contains(" (pid ")
            && l.ends_with(") killed by signal 15 (SIGTERM)")),
        "{stderr}"
    );
    assert_eq!(output.status.code(), Some(128 + libc::SIGTERM), "{stderr}");
}

/// A rank killed with SIGKILL, whose peer waits for it, ends the job with a non-zero exit
/// under whichever launcher started it (MPIRT_TEST_LAUNCHER).
#[test]
fn a_killed_rank_ends_the_job() {
    let output = job(Wire::Shm, 2, "killed", &[]);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("rank 0 done"), "{stdout}");
}

#[test]
fn under_srun_with_pmi2() {
    if !slurm_available() {
        return;
    }
    // 8 ranks on 4 nodes: shared memory within a node, TCP between, wired up over PMI-2.
    let srun = Launch::Srun { nodes: 4 };
    for (mode, done) in [
        ("ring", "ring ok"),
        ("wildcard", "wildcard ok"),
        ("order", "order ok"),
        ("immediate", "immediate ok"),
    ] {
        let (out, _) = ok_job_on(srun, 8, mode, &[]);
        assert!(out.contains(done), "{mode}: {out}");
    }
    // Two ranks on two nodes: every size to the largest (64 MiB), and probes, over TCP between
    // the nodes.
    let pair = Launch::Srun { nodes: 2 };
    let largest = message_lens()[6];
    let (out, _) = ok_job_on(pair, 2, "sizes", &[]);
    assert!(out.contains(&format!("size {largest} ok")), "{out}");
    let (out, _) = ok_job_on(pair, 2, "probe", &[]);
    assert!(out.contains("probe ok"), "{out}");
    // A rank killed with SIGKILL ends the step with a non-zero exit, and the peer waiting for
    // it says which rank it lost.
    let output = job_on(Launch::Srun { nodes: 2 }, 2, "killed", &[]);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("task 1: Killed"), "{stderr}");
}

/// A rank that calls abort after wire-up, or is killed, while its peer on another node waits
/// for it, ends the srun step non-zero, and the messages name the rank: an abort goes through
/// the PMI the rank was started with (PMI-2's abort; PMIx_Abort with the `pmix` feature), and
/// the peer of a killed rank aborts naming the rank it lost. srun's --kill-on-bad-exit, which
/// would end the step on the first non-zero exit whatever the ranks do, is left off.
#[test]
fn a_rank_that_aborts_or_is_killed_ends_the_srun_step() {
    if !slurm_available() {
        return;
    }
    let mut mpis = vec!["--mpi=pmi2"];
    if cfg!(feature = "pmix") {
        mpis.push("--mpi=pmix");
    } else {
        println!(
            "--mpi=pmix skipped: built without the `pmix` feature (tools/test-all.sh's Slurm \
             phase runs this suite again with it)"
        );
    }
    // Each mode's messages, every one of which stderr holds, and the lines it must not.
    let cases: [(&str, &[&str], &[&str]); 2] = [
        (
            "abort",
            &["rank 1 called abort (code 3): rank 1 called abort(3)"],
            // Only the abort through PMI can end rank 0, which stays out of mpirt calls.
            &[
                "rank 0 outlived rank 1's abort",
                "the connection with rank 1",
            ],
        ),
        (
            "killed",
            &[
                "mpirt: rank 0: receive from rank 1 (any tag): the connection with rank 1 on host",
                "task 1: Killed",
            ],
            &[],
        ),
    ];
    for mpi in mpis {
        for (mode, messages, absent) in cases {
            let mut command = Command::new("srun");
            command
                .args([mpi, "-N", "2", "-n", "2"])
                .arg(env::current_exe().unwrap())
                .args(RANK_MODE_ARGS)
                .env(RANK_MODE, mode);
            let output = run_limited(command);
            let (stdout, stderr) = text(&output);
            assert!(!output.status.success(), "{mpi} {mode}: {stdout}\n{stderr}");
            for message in messages {
                assert!(
                    stderr.contains(message),
                    "{mpi} {mode}: {message}\n{stderr}"
                );
            }
            for line in absent {
                assert!(!stderr.contains(line), "{mpi} {mode}: {line}\n{stderr}");
            }
            if mode == "abort" {
                // Slurm's SIGKILL of the step races rank 1's own exit with the abort's code.
                assert!(
                    stderr.contains("task 1: Exited with exit code 3")
                        || stderr.contains("task 1: Killed"),
                    "{mpi} {mode}: rank 1's end\n{stderr}"
                );
            }
        }
    }
}

/// Runs two ranks of this binary in rank mode `ring` under `launcher` (its arguments before the
/// program), which must end at initialize with `refusal` from each rank, non-zero, and print
/// nothing from the ranks (only the test harness's own preamble).
fn refused_start(launcher: &[&str], refusal: impl Fn(u32) -> String) {
    let mut command = Command::new(launcher[0]);
    command
        .args(&launcher[1..])
        .arg(env::current_exe().unwrap())
        .args(RANK_MODE_ARGS)
        .env(RANK_MODE, "ring");
    let output = run_limited(command);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{launcher:?}: {stdout}\n{stderr}");
    for task in 0..2 {
        let expected = refusal(task);
        assert!(
            stderr.contains(&expected),
            "{launcher:?}: {expected}\n{stderr}"
        );
    }
    assert!(
        stdout
            .lines()
            .all(|l| l.is_empty() || l == "running 1 test"),
        "{launcher:?}: the ranks printed\n{stdout}"
    );
}

/// Plain `srun -n 2` (the test Slurm's MpiDefault is none) and `srun --mpi=none` give the
/// ranks no PMI: never two singletons, but the named error from each task.
#[test]
fn srun_without_pmi_is_a_named_error() {
    if !slurm_available() {
        return;
    }
    for mpi in [&[][..], &["--mpi=none"]] {
        let launcher = [&["srun"], mpi, &["-N", "2", "-n", "2"]].concat();
        refused_start(&launcher, |task| {
            format!(
                "mpirt: initialize: started by srun as task {task} of 2, but Slurm gave no PMI: \
                 run srun --mpi=pmi2, or build mpirt with the `pmix` feature for --mpi=pmix"
            )
        });
    }
}

/// Without the `pmix` feature, the PMIx launchers' ranks end with the named error.
#[cfg(not(feature = "pmix"))]
#[test]
fn pmix_launchers_without_the_feature_are_a_named_error() {
    let open_mpi = Command::new("mpirun.openmpi").arg("--version").output();
    if open_mpi.is_ok_and(|o| o.status.success()) {
        let launcher = [
            "mpirun.openmpi",
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "2",
        ];
        refused_start(&launcher, |rank| {
            format!(
                "mpirt: initialize: started by Open MPI's mpirun as rank {rank} of 2 \
                 (PMIX_NAMESPACE is set), but this build of mpirt has no PMIx client: use rsrun, \
                 or build mpirt with the `pmix` feature"
            )
        });
    } else {
        println!("skipped Open MPI's part: no mpirun.openmpi here (tools/test-all.sh installs it)");
    }
    if slurm_available() {
        refused_start(&["srun", "--mpi=pmix", "-N", "2", "-n", "2"], |task| {
            format!(
                "mpirt: initialize: started by srun --mpi=pmix as task {task} of 2 \
                 (PMIX_NAMESPACE is set), but this build of mpirt has no PMIx client: run srun \
                 --mpi=pmi2, or build mpirt with the `pmix` feature"
            )
        });
    }
}

/// A verbs setting the port cannot honour (a GID index with no GID behind it) stops the job at
/// start-up, and the message names the rank, the operation and the cause.
#[cfg(feature = "verbs")]
#[test]
fn verbs_with_an_empty_gid_index_is_named() {
    if !rdma_device_present() {
        println!(
            "skipped: no RDMA device here (tools/test-all.sh runs this in the Soft-RoCE guest)"
        );
        return;
    }
    let output = job(Wire::Verbs, 2, "probe", &[("MPIRT_VERBS_GID_INDEX", "200")]);
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    let named = (0..2).any(|r| {
        stderr.contains(&format!(
            "mpirt: rank {r}: initialize: transport failed: verbs: GID 200 of rxe"
        ))
    });
    assert!(
        named && stderr.contains("MPIRT_VERBS_GID_INDEX"),
        "{stderr}"
    );
}
