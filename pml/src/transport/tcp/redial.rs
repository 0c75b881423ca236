//! What a rank does when its dial to a peer ended without a connection: which of the peer's
//! addresses to dial next, when, and when to give up with an error naming the peer.
//!
//! How the dial ended says who answered. A wrong challenge: what listens at that address is
//! no rank of this job, so the other addresses are tried and that one never again. Dropped
//! before any challenge: the peer may be crowded by strangers' connections (it evicts those
//! that have not yet said their hello), or the address may be someone else's; so the next
//! address is dialled, after a growing pause, until an overall deadline. Dropped after a
//! right challenge: the peer knows the job's secret and closed on us anyway, which a few
//! times in a row is an error, unless it said it was crowded (strangers' hellos, which hold no
//! secret, can crowd it after its challenge): then again after a growing pause, until the
//! deadline. No I/O here: the transport dials and keeps the clock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How many times in a row a peer may drop our dial after it challenged us (so it knows the
/// job's secret) although we answered promptly, before that is an error rather than bad luck.
pub(super) const MAX_DROPPED_DIALS: u32 = 3;
/// The first pause before dialling again a peer that dropped our dial before its challenge;
/// it doubles with each drop in a row, up to `LONGEST_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

/// How a dial in the handshake ended without a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum DialEnd {
    /// Closed (or reset) before its challenge came whole.
    DroppedBeforeChallenge,
    /// Closed after a right challenge; `late`: our proof went out after the peer's deadline
    /// (we were busy outside the library), which is no fault of either side.
    DroppedAfterChallenge { late: bool },
    /// Its challenge was wrong: what answers there does not know the job's secret.
    Impostor(String),
    /// Said nothing past the handshake deadline while the peer has other addresses to try.
    Silent,
    /// The peer challenged us and then told us it evicted our dial from too many connections
    /// in the handshake at once (strangers' hellos can crowd it after its challenge).
    Crowded,
}

/// One peer's dials so far.
#[derive(Debug, Default)]
pub(super) struct Redial {
    /// Index into the peer's addresses of the one to dial next.
    pub next: usize,
    /// Addresses whose challenge proved them no rank of this job, with why: never dialled again.
    impostors: Vec<(usize, String)>,
    /// Dials the peer dropped in a row after challenging us.
    dropped_after_challenge: u32,
    /// Dials dropped before a challenge in the present series, and when the series began.
    dropped_before_challenge: u32,
    crowded_since: Option<Instant>,
    /// Since when, and with what pause next, the peer has told us it was crowded after its
    /// challenge: a series that only a verdict ends (each of its dials was challenged).
    crowded_after_challenge: Option<(Instant, Duration)>,
    /// No dial before this; and the pause after the next drop.
    not_before: Option<Instant>,
    pause: Duration,
}

impl Redial {
    /// Whether a dial may go out now (not pausing after a drop).
    pub fn may_dial(&self) -> bool {
        self.not_before.is_none_or(|t| Instant::now() >= t)
    }

    /// Whether the address at `at` answered as no rank of this job before.
    pub fn is_impostor(&self, at: usize) -> bool {
        self.impostors.iter().any(|&(i, _)| i == at)
    }

    /// A right challenge came: a rank of this job answers, and was not too crowded to.
    pub fn challenged(&mut self) {
        self.dropped_before_challenge = 0;
        self.crowded_since = None;
        self.not_before = None;
        self.pause = Duration::ZERO;
    }

    /// The peer gave its verdict (took our dial, or awaits its own): the dials are over.
    pub fn answered(&mut self) {
        self.challenged();
        self.dropped_after_challenge = 0;
        self.crowded_after_challenge = None;
    }

