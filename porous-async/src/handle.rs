//! The handles: [`Host`], [`Peer`] and [`Incoming`], and what they share with the driver.

use std::convert::Infallible;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use async_channel::{Receiver, Sender};
use bytes::Bytes;
#[cfg(feature = "fault-injection")]
use porous_udp::Faults;
use porous_udp::{Batching, SocketStats, UdpIo};

use crate::connections::{Connections, Events, PeerInfo};
use crate::driver::Driver;
use crate::mailbox::{Mailbox, Take};
use crate::requests::{RequestParts, Requests};
use crate::runtime::Runtime;
use crate::{
    ACCEPT_BACKLOG, AdmissionError, ConfigError, DeliveryStats, DisconnectReason, Disconnected, Error, HostConfig,
    HostStats, Packet, PeerId, PeerStats, SendError, SendMode,
};

/// Commands that wait for the driver; a capacity-1 wake-up would do, a few more let
/// `connect` calls queue without waiting.
const COMMANDS: usize = 64;

/// What handles send the driver.
pub(crate) enum Command {
    /// Something changed in the core (a send, a disconnect, a packet read): step it.
    Wake,
    /// Connect to an address, with connect data or (secure mode) a connect token; the
    /// reply comes once the connection is up or has failed.
    Connect(SocketAddr, Opening, Sender<Result<PeerParts, Error>>),
    /// Admit a request awaiting the decision; the reply comes once the connection is up or
    /// has failed.
    Accept(PeerId, Sender<Result<PeerParts, Error>>),
    /// Use this batching from now on.
    Batching(Batching),
    /// Take datagrams from this transport too.
    Attach(Box<dyn crate::transport::Transport>),
    /// Inject these faults from now on.
    #[cfg(feature = "fault-injection")]
    Faults(Faults),
}

/// How a `connect` opens: with connect data (plain mode) or a connect token (secure mode).
pub(crate) enum Opening {
    /// [`Host::connect`] and [`Host::connect_with`].
    Data(Bytes),
    /// [`Host::connect_with_token`].
    Token(Bytes),
}

/// Locks the core. A panic elsewhere cannot leave it half-updated in a way that matters
/// more than stopping would, so a poisoned lock is used as is.
pub(crate) fn lock(core: &Mutex<porous_proto::Host>) -> MutexGuard<'_, porous_proto::Host> {
    core.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every graceful disconnection this crate asks of the core goes through here.
pub(crate) fn disconnect(core: &mut porous_proto::Host, peer: PeerId, code: u32) {
    core.disconnect_with(Instant::now(), peer, code);
}

/// Every immediate disconnection this crate asks of the core goes through here. On a
/// request awaiting the application's decision it rejects it with `code`.
pub(crate) fn disconnect_now(core: &mut porous_proto::Host, peer: PeerId, code: u32) {
    core.disconnect_now_with(Instant::now(), peer, code);
}

/// Every rejection of a request this crate asks of the core goes through here. A request
/// that is gone already (timed out) needs no answer.
pub(crate) fn reject(core: &mut porous_proto::Host, peer: PeerId, code: u32) {
    let _: Result<(), AdmissionError> = core.reject(Instant::now(), peer, code);
}

/// What every handle holds: the core, and the way to the driver. The driver stops once
/// the last `Link` is dropped, because that closes its command channel.
#[derive(Clone)]
struct Link {
    core: Arc<Mutex<porous_proto::Host>>,
    commands: Sender<Command>,
    /// A wake-up is on its way to the driver (see [`HostShared::wake_pending`]).
    shared: Arc<HostShared>,
}

impl Link {
    fn wake(&self) {
        // One wake-up per driver round is enough: a burst of sends costs one.
        if self.shared.wake_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        // A full queue already holds a command; a closed one has no driver to wake.
        let _ = self.commands.try_send(Command::Wake);
    }
}

