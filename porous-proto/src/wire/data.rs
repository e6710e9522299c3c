//! Connection datagrams: a data frame, acknowledgements and pings, in any combination.
//!
//! ```text
//! type: 0 D w w A P Q Z
//! [frame id: w+1 bytes, truncated]  if D   (implicit: full u32)
//! [ping id: u8]                     if P
//! [ping ack id: u8]                 if Q
//! [ack section]                     if A
//! [messages ...]                    if D   (none at all: a sentinel frame)
//! [padding: zeros, at least one]    if Z   (never with D: a path MTU probe)
//! check: u32
//! ```
//!
//! A datagram without `D` is not a frame: it is never acknowledged and never resent, which
//! is how acknowledgements and pings travel outside the transfer queue (spec §3.1, §3.1.3).
//! With `D` it is exactly one frame of the spec, so acknowledgements are piggybacked on
//! data whenever both are due.
//!
//! Ack section (ranges of received frame ids, newest first; gaps are "not stated", never
//! "lost"):
//!
//! ```text
//! head: u8 = range count - 1 (bits 0-5), bit 6: a delay follows, bit 7 zero
//! largest: u16, the low bits of the newest acknowledged id   (implicit: full u32)
//! [delay: varint, in units of 32 us]   if bit 6: how long the newest id was held
//! len_0 - 1: varint
//! { gap - 1: varint, len - 1: varint }  for each further range
//! ```
//!
//! Truncated ids are expanded by the receiver (see [`Expand`]); the full values enter the
//! integrity check right after their fields.

use bytes::BufMut;

use super::check::{Check, Key};
use super::codec::{Reader, put_uint, put_varint, varint_len};
use super::message::{FullIds, IgnoreFullIds, Message, RunContext};
use super::secure::{AeadKey, SEALED_HEADER};
use super::{CHECK_LEN, DecodeError, Field};
use crate::seq::{FRAME_WINDOW, SeqSpace};

/// Most ranges one ack section may carry.
pub const MAX_ACK_RANGES: usize = 64;

const D: u8 = 0x40;
/// Ack section head: a delay field follows the newest id.
const DELAYED: u8 = 0x40;
const A: u8 = 0x08;
const P: u8 = 0x04;
const Q: u8 = 0x02;
/// Zeros follow up to the check (never with `D`).
const Z: u8 = 0x01;

/// An inclusive range of frame ids, `first..=last` in modular order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AckRange {
    /// Oldest id of the range.
    pub first: u32,
    /// Newest id of the range.
    pub last: u32,
}

/// How a receiver turns truncated ids back into full ones, from its own state.
pub trait Expand {
    /// A frame id sent as its low `bytes` bytes.
    fn frame_id(&self, truncated: u32, bytes: u32) -> u32;
    /// The newest acknowledged frame id, sent as its low 16 bits.
    fn ack_largest(&self, truncated: u16) -> u32;
    /// A packet id on `channel`, sent as its low 16 bits.
    fn packet_id(&self, channel: u8, truncated: u16) -> u32;
}

/// Expansion against fixed references: the windows as they stand before a session
/// exists (how a connecting side verifies the first data frame), or any fixed point a
/// test or fuzz target picks. Frame ids expand around `frame`, acknowledged ids below
/// `ack_limit`, packet ids (on every channel alike) around `packet`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedRefs {
    /// The frame id a received frame is expected near.
    pub frame: u32,
    /// One past the newest frame id this side sent.
    pub ack_limit: u32,
    /// The packet id a received packet is expected near.
    pub packet: u32,
}

impl Expand for FixedRefs {
    fn frame_id(&self, truncated: u32, bytes: u32) -> u32 {
        SeqSpace::FRAME.expand(truncated, 8 * bytes, self.frame)
    }

    fn ack_largest(&self, truncated: u16) -> u32 {
        SeqSpace::FRAME.expand_below(u32::from(truncated), 16, self.ack_limit)
    }

    fn packet_id(&self, _channel: u8, truncated: u16) -> u32 {
        SeqSpace::PACKET.expand(u32::from(truncated), 16, self.packet)
    }
}

