//! Hostile input, each attack with the defence that stops it (docs/security.md):
//! connect floods from spoofed addresses, amplification, blind spoofing, optimistic
//! acknowledgements, and memory exhaustion by an authenticated but hostile peer.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use porous_proto::Instant;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use porous_proto::sim::seeded_rng;
use porous_proto::wire::{
    AckRange, ChannelSet, ConnectRequest, Control, Data, DataHeader, DataWriter, Expand, Fragment, Key, Message,
    MessageKind,
};
use porous_proto::{DisconnectReason, Event, Host, HostConfig, PeerState, SendMode, Transmit};

const MS: Duration = Duration::from_millis(1);
/// The most a pending handshake may hold, connect data aside: its slot in the peer table
/// (the peer with its session's room inline, about 1.8 KB in a test build, which carries
/// the fuzzing hooks) and its handshake state (about 320 bytes). The session's room is the
/// price of a connected peer's state being one record (`docs/notes/server-scale.md`, Part 8);
/// `max_pending` bounds how many there are.
const PENDING_HANDSHAKE_MAX: usize = 2560;
const SEC: Duration = Duration::from_secs(1);

fn addr(a: u8, b: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 1, a, b], port))
}

const SERVER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)), 9000);

fn server(config: HostConfig) -> Host {
    Host::new(config, seeded_rng(1)).unwrap()
}

fn drain(host: &mut Host) -> Vec<Transmit> {
    std::iter::from_fn(|| host.poll_transmit()).collect()
}

fn request(nonce: u32) -> ConnectRequest {
    ConnectRequest {
        nonce,
        frame_base: 1000,
        packet_base: 0,
        app_version: 0,
        channels: 4,
        mtu: 1200,
        max_packet: 1 << 20,
        bandwidth_in: 0,
        bandwidth_out: 0,
        cookie: None,
        unordered: ChannelSet::EMPTY,
    }
}

fn encode(c: &Control<'_>, key: Key) -> Vec<u8> {
    let mut out = Vec::new();
    c.encode(key, &mut out);
    out
}

/// A client that speaks the wire format itself: it does the handshake honestly, then
/// sends whatever it likes, with valid keys.
struct Hostile {
    addr: SocketAddr,
    req: ConnectRequest,
    server: Option<ConnectRequest>,
    next_frame: u32,
    newest_server_frame: Option<u32>,
}

impl Hostile {
    /// Completes the handshake; the host must accept it.
    fn connect(host: &mut Host, now: Instant, addr: SocketAddr, req: ConnectRequest) -> Self {
        let h = Self::try_connect(host, now, addr, req);
        assert!(h.server.is_some(), "the server answered with its request");
        h
    }

    /// Completes the handshake if the host accepts it (`server` stays `None` if refused).
    fn try_connect(host: &mut Host, now: Instant, addr: SocketAddr, req: ConnectRequest) -> Self {
        let mut h = Self { addr, req, server: None, next_frame: req.frame_base, newest_server_frame: None };
        host.handle_datagram(now, addr, &encode(&Control::request(req), Key::version()));
        host.step(now);
        for t in drain(host) {
            if let Ok(Control::RequestAck(server)) = Control::decode(&t.payload, Key::reply(req.nonce)) {
                h.server = Some(server);
            }
        }
        if let Some(server) = h.server {
            host.handle_datagram(now, addr, &encode(&Control::Ack, Key::reply(server.nonce)));
            host.step(now);
        }
        h
    }

    fn keys(&self) -> (Key, Key) {
        let s = self.server.map_or(0, |s| s.nonce);
        (Key::connection(self.req.nonce, s), Key::connection(s, self.req.nonce))
    }

    /// A frame carrying `msgs` (ids sent wide, so no window reasoning is needed), with
    /// optional acknowledgements and a ping echo.
    fn frame(&mut self, msgs: &[Message<'_>], acks: &[AckRange], echo: Option<u8>) -> Vec<u8> {
        let id = self.next_frame;
        self.next_frame = self.next_frame.wrapping_add(1);
        let header = DataHeader { frame: Some((id, 4)), ping: None, ping_ack: echo, acks, ack_delay: 0 };
        let mut out = BytesMut::new();
        let mut w = DataWriter::new(&mut out, self.keys().0, &header);
        for (i, m) in msgs.iter().enumerate() {
            w.message(m, false, i + 1 == msgs.len());
        }
        w.finish();
        out.to_vec()
    }

    /// Reads the server's datagrams: the newest frame id, and the pings to echo.
    fn read(&mut self, transmits: &[Transmit]) -> Vec<u8> {
        let mut pings = Vec::new();
        for t in transmits.iter().filter(|t| t.remote == self.addr) {
            let ctx = ServerIds {
                newest: self.newest_server_frame,
                base: self.server.map_or(0, |s| s.frame_base),
                packet_base: self.server.map_or(0, |s| s.packet_base),
                our_next_frame: self.next_frame,
            };
            if let Ok(d) = Data::decode(&t.payload, self.keys().1, &ctx) {
                if let Some(k) = d.frame_id
                    && self.newest_server_frame.is_none_or(|n| k.wrapping_sub(n) < 1 << 31)
                {
                    self.newest_server_frame = Some(k);
                }
                pings.extend(d.ping);
            }
        }
        pings
    }
}

/// What the hostile client knows to expand the server's truncated ids. The tests send
/// far fewer than 2^15 packets, so packet ids expand around the server's first one.
struct ServerIds {
    newest: Option<u32>,
    base: u32,
    packet_base: u32,
    our_next_frame: u32,
}

impl Expand for ServerIds {
    fn frame_id(&self, t: u32, bytes: u32) -> u32 {
        porous_proto::seq::SeqSpace::FRAME.expand(t, 8 * bytes, self.newest.map_or(self.base, |n| n.wrapping_add(1)))
    }
    fn ack_largest(&self, t: u16) -> u32 {
        porous_proto::seq::SeqSpace::FRAME.expand_below(u32::from(t), 16, self.our_next_frame)
    }
    fn packet_id(&self, _: u8, t: u16) -> u32 {
        porous_proto::seq::SeqSpace::PACKET.expand(u32::from(t), 16, self.packet_base)
    }
}

/// The granule of a connection at 1,200 bytes (73), and the payload of a full fragment
/// there (16 granules): fragment indices and counts are in granules.
fn granule() -> usize {
    porous_proto::wire::granule(1200)
}

fn full_fragment() -> usize {
    porous_proto::wire::fragment_cut(1200, granule())
}

/// What a fragmented packet of `count` granules reserves: its granules and their bitmap.
fn reserved(count: usize) -> usize {
    count * granule() + count.div_ceil(64) * 8
}

fn fragment<'a>(id: u32, mode: SendMode, index: u32, count: u32, payload: &'a [u8]) -> Message<'a> {
    Message {
        kind: MessageKind::Fragment(mode),
        channel: 0,
        id,
        dependency: 0,
        fragment: Fragment { index, count },
        payload,
    }
}

