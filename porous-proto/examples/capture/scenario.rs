//! The simulated game behind `examples/capture`: who talks, what they send, over which
//! links; and how its tap becomes a pcapng capture. Shared with `tests/dissector.rs`,
//! which decodes the same capture with tshark and compares it with this trace.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use porous_pcap::{Datagram, Direction, Writer};
use porous_proto::sim::{Fate, LinkConditions, Network, TapRecord, seeded_rng};
use porous_proto::token::{self, PrivateKey, TokenParams};
use porous_proto::{ChannelConfig, Event, HostConfig, PeerId, SecureConfig, SendMode, SequenceStart};

/// The plain server (IPv4) and the secure one (IPv6): one machine's two sockets.
pub(crate) const SERVER: &str = "10.0.0.1:9000";
pub(crate) const SECURE_SERVER: &str = "[fd00::1]:9001";
/// A plain client, a secure client, and a client of another game version.
pub(crate) const PLAIN_CLIENT: &str = "10.0.0.2:50000";
pub(crate) const SECURE_CLIENT: &str = "[fd00::2]:50001";
pub(crate) const STRANGER: &str = "10.0.0.3:50002";
/// The seed of the example's capture.
pub(crate) const SEED: u64 = 2026;
/// Time zero of the capture: 2026-01-01 00:00:00 UTC, so the file is the same on every run.
pub(crate) const EPOCH: Duration = Duration::from_secs(1_767_225_600);

const MS: Duration = Duration::from_millis(1);
const TICK: Duration = Duration::from_micros(16_667);
const APP_VERSION: u32 = 7;
/// The backend's key, shared with the secure server, and the tokens' clock.
const BACKEND_KEY: [u8; 32] = [0x5E; 32];
const UNIX: u64 = 1_767_225_600;

pub(crate) fn addr(s: &str) -> SocketAddr {
    s.parse().expect("a literal address")
}

/// Four channels: 0 and 2 ordered, 1 keeps only the newest state, 3 unordered.
fn peer_config(app_version: u32) -> HostConfig {
    let mut c = HostConfig::default();
    c.peer.app_version = app_version;
    c.peer.channels = vec![ChannelConfig::default(), ChannelConfig::default(), ChannelConfig::default()];
    c.peer.channels.push(ChannelConfig::unordered());
    c
}

/// A lossy path: 20 ms one way, 4 ms of jitter, 5% lost, 2% duplicated, 1% corrupted,
/// 2% reordered by 15 ms.
fn lossy() -> LinkConditions {
    let mut c = LinkConditions::perfect(20 * MS);
    c.jitter = 4 * MS;
    c.loss = 0.05;
    c.duplicate = 0.02;
    c.corrupt = 0.01;
    c.reorder = 0.02;
    c.reorder_delay = 15 * MS;
    c
}

