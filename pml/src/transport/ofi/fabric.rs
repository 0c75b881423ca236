//! The libfabric objects of one rank: the chosen provider's fabric, domain, completion
//! queue, address vector and reliable-datagram endpoint, opened in that order and closed in
//! the reverse.

use std::ffi::{c_void, CStr, CString};
use std::os::fd::RawFd;
use std::ptr;

use super::environment;
use super::provider::{self, Granted, MrPlan};
use super::sys;

/// What to ask `fi_getinfo` for.
pub struct Request<'a> {
    /// The provider the user named (`--ofi-provider`), if any.
    pub wanted: Option<&'a str>,
    /// The name the endpoint takes where the provider names it by a file on the host (shm).
    pub host_file_name: &'a str,
    /// Only a provider with a real device (`--transport auto`).
    pub fabric_only: bool,
    /// Whether to ask for RMA and atomics; a provider without them is still taken.
    pub rma: bool,
    /// Completion queue entries and address vector slots to size for.
    pub cq_size: usize,
    pub ranks: usize,
    /// Receives posted at once: a provider whose receive queue holds fewer is refused.
    pub rx_depth: usize,
}

pub struct Fabric {
    pub provider: String,
    pub fabric_name: String,
    pub domain_name: String,
    pub plan: MrPlan,
    /// Largest message `fi_inject` takes, and largest message of any operation.
    pub inject_size: usize,
    pub max_msg_size: usize,
    /// What the endpoint does to peers' memory: reads, writes, and windows' 8-byte atomics
    /// (granted, and supported as `fi_query_atomic` says).
    pub granted: Granted,
    /// The completion queue's fd, where the provider has one (else waits poll).
    pub wait_fd: Option<RawFd>,
    /// Why each provider preferred to this one, none being named, was unsafe here.
    pub passed_over: Vec<String>,
    /// Why one-sided operations were turned off after the provider granted them (under
    /// `--transport auto`, adding this rank's own address failed): windows go by messages.
    pub rma_off: Option<String>,
    pub ep: *mut sys::fid_ep,
    pub av: *mut sys::fid_av,
    pub cq: *mut sys::fid_cq,
    pub domain: *mut sys::fid_domain,
    pub fabric: *mut sys::fid_fabric,
    info: *mut sys::fi_info,
}

/// A `fi_getinfo` answer, freed with it.
struct InfoList(*mut sys::fi_info);

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the list came from fi_getinfo and is freed once.
            unsafe { sys::fi_freeinfo(self.0) };
        }
    }
}

impl InfoList {
    /// The providers that offer reliable-datagram endpoints with `caps` under the offered
    /// modes; an empty list where none does.
    fn get(caps: u64) -> Result<InfoList, String> {
        // SAFETY: fi_dupinfo(NULL) allocates zeroed hints with their attribute structures;
        // the strings we set are strdup'ed, as fi_freeinfo frees them.
        unsafe {
            let hints = sys::fi_dupinfo(ptr::null());
            if hints.is_null() {
                return Err("fi_allocinfo failed".into());
            }
            (*hints).caps = caps | sys::FI_MSG as u64;
            (*hints).mode = provider::MODE_OFFERED;
            (*(*hints).ep_attr).type_ = sys::FI_EP_RDM;
            // Frames to a peer arrive in the order sent (send-after-send), as Open MPI and
            // MPICH ask: the PML matches a peer's frames in arrival order (MPI's
            // non-overtaking rule), and efa, for one, reorders without it.
            (*(*hints).tx_attr).msg_order = sys::FI_ORDER_SAS as u64;
            (*(*hints).rx_attr).msg_order = sys::FI_ORDER_SAS as u64;
            let domain = &mut *(*hints).domain_attr;
            domain.mr_mode = provider::MR_MODE_OFFERED as i32;
            domain.threading = sys::FI_THREAD_DOMAIN;
            domain.av_type = sys::FI_AV_TABLE;
            let mut list = ptr::null_mut();
            let rc = sys::fi_getinfo(
                sys::API_VERSION,
                ptr::null(),
                ptr::null(),
                0,
                hints,
                &mut list,
            );
            sys::fi_freeinfo(hints);
            if rc != 0 && rc != -(sys::FI_ENODATA as i32) {
                return Err(format!("fi_getinfo failed: {}", sys::strerror(rc as isize)));
            }
            Ok(InfoList(list))
        }
    }