#[test]
fn a_spoofed_connect_flood_allocates_little_and_a_real_client_still_gets_in() {
    let mut config = HostConfig::default();
    config.max_pending = 64;
    config.challenge_above = 16;
    let mut host = server(config);
    let t0 = Instant::now();
    // 20,000 requests from spoofed addresses that never answer.
    for i in 0..20_000u32 {
        let from = addr((i >> 8) as u8, i as u8, 1024 + (i % 5000) as u16);
        host.handle_datagram(
            t0 + i * Duration::from_micros(10),
            from,
            &encode(&Control::request(request(i)), Key::version()),
        );
    }
    host.step(t0 + Duration::from_millis(200));
    drain(&mut host);
    let s = host.stats();
    assert!(s.pending <= 64, "pending {}", s.pending);
    assert!(host.peers().count() <= 64);
    assert!(s.challenged >= 19_000, "the host switched to stateless cookies: {}", s.challenged);
    // Per peer, not total minus baseline: the transmit queue held 20,000 replies
    // until the drain above, and its capacity stays.
    let per_pending = host.memory_usage().peers / s.pending.max(1);
    eprintln!("flood: {} pending, {} challenged, {} bytes per pending peer", s.pending, s.challenged, per_pending);
    assert!(per_pending < PENDING_HANDSHAKE_MAX, "a pending handshake costs {per_pending} bytes");

    // A real client, under the flood, answers the challenge and gets in.
    let client_addr: SocketAddr = "10.9.9.9:5000".parse().unwrap();
    let mut client = Host::new(HostConfig::default(), seeded_rng(2)).unwrap();
    let t = t0 + Duration::from_secs(1);
    let peer = client.connect(t, SERVER).unwrap();
    let mut connected = false;
    for round in 0..20u32 {
        let now = t + round * 10 * MS;
        client.step(now);
        for tr in drain(&mut client) {
            host.handle_datagram(now, client_addr, &tr.payload);
        }
        host.step(now);
        for tr in drain(&mut host) {
            if tr.remote == client_addr {
                client.handle_datagram(now, SERVER, &tr.payload);
            }
        }
        while let Some(e) = client.poll_event() {
            connected |= matches!(e, Event::Connected { .. });
        }
    }
    assert!(connected, "the client connected through the challenge");
    assert!(client.peer_stats(peer).is_some());
    assert!(host.stats().challenged > s.challenged);
}

#[test]
fn pending_handshakes_are_capped_and_an_answered_one_is_never_dropped() {
    let mut config = HostConfig::default();
    config.max_pending = 8;
    config.challenge_above = 1000; // no cookies: the cap alone
    let mut host = server(config);
    let t0 = Instant::now();
    for i in 0..100u32 {
        host.handle_datagram(t0, addr(0, i as u8, 2000), &encode(&Control::request(request(i)), Key::version()));
    }
    assert_eq!(host.stats().pending, 8);
    assert_eq!(host.stats().handshakes_deferred, 92);
    // The eight answered first remain: their clients may already count as connected.
    // The rest got no answer at all, and retry.
    assert!(host.peer_by_addr(addr(0, 0, 2000)).is_some() && host.peer_by_addr(addr(0, 7, 2000)).is_some());
    assert!(host.peer_by_addr(addr(0, 8, 2000)).is_none());
    assert_eq!(drain(&mut host).len(), 8, "one reply per pending handshake, none to the deferred");
    // Unanswered handshakes time out, and a retried request then gets in.
    let later = t0 + host.config().peer.connect_timeout;
    host.step(later);
    assert_eq!(host.stats().pending, 0);
    host.handle_datagram(later, addr(0, 50, 2000), &encode(&Control::request(request(50)), Key::version()));
    assert_eq!(host.stats().pending, 1);
}

#[test]
fn no_reply_before_a_connection_is_larger_than_its_request() {
    let t0 = Instant::now();
    let mut worst: f64 = 0.0;
    let mut check = |host: &mut Host, req: &[u8], from: SocketAddr| {
        host.handle_datagram(t0, from, req);
        host.step(t0);
        for t in drain(host) {
            worst = worst.max(t.payload.len() as f64 / req.len() as f64);
            assert!(t.payload.len() <= req.len(), "{} byte reply to a {} byte request", t.payload.len(), req.len());
        }
    };
    let req = encode(&Control::request(request(1)), Key::version());
    // Accepted: request+ack; challenged: cookie; refused three ways.
    check(&mut server(HostConfig::default()), &req, addr(1, 1, 1));
    let mut c = HostConfig::default();
    c.challenge_above = 0;
    check(&mut server(c), &req, addr(1, 1, 2));
    let mut c = HostConfig::default();
    c.peer.app_version = 3;
    check(&mut server(c), &req, addr(1, 1, 3));
    let mut c = HostConfig::default();
    c.accept_incoming = false;
    check(&mut server(c), &req, addr(1, 1, 4));
    let mut c = HostConfig::default();
    c.max_peers = 1;
    let mut full = server(c);
    full.connect(t0, addr(9, 9, 9)).unwrap();
    check(&mut full, &req, addr(1, 1, 5));
    // A connected host answering a stale request, and a duplicate request.
    let mut h = server(HostConfig::default());
    let hostile = Hostile::connect(&mut h, t0, addr(2, 2, 2), request(7));
    assert!(hostile.server.is_some());
    check(&mut h, &encode(&Control::request(request(8)), Key::version()), addr(2, 2, 2));
    check(&mut h, &encode(&Control::request(request(7)), Key::version()), addr(2, 2, 2));
    eprintln!("largest reply / request ratio before a connection: {worst:.2}");
    assert!(worst <= 1.0);
    // A request too short to be padded gets no answer at all.
    let mut h = server(HostConfig::default());
    h.handle_datagram(t0, addr(3, 3, 3), &req[..40]);
    h.step(t0);
    assert!(drain(&mut h).is_empty());
}