/// The non-message parts of a connection datagram to encode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataHeader<'r> {
    /// The frame id and how many of its low bytes to send (1 to 4), if this is a frame.
    pub frame: Option<(u32, u32)>,
    /// A ping to be echoed.
    pub ping: Option<u8>,
    /// The echo of a received ping.
    pub ping_ack: Option<u8>,
    /// Acknowledged ranges, newest first, at most [`MAX_ACK_RANGES`].
    pub acks: &'r [AckRange],
    /// How long the newest acknowledged frame was held before this acknowledgement, in
    /// units of [`ACK_DELAY_UNIT`] (written only with acknowledgements, and only when not
    /// zero).
    pub ack_delay: u32,
}

/// The unit of the acknowledgement delay field: 32 microseconds.
pub const ACK_DELAY_UNIT: core::time::Duration = core::time::Duration::from_micros(32);

/// Bytes the delay field of an ack section takes (0 for no delay).
pub fn ack_delay_len(units: u32) -> usize {
    if units == 0 { 0 } else { varint_len(units) }
}

impl DataHeader<'_> {
    /// Bytes this header takes, type byte and check included.
    pub fn len(&self) -> usize {
        1 + self.frame.map_or(0, |(_, b)| b as usize)
            + usize::from(self.ping.is_some())
            + usize::from(self.ping_ack.is_some())
            + ack_section_len(self.acks)
            + if self.acks.is_empty() { 0 } else { ack_delay_len(self.ack_delay) }
            + CHECK_LEN
    }

    /// Whether the header carries nothing at all.
    pub fn is_empty(&self) -> bool {
        self.frame.is_none() && self.ping.is_none() && self.ping_ack.is_none() && self.acks.is_empty()
    }
}

/// Bytes an ack section with these ranges takes (0 for none).
pub fn ack_section_len(ranges: &[AckRange]) -> usize {
    let mut len = 0;
    let mut newer = None;
    for r in ranges {
        len += ack_range_len(newer, r);
        newer = Some(r);
    }
    len
}

/// Bytes `range` adds to an ack section after `newer` (the range before it, newest first),
/// or as the section's first range (head and newest id included).
pub fn ack_range_len(newer: Option<&AckRange>, range: &AckRange) -> usize {
    let s = SeqSpace::FRAME;
    let len = varint_len(s.distance(range.first, range.last));
    match newer {
        None => 1 + 2 + len,
        Some(n) => varint_len(s.distance(range.last, n.first) - 2) + len,
    }
}

/// Writes one connection datagram: header first, then messages, then the check.
#[derive(Debug)]
pub struct DataWriter<'o, B> {
    out: &'o mut B,
    start: usize,
    checked: usize,
    check: Check,
    key: Key,
    run: RunContext,
}

/// The full value of the id a message just wrote, if any, for the check.
#[derive(Default)]
struct LastFullId(Option<(usize, u32)>);

impl FullIds for LastFullId {
    fn full_id(&mut self, end: usize, full: u32) {
        self.0 = Some((end, full));
    }
}

impl<'o, B: BufMut + AsRef<[u8]> + AsMut<[u8]>> DataWriter<'o, B> {
    /// Starts a datagram in `out` (appending to what is there) with the given header. With
    /// a sealed key ([`Key::sealed`]) the datagram is secure mode's: the counter follows the
    /// type byte, the digest of the ids ends the plaintext, and [`DataWriter::finish`]
    /// encrypts all after the counter and appends the tag (a session's own key writes the
    /// same layout up to the tag and seals it with the connection's cipher).
    pub fn new(out: &'o mut B, key: Key, header: &DataHeader<'_>) -> Self {
        Self::padded(out, key, header, 0)
    }