    fn entries(&self) -> Vec<*mut sys::fi_info> {
        let mut out = Vec::new();
        let mut at = self.0;
        while !at.is_null() {
            out.push(at);
            // SAFETY: a list entry from fi_getinfo, live while the list is.
            at = unsafe { (*at).next };
        }
        out
    }
}

/// The provider's name of an entry.
fn prov_name(info: *mut sys::fi_info) -> String {
    // SAFETY: fi_getinfo's entries carry a fabric_attr with a NUL-terminated prov_name.
    unsafe { c_string((*(*info).fabric_attr).prov_name) }
}

fn c_string(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string from libfabric.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// An entry of a `fi_getinfo` answer that this transport can use, by its provider's name.
type Usable = (String, *mut sys::fi_info, MrPlan);

/// The usable entries of `list`: modes we honour, and (none being named) an environment that
/// leaves the provider safe. Refusals and providers passed over are noted.
fn usable(
    list: &InfoList,
    request: &Request,
    refused: &mut Vec<String>,
    passed_over: &mut Vec<String>,
) -> Vec<Usable> {
    let mut modes_ok = Vec::new();
    for info in list.entries() {
        let name = prov_name(info);
        // SAFETY: entries carry a domain_attr.
        let (mode, mr_mode) = unsafe { ((*info).mode, (*(*info).domain_attr).mr_mode as u32) };
        let plan = match provider::check_mode(mode).and_then(|()| MrPlan::from_mr_mode(mr_mode)) {
            Ok(plan) => plan,
            Err(why) => {
                // Each request's answer lists the provider again: noted once.
                let why = format!("{name}: {why}");
                if !refused.contains(&why) {
                    refused.push(why);
                }
                continue;
            }
        };
        modes_ok.push((name, info, plan));
    }
    // With none named, a provider the environment leaves unsafe gives way to the next (said
    // under --verbose); a named one is refused once picked, naming what to export.
    let names: Vec<String> = modes_ok.iter().map(|(name, _, _)| name.clone()).collect();
    let verdict = |name: &str| environment::check_provider(name, request.ranks);
    environment::screen(&names, request.wanted, verdict, passed_over)
        .into_iter()
        .map(|at| modes_ok[at].clone())
        .collect()
}

/// The providers `fi_getinfo` offers for reliable datagrams at all, for the error that
/// names what was there.
fn offered() -> String {
    let mut names: Vec<String> = match InfoList::get(0) {
        Ok(list) => list.entries().into_iter().map(prov_name).collect(),
        Err(e) => return e,
    };
    names.dedup();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

impl Fabric {
    /// Finds the provider `request` asks for and opens its objects; `Ok(None)` where the
    /// request is for a real fabric only and there is none.
    pub fn open(request: &Request) -> Result<Option<Fabric>, String> {
        let mut refused = Vec::new();
        let mut passed_over = Vec::new();
        // Each capability request, richest first (messages alone last, or only, without RMA).
        let requests = if request.rma {
            &provider::REQUESTS[..]
        } else {
            &provider::REQUESTS[provider::REQUESTS.len() - 1..]
        };
        let lists = requests
            .iter()
            .map(|&caps| InfoList::get(caps))
            .collect::<Result<Vec<_>, _>>()?;
        let tiers: Vec<Vec<Usable>> = lists
            .iter()
            .zip(requests)
            .map(|(list, &caps)| {
                let mut tier = usable(list, request, &mut refused, &mut passed_over);
                provider::askable(caps, &mut tier);
                tier
            })
            .collect();
        let names: Vec<Vec<String>> = tiers
            .iter()
            .map(|tier| tier.iter().map(|(name, _, _)| name.clone()).collect())
            .collect();
        let picked = provider::pick_granted(&names, request.wanted, request.fabric_only).map(
            |(tier, at)| {
                let (_, info, plan) = &tiers[tier][at];
                (*info, *plan, Granted::of(requests[tier]))
            },
        );
        let Some((info, plan, granted)) = picked else {
            if environment::quiet_without_fabric(request.fabric_only, request.wanted, &passed_over)
            {
                return Ok(None);
            }
            refused.extend(passed_over);
            let wanted = match request.wanted {
                Some(w) => format!("provider '{w}'"),
                None => format!("provider among {}", provider::PREFERENCE.join(", ")),
            };
            let refused = if refused.is_empty() {
                String::new()
            } else {
                format!("; refused: {}", refused.join("; "))
            };
            return Err(format!(
                "no usable libfabric {wanted} with reliable-datagram endpoints (fi_getinfo \
                 offers: {}{refused})",
                offered()
            ));
        };
        environment::check_provider(&prov_name(info), request.ranks)?;
        // SAFETY: `info` is an entry of a live list; the copy is ours until Drop.
        let info = unsafe { sys::fi_dupinfo(info) };
        if info.is_null() {
            return Err("fi_dupinfo failed".into());
        }
        // SAFETY: the copy carries its attribute structures.
        let (provider, fabric_name, domain_name, inject_size, max_msg_size, rx_size) = unsafe {
            (
                prov_name(info),
                c_string((*(*info).fabric_attr).name),
                c_string((*(*info).domain_attr).name),
                (*(*info).tx_attr).inject_size,
                (*(*info).ep_attr).max_msg_size,
                (*(*info).rx_attr).size,
            )
        };
        if rx_size < request.rx_depth {
            // SAFETY: the copy came from fi_dupinfo and is freed once, here.
            unsafe { sys::fi_freeinfo(info) };
            return Err(format!(
                "libfabric provider {provider} on {domain_name} takes {rx_size} posted receives, \
                 {} needed (set MPIRT_OFI_PROVIDER to another)",
                request.rx_depth
            ));
        }
        let mut f = Fabric {
            provider,
            fabric_name,
            domain_name,
            plan,
            inject_size,
            max_msg_size,
            granted,
            wait_fd: None,
            passed_over,
            rma_off: None,
            ep: ptr::null_mut(),
            av: ptr::null_mut(),
            cq: ptr::null_mut(),
            domain: ptr::null_mut(),
            fabric: ptr::null_mut(),
            info,
        };
        f.open_objects(request)
            .map_err(|e| format!("{} on {}: {e}", f.provider, f.domain_name))?;
        // The domain's query where the provider has one, else the endpoint's older one.
        let supported = |op, flags, compare| {
            // SAFETY: the domain and endpoint are open.
            unsafe {
                match sys::query_atomic(f.domain, sys::FI_UINT64, op, flags) {
                    Err(rc) if rc == -(sys::FI_ENOSYS as isize) => {
                        sys::atomic_valid(f.ep, sys::FI_UINT64, op, compare)
                    }
                    answer => answer,
                }
            }
        };
        let fetch_add = supported(sys::FI_SUM, sys::FI_FETCH_ATOMIC, false);
        let cswap = supported(sys::FI_CSWAP, sys::FI_COMPARE_ATOMIC, true);
        f.granted.atomics = provider::atomics_usable(f.granted, fetch_add, cswap);
        Ok(Some(f))
    }

    fn open_objects(&mut self, request: &Request) -> Result<(), String> {
        let check = |what: &str, rc: isize| {
            if rc == 0 {
                Ok(())
            } else {
                Err(format!("{what} failed: {}", sys::strerror(rc)))
            }
        };
        // SAFETY: each object is opened from live parents and stored for Drop, which closes
        // those that were opened (non-null) in reverse order.
        unsafe {
            check(
                "fi_fabric",
                sys::fi_fabric((*self.info).fabric_attr, &mut self.fabric, ptr::null_mut())
                    as isize,
            )?;
            check(
                "fi_domain",
                sys::domain(self.fabric, self.info, &mut self.domain),
            )?;
            let mut attr: sys::fi_cq_attr = std::mem::zeroed();
            attr.size = request.cq_size;
            attr.format = sys::FI_CQ_FORMAT_DATA;
            attr.wait_obj = sys::FI_WAIT_FD;
            if sys::cq_open(self.domain, &mut attr, &mut self.cq) != 0 {
                // A provider that cannot wait on an fd: waits poll.
                attr.wait_obj = sys::FI_WAIT_NONE;
                check(
                    "fi_cq_open",
                    sys::cq_open(self.domain, &mut attr, &mut self.cq),
                )?;
            } else {
                // udp;ofi_rxd (1.17) opens the queue with FI_WAIT_FD, yet answers FI_GETWAIT
                // with -FI_ENOSYS: no fd to sleep on either, and waits poll.
                let mut fd: i32 = -1;
                let rc = sys::control(
                    &mut (*self.cq).fid,
                    sys::FI_GETWAIT,
                    (&mut fd as *mut i32).cast::<c_void>(),
                );
                self.wait_fd = (rc == 0 && fd >= 0).then_some(fd);
            }
            let mut av_attr: sys::fi_av_attr = std::mem::zeroed();
            av_attr.type_ = sys::FI_AV_TABLE;
            av_attr.count = request.ranks;
            check(
                "fi_av_open",
                sys::av_open(self.domain, &mut av_attr, &mut self.av),
            )?;
            check(
                "fi_endpoint",
                sys::endpoint(self.domain, self.info, &mut self.ep),
            )?;
            if provider::named_by_host_file(&self.provider) {
                let name = CString::new(request.host_file_name).map_err(|_| {
                    format!("endpoint name {:?} holds a NUL", request.host_file_name)
                })?;
                let bytes = name.as_bytes_with_nul();
                check(
                    &format!("fi_setname({})", request.host_file_name),
                    sys::setname(self.ep, bytes.as_ptr().cast(), bytes.len()),
                )?;
            }
            check(
                "binding the completion queue",
                sys::bind(
                    &mut (*self.ep).fid,
                    &mut (*self.cq).fid,
                    (sys::FI_TRANSMIT | sys::FI_RECV) as u64,
                ),
            )?;
            check(
                "binding the address vector",
                sys::bind(&mut (*self.ep).fid, &mut (*self.av).fid, 0),
            )?;
            check(
                "fi_enable",
                sys::control(&mut (*self.ep).fid, sys::FI_ENABLE, ptr::null_mut()),
            )?;
        }
        Ok(())
    }

    /// The endpoint's address, for peers' address vectors.
    pub fn name(&self) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: the endpoint is enabled; `buf` has room for `len` bytes.
        let mut rc = unsafe { sys::getname(self.ep, buf.as_mut_ptr().cast(), &mut len) };
        if rc == -(sys::FI_ETOOSMALL as isize) {
            buf.resize(len, 0);
            // SAFETY: as above, with the size the provider asked for.
            rc = unsafe { sys::getname(self.ep, buf.as_mut_ptr().cast(), &mut len) };
        }
        if rc != 0 {
            return Err(format!("fi_getname failed: {}", sys::strerror(rc)));
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// Inserts a peer's address; returns its handle for sends and reads.
    pub fn insert(&self, name: &[u8]) -> Result<sys::fi_addr_t, String> {
        let mut addr = sys::ADDR_UNSPEC;
        // SAFETY: `name` is an address as the same provider's fi_getname wrote it (peers
        // publish their provider beside it, and the caller checked it is ours).
        let rc = unsafe { sys::av_insert(self.av, name.as_ptr().cast(), &mut addr) };
        if rc != 1 {
            return Err(format!("fi_av_insert failed: {}", sys::strerror(rc.min(0))));
        }
        Ok(addr)
    }

    /// Closes the endpoint now (see `OfiTransport::stop`): the provider then writes nothing
    /// more into this process's memory.
    pub fn close_endpoint(&mut self) {
        if !self.ep.is_null() {
            // SAFETY: the endpoint was opened once; nulled so that Drop does not close it again.
            closed("the endpoint", unsafe { sys::close(&mut (*self.ep).fid) });
            self.ep = ptr::null_mut();
        }
    }

    /// Whether the completion queue may be slept on: `fi_trywait` says nothing is pending.
    pub fn may_sleep(&self) -> bool {
        // SAFETY: the fabric and completion queue are live.
        unsafe { sys::trywait(self.fabric, &mut (*self.cq).fid) == 0 }
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: each non-null object was opened once and is closed once, children first;
        // the transport closed its memory regions before dropping this.
        unsafe {
            for (what, fid) in [
                ("the endpoint", self.ep.cast::<sys::fid>()),
                ("the address vector", self.av.cast()),
                ("the completion queue", self.cq.cast()),
                ("the domain", self.domain.cast()),
                ("the fabric", self.fabric.cast()),
            ] {
                if !fid.is_null() {
                    closed(what, sys::close(fid));
                }
            }
            sys::fi_freeinfo(self.info);
        }
    }
}

/// Checks `fi_close`'s return code for `what`. A failure (-FI_EBUSY: something still bound
/// to it) is a bug of this transport's closing order, not the user's: it fails debug builds
/// and is noted under `MPIRT_VERBOSE`; a release build goes on leaving, as nothing can
/// retry the close.
pub fn closed(what: &str, rc: isize) {
    debug_assert_eq!(rc, 0, "closing {what}: {}", sys::strerror(rc));
    if rc != 0 && std::env::var_os("MPIRT_VERBOSE").is_some_and(|v| !v.is_empty() && v != "0") {
        eprintln!(
            "mpirt: closing libfabric's {what} failed: {}",
            sys::strerror(rc)
        );
    }
}
