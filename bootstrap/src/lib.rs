//! The bootstrap client a rank uses to learn who it is and to exchange endpoints with its peers.
//!
//! Under rsrun, the environment names the rank, the job and rsrun's key-value service; the client
//! connects, proves it belongs to the job with the per-job secret, and then does put / fence /
//! get over that one connection. Under `srun --mpi=pmi2` (`PMI_FD` set), the same three steps go
//! over PMI-2 to Slurm (see `pmi2.rs`). Started without a launcher, the program is a singleton:
//! rank 0 of 1, with a local map standing in for the service.
//!
//! A crate of its own, so that ranks (mpirt) use it without the launcher's CLI; rsrun's
//! server (launcher's `kvs`) speaks the same [`wire`] format and sets the same [`vars`].

pub mod pmi2;
pub mod wire;

use std::collections::HashMap;
use std::env;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::pmi2::Message;
use crate::wire::{Request, Response, MAX_FRAME};

/// Environment variable names rsrun sets for every rank.
pub mod vars {
    pub const RANK: &str = "MPIRT_RANK";
    pub const SIZE: &str = "MPIRT_SIZE";
    pub const LOCAL_RANK: &str = "MPIRT_LOCAL_RANK";
    pub const LOCAL_SIZE: &str = "MPIRT_LOCAL_SIZE";
    pub const JOB_ID: &str = "MPIRT_JOB_ID";
    pub const KVS_ADDR: &str = "MPIRT_KVS_ADDR";
    pub const KVS_SECRET: &str = "MPIRT_KVS_SECRET";
    pub const VERBOSE: &str = "MPIRT_VERBOSE";
    pub const TRANSPORT: &str = "MPIRT_TRANSPORT";
    pub const EAGER_LIMIT: &str = "MPIRT_EAGER_LIMIT";
    pub const TCP_IF: &str = "MPIRT_TCP_IF";
    pub const VERBS_DEV: &str = "MPIRT_VERBS_DEV";
    pub const PML: &str = "MPIRT_PML";
    /// Set (to the CPU) only for a rank rsrun bound to a CPU of its own, which is then not
    /// oversubscribed even though it sees one CPU: it cannot tell that from ranks that all
    /// inherited one CPU (`taskset -c 0 rsrun ...`, a Slurm cpuset).
    pub const BOUND_CPU: &str = "MPIRT_BOUND_CPU";
}

/// The key under which the job's key-value space holds the secret the ranks' own connections
/// prove they know (64 hex digits: 256 random bits). rsrun's service holds it from the start
/// and gives it only to connections that proved to know the service's secret; under PMI-2,
/// rank 0 makes it and puts it before the first fence, and only the job's tasks can get it.
pub const JOB_SECRET_KEY: &str = "mpirt.job-secret";

/// How long an aborting rank waits for rsrun to acknowledge before exiting on its own.
const ABORT_ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the bootstrap could not do what was asked.
#[derive(Debug)]
pub enum BootstrapError {
    /// A variable rsrun always sets is missing, so the environment is not from rsrun.
    MissingVar(&'static str),
    /// A variable is set but cannot be used.
    BadVar {
        name: &'static str,
        value: String,
        why: &'static str,
    },
    /// The key-value service could not be reached.
    Connect { addr: String, source: io::Error },
    /// The connection broke during an operation.
    Io {
        operation: &'static str,
        source: io::Error,
    },
    /// rsrun refused this rank (wrong secret, duplicate rank, ...).
    Rejected(String),
    /// No value under this key: the peer has not put it, or not before the last fence.
    NotFound(String),
    /// rsrun answered something this client does not understand.
    Protocol(String),
    /// Rank 0 under PMI-2 could not make the job's secret.
    Random(io::Error),
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapError::MissingVar(name) => write!(
                f,
                "{name} is not set, although {} is: was this rank started by rsrun?",
                vars::RANK
            ),
            BootstrapError::BadVar { name, value, why } => write!(f, "{name} {why}: '{value}'"),
            BootstrapError::Connect { addr, source } => {
                write!(f, "cannot reach rsrun's key-value service at {addr}: {source}")
            }
            BootstrapError::Io { operation, source } => write!(
                f,
                "lost the connection to rsrun's key-value service during {operation}: {source}"
            ),
            BootstrapError::Rejected(why) => {
                write!(f, "rsrun's key-value service refused this rank: {why}")
            }
            BootstrapError::NotFound(key) => write!(
                f,
                "key '{key}' is not in rsrun's key-value service (was it put before the last fence?)"
            ),
            BootstrapError::Protocol(what) => {
                write!(f, "unexpected answer from rsrun's key-value service: {what}")
            }
            BootstrapError::Random(e) => {
                write!(f, "cannot read /dev/urandom to make the job's secret: {e}")
            }
        }
    }
}

