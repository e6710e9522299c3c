//! The wire targets: `decode_frame` (arbitrary bytes against the decoders) and
//! `roundtrip` (arbitrary valid datagrams through encoder and decoder).

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;

use crate::seq::{PACKET_WINDOW, SeqSpace};
use crate::transfer::{OutMessage, Tag};
use crate::wire::{
    self, AckRange, COOKIE_LEN, ChannelSet, ConnectRequest, Control, Cookie, Data, DataHeader, DataWriter, FixedRefs,
    Fragment, Key, MAX_ACK_RANGES, MAX_GRANULES, MAX_MTU, MIN_MTU, Message, MessageKind, RefuseReason,
};

/// Expansion references a receiver might hold.
pub type Refs = FixedRefs;

impl<'a> Arbitrary<'a> for Refs {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Self { frame: u.arbitrary()?, ack_limit: u.arbitrary()?, packet: SeqSpace::PACKET.wrap(u.arbitrary()?) })
    }
}

/// Target `decode_frame`: arbitrary bytes must never panic the decoders, and whatever
/// decodes must survive re-encoding unchanged. The bytes are tried as they are and sealed
/// with a valid check, so the fuzzer also reaches the field decoders behind the check.
/// The input is 12 bytes of expansion references (three little-endian `u32`), then the
/// datagram. Returns how many attempts decoded, so replays can tell they reach past the
/// check.
pub fn decode_frame(data: &[u8]) -> usize {
    if data.len() < 12 {
        return 0;
    }
    let (head, bytes) = data.split_at(12);
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let refs = Refs { frame: word(0), ack_limit: word(4), packet: SeqSpace::PACKET.wrap(word(8)) };
    let mut decoded = 0;
    let key = Key::connection(refs.frame, refs.packet);
    let mut sealed = bytes.to_vec();
    let mut c = crc32fast::Hasher::new();
    c.update(bytes);
    sealed.extend_from_slice(&c.finalize().to_le_bytes());
    for input in [bytes, &sealed[..]] {
        if let Ok(c) = Control::decode(input, key) {
            let mut out = Vec::new();
            c.encode(key, &mut out);
            assert_eq!(Control::decode(&out, key), Ok(c));
            decoded += 1;
        }
        decoded += usize::from(Data::decode(input, key, &refs).is_ok());
    }
    // Sealed with the real keyed check, the data decoder reaches every field.
    let mut resealed = bytes.to_vec();
    reseal_data(&mut resealed, key, &refs);
    if let Ok(d) = Data::decode(&resealed, key, &refs) {
        reencode_data(&d, key, &refs);
        decoded += 1;
    }
    decoded
}

/// Appends the check a valid sender would have computed, expanding ids with `refs`; leaves
/// the bytes alone when they do not parse.
fn reseal_data(bytes: &mut Vec<u8>, key: Key, refs: &Refs) {
    if let Ok(check) = Data::seal(bytes, key, refs) {
        bytes.extend_from_slice(&check.to_le_bytes());
    }
}

fn reencode_data(d: &Data<'_>, key: Key, refs: &Refs) {
    let acks: Vec<AckRange> = d.acks().collect();
    let header = DataHeader {
        frame: d.frame_id.map(|id| (id, frame_bytes(id, refs.frame))),
        ping: d.ping,
        ping_ack: d.ping_ack,
        acks: &acks,
        ack_delay: if acks.is_empty() { 0 } else { d.ack_delay },
    };
    let msgs: Vec<Message<'_>> = d.messages(refs).collect();
    let out = encode_data(&header, &msgs, key, refs);
    let again = Data::decode(&out, key, refs).expect("a re-encoded datagram decodes"); // ok: a finding
    assert_eq!(again.frame_id, d.frame_id);
    assert_eq!((again.ping, again.ping_ack), (d.ping, d.ping_ack));
    assert_eq!(again.acks().collect::<Vec<_>>(), acks);
    assert_eq!(again.ack_delay, d.ack_delay);
    assert_eq!(again.messages(refs).collect::<Vec<_>>(), msgs);
}

/// The fewest bytes of `id` that expand back to it at reference `r`.
pub(super) fn frame_bytes(id: u32, r: u32) -> u32 {
    let off = SeqSpace::FRAME.offset(id, r).unsigned_abs();
    (1..=3).find(|&b| off < (1u64 << (8 * b - 1))).unwrap_or(4)
}

fn short_ok(id: u32, refs: &Refs) -> bool {
    SeqSpace::PACKET.offset(id, refs.packet).unsigned_abs() < (1 << 15)
}

