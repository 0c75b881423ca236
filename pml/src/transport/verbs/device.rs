//! Opening an RDMA device: which device and port, which GID, and the protection domain every
//! queue pair and registration of this rank lives in.

use std::ffi::CStr;
use std::fs;
use std::io;
use std::net::Ipv6Addr;
use std::ptr;

use rdma_sys::*;

/// An open device with an active port, and this rank's protection domain on it.
pub struct Device {
    pub name: String,
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub port: u8,
    pub gid_index: u8,
    pub gid: [u8; 16],
    pub lid: u16,
    pub mtu: ibv_mtu::Type,
    /// Longest message one work request may carry.
    pub max_msg: u32,
    /// Most entries a completion queue of the device may hold (`max_cqe`).
    pub max_cqe: usize,
    /// Scatter-gather entries one RDMA READ work request takes: the device's `max_sge`
    /// (and `max_sge_rd`, the limit for reads, where it reports one), at most [`MAX_SGE`].
    pub max_read_sge: usize,
    /// Whether the device does RDMA atomics (fetch-and-add, compare-and-swap).
    pub atomics: bool,
    /// Whether this port is RoCE (GID addressing) rather than InfiniBand (LID addressing).
    pub roce: bool,
}

const PORT: u8 = 1;
/// The most scatter-gather entries a work request is given, whatever the device takes: a
/// work queue entry grows with them (16 bytes each), and 32 blocks of the length worth a
/// list (`MPIRT_VERBS_SGE_MIN_BLOCK`) already fill a read of tens of KiB.
pub const MAX_SGE: usize = 32;
/// verbs.h's IBV_LINK_LAYER_ETHERNET (an anonymous enum, which the bindings leave out).
const LINK_LAYER_ETHERNET: u8 = 2;

