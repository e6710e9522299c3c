//! Address change: the remote's datagrams arriving from another address than its own.
//!
//! Two ways lead a connection to a new address, both ending in proof that the address
//! receives:
//!
//! - A datagram of the connection (verified with its keys before anything here sees it)
//!   from a new address of one of the host's peers' IPs starts a [`Probe`] there: a path
//!   challenge the address must echo. The echo, arriving from the probed address, moves
//!   the connection. Meanwhile the connection keeps sending to its validated address,
//!   unless the remote's newest frames arrive from the probed one (a NAT rebound its
//!   mapping, and the old address likely receives nothing now): then its datagrams are
//!   *routed* to the probed address, as many bytes as came from there (less a challenge's
//!   room), and what does not fit waits for more. A routed probe left unanswered for two
//!   resend timeouts or replaced by another address, or the newest frames arriving from
//!   the validated address again, ends the routing, and no probe routes for [`ROUTE_PAUSE`] after: a copy raced from
//!   another address by an on-path attacker holds the connection's data that long once.
//! - A datagram from an IP the host knows no peer of gets an *unknown path* answer with a
//!   [`PathCookies`] cookie bound to that address and the time; the remote answers a
//!   *moved* naming the connection and echoing the cookie, keyed with the connection. The
//!   echo proves the address receives, so the moved moves the connection at once.
//!
//! Invariants: `sent <= received` for the probe's address at all times (the challenge,
//! the echoes and the routed datagrams are all counted); a probe moves the connection only on the echo
//! of its own challenge from its own address, and a moved only with a cookie issued to the
//! address it came from after the connection's latest move, so a datagram from an address
//! that does not receive (a late one from an address the remote left, a replay from a
//! third address) never moves it.

use std::hash::Hasher as _;
use std::net::SocketAddr;
use std::time::Duration;

use siphasher::sip::SipHasher24;

use crate::time::Time;
use crate::wire::{PATH_COOKIE_LEN, PathCookie};

/// How long a path cookie is accepted after it was issued: far beyond any round trip a
/// game plays over, short enough that an old cookie seen on the path is soon useless.
pub(crate) const PATH_COOKIE_LIFETIME: Duration = Duration::from_secs(10);

/// How long no probe routes the connection's datagrams after a routed one ended
/// unvalidated: a remote that truly moved is still validated meanwhile, only without
/// data before its echo.
pub(crate) const ROUTE_PAUSE: Duration = Duration::from_secs(10);

/// A peer's address-change state (boxed in the peer: rare, and the slot's size is every
/// active peer's cost).
#[derive(Debug, Default)]
pub(crate) struct Path {
    /// A new address of the remote being validated.
    pub(crate) probe: Option<Probe>,
    /// When the connection last moved: a moved whose cookie was issued before is stale.
    pub(crate) moved_at: Option<Time>,
    /// When this side last answered an unknown path with a moved (at most one a round
    /// trip: each costs more bytes than the unknown path that asked for it).
    pub(crate) moved_sent: Option<Time>,
    /// Until when no probe is routed to (see the module docs).
    pub(crate) route_paused_until: Option<Time>,
}

impl Path {
    /// The probe the connection's datagrams go to, if they go to one.
    pub(crate) fn routed(&self) -> Option<&Probe> {
        self.probe.as_ref().filter(|p| p.routed.is_some())
    }

    /// Whether a probe may start routing at `now`.
    pub(crate) fn may_route(&self, now: Time) -> bool {
        self.route_paused_until.is_none_or(|t| now >= t)
    }

    /// Ends the routing to the probe, if there was one (which stays, to be validated), and
    /// pauses routing. Returns whether the connection's datagrams went to the probe.
    pub(crate) fn unroute(&mut self, now: Time) -> bool {
        let Some(p) = self.probe.as_mut().filter(|p| p.routed.is_some()) else { return false };
        p.routed = None;
        self.route_paused_until = Some(now + ROUTE_PAUSE);
        true
    }
}

/// The host's path cookies: a 32-bit SipHash-2-4 MAC, keyed with the host's secret, over
/// the address and the time of issue (milliseconds), sent with that time. Stateless: the
/// host keeps nothing per address it answers.
#[derive(Clone)]
pub(crate) struct PathCookies {
    keys: (u64, u64),
}

impl core::fmt::Debug for PathCookies {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("PathCookies(..)")
    }
}

impl PathCookies {
    pub(crate) fn new(keys: (u64, u64)) -> Self {
        Self { keys }
    }

    fn mac(&self, addr: SocketAddr, issued: u32) -> u32 {
        let mut h = SipHasher24::new_with_keys(self.keys.0, self.keys.1);
        // Apart from the handshake cookies made with the same secret.
        h.write(b"porous path");
        match addr {
            SocketAddr::V4(a) => h.write(&a.ip().octets()),
            SocketAddr::V6(a) => h.write(&a.ip().octets()),
        }
        h.write_u16(addr.port());
        h.write_u32(issued);
        h.finish() as u32
    }

