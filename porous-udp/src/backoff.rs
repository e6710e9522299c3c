//! When to stop reading a socket whose receives keep failing.

use std::time::{Duration, Instant};

/// Errors in a row that are retried at once: distinct ICMP reports are consumed one per
/// call, so a few in a row are normal and cost nothing to retry.
const RETRIED_AT_ONCE: u32 = 4;
/// The first pause, doubled for every further error in a row up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between receive attempts while errors persist.
const LONGEST_PAUSE: Duration = Duration::from_millis(64);

/// The receive-error policy of the adapters: an error repeated on every receive call (an
/// ICMP error some systems report again and again, a socket gone bad) must not make a
/// driver spin.
///
/// Report every receive attempt's outcome: [`RecvBackoff::error`] for an error,
/// [`RecvBackoff::ok`] for datagrams or `WouldBlock`. After a few errors in a row the
/// policy pauses receiving, for 1 ms and then twice as long for every further error in a
/// row, up to 64 ms; [`RecvBackoff::paused`] says whether to skip receiving now, and
/// [`RecvBackoff::resume_at`] when to wake to try again (the readiness of such a socket
/// cannot be trusted to say so).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvBackoff {
    streak: u32,
    until: Option<Instant>,
}

impl RecvBackoff {
    /// A policy with no error seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// A receive attempt failed at `now`.
    pub fn error(&mut self, now: Instant) {
        self.streak = self.streak.saturating_add(1);
        if let Some(beyond) = self.streak.checked_sub(RETRIED_AT_ONCE + 1) {
            let pause = FIRST_PAUSE.saturating_mul(1 << beyond.min(16)).min(LONGEST_PAUSE);
            self.until = Some(now + pause);
        }
    }

    /// A receive attempt returned datagrams or `WouldBlock`: the socket works again.
    pub fn ok(&mut self) {
        self.streak = 0;
        self.until = None;
    }

    /// Whether receiving is paused at `now`.
    pub fn paused(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// When a paused receiver must try again (whether or not the socket says it is
    /// readable); `None` when not paused.
    pub fn resume_at(&self) -> Option<Instant> {
        self.until
    }

    /// Errors in a row so far.
    pub fn streak(&self) -> u32 {
        self.streak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_errors_are_retried_at_once_then_pauses_double_up_to_a_ceiling() {
        let t0 = Instant::now();
        let mut b = RecvBackoff::new();
        for _ in 0..RETRIED_AT_ONCE {
            b.error(t0);
            assert!(!b.paused(t0));
            assert_eq!(b.resume_at(), None);
        }
        let mut pauses = Vec::new();
        for _ in 0..10 {
            b.error(t0);
            assert!(b.paused(t0));
            pauses.push(b.resume_at().map(|t| t - t0).unwrap().as_millis());
        }
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 64, 64, 64]);
        assert!(!b.paused(t0 + LONGEST_PAUSE));
        assert_eq!(b.streak(), RETRIED_AT_ONCE + 10);
    }

    #[test]
    fn a_working_receive_ends_the_pause() {
        let t0 = Instant::now();
        let mut b = RecvBackoff::new();
        for _ in 0..20 {
            b.error(t0);
        }
        assert!(b.paused(t0));
        b.ok();
        assert!(!b.paused(t0));
        assert_eq!((b.streak(), b.resume_at()), (0, None));
        // The streak starts over: the next error is retried at once again.
        b.error(t0);
        assert!(!b.paused(t0));
    }

    #[test]
    fn a_long_streak_saturates_instead_of_overflowing() {
        let t0 = Instant::now();
        let mut b = RecvBackoff { streak: u32::MAX - 1, until: None };
        b.error(t0);
        b.error(t0);
        assert_eq!(b.streak(), u32::MAX);
        assert_eq!(b.resume_at(), Some(t0 + LONGEST_PAUSE));
    }
}
