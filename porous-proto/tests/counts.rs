//! Counts that must add up (issue 32, item 4): the host's and the peers' counters against
//! the peer table and the events, after every step of runs in which clients connect,
//! send, disconnect, vanish into a blackout, reconnect from the same address, are accepted
//! or rejected by hand and spoofed, over lossy links, in plain and secure mode; quickcheck
//! draws the runs.
//!
//! What holds after every step, for every host (`check`):
//!
//! - `connecting`, `connected` and `closing` count the table's peers by state (closing:
//!   disconnecting, disconnected, zombie), `peers` is `connecting + connected`, and
//!   `peers + closing` the table's size, within `max_peers`;
//! - `pending` is the number of incoming peers still in their handshake, within
//!   `max_pending`;
//! - the ids the application holds open (from `connect`, `ConnectRequest` or `Connected`,
//!   not yet ended by `Disconnected`) are exactly the peers connected, disconnecting, or
//!   connecting and known to it; no event names an id after its `Disconnected`, none ends
//!   an id the application never learned, none connects an id twice;
//! - `accepted` counts every peer a request made (under manual admission, every
//!   `ConnectRequest`), `rejected` every rejection;
//! - `bad_checksum <= malformed`, `bad_cookies <= challenged`, and a datagram is counted
//!   in at most one of the drop counters;
//! - the peers' `malformed` add up to no more than the host's;
//! - `datagrams_sent` and `bytes_sent` are what the links were offered, and
//!   `datagrams_received` no more than they delivered;
//! - each peer's `packets_sent` is what `send` took for it, and `packets_received` the
//!   `Received` events it made;
//! - `memory_usage` is the sum of its parts, and its reassembly the peers' `reassembly_bytes`.
//!
//! And at the end, over a healed network: nothing queued or held for reassembly on an idle
//! connection, every reliable packet of a connection both sides still hold delivered;
//! then, once every client has disconnected, no peer, nothing pending, nothing open, and
//! every datagram a link delivered counted as received.
//!
//! The transfer layer's own counters (frames lost against frames sent and acknowledged)
//! are tested beside it; this file is about the host's table and the connections' life.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use porous_proto::sim::{LinkConditions, Network};
use porous_proto::token::{self, PrivateKey, TokenParams};
use porous_proto::{Event, Host, HostConfig, PeerId, PeerState, SecureConfig, SendMode};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

const MS: Duration = Duration::from_millis(1);
const UNIX: u64 = 1_800_000_000;
const KEY: PrivateKey = PrivateKey::from_bytes([0x5A; 32]);

fn cases(default: u64) -> u64 {
    std::env::var("POROUS_QC_TESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn server_addr() -> SocketAddr {
    "10.0.0.1:9000".parse().unwrap()
}

fn client_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, i as u8], 4000))
}

/// A run's shape, drawn by quickcheck.
#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    secure: bool,
    manual: bool,
    clients: usize,
    /// Random loss both ways, percent.
    loss: u8,
    challenge_above: usize,
    max_pending: usize,
    max_peers: usize,
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Self {
        Self {
            seed: u64::arbitrary(g),
            secure: bool::arbitrary(g),
            manual: bool::arbitrary(g),
            clients: 1 + usize::arbitrary(g) % 4,
            loss: u8::arbitrary(g) % 25,
            challenge_above: usize::arbitrary(g) % 4,
            max_pending: 1 + usize::arbitrary(g) % 3,
            max_peers: 1 + usize::arbitrary(g) % 5,
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let c = self.clone();
        let fewer = (1..c.clients).map({
            let c = c.clone();
            move |n| Self { clients: n, ..c.clone() }
        });
        let clean = (c.loss > 0).then(|| Self { loss: 0, ..c.clone() });
        Box::new(fewer.chain(clean))
    }
}

/// Connection timings short enough for a run of seconds to see every end.
fn peer_config(config: &mut HostConfig) {
    config.peer.timeout = Duration::from_secs(2);
    config.peer.ping_interval = Duration::from_millis(500);
    config.peer.connect_timeout = Duration::from_secs(1);
    config.peer.disconnect_timeout = Duration::from_millis(500);
    config.peer.linger = Duration::from_millis(300);
}

