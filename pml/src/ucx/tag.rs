//! The MPI envelope packed into UCX's 64-bit tag, and the (tag, mask) pairs receives and
//! probes match with. UCX matches `sent & mask == wanted & mask`, so a wildcard is a field
//! left out of the mask.
//!
//! ```text
//!  63            48 47                    24 23 22                      0
//! +----------------+------------------------+--+-------------------------+
//! | context (16)   | source rank (24)       |s | tag (24, two's complement)|
//! +----------------+------------------------+--+-------------------------+
//! ```
//!
//! - context: 16 bits. mpirt's agreed context ids are below 4096, and the parts its
//!   hierarchical collectives make of a communicator add 4096 (a host's ranks) or 8192 (the
//!   hosts' leaders) to its id: at most 12 287, which leaves room (`MAX_CONTEXT` is 65 535).
//! - source: 24 bits, up to 16 777 215 ranks. `ANY_SOURCE` drops the field from the mask.
//! - tag: 24 bits, two's complement. User tags are 0..=8 388 607 (MPI only promises 32 767);
//!   runtime tags are -8 388 608..=-1. `ANY_TAG` drops the low 23 bits from the mask but
//!   keeps the sign bit `s`, wanting it clear: a user's `ANY_TAG` receive can never take a
//!   runtime (negative-tag) message, as in the native PML (`TagSel::Any`).
//!
//! A value that does not fit its field is refused, never truncated: a truncated tag would
//! silently match someone else's message.

use std::fmt;

use crate::envelope::{
    match_key, ContextId, Envelope, Rank, SourceSel, Tag, TagSel, MARKED_TAGS, MARK_BITS,
};

const TAG_BITS: u32 = 24;
const SOURCE_BITS: u32 = 24;
const CONTEXT_BITS: u32 = 16;

const SOURCE_SHIFT: u32 = TAG_BITS;
const CONTEXT_SHIFT: u32 = TAG_BITS + SOURCE_BITS;

const TAG_FIELD: u64 = (1 << TAG_BITS) - 1;
const TAG_SIGN: u64 = 1 << (TAG_BITS - 1);
const MARK_FIELD: u64 = (1 << MARK_BITS) - 1;
const SOURCE_FIELD: u64 = ((1 << SOURCE_BITS) - 1) << SOURCE_SHIFT;
const CONTEXT_FIELD: u64 = ((1 << CONTEXT_BITS) - 1) << CONTEXT_SHIFT;

/// The largest user tag: what the runtime reports as `MPI_TAG_UB` on this PML.
pub const MAX_USER_TAG: Tag = (1 << (TAG_BITS - 1)) - 1;
/// The most negative runtime tag that fits.
pub const MIN_RUNTIME_TAG: Tag = -(1 << (TAG_BITS - 1));
// Every tag the layers above use as a runtime tag fits this PML's field.
const _: () = assert!(MIN_RUNTIME_TAG <= crate::envelope::MIN_RUNTIME_TAG);
pub const MAX_CONTEXT: ContextId = (1 << CONTEXT_BITS) - 1;
pub const MAX_RANK: Rank = (1 << SOURCE_BITS) - 1;

/// The tag UCX tells senders apart by (`ucp_params_t::tag_sender_mask`).
pub const SENDER_MASK: u64 = SOURCE_FIELD;

/// An envelope field too large for its place in the UCX tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagError {
    Context(ContextId),
    Source(Rank),
    Tag(Tag),
}

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TagError::Context(c) => write!(
                f,
                "context id {c} does not fit the UCX PML's {CONTEXT_BITS}-bit context field \
                 (at most {MAX_CONTEXT})"
            ),
            TagError::Source(r) => write!(
                f,
                "rank {r} does not fit the UCX PML's {SOURCE_BITS}-bit source field \
                 (at most {MAX_RANK})"
            ),
            TagError::Tag(t) => write!(
                f,
                "tag {t} does not fit the UCX PML's {TAG_BITS}-bit tag field (user tags \
                 0..={MAX_USER_TAG}, runtime tags {MIN_RUNTIME_TAG}..=-1)"
            ),
        }
    }
}

impl std::error::Error for TagError {}

fn context_bits(context: ContextId) -> Result<u64, TagError> {
    if context > MAX_CONTEXT {
        return Err(TagError::Context(context));
    }
    Ok(u64::from(context) << CONTEXT_SHIFT)
}

fn source_bits(source: Rank) -> Result<u64, TagError> {
    if source > MAX_RANK {
        return Err(TagError::Source(source));
    }
    Ok(u64::from(source) << SOURCE_SHIFT)
}

#[inline]
fn tag_bits(tag: Tag) -> Result<u64, TagError> {
    if !(MIN_RUNTIME_TAG..=MAX_USER_TAG).contains(&tag) {
        return Err(TagError::Tag(tag));
    }
    // Two's complement cut to the field: -1 becomes 0xff_ffff.
    Ok(tag as u32 as u64 & TAG_FIELD)
}

