//! Secure mode end to end, and hostile to it (`docs/security.md`, Secure mode): connect
//! tokens forged, expired, for another server, altered or reused; sealed datagrams
//! bit-flipped, truncated, replayed, reordered; a man in the middle rewriting bytes. Each
//! is counted and dropped, none reaches a channel, nothing panics, and the honest
//! connection goes on.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_proto::token::{self, PrivateKey, TokenParams};
use porous_proto::{ConnectError, DisconnectReason, Event, Host, HostConfig, PeerId, SecureConfig, SendMode};

const MS: Duration = Duration::from_millis(1);
/// The Unix time the server's clock anchor says at the start of every test.
const UNIX: u64 = 1_700_000_000;

fn rng(seed: u64) -> rand_pcg::Pcg32 {
    rand_pcg::Pcg32::new(seed, 0x0a02_bdbf_7bb3_c0a7)
}

fn key() -> PrivateKey {
    PrivateKey::from_bytes([0x42; 32])
}

fn client_addr() -> SocketAddr {
    "10.0.0.1:4000".parse().unwrap()
}

fn server_addr() -> SocketAddr {
    "10.0.0.2:5000".parse().unwrap()
}

/// Which way a datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    ToServer,
    ToClient,
}

/// What the man in the middle does with each datagram: the datagrams to deliver instead.
type Hook = Box<dyn FnMut(Dir, &[u8]) -> Vec<Vec<u8>>>;

/// A client and a secure server joined by a link with a one-tick delay and a hook.
struct Net {
    client: Host,
    server: Host,
    now: Instant,
    hook: Hook,
    /// Every datagram sent (before the hook), in order.
    log: Vec<(Dir, Vec<u8>)>,
    in_flight: VecDeque<(Dir, Vec<u8>)>,
    client_events: Vec<Event>,
    server_events: Vec<Event>,
}

fn server_config(start: Instant) -> HostConfig {
    let mut c = HostConfig::default();
    c.secure = Some(SecureConfig::server(key(), vec![server_addr()], start, UNIX));
    c
}

fn client_config() -> HostConfig {
    let mut c = HostConfig::default();
    c.secure = Some(SecureConfig::client());
    c
}

fn params(client_id: u64) -> TokenParams {
    let mut p = TokenParams::new(client_id, vec![server_addr()], UNIX, Duration::from_secs(30));
    p.user_data = format!("player {client_id}").into_bytes();
    p
}

fn token_for(p: &TokenParams, seed: u64) -> Vec<u8> {
    token::generate(&key(), p, &mut rng(seed)).unwrap()
}

impl Net {
    fn new() -> Self {
        let start = Instant::now();
        Self {
            client: Host::new(client_config(), rng(1)).unwrap(),
            server: Host::new(server_config(start), rng(2)).unwrap(),
            now: start,
            hook: Box::new(|_, d| vec![d.to_vec()]),
            log: Vec::new(),
            in_flight: VecDeque::new(),
            client_events: Vec::new(),
            server_events: Vec::new(),
        }
    }

    /// One millisecond: deliver what was sent last tick, step, collect.
    fn tick(&mut self) {
        self.now += MS;
        let now = self.now;
        for (dir, d) in std::mem::take(&mut self.in_flight) {
            match dir {
                Dir::ToServer => self.server.handle_datagram(now, client_addr(), &d),
                Dir::ToClient => self.client.handle_datagram(now, server_addr(), &d),
            }
        }
        self.client.step(now);
        self.server.step(now);
        while let Some(t) = self.client.poll_transmit() {
            assert_eq!(t.remote, server_addr());
            self.send(Dir::ToServer, t.payload.to_vec());
        }
        while let Some(t) = self.server.poll_transmit() {
            assert_eq!(t.remote, client_addr());
            self.send(Dir::ToClient, t.payload.to_vec());
        }
        while let Some(e) = self.client.poll_event() {
            self.client_events.push(e);
        }
        while let Some(e) = self.server.poll_event() {
            self.server_events.push(e);
        }
    }

    fn send(&mut self, dir: Dir, d: Vec<u8>) {
        for out in (self.hook)(dir, &d) {
            self.in_flight.push_back((dir, out));
        }
        self.log.push((dir, d));
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.tick();
        }
    }

    /// Connects with `token` and runs until both sides are connected; the ids.
    fn connect(&mut self, token: &[u8]) -> (PeerId, PeerId) {
        let c = self.client.connect_with_token(self.now, server_addr(), token).unwrap();
        for _ in 0..2000 {
            self.tick();
            let s = self.server_events.iter().find_map(|e| match e {
                Event::Connected { peer, .. } => Some(*peer),
                _ => None,
            });
            let up = self.client_events.iter().any(|e| matches!(e, Event::Connected { peer, .. } if *peer == c));
            if let (Some(s), true) = (s, up) {
                return (c, s);
            }
        }
        panic!("no connection: client {:?} server {:?}", self.client_events, self.server_events);
    }

    fn received_by_server(&self) -> Vec<Bytes> {
        received(&self.server_events)
    }

    fn received_by_client(&self) -> Vec<Bytes> {
        received(&self.client_events)
    }
}