/// The state of a host that the driver and the `Host` handles share.
#[derive(Debug)]
pub(crate) struct HostShared {
    /// The socket's counters, as of the driver's last round.
    pub(crate) socket: Mutex<SocketStats>,
    /// The counters of the transports beside the socket, as of the driver's last round.
    pub(crate) transports: Mutex<crate::transport::TransportStats>,
    /// Set by the handle that sends the driver a wake-up, cleared by the driver when a
    /// round starts: handles skip the channel while a wake-up is pending.
    pub(crate) wake_pending: AtomicBool,
    /// The established connections and the subscribers to their events. Locked after the
    /// core, never before it.
    pub(crate) connections: Connections,
}

impl HostShared {
    fn new(max_peers: usize) -> Self {
        Self {
            socket: Mutex::default(),
            transports: Mutex::default(),
            wake_pending: AtomicBool::new(false),
            connections: Connections::new(max_peers),
        }
    }
}

/// The state of a connection that the driver and the connection's handles share.
#[derive(Debug)]
pub(crate) struct PeerShared {
    /// The remote's address now: the driver writes it when the core reports the
    /// connection established and each time it moves (`Event::AddressChanged`).
    pub(crate) remote: Mutex<SocketAddr>,
    /// Why the connection ended, set when the core reports it.
    pub(crate) reason: OnceLock<DisconnectReason>,
    /// See [`DeliveryStats`].
    pub(crate) unreliable_dropped: AtomicU64,
    /// See [`DeliveryStats`].
    pub(crate) datagrams_deferred: AtomicU64,
}

impl PeerShared {
    pub(crate) fn new(remote: SocketAddr) -> Self {
        Self {
            remote: Mutex::new(remote),
            reason: OnceLock::new(),
            unreliable_dropped: AtomicU64::new(0),
            datagrams_deferred: AtomicU64::new(0),
        }
    }

    /// The remote's address now.
    pub(crate) fn remote(&self) -> SocketAddr {
        *self.remote.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection moved to `remote`.
    pub(crate) fn set_remote(&self, remote: SocketAddr) {
        *self.remote.lock().unwrap_or_else(PoisonError::into_inner) = remote;
    }
}

/// An established connection as the driver hands it to `connect` or `accept` (its
/// remote's address is in `shared`, which follows the connection when it moves).
pub(crate) struct PeerParts {
    pub(crate) id: PeerId,
    /// From `Event::Connected`: the remote's connect data (a secure server: the token's
    /// user data) and, on a secure server, the token's client id.
    pub(crate) data: Bytes,
    pub(crate) client_id: Option<u64>,
    /// The delivery queue; it closes after the last packet once the connection ended.
    pub(crate) mailbox: Arc<Mailbox>,
    /// Closes when the core reports the connection ended.
    pub(crate) ended: Receiver<Infallible>,
    pub(crate) shared: Arc<PeerShared>,
}

/// A POROUS host: one UDP socket and its connections, driven by a background task.
///
/// Cheap to clone; every clone is a handle to the same host. See the
/// [crate documentation](crate) for the queues and the driver's lifetime.
#[derive(Clone)]
pub struct Host {
    link: Link,
    accept: Receiver<PeerParts>,
    requests: Arc<Requests>,
    manual_accept: bool,
    local_addr: SocketAddr,
    shared: Arc<HostShared>,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host").field("local_addr", &self.local_addr).finish_non_exhaustive()
    }
}

impl Host {
    /// Binds a UDP socket to `addr` (port 0 picks a free one; a name is resolved with the
    /// system resolver, blocking, and the first address that binds is used) and spawns the
    /// driver task on `runtime`. The core's random generator is seeded from the OS.
    ///
    /// A secure server ([`SecureConfig::server`](crate::SecureConfig::server)) may leave
    /// its public addresses empty: bound to a specific address (such as `127.0.0.1:0`),
    /// it takes the bound address with the port the system picked; otherwise tell it with
    /// [`Host::set_public_addresses`].
    ///
    /// The runtime crates wrap this as `Host::bind(addr, config)`.
    pub fn bind_with(runtime: &dyn Runtime, addr: impl ToSocketAddrs, config: HostConfig) -> Result<Self, Error> {
        config.validate().map_err(Error::Config)?;
        Self::start(runtime, porous_udp::bind(addr).map_err(Error::Io)?, config)
    }

