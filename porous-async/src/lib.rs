//! POROUS for any async runtime: a [`Host`] you can `.await`, written once against a small
//! [`Runtime`] interface.
//!
//! [`Host::bind_with`] opens a UDP socket and spawns one *driver* task that owns it and the
//! sans-IO protocol core ([`porous_proto::Host`]). The driver wakes on datagrams, on calls
//! from handles and at the core's next deadline; it feeds the core, steps it, sends its
//! datagrams and routes its events. [`Host`] and [`Peer`] are cheap cloneable handles to
//! it. All protocol behaviour lives in the core: this crate is sockets, timers, wake-ups
//! and queues, and all its runtime needs are in [`Runtime`] (spawn the driver, a timer, a
//! UDP socket that reports readiness), in the spirit of quinn's `Runtime` trait.
//!
//! Applications use a binding crate, which implements [`Runtime`] and gives `Host` a
//! `bind(addr, config)` of its own: `porous-tokio`, `porous-smol`, `porous-async-std`.
//! They re-export this crate's handles, so their APIs are this one. The `async-io`
//! feature provides the socket and timer of the `async-io` reactor that smol and
//! async-std share ([`runtime::async_io`]).
//!
//! ```
//! use porous_async::runtime::async_io::{AsyncIoSocket, AsyncIoTimer};
//! use porous_async::runtime::{AsyncTimer, AsyncUdpSocket, Runtime};
//! use porous_async::{Host, HostConfig, SendMode};
//! # use std::{future::Future, io, pin::Pin, time::Instant};
//!
//! /// A runtime of one thread per driver, on the async-io reactor.
//! #[derive(Debug)]
//! struct Threads;
//!
//! impl Runtime for Threads {
//!     fn spawn(&self, driver: Pin<Box<dyn Future<Output = ()> + Send>>) {
//!         std::thread::spawn(move || futures_lite::future::block_on(driver));
//!     }
//!     fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
//!         Box::pin(AsyncIoTimer::at(deadline))
//!     }
//!     fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Box<dyn AsyncUdpSocket>> {
//!         Ok(Box::new(AsyncIoSocket::new(socket)?))
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! futures_lite::future::block_on(async {
//!     let server = Host::bind_with(&Threads, "127.0.0.1:0", HostConfig::default())?;
//!     let client = Host::bind_with(&Threads, "127.0.0.1:0", HostConfig::default())?;
//!
//!     let (to_client, to_server) = futures_lite::future::zip(server.accept(), client.connect(server.local_addr())).await;
//!     let (to_client, to_server) = (to_client?, to_server?);
//!
//!     to_server.send(2, &b"hello"[..], SendMode::Reliable)?;
//!     let packet = to_client.recv().await?;
//!     assert_eq!((packet.channel, packet.mode, &packet.data[..]), (2, SendMode::Reliable, &b"hello"[..]));
//!
//!     // Flushes what was sent, then completes the disconnection handshake.
//!     to_server.disconnect().await;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! # Connect data, admission and disconnect codes
//!
//! A client can send up to 256 bytes with its request ([`Host::connect_with`]: a version,
//! a login ticket); the server reads them with [`Peer::connect_data`]. By default the
//! server admits every compatible request itself and hands the connection to
//! [`Host::accept`]. With [`HostConfig::manual_accept`] the application decides first:
//! [`Host::incoming`] yields each request as an [`Incoming`], whose
//! [`accept`](Incoming::accept) resolves with the connection and whose
//! [`reject`](Incoming::reject) makes the client's attempt fail with
//! [`DisconnectReason::Rejected`] and the code. [`Peer::disconnect_with`] ends a connection
//! with a code the other side's [`Peer::recv`] returns in [`DisconnectReason::Remote`].
//!
//! ```
//! # use porous_async::runtime::async_io::{AsyncIoSocket, AsyncIoTimer};
//! # use porous_async::runtime::{AsyncTimer, AsyncUdpSocket, Runtime};
//! use porous_async::{DisconnectReason, Disconnected, Error, Host, HostConfig};
//! # use std::{future::Future, io, pin::Pin, time::Instant};
//! # #[derive(Debug)]
//! # struct Threads;
//! # impl Runtime for Threads {
//! #     fn spawn(&self, driver: Pin<Box<dyn Future<Output = ()> + Send>>) {
//! #         std::thread::spawn(move || futures_lite::future::block_on(driver));
//! #     }
//! #     fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
//! #         Box::pin(AsyncIoTimer::at(deadline))
//! #     }
//! #     fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Box<dyn AsyncUdpSocket>> {
//! #         Ok(Box::new(AsyncIoSocket::new(socket)?))
//! #     }
//! # }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! futures_lite::future::block_on(async {
//!     let mut config = HostConfig::default();
//!     config.manual_accept = true;
//!     let server = Host::bind_with(&Threads, "127.0.0.1:0", config)?;
//!     let client = Host::bind_with(&Threads, "127.0.0.1:0", HostConfig::default())?;
//!     let old_client = Host::bind_with(&Threads, "127.0.0.1:0", HostConfig::default())?;
//!
//!     let serve = async {
//!         // The server decides on each request from its connect data.
//!         let mut player = None;
//!         while player.is_none() {
//!             let request = server.incoming().await?;
//!             if request.data().starts_with(b"v2 ") {
//!                 player = Some(request.accept().await?);
//!             } else {
//!                 request.reject(426);
//!             }
//!         }
//!         Ok::<_, Error>(player)
//!     };
//!     let connect = async {
//!         let old = old_client.connect_with(server.local_addr(), &b"v1 ticket:8f3a"[..]).await;
//!         assert!(matches!(old, Err(Error::Failed(DisconnectReason::Rejected { code: 426, .. }))));
//!         client.connect_with(server.local_addr(), &b"v2 ticket:8f3a"[..]).await
//!     };
//!     let (player, to_server) = futures_lite::future::zip(serve, connect).await;
//!     let (player, to_server) = (player?.expect("admitted"), to_server?);
//!     assert_eq!(&player.connect_data()[..], b"v2 ticket:8f3a");
//!
//!     // The server kicks the player with a code; the client reads it.
//!     player.disconnect_with(7).await;
//!     assert_eq!(to_server.recv().await, Err(Disconnected(DisconnectReason::remote(7))));
//!     Ok(())
//! })
//! # }
//! ```
//!
//! # A server's view: who is connected, who joins and leaves, broadcasts
//!
//! A game server needs its whole population every tick, not only one task per
//! connection: [`Host::peers`] lists the established connections ([`PeerInfo`]: id,
//! address, connect data, client id); [`Host::events`] streams [`HostEvent`]s, a
//! `Connected` for each new connection, an `AddressChanged` for each that moves to a new
//! address of its remote (a NAT rebinding; [`Peer::remote`] follows it too) and a
//! `Disconnected` with the reason for each that ends, so a server notices who left
//! without polling every [`Peer`]; and
//! [`Host::broadcast`] and [`Host::send_to`] queue one packet for every connection or a
//! set of them in one call (the payload shared, not copied), returning the connections
//! that refused it.
//!
//! ```
//! use porous_async::{Host, HostEvent, SendMode};
//!
//! async fn game_loop(server: Host) {
//!     let mut events = server.events();
//!     // Elsewhere: `server.accept()` hands each connection to a task that reads it.
//!     while let Some(event) = events.next().await {
//!         match event {
//!             HostEvent::Connected { peer, .. } => {
//!                 let welcome = format!("{} joined; {} players", peer.id, server.peers().len());
//!                 server.broadcast(0, welcome.into_bytes(), SendMode::Reliable);
//!             }
//!             HostEvent::Disconnected { peer, reason, .. } => {
//!                 server.broadcast(0, format!("{} left ({reason})", peer.id).into_bytes(), SendMode::Reliable);
//!             }
//!             _ => {}
//!         }
//!     }
//! }
//! ```
//!
//! # Queues and backpressure
//!
//! Every queue between the driver and the handles is bounded:
//!
//! - Each connection has a delivery queue of [`DELIVERY_QUEUE`] packets, read by
//!   [`Peer::recv`]. When it is full, an **unreliable** packet is dropped and counted
//!   ([`DeliveryStats::unreliable_dropped`]). A **reliable or passive** packet is never
//!   dropped: the driver holds it back, and stops reading the socket while the consumer
//!   catches up (the datagrams wait in the kernel's buffer; the consumer's `recv` wakes
//!   the driver as soon as there is room). If the consumer makes no room for 5 ms, the
//!   driver reads again and, until the held packets fit in the queue, leaves that peer's
//!   datagrams unread
//!   ([`DeliveryStats::datagrams_deferred`]), so what it holds is at most what one receive
//!   call completes (the packets of the datagrams it brought and those the core had
//!   buffered for that peer, which `max_reassembly_bytes` bounds). The remote sees this as
//!   loss and resends reliable and passive data later, so a slow consumer slows its own
//!   sender, and holds up no one else for longer than those 5 ms. A consumer that stops reading for longer than the
//!   peer timeout loses the connection to [`DisconnectReason::Timeout`]; one that keeps
//!   reading loses nothing.
//! - Established incoming connections wait for [`Host::accept`] in a backlog of
//!   [`ACCEPT_BACKLOG`]. When it is full, or no [`Host`] handle is left to accept, a new
//!   connection is ended at once with [`porous_proto::Host::disconnect_now`] (the remote
//!   sees [`DisconnectReason::Remote`]). So are connections still queued when the last
//!   `Host` handle is dropped.
//! - With [`HostConfig::manual_accept`], connection requests wait for [`Host::incoming`]
//!   in a queue of at most `max_pending` (each one is a pending handshake of the core,
//!   which defers requests beyond `max_pending` until there is room; a request that times
//!   out undecided leaves the queue), so hostile requests cannot grow it. With no
//!   [`Host`] handle left, requests are rejected with code 0.
//! - [`Peer::send`] is synchronous and returns the core's [`SendError`]; its per-channel
//!   queue limit (`max_queued_bytes`) is the send-side bound, reported as
//!   [`SendError::QueueFull`].
//! - Datagrams the socket would not take wait in the driver, in order, for the socket to
//!   become writable; the core's congestion window bounds them.
//!
//! # Lifetime
//!
//! The driver runs while any handle exists: a [`Host`] or a [`Peer`] (a live `Peer` keeps
//! its connection, and so the driver, running). Dropping the last handle of a connection
//! disconnects it gracefully, like [`Peer::disconnect`] without the wait. When the last
//! handle of all is dropped the driver ends every connection with `disconnect_now` (the
//! remotes are told, best effort), sends those datagrams, closes the socket and returns.
//! To flush pending packets first, await [`Peer::disconnect`] before dropping.
//!
//! # Socket
//!
//! The driver reads and sends in batches ([`porous_udp`]): one system call reads up to 32
//! buffers (`recvmmsg`), each holding up to 64 datagrams where the kernel has UDP GRO, and
//! consecutive equal-size datagrams to one peer leave in one UDP GSO send, with silent
//! fallbacks where the kernel lacks them ([`Host::set_batching`] forces them). A receive
//! error (an ICMP report some systems surface on UDP sockets) is counted and skipped; if
//! errors repeat on every call the driver stops reading for a moment that grows up to
//! 64 ms ([`porous_udp::RecvBackoff`]) instead of spinning. A send error drops only the
//! datagrams to that destination.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod connections;
mod driver;
mod handle;
mod mailbox;
mod requests;
pub mod runtime;
pub mod transport;

use std::fmt;
use std::io;

pub use connections::{EVENT_QUEUE, Events, HostEvent, PeerInfo};
pub use handle::{Host, Incoming, Peer};
// The vocabulary every adapter re-exports: everything at porous-proto's root (`Bytes`, the
// configuration, events, errors, stats, `PeerMap`, the `token`, `wire` and `seq`
// modules) and the socket layer's own, so that no application needs porous-proto or
// bytes in its Cargo.toml. The glob takes whatever the core adds; this crate's `Host`
// shadows the core's, which is `proto::Host`.
/// The protocol core itself (its `Host` is `proto::Host`).
pub use porous_proto as proto;
pub use porous_proto::*;
#[cfg(feature = "fault-injection")]
pub use porous_udp::Faults;
pub use porous_udp::{Batching, SOCKET_BUFFER, SocketStats};
pub use runtime::Runtime;

/// Packets each connection's delivery queue holds for [`Peer::recv`].
pub const DELIVERY_QUEUE: usize = 256;

/// Established incoming connections that wait for [`Host::accept`].
pub const ACCEPT_BACKLOG: usize = 256;

/// A packet as [`Peer::recv`] returns it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Packet {
    /// The channel it came on.
    pub channel: usize,
    /// How the sender sent it. Reliable packets all arrive, in order; unreliable and
    /// passive ones may be skipped, never duplicated or reordered within their channel.
    pub mode: SendMode,
    /// The payload.
    pub data: Bytes,
}

impl Packet {
    /// A packet (to compare with what [`Peer::recv`] returns, in tests).
    pub fn new(channel: usize, mode: SendMode, data: impl Into<Bytes>) -> Self {
        Self { channel, mode, data: data.into() }
    }
}

/// Why [`Host::bind_with`], [`Host::connect`], [`Host::accept`], [`Host::incoming`] or
/// [`Incoming::accept`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The socket could not be bound or queried.
    Io(io::Error),
    /// The configuration is invalid.
    Config(ConfigError),
    /// The core refused to start the connection attempt.
    Connect(ConnectError),
    /// The connection attempt failed (timed out, refused, rejected by the remote's
    /// application with [`DisconnectReason::Rejected`], or incompatible).
    Failed(DisconnectReason),
    /// The driver task has stopped. It stops on its own only if it panicked.
    Stopped,
    /// [`Host::incoming`] was called on a host that admits requests by itself: set
    /// [`HostConfig::manual_accept`] to decide on each, or use [`Host::accept`].
    ManualAcceptOff,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "socket error: {e}"),
            Self::Config(e) => write!(f, "invalid configuration: {e}"),
            Self::Connect(e) => write!(f, "cannot connect: {e}"),
            Self::Failed(reason) => write!(f, "connection attempt failed: {reason}"),
            Self::Stopped => f.write_str("the POROUS driver task has stopped"),
            Self::ManualAcceptOff => {
                f.write_str("Host::incoming needs HostConfig::manual_accept; without it use Host::accept")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::Config(e) => Some(e),
            Self::Connect(e) => Some(e),
            Self::Failed(_) | Self::Stopped | Self::ManualAcceptOff => None,
        }
    }
}

/// The error of [`Peer::recv`]: the connection has ended, and why. Packets that arrived
/// before the end are all returned first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Disconnected(pub DisconnectReason);

impl fmt::Display for Disconnected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the connection has ended: {}", self.0)
    }
}

impl std::error::Error for Disconnected {}

/// Counters of a connection's delivery queue (this crate's side; the connection's own
/// counters are in [`PeerStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryStats {
    /// Packets waiting in the queue for [`Peer::recv`].
    pub queued: usize,
    /// Unreliable packets dropped because the queue was full.
    pub unreliable_dropped: u64,
    /// Datagrams from the peer left unread while reliable or passive packets waited for
    /// room in the queue; the remote resends the reliable and passive data they carried.
    pub datagrams_deferred: u64,
}
