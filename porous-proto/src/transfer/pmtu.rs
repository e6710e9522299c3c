//! Path MTU discovery for one direction (RFC 8899's datagram PLPMTUD, simplified): the
//! largest datagram the path to the peer carries, found with probes.
//!
//! A connection starts at the negotiated size (the *base*, which every path is assumed to
//! carry) and, when the host allows a larger *ceiling*, searches upwards: a probe is a
//! datagram of the size tried, padded, carrying a ping and nothing of the application's.
//! Its echo confirms the size, which datagrams then use; [`MAX_PROBES`] probes of one size
//! unanswered (each given a resend timeout) mark it too large. The search tries the
//! ceiling first (the usual case: the path carries it), then halves the interval until it
//! is narrower than [`STEP`]. A search that ended below the ceiling runs again after
//! [`RAISE_INTERVAL`] (the path may have grown).
//!
//! Black holes: a path that stops carrying the confirmed size shows as frames larger than
//! the base lost while none of them is acknowledged. After [`BLACK_HOLE_LOSSES`] such
//! losses in a row the size falls back to the base at once and a new search starts. A
//! lost frame counts only if no frame at least as large, sent with it or after it, has
//! been acknowledged: such a frame proves the path still carried the size when the lost
//! one went, so the loss was the path's ordinary loss (losses are judged once per batch
//! of acknowledgements, so "none acknowledged in between" alone would count a batch's
//! random losses in a row).
//!
//! Invariants: `base <= current <= ceiling`; `low` is a confirmed size and `high` the
//! largest not yet found too large, `low <= high`; one probe is outstanding at most.

use std::time::Duration;

use crate::time::Time;

/// Probes of one size sent without an echo before the size counts as too large (RFC 8899's
/// MAX_PROBES).
pub(crate) const MAX_PROBES: u8 = 3;
/// The search stops once the sizes still unknown span fewer bytes than this.
pub(crate) const STEP: usize = 16;
/// A search that ended below the ceiling runs again this long after (RFC 8899's
/// PMTU_RAISE_TIMER).
pub(crate) const RAISE_INTERVAL: Duration = Duration::from_secs(600);
/// Frames larger than the base lost in a row, none acknowledged in between, that reveal a
/// black hole.
pub(crate) const BLACK_HOLE_LOSSES: u8 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The ceiling is the base: nothing to find.
    Off,
    /// Probing `target`.
    Searching,
    /// Done; searches again at this time, if ever.
    Done(Option<Time>),
}

/// What the search counted, for [`crate::stats::TransferStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) probes_sent: u64,
    pub(crate) probes_lost: u64,
    pub(crate) black_holes: u64,
}

#[derive(Debug)]
pub(crate) struct Discovery {
    base: u32,
    ceiling: u32,
    current: u32,
    low: u32,
    high: u32,
    target: u32,
    phase: Phase,
    /// The probe of `target` in flight: its ping id and when it went.
    outstanding: Option<(u8, Time)>,
    /// Probes of `target` sent so far.
    tries: u8,
    /// Frames larger than the base lost since one was last acknowledged.
    lost_large: u8,
    /// The latest transmission larger than the base known to have arrived: when it went,
    /// and its size.
    passed: Option<(Time, usize)>,
    counts: Counts,
}

impl Discovery {
    /// A search between `base` (the size every datagram starts at) and `ceiling` (the
    /// largest this side may send); off when the ceiling is not above the base.
    pub(crate) fn new(base: usize, ceiling: usize) -> Self {
        let (base, ceiling) = (base as u32, ceiling.max(base) as u32);
        let mut d = Self {
            base,
            ceiling,
            current: base,
            low: base,
            high: ceiling,
            target: ceiling,
            phase: Phase::Off,
            outstanding: None,
            tries: 0,
            lost_large: 0,
            passed: None,
            counts: Counts::default(),
        };
        if ceiling > base {
            d.search();
        }
        d
    }

    /// The size datagrams use now.
    pub(crate) fn current(&self) -> usize {
        self.current as usize
    }

    /// The largest size this side may send or take.
    pub(crate) fn ceiling(&self) -> usize {
        self.ceiling as usize
    }

    pub(crate) fn counts(&self) -> Counts {
        self.counts
    }

    /// Whether a frame of `size` flight bytes (frame id, type and check included) is
    /// larger than a datagram of the base could carry.
    pub(crate) fn is_large(&self, frame_size: usize, slack: usize) -> bool {
        frame_size + slack > self.base as usize
    }

