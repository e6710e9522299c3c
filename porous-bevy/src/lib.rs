//! POROUS for [Bevy](https://bevyengine.org): a server and a client as resources, driven
//! once per frame by [`PorousPlugin`].
//!
//! ```no_run
//! use bevy_app::{App, Update};
//! use bevy_ecs::prelude::*;
//! use porous_bevy::{Bytes, HostConfig, PacketReceived, PorousPlugin, PorousServer, SendMode};
//!
//! fn echo(mut server: ResMut<PorousServer>, mut received: MessageReader<PacketReceived>) {
//!     for packet in received.read() {
//!         let _ = server.send(packet.peer, packet.channel, packet.data.clone(), SendMode::Reliable);
//!     }
//! }
//!
//! # fn main() -> std::io::Result<()> {
//! App::new()
//!     .add_plugins((bevy_app::ScheduleRunnerPlugin::default(), bevy_time::TimePlugin, PorousPlugin))
//!     .insert_resource(PorousServer::bind("0.0.0.0:5000", HostConfig::default())?)
//!     .add_systems(Update, echo)
//!     .run();
//! # Ok(())
//! # }
//! ```
//!
//! A client is the same with [`PorousClient::connect`]`(server_addr, config)`, and
//! [`PorousClient::send`] needs no peer. For bevy_replicon, the `porous-bevy-replicon`
//! crate carries replicon's messages over these resources.
//!
//! # One frame
//!
//! - `PreUpdate`, in [`PorousSystems::Receive`]: each resource's transport hands the
//!   datagrams that arrived to the core with the frame's time, and the core's events
//!   become Bevy messages: [`PeerConnected`] (with the connect data), [`PeerDisconnected`]
//!   (with the reason), [`PacketReceived`], [`ConnectRequested`] under
//!   [`HostConfig::manual_accept`], and [`PeerAddressChanged`] when a remote's address
//!   changes (a NAT rebinding, with [`HostConfig::address_change`]). Nothing is sent here.
//! - `Update` and the rest: the game reads the messages and calls
//!   [`PorousServer::send`] and the like, which only queue.
//! - `PostUpdate`, in [`PorousSystems::Flush`]: the core steps (timers, then everything
//!   queued is packed into datagrams) and the transport sends. Each peer gets the frame's
//!   packets and acknowledgements in one datagram, as a fixed-tick game loop over
//!   `porous-mio` does with its `receive` and `flush`.
//!
//! Time is Bevy's: the plugin hands the core `Time<Real>`'s instant of the frame (the
//! core reads no clock), so `TimeUpdateStrategy::ManualDuration` makes a run repeatable.
//! Configuration is POROUS's own [`HostConfig`] and [`ChannelConfig`].
//!
//! # Statistics
//!
//! [`PorousServer::peer_stats`] and [`PorousClient::peer_stats`] read a connection's
//! counters from the core ([`PeerStats`]: RTT, congestion window, losses, bytes each
//! way). [`PorousServer::net_stats`] adds the bytes per second each way, measured by the
//! plugin over windows of at least [`RATE_WINDOW`].
//!
//! # Transports
//!
//! [`PorousServer::bind`] and [`PorousClient::connect`] use a UDP socket
//! ([`UdpTransport`], batched through `porous-udp`). [`PorousServer::new`] and
//! [`PorousClient::new`] take any [`Transport`]; with the feature `sim`, the [`sim`]
//! module puts several apps on POROUS's seeded network simulator, for deterministic tests
//! of a game under loss.
//!
//! # Features
//!
//! - `sim`: the [`sim`] module.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "sim")]
pub mod sim;
mod transport;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bevy_app::{App, Plugin, PostUpdate, PreUpdate};
use bevy_ecs::message::{Message, MessageWriter};
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use bevy_time::{Real, Time};

