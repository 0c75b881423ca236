//! The shm transport within one process: both ends mapped twice, driven from two threads.

use std::process::Command;
use std::time::{Duration, Instant};

use pml::transport::shm::{ShmConfig, ShmTransport};

mod shm_common;
use shm_common::Name;

#[test]
fn attach_validates_and_the_last_attacher_unlinks() {
    let name = Name::new("attach");
    let cfg = ShmConfig { ring_bytes: 8192 };
    let a = ShmTransport::create(&name.0, 0, 3, &cfg).unwrap();
    assert!(ShmTransport::create(&name.0, 0, 3, &cfg).is_err(), "O_EXCL");
    assert!(
        ShmTransport::attach(&name.0, 1, 4).is_err(),
        "wrong local size"
    );
    assert!(
        ShmTransport::attach(&name.0, 0, 3).is_err(),
        "rank 0 is taken"
    );
    assert!(
        ShmTransport::attach(&name.0, 3, 3).is_err(),
        "rank out of range"
    );
    let b = ShmTransport::attach(&name.0, 1, 3).unwrap();
    assert!(name.exists());
    let c = ShmTransport::attach(&name.0, 2, 3).unwrap();
    assert!(!name.exists());
    assert_eq!(a.max_frame(), 8192 - 4);
    assert_eq!((b.local_rank(), c.local_size()), (1, 3));
    assert!(ShmTransport::attach("mpirt-test-does-not-exist", 1, 2).is_err());
    assert!(ShmTransport::create("bad/name", 0, 2, &cfg).is_err());
    assert!(ShmTransport::create(&name.0, 0, 2, &ShmConfig { ring_bytes: 5000 }).is_err());
}

#[test]
fn frames_full_rings_and_limits() {
    let name = Name::new("limits");
    let cfg = ShmConfig { ring_bytes: 4096 };
    let mut a = ShmTransport::create(&name.0, 0, 3, &cfg).unwrap();
    let mut b = ShmTransport::attach(&name.0, 1, 3).unwrap();
    let mut c = ShmTransport::attach(&name.0, 2, 3).unwrap();
    let max = vec![0x5a; a.max_frame()];
    assert!(a.try_send(1, &max, &[]).unwrap());
    assert!(!a.try_send(1, b"full", &[]).unwrap(), "ring full");
    assert!(
        a.try_send(2, b"", b"to c").unwrap(),
        "other rings unaffected"
    );
    assert!(a.try_send(1, &max, b"x").is_err(), "over max_frame");
    assert!(a.try_send(0, b"self", &[]).is_err());
    assert!(a.try_send(3, b"nobody", &[]).is_err());
    assert!(c.try_send(1, &[], &[]).unwrap(), "zero-length frame");

    let mut got = Vec::new();
    while got.len() < 2 {
        b.poll(|from, f| got.push((from, f.len(), f.iter().all(|&x| x == 0x5a))));
    }
    got.sort();
    assert_eq!(got, vec![(0, max.len(), true), (2, 0, true)]);
    assert!(a.try_send(1, b"room again", &[]).unwrap());
    let mut frames = Vec::new();
    c.poll(|from, f| frames.push((from, f.to_vec())));
    assert_eq!(frames, vec![(0, b"to c".to_vec())]);
}

#[test]
fn two_threads_exchange_with_checksums() {
    const FRAMES: u64 = 100_000;
    let name = Name::new("threads");
    let cfg = ShmConfig {
        ring_bytes: 16 << 10,
    };
    let mut a = ShmTransport::create(&name.0, 0, 2, &cfg).unwrap();
    let mut b = ShmTransport::attach(&name.0, 1, 2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let run = move |t: &mut ShmTransport| {
        let me = t.local_rank() as u64;
        let peer = 1 - t.local_rank();
        let (mut sent, mut received, mut idle) = (0u64, 0u64, 0u32);
        let mut body = Vec::new();
        while sent < FRAMES || received < FRAMES {
            let mut progress = false;
            if sent < FRAMES {
                body.clear();
                body.extend((0..(sent * 11 % 500) as usize).map(|j| (sent + j as u64 + me) as u8));
                let sum: u64 = body.iter().map(|&x| u64::from(x)).sum();
                let meta = [sent.to_le_bytes(), sum.to_le_bytes()].concat();
                if t.try_send(peer, &meta, &body).unwrap() {
                    sent += 1;
                    progress = true;
                }
            }
            let got = t.poll(|from, f| {
                assert_eq!(from, peer);
                let seq = u64::from_le_bytes(f[..8].try_into().unwrap());
                let sum = u64::from_le_bytes(f[8..16].try_into().unwrap());
                assert_eq!(seq, received);
                assert_eq!(f.len() - 16, (seq * 11 % 500) as usize);
                assert_eq!(f[16..].iter().map(|&x| u64::from(x)).sum::<u64>(), sum);
                received += 1;
            });
            if progress || got > 0 {
                idle = 0;
            } else if idle > 100 {
                t.wait(Duration::from_millis(1));
                idle = 0;
            } else {
                idle += 1;
            }
            assert!(Instant::now() < deadline, "timed out");
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| run(&mut b));
        run(&mut a);
    });
}

