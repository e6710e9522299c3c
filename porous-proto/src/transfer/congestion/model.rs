//! The model-based controller: the default, and a departure from the spec's AIMD
//! (`docs/protocol.md`, Congestion control, gives the measurements that justify it).
//!
//! It keeps a model of the path, in the spirit of BBR: the *bottleneck bandwidth* (the
//! highest delivery rate sampled over the last [`BW_ROUNDS`] round trips) and the *minimum
//! round trip* (over the last [`MIN_RTT_WINDOW`]). Their product is the bandwidth-delay
//! product (BDP): what the path holds without a queue. It paces sends at a gain over the
//! bandwidth and caps the flight at twice the BDP, so it neither idles the path nor builds
//! a standing queue; and it reads loss as congestion only when it comes with a queue.
//!
//! Modes:
//!
//! - **Startup**: pacing gain 2/ln 2, doubling the rate each round trip, until
//!   the bandwidth stops growing by a quarter for three rounds (or loss with a queue says
//!   the pipe is full);
//! - **Drain**: pacing gain ln 2 / 2 until the flight is back to one BDP (the queue Startup
//!   built is gone);
//! - **ProbeBandwidth**: a cycle of eight phases of one minimum RTT each, pacing at 1.25
//!   (probe for more), 0.75 (drain what the probe queued), then 1 six times;
//! - **ProbeRtt**: when the minimum RTT has not been seen for 10 s, the flight drops to half
//!   the BDP (at least four datagrams) for 200 ms and a round trip, so a queue cannot hide
//!   the path's real RTT. Half, as BBRv2, not BBRv1's four datagrams: under random loss the
//!   resends of a full flight then go out in a round trip or two instead of four a round
//!   trip (0.4 s of near silence at 5% loss), and the bandwidth filter does not age
//!   across it; the window it began with is restored at its end. An application-limited
//!   flow (a game's ticks) skips it: it keeps no queue of its own, so the round trips it
//!   samples are the path's, and the newest of them becomes the minimum.
//!
//! Loss: per round trip, the share of bytes lost. A round that loses more than
//! [`LOSS_THRESHOLD`] beyond the path's random loss while its round trips ran more than a
//! quarter above the minimum (a queue overflowing: congestion) caps the model's bandwidth
//! at [`LOSS_BETA`] of its estimate: a bounded reduction, once per round, never a halving
//! per drop. Random loss, which comes without a queue, leaves the model alone; it is
//! smoothed per round and paced for. A loss-based flow sharing a shallow buffer keeps a
//! queue standing and takes most of its drops, so the model, holding most of the link,
//! loses too little to pass the threshold: a round whose every round trip stood above the
//! queue bound, in which the model did not probe, and which lost more than the random
//! loss explains, caps it too, and that cap lifts a datagram per round trip, as the other
//! flow's window grows. Loss above [`SEVERE_LOSS`] without a queue counts
//! only two rounds running and outside Startup (a policer, or a buffer too shallow to show
//! a queue); a round's losses that prove spurious are taken back first, and nothing is
//! judged before the first round-trip sample. Any other cap is lifted by an eighth per round
//! without congestion. When nothing at all is acknowledged for two RTOs while frames keep
//! being lost, the path is silent: the window falls to its minimum until an
//! acknowledgement comes back, so a dead path does not get the full rate of resends.
//!
//! Bounds: the rate never exceeds the negotiated bandwidth B when one is set; the window
//! never falls below [`MIN_WINDOW`] datagrams nor exceeds the transfer window. Samples come
//! only from acknowledgements of frames this side sent (see `delivery.rs`); a peer that
//! acknowledges what it never received is caught by the skipped frame ids before it can
//! inflate the model far (`tests/hostile.rs`).

use crate::time::Time;
use std::time::Duration;

use super::{AckEvent, Limits, Path};
use crate::lean::Nanos;
use crate::stats::{CongestionMode, CongestionStats};

/// Startup's pacing and window gain: 2 / ln 2, the least that doubles the delivery rate
/// every round trip.
const STARTUP_GAIN: f64 = 2.885;
/// Drain's pacing gain: the inverse of Startup's.
const DRAIN_GAIN: f64 = 1.0 / STARTUP_GAIN;
/// The window as a multiple of the BDP, in every mode: Startup paces at 2/ln 2 but its
/// flight stays within twice the BDP, so the queue its overshoot builds is at most one BDP
/// (with 2/ln 2 it overflowed a one-BDP buffer by most of a BDP).
const WINDOW_GAIN: f64 = 2.0;
/// ProbeBandwidth's pacing gains, one minimum RTT each.
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// Round trips the bandwidth filter remembers.
pub(crate) const BW_ROUNDS: usize = 10;
/// How long a minimum RTT stays valid without being seen again.
pub(crate) const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// How long ProbeRtt holds the flight down.
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// The smallest window, in datagrams.
pub(crate) const MIN_WINDOW: usize = 4;
/// Startup ends when the bandwidth grew less than this factor...
const FULL_BW_GROWTH: f64 = 1.25;
/// ...for this many rounds.
const FULL_BW_ROUNDS: u8 = 3;
/// A round losing more than this share of its bytes, with a queue, is congested.
pub(crate) const LOSS_THRESHOLD: f64 = 0.02;
/// Round trips this far above the minimum mean a queue.
pub(crate) const QUEUE_FACTOR: f64 = 1.25;
/// The bandwidth cap after a congested round, as a share of the estimate.
pub(crate) const LOSS_BETA: f64 = 0.85;
/// A round losing more than this share is congested whatever its round trips.
pub(crate) const SEVERE_LOSS: f64 = 0.5;
/// The most random loss the pacing compensates for (at 50%, it sends twice what it wants
/// delivered).
pub(crate) const MAX_COMPENSATED_LOSS: f64 = 0.5;
/// How fast the cap lifts per round without congestion.
const CAP_GROWTH: f64 = 1.125;
/// The shortest minimum RTT over which the model tells random loss from a queue's.
const QUEUE_VISIBLE: Duration = Duration::from_millis(2);
/// The shortest interval the model treats as a round trip when computing the BDP (a
/// loopback or a simulation can measure zero; timers are no finer than this).
const RTT_FLOOR: Duration = Duration::from_millis(1);

