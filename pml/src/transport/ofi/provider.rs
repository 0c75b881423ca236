//! Which provider, and what it asks of us: the decisions taken from `fi_getinfo`'s answer,
//! as plain data so that tests check them for providers this machine lacks (EFA, Slingshot).
//!
//! One capability request runs on every provider: the hints offer the memory-registration
//! modes (`mr_mode`) and operation modes that `efa`, `cxi`, `verbs;ofi_rxm`, `tcp;ofi_rxm`,
//! `shm` and `udp;ofi_rxd` may ask for, as MPICH's ch4 ofi netmod and Open MPI's `mtl ofi`
//! do, and [`MrPlan`] obeys whatever subset the chosen provider returns.

use super::sys;

/// The mr_mode bits the hints offer: register buffers used locally (`LOCAL`: verbs, efa),
/// address remote memory by virtual address (`VIRT_ADDR`), register only allocated memory
/// (`ALLOCATED`), use the provider's keys (`PROV_KEY`), bind regions to the endpoint
/// (`ENDPOINT`: cxi).
pub const MR_MODE_OFFERED: u32 = sys::FI_MR_LOCAL
    | sys::FI_MR_VIRT_ADDR
    | sys::FI_MR_ALLOCATED
    | sys::FI_MR_PROV_KEY
    | sys::FI_MR_ENDPOINT;

/// The operation modes the hints offer: every operation passes a `fi_context2` that stays
/// the provider's until its completion (which serves `FI_CONTEXT` too).
pub const MODE_OFFERED: u64 = sys::FI_CONTEXT | sys::FI_CONTEXT2;

/// `FI_MR_BASIC`, the pre-1.5 mode name that stands for VIRT_ADDR | ALLOCATED | PROV_KEY.
const MR_BASIC: u32 = 1;

/// Providers in order of preference when none is named: the real fabrics first (AWS EFA,
/// HPE Slingshot, InfiniBand or RoCE through libfabric's verbs), then the ones any machine
/// has (for testing and for single hosts).
pub const PREFERENCE: &[&str] = &[
    "efa",
    "cxi",
    "verbs;ofi_rxm",
    "tcp;ofi_rxm",
    "shm",
    "udp;ofi_rxd",
];

/// The providers whose presence means a real fabric: with `--transport auto`, only these
/// take over inter-host traffic from TCP.
pub const FABRIC_PROVIDERS: &[&str] = &["efa", "cxi", "verbs;ofi_rxm"];

/// Providers whose sends complete only once the peer's software acknowledged them
/// (`udp;ofi_rxd` acknowledges in the peer's progress calls): there a peer that computes
/// for a while without calling into mpirt looks like a dead one, so a send that waits long
/// is no sign of death, and a dead peer that a rank only waits on is left to the launcher,
/// which ends the job when a rank dies.
pub fn acks_in_software(provider: &str) -> bool {
    provider.ends_with(";ofi_rxd")
}

/// The eager limit over `provider` where `MPIRT_OFI_EAGER_LIMIT` is unset: 64 KiB where its
/// `fi_read` is emulated by packets (udp;ofi_rxd answers a read request with the same data
/// packets, under the same window, that a send of those bytes takes), so that a message up to
/// 64 KiB goes as one send, without the RTS, read request and FIN of a rendezvous around it,
/// at the price of a copy at each end and 64 KiB frame buffers (24 MiB a rank, of pages
/// touched only as frames fill them); 8 KiB
/// elsewhere, where a read is one operation (the NIC's on efa, cxi and verbs; one request
/// answered by one stream on tcp and shm), cheaper than copying through bounce buffers.
pub fn eager_limit(provider: &str) -> usize {
    if provider.ends_with(";ofi_rxd") {
        64 << 10
    } else {
        8 << 10
    }
}

