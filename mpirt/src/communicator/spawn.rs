//! Dynamic processes (MPI's chapter 10): `spawn`, `spawn_multiple` and a spawned job's parent,
//! as rsmpi has them.
//!
//! The parents' root asks rsrun for the new job over its key-value connection
//! (`Bootstrap::spawn`); rsrun starts it as a second job of its own (`launcher/src/spawned.rs`).
//! The parents' root meanwhile listens on a port, whose address, a secret made for this spawn
//! and the parents' count reach the children in their key-value space (`PARENT_KEY`), as
//! MPICH's children find their parents' port name in theirs. Each side agrees inside itself on the
//! context ids its members use and gathers its members' bridge endpoints (`pml::Bridge`); the
//! children's root dials the port, each root proves to the other by challenge and response
//! that it knows the secret (which never crosses the wire), and the two roots trade both; each
//! root hands the other side's to its members, and every process joins the bridge (the parents are
//! its ranks `0..parents`, the children the next ones) and makes the inter-communicator on the
//! lowest context id that no process of either side uses. Under a launcher other than rsrun the
//! root's request is refused, and every process of the communicator returns that named error.
//! A spawn that fails after the children started returns its error to the parents (as
//! MPI_Comm_spawn does) while the children abort: the parents' root tells rsrun before the
//! children can know, so that their job's end is reported without ending the parents'.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bootstrap::wire::{self as kvs_wire, SpawnApp};
use pml::transport::tcp::{port_proof, JobSecret};
use pml::BridgePeer;

use crate::collective::CommunicatorCollectives;
use crate::context::{self, Proposal, WORDS};
use crate::environment::{with_bootstrap, with_engine};
use crate::error::{Cause, Error, MpiError};

use super::{CommData, Communicator, Context, InterCommunicator, Rank, SimpleCommunicator};
use crate::collective::Root;

/// Bytes each process's bridge entry (its host and endpoint) takes in the gathers.
const ENTRY: usize = 1024;
/// The first byte of the entry of a process that could not open its bridge, which says why
/// after it (a host name never starts so).
const FAILED: u8 = 1;
/// How long the parents' root waits for the children's root to dial: the children may start
/// on hosts reached over ssh. A child that dies ends the job sooner (rsrun watches them).
const JOIN_LIMIT: Duration = Duration::from_secs(120);
/// How long a connection to the port may take to prove the spawn's secret: a stranger that
/// connects and stays silent must not hold the children's root out for long.
const PROOF_LIMIT: Duration = Duration::from_secs(10);
/// What the spawn's secret is made into a key for: the port's handshake, and the bridge's
/// (so that neither's proofs are good for the other).
const PORT_PURPOSE: &[u8] = b"mpirt spawn port";
const BRIDGE_PURPOSE: &[u8] = b"mpirt spawn bridge";
/// The two ends of the port's handshake, as the transport's handshake numbers its ranks.
const PARENTS_END: u32 = 0;
const CHILDREN_END: u32 = 1;

thread_local! {
    /// The inter-communicator to this job's parents, for a spawned job.
    static PARENT: std::cell::RefCell<Option<InterCommunicator>> =
        const { std::cell::RefCell::new(None) };
}

/// `MPI_Comm_get_parent`.
pub(crate) fn parent() -> Option<InterCommunicator> {
    PARENT.with(|p| p.borrow().clone())
}

/// `MPI_Comm_disconnect` of the parent.
pub(crate) fn disconnect_parent() {
    PARENT.with(|p| p.borrow_mut().take());
}

/// What a spawn's root has once rsrun started the children.
struct Started {
    /// The port the children's root dials.
    listener: TcpListener,
    children: u32,
    /// The spawn's secret.
    secret: [u8; 32],
    /// The new job's name, as rsrun gave it ("spawned job 1 (3 ranks of ./child)").
    job: String,
}

/// Why a spawn's root did not start the children, as it tells the others (0: it did).
#[derive(Clone, Copy)]
enum Verdict {
    InvalidArguments = 1,
    NotStarted = 2,
}

