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
//! Before any sample the RTT is the spec's 200 ms with `rttvar` = 100 ms. The first sample
//! then replaces both as RFC 6298 §2.2 does (`srtt = R`, `rttvar = R / 2`); smoothing a
//! first 0.1 ms loopback sample into 200 ms would keep the RTO far too long for dozens of
//! pings. Every later sample is smoothed by (5) and (6).

use std::time::Duration;

/// The spec's initial round-trip time.
pub(crate) const INITIAL_RTT: Duration = Duration::from_millis(200);

/// The smallest margin the RTO keeps above the smoothed RTT (QUIC's kGranularity): with
/// an event-driven host the step interval is near zero and a steady path drives rttvar
/// to zero, which would otherwise leave no margin at all.
pub(crate) const GRANULARITY: Duration = Duration::from_millis(1);

/// The RFC 6298 estimator of the connection's round-trip time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rtt {
    srtt: Duration,
    rttvar: Duration,
    step: Duration,
    rto: Duration,
    sampled: bool,
    latest: Duration,
}

impl Rtt {
    pub(crate) fn new(initial: Duration) -> Self {
        let mut r = Self {
            srtt: initial,
            rttvar: initial / 2,
            step: Duration::ZERO,
            rto: Duration::ZERO,
            sampled: false,
            latest: initial,
        };
        r.update_rto();
        r
    }

    fn update_rto(&mut self) {
        // Equation (7), with the variance term never below the timer granularity.
        self.rto = self.srtt + self.step.max(self.rttvar * 4).max(GRANULARITY);
    }

    /// A ping was acknowledged after `sample`.
    pub(crate) fn on_sample(&mut self, sample: Duration) {
        self.latest = sample;
        if self.sampled {
            // (6) first, against the old average; then (5).
            let dev = self.srtt.abs_diff(sample);
            self.rttvar = self.rttvar * 3 / 4 + dev / 4;
            self.srtt = self.srtt * 7 / 8 + sample / 8;
        } else {
            self.sampled = true;
            self.srtt = sample;
            self.rttvar = sample / 2;
        }
        self.update_rto();
    }

    /// The host stepped `interval` after its previous step.
    #[cfg(test)]
    pub(crate) fn on_step(&mut self, interval: Duration) {
        self.step = if self.step.is_zero() { interval } else { self.step * 7 / 8 + interval / 8 };
        self.update_rto();
    }

    /// The host's smoothed step interval, as last reported.
    pub(crate) fn set_step(&mut self, step: Duration) {
        self.step = step;
        self.update_rto();
    }

    pub(crate) fn srtt(&self) -> Duration {
        self.srtt
    }

    pub(crate) fn rttvar(&self) -> Duration {
        self.rttvar
    }

    pub(crate) fn rto(&self) -> Duration {
        self.rto
    }

    pub(crate) fn latest(&self) -> Duration {
        self.latest
    }

    /// The host's smoothed step interval.
    pub(crate) fn step(&self) -> Duration {
        self.step
    }
}

#[cfg(test)]
mod tests {
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
}
