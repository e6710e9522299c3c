//! The receiving half of the transfer layer: the receive window and the acknowledgement
//! queue (spec §3.1, §3.1.1).
//!
//! `i_b` is one past the newest frame received. A frame `k` is accepted when it lies in
//! the receive window `[i_b - N_P, i_b + N_P)` (equation (2)) and advances `i_b` to `k + 1`
//! when it lies in `[i_b, i_b + N_P)` (equation (3)).
//!
//! Acknowledgements are *delayed* while a ride is expected soon: one that would go alone
//! waits for the next frame expected from this side (a game's tick), so a connection with
//! data both ways costs one datagram per tick, not two ([`Cadence`]); and while the peer's
//! frames arrive at a steady rhythm (a tick, not a bulk flow: [`MIN_RHYTHM_GAP`]), for its
//! next frame, so a one-way stream is acknowledged every second frame, not every frame. Either wait ends by
//! [`MAX_ACK_DELAY`]. A side with neither rhythm acknowledges at once, as does any side
//! when two frames wait for an acknowledgement (a sender's flight keeps moving) or a frame
//! arrived out of order or again (a sender waiting to learn of a loss, or one whose
//! acknowledgements were lost). The acknowledgement says how long its newest frame was
//! held, so the sender's round-trip samples stay exact.
//!
//! Received ids are kept as ranges, newest first. Each range is repeated in the next
//! [`ACK_REPEATS`] ack sections after it last grew, so one lost acknowledgement costs no
//! resend; a frame received again (its acknowledgement was lost every time) re-arms its
//! range. Only ids within the window are kept, and at most [`MAX_RANGES`] ranges (the
//! oldest go first): forgetting an old range is safe, since a sender still waiting for it
//! resends and is acknowledged anew.

use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

use crate::lean::Nanos;
use crate::seq::SeqSpace;
use crate::wire::{ACK_DELAY_UNIT, AckRange};

/// The longest an acknowledgement waits for a ride: a 50 Hz tick and a quarter, as
/// QUIC's default.
pub(crate) const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

/// The shortest gap between the peer's frames worth waiting for: a faster stream is a
/// bulk flow (more than 250 frames a second), which the two-frame rule already
/// acknowledges in pairs and whose sender's loss detection and controller are best
/// served by acknowledgements at once.
pub(crate) const MIN_RHYTHM_GAP: Duration = Duration::from_millis(4);

/// [`MAX_ACK_DELAY`] and [`MIN_RHYTHM_GAP`] in microseconds, as the peer's rhythm is kept
/// (both far below `u32::MAX` microseconds).
const MAX_ACK_DELAY_US: u32 = MAX_ACK_DELAY.as_micros() as u32;
const MIN_RHYTHM_GAP_US: u32 = MIN_RHYTHM_GAP.as_micros() as u32;

/// This side's rhythm of sending frames, which tells how long an acknowledgement owed can
/// wait for the next one: only while a frame is expected soon. Waiting on a side that
/// sends nothing would only slow the sender's loss detection.
#[derive(Debug, Default)]
pub(crate) struct Cadence {
    /// When this side last sent a frame.
    last: Option<Time>,
    /// Smoothed time between the instants this side sends frames (several frames of
    /// one flush count once).
    gap: Nanos,
}

impl Cadence {
    /// This side sent a frame at `now`.
    pub(crate) fn on_frame_sent(&mut self, now: Time) {
        if let Some(last) = self.last {
            // A pause enters the average as at most a couple of waits, so the rhythm is
            // found again within a few ticks of the game resuming.
            let gap = now.saturating_duration_since(last).min(2 * MAX_ACK_DELAY);
            if !gap.is_zero() {
                let old = self.gap.get();
                self.gap = Nanos::of(if old.is_zero() { gap } else { (old * 7 + gap) / 8 });
            }
        }
        self.last = Some(now);
    }

