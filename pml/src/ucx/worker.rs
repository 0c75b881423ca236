//! A UCP context and its one worker, owned together, and endpoints to peers' workers.

use std::ffi::c_void;
use std::mem::{self, MaybeUninit};
use std::os::fd::RawFd;
use std::ptr;
use std::time::{Duration, Instant};

use super::failure;
use super::ffi;
use super::request::{self, RequestState};
use super::status::{self, check, Started};
use super::tag;
use crate::error::PmlError;

/// One process's UCP context and worker: single-threaded, with the tag API, wake-up on an
/// event fd, RMA with 64-bit atomics for windows (`one_sided`), and active messages for one
/// thing, a peer's wake (`wake`).
pub struct Worker {
    context: ffi::ucp_context_h,
    handle: ffi::ucp_worker_h,
    /// The fd that becomes readable when the armed worker has something; `None` when the
    /// transports UCX chose cannot wake a sleeper.
    event_fd: Option<RawFd>,
    /// The bytes UCX's own request header takes: what memory lent to UCX as a request
    /// (`OwnedRequest`) must leave before the request's address.
    request_size: usize,
}

/// The active message id of a peer's wake (`Worker::wake`), the only one this PML sends.
const WAKE_ID: u32 = 1;

/// Takes a peer's wake: nothing to keep (UCS_OK: UCX may release the data, of which there
/// is none).
unsafe extern "C" fn woken(
    _arg: *mut c_void,
    _header: *const c_void,
    _header_length: ffi::size_t,
    _data: *mut c_void,
    _length: ffi::size_t,
    _param: *const ffi::ucp_am_recv_param_t,
) -> ffi::ucs_status_t {
    ffi::UCS_OK
}

/// A connection to one peer's worker. Closed by `Worker::close`, which needs the worker
/// to make progress, so it has no `Drop` of its own.
pub struct Endpoint(ffi::ucp_ep_h);

/// How long closing endpoints may take before the worker is destroyed anyway: a peer that
/// is gone must not hang this process's exit.
pub(super) const CLOSE_LIMIT: Duration = Duration::from_secs(10);

impl Worker {
    /// `ucp_init` with the TAG, WAKEUP, RMA, AMO64 and AM features (UCX does RMA and atomics
    /// in software where a transport lacks them, as over TCP), then a single-threaded worker
    /// that takes peers' wakes (`wake`).
    /// `peers` is the job's size, a hint for UCX's resource sizing.
    pub fn new(peers: usize) -> Result<Worker, PmlError> {
        let params = ffi::ucp_params_t {
            field_mask: u64::from(
                ffi::UCP_PARAM_FIELD_FEATURES
                    | ffi::UCP_PARAM_FIELD_REQUEST_SIZE
                    | ffi::UCP_PARAM_FIELD_REQUEST_INIT
                    | ffi::UCP_PARAM_FIELD_TAG_SENDER_MASK
                    | ffi::UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
            ),
            features: u64::from(
                ffi::UCP_FEATURE_TAG
                    | ffi::UCP_FEATURE_WAKEUP
                    | ffi::UCP_FEATURE_RMA
                    | ffi::UCP_FEATURE_AMO64
                    | ffi::UCP_FEATURE_AM,
            ),
            request_size: mem::size_of::<RequestState>() as ffi::size_t,
            request_init: Some(request::init),
            request_cleanup: None,
            tag_sender_mask: tag::SENDER_MASK,
            mt_workers_shared: 0,
            estimated_num_eps: peers as ffi::size_t,
            estimated_num_ppn: 0,
            name: ptr::null(),
        };
        let mut context = ptr::null_mut();
        // SAFETY: `params` is fully initialised and its field mask names only set fields; a
        // null config makes UCX read its settings (UCX_TLS, ...) from the environment;
        // `context` receives the new handle.
        check("ucp_init", unsafe {
            ffi::ucp_init_version(
                ffi::UCP_API_MAJOR,
                ffi::UCP_API_MINOR,
                &params,
                ptr::null(),
                &mut context,
            )
        })?;
        // SAFETY: an all-zero ucp_worker_params_t is valid (null pointers, zero masks); only
        // the thread mode is set and named in the field mask.
        let mut worker_params: ffi::ucp_worker_params_t = unsafe { mem::zeroed() };
        worker_params.field_mask = u64::from(ffi::UCP_WORKER_PARAM_FIELD_THREAD_MODE);
        worker_params.thread_mode = ffi::UCS_THREAD_MODE_SINGLE;
        let mut handle = ptr::null_mut();
        let made = request_size(context).and_then(|size| {
            // SAFETY: `context` is the live context made above; `handle` receives the worker.
            check("ucp_worker_create", unsafe {
                ffi::ucp_worker_create(context, &worker_params, &mut handle)
            })
            .map(|()| size)
        });
        let request_size = match made {
            Ok(size) => size,
            Err(e) => {
                // SAFETY: the context has no workers and is not used again.
                unsafe { ffi::ucp_cleanup(context) };
                return Err(e);
            }
        };
        let mut fd = -1;
        // SAFETY: the worker is live and was made with UCP_FEATURE_WAKEUP; `fd` receives it.
        let event_fd =
            (unsafe { ffi::ucp_worker_get_efd(handle, &mut fd) } == ffi::UCS_OK).then_some(fd);
        let worker = Worker {
            context,
            handle,
            event_fd,
            request_size,
        };
        worker.take_wakes()?;
        Ok(worker)
    }

