//! Per-connection queues sized for what they usually hold.
//!
//! A `VecDeque`'s first growth makes room for four elements. A connection keeps several
//! deques (its send lanes, its in-flight frames and messages, its acknowledgement ranges,
//! its repair candidates), and in a game's steady state most of them hold one element at
//! a time: a 60 Hz server queues one state per tick and sends it in the same step, and a
//! frame is acknowledged before the next one leaves when the round trip is shorter than a
//! tick. Four slots where one is used cost about a kilobyte per connection, which at
//! thousands of connections is both memory and cache. So the first element gets exactly
//! one slot; a deque that ever holds two grows as usual (to four, then doubling), once.
//!
//! Durations kept are 8-byte [`Nanos`] rather than 16-byte `Duration`s (times kept are
//! 8-byte [`Time`](crate::time::Time)s).

use std::collections::VecDeque;
use std::time::Duration;

/// Makes room for exactly one element in `q` if it has none yet: call before a push.
#[inline]
pub(crate) fn room_for_first<T>(q: &mut VecDeque<T>) {
    if q.capacity() == 0 {
        q.reserve_exact(1);
    }
}

/// A `Duration` in 8 bytes instead of 16: whole nanoseconds, exact up to 584 years
/// (saturating beyond). [`Nanos::get`] gives the `Duration` back; code that computes on
/// many of them per datagram (the round-trip estimator) reads the nanoseconds instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Nanos(pub(crate) u64);

impl Nanos {
    /// The longest: 584 years, and any longer `Duration`.
    pub(crate) const MAX: Self = Self(u64::MAX);

    pub(crate) fn of(d: Duration) -> Self {
        Self(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(crate) fn get(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn first_element_gets_one_slot_then_growth_is_as_usual() {
        let mut q = VecDeque::new();
        room_for_first(&mut q);
        q.push_back(1u64);
        assert_eq!(q.capacity(), 1);
        room_for_first(&mut q);
        q.push_back(2);
        assert!(q.capacity() >= 2);
        let cap = q.capacity();
        q.clear();
        room_for_first(&mut q);
        assert_eq!(q.capacity(), cap, "capacity once grown is kept");
    }
}
