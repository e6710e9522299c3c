//! A scripted two-host harness on the simulator's network: a fixed-latency link both
//! ways, an optional hook that decides the fate of each datagram, and time that jumps to
//! the next thing to do. The hosts are fields, for tests to call directly; the network
//! carries their datagrams and keeps the clock.
#![allow(dead_code, unreachable_pub)]

use porous_proto::Instant;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use porous_proto::sim::{LinkConditions, Network, seeded_rng};
use porous_proto::token::{self, PrivateKey, TokenParams};
use porous_proto::{Event, Host, HostConfig, PeerId, SecureConfig, Transmit};

pub const MS: Duration = Duration::from_millis(1);

/// Plain or secure mode: the tests of a guarantee run their one body in each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Plain,
    /// The client connects with a connect token, and every datagram after its request is
    /// sealed (ChaCha20-Poly1305) instead of carrying the keyed CRC.
    Secure,
}

/// The backend's key in secure mode, and the Unix time a simulation starts at.
pub const PRIVATE_KEY: PrivateKey = PrivateKey::from_bytes([0x3C; 32]);
pub const UNIX: u64 = 1_800_000_000;

impl Mode {
    pub const BOTH: [Self; 2] = [Self::Plain, Self::Secure];

    pub fn is_secure(self) -> bool {
        self == Self::Secure
    }

    /// `config` for the host that connects: in secure mode, a client without a key.
    pub fn client(self, mut config: HostConfig) -> HostConfig {
        if self.is_secure() {
            config.secure = Some(SecureConfig::client());
        }
        config
    }

    /// `config` for the host at `server`, which accepts: in secure mode, the backend's key,
    /// `server` as its public address, and the Unix time [`UNIX`] at `start`.
    pub fn server(self, mut config: HostConfig, server: SocketAddr, start: Instant) -> HostConfig {
        if self.is_secure() {
            config.secure = Some(SecureConfig::server(PRIVATE_KEY, vec![server], start, UNIX));
        }
        config
    }

    /// In secure mode, a connect token for `server`, made `elapsed` after the start (so a
    /// reconnection late in a run gets a fresh one), valid for two minutes, with `timeout`
    /// as the connection's timeout (whole seconds, rounded up). Seeded: the same arguments
    /// give the same bytes.
    pub fn token(self, seed: u64, server: SocketAddr, elapsed: Duration, timeout: Duration) -> Option<Vec<u8>> {
        if !self.is_secure() {
            return None;
        }
        let now = UNIX + elapsed.as_secs();
        let mut p = TokenParams::new(seed, vec![server], now, Duration::from_secs(120));
        p.timeout = Duration::from_secs(timeout.as_secs_f64().ceil().max(1.0) as u64);
        let rng_seed = seed ^ elapsed.as_nanos() as u64;
        Some(token::generate(&PRIVATE_KEY, &p, &mut seeded_rng(rng_seed)).expect("valid token parameters"))
    }
}

/// One datagram crossing the link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub sent: Duration,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub payload: Bytes,
}

impl Datagram {
    /// The type byte: `0x80..` control datagrams, below that connection datagrams.
    pub fn ty(&self) -> u8 {
        self.payload.first().copied().unwrap_or(0)
    }
}

pub struct Pair {
    pub a: Host,
    pub b: Host,
    pub a_addr: SocketAddr,
    pub b_addr: SocketAddr,
    pub start: Instant,
    /// The network's clock, as of the last step.
    pub now: Instant,
    /// The one-way latency of both links, applied from the next step on.
    pub latency: Duration,
    /// Returns `false` to drop a datagram.
    pub pass: Box<dyn FnMut(&Datagram) -> bool>,
    /// Every datagram sent, dropped or not, in order.
    pub log: Vec<Datagram>,
    pub events_a: Vec<Event>,
    pub events_b: Vec<Event>,
    /// When set, the hosts step on this fixed period like an engine loop.
    pub tick: Option<Duration>,
    net: Network,
    stalled: u32,
}

impl Pair {
    pub fn new(a: HostConfig, b: HostConfig) -> Self {
        Self::with_seeds(a, b, 1, 2)
    }

    pub fn with_seeds(a: HostConfig, b: HostConfig, seed_a: u64, seed_b: u64) -> Self {
        Self::in_mode(Mode::Plain, a, b, seed_a, seed_b)
    }