/// The protocol core.
pub use porous_proto as proto;
// The core's whole vocabulary, as every adapter re-exports it: an application names
// everything through this crate (its `sim` module shadows the core's, which stays
// reachable as `proto::sim`). `Event` is named apart because Bevy's prelude, imported
// here, has an `Event` (its trait) too.
pub use porous_proto::Event;
pub use porous_proto::*;
pub use porous_udp::{Batching, SOCKET_BUFFER, SocketStats};
pub use transport::{Transport, UdpTransport};

/// The shortest span [`NetStats`]' rates are measured over: a frame's bytes alone would
/// make a rate jump with every datagram.
pub const RATE_WINDOW: Duration = Duration::from_millis(250);

/// Drives the [`PorousServer`] and [`PorousClient`] resources present, once per frame.
/// See the [crate docs](crate).
#[derive(Debug, Default, Clone, Copy)]
pub struct PorousPlugin;

/// The plugin's systems, to order yours (or a messaging backend's) around them.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PorousSystems {
    /// `PreUpdate`: datagrams in, events out as messages.
    Receive,
    /// `PostUpdate`: the core steps and the datagrams leave.
    Flush,
}

impl Plugin for PorousPlugin {
    fn build(&self, app: &mut App) {
        app.add_message::<PeerConnected>()
            .add_message::<PeerDisconnected>()
            .add_message::<PacketReceived>()
            .add_message::<ConnectRequested>()
            .add_message::<PeerAddressChanged>()
            .add_systems(
                PreUpdate,
                (
                    receive_server.run_if(resource_exists::<PorousServer>),
                    receive_client.run_if(resource_exists::<PorousClient>),
                )
                    .in_set(PorousSystems::Receive),
            )
            .add_systems(
                PostUpdate,
                (
                    flush_server.run_if(resource_exists::<PorousServer>),
                    flush_client.run_if(resource_exists::<PorousClient>),
                )
                    .in_set(PorousSystems::Flush),
            );
    }
}

/// Which resource a message comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// [`PorousServer`].
    Server,
    /// [`PorousClient`].
    Client,
}

/// A connection is established ([`Event::Connected`]).
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerConnected {
    /// Whose connection.
    pub side: Side,
    /// The peer.
    pub peer: PeerId,
    /// Its address.
    pub remote: SocketAddr,
    /// The connect data the remote sent with its request (on a server: the client's
    /// [`PorousClient::connect_with`] data, or in secure mode its token's user data).
    pub data: Bytes,
    /// Secure mode, on a server: the client id of the client's connect token.
    pub client_id: Option<u64>,
}

/// A connection's remote moved to a new address and proved it receives there
/// ([`Event::AddressChanged`], with [`HostConfig::address_change`]): a NAT rebinding, for
/// one. The connection, its peer id and its [`NetStats`] go on; what the app keyed by
/// address follows `new`.
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerAddressChanged {
    /// Whose connection.
    pub side: Side,
    /// The peer.
    pub peer: PeerId,
    /// The address it had ([`PeerConnected::remote`], or the last change's `new`).
    pub old: SocketAddr,
    /// The address it has now.
    pub new: SocketAddr,
}

/// A connection ended, or an attempt failed ([`Event::Disconnected`]). The peer id is dead
/// afterwards.
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerDisconnected {
    /// Whose connection.
    pub side: Side,
    /// The peer.
    pub peer: PeerId,
    /// Why.
    pub reason: DisconnectReason,
}

/// A packet arrived ([`Event::Received`]).
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PacketReceived {
    /// Whose connection.
    pub side: Side,
    /// The peer that sent it.
    pub peer: PeerId,
    /// The channel it came on.
    pub channel: usize,
    /// How it was sent.
    pub mode: SendMode,
    /// The packet.
    pub data: Bytes,
}

