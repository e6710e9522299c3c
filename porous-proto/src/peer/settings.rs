//! What a peer keeps of the configuration: a validated copy of the host's `PeerConfig`
//! and what the host derived from it, built once per host and shared by all its peers,
//! so no call into a peer needs the configuration passed along.

use crate::config::PeerConfig;

/// A host's connection settings, as its peers use them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The validated configuration.
    pub(crate) config: PeerConfig,
    /// Most frames and message slots the in-flight record may span (see
    /// `TransferConfig::span_limit`), from the channels' queue limits.
    pub(crate) span_limit: usize,
}