    /// A host on a socket you bound yourself (with options of your own, or handed over by
    /// a supervisor or a test), its driver spawned on `runtime`. The socket is made
    /// non-blocking and asked for buffers of at least [`SOCKET_BUFFER`](crate::SOCKET_BUFFER)
    /// bytes, as [`Host::bind_with`]'s own; an empty list of public addresses of a secure
    /// server is learnt from its address as there.
    ///
    /// The runtime crates wrap this as `Host::from_std(socket, config)`.
    pub fn from_std_with(
        runtime: &dyn Runtime,
        socket: std::net::UdpSocket,
        config: HostConfig,
    ) -> Result<Self, Error> {
        config.validate().map_err(Error::Config)?;
        Self::start(runtime, porous_udp::adopt(socket).map_err(Error::Io)?, config)
    }

    fn start(runtime: &dyn Runtime, socket: std::net::UdpSocket, mut config: HostConfig) -> Result<Self, Error> {
        let local_addr = socket.local_addr().map_err(Error::Io)?;
        porous_udp::learn_public_address(&mut config, local_addr);
        let rng = rand_core::UnwrapErr(getrandom::SysRng);
        let (manual_accept, max_peers) = (config.manual_accept, config.max_peers);
        let core = porous_proto::Host::new(config, rng).map_err(Error::Config)?;
        let io = UdpIo::new(&socket, Batching::default()).map_err(Error::Io)?;
        let socket = runtime.wrap_udp_socket(socket).map_err(Error::Io)?;
        let (commands, command_rx) = async_channel::bounded(COMMANDS);
        let (accept_tx, accept) = async_channel::bounded(ACCEPT_BACKLOG);
        let shared = Arc::new(HostShared::new(max_peers));
        let requests = Arc::new(Requests::default());
        let link = Link { core: Arc::new(Mutex::new(core)), commands, shared: Arc::clone(&shared) };
        let timer = runtime.new_timer(Instant::now());
        let driver = Driver::new(
            socket,
            io,
            timer,
            Arc::clone(&link.core),
            command_rx,
            accept_tx,
            accept.clone(),
            Arc::clone(&requests),
            Arc::clone(&shared),
        );
        // Detached: the driver ends by itself once every handle is gone.
        runtime.spawn(Box::pin(driver));
        Ok(Self { link, accept, requests, manual_accept, local_addr, shared })
    }

    /// The address the socket is bound to (with the port the OS picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Connects to `remote`. Resolves once the connection is established, or fails with
    /// [`Error::Connect`] (refused by this host's core: a connection to that address
    /// exists, the host is full, the address is invalid) or [`Error::Failed`] (timed
    /// out, refused by the remote, incompatible). Dropping the future before it resolves
    /// abandons the attempt; a connection established meanwhile is ended at once.
    ///
    /// `remote` is an address, not a name: resolve names with your runtime's resolver
    /// (such as `tokio::net::lookup_host`), so that the lookup does not block it.
    ///
    /// Sends no connect data; [`Host::connect_with`] does. A host in secure mode connects
    /// with [`Host::connect_with_token`] instead (this fails with
    /// [`ConnectError::TokenRequired`](crate::ConnectError::TokenRequired)).
    pub async fn connect(&self, remote: SocketAddr) -> Result<Peer, Error> {
        self.connect_inner(remote, Opening::Data(Bytes::new())).await
    }

    /// [`Host::connect`] with connect data (a version, a login ticket): up to
    /// [`MAX_CONNECT_DATA`](porous_proto::wire::MAX_CONNECT_DATA) bytes, fewer at a small
    /// `mtu` ([`PeerConfig::max_connect_data`](crate::PeerConfig::max_connect_data)), else
    /// [`Error::Connect`] with [`ConnectError::DataTooLarge`](crate::ConnectError::DataTooLarge).
    /// The remote reads it with [`Peer::connect_data`] or, if it decides on requests
    /// itself, [`Incoming::data`]. It only makes the request larger, never the replies;
    /// it is neither encrypted nor, until the connection is established, authenticated.
    /// Plain mode only: a host in secure mode fails with
    /// [`ConnectError::TokenRequired`](crate::ConnectError::TokenRequired) (its connect
    /// data is the token's user data, see [`Host::connect_with_token`]).
    ///
    /// If the remote's application rejects the request ([`Incoming::reject`]), this fails
    /// with [`Error::Failed`] and [`DisconnectReason::Rejected`], carrying its code.
    pub async fn connect_with(&self, remote: SocketAddr, data: &[u8]) -> Result<Peer, Error> {
        self.connect_inner(remote, Opening::Data(Bytes::copy_from_slice(data))).await
    }