/// A client asks to connect and the server decides ([`Event::ConnectRequest`], only with
/// [`HostConfig::manual_accept`]): call [`PorousServer::accept`] or
/// [`PorousServer::reject`].
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectRequested {
    /// The id the peer keeps if accepted.
    pub peer: PeerId,
    /// Its address (unproven until connected).
    pub remote: SocketAddr,
    /// The connect data it sent.
    pub data: Bytes,
    /// Secure mode: its token's client id.
    pub client_id: Option<u64>,
}

/// A connection's counters ([`PeerStats`]) and its rates each way, refreshed every frame.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct NetStats {
    /// The core's snapshot, from this frame's receive step.
    pub peer: PeerStats,
    /// UDP payload bytes sent per second, over the last [`RATE_WINDOW`] or more.
    pub sent_bps: f64,
    /// UDP payload bytes received per second, over the last [`RATE_WINDOW`] or more.
    pub received_bps: f64,
}

/// What the rates of one connection are measured from.
#[derive(Clone, Copy, Debug)]
struct Rates {
    since: Instant,
    sent: u64,
    received: u64,
    stats: Option<NetStats>,
}

/// The writers of the plugin's messages.
#[derive(SystemParam)]
struct Writers<'w> {
    connected: MessageWriter<'w, PeerConnected>,
    disconnected: MessageWriter<'w, PeerDisconnected>,
    received: MessageWriter<'w, PacketReceived>,
    requests: MessageWriter<'w, ConnectRequested>,
    moved: MessageWriter<'w, PeerAddressChanged>,
}

/// The instant of this frame on Bevy's clock; the wall clock only in an app without
/// `TimePlugin`.
fn frame_time(time: Option<Res<'_, Time<Real>>>) -> Instant {
    time.map_or_else(Instant::now, |t| t.last_update().unwrap_or_else(|| t.startup()))
}

/// A core and its transport: what the server and the client resources both are.
#[derive(Debug)]
struct Endpoint {
    /// In a mutex only because the core is `Send` but not `Sync` (its generator), and a
    /// resource must be both: every `&mut self` path reaches it without locking.
    core: Mutex<Host>,
    transport: Box<dyn Transport>,
    /// The time of the current frame, for calls made between the plugin's systems.
    now: Option<Instant>,
    /// Connected peers and their rates.
    rates: PeerMap<Rates>,
}

impl Endpoint {
    fn new(core: Host, transport: impl Transport) -> Self {
        Self { core: Mutex::new(core), transport: Box::new(transport), now: None, rates: PeerMap::default() }
    }