#[test]
fn wait_times_out_and_wake_is_remembered() {
    let name = Name::new("alone");
    let t = ShmTransport::create(&name.0, 0, 1, &ShmConfig::default()).unwrap();
    assert!(!name.exists(), "a single rank is the last to attach");
    let start = Instant::now();
    t.wait(Duration::from_millis(50));
    let slept = start.elapsed();
    assert!(
        slept >= Duration::from_millis(40),
        "woke early after {slept:?}"
    );
    assert!(slept < Duration::from_secs(10));
    t.wake(0);
    let start = Instant::now();
    t.wait(Duration::from_secs(10));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "a wake before wait counts"
    );
}

/// Both sides only ever sleep (no spinning, long timeouts): a lost wake-up, of a receiver by a
/// frame or of a sender by the room its receiver made, shows up as a wait that ran out.
#[test]
fn sleeping_senders_and_receivers_are_always_woken() {
    const FRAMES: u32 = 20_000;
    const LONG: Duration = Duration::from_secs(10);
    let name = Name::new("sleepers");
    let cfg = ShmConfig { ring_bytes: 4096 };
    let mut a = ShmTransport::create(&name.0, 0, 2, &cfg).unwrap();
    let mut b = ShmTransport::attach(&name.0, 1, 2).unwrap();
    let timed_wait = |t: &ShmTransport| {
        let start = Instant::now();
        t.wait(LONG);
        assert!(start.elapsed() < LONG / 2, "a wake-up was lost");
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let frame = [0x33u8; 900];
            for i in 0..FRAMES {
                while !b.try_send(0, &i.to_le_bytes(), &frame).unwrap() {
                    timed_wait(&b);
                }
            }
        });
        let mut next = 0;
        while next < FRAMES {
            if a.poll(|_, f| {
                assert_eq!(f[..4], next.to_le_bytes());
                next += 1;
            }) == 0
            {
                timed_wait(&a);
            }
        }
    });
}

/// A drain that only steps over a wrap marker hands out no frame but frees the room a blocked
/// sender waits for: the sender, asleep, must be woken then, not at its timeout.
#[test]
fn stepping_over_a_wrap_marker_wakes_a_blocked_sender() {
    let name = Name::new("wrapwake");
    let cfg = ShmConfig { ring_bytes: 4096 };
    let mut a = ShmTransport::create(&name.0, 0, 2, &cfg).unwrap();
    let mut b = ShmTransport::attach(&name.0, 1, 2).unwrap();
    // The consumer's position at 1008, inside the lap.
    assert!(a.try_send(1, &[1u8; 1000], &[]).unwrap());
    assert_eq!(b.poll(|_, _| {}), 1);
    // A largest frame fits only from the lap's start: its wrap marker is written, the record
    // is refused until the consumer has passed the marker.
    let max = vec![7u8; a.max_frame()];
    assert!(!a.try_send(1, &max, &[]).unwrap());
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(b.poll(|_, _| panic!("no frame yet")), 0);
        });
        // Not woken, the wait runs its 20 s; woken, it ends soon after 200 ms, and within
        // 10 s however long a loaded host keeps either thread off its CPU.
        let start = Instant::now();
        a.wait(Duration::from_secs(20));
        let waited = start.elapsed();
        assert!(
            waited < Duration::from_secs(10),
            "the blocked sender slept {waited:?}, though the consumer made room at 200 ms"
        );
    });
    assert!(a.try_send(1, &max, &[]).unwrap());
}

