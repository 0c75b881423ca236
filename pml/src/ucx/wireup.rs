//! Worker addresses through the launcher's key-value service: each rank puts its own, all
//! fence, each connects an endpoint to every rank (itself included, for self-sends).
//!
//! PMI-2 (Slurm's) holds values of at most 1024 bytes, and a worker address in hex can be
//! longer (it lists every device and transport), so an address goes in parts: the first,
//! under the rank's key, says how many there are (`3:0a1b...`), the others follow under
//! `<key>.1`, `<key>.2`. An address that fits takes one get, as before.

use super::failure::PeerFailures;
use super::worker::{Endpoint, Worker};
use crate::pml_api::{EngineError, Wireup};
// Hex, because PMI-2 values must be text and worker addresses are binary.
use bootstrap::hex::{decode, encode};

fn key(rank: u32) -> String {
    format!("pml.ucx.{rank}")
}

/// Hex characters per value: with the part count in front, under PMI-2's 1024 bytes.
const PART: usize = 1000;

/// Puts `address` under `rank`'s key, in as many parts as it takes.
fn publish(wireup: &mut dyn Wireup, rank: u32, address: &[u8]) -> Result<(), String> {
    let text = encode(address);
    let parts: Vec<&[u8]> = text.as_bytes().chunks(PART).collect();
    let first = parts.first().copied().unwrap_or_default();
    let mut head = format!("{}:", parts.len().max(1)).into_bytes();
    head.extend_from_slice(first);
    wireup.put(&key(rank), &head)?;
    for (i, part) in parts.iter().enumerate().skip(1) {
        wireup.put(&format!("{}.{i}", key(rank)), part)?;
    }
    Ok(())
}

/// Reads back what `publish` put for `peer`.
fn fetch(wireup: &mut dyn Wireup, peer: u32) -> Result<Vec<u8>, EngineError> {
    let malformed =
        || EngineError::Wireup(format!("rank {peer}'s UCX worker address is malformed"));
    let head = wireup.get(peer, &key(peer)).map_err(EngineError::Wireup)?;
    let colon = head.iter().position(|&b| b == b':').ok_or_else(malformed)?;
    let parts: usize = std::str::from_utf8(&head[..colon])
        .ok()
        .and_then(|n| n.parse().ok())
        .ok_or_else(malformed)?;
    let mut text = head[colon + 1..].to_vec();
    for i in 1..parts {
        let part = wireup
            .get(peer, &format!("{}.{i}", key(peer)))
            .map_err(EngineError::Wireup)?;
        text.extend_from_slice(&part);
    }
    decode(&text).ok_or_else(malformed)
}

/// Publishes this worker's address, then connects to every rank's. With `failures`,
/// endpoints detect broken connections and record them there (it must outlive the worker).
pub fn connect_all(
    worker: &Worker,
    wireup: &mut dyn Wireup,
    failures: Option<&PeerFailures>,
) -> Result<Vec<Endpoint>, EngineError> {
    let rank = wireup.rank();
    let address = worker
        .address()
        .map_err(|e| EngineError::Transport(e.to_string()))?;
    publish(wireup, rank, &address).map_err(EngineError::Wireup)?;
    wireup.fence().map_err(EngineError::Wireup)?;
    (0..wireup.size())
        .map(|peer| {
            let address = fetch(wireup, peer)?;
            worker
                .connect(&address, failures.map(|f| f.callback_arg(peer)))
                .map_err(|e| EngineError::Transport(format!("connecting to rank {peer}: {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A key-value store in memory, with PMI-2's limit on values.
    #[derive(Default)]
    struct Pmi2Like(HashMap<String, Vec<u8>>);

    impl Wireup for Pmi2Like {
        fn rank(&self) -> u32 {
            0
        }
        fn size(&self) -> u32 {
            1
        }
        fn job_id(&self) -> String {
            "test".into()
        }
        fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
            if value.len() > 1024 {
                return Err(format!("{key}: value of {} bytes", value.len()));
            }
            self.0.insert(key.into(), value.to_vec());
            Ok(())
        }
        fn fence(&mut self) -> Result<(), String> {
            Ok(())
        }
        fn get(&mut self, _from: u32, key: &str) -> Result<Vec<u8>, String> {
            self.0.get(key).cloned().ok_or_else(|| format!("no {key}"))
        }
        fn job_secret(&mut self) -> Result<[u8; 32], String> {
            Err("the UCX PML does not authenticate".into())
        }
    }

    #[test]
    fn addresses_of_any_length_fit_pmi2_values() {
        for len in [0usize, 1, 499, 500, 501, 1500, 5000] {
            let address: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut kvs = Pmi2Like::default();
            publish(&mut kvs, 3, &address).unwrap();
            assert_eq!(fetch(&mut kvs, 3).unwrap(), address, "{len} bytes");
            let parts = kvs.0.len();
            assert_eq!(parts, (2 * len).div_ceil(PART).max(1), "{len} bytes");
        }
        let mut kvs = Pmi2Like::default();
        kvs.put(&key(1), b"2:ab").unwrap();
        assert!(fetch(&mut kvs, 1).is_err(), "a missing part is an error");
        kvs.put(&key(1), b"ab").unwrap();
        let e = fetch(&mut kvs, 1).unwrap_err().to_string();
        assert!(
            e.contains("rank 1's UCX worker address is malformed"),
            "{e}"
        );
    }
}
