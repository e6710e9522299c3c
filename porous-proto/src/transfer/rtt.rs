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
//! its hold ends (and for a longer one the transfer layer expects from the peer's rhythm:
//! [`super::Transfer::rto`]).
//!
//! The RTO is never shorter than the longest sample of the last [`PEAK_WINDOW`] or two
//! (of those whose hold the peer reported), plus the granularity, up to [`MAX_ACK_DELAY`]
//! above the estimate of (7). A peer whose loop stalls now and then (a busy server, a
//! collector's pause) acknowledges late by its stall, which its reported hold cannot
//! include (it counts from when it handled the frame); between two stalls `rttvar`
//! decays by a quarter per sample, so `4 rttvar` alone covered a stall only right after
//! the previous one, and every frame caught in the next timed out: resent for nothing,
//! and counted as loss by the congestion controller. The longest recent round trip is
//! what the path and the peer have shown they can take; a timeout shorter than that
//! declares the loss of frames that are merely late. It lifts the RTO by at most
//! [`MAX_ACK_DELAY`], what QUIC's PTO adds for any peer: more slowed a bulk flow's
//! recovery at 20% loss, whose queue's peaks the floor would otherwise follow.
//!
//! Before any sample the RTT is the spec's 200 ms with `rttvar` = 100 ms. The first sample
//! then replaces both as RFC 6298 §2.2 does (`srtt = R`, `rttvar = R / 2`); smoothing a
//! first 0.1 ms loopback sample into 200 ms would keep the RTO far too long for dozens of
//! pings. Every later sample is smoothed by (5) and (6).

use std::time::Duration;

use super::acks::MAX_ACK_DELAY;
use crate::lean::Nanos;
use crate::time::Time;

/// The spec's initial round-trip time.
pub(crate) const INITIAL_RTT: Duration = Duration::from_millis(200);

/// The smallest margin the RTO keeps above the smoothed RTT (QUIC's kGranularity): with
/// an event-driven host the step interval is near zero and a steady path drives rttvar
/// to zero, which would otherwise leave no margin at all.
pub(crate) const GRANULARITY: Duration = Duration::from_millis(1);

