//! What a [`Host`](crate::Host) tells the application, and the errors of its calls.

use std::net::SocketAddr;

use bytes::Bytes;

/// How a packet is delivered (spec §2.4).
///
/// On an ordered channel (the default) every mode keeps order: nothing is delivered twice
/// or after a later packet of its channel. An unordered channel
/// ([`ChannelConfig::unordered`](crate::ChannelConfig::unordered)) takes `Reliable` only
/// and delivers each packet as soon as it is complete.
///
/// The spec defines exactly these three modes, so the enum is exhaustive: a `match`
/// needs no `_` arm (a new mode would be a new wire version, a breaking release).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum SendMode {
    /// Resent until acknowledged; the channel stalls until it is delivered.
    Reliable,
    /// Sent once; delivered if it arrives in time, skipped otherwise.
    Unreliable,
    /// Resent until acknowledged, but the channel does not stall for it: if a later packet
    /// of the channel is delivered first, this one is skipped.
    ///
    /// Not "reliable without order" (that is an unordered channel): passive is for state
    /// where each packet supersedes the ones before and the last must get through. While
    /// a channel streams, newer packets overtake lost ones and passive delivers about what
    /// unreliable does; when the stream stops, its last packet is resent until it arrives,
    /// where an unreliable one could be lost for good.
    ///
    /// ```
    /// # use porous_proto::{Host, HostConfig, SendMode, PeerId};
    /// # fn door(host: &mut Host, peer: PeerId, open: bool) -> Result<(), porous_proto::SendError> {
    /// // A door sends its state on every change. Opened, closed, opened in quick
    /// // succession, the other side may see only the last "opened", but it will see it,
    /// // and never a stale "closed" after it.
    /// host.send(peer, 2, bytes::Bytes::from(vec![u8::from(open)]), SendMode::Passive)
    /// # }
    /// ```
    Passive,
}

/// Identifies a peer of a host. It carries a generation, so an id kept after its peer was
/// deleted never reaches a later peer that reuses the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl PeerId {
    /// The slot index: small, dense, reused after the peer is gone. Handy to index an
    /// application's own per-peer table alongside [`PeerId::generation`];
    /// [`PeerMap`](crate::PeerMap) is such a table.
    pub fn index(self) -> u32 {
        self.index
    }

    /// How many peers used this slot before.
    pub fn generation(self) -> u32 {
        self.generation
    }
}

impl core::fmt::Display for PeerId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "peer#{}.{}", self.index, self.generation)
    }
}

/// A datagram for the application to send on its UDP socket.
///
/// `#[non_exhaustive]`: a later version may add what a socket layer can use (such as a
/// segment size for GSO) without breaking code that reads these two fields; build one with
/// [`Transmit::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transmit {
    /// Where to send it.
    pub remote: SocketAddr,
    /// The UDP payload.
    pub payload: Bytes,
}

impl Transmit {
    /// A datagram of `payload` for `remote` (to hand a socket layer such as `porous-udp`
    /// datagrams of your own).
    pub fn new(remote: SocketAddr, payload: Bytes) -> Self {
        Self { remote, payload }
    }
}