    /// Registers the handler of peers' wakes (`wake`): their arrival has ended a sleep,
    /// which is all they are for, so it takes them as nothing.
    fn take_wakes(&self) -> Result<(), PmlError> {
        // SAFETY: an all-zero ucp_am_handler_param_t is valid (no callback, empty mask); the
        // fields set are the ones named in the mask.
        let mut param: ffi::ucp_am_handler_param_t = unsafe { mem::zeroed() };
        param.field_mask =
            u64::from(ffi::UCP_AM_HANDLER_PARAM_FIELD_ID | ffi::UCP_AM_HANDLER_PARAM_FIELD_CB);
        param.id = WAKE_ID;
        param.cb = Some(woken);
        // SAFETY: the worker is live and its context has the AM feature; `woken` touches
        // nothing (its argument stays null).
        check("ucp_worker_set_am_recv_handler", unsafe {
            ffi::ucp_worker_set_am_recv_handler(self.handle, &param)
        })
    }

    /// Sends `peer` (at `endpoint`) a wake: an empty active message, whose arrival ends its
    /// sleep on its armed worker (`sleep`), for a rank that published outside the PML what
    /// the peer waits for (a flag of mpirt's collective area). UCX keeps one still in flight
    /// until it is sent (the request is given back at once); a failure leaves that sleep to
    /// its timeout, and a broken connection is the next operation's to report.
    pub fn wake(&self, endpoint: &Endpoint) {
        // SAFETY: all-zero is a valid ucp_request_param_t: no callback, no request memory of
        // ours, so UCX hands back a request of its own pool while the send is in flight.
        let param: ffi::ucp_request_param_t = unsafe { mem::zeroed() };
        // SAFETY: `endpoint` is a live endpoint of this worker; the message has no header
        // and no data, so UCX reads no memory of ours.
        let started = unsafe {
            ffi::ucp_am_send_nbx(endpoint.0, WAKE_ID, ptr::null(), 0, ptr::null(), 0, &param)
        };
        if let Ok(Started::Pending(request)) = status::started("ucp_am_send_nbx", started) {
            // SAFETY: a live request of this worker with no callback, freed once: UCX
            // finishes the send and then releases it (nothing of ours is in it).
            unsafe { ffi::ucp_request_free(request) };
        }
    }

    pub fn handle(&self) -> ffi::ucp_worker_h {
        self.handle
    }

    pub fn context(&self) -> ffi::ucp_context_h {
        self.context
    }

    pub fn request_size(&self) -> usize {
        self.request_size
    }