/// What one host's application has heard, and the calls it made.
#[derive(Debug, Default)]
struct App {
    /// Ids `connect` returned.
    local: BTreeSet<PeerId>,
    /// Ids it learned (from `connect`, `ConnectRequest` or `Connected`).
    known: BTreeSet<PeerId>,
    /// Ids it holds open: learned, not yet ended.
    open: BTreeSet<PeerId>,
    /// Ids that ended (`Disconnected`).
    ended: BTreeSet<PeerId>,
    /// Ids that connected.
    connected: BTreeSet<PeerId>,
    /// Ids reported as requests, awaiting a decision.
    awaiting: BTreeSet<PeerId>,
    requests: u64,
    rejected: u64,
    /// Every id ever seen in the host's table that `connect` did not make.
    incoming: BTreeSet<PeerId>,
    /// Datagrams (and bytes) injected as if this host had sent them.
    injected: (u64, u64),
    /// Per id, the packets `send` took: reliable ones, all.
    sent: BTreeMap<PeerId, (u64, u64)>,
    /// Per id, the packets delivered (`Received`).
    received: BTreeMap<PeerId, u64>,
}

impl App {
    fn learn(&mut self, id: PeerId) {
        assert!(!self.ended.contains(&id), "{id:?} learned after it ended");
        self.known.insert(id);
        self.open.insert(id);
    }

    fn connect(&mut self, id: PeerId) {
        self.local.insert(id);
        self.learn(id);
    }

    fn event(&mut self, e: &Event) {
        match e {
            Event::ConnectRequest { peer, .. } => {
                assert!(!self.known.contains(peer), "{peer:?} requested twice");
                self.requests += 1;
                self.awaiting.insert(*peer);
                self.learn(*peer);
            }
            Event::Connected { peer, .. } => {
                assert!(self.connected.insert(*peer), "{peer:?} connected twice");
                self.awaiting.remove(peer);
                self.learn(*peer);
            }
            Event::Received { peer, .. } => {
                assert!(self.open.contains(peer), "a packet for {peer:?}, not open");
                *self.received.entry(*peer).or_default() += 1;
            }
            Event::Disconnected { peer, .. } => {
                let known = self.known.contains(peer);
                assert!(self.open.remove(peer), "{peer:?} ended, but was not open (known: {known})");
                self.awaiting.remove(peer);
                self.ended.insert(*peer);
            }
            _ => {}
        }
    }
}

/// Checks every invariant of the module's docs on the host at `addr`, whose datagrams go
/// to `links_to`.
fn check(net: &Network, addr: SocketAddr, app: &mut App, links_to: &[SocketAddr], config: &HostConfig) {
    let host = net.host(addr);
    let s = host.stats();
    let peers: Vec<(PeerId, PeerState)> =
        host.peers().map(|p| (p, host.peer_stats(p).expect("a listed peer has stats").state)).collect();
    let in_state = |states: &[PeerState]| peers.iter().filter(|(_, st)| states.contains(st)).count();
    assert_eq!(s.connecting, in_state(&[PeerState::Connecting]), "connecting: {peers:?}");
    assert_eq!(s.connected, in_state(&[PeerState::Connected]), "connected: {peers:?}");
    let ending = [PeerState::Disconnecting, PeerState::Disconnected, PeerState::Zombie];
    assert_eq!(s.closing, in_state(&ending), "closing: {peers:?}");
    assert_eq!(s.peers, s.connecting + s.connected, "peers are the live connections");
    assert_eq!(s.peers + s.closing, peers.len(), "peers and closing counted against the table");
    assert!(s.peers + s.closing <= config.max_peers);
    app.incoming.extend(peers.iter().map(|&(p, _)| p).filter(|p| !app.local.contains(p)));
    let pending = peers.iter().filter(|(p, st)| *st == PeerState::Connecting && !app.local.contains(p)).count();
    assert_eq!(s.pending, pending, "pending against the incoming peers still connecting: {peers:?}");
    assert!(s.pending <= config.max_pending);
    let open: BTreeSet<PeerId> = peers
        .iter()
        .filter(|(p, st)| match st {
            PeerState::Connected | PeerState::Disconnecting => true,
            PeerState::Connecting => app.known.contains(p),
            PeerState::Disconnected | PeerState::Zombie => false,
        })
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(app.open, open, "the ids the application holds open, against the table: {peers:?}");
    if config.manual_accept {
        assert_eq!(s.accepted, app.requests, "accepted: every request asked about");
    } else {
        assert!(s.accepted >= app.incoming.len() as u64, "accepted: every peer a request made");
    }
    assert_eq!(s.rejected, app.rejected);
    assert!(s.bad_checksum <= s.malformed);
    assert!(s.bad_cookies <= s.challenged);
    let dropped = s.malformed
        + s.unknown_source
        + s.replayed
        + s.bad_tokens
        + s.expired_tokens
        + s.wrong_server_tokens
        + s.reused_tokens;
    assert!(dropped <= s.datagrams_received, "each datagram dropped is counted once: {s:?}");
    let peer_malformed: u64 = peers.iter().map(|&(p, _)| host.peer_stats(p).map_or(0, |ps| ps.malformed)).sum();
    assert!(peer_malformed <= s.malformed, "the peers' malformed {peer_malformed}, the host's {}", s.malformed);
    let (sent, bytes) =
        links_to.iter().map(|&to| net.link_stats(addr, to)).fold((0, 0), |(d, b), l| (d + l.sent, b + l.sent_bytes));
    assert_eq!((s.datagrams_sent, s.bytes_sent), (sent - app.injected.0, bytes - app.injected.1));
    let delivered: u64 = links_to.iter().map(|&from| net.link_stats(from, addr).delivered).sum();
    assert!(s.datagrams_received <= delivered, "received {}, delivered {delivered}", s.datagrams_received);
    for &(p, _) in &peers {
        let ps = host.peer_stats(p).expect("a listed peer");
        let sent = app.sent.get(&p).map_or(0, |&(_, all)| all);
        let received = app.received.get(&p).copied().unwrap_or(0);
        assert_eq!((ps.packets_sent, ps.packets_received), (sent, received), "{p:?}: packets sent and delivered");
    }
    let m = host.memory_usage();
    assert_eq!(m.total, m.peers + m.table + m.buffers);
    let held: usize = peers.iter().map(|&(p, _)| host.peer_stats(p).map_or(0, |ps| ps.reassembly_bytes)).sum();
    assert_eq!(m.reassembly, held);
    assert!(m.reassembly <= m.peers);
}