pub(super) fn encode_data(header: &DataHeader<'_>, msgs: &[Message<'_>], key: Key, refs: &Refs) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = DataWriter::new(&mut out, key, header);
    for (i, m) in msgs.iter().enumerate() {
        w.message(m, short_ok(m.id, refs), i + 1 == msgs.len());
    }
    w.finish();
    out
}

/// Acknowledgement ranges going back from `newest`, each given as (gap before it, length
/// less one), stopping before they would span more than the transfer window.
pub(super) fn ack_ranges(newest: u32, shape: &[(u8, u8)]) -> Vec<AckRange> {
    let s = SeqSpace::FRAME;
    let mut acks = Vec::new();
    let (mut next, mut span) = (newest, 0);
    for (i, &(gap, len)) in shape.iter().take(MAX_ACK_RANGES).enumerate() {
        let gap = if i == 0 { 0 } else { 1 + u32::from(gap) };
        let len = 1 + u32::from(len);
        if span + gap + len > crate::seq::FRAME_WINDOW {
            break;
        }
        span += gap + len;
        let last = s.sub(next, gap);
        let first = s.sub(last, len - 1);
        acks.push(AckRange { first, last });
        next = s.sub(first, 1);
    }
    acks
}

/// A valid datagram built from arbitrary input, with the references to decode it.
#[derive(Debug)]
pub(crate) enum ArbitraryDatagram<'a> {
    Control(Control<'a>),
    Data {
        refs: Refs,
        frame: Option<u32>,
        ping: Option<u8>,
        ping_ack: Option<u8>,
        acks: Vec<AckRange>,
        /// Owned as the transfer layer owns the messages it sends.
        messages: Vec<OutMessage>,
    },
}

pub(super) fn arbitrary_request(u: &mut Unstructured<'_>) -> arbitrary::Result<ConnectRequest> {
    Ok(ConnectRequest {
        nonce: u.arbitrary()?,
        frame_base: u.arbitrary()?,
        packet_base: SeqSpace::PACKET.wrap(u.arbitrary()?),
        app_version: u.arbitrary()?,
        channels: u.int_in_range(1..=255)?,
        mtu: u.int_in_range(MIN_MTU as u32..=MAX_MTU as u32)?,
        max_packet: u.int_in_range(1..=u32::MAX)?,
        bandwidth_in: u.arbitrary()?,
        bandwidth_out: u.arbitrary()?,
        cookie: u.arbitrary::<Option<[u8; COOKIE_LEN]>>()?.map(Cookie),
        // Drawn by the wire targets only (`arbitrary_request_with_unordered`), so host scripts
        // read as before.
        unordered: ChannelSet::EMPTY,
    })
}

/// An arbitrary request with an arbitrary set of unordered channels among its own.
fn arbitrary_request_with_unordered(u: &mut Unstructured<'_>) -> arbitrary::Result<ConnectRequest> {
    let mut request = arbitrary_request(u)?;
    if u.arbitrary()? {
        for c in 0..request.channels {
            if u.ratio(1, 4)? {
                request.unordered.insert(c);
            }
        }
    }
    Ok(request)
}

fn arbitrary_message(u: &mut Unstructured<'_>, last: bool) -> arbitrary::Result<OutMessage> {
    let kind = MessageKind::arbitrary(u)?;
    let channel = u.arbitrary()?;
    let id = SeqSpace::PACKET.wrap(u.arbitrary()?);
    let (dependency, fragment, payload) = match kind {
        MessageKind::WindowAck => (0, Fragment::WHOLE, Bytes::new()),
        MessageKind::Sentinel => (u.int_in_range(0..=PACKET_WINDOW - 1)?, Fragment::WHOLE, Bytes::new()),
        MessageKind::Fragment(_) => {
            let fragment = if u.arbitrary()? {
                let count = u.int_in_range(2..=MAX_GRANULES)?;
                Fragment { index: u.int_in_range(0..=count - 1)?, count }
            } else {
                Fragment::WHOLE
            };
            let len = if last { u.len().min(2000) } else { usize::from(u.arbitrary::<u8>()?) };
            (u.int_in_range(0..=PACKET_WINDOW - 1)?, fragment, Bytes::copy_from_slice(u.bytes(len.min(u.len()))?))
        }
    };
    Ok(OutMessage { kind, channel, id, dependency, fragment, payload, tag: Tag::Plain })
}

