//! The OSU ports run under rsrun as a user runs them, and print OSU's format line by line.
//! `cargo build --workspace` must come first: the binaries are found beside this test's
//! directory. Built with the feature `rsmpi`, the same tests run the rsmpi build under its C
//! MPI's launcher, which proves it prints the same format.

// The rsmpi build launches with mpirun, not rsrun.
#[cfg_attr(feature = "rsmpi", allow(dead_code))]
#[path = "../../examples/tests/support/mod.rs"]
mod support;
#[cfg(not(feature = "rsmpi"))]
use support::rsrun as launch;

/// Runs `program` on `n` ranks under `$OSU_MPIRUN` (a command line, such as
/// `mpiexec.mpich`), or else `mpirun`: Debian points it at the same MPI as `mpicc`, which
/// rsmpi's build links unless told otherwise.
#[cfg(feature = "rsmpi")]
fn launch(n: u32, program: &str, args: &[&str]) -> std::process::Output {
    let launcher = std::env::var("OSU_MPIRUN").unwrap_or_else(|_| "mpirun".to_string());
    let mut words = launcher.split_whitespace();
    let mut command = std::process::Command::new(words.next().expect("OSU_MPIRUN is empty"));
    command
        .args(words)
        .args(["-n", &n.to_string()])
        .arg(support::bin(program))
        .args(args)
        // Open MPI's (MPICH ignores them): run as root, and more ranks than cores.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    support::output_within_a_minute(command)
}

