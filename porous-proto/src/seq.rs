//! Modular sequence arithmetic for POROUS's two id spaces.
//!
//! Frame ids (transfer layer) count modulo X = 2^32 and packet ids (sequencing layer)
//! modulo Y = 2^24. Every comparison between ids goes through a [`SeqSpace`], which makes
//! the wrap explicit: nothing in the crate compares raw integers with `<`.
//!
//! The windows of the spec are all half-open modular ranges `[start, start + len)`:
//!
//! | equation | window | here |
//! |---|---|---|
//! | (1) | P_t = \[k_b, k_b + N_P) | `FRAME.in_range(k, k_b, N_P)` |
//! | (2) | P_r = \[i_b - N_P, i_b + N_P) | `FRAME.in_range(k, i_b - N_P, 2 N_P)` |
//! | (3) | advance i_b when k ∈ \[i_b, i_b + N_P) | `FRAME.in_range(k, i_b, N_P)` |
//! | (16) | Q_t = \[n_b, n_b + N_Q) | `PACKET.in_range(x, n_b, N_Q)` |
//! | (17) | Q_r = \[m_b, m_b + N_Q) | `PACKET.in_range(x, m_b, N_Q)` |
//! | (4), (18) | k mod S = S - 1, m mod M = M - 1 | [`SeqSpace::is_spaced`] |
//!
//! Invariant: every value handed out by a `SeqSpace` method is already reduced modulo the
//! space, so results can be compared with `==` directly.

use core::cmp::Ordering;

/// N_P: the transfer window, in frames (spec §3.1.1).
pub const FRAME_WINDOW: u32 = 65_536;
/// S: the sentinel frame spacing, N_P / 2 (spec §3.1.2, equation (4)).
pub const SENTINEL_SPACING: u32 = FRAME_WINDOW / 2;
/// N_Q: the channel transfer window, in packets (spec §3.2.1).
pub const PACKET_WINDOW: u32 = 65_536;
/// M: the window acknowledgement spacing, N_Q / 8 (spec §3.2.1, equation (18)).
pub const WINDOW_ACK_SPACING: u32 = PACKET_WINDOW / 8;

/// A space of sequence numbers modulo 2^bits, 1 <= bits <= 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqSpace {
    bits: u32,
}

impl SeqSpace {
    /// Frame ids: X = 2^32.
    pub const FRAME: Self = Self::new(32);
    /// Packet ids: Y = 2^24.
    pub const PACKET: Self = Self::new(24);

    /// A space of `bits`-bit ids. Panics at compile time (in const use) or construction if
    /// `bits` is 0 or above 32: the spaces are fixed by the protocol, never by input.
    pub const fn new(bits: u32) -> Self {
        assert!(1 <= bits && bits <= 32, "sequence spaces are 1 to 32 bits wide");
        Self { bits }
    }

    /// Width of the space in bits.
    pub const fn bits(self) -> u32 {
        self.bits
    }

    /// The modulus, 2^bits.
    pub const fn modulus(self) -> u64 {
        1u64 << self.bits
    }

    /// The largest id, 2^bits - 1.
    pub const fn mask(self) -> u32 {
        (self.modulus() - 1) as u32
    }

    /// Half the modulus: the horizon of "newer than" comparisons.
    pub const fn half(self) -> u32 {
        (self.modulus() / 2) as u32
    }

    /// Reduces `x` into the space.
    pub const fn wrap(self, x: u32) -> u32 {
        x & self.mask()
    }

    /// `a + n` modulo the space.
    pub const fn add(self, a: u32, n: u32) -> u32 {
        self.wrap(a.wrapping_add(n))
    }

    /// `a - n` modulo the space.
    pub const fn sub(self, a: u32, n: u32) -> u32 {
        self.wrap(a.wrapping_sub(n))
    }

    /// Forward distance from `from` to `to`: the `d` in `[0, 2^bits)` with `from + d = to`.
    pub const fn distance(self, from: u32, to: u32) -> u32 {
        self.wrap(to.wrapping_sub(from))
    }

