//! A program written against porous-proto 0.1.0 (it built and passed there), upgraded with
//! only the edits CHANGELOG.md's "Migration from 0.1" names; each edited line is marked
//! with the item it applied (`// migration N`), so its diff from 0.1 is the list.
//!
//! It drives two hosts by hand over an in-memory link (connect, every send mode, every
//! event, disconnect, stats, config, errors), then the same through `sim::Network`.
//!
//! Native only: a 0.1 program takes `std::time::Instant`, which is the core's `Instant` on
//! every target but the web (0.1 had no web build, so it has no web programs to upgrade).
#![cfg(not(target_family = "wasm"))]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_proto::sim::{BurstLoss, Fate, LinkConditions, LinkStats, Network, TraceRecord};
use porous_proto::wire::{ChannelSet, ConnectRequest, Control, Key}; // migration 7
use porous_proto::{
    ChannelConfig, ConfigError, ConnectError, DisconnectReason, Event, Host, HostConfig, HostStats, MemoryUsage,
    Mismatch, PeerConfig, PeerId, PeerState, PeerStats, Priority, SendError, SendMode, SequenceStart, TransferStats,
    Transmit,
};
use rand_pcg::Pcg32;

const MS: Duration = Duration::from_millis(1);

/// Two hosts and the datagrams between them, 10 ms each way.
struct Link {
    hosts: [Host; 2],
    addrs: [SocketAddr; 2],
    now: Instant,
    wire: VecDeque<(Instant, usize, Transmit)>,
    events: [Vec<Event>; 2],
}

impl Link {
    fn new(a: HostConfig, b: HostConfig) -> Self {
        let host = |config, seed| Host::new(config, Pcg32::new(seed, 0x0a02_bdbf_7bb3_c0a7)).expect("valid config");
        Self {
            hosts: [host(a, 1), host(b, 2)],
            addrs: ["10.0.0.1:4000".parse().unwrap(), "10.0.0.2:5000".parse().unwrap()],
            now: Instant::now(),
            wire: VecDeque::new(),
            events: [Vec::new(), Vec::new()],
        }
    }

    fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        while self.now < end {
            for (i, host) in self.hosts.iter_mut().enumerate() {
                while let Some(t) = host.poll_transmit() {
                    let Transmit { remote, payload, .. } = t.clone(); // migration 5
                    assert!(!payload.is_empty());
                    let to = self.addrs.iter().position(|a| *a == remote).expect("a known address");
                    assert_ne!(to, i);
                    self.wire.push_back((self.now + 10 * MS, to, t));
                }
                while let Some(e) = host.poll_event() {
                    self.events[i].push(e);
                }
            }
            let mut next = end;
            for t in self.hosts.iter().filter_map(Host::poll_timeout) {
                next = next.min(t.max(self.now));
            }
            if let Some((t, ..)) = self.wire.front() {
                next = next.min(*t);
            }
            self.now = next.max(self.now + Duration::from_micros(100));
            while self.wire.front().is_some_and(|(t, ..)| *t <= self.now) {
                let (_, to, t) = self.wire.pop_front().unwrap();
                let from = self.addrs[1 - to];
                self.hosts[to].handle_datagram(self.now, from, &t.payload);
            }
            for host in &mut self.hosts {
                host.step(self.now);
            }
        }
    }
}

/// Every variant of every event, with every field.
fn describe(e: &Event) -> String {
    match e {
        // migration 3, the next three lines
        Event::Connected { peer, remote, .. } => format!("{peer} connected from {remote}"),
        Event::Received { peer, channel, mode, data, .. } => {
            format!("{peer} sent {} bytes on {channel} ({mode:?})", data.len())
        }
        Event::Disconnected { peer, reason, .. } => format!("{peer} left: {}", why(*reason)),
        _ => "an event of a later version".to_string(),
    }
}

