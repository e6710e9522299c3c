//! Control datagrams: the handshake (spec §2.3) and disconnection (§2.5).
//!
//! | type | datagram | body | keyed with |
//! |---|---|---|---|
//! | `0x80` | connection request | [`ConnectRequest`], connect data, zero padding to [`REQUEST_SIZE`] | [`Key::version`] |
//! | `0x81` | request + acknowledgement | [`ConnectRequest`] (no connect data), padded likewise | [`Key::reply`] |
//! | `0x82` | acknowledgement | empty | [`Key::reply`] |
//! | `0x83` | acknowledgement of another id | `acked: u32` | [`Key::reply`] |
//! | `0x84` | refusal | `reason: u8`, `detail: varint` | [`Key::reply`] |
//! | `0x85` | challenge | 16-byte cookie | [`Key::reply`] |
//! | `0x86` | disconnection request | `code: varint` | [`Key::connection`] |
//! | `0x87` | disconnection acknowledgement | empty | [`Key::connection`] |
//! | `0x88` | path challenge | `data: u64` | [`Key::connection`] |
//! | `0x89` | path response | `data: u64` | [`Key::connection`] |
//! | `0x8A` | unknown path | 8-byte [`PathCookie`] | [`Key::version`] |
//! | `0x8B` | moved | `id: u32`, 8-byte [`PathCookie`] | [`Key::connection`] |
//!
//! A path challenge asks whoever receives it at a new address of the connection to echo
//! its 8 random bytes in a path response: the address proves it receives (`docs/protocol.md`,
//! address change). Both are 13 bytes, so answering one never sends more than came in.
//!
//! An unknown path answers a connection datagram from an address a host knows no
//! connection of (a remote that moved to another IP): it carries a cookie bound to that
//! address, 13 bytes, sent only for a datagram at least as large. Its receiver answers a
//! *moved* to its remote: the host's id for the connection (the host's own nonce) and the
//! cookie, keyed with the connection, so the host finds the connection by the id, and the
//! echoed cookie proves the new address receives. Sealed, a moved keeps the id and the
//! cookie in the clear (associated data), so the host reads both before any key work.
//!
//! Every reply is keyed with the nonce of the request it answers, so only the requester
//! (who alone knows its nonce, barring an on-path observer) accepts it: an acknowledgement
//! of the right id, a refusal or a challenge cannot be forged blind. Requests are padded to
//! at least [`REQUEST_SIZE`] bytes, the size of the largest reply, so no reply to an
//! unauthenticated request is larger than the request (no amplification). Connect data
//! (the application's bytes: a version string, a login ticket) travels only in `0x80`
//! requests, so it can only make a request larger, never a reply.
//!
//! Request body (little-endian):
//!
//! ```text
//! nonce u32 | frame_base u32 | packet_base u24 | app_version u32 | channels u8
//! | mtu varint | max_packet varint | bandwidth_in varint | bandwidth_out varint
//! | flags u8 (bit 0: cookie follows; bit 1: connect data follows, 0x80 only;
//!            bit 2: unordered channels follow; others zero)
//! | [cookie 16 bytes] | [data_len varint 1..=256 | data]
//! | [unordered: ceil(channels / 8) bytes, bit i of byte i / 8 for channel 8 (i / 8) + i % 8]
//! | zero padding
//! ```
//!
//! A request with the unordered bitmap is padded to [`REQUEST_SIZE`] plus the bitmap's
//! length, which a reply carries too (it is sent only when both sides' bitmaps are equal),
//! so a reply still never outgrows the request it answers.
//!
//! [`Key::version`]: super::Key::version
//! [`Key::reply`]: super::Key::reply
//! [`Key::connection`]: super::Key::connection

use bytes::BufMut;

use super::codec::{Reader, put_uint, put_varint};
use super::{CHECK_LEN, DecodeError, Field, Key, MAX_MTU, MIN_MTU, check};

