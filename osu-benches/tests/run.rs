//! The OSU ports run under rsrun as a user runs them, and print OSU's format line by line.
//! `cargo build --workspace` must come first: the binaries are found beside this test's
//! directory.

#[path = "../../examples/tests/support/mod.rs"]
mod support;
use support::rsrun;

/// Checks OSU's layout: blank line, title, datatype, column header, then one row per size
/// with the size left-aligned in 10 columns and a positive value right-aligned in 18.
fn check(program: &str, args: &[&str], title: &str, column: &str, sizes: &[usize]) {
    let out = rsrun(2, program, args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "");
    assert_eq!(lines[1], format!("# {title} v7.4"));
    assert_eq!(lines[2], "# Datatype: MPI_CHAR.");
    assert_eq!(lines[3], format!("{:<10}{:>18}", "# Size", column));
    let rows = &lines[4..];
    assert_eq!(rows.len(), sizes.len(), "{text}");
    for (line, &size) in rows.iter().zip(sizes) {
        assert_eq!(line.len(), 28, "row width: '{line}'");
        assert_eq!(line[..10].trim_end(), size.to_string());
        assert!(
            line[..10].starts_with(&size.to_string()),
            "size left-aligned: '{line}'"
        );
        let value: f64 = line[10..].trim().parse().unwrap();
        assert!(value > 0.0, "'{line}'");
        let decimals = line.rsplit('.').next().unwrap();
        assert_eq!(decimals.len(), 2, "two decimals: '{line}'");
    }
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
        &["-m", "1:65536", "-i", "3", "-x", "1", "-W", "8"],
        "OSU MPI Bandwidth Test",
        "Bandwidth (MB/s)",
        &[
            1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
        ],
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
fn wrong_rank_count_and_bad_options_fail_clearly() {
    let out = rsrun(3, "osu_latency", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("requires exactly two processes"));
    let out = rsrun(2, "osu_bw", &["-m", "9:3"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("above the maximum"));
    let out = rsrun(2, "osu_bibw", &["-h"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: osu_bibw"));
}
