//! How two ranks prove to each other that both belong to the job before a TCP connection
//! carries frames: a challenge and response in each direction, keyed by the job's secret.
//!
//! ```text
//! dialler  -> acceptor  HELLO     magic, from rank, to rank, dialler's nonce
//! acceptor -> dialler   CHALLENGE acceptor's nonce, MAC(ACCEPTOR, from, to, both nonces)
//! dialler  -> acceptor  PROOF     MAC(DIALLER, from, to, both nonces)
//! acceptor -> dialler   VERDICT   taken, or refused because the acceptor's own dial wins
//! ```
//!
//! Each MAC covers both ranks and both nonces, each side picks its nonce afresh for every
//! connection, and the two directions use different labels: so a recorded PROOF fails against
//! the acceptor's new nonce, a CHALLENGE cannot be reflected as a PROOF, and neither fits
//! another pair of ranks. The secret itself never crosses the wire. HMAC-SHA-256 (RustCrypto's
//! `hmac` and `sha2`, pure Rust) makes the MACs, and their check takes constant time.
//!
//! Everything here is pure: the transport moves the bytes and keeps the deadlines.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::envelope::Rank;

/// The per-job secret both ends of a connection must know.
pub type JobSecret = [u8; 32];

type Nonce = [u8; 16];
const MAC_LEN: usize = 32;

/// A new magic for this handshake, so that a hello of the earlier unauthenticated form (or
/// anything else) is told apart at once.
const MAGIC: &[u8; 8] = b"mpirt-h1";
pub const HELLO_LEN: usize = 8 + 4 + 4 + 16;
pub const CHALLENGE_LEN: usize = 16 + MAC_LEN;
pub const PROOF_LEN: usize = MAC_LEN;

/// The acceptor's last byte: the connection carries the pair's frames from now on.
pub const TAKEN: u8 = 1;
/// Or: the acceptor's own dial to the dialler wins (the lower rank's does), which it awaits.
pub const REFUSED: u8 = 2;
/// Or: the acceptor challenged this dial and then evicted it from too many connections in the
/// handshake at once (strangers can say hellos: a hello holds no secret). The dialler dials
/// again after a pause; it is not a refusal of the dialler.
pub const CROWDED: u8 = 3;

const ACCEPTOR_LABEL: &[u8] = b"mpirt tcp acceptor v1";
const DIALLER_LABEL: &[u8] = b"mpirt tcp dialler v1";

/// Why a handshake failed, as `--verbose` and errors name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The first bytes are not a hello of this protocol (another program, an old mpirt).
    NotAHandshake,
    /// The hello was meant for another rank (a stale address, or a guess).
    AddressedTo(u32),
    /// The hello names a rank the job does not have, or the acceptor's own.
    NoSuchPeer(u32),
    /// A MAC does not match: the other side does not know the job's secret, or it replays a
    /// handshake recorded from another connection.
    WrongProof,
    /// The other side stopped talking before the handshake ended.
    Silent,
    /// The other side closed the connection before the handshake ended.
    Closed,
    /// It was evicted from too many connections in the handshake at once (those that have
    /// not said a whole hello go first).
    Crowded,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotAHandshake => write!(f, "not an mpirt handshake"),
            Refusal::AddressedTo(r) => write!(f, "a hello addressed to rank {r}"),
            Refusal::NoSuchPeer(r) => write!(f, "a hello from rank {r}, which is no peer"),
            Refusal::WrongProof => write!(
                f,
                "wrong proof of the job's secret (another job, or a replayed handshake)"
            ),
            Refusal::Silent => write!(f, "said nothing within the handshake deadline"),
            Refusal::Closed => write!(f, "closed in the middle of the handshake"),
            Refusal::Crowded => write!(
                f,
                "evicted from too many connections in the handshake at once"
            ),
        }
    }
}

fn mac(
    secret: &JobSecret,
    label: &[u8],
    from: Rank,
    to: Rank,
    nonces: (&Nonce, &Nonce),
) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    m.update(label);
    m.update(&from.to_le_bytes());
    m.update(&to.to_le_bytes());
    m.update(nonces.0);
    m.update(nonces.1);
    m
}

/// The dialling side of one connection, from its hello to the acceptor's verdict.
#[derive(Debug)]
pub struct Dialler {
    secret: JobSecret,
    me: Rank,
    peer: Rank,
    nonce: Nonce,
}

impl Dialler {
    /// Starts a dial from `me` to `peer`; returns what to send first.
    pub fn new(
        secret: &JobSecret,
        me: Rank,
        peer: Rank,
        nonce: Nonce,
    ) -> (Dialler, [u8; HELLO_LEN]) {
        let mut hello = [0u8; HELLO_LEN];
        hello[..8].copy_from_slice(MAGIC);
        hello[8..12].copy_from_slice(&me.to_le_bytes());
        hello[12..16].copy_from_slice(&peer.to_le_bytes());
        hello[16..].copy_from_slice(&nonce);
        let dialler = Dialler {
            secret: *secret,
            me,
            peer,
            nonce,
        };
        (dialler, hello)
    }

