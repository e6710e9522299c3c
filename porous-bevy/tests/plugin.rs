//! The plugin in headless apps: over loopback UDP and over the simulator with loss.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::time::Duration;

use bevy_app::{App, Update};
use bevy_ecs::prelude::*;
use bevy_time::{TimePlugin, TimeUpdateStrategy};
use porous_bevy::sim::{LinkConditions, Nat, NatKind, SimNetwork};
use porous_bevy::{
    Bytes, ClientStatus, DisconnectReason, HostConfig, PacketReceived, PeerAddressChanged, PeerConnected,
    PeerDisconnected, PorousClient, PorousPlugin, PorousServer, SendMode, Side,
};

const FRAME: Duration = Duration::from_micros(16_667);

/// What an app saw of the plugin's messages.
#[derive(Resource, Default, Debug)]
struct Seen {
    connected: Vec<PeerConnected>,
    disconnected: Vec<PeerDisconnected>,
    received: Vec<PacketReceived>,
    moved: Vec<PeerAddressChanged>,
}

fn record(
    mut seen: ResMut<'_, Seen>,
    mut connected: MessageReader<'_, '_, PeerConnected>,
    mut disconnected: MessageReader<'_, '_, PeerDisconnected>,
    mut received: MessageReader<'_, '_, PacketReceived>,
    mut moved: MessageReader<'_, '_, PeerAddressChanged>,
) {
    seen.connected.extend(connected.read().cloned());
    seen.disconnected.extend(disconnected.read().cloned());
    seen.received.extend(received.read().cloned());
    seen.moved.extend(moved.read().cloned());
}

/// The server echoes every packet back on its channel, reliably.
fn echo(mut server: ResMut<'_, PorousServer>, mut received: MessageReader<'_, '_, PacketReceived>) {
    for p in received.read() {
        assert_eq!(p.side, Side::Server);
        // A peer that disconnected meanwhile refuses it (`NotConnected`): nothing to do.
        let _ = server.send(p.peer, p.channel, p.data.clone(), SendMode::Reliable);
    }
}

/// Frame counter of a client app, and what it sent.
#[derive(Resource, Default)]
struct Sent(u32);

/// A connected client sends its frame number once per frame on channel 1.
fn talk(mut client: ResMut<'_, PorousClient>, mut sent: ResMut<'_, Sent>) {
    if client.is_connected() {
        let data = Bytes::from(sent.0.to_le_bytes().to_vec());
        client.send(1, data, SendMode::Reliable).expect("send");
        sent.0 += 1;
    }
}

fn app(manual: bool) -> App {
    let mut app = App::new();
    app.add_plugins((TimePlugin, PorousPlugin)).init_resource::<Seen>().add_systems(Update, record);
    if manual {
        app.insert_resource(TimeUpdateStrategy::ManualDuration(FRAME));
    }
    app
}

fn server_app(server: PorousServer, manual: bool) -> App {
    let mut app = app(manual);
    app.insert_resource(server).add_systems(Update, echo);
    app
}

fn client_app(client: PorousClient, manual: bool) -> App {
    let mut app = app(manual);
    app.insert_resource(client)
        .init_resource::<Sent>()
        .add_systems(Update, talk.run_if(resource_exists::<PorousClient>));
    app
}

fn echoed(app: &App) -> Vec<u32> {
    let seen = app.world().resource::<Seen>();
    seen.received.iter().map(|p| u32::from_le_bytes(p.data[..].try_into().expect("4 bytes"))).collect()
}

