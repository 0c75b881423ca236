//! The two libfabric settings mpirt chooses for the user, which libfabric 1.17 takes only
//! from the environment: `fi_param_get` reads them with `getenv` (`rdma/providers/fi_prov.h`:
//! "configuration parameter will only be read from the environment"), there is no call that
//! sets one, and no `fi_getinfo` hint carries them. So they are put into this process's
//! environment, by [`prepare_environment`], before libfabric's first call, and while this
//! process runs no thread but the caller's.
//!
//! Why that is the condition: `setenv` may reallocate the `environ` array while a `getenv` in
//! another thread walks the old one (glibc frees it). Rust's own `env::var` takes the same
//! lock as `env::set_var`, but C code does not: libfabric's providers, a PMIx client's
//! progress thread, any library of the user's. With one thread nothing can read beside the
//! write. mpirt's `initialize` calls this first thing, before its bootstrap starts any
//! thread (the PMIx client starts one) and before libfabric is loaded; where the program
//! started threads of its own before `initialize`, nothing is set, and a provider that needs
//! a setting to be safe is refused with an error that says which variable to export.

use std::sync::OnceLock;

use crate::config::{EngineConfig, TransportChoice};

/// Why [`prepare_environment`] set nothing, for the error of a provider that needed it.
static NOT_SET: OnceLock<String> = OnceLock::new();

const UNIVERSE_SIZE: &str = "FI_UNIVERSE_SIZE";
const RXM_USE_SRX: &str = "FI_OFI_RXM_USE_SRX";

/// Sets, in the environment, the libfabric settings the OFI transport wants for a job of
/// `ranks` ranks (`None` where the launcher's variables do not say), unless the user set
/// them or `config` asks for no transport that may use libfabric. Call it before libfabric's
/// first call, while this process runs one thread (see the module's documentation); with
/// more, it sets nothing and says so in the error of a provider that needs a setting.
pub fn prepare_environment(config: &EngineConfig, ranks: Option<u32>) {
    if !matches!(
        config.transport,
        TransportChoice::Ofi | TransportChoice::Auto
    ) {
        return;
    }
    let wanted = config.ofi_provider.as_deref();
    let settings: Vec<(&str, String)> = [
        ranks.map(|r| (UNIVERSE_SIZE, r.max(2).to_string())),
        (wanted.is_none_or(|p| p.starts_with("verbs"))).then(|| (RXM_USE_SRX, "1".to_string())),
    ]
    .into_iter()
    .flatten()
    .filter(|(name, _)| std::env::var_os(name).is_none())
    .collect();
    if settings.is_empty() {
        return;
    }
    match threads() {
        Ok(1) => {
            for (name, value) in settings {
                // Sound: this process runs one thread, this one (just counted), so no getenv
                // runs beside the write; libfabric, not loaded yet, reads it later.
                std::env::set_var(name, value);
            }
        }
        Ok(n) => {
            let _ = NOT_SET.set(format!(
                "{n} threads ran when mpirt started, where setting the environment is unsafe"
            ));
        }
        Err(e) => {
            let _ = NOT_SET.set(format!("mpirt could not count this process's threads: {e}"));
        }
    }
}

/// The threads this process runs, from `/proc/self/task`.
fn threads() -> std::io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// Refuses `provider` where it is `verbs;ofi_rxm` and `FI_OFI_RXM_USE_SRX` is unset. Without
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
pub(super) fn check_provider(provider: &str) -> Result<(), String> {
    if !(provider.starts_with("verbs") && provider.ends_with("ofi_rxm"))
        || std::env::var_os(RXM_USE_SRX).is_some()
    {
        return Ok(());
    }
    let why = NOT_SET.get().map_or(
        "the program did not call prepare_environment",
        String::as_str,
    );
    Err(format!(
        "libfabric provider {provider} needs {RXM_USE_SRX}=1 (libfabric 1.17's rxm may crash \
         closing its endpoint without a shared receive context), and mpirt did not set it: \
         {why}; export {RXM_USE_SRX}=1 in the job's environment"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_provider_without_rxm_over_verbs_needs_nothing() {
        for provider in ["tcp;ofi_rxm", "shm", "udp;ofi_rxd", "efa", "cxi"] {
            assert_eq!(check_provider(provider), Ok(()), "{provider}");
        }
    }

    /// With a second thread alive, nothing is set, and verbs;ofi_rxm is then refused naming
    /// the variable to export and why it was not set.
    #[test]
    fn nothing_is_set_beside_another_thread() {
        if std::env::var_os(UNIVERSE_SIZE).is_some() || std::env::var_os(RXM_USE_SRX).is_some() {
            println!("skipped: {UNIVERSE_SIZE} or {RXM_USE_SRX} is set in this test's environment");
            return;
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let other = std::thread::spawn(move || stopped.recv());
        let config = EngineConfig {
            transport: TransportChoice::Ofi,
            ofi_provider: Some("verbs;ofi_rxm".into()),
            ..EngineConfig::default()
        };
        prepare_environment(&config, Some(4));
        drop(stop);
        other.join().unwrap().unwrap_err();
        assert!(std::env::var_os(UNIVERSE_SIZE).is_none());
        assert!(std::env::var_os(RXM_USE_SRX).is_none());
        let refusal = check_provider("verbs;ofi_rxm").unwrap_err();
        assert!(
            refusal.contains("export FI_OFI_RXM_USE_SRX=1") && refusal.contains("threads ran"),
            "{refusal}"
        );
    }
}