/// A run of [`Case`]: the network, what each host's application heard, and its calls.
struct Run {
    case: Case,
    net: Network,
    server_config: HostConfig,
    client_config: HostConfig,
    apps: BTreeMap<SocketAddr, App>,
    /// Secure mode: each client's token (reused for its reconnections, from its address).
    tokens: Vec<Option<Vec<u8>>>,
    /// A valid token of an attacker's own (secure mode).
    attacker: Option<Vec<u8>>,
    down: Vec<bool>,
    spoofs: u64,
}

fn token(client_id: u64, seed: u64) -> Vec<u8> {
    let mut p = TokenParams::new(client_id, vec![server_addr()], UNIX, Duration::from_secs(600));
    p.timeout = Duration::from_secs(2);
    token::generate(&KEY, &p, &mut porous_proto::sim::seeded_rng(seed)).unwrap()
}

impl Run {
    fn new(case: Case) -> Option<Self> {
        let mut net = Network::new(case.seed);
        let mut conditions = LinkConditions::perfect(10 * MS);
        conditions.loss = f64::from(case.loss) / 100.0;
        net.set_default_link(conditions);
        let mut server_config = HostConfig::default();
        peer_config(&mut server_config);
        server_config.manual_accept = case.manual;
        server_config.challenge_above = case.challenge_above;
        server_config.max_pending = case.max_pending;
        server_config.max_peers = case.max_peers;
        let mut client_config = HostConfig::default();
        peer_config(&mut client_config);
        if case.secure {
            server_config.secure = Some(SecureConfig::server(KEY, vec![server_addr()], net.now(), UNIX));
            client_config.secure = Some(SecureConfig::client());
        }
        net.add_host(server_addr(), server_config.clone()).ok()?;
        let mut apps = BTreeMap::from([(server_addr(), App::default())]);
        for i in 0..case.clients {
            net.add_host(client_addr(i), client_config.clone()).ok()?;
            apps.insert(client_addr(i), App::default());
        }
        let tokens = (0..case.clients).map(|i| case.secure.then(|| token(i as u64, case.seed ^ i as u64))).collect();
        let attacker = case.secure.then(|| token(666, case.seed ^ 666));
        let down = vec![false; case.clients];
        Some(Self { case, net, server_config, client_config, apps, tokens, attacker, down, spoofs: 0 })
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.net.random() % 1000 < per_mille
    }

    /// One step of the network, then every host's events and the checks.
    fn step(&mut self) {
        self.net.step(5 * MS);
        let clients: Vec<SocketAddr> = (0..self.case.clients).map(client_addr).collect();
        for (&addr, app) in &mut self.apps {
            while let Some(e) = self.net.poll_event(addr) {
                app.event(&e);
            }
            let (to, config) = if addr == server_addr() {
                (clients.clone(), &self.server_config)
            } else {
                (vec![server_addr()], &self.client_config)
            };
            check(&self.net, addr, app, &to, config);
        }
    }