    /// [`DataWriter::new`], with `padding` zero bytes after the header (a path MTU probe:
    /// a datagram of a chosen size that carries nothing of the application's). Padding
    /// goes only in a datagram that is not a frame; 0 writes none.
    pub fn padded(out: &'o mut B, key: Key, header: &DataHeader<'_>, padding: usize) -> Self {
        debug_assert!(!header.is_empty() && header.acks.len() <= MAX_ACK_RANGES);
        debug_assert!(padding == 0 || header.frame.is_none(), "a frame is never padded");
        let start = out.as_ref().len();
        let mut w = Self { out, start, checked: start, check: Check::new(key), key, run: RunContext::default() };
        let mut ty = 0;
        if let Some((_, bytes)) = header.frame {
            debug_assert!((1..=4).contains(&bytes));
            ty |= D | (((bytes - 1) as u8) << 4);
        }
        if !header.acks.is_empty() {
            ty |= A;
        }
        if header.ping.is_some() {
            ty |= P;
        }
        if header.ping_ack.is_some() {
            ty |= Q;
        }
        if padding > 0 {
            ty |= Z;
        }
        w.out.put_u8(ty);
        if let Some(counter) = key.counter() {
            // The clear header, the associated data.
            w.out.put_u32_le(counter as u32);
            w.checked = start + SEALED_HEADER;
        }
        if let Some((id, bytes)) = header.frame {
            put_uint(w.out, id, bytes as usize);
            w.full_id(id);
        }
        if let Some(p) = header.ping {
            w.out.put_u8(p);
        }
        if let Some(p) = header.ping_ack {
            w.out.put_u8(p);
        }
        if let Some(first) = header.acks.first() {
            let s = SeqSpace::FRAME;
            let delayed = if header.ack_delay > 0 { DELAYED } else { 0 };
            w.out.put_u8((header.acks.len() - 1) as u8 | delayed);
            w.out.put_u16_le(first.last as u16);
            w.full_id(first.last);
            if header.ack_delay > 0 {
                put_varint(w.out, header.ack_delay);
            }
            put_varint(w.out, s.distance(first.first, first.last));
            for (newer, older) in header.acks.iter().zip(header.acks.iter().skip(1)) {
                put_varint(w.out, s.distance(older.last, newer.first) - 2);
                put_varint(w.out, s.distance(older.first, older.last));
            }
        }
        w.out.put_bytes(0, padding);
        w
    }

    /// A truncated field was just written: its full value enters the check.
    fn full_id(&mut self, full: u32) {
        self.full_id_at(self.out.as_ref().len(), full);
    }

    /// Feeds the check with everything written since the last full value, then `full`.
    fn full_id_at(&mut self, end: usize, full: u32) {
        self.check.bytes(self.out.as_ref().get(self.checked..end).unwrap_or_default());
        self.check.full_id(full);
        self.checked = end;
    }

    /// Size `m` would take if appended now (see [`RunContext::encoded_len`]).
    pub fn message_len(&self, m: &Message<'_>, short_id: bool, last: bool) -> usize {
        self.run.encoded_len(m, short_id, last)
    }

    /// Appends a message. `last` must be set on the final message of the frame (it then
    /// omits its length); `short_id` allows a 16-bit explicit id.
    pub fn message(&mut self, m: &Message<'_>, short_id: bool, last: bool) {
        let mut pending = LastFullId::default();
        self.run.encode(m, short_id, last, self.out, &mut pending);
        if let Some((end, full)) = pending.0 {
            self.full_id_at(end, full);
        }
    }

    /// Bytes written so far (check excluded).
    pub fn len(&self) -> usize {
        self.out.as_ref().len() - self.start
    }

    /// Whether nothing has been written (never true: the type byte comes first).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the check (in secure mode the digest of the ids, then with [`Key::sealed`]
    /// encrypts the body and appends the tag); returns the datagram's length.
    pub fn finish(self) -> usize {
        match (self.check, self.key.sealing()) {
            (check @ Check::Sealed(_), Some((key, counter))) => {
                // The digest of the full ids ends the plaintext, sealed with the rest.
                self.out.put_u32_le(check.finish());
                let datagram = self.out.as_mut().get_mut(self.start..).unwrap_or_default();
                let tag = AeadKey::new(key).seal_datagram(counter, datagram);
                self.out.put_slice(&tag);
            }
            (mut check, _) => {
                check.bytes(self.out.as_ref().get(self.checked..).unwrap_or_default());
                let c = check.finish();
                self.out.put_u32_le(c);
            }
        }
        self.out.as_ref().len() - self.start
    }
}

/// A decoded and verified connection datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Data<'a> {
    /// The frame id, if the datagram is a frame.
    pub frame_id: Option<u32>,
    /// A ping to echo.
    pub ping: Option<u8>,
    /// An echoed ping.
    pub ping_ack: Option<u8>,
    /// How long the sender held the newest acknowledged frame before acknowledging it, in
    /// units of [`ACK_DELAY_UNIT`] (0 with no acknowledgements).
    pub ack_delay: u32,
    acks: Option<AckSection<'a>>,
    messages: &'a [u8],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AckSection<'a> {
    largest: u32,
    count: usize,
    body: &'a [u8],
}