#[test]
fn an_unproven_address_never_gets_more_bytes_than_it_sent() {
    // One spoofed request, then silence: over the whole life of the half-open handshake
    // (its connect timeout and beyond) the host sends the victim no more than the request
    // it received. It once resent its reply on a timer: 7 replies, 7x the request.
    let t0 = Instant::now();
    for (name, config) in [
        ("accepted", HostConfig::default()),
        ("challenged", {
            let mut c = HostConfig::default();
            c.challenge_above = 0;
            c
        }),
    ] {
        let mut host = server(config);
        let victim = addr(5, 5, 5);
        let req = encode(&Control::request(request(77)), Key::version());
        host.handle_datagram(t0, victim, &req);
        let mut now = t0;
        let mut sent = 0;
        while now < t0 + Duration::from_secs(20) {
            host.step(now);
            sent += drain(&mut host).iter().filter(|t| t.remote == victim).map(|t| t.payload.len()).sum::<usize>();
            now = host.poll_timeout().map_or(now + 100 * MS, |t| t.max(now + MS));
        }
        assert!(sent > 0 && sent <= req.len(), "{name}: {sent} bytes sent for a {} byte request", req.len());
        assert_eq!(host.peers().count(), 0, "{name}: the half-open handshake timed out");
    }
}

#[test]
fn a_blind_attacker_can_neither_inject_data_nor_disconnect() {
    let t0 = Instant::now();
    let mut host = server(HostConfig::default());
    let client = addr(4, 4, 4);
    let mut hostile = Hostile::connect(&mut host, t0, client, request(11));
    let peer = host.peer_by_addr(client).unwrap();
    while host.poll_event().is_some() {}
    // The attacker knows both addresses and ports but not the nonces: it guesses.
    let payload = [b'X'; 20];
    for guess in 0..2000u32 {
        let keyed = |key: Key| {
            let header = DataHeader { frame: Some((1000 + guess, 4)), ..Default::default() };
            let mut out = BytesMut::new();
            let mut w = DataWriter::new(&mut out, key, &header);
            w.message(&fragment(guess, SendMode::Reliable, 0, 1, &payload), false, true);
            w.finish();
            out
        };
        host.handle_datagram(t0, client, &keyed(Key::connection(guess, guess.wrapping_mul(7))));
        host.handle_datagram(t0, client, &encode(&Control::Disconnect { code: 0 }, Key::connection(guess, 1)));
    }
    host.step(t0);
    assert!(std::iter::from_fn(|| host.poll_event()).next().is_none(), "nothing got through");
    assert_eq!(host.peer_stats(peer).unwrap().state, PeerState::Connected);
    assert!(host.stats().malformed >= 4000);
    // With the real keys (what only the two ends, or an on-path observer, know) the same
    // datagrams work: the check is what stops the blind attacker.
    let msg = fragment(0, SendMode::Reliable, 0, 1, &payload);
    let frame = hostile.frame(&[msg], &[], None);
    host.handle_datagram(t0, client, &frame);
    assert!(matches!(host.poll_event(), Some(Event::Received { .. })));
    host.handle_datagram(t0, client, &encode(&Control::Disconnect { code: 0 }, hostile.keys().0));
    assert!(matches!(
        host.poll_event(),
        Some(Event::Disconnected { reason: DisconnectReason::Remote { code: 0, .. }, .. })
    ));
}

#[test]
fn a_peer_acknowledging_what_it_never_received_is_caught() {
    let t0 = Instant::now();
    let mut host = server(HostConfig::default());
    let client = addr(5, 5, 5);
    let mut hostile = Hostile::connect(&mut host, t0, client, request(21));
    let peer = host.peer_by_addr(client).unwrap();
    let base = hostile.server.unwrap().frame_base;
    let mut ended = None;
    let mut last = None;
    for round in 0..2000u32 {
        let now = t0 + round * MS;
        let _ = host.send(peer, 0, Bytes::from_static(&[1; 100]), SendMode::Unreliable);
        // And bulk: the liar wants the congestion window open for it.
        while host.send(peer, 1, Bytes::from_static(&[2; 1000]), SendMode::Reliable).is_ok() {}
        host.step(now);
        last = host.peer_stats(peer).or(last);
        let out = drain(&mut host);
        hostile.read(&out);
        // Optimistic acknowledgement: everything from the first frame to the newest,
        // received or not, to keep the server's congestion window open.
        if let Some(newest) = hostile.newest_server_frame {
            let acks = [AckRange { first: newest.wrapping_sub(200).max(base), last: newest }];
            let ack = hostile.frame(&[], &acks, None);
            host.handle_datagram(now, client, &ack);
        }
        while let Some(e) = host.poll_event() {
            if let Event::Disconnected { reason, .. } = e {
                ended = Some((round, reason));
            }
        }
        if ended.is_some() {
            break;
        }
    }
    let (round, reason) = ended.expect("the liar was caught");
    assert_eq!(reason, DisconnectReason::Misbehaving);
    // The controller's only input is acknowledgements: what the liar gained is what the
    // server sent before a skipped id gave it away, about 128 frames on average.
    let s = last.expect("stats while connected");
    assert!(s.transfer.frames_sent < 1_024, "the liar got {} frames before it was caught", s.transfer.frames_sent);
    eprintln!(
        "optimistic acknowledgements caught after {round} rounds, {} frames ({} bytes); the model's bandwidth then {} B/s",
        s.transfer.frames_sent, s.transfer.bytes_sent, s.congestion.bandwidth
    );
}

