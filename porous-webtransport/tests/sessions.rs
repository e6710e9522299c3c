//! One host, UDP and WebTransport clients side by side; what a session's connection gets
//! (its datagram size, its end); and the faults: garbage, a session that never completes
//! the handshake, a client that vanishes, too many sessions, the amplification rule. The
//! WebTransport clients here are native (wtransport), running the core over their
//! session's datagrams as porous-web does in a browser; the `browser` test runs Chromium.

mod support;

use std::time::Duration;

use porous_tokio::proto::DisconnectReason;
use porous_tokio::{Host, HostConfig, Packet, SendMode};
use porous_webtransport::WebTransportConfig;
use support::{Relay, SEC, Server, WtClient, eventually};

fn payload(i: u32) -> Vec<u8> {
    let mut p = i.to_le_bytes().to_vec();
    p.resize(32, 0x77);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webtransport_client_and_a_udp_client_share_one_host() {
    let server = Server::start(HostConfig::default(), WebTransportConfig::default()).await;
    let host = server.host.clone();
    // The server echoes every packet back on its channel, in its mode.
    tokio::spawn(async move {
        while let Ok(peer) = host.accept().await {
            tokio::spawn(async move {
                while let Ok(p) = peer.recv().await {
                    let _ = peer.send(p.channel, p.data, p.mode);
                }
            });
        }
    });

    let udp = Host::bind("127.0.0.1:0", HostConfig::default()).await.unwrap();
    let to_server = udp.connect(server.host.local_addr()).await.unwrap();
    let mut web = WtClient::connect(&server.url(), server.hash, HostConfig::default(), b"web").await;
    assert!(web.drive_until(10 * SEC, WtClient::connected).await, "{:?}", web.events);

    const N: u32 = 200;
    for i in 0..N {
        for channel in [0, 1] {
            to_server.send(channel, payload(i), SendMode::Reliable).unwrap();
            web.core.send(web.peer, channel, payload(i), SendMode::Reliable).unwrap();
        }
    }
    assert!(
        web.drive_until(20 * SEC, |w| w.received(0).len() == N as usize && w.received(1).len() == N as usize).await
    );
    let want: Vec<Vec<u8>> = (0..N).map(payload).collect();
    assert_eq!(web.received(0), want);
    assert_eq!(web.received(1), want);
    let mut udp_got = [Vec::new(), Vec::new()];
    while udp_got[0].len() < N as usize || udp_got[1].len() < N as usize {
        let p: Packet = tokio::time::timeout(10 * SEC, to_server.recv()).await.unwrap().unwrap();
        udp_got[p.channel].push(p.data.to_vec());
    }
    assert_eq!(udp_got, [want.clone(), want]);

    // One host: both connections are its peers, the browser's at a session address whose
    // datagram size is the session's.
    let peers = server.host.peers();
    assert_eq!(peers.len(), 2, "{peers:?}");
    let session = peers.iter().find(|p| server.web.owns(p.remote)).expect("the session's peer");
    assert_eq!(&session.data[..], b"web");
    assert!(server.web.session_remote(session.remote).is_some());
    // QUIC's datagram size on a path of QUIC's minimum size, on both sides.
    let mtu = web.core.peer_stats(web.peer).unwrap().mtu;
    assert!(mtu < 1200 && mtu == web.mtu, "QUIC datagrams are smaller than UDP's: {mtu}, {}", web.mtu);
    let stats = server.web.stats();
    assert_eq!((stats.sessions_accepted, stats.sessions_open, stats.datagrams_dropped), (1, 1, 0), "{stats:?}");
    assert!(server.host.as_async().transport_stats().datagrams_received > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_from_either_side_is_seen_by_the_other_and_closes_the_session() {
    let server = Server::start(HostConfig::default(), WebTransportConfig::default()).await;

    // The client disconnects with a code.
    let mut web = WtClient::connect(&server.url(), server.hash, HostConfig::default(), b"a").await;
    let (accepted, connected) = tokio::join!(server.host.accept(), web.drive_until(10 * SEC, WtClient::connected));
    let (peer, true) = (accepted.unwrap(), connected) else { panic!("no connection") };
    web.core.disconnect_with(std::time::Instant::now(), web.peer, 7);
    let (end, _) = tokio::join!(peer.recv(), web.drive_until(10 * SEC, |w| w.ended().is_some()));
    assert_eq!(end.unwrap_err().0, DisconnectReason::remote(7));
    assert_eq!(web.ended(), Some(DisconnectReason::Local));
    assert!(eventually(5 * SEC, || server.web.stats().sessions_open == 0).await, "the session closes");

    // The server disconnects with a code.
    let mut web = WtClient::connect(&server.url(), server.hash, HostConfig::default(), b"b").await;
    let (accepted, connected) = tokio::join!(server.host.accept(), web.drive_until(10 * SEC, WtClient::connected));
    let (peer, true) = (accepted.unwrap(), connected) else { panic!("no connection") };
    let (reason, _) = tokio::join!(peer.disconnect_with(9), web.drive_until(10 * SEC, |w| w.ended().is_some()));
    assert_eq!(reason, DisconnectReason::Local);
    assert_eq!(web.ended(), Some(DisconnectReason::remote(9)));
    assert!(eventually(5 * SEC, || server.web.stats().sessions_open == 0).await, "the session closes");

    // The session closes under a live connection: TransportClosed on the server.
    let mut web = WtClient::connect(&server.url(), server.hash, HostConfig::default(), b"c").await;
    let (accepted, connected) = tokio::join!(server.host.accept(), web.drive_until(10 * SEC, WtClient::connected));
    let (peer, true) = (accepted.unwrap(), connected) else { panic!("no connection") };
    web.conn.close(wtransport::VarInt::from_u32(0), b"tab closed");
    let end = tokio::time::timeout(5 * SEC, peer.recv()).await.unwrap();
    assert_eq!(end.unwrap_err().0, DisconnectReason::TransportClosed);
    assert_eq!(server.web.stats().closed_by_remote, 1);
    assert!(server.host.peers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_a_handshake_never_completed_are_counted_dropped_and_closed() {
    let mut web = WebTransportConfig::default();
    web.handshake_timeout = SEC;
    let server = Server::start(HostConfig::default(), web).await;

    // Garbage: counted by the core, no peer, the session closed after the timeout.
    let garbage = support::session(&server.url(), server.hash).await;
    for i in 0..50u8 {
        garbage.send_datagram([i; 40]).unwrap();
    }
    assert!(eventually(5 * SEC, || server.host.stats().malformed + server.host.stats().unknown_source >= 50).await);
    assert!(server.host.peers().is_empty());
    let closed = tokio::time::timeout(5 * SEC, garbage.closed()).await;
    assert!(closed.is_ok(), "the server closes a session that never connects");

    // A request, then silence: a pending handshake that times out, and a closed session.
    let conn = support::session(&server.url(), server.hash).await;
    let mut silent = WtClient::over(conn, HostConfig::default(), b"");
    silent.core.step(std::time::Instant::now());
    let request = silent.core.poll_transmit().unwrap();
    silent.conn.send_datagram(&request.payload).unwrap();
    assert!(eventually(5 * SEC, || server.host.stats().pending == 1).await);
    assert!(tokio::time::timeout(5 * SEC, silent.conn.closed()).await.is_ok());
    assert!(eventually(10 * SEC, || server.host.stats().pending == 0).await, "{:?}", server.host.stats());

    let stats = server.web.stats();
    assert_eq!((stats.handshake_timeouts, stats.sessions_open), (2, 0), "{stats:?}");
    assert!(server.host.peers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_amplification_rule_holds_inside_a_session() {
    let server = Server::start(HostConfig::default(), WebTransportConfig::default()).await;
    let conn = support::session(&server.url(), server.hash).await;
    let mut client = WtClient::over(conn, HostConfig::default(), b"");
    // The client's requests go out (it retries), but it never reads an answer: whatever
    // the server sends to the session is counted, and its core never connects.
    let mut sent = 0;
    let end = tokio::time::Instant::now() + 3 * SEC;
    while tokio::time::Instant::now() < end {
        client.core.step(std::time::Instant::now());
        while let Some(t) = client.core.poll_transmit() {
            sent += t.payload.len();
            client.conn.send_datagram(&t.payload).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut received = 0;
    while let Ok(Ok(d)) = tokio::time::timeout(Duration::from_millis(200), client.conn.receive_datagram()).await {
        received += d.payload().len();
    }
    assert!(sent > 0 && received > 0, "sent {sent}, received {received}");
    assert!(received <= sent, "the server sent {received} bytes for {sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_client_times_out_and_its_session_closes() {
    let mut config = HostConfig::default();
    config.peer.timeout = 2 * SEC;
    let server = Server::start(config.clone(), WebTransportConfig::default()).await;
    let relay = Relay::start(server.web.local_addr()).await;
    let url = format!("https://127.0.0.1:{}/", relay.addr.port());
    let mut web = WtClient::connect(&url, server.hash, config, b"gone").await;
    let (accepted, connected) = tokio::join!(server.host.accept(), web.drive_until(10 * SEC, WtClient::connected));
    let (peer, true) = (accepted.unwrap(), connected) else { panic!("no connection") };
    relay.cut();
    let end = tokio::time::timeout(10 * SEC, peer.recv()).await.unwrap();
    assert_eq!(end.unwrap_err().0, DisconnectReason::Timeout);
    assert!(eventually(5 * SEC, || server.web.stats().sessions_open == 0).await, "{:?}", server.web.stats());
    assert!(server.host.peers().is_empty());
    drop(web);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_beyond_the_limit_are_refused() {
    let mut web = WebTransportConfig::default();
    web.max_sessions = 2;
    let server = Server::start(HostConfig::default(), web).await;
    let first = support::session(&server.url(), server.hash).await;
    let second = support::session(&server.url(), server.hash).await;
    assert!(eventually(5 * SEC, || server.web.stats().sessions_open == 2).await);
    // The third is refused (HTTP 429): the client's connect fails.
    let config = wtransport::ClientConfig::builder()
        .with_bind_default()
        .with_server_certificate_hashes([wtransport::tls::Sha256Digest::new(server.hash)])
        .build();
    let endpoint = wtransport::Endpoint::client(config).unwrap();
    assert!(endpoint.connect(server.url()).await.is_err());
    let stats = server.web.stats();
    assert_eq!((stats.sessions_open, stats.sessions_refused), (2, 1), "{stats:?}");
    drop((first, second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_closes_closes_its_sessions() {
    let server = Server::start(HostConfig::default(), WebTransportConfig::default()).await;
    let mut web = WtClient::connect(&server.url(), server.hash, HostConfig::default(), b"").await;
    let (accepted, connected) = tokio::join!(server.host.accept(), web.drive_until(10 * SEC, WtClient::connected));
    let (peer, true) = (accepted.unwrap(), connected) else { panic!("no connection") };
    let Server { host, web: transport, .. } = server;
    drop((peer, host));
    // The host's driver stops: the client is told (disconnect_now), the session closes.
    assert!(web.drive_until(10 * SEC, |w| w.ended().is_some()).await);
    assert!(matches!(web.ended(), Some(DisconnectReason::Remote { .. } | DisconnectReason::TransportClosed)));
    assert!(tokio::time::timeout(5 * SEC, web.conn.closed()).await.is_ok());
    assert!(eventually(5 * SEC, || transport.stats().sessions_open == 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_tokens_authenticate_a_webtransport_client() {
    use porous_tokio::proto::SecureConfig;
    use porous_tokio::proto::token::{self, PrivateKey, TokenParams};
    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let key = PrivateKey::from_entropy();
    let mut config = HostConfig::default();
    config.secure = Some(SecureConfig::server(key.clone(), Vec::new(), std::time::Instant::now(), unix));
    let server = Server::start(config, WebTransportConfig::default()).await;

    // A token naming the server's UDP address serves a browser too: QUIC authenticates the
    // server, the token the client.
    let mut params = TokenParams::new(42, vec![server.host.local_addr()], unix, 30 * SEC);
    params.user_data = b"player 42".to_vec();
    let good = token::generate_from_entropy(&key, &params).unwrap();
    let conn = support::session(&server.url(), server.hash).await;
    let mut web = WtClient::with_token(conn, HostConfig::default(), &good);
    let (accepted, connected) = tokio::join!(server.host.accept(), web.drive_until(10 * SEC, WtClient::connected));
    let (peer, true) = (accepted.unwrap(), connected) else { panic!("no connection: {:?}", web.events) };
    assert_eq!(peer.client_id(), Some(42));
    assert_eq!(&peer.connect_data()[..], b"player 42");
    web.core.send(web.peer, 0, &b"sealed twice"[..], SendMode::Reliable).unwrap();
    let (p, _) = tokio::join!(peer.recv(), web.drive_until(2 * SEC, |_| false));
    assert_eq!(&p.unwrap().data[..], b"sealed twice");

    // A token of another key: refused before the server keeps any state.
    let forged = token::generate_from_entropy(&PrivateKey::from_entropy(), &params).unwrap();
    let conn = support::session(&server.url(), server.hash).await;
    let mut web = WtClient::with_token(conn, HostConfig::default(), &forged);
    assert!(!web.drive_until(2 * SEC, WtClient::connected).await);
    assert!(server.host.stats().bad_tokens > 0, "{:?}", server.host.stats());
    assert_eq!(server.host.peers().len(), 1);
}