    /// Secure mode ([`HostConfig::secure`](porous_proto::HostConfig::secure)): connects to
    /// `remote` with a connect token from the game's backend ([`porous_proto::token`]);
    /// see [`porous_proto::Host::connect_with_token`]. Resolves as [`Host::connect`]
    /// does; a token the server refuses gets no answer, so that ends in
    /// [`Error::Failed`] with a timeout.
    pub async fn connect_with_token(&self, remote: SocketAddr, token: &[u8]) -> Result<Peer, Error> {
        self.connect_inner(remote, Opening::Token(Bytes::copy_from_slice(token))).await
    }

    async fn connect_inner(&self, remote: SocketAddr, opening: Opening) -> Result<Peer, Error> {
        let (reply, result) = async_channel::bounded(1);
        self.link.commands.send(Command::Connect(remote, opening, reply)).await.map_err(|_| Error::Stopped)?;
        let parts = result.recv().await.map_err(|_| Error::Stopped)??;
        Ok(Peer::new(parts, self.link.clone()))
    }

    /// The next established incoming connection, in the order they were established.
    /// Fails only if the driver has stopped.
    ///
    /// This is for the default, automatic admission. With
    /// [`HostConfig::manual_accept`](crate::HostConfig::manual_accept) the application
    /// takes each request from [`Host::incoming`] instead, and the connection it admits
    /// comes from [`Incoming::accept`], never from here.
    pub async fn accept(&self) -> Result<Peer, Error> {
        let parts = self.accept.recv().await.map_err(|_| Error::Stopped)?;
        Ok(Peer::new(parts, self.link.clone()))
    }

    /// The next connection request awaiting the application's decision, in the order they
    /// arrived (with [`HostConfig::manual_accept`](crate::HostConfig::manual_accept)):
    /// read its address and connect data, then [`Incoming::accept`] or
    /// [`Incoming::reject`] it. Fails with [`Error::ManualAcceptOff`] at once if the
    /// host admits requests by itself (the default: use [`Host::accept`]), and with
    /// [`Error::Stopped`] if the driver has stopped.
    ///
    /// Requests wait in a queue that holds at most `max_pending` (each is one of the
    /// core's pending handshakes). A request that waits, or is held as an [`Incoming`],
    /// for longer than the connect timeout (`peer.connect_timeout`, 5 s by default) times
    /// out: it leaves the queue and the requester's attempt fails with
    /// [`DisconnectReason::Timeout`]. While `max_pending` requests wait, further ones are
    /// left unanswered and get in on a retry once there is room (counted in
    /// [`HostStats::handshakes_deferred`](crate::HostStats::handshakes_deferred)). When
    /// the last `Host` handle is dropped, queued requests are rejected with code 0.
    ///
    /// ```
    /// # async fn serve(server: porous_async::Host) -> Result<(), porous_async::Error> {
    /// loop {
    ///     let request = server.incoming().await?;
    ///     if request.data().starts_with(b"v2 ") {
    ///         let player = request.accept().await?;
    ///         println!("{} joined", player.remote());
    ///     } else {
    ///         request.reject(426); // the client reads `DisconnectReason::Rejected { code: 426 }`
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn incoming(&self) -> Result<Incoming, Error> {
        if !self.manual_accept {
            return Err(Error::ManualAcceptOff);
        }
        let parts = std::future::poll_fn(|cx| self.requests.poll_take(cx)).await.ok_or(Error::Stopped)?;
        Ok(Incoming { parts, link: self.link.clone(), decided: false })
    }

