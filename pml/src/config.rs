//! Runtime settings of the point-to-point layer, read from `MPIRT_*` environment variables
//! (which `rsrun`'s flags set).

use std::env;
use std::time::Duration;

/// Which transport carries traffic between ranks on one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportChoice {
    /// Shared memory between ranks on one host, the network otherwise.
    Auto,
    Shm,
    Tcp,
    /// RDMA verbs between every pair (needs the `verbs` feature and a device).
    Verbs,
    /// libfabric between every pair (needs the `ofi` feature and a provider).
    Ofi,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    pub transport: TransportChoice,
    /// Largest message sent eagerly over shared memory.
    pub shm_eager_limit: usize,
    /// Largest message sent eagerly over shared memory from a buffer in this rank's shared
    /// arena, which the receiver copies with one memcpy by rendezvous (at most
    /// `shm_eager_limit`).
    pub shm_arena_eager_limit: usize,
    /// The shortest mean block of a non-contiguous send, outside the shared arena, that a
    /// receiver reads in place with process_vm_readv (one iovec a block, each pinning the
    /// pages it covers); sends of shorter blocks are packed. Likewise the shortest mean block
    /// of a receive that a read fills a copy or an iovec a block; shorter ones are filled by
    /// the layout's copy loop, in one pass from the sender's arena or a window at a time.
    pub shm_in_place_min_block: usize,
    /// Of a receive under `shm_in_place_min_block`, the shortest mean block (of the shorter
    /// side: the send's or the receive's) that a read from the sender's mapped arena fills
    /// with one memcpy a block, rather than packing the send into a window and unpacking it
    /// from there (two copies a byte). A column into a column of one block length is copied
    /// block to block whatever its length.
    pub shm_arena_min_block: usize,
    /// On the UCX PML, the shortest mean block (of the blocks as listed, before adjacent ones
    /// merge into runs) of a non-contiguous buffer handed to UCX as an iov of its runs; shorter ones go as UCX's generic datatype, packed and unpacked by
    /// callbacks straight into and out of UCX's buffers.
    pub ucx_iov_min_block: usize,
    /// On the UCX PML, the shortest non-contiguous message of blocks shorter than
    /// `ucx_iov_min_block` that goes to UCX in place (its generic datatype) to or from a rank
    /// whose active messages UCX carries over TCP (a receive from any source: where every
    /// other rank is so);
    /// shorter ones are packed into a staging copy and sent as bytes (received likewise and
    /// unpacked), which UCX's TCP moves faster. 0 stages none.
    pub ucx_tcp_stage_below: usize,
    /// Largest message sent eagerly over TCP.
    pub tcp_eager_limit: usize,
    /// Which interfaces or subnets TCP uses (`--tcp-if`): names and subnets, comma-separated;
    /// empty for every interface but loopback.
    pub tcp_interfaces: String,
    /// RDMA devices to use, comma-separated (local rank i takes the i-th, round robin); empty
    /// for the first; `none` keeps `auto` off verbs.
    pub verbs_devices: String,
    /// GID index to address the port by; default: the first RoCE v2 IPv4 GID.
    pub verbs_gid_index: Option<u8>,
    /// Largest message sent eagerly (by SEND) over verbs.
    pub verbs_eager_limit: usize,
    /// Whether registrations of user buffers are cached for reuse.
    pub verbs_reg_cache: bool,
    /// Longest piece one RDMA WRITE or READ work request carries, where lower than the
    /// port's `max_msg_sz` (`MPIRT_VERBS_MAX_MSG`); `None`: the port's.
    pub verbs_max_msg: Option<usize>,
    /// The shortest mean block (of the blocks as listed) of a receive laid out in blocks that
    /// a rendezvous RDMA READ scatters into with scatter-gather lists
    /// (`MPIRT_VERBS_SGE_MIN_BLOCK`); shorter ones are read into a staging buffer and
    /// unpacked, since a list entry per few bytes costs the device more than the copy (as are
    /// blocks spanning over 16 MiB and 16 times the bytes read, whose registration would pin
    /// the whole span).
    pub verbs_sge_min_block: usize,
    /// The shortest mean block of a non-contiguous send that the receiver reads in place
    /// over verbs, an RDMA READ a run of it, its layout carried in the offer
    /// (`MPIRT_VERBS_SEND_MIN_BLOCK`); shorter ones (and layouts of more blocks than a frame
    /// holds, spans as `verbs_sge_min_block` says) are packed into one registered copy.
    pub verbs_send_min_block: usize,
    /// Scatter-gather entries one RDMA READ takes, where lower than the device's `max_sge`
    /// (`MPIRT_VERBS_MAX_SGE`); `None`: the device's, at most 32.
    pub verbs_max_sge: Option<usize>,
    /// Most entries of the verbs completion queue, where lower than the device's `max_cqe`
    /// (`MPIRT_VERBS_CQ_ENTRIES`); `None`: as many as the queue pairs need, up to `max_cqe`.
    /// The sends in flight at once are capped to what it holds beside the receives.
    pub verbs_cq_entries: Option<usize>,
    /// libfabric provider to use (`--ofi-provider`: `efa`, `cxi`, `verbs`, `tcp`, `shm`,
    /// `udp`, or a full name such as `tcp;ofi_rxm`); `None` for the first by preference.
    pub ofi_provider: Option<String>,
    /// Largest message sent eagerly over libfabric (`MPIRT_OFI_EAGER_LIMIT`); `None`: the
    /// provider's (64 KiB on udp;ofi_rxd, whose reads are emulated by packets, else 8 KiB).
    pub ofi_eager_limit: Option<usize>,
    /// Whether rendezvous over libfabric reads the sender's memory (fi_read) where the
    /// provider can; off, rendezvous data goes in DATA frames.
    pub ofi_rma: bool,
    /// Whether the OFI transport keeps registrations of user buffers for reuse.
    pub ofi_reg_cache: bool,
    /// How long a send to a libfabric peer may go untaken before the peer counts as dead
    /// (`MPIRT_OFI_PEER_TIMEOUT`, seconds); `None` (the default): never, as a slow peer is
    /// not a dead one, and rsrun ends a job whose rank died.
    pub ofi_peer_timeout: Option<Duration>,
    /// How long a one-sided operation over libfabric may stay in flight before it fails and
    /// stops the engine (`MPIRT_OFI_RMA_TIMEOUT`, seconds); `None` (the default, and `0`):
    /// without end. Opt-in, as providers that emulate RMA (tcp;ofi_rxm, shm) apply it in the
    /// target's progress, so a correct target computing inside a passive epoch would fail
    /// its origins; where a provider never answers an operation its target refused, it
    /// names the operation instead of a hang.
    pub ofi_rma_timeout: Option<Duration>,
    /// Bytes of each (sender, receiver) ring in the shared-memory segment, where
    /// `shm_receiver_bytes` leaves room for them.
    pub shm_ring_bytes: usize,
    /// Bytes a rank's incoming rings take together, at most, where it has more than one
    /// peer on its host: each ring gets a share, so the segment grows linearly with the ranks
    /// (`transport::shm::ring_bytes_for`).
    pub shm_receiver_bytes: usize,
    /// Eager bytes a peer may have outstanding here before it must use rendezvous.
    pub unexpected_budget: usize,
    /// Whether rendezvous data between ranks on a host may be read single-copy with
    /// process_vm_readv; off (or forbidden by the kernel) means a pipelined copy through the
    /// segment's rings.
    pub single_copy: bool,
    /// Whether large heap blocks (under `TrackingAllocator`) go to a shared arena that
    /// same-host peers map, so that their rendezvous is a plain memcpy (needs `single_copy`).
    pub shared_arena: bool,
    /// The most ranks of this job a host may hold for them to have shared arenas: past it,
    /// large heap blocks stay private and rendezvous goes by process_vm_readv
    /// (`transport::shm`'s `activate_arena` says why).
    pub shm_arena_max_ranks: usize,
    /// How long a waiting rank busy-polls before it yields its core, when ranks do not
    /// outnumber cores (then it yields at once).
    pub spin: Duration,
    /// Whether to print the transport choices at start-up.
    pub verbose: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            transport: TransportChoice::Auto,
            shm_eager_limit: 64 << 10,
            shm_arena_eager_limit: 4 << 10,
            shm_in_place_min_block: 4 << 10,
            shm_arena_min_block: 512,
            ucx_iov_min_block: 4 << 10,
            ucx_tcp_stage_below: 256 << 10,
            tcp_eager_limit: 64 << 10,
            tcp_interfaces: String::new(),
            verbs_devices: String::new(),
            verbs_gid_index: None,
            verbs_eager_limit: 8 << 10,
            verbs_reg_cache: true,
            verbs_max_msg: None,
            verbs_sge_min_block: 1 << 10,
            // Chosen, not measured on RDMA hardware: in the Soft-RoCE guest reading in place
            // lost to packing at 1 KiB blocks and about broke even at 8 KiB (ARCHITECTURE.md).
            verbs_send_min_block: 16 << 10,
            verbs_max_sge: None,
            verbs_cq_entries: None,
            ofi_provider: None,
            ofi_eager_limit: None,
            ofi_rma: true,
            ofi_reg_cache: true,
            ofi_peer_timeout: None,
            ofi_rma_timeout: None,
            shm_ring_bytes: 512 << 10,
            shm_receiver_bytes: 128 << 10,
            unexpected_budget: crate::protocol::DEFAULT_UNEXPECTED_BUDGET,
            single_copy: true,
            shared_arena: true,
            shm_arena_max_ranks: 63,
            spin: Duration::from_micros(100),
            verbose: false,
        }
    }
}