/// Something that happened to a connection.
///
/// Events gain fields and variants in minor releases (`docs/architecture.md`, Stable
/// shapes): match each variant with `..` and keep a `_` arm.
///
/// ```
/// # use porous_proto::Event;
/// fn describe(event: &Event) -> String {
///     match event {
///         Event::Connected { peer, remote, .. } => format!("{peer} connected from {remote}"),
///         Event::Received { channel, data, .. } => format!("{} bytes on channel {channel}", data.len()),
///         Event::Disconnected { reason, .. } => format!("gone: {reason}"),
///         _ => String::new(),
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A connection is established (either side may have started it).
    #[non_exhaustive]
    Connected {
        /// The peer.
        peer: PeerId,
        /// Its address.
        remote: SocketAddr,
        /// The connect data the remote sent with its request
        /// ([`Host::connect_with`](crate::Host::connect_with)); empty if it sent none. A
        /// listening host always gets it. Connect data travels only in requests, never in
        /// replies, so the side that connected gets the other's only when both connected to
        /// each other at once and one of the other's requests arrived first.
        ///
        /// Secure mode: on the server, the user data of the client's connect token, as the
        /// backend wrote it (authenticated; a client cannot change it); empty on the client.
        data: Bytes,
        /// Secure mode: on the server, the client id of the client's connect token, as the
        /// backend wrote it. `None` in plain mode and on the client.
        client_id: Option<u64>,
    },
    /// A remote host asks to connect, and the application decides
    /// ([`HostConfig::manual_accept`](crate::HostConfig::manual_accept)): call
    /// [`Host::accept`](crate::Host::accept) or [`Host::reject`](crate::Host::reject)
    /// with `peer`. Until then the request holds only a pending handshake's state and
    /// is left unanswered (the requester's retries make no further event); unanswered for
    /// the connect timeout, it ends with `Disconnected { reason: Timeout }`.
    ///
    /// The request is not authenticated: until `Connected`, `remote` may be spoofed and
    /// `data` is only what someone sent from there. Verify tickets before trusting them,
    /// and set [`HostConfig::challenge_above`](crate::HostConfig::challenge_above) to 0
    /// if every requester must first prove it receives at `remote`.
    #[non_exhaustive]
    ConnectRequest {
        /// The id the peer keeps if accepted.
        peer: PeerId,
        /// Its address (unproven).
        remote: SocketAddr,
        /// The connect data it sent ([`Host::connect_with`](crate::Host::connect_with)),
        /// at most [`MAX_CONNECT_DATA`](crate::wire::MAX_CONNECT_DATA) bytes. Secure mode:
        /// its token's user data, verified.
        data: Bytes,
        /// Secure mode: its token's client id, verified (the token is the backend's; the
        /// address is still unproven until `Connected`). `None` in plain mode.
        client_id: Option<u64>,
    },
    /// A packet arrived.
    #[non_exhaustive]
    Received {
        /// The peer that sent it.
        peer: PeerId,
        /// The channel it came on.
        channel: usize,
        /// How the sender sent it: lets a consumer that must shed load drop unreliable
        /// packets only.
        mode: SendMode,
        /// The packet.
        data: Bytes,
    },
    /// The remote's datagrams come from a new address, which proved it receives there (it
    /// echoed a path challenge): the connection goes on from `new`, and everything for the
    /// peer goes there from now on ([`Host::remote_addr`](crate::Host::remote_addr) says
    /// so). A NAT that rebound the remote's mapping, a phone that moved from one network
    /// to another. See [`HostConfig::address_change`](crate::HostConfig::address_change).
    #[non_exhaustive]
    AddressChanged {
        /// The peer.
        peer: PeerId,
        /// The address it had.
        old: SocketAddr,
        /// The address it has now.
        new: SocketAddr,
    },
    /// A connection ended, or a connection attempt failed. The id is dead afterwards.
    #[non_exhaustive]
    Disconnected {
        /// The peer.
        peer: PeerId,
        /// Why.
        reason: DisconnectReason,
    },
}

