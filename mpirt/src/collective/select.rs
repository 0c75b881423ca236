//! Which algorithm a collective uses: chosen by message and communicator size, or forced with
//! `MPIRT_COLL_<COLLECTIVE>=<algorithm>` (read once per process).

use std::collections::HashMap;
use std::sync::OnceLock;

use super::schedule::Marked;
use crate::error::Cause;

/// Broadcasts up to this many bytes (or on up to `BROADCAST_FEW` ranks) go down a binomial
/// tree; longer ones are scattered, then all-gathered (MPICH's long-message thresholds: the
/// ring's n-1 steps pay off only for long messages on many ranks).
const BROADCAST_SHORT: usize = 512 << 10;
const BROADCAST_FEW: u32 = 7;
/// Broadcasts on up to this many ranks go straight from the root to each rank, at any length
/// (libnbc's choice for its non-blocking broadcast): every rank's part is one round, and no
/// rank waits for another to pass the data on. Chosen by the number of ranks alone, which
/// every rank shares, so ranks of different lengths never meet on it and another algorithm.
const BROADCAST_LINEAR: u32 = 4;
/// All-reduce vectors up to this many bytes go by recursive doubling (latency-bound).
const ALLREDUCE_SHORT: usize = 8 << 10;
/// Longer ones by Rabenseifner up to this many bytes, then by ring.
const ALLREDUCE_RING: usize = 1 << 20;
/// Reductions to a root of more than this many bytes go by reduce-scatter then gather
/// (Rabenseifner), shorter ones up a binomial tree.
const REDUCE_LONG: usize = 64 << 10;
/// All-gathers whose result is up to this many bytes go by Bruck (ranks not a power of two);
/// longer ones by ring.
const ALLGATHER_SHORT: usize = 64 << 10;
/// On a power of two of ranks, results up to this many bytes go by recursive doubling: the
/// same bytes into each rank as the ring's in log2(n) messages instead of n - 1, with none of
/// Bruck's final rotation (the ring took 1.36 and 1.14 times Open MPI's time for 128 and
/// 256 KiB on 16 Intel cores, a rank each, where doubling's 64 KiB on 8 took 0.71;
/// notes/s30/device1).
const ALLGATHER_DOUBLING: usize = 256 << 10;
/// All-to-all blocks up to this many bytes all go at once; longer ones pairwise.
const ALLTOALL_SHORT: usize = 256;
/// From this many ranks of the communicator on this rank's host, longer all-to-all blocks
/// also go at once: pairwise, each of a rank's n - 1 rounds waits for one peer, which with
/// many ranks a host (here 128 on 2 cores) is mostly not running, while with every
/// message posted at once a rank takes them as its peers come (128 ranks, 32 KiB blocks:
/// linear 0.35 of pairwise's time, median of 3 paired runs under load, osu-benches/REPORT.md).
/// Pairwise and linear send one message each way between each pair of ranks, and across
/// hosts share a mark and the leaders' messages first, so hosts that choose differently meet.
const ALLTOALL_LINEAR_RANKS: u32 = 64;
/// Gather and scatter results up to this many bytes go through a binomial tree; beyond that
/// the tree's extra copies cost more than its fewer rounds save, so they go linearly.
const ROOTED_SHORT: usize = 256 << 10;

/// One collective's algorithms and how its variable is named.
struct Choice {
    variable: &'static str,
    choices: &'static [&'static str],
}

