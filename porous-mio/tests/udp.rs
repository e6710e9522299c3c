//! porous-mio over real UDP on loopback: ephemeral ports, and deadlines on events rather
//! than sleeps, so the tests hold on a loaded machine.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::{Events, Poll, Token};
use porous_mio::{DisconnectReason, Event, Host, HostConfig, PeerId, SendMode};

const DEADLINE: Duration = Duration::from_secs(30);

fn any(v6: bool) -> SocketAddr {
    if v6 { "[::1]:0".parse().unwrap() } else { "127.0.0.1:0".parse().unwrap() }
}

/// Services both hosts until `done` holds for the events seen so far; panics at the
/// deadline.
fn pump(a: &mut Host, b: &mut Host, seen: &mut Vec<(char, Event)>, mut done: impl FnMut(&[(char, Event)]) -> bool) {
    let end = Instant::now() + DEADLINE;
    while !done(seen) {
        if Instant::now() >= end {
            let summary: Vec<String> = seen
                .iter()
                .map(|(n, e)| match e {
                    Event::Received { channel, data, .. } => format!("{n}:rx ch{channel} {}B", data.len()),
                    other => format!("{n}:{other:?}"),
                })
                .collect();
            panic!("deadline passed; {} events: {:?}", seen.len(), &summary[summary.len().saturating_sub(12)..]);
        }
        for (name, host) in [('a', &mut *a), ('b', &mut *b)] {
            while let Some(e) = host.service(Duration::from_millis(1)).unwrap() {
                seen.push((name, e));
            }
        }
    }
}

fn connect(a: &mut Host, b: &mut Host, seen: &mut Vec<(char, Event)>) -> (PeerId, PeerId) {
    let pa = a.connect(b.local_addr()).unwrap();
    pump(a, b, seen, |s| s.iter().filter(|(_, e)| matches!(e, Event::Connected { .. })).count() == 2);
    let pb = seen
        .iter()
        .find_map(|(n, e)| match e {
            Event::Connected { peer, .. } if *n == 'b' => Some(*peer),
            _ => None,
        })
        .unwrap();
    (pa, pb)
}

fn payload(tag: u32, len: usize) -> Bytes {
    let mut v = tag.to_le_bytes().to_vec();
    v.extend((4..len.max(4)).map(|i| (i as u32 ^ tag) as u8));
    Bytes::from(v)
}

fn received(seen: &[(char, Event)], who: char) -> BTreeMap<usize, Vec<Bytes>> {
    let mut out: BTreeMap<usize, Vec<Bytes>> = BTreeMap::new();
    for (n, e) in seen {
        if let (true, Event::Received { channel, data, .. }) = (*n == who, e) {
            out.entry(*channel).or_default().push(data.clone());
        }
    }
    out
}

fn exchange(v6: bool) {
    let mut config = HostConfig::default();
    config.peer.max_packet_size = 256 * 1024;
    let mut a = Host::bind(any(v6), config.clone()).unwrap();
    let mut b = Host::bind(any(v6), config).unwrap();
    assert_eq!(a.local_addr().is_ipv6(), v6);
    let mut seen = Vec::new();
    let (pa, _) = connect(&mut a, &mut b, &mut seen);
    let modes = [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive, SendMode::Reliable];
    let mut want: BTreeMap<usize, Vec<Bytes>> = BTreeMap::new();
    for i in 0..40u32 {
        for (ch, &mode) in modes.iter().enumerate() {
            // Channel 3 carries fragmented packets up to 200 KB.
            let len = if ch == 3 { 1 + (i as usize * 5_003) % 200_000 } else { 1 + (i as usize * 97) % 1_100 };
            let data = payload(i * 10 + ch as u32, len);
            a.send(pa, ch, data.clone(), mode).unwrap();
            want.entry(ch).or_default().push(data);
        }
    }
    // Reliable channels: everything, in order, intact. A burst this size can overflow the
    // kernel's receive buffer even on loopback, so unreliable and passive packets may be
    // missing, but what arrives is in order, intact, never twice.
    pump(&mut a, &mut b, &mut seen, |s| {
        let got = received(s, 'b');
        got.get(&0) == want.get(&0) && got.get(&3) == want.get(&3)
    });
    let got = received(&seen, 'b');
    for ch in [1, 2] {
        let mut sent = want[&ch].iter();
        for packet in got.get(&ch).map(Vec::as_slice).unwrap_or_default() {
            assert!(sent.any(|p| p == packet), "channel {ch}: a packet out of order, twice, or corrupted");
        }
    }
    let stats = a.peer_stats(pa).unwrap();
    assert!(stats.rtt < Duration::from_millis(100), "{:?}", stats.rtt);
    assert_eq!(a.socket_stats().send_errors, 0);
}

