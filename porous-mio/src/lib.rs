//! POROUS over a [mio](https://docs.rs/mio) UDP socket.
//!
//! [`Host`] owns a non-blocking `mio::net::UdpSocket` (IPv4 or IPv6) and a
//! [`porous_proto::Host`]. It does sockets, the clock and wake-ups, nothing else: every
//! protocol decision is the core's. Two ways to drive it:
//!
//! - **Standalone**, in the style of `enet_host_service`: [`Host::bind`] makes the host
//!   its own `mio::Poll`, and [`Host::service`] waits up to a timeout and returns the next
//!   event.
//! - **Embedded** in your own mio event loop: [`Host::bind_with`] registers the socket with
//!   your `Registry` under your token. Call [`Host::process`] when that token is ready or
//!   when [`Host::timeout`] has passed, then drain [`Host::poll_event`].
//!
//! Either way the host drains the socket until it would block, feeds every datagram to the
//! core with the current time, steps the core, and sends what it produced. A datagram the
//! socket refuses with `WouldBlock` is kept, in order, for the next writable event; the
//! adapter drops nothing. The core's randomness comes from the operating system.
//!
//! ```no_run
//! use std::time::Duration;
//! use bytes::Bytes;
//! use porous_mio::{Event, Host, HostConfig, SendMode};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut server = Host::bind("127.0.0.1:7777".parse()?, HostConfig::default())?;
//! loop {
//!     if let Some(event) = server.service(Duration::from_millis(100))? {
//!         match event {
//!             Event::Received { peer, channel, data, .. } => {
//!                 // Echo it back, reliably, on the same channel.
//!                 let _ = server.send(peer, channel, data, SendMode::Reliable);
//!             }
//!             Event::Connected { remote, .. } => println!("{remote} connected"),
//!             Event::Disconnected { reason, .. } => println!("gone: {reason}"),
//!             _ => {}
//!         }
//!     }
//! }
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Registry, Token};
pub use porous_proto::{
    ConnectError, DisconnectReason, Event, HostConfig, HostStats, PeerConfig, PeerId, PeerStats, SendError, SendMode,
    Transmit,
};

/// The token the socket is registered under in standalone mode.
const OWN_TOKEN: Token = Token(0);

/// Largest UDP payload the receive buffer takes.
const MAX_DATAGRAM: usize = 65_536;

/// The kernel receive and send buffer size the adapter asks for, in bytes.
///
/// Defaults (208 KiB on Linux) overflow when a LAN transfer's congestion window outgrows
/// them, and every overflow is a loss the congestion controller backs off from. ENet asks
/// for 256 KiB; a larger buffer lets the window grow further between losses. The kernel
/// may grant less (Linux caps it at `net.core.rmem_max` and `wmem_max`) or refuse it, and
/// the adapter then keeps what it has.
pub const SOCKET_BUFFER: usize = 1 << 20;

/// Socket-level counters of the adapter (the protocol's are in
/// [`porous_proto::Host::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketStats {
    /// Datagrams received from the socket.
    pub received: u64,
    /// Datagrams handed to the socket.
    pub sent: u64,
    /// Sends that hit `WouldBlock` and were kept for later.
    pub would_block: u64,
    /// Datagrams the socket refused with another error (counted, then dropped: the
    /// protocol recovers them like any loss).
    pub send_errors: u64,
    /// Receive errors other than `WouldBlock` (such as an ICMP "port unreachable" some
    /// systems report on UDP sockets).
    pub recv_errors: u64,
}

/// A POROUS host on a mio UDP socket. See the [crate docs](crate).
pub struct Host {
    core: porous_proto::Host,
    socket: UdpSocket,
    /// Our own poll, in standalone mode.
    poll: Option<(Poll, Events)>,
    /// Transmits the socket would not take yet, oldest first.
    blocked: VecDeque<Transmit>,
    buf: Box<[u8]>,
    local: SocketAddr,
    stats: SocketStats,
}

impl core::fmt::Debug for Host {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Host")
            .field("local", &self.local)
            .field("standalone", &self.poll.is_some())
            .field("blocked", &self.blocked.len())
            .field("core", &self.core)
            .field("stats", &self.stats)
            .finish()
    }
}

/// A non-blocking socket bound to `addr`, with buffers of [`SOCKET_BUFFER`] where the
/// kernel grants them.
fn bind_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(addr)?;
    let options = socket2::SockRef::from(&socket);
    // Best effort: a refusal leaves the default, which works, only with more losses.
    let _ = options.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = options.set_send_buffer_size(SOCKET_BUFFER);
    Ok(socket)
}

