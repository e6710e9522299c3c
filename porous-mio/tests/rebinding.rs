//! Address change over real UDP: a client reaches the server through a NAT-like relay on
//! loopback, which drops a share of the datagrams each way and, mid-stream, rebinds (its
//! outside socket is replaced by one on a new port, and the old one closed, as a NAT that
//! forgot the mapping). The connection goes on from the new port, the server reports
//! `AddressChanged`, and every message arrives exactly once and in order both ways.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_mio::{Event, Host, HostConfig, SendMode};

const DEADLINE: Duration = Duration::from_secs(60);
const MESSAGES: u32 = 300;

/// The relay's controls: ask it to rebind, read where its outside socket is, stop it.
struct Relay {
    inside: SocketAddr,
    outside_port: Arc<AtomicU64>,
    rebind: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Relay {
    /// A relay to `server`, dropping about one datagram in `1 / loss` each way.
    fn start(server: SocketAddr, loss: u64) -> Self {
        let inside_socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        inside_socket.set_nonblocking(true).unwrap();
        let inside = inside_socket.local_addr().unwrap();
        let outside_port = Arc::new(AtomicU64::new(0));
        let rebind = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (port, again, halt) = (Arc::clone(&outside_port), Arc::clone(&rebind), Arc::clone(&stop));
        let thread = thread::spawn(move || {
            let bind = || {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_nonblocking(true).unwrap();
                port.store(u64::from(s.local_addr().unwrap().port()), Ordering::SeqCst);
                s
            };
            let mut outside = bind();
            let mut client = None;
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            let mut keep = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                !rng.is_multiple_of(loss)
            };
            let mut buf = [0u8; 2048];
            while !halt.load(Ordering::SeqCst) {
                if again.swap(false, Ordering::SeqCst) {
                    // The old mapping is gone: what the server sends to it is lost.
                    outside = bind();
                }
                let mut idle = true;
                while let Ok((n, from)) = inside_socket.recv_from(&mut buf) {
                    idle = false;
                    client = Some(from);
                    if keep() {
                        let _ = outside.send_to(&buf[..n], server);
                    }
                }
                while let Ok((n, from)) = outside.recv_from(&mut buf) {
                    idle = false;
                    if let (Some(c), true, true) = (client, from == server, keep()) {
                        let _ = inside_socket.send_to(&buf[..n], c);
                    }
                }
                if idle {
                    thread::sleep(Duration::from_micros(200));
                }
            }
        });
        Self { inside, outside_port, rebind, stop, thread: Some(thread) }
    }

    fn outside_port(&self) -> u16 {
        self.outside_port.load(Ordering::SeqCst) as u16
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn number(data: &Bytes) -> u32 {
    u32::from_le_bytes(data[..4].try_into().unwrap())
}

#[test]
fn a_client_whose_nat_rebinds_keeps_its_connection_over_real_udp() {
    let mut server = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
    let mut client = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
    let relay = Relay::start(server.local_addr(), 20);
    let to_server = client.connect(relay.inside).unwrap();
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
                old_port = Some(relay.outside_port());
                relay.rebind.store(true, Ordering::SeqCst);
            }
        }
    }
    assert!(at_server.iter().copied().eq(0..MESSAGES), "the server got {at_server:?}");
    assert!(at_client.iter().copied().eq(0..MESSAGES), "the client got {at_client:?}");
    assert_eq!(changes.len(), 1, "{changes:?}");
    let (old, new) = changes[0];
    assert_eq!(Some(old.port()), old_port);
    assert_eq!(new.port(), relay.outside_port());
    assert_eq!(server.core().remote_addr(to_client.unwrap()), Some(new));
    assert_eq!(server.core().stats().address_changes, 1);
}