    /// Takes a dial to `addrs[at]` that ended as `end` into account; `Err` gives up, saying
    /// why, of the peer as "it" (`PmlError::Transport` names it once, as its job numbers it:
    /// over a spawn's bridge, its rank in the bridge would mislead). `deadline` bounds a
    /// series of drops before any challenge.
    pub fn ended(
        &mut self,
        addrs: &[SocketAddr],
        at: usize,
        end: DialEnd,
        deadline: Duration,
    ) -> Result<(), String> {
        match end {
            DialEnd::Impostor(why) => {
                self.impostors.push((at, why));
                if self.impostors.len() == addrs.len() {
                    return Err(self.no_rank_answers(addrs));
                }
                self.next = self.after(at, addrs.len());
            }
            DialEnd::Silent => self.next = self.after(at, addrs.len()),
            DialEnd::Crowded => {
                let now = Instant::now();
                let (since, pause) = self
                    .crowded_after_challenge
                    .get_or_insert((now, Duration::ZERO));
                if now.duration_since(*since) > deadline {
                    return Err(format!(
                        "it challenged our connections at {} and then turned them away, \
                         crowded by other connections in the handshake, for {:.0} s (is it \
                         flooded by connections that are not the job's?)",
                        addrs[at],
                        now.duration_since(*since).as_secs_f64()
                    ));
                }
                *pause = (*pause * 2).clamp(FIRST_PAUSE, LONGEST_PAUSE);
                self.not_before = Some(now + *pause);
                // It knows the secret: the same address again, after the pause.
                self.next = at;
            }
            DialEnd::DroppedAfterChallenge { late } => {
                if !late {
                    self.dropped_after_challenge += 1;
                }
                if self.dropped_after_challenge >= MAX_DROPPED_DIALS {
                    return Err(format!(
                        "it closed our connection at {} after challenging us \
                         {MAX_DROPPED_DIALS} times in a row, although we answered at once \
                         (is it crowded by connections that are not the job's?)",
                        addrs[at]
                    ));
                }
                // It knows the secret: the same address again, at once.
                self.next = at;
            }
            DialEnd::DroppedBeforeChallenge => {
                let now = Instant::now();
                let since = *self.crowded_since.get_or_insert(now);
                self.dropped_before_challenge += 1;
                if now.duration_since(since) > deadline {
                    let tried: Vec<String> = (0..addrs.len())
                        .filter(|&i| !self.is_impostor(i))
                        .map(|i| addrs[i].to_string())
                        .collect();
                    return Err(format!(
                        "it closed our connections at {} before challenging us, {} times in \
                         {:.0} s (is it crowded by connections that are not the job's, or does \
                         something else listen there?){}",
                        tried.join(", "),
                        self.dropped_before_challenge,
                        now.duration_since(since).as_secs_f64(),
                        self.impostor_note()
                    ));
                }
                self.pause = (self.pause * 2).clamp(FIRST_PAUSE, LONGEST_PAUSE);
                self.not_before = Some(now + self.pause);
                self.next = self.after(at, addrs.len());
            }
        }
        Ok(())
    }

    /// The address after `at` that is not an impostor's (`at` itself if it is the only one).
    fn after(&self, at: usize, len: usize) -> usize {
        (1..=len)
            .map(|k| (at + k) % len)
            .find(|&i| !self.is_impostor(i))
            .unwrap_or(at)
    }

    fn no_rank_answers(&self, addrs: &[SocketAddr]) -> String {
        let each: Vec<String> = self
            .impostors
            .iter()
            .map(|(i, why)| {
                // A rank of its job or the other side of a spawn's bridge: either way, one
                // that proves the secret shared with it.
                format!(
                    "what answers at {}, its address, does not know the secret we share with \
                     it: {why}",
                    addrs[*i]
                )
            })
            .collect();
        each.join("; ")
    }

