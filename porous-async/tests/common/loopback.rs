//! The adapter over real UDP on loopback, with ephemeral ports: the behaviour suite every
//! async runtime crate runs, written once. A runtime's `tests/loopback.rs` includes this
//! file as a module beside a module `rt` that names its crate's types, its `spawn`,
//! `spawn_detached` and `sleep` and its UDP socket, and runs each scenario (listed by
//! `every_scenario!`) under a generous deadline on its runtime instead of sleeps tuned to
//! luck, so a loaded machine only makes them slower.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use porous_loopback::rebind::Rebinder;

use crate::rt::{
    ConnectError, DELIVERY_QUEUE, DisconnectReason, Disconnected, Error, Events, Host, HostConfig, HostEvent, Packet,
    Peer, PeerId, PeerInfo, PeerState, SendError, SendMode, UdpSocket, sleep, spawn, spawn_detached,
};

/// Invokes the macro `$run` with the name of every scenario in this file, so that each
/// runtime runs all of them: `$run!(name, name, ...)`.
macro_rules! every_scenario {
    ($run:ident) => {
        $run!(
            connects_accepts_and_exchanges_packets_both_ways,
            errors_are_the_cores_own,
            large_packets_are_fragmented_and_reassembled,
            a_silent_remote_times_out_on_both_sides,
            connecting_to_a_silent_address_times_out,
            dropping_handles_during_traffic_stops_the_driver,
            unaccepted_connections_end_once_no_host_handle_is_left,
            all_three_modes_on_several_channels_arrive_intact_in_order,
            disconnect_flushes_everything_sent_first,
            a_hundred_clients_on_one_server,
            a_slow_consumer_gets_backpressure_and_counted_drops,
            the_host_lists_its_peers_and_streams_who_joins_and_who_leaves,
            peer_counts_return_to_zero_once_the_clients_have_left,
            a_broadcast_reaches_every_peer_and_send_to_only_the_set,
            hosts_run_on_sockets_the_application_bound,
            a_client_whose_nat_rebinds_keeps_its_connection,
        );
    };
}
pub(crate) use every_scenario;

pub(crate) async fn bind(config: &HostConfig) -> Host {
    Host::bind("127.0.0.1:0", config.clone()).await.expect("bind")
}

/// A server and a client host, and the connection between them from each side:
/// `(server, client, to_server, to_client)`.
async fn pair(config: &HostConfig) -> (Host, Host, Peer, Peer) {
    let server = bind(config).await;
    let client = bind(config).await;
    let accepting = spawn({
        let server = server.clone();
        async move { server.accept().await.expect("accept") }
    });
    let to_server = client.connect(server.local_addr()).await.expect("connect");
    let to_client = accepting.await;
    (server, client, to_server, to_client)
}

/// A payload that says where it belongs: channel, index, mode, then `len` filler bytes
/// derived from the index.
fn packet(channel: usize, index: u32, mode: SendMode, len: usize) -> Vec<u8> {
    let mut p = vec![channel as u8, mode_byte(mode)];
    p.extend_from_slice(&index.to_le_bytes());
    p.extend((0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(index) as u8));
    p
}

fn mode_byte(mode: SendMode) -> u8 {
    match mode {
        SendMode::Reliable => 0,
        SendMode::Unreliable => 1,
        SendMode::Passive => 2,
    }
}

/// Checks a payload made by `packet` and returns its index and mode byte.
fn check(channel: usize, data: &[u8]) -> (u32, u8) {
    assert_eq!(data[0] as usize, channel, "packet on the wrong channel");
    let index = u32::from_le_bytes(data[2..6].try_into().unwrap());
    let filler = &data[6..];
    assert!(
        filler.iter().enumerate().all(|(i, &b)| b == (i as u32).wrapping_mul(31).wrapping_add(index) as u8),
        "payload corrupted"
    );
    (index, data[1])
}

/// Polls `condition` until it holds; the test's deadline bounds the wait.
async fn until(mut condition: impl FnMut() -> bool) {
    while !condition() {
        sleep(Duration::from_millis(5)).await;
    }
}

