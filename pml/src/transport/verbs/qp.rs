//! One reliable-connected queue pair per peer, taken INIT -> RTR -> RTS with the peer's
//! address from the key-value service (no rdma_cm).

use std::io;
use std::ptr;
use std::time::Duration;

use rdma_sys::*;

use super::device::Device;

/// What a peer needs to connect its queue pair to ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAddress {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    pub mtu: ibv_mtu::Type,
}

pub struct QueuePair {
    pub qp: *mut ibv_qp,
}

/// Work requests each queue pair's send queue holds; the transport posts no more than this.
pub const SEND_DEPTH: u32 = 256;
/// RDMA READs one queue pair may have in flight (both as reader and as target).
const READS_IN_FLIGHT: u8 = 16;
/// The local ACK timeout (4.096 us * 2^ACK_TIMEOUT a try) and the retries after the first
/// try (see `connect`).
const ACK_TIMEOUT: u8 = 18;
const RETRIES: u8 = 6;
/// How long a peer's device may go on retransmitting a request after first sending it: its
/// tries' timeouts together, about 7.5 s. A registration a peer read stays registered this
/// long after it is dropped (`Registry`), since a READ retransmitted late is answered under
/// its key.
pub const RETRANSMIT_WINDOW: Duration =
    Duration::from_nanos(4096 * (1 << ACK_TIMEOUT) * (RETRIES as u64 + 1));

fn failed(step: &str, rc: i32) -> String {
    format!("{step} failed: {}", io::Error::from_raw_os_error(rc))
}

impl QueuePair {
    pub fn new(dev: &Device, cq: *mut ibv_cq, srq: *mut ibv_srq) -> Result<QueuePair, String> {
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq,
            cap: ibv_qp_cap {
                max_send_wr: SEND_DEPTH,
                max_recv_wr: 0,
                // RDMA READs into a receive's blocks scatter to this many.
                max_send_sge: dev.max_read_sge as u32,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            qp_type: ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 1,
        };
        // SAFETY: `init` is a valid attribute block; the PD, CQ and SRQ are live.
        let qp = unsafe { ibv_create_qp(dev.pd, &mut init) };
        if qp.is_null() {
            return Err(format!(
                "creating a queue pair on {}: {}",
                dev.name,
                io::Error::last_os_error()
            ));
        }
        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = dev.port;
        // Remote atomics: windows' fetch-and-add and compare-and-swap (`one_sided.rs`).
        attr.qp_access_flags = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
            | ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        let this = QueuePair { qp };
        this.modify(&mut attr, mask, "queue pair RESET -> INIT")?;
        Ok(this)
    }

    pub fn qpn(&self) -> u32 {
        // SAFETY: `qp` is live.
        unsafe { (*self.qp).qp_num }
    }

    fn modify(
        &self,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        step: &str,
    ) -> Result<(), String> {
        // SAFETY: `attr` is valid for the fields `mask` names; `qp` is live.
        let rc = unsafe { ibv_modify_qp(self.qp, attr, mask.0 as i32) };
        if rc != 0 {
            return Err(failed(step, rc));
        }
        Ok(())
    }

    /// Connects to the peer's queue pair: INIT -> RTR (ready to receive) -> RTS.
    pub fn connect(&self, dev: &Device, local_psn: u32, peer: &QpAddress) -> Result<(), String> {
        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = dev.mtu.min(peer.mtu);
        attr.dest_qp_num = peer.qpn;
        attr.rq_psn = peer.psn;
        attr.max_dest_rd_atomic = READS_IN_FLIGHT;
        attr.min_rnr_timer = 12;
        attr.ah_attr.port_num = dev.port;
        attr.ah_attr.dlid = peer.lid;
        if dev.roce || peer.gid != [0; 16] {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = ibv_gid { raw: peer.gid };
            attr.ah_attr.grh.sgid_index = dev.gid_index;
            attr.ah_attr.grh.hop_limit = 64;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_AV
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut attr, mask, "queue pair INIT -> RTR")?;

        let mut attr = zeroed_attr();
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = local_psn;
        // About 1.07 s per try (4.096 us * 2^18), 7 tries: a dead peer is an error within
        // about 8 s. Shorter tries (67 ms at 14) ran out on a live peer in the Soft-RoCE
        // guest, whose emulated CPU can answer an RDMA READ that late under osu_bw; UCX waits
        // 1 s a try too, Open MPI 4 s. 6, not 7 retries: the spec counts 7 as 7, but Soft-RoCE
        // (rxe) retries forever at 7, so a peer that died was never noticed there.
        attr.timeout = ACK_TIMEOUT;
        attr.retry_cnt = RETRIES;
        // 7: retry forever while the peer has no receive posted; credits make that rare, and a
        // dead peer sends no RNR NAK (its queue pair is gone), so this never hides one.
        attr.rnr_retry = 7;
        attr.max_rd_atomic = READS_IN_FLIGHT;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut attr, mask, "queue pair RTR -> RTS")
    }
}

fn zeroed_attr() -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is plain data for which all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: the queue pair is live and destroyed once.
        unsafe { ibv_destroy_qp(self.qp) };
    }
}
