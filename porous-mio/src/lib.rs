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
//! [`Host::process`] is two calls in one, also offered apart: [`Host::receive`] drains the
//! socket and feeds every datagram to the core with the current time, and sends nothing;
//! [`Host::flush`] steps the core ([`porous_proto::Host::step`]) and sends what it
//! produced. A datagram the socket refuses with `WouldBlock` is kept, in order, for the
//! next writable event; the adapter drops nothing. The core's randomness comes from the
//! operating system.
//!
//! Receiving and sending are batched ([`porous_udp`]): one system call reads up to 32
//! buffers (`recvmmsg`), each holding up to 64 datagrams where the kernel has UDP GRO, and
//! consecutive equal-size datagrams to one peer leave in one UDP GSO send. Kernels without
//! these get one datagram per call, silently; [`Host::set_batching`] forces that.
//!
//! ```no_run
//! use std::time::Duration;
//! use porous_mio::{Event, Host, HostConfig, SendMode};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut server = Host::bind("127.0.0.1:7777", HostConfig::default())?;
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
//!
//! # A fixed-tick game loop
//!
//! A game that reads the network, simulates, then sends, once per tick, calls
//! [`Host::receive`] at the start of the tick and [`Host::flush`] at its end. Everything
//! the tick queued (its packets to a peer and the acknowledgements of what arrived) then
//! leaves in the same datagram, sent at once rather than a tick later. Calling
//! [`Host::process`] at both ends instead sends twice per tick: the acknowledgements
//! alone at the start, the packets at the end.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use porous_mio::{Bytes, Event, Host, HostConfig, PeerId, SendMode};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut server = Host::bind("127.0.0.1:0", HostConfig::default())?;
//! let mut client = Host::bind("127.0.0.1:0", HostConfig::default())?;
//! let to_server = client.connect(server.local_addr())?;
//! let (mut connected, mut players) = (false, Vec::<PeerId>::new());
//! let (mut inputs, mut snapshots) = (0, 0);
//!
//! let tick = Duration::from_secs(1) / 60;
//! let mut next_tick = Instant::now();
//! for frame in 0..45u32 {
//!     // 1. Read the network. Nothing is sent here.
//!     server.receive()?;
//!     client.receive()?;
//!
//!     // 2. Simulate: handle what arrived, queue this tick's packets.
//!     while let Some(event) = server.poll_event() {
//!         match event {
//!             Event::Connected { peer, .. } => players.push(peer),
//!             Event::Received { .. } => inputs += 1,
//!             _ => {}
//!         }
//!     }
//!     while let Some(event) = client.poll_event() {
//!         match event {
//!             Event::Connected { .. } => connected = true,
//!             Event::Received { .. } => snapshots += 1,
//!             _ => {}
//!         }
//!     }
//!     if connected {
//!         let input = Bytes::from(frame.to_le_bytes().to_vec());
//!         client.send(to_server, 0, input, SendMode::Reliable)?;
//!     }
//!     for &player in &players {
//!         let snapshot = Bytes::from(vec![frame as u8; 200]);
//!         server.send(player, 1, snapshot, SendMode::Unreliable)?;
//!     }
//!
//!     // 3. Send: one flush per tick, so each peer gets the tick in one datagram.
//!     server.flush()?;
//!     client.flush()?;
//!
//!     next_tick += tick;
//!     std::thread::sleep(next_tick.saturating_duration_since(Instant::now()));
//! }
//! assert!(inputs > 0 && snapshots > 0);
//! # Ok(())
//! # }
//! ```
//!
//! # Connect data, admission and disconnect codes
//!
//! A client can send up to 256 bytes with its request ([`Host::connect_with`]: a version,
//! a login ticket); the server reads them in [`Event::Connected`]. By default the server
//! admits every compatible request itself. With [`HostConfig::manual_accept`] it reports
//! each as [`Event::ConnectRequest`] first and answers nothing until the application calls
//! [`Host::accept`] or [`Host::reject`] (the client then gets
//! [`DisconnectReason::Rejected`] with the code). [`Host::disconnect_with`] ends a
//! connection with a code the other side reads in [`DisconnectReason::Remote`].
//!
//! ```no_run
//! use std::time::Duration;
//! use porous_mio::{DisconnectReason, Event, Host, HostConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = HostConfig::default();
//! config.manual_accept = true;
//! let mut server = Host::bind("0.0.0.0:7777", config)?;
//! // On the client: `client.connect_with(server_addr, b"v1 ticket:8f3a")?`.
//! loop {
//!     match server.service(Duration::from_millis(100))? {
//!         Some(Event::ConnectRequest { peer, data, .. }) if data.starts_with(b"v1 ") => server.accept(peer)?,
//!         // The client's attempt ends with `DisconnectReason::Rejected { code: 426 }`.
//!         Some(Event::ConnectRequest { peer, .. }) => server.reject(peer, 426)?,
//!         Some(Event::Connected { peer, data, .. }) => println!("{peer} joined with {data:?}"),
//!         // A kick: the client reads `DisconnectReason::Remote { code: 7 }`.
//!         Some(Event::Received { peer, data, .. }) if &data[..] == b"cheat" => server.disconnect_with(peer, 7),
//!         Some(Event::Disconnected { reason: DisconnectReason::Remote { code, .. }, .. }) => {
//!             println!("a player left with code {code}");
//!         }
//!         _ => {}
//!     }
//! }
//! # }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Registry, Token};
use porous_udp::{AsSocketRef, RecvBackoff, UdpIo};

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

