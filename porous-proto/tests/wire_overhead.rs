//! The overhead table and worked examples of `docs/wire-format.md` are generated here from
//! the encoder's real output; this test fails when the document and the encoder disagree.
//! Run with `POROUS_BLESS=1` to rewrite the generated sections of the document.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use porous_proto::seq::SeqSpace;
use porous_proto::sim::{LinkConditions, Network, TapRecord};
use porous_proto::wire::secure::{SEAL_EXTRA, SecretKey};
use porous_proto::wire::{
    AckRange, ConnectRequest, Control, Data, DataHeader, DataWriter, Expand, Fragment, Key, Message, MessageKind,
    SendMode, fragment_cut, granule,
};
use porous_proto::{Event, HostConfig, PeerId};

const PAYLOAD: [u8; 32] = [0xAA; 32];

fn reliable(channel: u8, id: u32) -> Message<'static> {
    Message {
        kind: MessageKind::Fragment(SendMode::Reliable),
        channel,
        id,
        dependency: 1,
        fragment: Fragment::WHOLE,
        payload: &PAYLOAD,
    }
}

fn datagram(header: DataHeader<'_>, msgs: &[Message<'_>]) -> Vec<u8> {
    encode(Key::connection(0x1234_5678, 0x9ABC_DEF0), header, msgs)
}

/// The same datagram in secure mode.
fn sealed(header: DataHeader<'_>, msgs: &[Message<'_>]) -> Vec<u8> {
    encode(Key::sealed(SecretKey::from_bytes([7; 32]), 0x0102_0304), header, msgs)
}

fn encode(key: Key, header: DataHeader<'_>, msgs: &[Message<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = DataWriter::new(&mut out, key, &header);
    for (i, m) in msgs.iter().enumerate() {
        w.message(m, true, i + 1 == msgs.len());
    }
    w.finish();
    out
}

fn frame(id: u32) -> DataHeader<'static> {
    DataHeader { frame: Some((id, 1)), ..Default::default() }
}

struct Row {
    what: &'static str,
    payload: usize,
    bytes: usize,
    /// The same datagram in secure mode: its length and payload (a full fragment carries
    /// less, so that it still fits the MTU).
    sealed: usize,
    sealed_payload: usize,
}

fn rows() -> Vec<Row> {
    // A full fragment: the most whole granules that fit beside the largest header.
    let full = |mtu| fragment_cut(mtu, granule(mtu));
    let mut plain = rows_with(datagram, full(1200));
    // Secure mode's fragments are smaller by what sealing adds, so they fit the same MTU.
    let secure = rows_with(sealed, full(1200 - SEAL_EXTRA));
    for (p, s) in plain.iter_mut().zip(secure) {
        (p.sealed, p.sealed_payload) = (s.bytes, s.payload);
    }
    plain
}