    fn search(&mut self) {
        self.low = self.current;
        self.high = self.ceiling;
        self.target = self.ceiling;
        self.tries = 0;
        self.outstanding = None;
        self.phase = if self.high > self.low { Phase::Searching } else { Phase::Done(None) };
    }

    /// Narrows the search after `target` was confirmed or found too large.
    fn advance(&mut self, now: Time) {
        self.tries = 0;
        self.outstanding = None;
        if ((self.high - self.low) as usize) < STEP {
            let again = (self.current < self.ceiling).then(|| now + RAISE_INTERVAL);
            self.phase = Phase::Done(again);
        } else {
            self.target = self.low + (self.high - self.low).div_ceil(2);
        }
    }

    /// Runs the probe timer: an unanswered probe older than `timeout` is lost.
    pub(crate) fn on_timeout(&mut self, now: Time, timeout: Duration) {
        match self.phase {
            Phase::Searching => {}
            Phase::Done(Some(t)) if now >= t => self.search(),
            _ => return,
        }
        let Some((_, sent)) = self.outstanding else { return };
        if now < sent + timeout {
            return;
        }
        self.outstanding = None;
        self.counts.probes_lost += 1;
        if self.tries >= MAX_PROBES {
            self.high = self.target - 1;
            self.advance(now);
        }
    }

    /// The size of the probe to send now, if one is due.
    pub(crate) fn wanted(&self) -> Option<usize> {
        (self.phase == Phase::Searching && self.outstanding.is_none()).then_some(self.target as usize)
    }

    /// When the probe timer fires next.
    pub(crate) fn deadline(&self, timeout: Duration) -> Option<Time> {
        match self.phase {
            Phase::Searching => self.outstanding.map(|(_, sent)| sent + timeout),
            Phase::Done(again) => again,
            Phase::Off => None,
        }
    }

    /// The probe of the wanted size went out with ping `id`.
    pub(crate) fn sent(&mut self, now: Time, id: u8) {
        self.outstanding = Some((id, now));
        self.tries += 1;
        self.counts.probes_sent += 1;
    }

    /// The peer echoed ping `id`: when it is the probe's, its size is confirmed.
    pub(crate) fn on_echo(&mut self, now: Time, id: u8) {
        if self.phase != Phase::Searching || self.outstanding.is_none_or(|(p, _)| p != id) {
            return;
        }
        self.current = self.target;
        self.low = self.target;
        self.lost_large = 0;
        self.advance(now);
    }

    /// A frame of `size`, larger than the base, was acknowledged: the confirmed size still
    /// passes. `sent_at`: when the transmission that arrived went, if known (a frame sent
    /// more than once does not say which of its transmissions arrived).
    pub(crate) fn on_large_acked(&mut self, size: usize, sent_at: Option<Time>) {
        self.lost_large = 0;
        if let Some(at) = sent_at
            && self.passed.is_none_or(|(t, _)| at >= t)
        {
            self.passed = Some((at, size));
        }
    }

