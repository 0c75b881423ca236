//! The bootstrap client a rank uses to learn who it is and to exchange endpoints with its peers.
//!
//! Under rsrun, the environment names the rank, the job and rsrun's key-value service; the client
//! connects, proves it belongs to the job with the per-job secret, and then does put / fence /
//! get over that one connection. Where a PMI server handed it a socket (`PMI_FD`: Slurm's
//! `srun --mpi=pmi2`, MPICH's Hydra, Flux), the same three steps go over PMI-2 or PMI-1 (see
//! `pmi2.rs`, `pmi1.rs`). Started without a launcher, the program is a singleton: rank 0 of 1,
//! with a local map standing in for the service; started as one of several tasks by a
//! launcher this build cannot reach, it is an error (see `started_by.rs`).
//!
//! A crate of its own, so that ranks (mpirt) use it without the launcher's CLI; rsrun's
//! server (launcher's `kvs`) speaks the same [`wire`] format and sets the same [`vars`].

pub mod hex;
pub mod libfabric;
pub mod output;
pub mod pmi1;
pub mod pmi2;
pub mod pmi_socket;
#[cfg(feature = "pmix")]
pub mod pmix;
pub mod stall;
pub mod started_by;
pub mod wire;

use std::collections::HashMap;
use std::env;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

use crate::pmi2::Message;
use crate::pmi_socket::PmiSocket;
use crate::started_by::{StartedBy, Unsupported};
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
    pub const OFI_PROVIDER: &str = "MPIRT_OFI_PROVIDER";
    pub const PML: &str = "MPIRT_PML";
    /// `1` or `2`: the only PMI version to speak on `PMI_FD`, where otherwise Slurm is asked
    /// for PMI-2 and other servers for PMI-1, each falling back to the other (as MPICH's
    /// `MPIR_CVAR_PMI_VERSION` picks its own).
    pub const PMI: &str = "MPIRT_PMI";
    /// Set (to the CPU) only for a rank rsrun bound to a CPU of its own, which is then not
    /// oversubscribed even though it sees one CPU: it cannot tell that from ranks that all
    /// inherited one CPU (`taskset -c 0 rsrun ...`, a Slurm cpuset).
    pub const BOUND_CPU: &str = "MPIRT_BOUND_CPU";
    /// Seconds: a rank that waits that long in an mpirt call with nothing moving says what it
    /// waits for (to rsrun, which then ends the job if every rank does; on stderr without
    /// rsrun).
    pub const STALL_TIMEOUT: &str = "MPIRT_STALL_TIMEOUT";
    /// Set for the ranks of a job a spawn started (to the job's name, "spawned job 1 (...)"),
    /// and for its rsrun: they then find their parents under [`PARENT_KEY`](crate::PARENT_KEY).
    pub const SPAWNED_AS: &str = "MPIRT_SPAWNED_AS";
    /// In a spawned job's rsrun's own environment only (never a rank's, nor a command line):
    /// what its ranks find under [`PARENT_KEY`](crate::PARENT_KEY).
    pub const PARENT: &str = "MPIRT_PARENT";

    /// A stall timeout, as `rsrun --stall-timeout` and `MPIRT_STALL_TIMEOUT` take it: a
    /// positive number of seconds (a timeout of none would call every wait a stall). One
    /// parser for both, so that rsrun refuses what its ranks would refuse.
    pub fn parse_stall_timeout(text: &str) -> Result<std::time::Duration, String> {
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|secs| *secs > 0.0)
            .and_then(|secs| std::time::Duration::try_from_secs_f64(secs).ok())
            // A time too small for a nanosecond is no time: it would call every wait stuck.
            .filter(|timeout| !timeout.is_zero())
            .ok_or_else(|| format!("expected a positive number of seconds, got '{text}'"))
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn a_stall_timeout_is_a_positive_number_of_seconds() {
            let parse = super::parse_stall_timeout;
            assert_eq!(parse("2.5"), Ok(std::time::Duration::from_millis(2500)));
            for bad in ["0", "-1", "0.0", "1e-10", "inf", "NaN", "", "two"] {
                assert!(parse(bad).is_err(), "{bad:?} was taken");
            }
        }
    }
}

/// The key under which the job's key-value space holds the secret the ranks' own connections
/// prove they know (64 hex digits: 256 random bits). rsrun's service holds it from the start
/// and gives it only to connections that proved to know the service's secret; under PMI-2,
/// rank 0 makes it and puts it before the first fence, and only the job's tasks can get it.
pub const JOB_SECRET_KEY: &str = "mpirt.job-secret";
/// The key under which a spawned job's rsrun serves its ranks where their parents wait (the
/// parents' port, count and the spawn's secret; see mpirt's `spawn.rs`).
pub const PARENT_KEY: &str = "mpirt.parent";