    /// When this side last sent a frame.
    pub(crate) fn last(&self) -> Option<Time> {
        self.last
    }

    /// The smoothed time between this side's sends (zero before the second).
    pub(crate) fn gap(&self) -> Duration {
        self.gap.get()
    }

    /// When this side's next frame is expected, a quarter of a gap late, if it keeps a
    /// rhythm of at most [`MAX_ACK_DELAY`].
    fn expected(&self) -> Option<Time> {
        let (last, gap) = (self.last?, self.gap.get());
        (!gap.is_zero() && gap <= MAX_ACK_DELAY).then(|| last + gap + gap / 4)
    }

    /// How long the peer may hold an acknowledgement waiting for this side's next frame
    /// (its receiver waits for our rhythm as we wait for its): the resend timer allows
    /// for it, or the first of every two frames of a one-way stream would time out.
    pub(crate) fn peer_wait(&self) -> Duration {
        // Half the peer's threshold: a gap near it may be measured above it there.
        let gap = self.gap.get();
        if gap < MIN_RHYTHM_GAP / 2 || gap > MAX_ACK_DELAY {
            Duration::ZERO
        } else {
            (gap + gap / 4).min(MAX_ACK_DELAY)
        }
    }

    /// The latest something owed since `since` waits for a ride: the first not overdue
    /// of this side's next frame and `also` (another moment a ride is expected), capped
    /// at [`MAX_ACK_DELAY`] after `since`; `since` itself when none is expected.
    pub(crate) fn ride_by(&self, since: Time, also: Option<Time>) -> Time {
        [self.expected(), also]
            .into_iter()
            .flatten()
            .filter(|&t| t >= since)
            .min()
            .map_or(since, |t| t.min(since + MAX_ACK_DELAY))
    }
}

/// The largest delay reported, in [`ACK_DELAY_UNIT`]s: the most a 3-byte varint holds.
const MAX_DELAY_UNITS: u32 = 0x1F_FFFF;

/// How many ack sections repeat each range.
pub(crate) const ACK_REPEATS: u8 = 3;
/// Most ranges remembered (and sent in one section).
pub(crate) const MAX_RANGES: usize = crate::wire::MAX_ACK_RANGES;

/// A range of received frame ids and how many more ack sections should carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KeptRange {
    first: u32,
    last: u32,
    repeats: u8,
}

#[derive(Debug)]
pub(crate) struct Receiver {
    i_b: u32,
    window: u32,
    /// Newest first; disjoint and non-adjacent.
    ranges: VecDeque<KeptRange>,
    /// A frame arrived since the last ack section: an acknowledgement is due.
    fresh: bool,
    /// Frames recorded since the last ack section.
    unacked: u16,
    /// Smoothed time between the arrivals of new frames, in microseconds (at most
    /// `2 * MAX_ACK_DELAY`; 0 while unknown): the peer's rhythm, which tells whether its
    /// next frame is worth waiting for. Four bytes, so the receiver stays as small.
    arrival_gap_us: u32,
    /// A frame arrived out of order, or again, since the last ack section.
    reordered: bool,
    /// When the oldest frame the next acknowledgement covers arrived.
    held_since: Option<Time>,
    /// When the newest frame (`i_b - 1`) arrived.
    newest_at: Option<Time>,
}

impl Receiver {
    pub(crate) fn new(first_id: u32, window: u32) -> Self {
        Self {
            i_b: first_id,
            window,
            ranges: VecDeque::new(),
            fresh: false,
            unacked: 0,
            arrival_gap_us: 0,
            reordered: false,
            held_since: None,
            newest_at: None,
        }
    }

    /// Bytes of the acknowledgement ranges' storage.
    pub(crate) fn memory(&self) -> usize {
        self.ranges.capacity() * size_of::<KeptRange>()
    }

    /// One past the newest frame received.
    pub(crate) fn base(&self) -> u32 {
        self.i_b
    }