fn rows_with(datagram: fn(DataHeader<'_>, &[Message<'_>]) -> Vec<u8>, fragment: usize) -> Vec<Row> {
    let one = datagram(frame(0x2A), &[reliable(0, 0x05_0001)]);
    let one_ch = datagram(frame(0x2A), &[reliable(3, 0x05_0001)]);
    let ten: Vec<_> = (0..10).map(|i| reliable(0, 0x05_0001 + i)).collect();
    let ten = datagram(frame(0x2A), &ten);
    let acks = [AckRange { first: 0x10, last: 0x17 }];
    let with_ack =
        datagram(DataHeader { frame: Some((0x2A, 1)), acks: &acks, ..Default::default() }, &[reliable(0, 0x05_0001)]);
    let ack_only = datagram(DataHeader { acks: &acks, ..Default::default() }, &[]);
    let unreliable =
        Message { kind: MessageKind::Fragment(SendMode::Unreliable), dependency: 0, ..reliable(0, 0x05_0001) };
    let unreliable = datagram(frame(0x2A), &[unreliable]);
    let big = vec![0u8; fragment];
    // The fourth of an 8,000-byte packet's fragments: granules 48 to 63 of 110.
    let frag = Message { fragment: Fragment { index: 48, count: 110 }, payload: &big, ..reliable(0, 0x05_0001) };
    let frag = datagram(frame(0x2A), &[frag]);
    let ping = datagram(DataHeader { ping: Some(1), ..Default::default() }, &[]);
    vec![
        Row {
            what: "one 32-byte reliable message alone (channel 0)",
            payload: 32,
            bytes: one.len(),
            sealed: 0,
            sealed_payload: 0,
        },
        Row {
            what: "one 32-byte reliable message alone (channel 3)",
            payload: 32,
            bytes: one_ch.len(),
            sealed: 0,
            sealed_payload: 0,
        },
        Row {
            what: "one 32-byte unreliable message alone",
            payload: 32,
            bytes: unreliable.len(),
            sealed: 0,
            sealed_payload: 0,
        },
        Row {
            what: "ten 32-byte reliable messages in one frame",
            payload: 320,
            bytes: ten.len(),
            sealed: 0,
            sealed_payload: 0,
        },
        Row {
            what: "one 32-byte reliable message + piggybacked ack",
            payload: 32,
            bytes: with_ack.len(),
            sealed: 0,
            sealed_payload: 0,
        },
        Row {
            what: "acknowledgement alone (one range)",
            payload: 0,
            bytes: ack_only.len(),
            sealed: 0,
            sealed_payload: 0,
        },
        Row { what: "ping alone", payload: 0, bytes: ping.len(), sealed: 0, sealed_payload: 0 },
        Row {
            what: "one full fragment of an 8,000-byte packet (MTU 1200)",
            payload: big.len(),
            bytes: frag.len(),
            sealed: 0,
            sealed_payload: 0,
        },
    ]
}

