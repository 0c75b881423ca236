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
            TagSel::Tag(t) => t == tag,
        }
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
    fn any_source_takes_every_rank() {
        assert!(SourceSel::Any.accepts(0));
        assert!(SourceSel::Any.accepts(u32::MAX));
        assert!(SourceSel::Rank(2).accepts(2));
        assert!(!SourceSel::Rank(2).accepts(3));
    }
}
