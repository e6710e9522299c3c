//! Meeting behind NATs: an introducer that tells two players each other's public address,
//! so that they connect directly with POROUS's simultaneous open.
//!
//! Two players behind home routers cannot connect to each other by address alone: neither
//! knows the other's public address, and a router drops what arrives from an address its
//! player never sent to. A server both reach (the *introducer*) sees their public
//! addresses; once both have asked to meet under the same key, it sends each the other's.
//! Each then calls [`Host::connect`](crate::Host::connect) to that address from the same
//! host (the same socket, so the same NAT mapping the introducer saw): both send
//! requests at once, the first ones open each router's mapping towards the other, and the
//! handshake completes as a simultaneous open (`docs/protocol.md`).
//!
//! | the players' NATs | meet directly |
//! |---|---|
//! | both map endpoint-independently (one public port per player, whatever the filtering: most home routers) | yes |
//! | one symmetric (a new public port per destination: some carrier-grade and corporate NATs), the other filtering by address only | yes: the symmetric side's requests leave from a port the introducer never saw, the other NAT lets them through, and the other player takes them as an incoming connection |
//! | one symmetric, the other filtering by address and port, or both symmetric | no: each side's requests are dropped by the other's NAT and both attempts time out; relay the traffic through a server instead |
//!
//! The messages travel over an ordinary POROUS connection with the introducer, on a channel
//! the application picks ([`Message::encode`], [`Message::decode`]); [`Introducer`] is the
//! server's side, sans-IO like the rest: it holds at most `max_waiting` players waiting for
//! their partner, and trusts nothing it receives. Plain mode only for the direct
//! connection: secure mode's tokens name a server, and neither player is one.
//!
//! ```
//! use porous_proto::rendezvous::{Introducer, Message};
//! use porous_proto::PeerId;
//! # fn ids() -> (PeerId, PeerId) {
//! #     let mut h = porous_proto::Host::with_seed(porous_proto::HostConfig::default(), 1).unwrap();
//! #     let now = porous_proto::Instant::now();
//! #     (h.connect(now, "10.0.0.1:1".parse().unwrap()).unwrap(), h.connect(now, "10.0.0.2:1".parse().unwrap()).unwrap())
//! # }
//!
//! # let (alice, bob) = ids();
//! let mut introducer = Introducer::new(1_000);
//! // Each player, connected to the introducer, sends `Message::Meet` with a key they share
//! // (a match id from the game's lobby); the introducer sees their public addresses.
//! let meet = Message::Meet { key: 42 }.encode();
//! let (a, b) = ("203.0.113.7:40000".parse()?, "198.51.100.3:51000".parse()?);
//! assert!(introducer.handle(alice, a, &meet)?.is_empty(), "alice waits");
//! let intros = introducer.handle(bob, b, &meet)?;
//! // Each gets the other's address, to send on its connection with the introducer.
//! assert_eq!(intros[0], (alice, Message::Introduce { peer: b }.encode()));
//! assert_eq!(intros[1], (bob, Message::Introduce { peer: a }.encode()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};

use crate::event::PeerId;

/// What a player and the introducer say to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Message {
    /// Player to introducer: introduce me to whoever asks to meet under `key`.
    Meet {
        /// The key both players give (a match id from the game's lobby).
        key: u64,
    },
    /// Introducer to player: connect to `peer`, the other player's public address.
    Introduce {
        /// The address to connect to.
        peer: SocketAddr,
    },
}

/// Why a message was not understood.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RendezvousError {
    /// Not a message of this module: an unknown tag, or the wrong length for its tag.
    Malformed,
    /// An introduction sent to the introducer, or a meeting request to a player.
    Unexpected,
}

impl core::fmt::Display for RendezvousError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Malformed => "not a rendezvous message",
            Self::Unexpected => "a rendezvous message the receiver does not take",
        })
    }
}

impl std::error::Error for RendezvousError {}

const MEET: u8 = 1;
const INTRODUCE_V4: u8 = 2;
const INTRODUCE_V6: u8 = 3;

impl Message {
    /// The message's bytes: a tag, then `key` (u64), or the address (4 or 16 bytes of IP,
    /// then the port), little-endian.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(19);
        match self {
            Self::Meet { key } => {
                b.put_u8(MEET);
                b.put_u64_le(*key);
            }
            Self::Introduce { peer } => {
                match peer.ip() {
                    IpAddr::V4(ip) => {
                        b.put_u8(INTRODUCE_V4);
                        b.put_slice(&ip.octets());
                    }
                    IpAddr::V6(ip) => {
                        b.put_u8(INTRODUCE_V6);
                        b.put_slice(&ip.octets());
                    }
                }
                b.put_u16_le(peer.port());
            }
        }
        b.freeze()
    }

    /// Reads a message, checking its length exactly.
    pub fn decode(data: &[u8]) -> Result<Self, RendezvousError> {
        let (&tag, rest) = data.split_first().ok_or(RendezvousError::Malformed)?;
        let port = |b: &[u8]| -> Result<u16, RendezvousError> {
            b.try_into().map(u16::from_le_bytes).map_err(|_| RendezvousError::Malformed)
        };
        match (tag, rest.len()) {
            (MEET, 8) => {
                let key = rest.try_into().map(u64::from_le_bytes).map_err(|_| RendezvousError::Malformed)?;
                Ok(Self::Meet { key })
            }
            (INTRODUCE_V4, 6) => {
                let (ip, p) = rest.split_at(4);
                let ip: [u8; 4] = ip.try_into().map_err(|_| RendezvousError::Malformed)?;
                Ok(Self::Introduce { peer: SocketAddr::new(Ipv4Addr::from(ip).into(), port(p)?) })
            }
            (INTRODUCE_V6, 18) => {
                let (ip, p) = rest.split_at(16);
                let ip: [u8; 16] = ip.try_into().map_err(|_| RendezvousError::Malformed)?;
                Ok(Self::Introduce { peer: SocketAddr::new(Ipv6Addr::from(ip).into(), port(p)?) })
            }
            _ => Err(RendezvousError::Malformed),
        }
    }
}

