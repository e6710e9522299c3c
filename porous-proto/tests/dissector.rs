//! The Wireshark dissector, `tools/wireshark/porous.lua`, held to the wire format.
//!
//! Always: its field tables equal the ones `docs/wire-format.md` marks with
//! `<!-- layout:NAME -->`, name for name and type for type, so the two cannot drift.
//!
//! With the `tshark` feature (`cargo test -p porous-proto --features tshark --test
//! dissector`; `.ci/run` does it): tshark decodes the capture of `examples/capture` with
//! the dissector, and the test asserts that no packet is malformed, that every datagram
//! the simulator's tap recorded is dissected as POROUS, and that what tshark prints (frame
//! ids, acknowledged ranges, each message's kind, channel, packet id and fragment, the
//! check's verdict, a sealed datagram's counter) equals what porous-proto's own decoder
//! reads from the same bytes. Without tshark on the PATH that test fails; it never skips.
// It reads the repository's files: not on the web (docs/architecture.md, Testing).
#![cfg(not(target_family = "wasm"))]

use std::collections::BTreeMap;

const DOC: &str = include_str!("../../docs/wire-format.md");
const LUA: &str = include_str!("../../tools/wireshark/porous.lua");

/// The columns of a layout line: separated by runs of two or more spaces.
fn columns(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line.trim_end();
    while !rest.is_empty() {
        match rest.find("  ") {
            Some(i) => {
                out.push(&rest[..i]);
                rest = rest[i..].trim_start();
            }
            None => {
                out.push(rest);
                rest = "";
            }
        }
    }
    out
}

/// One layout: its entries as (key, values), in order. A field layout's key is the field
/// name and its value the type; a table's key is its first column.
type Layout = Vec<(String, Vec<String>)>;

/// The layouts `docs/wire-format.md` marks, by name (tables of one name joined).
fn doc_layouts() -> BTreeMap<String, Layout> {
    let mut out: BTreeMap<String, Layout> = BTreeMap::new();
    let lines: Vec<&str> = DOC.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line.strip_prefix("<!-- layout:").and_then(|l| l.strip_suffix(" -->")) else { continue };
        let layout = out.entry(name.to_string()).or_default();
        let body = &lines[i + 1..];
        if body[0] == "```text" {
            for l in body[1..].iter().take_while(|l| **l != "```") {
                if l.starts_with(' ') {
                    continue; // a description running on
                }
                let cols = columns(l);
                assert!(cols.len() >= 2, "layout {name}: no type in {l:?}");
                layout.push((cols[0].to_string(), vec![cols[1].to_string()]));
            }
        } else {
            for l in body.iter().take_while(|l| l.starts_with('|')).skip(2) {
                let cells: Vec<String> =
                    l.trim_matches('|').split(" | ").map(|c| c.trim().trim_matches('`').to_string()).collect();
                if name == "bodies" {
                    // `name: type, name: type`, or "empty".
                    let fields =
                        if cells[1] == "empty" { vec![] } else { cells[1].split(", ").map(String::from).collect() };
                    layout.push((cells[0].clone(), fields));
                } else if !cells[0].starts_with("0b") {
                    layout.push((cells[0].clone(), cells[1..3].to_vec()));
                }
            }
        }
    }
    out
}

/// The strings between double quotes in `line`.
fn quoted(line: &str) -> Vec<String> {
    line.split('"').skip(1).step_by(2).map(String::from).collect()
}

/// The `LAYOUT.NAME = { ... }` tables of the dissector, in the same shape.
fn lua_layouts() -> BTreeMap<String, Layout> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, Layout)> = None;
    for line in LUA.lines() {
        if let Some(rest) = line.strip_prefix("LAYOUT.") {
            let name = rest.split(' ').next().unwrap_or_default().to_string();
            current = Some((name, Vec::new()));
            continue;
        }
        let Some((name, layout)) = current.as_mut() else { continue };
        if line == "}" {
            let (name, layout) = current.take().unwrap();
            out.insert(name, layout);
            continue;
        }
        let strings = quoted(line);
        if let Some(key) = line.trim().strip_prefix('[').and_then(|l| l.split(']').next()) {
            // `[0x83] = { { "acked", "u32" } },` or `[1] = { "app version", "..." },`
            let key = key.to_string();
            let values = if name == "bodies" {
                strings.chunks(2).map(|p| format!("{}: {}", p[0], p[1])).collect()
            } else {
                strings
            };
            layout.push((key, values));
        } else if strings.len() == 2 {
            layout.push((strings[0].clone(), vec![strings[1].clone()]));
        }
    }
    out
}