fn received(events: &[Event]) -> Vec<Bytes> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Received { data, .. } => Some(data.clone()),
            _ => None,
        })
        .collect()
}

/// Sends `n` numbered reliable packets each way on channel 0 and runs until they arrive.
fn exchange(net: &mut Net, (c, s): (PeerId, PeerId), tag: &str, n: usize) {
    for i in 0..n {
        net.client.send(c, 0, Bytes::from(format!("{tag} c{i}")), SendMode::Reliable).unwrap();
        net.server.send(s, 0, Bytes::from(format!("{tag} s{i}")), SendMode::Reliable).unwrap();
    }
    net.run(400 * MS);
}

fn expect_in_order(got: &[Bytes], tag: &str, side: char, n: usize) {
    let want: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("{tag} {side}{i}"))).collect();
    let got: Vec<Bytes> = got.iter().filter(|d| d.starts_with(tag.as_bytes())).cloned().collect();
    assert_eq!(got, want, "{tag}: every packet once, in order");
}

#[test]
fn a_client_with_a_token_connects_and_its_traffic_is_sealed() {
    let mut net = Net::new();
    let ids = net.connect(&token_for(&params(77), 9));
    // The server's application learns who the backend vouched for.
    let connected = net.server_events.iter().find(|e| matches!(e, Event::Connected { .. })).unwrap();
    let Event::Connected { data, client_id, remote, .. } = connected else { unreachable!() };
    assert_eq!((*client_id, &data[..], *remote), (Some(77), &b"player 77"[..], client_addr()));
    let Event::Connected { client_id, data, .. } = &net.client_events[0] else { panic!() };
    assert_eq!((*client_id, data.len()), (None, 0), "the client learns nothing from the server's side");
    exchange(&mut net, ids, "hello", 50);
    expect_in_order(&net.received_by_server(), "hello", 'c', 50);
    expect_in_order(&net.received_by_client(), "hello", 's', 50);
    // Nothing of the payloads, the user data or the keys appears on the wire.
    for (_, d) in &net.log {
        for needle in [&b"hello"[..], b"player 77"] {
            assert!(!d.windows(needle.len()).any(|w| w == needle), "plaintext on the wire");
        }
    }
    // Disconnecting works as in plain mode, code included.
    net.client.disconnect_with(net.now, ids.0, 7);
    net.run(300 * MS);
    assert!(
        net.server_events
            .iter()
            .any(|e| matches!(e, Event::Disconnected { reason: DisconnectReason::Remote { code: 7 }, .. }))
    );
    assert!(net.client_events.iter().any(|e| matches!(e, Event::Disconnected { reason: DisconnectReason::Local, .. })));
    assert_eq!(net.server.stats().malformed, 0);
    assert_eq!(net.client.stats().malformed, 0);
}

#[test]
fn plain_and_secure_hosts_do_not_mix() {
    let start = Instant::now();
    let mut plain = Host::new(HostConfig::default(), rng(3)).unwrap();
    let mut secure = Host::new(server_config(start), rng(4)).unwrap();
    assert_eq!(plain.connect_with_token(start, server_addr(), &token_for(&params(1), 1)), Err(ConnectError::NotSecure));
    assert_eq!(secure.connect(start, server_addr()), Err(ConnectError::TokenRequired));
    let mut client = Host::new(client_config(), rng(5)).unwrap();
    let other: SocketAddr = "10.0.0.9:5000".parse().unwrap();
    assert_eq!(client.connect_with_token(start, other, &token_for(&params(1), 1)), Err(ConnectError::NotInToken));
    assert!(matches!(client.connect_with_token(start, server_addr(), b"nonsense"), Err(ConnectError::Token(_))));
    // A plain request at a secure server, and a secure request at a plain one: dropped.
    plain.connect(start, server_addr()).unwrap();
    plain.step(start);
    let req = plain.poll_transmit().unwrap().payload;
    secure.handle_datagram(start, client_addr(), &req);
    secure.step(start);
    assert_eq!(secure.poll_transmit(), None);
    assert_eq!((secure.stats().peers, secure.stats().malformed), (0, 1));
    client.connect_with_token(start, server_addr(), &token_for(&params(1), 1)).unwrap();
    client.step(start);
    let req = client.poll_transmit().unwrap().payload;
    let mut plain_server = Host::new(HostConfig::default(), rng(6)).unwrap();
    plain_server.handle_datagram(start, client_addr(), &req);
    plain_server.step(start);
    assert_eq!(plain_server.poll_transmit(), None);
    assert_eq!(plain_server.stats().peers, 0);
}