/// Whether windows take a provider's RMA ([`windows_by_rma`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowsByRma {
    /// Unasked: the NIC does RMA without the target's software (efa, cxi, verbs;ofi_rxm).
    Default,
    /// Only with `MPIRT_WINDOW_PATH=rdma`: the provider emulates RMA in the target's
    /// progress, which tcp;ofi_rxm was measured doing about 2x slower than the messages it
    /// would replace (osu-benches/REPORT.md); shm likewise applies it in the target's
    /// progress.
    OptIn,
    /// Never (windows by messages): libfabric 1.17's udp;ofi_rxd corrupts its own state
    /// under one-sided operations among three or more ranks: the window suite's model job on
    /// 3 ranks crashed a rank with SIGSEGV in 4 runs of 4 across 3 test hosts and 2 of 2 on
    /// one host (on 2 ranks it passed), every time inside the provider's progress called from
    /// `fi_cq_read` (`rxd_handle_ack`, `rxd_progress_tx_list`, `rxd_start_xfer`, read from
    /// the disassembly of Debian's build: a transfer entry on a peer's transmit list whose
    /// peer index and packet pointer are garbage, one freed or never initialised), never in
    /// mpirt's code. Its rendezvous `fi_read` stays, which the suites pass across hosts.
    Never,
}

/// Whether windows over `provider` take its RMA ([`WindowsByRma`]); a provider this list
/// does not know only when asked.
pub fn windows_by_rma(provider: &str) -> WindowsByRma {
    if FABRIC_PROVIDERS.iter().any(|&p| matches(p, provider)) {
        WindowsByRma::Default
    } else if provider.ends_with(";ofi_rxd") {
        WindowsByRma::Never
    } else {
        WindowsByRma::OptIn
    }
}

/// How many one-sided writes and reads to one rank may be in flight at once on `provider`
/// (`one_sided::RMA_SLOTS` bound them all): shm one, as puts of 8 bytes to 4 KiB measured
/// 0.14-0.5x as fast with many in flight there (osu_put_bw, flush, 2 ranks on a loaded
/// 2-core host; from 8 KiB it was 1.2-12x as fast), where tcp;ofi_rxm was 1.7-10x as fast at
/// every size; others, which do RMA in the NIC, as many as it takes. The likely cause, read in
/// libfabric 1.17's shm (not measured apart): a write with `FI_DELIVERY_COMPLETE` of at most
/// 4 KiB goes through the target's bounce buffers (its SAR protocol), and while one such is
/// pending to a rank, shm refuses every other RMA to it with -FI_EAGAIN (`smr_generic_rma`),
/// so the writes behind it are posted again and again until the target's progress drains it;
/// longer ones go by the target's `process_vm_readv`, several at once.
pub fn rma_in_flight(provider: &str) -> usize {
    if provider == "shm" {
        1
    } else {
        usize::MAX
    }
}

/// Whether `provider` names each endpoint by a file every process of the host sees: shm,
/// whose endpoint is a region under /dev/shm. Such an endpoint is given
/// [`host_file_name`] before it is enabled.
pub fn named_by_host_file(provider: &str) -> bool {
    provider == "shm"
}

/// The name of rank `rank`'s endpoint on a provider that names it by a host file
/// ([`named_by_host_file`]): `/dev/shm/mpirt-<job id>-ofi-<rank>`. Left to itself, shm
/// 1.17 names the file after the process id (`<pid>:<uid>:<n>`), and a rank killed before
/// it closes its endpoint leaves the file behind, 16 MiB of tmpfs, under a name rsrun's
/// clean-up of the dead job does not know; and once the process ids come round, the
/// process given that id again cannot open its endpoint: shm takes the file's owner for
/// alive, as the owner's id is now its own, and `fi_enable` fails -FI_EBUSY. Named after the
/// job, the file is removed with the job's others and meets no file of another job.
pub fn host_file_name(job_id: &str, rank: u32) -> String {
    format!("fi_shm://mpirt-{job_id}-ofi-{rank}")
}