    /// Secure mode, on a server: the addresses connect tokens name it by, from now on; for
    /// a server reached through a load balancer or a NAT, or bound to an unspecified
    /// address. See [`porous_proto::Host::set_public_addresses`].
    pub fn set_public_addresses(&self, addresses: Vec<SocketAddr>) -> Result<(), ConfigError> {
        lock(&self.link.core).set_public_addresses(addresses)
    }

    /// The core's counters of this host. `peers` counts connections connecting or
    /// connected, `closing` those ending and the ended ones the core still holds (see
    /// [`HostStats`]).
    pub fn stats(&self) -> HostStats {
        lock(&self.link.core).stats()
    }

    /// The host's established connections, in no particular order: every connection handed
    /// to the application (from [`Host::connect`], [`Host::accept`], [`Incoming::accept`],
    /// or waiting in the accept backlog), from the moment it is established until its end
    /// is reported ([`HostEvent::Disconnected`](crate::HostEvent::Disconnected) from
    /// [`Host::events`], and [`Peer::recv`]'s error). A connection that is ending
    /// gracefully is listed until it has ended.
    ///
    /// ```
    /// # async fn list(server: porous_async::Host) {
    /// for peer in server.peers() {
    ///     println!("{} at {} ({:?})", peer.id, peer.remote, peer.client_id);
    /// }
    /// # }
    /// ```
    pub fn peers(&self) -> Vec<PeerInfo> {
        self.shared.connections.peers()
    }

    /// A stream of the host's connection events: first a
    /// [`Connected`](crate::HostEvent::Connected) for every connection [`Host::peers`]
    /// lists now, then a `Connected` for each new one (with its connect data and, on a
    /// secure server, client id), an [`AddressChanged`](crate::HostEvent::AddressChanged)
    /// for each that moves to a new address of its remote, and a
    /// [`Disconnected`](crate::HostEvent::Disconnected) with the reason for each that
    /// ends, in the order they happen. Every subscriber
    /// sees every event; a server notices who left without polling every [`Peer`].
    ///
    /// Events wait in a bounded queue per stream ([`EVENT_QUEUE`](crate::EVENT_QUEUE),
    /// or twice `max_peers` if that is more); a stream that falls further behind loses
    /// the oldest and reads [`HostEvent::Lagged`](crate::HostEvent::Lagged). The stream
    /// ends once the driver has stopped.
    ///
    /// ```
    /// use porous_async::HostEvent;
    /// # async fn watch(server: porous_async::Host) {
    /// let mut events = server.events();
    /// while let Some(event) = events.next().await {
    ///     match event {
    ///         HostEvent::Connected { peer, .. } => println!("{} joined from {}", peer.id, peer.remote),
    ///         HostEvent::Disconnected { peer, reason, .. } => println!("{} left: {reason}", peer.id),
    ///         _ => {}
    ///     }
    /// }
    /// # }
    /// ```
    pub fn events(&self) -> Events {
        self.shared.connections.subscribe()
    }

    /// Queues a packet for every established connection ([`Host::peers`]) under one lock,
    /// with one wake-up of the driver; the payload is shared, not copied. Returns the
    /// connections that refused it, with the core's error ([`SendError::QueueFull`] for
    /// one whose queue is full of reliable data); connections that are ending (their
    /// `Disconnected` is on its way) are skipped without an error.
    ///
    /// ```
    /// # use porous_async::SendMode;
    /// # fn tick(server: &porous_async::Host, snapshot: Vec<u8>) {
    /// for (peer, error) in server.broadcast(1, snapshot, SendMode::Unreliable) {
    ///     eprintln!("{peer}: {error}");
    /// }
    /// # }
    /// ```
    pub fn broadcast(&self, channel: usize, data: impl Into<Bytes>, mode: SendMode) -> Vec<(PeerId, SendError)> {
        let data = data.into();
        let mut refused = Vec::new();
        {
            let mut core = lock(&self.link.core);
            self.shared.connections.for_each_id(|id| match core.send(id, channel, data.clone(), mode) {
                Ok(()) | Err(SendError::NotConnected) => {}
                Err(e) => refused.push((id, e)),
            });
        }
        self.link.wake();
        refused
    }

