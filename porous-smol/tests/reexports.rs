//! Everything an application names comes from the adapter, so its Cargo.toml needs no
//! porous-proto and no bytes. Every adapter crate has this same test against its own name:
//! the same vocabulary everywhere.

use porous_smol::{
    AdmissionError, Batching, Bytes, ChannelConfig, ConfigError, ConnectError, DisconnectReason, Event, HostConfig,
    HostStats, MemoryUsage, Mismatch, PeerConfig, PeerId, PeerState, PeerStats, Priority, SOCKET_BUFFER, SendError,
    SendMode, SequenceStart, SocketStats, TransferStats, Transmit, proto,
};

#[test]
fn an_application_configures_and_names_everything_through_the_adapter() {
    let mut config = HostConfig::default();
    config.peer.channels =
        vec![ChannelConfig::with_priority(Priority::High), ChannelConfig::with_priority(Priority::Low)];
    config.sequence_start = SequenceStart::fixed(u32::MAX - 10, 5);
    assert_eq!(config.validate(), Ok(()));
    let mut peer: PeerConfig = config.peer;
    peer.mtu = 10;
    assert_eq!(peer.validate(), Err(ConfigError::Mtu(10)));

    // The core itself, for what the adapter does not wrap, under the same names.
    let _: fn(&proto::Host) -> HostStats = proto::Host::stats;
    let _: fn(&proto::Host) -> MemoryUsage = proto::Host::memory_usage;
    let _: fn(&proto::Host, PeerId) -> Option<PeerStats> = proto::Host::peer_stats;
    let _: fn(&PeerStats) -> (PeerState, TransferStats) = |s| (s.state, s.transfer);
    let _: fn(&mut proto::Host) -> Option<Transmit> = proto::Host::poll_transmit;
    let _: fn(&mut proto::Host) -> Option<Event> = proto::Host::poll_event;
    let _: fn(&mut proto::Host, PeerId, usize, Bytes, SendMode) -> Result<(), SendError> = proto::Host::send;
    let _: Option<(ConnectError, DisconnectReason, Mismatch, AdmissionError)> = None;

    // The socket layer's vocabulary.
    assert_eq!(SOCKET_BUFFER, 1 << 20);
    assert_eq!(Batching::default(), Batching::FULL);
    assert_eq!(SocketStats::default().sent, 0);
}