    /// Whether `x` lies in the modular range `[start, start + len)`.
    ///
    /// `len` may be as large as the whole space (then every id is inside).
    pub const fn in_range(self, x: u32, start: u32, len: u64) -> bool {
        (self.distance(start, x) as u64) < len
    }

    /// Whether `a` is strictly newer than `b`: ahead of it by less than half the space.
    pub const fn is_newer(self, a: u32, b: u32) -> bool {
        let d = self.distance(b, a);
        d != 0 && d < self.half()
    }

    /// Wrap-aware ordering of two ids, each read relative to the other: `Greater` when `a`
    /// is newer. Ids exactly half the space apart compare as `Less` both ways round; callers
    /// that need a total order must keep their ids within a window narrower than half.
    pub const fn cmp(self, a: u32, b: u32) -> Ordering {
        if self.wrap(a) == self.wrap(b) {
            Ordering::Equal
        } else if self.is_newer(a, b) {
            Ordering::Greater
        } else {
            Ordering::Less
        }
    }

    /// Signed offset of `a` from `b`, in `[-half, half)`.
    pub const fn offset(self, a: u32, b: u32) -> i64 {
        let d = self.distance(b, a) as i64;
        if d >= self.half() as i64 { d - self.modulus() as i64 } else { d }
    }

    /// Expands `truncated`, the low `bits` bits of some id, to the id of this space nearest
    /// `reference`: the unique candidate in `[reference - 2^(bits-1), reference + 2^(bits-1))`.
    /// When `bits` covers the whole space the value is returned as it is.
    pub const fn expand(self, truncated: u32, bits: u32, reference: u32) -> u32 {
        if bits >= self.bits {
            return self.wrap(truncated);
        }
        let tmask = (1u32 << bits) - 1;
        let half = 1u32 << (bits - 1);
        let delta = truncated.wrapping_sub(reference) & tmask;
        if delta >= half { self.sub(reference, (1u32 << bits) - delta) } else { self.add(reference, delta) }
    }

    /// Expands `truncated` (the low `bits` bits of an id known to lie in
    /// `[limit - 2^bits, limit)`) to that id: used where every candidate is older than a
    /// known bound, such as acknowledged frame ids below the next id to send.
    pub const fn expand_below(self, truncated: u32, bits: u32, limit: u32) -> u32 {
        if bits >= self.bits {
            return self.wrap(truncated);
        }
        let tmask = (1u32 << bits) - 1;
        let newest = self.sub(limit, 1);
        let back = newest.wrapping_sub(truncated) & tmask;
        self.sub(newest, back)
    }

    /// Equations (4) and (18): whether `x mod spacing = spacing - 1`. `spacing` must be a
    /// power of two no larger than the space, so that it divides the modulus and the rule
    /// holds across the wrap.
    pub const fn is_spaced(self, x: u32, spacing: u32) -> bool {
        debug_assert!(spacing.is_power_of_two() && spacing as u64 <= self.modulus());
        x & (spacing - 1) == spacing - 1
    }

    /// The newest `m` in `[from, to)` with `m mod spacing = spacing - 1`, if any: the window
    /// acknowledgement owed when a receive window advances from `from` to `to`.
    pub const fn last_spaced_in(self, from: u32, to: u32, spacing: u32) -> Option<u32> {
        let len = self.distance(from, to);
        if len == 0 {
            return None;
        }
        let last = self.sub(to, 1);
        // Walk back from `last` to the nearest spaced id.
        let back = (last.wrapping_add(1)) & (spacing - 1);
        if back >= len { None } else { Some(self.sub(last, back)) }
    }