/// Feeds the check with the input up to each truncated field, then its full value.
struct Verify<'a> {
    input: &'a [u8],
    checked: usize,
    check: Check,
}

impl Verify<'_> {
    fn at(&mut self, end: usize, full: u32) {
        self.check.bytes(self.input.get(self.checked..end).unwrap_or_default());
        self.check.full_id(full);
        self.checked = end;
    }
}

impl FullIds for Verify<'_> {
    fn full_id(&mut self, end: usize, full: u32) {
        self.at(end, full);
    }
}

impl<'a> Data<'a> {
    /// Decodes a connection datagram keyed with `key`, expanding truncated ids with `ctx`.
    /// Every field is validated and the check verified before this returns `Ok`; nothing is
    /// allocated. In secure mode the datagram is the plaintext of a sealed one and the key
    /// [`Key::opened`].
    ///
    /// The caller must not change the state `ctx` reads until it has finished iterating
    /// [`Data::messages`], which expands ids again.
    pub fn decode(datagram: &'a [u8], key: Key, ctx: &impl Expand) -> Result<Self, DecodeError> {
        Self::decode_with(datagram, key, ctx, |_| {})
    }

    /// [`Data::decode`], handing each message to `each` as verification decodes it, so a
    /// receiver needs no second pass. Nothing may act on the messages before this returns
    /// `Ok`: the check is verified last.
    pub(crate) fn decode_with(
        datagram: &'a [u8],
        key: Key,
        ctx: &impl Expand,
        each: impl FnMut(Message<'a>),
    ) -> Result<Self, DecodeError> {
        let ty = super::peek_type(datagram)?;
        if ty & 0x80 != 0 {
            return Err(DecodeError::UnknownType(ty));
        }
        if key.counter().is_some() {
            // A sealed datagram is opened first (`SealedParts::open_into`), then its
            // plaintext decoded with `Key::opened`.
            return Err(DecodeError::BadChecksum);
        }
        let (body, check) = datagram.split_at(datagram.len() - CHECK_LEN);
        let (data, computed) = Self::parse(body, Check::new(key), ctx, each)?;
        if computed.finish().to_le_bytes() != check {
            return Err(DecodeError::BadChecksum);
        }
        Ok(data)
    }

    /// The check a sender would append to `body` (a connection datagram without its check)
    /// for a receiver expanding ids with `ctx`. Lets tests and fuzzers craft datagrams that
    /// pass the integrity check.
    #[doc(hidden)]
    pub fn seal(body: &[u8], key: Key, ctx: &impl Expand) -> Result<u32, DecodeError> {
        match body.first() {
            None => Err(DecodeError::TooShort { len: 0 }),
            Some(&ty) if ty & 0x80 != 0 => Err(DecodeError::UnknownType(ty)),
            Some(_) => Data::parse(body, Check::new(key), ctx, |_| {}).map(|(_, c)| c.finish()),
        }
    }

    /// Parses and validates `body` (type byte up to the check, or a sealed datagram's type
    /// byte and decrypted body), expanding ids with `ctx` and feeding `check`; returns the
    /// datagram and the check.
    fn parse(
        body: &'a [u8],
        check: Check,
        ctx: &impl Expand,
        mut each: impl FnMut(Message<'a>),
    ) -> Result<(Self, Check), DecodeError> {
        let mut v = Verify { input: body, checked: 0, check };
        let mut r = Reader::new(body);
        let ty = r.u8(Field::Type)?;
        let frame_id = if ty & D != 0 {
            let bytes = u32::from((ty >> 4) & 0b11) + 1;
            let t = r.uint(bytes as usize, Field::FrameId)?;
            let full = ctx.frame_id(t, bytes);
            v.at(r.position(), full);
            Some(full)
        } else {
            None
        };
        let ping = if ty & P != 0 { Some(r.u8(Field::Ping)?) } else { None };
        let ping_ack = if ty & Q != 0 { Some(r.u8(Field::Ping)?) } else { None };
        let mut ack_delay = 0;
        let acks = if ty & A != 0 {
            let head = r.u8(Field::AckRanges)?;
            if head & 0x80 != 0 {
                return Err(DecodeError::ReservedBits(Field::AckRanges));
            }
            let count = usize::from(head & 0x3F) + 1;
            let largest = ctx.ack_largest(r.uint(2, Field::AckRanges)? as u16);
            v.at(r.position(), largest);
            if head & DELAYED != 0 {
                ack_delay = r.varint(Field::AckRanges)?;
                if ack_delay == 0 {
                    // A zero delay is written by leaving the field out: one encoding only.
                    return Err(DecodeError::OutOfRange(Field::AckRanges));
                }
            }
            let from = r.position();
            let mut span: u64 = 0;
            for i in 0..count {
                if i > 0 {
                    span += u64::from(r.varint(Field::AckRanges)?) + 1;
                }
                span += u64::from(r.varint(Field::AckRanges)?) + 1;
                if span > u64::from(FRAME_WINDOW) {
                    return Err(DecodeError::OutOfRange(Field::AckSpan));
                }
            }
            Some(AckSection { largest, count, body: body.get(from..r.position()).unwrap_or_default() })
        } else {
            None
        };
        let messages = r.rest();
        if frame_id.is_some() {
            let mut run = RunContext::default();
            let mut mr = Reader::new(messages);
            let offset = r.position();
            let mut expand = |ch: u8, t: u16| ctx.packet_id(ch, t);
            // Message positions are relative to the messages region.
            let mut shifted = Shift { inner: &mut v, offset };
            while !mr.is_empty() {
                each(run.decode(&mut mr, &mut expand, &mut shifted)?);
            }
        } else if ty & Z != 0 {
            // A probe's padding: one encoding only (zeros, at least one of them).
            if messages.is_empty() {
                return Err(DecodeError::Truncated(Field::Padding));
            }
            if messages.iter().any(|&b| b != 0) {
                return Err(DecodeError::NonZeroPadding);
            }
        } else if !messages.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        let Verify { checked, mut check, .. } = v;
        check.bytes(body.get(checked..).unwrap_or_default());
        Ok((Self { frame_id, ping, ping_ack, ack_delay, acks, messages }, check))
    }

    /// The acknowledged ranges, newest first.
    pub fn acks(&self) -> AckRanges<'a> {
        match self.acks {
            Some(a) => AckRanges { next_last: Some(a.largest), left: a.count, r: Reader::new(a.body), first: true },
            None => AckRanges { next_last: None, left: 0, r: Reader::new(&[]), first: true },
        }
    }

    /// The newest acknowledged frame id, if any.
    pub fn ack_largest(&self) -> Option<u32> {
        self.acks.map(|a| a.largest)
    }

    /// The messages of the frame, ids expanded with `ctx` (which must be in the state it was
    /// in for [`Data::decode`]).
    pub fn messages<'c, E: Expand>(&self, ctx: &'c E) -> Messages<'a, 'c, E> {
        Messages { r: Reader::new(self.messages), run: RunContext::default(), ctx }
    }