#[test]
fn endless_unfinished_fragments_stay_within_the_reassembly_cap() {
    let t0 = Instant::now();
    let mut config = HostConfig::default();
    config.peer.max_reassembly_bytes = 256 * 1024;
    let mut host = server(config);
    let client = addr(6, 6, 6);
    let mut hostile = Hostile::connect(&mut host, t0, client, request(31));
    let peer = host.peer_by_addr(client).unwrap();
    let chunk = vec![7u8; full_fragment()];
    let mut worst = 0;
    let mut refused_before = 0;
    // 30,000 first fragments of packets that never complete, in every mode, each
    // claiming 40 fragments (640 granules).
    let count = 40 * 16;
    for id in 0..30_000u32 {
        let mode = [SendMode::Unreliable, SendMode::Reliable, SendMode::Passive][id as usize % 3];
        let f = hostile.frame(&[fragment(id % 60_000, mode, 0, count, &chunk)], &[], None);
        host.handle_datagram(t0 + id * Duration::from_micros(100), client, &f);
        if id % 1000 == 0 {
            let s = host.peer_stats(peer).unwrap();
            worst = worst.max(s.reassembly_bytes);
            refused_before = s.frames_refused;
        }
    }
    let s = host.peer_stats(peer).unwrap();
    worst = worst.max(s.reassembly_bytes);
    let bound = 256 * 1024 + 4 * 3 * (reserved(count as usize) + 200);
    eprintln!(
        "unfinished fragments: reassembly peaked at {worst} bytes (bound {bound}), {} frames held back",
        s.frames_refused
    );
    assert!(worst <= bound, "{worst} > {bound}");
    assert!(s.frames_refused > refused_before.min(1), "reliable fragments beyond the cap were held back");
    assert!(host.memory_usage().total < 4 * bound, "{:?}", host.memory_usage());
}

#[test]
fn a_peer_that_never_acknowledges_fills_queues_only_to_their_caps() {
    let t0 = Instant::now();
    let mut config = HostConfig::default();
    config.peer.channels[0].max_queued_bytes = 64 * 1024;
    config.peer.max_packet_size = 16 * 1024;
    let mut host = server(config);
    let client = addr(7, 7, 7);
    let mut hostile = Hostile::connect(&mut host, t0, client, request(41));
    let peer = host.peer_by_addr(client).unwrap();
    let mut full = 0;
    for round in 0..5000u32 {
        let now = t0 + round * MS;
        match host.send(peer, 0, Bytes::from(vec![3u8; 1000]), SendMode::Reliable) {
            Ok(()) => {}
            Err(porous_proto::SendError::QueueFull { channel: 0, .. }) => full += 1,
            Err(e) => panic!("{e}"),
        }
        host.step(now);
        let out = drain(&mut host);
        // It stays alive (echoing pings, with data frames of its own) but acknowledges nothing.
        let pings = hostile.read(&out);
        if let Some(&p) = pings.last() {
            let keepalive = hostile.frame(&[], &[], Some(p));
            host.handle_datagram(now, client, &keepalive);
        }
    }
    let s = host.peer_stats(peer).unwrap();
    assert_eq!(s.state, PeerState::Connected, "kept alive");
    assert!(full > 4000, "send reported the full queue {full} times");
    assert!(s.queued_bytes <= 64 * 1024, "{}", s.queued_bytes);
    assert!(host.memory_usage().total < 1 << 20, "{:?}", host.memory_usage());
}

#[test]
fn out_of_range_window_acks_and_dependencies_change_nothing() {
    let t0 = Instant::now();
    let mut host = server(HostConfig::default());
    let client = addr(8, 8, 8);
    let mut hostile = Hostile::connect(&mut host, t0, client, request(51));
    let peer = host.peer_by_addr(client).unwrap();
    for i in 0..10 {
        host.send(peer, 1, Bytes::from_static(b"state"), SendMode::Reliable).unwrap();
        host.step(t0 + i * MS);
    }
    drain(&mut host);
    let p = [0u8; 8];
    let bogus = [
        // Window acknowledgements for ids never sent, not spaced, far away.
        Message {
            kind: MessageKind::WindowAck,
            channel: 1,
            id: 8191,
            dependency: 0,
            fragment: Fragment::WHOLE,
            payload: &[],
        },
        Message {
            kind: MessageKind::WindowAck,
            channel: 1,
            id: 5,
            dependency: 0,
            fragment: Fragment::WHOLE,
            payload: &[],
        },
        Message {
            kind: MessageKind::WindowAck,
            channel: 3,
            id: 0x7F_FFFF,
            dependency: 0,
            fragment: Fragment::WHOLE,
            payload: &[],
        },
        // A dependency on a packet that does not exist, a fragment of a packet too large,
        // a packet far outside the window, a sentinel on an unspaced id, a channel that
        // does not exist.
        Message { dependency: 65_535, ..fragment(3, SendMode::Reliable, 0, 1, &p) },
        fragment(4, SendMode::Reliable, 0, 60_000, &p),
        fragment(0x40_0000, SendMode::Reliable, 0, 1, &p),
        Message { kind: MessageKind::Sentinel, payload: &[], ..fragment(6, SendMode::Unreliable, 0, 1, &p) },
        Message { channel: 200, ..fragment(0, SendMode::Reliable, 0, 1, &p) },
    ];
    for m in &bogus {
        let f = hostile.frame(std::slice::from_ref(m), &[], None);
        host.handle_datagram(t0, client, &f);
    }
    host.step(t0 + 20 * MS);
    let s = host.peer_stats(peer).unwrap();
    assert!(s.protocol_violations >= 6, "{}", s.protocol_violations);
    assert_eq!(s.state, PeerState::Connected);
    // The stalled dependency holds back only its own channel: an honest packet on
    // another channel is delivered.
    while host.poll_event().is_some() {}
    let ok = hostile.frame(&[Message { channel: 2, ..fragment(0, SendMode::Reliable, 0, 1, b"fine") }], &[], None);
    host.handle_datagram(t0, client, &ok);
    assert!(matches!(host.poll_event(), Some(Event::Received { channel: 2, .. })));
    // The sender's window on channel 1 did not move on the bogus acknowledgements.
    assert!(host.send(peer, 1, Bytes::from_static(b"more"), SendMode::Reliable).is_ok());
}

