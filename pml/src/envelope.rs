//! Who a message is from, what it is about, and which receives may take it.

/// A communicator's context id: messages in different contexts never match.
pub type ContextId = u32;
/// A process's rank, within a communicator or the world (the caller says which).
pub type Rank = u32;
/// A message tag. Non-negative tags are the user's; negative ones belong to the runtime.
pub type Tag = i32;

/// The matching part of a message: what a receive's selectors are compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    pub context: ContextId,
    pub source: Rank,
    pub tag: Tag,
}

/// The source a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceSel {
    Any,
    Rank(Rank),
}

/// The tag a receive accepts. `Any` takes only user (non-negative) tags, so runtime traffic
/// such as collectives can never be stolen by a user's `ANY_TAG` receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagSel {
    Any,
    Tag(Tag),
}

impl SourceSel {
    pub fn accepts(self, source: Rank) -> bool {
        match self {
            SourceSel::Any => true,
            SourceSel::Rank(r) => r == source,
        }
    }
}

impl TagSel {
    pub fn accepts(self, tag: Tag) -> bool {
        match self {
            TagSel::Any => is_user_tag(tag),
            TagSel::Tag(t) => match_key(t) == match_key(tag),
        }
    }
}

/// Runtime tags at or below this one carry a mark in their low [`MARK_BITS`] bits, which
/// matching ignores and the receiver reads back from the status (the collectives' algorithm,
/// as MPICH's collectives carry an error bit in theirs): such a tag is a multiple of
/// `1 << MARK_BITS` plus its mark, so the tags -17 to -24 share one key, -25 to -32 the next,
/// and -1 to -16 keep their own.
pub const MARKED_TAGS: Tag = -17;
pub const MARK_BITS: u32 = 3;
const MARK_FIELD: Tag = (1 << MARK_BITS) - 1;

/// What matching compares of `tag`: the tag without its mark.
#[inline]
pub const fn match_key(tag: Tag) -> Tag {
    if tag <= MARKED_TAGS {
        tag & !MARK_FIELD
    } else {
        tag
    }
}

/// The mark a tag carries (0 for one above [`MARKED_TAGS`]).
#[inline]
pub fn mark_of(tag: Tag) -> u8 {
    if tag <= MARKED_TAGS {
        (tag & MARK_FIELD) as u8
    } else {
        0
    }
}

/// The lowest tag the runtime uses, so that every PML can carry its tags: the UCX PML has 24
/// bits for a tag in UCX's 64-bit tag (see `ucx::tag`).
pub const MIN_RUNTIME_TAG: Tag = -(1 << 23);

/// User tags are the non-negative ones; the runtime keeps the negative ones for itself.
pub fn is_user_tag(tag: Tag) -> bool {
    tag >= 0
}

/// What a completed receive or a probe reports about the message it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub source: Rank,
    pub tag: Tag,
    /// The message's length in bytes as sent (larger than what was delivered when truncated).
    pub len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_tag_never_takes_runtime_tags() {
        assert!(TagSel::Any.accepts(0));
        assert!(TagSel::Any.accepts(i32::MAX));
        assert!(!TagSel::Any.accepts(-1));
        assert!(TagSel::Tag(-7).accepts(-7));
        assert!(!TagSel::Tag(3).accepts(4));
    }

    #[test]
    fn marks_are_ignored_by_matching_and_read_back() {
        // -24 is a key; -24 + m carries the mark m.
        for m in 0..8 {
            assert!(TagSel::Tag(-24).accepts(-24 + m));
            assert!(TagSel::Tag(-24 + m).accepts(-24));
            assert_eq!(mark_of(-24 + m), m as u8);
            assert_eq!(match_key(-24 + m), -24);
        }
        assert!(!TagSel::Tag(-24).accepts(-25));
        assert!(!TagSel::Tag(-24).accepts(-16));
        assert_eq!(mark_of(MIN_RUNTIME_TAG + 5), 5);
        assert_eq!(match_key(MIN_RUNTIME_TAG + 5), MIN_RUNTIME_TAG);
        // Tags above the marked ones, and user tags, are whole keys.
        for t in [-16, -9, -8, -1, 0, 7, 9, i32::MAX] {
            assert_eq!((match_key(t), mark_of(t)), (t, 0));
        }
        assert!(!TagSel::Tag(-9).accepts(-10));
    }

    #[test]
    fn any_source_takes_every_rank() {
        assert!(SourceSel::Any.accepts(0));
        assert!(SourceSel::Any.accepts(u32::MAX));
        assert!(SourceSel::Rank(2).accepts(2));
        assert!(!SourceSel::Rank(2).accepts(3));
    }
}