impl std::error::Error for BootstrapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BootstrapError::Connect { source, .. }
            | BootstrapError::Io { source, .. }
            | BootstrapError::Random(source) => Some(source),
            _ => None,
        }
    }
}

/// Where puts and gets go.
enum Backend {
    /// Connected to rsrun's key-value service.
    Kvs(TcpStream),
    /// Started by Slurm's srun --mpi=pmi2: its socket, and the job id gets name.
    Pmi2 { stream: UnixStream, job: String },
    /// Started alone: our own puts are all there is to get.
    Singleton(HashMap<String, Vec<u8>>),
    /// After finalize: nothing more to exchange.
    Finalized,
}

/// This rank's place in the job and its line to the launcher.
pub struct Bootstrap {
    rank: u32,
    size: u32,
    local_rank: u32,
    local_size: u32,
    /// Which application of an MPMD launch this rank runs (`MPI_APPNUM`).
    appnum: u32,
    job_id: String,
    backend: Backend,
}

impl Bootstrap {
    /// Reads the job from the environment and connects to rsrun. Without `MPIRT_RANK` the
    /// program was started alone and becomes a singleton.
    pub fn from_env() -> Result<Bootstrap, BootstrapError> {
        if env::var_os(vars::RANK).is_none() {
            if env::var_os("PMI_FD").is_some() {
                return Bootstrap::pmi2();
            }
            return Ok(Bootstrap::singleton());
        }
        let rank = number_var(vars::RANK)?;
        let size = number_var(vars::SIZE)?;
        let local_rank = number_var(vars::LOCAL_RANK)?;
        let local_size = number_var(vars::LOCAL_SIZE)?;
        if rank >= size {
            return Err(BootstrapError::BadVar {
                name: vars::RANK,
                value: rank.to_string(),
                why: "is not below MPIRT_SIZE",
            });
        }
        let job_id = text_var(vars::JOB_ID)?;
        let addr = text_var(vars::KVS_ADDR)?;
        let secret = text_var(vars::KVS_SECRET)?;

        let stream = TcpStream::connect(&addr).map_err(|source| BootstrapError::Connect {
            addr: addr.clone(),
            source,
        })?;
        // Each request waits for its answer; Nagle would only add latency.
        stream
            .set_nodelay(true)
            .map_err(|source| BootstrapError::Connect {
                addr: addr.clone(),
                source,
            })?;
        let mut bootstrap = Bootstrap {
            rank,
            size,
            local_rank,
            local_size,
            // rsrun starts one program.
            appnum: 0,
            job_id,
            backend: Backend::Kvs(stream),
        };
        let hello = Request::Hello {
            rank,
            secret: secret.into_bytes(),
        };
        match bootstrap.call(&hello, "connect")? {
            Response::Ok => Ok(bootstrap),
            other => Err(unexpected(other)),
        }
    }