#[test]
fn absurd_negotiated_parameters_are_clamped_or_refused() {
    let t0 = Instant::now();
    let mut host = server(HostConfig::default());
    // The largest datagram and packet sizes and bandwidths a request can state.
    let greedy = ConnectRequest {
        mtu: 65_507,
        max_packet: u32::MAX,
        bandwidth_in: u32::MAX,
        bandwidth_out: u32::MAX,
        ..request(61)
    };
    let client = addr(10, 10, 10);
    let hostile = Hostile::connect(&mut host, t0, client, greedy);
    let s = host.peer_stats(host.peer_by_addr(client).unwrap()).unwrap();
    assert_eq!(s.mtu, 1200, "the smaller datagram size wins");
    assert_eq!(hostile.server.unwrap().mtu, 1200);
    // A channel count other than ours is refused; nothing is allocated.
    let before = host.peers().count();
    host.handle_datagram(
        t0,
        addr(10, 10, 11),
        &encode(&Control::request(ConnectRequest { channels: 255, ..request(62) }), Key::version()),
    );
    assert_eq!(host.peers().count(), before);
    assert!(drain(&mut host).iter().any(|t| Control::decode(&t.payload, Key::reply(62)).is_ok()));
}

#[test]
fn many_peers_at_once_stay_within_the_peer_cap() {
    let t0 = Instant::now();
    let mut config = HostConfig::default();
    config.max_peers = 50;
    config.challenge_above = 1000;
    let mut host = server(config);
    for i in 0..200u32 {
        let mut h = Hostile {
            addr: addr(11, i as u8, 3000),
            req: request(i),
            server: None,
            next_frame: 0,
            newest_server_frame: None,
        };
        // Each completes its handshake: connected peers, not just pending ones.
        let _ =
            std::mem::replace(&mut h, Hostile::try_connect(&mut host, t0, addr(11, i as u8, 3000), request(1000 + i)));
    }
    assert!(host.peers().count() <= 50);
    let connected = host.peers().filter(|p| host.peer_stats(*p).unwrap().state == PeerState::Connected).count();
    assert_eq!(connected, 50);
    assert!(host.stats().refused >= 150);
}

/// Frames packed to smuggle memory past the reassembly budget. Each attack was once
/// stored whole (or would be, under a looser rule): one message of the frame counted as
/// progress and carried the rest in, or every packet claimed to be the one its channel
/// waited for, or whole packets that could not be delivered passed as deliverable.
#[test]
fn frames_packed_around_progress_stay_within_the_reassembly_cap() {
    let cap = 256 * 1024;
    let max_packet: usize = 64 * 1024;
    let chunk = full_fragment();
    let count = max_packet.div_ceil(granule()) as u32;
    // Per channel, at most three packets beyond the cap (see the channel docs), and
    // transiently one datagram.
    let bound = cap + 4 * (3 * (reserved(count as usize) + 200) + 1300);
    let payload = vec![5u8; chunk];
    for attack in ["carried by progress", "every packet a head", "every packet the front", "whole but blocked"] {
        let t0 = Instant::now();
        let mut config = HostConfig::default();
        config.peer.max_reassembly_bytes = cap;
        config.peer.max_packet_size = max_packet;
        let mut host = server(config);
        let client = addr(9, 9, 9);
        let mut hostile = Hostile::connect(&mut host, t0, client, request(61));
        let peer = host.peer_by_addr(client).unwrap();
        let (mut worst, mut delivered) = (0, 0u32);
        for round in 0..1500u32 {
            let msgs: Vec<Message<'_>> = match attack {
                // A deliverable reliable packet (each depending on the one before) with
                // twenty last fragments of the largest passive packets on channel 1.
                "carried by progress" => {
                    let go = Message {
                        kind: MessageKind::Fragment(SendMode::Reliable),
                        channel: 0,
                        id: round,
                        dependency: u32::from(round > 0),
                        fragment: Fragment::WHOLE,
                        payload: b"go",
                    };
                    let junk = (0..20).map(|j| Message {
                        channel: 1,
                        ..fragment(round * 20 + j, SendMode::Passive, count - 1, count, &payload[..10])
                    });
                    std::iter::once(go).chain(junk).collect()
                }
                // First fragments of reliable packets claiming no dependency, newest
                // first, so each in turn is the oldest reliable packet held.
                "every packet a head" => vec![fragment(30_000 - round, SendMode::Reliable, 0, count, &payload)],
                // The same with passive packets: each is at the front of its channel
                // when it arrives, and displaces the one before.
                "every packet the front" => vec![fragment(30_000 - round, SendMode::Passive, 0, count, &payload)],
                // Packet 1 waits for packet 0, never sent; behind it, whole unreliable
                // packets claiming no dependency.
                _ if round == 0 => vec![Message { dependency: 1, ..fragment(1, SendMode::Reliable, 0, 1, b"stuck") }],
                _ => vec![fragment(round + 1, SendMode::Unreliable, 0, 1, &payload)],
            };
            let f = hostile.frame(&msgs, &[], None);
            host.handle_datagram(t0 + round * MS, client, &f);
            worst = worst.max(host.peer_stats(peer).unwrap().reassembly_bytes);
            while let Some(e) = host.poll_event() {
                if let Event::Received { channel: 0, .. } = e {
                    delivered += 1;
                }
            }
        }
        eprintln!("{attack}: reassembly peaked at {worst} bytes (bound {bound})");
        assert!(worst <= bound, "{attack}: {worst} > {bound}");
        assert!(host.memory_usage().total < 2 * bound, "{attack}: {:?}", host.memory_usage());
        if attack == "carried by progress" {
            // The reliable packets got through even though their frames were refused.
            assert_eq!(delivered, 1500);
        }
    }
}