fn why(reason: DisconnectReason) -> String {
    match reason {
        DisconnectReason::Local => "we said so".into(),
        DisconnectReason::Remote { .. } => "they said so".into(), // migration 2
        DisconnectReason::Timeout => "silence".into(),
        // migration 3, the next three lines
        DisconnectReason::Incompatible(Mismatch::AppVersion { local, remote, .. }) => {
            format!("app {local} vs {remote}")
        }
        DisconnectReason::Incompatible(Mismatch::ChannelCount { local, remote, .. }) => {
            format!("channels {local} vs {remote}")
        }
        DisconnectReason::Incompatible(Mismatch::Mtu { local_min, remote, .. }) => {
            format!("mtu {remote} < {local_min}")
        }
        DisconnectReason::Incompatible(m) => m.to_string(),
        DisconnectReason::HostFull | DisconnectReason::NotAccepting | DisconnectReason::Stale => "refused".into(),
        DisconnectReason::Misbehaving => "misbehaving".into(),
        other => other.to_string(),
    }
}

fn send_error(e: SendError) -> &'static str {
    match e {
        SendError::UnknownPeer => "unknown peer",
        SendError::NotConnected => "not connected",
        // migration 3, the next three lines
        SendError::NoSuchChannel { channel: _, channels: _, .. } => "no such channel",
        SendError::TooLarge { size: _, max: _, .. } => "too large",
        SendError::QueueFull { channel: _, .. } => "queue full",
        _ => "other",
    }
}

fn config_error(e: &ConfigError) -> String {
    match e {
        ConfigError::NoPeers | ConfigError::InitialWindow => "limits".into(),
        ConfigError::ChannelCount(n) => format!("{n} channels"),
        ConfigError::Mtu(n) | ConfigError::ReassemblyTooSmall(n) => format!("size {n}"),
        ConfigError::MaxPacketSize { size, max, .. } => format!("{size} > {max}"), // migration 3
        ConfigError::ChannelQueue { channel, .. } => format!("channel {channel}'s queue"), // migration 6
        ConfigError::ZeroDuration(name) => format!("{name} is zero"),
        _ => e.to_string(),
    }
}

fn config() -> HostConfig {
    let mut c = HostConfig::default();
    c.max_peers = 8;
    c.max_pending = 8;
    c.challenge_above = 4;
    c.accept_incoming = true;
    c.sequence_start = SequenceStart::fixed(u32::MAX - 3, 0xFF_FFFE); // migration 4
    let peer: &mut PeerConfig = &mut c.peer;
    peer.app_version = 1;
    peer.channels = vec![ChannelConfig::default(), ChannelConfig::with_priority(Priority::Low)];
    peer.channels[1].max_queued_bytes = 64 * 1024;
    peer.channels[1].priority = Priority::Low;
    peer.mtu = 1200;
    peer.max_packet_size = 16 * 1024;
    peer.max_reassembly_bytes = 256 * 1024;
    peer.incoming_bandwidth = 0;
    peer.outgoing_bandwidth = 0;
    peer.timeout = Duration::from_secs(10);
    peer.connect_timeout = Duration::from_secs(5);
    peer.disconnect_timeout = Duration::from_secs(2);
    peer.linger = Duration::from_secs(2);
    peer.ping_interval = Duration::from_millis(500);
    peer.connect_retry = Duration::from_millis(200);
    peer.initial_window = 16 * 1024;
    assert_eq!(c.validate(), Ok(()));
    assert!(c.peer.memory_limit() > 0);
    c
}

