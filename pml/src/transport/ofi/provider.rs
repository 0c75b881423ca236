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