    fn core(&self) -> MutexGuard<'_, Host> {
        // The core is never left half-changed by a panic in our code (we hold the lock
        // for single calls), so a poisoned lock still guards a consistent core.
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn core_mut(&mut self) -> &mut Host {
        self.core.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// The time to give the core for a call made between the plugin's systems: the
    /// frame's. `None` before the first frame, whose time is the core's epoch: calls that
    /// need a time wait for it (no peer can exist before it anyway).
    fn now(&self) -> Option<Instant> {
        self.now
    }

    /// Datagrams in, then the core's events out as messages, then the rates.
    fn receive(&mut self, now: Instant, side: Side, w: &mut Writers<'_>, mut on_event: impl FnMut(&Event)) {
        self.now = Some(now);
        let core = self.core.get_mut().unwrap_or_else(PoisonError::into_inner);
        self.transport.receive(now, core);
        while let Some(event) = core.poll_event() {
            on_event(&event);
            match event {
                Event::Connected { peer, remote, data, client_id, .. } => {
                    self.rates.insert(peer, Rates { since: now, sent: 0, received: 0, stats: None });
                    w.connected.write(PeerConnected { side, peer, remote, data, client_id });
                }
                Event::Disconnected { peer, reason, .. } => {
                    self.rates.remove(peer);
                    w.disconnected.write(PeerDisconnected { side, peer, reason });
                }
                Event::Received { peer, channel, mode, data, .. } => {
                    w.received.write(PacketReceived { side, peer, channel, mode, data });
                }
                Event::ConnectRequest { peer, remote, data, client_id, .. } => {
                    w.requests.write(ConnectRequested { peer, remote, data, client_id });
                }
                Event::AddressChanged { peer, old, new, .. } => {
                    w.moved.write(PeerAddressChanged { side, peer, old, new });
                }
                // Events a later core may add: nothing here depends on them.
                _ => {}
            }
        }
        for (peer, rates) in self.rates.iter_mut() {
            let Some(stats) = core.peer_stats(peer) else { continue };
            let (sent, received) = (stats.transfer.bytes_sent, stats.transfer.bytes_received);
            let mut net = rates.stats.unwrap_or(NetStats { peer: stats, sent_bps: 0.0, received_bps: 0.0 });
            net.peer = stats;
            let span = now.saturating_duration_since(rates.since);
            if span >= RATE_WINDOW {
                let secs = span.as_secs_f64();
                net.sent_bps = sent.saturating_sub(rates.sent) as f64 / secs;
                net.received_bps = received.saturating_sub(rates.received) as f64 / secs;
                (rates.since, rates.sent, rates.received) = (now, sent, received);
            }
            rates.stats = Some(net);
        }
    }

    /// The core steps; the transport sends.
    fn flush(&mut self, now: Instant) {
        self.now = Some(now);
        let core = self.core.get_mut().unwrap_or_else(PoisonError::into_inner);
        core.step(now);
        self.transport.send(core);
    }

    fn net_stats(&self, peer: PeerId) -> Option<NetStats> {
        self.rates.get(peer).and_then(|r| r.stats)
    }
}

impl Drop for Endpoint {
    /// A resource removed (or an app closed) tells its peers at once, best effort,
    /// rather than leaving them to time out.
    fn drop(&mut self) {
        let Some(now) = self.now else { return };
        let core = self.core.get_mut().unwrap_or_else(PoisonError::into_inner);
        let peers: Vec<PeerId> = core.peers().collect();
        for peer in peers {
            core.disconnect_now(now, peer);
        }
        core.step(now);
        self.transport.send(core);
    }
}

/// A POROUS host that accepts clients, as a resource. See the [crate docs](crate).
#[derive(Resource, Debug)]
pub struct PorousServer {
    endpoint: Endpoint,
}

impl PorousServer {
    /// A server on a UDP socket bound to `addr`, its randomness from the operating
    /// system.
    pub fn bind(addr: impl ToSocketAddrs, config: HostConfig) -> io::Result<Self> {
        let core = Host::from_entropy(config).map_err(invalid_config)?;
        Ok(Self::new(core, UdpTransport::bind(addr)?))
    }

    /// A server on a UDP socket the application bound itself (with its own options), its
    /// randomness from the operating system. The socket is made non-blocking.
    pub fn from_std(socket: UdpSocket, config: HostConfig) -> io::Result<Self> {
        let core = Host::from_entropy(config).map_err(invalid_config)?;
        Ok(Self::new(core, UdpTransport::from_std(socket)?))
    }

    /// A server of `core` over `transport`.
    pub fn new(core: Host, transport: impl Transport) -> Self {
        Self { endpoint: Endpoint::new(core, transport) }
    }

    /// The address the server is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.endpoint.transport.local_addr()
    }

    /// Queues a packet for `peer` (anything `Into<Bytes>`: kept, not copied); it leaves in
    /// this frame's `PostUpdate`.
    pub fn send(
        &mut self,
        peer: PeerId,
        channel: usize,
        data: impl Into<Bytes>,
        mode: SendMode,
    ) -> Result<(), SendError> {
        self.endpoint.core_mut().send(peer, channel, data, mode)
    }

