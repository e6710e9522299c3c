//! Messages: what a data frame carries.
//!
//! A message starts with one header byte:
//!
//! ```text
//!  7 6   5   4   3 2    1   0
//! [kind][N][W][ dep ][ F ][ L ]   kind 00 reliable, 01 unreliable, 10 passive fragment
//! [ 11 ][N][W][ dep ][ sub  ]     kind 11 control: sub 00 sentinel, 01 window ack
//! ```
//!
//! - `N` (new run): an explicit channel byte and packet id follow. Without it the message
//!   continues the previous one: same channel, id + 1 (a fragment) or the same id (a
//!   sentinel for the packet just sent).
//! - `W` (wide): the explicit id is the full 24-bit id (3 bytes) instead of its low 16 bits.
//! - `dep`: 00 no dependency, 01 distance 1, 10 the previous message's dependency target
//!   (only with `N` clear), 11 an explicit varint distance in `1..N_Q`.
//! - `F`: fragment index and `count - 2` follow as varints, both in *granules* of the
//!   connection (see [`super::granule`]): the payload covers granules `index..` of a
//!   packet `count` granules long.
//! - `L`: an explicit varint payload length follows; without it the payload runs to the end
//!   of the frame, so only the last message may omit it.
//!
//! Field order after the header: channel, id, dependency, fragment index, fragment count,
//! length, payload. A window acknowledgement always has `N` and `W` set and no dependency;
//! it names an id in the opposite direction's space, so it neither reads nor updates the
//! run context.
//!
//! A truncated (16-bit) id is expanded by the receiver relative to its channel's receive
//! window base, and its full value enters the integrity check (see [`super::check`]).

use bytes::BufMut;

use super::codec::{Reader, varint_len};
use super::{DecodeError, Field};
pub use crate::event::SendMode;
use crate::seq::{PACKET_WINDOW, SeqSpace};

/// The most granules a fragmented packet may span (see [`super::granule`]): `2^21`, so a
/// granule index and `count - 2` each take at most 3 varint bytes.
pub const MAX_GRANULES: u32 = 1 << 21;
/// Granules in a fragment of the negotiated datagram size (see [`super::granule`]).
pub const GRANULES_PER_FRAGMENT: usize = 16;
/// The most bytes a message header (everything but the payload) can take.
pub const MESSAGE_HEADER_MAX: usize = 1 + 1 + 3 + 3 + 3 + 3 + 3;

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum MessageKind {
    /// A fragment (possibly the only one) of a packet sent in the given mode.
    Fragment(SendMode),
    /// A sentinel packet message (spec §3.2.2): the id and dependency of an unreliable
    /// packet, sent reliably so the receiver can skip that packet if its data never comes.
    Sentinel,
    /// A window acknowledgement (spec §3.2.1): the receiver's window now starts after `id`.
    WindowAck,
}

impl MessageKind {
    /// Whether the transfer layer must resend this message until acknowledged.
    pub const fn is_reliable(self) -> bool {
        !matches!(self, Self::Fragment(SendMode::Unreliable))
    }
}

/// Position of a fragment within its packet, in granules of the connection (see
/// [`super::granule`]): the fragment's payload starts at byte `index * granule` of the
/// packet and covers `payload.len().div_ceil(granule)` granules, a whole number of them
/// unless it ends the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// The first granule the fragment covers, `0..count`.
    pub index: u32,
    /// The packet's length in granules (rounded up); 1 for an unfragmented packet, which
    /// travels as one message of any length.
    pub count: u32,
}

impl Fragment {
    /// An unfragmented packet.
    pub const WHOLE: Self = Self { index: 0, count: 1 };
}

/// One message, decoded (ids expanded to their full values) or to be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// What the message is.
    pub kind: MessageKind,
    /// The channel, `0..channel count`.
    pub channel: u8,
    /// Full 24-bit packet id. For a window acknowledgement, the id `m` it acknowledges.
    pub id: u32,
    /// Distance back to the packet this one depends on; 0 for none (spec §3.2.3).
    pub dependency: u32,
    /// Fragment position; [`Fragment::WHOLE`] for control messages.
    pub fragment: Fragment,
    /// The fragment's bytes; empty for control messages.
    pub payload: &'a [u8],
}