    /// Expands a frame id sent as its low `bytes` bytes.
    pub(crate) fn expand(&self, truncated: u32, bytes: u32) -> u32 {
        SeqSpace::FRAME.expand(truncated, 8 * bytes, self.i_b)
    }

    /// Equation (2): whether `k` lies in the receive window.
    pub(crate) fn in_window(&self, k: u32) -> bool {
        let s = SeqSpace::FRAME;
        s.in_range(k, s.sub(self.i_b, self.window), 2 * u64::from(self.window))
    }

    /// Records the receipt of frame `k` at `now` (already checked with
    /// [`Receiver::in_window`]).
    pub(crate) fn record(&mut self, k: u32, now: Time) {
        let s = SeqSpace::FRAME;
        if s.in_range(k, self.i_b, u64::from(self.window)) {
            // Newer than anything so far; a skip over ids is a gap the sender should hear
            // of soon (the skipped ids a sender consumes on purpose look the same, rarely).
            self.reordered |= k != self.i_b && self.newest_at.is_some();
            self.i_b = s.add(k, 1);
            if let Some(prev) = self.newest_at {
                self.observe_gap(now.saturating_duration_since(prev));
            }
            self.newest_at = Some(now);
        } else {
            // Older: a gap filled late, or a frame received again.
            self.reordered = true;
        }
        self.fresh = true;
        self.unacked = self.unacked.saturating_add(1);
        self.held_since.get_or_insert(now);
        self.insert(k);
        self.trim();
    }

    /// Folds the time since the previous new frame into the peer's rhythm. Frames that
    /// arrive together count once, and a pause as at most a couple of waits, so a rhythm
    /// is found again within a few frames of the peer resuming.
    fn observe_gap(&mut self, gap: Duration) {
        let us = u32::try_from(gap.min(2 * MAX_ACK_DELAY).as_micros()).unwrap_or(u32::MAX);
        if us > 0 {
            let old = self.arrival_gap_us;
            self.arrival_gap_us = if old == 0 { us } else { (old * 7 + us) / 8 };
        }
    }

    /// When the peer's next frame is expected, a quarter of a gap late, if its frames
    /// arrive at a rhythm between [`MIN_RHYTHM_GAP`] and [`MAX_ACK_DELAY`].
    pub(crate) fn next_arrival(&self) -> Option<Time> {
        let gap = Duration::from_micros(u64::from(self.arrival_gap_us));
        let last = self.newest_at?;
        (MIN_RHYTHM_GAP..=MAX_ACK_DELAY).contains(&gap).then(|| last + gap + gap / 4)
    }

    /// How long after `at` the first of the peer's frames arrives, at its rhythm (0 when it
    /// keeps none): the frames it sends arrive a gap apart from the newest one's arrival,
    /// so an acknowledgement that reaches it to ride its next frame comes back on the first
    /// of them at or after `at`.
    pub(crate) fn wait_for_arrival(&self, at: Time) -> Nanos {
        let gap_us = self.arrival_gap_us;
        let Some(last) = self.newest_at.filter(|_| (MIN_RHYTHM_GAP_US..=MAX_ACK_DELAY_US).contains(&gap_us)) else {
            return Nanos::default();
        };
        // The arrivals are `last + k gap` for every whole k: the first at or after `at` is
        // `(last - at) mod gap` after it, on either side of `last`.
        let wait = last.nanos().saturating_sub(at.nanos()).rem_euclid(i64::from(gap_us) * 1_000);
        Nanos(wait.unsigned_abs())
    }

    /// Age of `id` relative to the newest id received: 0 for the newest.
    fn age(&self, id: u32) -> u32 {
        SeqSpace::FRAME.distance(id, SeqSpace::FRAME.sub(self.i_b, 1))
    }

