//! Transports beside the UDP socket: other ways for datagrams to reach the same core.
//!
//! A [`Transport`] carries datagrams between the host and remotes the UDP socket cannot
//! reach (a browser's WebTransport sessions: `porous-webtransport`). It names each of its
//! remotes by a socket address of its own choosing, which it [`owns`](Transport::owns), and
//! the driver treats those remotes as it treats UDP ones: the same core, the same peers,
//! events, `accept` and `peers()`. The driver, once a transport is attached
//! ([`Host::attach`](crate::Host::attach)):
//!
//! - hands the core what the transport reports, in order: a remote's path opening
//!   ([`Arrival::Opened`]: `porous_proto::Host::set_path_mtu` with its datagram size), its
//!   datagrams, and its path closing (`porous_proto::Host::close_path`, which ends the
//!   connection there with `DisconnectReason::TransportClosed`);
//! - sends every datagram the core addresses to an owned address through
//!   [`Transport::send`] instead of the socket;
//! - drops datagrams that arrive on the UDP socket from an owned address (only a spoofer
//!   sends those; counted in [`TransportStats::spoofed`]);
//! - tells the transport when the core's connection with one of its remotes is
//!   established and when it has ended ([`Transport::peer`]), so that it can close the
//!   paths that have ended. A path whose handshake never completes gets no word: the
//!   transport closes it after a timeout of its own.
//!
//! Backpressure is the socket's: while a reader is behind, a transport's datagrams from
//! that reader's remote are dropped instead of left unread (the remote resends reliable
//! data), as the socket's are left in the kernel's buffer.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use bytes::Bytes;
use porous_proto::PeerId;

/// What a transport reports, oldest first.
#[derive(Debug)]
#[non_exhaustive]
pub enum Arrival<'a> {
    /// A new remote, whose path carries datagrams of at most `mtu` bytes (its connection
    /// uses no larger ones). Comes before its first datagram.
    Opened {
        /// The remote's address, owned by the transport.
        remote: SocketAddr,
        /// The largest datagram its path carries.
        mtu: usize,
    },
    /// A datagram from `from`.
    Datagram {
        /// The remote's address.
        from: SocketAddr,
        /// The datagram.
        data: &'a [u8],
    },
    /// The path to `remote` is gone: nothing more can be sent or received there.
    Closed {
        /// The remote's address.
        remote: SocketAddr,
    },
}

/// What the core did with a connection to one of a transport's remotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PeerChange {
    /// The connection is established.
    Connected,
    /// The connection has ended (for any reason, the path's closing included).
    Ended,
}

/// A way for datagrams to reach a host other than its UDP socket; see the
/// [module](self). Implemented by `porous-webtransport`.
pub trait Transport: Send + fmt::Debug {
    /// Whether `addr` names one of this transport's remotes. Called for every datagram the
    /// core sends and every datagram the socket receives: make it a few comparisons.
    fn owns(&self, addr: SocketAddr) -> bool;

    /// Reports what happened since the last call, oldest first, through `report`: at most
    /// a bounded batch, and `Ready` if more may be waiting (the driver comes back in the
    /// same round of its loop); `Pending`, with `cx`'s waker registered, once nothing is.
    fn poll_arrivals(&mut self, cx: &mut Context<'_>, report: &mut dyn FnMut(Arrival<'_>)) -> Poll<()>;

    /// Sends `datagram` to `to`, an owned address, without blocking: a datagram that does
    /// not fit the transport's queue is dropped, as UDP would.
    fn send(&mut self, to: SocketAddr, datagram: Bytes);

    /// The core's connection with `remote`, an owned address, changed.
    fn peer(&mut self, remote: SocketAddr, change: PeerChange);
}

/// Counters of the driver's side of its transports, from
/// [`Host::transport_stats`](crate::Host::transport_stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportStats {
    /// Datagrams a transport reported and the driver handed to the core.
    pub datagrams_received: u64,
    /// Datagrams the core sent through a transport.
    pub datagrams_sent: u64,
    /// Datagrams from a transport's remote dropped because that connection's reader was
    /// behind (the socket's datagrams would have waited in the kernel's buffer).
    pub deferred: u64,
    /// Datagrams that arrived on the UDP socket from an address a transport owns (only a
    /// spoofer sends those), dropped.
    pub spoofed: u64,
    /// Paths opened whose datagram size the protocol cannot work with, closed at once.
    pub refused: u64,
}

/// The driver's transports, with its counters of them.
#[derive(Debug, Default)]
pub(crate) struct Transports {
    list: Vec<Box<dyn Transport>>,
    /// The transports' remotes with an established connection: the core deletes a peer
    /// that times out before its `Disconnected` is read, so its address is kept here.
    connected: HashMap<PeerId, SocketAddr>,
    pub(crate) stats: TransportStats,
}