const KIND_CONTROL: u8 = 0b11;
const N: u8 = 0x20;
const W: u8 = 0x10;
const F: u8 = 0x02;
const L: u8 = 0x01;
const DEP_NONE: u8 = 0b00;
const DEP_ONE: u8 = 0b01;
const DEP_SAME: u8 = 0b10;
const DEP_EXPLICIT: u8 = 0b11;
const SUB_SENTINEL: u8 = 0b00;
const SUB_WINDOW_ACK: u8 = 0b01;

/// The previous message of a run within one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Prev {
    channel: u8,
    id: u32,
    dependency: u32,
}

/// Run context of a frame being encoded or decoded: what the previous fragment or sentinel
/// message was. Starts empty at the beginning of every frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunContext {
    prev: Option<Prev>,
}

/// How the encoder writes one message given the context; computed once, used for both the
/// size and the bytes so the two can never disagree.
#[derive(Clone, Copy, Debug)]
struct Plan {
    header: u8,
    explicit_id: bool,
    wide: bool,
    dependency_varint: bool,
    fragmented: bool,
}

/// The fields of one message before its payload: at most a header, a channel, a 3-byte id
/// and four 5-byte varints.
#[derive(Default)]
struct Fields {
    buf: [u8; 32],
    len: usize,
}

impl Fields {
    #[inline]
    fn put(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    #[inline]
    fn put_all(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) {
            dst.copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }

    #[inline]
    fn varint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.put((v as u8) | 0x80);
            v >>= 7;
        }
        self.put(v as u8);
    }

    fn bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

/// Receives the full value of every truncated id, with the reader's or writer's position
/// right after its field: the integrity check covers full values, not truncated ones.
pub(crate) trait FullIds {
    fn full_id(&mut self, end: usize, full: u32);
}

/// Ignores full values (for passes after the datagram was verified).
pub(crate) struct IgnoreFullIds;

impl FullIds for IgnoreFullIds {
    fn full_id(&mut self, _end: usize, _full: u32) {}
}

fn mode_bits(mode: SendMode) -> u8 {
    match mode {
        SendMode::Reliable => 0b00,
        SendMode::Unreliable => 0b01,
        SendMode::Passive => 0b10,
    }
}

impl RunContext {
    fn continues(&self, m: &Message<'_>) -> bool {
        let Some(prev) = self.prev else { return false };
        if prev.channel != m.channel {
            return false;
        }
        match m.kind {
            MessageKind::Fragment(_) => SeqSpace::PACKET.add(prev.id, 1) == m.id,
            MessageKind::Sentinel => prev.id == m.id,
            MessageKind::WindowAck => false,
        }
    }

    fn plan(&self, m: &Message<'_>, short_id: bool) -> Plan {
        let is_window_ack = m.kind == MessageKind::WindowAck;
        let explicit_id = is_window_ack || !self.continues(m);
        let wide = explicit_id && (is_window_ack || !short_id);
        let (dep_bits, dependency_varint) = if is_window_ack || m.dependency == 0 {
            (DEP_NONE, false)
        } else if m.dependency == 1 {
            (DEP_ONE, false)
        } else if !explicit_id
            && self.prev.is_some_and(|p| {
                p.dependency != 0 && p.dependency + SeqSpace::PACKET.distance(p.id, m.id) == m.dependency
            })
        {
            (DEP_SAME, false)
        } else {
            (DEP_EXPLICIT, true)
        };
        let fragmented = m.fragment.count > 1;
        let (kind_bits, low) = match m.kind {
            MessageKind::Fragment(mode) => (mode_bits(mode), if fragmented { F } else { 0 }),
            MessageKind::Sentinel => (KIND_CONTROL, SUB_SENTINEL),
            MessageKind::WindowAck => (KIND_CONTROL, SUB_WINDOW_ACK),
        };
        let mut header = (kind_bits << 6) | (dep_bits << 2) | low;
        if explicit_id {
            header |= N;
        }
        if wide {
            header |= W;
        }
        Plan { header, explicit_id, wide, dependency_varint, fragmented }
    }