/// A request from `nonce` carrying `data` as connect data.
fn request_with(nonce: u32, data: &[u8]) -> Vec<u8> {
    encode(&Control::Request { request: request(nonce), data }, Key::version())
}

fn manual() -> HostConfig {
    let mut c = HostConfig::default();
    c.manual_accept = true;
    c
}

/// The requests awaiting the application's decision, from the host's events.
fn asked(host: &mut Host) -> Vec<(porous_proto::PeerId, Bytes)> {
    std::iter::from_fn(|| host.poll_event())
        .filter_map(|e| match e {
            Event::ConnectRequest { peer, data, .. } => Some((peer, data)),
            _ => None,
        })
        .collect()
}

#[test]
fn connect_data_and_manual_admission_never_make_a_reply_larger_than_its_request() {
    let t0 = Instant::now();
    let mut worst: f64 = 0.0;
    let mut ratio = |replies: &[Transmit], req: &[u8]| {
        for t in replies {
            worst = worst.max(t.payload.len() as f64 / req.len() as f64);
            assert!(t.payload.len() <= req.len(), "{} byte reply to a {} byte request", t.payload.len(), req.len());
        }
    };
    for len in [0, 1, 100, porous_proto::wire::MAX_CONNECT_DATA] {
        let data = vec![0x5A; len];
        let req = request_with(1, &data);
        // Accepted, challenged, refused for a mismatch, refused as not accepting.
        let mut challenging = HostConfig::default();
        challenging.challenge_above = 0;
        let mut other_version = HostConfig::default();
        other_version.peer.app_version = 3;
        let mut closed = HostConfig::default();
        closed.accept_incoming = false;
        for config in [HostConfig::default(), challenging, other_version, closed] {
            let mut host = server(config);
            host.handle_datagram(t0, addr(1, 2, 3), &req);
            host.step(t0);
            let replies = drain(&mut host);
            assert_eq!(replies.len(), 1);
            ratio(&replies, &req);
        }
        // Manual admission: nothing until the application decides, however often the
        // requester retries; then one reply, accepted or rejected.
        for accept in [true, false] {
            let mut host = server(manual());
            let from = addr(1, 2, 4);
            for retry in 0..5 {
                host.handle_datagram(t0 + retry * 200 * MS, from, &req);
                host.step(t0 + retry * 200 * MS);
            }
            assert!(drain(&mut host).is_empty(), "an undecided request gets no answer");
            let requests = asked(&mut host);
            assert_eq!(requests.len(), 1, "one event for five copies of the request");
            assert_eq!(&requests[0].1[..], &data[..]);
            let now = t0 + SEC;
            if accept {
                host.accept(now, requests[0].0).unwrap();
            } else {
                host.reject(now, requests[0].0, 7).unwrap();
            }
            host.step(now);
            let replies = drain(&mut host);
            assert_eq!(replies.len(), 1);
            ratio(&replies, &req);
            let reply = Control::decode(&replies[0].payload, Key::reply(1)).unwrap();
            if accept {
                assert!(matches!(reply, Control::RequestAck(_)));
            } else {
                assert_eq!(reply, Control::Refuse(porous_proto::wire::RefuseReason::Rejected(7)));
            }
        }
    }
    eprintln!("largest reply / request ratio before a connection, with connect data: {worst:.2}");
    assert!(worst <= 1.0);
}

#[test]
fn a_request_awaiting_the_application_holds_no_more_than_a_pending_handshake_and_a_reject_frees_it() {
    let t0 = Instant::now();
    let mut config = manual();
    config.max_pending = 64;
    config.challenge_above = 1000;
    let mut host = server(config);
    let baseline = host.memory_usage().peers;
    let data = [0xA5; porous_proto::wire::MAX_CONNECT_DATA];
    for i in 0..100u32 {
        host.handle_datagram(t0, addr(7, i as u8, 4000), &request_with(i, &data));
    }
    host.step(t0);
    let s = host.stats();
    assert_eq!((s.pending, s.handshakes_deferred), (64, 36), "awaiting requests are pending handshakes");
    let requests = asked(&mut host);
    assert_eq!(requests.len(), 64);
    let per_request = (host.memory_usage().peers - baseline) / 64;
    eprintln!("a request awaiting the application, with 256 bytes of connect data: {per_request} bytes");
    assert!(per_request < PENDING_HANDSHAKE_MAX + data.len(), "{per_request} bytes per awaiting request");
    assert!(drain(&mut host).is_empty());
    // The same requester, spoofed with another nonce and other data, changes nothing:
    // the request the application sees is the one it decides. It is challenged (the
    // challenge no larger than it, keyed to its nonce), and only a requester that hears
    // the challenge at that address could replace the request under decision.
    let spoofed = request_with(9999, b"mallory");
    host.handle_datagram(t0, addr(7, 0, 4000), &spoofed);
    assert!(asked(&mut host).is_empty());
    let challenge = drain(&mut host);
    assert_eq!(challenge.len(), 1);
    assert!(challenge[0].payload.len() <= spoofed.len());
    assert!(matches!(Control::decode(&challenge[0].payload, Key::reply(9999)), Ok(Control::Challenge(_))));
    // Rejected, each costs one refusal smaller than its request, and nothing stays.
    let now = t0 + 10 * MS;
    for (peer, _) in &requests {
        host.reject(now, *peer, 1).unwrap();
    }
    host.step(now);
    let refusals = drain(&mut host);
    assert_eq!(refusals.len(), 64);
    assert!(refusals.iter().all(|t| t.payload.len() < 64));
    let s = host.stats();
    assert_eq!((s.peers, s.pending, s.rejected), (0, 0, 64));
    assert_eq!(host.memory_usage().peers, 0);
}