impl<'a> Arbitrary<'a> for ArbitraryDatagram<'a> {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        if u.ratio(1, 4)? {
            let c = match u.int_in_range(0..=11u8)? {
                0 => {
                    let request = arbitrary_request_with_unordered(u)?;
                    let len = u.int_in_range(0..=wire::MAX_CONNECT_DATA)?;
                    Control::Request { request, data: u.bytes(len.min(u.len()))? }
                }
                1 => Control::RequestAck(arbitrary_request_with_unordered(u)?),
                2 => Control::Ack,
                3 => Control::AckOther { acked: u.arbitrary()? },
                4 => Control::Refuse(RefuseReason::arbitrary(u)?),
                5 => Control::Challenge(Cookie(u.arbitrary()?)),
                6 => Control::Disconnect { code: u.arbitrary()? },
                7 => Control::PathChallenge { data: u.arbitrary()? },
                8 => Control::PathResponse { data: u.arbitrary()? },
                9 => Control::UnknownPath(wire::PathCookie(u.arbitrary()?)),
                10 => Control::Moved { id: u.arbitrary()?, cookie: wire::PathCookie(u.arbitrary()?) },
                _ => Control::DisconnectAck,
            };
            return Ok(Self::Control(c));
        }
        let refs = Refs::arbitrary(u)?;
        let frame = if u.arbitrary()? { Some(refs.frame.wrapping_add(i32::arbitrary(u)? as u32)) } else { None };
        let ping: Option<u8> = u.arbitrary()?;
        let ping_ack: Option<u8> = u.arbitrary()?;
        let n = u.int_in_range(0..=MAX_ACK_RANGES)?;
        let newest = SeqSpace::FRAME.sub(refs.ack_limit, 1 + u32::from(u.arbitrary::<u16>()? >> 1));
        let shape: Vec<(u8, u8)> = (0..n).map(|_| u.arbitrary()).collect::<arbitrary::Result<_>>()?;
        let acks = ack_ranges(newest, &shape);
        let mut messages = Vec::new();
        if frame.is_some() {
            let count = u.int_in_range(0..=12)?;
            for i in 0..count {
                messages.push(arbitrary_message(u, i + 1 == count)?);
            }
        }
        if frame.is_none() && ping.is_none() && ping_ack.is_none() && acks.is_empty() {
            return Ok(Self::Control(Control::Ack));
        }
        Ok(Self::Data { refs, frame, ping, ping_ack, acks, messages })
    }
}

/// A valid datagram for the `decode_frame` target, with its reference prefix: the seed
/// corpus of the fuzz run and of the replay test.
pub fn seed_input(data: &[u8]) -> Option<Vec<u8>> {
    let mut u = Unstructured::new(data);
    let (refs, key, bytes) = match ArbitraryDatagram::arbitrary(&mut u).ok()? {
        ArbitraryDatagram::Control(c) => {
            let refs = Refs { frame: 1, ack_limit: 2, packet: 3 };
            let key = Key::connection(refs.frame, refs.packet);
            let mut out = Vec::new();
            c.encode(key, &mut out);
            (refs, key, out)
        }
        ArbitraryDatagram::Data { refs, frame, ping, ping_ack, acks, messages } => {
            let key = Key::connection(refs.frame, refs.packet);
            let frame = frame.map(|id| (id, frame_bytes(id, refs.frame)));
            let header = DataHeader { frame, ping, ping_ack, acks: &acks, ack_delay: 0 };
            let msgs: Vec<Message<'_>> = messages.iter().map(OutMessage::as_wire).collect();
            (refs, key, encode_data(&header, &msgs, key, &refs))
        }
    };
    let _ = key;
    let mut input = Vec::with_capacity(12 + bytes.len());
    for w in [refs.frame, refs.ack_limit, refs.packet] {
        input.extend_from_slice(&w.to_le_bytes());
    }
    input.extend_from_slice(&bytes);
    Some(input)
}

