//! POROUS: Packetized, Optionally-Reliable, Orthogonal UDP Streams.
//!
//! A connection-based protocol over UDP for realtime games: several independently
//! ordered channels per connection, packets sent [reliable, unreliable or
//! passive](SendMode), fragmentation, and TCP-friendly congestion control. This crate is
//! the whole protocol as a pure *sans-IO* core. It consumes datagrams and timestamps and
//! produces datagrams and events; it never touches a socket, a clock, a thread or a
//! global, and its randomness is injected. The same inputs give byte-identical outputs,
//! which is what makes deterministic simulation tests, fuzzing and fixed-step engine loops
//! possible. The adapters bind it to real sockets: `porous-mio`, and `porous-async` with
//! `porous-tokio`, `porous-smol` and `porous-async-std`.
//!
//! # Using it
//!
//! Make a [`Host`] from a [`HostConfig`] with [`Host::from_entropy`] (randomness from the
//! operating system; the choice for real use) or [`Host::with_seed`] (repeatable, for tests
//! and replays), then follow the call contract on [`Host`]: feed received datagrams and the
//! application's calls, call [`Host::step`], drain [`Host::poll_transmit`] and
//! [`Host::poll_event`], and wake again at [`Host::poll_timeout`].
//!
//! # Features
//!
//! - `os-random` (default): [`Host::from_entropy`], through `getrandom` (in a browser,
//!   `crypto.getRandomValues`). Without it the crate needs nothing of the platform;
//!   inject a generator with [`Host::new`].
//!
//! # On the web
//!
//! The crate builds for `wasm32-unknown-unknown`: time is given as [`Instant`] (std's on
//! native targets, `web-time`'s in a browser), `from_entropy` draws from the browser's
//! generator, and secure mode seals with RustCrypto's ChaCha20-Poly1305 instead of ring's
//! (which needs clang to compile for wasm32). `porous-web` runs it in a browser over
//! WebTransport.
//! - `sim`: the deterministic network simulator, `porous_proto::sim`.
//! - `arbitrary`: `arbitrary::Arbitrary` for wire types, and the fuzzing hooks
//!   (`porous_proto::fuzzing`: the fuzz targets' bodies); it enables `sim`.
//!
//! `cargo doc --workspace --no-deps --all-features --open` documents every feature's items,
//! the simulator and the fuzzing hooks included, as docs.rs does (which also marks each
//! with its feature).
//!
//! # Inside
//!
//! The modules follow the protocol's layers, bottom up: [`wire`] (the datagram format),
//! [`seq`] (modular id arithmetic), the transfer layer (frames, acknowledgements, RTT,
//! congestion control), the sequencing layer (channels), the peer state machine and the
//! host. `docs/protocol.md` and `docs/wire-format.md` in the repository describe the
//! protocol in prose.
#![forbid(unsafe_code)]
// Nothing a peer sends may panic the core: no unwrap/expect outside tests.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod arena;
mod channel;
mod config;
mod event;
mod host;
mod lean;
mod limits;
mod listener;
mod peer;
mod peer_map;
pub mod rendezvous;
pub mod seq;
#[cfg(feature = "sim")]
#[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
pub mod sim;
mod stats;
mod time;
pub mod token;
mod transfer;
pub mod wire;

/// The buffer type of every payload: what [`Host::send`] takes (anything `Into<Bytes>`)
/// and what [`Event::Received`] and [`Transmit`] carry. Re-exported so that no
/// application needs `bytes` in its own `Cargo.toml`.
pub use bytes::Bytes;
pub use config::{
    ChannelConfig, ConfigError, CongestionControl, DEFAULT_UNRELIABLE_DEADLINE, HostConfig, PeerConfig, Priority,
    SecureConfig, SequenceStart,
};
pub use event::{
    AdmissionError, ConnectError, DisconnectReason, Event, Mismatch, PeerId, SendError, SendMode, Transmit,
};
pub use host::Host;
pub use peer_map::PeerMap;
pub use stats::{CongestionMode, CongestionStats, HostStats, MemoryUsage, PeerState, PeerStats, TransferStats};
/// The time every call that changes state is given (`now`): on every target but the web
/// this is `std::time::Instant` itself, so native callers pass std's; on
/// `wasm32-unknown-unknown`, where std's cannot be obtained, it is `web-time`'s, read
/// from `performance.now()` (the one Bevy, winit and egui use there). The core never reads
/// it: it only compares the instants it is given and adds durations to them.
pub use web_time::Instant;

#[cfg(any(test, feature = "arbitrary"))]
#[cfg_attr(docsrs, doc(cfg(feature = "arbitrary")))]
pub mod fuzzing;

/// The README's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