    /// Disconnects `peer` gracefully (what was sent is delivered first);
    /// [`PeerDisconnected`] follows. The client reads [`DisconnectReason::Remote`] with
    /// `code`. Before the first frame it does nothing (no peer can exist yet).
    pub fn disconnect_with(&mut self, peer: PeerId, code: u32) {
        if let Some(now) = self.endpoint.now() {
            self.endpoint.core_mut().disconnect_with(now, peer, code);
        }
    }

    /// [`PorousServer::disconnect_with`] code 0.
    pub fn disconnect(&mut self, peer: PeerId) {
        self.disconnect_with(peer, 0);
    }

    /// Disconnects `peer` at once, dropping what it had queued; the client is told once,
    /// best effort, with `code`.
    pub fn disconnect_now_with(&mut self, peer: PeerId, code: u32) {
        if let Some(now) = self.endpoint.now() {
            self.endpoint.core_mut().disconnect_now_with(now, peer, code);
        }
    }

    /// [`PorousServer::disconnect_now_with`] code 0.
    pub fn disconnect_now(&mut self, peer: PeerId) {
        self.disconnect_now_with(peer, 0);
    }

    /// Admits a request reported as [`ConnectRequested`].
    pub fn accept(&mut self, peer: PeerId) -> Result<(), AdmissionError> {
        let now = self.endpoint.now().ok_or(AdmissionError::UnknownPeer)?;
        self.endpoint.core_mut().accept(now, peer)
    }

    /// Rejects a request reported as [`ConnectRequested`]; the client reads
    /// [`DisconnectReason::Rejected`] with `code`.
    pub fn reject(&mut self, peer: PeerId, code: u32) -> Result<(), AdmissionError> {
        let now = self.endpoint.now().ok_or(AdmissionError::UnknownPeer)?;
        self.endpoint.core_mut().reject(now, peer, code)
    }

    /// The connected peers, as of this frame's receive step.
    pub fn connected(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.endpoint.rates.iter().map(|(peer, _)| peer)
    }

    /// A snapshot of `peer`'s connection, from the core now.
    pub fn peer_stats(&self, peer: PeerId) -> Option<PeerStats> {
        self.endpoint.core().peer_stats(peer)
    }

    /// `peer`'s counters and rates as of this frame's receive step (connected peers only).
    pub fn net_stats(&self, peer: PeerId) -> Option<NetStats> {
        self.endpoint.net_stats(peer)
    }

    /// The host's counters.
    pub fn host_stats(&self) -> HostStats {
        self.endpoint.core().stats()
    }

    /// The transport's socket counters, if it has a socket.
    pub fn socket_stats(&self) -> Option<SocketStats> {
        self.endpoint.transport.socket_stats()
    }

    /// The protocol core, for calls not wrapped here (its methods that change state take
    /// a time: give them [`PorousServer::frame_time`]).
    pub fn core_mut(&mut self) -> &mut Host {
        self.endpoint.core_mut()
    }

    /// Calls `f` with the protocol core, to read it (its configuration, memory use).
    pub fn with_core<R>(&self, f: impl FnOnce(&Host) -> R) -> R {
        f(&self.endpoint.core())
    }

    /// The time of the current frame as the core was given it; `None` before the first.
    pub fn frame_time(&self) -> Option<Instant> {
        self.endpoint.now()
    }
}

/// Where a client stands with its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientStatus {
    /// The connection request leaves at the first frame, and the handshake runs.
    Connecting,
    /// Connected: packets flow.
    Connected,
    /// [`PorousClient::disconnect`] was called: what was sent is being delivered, then
    /// [`PeerDisconnected`] follows.
    Disconnecting,
    /// The connection ended, or the attempt failed, for this reason.
    Disconnected(DisconnectReason),
    /// The attempt could not start (the core refused the connect call).
    Failed(ConnectError),
}

/// How the client asks to connect: made at the first frame, with its time.
#[derive(Clone, Debug)]
enum Request {
    Plain(Vec<u8>),
    Token(Vec<u8>),
}

