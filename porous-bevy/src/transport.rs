//! What carries a host's datagrams: the [`Transport`] seam, and [`UdpTransport`], a UDP
//! socket through `porous-udp`.
//!
//! A transport moves datagrams between the core and the outside world, and nothing else:
//! it reads no clock (the `now` it is given is Bevy's) and makes no protocol decision. The
//! plugin calls [`Transport::receive`] once per frame in `PreUpdate` and
//! [`Transport::send`] once per frame in `PostUpdate`, after the core's step.

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Instant;

use porous_proto::Host;
use porous_udp::{AsSocketRef, Batching, RecvBackoff, SocketStats, UdpIo};

/// Carries the datagrams of one [`Host`]. The plugin's resources own one each.
///
/// Implement it to run POROUS over something other than a UDP socket: the simulator
/// ([`SimTransport`](crate::sim::SimTransport), feature `sim`) is one.
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// The address the host is known by on the network it is on.
    fn local_addr(&self) -> SocketAddr;

    /// Hands every datagram that has arrived to `core`
    /// ([`Host::handle_datagram`]) with the time `now`. Sends nothing. Errors are the
    /// transport's to count and recover from: a frame must go on.
    fn receive(&mut self, now: Instant, core: &mut Host);

    /// Sends every datagram `core` has ([`Host::poll_transmit`] until `None`), and any
    /// the transport held back before. Datagrams the network will not take now are kept
    /// for the next call, or dropped and counted (the protocol recovers them as losses).
    fn send(&mut self, core: &mut Host);

    /// Socket-level counters, where the transport has a socket.
    fn socket_stats(&self) -> Option<SocketStats> {
        None
    }
}

/// A non-blocking UDP socket with batched IO ([`porous_udp::UdpIo`]: `recvmmsg`, GSO,
/// `sendmmsg` where the kernel has them), the transport of
/// [`PorousServer::bind`](crate::PorousServer::bind) and
/// [`PorousClient::connect`](crate::PorousClient::connect).
pub struct UdpTransport {
    socket: UdpSocket,
    io: UdpIo,
    backoff: RecvBackoff,
    local: SocketAddr,
}

impl fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpTransport").field("local", &self.local).field("io", &self.io).finish_non_exhaustive()
    }
}

impl UdpTransport {
    /// A socket bound to `addr` (port 0 picks a free one; a name is resolved with the
    /// system resolver and the first address that binds is used).
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<Self> {
        Self::from_std(porous_udp::bind(addr)?)
    }

    /// A socket the application bound itself, with its own options (buffer sizes,
    /// `SO_REUSEADDR`, a device). It is made non-blocking; its buffer sizes are left as
    /// they are.
    pub fn from_std(socket: UdpSocket) -> io::Result<Self> {
        socket.set_nonblocking(true)?;
        let io = UdpIo::new(&socket, Batching::default())?;
        let local = socket.local_addr()?;
        Ok(Self { socket, io, backoff: RecvBackoff::new(), local })
    }

    /// The batching in use (by default all the kernel offers).
    pub fn batching(&self) -> Batching {
        self.io.batching()
    }

    /// Changes the batching ([`Batching::NONE`]: one system call per datagram).
    pub fn set_batching(&mut self, batching: Batching) {
        self.io.set_batching(batching);
    }
}

impl Transport for UdpTransport {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn receive(&mut self, now: Instant, core: &mut Host) {
        // Bounded: a flood arriving faster than it is read must not hold the frame
        // forever. What is left waits in the kernel's buffer for the next frame.
        for _ in 0..64 {
            if self.backoff.paused(now) {
                return;
            }
            match self.io.recv(self.socket.as_socket_ref()) {
                Ok(_) => {
                    self.backoff.ok();
                    for (from, datagram) in self.io.received() {
                        core.handle_datagram(now, from, datagram);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.backoff.ok();
                    return;
                }
                // An ICMP report or a broken socket: counted by `UdpIo`; repeated, it
                // pauses reading for a moment instead of spinning.
                Err(_) => self.backoff.error(now),
            }
        }
    }

    fn send(&mut self, core: &mut Host) {
        while let Some(t) = core.poll_transmit() {
            self.io.push(t);
        }
        // `WouldBlock` keeps the rest for the next frame; other errors are counted per
        // destination by `UdpIo` and never stop the others.
        let _ = self.io.send(self.socket.as_socket_ref());
    }

    fn socket_stats(&self) -> Option<SocketStats> {
        Some(self.io.stats())
    }
}
