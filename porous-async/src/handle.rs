//! The handles: [`Host`] and [`Peer`], and what they share with the driver.

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

use crate::driver::Driver;
use crate::mailbox::{Mailbox, Take};
use crate::runtime::Runtime;
use crate::{
    ACCEPT_BACKLOG, DeliveryStats, DisconnectReason, Disconnected, Error, HostConfig, HostStats, Packet, PeerId,
    PeerStats, SendError, SendMode,
};

/// Commands that wait for the driver; a capacity-1 wake-up would do, a few more let
/// `connect` calls queue without waiting.
const COMMANDS: usize = 64;

/// What handles send the driver.
pub(crate) enum Command {
    /// Something changed in the core (a send, a disconnect, a packet read): step it.
    Wake,
    /// Connect to an address (in secure mode with this connect token); the reply comes
    /// once the connection is up or has failed.
    Connect(SocketAddr, Option<Bytes>, Sender<Result<PeerParts, Error>>),
    /// Use this batching from now on.
    Batching(Batching),
    /// Inject these faults from now on.
    #[cfg(feature = "fault-injection")]
    Faults(Faults),
}

/// Locks the core. A panic elsewhere cannot leave it half-updated in a way that matters
/// more than stopping would, so a poisoned lock is used as is.
pub(crate) fn lock(core: &Mutex<porous_proto::Host>) -> MutexGuard<'_, porous_proto::Host> {
    core.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every graceful disconnection this crate asks of the core goes through here.
pub(crate) fn disconnect(core: &mut porous_proto::Host, peer: PeerId) {
    core.disconnect(Instant::now(), peer);
}

/// Every immediate disconnection this crate asks of the core goes through here.
pub(crate) fn disconnect_now(core: &mut porous_proto::Host, peer: PeerId) {
    core.disconnect_now(Instant::now(), peer);
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
#[derive(Debug, Default)]
pub(crate) struct HostShared {
    /// The socket's counters, as of the driver's last round.
    pub(crate) socket: Mutex<SocketStats>,
    /// Set by the handle that sends the driver a wake-up, cleared by the driver when a
    /// round starts: handles skip the channel while a wake-up is pending.
    pub(crate) wake_pending: AtomicBool,
}

/// The state of a connection that the driver and the connection's handles share.
#[derive(Debug, Default)]
pub(crate) struct PeerShared {
    /// Why the connection ended, set when the core reports it.
    pub(crate) reason: OnceLock<DisconnectReason>,
    /// See [`DeliveryStats`].
    pub(crate) unreliable_dropped: AtomicU64,
    /// See [`DeliveryStats`].
    pub(crate) datagrams_deferred: AtomicU64,
}

/// An established connection as the driver hands it to `connect` or `accept`.
pub(crate) struct PeerParts {
    pub(crate) id: PeerId,
    pub(crate) remote: SocketAddr,
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
    /// The runtime crates wrap this as `Host::bind(addr, config)`.
    pub fn bind_with(runtime: &dyn Runtime, addr: impl ToSocketAddrs, config: HostConfig) -> Result<Self, Error> {
        let rng = rand_core::UnwrapErr(getrandom::SysRng);
        let core = porous_proto::Host::new(config, rng).map_err(Error::Config)?;
        let socket = porous_udp::bind(addr).map_err(Error::Io)?;
        let io = UdpIo::new(&socket, Batching::default()).map_err(Error::Io)?;
        let local_addr = socket.local_addr().map_err(Error::Io)?;
        let socket = runtime.wrap_udp_socket(socket).map_err(Error::Io)?;
        let (commands, command_rx) = async_channel::bounded(COMMANDS);
        let (accept_tx, accept) = async_channel::bounded(ACCEPT_BACKLOG);
        let shared = Arc::new(HostShared::default());
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
            Arc::clone(&shared),
        );
        // Detached: the driver ends by itself once every handle is gone.
        runtime.spawn(Box::pin(driver));
        Ok(Self { link, accept, local_addr, shared })
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
    pub async fn connect(&self, remote: SocketAddr) -> Result<Peer, Error> {
        self.connect_inner(remote, None).await
    }

    /// Secure mode ([`HostConfig::secure`](porous_proto::HostConfig::secure)): connects to
    /// `remote` with a connect token from the game's backend ([`porous_proto::token`]);
    /// see [`porous_proto::Host::connect_with_token`]. Resolves as [`Host::connect`]
    /// does; a token the server refuses gets no answer, so that ends in
    /// [`Error::Failed`] with a timeout.
    pub async fn connect_with_token(&self, remote: SocketAddr, token: &[u8]) -> Result<Peer, Error> {
        self.connect_inner(remote, Some(Bytes::copy_from_slice(token))).await
    }

    async fn connect_inner(&self, remote: SocketAddr, token: Option<Bytes>) -> Result<Peer, Error> {
        let (reply, result) = async_channel::bounded(1);
        self.link.commands.send(Command::Connect(remote, token, reply)).await.map_err(|_| Error::Stopped)?;
        let parts = result.recv().await.map_err(|_| Error::Stopped)??;
        Ok(Peer::new(parts, self.link.clone()))
    }

    /// The next established incoming connection, in the order they were established.
    /// Fails only if the driver has stopped.
    pub async fn accept(&self) -> Result<Peer, Error> {
        let parts = self.accept.recv().await.map_err(|_| Error::Stopped)?;
        Ok(Peer::new(parts, self.link.clone()))
    }

    /// The core's counters of this host.
    pub fn stats(&self) -> HostStats {
        lock(&self.link.core).stats()
    }

    /// The socket's counters, as of the driver's last round.
    pub fn socket_stats(&self) -> SocketStats {
        *self.shared.socket.lock().unwrap_or_else(PoisonError::into_inner)
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
    remote: SocketAddr,
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
        disconnect(&mut lock(&self.link.core), self.id);
        self.link.wake();
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer").field("id", &self.inner.id).field("remote", &self.inner.remote).finish_non_exhaustive()
    }
}

impl Peer {
    fn new(parts: PeerParts, link: Link) -> Self {
        let PeerParts { id, remote, data, client_id, mailbox, ended, shared } = parts;
        Self { inner: Arc::new(PeerInner { id, remote, data, client_id, mailbox, ended, shared, link }) }
    }

    /// The connect data the remote sent with its request (empty if none): see
    /// [`Event::Connected`](porous_proto::Event::Connected). On a secure server, the user
    /// data of the client's connect token, as the backend wrote it.
    pub fn connect_data(&self) -> &Bytes {
        &self.inner.data
    }

    /// On a secure server, the client id of the client's connect token; `None` otherwise.
    pub fn client_id(&self) -> Option<u64> {
        self.inner.client_id
    }

    /// The connection's id in the core.
    pub fn id(&self) -> PeerId {
        self.inner.id
    }

    /// The remote address.
    pub fn remote(&self) -> SocketAddr {
        self.inner.remote
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
    pub async fn disconnect(&self) -> DisconnectReason {
        disconnect(&mut lock(&self.inner.link.core), self.inner.id);
        self.inner.link.wake();
        // Nothing is ever sent on `ended`: this returns when it closes.
        let _ = self.inner.ended.recv().await;
        self.reason()
    }

    /// Disconnects at once, dropping packets not yet sent; the remote is told, best
    /// effort. `recv` then returns the packets already queued, then
    /// [`DisconnectReason::Local`].
    pub fn disconnect_now(&self) {
        disconnect_now(&mut lock(&self.inner.link.core), self.inner.id);
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