    fn insert(&mut self, k: u32) {
        let s = SeqSpace::FRAME;
        let a = self.age(k);
        // Ranges are newest first, so ages grow along the deque.
        let pos = self.ranges.partition_point(|r| self.age(r.first) < a);
        // `pos` is the first range whose oldest id is at least as old as `k`.
        let inside = self.ranges.get(pos).is_some_and(|r| self.age(r.last) <= a);
        if inside {
            if let Some(r) = self.ranges.get_mut(pos) {
                r.repeats = ACK_REPEATS; // already inside: acknowledge again
            }
            return;
        }
        let joins_newer = pos > 0 && self.ranges.get(pos - 1).is_some_and(|r| s.sub(r.first, 1) == k);
        let joins_older = self.ranges.get(pos).is_some_and(|r| s.add(r.last, 1) == k);
        match (joins_newer, joins_older) {
            (true, true) => {
                let older = self.ranges.remove(pos);
                if let (Some(newer), Some(older)) = (self.ranges.get_mut(pos - 1), older) {
                    newer.first = older.first;
                    newer.repeats = ACK_REPEATS;
                }
            }
            (true, false) => {
                if let Some(r) = self.ranges.get_mut(pos - 1) {
                    r.first = k;
                    r.repeats = ACK_REPEATS;
                }
            }
            (false, true) => {
                if let Some(r) = self.ranges.get_mut(pos) {
                    r.last = k;
                    r.repeats = ACK_REPEATS;
                }
            }
            (false, false) => {
                crate::lean::room_for_first(&mut self.ranges);
                self.ranges.insert(pos, KeptRange { first: k, last: k, repeats: ACK_REPEATS });
            }
        }
    }

    fn trim(&mut self) {
        // Keep ids inside [i_b - N_P, i_b).
        let limit = self.window - 1;
        while self.ranges.back().is_some_and(|r| self.age(r.last) > limit) {
            self.ranges.pop_back();
        }
        // At most MAX_RANGES: forget the oldest range already repeated in full, so a
        // frame arriving behind many such ranges (a resend whose acknowledgements were all
        // lost) is still acknowledged; only when every range still waits to be repeated
        // does the oldest go.
        while self.ranges.len() > MAX_RANGES {
            match self.ranges.iter().rposition(|r| r.repeats == 0) {
                Some(i) => self.ranges.remove(i),
                None => self.ranges.pop_back(),
            };
        }
        let s = SeqSpace::FRAME;
        let oldest = s.sub(self.i_b, self.window);
        let clip = self.ranges.back().is_some_and(|r| self.age(r.first) > limit);
        if clip && let Some(r) = self.ranges.back_mut() {
            r.first = oldest;
        }
    }

    /// Whether an acknowledgement must be sent: a frame arrived since the last ack section
    /// and its range is still to be sent (a frame whose range was forgotten at once has
    /// nothing to say).
    pub(crate) fn ack_due(&self) -> bool {
        self.fresh && self.has_repeats()
    }

    /// Whether a due acknowledgement must go now, alone if nothing else goes: two frames
    /// wait for it, one arrived out of order or again, or it has waited as long as
    /// this side's `cadence` and the peer's rhythm allow.
    pub(crate) fn ack_urgent(&self, now: Time, cadence: &Cadence) -> bool {
        self.ack_deadline(cadence).is_some_and(|t| now >= t)
    }

    /// When a due acknowledgement stops waiting for a ride.
    pub(crate) fn ack_deadline(&self, cadence: &Cadence) -> Option<Time> {
        let since = self.held_since.filter(|_| self.ack_due())?;
        // Waiting for the peer's next frame ends in an acknowledgement of two frames, sent
        // at once when that frame arrives.
        Some(if self.unacked >= 2 || self.reordered { since } else { cadence.ride_by(since, self.next_arrival()) })
    }

