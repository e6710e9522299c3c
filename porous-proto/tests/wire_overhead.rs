//! The overhead table and worked examples of `docs/wire-format.md` are generated here from
//! the encoder's real output; this test fails when the document and the encoder disagree.
//! Run with `POROUS_BLESS=1` to rewrite the generated sections of the document.

use std::fmt::Write as _;

use porous_proto::wire::secure::{SEAL_EXTRA, SecretKey};
use porous_proto::wire::{
    AckRange, DataHeader, DataWriter, Fragment, Key, Message, MessageKind, SendMode, fragment_payload,
};

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
    let mut plain = rows_with(datagram, fragment_payload(1200));
    // Secure mode's fragments are smaller by what sealing adds, so they fit the same MTU.
    let secure = rows_with(sealed, fragment_payload(1200 - SEAL_EXTRA));
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
    let frag = Message { fragment: Fragment { index: 3, count: 10 }, payload: &big, ..reliable(0, 0x05_0001) };
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
            what: "one full fragment of a large packet (MTU 1200)",
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