const BROADCAST: Choice = Choice {
    variable: "MPIRT_COLL_BCAST",
    choices: &["shared_memory", "binomial", "scatter_allgather", "linear"],
};
const BARRIER: Choice = Choice {
    variable: "MPIRT_COLL_BARRIER",
    choices: &["shared_memory", "dissemination"],
};
const ALLREDUCE: Choice = Choice {
    variable: "MPIRT_COLL_ALLREDUCE",
    choices: &[
        "shared_memory",
        "recursive_doubling",
        "rabenseifner",
        "ring",
    ],
};
const ALLGATHER: Choice = Choice {
    variable: "MPIRT_COLL_ALLGATHER",
    choices: &["shared_memory", "recursive_doubling", "bruck", "ring"],
};
const ALLTOALL: Choice = Choice {
    variable: "MPIRT_COLL_ALLTOALL",
    choices: &["shared_memory", "pairwise", "linear"],
};
const GATHER: Choice = Choice {
    variable: "MPIRT_COLL_GATHER",
    choices: &["shared_memory", "binomial", "linear"],
};
const SCATTER: Choice = Choice {
    variable: "MPIRT_COLL_SCATTER",
    choices: &["shared_memory", "binomial", "linear"],
};
const REDUCE: Choice = Choice {
    variable: "MPIRT_COLL_REDUCE",
    choices: &["shared_memory", "binomial", "reduce_scatter_gather"],
};
const REDUCE_SCATTER: Choice = Choice {
    variable: "MPIRT_COLL_REDUCE_SCATTER",
    choices: &["shared_memory", "ring", "reduce_scatter"],
};

const ALL: [&Choice; 9] = [
    &BARRIER,
    &BROADCAST,
    &REDUCE,
    &ALLREDUCE,
    &ALLGATHER,
    &ALLTOALL,
    &GATHER,
    &SCATTER,
    &REDUCE_SCATTER,
];

/// The `MPIRT_COLL_*` settings of this process.
fn overrides() -> &'static HashMap<&'static str, String> {
    static OVERRIDES: OnceLock<HashMap<&'static str, String>> = OnceLock::new();
    OVERRIDES.get_or_init(|| {
        ALL.iter()
            .filter_map(|c| std::env::var(c.variable).ok().map(|v| (c.variable, v)))
            .collect()
    })
}

impl Choice {
    /// The forced algorithm, if any (an error if it is not one of this collective's).
    fn forced(&self) -> Result<Option<&'static str>, Cause> {
        let overrides = overrides();
        if overrides.is_empty() {
            // No string hashed on every call of a job that forces nothing.
            return Ok(None);
        }
        match overrides.get(self.variable) {
            None => Ok(None),
            Some(value) => self
                .choices
                .iter()
                .find(|c| **c == value.as_str())
                .map(|c| Some(*c))
                .ok_or_else(|| Cause::UnknownAlgorithm {
                    variable: self.variable.to_string(),
                    value: value.clone(),
                    choices: self.choices,
                }),
        }
    }

    /// Whether blocking calls go through the shared-memory area: by default, or forced.
    fn in_shared_memory(&self) -> Result<bool, Cause> {
        Ok(matches!(self.forced()?, None | Some("shared_memory")))
    }

    /// The mark of algorithm `index` among those by messages (`choices` past
    /// "shared_memory", in the order of the collective's enum).
    fn marked(&self, index: usize) -> Marked {
        let names: &'static [&'static str] = self.choices;
        Marked::new(&names[1..], index)
    }
}

impl Broadcast {
    pub(crate) fn marked(self) -> Marked {
        BROADCAST.marked(self as usize)
    }
}

impl Reduce {
    pub(crate) fn marked(self) -> Marked {
        REDUCE.marked(self as usize)
    }
}

impl Allreduce {
    pub(crate) fn marked(self) -> Marked {
        ALLREDUCE.marked(self as usize)
    }
}

impl Allgather {
    pub(crate) fn marked(self) -> Marked {
        ALLGATHER.marked(self as usize)
    }
}

/// The all-to-all's algorithms as marks name them: pairwise and linear send one message each
/// way between each pair of ranks, so ranks on one host leave their plans unmarked, and
/// across hosts, where the leaders' plan differs and plans are marked, they share a mark (a
/// host with many ranks chooses linear where the others choose pairwise).
const ALLTOALL_MARKS: [&str; 2] = ["pairwise or linear", "hierarchical"];