    /// How long ago the newest frame arrived, at `now`, in [`ACK_DELAY_UNIT`]s: the hold
    /// of its first acknowledgement, or, when that was lost and a repeat carries it, the
    /// time since (which keeps the sender's sample exact all the same).
    pub(crate) fn ack_delay(&self, now: Time) -> u32 {
        let held = self.newest_at.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        // At most three bytes on the wire (67 s): a longer time says nothing more.
        u32::try_from(held.as_nanos() / ACK_DELAY_UNIT.as_nanos()).unwrap_or(u32::MAX).min(MAX_DELAY_UNITS)
    }

    /// Whether any range still wants repeating.
    pub(crate) fn has_repeats(&self) -> bool {
        self.ranges.iter().any(|r| r.repeats > 0)
    }

    /// The ranges the next ack section should carry, newest first, as many as fit an ack
    /// section of `max_bytes` (an acknowledgement alone must fit the smallest datagram).
    pub(crate) fn ranges_to_send(&self, out: &mut smallvec::SmallVec<[AckRange; MAX_RANGES]>, max_bytes: usize) {
        out.clear();
        let mut len = 0;
        for r in self.ranges.iter().filter(|r| r.repeats > 0) {
            let range = AckRange { first: r.first, last: r.last };
            let more = crate::wire::ack_range_len(out.last(), &range);
            if len + more > max_bytes {
                break;
            }
            len += more;
            out.push(range);
        }
    }

