//! A small replicon game for the tests: the server moves one entity, clients ping and the
//! server answers.

#![allow(dead_code, unreachable_pub)] // each test file uses part of it

use std::net::SocketAddr;
use std::time::Duration;

use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use bevy::time::TimeUpdateStrategy;
use bevy_replicon::prelude::*;
use porous_bevy_replicon::porous_bevy::sim::SimNetwork;
use porous_bevy_replicon::{HostConfig, PorousClient, PorousServer, RepliconPorousExt, RepliconPorousPlugins};
use serde::{Deserialize, Serialize};

pub const FRAME: Duration = Duration::from_micros(16_667);

/// The replicated state: where the moving entity is.
#[derive(Component, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Position(pub f32);

/// A client event: the server answers each with a [`Pong`] to that client.
#[derive(Event, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ping(pub u32);

/// A server event.
#[derive(Event, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pong(pub u32);

/// What the server saw of its clients' pings.
#[derive(Resource, Default, Debug)]
pub struct Pings(pub Vec<(Entity, u32)>);

/// What a client saw of the server's answers.
#[derive(Resource, Default, Debug)]
pub struct Pongs(pub Vec<u32>);

/// A server event with a payload of any size.
#[derive(Event, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Blob(pub Vec<u8>);

/// A replicated component of any size.
#[derive(Component, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Big(pub Vec<u8>);

/// A replicon app with the POROUS backend; `manual` runs Bevy's clock a frame a step.
pub fn app(manual: bool) -> App {
    app_with(manual, RepliconPorousPlugins)
}

/// [`app`] with the backend's plugins as given.
pub fn app_with<M>(manual: bool, backend: impl bevy::app::Plugins<M>) -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, StatesPlugin, RepliconPlugins))
        .add_plugins(backend)
        .replicate::<Position>()
        .replicate::<Big>()
        .add_client_event::<Ping>(Channel::Ordered)
        .add_server_event::<Pong>(Channel::Ordered)
        .add_server_event::<Blob>(Channel::Ordered);
    if manual {
        app.insert_resource(TimeUpdateStrategy::ManualDuration(FRAME));
    }
    app
}

/// The POROUS configuration replicon's channels need, from a finished app.
pub fn config(app: &App) -> HostConfig {
    app.world().resource::<RepliconChannels>().porous_config(HostConfig::default())
}

fn move_it(mut positions: Query<'_, '_, &mut Position, With<Replicated>>) {
    for mut p in &mut positions {
        p.0 += 1.0;
    }
}

fn answer(ping: On<'_, '_, FromClient<Ping>>, mut commands: Commands<'_, '_>, mut pings: ResMut<'_, Pings>) {
    let client = ping.client_id.entity().expect("from a client");
    pings.0.push((client, ping.message.0));
    commands.server_trigger(ToClients { targets: SendTargets::Single(ping.client_id), message: Pong(ping.message.0) });
}

fn heard(pong: On<'_, '_, Pong>, mut pongs: ResMut<'_, Pongs>) {
    pongs.0.push(pong.0);
}

/// What a game does when its client leaves: replicon leaves the replicated entities to it.
fn forget(mut commands: Commands<'_, '_>, remote: Query<'_, '_, Entity, With<Remote>>) {
    for entity in &remote {
        commands.entity(entity).despawn();
    }
}

/// A server app whose one replicated entity moves a unit per frame.
pub fn server_app(manual: bool, make: impl FnOnce(HostConfig) -> PorousServer) -> App {
    server_app_from(app(manual), make)
}

/// [`server_app`] from an app of [`app_with`].
pub fn server_app_from(mut app: App, make: impl FnOnce(HostConfig) -> PorousServer) -> App {
    app.init_resource::<Pings>().add_observer(answer).add_systems(Update, move_it);
    app.finish();
    app.cleanup();
    let server = make(config(&app));
    app.insert_resource(server);
    app.world_mut().spawn((Replicated, Position(0.0)));
    app
}

/// A client app.
pub fn client_app(manual: bool, make: impl FnOnce(HostConfig) -> PorousClient) -> App {
    let mut app = app(manual);
    app.init_resource::<Pongs>().add_observer(heard).add_systems(OnExit(ClientState::Connected), forget);
    app.finish();
    app.cleanup();
    let client = make(config(&app));
    app.insert_resource(client);
    app
}

/// The positions of the replicated entities a client holds.
pub fn positions(app: &mut App) -> Vec<f32> {
    let mut q = app.world_mut().query_filtered::<&Position, With<Remote>>();
    q.iter(app.world()).map(|p| p.0).collect()
}

/// The server's own entity's position.
pub fn server_position(app: &mut App) -> f32 {
    let mut q = app.world_mut().query_filtered::<&Position, With<Replicated>>();
    q.iter(app.world()).map(|p| p.0).next().expect("the moving entity")
}

/// The server's client entities.
pub fn client_entities(app: &mut App) -> Vec<Entity> {
    let mut q = app.world_mut().query_filtered::<Entity, With<ConnectedClient>>();
    q.iter(app.world()).collect()
}

/// A server, and clients, on one simulated network.
pub struct Sim {
    pub net: SimNetwork,
    pub server: App,
    pub server_addr: SocketAddr,
    pub clients: Vec<App>,
}

impl Sim {
    pub fn new(seed: u64, clients: usize) -> Self {
        Self::with(seed, clients, app(true), |c| c)
    }

    /// A server made from `app`, its configuration changed by `tune`.
    pub fn with(seed: u64, clients: usize, app: App, tune: impl FnOnce(HostConfig) -> HostConfig) -> Self {
        let net = SimNetwork::new(seed);
        let server_addr: SocketAddr = "10.0.0.1:5000".parse().expect("addr");
        let server = server_app_from(app, |config| PorousServer::sim(&net, server_addr, tune(config)).expect("server"));
        let mut sim = Self { net, server, server_addr, clients: Vec::new() };
        for i in 0..clients {
            sim.add_client(Self::client_addr(i));
        }
        sim
    }

    pub fn client_addr(i: usize) -> SocketAddr {
        SocketAddr::from(([10, 0, 1, i as u8], 5000))
    }

    pub fn add_client(&mut self, addr: SocketAddr) {
        let (net, server) = (&self.net, self.server_addr);
        self.clients.push(client_app(true, |config| PorousClient::sim(net, addr, server, config).expect("client")));
    }

    /// One frame of every app, the network's clock first.
    pub fn frame(&mut self) {
        self.net.advance(FRAME);
        self.server.update();
        for c in &mut self.clients {
            c.update();
        }
    }

    pub fn run(&mut self, frames: usize) {
        for _ in 0..frames {
            self.frame();
        }
    }
}
