//! The driver under socket faults, on a minimal runtime (one thread per driver, the
//! async-io reactor): a receive error repeated on every call, a destination that refuses
//! every datagram, and a kernel without any batching. The runtime bindings' own suites
//! cover the handles' behaviour.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_lite::future;
use porous_async::runtime::async_io::{AsyncIoSocket, AsyncIoTimer};
use porous_async::runtime::{AsyncTimer, AsyncUdpSocket, Runtime};
use porous_async::{Batching, DisconnectReason, Faults, Host, HostConfig, Packet, Peer, SendMode};

/// One thread per driver.
#[derive(Debug)]
struct Threads;

impl Runtime for Threads {
    fn spawn(&self, driver: Pin<Box<dyn Future<Output = ()> + Send>>) {
        std::thread::spawn(move || future::block_on(driver));
    }
    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
        Box::pin(AsyncIoTimer::at(deadline))
    }
    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Box<dyn AsyncUdpSocket>> {
        Ok(Box::new(AsyncIoSocket::new(socket)?))
    }
}

const DEADLINE: Duration = Duration::from_secs(30);

fn run(test: impl Future<Output = ()>) {
    future::block_on(future::or(test, async {
        async_io::Timer::after(DEADLINE).await;
        panic!("the test missed its deadline");
    }));
}

fn bind() -> Host {
    Host::bind_with(&Threads, "127.0.0.1:0", HostConfig::default()).unwrap()
}

async fn sleep(d: Duration) {
    async_io::Timer::after(d).await;
}

async fn connect(client: &Host, server: &Host) -> (Peer, Peer) {
    let (to_server, to_client) = future::zip(client.connect(server.local_addr()), server.accept()).await;
    (to_server.unwrap(), to_client.unwrap())
}

#[test]
fn a_receive_error_on_every_call_does_not_make_the_driver_spin() {
    run(async {
        let (server, client) = (bind(), bind());
        let (to_server, to_client) = connect(&client, &server).await;
        server.inject_faults(Faults::recv_error(io::ErrorKind::ConnectionRefused));
        // Traffic makes the socket readable again and again while every receive fails.
        to_server.send(0, &b"while the server cannot read"[..], SendMode::Reliable).unwrap();
        let start = Instant::now();
        sleep(Duration::from_millis(500)).await;
        let attempts = server.socket_stats().recv_errors;
        assert!(attempts > 0, "the fault was hit");
        assert!(attempts < 100, "{attempts} receive attempts in {:?}: spinning", start.elapsed());

        // The driver stayed responsive, and reads again once the errors stop.
        server.inject_faults(Faults::NONE);
        let packet = to_client.recv().await.unwrap();
        assert_eq!(packet, Packet::new(0, SendMode::Reliable, &b"while the server cannot read"[..]));
    });
}

#[test]
fn a_failing_destination_does_not_cost_another_peer_its_datagrams() {
    run(async {
        let (server, good, bad) = (bind(), bind(), bind());
        let (_from_good, to_good) = connect(&good, &server).await;
        let (from_bad, to_bad) = connect(&bad, &server).await;
        server.inject_faults(Faults::unreachable(bad.local_addr()));
        const PACKETS: u32 = 500;
        let sender = async {
            for i in 0..PACKETS {
                let data = i.to_le_bytes().to_vec();
                to_bad.send(0, data.clone(), SendMode::Reliable).unwrap();
                while let Err(e) = to_good.send(0, data.clone(), SendMode::Reliable) {
                    assert!(matches!(e, porous_async::SendError::QueueFull { .. }), "{e}");
                    sleep(Duration::from_millis(1)).await;
                }
            }
        };
        let receiver = async {
            for i in 0..PACKETS {
                let packet = _from_good.recv().await.unwrap();
                assert_eq!(packet.data[..], i.to_le_bytes());
            }
        };
        future::zip(sender, receiver).await;
        assert!(server.socket_stats().send_errors > 0);
        assert_eq!(from_bad.delivery_stats().queued, 0, "nothing reached the unreachable client");
    });
}

#[test]
fn without_batching_every_datagram_takes_its_own_system_call() {
    run(async {
        let (server, client) = (bind(), bind());
        for host in [&server, &client] {
            host.set_batching(Batching::NONE);
        }
        let (to_server, to_client) = connect(&client, &server).await;
        const PACKETS: u32 = 1_000;
        let sender = async {
            for i in 0..PACKETS {
                let mut data = vec![i as u8; 1000];
                data[..4].copy_from_slice(&i.to_le_bytes());
                to_server.send(0, data, SendMode::Reliable).unwrap();
            }
        };
        let receiver = async {
            for i in 0..PACKETS {
                let packet = to_client.recv().await.unwrap();
                assert_eq!(packet.data[..4], i.to_le_bytes());
                assert!(packet.data[4..].iter().all(|&b| b == i as u8));
            }
        };
        future::zip(sender, receiver).await;
        assert_eq!(to_server.disconnect().await, DisconnectReason::Local);
        for host in [&client, &server] {
            let s = host.socket_stats();
            assert_eq!(s.send_calls, s.sent, "{s:?}");
            assert_eq!(s.recv_calls, s.received, "{s:?}");
        }
    });
}

#[test]
fn with_batching_a_bulk_transfer_takes_few_system_calls() {
    run(async {
        let (server, client) = (bind(), bind());
        let (to_server, to_client) = connect(&client, &server).await;
        const PACKETS: u32 = 3_000;
        for i in 0..PACKETS {
            let mut data = vec![i as u8; 1000];
            data[..4].copy_from_slice(&i.to_le_bytes());
            to_server.send(0, data, SendMode::Reliable).unwrap();
        }
        for i in 0..PACKETS {
            let packet = to_client.recv().await.unwrap();
            assert_eq!(packet.data[..4], i.to_le_bytes());
        }
        let (c, s) = (client.socket_stats(), server.socket_stats());
        assert!(c.send_calls <= c.sent && s.recv_calls <= s.received, "{c:?} {s:?}");
        assert_eq!((c.send_errors, s.recv_errors), (0, 0));
    });
}

#[test]
fn bind_takes_any_address_form_and_reports_bad_ones() {
    run(async {
        let by_str = Host::bind_with(&Threads, "127.0.0.1:0", HostConfig::default()).unwrap();
        let by_tuple = Host::bind_with(&Threads, ("127.0.0.1", 0), HostConfig::default()).unwrap();
        let by_addr = Host::bind_with(&Threads, by_str.local_addr(), HostConfig::default());
        assert!(matches!(by_addr, Err(porous_async::Error::Io(_))), "the port is taken");
        assert!(by_tuple.local_addr().ip().is_loopback());
        let mut bad = HostConfig::default();
        bad.peer.mtu = 10;
        let config = Host::bind_with(&Threads, "127.0.0.1:0", bad);
        assert!(matches!(config, Err(porous_async::Error::Config(_))));
    });
}