    /// The first `n` ranges that [`Receiver::ranges_to_send`] returned went out.
    pub(crate) fn sent(&mut self, n: usize) {
        for r in self.ranges.iter_mut().filter(|r| r.repeats > 0).take(n) {
            r.repeats -= 1;
        }
        self.fresh = false;
        self.unacked = 0;
        self.reordered = false;
        self.held_since = None;
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use smallvec::SmallVec;

    fn ranges(r: &Receiver) -> Vec<(u32, u32)> {
        let mut out = SmallVec::new();
        r.ranges_to_send(&mut out, usize::MAX);
        out.iter().map(|a| (a.first, a.last)).collect()
    }

    /// Fills `r` with `MAX_RANGES` one-frame ranges from `from` and sends each three times.
    fn full_and_acknowledged(r: &mut Receiver, from: u32) {
        for k in (from..from + 2 * MAX_RANGES as u32).step_by(2) {
            r.record(k, Time::ZERO);
        }
        while r.has_repeats() {
            let n = ranges(r).len();
            r.sent(n);
        }
        assert!(!r.ack_due());
    }

    #[test]
    fn a_frame_older_than_every_kept_range_is_still_acknowledged() {
        // A resent frame whose acknowledgements were all lost arrives behind 64 ranges
        // that were acknowledged three times each: it must be acknowledged (or its sender
        // resends it forever), and an acknowledgement is due only with something to say.
        let mut r = Receiver::new(0, 65_536);
        full_and_acknowledged(&mut r, 1000);
        r.record(10, Time::ZERO);
        assert!(r.ack_due());
        assert_eq!(ranges(&r), [(10, 10)]);
        // Acknowledged ranges make way; those still to be repeated stay.
        let mut q = Receiver::new(0, 65_536);
        for k in (1000..1000 + 2 * MAX_RANGES as u32).step_by(2) {
            q.record(k, Time::ZERO);
        }
        q.record(10, Time::ZERO);
        // With every range still to be repeated, the oldest goes: its sender resends it
        // later, when older ranges have been repeated and make way.
        assert_eq!(ranges(&q).len(), MAX_RANGES);
        assert!(!ranges(&q).contains(&(10, 10)) && ranges(&q).contains(&(1000, 1000)));
    }

    #[test]
    fn an_acknowledgement_due_always_has_a_range_to_send() {
        let mut r = Receiver::new(0, 65_536);
        full_and_acknowledged(&mut r, 1000);
        // A duplicate of a frame whose range is kept re-arms that range.
        r.record(1000, Time::ZERO);
        assert!(r.ack_due() && ranges(&r) == [(1000, 1000)]);
        r.sent(1);
        // Outside the window: never recorded (the caller checks), nothing due.
        assert!(!r.in_window(1000 + 2 * 65_536));
    }

    #[test]
    fn ranges_sent_fit_the_byte_budget() {
        let mut r = Receiver::new(0, 65_536);
        for k in (0..4000).step_by(3) {
            r.record(k, Time::ZERO);
        }
        for budget in [10, 40, 117, 300, 1000] {
            let mut out = SmallVec::new();
            r.ranges_to_send(&mut out, budget);
            assert!(!out.is_empty());
            assert!(crate::wire::ack_section_len(&out) <= budget, "{budget}");
            // The next range would not have fit.
            let mut more = SmallVec::new();
            r.ranges_to_send(&mut more, usize::MAX);
            if out.len() < more.len() {
                assert!(crate::wire::ack_section_len(&more[..=out.len()]) > budget);
            }
        }
    }

    #[test]
    fn window_and_advance_follow_equations_2_and_3() {
        let mut r = Receiver::new(u32::MAX - 1, 4);
        assert!(r.in_window(u32::MAX - 5) && !r.in_window(u32::MAX - 6));
        assert!(r.in_window(1) && !r.in_window(2));
        r.record(1, Time::ZERO); // across the wrap, inside [i_b, i_b + N_P)
        assert_eq!(r.base(), 2);
        r.record(u32::MAX, Time::ZERO); // older: accepted, no advance
        assert_eq!(r.base(), 2);
        assert_eq!(ranges(&r), [(1, 1), (u32::MAX, u32::MAX)]);
    }

    #[test]
    fn ranges_merge_and_repeat_three_times() {
        let mut r = Receiver::new(100, 65_536);
        for k in [100, 101, 103, 102, 106] {
            r.record(k, Time::ZERO);
        }
        assert_eq!(ranges(&r), [(106, 106), (100, 103)]);
        assert!(r.ack_due());
        for _ in 0..3 {
            assert_eq!(ranges(&r).len(), 2);
            r.sent(2);
        }
        assert!(!r.ack_due() && !r.has_repeats());
        assert!(ranges(&r).is_empty());
        // Receiving an old frame again re-arms just its range.
        r.record(101, Time::ZERO);
        assert_eq!(ranges(&r), [(100, 103)]);
    }

    #[test]
    fn ranges_stay_inside_the_window_and_bounded() {
        let mut r = Receiver::new(0, 16);
        for k in (0..40).step_by(2) {
            r.record(k, Time::ZERO);
        }
        // Window of 16: ids 23..=38 may remain, the even ones of them.
        assert_eq!(ranges(&r).len(), 8);
        assert!(ranges(&r).iter().all(|&(f, _)| f >= 24));
        let mut big = Receiver::new(0, 65_536);
        for k in (0..1000).step_by(2) {
            big.record(k, Time::ZERO);
        }
        assert_eq!(ranges(&big).len(), MAX_RANGES);
    }

    #[test]
    fn a_steady_one_way_stream_is_acknowledged_every_second_frame() {
        // A side that sends nothing of its own, receiving a frame every 16 ms.
        let (t, ms) = (Time::ZERO, Duration::from_millis(1));
        let own = Cadence::default();
        let mut r = Receiver::new(0, 65_536);
        let mut acks = 0;
        for k in 0..60u32 {
            let now = t + 16 * k * ms;
            r.record(k, now);
            let deadline = r.ack_deadline(&own).unwrap();
            if k >= 4 && k % 2 == 1 {
                assert!(deadline <= now, "frame {k}: the second of two is acknowledged at once");
            } else if k >= 4 {
                // Held for the next frame (due a quarter gap late), within MAX_ACK_DELAY.
                assert!(deadline > now + 16 * ms && deadline <= now + MAX_ACK_DELAY, "frame {k}");
            }
            if k < 4 || deadline <= now {
                r.sent(ranges(&r).len());
                acks += 1;
            }
        }
        assert!(acks <= 60 / 2 + 4, "{acks} acknowledgements for 60 frames");
        // The peer falls silent: the held frame is acknowledged by MAX_ACK_DELAY at the latest.
        assert!(r.ack_deadline(&own).is_none_or(|d| d <= t + 16 * 59 * ms + MAX_ACK_DELAY));
    }

    #[test]
    fn a_frame_after_silence_or_a_gap_is_acknowledged_at_once() {
        let (t, ms) = (Time::ZERO, Duration::from_millis(1));
        let own = Cadence::default();
        let mut r = Receiver::new(0, 65_536);
        // Frames 100 ms apart: no rhythm worth waiting for.
        for k in 0..5u32 {
            let now = t + 100 * k * ms;
            r.record(k, now);
            assert_eq!(r.ack_deadline(&own), Some(now), "frame {k}");
            r.sent(ranges(&r).len());
        }
        // A bulk flow's frames, 1 ms apart: no wait for the next (the sender's flight and
        // loss detection want every acknowledgement at once).
        let mut bulk = Receiver::new(0, 65_536);
        for k in 0..20u32 {
            let now = t + k * ms;
            bulk.record(k, now);
            assert_eq!(bulk.ack_deadline(&own), Some(now), "frame {k}");
            bulk.sent(ranges(&bulk).len());
        }
        // A steady stream whose next frame skips an id (a loss): at once.
        let mut q = Receiver::new(0, 65_536);
        for k in 0..6u32 {
            q.record(k, t + 16 * k * ms);
            q.sent(ranges(&q).len());
        }
        q.record(7, t + 16 * 7 * ms);
        assert_eq!(q.ack_deadline(&own), Some(t + 16 * 7 * ms));
    }

    #[test]
    fn the_peer_wait_covers_the_hold_for_this_sides_next_frame() {
        let (t, ms) = (Time::ZERO, Duration::from_millis(1));
        let mut c = Cadence::default();
        assert_eq!(c.peer_wait(), Duration::ZERO, "no rhythm, no wait");
        for i in 0..20u32 {
            c.on_frame_sent(t + 16 * i * ms);
        }
        assert_eq!(c.peer_wait(), 20 * ms, "a gap and a quarter");
        let mut slow = Cadence::default();
        for i in 0..20u32 {
            slow.on_frame_sent(t + 40 * i * ms);
        }
        assert_eq!(slow.peer_wait(), Duration::ZERO, "a rhythm slower than MAX_ACK_DELAY is not waited for");
    }

    #[test]
    fn the_wait_for_the_peers_next_frame_follows_its_rhythm_from_any_instant() {
        let (t, ms) = (Time::ZERO, Duration::from_millis(1));
        let mut r = Receiver::new(0, 1024);
        let wait = |r: &Receiver, at| r.wait_for_arrival(at).get();
        assert_eq!(wait(&r, t), Duration::ZERO, "no rhythm yet");
        // Frames every 16 ms, the newest at 160 ms.
        for k in 0..=10u32 {
            r.record(k, t + 16 * k * ms);
        }
        assert_eq!(wait(&r, t + 160 * ms), Duration::ZERO, "one arrives then");
        assert_eq!(wait(&r, t + 163 * ms), 13 * ms, "the next at 176 ms");
        assert_eq!(wait(&r, t + 200 * ms), 8 * ms, "two gaps on, at 208 ms");
        assert_eq!(wait(&r, t + 150 * ms), 10 * ms, "before the newest: the newest");
        assert_eq!(wait(&r, t + 140 * ms), 4 * ms, "earlier still: the one before");
        let mut bulk = Receiver::new(0, 1024);
        for k in 0..=10u32 {
            bulk.record(k, t + k * ms);
        }
        assert_eq!(wait(&bulk, t + 20 * ms), Duration::ZERO, "a bulk flow keeps no rhythm to wait for");
    }
}
