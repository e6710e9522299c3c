//! Round-trip time and resend timeout (spec §3.1.3, equations (5)-(7)).
//!
//! Samples come from pings, from the handshake, and from acknowledgements of frames sent
//! exactly once (Karn's rule: a resent frame's acknowledgement is ambiguous). The spec
//! names acknowledgement-based estimation as a future option (footnote 4); we take it,
//! because pings alone sample once per RTT and miss the queueing delay a burst builds,
//! which made the RTO fire for frames that were merely queued.
//!
//! `rttvar` is updated before `srtt` from the same sample (equation (6) before (5)), and
//! `RTO = srtt + max(step, 4 rttvar)`, where `step` is the smoothed interval between the
//! host's `step` calls: the granularity at which this side can notice anything.
//!
//! A peer may hold an acknowledgement for a while, waiting for its own data to carry it
//! (see `acks`), and says how long. That time is taken off the sample of the frame it
//! held (unless what is left would be shorter than any round trip seen: a peer claiming
//! too long a hold cannot shrink the estimate), and the RTO allows for the longest hold
//! the peer reported lately, since the last frame of a flight is acknowledged only when
//! its hold ends.
//!
//! Before any sample the RTT is the spec's 200 ms with `rttvar` = 100 ms. The first sample
//! then replaces both as RFC 6298 §2.2 does (`srtt = R`, `rttvar = R / 2`); smoothing a
//! first 0.1 ms loopback sample into 200 ms would keep the RTO far too long for dozens of
//! pings. Every later sample is smoothed by (5) and (6).

use std::time::Duration;

use super::acks::MAX_ACK_DELAY;
use crate::lean::Nanos;

/// The spec's initial round-trip time.
pub(crate) const INITIAL_RTT: Duration = Duration::from_millis(200);

/// The smallest margin the RTO keeps above the smoothed RTT (QUIC's kGranularity): with
/// an event-driven host the step interval is near zero and a steady path drives rttvar
/// to zero, which would otherwise leave no margin at all.
pub(crate) const GRANULARITY: Duration = Duration::from_millis(1);

/// The RFC 6298 estimator of the connection's round-trip time. Its durations are kept and
/// computed on as whole nanoseconds ([`Nanos`], 8 bytes instead of 16; `u64` arithmetic
/// instead of `Duration`'s seconds-and-nanoseconds pairs, which every operation
/// normalises and checks, on a path taken for every acknowledgement). Every result
/// equals what `Duration` arithmetic gives: sums, differences, minima and products are
/// exact in nanoseconds, and the estimator divides only by 2, 4 and 8, which divide a
/// second's nanoseconds, so `Duration`'s per-part division floors the same as one
/// division of the total. Products saturate (a `Duration` would panic) beyond 584 years.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rtt {
    srtt: Nanos,
    rttvar: Nanos,
    step: Nanos,
    rto: Nanos,
    sampled: bool,
    latest: Nanos,
    /// The smallest sample so far ([`Nanos::MAX`] before any: no sample is 584 years long).
    min: Nanos,
    /// The longest acknowledgement hold the peer reported lately: a decaying maximum,
    /// never above [`MAX_ACK_DELAY`] whatever the peer says.
    peer_hold: Nanos,
}

impl Rtt {
    pub(crate) fn new(initial: Duration) -> Self {
        let mut r = Self {
            srtt: Nanos::of(initial),
            rttvar: Nanos::of(initial / 2),
            step: Nanos::default(),
            rto: Nanos::default(),
            sampled: false,
            latest: Nanos::of(initial),
            min: Nanos::MAX,
            peer_hold: Nanos::default(),
        };
        r.update_rto();
        r
    }

    fn update_rto(&mut self) {
        // Equation (7), with the variance term never below the timer granularity.
        let margin = self.step.0.max(self.rttvar.0.saturating_mul(4)).max(Nanos::of(GRANULARITY).0);
        self.rto = Nanos(self.srtt.0.saturating_add(margin).saturating_add(self.peer_hold.0));
    }

