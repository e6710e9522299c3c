//! Configuration of a [`Host`](crate::Host) and of the connections it makes.
//!
//! [`HostConfig::default()`] suits a typical game out of the box: 4 channels, 1200-byte
//! datagrams, up to 1024 peers, 1 MiB packets, no bandwidth cap (the congestion
//! controller finds the path's capacity), 10 s timeouts. Every value is checked by
//! [`HostConfig::validate`] (which [`Host::new`](crate::Host::new) calls) with an error
//! that says what to change. This module holds the vocabulary only; what a configuration
//! implies (validation, the memory bound) is computed in `limits.rs`, from the layers'
//! own constants.
//!
//! The structs are `#[non_exhaustive]`: start from the default and assign fields.
//!
//! ```
//! use porous_proto::{ChannelConfig, HostConfig, Priority};
//! let mut config = HostConfig::default();
//! config.max_peers = 64;
//! config.peer.app_version = 7;
//! config.peer.channels = vec![ChannelConfig::default(), ChannelConfig::with_priority(Priority::Low)];
//! assert!(config.validate().is_ok());
//! ```

use std::net::SocketAddr;
use std::time::Duration;
use web_time::Instant;

/// Smallest datagram size a connection may negotiate ([`PeerConfig::mtu`]).
pub const MIN_MTU: usize = 128;
/// Largest datagram size a connection may negotiate (the largest IPv4 UDP payload).
pub const MAX_MTU: usize = 65_507;

/// A channel's priority in the transfer layer's send queues: the spec's two, so the enum
/// is exhaustive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Sent before any low-priority message.
    #[default]
    High,
    /// Sent when no high-priority message waits.
    Low,
}

/// Which congestion controller a connection's sending side runs. Local to each side (not
/// negotiated): each side controls what it sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CongestionControl {
    /// Model-based (the default): estimates the path's bottleneck bandwidth and minimum
    /// round trip, paces sends at that rate and keeps the flight near their product. Random
    /// loss (Wi-Fi, mobile) does not slow it down; loss that comes with a queue does, by a
    /// bounded step per round trip. A departure from the spec (`docs/protocol.md`).
    #[default]
    Model,
    /// The spec's AIMD exactly (§3.1.4-§3.1.5): slow start, then one datagram more per
    /// window, halved on loss; unpaced. Every loss reads as congestion, so a lossy path
    /// keeps it small.
    Aimd,
}

/// Settings of one channel, local to this side (not negotiated).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelConfig {
    /// Priority of the channel's messages in the transfer layer's send queues. Default:
    /// [`Priority::High`].
    pub priority: Priority,
    /// Most bytes the channel may hold on the sending side (waiting, queued or in flight),
    /// counting each message's payload and its place in a queue (about 64 bytes, so even
    /// empty packets are bounded). Beyond it reliable and passive sends fail with
    /// [`SendError::QueueFull`](crate::SendError::QueueFull) and older unreliable packets
    /// are dropped. Bytes; default: 4 MiB (4,194,304).
    pub max_queued_bytes: usize,
    /// The channel's share of its priority when several channels have data to send: each
    /// turn of the round robin it may send `weight` datagrams' worth of bytes. 1 to 255;
    /// default: 1 (channels of one priority share equally, by bytes).
    pub weight: u32,
    /// How long an unreliable packet may wait in the send queue: one not sent by then is
    /// dropped (counted in [`TransferStats::unreliable_expired`](crate::TransferStats)),
    /// never sent late. Counted from the first call after the send that gives the host a
    /// time ([`Host::step`](crate::Host::step) or
    /// [`Host::handle_datagram`](crate::Host::handle_datagram)): `send` takes no time, and
    /// a host idle for a while would otherwise date the packet from its last call.
    /// `None`: no deadline. Default: 100 ms (six ticks at 60 Hz: a
    /// state update older than that is stale).
    pub unreliable_deadline: Option<Duration>,
    /// A newer unreliable packet replaces older ones still queued on this channel (for
    /// state snapshots where only the latest matters). Counted in
    /// [`PeerStats::unreliable_replaced`](crate::PeerStats). Default: false.
    pub latest_only: bool,
    /// Small reliable and passive packets (up to 256 bytes, whole) get one repair copy in
    /// the spare room of a later datagram that goes out anyway, or in a tail-loss probe
    /// when none does within half an RTT: a lost datagram then costs them one send interval
    /// instead of a resend timeout. Copies count in flight and are at most half the bytes
    /// sent; the receiver drops whichever arrives second. Default: true.
    pub repair: bool,
    /// The channel delivers unordered: each packet exactly once, as soon as it is complete,
    /// whatever arrived before it, so a lost packet delays no other (no head-of-line
    /// blocking). For independent messages: chat lines, events, chunks of a download.
    /// Such a channel carries reliable packets only ([`SendError::ModeNotAllowed`]
    /// otherwise); `latest_only` and `unreliable_deadline` do not apply. Both sides must
    /// agree, channel by channel: the handshake refuses a mismatch with
    /// [`Mismatch::Unordered`](crate::Mismatch::Unordered). Default: false (ordered).
    ///
    /// [`SendError::ModeNotAllowed`]: crate::SendError::ModeNotAllowed
    pub unordered: bool,
}

