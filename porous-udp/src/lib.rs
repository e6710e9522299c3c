//! The UDP socket layer every POROUS adapter shares.
//!
//! [`porous_proto::Host`] produces and consumes datagrams; an adapter moves them between
//! the core and a UDP socket. Doing that one system call per datagram costs more CPU than
//! the protocol itself, so [`UdpIo`] batches in both directions, through
//! [`quinn-udp`](https://docs.rs/quinn-udp) (the socket layer of the quinn QUIC stack,
//! built and maintained for exactly this):
//!
//! - **Receive**: one `recvmmsg` call fills up to [`BATCH_SIZE`] buffers, and where the
//!   kernel offers UDP GRO (Linux 5.0+) each buffer may hold up to 64 datagrams of one
//!   sender. [`UdpIo::received`] hands them out one datagram at a time.
//! - **Send**: [`UdpIo::push`] queues the core's [`Transmit`]s in order, and
//!   [`UdpIo::send`] coalesces each run of consecutive, equal-size datagrams to one
//!   destination (the last one may be shorter) into a single UDP GSO send (Linux 4.18+),
//!   up to [`UdpIo::max_segments`] datagrams and 64 KB. The datagrams that form no such
//!   run (a server's one datagram per peer per tick) go out together in one `sendmmsg`
//!   (Linux), up to [`UdpIo::max_messages`] per call, through `rustix`'s safe wrapper:
//!   quinn-udp batches per destination only.
//!
//! Where the kernel lacks an offload, quinn-udp reports so and this crate sends and
//! receives one datagram per call instead, silently. Where a batched send is refused at
//! send time (some drivers refuse GSO with `EIO` or `EINVAL`; a sandbox may forbid
//! `sendmmsg`), its datagrams are sent again one by one, and if that works the batching is
//! switched off for the socket. [`Batching::NONE`] forces the fallback paths, for tests
//! and for systems where an offload misbehaves.
//!
//! # Faults stay where they belong
//!
//! - A send error other than `WouldBlock` concerns one destination: the datagrams of that
//!   batch are counted in [`SocketStats::send_errors`] and dropped (the protocol recovers
//!   them as losses), and sending goes on with the next destination. Nothing queued for
//!   anyone else is dropped.
//! - `WouldBlock` keeps every queued datagram, in order, for the next [`UdpIo::send`].
//! - A receive error (an ICMP report surfaced as `ECONNREFUSED` or `ECONNRESET` on some
//!   systems) is returned to the caller; [`RecvBackoff`] is the policy both adapters use
//!   so that an error repeated on every call cannot make them spin.
//!
//! # Socket options
//!
//! quinn-udp sets the don't-fragment behaviour on the socket (`IP_PMTUDISC_PROBE` on
//! Linux, `IP_DONTFRAG` elsewhere): a datagram larger than the path MTU is dropped rather
//! than fragmented by IP. POROUS fragments packets itself, and its default datagram size
//! (1,200 bytes) fits any internet path; a larger configured `mtu` must fit the paths it
//! is used on. Loopback carries 64 KB.
//!
//! # Captures
//!
//! A [`UdpIo`] records every datagram its socket sends and receives into a pcapng
//! capture (`porous_pcap::Recorder`: a thread of its own writes the file, bounded in
//! size; the socket's path only copies each datagram into a batch and never waits on the
//! disk) when the environment names a file:
//!
//! ```text
//! POROUS_CAPTURE=run.pcapng cargo run --release -p porous-mio --example loopback
//! wireshark -X lua_script:tools/wireshark/porous.lua run.pcapng
//! ```
//!
//! `POROUS_CAPTURE_LIMIT` sets the file's limit in bytes (256 MiB unless set); past it,
//! and whenever the disk falls behind, datagrams are left out and counted
//! (`Recorder::stats`). All the sockets of a process share one file, each datagram as
//! its socket saw it (direction in the packet's flags); the file is complete when the
//! last socket is dropped. [`UdpIo::set_capture`] does the same from code, for any
//! recorder.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod backoff;
#[cfg(feature = "fault-injection")]
mod faults;
mod io;
mod plan;

use std::net::{ToSocketAddrs, UdpSocket};

pub use backoff::RecvBackoff;
#[cfg(feature = "fault-injection")]
pub use faults::Faults;
pub use io::UdpIo;
pub use porous_pcap::Recorder;
pub use porous_proto::Transmit;

/// Receive buffers [`UdpIo`] fills per system call (quinn-udp's batch size: 32 where
/// `recvmmsg` exists, 1 elsewhere).
pub const BATCH_SIZE: usize = quinn_udp::BATCH_SIZE;

/// The kernel receive and send buffer size [`bind`] asks for, in bytes.
///
/// Defaults (208 KiB on Linux) overflow when a LAN transfer's congestion window outgrows
/// them, and every overflow is a loss the congestion controller backs off from. ENet asks
/// for 256 KiB; a larger buffer lets the window grow further between losses. The kernel
/// may grant less (Linux caps it at `net.core.rmem_max` and `wmem_max`) or refuse it, and
/// the socket then keeps what it has.
pub const SOCKET_BUFFER: usize = 1 << 20;

/// A borrowed socket, as the system calls take it: a file descriptor on Unix, a socket
/// handle on Windows.
#[cfg(unix)]
pub type SocketRef<'a> = std::os::fd::BorrowedFd<'a>;
/// A borrowed socket, as the system calls take it: a file descriptor on Unix, a socket
/// handle on Windows.
#[cfg(windows)]
pub type SocketRef<'a> = std::os::windows::io::BorrowedSocket<'a>;