/// Every connection request is padded to at least this many bytes (type and check
/// included), the size of the largest pre-connection reply.
pub const REQUEST_SIZE: usize = 64;
/// Length of a path challenge or response in plain mode (type, 8 bytes, check); sealed,
/// 16 bytes more.
pub const PATH_DATAGRAM: usize = 1 + 8 + CHECK_LEN;
/// Length of a challenge cookie.
pub const COOKIE_LEN: usize = 16;
/// Length of a path cookie ([`PathCookie`]).
pub const PATH_COOKIE_LEN: usize = 8;
/// Length of an unknown-path datagram (type, cookie, check): the smallest datagram a host
/// answers with one.
pub const UNKNOWN_PATH_DATAGRAM: usize = 1 + PATH_COOKIE_LEN + CHECK_LEN;
/// Length of a moved datagram in plain mode (type, id, cookie, check); sealed, 16 bytes
/// more.
pub const MOVED_DATAGRAM: usize = 1 + 4 + PATH_COOKIE_LEN + CHECK_LEN;
/// Most bytes of connect data a request may carry (see [`Control::Request`]).
pub const MAX_CONNECT_DATA: usize = 256;
/// Most bytes of a request that are neither connect data nor the unordered channels'
/// bitmap: type, the widest encoding of every field, a cookie, the data's length and the
/// check. A request with `n` bytes of data and a bitmap of `b` bytes is at most
/// `max(REQUEST_SIZE, REQUEST_OVERHEAD_MAX + n) + b` bytes long.
pub const REQUEST_OVERHEAD_MAX: usize = 1 + 4 + 4 + 3 + 4 + 1 + 3 + 5 + 5 + 5 + 1 + COOKIE_LEN + 2 + CHECK_LEN;
/// Longest bitmap of unordered channels: one bit for each of 255 channels.
pub const UNORDERED_MAX: usize = 32;
/// Longest request: [`REQUEST_OVERHEAD_MAX`], the most connect data and the longest
/// bitmap.
pub const MAX_REQUEST: usize = REQUEST_OVERHEAD_MAX + MAX_CONNECT_DATA + UNORDERED_MAX;

/// A set of channels (0 to 255): in a request, the channels that deliver unordered. Both
/// sides of a connection must name the same ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChannelSet([u64; 4]);

impl ChannelSet {
    /// No channel.
    pub const EMPTY: Self = Self([0; 4]);

    /// Whether `channel` is in the set.
    pub fn contains(&self, channel: u8) -> bool {
        self.0.get(usize::from(channel / 64)).is_some_and(|w| w & (1 << (channel % 64)) != 0)
    }

    /// Adds `channel`.
    pub fn insert(&mut self, channel: u8) {
        if let Some(w) = self.0.get_mut(usize::from(channel / 64)) {
            *w |= 1 << (channel % 64);
        }
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    /// The lowest channel in one set and not the other.
    pub fn first_difference(&self, other: &Self) -> Option<u8> {
        self.0.iter().zip(other.0).enumerate().find_map(|(i, (a, b))| {
            let d = a ^ b;
            (d != 0).then(|| (i * 64) as u8 + d.trailing_zeros() as u8)
        })
    }

    /// Bytes of the bitmap a request of `channels` channels carries for this set: none when
    /// it is empty.
    pub fn wire_len(&self, channels: u8) -> usize {
        if self.is_empty() { 0 } else { usize::from(channels).div_ceil(8) }
    }
}

impl FromIterator<u8> for ChannelSet {
    fn from_iter<I: IntoIterator<Item = u8>>(iter: I) -> Self {
        let mut s = Self::EMPTY;
        for c in iter {
            s.insert(c);
        }
        s
    }
}

/// An opaque token a host under load hands a requester to echo (see `docs/security.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Cookie(pub [u8; COOKIE_LEN]);

/// An opaque token a host hands an address that sends it connection datagrams without a
/// connection there ([`Control::UnknownPath`]); echoed in a [`Control::Moved`] from that
/// address, it proves the sender receives there (`docs/protocol.md`, address change).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct PathCookie(pub [u8; PATH_COOKIE_LEN]);

/// The parameters a connecting side announces (spec §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The random id of this connection attempt.
    pub nonce: u32,
    /// The first frame id the requester will send (its transfer window starts here).
    pub frame_base: u32,
    /// The first packet id of every channel the requester sends on (< 2^24).
    pub packet_base: u32,
    /// The application's protocol id/version; both sides must agree exactly.
    pub app_version: u32,
    /// Number of channels, at least 1; both sides must agree exactly.
    pub channels: u8,
    /// Largest datagram the requester sends and accepts; the connection uses the smaller.
    pub mtu: u32,
    /// Largest packet the requester accepts.
    pub max_packet: u32,
    /// Bytes per second the requester accepts, 0 for no limit.
    pub bandwidth_in: u32,
    /// Bytes per second the requester sends at most, 0 for no limit.
    pub bandwidth_out: u32,
    /// A cookie echoed from a challenge.
    pub cookie: Option<Cookie>,
    /// The channels that deliver unordered (all below `channels`); both sides must agree.
    pub unordered: ChannelSet,
}

/// Why a host refused a connection request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum RefuseReason {
    /// The application versions differ; carries the refusing side's version.
    AppVersion(u32),
    /// The channel counts differ; carries the refusing side's count.
    ChannelCount(u8),
    /// The requester's datagram size is below the refusing side's minimum, which it carries.
    Mtu(u32),
    /// The refusing host has no room for another peer.
    HostFull,
    /// The refusing host does not accept incoming connections.
    NotAccepting,
    /// The refusing host's application rejected the request, with its code.
    Rejected(u32),
    /// The two sides disagree on whether this channel delivers unordered (the lowest such
    /// channel).
    Unordered(u8),
}