/// The key under which rank 0 puts, next to the job's secret, a random nonce from which every
/// rank derives the job's id under a PMI server other than Slurm's (see [`pmi_job_id`]).
const JOB_NONCE_KEY: &str = "mpirt.job-nonce";

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
    /// A PMI or PMIx exchange failed; the text names the protocol and the operation.
    Launcher(String),
    /// Rank 0 under PMI-2 could not make the job's secret.
    Random(io::Error),
    /// A launcher started this process as one of several, in a way this build cannot join.
    Unsupported(Unsupported),
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
                "key '{key}' is not in the job's key-value space (was it put before the last fence?)"
            ),
            BootstrapError::Protocol(what) => {
                write!(f, "unexpected answer from rsrun's key-value service: {what}")
            }
            BootstrapError::Random(e) => {
                write!(f, "cannot read /dev/urandom to make the job's secret: {e}")
            }
            BootstrapError::Unsupported(why) => write!(f, "{why}"),
            BootstrapError::Launcher(what) => write!(f, "{what}"),
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
    /// Connected to rsrun's key-value service, with the space as read whole at the first get
    /// after the last fence (`None` until then): gets after a fence, one per peer and key,
    /// are then answered here, in one round trip to rsrun, not one each.
    Kvs {
        stream: TcpStream,
        seen: Option<HashMap<String, Vec<u8>>>,
    },
    /// Started by a PMI-2 server (Slurm's srun --mpi=pmi2, Hydra): its socket, and the job
    /// id gets name.
    Pmi2 { stream: PmiSocket, job: String },
    /// Started by a PMI-1 server (Hydra, Flux).
    Pmi1(pmi1::Client),
    /// Started by a PMIx server (srun --mpi=pmix, Open MPI's mpirun).
    /// Boxed: its process name (namespace and rank) is larger than every other backend.
    #[cfg(feature = "pmix")]
    Pmix(Box<pmix::Client>),
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
    /// Empty until the first fence where `unsettled_space` is set.
    job_id: String,
    /// Under a PMI server other than Slurm's, the job's key-value space's name until the
    /// first fence, after which rank 0's nonce is readable and the job's id is made.
    unsettled_space: Option<String>,
    backend: Backend,
}

impl Bootstrap {
    /// Reads the job from the environment and connects to its launcher (see [`StartedBy`]).
    /// A program started alone becomes a singleton; one started as one of several tasks by
    /// a launcher this build cannot reach is an error naming the launcher, never a singleton.
    pub fn from_env() -> Result<Bootstrap, BootstrapError> {
        let started = StartedBy::from_vars(|name| env::var(name).ok());
        if let Some(why) = started.unsupported(cfg!(feature = "pmix")) {
            return Err(BootstrapError::Unsupported(why));
        }
        match started {
            StartedBy::Rsrun => Bootstrap::rsrun(),
            StartedBy::PmiFd => Bootstrap::pmi(false),
            StartedBy::PmiPort => Bootstrap::pmi(true),
            #[cfg(feature = "pmix")]
            StartedBy::Pmix { .. } => Bootstrap::pmix(),
            _ => Ok(Bootstrap::singleton()),
        }
    }