    /// A round trip measured `sample`, of which the peer reports holding its
    /// acknowledgement `held`.
    pub(crate) fn on_delayed_sample(&mut self, sample: Duration, held: Duration) {
        let adjusted = sample.saturating_sub(held);
        self.on_sample(if self.min().is_none_or(|m| adjusted >= m) { adjusted } else { sample });
    }

    /// The peer reports holding an acknowledgement `held`.
    pub(crate) fn on_ack_delay(&mut self, held: Duration) {
        self.peer_hold = Nanos(Nanos::of(held.min(MAX_ACK_DELAY)).0.max(self.peer_hold.0.saturating_mul(7) / 8));
        self.update_rto();
    }

    /// A ping was acknowledged after `sample`.
    pub(crate) fn on_sample(&mut self, sample: Duration) {
        let sample = Nanos::of(sample).0;
        self.latest = Nanos(sample);
        // Before any sample `min` is the largest value, so this takes the first as it is.
        self.min = Nanos(self.min.0.min(sample));
        if self.sampled {
            // (6) first, against the old average; then (5).
            let (srtt, rttvar) = (self.srtt.0, self.rttvar.0);
            let dev = srtt.abs_diff(sample);
            self.rttvar = Nanos(rttvar.saturating_mul(3) / 4 + dev / 4);
            self.srtt = Nanos(srtt.saturating_mul(7) / 8 + sample / 8);
        } else {
            self.sampled = true;
            self.srtt = Nanos(sample);
            self.rttvar = Nanos(sample / 2);
        }
        self.update_rto();
    }

    /// The host stepped `interval` after its previous step.
    #[cfg(test)]
    pub(crate) fn on_step(&mut self, interval: Duration) {
        let step = self.step.get();
        self.step = Nanos::of(if step.is_zero() { interval } else { step * 7 / 8 + interval / 8 });
        self.update_rto();
    }

    /// The host's smoothed step interval, as last reported.
    pub(crate) fn set_step(&mut self, step: Duration) {
        self.step = Nanos::of(step);
        self.update_rto();
    }

    pub(crate) fn srtt(&self) -> Duration {
        self.srtt.get()
    }

    pub(crate) fn rttvar(&self) -> Duration {
        self.rttvar.get()
    }

    #[cfg(test)]
    pub(crate) fn rto(&self) -> Duration {
        self.rto.get()
    }

    /// The RTO allowing for a peer's hold of at least `hold` (the hold it reported
    /// lately counts already).
    pub(crate) fn rto_with_hold(&self, hold: Nanos) -> Duration {
        let extra = hold.0.min(Nanos::of(MAX_ACK_DELAY).0).saturating_sub(self.peer_hold.0);
        Nanos(self.rto.0.saturating_add(extra)).get()
    }

    /// The smallest round trip sampled, if any.
    pub(crate) fn min(&self) -> Option<Duration> {
        (self.min != Nanos::MAX).then(|| self.min.get())
    }

    pub(crate) fn latest(&self) -> Duration {
        self.latest.get()
    }

