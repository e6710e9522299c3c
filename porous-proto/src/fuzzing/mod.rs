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
pub use wire::{Refs, decode_frame, roundtrip, seed_input};
