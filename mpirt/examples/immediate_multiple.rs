//! Written as an rsmpi 0.8 program is, with mpirt's names: a ring exchange whose requests go
//! into a `RequestCollection`, completed with `wait_any`, `wait_some`, `wait_all`, `test_any`,
//! `test_some` and `test_all`, each finished request handing back its buffer. It compiles with
//! every `cargo test -p mpirt`, which is the point: rsmpi-shaped code ports by renaming the
//! crate. Run it with `rsrun -n 3 target/release/examples/immediate_multiple`.

use mpirt::point_to_point::Status;
use mpirt::request::{multiple_scope, RequestCollection, Scope};
use mpirt::traits::*;
use mpirt::Rank;

const COUNT: usize = 64;

/// Posts COUNT sends of `values` to `next` and as many receives from `previous` into `slots`.
fn post<'a, S: Scope<'a> + Copy>(
    world: &impl Communicator,
    scope: S,
    coll: &mut RequestCollection<'a, [u16; 3]>,
    (next, previous): (Rank, Rank),
    values: &'a [[u16; 3]],
    slots: &'a mut [[u16; 3]],
) {
    for value in values {
        coll.add(world.process_at_rank(next).immediate_send(scope, value));
    }
    for slot in slots.iter_mut() {
        coll.add(
            world
                .process_at_rank(previous)
                .immediate_receive_into(scope, slot),
        );
    }
}

/// What the finished requests handed back: every value sent, and every value received.
fn check(values: &[[u16; 3]], previous: Rank, mut returned: Vec<[u16; 3]>) {
    returned.sort();
    let mut expected: Vec<[u16; 3]> = values.to_vec();
    expected.extend((0..COUNT as u16).map(|i| [previous as u16, i, i * 2]));
    expected.sort();
    assert_eq!(returned, expected);
}

fn main() {
    let universe = mpirt::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let ring = ((rank + 1) % size, (rank + size - 1) % size);
    let values: Vec<[u16; 3]> = (0..COUNT as u16).map(|i| [rank as u16, i, i * 2]).collect();

    for style in [
        "wait_any",
        "wait_some",
        "wait_all",
        "test_any",
        "test_some",
        "test_all",
    ] {
        let mut slots = vec![[0u16; 3]; COUNT];
        let mut returned: Vec<[u16; 3]> = Vec::new();
        multiple_scope(2 * COUNT, |scope, coll| {
            post(&world, scope, coll, ring, &values, &mut slots);
            let mut some: Vec<(usize, Status, &[u16; 3])> = Vec::new();
            match style {
                "wait_any" => {
                    while let Some((_, _, data)) = coll.wait_any() {
                        returned.push(*data);
                    }
                }
                "wait_some" => {
                    while coll.incomplete() > 0 {
                        coll.wait_some(&mut some);
                        returned.extend(some.iter().map(|&(_, _, data)| *data));
                    }
                }
                "wait_all" => {
                    coll.wait_all(&mut some);
                    returned.extend(some.iter().map(|&(_, _, data)| *data));
                }
                "test_any" => {
                    while coll.incomplete() > 0 {
                        if let Some((_, _, data)) = coll.test_any() {
                            returned.push(*data);
                        }
                    }
                }
                "test_some" => {
                    while coll.incomplete() > 0 {
                        coll.test_some(&mut some);
                        returned.extend(some.iter().map(|&(_, _, data)| *data));
                    }
                }
                _ => {
                    while !coll.test_all(&mut some) {}
                    returned.extend(some.iter().map(|&(_, _, data)| *data));
                }
            }
        });
        check(&values, ring.1, returned);
        println!("rank {rank}: {style} ok");
    }
}