/// How long a waiting rank that shares its cores with more ranks than they hold (see
/// [`shares_cores`]) keeps polling, handing its CPU to any other runnable process between two
/// polls (`sched_yield`, as Open MPI's `mpi_yield_when_idle` does when oversubscribed), before
/// it sleeps until woken. Ranks that outnumber the cores then take turns on them for the price
/// of a context switch, where a sleeping rank costs the peer that frees it a wake-up every
/// time: a futex wake, and on a VM the host waking an idle vCPU (4 and 8 ranks on 2 cores,
/// collectives of 8 B: 2-10x Open MPI's time). Bounded, so that a rank waiting for a peer that
/// computes sleeps rather than take turns with it; a sleep this long costs the wake-up that
/// ends it a few percent of the wait at most.
pub const YIELD_FOR: Duration = Duration::from_millis(2);

/// Whether `ranks_on_host` ranks on this host outnumber the CPUs they may run on, so that a
/// waiting rank must not spin: a spinning rank keeps the peer it waits for off their CPU. A
/// rank rsrun bound to a CPU of its own (it says so in MPIRT_BOUND_CPU) sees one CPU, yet it
/// is not oversubscribed, and not spinning would cost it a wake-up for every message; ranks
/// that merely inherited one CPU between them see the same, and share it.
pub fn shares_cores(ranks_on_host: usize) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    ranks_on_host > cores && env::var_os("MPIRT_BOUND_CPU").is_none()
}