fn read_stats(s: &PeerStats, h: &HostStats, m: &MemoryUsage) -> u64 {
    let t: TransferStats = s.transfer;
    let _ = (s.state, s.remote, s.rtt, s.rttvar, s.latest_rtt, s.rto, s.cwnd, s.ssthresh, s.flight, s.mtu, s.loss());
    let _ = (s.packets_sent, s.packets_received, s.unreliable_dropped, s.frames_refused, s.protocol_violations);
    let _ = (s.malformed, s.reassembly_bytes, s.queued_bytes);
    let _ = (t.frames_sent, t.frames_resent, t.frames_lost, t.frames_acked, t.sentinel_frames, t.frames_received);
    // migration 9: `t.acks_for_unsent` left out
    let _ = (t.frames_out_of_window, t.datagrams_sent, t.datagrams_received, t.bytes_sent);
    let _ = (t.bytes_received, t.unreliable_stripped, t.unreliable_dropped, t.congestion_resets, t.frames_skipped);
    let _ = t.dishonest_acks;
    let _ = (h.datagrams_received, h.datagrams_sent, h.bytes_received, h.bytes_sent, h.malformed, h.bad_checksum);
    // migration 8
    let _ = (h.unknown_source, h.refused, h.challenged, h.bad_cookies, h.handshakes_deferred, h.pending, h.accepted);
    let _ = (m.total, m.peers, m.reassembly, m.table, m.buffers);
    h.accepted + h.peers as u64
}

