//! Bridges (`Engine::open_bridge`, `join_bridge`): two singleton engines, each in a thread of
//! its own as each would be in a process of its own, meet over bridge after bridge as a
//! process that spawns again and again meets its children, and messages cross bridges
//! whatever their place among the transports; what a bridge refuses is a named error.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread;

use pml::transport::tcp::JobSecret;
use pml::{BridgePeer, Done, Engine, EngineConfig, Pml, Rank, SendMode, SourceSel, TagSel};

mod ranks_common;

use ranks_common::{pattern, singleton_wireup};

const SECRET: JobSecret = [0x33; 32];
/// More bridges than a 32-bit mask of transports had bits for.
const BRIDGES: usize = 40;
/// The sender's rank that each message's envelope carries, and its receive names: a rank in
/// the communicator, as the layer above would give (each side numbers only its own group).
const SOURCE: Rank = 0;

fn host() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

fn engine(name: &str) -> (Engine, std::path::PathBuf) {
    let mut w = singleton_wireup(name);
    let e = Engine::new(&mut w, EngineConfig::default()).unwrap();
    (e, w.dir)
}

/// Opens a bridge as `rank` of 2, trades endpoints with the other thread, and joins it;
/// returns the engine's rank of the other side.
fn meet(e: &mut Engine, rank: Rank, to: &Sender<String>, from: &Receiver<String>) -> Rank {
    let bridge = e.open_bridge(rank, 2, &SECRET).unwrap();
    to.send(bridge.endpoint().unwrap()).unwrap();
    let endpoint = from.recv().unwrap();
    let peer = BridgePeer {
        rank: 1 - rank,
        host: host(),
        endpoint,
        name: format!("rank 0 of the other side of bridge {}", e.reachable()),
    };
    let names = e.join_bridge(bridge, &[peer]).unwrap();
    assert_eq!(names.len(), 1);
    names[0]
}

/// The bridges that messages cross: the first, the first past 32 transports, the last.
fn crossed() -> [usize; 3] {
    [0, 32, BRIDGES - 1]
}

fn tag_of(bridge: usize) -> i32 {
    100 + bridge as i32
}

#[test]
fn messages_cross_every_bridge_past_32() {
    let (to_b, from_a) = channel();
    let (to_a, from_b) = channel();
    let b = thread::spawn(move || {
        let (mut e, dir) = engine("bridge-b");
        let names: Vec<Rank> = (0..BRIDGES)
            .map(|_| meet(&mut e, 1, &to_a, &from_a))
            .collect();
        for bridge in crossed() {
            let len = 1000 + bridge;
            let mut buf = vec![0u8; len];
            // SAFETY: `buf` outlives the call, which returns once the receive is done.
            let status = unsafe {
                e.recv(
                    0,
                    SourceSel::Rank(SOURCE),
                    TagSel::Tag(tag_of(bridge)),
                    buf.as_mut_ptr(),
                    len,
                )
            }
            .unwrap();
            assert_eq!(status.len, len);
            assert_eq!(buf, pattern(len, bridge), "over bridge {bridge}");
        }
        // Answered on the last bridge: its frames reach this side's peer.
        let done = [1u8];
        // SAFETY: `done` outlives the request, waited for below.
        let h = unsafe {
            e.post_send(
                0,
                SOURCE,
                names[BRIDGES - 1],
                1,
                SendMode::Standard,
                done.as_ptr(),
                1,
            )
        }
        .unwrap();
        assert_eq!(e.wait(h).unwrap(), Done::Sent);
        fs::remove_dir_all(dir).unwrap();
    });
    let (mut e, dir) = engine("bridge-a");
    let names: Vec<Rank> = (0..BRIDGES)
        .map(|_| meet(&mut e, 0, &to_b, &from_b))
        .collect();
    assert_eq!(e.reachable(), 1 + BRIDGES as u32);
    for bridge in crossed() {
        let data = pattern(1000 + bridge, bridge);
        // SAFETY: `data` outlives the request, waited for below.
        let h = unsafe {
            e.post_send(
                0,
                SOURCE,
                names[bridge],
                tag_of(bridge),
                SendMode::Standard,
                data.as_ptr(),
                data.len(),
            )
        }
        .unwrap();
        assert_eq!(e.wait(h).unwrap(), Done::Sent);
    }
    let mut done = [0u8];
    // SAFETY: `done` outlives the call.
    unsafe {
        e.recv(
            0,
            SourceSel::Rank(SOURCE),
            TagSel::Tag(1),
            done.as_mut_ptr(),
            1,
        )
    }
    .unwrap();
    assert_eq!(done, [1]);
    // Both close at once: each waits for the other to close its side of their connections.
    drop(e);
    b.join().unwrap();
    fs::remove_dir_all(dir).unwrap();
}