/// The bandwidth filter: the highest delivery rate of each of the last [`BW_ROUNDS`] rounds
/// that took a sample, bytes per second. Rounds expire only as newer samples enter, as in
/// a windowed max filter: an application-limited flow, whose samples say nothing new,
/// keeps its estimate, instead of decaying to whatever a lone sparse frame measured (a
/// 45-byte resend over a 600 ms round trip reads as 69 B/s).
#[derive(Clone, Copy, Debug, Default)]
struct BwFilter {
    /// `(round, rate)` per slot, the slot being the round modulo [`BW_ROUNDS`].
    slots: [(u64, u64); BW_ROUNDS],
}

impl BwFilter {
    fn max(&self) -> u64 {
        self.slots.iter().map(|&(_, rate)| rate).max().unwrap_or(0)
    }

    /// A sample of `rate` in `round`: rounds [`BW_ROUNDS`] or more before it expire.
    fn insert(&mut self, round: u64, rate: u64) {
        for slot in &mut self.slots {
            if slot.0.saturating_add(BW_ROUNDS as u64) <= round {
                *slot = (round, 0);
            }
        }
        if let Some(slot) = self.slots.get_mut((round % BW_ROUNDS as u64) as usize) {
            *slot = if slot.0 == round { (round, slot.1.max(rate)) } else { (round, rate) };
        }
    }

    /// Ages nothing over `rounds` rounds that measured nothing (ProbeRtt's): every slot
    /// moves forward by them, rounded up to whole filter lengths so each stays in the slot
    /// its round maps to.
    fn postpone(&mut self, rounds: u64) {
        let by = rounds.div_ceil(BW_ROUNDS as u64).saturating_mul(BW_ROUNDS as u64);
        for slot in &mut self.slots {
            slot.0 = slot.0.saturating_add(by);
        }
    }
}

/// What the model's reactions to loss change, kept to be restored ([`Model::reaction`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reaction {
    loss_cap: u64,
    shared: bool,
    inflight_hi: Option<usize>,
    hi_step: usize,
    random_loss: f64,
    window: usize,
    full_bw_rounds: u8,
}

/// `Model::min_rtt` before any sample: no RTT sample is 584 years long.
const NO_RTT: Nanos = Nanos::MAX;

/// The model-based controller of one connection.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    limits: Limits,
    mode: CongestionMode,
    bw: BwFilter,
    min_rtt: Nanos,
    /// When `min_rtt` was last seen (or set).
    min_rtt_at: Option<Time>,
    /// Round trips so far, and the delivered count that ends the current one.
    round: u64,
    round_ends_at: u64,
    /// Startup's plateau detection.
    full_bw: u64,
    full_bw_rounds: u8,
    /// The current ProbeBandwidth phase and when it began.
    cycle: u8,
    cycle_at: Option<Time>,
    /// ProbeRtt: when the flight first reached its floor, and the round that must end.
    probe_rtt_done: Option<(Time, u64)>,
    /// The mode to return to after ProbeRtt, the round ProbeRtt began in, and the window
    /// it began with (restored at its end: pacing keeps the rate, and regrowing the window
    /// by what is acknowledged would take seven round trips more).
    before_probe_rtt: CongestionMode,
    probe_rtt_from: u64,
    window_before_probe_rtt: usize,
    /// Bytes acknowledged and lost in the current round, and its highest RTT sample.
    round_acked: u64,
    round_lost: u64,
    round_max_rtt: Nanos,
    /// The lowest round trip of the current round, and whether any of it was paced above
    /// the bandwidth (a probe: the queue it finds may be its own).
    round_min_rtt: Nanos,
    round_probed: bool,
    /// The loss cap was set by a loss in a round whose every round trip stood above the
    /// minimum (a standing queue: the bottleneck is shared with a flow that fills buffers):
    /// it lifts as such a flow grows, a datagram per round trip, not by an eighth per round.
    shared: bool,
    /// The ceiling congested rounds put on the bandwidth, bytes per second (0: none).
    loss_cap: u64,
    /// The last round lost more than [`SEVERE_LOSS`].
    severe_before: bool,
    /// The most the flight may be after a congested round: [`LOSS_BETA`] of the flight
    /// that overflowed the queue (as BBRv2's `inflight_hi`): cruising at twice the BDP
    /// would keep a buffer of one BDP or less full, so after an overflow the flight stays
    /// below what caused it. Raised by a growing step per round without congestion, and
    /// gone once above the window.
    inflight_hi: Option<usize>,
    /// What the next round without congestion adds to `inflight_hi`: a datagram, doubling.
    hi_step: usize,
    /// The largest flight seen this round.
    round_max_flight: usize,
    /// The share of bytes lost in rounds without a queue (random loss), smoothed per
    /// round. The delivery rate counts only what arrives, so on a path that loses this
    /// share at random the sender must put out `1 / (1 - share)` times the rate it wants
    /// delivered, or every probe would read as no faster than the last.
    random_loss: f64,
    /// The last time anything was acknowledged, and whether the path has been silent
    /// since for two RTOs with frames being lost.
    last_ack: Option<Time>,
    silent: bool,
    /// The latest delivery sample was application-limited: the flow sends less than the
    /// path carries, so it keeps no queue of its own and its round trips show the path's.
    app_limited: bool,
    resets: u64,
    window: usize,
    pacing_rate: u64,
    srtt: Nanos,
}

