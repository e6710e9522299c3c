//! A host's loop running late: the "busy process" fault. While a host is stalled it is
//! neither stepped nor handed datagrams; what arrives waits in its backlog (as in a
//! socket's receive buffer), and when the stall ends the host handles the whole backlog
//! at once, then steps, as a game loop does after a long frame or a collector's pause.
//!
//! Stalls are set by hand ([`Network::stall`](super::Network::stall)) or drawn at random
//! ([`Stalls`]) from a generator of the host's own: the network's generator (the links'
//! loss, jitter and the rest) draws nothing for them.

use std::collections::VecDeque;
use std::time::Duration;

use web_time::Instant;

use rand_core::Rng;
use rand_pcg::Pcg32;

use super::Arrival;

/// Random stalls of one host's loop: after a gap drawn uniformly from `gap`, the loop
/// is late by a time drawn uniformly from `late`, again and again
/// ([`Network::set_stalls`](super::Network::set_stalls)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stalls {
    /// Shortest and longest time from the end of one stall to the start of the next.
    pub gap: (Duration, Duration),
    /// Shortest and longest stall.
    pub late: (Duration, Duration),
}

impl Stalls {
    /// Stalls of `late.0` to `late.1`, starting `gap.0` to `gap.1` after the previous
    /// one ended (each bound inclusive; a pair given high to low is read low to high).
    pub fn new(gap: (Duration, Duration), late: (Duration, Duration)) -> Self {
        let order = |(a, b): (Duration, Duration)| (a.min(b), a.max(b));
        Self { gap: order(gap), late: order(late) }
    }

    /// A busy game server or a collector's pauses: 5 to 20 ms late, about every 200 ms
    /// (150 to 250 ms apart).
    pub fn busy() -> Self {
        Self::new((Duration::from_millis(150), Duration::from_millis(250)), (MS * 5, MS * 20))
    }
}

const MS: Duration = Duration::from_millis(1);

/// A duration drawn uniformly from `lo..=hi`, to the microsecond.
fn draw(rng: &mut Pcg32, (lo, hi): (Duration, Duration)) -> Duration {
    let span = (hi - lo).as_micros() as u64;
    lo + Duration::from_micros(if span == 0 { 0 } else { rng.next_u64() % (span + 1) })
}

/// One host's stalls: the one under way, the random ones to come, and the backlog.
#[derive(Debug, Default)]
pub(crate) struct StallState {
    /// The loop is late until then.
    until: Option<Instant>,
    /// Random stalls, their generator and when the next one starts.
    random: Option<(Stalls, Pcg32, Instant)>,
    /// Datagrams that arrived during the stall, oldest first.
    pub(crate) backlog: VecDeque<Arrival>,
}

impl StallState {
    /// The loop is late from `now` for `late` (a stall under way is extended, never
    /// shortened).
    pub(crate) fn stall(&mut self, now: Instant, late: Duration) {
        let end = now + late;
        self.until = Some(self.until.map_or(end, |u| u.max(end)));
    }

    /// Random stalls from `now` on, drawn from `rng` (none with `None`).
    pub(crate) fn set_random(&mut self, now: Instant, stalls: Option<Stalls>, mut rng: Pcg32) {
        self.random = stalls.map(|s| {
            let first = now + draw(&mut rng, s.gap);
            (s, rng, first)
        });
    }

    /// Starts the random stalls due by `now` (one that began and ended unseen changed
    /// nothing: the host had nothing to do during it). Returns whether the host is stalled
    /// at `now`.
    pub(crate) fn stalled(&mut self, now: Instant) -> bool {
        while let Some((s, rng, start)) = &mut self.random {
            if *start > now {
                break;
            }
            let end = *start + draw(rng, s.late);
            *start = end + draw(rng, s.gap);
            if end > now {
                self.until = Some(self.until.map_or(end, |u| u.max(end)));
            }
        }
        self.until.is_some_and(|u| u > now)
    }

    /// When the stall under way ends, if the host is stalled after `now`.
    pub(crate) fn resumes(&self, now: Instant) -> Option<Instant> {
        self.until.filter(|&u| u > now)
    }

    /// Whether a stall ended by `now` left a backlog to hand over.
    pub(crate) fn resumed(&mut self, now: Instant) -> bool {
        if self.until.is_some_and(|u| u <= now) {
            self.until = None;
        }
        self.until.is_none() && !self.backlog.is_empty()
    }
}
