//! The payload of an eager message that arrived before its receive: kept inline when small, so
//! that an unexpected small message costs no allocation, and on the heap otherwise.

/// Payloads up to this many bytes are kept inline (the size of a queue entry stays within a
/// cache line's worth of payload).
const INLINE: usize = 48;

pub(super) enum StoredPayload {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Vec<u8>),
}

impl StoredPayload {
    pub(super) fn copy_of(payload: &[u8]) -> StoredPayload {
        if payload.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..payload.len()].copy_from_slice(payload);
            StoredPayload::Inline {
                len: payload.len() as u8,
                bytes,
            }
        } else {
            StoredPayload::Heap(payload.to_vec())
        }
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        match self {
            StoredPayload::Inline { len, bytes } => &bytes[..usize::from(*len)],
            StoredPayload::Heap(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_length_intact_across_the_inline_limit() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 4 * INLINE] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let stored = StoredPayload::copy_of(&payload);
            assert_eq!(stored.as_slice(), &payload[..], "length {len}");
            assert_eq!(
                matches!(stored, StoredPayload::Inline { .. }),
                len <= INLINE,
                "length {len} stored in the wrong place"
            );
        }
    }
}