pub(crate) async fn connects_accepts_and_exchanges_packets_both_ways() {
    let (server, client, to_server, to_client) = pair(&HostConfig::default()).await;
    assert_eq!(to_server.remote(), server.local_addr());
    assert_eq!(to_client.remote(), client.local_addr());
    assert_eq!(to_server.stats().unwrap().state, PeerState::Connected);
    assert_eq!(server.stats().accepted, 1);

    to_server.send(1, &b"ping"[..], SendMode::Reliable).unwrap();
    assert_eq!(to_client.recv().await.unwrap(), Packet::new(1, SendMode::Reliable, "ping"));
    to_client.send(3, b"pong".to_vec(), SendMode::Reliable).unwrap();
    assert_eq!(to_server.recv().await.unwrap(), Packet::new(3, SendMode::Reliable, "pong"));
    assert_eq!(to_server.disconnect().await, DisconnectReason::Local);
    assert_eq!(to_client.recv().await, Err(Disconnected(DisconnectReason::remote(0))));
}

pub(crate) async fn errors_are_the_cores_own() {
    let mut bad = HostConfig::default();
    bad.max_peers = 0;
    assert!(matches!(Host::bind("127.0.0.1:0", bad).await, Err(Error::Config(_))));

    let (server, client, to_server, to_client) = pair(&HostConfig::default()).await;
    let unspecified: SocketAddr = "0.0.0.0:4000".parse().unwrap();
    assert!(matches!(client.connect(unspecified).await, Err(Error::Connect(ConnectError::InvalidAddress))));
    let twice = client.connect(server.local_addr()).await;
    assert!(matches!(twice, Err(Error::Connect(ConnectError::PeerExists(id))) if id == to_server.id()));

    let sent = to_server.send(9, &b"x"[..], SendMode::Reliable);
    assert!(matches!(sent, Err(SendError::NoSuchChannel { channel: 9, channels: 4, .. })), "{sent:?}");
    let max = HostConfig::default().peer.max_packet_size;
    let sent = to_server.send(0, vec![0; max + 1], SendMode::Reliable);
    assert!(
        matches!(sent, Err(SendError::TooLarge { size, max: limit, .. }) if size == max + 1 && limit == max),
        "{sent:?}"
    );
    to_server.disconnect_now();
    assert_eq!(to_server.send(0, &b"x"[..], SendMode::Reliable), Err(SendError::NotConnected));
    assert_eq!(to_server.recv().await, Err(Disconnected(DisconnectReason::Local)));
    assert_eq!(to_client.recv().await, Err(Disconnected(DisconnectReason::remote(0))));
}

pub(crate) async fn all_three_modes_on_several_channels_arrive_intact_in_order() {
    const CHANNELS: usize = 4;
    const PER_CHANNEL: u32 = 300;
    const MODES: [SendMode; 3] = [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive];
    let (_server, _client, to_server, to_client) = pair(&HostConfig::default()).await;
    let sender = spawn(async move {
        for index in 0..=PER_CHANNEL {
            for channel in 0..CHANNELS {
                // The last packet of each channel is reliable: it marks the end.
                let mode = if index == PER_CHANNEL { SendMode::Reliable } else { MODES[index as usize % 3] };
                let data = packet(channel, index, mode, 20 + index as usize % 50);
                while let Err(e) = to_server.send(channel, data.clone(), mode) {
                    assert!(matches!(e, SendError::QueueFull { channel: c, .. } if c == channel), "{e:?}");
                    sleep(Duration::from_millis(1)).await;
                }
            }
        }
        to_server
    });

    let mut last = [None::<u32>; CHANNELS];
    let mut reliable = [0u32; CHANNELS];
    let mut others = 0;
    while last.iter().any(|l| *l != Some(PER_CHANNEL)) {
        let Packet { channel, data, mode: sent_as, .. } = to_client.recv().await.unwrap();
        let (index, mode) = check(channel, &data);
        assert!(last[channel].is_none_or(|l| index > l), "channel {channel}: {index} after {last:?}");
        assert_eq!(mode, if index == PER_CHANNEL { 0 } else { mode_byte(MODES[index as usize % 3]) });
        assert_eq!(mode_byte(sent_as), mode, "recv reports the mode the packet was sent with");
        if mode == 0 {
            assert_eq!(index, reliable[channel] * 3, "a reliable packet is missing on channel {channel}");
            reliable[channel] += 1;
        } else {
            others += 1;
        }
        last[channel] = Some(index);
    }
    assert_eq!(reliable, [PER_CHANNEL / 3 + 1; CHANNELS]);
    assert!(others > 0, "no unreliable or passive packet arrived");
    drop(sender.await);
}