/// Why a connection ended.
///
/// Match with `..` in `Remote` and `Rejected` and keep a `_` arm; to compare with a
/// reason, [`DisconnectReason::remote`] and [`DisconnectReason::rejected`] build those
/// two, and [`DisconnectReason::code`] reads their code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DisconnectReason {
    /// This side called [`Host::disconnect`](crate::Host::disconnect) or
    /// [`Host::disconnect_now`](crate::Host::disconnect_now). After `disconnect`, every
    /// packet sent before it was acknowledged (or, unreliable, sent).
    Local,
    /// This side called [`Host::disconnect`](crate::Host::disconnect), but packets it had
    /// sent were still unacknowledged when the connection ended (the flush took longer
    /// than the timeout, or the remote stopped answering): some may never have arrived.
    FlushTimeout,
    /// The remote side disconnected, with the code its application gave
    /// ([`Host::disconnect_with`](crate::Host::disconnect_with); 0 from
    /// [`Host::disconnect`](crate::Host::disconnect)).
    #[non_exhaustive]
    Remote {
        /// The remote application's code.
        code: u32,
    },
    /// The remote host's application rejected the connection request
    /// ([`Host::reject`](crate::Host::reject)), with its code.
    #[non_exhaustive]
    Rejected {
        /// The remote application's code.
        code: u32,
    },
    /// Nothing was heard from the remote side for the configured timeout (or the
    /// connection attempt took longer than the connect timeout).
    Timeout,
    /// The two sides' parameters are incompatible.
    Incompatible(Mismatch),
    /// The remote host has no room for another peer.
    HostFull,
    /// The remote host does not accept connections.
    NotAccepting,
    /// The remote host still holds an older connection from this address; it will time
    /// out there, after which connecting again succeeds. On the listening side: a request
    /// the application was asked about gave way to a newer attempt from the same address,
    /// one that proved it receives there (reported as a request of its own).
    Stale,
    /// The remote side acknowledged data it cannot have received (trying to keep this
    /// side's congestion window open); this side ended the connection.
    Misbehaving,
    /// The transport under the connection closed without a POROUS disconnection: the
    /// adapter reported it with [`Host::close_path`](crate::Host::close_path) (a
    /// WebTransport session ended: the browser tab closed, or the server closed the
    /// session). Nothing more can be sent or received.
    TransportClosed,
}

/// A parameter on which the two sides of a connection disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mismatch {
    /// Application versions differ.
    #[non_exhaustive]
    AppVersion {
        /// This side's.
        local: u32,
        /// The remote side's.
        remote: u32,
    },
    /// Channel counts differ.
    #[non_exhaustive]
    ChannelCount {
        /// This side's.
        local: usize,
        /// The remote side's.
        remote: usize,
    },
    /// The remote side's datagram size is below this side's minimum.
    #[non_exhaustive]
    Mtu {
        /// This side's minimum.
        local_min: usize,
        /// The remote side's.
        remote: usize,
    },
    /// One side's channel delivers unordered and the other's does not
    /// ([`ChannelConfig::unordered`](crate::ChannelConfig::unordered)); the lowest such
    /// channel.
    #[non_exhaustive]
    Unordered {
        /// The channel.
        channel: usize,
        /// Whether it is unordered on this side.
        local: bool,
        /// Whether it is unordered on the remote side.
        remote: bool,
    },
}

impl DisconnectReason {
    /// [`DisconnectReason::Remote`] with `code`: to compare with a reason the library
    /// reported (the variant is `#[non_exhaustive]`, so it cannot be written out).
    ///
    /// ```
    /// # use porous_proto::DisconnectReason;
    /// # let reason = DisconnectReason::remote(7);
    /// assert_eq!(reason, DisconnectReason::remote(7));
    /// ```
    pub const fn remote(code: u32) -> Self {
        Self::Remote { code }
    }

    /// [`DisconnectReason::Rejected`] with `code`, to compare with a reported reason.
    pub const fn rejected(code: u32) -> Self {
        Self::Rejected { code }
    }

    /// The remote application's code: `Some` for [`DisconnectReason::Remote`] and
    /// [`DisconnectReason::Rejected`], `None` for every other reason.
    ///
    /// ```
    /// # use porous_proto::DisconnectReason;
    /// fn kicked(reason: DisconnectReason) -> bool {
    ///     matches!(reason, DisconnectReason::Remote { .. }) && reason.code() == Some(7)
    /// }
    /// assert!(!kicked(DisconnectReason::Timeout));
    /// ```
    pub fn code(&self) -> Option<u32> {
        match *self {
            Self::Remote { code } | Self::Rejected { code } => Some(code),
            _ => None,
        }
    }
}