    /// The smallest number of whole bytes (1 to 4) whose truncation of `id` expands back to
    /// `id` for every receiver reference in `[low, high]` (inclusive): the receiver's window
    /// base is known to lie between the two. The margin doubles the needed span so that
    /// references that drift while a datagram is in flight still expand it correctly.
    pub const fn truncation_bytes(self, id: u32, low: u32, high: u32) -> u32 {
        // How far the reference may be ahead of the id, and the id ahead of the reference;
        // an id older than `low` (a resend) only constrains the first.
        let behind = self.offset(high, id);
        let ahead = self.offset(id, low) + 1;
        let span = if behind > ahead { behind } else { ahead };
        let span = if span < 0 { 0 } else { span as u64 };
        let need = 2 * span;
        let mut bytes = 1;
        while bytes < 4 && need > (1u64 << (8 * bytes - 1)) {
            bytes += 1;
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use quickcheck::quickcheck;

    const SMALL: [u32; 4] = [1, 2, 3, 5];

    #[test]
    fn constants_divide_their_spaces() {
        assert_eq!(SeqSpace::FRAME.modulus() % u64::from(SENTINEL_SPACING), 0);
        assert_eq!(u64::from(FRAME_WINDOW) % u64::from(SENTINEL_SPACING), 0);
        assert_eq!(SeqSpace::PACKET.modulus() % u64::from(WINDOW_ACK_SPACING), 0);
        assert_eq!(PACKET_WINDOW % WINDOW_ACK_SPACING, 0);
        assert_eq!(SeqSpace::PACKET.mask(), 0xFF_FFFF);
        assert_eq!(SeqSpace::FRAME.mask(), u32::MAX);
    }

    #[test]
    fn exhaustive_in_range_matches_naive_on_small_moduli() {
        for bits in SMALL {
            let s = SeqSpace::new(bits);
            let m = s.modulus() as u32;
            for start in 0..m {
                for len in 0..=u64::from(m) {
                    for x in 0..m {
                        let naive = (0..len).any(|i| (u64::from(start) + i) % u64::from(m) == u64::from(x));
                        assert_eq!(s.in_range(x, start, len), naive, "bits {bits} x {x} start {start} len {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn exhaustive_newer_is_antisymmetric_off_the_half() {
        for bits in SMALL {
            let s = SeqSpace::new(bits);
            let m = s.modulus() as u32;
            for a in 0..m {
                for b in 0..m {
                    let d = s.distance(b, a);
                    if a == b || d == s.half() {
                        assert!(!s.is_newer(a, b) || d != s.half());
                    } else {
                        assert_ne!(s.is_newer(a, b), s.is_newer(b, a), "bits {bits} a {a} b {b}");
                    }
                    assert_eq!(s.add(b, d), a);
                    assert_eq!(s.sub(a, d), b);
                }
            }
        }
    }

    #[test]
    fn exhaustive_expand_recovers_ids_near_the_reference() {
        for bits in [3u32, 4, 5] {
            let s = SeqSpace::new(bits);
            let m = s.modulus() as u32;
            for tbits in 1..=bits {
                let half = 1i64 << (tbits - 1);
                for reference in 0..m {
                    for off in -half..half {
                        let id = s.wrap((i64::from(reference) + off).rem_euclid(i64::from(m)) as u32);
                        let t = id & ((1u32 << tbits) - 1);
                        assert_eq!(
                            s.expand(t, tbits, reference),
                            id,
                            "bits {bits} t {tbits} ref {reference} off {off}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn exhaustive_expand_below_recovers_older_ids() {
        for bits in [3u32, 4, 5] {
            let s = SeqSpace::new(bits);
            let m = s.modulus() as u32;
            for tbits in 1..=bits {
                for limit in 0..m {
                    for back in 1..=(1u32 << tbits).min(m) {
                        let id = s.sub(limit, back);
                        let t = id & ((1u32 << tbits) - 1);
                        assert_eq!(s.expand_below(t, tbits, limit), id);
                    }
                }
            }
        }
    }

    #[test]
    fn exhaustive_last_spaced_in_matches_naive() {
        for bits in [3u32, 4] {
            let s = SeqSpace::new(bits);
            let m = s.modulus() as u32;
            for spacing in [1u32, 2, 4] {
                for from in 0..m {
                    for len in 0..m {
                        let to = s.add(from, len);
                        let naive = (0..len).rev().map(|i| s.add(from, i)).find(|&x| x % spacing == spacing - 1);
                        assert_eq!(s.last_spaced_in(from, to, spacing), naive, "from {from} to {to} spacing {spacing}");
                    }
                }
            }
        }
    }

    #[test]
    fn spec_figure_6_windows() {
        // N_P = 4 with k_b = i_b = 0 in a 4-bit space. After frame 3 arrives, i_b = 4 and
        // frames 0..=2 are still inside the receive window [i_b - N_P, i_b + N_P).
        let s = SeqSpace::new(4);
        let n_p = 4u64;
        let i_b = 4;
        for k in 0..3 {
            assert!(s.in_range(k, s.sub(i_b, 4), 2 * n_p));
            assert!(!s.in_range(k, i_b, n_p), "old frames do not advance i_b");
        }
        assert!(s.in_range(7, i_b, n_p));
        assert!(!s.in_range(8, s.sub(i_b, 4), 2 * n_p));
    }

    #[test]
    fn truncation_bytes_grow_with_the_span() {
        let s = SeqSpace::FRAME;
        assert_eq!(s.truncation_bytes(100, 90, 101), 1);
        assert_eq!(s.truncation_bytes(100, 100 - 70, 101), 2);
        assert_eq!(s.truncation_bytes(100_000, 0, 100_001), 3);
        assert_eq!(s.truncation_bytes(0x4000_0000, 0, 0x4000_0001), 4);
        // Across the wrap.
        assert_eq!(s.truncation_bytes(3, u32::MAX - 5, 4), 1);
        // A resend older than every acknowledged frame is bounded by the newest id only.
        assert_eq!(s.truncation_bytes(10, 50, 60), 1);
        assert_eq!(s.truncation_bytes(10, 50, 200), 2);
    }

    quickcheck! {
        fn frame_expand_roundtrip(reference: u32, off: i16) -> bool {
            let s = SeqSpace::FRAME;
            let id = reference.wrapping_add(off as i32 as u32);
            s.expand(id & 0xFFFF, 16, reference) == id
                && s.expand(id & 0xFF_FFFF, 24, reference) == id
                && s.expand(id, 32, reference) == id
        }

        fn packet_expand_roundtrip(reference: u32, off: i16) -> bool {
            let s = SeqSpace::PACKET;
            let reference = s.wrap(reference);
            let id = s.wrap(reference.wrapping_add(off as i32 as u32));
            s.expand(id & 0xFFFF, 16, reference) == id && s.expand(id, 24, reference) == id
        }

        fn truncation_is_safe_for_every_reference(id: u32, behind: u16, ahead: u16, pick: u16) -> bool {
            // The receiver's reference lies in [low, high]; any such reference must expand the
            // truncated id back to itself.
            let s = SeqSpace::FRAME;
            let low = id.wrapping_sub(u32::from(ahead));
            let high = id.wrapping_add(u32::from(behind));
            let bytes = s.truncation_bytes(id, low, high);
            let span = u32::from(ahead) + u32::from(behind);
            let reference = low.wrapping_add(if span == 0 { 0 } else { u32::from(pick) % (span + 1) });
            let bits = 8 * bytes;
            let t = if bits == 32 { id } else { id & ((1 << bits) - 1) };
            s.expand(t, bits, reference) == id
        }

        fn offset_and_add_agree(a: u32, b: u32) -> bool {
            let s = SeqSpace::PACKET;
            let (a, b) = (s.wrap(a), s.wrap(b));
            let off = s.offset(a, b);
            s.wrap((i64::from(b) + off).rem_euclid(s.modulus() as i64) as u32) == a
        }

        fn window_membership_is_shift_invariant(x: u32, start: u32, len: u16, shift: u32) -> bool {
            let s = SeqSpace::FRAME;
            s.in_range(x, start, u64::from(len)) == s.in_range(x.wrapping_add(shift), start.wrapping_add(shift), u64::from(len))
        }
    }
}
