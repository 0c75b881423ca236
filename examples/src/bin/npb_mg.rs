//! NPB MG, the multigrid kernel: V-cycles of a 27-point Poisson operator on a periodic cube,
//! whose right-hand side is zero but for +1 and -1 at the twenty extreme points of a random
//! field. The L2 norm of the final residual is checked against NPB's published value.
//!
//! The cube is cut into slabs of planes, one per process, at every level with at least two
//! planes per process; the coarser levels are small and every process holds them whole,
//! computing them redundantly (the slabs of the finest of those are gathered after
//! restriction). Every point is computed by the same expression as in the serial code, so only
//! the norms' sums depend on the process count.
//!
//!   npb_mg CLASS     (S, W, A or B; a power-of-two number of processes)

use std::process::ExitCode;

use examples::npb::{self, multiply, power, Randlc, Summary, MULTIPLIER};
use mpirt::collective::SystemOperation;
use mpirt::request;
use mpirt::topology::SimpleCommunicator;
use mpirt::traits::*;

/// The operator A and the smoother S(a) (NPB's classes S, W and A) or S(b) (B and beyond).
const A: [f64; 4] = [-8.0 / 3.0, 0.0, 1.0 / 6.0, 1.0 / 12.0];
const SMOOTHER_A: [f64; 4] = [-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0.0];
const SMOOTHER_B: [f64; 4] = [-3.0 / 17.0, 1.0 / 33.0, -1.0 / 61.0, 0.0];
/// Points of the right-hand side set to +1 and to -1.
const EXTREMES: usize = 10;
const EPSILON: f64 = 1e-8;
/// Tags of the planes that travel to the next and to the previous process.
const UPWARD: i32 = 1;
const DOWNWARD: i32 = 2;

/// One level of the grid hierarchy as this process holds it: `planes` planes of `n` x `n`
/// points from global plane `offset` on, framed by one ghost layer on every side. Arrays are
/// indexed `[i3][i2][i1]`, i1 fastest.
#[derive(Clone, Copy, Debug)]
struct Level {
    n: usize,
    planes: usize,
    offset: usize,
    /// Whether the planes are split among the processes (otherwise each holds them all).
    split: bool,
}

impl Level {
    fn side(&self) -> usize {
        self.n + 2
    }

    fn plane(&self) -> usize {
        self.side() * self.side()
    }

    fn len(&self) -> usize {
        (self.planes + 2) * self.plane()
    }

    fn at(&self, i3: usize, i2: usize, i1: usize) -> usize {
        (i3 * self.side() + i2) * self.side() + i1
    }
}

struct Multigrid<'a> {
    world: &'a SimpleCommunicator,
    /// Coarsest (2 x 2 x 2) first.
    levels: Vec<Level>,
    smoother: [f64; 4],
}