    /// Checks the acceptor's proof and answers its challenge.
    pub fn answer(&self, challenge: &[u8; CHALLENGE_LEN]) -> Result<[u8; PROOF_LEN], Refusal> {
        let theirs: Nonce = challenge[..16].try_into().expect("16 bytes");
        let nonces = (&self.nonce, &theirs);
        mac(&self.secret, ACCEPTOR_LABEL, self.me, self.peer, nonces)
            .verify_slice(&challenge[16..])
            .map_err(|_| Refusal::WrongProof)?;
        let proof = mac(&self.secret, DIALLER_LABEL, self.me, self.peer, nonces).finalize();
        Ok(proof.into_bytes().into())
    }
}

/// The accepting side after a well-formed hello: the challenge it sent, and what the dialler's
/// proof must match.
#[derive(Debug)]
pub struct Challenged {
    /// The rank the dialler says it is (proven only by `check`).
    pub from: Rank,
    me: Rank,
    nonces: (Nonce, Nonce),
}

/// Whether the first bytes of a hello already show it is none, so that it need not be waited
/// for in whole.
pub fn not_a_hello(start: &[u8]) -> bool {
    let n = start.len().min(MAGIC.len());
    start[..n] != MAGIC[..n]
}

/// Reads a hello that arrived at rank `me` of a job of `size` and challenges the dialler.
pub fn challenge(
    secret: &JobSecret,
    me: Rank,
    size: u32,
    hello: &[u8; HELLO_LEN],
    nonce: Nonce,
) -> Result<(Challenged, [u8; CHALLENGE_LEN]), Refusal> {
    if &hello[..8] != MAGIC {
        return Err(Refusal::NotAHandshake);
    }
    let from = u32::from_le_bytes(hello[8..12].try_into().expect("4 bytes"));
    let to = u32::from_le_bytes(hello[12..16].try_into().expect("4 bytes"));
    if to != me {
        return Err(Refusal::AddressedTo(to));
    }
    if from >= size || from == me {
        return Err(Refusal::NoSuchPeer(from));
    }
    let theirs: Nonce = hello[16..].try_into().expect("16 bytes");
    let mut out = [0u8; CHALLENGE_LEN];
    out[..16].copy_from_slice(&nonce);
    let m = mac(secret, ACCEPTOR_LABEL, from, me, (&theirs, &nonce)).finalize();
    out[16..].copy_from_slice(&m.into_bytes());
    let challenged = Challenged {
        from,
        me,
        nonces: (theirs, nonce),
    };
    Ok((challenged, out))
}

impl Challenged {
    /// Checks the dialler's proof; `Ok` names the rank it proved to be.
    pub fn check(&self, secret: &JobSecret, proof: &[u8; PROOF_LEN]) -> Result<Rank, Refusal> {
        let nonces = (&self.nonces.0, &self.nonces.1);
        mac(secret, DIALLER_LABEL, self.from, self.me, nonces)
            .verify_slice(proof)
            .map_err(|_| Refusal::WrongProof)?;
        Ok(self.from)
    }
}

/// A key for one use of `secret`, so that one secret can key several handshakes (a spawn's
/// port and the bridge its two jobs share) and a proof made for one is worth nothing in
/// another: HMAC-SHA-256 of `purpose` under `secret`.
pub fn derive_key(secret: &JobSecret, purpose: &[u8]) -> JobSecret {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    m.update(b"mpirt derived key v1");
    m.update(purpose);
    m.finalize().into_bytes().into()
}

/// A fresh nonce from the kernel's random source.
pub fn nonce() -> std::io::Result<Nonce> {
    let mut n = [0u8; 16];
    crate::random::fill(&mut n)?;
    Ok(n)
}

/// A fixed-length message arriving in pieces on a non-blocking socket.
#[derive(Debug)]
pub struct Incoming<const N: usize> {
    pub buf: [u8; N],
    pub got: usize,
}

impl<const N: usize> Incoming<N> {
    pub fn new() -> Self {
        Incoming {
            buf: [0; N],
            got: 0,
        }
    }

    /// The part still to read.
    pub fn rest(&mut self) -> &mut [u8] {
        &mut self.buf[self.got..]
    }

