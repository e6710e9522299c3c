//! Delivery rate sampling: how fast the path delivered this connection's frames, measured
//! per acknowledgement, in the manner of the IETF draft "Delivery Rate Estimation"
//! (draft-cheng-iccrg-delivery-rate-estimation).
//!
//! Every transmission records what the connection had delivered when it left
//! ([`SendState`]). When it is acknowledged, the bytes delivered since, over the longer of
//! the time it took to send them and the time it took to acknowledge them, is one sample
//! of the delivery rate: the send interval keeps an acknowledgement burst (a compressed
//! or aggregated ack) from inflating it, the ack interval keeps a send burst from doing so.
//! A sample taken while the application had too little data to fill the window is marked
//! *app-limited*: it says the path is at least that fast, not that it is no faster.
//!
//! Invariants: `delivered` only grows; a sample's bytes are those acknowledged after the
//! newest acknowledged transmission was sent, so a frame acknowledged twice (a resend
//! raced its original) is counted once, by the caller, which only reports new
//! acknowledgements.

use std::time::Duration;

use crate::time::Time;

/// What the connection had delivered when a frame was (re)sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendState {
    /// Bytes delivered (acknowledged) before this transmission.
    pub(crate) delivered: u64,
    /// When `delivered` last grew, as of this transmission.
    pub(crate) delivered_at: Time,
    /// When the first transmission of the flight this one belongs to left.
    pub(crate) first_sent_at: Time,
    /// Sent while the application left the window unfilled.
    pub(crate) app_limited: bool,
}

/// One delivery rate sample, built from an acknowledgement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RateSample {
    /// Bytes per second; `None` when the acknowledgement gave no usable sample.
    pub(crate) rate: Option<u64>,
    /// See [`SendState::app_limited`].
    pub(crate) app_limited: bool,
    /// `delivered` as of the newest acknowledged transmission's send: rounds are counted
    /// by it (a round ends when a frame sent after it began is acknowledged).
    pub(crate) prior_delivered: u64,
}

/// The sampler: counts delivered bytes and builds a [`RateSample`] per acknowledgement.
#[derive(Clone, Debug, Default)]
pub(crate) struct Delivery {
    delivered: u64,
    delivered_at: Option<Time>,
    /// Send time of the newest acknowledged transmission: where the next flight's send
    /// interval starts.
    first_sent_at: Option<Time>,
    /// Samples until `delivered` passes this are app-limited (0: none are).
    app_limited_until: u64,
    /// The acknowledgement being gathered: the newest acknowledged transmission's state
    /// and send time.
    newest: Option<(SendState, Time)>,
}

impl Delivery {
    /// Bytes delivered so far.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }

    /// A transmission leaves now; `nothing_in_flight` says it starts a new flight.
    pub(crate) fn on_send(&mut self, now: Time, nothing_in_flight: bool) -> SendState {
        if nothing_in_flight || self.first_sent_at.is_none() {
            self.first_sent_at = Some(now);
            // After an idle period the ack interval restarts too: a sample must not span
            // the silence. A flight that emptied while more was waiting is no silence: a
            // caller that steps on a fixed tick over a path faster than its tick (hosts in
            // one process, a simulation) has every flight acknowledged in the instant it
            // left; restarting there leaves every interval zero and the model without a
            // single sample, stuck at its initial pacing rate.
            if self.app_limited_until > 0 || self.delivered_at.is_none() {
                self.delivered_at = Some(now);
            }
        }
        SendState {
            delivered: self.delivered,
            delivered_at: self.delivered_at.unwrap_or(now),
            first_sent_at: self.first_sent_at.unwrap_or(now),
            app_limited: self.app_limited_until > 0,
        }
    }

    /// The application has less to send than the window allows, with `in_flight` bytes
    /// out: samples until those are delivered are app-limited.
    pub(crate) fn on_app_limited(&mut self, in_flight: usize) {
        self.app_limited_until = (self.delivered + in_flight as u64).max(1);
    }

    /// A transmission of `bytes`, sent at `sent_at` with `state`, was acknowledged now.
    pub(crate) fn on_acked(&mut self, now: Time, bytes: usize, state: SendState, sent_at: Time) {
        self.delivered += bytes as u64;
        self.delivered_at = Some(now);
        let newer = self.newest.is_none_or(|(n, at)| state.delivered > n.delivered || sent_at > at);
        if newer {
            self.newest = Some((state, sent_at));
            self.first_sent_at = Some(sent_at);
        }
        if self.app_limited_until > 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
    }

