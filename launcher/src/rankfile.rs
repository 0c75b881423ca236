//! `--rankfile FILE`: each rank's host and CPUs, in Open MPI's format.
//!
//! ```text
//! # comments and blank lines are ignored
//! rank 0=host1 slot=0
//! rank 1=host1 slot=1-2
//! rank 2=host2 slot=0,2
//! ```
//!
//! A slot is a CPU number as Linux numbers them (`/proc/cpuinfo`, `taskset`), a range or a
//! comma-separated list of both. Open MPI's `socket:core` slots and relative hosts (`+n0`)
//! need a hardware topology rsrun does not read, so they are errors rather than guesses.

use crate::hosts::Host;

/// The largest CPU number a `cpu_set_t` holds, plus one.
pub const MAX_CPUS: usize = 8 * std::mem::size_of::<libc::cpu_set_t>();

/// One `rank N=HOST slot=CPUS` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub line: usize,
    pub rank: u32,
    pub host: String,
    pub cpus: Vec<usize>,
}

/// Parses a rankfile; errors name the line.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut entries: Vec<Entry> = Vec::new();
    for (line, raw) in (1..).zip(text.lines()) {
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let at = |e: String| format!("line {line}: {e}");
        let entry = parse_line(content)
            .map(|(rank, host, cpus)| Entry {
                line,
                rank,
                host,
                cpus,
            })
            .map_err(at)?;
        if let Some(first) = entries.iter().find(|e| e.rank == entry.rank) {
            return Err(at(format!(
                "rank {} is placed twice (first on line {})",
                entry.rank, first.line
            )));
        }
        entries.push(entry);
    }
    if entries.is_empty() {
        return Err("no ranks listed".into());
    }
    Ok(entries)
}

/// `rank N=HOST slot=CPUS`, spaces allowed around the `=` signs.
fn parse_line(content: &str) -> Result<(u32, String, Vec<usize>), String> {
    let expected = || format!("expected 'rank N=HOST slot=CPUS', got '{content}'");
    let rest = content.strip_prefix("rank").ok_or_else(expected)?;
    let (rank, rest) = rest.split_once('=').ok_or_else(expected)?;
    let rank: u32 = rank
        .trim()
        .parse()
        .map_err(|_| format!("'{}' is not a rank number", rank.trim()))?;
    let (host, slot) = rest.split_once("slot").ok_or_else(expected)?;
    let host = host.trim();
    let cpus = slot
        .trim_start()
        .strip_prefix('=')
        .ok_or_else(expected)?
        .trim();
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(expected());
    }
    if host.starts_with('+') {
        return Err(format!(
            "relative host '{host}' is not supported: name the host"
        ));
    }
    Ok((rank, host.to_string(), parse_cpus(cpus)?))
}

/// `3`, `0-3`, `0,2,4-5`: the CPUs, in the order given, each once.
pub fn parse_cpus(text: &str) -> Result<Vec<usize>, String> {
    if text.contains(':') {
        return Err(format!(
            "slot '{text}' is socket:core, which needs a hardware topology; give CPU numbers \
             (0, 0-3, 0,2)"
        ));
    }
    let mut cpus = Vec::new();
    for item in text.split(',') {
        let bad = || format!("'{item}' in slot '{text}' is not a CPU number or range");
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let (lo, hi): (usize, usize) = (
            lo.trim().parse().map_err(|_| bad())?,
            hi.trim().parse().map_err(|_| bad())?,
        );
        if lo > hi {
            return Err(bad());
        }
        if hi >= MAX_CPUS {
            return Err(format!(
                "CPU {hi} in slot '{text}' is beyond the last ({MAX_CPUS})"
            ));
        }
        cpus.extend((lo..=hi).filter(|c| !cpus.contains(c)).collect::<Vec<_>>());
    }
    Ok(cpus)
}

/// A rankfile's placement: the hosts (the job's own, or the rankfile's in order of first
/// mention when the job names none) and each host's ranks with their CPUs, rank order.
pub struct Placed {
    pub hosts: Vec<Host>,
    pub ranks: Vec<Vec<(u32, Vec<usize>)>>,
}