/// The default deadline of unreliable packets (see [`ChannelConfig::unreliable_deadline`]).
pub const DEFAULT_UNRELIABLE_DEADLINE: Duration = Duration::from_millis(100);

impl Default for ChannelConfig {
    fn default() -> Self {
        Self {
            priority: Priority::High,
            max_queued_bytes: 4 << 20,
            weight: 1,
            unreliable_deadline: Some(DEFAULT_UNRELIABLE_DEADLINE),
            latest_only: false,
            repair: true,
            unordered: false,
        }
    }
}

impl ChannelConfig {
    /// A channel with the default queue limit and the given priority.
    pub fn with_priority(priority: Priority) -> Self {
        Self { priority, ..Self::default() }
    }

    /// An unordered channel of reliable packets, otherwise default (see
    /// [`ChannelConfig::unordered`]).
    ///
    /// ```
    /// use porous_proto::{ChannelConfig, HostConfig};
    /// let mut config = HostConfig::default();
    /// // Channel 3 carries chat lines: each arrives exactly once, none waits for another.
    /// config.peer.channels[3] = ChannelConfig::unordered();
    /// assert!(config.validate().is_ok());
    /// ```
    pub fn unordered() -> Self {
        Self { unordered: true, ..Self::default() }
    }
}

/// Settings of each connection. The application version and the channel count must be
/// equal on both sides; the datagram size and bandwidths are negotiated; the rest is
/// local.
///
/// Each field states its default. Together the limits bound the memory of one connected
/// peer: [`PeerConfig::memory_limit`] (the figure with the defaults is stated at
/// [`HostConfig::max_peers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerConfig {
    /// The application's protocol version. Peers with different versions are refused with
    /// [`Mismatch::AppVersion`](crate::Mismatch::AppVersion). Default: 0.
    pub app_version: u32,
    /// The channels, 1 to 255. Both sides must have the same number. Default: 4 channels,
    /// each [`ChannelConfig::default()`].
    pub channels: Vec<ChannelConfig>,
    /// Largest datagram (UDP payload) to send and accept, 128 to 65,507 bytes. The
    /// connection uses the smaller of both sides'. Bytes; default: 1200, safe on the
    /// internet.
    pub mtu: usize,
    /// Path MTU discovery: the largest datagram (UDP payload) a connection may grow to
    /// above the negotiated `mtu`, at most 65,507 bytes; at or below `mtu`, discovery is
    /// off. Each side probes the path towards the other with padded datagrams, uses the
    /// largest size that passes, falls back to the negotiated size when the path stops
    /// carrying it (a black hole) and searches again. A side answers probes up to its own
    /// `max_mtu` only, so both sides set it for either to grow, and a path whose size an
    /// adapter fixed ([`Host::set_path_mtu`](crate::Host::set_path_mtu)) is never probed
    /// above it. 1,452 fits an Ethernet path under IPv6 (1,472 under IPv4). Fragments keep
    /// the negotiated size. Bytes; default: 0 (off; `docs/protocol.md` says why).
    pub max_mtu: usize,
    /// Largest packet this side accepts; also the largest it sends (a connection uses the
    /// smaller of both sides' limits for each direction). Bytes; default: 1 MiB
    /// (1,048,576).
    pub max_packet_size: usize,
    /// Most bytes of incomplete or undelivered packets held per peer before the receiver
    /// evicts unreliable data and holds back the sender. Bytes; default: 4 MiB
    /// (4,194,304).
    pub max_reassembly_bytes: usize,
    /// Bytes per second this side accepts, 0 for no limit. The remote sends at most this.
    /// Default: 0 (the congestion controller finds the path's capacity).
    pub incoming_bandwidth: u32,
    /// Bytes per second this side sends at most, 0 for no limit. Default: 0.
    pub outgoing_bandwidth: u32,
    /// A connection with nothing received for this long times out. Default: 10 s.
    pub timeout: Duration,
    /// A connection attempt not completed in this long times out. Default: 5 s.
    pub connect_timeout: Duration,
    /// How long a graceful disconnection may wait for its acknowledgement. Default: 3 s.
    pub disconnect_timeout: Duration,
    /// How long a disconnected peer lingers, acknowledging repeated disconnection requests
    /// and ignoring the rest, before it is deleted. Default: 3 s.
    pub linger: Duration,
    /// Interval of keepalive pings on an idle connection (pings go once per RTT while data
    /// is in flight). Must be shorter than `timeout`. Default: 500 ms.
    pub ping_interval: Duration,
    /// First interval between connection requests; doubles up to 1 s. Default: 200 ms.
    pub connect_retry: Duration,
    /// Congestion window before the first acknowledgement, in datagrams. Default: 10
    /// (RFC 6928).
    pub initial_window: usize,
    /// The congestion controller of what this side sends. Default:
    /// [`CongestionControl::Model`].
    pub congestion: CongestionControl,
}

