//! The spec's controller (§3.1.4, §3.1.5): additive increase, multiplicative decrease,
//! loosely CCID 2 counted in bytes. Selected with `CongestionControl::Aimd`; kept exactly
//! as the spec writes it, unpaced.
//!
//! - slow start while `cwnd <= ssthresh`: `+MTU` per acknowledged frame, capped at
//!   `W_max = B x RTT` (equations (8)-(10));
//! - congestion avoidance otherwise: `+MTU` once per window of bytes acknowledged without a
//!   drop;
//! - on a drop, `cwnd = max(cwnd / 2, MTU)` then `ssthresh = max(cwnd, 2 MTU)` ((11), (12)),
//!   at most once per RTT: the drop arms a timer of one smoothed RTT during which further
//!   drops count as the same congestion event;
//! - reset ((13)-(15)): when drops keep coming for `rho x RTO` with no acknowledgement in
//!   between, `ssthresh = max(cwnd / 2, 2 MTU)` and `cwnd = MTU`, with rho = 8.

use crate::time::Time;

use super::Path;
use crate::stats::{CongestionMode, CongestionStats};

/// rho, the reset interval in RTOs (spec §3.1.5).
pub(crate) const RESET_RTOS: u32 = 8;

/// The window and threshold before a reaction to loss ([`Aimd::reaction`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reaction {
    cwnd: usize,
    ssthresh: usize,
}

/// The spec's additive-increase, multiplicative-decrease controller.
#[derive(Clone, Debug)]
pub(crate) struct Aimd {
    mtu: usize,
    /// Negotiated bandwidth B in bytes per second; 0 for none.
    bandwidth: u64,
    /// Ceiling when there is no bandwidth limit: the transfer window in bytes.
    ceiling: usize,
    cwnd: usize,
    ssthresh: usize,
    acked_in_window: usize,
    backoff_until: Option<Time>,
    /// Time of the first drop since the last acknowledgement (or the last reset).
    first_unacked_drop: Option<Time>,
    resets: u64,
}

impl Aimd {
    pub(crate) fn new(mtu: usize, initial_window: usize, bandwidth: u64, ceiling: usize) -> Self {
        Self {
            mtu,
            bandwidth,
            ceiling,
            cwnd: initial_window.max(mtu),
            ssthresh: usize::MAX,
            acked_in_window: 0,
            backoff_until: None,
            first_unacked_drop: None,
            resets: 0,
        }
    }

    /// Equation (10), W_max = B x RTT, never below two datagrams, and the transfer window
    /// when there is no bandwidth limit.
    fn max_window(&self, path: Path) -> usize {
        if self.bandwidth == 0 {
            return self.ceiling;
        }
        let bytes = (u128::from(self.bandwidth) * path.srtt.as_micros() / 1_000_000).min(self.ceiling as u128);
        (bytes as usize).max(2 * self.mtu)
    }

    /// Number of congestion window resets so far.
    pub(crate) fn resets(&self) -> u64 {
        self.resets
    }
}

impl Aimd {
    pub(crate) fn window(&self) -> usize {
        self.cwnd
    }

    pub(crate) fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    pub(crate) fn stats(&self) -> CongestionStats {
        let mode = if self.cwnd <= self.ssthresh { CongestionMode::SlowStart } else { CongestionMode::Avoidance };
        CongestionStats { mode, ..CongestionStats::default() }
    }

    /// A frame of `bytes` bytes was acknowledged.
    pub(crate) fn on_frame_acked(&mut self, _now: Time, bytes: usize, path: Path) {
        self.first_unacked_drop = None;
        let max = self.max_window(path);
        if self.cwnd <= self.ssthresh {
            // Slow start, (8) and (9).
            self.cwnd = (self.cwnd + self.mtu).min(max);
        } else {
            self.acked_in_window += bytes;
            if self.acked_in_window >= self.cwnd {
                self.acked_in_window -= self.cwnd;
                self.cwnd = (self.cwnd + self.mtu).min(max);
            }
        }
    }

    pub(crate) fn reaction(&self) -> Reaction {
        Reaction { cwnd: self.cwnd, ssthresh: self.ssthresh }
    }

    /// Every drop since `before` proved spurious: the window and the threshold come back
    /// (never lower than what they have grown to since), as Eifel and Linux's undo do,
    /// and the drops no longer count towards a reset.
    pub(crate) fn undo(&mut self, before: Reaction) {
        self.cwnd = self.cwnd.max(before.cwnd);
        self.ssthresh = self.ssthresh.max(before.ssthresh);
        self.backoff_until = None;
        self.first_unacked_drop = None;
    }

