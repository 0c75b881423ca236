//! OSU 7.4's output, to the character: a blank line, the title with the version, the datatype,
//! then a column header and rows of `%-10d%18.2f`. The collective tests add, with `-f`, the
//! minimum and maximum (`%18.2f`) and the iterations (`%12lu`); the barrier has no size column
//! and prints its one value as `%17.2f`. `osu_mbw_mr` prints its own header, without the blank
//! line, naming the pairs and the window, and adds the message rate to each row.

use crate::options::{Benchmark, SyncMode, WindowKind};

const SIZE_WIDTH: usize = 10;
const FIELD_WIDTH: usize = 18;
const FLOAT_PRECISION: usize = 2;
/// The width of a non-blocking barrier's first value (`# Overall(us)` above it).
const BARRIER_FIRST_WIDTH: usize = 13;
const ITERATIONS_WIDTH: usize = 12;
/// The barrier's value column, without a size before it.
const SIZELESS_WIDTH: usize = 17;

pub fn header(b: Benchmark) -> String {
    format!(
        "\n# {} v7.4\n# Datatype: {}.\n{:<SIZE_WIDTH$}{:>FIELD_WIDTH$}\n",
        b.title(),
        b.datatype(),
        "# Size",
        b.column()
    )
}

pub fn row(size: usize, value: f64) -> String {
    format!("{size:<SIZE_WIDTH$}{value:>FIELD_WIDTH$.FLOAT_PRECISION$}\n")
}

/// A one-sided test's header: no blank line first, then the window's creation and
/// synchronisation calls.
pub fn one_sided_header(b: Benchmark, window: WindowKind, sync: SyncMode, doubles: bool) -> String {
    format!(
        "# {} v7.4\n# Window creation: {}\n# Synchronization: {}\n# Datatype: {}.\n\
         {:<SIZE_WIDTH$}{:>FIELD_WIDTH$}\n",
        b.title(),
        window.call(),
        sync.calls(),
        if doubles { "MPI_DOUBLE" } else { "MPI_CHAR" },
        "# Size",
        b.column()
    )
}

/// `osu_mbw_mr`'s header for `pairs` pairs sending windows of `window` messages.
pub fn multi_bandwidth_header(pairs: usize, window: usize) -> String {
    rate_header(
        Benchmark::MultiBandwidth,
        &format!("pairs: {pairs}"),
        window,
    )
}

/// A message rate test's header, its pairs said by `pairs`.
fn rate_header(b: Benchmark, pairs: &str, window: usize) -> String {
    format!(
        "# {} v7.4\n# [ {pairs} ] [ window size: {window} ]\n# Datatype: MPI_CHAR.\n\
         {:<SIZE_WIDTH$}{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}\n",
        b.title(),
        "# Size",
        b.column(),
        "Messages/s"
    )
}

/// `osu_latency_mt`'s header: its threads, then `osu_latency`'s.
pub fn latency_mt_header(senders: usize, receivers: usize) -> String {
    format!(
        "# Number of Sender threads: {senders} \n# Number of Receiver threads: {receivers}\n{}",
        header(Benchmark::LatencyMt)
    )
}

/// The multi-threaded message rate's header: `osu_mbw_mr`'s, with thread pairs for pairs.
pub fn message_rate_mt_header(threads: usize, window: usize) -> String {
    rate_header(
        Benchmark::MessageRateMt,
        &format!("threads: {threads}"),
        window,
    )
}

/// `osu_mbw_mr`'s row: the bandwidth of all pairs together, then messages per second.
pub fn rate_row(size: usize, mb_per_s: f64, messages_per_s: f64) -> String {
    format!(
        "{}{messages_per_s:>FIELD_WIDTH$.FLOAT_PRECISION$}\n",
        row(size, mb_per_s).trim_end()
    )
}

/// A collective test's header; `full` for `-f`.
pub fn collective_header(b: Benchmark, full: bool) -> String {
    let mut h = format!("\n# {} v7.4\n", b.title());
    if b.has_sizes() {
        h += &format!(
            "# Datatype: MPI_CHAR.\n{:<SIZE_WIDTH$}{:>FIELD_WIDTH$}",
            "# Size",
            b.column()
        );
    } else {
        h += &format!("# {}", b.column());
    }
    if full {
        h += &format!(
            "{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}{:>ITERATIONS_WIDTH$}",
            "Min Latency(us)", "Max Latency(us)", "Iterations"
        );
    }
    h + "\n"
}

