//! What a configuration implies: the checks of [`HostConfig::validate`] and
//! [`PeerConfig::validate`], and the memory bound of [`PeerConfig::memory_limit`],
//! computed in one place from the layers' own constants. `config.rs` holds only the
//! vocabulary, so every layer may read a configuration without importing this module,
//! and this module imports the layers it measures (downward only).

use crate::channel::{self, Channel, DELIVERED_SIZE, DELIVERED_WORDS, ENTRY_OVERHEAD, ENTRY_SIZE, MAX_DISPLACED};
use crate::config::{ConfigError, HostConfig, PeerConfig};
use crate::peer::Session;
use crate::seq::{PACKET_WINDOW, WINDOW_ACK_SPACING};
use crate::transfer::{SPAN_COST, span_limit};
use crate::wire::{self, MAX_MTU, MIN_MTU};

impl PeerConfig {
    /// An upper bound on the heap one connected peer holds under this configuration,
    /// whatever the remote sends (the host fuzzer checks it after every step). It adds:
    ///
    /// - reassembly: `max_reassembly_bytes`, plus per channel three packets and a datagram
    ///   that progress may take beyond it (`docs/protocol.md`, Memory), the receive
    ///   queues' slots, and per unordered channel a bitmap of one window (8 KiB);
    /// - sending: what the channels' `max_queued_bytes` allow, the queue slots for it, and
    ///   the record of frames in flight, which may span twice the messages those limits
    ///   allow (a frame the remote never acknowledges holds its place);
    /// - a few kilobytes of fixed structures.
    ///
    /// With the defaults the bound is about 142 MB (108 MB sending, 34 MB receiving): the
    /// sending side fills only with the application's own sends (4 channels of 4 MiB, and
    /// their bookkeeping), the receiving side is what a remote alone can make a peer hold
    /// (reassembly). Lower the limits to serve many peers: `max_peers` times this bounds
    /// every peer's share of a host.
    pub fn memory_limit(&self) -> usize {
        memory_bound(self)
    }

    /// The most connect data ([`Host::connect_with`](crate::Host::connect_with)) this side
    /// can send: [`MAX_CONNECT_DATA`](wire::MAX_CONNECT_DATA) (256 bytes), or less when
    /// the `mtu` leaves a request less room (70 bytes at the smallest, 128, less the
    /// bitmap of unordered channels if there are any: one byte per 8 channels).
    pub fn max_connect_data(&self) -> usize {
        self.connect_data_room(self.mtu)
    }

    /// [`PeerConfig::max_connect_data`] at a datagram size of `mtu`.
    pub(crate) fn connect_data_room(&self, mtu: usize) -> usize {
        let bitmap = crate::peer::unordered(self).wire_len(self.channels.len().min(255) as u8);
        mtu.saturating_sub(wire::REQUEST_OVERHEAD_MAX + bitmap).min(wire::MAX_CONNECT_DATA)
    }

    /// Checks every value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.channels.is_empty() || self.channels.len() > 255 {
            return Err(ConfigError::ChannelCount(self.channels.len()));
        }
        if !(MIN_MTU..=MAX_MTU).contains(&self.mtu) {
            return Err(ConfigError::Mtu(self.mtu));
        }
        if self.max_mtu > MAX_MTU {
            return Err(ConfigError::Mtu(self.max_mtu));
        }
        let max = wire::max_packet(self.mtu);
        if self.max_packet_size == 0 || self.max_packet_size > max {
            return Err(ConfigError::MaxPacketSize { size: self.max_packet_size, max });
        }
        if self.max_reassembly_bytes < self.mtu {
            return Err(ConfigError::ReassemblyTooSmall(self.max_reassembly_bytes));
        }
        channel::Shared::check(self)?;
        for (name, d) in [
            ("timeout", self.timeout),
            ("connect_timeout", self.connect_timeout),
            ("disconnect_timeout", self.disconnect_timeout),
            ("linger", self.linger),
            ("ping_interval", self.ping_interval),
            ("connect_retry", self.connect_retry),
        ] {
            if d.is_zero() {
                return Err(ConfigError::ZeroDuration(name));
            }
        }
        if self.initial_window == 0 {
            return Err(ConfigError::InitialWindow);
        }
        if self.ping_interval >= self.timeout {
            return Err(ConfigError::PingInterval);
        }
        Ok(())
    }
}