    /// This worker's address, to publish so that peers can connect.
    pub fn address(&self) -> Result<Vec<u8>, PmlError> {
        let mut address = ptr::null_mut();
        let mut len: ffi::size_t = 0;
        // SAFETY: the worker is live; UCX fills both out-parameters.
        check("ucp_worker_get_address", unsafe {
            ffi::ucp_worker_get_address(self.handle, &mut address, &mut len)
        })?;
        // SAFETY: UCX returned `len` readable bytes at `address`, copied before release.
        let bytes =
            unsafe { std::slice::from_raw_parts(address.cast::<u8>(), len as usize) }.to_vec();
        // SAFETY: `address` came from ucp_worker_get_address on this worker, released once.
        unsafe { ffi::ucp_worker_release_address(self.handle, address) };
        Ok(bytes)
    }

    /// An endpoint to the worker whose address is `address` (another worker's `address()`).
    /// With `on_failure`, the endpoint is in UCX's peer error mode: if the connection breaks,
    /// UCX fails its operations and calls `failure::on_error` with `on_failure`, which must
    /// stay valid while this worker lives.
    pub fn connect(
        &self,
        address: &[u8],
        on_failure: Option<*mut c_void>,
    ) -> Result<Endpoint, PmlError> {
        // SAFETY: an all-zero ucp_ep_params_t is valid; the fields set below are the ones
        // named in the field mask.
        let mut params: ffi::ucp_ep_params_t = unsafe { mem::zeroed() };
        params.field_mask = u64::from(ffi::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS);
        params.address = address.as_ptr().cast();
        if let Some(arg) = on_failure {
            params.field_mask |= u64::from(
                ffi::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | ffi::UCP_EP_PARAM_FIELD_ERR_HANDLER,
            );
            params.err_mode = ffi::UCP_ERR_HANDLING_MODE_PEER;
            params.err_handler = ffi::ucp_err_handler_t {
                cb: Some(failure::on_error),
                arg,
            };
        }
        let mut ep = ptr::null_mut();
        // SAFETY: the worker is live; `address` is a worker address's bytes, which UCX
        // parses (and copies what it needs from) during the call.
        check("ucp_ep_create", unsafe {
            ffi::ucp_ep_create(self.handle, &params, &mut ep)
        })?;
        Ok(Endpoint(ep))
    }

    /// One round of UCX progress; returns whether anything happened.
    pub fn progress(&self) -> bool {
        // SAFETY: the worker is live and only this thread uses it (single-thread mode).
        unsafe { ffi::ucp_worker_progress(self.handle) > 0 }
    }

