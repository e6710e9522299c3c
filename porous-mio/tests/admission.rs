//! Connect data, manual admission and disconnect codes through porous-mio over loopback
//! UDP: a server that decides on each request reads the client's connect data, rejects one
//! client with a code (which that client sees), admits another, and a disconnection code
//! travels each way. Deadlines on events, never sleeps.

use std::time::{Duration, Instant};

use porous_mio::{AdmissionError, Bytes, DisconnectReason, Event, Host, HostConfig, PeerId};

const DEADLINE: Duration = Duration::from_secs(30);

/// Services every host until `until` returns something for the events seen so far
/// (`(host index, event)`); panics at the deadline.
fn pump<T>(hosts: &mut [&mut Host], mut until: impl FnMut(&mut [&mut Host], usize, Event) -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end, "deadline passed");
        for i in 0..hosts.len() {
            if let Some(event) = hosts[i].service(Duration::from_millis(1)).unwrap()
                && let Some(done) = until(hosts, i, event)
            {
                return done;
            }
        }
    }
}

#[test]
fn connect_data_manual_admission_and_disconnect_codes() {
    let mut config = HostConfig::default();
    config.manual_accept = true;
    let mut server = Host::bind("127.0.0.1:0", config).unwrap();
    let mut alice = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
    let mut mallory = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
    let to_server = alice.connect_with(server.local_addr(), b"v1 ticket:alice").unwrap();
    let mallory_to_server = mallory.connect_with(server.local_addr(), b"v0 ticket:forged").unwrap();

    // The server reads each request's data and decides; alice connects, mallory is
    // refused with the server's code and sees it.
    let mut requests = Vec::new();
    let (mut alice_connected, mut mallory_refused, mut server_connected) = (false, None, None);
    pump(&mut [&mut server, &mut alice, &mut mallory], |hosts, i, event| {
        match (i, event) {
            (0, Event::ConnectRequest { peer, remote, data, client_id, .. }) => {
                assert_eq!(client_id, None, "plain mode: no token, no client id");
                requests.push(data.clone());
                if data.starts_with(b"v1 ") {
                    hosts[0].accept(peer).unwrap();
                    assert_eq!(hosts[0].accept(peer), Err(AdmissionError::NotAwaiting), "decided already");
                } else {
                    assert_eq!(remote, hosts[2].local_addr());
                    hosts[0].reject(peer, 403).unwrap();
                }
            }
            (0, Event::Connected { peer, data, .. }) => server_connected = Some((peer, data)),
            (1, Event::Connected { peer, .. }) => {
                assert_eq!(peer, to_server);
                alice_connected = true;
            }
            (2, Event::Disconnected { peer, reason, .. }) => {
                assert_eq!(peer, mallory_to_server);
                mallory_refused = Some(reason);
            }
            (_, Event::Disconnected { reason, .. }) if reason != DisconnectReason::Local => {
                panic!("host {i}: unexpected {reason:?}")
            }
            _ => {}
        }
        (alice_connected && server_connected.is_some() && mallory_refused.is_some()).then_some(())
    });
    requests.sort();
    assert_eq!(requests, [Bytes::from_static(b"v0 ticket:forged"), Bytes::from_static(b"v1 ticket:alice")]);
    assert_eq!(mallory_refused, Some(DisconnectReason::rejected(403)));
    let (to_alice, data): (PeerId, Bytes) = server_connected.unwrap();
    assert_eq!(&data[..], b"v1 ticket:alice", "Connected carries the connect data too");

    // The server kicks alice with a code; alice reads it.
    server.disconnect_with(to_alice, 7);
    let reason = pump(&mut [&mut server, &mut alice], |_, i, event| match (i, event) {
        (1, Event::Disconnected { peer, reason, .. }) => {
            assert_eq!(peer, to_server);
            Some(reason)
        }
        _ => None,
    });
    assert_eq!(reason, DisconnectReason::remote(7));

    // The other way, and at once: a client quits with a code. A new client: the old
    // connection lingers on both sides for a while.
    let mut bob = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
    let to_server = bob.connect_with(server.local_addr(), b"v1 ticket:bob").unwrap();
    let (mut to_bob, mut bob_up) = (None, false);
    pump(&mut [&mut server, &mut bob], |hosts, i, event| {
        match (i, event) {
            (0, Event::ConnectRequest { peer, .. }) => hosts[0].accept(peer).unwrap(),
            (0, Event::Connected { peer, .. }) => to_bob = Some(peer),
            (1, Event::Connected { .. }) => bob_up = true,
            _ => {}
        }
        (to_bob.is_some() && bob_up).then_some(())
    });
    let to_bob = to_bob.unwrap();
    bob.disconnect_now_with(to_server, 42);
    bob.flush().unwrap();
    let reason = pump(&mut [&mut server], |_, _, event| match event {
        Event::Disconnected { peer, reason, .. } if peer == to_bob => Some(reason),
        _ => None,
    });
    assert_eq!(reason, DisconnectReason::remote(42));
}
