//! POROUS for browsers: a WebTransport server that feeds each session's datagrams to the
//! same POROUS host as its UDP socket.
//!
//! A browser cannot send UDP; it can open a WebTransport session (HTTP/3 over QUIC) and
//! send datagrams on it. [`WebTransport::serve`] accepts sessions on a UDP port of its own
//! and attaches them to a `porous_async::Host` (`porous_tokio::Host::as_async`) through
//! [`porous_async::transport`]: each session is one remote of that host, known by an
//! address of the session range ([`WebTransport::owns`]), and its connection is a peer like
//! any other: it comes out of `accept()`, is listed by `peers()`, sends and receives on the
//! same channels with the same modes and guarantees. One server, UDP clients and browser
//! clients side by side, one set of peers and events.
//!
//! - A session's maximum datagram size (QUIC datagrams are smaller than UDP's) is its
//!   connection's datagram size (`porous_proto::Host::set_path_mtu`).
//! - A session that closes (the tab closed, the network went away, the QUIC connection
//!   timed out) ends its connection with `DisconnectReason::TransportClosed`; a connection
//!   that ends closes its session a moment later ([`WebTransportConfig::close_grace`]), so
//!   the last datagrams of a graceful disconnection get out first.
//! - A session that sends no valid POROUS handshake within
//!   [`WebTransportConfig::handshake_timeout`] is closed; sessions beyond
//!   [`WebTransportConfig::max_sessions`] are refused (HTTP 429); the datagrams waiting for
//!   the driver are bounded in all ([`QUEUE`]) and per session ([`SESSION_QUEUE`]), the rest
//!   dropped and counted ([`WebTransportStats`]).
//!
//! The browser side is `porous-web`. Certificates: [`Certificate::self_signed`] for
//! development (ECDSA P-256, valid 14 days, accepted by a browser through the
//! `serverCertificateHashes` option with [`Certificate::hashes`]), and
//! [`Certificate::from_pem_files`] for a certificate a browser trusts.
//!
//! ```no_run
//! use porous_webtransport::{Certificate, WebTransport, WebTransportConfig};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // UDP clients at 7777, browsers at 4433, one host.
//! let host = porous_tokio::Host::bind("0.0.0.0:7777", porous_tokio::HostConfig::default()).await?;
//! let certificate = Certificate::self_signed(["localhost", "127.0.0.1"])?;
//! println!("serverCertificateHashes: {}", certificate.hashes_hex().join(","));
//! let web = WebTransport::serve(host.as_async(), "0.0.0.0:4433".parse()?, certificate, WebTransportConfig::default()).await?;
//! loop {
//!     let peer = host.accept().await?; // a UDP client or a browser
//!     println!("{} from {:?}", peer.id(), web.session_remote(peer.remote()));
//! }
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod certificate;
mod session;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use porous_async::transport::{Arrival, PeerChange, Transport};

pub use certificate::Certificate;
use session::Control;

/// Datagrams of all sessions waiting for the POROUS driver; beyond it they are dropped
/// ([`WebTransportStats::datagrams_dropped`]). At 1,200 bytes, 5 MiB.
pub const QUEUE: usize = 4096;

/// Datagrams of one session waiting for the POROUS driver, so that one flooding session
/// cannot take the whole [`QUEUE`].
pub const SESSION_QUEUE: usize = 256;

/// The first 16 bits of every session address: `100::/16`, inside the discard-only
/// prefix `100::/64` (RFC 6666), which no real UDP datagram comes from.
const SESSION_PREFIX: u16 = 0x0100;

/// Distinguishes the session addresses of two servers in one process.
static INSTANCES: AtomicU16 = AtomicU16::new(0);

/// Settings of a [`WebTransport`] server.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebTransportConfig {
    /// Sessions open at once, in their handshake or connected; more are refused with HTTP
    /// 429 (`Too Many Requests`). Default 1,024.
    pub max_sessions: usize,
    /// How long a session may take to complete its POROUS handshake before it is closed.
    /// Default 10 s (the core's connect timeout is 5 s).
    pub handshake_timeout: Duration,
    /// How long a session stays open after its connection ended, so that the last
    /// datagrams (a disconnection's acknowledgement) reach the browser. Default 1 s.
    pub close_grace: Duration,
    /// The URL path sessions must ask for (`"/porous"`); `None`, the default, takes any.
    pub path: Option<String>,
    /// QUIC's idle timeout: a session silent for this long closes (POROUS pings every
    /// 500 ms, so only a browser gone quiet hits it; the POROUS timeout, 10 s by default,
    /// usually ends the connection first). Default 30 s.
    pub idle_timeout: Duration,
}