    /// A request of another attempt, as if client `i` sent it: another host's first
    /// request (in secure mode with the attacker's token), with a nonce of its own.
    fn spoof(&mut self, i: usize) {
        self.spoofs += 1;
        let seed = self.net.random();
        let mut other = Host::new(self.client_config.clone(), porous_proto::sim::seeded_rng(seed)).unwrap();
        let now = self.net.now();
        match &self.attacker {
            Some(t) => other.connect_with_token(now, server_addr(), t).unwrap(),
            None => other.connect(now, server_addr()).unwrap(),
        };
        other.step(now);
        let request = other.poll_transmit().unwrap().payload;
        let app = self.apps.get_mut(&client_addr(i)).unwrap();
        app.injected = (app.injected.0 + 1, app.injected.1 + request.len() as u64);
        self.net.inject(client_addr(i), server_addr(), request);
    }

    /// The applications' calls, every 10 ms.
    fn act(&mut self) {
        let now = self.net.now();
        for i in 0..self.case.clients {
            let addr = client_addr(i);
            let current = self.net.host(addr).peer_by_addr(server_addr());
            let open = current.filter(|p| self.apps[&addr].open.contains(p));
            match open {
                None if current.is_none() && self.chance(300) => {
                    let host = self.net.host_mut(addr);
                    let id = match &self.tokens[i] {
                        Some(t) => host.connect_with_token(now, server_addr(), t),
                        None => host.connect(now, server_addr()),
                    }
                    .expect("no peer at the server's address");
                    self.apps.get_mut(&addr).unwrap().connect(id);
                }
                Some(id) if self.apps[&addr].connected.contains(&id) => {
                    if self.chance(500) {
                        self.send(addr, id, SendMode::Reliable);
                    }
                    if self.chance(300) {
                        self.send(addr, id, SendMode::Unreliable);
                    }
                    if self.chance(10) {
                        self.net.host_mut(addr).disconnect(now, id);
                    } else if self.chance(5) {
                        self.net.host_mut(addr).disconnect_now(now, id);
                    }
                }
                _ => {}
            }
            if self.chance(5) {
                // A blackout, or its end: the client vanishes for a while.
                self.down[i] = !self.down[i];
                let mut c = self.net.link(addr, server_addr());
                c.down = self.down[i];
                self.net.set_link_both(addr, server_addr(), c);
            }
            if self.chance(10) {
                self.spoof(i);
            }
        }
        let server = server_addr();
        let awaiting: Vec<PeerId> = self.apps[&server].awaiting.iter().copied().collect();
        for p in awaiting {
            if self.chance(300) {
                self.net.host_mut(server).accept(now, p).expect("an awaiting request");
                self.apps.get_mut(&server).unwrap().awaiting.remove(&p);
            } else if self.chance(100) {
                self.net.host_mut(server).reject(now, p, 7).expect("an awaiting request");
                let app = self.apps.get_mut(&server).unwrap();
                app.awaiting.remove(&p);
                app.rejected += 1;
            }
        }
        let connected: Vec<PeerId> =
            self.apps[&server].open.iter().copied().filter(|p| self.apps[&server].connected.contains(p)).collect();
        for p in connected {
            if self.chance(200) {
                self.send(server, p, SendMode::Reliable);
            }
            if self.chance(3) {
                self.net.host_mut(server).disconnect(now, p);
            }
        }
    }

    /// The host at `addr` sends a packet to `peer` in `mode` (channel 0 reliable, 1
    /// unreliable), counted if it was taken.
    fn send(&mut self, addr: SocketAddr, peer: PeerId, mode: SendMode) {
        let (channel, payload) = match mode {
            SendMode::Reliable => (0, Bytes::from_static(&[1; 40])),
            _ => (1, Bytes::from_static(&[2; 300])),
        };
        if self.net.host_mut(addr).send(peer, channel, payload, mode).is_ok() {
            let sent = self.apps.get_mut(&addr).unwrap().sent.entry(peer).or_default();
            sent.0 += u64::from(mode == SendMode::Reliable);
            sent.1 += 1;
        }
    }

    fn run(&mut self, duration: Duration, act: bool) {
        let end = self.net.now() + duration;
        let mut next_act = self.net.now();
        while self.net.now() < end {
            if act && self.net.now() >= next_act {
                self.act();
                next_act += 10 * MS;
            }
            self.step();
        }
    }

    /// Heals every link and accepts whatever awaits the server's decision.
    fn heal(&mut self) {
        for i in 0..self.case.clients {
            self.down[i] = false;
            self.net.set_link_both(client_addr(i), server_addr(), LinkConditions::perfect(10 * MS));
        }
    }