#[test]
fn the_dissector_has_the_field_tables_of_the_wire_format() {
    let doc = doc_layouts();
    let lua = lua_layouts();
    for name in [
        "types",
        "request",
        "bodies",
        "refusals",
        "connection",
        "ack",
        "message",
        "token_server",
        "sealed_request",
        "sealed_reply",
        "sealed_connection",
    ] {
        let d = doc.get(name).unwrap_or_else(|| panic!("docs/wire-format.md marks no layout {name}"));
        let l = lua.get(name).unwrap_or_else(|| panic!("porous.lua has no LAYOUT.{name}"));
        assert!(!d.is_empty(), "layout {name} is empty");
        // Tables keyed by type byte or reason: the document's order is the dissector's
        // once both are sorted by key.
        let (mut d, mut l) = (d.clone(), l.clone());
        if matches!(name, "types" | "bodies" | "refusals") {
            d.sort();
            l.sort();
        }
        assert_eq!(d, l, "layout {name}: docs/wire-format.md (left) and tools/wireshark/porous.lua (right) differ");
    }
    assert_eq!(doc.keys().collect::<Vec<_>>(), lua.keys().collect::<Vec<_>>(), "the same layouts on both sides");
}

#[test]
fn the_layout_reader_sees_what_the_document_says() {
    // A check of the check: the first and last fields of two layouts, read back.
    let doc = doc_layouts();
    let request = &doc["request"];
    assert_eq!(request.first(), Some(&("nonce".to_string(), vec!["u32".to_string()])));
    assert_eq!(request.last(), Some(&("padding".to_string(), vec!["zeros".to_string()])));
    assert_eq!(request.len(), 15);
    let bodies: BTreeMap<_, _> = doc["bodies"].iter().cloned().collect();
    assert_eq!(bodies["0x84"], ["reason: u8", "detail: varint"]);
    assert_eq!(bodies["0x87"], Vec::<String>::new());
    assert_eq!(doc["types"].len(), 12);
    assert_eq!(bodies["0x88"], ["data: u64"]);
    assert_eq!(bodies["0x8B"], ["id: u32", "cookie: 8 B"]);
    assert_eq!(doc["sealed_moved"].len(), 5);
    assert_eq!(lua_layouts()["refusals"].len(), 7);
}

#[cfg(feature = "tshark")]
#[path = "../examples/capture/scenario.rs"]
mod scenario;

#[cfg(feature = "tshark")]
mod support;

#[cfg(feature = "tshark")]
mod tshark {
    use std::collections::BTreeMap;
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::process::Command;

    use porous_proto::seq::SeqSpace;
    use porous_proto::sim::TapRecord;
    use porous_proto::wire::secure::{SealedParts, SealedRequest};
    use porous_proto::wire::{Control, Data, Expand, Key, MessageKind, SendMode};

    use super::scenario;

    /// One side of a connection, as a passive observer learns it from the handshake and
    /// the frames since.
    #[derive(Clone, Debug, Default)]
    struct Side {
        nonce: Option<u32>,
        frame_base: u32,
        packet_base: u32,
        newest_frame: Option<u32>,
        packets: BTreeMap<u8, u32>,
    }

    #[derive(Debug, Default)]
    struct Conversation {
        secure: bool,
        requester: Option<SocketAddr>,
        sides: BTreeMap<SocketAddr, Side>,
    }

