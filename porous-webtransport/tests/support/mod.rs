//! What the tests share: a server (a UDP host with a WebTransport server attached), a
//! native WebTransport client that runs the POROUS core over its session's datagrams (what
//! porous-web does in a browser), and a UDP relay that can go silent.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use porous_tokio::proto::{self, Event, PeerId};
use porous_tokio::{Host, HostConfig};
use porous_webtransport::{Certificate, WebTransport, WebTransportConfig};
use tokio::net::UdpSocket;
use tokio::time::{Instant, sleep_until, timeout};

pub const SEC: Duration = Duration::from_secs(1);

/// A POROUS server for UDP clients, with a WebTransport server attached to the same host.
pub struct Server {
    pub host: Host,
    pub web: WebTransport,
    pub hash: [u8; 32],
}

impl Server {
    pub async fn start(config: HostConfig, web: WebTransportConfig) -> Self {
        let host = Host::bind("127.0.0.1:0", config).await.expect("bind UDP");
        let certificate = Certificate::self_signed(["localhost", "127.0.0.1"]).expect("certificate");
        let hash = certificate.hashes()[0];
        let web = WebTransport::serve(host.as_async(), "127.0.0.1:0".parse().expect("address"), certificate, web)
            .await
            .expect("serve WebTransport");
        Self { host, web, hash }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/", self.web.local_addr().port())
    }
}

/// A WebTransport session to `url` whose certificate hashes to `hash`.
pub async fn session(url: &str, hash: [u8; 32]) -> wtransport::Connection {
    session_from(url, hash, "127.0.0.1:0".parse().expect("address")).await
}

/// [`session`], from a socket bound at `bind`.
pub async fn session_from(url: &str, hash: [u8; 32], bind: SocketAddr) -> wtransport::Connection {
    let config = wtransport::ClientConfig::builder()
        .with_bind_address(bind)
        .with_server_certificate_hashes([wtransport::tls::Sha256Digest::new(hash)])
        .build();
    let endpoint = wtransport::Endpoint::client(config).expect("client endpoint");
    timeout(10 * SEC, endpoint.connect(url)).await.expect("session in time").expect("session")
}

/// The POROUS core over one WebTransport session, driven by hand.
pub struct WtClient {
    pub core: proto::Host,
    pub conn: wtransport::Connection,
    pub server: SocketAddr,
    pub peer: PeerId,
    pub events: Vec<Event>,
    /// Bytes of the datagrams this side sent and received on the session.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// The session's datagram size when it opened, given to the core.
    pub mtu: usize,
}

/// The address the client's core knows the server by (any would do).
pub const SERVER: &str = "[100::1]:443";

impl WtClient {
    /// Opens a session and starts the POROUS handshake over it, with `data`.
    pub async fn connect(url: &str, hash: [u8; 32], config: HostConfig, data: &[u8]) -> Self {
        let conn = session(url, hash).await;
        Self::over(conn, config, data)
    }

    /// Starts the POROUS handshake over `conn`.
    pub fn over(conn: wtransport::Connection, config: HostConfig, data: &[u8]) -> Self {
        let server: SocketAddr = SERVER.parse().expect("address");
        Self::start(conn, config, server, |core, now| core.connect_with(now, server, data))
    }

    /// Starts a secure-mode handshake over `conn` with `token`, knowing the server by the
    /// token's first address (the session is the only path: any address of the token does).
    pub fn with_token(conn: wtransport::Connection, mut config: HostConfig, token: &[u8]) -> Self {
        let decoded = proto::token::ConnectToken::decode(token).expect("a token");
        let server = decoded.server_addresses()[0];
        config.secure = Some(proto::SecureConfig::client());
        Self::start(conn, config, server, |core, now| core.connect_with_token(now, server, token))
    }