#[test]
fn oversized_connect_data_is_dropped_unanswered_and_allocates_nothing() {
    let t0 = Instant::now();
    for config in [HostConfig::default(), manual()] {
        let mut host = server(config);
        let max = porous_proto::wire::MAX_CONNECT_DATA;
        // One byte too many (the encoder writes it; no decoder takes it), and data whose
        // length runs past the datagram.
        let too_long = request_with(1, &vec![1; max + 1]);
        let mut cut = request_with(2, &[2; 200]);
        cut.truncate(cut.len() - 10);
        for bad in [too_long, cut] {
            host.handle_datagram(t0, addr(8, 8, 8), &bad);
        }
        host.step(t0);
        assert!(drain(&mut host).is_empty(), "no answer");
        assert!(host.poll_event().is_none(), "no event");
        let s = host.stats();
        assert_eq!((s.malformed, s.peers, s.pending), (2, 0, 0));
        // The largest allowed is taken.
        host.handle_datagram(t0, addr(8, 8, 9), &request_with(3, &vec![3; max]));
        assert_eq!(host.stats().pending, 1);
    }
}

/// An unordered channel under a hostile sender: packets that never complete the window's
/// base, first fragments newest first (each would be the oldest held), and modes the
/// channel does not carry. Memory stays within the bound (`PeerConfig::memory_limit`:
/// the reassembly cap plus a few packets, and one window's bitmap of delivered ids), and
/// nothing is delivered twice or held up behind a missing packet.
#[test]
fn an_unordered_channel_stays_within_its_bounds_whatever_a_hostile_sender_numbers() {
    let t0 = Instant::now();
    let cap = 256 * 1024;
    let max_packet: usize = 64 * 1024;
    let chunk = full_fragment();
    let count = max_packet.div_ceil(granule()) as u32;
    let mut config = HostConfig::default();
    config.peer.channels[0] = porous_proto::ChannelConfig::unordered();
    config.peer.max_reassembly_bytes = cap;
    config.peer.max_packet_size = max_packet;
    let limit = config.peer.memory_limit();
    let req = ConnectRequest { unordered: [0].into_iter().collect(), ..request(71) };
    let whole = |id: u32| Message { channel: 0, ..fragment(id, SendMode::Reliable, 0, 1, b"w") };

    // 65,535 whole packets, every id of the window but its base: all delivered at once,
    // none held, the bitmap of what was delivered at most a window's worth.
    let mut host = server(config.clone());
    let client = addr(12, 0, 1);
    let mut hostile = Hostile::connect(&mut host, t0, client, req);
    let peer = host.peer_by_addr(client).unwrap();
    while host.poll_event().is_some() {}
    let mut delivered = 0;
    let mut worst = 0;
    for batch in (1..65_536u32).collect::<Vec<_>>().chunks(150) {
        let msgs: Vec<Message<'_>> = batch.iter().map(|&id| whole(id)).collect();
        let f = hostile.frame(&msgs, &[], None);
        host.handle_datagram(t0, client, &f);
        delivered += std::iter::from_fn(|| host.poll_event()).filter(|e| matches!(e, Event::Received { .. })).count();
        worst = worst.max(host.memory_usage().peers);
    }
    assert_eq!(delivered, 65_535, "nothing waited for the missing base");
    assert_eq!(host.peer_stats(peer).unwrap().reassembly_bytes, 0);
    eprintln!("65,535 packets delivered around a missing one: peer memory peaked at {worst} bytes (bound {limit})");
    assert!(worst <= limit);
    // The base arrives; resends and replays of anything delivered deliver nothing.
    let f = hostile.frame(&[whole(0)], &[], None);
    host.handle_datagram(t0, client, &f);
    let replay: Vec<Message<'_>> = [0, 1, 777, 65_535].into_iter().map(whole).collect();
    let f = hostile.frame(&replay, &[], None);
    host.handle_datagram(t0, client, &f);
    let again = std::iter::from_fn(|| host.poll_event()).filter(|e| matches!(e, Event::Received { .. })).count();
    assert_eq!(again, 1, "only the base was new");

    // First fragments of the largest packets, newest first: each is the oldest held when
    // it arrives, but only the window's base may pass the cap.
    let mut host = server(config.clone());
    let client = addr(12, 0, 2);
    let mut hostile = Hostile::connect(&mut host, t0, client, req);
    let peer = host.peer_by_addr(client).unwrap();
    let payload = vec![5u8; chunk];
    let bound = cap + 4 * (3 * (reserved(count as usize) + 200) + 1300);
    let mut worst = 0;
    for round in 0..1500u32 {
        let f = hostile.frame(
            &[Message { channel: 0, ..fragment(30_000 - round, SendMode::Reliable, 0, count, &payload) }],
            &[],
            None,
        );
        host.handle_datagram(t0 + round * MS, client, &f);
        worst = worst.max(host.peer_stats(peer).unwrap().reassembly_bytes);
    }
    eprintln!("unordered, newest first: reassembly peaked at {worst} bytes (bound {bound})");
    assert!(worst <= bound);

    // Unreliable and passive packets on the unordered channel are violations: counted,
    // neither stored nor delivered.
    let mut host = server(config);
    let client = addr(12, 0, 3);
    let mut hostile = Hostile::connect(&mut host, t0, client, req);
    let peer = host.peer_by_addr(client).unwrap();
    while host.poll_event().is_some() {}
    let msgs = [
        Message { channel: 0, ..fragment(0, SendMode::Unreliable, 0, 1, b"u") },
        Message { channel: 0, ..fragment(1, SendMode::Passive, 0, 2, &payload) },
    ];
    let f = hostile.frame(&msgs, &[], None);
    host.handle_datagram(t0, client, &f);
    let s = host.peer_stats(peer).unwrap();
    assert!(host.poll_event().is_none());
    assert_eq!((s.protocol_violations, s.reassembly_bytes), (2, 0));
}

