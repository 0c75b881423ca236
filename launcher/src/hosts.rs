//! Host lists (`-H`, `--hostfile`, a Slurm allocation) and the mapping of ranks onto them.

use std::net::IpAddr;

use bootstrap::expand_counts;

/// One host and how many ranks it takes before it counts as oversubscribed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub slots: u32,
}

/// How ranks are laid out over the hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapBy {
    /// Fill each host's slots before moving to the next host.
    Slot,
    /// One rank per host in turn, round-robin.
    Node,
    /// N ranks on each host before moving to the next (`ppr:N:node`, `--npernode N`).
    PerNode(u32),
}

impl MapBy {
    /// `slot`, `node` or `ppr:N:node`, as `--map-by` takes them.
    pub fn parse(text: &str) -> Result<MapBy, String> {
        match text {
            "slot" => Ok(MapBy::Slot),
            "node" => Ok(MapBy::Node),
            _ => text
                .strip_prefix("ppr:")
                .and_then(|rest| rest.strip_suffix(":node"))
                .and_then(|n| n.parse().ok())
                .filter(|&n| n > 0)
                .map(MapBy::PerNode)
                .ok_or_else(|| {
                    format!("expected slot, node or ppr:N:node (N at least 1), got '{text}'")
                }),
        }
    }
}

impl std::fmt::Display for MapBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MapBy::Slot => write!(f, "slot"),
            MapBy::Node => write!(f, "node"),
            MapBy::PerNode(n) => write!(f, "ppr:{n}:node"),
        }
    }
}

/// Parses `-H` values: `a:2,b,c:3` (a host with no count has one slot).
pub fn parse_host_list(list: &str) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("empty host name in '{list}'"));
        }
        add(&mut hosts, parse_host_colon(item)?);
    }
    Ok(hosts)
}

/// Expands a Slurm hostlist: `node[1-3,07],gpu5` is node1, node2, node3, node07, gpu5
/// (ranges keep their zero padding).
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = list.trim();
    while !rest.is_empty() {
        // One item: up to the next comma outside brackets.
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        let item = &rest[..end];
        rest = rest[end..].trim_start_matches(',');
        match item.split_once('[') {
            None => names.push(item.to_string()),
            Some((prefix, tail)) => {
                let (ranges, suffix) = tail
                    .split_once(']')
                    .ok_or_else(|| format!("'{item}' has no closing ']'"))?;
                for range in ranges.split(',') {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    let bad = || format!("'{range}' in '{item}' is not a number or a range");
                    let (a, b): (u64, u64) = (
                        lo.parse().map_err(|_| bad())?,
                        hi.parse().map_err(|_| bad())?,
                    );
                    if a > b {
                        return Err(bad());
                    }
                    for n in a..=b {
                        names.push(format!("{prefix}{n:0width$}{suffix}", width = lo.len()));
                    }
                }
            }
        }
    }
    if names.is_empty() {
        return Err("empty hostlist".into());
    }
    Ok(names)
}

/// The hosts of the Slurm allocation rsrun runs in (`SLURM_JOB_NODELIST`), each with its
/// share of tasks (`SLURM_TASKS_PER_NODE`, one each if unset) as slots.
pub fn slurm_allocation(nodelist: &str, tasks: Option<&str>) -> Result<Vec<Host>, String> {
    let names = expand_hostlist(nodelist).map_err(|e| format!("SLURM_JOB_NODELIST: {e}"))?;
    let counts = match tasks {
        Some(t) => expand_counts(t).map_err(|e| format!("SLURM_TASKS_PER_NODE: {e}"))?,
        None => vec![1; names.len()],
    };
    if counts.len() != names.len() {
        return Err(format!(
            "SLURM_TASKS_PER_NODE gives {} counts for {} nodes",
            counts.len(),
            names.len()
        ));
    }
    Ok(names
        .into_iter()
        .zip(counts)
        .map(|(name, slots)| Host { name, slots })
        .collect())
}

