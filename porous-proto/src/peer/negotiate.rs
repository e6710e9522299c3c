//! Connection parameters (spec §2.3): what each side announces and what a connection
//! uses once both are known.
//!
//! The application version, the channel count and the set of unordered channels must be
//! equal; the datagram size is the smaller of both sides' (each side's own being its
//! configured `mtu`, capped by what the path to the other carries when the host was told:
//! `Host::set_path_mtu`); each direction's bandwidth is
//! the smaller of the sender's outgoing and the receiver's incoming limit (0 meaning none);
//! each direction's packet limit is the receiver's.

use crate::config::PeerConfig;
use crate::event::{DisconnectReason, Mismatch};
use crate::wire::{self, ChannelSet, ConnectRequest, Cookie, MIN_MTU, RefuseReason};

/// What one connection runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    pub(crate) mtu: usize,
    pub(crate) channels: usize,
    /// Bytes per second this side may send, 0 for no limit.
    pub(crate) send_bandwidth: u64,
    /// Largest packet this side may send.
    pub(crate) send_max_packet: usize,
    /// Largest packet this side accepts.
    pub(crate) recv_max_packet: usize,
}

/// This side's request.
pub(crate) fn request(
    cfg: &PeerConfig,
    nonce: u32,
    frame_base: u32,
    packet_base: u32,
    cookie: Option<Cookie>,
) -> ConnectRequest {
    ConnectRequest {
        nonce,
        frame_base,
        packet_base: packet_base & 0x00FF_FFFF,
        app_version: cfg.app_version,
        channels: cfg.channels.len() as u8,
        mtu: cfg.mtu as u32,
        max_packet: cfg.max_packet_size.min(u32::MAX as usize) as u32,
        bandwidth_in: cfg.incoming_bandwidth,
        bandwidth_out: cfg.outgoing_bandwidth,
        cookie,
        unordered: unordered(cfg),
    }
}

/// The channels of `cfg` that deliver unordered.
pub(crate) fn unordered(cfg: &PeerConfig) -> ChannelSet {
    cfg.channels.iter().enumerate().filter(|(_, c)| c.unordered).map(|(i, _)| i as u8).collect()
}

fn min_limit(a: u32, b: u32) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => u64::from(x),
        (a, b) => u64::from(a.min(b)),
    }
}

/// Checks the remote side's request against this side's configuration and datagram size
/// `mtu` (what its request announced: the configured one, or less on a path that carries
/// less), for a connection whose datagrams carry `extra` bytes of sealing (0 in plain
/// mode; secure mode: `wire::secure::SEAL_EXTRA`): the datagram size must leave the
/// layers below at least the smallest one, and packet limits count with what it leaves
/// them.
pub(crate) fn negotiate(
    cfg: &PeerConfig,
    mtu: usize,
    remote: &ConnectRequest,
    extra: usize,
) -> Result<Params, Mismatch> {
    if remote.app_version != cfg.app_version {
        return Err(Mismatch::AppVersion { local: cfg.app_version, remote: remote.app_version });
    }
    let channels = usize::from(remote.channels);
    if channels != cfg.channels.len() {
        return Err(Mismatch::ChannelCount { local: cfg.channels.len(), remote: channels });
    }
    if let Some(channel) = unordered(cfg).first_difference(&remote.unordered) {
        let local = cfg.channels.get(usize::from(channel)).is_some_and(|c| c.unordered);
        return Err(Mismatch::Unordered { channel: usize::from(channel), local, remote: !local });
    }
    let remote_mtu = remote.mtu as usize;
    if remote_mtu < MIN_MTU + extra {
        return Err(Mismatch::Mtu { local_min: MIN_MTU + extra, remote: remote_mtu });
    }
    let mtu = mtu.min(remote_mtu);
    let protocol_max = wire::max_packet(mtu - extra);
    Ok(Params {
        mtu,
        channels,
        send_bandwidth: min_limit(cfg.outgoing_bandwidth, remote.bandwidth_in),
        send_max_packet: (remote.max_packet as usize).min(cfg.max_packet_size).min(protocol_max),
        recv_max_packet: cfg.max_packet_size,
    })
}

