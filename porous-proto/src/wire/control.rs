//! Control datagrams: the handshake (spec §2.3) and disconnection (§2.5).
//!
//! | type | datagram | body | keyed with |
//! |---|---|---|---|
//! | `0x80` | connection request | [`ConnectRequest`], zero padding to [`REQUEST_SIZE`] | [`Key::version`] |
//! | `0x81` | request + acknowledgement | the same, padded likewise | [`Key::reply`] |
//! | `0x82` | acknowledgement | empty | [`Key::reply`] |
//! | `0x83` | acknowledgement of another id | `acked: u32` | [`Key::reply`] |
//! | `0x84` | refusal | `reason: u8`, `detail: varint` | [`Key::reply`] |
//! | `0x85` | challenge | 16-byte cookie | [`Key::reply`] |
//! | `0x86` | disconnection request | empty | [`Key::connection`] |
//! | `0x87` | disconnection acknowledgement | empty | [`Key::connection`] |
//!
//! Every reply is keyed with the nonce of the request it answers, so only the requester
//! (who alone knows its nonce, barring an on-path observer) accepts it: an acknowledgement
//! of the right id, a refusal or a challenge cannot be forged blind. Requests are padded to
//! at least [`REQUEST_SIZE`] bytes, the size of the largest reply, so no reply to an
//! unauthenticated request is larger than the request (no amplification).
//!
//! Request body (little-endian):
//!
//! ```text
//! nonce u32 | frame_base u32 | packet_base u24 | app_version u32 | channels u8
//! | mtu varint | max_packet varint | bandwidth_in varint | bandwidth_out varint
//! | flags u8 (bit 0: cookie follows; others zero) | [cookie 16 bytes] | zero padding
//! ```
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
/// Length of a challenge cookie.
pub const COOKIE_LEN: usize = 16;

/// An opaque token a host under load hands a requester to echo (see `docs/security.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Cookie(pub [u8; COOKIE_LEN]);

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
}

/// A decoded control datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// A connection request.
    Request(ConnectRequest),
    /// A connection request that also acknowledges the receiver's own request.
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
    /// A disconnection request.
    Disconnect,
    /// Acknowledges a disconnection request.
    DisconnectAck,
}

pub(crate) const T_REQUEST: u8 = 0x80;
pub(crate) const T_REQUEST_ACK: u8 = 0x81;
pub(crate) const T_ACK: u8 = 0x82;
pub(crate) const T_ACK_OTHER: u8 = 0x83;
pub(crate) const T_REFUSE: u8 = 0x84;
pub(crate) const T_CHALLENGE: u8 = 0x85;
pub(crate) const T_DISCONNECT: u8 = 0x86;
pub(crate) const T_DISCONNECT_ACK: u8 = 0x87;

impl Control {
    fn type_byte(&self) -> u8 {
        match self {
            Self::Request(_) => T_REQUEST,
            Self::RequestAck(_) => T_REQUEST_ACK,
            Self::Ack => T_ACK,
            Self::AckOther { .. } => T_ACK_OTHER,
            Self::Refuse(_) => T_REFUSE,
            Self::Challenge(_) => T_CHALLENGE,
            Self::Disconnect => T_DISCONNECT,
            Self::DisconnectAck => T_DISCONNECT_ACK,
        }
    }

    /// Appends the datagram, check included, to `out`; returns its length.
    pub fn encode<B: BufMut + AsRef<[u8]>>(&self, key: Key, out: &mut B) -> usize {
        let start = out.as_ref().len();
        out.put_u8(self.type_byte());
        match self {
            Self::Request(r) | Self::RequestAck(r) => {
                put_request(out, r);
                let written = out.as_ref().len() - start;
                out.put_bytes(0, (REQUEST_SIZE - CHECK_LEN).saturating_sub(written));
            }
            Self::AckOther { acked } => out.put_u32_le(*acked),
            Self::Refuse(reason) => {
                let (code, detail) = refuse_code(*reason);
                out.put_u8(code);
                put_varint(out, detail);
            }
            Self::Challenge(cookie) => out.put_slice(&cookie.0),
            Self::Ack | Self::Disconnect | Self::DisconnectAck => {}
        }
        let mut c = check::Check::new(key);
        c.bytes(out.as_ref().get(start..).unwrap_or_default());
        out.put_u32_le(c.finish());
        out.as_ref().len() - start
    }