impl Default for WebTransportConfig {
    fn default() -> Self {
        Self {
            max_sessions: 1024,
            handshake_timeout: Duration::from_secs(10),
            close_grace: Duration::from_secs(1),
            path: None,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// Counters of a [`WebTransport`] server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebTransportStats {
    /// Sessions accepted.
    pub sessions_accepted: u64,
    /// Sessions open now.
    pub sessions_open: usize,
    /// Sessions refused: the server was full, the path was not the configured one, or the
    /// browser does not do datagrams.
    pub sessions_refused: u64,
    /// Connections (QUIC or WebTransport handshakes) that failed before a session.
    pub handshakes_failed: u64,
    /// Sessions closed because they completed no POROUS handshake in time.
    pub handshake_timeouts: u64,
    /// Sessions that closed from the browser's side (or timed out in QUIC) while their
    /// POROUS connection was still up: a tab closed, a browser gone.
    pub closed_by_remote: u64,
    /// Datagrams received from sessions.
    pub datagrams_received: u64,
    /// Datagrams dropped because the queue to the driver was full.
    pub datagrams_dropped: u64,
    /// Datagrams sent to sessions.
    pub datagrams_sent: u64,
    /// Datagrams QUIC would not send (the session was closing).
    pub send_errors: u64,
}

/// A WebTransport server feeding a POROUS host; see the [crate docs](crate). Cheap to
/// clone. It serves until [`WebTransport::close`] or until the host's driver stops.
#[derive(Clone)]
pub struct WebTransport {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    hashes: Vec<[u8; 32]>,
    endpoint: Arc<wtransport::Endpoint<wtransport::endpoint::endpoint_side::Server>>,
}

impl fmt::Debug for WebTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebTransport").field("local_addr", &self.local_addr).field("stats", &self.stats()).finish()
    }
}

/// Why [`WebTransport::serve`] or a [`Certificate`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The UDP socket could not be bound, or a certificate file read.
    Io(io::Error),
    /// The certificate or key is unusable.
    Certificate(String),
    /// [`WebTransport::serve`] was called outside a tokio runtime.
    NoRuntime,
    /// The host's driver has stopped: there is nothing to attach to.
    HostStopped,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "WebTransport socket or certificate file: {e}"),
            Self::Certificate(e) => write!(f, "unusable certificate: {e}"),
            Self::NoRuntime => f.write_str("porous-webtransport needs a tokio runtime"),
            Self::HostStopped => f.write_str("the POROUS host's driver has stopped"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::Certificate(_) | Self::NoRuntime | Self::HostStopped => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl WebTransport {
    /// Binds a UDP socket at `addr` for WebTransport (HTTP/3 over QUIC), with
    /// `certificate`, and attaches its sessions to `host`: each session a remote of the
    /// host, its connection a peer like the UDP ones. Needs a tokio runtime (its tasks run
    /// there). Port 0 picks a free one ([`WebTransport::local_addr`]). Fails with
    /// [`Error::HostStopped`] if the host's driver has stopped.
    pub async fn serve(
        host: &porous_async::Host,
        addr: SocketAddr,
        certificate: Certificate,
        config: WebTransportConfig,
    ) -> Result<Self, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let hashes = certificate.hashes();
        let server_config = wtransport::ServerConfig::builder()
            .with_bind_address(addr)
            .with_identity(certificate.into_identity())
            .max_idle_timeout(Some(config.idle_timeout))
            .map_err(|_| Error::Io(io::Error::new(io::ErrorKind::InvalidInput, "idle timeout out of range")))?
            .build();
        let endpoint = Arc::new({
            let _inside = runtime.enter();
            wtransport::Endpoint::server(server_config)?
        });
        let local_addr = endpoint.local_addr()?;
        let tag = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(Shared::new(tag, config));
        let link = Link { shared: Arc::clone(&shared), taken: VecDeque::new() };
        host.attach(Box::new(link)).await.map_err(|_| Error::HostStopped)?;
        runtime.spawn(session::accept_loop(Arc::clone(&endpoint), Arc::clone(&shared)));
        Ok(Self { shared, local_addr, hashes, endpoint })
    }

    /// The UDP address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// SHA-256 of each certificate of the chain: what a browser's `serverCertificateHashes`
    /// option takes for a self-signed certificate.
    pub fn certificate_hashes(&self) -> &[[u8; 32]] {
        &self.hashes
    }

    /// Whether `addr` is a session's address (a peer of the host that is a browser).
    pub fn owns(&self, addr: SocketAddr) -> bool {
        self.shared.owns(addr)
    }

    /// The browser's own UDP address for the session a peer's remote address names, while
    /// the session is open.
    pub fn session_remote(&self, addr: SocketAddr) -> Option<SocketAddr> {
        self.shared.lock().sessions.get(&addr).map(|s| s.connection.remote_address())
    }

    /// The server's counters.
    pub fn stats(&self) -> WebTransportStats {
        let mut s = self.shared.counters.snapshot();
        s.sessions_open = self.shared.lock().sessions.len();
        s
    }

    /// Stops accepting sessions and closes every open one (their connections end with
    /// `DisconnectReason::TransportClosed`).
    pub fn close(&self) {
        self.shared.close();
        self.endpoint.close(wtransport::VarInt::from_u32(0), b"server closed");
    }
}