    /// Wires up over the PMI-2 socket Slurm passed in `PMI_FD`.
    fn pmi2() -> Result<Bootstrap, BootstrapError> {
        let fd = number_var("PMI_FD")?;
        let job = env::var("PMI_JOBID").unwrap_or_default();
        let rank_var = env::var("PMI_RANK").unwrap_or_default();
        // SAFETY: Slurm opened this descriptor for this process's PMI-2 traffic alone, and
        // nothing else in the process owns it.
        let mut stream = unsafe { UnixStream::from_raw_fd(fd as i32) };
        let init =
            pmi2::fullinit(&mut stream, &job, &rank_var).map_err(BootstrapError::Protocol)?;
        let local_rank = env::var("SLURM_LOCALID")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let local_size = env::var("SLURM_STEP_TASKS_PER_NODE")
            .ok()
            .zip(env::var("SLURM_NODEID").ok().and_then(|v| v.parse().ok()))
            .and_then(|(list, node)| tasks_on_node(&list, node))
            .unwrap_or(1);
        // Slurm's step id keeps shared-memory names of two steps apart.
        let step = env::var("SLURM_STEP_ID").unwrap_or_default();
        if init.rank == 0 {
            let secret = random_hex(32).map_err(BootstrapError::Random)?;
            pmi2::call(
                &mut stream,
                &Message::new("kvs-put", &[("key", JOB_SECRET_KEY), ("value", &secret)]),
            )
            .map_err(BootstrapError::Protocol)?;
        }
        Ok(Bootstrap {
            rank: init.rank,
            size: init.size,
            local_rank,
            local_size,
            appnum: init
                .attrs
                .get("appnum")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            job_id: format!("slurm-{job}-{step}").replace(['/', ' '], "_"),
            backend: Backend::Pmi2 { stream, job },
        })
    }