fn table() -> String {
    let mut t = String::from(
        "| datagram | payload | plain: on the wire | overhead | secure: on the wire | overhead |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows() {
        let (plain, secure) = (r.bytes - r.payload, r.sealed - r.sealed_payload);
        let carrying =
            if r.sealed_payload == r.payload { String::new() } else { format!(" ({} B payload)", r.sealed_payload) };
        writeln!(
            t,
            "| {} | {} B | {} B | {plain} B | {} B{carrying} | {secure} B |",
            r.what, r.payload, r.bytes, r.sealed
        )
        .unwrap();
    }
    let rows = rows();
    let single = rows[0].bytes - rows[0].payload;
    let single_sealed = rows[0].sealed - rows[0].sealed_payload;
    let ten = rows[3].bytes - rows[3].payload;
    let per_additional = (ten - single) as f64 / 9.0;
    t.push('\n');
    t.push_str("Against the field, one small reliable message alone in a datagram:\n\n");
    t.push_str("| library | overhead, one message | per additional message in a batch |\n|---|---:|---:|\n");
    writeln!(t, "| **POROUS** (this encoder) | **{single} B** (check included) | **{per_additional:.1} B** |").unwrap();
    writeln!(
        t,
        "| **POROUS, secure mode** | **{single_sealed} B** (4-byte counter, 16-byte tag and 4-byte digest of the ids in place of the check) | **{per_additional:.1} B** |"
    )
    .unwrap();
    t.push_str("| ENet 1.3.17 | 10 B (no checksum) | about 6 B |\n");
    t.push_str("| uflow | 16 B | - |\n");
    t.push_str("| laminar | 16 B | - |\n");
    t.push_str("| netcode (renet's transport), encrypted | 18 to 25 B (prefix, 1- to 8-byte sequence, 16-byte tag), before the reliability layer's own header | - |\n");
    t
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

fn examples() -> String {
    let one = datagram(frame(0x2A), &[reliable(0, 0x05_0001)]);
    let mut s = String::new();
    s.push_str("One 32-byte reliable message on channel 0, packet id 0x050001 (depends on the previous\n");
    s.push_str("packet), frame id 0x...2A sent as one byte, alone in its datagram:\n\n```text\n");
    writeln!(s, "{}", hex(&one[..6])).unwrap();
    writeln!(s, "aa x 32   (payload)").unwrap();
    writeln!(s, "{}", hex(&one[one.len() - 4..])).unwrap();
    s.push_str("```\n\n");
    writeln!(s, "- `{:02x}` type: data frame (D), frame id 1 byte", one[0]).unwrap();
    writeln!(s, "- `{:02x}` frame id, low byte (the full id enters the check)", one[1]).unwrap();
    writeln!(s, "- `{:02x}` message header: reliable fragment, N (explicit channel and id), dependency 01 (distance 1), no F, no L (runs to the end)", one[2]).unwrap();
    writeln!(s, "- `{:02x}` channel 0", one[3]).unwrap();
    writeln!(s, "- `{} {}` packet id, low 16 bits (the full id enters the check)", hex(&one[4..5]), hex(&one[5..6]))
        .unwrap();
    writeln!(
        s,
        "- 32 payload bytes, then the 4-byte check: {} bytes in all, {} of overhead",
        one.len(),
        one.len() - 32
    )
    .unwrap();
    let ten: Vec<_> = (0..10).map(|i| reliable(0, 0x05_0001 + i)).collect();
    let ten = datagram(frame(0x2A), &ten);
    s.push_str("\nTen such messages (ids 0x050001 to 0x05000a) batched in one frame:\n\n```text\n");
    let mut at = 0;
    writeln!(s, "{}                 type, frame id", hex(&ten[at..at + 2])).unwrap();
    at += 2;
    writeln!(
        s,
        "{} {}     first message: header (L set), channel, id, length 32",
        hex(&ten[at..at + 4]),
        hex(&ten[at + 4..at + 5])
    )
    .unwrap();
    at += 5 + 32;
    for _ in 0..8 {
        writeln!(
            s,
            "{}                 header (implicit channel, id + 1, dependency 1, L), length 32",
            hex(&ten[at..at + 2])
        )
        .unwrap();
        at += 2 + 32;
    }
    writeln!(s, "{}                    last message: header without L", hex(&ten[at..at + 1])).unwrap();
    s.push_str("```\n\n");
    writeln!(
        s,
        "{} bytes for 320 bytes of payload: {} bytes of overhead, {} for the first message and 2 for each further one.",
        ten.len(),
        ten.len() - 320,
        one.len() - 32
    )
    .unwrap();
    s
}

fn splice(doc: &str, name: &str, content: &str) -> String {
    let begin = format!("<!-- generated:{name}:begin -->\n");
    let end = format!("<!-- generated:{name}:end -->");
    let (Some(b), Some(e)) = (doc.find(&begin), doc.find(&end)) else {
        panic!("docs/wire-format.md lacks the {name} markers");
    };
    format!("{}{}{}{}", &doc[..b + begin.len()], content, "", &doc[e..])
}

#[test]
fn overhead_targets_hold() {
    let rows = rows();
    let single = rows[0].bytes - rows[0].payload;
    let per_additional = (rows[3].bytes - rows[3].payload - single) / 9;
    assert!(single <= 10, "one small reliable message costs {single} bytes of overhead");
    assert!(per_additional <= 4, "each batched message costs {per_additional} bytes");
    // A full fragment fits the MTU exactly, sealed or not.
    assert!(rows[7].bytes <= 1200 && rows[7].sealed <= 1200);
    // Secure mode costs exactly the counter and the tag instead of the check.
    assert!(rows.iter().take(7).all(|r| r.sealed == r.bytes + SEAL_EXTRA));
    assert_eq!(rows[7].sealed - rows[7].sealed_payload, rows[7].bytes - rows[7].payload + SEAL_EXTRA);
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "reads the document from the file system")]
fn wire_format_doc_matches_the_encoder() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/wire-format.md");
    let doc = std::fs::read_to_string(path).expect("docs/wire-format.md exists");
    let want = splice(&splice(&doc, "overhead", &table()), "examples", &examples());
    if std::env::var_os("POROUS_BLESS").is_some() {
        std::fs::write(path, &want).expect("write docs/wire-format.md");
    } else {
        assert!(doc == want, "docs/wire-format.md is stale; rerun with POROUS_BLESS=1 and review the diff");
    }
}