    /// Encoded size of `m` after this context, with an explicit length field unless `last`.
    /// `short_id`: whether an explicit id may be sent as its low 16 bits (the sender knows
    /// the receiver can expand it; see `ChannelSender`).
    pub fn encoded_len(&self, m: &Message<'_>, short_id: bool, last: bool) -> usize {
        let p = self.plan(m, short_id);
        let mut len = 1;
        if p.explicit_id {
            len += 1 + if p.wide { 3 } else { 2 };
        }
        if p.dependency_varint {
            len += varint_len(m.dependency);
        }
        if let MessageKind::Fragment(_) = m.kind {
            if p.fragmented {
                len += varint_len(m.fragment.index) + varint_len(m.fragment.count - 2);
            }
            if !last {
                len += varint_len(m.payload.len() as u32);
            }
            len += m.payload.len();
        }
        len
    }

    /// Size of `m` encoded with every field explicit: an upper bound of its size in any
    /// context, used to guarantee a frame still fits after messages are removed from it.
    pub fn explicit_len(m: &Message<'_>) -> usize {
        // What `encoded_len` gives with no run context, a wide id and an explicit length
        // (the test below holds the two together), without planning: header, channel and
        // a 3-byte id, then the fields that vary.
        let dependency = match m.kind {
            MessageKind::WindowAck => 0,
            _ if m.dependency < 2 => 0,
            _ => varint_len(m.dependency),
        };
        let body = match m.kind {
            MessageKind::Fragment(_) => {
                let fragment = if m.fragment.count > 1 {
                    varint_len(m.fragment.index) + varint_len(m.fragment.count - 2)
                } else {
                    0
                };
                fragment + varint_len(m.payload.len() as u32) + m.payload.len()
            }
            _ => 0,
        };
        5 + dependency + body
    }

    /// Bytes the length field of `m` takes when it is not the last message of its frame
    /// (the last one omits it): `encoded_len(m, _, false) - encoded_len(m, _, true)`.
    pub fn length_field_len(m: &Message<'_>) -> usize {
        match m.kind {
            MessageKind::Fragment(_) => varint_len(m.payload.len() as u32),
            _ => 0,
        }
    }

    /// Appends `m` to `out` and advances the context.
    pub(crate) fn encode<B: BufMut + AsRef<[u8]>>(
        &mut self,
        m: &Message<'_>,
        short_id: bool,
        last: bool,
        out: &mut B,
        full_ids: &mut impl FullIds,
    ) {
        let p = self.plan(m, short_id);
        let header =
            if last { p.header } else { p.header | if matches!(m.kind, MessageKind::Fragment(_)) { L } else { 0 } };
        // The fields go into a small buffer first and into `out` in one copy: a buffer
        // write per field costs more than the field.
        let mut fields = Fields::default();
        fields.put(header);
        let mut implicit_at = None;
        if p.explicit_id {
            fields.put(m.channel);
            let id = m.id.to_le_bytes();
            if p.wide {
                fields.put_all(id.get(..3).unwrap_or_default());
            } else {
                fields.put_all(id.get(..2).unwrap_or_default());
                implicit_at = Some(fields.len);
            }
        }
        if p.dependency_varint {
            fields.varint(m.dependency);
        }
        let start = out.as_ref().len();
        if let MessageKind::Fragment(_) = m.kind {
            if p.fragmented {
                fields.varint(m.fragment.index);
                fields.varint(m.fragment.count - 2);
            }
            if !last {
                fields.varint(m.payload.len() as u32);
            }
            out.put_slice(fields.bytes());
            out.put_slice(m.payload);
        } else {
            out.put_slice(fields.bytes());
        }
        if let Some(end) = implicit_at {
            full_ids.full_id(start + end, m.id);
        }
        self.observe(m);
    }

