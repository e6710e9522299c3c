//! Protocol time: what every layer below the host counts time in.
//!
//! The host turns each `Instant` it is given into a [`Time`] once per call: signed
//! nanoseconds since the first instant it was ever given (its epoch). Peers, sessions
//! and the transfer layer compare, add and subtract those, one machine word each where
//! an `Instant` is two, and without the normalising of seconds and nanoseconds an
//! `Instant`'s arithmetic does at every step (15% of a 60 Hz game's instructions went
//! to it, about twenty subtractions per message). Only the host turns a [`Time`] back
//! into an `Instant` ([`Time::instant`]), for `Host::poll_timeout`.
//!
//! Invariants: a [`Time`] is exact for instants within 292 years of the epoch, before or
//! after it; arithmetic beyond that saturates rather than panics (an `Instant` panics on
//! overflow), so no input, however hostile or odd its times, can make it fail. Durations
//! between two times saturate at zero, as `Instant::saturating_duration_since` does.

use std::fmt;
use std::num::NonZeroU64;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;
use web_time::Instant;

/// Nanoseconds since the host's epoch (negative before it), from `i64::MIN + 1` to
/// `i64::MAX`. Kept with the sign bit flipped, as a non-zero `u64`: that order is the
/// signed order (so comparisons are one unsigned comparison), and the one value left out
/// makes `Option<Time>` 8 bytes, as most of the times a connection keeps are optional.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Time(NonZeroU64);

const SIGN: u64 = 1 << 63;

/// A duration's nanoseconds, saturating at `i64::MAX` (292 years).
fn nanos_of(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl Time {
    /// The epoch itself.
    #[cfg(test)]
    pub(crate) const ZERO: Self = Self::from_nanos(0);
    /// The earliest time there is.
    #[cfg(test)]
    pub(crate) const MIN: Self = Self::from_nanos(i64::MIN);

    /// The time `nanos` nanoseconds after the epoch (`i64::MIN`, the value left out, is
    /// taken as the earliest time, one nanosecond later).
    pub(crate) const fn from_nanos(nanos: i64) -> Self {
        match NonZeroU64::new(nanos.cast_unsigned() ^ SIGN) {
            Some(bits) => Self(bits),
            None => Self(NonZeroU64::MIN),
        }
    }

    /// Nanoseconds since the epoch.
    pub(crate) const fn nanos(self) -> i64 {
        (self.0.get() ^ SIGN).cast_signed()
    }

    /// `t` as a time counted from `epoch`.
    pub(crate) fn since(epoch: Instant, t: Instant) -> Self {
        // Compared first: a failed `checked_duration_since` costs a subtraction of its own.
        Self::from_nanos(if t >= epoch {
            nanos_of(t.duration_since(epoch))
        } else {
            nanos_of(epoch.duration_since(t)).saturating_neg()
        })
    }

    /// The instant this time stands for, given the `epoch` it counts from (saturating at
    /// the ends of `Instant`'s range, which on native platforms lie far beyond 292 years
    /// from any instant a program is given; on the web an `Instant` cannot be before the
    /// page loaded, and a time before that gives the epoch, which is past anyway).
    pub(crate) fn instant(self, epoch: Instant) -> Instant {
        let n = self.nanos();
        let d = Duration::from_nanos(n.unsigned_abs());
        if n >= 0 { epoch.checked_add(d) } else { epoch.checked_sub(d) }.unwrap_or(epoch)
    }

    /// How long after `earlier` this is; zero if it is not after it.
    pub(crate) fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(u64::try_from(self.nanos().saturating_sub(earlier.nanos())).unwrap_or(0))
    }
}

impl Default for Time {
    /// The epoch.
    fn default() -> Self {
        Self::from_nanos(0)
    }
}

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Time({} ns)", self.nanos())
    }
}

impl Add<Duration> for Time {
    type Output = Self;

    /// Saturating: a time past 292 years from the epoch is as late as times go.
    fn add(self, d: Duration) -> Self {
        Self::from_nanos(self.nanos().saturating_add(nanos_of(d)))
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for Time {
    type Output = Self;

    fn sub(self, d: Duration) -> Self {
        Self::from_nanos(self.nanos().saturating_sub(nanos_of(d)))
    }
}

impl Sub for Time {
    type Output = Duration;

    /// The duration since `earlier`, saturating at zero (as `Instant`'s subtraction does).
    fn sub(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use quickcheck::quickcheck;

    use super::*;

    #[test]
    fn a_time_gives_back_its_instant() {
        // Two days ahead: on the web an `Instant` cannot be before the page loaded.
        let epoch = Instant::now() + Duration::from_secs(2 * 86_400);
        for d in [0, 1, 999_999_999, 1_000_000_000, 86_400_123_456_789] {
            let d = Duration::from_nanos(d);
            for t in [epoch + d, epoch - d] {
                assert_eq!(Time::since(epoch, t).instant(epoch), t);
            }
        }
    }

    #[test]
    fn an_optional_time_takes_one_word() {
        assert_eq!(size_of::<Option<Time>>(), 8);
        assert_eq!(Time::MIN.nanos(), i64::MIN + 1);
        assert!(
            Time::MIN < Time::from_nanos(-1) && Time::from_nanos(-1) < Time::ZERO && Time::ZERO < Time::from_nanos(1)
        );
        assert_eq!(Time::default(), Time::ZERO);
    }

    #[test]
    fn arithmetic_saturates_instead_of_overflowing() {
        let late = Time::from_nanos(i64::MAX - 5);
        assert_eq!(late + Duration::from_secs(1), Time::from_nanos(i64::MAX));
        assert_eq!(late + Duration::MAX, Time::from_nanos(i64::MAX));
        assert_eq!(Time::MIN - Duration::from_nanos(1), Time::MIN);
        assert_eq!(Time::MIN.saturating_duration_since(late), Duration::ZERO);
        assert_eq!(
            late.saturating_duration_since(Time::MIN),
            Duration::from_nanos(i64::MAX.unsigned_abs()),
            "the difference saturates"
        );
    }

    quickcheck! {
        /// Within the exact range, a `Time` orders and subtracts as the instants it
        /// stands for do.
        fn times_compute_as_instants_do(a: u64, b: u64, d: u64) -> bool {
            let epoch = Instant::now() + Duration::from_secs(3600);
            // Instants within about an hour of the epoch either way, durations up to 4 s.
            let at = |x: u64| {
                let off = Duration::from_nanos(x % 3_600_000_000_000);
                if x.is_multiple_of(2) { epoch + off } else { epoch - off }
            };
            let (ia, ib, d) = (at(a), at(b), Duration::from_nanos(d % 4_000_000_000));
            let (ta, tb) = (Time::since(epoch, ia), Time::since(epoch, ib));
            ta.cmp(&tb) == ia.cmp(&ib)
                && ta - tb == ia.saturating_duration_since(ib)
                && (ta + d).instant(epoch) == ia + d
                && (ta - d).instant(epoch) == ia - d
        }
    }
}