/// A decoded control datagram. Its connect data, if any, borrows from the datagram.
///
/// Non-exhaustive: a new kind of control datagram (as path validation's were) is not a
/// breaking change; a `match` on it keeps a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Control<'a> {
    /// A connection request.
    Request {
        /// The requester's parameters.
        request: ConnectRequest,
        /// The application's connect data, at most [`MAX_CONNECT_DATA`] bytes (often
        /// none): delivered to the application of the host it connects to.
        data: &'a [u8],
    },
    /// A connection request that also acknowledges the receiver's own request. It carries
    /// no connect data: it answers a request, and no reply may be larger.
    RequestAck(ConnectRequest),
    /// Acknowledges the receiver's request.
    Ack,
    /// Acknowledges a connection id other than the receiver's current request: the sender
    /// holds an older connection from the receiver's address (spec §2.3).
    AckOther {
        /// The id the sender holds.
        acked: u32,
    },
    /// Refuses the receiver's request.
    Refuse(RefuseReason),
    /// Asks the receiver to repeat its request with this cookie.
    Challenge(Cookie),
    /// A disconnection request, with the application's code (0 when it gave none).
    Disconnect {
        /// The code the disconnecting application gave.
        code: u32,
    },
    /// Acknowledges a disconnection request.
    DisconnectAck,
    /// Asks the receiver to echo `data` (random) in a [`Control::PathResponse`]: sent to a
    /// new address of the connection's remote, which must prove it receives there.
    PathChallenge {
        /// The value to echo.
        data: u64,
    },
    /// Echoes the `data` of a [`Control::PathChallenge`].
    PathResponse {
        /// The challenge's value.
        data: u64,
    },
    /// Answers a connection datagram from an address the sender knows no connection of:
    /// if the receiver's connection to the sender moved there, it answers a
    /// [`Control::Moved`] with this cookie.
    UnknownPath(PathCookie),
    /// Tells the receiver that the connection it knows by `id` (its own nonce) now sends
    /// from where this came from; `cookie` is the receiver's [`Control::UnknownPath`]
    /// cookie for that address.
    Moved {
        /// The receiver's id for the connection: the nonce it announced.
        id: u32,
        /// The cookie echoed.
        cookie: PathCookie,
    },
}

pub(crate) const T_REQUEST: u8 = 0x80;
pub(crate) const T_REQUEST_ACK: u8 = 0x81;
pub(crate) const T_ACK: u8 = 0x82;
pub(crate) const T_ACK_OTHER: u8 = 0x83;
pub(crate) const T_REFUSE: u8 = 0x84;
pub(crate) const T_CHALLENGE: u8 = 0x85;
pub(crate) const T_DISCONNECT: u8 = 0x86;
pub(crate) const T_DISCONNECT_ACK: u8 = 0x87;
pub(crate) const T_PATH_CHALLENGE: u8 = 0x88;
pub(crate) const T_PATH_RESPONSE: u8 = 0x89;
pub(crate) const T_UNKNOWN_PATH: u8 = 0x8A;
pub(crate) const T_MOVED: u8 = 0x8B;

impl<'a> Control<'a> {
    /// A connection request without connect data.
    pub const fn request(request: ConnectRequest) -> Self {
        Self::Request { request, data: &[] }
    }