#[test]
fn all_three_modes_on_four_channels_with_fragmentation_over_ipv4() {
    exchange(false);
}

#[test]
fn all_three_modes_on_four_channels_with_fragmentation_over_ipv6() {
    exchange(true);
}

#[test]
fn disconnect_delivers_everything_pending_first() {
    let mut a = Host::bind(any(false), HostConfig::default()).unwrap();
    let mut b = Host::bind(any(false), HostConfig::default()).unwrap();
    let mut seen = Vec::new();
    let (pa, _) = connect(&mut a, &mut b, &mut seen);
    let mut want = Vec::new();
    for i in 0..300 {
        let data = payload(i, 900);
        a.send(pa, 1, data.clone(), SendMode::Reliable).unwrap();
        want.push(data);
    }
    a.disconnect(pa);
    pump(&mut a, &mut b, &mut seen, |s| s.iter().filter(|(_, e)| matches!(e, Event::Disconnected { .. })).count() == 2);
    assert_eq!(received(&seen, 'b').get(&1), Some(&want));
    let reasons: Vec<_> = seen
        .iter()
        .filter_map(|(n, e)| match e {
            Event::Disconnected { reason, .. } => Some((*n, *reason)),
            _ => None,
        })
        .collect();
    assert!(reasons.contains(&('a', DisconnectReason::Local)) && reasons.contains(&('b', DisconnectReason::remote(0))));
    let last_data = seen.iter().rposition(|(n, e)| *n == 'b' && matches!(e, Event::Received { .. })).unwrap();
    let end = seen.iter().position(|(n, e)| *n == 'b' && matches!(e, Event::Disconnected { .. })).unwrap();
    assert!(last_data < end, "every packet before the disconnection");
}

#[test]
fn a_silent_remote_times_out() {
    let mut config = HostConfig::default();
    config.peer.timeout = Duration::from_secs(1);
    let mut a = Host::bind(any(false), config.clone()).unwrap();
    let mut b = Host::bind(any(false), config).unwrap();
    let mut seen = Vec::new();
    let (pa, _) = connect(&mut a, &mut b, &mut seen);
    drop(b); // the remote goes silent: its socket closes, nothing answers
    let started = Instant::now();
    let end = started + DEADLINE;
    let reason = loop {
        assert!(Instant::now() < end, "no timeout");
        if let Some(Event::Disconnected { peer, reason, .. }) = a.service(Duration::from_millis(50)).unwrap() {
            assert_eq!(peer, pa);
            break reason;
        }
    };
    assert_eq!(reason, DisconnectReason::Timeout);
    assert!(started.elapsed() >= Duration::from_millis(900), "not before the configured timeout");
}

