//! The environment settings mpirt chooses for libfabric. Two are for its OFI transport, which
//! libfabric 1.17 takes only from the environment: `fi_param_get` reads them with `getenv`
//! (`rdma/providers/fi_prov.h`: "configuration parameter will only be read from the
//! environment"), no call sets one, and no `fi_getinfo` hint carries them.
//!
//! - `FI_UNIVERSE_SIZE`: the job's size, as MPICH sets it. ofi_rxm sizes its endpoint's
//!   completion queue for that many peers (256 when unset), which over verbs is more entries
//!   than a device may allow (on Soft-RoCE, max_cqe 32767, `fi_enable` failed with EINVAL after
//!   libfabric logged "Unable to create verbs CQ"). libfabric reads it at its first
//!   `fi_getinfo`.
//! - `FI_OFI_RXM_USE_SRX=1` where the provider may be `verbs;ofi_rxm` (the one named, or none
//!   named): without a shared receive context 1.17's rxm crashes closing its endpoint now and
//!   then (see pml's OFI `environment::check_provider`). rxm reads it when it opens one.
//!
//! The third is for a library that loads with libfabric:
//!
//! - `IPATH_NO_BACKTRACE=1`, whatever the transport: Debian's libfabric links libinfinipath
//!   (through its psm provider), whose constructor otherwise claims SIGTERM, SIGINT and the
//!   fault signals as the process loads, and exits from inside its handler on SIGTERM,
//!   racing the rank's other threads (see pml's `ofi::signals`). Open MPI's launcher sets it
//!   too. Only a launcher can ([`launcher_settings`]): the library reads it before `main`, so
//!   an `initialize` under another launcher puts the signals' default actions back instead.
//!
//! A value the user set, 0 included, is theirs. rsrun puts into each rank's environment as it
//! starts it the third always and the first two where they apply ([`launcher_settings`]), so
//! its ranks change no environment. Under other launchers (srun, mpirun, Hydra) mpirt's
//! `initialize` sets the first two ([`prepare_environment`]) before libfabric loads: once its
//! PMI-1 or PMI-2 bootstrap, which starts no thread, has the job's size, or under PMIx, whose
//! client starts one, before it connects, sized by the launcher's variables
//! ([`prepare_before_bootstrap`]); and only while the process runs one thread: `setenv` may
//! reallocate the `environ` array while a `getenv` in another thread walks the old one, and
//! only Rust's own `env::var` takes `env::set_var`'s lock, not C code (libfabric, a PMIx
//! progress thread, the user's libraries). A program that started threads of its own before
//! `initialize` gets neither.

use std::sync::OnceLock;

use crate::started_by::StartedBy;
use crate::vars;

pub const UNIVERSE_SIZE: &str = "FI_UNIVERSE_SIZE";
pub const RXM_USE_SRX: &str = "FI_OFI_RXM_USE_SRX";
pub const NO_BACKTRACE: &str = "IPATH_NO_BACKTRACE";

/// Why [`prepare_environment`] set nothing, for the error of a provider that needed it.
static NOT_SET: OnceLock<String> = OnceLock::new();

/// The settings for the ranks of a job of `ranks` ranks (where known) whose environment `var`
/// reads: none unless the transport may be libfabric (`MPIRT_TRANSPORT` ofi or auto), and
/// none that `var` already sets.
pub fn settings(
    var: impl Fn(&str) -> Option<String>,
    ranks: Option<u32>,
) -> Vec<(&'static str, String)> {
    let transport = var(vars::TRANSPORT).unwrap_or_default();
    if !matches!(transport.as_str(), "" | "auto" | "ofi") {
        return Vec::new();
    }
    let provider = var(vars::OFI_PROVIDER).filter(|p| !p.is_empty());
    let may_be_verbs = provider.is_none_or(|p| p.starts_with("verbs"));
    [
        ranks.map(|r| (UNIVERSE_SIZE, r.max(2).to_string())),
        may_be_verbs.then(|| (RXM_USE_SRX, "1".to_string())),
    ]
    .into_iter()
    .flatten()
    .filter(|(name, _)| var(name).is_none())
    .collect()
}

/// What a launcher gives each rank: [`settings`], and [`NO_BACKTRACE`] whatever the
/// transport (unless `var` sets it), which only a launcher can set in time.
pub fn launcher_settings(
    var: impl Fn(&str) -> Option<String>,
    ranks: Option<u32>,
) -> Vec<(&'static str, String)> {
    let mut all = settings(&var, ranks);
    if var(NO_BACKTRACE).is_none() {
        all.push((NO_BACKTRACE, "1".to_string()));
    }
    all
}

