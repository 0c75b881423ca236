//! NPB CG, the conjugate gradient kernel: inverse power iterations estimate the smallest
//! eigenvalue of a large sparse symmetric positive definite matrix with a random pattern, each
//! solving a linear system by 25 unpreconditioned conjugate gradient steps. The estimate `zeta`
//! is checked against NPB's published value.
//!
//! The processes form NPB's 2-D grid (as many columns as rows, or twice as many), each holding
//! the block of the matrix at its row and column and the vectors' entries of its column block.
//! A product sums the blocks' partial products along each process row, then moves each process
//! row's result to the processes whose column block it is (a transpose).
//!
//!   npb_cg CLASS     (S, W, A or B; a power-of-two number of processes)

use std::process::ExitCode;

use examples::npb::{self, Randlc, Summary, MULTIPLIER};
use mpirt::collective::SystemOperation;
use mpirt::point_to_point::send_receive_into;
use mpirt::topology::{Color, SimpleCommunicator};
use mpirt::traits::*;

/// The condition number NPB's matrix is built with.
const RCOND: f64 = 0.1;
const CG_STEPS: usize = 25;
/// NPB's tolerance on the relative error of zeta.
const EPSILON: f64 = 1e-10;

struct Class {
    name: char,
    /// Order of the matrix.
    n: usize,
    /// Nonzeros of each random sparse vector whose outer products make up the matrix.
    nonzeros: usize,
    iterations: u32,
    /// Shift of the diagonal, which makes the eigenvalue sought the smallest.
    shift: f64,
    zeta: f64,
}

impl Class {
    fn new(name: char) -> Class {
        let (n, nonzeros, iterations, shift, zeta) = match name {
            'S' => (1400, 7, 15, 10.0, 8.5971775078648),
            'W' => (7000, 8, 15, 12.0, 10.362595087124),
            'A' => (14000, 11, 15, 20.0, 17.130235054029),
            _ => (75000, 13, 75, 60.0, 22.712745482631),
        };
        Class {
            name,
            n,
            nonzeros,
            iterations,
            shift,
            zeta,
        }
    }
}

/// The whole matrix as NPB's `makea` builds it, one row of (column, value) per row, columns
/// ascending: a sum of n scaled outer products of random sparse vectors, plus a shifted
/// diagonal. Every process builds all of it (generation is untimed in NPB) and keeps its block.
fn make_matrix(class: &Class) -> Vec<Vec<(usize, f64)>> {
    let n = class.n;
    let mut stream = Randlc::new(314_159_265, MULTIPLIER);
    // NPB draws one number (its initial zeta) before the matrix.
    stream.next_f64();
    let positions = n.next_power_of_two() as f64;
    let ratio = RCOND.powf(1.0 / n as f64);
    let mut scale = 1.0;
    let mut triples: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    for outer in 0..n {
        let mut vector: Vec<(usize, f64)> = Vec::with_capacity(class.nonzeros + 1);
        while vector.len() < class.nonzeros {
            let value = stream.next_f64();
            let column = (positions * stream.next_f64()) as usize;
            if column < n && vector.iter().all(|&(c, _)| c != column) {
                vector.push((column, value));
            }
        }
        match vector.iter_mut().find(|(c, _)| *c == outer) {
            Some(entry) => entry.1 = 0.5,
            None => vector.push((outer, 0.5)),
        }
        for &(row, row_value) in &vector {
            let row_scale = scale * row_value;
            for &(column, column_value) in &vector {
                let mut value = column_value * row_scale;
                if column == row && row == outer {
                    value = value + RCOND - class.shift;
                }
                triples[row].push((column, value));
            }
        }
        scale *= ratio;
    }
    // Duplicates add up in the order they were generated, as in NPB: the sort is stable.
    triples
        .into_iter()
        .map(|mut row| {
            row.sort_by_key(|&(column, _)| column);
            let mut merged: Vec<(usize, f64)> = Vec::with_capacity(row.len());
            for (column, value) in row {
                match merged.last_mut() {
                    Some(last) if last.0 == column => last.1 += value,
                    _ => merged.push((column, value)),
                }
            }
            merged
        })
        .collect()
}

