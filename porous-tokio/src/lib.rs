//! POROUS on tokio: a [`Host`] you can `.await`.
//!
//! [`Host::bind`] opens a UDP socket and spawns one *driver* task on the current tokio
//! runtime that owns it and the sans-IO protocol core
//! ([`porous_proto::Host`](proto::Host)). The driver wakes on datagrams, on calls from
//! handles and at the core's next deadline; it feeds the core, steps it, sends its
//! datagrams (batched: `recvmmsg`, GRO and GSO where the kernel has them) and routes its
//! events. [`Host`] and [`Peer`] are cheap cloneable handles to it, usable from any task
//! or thread. The driver and the handles are [`porous_async`]'s, written once for every
//! runtime; this crate binds them to tokio, and its API is the same as
//! `porous-async-std`'s and `porous-smol`'s.
//!
//! The runtime needs its IO and time drivers (`#[tokio::main]` and `#[tokio::test]` enable
//! both; a `Builder` needs `enable_all()`), on the current-thread or the multi-thread
//! scheduler.
//!
//! ```
//! use porous_tokio::{Host, HostConfig, SendMode};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
//! let client = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
//!
//! let accepting = tokio::spawn({
//!     let server = server.clone();
//!     async move { server.accept().await }
//! });
//! let to_server = client.connect(server.local_addr()).await?;
//! let to_client = accepting.await??;
//!
//! to_server.send(2, &b"hello"[..], SendMode::Reliable)?;
//! let packet = to_client.recv().await?;
//! assert_eq!((packet.channel, packet.mode, &packet.data[..]), (2, SendMode::Reliable, &b"hello"[..]));
//!
//! // Flushes what was sent, then completes the disconnection handshake.
//! to_server.disconnect().await;
//! # Ok(())
//! # }
//! ```
//!
//! Every queue between the driver and the handles is bounded, a slow reader slows only its
//! own sender, and the driver stops once the last handle is dropped: see
//! [`porous_async`'s documentation](porous_async#queues-and-backpressure).
//! `cargo run -p porous-tokio --example tokio_echo` runs an echo server and a client in one
//! program; `--example two_clients` a server and two clients that stream reliable messages
//! at 60 Hz both ways, then print what each side counted lost and resent.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::future::Future;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use porous_async::runtime::{AsSocketRef, AsyncTimer, AsyncUdpSocket, Interest, SocketRef};
// Everything of porous-async (and through it porous-proto's root and the socket layer's
// vocabulary) but its `Host`, which this crate's shadows: the same names in every
// adapter, and whatever the core adds.
pub use porous_async::*;

/// The tokio runtime for [`porous_async`]: drivers spawned on a runtime's handle, sockets
/// on its IO driver, timers on its time driver. [`Host::bind`] uses the current runtime;
/// pass a `TokioRuntime` to [`porous_async::Host::bind_with`] to choose another or to get
/// a runtime-independent handle.
#[derive(Clone, Debug)]
pub struct TokioRuntime(tokio::runtime::Handle);

impl TokioRuntime {
    /// The runtime the calling task runs on; an error outside of one.
    pub fn current() -> io::Result<Self> {
        tokio::runtime::Handle::try_current()
            .map(Self)
            .map_err(|e| io::Error::other(format!("porous-tokio needs a tokio runtime: {e}")))
    }

    /// The runtime behind `handle`.
    pub fn from_handle(handle: tokio::runtime::Handle) -> Self {
        Self(handle)
    }
}

impl Runtime for TokioRuntime {
    fn spawn(&self, driver: Pin<Box<dyn Future<Output = ()> + Send>>) {
        // Detached: the driver ends by itself once every handle is gone.
        drop(self.0.spawn(driver));
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
        let _inside = self.0.enter();
        Box::pin(TokioTimer(Box::pin(tokio::time::sleep_until(deadline.into()))))
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Box<dyn AsyncUdpSocket>> {
        let _inside = self.0.enter();
        Ok(Box::new(TokioSocket(tokio::net::UdpSocket::from_std(socket)?)))
    }
}

/// A UDP socket on tokio's IO driver.
#[derive(Debug)]
struct TokioSocket(tokio::net::UdpSocket);

impl AsyncUdpSocket for TokioSocket {
    fn poll_io(
        &self,
        cx: &mut Context<'_>,
        interest: Interest,
        io: &mut dyn FnMut(SocketRef<'_>) -> io::Result<()>,
    ) -> Poll<io::Result<()>> {
        loop {
            let ready = match interest {
                Interest::Readable => self.0.poll_recv_ready(cx),
                Interest::Writable => self.0.poll_send_ready(cx),
            };
            ready!(ready)?;
            let interest = match interest {
                Interest::Readable => tokio::io::Interest::READABLE,
                Interest::Writable => tokio::io::Interest::WRITABLE,
            };
            // `try_io` clears the readiness when the call says `WouldBlock`, so the next
            // readiness poll waits for the reactor.
            match self.0.try_io(interest, || io(self.0.as_socket_ref())) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                result => return Poll::Ready(result),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// A timer on tokio's time driver.
#[derive(Debug)]
struct TokioTimer(Pin<Box<tokio::time::Sleep>>);

impl AsyncTimer for TokioTimer {
    fn reset(mut self: Pin<&mut Self>, deadline: Instant) {
        self.0.as_mut().reset(deadline.into());
    }

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
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
    /// task on the current tokio runtime. The core's random generator is seeded from the
    /// OS. Fails with [`Error::Io`] outside of a tokio runtime.
    pub async fn bind(addr: impl ToSocketAddrs, config: HostConfig) -> Result<Self, Error> {
        let runtime = TokioRuntime::current().map_err(Error::Io)?;
        porous_async::Host::bind_with(&runtime, addr, config).map(Self)
    }

    /// A host on a socket you bound yourself (with options of your own, or handed over by
    /// a supervisor or a test); see [`porous_async::Host::from_std_with`].
    pub fn from_std(socket: std::net::UdpSocket, config: HostConfig) -> Result<Self, Error> {
        let runtime = TokioRuntime::current().map_err(Error::Io)?;
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

    /// Connects to `remote`; see [`porous_async::Host::connect`]. Resolve names with
    /// `tokio::net::lookup_host`.
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
