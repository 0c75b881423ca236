//! Hex text for binary values that travel where only text goes: key-value spaces that hold
//! text (PMI-2's), environment variables, the secrets rsrun makes. Here, the crate lowest in
//! the graph, so that the launcher, the PML and mpirt share one.

/// `bytes` as lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes that the hex `text` spells, if it does.
pub fn decode(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_survive_the_text_encoding() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(encode(&bytes).as_bytes()), Some(bytes));
        assert_eq!(decode(b"abc"), None);
        assert_eq!(decode(b"zz"), None);
    }
}