    /// Bytes of messages the frame carries (0 for a sentinel frame or a non-frame).
    pub fn messages_len(&self) -> usize {
        self.messages.len()
    }
}

struct Shift<'v, 'a> {
    inner: &'v mut Verify<'a>,
    offset: usize,
}

impl FullIds for Shift<'_, '_> {
    fn full_id(&mut self, end: usize, full: u32) {
        self.inner.at(self.offset + end, full);
    }
}

/// Iterator over the acknowledged ranges of a verified datagram.
#[derive(Debug, Clone)]
pub struct AckRanges<'a> {
    next_last: Option<u32>,
    left: usize,
    r: Reader<'a>,
    first: bool,
}

impl Iterator for AckRanges<'_> {
    type Item = AckRange;

    fn next(&mut self) -> Option<AckRange> {
        if self.left == 0 {
            return None;
        }
        let s = SeqSpace::FRAME;
        let mut last = self.next_last?;
        if !self.first {
            // Validated by `Data::decode`; an error here cannot happen, and ends the walk.
            let gap = self.r.varint(Field::AckRanges).ok()?;
            last = s.sub(last, gap + 1);
        }
        let len = self.r.varint(Field::AckRanges).ok()?;
        let first = s.sub(last, len);
        self.first = false;
        self.left -= 1;
        self.next_last = Some(s.sub(first, 1));
        Some(AckRange { first, last })
    }
}