    /// Decodes a control datagram whose check is keyed with `key`. The check is verified
    /// before any field is trusted.
    pub fn decode(datagram: &[u8], key: Key) -> Result<Self, DecodeError> {
        let ty = super::peek_type(datagram)?;
        if !check::verify_plain(datagram, key) {
            return Err(DecodeError::BadChecksum);
        }
        // `peek_type` guaranteed a type byte and a check.
        let mut r = Reader::new(datagram.get(1..datagram.len() - CHECK_LEN).unwrap_or_default());
        let out = match ty {
            T_REQUEST | T_REQUEST_ACK => {
                if datagram.len() < REQUEST_SIZE {
                    return Err(DecodeError::Unpadded { len: datagram.len() });
                }
                let req = read_request(&mut r)?;
                if r.rest().iter().any(|&b| b != 0) {
                    return Err(DecodeError::NonZeroPadding);
                }
                return Ok(if ty == T_REQUEST { Self::Request(req) } else { Self::RequestAck(req) });
            }
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
            T_DISCONNECT => Self::Disconnect,
            T_DISCONNECT_ACK => Self::DisconnectAck,
            other => return Err(DecodeError::UnknownType(other)),
        };
        if !r.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        Ok(out)
    }
}

fn put_request<B: BufMut>(out: &mut B, r: &ConnectRequest) {
    out.put_u32_le(r.nonce);
    out.put_u32_le(r.frame_base);
    put_uint(out, r.packet_base, 3);
    out.put_u32_le(r.app_version);
    out.put_u8(r.channels);
    put_varint(out, r.mtu);
    put_varint(out, r.max_packet);
    put_varint(out, r.bandwidth_in);
    put_varint(out, r.bandwidth_out);
    match r.cookie {
        Some(c) => {
            out.put_u8(1);
            out.put_slice(&c.0);
        }
        None => out.put_u8(0),
    }
}

fn read_request(r: &mut Reader<'_>) -> Result<ConnectRequest, DecodeError> {
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
    let cookie = match r.u8(Field::Flags)? {
        0 => None,
        1 => {
            let mut c = [0; COOKIE_LEN];
            c.copy_from_slice(r.bytes(COOKIE_LEN, Field::Cookie)?);
            Some(Cookie(c))
        }
        _ => return Err(DecodeError::ReservedBits(Field::Flags)),
    };
    Ok(ConnectRequest {
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
    })
}

fn refuse_code(reason: RefuseReason) -> (u8, u32) {
    match reason {
        RefuseReason::AppVersion(v) => (1, v),
        RefuseReason::ChannelCount(c) => (2, u32::from(c)),
        RefuseReason::Mtu(m) => (3, m),
        RefuseReason::HostFull => (4, 0),
        RefuseReason::NotAccepting => (5, 0),
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
        _ => return Err(bad),
    })
}

#[cfg(test)]
mod tests {
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
        }
    }

    fn all() -> Vec<Control> {
        let req = sample_request();
        let plain = ConnectRequest { cookie: None, ..req };
        vec![
            Control::Request(req),
            Control::Request(plain),
            Control::RequestAck(req),
            Control::Ack,
            Control::AckOther { acked: 5 },
            Control::Refuse(RefuseReason::AppVersion(9)),
            Control::Refuse(RefuseReason::ChannelCount(255)),
            Control::Refuse(RefuseReason::Mtu(128)),
            Control::Refuse(RefuseReason::HostFull),
            Control::Refuse(RefuseReason::NotAccepting),
            Control::Challenge(Cookie([3; COOKIE_LEN])),
            Control::Disconnect,
            Control::DisconnectAck,
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
                Control::Request(_) | Control::RequestAck(_) => assert_eq!(n, REQUEST_SIZE),
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
        Control::Request(sample_request()).encode(k, &mut req);
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
        put_request(&mut fields, &r);
        fields.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&fields, k), k), Err(DecodeError::OutOfRange(Field::Mtu)));
        let mut b = vec![0x80];
        put_request(&mut b, &ConnectRequest { max_packet: 0, ..r });
        b.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::OutOfRange(Field::Mtu)));
        let mut b = vec![0x80];
        put_request(&mut b, &ConnectRequest { mtu: 1200, max_packet: 0, ..r });
        b.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::OutOfRange(Field::MaxPacket)));
        let mut b = vec![0x80];
        put_request(&mut b, &ConnectRequest { mtu: 1200, ..r });
        let flags_at = b.len() - 1;
        b[flags_at] = 2;
        b.resize(REQUEST_SIZE - CHECK_LEN, 0);
        assert_eq!(Control::decode(&sealed(&b, k), k), Err(DecodeError::ReservedBits(Field::Flags)));
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
        assert_eq!(Control::decode(&sealed(&[0x88], rk), rk), Err(DecodeError::UnknownType(0x88)));
    }
}
