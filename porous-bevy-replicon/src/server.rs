//! The server side: client entities, replicon's messages in and out, disconnections.
//!
//! Invariant: `Clients` maps exactly the peers that have a client entity this backend
//! spawned and that is not despawned yet; the entity's [`ClientPeer`] names the same peer.

use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy_replicon::prelude::*;
use porous_bevy::{
    PacketReceived, PeerConnected, PeerDisconnected, PeerId, PeerMap, PorousServer, PorousSystems, SendError, Side,
};

use crate::{BackendStats, SEND_FAILED, UNAUTHORIZED, add_driver, max_message_size, mode, network_id};

/// The POROUS peer of a client entity (on the server).
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientPeer(pub PeerId);

/// When a client entity was spawned, on the server's frame clock.
#[derive(Component, Debug, Clone, Copy)]
struct ConnectedSince(Instant);

/// Each connected peer's client entity.
#[derive(Resource, Debug, Default)]
struct Clients(PeerMap<Entity>);

impl Clients {
    /// Despawns the client entity of a peer this backend has disconnected already, so
    /// that the despawn asks nothing more of the server (a second disconnection call
    /// would replace the code the client is told).
    fn forget(&mut self, commands: &mut Commands<'_, '_>, peer: PeerId, entity: Entity) {
        self.0.remove(peer);
        commands.entity(entity).try_despawn();
    }
}

/// [`RepliconPorousServerPlugin::auth_timeout`], as the systems read it.
#[derive(Resource, Debug, Clone, Copy)]
struct AuthTimeout(Option<Duration>);

/// POROUS as replicon's server backend: [`PorousServer`] carries replicon's messages. See
/// the [crate docs](crate).
#[derive(Debug, Clone, Copy)]
pub struct RepliconPorousServerPlugin {
    /// A connected client that has not been authorized (replicon's `AuthorizedClient`,
    /// given once its protocol hash matches) this long after connecting is disconnected
    /// with [`UNAUTHORIZED`](crate::UNAUTHORIZED): a POROUS connection stays up on its
    /// keepalives alone, so a peer that never speaks replicon would otherwise hold a
    /// slot for as long as it likes. `None`: never. Default: 10 s.
    pub auth_timeout: Option<Duration>,
}

impl Default for RepliconPorousServerPlugin {
    fn default() -> Self {
        Self { auth_timeout: Some(Duration::from_secs(10)) }
    }
}

impl Plugin for RepliconPorousServerPlugin {
    fn build(&self, app: &mut App) {
        add_driver(app);
        app.init_resource::<BackendStats>()
            .init_resource::<Clients>()
            .insert_resource(AuthTimeout(self.auth_timeout))
            .configure_sets(PreUpdate, ServerSystems::ReceivePackets.after(PorousSystems::Receive))
            .configure_sets(PostUpdate, ServerSystems::SendPackets.before(PorousSystems::Flush))
            .add_observer(disconnect_despawned)
            .add_systems(
                PreUpdate,
                (
                    set_running.run_if(resource_added::<PorousServer>),
                    set_stopped.run_if(resource_removed::<PorousServer>),
                    receive.run_if(resource_exists::<PorousServer>),
                )
                    .chain()
                    .in_set(ServerSystems::ReceivePackets),
            )
            .add_systems(
                PostUpdate,
                (
                    send.run_if(resource_exists::<PorousServer>).in_set(ServerSystems::SendPackets),
                    // After this frame's messages were queued, so that what replicon sent
                    // before the request is delivered before the disconnection.
                    (disconnect_by_request, expire_unauthorized)
                        .run_if(resource_exists::<PorousServer>)
                        .after(ServerSystems::SendPackets)
                        .before(PorousSystems::Flush),
                ),
            );
    }
}

fn set_running(
    mut commands: Commands<'_, '_>,
    mut state: ResMut<'_, NextState<ServerState>>,
    mut clients: ResMut<'_, Clients>,
) {
    // A server resource replaced by another: the old one's clients went with it.
    for (_, &entity) in clients.0.iter() {
        commands.entity(entity).try_despawn();
    }
    clients.0.clear();
    (*state).set_if_neq(ServerState::Running);
}

fn set_stopped(mut state: ResMut<'_, NextState<ServerState>>, mut clients: ResMut<'_, Clients>) {
    // Replicon despawns the client entities when it leaves `Running`.
    clients.0.clear();
    (*state).set_if_neq(ServerState::Stopped);
}

