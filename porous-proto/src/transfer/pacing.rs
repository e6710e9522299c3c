//! Pacing: spreading sends at the congestion controller's rate instead of sending a whole
//! window at once, in a core that has no clock and no timers of its own.
//!
//! A token bucket counted in bytes: it fills at the pacing rate as `now` advances and a
//! datagram may leave while it holds any (so a send may take it up to one datagram below
//! zero). Its depth is what one step is entitled to: the rate times the host's step
//! interval, at least a millisecond's worth and two datagrams. So a caller that steps once
//! per fixed tick (60 Hz, or 1 ms) sends each tick's whole allowance in that tick and
//! needs no wake-up between ticks to reach the rate, while an event-driven caller is woken
//! at [`Pacer::ready_at`] (the transfer layer's pacing timer) and sends smoothly.
//!
//! Time-critical data is not held behind what the bucket spreads out: a datagram of
//! unreliable messages alone may leave while the bucket is less than one datagram in
//! debt ([`Pacer::allows_urgent`]); the data behind it then waits the debt off, so the
//! rate holds over time and the burst it adds is at most one datagram.
//!
//! Invariant: over any interval in which the rate does not change, the bytes sent are at
//! most the rate times the interval, plus the depth, plus two datagrams (one for a send
//! that took the bucket below zero, one for an urgent send below that).

use crate::time::Time;
use std::time::Duration;

/// The least time's worth of sending the bucket holds.
pub(crate) const MIN_BURST_TIME: Duration = Duration::from_millis(1);

/// The token bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pacer {
    /// Bytes that may leave now (may be one datagram negative after a send).
    tokens: i64,
    last: Option<Time>,
}

/// The bucket's depth: what a step of `step` may send at `rate`, at least
/// [`MIN_BURST_TIME`]'s worth and two datagrams of `mtu`.
pub(crate) fn depth(rate: u64, step: Duration, mtu: usize) -> u64 {
    let time = step.max(MIN_BURST_TIME);
    let bytes = u128::from(rate) * time.as_nanos() / 1_000_000_000;
    (bytes.min(u128::from(u64::MAX / 4)) as u64).max(2 * mtu as u64)
}

impl Pacer {
    /// Adds what `rate` (bytes per second) earned since the last refill, up to `depth`. The
    /// first refill fills the bucket.
    pub(crate) fn refill(&mut self, now: Time, rate: u64, depth: u64) {
        let depth = i64::try_from(depth).unwrap_or(i64::MAX / 4);
        let earned = match self.last {
            None => depth,
            Some(last) => {
                let elapsed = now.saturating_duration_since(last);
                let bytes = u128::from(rate) * elapsed.as_nanos() / 1_000_000_000;
                i64::try_from(bytes).unwrap_or(i64::MAX / 4)
            }
        };
        self.tokens = self.tokens.saturating_add(earned).min(depth);
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
    }

    /// Whether a datagram may leave now.
    pub(crate) fn allows(&self) -> bool {
        self.tokens > 0
    }

    /// Whether a datagram of time-critical data may leave now: the bucket is less than
    /// one datagram of `mtu` in debt.
    pub(crate) fn allows_urgent(&self, mtu: usize) -> bool {
        self.tokens > -i64::try_from(mtu).unwrap_or(i64::MAX)
    }

    /// A datagram of `bytes` left.
    pub(crate) fn spend(&mut self, bytes: usize) {
        self.tokens = self.tokens.saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// When the bucket will next allow a datagram, filling at `rate`.
    pub(crate) fn ready_at(&self, now: Time, rate: u64) -> Time {
        if self.tokens > 0 {
            return now;
        }
        let owed = u128::from(self.tokens.unsigned_abs()) + 1;
        let nanos = (owed * 1_000_000_000).div_ceil(u128::from(rate.max(1)));
        now + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX / 2))
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use quickcheck::{QuickCheck, TestResult};

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_fixed_tick_gets_its_whole_allowance_and_an_event_driven_caller_its_wake_up() {
        let t = Time::ZERO;
        let rate = 1_200_000; // 1.2 MB/s: 1,000 datagrams of 1,200 bytes a second.
        let tick = Duration::from_micros(16_667);
        let mut p = Pacer::default();
        let mut sent = 0;
        for i in 0..60u32 {
            p.refill(t + i * tick, rate, depth(rate, tick, 1200));
            while p.allows() {
                p.spend(1200);
                sent += 1200;
            }
        }
        // One second at 60 Hz: the rate's worth, give or take the first tick's fill.
        assert!((1_150_000..=1_250_000 + 20_000).contains(&sent), "{sent}");
        // Event-driven: a datagram, then a wake-up when the next may go.
        let mut q = Pacer::default();
        q.refill(t, rate, depth(rate, Duration::ZERO, 1200));
        while q.allows() {
            q.spend(1200);
        }
        let ready = q.ready_at(t, rate);
        assert!(ready > t && ready <= t + 2 * MS, "{:?}", ready - t);
        q.refill(ready, rate, depth(rate, Duration::ZERO, 1200));
        assert!(q.allows());
    }

    #[test]
    fn sends_never_exceed_the_budget_over_any_interval() {
        fn prop(rate: u32, steps: Vec<(u8, u8)>) -> TestResult {
            let rate = u64::from(rate % 50_000_000) + 1_000;
            let mtu = 1200;
            let t0 = Time::ZERO;
            let mut p = Pacer::default();
            let mut now = t0;
            let mut log: Vec<(Time, usize)> = Vec::new();
            let mut max_depth = 0;
            for (gap, tries) in steps {
                now += Duration::from_micros(u64::from(gap) * 250);
                let step = Duration::from_micros(u64::from(gap) * 250);
                let d = depth(rate, step, mtu);
                max_depth = max_depth.max(d);
                p.refill(now, rate, d);
                for i in 0..tries % 20 {
                    // Every third try is time-critical data, which may go a datagram
                    // further into debt.
                    if p.allows() || (i % 3 == 2 && p.allows_urgent(mtu)) {
                        p.spend(mtu);
                        log.push((now, mtu));
                    }
                }
            }
            // Any window [a, b] of the log: bytes <= rate (b - a) + depth + two datagrams.
            for i in 0..log.len() {
                let mut bytes = 0u128;
                for j in i..log.len() {
                    bytes += log[j].1 as u128;
                    let span = log[j].0 - log[i].0;
                    let budget =
                        u128::from(rate) * span.as_nanos() / 1_000_000_000 + u128::from(max_depth) + 2 * mtu as u128;
                    if bytes > budget {
                        return TestResult::error(format!("{bytes} bytes over {span:?} at {rate} B/s"));
                    }
                }
            }
            TestResult::passed()
        }
        QuickCheck::new().tests(300).quickcheck(prop as fn(u32, Vec<(u8, u8)>) -> TestResult);
    }
}