    /// A frame was considered dropped.
    pub(crate) fn on_drop(&mut self, now: Time, path: Path) {
        self.acked_in_window = 0;
        match self.first_unacked_drop {
            None => self.first_unacked_drop = Some(now),
            Some(first) if now.saturating_duration_since(first) >= path.rto * RESET_RTOS => {
                // (14) then (15).
                self.ssthresh = (self.cwnd / 2).max(2 * self.mtu);
                self.cwnd = self.mtu;
                self.first_unacked_drop = Some(now);
                self.backoff_until = Some(now + path.srtt);
                self.resets += 1;
                return;
            }
            Some(_) => {}
        }
        if self.backoff_until.is_some_and(|t| now < t) {
            return;
        }
        // (11) then (12), from the halved window.
        self.cwnd = (self.cwnd / 2).max(self.mtu);
        self.ssthresh = self.cwnd.max(2 * self.mtu);
        self.backoff_until = Some(now + path.srtt);
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use std::time::Duration;

    use super::*;

    const MTU: usize = 1000;
    const MS: Duration = Duration::from_millis(1);

    fn path() -> Path {
        Path { srtt: 100 * MS, rto: 300 * MS }
    }

    #[test]
    fn slow_start_adds_one_mtu_per_acked_frame_up_to_b_times_rtt() {
        let t = Time::ZERO;
        // B = 50 kB/s, RTT 100 ms: W_max = 5000 bytes.
        let mut c = Aimd::new(MTU, 2 * MTU, 50_000, usize::MAX);
        for expect in [3000, 4000, 5000, 5000] {
            c.on_frame_acked(t, 500, path());
            assert_eq!(c.window(), expect);
        }
    }

    #[test]
    fn avoidance_adds_one_mtu_per_window_acknowledged() {
        let t = Time::ZERO;
        let mut c = Aimd::new(MTU, 4 * MTU, 0, usize::MAX);
        c.on_drop(t, path()); // cwnd 2000, ssthresh 2000: still slow start (8)
        assert_eq!((c.window(), c.ssthresh()), (2000, 2000));
        c.on_frame_acked(t, 1000, path());
        assert_eq!(c.window(), 3000); // now above ssthresh: avoidance
        c.on_frame_acked(t, 1000, path());
        c.on_frame_acked(t, 1000, path());
        assert_eq!(c.window(), 3000, "2000 of a 3000-byte window acknowledged");
        c.on_frame_acked(t, 1000, path());
        assert_eq!(c.window(), 4000);
    }

    #[test]
    fn one_backoff_per_rtt() {
        let t = Time::ZERO;
        let mut c = Aimd::new(MTU, 16 * MTU, 0, usize::MAX);
        c.on_drop(t, path());
        assert_eq!((c.window(), c.ssthresh()), (8000, 8000));
        c.on_drop(t + 50 * MS, path());
        assert_eq!(c.window(), 8000, "a second drop within one RTT is the same event");
        c.on_drop(t + 100 * MS, path());
        assert_eq!(c.window(), 4000);
        // The floor is one MTU and ssthresh two.
        let mut d = Aimd::new(MTU, MTU, 0, usize::MAX);
        d.on_drop(t, path());
        assert_eq!((d.window(), d.ssthresh()), (MTU, 2 * MTU));
    }

    #[test]
    fn reset_after_rho_rtos_of_drops_without_an_ack() {
        let t = Time::ZERO;
        let mut c = Aimd::new(MTU, 16 * MTU, 0, usize::MAX);
        c.on_drop(t, path()); // 8000
        c.on_drop(t + 1000 * MS, path()); // 4000
        // 8 x 300 ms after the first unacknowledged drop:
        c.on_drop(t + 2400 * MS, path());
        assert_eq!((c.window(), c.ssthresh()), (MTU, 2000));
        assert_eq!(c.resets(), 1);
        // An acknowledgement clears the reset clock.
        let mut d = Aimd::new(MTU, 16 * MTU, 0, usize::MAX);
        d.on_drop(t, path());
        d.on_frame_acked(t + 2000 * MS, 100, path());
        d.on_drop(t + 2400 * MS, path());
        assert_eq!(d.resets(), 0);
        assert!(d.window() >= 4000);
    }

    #[test]
    fn no_bandwidth_limit_means_the_ceiling() {
        let t = Time::ZERO;
        let mut c = Aimd::new(MTU, MTU, 0, 64 * MTU);
        for _ in 0..100 {
            c.on_frame_acked(t, MTU, path());
        }
        assert_eq!(c.window(), 64 * MTU);
    }
}