    /// The same datagram borrowing nothing: a request loses its connect data (the only
    /// part that borrows).
    pub fn without_data(self) -> Control<'static> {
        match self {
            Self::Request { request, .. } => Control::request(request),
            Self::RequestAck(r) => Control::RequestAck(r),
            Self::Ack => Control::Ack,
            Self::AckOther { acked } => Control::AckOther { acked },
            Self::Refuse(r) => Control::Refuse(r),
            Self::Challenge(c) => Control::Challenge(c),
            Self::Disconnect { code } => Control::Disconnect { code },
            Self::DisconnectAck => Control::DisconnectAck,
            Self::PathChallenge { data } => Control::PathChallenge { data },
            Self::PathResponse { data } => Control::PathResponse { data },
            Self::UnknownPath(c) => Control::UnknownPath(c),
            Self::Moved { id, cookie } => Control::Moved { id, cookie },
        }
    }

    /// Writes the body (what follows the type byte). With `pad_from` (where the datagram
    /// began), requests are padded as plain mode pads them; secure mode's sealed requests
    /// and replies are not (`wire::secure`).
    pub(super) fn put_body<B: BufMut + AsRef<[u8]>>(&self, out: &mut B, pad_from: Option<usize>) {
        match self {
            Self::Request { request, data } => match pad_from {
                Some(start) => put_padded_request(out, start, request, data),
                None => put_request(out, request, data),
            },
            Self::RequestAck(request) => match pad_from {
                Some(start) => put_padded_request(out, start, request, &[]),
                None => put_request(out, request, &[]),
            },
            Self::AckOther { acked } => out.put_u32_le(*acked),
            Self::Refuse(reason) => {
                let (code, detail) = refuse_code(*reason);
                out.put_u8(code);
                put_varint(out, detail);
            }
            Self::Challenge(cookie) => out.put_slice(&cookie.0),
            Self::Disconnect { code } => put_varint(out, *code),
            Self::PathChallenge { data } | Self::PathResponse { data } => out.put_u64_le(*data),
            Self::UnknownPath(cookie) => out.put_slice(&cookie.0),
            Self::Moved { id, cookie } => {
                out.put_u32_le(*id);
                out.put_slice(&cookie.0);
            }
            Self::Ack | Self::DisconnectAck => {}
        }
    }

    /// Reads the body of a datagram of type `ty` that carries no connect data and no
    /// padding (every type but a request), up to the end of `r`.
    pub(super) fn read_body(ty: u8, r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let out = match ty {
            T_REQUEST_ACK => Self::RequestAck(read_request(r, false)?.0),
            T_ACK => Self::Ack,
            T_ACK_OTHER => Self::AckOther { acked: r.u32(Field::Nonce)? },
            T_REFUSE => {
                let code = r.u8(Field::RefuseReason)?;
                let detail = r.varint(Field::RefuseReason)?;
                Self::Refuse(refuse_from_code(code, detail)?)
            }
            T_CHALLENGE => {
                let mut cookie = [0; COOKIE_LEN];
                cookie.copy_from_slice(r.bytes(COOKIE_LEN, Field::Cookie)?);
                Self::Challenge(Cookie(cookie))
            }
            T_DISCONNECT => Self::Disconnect { code: r.varint(Field::Code)? },
            T_DISCONNECT_ACK => Self::DisconnectAck,
            T_PATH_CHALLENGE => Self::PathChallenge { data: r.u64(Field::PathData)? },
            T_PATH_RESPONSE => Self::PathResponse { data: r.u64(Field::PathData)? },
            T_UNKNOWN_PATH => Self::UnknownPath(read_path_cookie(r)?),
            T_MOVED => Self::Moved { id: r.u32(Field::Nonce)?, cookie: read_path_cookie(r)? },
            other => return Err(DecodeError::UnknownType(other)),
        };
        if !r.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        Ok(out)
    }

    pub(super) fn type_byte(&self) -> u8 {
        match self {
            Self::Request { .. } => T_REQUEST,
            Self::RequestAck(_) => T_REQUEST_ACK,
            Self::Ack => T_ACK,
            Self::AckOther { .. } => T_ACK_OTHER,
            Self::Refuse(_) => T_REFUSE,
            Self::Challenge(_) => T_CHALLENGE,
            Self::Disconnect { .. } => T_DISCONNECT,
            Self::DisconnectAck => T_DISCONNECT_ACK,
            Self::PathChallenge { .. } => T_PATH_CHALLENGE,
            Self::PathResponse { .. } => T_PATH_RESPONSE,
            Self::UnknownPath(_) => T_UNKNOWN_PATH,
            Self::Moved { .. } => T_MOVED,
        }
    }

    /// Appends the datagram, check included, to `out`; returns its length. Connect data
    /// longer than [`MAX_CONNECT_DATA`] is written, and refused by every decoder.
    pub fn encode<B: BufMut + AsRef<[u8]>>(&self, key: Key, out: &mut B) -> usize {
        let start = out.as_ref().len();
        out.put_u8(self.type_byte());
        self.put_body(out, Some(start));
        let mut c = check::Check::new(key);
        c.bytes(out.as_ref().get(start..).unwrap_or_default());
        out.put_u32_le(c.finish());
        out.as_ref().len() - start
    }

    /// Decodes a control datagram whose check is keyed with `key`. The check is verified
    /// before any field is trusted.
    pub fn decode(datagram: &'a [u8], key: Key) -> Result<Self, DecodeError> {
        let ty = super::peek_type(datagram)?;
        if !check::verify_plain(datagram, key) {
            return Err(DecodeError::BadChecksum);
        }
        // `peek_type` guaranteed a type byte and a check.
        let mut r = Reader::new(datagram.get(1..datagram.len() - CHECK_LEN).unwrap_or_default());
        match ty {
            T_REQUEST | T_REQUEST_ACK => {
                if datagram.len() < REQUEST_SIZE {
                    return Err(DecodeError::Unpadded { len: datagram.len() });
                }
                let (request, data) = read_request(&mut r, ty == T_REQUEST)?;
                let padded = REQUEST_SIZE + request.unordered.wire_len(request.channels);
                if datagram.len() < padded {
                    return Err(DecodeError::Unpadded { len: datagram.len() });
                }
                if r.rest().iter().any(|&b| b != 0) {
                    return Err(DecodeError::NonZeroPadding);
                }
                Ok(if ty == T_REQUEST { Self::Request { request, data } } else { Self::RequestAck(request) })
            }
            other => Self::read_body(other, &mut r),
        }
    }
}

