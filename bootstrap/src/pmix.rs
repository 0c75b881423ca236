//! The PMIx client (feature `pmix`): how ranks started by `srun --mpi=pmix` or Open MPI's
//! `mpirun` learn their place in the job and exchange endpoints, through the system's libpmix.
//!
//! Values go as byte objects, so they are binary-safe; puts are global, committed before each
//! fence, and the fence collects every rank's data so that gets after it are local. A get
//! names the rank that put the key: a search of every rank's (`PMIX_RANK_UNDEF`) goes
//! unanswered under Open MPI 4's mpirun, whose shared-memory data store (gds ds21) answers
//! only a get for one rank, and a process's environment is no place to choose another store
//! (`PMIX_MCA_gds`: setting a variable races with any thread that reads one).

use std::ffi::{c_char, CStr, CString};
use std::mem::MaybeUninit;
use std::ptr;

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/pmix_bindings.rs"));
}

/// PMIx's rank for "the namespace as a whole" (a macro over UINT32_MAX, which bindgen does
/// not evaluate).
const RANK_WILDCARD: sys::pmix_rank_t = u32::MAX - 1;

/// What PMIx tells a rank at start-up.
pub struct Place {
    pub rank: u32,
    pub size: u32,
    pub local_rank: u32,
    pub local_size: u32,
    pub node_id: u32,
    /// Which application of an MPMD launch this rank runs (`PMIX_APPNUM`; 0 where unset).
    pub appnum: u32,
    /// The scheduler's job id where the server gives one (`PMIX_JOBID`), else the namespace.
    pub job_id: String,
}

/// A rank's line to its PMIx server, from `init` to `finalize`.
pub struct Client {
    me: sys::pmix_proc_t,
    finalized: bool,
}

/// Text for a PMIx status.
fn status_text(status: sys::pmix_status_t) -> String {
    // SAFETY: PMIx_Error_string returns a pointer to a static NUL-terminated string for
    // any status, known or not.
    let text = unsafe { CStr::from_ptr(sys::PMIx_Error_string(status)) };
    format!("{} ({status})", text.to_string_lossy())
}

fn check(operation: &str, status: sys::pmix_status_t) -> Result<(), String> {
    if status == sys::PMIX_SUCCESS as sys::pmix_status_t {
        Ok(())
    } else {
        Err(format!("PMIx {operation}: {}", status_text(status)))
    }
}

/// A C string of `text`, which holds no NUL (keys and messages this crate makes).
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).expect("NULs were replaced")
}

/// An attribute name from the bindings (`b"pmix.job.size\0"`) as a C string.
fn key(name: &[u8]) -> &CStr {
    CStr::from_bytes_with_nul(name).expect("PMIx's attribute names end in one NUL")
}

impl Client {
    /// Connects to the PMIx server named in the environment.
    pub fn init() -> Result<Client, String> {
        let mut me = MaybeUninit::<sys::pmix_proc_t>::zeroed();
        // SAFETY: PMIx_Init fills the pmix_proc_t it is given (a zeroed one is a valid
        // value of the plain C struct) and takes no info array.
        let status = unsafe { sys::PMIx_Init(me.as_mut_ptr(), ptr::null_mut(), 0) };
        check("init", status)?;
        // SAFETY: zeroed, then filled by a successful PMIx_Init.
        let me = unsafe { me.assume_init() };
        Ok(Client {
            me,
            finalized: false,
        })
    }

    /// This rank's place in the job, from the server's attributes.
    pub fn place(&self) -> Result<Place, String> {
        let job = self.of_job();
        let size = self.number(&job, key(sys::PMIX_JOB_SIZE))?;
        let local_size = self.number(&job, key(sys::PMIX_LOCAL_SIZE))?;
        let local_rank = self.number(&self.me, key(sys::PMIX_LOCAL_RANK))?;
        let node_id = self.number(&self.me, key(sys::PMIX_NODEID))?;
        // Servers that launch one application may not publish it.
        let appnum = self.number(&self.me, key(sys::PMIX_APPNUM)).unwrap_or(0);
        let job_id = match self.value(&job, key(sys::PMIX_JOBID)) {
            Ok(Some(Value::Text(id))) => id,
            _ => self.namespace(),
        };
        Ok(Place {
            rank: self.me.rank,
            size,
            local_rank,
            local_size,
            node_id,
            appnum,
            job_id,
        })
    }

