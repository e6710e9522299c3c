//! The wire format: every datagram POROUS sends, byte by byte.
//!
//! A datagram is `type: u8`, a body, and a 4-byte integrity check (see [`Key`]). The type
//! byte says which of two families it belongs to:
//!
//! - **control** (`0x80..=0x8B`, [`Control`]): the handshake, disconnection and path validation;
//! - **connection** (high bit clear, [`Data`]): one data frame and/or acknowledgements and
//!   pings, in the same datagram whenever they are due together.
//!
//! Decoding takes `&[u8]`, never panics, never allocates, verifies the check before any
//! field is trusted, and returns a precise [`DecodeError`]. Encoding appends to a buffer
//! the caller supplies and reuses ([`bytes::BufMut`]), so the hot path allocates nothing.
//! `docs/wire-format.md` describes the same format in prose with worked examples.

mod aead;
mod check;
pub(crate) mod codec;
mod control;
mod data;
mod message;
pub mod secure;

pub use check::Key;
// The datagram sizes a configuration may name, which the wire enforces on every request:
// defined with the configuration, so that the vocabulary imports nothing of the layers.
pub use crate::config::{MAX_MTU, MIN_MTU};
pub(crate) use check::PlainKey;
pub use control::{
    COOKIE_LEN, ChannelSet, ConnectRequest, Control, Cookie, MAX_CONNECT_DATA, MAX_REQUEST, MOVED_DATAGRAM,
    PATH_COOKIE_LEN, PATH_DATAGRAM, PathCookie, REQUEST_OVERHEAD_MAX, REQUEST_SIZE, RefuseReason,
    UNKNOWN_PATH_DATAGRAM, UNORDERED_MAX,
};
pub(crate) use control::{T_MOVED, T_UNKNOWN_PATH, peek_moved};
pub use data::{
    ACK_DELAY_UNIT, AckRange, AckRanges, Data, DataHeader, DataWriter, Expand, FixedRefs, MAX_ACK_RANGES, Messages,
    ack_delay_len, ack_range_len, ack_section_len,
};
pub use message::{
    Fragment, GRANULES_PER_FRAGMENT, MAX_GRANULES, MESSAGE_HEADER_MAX, Message, MessageKind, RunContext, SendMode,
};

/// Version of this wire format. It keys every check, so datagrams of other versions are
/// dropped as foreign.
pub const WIRE_VERSION: u8 = 2;
/// Length of the integrity check.
pub const CHECK_LEN: usize = 4;
/// The shortest valid datagram: a type byte and the check.
pub const MIN_DATAGRAM: usize = 1 + CHECK_LEN;
/// Most bytes of a data frame that are not messages: type, a 4-byte frame id, ping, ping
/// acknowledgement and check. Acknowledgements ride along only when they fit besides.
pub const FRAME_OVERHEAD_MAX: usize = 1 + 4 + 1 + 1 + CHECK_LEN;

/// Payload bytes of every fragment but the last, for a connection's datagram size: the
/// largest payload that fits a frame under any encoding of its header.
pub const fn fragment_payload(mtu: usize) -> usize {
    mtu - FRAME_OVERHEAD_MAX - MESSAGE_HEADER_MAX
}

/// The *granule* of a connection whose negotiated datagram size is `mtu`: the unit a
/// fragment's index and count are written in, and the receiver reassembles at. A 16th of
/// [`fragment_payload`] at that size (73 bytes at 1,200), so a fragment of the negotiated
/// size holds 16 granules and one of a datagram path MTU discovery grew holds more.
/// Both sides know the negotiated size, so they agree on it without a field.
pub const fn granule(mtu: usize) -> usize {
    granule_of(fragment_payload(mtu))
}

/// [`granule`] of a connection whose fragments of the negotiated size carry
/// `fragment_payload` bytes.
pub const fn granule_of(fragment_payload: usize) -> usize {
    let g = fragment_payload / GRANULES_PER_FRAGMENT;
    if g == 0 { 1 } else { g }
}

/// Payload bytes of a fragment cut for a datagram of `mtu` bytes, on a connection whose
/// granule is `granule`: the largest whole number of granules that fits, at least one.
pub const fn fragment_cut(mtu: usize, granule: usize) -> usize {
    let n = fragment_payload(mtu) / granule;
    if n == 0 { granule } else { n * granule }
}

/// The largest packet a connection whose negotiated datagram size is `mtu` can carry:
/// [`MAX_GRANULES`] granules (at least what 65,536 fragments of that size held before
/// fragments were counted in granules), and at most `u32::MAX` bytes.
pub const fn max_packet(mtu: usize) -> usize {
    // In 64 bits: on a 32-bit target the product overflows `usize` at large sizes.
    let max = granule(mtu) as u64 * MAX_GRANULES as u64;
    if max > u32::MAX as u64 { u32::MAX as usize } else { max as usize }
}