#[test]
fn a_hundred_clients_on_one_server_in_one_embedded_event_loop() {
    const CLIENTS: usize = 100;
    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(1024);
    let mut server = Host::bind_with(any(false), HostConfig::default(), poll.registry(), Token(0)).unwrap();
    let mut clients: Vec<(Host, PeerId)> = (1..=CLIENTS)
        .map(|i| {
            let mut c = Host::bind_with(any(false), HostConfig::default(), poll.registry(), Token(i)).unwrap();
            let peer = c.connect(server.local_addr()).unwrap();
            (c, peer)
        })
        .collect();
    let mut connected = [false; CLIENTS];
    let mut echoed = [false; CLIENTS];
    let mut server_peers = 0;
    let end = Instant::now() + DEADLINE;
    while echoed.iter().any(|e| !e) {
        assert!(Instant::now() < end, "{} connected, {} echoed", server_peers, echoed.iter().filter(|e| **e).count());
        let timeout = clients.iter().map(|(c, _)| c.timeout()).chain([server.timeout()]).flatten().min();
        poll.poll(&mut events, timeout.map(|t| t.min(Duration::from_millis(50)))).unwrap();
        // Every host does its work; a real loop may call only those whose token is ready
        // and those whose timeout passed.
        server.process().unwrap();
        while let Some(e) = server.poll_event() {
            match e {
                Event::Connected { .. } => server_peers += 1,
                Event::Received { peer, channel, data, .. } => {
                    server.send(peer, channel, data, SendMode::Reliable).unwrap();
                }
                _ => {}
            }
        }
        for (i, (c, peer)) in clients.iter_mut().enumerate() {
            c.process().unwrap();
            while let Some(e) = c.poll_event() {
                match e {
                    Event::Connected { .. } => {
                        connected[i] = true;
                        c.send(*peer, 0, payload(i as u32, 64), SendMode::Reliable).unwrap();
                    }
                    Event::Received { data, .. } => {
                        assert_eq!(data, payload(i as u32, 64));
                        echoed[i] = true;
                    }
                    Event::Disconnected { reason, .. } => panic!("client {i} disconnected: {reason}"),
                    _ => {}
                }
            }
        }
    }
    assert!(connected.iter().all(|c| *c), "every client saw Connected");
    assert_eq!(server_peers, CLIENTS);
    assert_eq!(server.core().peers().count(), CLIENTS);
}