pub(crate) async fn large_packets_are_fragmented_and_reassembled() {
    let config = HostConfig::default();
    let max = config.peer.max_packet_size;
    let (_server, _client, to_server, to_client) = pair(&config).await;
    let sizes = [(0, max - 6, SendMode::Reliable), (1, 300_000, SendMode::Passive), (2, 65_536, SendMode::Reliable)];
    for &(channel, len, mode) in &sizes {
        to_server.send(channel, packet(channel, len as u32, mode, len), mode).unwrap();
    }
    let mut got = Vec::new();
    for _ in &sizes {
        let Packet { channel, data, .. } = to_client.recv().await.unwrap();
        let (index, _) = check(channel, &data);
        assert_eq!(data.len(), index as usize + 6);
        got.push((channel, data.len()));
    }
    got.sort_unstable();
    assert_eq!(got, sizes.iter().map(|&(c, len, _)| (c, len + 6)).collect::<Vec<_>>());
    let stats = to_server.stats().unwrap();
    assert!(stats.transfer.datagrams_sent as usize > (max + 300_000) / stats.mtu, "{stats:?}");
}

pub(crate) async fn disconnect_flushes_everything_sent_first() {
    const COUNT: u32 = 1000;
    let (_server, _client, to_server, to_client) = pair(&HostConfig::default()).await;
    for index in 0..COUNT {
        to_server
            .send(index as usize % 4, packet(index as usize % 4, index, SendMode::Reliable, 1000), SendMode::Reliable)
            .unwrap();
    }
    // Most of it is still queued: the congestion window opens over several round trips.
    let disconnecting = spawn({
        let to_server = to_server.clone();
        async move { to_server.disconnect().await }
    });
    let mut next = [0u32; 4];
    loop {
        match to_client.recv().await {
            Ok(Packet { channel, data, .. }) => {
                assert_eq!(check(channel, &data).0, next[channel] * 4 + channel as u32);
                next[channel] += 1;
            }
            Err(end) => {
                assert_eq!(end, Disconnected(DisconnectReason::remote(0)));
                break;
            }
        }
    }
    assert_eq!(next, [COUNT / 4; 4], "every packet sent before disconnect() arrived");
    assert_eq!(disconnecting.await, DisconnectReason::Local);
    // NotConnected while the ended connection lingers in the core, UnknownPeer after.
    let late = to_server.send(0, &b"late"[..], SendMode::Reliable);
    assert!(matches!(late, Err(SendError::NotConnected | SendError::UnknownPeer)), "{late:?}");
    assert_eq!(to_server.recv().await, Err(Disconnected(DisconnectReason::Local)));
}

/// A UDP relay between one client and `server` that forwards until `alive` is cleared,
/// then goes silent.
async fn relay(server: SocketAddr, alive: Arc<AtomicBool>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    // Detached: it ends with the test's runtime.
    spawn_detached(async move {
        let mut buf = vec![0; 65_536];
        let mut client = None;
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            if !alive.load(Ordering::SeqCst) {
                return;
            }
            let to = if from == server {
                client
            } else {
                client = Some(from);
                Some(server)
            };
            if let Some(to) = to {
                let _ = socket.send_to(&buf[..n], to).await;
            }
        }
    });
    addr
}