impl Transports {
    pub(crate) fn attach(&mut self, transport: Box<dyn Transport>) {
        self.list.push(transport);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The transport that owns `addr`, if any.
    pub(crate) fn owner(&mut self, addr: SocketAddr) -> Option<&mut dyn Transport> {
        match self.list.iter_mut().find(|t| t.owns(addr)) {
            Some(t) => Some(t.as_mut()),
            None => None,
        }
    }

    /// Whether a transport owns `addr` (a datagram from it on the socket is spoofed).
    pub(crate) fn owns(&self, addr: SocketAddr) -> bool {
        self.list.iter().any(|t| t.owns(addr))
    }

    /// Tells the owner of `remote` that its connection changed.
    pub(crate) fn peer(&mut self, remote: SocketAddr, change: PeerChange) {
        if let Some(t) = self.owner(remote) {
            t.peer(remote, change);
        }
    }

    /// The core reported `peer` at `remote` connected: if a transport owns `remote`, it
    /// hears of it, and of the end later.
    pub(crate) fn connected(&mut self, peer: PeerId, remote: SocketAddr) {
        if !self.list.is_empty() && self.owns(remote) {
            self.connected.insert(peer, remote);
            self.peer(remote, PeerChange::Connected);
        }
    }

    /// The core reported that `peer` moved to `new` (its remote proved it receives there).
    /// The transport that heard of its connection at the old address hears of its end
    /// there (nothing of the connection goes that way any more), and the owner of `new`,
    /// if any, of its connection. A transport that names each remote by an address of an
    /// IP of its own never sees this: the core moves a connection only to another port of
    /// its IP, and the driver drops socket datagrams from a transport's addresses.
    pub(crate) fn moved(&mut self, peer: PeerId, new: SocketAddr) {
        if self.list.is_empty() {
            return;
        }
        self.ended(peer);
        self.connected(peer, new);
    }

    /// The core reported `peer` ended: the transport that heard of its connection hears of
    /// its end.
    pub(crate) fn ended(&mut self, peer: PeerId) {
        if let Some(remote) = self.connected.remove(&peer) {
            self.peer(remote, PeerChange::Ended);
        }
    }

    /// Sends `datagram` through the owner of `to` (see [`Transports::owns`]).
    pub(crate) fn send(&mut self, to: SocketAddr, datagram: Bytes) {
        if let Some(t) = self.owner(to) {
            t.send(to, datagram);
            self.stats.datagrams_sent += 1;
        }
    }

    /// Polls every transport once: `report` gets the arrivals of each, with the transport
    /// they came from, and the return value says whether any may have more.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        report: &mut dyn FnMut(&mut TransportStats, Arrival<'_>),
    ) -> bool {
        let mut more = false;
        let Self { list, stats, .. } = self;
        for t in list.iter_mut() {
            more |= t.poll_arrivals(cx, &mut |a| report(stats, a)).is_ready();
        }
        more
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use porous_proto::HostConfig;

    use super::*;

    /// A transport that owns the addresses of 10.9.0.0/16 and records what it is told.
    #[derive(Debug)]
    struct Recorder(Arc<Mutex<Vec<(SocketAddr, PeerChange)>>>);

    impl Transport for Recorder {
        fn owns(&self, addr: SocketAddr) -> bool {
            matches!(addr.ip(), std::net::IpAddr::V4(ip) if ip.octets()[..2] == [10, 9])
        }
        fn poll_arrivals(&mut self, _: &mut Context<'_>, _: &mut dyn FnMut(Arrival<'_>)) -> Poll<()> {
            Poll::Pending
        }
        fn send(&mut self, _: SocketAddr, _: Bytes) {}
        fn peer(&mut self, remote: SocketAddr, change: PeerChange) {
            self.0.lock().unwrap().push((remote, change));
        }
    }

    /// A connection that moves between a transport's addresses is reported ended at the
    /// old one and connected at the new; one that moves off the transport only ended, and
    /// its later end is not reported twice; one that moves onto it is reported connected.
    #[test]
    fn a_move_is_reported_to_the_transports_it_leaves_and_joins() {
        let mut core = porous_proto::Host::with_seed(HostConfig::default(), 1).unwrap();
        let peer = core.connect(Instant::now(), SocketAddr::from(([10, 0, 0, 2], 1))).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut transports = Transports::default();
        transports.attach(Box::new(Recorder(Arc::clone(&log))));
        let (a, b) = (SocketAddr::from(([10, 9, 0, 1], 1)), SocketAddr::from(([10, 9, 0, 1], 2)));
        let udp = SocketAddr::from(([10, 0, 0, 1], 3));
        transports.connected(peer, a);
        transports.moved(peer, b);
        transports.moved(peer, udp);
        transports.ended(peer);
        transports.moved(peer, a);
        use PeerChange::{Connected, Ended};
        assert_eq!(*log.lock().unwrap(), [(a, Connected), (a, Ended), (b, Connected), (b, Ended), (a, Connected)]);
    }
}