impl HostConfig {
    /// Checks every value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_peers == 0 || self.max_pending == 0 {
            return Err(ConfigError::NoPeers);
        }
        self.peer.validate()?;
        if let Some(s) = &self.secure {
            if s.public_addresses.len() > crate::config::MAX_SERVER_ADDRESSES {
                return Err(ConfigError::PublicAddresses(s.public_addresses.len()));
            }
            if s.private_key.is_some() && s.unix_time.is_none() {
                return Err(ConfigError::Secure("a server needs unix_time to judge token expiry"));
            }
            if s.token_memory == 0 {
                return Err(ConfigError::Secure("token_memory must be at least 1"));
            }
            // Sealing takes `SEAL_EXTRA` bytes of every datagram: what is left must be a
            // valid datagram size for the layers below.
            let mut sealed = self.peer.clone();
            sealed.mtu = sealed.mtu.saturating_sub(wire::secure::SEAL_EXTRA);
            sealed.validate().map_err(|e| match e {
                ConfigError::Mtu(_) => ConfigError::Mtu(self.peer.mtu),
                e => e,
            })?;
        }
        Ok(())
    }
}

/// An upper bound on the heap a connected peer holds under `cfg`, whatever the remote
/// does (see [`PeerConfig::memory_limit`], which documents the terms).
fn memory_bound(cfg: &PeerConfig) -> usize {
    let b = MemoryBound::of(cfg);
    b.receive + b.send + b.fixed
}

/// The terms of [`memory_bound`].
#[derive(Clone, Copy, Debug)]
struct MemoryBound {
    /// What a remote alone can make a peer hold: reassembly and receive queues.
    receive: usize,
    /// What only the application's own sends fill: send queues and the in-flight record.
    send: usize,
    /// Structures of fixed size.
    fixed: usize,
}

impl MemoryBound {
    fn of(cfg: &PeerConfig) -> Self {
        let channels = cfg.channels.len();
        let queued: usize = cfg.channels.iter().map(|c| c.max_queued_bytes).sum();
        // Datagrams as large as discovery may make them.
        let mtu = cfg.mtu.max(cfg.max_mtu);
        // A fragmented packet reserves whole granules and a bitmap of them (the granule
        // of a sealed connection, whose datagrams lose the seal's bytes, at most that).
        let granule = wire::granule_of(wire::fragment_payload(cfg.mtu).saturating_sub(wire::secure::SEAL_EXTRA));
        let bitmap = cfg.max_packet_size.div_ceil(granule).div_ceil(64) * size_of::<u64>();
        let packet = cfg.max_packet_size + mtu + bitmap + ENTRY_OVERHEAD;
        let reassembly = cfg.max_reassembly_bytes + channels * (3 * packet + mtu);
        // Entries holding data are charged their slots (twice over) within `reassembly`;
        // sentinel-only entries are not (at most N_Q / M per channel), nor the markers of
        // displaced passive packets (at most MAX_DISPLACED).
        let sentinels = channels * ((PACKET_WINDOW / WINDOW_ACK_SPACING) as usize + MAX_DISPLACED);
        // An unordered channel's bitmap of ids delivered beyond its base: its box, and one
        // window of bits, twice over for a growing queue's slack.
        let unordered = cfg.channels.iter().filter(|c| c.unordered).count();
        let bitmaps = unordered * (DELIVERED_SIZE + 2 * DELIVERED_WORDS * size_of::<u64>());
        let receive = 2 * reassembly + 2 * sentinels * ENTRY_SIZE + bitmaps;
        let send = 5 * queued + span_limit(cfg) * SPAN_COST;
        let fixed = size_of::<Session>() + channels * (size_of::<Channel>() + 2 * size_of::<usize>()) + FIXED_SLACK;
        Self { receive, send, fixed }
    }
}