/// One side of a plain connection as its datagrams show it: what the other side knows to
/// expand its truncated ids, and what it knows of the other side's acknowledgements.
#[derive(Debug)]
struct Side {
    addr: SocketAddr,
    nonce: u32,
    frame_base: u32,
    packet_base: u32,
    /// The newest frame id it sent.
    newest_frame: Option<u32>,
    /// The newest packet id it sent on each channel.
    newest_packet: BTreeMap<u8, u32>,
    /// Acknowledgements of its frames by the other side: when each was sent, and the newest
    /// frame it named.
    acked: Vec<(Duration, u32)>,
}

impl Side {
    fn new(addr: SocketAddr, req: &ConnectRequest) -> Self {
        Self {
            addr,
            nonce: req.nonce,
            frame_base: req.frame_base,
            packet_base: req.packet_base,
            newest_frame: None,
            newest_packet: BTreeMap::new(),
            acked: Vec::new(),
        }
    }

    fn next_frame(&self) -> u32 {
        self.newest_frame.map_or(self.frame_base, |n| n.wrapping_add(1))
    }
}

/// Expands the ids of a datagram from `from` to `to` as `to` would: on a link that neither
/// loses nor reorders, around the newest ids sent.
struct Refs<'s> {
    from: &'s Side,
    to: &'s Side,
}

impl Expand for Refs<'_> {
    fn frame_id(&self, t: u32, bytes: u32) -> u32 {
        SeqSpace::FRAME.expand(t, 8 * bytes, self.from.next_frame())
    }
    fn ack_largest(&self, t: u16) -> u32 {
        SeqSpace::FRAME.expand_below(u32::from(t), 16, self.to.next_frame())
    }
    fn packet_id(&self, channel: u8, t: u16) -> u32 {
        let reference = self.from.newest_packet.get(&channel).map_or(self.from.packet_base, |&n| n + 1);
        SeqSpace::PACKET.expand(u32::from(t), 16, reference)
    }
}

/// The rule of `docs/wire-format.md`, Overhead: bytes a frame id travels in, when it lies
/// `span` ids from the receiver's possible window base (ahead of the newest frame the
/// sender has seen acknowledged, or behind the newest it sent, the larger).
fn frame_id_bytes(span: i64) -> u32 {
    match span {
        ..=64 => 1,
        65..=16_384 => 2,
        16_385..=4_194_304 => 3,
        _ => 4,
    }
}

/// What the real datagrams of a run show: every data datagram decoded with the
/// connection's keys, and for each one carrying a single whole message, its overhead
/// against the rule.
#[derive(Debug, Default)]
struct Overheads {
    /// Single-message datagrams by overhead.
    by_size: BTreeMap<usize, u64>,
    /// Of those, the ones carrying nothing else (no ping, echo or acknowledgement, a
    /// one-byte frame id): all of them must cost 10 bytes.
    alone: BTreeMap<usize, u64>,
    /// Each side's first message after connecting: its overhead and what rode with it.
    first: Vec<(usize, String)>,
    /// New frames by frame id width.
    widths: BTreeMap<u32, u64>,
}

