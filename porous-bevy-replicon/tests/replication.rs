//! Replicon over POROUS: replication to two clients over loopback UDP and over the
//! simulator with loss, events both ways, disconnection and reconnection.

mod support;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use bevy::prelude::*;
use bevy_replicon::prelude::*;
use porous_bevy_replicon::porous_bevy::ClientStatus;
use porous_bevy_replicon::porous_bevy::sim::LinkConditions;
use porous_bevy_replicon::{BackendStats, DisconnectReason, PorousClient, PorousServer};
use support::{Ping, Pings, Pongs, Sim, client_app, client_entities, positions, server_app, server_position};

/// Every client holds one copy of the moving entity, at most `lag` units behind the
/// server's (a unit a frame).
fn assert_following(server: &mut App, clients: &mut [App], lag: f32) {
    let at = server_position(server);
    for (i, c) in clients.iter_mut().enumerate() {
        let copies = positions(c);
        assert_eq!(copies.len(), 1, "client {i} holds {copies:?}");
        assert!(copies[0] <= at && at - copies[0] <= lag, "client {i} at {} while the server is at {at}", copies[0]);
    }
}

#[test]
fn a_moving_entity_reaches_two_clients_over_loopback_udp() {
    let mut server = server_app(false, |config| PorousServer::bind("127.0.0.1:0", config).expect("bind"));
    let addr = server.world().resource::<PorousServer>().local_addr();
    let mut clients: Vec<App> =
        (0..2).map(|_| client_app(false, |config| PorousClient::connect(addr, config).expect("client"))).collect();
    let mut seen = vec![Vec::new(); 2];
    for _ in 0..3000 {
        server.update();
        for (c, seen) in clients.iter_mut().zip(&mut seen) {
            c.update();
            seen.extend(positions(c));
        }
        // Rates are measured over a window, so wait for one to close as well as for frames.
        let rated = clients.iter().all(|c| c.world().resource::<ClientStats>().received_bps > 0.0);
        if rated && seen.iter().all(|s| s.len() > 60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for (i, s) in seen.iter().enumerate() {
        // The copy follows: it moves, and never backwards.
        assert!(s.len() > 60, "client {i} saw {} frames of the entity", s.len());
        assert!(s.windows(2).all(|w| w[0] <= w[1]), "client {i}: {s:?}");
        assert!(s.last() > s.first(), "client {i} saw it stand still");
        let state = *clients[i].world().resource::<State<ClientState>>().get();
        assert_eq!(state, ClientState::Connected);
        let stats = *clients[i].world().resource::<ClientStats>();
        assert!(stats.rtt > 0.0 && stats.received_bps > 0.0, "{stats:?}");
    }
    assert_eq!(client_entities(&mut server).len(), 2);
    // Replicon's authorization went through: the protocol hashes arrived.
    let mut authorized = server.world_mut().query_filtered::<Entity, With<AuthorizedClient>>();
    assert_eq!(authorized.iter(server.world()).count(), 2);
}

/// A run over the simulator with 10% loss and jitter each way; returns what each client
/// held every frame and a hash of every datagram.
fn lossy_run(seed: u64) -> (Vec<Vec<Vec<f32>>>, u64, Vec<f32>) {
    let mut sim = Sim::new(seed, 2);
    let mut lossy = LinkConditions::perfect(Duration::from_millis(30));
    lossy.loss = 0.1;
    lossy.jitter = Duration::from_millis(10);
    let server = sim.server_addr;
    sim.net.with(|n| {
        for i in 0..2 {
            n.set_link_both(server, Sim::client_addr(i), lossy);
        }
        n.enable_tap();
    });
    let mut hash = DefaultHasher::new();
    let mut held = vec![Vec::new(); 2];
    for _ in 0..400 {
        sim.frame();
        for (c, held) in sim.clients.iter_mut().zip(&mut held) {
            held.push(positions(c));
        }
        sim.net.with(|n| {
            for r in n.drain_tap() {
                (r.from, r.to, &r.payload[..]).hash(&mut hash);
            }
        });
    }
    assert_following(&mut sim.server, &mut sim.clients, 40.0);
    let end = sim.clients.iter_mut().map(|c| positions(c)[0]).collect();
    (held, hash.finish(), end)
}

#[test]
fn a_moving_entity_reaches_two_clients_over_the_simulator_with_loss_deterministically() {
    let first = lossy_run(21);
    for held in &first.0 {
        let seen: Vec<f32> = held.iter().flatten().copied().collect();
        assert!(seen.len() > 300, "{} frames with the entity", seen.len());
        assert!(seen.windows(2).all(|w| w[0] <= w[1]));
    }
    assert_eq!(lossy_run(21), first, "same seed, same run: every datagram and every frame");
}

#[test]
fn events_go_both_ways() {
    let mut sim = Sim::new(8, 2);
    sim.run(30);
    for (i, c) in sim.clients.iter_mut().enumerate() {
        c.world_mut().commands().client_trigger(Ping(i as u32 * 100));
        c.world_mut().commands().client_trigger(Ping(i as u32 * 100 + 1));
    }
    sim.run(30);
    let pings = &sim.server.world().resource::<Pings>().0;
    let mut values: Vec<u32> = pings.iter().map(|p| p.1).collect();
    values.sort_unstable();
    assert_eq!(values, [0, 1, 100, 101]);
    // Each client got the answers to its own pings, in order.
    for (i, c) in sim.clients.iter().enumerate() {
        let base = i as u32 * 100;
        assert_eq!(c.world().resource::<Pongs>().0, [base, base + 1]);
    }
}

#[test]
fn a_client_disconnects_and_reconnects() {
    let mut sim = Sim::new(9, 2);
    sim.run(30);
    assert_following(&mut sim.server, &mut sim.clients, 10.0);
    assert_eq!(client_entities(&mut sim.server).len(), 2);

    sim.clients[0].world_mut().resource_mut::<PorousClient>().disconnect();
    sim.run(20);
    assert_eq!(client_entities(&mut sim.server).len(), 1, "its entity despawned");
    let state = *sim.clients[0].world().resource::<State<ClientState>>().get();
    assert_eq!(state, ClientState::Disconnected);
    assert!(positions(&mut sim.clients[0]).is_empty(), "the game forgot the copies");

    // Again, from a new port, as a new socket would be.
    let (net, server) = (sim.net.clone(), sim.server_addr);
    let again = "10.0.1.0:5001".parse().expect("addr");
    let config = support::config(&sim.clients[0]);
    sim.clients[0].insert_resource(PorousClient::sim(&net, again, server, config).expect("client"));
    sim.run(40);
    assert_eq!(client_entities(&mut sim.server).len(), 2);
    let state = *sim.clients[0].world().resource::<State<ClientState>>().get();
    assert_eq!(state, ClientState::Connected);
    assert_following(&mut sim.server, &mut sim.clients, 10.0);
    let stats = *sim.server.world().resource::<BackendStats>();
    assert_eq!(stats.reliable_refused, 0);
}

#[test]
fn a_disconnect_request_ends_the_connection_after_the_last_messages() {
    let mut sim = Sim::new(10, 1);
    sim.run(30);
    let client = client_entities(&mut sim.server)[0];
    // The answer to a ping and the disconnection in the same frame: the answer arrives.
    sim.server.world_mut().commands().server_trigger(ToClients {
        targets: SendTargets::Single(ClientId::Client(client)),
        message: support::Pong(7),
    });
    sim.server.world_mut().write_message(DisconnectRequest { client });
    sim.run(30);
    assert!(client_entities(&mut sim.server).is_empty());
    assert_eq!(sim.clients[0].world().resource::<Pongs>().0, [7]);
    let status = sim.clients[0].world().resource::<PorousClient>().status();
    assert!(matches!(status, ClientStatus::Disconnected(DisconnectReason::Remote { code: 0, .. })), "{status:?}");
}
