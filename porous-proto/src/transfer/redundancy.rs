//! How much redundancy the path calls for: the share of this side's frames it loses,
//! weighed by what a loss would hold back, and the room that buys repair copies.
//!
//! Repair copies and tail-loss probes pay only where a loss would cost: on a clean path a
//! copy of every small reliable message doubled the bytes of a stream of them, and a
//! probe after each doubled its datagrams and the peer's acknowledgements, for nothing.
//! But a loss that has no copy holds every message behind it on its ordered channel until
//! its resend, a round trip and more: where a round trip holds many frames (a 60 Hz
//! stream over a 600 ms path holds 36), one such loss in a minute makes a few percent of
//! the stream late. So the layer measures its loss twice: a short average (each frame's
//! outcome weighing 1/256: about four seconds of a 60 Hz stream) that follows a path
//! turning lossy at once, and a long one (1/4096: about a minute) that remembers a loss
//! rate too low for the short one to hold between losses. A path not yet measured starts
//! the long average at [`PRIOR`]. The *exposure* is the larger average times the frames a
//! loss now would hold back, as the transfer layer counts them (the lost one and those
//! sent in the round trip after it), at most [`HELD_MAX`].
//!
//! Messages become candidates, and probes go, only while the exposure is at least
//! [`ACTIVE`]; then every datagram sent earns copies a credit of [`GAIN`] times the
//! exposure of its bytes, at most half of them, kept up to one datagram's worth, and a
//! copy goes only against credit. A short path (a few frames held) copies nothing until
//! it loses; a long one copies from the start, until about two minutes of a 60 Hz stream
//! without loss bring the long average down.
//!
//! Invariants: both averages stay within `0..=ONE`; the credit never exceeds the cap it
//! is given; a copy is sent only against credit.

/// The averages' unit: 1.0.
const ONE: u32 = 1 << 24;

/// The short average: each frame's outcome weighs `1 / 2^FAST`, about the last 256 frames.
const FAST: u32 = 8;

/// The long average: each frame's outcome weighs `1 / 2^SLOW`, about the last 4,096
/// frames (a minute of a 60 Hz stream): a path losing one frame in 200 stays repaired
/// between its losses.
const SLOW: u32 = 12;

/// Where the long average starts on a path not yet measured: 0.2%, a low loss rate for
/// the internet. With a few frames in flight that is no exposure; with a long path's many
/// it is, so its first loss has a copy.
const PRIOR: u32 = ONE / 512;

/// Frames in flight counted as held back by a loss, at most: past that the stream is a
/// bulk transfer, whose small messages are few.
const HELD_MAX: u64 = 64;

/// Exposure (in `1 / ONE`) from which repair is active: 1.5%, a loss rate times frames
/// held that makes that share of a stream late by a round trip, enough to reach a
/// game's 99th percentile.
const ACTIVE: u64 = ONE as u64 * 3 / 200;

/// Copies earn this many times the exposure of the bytes sent, at most half of them: from
/// 2.5% exposure a stream of small messages alone has each one copied.
const GAIN: u64 = 20;

/// The measured loss and the copies' credit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Redundancy {
    /// The short average of frames lost, in `1 / ONE`.
    fast: u32,
    /// The long average of frames lost, in `1 / ONE`.
    slow: u32,
    /// Bytes of copies the bytes sent have earned and copies have not spent.
    credit: u32,
}

impl Default for Redundancy {
    fn default() -> Self {
        Self { fast: 0, slow: PRIOR, credit: 0 }
    }
}

impl Redundancy {
    /// A frame was acknowledged. (The long average rounds its decay up, so a clean path
    /// brings it to zero rather than to a floor of its precision.)
    pub(crate) fn on_delivered(&mut self) {
        self.fast -= self.fast >> FAST;
        self.slow -= (self.slow + (1 << SLOW) - 1) >> SLOW;
    }

    /// A frame was declared lost.
    pub(crate) fn on_lost(&mut self) {
        self.fast += (ONE - self.fast) >> FAST;
        self.slow += (ONE - self.slow) >> SLOW;
    }

    /// A frame declared lost arrived after all: its loss comes off again.
    pub(crate) fn on_spurious(&mut self) {
        self.fast = self.fast.saturating_sub(ONE >> FAST);
        self.slow = self.slow.saturating_sub(ONE >> SLOW);
    }

