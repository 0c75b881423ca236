//! halo_column: the exchange of a 2-D halo code, a strided column sent with a vector datatype.
//! Two ranks each hold a matrix of `size / 8` rows by `COLUMNS` f64s, row-major, and a halo
//! matrix of the same shape; in each iteration each sends its matrix's column 1 to the other
//! and receives the other's into column 0 of its halo matrix, in one send-receive, through
//! views of `vector(rows, 1, COLUMNS, f64)`. Sizes are whole rows (`-m` refuses others). The
//! figure is the column's bytes over the time of one exchange (each way at once). The same
//! source builds on rsmpi (feature `rsmpi`); `compare/halo_column.c` is its C equivalent.
//! `-b N` (not in the C twin) makes each column `N` f64s wide: rows of `COLUMNS` blocks of
//! `N`, `size / (8 N)` of them, sent as `vector(rows, N, COLUMNS N, f64)`: blocks of 8 N bytes,
//! for transports whose cost depends on the block (verbs reads a send's blocks in place from
//! `MPIRT_VERBS_SEND_MIN_BLOCK`, 16 KiB by default).

use osu_benches::mpi::datatype::{MutView, UserDatatype, View};
use osu_benches::mpi::point_to_point::send_receive_into;
use osu_benches::mpi::traits::*;
use osu_benches::{measure, start, Benchmark};

/// Columns of the matrix: the halo (0), the column sent (1) and two of the interior.
const COLUMNS: usize = 4;

fn main() {
    let (universe, options) = start(Benchmark::HaloColumn);
    let world = universe.world();
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let width = options.block;
    let row = COLUMNS * width;
    let max_rows = options.max_size / (8 * width);
    let matrix: Vec<f64> = (0..max_rows * row)
        .map(|i| (i + rank as usize * 7) as f64)
        .collect();
    let mut halo = vec![0.0f64; max_rows * row];
    // Built once per size, as a halo code builds it once: not part of what is timed.
    let mut column: Option<(usize, UserDatatype)> = None;
    measure(
        &world,
        &options,
        |size| {
            let rows = size / (8 * width);
            if column.as_ref().is_none_or(|(built, _)| *built != size) {
                let vector = UserDatatype::vector(
                    rows as i32,
                    width as i32,
                    row as i32,
                    &f64::equivalent_datatype(),
                );
                column = Some((size, vector));
            }
            let column = &column.as_ref().expect("built above").1;
            let span = (rows - 1) * row + width;
            // SAFETY: `rows` blocks of `width` elements `row` apart from element `width` (or
            // 0) lie within the matrix of `rows * row` elements.
            let (send, mut receive) = unsafe {
                (
                    View::with_count_and_datatype(&matrix[width..width + span], 1, column),
                    MutView::with_count_and_datatype(&mut halo[..span], 1, column),
                )
            };
            send_receive_into(&send, &peer, &mut receive, &peer);
        },
        |size, iterations, seconds| size as f64 / 1e6 * iterations as f64 / seconds,
    );
    // The last exchange, at the last size measured, brought the peer's column 1.
    let rows = options.sizes().last().unwrap_or(0) / (8 * width);
    for r in 0..rows {
        for i in 0..width {
            let sent = (r * row + width + i + (1 - rank) as usize * 7) as f64;
            assert_eq!(
                halo[r * row + i],
                sent,
                "row {r} of the halo on rank {rank}"
            );
        }
    }
}
