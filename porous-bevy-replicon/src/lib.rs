//! POROUS as a [bevy_replicon](https://docs.rs/bevy_replicon) messaging backend.
//!
//! Replicon replicates a server's entities to its clients and carries their events; this
//! crate carries replicon's messages over POROUS, through `porous-bevy`'s
//! [`PorousServer`] and [`PorousClient`] resources. Insert one to start, remove it to stop:
//!
//! ```no_run
//! use bevy::{prelude::*, state::app::StatesPlugin};
//! use bevy_replicon::prelude::*;
//! use porous_bevy_replicon::{HostConfig, PorousServer, RepliconPorousExt, RepliconPorousPlugins};
//!
//! let mut app = App::new();
//! app.add_plugins((MinimalPlugins, StatesPlugin, RepliconPlugins, RepliconPorousPlugins))
//!     .add_systems(Startup, |mut commands: Commands, channels: Res<RepliconChannels>| {
//!         // One POROUS channel per replicon channel, each with its delivery guarantee.
//!         let config = channels.porous_config(HostConfig::default());
//!         commands.insert_resource(PorousServer::bind("0.0.0.0:5000", config).expect("bind"));
//!     });
//! // A client: PorousClient::connect(server_addr, channels.porous_config(HostConfig::default())).
//! ```
//!
//! # Channels
//!
//! Replicon's server channels (server to client) become POROUS channels `0..S`, its client
//! channels (client to server) channels `S..S + C`, all configured alike on both sides by
//! [`RepliconPorousExt::porous_config`] (so at most 255 in all), each with the guarantee
//! replicon asks for:
//!
//! | replicon | POROUS channel | send mode |
//! |---|---|---|
//! | `Channel::Ordered` | ordered ([`ChannelConfig::default`]) | [`SendMode::Reliable`] |
//! | `Channel::Unordered` | [`ChannelConfig::unordered`] | [`SendMode::Reliable`] |
//! | `Channel::Unreliable` | ordered, with the unreliable deadline (100 ms by default) | [`SendMode::Unreliable`] |
//!
//! An unreliable packet POROUS could not send before its deadline is dropped, never sent
//! late; one that arrives after a later packet of its channel is skipped. Replicon's
//! mutations (its one unreliable channel) tolerate both.
//!
//! # What the backend does each frame
//!
//! - `PreUpdate`, after `porous-bevy` received (`PorousSystems::Receive`), in replicon's
//!   `ReceivePackets` sets: a connected client becomes an entity with
//!   [`ConnectedClient`] (its `max_size` the largest message one datagram carries),
//!   [`NetworkId`] (the client id of its connect token in secure mode, else its peer id)
//!   and [`ClientPeer`]; a disconnected one is despawned; packets go into
//!   [`ServerMessages`] and [`ClientMessages`]; [`ConnectedClientStats`] and
//!   [`ClientStats`] are filled from the connection's [`PeerStats`](porous_bevy::PeerStats)
//!   (RTT, loss in percent, bytes per second each way); [`ServerState`] and
//!   [`ClientState`] follow the resources.
//! - `PostUpdate`, in replicon's `SendPackets` sets, before `porous-bevy` flushes: the
//!   messages replicon queued are handed to POROUS, so they leave in this frame's
//!   datagram. A [`DisconnectRequest`] (or despawning a client entity) then disconnects
//!   that client gracefully: what was queued for it is delivered first.
//!
//! # Faults
//!
//! Nothing a client sends can panic a system: a packet on a channel replicon does not
//! receive on, or from a peer with no client entity, is dropped and counted in
//! [`BackendStats`]. A reliable message POROUS refuses (larger than the connection's
//! `max_packet_size`, or a send queue full because the client stopped acknowledging)
//! would leave that client out of sync, so the client is disconnected with
//! [`SEND_FAILED`] and its entity despawned; an unreliable one is dropped and counted. A
//! client that connects but never completes replicon's authorization (it never sends the
//! protocol hash) is disconnected with [`UNAUTHORIZED`] after
//! [`RepliconPorousServerPlugin::auth_timeout`].
//!
//! # Features
//!
//! - `server`, `client` (both by default): the server and client plugins, and replicon's
//!   features of the same names.
//! - `sim`: `porous-bevy`'s simulator (`porous_bevy::sim`), for deterministic tests of a
//!   replicon game under loss.
//! - `windowed`: the renderer, window and gizmos of Bevy the `windowed` example needs.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "client")]
mod client;
#[cfg(feature = "server")]
mod server;

use bevy::app::PluginGroupBuilder;
use bevy::prelude::*;
use bevy_replicon::prelude::{Channel, RepliconChannels};
use bevy_replicon::shared::backend::connected_client::NetworkId;
pub use porous_bevy::{
    self, Bytes, ChannelConfig, DisconnectReason, HostConfig, PorousClient, PorousPlugin, PorousServer, PorousSystems,
    SendMode,
};

#[cfg(feature = "client")]
pub use client::RepliconPorousClientPlugin;
#[cfg(feature = "server")]
pub use server::{ClientPeer, RepliconPorousServerPlugin};

#[cfg(doc)]
use bevy_replicon::prelude::{
    ClientMessages, ClientState, ClientStats, ConnectedClient, ConnectedClientStats, DisconnectRequest, ServerMessages,
    ServerState,
};

/// The disconnection code a client gets ([`DisconnectReason::Remote`]) when POROUS refused
/// a reliable message for it: replicon's state on that client could no longer be kept.
pub const SEND_FAILED: u32 = 0x7270_0001;