fn config_error(e: porous_proto::ConfigError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

impl Host {
    fn new(socket: UdpSocket, config: HostConfig, poll: Option<(Poll, Events)>) -> io::Result<Self> {
        let rng = rand_core::UnwrapErr(getrandom::SysRng);
        let core = porous_proto::Host::new(config, rng).map_err(config_error)?;
        let local = socket.local_addr()?;
        Ok(Self {
            core,
            socket,
            poll,
            blocked: VecDeque::new(),
            buf: vec![0; MAX_DATAGRAM].into_boxed_slice(),
            local,
            stats: SocketStats::default(),
        })
    }

    /// A standalone host on a socket bound to `addr` (port 0 picks a free one), driven by
    /// [`Host::service`].
    pub fn bind(addr: SocketAddr, config: HostConfig) -> io::Result<Self> {
        let mut socket = bind_socket(addr)?;
        let poll = Poll::new()?;
        poll.registry().register(&mut socket, OWN_TOKEN, Interest::READABLE | Interest::WRITABLE)?;
        Self::new(socket, config, Some((poll, Events::with_capacity(64))))
    }

    /// A host on a socket bound to `addr`, registered with `registry` under `token` for your
    /// own event loop: call [`Host::process`] when `token` is ready or [`Host::timeout`]
    /// has passed.
    pub fn bind_with(addr: SocketAddr, config: HostConfig, registry: &Registry, token: Token) -> io::Result<Self> {
        let mut socket = bind_socket(addr)?;
        registry.register(&mut socket, token, Interest::READABLE | Interest::WRITABLE)?;
        Self::new(socket, config, None)
    }

    /// The socket's receive and send buffer sizes as the kernel granted them (see
    /// [`SOCKET_BUFFER`]; Linux reports twice the size asked for, its bookkeeping included).
    pub fn socket_buffers(&self) -> io::Result<(usize, usize)> {
        let options = socket2::SockRef::from(&self.socket);
        Ok((options.recv_buffer_size()?, options.send_buffer_size()?))
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The protocol core, to read (stats, configuration, peers).
    pub fn core(&self) -> &porous_proto::Host {
        &self.core
    }

    /// The protocol core, for calls this adapter does not wrap. Call [`Host::process`]
    /// afterwards so anything it queued is sent.
    pub fn core_mut(&mut self) -> &mut porous_proto::Host {
        &mut self.core
    }

    /// Socket-level counters.
    pub fn socket_stats(&self) -> SocketStats {
        self.stats
    }

    /// Starts connecting to `remote`; `Connected` or `Disconnected` follows for the id.
    pub fn connect(&mut self, remote: SocketAddr) -> Result<PeerId, ConnectError> {
        self.core.connect(Instant::now(), remote)
    }

    /// Queues a packet; it leaves at the next [`Host::process`] or [`Host::service`].
    pub fn send(&mut self, peer: PeerId, channel: usize, data: Bytes, mode: SendMode) -> Result<(), SendError> {
        self.core.send(peer, channel, data, mode)
    }

    /// Disconnects gracefully (pending packets first); `Disconnected` follows.
    pub fn disconnect(&mut self, peer: PeerId) {
        self.core.disconnect(Instant::now(), peer);
    }

    /// Disconnects at once; `Disconnected` is queued now.
    pub fn disconnect_now(&mut self, peer: PeerId) {
        self.core.disconnect_now(Instant::now(), peer);
    }

    /// A snapshot of a peer's state and counters.
    pub fn peer_stats(&self, peer: PeerId) -> Option<PeerStats> {
        self.core.peer_stats(peer)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.core.poll_event()
    }

    /// How long until [`Host::process`] must run again (for your poll's timeout); `None`
    /// when only a datagram can give it work.
    pub fn timeout(&self) -> Option<Duration> {
        if !self.blocked.is_empty() {
            // Waiting for writability; the readiness event will come, but keep time moving.
            return Some(Duration::from_millis(1));
        }
        self.core.poll_timeout().map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Does all the host's work now: reads every datagram the socket holds, steps the
    /// core, and sends everything it produced (keeping what would block).
    pub fn process(&mut self) -> io::Result<()> {
        self.receive();
        self.core.step(Instant::now());
        self.transmit();
        Ok(())
    }

    fn receive(&mut self) {
        loop {
            match self.socket.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    self.stats.received += 1;
                    let datagram = self.buf.get(..n).unwrap_or_default();
                    self.core.handle_datagram(Instant::now(), from, datagram);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.stats.recv_errors += 1,
            }
        }
    }

    fn transmit(&mut self) {
        // Oldest first: what was held back, then what the core just produced.
        while let Some(t) = self.blocked.pop_front().or_else(|| self.core.poll_transmit()) {
            match self.socket.send_to(&t.payload, t.remote) {
                Ok(_) => self.stats.sent += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stats.would_block += 1;
                    self.blocked.push_front(t);
                    // Keep the rest in order behind it.
                    while let Some(t) = self.core.poll_transmit() {
                        self.blocked.push_back(t);
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.blocked.push_front(t),
                Err(_) => self.stats.send_errors += 1,
            }
        }
    }

    /// Standalone mode: returns the next event, waiting for up to `timeout` for one while
    /// doing the host's work. `Ok(None)` when the timeout passed without an event; an
    /// error if the host was made with [`Host::bind_with`] (drive it with
    /// [`Host::process`] instead).
    pub fn service(&mut self, timeout: Duration) -> io::Result<Option<Event>> {
        if self.poll.is_none() {
            return Err(io::Error::other("service() needs a host made with Host::bind"));
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.core.poll_event() {
                return Ok(Some(e));
            }
            self.process()?;
            if let Some(e) = self.core.poll_event() {
                return Ok(Some(e));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wait = self.timeout().map_or(deadline - now, |t| t.min(deadline - now));
            let Some((poll, events)) = self.poll.as_mut() else {
                return Err(io::Error::other("service() needs a host made with Host::bind"));
            };
            match poll.poll(events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}
