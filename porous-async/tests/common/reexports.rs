//! What every async adapter adds to porous-proto's vocabulary, named through
//! `crate::adapter` alone (porous-async itself, or a runtime crate), and payloads passed
//! the one way: anything `Into<Bytes>`, as the core's `Host::send` takes them.

use std::time::Duration;

use crate::adapter::{
    ACCEPT_BACKLOG, Batching, Bytes, DELIVERY_QUEUE, DeliveryStats, DisconnectReason, Disconnected, EVENT_QUEUE, Error,
    Events, Host, HostEvent, Incoming, Packet, Peer, PeerId, PeerInfo, Runtime, SOCKET_BUFFER, SendError, SendMode,
    SocketStats, proto, runtime,
};

pub(crate) fn check() {
    assert_eq!(SOCKET_BUFFER, 1 << 20);
    assert_eq!(Batching::default(), Batching::FULL);
    assert_eq!(SocketStats::default().sent, 0);
    assert_eq!(DeliveryStats::default().queued, 0);
    const { assert!(DELIVERY_QUEUE > 0 && ACCEPT_BACKLOG > 0 && EVENT_QUEUE > 0) };
    assert_eq!(Packet::new(1, SendMode::Reliable, "x").data, Bytes::from_static(b"x"));
    assert_eq!(Disconnected(DisconnectReason::Timeout).0, DisconnectReason::Timeout);
    let _: Option<(Error, Events, HostEvent, Incoming, PeerInfo, runtime::Interest, Duration)> = None;
    let _: Option<&dyn Runtime> = None;

    // Payloads: `Bytes`, `Vec<u8>`, `&'static str`, the same everywhere.
    let _ = |peer: &Peer| -> Result<(), SendError> {
        peer.send(0, vec![1u8, 2, 3], SendMode::Reliable)?;
        peer.send(0, "text", SendMode::Unreliable)?;
        peer.send(0, Bytes::from_static(b"bytes"), SendMode::Passive)
    };
    let _ = |host: &Host, peers: Vec<PeerId>| {
        host.broadcast(1, vec![0u8; 100], SendMode::Unreliable);
        host.send_to(peers, 1, "to a few", SendMode::Reliable);
    };
    let _ = |core: &mut proto::Host, peer: PeerId| core.send(peer, 0, vec![1u8], SendMode::Reliable);
}