/// The id and cookie of a moved datagram, read before anything verifies it: they are in
/// the clear at the same place in both modes (after the type byte). `None` if `datagram`
/// is too short to be one.
pub(crate) fn peek_moved(datagram: &[u8]) -> Option<(u32, PathCookie)> {
    if datagram.len() < MOVED_DATAGRAM {
        return None;
    }
    let mut r = Reader::new(datagram.get(1..)?);
    Some((r.u32(Field::Nonce).ok()?, read_path_cookie(&mut r).ok()?))
}

fn read_path_cookie(r: &mut Reader<'_>) -> Result<PathCookie, DecodeError> {
    let mut cookie = [0; PATH_COOKIE_LEN];
    cookie.copy_from_slice(r.bytes(PATH_COOKIE_LEN, Field::Cookie)?);
    Ok(PathCookie(cookie))
}

/// Writes a request body with `data` and pads the datagram (which began at `start`) to
/// [`REQUEST_SIZE`] and the unordered bitmap, less its check.
fn put_padded_request<B: BufMut + AsRef<[u8]>>(out: &mut B, start: usize, r: &ConnectRequest, data: &[u8]) {
    put_request(out, r, data);
    let written = out.as_ref().len() - start;
    let padded = REQUEST_SIZE + r.unordered.wire_len(r.channels);
    out.put_bytes(0, (padded - CHECK_LEN).saturating_sub(written));
}

pub(super) fn put_request<B: BufMut>(out: &mut B, r: &ConnectRequest, data: &[u8]) {
    out.put_u32_le(r.nonce);
    out.put_u32_le(r.frame_base);
    put_uint(out, r.packet_base, 3);
    out.put_u32_le(r.app_version);
    out.put_u8(r.channels);
    put_varint(out, r.mtu);
    put_varint(out, r.max_packet);
    put_varint(out, r.bandwidth_in);
    put_varint(out, r.bandwidth_out);
    let unordered = r.unordered.wire_len(r.channels);
    out.put_u8(u8::from(r.cookie.is_some()) | u8::from(!data.is_empty()) << 1 | u8::from(unordered > 0) << 2);
    if let Some(c) = r.cookie {
        out.put_slice(&c.0);
    }
    if !data.is_empty() {
        put_varint(out, data.len().min(u32::MAX as usize) as u32);
        out.put_slice(data);
    }
    for byte in 0..unordered {
        let bits = (0..8u8).filter(|b| r.unordered.contains((byte * 8) as u8 + b)).fold(0u8, |v, b| v | 1 << b);
        out.put_u8(bits);
    }
}

/// Request flags: a cookie follows; connect data follows (requests only, not replies); the
/// unordered channels' bitmap follows.
const FLAG_COOKIE: u8 = 1;
const FLAG_DATA: u8 = 2;
const FLAG_UNORDERED: u8 = 4;

