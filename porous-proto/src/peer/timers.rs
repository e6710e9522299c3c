//! A peer's timers: one named table, whose earliest row is when the peer must be polled
//! next (the host files that one deadline in its heap).
//!
//! Rows are recomputed from the peer's state ([`Peer::next_timeout`](super::Peer)) rather
//! than armed and disarmed at each transition, so a row can never be left stale; the table
//! is built at each call and not kept in the peer. A new timer (pacing, a delayed
//! acknowledgement) is one more row.

use crate::time::Time;

/// What a row of the table waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Resend a connection or disconnection request.
    Retry,
    /// The connection attempt gives up.
    ConnectTimeout,
    /// Nothing heard for the timeout: the connection ends.
    Idle,
    /// A graceful disconnection's next deadline (end of the flush, end of the request
    /// phase), or the end of a disconnected peer's linger.
    Close,
    /// The transfer layer's loss detection (RTO or reordering window).
    Loss,
    /// The transfer layer's next ping.
    Ping,
    /// The pacer lets the next datagram go.
    Pacing,
    /// A tail-loss probe: repair copies go out if nothing else has carried them.
    Probe,
    /// A held acknowledgement or ping echo stops waiting for a datagram to ride on.
    Ack,
    /// Path MTU discovery: a probe's echo is overdue, or a search starts again.
    Mtu,
    /// A routing to an address not yet validated ends unanswered.
    Path,
    /// The peer is a zombie: delete it now.
    Delete,
}

impl Timer {
    const COUNT: usize = 12;

    const fn index(self) -> usize {
        self as usize
    }
}

/// The table: one optional deadline per [`Timer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timers([Option<Time>; Timer::COUNT]);

impl Timers {
    /// Sets `timer` to `at` (`None` stops it).
    pub(crate) fn set(&mut self, timer: Timer, at: Option<Time>) {
        if let Some(row) = self.0.get_mut(timer.index()) {
            *row = at;
        }
    }

    /// When `timer` fires, if it runs.
    #[cfg(test)]
    pub(crate) fn get(&self, timer: Timer) -> Option<Time> {
        self.0.get(timer.index()).copied().flatten()
    }

    /// Stops every timer.
    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.0 = [None; Timer::COUNT];
    }

    /// The earliest deadline of all.
    pub(crate) fn next(&self) -> Option<Time> {
        self.0.iter().flatten().min().copied()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use std::time::Duration;

    use super::*;

    #[test]
    fn the_earliest_row_is_the_next_deadline() {
        let t = Time::ZERO;
        let mut timers = Timers::default();
        assert_eq!(timers.next(), None);
        timers.set(Timer::Idle, Some(t + Duration::from_secs(10)));
        timers.set(Timer::Ping, Some(t + Duration::from_millis(500)));
        timers.set(Timer::Loss, Some(t + Duration::from_millis(200)));
        assert_eq!(timers.next(), Some(t + Duration::from_millis(200)));
        timers.set(Timer::Loss, None);
        assert_eq!(timers.next(), Some(t + Duration::from_millis(500)));
        assert_eq!(timers.get(Timer::Idle), Some(t + Duration::from_secs(10)));
        timers.clear();
        assert_eq!(timers.next(), None);
    }
}