/// A non-blocking collective's header: OSU's line on what the overall time holds, the
/// datatype, then its overlap columns (with `full` the start, the tests, the wait and the
/// fastest and slowest rank's call alone apart too). The barrier has neither a datatype nor a
/// size column; OSU 7.4 writes its first column's name unpadded after a `#`.
pub fn non_blocking_header(b: Benchmark, full: bool) -> String {
    let mut h = format!(
        "\n# {} v7.4\n# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n\n",
        b.title()
    );
    if b.has_sizes() {
        h += &format!(
            "# Datatype: MPI_CHAR.\n{:<SIZE_WIDTH$}{:>FIELD_WIDTH$}",
            "# Size", "Overall(us)"
        );
    } else {
        h += "# Overall(us)";
    }
    let columns: &[&str] = if full {
        &[
            "Compute(us)",
            "Coll. Init(us)",
            "MPI_Test(us)",
            "MPI_Wait(us)",
            "Pure Comm.(us)",
            "Min Comm.(us)",
            "Max Comm.(us)",
            "Overlap(%)",
        ]
    } else {
        &["Compute(us)", "Pure Comm.(us)", "Overlap(%)"]
    };
    for column in columns {
        h += &format!("{column:>FIELD_WIDTH$}");
    }
    h + "\n"
}

/// What a non-blocking collective's row reports, averaged over the ranks, in microseconds:
/// the call with the computation between its start and its wait (`overall`), the computation
/// (`compute`), the call alone (`pure`; the fastest and the slowest rank's, not averaged,
/// `pure_min` and `pure_max`), and, apart, its start (`init`) and its wait (`wait`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Overlapped {
    pub overall: f64,
    pub compute: f64,
    pub init: f64,
    pub wait: f64,
    pub pure: f64,
    pub pure_min: f64,
    pub pure_max: f64,
}

impl Overlapped {
    /// OSU's overlap: the share of the call's own time that the computation hid, in percent,
    /// never below 0.
    pub fn overlap(&self) -> f64 {
        (100.0 - (self.overall - self.compute) / self.pure * 100.0).max(0.0)
    }
}

/// A non-blocking collective's row (no size for the barrier, whose first value OSU 7.4 writes
/// 13 wide, under its header's `# Overall(us)`). The programs probe nothing during the
/// computation (OSU's default), so the tests' column is 0.
pub fn non_blocking_row(size: Option<usize>, o: Overlapped, full: bool) -> String {
    let mut r = match size {
        Some(size) => format!(
            "{size:<SIZE_WIDTH$}{:>FIELD_WIDTH$.FLOAT_PRECISION$}",
            o.overall
        ),
        None => format!("{:>BARRIER_FIRST_WIDTH$.FLOAT_PRECISION$}", o.overall),
    };
    let values = if full {
        vec![
            o.compute,
            o.init,
            0.0,
            o.wait,
            o.pure,
            o.pure_min,
            o.pure_max,
            o.overlap(),
        ]
    } else {
        vec![o.compute, o.pure, o.overlap()]
    };
    for value in values {
        r += &format!("{value:>FIELD_WIDTH$.FLOAT_PRECISION$}");
    }
    r + "\n"
}

/// Latencies over the ranks of one collective measurement, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latencies {
    pub avg: f64,
    pub min: f64,
    pub max: f64,
    pub iterations: usize,
}

