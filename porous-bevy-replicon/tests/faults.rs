//! Bad input and faults: a peer that never speaks replicon, messages larger than a
//! datagram or than the connection allows, clients that vanish mid-tick. No system
//! panics, the apps go on, the peers' entities are cleaned up.

mod support;

use std::time::Duration;

use bevy::prelude::*;
use bevy_replicon::prelude::*;
use porous_bevy_replicon::porous_bevy::{
    ClientStatus, PacketReceived, PeerId, PeerState, PorousPlugin, sim::LinkConditions,
};
use porous_bevy_replicon::{
    BackendStats, Bytes, ClientPeer, DisconnectReason, PorousClient, PorousServer, RepliconPorousClientPlugin,
    RepliconPorousPlugins, RepliconPorousServerPlugin, SEND_FAILED, SendMode, UNAUTHORIZED,
};
use support::{Big, Blob, FRAME, Sim, app_with, client_entities, positions, server_position};

fn backend_stats(app: &App) -> BackendStats {
    *app.world().resource::<BackendStats>()
}

/// The replicon clients still follow the moving entity.
fn still_following(sim: &mut Sim, clients: &[usize]) {
    let at = server_position(&mut sim.server);
    for &i in clients {
        let copies = positions(&mut sim.clients[i]);
        assert_eq!(copies.len(), 1, "client {i}: {copies:?}");
        assert!(at - copies[0] <= 10.0, "client {i} at {} while the server is at {at}", copies[0]);
    }
}

#[test]
fn a_peer_that_never_speaks_replicon_is_disconnected_and_its_entity_despawned() {
    let backend = RepliconPorousPlugins.set(RepliconPorousServerPlugin { auth_timeout: Some(Duration::from_secs(1)) });
    let mut sim = Sim::with(1, 1, app_with(true, backend), |c| c);
    // A bare POROUS client with replicon's channel configuration, and no replicon.
    let config = support::config(&sim.server);
    let addr = "10.0.2.1:5000".parse().expect("addr");
    let mut rogue = App::new();
    rogue.add_plugins((MinimalPlugins, PorousPlugin));
    rogue.insert_resource(bevy::time::TimeUpdateStrategy::ManualDuration(FRAME));
    rogue.insert_resource(PorousClient::sim(&sim.net, addr, sim.server_addr, config).expect("client"));
    let mut junk_sent = 0;
    for frame in 0..150 {
        sim.frame();
        rogue.update();
        let mut client = rogue.world_mut().resource_mut::<PorousClient>();
        if client.is_connected() && frame % 10 == 0 {
            // Junk on a server channel (a client may not send there), and nothing else.
            client.send(0, Bytes::from_static(b"\xff\xff\xff"), SendMode::Reliable).expect("queued");
            junk_sent += 1;
        }
    }
    assert!(junk_sent > 0);
    let stats = backend_stats(&sim.server);
    assert_eq!(stats.unauthorized, 1);
    assert!(stats.foreign_channel >= 1, "{stats:?}");
    assert_eq!(client_entities(&mut sim.server).len(), 1, "only the replicon client is left");
    let status = rogue.world().resource::<PorousClient>().status();
    assert!(
        matches!(status, ClientStatus::Disconnected(DisconnectReason::Remote { code: UNAUTHORIZED, .. })),
        "{status:?}"
    );
    still_following(&mut sim, &[0]);
}

#[test]
fn junk_on_a_replicon_channel_does_not_stop_the_server() {
    let mut sim = Sim::new(2, 1);
    let config = support::config(&sim.server);
    let addr = "10.0.2.1:5000".parse().expect("addr");
    let mut rogue = App::new();
    rogue.add_plugins((MinimalPlugins, PorousPlugin));
    rogue.insert_resource(bevy::time::TimeUpdateStrategy::ManualDuration(FRAME));
    rogue.insert_resource(PorousClient::sim(&sim.net, addr, sim.server_addr, config.clone()).expect("client"));
    // The client channels follow the server channels: junk on every one of them.
    let first = sim.server.world().resource::<RepliconChannels>().server_channels().len();
    for frame in 0..120 {
        sim.frame();
        rogue.update();
        let mut client = rogue.world_mut().resource_mut::<PorousClient>();
        if client.is_connected() && frame % 5 == 0 {
            for channel in first..config.peer.channels.len() {
                let junk = Bytes::from(vec![frame as u8; 1 + frame % 40]);
                let _ = client.send(channel, junk, SendMode::Reliable);
            }
        }
    }
    // Replicon read the junk and the app went on; the good client still follows.
    assert!(backend_stats(&sim.server).received > 0);
    still_following(&mut sim, &[0]);
}