/// The disconnection code a client gets when it did not complete replicon's authorization
/// in time ([`RepliconPorousServerPlugin::auth_timeout`]).
pub const UNAUTHORIZED: u32 = 0x7270_0002;

/// The server and client plugins (each adds `porous-bevy`'s [`PorousPlugin`] if the app
/// has none yet). Add after replicon's `RepliconPlugins`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RepliconPorousPlugins;

impl PluginGroup for RepliconPorousPlugins {
    fn build(self) -> PluginGroupBuilder {
        let group = PluginGroupBuilder::start::<Self>();
        #[cfg(feature = "server")]
        let group = group.add(RepliconPorousServerPlugin::default());
        #[cfg(feature = "client")]
        let group = group.add(RepliconPorousClientPlugin);
        group
    }
}

/// Adds [`PorousPlugin`] unless the app has it already: the server and client plugins
/// both need it, once.
fn add_driver(app: &mut App) {
    if !app.is_plugin_added::<PorousPlugin>() {
        app.add_plugins(PorousPlugin);
    }
}

/// Counters of what the backend dropped: each is a fault of a peer or of the game, never
/// silent. A resource of apps with either plugin.
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendStats {
    /// Messages handed to POROUS.
    pub sent: u64,
    /// Messages handed to replicon.
    pub received: u64,
    /// Packets on a channel replicon does not receive on (a client sending on a server
    /// channel, or a channel beyond replicon's), dropped.
    pub foreign_channel: u64,
    /// Packets from a peer with no client entity (gone in the same frame), dropped.
    pub unknown_sender: u64,
    /// Unreliable messages POROUS refused (too large, queue full), dropped.
    pub unreliable_refused: u64,
    /// Reliable messages POROUS refused; each disconnected its client with
    /// [`SEND_FAILED`].
    pub reliable_refused: u64,
    /// Messages replicon queued for a client entity that has no connection, dropped.
    pub no_connection: u64,
    /// Clients disconnected for not completing authorization in time.
    pub unauthorized: u64,
}

/// The POROUS configuration of replicon's channels, for a server and its clients alike.
pub trait RepliconPorousExt {
    /// One [`ChannelConfig`] per replicon channel: the server channels, then the client
    /// channels (see the [crate docs](crate#channels)).
    fn porous_channels(&self) -> Vec<ChannelConfig>;

    /// `base` with its channels replaced by [`RepliconPorousExt::porous_channels`]. Both
    /// sides must use the same (replicon's own protocol check requires the same
    /// registrations anyway); more than 255 replicon channels in all make the host's
    /// construction fail with `ConfigError::ChannelCount`.
    fn porous_config(&self, base: HostConfig) -> HostConfig;
}

impl RepliconPorousExt for RepliconChannels {
    fn porous_channels(&self) -> Vec<ChannelConfig> {
        self.server_channels()
            .iter()
            .chain(self.client_channels())
            .map(|&channel| match channel {
                Channel::Unordered => ChannelConfig::unordered(),
                Channel::Ordered | Channel::Unreliable => ChannelConfig::default(),
            })
            .collect()
    }

    fn porous_config(&self, mut base: HostConfig) -> HostConfig {
        base.peer.channels = self.porous_channels();
        base
    }
}

/// The send mode of a replicon channel.
fn mode(channel: Channel) -> SendMode {
    match channel {
        Channel::Unreliable => SendMode::Unreliable,
        Channel::Ordered | Channel::Unordered => SendMode::Reliable,
    }
}

/// The largest message one datagram of a connection with datagram size `mtu` carries
/// whole (replicon splits its mutations to this size): the datagram less the largest
/// frame and message headers and, in secure mode, the seal.
fn max_message_size(mtu: usize, secure: bool) -> usize {
    use porous_bevy::proto::wire;
    let seal = if secure { wire::secure::SEAL_EXTRA } else { 0 };
    mtu.saturating_sub(seal).saturating_sub(wire::FRAME_OVERHEAD_MAX + wire::MESSAGE_HEADER_MAX)
}

/// A peer's replicon network id: the client id of its connect token in secure mode (the
/// same across reconnections), else its peer id (index and generation: unique while the
/// server runs).
fn network_id(peer: porous_bevy::PeerId, client_id: Option<u64>) -> NetworkId {
    NetworkId::new(client_id.unwrap_or(u64::from(peer.generation()) << 32 | u64::from(peer.index())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_of_max_size_fits_one_datagram() {
        use porous_bevy::proto::wire;
        assert_eq!(max_message_size(1200, false), wire::fragment_payload(1200));
        assert_eq!(max_message_size(1200, true), wire::fragment_payload(1200 - wire::secure::SEAL_EXTRA));
        assert_eq!(max_message_size(10, true), 0);
    }

    #[test]
    fn channels_keep_replicon_s_guarantees() {
        let channels = RepliconChannels::default();
        let configs = channels.porous_channels();
        // Updates (ordered), mutations (unreliable), then mutation acks (ordered).
        assert_eq!(configs.len(), 3);
        assert!(configs.iter().all(|c| !c.unordered));
        assert_eq!(mode(Channel::Unreliable), SendMode::Unreliable);
        assert_eq!(mode(Channel::Unordered), SendMode::Reliable);
        assert!(ChannelConfig::default().unreliable_deadline.is_some());
        let config = channels.porous_config(HostConfig::default());
        assert!(config.validate().is_ok());
    }
}
