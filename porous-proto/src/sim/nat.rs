//! NATs in front of simulated hosts: the address a host's datagrams leave with, what may
//! reach it, and a mapping's end (idle time, or a rebinding on demand).
//!
//! A host behind a [`Nat`] keeps its own (inside) address in the network; its datagrams
//! leave from a public address the NAT maps it to, and a datagram to that public address
//! reaches the host only while the mapping lives and the NAT's filter lets the sender
//! through (RFC 4787's behaviours, in the four kinds of [`NatKind`]). A mapping ends when
//! the host has sent nothing through it for the NAT's idle timeout (inbound traffic does
//! not keep it, as on most home routers), or at once with [`Network::rebind`]; the host's
//! next datagram then gets a new public port: the NAT rebinding a connection must survive.
//!
//! Invariants: `public` maps exactly the public addresses of the live and expired-but-not-
//! yet-replaced mappings to their host and key; a public IP's ports are handed out in turn
//! (from 40,000), so none is reused before the other 64,000 are.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use web_time::Instant;

use super::Network;

/// How a NAT maps a host's datagrams to public addresses and filters what comes back
/// (RFC 4787).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NatKind {
    /// Endpoint-independent mapping and filtering ("full cone"): one public port per host,
    /// whatever the destination, and anyone may send to it.
    EndpointIndependent,
    /// Endpoint-independent mapping, address-dependent filtering ("restricted cone", the
    /// common home router): one public port per host, and only IPs the host sent to may
    /// send to it.
    AddressDependent,
    /// Endpoint-independent mapping, address-and-port-dependent filtering ("port-restricted
    /// cone"): one public port per host, and only the exact addresses (IP and port) the
    /// host sent to may send to it.
    AddressAndPortDependent,
    /// Address-and-port-dependent mapping and filtering ("symmetric"): a public port of its
    /// own for each destination, and only that destination may send to it. Two peers
    /// behind such NATs cannot meet by exchanging addresses: the port a third party saw is
    /// not the port a datagram to the other peer leaves from.
    Symmetric,
}

/// A NAT in front of one host ([`Network::set_nat`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Nat {
    /// The public IP the host's datagrams leave from.
    pub public_ip: IpAddr,
    /// How it maps and filters.
    pub kind: NatKind,
    /// How long a mapping lives without an outbound datagram.
    pub idle_timeout: Duration,
}

impl Nat {
    /// A NAT of `kind` on `public_ip` whose mappings live 30 s without outbound traffic
    /// (RFC 4787 asks for at least 2 minutes; many home routers keep UDP mappings 30 s).
    pub fn new(public_ip: IpAddr, kind: NatKind) -> Self {
        Self { public_ip, kind, idle_timeout: Duration::from_secs(30) }
    }

    /// The same NAT with mappings that live `idle` without outbound traffic.
    pub fn with_idle_timeout(self, idle: Duration) -> Self {
        Self { idle_timeout: idle, ..self }
    }
}

/// What the NATs of a network did ([`Network::nat_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NatStats {
    /// Mappings made (a host's first datagram, or its first after a mapping ended).
    pub mappings: u64,
    /// Inbound datagrams dropped: no live mapping, or the filter refused the sender.
    pub filtered: u64,
}

/// One mapping: its public address, when the host last sent through it, and whom it sent
/// to (the filter's list).
#[derive(Debug)]
struct Mapping {
    public: SocketAddr,
    last_out: Instant,
    contacted: BTreeSet<SocketAddr>,
}

/// A host's NAT and its mappings, keyed by destination (`None` for endpoint-independent
/// mapping: one for all).
#[derive(Debug)]
struct Behind {
    nat: Nat,
    mappings: BTreeMap<Option<SocketAddr>, Mapping>,
}

/// Every NAT of a network.
#[derive(Debug, Default)]
pub(super) struct Nats {
    behind: BTreeMap<SocketAddr, Behind>,
    /// Public address -> (inside address, mapping key).
    public: BTreeMap<SocketAddr, (SocketAddr, Option<SocketAddr>)>,
    /// The next port of each public IP.
    next_port: BTreeMap<IpAddr, u16>,
    stats: NatStats,
}

impl Nats {
    pub(super) fn is_empty(&self) -> bool {
        self.behind.is_empty()
    }

