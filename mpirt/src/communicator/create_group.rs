//! `MPI_Comm_create_group`: a communicator made by the members of a group alone, which agree
//! on its context id without the rest of the parent communicator. The group's first member
//! leads: the others send it the context ids they use and their tag, it answers each with the
//! lowest id none of them uses (or why there is none). The messages travel on the parent's
//! context under a tag of the runtime's, which no user receive and no collective matches.

use pml::{Done, Pml, SourceSel, TagSel};

use super::{CommData, SimpleCommunicator};
use crate::context;
use crate::environment::{self, with_engine};
use crate::error::Cause;
use crate::point_to_point::{post_runtime_send, Tag};

/// The runtime tag of the agreement (one of those collectives leave free).
const AGREEMENT_TAG: i32 = -2;

/// The leader's answer: the agreed context id; or the leader's tag and the first member
/// whose tag differs (its group rank and tag); or that every id is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Agreed(u32),
    TagsDisagree { leader: Tag, rank: i32, tag: Tag },
    Exhausted,
}

impl Answer {
    fn encode(self) -> [i64; 4] {
        match self {
            Answer::Agreed(id) => [0, i64::from(id), 0, 0],
            Answer::TagsDisagree { leader, rank, tag } => {
                [1, i64::from(leader), i64::from(rank), i64::from(tag)]
            }
            Answer::Exhausted => [2, 0, 0, 0],
        }
    }

    fn decode(words: [i64; 4]) -> Answer {
        match words[0] {
            0 => Answer::Agreed(words[1] as u32),
            1 => Answer::TagsDisagree {
                leader: words[1] as Tag,
                rank: words[2] as i32,
                tag: words[3] as Tag,
            },
            _ => Answer::Exhausted,
        }
    }
}

/// The communicator of `members` (world ranks, a subgroup of `parent`'s), or `None` on a
/// process outside it; collective over the members.
pub(super) fn create(
    parent: &CommData,
    members: &[u32],
    tag: Tag,
) -> Result<Option<SimpleCommunicator>, Cause> {
    // Its messages go point to point, which a view allows: refuse it here as the collectives
    // refuse themselves, or members on views and on full handles deadlock.
    parent.collectives_allowed()?;
    let me = parent.world_rank(parent.rank);
    if !members.contains(&me) {
        return Ok(None);
    }
    let _creating = context::creating();
    // A member's rank in the parent, which the messages are addressed by.
    let in_parent = |world: u32| -> u32 {
        (0..parent.size)
            .find(|&r| parent.world_rank(r) == world)
            .expect("a subgroup's members are in the parent")
    };
    let leader = in_parent(members[0]);
    let answer = if parent.rank == leader {
        let mut offers = Vec::with_capacity(members.len() - 1);
        for &member in &members[1..] {
            offers.push(receive(parent, in_parent(member), 1 + context::WORDS)?);
        }
        let answer = lead(tag, &offers);
        for &member in &members[1..] {
            send(parent, in_parent(member), &answer.encode())?;
        }
        answer
    } else {
        let mut offer = vec![i64::from(tag)];
        offer.extend(context::in_use().iter().map(|&w| w as i64));
        send(parent, leader, &offer)?;
        let words = receive(parent, leader, 4)?;
        Answer::decode(words.try_into().expect("four words"))
    };
    match answer {
        Answer::Agreed(id) => Ok(parent.made_of(members.to_vec(), context::lease(id), None)),
        Answer::TagsDisagree { leader, rank, tag } => Err(Cause::TagsDisagree {
            tag: leader,
            other: tag,
            rank,
        }),
        Answer::Exhausted => Err(Cause::ContextIdsExhausted),
    }
}

/// The leader's answer to the other members' offers (each their tag, then the context ids
/// they use), given its own `tag`.
fn lead(tag: Tag, offers: &[Vec<i64>]) -> Answer {
    let mut used = context::in_use();
    for offer in offers {
        for (word, &theirs) in used.iter_mut().zip(&offer[1..]) {
            *word |= theirs as u64;
        }
    }
    let disagreement = offers.iter().position(|offer| offer[0] != i64::from(tag));
    match (disagreement, context::lowest_free(&used)) {
        (Some(i), _) => Answer::TagsDisagree {
            leader: tag,
            rank: i as i32 + 1,
            tag: offers[i][0] as Tag,
        },
        (None, Some(id)) => Answer::Agreed(id),
        (None, None) => Answer::Exhausted,
    }
}

/// Sends `words` to `peer`, a rank of `parent`, and waits for the send.
fn send(parent: &CommData, peer: u32, words: &[i64]) -> Result<(), Cause> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    // SAFETY: `bytes` lives until this call returns, and the call waits for the send.
    let handle =
        unsafe { post_runtime_send(parent, parent.world_rank(peer), AGREEMENT_TAG, &bytes) }?;
    environment::wait(handle).map(drop)
}

/// Receives exactly `count` words from `peer`, a rank of `parent`.
fn receive(parent: &CommData, peer: u32, count: usize) -> Result<Vec<i64>, Cause> {
    let mut bytes = vec![0u8; count * 8];
    // SAFETY: `bytes` lives until this call returns, and the call waits for the receive.
    let handle = with_engine(|e| unsafe {
        e.post_recv(
            parent.context,
            SourceSel::Rank(peer),
            TagSel::Tag(AGREEMENT_TAG),
            bytes.as_mut_ptr(),
            bytes.len(),
        )
    })?;
    let done = environment::wait(handle)?;
    if let Done::Received(status) = done {
        if status.len != bytes.len() {
            return Err(Cause::LengthDisagrees {
                peer: peer as i32,
                expected: bytes.len(),
                got: status.len,
            });
        }
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|w| i64::from_ne_bytes(w.try_into().expect("8 bytes")))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_agrees_on_a_free_id_or_names_the_first_other_tag() {
        let offer = |tag: i64, first_word: i64| {
            let mut words = vec![tag, first_word];
            words.resize(1 + context::WORDS, 0);
            words
        };
        // This process uses ids 0 and 1 (world and self); members use 2 and 3.
        assert_eq!(
            lead(7, &[offer(7, 0b100), offer(7, 0b1000)]),
            Answer::Agreed(4)
        );
        let disagree = lead(7, &[offer(7, 0), offer(8, 0), offer(9, 0)]);
        assert_eq!(
            disagree,
            Answer::TagsDisagree {
                leader: 7,
                rank: 2,
                tag: 8
            }
        );
        for answer in [disagree, Answer::Agreed(12), Answer::Exhausted] {
            assert_eq!(Answer::decode(answer.encode()), answer);
        }
        assert_eq!(lead(0, &[offer(0, -1)]), Answer::Agreed(64));
    }
}