/// Reading a peer's memory: the rendezvous's `fi_read` (and windows' gets).
const RMA_READ: u64 = (sys::FI_RMA | sys::FI_READ | sys::FI_REMOTE_READ) as u64;
/// Writing a peer's memory: windows' puts.
const RMA_WRITE: u64 = (sys::FI_RMA | sys::FI_WRITE | sys::FI_REMOTE_WRITE) as u64;
/// Atomics on a peer's memory (with reads and writes of it): windows' accumulates.
const ATOMICS: u64 = sys::FI_ATOMIC as u64;

/// The capability requests beyond messages, richest first (`fi_getinfo` is asked each): a
/// provider is opened with the richest that it grants and may be asked ([`askable`]), so
/// that one without atomics, or without RMA, is still taken, with less ([`Granted`]).
pub const REQUESTS: [u64; 4] = [
    RMA_READ | RMA_WRITE | ATOMICS,
    RMA_READ | RMA_WRITE,
    RMA_READ,
    0,
];

/// What a provider opened for a capability request of [`REQUESTS`] does beyond messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    /// `fi_read` of a peer's memory (rendezvous, windows' gets).
    pub remote_read: bool,
    /// `fi_write` too: windows' puts and gets go by RMA.
    pub remote_write: bool,
    /// Atomics on a peer's memory, where [`atomics_usable`] also finds the two windows use.
    pub atomics: bool,
}

impl Granted {
    pub fn of(request: u64) -> Granted {
        let has = |caps: u64| request & caps == caps;
        Granted {
            remote_read: has(RMA_READ),
            remote_write: has(RMA_READ | RMA_WRITE),
            atomics: has(RMA_READ | RMA_WRITE | ATOMICS),
        }
    }
}

/// Which provider to open and with which request: `tiers[i]` lists the usable providers
/// `fi_getinfo` offered for `REQUESTS[i]` (the last, for messages alone, lists every usable
/// one). The provider is chosen as [`pick`] chooses among them all, so that a provider the
/// preference ranks first is never passed over for one that grants more (a p5's `efa`
/// without atomics beside `tcp;ofi_rxm` with them); then its richest request that it grants
/// is taken. Returns the tier and the index in it.
pub fn pick_granted(
    tiers: &[Vec<String>],
    wanted: Option<&str>,
    fabric_only: bool,
) -> Option<(usize, usize)> {
    let every = tiers.last()?;
    let name = &every[pick(every, wanted, fabric_only)?];
    tiers
        .iter()
        .enumerate()
        .find_map(|(tier, names)| Some((tier, names.iter().position(|n| n == name)?)))
}

/// Why `FI_ATOMIC` is not asked of `provider`, whose registrations go as `plan` says; `None`
/// where it may be. rxm (`...;ofi_rxm`) does atomics in software whatever its core (each one a
/// message that the target's rxm applies, as mpirt's own accumulate messages are), and once
/// asked for them it files every registration in a map by the core's key (libfabric 1.17's
/// `rxm_mr_add_map_entry`, `ofi_mr_map_insert` with the provider-key mode masked off), which
/// refuses a key already there: that `fi_mr_reg` fails with -FI_ENOKEY. Where the core picks
/// keys (`PROV_KEY`: verbs, whose key is the ibv rkey), two live registrations may share one:
/// verbs' registration cache (on wherever libfabric has a memory monitor) hands a range lying
/// inside one still registered the same ibv_mr again. So every collective over
/// verbs;ofi_rxm with atomics asked failed in the Soft-RoCE guest, registering a rendezvous
/// buffer (libfabric issue 9133; the fix proposed upstream, PR 10371, would instead leave one
/// of the two registrations out of the map, so that an atomic on it fails at the target).
/// There atomics are not asked: windows' puts and gets keep verbs' RDMA WRITE and READ, and
/// their accumulates go by mpirt's messages. The test is verbs under rxm, whose cache was seen
/// to do it, with the core picking keys: rxm over a core whose keys are new for each
/// registration (tcp's, ours or, in later libfabric, its own counter's) keeps its atomics, as
/// the map never sees one key twice there.
pub fn atomics_refused(provider: &str, plan: MrPlan) -> Option<&'static str> {
    (provider.starts_with("verbs;") && provider.ends_with(";ofi_rxm") && plan.prov_key).then_some(
        "rxm does atomics in software, and asked for them fails registrations whose key its \
         core gives twice (verbs' registration cache may)",
    )
}