/// Start of block `b` of `blocks` of 0..n. Row block r is exactly column blocks 2r and 2r+1
/// when there are twice as many columns, since n*r/rows == n*2r/(2 rows).
fn block_start(n: usize, blocks: usize, b: usize) -> usize {
    n * b / blocks
}

/// This process's place in the grid and its block of the matrix, in compressed rows with
/// columns relative to its column block.
struct Grid {
    n: usize,
    rows: usize,
    columns: usize,
    row: usize,
    column: usize,
    /// The processes of this process row, ranked by column: the partial products add up here.
    row_comm: SimpleCommunicator,
    row_start: Vec<usize>,
    column_index: Vec<usize>,
    values: Vec<f64>,
    /// Length of this process's column block, the length of its vectors.
    local: usize,
}

impl Grid {
    fn new(world: &SimpleCommunicator, class: &Class) -> Grid {
        let size = world.size() as usize;
        let log2 = size.trailing_zeros();
        let columns = 1 << log2.div_ceil(2);
        let rows = size / columns;
        let me = world.rank() as usize;
        let (row, column) = (me / columns, me % columns);
        let row_comm = world
            .split_by_color(Color::with_value(row as i32))
            .expect("every process has a row");
        let n = class.n;
        let (first_row, end_row) = (block_start(n, rows, row), block_start(n, rows, row + 1));
        let (first_column, end_column) = (
            block_start(n, columns, column),
            block_start(n, columns, column + 1),
        );
        let matrix = make_matrix(class);
        let mut row_start = vec![0];
        let (mut column_index, mut values) = (Vec::new(), Vec::new());
        for entries in &matrix[first_row..end_row] {
            for &(c, value) in entries {
                if (first_column..end_column).contains(&c) {
                    column_index.push(c - first_column);
                    values.push(value);
                }
            }
            row_start.push(values.len());
        }
        Grid {
            n,
            rows,
            columns,
            row,
            column,
            row_comm,
            row_start,
            column_index,
            values,
            local: end_column - first_column,
        }
    }

    fn world_rank(&self, row: usize, column: usize) -> i32 {
        (row * self.columns + column) as i32
    }

    /// The dot product of two vectors given by their column blocks: the processes of a row
    /// together hold every block.
    fn dot(&self, a: &[f64], b: &[f64]) -> f64 {
        let partial: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let mut total = 0.0;
        self.row_comm
            .all_reduce_into(&partial, &mut total, SystemOperation::sum());
        total
    }

    /// `product = A v`, both given by this process's column block.
    fn multiply(&self, world: &SimpleCommunicator, v: &[f64], product: &mut [f64]) {
        let partial: Vec<f64> = self
            .row_start
            .windows(2)
            .map(|range| {
                (range[0]..range[1])
                    .map(|k| self.values[k] * v[self.column_index[k]])
                    .sum()
            })
            .collect();
        let mut row_block = vec![0.0; partial.len()];
        self.row_comm
            .all_reduce_into(&partial[..], &mut row_block[..], SystemOperation::sum());
        // The transpose: this row block (or, with twice as many columns, its half numbered
        // like this process's column parity) is the column block of the partner, which sends
        // back the half this process's column block is (the pairing is its own inverse).
        let (outgoing, partner) = if self.rows == self.columns {
            (&row_block[..], self.world_rank(self.column, self.row))
        } else {
            let half = self.column % 2;
            let split = block_start(self.n, self.columns, 2 * self.row + 1)
                - block_start(self.n, self.columns, 2 * self.row);
            let outgoing = if half == 0 {
                &row_block[..split]
            } else {
                &row_block[split..]
            };
            (
                outgoing,
                self.world_rank(self.column / 2, 2 * self.row + half),
            )
        };
        if partner == world.rank() {
            product.copy_from_slice(outgoing);
        } else {
            let partner = world.process_at_rank(partner);
            send_receive_into(outgoing, &partner, product, &partner);
        }
    }
}