/// Before the bootstrap connects: where it is PMIx's, whose client starts a thread, calls
/// [`prepare_environment`] for the job's size as the launcher's variables give it, and says
/// so; elsewhere does nothing and says so, for a call once the bootstrap knows the size.
pub fn prepare_before_bootstrap() -> bool {
    let var = |name: &str| std::env::var(name).ok();
    let started = StartedBy::from_vars(var);
    let pmix = matches!(started, StartedBy::Pmix { .. });
    if pmix {
        prepare_environment(started.tasks(var));
    }
    pmix
}

/// Sets [`settings`] in this process's environment, for a job of `ranks` ranks (where
/// known), where this process runs one thread (see the module's documentation); with more it
/// sets nothing and keeps why, for [`not_set`].
pub fn prepare_environment(ranks: Option<u32>) {
    let settings = settings(|name| std::env::var(name).ok(), ranks);
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
                "{n} threads ran when mpirt started, where changing the environment is unsafe"
            ));
        }
        Err(e) => {
            let _ = NOT_SET.set(format!("mpirt could not count this process's threads: {e}"));
        }
    }
}

/// Why [`prepare_environment`] set nothing, if it did not.
pub fn not_set() -> Option<&'static str> {
    NOT_SET.get().map(String::as_str)
}

/// The threads this process runs, from `/proc/self/task`.
fn threads() -> std::io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::mpsc;

    fn settings_of(env: &[(&str, &str)], ranks: Option<u32>) -> Vec<(&'static str, String)> {
        let map: HashMap<&str, &str> = env.iter().copied().collect();
        settings(|name| map.get(name).map(|v| v.to_string()), ranks)
    }

    #[test]
    fn the_settings_follow_the_transport_provider_and_the_users_own() {
        let both = vec![(UNIVERSE_SIZE, "6".to_string()), (RXM_USE_SRX, "1".into())];
        assert_eq!(settings_of(&[], Some(6)), both);
        assert_eq!(settings_of(&[("MPIRT_TRANSPORT", "auto")], Some(6)), both);
        let verbs = [("MPIRT_TRANSPORT", "ofi"), ("MPIRT_OFI_PROVIDER", "verbs")];
        assert_eq!(settings_of(&verbs, Some(6)), both);
        // A lone rank still sizes for two: libfabric's smallest sensible universe.
        assert_eq!(settings_of(&verbs, Some(1))[0], (UNIVERSE_SIZE, "2".into()));
        let tcp = [
            ("MPIRT_TRANSPORT", "ofi"),
            ("MPIRT_OFI_PROVIDER", "tcp;ofi_rxm"),
        ];
        assert_eq!(settings_of(&tcp, Some(3)), [(UNIVERSE_SIZE, "3".into())]);
        assert_eq!(settings_of(&tcp, None), []);
        assert_eq!(settings_of(&[("MPIRT_TRANSPORT", "tcp")], Some(3)), []);
        let own = [("FI_UNIVERSE_SIZE", "64"), ("FI_OFI_RXM_USE_SRX", "0")];
        assert_eq!(settings_of(&own, Some(3)), []);
    }

    #[test]
    fn a_launcher_also_keeps_libinfinipath_off_the_signals_unless_the_user_chose() {
        let map = |env: &'static [(&str, &str)]| {
            move |name: &str| {
                env.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let tcp = launcher_settings(map(&[("MPIRT_TRANSPORT", "tcp")]), Some(3));
        assert_eq!(tcp, [(NO_BACKTRACE, "1".to_string())]);
        let ofi = launcher_settings(map(&[("MPIRT_OFI_PROVIDER", "shm")]), Some(3));
        assert_eq!(
            ofi,
            [(UNIVERSE_SIZE, "3".to_string()), (NO_BACKTRACE, "1".into())]
        );
        let own = launcher_settings(map(&[("IPATH_NO_BACKTRACE", "0")]), None);
        assert_eq!(own, [(RXM_USE_SRX, "1".to_string())]);
    }

    /// With a second thread alive, nothing is set, and why is kept.
    #[test]
    fn nothing_is_set_beside_another_thread() {
        if std::env::var_os(UNIVERSE_SIZE).is_some() || std::env::var_os(RXM_USE_SRX).is_some() {
            println!("skipped: {UNIVERSE_SIZE} or {RXM_USE_SRX} is set in this test's environment");
            return;
        }
        if settings(|name| std::env::var(name).ok(), Some(4)).is_empty() {
            println!("skipped: this test's MPIRT_TRANSPORT is not libfabric's, so nothing is set");
            return;
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let other = std::thread::spawn(move || stopped.recv());
        prepare_environment(Some(4));
        drop(stop);
        other.join().unwrap().unwrap_err();
        assert!(std::env::var_os(UNIVERSE_SIZE).is_none());
        assert!(std::env::var_os(RXM_USE_SRX).is_none());
        assert!(
            not_set().is_some_and(|why| why.contains("threads ran")),
            "{:?}",
            not_set()
        );
    }
}
