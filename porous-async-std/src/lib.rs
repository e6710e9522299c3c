//! POROUS on async-std: a [`Host`] you can `.await`.
//!
//! [`Host::bind`] opens a UDP socket and spawns one *driver* task (with
//! `async_std::task::spawn`) that owns it and the sans-IO protocol core
//! ([`porous_proto::Host`](proto::Host)). [`Host`] and [`Peer`] are cheap cloneable handles to it. The
//! driver and the handles are [`porous_async`]'s, written once for every runtime; this
//! crate only binds them to async-std, and its API is the same as `porous-tokio`'s and
//! `porous-smol`'s.
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
//! Every queue between the driver and the handles is bounded, a slow reader slows only its
//! own sender, and the driver stops once the last handle is dropped: see
//! [`porous_async`'s documentation](porous_async#queues-and-backpressure).
//!
//! # async-std and smol
//!
//! async-std is discontinued upstream (RUSTSEC-2025-0052); its successor is smol, and
//! `porous-smol` is the same API without async-std. This crate uses async-std only to
//! spawn the driver; the socket and the timer are those of `async-io`, the reactor
//! async-std itself runs on. The handles' futures run under any executor,
//! `smol::block_on` included (a test proves it).
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::future::Future;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;

use porous_async::runtime::async_io::{AsyncIoSocket, AsyncIoTimer};
use porous_async::runtime::{AsyncTimer, AsyncUdpSocket};
// Everything of porous-async (and through it porous-proto's root and the socket layer's
// vocabulary) but its `Host`, which this crate's shadows: the same names in every
// adapter, and whatever the core adds.
pub use porous_async::*;

/// The async-std runtime for [`porous_async`]: drivers spawned with
/// `async_std::task::spawn`, sockets and timers on the `async-io` reactor. [`Host::bind`]
/// uses it; pass it to [`porous_async::Host::bind_with`] to get a runtime-independent
/// handle.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsyncStdRuntime;

impl Runtime for AsyncStdRuntime {
    fn spawn(&self, driver: Pin<Box<dyn Future<Output = ()> + Send>>) {
        // Detached: the driver ends by itself once every handle is gone.
        drop(async_std::task::spawn(driver));
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
        Box::pin(AsyncIoTimer::at(deadline))
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Box<dyn AsyncUdpSocket>> {
        Ok(Box::new(AsyncIoSocket::new(socket)?))
    }
}

/// A POROUS host: one UDP socket and its connections, driven by a background task.
///
/// Cheap to clone; every clone is a handle to the same host. See
/// [`porous_async::Host`], which this wraps, for the queues and the driver's lifetime.
#[derive(Clone, Debug)]
pub struct Host(porous_async::Host);

impl Host {
    /// Binds a UDP socket to `addr` (port 0 picks a free one; a name is resolved with the
    /// system resolver and the first address that binds is used) and spawns the driver
    /// task with `async_std::task::spawn`. The core's random generator is seeded from the
    /// OS.
    pub async fn bind(addr: impl ToSocketAddrs, config: HostConfig) -> Result<Self, Error> {
        porous_async::Host::bind_with(&AsyncStdRuntime, addr, config).map(Self)
    }

    /// A host on a socket you bound yourself (with options of your own, or handed over by
    /// a supervisor or a test); see [`porous_async::Host::from_std_with`].
    pub fn from_std(socket: std::net::UdpSocket, config: HostConfig) -> Result<Self, Error> {
        let runtime = AsyncStdRuntime;
        porous_async::Host::from_std_with(&runtime, socket, config).map(Self)
    }

    /// Secure mode, on a server: the addresses connect tokens name it by, from now on; see
    /// [`porous_async::Host::set_public_addresses`].
    pub fn set_public_addresses(&self, addresses: Vec<SocketAddr>) -> Result<(), ConfigError> {
        self.0.set_public_addresses(addresses)
    }

    /// The address the socket is bound to (with the port the OS picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.0.local_addr()
    }

    /// Connects to `remote`; see [`porous_async::Host::connect`].
    pub async fn connect(&self, remote: SocketAddr) -> Result<Peer, Error> {
        self.0.connect(remote).await
    }

    /// Secure mode: connects to `remote` with a connect token from the game's backend; see
    /// [`porous_async::Host::connect_with_token`].
    pub async fn connect_with_token(&self, remote: SocketAddr, token: &[u8]) -> Result<Peer, Error> {
        self.0.connect_with_token(remote, token).await
    }

    /// The next established incoming connection; see [`porous_async::Host::accept`].
    pub async fn accept(&self) -> Result<Peer, Error> {
        self.0.accept().await
    }

    /// Connects to `remote` with connect data, which the remote reads with
    /// [`Peer::connect_data`] or [`Incoming::data`]; see
    /// [`porous_async::Host::connect_with`]. A rejection fails with [`Error::Failed`] and
    /// [`DisconnectReason::Rejected`], carrying the remote application's code.
    pub async fn connect_with(&self, remote: SocketAddr, data: &[u8]) -> Result<Peer, Error> {
        self.0.connect_with(remote, data).await
    }

    /// The next connection request awaiting the application's decision, with
    /// [`HostConfig::manual_accept`]: read [`Incoming::data`], then [`Incoming::accept`]
    /// or [`Incoming::reject`]. See [`porous_async::Host::incoming`] for the queue's
    /// bound and timeouts.
    pub async fn incoming(&self) -> Result<Incoming, Error> {
        self.0.incoming().await
    }

    /// The core's counters of this host.
    pub fn stats(&self) -> HostStats {
        self.0.stats()
    }

    /// The established connections; see [`porous_async::Host::peers`].
    pub fn peers(&self) -> Vec<PeerInfo> {
        self.0.peers()
    }

    /// A stream of connection events (connected, with connect data and client id;
    /// disconnected, with the reason), starting with the connections established now; see
    /// [`porous_async::Host::events`].
    pub fn events(&self) -> Events {
        self.0.events()
    }

    /// Queues a packet for every established connection, with one lock and one wake-up;
    /// returns those that refused it. See [`porous_async::Host::broadcast`].
    pub fn broadcast(&self, channel: usize, data: impl Into<Bytes>, mode: SendMode) -> Vec<(PeerId, SendError)> {
        self.0.broadcast(channel, data, mode)
    }

    /// Queues a packet for each connection in `peers`, with one lock and one wake-up;
    /// returns those that refused it. See [`porous_async::Host::send_to`].
    pub fn send_to(
        &self,
        peers: impl IntoIterator<Item = PeerId>,
        channel: usize,
        data: impl Into<Bytes>,
        mode: SendMode,
    ) -> Vec<(PeerId, SendError)> {
        self.0.send_to(peers, channel, data, mode)
    }

    /// The socket's counters, as of the driver's last round.
    pub fn socket_stats(&self) -> SocketStats {
        self.0.socket_stats()
    }

    /// Changes the socket's batching; see [`porous_async::Host::set_batching`].
    pub fn set_batching(&self, batching: Batching) {
        self.0.set_batching(batching);
    }

    /// Makes the socket fail on purpose (feature `fault-injection`); see
    /// [`porous_async::Host::inject_faults`].
    #[cfg(feature = "fault-injection")]
    pub fn inject_faults(&self, faults: Faults) {
        self.0.inject_faults(faults);
    }

    /// The runtime-independent handle this wraps.
    pub fn as_async(&self) -> &porous_async::Host {
        &self.0
    }
}

impl From<Host> for porous_async::Host {
    fn from(host: Host) -> Self {
        host.0
    }
}