/// Parses a hostfile: Open MPI's `host slots=N` lines, MPICH's `host:N` lines, `#` comments and
/// blank lines. Open MPI's `max_slots=N` is accepted and ignored (rsrun has no hard limit beyond
/// `--oversubscribe`).
pub fn parse_hostfile(text: &str) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for (number, line) in (1..).zip(text.lines()) {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        let at = |e: String| format!("line {number}: {e}");
        let mut host = parse_host_colon(first).map_err(at)?;
        for word in words {
            match word.split_once('=') {
                Some(("slots", n)) => host.slots = parse_count(n).map_err(at)?,
                Some(("max_slots", n)) => {
                    parse_count(n).map_err(at)?;
                }
                _ => return Err(at(format!("unknown word '{word}'"))),
            }
        }
        add(&mut hosts, host);
    }
    if hosts.is_empty() {
        return Err("no hosts listed".into());
    }
    Ok(hosts)
}

/// A host named twice gets the slots of both mentions, as in Open MPI (`-H a,a` is `-H a:2`).
fn add(hosts: &mut Vec<Host>, host: Host) {
    match hosts.iter_mut().find(|h| h.name == host.name) {
        Some(known) => known.slots += host.slots,
        None => hosts.push(host),
    }
}

/// `name` or `name:N`. An IPv6 address has colons of its own, so it takes a count only in
/// brackets: `[::1]:2`.
fn parse_host_colon(item: &str) -> Result<Host, String> {
    let (name, slots) = if let Some(rest) = item.strip_prefix('[') {
        let (addr, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("unclosed '[' in '{item}'"))?;
        match after.strip_prefix(':') {
            Some(n) => (addr, parse_count(n)?),
            None if after.is_empty() => (addr, 1),
            None => return Err(format!("unexpected '{after}' after '[{addr}]'")),
        }
    } else if item.parse::<IpAddr>().is_ok() {
        (item, 1)
    } else {
        match item.split_once(':') {
            Some((name, n)) => (name, parse_count(n)?),
            None => (item, 1),
        }
    };
    if name.is_empty() {
        return Err(format!("empty host name in '{item}'"));
    }
    Ok(Host {
        name: name.to_string(),
        slots,
    })
}

fn parse_count(n: &str) -> Result<u32, String> {
    match n.parse::<u32>() {
        Ok(count) if count > 0 => Ok(count),
        _ => Err(format!("expected a slot count of at least 1, got '{n}'")),
    }
}

/// The ranks each host runs, in host order: `ranks` ranks (all slots when None) laid out by
/// `map_by`. More ranks than slots is an error unless `oversubscribe`; then the layout goes
/// round the hosts again.
pub fn map_ranks(
    hosts: &[Host],
    ranks: Option<u32>,
    map_by: MapBy,
    oversubscribe: bool,
) -> Result<Vec<Vec<u32>>, String> {
    let round_robin = match map_by {
        MapBy::PerNode(per) => return map_per_node(hosts, ranks, per, oversubscribe),
        MapBy::Slot => false,
        MapBy::Node => true,
    };
    let slots: u64 = hosts.iter().map(|h| u64::from(h.slots)).sum();
    let n = ranks.map_or(slots, u64::from);
    if n > slots && !oversubscribe {
        return Err(format!(
            "{n} ranks requested but the hosts have only {slots} slots; \
             add hosts or slots, or pass --oversubscribe to run more ranks than slots"
        ));
    }
    let n = u32::try_from(n).map_err(|_| format!("{n} ranks is too many"))?;
    let mut layout = vec![Vec::new(); hosts.len()];
    let mut rank = 0;
    // Each pass places at most one host's worth of slots; passes after the first oversubscribe.
    while rank < n {
        if round_robin {
            let most = hosts.iter().map(|h| h.slots).max().unwrap_or(0);
            for round in 0..most {
                for (i, host) in hosts.iter().enumerate() {
                    if round < host.slots && rank < n {
                        layout[i].push(rank);
                        rank += 1;
                    }
                }
            }
        } else {
            for (host, placed) in hosts.iter().zip(layout.iter_mut()) {
                for _ in 0..host.slots {
                    if rank < n {
                        placed.push(rank);
                        rank += 1;
                    }
                }
            }
        }
    }
    Ok(layout)
}

