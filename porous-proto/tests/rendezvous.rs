//! Meeting behind NATs (`porous_proto::rendezvous`), in the simulator: two players behind
//! home routers, each connected to an introducer, learn each other's public address from it
//! and connect directly with a simultaneous open; their packets then go player to player,
//! not through the introducer. A symmetric NAT meets only a NAT that lets any port of an
//! address it sent to through; against one that filters by port, or another symmetric
//! NAT, both attempts time out, and the game must relay through a server
//! (`porous_proto::rendezvous`).

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::net::SocketAddr;
use std::time::Duration;

use porous_proto::rendezvous::{Introducer, Message};
use porous_proto::sim::{Nat, NatKind, Network};
use porous_proto::{DisconnectReason, Event, HostConfig, PeerId, SendMode};

const MS: Duration = Duration::from_millis(1);

fn introducer() -> SocketAddr {
    "192.0.2.1:7000".parse().unwrap()
}

fn alice() -> SocketAddr {
    "192.168.1.10:5000".parse().unwrap()
}

fn bob() -> SocketAddr {
    "10.1.0.20:6000".parse().unwrap()
}

/// How the meeting went.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Both connected to each other directly, and a packet each way arrived.
    Direct,
    /// The direct attempt failed on both sides, with these reasons.
    Failed(Vec<DisconnectReason>),
}

/// Alice behind a NAT of `a`, Bob behind one of `b`, 20 ms from the introducer and 30 ms
/// from each other (each way); they meet under one key and say hello to each other.
fn meet(seed: u64, a: NatKind, b: NatKind) -> (Outcome, Network) {
    let mut net = Network::new(seed);
    net.set_default_link(porous_proto::sim::LinkConditions::perfect(30 * MS));
    for (host, config) in
        [(introducer(), HostConfig::default()), (alice(), HostConfig::default()), (bob(), HostConfig::default())]
    {
        net.add_host(host, config).unwrap();
    }
    net.set_nat(alice(), Some(Nat::new("203.0.113.7".parse().unwrap(), a)));
    net.set_nat(bob(), Some(Nat::new("198.51.100.3".parse().unwrap(), b)));
    net.enable_trace();
    let now = net.now();
    let to_introducer = [alice(), bob()].map(|p| net.host_mut(p).connect(now, introducer()).unwrap());
    let mut room = Introducer::new(16);
    // Each player's direct connection, once made (its own attempt, or the other's arriving
    // from another port than the introducer saw, behind a symmetric NAT).
    let mut direct: [Option<PeerId>; 2] = [None, None];
    let mut hello = [false, false];
    let mut failed = Vec::new();
    net.run_until(Duration::from_secs(10), |net| {
        while let Some(e) = net.poll_event(introducer()) {
            if let Event::Received { peer, data, .. } = e {
                let remote = net.host(introducer()).remote_addr(peer).unwrap();
                for (to, m) in room.handle(peer, remote, &data).unwrap() {
                    net.host_mut(introducer()).send(to, 0, m, SendMode::Reliable).unwrap();
                }
            }
        }
        for (i, player) in [alice(), bob()].into_iter().enumerate() {
            let now = net.now();
            while let Some(e) = net.poll_event(player) {
                match e {
                    Event::Connected { peer, .. } if peer == to_introducer[i] => {
                        let meet = Message::Meet { key: 77 }.encode();
                        net.host_mut(player).send(peer, 0, meet, SendMode::Reliable).unwrap();
                    }
                    Event::Received { peer, data, .. } if peer == to_introducer[i] => {
                        let Ok(Message::Introduce { peer: other }) = Message::decode(&data) else { panic!("{data:?}") };
                        // The other player's public address: connect there, from this same host.
                        net.host_mut(player).connect(now, other).unwrap();
                    }
                    Event::Connected { peer, .. } => {
                        direct[i] = Some(peer);
                        net.host_mut(player).send(peer, 0, &b"hello"[..], SendMode::Reliable).unwrap();
                    }
                    Event::Received { peer, data, .. } if Some(peer) == direct[i] => {
                        assert_eq!(&data[..], b"hello");
                        hello[i] = true;
                    }
                    Event::Disconnected { peer, reason, .. } if peer != to_introducer[i] => failed.push(reason),
                    _ => {}
                }
            }
        }
        (hello[0] && hello[1]) || failed.len() == 2
    });
    let outcome = if hello == [true, true] { Outcome::Direct } else { Outcome::Failed(failed) };
    (outcome, net)
}

/// Datagrams that went from one player's NAT to the other's, either way.
fn between_players(net: &Network) -> usize {
    let (a, b) = ("203.0.113.7".parse().unwrap(), "198.51.100.3".parse().unwrap());
    let ips = |r: &&porous_proto::sim::TraceRecord| (r.from.ip(), r.to.ip());
    net.trace().iter().filter(|r| ips(r) == (a, b) || ips(r) == (b, a)).count()
}

#[test]
fn players_behind_home_routers_meet_directly() {
    use NatKind::{AddressAndPortDependent, AddressDependent, EndpointIndependent, Symmetric};
    let cones = [EndpointIndependent, AddressDependent, AddressAndPortDependent];
    let mut seed = 0;
    let pairs = cones.iter().flat_map(|&a| cones.map(|b| (a, b)));
    // A symmetric NAT meets one that lets any port of an address it sent to through.
    let with_symmetric =
        [(Symmetric, EndpointIndependent), (Symmetric, AddressDependent), (AddressDependent, Symmetric)];
    for (a, b) in pairs.chain(with_symmetric) {
        seed += 1;
        let (outcome, net) = meet(seed, a, b);
        assert_eq!(outcome, Outcome::Direct, "{a:?} and {b:?}");
        // The hellos went player to player, not through the introducer.
        assert!(between_players(&net) > 2, "{a:?} and {b:?}: {} datagrams between the players", between_players(&net));
    }
}

#[test]
fn behind_a_symmetric_nat_against_a_port_filter_the_players_cannot_meet_directly() {
    use NatKind::{AddressAndPortDependent, Symmetric};
    for (seed, a, b) in
        [(20, Symmetric, AddressAndPortDependent), (21, AddressAndPortDependent, Symmetric), (22, Symmetric, Symmetric)]
    {
        let (outcome, net) = meet(seed, a, b);
        assert_eq!(outcome, Outcome::Failed(vec![DisconnectReason::Timeout; 2]), "{a:?} and {b:?}");
        assert!(net.nat_stats().filtered > 0, "{a:?} and {b:?}: the NATs dropped the requests");
    }
}
