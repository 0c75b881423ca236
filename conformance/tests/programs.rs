//! Every conformance program runs under rsrun at each rank count its `//! ranks:` line names,
//! and exits 0: its own assertions held. (tools/conformance-rsmpi.sh also runs them built
//! against rsmpi over Open MPI and compares the lines both print.) `cargo build --workspace`
//! (same profile) must come first: the programs and rsrun are found beside the test executable.

#[path = "../../examples/tests/support/mod.rs"]
mod support;

use std::path::Path;

/// Each program's name and the rank counts it runs on, from its source's `//! ranks: N M ..`.
fn programs() -> Vec<(String, Vec<u32>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin");
    let mut programs: Vec<(String, Vec<u32>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let source = std::fs::read_to_string(&path).unwrap();
            let ranks = source
                .lines()
                .find_map(|line| line.strip_prefix("//! ranks:"))
                .unwrap_or_else(|| panic!("{} has no `//! ranks:` line", path.display()))
                .split_whitespace()
                .map(|n| n.parse().unwrap())
                .collect();
            (name, ranks)
        })
        .collect();
    programs.sort();
    programs
}

#[test]
fn every_program_passes_under_rsrun() {
    let mut failed = Vec::new();
    for (name, ranks) in programs() {
        for n in ranks {
            let output = support::rsrun(n, &name, &[]);
            if !output.status.success() {
                failed.push(format!(
                    "{name} on {n} ranks: {}\n{}{}",
                    output.status,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
