//! What a peer keeps of the configuration: a validated copy of the host's `PeerConfig`
//! and what the host derived from it, built once per host and shared by all its peers,
//! so no call into a peer needs the configuration passed along.

use std::sync::Arc;

use crate::config::PeerConfig;
use crate::limits::span_limit;
use crate::transfer;

/// A host's connection settings, as its peers use them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The validated configuration.
    pub(crate) config: PeerConfig,
    /// What the transfer layer reads of it (the keepalive, the in-flight span limit, the
    /// channels' weights and repair switches), shared by every connection's layer.
    pub(crate) transfer: Arc<transfer::Shared>,
}

impl Settings {
    /// The settings of `config` (validated).
    pub(crate) fn new(config: PeerConfig) -> Self {
        let mut shared = transfer::Shared::new(config.channels.len());
        shared.ping_interval = config.ping_interval;
        // Most frames and message slots the in-flight record may span, from the
        // channels' queue limits.
        shared.span_limit = span_limit(&config);
        shared.weights = config.channels.iter().map(|c| c.weight).collect();
        shared.repair = config.channels.iter().map(|c| c.repair).collect();
        Self { config, transfer: Arc::new(shared) }
    }
}
