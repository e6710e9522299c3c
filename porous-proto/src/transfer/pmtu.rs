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
//! losses in a row the size falls back to the base and a new search starts. A lost frame
//! counts only if no frame at least as large, sent with it or after it, has been
//! acknowledged: such a frame proves the path still carried the size when the lost one
//! went, so the loss was the path's ordinary loss (losses are judged once per batch of
//! acknowledgements, so "none acknowledged in between" alone would count a batch's random
//! losses in a row). What arrived is the transmission acknowledged: a frame's only one, or
//! its resend when the acknowledgement came no sooner than the shortest round trip after
//! it (the rule by which the reordering detector reads it too).
//!
//! Three such losses are not yet a verdict: random loss takes three frames in a row now
//! and then, and the frame sent just after them, which would prove the size, may still be
//! on its way, or its acknowledgement. The run is judged a reordering window after its
//! latest loss went (the margin the reordering rule gives a frame overtaken by a later
//! one), and is a black hole if by then something sent after it has been acknowledged
//! and nothing as large (the path answers, and drops the large). A resend timeout barely
//! longer than the round trip finds losses before that; so does an acknowledgement held up
//! a few milliseconds, which times out every frame in flight whatever its size. Should
//! nothing sent after the run be acknowledged for a reordering window after it was found,
//! the path carries none of this side's datagrams, all of them large: a black hole too.
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

/// A run of [`BLACK_HOLE_LOSSES`] losses waiting for its verdict.
#[derive(Clone, Copy, Debug)]
struct Held {
    /// The serial of the transmission whose loss completed the run: every one numbered
    /// after it went after it.
    serial: u64,
    /// When the run was found complete.
    found_at: Time,
}

/// A datagram size as kept here: every size a host takes fits (`config::MAX_MTU`).
fn size16(size: usize) -> u16 {
    u16::try_from(size).unwrap_or(u16::MAX)
}

/// The state is kept small, sizes in `u16`, times apart from the sizes they go with: it
/// lives in every connection, inside a host's slot of a fixed budget.
#[derive(Debug)]
pub(crate) struct Discovery {
    base: u16,
    ceiling: u16,
    current: u16,
    low: u16,
    high: u16,
    target: u16,
    phase: Phase,
    /// The probe of `target` in flight: when it went, and its ping id.
    probe_sent: Option<Time>,
    probe_id: u8,
    /// Probes of `target` sent so far.
    tries: u8,
    /// Frames larger than the base lost in a row: none at least as large as the latest of
    /// them, sent with or after it, acknowledged since.
    lost_large: u8,
    /// The run's latest loss (the one that completed it, once `held`): when its frame
    /// went, and its size.
    lost_at: Option<Time>,
    lost_size: u16,
    /// The run of [`BLACK_HOLE_LOSSES`], waiting for its verdict.
    held: Option<Held>,
    /// Whether something sent after the held run has been acknowledged (the path answers).
    answered: bool,
    /// The latest transmission larger than the base known to have arrived: when it went,
    /// and its size.
    passed_at: Option<Time>,
    passed_size: u16,
    counts: Counts,
}

impl Discovery {
    /// A search between `base` (the size every datagram starts at) and `ceiling` (the
    /// largest this side may send); off when the ceiling is not above the base.
    pub(crate) fn new(base: usize, ceiling: usize) -> Self {
        let (base, ceiling) = (size16(base), size16(ceiling.max(base)));
        let mut d = Self {
            base,
            ceiling,
            current: base,
            low: base,
            high: ceiling,
            target: ceiling,
            phase: Phase::Off,
            probe_sent: None,
            probe_id: 0,
            tries: 0,
            lost_large: 0,
            lost_at: None,
            lost_size: 0,
            held: None,
            answered: false,
            passed_at: None,
            passed_size: 0,
            counts: Counts::default(),
        };
        if ceiling > base {
            d.search();
        }
        d
    }

