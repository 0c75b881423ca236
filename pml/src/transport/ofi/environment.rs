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
    if !(provider.starts_with("verbs") && provider.ends_with("ofi_rxm"))
        || std::env::var_os(RXM_USE_SRX).is_some()
    {
        return Ok(());
    }
    let why = libfabric::not_set().unwrap_or("neither rsrun nor mpirt's initialize set it here");
    Err(format!(
        "libfabric provider {provider} needs {RXM_USE_SRX}=1 (libfabric 1.17's rxm may crash \
         closing its endpoint without a shared receive context), and it is not set: {why}; \
         export {RXM_USE_SRX}=1 {UNIVERSE_SIZE}={ranks} in the job's environment"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_without_rxm_over_verbs_needs_nothing() {
        for provider in ["tcp;ofi_rxm", "shm", "udp;ofi_rxd", "efa", "cxi"] {
            assert_eq!(check_provider(provider, 4), Ok(()), "{provider}");
        }
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
