//! One server and many clients on the simulator's network, the clients emulated by one
//! client host (the `idle` and `active` benches). The client host reaches the server
//! through alias `i` for client `i`, and the links rewrite the addresses on the way
//! (`addresses.rs`), so the server sees each client at an address of its own and holds a
//! full, independent peer for each.
//!
//! Only the server's calls are to be timed, so the network's own work (a heap of
//! datagrams on their way, a link per client and direction) stays outside its turn: what
//! arrived for the server is taken off the network into its inbox before the turn
//! ([`Crowd::take_inbox`]), the timed turn reads the inbox and writes its outbox, as a
//! server reads and writes a socket's queue, and the outbox is carried after it
//! ([`Crowd::carry_outbox`]).

// Each bench uses what it needs of this module.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use porous_proto::sim::{Arrival, LinkConditions, Network};
use porous_proto::{Host, Transmit};

use crate::addresses::{ALIAS_BASE, CLIENT_BASE, alias, client_addr, index};

/// Where the server is, and the client host, on the network (neither sees the other's).
const SERVER: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 3, 0, 1), 7000));
const CLIENTS: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 3, 0, 2), 7000));

/// The server, the client host standing for every client, and the network between them.
pub(crate) struct Crowd {
    pub(crate) server: Host,
    pub(crate) client: Host,
    pub(crate) net: Network,
    /// What arrived for the server, taken off the network for its next turn.
    pub(crate) inbox: Vec<Arrival>,
    /// What the server sent in its turn, to carry after it.
    pub(crate) outbox: Vec<Transmit>,
}

impl Crowd {
    /// `server` and `client` on a network whose links cross within the instant.
    pub(crate) fn new(server: Host, client: Host) -> Self {
        let mut net = Network::new(0);
        net.set_default_link(LinkConditions::perfect(Duration::ZERO));
        Self { server, client, net, inbox: Vec::new(), outbox: Vec::new() }
    }

    pub(crate) fn now(&self) -> Instant {
        self.net.now()
    }

    /// Moves the clock on by `d`.
    pub(crate) fn advance(&mut self, d: Duration) {
        let at = self.net.now() + d;
        self.net.advance_to(at);
    }

    /// From now on, each of the first `n` clients' datagrams take `d` one way, both ways.
    pub(crate) fn set_delay(&mut self, n: usize, d: Duration) {
        for i in 0..n {
            self.net.set_link(client_addr(i), SERVER, LinkConditions::perfect(d));
            self.net.set_link(alias(i), CLIENTS, LinkConditions::perfect(d));
        }
    }

    /// The clients read: what arrived for them goes to the client host; what arrived for
    /// the server waits in its inbox.
    pub(crate) fn client_read(&mut self) {
        let now = self.net.now();
        while let Some(a) = self.net.pop_arrival() {
            if a.to == CLIENTS {
                self.client.handle_datagram(now, a.from, &a.payload);
            } else {
                self.inbox.push(a);
            }
        }
    }

    /// The client host's datagrams onto the links, each from its client to the server;
    /// `each` sees each first.
    pub(crate) fn client_send(&mut self, mut each: impl FnMut(&Transmit)) {
        let Self { client, net, .. } = self;
        net.route_with(client, |net, _, t| {
            each(&t);
            net.inject(client_addr(index(t.remote, ALIAS_BASE)), SERVER, t.payload);
        });
    }

    /// Takes what arrived for the server into its inbox (before its timed turn; the
    /// clients have read theirs).
    pub(crate) fn take_inbox(&mut self) {
        while let Some(a) = self.net.pop_arrival() {
            assert_eq!(a.to, SERVER, "the clients read before the server");
            self.inbox.push(a);
        }
    }

    /// The server reads its inbox, oldest first (timed).
    pub(crate) fn server_read(&mut self) {
        let now = self.net.now();
        for a in self.inbox.drain(..) {
            self.server.handle_datagram(now, a.from, &a.payload);
        }
    }

    /// The server's transmits into its outbox (timed).
    pub(crate) fn server_transmits(&mut self) {
        while let Some(t) = self.server.poll_transmit() {
            self.outbox.push(t);
        }
    }

    /// Carries the outbox onto the links, each datagram from the alias its client knows
    /// the server by to the client host; `each` sees each first.
    pub(crate) fn carry_outbox(&mut self, mut each: impl FnMut(&Transmit)) {
        for t in self.outbox.drain(..) {
            each(&t);
            self.net.inject(alias(index(t.remote, CLIENT_BASE)), CLIENTS, t.payload);
        }
    }
}
