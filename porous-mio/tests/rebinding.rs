//! Address change over real UDP: a client reaches the server through a NAT-like relay on
//! loopback, which drops a share of the datagrams each way and, mid-stream, rebinds (its
//! outside socket is replaced by one on a new port, and the old one closed, as a NAT that
//! forgot the mapping). The connection goes on from the new port, the server reports
//! `AddressChanged`, and every message arrives exactly once and in order both ways. The
//! same when the relay moves to another IP (127.0.0.2: the client moved to another
//! network), which the server learns through an unknown path and the client's moved.

use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_loopback::rebind::Rebinder;
use porous_mio::{Event, Host, HostConfig, SendMode};

const DEADLINE: Duration = Duration::from_secs(60);
const MESSAGES: u32 = 300;

fn number(data: &Bytes) -> u32 {
    u32::from_le_bytes(data[..4].try_into().unwrap())
}

#[test]
fn a_client_whose_nat_rebinds_keeps_its_connection_over_real_udp() {
    let (server, old, new) = stream_across(Rebinder::rebind);
    assert_eq!(old.ip(), new.ip());
    assert_ne!(old.port(), new.port());
    assert_eq!(server.core().stats().unknown_paths, 0, "a candidate of the same IP verified");
}

/// Linux routes all of 127.0.0.0/8 to loopback; other systems need an alias for 127.0.0.2.
#[cfg(target_os = "linux")]
#[test]
fn a_client_that_moves_to_another_ip_keeps_its_connection_over_real_udp() {
    let other = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let (server, old, new) = stream_across(|relay| relay.move_to(other));
    assert_eq!(old.ip(), std::net::Ipv4Addr::LOCALHOST);
    assert_eq!(new.ip(), other);
    let stats = server.core().stats();
    assert!(stats.unknown_paths >= 1, "{stats:?}");
    println!("unknown paths sent by the server: {}", stats.unknown_paths);
}

/// Streams 300 messages each way through a relay that drops one in 20 each way, `change`
/// applied to it a third of the way; returns the server and the (old, new) address of the
/// client as the server saw them.
fn stream_across(change: impl Fn(&Rebinder)) -> (Host, std::net::SocketAddr, std::net::SocketAddr) {
    let mut server = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
    let mut client = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
    let relay = Rebinder::start(server.local_addr(), 20);
    let to_server = client.connect(relay.inside()).unwrap();
    let (mut at_server, mut at_client) = (Vec::new(), Vec::new());
    let mut changes = Vec::new();
    let (mut from_client, mut from_server) = (0u32, 0u32);
    let mut to_client = None;
    let mut old_port = None;
    let end = Instant::now() + DEADLINE;
    let mut last_send = Instant::now();
    while at_server.len() < MESSAGES as usize || at_client.len() < MESSAGES as usize {
        assert!(
            Instant::now() < end,
            "deadline: server got {}, client {}, changes {changes:?}",
            at_server.len(),
            at_client.len()
        );
        while let Some(e) = server.service(Duration::from_millis(1)).unwrap() {
            match e {
                Event::Connected { peer, .. } => to_client = Some(peer),
                Event::Received { data, .. } => at_server.push(number(&data)),
                Event::AddressChanged { old, new, .. } => changes.push((old, new)),
                Event::Disconnected { reason, .. } => panic!("server: disconnected, {reason:?}"),
                _ => {}
            }
        }
        while let Some(e) = client.service(Duration::from_millis(1)).unwrap() {
            match e {
                Event::Received { data, .. } => at_client.push(number(&data)),
                Event::Disconnected { reason, .. } => panic!("client: disconnected, {reason:?}"),
                _ => {}
            }
        }
        let Some(peer) = to_client else { continue };
        if last_send.elapsed() >= Duration::from_millis(5) {
            last_send = Instant::now();
            if from_client < MESSAGES
                && client.send(to_server, 0, from_client.to_le_bytes().to_vec(), SendMode::Reliable).is_ok()
            {
                from_client += 1;
            }
            if from_server < MESSAGES
                && server.send(peer, 0, from_server.to_le_bytes().to_vec(), SendMode::Reliable).is_ok()
            {
                from_server += 1;
            }
            if from_client == MESSAGES / 3 && old_port.is_none() {
                old_port = Some(relay.outside());
                change(&relay);
            }
        }
    }
    assert!(at_server.iter().copied().eq(0..MESSAGES), "the server got {at_server:?}");
    assert!(at_client.iter().copied().eq(0..MESSAGES), "the client got {at_client:?}");
    assert_eq!(changes.len(), 1, "{changes:?}");
    let (old, new) = changes[0];
    assert_eq!(Some(old), old_port);
    assert_eq!(new, relay.outside());
    assert_eq!(server.core().remote_addr(to_client.unwrap()), Some(new));
    assert_eq!(server.core().stats().address_changes, 1);
    (server, old, new)
}