    /// The cookie for `addr` at `now`.
    pub(crate) fn issue(&self, now: Time, addr: SocketAddr) -> PathCookie {
        let issued = millis(now);
        let mut c = [0; PATH_COOKIE_LEN];
        c[..4].copy_from_slice(&issued.to_le_bytes());
        c[4..].copy_from_slice(&self.mac(addr, issued).to_le_bytes());
        PathCookie(c)
    }

    /// When `cookie` was issued, if it was issued by this host to `addr` within
    /// [`PATH_COOKIE_LIFETIME`] of `now`.
    pub(crate) fn verify(&self, now: Time, addr: SocketAddr, cookie: &PathCookie) -> Option<Time> {
        let [i0, i1, i2, i3, m0, m1, m2, m3] = cookie.0;
        let issued = u32::from_le_bytes([i0, i1, i2, i3]);
        let mac = u32::from_le_bytes([m0, m1, m2, m3]);
        // Compared without branching on the MAC's bits.
        if self.mac(addr, issued) ^ mac != 0 {
            return None;
        }
        let age = Duration::from_millis(u64::from(millis(now).wrapping_sub(issued)));
        (age <= PATH_COOKIE_LIFETIME && age <= now.saturating_duration_since(Time::default())).then(|| now - age)
    }
}

/// `t` in whole milliseconds, wrapping every 49 days (cookies live seconds).
fn millis(t: Time) -> u32 {
    (t.nanos().max(0) / 1_000_000) as u32
}

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
    /// Since when the connection's datagrams go to `addr` ahead of its echo.
    pub(crate) routed: Option<Time>,
}

impl Probe {
    pub(crate) fn new(addr: SocketAddr, challenge: u64) -> Self {
        Self { addr, challenge, received: 0, sent: 0, last_sent: None, routed: None }
    }

    /// Bytes the connection's datagrams may still take to `addr`: what came from there,
    /// less what went and the room of a `challenge` (a resend must still fit).
    pub(crate) fn allowance(&self, challenge: usize) -> u64 {
        self.received.saturating_sub(self.sent + challenge as u64)
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
    fn path_cookies_bind_address_and_time_and_expire() {
        let cookies = PathCookies::new((1, 2));
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let t = Time::from_nanos(0) + Duration::from_secs(100);
        let c = cookies.issue(t, a);
        assert_eq!(cookies.verify(t + Duration::from_secs(3), a, &c), Some(t));
        assert_eq!(cookies.verify(t + PATH_COOKIE_LIFETIME, a, &c), Some(t));
        assert_eq!(cookies.verify(t + PATH_COOKIE_LIFETIME + Duration::from_millis(1), a, &c), None, "expired");
        assert_eq!(cookies.verify(t, "10.0.0.1:5001".parse().unwrap(), &c), None, "another port");
        assert_eq!(cookies.verify(t, "10.0.0.2:5000".parse().unwrap(), &c), None, "another address");
        assert_eq!(PathCookies::new((3, 4)).verify(t, a, &c), None, "another host's secret");
        assert_eq!(cookies.verify(t - Duration::from_secs(1), a, &c), None, "issued in the future");
        let mut forged = c;
        forged.0[0] ^= 1;
        assert_eq!(cookies.verify(t, a, &forged), None, "a changed time fails the MAC");
        forged = c;
        forged.0[7] ^= 1;
        assert_eq!(cookies.verify(t, a, &forged), None);
    }

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

    #[test]
    fn a_routing_spends_what_came_less_a_challenge_and_its_end_pauses_routing() {
        let mut p = Probe::new("10.0.0.1:1".parse().unwrap(), 7);
        (p.received, p.sent) = (100, 13);
        assert_eq!(p.allowance(13), 74);
        p.sent = 95;
        assert_eq!(p.allowance(13), 0, "never below nothing");
        let t0 = Time::from_nanos(0) + Duration::from_secs(1);
        let mut path = Path { probe: Some(p), ..Path::default() };
        assert!(path.routed().is_none() && !path.unroute(t0), "nothing routed, nothing paused");
        assert!(path.may_route(t0));
        if let Some(p) = path.probe.as_mut() {
            p.routed = Some(t0);
        }
        assert!(path.routed().is_some());
        assert!(path.unroute(t0), "it was routed");
        assert!(path.routed().is_none() && path.probe.is_some(), "the probe stays, to be validated");
        assert!(!path.may_route(t0 + ROUTE_PAUSE - Duration::from_millis(1)));
        assert!(path.may_route(t0 + ROUTE_PAUSE));
    }
}