pub(crate) async fn a_silent_remote_times_out_on_both_sides() {
    let mut config = HostConfig::default();
    config.peer.timeout = Duration::from_secs(1);
    let server = bind(&config).await;
    let client = bind(&config).await;
    let alive = Arc::new(AtomicBool::new(true));
    let via = relay(server.local_addr(), Arc::clone(&alive)).await;

    let to_server = client.connect(via).await.unwrap();
    let to_client = server.accept().await.unwrap();
    to_server.send(0, &b"through the relay"[..], SendMode::Reliable).unwrap();
    assert_eq!(to_client.recv().await.unwrap(), Packet::new(0, SendMode::Reliable, "through the relay"));

    alive.store(false, Ordering::SeqCst);
    let silent = Instant::now();
    assert_eq!(to_server.recv().await, Err(Disconnected(DisconnectReason::Timeout)));
    assert_eq!(to_client.recv().await, Err(Disconnected(DisconnectReason::Timeout)));
    // Allow for the last datagram heard a little before the relay went quiet.
    assert!(silent.elapsed() >= Duration::from_millis(500), "timed out too early: {:?}", silent.elapsed());
}

pub(crate) async fn connecting_to_a_silent_address_times_out() {
    let mut config = HostConfig::default();
    config.peer.connect_timeout = Duration::from_secs(1);
    let client = bind(&config).await;
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let result = client.connect(silent.local_addr().unwrap()).await;
    assert!(matches!(result, Err(Error::Failed(DisconnectReason::Timeout))), "{result:?}");
}

pub(crate) async fn a_hundred_clients_on_one_server() {
    const CLIENTS: usize = 100;
    const PACKETS: usize = 10;
    let config = HostConfig::default();
    let server = bind(&config).await;
    // Echo every packet on its channel.
    let acceptor = spawn({
        let server = server.clone();
        async move {
            let mut echoes = Vec::new();
            for _ in 0..CLIENTS {
                let peer = server.accept().await.unwrap();
                echoes.push(spawn(async move {
                    let mut echoed = 0;
                    while let Ok(Packet { channel, data, .. }) = peer.recv().await {
                        peer.send(channel, data, SendMode::Reliable).unwrap();
                        echoed += 1;
                    }
                    echoed
                }));
            }
            let mut total = 0;
            for echo in echoes {
                total += echo.await;
            }
            total
        }
    });

    let addr = server.local_addr();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let config = config.clone();
            spawn(async move {
                let host = bind(&config).await;
                let peer = host.connect(addr).await.unwrap();
                for i in 0..PACKETS {
                    peer.send(
                        i % 4,
                        packet(i % 4, (c * PACKETS + i) as u32, SendMode::Reliable, 100),
                        SendMode::Reliable,
                    )
                    .unwrap();
                }
                let mut echoed = Vec::new();
                for _ in 0..PACKETS {
                    let Packet { channel, data, .. } = peer.recv().await.unwrap();
                    let (index, _) = check(channel, &data);
                    assert_eq!(index as usize % PACKETS % 4, channel);
                    echoed.push(index as usize);
                }
                echoed.sort_unstable();
                assert_eq!(echoed, (c * PACKETS..(c + 1) * PACKETS).collect::<Vec<_>>(), "client {c}");
                assert_eq!(peer.disconnect().await, DisconnectReason::Local);
            })
        })
        .collect();
    for client in clients {
        client.await;
    }
    assert_eq!(acceptor.await, CLIENTS * PACKETS);
    assert_eq!(server.stats().accepted, CLIENTS as u64);
}