impl Default for PeerConfig {
    fn default() -> Self {
        Self {
            app_version: 0,
            channels: vec![ChannelConfig::default(); 4],
            mtu: 1200,
            max_mtu: 0,
            max_packet_size: 1 << 20,
            max_reassembly_bytes: 4 << 20,
            incoming_bandwidth: 0,
            outgoing_bandwidth: 0,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            disconnect_timeout: Duration::from_secs(3),
            linger: Duration::from_secs(3),
            ping_interval: Duration::from_millis(500),
            connect_retry: Duration::from_millis(200),
            initial_window: 10,
            congestion: CongestionControl::Model,
        }
    }
}

/// Where sequence numbers start. `Random` (the default) is right for real use; `Fixed` lets
/// tests (yours and ours) start frame and packet ids where they like, such as just below
/// the wrap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SequenceStart {
    /// Frame ids start at the connection's random nonce, packet ids at random.
    #[default]
    Random,
    /// Frame ids start at `frame`, packet ids at `packet` (taken modulo 2^24). Made with
    /// [`SequenceStart::fixed`].
    #[non_exhaustive]
    Fixed {
        /// First frame id.
        frame: u32,
        /// First packet id of every channel.
        packet: u32,
    },
}

impl SequenceStart {
    /// Frame ids start at `frame`, packet ids at `packet` (taken modulo 2^24).
    ///
    /// ```
    /// use porous_proto::{HostConfig, SequenceStart};
    /// let mut config = HostConfig::default();
    /// // Start just below the wrap of both id spaces, to test it.
    /// config.sequence_start = SequenceStart::fixed(u32::MAX - 10, (1 << 24) - 10);
    /// ```
    pub const fn fixed(frame: u32, packet: u32) -> Self {
        Self::Fixed { frame, packet }
    }
}