    fn singleton() -> Bootstrap {
        Bootstrap {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            appnum: 0,
            // Unique per process, so shared-memory names of two singletons never collide.
            job_id: format!("singleton-{}", std::process::id()),
            backend: Backend::Singleton(HashMap::new()),
        }
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn local_rank(&self) -> u32 {
        self.local_rank
    }

    pub fn local_size(&self) -> u32 {
        self.local_size
    }

    /// Which application of an MPMD launch this rank runs: `appnum` of Slurm's PMI-2 answer
    /// (`srun --multi-prog`), else 0.
    pub fn appnum(&self) -> u32 {
        self.appnum
    }

    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    pub fn is_singleton(&self) -> bool {
        matches!(self.backend, Backend::Singleton(_))
    }

    /// The job's secret for the ranks' own connections, as hex text (see [`JOB_SECRET_KEY`]):
    /// valid after the first fence.
    pub fn job_secret(&mut self) -> Result<Vec<u8>, BootstrapError> {
        self.get(JOB_SECRET_KEY).map_err(|e| match e {
            BootstrapError::NotFound(_) => BootstrapError::Protocol(format!(
                "the job's key-value space holds no '{JOB_SECRET_KEY}' (is rsrun older than \
                 this program? use the rsrun of the same mpirt)"
            )),
            other => other,
        })
    }

    /// Publishes `value` under `key`. Peers are only sure to see it after the next fence.
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), BootstrapError> {
        if let Backend::Singleton(map) = &mut self.backend {
            map.insert(key.to_string(), value.to_vec());
            return Ok(());
        }
        if let Backend::Pmi2 { stream, .. } = &mut self.backend {
            let value = std::str::from_utf8(value).map_err(|_| {
                BootstrapError::Protocol(format!("PMI-2 values are text; '{key}' is not"))
            })?;
            return pmi2::call(
                stream,
                &Message::new("kvs-put", &[("key", key), ("value", value)]),
            )
            .map(drop)
            .map_err(BootstrapError::Protocol);
        }
        let request = Request::Put {
            key: key.to_string(),
            value: value.to_vec(),
        };
        match self.call(&request, "put")? {
            Response::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Waits until every rank has fenced; then all puts made before it are visible to gets.
    pub fn fence(&mut self) -> Result<(), BootstrapError> {
        if let Backend::Singleton(_) = self.backend {
            return Ok(());
        }
        if let Backend::Pmi2 { stream, .. } = &mut self.backend {
            return pmi2::call(stream, &Message::new("kvs-fence", &[]))
                .map(drop)
                .map_err(BootstrapError::Protocol);
        }
        match self.call(&Request::Fence, "fence")? {
            Response::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Reads the value some rank put under `key`.
    pub fn get(&mut self, key: &str) -> Result<Vec<u8>, BootstrapError> {
        if let Backend::Singleton(map) = &self.backend {
            return map
                .get(key)
                .cloned()
                .ok_or_else(|| BootstrapError::NotFound(key.to_string()));
        }
        if let Backend::Pmi2 { stream, job } = &mut self.backend {
            let response = pmi2::call(
                stream,
                &Message::new("kvs-get", &[("jobid", job), ("srcid", "-1"), ("key", key)]),
            )
            .map_err(BootstrapError::Protocol)?;
            return match (response.get("found"), response.get("value")) {
                (Some("TRUE"), Some(v)) => Ok(v.as_bytes().to_vec()),
                _ => Err(BootstrapError::NotFound(key.to_string())),
            };
        }
        let request = Request::Get {
            key: key.to_string(),
        };
        match self.call(&request, "get")? {
            Response::Value(value) => Ok(value),
            Response::NotFound => Err(BootstrapError::NotFound(key.to_string())),
            other => Err(unexpected(other)),
        }
    }

    /// Ends the whole job: rsrun kills every rank and exits with `code` (1 if `code` is 0).
    /// Exits this process with the same code if rsrun has not killed it first.
    pub fn abort(&mut self, code: i32, message: &str) -> ! {
        let exit_code = if code == 0 { 1 } else { code };
        if let Backend::Kvs(stream) = &self.backend {
            // Waiting for the acknowledgement means rsrun has recorded the abort before this
            // process exits, so the job reports the abort rather than a plain non-zero exit.
            let _ = stream.set_read_timeout(Some(ABORT_ACK_TIMEOUT));
            let request = Request::Abort {
                code,
                message: message.to_string(),
            };
            if self.call(&request, "abort").is_err() {
                eprintln!("rank {} called abort (code {code}): {message}", self.rank);
            }
        } else if let Backend::Pmi2 { stream, .. } = &mut self.backend {
            // Slurm ends the step on an abort, naming this rank; no answer comes.
            eprintln!("rank {} called abort (code {code}): {message}", self.rank);
            let _ = pmi2::send(
                stream,
                &Message::new("abort", &[("isworldabort", "TRUE"), ("msg", message)]),
            );
        } else {
            eprintln!("rank {} called abort (code {code}): {message}", self.rank);
        }
        std::process::exit(exit_code)
    }

    /// Says goodbye to rsrun. Later puts, fences and gets are errors.
    pub fn finalize(&mut self) -> Result<(), BootstrapError> {
        if let Backend::Pmi2 { stream, .. } = &mut self.backend {
            let result = pmi2::call(stream, &Message::new("finalize", &[]))
                .map(drop)
                .map_err(BootstrapError::Protocol);
            self.backend = Backend::Finalized;
            return result;
        }
        if !matches!(self.backend, Backend::Kvs(_)) {
            return Ok(());
        }
        let result = match self.call(&Request::Finalize, "finalize") {
            Ok(Response::Ok) => Ok(()),
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(e),
        };
        // Dropping the stream closes the connection, whatever rsrun answered.
        self.backend = Backend::Finalized;
        result
    }

    /// Sends one request and reads its response.
    fn call(
        &mut self,
        request: &Request,
        operation: &'static str,
    ) -> Result<Response, BootstrapError> {
        let Backend::Kvs(stream) = &mut self.backend else {
            return Err(BootstrapError::Protocol(format!(
                "{operation} after finalize"
            )));
        };
        let io_error = |source| BootstrapError::Io { operation, source };
        wire::write_frame(stream, &request.encode()).map_err(io_error)?;
        let body = wire::read_frame(stream, MAX_FRAME)
            .map_err(io_error)?
            .ok_or_else(|| {
                io_error(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "rsrun closed the connection",
                ))
            })?;
        match Response::decode(&body).map_err(BootstrapError::Protocol)? {
            Response::Error(why) => Err(BootstrapError::Rejected(why)),
            response => Ok(response),
        }
    }
}

/// How many tasks Slurm put on node `node` (counting from 0), from a list like `2(x3),1`.
fn tasks_on_node(list: &str, node: usize) -> Option<u32> {
    expand_counts(list).ok()?.get(node).copied()
}

/// `bytes` random bytes from the kernel, as lowercase hex: rsrun's job ids and secrets, and
/// the job's secret that rank 0 makes under PMI-2.
pub fn random_hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Expands Slurm's per-node counts: `2(x3),1` is 2, 2, 2, 1.
pub fn expand_counts(list: &str) -> Result<Vec<u32>, String> {
    let mut counts = Vec::new();
    for item in list.split(',') {
        let bad = || format!("'{item}' in '{list}' is not a count");
        let (count, repeat) = match item.split_once("(x") {
            Some((c, r)) => (
                c,
                r.strip_suffix(')')
                    .and_then(|r| r.parse::<usize>().ok())
                    .ok_or_else(bad)?,
            ),
            None => (item, 1),
        };
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        counts.resize(counts.len() + repeat, count);
    }
    Ok(counts)
}

fn unexpected(response: Response) -> BootstrapError {
    BootstrapError::Protocol(format!("{response:?}"))
}

fn text_var(name: &'static str) -> Result<String, BootstrapError> {
    match env::var(name) {
        Ok(value) => Ok(value),
        Err(env::VarError::NotPresent) => Err(BootstrapError::MissingVar(name)),
        Err(env::VarError::NotUnicode(value)) => Err(BootstrapError::BadVar {
            name,
            value: value.to_string_lossy().into_owned(),
            why: "is not valid UTF-8",
        }),
    }
}

fn number_var(name: &'static str) -> Result<u32, BootstrapError> {
    let value = text_var(name)?;
    value.trim().parse().map_err(|_| BootstrapError::BadVar {
        name,
        value,
        why: "is not a number",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singleton_put_get_round_trips() {
        let mut b = Bootstrap::singleton();
        assert!(b.is_singleton());
        assert_eq!((b.rank(), b.size()), (0, 1));
        b.put("shm.0", b"\0abc").unwrap();
        b.fence().unwrap();
        assert_eq!(b.get("shm.0").unwrap(), b"\0abc");
        let missing = b.get("tcp.0").unwrap_err();
        assert!(missing.to_string().contains("'tcp.0'"), "{missing}");
        // A launcher that gives no job secret (an older rsrun) is named as the cause.
        let no_secret = b.job_secret().unwrap_err().to_string();
        assert!(
            no_secret.contains("holds no 'mpirt.job-secret' (is rsrun older"),
            "{no_secret}"
        );
        b.finalize().unwrap();
    }

    #[test]
    fn slurm_task_lists_expand() {
        assert_eq!(tasks_on_node("2(x3),1", 0), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 2), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 3), Some(1));
        assert_eq!(tasks_on_node("2(x3),1", 4), None);
        assert_eq!(tasks_on_node("4", 0), Some(4));
        assert_eq!(tasks_on_node("x", 0), None);
    }

    #[test]
    fn error_messages_name_the_problem() {
        let bad = BootstrapError::BadVar {
            name: vars::SIZE,
            value: "x".into(),
            why: "is not a number",
        };
        assert_eq!(bad.to_string(), "MPIRT_SIZE is not a number: 'x'");
        let refused = BootstrapError::Connect {
            addr: "127.0.0.1:4242".into(),
            source: io::Error::from(io::ErrorKind::ConnectionRefused),
        };
        assert!(refused
            .to_string()
            .starts_with("cannot reach rsrun's key-value service at 127.0.0.1:4242: "));
    }
}