// A host whose /dev/shm cannot hold every ring: making the rings resident at start must not
// kill the ranks (a page that tmpfs cannot back is SIGBUS when touched). The test runs itself
// again in a private mount namespace with a 16 MiB /dev/shm, which needs root (`unshare -m`).

const INNER: &str = "MPIRT_TEST_INSIDE_SMALL_DEV_SHM";
const TEST: &str = "rings_larger_than_dev_shm_do_not_kill_the_ranks";

#[test]
fn rings_larger_than_dev_shm_do_not_kill_the_ranks() {
    if std::env::var_os(INNER).is_some() {
        eight_ranks_with_56_mib_of_rings();
        return;
    }
    let unshare_works = Command::new("unshare")
        .args(["-m", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !unshare_works {
        eprintln!("skipped: `unshare -m` is not available or not permitted here (needs root)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let status = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs -o size=16m tmpfs /dev/shm && exec \"$0\" --exact \"$1\" --nocapture",
        ])
        .arg(exe)
        .arg(TEST)
        .env(INNER, "1")
        .status()
        .unwrap();
    assert!(status.success(), "under a 16 MiB /dev/shm: {status}");
}

/// 8 local ranks with 1 MiB rings: 56 MiB of rings, under the size made resident at start
/// but past what this /dev/shm holds.
fn eight_ranks_with_56_mib_of_rings() {
    let name = Name::new("small-dev-shm");
    let cfg = ShmConfig {
        ring_bytes: 1 << 20,
    };
    let mut first = ShmTransport::create(&name.0, 0, 8, &cfg).unwrap();
    let mut others: Vec<_> = (1..8)
        .map(|r| ShmTransport::attach(&name.0, r, 8).unwrap())
        .collect();
    // The rings still carry frames where pages could be had.
    assert!(first.try_send(7, b"small", &[]).unwrap());
    let mut got = Vec::new();
    while got.is_empty() {
        others[6].poll(|from, f| got.push((from, f.to_vec())));
    }
    assert_eq!(got, vec![(0, b"small".to_vec())]);
    assert!(others[6].try_send(0, b"back", &[]).unwrap());
    let mut back = Vec::new();
    while back.is_empty() {
        first.poll(|from, f| back.push((from, f.to_vec())));
    }
    assert_eq!(back, vec![(7, b"back".to_vec())]);
}

/// A sleep taken apart from the transport (`begin_nap`: a thread of a rank whose engine its
/// threads share, sleeping without the engine): it runs to its timeout while nothing comes,
/// a frame a peer sends once it is announced ends it, a frame already there refuses it, and
/// the rank's own wake (what another of its threads does) ends it once: the next sleep runs
/// to its timeout again. A lost wake-up shows as a sleep that runs its 20 s out.
#[test]
fn a_sleep_apart_is_woken_by_a_peer_and_by_its_own_rank_once() {
    let name = Name::new("nap");
    let cfg = ShmConfig { ring_bytes: 8192 };
    let mut a = ShmTransport::create(&name.0, 0, 2, &cfg).unwrap();
    let mut b = ShmTransport::attach(&name.0, 1, 2).unwrap();
    let short = Duration::from_millis(20);
    let long = Duration::from_secs(20);

    let nap = a.begin_nap().expect("nothing is there");
    assert!(nap.sleep(short), "nothing came, so it ran to its timeout");
    a.end_nap(true);

    let nap = a.begin_nap().expect("nothing is there");
    let peer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        assert!(b.try_send(0, b"wake", &[]).unwrap());
        b
    });
    assert!(!nap.sleep(long), "the peer's frame woke it");
    a.end_nap(false);
    let _b = peer.join().unwrap();

    assert!(a.begin_nap().is_none(), "a frame is there: no sleep");
    let mut got = Vec::new();
    while got.is_empty() {
        a.poll(|from, f| got.push((from, f.to_vec())));
    }
    assert_eq!(got, vec![(1, b"wake".to_vec())]);

    let nap = a.begin_nap().expect("nothing is there");
    a.wake(a.local_rank());
    assert!(!nap.sleep(long), "its own rank's wake woke it");
    a.end_nap(false);
    let nap = a.begin_nap().expect("the wake was the last sleep's");
    assert!(nap.sleep(short), "a wake ends one sleep only");
    a.end_nap(true);
}