impl core::fmt::Display for DisconnectReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Local => f.write_str("disconnected by this side"),
            Self::FlushTimeout => {
                f.write_str("disconnected by this side before everything sent was acknowledged; some may be lost")
            }
            Self::Remote { code: 0 } => f.write_str("disconnected by the remote side"),
            Self::Remote { code } => write!(f, "disconnected by the remote side (code {code})"),
            Self::Rejected { code } => write!(f, "refused: the remote application rejected the request (code {code})"),
            Self::Timeout => f.write_str("timed out: nothing heard from the remote side"),
            Self::Incompatible(m) => write!(f, "incompatible: {m}"),
            Self::HostFull => f.write_str("refused: the remote host is full"),
            Self::NotAccepting => f.write_str("refused: the remote host does not accept connections"),
            Self::Stale => f.write_str("refused: the remote still holds an older connection from this address; retry"),
            Self::Misbehaving => f.write_str("ended: the remote acknowledged data it never received"),
            Self::TransportClosed => f.write_str("ended: the transport under the connection closed"),
        }
    }
}

impl core::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::AppVersion { local, remote } => write!(f, "application version {local} here, {remote} there"),
            Self::ChannelCount { local, remote } => write!(f, "{local} channels here, {remote} there"),
            Self::Mtu { local_min, remote } => {
                write!(f, "datagram size {remote} there is below the minimum {local_min}")
            }
            Self::Unordered { channel, local, .. } => {
                let (here, there) = if *local { ("unordered", "ordered") } else { ("ordered", "unordered") };
                write!(f, "channel {channel} is {here} here, {there} there")
            }
        }
    }
}

/// Why [`Host::send`](crate::Host::send) refused a packet. Nothing was queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SendError {
    /// No such peer (never existed, or deleted since).
    UnknownPeer,
    /// The peer is not connected (still connecting, or disconnecting).
    NotConnected,
    /// The channel does not exist.
    #[non_exhaustive]
    NoSuchChannel {
        /// The channel asked for.
        channel: usize,
        /// How many the connection has.
        channels: usize,
    },
    /// The packet is larger than the connection allows.
    #[non_exhaustive]
    TooLarge {
        /// The packet's size.
        size: usize,
        /// The largest allowed.
        max: usize,
    },
    /// The channel's send queue is full of reliable or passive data; wait for it to drain
    /// (acknowledgements arrive in later steps) and retry.
    #[non_exhaustive]
    QueueFull {
        /// The channel.
        channel: usize,
    },
    /// The channel does not carry packets of this mode: an unordered channel
    /// ([`ChannelConfig::unordered`](crate::ChannelConfig::unordered)) carries reliable
    /// packets only.
    #[non_exhaustive]
    ModeNotAllowed {
        /// The channel.
        channel: usize,
        /// The mode asked for.
        mode: SendMode,
    },
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::UnknownPeer => f.write_str("no such peer"),
            Self::NotConnected => f.write_str("the peer is not connected"),
            Self::NoSuchChannel { channel, channels } => {
                write!(f, "channel {channel} does not exist (the connection has {channels})")
            }
            Self::TooLarge { size, max } => write!(f, "packet of {size} bytes exceeds the limit of {max}"),
            Self::QueueFull { channel } => {
                write!(f, "channel {channel}'s send queue is full; retry after the host has stepped")
            }
            Self::ModeNotAllowed { channel, mode } => {
                write!(f, "channel {channel} is unordered and carries reliable packets only, not {mode:?} ones")
            }
        }
    }
}

impl std::error::Error for SendError {}

