//! Memory registrations with the provider's domain, as its `mr_mode` asks (see
//! [`MrPlan`](super::provider::MrPlan)): keys chosen by the provider or by us, regions bound
//! to the endpoint and enabled where it wants that.

use std::ffi::c_void;
use std::ptr;

use super::fabric::Fabric;
use super::sys;

/// One registered range; closed on drop (before the fabric's objects close).
pub struct Region {
    mr: *mut sys::fid_mr,
    /// Where the range starts, for offset-addressed providers.
    pub base: usize,
}

impl Region {
    /// Registers `len` bytes at `buf` for `access` (`FI_SEND`, `FI_RECV`, `FI_READ`,
    /// `FI_REMOTE_READ`); `key` is the key asked for where the provider does not pick keys.
    pub fn register(
        fabric: &Fabric,
        buf: *const u8,
        len: usize,
        access: u64,
        key: u64,
    ) -> Result<Region, String> {
        let mut mr = ptr::null_mut();
        // SAFETY: the domain is live; the caller keeps `buf` valid for `len` bytes until the
        // region is dropped.
        let rc = unsafe { sys::mr_reg(fabric.domain, buf.cast(), len, access, key, &mut mr) };
        if rc != 0 {
            return Err(format!(
                "registering {len} bytes with {}: {}",
                fabric.provider,
                sys::strerror(rc)
            ));
        }
        let region = Region {
            mr,
            base: buf as usize,
        };
        if fabric.plan.endpoint {
            // SAFETY: the region and endpoint are live; FI_MR_ENDPOINT asks to bind the
            // region to the endpoint that uses it, then enable it.
            let rc = unsafe {
                let rc = sys::bind(&mut (*mr).fid, &mut (*fabric.ep).fid, 0);
                if rc == 0 {
                    sys::control(&mut (*mr).fid, sys::FI_ENABLE, ptr::null_mut())
                } else {
                    rc
                }
            };
            if rc != 0 {
                return Err(format!(
                    "binding a memory region to the endpoint: {}",
                    sys::strerror(rc)
                ));
            }
        }
        Ok(region)
    }

    /// The descriptor passed with local operations on this memory (`fi_mr_desc`).
    pub fn desc(&self) -> *mut c_void {
        // SAFETY: the region is live.
        unsafe { (*self.mr).mem_desc }
    }

    /// The key a peer reads this memory with (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        // SAFETY: the region is live.
        unsafe { (*self.mr).key }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: registered once in `register`, closed once here.
        super::fabric::closed("a memory region", unsafe {
            sys::close(&mut (*self.mr).fid)
        });
    }
}
