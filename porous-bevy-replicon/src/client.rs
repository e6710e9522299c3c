//! The client side: replicon's client state, its messages in and out, its statistics.

use bevy::prelude::*;
use bevy_replicon::prelude::*;
use porous_bevy::{ClientStatus, PacketReceived, PorousClient, PorousSystems, SendError, Side};

use crate::{BackendStats, SEND_FAILED, add_driver, mode};

/// POROUS as replicon's client backend: [`PorousClient`] carries replicon's messages.
/// See the [crate docs](crate).
#[derive(Debug, Default, Clone, Copy)]
pub struct RepliconPorousClientPlugin;

impl Plugin for RepliconPorousClientPlugin {
    fn build(&self, app: &mut App) {
        add_driver(app);
        app.init_resource::<BackendStats>()
            .configure_sets(PreUpdate, ClientSystems::ReceivePackets.after(PorousSystems::Receive))
            .configure_sets(PostUpdate, ClientSystems::SendPackets.before(PorousSystems::Flush))
            .add_systems(
                PreUpdate,
                (sync_state, receive.run_if(resource_exists::<PorousClient>))
                    .chain()
                    .in_set(ClientSystems::ReceivePackets),
            )
            .add_systems(PostUpdate, send.run_if(resource_exists::<PorousClient>).in_set(ClientSystems::SendPackets));
    }
}

/// Replicon's client state follows the resource: absent, disconnected or leaving is
/// `Disconnected`.
fn sync_state(
    client: Option<Res<'_, PorousClient>>,
    state: Res<'_, State<ClientState>>,
    mut next: ResMut<'_, NextState<ClientState>>,
) {
    let target = match client.map(|c| c.status()) {
        Some(ClientStatus::Connecting) => ClientState::Connecting,
        Some(ClientStatus::Connected) => ClientState::Connected,
        _ => ClientState::Disconnected,
    };
    if *state.get() != target {
        (*next).set_if_neq(target);
    }
}

fn receive(
    client: Res<'_, PorousClient>,
    channels: Res<'_, RepliconChannels>,
    mut messages: ResMut<'_, ClientMessages>,
    mut stats: ResMut<'_, BackendStats>,
    mut client_stats: ResMut<'_, ClientStats>,
    mut received: MessageReader<'_, '_, PacketReceived>,
) {
    let connected = client.is_connected();
    // The server sends on server channels only, which come first on the wire.
    let count = channels.server_channels().len();
    for p in received.read().filter(|p| p.side == Side::Client) {
        if !connected || Some(p.peer) != client.server() {
            // Left over from a connection that is ending: replicon has been reset.
            stats.unknown_sender += 1;
        } else if p.channel < count {
            messages.insert_received(p.channel, p.data.clone());
            stats.received += 1;
        } else {
            stats.foreign_channel += 1;
        }
    }
    if let Some(net) = client.net_stats() {
        client_stats.rtt = net.peer.rtt.as_secs_f64();
        client_stats.packet_loss = net.peer.loss() * 100.0;
        client_stats.sent_bps = net.sent_bps;
        client_stats.received_bps = net.received_bps;
    }
}

fn send(
    mut client: ResMut<'_, PorousClient>,
    channels: Res<'_, RepliconChannels>,
    mut messages: ResMut<'_, ClientMessages>,
    mut stats: ResMut<'_, BackendStats>,
) {
    let first = channels.server_channels().len();
    let connected = client.is_connected();
    for (channel, message) in messages.drain_sent() {
        let Some(&kind) = channels.client_channels().get(channel) else {
            stats.foreign_channel += 1;
            continue;
        };
        if !connected {
            stats.no_connection += 1;
            continue;
        }
        let mode = mode(kind);
        match client.send(first + channel, message, mode) {
            Ok(()) => stats.sent += 1,
            Err(SendError::NotConnected | SendError::UnknownPeer) => stats.no_connection += 1,
            Err(_) if mode == porous_bevy::SendMode::Unreliable => stats.unreliable_refused += 1,
            Err(_) => {
                // The server's view of this client would go wrong without it.
                stats.reliable_refused += 1;
                client.disconnect_now_with(SEND_FAILED);
            }
        }
    }
}
