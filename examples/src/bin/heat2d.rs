//! Heat diffusion on a square plate: Jacobi steps of the 5-point stencil on a 2-D Cartesian
//! decomposition, with halo exchange by non-blocking sends and receives. The top edge is held
//! hot and the others cold. Rank 0 gathers the result, runs the same computation serially and
//! fails the job unless every value agrees to the last bit.
//!
//!   heat2d [COLUMNS ROWS STEPS]     (defaults: 120 90 100; any number of processes)

use std::process::ExitCode;

use mpirt::request;
use mpirt::traits::*;
use mpirt::Rank;

/// Diffusion number of the explicit step; below 1/4, so the iteration is stable.
const ALPHA: f64 = 0.2;
const HOT: f64 = 1.0;

/// Tags say which way a halo travels, so the two messages between a pair never mix.
const NORTHWARD: i32 = 1;
const SOUTHWARD: i32 = 2;
const WESTWARD: i32 = 3;
const EASTWARD: i32 = 4;

/// A block of the plate with a frame of one cell: the frame holds the neighbours' edges (the
/// halo) or, on the plate's edge, the fixed boundary temperature.
#[derive(Clone)]
struct Field {
    rows: usize,
    columns: usize,
    cells: Vec<f64>,
}

impl Field {
    /// The block of interior rows `rows` and columns `columns` (0-based, of a plate of
    /// `plate` rows and columns) at its initial temperature, framed by the boundary where it
    /// touches the plate's edge.
    fn initial(rows: (usize, usize), columns: (usize, usize), plate: (usize, usize)) -> Field {
        let (height, width) = (rows.1 - rows.0, columns.1 - columns.0);
        let mut field = Field {
            rows: height,
            columns: width,
            cells: vec![0.0; (height + 2) * (width + 2)],
        };
        for i in 0..height + 2 {
            for j in 0..width + 2 {
                // Global coordinates of the frame-inclusive cell; row 0 is the hot edge.
                let (gi, gj) = (rows.0 + i, columns.0 + j);
                let value = if gi == 0 {
                    HOT
                } else if gi == plate.0 + 1 || gj == 0 || gj == plate.1 + 1 {
                    0.0
                } else {
                    // A ragged start, so that the result depends on every cell's history.
                    ((gi * 31 + gj * 17) % 23) as f64 / 23.0
                };
                field.cells[i * (width + 2) + j] = value;
            }
        }
        field
    }

    fn stride(&self) -> usize {
        self.columns + 2
    }

    /// One Jacobi step of the interior into `next`, whose frame is left as it is. The serial
    /// run and the ranks evaluate every cell with this same expression, hence the same bits.
    fn step(&self, next: &mut Field) {
        let s = self.stride();
        let u = &self.cells;
        for i in 1..=self.rows {
            for j in 1..=self.columns {
                let c = i * s + j;
                let neighbours = (u[c - s] + u[c + s]) + (u[c - 1] + u[c + 1]);
                next.cells[c] = u[c] + ALPHA * (neighbours - 4.0 * u[c]);
            }
        }
    }

    fn row(&self, i: usize) -> Vec<f64> {
        self.cells[i * self.stride() + 1..][..self.columns].to_vec()
    }

    fn column(&self, j: usize) -> Vec<f64> {
        (1..=self.rows)
            .map(|i| self.cells[i * self.stride() + j])
            .collect()
    }

    fn set_row(&mut self, i: usize, values: &[f64]) {
        let s = self.stride();
        self.cells[i * s + 1..][..self.columns].copy_from_slice(values);
    }

    fn set_column(&mut self, j: usize, values: &[f64]) {
        let s = self.stride();
        for (i, &value) in values.iter().enumerate() {
            self.cells[(i + 1) * s + j] = value;
        }
    }

    /// The interior, row after row.
    fn interior(&self) -> Vec<f64> {
        (1..=self.rows).flat_map(|i| self.row(i)).collect()
    }
}

/// The process grid for `size` processes: as square as the factors allow (rows <= columns).
fn grid_shape(size: usize) -> (usize, usize) {
    let rows = (1..=size)
        .take_while(|r| r * r <= size)
        .filter(|&r| size.is_multiple_of(r))
        .last()
        .unwrap_or(1);
    (rows, size / rows)
}

/// Start of block `b` of `blocks` of `n` cells.
fn block_start(n: usize, blocks: usize, b: usize) -> usize {
    n * b / blocks
}

/// Where a process's block lies: its interior rows and columns, 0-based.
fn block_of(
    rank: usize,
    shape: (usize, usize),
    size: (usize, usize),
) -> ((usize, usize), (usize, usize)) {
    let (row, column) = (rank / shape.1, rank % shape.1);
    (
        (
            block_start(size.0, shape.0, row),
            block_start(size.0, shape.0, row + 1),
        ),
        (
            block_start(size.1, shape.1, column),
            block_start(size.1, shape.1, column + 1),
        ),
    )
}