    /// What the addresses found to be no rank of this job said, for another error.
    pub fn impostor_note(&self) -> String {
        self.impostors
            .iter()
            .map(|(_, why)| format!("; {why}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    fn addrs(n: u16) -> Vec<SocketAddr> {
        (0..n)
            .map(|i| SocketAddr::from(([127, 0, 0, 1 + i as u8], 4000)))
            .collect()
    }

    #[test]
    fn an_impostor_address_is_skipped_and_all_impostors_is_an_error() {
        let a = addrs(3);
        let mut r = Redial::default();
        r.ended(&a, 0, DialEnd::Impostor("wrong proof".into()), LONG)
            .unwrap();
        assert_eq!(r.next, 1);
        r.ended(&a, 1, DialEnd::DroppedBeforeChallenge, LONG)
            .unwrap();
        // Round the addresses, past the impostor at 0.
        assert_eq!(r.next, 2);
        r.ended(&a, 2, DialEnd::DroppedBeforeChallenge, LONG)
            .unwrap();
        assert_eq!(r.next, 1);
        r.ended(&a, 1, DialEnd::Impostor("x".into()), LONG).unwrap();
        let e = r
            .ended(&a, 2, DialEnd::Impostor("y".into()), LONG)
            .unwrap_err();
        assert!(
            e.contains(
                "what answers at 127.0.0.1:4000, its address, does not know the secret we \
                 share with it: wrong proof"
            ) && e.contains("127.0.0.3:4000"),
            "{e}"
        );
    }

    #[test]
    fn drops_before_a_challenge_pause_and_count_only_against_the_deadline() {
        let a = addrs(1);
        let mut r = Redial::default();
        for _ in 0..10 {
            r.ended(&a, 0, DialEnd::DroppedBeforeChallenge, LONG)
                .unwrap();
            assert!(r.not_before.is_some(), "no pause after a drop");
        }
        assert_eq!(r.pause, LONGEST_PAUSE);
        r.challenged();
        assert!(r.may_dial());
        let e = r
            .ended(&a, 0, DialEnd::DroppedBeforeChallenge, Duration::ZERO)
            .and_then(|()| {
                std::thread::sleep(Duration::from_millis(2));
                r.ended(&a, 0, DialEnd::DroppedBeforeChallenge, Duration::ZERO)
            })
            .unwrap_err();
        assert!(
            e.contains("it closed our connections at 127.0.0.1:4000 before challenging us"),
            "{e}"
        );
    }

    #[test]
    fn crowded_after_a_challenge_pauses_and_counts_only_against_the_deadline() {
        let a = addrs(2);
        let mut r = Redial::default();
        for _ in 0..10 {
            r.ended(&a, 1, DialEnd::Crowded, LONG).unwrap();
            assert_eq!(
                r.next, 1,
                "a peer that knows the secret is dialled at the same address"
            );
            assert!(!r.may_dial(), "no pause after a crowded dial");
            // Each crowded dial was challenged first: that does not end the series.
            r.challenged();
        }
        assert_eq!(r.crowded_after_challenge.unwrap().1, LONGEST_PAUSE);
        std::thread::sleep(Duration::from_millis(2));
        let e = r
            .ended(&a, 1, DialEnd::Crowded, Duration::from_millis(1))
            .unwrap_err();
        assert!(
            e.contains("it challenged our connections at 127.0.0.2:4000 and then turned them away"),
            "{e}"
        );
        r.answered();
        r.ended(&a, 1, DialEnd::Crowded, Duration::ZERO).unwrap();
    }

    #[test]
    fn drops_after_a_challenge_count_unless_late() {
        let a = addrs(2);
        let mut r = Redial::default();
        let dropped = DialEnd::DroppedAfterChallenge { late: false };
        r.ended(&a, 1, dropped.clone(), LONG).unwrap();
        assert_eq!(r.next, 1);
        r.ended(&a, 1, DialEnd::DroppedAfterChallenge { late: true }, LONG)
            .unwrap();
        r.ended(&a, 1, dropped.clone(), LONG).unwrap();
        let e = r.ended(&a, 1, dropped.clone(), LONG).unwrap_err();
        assert!(
            e.contains("it closed our connection at 127.0.0.2:4000 after challenging us 3 times"),
            "{e}"
        );
        r.answered();
        r.ended(&a, 1, dropped, LONG).unwrap();
    }
}