    /// Sleeps until the worker may have something to do, or `limit` passes. Returns at once
    /// when events are already pending (arming refused), so nothing is slept through.
    pub fn sleep(&self, limit: Duration) -> Result<(), PmlError> {
        let Some(fd) = self.event_fd else {
            std::thread::yield_now();
            return Ok(());
        };
        // SAFETY: the worker is live and was made with UCP_FEATURE_WAKEUP.
        match unsafe { ffi::ucp_worker_arm(self.handle) } {
            ffi::UCS_OK => {}
            ffi::UCS_ERR_BUSY => return Ok(()),
            other => return Err(status::failed("ucp_worker_arm", other)),
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = limit.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `pfd` is one valid pollfd; an error (EINTR) just ends the sleep early.
        unsafe { libc::poll(&mut pfd, 1, ms) };
        Ok(())
    }

    /// Starts a flush of everything this worker sent; `Done` when there was nothing to do.
    pub fn start_flush(&self) -> Result<Started, PmlError> {
        let param = request::send_param();
        // SAFETY: the worker is live; `param` names a callback of the send kind, which UCX
        // calls with the request's user area (a RequestState).
        status::started("ucp_worker_flush_nbx", unsafe {
            ffi::ucp_worker_flush_nbx(self.handle, &param)
        })
    }

    /// Closes endpoints, flushing what the sound ones still carry (a broken one, `true`
    /// beside it, is released at once, as UCX requires); with `settle`, progresses until they
    /// are closed or `CLOSE_LIMIT` passes.
    pub fn close(&self, settle: bool, endpoints: impl IntoIterator<Item = (Endpoint, bool)>) {
        let mut pending = Vec::new();
        for (Endpoint(ep), broken) in endpoints {
            let mut param = request::send_param();
            if broken {
                param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_FLAGS;
                param.flags = ffi::UCP_EP_CLOSE_FLAG_FORCE;
            }
            // SAFETY: `ep` is a live endpoint of this worker, closed once (it was moved in).
            let closing = unsafe { ffi::ucp_ep_close_nbx(ep, &param) };
            // A close that failed at once has nothing left to wait for.
            if let Ok(Started::Pending(r)) = status::started("ucp_ep_close_nbx", closing) {
                pending.push(r);
            }
        }
        let deadline = Instant::now() + CLOSE_LIMIT;
        while settle && !pending.is_empty() && Instant::now() < deadline {
            self.progress();
            pending.retain(|&r| {
                // SAFETY: `r` is a live close request; freed once, when it is done.
                let done = unsafe { request::peek(r) }.is_some();
                if done {
                    // SAFETY: as above: finished, freed here, then dropped from `pending`.
                    unsafe { request::take_and_free(r) };
                }
                !done
            });
        }
    }

    /// Whether a probe with this selector finds a message; with `remove`, the message is
    /// taken out of UCX's unexpected queue and must be received with `ucp_tag_msg_recv_nbx`.
    pub fn probe(
        &self,
        wanted: u64,
        mask: u64,
        remove: bool,
    ) -> Option<(ffi::ucp_tag_message_h, ffi::ucp_tag_recv_info_t)> {
        let mut info = MaybeUninit::<ffi::ucp_tag_recv_info_t>::uninit();
        // SAFETY: the worker is live; UCX fills `info` when it returns a message.
        let message = unsafe {
            ffi::ucp_tag_probe_nb(
                self.handle,
                wanted,
                mask,
                i32::from(remove),
                info.as_mut_ptr(),
            )
        };
        // SAFETY: a non-null message means UCX filled `info`.
        (!message.is_null()).then(|| (message, unsafe { info.assume_init() }))
    }
}

/// The size of UCX's request header in this context (`ucp_context_query`).
fn request_size(context: ffi::ucp_context_h) -> Result<usize, PmlError> {
    // SAFETY: an all-zero ucp_context_attr_t is valid; only the field named in the mask is
    // asked for, and UCX fills it.
    let mut attr: ffi::ucp_context_attr_t = unsafe { mem::zeroed() };
    attr.field_mask = u64::from(ffi::UCP_ATTR_FIELD_REQUEST_SIZE);
    // SAFETY: `context` is live; `attr` is a valid ucp_context_attr_t to fill.
    check("ucp_context_query", unsafe {
        ffi::ucp_context_query(context, &mut attr)
    })?;
    Ok(attr.request_size as usize)
}

/// The version of the UCX library loaded, such as "1.13.1".
pub fn version() -> String {
    // SAFETY: ucp_get_version_string returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(ffi::ucp_get_version_string()) }
        .to_string_lossy()
        .into_owned()
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: both handles are live and dropped once, worker first (UCX's order).
        unsafe {
            ffi::ucp_worker_destroy(self.handle);
            ffi::ucp_cleanup(self.context);
        }
    }
}

impl Endpoint {
    pub fn handle(&self) -> ffi::ucp_ep_h {
        self.0
    }

    /// What UCX chose for this endpoint's lanes, read from its printout of them (UCX 1.13
    /// has no query for them).
    pub fn lanes(&self) -> Lanes {
        Lanes(self.print_info())
    }

