//! Whether libfabric's environment makes the chosen provider safe to use. mpirt's launcher
//! or its `initialize` set what the transport wants (see bootstrap's `libfabric` module);
//! where neither could, a provider that is unsafe without a setting is refused here.

use bootstrap::libfabric::{self, RXM_USE_SRX, UNIVERSE_SIZE};

/// Refuses `provider` where it is `verbs;ofi_rxm` and `FI_OFI_RXM_USE_SRX` is unset, naming
/// what to export for a job of `ranks` ranks. Without
/// a shared receive context, libfabric 1.17's rxm kills the process with SIGSEGV inside
/// `fi_close` of the endpoint now and then: closing it closes each connection's verbs
/// endpoint, then handles the completions still queued (`rxm_close_conn`, then
/// `rxm_flush_msg_cq`), and a receive among them has its buffer reposted on the connection's
/// endpoint just freed (`rxm_post_recv`'s `fi_recv` on `rx_buf->rx_ep`). In the Soft-RoCE
/// guest, 5 of 18 runs of pml's engine test `ranks_over_ofi_verbs` failed so; the backtrace
/// (libfabric.so.1 1.17.0-3, printed by libpsm2's handler) read rxm_ep_close +0xb0704,
/// rxm_freeall_conns +0xadf52, rxm_close_conn's flush +0xad486 (through `handle_comp`), the
/// receive's handling +0xb8f81 and +0xb8cae, and the fault at +0xb7882 in rxm_post_recv, an
/// indirect call through the freed endpoint's ops. With a shared receive context every
/// receive buffer is posted to it, and rxm closes it only after the connections, so the
/// repost lands on a live object: no crash in 12 runs of that test, nor in mpirt's p2p and
/// collectives suites over verbs;ofi_rxm. rxm reads the variable when it opens the endpoint.
/// Other providers are left as they are (tcp under rxm showed no such crash, and a shared
/// context may cost small messages latency). A value the user set, 0 included, is theirs.
pub(super) fn check_provider(provider: &str, ranks: usize) -> Result<(), String> {
    verdict(
        provider,
        ranks,
        std::env::var_os(RXM_USE_SRX).is_some(),
        libfabric::not_set(),
    )
}

/// [`check_provider`]'s decision from what it reads: whether `FI_OFI_RXM_USE_SRX` is set
/// (`srx_set`), and why mpirt's `initialize` set nothing (`not_set`; bootstrap's
/// `libfabric::not_set`: threads ran when it started, say).
fn verdict(
    provider: &str,
    ranks: usize,
    srx_set: bool,
    not_set: Option<&str>,
) -> Result<(), String> {
    if !(provider.starts_with("verbs") && provider.ends_with("ofi_rxm")) || srx_set {
        return Ok(());
    }
    let why = not_set.unwrap_or("neither rsrun nor mpirt's initialize set it here");
    Err(format!(
        "libfabric provider {provider} needs {RXM_USE_SRX}=1 (libfabric 1.17's rxm may crash \
         closing its endpoint without a shared receive context), and it is not set: {why}; \
         export {RXM_USE_SRX}=1 {UNIVERSE_SIZE}={ranks} in the job's environment"
    ))
}

/// The providers of `offered` (names in `fi_getinfo`'s order) left to choose from: all where
/// one is named (`wanted`: it is refused by name once picked, see `Fabric::open`), else those
/// the environment leaves safe (`verdict`), the others passed over with why (said under
/// `--verbose`, and the next provider taken). Returns the indices kept.
pub(super) fn screen(
    offered: &[String],
    wanted: Option<&str>,
    verdict: impl Fn(&str) -> Result<(), String>,
    passed_over: &mut Vec<String>,
) -> Vec<usize> {
    let mut kept = Vec::new();
    for (at, name) in offered.iter().enumerate() {
        if wanted.is_none() {
            if let Err(why) = verdict(name) {
                // Each capability request's answer lists the provider again: noted once.
                if !passed_over.contains(&why) {
                    passed_over.push(why);
                }
                continue;
            }
        }
        kept.push(at);
    }
    kept
}