    /// The address a datagram from `inside` to `to` leaves with at `now`, making or
    /// refreshing its mapping.
    pub(super) fn outbound(&mut self, inside: SocketAddr, to: SocketAddr, now: Instant) -> SocketAddr {
        let Some(b) = self.behind.get_mut(&inside) else { return inside };
        let key = (b.nat.kind == NatKind::Symmetric).then_some(to);
        let live = b.mappings.get(&key).is_some_and(|m| now.saturating_duration_since(m.last_out) < b.nat.idle_timeout);
        if !live {
            if let Some(old) = b.mappings.remove(&key) {
                self.public.remove(&old.public);
            }
            let port = self.next_port.entry(b.nat.public_ip).or_insert(40_000);
            let public = SocketAddr::new(b.nat.public_ip, *port);
            *port = port.wrapping_add(1).max(1024);
            self.public.insert(public, (inside, key));
            b.mappings.insert(key, Mapping { public, last_out: now, contacted: BTreeSet::new() });
            self.stats.mappings += 1;
        }
        let Some(m) = b.mappings.get_mut(&key) else { return inside };
        m.last_out = now;
        m.contacted.insert(to);
        m.public
    }

    /// Where a datagram from `from` to `to` goes at `now`: `to` itself when it is no NAT's
    /// public address, the host behind it when the mapping lives and its filter lets `from`
    /// through, nowhere (`None`, counted) otherwise.
    pub(super) fn inbound(&mut self, from: SocketAddr, to: SocketAddr, now: Instant) -> Option<SocketAddr> {
        let Some(&(inside, key)) = self.public.get(&to) else { return Some(to) };
        let passes = self.behind.get(&inside).is_some_and(|b| {
            b.mappings.get(&key).is_some_and(|m| {
                let live = now.saturating_duration_since(m.last_out) < b.nat.idle_timeout;
                let allowed = match b.nat.kind {
                    NatKind::EndpointIndependent => true,
                    NatKind::AddressDependent => m.contacted.iter().any(|c| c.ip() == from.ip()),
                    NatKind::AddressAndPortDependent | NatKind::Symmetric => m.contacted.contains(&from),
                };
                live && allowed
            })
        });
        if passes {
            Some(inside)
        } else {
            self.stats.filtered += 1;
            None
        }
    }

    fn set(&mut self, inside: SocketAddr, nat: Option<Nat>) {
        self.rebind(inside);
        match nat {
            Some(nat) => self.behind.insert(inside, Behind { nat, mappings: BTreeMap::new() }),
            None => self.behind.remove(&inside),
        };
    }

    fn rebind(&mut self, inside: SocketAddr) {
        if let Some(b) = self.behind.get_mut(&inside) {
            for m in std::mem::take(&mut b.mappings).into_values() {
                self.public.remove(&m.public);
            }
        }
    }

    fn public_addr(&self, inside: SocketAddr, to: SocketAddr) -> Option<SocketAddr> {
        let b = self.behind.get(&inside)?;
        let key = (b.nat.kind == NatKind::Symmetric).then_some(to);
        b.mappings.get(&key).map(|m| m.public)
    }
}

impl Network {
    /// Puts the host at `inside` behind `nat` (`None`: in front of none), from now on: its
    /// datagrams leave from public addresses the NAT maps it to, and only what the NAT lets
    /// through reaches it (see [`NatKind`]). Its mappings so far end.
    ///
    /// ```
    /// use std::time::Duration;
    /// use porous_proto::sim::{Nat, NatKind, Network};
    /// use porous_proto::{Event, HostConfig};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut net = Network::new(1);
    /// let (server, client) = ("10.0.0.1:7000".parse()?, "192.168.1.2:5000".parse()?);
    /// net.add_host(server, HostConfig::default())?;
    /// net.add_host(client, HostConfig::default())?;
    /// net.set_nat(client, Some(Nat::new("203.0.113.7".parse()?, NatKind::AddressDependent)));
    /// let now = net.now();
    /// net.host_mut(client).connect(now, server)?;
    /// net.run_for(Duration::from_millis(500), |_| {});
    /// // The server knows the client by its public address.
    /// let public = net.nat_addr(client, server).expect("mapped");
    /// assert_eq!(public.ip().to_string(), "203.0.113.7");
    /// assert!(net.host(server).peer_by_addr(public).is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_nat(&mut self, inside: SocketAddr, nat: Option<Nat>) {
        self.wires.nats.set(inside, nat);
    }

    /// Ends every mapping of the NAT in front of `inside` now, as a NAT does when it
    /// reboots or reassigns an idle mapping: datagrams to its old public addresses are
    /// dropped, and its next datagram leaves from a new port.
    pub fn rebind(&mut self, inside: SocketAddr) {
        self.wires.nats.rebind(inside);
    }

    /// The public address `inside`'s datagrams to `to` leave from now, if it is behind a
    /// NAT with such a mapping (an expired one included, until it is replaced).
    pub fn nat_addr(&self, inside: SocketAddr, to: SocketAddr) -> Option<SocketAddr> {
        self.wires.nats.public_addr(inside, to)
    }

    /// What the NATs of the network did so far.
    pub fn nat_stats(&self) -> NatStats {
        self.wires.nats.stats
    }
}