/// A POROUS host connected to one server, as a resource. See the [crate docs](crate).
///
/// The connection request leaves at the first frame after the resource is inserted.
/// Remove the resource to end the connection at once (the server is told, best effort),
/// or call [`PorousClient::disconnect`] for a graceful end, then insert a new one to
/// connect again.
#[derive(Resource, Debug)]
pub struct PorousClient {
    endpoint: Endpoint,
    server_addr: SocketAddr,
    request: Option<Request>,
    server: Option<PeerId>,
    status: ClientStatus,
}

/// A client's own host accepts no one.
pub(crate) fn client_config(mut config: HostConfig) -> HostConfig {
    config.accept_incoming = false;
    config
}

fn invalid_config(e: ConfigError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// The unspecified address of `server`'s family, any port.
fn any_addr(server: SocketAddr) -> SocketAddr {
    let ip = match server.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, 0)
}

impl PorousClient {
    /// A client on a new UDP socket (any port) that connects to `server` at the first
    /// frame. Its host accepts no incoming connections (`accept_incoming` is set false).
    pub fn connect(server: SocketAddr, config: HostConfig) -> io::Result<Self> {
        Self::connect_with(server, &[], config)
    }

    /// [`PorousClient::connect`] with connect data (a version, a login ticket) the server
    /// reads in [`PeerConnected::data`] and [`ConnectRequested::data`]: up to
    /// [`PeerConfig::max_connect_data`] bytes.
    pub fn connect_with(server: SocketAddr, data: &[u8], config: HostConfig) -> io::Result<Self> {
        let core = Host::from_entropy(client_config(config)).map_err(invalid_config)?;
        let mut client = Self::new(core, UdpTransport::bind(any_addr(server))?, server);
        client.request = Some(Request::Plain(data.to_vec()));
        Ok(client)
    }

    /// Secure mode ([`HostConfig::secure`]): connects with a connect token from the
    /// game's backend ([`proto::token`]).
    pub fn connect_with_token(server: SocketAddr, token: &[u8], config: HostConfig) -> io::Result<Self> {
        let core = Host::from_entropy(client_config(config)).map_err(invalid_config)?;
        let mut client = Self::new(core, UdpTransport::bind(any_addr(server))?, server);
        client.request = Some(Request::Token(token.to_vec()));
        Ok(client)
    }

    /// A client of `core` over `transport` that connects to `server` at the first frame,
    /// without connect data.
    pub fn new(core: Host, transport: impl Transport, server: SocketAddr) -> Self {
        Self {
            endpoint: Endpoint::new(core, transport),
            server_addr: server,
            request: Some(Request::Plain(Vec::new())),
            server: None,
            status: ClientStatus::Connecting,
        }
    }

    /// Where the client stands.
    pub fn status(&self) -> ClientStatus {
        self.status
    }

    /// Whether the client is connected.
    pub fn is_connected(&self) -> bool {
        self.status == ClientStatus::Connected
    }

    /// The server's address.
    pub fn server_addr(&self) -> SocketAddr {
        self.server_addr
    }

    /// The server's peer id on this client's host, from the first frame on.
    pub fn server(&self) -> Option<PeerId> {
        self.server
    }