impl Overheads {
    /// Checks every datagram of `tap` (a run's, from its first datagram), on links of
    /// `latency` each way.
    fn read(&mut self, tap: &[TapRecord], latency: Duration) {
        let mut sides: Vec<Side> = Vec::new();
        for r in tap {
            let ty = r.payload[0];
            if ty >= 0x80 {
                // The handshake: each side's request gives its nonce and first ids.
                if sides.is_empty() {
                    if let Ok(Control::Request { request, .. }) = Control::decode(&r.payload, Key::version()) {
                        sides.push(Side::new(r.from, &request));
                    }
                } else if sides.len() == 1
                    && let Ok(Control::RequestAck(request)) = Control::decode(&r.payload, Key::reply(sides[0].nonce))
                {
                    sides.push(Side::new(r.from, &request));
                }
                continue;
            }
            let (s, o) = if sides[0].addr == r.from { (0, 1) } else { (1, 0) };
            let (from, to) = (&sides[s], &sides[o]);
            let refs = Refs { from, to };
            let key = Key::connection(from.nonce, to.nonce);
            let data = Data::decode(&r.payload, key, &refs).expect("a datagram of the connection decodes");
            let acks: Vec<AckRange> = data.acks().collect();
            let msgs: Vec<Message<'_>> = data.messages(&refs).collect();
            let width = u32::from((ty >> 4) & 3) + 1;
            if let Some(id) = data.frame_id {
                // The receiver's window base as the sender knew it: one past the newest of
                // its frames acknowledged in a datagram that had arrived when it sent this
                // one, or its first frame.
                let floor = from
                    .acked
                    .iter()
                    .filter(|(sent, _)| *sent + latency <= r.sent)
                    .map(|&(_, l)| l.wrapping_add(1))
                    .max_by_key(|&f| SeqSpace::FRAME.offset(f, from.frame_base))
                    .unwrap_or(from.frame_base);
                let ahead = SeqSpace::FRAME.offset(id, floor) + 1;
                let new = from.newest_frame.is_none_or(|n| SeqSpace::FRAME.offset(id, n) > 0);
                if new {
                    assert_eq!(width, frame_id_bytes(ahead), "frame {id:#x}, {ahead} ahead of the newest acknowledged");
                    *self.widths.entry(width).or_default() += 1;
                }
                if let [m] = msgs[..]
                    && m.fragment == Fragment::WHOLE
                    && matches!(m.kind, MessageKind::Fragment(_))
                {
                    let overhead = r.payload.len() - m.payload.len();
                    let header = DataHeader {
                        frame: Some((id, width)),
                        ping: data.ping,
                        ping_ack: data.ping_ack,
                        acks: &acks,
                        ack_delay: data.ack_delay,
                    };
                    // The message: its header byte, channel and 16-bit packet id (a packet
                    // depending on nothing or on the previous one).
                    assert!(m.dependency <= 1);
                    assert_eq!(overhead, header.len() + 4, "{header:?}");
                    *self.by_size.entry(overhead).or_default() += 1;
                    if header.ping.is_none() && header.ping_ack.is_none() && acks.is_empty() && width == 1 {
                        *self.alone.entry(overhead).or_default() += 1;
                    }
                    if !from.newest_packet.contains_key(&m.channel) && m.channel == 0 {
                        let rode: Vec<&str> = [
                            (data.ping.is_some(), "ping"),
                            (data.ping_ack.is_some(), "echo"),
                            (!acks.is_empty(), "acks"),
                            (width > 1, "wide frame id"),
                        ]
                        .into_iter()
                        .filter_map(|(on, what)| on.then_some(what))
                        .collect();
                        self.first.push((overhead, rode.join(" + ")));
                    }
                }
            }
            let newest_frame = data.frame_id;
            let acked = data.ack_largest();
            let packets: Vec<(u8, u32)> = msgs.iter().map(|m| (m.channel, m.id)).collect();
            if let Some(l) = acked {
                sides[o].acked.push((r.sent, l));
            }
            let from = &mut sides[s];
            if let Some(id) = newest_frame
                && from.newest_frame.is_none_or(|n| SeqSpace::FRAME.offset(id, n) > 0)
            {
                from.newest_frame = Some(id);
            }
            for (channel, id) in packets {
                let newest = from.newest_packet.entry(channel).or_insert(id);
                if SeqSpace::PACKET.offset(id, *newest) > 0 {
                    *newest = id;
                }
            }
        }
    }
}

/// Two plain hosts on a perfect link of `latency` each way, connected, with everything
/// sent tapped from the first datagram; `tick` steps them on a fixed period. Returns the
/// network and the peer ids (client's, server's).
fn connected(seed: u64, latency: Duration, tick: Option<Duration>) -> (Network, PeerId, PeerId) {
    let mut net = Network::new(seed);
    net.set_tick(tick);
    net.set_default_link(LinkConditions::perfect(latency));
    net.enable_tap();
    net.add_host(CLIENT, HostConfig::default()).unwrap();
    net.add_host(SERVER, HostConfig::default()).unwrap();
    let now = net.now();
    let c = net.host_mut(CLIENT).connect(now, SERVER).unwrap();
    let mut s = None;
    let up = net.run_until(Duration::from_secs(2), |n| {
        while let Some(e) = n.poll_event(SERVER) {
            if let Event::Connected { peer, .. } = e {
                s = Some(peer);
            }
        }
        s.is_some()
    });
    assert!(up);
    (net, c, s.unwrap())
}