    fn start(
        conn: wtransport::Connection,
        config: HostConfig,
        server: SocketAddr,
        connect: impl FnOnce(&mut proto::Host, std::time::Instant) -> Result<PeerId, proto::ConnectError>,
    ) -> Self {
        let mut core = proto::Host::from_entropy(config).expect("config");
        // As the server does: the size at QUIC's minimum path MTU.
        let path = usize::from(conn.quic_connection().stats().path.current_mtu);
        let mtu = conn.max_datagram_size().expect("datagrams") - (path - 1200);
        core.set_path_mtu(server, mtu).expect("datagram size");
        let peer = connect(&mut core, std::time::Instant::now()).expect("connect");
        Self { core, conn, server, peer, events: Vec::new(), bytes_sent: 0, bytes_received: 0, mtu }
    }

    fn flush(&mut self) {
        while let Some(t) = self.core.poll_transmit() {
            self.bytes_sent += t.payload.len() as u64;
            let _ = self.conn.send_datagram(&t.payload);
        }
        while let Some(e) = self.core.poll_event() {
            self.events.push(e);
        }
    }

    /// Runs the core until `done` holds or `limit` passes; whether it held.
    pub async fn drive_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let end = Instant::now() + limit;
        loop {
            self.core.step(std::time::Instant::now());
            self.flush();
            if done(self) {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            let wake = self
                .core
                .poll_timeout()
                .map_or(end, |t| Instant::from_std(t).max(now))
                .min(end)
                .min(now + Duration::from_millis(50));
            tokio::select! {
                d = self.conn.receive_datagram() => match d {
                    Ok(d) => {
                        self.bytes_received += d.payload().len() as u64;
                        self.core.handle_datagram(std::time::Instant::now(), self.server, &d.payload());
                    }
                    Err(_) => {
                        self.core.close_path(std::time::Instant::now(), self.server);
                        self.flush();
                        // Nothing more will arrive: only the core's timers are left.
                        sleep_until(wake).await;
                    }
                },
                () = sleep_until(wake) => {}
            }
        }
    }

    pub fn connected(&self) -> bool {
        self.events.iter().any(|e| matches!(e, Event::Connected { .. }))
    }

    pub fn ended(&self) -> Option<proto::DisconnectReason> {
        self.events.iter().find_map(|e| match e {
            Event::Disconnected { reason, .. } => Some(*reason),
            _ => None,
        })
    }

    /// Payloads received per channel, in order.
    pub fn received(&self, channel: usize) -> Vec<Vec<u8>> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Received { channel: c, data, .. } if *c == channel => Some(data.to_vec()),
                _ => None,
            })
            .collect()
    }
}

/// A UDP relay between a client and `server`: forwards both ways until `cut`, then
/// drops everything, as a browser that vanished without a word.
pub struct Relay {
    pub addr: SocketAddr,
    pub cut: Arc<AtomicBool>,
}

impl Relay {
    pub async fn start(server: SocketAddr) -> Self {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("relay socket"));
        let upstream = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("relay socket"));
        upstream.connect(server).await.expect("relay connect");
        let addr = socket.local_addr().expect("relay address");
        let cut = Arc::new(AtomicBool::new(false));
        let client = Arc::new(std::sync::Mutex::new(None::<SocketAddr>));
        {
            let (socket, upstream, cut, client) = (socket.clone(), upstream.clone(), cut.clone(), client.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                    *client.lock().expect("lock") = Some(from);
                    if !cut.load(Ordering::Relaxed) {
                        let _ = upstream.send(&buf[..n]).await;
                    }
                }
            });
        }
        {
            let cut = cut.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = upstream.recv(&mut buf).await {
                    let to = *client.lock().expect("lock");
                    if let (Some(to), false) = (to, cut.load(Ordering::Relaxed)) {
                        let _ = socket.send_to(&buf[..n], to).await;
                    }
                }
            });
        }
        Self { addr, cut }
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
    }
}

/// Polls `check` every 20 ms until it holds or `limit` passes; whether it held.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