fn size_var(name: &str, default: usize) -> Result<usize, String> {
    match env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => parse_size(&v).ok_or_else(|| {
            format!("{name}='{v}' is not a size (a number of bytes, optionally with k, m or g)")
        }),
    }
}

/// A duration in seconds from the environment variable `name` (`0`: `None`, without end), or
/// `default` where it is unset.
fn seconds_var(name: &str, default: Option<Duration>) -> Result<Option<Duration>, String> {
    let Ok(v) = env::var(name) else {
        return Ok(default);
    };
    match v.trim().parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(secs) if secs > 0.0 && secs.is_finite() => Ok(Some(Duration::from_secs_f64(secs))),
        _ => Err(format!("{name}='{v}' is not a number of seconds (0: off)")),
    }
}

/// `4096`, `64k`, `1m`, `2g`: the forms users type for sizes.
pub fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let (digits, shift) = match v.chars().last()?.to_ascii_lowercase() {
        'k' => (&v[..v.len() - 1], 10),
        'm' => (&v[..v.len() - 1], 20),
        'g' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    digits.parse::<usize>().ok()?.checked_mul(1 << shift)
}

impl EngineConfig {
    pub fn from_env() -> Result<EngineConfig, String> {
        let d = EngineConfig::default();
        let transport = match env::var("MPIRT_TRANSPORT").as_deref() {
            Err(_) | Ok("") | Ok("auto") => TransportChoice::Auto,
            Ok("shm") => TransportChoice::Shm,
            Ok("tcp") => TransportChoice::Tcp,
            Ok("verbs") => TransportChoice::Verbs,
            Ok("ofi") => TransportChoice::Ofi,
            Ok(other) => {
                return Err(format!(
                    "MPIRT_TRANSPORT='{other}' is not a transport (auto, shm, tcp, verbs or ofi)"
                ))
            }
        };
        Ok(EngineConfig {
            transport,
            shm_eager_limit: size_var("MPIRT_EAGER_LIMIT", d.shm_eager_limit)?,
            shm_arena_eager_limit: size_var(
                "MPIRT_SHM_ARENA_EAGER_LIMIT",
                d.shm_arena_eager_limit,
            )?,
            shm_in_place_min_block: size_var(
                "MPIRT_SHM_IN_PLACE_MIN_BLOCK",
                d.shm_in_place_min_block,
            )?,
            shm_arena_min_block: size_var("MPIRT_SHM_ARENA_MIN_BLOCK", d.shm_arena_min_block)?,
            ucx_iov_min_block: size_var("MPIRT_UCX_IOV_MIN_BLOCK", d.ucx_iov_min_block)?,
            ucx_tcp_stage_below: size_var("MPIRT_UCX_TCP_STAGE_BELOW", d.ucx_tcp_stage_below)?,
            tcp_eager_limit: size_var("MPIRT_TCP_EAGER_LIMIT", d.tcp_eager_limit)?,
            tcp_interfaces: env::var("MPIRT_TCP_IF").unwrap_or_default(),
            verbs_devices: env::var("MPIRT_VERBS_DEV").unwrap_or_default(),
            verbs_gid_index: match env::var("MPIRT_VERBS_GID_INDEX") {
                Err(_) => None,
                Ok(v) => Some(v.trim().parse().map_err(|_| {
                    format!("MPIRT_VERBS_GID_INDEX='{v}' is not a GID index (0 to 255)")
                })?),
            },
            verbs_eager_limit: size_var("MPIRT_VERBS_EAGER_LIMIT", d.verbs_eager_limit)?,
            verbs_reg_cache: !matches!(env::var("MPIRT_VERBS_REG_CACHE").as_deref(), Ok("0")),
            verbs_max_msg: Some(size_var("MPIRT_VERBS_MAX_MSG", 0)?).filter(|&n| n > 0),
            verbs_sge_min_block: size_var("MPIRT_VERBS_SGE_MIN_BLOCK", d.verbs_sge_min_block)?,
            verbs_send_min_block: size_var("MPIRT_VERBS_SEND_MIN_BLOCK", d.verbs_send_min_block)?,
            verbs_max_sge: Some(size_var("MPIRT_VERBS_MAX_SGE", 0)?).filter(|&n| n > 0),
            verbs_cq_entries: Some(size_var("MPIRT_VERBS_CQ_ENTRIES", 0)?).filter(|&n| n > 0),
            ofi_provider: env::var("MPIRT_OFI_PROVIDER")
                .ok()
                .filter(|p| !p.trim().is_empty()),
            ofi_eager_limit: match env::var_os("MPIRT_OFI_EAGER_LIMIT") {
                Some(_) => Some(size_var("MPIRT_OFI_EAGER_LIMIT", 0)?),
                None => d.ofi_eager_limit,
            },
            ofi_rma: !matches!(env::var("MPIRT_OFI_RMA").as_deref(), Ok("0")),
            ofi_reg_cache: !matches!(env::var("MPIRT_OFI_REG_CACHE").as_deref(), Ok("0")),
            ofi_peer_timeout: seconds_var("MPIRT_OFI_PEER_TIMEOUT", d.ofi_peer_timeout)?,
            ofi_rma_timeout: seconds_var("MPIRT_OFI_RMA_TIMEOUT", d.ofi_rma_timeout)?,
            shm_ring_bytes: size_var("MPIRT_SHM_RING_BYTES", d.shm_ring_bytes)?,
            shm_receiver_bytes: size_var("MPIRT_SHM_RECEIVER_BYTES", d.shm_receiver_bytes)?,
            unexpected_budget: size_var("MPIRT_UNEXPECTED_BUDGET", d.unexpected_budget)?,
            single_copy: !matches!(env::var("MPIRT_SHM_SINGLE_COPY").as_deref(), Ok("0")),
            shared_arena: !matches!(env::var("MPIRT_SHM_ARENA").as_deref(), Ok("0")),
            shm_arena_max_ranks: match env::var("MPIRT_SHM_ARENA_MAX_RANKS") {
                Err(_) => d.shm_arena_max_ranks,
                Ok(v) => v.trim().parse().map_err(|_| {
                    format!("MPIRT_SHM_ARENA_MAX_RANKS='{v}' is not a number of ranks")
                })?,
            },
            spin: match env::var("MPIRT_SPIN_US") {
                Err(_) => d.spin,
                Ok(v) => {
                    Duration::from_micros(v.trim().parse().map_err(|_| {
                        format!("MPIRT_SPIN_US='{v}' is not a number of microseconds")
                    })?)
                }
            },
            verbose: matches!(env::var("MPIRT_VERBOSE").as_deref(), Ok(v) if !v.is_empty() && v != "0"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999g"), None);
    }
}