/// Of the providers that answered `request` (one of [`REQUESTS`]), each with its name first
/// and its registration plan last, keeps those it may be asked of: not one with atomics where
/// [`atomics_refused`] says why; such a provider is then taken with the next request.
pub fn askable<T>(request: u64, tier: &mut Vec<(String, T, MrPlan)>) {
    if Granted::of(request).atomics {
        tier.retain(|(name, _, plan)| atomics_refused(name, *plan).is_none());
    }
}

/// Whether windows' 8-byte atomics go by the provider: it granted `FI_ATOMIC`, and
/// `fi_query_atomic` says it takes at least one `FI_UINT64` per call of fetch-and-add
/// (`fetch_add`, for `FI_SUM` with `FI_FETCH_ATOMIC`) and of compare-and-swap (`cswap`,
/// `FI_CSWAP` with `FI_COMPARE_ATOMIC`): each the element count or the query's error. Both or
/// neither: an accumulate lock takes with one and releases with the other.
pub fn atomics_usable(
    granted: Granted,
    fetch_add: Result<usize, isize>,
    cswap: Result<usize, isize>,
) -> bool {
    granted.atomics && matches!(fetch_add, Ok(n) if n >= 1) && matches!(cswap, Ok(n) if n >= 1)
}

/// How memory registration goes, as the provider's `mr_mode` said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrPlan {
    /// Buffers this rank sends from or receives into are registered, and their descriptors
    /// passed with each operation.
    pub local: bool,
    /// A remote address is the buffer's virtual address; else an offset into its region.
    pub virt_addr: bool,
    /// The provider picks keys; else each registration asks for a key of its own.
    pub prov_key: bool,
    /// A region is bound to the endpoint and enabled before use.
    pub endpoint: bool,
}

impl MrPlan {
    /// What `mr_mode` (as returned by `fi_getinfo` for the offered bits) asks; a bit that
    /// was not offered (raw keys, device memory, MMU notification) refuses the provider.
    pub fn from_mr_mode(mr_mode: u32) -> Result<MrPlan, String> {
        let mr_mode = if mr_mode == MR_BASIC {
            sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY
        } else {
            mr_mode
        };
        let unasked = mr_mode & !MR_MODE_OFFERED;
        if unasked != 0 {
            return Err(format!(
                "it asks for memory registration modes not offered (mr_mode {mr_mode:#x}, \
                 unsupported bits {unasked:#x})"
            ));
        }
        Ok(MrPlan {
            local: mr_mode & sys::FI_MR_LOCAL != 0,
            virt_addr: mr_mode & sys::FI_MR_VIRT_ADDR != 0,
            prov_key: mr_mode & sys::FI_MR_PROV_KEY != 0,
            endpoint: mr_mode & sys::FI_MR_ENDPOINT != 0,
        })
    }

    /// The access a window's registration asks: peers write, read and update it (atomics
    /// need both remote accesses, `fi_atomic(3)`).
    pub fn window_access() -> u64 {
        (sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE) as u64
    }

    /// The access a registration of a user buffer asks, where the provider wants local
    /// buffers registered: `writable` for one read into (a rendezvous's or a get's target),
    /// else one sent from; either may be a peer's read's source later (a send that goes by
    /// rendezvous), or a put's source (`FI_WRITE`), so every registration serves those too.
    pub fn user_access(writable: bool) -> u64 {
        let local = if writable {
            sys::FI_READ | sys::FI_WRITE
        } else {
            sys::FI_WRITE
        };
        (local | sys::FI_REMOTE_READ) as u64
    }