pub(crate) async fn a_slow_consumer_gets_backpressure_and_counted_drops() {
    const UNRELIABLE: u32 = 2 * DELIVERY_QUEUE as u32;
    const RELIABLE: u32 = 3 * DELIVERY_QUEUE as u32;
    let (_server, _client, to_server, to_client) = pair(&HostConfig::default()).await;
    // Fill the client's queue with unreliable packets it does not read.
    for index in 0..UNRELIABLE {
        to_server.send(1, packet(1, index, SendMode::Unreliable, 8), SendMode::Unreliable).unwrap();
    }
    until(|| to_client.delivery_stats().unreliable_dropped > 0).await;
    // Reliable packets beyond the full queue are held, then the peer's datagrams deferred.
    for index in 0..RELIABLE {
        to_server.send(0, packet(0, index, SendMode::Reliable, 8), SendMode::Reliable).unwrap();
    }
    until(|| to_client.delivery_stats().datagrams_deferred > 0).await;
    let stalled = to_client.delivery_stats();
    assert_eq!(stalled.queued, DELIVERY_QUEUE);

    // Now read it all: every reliable packet arrives, in order.
    let (mut unreliable, mut reliable) = (0, 0);
    while reliable < RELIABLE {
        let Packet { channel, data, .. } = to_client.recv().await.unwrap();
        let (index, _) = check(channel, &data);
        if channel == 0 {
            assert_eq!(index, reliable);
            reliable += 1;
        } else {
            unreliable += 1;
        }
    }
    let stats = to_client.delivery_stats();
    assert!(unreliable >= DELIVERY_QUEUE as u32, "the queue was full of unreliable packets");
    assert!(u64::from(unreliable) + stats.unreliable_dropped <= u64::from(UNRELIABLE));
    assert!(stats.unreliable_dropped >= stalled.unreliable_dropped);
}

pub(crate) async fn dropping_handles_during_traffic_stops_the_driver() {
    let (server, client, to_server, to_client) = pair(&HostConfig::default()).await;
    drop(server);
    // The server streams until its connection ends.
    let streaming = spawn(async move {
        let mut index = 0u32;
        loop {
            let mode = if index.is_multiple_of(2) { SendMode::Reliable } else { SendMode::Unreliable };
            match to_client.send(0, packet(0, index, mode, 200), mode) {
                Ok(()) => index += 1,
                Err(SendError::QueueFull { .. }) => sleep(Duration::from_millis(1)).await,
                Err(_) => break,
            }
            if index.is_multiple_of(16) {
                sleep(Duration::from_millis(1)).await;
            }
        }
        to_client.recv().await
    });

    let mut last = None;
    for _ in 0..100 {
        let Packet { channel, data, .. } = to_server.recv().await.unwrap();
        let (index, _) = check(channel, &data);
        assert!(last.is_none_or(|l| index > l));
        last = Some(index);
    }
    // A live Peer keeps the driver running without any Host handle.
    let addr = client.local_addr();
    drop(client);
    for _ in 0..100 {
        let Packet { channel, data, .. } = to_server.recv().await.unwrap();
        let (index, _) = check(channel, &data);
        assert!(last.is_none_or(|l| index > l));
        last = Some(index);
    }
    // Dropping the last handle, with packets still arriving, ends the connection and the driver.
    drop(to_server);
    assert_eq!(streaming.await, Err(Disconnected(DisconnectReason::remote(0))));
    // The driver closed the socket: its port can be bound again.
    until(|| std::net::UdpSocket::bind(addr).is_ok()).await;
}

pub(crate) async fn unaccepted_connections_end_once_no_host_handle_is_left() {
    let config = HostConfig::default();
    let server = bind(&config).await;
    let addr = server.local_addr();
    let (one, two, three) = (bind(&config).await, bind(&config).await, bind(&config).await);
    let accepted = one.connect(addr).await.unwrap();
    let on_server = server.accept().await.unwrap();
    let queued = two.connect(addr).await.unwrap();
    // The accepted Peer keeps the server's driver running without a Host handle.
    drop(server);
    assert_eq!(queued.recv().await, Err(Disconnected(DisconnectReason::remote(0))));
    let refused = three.connect(addr).await.unwrap();
    assert_eq!(refused.recv().await, Err(Disconnected(DisconnectReason::remote(0))));

    accepted.send(0, &b"still here"[..], SendMode::Reliable).unwrap();
    assert_eq!(on_server.recv().await.unwrap(), Packet::new(0, SendMode::Reliable, "still here"));
}

/// The next connection event, which must come.
async fn next_event(events: &mut Events) -> HostEvent {
    events.next().await.expect("the host's event stream ended")
}

/// The next event of `events`, which must be `Connected`: its connection.
async fn joined(events: &mut Events) -> PeerInfo {
    match next_event(events).await {
        HostEvent::Connected { peer, .. } => peer,
        other => panic!("expected a connection, got {other:?}"),
    }
}

