//! What a WebTransport peer costs next to a UDP peer of the same host, in one run: wire
//! bytes per small message and the server's CPU per message. Prints its figures; no
//! criterion.
//!
//! One server: a `porous_tokio::Host` on UDP with a `WebTransport` server attached, on a
//! tokio runtime of its own (one worker, its threads named `porous-server`, so that their
//! CPU time, from `/proc/self/task/*/schedstat`, is the server's alone: the POROUS driver,
//! quinn and the HTTP/3 session layer). Two clients on another runtime, each the POROUS
//! core driven by hand in the same loop: `udp` over a UDP socket, `wt` over a WebTransport
//! session (what `porous-web` does in a browser), and `wt-secure` over a session to a
//! second host in secure mode (a connect token; POROUS seals every datagram inside QUIC's
//! protection). The phases alternate (udp wt wt-secure udp wt wt-secure ...,
//! `--runs` of each); in each, one client sends `--messages` reliable messages of
//! `--size` bytes on channel 0, one per millisecond (one per datagram, as a game that
//! sends a small update each tick), and the phase ends when the server has received them
//! all. Measured per phase:
//!
//! - wire bytes per message: every byte of the client's UDP datagrams in both directions
//!   (the messages, acknowledgements and pings; for `wt` QUIC's packets, its own
//!   acknowledgements and HTTP/3 framing included), plus 28 bytes of IPv4 and UDP header
//!   per datagram, divided by the messages;
//! - the size of the client's datagrams on the wire (the same bytes, per datagram sent);
//! - the server's CPU time per message (its threads' CPU time over the phase, divided by
//!   the messages).
//!
//! Run: `cargo bench -p porous-webtransport --bench overhead` (options, with their
//! defaults: `-- --runs 3 --messages 3000 --size 32`); under `cargo test --benches`, one
//! run of 100 messages.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use porous_tokio::proto::{self, Event, PeerId};
use porous_tokio::{Host, HostConfig, SendMode};
use porous_webtransport::{Certificate, WebTransport, WebTransportConfig};
use tokio::net::UdpSocket;
use tokio::sync::Mutex;

/// IPv4 and UDP headers, per datagram.
const HEADERS: u64 = 28;

struct Options {
    runs: usize,
    messages: u64,
    size: usize,
}

fn options() -> Options {
    // Under `cargo test --benches` (no `--bench` argument), a smoke run.
    let full = std::env::args().any(|a| a == "--bench");
    let mut o =
        if full { Options { runs: 3, messages: 3000, size: 32 } } else { Options { runs: 1, messages: 100, size: 32 } };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().and_then(|v| v.parse::<u64>().ok()).expect("a number after the option");
        match a.as_str() {
            "--runs" => o.runs = value() as usize,
            "--messages" => o.messages = value(),
            "--size" => o.size = value() as usize,
            _ => {} // cargo bench's own flags
        }
    }
    o
}

/// CPU time of this process's threads named `porous-server`, in nanoseconds.
fn server_cpu_ns() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() == "porous-server" {
            let stat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
            total += stat.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    total
}

/// The client's way to the server.
enum Link {
    Udp(UdpSocket),
    Wt(wtransport::Connection),
}

/// The POROUS core over one link, driven by hand, counting its wire bytes.
struct Client {
    core: proto::Host,
    link: Link,
    server: SocketAddr,
    peer: PeerId,
    connected: bool,
    wire_bytes: u64,
    datagrams_sent: u64,
    sent_bytes: u64,
}

impl Client {
    /// Connects over `link` to `server`, in secure mode if there is a `token`.
    fn new(link: Link, server: SocketAddr, mtu: Option<usize>, token: Option<&[u8]>) -> Self {
        let mut config = HostConfig::default();
        if token.is_some() {
            config.secure = Some(proto::SecureConfig::client());
        }
        let mut core = proto::Host::from_entropy(config).expect("config");
        if let Some(mtu) = mtu {
            core.set_path_mtu(server, mtu).expect("datagram size");
        }
        let peer = match token {
            Some(token) => core.connect_with_token(Instant::now(), server, token),
            None => core.connect(Instant::now(), server),
        }
        .expect("connect");
        Self { core, link, server, peer, connected: false, wire_bytes: 0, datagrams_sent: 0, sent_bytes: 0 }
    }

    /// UDP and IP bytes of the link so far, both ways; for WebTransport quinn's count of
    /// the session's UDP payloads.
    fn link_bytes(&self) -> (u64, u64, u64) {
        match &self.link {
            Link::Udp(_) => (self.wire_bytes, self.datagrams_sent, self.sent_bytes),
            Link::Wt(c) => {
                let s = c.quic_connection().stats();
                let wire = s.udp_tx.bytes + s.udp_rx.bytes + HEADERS * (s.udp_tx.datagrams + s.udp_rx.datagrams);
                (wire, s.udp_tx.datagrams, s.udp_tx.bytes + HEADERS * s.udp_tx.datagrams)
            }
        }
    }