    /// The loss rate times the frames a loss would hold back (`held` in flight), in
    /// `1 / ONE`.
    fn exposure(&self, held: usize) -> u64 {
        u64::from(self.fast.max(self.slow)) * (held as u64).min(HELD_MAX)
    }

    /// Whether a loss would cost enough, with `held` frames in flight: small reliable
    /// messages become repair candidates and tail-loss probes may go.
    pub(crate) fn active(&self, held: usize) -> bool {
        self.exposure(held) >= ACTIVE
    }

    /// A datagram of `len` bytes went with `held` frames in flight: copies earn their
    /// share of it, up to `cap` bytes held.
    pub(crate) fn earn(&mut self, len: usize, held: usize, cap: usize) {
        let exposure = self.exposure(held);
        let share = if exposure >= ACTIVE { (exposure * GAIN).min(u64::from(ONE / 2)) } else { 0 };
        let earned = (len as u64 * share / u64::from(ONE)) as u32;
        self.credit = self.credit.saturating_add(earned).min(u32::try_from(cap).unwrap_or(u32::MAX));
    }

    /// Spends `len` bytes of credit on a copy, if there are.
    pub(crate) fn spend(&mut self, len: usize) -> bool {
        let ok = len <= self.credit as usize;
        if ok {
            self.credit -= len as u32;
        }
        ok
    }

    /// The larger average of frames lost, 0.0 to 1.0.
    #[cfg(test)]
    pub(crate) fn loss(&self) -> f64 {
        f64::from(self.fast.max(self.slow)) / f64::from(ONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_clean_path_earns_no_copies_and_a_lossy_one_earns_half_its_bytes() {
        let mut r = Redundancy::default();
        // Three frames in flight: the prior alone is no exposure.
        for _ in 0..1000 {
            r.on_delivered();
            r.earn(1200, 3, 1200);
        }
        assert!(!r.active(3) && !r.spend(1), "no loss, no copy");
        // One frame in twenty lost: the average settles near 5%, and half of each
        // datagram goes to copies.
        for i in 0..2000 {
            if i % 20 == 0 { r.on_lost() } else { r.on_delivered() }
        }
        assert!((0.03..0.07).contains(&r.loss()), "{}", r.loss());
        r.earn(100, 3, 1200);
        assert!(r.active(3) && r.spend(50) && !r.spend(1), "half of 100 bytes");
        // Credit is kept up to the cap only.
        for _ in 0..100 {
            r.earn(1200, 3, 1200);
        }
        assert!(r.spend(1200) && !r.spend(1));
    }

    #[test]
    fn a_long_path_copies_from_the_start_until_a_long_clean_run() {
        let mut r = Redundancy::default();
        // 36 frames in flight (60 Hz over 600 ms): a loss would hold them all.
        assert!(r.active(36) && !r.active(4));
        r.earn(100, 36, 1200);
        assert!(r.spend(50) && !r.spend(1), "half of 100 bytes from the first datagram");
        for _ in 0..4000 {
            r.on_delivered();
        }
        assert!(r.active(36), "a minute of a 60 Hz stream without loss: {}", r.loss());
        for _ in 0..8000 {
            r.on_delivered();
        }
        assert!(!r.active(36), "three minutes without loss: {}", r.loss());
        // One loss in 200 frames keeps it active between losses.
        let mut r = Redundancy::default();
        for i in 0..20_000 {
            if i % 200 == 0 {
                r.on_lost();
            } else {
                r.on_delivered();
            }
            assert!(r.active(36), "frame {i}: {}", r.loss());
        }
    }

    #[test]
    fn losses_found_spurious_come_off_and_a_clean_run_forgets_them() {
        let mut r = Redundancy { slow: 0, ..Redundancy::default() };
        r.on_lost();
        assert!(r.active(4));
        r.on_spurious();
        assert!(!r.active(64) && r.loss() == 0.0);
        r.on_lost();
        for _ in 0..200 {
            r.on_delivered();
        }
        assert!(r.active(16), "a loss 200 frames ago, 16 in flight: {}", r.loss());
        for _ in 0..1500 {
            r.on_delivered();
        }
        assert!(!r.active(16), "1,700 frames without loss: {}", r.loss());
    }
}