/// Settings of a [`Host`](crate::Host). Each field states its default.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostConfig {
    /// Most peers at once, in any state, pending handshakes included. When the table is
    /// full, an incoming request is refused with
    /// [`DisconnectReason::HostFull`](crate::DisconnectReason::HostFull) on the requester
    /// and allocates nothing. Spoofed requests can hold at most `challenge_above` pending
    /// handshakes (for at most the connect timeout), so leave that much room above the
    /// players you expect. Default: 1024.
    ///
    /// Memory: each connected peer holds at most [`PeerConfig::memory_limit`] bytes, so
    /// `max_peers` times that bounds what the peers of a host hold. With the default
    /// [`PeerConfig`] the bound is about 142 MB (108 MB sending, 34 MB receiving) per
    /// peer: the sending part fills only with what the application itself sends
    /// (4 channels of 4 MiB queues, and the record of what is in flight), the receiving
    /// part is what a remote alone can make a peer hold (the 4 MiB reassembly budget,
    /// what progress may take beyond it, receive queues). Lower `max_queued_bytes`,
    /// `max_reassembly_bytes` and `max_packet_size` to serve many peers; a pending
    /// handshake holds about 0.6 kB.
    pub max_peers: usize,
    /// Most incoming connections still in their handshake. Each holds only its handshake
    /// state, and is kept until it completes or times out; beyond the limit a request is
    /// left unanswered for now (counted in
    /// [`HostStats::handshakes_deferred`](crate::HostStats::handshakes_deferred)) and the
    /// requester's retry gets in once a handshake completes. Default: 256.
    pub max_pending: usize,
    /// At or above this many pending handshakes the host answers requests with a stateless
    /// cookie challenge and creates peers only for requests that echo it, so spoofed
    /// sources create nothing. 0 challenges every request. Default: 64.
    pub challenge_above: usize,
    /// Whether remote hosts may connect to this one. Default: true.
    pub accept_incoming: bool,
    /// Whether the application decides on each compatible incoming request: the host
    /// reports it as [`Event::ConnectRequest`](crate::Event::ConnectRequest), with the
    /// requester's connect data, and answers only once the application calls
    /// [`Host::accept`](crate::Host::accept) or [`Host::reject`](crate::Host::reject).
    /// A request awaiting the decision is a pending handshake (it counts against
    /// `max_pending` and `max_peers`, and times out after the connect timeout). Default:
    /// false (every compatible request is answered at once).
    ///
    /// With `porous-mio`, events pass through to the application, and its `accept` and
    /// `reject` decide. The async adapters hand each request out from `Host::incoming()`
    /// as an `Incoming`, whose `accept` resolves with the connection.
    pub manual_accept: bool,
    /// Settings of every connection. Default: [`PeerConfig::default()`].
    pub peer: PeerConfig,
    /// Where sequence numbers start. Default: [`SequenceStart::Random`].
    pub sequence_start: SequenceStart,
    /// Secure mode: connect tokens and sealed datagrams ([`SecureConfig`]). `None`, the
    /// default, is plain mode (LAN games, simulations): a plain and a secure host never
    /// connect to each other.
    pub secure: Option<SecureConfig>,
    /// Whether a connected peer may change address: a datagram of the connection (verified
    /// with its keys: plain mode's keyed check, secure mode's seal) from another address of
    /// the same IP starts a path validation there, and once that address echoes the
    /// challenge the connection moves to it ([`Event::AddressChanged`](crate::Event::AddressChanged)).
    /// Until then that address gets no more bytes than it sent. A NAT that rebinds a
    /// mapping keeps the IP and changes the port; a move to another IP (one network to
    /// another) is not recognised and the connection times out. `docs/protocol.md`,
    /// address change. Default: true.
    pub address_change: bool,
}

/// Most server addresses a token may name.
pub const MAX_SERVER_ADDRESSES: usize = 32;

/// The key a backend shares with its game servers; it seals the server part of every token
/// ([`crate::token`]). Keep it secret: whoever has it can admit any client to those
/// servers. Its `Debug` output hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey([u8; 32]);