impl Model {
    pub(crate) fn new(limits: Limits) -> Self {
        let window = limits.initial_window.max(MIN_WINDOW * limits.mtu).min(limits.ceiling.max(limits.mtu));
        let mut m = Self {
            limits,
            mode: CongestionMode::Startup,
            bw: BwFilter::default(),
            min_rtt: NO_RTT,
            min_rtt_at: None,
            round: 0,
            round_ends_at: 0,
            full_bw: 0,
            full_bw_rounds: 0,
            cycle: 0,
            cycle_at: None,
            probe_rtt_done: None,
            before_probe_rtt: CongestionMode::Startup,
            probe_rtt_from: 0,
            window_before_probe_rtt: 0,
            round_acked: 0,
            round_lost: 0,
            round_max_rtt: Nanos::default(),
            round_min_rtt: NO_RTT,
            round_probed: false,
            shared: false,
            loss_cap: 0,
            severe_before: false,
            inflight_hi: None,
            hi_step: 0,
            round_max_flight: 0,
            random_loss: 0.0,
            last_ack: None,
            silent: false,
            app_limited: false,
            resets: 0,
            window,
            pacing_rate: 0,
            srtt: Nanos::of(super::super::rtt::INITIAL_RTT),
        };
        m.set_pacing_rate();
        m
    }

    /// The minimum RTT, once sampled.
    fn min_rtt(&self) -> Option<Duration> {
        (self.min_rtt != NO_RTT).then(|| self.min_rtt.get())
    }

    pub(crate) fn window(&self) -> usize {
        if self.silent { MIN_WINDOW * self.limits.mtu } else { self.window }
    }

    pub(crate) fn pacing_rate(&self) -> u64 {
        self.pacing_rate
    }

    pub(crate) fn resets(&self) -> u64 {
        self.resets
    }

    pub(crate) fn stats(&self) -> CongestionStats {
        CongestionStats {
            mode: self.mode,
            bandwidth: self.bandwidth(),
            min_rtt: self.min_rtt().unwrap_or_default(),
            pacing_rate: self.pacing_rate,
        }
    }

    /// The bandwidth the model runs at: the filter's maximum, under the loss cap and the
    /// negotiated limit.
    fn bandwidth(&self) -> u64 {
        let mut bw = self.bw.max();
        if self.loss_cap > 0 {
            bw = bw.min(self.loss_cap);
        }
        if self.limits.bandwidth > 0 {
            bw = bw.min(self.limits.bandwidth);
        }
        bw
    }

    /// Bandwidth times the minimum RTT (at least [`RTT_FLOOR`]), in bytes.
    fn bdp(&self) -> usize {
        let rtt = self.min_rtt().unwrap_or(self.srtt.get()).max(RTT_FLOOR);
        let bytes = u128::from(self.bandwidth()) * rtt.as_nanos() / 1_000_000_000;
        bytes.min(usize::MAX as u128) as usize
    }

    fn pacing_gain(&self) -> f64 {
        match self.mode {
            CongestionMode::Startup => STARTUP_GAIN,
            CongestionMode::Drain => DRAIN_GAIN,
            CongestionMode::ProbeBandwidth => CYCLE.get(usize::from(self.cycle)).copied().unwrap_or(1.0),
            _ => 1.0,
        }
    }

    /// What the sender puts out per byte it wants delivered on this path.
    fn loss_compensation(&self) -> f64 {
        1.0 / (1.0 - self.random_loss.clamp(0.0, MAX_COMPENSATED_LOSS))
    }

    fn set_pacing_rate(&mut self) {
        let bw = self.bandwidth();
        let rate = if bw == 0 {
            // No sample yet: the initial window over the RTT estimate, at Startup's gain.
            let rtt = self.srtt.get().max(RTT_FLOOR);
            (self.limits.initial_window as f64 / rtt.as_secs_f64()) * STARTUP_GAIN
        } else {
            bw as f64 * self.pacing_gain() * self.loss_compensation()
        };
        // Never slower than the minimum window per round trip: a sparse or lossy flow can
        // sample a tiny delivery rate (a lone frame resent after seconds), and pacing at it
        // would hold its next resend back for as long.
        let floor = (MIN_WINDOW * self.limits.mtu) as f64 / self.srtt.get().max(RTT_FLOOR).as_secs_f64();
        let rate = rate.max(floor);
        let mut rate = if rate.is_finite() { rate.clamp(1.0, u64::MAX as f64) as u64 } else { u64::MAX };
        if self.limits.bandwidth > 0 {
            rate = rate.min(self.limits.bandwidth);
        }
        self.pacing_rate = rate.max(1);
    }