    /// Queues a packet for each connection in `peers` under one lock, with one wake-up of
    /// the driver; the payload is shared, not copied. Returns the connections that
    /// refused it, with the core's error ([`SendError::UnknownPeer`] for an id that is
    /// gone, [`SendError::NotConnected`] for one that is ending).
    pub fn send_to(
        &self,
        peers: impl IntoIterator<Item = PeerId>,
        channel: usize,
        data: impl Into<Bytes>,
        mode: SendMode,
    ) -> Vec<(PeerId, SendError)> {
        let data = data.into();
        let mut refused = Vec::new();
        {
            let mut core = lock(&self.link.core);
            for id in peers {
                if let Err(e) = core.send(id, channel, data.clone(), mode) {
                    refused.push((id, e));
                }
            }
        }
        self.link.wake();
        refused
    }

    /// The socket's counters, as of the driver's last round.
    pub fn socket_stats(&self) -> SocketStats {
        *self.shared.socket.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Attaches a transport beside the UDP socket (a WebTransport server:
    /// `porous-webtransport`): from the driver's next round on, its remotes' datagrams go
    /// to the same core and its remotes' connections are this host's peers like any other.
    /// See [`transport`](crate::transport) for what the driver does with it. The transport
    /// is dropped when the driver stops; attaching fails with [`Error::Stopped`] (and
    /// drops it) if the driver has stopped already.
    pub async fn attach(&self, transport: Box<dyn crate::transport::Transport>) -> Result<(), Error> {
        self.link.commands.send(Command::Attach(transport)).await.map_err(|_| Error::Stopped)
    }

    /// The counters of the attached transports, as of the driver's last round.
    pub fn transport_stats(&self) -> crate::transport::TransportStats {
        *self.shared.transports.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the socket's batching from the driver's next round on: [`Batching::NONE`]
    /// makes one system call per datagram, as on a kernel without `recvmmsg`, GSO and GRO.
    /// For tests, comparisons, and systems where an offload misbehaves.
    pub fn set_batching(&self, batching: Batching) {
        // Only a stopped driver refuses it, and then nothing is batched any more.
        let _ = self.link.commands.try_send(Command::Batching(batching));
    }

    /// Makes the socket fail on purpose from the driver's next round on (feature
    /// `fault-injection`), to test how an application copes; [`Faults::NONE`] ends it.
    #[cfg(feature = "fault-injection")]
    pub fn inject_faults(&self, faults: Faults) {
        let _ = self.link.commands.try_send(Command::Faults(faults));
    }
}

/// One connection. Cheap to clone; clones share one delivery queue, so each packet goes
/// to one [`Peer::recv`] call. Dropping the last clone disconnects gracefully.
#[derive(Clone)]
pub struct Peer {
    inner: Arc<PeerInner>,
}

struct PeerInner {
    id: PeerId,
    data: Bytes,
    client_id: Option<u64>,
    mailbox: Arc<Mailbox>,
    ended: Receiver<Infallible>,
    shared: Arc<PeerShared>,
    link: Link,
}

impl Drop for PeerInner {
    fn drop(&mut self) {
        // A no-op if the connection has ended already.
        disconnect(&mut lock(&self.link.core), self.id, 0);
        self.link.wake();
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("id", &self.inner.id)
            .field("remote", &self.inner.shared.remote())
            .finish_non_exhaustive()
    }
}

impl Peer {
    fn new(parts: PeerParts, link: Link) -> Self {
        let PeerParts { id, data, client_id, mailbox, ended, shared } = parts;
        Self { inner: Arc::new(PeerInner { id, data, client_id, mailbox, ended, shared, link }) }
    }

    /// The connection's id in the core.
    pub fn id(&self) -> PeerId {
        self.inner.id
    }

    /// The remote's address now: where the connection's datagrams come from and go to.
    /// It changes if the remote's address does and the remote proves it receives at the
    /// new one (a NAT that rebound its mapping: see
    /// [`HostConfig::address_change`](crate::HostConfig::address_change)); the host's
    /// [`events`](Host::events) report each move as
    /// [`HostEvent::AddressChanged`](crate::HostEvent::AddressChanged). It keeps the last
    /// address once the connection has ended.
    pub fn remote(&self) -> SocketAddr {
        self.inner.shared.remote()
    }

    /// The connect data the remote sent with its request ([`Host::connect_with`]): on a
    /// connection from [`Host::accept`] or [`Incoming::accept`], what the client sent
    /// (empty if it used [`Host::connect`]). On a connection this side started it is
    /// empty, since replies carry no connect data (unless both sides connected to each
    /// other at once and the remote's request arrived first). On a secure server, the
    /// user data of the client's connect token, as the backend wrote it (see
    /// [`porous_proto::Event::Connected`]).
    pub fn connect_data(&self) -> &Bytes {
        &self.inner.data
    }

    /// On a secure server, the client id of the client's connect token; `None` otherwise.
    pub fn client_id(&self) -> Option<u64> {
        self.inner.client_id
    }

    /// Queues a packet on `channel`; the driver sends it at once. Errors are the core's
    /// own, unchanged: nothing was queued.
    pub fn send(&self, channel: usize, data: impl Into<Bytes>, mode: SendMode) -> Result<(), SendError> {
        let data = data.into();
        lock(&self.inner.link.core).send(self.inner.id, channel, data, mode)?;
        self.inner.link.wake();
        Ok(())
    }

    /// The next packet, with its channel and send mode, or, once every packet that
    /// arrived has been returned, why the connection ended.
    pub async fn recv(&self) -> Result<Packet, Disconnected> {
        match std::future::poll_fn(|cx| self.inner.mailbox.poll_take(cx)).await {
            Take::Packet(packet, refill) => {
                if refill {
                    // The driver holds packets for want of room: there is room now.
                    self.inner.link.wake();
                }
                Ok(packet)
            }
            Take::Closed => Err(Disconnected(self.reason())),
        }
    }

    /// Disconnects gracefully and waits until the core reports the end: packets already
    /// sent are delivered first, then the disconnection handshake runs. Returns why the
    /// connection ended: [`DisconnectReason::Local`] when the flush and the handshake
    /// finished (the handshake gives up after `disconnect_timeout`), something else if
    /// the connection ended otherwise first. Packets still arriving meanwhile stay
    /// readable with [`Peer::recv`]; keep reading if the remote sends a lot, since a full
    /// delivery queue defers the acknowledgements the flush waits for.
    ///
    /// The remote's [`Peer::recv`] ends with [`DisconnectReason::Remote`] and code 0;
    /// [`Peer::disconnect_with`] sends a code of your own.
    pub async fn disconnect(&self) -> DisconnectReason {
        self.disconnect_with(0).await
    }

    /// [`Peer::disconnect`] with an application code (ENet's disconnect data: kicked, match
    /// over, quit). The remote's [`Peer::recv`] ends with
    /// `Disconnected(DisconnectReason::Remote { code })`. The code is repeated until the
    /// remote acknowledges the disconnection.
    pub async fn disconnect_with(&self, code: u32) -> DisconnectReason {
        disconnect(&mut lock(&self.inner.link.core), self.inner.id, code);
        self.inner.link.wake();
        // Nothing is ever sent on `ended`: this returns when it closes.
        let _ = self.inner.ended.recv().await;
        self.reason()
    }

    /// Disconnects at once, dropping packets not yet sent; the remote is told, best
    /// effort, with code 0. `recv` then returns the packets already queued, then
    /// [`DisconnectReason::Local`].
    pub fn disconnect_now(&self) {
        self.disconnect_now_with(0);
    }

    /// [`Peer::disconnect_now`] with an application code for the remote, sent once, best
    /// effort (if that datagram is lost the remote times out instead).
    pub fn disconnect_now_with(&self, code: u32) {
        disconnect_now(&mut lock(&self.inner.link.core), self.inner.id, code);
        self.inner.link.wake();
    }

    /// A snapshot of the connection's state and counters; `None` once the core has
    /// deleted it (a while after it ended).
    pub fn stats(&self) -> Option<PeerStats> {
        lock(&self.inner.link.core).peer_stats(self.inner.id)
    }

    /// The counters of this connection's delivery queue.
    pub fn delivery_stats(&self) -> DeliveryStats {
        let s = &self.inner.shared;
        DeliveryStats {
            queued: self.inner.mailbox.len(),
            unreliable_dropped: s.unreliable_dropped.load(Ordering::Relaxed),
            datagrams_deferred: s.datagrams_deferred.load(Ordering::Relaxed),
        }
    }

    fn reason(&self) -> DisconnectReason {
        // Unset only if the driver itself is gone, which ends every connection here.
        self.inner.shared.reason.get().copied().unwrap_or(DisconnectReason::Local)
    }
}

/// A connection request awaiting the application's decision, from [`Host::incoming`]
/// (with [`HostConfig::manual_accept`](crate::HostConfig::manual_accept)). Read
/// [`Incoming::remote`] and [`Incoming::data`], then [`Incoming::accept`] or
/// [`Incoming::reject`].
///
/// Until the connection is established the request is not authenticated: `remote` may be
/// spoofed and, in plain mode, `data` is only what someone sent from there; verify
/// tickets before trusting them. On a secure server ([`HostConfig::secure`]) the request
/// passed the connect token's checks first: `data` is the token's user data and
/// [`Incoming::client_id`] its client id, both as the backend wrote them. Dropping an `Incoming` undecided rejects it with code 0. Undecided for
/// longer than the connect timeout (counted from its arrival), it times out: `accept`
/// then fails with [`DisconnectReason::Timeout`].
pub struct Incoming {
    parts: RequestParts,
    link: Link,
    /// `accept` or `reject` has answered it; dropping it does nothing more.
    decided: bool,
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Incoming")
            .field("id", &self.parts.id)
            .field("remote", &self.parts.remote)
            .field("data", &self.parts.data)
            .field("client_id", &self.parts.client_id)
            .finish_non_exhaustive()
    }
}

impl Incoming {
    /// The id the connection keeps if admitted ([`Peer::id`]).
    pub fn id(&self) -> PeerId {
        self.parts.id
    }

    /// The requester's address (unproven until the connection is established).
    pub fn remote(&self) -> SocketAddr {
        self.parts.remote
    }

    /// The connect data the requester sent ([`Host::connect_with`]; empty from
    /// [`Host::connect`]); on a secure server, its connect token's user data. The admitted
    /// [`Peer::connect_data`] returns it again.
    pub fn data(&self) -> &Bytes {
        &self.parts.data
    }

    /// On a secure server, the client id of the requester's connect token (verified);
    /// `None` in plain mode. The admitted [`Peer::client_id`] returns it again.
    pub fn client_id(&self) -> Option<u64> {
        self.parts.client_id
    }

    /// Admits the request: the handshake goes on, and this resolves with the connection
    /// once it is established (or fails with [`Error::Failed`], typically
    /// [`DisconnectReason::Timeout`] when the request timed out before the decision or
    /// the handshake did not complete within the connect timeout). Dropping the future
    /// before it resolves abandons the connection: rejected if the driver had not
    /// received the decision yet, ended at once otherwise.
    pub async fn accept(mut self) -> Result<Peer, Error> {
        let (reply, result) = async_channel::bounded(1);
        self.link.commands.send(Command::Accept(self.parts.id, reply)).await.map_err(|_| Error::Stopped)?;
        self.decided = true;
        let parts = result.recv().await.map_err(|_| Error::Stopped)??;
        Ok(Peer::new(parts, self.link.clone()))
    }

    /// Rejects the request: the requester's attempt fails with
    /// [`DisconnectReason::Rejected`] carrying `code` (its `connect` returns
    /// [`Error::Failed`]). The host holds nothing for it afterwards. Does nothing if the
    /// request has timed out already.
    pub fn reject(mut self, code: u32) {
        self.decided = true;
        reject(&mut lock(&self.link.core), self.parts.id, code);
        self.link.wake();
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if !self.decided {
            reject(&mut lock(&self.link.core), self.parts.id, 0);
            self.link.wake();
        }
    }
}