#[allow(clippy::too_many_arguments)] // a system: each parameter is one thing it touches
fn receive(
    mut commands: Commands<'_, '_>,
    server: Res<'_, PorousServer>,
    channels: Res<'_, RepliconChannels>,
    mut messages: ResMut<'_, ServerMessages>,
    mut clients: ResMut<'_, Clients>,
    mut stats: ResMut<'_, BackendStats>,
    mut events: (
        MessageReader<'_, '_, PeerConnected>,
        MessageReader<'_, '_, PacketReceived>,
        MessageReader<'_, '_, PeerDisconnected>,
    ),
    mut client_stats: Query<'_, '_, (&ClientPeer, &mut ConnectedClientStats)>,
) {
    let (connected, received, disconnected) = &mut events;
    let secure = server.with_core(|core| core.config().secure.is_some());
    let now = server.frame_time().unwrap_or_else(Instant::now);
    // Connections first, then packets, then disconnections: a peer that connected, sent
    // and left within one frame has its entity when its packets are sorted.
    for c in connected.read().filter(|c| c.side == Side::Server) {
        let mtu = server.peer_stats(c.peer).map_or(0, |s| s.mtu);
        let client = ConnectedClient { max_size: max_message_size(mtu, secure) };
        let entity = commands.spawn((client, network_id(c.peer, c.client_id), ClientPeer(c.peer), ConnectedSince(now)));
        clients.0.insert(c.peer, entity.id());
    }
    // Server channels come first on the wire; a client sends on client channels only.
    let (first, count) = (channels.server_channels().len(), channels.client_channels().len());
    for p in received.read().filter(|p| p.side == Side::Server) {
        let Some(channel) = p.channel.checked_sub(first).filter(|&c| c < count) else {
            stats.foreign_channel += 1;
            continue;
        };
        let Some(&entity) = clients.0.get(p.peer) else {
            stats.unknown_sender += 1;
            continue;
        };
        messages.insert_received(entity, channel, p.data.clone());
        stats.received += 1;
    }
    for d in disconnected.read().filter(|d| d.side == Side::Server) {
        if let Some(entity) = clients.0.remove(d.peer) {
            commands.entity(entity).try_despawn();
        }
    }
    for (peer, mut client) in &mut client_stats {
        if let Some(net) = server.net_stats(peer.0) {
            client.rtt = net.peer.rtt.as_secs_f64();
            client.packet_loss = net.peer.loss() * 100.0;
            client.sent_bps = net.sent_bps;
            client.received_bps = net.received_bps;
        }
    }
}

fn send(
    mut commands: Commands<'_, '_>,
    mut server: ResMut<'_, PorousServer>,
    mut clients: ResMut<'_, Clients>,
    channels: Res<'_, RepliconChannels>,
    mut messages: ResMut<'_, ServerMessages>,
    mut stats: ResMut<'_, BackendStats>,
    peers: Query<'_, '_, &ClientPeer>,
) {
    for (entity, channel, message) in messages.drain_sent() {
        let Ok(&ClientPeer(peer)) = peers.get(entity) else {
            stats.no_connection += 1;
            continue;
        };
        let Some(&kind) = channels.server_channels().get(channel) else {
            // Replicon sends on its own channels only; nothing to map this to.
            stats.foreign_channel += 1;
            continue;
        };
        let mode = mode(kind);
        match server.send(peer, channel, message, mode) {
            Ok(()) => stats.sent += 1,
            // Disconnecting: its entity goes when the disconnection is reported.
            Err(SendError::NotConnected | SendError::UnknownPeer) => stats.no_connection += 1,
            Err(_) if mode == porous_bevy::SendMode::Unreliable => stats.unreliable_refused += 1,
            Err(_) => {
                stats.reliable_refused += 1;
                server.disconnect_now_with(peer, SEND_FAILED);
                clients.forget(&mut commands, peer, entity);
            }
        }
    }
}

fn disconnect_by_request(
    mut commands: Commands<'_, '_>,
    mut server: ResMut<'_, PorousServer>,
    mut clients: ResMut<'_, Clients>,
    mut requests: MessageReader<'_, '_, DisconnectRequest>,
    peers: Query<'_, '_, &ClientPeer>,
) {
    for request in requests.read() {
        if let Ok(&ClientPeer(peer)) = peers.get(request.client) {
            // Graceful: replicon's last messages for it are delivered first.
            server.disconnect(peer);
            clients.forget(&mut commands, peer, request.client);
        } else {
            commands.entity(request.client).try_despawn();
        }
    }
}

fn expire_unauthorized(
    mut commands: Commands<'_, '_>,
    mut server: ResMut<'_, PorousServer>,
    mut clients: ResMut<'_, Clients>,
    timeout: Res<'_, AuthTimeout>,
    mut stats: ResMut<'_, BackendStats>,
    pending: Query<'_, '_, (Entity, &ClientPeer, &ConnectedSince), Without<AuthorizedClient>>,
) {
    let (Some(timeout), Some(now)) = (timeout.0, server.frame_time()) else { return };
    for (entity, &ClientPeer(peer), since) in &pending {
        if now.saturating_duration_since(since.0) >= timeout {
            stats.unauthorized += 1;
            server.disconnect_with(peer, UNAUTHORIZED);
            clients.forget(&mut commands, peer, entity);
        }
    }
}

/// A client entity the game despawned ends its connection gracefully. One this backend
/// despawned (its peer gone, or disconnected already) is no longer in `Clients` and asks
/// nothing of the server.
fn disconnect_despawned(
    remove: On<'_, '_, Remove, ConnectedClient>,
    server: Option<ResMut<'_, PorousServer>>,
    mut clients: ResMut<'_, Clients>,
    peers: Query<'_, '_, &ClientPeer>,
) {
    let Ok(&ClientPeer(peer)) = peers.get(remove.entity) else { return };
    if clients.0.get(peer) == Some(&remove.entity) {
        clients.0.remove(peer);
        if let Some(mut server) = server {
            server.disconnect(peer);
        }
    }
}