impl core::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("PrivateKey(..)")
    }
}

impl PrivateKey {
    /// A key from its 32 bytes (as stored by the backend and its servers).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The key's bytes, to store or hand to the game servers.
    pub const fn to_bytes(&self) -> [u8; 32] {
        self.0
    }

    /// A new key from `rng` (use a cryptographic generator; tests may seed one).
    pub fn generate(rng: &mut impl rand_core::Rng) -> Self {
        let mut bytes = [0; 32];
        rng.fill_bytes(&mut bytes);
        Self::from_bytes(bytes)
    }

    /// A new key from the operating system's generator.
    ///
    /// # Panics
    ///
    /// If the operating system's generator fails (see [`Host::from_entropy`](crate::Host::from_entropy)).
    #[cfg(feature = "os-random")]
    #[cfg_attr(docsrs, doc(cfg(feature = "os-random")))]
    pub fn from_entropy() -> Self {
        Self::generate(&mut rand_core::UnwrapErr(getrandom::SysRng))
    }
}

/// Secure mode (`docs/security.md`): a client connects only with a connect token from the
/// game's backend ([`crate::token`]), which the server verifies; every datagram after the
/// connection request is encrypted and authenticated (ChaCha20-Poly1305, keys from the
/// token), and replayed datagrams are dropped.
///
/// A host that only connects needs [`SecureConfig::client`]; a server also needs the
/// backend's private key, the addresses tokens name it by, and the wall-clock time at
/// some instant (the core reads no clock; it checks a token's expiry against this anchor
/// plus the `now` it is given).
///
/// ```
/// use std::time::{Instant, SystemTime, UNIX_EPOCH};
/// use porous_proto::{HostConfig, SecureConfig};
/// use porous_proto::token::PrivateKey;
///
/// let key = PrivateKey::from_bytes([7; 32]); // from the backend's configuration
/// let unix = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
/// let mut config = HostConfig::default();
/// config.secure = Some(SecureConfig::server(key, vec!["203.0.113.5:7777".parse()?], Instant::now(), unix));
/// assert!(config.validate().is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SecureConfig {
    /// The key shared with the backend that issues tokens; `None` on a host that only
    /// connects (it then ignores every connection request).
    pub private_key: Option<PrivateKey>,
    /// The addresses this host is reachable at, as tokens name them, at most
    /// [`MAX_SERVER_ADDRESSES`]: a token that names
    /// none of them is refused. A server that learns its address only once its socket is
    /// bound (port 0, a load balancer) may leave it empty and call
    /// [`Host::set_public_addresses`](crate::Host::set_public_addresses); until then it
    /// refuses every token. The adapters (`porous-mio`, `porous-async`) fill an empty list
    /// with the address they bound when that address is a specific one (not `0.0.0.0` or
    /// `::`).
    pub public_addresses: Vec<SocketAddr>,
    /// The wall-clock time, in seconds since the Unix epoch, at an instant: token expiry is
    /// judged at `unix + (now - instant)`. Required with a private key.
    pub unix_time: Option<(Instant, u64)>,
    /// How many used tokens the host remembers, to refuse one used from a second address
    /// (the oldest is forgotten first; a token is remembered until it expires unless
    /// this many newer ones push it out). About 64 bytes each. Default: 4096.
    pub token_memory: usize,
}

impl SecureConfig {
    /// Secure mode for a host that only connects (with tokens).
    pub fn client() -> Self {
        Self { private_key: None, public_addresses: Vec::new(), unix_time: None, token_memory: 4096 }
    }

    /// Secure mode for a server: the backend's key, the addresses tokens name this server
    /// by, and the Unix time (seconds) at instant `at`.
    pub fn server(private_key: PrivateKey, public_addresses: Vec<SocketAddr>, at: Instant, unix: u64) -> Self {
        Self { private_key: Some(private_key), public_addresses, unix_time: Some((at, unix)), ..Self::client() }
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            max_peers: 1024,
            max_pending: 256,
            challenge_above: 64,
            accept_incoming: true,
            manual_accept: false,
            peer: PeerConfig::default(),
            sequence_start: SequenceStart::Random,
            secure: None,
            address_change: true,
        }
    }
}