/// The introducer's side: players waiting for their partner, by key.
///
/// Feed it every packet of its channel ([`Introducer::handle`]) and every disconnection
/// ([`Introducer::gone`]); send what `handle` returns. It holds at most `max_waiting`
/// players (beyond that the oldest waiting one is forgotten, and asks again if it still
/// waits: its connection's keepalive tells it nothing), and a player waits under one key
/// at a time.
#[derive(Debug)]
pub struct Introducer {
    /// Key -> the player waiting under it: its id, its public address, when it came (a
    /// counter, for forgetting the oldest).
    waiting: BTreeMap<u64, (PeerId, SocketAddr, u64)>,
    /// Player -> its key.
    keys: BTreeMap<PeerId, u64>,
    max_waiting: usize,
    arrivals: u64,
}

impl Introducer {
    /// An introducer holding at most `max_waiting` (at least 1) waiting players.
    pub fn new(max_waiting: usize) -> Self {
        Self { waiting: BTreeMap::new(), keys: BTreeMap::new(), max_waiting: max_waiting.max(1), arrivals: 0 }
    }

    /// A packet from player `peer`, whose public address is `remote` (as
    /// [`Host::remote_addr`](crate::Host::remote_addr) gives it): the introductions to send,
    /// none while the player waits, one to each player once two asked under the same key.
    /// A player asking again under another key waits under that one instead; one asking
    /// under its partner's key from the same address is not introduced to itself.
    pub fn handle(
        &mut self,
        peer: PeerId,
        remote: SocketAddr,
        data: &[u8],
    ) -> Result<Vec<(PeerId, Bytes)>, RendezvousError> {
        let Message::Meet { key } = Message::decode(data)? else { return Err(RendezvousError::Unexpected) };
        self.gone(peer);
        match self.waiting.remove(&key) {
            Some((other, at, _)) if other != peer => {
                self.keys.remove(&other);
                Ok(vec![
                    (other, Message::Introduce { peer: remote }.encode()),
                    (peer, Message::Introduce { peer: at }.encode()),
                ])
            }
            _ => {
                if self.waiting.len() >= self.max_waiting
                    && let Some((&oldest, &(p, _, _))) = self.waiting.iter().min_by_key(|(_, w)| w.2)
                {
                    self.waiting.remove(&oldest);
                    self.keys.remove(&p);
                }
                self.arrivals += 1;
                self.waiting.insert(key, (peer, remote, self.arrivals));
                self.keys.insert(peer, key);
                Ok(Vec::new())
            }
        }
    }

    /// Player `peer` left (or asks again): it waits no more.
    pub fn gone(&mut self, peer: PeerId) {
        if let Some(key) = self.keys.remove(&peer) {
            self.waiting.remove(&key);
        }
    }

    /// Players waiting for their partner.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn id(index: u32) -> PeerId {
        PeerId { index, generation: 0 }
    }

    #[test]
    fn messages_round_trip_and_anything_else_is_malformed() {
        for m in [
            Message::Meet { key: u64::MAX },
            Message::Introduce { peer: "203.0.113.7:40000".parse().unwrap() },
            Message::Introduce { peer: "[2001:db8::1]:9".parse().unwrap() },
        ] {
            let bytes = m.encode();
            assert_eq!(Message::decode(&bytes), Ok(m));
            assert_eq!(Message::decode(&bytes[..bytes.len() - 1]), Err(RendezvousError::Malformed));
            let mut longer = bytes.to_vec();
            longer.push(0);
            assert_eq!(Message::decode(&longer), Err(RendezvousError::Malformed));
        }
        assert_eq!(Message::decode(&[]), Err(RendezvousError::Malformed));
        assert_eq!(Message::decode(&[9; 9]), Err(RendezvousError::Malformed));
    }

    #[test]
    fn two_players_of_one_key_are_introduced_and_the_waiting_room_is_bounded() {
        let a: SocketAddr = "203.0.113.7:40000".parse().unwrap();
        let b: SocketAddr = "198.51.100.3:51000".parse().unwrap();
        let mut i = Introducer::new(2);
        let meet = |key| Message::Meet { key }.encode();
        assert!(i.handle(id(1), a, &meet(5)).unwrap().is_empty());
        // Asking again under the same key is no introduction to oneself.
        assert!(i.handle(id(1), a, &meet(5)).unwrap().is_empty());
        assert_eq!(i.waiting(), 1);
        let intros = i.handle(id(2), b, &meet(5)).unwrap();
        assert_eq!(
            intros,
            vec![(id(1), Message::Introduce { peer: b }.encode()), (id(2), Message::Introduce { peer: a }.encode())]
        );
        assert_eq!(i.waiting(), 0);
        // Three waiting under a room of two: the oldest is forgotten.
        for (n, key) in [(3, 10), (4, 11), (5, 12)] {
            assert!(i.handle(id(n), a, &meet(key)).unwrap().is_empty());
        }
        assert_eq!(i.waiting(), 2);
        assert!(i.handle(id(6), b, &meet(10)).unwrap().is_empty(), "player 3 was forgotten");
        i.gone(id(4));
        assert_eq!(i.waiting(), 2);
        assert_eq!(i.handle(id(7), b, &Message::Introduce { peer: a }.encode()), Err(RendezvousError::Unexpected));
    }
}