    /// The window the model aims at: twice the BDP (more by the random-loss
    /// compensation), plus three datagrams.
    fn target_window(&self) -> usize {
        let target = self.bdp() as f64 * WINDOW_GAIN * self.loss_compensation();
        (target.min(usize::MAX as f64 / 2.0) as usize).saturating_add(3 * self.limits.mtu)
    }

    /// ProbeRtt's window: half the BDP, at least [`MIN_WINDOW`] datagrams.
    fn probe_rtt_window(&self) -> usize {
        let floor = MIN_WINDOW * self.limits.mtu;
        (self.bdp() / 2).clamp(floor, self.limits.ceiling.max(floor))
    }

    fn set_window(&mut self, acked: usize) {
        let floor = MIN_WINDOW * self.limits.mtu;
        let ceiling = self.limits.ceiling.max(floor);
        if self.mode == CongestionMode::ProbeRtt {
            self.window = self.probe_rtt_window();
            return;
        }
        if self.bandwidth() == 0 {
            // No model yet: grow as slow start would.
            self.window = self.window.saturating_add(acked).clamp(floor, ceiling);
            return;
        }
        let target = self.target_window().min(self.inflight_hi.unwrap_or(usize::MAX));
        self.window = if self.mode == CongestionMode::Startup {
            // Grow by what is acknowledged, up to the target: never cut in Startup.
            self.window.max(self.window.saturating_add(acked).min(target))
        } else {
            self.window.saturating_add(acked).min(target)
        };
        self.window = self.window.clamp(floor, ceiling);
    }

    /// An acknowledgement acknowledged frames.
    pub(crate) fn on_ack(&mut self, now: Time, ack: &AckEvent, path: Path) {
        self.srtt = Nanos::of(path.srtt);
        self.last_ack = Some(now);
        if self.silent {
            self.silent = false;
        }
        // A loss that did not happen is no signal: taken back before the round is judged.
        self.round_lost = self.round_lost.saturating_sub(ack.spurious as u64);
        let round_start = ack.sample.is_some_and(|s| s.prior_delivered >= self.round_ends_at);
        if round_start {
            self.end_round();
            self.round += 1;
            self.round_ends_at = ack.delivered;
        }
        self.round_acked = self.round_acked.saturating_add(ack.acked as u64);
        self.round_max_flight = self.round_max_flight.max(ack.in_flight.saturating_add(ack.acked));
        if let Some(s) = ack.sample {
            self.app_limited = s.app_limited;
        }
        if let Some(s) = ack.sample
            && let Some(rate) = s.rate
            && ((!s.app_limited && self.mode != CongestionMode::ProbeRtt) || rate >= self.bw.max())
        {
            self.bw.insert(self.round, rate);
        }
        if let Some(rtt) = ack.rtt {
            self.round_max_rtt = Nanos::of(self.round_max_rtt.get().max(rtt));
            self.round_min_rtt = Nanos::of(self.round_min_rtt.get().min(rtt));
            let expired = self.min_rtt_at.is_none_or(|t| now.saturating_duration_since(t) > MIN_RTT_WINDOW);
            if self.min_rtt().is_none_or(|m| rtt <= m) || (expired && self.mode != CongestionMode::ProbeRtt) {
                if self.min_rtt().is_none_or(|m| rtt <= m) {
                    self.min_rtt_at = Some(now);
                }
                self.min_rtt = Nanos::of(self.min_rtt().map_or(rtt, |m| if expired { rtt } else { m.min(rtt) }));
            }
        }
        if round_start && self.mode == CongestionMode::Startup {
            self.check_full_pipe();
        }
        self.advance_mode(now, ack);
        self.round_probed |= self.pacing_gain() > 1.0;
        self.set_pacing_rate();
        self.set_window(ack.acked);
    }

    pub(crate) fn reaction(&self) -> Reaction {
        Reaction {
            loss_cap: self.loss_cap,
            shared: self.shared,
            inflight_hi: self.inflight_hi,
            hi_step: self.hi_step,
            random_loss: self.random_loss,
            window: self.window,
            full_bw_rounds: self.full_bw_rounds,
        }
    }

    /// Every loss since `before` proved spurious: the caps a congested round set come off,
    /// the random-loss estimate does not keep what they added, the window comes back
    /// (never lower than it has grown to since), a Startup those losses ended resumes, and
    /// the path is not silent.
    pub(crate) fn undo(&mut self, before: Reaction) {
        self.loss_cap = before.loss_cap;
        self.shared = before.shared;
        self.inflight_hi = before.inflight_hi;
        self.hi_step = before.hi_step;
        self.random_loss = self.random_loss.min(before.random_loss);
        self.window = self.window.max(before.window);
        if self.mode == CongestionMode::Startup {
            self.full_bw_rounds = self.full_bw_rounds.min(before.full_bw_rounds);
        }
        self.silent = false;
        self.set_pacing_rate();
    }

    /// A frame of `bytes` bytes was considered dropped.
    pub(crate) fn on_drop(&mut self, now: Time, bytes: usize, path: Path) {
        self.srtt = Nanos::of(path.srtt);
        self.round_lost += bytes as u64;
        let quiet = self.last_ack.is_none_or(|t| now.saturating_duration_since(t) >= 2 * path.rto);
        if quiet && !self.silent {
            self.silent = true;
            self.resets += 1;
        }
    }

