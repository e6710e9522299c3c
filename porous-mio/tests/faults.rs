//! Socket faults, injected (feature `fault-injection`) or forced: a receive error repeated
//! on every call, a destination that refuses every datagram, and a kernel without any
//! batching.

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use porous_mio::{Batching, Bytes, Event, Faults, Host, HostConfig, PeerId, SendMode};

const DEADLINE: Duration = Duration::from_secs(30);

/// Runs `test` on a thread and fails if it has not finished by the deadline: the bug
/// these tests guard against is a loop that never returns.
fn within_deadline(test: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match finished.recv_timeout(DEADLINE) {
        Ok(()) => thread.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the test did not finish: a loop that never returns"),
    }
}

fn bind() -> Host {
    Host::bind("127.0.0.1:0", HostConfig::default()).unwrap()
}

/// Services every host in turn until `done` holds; panics at the deadline.
fn pump(hosts: &mut [&mut Host], mut done: impl FnMut(usize, Event) -> bool) {
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end, "deadline passed");
        for (i, host) in hosts.iter_mut().enumerate() {
            while let Some(e) = host.service(Duration::from_millis(1)).unwrap() {
                if done(i, e) {
                    return;
                }
            }
        }
    }
}

fn connect(client: &mut Host, server: &mut Host) -> (PeerId, PeerId) {
    let to_server = client.connect(server.local_addr()).unwrap();
    let (mut up, mut to_client) = (false, None);
    pump(&mut [client, server], |i, e| {
        match (i, e) {
            (0, Event::Connected { .. }) => up = true,
            (1, Event::Connected { peer, .. }) => to_client = Some(peer),
            _ => {}
        }
        up && to_client.is_some()
    });
    (to_server, to_client.unwrap())
}

#[test]
fn a_receive_error_on_every_call_does_not_make_the_host_spin() {
    within_deadline(|| {
        let mut host = bind();
        host.inject_faults(Faults::recv_error(io::ErrorKind::ConnectionRefused));
        // `process` returns although the socket never says "would block".
        host.process().unwrap();
        let first = host.socket_stats().recv_errors;
        assert!(first > 0, "the error was seen");
        let timeout = host.timeout().expect("a paused receiver wakes to try again");
        assert!(timeout <= Duration::from_millis(64), "{timeout:?}");

        // Half a second of service: the host sleeps between attempts, up to 64 ms apart.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(500) {
            assert!(host.service(Duration::from_millis(50)).unwrap().is_none());
        }
        let attempts = host.socket_stats().recv_errors;
        assert!(attempts > first, "it kept trying");
        assert!(attempts < 100, "{attempts} receive attempts in 0.5 s: spinning");
    });
}

#[test]
fn a_host_recovers_when_the_receive_errors_stop() {
    within_deadline(|| {
        let (mut client, mut server) = (bind(), bind());
        let (to_server, _) = connect(&mut client, &mut server);
        server.inject_faults(Faults::recv_error(io::ErrorKind::ConnectionReset));
        client
            .send(to_server, 0, Bytes::from_static(b"sent while the server cannot read"), SendMode::Reliable)
            .unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(200) {
            for host in [&mut client, &mut server] {
                assert!(!matches!(host.service(Duration::from_millis(5)).unwrap(), Some(Event::Received { .. })));
            }
        }
        server.inject_faults(Faults::NONE);
        let mut got = None;
        pump(&mut [&mut client, &mut server], |i, e| {
            if let (1, Event::Received { data, .. }) = (i, e) {
                got = Some(data);
            }
            got.is_some()
        });
        assert_eq!(got.unwrap(), Bytes::from_static(b"sent while the server cannot read"));
    });
}

/// One server, two clients; every datagram to one client fails. The other client's
/// traffic, queued in the same flushes, all arrives.
#[test]
fn a_failing_destination_does_not_cost_another_peer_its_datagrams() {
    within_deadline(|| {
        let (mut server, mut good, mut bad) = (bind(), bind(), bind());
        let (_, to_good) = connect(&mut good, &mut server);
        let (_, to_bad) = connect(&mut bad, &mut server);
        server.inject_faults(Faults::unreachable(bad.local_addr()));
        const PACKETS: u32 = 500;
        for i in 0..PACKETS {
            let data = Bytes::from(i.to_le_bytes().to_vec());
            server.send(to_bad, 0, data.clone(), SendMode::Reliable).unwrap();
            server.send(to_good, 0, data, SendMode::Reliable).unwrap();
        }
        let mut next = 0u32;
        pump(&mut [&mut server, &mut good, &mut bad], |i, e| {
            match (i, e) {
                (1, Event::Received { data, .. }) => {
                    assert_eq!(data[..], next.to_le_bytes());
                    next += 1;
                }
                (2, Event::Received { .. }) => panic!("a datagram reached the unreachable client"),
                _ => {}
            }
            next == PACKETS
        });
        let stats = server.socket_stats();
        assert!(stats.send_errors > 0, "{stats:?}");
    });
}

#[test]
fn without_batching_every_datagram_takes_its_own_system_call() {
    within_deadline(|| {
        let (mut client, mut server) = (bind(), bind());
        for host in [&mut client, &mut server] {
            host.set_batching(Batching::NONE);
            assert_eq!(host.batching(), Batching::NONE);
        }
        let (to_server, _) = connect(&mut client, &mut server);
        const PACKETS: u32 = 2_000;
        for i in 0..PACKETS {
            // 1,000-byte packets: one datagram each, the case GSO would batch.
            let mut data = vec![i as u8; 1000];
            data[..4].copy_from_slice(&i.to_le_bytes());
            client.send(to_server, 0, Bytes::from(data), SendMode::Reliable).unwrap();
        }
        let mut next = 0u32;
        pump(&mut [&mut client, &mut server], |i, e| {
            if let (1, Event::Received { data, .. }) = (i, e) {
                assert_eq!(data[..4], next.to_le_bytes());
                assert!(data[4..].iter().all(|&b| b == next as u8));
                next += 1;
            }
            next == PACKETS
        });
        for host in [&client, &server] {
            let s = host.socket_stats();
            assert_eq!(s.send_calls, s.sent, "{s:?}");
            assert_eq!(s.recv_calls, s.received, "{s:?}");
            assert_eq!((s.send_errors, s.send_fallbacks), (0, 0));
        }
    });
}

#[test]
fn with_batching_a_bulk_transfer_arrives_whole_and_in_order() {
    within_deadline(|| {
        let (mut client, mut server) = (bind(), bind());
        let (to_server, _) = connect(&mut client, &mut server);
        const PACKETS: u32 = 3_000;
        for i in 0..PACKETS {
            let mut data = vec![i as u8; 1000];
            data[..4].copy_from_slice(&i.to_le_bytes());
            client.send(to_server, 0, Bytes::from(data), SendMode::Reliable).unwrap();
        }
        let mut next = 0u32;
        pump(&mut [&mut client, &mut server], |i, e| {
            if let (1, Event::Received { data, .. }) = (i, e) {
                assert_eq!(data[..4], next.to_le_bytes());
                assert!(data[4..].iter().all(|&b| b == next as u8));
                next += 1;
            }
            next == PACKETS
        });
        let (c, s) = (client.socket_stats(), server.socket_stats());
        eprintln!("client {c:?}\nserver {s:?}");
        assert!(c.send_calls <= c.sent && s.recv_calls <= s.received);
        assert_eq!((c.send_errors, s.recv_errors), (0, 0));
    });
}
