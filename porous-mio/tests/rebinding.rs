//! Address change over real UDP: a client reaches the server through a NAT-like relay on
//! loopback, which drops a share of the datagrams each way and, mid-stream, rebinds (its
//! outside socket is replaced by one on a new port, and the old one closed, as a NAT that
//! forgot the mapping). The connection goes on from the new port, the server reports
//! `AddressChanged`, and every message arrives exactly once and in order both ways.

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
                old_port = Some(relay.outside().port());
                relay.rebind();
            }
        }
    }
    assert!(at_server.iter().copied().eq(0..MESSAGES), "the server got {at_server:?}");
    assert!(at_client.iter().copied().eq(0..MESSAGES), "the client got {at_client:?}");
    assert_eq!(changes.len(), 1, "{changes:?}");
    let (old, new) = changes[0];
    assert_eq!(Some(old.port()), old_port);
    assert_eq!(new, relay.outside());
    assert_eq!(server.core().remote_addr(to_client.unwrap()), Some(new));
    assert_eq!(server.core().stats().address_changes, 1);
}