    async fn flush(&mut self) {
        while let Some(t) = self.core.poll_transmit() {
            match &self.link {
                Link::Udp(s) => {
                    let _ = s.send(&t.payload).await;
                    self.wire_bytes += t.payload.len() as u64 + HEADERS;
                    self.sent_bytes += t.payload.len() as u64 + HEADERS;
                    self.datagrams_sent += 1;
                }
                Link::Wt(c) => {
                    let _ = c.send_datagram(&t.payload);
                }
            }
        }
        while let Some(e) = self.core.poll_event() {
            match e {
                Event::Connected { .. } => self.connected = true,
                Event::Disconnected { reason, .. } => panic!("a client's connection ended: {reason:?}"),
                _ => {}
            }
        }
    }

    /// Runs the core for `d`, taking what arrives.
    async fn run_for(&mut self, d: Duration) {
        let end = tokio::time::Instant::now() + d;
        loop {
            self.core.step(Instant::now());
            self.flush().await;
            let now = tokio::time::Instant::now();
            if now >= end {
                return;
            }
            let wake = self.core.poll_timeout().map_or(end, |t| tokio::time::Instant::from_std(t).max(now)).min(end);
            let mut buf = [0u8; 2048];
            match &self.link {
                Link::Udp(s) => {
                    tokio::select! {
                        r = s.recv(&mut buf) => if let Ok(n) = r {
                            self.wire_bytes += n as u64 + HEADERS;
                            self.core.handle_datagram(Instant::now(), self.server, &buf[..n]);
                        },
                        () = tokio::time::sleep_until(wake) => {}
                    }
                }
                Link::Wt(c) => {
                    tokio::select! {
                        r = c.receive_datagram() => if let Ok(d) = r {
                            self.core.handle_datagram(Instant::now(), self.server, &d.payload());
                        },
                        () = tokio::time::sleep_until(wake) => {}
                    }
                }
            }
        }
    }
}

struct Phase {
    wire_per_message: f64,
    datagram_size: f64,
    cpu_us_per_message: f64,
}

