//! Address change: the remote's datagrams arriving from another address than its own.
//!
//! A datagram of the connection (verified with its keys before anything here sees it)
//! from a new address starts a [`Probe`] there: a path challenge the address must echo.
//! The connection keeps sending to its validated address meanwhile; only the challenge
//! goes to the new one, and only while the bytes sent there stay within the bytes
//! received from there. The echo, arriving from the probed address, moves the connection.
//!
//! Invariants: `sent <= received` for the probe's address at all times (nothing else
//! leaves for it before it is validated); a probe moves the connection only on the echo
//! of its own challenge from its own address, so a datagram from an address that does not
//! receive (a late one from an address the remote left, a replay from a third address)
//! never moves it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::time::Time;

/// A path validation under way towards `addr`.
#[derive(Debug)]
pub(crate) struct Probe {
    /// The address being validated.
    pub(crate) addr: SocketAddr,
    /// The value it must echo.
    pub(crate) challenge: u64,
    /// Bytes received from `addr` since the probe began.
    pub(crate) received: u64,
    /// Bytes sent to `addr` since the probe began.
    pub(crate) sent: u64,
    /// When the latest challenge went, if one did.
    pub(crate) last_sent: Option<Time>,
}

impl Probe {
    pub(crate) fn new(addr: SocketAddr, challenge: u64) -> Self {
        Self { addr, challenge, received: 0, sent: 0, last_sent: None }
    }

    /// Whether a challenge of `size` bytes may go now: within what `addr` sent, and the
    /// first one or `resend` after the latest (a lost challenge is sent again as the
    /// remote's datagrams keep arriving from there).
    pub(crate) fn may_challenge(&self, now: Time, size: usize, resend: Duration) -> bool {
        let room = self.sent + size as u64 <= self.received;
        room && self.last_sent.is_none_or(|t| now.saturating_duration_since(t) >= resend)
    }

    /// Records a challenge of `size` bytes sent at `now`.
    pub(crate) fn challenged(&mut self, now: Time, size: usize) {
        self.sent += size as u64;
        self.last_sent = Some(now);
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn a_challenge_waits_for_the_bytes_it_may_cost_and_for_its_resend_time() {
        let addr = "10.0.0.1:1".parse().unwrap();
        let mut p = Probe::new(addr, 7);
        let t0 = Time::from_nanos(0);
        assert!(!p.may_challenge(t0, 13, Duration::from_millis(100)), "nothing received yet");
        p.received = 9;
        assert!(!p.may_challenge(t0, 13, Duration::from_millis(100)), "9 bytes do not pay for 13");
        p.received = 13;
        assert!(p.may_challenge(t0, 13, Duration::from_millis(100)));
        p.challenged(t0, 13);
        p.received = 100;
        assert!(!p.may_challenge(t0 + Duration::from_millis(50), 13, Duration::from_millis(100)));
        assert!(p.may_challenge(t0 + Duration::from_millis(100), 13, Duration::from_millis(100)));
        p.challenged(t0, 13);
        assert!(p.sent <= p.received);
    }
}