/// The small structures a session holds besides its queues: acknowledgement ranges, the
/// ping ring, the queues' minimum capacities.
const FIXED_SLACK: usize = 16 << 10;

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use std::time::Duration;

    use super::*;
    use crate::config::ChannelConfig;

    /// Every place that states the memory bound of the default configuration, in one fixed
    /// wording (`phrase`, then "N MB (S MB sending, R MB receiving)"), states what
    /// `memory_limit` computes, to within 3%: the figure cannot rot when a default or a
    /// layer's bookkeeping changes.
    #[test]
    fn the_documented_memory_bound_is_the_computed_one() {
        let b = MemoryBound::of(&PeerConfig::default());
        let mb = |bytes: usize| bytes as f64 / 1e6;
        let computed = [mb(memory_bound(&PeerConfig::default())), mb(b.send), mb(b.receive)];
        // Split so that this file's own text does not match.
        let phrase = concat!("the bound is ", "about ");
        let docs = [
            ("config.rs", include_str!("config.rs")),
            ("limits.rs", include_str!("limits.rs")),
            ("docs/security.md", include_str!("../../docs/security.md")),
        ];
        for (name, text) in docs {
            // Doc comments and markdown as one line of prose.
            let flat: Vec<&str> = text
                .lines()
                .map(|l| l.trim().trim_start_matches("///").trim_start_matches("//!"))
                .flat_map(str::split_whitespace)
                .collect();
            let flat = flat.join(" ");
            let mut found = 0;
            for (at, _) in flat.match_indices(phrase) {
                let rest = &flat[at + phrase.len()..];
                let numbers: Vec<f64> = rest
                    .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .filter(|w| w.bytes().any(|c| c.is_ascii_digit()))
                    .take(3)
                    .map(|w| w.trim_end_matches('.').parse().unwrap())
                    .collect();
                let shape = format!("{} MB ({} MB sending, {} MB receiving)", numbers[0], numbers[1], numbers[2]);
                assert!(rest.starts_with(&shape), "{name}: unexpected wording after {phrase:?}: {:?}", &rest[..60]);
                for (stated, real) in numbers.iter().zip(computed) {
                    assert!(
                        (stated - real).abs() <= 0.03 * real,
                        "{name} states {stated} MB where memory_limit computes {real:.1} MB; update the docs"
                    );
                }
                found += 1;
            }
            assert!(found >= 1, "{name} no longer states the memory bound with the defaults");
        }
    }

    #[test]
    fn the_default_is_valid_and_game_ready() {
        let c = HostConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert!(c.peer.channels.len() >= 4);
        assert_eq!(c.peer.incoming_bandwidth, 0, "no bandwidth cap by default");
    }

    #[test]
    fn every_bad_value_is_named() {
        let bad = |f: fn(&mut HostConfig)| {
            let mut c = HostConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(bad(|c| c.max_peers = 0), ConfigError::NoPeers);
        assert_eq!(bad(|c| c.peer.channels.clear()), ConfigError::ChannelCount(0));
        assert_eq!(bad(|c| c.peer.channels = vec![ChannelConfig::default(); 256]), ConfigError::ChannelCount(256));
        assert_eq!(bad(|c| c.peer.mtu = 100), ConfigError::Mtu(100));
        assert_eq!(bad(|c| c.peer.mtu = 70_000), ConfigError::Mtu(70_000));
        assert!(matches!(bad(|c| c.peer.max_packet_size = 0), ConfigError::MaxPacketSize { .. }));
        assert!(matches!(bad(|c| c.peer.max_packet_size = usize::MAX), ConfigError::MaxPacketSize { .. }));
        assert_eq!(bad(|c| c.peer.max_reassembly_bytes = 10), ConfigError::ReassemblyTooSmall(10));
        let need = bad(|c| c.peer.channels[2].max_queued_bytes = 0);
        assert!(matches!(need, ConfigError::ChannelQueue { channel: 2, size: 0, need } if need > 1 << 20));
        // A queue that holds one largest packet, exactly, is enough.
        let ConfigError::ChannelQueue { need, .. } = need else { unreachable!() };
        let mut c = HostConfig::default();
        c.peer.channels[1].max_queued_bytes = need;
        assert_eq!(c.validate(), Ok(()));
        c.peer.channels[1].max_queued_bytes = need - 1;
        assert!(matches!(c.validate(), Err(ConfigError::ChannelQueue { channel: 1, .. })));
        // Smaller queues go with smaller packets.
        c.peer.max_packet_size = 1000;
        c.peer.channels[1].max_queued_bytes = 2000;
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(bad(|c| c.peer.ping_interval = c.peer.timeout), ConfigError::PingInterval);
        assert_eq!(bad(|c| c.peer.channels[3].weight = 0), ConfigError::ChannelWeight { channel: 3, weight: 0 });
        assert_eq!(bad(|c| c.peer.channels[1].weight = 256), ConfigError::ChannelWeight { channel: 1, weight: 256 });
        assert_eq!(
            bad(|c| c.peer.channels[0].unreliable_deadline = Some(Duration::ZERO)),
            ConfigError::ChannelDeadline { channel: 0 }
        );
        assert_eq!(bad(|c| c.peer.timeout = Duration::ZERO), ConfigError::ZeroDuration("timeout"));
        assert_eq!(bad(|c| c.peer.initial_window = 0), ConfigError::InitialWindow);
        assert!(bad(|c| c.peer.mtu = 5).to_string().contains("128..=65507"));
    }
}