/// Runs `program` on `n` ranks, which must succeed; its standard output.
fn successful_output(n: u32, program: &str, args: &[&str]) -> String {
    let out = launch(n, program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `program` on `n` ranks, which must succeed and print OSU's blank line and `title`.
fn titled_output(n: u32, program: &str, args: &[&str], title: &str) -> String {
    let text = successful_output(n, program, args);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(""));
    assert_eq!(lines.next(), Some(format!("# {title} v7.4").as_str()));
    text
}

/// Checks OSU's layout on two ranks: blank line, title, datatype, column header, then one row
/// per size.
fn check(program: &str, args: &[&str], title: &str, column: &str, sizes: &[usize]) {
    check_on(2, program, args, title, column, sizes);
}

/// `check` on `n` ranks.
fn check_on(n: u32, program: &str, args: &[&str], title: &str, column: &str, sizes: &[usize]) {
    let text = titled_output(n, program, args, title);
    let lines: Vec<&str> = text.lines().collect();
    // halo_column's messages are f64s; OSU's are bytes.
    let datatype = match program {
        "halo_column" => "MPI_DOUBLE",
        _ => "MPI_CHAR",
    };
    assert_eq!(lines[2], format!("# Datatype: {datatype}."));
    assert_eq!(lines[3], format!("{:<10}{:>18}", "# Size", column));
    check_rows(&text, &lines[4..], sizes, 1);
}

/// One row per size with the size left-aligned in 10 columns and `values` values with two
/// decimals right-aligned in 18 columns each, none negative and the last row's positive;
/// returns the values. A bandwidth at a small size may print as OSU's 0.00 MB/s where the
/// machine is loaded (a 4-byte row under 0.005 MB/s, as CI's busy host gave once, its message
/// rate 1,071 a second): the largest size's row says the benchmark measured.
fn check_rows(text: &str, rows: &[&str], sizes: &[usize], values: usize) -> Vec<Vec<f64>> {
    assert_eq!(rows.len(), sizes.len(), "{text}");
    let mut all = Vec::new();
    for (line, &size) in rows.iter().zip(sizes) {
        assert_eq!(line.len(), 10 + 18 * values, "row width: '{line}'");
        assert_eq!(line[..10].trim_end(), size.to_string());
        assert!(
            line[..10].starts_with(&size.to_string()),
            "size left-aligned: '{line}'"
        );
        let fields: Vec<&str> = (0..values)
            .map(|i| &line[10 + 18 * i..28 + 18 * i])
            .collect();
        for field in &fields {
            let decimals = field.rsplit('.').next().unwrap();
            assert_eq!(decimals.len(), 2, "two decimals: '{line}'");
        }
        let parsed: Vec<f64> = fields.iter().map(|f| f.trim().parse().unwrap()).collect();
        assert!(parsed.iter().all(|&v| v >= 0.0), "'{line}'");
        all.push(parsed);
    }
    let last = all.last().expect("rows");
    assert!(
        last.iter().all(|&v| v > 0.0),
        "the largest size measured: {text}"
    );
    all
}

#[test]
fn latency_format() {
    check(
        "osu_latency",
        &["-m", "0:16", "-i", "50", "-x", "5"],
        "OSU MPI Latency Test",
        "Avg Latency(us)",
        &[0, 1, 2, 4, 8, 16],
    );
}

#[test]
fn bandwidth_format_including_rendezvous_sizes() {
    check(
        "osu_bw",
        &["-m", "1:65536", "-i", "10", "-x", "2", "-W", "64"],
        "OSU MPI Bandwidth Test",
        "Bandwidth (MB/s)",
        &[
            1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
        ],
    );
}

#[test]
fn halo_column_format_and_its_own_check_of_the_halo() {
    // The program asserts the halo it received at the last size, past the eager limit: 256
    // KiB, below the maximum, whose rows the halo was never sent.
    check(
        "halo_column",
        &["-m", "4096:300000", "-i", "10", "-x", "2"],
        "Halo Exchange of a Strided Column (vector datatype) Test",
        "Bandwidth (MB/s)",
        &[4096, 8192, 16384, 32768, 65536, 131072, 262144],
    );
}

#[test]
fn bi_bandwidth_format() {
    check(
        "osu_bibw",
        &["-m", "4:64", "-i", "3", "-x", "1"],
        "OSU MPI Bi-Directional Bandwidth Test",
        "Bandwidth (MB/s)",
        &[4, 8, 16, 32, 64],
    );
}

#[test]
fn multi_latency_format_with_two_pairs_and_an_odd_rank_out() {
    for n in [4, 5] {
        check_on(
            n,
            "osu_multi_lat",
            &["-m", "16", "-i", "50", "-x", "5"],
            "OSU MPI Multi Latency Test",
            "Avg Latency(us)",
            &[1, 2, 4, 8, 16],
        );
    }
}

/// osu_mbw_mr's own header (no blank line; the pairs and the window), then the bandwidth of
/// all pairs and the message rate, which is that bandwidth over the size.
#[test]
fn multi_bandwidth_format() {
    for (n, pairs) in [(2, 1), (4, 2)] {
        let args = ["-m", "4:32768", "-i", "50", "-x", "2", "-W", "8"];
        let text = successful_output(n, "osu_mbw_mr", &args);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..4],
            [
                "# OSU MPI Multiple Bandwidth / Message Rate Test v7.4".to_string(),
                format!("# [ pairs: {pairs} ] [ window size: 8 ]"),
                "# Datatype: MPI_CHAR.".to_string(),
                "# Size                  MB/s        Messages/s".to_string(),
            ]
        );
        let sizes = [
            4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768,
        ];
        let rows = check_rows(&text, &lines[4..], &sizes, 2);
        for (values, size) in rows.iter().zip(sizes) {
            // Both printed to two decimals: the bandwidth's rounding, scaled, bounds the gap.
            let rate = values[0] * 1e6 / size as f64;
            assert!(
                (values[1] - rate).abs() <= 0.005e6 / size as f64 + 0.01,
                "rate = MB/s / size: {values:?} at {size}"
            );
        }
    }
}

/// osu_latency_mt's thread counts, then osu_latency's layout, and each rank's counts of its
/// threads' waits; the multi-threaded message rate's header (threads for pairs) and
/// osu_mbw_mr's rows.
#[cfg(feature = "threads")]
#[test]
fn multi_threaded_formats() {
    let args = ["-t", "2:3", "-m", "1:64", "-i", "100", "-x", "10"];
    let text = successful_output(2, "osu_latency_mt", &args);
    // Comment lines, one a rank as it ends: rank 1's may come before rank 0's last row.
    let (counts, lines): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|line| line.starts_with("# rank "));
    for rank in 0..2 {
        let prefix = format!("# rank {rank}: ");
        assert_eq!(
            counts
                .iter()
                .filter(|line| line.starts_with(&prefix))
                .count(),
            1,
            "rank {rank}'s counts of its waits, once: {text}"
        );
    }
    assert_eq!(
        lines[..6],
        [
            "# Number of Sender threads: 2 ".to_string(),
            "# Number of Receiver threads: 3".to_string(),
            String::new(),
            "# OSU MPI Multi-threaded Latency Test v7.4".to_string(),
            "# Datatype: MPI_CHAR.".to_string(),
            format!("{:<10}{:>18}", "# Size", "Latency (us)"),
        ]
    );
    check_rows(&text, &lines[6..], &[1, 2, 4, 8, 16, 32, 64], 1);
    let args = ["-t", "3", "-m", "1:1024", "-i", "20", "-x", "2", "-W", "8"];
    let text = successful_output(2, "osu_mbw_mr_mt", &args);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "# OSU MPI Multi-threaded Message Rate Test v7.4",
            "# [ threads: 3 ] [ window size: 8 ]",
            "# Datatype: MPI_CHAR.",
            "# Size                  MB/s        Messages/s",
        ]
    );
    let sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
    check_rows(&text, &lines[4..], &sizes, 2);
}

