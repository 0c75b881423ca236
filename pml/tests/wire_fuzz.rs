//! Arbitrary bytes into the frame decoder and into a live core: errors, never panics.

use pml::protocol::{Core, CoreConfig, PeerCaps};
use pml::wire::{plain_match, Frame, VERSION};
use proptest::prelude::*;

mod frames_common;
use frames_common::frame_bytes;

fn valid_prefix() -> impl Strategy<Value = Vec<u8>> {
    // Start most inputs with this build's version and a plausible kind so the fuzzing reaches
    // past the first checks into every kind's field validation, and one past the last kind
    // (WAKE, 8), which must be refused.
    (
        Just(VERSION),
        0u8..10,
        0u8..3,
        prop::collection::vec(any::<u8>(), 0..80),
    )
        .prop_map(|(v, k, f, rest)| {
            let mut b = vec![v, k, f, 0];
            b.extend(rest);
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn decoding_never_panics(bytes in prop_oneof![prop::collection::vec(any::<u8>(), 0..128), valid_prefix()]) {
        let decoded = Frame::decode(&bytes);
        // The receive's fast path takes exactly the asynchronous MATCH frames decode accepts.
        match (plain_match(&bytes), &decoded) {
            (Some((envelope, payload)), Ok(Frame::Match { envelope: e, sync_request: None, payload: p })) => {
                prop_assert_eq!(envelope, *e);
                prop_assert_eq!(payload, *p);
            }
            (None, Ok(Frame::Match { sync_request: None, .. })) | (Some(_), _) => {
                prop_assert!(false, "plain_match and decode disagree on {:?}", bytes);
            }
            _ => {}
        }
        if let Ok(frame) = decoded {
            // Whatever decodes re-encodes to the same bytes.
            prop_assert_eq!(frame_bytes(&frame), bytes);
        }
    }

    #[test]
    fn a_core_survives_garbage(frames in prop::collection::vec(valid_prefix(), 1..20)) {
        let mut core: Core<Vec<u8>, Vec<u8>> = Core::new(1, CoreConfig::default());
        core.set_peer(0, PeerCaps { eager_limit: 64, max_frame: 256, remote_read: false });
        for f in frames {
            let _ = core.on_frame(0, &f);
        }
        while let Some(p) = core.next_ready_peer() {
            while core.next_transmit(p).is_some() {
                core.transmitted(p);
            }
        }
    }
}