/// Reads a request body; connect data is allowed only `with_data` (a `0x80` request).
pub(super) fn read_request<'a>(r: &mut Reader<'a>, with_data: bool) -> Result<(ConnectRequest, &'a [u8]), DecodeError> {
    let nonce = r.u32(Field::Nonce)?;
    let frame_base = r.u32(Field::FrameId)?;
    let packet_base = r.uint(3, Field::PacketId)?;
    let app_version = r.u32(Field::AppVersion)?;
    let channels = r.u8(Field::Channels)?;
    if channels == 0 {
        return Err(DecodeError::OutOfRange(Field::Channels));
    }
    let mtu = r.varint(Field::Mtu)?;
    if !(MIN_MTU as u32..=MAX_MTU as u32).contains(&mtu) {
        return Err(DecodeError::OutOfRange(Field::Mtu));
    }
    let max_packet = r.varint(Field::MaxPacket)?;
    if max_packet == 0 {
        return Err(DecodeError::OutOfRange(Field::MaxPacket));
    }
    let bandwidth_in = r.varint(Field::Bandwidth)?;
    let bandwidth_out = r.varint(Field::Bandwidth)?;
    let flags = r.u8(Field::Flags)?;
    let allowed = if with_data { FLAG_COOKIE | FLAG_DATA | FLAG_UNORDERED } else { FLAG_COOKIE | FLAG_UNORDERED };
    if flags & !allowed != 0 {
        return Err(DecodeError::ReservedBits(Field::Flags));
    }
    let cookie = if flags & FLAG_COOKIE != 0 {
        let mut c = [0; COOKIE_LEN];
        c.copy_from_slice(r.bytes(COOKIE_LEN, Field::Cookie)?);
        Some(Cookie(c))
    } else {
        None
    };
    let mut data: &[u8] = &[];
    if flags & FLAG_DATA != 0 {
        let len = r.varint(Field::ConnectData)? as usize;
        if !(1..=MAX_CONNECT_DATA).contains(&len) {
            return Err(DecodeError::OutOfRange(Field::ConnectData));
        }
        data = r.bytes(len, Field::ConnectData)?;
    }
    let mut unordered = ChannelSet::EMPTY;
    if flags & FLAG_UNORDERED != 0 {
        let bitmap = r.bytes(usize::from(channels).div_ceil(8), Field::Unordered)?;
        for (byte, &bits) in bitmap.iter().enumerate() {
            for b in (0..8u8).filter(|b| bits & 1 << b != 0) {
                let channel = byte * 8 + usize::from(b);
                // Only existing channels, and a bitmap only when some channel is named.
                if channel >= usize::from(channels) {
                    return Err(DecodeError::OutOfRange(Field::Unordered));
                }
                unordered.insert(channel as u8);
            }
        }
        if unordered.is_empty() {
            return Err(DecodeError::OutOfRange(Field::Unordered));
        }
    }
    let request = ConnectRequest {
        nonce,
        frame_base,
        packet_base,
        app_version,
        channels,
        mtu,
        max_packet,
        bandwidth_in,
        bandwidth_out,
        cookie,
        unordered,
    };
    Ok((request, data))
}

fn refuse_code(reason: RefuseReason) -> (u8, u32) {
    match reason {
        RefuseReason::AppVersion(v) => (1, v),
        RefuseReason::ChannelCount(c) => (2, u32::from(c)),
        RefuseReason::Mtu(m) => (3, m),
        RefuseReason::HostFull => (4, 0),
        RefuseReason::NotAccepting => (5, 0),
        RefuseReason::Rejected(code) => (6, code),
        RefuseReason::Unordered(channel) => (7, u32::from(channel)),
    }
}