/// What the server's tasks and the transport the driver holds share.
struct Shared {
    /// The middle 16 bits of this server's session addresses.
    tag: u16,
    config: WebTransportConfig,
    state: Mutex<State>,
    counters: Counters,
    next_session: AtomicU64,
}

/// Under the lock: the sessions and what waits for the driver.
#[derive(Default)]
struct State {
    sessions: HashMap<SocketAddr, Entry>,
    /// Oldest first; at most [`QUEUE`] datagrams (plus one opening and one closing per
    /// session).
    arrivals: VecDeque<Owned>,
    /// Datagrams in `arrivals`.
    datagrams: usize,
    /// The driver's waker, when it found nothing to do.
    waker: Option<Waker>,
    /// No more sessions: the server or the host was closed.
    closed: bool,
}

/// One open session.
struct Entry {
    connection: wtransport::Connection,
    control: Arc<Control>,
    /// Its datagrams in `State::arrivals`.
    queued: usize,
}

/// An arrival as it waits in the queue.
enum Owned {
    Opened { remote: SocketAddr, mtu: usize },
    Datagram { from: SocketAddr, data: Bytes },
    Closed { remote: SocketAddr },
}

#[derive(Default)]
struct Counters {
    sessions_accepted: AtomicU64,
    sessions_refused: AtomicU64,
    handshakes_failed: AtomicU64,
    handshake_timeouts: AtomicU64,
    closed_by_remote: AtomicU64,
    datagrams_received: AtomicU64,
    datagrams_dropped: AtomicU64,
    datagrams_sent: AtomicU64,
    send_errors: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> WebTransportStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WebTransportStats {
            sessions_accepted: get(&self.sessions_accepted),
            sessions_open: 0,
            sessions_refused: get(&self.sessions_refused),
            handshakes_failed: get(&self.handshakes_failed),
            handshake_timeouts: get(&self.handshake_timeouts),
            closed_by_remote: get(&self.closed_by_remote),
            datagrams_received: get(&self.datagrams_received),
            datagrams_dropped: get(&self.datagrams_dropped),
            datagrams_sent: get(&self.datagrams_sent),
            send_errors: get(&self.send_errors),
        }
    }
}