fn os_error(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

/// The names of this host's RDMA devices.
pub fn device_names() -> Vec<String> {
    let mut n = 0;
    // SAFETY: ibv_get_device_list writes the count into `n` and returns a list (or null) that
    // we free below; names are read while it is alive.
    unsafe {
        let list = ibv_get_device_list(&mut n);
        if list.is_null() {
            return Vec::new();
        }
        let names = (0..n as usize)
            .map(|i| {
                CStr::from_ptr(ibv_get_device_name(*list.add(i)))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        ibv_free_device_list(list);
        names
    }
}

/// The GID index to address this port by: the first RoCE v2 GID that maps an IPv4 address,
/// else the first RoCE v2 one, else index 0 (InfiniBand, or RoCE v1 only). The kernel lists
/// the GIDs and their types under sysfs.
fn choose_gid_index(device: &str, port: u8) -> Option<u8> {
    let base = format!("/sys/class/infiniband/{device}/ports/{port}");
    let mut v2 = Vec::new();
    for i in 0..=u8::MAX {
        let Ok(kind) = fs::read_to_string(format!("{base}/gid_attrs/types/{i}")) else {
            break;
        };
        if kind.trim() != "RoCE v2" {
            continue;
        }
        let gid = fs::read_to_string(format!("{base}/gids/{i}")).unwrap_or_default();
        let ipv4 = gid
            .trim()
            .parse::<Ipv6Addr>()
            .is_ok_and(|g| g.to_ipv4_mapped().is_some());
        v2.push((i, ipv4));
    }
    v2.iter()
        .find(|(_, ipv4)| *ipv4)
        .or(v2.first())
        .map(|(i, _)| *i)
}

impl Device {
    /// The longest piece one work request carries: the port's `max_msg_sz`, or 64 KiB where
    /// a port reports none (0).
    pub fn max_piece(&self) -> usize {
        match self.max_msg {
            0 => 1 << 16,
            n => n as usize,
        }
    }

    /// Lowers the longest piece to `limit`, where given and lower than the port's
    /// (`MPIRT_VERBS_MAX_MSG`: what a port with a smaller `max_msg_sz` would do, which is
    /// how tests split operations into many pieces on a port that takes 2 GiB).
    pub fn lower_max_piece(&mut self, limit: Option<usize>) {
        if let Some(limit) = limit {
            self.max_msg = self.max_piece().min(limit).clamp(1, u32::MAX as usize) as u32;
        }
    }

    /// Lowers the scatter-gather entries a read takes to `limit`, where given and lower than
    /// the device's (`MPIRT_VERBS_MAX_SGE`: how tests split a layout into many work requests).
    pub fn lower_max_read_sge(&mut self, limit: Option<usize>) {
        if let Some(limit) = limit {
            self.max_read_sge = self.max_read_sge.min(limit).max(1);
        }
    }

    /// Opens `wanted` (a name, or the first device for an empty name).
    pub fn open(wanted: &str, gid_override: Option<u8>) -> Result<Device, String> {
        let names = device_names();
        let name = if wanted.is_empty() {
            names
                .first()
                .cloned()
                .ok_or("no RDMA device on this host (is a driver or rdma_rxe loaded?)")?
        } else if names.iter().any(|n| n == wanted) {
            wanted.to_string()
        } else {
            return Err(format!(
                "no RDMA device '{wanted}' on this host (it has: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        };
        let mut n = 0;
        // SAFETY: the list comes from ibv_get_device_list and is freed after the device we
        // want is opened (an open context does not depend on the list).
        let ctx = unsafe {
            let list = ibv_get_device_list(&mut n);
            if list.is_null() {
                return Err(os_error("listing RDMA devices"));
            }
            let mut ctx = ptr::null_mut();
            for i in 0..n as usize {
                let dev = *list.add(i);
                if CStr::from_ptr(ibv_get_device_name(dev)).to_string_lossy() == name {
                    ctx = ibv_open_device(dev);
                }
            }
            ibv_free_device_list(list);
            ctx
        };
        if ctx.is_null() {
            return Err(os_error(&format!("opening RDMA device {name}")));
        }
        // From here `Drop` closes the context (and the PD once allocated).
        let mut dev = Device {
            name,
            ctx,
            pd: ptr::null_mut(),
            port: PORT,
            gid_index: 0,
            gid: [0; 16],
            lid: 0,
            mtu: ibv_mtu::IBV_MTU_1024,
            max_msg: 0,
            max_cqe: 0,
            max_read_sge: 1,
            atomics: false,
            roce: false,
        };
        // SAFETY: a zeroed device_attr is a valid out-parameter; `ctx` is open.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above; the call fills `attr`.
        if unsafe { ibv_query_device(ctx, &mut attr) } != 0 {
            return Err(os_error(&format!("querying RDMA device {}", dev.name)));
        }
        dev.atomics = attr.atomic_cap != ibv_atomic_cap::IBV_ATOMIC_NONE;
        dev.max_cqe = attr.max_cqe.max(0) as usize;
        dev.max_read_sge = read_sge(attr.max_sge, attr.max_sge_rd);
        // SAFETY: a zeroed port_attr is a valid out-parameter; `ctx` is open.
        let mut port: ibv_port_attr = unsafe { std::mem::zeroed() };
        if unsafe { ___ibv_query_port(ctx, PORT, &mut port) } != 0 {
            return Err(os_error(&format!("querying port {PORT} of {}", dev.name)));
        }
        if port.state != ibv_port_state::IBV_PORT_ACTIVE {
            // SAFETY: ibv_port_state_str returns a static string for any value.
            let state = unsafe { CStr::from_ptr(ibv_port_state_str(port.state)) };
            return Err(format!(
                "port {PORT} of RDMA device {} is not active (state {}): is its link down?",
                dev.name,
                state.to_string_lossy()
            ));
        }
        dev.lid = port.lid;
        dev.mtu = port.active_mtu;
        dev.max_msg = port.max_msg_sz;
        dev.roce = port.link_layer == LINK_LAYER_ETHERNET;
        dev.gid_index = match gid_override {
            Some(i) => i,
            None if dev.roce => choose_gid_index(&dev.name, PORT).unwrap_or(0),
            None => 0,
        };
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: `gid` is a valid out-parameter for one GID.
        if unsafe { ibv_query_gid(ctx, PORT, i32::from(dev.gid_index), &mut gid) } != 0 {
            return Err(os_error(&format!(
                "reading GID {} of {}",
                dev.gid_index, dev.name
            )));
        }
        // SAFETY: every bit pattern of the union is a valid byte array.
        dev.gid = unsafe { gid.raw };
        if dev.roce && dev.gid == [0; 16] {
            return Err(format!(
                "GID {} of {} is empty: give the port an IP address, or choose another GID \
                 with MPIRT_VERBS_GID_INDEX",
                dev.gid_index, dev.name
            ));
        }
        // SAFETY: `ctx` is open; the PD is deallocated in `Drop`.
        dev.pd = unsafe { ibv_alloc_pd(ctx) };
        if dev.pd.is_null() {
            return Err(os_error(&format!(
                "allocating a protection domain on {}",
                dev.name
            )));
        }
        Ok(dev)
    }
}

/// The scatter-gather entries an RDMA READ may take on a device reporting `max_sge` (every
/// work request) and `max_sge_rd` (reads; 0 where a driver leaves it unset), within
/// 1..=[`MAX_SGE`].
fn read_sge(max_sge: i32, max_sge_rd: i32) -> usize {
    let rd = if max_sge_rd > 0 { max_sge_rd } else { max_sge };
    max_sge.min(rd).clamp(1, MAX_SGE as i32) as usize
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: everything created on the PD and context is gone by now (the transport
        // drops its queue pairs, queues and registrations first), and each is freed once.
        unsafe {
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            ibv_close_device(self.ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{read_sge, MAX_SGE};

    #[test]
    fn a_read_takes_the_devices_fewest_entries_within_the_cap() {
        // Soft-RoCE: 32 and 32.
        assert_eq!(read_sge(32, 32), 32);
        // ConnectX-style: reads take fewer than other work requests.
        assert_eq!(read_sge(30, 16), 16);
        assert_eq!(read_sge(16, 0), 16, "no read limit reported: max_sge");
        assert_eq!(read_sge(512, 512), MAX_SGE);
        assert_eq!(read_sge(0, 0), 1, "a device reporting none still reads");
    }
}