    /// The round that just ended: was it congested?
    fn end_round(&mut self) {
        let (acked, lost) = (self.round_acked, self.round_lost);
        let max_rtt = self.round_max_rtt.get();
        let min_rtt = std::mem::replace(&mut self.round_min_rtt, NO_RTT);
        let probed = std::mem::take(&mut self.round_probed);
        self.round_acked = 0;
        self.round_lost = 0;
        self.round_max_rtt = Nanos::default();
        let share = if lost == 0 { 0.0 } else { lost as f64 / (lost + acked) as f64 };
        // Below the timer granularity a queue cannot be seen (on loopback or a wired LAN a
        // buffer that overflows may add less delay than a millisecond step shows), so no
        // loss there can be told random: all of it counts as a queue's.
        let blind = self.min_rtt().is_some_and(|m| m < QUEUE_VISIBLE);
        let queue = blind
            || self.min_rtt().is_some_and(|m| max_rtt.as_secs_f64() > m.max(RTT_FLOOR).as_secs_f64() * QUEUE_FACTOR);
        // Without a round-trip sample there is no model to judge a loss against (the first
        // flight's losses may be nothing but a lost acknowledgement). With a queue, loss
        // beyond the path's known random loss is congestion; without one, only severe
        // loss two rounds running is (one round of a few frames at 30% random loss, or a
        // burst after a silence, can lose more than half by chance), and not in Startup,
        // whose first rounds are the fewest frames and the noisiest: an overshoot into a
        // buffer too shallow to show a queue stops the delivery rate growing, which ends
        // Startup within three rounds anyway.
        let severe = share > SEVERE_LOSS && self.min_rtt().is_some() && self.mode != CongestionMode::Startup;
        let sustained = severe && self.severe_before;
        self.severe_before = severe;
        let standing = !blind
            && min_rtt != NO_RTT
            && self
                .min_rtt()
                .is_some_and(|m| min_rtt.get().as_secs_f64() > m.max(RTT_FLOOR).as_secs_f64() * QUEUE_FACTOR);
        // More lost than the path's random loss explains (two standard deviations over the
        // expected count, in datagrams; on a clean path any loss).
        let mtu = self.limits.mtu.max(1) as f64;
        let expected = self.random_loss * (lost + acked) as f64 / mtu;
        let beyond_random = lost as f64 / mtu > expected + 2.0 * expected.sqrt();
        let contended = standing && !probed && lost > 0 && beyond_random && self.mode == CongestionMode::ProbeBandwidth;
        let congested = self.min_rtt().is_some()
            && ((queue && share > LOSS_THRESHOLD + self.random_loss) || sustained || contended);
        if contended {
            self.shared = true;
        }
        // Only a round that measured its round trips against a minimum it can trust shows
        // that no queue was there: one with no sample (every acknowledgement for a resend)
        // or in ProbeRtt (whose minimum may be a queued sample taken when the old one
        // expired) says nothing, and taking a queue's losses for random ones feeds back:
        // the pacing compensates for them, which overflows the queue more.
        let measured = max_rtt > Duration::ZERO && self.mode != CongestionMode::ProbeRtt;
        if measured && !queue && lost + acked > 0 {
            self.random_loss = self.random_loss * 7.0 / 8.0 + share / 8.0;
        }
        let flight = std::mem::take(&mut self.round_max_flight);
        if congested {
            let estimate = self.bandwidth();
            if estimate > 0 {
                self.loss_cap = ((estimate as f64 * LOSS_BETA) as u64).max(1);
            }
            let floor = MIN_WINDOW * self.limits.mtu;
            let hi = ((flight as f64 * LOSS_BETA) as usize).max(floor);
            self.inflight_hi = Some(self.inflight_hi.map_or(hi, |h| h.min(hi).max(floor)));
            self.hi_step = self.limits.mtu;
            if self.mode == CongestionMode::Startup {
                // The pipe is full: stop doubling.
                self.full_bw_rounds = FULL_BW_ROUNDS;
            }
        } else {
            if self.loss_cap > 0 {
                let lifted = if self.shared {
                    let rtt = self.min_rtt().unwrap_or(self.srtt.get()).max(RTT_FLOOR);
                    self.loss_cap.saturating_add((self.limits.mtu as f64 / rtt.as_secs_f64()) as u64)
                } else {
                    (self.loss_cap as f64 * CAP_GROWTH) as u64
                };
                let filter = self.bw.max();
                self.loss_cap = if lifted >= filter { 0 } else { lifted.max(self.loss_cap + 1) };
                if self.loss_cap == 0 {
                    self.shared = false;
                }
            }
            if let Some(hi) = self.inflight_hi {
                let raised = hi.saturating_add(self.hi_step);
                self.hi_step = self.hi_step.saturating_mul(2);
                self.inflight_hi = (raised < self.target_window()).then_some(raised);
            }
        }
    }