/// Anything that can lend its socket to [`UdpIo`]: `std`, mio, tokio and async-io UDP
/// sockets all can.
pub trait AsSocketRef {
    /// The socket, borrowed.
    fn as_socket_ref(&self) -> SocketRef<'_>;
}

#[cfg(unix)]
impl<T: std::os::fd::AsFd> AsSocketRef for T {
    fn as_socket_ref(&self) -> SocketRef<'_> {
        self.as_fd()
    }
}

#[cfg(windows)]
impl<T: std::os::windows::io::AsSocket> AsSocketRef for T {
    fn as_socket_ref(&self) -> SocketRef<'_> {
        self.as_socket()
    }
}

/// Binds a non-blocking UDP socket to the first address of `addr` that binds (as
/// [`std::net::UdpSocket::bind`] does; a name is resolved with the system resolver), and
/// asks for buffers of [`SOCKET_BUFFER`] bytes.
pub fn bind(addr: impl ToSocketAddrs) -> std::io::Result<UdpSocket> {
    adopt(UdpSocket::bind(addr)?)
}

/// Prepares a socket the application bound itself (with options of its own, or handed
/// over by a supervisor) as [`bind`] prepares its own: non-blocking, and buffers of at
/// least [`SOCKET_BUFFER`] bytes asked for (larger ones are kept).
pub fn adopt(socket: UdpSocket) -> std::io::Result<UdpSocket> {
    socket.set_nonblocking(true)?;
    let options = socket2::SockRef::from(&socket);
    // Best effort: a refusal leaves the default, which works, only with more losses.
    // Linux reports twice what was asked for, so a buffer asked for at SOCKET_BUFFER or
    // more reads at least that.
    if options.recv_buffer_size().is_ok_and(|n| n < SOCKET_BUFFER) {
        let _ = options.set_recv_buffer_size(SOCKET_BUFFER);
    }
    if options.send_buffer_size().is_ok_and(|n| n < SOCKET_BUFFER) {
        let _ = options.set_send_buffer_size(SOCKET_BUFFER);
    }
    Ok(socket)
}

/// What an adapter learns from the address it bound: a secure server
/// ([`SecureConfig::server`](porous_proto::SecureConfig::server)) configured without
/// public addresses gets `local` as its one address when `local` is a specific address
/// (not `0.0.0.0` or `::`), so that a server bound to port 0 is named by the port the
/// system picked. Any other configuration is left as it is; a server reached at another
/// address (a load balancer, a NAT) is told with `Host::set_public_addresses`.
pub fn learn_public_address(config: &mut porous_proto::HostConfig, local: std::net::SocketAddr) {
    if let Some(secure) = config.secure.as_mut()
        && secure.private_key.is_some()
        && secure.public_addresses.is_empty()
        && !local.ip().is_unspecified()
    {
        secure.public_addresses.push(local);
    }
}

/// The receive and send buffer sizes of `socket` as the kernel granted them (Linux
/// reports twice the size asked for, its bookkeeping included).
pub fn socket_buffers(socket: &impl AsSocketRef) -> std::io::Result<(usize, usize)> {
    let borrowed = socket.as_socket_ref();
    let options = socket2::SockRef::from(&borrowed);
    Ok((options.recv_buffer_size()?, options.send_buffer_size()?))
}

/// How much a [`UdpIo`] may batch. The default, [`Batching::FULL`], uses whatever the
/// kernel offers; [`Batching::NONE`] makes one system call per datagram, as a kernel
/// without `recvmmsg`, GSO and GRO would.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Batching {
    /// Coalesce consecutive equal-size datagrams to one destination into one GSO send,
    /// where the kernel supports it.
    pub gso: bool,
    /// Receive buffers per system call, 1 to [`BATCH_SIZE`] (larger values count as
    /// [`BATCH_SIZE`], 0 as 1). A kernel with GRO may still put several datagrams of one
    /// sender in a buffer when the sender used GSO; they are handed out one by one.
    pub recv_batch: usize,
    /// Datagrams per `sendmmsg` call (Linux), for those that GSO does not take (to
    /// different destinations, or of different sizes): 1 to 32 (larger values count as
    /// 32, 0 as 1, which means no `sendmmsg`).
    pub send_batch: usize,
}

impl Batching {
    /// Every batching the kernel offers.
    pub const FULL: Self = Self { gso: true, recv_batch: BATCH_SIZE, send_batch: 32 };
    /// One datagram per send call and one receive buffer per call.
    pub const NONE: Self = Self { gso: false, recv_batch: 1, send_batch: 1 };
}

impl Default for Batching {
    fn default() -> Self {
        Self::FULL
    }
}

/// Socket-level counters of an adapter (the protocol's own are in
/// [`porous_proto::Host::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketStats {
    /// Datagrams received from the socket.
    pub received: u64,
    /// Datagrams handed to the socket.
    pub sent: u64,
    /// Receive system calls that returned datagrams.
    pub recv_calls: u64,
    /// Send system calls that the socket accepted (one may carry several datagrams).
    pub send_calls: u64,
    /// Sends that hit `WouldBlock` and were kept for later.
    pub would_block: u64,
    /// Datagrams the socket refused with another error (counted, then dropped: the
    /// protocol recovers them like any loss).
    pub send_errors: u64,
    /// Receive errors other than `WouldBlock` (such as an ICMP "port unreachable" some
    /// systems report on UDP sockets).
    pub recv_errors: u64,
    /// Batched sends (GSO or `sendmmsg`) the socket refused, whose datagrams were then
    /// sent one by one.
    pub send_fallbacks: u64,
}
