//! A non-contiguous send's layout as its rendezvous offer carries it, for a receiver that
//! reads the sender's memory a contiguous run at a time (verbs' RDMA READ: one remote
//! address a work request) and so must know where every run lies, with no second round trip
//! to fetch the description. The RTS's address is the first element's; after the header come
//! the element extent, then each block's offset and length, all little-endian `u64`s. The
//! message's length gives the element count (a send carries whole elements). The sender
//! writes it from its own description ([`encode`]); the receiver checks it as any bytes
//! from the wire ([`RemoteLayout::decode`]) and walks its runs at the sender's addresses,
//! which it never dereferences: the device reads them, under the key the sender gave.

use crate::blocks::{Block, Blocks, Runs, MAX_BLOCKS};

/// Bytes of a layout before its blocks (the extent), and a block's.
const HEAD: usize = 8;
const BLOCK: usize = 16;

/// The bytes a layout of `blocks` blocks takes after the RTS header.
pub fn encoded_len(blocks: usize) -> usize {
    HEAD + BLOCK * blocks
}

/// The layout of elements `extent` bytes apart, each made of `list`, as an offer carries it.
pub fn encode(extent: u64, list: &[Block]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(encoded_len(list.len()));
    out.extend_from_slice(&extent.to_le_bytes());
    for b in list {
        out.extend_from_slice(&(b.offset as u64).to_le_bytes());
        out.extend_from_slice(&(b.len as u64).to_le_bytes());
    }
    out.into_boxed_slice()
}

/// A peer's non-contiguous send as its offer described it: its blocks at the peer's
/// addresses, for the runs a read takes, never for this process's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteLayout {
    blocks: Blocks,
    list: Box<[Block]>,
}

impl RemoteLayout {
    /// The layout `bytes` (an offer's, from `peer`) of a `len`-byte message whose first
    /// element lies at `base` in the sender; the error says what is wrong with it.
    pub fn decode(base: u64, bytes: &[u8], len: usize) -> Result<RemoteLayout, String> {
        let n = bytes.len().saturating_sub(HEAD) / BLOCK;
        if bytes.len() != encoded_len(n) || n == 0 || n as u64 > MAX_BLOCKS {
            return Err(format!(
                "a rendezvous offer's layout of {} bytes is not an extent and 1 to {MAX_BLOCKS} \
                 blocks of 16 bytes",
                bytes.len()
            ));
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let too_far = || "a rendezvous offer's layout reaches past this machine's addresses";
        let extent = usize::try_from(word(0)).map_err(|_| too_far())?;
        let list = (0..n)
            .map(|i| {
                let at = HEAD + i * BLOCK;
                let offset = usize::try_from(word(at)).ok()?;
                let len = usize::try_from(word(at + 8)).ok()?;
                offset.checked_add(len).map(|_| Block { offset, len })
            })
            .collect::<Option<Box<[Block]>>>()
            .ok_or_else(too_far)?;
        let element = list
            .iter()
            .try_fold(0usize, |sum, b| sum.checked_add(b.len))
            .filter(|&e| e > 0 && len.is_multiple_of(e))
            .ok_or_else(|| {
                format!(
                    "a rendezvous offer's layout of {n} blocks does not make the {len}-byte \
                     message of whole elements"
                )
            })?;
        let blocks = Blocks::new(base as usize as *const u8, len / element, extent, &list)
            .expect("whole elements of a message's length fit");
        Ok(RemoteLayout { blocks, list })
    }

    /// The first `len` packed bytes (at most the message's) as runs at the sender's
    /// addresses, merged where they touch, in packing order.
    pub fn runs(&self, len: usize) -> Runs<'_> {
        self.blocks.runs(&self.list, 0, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> Vec<Block> {
        vec![
            Block {
                offset: 16,
                len: 1000,
            },
            Block {
                offset: 2000,
                len: 24,
            },
        ]
    }

    #[test]
    fn a_layout_decodes_to_the_senders_runs() {
        let list = list();
        let base = 0x10_0000u64;
        let sent = Blocks::new(base as usize as *const u8, 3, 4096, &list).unwrap();
        let bytes = encode(sent.extent(), &list);
        assert_eq!(bytes.len(), encoded_len(2));
        let layout = RemoteLayout::decode(base, &bytes, sent.len()).unwrap();
        for len in [sent.len(), 1500, 1] {
            let want: Vec<_> = sent.runs(&list, 0, len).collect();
            assert_eq!(layout.runs(len).collect::<Vec<_>>(), want, "{len} bytes");
        }
        assert_eq!(
            layout.runs(sent.len()).next(),
            Some((base + 16, 1000)),
            "the first run, at the sender's address"
        );
    }

    #[test]
    fn a_bad_layout_is_named() {
        let good = encode(4096, &list());
        let empty = encode(8, &[Block { offset: 0, len: 0 }]);
        let cases: [(&[u8], usize, &str); 4] = [
            (&good[..good.len() - 1], 3072, "not an extent and 1 to"),
            (&good[..HEAD], 3072, "not an extent and 1 to"),
            (&good[..], 3000, "whole elements"),
            (&empty[..], 0, "whole elements"),
        ];
        for (bytes, len, named) in cases {
            let e = RemoteLayout::decode(0, bytes, len).unwrap_err();
            assert!(e.contains(named), "{e}");
        }
        let mut wrapping = encode(8, &list()).into_vec();
        wrapping[HEAD..HEAD + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = RemoteLayout::decode(0, &wrapping, 1024).unwrap_err();
        assert!(e.contains("past this machine's addresses"), "{e}");
    }
}
