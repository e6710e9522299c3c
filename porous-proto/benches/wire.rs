//! Frame encode and decode (issue 9): the wire codec alone, without hosts.
//!
//! Datagrams: (i) one 32-byte reliable message alone in a frame, (ii) a frame of 30
//! 32-byte reliable messages, (iii) an acknowledgement-only datagram with four ranges,
//! (iv) a connection request. Each is encoded into a reused buffer (the host does the
//! same) and decoded, integrity check included; decoding also walks the messages or ack
//! ranges, as a receiver does. Throughput is in messages (datagrams for (iii) and (iv)).
//!
//! `cargo bench -p porous-proto --bench wire`; see `docs/performance.md`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use porous_proto::wire::{
    AckRange, ConnectRequest, Control, Data, DataHeader, DataWriter, FixedRefs, Fragment, Key, Message, MessageKind,
    SendMode,
};

const PAYLOAD: [u8; 32] = [0xAA; 32];

/// A receiver's windows, fixed: frame ids near `frame`, acknowledged ids below
/// `ack_limit`, packet ids near `packet`.
const REFS: FixedRefs = FixedRefs { frame: 0x1_0020, ack_limit: 0x1_0040, packet: 0x05_0000 };

fn key() -> Key {
    Key::connection(0x1234_5678, 0x9ABC_DEF0)
}

fn reliable(id: u32) -> Message<'static> {
    Message {
        kind: MessageKind::Fragment(SendMode::Reliable),
        channel: 0,
        id,
        dependency: 1,
        fragment: Fragment::WHOLE,
        payload: &PAYLOAD,
    }
}

fn frame_header() -> DataHeader<'static> {
    DataHeader { frame: Some((0x1_002A, 1)), ..Default::default() }
}

/// Encodes a frame of `msgs` into `out` (cleared first); returns its length.
fn encode_frame(out: &mut Vec<u8>, msgs: &[Message<'_>]) -> usize {
    out.clear();
    let header = frame_header();
    let mut w = DataWriter::new(out, key(), &header);
    for (i, m) in msgs.iter().enumerate() {
        w.message(m, true, i + 1 == msgs.len());
    }
    w.finish()
}

/// Decodes a frame and walks its messages; returns the payload bytes seen.
fn decode_frame(datagram: &[u8]) -> usize {
    let Ok(d) = Data::decode(datagram, key(), &REFS) else { return 0 };
    d.messages(&REFS).map(|m| black_box(m.payload).len()).sum()
}

const ACKS: [AckRange; 4] = [
    AckRange { first: 0x1_0030, last: 0x1_003F },
    AckRange { first: 0x1_0020, last: 0x1_002D },
    AckRange { first: 0x1_0018, last: 0x1_001C },
    AckRange { first: 0x1_0010, last: 0x1_0015 },
];

fn encode_acks(out: &mut Vec<u8>) -> usize {
    out.clear();
    let header = DataHeader { acks: &ACKS, ..Default::default() };
    DataWriter::new(out, key(), &header).finish()
}

fn decode_acks(datagram: &[u8]) -> u32 {
    let Ok(d) = Data::decode(datagram, key(), &REFS) else { return 0 };
    d.acks().map(|r| black_box(r).last).fold(0, u32::wrapping_add)
}

fn request() -> Control<'static> {
    Control::request(ConnectRequest {
        nonce: 0x1234_5678,
        frame_base: 0xDEAD_BEEF,
        packet_base: 0x12_3456,
        app_version: 7,
        channels: 4,
        mtu: 1200,
        max_packet: 1 << 20,
        bandwidth_in: 0,
        bandwidth_out: 0,
        cookie: None,
        unordered: porous_proto::wire::ChannelSet::EMPTY,
    })
}

fn wire(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    let mut out = Vec::with_capacity(2048);

    let one = [reliable(0x05_0001)];
    let thirty: Vec<Message<'static>> = (0..30).map(|i| reliable(0x05_0001 + i)).collect();
    for (name, msgs) in [("1x32B", &one[..]), ("30x32B", &thirty[..])] {
        let n = encode_frame(&mut out, msgs);
        let encoded = out.clone();
        assert_eq!(decode_frame(&encoded), 32 * msgs.len(), "the frame decodes");
        eprintln!("wire/{name}: {n} bytes on the wire for {} payload bytes", 32 * msgs.len());
        g.throughput(Throughput::Elements(msgs.len() as u64));
        g.bench_function(format!("encode_frame/{name}"), |b| b.iter(|| encode_frame(&mut out, black_box(msgs))));
        g.bench_function(format!("decode_frame/{name}"), |b| b.iter(|| decode_frame(black_box(&encoded))));
    }

    let n = encode_acks(&mut out);
    let acks = out.clone();
    assert_ne!(decode_acks(&acks), 0, "the ack datagram decodes");
    eprintln!("wire/ack_only_4_ranges: {n} bytes on the wire");
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode_ack_only/4_ranges", |b| b.iter(|| encode_acks(&mut out)));
    g.bench_function("decode_ack_only/4_ranges", |b| b.iter(|| decode_acks(black_box(&acks))));

    let req = request();
    out.clear();
    req.encode(Key::version(), &mut out);
    let encoded = out.clone();
    assert_eq!(Control::decode(&encoded, Key::version()), Ok(req));
    g.bench_function("encode_connect_request", |b| {
        b.iter(|| {
            out.clear();
            black_box(&req).encode(Key::version(), &mut out)
        });
    });
    g.bench_function("decode_connect_request", |b| {
        b.iter(|| Control::decode(black_box(&encoded), Key::version()).is_ok());
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    wire(&mut c);
    c.final_summary();
}