    /// The address the client's transport is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.endpoint.transport.local_addr()
    }

    /// Queues a packet for the server (anything `Into<Bytes>`: kept, not copied); it
    /// leaves in this frame's `PostUpdate`.
    pub fn send(&mut self, channel: usize, data: impl Into<Bytes>, mode: SendMode) -> Result<(), SendError> {
        let peer = self.server.ok_or(SendError::NotConnected)?;
        self.endpoint.core_mut().send(peer, channel, data, mode)
    }

    /// Disconnects gracefully (what was sent is delivered first); [`PeerDisconnected`]
    /// follows, and the server reads [`DisconnectReason::Remote`] with `code`.
    pub fn disconnect_with(&mut self, code: u32) {
        if let (Some(now), Some(peer)) = (self.endpoint.now(), self.server) {
            self.endpoint.core_mut().disconnect_with(now, peer, code);
            if matches!(self.status, ClientStatus::Connecting | ClientStatus::Connected) {
                self.status = ClientStatus::Disconnecting;
            }
        }
    }

    /// [`PorousClient::disconnect_with`] code 0.
    pub fn disconnect(&mut self) {
        self.disconnect_with(0);
    }

    /// Disconnects at once; the server is told once, best effort, with `code`.
    pub fn disconnect_now_with(&mut self, code: u32) {
        if let (Some(now), Some(peer)) = (self.endpoint.now(), self.server) {
            self.endpoint.core_mut().disconnect_now_with(now, peer, code);
            if matches!(self.status, ClientStatus::Connecting | ClientStatus::Connected) {
                self.status = ClientStatus::Disconnecting;
            }
        }
    }

    /// [`PorousClient::disconnect_now_with`] code 0.
    pub fn disconnect_now(&mut self) {
        self.disconnect_now_with(0);
    }

    /// A snapshot of the connection, from the core now.
    pub fn peer_stats(&self) -> Option<PeerStats> {
        self.endpoint.core().peer_stats(self.server?)
    }

    /// The connection's counters and rates as of this frame's receive step, once
    /// connected.
    pub fn net_stats(&self) -> Option<NetStats> {
        self.endpoint.net_stats(self.server?)
    }

    /// The transport's socket counters, if it has a socket.
    pub fn socket_stats(&self) -> Option<SocketStats> {
        self.endpoint.transport.socket_stats()
    }

    /// The protocol core, for calls not wrapped here.
    pub fn core_mut(&mut self) -> &mut Host {
        self.endpoint.core_mut()
    }

    /// Calls `f` with the protocol core, to read it (its configuration, memory use).
    pub fn with_core<R>(&self, f: impl FnOnce(&Host) -> R) -> R {
        f(&self.endpoint.core())
    }

    /// The time of the current frame as the core was given it; `None` before the first.
    pub fn frame_time(&self) -> Option<Instant> {
        self.endpoint.now()
    }

    /// Sends the connection request, with the first frame's time.
    fn start(&mut self, now: Instant) {
        let Some(request) = self.request.take() else { return };
        let core = self.endpoint.core_mut();
        let result = match &request {
            Request::Plain(data) => core.connect_with(now, self.server_addr, data),
            Request::Token(token) => core.connect_with_token(now, self.server_addr, token),
        };
        match result {
            Ok(peer) => self.server = Some(peer),
            Err(e) => self.status = ClientStatus::Failed(e),
        }
    }
}

fn receive_server(time: Option<Res<'_, Time<Real>>>, mut server: ResMut<'_, PorousServer>, mut w: Writers<'_>) {
    let now = frame_time(time);
    server.endpoint.receive(now, Side::Server, &mut w, |_| {});
}

fn receive_client(time: Option<Res<'_, Time<Real>>>, mut client: ResMut<'_, PorousClient>, mut w: Writers<'_>) {
    let now = frame_time(time);
    let client = &mut *client;
    client.start(now);
    let (server, status) = (client.server, &mut client.status);
    client.endpoint.receive(now, Side::Client, &mut w, |event| match *event {
        Event::Connected { peer, .. } if Some(peer) == server && *status == ClientStatus::Connecting => {
            *status = ClientStatus::Connected;
        }
        Event::Disconnected { peer, reason, .. } if Some(peer) == server => {
            *status = ClientStatus::Disconnected(reason);
        }
        _ => {}
    });
}

fn flush_server(time: Option<Res<'_, Time<Real>>>, mut server: ResMut<'_, PorousServer>) {
    server.endpoint.flush(frame_time(time));
}

fn flush_client(time: Option<Res<'_, Time<Real>>>, mut client: ResMut<'_, PorousClient>) {
    client.endpoint.flush(frame_time(time));
}