/// Places `ranks` ranks (the rankfile's count when None) on `allocation` (may be empty) as the
/// rankfile says. Every rank must be placed, each on a host of the allocation.
pub fn place(entries: &[Entry], allocation: &[Host], ranks: Option<u32>) -> Result<Placed, String> {
    let n = ranks.unwrap_or(entries.len() as u32);
    if let Some(rank) = (0..n).find(|r| entries.iter().all(|e| e.rank != *r)) {
        return Err(format!(
            "the job has {n} ranks, but rank {rank} is not in the rankfile"
        ));
    }
    if let Some(extra) = entries.iter().find(|e| e.rank >= n) {
        return Err(format!(
            "line {}: rank {} is beyond the job's {n} ranks (ranks 0-{})",
            extra.line,
            extra.rank,
            n - 1
        ));
    }
    let mut hosts = allocation.to_vec();
    for e in entries {
        if hosts.iter().all(|h| h.name != e.host) {
            if !allocation.is_empty() {
                let names: Vec<&str> = allocation.iter().map(|h| h.name.as_str()).collect();
                return Err(format!(
                    "line {}: host '{}' is not among the job's hosts ({})",
                    e.line,
                    e.host,
                    names.join(", ")
                ));
            }
            hosts.push(Host {
                name: e.host.clone(),
                slots: 0,
            });
        }
    }
    let mut placed = vec![Vec::new(); hosts.len()];
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.rank);
    for e in sorted {
        let host = hosts
            .iter()
            .position(|h| h.name == e.host)
            .expect("added above");
        placed[host].push((e.rank, e.cpus.clone()));
    }
    if allocation.is_empty() {
        for (host, ranks) in hosts.iter_mut().zip(&placed) {
            host.slots = ranks.len() as u32;
        }
    }
    Ok(Placed {
        hosts,
        ranks: placed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# two hosts\nrank 1=host2 slot=0\nrank 0 = host1 slot = 1-2 # two\n\n\
                        rank 2=host2 slot=0,2\n";

    #[test]
    fn open_mpi_rankfiles_parse() {
        let entries = parse(FILE).unwrap();
        let got: Vec<(u32, &str, Vec<usize>)> = entries
            .iter()
            .map(|e| (e.rank, e.host.as_str(), e.cpus.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (1, "host2", vec![0]),
                (0, "host1", vec![1, 2]),
                (2, "host2", vec![0, 2])
            ]
        );
        assert_eq!(parse_cpus("4-5,1,5").unwrap(), [4, 5, 1]);
    }

    #[test]
    fn bad_lines_are_named() {
        for (text, said) in [
            (
                "rank 0=a slot=0\nrank 0=b slot=1\n",
                "line 2: rank 0 is placed twice",
            ),
            ("rank x=a slot=0", "line 1: 'x' is not a rank number"),
            ("rank 0=a slot=1:0", "socket:core"),
            ("rank 0=+n0 slot=0", "relative host"),
            ("rank 0=a", "expected 'rank N=HOST slot=CPUS'"),
            ("rank 0=a slot=3-1", "not a CPU number or range"),
            ("rank 0=a slot=99999", "beyond the last"),
            ("# nothing\n", "no ranks listed"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(said), "{text:?}: {e}");
        }
    }

    fn host(name: &str, slots: u32) -> Host {
        Host {
            name: name.into(),
            slots,
        }
    }

    #[test]
    fn placement_without_and_with_an_allocation() {
        let entries = parse(FILE).unwrap();
        let placed = place(&entries, &[], None).unwrap();
        assert_eq!(placed.hosts, [host("host2", 2), host("host1", 1)]);
        assert_eq!(
            placed.ranks,
            [vec![(1, vec![0]), (2, vec![0, 2])], vec![(0, vec![1, 2])]]
        );
        let allocation = [host("host1", 4), host("host2", 4), host("host3", 4)];
        let placed = place(&entries, &allocation, Some(3)).unwrap();
        assert_eq!(placed.hosts, allocation);
        assert_eq!(placed.ranks[2], []);
    }

    #[test]
    fn impossible_placements_are_errors() {
        let entries = parse(FILE).unwrap();
        let e = place(&entries, &[], Some(4)).err().unwrap();
        assert!(e.contains("rank 3 is not in the rankfile"), "{e}");
        let e = place(&entries, &[], Some(2)).err().unwrap();
        assert!(e.contains("rank 2 is beyond the job's 2 ranks"), "{e}");
        let e = place(&entries, &[host("host1", 2)], None).err().unwrap();
        assert!(
            e.contains("host 'host2' is not among the job's hosts (host1)"),
            "{e}"
        );
    }
}