const CLIENT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 4000);
const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 5000);

/// The rule of `docs/wire-format.md` (Overhead, "What else a datagram carries"), held
/// against real connections: every data datagram decoded, and every one carrying a single
/// small message costs exactly 10 bytes plus what rode with it (a ping, an echo,
/// acknowledgements, a frame id wider than a byte), the frame id's width following from
/// the acknowledgements the sender had seen. Runs: a 60 Hz stream one way and both ways
/// (the first message after connecting included) over several seeds and paths, and a fast
/// stream over a long path, where more than 64 frames are in flight and frame ids take 2
/// bytes. Prints the figures `docs/wire-format.md` quotes (`-- --nocapture`).
#[test]
fn real_datagrams_follow_the_overhead_rule() {
    let mut all = Overheads::default();
    for both_ways in [false, true] {
        let mut o = Overheads::default();
        for seed in 0..6 {
            for (latency, tick) in [(1, None), (10, None), (25, None), (25, Some(16)), (50, Some(1))] {
                let latency = Duration::from_millis(latency);
                let (mut net, c, s) = connected(seed, latency, tick.map(Duration::from_millis));
                let senders = if both_ways { &[(CLIENT, c), (SERVER, s)][..] } else { &[(CLIENT, c)][..] };
                let mut next = net.now();
                let end = net.now() + Duration::from_secs(2);
                while net.now() < end {
                    if net.now() >= next {
                        next += Duration::from_millis(16);
                        for &(host, peer) in senders {
                            let payload = Bytes::from_static(&PAYLOAD);
                            net.host_mut(host).send(peer, 0, payload, SendMode::Reliable).unwrap();
                        }
                    }
                    net.step(Duration::from_millis(16));
                }
                let tap: Vec<TapRecord> = net.drain_tap().collect();
                o.read(&tap, latency);
            }
        }
        let way = if both_ways { "both ways" } else { "one way" };
        eprintln!("60 Hz, {way}: single-message datagrams by overhead {:?}", o.by_size);
        assert_eq!(o.first.len(), senders_per_run(both_ways) * 6 * 5, "every side's first message was seen");
        all.add(o);
    }
    // A message every millisecond over 150 ms each way: about 300 frames in flight.
    let latency = Duration::from_millis(150);
    let (mut net, c, _) = connected(1, latency, Some(Duration::from_millis(1)));
    for _ in 0..1000 {
        net.host_mut(CLIENT).send(c, 0, Bytes::from_static(&PAYLOAD), SendMode::Reliable).unwrap();
        net.step(Duration::from_millis(1));
    }
    net.run_for(Duration::from_secs(1), |_| {});
    let tap: Vec<TapRecord> = net.drain_tap().collect();
    let mut o = Overheads::default();
    o.read(&tap, latency);
    eprintln!("1,000 Hz over 300 ms round trips: new frames by frame id width {:?}", o.widths);
    assert!(o.widths.get(&1).is_some_and(|&n| n >= 64) && o.widths.get(&2).is_some_and(|&n| n > 100));
    all.add(o);
    eprintln!("carrying nothing else: {:?}", all.alone);
    let mut first: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    for (size, rode) in &all.first {
        *first.entry((*size, rode.as_str())).or_default() += 1;
    }
    eprintln!("the first message after connecting: {first:?}");
    assert_eq!(all.alone.keys().collect::<Vec<_>>(), [&10], "a small message alone costs 10 bytes");
    assert!(all.alone[&10] > 1000);
}

fn senders_per_run(both_ways: bool) -> usize {
    if both_ways { 2 } else { 1 }
}

impl Overheads {
    fn add(&mut self, other: Self) {
        for (map, theirs) in [(&mut self.by_size, other.by_size), (&mut self.alone, other.alone)] {
            for (k, v) in theirs {
                *map.entry(k).or_default() += v;
            }
        }
        for (k, v) in other.widths {
            *self.widths.entry(k).or_default() += v;
        }
        self.first.extend(other.first);
    }
}