    /// The sample of the acknowledgement gathered since the last call, if it acknowledged
    /// anything. Samples over an interval shorter than `min_interval` (the minimum RTT)
    /// are discarded: they measure a burst, not the path.
    pub(crate) fn take_sample(&mut self, min_interval: Duration) -> Option<RateSample> {
        let (state, sent_at) = self.newest.take()?;
        let delivered_at = self.delivered_at.unwrap_or(sent_at);
        let send_elapsed = sent_at.saturating_duration_since(state.first_sent_at);
        let ack_elapsed = delivered_at.saturating_duration_since(state.delivered_at);
        let interval = send_elapsed.max(ack_elapsed);
        let bytes = self.delivered.saturating_sub(state.delivered);
        let rate = (!interval.is_zero() && interval >= min_interval)
            .then(|| (u128::from(bytes) * 1_000_000_000 / interval.as_nanos()).min(u128::from(u64::MAX)) as u64);
        Some(RateSample { rate, app_limited: state.app_limited, prior_delivered: state.delivered })
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_steady_flight_samples_its_rate() {
        // A frame of 1,000 bytes every ms, each acknowledged 50 ms after it left, for
        // 200 ms: once the first round trip is past, every sample is 1,000 bytes per ms.
        let t = Time::ZERO;
        let mut d = Delivery::default();
        let mut out: std::collections::VecDeque<(SendState, Time)> = std::collections::VecDeque::new();
        let mut rates = Vec::new();
        for ms in 0..200u32 {
            let now = t + ms * MS;
            while out.front().is_some_and(|&(_, at)| at + 50 * MS <= now) {
                let (state, at) = out.pop_front().unwrap();
                d.on_acked(now, 1000, state, at);
                if let Some(r) = d.take_sample(Duration::ZERO).and_then(|s| s.rate)
                    && ms >= 100
                {
                    rates.push(r);
                }
            }
            out.push_back((d.on_send(now, ms == 0), now));
        }
        assert_eq!(d.delivered(), 150 * 1000);
        assert!(rates.len() == 100 && rates.iter().all(|&r| (980_000..=1_020_000).contains(&r)), "{rates:?}");
    }

    #[test]
    fn flights_acknowledged_in_the_instant_they_leave_still_sample() {
        // A caller stepping every ms over a path faster than that: 64 kB leave and are
        // acknowledged in the same instant, with more always waiting. The rate is what
        // each step moves; restarting the interval at each empty flight measured nothing.
        let t = Time::ZERO;
        let mut d = Delivery::default();
        let mut rates = Vec::new();
        for ms in 0..20u32 {
            let now = t + ms * MS;
            let state = d.on_send(now, true);
            d.on_acked(now, 64_000, state, now);
            rates.extend(d.take_sample(Duration::ZERO).and_then(|s| s.rate));
        }
        assert_eq!(rates, vec![64_000_000; 19]);
        // An idle sender (application-limited) restarts the interval: no sample spans
        // its silence.
        d.on_app_limited(0);
        let now = t + 500 * MS;
        let state = d.on_send(now, true);
        d.on_acked(now + 50 * MS, 1_000, state, now);
        let sample = d.take_sample(Duration::ZERO).expect("acknowledged");
        assert!(sample.app_limited);
        assert_eq!(sample.rate, Some(20_000));
    }

    #[test]
    fn an_ack_burst_does_not_inflate_the_rate() {
        // Five frames sent 10 ms apart, all acknowledged in one instant: the send interval
        // bounds the rate.
        let t = Time::ZERO;
        let mut d = Delivery::default();
        let first = d.on_send(t, true);
        d.on_acked(t + 100 * MS, 1000, first, t);
        d.take_sample(Duration::ZERO);
        let states: Vec<_> = (1..=5u32).map(|i| (d.on_send(t + i * 10 * MS, false), t + i * 10 * MS)).collect();
        let at = t + 200 * MS;
        for (s, sent) in states {
            d.on_acked(at, 1000, s, sent);
        }
        let sample = d.take_sample(Duration::ZERO).unwrap();
        // 5,000 bytes over the 100 ms between the first ack and this one.
        assert_eq!(sample.rate, Some(50_000));
        assert_eq!(sample.prior_delivered, 1000);
    }

    #[test]
    fn app_limited_marks_last_until_the_flight_is_delivered_and_short_intervals_are_dropped() {
        let t = Time::ZERO;
        let mut d = Delivery::default();
        d.on_app_limited(2000);
        let a = d.on_send(t, true);
        assert!(a.app_limited);
        d.on_acked(t + MS, 1000, a, t);
        let s = d.take_sample(Duration::ZERO).unwrap();
        assert!(s.app_limited);
        let b = d.on_send(t + MS, true);
        d.on_acked(t + 2 * MS, 1500, b, t + MS);
        assert!(d.take_sample(Duration::ZERO).unwrap().app_limited, "marked when sent");
        let c = d.on_send(t + 2 * MS, true);
        assert!(!c.app_limited, "2,500 delivered: past the mark");
        d.on_acked(t + 3 * MS, 1000, c, t + 2 * MS);
        assert_eq!(d.take_sample(10 * MS).map(|s| s.rate), Some(None), "1 ms is shorter than the minimum");
        assert_eq!(d.take_sample(Duration::ZERO), None, "nothing new acknowledged");
    }
}
