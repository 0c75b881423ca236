//! rsrun's key-value service: the rendezvous where ranks publish endpoints (put), wait for each
//! other (fence) and read their peers' endpoints (get).
//!
//! [`KvsState`] is the whole protocol as a state machine that does no I/O: feed it connection
//! events, carry out the [`Action`]s it returns. [`KvsServer`] is the thin I/O shell around it:
//! a TCP listener and one thread per connection, all sharing the state under a lock.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use bootstrap::wire::{
    self, Request, Response, SpawnApp, SpawnVerdict, MAX_FRAME, MAX_HELLO_FRAME,
};
use bootstrap::JOB_SECRET_KEY;

use crate::job::Event;

/// Identifies one TCP connection to the service.
pub type ConnId = u64;

/// What the I/O shell must do after feeding the state machine one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send this response on that connection.
    Reply(ConnId, Response),
    /// Close that connection (after any reply queued before this action).
    Close(ConnId),
    /// A rank asked to end the job. Comes before that rank's reply, so the job learns of the
    /// abort before the rank can exit and be mistaken for an ordinary failure.
    Abort {
        rank: u32,
        code: i32,
        message: String,
    },
    /// A rank said what it waits for, or that it moved again (`state` None); for the job's
    /// stall book. Nothing is answered.
    Stall { rank: u32, state: Option<Vec<u8>> },
    /// A rank asked for a job of new ranks: the job starts it and answers on `conn`.
    Spawn {
        conn: ConnId,
        rank: u32,
        apps: Vec<SpawnApp>,
        parent: String,
    },
    /// A rank's spawn of `job` failed to join the new ranks (`why`). Comes before that
    /// rank's reply, so the job knows before the new ranks hear of the failure and exit.
    SpawnUnjoined { rank: u32, job: String, why: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    /// Not connected yet: a fence waits for it.
    Absent,
    Connected(ConnId),
    /// Finalized or disconnected: it will never fence again, so fences stop waiting for it.
    /// Its exit status, not its connection, decides whether the job failed.
    Gone,
}

/// The key-value service's protocol state for one job of `size` ranks.
pub struct KvsState {
    secret: Vec<u8>,
    store: HashMap<String, Vec<u8>>,
    ranks: Vec<Presence>,
    /// Which rank each authenticated connection speaks for.
    conn_rank: HashMap<ConnId, u32>,
    /// Ranks waiting in the current fence.
    fenced: HashSet<u32>,
}

impl KvsState {
    pub fn new(size: u32, secret: &[u8]) -> KvsState {
        KvsState {
            secret: secret.to_vec(),
            store: HashMap::new(),
            ranks: vec![Presence::Absent; size as usize],
            conn_rank: HashMap::new(),
            fenced: HashSet::new(),
        }
    }

    /// Holds the job's secret for the ranks' own connections (see [`JOB_SECRET_KEY`]), which
    /// only connections that proved to know the service's secret can get.
    pub fn with_job_secret(mut self, job_secret: &str) -> KvsState {
        self.store
            .insert(JOB_SECRET_KEY.to_string(), job_secret.as_bytes().to_vec());
        self
    }

    /// Holds `value` under `key` from the start (a spawned job's `bootstrap::PARENT_KEY`), for
    /// connections that proved to know the service's secret.
    pub fn with_value(mut self, key: &str, value: &[u8]) -> KvsState {
        self.store.insert(key.to_string(), value.to_vec());
        self
    }

    /// Whether this connection has proven it belongs to the job.
    pub fn is_authenticated(&self, conn: ConnId) -> bool {
        self.conn_rank.contains_key(&conn)
    }