/// `per` ranks on each host in turn (all hosts' worth when `ranks` is None), as Open MPI's
/// `ppr:N:node`: more than a host's slots needs `oversubscribe`, more ranks than `per` times
/// the hosts cannot be placed at all.
fn map_per_node(
    hosts: &[Host],
    ranks: Option<u32>,
    per: u32,
    oversubscribe: bool,
) -> Result<Vec<Vec<u32>>, String> {
    let room = u64::from(per) * hosts.len() as u64;
    let n = ranks.map_or(room, u64::from);
    if n > room {
        return Err(format!(
            "{n} ranks requested, but {per} per node on {} host(s) places only {room}",
            hosts.len()
        ));
    }
    let mut next = 0..n as u32;
    let layout: Vec<Vec<u32>> = hosts
        .iter()
        .map(|_| next.by_ref().take(per as usize).collect())
        .collect();
    // Only hosts that get ranks count: the last ones may get fewer than `per`, or none.
    let crowded = hosts
        .iter()
        .zip(&layout)
        .find(|(h, placed)| placed.len() > h.slots as usize);
    if let Some((small, placed)) = crowded {
        if !oversubscribe {
            return Err(format!(
                "{per} ranks per node puts {} on host {}, which has only {} slot(s); give it \
                 more slots (host:N) or pass --oversubscribe",
                placed.len(),
                small.name,
                small.slots
            ));
        }
    }
    Ok(layout)
}

