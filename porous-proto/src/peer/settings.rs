//! What a peer keeps of the configuration: a validated copy of the host's `PeerConfig`
//! and each layer's shared settings derived from it, built once per host and shared by all
//! its peers, so no call into a peer needs the configuration passed along. Each layer
//! derives its own part (`transfer::Shared::of`, `channel::Shared::of`); this only holds
//! them together.

use std::sync::Arc;

use crate::channel;
use crate::config::PeerConfig;
use crate::transfer;

/// A host's connection settings, as its peers use them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The validated configuration.
    pub(crate) config: PeerConfig,
    /// What the transfer layer reads of it (the keepalive, the in-flight span limit, the
    /// channels' weights and repair switches), shared by every connection's layer.
    pub(crate) transfer: Arc<transfer::Shared>,
    /// What the sequencing layer reads of it (each channel's configuration), shared by
    /// every connection's channels.
    pub(crate) channels: Arc<channel::Shared>,
}

impl Settings {
    /// The settings of `config` (validated).
    pub(crate) fn new(config: PeerConfig) -> Self {
        let transfer = Arc::new(transfer::Shared::of(&config));
        let channels = Arc::new(channel::Shared::of(&config));
        Self { config, transfer, channels }
    }
}