    /// Expansion of the truncated ids of a datagram from `me` to `peer`: nearest the
    /// newest ids `me` sent before, acknowledged ids below the newest frame `peer` sent.
    /// Whatever the rule, `Data::decode` accepts only an expansion the check confirms.
    struct Refs<'a> {
        me: &'a Side,
        peer: &'a Side,
    }

    impl Expand for Refs<'_> {
        fn frame_id(&self, truncated: u32, bytes: u32) -> u32 {
            SeqSpace::FRAME.expand(truncated, 8 * bytes, self.me.newest_frame.unwrap_or(self.me.frame_base))
        }

        fn ack_largest(&self, truncated: u16) -> u32 {
            let limit = self.peer.newest_frame.unwrap_or(self.peer.frame_base).wrapping_add(1);
            SeqSpace::FRAME.expand_below(u32::from(truncated), 16, limit)
        }

        fn packet_id(&self, channel: u8, truncated: u16) -> u32 {
            let reference = self.me.packets.get(&channel).copied().unwrap_or(self.me.packet_base);
            SeqSpace::PACKET.expand(u32::from(truncated), 16, reference)
        }
    }

    fn newer(a: u32, b: u32, space: SeqSpace) -> bool {
        a != b && space.distance(b, a) < (space.modulus() / 2) as u32
    }

    /// The columns tshark prints, as porous-proto's decoder reads the datagram.
    const FIELDS: [&str; 12] = [
        "porous.type",
        "porous.frame_id",
        "porous.ack.first",
        "porous.ack.last",
        "porous.msg.kind",
        "porous.msg.channel",
        "porous.msg.id",
        "porous.msg.fragment.index",
        "porous.msg.fragment.count",
        "porous.check.status",
        "porous.secure",
        "porous.sealed.counter",
    ];

    fn join<T: ToString>(v: impl IntoIterator<Item = T>) -> String {
        v.into_iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
    }

    fn kind(k: MessageKind) -> &'static str {
        match k {
            MessageKind::Fragment(SendMode::Reliable) => "reliable",
            MessageKind::Fragment(SendMode::Unreliable) => "unreliable",
            MessageKind::Fragment(SendMode::Passive) => "passive",
            MessageKind::Sentinel => "sentinel",
            MessageKind::WindowAck => "window ack",
        }
    }

    /// What tshark must print for each record, from porous-proto's own decoding of the
    /// tap's bytes (in the order sent: the capture's order).
    fn expected(records: &[TapRecord]) -> Vec<[String; 12]> {
        let mut conversations: BTreeMap<(SocketAddr, SocketAddr), Conversation> = BTreeMap::new();
        let mut out = Vec::new();
        for (i, r) in records.iter().enumerate() {
            let d = &r.payload[..];
            let key = if r.from < r.to { (r.from, r.to) } else { (r.to, r.from) };
            let c = conversations.entry(key).or_default();
            let ty = d[0];
            let mut row: [String; 12] = Default::default();
            row[0] = format!("0x{ty:02x}");
            let me = c.sides.get(&r.from).cloned().unwrap_or_default();
            let peer = c.sides.get(&r.to).cloned().unwrap_or_default();
            if ty == 0x80 && Control::decode(d, Key::version()).is_err() {
                let sealed = SealedRequest::split(d).unwrap_or_else(|e| panic!("record {i}: {e}"));
                c.secure = true;
                c.requester = Some(r.from);
                c.sides.entry(r.from).or_default().nonce = Some(sealed.nonce);
                row[10] = "1".into();
                row[11] = sealed.counter.to_string();
            } else if c.secure {
                row[10] = "1".into();
                let reply = (0x81..=0x85).contains(&ty) && !(ty == 0x82 && c.requester == Some(r.from));
                if !reply {
                    row[11] = SealedParts::split(d).unwrap_or_else(|e| panic!("record {i}: {e}")).counter.to_string();
                }
            } else if ty >= 0x80 {
                let key = match ty {
                    0x80 => Key::version(),
                    0x81..=0x85 => Key::reply(peer.nonce.expect("the request answered is in the capture")),
                    _ => Key::connection(me.nonce.expect("handshake"), peer.nonce.expect("handshake")),
                };
                let control = Control::decode(d, key).unwrap_or_else(|e| panic!("record {i} ({ty:#x}): {e}"));
                let request = match control {
                    Control::Request { request, .. } => {
                        c.requester = Some(r.from);
                        Some(request)
                    }
                    Control::RequestAck(request) => Some(request),
                    _ => None,
                };
                if let Some(q) = request {
                    let side = c.sides.entry(r.from).or_default();
                    *side = Side {
                        nonce: Some(q.nonce),
                        frame_base: q.frame_base,
                        packet_base: q.packet_base,
                        ..Side::default()
                    };
                }
                row[9] = "1".into();
            } else {
                let key = Key::connection(me.nonce.expect("handshake"), peer.nonce.expect("handshake"));
                let refs = Refs { me: &me, peer: &peer };
                let data = Data::decode(d, key, &refs).unwrap_or_else(|e| panic!("record {i} ({ty:#x}): {e}"));
                let messages: Vec<_> = data.messages(&refs).collect();
                let acks: Vec<_> = data.acks().collect();
                row[1] = data.frame_id.map(|f| f.to_string()).unwrap_or_default();
                row[2] = join(acks.iter().map(|a| a.first));
                row[3] = join(acks.iter().map(|a| a.last));
                row[4] = join(messages.iter().map(|m| kind(m.kind)));
                row[5] = join(messages.iter().map(|m| m.channel));
                row[6] = join(messages.iter().map(|m| m.id));
                row[7] = join(messages.iter().map(|m| m.fragment.index));
                row[8] = join(messages.iter().map(|m| m.fragment.count));
                row[9] = "1".into();
                let side = c.sides.entry(r.from).or_default();
                if let Some(f) = data.frame_id
                    && side.newest_frame.is_none_or(|n| newer(f, n, SeqSpace::FRAME))
                {
                    side.newest_frame = Some(f);
                }
                for m in messages.iter().filter(|m| m.kind != MessageKind::WindowAck) {
                    let was = side.packets.get(&m.channel).copied();
                    if was.is_none_or(|w| newer(m.id, w, SeqSpace::PACKET)) {
                        side.packets.insert(m.channel, m.id);
                    }
                }
            }
            out.push(row);
        }
        out
    }

    /// A client behind a NAT moves to another public IP mid-stream, in `mode`: the tap's
    /// records (the server's unknown paths and the client's moved among them).
    fn moved_capture(mode: super::support::Mode) -> Vec<TapRecord> {
        use porous_proto::sim::{LinkConditions, Nat, NatKind, Network};
        use porous_proto::{HostConfig, SendMode};
        use std::time::Duration;
        let (server, client): (SocketAddr, SocketAddr) =
            ("10.0.0.1:7000".parse().unwrap(), "192.168.1.2:5000".parse().unwrap());
        let ms = Duration::from_millis(1);
        let mut net = Network::new(1);
        net.set_default_link(LinkConditions::perfect(25 * ms));
        let start = net.now();
        net.add_host(server, mode.server(HostConfig::default(), server, start)).unwrap();
        net.add_host(client, mode.client(HostConfig::default())).unwrap();
        net.set_nat(client, Some(Nat::new("203.0.113.7".parse().unwrap(), NatKind::AddressDependent)));
        net.enable_tap();
        let token = mode.token(1, server, Duration::ZERO, Duration::from_secs(10));
        let now = net.now();
        let peer = match &token {
            Some(t) => net.host_mut(client).connect_with_token(now, server, t).unwrap(),
            None => net.host_mut(client).connect(now, server).unwrap(),
        };
        net.run_for(300 * ms, |net| while net.poll_event(server).is_some() {});
        net.set_nat(client, Some(Nat::new("198.51.100.20".parse().unwrap(), NatKind::AddressDependent)));
        for _ in 0..10 {
            net.host_mut(client).send(peer, 0, &b"a message from the new network"[..], SendMode::Reliable).unwrap();
            net.run_for(20 * ms, |net| while net.poll_event(server).is_some() {});
        }
        net.drain_tap().collect()
    }

    /// The dissector reads the two datagrams of a move to another IP in both modes: the
    /// server's unknown paths (never sealed), and the client's moved with the id and the
    /// cookie where porous-proto puts them (plain, and sealed with them in the clear).
    #[test]
    fn tshark_reads_an_unknown_path_and_a_moved_in_both_modes() {
        for mode in super::support::Mode::BOTH {
            let records = moved_capture(mode);
            let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dissector-moved-{mode:?}.pcapng"));
            let file = std::fs::File::create(&path).expect("create the capture");
            scenario::write_capture(&records, std::io::BufWriter::new(file)).expect("write the capture");
            let lua = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/wireshark/porous.lua");
            let script = format!("lua_script:{lua}");
            let path = path.to_str().expect("a UTF-8 path");
            let args =
                ["-n", "-X", &script, "-o", "porous.ports:7000", "-r", path, "-T", "fields", "-E", "separator=/t"];
            let fields =
                ["-e", "porous.type", "-e", "porous.path.id", "-e", "porous.path.cookie", "-e", "_ws.malformed"];
            let printed = tshark(&[&args[..], &fields[..]].concat());
            let rows: Vec<Vec<&str>> = printed.lines().map(|l| l.split('\t').collect()).collect();
            assert_eq!(rows.len(), records.len(), "{mode:?}: one packet for every datagram");
            let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
            let (mut unknown, mut moved) = (0, 0);
            for (row, r) in rows.iter().zip(&records) {
                assert!(row.get(3).is_none_or(|m| m.is_empty()), "{mode:?}: malformed: {row:?}");
                match r.payload[0] {
                    0x8A => {
                        unknown += 1;
                        assert_eq!(row[0], "0x8a", "{mode:?}: {row:?}");
                        assert_eq!(row[2], hex(&r.payload[1..9]), "{mode:?}: the cookie");
                    }
                    0x8B => {
                        moved += 1;
                        assert_eq!(row[0], "0x8b", "{mode:?}: {row:?}");
                        let id = u32::from_le_bytes(r.payload[1..5].try_into().unwrap());
                        assert_eq!(row[1], format!("0x{id:08x}"), "{mode:?}: the id");
                        assert_eq!(row[2], hex(&r.payload[5..13]), "{mode:?}: the cookie");
                    }
                    _ => {}
                }
            }
            assert!(unknown >= 1 && moved >= 1, "{mode:?}: {unknown} unknown paths, {moved} moved");
        }
    }

    fn tshark(args: &[&str]) -> String {
        let out = Command::new("tshark").args(args).output().unwrap_or_else(|e| {
            panic!("tshark could not run ({e}): install it (Debian: apt-get install tshark) or leave the tshark feature off")
        });
        assert!(out.status.success(), "tshark {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("tshark prints UTF-8")
    }

    #[test]
    fn tshark_decodes_the_simulated_game_as_the_simulator_recorded_it() {
        let records = scenario::simulate(scenario::SEED, 180);
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dissector-game.pcapng");
        let file = std::fs::File::create(&path).expect("create the capture");
        scenario::write_capture(&records, std::io::BufWriter::new(file)).expect("write the capture");
        let lua = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/wireshark/porous.lua");
        let script = format!("lua_script:{lua}");
        let path = path.to_str().expect("a UTF-8 path");
        let base = ["-n", "-X", &script, "-r", path];

        // Nothing malformed, no expert warning or error (a failed check is a warning).
        let bad = tshark(&[&base[..], &["-Y", "_ws.malformed || _ws.expert.severity >= \"Warning\""]].concat());
        let first: Vec<&str> = bad.lines().take(20).collect();
        assert!(
            bad.is_empty(),
            "{} malformed or failing packets, the first:\n{}",
            bad.lines().count(),
            first.join("\n")
        );

        let mut args: Vec<&str> = base.to_vec();
        args.extend(["-T", "fields", "-E", "separator=/t", "-e", "frame.protocols"]);
        for f in FIELDS {
            args.extend(["-e", f]);
        }
        let printed = tshark(&args);
        let rows: Vec<Vec<&str>> = printed.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(rows.len(), records.len(), "one packet for every datagram the tap recorded");
        let want = expected(&records);
        let plain = want.iter().filter(|w| w[9] == "1").count();
        let messages: usize = want.iter().filter(|w| !w[4].is_empty()).map(|w| w[4].split(',').count()).sum();
        assert!(plain > 300 && want.len() - plain > 300, "plain and sealed datagrams both: {plain} of {}", want.len());
        assert!(messages > 500, "{messages} messages");
        for (i, (row, want)) in rows.iter().zip(&want).enumerate() {
            assert!(row[0].ends_with(":porous"), "packet {}: dissected as {}", i + 1, row[0]);
            for (k, field) in FIELDS.iter().enumerate() {
                assert_eq!(row[k + 1], want[k], "packet {}: {field} (tshark left, porous-proto right)", i + 1);
            }
        }
        // Every kind of message and every fate is in the capture.
        let kinds: std::collections::BTreeSet<&str> =
            want.iter().flat_map(|w| w[4].split(',')).filter(|k| !k.is_empty()).collect();
        for k in ["reliable", "unreliable", "passive", "sentinel", "window ack"] {
            assert!(kinds.contains(k), "no {k} message in the capture: {kinds:?}");
        }
        // 3,000 bytes: 42 granules of 73 bytes in plain mode.
        assert!(want.iter().any(|w| w[8].split(',').any(|c| c == "42")), "a fragmented packet");
        let comments = tshark(&[&base[..], &["-T", "fields", "-e", "frame.comment"]].concat());
        for fate in ["delivered after", "lost", "duplicated", "corrupted"] {
            assert!(comments.contains(fate), "no datagram {fate}");
        }
    }
}
