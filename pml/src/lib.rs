//! pml: mpirt's point-to-point messaging layer.
//!
//! The matching ([`matching`]) and protocol ([`protocol`]) cores do no I/O: they take events
//! and hand back frames to send and reads to perform. Transports ([`transport`]) move bytes.

pub mod blocks;
mod bulk_copy;
pub mod config;
pub mod engine;
pub mod envelope;
pub mod error;
pub mod fast_hash;
pub mod freed_memory;
pub mod host_files;
mod keyed_queues;
pub mod matching;
pub mod membarrier;
pub mod nap;
pub mod one_sided;
pub mod pml_api;
pub mod protocol;
mod random;
#[cfg(any(feature = "verbs", feature = "ofi", test))]
mod registration_cache;
pub mod requests;
pub mod sequence;
pub mod shared_arena;
pub mod shared_mapping;
pub mod stall;
pub mod transport;
#[cfg(feature = "ucx")]
pub mod ucx;
pub mod waiting;
pub mod wire;

pub use config::{EngineConfig, TransportChoice};
pub use engine::{Bridge, BridgePeer, Engine};
pub use envelope::{
    mark_of, match_key, ContextId, Envelope, Rank, SourceSel, Status, Tag, TagSel, MARKED_TAGS,
    MARK_BITS, MIN_RUNTIME_TAG,
};
pub use error::PmlError;
pub use freed_memory::TrackingAllocator;
pub use nap::{MovedMark, Nap, NapStart};
pub use one_sided::{OneSided, RmaReach, WindowExposure};
pub use pml_api::{Counters, Done, EngineError, Pml, RecvBuf, Wireup};
pub use protocol::{
    Action, ClaimEnd, Completion, Core, CoreConfig, MessageHandle, Payload, PeerCaps, SendArgs,
    SendBytes, SendMode, Started,
};
pub use requests::Handle;
pub use waiting::Waiting;
pub use wire::RemoteKey;
