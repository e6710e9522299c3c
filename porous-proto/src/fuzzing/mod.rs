//! The fuzzing hooks (feature `arbitrary`): the bodies of POROUS's fuzz targets. Each
//! takes arbitrary bytes, drives the decoders or two whole hosts with them, and panics on
//! a broken invariant (a decoder that panics or misreads, a host that amplifies, leaks
//! memory past its bounds, or delivers what was never sent); it returns how far the input
//! got, so a replay can tell it reached past the checks. Run them from any fuzzer:
//! `fuzz/` in the repository runs each with cargo-fuzz, and `cargo test` replays seeded
//! inputs and every input in `fuzz/regressions/` through them.
//!
//! ```
//! // A libFuzzer, AFL or honggfuzz target is one call.
//! fn target(data: &[u8]) {
//!     porous_proto::fuzzing::host(data);
//! }
//! target(b"any bytes at all");
//! ```
//!
//! What an input means (the scripts behind `host` and `host_secure`) follows the protocol
//! and changes with it; only these functions are the hooks.
#![allow(missing_docs, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[cfg(feature = "arbitrary")]
mod hooks;
mod host;
mod token;
mod wire;

pub use host::{host, host_secure};
// The scripts' types: for the crate's own replay tests, not hooks.
#[doc(hidden)]
pub use host::{Forged, ForgedMessage, HostScript, Request, Side, Step};
pub use token::decode_token;
#[doc(hidden)]
pub use wire::Refs;
pub use wire::{decode_frame, roundtrip, seed_input};