    /// Connects to rsrun's key-value service named in the environment.
    fn rsrun() -> Result<Bootstrap, BootstrapError> {
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
            unsettled_space: None,
            backend: Backend::Kvs { stream, seen: None },
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

    /// Wires up over the PMI socket in `PMI_FD` (Slurm's `--mpi=pmi2`, MPICH's Hydra, Flux),
    /// or the PMI server at `PMI_PORT` (Hydra's `-pmi-port`), in PMI-2 or PMI-1 as the server
    /// answers, or as `MPIRT_PMI` asks.
    fn pmi(dial: bool) -> Result<Bootstrap, BootstrapError> {
        let slurm_job = env::var("PMI_JOBID").ok();
        let ask = pmi_ask(
            dial,
            slurm_job.is_some(),
            env::var(vars::PMI).ok().as_deref(),
        )?;
        let (mut stream, introduced) = if dial {
            let id = text_var("PMI_ID")?;
            let mut stream =
                PmiSocket::dial(&text_var("PMI_PORT")?, &id).map_err(BootstrapError::Launcher)?;
            let place = stream.introduce(&id).map_err(BootstrapError::Launcher)?;
            (stream, Some(place))
        } else {
            let fd = number_var("PMI_FD")?;
            // SAFETY: the launcher opened this descriptor for this process's PMI traffic
            // alone, and nothing else in the process owns it.
            (unsafe { PmiSocket::inherited(fd as i32) }, None)
        };
        let version = pmi1::negotiate(&mut stream, ask).map_err(BootstrapError::Launcher)?;
        // The server knows this rank from here on: a failure must end the whole job through
        // it, where this rank's exit alone would leave its peers waiting at the first fence
        // (srun does not end a step when one task fails).
        let joined = match version {
            pmi1::Version::Two => {
                let job = slurm_job.clone().unwrap_or_default();
                let rank_var = env::var("PMI_RANK")
                    .ok()
                    .or(introduced.map(|(rank, _)| rank.to_string()))
                    .unwrap_or_default();
                pmi2::fullinit(&mut stream, &job, &rank_var)
                    .and_then(|init| Ok((init, pmi2::job_id(&mut stream)?)))
                    .map_err(BootstrapError::Launcher)
                    .map(|(init, space)| {
                        let appnum = init
                            .attrs
                            .get("appnum")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        (init.rank, init.size, space, appnum)
                    })
            }
            pmi1::Version::One => introduced
                .map_or_else(|| pmi1_place(number_var), Ok)
                .map(|(rank, size)| (rank, size, String::new(), 0)),
        };
        let (rank, size, space, appnum) = match joined {
            Ok(joined) => joined,
            Err(e) => abort_joining(&mut stream, version, e),
        };
        let (backend, space, appnum) = match version {
            pmi1::Version::Two => (
                Backend::Pmi2 {
                    stream,
                    job: slurm_job.clone().unwrap_or_default(),
                },
                space,
                appnum,
            ),
            pmi1::Version::One => match pmi1::Client::new(stream) {
                Ok(client) => {
                    let space = client.kvsname().to_string();
                    let appnum = client.appnum();
                    (Backend::Pmi1(client), space, appnum)
                }
                Err((mut stream, e)) => {
                    abort_joining(&mut stream, version, BootstrapError::Launcher(e))
                }
            },
        };
        // Slurm names its job and step; elsewhere the id waits for rank 0's nonce.
        let (job_id, unsettled_space) = match slurm_job {
            Some(job) => (
                format!(
                    "slurm-{job}-{}",
                    env::var("SLURM_STEP_ID").unwrap_or_default()
                )
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_"),
                None,
            ),
            None => (String::new(), Some(space)),
        };
        let (local_rank, local_size) = local_place();
        let mut bootstrap = Bootstrap {
            rank,
            size,
            local_rank,
            local_size,
            appnum,
            job_id,
            unsettled_space,
            backend,
        };
        if let Err(e) = bootstrap.put_job_secret() {
            bootstrap.abort_start(e);
        }
        Ok(bootstrap)
    }

    /// Wires up through the PMIx server named in the environment.
    #[cfg(feature = "pmix")]
    fn pmix() -> Result<Bootstrap, BootstrapError> {
        let mut client = pmix::Client::init().map_err(BootstrapError::Launcher)?;
        // The server knows this rank from here on: a failure ends the whole job through it.
        let place = match client.place() {
            Ok(place) => place,
            Err(e) => {
                let message = format!("mpirt: rank {}: initialize: {e}", client.rank());
                output::say(&message);
                output::hand_over(ABORT_ACK_TIMEOUT);
                client.abort(1, &message);
                std::process::exit(1)
            }
        };
        // The namespace is unique among the jobs a server runs; the scheduler's job id is
        // not (two steps of one Slurm job share it), so both name the job's files, hashed to
        // a fixed width that the names made from it (shared-memory files) have room for.
        let job_id = format!(
            "pmix-{:016x}",
            hash_parts([place.job_id.as_bytes(), client.namespace().as_bytes()])
        );
        let mut bootstrap = Bootstrap {
            rank: place.rank,
            size: place.size,
            local_rank: place.local_rank,
            local_size: place.local_size,
            appnum: place.appnum,
            job_id,
            unsettled_space: None,
            backend: Backend::Pmix(Box::new(client)),
        };
        if let Err(e) = bootstrap.put_job_secret() {
            bootstrap.abort_start(e);
        }
        Ok(bootstrap)
    }

    /// Ends the whole job through the launcher after a failure to join it, which this rank
    /// had reached (see [`abort_joining`]): says why, as every rank's start-up failure reads.
    fn abort_start(&mut self, e: BootstrapError) -> ! {
        // The abort says the words, once, after "rank N called abort".
        let message = format!("rank {}: initialize: {e}", self.rank);
        self.abort(1, &message)
    }

    /// Rank 0 makes the job's secret and puts it before the first fence, where a launcher
    /// has no secret of its own to give (PMI, PMIx): only the job's tasks can get it. Where
    /// the job's id waits for it, rank 0 puts the nonce it is made from too.
    fn put_job_secret(&mut self) -> Result<(), BootstrapError> {
        if self.rank != 0 {
            return Ok(());
        }
        let secret = random_hex(32).map_err(BootstrapError::Random)?;
        self.put(JOB_SECRET_KEY, secret.as_bytes())?;
        if self.unsettled_space.is_some() {
            let nonce = random_hex(16).map_err(BootstrapError::Random)?;
            self.put(JOB_NONCE_KEY, nonce.as_bytes())?;
        }
        Ok(())
    }

    /// Makes the job's id from rank 0's nonce once the first fence has made it readable.
    fn settle_job_id(&mut self) -> Result<(), BootstrapError> {
        let Some(space) = self.unsettled_space.take() else {
            return Ok(());
        };
        let nonce = self.get(0, JOB_NONCE_KEY).map_err(|e| match e {
            BootstrapError::NotFound(_) => BootstrapError::Protocol(format!(
                "rank 0 put no '{JOB_NONCE_KEY}' before the first fence (is rank 0 a program \
                 built with another mpirt? build every program of the job with the same one)"
            )),
            other => other,
        })?;
        self.job_id = pmi_job_id(&space, &nonce);
        Ok(())
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
            unsettled_space: None,
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

    /// The job's id, which names its shared-memory files: the same on every rank of the job,
    /// and known from the first fence on.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    pub fn is_singleton(&self) -> bool {
        matches!(self.backend, Backend::Singleton(_))
    }

    /// The job's secret for the ranks' own connections, as hex text (see [`JOB_SECRET_KEY`]):
    /// valid after the first fence.
    pub fn job_secret(&mut self) -> Result<Vec<u8>, BootstrapError> {
        // Rank 0 put it (under rsrun, the service, which any rank's get reaches).
        self.get(0, JOB_SECRET_KEY).map_err(|e| match e {
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
        if let Backend::Pmi1(client) = &mut self.backend {
            return client.put(key, value).map_err(BootstrapError::Launcher);
        }
        #[cfg(feature = "pmix")]
        if let Backend::Pmix(client) = &mut self.backend {
            return client.put(key, value).map_err(BootstrapError::Launcher);
        }
        if let Backend::Pmi2 { stream, .. } = &mut self.backend {
            let value = std::str::from_utf8(value).map_err(|_| {
                BootstrapError::Launcher(format!("PMI-2 values are text; '{key}' is not"))
            })?;
            return pmi2::call(
                stream,
                &Message::new("kvs-put", &[("key", key), ("value", value)]),
            )
            .map(drop)
            .map_err(BootstrapError::Launcher);
        }
        let request = Request::Put {
            key: key.to_string(),
            value: value.to_vec(),
        };
        match self.call(&request, "put")? {
            Response::Ok => {
                // This rank's own gets see its put at once, as rsrun's service does.
                if let Backend::Kvs {
                    seen: Some(seen), ..
                } = &mut self.backend
                {
                    seen.insert(key.to_string(), value.to_vec());
                }
                Ok(())
            }
            other => Err(unexpected(other)),
        }
    }

    /// Waits until every rank has fenced; then all puts made before it are visible to gets.
    pub fn fence(&mut self) -> Result<(), BootstrapError> {
        self.fence_backend()?;
        self.settle_job_id()
    }

    fn fence_backend(&mut self) -> Result<(), BootstrapError> {
        if let Backend::Singleton(_) = self.backend {
            return Ok(());
        }
        if let Backend::Pmi1(client) = &mut self.backend {
            return client.fence().map_err(BootstrapError::Launcher);
        }
        #[cfg(feature = "pmix")]
        if let Backend::Pmix(client) = &mut self.backend {
            return client.fence().map_err(BootstrapError::Launcher);
        }
        if let Backend::Pmi2 { stream, .. } = &mut self.backend {
            return pmi2::call(stream, &Message::new("kvs-fence", &[]))
                .map(drop)
                .map_err(BootstrapError::Launcher);
        }
        match self.call(&Request::Fence, "fence")? {
            Response::Ok => {
                // Peers' puts before the fence are to be read anew.
                if let Backend::Kvs { seen, .. } = &mut self.backend {
                    *seen = None;
                }
                Ok(())
            }
            other => Err(unexpected(other)),
        }
    }

    /// Reads the value rank `from` put under `key`. rsrun's service and PMI's spaces hold one
    /// value per key, whoever put it; PMIx's keeps each rank's apart and is asked for `from`'s
    /// (a search of every rank's data, `PMIX_RANK_UNDEF`, went unanswered under Open MPI 4's
    /// mpirun, whose shared-memory data store does not answer it).
    // Without the `pmix` feature no backend asks for `from`.
    #[cfg_attr(not(feature = "pmix"), allow(unused_variables))]
    pub fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        if let Backend::Singleton(map) = &self.backend {
            return map
                .get(key)
                .cloned()
                .ok_or_else(|| BootstrapError::NotFound(key.to_string()));
        }
        if let Backend::Pmi1(client) = &mut self.backend {
            return client
                .get(key)
                .map_err(BootstrapError::Launcher)?
                .ok_or_else(|| BootstrapError::NotFound(key.to_string()));
        }
        #[cfg(feature = "pmix")]
        if let Backend::Pmix(client) = &mut self.backend {
            return client
                .get(from, key)
                .map_err(BootstrapError::Launcher)?
                .ok_or_else(|| BootstrapError::NotFound(key.to_string()));
        }
        if let Backend::Pmi2 { stream, job } = &mut self.backend {
            let response = pmi2::call(
                stream,
                &Message::new("kvs-get", &[("jobid", job), ("srcid", "-1"), ("key", key)]),
            )
            .map_err(BootstrapError::Launcher)?;
            return match (response.get("found"), response.get("value")) {
                (Some("TRUE"), Some(v)) => Ok(v.as_bytes().to_vec()),
                _ => Err(BootstrapError::NotFound(key.to_string())),
            };
        }
        if let Backend::Kvs { seen: None, .. } = self.backend {
            let pairs = match self.call(&Request::GetAll, "get") {
                Ok(Response::Values(pairs)) => pairs,
                Ok(other) => return Err(unexpected(other)),
                // An rsrun from before GetAll drops a connection that asks for it.
                Err(BootstrapError::Io { source, .. })
                    if source.kind() == io::ErrorKind::UnexpectedEof =>
                {
                    return Err(BootstrapError::Protocol(
                        "rsrun closed the connection when asked for the whole key-value \
                         space (it exited, or is older than this program: use the rsrun of \
                         the same mpirt)"
                            .to_string(),
                    ))
                }
                Err(e) => return Err(e),
            };
            if let Backend::Kvs { seen, .. } = &mut self.backend {
                *seen = Some(pairs.into_iter().collect());
            }
        }
        if let Backend::Kvs {
            seen: Some(seen), ..
        } = &self.backend
        {
            if let Some(value) = seen.get(key) {
                return Ok(value.clone());
            }
        }
        // Not there when the space was read: a peer may have put it since.
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
        let last_words = format!("rank {} called abort (code {code}): {message}", self.rank);
        match &mut self.backend {
            Backend::Kvs { stream, .. } => {
                // Waiting for the acknowledgement means rsrun has recorded the abort before
                // this process exits, so the job reports the abort rather than a plain
                // non-zero exit.
                let _ = stream.set_read_timeout(Some(ABORT_ACK_TIMEOUT));
                let request = Request::Abort {
                    code,
                    message: message.to_string(),
                };
                if self.call(&request, "abort").is_err() {
                    output::say(&last_words);
                }
            }
            // The process manager ends the job on an abort, at once; no answer comes.
            Backend::Pmi1(client) => {
                output::say(&last_words);
                output::hand_over(ABORT_ACK_TIMEOUT);
                client.abort(exit_code);
            }
            #[cfg(feature = "pmix")]
            Backend::Pmix(client) => {
                output::say(&last_words);
                output::hand_over(ABORT_ACK_TIMEOUT);
                client.abort(exit_code, message);
            }
            // Slurm ends the step on an abort, naming this rank.
            Backend::Pmi2 { stream, .. } => {
                output::say(&last_words);
                output::hand_over(ABORT_ACK_TIMEOUT);
                pmi2::abort(stream, message);
            }
            Backend::Singleton(_) | Backend::Finalized => output::say(&last_words),
        }
        std::process::exit(exit_code)
    }

    /// A line to rsrun for stall reports (see [`stall::StallLine`]), where rsrun started this
    /// rank; `None` under any other launcher.
    pub fn stall_line(&self) -> Option<stall::StallLine> {
        match &self.backend {
            Backend::Kvs { stream, .. } => stream.try_clone().ok().map(stall::StallLine::new),
            _ => None,
        }
    }

    /// Says goodbye to rsrun. Later puts, fences and gets are errors.
    pub fn finalize(&mut self) -> Result<(), BootstrapError> {
        if let Backend::Pmi1(client) = &mut self.backend {
            let result = client.finalize().map_err(BootstrapError::Launcher);
            self.backend = Backend::Finalized;
            return result;
        }
        #[cfg(feature = "pmix")]
        if let Backend::Pmix(client) = &mut self.backend {
            let result = client.finalize().map_err(BootstrapError::Launcher);
            self.backend = Backend::Finalized;
            return result;
        }
        if let Backend::Pmi2 { stream, .. } = &mut self.backend {
            let result = pmi2::call(stream, &Message::new("finalize", &[]))
                .map(drop)
                .map_err(BootstrapError::Launcher);
            self.backend = Backend::Finalized;
            return result;
        }
        if !matches!(self.backend, Backend::Kvs { .. }) {
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

    /// Asks the launcher to start `apps` as a job of new ranks whose key-value space holds
    /// `parent` under [`PARENT_KEY`] (MPI's spawn), and returns the new job's name for
    /// messages, or why it was not started. Only rsrun starts ranks at run time: under a PMI
    /// or PMIx server, or alone, the error names the launcher.
    pub fn spawn(
        &mut self,
        apps: Vec<wire::SpawnApp>,
        parent: String,
    ) -> Result<String, BootstrapError> {
        let launcher = match &self.backend {
            Backend::Kvs { .. } => None,
            Backend::Pmi2 { .. } => Some("a PMI-2 server (srun --mpi=pmi2, Hydra)"),
            Backend::Pmi1(_) => Some("a PMI-1 server (Hydra's mpiexec, Flux)"),
            #[cfg(feature = "pmix")]
            Backend::Pmix(_) => Some("a PMIx server (srun --mpi=pmix, Open MPI's mpirun)"),
            Backend::Singleton(_) => Some("no launcher (a singleton)"),
            Backend::Finalized => Some("no launcher any more (after finalize)"),
        };
        if let Some(launcher) = launcher {
            return Err(BootstrapError::Launcher(format!(
                "only rsrun starts ranks at run time, and this job was started by {launcher}: \
                 run it under rsrun to spawn"
            )));
        }
        match self.call(&Request::Spawn { apps, parent }, "spawn")? {
            Response::Value(bytes) => {
                match wire::SpawnVerdict::decode(&bytes).map_err(BootstrapError::Protocol)? {
                    wire::SpawnVerdict::Started(job) => Ok(job),
                    wire::SpawnVerdict::Refused(why) => Err(BootstrapError::Rejected(why)),
                }
            }
            other => Err(BootstrapError::Protocol(format!(
                "rsrun answered a spawn with {other:?}"
            ))),
        }
    }

    /// Tells rsrun that the spawn which started `job` returns the error `why` to its parents,
    /// whose ranks will therefore not join them (see [`wire::Request::SpawnUnjoined`]): their
    /// job's failure then does not end this one. Waits for rsrun's answer.
    pub fn spawn_unjoined(&mut self, job: &str, why: &str) -> Result<(), BootstrapError> {
        let request = Request::SpawnUnjoined {
            job: job.to_string(),
            why: why.to_string(),
        };
        match self.call(&request, "spawn")? {
            Response::Ok => Ok(()),
            other => Err(BootstrapError::Protocol(format!(
                "rsrun answered a failed spawn with {other:?}"
            ))),
        }
    }

    /// Sends one request and reads its response.
    fn call(
        &mut self,
        request: &Request,
        operation: &'static str,
    ) -> Result<Response, BootstrapError> {
        let Backend::Kvs { stream, .. } = &mut self.backend else {
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

/// Ends the whole job through the PMI server on `stream`, which agreed on `version` with this
/// rank, after a failure to join the job: says why, lets the launcher take the words, then
/// asks it to end every rank (so that no peer waits for this one at the first fence, and the
/// job ends non-zero), and exits in case it does not.
fn abort_joining(stream: &mut PmiSocket, version: pmi1::Version, e: BootstrapError) -> ! {
    let rank = env::var("PMI_RANK")
        .or_else(|_| env::var("PMI_ID"))
        .map(|r| format!("rank {r}: "))
        .unwrap_or_default();
    let message = format!("mpirt: {rank}initialize: {e}");
    output::say(&message);
    output::hand_over(ABORT_ACK_TIMEOUT);
    match version {
        pmi1::Version::One => pmi1::abort(stream, 1),
        pmi1::Version::Two => {
            pmi2::abort(stream, &message);
        }
    }
    std::process::exit(1)
}

/// Which PMI version to ask the server for, as `MPIRT_PMI` (`chosen`) says. Slurm names its
/// job in PMI_JOBID, which PMI-2's fullinit wants, and its PMI-2 is the one tested; elsewhere
/// PMI-1, as MPICH's own ranks speak it to Hydra, whose PMI-2 kvs-fence lets a rank through
/// before its peers have reached it. A rank that dials PMI_PORT has introduced itself in
/// PMI-1 (`initack`) and knows itself by `PMI_ID`, not by the rank PMI-2's fullinit names:
/// it speaks PMI-1 only.
fn pmi_ask(dial: bool, slurm: bool, chosen: Option<&str>) -> Result<pmi1::Ask, BootstrapError> {
    let bad = |value: &str, why| BootstrapError::BadVar {
        name: vars::PMI,
        value: value.to_string(),
        why,
    };
    match chosen {
        None if dial => Ok(pmi1::Ask::Only(pmi1::Version::One)),
        None if slurm => Ok(pmi1::Ask::Prefer(pmi1::Version::Two)),
        None => Ok(pmi1::Ask::Prefer(pmi1::Version::One)),
        Some("1") => Ok(pmi1::Ask::Only(pmi1::Version::One)),
        Some("2") if dial => Err(bad(
            "2",
            "asks for PMI-2, which a rank that dials PMI_PORT does not speak (it introduces \
             itself in PMI-1): unset it, or have the launcher hand the ranks PMI_FD",
        )),
        Some("2") => Ok(pmi1::Ask::Only(pmi1::Version::Two)),
        Some(other) => Err(bad(
            other,
            "is neither 1 nor 2 (the PMI version to speak to the PMI server)",
        )),
    }
}

/// The job's id under a PMI server other than Slurm's, from what every rank of the job reads
/// alike: its key-value space's name, unique among the server's jobs (Hydra's holds its
/// process id, a random number and its host, older Hydras only the process id), and rank 0's
/// random nonce, which tells apart two jobs whose spaces share a name (two `mpiexec`s of one
/// process id on two login hosts). Nothing of the rank's own proxy goes in: Hydra starts two
/// proxies on one host listed twice (`-hosts a,b,a`), and their ranks must name the host's
/// shared-memory files alike. Hashed to a fixed width those names have room for.
fn pmi_job_id(space: &str, nonce: &[u8]) -> String {
    format!("pmi-{:016x}", hash_parts([space.as_bytes(), nonce]))
}

/// FNV-1a over `parts`, each followed by a 0xff (no UTF-8 text holds it), so that no two
/// lists of parts run together alike.
fn hash_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    fnv1a(
        parts
            .into_iter()
            .flat_map(|part| part.iter().copied().chain([0xff])),
    )
}

/// The 64-bit FNV-1a hash of `bytes`: the same on every build and host, as ids that processes
/// work out each for itself and must agree on need (std's hashers are seeded per process).
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    })
}

/// This rank's place among the ranks on its host, as its launcher tells it: Hydra's
/// `MPI_LOCALRANKID` and `MPI_LOCALNRANKS`, or Slurm's local id and tasks per node; (0, 1)
/// where neither is set.
fn local_place() -> (u32, u32) {
    let number = |name: &str| env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    if let (Some(rank), Some(size)) = (number("MPI_LOCALRANKID"), number("MPI_LOCALNRANKS")) {
        return (rank, size);
    }
    let local_size = env::var("SLURM_STEP_TASKS_PER_NODE")
        .ok()
        .zip(number("SLURM_NODEID"))
        .and_then(|(list, node)| tasks_on_node(&list, node as usize))
        .unwrap_or(1);
    (number("SLURM_LOCALID").unwrap_or(0), local_size)
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
    Ok(hex::encode(&buf))
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

/// A PMI-1 rank's rank and the job's size, from `PMI_RANK` and `PMI_SIZE` read by `var`: PMI-1
/// has no command for them, the process manager sets both.
fn pmi1_place(
    var: impl Fn(&'static str) -> Result<u32, BootstrapError>,
) -> Result<(u32, u32), BootstrapError> {
    let given = |name: &'static str| match var(name) {
        Err(BootstrapError::MissingVar(_)) => Err(BootstrapError::Launcher(format!(
            "the PMI-1 server on PMI_FD set no {name} (it must set PMI_RANK and PMI_SIZE for \
             each rank)"
        ))),
        other => other,
    };
    Ok((given("PMI_RANK")?, given("PMI_SIZE")?))
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
    fn a_pmi1_server_that_sets_no_rank_or_size_is_named() {
        let set = |name: &'static str| match name {
            "PMI_RANK" => Ok(3),
            _ => Err(BootstrapError::MissingVar(name)),
        };
        let e = pmi1_place(set).unwrap_err().to_string();
        assert!(
            e.contains("the PMI-1 server on PMI_FD set no PMI_SIZE (it must set PMI_RANK and PMI_SIZE for each rank)"),
            "{e}"
        );
        assert_eq!(pmi1_place(|_| Ok(2)).unwrap(), (2, 2));
    }

    /// Set in the child process of the test below.
    const ABORT_CHILD: &str = "BOOTSTRAP_TEST_JOIN_FAILS";

    #[test]
    fn a_failure_after_the_pmi_server_knows_the_rank_ends_the_job_through_it() {
        if env::var_os(ABORT_CHILD).is_some() {
            // The child: its server agrees on PMI-1 but sets no PMI_RANK.
            let _ = Bootstrap::from_env();
            return;
        }
        use std::io::{BufRead, BufReader, Write};
        use std::os::fd::AsRawFd;
        use std::os::unix::net::UnixStream;
        use std::process::{Command, Stdio};
        let (server, rank_end) = UnixStream::pair().unwrap();
        // SAFETY: clears close-on-exec on a descriptor this test owns, so the child inherits it.
        assert_eq!(
            unsafe { libc::fcntl(rank_end.as_raw_fd(), libc::F_SETFD, 0) },
            0
        );
        let mut child = Command::new(env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::a_failure_after_the_pmi_server_knows_the_rank_ends_the_job_through_it",
                "--nocapture",
            ])
            .env_clear()
            .env(ABORT_CHILD, "1")
            .env("PMI_FD", rank_end.as_raw_fd().to_string())
            .env("PMI_SIZE", "2")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(rank_end);
        let mut stderr = child.stderr.take().unwrap();
        let said = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut out = server.try_clone().unwrap();
        let mut lines = BufReader::new(server).lines();
        assert_eq!(
            lines.next().unwrap().unwrap(),
            "cmd=init pmi_version=1 pmi_subversion=1"
        );
        out.write_all(b"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n")
            .unwrap();
        // Before, the rank exited alone: its server saw the socket close with no abort.
        let next = lines.next().map(|l| l.unwrap());
        assert_eq!(next.as_deref(), Some("cmd=abort exitcode=1"));
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(1));
        let said = said.join().unwrap();
        assert!(
            said.contains("mpirt: initialize: the PMI-1 server on PMI_FD set no PMI_RANK"),
            "{said}"
        );
    }

    /// A rank of a PMI job whose id waits for the first fence, reading `space` as the
    /// key-value space every rank sees after it.
    fn pmi_rank(rank: u32, name: &str, space: HashMap<String, Vec<u8>>) -> Bootstrap {
        Bootstrap {
            rank,
            size: 2,
            job_id: String::new(),
            unsettled_space: Some(name.to_string()),
            backend: Backend::Singleton(space),
            ..Bootstrap::singleton()
        }
    }

    /// Rank 0 of a new job on a space named `name`, after the first fence, and the space.
    fn started_pmi_job(name: &str) -> (Bootstrap, HashMap<String, Vec<u8>>) {
        let mut rank0 = pmi_rank(0, name, HashMap::new());
        rank0.put_job_secret().unwrap();
        let Backend::Singleton(space) = &rank0.backend else {
            unreachable!("made with a singleton's space")
        };
        let space = space.clone();
        rank0.fence().unwrap();
        (rank0, space)
    }

    #[test]
    fn ranks_of_one_pmi_job_agree_on_its_id_and_two_jobs_whose_spaces_share_a_name_differ() {
        // Two old Hydras of one process id on two login hosts, with ranks on this host; and
        // rank 1 under a second proxy on rank 0's host (`-hosts a,b,a`): before, each proxy's
        // end of its ranks' sockets went into the id, and rank 1 named another segment.
        let (rank0, space) = started_pmi_job("kvs_4242_0");
        let mut rank1 = pmi_rank(1, "kvs_4242_0", space);
        assert_eq!(rank1.job_id(), "", "known only from the first fence on");
        rank1.fence().unwrap();
        assert_eq!(rank0.job_id(), rank1.job_id());
        assert!(rank0.job_id().starts_with("pmi-"), "{}", rank0.job_id());
        assert_eq!(rank0.job_id().len(), "pmi-".len() + 16);
        let (other_job, _) = started_pmi_job("kvs_4242_0");
        assert_ne!(rank0.job_id(), other_job.job_id());
        // A rank 0 that put no nonce is named as the cause, never an empty id.
        let mut lone = pmi_rank(1, "kvs_4242_0", HashMap::new());
        let e = lone.fence().unwrap_err().to_string();
        assert!(e.contains("rank 0 put no 'mpirt.job-nonce'"), "{e}");
    }

    #[test]
    fn a_rank_on_pmi_port_speaks_pmi1_and_refuses_mpirt_pmi_2_by_name() {
        use pmi1::{Ask, Version};
        assert_eq!(pmi_ask(true, false, None).unwrap(), Ask::Only(Version::One));
        assert_eq!(
            pmi_ask(true, false, Some("1")).unwrap(),
            Ask::Only(Version::One)
        );
        // Before, it sent PMI-1's initack, then negotiated PMI-2 and named its rank, not
        // PMI_ID, in fullinit.
        let e = pmi_ask(true, false, Some("2")).unwrap_err().to_string();
        assert!(
            e.starts_with("MPIRT_PMI asks for PMI-2, which a rank that dials PMI_PORT"),
            "{e}"
        );
        assert_eq!(
            pmi_ask(false, true, None).unwrap(),
            Ask::Prefer(Version::Two)
        );
        assert_eq!(
            pmi_ask(false, false, None).unwrap(),
            Ask::Prefer(Version::One)
        );
        assert_eq!(
            pmi_ask(false, false, Some("2")).unwrap(),
            Ask::Only(Version::Two)
        );
        let e = pmi_ask(false, false, Some("3")).unwrap_err().to_string();
        assert!(e.starts_with("MPIRT_PMI is neither 1 nor 2"), "{e}");
    }

    #[test]
    fn singleton_put_get_round_trips() {
        let mut b = Bootstrap::singleton();
        assert!(b.is_singleton());
        assert_eq!((b.rank(), b.size()), (0, 1));
        b.put("shm.0", b"\0abc").unwrap();
        b.fence().unwrap();
        assert_eq!(b.get(0, "shm.0").unwrap(), b"\0abc");
        let missing = b.get(0, "tcp.0").unwrap_err();
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