/// `MPI_Comm_spawn_multiple` of `maxprocs[i]` processes of `commands[i]` each, rooted at
/// `root` of `comm`; the error names `operation`. Collective over `comm`: as in MPI, only the
/// root's arguments count, so the root checks them, asks rsrun, and broadcasts its verdict,
/// and every process returns the same error or joins the children.
pub(crate) fn spawn(
    operation: &'static str,
    comm: &CommData,
    root: Rank,
    commands: &[&Command],
    maxprocs: &[Rank],
) -> Result<InterCommunicator, MpiError> {
    let fail = |cause| MpiError::Mpirt(Error::new(operation, cause));
    if comm.is_inter() {
        return Err(fail(Cause::InterCommunicator));
    }
    let root = comm.check_rank(root).map_err(fail)?;
    // Refused before the root starts children that no one would join.
    comm.collectives_allowed().map_err(fail)?;
    // [verdict, children, the spawn's secret in 4 words], then why it failed.
    let mut head = [0u64; 6];
    // Why it failed, or the new job's name as rsrun gave it.
    let mut why = Vec::new();
    let mut port = None;
    if comm.rank == root {
        match start(commands, maxprocs, comm.size) {
            Ok(Started {
                listener,
                children,
                secret,
                job,
            }) => {
                why = job.into_bytes();
                head[1] = u64::from(children);
                for (word, bytes) in head[2..].iter_mut().zip(secret.chunks(8)) {
                    *word = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                }
                port = Some(listener);
            }
            Err((verdict, text)) => {
                head[0] = verdict as u64;
                why = text.into_bytes();
            }
        }
    }
    let group = SimpleCommunicator::new(comm.clone());
    let from_root = group.process_at_rank(root as Rank);
    let mpirt = |e: Error| MpiError::Mpirt(e);
    from_root.try_broadcast_into(&mut head[..]).map_err(mpirt)?;
    let mut len = [why.len() as u64];
    from_root.try_broadcast_into(&mut len[..]).map_err(mpirt)?;
    why.resize(len[0] as usize, 0);
    from_root.try_broadcast_into(&mut why[..]).map_err(mpirt)?;
    let why = String::from_utf8_lossy(&why).into_owned();
    if head[0] == Verdict::InvalidArguments as u64 {
        return Err(fail(Cause::InvalidSpawn(why)));
    }
    if head[0] == Verdict::NotStarted as u64 {
        return Err(fail(Cause::SpawnFailed(why)));
    }
    let mut secret = [0u8; 32];
    for (bytes, word) in secret.chunks_mut(8).zip(&head[2..]) {
        bytes.copy_from_slice(&word.to_le_bytes());
    }
    let children = head[1] as u32;
    let side = Side {
        first: 0,
        size: comm.size + children,
        their_first: comm.size,
    };
    let names = Names {
        own: &|rank| format!("parent rank {rank}"),
        theirs: &|rank| format!("rank {rank} of {why}"),
    };
    let link = RootLink::Accept {
        port,
        job: why.clone(),
    };
    join(comm, root, side, &secret, link, names).map_err(fail)
}