/// Iterator over the messages of a verified frame.
#[derive(Debug)]
pub struct Messages<'a, 'c, E> {
    r: Reader<'a>,
    run: RunContext,
    ctx: &'c E,
}

impl<'a, E: Expand> Iterator for Messages<'a, '_, E> {
    type Item = Message<'a>;

    fn next(&mut self) -> Option<Message<'a>> {
        if self.r.is_empty() {
            return None;
        }
        let ctx = self.ctx;
        let mut expand = |ch: u8, t: u16| ctx.packet_id(ch, t);
        // Validated by `Data::decode`; an error here cannot happen, and ends the walk.
        self.run.decode(&mut self.r, &mut expand, &mut IgnoreFullIds).ok()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::wire::message::{Fragment, MessageKind, SendMode};
    use crate::wire::secure::{self, SealedParts, SecretKey};

    type Fixed = FixedRefs;

    const CTX: Fixed = Fixed { frame: 0xFFFF_FFF0, ack_limit: 0x0000_0010, packet: 0xFF_FFF0 };

    fn msg(id: u32, payload: &[u8]) -> Message<'_> {
        Message {
            kind: MessageKind::Fragment(SendMode::Reliable),
            channel: 2,
            id,
            dependency: 1,
            fragment: Fragment::WHOLE,
            payload,
        }
    }

    fn encode(header: &DataHeader<'_>, msgs: &[Message<'_>], key: Key) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = DataWriter::new(&mut out, key, header);
        for (i, m) in msgs.iter().enumerate() {
            w.message(m, true, i + 1 == msgs.len());
        }
        w.finish();
        out
    }

    #[test]
    fn full_datagram_roundtrips_across_the_wrap() {
        let acks =
            [AckRange { first: 0xFFFF_FFFE, last: 0x0000_0003 }, AckRange { first: 0xFFFF_FF00, last: 0xFFFF_FFF0 }];
        let header = DataHeader {
            frame: Some((0xFFFF_FFFF, 1)),
            ping: Some(9),
            ping_ack: Some(200),
            acks: &acks,
            ack_delay: 300,
        };
        let msgs = [msg(0xFF_FFFF, b"hello"), msg(0, b"world")];
        let key = Key::connection(1, 2);
        let bytes = encode(&header, &msgs, key);
        assert_eq!(bytes.len(), header.len() + 1 + 1 + 2 + 1 + 5 + 1 + 5);
        let d = Data::decode(&bytes, key, &CTX).unwrap();
        assert_eq!(d.frame_id, Some(0xFFFF_FFFF));
        assert_eq!((d.ping, d.ping_ack), (Some(9), Some(200)));
        assert_eq!(d.acks().collect::<Vec<_>>(), acks);
        assert_eq!(d.messages(&CTX).collect::<Vec<_>>(), msgs);
    }

    #[test]
    fn sentinel_frames_ack_only_and_ping_only_datagrams() {
        let key = Key::connection(3, 4);
        for header in [
            DataHeader { frame: Some((5, 4)), ..Default::default() },
            DataHeader { ping: Some(1), ..Default::default() },
            DataHeader { acks: &[AckRange { first: 1, last: 1 }], ..Default::default() },
        ] {
            let bytes = encode(&header, &[], key);
            assert_eq!(bytes.len(), header.len());
            let d = Data::decode(&bytes, key, &Fixed { frame: 0, ack_limit: 10, packet: 0 }).unwrap();
            assert_eq!(d.frame_id, header.frame.map(|f| f.0));
            assert_eq!(d.messages_len(), 0);
        }
    }

    #[test]
    fn a_wrongly_expanded_id_fails_the_check() {
        let key = Key::connection(1, 2);
        let bytes = encode(&DataHeader { frame: Some((0x1_0005, 2)), ..Default::default() }, &[msg(7, b"x")], key);
        let good = Fixed { frame: 0x1_0000, ack_limit: 0, packet: 0 };
        assert!(Data::decode(&bytes, key, &good).is_ok());
        // A receiver whose window moved far ahead expands the same bytes to 0x2_0005.
        let stale = Fixed { frame: 0x2_0000, ..good };
        assert_eq!(Data::decode(&bytes, key, &stale), Err(DecodeError::BadChecksum));
        // Likewise for a packet id.
        let stale_packet = Fixed { packet: 0x1_8000, ..good };
        assert_eq!(Data::decode(&bytes, key, &stale_packet), Err(DecodeError::BadChecksum));
    }

    /// Opens a sealed datagram as a receiver does: decrypt into its own buffer, then decode.
    fn open_sealed(
        bytes: &[u8],
        key: &SecretKey,
        counter: u64,
        ctx: &Fixed,
    ) -> Result<Vec<Message<'static>>, DecodeError> {
        let parts = SealedParts::split(bytes)?;
        let mut plain = bytes::BytesMut::new();
        if !parts.open_into(&AeadKey::new(*key), counter, &mut plain) {
            return Err(DecodeError::BadChecksum);
        }
        let plain: &'static [u8] = Box::leak(plain.to_vec().into_boxed_slice());
        let d = Data::decode(plain, Key::opened(), ctx)?;
        Ok(d.messages(ctx).collect())
    }

    #[test]
    fn sealed_datagrams_roundtrip_and_a_wrongly_expanded_id_fails_the_digest() {
        let sk = SecretKey::from_bytes([3; 32]);
        let acks = [AckRange { first: 1, last: 3 }];
        let header = DataHeader { frame: Some((0x1_0005, 2)), ping: Some(1), acks: &acks, ..Default::default() };
        let msgs = [msg(7, b"x"), msg(8, b"yz")];
        let plain = encode(&header, &msgs, Key::connection(1, 2));
        let bytes = encode(&header, &msgs, Key::sealed(sk, 42));
        assert_eq!(bytes.len(), plain.len() + secure::SEAL_EXTRA);
        assert_eq!(&bytes[1..5], &42u32.to_le_bytes(), "the counter follows the type byte");
        assert_ne!(&bytes[5..bytes.len() - 16], &plain[1..plain.len() - 4], "the body is encrypted");
        // A session writes the layout without the tag and seals with its own cipher: the
        // same bytes.
        let mut unsealed = encode(&header, &msgs, Key::unsealed(42));
        let tag = AeadKey::new(sk).seal_datagram(42, &mut unsealed);
        unsealed.extend_from_slice(&tag);
        assert_eq!(unsealed, bytes);
        let good = Fixed { frame: 0x1_0000, ack_limit: 10, packet: 0 };
        assert_eq!(open_sealed(&bytes, &sk, 42, &good), Ok(msgs.to_vec()));
        // The plain decoder never takes a sealed key.
        assert_eq!(Data::decode(&bytes, Key::sealed(sk, 42), &good), Err(DecodeError::BadChecksum));
        // A receiver expanding a frame, acknowledgement or packet id differently: the tag
        // verifies, the digest of the ids does not.
        for stale in [
            Fixed { frame: 0x2_0000, ..good },
            Fixed { ack_limit: 0x1_0010, ..good },
            Fixed { packet: 0x1_8000, ..good },
        ] {
            assert_eq!(open_sealed(&bytes, &sk, 42, &stale), Err(DecodeError::BadChecksum));
        }
        // Another counter, another key, any flipped bit.
        assert_eq!(open_sealed(&bytes, &sk, 43, &good), Err(DecodeError::BadChecksum));
        assert_eq!(open_sealed(&bytes, &SecretKey::from_bytes([4; 32]), 42, &good), Err(DecodeError::BadChecksum));
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(open_sealed(&b, &sk, 42, &good).is_err(), "bit {i}");
        }
    }

    #[test]
    fn a_padded_probe_roundtrips_at_the_size_asked() {
        let k = Key::connection(1, 2);
        let header = DataHeader { ping: Some(7), ping_ack: Some(3), ..DataHeader::default() };
        for size in [header.len() + 1, 600, 1452, 9000] {
            let mut out = Vec::new();
            let w = DataWriter::padded(&mut out, k, &header, size - header.len());
            assert_eq!(w.finish(), size);
            assert_eq!(out.len(), size);
            let d = Data::decode(&out, k, &CTX).unwrap();
            assert_eq!((d.frame_id, d.ping, d.ping_ack, d.acks().count()), (None, Some(7), Some(3), 0));
            // Any flipped bit fails, padding included.
            let mut bad = out.clone();
            bad[size / 2] ^= 1;
            assert!(Data::decode(&bad, k, &CTX).is_err());
        }
    }

    fn sealed(bytes: &[u8], key: Key) -> Vec<u8> {
        let mut out = bytes.to_vec();
        let mut c = Check::new(key);
        c.bytes(&out);
        out.extend_from_slice(&c.finish().to_le_bytes());
        out
    }

    #[test]
    fn malformed_datagrams_give_precise_errors() {
        let k = Key::connection(1, 2);
        let dec = |b: &[u8]| Data::decode(b, k, &CTX).map(|_| ());
        assert_eq!(dec(&[0x40, 1, 2]), Err(DecodeError::TooShort { len: 3 }));
        assert_eq!(dec(&sealed(&[0x00], k)), Err(DecodeError::Empty));
        assert_eq!(dec(&sealed(&[0x41, 1], k)), Err(DecodeError::ReservedBits(Field::Type)), "a padded frame");
        assert_eq!(dec(&sealed(&[0x01], k)), Err(DecodeError::Empty), "padding alone");
        assert_eq!(dec(&sealed(&[0x05], k)), Err(DecodeError::Truncated(Field::Ping)));
        assert_eq!(dec(&sealed(&[0x05, 1], k)), Err(DecodeError::Truncated(Field::Padding)));
        assert_eq!(dec(&sealed(&[0x05, 1, 0, 1, 0], k)), Err(DecodeError::NonZeroPadding));
        assert_eq!(dec(&sealed(&[0x10, 1], k)), Err(DecodeError::ReservedBits(Field::Type)));
        assert_eq!(dec(&sealed(&[0x70, 1, 2], k)), Err(DecodeError::Truncated(Field::FrameId)));
        assert_eq!(dec(&sealed(&[0x04], k)), Err(DecodeError::Truncated(Field::Ping)));
        assert_eq!(dec(&sealed(&[0x04, 1, 9], k)), Err(DecodeError::TrailingBytes));
        assert_eq!(dec(&sealed(&[0x08, 0x80, 0, 0, 0], k)), Err(DecodeError::ReservedBits(Field::AckRanges)));
        // A delay flag with a zero delay: the one encoding of zero is no field.
        assert_eq!(dec(&sealed(&[0x08, 0x40, 0, 0, 0, 0], k)), Err(DecodeError::OutOfRange(Field::AckRanges)));
        assert_eq!(dec(&sealed(&[0x08, 1, 0, 0, 0], k)), Err(DecodeError::Truncated(Field::AckRanges)));
        // Span beyond the frame window: 65535 + 1 + 0 + 1 > 65536.
        assert_eq!(
            dec(&sealed(&[0x08, 1, 0, 0, 0xFF, 0xFF, 0x03, 0, 0], k)),
            Err(DecodeError::OutOfRange(Field::AckSpan))
        );
        // A message error inside a frame surfaces as is.
        assert_eq!(dec(&sealed(&[0x40, 0, 0x00], k)), Err(DecodeError::NoContext(Field::PacketId)));
        // Correct structure, wrong check.
        let mut bytes = encode(&DataHeader { ping: Some(1), ..Default::default() }, &[], k);
        let n = bytes.len();
        bytes[n - 1] ^= 1;
        assert_eq!(dec(&bytes), Err(DecodeError::BadChecksum));
        // A control type handed to the data decoder.
        assert_eq!(dec(&sealed(&[0x82], k)), Err(DecodeError::UnknownType(0x82)));
    }

    #[test]
    fn ack_section_len_matches_the_encoding() {
        let acks: Vec<_> = (0..MAX_ACK_RANGES as u32)
            .map(|i| AckRange { first: 1_000_000 - i * 300 - 100, last: 1_000_000 - i * 300 })
            .collect();
        let header = DataHeader { acks: &acks, ..Default::default() };
        let bytes = encode(&header, &[], Key::version());
        assert_eq!(bytes.len(), header.len());
    }
}
