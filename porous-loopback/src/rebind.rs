//! A NAT-like relay on 127.0.0.1 that rebinds on request, for the address-change tests
//! over real UDP (`porous-mio/tests/rebinding.rs`, and the async adapters' shared suite).
//!
//! The client sends to [`Rebinder::inside`]; the relay forwards from its outside socket to
//! the server and back, dropping about one datagram in `loss` each way, and on
//! [`Rebinder::rebind`] replaces its outside socket by one on a new port and closes the
//! old one, as a NAT that forgot the mapping: what the server sends to the old port is
//! lost. [`Rebinder::move_to`] does the same on another loopback IP (Linux routes all of
//! 127.0.0.0/8 to loopback): the client moved to another network. Test code: a socket
//! that cannot be bound on loopback panics.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// The relay's controls; dropping it stops the relay.
#[derive(Debug)]
pub struct Rebinder {
    inside: SocketAddr,
    outside_port: Arc<AtomicU16>,
    /// The outside socket's IP (an IPv4 address as a `u32`).
    outside_ip: Arc<AtomicU32>,
    rebind: Arc<AtomicBool>,
    /// The IP the next rebinding binds on.
    next_ip: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// A non-blocking socket on `ip` (a loopback address) on a port of the system's choosing.
fn loopback_socket(ip: Ipv4Addr) -> UdpSocket {
    let s = UdpSocket::bind((ip, 0)).expect("a UDP socket on loopback");
    s.set_nonblocking(true).expect("non-blocking");
    s
}

impl Rebinder {
    /// A relay to `server`, dropping about one datagram in `loss` each way (a seeded
    /// xorshift, the same in every run).
    pub fn start(server: SocketAddr, loss: u64) -> Self {
        let inside_socket = loopback_socket(Ipv4Addr::LOCALHOST);
        let inside = inside_socket.local_addr().expect("its address");
        let outside_port = Arc::new(AtomicU16::new(0));
        let outside_ip = Arc::new(AtomicU32::new(Ipv4Addr::LOCALHOST.to_bits()));
        let next_ip = Arc::new(AtomicU32::new(Ipv4Addr::LOCALHOST.to_bits()));
        let rebind = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (port, ip, next) = (Arc::clone(&outside_port), Arc::clone(&outside_ip), Arc::clone(&next_ip));
        let (again, halt) = (Arc::clone(&rebind), Arc::clone(&stop));
        let thread = thread::spawn(move || {
            let bind = || {
                let s = loopback_socket(Ipv4Addr::from_bits(next.load(Ordering::SeqCst)));
                let addr = s.local_addr().expect("its address");
                if let SocketAddr::V4(a) = addr {
                    ip.store(a.ip().to_bits(), Ordering::SeqCst);
                }
                port.store(addr.port(), Ordering::SeqCst);
                s
            };
            let mut outside = bind();
            let mut client = None;
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            let mut keep = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                !rng.is_multiple_of(loss.max(1))
            };
            let mut buf = vec![0u8; 65_536];
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
        Self { inside, outside_port, outside_ip, rebind, next_ip, stop, thread: Some(thread) }
    }

    /// Where the client sends.
    pub fn inside(&self) -> SocketAddr {
        self.inside
    }

    /// The relay's outside address: the client's address as the server sees it (port 0
    /// until the relay's thread has bound it).
    pub fn outside(&self) -> SocketAddr {
        let ip = Ipv4Addr::from_bits(self.outside_ip.load(Ordering::SeqCst));
        SocketAddr::from((ip, self.outside_port.load(Ordering::SeqCst)))
    }

    /// Asks the relay to replace its outside socket; [`Rebinder::outside`] changes once it
    /// has (within a fraction of a millisecond).
    pub fn rebind(&self) {
        self.rebind.store(true, Ordering::SeqCst);
    }

    /// Asks the relay to replace its outside socket by one on `ip` (another loopback
    /// address, such as 127.0.0.2: the client moved to another network).
    pub fn move_to(&self, ip: Ipv4Addr) {
        self.next_ip.store(ip.to_bits(), Ordering::SeqCst);
        self.rebind.store(true, Ordering::SeqCst);
    }
}

impl Drop for Rebinder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