    /// One request arrived on `conn`.
    pub fn on_request(&mut self, conn: ConnId, request: Request) -> Vec<Action> {
        let Some(&rank) = self.conn_rank.get(&conn) else {
            return self.on_hello(conn, request);
        };
        match request {
            Request::Hello { .. } => refuse(conn, "already authenticated"),
            Request::Put { key, value } => {
                // Puts are visible at once; the fence is what guarantees a peer's put is there.
                self.store.insert(key, value);
                vec![Action::Reply(conn, Response::Ok)]
            }
            Request::Get { key } => {
                let response = match self.store.get(&key) {
                    Some(value) => Response::Value(value.clone()),
                    None => Response::NotFound,
                };
                vec![Action::Reply(conn, response)]
            }
            Request::GetAll => {
                let bytes =
                    wire::values_len(self.store.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
                if bytes > MAX_FRAME as usize {
                    // Unanswered, the rank would wait for the reply for ever.
                    return refuse(
                        conn,
                        &format!(
                            "the key-value space holds {bytes} bytes, over a frame's {MAX_FRAME}"
                        ),
                    );
                }
                let pairs = self
                    .store
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                vec![Action::Reply(conn, Response::Values(pairs))]
            }
            Request::Fence => {
                self.fenced.insert(rank);
                self.complete_fence()
            }
            Request::Abort { code, message } => vec![
                Action::Abort {
                    rank,
                    code,
                    message,
                },
                Action::Reply(conn, Response::Ok),
            ],
            Request::Stalled { state } => vec![Action::Stall {
                rank,
                state: Some(state),
            }],
            Request::Resumed => vec![Action::Stall { rank, state: None }],
            Request::Spawn { apps, parent } => vec![Action::Spawn {
                conn,
                rank,
                apps,
                parent,
            }],
            Request::SpawnUnjoined { job, why } => vec![
                Action::SpawnUnjoined { rank, job, why },
                Action::Reply(conn, Response::Ok),
            ],
            Request::Finalize => {
                let mut actions = vec![Action::Reply(conn, Response::Ok)];
                actions.extend(self.leave(conn));
                actions
            }
        }
    }

    /// `conn` closed, or sent something unreadable and is being dropped.
    pub fn on_disconnect(&mut self, conn: ConnId) -> Vec<Action> {
        self.leave(conn)
    }

    fn on_hello(&mut self, conn: ConnId, request: Request) -> Vec<Action> {
        let Request::Hello { rank, secret } = request else {
            return refuse(
                conn,
                "the first message must be a hello with the job's secret",
            );
        };
        if !constant_time_eq(&secret, &self.secret) {
            return refuse(conn, "wrong job secret");
        }
        match self.ranks.get(rank as usize) {
            None => refuse(
                conn,
                &format!(
                    "rank {rank} is out of range for a job of {}",
                    self.ranks.len()
                ),
            ),
            Some(Presence::Absent) => {
                self.ranks[rank as usize] = Presence::Connected(conn);
                self.conn_rank.insert(conn, rank);
                vec![Action::Reply(conn, Response::Ok)]
            }
            Some(_) => refuse(conn, &format!("rank {rank} has already connected")),
        }
    }

    fn leave(&mut self, conn: ConnId) -> Vec<Action> {
        let Some(rank) = self.conn_rank.remove(&conn) else {
            return vec![Action::Close(conn)];
        };
        self.ranks[rank as usize] = Presence::Gone;
        self.fenced.remove(&rank);
        let mut actions = vec![Action::Close(conn)];
        // The fence may have been waiting only for this rank.
        if !self.fenced.is_empty() {
            actions.extend(self.complete_fence());
        }
        actions
    }

    /// Releases every fenced rank once no rank that could still fence is missing.
    fn complete_fence(&mut self) -> Vec<Action> {
        let done = self
            .ranks
            .iter()
            .enumerate()
            .all(|(rank, p)| *p == Presence::Gone || self.fenced.contains(&(rank as u32)));
        if !done {
            return Vec::new();
        }
        let mut released: Vec<u32> = self.fenced.drain().collect();
        released.sort_unstable();
        released
            .into_iter()
            .filter_map(|rank| match self.ranks[rank as usize] {
                Presence::Connected(conn) => Some(Action::Reply(conn, Response::Ok)),
                _ => None,
            })
            .collect()
    }
}

fn refuse(conn: ConnId, why: &str) -> Vec<Action> {
    vec![
        Action::Reply(conn, Response::Error(why.to_string())),
        Action::Close(conn),
    ]
}

/// Compares secrets without an early exit, so response timing does not leak a matching prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The state plus the write halves of the connections, so one connection's thread can answer
/// another's (a fence completed by the last rank releases all the others). Each write half
/// has a lock of its own, taken after the state's is released: a rank slow to read a large
/// reply then holds up only itself, never every other rank's requests and fences.
struct Shared {
    state: KvsState,
    writers: HashMap<ConnId, Writer>,
}

type Writer = Arc<Mutex<TcpStream>>;

/// What a connection's thread does, in order, once it has released the state's lock.
enum Step {
    Write(ConnId, Writer, Response),
    Shut(Writer),
    Tell(Event),
    /// Tell the job, wait for its verdict, write it.
    Ask(ConnId, Writer, Event, mpsc::Receiver<SpawnVerdict>),
}

/// The running service. Dropping it does not stop it: it lives as long as rsrun.
pub struct KvsServer {
    addr: SocketAddr,
}

impl KvsServer {
    /// Binds an ephemeral port on `ip` (127.0.0.1 for a one-host job, the unspecified address
    /// when ranks on other hosts must reach it; the job secret keeps strangers out) and serves
    /// `state` in background threads. Aborts are reported to the job supervisor through
    /// `events`.
    pub fn start(
        state: KvsState,
        ip: IpAddr,
        events: mpsc::Sender<Event>,
    ) -> io::Result<KvsServer> {
        let listener = TcpListener::bind((ip, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Mutex::new(Shared {
            state,
            writers: HashMap::new(),
        }));
        thread::Builder::new()
            .name("kvs-accept".into())
            .spawn(move || accept_loop(listener, shared, events))?;
        Ok(KvsServer { addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Mutex<Shared>>, events: mpsc::Sender<Event>) {
    for (conn, stream) in (0..).zip(listener.incoming()) {
        // A failed accept (e.g. out of descriptors) loses that one connection; its rank
        // will report the error and exit, which ends the job.
        let Ok(stream) = stream else { continue };
        let Ok(writer) = stream.try_clone() else {
            continue;
        };
        // Replies are small and awaited; Nagle would only add latency.
        let _ = stream.set_nodelay(true);
        lock(&shared)
            .writers
            .insert(conn, Arc::new(Mutex::new(writer)));
        let thread_shared = Arc::clone(&shared);
        let events = events.clone();
        let spawned = thread::Builder::new()
            .name(format!("kvs-conn-{conn}"))
            .spawn(move || serve_connection(conn, stream, thread_shared, events));
        if spawned.is_err() {
            // Dropping the writer closes the connection; that rank reports the error and exits.
            lock(&shared).writers.remove(&conn);
        }
    }
}

fn serve_connection(
    conn: ConnId,
    mut stream: TcpStream,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::Sender<Event>,
) {
    loop {
        let max = if lock(&shared).state.is_authenticated(conn) {
            MAX_FRAME
        } else {
            MAX_HELLO_FRAME
        };
        let request = match wire::read_frame(&mut stream, max) {
            Ok(Some(body)) => Request::decode(&body).ok(),
            Ok(None) | Err(_) => None,
        };
        let mut closed = false;
        let steps: Vec<Step> = {
            let mut guard = lock(&shared);
            let actions = match request {
                Some(request) => guard.state.on_request(conn, request),
                None => guard.state.on_disconnect(conn),
            };
            actions
                .into_iter()
                .filter_map(|action| match action {
                    Action::Reply(to, response) => guard
                        .writers
                        .get(&to)
                        .map(|w| Step::Write(to, Arc::clone(w), response)),
                    Action::Close(to) => {
                        closed |= to == conn;
                        guard.writers.remove(&to).map(Step::Shut)
                    }
                    Action::Abort {
                        rank,
                        code,
                        message,
                    } => Some(Step::Tell(Event::Abort {
                        rank,
                        code,
                        message,
                    })),
                    Action::Stall { rank, state } => Some(Step::Tell(Event::Stall { rank, state })),
                    Action::SpawnUnjoined { rank, job, why } => {
                        Some(Step::Tell(Event::SpawnUnjoined { rank, job, why }))
                    }
                    Action::Spawn {
                        conn: to,
                        rank,
                        apps,
                        parent,
                    } => guard.writers.get(&to).map(|w| {
                        let (reply, verdict) = mpsc::channel();
                        let event = Event::Spawn {
                            rank,
                            apps,
                            parent,
                            reply,
                        };
                        Step::Ask(to, Arc::clone(w), event, verdict)
                    }),
                })
                .collect()
        };
        for step in steps {
            match step {
                Step::Ask(to, writer, event, verdict) => {
                    let response = ask_job(event, verdict, &events);
                    reply(&shared, to, &writer, response);
                }
                Step::Write(to, writer, response) => reply(&shared, to, &writer, response),
                Step::Shut(writer) => {
                    let _ = lock_writer(&writer).shutdown(std::net::Shutdown::Both);
                }
                Step::Tell(event) => {
                    let _ = events.send(event);
                }
            }
        }
        if closed {
            return;
        }
    }
}

/// Writes `response` to connection `to`.
fn reply(shared: &Mutex<Shared>, to: ConnId, writer: &Writer, response: Response) {
    let written = wire::write_frame(&mut *lock_writer(writer), &response.encode());
    if written.is_err() {
        // A rank left without its reply would wait for it for ever: the closed connection
        // ends its wait, and its reader's next read fails, which reports the disconnect.
        lock(shared).writers.remove(&to);
        let _ = lock_writer(writer).shutdown(std::net::Shutdown::Both);
    }
}

/// An `Ask`'s answer: the job's verdict, after telling the job and waiting for it (the
/// asking rank waits for the answer anyway).
fn ask_job(
    event: Event,
    verdict: mpsc::Receiver<SpawnVerdict>,
    events: &mpsc::Sender<Event>,
) -> Response {
    let _ = events.send(event);
    // The job answers every spawn it receives; no answer means it is ending.
    let verdict = verdict
        .recv()
        .unwrap_or_else(|_| SpawnVerdict::Refused("rsrun is ending the job".to_string()));
    Response::Value(verdict.encode())
}

/// Locks a connection's write half; a panic while another thread wrote leaves nothing to
/// undo (at worst a torn frame, which its rank reports), so a poisoned lock is used as is.
fn lock_writer(writer: &Writer) -> std::sync::MutexGuard<'_, TcpStream> {
    writer.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks the shared state. A panic in another connection thread cannot leave it half-updated
/// in a way that matters more than losing the job, so a poisoned lock is used as is.
fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(state: &mut KvsState, conn: ConnId, rank: u32) -> Vec<Action> {
        state.on_request(
            conn,
            Request::Hello {
                rank,
                secret: b"sekrit".to_vec(),
            },
        )
    }

    fn put(key: &str, value: &[u8]) -> Request {
        Request::Put {
            key: key.into(),
            value: value.to_vec(),
        }
    }

    /// Sends `request` on `stream` and, where `answered`, reads the answer.
    fn ask(stream: &mut TcpStream, request: &Request, answered: bool) -> Option<Response> {
        wire::write_frame(stream, &request.encode()).unwrap();
        answered.then(|| {
            let body = wire::read_frame(stream, MAX_FRAME).unwrap().unwrap();
            Response::decode(&body).unwrap()
        })
    }

    #[test]
    fn a_rank_that_does_not_read_its_large_reply_holds_up_no_other_rank() {
        let (events, _) = mpsc::channel();
        let state = KvsState::new(2, b"sekrit").with_job_secret("job");
        let server = KvsServer::start(state, IpAddr::from([127, 0, 0, 1]), events).unwrap();
        let connect = |rank| {
            let mut stream = TcpStream::connect(server.addr()).unwrap();
            // Only so that a failure ends the test instead of hanging it.
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(120)))
                .unwrap();
            let hello = Request::Hello {
                rank,
                secret: b"sekrit".to_vec(),
            };
            assert_eq!(ask(&mut stream, &hello, true), Some(Response::Ok));
            stream
        };
        let mut slow = connect(0);
        let big = put("big", &vec![7; 16 << 20]);
        assert_eq!(ask(&mut slow, &big, true), Some(Response::Ok));
        // 16 MiB that rank 0 never reads: more than the sockets' buffers hold, so the
        // service's write of it blocks. Before, it blocked holding the state's lock.
        ask(&mut slow, &Request::GetAll, false);
        let mut other = connect(1);
        for i in 0..50 {
            let key = format!("k{i}");
            assert_eq!(ask(&mut other, &put(&key, b"v"), true), Some(Response::Ok));
            let get = Request::Get { key };
            assert_eq!(
                ask(&mut other, &get, true),
                Some(Response::Value(b"v".to_vec()))
            );
        }
    }

    #[test]
    fn get_all_answers_the_space_to_a_rank_of_the_job_and_refuses_one_no_frame_holds() {
        let mut s = KvsState::new(2, b"sekrit");
        // Before the hello: refused and closed, nothing of the space told.
        let actions = s.on_request(1, Request::GetAll);
        assert!(
            matches!(
                &actions[..],
                [Action::Reply(1, Response::Error(_)), Action::Close(1)]
            ),
            "{actions:?}"
        );
        hello(&mut s, 2, 0);
        s.on_request(2, put("a", b"1"));
        s.on_request(2, put("b", b"22"));
        let actions = s.on_request(2, Request::GetAll);
        let [Action::Reply(2, Response::Values(pairs))] = &actions[..] else {
            panic!("{actions:?}")
        };
        let mut pairs = pairs.clone();
        pairs.sort();
        assert_eq!(
            pairs,
            vec![("a".into(), b"1".to_vec()), ("b".into(), b"22".to_vec())]
        );
        assert_eq!(
            wire::values_len(pairs.iter().map(|(k, v)| (k.as_str(), v.as_slice()))),
            Response::Values(pairs.clone()).encode().len()
        );
        // Over a frame: before, the reply was never written and the rank waited for ever.
        s.on_request(2, put("big", &vec![0; MAX_FRAME as usize]));
        let actions = s.on_request(2, Request::GetAll);
        let [Action::Reply(2, Response::Error(why)), Action::Close(2)] = &actions[..] else {
            panic!("{actions:?}")
        };
        assert!(
            why.starts_with("the key-value space holds ")
                && why.ends_with(&format!(" bytes, over a frame's {MAX_FRAME}")),
            "{why}"
        );
    }

    #[test]
    fn wrong_secret_is_refused_and_closed() {
        let mut s = KvsState::new(2, b"sekrit");
        let actions = s.on_request(
            9,
            Request::Hello {
                rank: 0,
                secret: b"guess".to_vec(),
            },
        );
        assert!(matches!(
            &actions[..],
            [Action::Reply(9, Response::Error(_)), Action::Close(9)]
        ));
        assert!(!s.is_authenticated(9));
        // The real rank 0 can still connect afterwards.
        assert_eq!(hello(&mut s, 1, 0), vec![Action::Reply(1, Response::Ok)]);
    }

    #[test]
    fn only_a_rank_that_proved_itself_gets_the_job_secret() {
        let mut s = KvsState::new(2, b"sekrit").with_job_secret("00ff");
        let get = || Request::Get {
            key: JOB_SECRET_KEY.into(),
        };
        assert!(matches!(
            &s.on_request(4, get())[..],
            [Action::Reply(4, Response::Error(_)), Action::Close(4)]
        ));
        hello(&mut s, 5, 1);
        assert_eq!(
            s.on_request(5, get()),
            vec![Action::Reply(5, Response::Value(b"00ff".to_vec()))]
        );
    }

    #[test]
    fn requests_before_hello_are_refused() {
        let mut s = KvsState::new(1, b"sekrit");
        let actions = s.on_request(3, put("k", b"v"));
        assert!(matches!(
            &actions[..],
            [Action::Reply(3, Response::Error(_)), Action::Close(3)]
        ));
    }

    #[test]
    fn duplicate_and_out_of_range_ranks_are_refused() {
        let mut s = KvsState::new(2, b"sekrit");
        hello(&mut s, 1, 0);
        assert!(matches!(
            hello(&mut s, 2, 0)[0],
            Action::Reply(2, Response::Error(_))
        ));
        assert!(matches!(
            hello(&mut s, 3, 2)[0],
            Action::Reply(3, Response::Error(_))
        ));
    }

    #[test]
    fn fence_waits_for_every_rank_then_releases_all() {
        let mut s = KvsState::new(3, b"sekrit");
        for rank in 0..3 {
            hello(&mut s, u64::from(rank) + 10, rank);
        }
        assert_eq!(
            s.on_request(10, put("a", b"\0x")),
            vec![Action::Reply(10, Response::Ok)]
        );
        assert!(s.on_request(10, Request::Fence).is_empty());
        assert!(s.on_request(11, Request::Fence).is_empty());
        let released = s.on_request(12, Request::Fence);
        assert_eq!(
            released,
            vec![
                Action::Reply(10, Response::Ok),
                Action::Reply(11, Response::Ok),
                Action::Reply(12, Response::Ok),
            ]
        );
        let key = |k: &str| Request::Get { key: k.into() };
        assert_eq!(
            s.on_request(12, key("a")),
            vec![Action::Reply(12, Response::Value(b"\0x".to_vec()))]
        );
        assert_eq!(
            s.on_request(12, key("b")),
            vec![Action::Reply(12, Response::NotFound)]
        );
        // A second fence starts from scratch.
        assert!(s.on_request(10, Request::Fence).is_empty());
    }

    #[test]
    fn fence_waits_for_ranks_not_yet_connected() {
        let mut s = KvsState::new(2, b"sekrit");
        hello(&mut s, 1, 0);
        assert!(s.on_request(1, Request::Fence).is_empty());
        hello(&mut s, 2, 1);
        assert_eq!(
            s.on_request(2, Request::Fence).len(),
            2,
            "both ranks released"
        );
    }

    #[test]
    fn a_departed_rank_does_not_block_a_fence() {
        let mut s = KvsState::new(2, b"sekrit");
        hello(&mut s, 1, 0);
        hello(&mut s, 2, 1);
        assert!(s.on_request(1, Request::Fence).is_empty());
        let actions = s.on_disconnect(2);
        assert_eq!(
            actions,
            vec![Action::Close(2), Action::Reply(1, Response::Ok)]
        );
        let mut s = KvsState::new(2, b"sekrit");
        hello(&mut s, 1, 0);
        hello(&mut s, 2, 1);
        assert_eq!(
            s.on_request(2, Request::Finalize),
            vec![Action::Reply(2, Response::Ok), Action::Close(2)]
        );
        assert_eq!(
            s.on_request(1, Request::Fence),
            vec![Action::Reply(1, Response::Ok)]
        );
    }

    #[test]
    fn stall_states_go_to_the_job_unanswered() {
        let mut s = KvsState::new(2, b"sekrit");
        hello(&mut s, 5, 1);
        assert_eq!(
            s.on_request(
                5,
                Request::Stalled {
                    state: vec![1, 2, 3]
                }
            ),
            vec![Action::Stall {
                rank: 1,
                state: Some(vec![1, 2, 3])
            }]
        );
        assert_eq!(
            s.on_request(5, Request::Resumed),
            vec![Action::Stall {
                rank: 1,
                state: None
            }]
        );
        // Before the hello, a stall state is refused like any other request.
        assert!(matches!(
            s.on_request(6, Request::Resumed)[..],
            [Action::Reply(6, Response::Error(_)), Action::Close(6)]
        ));
    }

    #[test]
    fn abort_is_reported_before_the_reply() {
        let mut s = KvsState::new(2, b"sekrit");
        hello(&mut s, 5, 1);
        let actions = s.on_request(
            5,
            Request::Abort {
                code: 4,
                message: "bad input".into(),
            },
        );
        assert_eq!(
            actions,
            vec![
                Action::Abort {
                    rank: 1,
                    code: 4,
                    message: "bad input".into()
                },
                Action::Reply(5, Response::Ok),
            ]
        );
    }
}
