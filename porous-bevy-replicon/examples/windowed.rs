//! A small windowed replicon game over POROUS: every player is a dot, moved with the arrow
//! keys; the server owns the dots and replicates them.
//!
//! ```sh
//! cargo run -p porous-bevy-replicon --example windowed --features windowed -- server
//! cargo run -p porous-bevy-replicon --example windowed --features windowed -- client 127.0.0.1:5000
//! ```
//!
//! The server listens on port 5000 and shows every dot; each client shows them too and
//! sends its arrow keys to the server as a client event. The feature `windowed` brings in
//! Bevy's window, renderer and gizmos, which the crate itself never needs.

use std::net::SocketAddr;

use bevy::prelude::*;
use bevy_replicon::prelude::*;
use porous_bevy_replicon::{HostConfig, PorousClient, PorousServer, RepliconPorousExt, RepliconPorousPlugins};
use serde::{Deserialize, Serialize};

/// A player's dot, owned by the server.
#[derive(Component, Serialize, Deserialize, Clone, Copy, Debug)]
struct Dot(Vec2);

/// Which client a dot belongs to (server only).
#[derive(Component, Clone, Copy, Debug)]
struct Owner(Entity);

/// A client's arrow keys this frame.
#[derive(Event, Serialize, Deserialize, Clone, Copy, Debug)]
struct Steer(Vec2);

/// What this process is.
#[derive(Resource, Clone, Copy, Debug)]
enum Role {
    Server,
    Client(SocketAddr),
}

const SPEED: f32 = 200.0;

fn main() {
    let mut args = std::env::args().skip(1);
    let role = match (args.next().as_deref(), args.next()) {
        (Some("server"), _) => Role::Server,
        (Some("client"), addr) => match addr.unwrap_or_else(|| "127.0.0.1:5000".into()).parse() {
            Ok(addr) => Role::Client(addr),
            Err(e) => {
                eprintln!("bad server address: {e}");
                std::process::exit(2);
            }
        },
        _ => {
            eprintln!("usage: windowed server | windowed client [ADDR]");
            std::process::exit(2);
        }
    };
    App::new()
        .add_plugins((DefaultPlugins, RepliconPlugins, RepliconPorousPlugins))
        .insert_resource(role)
        .replicate::<Dot>()
        .add_client_event::<Steer>(Channel::Unreliable)
        .add_observer(spawn_dot)
        .add_observer(despawn_dot)
        .add_observer(steer_dot)
        .add_systems(Startup, start)
        .add_systems(Update, (send_keys.run_if(in_state(ClientState::Connected)), draw))
        .run();
}

fn start(mut commands: Commands<'_, '_>, role: Res<'_, Role>, channels: Res<'_, RepliconChannels>) {
    commands.spawn(Camera2d);
    let config = channels.porous_config(HostConfig::default());
    let started = match *role {
        Role::Server => PorousServer::bind("0.0.0.0:5000", config).map(|s| commands.insert_resource(s)),
        Role::Client(addr) => PorousClient::connect(addr, config).map(|c| commands.insert_resource(c)),
    };
    if let Err(e) = started {
        eprintln!("cannot start: {e}");
        std::process::exit(1);
    }
}

/// A new client gets a dot at the centre.
fn spawn_dot(add: On<'_, '_, Add, ConnectedClient>, mut commands: Commands<'_, '_>) {
    commands.spawn((Replicated, Dot(Vec2::ZERO), Owner(add.entity)));
}

/// A client that left takes its dot with it.
fn despawn_dot(
    remove: On<'_, '_, Remove, ConnectedClient>,
    mut commands: Commands<'_, '_>,
    dots: Query<'_, '_, (Entity, &Owner)>,
) {
    for (dot, owner) in &dots {
        if owner.0 == remove.entity {
            commands.entity(dot).despawn();
        }
    }
}

fn steer_dot(steer: On<'_, '_, FromClient<Steer>>, time: Res<'_, Time>, mut dots: Query<'_, '_, (&mut Dot, &Owner)>) {
    let Some(client) = steer.client_id.entity() else { return };
    for (mut dot, owner) in &mut dots {
        if owner.0 == client {
            dot.0 += steer.message.0.clamp_length_max(1.0) * SPEED * time.delta_secs();
        }
    }
}

fn send_keys(mut commands: Commands<'_, '_>, keys: Res<'_, ButtonInput<KeyCode>>) {
    let axis = |neg, pos| f32::from(u8::from(keys.pressed(pos))) - f32::from(u8::from(keys.pressed(neg)));
    let steer = Vec2::new(axis(KeyCode::ArrowLeft, KeyCode::ArrowRight), axis(KeyCode::ArrowDown, KeyCode::ArrowUp));
    if steer != Vec2::ZERO {
        commands.client_trigger(Steer(steer));
    }
}

fn draw(mut gizmos: Gizmos<'_, '_>, dots: Query<'_, '_, &Dot>) {
    for dot in &dots {
        gizmos.circle_2d(dot.0, 12.0, Color::WHITE);
    }
}