/// The UCX tag a message with this envelope is sent with.
#[inline]
pub fn pack(envelope: Envelope) -> Result<u64, TagError> {
    Ok(context_bits(envelope.context)? | source_bits(envelope.source)? | tag_bits(envelope.tag)?)
}

/// The envelope a received tag carries.
pub fn unpack(tag: u64) -> Envelope {
    let field = (tag & TAG_FIELD) as u32;
    // Sign-extend the 24-bit field: shift its sign bit to bit 31, then back arithmetically.
    let user_tag = ((field << (32 - TAG_BITS)) as i32) >> (32 - TAG_BITS);
    Envelope {
        context: (tag >> CONTEXT_SHIFT) as ContextId,
        source: ((tag & SOURCE_FIELD) >> SOURCE_SHIFT) as Rank,
        tag: user_tag,
    }
}

/// The (tag, mask) pair a receive or probe with these selectors matches with.
#[inline]
pub fn selector(
    context: ContextId,
    source: SourceSel,
    tag: TagSel,
) -> Result<(u64, u64), TagError> {
    let mut wanted = context_bits(context)?;
    let mut mask = u64::MAX;
    match source {
        SourceSel::Rank(r) => wanted |= source_bits(r)?,
        SourceSel::Any => mask &= !SOURCE_FIELD,
    }
    match tag {
        // A marked tag's mark is left out of the mask: matching ignores it, as the native
        // PML's does (`envelope::match_key`).
        TagSel::Tag(t) if t <= MARKED_TAGS => {
            wanted |= tag_bits(match_key(t))?;
            mask &= !MARK_FIELD;
        }
        TagSel::Tag(t) => wanted |= tag_bits(t)?,
        // The sign bit stays in the mask with `wanted` clear there: only user tags match.
        TagSel::Any => mask &= !(TAG_FIELD & !TAG_SIGN),
    }
    Ok((wanted, mask))
}