/// Bridges, to a peer never reached, until a route cannot name another: a named error, not
/// a panic nor a wrong route.
#[test]
fn a_bridge_past_the_most_a_route_can_name_is_refused() {
    let (mut e, dir) = engine("bridge-most");
    let endpoint = e.open_bridge(0, 2, &SECRET).unwrap().endpoint().unwrap();
    let mut joined = 0;
    let refusal = loop {
        match e.open_bridge(0, 2, &SECRET) {
            Ok(bridge) => {
                let peer = BridgePeer {
                    rank: 1,
                    host: host(),
                    endpoint: endpoint.clone(),
                    name: "rank 0 of a job never reached".to_string(),
                };
                e.join_bridge(bridge, &[peer]).unwrap();
                joined += 1;
            }
            Err(refusal) => break refusal.to_string(),
        }
        assert!(joined < 1000, "bridges are never refused");
    };
    assert!(
        refusal.contains(&format!(
            "this process already joined {joined} bridges to spawned or parent ranks, the most"
        )),
        "{refusal}"
    );
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_bridge_refuses_a_peer_outside_its_numbering_or_this_process_itself() {
    let (mut e, dir) = engine("bridge-stray");
    let endpoint = e.open_bridge(0, 2, &SECRET).unwrap().endpoint().unwrap();
    for (stray, what) in [(2, "rank 2"), (0, "rank 0")] {
        let bridge = e.open_bridge(0, 2, &SECRET).unwrap();
        let peer = BridgePeer {
            rank: stray,
            host: host(),
            endpoint: endpoint.clone(),
            name: "a stray".to_string(),
        };
        let e = e.join_bridge(bridge, &[peer]).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "TCP bridge: {what} of a bridge of 2 ranks, where this process is rank 0, is \
                 not another process of it"
            )),
            "{e}"
        );
    }
    // Nothing was joined: the engine reaches its world alone.
    assert_eq!(e.reachable(), 1);
    fs::remove_dir_all(dir).unwrap();
}

/// A bridge's failures name the peer as its own job numbers it (what the layer above gave
/// as `BridgePeer::name`), not by the bridge's numbering nor the engine's.
#[test]
fn a_bridge_failure_names_the_peer_as_its_job_knows_it() {
    let (mut e, dir) = engine("bridge-named");
    // The endpoint of a bridge whose listener is gone: nothing answers there.
    let endpoint = e.open_bridge(0, 2, &SECRET).unwrap().endpoint().unwrap();
    let bridge = e.open_bridge(0, 2, &SECRET).unwrap();
    let child = "rank 0 of spawned job 7 (1 ranks of ./child)";
    let peer = BridgePeer {
        rank: 1,
        host: host(),
        endpoint,
        name: child.to_string(),
    };
    let names = e.join_bridge(bridge, &[peer]).unwrap();
    let failure = send_8_bytes(&mut e, names[0]).unwrap_err().to_string();
    let expected = format!(
        "the connection with {child} on {} failed: cannot connect to it (",
        host()
    );
    assert!(failure.contains(&expected), "{failure}");
    fs::remove_dir_all(dir).unwrap();
}

/// A bridge's dial that gives up (here: what answers at every address of the peer is no
/// process of the job) names the peer as its own job numbers it too, not by the bridge's
/// numbering, in which it is rank 1.
#[test]
fn a_bridge_redial_failure_names_the_peer_as_its_job_knows_it() {
    let (mut e, dir) = engine("bridge-redial-named");
    // Answers each hello with a challenge no process knowing the job's secret would send, on
    // the one address published for it, IPv4's loopback (a socket on [::] would take IPv4
    // too only where net.ipv6.bindv6only is 0).
    let impostor = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = impostor.local_addr().unwrap().port();
    thread::spawn(move || {
        for mut conn in impostor.incoming().flatten() {
            let mut hello = [0u8; 32];
            if conn.read_exact(&mut hello).is_ok() {
                let _ = conn.write_all(&[0x5a; 48]);
            }
        }
    });
    let bridge = e.open_bridge(0, 2, &SECRET).unwrap();
    let child = "rank 2 of spawned job 3 (3 ranks of ./child)";
    let peer = BridgePeer {
        rank: 1,
        host: host(),
        endpoint: format!("{port} 127.0.0.1/8"),
        name: child.to_string(),
    };
    let names = e.join_bridge(bridge, &[peer]).unwrap();
    let failure = send_8_bytes(&mut e, names[0]).unwrap_err().to_string();
    let expected = format!(
        "the connection with {child} on {} failed: what answers at ",
        host()
    );
    assert!(
        failure.contains(&expected)
            && failure.contains(&format!(
                "127.0.0.1:{port}, its address, does not know the secret we share with it"
            ))
            && !failure.contains("rank 1"),
        "{failure}"
    );
    fs::remove_dir_all(dir).unwrap();
}

/// Sends 8 bytes with tag 1 to the engine's rank `to` and waits for the send.
fn send_8_bytes(e: &mut Engine, to: Rank) -> Result<pml::Done, pml::PmlError> {
    let data = [7u8; 8];
    // SAFETY: `data` outlives the request, waited for (or failed) here.
    let sent = unsafe {
        e.post_send(
            0,
            SOURCE,
            to,
            1,
            SendMode::Standard,
            data.as_ptr(),
            data.len(),
        )
    }?;
    e.wait(sent)
}