    /// `with_seeds` in `mode`: in secure mode `a` is a client and `b` a server with the
    /// backend's key; connect with [`Mode::token`] for `b_addr`.
    pub fn in_mode(mode: Mode, a: HostConfig, b: HostConfig, seed_a: u64, seed_b: u64) -> Self {
        // The links are perfect: the network's own seed draws nothing that matters.
        let net = Network::new(0);
        let start = net.now();
        let b_addr = "10.0.0.2:5000".parse().expect("address");
        Self {
            a: Host::new(mode.client(a), seeded_rng(seed_a)).expect("valid config"),
            b: Host::new(mode.server(b, b_addr, start), seeded_rng(seed_b)).expect("valid config"),
            a_addr: "10.0.0.1:4000".parse().expect("address"),
            b_addr,
            start,
            now: start,
            latency: 10 * MS,
            pass: Box::new(|_| true),
            log: Vec::new(),
            events_a: Vec::new(),
            events_b: Vec::new(),
            tick: None,
            net,
            stalled: 0,
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// `a` connects to `b`.
    pub fn connect(&mut self) -> PeerId {
        self.connect_with(None)
    }

    /// `a` connects to `b`, with a connect token when one is given (secure mode).
    pub fn connect_with(&mut self, token: Option<&[u8]>) -> PeerId {
        let now = self.now;
        let b = self.b_addr;
        match token {
            Some(t) => self.a.connect_with_token(now, b, t).expect("connect with a token"),
            None => self.a.connect(now, b).expect("connect"),
        }
    }

    /// Advances to the next moment something happens (a delivery or a host deadline, or
    /// the next tick), at most `max` ahead; delivers, and gives both hosts their turn:
    /// each steps, what it sends is logged and, if `pass` lets it, goes onto the link; its
    /// events are kept.
    pub fn advance(&mut self, max: Duration) {
        if self.net.link(self.a_addr, self.b_addr).latency != self.latency {
            self.net.set_link_both(self.a_addr, self.b_addr, LinkConditions::perfect(self.latency));
        }
        let limit = self.now + max;
        let next = match self.tick {
            // An engine loop: read what arrived and step, once per tick.
            Some(tick) => limit.min(self.now + tick),
            None => self.net.next_event([&self.a, &self.b]).map_or(limit, |t| t.min(limit)),
        };
        if next <= self.now {
            self.stalled += 1;
            assert!(
                self.stalled < 10_000,
                "time stands still at {:?}: a {:?} b {:?} in flight {}\n{:?}\n{:?}",
                self.elapsed(),
                self.a.poll_timeout().map(|t| t - self.start),
                self.b.poll_timeout().map(|t| t - self.start),
                self.net.in_flight(),
                self.a.peers().filter_map(|p| self.a.peer_stats(p)).collect::<Vec<_>>(),
                self.b.peers().filter_map(|p| self.b.peer_stats(p)).collect::<Vec<_>>(),
            );
        } else {
            self.stalled = 0;
        }
        self.net.advance_to(next);
        self.now = self.net.now();
        let Self { a, b, a_addr, b_addr, net, pass, log, events_a, events_b, .. } = self;
        net.deliver(&mut [(*a_addr, &mut *a), (*b_addr, &mut *b)]);
        for (host, from, to, events) in [(a, *a_addr, *b_addr, events_a), (b, *b_addr, *a_addr, events_b)] {
            let out = |net: &mut Network, _: &Host, t: Transmit| {
                let d = Datagram { sent: net.elapsed(), from, to: t.remote, payload: t.payload };
                log.push(d.clone());
                // Datagrams to any other address vanish.
                if d.to == to && pass(&d) {
                    net.inject(d.from, d.to, d.payload);
                }
            };
            events.extend(net.turn(host, out));
        }
    }

    /// Runs until `done` holds or `limit` of simulated time passes; returns whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let end = self.now + limit;
        while self.now < end {
            if done(self) {
                return true;
            }
            self.advance(end - self.now);
        }
        done(self)
    }

    /// Runs for `d` of simulated time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(d, |_| false);
    }

    pub fn connected_a(&self) -> Option<PeerId> {
        self.events_a.iter().find_map(|e| match e {
            Event::Connected { peer, .. } => Some(*peer),
            _ => None,
        })
    }

    pub fn connected_b(&self) -> Option<PeerId> {
        self.events_b.iter().find_map(|e| match e {
            Event::Connected { peer, .. } => Some(*peer),
            _ => None,
        })
    }

    /// Connects `a` to `b` and runs until both report `Connected`.
    pub fn establish(&mut self) -> (PeerId, PeerId) {
        self.establish_with(None)
    }

    /// `establish`, with a connect token when one is given (secure mode).
    pub fn establish_with(&mut self, token: Option<&[u8]>) -> (PeerId, PeerId) {
        let pa = self.connect_with(token);
        assert!(self.run_until(5 * Duration::from_secs(1), |p| p.connected_a().is_some() && p.connected_b().is_some()));
        let pb = self.connected_b().expect("b connected");
        assert_eq!(self.connected_a(), Some(pa));
        (pa, pb)
    }
}

/// Payloads received per channel, in order, from a list of events.
pub fn received(events: &[Event], channels: usize) -> Vec<Vec<Bytes>> {
    let mut out = vec![Vec::new(); channels];
    for e in events {
        if let Event::Received { channel, data, .. } = e {
            out[*channel].push(data.clone());
        }
    }
    out
}

pub fn disconnected(events: &[Event]) -> Vec<porous_proto::DisconnectReason> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Disconnected { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}