/// Whether `name` is this machine, so its ranks start with fork/exec instead of ssh.
pub fn is_local(name: &str, own_hostname: &str) -> bool {
    if name == "localhost" || name == own_hostname {
        return true;
    }
    // The short form of either name: `node1` is `node1.cluster` and the other way round.
    let short = |s: &str| s.split('.').next().unwrap_or("").to_string();
    if name.parse::<IpAddr>().is_err() && short(name) == short(own_hostname) {
        return true;
    }
    name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// This machine's host name, or "" if it cannot be read.
pub fn own_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is what is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {

    #[test]
    fn slurm_hostlists_and_counts_expand() {
        assert_eq!(
            expand_hostlist("node[1-3,07],gpu5").unwrap(),
            ["node1", "node2", "node3", "node07", "gpu5"]
        );
        assert_eq!(
            expand_hostlist("a[08-10]-ib").unwrap(),
            ["a08-ib", "a09-ib", "a10-ib"]
        );
        assert!(expand_hostlist("n[3-1]").is_err());
        assert!(expand_hostlist("n[1-2").is_err());
        assert_eq!(expand_counts("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert!(expand_counts("2(x)").is_err());
        let hosts = slurm_allocation("host[1-3]", Some("2,1(x2)")).unwrap();
        assert_eq!(hosts.iter().map(|h| h.slots).collect::<Vec<_>>(), [2, 1, 1]);
        assert!(slurm_allocation("host[1-3]", Some("2")).is_err());
    }

    use super::*;

    fn h(name: &str, slots: u32) -> Host {
        Host {
            name: name.into(),
            slots,
        }
    }

    #[test]
    fn host_lists_parse() {
        assert_eq!(
            parse_host_list("a:2,b,c:3").unwrap(),
            [h("a", 2), h("b", 1), h("c", 3)]
        );
        assert_eq!(parse_host_list("a,b,a").unwrap(), [h("a", 2), h("b", 1)]);
        assert_eq!(
            parse_host_list("10.0.0.1:4,::1,[fe80::1]:2").unwrap(),
            [h("10.0.0.1", 4), h("::1", 1), h("fe80::1", 2)]
        );
        for bad in ["", "a,,b", "a:0", "a:x", ":2", "[::1"] {
            assert!(parse_host_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hostfiles_parse_in_both_formats() {
        let text = "# cluster\n\nnode1 slots=4\nnode2   slots=2 max_slots=8  # big\n\
                    node3:3\n  node4\nnode1\n";
        assert_eq!(
            parse_hostfile(text).unwrap(),
            [h("node1", 5), h("node2", 2), h("node3", 3), h("node4", 1)]
        );
        let err = parse_hostfile("a\nb cpus=2\n").unwrap_err();
        assert_eq!(err, "line 2: unknown word 'cpus=2'");
        assert!(parse_hostfile("a slots=0").is_err());
        assert_eq!(parse_hostfile("# none\n").unwrap_err(), "no hosts listed");
    }

    #[test]
    fn ranks_map_by_slot_and_by_node() {
        let hosts = [h("a", 2), h("b", 2), h("c", 1)];
        assert_eq!(
            map_ranks(&hosts, None, MapBy::Slot, false).unwrap(),
            [vec![0, 1], vec![2, 3], vec![4]]
        );
        assert_eq!(
            map_ranks(&hosts, None, MapBy::Node, false).unwrap(),
            [vec![0, 3], vec![1, 4], vec![2]]
        );
        assert_eq!(
            map_ranks(&hosts, Some(3), MapBy::Slot, false).unwrap(),
            [vec![0, 1], vec![2], vec![]]
        );
        assert_eq!(
            map_ranks(&hosts, Some(2), MapBy::Node, false).unwrap(),
            [vec![0], vec![1], vec![]]
        );
    }

    #[test]
    fn ranks_map_per_node() {
        let hosts = [h("a", 4), h("b", 2), h("c", 2)];
        let per2 = MapBy::parse("ppr:2:node").unwrap();
        assert_eq!(per2, MapBy::PerNode(2));
        assert_eq!(
            map_ranks(&hosts, None, per2, false).unwrap(),
            [vec![0, 1], vec![2, 3], vec![4, 5]]
        );
        assert_eq!(
            map_ranks(&hosts, Some(3), per2, false).unwrap(),
            [vec![0, 1], vec![2], vec![]]
        );
        let err = map_ranks(&hosts, Some(7), per2, false).unwrap_err();
        assert!(err.contains("places only 6"), "{err}");
        let err = map_ranks(&hosts, None, MapBy::PerNode(3), false).unwrap_err();
        assert!(err.contains("puts 3 on host b, which has only 2"), "{err}");
        // Hosts that get no ranks, or fewer than N, need no room for N.
        let small = [h("a", 4), h("b", 1)];
        assert_eq!(
            map_ranks(&small, Some(2), per2, false).unwrap(),
            [vec![0, 1], vec![]]
        );
        assert_eq!(
            map_ranks(&small, Some(3), per2, false).unwrap(),
            [vec![0, 1], vec![2]]
        );
        let err = map_ranks(&small, Some(4), per2, false).unwrap_err();
        assert!(err.contains("puts 2 on host b, which has only 1"), "{err}");
        assert_eq!(
            map_ranks(&hosts, None, MapBy::PerNode(3), true).unwrap(),
            [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8]]
        );
        for bad in ["ppr:0:node", "ppr:2:socket", "ppr:x:node", "core"] {
            assert!(MapBy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn more_ranks_than_slots_needs_oversubscribe() {
        let hosts = [h("a", 1), h("b", 2)];
        let err = map_ranks(&hosts, Some(4), MapBy::Slot, false).unwrap_err();
        assert!(
            err.contains("only 3 slots") && err.contains("--oversubscribe"),
            "{err}"
        );
        assert_eq!(
            map_ranks(&hosts, Some(5), MapBy::Slot, true).unwrap(),
            [vec![0, 3], vec![1, 2, 4]]
        );
        assert_eq!(
            map_ranks(&hosts, Some(5), MapBy::Node, true).unwrap(),
            [vec![0, 3], vec![1, 2, 4]]
        );
    }

    #[test]
    fn local_names_are_recognized() {
        for name in [
            "localhost",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "vm",
            "vm.example",
        ] {
            assert!(is_local(name, "vm"), "{name}");
        }
        for name in ["host1", "10.77.0.11", "vmx"] {
            assert!(!is_local(name, "vm"), "{name}");
        }
    }
}