    /// Startup's exit test, once per round: has the bandwidth stopped growing?
    fn check_full_pipe(&mut self) {
        if self.full_bw_rounds >= FULL_BW_ROUNDS {
            return;
        }
        let bw = self.bandwidth();
        if bw as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
        } else {
            self.full_bw_rounds += 1;
        }
    }

    fn advance_mode(&mut self, now: Time, ack: &AckEvent) {
        let bdp = self.bdp();
        let min_rtt = self.min_rtt().unwrap_or(self.srtt.get());
        match self.mode {
            CongestionMode::Startup if self.full_bw_rounds >= FULL_BW_ROUNDS => self.mode = CongestionMode::Drain,
            CongestionMode::Drain if ack.in_flight <= bdp => self.enter_probe_bandwidth(now),
            CongestionMode::ProbeBandwidth => {
                let gain = self.pacing_gain();
                let full = self.cycle_at.is_none_or(|t| now.saturating_duration_since(t) > min_rtt);
                let next = if gain > 1.0 {
                    full && (self.round_lost > 0 || ack.in_flight as f64 >= gain * bdp as f64)
                } else if gain < 1.0 {
                    full || ack.in_flight <= bdp
                } else {
                    full
                };
                if next {
                    self.cycle = ((usize::from(self.cycle) + 1) % CYCLE.len()) as u8;
                    self.cycle_at = Some(now);
                }
            }
            CongestionMode::ProbeRtt => {
                match self.probe_rtt_done {
                    None if ack.in_flight <= self.probe_rtt_window() => {
                        self.probe_rtt_done = Some((now + PROBE_RTT_TIME.max(min_rtt), self.round + 1));
                    }
                    Some((at, round)) if now >= at && self.round >= round => {
                        self.min_rtt_at = Some(now);
                        self.probe_rtt_done = None;
                        // Its rounds, the flight held down, measured nothing about the
                        // bottleneck: without this, a ProbeRtt longer than the filter (a slow
                        // drain under loss) forgets the bandwidth and restarts from the
                        // probe's own rate.
                        self.bw.postpone(self.round.saturating_sub(self.probe_rtt_from));
                        self.window = self.window.max(self.window_before_probe_rtt);
                        match self.before_probe_rtt {
                            CongestionMode::Startup => self.mode = CongestionMode::Startup,
                            _ => self.enter_probe_bandwidth(now),
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        let stale = self.min_rtt_at.is_some_and(|t| now.saturating_duration_since(t) > MIN_RTT_WINDOW);
        if stale && self.app_limited && self.mode == CongestionMode::ProbeBandwidth {
            // A flow sending less than the path carries (a game's ticks) keeps no queue
            // of its own to drain: its round trips already show the path's, and the
            // minimum just taken from them stands. Holding its flight to half the BDP
            // would only queue its ticks behind the pacer: on a 600 ms path, 0.8 s of
            // them every 10 s (inputs 0.8 s late, states expired).
            self.min_rtt_at = Some(now);
        } else if stale && self.mode != CongestionMode::ProbeRtt {
            self.before_probe_rtt = self.mode;
            self.probe_rtt_from = self.round;
            self.window_before_probe_rtt = self.window;
            self.mode = CongestionMode::ProbeRtt;
            self.probe_rtt_done = None;
        }
    }

    fn enter_probe_bandwidth(&mut self, now: Time) {
        self.mode = CongestionMode::ProbeBandwidth;
        // Start in a cruising phase chosen by the round count, so that flows which
        // started apart do not probe in step.
        self.cycle = (2 + (self.round as usize % (CYCLE.len() - 2))) as u8;
        self.cycle_at = Some(now);
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::transfer::delivery::RateSample;

    const MS: Duration = Duration::from_millis(1);
    const MTU: usize = 1200;

    fn limits() -> Limits {
        Limits { mtu: MTU, initial_window: 10 * MTU, bandwidth: 0, ceiling: 65_536 * MTU }
    }

    fn path() -> Path {
        Path { srtt: 50 * MS, rto: 150 * MS }
    }

    /// Feeds the model a path of `rate` bytes per second and `rtt`, one acknowledgement
    /// per round trip, for `rounds`, with `lost` of each round's bytes lost and the RTT
    /// samples `rtt_seen`. Returns the model.
    fn drive(m: &mut Model, t: &mut Time, rate: u64, rtt: Duration, rounds: u32, lost: f64, rtt_seen: Duration) {
        for _ in 0..rounds {
            round(m, t, rate, rtt, lost, rtt_seen, 1.0);
        }
    }

    /// A model that found a 10 MB/s, 50 ms path and is in ProbeBandwidth, and its clock.
    fn cruising() -> (Model, Time) {
        let mut m = Model::new(limits());
        let mut t = Time::ZERO;
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 10, 0.0, 50 * MS);
        assert_eq!(m.stats().mode, CongestionMode::ProbeBandwidth);
        (m, t)
    }

    /// One round of [`drive`], the flight at its end `flight` times what it acknowledged.
    fn round(m: &mut Model, t: &mut Time, rate: u64, rtt: Duration, lost: f64, rtt_seen: Duration, flight: f64) {
        *t += rtt;
        let acked = (rate as f64 * rtt.as_secs_f64()) as usize;
        let lost_bytes = (acked as f64 * lost) as usize;
        if lost_bytes > 0 {
            m.on_drop(*t, lost_bytes, path());
        }
        let delivered = m.round_ends_at.saturating_add(acked as u64);
        let sample = RateSample { rate: Some(rate), app_limited: false, prior_delivered: m.round_ends_at };
        let in_flight = (acked as f64 * flight) as usize;
        let ack = AckEvent { acked, sample: Some(sample), rtt: Some(rtt_seen), in_flight, delivered, spurious: 0 };
        m.on_ack(*t, &ack, path());
    }

    #[test]
    fn startup_finds_the_bandwidth_and_the_flight_settles_near_the_bdp() {
        let mut m = Model::new(limits());
        let mut t = Time::ZERO;
        assert_eq!(m.stats().mode, CongestionMode::Startup);
        assert!(m.pacing_rate() > 0, "paced from the first datagram");
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 10, 0.0, 50 * MS);
        let s = m.stats();
        assert_eq!(s.bandwidth, 10_000_000);
        assert_eq!(s.min_rtt, 50 * MS);
        assert_eq!(s.mode, CongestionMode::ProbeBandwidth, "plateau found, queue drained");
        // BDP 500 kB; the window is twice that plus three datagrams, at most.
        assert!(m.window() <= 2 * 500_000 + 3 * MTU, "{}", m.window());
        assert!((7_500_000..=12_500_000).contains(&m.pacing_rate()), "{}", m.pacing_rate());
    }

    #[test]
    fn an_application_limited_flow_keeps_its_estimate_however_long() {
        let mut m = Model::new(limits());
        let mut t = Time::ZERO;
        drive(&mut m, &mut t, 1_000_000, 50 * MS, 10, 0.0, 50 * MS);
        assert_eq!(m.stats().bandwidth, 1_000_000);
        // Fifty rounds of a game sending a fiftieth of that, and a lone small resend that
        // measures next to nothing: none of it says the path got slower.
        for rate in std::iter::repeat_n(20_000, 50).chain([69]) {
            t += 50 * MS;
            let delivered = m.round_ends_at + 1_000;
            let sample = RateSample { rate: Some(rate), app_limited: true, prior_delivered: m.round_ends_at };
            let ack = AckEvent {
                acked: 1_000,
                sample: Some(sample),
                rtt: Some(50 * MS),
                in_flight: 1_000,
                delivered,
                spurious: 0,
            };
            m.on_ack(t, &ack, path());
        }
        assert_eq!(m.stats().bandwidth, 1_000_000);
        // A sample that is not application-limited is news: ten rounds later the old
        // estimate has expired.
        drive(&mut m, &mut t, 400_000, 50 * MS, 11, 0.0, 50 * MS);
        assert_eq!(m.stats().bandwidth, 400_000);
    }

    #[test]
    fn random_loss_does_not_shrink_the_model_but_loss_with_a_queue_does_boundedly() {
        let (mut m, mut t) = cruising();
        // 20% loss, round trips at their minimum: random loss.
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 20, 0.2, 50 * MS);
        assert_eq!(m.stats().bandwidth, 10_000_000, "random loss leaves the model alone");
        // No more than that random loss, with a queue: nothing beyond the path's own loss.
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 2, 0.15, 100 * MS);
        assert_eq!(m.stats().bandwidth, 10_000_000, "the path's random loss is no verdict");
        // 35% loss with round trips doubled: a queue overflowing on top of it.
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 1, 0.35, 100 * MS);
        let bw = m.stats().bandwidth;
        assert!((8_000_000..=8_600_000).contains(&bw), "one bounded reduction per round: {bw}");
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 1, 0.35, 100 * MS);
        assert!(m.stats().bandwidth >= bw * 8 / 10, "never more than 15% a round");
        // Clean rounds lift the cap again.
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 10, 0.0, 50 * MS);
        assert_eq!(m.stats().bandwidth, 10_000_000);
    }

    #[test]
    fn loss_under_a_standing_queue_yields_to_a_buffer_filling_flow_and_lifts_as_one_grows() {
        let (mut m, mut t) = cruising();
        // Another flow keeps a queue: every round trip 40 ms above the minimum. A round
        // that lost 0.5%, far under the 2% threshold, is a verdict when the model did not
        // probe in it (its own probe's queue would say nothing about anyone else).
        let mut rounds = 0;
        while m.stats().bandwidth == 10_000_000 && rounds < 10 {
            // The flight a queue of 40 ms holds: 1.8 BDP, which ends a probe phase.
            round(&mut m, &mut t, 10_000_000, 50 * MS, 0.005, 90 * MS, 1.8);
            rounds += 1;
        }
        let cap = m.stats().bandwidth;
        assert!((8_400_000..=8_600_000).contains(&cap), "one 15% step within a probe cycle: {cap} after {rounds}");
        // The cap lifts as a loss-based flow's window grows: a datagram per round trip
        // (1,200 B per 50 ms), not an eighth of the rate per round.
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 10, 0.0, 90 * MS);
        let lifted = m.stats().bandwidth - cap;
        assert!((239_000..=241_000).contains(&lifted), "{lifted}");
        // The same loss at the path's minimum round trip is random loss: no verdict.
        let mut fresh = Model::new(limits());
        let mut t = Time::ZERO;
        drive(&mut fresh, &mut t, 10_000_000, 50 * MS, 10, 0.0, 50 * MS);
        drive(&mut fresh, &mut t, 10_000_000, 50 * MS, 10, 0.005, 50 * MS);
        assert_eq!(fresh.stats().bandwidth, 10_000_000);
    }

    #[test]
    fn below_two_milliseconds_no_loss_is_taken_for_random() {
        // Loopback: 500 us round trips that do not grow while a buffer overflows.
        let mut m = Model::new(limits());
        let mut t = Time::ZERO;
        let rtt = Duration::from_micros(500);
        drive(&mut m, &mut t, 100_000_000, rtt, 10, 0.0, rtt);
        assert_eq!(m.stats().bandwidth, 100_000_000);
        drive(&mut m, &mut t, 100_000_000, rtt, 1, 0.1, rtt);
        let bw = m.stats().bandwidth;
        assert!((80_000_000..=86_000_000).contains(&bw), "a queue's loss: {bw}");
        // And nothing learned as random loss to pace for.
        assert!(m.pacing_rate() <= (bw as f64 * 1.25) as u64 + 1, "{} for {bw}", m.pacing_rate());
    }

    #[test]
    fn severe_loss_without_a_queue_is_congestion_only_when_it_lasts() {
        let (mut m, mut t) = cruising();
        // One round losing 60% (a burst, or chance over few frames): no verdict.
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 1, 1.5, 50 * MS);
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 1, 0.0, 50 * MS);
        assert_eq!(m.stats().bandwidth, 10_000_000);
        // Two running (a policer, a collapse): one bounded reduction.
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 3, 1.5, 50 * MS);
        let bw = m.stats().bandwidth;
        assert!((7_000_000..10_000_000).contains(&bw), "{bw}");
    }

    #[test]
    fn the_negotiated_bandwidth_caps_the_rate_and_arithmetic_saturates() {
        let mut m = Model::new(Limits { bandwidth: 100_000, ..limits() });
        let mut t = Time::ZERO;
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 12, 0.0, 50 * MS);
        assert!(m.pacing_rate() <= 100_000);
        // A zero RTT, a rate of zero and one near the maximum, an RTT of hours.
        let mut z = Model::new(limits());
        drive(&mut z, &mut t, 0, Duration::ZERO, 3, 0.0, Duration::ZERO);
        drive(&mut z, &mut t, u64::MAX / 2, Duration::from_secs(3600 * 5), 3, 0.0, Duration::from_secs(3600 * 5));
        assert!(z.window() >= MIN_WINDOW * MTU && z.window() <= 65_536 * MTU);
        assert!(z.pacing_rate() >= 1);
    }

    #[test]
    fn a_silent_path_gets_the_minimum_window_until_an_acknowledgement() {
        let (mut m, mut t) = cruising();
        let before = m.window();
        m.on_drop(t + 400 * MS, 1200, path());
        assert_eq!(m.window(), MIN_WINDOW * MTU);
        assert_eq!(m.resets(), 1);
        drive(&mut m, &mut t, 10_000_000, 50 * MS, 1, 0.0, 50 * MS);
        assert!(m.window() >= before / 2, "restored by an acknowledgement");
    }

    #[test]
    fn a_stale_minimum_rtt_is_probed() {
        let (mut m, mut t) = cruising();
        // Eleven seconds of round trips above the minimum: ProbeRtt.
        drive(&mut m, &mut t, 10_000_000, 60 * MS, 190, 0.0, 60 * MS);
        assert!(m.stats().mode == CongestionMode::ProbeRtt || m.stats().min_rtt == 60 * MS, "{:?}", m.stats());
    }

    #[test]
    fn an_application_limited_flow_is_not_held_down_to_probe_the_rtt() {
        // A game on a 600 ms path with 20 ms of jitter: its ticks fill the flight the
        // model allows, never more, and its samples rarely match the first minimum.
        let mut m = Model::new(limits());
        let mut t = Time::ZERO;
        drive(&mut m, &mut t, 20_000, 600 * MS, 10, 0.0, 600 * MS);
        let window = m.window();
        for round in 0..40u32 {
            t += 600 * MS;
            let acked = 12_000;
            let delivered = m.round_ends_at.saturating_add(acked as u64);
            let sample = RateSample { rate: Some(20_000), app_limited: true, prior_delivered: m.round_ends_at };
            let rtt = (610 + round % 3 * 5) * MS;
            let ack =
                AckEvent { acked, sample: Some(sample), rtt: Some(rtt), in_flight: acked, delivered, spurious: 0 };
            m.on_ack(t, &ack, path());
            assert_ne!(m.stats().mode, CongestionMode::ProbeRtt, "round {round}");
            assert!(m.window() >= window, "round {round}: {} < {window}", m.window());
        }
        // Past the 10 s window, the minimum is one the flow saw lately.
        assert!(m.stats().min_rtt >= 610 * MS, "{:?}", m.stats());
        // The same path with the flow sending all it may: probed as before.
        let mut busy = Model::new(limits());
        let mut t = Time::ZERO;
        drive(&mut busy, &mut t, 20_000, 600 * MS, 10, 0.0, 600 * MS);
        drive(&mut busy, &mut t, 20_000, 600 * MS, 20, 0.0, 610 * MS);
        assert_eq!(busy.stats().mode, CongestionMode::ProbeRtt);
    }

    #[test]
    fn a_long_probe_rtt_forgets_neither_the_bandwidth_nor_the_window() {
        let (mut m, mut t) = cruising();
        drive(&mut m, &mut t, 10_000_000, 55 * MS, 150, 0.0, 55 * MS);
        let window = m.window();
        // Past ten seconds without the minimum: ProbeRtt.
        drive(&mut m, &mut t, 10_000_000, 55 * MS, 40, 0.0, 55 * MS);
        assert_eq!(m.stats().mode, CongestionMode::ProbeRtt);
        // Half the BDP, not four datagrams.
        assert!(m.window() >= 200_000 && m.window() < window / 2, "{} of {window}", m.window());
        // Fifteen rounds at the probe's own rate (resends going out a few a round trip)
        // before it ends: longer than the bandwidth filter remembers.
        drive(&mut m, &mut t, 20_000, 50 * MS, 15, 0.0, 50 * MS);
        assert_eq!(m.stats().mode, CongestionMode::ProbeBandwidth);
        assert_eq!(m.stats().bandwidth, 10_000_000);
        assert!(m.window() >= window, "{} < {window}", m.window());
    }
}