#[test]
fn a_0_1_program_connects_sends_in_every_mode_and_disconnects() {
    let mut link = Link::new(config(), config());
    let now = link.now;
    let server = link.addrs[1];
    let peer: PeerId = link.hosts[0].connect(now, server).unwrap();
    assert!(matches!(link.hosts[0].connect(now, server), Err(ConnectError::PeerExists(p)) if p == peer));
    assert_eq!(
        link.hosts[0].send(peer, 0, Bytes::from_static(b"early"), SendMode::Reliable),
        Err(SendError::NotConnected)
    );
    link.run_for(Duration::from_secs(1));
    // migration 3
    let Some(Event::Connected { peer: at_server, remote, .. }) = link.events[1].first().cloned() else {
        panic!("no connection")
    };
    assert_eq!(remote, link.addrs[0]);
    assert_eq!(link.hosts[1].peer_by_addr(remote), Some(at_server));
    assert_eq!(link.hosts[0].peer_stats(peer).map(|s| s.state), Some(PeerState::Connected));

    for (i, mode) in [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive].into_iter().enumerate() {
        link.hosts[0].send(peer, i % 2, Bytes::from(vec![i as u8; 3000]), mode).unwrap();
    }
    let err = link.hosts[0].send(peer, 2, Bytes::new(), SendMode::Reliable).unwrap_err();
    assert_eq!(send_error(err), "no such channel");
    assert!(matches!(err, SendError::NoSuchChannel { channel: 2, channels: 2, .. })); // migration 4
    // migration 4 (a pattern takes literals: `16 * 1024 + 1` -> `16_385`)
    assert!(matches!(
        link.hosts[0].send(peer, 0, Bytes::from(vec![0; 16 * 1024 + 1]), SendMode::Reliable),
        Err(SendError::TooLarge { size: 16_385, max: 16_384, .. })
    ));
    let send: fn(&mut Host, PeerId, usize, Bytes, SendMode) -> Result<(), SendError> = Host::send;
    send(&mut link.hosts[0], peer, 1, Bytes::from_static(b"by pointer"), SendMode::Reliable).unwrap();
    link.hosts[0].send(peer, 1, b"converted".to_vec(), SendMode::Reliable).unwrap(); // migration 11
    link.hosts[1].send(at_server, 1, Bytes::from_static(b"back"), SendMode::Reliable).unwrap();
    link.run_for(Duration::from_secs(1));
    let received: Vec<String> = link.events[1].iter().map(describe).collect();
    assert_eq!(received.len(), 6, "{received:?}");

    let stats = link.hosts[0].peer_stats(peer).unwrap();
    assert!(read_stats(&stats, &link.hosts[0].stats(), &link.hosts[0].memory_usage()) >= 1);
    assert_eq!(link.hosts[0].config().peer.channels.len(), 2);
    assert_eq!(link.hosts[0].stats().peers, 1);

    link.hosts[0].disconnect(link.now, peer); // migration 1
    link.run_for(Duration::from_secs(4)); // past the linger
    let ends: Vec<DisconnectReason> = link.events[1]
        .iter()
        .filter_map(|e| match e {
            Event::Disconnected { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [DisconnectReason::remote(0)]); // migration 2
    assert_eq!(why(ends[0]), "they said so");

    // disconnect_now reports at once.
    let again = link.hosts[0].connect(link.now, server).unwrap();
    link.run_for(Duration::from_secs(3));
    link.hosts[0].disconnect_now(link.now, again); // migration 1
    assert!(matches!(link.hosts[0].poll_event(), Some(Event::Disconnected { reason: DisconnectReason::Local, .. })));

    let mut bad = config();
    bad.peer.channels[0].max_queued_bytes = 0;
    let e = Host::new(bad, Pcg32::new(3, 3)).unwrap_err();
    assert!(matches!(e, ConfigError::ChannelQueue { channel: 0, .. }), "{}", config_error(&e)); // migration 6
}

#[test]
fn a_0_1_program_on_the_simulator() {
    let mut net = Network::new(7);
    let (server, client): (SocketAddr, SocketAddr) =
        ("10.0.0.1:7000".parse().unwrap(), "10.0.0.2:7000".parse().unwrap());
    net.add_host(server, HostConfig::default()).unwrap();
    net.add_host(client, HostConfig::default()).unwrap();
    let mut conditions = LinkConditions::perfect(20 * MS);
    conditions.burst = Some(BurstLoss::new(0.01, 0.5, 0.5)); // migration 5
    net.set_link_both(server, client, conditions);
    net.enable_trace();
    let now = net.now();
    let peer = net.host_mut(client).connect(now, server).unwrap();
    let mut echoed = 0;
    assert!(net.run_until(Duration::from_secs(10), |net| {
        while let Some(e) = net.poll_event(server) {
            if let Event::Received { peer, channel, data, .. } = e {
                net.host_mut(server).send(peer, channel, data, SendMode::Reliable).unwrap();
            }
        }
        while let Some(e) = net.poll_event(client) {
            match e {
                Event::Connected { peer, .. } => {
                    for i in 0..10u8 {
                        net.host_mut(client).send(peer, 0, Bytes::from(vec![i; 100]), SendMode::Reliable).unwrap();
                    }
                }
                Event::Received { .. } => echoed += 1,
                _ => {}
            }
        }
        echoed == 10
    }));
    let now = net.now(); // migration 1
    net.host_mut(client).disconnect(now, peer); // migration 1
    net.run_for(Duration::from_secs(1), |_| {});
    let stats: LinkStats = net.link_stats(client, server);
    assert!(stats.delivered > 0 && stats.sent >= stats.delivered);
    let trace: &[TraceRecord] = net.trace();
    assert!(trace.iter().any(|r| matches!(r.fate, Fate::Delivered(_))));
}

#[test]
fn a_0_1_tool_on_the_wire_format() {
    let request = ConnectRequest {
        nonce: 1,
        frame_base: 2,
        packet_base: 3,
        app_version: 4,
        channels: 2,
        mtu: 1200,
        max_packet: 16 * 1024,
        bandwidth_in: 0,
        bandwidth_out: 0,
        cookie: None,
        unordered: ChannelSet::EMPTY, // migration 7
    };
    let mut datagram = Vec::new();
    Control::request(request).encode(Key::version(), &mut datagram); // migration 7
    // migration 7, the next four lines
    let decoded: Control<'_> = Control::decode(&datagram, Key::version()).unwrap();
    match decoded {
        Control::Request { request: r, .. } => assert_eq!((r.nonce, r.app_version, r.channels), (1, 4, 2)),
        Control::Disconnect { .. } => panic!("not a disconnection"),
        other => panic!("{other:?}"),
    }
    let key = Key::connection(1, 2);
    let mut datagram = Vec::new();
    Control::Disconnect { code: 0 }.encode(key, &mut datagram); // migration 7
    assert!(matches!(Control::decode(&datagram, key), Ok(Control::Disconnect { .. }))); // migration 7
}
