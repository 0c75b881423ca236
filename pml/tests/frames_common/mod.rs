//! A frame as it travels: its header, then its payload.

use pml::wire::{Frame, MAX_HEADER_LEN};

pub fn frame_bytes(frame: &Frame<'_>) -> Vec<u8> {
    let mut header = [0u8; MAX_HEADER_LEN];
    let n = frame.encode_header(&mut header);
    let mut bytes = header[..n].to_vec();
    bytes.extend_from_slice(frame.payload());
    bytes
}