impl Multigrid<'_> {
    /// Fills the ghost layer: periodic within the process along i1 and i2, then along i3
    /// from the neighbouring slabs (whole planes, ghosts included, so edges and corners come
    /// right as in NPB's `comm3`).
    fn exchange(&self, level: &Level, u: &mut [f64]) {
        let (n, side) = (level.n, level.side());
        for i3 in 1..=level.planes {
            for i2 in 1..=n {
                u[level.at(i3, i2, 0)] = u[level.at(i3, i2, n)];
                u[level.at(i3, i2, n + 1)] = u[level.at(i3, i2, 1)];
            }
            for i1 in 0..side {
                u[level.at(i3, 0, i1)] = u[level.at(i3, n, i1)];
                u[level.at(i3, n + 1, i1)] = u[level.at(i3, 1, i1)];
            }
        }
        let plane = level.plane();
        let (bottom, rest) = u.split_at_mut(plane);
        let (interior, top) = rest.split_at_mut(level.planes * plane);
        let size = self.world.size();
        if !level.split || size == 1 {
            bottom.copy_from_slice(&interior[(level.planes - 1) * plane..]);
            top.copy_from_slice(&interior[..plane]);
            return;
        }
        let rank = self.world.rank();
        let below = self.world.process_at_rank((rank + size - 1) % size);
        let above = self.world.process_at_rank((rank + 1) % size);
        request::scope(|scope| {
            let mut requests = vec![
                below.immediate_receive_into_with_tag(scope, bottom, UPWARD),
                above.immediate_receive_into_with_tag(scope, top, DOWNWARD),
                below.immediate_send_with_tag(scope, &interior[..plane], DOWNWARD),
                above.immediate_send_with_tag(
                    scope,
                    &interior[(level.planes - 1) * plane..],
                    UPWARD,
                ),
            ];
            request::wait_all(&mut requests);
        });
    }

    /// `r = v - A u` (NPB's `resid`); `v` None means r holds v on entry.
    fn residual(&self, level: &Level, u: &[f64], v: Option<&[f64]>, r: &mut [f64]) {
        let (n, side) = (level.n, level.side());
        let (mut u1, mut u2) = (vec![0.0; side], vec![0.0; side]);
        for i3 in 1..=level.planes {
            for i2 in 1..=n {
                for i1 in 0..side {
                    u1[i1] = u[level.at(i3, i2 - 1, i1)]
                        + u[level.at(i3, i2 + 1, i1)]
                        + u[level.at(i3 - 1, i2, i1)]
                        + u[level.at(i3 + 1, i2, i1)];
                    u2[i1] = u[level.at(i3 - 1, i2 - 1, i1)]
                        + u[level.at(i3 - 1, i2 + 1, i1)]
                        + u[level.at(i3 + 1, i2 - 1, i1)]
                        + u[level.at(i3 + 1, i2 + 1, i1)];
                }
                for i1 in 1..=n {
                    let c = level.at(i3, i2, i1);
                    let rhs = v.map_or(r[c], |v| v[c]);
                    // A[1] is zero, so the face neighbours drop out, as in NPB.
                    r[c] = rhs
                        - A[0] * u[c]
                        - A[2] * (u2[i1] + u1[i1 - 1] + u1[i1 + 1])
                        - A[3] * (u2[i1 - 1] + u2[i1 + 1]);
                }
            }
        }
        self.exchange(level, r);
    }

    /// `u = u + S r`, the smoother (NPB's `psinv`).
    fn smooth(&self, level: &Level, r: &[f64], u: &mut [f64]) {
        let (n, side) = (level.n, level.side());
        let c = self.smoother;
        let (mut r1, mut r2) = (vec![0.0; side], vec![0.0; side]);
        for i3 in 1..=level.planes {
            for i2 in 1..=n {
                for i1 in 0..side {
                    r1[i1] = r[level.at(i3, i2 - 1, i1)]
                        + r[level.at(i3, i2 + 1, i1)]
                        + r[level.at(i3 - 1, i2, i1)]
                        + r[level.at(i3 + 1, i2, i1)];
                    r2[i1] = r[level.at(i3 - 1, i2 - 1, i1)]
                        + r[level.at(i3 - 1, i2 + 1, i1)]
                        + r[level.at(i3 + 1, i2 - 1, i1)]
                        + r[level.at(i3 + 1, i2 + 1, i1)];
                }
                for i1 in 1..=n {
                    let at = level.at(i3, i2, i1);
                    // c[3] is zero, so the corners drop out, as in NPB.
                    u[at] = u[at]
                        + c[0] * r[at]
                        + c[1] * (r[at - 1] + r[at + 1] + r1[i1])
                        + c[2] * (r2[i1] + r1[i1 - 1] + r1[i1 + 1]);
                }
            }
        }
        self.exchange(level, u);
    }

    /// Restricts `r` of `fine` to `s` of `coarse` by trilinear projection (NPB's `rprj3`).
    /// Each process projects the coarse planes over its own fine ones; where the coarse level
    /// is held whole, the processes then gather their planes.
    fn restrict(&self, fine: &Level, r: &[f64], coarse: &Level, s: &mut [f64]) {
        let n = coarse.n;
        let planes = fine.planes / 2;
        let mut projected = vec![0.0; planes * coarse.plane()];
        let (mut x1, mut y1) = (vec![0.0; fine.side()], vec![0.0; fine.side()]);
        for j3 in 1..=planes {
            let i3 = 2 * j3 - 1;
            for j2 in 1..=n {
                let i2 = 2 * j2 - 1;
                for j1 in 1..=n + 1 {
                    let i1 = 2 * j1 - 1;
                    x1[i1] = r[fine.at(i3 + 1, i2, i1)]
                        + r[fine.at(i3 + 1, i2 + 2, i1)]
                        + r[fine.at(i3, i2 + 1, i1)]
                        + r[fine.at(i3 + 2, i2 + 1, i1)];
                    y1[i1] = r[fine.at(i3, i2, i1)]
                        + r[fine.at(i3 + 2, i2, i1)]
                        + r[fine.at(i3, i2 + 2, i1)]
                        + r[fine.at(i3 + 2, i2 + 2, i1)];
                }
                for j1 in 1..=n {
                    let i1 = 2 * j1 - 1;
                    let y2 = r[fine.at(i3, i2, i1 + 1)]
                        + r[fine.at(i3 + 2, i2, i1 + 1)]
                        + r[fine.at(i3, i2 + 2, i1 + 1)]
                        + r[fine.at(i3 + 2, i2 + 2, i1 + 1)];
                    let x2 = r[fine.at(i3 + 1, i2, i1 + 1)]
                        + r[fine.at(i3 + 1, i2 + 2, i1 + 1)]
                        + r[fine.at(i3, i2 + 1, i1 + 1)]
                        + r[fine.at(i3 + 2, i2 + 1, i1 + 1)];
                    projected[coarse.at(j3 - 1, j2, j1)] = 0.5 * r[fine.at(i3 + 1, i2 + 1, i1 + 1)]
                        + 0.25
                            * (r[fine.at(i3 + 1, i2 + 1, i1)]
                                + r[fine.at(i3 + 1, i2 + 1, i1 + 2)]
                                + x2)
                        + 0.125 * (x1[i1] + x1[i1 + 2] + y2)
                        + 0.0625 * (y1[i1] + y1[i1 + 2]);
                }
            }
        }
        let interior = &mut s[coarse.plane()..(coarse.planes + 1) * coarse.plane()];
        if fine.split && !coarse.split {
            self.world.all_gather_into(&projected[..], interior);
        } else {
            interior.copy_from_slice(&projected);
        }
        self.exchange(coarse, s);
    }

    /// Adds the trilinear interpolation of `z` on `coarse` to `u` on `fine` (NPB's `interp`),
    /// ghost layer included: the coarse ghosts are right, so the fine ones come out right.
    fn prolongate(&self, coarse: &Level, z: &[f64], fine: &Level, u: &mut [f64]) {
        let n = coarse.n;
        let side = coarse.side();
        // The coarse plane under fine plane 0: the same index if the coarse level is split
        // like the fine one, else the global one.
        let shift = fine.offset / 2 - coarse.offset;
        let (mut z1, mut z2, mut z3) = (vec![0.0; side], vec![0.0; side], vec![0.0; side]);
        for i3 in 0..=fine.planes / 2 {
            let c3 = i3 + shift;
            for i2 in 0..=n {
                for i1 in 0..side {
                    z1[i1] = z[coarse.at(c3, i2 + 1, i1)] + z[coarse.at(c3, i2, i1)];
                    z2[i1] = z[coarse.at(c3 + 1, i2, i1)] + z[coarse.at(c3, i2, i1)];
                    z3[i1] =
                        z[coarse.at(c3 + 1, i2 + 1, i1)] + z[coarse.at(c3 + 1, i2, i1)] + z1[i1];
                }
                for i1 in 0..=n {
                    let (f3, f2, f1) = (2 * i3, 2 * i2, 2 * i1);
                    let z0 = z[coarse.at(c3, i2, i1)];
                    u[fine.at(f3, f2, f1)] += z0;
                    u[fine.at(f3, f2, f1 + 1)] += 0.5 * (z[coarse.at(c3, i2, i1 + 1)] + z0);
                    u[fine.at(f3, f2 + 1, f1)] += 0.5 * z1[i1];
                    u[fine.at(f3, f2 + 1, f1 + 1)] += 0.25 * (z1[i1] + z1[i1 + 1]);
                    u[fine.at(f3 + 1, f2, f1)] += 0.5 * z2[i1];
                    u[fine.at(f3 + 1, f2, f1 + 1)] += 0.25 * (z2[i1] + z2[i1 + 1]);
                    u[fine.at(f3 + 1, f2 + 1, f1)] += 0.25 * z3[i1];
                    u[fine.at(f3 + 1, f2 + 1, f1 + 1)] += 0.125 * (z3[i1] + z3[i1 + 1]);
                }
            }
        }
    }

    /// One V-cycle (NPB's `mg3P`): `u` and `r` hold every level, the finest last.
    fn v_cycle(&self, u: &mut [Vec<f64>], v: &[f64], r: &mut [Vec<f64>]) {
        let levels = &self.levels;
        let top = levels.len() - 1;
        for k in (1..=top).rev() {
            let (coarser, finer) = r.split_at_mut(k);
            self.restrict(&levels[k], &finer[0], &levels[k - 1], &mut coarser[k - 1]);
        }
        u[0].fill(0.0);
        self.smooth(&levels[0], &r[0], &mut u[0]);
        for k in 1..=top {
            let (coarser, finer) = u.split_at_mut(k);
            let u_k = &mut finer[0];
            if k < top {
                u_k.fill(0.0);
            }
            self.prolongate(&levels[k - 1], &coarser[k - 1], &levels[k], u_k);
            let rhs = (k == top).then_some(v);
            self.residual(&levels[k], u_k, rhs, &mut r[k]);
            self.smooth(&levels[k], &r[k], u_k);
        }
    }

    /// The L2 norm (root mean square) of the finest level's interior (NPB's `norm2u3`).
    fn norm(&self, r: &[f64]) -> f64 {
        let level = self.levels.last().expect("at least one level");
        let n = level.n;
        let mut sum = 0.0;
        for i3 in 1..=level.planes {
            for i2 in 1..=n {
                for i1 in 1..=n {
                    let x = r[level.at(i3, i2, i1)];
                    sum += x * x;
                }
            }
        }
        if level.split {
            let local = sum;
            self.world
                .all_reduce_into(&local, &mut sum, SystemOperation::sum());
        }
        (sum / (n * n * n) as f64).sqrt()
    }

    /// The right-hand side (NPB's `zran3`): zero but for +1 at the ten greatest and -1 at the
    /// ten least values of a random field drawn point by point from NPB's stream.
    fn right_hand_side(&self, v: &mut [f64]) {
        let level = self.levels.last().expect("at least one level");
        let n = level.n;
        // (value, global point index) of this process's points.
        let mut points = Vec::with_capacity(level.planes * n * n);
        for i3 in 1..=level.planes {
            let g3 = level.offset + i3 - 1;
            for i2 in 1..=n {
                let first = (g3 * n + i2 - 1) * n;
                let seed = multiply(314_159_265, power(MULTIPLIER, first as u64));
                let mut stream = Randlc::new(seed, MULTIPLIER);
                for i1 in 0..n {
                    points.push((stream.next_f64(), (first + i1) as u64));
                }
            }
        }
        let mut marks = Vec::with_capacity(2 * EXTREMES);
        for (sign, descending) in [(1.0, true), (-1.0, false)] {
            let order = |a: &(f64, u64), b: &(f64, u64)| {
                if descending {
                    b.0.total_cmp(&a.0)
                } else {
                    a.0.total_cmp(&b.0)
                }
            };
            points.select_nth_unstable_by(EXTREMES - 1, order);
            let mut best: Vec<(f64, u64)> = points[..EXTREMES].to_vec();
            if level.split {
                let values: Vec<f64> = best.iter().map(|p| p.0).collect();
                let indices: Vec<u64> = best.iter().map(|p| p.1).collect();
                let size = self.world.size() as usize;
                let mut all_values = vec![0.0; EXTREMES * size];
                let mut all_indices = vec![0u64; EXTREMES * size];
                self.world.all_gather_into(&values[..], &mut all_values[..]);
                self.world
                    .all_gather_into(&indices[..], &mut all_indices[..]);
                best = all_values.into_iter().zip(all_indices).collect();
                best.sort_by(order);
                best.truncate(EXTREMES);
            }
            marks.extend(best.into_iter().map(|(_, index)| (index as usize, sign)));
        }
        v.fill(0.0);
        for (index, sign) in marks {
            let (g3, g2, g1) = (index / (n * n), index / n % n, index % n);
            if (level.offset..level.offset + level.planes).contains(&g3) {
                v[level.at(g3 - level.offset + 1, g2 + 1, g1 + 1)] = sign;
            }
        }
        self.exchange(level, v);
    }
}