/// One client sends `n` messages, one per millisecond, until the server has them all.
/// One client sends `n` messages, one per millisecond, until the server has them all. Every
/// client's task keeps its core running meanwhile (an idle one answers pings).
async fn phase(client: &Mutex<Client>, received: &AtomicU64, n: u64, size: usize) -> Phase {
    let (wire0, dgrams0, sent0) = client.lock().await.link_bytes();
    let target = received.load(Ordering::Relaxed) + n;
    let cpu0 = server_cpu_ns();
    let payload = vec![0x5a; size];
    for _ in 0..n {
        {
            let mut c = client.lock().await;
            let peer = c.peer;
            c.core.send(peer, 0, payload.clone(), SendMode::Reliable).expect("send");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let give_up = Instant::now() + Duration::from_secs(10);
    while received.load(Ordering::Relaxed) < target {
        assert!(Instant::now() < give_up, "the server did not get every message");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The last acknowledgements.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cpu = server_cpu_ns() - cpu0;
    let (wire, dgrams, sent) = client.lock().await.link_bytes();
    Phase {
        wire_per_message: (wire - wire0) as f64 / n as f64,
        datagram_size: (sent - sent0) as f64 / (dgrams - dgrams0).max(1) as f64,
        cpu_us_per_message: cpu as f64 / 1000.0 / n as f64,
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let o = options();
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("porous-server")
        .enable_all()
        .build()
        .expect("server runtime");
    let received = Arc::new(AtomicU64::new(0));
    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    let key = proto::token::PrivateKey::from_entropy();
    // Two servers on the server runtime: plain (UDP and WebTransport peers), and secure.
    let servers = server_rt.block_on(async {
        let mut servers = Vec::new();
        for secure in [false, true] {
            let mut config = HostConfig::default();
            if secure {
                config.secure = Some(proto::SecureConfig::server(key.clone(), Vec::new(), Instant::now(), unix));
            }
            let host = Host::bind("127.0.0.1:0", config).await.expect("bind");
            let certificate = Certificate::self_signed(["127.0.0.1"]).expect("certificate");
            let hash = certificate.hashes()[0];
            let addr = "127.0.0.1:0".parse().expect("address");
            let web = WebTransport::serve(host.as_async(), addr, certificate, WebTransportConfig::default())
                .await
                .expect("serve");
            servers.push((host, web, hash));
        }
        servers
    });
    for (host, _, _) in &servers {
        let (host, received) = (host.clone(), Arc::clone(&received));
        server_rt.spawn(async move {
            while let Ok(peer) = host.accept().await {
                let received = Arc::clone(&received);
                tokio::spawn(async move {
                    while peer.recv().await.is_ok() {
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
    }
    let (host, web, hash) = &servers[0];
    let (secure_host, secure_web, secure_hash) = &servers[1];
    let params = proto::token::TokenParams::new(1, vec![secure_host.local_addr()], unix, Duration::from_secs(60));
    let token = proto::token::generate_from_entropy(&key, &params).expect("token");

    let client_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("client runtime");
    client_rt.block_on(async {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        socket.connect(host.local_addr()).await.expect("connect");
        let mut udp = Client::new(Link::Udp(socket), host.local_addr(), None, None);
        let (conn, mtu) = session(web, *hash).await;
        let mut wt = Client::new(Link::Wt(conn), "[100::1]:443".parse().expect("address"), Some(mtu), None);
        // Secure mode: the token names the secure host's UDP address, which the core knows
        // the server by (the session is the only path).
        let (conn, _) = session(secure_web, *secure_hash).await;
        let mut wts = Client::new(Link::Wt(conn), secure_host.local_addr(), Some(mtu), Some(&token));

        while !(udp.connected && wt.connected && wts.connected) {
            udp.run_for(Duration::from_millis(5)).await;
            wt.run_for(Duration::from_millis(5)).await;
            wts.run_for(Duration::from_millis(5)).await;
        }
        println!(
            "porous-webtransport overhead: {} runs of {} reliable messages of {} B, one per ms per datagram, \
             one client at a time; WebTransport datagram size {mtu} B",
            o.runs, o.messages, o.size
        );
        // Each client's core runs in a task of its own from here on, 1 ms at a time.
        let clients: Vec<Arc<Mutex<Client>>> = [udp, wt, wts].into_iter().map(|c| Arc::new(Mutex::new(c))).collect();
        for c in &clients {
            let c = Arc::clone(c);
            tokio::spawn(async move {
                loop {
                    c.lock().await.run_for(Duration::from_millis(1)).await;
                    tokio::task::yield_now().await;
                }
            });
        }
        let names = ["udp", "wt", "wt-secure"];
        let mut phases: [Vec<Phase>; 3] = Default::default();
        for run in 0..o.runs {
            for (i, name) in names.iter().enumerate() {
                let p = phase(&clients[i], &received, o.messages, o.size).await;
                println!(
                    "run {run} {name:>9}: {:6.1} wire B/message, {:6.1} B/datagram sent, {:6.2} us server CPU/message",
                    p.wire_per_message, p.datagram_size, p.cpu_us_per_message
                );
                phases[i].push(p);
            }
        }
        let [u, w, ws] = &phases;
        println!("\nmedian [min, max] of {} runs:", o.runs);
        println!(
            "{:>9} | {:>26} | {:>24} | {:>24}",
            "", "wire B/message (both ways)", "B/datagram sent", "server CPU us/message"
        );
        for (name, v) in names.iter().zip(&phases) {
            let show = |f: fn(&Phase) -> f64| {
                let (m, lo, hi) = median(v.iter().map(f).collect());
                format!("{m:.1} [{lo:.1}, {hi:.1}]")
            };
            println!(
                "{name:>9} | {:>26} | {:>24} | {:>24}",
                show(|p| p.wire_per_message),
                show(|p| p.datagram_size),
                show(|p| p.cpu_us_per_message)
            );
        }
        let ratio = |x: &[Phase], y: &[Phase], f: fn(&Phase) -> f64| {
            median(x.iter().zip(y).map(|(a, b)| f(b) / f(a)).collect()).0
        };
        let bytes = |p: &Phase| p.wire_per_message;
        let cpu = |p: &Phase| p.cpu_us_per_message;
        println!(
            "per run, median: wt / udp: wire bytes {:.2}x, server CPU {:.2}x; wt-secure / wt: wire bytes {:.2}x, server CPU {:.2}x",
            ratio(u, w, bytes),
            ratio(u, w, cpu),
            ratio(w, ws, bytes),
            ratio(w, ws, cpu)
        );
    });
    drop(servers);
}

/// A WebTransport session to `web`, and the connection's datagram size, as the server
/// computes it (QUIC's datagram size at QUIC's minimum path MTU).
async fn session(web: &WebTransport, hash: [u8; 32]) -> (wtransport::Connection, usize) {
    let config = wtransport::ClientConfig::builder()
        .with_bind_address("127.0.0.1:0".parse().expect("address"))
        .with_server_certificate_hashes([wtransport::tls::Sha256Digest::new(hash)])
        .build();
    let endpoint = wtransport::Endpoint::client(config).expect("client endpoint");
    let url = format!("https://127.0.0.1:{}/", web.local_addr().port());
    let conn = endpoint.connect(url).await.expect("session");
    let path = usize::from(conn.quic_connection().stats().path.current_mtu);
    let mtu = conn.max_datagram_size().expect("datagrams") - (path - 1200);
    (conn, mtu)
}