/// NPB's `conj_grad`: 25 conjugate gradient steps on `A z = x` from z = 0. Returns z and the
/// norm of the residual `x - A z`.
fn conjugate_gradient(world: &SimpleCommunicator, grid: &Grid, x: &[f64]) -> (Vec<f64>, f64) {
    let mut z = vec![0.0; grid.local];
    let mut q = vec![0.0; grid.local];
    let mut r = x.to_vec();
    let mut p = r.clone();
    let mut rho = grid.dot(&r, &r);
    for _ in 0..CG_STEPS {
        grid.multiply(world, &p, &mut q);
        let alpha = rho / grid.dot(&p, &q);
        for ((zj, rj), (pj, qj)) in z.iter_mut().zip(r.iter_mut()).zip(p.iter().zip(&q)) {
            *zj += alpha * pj;
            *rj -= alpha * qj;
        }
        let previous = rho;
        rho = grid.dot(&r, &r);
        let beta = rho / previous;
        for (pj, rj) in p.iter_mut().zip(&r) {
            *pj = rj + beta * *pj;
        }
    }
    grid.multiply(world, &z, &mut r);
    let residual: Vec<f64> = x.iter().zip(&r).map(|(xj, rj)| xj - rj).collect();
    let norm = grid.dot(&residual, &residual).sqrt();
    (z, norm)
}

/// One inverse power iteration: solves `A z = x`, and returns zeta (the eigenvalue estimate)
/// and the residual norm, leaving `x` the normalized `z`.
fn inverse_power_step(
    world: &SimpleCommunicator,
    grid: &Grid,
    class: &Class,
    x: &mut [f64],
) -> (f64, f64) {
    let (z, residual) = conjugate_gradient(world, grid, x);
    let xz = grid.dot(x, &z);
    let inverse_norm = 1.0 / grid.dot(&z, &z).sqrt();
    for (xj, zj) in x.iter_mut().zip(&z) {
        *xj = inverse_norm * zj;
    }
    (class.shift + 1.0 / xz, residual)
}

fn main() -> ExitCode {
    let Some(name) = npb::class_or_usage("npb_cg") else {
        return ExitCode::FAILURE;
    };
    let class = Class::new(name);
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    if !npb::power_of_two_or_refuse("npb_cg", &world) {
        return ExitCode::FAILURE;
    }
    let grid = Grid::new(&world, &class);
    if rank == 0 {
        println!(" NAS Parallel Benchmarks (mpirt) - CG Benchmark");
        println!(" Size: {:11}", class.n);
        println!(" Iterations: {:5}", class.iterations);
        println!(
            " Number of processes: {size:5} ({} x {} grid)",
            grid.rows, grid.columns
        );
    }

    // One iteration for free, as NPB does, so that the timed ones find everything warm; then
    // x starts again from ones.
    let mut x = vec![1.0; grid.local];
    inverse_power_step(&world, &grid, &class, &mut x);
    x.fill(1.0);
    world.barrier();
    let start = mpirt::time();
    let mut zeta = 0.0;
    for iteration in 1..=class.iterations {
        let residual;
        (zeta, residual) = inverse_power_step(&world, &grid, &class, &mut x);
        if rank == 0 {
            println!("    {iteration:5}       {residual:20.14e}{zeta:20.13e}");
        }
    }
    let seconds = npb::slowest(&world, mpirt::time() - start);
    if rank != 0 {
        return ExitCode::SUCCESS;
    }
    let error = ((zeta - class.zeta) / class.zeta).abs();
    println!(
        " zeta {zeta:20.13e}, reference {:20.13e}, error {error:e}",
        class.zeta
    );
    let per_row = (class.nonzeros * (class.nonzeros + 1)) as f64;
    let operations = 2.0
        * f64::from(class.iterations)
        * class.n as f64
        * (3.0 + per_row + 25.0 * (5.0 + per_row) + 3.0);
    Summary {
        name: "CG",
        class: class.name,
        size: class.n.to_string(),
        iterations: class.iterations,
        seconds,
        processes: size,
        mops: operations / seconds / 1e6,
        operation: "floating point",
        verified: error <= EPSILON,
    }
    .report()
}