/// The (tag, mask) pairs of probes that find what UCX holds unreceived near a receive that
/// waits (UCX shows its unexpected queue only through probes, each the first match): a
/// message from its source with another user tag, one with its tag from another source,
/// one from its source with its tag on another communicator, and the oldest user message
/// of all. A wildcard receive has no near miss in the field it leaves open; for one of any
/// source and any tag the other-communicator probe is the oldest-message probe, made once.
pub fn near_misses(
    context: ContextId,
    source: SourceSel,
    tag: TagSel,
) -> Result<Vec<(u64, u64)>, TagError> {
    let mut probes = vec![(0, TAG_SIGN)];
    if matches!(tag, TagSel::Tag(_)) {
        probes.push(selector(context, source, TagSel::Any)?);
    }
    if matches!(source, SourceSel::Rank(_)) {
        probes.push(selector(context, SourceSel::Any, tag)?);
    }
    let (wanted, mask) = selector(context, source, tag)?;
    let other_communicator = (wanted & !CONTEXT_FIELD, mask & !CONTEXT_FIELD);
    if other_communicator != probes[0] {
        probes.push(other_communicator);
    }
    Ok(probes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(context: ContextId, source: Rank, tag: Tag) -> Envelope {
        Envelope {
            context,
            source,
            tag,
        }
    }

    fn matches(sent: Envelope, context: ContextId, source: SourceSel, tag: TagSel) -> bool {
        let (wanted, mask) = selector(context, source, tag).unwrap();
        pack(sent).unwrap() & mask == wanted & mask
    }

    #[test]
    fn envelopes_round_trip_at_the_edges_of_each_field() {
        for e in [
            env(0, 0, 0),
            env(MAX_CONTEXT, MAX_RANK, MAX_USER_TAG),
            env(1, 2, -1),
            env(7, 0, MIN_RUNTIME_TAG),
            env(4095, 1 << 20, 32767),
            // The highest id of a hierarchical collective's leaders (mpirt's 4095 + 8192),
            // with their runtime tag.
            env(12287, 3, -5),
        ] {
            assert_eq!(unpack(pack(e).unwrap()), e);
        }
    }

    #[test]
    fn fields_do_not_bleed_into_each_other() {
        assert_eq!(pack(env(0, 0, -1)).unwrap(), TAG_FIELD);
        assert_eq!(pack(env(0, 1, 0)).unwrap(), 1 << 24);
        assert_eq!(pack(env(1, 0, 0)).unwrap(), 1 << 48);
    }

    #[test]
    fn values_that_do_not_fit_are_refused() {
        assert_eq!(
            pack(env(MAX_CONTEXT + 1, 0, 0)),
            Err(TagError::Context(65536))
        );
        assert_eq!(
            pack(env(0, MAX_RANK + 1, 0)),
            Err(TagError::Source(1 << 24))
        );
        assert_eq!(
            pack(env(0, 0, MAX_USER_TAG + 1)),
            Err(TagError::Tag(1 << 23))
        );
        assert_eq!(
            pack(env(0, 0, MIN_RUNTIME_TAG - 1)),
            Err(TagError::Tag(-(1 << 23) - 1))
        );
        let message = TagError::Tag(-(1 << 30)).to_string();
        assert!(
            message.contains("-1073741824") && message.contains("8388607"),
            "{message}"
        );
        assert!(selector(0, SourceSel::Rank(MAX_RANK + 1), TagSel::Any).is_err());
    }

    #[test]
    fn specific_selectors_take_only_their_envelope() {
        let sel = (3, SourceSel::Rank(5), TagSel::Tag(9));
        assert!(matches(env(3, 5, 9), sel.0, sel.1, sel.2));
        assert!(!matches(env(4, 5, 9), sel.0, sel.1, sel.2));
        assert!(!matches(env(3, 6, 9), sel.0, sel.1, sel.2));
        assert!(!matches(env(3, 5, 10), sel.0, sel.1, sel.2));
        assert!(matches(
            env(3, 5, -9),
            3,
            SourceSel::Rank(5),
            TagSel::Tag(-9)
        ));
    }

    #[test]
    fn marked_tags_match_whatever_their_mark_and_unpack_with_it() {
        for mark in 0..8 {
            let sent = env(3, 5, -24 + mark);
            assert!(matches(sent, 3, SourceSel::Rank(5), TagSel::Tag(-24)));
            assert!(matches(sent, 3, SourceSel::Any, TagSel::Tag(-20)));
            assert_eq!(unpack(pack(sent).unwrap()), sent);
        }
        assert!(!matches(
            env(3, 5, -25),
            3,
            SourceSel::Rank(5),
            TagSel::Tag(-24)
        ));
        assert!(!matches(
            env(3, 5, -16),
            3,
            SourceSel::Rank(5),
            TagSel::Tag(-24)
        ));
        assert!(!matches(
            env(3, 5, -10),
            3,
            SourceSel::Rank(5),
            TagSel::Tag(-9)
        ));
    }

    #[test]
    fn wildcards_span_their_field_only() {
        assert!(matches(
            env(3, MAX_RANK, 9),
            3,
            SourceSel::Any,
            TagSel::Tag(9)
        ));
        assert!(!matches(env(2, 1, 9), 3, SourceSel::Any, TagSel::Tag(9)));
        assert!(matches(
            env(3, 5, MAX_USER_TAG),
            3,
            SourceSel::Rank(5),
            TagSel::Any
        ));
        assert!(matches(env(3, 5, 0), 3, SourceSel::Any, TagSel::Any));
        assert!(!matches(env(3, 6, 0), 3, SourceSel::Rank(5), TagSel::Any));
        assert!(!matches(env(4, 5, 0), 3, SourceSel::Any, TagSel::Any));
    }

    #[test]
    fn any_tag_never_takes_runtime_tags() {
        for t in [-1, -2, MIN_RUNTIME_TAG, -(1 << 22)] {
            assert!(
                !matches(env(0, 0, t), 0, SourceSel::Any, TagSel::Any),
                "{t}"
            );
            assert!(
                !matches(env(0, 0, t), 0, SourceSel::Rank(0), TagSel::Any),
                "{t}"
            );
        }
    }

    #[test]
    fn sender_mask_is_the_source_field() {
        let sent = pack(env(9, 1234, -5)).unwrap();
        assert_eq!((sent & SENDER_MASK) >> SOURCE_SHIFT, 1234);
    }

    #[test]
    fn near_misses_open_one_field_each() {
        let probes = near_misses(3, SourceSel::Rank(1), TagSel::Tag(7)).unwrap();
        let takes = |sent: Envelope| {
            let t = pack(sent).unwrap();
            probes
                .iter()
                .map(|&(w, m)| t & m == w & m)
                .collect::<Vec<_>>()
        };
        assert_eq!(takes(env(3, 1, 8)), [true, true, false, false], "other tag");
        assert_eq!(
            takes(env(3, 2, 7)),
            [true, false, true, false],
            "other source"
        );
        assert_eq!(
            takes(env(4, 1, 7)),
            [true, false, false, true],
            "other communicator"
        );
        assert_eq!(
            takes(env(4, 2, 8)),
            [true, false, false, false],
            "any user message"
        );
        assert_eq!(
            takes(env(3, 1, -5)),
            [false; 4],
            "runtime traffic is never a near miss"
        );
        let wild = near_misses(3, SourceSel::Any, TagSel::Any).unwrap();
        // Another communicator's message is the oldest user message of all: one probe.
        assert_eq!(wild, [(0, TAG_SIGN)], "only the oldest message");
    }
}