/// The token the socket is registered under in standalone mode.
const OWN_TOKEN: Token = Token(0);

/// A POROUS host on a mio UDP socket. See the [crate docs](crate).
pub struct Host {
    core: porous_proto::Host,
    socket: UdpSocket,
    /// Our own poll, in standalone mode.
    poll: Option<(Poll, Events)>,
    /// Receive buffers and the datagrams the socket would not take yet, oldest first.
    io: UdpIo,
    backoff: RecvBackoff,
    local: SocketAddr,
}

impl core::fmt::Debug for Host {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Host")
            .field("local", &self.local)
            .field("standalone", &self.poll.is_some())
            .field("io", &self.io)
            .field("core", &self.core)
            .finish()
    }
}

fn config_error(e: ConfigError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

impl Host {
    /// A host on `socket`, which [`porous_udp::bind`] or [`porous_udp::adopt`] prepared.
    fn new(
        socket: std::net::UdpSocket,
        mut config: HostConfig,
        registry: Option<(&Registry, Token)>,
    ) -> io::Result<Self> {
        let local = socket.local_addr()?;
        porous_udp::learn_public_address(&mut config, local);
        let rng = rand_core::UnwrapErr(getrandom::SysRng);
        let core = porous_proto::Host::new(config, rng).map_err(config_error)?;
        let mut socket = UdpSocket::from_std(socket);
        let io = UdpIo::new(&socket, Batching::default())?;
        let poll = match registry {
            Some((registry, token)) => {
                registry.register(&mut socket, token, Interest::READABLE | Interest::WRITABLE)?;
                None
            }
            None => {
                let poll = Poll::new()?;
                poll.registry().register(&mut socket, OWN_TOKEN, Interest::READABLE | Interest::WRITABLE)?;
                Some((poll, Events::with_capacity(64)))
            }
        };
        Ok(Self { core, socket, poll, io, backoff: RecvBackoff::new(), local })
    }

    /// A standalone host on a socket bound to `addr` (port 0 picks a free one; a name is
    /// resolved with the system resolver and the first address that binds is used), driven
    /// by [`Host::service`].
    ///
    /// A secure server ([`SecureConfig::server`]) may leave its public addresses empty:
    /// bound to a specific address (such as `127.0.0.1:0`), it takes the bound address
    /// with the port the system picked; otherwise tell it with
    /// [`Host::set_public_addresses`].
    pub fn bind(addr: impl ToSocketAddrs, config: HostConfig) -> io::Result<Self> {
        config.validate().map_err(config_error)?;
        Self::new(porous_udp::bind(addr)?, config, None)
    }

    /// A standalone host, driven by [`Host::service`], on a socket you bound yourself
    /// (with options of your own, or handed over by a supervisor or a test). It is made
    /// non-blocking and asked for buffers of at least [`SOCKET_BUFFER`] bytes, as
    /// [`Host::bind`]'s own; an empty list of public addresses of a secure server is
    /// learnt from its address as there.
    ///
    /// ```
    /// use porous_mio::{Host, HostConfig};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// let address = socket.local_addr()?;
    /// let host = Host::from_std(socket, HostConfig::default())?;
    /// assert_eq!(host.local_addr(), address);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_std(socket: std::net::UdpSocket, config: HostConfig) -> io::Result<Self> {
        config.validate().map_err(config_error)?;
        Self::new(porous_udp::adopt(socket)?, config, None)
    }

    /// [`Host::from_std`] for your own event loop: the socket is registered with
    /// `registry` under `token`, as [`Host::bind_with`] does.
    pub fn from_std_with(
        socket: std::net::UdpSocket,
        config: HostConfig,
        registry: &Registry,
        token: Token,
    ) -> io::Result<Self> {
        config.validate().map_err(config_error)?;
        Self::new(porous_udp::adopt(socket)?, config, Some((registry, token)))
    }

    /// A host on a socket bound to `addr`, registered with `registry` under `token` for your
    /// own event loop: call [`Host::process`] when `token` is ready or [`Host::timeout`]
    /// has passed.
    pub fn bind_with(
        addr: impl ToSocketAddrs,
        config: HostConfig,
        registry: &Registry,
        token: Token,
    ) -> io::Result<Self> {
        config.validate().map_err(config_error)?;
        Self::new(porous_udp::bind(addr)?, config, Some((registry, token)))
    }

    /// The socket's receive and send buffer sizes as the kernel granted them (see
    /// [`SOCKET_BUFFER`]; Linux reports twice the size asked for, its bookkeeping included).
    pub fn socket_buffers(&self) -> io::Result<(usize, usize)> {
        porous_udp::socket_buffers(&self.socket)
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Secure mode, on a server: the addresses connect tokens name it by, from now on; for
    /// a server reached through a load balancer or a NAT, or bound to an unspecified
    /// address. See [`porous_proto::Host::set_public_addresses`].
    pub fn set_public_addresses(&mut self, addresses: Vec<SocketAddr>) -> Result<(), ConfigError> {
        self.core.set_public_addresses(addresses)
    }

    /// The protocol core, to read (stats, configuration, peers).
    pub fn core(&self) -> &porous_proto::Host {
        &self.core
    }

    /// The protocol core, for calls this adapter does not wrap. Call [`Host::flush`] (or
    /// [`Host::process`]) afterwards so anything it queued is sent.
    pub fn core_mut(&mut self) -> &mut porous_proto::Host {
        &mut self.core
    }

    /// Socket-level counters.
    pub fn socket_stats(&self) -> SocketStats {
        self.io.stats()
    }

    /// The batching in use (by default all the kernel offers).
    pub fn batching(&self) -> Batching {
        self.io.batching()
    }

    /// Changes the batching: [`Batching::NONE`] makes one system call per datagram, as on a
    /// kernel without `recvmmsg`, GSO and GRO. For tests, comparisons, and systems where an
    /// offload misbehaves.
    pub fn set_batching(&mut self, batching: Batching) {
        self.io.set_batching(batching);
    }

    /// Makes the socket fail on purpose from the next call on (feature
    /// `fault-injection`), to test how an application copes; [`Faults::NONE`] ends it.
    #[cfg(feature = "fault-injection")]
    pub fn inject_faults(&mut self, faults: Faults) {
        self.io.inject(faults);
    }

    /// Starts connecting to `remote`; `Connected` or `Disconnected` follows for the id.
    /// Sends no connect data: [`Host::connect_with`] does.
    pub fn connect(&mut self, remote: SocketAddr) -> Result<PeerId, ConnectError> {
        self.core.connect(Instant::now(), remote)
    }

    /// Starts connecting to `remote` with connect data (a version, a login ticket): up to
    /// [`proto::wire::MAX_CONNECT_DATA`] bytes, fewer at a small `mtu`
    /// ([`PeerConfig::max_connect_data`]), else [`ConnectError::DataTooLarge`]. The
    /// remote's application reads it in [`Event::ConnectRequest`] (if it decides on
    /// requests itself, [`HostConfig::manual_accept`]) and in [`Event::Connected`]. It
    /// only makes the request larger, never the replies; it is neither encrypted nor, until
    /// `Connected`, authenticated. See [`porous_proto::Host::connect_with`]. Plain mode
    /// only: in secure mode ([`HostConfig::secure`]) this fails with
    /// [`ConnectError::TokenRequired`], the connect data being the token's user data
    /// ([`Host::connect_with_token`]).
    ///
    /// If the remote rejects the request ([`Host::reject`]), `Disconnected` follows with
    /// [`DisconnectReason::Rejected`] and the remote's code.
    pub fn connect_with(&mut self, remote: SocketAddr, data: &[u8]) -> Result<PeerId, ConnectError> {
        self.core.connect_with(Instant::now(), remote, data)
    }

    /// Admits a connection request that [`Host::poll_event`] reported as
    /// [`Event::ConnectRequest`] (only with [`HostConfig::manual_accept`]; by default every
    /// compatible request is admitted without asking). The handshake goes on:
    /// `Connected` follows for `peer`, or `Disconnected` if the handshake does not
    /// complete within the connect timeout counted from the request's arrival. The answer
    /// leaves at the next [`Host::flush`].
    ///
    /// A request left undecided holds one pending handshake (`max_pending`) and ends with
    /// `Disconnected { reason: Timeout }` after the connect timeout.
    pub fn accept(&mut self, peer: PeerId) -> Result<(), AdmissionError> {
        self.core.accept(Instant::now(), peer)
    }

    /// Rejects a connection request reported as [`Event::ConnectRequest`]: the requester
    /// gets `Disconnected` with [`DisconnectReason::Rejected`] and `code`; here the peer is
    /// gone at once (`Disconnected { reason: Local }` is queued for it). The answer leaves
    /// at the next [`Host::flush`]. See [`porous_proto::Host::reject`].
    pub fn reject(&mut self, peer: PeerId, code: u32) -> Result<(), AdmissionError> {
        self.core.reject(Instant::now(), peer, code)
    }

    /// Secure mode ([`HostConfig::secure`]): starts connecting to `remote` with a connect
    /// token from the game's backend ([`token`]); see
    /// [`porous_proto::Host::connect_with_token`]. `Connected` or `Disconnected` follows
    /// for the id; a token the server refuses gets no answer, so the attempt ends with a
    /// timeout.
    pub fn connect_with_token(&mut self, remote: SocketAddr, token: &[u8]) -> Result<PeerId, ConnectError> {
        self.core.connect_with_token(Instant::now(), remote, token)
    }

    /// Queues a packet; it leaves at the next [`Host::flush`], [`Host::process`] or
    /// [`Host::service`]. `data` is anything that converts into [`Bytes`] without a copy
    /// (`Bytes`, `Vec<u8>`, `String`, `&'static [u8]`...), as everywhere in POROUS.
    pub fn send(
        &mut self,
        peer: PeerId,
        channel: usize,
        data: impl Into<Bytes>,
        mode: SendMode,
    ) -> Result<(), SendError> {
        self.core.send(peer, channel, data, mode)
    }

    /// Disconnects gracefully (pending packets first); `Disconnected` follows. The remote
    /// gets [`DisconnectReason::Remote`] with code 0.
    pub fn disconnect(&mut self, peer: PeerId) {
        self.core.disconnect(Instant::now(), peer);
    }

    /// [`Host::disconnect`] with an application code (ENet's disconnect data: kicked, match
    /// over, quit): the remote's application reads it in
    /// `Disconnected { reason: DisconnectReason::Remote { code } }`. The code is repeated
    /// until the remote acknowledges the disconnection. On a request awaiting the
    /// decision ([`Event::ConnectRequest`]) it is [`Host::reject`].
    pub fn disconnect_with(&mut self, peer: PeerId, code: u32) {
        self.core.disconnect_with(Instant::now(), peer, code);
    }

    /// Disconnects at once; `Disconnected` is queued now. The remote is told once, best
    /// effort, with code 0.
    pub fn disconnect_now(&mut self, peer: PeerId) {
        self.core.disconnect_now(Instant::now(), peer);
    }

    /// [`Host::disconnect_now`] with an application code for the remote, sent once, best
    /// effort (it arrives unless that one datagram is lost; the remote otherwise times
    /// out).
    pub fn disconnect_now_with(&mut self, peer: PeerId, code: u32) {
        self.core.disconnect_now_with(Instant::now(), peer, code);
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
        if self.io.pending() > 0 {
            // Waiting for writability; the readiness event will come, but keep time moving.
            return Some(Duration::from_millis(1));
        }
        let due = [self.core.poll_timeout(), self.backoff.resume_at()].into_iter().flatten().min()?;
        Some(due.saturating_duration_since(Instant::now()))
    }

    /// Does all the host's work now: [`Host::receive`], then [`Host::flush`].
    pub fn process(&mut self) -> io::Result<()> {
        self.receive()?;
        self.flush()
    }

    /// Reads every datagram the socket holds and feeds each to the core
    /// ([`porous_proto::Host::handle_datagram`]); then drain [`Host::poll_event`]. Sends
    /// nothing: what the datagrams call for (acknowledgements, handshake replies) leaves
    /// at the next [`Host::flush`], together with the packets queued meanwhile.
    ///
    /// A receive error (an ICMP report some systems surface on UDP sockets) is counted in
    /// [`SocketStats::recv_errors`] and skipped. If errors repeat, receiving pauses for a
    /// moment that grows up to 64 ms ([`porous_udp::RecvBackoff`]), and [`Host::timeout`]
    /// includes the moment to try again.
    pub fn receive(&mut self) -> io::Result<()> {
        loop {
            let now = Instant::now();
            if self.backoff.paused(now) {
                return Ok(());
            }
            match self.io.recv(self.socket.as_socket_ref()) {
                Ok(_) => {
                    self.backoff.ok();
                    for (from, datagram) in self.io.received() {
                        self.core.handle_datagram(now, from, datagram);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.backoff.ok();
                    return Ok(());
                }
                // Counted by `UdpIo`.
                Err(_) => self.backoff.error(now),
            }
        }
    }

    /// Steps the core ([`porous_proto::Host::step`]: timers, then everything queued is
    /// assembled into datagrams) and sends the datagrams, with any the socket held back
    /// before. This is the only call that sends.
    pub fn flush(&mut self) -> io::Result<()> {
        self.core.step(Instant::now());
        while let Some(t) = self.core.poll_transmit() {
            self.io.push(t);
        }
        // `WouldBlock` keeps the rest queued for the next writable event; other errors
        // are counted per destination and never returned.
        let _ = self.io.send(self.socket.as_socket_ref());
        Ok(())
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