/// The next event of `events`, which must be `Disconnected`: its connection and reason.
async fn left(events: &mut Events) -> (PeerInfo, DisconnectReason) {
    match next_event(events).await {
        HostEvent::Disconnected { peer, reason, .. } => (peer, reason),
        other => panic!("expected a disconnection, got {other:?}"),
    }
}

fn ids(peers: &[PeerInfo]) -> Vec<PeerId> {
    let mut ids: Vec<PeerId> = peers.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    ids
}

/// A server sees its whole population without a list of its own: `peers()` and the event
/// stream agree on who is connected, with each one's connect data; it notices every
/// departure (graceful, handles dropped, kicked) with its reason; a stream opened later
/// starts with the connections already there.
pub(crate) async fn the_host_lists_its_peers_and_streams_who_joins_and_who_leaves() {
    let config = HostConfig::default();
    let server = bind(&config).await;
    let mut events = server.events();
    let addr = server.local_addr();
    let mut clients = Vec::new();
    for name in [&b"ada"[..], b"bob", b"cy"] {
        let host = bind(&config).await;
        let peer = host.connect_with(addr, name).await.expect("connect");
        clients.push((host, peer));
    }
    // The server has accepted none of them yet: they wait in its backlog, connected.
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(joined(&mut events).await);
    }
    let mut names: Vec<&[u8]> = seen.iter().map(|p| &p.data[..]).collect();
    names.sort_unstable();
    assert_eq!(names, [&b"ada"[..], b"bob", b"cy"]);
    assert_eq!(ids(&server.peers()), ids(&seen));
    let mut remotes: Vec<SocketAddr> = seen.iter().map(|p| p.remote).collect();
    let mut expected: Vec<SocketAddr> = clients.iter().map(|(host, _)| host.local_addr()).collect();
    remotes.sort_unstable();
    expected.sort_unstable();
    assert_eq!(remotes, expected);
    assert!(seen.iter().all(|p| p.client_id.is_none()), "plain mode has no client ids");
    let mut accepted = Vec::new();
    for _ in 0..3 {
        accepted.push(server.accept().await.expect("accept"));
    }
    let of = |name: &[u8]| accepted.iter().find(|p| &p.connect_data()[..] == name).expect("accepted").clone();
    let (ada, bob, cy) = (of(b"ada"), of(b"bob"), of(b"cy"));
    let find = |info: &PeerInfo, peer: &Peer| info.id == peer.id();

    // A stream opened now starts with everyone already connected.
    let mut late = server.events();
    let mut present = Vec::new();
    for _ in 0..3 {
        present.push(joined(&mut late).await);
    }
    assert_eq!(ids(&present), ids(&seen));

    // Ada leaves gracefully; Bob's program drops everything; the server kicks Cy.
    let (ada_host, ada_peer) = clients.remove(0);
    assert_eq!(ada_peer.disconnect().await, DisconnectReason::Local);
    let (gone, reason) = left(&mut events).await;
    assert!(find(&gone, &ada), "{gone:?}");
    assert_eq!(reason, DisconnectReason::remote(0));
    assert!(!server.peers().iter().any(|p| p.id == gone.id), "listed after its end was reported");
    drop((ada_host, ada_peer));

    drop(clients.remove(0));
    let (gone, reason) = left(&mut events).await;
    assert!(find(&gone, &bob), "{gone:?}");
    assert_eq!(reason, DisconnectReason::remote(0));

    cy.disconnect_now_with(5);
    let (gone, reason) = left(&mut events).await;
    assert!(find(&gone, &cy), "{gone:?}");
    assert_eq!(reason, DisconnectReason::Local);
    let (_, cy_end) = clients.remove(0);
    assert_eq!(cy_end.recv().await, Err(Disconnected(DisconnectReason::remote(5))));

    assert!(server.peers().is_empty());
    // The late stream saw the same three departures.
    for _ in 0..3 {
        let (gone, _) = left(&mut late).await;
        assert!(ids(&seen).contains(&gone.id));
    }
    // Every stream ends once the driver has stopped.
    drop((server, accepted, ada, bob, cy));
    assert_eq!(events.next().await, None);
}

