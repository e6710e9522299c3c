//! Secure mode end to end, and hostile to it (`docs/security.md`, Secure mode): connect
//! tokens forged, expired, for another server, altered or reused; sealed datagrams
//! bit-flipped, truncated, replayed, reordered; a man in the middle rewriting bytes. Each
//! is counted and dropped, none reaches a channel, nothing panics, and the honest
//! connection goes on.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use porous_proto::Instant;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use porous_proto::sim::{LinkConditions, Network, seeded_rng};
use porous_proto::token::{self, PrivateKey, TokenParams};
use porous_proto::{ConnectError, DisconnectReason, Event, Host, HostConfig, PeerId, SecureConfig, SendMode};

const MS: Duration = Duration::from_millis(1);
/// The Unix time the server's clock anchor says at the start of every test.
const UNIX: u64 = 1_700_000_000;

fn rng(seed: u64) -> rand_pcg::Pcg32 {
    seeded_rng(seed)
}

/// The clock a test of single hosts starts from: a network's, as every harness's.
fn start_time() -> Instant {
    Network::new(0).now()
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

/// A client and a secure server joined by a link with a one-tick delay and a hook: the
/// simulator's network, its links held both ways, carries the datagrams and keeps the
/// clock; each tick hands over everything the last one sent.
struct Net {
    client: Host,
    server: Host,
    /// The network's clock, as of the last tick.
    now: Instant,
    hook: Hook,
    /// Every datagram sent (before the hook), in order.
    log: Vec<(Dir, Vec<u8>)>,
    net: Network,
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
        let mut net = Network::new(0);
        net.set_link_both(client_addr(), server_addr(), LinkConditions::held());
        let start = net.now();
        Self {
            client: Host::new(client_config(), rng(1)).unwrap(),
            server: Host::new(server_config(start), rng(2)).unwrap(),
            now: start,
            hook: Box::new(|_, d| vec![d.to_vec()]),
            log: Vec::new(),
            net,
            client_events: Vec::new(),
            server_events: Vec::new(),
        }
    }

    /// One millisecond: deliver what was sent last tick, then each host's turn (it steps,
    /// what it sends is logged and goes through the hook onto the link, its events are
    /// kept).
    fn tick(&mut self) {
        self.net.advance_to(self.now + MS);
        self.now = self.net.now();
        let Self { client, server, hook, log, net, client_events, server_events, .. } = self;
        net.deliver_held_to(client_addr(), server_addr(), server);
        net.deliver_held_to(server_addr(), client_addr(), client);
        for (host, dir, events) in [(client, Dir::ToServer, client_events), (server, Dir::ToClient, server_events)] {
            let (from, to) = match dir {
                Dir::ToServer => (client_addr(), server_addr()),
                Dir::ToClient => (server_addr(), client_addr()),
            };
            let out = |net: &mut Network, _: &Host, t: porous_proto::Transmit| {
                assert_eq!(t.remote, to);
                for d in hook(dir, &t.payload) {
                    net.inject(from, to, Bytes::from(d));
                }
                log.push((dir, t.payload.to_vec()));
            };
            events.extend(net.turn(host, out));
        }
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

/// Sends `n` numbered reliable packets each way on channel 0, one each way per tick, and
/// runs until they arrive.
fn exchange(net: &mut Net, (c, s): (PeerId, PeerId), tag: &str, n: usize) {
    for i in 0..n {
        net.client.send(c, 0, Bytes::from(format!("{tag} c{i}")), SendMode::Reliable).unwrap();
        net.server.send(s, 0, Bytes::from(format!("{tag} s{i}")), SendMode::Reliable).unwrap();
        net.tick();
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
            .any(|e| matches!(e, Event::Disconnected { reason: DisconnectReason::Remote { code: 7, .. }, .. }))
    );
    assert!(net.client_events.iter().any(|e| matches!(e, Event::Disconnected { reason: DisconnectReason::Local, .. })));
    assert_eq!(net.server.stats().malformed, 0);
    assert_eq!(net.client.stats().malformed, 0);
}

#[test]
fn plain_and_secure_hosts_do_not_mix() {
    let start = start_time();
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

/// The first request a client with `token` sends.
fn first_request(token: &[u8], to: SocketAddr, seed: u64) -> Vec<u8> {
    let start = start_time();
    let mut client = Host::new(client_config(), rng(seed)).unwrap();
    client.connect_with_token(start, to, token).unwrap();
    client.step(start);
    client.poll_transmit().unwrap().payload.to_vec()
}

/// Hands `datagram` from `from` to `server`; what it answered.
fn offer(server: &mut Host, now: Instant, from: SocketAddr, datagram: &[u8]) -> Vec<Bytes> {
    server.handle_datagram(now, from, datagram);
    server.step(now);
    std::iter::from_fn(|| server.poll_transmit().map(|t| t.payload)).collect()
}

#[test]
fn forged_expired_wrong_server_altered_and_reused_tokens_are_dropped_unanswered() {
    let start = start_time();
    let mut server = Host::new(server_config(start), rng(2)).unwrap();
    let spoofer: SocketAddr = "10.0.0.66:6666".parse().unwrap();
    // Forged: sealed with another key.
    let forged = token::generate(&PrivateKey::from_bytes([1; 32]), &params(5), &mut rng(1)).unwrap();
    assert!(offer(&mut server, start, spoofer, &first_request(&forged, server_addr(), 1)).is_empty());
    assert_eq!(server.stats().bad_tokens, 1);
    // Expired: made a minute ago for 30 s; and a good one, offered 31 s later.
    let mut old = params(5);
    (old.created, old.expires) = (UNIX - 60, UNIX - 30);
    assert!(offer(&mut server, start, spoofer, &first_request(&token_for(&old, 2), server_addr(), 2)).is_empty());
    let good = first_request(&token_for(&params(5), 3), server_addr(), 3);
    assert!(offer(&mut server, start + Duration::from_secs(31), spoofer, &good).is_empty());
    assert_eq!(server.stats().expired_tokens, 2);
    // For another server.
    let other: SocketAddr = "10.0.0.3:5000".parse().unwrap();
    let mut elsewhere = params(5);
    elsewhere.server_addresses = vec![other];
    let req = first_request(&token_for(&elsewhere, 4), other, 4);
    assert!(offer(&mut server, start, spoofer, &req).is_empty());
    assert_eq!(server.stats().wrong_server_tokens, 1);
    // Altered: every byte of a good request, flipped in turn.
    let mut dropped = 0;
    for i in 0..good.len() {
        let mut d = good.clone();
        d[i] ^= 0x20;
        assert!(offer(&mut server, start, spoofer, &d).is_empty(), "byte {i} altered and answered");
        dropped += 1;
    }
    let s = server.stats();
    assert_eq!(s.bad_tokens + s.expired_tokens - 2 + s.malformed, 1 + dropped, "each counted once");
    assert_eq!((s.peers, s.pending), (0, 0), "no state for a request that fails");
    assert_eq!(server.poll_event(), None);
    // Reused: accepted from the client's address, then the same token from another.
    assert_eq!(offer(&mut server, start, client_addr(), &good).len(), 1);
    assert!(offer(&mut server, start, spoofer, &good).is_empty());
    let again = first_request(&token_for(&params(5), 3), server_addr(), 9); // same token, new attempt
    assert!(offer(&mut server, start, spoofer, &again).is_empty());
    assert_eq!((server.stats().reused_tokens, server.stats().peers), (2, 1));
    // From the address that holds it, a retry is answered as usual.
    assert_eq!(offer(&mut server, start + MS, client_addr(), &good).len(), 1);
}

#[test]
fn an_honest_client_connects_through_a_flood_of_bad_tokens() {
    let mut net = Net::new();
    let forged = first_request(
        &token::generate(&PrivateKey::from_bytes([1; 32]), &params(5), &mut rng(1)).unwrap(),
        server_addr(),
        1,
    );
    let c = net.client.connect_with_token(net.now, server_addr(), &token_for(&params(8), 8)).unwrap();
    for i in 0..2000u32 {
        let from = SocketAddr::from(([10, 1, (i >> 8) as u8, i as u8], 7000));
        net.server.handle_datagram(net.now, from, &forged);
        if i.is_multiple_of(20) {
            net.tick();
        }
    }
    net.run(300 * MS);
    assert!(net.client_events.iter().any(|e| matches!(e, Event::Connected { peer, .. } if *peer == c)));
    let s = net.server.stats();
    assert_eq!((s.bad_tokens, s.peers), (2000, 1));
}

/// Runs an exchange with `hook` on the link after connecting cleanly; returns the net.
fn under(hook: Hook, n: usize) -> Net {
    let mut net = Net::new();
    let ids = net.connect(&token_for(&params(3), 3));
    net.hook = hook;
    exchange(&mut net, ids, "x", n);
    net.run(Duration::from_secs(2));
    expect_in_order(&net.received_by_server(), "x", 'c', n);
    expect_in_order(&net.received_by_client(), "x", 's', n);
    assert!(net.server_events.iter().chain(&net.client_events).all(|e| !matches!(e, Event::Disconnected { .. })));
    net
}

#[test]
fn bit_flipped_truncated_and_replayed_sealed_datagrams_are_counted_and_dropped() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let injected = Rc::new(RefCell::new((0u64, 0u64))); // (corrupt, replays)
    let seen = Rc::new(RefCell::new(Vec::<Vec<u8>>::new()));
    let (inj, past) = (Rc::clone(&injected), Rc::clone(&seen));
    let mut k = 0usize;
    let net = under(
        Box::new(move |dir, d| {
            if dir != Dir::ToServer || d[0] & 0x80 != 0 {
                return vec![d.to_vec()];
            }
            k += 1;
            let mut flipped = d.to_vec();
            flipped[k % d.len()] ^= 1 << (k % 8);
            let cut = d[..d.len() - 1 - k % 8].to_vec();
            let mut out = vec![d.to_vec(), flipped, cut];
            inj.borrow_mut().0 += 2;
            let mut past = past.borrow_mut();
            if let Some(old) = past.iter().rev().nth(k % 5) {
                out.push(old.clone());
                inj.borrow_mut().1 += 1;
            }
            past.push(d.to_vec());
            out
        }),
        100,
    );
    let (corrupt, replays) = *injected.borrow();
    let s = net.server.stats();
    assert!(corrupt > 100 && replays > 50, "{corrupt} corrupt, {replays} replays");
    // A flipped counter bit may make a corrupt datagram look like a replay: either way
    // it is counted once, and dropped.
    assert_eq!(s.malformed + s.replayed, corrupt + replays);
    assert!(s.replayed >= replays);
}

#[test]
fn reordered_sealed_datagrams_arrive_once_and_those_beyond_the_window_are_dropped() {
    use std::cell::RefCell;
    use std::rc::Rc;
    // Each tick's datagrams in reverse, and one datagram held back 1,100 datagrams.
    let held = Rc::new(RefCell::new(None::<Vec<u8>>));
    let h = Rc::clone(&held);
    let mut count = 0;
    let mut batch: Vec<Vec<u8>> = Vec::new();
    let mut net = Net::new();
    let ids = net.connect(&token_for(&params(4), 4));
    net.hook = Box::new(move |dir, d| {
        if dir != Dir::ToServer {
            return vec![d.to_vec()];
        }
        count += 1;
        if count == 10 {
            *h.borrow_mut() = Some(d.to_vec());
            return vec![];
        }
        batch.push(d.to_vec());
        if batch.len() < 3 {
            return vec![];
        }
        let mut out = std::mem::take(&mut batch);
        out.reverse();
        out
    });
    // 1,500 unreliable packets of 1,000 bytes: one datagram each.
    for i in 0..1500 {
        let _ = net.client.send(ids.0, 1, Bytes::from(vec![i as u8; 1000]), SendMode::Unreliable);
        net.tick();
    }
    exchange(&mut net, ids, "late", 20);
    let before = net.server.stats().replayed;
    let late = held.borrow_mut().take().unwrap();
    net.server.handle_datagram(net.now, client_addr(), &late);
    assert_eq!(net.server.stats().replayed, before + 1, "beyond the window: dropped, counted");
    expect_in_order(&net.received_by_server(), "late", 'c', 20);
}

#[test]
fn a_man_in_the_middle_rewriting_bytes_changes_nothing_but_counters() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let rewritten = Rc::new(RefCell::new([0u64; 2]));
    let r = Rc::clone(&rewritten);
    let mut k = 0usize;
    let mut net = Net::new();
    // From the first datagram on (the request and the replies too), every third one in
    // each direction has one byte rewritten, at a position that moves through all.
    net.hook = Box::new(move |dir, d| {
        k += 1;
        if !k.is_multiple_of(3) {
            return vec![d.to_vec()];
        }
        let mut d = d.to_vec();
        let at = (k / 3) % d.len();
        d[at] = d[at].wrapping_add(1 + (k % 255) as u8);
        r.borrow_mut()[usize::from(dir == Dir::ToClient)] += 1;
        vec![d]
    });
    let ids = net.connect(&token_for(&params(6), 6));
    exchange(&mut net, ids, "mitm", 100);
    net.run(Duration::from_secs(2));
    expect_in_order(&net.received_by_server(), "mitm", 'c', 100);
    expect_in_order(&net.received_by_client(), "mitm", 's', 100);
    let [to_server, to_client] = *rewritten.borrow();
    let (s, c) = (net.server.stats(), net.client.stats());
    let server_counted = s.malformed + s.replayed + s.bad_tokens + s.expired_tokens + s.wrong_server_tokens;
    assert_eq!(server_counted, to_server, "every rewritten datagram to the server counted once");
    assert_eq!(c.malformed + c.replayed, to_client, "every rewritten datagram to the client counted once");
    assert_eq!(net.server_events.iter().filter(|e| matches!(e, Event::Connected { .. })).count(), 1);
}

#[test]
fn no_secure_reply_outgrows_its_request_and_an_unproven_address_gets_no_more_than_it_sent() {
    for challenge_above in [64, 0] {
        let start = start_time();
        let mut config = server_config(start);
        config.challenge_above = challenge_above;
        let mut server = Host::new(config, rng(2)).unwrap();
        let req = first_request(&token_for(&params(5), 5), server_addr(), 5);
        let (mut sent, mut got) = (0, 0);
        for i in 0..60u64 {
            let now = start + Duration::from_millis(100 * i);
            sent += req.len();
            for reply in offer(&mut server, now, client_addr(), &req) {
                assert!(reply.len() <= req.len(), "a reply of {} bytes to a request of {}", reply.len(), req.len());
                got += reply.len();
            }
            // The server never sends on its own to an address that has not answered.
            server.step(now + 50 * MS);
            assert_eq!(server.poll_transmit(), None);
        }
        assert!(got > 0 && got <= sent, "{got} bytes out for {sent} in");
    }
}

#[test]
fn the_documented_request_sizes_hold() {
    // docs/wire-format.md, Sealed request: one IPv4 address and no user data, and the
    // largest token with a cookie.
    let mut small = params(1);
    small.user_data.clear();
    assert_eq!(first_request(&token_for(&small, 1), server_addr(), 1).len(), 185);
    let mut big = params(1);
    big.server_addresses = vec!["[2001:db8::1]:5000".parse().unwrap(); 31];
    big.server_addresses.push(server_addr());
    big.user_data = vec![9; 256];
    let t = token_for(&big, 2);
    let request = first_request(&t, server_addr(), 2);
    // The client checked it against the largest it may send: with a cookie, 16 more.
    assert!(request.len() + 16 <= 1200, "{}", request.len());
}

/// When, in a victim's handshake, an attacker's spoofed request arrives.
#[derive(Clone, Copy, Debug)]
enum Moment {
    /// Before the victim's first request: the server's handshake at the victim's address
    /// is the attacker's.
    Before,
    /// After the server answered the victim's request, before the victim's `Ack` came back.
    Answered,
    /// Once both sides are connected.
    Connected,
}

/// Issue 32, item 1: an off-path attacker holding a valid token of its own (any player can
/// get one) sends one connect request with the victim client's source address. Whenever it
/// arrives, the victim connects with its own token's identity, its connection's keys stay
/// its own (data flows both ways), and nobody is told `Connected` falsely: before the fix,
/// a request arriving after the server's first reply restarted the handshake with the
/// attacker's token, so the victim was told `Connected`, its datagrams then failed the
/// server's check, and 10 s later it was told `Disconnected(Timeout)`; the server never
/// reported it connected. With manual admission the application is asked about each
/// request, and accepts them all (the attacker's token is as valid as the victim's).
#[test]
fn a_spoofed_request_with_another_valid_token_never_derails_a_handshake() {
    let attack = first_request(&token_for(&params(666), 66), server_addr(), 66);
    for manual in [false, true] {
        for moment in [Moment::Before, Moment::Answered, Moment::Connected] {
            let mut net = Net::new();
            if manual {
                let mut config = server_config(net.now);
                config.manual_accept = true;
                net.server = Host::new(config, rng(2)).unwrap();
            }
            let case = format!("manual {manual}, {moment:?}");
            let mut attacked = false;
            if let Moment::Before = moment {
                net.server.handle_datagram(net.now, client_addr(), &attack);
                attacked = true;
            }
            let c = net.client.connect_with_token(net.now, server_addr(), &token_for(&params(77), 9)).unwrap();
            let mut asked = 0;
            for _ in 0..12_000 {
                let now_is_the_moment = match moment {
                    Moment::Before => false,
                    Moment::Answered => net.log.iter().any(|(d, _)| *d == Dir::ToClient),
                    Moment::Connected => net.server_events.iter().any(|e| matches!(e, Event::Connected { .. })),
                };
                if !attacked && now_is_the_moment {
                    if let Moment::Answered = moment {
                        // The victim's `Ack` is yet to reach the server: the handshake is
                        // under way.
                        assert!(net.client_events.is_empty() && net.server_events.len() <= 1, "{case}: too late");
                    }
                    net.server.handle_datagram(net.now, client_addr(), &attack);
                    attacked = true;
                }
                net.tick();
                // The application accepts every request it is asked about.
                let requests: Vec<PeerId> = net.server_events[asked..]
                    .iter()
                    .filter_map(|e| match e {
                        Event::ConnectRequest { peer, .. } => Some(*peer),
                        _ => None,
                    })
                    .collect();
                asked = net.server_events.len();
                for peer in requests {
                    net.server.accept(net.now, peer).unwrap();
                }
            }
            assert!(attacked, "{case}");
            // The victim is connected, once, and was never told otherwise.
            let client: Vec<&Event> = net.client_events.iter().collect();
            assert!(
                matches!(client[..], [Event::Connected { peer, .. }] if *peer == c),
                "{case}: the victim's events {client:?}"
            );
            // The server's application knows it as the backend vouched for it.
            let connected: Vec<(Option<u64>, Bytes)> = net
                .server_events
                .iter()
                .filter_map(|e| match e {
                    Event::Connected { client_id, data, remote, .. } if *remote == client_addr() => {
                        Some((*client_id, data.clone()))
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(connected, [(Some(77), Bytes::from_static(b"player 77"))], "{case}");
            let s = net.server_events.iter().find_map(|e| match e {
                Event::Connected { peer, .. } => Some(*peer),
                _ => None,
            });
            assert!(
                net.server_events.iter().all(|e| !matches!(e, Event::Disconnected { peer, .. } if Some(*peer) == s)),
                "{case}: {:?}",
                net.server_events
            );
            if let Moment::Before = moment {
                // The attacker's handshake held the address until the victim proved it
                // receives there (it echoed the challenge its request got), and then gave
                // way: the application, if it was asked about it, hears it is stale.
                assert!(net.server.stats().challenged >= 1, "{case}");
                let stale = net
                    .server_events
                    .iter()
                    .filter(|e| matches!(e, Event::Disconnected { reason: DisconnectReason::Stale, .. }))
                    .count();
                assert_eq!(stale, usize::from(manual), "{case}: {:?}", net.server_events);
            }
            // The connection's keys are the victim's: data flows both ways.
            exchange(&mut net, (c, s.unwrap()), "after", 20);
            expect_in_order(&net.received_by_server(), "after", 'c', 20);
            expect_in_order(&net.received_by_client(), "after", 's', 20);
            assert_eq!(net.server.stats().peers, 1, "{case}");
        }
    }
}

/// A server made before it knows its address (bound to port 0, behind a load balancer)
/// refuses every token until it is told, then admits tokens naming the address it was
/// told and still refuses the others; the connections it made stay as they are. Only a
/// secure server takes addresses, and no more than a token can name.
#[test]
fn a_server_told_its_address_after_it_was_made_admits_tokens_naming_it() {
    let mut net = Net::new();
    let mut config = server_config(net.now);
    if let Some(s) = config.secure.as_mut() {
        s.public_addresses.clear();
    }
    net.server = Host::new(config, rng(2)).unwrap();
    let c = net.client.connect_with_token(net.now, server_addr(), &token_for(&params(5), 5)).unwrap();
    net.run(300 * MS);
    assert!(net.server_events.is_empty(), "{:?}", net.server_events);
    assert!(net.server.stats().wrong_server_tokens > 0);
    assert_eq!(net.server.stats().peers, 0);

    net.server.set_public_addresses(vec![server_addr()]).unwrap();
    assert_eq!(net.server.config().secure.as_ref().map(|s| s.public_addresses.clone()), Some(vec![server_addr()]));
    net.run(2000 * MS);
    assert!(net.client_events.iter().any(|e| matches!(e, Event::Connected { peer, .. } if *peer == c)));
    let s = net.server_events.iter().find_map(|e| match e {
        Event::Connected { peer, client_id, .. } => Some((*peer, *client_id)),
        _ => None,
    });
    let (s, client_id) = s.expect("the server admitted the token once told its address");
    assert_eq!(client_id, Some(5));
    exchange(&mut net, (c, s), "told", 10);
    expect_in_order(&net.received_by_server(), "told", 'c', 10);

    // Moved elsewhere: tokens for the old address are refused, the connection goes on.
    let refused_before = net.server.stats().wrong_server_tokens;
    let elsewhere: SocketAddr = "198.51.100.7:5000".parse().unwrap();
    net.server.set_public_addresses(vec![elsewhere]).unwrap();
    let mut late = Host::new(client_config(), rng(11)).unwrap();
    late.connect_with_token(net.now, server_addr(), &token_for(&params(6), 6)).unwrap();
    late.step(net.now);
    let request = late.poll_transmit().unwrap().payload;
    net.server.handle_datagram(net.now, "10.0.0.3:4000".parse().unwrap(), &request);
    assert_eq!(net.server.stats().wrong_server_tokens, refused_before + 1);
    exchange(&mut net, (c, s), "still", 5);
    expect_in_order(&net.received_by_server(), "still", 'c', 5);

    // Only a secure server takes addresses, and at most a token's worth.
    let mut plain = Host::new(HostConfig::default(), rng(12)).unwrap();
    assert!(matches!(plain.set_public_addresses(vec![server_addr()]), Err(porous_proto::ConfigError::Secure(_))));
    let mut client = Host::new(client_config(), rng(13)).unwrap();
    assert!(matches!(client.set_public_addresses(vec![server_addr()]), Err(porous_proto::ConfigError::Secure(_))));
    let too_many = vec![server_addr(); token::MAX_SERVER_ADDRESSES + 1];
    assert_eq!(
        net.server.set_public_addresses(too_many),
        Err(porous_proto::ConfigError::PublicAddresses(token::MAX_SERVER_ADDRESSES + 1))
    );
}