/// Target `roundtrip`: an arbitrary valid datagram encodes, decodes to itself, and never
/// outgrows its predicted size. Returns the number of messages checked.
pub fn roundtrip(data: &[u8]) -> usize {
    let mut u = Unstructured::new(data);
    let Ok(d) = ArbitraryDatagram::arbitrary(&mut u) else { return 0 };
    match d {
        ArbitraryDatagram::Control(c) => {
            let key = Key::reply(7);
            let mut out = Vec::new();
            let n = c.encode(key, &mut out);
            match c {
                Control::Request { request: r, data } => {
                    let bitmap = r.unordered.wire_len(r.channels);
                    assert!(n <= wire::REQUEST_SIZE.max(wire::REQUEST_OVERHEAD_MAX + data.len()) + bitmap);
                }
                // A reply is as large as the request it answers, less connect data.
                Control::RequestAck(r) => assert_eq!(n, wire::REQUEST_SIZE + r.unordered.wire_len(r.channels)),
                _ => assert!(n <= wire::REQUEST_SIZE),
            }
            assert_eq!(Control::decode(&out, key), Ok(c));
            1
        }
        ArbitraryDatagram::Data { refs, frame, ping, ping_ack, acks, messages } => {
            let key = Key::connection(refs.frame, 1);
            // The delay field comes with acknowledgements; vary it with their shape.
            let ack_delay = acks.first().map_or(0, |r| r.first.wrapping_sub(r.last) & 0x3FFF);
            let frame_field = frame.map(|id| (id, frame_bytes(id, refs.frame)));
            let header = DataHeader { frame: frame_field, ping, ping_ack, acks: &acks, ack_delay };
            let msgs: Vec<Message<'_>> = messages.iter().map(OutMessage::as_wire).collect();
            let out = encode_data(&header, &msgs, key, &refs);
            let d = Data::decode(&out, key, &refs).expect("an encoded datagram decodes"); // ok: a finding
            assert_eq!(d.frame_id, frame);
            assert_eq!((d.ping, d.ping_ack), (ping, ping_ack));
            assert_eq!(d.acks().collect::<Vec<_>>(), acks);
            assert_eq!(d.ack_delay, ack_delay);
            let got: Vec<Message<'_>> = d.messages(&refs).collect();
            // A message with an empty payload as the last one of a frame is re-read the same.
            assert_eq!(got, msgs);
            let predicted: usize = {
                let mut run = wire::RunContext::default();
                let mut sum = header.len();
                for (i, m) in msgs.iter().enumerate() {
                    sum += run.encoded_len(m, short_ok(m.id, &refs), i + 1 == msgs.len());
                    run.observe(m);
                }
                sum
            };
            assert_eq!(out.len(), predicted);
            1 + msgs.len()
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::sim::SplitMix64;

    /// Replays each target over seeded pseudo-random inputs, so `cargo test` on stable
    /// covers the fuzz targets too.
    fn replay(target: fn(&[u8]) -> usize, cases: usize) -> usize {
        let mut total = 0;
        let mut s = SplitMix64::new(0x5EED);
        let mut buf = Vec::new();
        for i in 0..cases {
            s.fill(&mut buf, (i * 7919) % 1500);
            total += target(&buf);
        }
        total
    }

    /// Replays `decode_frame` over valid datagrams and mutations of them: bit flips,
    /// truncation, extension and byte splices, the way a fuzzer mutates a seed corpus.
    fn replay_mutated(cases: usize) -> (usize, usize) {
        let mut s = SplitMix64::new(0xC0FFEE);
        let mut raw = Vec::new();
        let (mut decoded, mut inputs) = (0, 0);
        while inputs < cases {
            let len = 64 + (s.next_u64() % 1200) as usize;
            s.fill(&mut raw, len);
            let Some(mut input) = seed_input(&raw) else { continue };
            inputs += 1;
            decoded += decode_frame(&input);
            let n = input.len();
            match s.next_u64() % 4 {
                0 => {
                    let at = 12 + (s.next_u64() as usize) % (n - 12);
                    input[at] ^= 1 << (s.next_u64() % 8);
                }
                1 => input.truncate(12 + (s.next_u64() as usize) % (n - 12)),
                2 => {
                    for _ in 0..1 + s.next_u64() % 8 {
                        input.push(s.next_u64() as u8);
                    }
                }
                _ => {
                    let at = 12 + (s.next_u64() as usize) % (n - 12);
                    input[at] = s.next_u64() as u8;
                }
            }
            decoded += decode_frame(&input);
        }
        (decoded, inputs)
    }

    #[test]
    fn replay_decode_frame() {
        // Random bytes exercise the early rejections...
        replay(decode_frame, 2000);
        // ...and valid datagrams with mutations reach every field decoder.
        let (decoded, inputs) = replay_mutated(3000);
        eprintln!("decode_frame: {decoded} successful decodes from {inputs} seeds and their mutants");
        assert!(decoded > inputs, "the replay must reach past the check: {decoded} of {inputs}");
    }

    #[test]
    fn replay_roundtrip() {
        let checked = replay(roundtrip, 4000);
        eprintln!("roundtrip: {checked} datagrams and messages checked in 4000 cases");
        assert!(checked > 8000, "the replay must build real datagrams: {checked}");
    }
}