fn main() -> ExitCode {
    let Some(class) = npb::class_or_usage("npb_mg") else {
        return ExitCode::FAILURE;
    };
    let (n, iterations, reference) = match class {
        'S' => (32usize, 4, 0.5307707005734e-04),
        'W' => (128, 4, 0.6467329375339e-05),
        'A' => (256, 4, 0.2433365309069e-05),
        _ => (256, 20, 0.1800564401355e-05),
    };
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size());
    if !npb::power_of_two_or_refuse("npb_mg", &world) {
        return ExitCode::FAILURE;
    }
    let size = size as usize;
    let levels: Vec<Level> = (1..=n.trailing_zeros())
        .map(|log2| {
            let n = 1usize << log2;
            if n / size >= 2 {
                let planes = n / size;
                Level {
                    n,
                    planes,
                    offset: rank * planes,
                    split: true,
                }
            } else {
                Level {
                    n,
                    planes: n,
                    offset: 0,
                    split: false,
                }
            }
        })
        .collect();
    let mg = Multigrid {
        world: &world,
        levels,
        smoother: if matches!(class, 'S' | 'W' | 'A') {
            SMOOTHER_A
        } else {
            SMOOTHER_B
        },
    };
    let finest = *mg.levels.last().expect("at least one level");
    let mut u: Vec<Vec<f64>> = mg.levels.iter().map(|l| vec![0.0; l.len()]).collect();
    let mut r = u.clone();
    let mut v = vec![0.0; finest.len()];
    if rank == 0 {
        println!(" NAS Parallel Benchmarks (mpirt) - MG Benchmark");
        println!(" Size: {n:4}x{n:4}x{n:4}  (class {class})");
        println!(" Iterations: {iterations:3}");
        println!(" Number of processes: {size:5}");
    }

    // One V-cycle for free, as NPB does, so that the timed ones find everything warm; then
    // everything starts again.
    mg.right_hand_side(&mut v);
    let top = mg.levels.len() - 1;
    mg.residual(&finest, &u[top], Some(&v), &mut r[top]);
    mg.v_cycle(&mut u, &v, &mut r);
    u[top].fill(0.0);
    mg.right_hand_side(&mut v);

    world.barrier();
    let start = mpirt::time();
    mg.residual(&finest, &u[top], Some(&v), &mut r[top]);
    for _ in 0..iterations {
        mg.v_cycle(&mut u, &v, &mut r);
        mg.residual(&finest, &u[top], Some(&v), &mut r[top]);
    }
    let norm = mg.norm(&r[top]);
    let seconds = npb::slowest(&world, mpirt::time() - start);
    if rank != 0 {
        return ExitCode::SUCCESS;
    }
    let error = ((norm - reference) / reference).abs();
    println!(" L2 Norm is {norm:20.13e}, reference {reference:20.13e}, error {error:e}");
    let points = (n * n * n) as f64;
    Summary {
        name: "MG",
        class,
        size: format!("{n}x{n}x{n}"),
        iterations,
        seconds,
        processes: size as i32,
        mops: 58.0 * f64::from(iterations) * points / seconds / 1e6,
        operation: "floating point",
        verified: error <= EPSILON,
    }
    .report()
}