    /// Advances the context past `m` without encoding it: how a frame assembler tracks
    /// sizes with [`RunContext::encoded_len`] before it writes anything.
    pub fn observe(&mut self, m: &Message<'_>) {
        if m.kind != MessageKind::WindowAck {
            self.prev = Some(Prev { channel: m.channel, id: m.id, dependency: m.dependency });
        }
    }

    /// Decodes the next message. `expand` turns a channel and a truncated 16-bit id into the
    /// full id; `implicit` is told every such full value.
    pub(crate) fn decode<'a>(
        &mut self,
        r: &mut Reader<'a>,
        expand: &mut impl FnMut(u8, u16) -> u32,
        full_ids: &mut impl FullIds,
    ) -> Result<Message<'a>, DecodeError> {
        let h = r.u8(Field::MessageHeader)?;
        let kind_bits = h >> 6;
        let low = h & 0b11;
        let kind = match (kind_bits, low) {
            (0b00, _) => MessageKind::Fragment(SendMode::Reliable),
            (0b01, _) => MessageKind::Fragment(SendMode::Unreliable),
            (0b10, _) => MessageKind::Fragment(SendMode::Passive),
            (_, SUB_SENTINEL) => MessageKind::Sentinel,
            (_, SUB_WINDOW_ACK) => MessageKind::WindowAck,
            _ => return Err(DecodeError::UnknownMessage(h)),
        };
        let explicit = h & N != 0;
        let wide = h & W != 0;
        let dep_bits = (h >> 2) & 0b11;
        if kind == MessageKind::WindowAck && !(explicit && wide && dep_bits == DEP_NONE) {
            return Err(DecodeError::OutOfRange(Field::WindowAck));
        }
        let (channel, id) = if explicit {
            let channel = r.u8(Field::Channel)?;
            let id = if wide {
                r.uint(3, Field::PacketId)?
            } else {
                let t = r.uint(2, Field::PacketId)? as u16;
                let full = expand(channel, t);
                full_ids.full_id(r.position(), full);
                full
            };
            (channel, id)
        } else {
            if wide {
                return Err(DecodeError::ReservedBits(Field::MessageHeader));
            }
            let prev = self.prev.ok_or(DecodeError::NoContext(Field::PacketId))?;
            let step = u32::from(kind != MessageKind::Sentinel);
            (prev.channel, SeqSpace::PACKET.add(prev.id, step))
        };
        let dependency = match dep_bits {
            DEP_NONE => 0,
            DEP_ONE => 1,
            DEP_SAME => {
                let prev = self.prev.filter(|p| !explicit && p.dependency != 0);
                let prev = prev.ok_or(DecodeError::NoContext(Field::Dependency))?;
                let d = prev.dependency + SeqSpace::PACKET.distance(prev.id, id);
                if d >= PACKET_WINDOW {
                    return Err(DecodeError::OutOfRange(Field::Dependency));
                }
                d
            }
            _ => {
                let d = r.varint(Field::Dependency)?;
                if !(2..PACKET_WINDOW).contains(&d) {
                    // 0 and 1 have their own codes: an explicit one is not canonical.
                    return Err(DecodeError::OutOfRange(Field::Dependency));
                }
                d
            }
        };
        let (fragment, payload) = if let MessageKind::Fragment(_) = kind {
            let fragment = if low & F != 0 {
                let index = r.varint(Field::FragmentIndex)?;
                let count = r.varint(Field::FragmentCount)?;
                let count = count.checked_add(2).filter(|&c| c <= MAX_GRANULES);
                let count = count.ok_or(DecodeError::OutOfRange(Field::FragmentCount))?;
                if index >= count {
                    return Err(DecodeError::OutOfRange(Field::FragmentIndex));
                }
                Fragment { index, count }
            } else {
                Fragment::WHOLE
            };
            let len = if low & L != 0 { r.varint(Field::Length)? as usize } else { r.remaining() };
            (fragment, r.bytes(len, Field::Payload)?)
        } else {
            (Fragment::WHOLE, &[][..])
        };
        let m = Message { kind, channel, id, dependency, fragment, payload };
        self.observe(&m);
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn roundtrip(msgs: &[Message<'_>], short: bool, base: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let mut ctx = RunContext::default();
        let mut predicted = 0;
        for (i, m) in msgs.iter().enumerate() {
            let last = i + 1 == msgs.len();
            predicted += ctx.encoded_len(m, short, last);
            ctx.encode(m, short, last, &mut out, &mut IgnoreFullIds);
            assert!(RunContext::explicit_len(m) >= RunContext::default().encoded_len(m, short, last));
            assert_eq!(RunContext::explicit_len(m), RunContext::default().encoded_len(m, false, false));
            assert_eq!(
                ctx.encoded_len(m, short, false) - ctx.encoded_len(m, short, true),
                RunContext::length_field_len(m)
            );
        }
        assert_eq!(out.len(), predicted, "encoded_len predicts the bytes");
        let mut r = Reader::new(&out);
        let mut ctx = RunContext::default();
        let mut expand = |_ch: u8, t: u16| SeqSpace::PACKET.expand(u32::from(t), 16, base);
        for m in msgs {
            let got = ctx.decode(&mut r, &mut expand, &mut IgnoreFullIds);
            assert_eq!(got.as_ref(), Ok(m));
        }
        assert!(r.is_empty());
        out
    }

    fn rel(channel: u8, id: u32, dependency: u32, payload: &[u8]) -> Message<'_> {
        Message {
            kind: MessageKind::Fragment(SendMode::Reliable),
            channel,
            id,
            dependency,
            fragment: Fragment::WHOLE,
            payload,
        }
    }

    #[test]
    fn lone_reliable_message_costs_four_header_bytes() {
        let out = roundtrip(&[rel(0, 0x12_3456, 1, &[7; 32])], true, 0x12_3400);
        assert_eq!(out.len() - 32, 4); // header, channel, 16-bit id
    }

    #[test]
    fn a_run_of_reliable_messages_costs_two_bytes_each() {
        let payload = [1u8; 32];
        let msgs: Vec<_> = (0..10).map(|i| rel(3, 100 + i, 1, &payload)).collect();
        let out = roundtrip(&msgs, true, 90);
        // First: header + channel + id(2) + length; others: header + length; last: header.
        assert_eq!(out.len() - 320, 5 + 8 * 2 + 1);
    }

    #[test]
    fn unreliable_run_after_a_reliable_packet_shares_its_dependency() {
        let p = [0u8; 4];
        let mk = |id, dep| Message { kind: MessageKind::Fragment(SendMode::Unreliable), ..rel(1, id, dep, &p) };
        let sentinel = Message { kind: MessageKind::Sentinel, payload: &[], ..rel(1, 12, 3, &p) };
        let msgs = [mk(10, 1), mk(11, 2), mk(12, 3), sentinel, mk(13, 4)];
        let out = roundtrip(&msgs, false, 0);
        // Only the first message carries an explicit channel and id; the sentinel is one byte.
        assert_eq!(out.len(), (1 + 1 + 3 + 1 + 4) + 2 * (1 + 1 + 4) + 1 + (1 + 4));
    }

    #[test]
    fn fragments_window_acks_and_explicit_dependencies_roundtrip() {
        let p = [9u8; 100];
        let frag = Message { fragment: Fragment { index: 3, count: 70 }, ..rel(200, 0xFF_FFFF, 700, &p) };
        let wack = Message {
            kind: MessageKind::WindowAck,
            channel: 200,
            id: 0x1FFF,
            dependency: 0,
            fragment: Fragment::WHOLE,
            payload: &[],
        };
        let passive = Message { kind: MessageKind::Fragment(SendMode::Passive), ..rel(200, 0, 2, &[]) };
        roundtrip(&[frag, wack, passive], true, 0xFF_FFF0);
        roundtrip(&[wack], false, 0);
    }

    #[test]
    fn decode_errors_are_precise() {
        fn dec(bytes: &[u8]) -> Result<Message<'_>, DecodeError> {
            let mut expand = |_: u8, t: u16| u32::from(t);
            RunContext::default().decode(&mut Reader::new(bytes), &mut expand, &mut IgnoreFullIds)
        }
        assert_eq!(dec(&[]), Err(DecodeError::Truncated(Field::MessageHeader)));
        assert_eq!(dec(&[0xC3]), Err(DecodeError::UnknownMessage(0xC3)));
        // Implicit id with no previous message.
        assert_eq!(dec(&[0x00]), Err(DecodeError::NoContext(Field::PacketId)));
        // W without N.
        assert_eq!(dec(&[0x10]), Err(DecodeError::ReservedBits(Field::MessageHeader)));
        // Window ack must be explicit and wide with no dependency.
        assert_eq!(dec(&[0xE1, 0, 0, 0]), Err(DecodeError::OutOfRange(Field::WindowAck)));
        assert_eq!(dec(&[0xF5, 0, 0, 0, 0]), Err(DecodeError::OutOfRange(Field::WindowAck)));
        // "Same dependency" needs an implicit run.
        assert_eq!(dec(&[0x28, 0, 0, 0]), Err(DecodeError::NoContext(Field::Dependency)));
        // Explicit dependency of 1 is not canonical; 65536 is outside the window.
        assert_eq!(dec(&[0x2C, 0, 0, 0, 1]), Err(DecodeError::OutOfRange(Field::Dependency)));
        assert_eq!(dec(&[0x2C, 0, 0, 0, 0x80, 0x80, 0x04]), Err(DecodeError::OutOfRange(Field::Dependency)));
        // Fragment index beyond the count; count beyond the maximum.
        assert_eq!(dec(&[0x22, 0, 0, 0, 5, 1]), Err(DecodeError::OutOfRange(Field::FragmentIndex)));
        assert_eq!(dec(&[0x22, 0, 0, 0, 0, 0xFF, 0xFF, 0x7F]), Err(DecodeError::OutOfRange(Field::FragmentCount)));
        // The largest count decodes, with the last granule as its index.
        let largest = [0x22, 0, 0, 0, 0xFF, 0xFF, 0x7F, 0xFE, 0xFF, 0x7F];
        assert_eq!(dec(&largest).map(|m| m.fragment), Ok(Fragment { index: MAX_GRANULES - 1, count: MAX_GRANULES }));
        // Explicit length running past the end.
        assert_eq!(dec(&[0x21, 0, 0, 0, 5, 1, 2]), Err(DecodeError::Truncated(Field::Payload)));
        // Truncated id.
        assert_eq!(dec(&[0x20, 0, 0]), Err(DecodeError::Truncated(Field::PacketId)));
    }

    #[test]
    fn truncated_ids_report_their_full_value() {
        struct Seen(Vec<(usize, u32)>);
        impl FullIds for Seen {
            fn full_id(&mut self, end: usize, full: u32) {
                self.0.push((end, full));
            }
        }
        let m = rel(5, 0x01_0002, 0, b"hi");
        let mut out = Vec::new();
        let mut seen = Seen(Vec::new());
        RunContext::default().encode(&m, true, true, &mut out, &mut seen);
        assert_eq!(seen.0, vec![(4, 0x01_0002)]);
        let mut r = Reader::new(&out);
        let mut seen_dec = Seen(Vec::new());
        let mut expand = |ch: u8, t: u16| {
            assert_eq!(ch, 5);
            SeqSpace::PACKET.expand(u32::from(t), 16, 0x01_0000)
        };
        let got = RunContext::default().decode(&mut r, &mut expand, &mut seen_dec);
        assert_eq!(got, Ok(m));
        assert_eq!(seen_dec.0, seen.0);
    }
}