    /// The host's smoothed step interval.
    pub(crate) fn step(&self) -> Duration {
        self.step.get()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn initial_values_follow_the_spec() {
        let r = Rtt::new(INITIAL_RTT);
        assert_eq!(r.srtt(), 200 * MS);
        assert_eq!(r.rttvar(), 100 * MS);
        // RTO = 200 + max(0, 400).
        assert_eq!(r.rto(), 600 * MS);
    }

    #[test]
    fn first_sample_replaces_then_samples_smooth_with_var_before_avg() {
        let mut r = Rtt::new(INITIAL_RTT);
        r.on_sample(80 * MS);
        assert_eq!((r.srtt(), r.rttvar()), (80 * MS, 40 * MS));
        r.on_sample(160 * MS);
        // (6) uses the old average 80: 0.75 * 40 + 0.25 * |80 - 160| = 50.
        assert_eq!(r.rttvar(), 50 * MS);
        // (5): 0.875 * 80 + 0.125 * 160 = 90.
        assert_eq!(r.srtt(), 90 * MS);
        assert_eq!(r.rto(), 90 * MS + 200 * MS);
        // Had (5) run first, rttvar would be 0.75 * 40 + 0.25 * 70 = 47.5.
        assert_ne!(r.rttvar(), Duration::from_micros(47_500));
    }

    #[test]
    fn a_reported_hold_comes_off_the_sample_but_never_below_the_path() {
        let mut r = Rtt::new(INITIAL_RTT);
        r.on_delayed_sample(50 * MS, 10 * MS);
        assert_eq!(r.latest(), 40 * MS, "the hold is not part of the round trip");
        r.on_delayed_sample(45 * MS, 20 * MS);
        assert_eq!(r.latest(), 45 * MS, "25 ms would be shorter than any round trip seen: kept whole");
        // The RTO allows for the longest recent hold, capped whatever the peer claims.
        let before = r.rto();
        r.on_ack_delay(8 * MS);
        assert_eq!(r.rto(), before + 8 * MS);
        r.on_ack_delay(Duration::from_secs(3600));
        assert_eq!(r.rto(), before + MAX_ACK_DELAY);
        for _ in 0..100 {
            r.on_ack_delay(Duration::ZERO);
        }
        assert!(r.rto() < before + MS, "the allowance decays once holds stop");
    }

    #[test]
    fn step_interval_floors_the_rto() {
        let mut r = Rtt::new(INITIAL_RTT);
        for _ in 0..50 {
            r.on_sample(10 * MS);
        }
        // rttvar has decayed towards 0, so 4 rttvar is below a 16 ms step.
        r.set_step(16 * MS);
        assert!(r.rttvar() * 4 < 16 * MS);
        assert_eq!(r.rto(), r.srtt() + 16 * MS);
        let mut s = Rtt::new(INITIAL_RTT);
        s.on_step(10 * MS);
        s.on_step(18 * MS);
        assert_eq!(s.step(), 11 * MS);
    }

    /// The estimator as it was computed with `Duration` arithmetic: the reference the
    /// nanosecond arithmetic must equal exactly.
    struct DurationRtt {
        srtt: Duration,
        rttvar: Duration,
        sampled: bool,
        hold: Duration,
        step: Duration,
    }

    impl DurationRtt {
        fn rto(&self) -> Duration {
            self.srtt + self.step.max(self.rttvar * 4).max(GRANULARITY) + self.hold
        }

        fn on_sample(&mut self, sample: Duration) {
            if self.sampled {
                let dev = self.srtt.abs_diff(sample);
                self.rttvar = self.rttvar * 3 / 4 + dev / 4;
                self.srtt = self.srtt * 7 / 8 + sample / 8;
            } else {
                self.sampled = true;
                self.srtt = sample;
                self.rttvar = sample / 2;
            }
        }
    }

    #[test]
    fn nanosecond_arithmetic_equals_duration_arithmetic() {
        fn prop(ops: Vec<(u8, u64, u64)>) -> bool {
            let mut r = Rtt::new(INITIAL_RTT);
            let mut d = DurationRtt {
                srtt: INITIAL_RTT,
                rttvar: INITIAL_RTT / 2,
                sampled: false,
                hold: Duration::ZERO,
                step: Duration::ZERO,
            };
            ops.into_iter().all(|(op, a, b)| {
                // Up to about 18 minutes, with every nanosecond digit in play.
                let (a, b) = (Duration::from_nanos(a % (1 << 40)), Duration::from_nanos(b % (1 << 40)));
                match op % 3 {
                    0 => {
                        r.on_sample(a);
                        d.on_sample(a);
                    }
                    1 => {
                        r.on_ack_delay(a);
                        d.hold = a.min(MAX_ACK_DELAY).max(d.hold * 7 / 8);
                    }
                    _ => {
                        r.set_step(a);
                        d.step = a;
                    }
                }
                let hold = b.min(MAX_ACK_DELAY).saturating_sub(d.hold);
                (r.srtt(), r.rttvar(), r.rto(), r.rto_with_hold(Nanos::of(b)))
                    == (d.srtt, d.rttvar, d.rto(), d.rto() + hold)
            })
        }
        quickcheck::QuickCheck::new().tests(2_000).quickcheck(prop as fn(Vec<(u8, u64, u64)>) -> bool);
    }
}