    /// A frame of `size`, larger than the base, sent at `sent_at`, was lost. Returns
    /// whether that revealed a black hole (the size fell back to the base and a new search
    /// started).
    pub(crate) fn on_large_lost(&mut self, size: usize, sent_at: Time) -> bool {
        if self.current == self.base {
            // Sent before an earlier fall back: nothing more to learn from it.
            self.lost_large = 0;
            return false;
        }
        if self.passed.is_some_and(|(t, passed)| t >= sent_at && passed >= size) {
            // A frame as large, sent with it or after it, arrived: an ordinary loss.
            self.lost_large = 0;
            return false;
        }
        self.lost_large += 1;
        if self.lost_large < BLACK_HOLE_LOSSES {
            return false;
        }
        self.lost_large = 0;
        self.counts.black_holes += 1;
        self.current = self.base;
        self.search();
        true
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// Runs a search against a path that carries `path` bytes, answering each probe after
    /// 50 ms or letting it time out after 200; returns the size found and when.
    fn search(d: &mut Discovery, path: usize, mut now: Time) -> (usize, Time) {
        let timeout = Duration::from_millis(200);
        for _ in 0..100 {
            d.on_timeout(now, timeout);
            let Some(size) = d.wanted() else { break };
            d.sent(now, 1);
            if size <= path {
                now += Duration::from_millis(50);
                d.on_echo(now, 1);
            } else {
                now = d.deadline(timeout).unwrap();
            }
        }
        (d.current(), now)
    }

    #[test]
    fn the_search_tries_the_ceiling_first_then_halves() {
        let t = Time::ZERO;
        let mut d = Discovery::new(1200, 1452);
        assert_eq!(d.wanted(), Some(1452));
        assert_eq!(search(&mut d, 1472, t), (1452, t + Duration::from_millis(50)), "one round trip");
        assert_eq!(d.deadline(Duration::from_millis(200)), None, "at the ceiling: never again");
        for path in [1200, 1232, 1300, 1400, 1451] {
            let mut d = Discovery::new(1200, 1452);
            let (found, _) = search(&mut d, path, t);
            assert!(found <= path && found + STEP > path, "path {path}: found {found}");
            assert_eq!(d.counts().probes_lost % u64::from(MAX_PROBES), 0, "each size tried {MAX_PROBES} times");
        }
        let mut off = Discovery::new(1200, 1000);
        assert_eq!((off.wanted(), off.current(), off.ceiling()), (None, 1200, 1200));
        off.on_timeout(t, Duration::ZERO);
        assert_eq!(off.deadline(Duration::ZERO), None);
    }

    #[test]
    fn a_search_below_the_ceiling_runs_again_later() {
        let t = Time::ZERO;
        let mut d = Discovery::new(1200, 9000);
        let (found, end) = search(&mut d, 1500, t);
        assert!((1485..=1500).contains(&found), "{found}");
        assert_eq!(d.deadline(Duration::ZERO), Some(end + RAISE_INTERVAL));
        // The path grew meanwhile.
        let (found, _) = search(&mut d, 9000, end + RAISE_INTERVAL);
        assert_eq!(found, 9000);
    }

    #[test]
    fn large_losses_in_a_row_fall_back_to_the_base_and_search_again() {
        let t = Time::ZERO;
        let mut d = Discovery::new(1200, 1452);
        search(&mut d, 1500, t);
        assert_eq!(d.current(), 1452);
        let lost = |d: &mut Discovery| d.on_large_lost(1452, t);
        assert!(!lost(&mut d) && !lost(&mut d));
        d.on_large_acked(1452, None);
        assert!(!lost(&mut d) && !lost(&mut d), "an acknowledgement between resets the count");
        assert!(lost(&mut d));
        assert_eq!((d.current(), d.counts().black_holes, d.wanted()), (1200, 1, Some(1452)));
        assert!(!lost(&mut d), "frames of before the fall back teach nothing more");
        let (found, _) = search(&mut d, 1300, t);
        assert!((1285..=1300).contains(&found), "{found}");
        assert!(d.is_large(1250, 0) && !d.is_large(1199, 0));
    }

    #[test]
    fn losses_of_frames_sent_before_one_as_large_that_arrived_are_no_black_hole() {
        let t = Time::ZERO;
        let mut d = Discovery::new(1200, 1452);
        search(&mut d, 1500, t);
        let ms = |n| t + Duration::from_millis(n);
        // A batch of acknowledgements shows a frame of 1,452 sent at 10 ms arrived; the
        // losses the same batch reveals, of frames sent up to then, are the path's own.
        d.on_large_acked(1452, Some(ms(10)));
        for sent in [7, 8, 9, 10] {
            assert!(!d.on_large_lost(1452, ms(sent)), "sent at {sent} ms");
        }
        // A smaller frame that arrived proves nothing of a larger one's size.
        d.on_large_acked(1300, Some(ms(20)));
        assert!(!d.on_large_lost(1452, ms(15)) && !d.on_large_lost(1452, ms(16)));
        assert!(d.on_large_lost(1452, ms(17)), "three lost, none as large arrived after them");
        // Once the path stops carrying the size, every frame sent after the last one that
        // arrived is lost: a black hole, found as before.
        let (found, end) = search(&mut d, 1500, ms(30));
        assert_eq!(found, 1452);
        d.on_large_acked(1452, Some(end));
        let after = end + Duration::from_millis(1);
        assert!(!d.on_large_lost(1452, after) && !d.on_large_lost(1452, after));
        assert!(d.on_large_lost(1452, after));
        assert_eq!(d.counts().black_holes, 2);
    }
}
