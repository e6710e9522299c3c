//! POROUS in the browser: the client side of the protocol core over a WebTransport
//! session, for Rust compiled to `wasm32-unknown-unknown` (a game's web build, Bevy's
//! included).
//!
//! A browser cannot send UDP. [`Client::connect`] opens a WebTransport session (HTTP/3 over
//! QUIC) to a server of `porous-webtransport`, which hands the session's datagrams to the
//! same POROUS host its UDP clients reach, and runs the POROUS handshake over the session's
//! datagrams. The connection then has the same channels, modes and guarantees as a UDP
//! one: [`Client::send`] on a channel with a [`SendMode`], [`Client::try_recv`] from a game
//! loop or [`Client::recv`] from async code, [`Client::stats`], [`Client::disconnect`].
//!
//! The core is driven by a task of the page's event loop (`spawn_local`), woken by the
//! session's datagrams, by the browser's timers (`setTimeout`, at the core's next deadline)
//! and by this handle's calls; its time is the browser's clock (`performance.now()`,
//! through `porous_proto::Instant`). The connection's datagram size is the session's
//! (`maxDatagramSize`, smaller than UDP's), on both sides; a session that closes ends the
//! connection with [`DisconnectReason::TransportClosed`].
//!
//! ```ignore
//! // (wasm32 only: doctests run natively, where this crate is empty; examples/page.rs
//! // compiles the same calls for wasm32 in CI.)
//! use porous_web::{Client, ClientOptions, SendMode};
//!
//! # async fn game() -> Result<(), porous_web::Error> {
//! let mut options = ClientOptions::default();
//! // A self-signed development certificate: its SHA-256, as the server printed it.
//! options.certificate_hashes.push([0; 32]);
//! let client = Client::connect("https://127.0.0.1:4433/", options).await?;
//! client.send(0, &b"hello"[..], SendMode::Reliable)?;
//! while let Ok(packet) = client.recv().await {
//!     // packet.channel, packet.mode, packet.data
//! #   let _ = packet;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The handle is `!Send` (it holds JavaScript objects): in Bevy, keep it in a `NonSend`
//! resource and call [`Client::try_recv`] each frame. A server in secure mode:
//! [`ClientOptions::token`]. On targets other than wasm32 this crate is empty.
#![forbid(unsafe_code)]
// Natively the crate is empty, and the links above point at nothing.
#![cfg_attr(not(target_family = "wasm"), allow(rustdoc::broken_intra_doc_links))]

#[cfg(target_family = "wasm")]
mod client;

#[cfg(target_family = "wasm")]
pub use client::{Client, ClientOptions, Disconnected, Error, Packet};
#[cfg(target_family = "wasm")]
pub use porous_proto::{self as proto, DisconnectReason, HostConfig, PeerStats, SendError, SendMode};