/// Where no provider was picked: whether that is quiet (`--transport auto` with none named
/// and none passed over: no real fabric here, TCP carries the job) rather than an error
/// (under auto, a note for `--verbose` saying why the fabric was not used).
pub(super) fn quiet_without_fabric(
    fabric_only: bool,
    wanted: Option<&str>,
    passed_over: &[String],
) -> bool {
    fabric_only && wanted.is_none() && passed_over.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::ofi::provider;

    #[test]
    fn a_provider_without_rxm_over_verbs_needs_nothing() {
        for provider in ["tcp;ofi_rxm", "shm", "udp;ofi_rxd", "efa", "cxi"] {
            assert_eq!(check_provider(provider, 4), Ok(()), "{provider}");
        }
    }

    fn names(all: &[&str]) -> Vec<String> {
        all.iter().map(|n| n.to_string()).collect()
    }

    /// Issue 24: a program that started threads before `initialize`, under a launcher that
    /// is not rsrun (which sets FI_* itself), on a host with RoCE or InfiniBand: mpirt's
    /// initialize set nothing, so with `--transport auto` verbs;ofi_rxm is passed over, the
    /// note says why (the threads) and what to export, and TCP carries the job; with
    /// `--transport ofi` and no provider named the next provider (tcp;ofi_rxm) is taken.
    #[test]
    fn auto_passes_over_verbs_for_a_program_that_started_threads() {
        let threads = "3 threads ran when mpirt started, where changing the environment is unsafe";
        let roce_host = names(&["verbs;ofi_rxm", "tcp;ofi_rxm", "shm"]);
        let unset = |p: &str| verdict(p, 8, false, Some(threads));
        let mut passed_over = Vec::new();
        let kept = screen(&roce_host, None, unset, &mut passed_over);
        assert_eq!(kept, [1, 2]);
        assert_eq!(passed_over.len(), 1, "{passed_over:?}");
        let why = &passed_over[0];
        assert!(
            why.contains("verbs;ofi_rxm needs FI_OFI_RXM_USE_SRX=1")
                && why.contains(threads)
                && why.contains("export FI_OFI_RXM_USE_SRX=1 FI_UNIVERSE_SIZE=8 "),
            "{why}"
        );
        let left: Vec<String> = kept.iter().map(|&at| roce_host[at].clone()).collect();
        // auto: no real fabric left, and not quietly: the note names the pass-over.
        assert_eq!(provider::pick(&left, None, true), None);
        assert!(!quiet_without_fabric(true, None, &passed_over));
        // --transport ofi, none named: the next by preference.
        assert_eq!(provider::pick(&left, None, false), Some(0));
        // Asked for again (each capability request lists it), it is noted once.
        screen(&roce_host, None, unset, &mut passed_over);
        assert_eq!(passed_over.len(), 1);
        // Named, it is kept here, and refused by name when opened (check_provider).
        let mut none = Vec::new();
        assert_eq!(
            screen(&roce_host, Some("verbs"), unset, &mut none),
            [0, 1, 2]
        );
        assert!(none.is_empty());
        // Under rsrun, or with the variable exported, verbs is taken.
        let set = |p: &str| verdict(p, 8, true, Some(threads));
        let kept = screen(&roce_host, None, set, &mut none);
        assert_eq!((kept.len(), none.len()), (3, 0));
        assert_eq!(provider::pick(&roce_host, None, true), Some(0));
        // A host without a fabric provider: auto is quiet, TCP carries the job.
        let plain = names(&["tcp;ofi_rxm", "shm"]);
        let kept = screen(&plain, None, unset, &mut none);
        assert_eq!(kept, [0, 1]);
        assert!(quiet_without_fabric(true, None, &none));
        // The launcher set it, mpirt's initialize had nothing to say: the generic reason.
        let why = verdict("verbs;ofi_rxm", 2, false, None).unwrap_err();
        assert!(
            why.contains("neither rsrun nor mpirt's initialize set it here"),
            "{why}"
        );
    }

    #[test]
    fn verbs_under_rxm_without_a_shared_receive_context_is_refused() {
        if std::env::var_os(RXM_USE_SRX).is_some() {
            println!("skipped: {RXM_USE_SRX} is set in this test's environment");
            return;
        }
        let refusal = check_provider("verbs;ofi_rxm", 4).unwrap_err();
        assert!(
            refusal.contains("export FI_OFI_RXM_USE_SRX=1 FI_UNIVERSE_SIZE=4 "),
            "{refusal}"
        );
    }
}