/// A client and a server joined by a link of one millisecond each way (everything a step
/// sends arrives before the next), stepped every millisecond. `spoof` runs before each
/// step with the step's number and the datagrams sent so far to the client (`.0`) and to
/// the server (`.1`), and returns datagrams to hand the server as if they came from the
/// client's address. The server's application accepts every request it is asked about.
/// Returns both sides' events, the client's connection id and both hosts.
fn spoofed_handshake(
    server_config: HostConfig,
    mut spoof: impl FnMut(u32, (usize, usize), &[Event]) -> Vec<Vec<u8>>,
) -> (Vec<Event>, Vec<Event>, porous_proto::PeerId, Host, Host) {
    let t0 = Instant::now();
    let client_addr = addr(9, 9, 9);
    let mut server = server(server_config);
    let mut client = Host::new(HostConfig::default(), seeded_rng(2)).unwrap();
    let (mut to_client, mut to_server) = (Vec::<Transmit>::new(), Vec::<Transmit>::new());
    let (mut sent_to_client, mut sent_to_server) = (0, 0);
    let (mut client_events, mut server_events) = (Vec::new(), Vec::new());
    let mut c = None;
    for step in 0..12_000u32 {
        let now = t0 + step * MS;
        for d in spoof(step, (sent_to_client, sent_to_server), &server_events) {
            server.handle_datagram(now, client_addr, &d);
        }
        if step == 1 {
            c = Some(client.connect(now, SERVER).unwrap());
        }
        for t in to_server.drain(..) {
            server.handle_datagram(now, client_addr, &t.payload);
        }
        for t in to_client.drain(..) {
            client.handle_datagram(now, SERVER, &t.payload);
        }
        client.step(now);
        server.step(now);
        to_server = drain(&mut client);
        to_client = drain(&mut server).into_iter().filter(|t| t.remote == client_addr).collect();
        (sent_to_client, sent_to_server) = (sent_to_client + to_client.len(), sent_to_server + to_server.len());
        client_events.extend(std::iter::from_fn(|| client.poll_event()));
        let new: Vec<Event> = std::iter::from_fn(|| server.poll_event()).collect();
        for e in &new {
            if let Event::ConnectRequest { peer, .. } = e {
                server.accept(now, *peer).unwrap();
            }
        }
        server_events.extend(new);
    }
    (client_events, server_events, c.unwrap(), client, server)
}

/// Issue 32, item 1, in plain mode: an off-path attacker sends one connect request with a
/// nonce of its own from a client's address, before the client's first request, while the
/// server's answer is on its way, or once connected. The client connects, once, and is
/// never told otherwise; the server's connection is the client's (its keys are: data
/// flows). Before the fix, a request arriving after the server's first reply restarted the
/// server's handshake with the attacker's nonce: the client was told `Connected`, its
/// datagrams failed the server's check, and it was told `Disconnected(Timeout)` 10 s later.
#[test]
fn a_spoofed_request_never_derails_a_handshake() {
    let spoofed = encode(&Control::request(request(0xBAD)), Key::version());
    for config in [HostConfig::default(), manual()] {
        for moment in 0..3 {
            let mut done = false;
            let (client_events, server_events, c, mut client, mut server) =
                spoofed_handshake(config.clone(), |step, (to_client, _), server_events| {
                    let now = match moment {
                        0 => step == 0,
                        // The server's first answer is sent, the client's `Ack` is not back.
                        1 => to_client > 0,
                        _ => server_events.iter().any(|e| matches!(e, Event::Connected { .. })),
                    };
                    if done || !now {
                        return Vec::new();
                    }
                    done = true;
                    vec![spoofed.clone()]
                });
            let case = format!("manual {}, moment {moment}", config.manual_accept);
            assert!(
                matches!(client_events[..], [Event::Connected { peer, .. }] if peer == c),
                "{case}: the client's events {client_events:?}"
            );
            let connected: Vec<porous_proto::PeerId> = server_events
                .iter()
                .filter_map(|e| match e {
                    Event::Connected { peer, .. } => Some(*peer),
                    _ => None,
                })
                .collect();
            assert_eq!(connected.len(), 1, "{case}: the server's events {server_events:?}");
            let s = connected[0];
            assert!(server_events.iter().all(|e| !matches!(e, Event::Disconnected { peer, .. } if *peer == s)));
            assert_eq!(server.peer_stats(s).unwrap().state, PeerState::Connected, "{case}");
            if moment == 0 {
                // The spoofed handshake held the address until the client proved it
                // receives there, by echoing the challenge its request got.
                assert!(server.stats().challenged >= 1, "{case}");
            }
            // Data flows both ways: the connection's keys are the client's.
            let t = Instant::now() + Duration::from_secs(13);
            client.send(c, 0, Bytes::from_static(b"up"), SendMode::Reliable).unwrap();
            server.send(s, 0, Bytes::from_static(b"down"), SendMode::Reliable).unwrap();
            client.step(t);
            server.step(t);
            for tr in drain(&mut client) {
                server.handle_datagram(t, addr(9, 9, 9), &tr.payload);
            }
            for tr in drain(&mut server) {
                client.handle_datagram(t, SERVER, &tr.payload);
            }
            let got = |h: &mut Host| std::iter::from_fn(|| h.poll_event()).any(|e| matches!(e, Event::Received { .. }));
            assert!(got(&mut server) && got(&mut client), "{case}");
        }
    }
}
