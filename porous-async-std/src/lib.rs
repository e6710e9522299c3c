//! POROUS on async-std: a [`Host`] you can `.await`.
//!
//! [`Host::bind`] opens a UDP socket and spawns one *driver* task that owns it and the
//! sans-IO protocol core ([`porous_proto::Host`]). The driver wakes on datagrams, on
//! calls from handles and at the core's next deadline; it feeds the core, steps it, sends
//! its datagrams and routes its events. [`Host`] and [`Peer`] are cheap cloneable handles
//! to it. All protocol behaviour lives in the core: this crate is sockets, timers,
//! wake-ups and queues.
//!
//! ```
//! use porous_async_std::{Host, HostConfig, SendMode};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! async_std::task::block_on(async {
//!     let server = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
//!     let client = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
//!
//!     let accepting = async_std::task::spawn({
//!         let server = server.clone();
//!         async move { server.accept().await }
//!     });
//!     let to_server = client.connect(server.local_addr()).await?;
//!     let to_client = accepting.await?;
//!
//!     to_server.send(2, &b"hello"[..], SendMode::Reliable)?;
//!     let (channel, data) = to_client.recv().await?;
//!     assert_eq!((channel, &data[..]), (2, &b"hello"[..]));
//!
//!     // Flushes what was sent, then completes the disconnection handshake.
//!     to_server.disconnect().await;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! # Queues and backpressure
//!
//! Every queue between the driver and the handles is bounded:
//!
//! - Each connection has a delivery queue of [`DELIVERY_QUEUE`] packets, read by
//!   [`Peer::recv`]. When it is full, an **unreliable** packet is dropped and counted
//!   ([`DeliveryStats::unreliable_dropped`]). A **reliable or passive** packet is never
//!   dropped: the driver holds it back and, until the held packets fit in the queue,
//!   leaves that peer's datagrams unread ([`DeliveryStats::datagrams_deferred`]), so what
//!   it holds is at most what one datagram completes (its own packets and those the core
//!   had buffered for that peer, which `max_reassembly_bytes` bounds). The remote sees
//!   this as loss and resends reliable and passive data later, so a slow consumer slows
//!   its own sender and no one else. A consumer that stops reading for longer than the
//!   peer timeout loses the connection to [`DisconnectReason::Timeout`]; one that keeps
//!   reading loses nothing.
//! - Established incoming connections wait for [`Host::accept`] in a backlog of
//!   [`ACCEPT_BACKLOG`]. When it is full, or no [`Host`] handle is left to accept, a new
//!   connection is ended at once with [`porous_proto::Host::disconnect_now`] (the remote
//!   sees [`DisconnectReason::Remote`]). So are connections still queued when the last
//!   `Host` handle is dropped.
//! - [`Peer::send`] is synchronous and returns the core's [`SendError`]; its per-channel
//!   queue limit (`max_queued_bytes`) is the send-side bound, reported as
//!   [`SendError::QueueFull`].
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
//! # async-std and smol
//!
//! async-std is discontinued upstream (RUSTSEC-2025-0052); its successor is smol. This
//! crate uses only its UDP socket, timers, channels and `task::spawn`, all thin layers
//! over the `async-io` and `async-channel` crates that smol is built from, so the
//! handles' futures run under any executor, `smol::block_on` included (a test proves it).

mod driver;
mod handle;

use std::fmt;
use std::io;

pub use bytes::Bytes;
pub use handle::{Host, Peer};
pub use porous_proto::{
    ChannelConfig, ConfigError, ConnectError, DisconnectReason, HostConfig, HostStats, Mismatch, PeerConfig, PeerId,
    PeerState, PeerStats, Priority, SendError, SendMode, SequenceStart, TransferStats,
};

/// Packets each connection's delivery queue holds for [`Peer::recv`].
pub const DELIVERY_QUEUE: usize = 256;

/// Established incoming connections that wait for [`Host::accept`].
pub const ACCEPT_BACKLOG: usize = 256;

/// The kernel receive and send buffer size the host's socket asks for, in bytes, as in
/// `porous-mio`: the defaults (208 KiB on Linux) overflow when a LAN transfer's congestion
/// window outgrows them. The kernel may grant less (Linux caps it at `net.core.rmem_max`
/// and `wmem_max`), and the host then keeps what it has.
pub const SOCKET_BUFFER: usize = 1 << 20;

/// Why [`Host::bind`], [`Host::connect`] or [`Host::accept`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The socket could not be bound or queried.
    Io(io::Error),
    /// The configuration is invalid.
    Config(ConfigError),
    /// The core refused to start the connection attempt.
    Connect(ConnectError),
    /// The connection attempt failed (timed out, refused, or incompatible).
    Failed(DisconnectReason),
    /// The driver task has stopped. It stops on its own only if it panicked.
    Stopped,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "socket error: {e}"),
            Self::Config(e) => write!(f, "invalid configuration: {e}"),
            Self::Connect(e) => write!(f, "cannot connect: {e}"),
            Self::Failed(reason) => write!(f, "connection attempt failed: {reason}"),
            Self::Stopped => f.write_str("the POROUS driver task has stopped"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::Config(e) => Some(e),
            Self::Connect(e) => Some(e),
            Self::Failed(_) | Self::Stopped => None,
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