/// Runs the game and returns every datagram the tap saw, in the order sent: a plain
/// client and a secure one, each connecting to its server and playing for `ticks` ticks
/// at 60 Hz (inputs reliable, states unreliable, a passive position every sixth tick, a
/// chat line on the unordered channel now and then, one 3,000-byte reliable packet each
/// way in fragments), then disconnecting with a code; and a client of another version,
/// refused.
pub(crate) fn simulate(seed: u64, ticks: u32) -> Vec<TapRecord> {
    let (server, secure_server) = (addr(SERVER), addr(SECURE_SERVER));
    let (plain, secure, stranger) = (addr(PLAIN_CLIENT), addr(SECURE_CLIENT), addr(STRANGER));
    let mut net = Network::new(seed);
    net.enable_tap();
    let start = net.now();
    let key = PrivateKey::from_bytes(BACKEND_KEY);
    // The plain pair's ids start just below the wrap of both id spaces, where the 24-bit
    // packet ids also reach a sentinel's and a window acknowledgement's spacing.
    let mut config = peer_config(APP_VERSION);
    config.sequence_start = SequenceStart::fixed(0xFFFF_FF00, 0xFF_FF80);
    net.add_host(server, config).expect("valid config");
    let mut config = peer_config(APP_VERSION);
    config.secure = Some(SecureConfig::server(key.clone(), vec![secure_server], start, UNIX));
    net.add_host(secure_server, config).expect("valid config");
    let mut config = peer_config(APP_VERSION);
    config.sequence_start = SequenceStart::fixed(0xFFFF_FFC0, 0xFF_FFC0);
    net.add_host(plain, config).expect("valid config");
    let mut config = peer_config(APP_VERSION);
    config.secure = Some(SecureConfig::client());
    net.add_host(secure, config).expect("valid config");
    net.add_host(stranger, peer_config(APP_VERSION + 1)).expect("valid config");
    net.set_link_both(server, plain, lossy());
    net.set_link_both(secure_server, secure, lossy());

    let to_plain = net.host_mut(plain).connect_with(start, server, b"player one, ticket 8f3a").expect("connect");
    let params = TokenParams::new(2, vec![secure_server], UNIX, Duration::from_secs(60));
    let token = token::generate(&key, &params, &mut seeded_rng(seed)).expect("a token");
    let to_secure = net.host_mut(secure).connect_with_token(start, secure_server, &token).expect("connect");
    net.host_mut(stranger).connect(start, server).expect("connect");

    // Each server's id for its client, once connected.
    let mut players: [Option<PeerId>; 2] = [None, None];
    let mut up = [false; 2];
    let drain = |net: &mut Network, players: &mut [Option<PeerId>; 2], up: &mut [bool; 2]| {
        for (i, (host, client)) in [(server, plain), (secure_server, secure)].into_iter().enumerate() {
            while let Some(e) = net.poll_event(host) {
                if let Event::Connected { peer, remote, .. } = e
                    && remote == client
                {
                    players[i] = Some(peer);
                }
            }
            while let Some(e) = net.poll_event(client) {
                up[i] |= matches!(e, Event::Connected { .. });
            }
        }
        while net.poll_event(stranger).is_some() {}
    };
    net.run_until(5 * Duration::from_secs(1), |net| {
        drain(net, &mut players, &mut up);
        up == [true, true] && players.iter().all(Option::is_some)
    });
    let (Some(plain_player), Some(secure_player)) = (players[0], players[1]) else {
        panic!("seed {seed}: both clients connect");
    };
    let sessions = [(plain, to_plain, server, plain_player), (secure, to_secure, secure_server, secure_player)];
    for i in 0..ticks {
        for &(client, to_server, host, player) in &sessions {
            let mut send = |from: SocketAddr, peer, channel, mode, data: Vec<u8>| {
                // A full queue only costs this tick's packet, as in a game.
                let _ = net.host_mut(from).send(peer, channel, Bytes::from(data), mode);
            };
            send(client, to_server, 0, SendMode::Reliable, format!("input {i:05}").into_bytes().repeat(3));
            send(host, player, 1, SendMode::Unreliable, vec![(i % 251) as u8; 200]);
            if i % 6 == 0 {
                send(client, to_server, 2, SendMode::Passive, format!("position {i:05}").into_bytes());
            }
            if i % 25 == 7 {
                send(client, to_server, 3, SendMode::Reliable, format!("chat line {i}").into_bytes());
            }
            if i == 20 {
                // A map chunk and a replay: fragmented on both ways.
                send(host, player, 2, SendMode::Reliable, vec![0xC4; 3000]);
                send(client, to_server, 2, SendMode::Reliable, vec![0xD5; 3000]);
            }
        }
        net.run_for(TICK, |net| drain(net, &mut players, &mut up));
    }
    let now = net.now();
    net.host_mut(plain).disconnect_with(now, to_plain, 7);
    net.host_mut(secure).disconnect_with(now, to_secure, 9);
    net.run_for(Duration::from_secs(2), |net| drain(net, &mut players, &mut up));
    net.drain_tap().collect()
}

/// What became of the datagram `records[i]`, for its comment: a second copy (the link
/// duplicated it) is told apart from the first by the record before it.
pub(crate) fn fate(records: &[TapRecord], i: usize) -> String {
    let r = &records[i];
    let ms = |at: Duration| (at - r.sent).as_secs_f64() * 1000.0;
    let copy = i > 0 && {
        let p = &records[i - 1];
        (p.sent, p.from, p.to, &p.payload) == (r.sent, r.from, r.to, &r.payload)
    };
    let copy = if copy { "duplicated by the network: this copy " } else { "" };
    match r.fate {
        Fate::Delivered(at) => format!("{copy}delivered after {:.3} ms", ms(at)),
        Fate::Corrupted(at) => {
            format!("{copy}corrupted on the way (one bit flipped), delivered after {:.3} ms and dropped", ms(at))
        }
        Fate::Lost => "lost".into(),
        Fate::QueueFull => "dropped: the bottleneck's queue was full".into(),
        Fate::TooBig => "dropped: larger than the link's MTU".into(),
        Fate::Down => "dropped: the link was down".into(),
        Fate::Scripted => "dropped by the test's script".into(),
        Fate::Held => "held by the test".into(),
        _ => format!("{:?}", r.fate),
    }
}

/// Writes `records` as a pcapng capture: one interface, each datagram at the time it was
/// sent (from [`EPOCH`]) with its fate as the comment.
pub(crate) fn write_capture(records: &[TapRecord], out: impl Write) -> io::Result<()> {
    let mut w = Writer::new(out, "porous-proto examples/capture (the simulator's tap)")?;
    let sim = w.add_interface("sim", "porous_proto::sim::Network: every datagram as sent, with its fate")?;
    for (i, r) in records.iter().enumerate() {
        let comment = fate(records, i);
        w.datagram(&Datagram {
            interface: sim,
            time: EPOCH + r.sent,
            from: r.from,
            to: r.to,
            payload: &r.payload,
            direction: Some(Direction::Outbound),
            comment: Some(&comment),
        })?;
    }
    w.flush()
}
