//! Failures that the test suite makes happen on purpose, on one rank of a job
//! (`MPIRT_TEST_FAULT`, read once; for tests only, not a setting for users): a failure that
//! real runs meet rarely and no test could otherwise bring about on a chosen rank at a
//! chosen call, whose handling (every rank acting together, never a hang) would otherwise go
//! unchecked.
//!
//! The variable holds faults separated by commas, each `KIND@RANK` or `KIND@RANK:CALL`, for
//! world rank `RANK`:
//! - `area-map@R`: rank R maps no shared-memory area of the collectives, as on a host whose
//!   /dev/shm is full: the communicators whose area it shares go by messages, and a
//!   hierarchical path whose host area it is in (`collective::hierarchy`) is given up.
//! - `leader-recv@R:N`: rank R, leading its host on a hierarchical path, cannot post the
//!   receive of its `N`th exchange between the hosts' leaders (counted from 1 over every
//!   such exchange of the process).
//! - `learned-buffer@R`: rank R, leading its host in a gather or scatter of parts of any
//!   length across hosts, can make no buffer for its ranks' parts that it learns the lengths
//!   of, as where they would take more memory than the host has.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::environment::world_rank;

/// The variable the faults are read from.
const VARIABLE: &str = "MPIRT_TEST_FAULT";

/// The faults the variable asks of this process.
#[derive(Default, Debug)]
struct Faults {
    /// The ranks that map no collective area.
    area_map: Vec<u32>,
    /// The ranks whose leaders' exchange fails to post a receive, and the exchange.
    leader_recv: Vec<(u32, u64)>,
    /// The ranks that can make no buffer for the parts they learn of.
    learned_buffer: Vec<u32>,
}

/// The faults `MPIRT_TEST_FAULT` names; a fault it cannot read is fatal, so that a test's
/// typo does not pass as a run without faults.
fn faults() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(|| {
        let Ok(text) = std::env::var(VARIABLE) else {
            return Faults::default();
        };
        parse(&text).unwrap_or_else(|why| {
            panic!("{VARIABLE}={text:?}: {why} ({VARIABLE} is a switch of mpirt's tests only)")
        })
    })
}

fn parse(text: &str) -> Result<Faults, String> {
    let mut faults = Faults::default();
    for fault in text.split(',').filter(|f| !f.is_empty()) {
        let (kind, at) = fault
            .split_once('@')
            .ok_or_else(|| format!("{fault:?} names no rank (KIND@RANK)"))?;
        match (kind, at.split_once(':')) {
            ("area-map", None) => faults.area_map.push(number(at, fault)?),
            ("learned-buffer", None) => faults.learned_buffer.push(number(at, fault)?),
            ("leader-recv", Some((rank, call))) => faults
                .leader_recv
                .push((number(rank, fault)?, number(call, fault)?)),
            _ => {
                return Err(format!(
                    "{fault:?} is none of area-map@RANK, leader-recv@RANK:CALL, \
                     learned-buffer@RANK"
                ))
            }
        }
    }
    Ok(faults)
}

/// A number of `fault`, read in the type it is kept in, so that one too large is refused,
/// not truncated to another rank.
fn number<T: FromStr>(text: &str, fault: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{text:?} in {fault:?} is not a number that fits"))
}

/// Whether this rank is to map no collective area.
pub(crate) fn area_map_fails() -> bool {
    let ranks = &faults().area_map;
    !ranks.is_empty() && world_rank().is_some_and(|r| ranks.contains(&(r as u32)))
}

/// Whether this rank is to make no buffer for the parts it learns of.
pub(crate) fn learned_buffer_fails() -> bool {
    let ranks = &faults().learned_buffer;
    !ranks.is_empty() && world_rank().is_some_and(|r| ranks.contains(&(r as u32)))
}

/// Counts an exchange between the hosts' leaders on this rank; whether its receive is to
/// fail.
pub(crate) fn leader_recv_fails() -> bool {
    static EXCHANGES: AtomicU64 = AtomicU64::new(0);
    let calls = &faults().leader_recv;
    if calls.is_empty() {
        return false;
    }
    let n = EXCHANGES.fetch_add(1, Ordering::Relaxed) + 1;
    world_rank().is_some_and(|r| calls.contains(&(r as u32, n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_read_and_bad_ones_refused() {
        let faults = parse("area-map@3,leader-recv@2:5,learned-buffer@1").unwrap();
        assert_eq!(faults.area_map, [3]);
        assert_eq!(faults.leader_recv, [(2, 5)]);
        assert_eq!(faults.learned_buffer, [1]);
        assert!(parse("area-map").unwrap_err().contains("names no rank"));
        assert!(parse("leader-recv@2").unwrap_err().contains("none of"));
        assert!(parse("area-map@x").unwrap_err().contains("not a number"));
        assert!(parse("area-map@4294967296")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse("leader-recv@1:18446744073709551616")
            .unwrap_err()
            .contains("not a number"));
    }
}