#[test]
fn a_component_larger_than_a_datagram_still_replicates() {
    let mut sim = Sim::new(3, 2);
    let big = sim.server.world_mut().spawn((Replicated, Big(vec![1; 3000]))).id();
    sim.run(30);
    for round in 2..6u8 {
        sim.server.world_mut().entity_mut(big).insert(Big(vec![round; 3000]));
        sim.run(10);
        for (i, c) in sim.clients.iter_mut().enumerate() {
            let mut q = c.world_mut().query::<&Big>();
            let copies: Vec<&Big> = q.iter(c.world()).collect();
            assert_eq!(copies.len(), 1, "client {i}");
            assert_eq!(copies[0].0, vec![round; 3000], "client {i} in round {round}");
        }
    }
    // Each mutation went as one message several datagrams long, sent unreliably.
    let max = sim.server.world_mut().query::<&ConnectedClient>().iter(sim.server.world()).map(|c| c.max_size).min();
    assert!(max.is_some_and(|m| m < 3000 && m > 1000), "{max:?}");
    assert_eq!(backend_stats(&sim.server).unreliable_refused, 0);
}

#[test]
fn a_message_larger_than_the_connection_allows_disconnects_only_that_client() {
    let mut sim = Sim::with(4, 2, support::app(true), |mut c| {
        c.peer.max_packet_size = 16 << 10;
        c
    });
    sim.run(30);
    let victim = client_entities(&mut sim.server)[0];
    let victim_peer = sim.server.world().get::<ClientPeer>(victim).expect("a peer").0;
    sim.server.world_mut().commands().server_trigger(ToClients {
        targets: SendTargets::Single(ClientId::Client(victim)),
        message: Blob(vec![9; 64 << 10]),
    });
    sim.run(30);
    let stats = backend_stats(&sim.server);
    assert_eq!(stats.reliable_refused, 1, "{stats:?}");
    let left: Vec<Entity> = client_entities(&mut sim.server);
    assert_eq!(left.len(), 1);
    assert_ne!(left[0], victim);
    assert!(
        sim.server
            .world()
            .resource::<PorousServer>()
            .peer_stats(victim_peer)
            .is_none_or(|s| { s.state != PeerState::Connected })
    );
    // The victim was told why; the other client goes on.
    let told: Vec<ClientStatus> = sim.clients.iter().map(|c| c.world().resource::<PorousClient>().status()).collect();
    let refused =
        |s: &ClientStatus| matches!(s, ClientStatus::Disconnected(DisconnectReason::Remote { code: SEND_FAILED, .. }));
    assert!(told.iter().any(refused), "{told:?}");
    let other = told.iter().position(|s| *s == ClientStatus::Connected).expect("one still connected");
    still_following(&mut sim, &[other]);
}

/// Ends a client's connection in the middle of the server's frame (`Update`), after
/// replicon decided what to send it and before the send.
#[derive(Resource)]
struct CutMidTick(Option<PeerId>);

fn cut(mut cut: ResMut<'_, CutMidTick>, mut server: ResMut<'_, PorousServer>) {
    if let Some(peer) = cut.0.take() {
        server.disconnect_now(peer);
    }
}

#[test]
fn a_client_cut_mid_tick_is_cleaned_up() {
    let mut sim = Sim::new(5, 2);
    sim.server.insert_resource(CutMidTick(None)).add_systems(Update, cut);
    sim.run(30);
    let victim = client_entities(&mut sim.server)[0];
    let peer = sim.server.world().get::<ClientPeer>(victim).expect("a peer").0;
    sim.server.world_mut().resource_mut::<CutMidTick>().0 = Some(peer);
    sim.run(10);
    assert_eq!(client_entities(&mut sim.server).len(), 1);
    assert!(sim.server.world().get_entity(victim).is_err(), "its entity despawned");
    // Replicon's messages for it that frame were counted, not sent.
    assert!(backend_stats(&sim.server).no_connection > 0);
    let told: Vec<ClientStatus> = sim.clients.iter().map(|c| c.world().resource::<PorousClient>().status()).collect();
    let other = told.iter().position(|s| *s == ClientStatus::Connected).expect("one still connected");
    still_following(&mut sim, &[other]);
}

#[test]
fn a_client_that_vanishes_times_out_and_is_cleaned_up() {
    let mut sim = Sim::new(6, 2);
    sim.run(30);
    // The client's machine is gone: its link goes down (so its last word, the
    // disconnection its resource sends when dropped, is lost), its app no longer runs.
    let gone = sim.clients.remove(0);
    let addr = gone.world().resource::<PorousClient>().local_addr();
    sim.net.with(|n| {
        let mut down = LinkConditions::default();
        down.down = true;
        n.set_link_both(addr, sim.server_addr, down);
    });
    drop(gone);
    sim.run(30);
    assert_eq!(client_entities(&mut sim.server).len(), 2, "not yet: no word of it for 0.5 s");
    // The default timeout: nothing heard for 10 s.
    sim.run(11 * 60);
    assert_eq!(client_entities(&mut sim.server).len(), 1);
    still_following(&mut sim, &[0]);
}

#[test]
fn a_client_plugin_without_a_server_resource_waits() {
    // Replicon's client with the backend and no resource: nothing runs, nothing panics.
    let mut app = app_with(true, RepliconPorousClientPlugin);
    app.finish();
    app.cleanup();
    for _ in 0..10 {
        app.update();
    }
    assert_eq!(*app.world().resource::<State<ClientState>>().get(), ClientState::Disconnected);
    assert!(app.world().resource::<Messages<PacketReceived>>().is_empty());
}