    pub fn complete(&self) -> bool {
        self.got == N
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: JobSecret = [7; 32];

    /// Runs a whole handshake from rank `d` to rank `a` of a job of 4; the dialler's and the
    /// acceptor's secrets may differ.
    fn run(
        dialler_secret: &JobSecret,
        acceptor_secret: &JobSecret,
        d: Rank,
        a: Rank,
    ) -> Result<Rank, Refusal> {
        let (dialler, hello) = Dialler::new(dialler_secret, d, a, [1; 16]);
        let (challenged, ch) = challenge(acceptor_secret, a, 4, &hello, [2; 16])?;
        let proof = dialler.answer(&ch)?;
        challenged.check(acceptor_secret, &proof)
    }

    #[test]
    fn ranks_that_share_the_secret_agree() {
        assert_eq!(run(&SECRET, &SECRET, 3, 1), Ok(3));
        assert_eq!(run(&SECRET, &SECRET, 0, 2), Ok(0));
    }

    #[test]
    fn a_wrong_secret_fails_on_both_sides() {
        let other = [8; 32];
        // The dialler finds out from the challenge, before it proves anything.
        assert_eq!(run(&other, &SECRET, 3, 1), Err(Refusal::WrongProof));
        // A dialler that skips the check still cannot make a proof the acceptor takes.
        let (_, hello) = Dialler::new(&other, 3, 1, [1; 16]);
        let (challenged, ch) = challenge(&SECRET, 1, 4, &hello, [2; 16]).unwrap();
        let forged = mac(
            &other,
            DIALLER_LABEL,
            3,
            1,
            (&[1; 16], &ch[..16].try_into().unwrap()),
        )
        .finalize()
        .into_bytes();
        assert_eq!(
            challenged.check(&SECRET, &forged.into()),
            Err(Refusal::WrongProof)
        );
    }

    #[test]
    fn a_recorded_handshake_does_not_replay() {
        let (dialler, hello) = Dialler::new(&SECRET, 3, 1, [1; 16]);
        let (_, ch) = challenge(&SECRET, 1, 4, &hello, [2; 16]).unwrap();
        let recorded_proof = dialler.answer(&ch).unwrap();
        // The same hello again meets a new nonce, which the recorded proof does not cover.
        let (challenged, _) = challenge(&SECRET, 1, 4, &hello, [9; 16]).unwrap();
        assert_eq!(
            challenged.check(&SECRET, &recorded_proof),
            Err(Refusal::WrongProof)
        );
        // Nor can the acceptor's own MAC be reflected back as a proof.
        let (challenged, ch) = challenge(&SECRET, 1, 4, &hello, [2; 16]).unwrap();
        let reflected: [u8; PROOF_LEN] = ch[16..].try_into().unwrap();
        assert_eq!(
            challenged.check(&SECRET, &reflected),
            Err(Refusal::WrongProof)
        );
        // A recorded challenge fails a dialler with a new nonce: no acceptor can be replayed.
        let (fresh, _) = Dialler::new(&SECRET, 3, 1, [5; 16]);
        assert_eq!(fresh.answer(&ch), Err(Refusal::WrongProof));
    }

    #[test]
    fn a_proof_is_bound_to_both_ranks() {
        let (dialler, hello) = Dialler::new(&SECRET, 3, 1, [1; 16]);
        let (_, ch) = challenge(&SECRET, 1, 4, &hello, [2; 16]).unwrap();
        let proof = dialler.answer(&ch).unwrap();
        // Rank 3's proof, presented under the name of rank 2 or to rank 0, fails.
        let mut as_rank_2 = hello;
        as_rank_2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let (challenged, _) = challenge(&SECRET, 1, 4, &as_rank_2, [2; 16]).unwrap();
        assert_eq!(challenged.check(&SECRET, &proof), Err(Refusal::WrongProof));
        let mut to_rank_0 = hello;
        to_rank_0[12..16].copy_from_slice(&0u32.to_le_bytes());
        let (challenged, _) = challenge(&SECRET, 0, 4, &to_rank_0, [2; 16]).unwrap();
        assert_eq!(challenged.check(&SECRET, &proof), Err(Refusal::WrongProof));
    }

    #[test]
    fn malformed_hellos_are_refused_before_any_challenge() {
        let (_, hello) = Dialler::new(&SECRET, 3, 1, [1; 16]);
        let check = |h: &[u8; HELLO_LEN], me| challenge(&SECRET, me, 4, h, [2; 16]).map(|_| ());
        assert_eq!(check(&hello, 2), Err(Refusal::AddressedTo(1)));
        let mut old = hello;
        old[..8].copy_from_slice(b"mpirt-tc");
        assert_eq!(check(&old, 1), Err(Refusal::NotAHandshake));
        assert!(not_a_hello(b"mpirt-t") && !not_a_hello(b"mpirt-h") && !not_a_hello(&hello));
        assert!(!not_a_hello(b"") && not_a_hello(b"GET / HTTP/1.1\r\n"));
        let (_, from_9) = Dialler::new(&SECRET, 9, 1, [1; 16]);
        assert_eq!(check(&from_9, 1), Err(Refusal::NoSuchPeer(9)));
        let (_, itself) = Dialler::new(&SECRET, 1, 1, [1; 16]);
        assert_eq!(check(&itself, 1), Err(Refusal::NoSuchPeer(1)));
    }

    #[test]
    fn a_flipped_bit_anywhere_in_a_proof_fails() {
        let (dialler, hello) = Dialler::new(&SECRET, 3, 1, [1; 16]);
        let (challenged, ch) = challenge(&SECRET, 1, 4, &hello, [2; 16]).unwrap();
        let proof = dialler.answer(&ch).unwrap();
        for bit in 0..PROOF_LEN * 8 {
            let mut p = proof;
            p[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(challenged.check(&SECRET, &p), Err(Refusal::WrongProof));
        }
        for bit in 0..CHALLENGE_LEN * 8 {
            let mut c = ch;
            c[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(dialler.answer(&c), Err(Refusal::WrongProof));
        }
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