/// `HostStats::peers` counts live connections (connecting or connected): once the server
/// has reported both clients gone, it reads 0, while the core still holds their lingering
/// state (counted in `closing`) for the linger time. It once read 2 for that whole time.
pub(crate) async fn peer_counts_return_to_zero_once_the_clients_have_left() {
    let config = HostConfig::default();
    let server = bind(&config).await;
    let mut events = server.events();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let host = bind(&config).await;
        let peer = host.connect(server.local_addr()).await.expect("connect");
        clients.push((host, peer));
    }
    for _ in 0..2 {
        joined(&mut events).await;
    }
    let s = server.stats();
    assert_eq!((s.peers, s.connected, s.connecting), (2, 2, 0), "{s:?}");
    for (_, peer) in &clients {
        assert_eq!(peer.disconnect().await, DisconnectReason::Local);
    }
    drop(clients);
    for _ in 0..2 {
        left(&mut events).await;
    }
    let s = server.stats();
    assert_eq!(s.peers, s.connecting + s.connected, "{s:?}");
    assert_eq!((s.peers, s.connected, s.connecting), (0, 0, 0), "{s:?}");
    assert!(s.closing <= 2, "{s:?}");
    assert!(server.peers().is_empty());
}

/// One call reaches every connection, or a chosen set, with the payload shared: no task
/// per peer. A set leaves the others out, and ids that are gone are reported.
pub(crate) async fn a_broadcast_reaches_every_peer_and_send_to_only_the_set() {
    const CLIENTS: usize = 5;
    let config = HostConfig::default();
    let server = bind(&config).await;
    let mut events = server.events();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let host = bind(&config).await;
        let peer = host.connect(server.local_addr()).await.expect("connect");
        clients.push((host, peer));
    }
    let mut joined_ids = Vec::new();
    for _ in 0..CLIENTS {
        joined_ids.push(joined(&mut events).await.id);
    }
    let by_client: Vec<PeerId> = clients
        .iter()
        .map(|(host, _)| {
            let info = server.peers().into_iter().find(|p| p.remote == host.local_addr()).expect("listed");
            info.id
        })
        .collect();
    let chosen = [by_client[1], by_client[3]];
    assert!(server.send_to(chosen, 2, &b"chosen"[..], SendMode::Reliable).is_empty());
    assert!(server.broadcast(2, &b"everyone"[..], SendMode::Reliable).is_empty());
    for (i, (_, peer)) in clients.iter().enumerate() {
        let first = peer.recv().await.expect("a packet");
        if chosen.contains(&by_client[i]) {
            assert_eq!((first.channel, &first.data[..]), (2, &b"chosen"[..]), "client {i}");
            let second = peer.recv().await.expect("a packet");
            assert_eq!(&second.data[..], b"everyone", "client {i}");
        } else {
            assert_eq!((first.channel, &first.data[..]), (2, &b"everyone"[..]), "client {i}");
        }
    }
    // An id that is gone, and a channel that does not exist, are reported per connection.
    let (_, first) = clients.remove(0);
    first.disconnect().await;
    let (gone, _) = left(&mut events).await;
    assert_eq!(gone.id, by_client[0]);
    let refused = server.send_to([by_client[0], by_client[2]], 0, &b"x"[..], SendMode::Reliable);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, by_client[0]);
    let refused = server.broadcast(9, &b"x"[..], SendMode::Reliable);
    assert_eq!(refused.len(), CLIENTS - 1, "{refused:?}");
    assert!(refused.iter().all(|(_, e)| matches!(e, SendError::NoSuchChannel { channel: 9, .. })));
}