#[test]
fn wrong_rank_count_and_bad_options_fail_clearly() {
    let out = launch(3, "osu_latency", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("requires exactly two processes"));
    let out = launch(2, "osu_bw", &["-m", "9:3"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("above the maximum"));
    let out = launch(2, "osu_bibw", &["-h"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: osu_bibw"));
    let out = launch(1, "osu_mbw_mr", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("requires at least two processes"));
    let out = launch(2, "osu_multi_lat", &["-W", "4"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option '-W'"));
}

/// A collective test's layout: title, datatype (not for the barrier), the column header with
/// `-f`'s columns, then one row per size with the average, minimum, maximum and iterations.
fn check_collective(program: &str, title: &str, sizes: &[usize]) {
    let range = size_range(sizes);
    let args = ["-m", &range, "-i", "5", "-x", "1", "-f"];
    let text = titled_output(3, program, &args, title);
    let lines: Vec<&str> = text.lines().collect();
    let full = format!(
        "{:>18}{:>18}{:>12}",
        "Min Latency(us)", "Max Latency(us)", "Iterations"
    );
    let (rows, width) = if sizes.is_empty() {
        assert_eq!(lines[2], format!("# Avg Latency(us){full}"));
        (&lines[3..], 17)
    } else {
        assert_eq!(lines[2], "# Datatype: MPI_CHAR.");
        assert_eq!(
            lines[3],
            format!("{:<10}{:>18}{full}", "# Size", "Avg Latency(us)")
        );
        (&lines[4..], 28)
    };
    assert_eq!(rows.len(), sizes.len().max(1), "{text}");
    for (i, line) in rows.iter().enumerate() {
        assert_eq!(line.len(), width + 48, "row width: '{line}'");
        if let Some(size) = sizes.get(i) {
            assert_eq!(line[..10].trim_end(), size.to_string(), "'{line}'");
        }
        let values: Vec<f64> = line[width - 17..]
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        let [avg, min, max, iterations] = values[..] else {
            panic!("four values in '{line}'")
        };
        assert!(min <= avg && avg <= max && min > 0.0, "'{line}'");
        assert_eq!(iterations, 5.0);
    }
}

/// `-m`'s MIN:MAX for `sizes` (the barriers, with none, take any).
fn size_range(sizes: &[usize]) -> String {
    match (sizes.first(), sizes.last()) {
        (Some(min), Some(max)) => format!("{min}:{max}"),
        _ => "1:8".to_string(),
    }
}

/// A non-blocking collective's layout on `n` ranks: title, OSU's line on what the overall
/// time holds, a blank line, the datatype and the column header (for the barrier no datatype,
/// and `# Overall(us)` where a size column would be), then one row per size with the overall,
/// compute and pure times and the overlap, which is a share (with `-f`, `full`, the start,
/// test and wait times too, before the pure time, and the fastest and slowest rank's after).
fn check_non_blocking(n: u32, program: &str, title: &str, sizes: &[usize], full: bool) {
    let range = size_range(sizes);
    let mut args = vec!["-m", &range, "-i", "5", "-x", "1"];
    if full {
        args.push("-f");
    }
    let text = titled_output(n, program, &args, title);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[2], "# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait",
        "{text}"
    );
    assert_eq!(lines[3], "", "{text}");
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
    let rest: String = columns.iter().map(|c| format!("{c:>18}")).collect();
    // OSU 7.4: the first value under "# Overall(us)" is 13 wide, under a size 10 + 18.
    let (first, header_at) = if sizes.is_empty() {
        assert_eq!(lines[4], format!("# Overall(us){rest}"), "{text}");
        (13, 4)
    } else {
        assert_eq!(lines[4], "# Datatype: MPI_CHAR.", "{text}");
        let head = format!("{:<10}{:>18}{rest}", "# Size", "Overall(us)");
        assert_eq!(lines[5], head, "{text}");
        (28, 5)
    };
    let rows = &lines[header_at + 1..];
    assert_eq!(rows.len(), sizes.len().max(1), "{text}");
    for (i, line) in rows.iter().enumerate() {
        assert_eq!(
            line.len(),
            first + 18 * columns.len(),
            "row width: '{line}'"
        );
        if let Some(size) = sizes.get(i) {
            assert_eq!(line[..10].trim_end(), size.to_string(), "'{line}'");
        }
        let values: Vec<f64> = line
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        let values = &values[usize::from(!sizes.is_empty())..];
        assert_eq!(values.len(), columns.len() + 1, "'{line}'");
        assert!(values.iter().all(|&v| v >= 0.0), "'{line}'");
        let overall = values[0];
        let overlap = values[values.len() - 1];
        let pure = if full { values[5] } else { values[2] };
        assert!(overall > 0.0 && pure > 0.0, "'{line}'");
        assert!(overlap <= 100.0, "'{line}'");
        if full {
            assert_eq!(values[3], 0.0, "no probes during the computation: '{line}'");
            let (min, max) = (values[6], values[7]);
            assert!(
                min <= pure && pure <= max,
                "min <= average <= max: '{line}'"
            );
        }
    }
}

#[test]
fn collective_formats_with_full_statistics() {
    let sizes = [1, 2, 4, 8];
    check_collective("osu_barrier", "OSU MPI Barrier Latency Test", &[]);
    for (program, title) in [
        ("osu_bcast", "OSU MPI Broadcast Latency Test"),
        ("osu_reduce", "OSU MPI Reduce Latency Test"),
        ("osu_allreduce", "OSU MPI Allreduce Latency Test"),
        ("osu_allgather", "OSU MPI Allgather Latency Test"),
        (
            "osu_alltoall",
            "OSU MPI All-to-All Personalized Exchange Latency Test",
        ),
        ("osu_gather", "OSU MPI Gather Latency Test"),
        ("osu_scatter", "OSU MPI Scatter Latency Test"),
        ("osu_reduce_scatter", "OSU MPI Reduce_scatter Latency Test"),
        ("osu_allgatherv", "OSU MPI Allgatherv Latency Test"),
        (
            "osu_alltoallv",
            "OSU MPI All-to-Allv Personalized Exchange Latency Test",
        ),
        ("osu_gatherv", "OSU MPI Gatherv Latency Test"),
        ("osu_scatterv", "OSU MPI Scatterv Latency Test"),
    ] {
        check_collective(program, title, &sizes);
    }
    // A block of size / 3 elements a rank: none below 3 bytes.
    check_collective(
        "osu_reduce_scatter_block",
        "OSU MPI Reduce_scatter_block Latency Test",
        &[4, 8],
    );
}

#[test]
fn non_blocking_collective_formats_with_overlap() {
    let sizes = [1, 2, 4, 8];
    let nb = "OSU MPI Non-blocking";
    check_non_blocking(
        3,
        "osu_ibarrier",
        &format!("{nb} Barrier Latency Test"),
        &[],
        true,
    );
    let mut programs = vec![
        ("osu_ibcast", "Broadcast"),
        ("osu_ireduce", "Reduce"),
        ("osu_iallreduce", "Allreduce"),
        ("osu_iallgather", "Allgather"),
        ("osu_iallgatherv", "Allgatherv"),
        ("osu_ialltoall", "All-to-All Personalized Exchange"),
        ("osu_ialltoallv", "All-to-Allv Personalized Exchange"),
        ("osu_igather", "Gather"),
        ("osu_igatherv", "Gatherv"),
        ("osu_iscatter", "Scatter"),
        ("osu_iscatterv", "Scatterv"),
    ];
    // MPI_Ireduce_scatter is mpirt's: rsmpi 0.8 has only the equal-blocks form.
    if cfg!(not(feature = "rsmpi")) {
        programs.push(("osu_ireduce_scatter", "Reduce_scatter"));
    }
    for (program, what) in programs {
        let title = format!("{nb} {what} Latency Test");
        check_non_blocking(3, program, &title, &sizes, true);
    }
    let title = format!("{nb} Reduce_scatter_block Latency Test");
    check_non_blocking(3, "osu_ireduce_scatter_block", &title, &[4, 8], true);
    // Without -f, on 2 ranks.
    let title = format!("{nb} Allreduce Latency Test");
    check_non_blocking(2, "osu_iallreduce", &title, &[4, 8], false);
}

#[test]
fn collective_tests_need_two_ranks_and_print_plain_rows_without_f() {
    let out = launch(1, "osu_allreduce", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("requires at least two processes"));
    check(
        "osu_allreduce",
        &["-m", "4:16", "-i", "5", "-x", "1"],
        "OSU MPI Allreduce Latency Test",
        "Avg Latency(us)",
        &[4, 8, 16],
    );
}

/// Checks a one-sided test's layout: title (no blank line before it), window creation,
/// synchronisation, datatype, column header, then one row per size.
#[cfg(not(feature = "rsmpi"))]
fn check_one_sided(program: &str, args: &[&str], title: &str, column: &str, sizes: &[usize]) {
    let text = successful_output(2, program, args);
    let lines: Vec<&str> = text.lines().collect();
    let (window, sync) = (args[1], args[3]);
    let creation = match window {
        "create" => "MPI_Win_create",
        "allocate" => "MPI_Win_allocate",
        _ => "MPI_Win_create_dynamic",
    };
    let synchronization = match sync {
        "lock" => "MPI_Win_lock/unlock",
        "flush" => "MPI_Win_flush",
        "flush_local" => "MPI_Win_flush_local",
        "lock_all" => "MPI_Win_lock_all/unlock_all",
        "pscw" => "MPI_Win_post/start/complete/wait",
        _ => "MPI_Win_fence",
    };
    assert_eq!(lines[0], format!("# {title} v7.4"), "{text}");
    assert_eq!(lines[1], format!("# Window creation: {creation}"));
    assert_eq!(lines[2], format!("# Synchronization: {synchronization}"));
    assert_eq!(lines[3], "# Datatype: MPI_CHAR.");
    assert_eq!(lines[4], format!("{:<10}{:>18}", "# Size", column));
    check_rows(&text, &lines[5..], sizes, 1);
}

#[cfg(not(feature = "rsmpi"))]
#[test]
fn one_sided_formats_in_every_window_and_synchronisation() {
    let quick = ["-m", "1:16", "-i", "20", "-x", "2"];
    for window in ["create", "allocate", "dynamic"] {
        for sync in ["lock", "flush", "flush_local", "lock_all", "pscw", "fence"] {
            let args = [&["-w", window, "-s", sync][..], &quick[..]].concat();
            check_one_sided(
                "osu_put_latency",
                &args,
                "OSU MPI_Put Latency Test",
                "Latency (us)",
                &[1, 2, 4, 8, 16],
            );
        }
        for sync in ["flush", "pscw", "fence"] {
            let args = [&["-w", window, "-s", sync][..], &quick[..]].concat();
            for (program, title) in [
                ("osu_get_latency", "OSU MPI_Get latency Test"),
                ("osu_acc_latency", "OSU MPI_Accumulate latency Test"),
                ("osu_get_acc_latency", "OSU MPI_Get_accumulate latency Test"),
            ] {
                check_one_sided(program, &args, title, "Latency (us)", &[1, 2, 4, 8, 16]);
            }
            // Sizes whose bandwidth shows in two decimals of MB/s even on a loaded machine.
            let bandwidth = [
                &["-w", window, "-s", sync][..],
                &["-m", "4096:16384", "-i", "20", "-x", "2", "-W", "4"][..],
            ]
            .concat();
            for (program, title) in [
                ("osu_put_bw", "OSU MPI_Put Bandwidth Test"),
                ("osu_get_bw", "OSU MPI_Get Bandwidth Test"),
            ] {
                check_one_sided(
                    program,
                    &bandwidth,
                    title,
                    "Bandwidth (MB/s)",
                    &[4096, 8192, 16384],
                );
            }
            // Both ranks put to each other, which only fence and PSCW let them do.
            if sync != "flush" {
                check_one_sided(
                    "osu_put_bibw",
                    &bandwidth,
                    "OSU MPI_Put Bi-directional Bandwidth Test",
                    "Bandwidth (MB/s)",
                    &[4096, 8192, 16384],
                );
            }
            for (program, title) in [
                ("osu_fop_latency", "OSU MPI_Fetch_and_op latency Test"),
                ("osu_cas_latency", "OSU MPI_Compare_and_swap latency Test"),
            ] {
                check_one_sided(program, &args, title, "Latency (us)", &[8]);
            }
        }
    }
}
