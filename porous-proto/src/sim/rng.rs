//! Every seeded generator of the simulator and of the crate's own harnesses (tests,
//! benchmarks, fuzz bodies), in one place, so that a seed means the same thing everywhere.

use std::net::SocketAddr;

use rand_pcg::{Pcg32, Pcg64Mcg};

/// The stream [`seeded_rng`] draws from.
const STREAM: u64 = 0x0a02_bdbf_7bb3_c0a7;

/// A generator for a [`Host`](crate::Host) made from `seed` alone: PCG32 on a fixed
/// stream. The same seed gives the same host, byte for byte, in every test, benchmark and
/// fuzz body that uses it.
///
/// ```
/// use porous_proto::{Host, HostConfig, sim::seeded_rng};
/// let host = Host::new(HostConfig::default(), seeded_rng(1))?;
/// # Ok::<(), porous_proto::ConfigError>(())
/// ```
pub fn seeded_rng(seed: u64) -> Pcg32 {
    Pcg32::new(seed, STREAM)
}

/// The generator of a network's own draws (link conditions, [`Network::random`]).
///
/// [`Network::random`]: super::Network::random
pub(crate) fn network_rng(seed: u64) -> Pcg64Mcg {
    Pcg64Mcg::new(u128::from(seed) << 1 | 1)
}

/// The generator of the host a network holds at `addr`: the network's seed and the address
/// (FNV-1a of its text) pick it, so adding a host never changes the others.
pub(crate) fn host_rng(seed: u64, addr: SocketAddr) -> Pcg32 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in addr.to_string().bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    Pcg32::new(seed ^ h, h | 1)
}

/// The generator of the random stalls of the host at `addr` (`Network::set_stalls`): the
/// host's, on another stream, so stalls draw nothing from the links' generator.
pub(crate) fn stall_rng(seed: u64, addr: SocketAddr) -> Pcg32 {
    let mut rng = host_rng(seed, addr);
    Pcg32::new(rand_core::Rng::next_u64(&mut rng), STREAM ^ 0x5bd1_e995)
}

/// SplitMix64: the seeded stream of test inputs (random bytes for fuzz replays, choices of
/// property tests) of the crate's unit tests.
#[cfg(test)]
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64(u64);

#[cfg(test)]
impl SplitMix64 {
    pub(crate) const fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Replaces the contents of `buf` with `len` bytes, the low byte of one draw each.
    pub(crate) fn fill(&mut self, buf: &mut Vec<u8>, len: usize) {
        buf.clear();
        buf.extend((0..len).map(|_| self.next_u64() as u8));
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use rand_core::Rng;

    use super::*;

    #[test]
    fn seeds_mean_the_same_generators_as_before_they_were_gathered_here() {
        // The values the copies this module replaced produced: a change here changes every
        // seeded test, benchmark and fuzz replay.
        let mut pcg = seeded_rng(1);
        assert_eq!((pcg.next_u64(), pcg.next_u64()), (0x6AC2_0236_5435_2D7F, 0x7556_0A43_0768_DD4C));
        let mut s = SplitMix64::new(0);
        assert_eq!(s.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(s.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut buf = Vec::new();
        SplitMix64::new(0).fill(&mut buf, 2);
        assert_eq!(buf, [0xAF, 0xF4]);
        let u = SplitMix64::new(0).unit();
        assert!((0.0..1.0).contains(&u));
    }
}