    fn accept_all(&mut self) {
        let now = self.net.now();
        let server = server_addr();
        let awaiting: Vec<PeerId> = self.apps[&server].awaiting.iter().copied().collect();
        for p in awaiting {
            self.net.host_mut(server).accept(now, p).expect("an awaiting request");
            self.apps.get_mut(&server).unwrap().awaiting.remove(&p);
        }
    }
}

/// The run's end: healed, left idle, then every client disconnects.
fn finish(run: &mut Run) {
    run.heal();
    for _ in 0..30 {
        run.accept_all();
        run.run(100 * MS, false);
    }
    // Idle connections hold nothing queued and nothing for reassembly, and every
    // reliable packet sent on a connection both sides still hold arrived.
    let hosts: Vec<SocketAddr> = run.apps.keys().copied().collect();
    for &addr in &hosts {
        let host = run.net.host(addr);
        for p in host.peers() {
            let ps = host.peer_stats(p).unwrap();
            if ps.state == PeerState::Connected {
                assert_eq!((ps.queued_bytes, ps.reassembly_bytes), (0, 0), "{addr}: {p:?} idle: {ps:?}");
            }
        }
    }
    let server = run.net.host(server_addr());
    for i in 0..run.case.clients {
        let client = run.net.host(client_addr(i));
        let (Some(c), Some(s)) = (client.peer_by_addr(server_addr()), server.peer_by_addr(client_addr(i))) else {
            continue;
        };
        let (cs, ss) = (client.peer_stats(c).unwrap(), server.peer_stats(s).unwrap());
        if (cs.state, ss.state) != (PeerState::Connected, PeerState::Connected) {
            continue;
        }
        for (from, to, sender, receiver) in
            [(client_addr(i), server_addr(), c, s), (server_addr(), client_addr(i), s, c)]
        {
            let (reliable, all) = run.apps[&from].sent.get(&sender).copied().unwrap_or((0, 0));
            let got = run.apps[&to].received.get(&receiver).copied().unwrap_or(0);
            assert!(reliable <= got && got <= all, "{from} to {to}: {reliable} reliable of {all} sent, {got} arrived");
        }
    }
    let now = run.net.now();
    for i in 0..run.case.clients {
        let addr = client_addr(i);
        if let Some(p) = run.net.host(addr).peer_by_addr(server_addr()) {
            run.net.host_mut(addr).disconnect(now, p);
        }
    }
    run.run(Duration::from_secs(6), false);
    assert_eq!(run.net.in_flight(), 0);
    let clients: Vec<SocketAddr> = (0..run.case.clients).map(client_addr).collect();
    for (&addr, app) in &run.apps {
        let s = run.net.host(addr).stats();
        assert_eq!((s.peers, s.closing, s.pending), (0, 0, 0), "{addr}: everything ended");
        // Nothing on its way: every datagram a link delivered was handed to the host.
        let from = if addr == server_addr() { clients.clone() } else { vec![server_addr()] };
        let delivered = from
            .iter()
            .map(|&f| run.net.link_stats(f, addr))
            .fold((0, 0), |(d, b), l| (d + l.delivered, b + l.delivered_bytes));
        assert_eq!((s.datagrams_received, s.bytes_received), delivered, "{addr}");
        assert!(app.open.is_empty(), "{addr}: the application holds {:?} open", app.open);
        assert_eq!(run.net.host(addr).memory_usage().peers, 0);
    }
}

#[test]
fn host_and_peer_counts_add_up_after_every_step() {
    fn prop(case: Case) -> TestResult {
        let Some(mut run) = Run::new(case) else { return TestResult::discard() };
        run.run(Duration::from_secs(6), true);
        finish(&mut run);
        TestResult::passed()
    }
    QuickCheck::new().tests(cases(30)).quickcheck(prop as fn(Case) -> TestResult);
}

/// The counts at one seed per mode and admission, each run long enough to cover
/// reconnections, rejections, blackouts and spoofed requests; what the property's cases
/// must also reach.
#[test]
fn every_kind_of_end_is_reached_and_counted() {
    for secure in [false, true] {
        for manual in [false, true] {
            let case = Case {
                seed: 7,
                secure,
                manual,
                clients: 4,
                loss: 10,
                challenge_above: 1,
                max_pending: 2,
                max_peers: 4,
            };
            let mut run = Run::new(case).unwrap();
            run.run(Duration::from_secs(10), true);
            let s = run.net.host(server_addr()).stats();
            let app = &run.apps[&server_addr()];
            assert!(run.spoofs > 0 && s.challenged > 0, "{secure} {manual}: {s:?}");
            assert!(app.ended.len() >= 4 && app.connected.len() >= 4, "{secure} {manual}: {app:?}");
            if manual {
                assert!(s.rejected > 0);
            }
            finish(&mut run);
        }
    }
}