/// Which key a datagram's check is computed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyClass {
    /// [`Key::version`]: connection requests, and unknown-path answers (which no
    /// connection can key: their sender knows none at the address).
    Version,
    /// [`Key::reply`]: replies to a request, keyed with the requester's nonce.
    Reply,
    /// [`Key::connection`]: everything sent within an established connection.
    Connection,
}

/// Reads the type byte after checking the datagram is long enough to hold a check, and
/// rejects unknown types and reserved bits. Changes nothing and trusts nothing else.
pub fn peek_type(datagram: &[u8]) -> Result<u8, DecodeError> {
    let ty = match datagram.first() {
        Some(&ty) if datagram.len() >= MIN_DATAGRAM => ty,
        _ => return Err(DecodeError::TooShort { len: datagram.len() }),
    };
    if ty & 0x80 == 0 {
        if ty == 0 {
            return Err(DecodeError::Empty);
        }
        // Bit 0 (padding) belongs to datagrams that are not frames; the frame id width
        // bits mean nothing without a frame.
        if ty == 0x01 {
            return Err(DecodeError::Empty);
        }
        if (ty & 0x40 != 0 && ty & 0x01 != 0) || (ty & 0x40 == 0 && ty & 0x30 != 0) {
            return Err(DecodeError::ReservedBits(Field::Type));
        }
    } else if ty > T_MOVED {
        return Err(DecodeError::UnknownType(ty));
    }
    Ok(ty)
}

/// The key class of a datagram type returned by [`peek_type`].
pub const fn key_class(ty: u8) -> KeyClass {
    match ty {
        control::T_REQUEST | T_UNKNOWN_PATH => KeyClass::Version,
        control::T_REQUEST_ACK..=control::T_CHALLENGE => KeyClass::Reply,
        _ => KeyClass::Connection,
    }
}

/// A field of the wire format, named in decode errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// The type byte.
    Type,
    /// A frame id.
    FrameId,
    /// A ping or ping acknowledgement id.
    Ping,
    /// The ack section's head, newest id or ranges.
    AckRanges,
    /// The total span of an ack section.
    AckSpan,
    /// A message header byte.
    MessageHeader,
    /// A channel number.
    Channel,
    /// A packet id.
    PacketId,
    /// A packet dependency.
    Dependency,
    /// A fragment index.
    FragmentIndex,
    /// A fragment count.
    FragmentCount,
    /// A payload length.
    Length,
    /// A payload.
    Payload,
    /// A window acknowledgement's form.
    WindowAck,
    /// A connection nonce.
    Nonce,
    /// The application version.
    AppVersion,
    /// The channel count.
    Channels,
    /// The datagram size limit.
    Mtu,
    /// The packet size limit.
    MaxPacket,
    /// A bandwidth limit.
    Bandwidth,
    /// Request flags.
    Flags,
    /// A cookie.
    Cookie,
    /// A refusal reason.
    RefuseReason,
    /// A request's connect data.
    ConnectData,
    /// A disconnection's application code.
    Code,
    /// A request's bitmap of unordered channels.
    Unordered,
    /// A sealed request's connect token (secure mode).
    Token,
    /// A sealed datagram's counter (secure mode).
    Counter,
    /// A connection datagram's padding (a path MTU probe).
    Padding,
    /// A path challenge's or response's value.
    PathData,
}

impl core::fmt::Display for Field {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self, f)
    }
}

