//! POROUS: Packetized, Optionally-Reliable, Orthogonal UDP Streams.
//!
//! A connection-based protocol over UDP for realtime games: several independently ordered
//! channels per connection, packets sent reliable, unreliable or passive, fragmentation,
//! and TCP-friendly congestion control. This crate is the whole protocol as a pure
//! *sans-IO* core: it consumes datagrams and timestamps and produces datagrams and events.
//! It never touches a socket, a clock, a thread or a global; randomness is injected.
#![forbid(unsafe_code)]
// Nothing a peer sends may panic the core: no unwrap/expect outside tests.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod seq;
pub mod wire;

#[allow(dead_code)]
pub(crate) mod channel;
#[cfg(any(test, feature = "arbitrary"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod transfer;
