//! Worker addresses through the launcher's key-value service: each rank puts its own, all
//! fence, each connects an endpoint to every rank (itself included, for self-sends).

use super::failure::PeerFailures;
use super::worker::{Endpoint, Worker};
use crate::engine::{EngineError, Wireup};

fn key(rank: u32) -> String {
    format!("pml.ucx.{rank}")
}

/// Hex, because PMI-2 values must be text and worker addresses are binary.
fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
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
    wireup
        .put(&key(rank), encode(&address).as_bytes())
        .map_err(EngineError::Wireup)?;
    wireup.fence().map_err(EngineError::Wireup)?;
    (0..wireup.size())
        .map(|peer| {
            let text = wireup.get(&key(peer)).map_err(EngineError::Wireup)?;
            let address = decode(&text).ok_or_else(|| {
                EngineError::Wireup(format!("rank {peer}'s UCX worker address is not hex"))
            })?;
            worker
                .connect(&address, failures.map(|f| f.callback_arg(peer)))
                .map_err(|e| EngineError::Transport(format!("connecting to rank {peer}: {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_survive_the_text_encoding() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(encode(&bytes).as_bytes()), Some(bytes));
        assert_eq!(decode(b"abc"), None);
        assert_eq!(decode(b"zz"), None);
    }
}