/// How long a round-trip sample floors the RTO: at least this, at most twice this (the
/// longest sample of the current window and of the one before it count). Long enough to
/// span many stalls of a busy peer (a game server's long frames come every second or
/// so; a collector's pauses every few seconds), short enough that one outlier (a route
/// change, a burst's queue) stops slowing loss recovery within seconds.
pub(crate) const PEAK_WINDOW: Duration = Duration::from_secs(5);

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
    /// The longest sample of the current [`PEAK_WINDOW`] (which began at `peak_since`)
    /// and of the window before it: the RTO's floor.
    peak: Nanos,
    peak_before: Nanos,
    peak_since: Option<Time>,
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
            peak: Nanos::default(),
            peak_before: Nanos::default(),
            peak_since: None,
        };
        r.update_rto();
        r
    }

    fn update_rto(&mut self) {
        // Equation (7), with the variance term never below the timer granularity, and
        // never below the longest recent sample, as far as MAX_ACK_DELAY above (7).
        let granularity = Nanos::of(GRANULARITY).0;
        let margin = self.step.0.max(self.rttvar.0.saturating_mul(4)).max(granularity);
        let estimate = self.srtt.0.saturating_add(margin);
        let floor = self.peak.0.max(self.peak_before.0).saturating_add(granularity);
        let floor = floor.min(estimate.saturating_add(Nanos::of(MAX_ACK_DELAY).0));
        self.rto = Nanos(estimate.max(floor).saturating_add(self.peer_hold.0));
    }

    /// A round trip measured `sample` at `now`, of which the peer reports holding its
    /// acknowledgement `held`. Only such samples, whose holds are known, floor the RTO:
    /// one that may include a hold (the peer reports only its newest frame's) would keep
    /// a whole hold in the floor for seconds, though the RTO allows for holds apart.
    pub(crate) fn on_delayed_sample(&mut self, now: Time, sample: Duration, held: Duration) {
        let adjusted = sample.saturating_sub(held);
        let sample = if self.min().is_none_or(|m| adjusted >= m) { adjusted } else { sample };
        self.on_peak(now, Nanos::of(sample).0);
        self.on_sample(sample);
    }

    /// Keeps `sample`, taken at `now`, in the peak windows.
    fn on_peak(&mut self, now: Time, sample: u64) {
        let since = *self.peak_since.get_or_insert(now);
        let age = now.saturating_duration_since(since);
        if age >= PEAK_WINDOW {
            self.peak_before = if age >= 2 * PEAK_WINDOW { Nanos::default() } else { self.peak };
            self.peak = Nanos::default();
            self.peak_since = Some(now);
        }
        self.peak = Nanos(self.peak.0.max(sample));
    }

    /// The peer reports holding an acknowledgement `held`.
    pub(crate) fn on_ack_delay(&mut self, held: Duration) {
        self.peer_hold = Nanos(Nanos::of(held.min(MAX_ACK_DELAY)).0.max(self.peer_hold.0.saturating_mul(7) / 8));
        self.update_rto();
    }

    /// A round trip measured `sample` (the handshake, an acknowledgement of a frame the
    /// peer reported no hold for).
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
    const T0: Time = Time::ZERO;

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
        r.on_delayed_sample(T0, 50 * MS, 10 * MS);
        assert_eq!(r.latest(), 40 * MS, "the hold is not part of the round trip");
        r.on_delayed_sample(T0, 45 * MS, 20 * MS);
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

    #[test]
    fn the_longest_recent_sample_floors_the_rto_for_one_to_two_windows() {
        let mut r = Rtt::new(INITIAL_RTT);
        // A steady 50 ms path, then one round trip 20 ms late (the peer's loop stalled).
        for i in 0..20 {
            r.on_delayed_sample(T0 + i * 10 * MS, 50 * MS, Duration::ZERO);
        }
        r.on_delayed_sample(T0 + 200 * MS, 75 * MS, 5 * MS);
        for i in 0..40 {
            r.on_delayed_sample(T0 + 210 * MS + i * 10 * MS, 50 * MS, Duration::ZERO);
        }
        assert!(r.srtt() + 4 * r.rttvar() < 70 * MS, "the variance alone forgot the stall: {:?}", r.rto());
        assert_eq!(r.rto(), 71 * MS, "the stall's round trip and the granularity");
        // A longer one lifts the RTO by MAX_ACK_DELAY at most.
        let mut longer = r;
        longer.on_delayed_sample(T0 + 600 * MS, 200 * MS, Duration::ZERO);
        for i in 0..40 {
            longer.on_delayed_sample(T0 + 610 * MS + i * 10 * MS, 50 * MS, Duration::ZERO);
        }
        let estimate = longer.srtt() + (4 * longer.rttvar()).max(GRANULARITY);
        assert_eq!(longer.rto(), estimate + MAX_ACK_DELAY);
        // Still held in the next window; forgotten once two windows passed without it.
        r.on_delayed_sample(T0 + PEAK_WINDOW + 100 * MS, 50 * MS, Duration::ZERO);
        assert_eq!(r.rto(), 71 * MS);
        r.on_delayed_sample(T0 + 2 * PEAK_WINDOW, 50 * MS, Duration::ZERO);
        assert_eq!(r.rto(), 71 * MS);
        r.on_delayed_sample(T0 + 3 * PEAK_WINDOW, 50 * MS, Duration::ZERO);
        assert!(r.rto() < 52 * MS, "the path's own margin again: {:?}", r.rto());
        // A sample whose hold is unknown (it may hold a whole hold) does not floor it.
        r.on_sample(90 * MS);
        assert_eq!((r.peak, r.peak_before), (Nanos::of(50 * MS), Nanos::of(50 * MS)));
    }

    /// The estimator as it was computed with `Duration` arithmetic: the reference the
    /// nanosecond arithmetic must equal exactly.
    struct DurationRtt {
        srtt: Duration,
        rttvar: Duration,
        sampled: bool,
        hold: Duration,
        step: Duration,
        peak: Duration,
        min: Option<Duration>,
    }

    impl DurationRtt {
        fn rto(&self) -> Duration {
            let estimate = self.srtt + self.step.max(self.rttvar * 4).max(GRANULARITY);
            estimate.max((self.peak + GRANULARITY).min(estimate + MAX_ACK_DELAY)) + self.hold
        }

        fn on_delayed_sample(&mut self, sample: Duration, held: Duration) {
            let adjusted = sample.saturating_sub(held);
            let sample = if self.min.is_none_or(|m| adjusted >= m) { adjusted } else { sample };
            self.peak = self.peak.max(sample);
            self.on_sample(sample);
        }

        fn on_sample(&mut self, sample: Duration) {
            self.min = Some(self.min.map_or(sample, |m| m.min(sample)));
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
                peak: Duration::ZERO,
                min: None,
            };
            ops.into_iter().all(|(op, a, b)| {
                // Up to about 18 minutes, with every nanosecond digit in play.
                let (a, b) = (Duration::from_nanos(a % (1 << 40)), Duration::from_nanos(b % (1 << 40)));
                match op % 4 {
                    0 => {
                        r.on_sample(a);
                        d.on_sample(a);
                    }
                    3 => {
                        r.on_delayed_sample(T0, a, b);
                        d.on_delayed_sample(a, b);
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