/// A configuration value out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_peers` or `max_pending` is 0.
    NoPeers,
    /// There must be between 1 and 255 channels.
    ChannelCount(usize),
    /// `mtu` outside 128..=65507.
    Mtu(usize),
    /// `max_packet_size` is 0 or spans more granules than the protocol allows at this MTU
    /// ([`crate::wire::max_packet`]).
    #[non_exhaustive]
    MaxPacketSize {
        /// The configured value.
        size: usize,
        /// The largest allowed at this MTU.
        max: usize,
    },
    /// `max_reassembly_bytes` is smaller than one datagram.
    ReassemblyTooSmall(usize),
    /// A channel's `max_queued_bytes` cannot hold one packet of `max_packet_size` (with
    /// the queue slots of its fragments), so such a send could never be queued.
    #[non_exhaustive]
    ChannelQueue {
        /// The channel.
        channel: usize,
        /// Its `max_queued_bytes`.
        size: usize,
        /// The least it must be.
        need: usize,
    },
    /// `ping_interval` is not shorter than `timeout`: an idle connection would time out
    /// between keepalives.
    PingInterval,
    /// A channel's `weight` is outside 1..=255.
    #[non_exhaustive]
    ChannelWeight {
        /// The channel.
        channel: usize,
        /// Its weight.
        weight: u32,
    },
    /// A channel's `unreliable_deadline` is zero: every unreliable packet would expire.
    #[non_exhaustive]
    ChannelDeadline {
        /// The channel.
        channel: usize,
    },
    /// A duration that must be positive is zero (names the field).
    ZeroDuration(&'static str),
    /// `initial_window` is 0.
    InitialWindow,
    /// Secure mode: a server (with a private key) lacks the Unix time, `token_memory` is
    /// zero, or public addresses were set on a host that is not a secure server (names
    /// what is wrong).
    Secure(&'static str),
    /// Secure mode: more public addresses than a connect token can name
    /// ([`MAX_SERVER_ADDRESSES`]).
    PublicAddresses(usize),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoPeers => f.write_str("max_peers and max_pending must be at least 1"),
            Self::ChannelCount(n) => write!(f, "a connection needs 1 to 255 channels, not {n}"),
            Self::Mtu(m) => write!(f, "mtu {m} is outside {MIN_MTU}..={MAX_MTU} bytes"),
            Self::MaxPacketSize { size, max } => {
                write!(f, "max_packet_size {size} must be between 1 and {max} bytes at this mtu")
            }
            Self::ReassemblyTooSmall(n) => {
                write!(f, "max_reassembly_bytes {n} is smaller than one datagram; raise it to at least the mtu")
            }
            Self::ChannelQueue { channel, size, need } => write!(
                f,
                "channel {channel}'s max_queued_bytes {size} cannot hold one packet of max_packet_size; \
                 raise it to at least {need} or lower max_packet_size"
            ),
            Self::PingInterval => f.write_str("ping_interval must be shorter than timeout"),
            Self::ChannelWeight { channel, weight } => {
                write!(f, "channel {channel} has weight {weight}; weights are 1 to 255")
            }
            Self::ChannelDeadline { channel } => write!(
                f,
                "channel {channel} has an unreliable_deadline of zero; use None for no deadline, or a positive duration"
            ),
            Self::ZeroDuration(name) => write!(f, "{name} must be longer than zero"),
            Self::InitialWindow => f.write_str("initial_window must be at least 1 datagram"),
            Self::Secure(what) => write!(f, "secure mode: {what}"),
            Self::PublicAddresses(n) => write!(
                f,
                "secure mode: {n} public addresses, more than the {} a connect token names",
                MAX_SERVER_ADDRESSES
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