#[test]
fn echo_over_loopback_udp() {
    let server = PorousServer::bind("127.0.0.1:0", HostConfig::default()).expect("bind");
    let server_addr = server.local_addr();
    let mut server = server_app(server, false);
    let mut clients: Vec<App> = (0..2)
        .map(|_| client_app(PorousClient::connect(server_addr, HostConfig::default()).expect("client"), false))
        .collect();

    for _ in 0..2000 {
        server.update();
        for c in &mut clients {
            c.update();
        }
        if clients.iter().all(|c| echoed(c).len() >= 30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for c in &clients {
        // Reliable on an ordered channel: every packet, once, in order.
        let got = echoed(c);
        assert!(got.len() >= 30, "{} echoes", got.len());
        assert_eq!(got, (0..got.len() as u32).collect::<Vec<_>>());
        let client = c.world().resource::<PorousClient>();
        assert_eq!(client.status(), ClientStatus::Connected);
        let stats = client.net_stats().expect("connected");
        assert!(stats.peer.transfer.bytes_received > 0);
        assert!(client.socket_stats().expect("a socket").received > 0);
    }
    let s = server.world().resource::<PorousServer>();
    assert_eq!(s.connected().count(), 2);
    let seen = server.world().resource::<Seen>();
    assert_eq!(seen.connected.len(), 2);
    assert!(seen.connected.iter().all(|c| c.side == Side::Server));
}

/// One run over the simulator: the client's echoes and a hash of every datagram's bytes.
fn sim_run(seed: u64) -> (Vec<u32>, u64, u64) {
    let net = SimNetwork::new(seed);
    let server_addr: SocketAddr = "10.0.0.1:5000".parse().expect("addr");
    let client_addr: SocketAddr = "10.0.0.2:5000".parse().expect("addr");
    let mut lossy = LinkConditions::perfect(Duration::from_millis(20));
    lossy.loss = 0.1;
    lossy.jitter = Duration::from_millis(5);
    net.with(|n| {
        n.set_link_both(server_addr, client_addr, lossy);
        n.enable_tap();
    });
    let mut server = server_app(PorousServer::sim(&net, server_addr, HostConfig::default()).expect("server"), true);
    let client = PorousClient::sim(&net, client_addr, server_addr, HostConfig::default()).expect("client");
    let mut client = client_app(client, true);
    let mut hash = DefaultHasher::new();
    let mut datagrams = 0;
    for _ in 0..300 {
        net.advance(FRAME);
        server.update();
        client.update();
        net.with(|n| {
            for r in n.drain_tap() {
                (r.from, r.to, &r.payload[..]).hash(&mut hash);
                datagrams += 1;
            }
        });
    }
    (echoed(&client), hash.finish(), datagrams)
}

#[test]
fn echo_over_the_simulator_with_loss_is_deterministic() {
    let (echoes, hash, datagrams) = sim_run(11);
    // 10% loss each way: reliable delivery repairs it, in order.
    assert!(echoes.len() > 200, "{} echoes", echoes.len());
    assert_eq!(echoes, (0..echoes.len() as u32).collect::<Vec<_>>());
    assert!(datagrams > 400);
    assert_eq!(sim_run(11), (echoes, hash, datagrams), "same seed, same run");
    assert_ne!(sim_run(12).1, hash, "another seed, other losses");
}

#[test]
fn disconnect_reports_the_reason_on_both_sides_and_a_new_client_connects() {
    let net = SimNetwork::new(3);
    let server_addr: SocketAddr = "10.0.0.1:5000".parse().expect("addr");
    let mut server = server_app(PorousServer::sim(&net, server_addr, HostConfig::default()).expect("server"), true);
    let first = PorousClient::sim(&net, "10.0.0.2:5000".parse().expect("addr"), server_addr, HostConfig::default());
    let mut client = client_app(first.expect("client"), true);
    let run = |server: &mut App, client: &mut App, frames| {
        for _ in 0..frames {
            net.advance(FRAME);
            server.update();
            client.update();
        }
    };
    run(&mut server, &mut client, 30);
    assert!(client.world().resource::<PorousClient>().is_connected());

    client.world_mut().resource_mut::<PorousClient>().disconnect_with(42);
    run(&mut server, &mut client, 30);
    let status = client.world().resource::<PorousClient>().status();
    assert!(matches!(status, ClientStatus::Disconnected(DisconnectReason::Local)), "{status:?}");
    let seen = server.world().resource::<Seen>();
    assert_eq!(seen.disconnected.len(), 1);
    assert!(
        matches!(seen.disconnected[0].reason, DisconnectReason::Remote { code: 42, .. }),
        "{:?}",
        seen.disconnected
    );
    assert_eq!(server.world().resource::<PorousServer>().connected().count(), 0);

    // Reconnecting is a new resource, on a new port as a new UDP socket would be.
    let again = PorousClient::sim(&net, "10.0.0.2:5001".parse().expect("addr"), server_addr, HostConfig::default());
    client.insert_resource(again.expect("client"));
    run(&mut server, &mut client, 60);
    assert!(client.world().resource::<PorousClient>().is_connected());
    assert_eq!(server.world().resource::<PorousServer>().connected().count(), 1);
    assert_eq!(server.world().resource::<Seen>().connected.len(), 2);
}

#[test]
fn removing_the_client_resource_tells_the_server_at_once() {
    let net = SimNetwork::new(4);
    let server_addr: SocketAddr = "10.0.0.1:5000".parse().expect("addr");
    let mut server = server_app(PorousServer::sim(&net, server_addr, HostConfig::default()).expect("server"), true);
    let c = PorousClient::sim(&net, "10.0.0.2:5000".parse().expect("addr"), server_addr, HostConfig::default());
    let mut client = client_app(c.expect("client"), true);
    for _ in 0..30 {
        net.advance(FRAME);
        server.update();
        client.update();
    }
    client.world_mut().remove_resource::<PorousClient>();
    // Well within the 10 s timeout: the disconnection was sent when the resource dropped.
    for _ in 0..10 {
        net.advance(FRAME);
        server.update();
        client.update();
    }
    let seen = server.world().resource::<Seen>();
    assert_eq!(seen.disconnected.len(), 1);
    assert!(matches!(seen.disconnected[0].reason, DisconnectReason::Remote { code: 0, .. }), "{:?}", seen.disconnected);
}

#[test]
fn a_client_that_cannot_connect_says_why_and_the_app_goes_on() {
    let net = SimNetwork::new(5);
    let mut config = HostConfig::default();
    config.peer.app_version = 2;
    let server_addr: SocketAddr = "10.0.0.1:5000".parse().expect("addr");
    let mut server = server_app(PorousServer::sim(&net, server_addr, HostConfig::default()).expect("server"), true);
    let c = PorousClient::sim(&net, "10.0.0.2:5000".parse().expect("addr"), server_addr, config);
    let mut client = client_app(c.expect("client"), true);
    for _ in 0..60 {
        net.advance(FRAME);
        server.update();
        client.update();
    }
    let status = client.world().resource::<PorousClient>().status();
    assert!(matches!(status, ClientStatus::Disconnected(DisconnectReason::Incompatible(_))), "{status:?}");
    assert_eq!(server.world().resource::<Seen>().connected.len(), 0);
}

#[test]
fn a_client_whose_nat_rebinds_keeps_its_connection_and_the_server_is_told() {
    let net = SimNetwork::new(5);
    let server_addr: SocketAddr = "10.0.0.1:5000".parse().expect("addr");
    let client_addr: SocketAddr = "192.168.1.2:5000".parse().expect("addr");
    let public_ip = "203.0.113.7".parse().expect("ip");
    net.with(|n| n.set_nat(client_addr, Some(Nat::new(public_ip, NatKind::AddressDependent))));
    let mut server = server_app(PorousServer::sim(&net, server_addr, HostConfig::default()).expect("server"), true);
    let client = PorousClient::sim(&net, client_addr, server_addr, HostConfig::default()).expect("client");
    let mut client = client_app(client, true);
    let run = |server: &mut App, client: &mut App, frames| {
        for _ in 0..frames {
            net.advance(FRAME);
            server.update();
            client.update();
        }
    };
    run(&mut server, &mut client, 60);
    let before = echoed(&client).len();
    assert!(before > 20, "{before} echoes before the rebinding");
    // Mid-stream, the NAT forgets the mapping: the client's next datagram leaves from a new
    // public port.
    net.with(|n| n.rebind(client_addr));
    run(&mut server, &mut client, 120);
    let seen = server.world().resource::<Seen>();
    let [connected] = &seen.connected[..] else { panic!("one connection: {:?}", seen.connected) };
    let [moved] = &seen.moved[..] else { panic!("one address change: {:?}", seen.moved) };
    assert_eq!((moved.side, moved.peer, moved.old), (Side::Server, connected.peer, connected.remote));
    assert_eq!(moved.new.ip(), public_ip);
    assert_ne!(moved.new, moved.old, "a new public port");
    assert!(seen.disconnected.is_empty(), "{:?}", seen.disconnected);
    // Delivery went on across the change, exactly once and in order.
    let echoes = echoed(&client);
    assert!(echoes.len() > before + 80, "{} echoes after {before}", echoes.len());
    assert_eq!(echoes, (0..echoes.len() as u32).collect::<Vec<_>>());
}