#[test]
fn service_refuses_an_embedded_host() {
    let poll = Poll::new().unwrap();
    let mut h = Host::bind_with(any(false), HostConfig::default(), poll.registry(), Token(3)).unwrap();
    assert!(h.service(Duration::ZERO).is_err());
    let mut bad = HostConfig::default();
    bad.peer.mtu = 10;
    assert_eq!(Host::bind(any(false), bad).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn socket_buffers_grow_where_the_kernel_allows_and_never_shrink() {
    let host = Host::bind(any(false), HostConfig::default()).unwrap();
    let (recv, send) = host.socket_buffers().unwrap();
    let plain = std::net::UdpSocket::bind(any(false)).unwrap();
    let plain = socket2::SockRef::from(&plain);
    assert!(recv >= plain.recv_buffer_size().unwrap(), "receive buffer {recv} below the default");
    assert!(send >= plain.send_buffer_size().unwrap(), "send buffer {send} below the default");
    // Linux grants a request up to net.core.rmem_max (and reports it doubled).
    let max = std::fs::read_to_string("/proc/sys/net/core/rmem_max").ok().and_then(|s| s.trim().parse::<usize>().ok());
    if let Some(max) = max.filter(|&m| m >= porous_mio::SOCKET_BUFFER) {
        assert!(
            recv >= porous_mio::SOCKET_BUFFER,
            "asked for {}, got {recv} (rmem_max {max})",
            porous_mio::SOCKET_BUFFER
        );
    }
}

/// `bind` takes what the async adapters' `bind` takes: anything `ToSocketAddrs`.
#[test]
fn bind_takes_the_same_address_forms_as_the_async_adapters() {
    let by_str = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
    let by_tuple = Host::bind(("127.0.0.1", 0), HostConfig::default()).unwrap();
    let by_addr = Host::bind(any(false), HostConfig::default()).unwrap();
    for host in [&by_str, &by_tuple, &by_addr] {
        assert!(host.local_addr().ip().is_loopback() && host.local_addr().port() != 0);
    }
    let taken = Host::bind(by_str.local_addr(), HostConfig::default()).unwrap_err();
    assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
    let poll = Poll::new().unwrap();
    let embedded = Host::bind_with("[::1]:0", HostConfig::default(), poll.registry(), Token(1)).unwrap();
    assert!(embedded.local_addr().is_ipv6());
}

/// A host made from a socket the application bound keeps that socket's address and works
/// as a bound one, standalone and registered with the application's own poll.
#[test]
fn hosts_run_on_sockets_the_application_bound() {
    let socket = std::net::UdpSocket::bind(any(false)).unwrap();
    let address = socket.local_addr().unwrap();
    let mut a = Host::from_std(socket, HostConfig::default()).unwrap();
    assert_eq!(a.local_addr(), address);
    let mut b = Host::from_std(std::net::UdpSocket::bind(any(false)).unwrap(), HostConfig::default()).unwrap();
    let mut seen = Vec::new();
    let (pa, _) = connect(&mut a, &mut b, &mut seen);
    a.send(pa, 1, payload(7, 3000), SendMode::Reliable).unwrap();
    pump(&mut a, &mut b, &mut seen, |s| received(s, 'b').get(&1).is_some_and(|v| v.len() == 1));
    assert_eq!(received(&seen, 'b')[&1], [payload(7, 3000)]);

    let poll = Poll::new().unwrap();
    let socket = std::net::UdpSocket::bind(any(false)).unwrap();
    let mut embedded = Host::from_std_with(socket, HostConfig::default(), poll.registry(), Token(9)).unwrap();
    assert!(embedded.service(Duration::ZERO).is_err(), "an embedded host is driven by its owner's poll");
    let mut bad = HostConfig::default();
    bad.peer.mtu = 10;
    let socket = std::net::UdpSocket::bind(any(false)).unwrap();
    assert_eq!(Host::from_std(socket, bad).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
}

/// A secure server bound once to port 0 is named by the port the system picked; one bound
/// to an unspecified address refuses every token until it is told its address.
#[test]
fn a_secure_server_learns_or_is_told_its_address() {
    use porous_mio::SecureConfig;
    use porous_mio::token::{self, PrivateKey, TokenParams};

    let key = PrivateKey::from_bytes([9; 32]);
    let unix = 1_800_000_000;
    let mut server_config = HostConfig::default();
    server_config.secure = Some(SecureConfig::server(key.clone(), Vec::new(), Instant::now(), unix));
    let mut client_config = HostConfig::default();
    client_config.secure = Some(SecureConfig::client());
    client_config.peer.connect_timeout = Duration::from_millis(300);
    let token = |client_id: u64, at: SocketAddr| {
        let params = TokenParams::new(client_id, vec![at], unix, Duration::from_secs(30));
        token::generate_from_entropy(&key, &params).unwrap()
    };
    let connects = |server: &mut Host, client: &mut Host, at: SocketAddr, id: u64| -> bool {
        let peer = client.connect_with_token(at, &token(id, at)).unwrap();
        let mut seen = Vec::new();
        pump(client, server, &mut seen, |s| {
            s.iter().any(|(n, e)| {
                *n == 'a'
                    && matches!(e, Event::Connected { peer: p, .. } | Event::Disconnected { peer: p, .. } if *p == peer)
            })
        });
        seen.iter().any(|(n, e)| *n == 'a' && matches!(e, Event::Connected { .. }))
    };

    let mut learnt = Host::bind(any(false), server_config.clone()).unwrap();
    let at = learnt.local_addr();
    let named = learnt.core().config().secure.as_ref().map(|s| s.public_addresses.clone());
    assert_eq!(named, Some(vec![at]), "the bound address, with the port the system picked");
    let mut client = Host::bind(any(false), client_config.clone()).unwrap();
    assert!(connects(&mut learnt, &mut client, at, 1));

    let mut untold = Host::bind("0.0.0.0:0".parse::<SocketAddr>().unwrap(), server_config).unwrap();
    let at = SocketAddr::from(([127, 0, 0, 1], untold.local_addr().port()));
    let mut client = Host::bind(any(false), client_config).unwrap();
    assert!(!connects(&mut untold, &mut client, at, 2), "no address, no token names it");
    assert!(untold.core().stats().wrong_server_tokens > 0);
    untold.set_public_addresses(vec![at]).unwrap();
    assert!(connects(&mut untold, &mut client, at, 3));
}
