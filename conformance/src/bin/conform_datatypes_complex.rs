//! ranks: 2 3
//! Complex numbers (the `complex` feature): a vector of `Complex64` broadcast from rank 0, and
//! a `Complex32` pair passed around the ring inside a derived struct.

use mpi::traits::*;
use num_complex::{Complex32, Complex64};

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Sample {
    step: u16,
    value: Complex32,
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();

    let mut roots: Vec<Complex64> = if rank == 0 {
        (0..8)
            .map(|k| {
                let angle = k as f64 * std::f64::consts::FRAC_PI_4;
                Complex64::new(angle.cos(), angle.sin())
            })
            .collect()
    } else {
        vec![Complex64::default(); 8]
    };
    world.process_at_rank(0).broadcast_into(&mut roots[..]);
    let product: Complex64 = roots.iter().product();
    assert!((product - Complex64::new(-1.0, 0.0)).norm_sqr() < 1e-24);
    println!("rank {rank}: the eighth roots of unity multiply to -1");

    let mine = Sample {
        step: rank as u16,
        value: Complex32::new(rank as f32, -(rank as f32)),
    };
    let next = world.process_at_rank((rank + 1) % size);
    let previous = world.process_at_rank((rank + size - 1) % size);
    let (got, _) = mpi::point_to_point::send_receive::<Sample, _, _, _>(&mine, &next, &previous);
    let from = previous.rank();
    assert_eq!(got.step, from as u16);
    assert_eq!(got.value, Complex32::new(from as f32, -(from as f32)));
    println!("rank {rank}: sample {} from rank {from}", got.value);
}