    /// The address a peer reads `addr` at, in a region that starts at `base`.
    pub fn remote_addr(&self, addr: usize, base: usize) -> u64 {
        if self.virt_addr {
            addr as u64
        } else {
            (addr - base) as u64
        }
    }

    /// mr_mode's names, for `--verbose`.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = [
            (self.local, "LOCAL"),
            (self.virt_addr, "VIRT_ADDR"),
            (self.prov_key, "PROV_KEY"),
            (self.endpoint, "ENDPOINT"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join("|")
        }
    }
}

/// Refuses a provider whose operation modes ask for more than was offered (a message
/// prefix, buffered receives, ...).
pub fn check_mode(mode: u64) -> Result<(), String> {
    let unasked = mode & !MODE_OFFERED;
    if unasked != 0 {
        return Err(format!(
            "it asks for operation modes not offered (mode {mode:#x}, unsupported bits \
             {unasked:#x})"
        ));
    }
    Ok(())
}

/// Whether the provider named `offered` is the one the user asked for by `wanted`: its full
/// name (`tcp;ofi_rxm`) or its core (`tcp`, `verbs`), as FI_PROVIDER takes it.
pub fn matches(wanted: &str, offered: &str) -> bool {
    offered == wanted || offered.split(';').next() == Some(wanted)
}