    /// The size datagrams use now.
    pub(crate) fn current(&self) -> usize {
        usize::from(self.current)
    }

    /// The largest size this side may send or take.
    pub(crate) fn ceiling(&self) -> usize {
        usize::from(self.ceiling)
    }

    pub(crate) fn counts(&self) -> Counts {
        self.counts
    }

    /// Whether a frame of `size` flight bytes (frame id, type and check included) is
    /// larger than a datagram of the base could carry.
    pub(crate) fn is_large(&self, frame_size: usize, slack: usize) -> bool {
        frame_size + slack > usize::from(self.base)
    }

    fn search(&mut self) {
        self.low = self.current;
        self.high = self.ceiling;
        self.target = self.ceiling;
        self.tries = 0;
        self.probe_sent = None;
        self.phase = if self.high > self.low { Phase::Searching } else { Phase::Done(None) };
    }

    /// Narrows the search after `target` was confirmed or found too large.
    fn advance(&mut self, now: Time) {
        self.tries = 0;
        self.probe_sent = None;
        if usize::from(self.high - self.low) < STEP {
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
        let Some(sent) = self.probe_sent else { return };
        if now < sent + timeout {
            return;
        }
        self.probe_sent = None;
        self.counts.probes_lost += 1;
        if self.tries >= MAX_PROBES {
            self.high = self.target - 1;
            self.advance(now);
        }
    }

    /// The size of the probe to send now, if one is due.
    pub(crate) fn wanted(&self) -> Option<usize> {
        (self.phase == Phase::Searching && self.probe_sent.is_none()).then_some(usize::from(self.target))
    }

    /// When the probe timer (probes are given `timeout`) fires next, or a run of losses is
    /// judged (`wait` after its latest loss went, or after it was found while nothing later
    /// has been acknowledged; see [`Discovery::judge`]).
    pub(crate) fn deadline(&self, timeout: Duration, wait: Duration) -> Option<Time> {
        let probe = match self.phase {
            Phase::Searching => self.probe_sent.map(|sent| sent + timeout),
            Phase::Done(again) => again,
            Phase::Off => None,
        };
        let verdict =
            self.held.map(|h| if self.answered { self.lost_at.unwrap_or(h.found_at) } else { h.found_at } + wait);
        [probe, verdict].into_iter().flatten().min()
    }

    /// The probe of the wanted size went out with ping `id`.
    pub(crate) fn sent(&mut self, now: Time, id: u8) {
        self.probe_sent = Some(now);
        self.probe_id = id;
        self.tries += 1;
        self.counts.probes_sent += 1;
    }

    /// The peer echoed ping `id`: when it is the probe's, its size is confirmed.
    pub(crate) fn on_echo(&mut self, now: Time, id: u8) {
        if self.phase != Phase::Searching || self.probe_sent.is_none() || self.probe_id != id {
            return;
        }
        self.current = self.target;
        self.low = self.target;
        self.clear_run();
        self.advance(now);
    }

    /// A frame of `size`, larger than the base, was acknowledged: the path carried that
    /// size when it went. `sent_at`: when the transmission that arrived went, if known
    /// (`None` for a resend acknowledged too soon to be what arrived).
    pub(crate) fn on_large_acked(&mut self, size: usize, sent_at: Option<Time>) {
        let Some(at) = sent_at else { return };
        if self.lost_at.is_some_and(|t| at >= t) && size >= usize::from(self.lost_size) {
            // As large as the run's latest loss and sent with or after it: the run was the
            // path's ordinary loss.
            self.clear_run();
        }
        if self.passed_at.is_none_or(|t| at >= t) {
            self.passed_at = Some(at);
            self.passed_size = size16(size);
        }
    }

    /// A frame of `size`, larger than the base, sent at `sent_at` as transmission `serial`,
    /// was found lost at `now`. A run it completes is judged by [`Discovery::judge`].
    pub(crate) fn on_large_lost(&mut self, now: Time, size: usize, sent_at: Time, serial: u64) {
        if self.current == self.base {
            // Sent before an earlier fall back: nothing more to learn from it.
            self.clear_run();
            return;
        }
        if self.passed_at.is_some_and(|t| t >= sent_at) && usize::from(self.passed_size) >= size {
            // A frame as large, sent with it or after it, arrived: an ordinary loss.
            self.clear_run();
            return;
        }
        self.lost_large = self.lost_large.saturating_add(1);
        if self.held.is_some() {
            // The run is complete: its verdict is about what was sent after it.
            return;
        }
        self.lost_at = Some(sent_at);
        self.lost_size = size16(size);
        if self.lost_large >= BLACK_HOLE_LOSSES {
            self.held = Some(Held { serial, found_at: now });
            self.answered = false;
        }
    }

    /// Judges, at `now`, a complete run of losses once due: `acked_since(serial)` says
    /// whether a transmission numbered `serial` or later has been acknowledged; `wait` is
    /// the reordering window (how long an acknowledgement may come after it was due).
    /// Returns whether the run was a black hole (the size fell back to the base and a new
    /// search started).
    pub(crate) fn judge(&mut self, now: Time, wait: Duration, acked_since: impl Fn(u64) -> bool) -> bool {
        let (Some(held), Some(sent_at)) = (self.held, self.lost_at) else { return false };
        self.answered |= acked_since(held.serial + 1);
        if now < sent_at + wait {
            // The frames sent just after the run may still prove the size.
            return false;
        }
        // A frame as large as the run's latest loss, sent after it and acknowledged, would
        // have cleared the run: what was acknowledged since is smaller. With nothing
        // acknowledged, the path is given a reordering window from when the run was found.
        if self.answered || now >= held.found_at + wait { self.fall_back() } else { false }
    }

    /// The connection moved to a new address of its remote: a path of its own, whose size
    /// nothing learnt so far says anything of. Back to the base, the losses and passes
    /// forgotten, and a new search (when discovery is on).
    pub(crate) fn on_path_change(&mut self) {
        self.clear_run();
        self.passed_at = None;
        self.passed_size = 0;
        if self.phase != Phase::Off {
            self.current = self.base;
            self.search();
        }
    }

    /// Forgets the losses counted so far.
    fn clear_run(&mut self) {
        self.lost_large = 0;
        self.lost_at = None;
        self.held = None;
        self.answered = false;
    }

    /// A black hole: back to the base size, and a new search.
    fn fall_back(&mut self) -> bool {
        self.clear_run();
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
                now = d.deadline(timeout, timeout).unwrap();
            }
        }
        (d.current(), now)
    }

    /// A move to a new address starts over: the size falls back to the base, a run of
    /// losses of the old path waits for no verdict, and the search begins again at the
    /// ceiling. With discovery off, nothing changes.
    #[test]
    fn a_path_change_starts_discovery_over_from_the_base() {
        let t = Time::ZERO;
        let mut d = Discovery::new(1200, 1452);
        let (found, later) = search(&mut d, 1500, t);
        assert_eq!(found, 1452);
        for serial in 0..BLACK_HOLE_LOSSES {
            d.on_large_lost(later, 1452, later, u64::from(serial));
        }
        assert!(d.held.is_some(), "a run of the old path waits for its verdict");
        d.on_path_change();
        assert_eq!(d.current(), 1200);
        assert_eq!(d.wanted(), Some(1452), "a new search, from the ceiling");
        let wait = Duration::from_millis(60);
        assert!(!d.judge(later + 10 * wait, wait, |_| true), "the old path's losses are forgotten");
        assert_eq!(d.counts().black_holes, 0);
        let mut off = Discovery::new(1200, 1200);
        off.on_path_change();
        assert_eq!((off.current(), off.wanted()), (1200, None));
    }

    #[test]
    fn the_search_tries_the_ceiling_first_then_halves() {
        let t = Time::ZERO;
        let mut d = Discovery::new(1200, 1452);
        assert_eq!(d.wanted(), Some(1452));
        assert_eq!(search(&mut d, 1472, t), (1452, t + Duration::from_millis(50)), "one round trip");
        assert_eq!(
            d.deadline(Duration::from_millis(200), Duration::from_millis(200)),
            None,
            "at the ceiling: never again"
        );
        for path in [1200, 1232, 1300, 1400, 1451] {
            let mut d = Discovery::new(1200, 1452);
            let (found, _) = search(&mut d, path, t);
            assert!(found <= path && found + STEP > path, "path {path}: found {found}");
            assert_eq!(d.counts().probes_lost % u64::from(MAX_PROBES), 0, "each size tried {MAX_PROBES} times");
        }
        let mut off = Discovery::new(1200, 1000);
        assert_eq!((off.wanted(), off.current(), off.ceiling()), (None, 1200, 1200));
        off.on_timeout(t, Duration::ZERO);
        assert_eq!(off.deadline(Duration::ZERO, Duration::ZERO), None);
    }

    #[test]
    fn a_search_below_the_ceiling_runs_again_later() {
        let t = Time::ZERO;
        let mut d = Discovery::new(1200, 9000);
        let (found, end) = search(&mut d, 1500, t);
        assert!((1485..=1500).contains(&found), "{found}");
        assert_eq!(d.deadline(Duration::ZERO, Duration::ZERO), Some(end + RAISE_INTERVAL));
        // The path grew meanwhile.
        let (found, _) = search(&mut d, 9000, end + RAISE_INTERVAL);
        assert_eq!(found, 9000);
    }

    /// A reordering window: how long after it was due an acknowledgement may still come.
    const WAIT: Duration = Duration::from_millis(60);

    /// `d` told of the loss of a frame of `size`, transmission `serial`, sent at `sent` ms
    /// and found lost at `found` ms, then judged then with transmissions up to `newest`
    /// acknowledged: whether that was a black hole.
    fn lose(d: &mut Discovery, (size, sent, serial): (usize, u64, u64), found: u64, newest: u64) -> bool {
        let ms = |n| Time::ZERO + Duration::from_millis(n);
        d.on_large_lost(ms(found), size, ms(sent), serial);
        d.judge(ms(found), WAIT, |s| newest >= s)
    }

    #[test]
    fn large_losses_in_a_row_fall_back_to_the_base_and_search_again() {
        let t = Time::ZERO;
        let ms = |n| t + Duration::from_millis(n);
        let mut d = Discovery::new(1200, 1452);
        search(&mut d, 1500, t);
        assert_eq!(d.current(), 1452);
        // Each found lost a reordering window after it went, something later acknowledged.
        let lost = |d: &mut Discovery, sent| lose(d, (1452, sent, sent), sent + 60, 1000);
        assert!(!lost(&mut d, 10) && !lost(&mut d, 11));
        d.on_large_acked(1452, Some(ms(11)));
        assert!(!lost(&mut d, 20) && !lost(&mut d, 21), "an acknowledgement between resets the count");
        // Acknowledgements that prove nothing of the size when the lost frames went: of a
        // frame sent before them, of a smaller one, of a resend that cannot be told from
        // its first transmission.
        d.on_large_acked(1452, Some(ms(20)));
        d.on_large_acked(1451, Some(ms(21)));
        d.on_large_acked(1452, None);
        assert!(lost(&mut d, 22));
        assert_eq!((d.current(), d.counts().black_holes, d.wanted()), (1200, 1, Some(1452)));
        assert!(
            !lost(&mut d, 23) && !lost(&mut d, 24) && !lost(&mut d, 25),
            "frames of before the fall back teach nothing more"
        );
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
        let lost = |d: &mut Discovery, sent| lose(d, (1452, sent, sent), 100, 1000);
        // A batch of acknowledgements shows a frame of 1,452 sent at 10 ms arrived; the
        // losses the same batch reveals, of frames sent up to then, are the path's own.
        d.on_large_acked(1452, Some(ms(10)));
        for sent in [7, 8, 9, 10] {
            assert!(!lost(&mut d, sent), "sent at {sent} ms");
        }
        // A smaller frame that arrived proves nothing of a larger one's size.
        d.on_large_acked(1300, Some(ms(20)));
        assert!(!lost(&mut d, 15) && !lost(&mut d, 16));
        assert!(lost(&mut d, 17), "three lost, none as large arrived after them");
        // Once the path stops carrying the size, every frame sent after the last one that
        // arrived is lost: a black hole, found as before.
        let (found, end) = search(&mut d, 1500, ms(30));
        assert_eq!(found, 1452);
        d.on_large_acked(1452, Some(end));
        let after = end + Duration::from_millis(1);
        let lost = |d: &mut Discovery, serial| {
            d.on_large_lost(after + WAIT, 1452, after, serial);
            d.judge(after + WAIT, WAIT, |_| true)
        };
        assert!(!lost(&mut d, 1) && !lost(&mut d, 2));
        assert!(lost(&mut d, 3));
        assert_eq!(d.counts().black_holes, 2);
    }

    #[test]
    fn a_run_is_judged_a_reordering_window_after_its_latest_loss_went() {
        let t = Time::ZERO;
        let ms = |n| t + Duration::from_millis(n);
        let timeout = Duration::from_millis(200);
        let fresh = || {
            let mut d = Discovery::new(1200, 1452);
            search(&mut d, 1500, t);
            d
        };
        // Transmissions 10, 11 and 12, sent at 100 ms, found lost by a resend timeout
        // barely longer than the round trip, at 152 ms; 13 acknowledged already.
        let run = |d: &mut Discovery| {
            for serial in 10..13 {
                assert!(!lose(d, (1452, 100, serial), 152, 13), "no verdict yet");
            }
        };
        let acked_since = |newest: u64| move |serial: u64| newest >= serial;
        let mut d = fresh();
        run(&mut d);
        assert_eq!(d.deadline(timeout, WAIT), Some(ms(160)), "a window after the latest loss went");
        assert!(!d.judge(ms(159), WAIT, acked_since(13)));
        // The frame sent just after them, as large, arrived: the path's ordinary loss.
        d.on_large_acked(1452, Some(ms(101)));
        assert!(!d.judge(ms(300), WAIT, acked_since(14)) && d.deadline(timeout, WAIT).is_none());
        assert_eq!((d.current(), d.counts().black_holes), (1452, 0));

        // Nothing as large arrived in the window, something smaller sent after them did:
        // the path carries small datagrams and drops the large.
        let mut d = fresh();
        run(&mut d);
        d.on_large_acked(1300, Some(ms(101)));
        assert!(d.judge(ms(160), WAIT, acked_since(14)));
        assert_eq!((d.current(), d.counts().black_holes, d.wanted()), (1200, 1, Some(1452)));

        // Nothing sent after them acknowledged (acknowledgements held up, or a path that
        // carries none of this side's datagrams, all of them large): a window more, from
        // when the run was found.
        let mut d = fresh();
        for serial in 10..13 {
            assert!(!lose(&mut d, (1452, 100, serial), 152, 12));
        }
        assert_eq!(d.deadline(timeout, WAIT), Some(ms(212)));
        assert!(!d.judge(ms(211), WAIT, acked_since(12)));
        let mut late = fresh();
        for serial in 10..13 {
            lose(&mut late, (1452, 100, serial), 152, 12);
        }
        // The acknowledgements resume in time.
        late.on_large_acked(1452, Some(ms(102)));
        assert!(!late.judge(ms(211), WAIT, acked_since(20)) && late.current() == 1452);
        // They do not.
        assert!(d.judge(ms(212), WAIT, acked_since(12)));
        assert_eq!((d.current(), d.deadline(timeout, WAIT), d.counts().black_holes), (1200, None, 1));
    }
}
