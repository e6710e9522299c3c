//! Pings (spec §3.1.3): round-trip samples and keepalive.
//!
//! A ping is a one-byte id outside the transfer queue; the peer echoes it at its next
//! flush. The last [`REMEMBERED`] pings are remembered with their send times, and the echo
//! of any of them yields one sample: while the RTT estimate is still too short (it starts
//! at 200 ms; a satellite link has 600), several pings are out at once and each echo
//! still counts. An id is forgotten once echoed, so a duplicated echo yields nothing.
//! Pings go out at most once per smoothed RTT while frames are in flight, and once per
//! ping interval otherwise, which keeps an idle connection alive.

use std::time::Duration;

use super::acks::Cadence;
use crate::time::Time;

/// How many recent pings can still be answered.
pub(crate) const REMEMBERED: usize = 8;

#[derive(Debug)]
pub(crate) struct Ping {
    next_id: u8,
    /// The recent pings, ping `id` in slot `id % REMEMBERED`: its id and when it was sent
    /// (none once answered). Ids and times apart, as a tuple of the two would pad each id
    /// to 8 bytes.
    recent_ids: [u8; REMEMBERED],
    recent_at: [Option<Time>; REMEMBERED],
    last_sent: Option<Time>,
    echo: Option<u8>,
    /// When the echo owed was first owed.
    echo_since: Option<Time>,
    /// The ping came with a frame: its echo waits with that frame's acknowledgement for a
    /// datagram to ride on, and the delay the acknowledgement reports covers it too. A
    /// ping alone (an idle peer's keepalive) is echoed at once, so its sample is exact.
    echo_waits: bool,
}

impl Default for Ping {
    fn default() -> Self {
        Self {
            next_id: 0,
            recent_ids: [0; REMEMBERED],
            recent_at: [None; REMEMBERED],
            last_sent: None,
            echo: None,
            echo_since: None,
            echo_waits: false,
        }
    }
}

impl Ping {
    /// When the next ping is due, given the period between pings.
    pub(crate) fn deadline(&self, period: Duration) -> Option<Time> {
        self.last_sent.map(|t| t + period)
    }

    pub(crate) fn due(&self, now: Time, period: Duration) -> bool {
        self.deadline(period).is_none_or(|t| now >= t)
    }

    /// Takes a new ping id to send now.
    pub(crate) fn send(&mut self, now: Time) -> u8 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let slot = usize::from(id) % REMEMBERED;
        if let (Some(i), Some(at)) = (self.recent_ids.get_mut(slot), self.recent_at.get_mut(slot)) {
            *i = id;
            *at = Some(now);
        }
        self.last_sent = Some(now);
        id
    }

    /// The peer pinged us at `now`, with a frame or alone.
    pub(crate) fn on_ping(&mut self, id: u8, now: Time, with_frame: bool) {
        self.echo_waits = if self.echo.is_some() { self.echo_waits && with_frame } else { with_frame };
        self.echo = Some(id);
        self.echo_since.get_or_insert(now);
    }

    /// When the echo owed stops waiting for a ride, given this side's `cadence`.
    pub(crate) fn echo_deadline(&self, cadence: &Cadence) -> Option<Time> {
        let since = self.echo_since.filter(|_| self.echo.is_some())?;
        // An echo waits for this side's frames only: one that waited for the peer's next
        // frame would go with an acknowledgement whose delay field times that frame's
        // hold, not the ping's, and its sample would be a frame's gap too long.
        Some(if self.echo_waits { cadence.ride_by(since, None) } else { since })
    }

    /// The echo to send, if one is owed.
    pub(crate) fn echo(&self) -> Option<u8> {
        self.echo
    }

    pub(crate) fn echo_sent(&mut self) {
        self.echo = None;
        self.echo_since = None;
        self.echo_waits = false;
    }

    /// The peer echoed `id`: the round-trip sample, if it echoes a remembered ping.
    pub(crate) fn on_echo(&mut self, now: Time, id: u8) -> Option<Duration> {
        let slot = usize::from(id) % REMEMBERED;
        if self.recent_ids.get(slot) != Some(&id) {
            return None;
        }
        let at = self.recent_at.get_mut(slot)?.take()?;
        Some(now.saturating_duration_since(at))
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn every_remembered_ping_yields_one_sample() {
        let t = Time::ZERO;
        let ms = Duration::from_millis(1);
        let mut p = Ping::default();
        assert!(p.due(t, 100 * ms));
        let a = p.send(t);
        assert!(!p.due(t + 50 * ms, 100 * ms));
        let b = p.send(t + 100 * ms);
        // Echoes longer than the ping period still count, in any order.
        assert_eq!(p.on_echo(t + 130 * ms, b), Some(30 * ms));
        assert_eq!(p.on_echo(t + 620 * ms, a), Some(620 * ms));
        assert_eq!(p.on_echo(t + 640 * ms, b), None, "one sample per ping");
        // A ping forgotten after REMEMBERED newer ones yields nothing.
        let old = p.send(t);
        for i in 0..REMEMBERED as u32 {
            p.send(t + i * ms);
        }
        assert_eq!(p.on_echo(t + 700 * ms, old), None);
        // This side sends a frame every 10 ms.
        let mut cadence = Cadence::default();
        for i in 0..4 {
            cadence.on_frame_sent(t - (40 - 10 * i) * ms);
        }
        p.on_ping(7, t, false);
        assert_eq!(p.echo(), Some(7));
        assert_eq!(p.echo_deadline(&cadence), Some(t), "a ping alone is echoed at once");
        p.echo_sent();
        assert_eq!(p.echo(), None);
        assert_eq!(p.echo_deadline(&cadence), None);
        p.on_ping(8, t, true);
        let waits = p.echo_deadline(&cadence).unwrap();
        assert!(waits > t && waits <= t + 25 * ms / 2, "a ping with a frame waits with its ack: {:?}", waits - t);
        p.on_ping(9, t + ms, false);
        assert_eq!(p.echo_deadline(&cadence), Some(t), "a later ping alone hurries it");
    }
}
