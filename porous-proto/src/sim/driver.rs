//! The loop every harness of two or more hosts runs: for hosts the network holds
//! ([`Network::step`]) and for hosts a harness holds itself, lent to the network call by
//! call. A harness picks the time ([`Network::next_event`], or a fixed tick), moves the
//! clock ([`Network::advance_to`]), hands over what has arrived ([`Network::deliver`],
//! [`Network::deliver_held_to`] for a held link) and gives each host its turn
//! ([`Network::turn`]: it steps, what it sends goes through the harness's hook onto the
//! links, its events come back). What stays in a harness is its policy: when to step
//! which host, and what to check or change on every datagram.

use std::net::SocketAddr;
use std::time::Duration;

use web_time::Instant;

use super::Network;
use crate::{Event, Host, PeerId, Transmit};

impl Network {
    /// When the next thing happens for `hosts`, held elsewhere: the earliest of their
    /// deadlines ([`Host::poll_timeout`]) and the next datagram's arrival, never before
    /// now; `None` when nothing is due at all.
    pub fn next_event<'h>(&self, hosts: impl IntoIterator<Item = &'h Host>) -> Option<Instant> {
        let now = self.now();
        let deadline = hosts.into_iter().filter_map(|h| h.poll_timeout().map(|t| t.max(now))).min();
        match (deadline, self.next_arrival()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Hands every datagram due by now to its destination among `hosts` (each with its
    /// address), in the order they arrive; a datagram for an address with no host there
    /// is lost. Returns how many were handed over.
    pub fn deliver(&mut self, hosts: &mut [(SocketAddr, &mut Host)]) -> usize {
        let now = self.now();
        let mut handed = 0;
        while let Some(a) = self.pop_arrival() {
            if let Some((_, host)) = hosts.iter_mut().find(|(addr, _)| *addr == a.to) {
                host.handle_datagram(now, a.from, &a.payload);
                handed += 1;
            }
        }
        handed
    }

    /// Hands every datagram held on the link from `from` to `to` to `host` (the host at
    /// `to`, held elsewhere), oldest first, counted as delivered. Returns how many.
    pub fn deliver_held_to(&mut self, from: SocketAddr, to: SocketAddr, host: &mut Host) -> usize {
        let now = self.now();
        let mut handed = 0;
        for d in self.held(from, to).release_all() {
            host.handle_datagram(now, from, &d);
            handed += 1;
        }
        handed
    }

    /// One turn of `host`, held elsewhere: it steps at the network's time, then each
    /// datagram it sends goes to `out` with the network and the host (to carry it with
    /// [`Network::carry`] as it is, or to drop, alter, multiply, log or check it first).
    /// Returns the host's events, to drain. Step, transmits, events: the order of every
    /// harness's loop, and of [`Network::step`] for the hosts the network holds.
    pub fn turn<'h>(
        &mut self,
        host: &'h mut Host,
        out: impl FnMut(&mut Self, &Host, Transmit),
    ) -> impl Iterator<Item = Event> + 'h {
        host.step(self.now());
        self.route_with(host, out);
        std::iter::from_fn(move || host.poll_event())
    }

    /// Offers every datagram `host`, held elsewhere, has to send to `out` (see
    /// [`Network::turn`]); [`Network::route`] is this with [`Network::carry`].
    pub fn route_with(&mut self, host: &mut Host, mut out: impl FnMut(&mut Self, &Host, Transmit)) {
        while let Some(t) = host.poll_transmit() {
            out(self, host, t);
        }
    }

    /// Carries `t`, sent by the host at `from`, over the link to its destination (from
    /// the public address its NAT maps it to, if it is behind one: [`Network::set_nat`]):
    /// what [`Network::route`] and [`Network::step`] do with every datagram.
    pub fn carry(&mut self, from: SocketAddr, t: Transmit) {
        self.wires.send(from, t.remote, t.payload);
    }

    /// `a` connects to `b`, both held by the network (with `token` in secure mode), and
    /// the network runs until both report [`Event::Connected`], at most `limit`; every
    /// other event of either host meanwhile is dropped. Returns `a`'s id for `b` and
    /// `b`'s for `a`; `None` if the connection fails to start or to complete in time.
    pub fn establish(
        &mut self,
        (a, b): (SocketAddr, SocketAddr),
        token: Option<&[u8]>,
        limit: Duration,
    ) -> Option<(PeerId, PeerId)> {
        let now = self.now();
        let pa = match token {
            Some(t) => self.host_mut(a).connect_with_token(now, b, t).ok()?,
            None => self.host_mut(a).connect(now, b).ok()?,
        };
        let mut pb = None;
        let mut up = false;
        self.run_until(limit, |net| {
            while let Some(e) = net.poll_event(a) {
                up |= matches!(e, Event::Connected { .. });
            }
            while let Some(e) = net.poll_event(b) {
                if let Event::Connected { peer, .. } = e {
                    pb = Some(peer);
                }
            }
            up && pb.is_some()
        });
        Some((pa, pb?))
    }
}