/// Why [`Host::connect`](crate::Host::connect) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectError {
    /// A peer with that address exists already (possibly still disconnecting).
    PeerExists(PeerId),
    /// The host holds `max_peers` peers already.
    HostFull,
    /// The address is unspecified or has port 0.
    InvalidAddress,
    /// The connect data is longer than a request can carry.
    #[non_exhaustive]
    DataTooLarge {
        /// Its length.
        size: usize,
        /// The most this host can send: [`MAX_CONNECT_DATA`](crate::wire::MAX_CONNECT_DATA),
        /// or less when the configured `mtu` leaves less room
        /// ([`PeerConfig::max_connect_data`](crate::PeerConfig::max_connect_data)).
        max: usize,
    },
    /// Secure mode: connect with [`Host::connect_with_token`](crate::Host::connect_with_token).
    TokenRequired,
    /// [`Host::connect_with_token`](crate::Host::connect_with_token) on a host without
    /// [`HostConfig::secure`](crate::HostConfig::secure).
    NotSecure,
    /// The connect token does not decode.
    Token(TokenError),
    /// The connect token does not name this address among its servers.
    NotInToken,
    /// The connection request with this token would not fit this host's `mtu`.
    #[non_exhaustive]
    TokenTooLarge {
        /// The request's size.
        size: usize,
        /// The `mtu`.
        max: usize,
    },
}

impl core::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::PeerExists(id) => write!(f, "a peer for this address exists already ({id})"),
            Self::HostFull => f.write_str("the host is full (max_peers)"),
            Self::InvalidAddress => f.write_str("cannot connect to an unspecified address or port 0"),
            Self::DataTooLarge { size, max } => {
                write!(f, "{size} bytes of connect data exceed the {max} a request can carry")
            }
            Self::TokenRequired => f.write_str("a secure host connects with a connect token (connect_with_token)"),
            Self::NotSecure => f.write_str("connect tokens need a host in secure mode (HostConfig::secure)"),
            Self::Token(e) => write!(f, "bad connect token: {e}"),
            Self::NotInToken => f.write_str("the connect token is not valid for this server address"),
            Self::TokenTooLarge { size, max } => {
                write!(f, "a request with this token takes {size} bytes, more than the mtu of {max}")
            }
        }
    }
}

impl std::error::Error for ConnectError {}

/// Why [`Host::accept`](crate::Host::accept) or [`Host::reject`](crate::Host::reject)
/// did nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AdmissionError {
    /// No such peer: never existed, or gone (a request left unanswered for the connect
    /// timeout ends with `Disconnected { reason: Timeout }`).
    UnknownPeer,
    /// The peer is not awaiting a decision: it was decided already, or it did not come
    /// from an [`Event::ConnectRequest`].
    NotAwaiting,
}

impl core::fmt::Display for AdmissionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::UnknownPeer => f.write_str("no such peer (its request may have timed out)"),
            Self::NotAwaiting => f.write_str("the peer is not awaiting the application's decision"),
        }
    }
}

impl std::error::Error for AdmissionError {}

/// Why a token could not be made, decoded or accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TokenError {
    /// The bytes are not a token of this protocol and wire version.
    Format,
    /// A field runs past the end, or bytes follow the last field.
    Length,
    /// No server address.
    NoAddresses,
    /// More than [`MAX_SERVER_ADDRESSES`](crate::token::MAX_SERVER_ADDRESSES) server addresses.
    TooManyAddresses,
    /// An address of an unknown kind.
    Address,
    /// More than [`MAX_USER_DATA`](crate::token::MAX_USER_DATA) bytes of user data.
    UserDataTooLong,
    /// The expiry time is not after the creation time.
    Times,
    /// The timeout is below 1 s or above `u32::MAX` s.
    Timeout,
    /// The token has expired (at the time the server was given).
    Expired,
    /// The sealed part does not verify: forged, altered, or sealed with another key.
    Forged,
}

impl core::fmt::Display for TokenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Format => "not a connect token of this protocol version",
            Self::Length => "connect token of the wrong length",
            Self::NoAddresses => "a connect token needs at least one server address",
            Self::TooManyAddresses => "a connect token names at most 32 server addresses",
            Self::Address => "connect token holds an address of an unknown kind",
            Self::UserDataTooLong => "a connect token carries at most 256 bytes of user data",
            Self::Times => "a connect token must expire after it is created",
            Self::Timeout => "a connect token's timeout must be 1 s to u32::MAX s",
            Self::Expired => "connect token expired",
            Self::Forged => "connect token does not verify (forged, altered, or another key)",
        })
    }
}

impl std::error::Error for TokenError {}