/// The refusal sent for a mismatch: it carries this side's value.
pub(crate) fn refusal(m: Mismatch) -> RefuseReason {
    match m {
        Mismatch::AppVersion { local, .. } => RefuseReason::AppVersion(local),
        Mismatch::ChannelCount { local, .. } => RefuseReason::ChannelCount(local.min(255) as u8),
        Mismatch::Mtu { local_min, .. } => RefuseReason::Mtu(local_min as u32),
        Mismatch::Unordered { channel, .. } => RefuseReason::Unordered(channel.min(255) as u8),
    }
}

/// What a refusal received means to this side.
pub(crate) fn refused(cfg: &PeerConfig, r: RefuseReason) -> DisconnectReason {
    match r {
        RefuseReason::AppVersion(remote) => {
            DisconnectReason::Incompatible(Mismatch::AppVersion { local: cfg.app_version, remote })
        }
        RefuseReason::ChannelCount(remote) => DisconnectReason::Incompatible(Mismatch::ChannelCount {
            local: cfg.channels.len(),
            remote: usize::from(remote),
        }),
        RefuseReason::Mtu(min) => {
            DisconnectReason::Incompatible(Mismatch::Mtu { local_min: min as usize, remote: cfg.mtu })
        }
        RefuseReason::HostFull => DisconnectReason::HostFull,
        RefuseReason::Rejected(code) => DisconnectReason::Rejected { code },
        RefuseReason::Unordered(channel) => {
            let local = cfg.channels.get(usize::from(channel)).is_some_and(|c| c.unordered);
            DisconnectReason::Incompatible(Mismatch::Unordered { channel: usize::from(channel), local, remote: !local })
        }
        _ => DisconnectReason::NotAccepting,
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn equal_versions_and_channels_negotiate_the_smaller_limits() {
        let a = PeerConfig { mtu: 1400, outgoing_bandwidth: 50_000, max_packet_size: 1000, ..PeerConfig::default() };
        let b = PeerConfig { incoming_bandwidth: 20_000, ..PeerConfig::default() };
        let p = negotiate(&a, a.mtu, &request(&b, 1, 2, 3, None), 0).unwrap();
        assert_eq!((p.mtu, p.channels), (1200, 4));
        assert_eq!(p.send_bandwidth, 20_000);
        assert_eq!((p.send_max_packet, p.recv_max_packet), (1000, 1000));
        let q = negotiate(&b, b.mtu, &request(&a, 1, 2, 3, None), 0).unwrap();
        assert_eq!(q.send_bandwidth, 0, "b sends without limit to a, which accepts any");
        assert_eq!(q.send_max_packet, 1000, "a accepts 1000-byte packets at most");
    }

    #[test]
    fn mismatches_are_named_with_both_values() {
        let a = PeerConfig::default();
        let b = PeerConfig { app_version: 9, ..PeerConfig::default() };
        assert_eq!(
            negotiate(&a, a.mtu, &request(&b, 1, 2, 3, None), 0),
            Err(Mismatch::AppVersion { local: 0, remote: 9 })
        );
        let mut c = PeerConfig::default();
        c.channels.pop();
        assert_eq!(
            negotiate(&a, a.mtu, &request(&c, 1, 2, 3, None), 0),
            Err(Mismatch::ChannelCount { local: 4, remote: 3 })
        );
        // The refusal carries the refuser's value; the requester reads both.
        let r = refusal(Mismatch::AppVersion { local: 0, remote: 9 });
        assert_eq!(refused(&b, r), DisconnectReason::Incompatible(Mismatch::AppVersion { local: 9, remote: 0 }));
        // Unordered channels must be the same on both sides; the lowest difference is named.
        let mut d = PeerConfig::default();
        d.channels[2] = crate::config::ChannelConfig::unordered();
        d.channels[3] = crate::config::ChannelConfig::unordered();
        let mut e = d.clone();
        assert!(negotiate(&d, d.mtu, &request(&e, 1, 2, 3, None), 0).is_ok());
        e.channels[2] = crate::config::ChannelConfig::default();
        let m = Mismatch::Unordered { channel: 2, local: true, remote: false };
        assert_eq!(negotiate(&d, d.mtu, &request(&e, 1, 2, 3, None), 0), Err(m));
        assert_eq!(
            refused(&e, refusal(m)),
            DisconnectReason::Incompatible(Mismatch::Unordered { channel: 2, local: false, remote: true })
        );
        assert_eq!(m.to_string(), "channel 2 is unordered here, ordered there");
    }
}