    /// UCX's printout of this endpoint (`ucp_ep_print_info`); empty where it cannot be had.
    fn print_info(&self) -> String {
        let mut text: *mut libc::c_char = ptr::null_mut();
        let mut len: libc::size_t = 0;
        // SAFETY: open_memstream gets two valid out-locations, filled at fclose.
        let stream = unsafe { libc::open_memstream(&mut text, &mut len) };
        if stream.is_null() {
            return String::new();
        }
        // SAFETY: the endpoint is live; `stream` is an open FILE, which bindgen's FILE and
        // libc's name alike (glibc's struct _IO_FILE); it is closed once, below, after which
        // `text` holds `len` bytes that we own and free once.
        let printout = unsafe {
            ffi::ucp_ep_print_info(self.0, stream.cast());
            libc::fclose(stream);
            let bytes = std::slice::from_raw_parts(text.cast::<u8>(), len).to_vec();
            libc::free(text.cast());
            bytes
        };
        String::from_utf8_lossy(&printout).into_owned()
    }
}

/// An endpoint's lanes as `ucp_ep_print_info` prints them, a line a lane:
/// `#  lane[0]:  1:tcp/eth0.0 md[1] -> md[1]/tcp/sysdev[255] am am_bw#0`, the resource
/// (`transport/device`) and then what the lane carries (`am`, `am_bw#0`, `rma_bw#0`, ...).
pub struct Lanes(String);

impl Lanes {
    /// Each lane line's resource and the words after it.
    fn each(&self) -> impl Iterator<Item = (&str, Vec<&str>)> {
        self.0
            .lines()
            .filter(|l| l.contains("lane["))
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let resource = words.find_map(|word| {
                    word.split_once(':')
                        .map(|(_, r)| r)
                        .filter(|r| r.contains('/'))
                })?;
                Some((resource, words.collect()))
            })
    }

    /// The resource of each lane, as `tcp/eth0.0` or `posix/memory.0`; each named once.
    pub fn transports(&self) -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        for (r, _) in self.each() {
            if !found.iter().any(|f| f == r) {
                found.push(r.to_string());
            }
        }
        found
    }

    /// Whether every lane that carries active messages (`am`, `am_bw#N`), at least one, is
    /// UCX's TCP transport: what carries a non-contiguous datatype's rendezvous fragments.
    pub fn active_messages_over_tcp(&self) -> bool {
        let mut am = self
            .each()
            .filter(|(_, carries)| {
                carries
                    .iter()
                    .any(|w| *w == "am" || w.starts_with("am_bw#"))
            })
            .peekable();
        am.peek().is_some() && am.all(|(resource, _)| resource.starts_with("tcp/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_read_from_the_printout() {
        let printout = "#\n# UCP endpoint\n#\n#               peer: <no debug data>\n\
            #                 lane[0]:  8:tcp/eth0.0 md[2]      -> md[2]/tcp/sysdev[255] am am_bw#0\n\
            #                 lane[1]:  3:posix/memory.0 md[1] -> md[1]/posix rma_bw#0\n\
            #                 lane[2]:  8:tcp/eth0.0 md[2]      -> md[2]/tcp rma_bw#1\n";
        let lanes = Lanes(printout.into());
        assert_eq!(lanes.transports(), ["tcp/eth0.0", "posix/memory.0"]);
        assert!(lanes.active_messages_over_tcp());
        let none = Lanes("# nothing here".into());
        assert!(none.transports().is_empty());
        assert!(!none.active_messages_over_tcp(), "no lane, so no TCP");
    }

    #[test]
    fn active_messages_over_shared_memory_are_not_over_tcp() {
        let printout =
            "#  lane[0]:  2:posix/memory.0 md[1] -> md[1]/posix/sysdev[255] am am_bw#0\n\
            #  lane[1]:  8:tcp/eth0.0 md[2] -> md[2]/tcp/sysdev[255] am_bw#1\n\
            #  lane[2]:  4:cma/memory.0 md[3] -> md[3]/cma/sysdev[255] rma_bw#0\n";
        assert!(!Lanes(printout.into()).active_messages_over_tcp());
        let tcp_and_cma = "#  lane[0]:  8:tcp/eth0.0 md[2] -> md[2]/tcp/sysdev[255] am am_bw#0\n\
            #  lane[1]:  4:cma/memory.0 md[3] -> md[3]/cma/sysdev[255] rma_bw#0\n";
        assert!(Lanes(tcp_and_cma.into()).active_messages_over_tcp());
    }
}