/// A collective test's row: the size (none for the barrier), the average, and with `full` the
/// minimum, maximum and iterations.
pub fn collective_row(size: Option<usize>, l: Latencies, full: bool) -> String {
    let mut r = match size {
        Some(size) => row(size, l.avg).trim_end().to_string(),
        None => format!("{:>SIZELESS_WIDTH$.FLOAT_PRECISION$}", l.avg),
    };
    if full {
        r += &format!(
            "{:>FIELD_WIDTH$.FLOAT_PRECISION$}{:>FIELD_WIDTH$.FLOAT_PRECISION$}{:>ITERATIONS_WIDTH$}",
            l.min, l.max, l.iterations
        );
    }
    r + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_match_osu() {
        assert_eq!(
            header(Benchmark::Latency),
            "\n# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n"
        );
        assert_eq!(
            header(Benchmark::Bandwidth),
            "\n# OSU MPI Bandwidth Test v7.4\n# Datatype: MPI_CHAR.\n# Size      Bandwidth (MB/s)\n"
        );
        assert_eq!(
            header(Benchmark::BiBandwidth),
            "\n# OSU MPI Bi-Directional Bandwidth Test v7.4\n# Datatype: MPI_CHAR.\n# Size      Bandwidth (MB/s)\n"
        );
    }

    #[test]
    fn multi_pair_headers_and_rows_match_osu() {
        assert_eq!(
            header(Benchmark::MultiLatency),
            "\n# OSU MPI Multi Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n"
        );
        assert_eq!(
            multi_bandwidth_header(2, 64),
            "# OSU MPI Multiple Bandwidth / Message Rate Test v7.4\n\
             # [ pairs: 2 ] [ window size: 64 ]\n# Datatype: MPI_CHAR.\n\
             # Size                  MB/s        Messages/s\n"
        );
        assert_eq!(
            rate_row(8, 12.345, 1543125.0),
            "8                      12.35        1543125.00\n"
        );
    }

    #[test]
    fn collective_headers_and_rows_match_osu() {
        assert_eq!(
            collective_header(Benchmark::Allreduce, false),
            "\n# OSU MPI Allreduce Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n"
        );
        assert_eq!(
            collective_header(Benchmark::Broadcast, true),
            "\n# OSU MPI Broadcast Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations\n"
        );
        assert_eq!(
            collective_header(Benchmark::Barrier, true),
            "\n# OSU MPI Barrier Latency Test v7.4\n# Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations\n"
        );
        let l = Latencies {
            avg: 1.234,
            min: 0.5,
            max: 2.0,
            iterations: 1000,
        };
        assert_eq!(
            collective_row(Some(4), l, true),
            "4                       1.23              0.50              2.00        1000\n"
        );
        assert_eq!(collective_row(None, l, false), "             1.23\n");
    }

    #[test]
    fn non_blocking_headers_and_rows_match_osu() {
        assert_eq!(
            non_blocking_header(Benchmark::IBroadcast, false),
            "\n# OSU MPI Non-blocking Broadcast Latency Test v7.4\n\
             # Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n\n\
             # Datatype: MPI_CHAR.\n\
             # Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)\n"
        );
        // OSU 7.4's print_only_header_nbc without a size: "# Overall(us)", then -f's columns.
        assert_eq!(
            non_blocking_header(Benchmark::IBarrier, true),
            "\n# OSU MPI Non-blocking Barrier Latency Test v7.4\n\
             # Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n\n\
             # Overall(us)       Compute(us)    Coll. Init(us)      MPI_Test(us)      \
             MPI_Wait(us)    Pure Comm.(us)     Min Comm.(us)     Max Comm.(us)        \
             Overlap(%)\n"
        );
        let o = Overlapped {
            overall: 3.0,
            compute: 2.0,
            init: 0.25,
            wait: 0.75,
            pure: 2.0,
            pure_min: 1.5,
            pure_max: 2.5,
        };
        // 1 us of the call's 2 us was not hidden: half of it overlapped.
        assert_eq!(o.overlap(), 50.0);
        assert_eq!(
            non_blocking_row(Some(8), o, false),
            "8                       3.00              2.00              2.00             50.00\n"
        );
        // OSU 7.4's print_stats_nbc without a size: the overall time 13 wide.
        assert_eq!(
            non_blocking_row(None, o, true),
            "         3.00              2.00              0.25              0.00              \
             0.75              2.00              1.50              2.50             50.00\n"
        );
        let slower = Overlapped { overall: 9.0, ..o };
        assert_eq!(
            slower.overlap(),
            0.0,
            "a call slower beside the computation overlaps nothing"
        );
    }

    #[test]
    fn rows_are_left_size_right_value() {
        assert_eq!(row(0, 0.2149), "0                       0.21\n");
        assert_eq!(row(4194304, 12345.678), "4194304             12345.68\n");
    }
}