/// A host can be made from a socket the application bound itself (quinn's
/// `Endpoint::new` with a socket): it keeps that socket's address and works as a bound one.
pub(crate) async fn hosts_run_on_sockets_the_application_bound() {
    let config = HostConfig::default();
    let server_socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let address = server_socket.local_addr().expect("address");
    let server = Host::from_std(server_socket, config.clone()).expect("a server on the socket");
    assert_eq!(server.local_addr(), address);
    let client = Host::from_std(std::net::UdpSocket::bind("127.0.0.1:0").expect("bind"), config).expect("a client");
    let accepting = spawn({
        let server = server.clone();
        async move { server.accept().await.expect("accept") }
    });
    let to_server = client.connect(address).await.expect("connect");
    let to_client = accepting.await;
    to_server.send(3, &b"own socket"[..], SendMode::Reliable).unwrap();
    assert_eq!(to_client.recv().await.unwrap(), Packet::new(3, SendMode::Reliable, "own socket"));
    to_client.send(0, vec![7; 5000], SendMode::Reliable).unwrap();
    assert_eq!(to_server.recv().await.unwrap().data.len(), 5000);
}

/// Address change through the async layer (issue 38): a client reaches the server through
/// a lossy NAT-like relay that rebinds mid-stream. Reliable messages go on arriving
/// exactly once and in order both ways, and the server's handle, its list of peers and
/// its event stream all follow the connection to the new port. (The handle and the list
/// once kept the address of the handshake: the server's view of its client went stale.)
pub(crate) async fn a_client_whose_nat_rebinds_keeps_its_connection() {
    const MESSAGES: u32 = 300;
    let config = HostConfig::default();
    let server = bind(&config).await;
    let client = bind(&config).await;
    let mut events = server.events();
    let relay = Rebinder::start(server.local_addr(), 20);
    let accepting = spawn({
        let server = server.clone();
        async move { server.accept().await.expect("accept") }
    });
    let to_server = client.connect(relay.inside()).await.expect("connect");
    let to_client = accepting.await;
    let first = relay.outside();
    assert_eq!(to_client.remote(), first);
    assert_eq!(joined(&mut events).await.remote, first);

    let reader = |peer: Peer| {
        spawn(async move {
            let mut got = Vec::new();
            while got.len() < MESSAGES as usize {
                let packet = peer.recv().await.expect("the connection lasts");
                let (index, mode) = check(0, &packet.data);
                assert_eq!(mode, mode_byte(SendMode::Reliable));
                got.push(index);
            }
            got
        })
    };
    let (at_server, at_client) = (reader(to_client.clone()), reader(to_server.clone()));
    for i in 0..MESSAGES {
        to_server.send(0, packet(0, i, SendMode::Reliable, 8), SendMode::Reliable).unwrap();
        to_client.send(0, packet(0, i, SendMode::Reliable, 8), SendMode::Reliable).unwrap();
        if i == MESSAGES / 3 {
            // Replaces the relay's outside socket, and waits until the new one is bound.
            let old = relay.outside();
            relay.rebind();
            until(|| relay.outside() != old).await;
        }
        sleep(Duration::from_millis(5)).await;
    }
    // The client's last 200 messages could reach it only at the new port: the server has
    // moved the connection by the time they all arrived.
    assert!(at_server.await.into_iter().eq(0..MESSAGES), "the server's messages, exactly once and in order");
    assert!(at_client.await.into_iter().eq(0..MESSAGES), "the client's messages, exactly once and in order");
    let new = relay.outside();
    assert_ne!(new, first);
    assert_eq!(to_client.remote(), new, "the handle follows the connection");
    let listed: Vec<SocketAddr> = server.peers().iter().map(|p| p.remote).collect();
    assert_eq!(listed, [new], "the list follows the connection");
    match next_event(&mut events).await {
        HostEvent::AddressChanged { peer, old, .. } => {
            assert_eq!((peer.id, peer.remote, old), (to_client.id(), new, first));
        }
        other => panic!("expected the move, got {other:?}"),
    }
    assert_eq!(server.stats().address_changes, 1);
    // The connection ends as usual, reported at the address it has.
    to_client.disconnect_now();
    let (gone, reason) = left(&mut events).await;
    assert_eq!((gone.id, gone.remote, reason), (to_client.id(), new, DisconnectReason::Local));
}
