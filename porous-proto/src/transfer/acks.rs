//! The receiving half of the transfer layer: the receive window and the acknowledgement
//! queue (spec §3.1, §3.1.1).
//!
//! `i_b` is one past the newest frame received. A frame `k` is accepted when it lies in
//! the receive window `[i_b - N_P, i_b + N_P)` (equation (2)) and advances `i_b` to `k + 1`
//! when it lies in `[i_b, i_b + N_P)` (equation (3)).
//!
//! Received ids are kept as ranges, newest first. Each range is repeated in the next
//! [`ACK_REPEATS`] ack sections after it last grew, so one lost acknowledgement costs no
//! resend; a frame received again (its acknowledgement was lost every time) re-arms its
//! range. Only ids within the window are kept, and at most [`MAX_RANGES`] ranges (the
//! oldest go first): forgetting an old range is safe, since a sender still waiting for it
//! resends and is acknowledged anew.

use std::collections::VecDeque;

use crate::seq::SeqSpace;
use crate::wire::AckRange;

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
}

impl Receiver {
    pub(crate) fn new(first_id: u32, window: u32) -> Self {
        Self { i_b: first_id, window, ranges: VecDeque::new(), fresh: false }
    }

    /// Bytes of the acknowledgement ranges' storage.
    pub(crate) fn memory(&self) -> usize {
        self.ranges.capacity() * size_of::<KeptRange>()
    }

    /// One past the newest frame received.
    #[cfg(any(test, feature = "arbitrary"))]
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

    /// Records the receipt of frame `k` (already checked with [`Receiver::in_window`]).
    pub(crate) fn record(&mut self, k: u32) {
        let s = SeqSpace::FRAME;
        if s.in_range(k, self.i_b, u64::from(self.window)) {
            self.i_b = s.add(k, 1);
        }
        self.fresh = true;
        self.insert(k);
        self.trim();
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
            (false, false) => self.ranges.insert(pos, KeptRange { first: k, last: k, repeats: ACK_REPEATS }),
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
    }
}

#[cfg(test)]
mod tests {
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
            r.record(k);
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
        r.record(10);
        assert!(r.ack_due());
        assert_eq!(ranges(&r), [(10, 10)]);
        // Acknowledged ranges make way; those still to be repeated stay.
        let mut q = Receiver::new(0, 65_536);
        for k in (1000..1000 + 2 * MAX_RANGES as u32).step_by(2) {
            q.record(k);
        }
        q.record(10);
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
        r.record(1000);
        assert!(r.ack_due() && ranges(&r) == [(1000, 1000)]);
        r.sent(1);
        // Outside the window: never recorded (the caller checks), nothing due.
        assert!(!r.in_window(1000 + 2 * 65_536));
    }

    #[test]
    fn ranges_sent_fit_the_byte_budget() {
        let mut r = Receiver::new(0, 65_536);
        for k in (0..4000).step_by(3) {
            r.record(k);
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
        r.record(1); // across the wrap, inside [i_b, i_b + N_P)
        assert_eq!(r.base(), 2);
        r.record(u32::MAX); // older: accepted, no advance
        assert_eq!(r.base(), 2);
        assert_eq!(ranges(&r), [(1, 1), (u32::MAX, u32::MAX)]);
    }

    #[test]
    fn ranges_merge_and_repeat_three_times() {
        let mut r = Receiver::new(100, 65_536);
        for k in [100, 101, 103, 102, 106] {
            r.record(k);
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
        r.record(101);
        assert_eq!(ranges(&r), [(100, 103)]);
    }

    #[test]
    fn ranges_stay_inside_the_window_and_bounded() {
        let mut r = Receiver::new(0, 16);
        for k in (0..40).step_by(2) {
            r.record(k);
        }
        // Window of 16: ids 23..=38 may remain, the even ones of them.
        assert_eq!(ranges(&r).len(), 8);
        assert!(ranges(&r).iter().all(|&(f, _)| f >= 24));
        let mut big = Receiver::new(0, 65_536);
        for k in (0..1000).step_by(2) {
            big.record(k);
        }
        assert_eq!(ranges(&big).len(), MAX_RANGES);
    }
}