    /// This rank, as the server numbers it.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// This job's namespace, as text.
    pub fn namespace(&self) -> String {
        // SAFETY: PMIx_Init wrote a NUL-terminated namespace into the array, which is one
        // byte longer than the longest namespace.
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// The job as a whole: this namespace, every rank.
    fn of_job(&self) -> sys::pmix_proc_t {
        sys::pmix_proc_t {
            nspace: self.me.nspace,
            rank: RANK_WILDCARD,
        }
    }

    /// A numeric attribute of `proc`.
    fn number(&self, proc: &sys::pmix_proc_t, name: &CStr) -> Result<u32, String> {
        match self.value(proc, name)? {
            Some(Value::Number(n)) => u32::try_from(n)
                .map_err(|_| format!("PMIx get {}: {n} is out of range", name.to_string_lossy())),
            Some(Value::Other(data_type)) => Err(format!(
                "PMIx get {}: the server's value is of PMIx type {data_type}, not a number",
                name.to_string_lossy()
            )),
            Some(_) => Err(format!(
                "PMIx get {}: the server's value is not a number",
                name.to_string_lossy()
            )),
            None => Err(format!(
                "PMIx get {}: the server has no such attribute",
                name.to_string_lossy()
            )),
        }
    }

    /// The value of `name` for `proc`, `None` where the server has none.
    fn value(&self, proc: &sys::pmix_proc_t, name: &CStr) -> Result<Option<Value>, String> {
        let mut value: *mut sys::pmix_value_t = ptr::null_mut();
        // SAFETY: proc and name are valid for the call; PMIx_Get stores a pointer to a
        // value it allocated in `value` on success, which `Value::take` releases.
        let status = unsafe { sys::PMIx_Get(proc, name.as_ptr(), ptr::null(), 0, &mut value) };
        if status == sys::PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        check(&format!("get {}", name.to_string_lossy()), status)?;
        // SAFETY: a successful PMIx_Get set `value` to a value of its own, ours to free.
        Ok(Some(unsafe { Value::take(value) }))
    }

    /// Puts `value` under `key` for every rank of the job; visible to them after the next
    /// fence.
    pub fn put(&mut self, name: &str, value: &[u8]) -> Result<(), String> {
        let name = c_string(name);
        let mut object = sys::pmix_value_t {
            type_: sys::PMIX_BYTE_OBJECT as sys::pmix_data_type_t,
            data: sys::pmix_value__bindgen_ty_1 {
                bo: sys::pmix_byte_object_t {
                    bytes: value.as_ptr() as *mut c_char,
                    size: value.len(),
                },
            },
        };
        // SAFETY: PMIx_Put copies the value (and the bytes it points to, which live for the
        // call) into its own store and keeps no pointer into `object`.
        let status = unsafe { sys::PMIx_Put(sys::PMIX_GLOBAL as u8, name.as_ptr(), &mut object) };
        check("put", status)
    }

    /// Commits this rank's puts, then waits for every rank of the job, collecting all their
    /// data.
    pub fn fence(&mut self) -> Result<(), String> {
        // SAFETY: PMIx_Commit takes no arguments.
        check("commit", unsafe { sys::PMIx_Commit() })?;
        let job = self.of_job();
        let mut collect = MaybeUninit::<sys::pmix_info_t>::zeroed();
        let yes = true;
        // SAFETY: PMIx_Info_load copies the key and the bool `yes` points to into the
        // zeroed info (a valid value of the plain C struct); a bool holds no allocation, so
        // the info needs no destructing.
        let status = unsafe {
            sys::PMIx_Info_load(
                collect.as_mut_ptr(),
                key(sys::PMIX_COLLECT_DATA).as_ptr(),
                (&yes as *const bool).cast(),
                sys::PMIX_BOOL as sys::pmix_data_type_t,
            )
        };
        check("fence", status)?;
        // SAFETY: one proc (the whole namespace) and one info, loaded above, both valid for
        // the call.
        let status = unsafe { sys::PMIx_Fence(&job, 1, collect.as_ptr(), 1) };
        check("fence", status)
    }

    /// The value rank `from` of the job put under `key`, `None` where it did not.
    pub fn get(&mut self, from: u32, name: &str) -> Result<Option<Vec<u8>>, String> {
        let from = sys::pmix_proc_t {
            nspace: self.me.nspace,
            rank: from,
        };
        match self.value(&from, &c_string(name))? {
            Some(Value::Bytes(bytes)) => Ok(Some(bytes)),
            Some(Value::Text(text)) => Ok(Some(text.into_bytes())),
            Some(Value::Number(_) | Value::Other(_)) => {
                Err(format!("PMIx get {name}: the value is not bytes"))
            }
            None => Ok(None),
        }
    }

    /// Asks the server to end the whole job with `code`; returns if it could not.
    pub fn abort(&mut self, code: i32, message: &str) {
        let message = c_string(message);
        // SAFETY: no procs means the caller's whole namespace; the message lives for the
        // call, which does not return where the server ends the job.
        unsafe { sys::PMIx_Abort(code, message.as_ptr(), ptr::null_mut(), 0) };
    }

    /// Says goodbye to the server.
    pub fn finalize(&mut self) -> Result<(), String> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        // SAFETY: no info array; called once, after every other call.
        check("finalize", unsafe { sys::PMIx_Finalize(ptr::null(), 0) })
    }
}

/// A value PMIx returned, copied out of its allocation.
enum Value {
    Number(u64),
    Text(String),
    Bytes(Vec<u8>),
    /// A type this client does not read (its PMIx data type).
    Other(u32),
}

impl Value {
    /// Copies out and frees a value PMIx_Get returned.
    ///
    /// # Safety
    /// `value` is a value PMIx_Get allocated, not yet freed; it is freed here.
    unsafe fn take(value: *mut sys::pmix_value_t) -> Value {
        let v = &*value;
        let data = &v.data;
        let copied = match u32::from(v.type_) {
            sys::PMIX_BOOL => Value::Number(u64::from(data.flag)),
            sys::PMIX_UINT8 => Value::Number(u64::from(data.uint8)),
            sys::PMIX_UINT16 => Value::Number(u64::from(data.uint16)),
            sys::PMIX_UINT32 => Value::Number(u64::from(data.uint32)),
            sys::PMIX_UINT64 => Value::Number(data.uint64),
            sys::PMIX_SIZE => Value::Number(data.size as u64),
            sys::PMIX_UINT => Value::Number(u64::from(data.uint)),
            sys::PMIX_INT => Value::Number(data.integer.max(0) as u64),
            sys::PMIX_STRING if !data.string.is_null() => {
                Value::Text(CStr::from_ptr(data.string).to_string_lossy().into_owned())
            }
            sys::PMIX_BYTE_OBJECT if data.bo.size == 0 => Value::Bytes(Vec::new()),
            sys::PMIX_BYTE_OBJECT => Value::Bytes(
                std::slice::from_raw_parts(data.bo.bytes as *const u8, data.bo.size).to_vec(),
            ),
            other => Value::Other(other),
        };
        sys::PMIx_Value_destruct(value);
        libc::free(value.cast());
        copied
    }
}
