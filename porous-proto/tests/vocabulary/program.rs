//! One program written against a crate's re-exports alone: `crate::adapter` is
//! porous-proto itself in its `tests/vocabulary.rs`, and an adapter in the adapter's
//! `tests/reexports.rs`. It names everything at porous-proto's root (the vocabulary test
//! holds it to `src/lib.rs`), so each crate that compiles it gives an application the
//! whole vocabulary, with no porous-proto or bytes in its Cargo.toml.

use std::net::SocketAddr;
use std::time::Duration;

use crate::adapter::{
    AdmissionError, Bytes, ChannelConfig, ConfigError, CongestionControl, CongestionMode, CongestionStats,
    ConnectError, DEFAULT_UNRELIABLE_DEADLINE, DisconnectReason, Event, Host, HostConfig, HostStats, Instant,
    MemoryUsage, Mismatch, PeerConfig, PeerId, PeerMap, PeerState, PeerStats, Priority, SecureConfig, SendError,
    SendMode, SequenceStart, TransferStats, Transmit, rendezvous, seq, token, wire,
};

/// What a server application writes about its events.
fn describe(event: &Event) -> String {
    match event {
        Event::Connected { peer, remote, data, client_id, .. } => {
            format!("{peer} from {remote} ({} bytes, client {client_id:?})", data.len())
        }
        Event::ConnectRequest { peer, .. } => format!("{peer} asks"),
        Event::Received { channel, mode, data, .. } => format!("{} bytes on {channel} ({mode:?})", data.len()),
        Event::Disconnected { reason: DisconnectReason::Remote { code, .. }, .. } => format!("left with {code}"),
        Event::Disconnected { reason, .. } => format!("gone: {reason}"),
        _ => String::new(),
    }
}

/// What it does with the errors and reasons the library reports.
fn explain(send: SendError, connect: ConnectError, admission: AdmissionError, mismatch: Mismatch) -> [String; 4] {
    let send = match send {
        SendError::QueueFull { channel, .. } => format!("channel {channel} is full"),
        other => other.to_string(),
    };
    let mismatch = match mismatch {
        Mismatch::AppVersion { local, remote, .. } => format!("version {local} here, {remote} there"),
        other => other.to_string(),
    };
    [send, connect.to_string(), admission.to_string(), mismatch]
}

/// What it reads of a connection's figures.
fn health(stats: &PeerStats) -> (PeerState, Duration, f64, TransferStats, CongestionStats) {
    (stats.state, stats.rtt, stats.loss(), stats.transfer, stats.congestion)
}

pub(crate) fn run() {
    // Configuration: channels, deadlines, the controller, where ids start.
    let mut config = HostConfig::default();
    config.peer.channels =
        vec![ChannelConfig::with_priority(Priority::High), ChannelConfig::with_priority(Priority::Low)];
    config.peer.channels.push(ChannelConfig::unordered());
    config.peer.channels[0].unreliable_deadline = Some(DEFAULT_UNRELIABLE_DEADLINE / 2);
    config.peer.congestion = CongestionControl::Aimd;
    config.sequence_start = SequenceStart::fixed(u32::MAX - 10, 5);
    assert_eq!(config.validate(), Ok(()));
    let mut peer: PeerConfig = config.peer.clone();
    peer.mtu = 10;
    assert_eq!(peer.validate(), Err(ConfigError::Mtu(10)));

    // Secure mode: a backend's token for a server.
    let key = token::PrivateKey::from_bytes([1; 32]);
    let server: SocketAddr = "127.0.0.1:7777".parse().expect("an address");
    config.secure = Some(SecureConfig::server(key.clone(), vec![server], Instant::now(), 1_800_000_000));
    assert_eq!(config.validate(), Ok(()));
    let params = token::TokenParams::new(7, vec![server], 1_800_000_000, Duration::from_secs(30));
    let bytes = token::generate_from_entropy(&key, &params).expect("a token");
    let view = token::ConnectToken::decode(&bytes).expect("the client's part");
    assert_eq!(view.server_addresses(), [server]);

    // Events, errors and reasons.
    let _: fn(&Event) -> String = describe;
    let reason = DisconnectReason::remote(7);
    assert_eq!((reason.code(), DisconnectReason::rejected(3).code()), (Some(7), Some(3)));
    let _: fn(SendError, ConnectError, AdmissionError, Mismatch) -> [String; 4] = explain;

    // Counters.
    let host = HostStats::default();
    assert_eq!(host.peers, host.connecting + host.connected);
    assert_eq!(CongestionStats::default().mode, CongestionMode::SlowStart);
    assert_eq!(MemoryUsage::default().total, 0);
    let _: fn(&PeerStats) -> (PeerState, Duration, f64, TransferStats, CongestionStats) = health;

    // Per-peer data, payloads, datagrams.
    let mut names: PeerMap<String> = PeerMap::new();
    assert!(names.is_empty());
    names.clear();
    let datagram = Transmit::new(server, Bytes::from_static(b"datagram"));
    assert_eq!((datagram.remote, datagram.payload.len()), (server, 8));
    let _: Option<(Host, PeerId, SendMode)> = None;

    // The wire format and id arithmetic, for tools.
    assert_eq!(wire::MAX_CONNECT_DATA, 256);
    // Meeting behind NATs: an introducer's messages.
    let meet = rendezvous::Message::Meet { key: 7 };
    assert_eq!(rendezvous::Message::decode(&meet.encode()), Ok(meet));
    assert_eq!(seq::SeqSpace::PACKET.bits(), 24);
}