impl Alltoall {
    pub(crate) fn marked(self) -> Marked {
        let index = match self {
            Alltoall::Pairwise | Alltoall::Linear => 0,
            Alltoall::Hierarchical => 1,
        };
        Marked::new(&ALLTOALL_MARKS, index)
    }
}

impl Rooted {
    pub(crate) fn gather_marked(self) -> Marked {
        GATHER.marked(self as usize)
    }

    pub(crate) fn scatter_marked(self) -> Marked {
        SCATTER.marked(self as usize)
    }
}

/// Whether all-reduces by messages choose their algorithm by length (none is forced), so
/// that ranks whose lengths disagree may choose different ones.
pub(crate) fn allreduce_by_length() -> Result<bool, Cause> {
    Ok(ALLREDUCE.forced()?.is_none())
}

/// Whether all-gathers by messages choose their algorithm by length (none is forced, or the
/// area is, which leaves parts too long for it to the length's choice).
pub(crate) fn allgather_by_length() -> Result<bool, Cause> {
    ALLGATHER.in_shared_memory()
}

/// Whether all-to-alls by messages choose their algorithm by length (none is forced, or the
/// area is, which leaves blocks too long for it to the length's choice).
pub(crate) fn alltoall_by_length() -> Result<bool, Cause> {
    ALLTOALL.in_shared_memory()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Broadcast {
    Binomial,
    ScatterAllgather,
    Linear,
}

/// Whether blocking barriers meet in the communicator's shared-memory area (when it has
/// one), as they do by default or forced.
pub(crate) fn barrier_in_shared_memory() -> Result<bool, Cause> {
    BARRIER.in_shared_memory()
}

/// Whether blocking broadcasts go through the communicator's shared-memory area (when it has
/// one and the root's buffer fits), as they do by default or forced, never when another
/// algorithm is forced.
pub(crate) fn broadcast_in_shared_memory() -> Result<bool, Cause> {
    BROADCAST.in_shared_memory()
}

pub(crate) fn broadcast(bytes: usize, size: u32) -> Result<Broadcast, Cause> {
    Ok(match BROADCAST.forced()? {
        Some("binomial") => Broadcast::Binomial,
        Some("scatter_allgather") => Broadcast::ScatterAllgather,
        Some("linear") => Broadcast::Linear,
        // "shared_memory": for buffers too long for the area.
        _ if size <= BROADCAST_LINEAR => Broadcast::Linear,
        _ if bytes <= BROADCAST_SHORT || size <= BROADCAST_FEW => Broadcast::Binomial,
        _ => Broadcast::ScatterAllgather,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduce {
    Binomial,
    ReduceScatterGather,
}

/// Whether blocking reductions to a root go through the communicator's shared-memory area
/// (when it has one and the vectors fit), as they do by default or forced, never when another
/// algorithm is forced.
pub(crate) fn reduce_in_shared_memory() -> Result<bool, Cause> {
    REDUCE.in_shared_memory()
}

/// A reduction's algorithm for vectors of `bytes`, and whether it was chosen by length (none
/// is forced, or the area is, which leaves vectors too long for it to the length's choice),
/// so that ranks whose lengths disagree may choose different ones.
pub(crate) fn reduce(bytes: usize) -> Result<(Reduce, bool), Cause> {
    Ok(match REDUCE.forced()? {
        Some("binomial") => (Reduce::Binomial, false),
        Some("reduce_scatter_gather") => (Reduce::ReduceScatterGather, false),
        // "shared_memory": for vectors too long for the area.
        _ if bytes <= REDUCE_LONG => (Reduce::Binomial, true),
        _ => (Reduce::ReduceScatterGather, true),
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Allreduce {
    RecursiveDoubling,
    Rabenseifner,
    Ring,
}

/// Whether blocking all-reduces go through the communicator's shared-memory area (when it
/// has one), as they do by default or forced, never when another algorithm is forced. The
/// choice must not depend on a rank's vector length: ranks that disagree on it must meet in
/// the same place to find out.
pub(crate) fn allreduce_in_shared_memory() -> Result<bool, Cause> {
    ALLREDUCE.in_shared_memory()
}

/// Whether blocking all-gathers, all-to-alls, gathers, scatters and reduce-scatters in equal
/// blocks go through the communicator's shared-memory area (when it has one and the parts
/// fit), as they do by default or forced, never when another algorithm is forced; like the
/// all-reduce's, the choice does not depend on a rank's length.
pub(crate) fn allgather_in_shared_memory() -> Result<bool, Cause> {
    ALLGATHER.in_shared_memory()
}

pub(crate) fn alltoall_in_shared_memory() -> Result<bool, Cause> {
    ALLTOALL.in_shared_memory()
}

pub(crate) fn gather_in_shared_memory() -> Result<bool, Cause> {
    GATHER.in_shared_memory()
}

pub(crate) fn scatter_in_shared_memory() -> Result<bool, Cause> {
    SCATTER.in_shared_memory()
}

pub(crate) fn reduce_scatter_in_shared_memory() -> Result<bool, Cause> {
    REDUCE_SCATTER.in_shared_memory()
}

/// A forced ring falls back to Rabenseifner for a non-commutative operation, whose partial
/// results must stay in rank order.
pub(crate) fn allreduce(bytes: usize, commutative: bool) -> Result<Allreduce, Cause> {
    let chosen = match ALLREDUCE.forced()? {
        Some("recursive_doubling" | "shared_memory") => Allreduce::RecursiveDoubling,
        Some("rabenseifner") => Allreduce::Rabenseifner,
        Some(_) => Allreduce::Ring,
        None if bytes <= ALLREDUCE_SHORT => Allreduce::RecursiveDoubling,
        None if bytes <= ALLREDUCE_RING => Allreduce::Rabenseifner,
        None => Allreduce::Ring,
    };
    Ok(match chosen {
        Allreduce::Ring if !commutative => Allreduce::Rabenseifner,
        other => other,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Allgather {
    RecursiveDoubling,
    Bruck,
    Ring,
}

pub(crate) fn allgather(total_bytes: usize, size: u32) -> Result<Allgather, Cause> {
    Ok(match ALLGATHER.forced()? {
        Some("recursive_doubling") => Allgather::RecursiveDoubling,
        Some("bruck") => Allgather::Bruck,
        Some("ring") => Allgather::Ring,
        // "shared_memory": for parts too long for the area.
        _ if total_bytes <= ALLGATHER_DOUBLING && size.is_power_of_two() => {
            Allgather::RecursiveDoubling
        }
        _ if total_bytes <= ALLGATHER_SHORT => Allgather::Bruck,
        _ => Allgather::Ring,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllgatherVarcount {
    Ring,
    /// Through each host's leader, each part once across the network to each other host
    /// (`algorithms::hosts`).
    Hierarchical,
}

/// An all-gather's algorithm for parts of any length, on a communicator whose ranks lie on
/// several hosts, more than one on some (`across_hosts`), or not: across hosts through each
/// host's leader at every length (the ring's round a rank, mostly across the network, costs
/// more than the leaders' extra hop over shared memory), unless an algorithm other than the
/// area's is forced; else the ring. The choice never depends on the parts' lengths, which
/// ranks whose counts disagree would see differently.
pub(crate) fn allgather_varcount(across_hosts: bool) -> Result<AllgatherVarcount, Cause> {
    Ok(match ALLGATHER.forced()? {
        None | Some("shared_memory") if across_hosts => AllgatherVarcount::Hierarchical,
        _ => AllgatherVarcount::Ring,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alltoall {
    Pairwise,
    Linear,
    /// Through each host's leader, one message from each host to each other
    /// (`algorithms::hosts`).
    Hierarchical,
}

/// An all-to-all's algorithm for blocks of `block_bytes` (the largest, for parts of any
/// length), on a communicator whose ranks lie on several hosts, more than one on some, for
/// equal blocks (`across_hosts`), or not. Across hosts, blocks up to `ALLTOALL_SHORT` go
/// through each host's leader: a message then costs more than copying the block twice more
/// on the leader. The bytes across the network are the same either way, so longer blocks,
/// whose cost is their bytes, go as before, each rank to each, with no extra copies nor the
/// leader's bottleneck (Open MPI's coll/han pairs every rank with one on each other host
/// instead of one leader a host, and needs single-copy mapping of the peers' buffers).
/// Longer blocks go pairwise, unless `ranks_on_host` of the communicator's ranks share this
/// rank's host, at least `ALLTOALL_LINEAR_RANKS` (1 where the hosts are not known), or this
/// rank `shares` its CPUs with other ranks (`pml::config::shares_cores`): then each pairwise
/// step waits for a peer that is mostly not running, and a rank that posted every message
/// takes them as its peers come (OSU's all-to-all on 2 AMD EPYC CPUs, medians of 5 runs,
/// load 5-7, linear forced: 4 ranks, 32 and 64 KiB blocks, pairwise 68 and 342 us, linear
/// 34 and 51; 8 ranks, 16, 32 and 64 KiB, pairwise 782, 688 and 1078 us, linear 247, 385
/// and 387). The two send the same messages, so ranks that choose differently still meet.
pub(crate) fn alltoall(
    block_bytes: usize,
    across_hosts: bool,
    ranks_on_host: u32,
    shares: bool,
) -> Result<Alltoall, Cause> {
    Ok(match ALLTOALL.forced()? {
        Some("pairwise") => Alltoall::Pairwise,
        Some("linear") => Alltoall::Linear,
        // "shared_memory": for blocks too long for the area.
        _ if block_bytes <= ALLTOALL_SHORT && across_hosts => Alltoall::Hierarchical,
        _ if block_bytes <= ALLTOALL_SHORT => Alltoall::Linear,
        _ if ranks_on_host >= ALLTOALL_LINEAR_RANKS || shares => Alltoall::Linear,
        _ => Alltoall::Pairwise,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rooted {
    Binomial,
    Linear,
    /// Through each host's leader, one message a host across the network
    /// (`algorithms::hosts`).
    Hierarchical,
}

/// A gather's or a scatter's algorithm for a result of `total_bytes`, on a communicator whose
/// ranks lie on several hosts, more than one on some (`across_hosts`), or not. Across hosts
/// the hierarchical plan serves every size: each host's parts cross the network once, in one
/// message, where a binomial tree passes some parts across it more than once and a linear one
/// sends a message a rank; it costs one more hop inside a host, over shared memory.
/// Also whether the length chose it (as for [`reduce`]).
fn rooted(
    choice: &Choice,
    total_bytes: usize,
    across_hosts: bool,
) -> Result<(Rooted, bool), Cause> {
    Ok(match choice.forced()? {
        Some("binomial") => (Rooted::Binomial, false),
        Some("linear") => (Rooted::Linear, false),
        // "shared_memory": for parts too long for the area.
        _ if across_hosts => (Rooted::Hierarchical, false),
        _ if total_bytes <= ROOTED_SHORT => (Rooted::Binomial, true),
        _ => (Rooted::Linear, true),
    })
}

/// A gather's algorithm, and whether its length chose it (as for [`reduce`]).
pub(crate) fn gather(total_bytes: usize, across_hosts: bool) -> Result<(Rooted, bool), Cause> {
    rooted(&GATHER, total_bytes, across_hosts)
}

pub(crate) fn scatter(total_bytes: usize, across_hosts: bool) -> Result<Rooted, Cause> {
    rooted(&SCATTER, total_bytes, across_hosts).map(|(algorithm, _)| algorithm)
}

/// A gather's algorithm for parts of any length: linear, unless `MPIRT_COLL_GATHER` forces
/// `shared_memory` on a communicator across hosts (`across_hosts`, as for [`gather`]), which
/// takes the plan through each host's leader. No length can choose: a rank knows its own part
/// alone and the leaders learn their hosts' only as the call runs, so ranks whose counts
/// disagree could pick different plans and wait for messages never sent. By the leaders the
/// root receives one message a host, not one a rank, but each rank's part takes one more hop
/// and the leader must hear its ranks' lengths before it sends; on 8 ranks over 4 test hosts
/// the root's time by the leaders was 1.02 to 1.59 times the flat plan's at 8 B to 64 KiB a
/// part, never shorter (`docs/user-guide.md`), so the flat plan is the default.
pub(crate) fn gather_varcount(across_hosts: bool) -> Result<Rooted, Cause> {
    Ok(match GATHER.forced()? {
        Some("shared_memory") if across_hosts => Rooted::Hierarchical,
        _ => Rooted::Linear,
    })
}

/// A scatter's algorithm for parts of any length: across hosts (`across_hosts`) through each
/// host's leader at every length, unless `MPIRT_COLL_SCATTER` forces an algorithm other than
/// `shared_memory`; else linear. No length can choose, as for [`gather_varcount`]; on 8 ranks
/// over 4 test hosts the leaders' plan took 0.40 to 0.71 times the flat root's time at 8 B
/// to 4 KiB a part, but 1.08 times at 16 KiB and 5.9 times at 64 KiB.
pub(crate) fn scatter_varcount(across_hosts: bool) -> Result<Rooted, Cause> {
    Ok(match SCATTER.forced()? {
        None | Some("shared_memory") if across_hosts => Rooted::Hierarchical,
        _ => Rooted::Linear,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReduceScatter {
    /// Around the ring (commutative operations).
    Ring,
    /// A reduction to rank 0, then a scatter: any operation.
    ReduceThenScatter,
    /// Reduced inside each host, traded between the hosts' leaders, handed out inside each
    /// host (`algorithms::hosts`): each leader sends one message to each other host.
    Hierarchical,
}

/// A reduce-scatter's algorithm under an operation that is `commutative` or not, on a
/// communicator whose ranks lie on several hosts, more than one on some, in an order that the
/// hierarchical plan may reduce in (`across_hosts`: any order for a commutative operation,
/// runs of consecutive ranks for another), or not. Across hosts the ring sends a message a
/// rank and step, most of them across the network on ranks dealt round the hosts, and the
/// reduction to rank 0 crosses it at every level of its tree.
pub(crate) fn reduce_scatter(
    commutative: bool,
    across_hosts: bool,
) -> Result<ReduceScatter, Cause> {
    Ok(match REDUCE_SCATTER.forced()? {
        None | Some("shared_memory") if across_hosts => ReduceScatter::Hierarchical,
        // "shared_memory": for blocks too long for the area, and counts that differ.
        Some("ring" | "shared_memory") | None if commutative => ReduceScatter::Ring,
        _ => ReduceScatter::ReduceThenScatter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// All-to-all blocks past `ALLTOALL_SHORT` go linearly where this rank shares its CPUs
    /// with other ranks of its host or many ranks share it, and pairwise otherwise; shorter
    /// ones go linearly either way.
    #[test]
    fn longer_all_to_all_blocks_go_linearly_where_ranks_share_cpus() {
        if ALLTOALL.forced().ok().flatten().is_some() {
            println!("skipped: MPIRT_COLL_ALLTOALL forces an algorithm");
            return;
        }
        let chosen = |block, on_host, shares| alltoall(block, false, on_host, shares).unwrap();
        assert_eq!(chosen(32 << 10, 4, true), Alltoall::Linear);
        assert_eq!(chosen(ALLTOALL_SHORT + 1, 8, true), Alltoall::Linear);
        assert_eq!(chosen(32 << 10, 4, false), Alltoall::Pairwise);
        assert_eq!(
            chosen(32 << 10, ALLTOALL_LINEAR_RANKS, false),
            Alltoall::Linear
        );
        assert_eq!(chosen(ALLTOALL_SHORT, 4, false), Alltoall::Linear);
    }
}
