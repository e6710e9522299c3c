//! Pings (spec §3.1.3): round-trip samples and keepalive.
//!
//! A ping is a one-byte id outside the transfer queue; the peer echoes it at its next
//! flush. At most one ping is outstanding: a new one replaces an unanswered one, and only
//! the echo of the current one yields a sample, so a late echo never produces a short RTT.
//! Pings go out at most once per smoothed RTT while frames are in flight, and once per
//! ping interval otherwise, which keeps an idle connection alive.

use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(crate) struct Ping {
    next_id: u8,
    outstanding: Option<(u8, Instant)>,
    last_sent: Option<Instant>,
    echo: Option<u8>,
}

impl Ping {
    /// When the next ping is due, given the period between pings.
    pub(crate) fn deadline(&self, period: Duration) -> Option<Instant> {
        self.last_sent.map(|t| t + period)
    }

    pub(crate) fn due(&self, now: Instant, period: Duration) -> bool {
        self.deadline(period).is_none_or(|t| now >= t)
    }

    /// Takes a new ping id to send now.
    pub(crate) fn send(&mut self, now: Instant) -> u8 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.outstanding = Some((id, now));
        self.last_sent = Some(now);
        id
    }

    /// The peer pinged us.
    pub(crate) fn on_ping(&mut self, id: u8) {
        self.echo = Some(id);
    }

    /// The echo to send, if one is owed.
    pub(crate) fn echo(&self) -> Option<u8> {
        self.echo
    }

    pub(crate) fn echo_sent(&mut self) {
        self.echo = None;
    }

    /// The peer echoed `id`: the round-trip sample, if it echoes the current ping.
    pub(crate) fn on_echo(&mut self, now: Instant, id: u8) -> Option<Duration> {
        match self.outstanding {
            Some((current, at)) if current == id => {
                self.outstanding = None;
                Some(now.saturating_duration_since(at))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_ping_yields_a_sample_once() {
        let t = Instant::now();
        let ms = Duration::from_millis(1);
        let mut p = Ping::default();
        assert!(p.due(t, 100 * ms));
        let a = p.send(t);
        assert!(!p.due(t + 50 * ms, 100 * ms));
        let b = p.send(t + 100 * ms);
        assert_eq!(p.on_echo(t + 120 * ms, a), None, "a replaced ping's echo is ignored");
        assert_eq!(p.on_echo(t + 130 * ms, b), Some(30 * ms));
        assert_eq!(p.on_echo(t + 140 * ms, b), None, "one sample per ping");
        p.on_ping(7);
        assert_eq!(p.echo(), Some(7));
        p.echo_sent();
        assert_eq!(p.echo(), None);
    }
}
