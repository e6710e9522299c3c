//! Bodies of the fuzz targets, shared by `fuzz/` (cargo-fuzz) and by seeded replay tests
//! under `cargo test`, so both exercise exactly the same code.
//!
//! Not part of the public API; compiled with the `arbitrary` feature and in tests.
#![allow(missing_docs, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[cfg(feature = "arbitrary")]
mod hooks;
mod host;
mod token;
mod wire;

pub use host::{Forged, ForgedMessage, HostScript, Request, Side, Step, host, host_secure};
pub use token::decode_token;
pub use wire::{ArbitraryDatagram, OwnedMessage, Refs, decode_frame, roundtrip, seed_input};

/// A fixed, seedable byte stream (splitmix64) for the replay tests.
#[cfg(test)]
struct Stream(u64);

#[cfg(test)]
impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fill(&mut self, buf: &mut Vec<u8>, len: usize) {
        buf.clear();
        buf.extend((0..len).map(|_| self.next() as u8));
    }
}
