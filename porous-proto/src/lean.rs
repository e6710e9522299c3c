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
//! Times kept per frame or per ping are 8-byte signed nanoseconds from a nearby `Instant`
//! ([`offset`], [`at_offset`]) rather than 16-byte `Instant`s: exact for times within
//! 292 years of each other, in either direction; durations kept are 8-byte [`Nanos`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Makes room for exactly one element in `q` if it has none yet: call before a push.
#[inline]
pub(crate) fn room_for_first<T>(q: &mut VecDeque<T>) {
    if q.capacity() == 0 {
        q.reserve_exact(1);
    }
}

/// `t` as signed nanoseconds from `base` (saturating beyond 292 years).
pub(crate) fn offset(base: Instant, t: Instant) -> i64 {
    // Compared first: a failed `checked_duration_since` costs a subtraction of its own,
    // and most offsets kept (a send state's times before its frame's send) are negative.
    if t >= base {
        i64::try_from(t.duration_since(base).as_nanos()).unwrap_or(i64::MAX)
    } else {
        i64::try_from(base.duration_since(t).as_nanos()).map_or(i64::MIN, |n| -n)
    }
}

/// The instant `nanos` from `base`: the inverse of [`offset`].
pub(crate) fn at_offset(base: Instant, nanos: i64) -> Instant {
    let d = Duration::from_nanos(nanos.unsigned_abs());
    if nanos >= 0 { base.checked_add(d) } else { base.checked_sub(d) }.unwrap_or(base)
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
    use super::*;

    #[test]
    fn an_offset_gives_back_its_instant() {
        let base = Instant::now() + Duration::from_secs(3600);
        for d in [0, 1, 999_999_999, 1_000_000_000, 86_400_123_456_789] {
            let d = Duration::from_nanos(d);
            for t in [base + d, base - d] {
                assert_eq!(at_offset(base, offset(base, t)), t);
            }
        }
    }

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