impl Shared {
    fn new(tag: u16, config: WebTransportConfig) -> Self {
        Self { tag, config, state: Mutex::default(), counters: Counters::default(), next_session: AtomicU64::new(1) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn owns(&self, addr: SocketAddr) -> bool {
        match addr {
            SocketAddr::V6(a) => {
                let s = a.ip().segments();
                s[0] == SESSION_PREFIX && s[1] == 0 && s[2] == 0 && s[3] == self.tag
            }
            SocketAddr::V4(_) => false,
        }
    }

    /// A fresh session address: never reused, so a late datagram of a closed session can
    /// reach no other.
    fn new_address(&self) -> SocketAddr {
        let n = self.next_session.fetch_add(1, Ordering::Relaxed);
        let [a, b, c, d] = [(n >> 48) as u16, (n >> 32) as u16, (n >> 16) as u16, n as u16];
        let ip = Ipv6Addr::new(SESSION_PREFIX, 0, 0, self.tag, a, b, c, d);
        SocketAddr::V6(SocketAddrV6::new(ip, 443, 0, 0))
    }

    /// Registers a session and queues its opening; `None` if the server is full or closed.
    fn open(&self, connection: &wtransport::Connection, mtu: usize) -> Option<(SocketAddr, Arc<Control>)> {
        let mut state = self.lock();
        if state.closed || state.sessions.len() >= self.config.max_sessions {
            return None;
        }
        let remote = self.new_address();
        let control = Arc::new(Control::default());
        state
            .sessions
            .insert(remote, Entry { connection: connection.clone(), control: Arc::clone(&control), queued: 0 });
        state.arrivals.push_back(Owned::Opened { remote, mtu });
        wake(&mut state);
        Some((remote, control))
    }

    /// Queues a datagram of session `from`, or drops it if a queue is full.
    fn received(&self, from: SocketAddr, data: Bytes) {
        Counters::add(&self.counters.datagrams_received);
        let mut state = self.lock();
        let total = state.datagrams;
        let Some(entry) = state.sessions.get_mut(&from) else { return };
        if total >= QUEUE || entry.queued >= SESSION_QUEUE {
            drop(state);
            Counters::add(&self.counters.datagrams_dropped);
            return;
        }
        entry.queued += 1;
        state.datagrams += 1;
        state.arrivals.push_back(Owned::Datagram { from, data });
        wake(&mut state);
    }

    /// Session `remote` has closed: forget it and queue its closing.
    fn closed(&self, remote: SocketAddr) {
        let mut state = self.lock();
        if state.sessions.remove(&remote).is_some() {
            state.arrivals.push_back(Owned::Closed { remote });
            wake(&mut state);
        }
    }

    /// No more sessions; closes the open ones.
    fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        for entry in state.sessions.values() {
            entry.connection.close(wtransport::VarInt::from_u32(0), b"server closed");
        }
    }
}

fn wake(state: &mut State) {
    if let Some(waker) = state.waker.take() {
        waker.wake();
    }
}

/// The transport the POROUS driver holds.
struct Link {
    shared: Arc<Shared>,
    /// Arrivals taken from the queue in one go, handed over outside the lock.
    taken: VecDeque<Owned>,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("porous_webtransport::Link").field("tag", &self.shared.tag).finish_non_exhaustive()
    }
}

impl Transport for Link {
    fn owns(&self, addr: SocketAddr) -> bool {
        self.shared.owns(addr)
    }

    fn poll_arrivals(&mut self, cx: &mut Context<'_>, report: &mut dyn FnMut(Arrival<'_>)) -> Poll<()> {
        {
            let mut state = self.shared.lock();
            if state.arrivals.is_empty() {
                state.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            std::mem::swap(&mut state.arrivals, &mut self.taken);
            state.datagrams = 0;
            for entry in state.sessions.values_mut() {
                entry.queued = 0;
            }
        }
        for arrival in self.taken.drain(..) {
            match arrival {
                Owned::Opened { remote, mtu } => report(Arrival::Opened { remote, mtu }),
                Owned::Datagram { from, data } => report(Arrival::Datagram { from, data: &data }),
                Owned::Closed { remote } => report(Arrival::Closed { remote }),
            }
        }
        Poll::Ready(())
    }

    fn send(&mut self, to: SocketAddr, datagram: Bytes) {
        let connection = self.shared.lock().sessions.get(&to).map(|e| e.connection.clone());
        let Some(connection) = connection else { return };
        match connection.send_datagram(&datagram) {
            Ok(()) => Counters::add(&self.shared.counters.datagrams_sent),
            Err(_) => Counters::add(&self.shared.counters.send_errors),
        }
    }

    fn peer(&mut self, remote: SocketAddr, change: PeerChange) {
        let control = self.shared.lock().sessions.get(&remote).map(|e| Arc::clone(&e.control));
        if let Some(control) = control {
            control.change(change);
        }
    }
}

impl Drop for Link {
    /// The host's driver has stopped: no one reads the sessions any more.
    fn drop(&mut self) {
        self.shared.close();
    }
}