fn main() -> ExitCode {
    // A word that is not a number leaves no numbers, which the usage check refuses.
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()
        .unwrap_or_default();
    let (columns, rows, steps) = match (std::env::args().len(), args.as_slice()) {
        (1, _) => (120, 90, 100),
        (4, &[c, r, s]) if c > 0 && r > 0 => (c, r, s),
        _ => {
            eprintln!("usage: heat2d [COLUMNS ROWS STEPS]");
            return ExitCode::FAILURE;
        }
    };
    let universe = mpirt::initialize().expect("mpirt is initialized once");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let shape = grid_shape(size);
    if shape.0 > rows || shape.1 > columns {
        if rank == 0 {
            eprintln!(
                "heat2d: a {columns} x {rows} plate is too small for a {} x {} process grid",
                shape.1, shape.0
            );
        }
        return ExitCode::FAILURE;
    }
    let (row, column) = (rank / shape.1, rank % shape.1);
    let neighbour = |r: usize, c: usize| world.process_at_rank((r * shape.1 + c) as Rank);
    let north = (row > 0).then(|| neighbour(row - 1, column));
    let south = (row + 1 < shape.0).then(|| neighbour(row + 1, column));
    let west = (column > 0).then(|| neighbour(row, column - 1));
    let east = (column + 1 < shape.1).then(|| neighbour(row, column + 1));

    let (my_rows, my_columns) = block_of(rank, shape, (rows, columns));
    let mut field = Field::initial(my_rows, my_columns, (rows, columns));
    let mut next = field.clone();
    let (height, width) = (field.rows, field.columns);
    for _ in 0..steps {
        // Each edge goes to the neighbour beyond it; each halo comes from the neighbour there.
        let outgoing = [
            (north, field.row(1), NORTHWARD),
            (south, field.row(height), SOUTHWARD),
            (west, field.column(1), WESTWARD),
            (east, field.column(width), EASTWARD),
        ];
        let mut from_north = vec![0.0; width];
        let mut from_south = vec![0.0; width];
        let mut from_west = vec![0.0; height];
        let mut from_east = vec![0.0; height];
        request::scope(|scope| {
            let mut requests = Vec::with_capacity(8);
            let incoming = [
                (north, &mut from_north, SOUTHWARD),
                (south, &mut from_south, NORTHWARD),
                (west, &mut from_west, EASTWARD),
                (east, &mut from_east, WESTWARD),
            ];
            for (process, buffer, tag) in incoming {
                if let Some(process) = process {
                    requests.push(process.immediate_receive_into_with_tag(
                        scope,
                        &mut buffer[..],
                        tag,
                    ));
                }
            }
            for (process, edge, tag) in &outgoing {
                if let Some(process) = process {
                    requests.push(process.immediate_send_with_tag(scope, &edge[..], *tag));
                }
            }
            request::wait_all(&mut requests);
        });
        if north.is_some() {
            field.set_row(0, &from_north);
        }
        if south.is_some() {
            field.set_row(height + 1, &from_south);
        }
        if west.is_some() {
            field.set_column(0, &from_west);
        }
        if east.is_some() {
            field.set_column(width + 1, &from_east);
        }
        field.step(&mut next);
        std::mem::swap(&mut field, &mut next);
    }

    let root = world.process_at_rank(0);
    if rank != 0 {
        root.send(&field.interior()[..]);
        return ExitCode::SUCCESS;
    }
    // Assemble the plate from the blocks, then run the serial computation beside it.
    let mut gathered = Field::initial((0, rows), (0, columns), (rows, columns));
    for from in 0..size {
        let (block_rows, block_columns) = block_of(from, shape, (rows, columns));
        let interior = if from == 0 {
            field.interior()
        } else {
            world.process_at_rank(from as Rank).receive_vec::<f64>().0
        };
        let block_width = block_columns.1 - block_columns.0;
        for (i, values) in interior.chunks(block_width).enumerate() {
            let at = (block_rows.0 + i + 1) * gathered.stride() + block_columns.0 + 1;
            gathered.cells[at..at + block_width].copy_from_slice(values);
        }
    }
    let mut serial = Field::initial((0, rows), (0, columns), (rows, columns));
    let mut scratch = serial.clone();
    for _ in 0..steps {
        serial.step(&mut scratch);
        std::mem::swap(&mut serial, &mut scratch);
    }
    let (parallel, reference) = (gathered.interior(), serial.interior());
    let checksum: f64 = parallel.iter().sum();
    let differing: Vec<usize> = (0..parallel.len())
        .filter(|&k| parallel[k].to_bits() != reference[k].to_bits())
        .collect();
    println!(
        "heat2d: {columns} x {rows} plate, {steps} steps on {size} processes ({} x {} grid): \
         checksum {checksum:.15e} ({:#018x})",
        shape.1,
        shape.0,
        checksum.to_bits()
    );
    match differing.first() {
        None => {
            println!("heat2d: matches the serial run bit for bit");
            ExitCode::SUCCESS
        }
        Some(&k) => {
            eprintln!(
                "heat2d: {} of {} cells differ from the serial run, the first at row {}, \
                 column {}: {:e} against {:e}",
                differing.len(),
                parallel.len(),
                k / columns,
                k % columns,
                parallel[k],
                reference[k]
            );
            ExitCode::FAILURE
        }
    }
}