/// Why a datagram was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecodeError {
    /// Shorter than a type byte and a check.
    #[non_exhaustive]
    TooShort {
        /// The datagram's length.
        len: usize,
    },
    /// A field runs past the end of the datagram.
    Truncated(Field),
    /// The type byte names no datagram of this version.
    UnknownType(u8),
    /// A message header byte names no message.
    UnknownMessage(u8),
    /// Bits the format reserves are set.
    ReservedBits(Field),
    /// A connection datagram carrying nothing.
    Empty,
    /// The integrity check failed: corrupted, foreign, forged, or stale beyond expansion.
    BadChecksum,
    /// A value outside what the format or the spec's windows allow.
    OutOfRange(Field),
    /// A varint with redundant zero groups.
    NonCanonicalVarint(Field),
    /// A message continues a run, but no earlier message started one.
    NoContext(Field),
    /// Bytes after the last field.
    TrailingBytes,
    /// A connection request shorter than [`REQUEST_SIZE`].
    #[non_exhaustive]
    Unpadded {
        /// The datagram's length.
        len: usize,
    },
    /// Padding (of a connection request, or of a padded connection datagram) is not zero.
    NonZeroPadding,
    /// Secure mode: a sealed datagram whose counter was accepted already, or lies too far
    /// behind the newest accepted to tell (a replay, or a datagram too late).
    Replayed,
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::TooShort { len } => write!(f, "datagram of {len} bytes is shorter than {MIN_DATAGRAM}"),
            Self::Truncated(field) => write!(f, "datagram ends inside the {field} field"),
            Self::UnknownType(t) => write!(f, "unknown datagram type {t:#04x}"),
            Self::UnknownMessage(h) => write!(f, "unknown message header {h:#04x}"),
            Self::ReservedBits(field) => write!(f, "reserved bits set in the {field} field"),
            Self::Empty => f.write_str("connection datagram carries nothing"),
            Self::BadChecksum => f.write_str("integrity check failed (corrupt, foreign or stale datagram)"),
            Self::OutOfRange(field) => write!(f, "{field} field out of range"),
            Self::NonCanonicalVarint(field) => write!(f, "non-canonical varint in the {field} field"),
            Self::NoContext(field) => write!(f, "{field} continues a run that was never started"),
            Self::TrailingBytes => f.write_str("trailing bytes after the last field"),
            Self::Unpadded { len } => write!(f, "connection request of {len} bytes is not padded to {REQUEST_SIZE}"),
            Self::NonZeroPadding => f.write_str("padding is not zero"),
            Self::Replayed => f.write_str("sealed datagram replayed, or too late to tell"),
        }
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn peek_type_classifies_every_byte() {
        for ty in 0..=255u8 {
            let d = [ty, 0, 0, 0, 0];
            match peek_type(&d) {
                Ok(t) => {
                    assert_eq!(t, ty);
                    if ty & 0x80 == 0 {
                        assert_eq!(key_class(ty), KeyClass::Connection);
                    }
                }
                Err(DecodeError::Empty) => assert!(ty == 0 || ty == 0x01, "padding alone carries nothing"),
                Err(DecodeError::ReservedBits(Field::Type)) => assert!(ty & 0x80 == 0),
                Err(DecodeError::UnknownType(t)) => assert!(t > 0x8B),
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert_eq!(key_class(0x80), KeyClass::Version);
        assert_eq!(key_class(0x85), KeyClass::Reply);
        assert_eq!(key_class(0x86), KeyClass::Connection);
        assert_eq!(key_class(0x88), KeyClass::Connection);
        assert_eq!(key_class(0x89), KeyClass::Connection);
        assert_eq!(key_class(0x8A), KeyClass::Version);
        assert_eq!(key_class(0x8B), KeyClass::Connection);
        assert_eq!(peek_type(&[0x82; 4]), Err(DecodeError::TooShort { len: 4 }));
    }

    #[test]
    fn fragment_payload_leaves_room_for_the_worst_header() {
        assert_eq!(fragment_payload(1200), 1200 - 11 - 17);
        assert!(fragment_payload(MIN_MTU) > 64);
    }

    #[test]
    fn a_granule_divides_the_negotiated_fragment_and_bounds_the_largest_packet() {
        assert_eq!(granule(1200), 73);
        assert_eq!(fragment_cut(1200, granule(1200)), 16 * 73, "16 granules at the negotiated size");
        assert_eq!(fragment_cut(1452, granule(1200)), 19 * 73, "19 at a grown one");
        for mtu in [MIN_MTU, 576, 1200, 1280, 1452, 9000, MAX_MTU] {
            let g = granule(mtu);
            assert!(GRANULES_PER_FRAGMENT * g <= fragment_payload(mtu), "{mtu}");
            assert!(fragment_payload(mtu) - GRANULES_PER_FRAGMENT * g < GRANULES_PER_FRAGMENT, "{mtu}");
            // Every packet size configs accepted with 65,536 fragments of the negotiated
            // size still fits the granule count.
            let before = (fragment_payload(mtu) as u64 * 65_536).min(u64::from(u32::MAX)) as usize;
            assert!(max_packet(mtu) >= before, "{mtu}");
            assert!(max_packet(mtu).div_ceil(g) <= MAX_GRANULES as usize, "{mtu}");
        }
    }

    #[test]
    fn errors_display_actionable_text() {
        assert_eq!(DecodeError::Truncated(Field::Payload).to_string(), "datagram ends inside the Payload field");
        assert!(DecodeError::BadChecksum.to_string().contains("integrity"));
    }
}