fn refuse_from_code(code: u8, detail: u32) -> Result<RefuseReason, DecodeError> {
    let bad = DecodeError::OutOfRange(Field::RefuseReason);
    Ok(match code {
        1 => RefuseReason::AppVersion(detail),
        2 => RefuseReason::ChannelCount(u8::try_from(detail).map_err(|_| bad)?),
        3 => RefuseReason::Mtu(detail),
        4 if detail == 0 => RefuseReason::HostFull,
        5 if detail == 0 => RefuseReason::NotAccepting,
        6 => RefuseReason::Rejected(detail),
        7 => RefuseReason::Unordered(u8::try_from(detail).map_err(|_| bad)?),
        _ => return Err(bad),
    })
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    pub(crate) fn sample_request() -> ConnectRequest {
        ConnectRequest {
            nonce: 0xDEAD_BEEF,
            frame_base: 0xFFFF_FFF0,
            packet_base: 0xFF_FFF0,
            app_version: 7,
            channels: 4,
            mtu: 1200,
            max_packet: 1 << 20,
            bandwidth_in: 0,
            bandwidth_out: u32::MAX,
            cookie: Some(Cookie([0xAB; COOKIE_LEN])),
            unordered: ChannelSet::EMPTY,
        }
    }

    const TICKET: &[u8] = b"version 3.1; ticket 0123456789abcdef";

    fn all() -> Vec<Control<'static>> {
        let req = sample_request();
        let plain = ConnectRequest { cookie: None, ..req };
        // Unordered channels: a few of four, and every one of the most there can be.
        let some = ConnectRequest { unordered: [1, 3].into_iter().collect(), ..req };
        let most = ConnectRequest { channels: 255, unordered: (0..255).collect(), ..req };
        vec![
            Control::request(some),
            Control::RequestAck(some),
            Control::Request { request: most, data: &[9; MAX_CONNECT_DATA] },
            Control::RequestAck(most),
            Control::request(req),
            Control::request(plain),
            Control::Request { request: req, data: TICKET },
            Control::Request { request: plain, data: &[7; MAX_CONNECT_DATA] },
            Control::RequestAck(req),
            Control::Ack,
            Control::AckOther { acked: 5 },
            Control::Refuse(RefuseReason::AppVersion(9)),
            Control::Refuse(RefuseReason::ChannelCount(255)),
            Control::Refuse(RefuseReason::Mtu(128)),
            Control::Refuse(RefuseReason::HostFull),
            Control::Refuse(RefuseReason::NotAccepting),
            Control::Refuse(RefuseReason::Rejected(0)),
            Control::Refuse(RefuseReason::Rejected(u32::MAX)),
            Control::Refuse(RefuseReason::Unordered(0)),
            Control::Refuse(RefuseReason::Unordered(254)),
            Control::Challenge(Cookie([3; COOKIE_LEN])),
            Control::Disconnect { code: 0 },
            Control::Disconnect { code: u32::MAX },
            Control::DisconnectAck,
            Control::PathChallenge { data: 0x0123_4567_89AB_CDEF },
            Control::PathResponse { data: u64::MAX },
            Control::UnknownPath(PathCookie([1, 2, 3, 4, 5, 6, 7, 8])),
            Control::Moved { id: 0xDEAD_BEEF, cookie: PathCookie([9; PATH_COOKIE_LEN]) },
        ]
    }

    #[test]
    fn every_control_datagram_roundtrips_and_no_reply_outgrows_a_request() {
        let key = Key::reply(1);
        for c in all() {
            let mut out = Vec::new();
            let n = c.encode(key, &mut out);
            assert_eq!(n, out.len());
            assert_eq!(Control::decode(&out, key), Ok(c));
            match c {
                Control::Request { request, data } => {
                    let bitmap = request.unordered.wire_len(request.channels);
                    let most = REQUEST_SIZE.max(REQUEST_OVERHEAD_MAX + data.len()) + bitmap;
                    assert!(n <= most && n <= MAX_REQUEST, "{n} bytes with {} of data", data.len());
                    if data.is_empty() {
                        assert_eq!(n, REQUEST_SIZE + bitmap);
                    }
                }
                // A reply to a request with the same channels is exactly as large as the
                // request without connect data: never larger than the request itself.
                Control::RequestAck(r) => assert_eq!(n, REQUEST_SIZE + r.unordered.wire_len(r.channels)),
                // A response is exactly as large as the challenge it echoes.
                Control::PathChallenge { .. } | Control::PathResponse { .. } => assert_eq!(n, PATH_DATAGRAM),
                // An unknown path answers any connection datagram at least this large.
                Control::UnknownPath(_) => assert_eq!(n, UNKNOWN_PATH_DATAGRAM),
                Control::Moved { id, cookie } => {
                    assert_eq!(n, MOVED_DATAGRAM);
                    assert_eq!(peek_moved(&out), Some((id, cookie)), "the id and cookie are where a host reads them");
                }
                _ => assert!(n <= REQUEST_SIZE, "{c:?} is {n} bytes"),
            }
        }
    }

    #[test]
    fn wrong_key_is_a_bad_checksum() {
        let mut out = Vec::new();
        Control::Ack.encode(Key::reply(1), &mut out);
        assert_eq!(Control::decode(&out, Key::reply(2)), Err(DecodeError::BadChecksum));
        assert_eq!(Control::decode(&out, Key::version()), Err(DecodeError::BadChecksum));
    }

    fn sealed(bytes: &[u8], key: Key) -> Vec<u8> {
        let mut out = bytes.to_vec();
        let mut c = check::Check::new(key);
        c.bytes(&out);
        out.extend_from_slice(&c.finish().to_le_bytes());
        out
    }

    #[test]
    fn malformed_control_datagrams_give_precise_errors() {
        let k = Key::version();
        let mut req = Vec::new();
        Control::request(sample_request()).encode(k, &mut req);
        let body = &req[..req.len() - CHECK_LEN];
        // Too short to be padded.
        assert_eq!(Control::decode(&sealed(&body[..40], k), k), Err(DecodeError::Unpadded { len: 44 }));
        // Non-zero padding.
        let mut b = body.to_vec();
        *b.last_mut().unwrap() = 1;
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::NonZeroPadding));
        // Zero channels, bad MTU, zero max packet, reserved flag bits.
        let mut b = body.to_vec();
        b[16] = 0;
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::OutOfRange(Field::Channels)));
        let mut fields = Vec::new();
        let mut r = sample_request();
        r.cookie = None;
        r.mtu = 100;
        fields.push(0x80);
        put_request(&mut fields, &r, &[]);
        fields.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&fields, k), k), Err(DecodeError::OutOfRange(Field::Mtu)));
        let mut b = vec![0x80];
        put_request(&mut b, &ConnectRequest { max_packet: 0, ..r }, &[]);
        b.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::OutOfRange(Field::Mtu)));
        let mut b = vec![0x80];
        put_request(&mut b, &ConnectRequest { mtu: 1200, max_packet: 0, ..r }, &[]);
        b.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::OutOfRange(Field::MaxPacket)));
        let mut b = vec![0x80];
        put_request(&mut b, &ConnectRequest { mtu: 1200, ..r }, &[]);
        let flags_at = b.len() - 1;
        b[flags_at] = 8;
        b.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::ReservedBits(Field::Flags)));
        // Connect data: only in a request, never in a reply (the flag is reserved there),
        // 1 to 256 bytes, present in full.
        let r = ConnectRequest { mtu: 1200, ..r };
        let mut b = vec![T_REQUEST_ACK];
        put_request(&mut b, &r, b"hi");
        b.resize(REQUEST_SIZE - CHECK_LEN, 0);
        let rk = Key::reply(9);
        assert_eq!(Control::decode(&sealed(&b, rk), rk), Err(DecodeError::ReservedBits(Field::Flags)));
        b[0] = T_REQUEST;
        assert_eq!(Control::decode(&sealed(&b, k), k), Ok(Control::Request { request: r, data: b"hi" }));
        let mut b = vec![T_REQUEST];
        put_request(&mut b, &r, &[1; MAX_CONNECT_DATA + 1]);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::OutOfRange(Field::ConnectData)));
        let mut b = vec![T_REQUEST];
        put_request(&mut b, &r, b"x");
        let len_at = b.len() - 2;
        b[len_at] = 0; // zero bytes of data, yet flagged
        b.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::OutOfRange(Field::ConnectData)));
        let mut b = vec![T_REQUEST];
        put_request(&mut b, &r, &[1; 100]);
        b.truncate(b.len() - 1);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::Truncated(Field::ConnectData)));
        // The unordered bitmap: only existing channels, never empty, and the request padded
        // past it.
        let four = ConnectRequest { channels: 4, unordered: [2].into_iter().collect(), ..r };
        let mut good = vec![T_REQUEST];
        put_request(&mut good, &four, &[]);
        let bitmap_at = good.len() - 1;
        assert_eq!(good[bitmap_at], 0b100);
        good.resize(REQUEST_SIZE + 1 - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&good, k), k), Ok(Control::request(four)));
        for bits in [0b1_0000, 0] {
            let mut b = good.clone();
            b[bitmap_at] = bits;
            assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::OutOfRange(Field::Unordered)));
        }
        let mut b = good.clone();
        b.truncate(REQUEST_SIZE - CHECK_LEN);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::Unpadded { len: REQUEST_SIZE }));
        // Trailing bytes, unknown refusal, truncated fields.
        let rk = Key::reply(9);
        assert_eq!(Control::decode(&sealed(&[T_ACK, 0], rk), rk), Err(DecodeError::TrailingBytes));
        assert_eq!(
            Control::decode(&sealed(&[T_REFUSE, 9, 0], rk), rk),
            Err(DecodeError::OutOfRange(Field::RefuseReason))
        );
        assert_eq!(
            Control::decode(&sealed(&[T_REFUSE, 2, 0x80, 2], rk), rk),
            Err(DecodeError::OutOfRange(Field::RefuseReason))
        );
        assert_eq!(Control::decode(&sealed(&[T_ACK_OTHER, 1, 2], rk), rk), Err(DecodeError::Truncated(Field::Nonce)));
        assert_eq!(Control::decode(&sealed(&[T_CHALLENGE, 1], rk), rk), Err(DecodeError::Truncated(Field::Cookie)));
        let ck = Key::connection(1, 2);
        assert_eq!(Control::decode(&sealed(&[T_DISCONNECT], ck), ck), Err(DecodeError::Truncated(Field::Code)));
        assert_eq!(
            Control::decode(&sealed(&[T_DISCONNECT, 0x80, 0], ck), ck),
            Err(DecodeError::NonCanonicalVarint(Field::Code))
        );
        assert_eq!(Control::decode(&sealed(&[T_DISCONNECT, 5, 0], ck), ck), Err(DecodeError::TrailingBytes));
        assert_eq!(
            Control::decode(&sealed(&[T_PATH_CHALLENGE, 1, 2, 3, 4, 5, 6, 7], ck), ck),
            Err(DecodeError::Truncated(Field::PathData))
        );
        assert_eq!(
            Control::decode(&sealed(&[T_PATH_RESPONSE, 1, 2, 3, 4, 5, 6, 7, 8, 9], ck), ck),
            Err(DecodeError::TrailingBytes)
        );
        assert_eq!(
            Control::decode(&sealed(&[T_UNKNOWN_PATH, 1, 2, 3, 4, 5, 6, 7], Key::version()), Key::version()),
            Err(DecodeError::Truncated(Field::Cookie))
        );
        assert_eq!(
            Control::decode(&sealed(&[T_MOVED, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], ck), ck),
            Err(DecodeError::TrailingBytes)
        );
        assert_eq!(peek_moved(&[T_MOVED, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]), None, "too short");
        assert_eq!(Control::decode(&sealed(&[0x8C], rk), rk), Err(DecodeError::UnknownType(0x8C)));
    }
}