/// The root's part of a spawn before the others hear of it: checks the arguments, listens
/// for the children, and asks rsrun to start them; returns what the others need to join
/// them, or the verdict and why.
fn start(
    commands: &[&Command],
    maxprocs: &[Rank],
    parents: u32,
) -> Result<Started, (Verdict, String)> {
    check(commands, maxprocs).map_err(|why| (Verdict::InvalidArguments, why))?;
    let not_started = |why: String| (Verdict::NotStarted, why);
    // Before anything starts: children that could not be joined would end the job.
    if let Some(why) =
        with_engine(|e| Ok(e.refuses_bridges())).map_err(|c| not_started(c.to_string()))?
    {
        return Err(not_started(why));
    }
    let secret_hex = bootstrap::random_hex(32)
        .map_err(|e| not_started(format!("no randomness for the spawn's secret: {e}")))?;
    let secret = unhex_secret(&secret_hex).expect("random_hex gives 32 bytes of hex");
    let listener = TcpListener::bind("0.0.0.0:0")
        .map_err(|e| not_started(format!("listening for the children: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| not_started(format!("listening for the children: {e}")))?
        .port();
    let apps: Vec<SpawnApp> = commands
        .iter()
        .zip(maxprocs)
        .map(|(command, &count)| SpawnApp {
            program: command.get_program().to_string_lossy().into_owned(),
            args: command
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            count: count as u32,
        })
        .collect();
    let children = apps.iter().map(|a| a.count).sum();
    // Where the children find their parents: `host:port`, the parents' count and the
    // spawn's secret, which rsrun serves in their key-value space.
    let parent = format!(
        "{}:{port} {parents} {secret_hex}",
        pml::transport::hostname()
    );
    // Holds the launcher link's lock through rsrun's answer (it starts the children first):
    // the link carries one request and its answer at a time, so another thread's request
    // waits for this one.
    let job = with_bootstrap(|b| b.spawn(apps, parent))
        .map_err(|cause| not_started(cause.to_string()))?
        .map_err(|e| not_started(e.to_string()))?;
    Ok(Started {
        listener,
        children,
        secret,
        job,
    })
}

/// A spawned job's side of the spawn, from `initialize`: joins the parents that its
/// key-value space names (rsrun sets `MPIRT_SPAWNED_AS` for a spawned job's ranks), for
/// [`parent`].
pub(crate) fn join_parents(world: &SimpleCommunicator) -> Result<(), Error> {
    if std::env::var_os(bootstrap::vars::SPAWNED_AS).is_none() {
        return Ok(());
    }
    let fail = |why: String| Error::new("initialize", Cause::SpawnFailed(why));
    let text = with_bootstrap(|b| b.get(0, bootstrap::PARENT_KEY))
        .map_err(|cause| Error::new("initialize", cause))?
        .map_err(|e| fail(format!("where are the parents? {e}")))?;
    let text = String::from_utf8_lossy(&text).into_owned();
    let words: Vec<&str> = text.split(' ').collect();
    let (port, parents, secret) = match words[..] {
        [port, parents, secret] => (port, parents.parse::<u32>().ok(), unhex_secret(secret)),
        _ => (text.as_str(), None, None),
    };
    let (Some(parents), Some(secret)) = (parents, secret) else {
        return Err(fail(format!(
            "'{}' is not an address, a count and a secret",
            bootstrap::PARENT_KEY
        )));
    };
    let local = world.data();
    let side = Side {
        first: parents,
        size: parents + local.size,
        their_first: 0,
    };
    let link = RootLink::Dial(port.to_string());
    let job = std::env::var(bootstrap::vars::SPAWNED_AS).unwrap_or_default();
    let names = Names {
        own: &|rank| format!("rank {rank} of {job}"),
        theirs: &|rank| format!("parent rank {rank}"),
    };
    let inter = join(local, 0, side, &secret, link, names)
        .map_err(|cause| fail(format!("joining the parents: {cause}")))?;
    PARENT.with(|p| *p.borrow_mut() = Some(inter));
    Ok(())
}

/// Where a side's processes sit on the bridge.
#[derive(Clone, Copy)]
struct Side {
    /// The bridge rank of this side's rank 0.
    first: u32,
    /// Both sides' processes.
    size: u32,
    /// The bridge rank of the other side's rank 0.
    their_first: u32,
}

/// What errors call a process of each side, by its rank in its side.
#[derive(Clone, Copy)]
struct Names<'a> {
    own: &'a dyn Fn(u32) -> String,
    theirs: &'a dyn Fn(u32) -> String,
}

/// How this side's root reaches the other's.
enum RootLink {
    /// The parents' root takes the children's root's call (the port, on the root only) for
    /// the spawned job named `job`.
    Accept {
        port: Option<TcpListener>,
        job: String,
    },
    /// The children's root dials the parents' port.
    Dial(String),
}

/// Both sides' part after the children started: agree inside the side on the context ids
/// in use, gather the side's bridge endpoints, trade both through the roots, join the
/// bridge, and make the inter-communicator. Collective over `local`. A process that cannot
/// open its bridge says why in the gather instead of its endpoint, and the roots trade that
/// instead of the endpoints, so that every process of both sides returns the error naming
/// it, and none waits for it.
fn join(
    local: &CommData,
    root: u32,
    side: Side,
    secret: &[u8; 32],
    link: RootLink,
    names: Names<'_>,
) -> Result<InterCommunicator, Cause> {
    // Held until both leases are taken, as every other creation holds it: another thread's
    // duplicate between the agreement and the leases would otherwise lease the same id.
    let _creating = context::creating();
    let cause_of = |e: Error| e.cause().clone();
    let proposal = Proposal {
        valid: true,
        fingerprint: 0,
    };
    let used = context::agree_on_used(local, proposal).map_err(cause_of)?;
    let own_id = context::lowest_free(&used).ok_or(Cause::ContextIdsExhausted)?;
    let mut offered = used;
    offered[own_id as usize / 64] |= 1 << (own_id % 64);
    let bridge_key = port_proof::derive_key(secret, BRIDGE_PURPOSE);
    let me = side.first + local.rank;
    let opened = open_bridge(me, side.size, &bridge_key);
    let mut entry = match &opened {
        Ok((_, entry)) => entry.clone(),
        Err(why) => std::iter::once(FAILED)
            .chain(why.bytes())
            .take(ENTRY)
            .collect(),
    };
    entry.resize(ENTRY, 0);
    let group = SimpleCommunicator::new(local.clone());
    let mut entries = vec![0u8; ENTRY * local.size as usize];
    group
        .try_all_gather_into(&entry[..], &mut entries[..])
        .map_err(cause_of)?;
    let failures: Vec<String> = (0..)
        .zip(entries.chunks(ENTRY))
        .filter(|(_, entry)| entry[0] == FAILED)
        .map(|(rank, entry)| {
            let why = String::from_utf8_lossy(&entry[1..]);
            format!(
                "{} cannot open its bridge: {}",
                (names.own)(rank),
                why.trim_end_matches('\0')
            )
        })
        .collect();
    let failed = (!failures.is_empty()).then(|| failures.join("; "));
    // [failure (0: none), the inter-communicator's id, the other side's size], then the
    // other side's entries; a root that failed says why in their place.
    let mut header = [0u64; 3];
    let mut theirs = Vec::new();
    if local.rank == root {
        let mine = match &failed {
            None => message(&offered, local.size, &entries),
            Some(why) => message(&offered, 0, why.as_bytes()),
        };
        let port_key = port_proof::derive_key(secret, PORT_PURPOSE);
        // Why the spawn fails, given the other root's message, if it does.
        let unjoined = |their_message: &[u8]| match (&failed, read_message(their_message)) {
            (Some(why), _) => Some(why.clone()),
            (None, Err(why)) => Some(why),
            (None, Ok((their_offered, ..))) => inter_id(&offered, &their_offered)
                .is_none()
                .then(|| Cause::ContextIdsExhausted.to_string()),
        };
        // The parents' spawn returns the error, which they may handle: rsrun learns it
        // before the children do (from this root's answer), so that their exit, named,
        // does not end the parents' job.
        let answering = |job: &str, their_message: &[u8]| match unjoined(their_message) {
            None => Ok(()),
            Some(why) => with_bootstrap(|b| b.spawn_unjoined(job, &why))
                .map_err(|cause| cause.to_string())?
                .map_err(|e| format!("telling rsrun that the spawn failed ({why}): {e}")),
        };
        match trade(link, &port_key, &mine, answering).and_then(|m| read_message(&m)) {
            // This side's failure, which every process of it knows already, is the error.
            Ok(_) if failed.is_some() => {}
            Ok((their_offered, count, their_entries)) => {
                match inter_id(&offered, &their_offered) {
                    Some(id) => header = [0, u64::from(id), u64::from(count)],
                    None => header[0] = 1,
                }
                theirs = their_entries;
            }
            Err(why) => {
                header[0] = 1;
                theirs = why.into_bytes();
            }
        }
    }
    let from_root = group.process_at_rank(root as Rank);
    from_root
        .try_broadcast_into(&mut header[..])
        .map_err(cause_of)?;
    let mut len = [theirs.len() as u64];
    from_root
        .try_broadcast_into(&mut len[..])
        .map_err(cause_of)?;
    theirs.resize(len[0] as usize, 0);
    from_root
        .try_broadcast_into(&mut theirs[..])
        .map_err(cause_of)?;
    if let Some(why) = failed {
        return Err(Cause::SpawnFailed(why));
    }
    if header[0] != 0 {
        return Err(match theirs.is_empty() {
            true => Cause::ContextIdsExhausted,
            false => Cause::SpawnFailed(String::from_utf8_lossy(&theirs).into_owned()),
        });
    }
    let peers: Vec<BridgePeer> = theirs
        .chunks(ENTRY)
        .take(header[2] as usize)
        .zip(side.their_first..)
        .map(|(entry, rank)| {
            let text = String::from_utf8_lossy(entry);
            let text = text.trim_end_matches('\0');
            let (host, endpoint) = text.split_once('\n').unwrap_or((text, ""));
            BridgePeer {
                rank,
                host: host.to_string(),
                endpoint: endpoint.to_string(),
                name: (names.theirs)(rank - side.their_first),
            }
        })
        .collect();
    let (bridge, _) = opened.expect("a process that failed to open its bridge returned");
    // The bridge's connections to the other side are made under the engine's lock at
    // Serialized and Multiple (join_bridge connects, then adds the routes): other threads'
    // calls wait for the wire-up, as they would for a creation; both sides are in this call.
    let remote = with_engine(|e| Ok(e.join_bridge(bridge, &peers)))?
        .map_err(|e| Cause::SpawnFailed(e.to_string()))?;
    let own = CommData::new(
        local.rank,
        local.shared.group.clone(),
        Context::Leased(context::lease(own_id)),
        None,
    );
    let id = header[1] as u32;
    Ok(InterCommunicator::from_data(CommData::inter(
        own,
        remote,
        Some(side.first == 0),
        context::lease(id),
    )))
}

/// Opens this process's bridge as rank `me` of `size`; returns it with its entry for the
/// gather (its host and endpoint), or why it cannot.
fn open_bridge(me: u32, size: u32, key: &JobSecret) -> Result<(pml::Bridge, Vec<u8>), String> {
    let bridge = with_engine(|e| Ok(e.open_bridge(me, size, key)))
        .map_err(|cause| cause.to_string())?
        .map_err(|e| e.to_string())?;
    let endpoint = bridge.endpoint().map_err(|e| e.to_string())?;
    let entry = format!("{}\n{endpoint}", pml::transport::hostname()).into_bytes();
    if entry.len() > ENTRY {
        return Err(format!(
            "its bridge endpoint takes {} bytes, more than {ENTRY}",
            entry.len()
        ));
    }
    Ok((bridge, entry))
}

/// The lowest context id that neither side uses (`offered`, `their_offered`): the
/// inter-communicator's.
fn inter_id(offered: &[u64; WORDS], their_offered: &[u64; WORDS]) -> Option<u32> {
    let mut union = *offered;
    for (word, their) in union.iter_mut().zip(their_offered) {
        *word |= their;
    }
    context::lowest_free(&union)
}

/// A root's message to the other root: the context ids its side uses, its size, and its
/// members' bridge entries; or, with a size of 0, why its side cannot join.
fn message(offered: &[u64; WORDS], size: u32, entries: &[u8]) -> Vec<u8> {
    let mut out: Vec<u8> = offered.iter().flat_map(|w| w.to_le_bytes()).collect();
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(entries);
    out
}

/// What `message` wrote.
fn read_message(bytes: &[u8]) -> Result<([u64; WORDS], u32, Vec<u8>), String> {
    let bad = || "the other side's root sent a message that is not a spawn's".to_string();
    if bytes.len() < WORDS * 8 + 4 {
        return Err(bad());
    }
    let mut offered = [0u64; WORDS];
    for (word, chunk) in offered.iter_mut().zip(bytes.chunks(8)) {
        *word = u64::from_le_bytes(chunk.try_into().map_err(|_| bad())?);
    }
    let size_at = WORDS * 8;
    let size = u32::from_le_bytes(bytes[size_at..size_at + 4].try_into().map_err(|_| bad())?);
    let entries = bytes[size_at + 4..].to_vec();
    if size == 0 {
        return Err(String::from_utf8_lossy(&entries).into_owned());
    }
    if entries.len() != size as usize * ENTRY {
        return Err(bad());
    }
    Ok((offered, size, entries))
}

/// The roots' trade: `mine` for the other root's message, over the port, once each root has
/// proved to the other that it knows `key` (the port's key, made from the spawn's secret).
/// The parents' root reads first and calls `answering` with the job's name and the
/// children's message before it answers: an error there is the trade's, unanswered.
fn trade(
    link: RootLink,
    key: &JobSecret,
    mine: &[u8],
    answering: impl FnOnce(&str, &[u8]) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    match link {
        RootLink::Accept { port, job } => {
            let listener = port.ok_or("the spawn's root has no port")?;
            let mut stream = accept_children(&listener, key)?;
            let theirs = kvs_wire::read_frame(&mut stream, kvs_wire::MAX_FRAME)
                .map_err(|e| io("reading the children's root", e))?
                .ok_or("the children's root closed the connection")?;
            answering(&job, &theirs)?;
            kvs_wire::write_frame(&mut stream, mine)
                .map_err(|e| io("writing to the children's root", e))?;
            Ok(theirs)
        }
        RootLink::Dial(port) => {
            let addrs: Vec<_> = port
                .to_socket_addrs()
                .map_err(|e| io(&format!("finding the parents' port {port}"), e))?
                .collect();
            let mut stream = TcpStream::connect(&addrs[..])
                .map_err(|e| io(&format!("dialling the parents' port {port}"), e))?;
            let _ = stream.set_nodelay(true);
            let _ = stream.set_read_timeout(Some(JOIN_LIMIT));
            prove_to_parents(&mut stream, key)
                .map_err(|why| format!("the parents' port {port}: {why}"))?;
            kvs_wire::write_frame(&mut stream, mine)
                .map_err(|e| io("writing to the parents' root", e))?;
            kvs_wire::read_frame(&mut stream, kvs_wire::MAX_FRAME)
                .map_err(|e| io("reading the parents' root", e))?
                .ok_or_else(|| "the parents' root closed the connection".to_string())
        }
    }
}

/// The children's root's half of the port's handshake (the transport's, with the parents'
/// root as rank 0 and the children's as rank 1): checks that the other end knows the key,
/// so that the children trade with their real parents, and proves that this one does. The
/// key itself never crosses the wire.
fn prove_to_parents(stream: &mut TcpStream, key: &JobSecret) -> Result<(), String> {
    let nonce = port_proof::nonce().map_err(|e| format!("no randomness for a nonce: {e}"))?;
    let (dialler, hello) = port_proof::Dialler::new(key, CHILDREN_END, PARENTS_END, nonce);
    let mut challenge = [0u8; port_proof::CHALLENGE_LEN];
    stream
        .write_all(&hello)
        .and_then(|()| stream.read_exact(&mut challenge))
        .map_err(|e| format!("its handshake: {e}"))?;
    let proof = dialler
        .answer(&challenge)
        .map_err(|why| format!("it is not the parents' ({why})"))?;
    stream
        .write_all(&proof)
        .map_err(|e| format!("its handshake: {e}"))
}

/// The parents' root's half of the port's handshake on one connection: whether the other
/// end proved that it knows the key.
fn proves_to_be_children(stream: &mut TcpStream, key: &JobSecret) -> bool {
    let mut hello = [0u8; port_proof::HELLO_LEN];
    let mut proof = [0u8; port_proof::PROOF_LEN];
    let Ok(nonce) = port_proof::nonce() else {
        return false;
    };
    if stream.read_exact(&mut hello).is_err() {
        return false;
    }
    let Ok((challenged, challenge)) = port_proof::challenge(key, PARENTS_END, 2, &hello, nonce)
    else {
        return false;
    };
    stream.write_all(&challenge).is_ok()
        && stream.read_exact(&mut proof).is_ok()
        && challenged.check(key, &proof) == Ok(CHILDREN_END)
}

/// Takes the first connection on `listener` that proves it knows `key`, within
/// `JOIN_LIMIT`; strangers' connections are dropped.
fn accept_children(listener: &TcpListener, key: &JobSecret) -> Result<TcpStream, String> {
    let deadline = Instant::now() + JOIN_LIMIT;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("the port: {e}"))?;
    loop {
        // Checked on every pass: strangers that keep connecting must not keep it open.
        if Instant::now() > deadline {
            return Err(format!(
                "the children did not call the parents within {} s",
                JOIN_LIMIT.as_secs()
            ));
        }
        match listener.accept() {
            Ok((mut stream, _)) => {
                let proved = stream.set_nonblocking(false).is_ok()
                    && stream.set_read_timeout(Some(PROOF_LIMIT)).is_ok()
                    && proves_to_be_children(&mut stream, key);
                if proved && stream.set_read_timeout(Some(JOIN_LIMIT)).is_ok() {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(format!("waiting for the children's root: {e}")),
        }
    }
}

/// The 32 bytes that `hex` (64 hex digits) spells.
fn unhex_secret(hex: &str) -> Option<[u8; 32]> {
    bootstrap::hex::decode(hex.as_bytes())?.try_into().ok()
}

/// Why the arguments of a spawn are not what MPI takes, if they are not.
fn check(commands: &[&Command], maxprocs: &[Rank]) -> Result<(), String> {
    if commands.len() != maxprocs.len() {
        return Err(format!(
            "{} commands but {} process counts",
            commands.len(),
            maxprocs.len()
        ));
    }
    for (command, &count) in commands.iter().zip(maxprocs) {
        let program = command.get_program();
        if count < 1 {
            return Err(format!(
                "{count} processes of {} asked for; at least 1 is needed",
                program.to_string_lossy()
            ));
        }
        if !runnable(Path::new(program)) {
            return Err(format!(
                "the program {} was not found (not a path to an executable file, nor on PATH)",
                program.to_string_lossy()
            ));
        }
    }
    Ok(())
}

/// Whether `program` names an executable file, as a path or through PATH.
fn runnable(program: &Path) -> bool {
    let executable = |path: &Path| {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 {
        return executable(program);
    }
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| executable(&dir.join(program)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local_port() -> (TcpListener, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        (listener, addr)
    }

    #[test]
    fn the_port_takes_the_caller_that_proves_the_key_and_drops_one_that_sends_it() {
        let key = port_proof::derive_key(&[7; 32], PORT_PURPOSE);
        let (listener, addr) = local_port();
        let callers = std::thread::spawn(move || {
            // The old way, the key itself in plain: not a proof.
            let mut plain = TcpStream::connect(addr).unwrap();
            plain.write_all(&key).unwrap();
            drop(plain);
            let mut child = TcpStream::connect(addr).unwrap();
            prove_to_parents(&mut child, &key).map(|()| child)
        });
        let mut taken = accept_children(&listener, &key).unwrap();
        let mut child = callers.join().unwrap().unwrap();
        // The connection taken is the child's: what one end writes the other reads.
        child.write_all(b"x").unwrap();
        let mut byte = [0u8];
        taken.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
    }

    #[test]
    fn a_child_refuses_a_port_that_does_not_know_the_key() {
        let key = port_proof::derive_key(&[7; 32], PORT_PURPOSE);
        let other = port_proof::derive_key(&[8; 32], PORT_PURPOSE);
        let (listener, addr) = local_port();
        let impostor = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let _ = proves_to_be_children(&mut stream, &other);
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        let why = prove_to_parents(&mut stream, &key).unwrap_err();
        assert!(why.contains("not the parents'"), "{why}");
        // Closed, so that the impostor waiting for a proof hears no more is coming.
        drop(stream);
        impostor.join().unwrap();
    }

    #[test]
    fn the_port_and_the_bridge_get_different_keys() {
        let secret = [7; 32];
        assert_ne!(
            port_proof::derive_key(&secret, PORT_PURPOSE),
            port_proof::derive_key(&secret, BRIDGE_PURPOSE)
        );
        assert_ne!(port_proof::derive_key(&secret, PORT_PURPOSE), secret);
    }
}