/// Which of the `offered` provider names (in `fi_getinfo`'s order) to use: the first that
/// `wanted` names, or else the first by [`PREFERENCE`] (among [`FABRIC_PROVIDERS`] only,
/// with `fabric_only`); `None` when none fits.
pub fn pick(offered: &[String], wanted: Option<&str>, fabric_only: bool) -> Option<usize> {
    if let Some(wanted) = wanted {
        return offered.iter().position(|o| matches(wanted, o));
    }
    let allowed = if fabric_only {
        FABRIC_PROVIDERS
    } else {
        PREFERENCE
    };
    allowed
        .iter()
        .find_map(|p| offered.iter().position(|o| o == p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::ofi::sys::*;

    /// Each provider's mr_mode as its man page (fi_efa(7), fi_cxi(7), fi_verbs(7),
    /// fi_tcp(7), fi_shm(7)) and this machine's `fi_info` publish it for these hints.
    #[test]
    fn mr_mode_of_each_provider() {
        let efa =
            MrPlan::from_mr_mode(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)
                .unwrap();
        assert!(efa.local && efa.virt_addr && efa.prov_key && !efa.endpoint);
        let cxi = MrPlan::from_mr_mode(FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY).unwrap();
        assert!(cxi.endpoint && cxi.prov_key && !cxi.local && !cxi.virt_addr);
        // cxi addresses remote memory by offset into the region.
        assert_eq!(cxi.remote_addr(0x1234, 0x1000), 0x234);
        let verbs =
            MrPlan::from_mr_mode(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)
                .unwrap();
        assert_eq!(verbs, efa);
        assert_eq!(verbs.remote_addr(0x1234, 0x1000), 0x1234);
        let tcp = MrPlan::from_mr_mode(0).unwrap();
        assert!(!tcp.local && !tcp.virt_addr && !tcp.prov_key && !tcp.endpoint);
        assert_eq!(tcp.describe(), "none");
        let shm = MrPlan::from_mr_mode(FI_MR_VIRT_ADDR).unwrap();
        assert!(shm.virt_addr && !shm.local && !shm.prov_key);
        assert_eq!(shm.describe(), "VIRT_ADDR");
        // The old FI_MR_BASIC stands for VIRT_ADDR | ALLOCATED | PROV_KEY.
        let basic = MrPlan::from_mr_mode(1).unwrap();
        assert!(basic.virt_addr && basic.prov_key && !basic.local);
    }

    /// Windows on each provider: a window's registration is addressed by its virtual
    /// address (efa, verbs, shm) or by offset from its start (cxi, tcp: 0 is its first
    /// byte), with the provider's key (efa, cxi, verbs) or one asked for (tcp, shm), bound
    /// to the endpoint where it asks (cxi), and origin buffers registered and described
    /// where it asks (efa, verbs).
    #[test]
    fn window_registrations_of_each_provider() {
        let window = 0x7f00_0000_1000usize;
        let efa =
            MrPlan::from_mr_mode(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)
                .unwrap();
        let cxi = MrPlan::from_mr_mode(FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY).unwrap();
        let tcp = MrPlan::from_mr_mode(0).unwrap();
        let shm = MrPlan::from_mr_mode(FI_MR_VIRT_ADDR).unwrap();
        for (name, plan, addr, prov_key, endpoint, local) in [
            ("efa", efa, window as u64, true, false, true),
            ("verbs;ofi_rxm", efa, window as u64, true, false, true),
            ("cxi", cxi, 0, true, true, false),
            ("tcp;ofi_rxm", tcp, 0, false, false, false),
            ("shm", shm, window as u64, false, false, false),
        ] {
            assert_eq!(
                plan.remote_addr(window, window),
                addr,
                "{name}: window start"
            );
            assert_eq!(
                plan.remote_addr(window, window) + 24,
                plan.remote_addr(window + 24, window),
                "{name}: a displacement adds to the start"
            );
            assert_eq!(
                (plan.prov_key, plan.endpoint, plan.local),
                (prov_key, endpoint, local),
                "{name}"
            );
        }
        let access = MrPlan::window_access();
        assert_eq!(access, (FI_REMOTE_READ | FI_REMOTE_WRITE) as u64);
        // A put's source may be any registered user buffer: each asks FI_WRITE.
        for writable in [false, true] {
            assert_ne!(MrPlan::user_access(writable) & FI_WRITE as u64, 0);
            assert_ne!(MrPlan::user_access(writable) & FI_REMOTE_READ as u64, 0);
        }
        assert_ne!(MrPlan::user_access(true) & FI_READ as u64, 0);
        assert_eq!(MrPlan::user_access(false) & FI_READ as u64, 0);
    }

    fn tiers(each: &[&[&str]]) -> Vec<Vec<String>> {
        each.iter()
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .collect()
    }

    /// What each provider is opened with: efa, cxi, verbs;ofi_rxm, tcp;ofi_rxm and shm grant
    /// RMA and atomics (fi_efa(7), fi_cxi(7), fi_verbs(7) under rxm, fi_tcp(7) under rxm,
    /// fi_shm(7)), so windows go by fi_write, fi_read and fi_atomic there (verbs;ofi_rxm
    /// without the atomics, which are not asked of it: see the next test); a provider without
    /// atomics keeps RMA, one without RMA messages alone (windows by messages), and none is
    /// lost for lacking them.
    #[test]
    fn capabilities_of_each_provider() {
        let full = Granted::of(REQUESTS[0]);
        assert_eq!(
            full,
            Granted {
                remote_read: true,
                remote_write: true,
                atomics: true
            }
        );
        assert!(!Granted::of(REQUESTS[1]).atomics && Granted::of(REQUESTS[1]).remote_write);
        let read_only = Granted::of(REQUESTS[2]);
        assert!(read_only.remote_read && !read_only.remote_write && !read_only.atomics);
        assert_eq!(
            Granted::of(REQUESTS[3]),
            Granted {
                remote_read: false,
                remote_write: false,
                atomics: false
            }
        );
        let all = ["efa", "cxi", "verbs;ofi_rxm", "tcp;ofi_rxm", "shm"];
        let everywhere = tiers(&[&all, &all, &all, &all]);
        for name in all {
            assert_eq!(
                pick_granted(&everywhere, Some(name), false),
                Some((0, all.iter().position(|n| *n == name).unwrap())),
                "{name}"
            );
        }
        // A p5 whose efa has no atomics: efa is still the one taken, with RMA alone.
        let p5 = tiers(&[
            &["tcp;ofi_rxm", "shm"],
            &["efa", "tcp;ofi_rxm", "shm"],
            &["efa", "tcp;ofi_rxm", "shm"],
            &["efa", "tcp;ofi_rxm", "shm"],
        ]);
        assert_eq!(pick_granted(&p5, None, true), Some((1, 0)));
        assert_eq!(pick_granted(&p5, None, false), Some((1, 0)));
        assert_eq!(pick_granted(&p5, Some("tcp"), false), Some((0, 0)));
        // udp;ofi_rxd here without RMA (MPIRT_OFI_RMA=0 asks nothing beyond messages).
        let messages_only = tiers(&[&[], &[], &[], &["udp;ofi_rxd"]]);
        assert_eq!(
            pick_granted(&messages_only, Some("udp"), false),
            Some((3, 0))
        );
        assert_eq!(pick_granted(&messages_only, None, true), None);
        assert_eq!(pick_granted(&[], None, false), None);
    }

    /// Atomics go by the provider only where both of windows' atomics are supported on
    /// 8-byte integers, as `fi_query_atomic` answers.
    #[test]
    fn atomics_need_fetch_add_and_compare_swap() {
        let full = Granted::of(REQUESTS[0]);
        let unsupported = Err(-(FI_EOPNOTSUPP as isize));
        assert!(atomics_usable(full, Ok(1), Ok(1)));
        assert!(atomics_usable(full, Ok(64), Ok(8)));
        assert!(!atomics_usable(full, Ok(1), unsupported));
        assert!(!atomics_usable(full, unsupported, Ok(1)));
        assert!(!atomics_usable(full, Ok(0), Ok(1)));
        assert!(!atomics_usable(full, Err(-(FI_ENOSYS as isize)), Ok(1)));
        assert!(!atomics_usable(Granted::of(REQUESTS[1]), Ok(1), Ok(1)));
    }

    /// verbs;ofi_rxm is taken without atomics (rxm's key map refuses the keys verbs' cache
    /// gives twice), with RMA writes and reads; the providers whose keys are new for each
    /// registration (tcp;ofi_rxm, whatever its mr_mode; shm) or that are not rxm (efa, cxi:
    /// the provider's keys, atomics their own) keep them. Each request's answer goes through
    /// `askable` as `Fabric::open` passes it, then the pick.
    #[test]
    fn rxm_over_verbs_is_not_asked_for_atomics() {
        let keys_of_the_provider =
            MrPlan::from_mr_mode(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)
                .unwrap();
        let keys_of_ours = MrPlan::from_mr_mode(0).unwrap();
        let shm = MrPlan::from_mr_mode(FI_MR_VIRT_ADDR).unwrap();
        let why = atomics_refused("verbs;ofi_rxm", keys_of_the_provider).unwrap();
        assert!(why.contains("registration"), "{why}");
        for (name, plan) in [
            ("tcp;ofi_rxm", keys_of_ours),
            // tcp's keys are its own counter's where it says PROV_KEY: new each time.
            ("tcp;ofi_rxm", keys_of_the_provider),
            ("shm", shm),
            ("efa", keys_of_the_provider),
            (
                "cxi",
                MrPlan::from_mr_mode(FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY).unwrap(),
            ),
            ("verbs;ofi_rxd", keys_of_the_provider),
        ] {
            assert_eq!(atomics_refused(name, plan), None, "{name}");
        }
        // A RoCE host's answers: every provider grants every request.
        let all = [
            ("verbs;ofi_rxm", keys_of_the_provider),
            ("tcp;ofi_rxm", keys_of_ours),
            ("shm", shm),
        ];
        let answers: Vec<Vec<String>> = REQUESTS
            .iter()
            .map(|&request| {
                let mut tier: Vec<(String, (), MrPlan)> = all
                    .iter()
                    .map(|(name, plan)| (name.to_string(), (), *plan))
                    .collect();
                askable(request, &mut tier);
                tier.into_iter().map(|(name, _, _)| name).collect()
            })
            .collect();
        assert_eq!(answers[0], ["tcp;ofi_rxm", "shm"]);
        for tier in &answers[1..] {
            assert_eq!(tier, &["verbs;ofi_rxm", "tcp;ofi_rxm", "shm"]);
        }
        for wanted in [Some("verbs"), None] {
            let (tier, at) = pick_granted(&answers, wanted, true).unwrap();
            assert_eq!(answers[tier][at], "verbs;ofi_rxm");
            let granted = Granted::of(REQUESTS[tier]);
            assert!(granted.remote_write && granted.remote_read && !granted.atomics);
        }
        assert_eq!(pick_granted(&answers, Some("tcp"), false), Some((0, 0)));
    }

    #[test]
    fn mr_mode_not_offered_refuses_the_provider() {
        let e = MrPlan::from_mr_mode(FI_MR_VIRT_ADDR | FI_MR_HMEM).unwrap_err();
        assert!(e.contains("unsupported bits 0x400"), "{e}");
        let e = MrPlan::from_mr_mode(FI_MR_RAW).unwrap_err();
        assert!(e.contains("0x8"), "{e}");
    }

    #[test]
    fn operation_modes() {
        // efa's RDM endpoint and older cxi ask for context space; tcp, shm and rxd nothing.
        check_mode(FI_CONTEXT2).unwrap();
        check_mode(FI_CONTEXT).unwrap();
        check_mode(0).unwrap();
        let e = check_mode(FI_MSG_PREFIX).unwrap_err();
        assert!(e.contains("operation modes"), "{e}");
        assert!(check_mode(FI_RX_CQ_DATA).is_err());
    }

    #[test]
    fn shm_takes_one_rma_at_a_time() {
        assert_eq!(rma_in_flight("shm"), 1);
        assert!(["tcp;ofi_rxm", "verbs;ofi_rxm", "efa", "cxi"]
            .iter()
            .all(|p| rma_in_flight(p) > 1));
    }

    #[test]
    fn which_providers_take_windows_by_rma() {
        use super::{windows_by_rma, WindowsByRma::*};
        let each: Vec<_> = PREFERENCE.iter().map(|&p| windows_by_rma(p)).collect();
        // efa, cxi, verbs;ofi_rxm, tcp;ofi_rxm, shm, udp;ofi_rxd.
        assert_eq!(each, [Default, Default, Default, OptIn, OptIn, Never]);
        assert_eq!(windows_by_rma("net"), OptIn);
    }

    #[test]
    fn which_providers_time_sends_out() {
        assert!(acks_in_software("udp;ofi_rxd"));
        assert!(acks_in_software("verbs;ofi_rxd"));
        for p in ["efa", "cxi", "verbs;ofi_rxm", "tcp;ofi_rxm", "shm"] {
            assert!(!acks_in_software(p), "{p}");
        }
    }

    #[test]
    fn provider_choice() {
        let here: Vec<String> = ["tcp;ofi_rxm", "tcp;ofi_rxm", "shm", "udp;ofi_rxd", "net"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(pick(&here, None, false), Some(0));
        // No real fabric here: auto stays off.
        assert_eq!(pick(&here, None, true), None);
        assert_eq!(pick(&here, Some("shm"), true), Some(2));
        assert_eq!(pick(&here, Some("udp"), false), Some(3));
        assert_eq!(pick(&here, Some("tcp;ofi_rxm"), false), Some(0));
        assert_eq!(pick(&here, Some("efa"), false), None);
        let p5: Vec<String> = ["shm", "tcp;ofi_rxm", "efa", "efa"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(pick(&p5, None, true), Some(2));
        assert_eq!(pick(&p5, None, false), Some(2));
        let slingshot: Vec<String> = ["tcp;ofi_rxm", "cxi", "verbs;ofi_rxm"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(pick(&slingshot, None, true), Some(1));
        assert_eq!(pick(&slingshot, Some("verbs"), true), Some(2));
    }
}
