//! The demo's verdict on a run: the table per stream, the losses each side counted set
//! against the relay's drops, and whether every guarantee held.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use porous_proto::{DisconnectReason, PeerStats, SendMode};

use crate::relay::{RelayStats, TO_CLIENT, TO_SERVER};
use crate::stream::Stream;

/// How long the demo waits, after the traffic, for the reliable packets still in flight.
pub const FINISH_WITHIN: Duration = Duration::from_secs(30);

/// Unreliable packets a sending side dropped without ever sending them, from its
/// connection's counters. POROUS counts them per connection, not per channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unsent {
    /// Still queued when their channel's deadline passed
    /// (`TransferStats::unreliable_expired`; a packet larger than a datagram counts once
    /// per fragment).
    pub expired: u64,
    /// Dropped for a full send queue (`PeerStats::unreliable_dropped`), or replaced by a
    /// newer packet on a `latest_only` channel (`PeerStats::unreliable_replaced`).
    pub dropped: u64,
}

impl Unsent {
    /// A connection's unsent packets.
    pub fn of(stats: &PeerStats) -> Self {
        Self {
            expired: stats.transfer.unreliable_expired,
            dropped: stats.unreliable_dropped + stats.unreliable_replaced,
        }
    }
}

/// What one side's connection counted, as last seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SideCounts {
    /// Its unreliable packets never sent.
    pub unsent: Unsent,
    /// Frames it sent, new and again (`TransferStats::frames_sent`, `frames_resent`):
    /// one datagram each.
    pub frames_sent: u64,
    /// See `frames_sent`.
    pub frames_resent: u64,
    /// Frames it counted lost (`TransferStats::frames_lost`).
    pub frames_lost: u64,
    /// Of those, frames that had arrived after all (`TransferStats::losses_spurious`).
    pub losses_spurious: u64,
    /// Frame datagrams it received, every copy (`TransferStats::frames_received` and
    /// `frames_out_of_window`).
    pub frames_received: u64,
}

impl SideCounts {
    /// A connection's counts.
    pub fn of(stats: &PeerStats) -> Self {
        let t = &stats.transfer;
        Self {
            unsent: Unsent::of(stats),
            frames_sent: t.frames_sent,
            frames_resent: t.frames_resent,
            frames_lost: t.frames_lost,
            losses_spurious: t.losses_spurious,
            frames_received: t.frames_received + t.frames_out_of_window,
        }
    }
}

/// What a run saw.
#[derive(Debug)]
pub struct Report {
    /// `streams[direction][channel]`, direction [`TO_SERVER`] (the client's packets) or
    /// [`TO_CLIENT`].
    pub streams: [[Stream; 4]; 2],
    /// Each side's connection as last seen, by the direction it sends: the client's at
    /// [`TO_SERVER`], the server's at [`TO_CLIENT`].
    pub sides: [Option<SideCounts>; 2],
    /// What the relay did.
    pub relay: RelayStats,
    /// Whether the connection was established.
    pub connected: bool,
    /// How each side's connection ended, if it did.
    pub ended: BTreeMap<&'static str, DisconnectReason>,
    /// The demo stopped waiting for reliable packets still in flight.
    pub gave_up: bool,
    /// Figures for the summary.
    pub notes: Vec<String>,
}

impl Report {
    /// A report of streams of `modes` (channels 0 to 3, both ways), nothing seen yet.
    pub fn new(modes: [SendMode; 4]) -> Self {
        Self {
            streams: [modes.map(Stream::new), modes.map(Stream::new)],
            sides: [None, None],
            relay: RelayStats::default(),
            connected: false,
            ended: BTreeMap::new(),
            gave_up: false,
            notes: Vec::new(),
        }
    }

    /// What each direction's sender dropped unsent.
    pub fn unsent(&self, dir: usize) -> Unsent {
        self.sides[dir].map(|s| s.unsent).unwrap_or_default()
    }

    /// The channels of direction `dir` that carry unreliable packets.
    fn unreliable_channels(&self, dir: usize) -> Vec<usize> {
        (0..4).filter(|&ch| self.streams[dir][ch].mode == SendMode::Unreliable).collect()
    }

    /// The unsent packets of one stream: known when it is its direction's only unreliable
    /// stream (the counters are per connection).
    fn stream_unsent(&self, dir: usize, ch: usize) -> Option<Unsent> {
        (self.unreliable_channels(dir) == [ch]).then(|| self.unsent(dir))
    }
}

/// What a report means.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every guarantee held and the run completed.
    Held,
    /// A guarantee was broken.
    Broken(Vec<String>),
    /// The run could not complete, for a reason that breaks no guarantee.
    Incomplete(String),
}

impl Verdict {
    /// The demo's exit status: 0 held, 1 broken, 3 incomplete (2 is a usage error).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Held => 0,
            Self::Broken(_) => 1,
            Self::Incomplete(_) => 3,
        }
    }
}

/// A direction as the table names it.
pub fn direction(dir: usize) -> &'static str {
    if dir == TO_SERVER { "client->server" } else { "server->client" }
}

/// A mode as the table names it.
pub fn mode_name(mode: SendMode) -> &'static str {
    match mode {
        SendMode::Reliable => "reliable",
        SendMode::Unreliable => "unreliable",
        _ => "passive",
    }
}

/// Judges a run: broken guarantees first, then the reasons a run may stop short.
pub fn classify(r: &Report) -> Verdict {
    let mut broken = Vec::new();
    for (dir, streams) in r.streams.iter().enumerate() {
        for (ch, s) in streams.iter().enumerate() {
            let name = format!("{} ch{ch} {}", direction(dir), mode_name(s.mode));
            if s.mode == SendMode::Reliable && s.gaps() > 0 {
                broken.push(format!("{name}: {} reliable packets skipped (a later one arrived)", s.gaps()));
            }
            if s.out_of_order > 0 {
                broken.push(format!("{name}: {} packets duplicated or out of order", s.out_of_order));
            }
            if s.corrupted > 0 {
                broken.push(format!("{name}: {} packets corrupted", s.corrupted));
            }
        }
    }
    if !broken.is_empty() {
        return Verdict::Broken(broken);
    }
    if !r.connected {
        let why = r.ended.get("client").map_or_else(|| String::from("no answer"), ToString::to_string);
        return Verdict::Incomplete(format!("the connection could not be established: {why}"));
    }
    let missing: u64 = r.streams.iter().flatten().map(Stream::missing).sum();
    let refused: u64 = r.streams.iter().flatten().map(|s| s.refused).sum();
    let clean = r.ended.get("client") == Some(&DisconnectReason::Local)
        && r.ended.get("server") == Some(&DisconnectReason::remote(0));
    if let Some((side, reason)) =
        r.ended.iter().find(|(_, reason)| !matches!(reason, DisconnectReason::Local | DisconnectReason::Remote { .. }))
    {
        return Verdict::Incomplete(format!(
            "the connection ended early on the {side}'s side ({reason}) with {missing} reliable packets in flight"
        ));
    }
    if r.gave_up || missing > 0 {
        return Verdict::Incomplete(format!(
            "the link is overloaded: {missing} reliable packets were still in flight {} s after the traffic \
             stopped, and {refused} sends were refused (queue full)",
            FINISH_WITHIN.as_secs()
        ));
    }
    if refused > 0 {
        return Verdict::Incomplete(format!(
            "the link is overloaded: {refused} sends were refused because the queue was full"
        ));
    }
    if !clean {
        return Verdict::Incomplete(format!("the connection did not end cleanly: {:?}", r.ended));
    }
    Verdict::Held
}

/// The summary table, its columns aligned to their widest cell, then a line for each
/// direction whose unsent packets cannot be told apart by channel.
pub fn table(r: &Report) -> String {
    let header = [
        "stream",
        "mode",
        "sent",
        "refused",
        "delivered",
        "expired",
        "dropped",
        "skipped",
        "missing",
        "order/dup",
        "corrupt",
        "p50(ms)",
        "p99(ms)",
    ];
    let dash = || String::from("-");
    let mut rows: Vec<[String; 13]> = vec![header.map(String::from)];
    for (dir, streams) in r.streams.iter().enumerate() {
        for (ch, s) in streams.iter().enumerate() {
            let ms = |q: f64| s.percentile(q).map_or_else(dash, |v| format!("{v:.1}"));
            // Unreliable packets never delivered were either never sent (expired, dropped)
            // or sent and lost; passive ones were sent and lost or overtaken.
            let (expired, dropped, skipped) = match (s.mode, r.stream_unsent(dir, ch)) {
                (SendMode::Reliable, _) => (dash(), dash(), dash()),
                (SendMode::Unreliable, Some(u)) => (
                    u.expired.to_string(),
                    u.dropped.to_string(),
                    s.undelivered().saturating_sub(u.expired + u.dropped).to_string(),
                ),
                (SendMode::Unreliable, None) => ("*".into(), "*".into(), s.undelivered_allowed().to_string()),
                _ => (dash(), dash(), s.undelivered_allowed().to_string()),
            };
            rows.push([
                format!("{} ch{ch}", direction(dir)),
                mode_name(s.mode).to_string(),
                s.sent.to_string(),
                s.refused.to_string(),
                s.delivered.to_string(),
                expired,
                dropped,
                skipped,
                if s.mode == SendMode::Reliable { s.missing().to_string() } else { dash() },
                s.out_of_order.to_string(),
                s.corrupted.to_string(),
                ms(0.5),
                ms(0.99),
            ]);
        }
    }
    let widths: Vec<usize> = (0..header.len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &rows {
        for (c, cell) in row.iter().enumerate() {
            if c < 2 {
                let _ = write!(out, "{cell:<w$}  ", w = widths[c]);
            } else {
                let _ = write!(out, "{cell:>w$}  ", w = widths[c]);
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    for dir in [TO_SERVER, TO_CLIENT] {
        let channels = r.unreliable_channels(dir);
        if channels.len() > 1 {
            let list: Vec<String> = channels.iter().map(ToString::to_string).collect();
            let u = r.unsent(dir);
            let _ = writeln!(
                out,
                "* {}: {} unreliable packets expired and {} dropped unsent across channels {} (counted per \
                 connection), included in their skipped figures",
                direction(dir),
                u.expired,
                u.dropped,
                list.join(", ")
            );
        }
    }
    out
}

/// One direction's frames as its sender, the relay and its receiver counted them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Losses {
    /// Frame datagrams the sender sent, resends included.
    pub sent: u64,
    /// Frame datagrams the relay forwarded, and dropped.
    pub forwarded: u64,
    /// See `forwarded`.
    pub dropped: u64,
    /// Other datagrams the relay dropped: acknowledgements and pings alone, handshake and
    /// disconnection, which no sender counts as lost frames.
    pub dropped_other: u64,
    /// Frame datagrams the receiver received, every copy.
    pub received: u64,
    /// Frames the sender counted lost, and of those, the ones it found had arrived after
    /// all (their acknowledgement was late or lost, not the frame).
    pub lost: u64,
    /// See `lost`.
    pub spurious: u64,
}

impl Losses {
    /// Direction `dir`'s frames in `r`; `None` unless both sides' connections were seen.
    pub fn of(r: &Report, dir: usize) -> Option<Self> {
        let (sender, receiver) = (r.sides[dir]?, r.sides[1 - dir]?);
        Some(Self {
            sent: sender.frames_sent + sender.frames_resent,
            forwarded: r.relay.forwarded_frames[dir],
            dropped: r.relay.dropped_frames[dir],
            dropped_other: r.relay.dropped[dir] - r.relay.dropped_frames[dir],
            received: receiver.frames_received,
            lost: sender.frames_lost,
            spurious: sender.losses_spurious,
        })
    }

    /// Frames the sender counted lost and did not find had arrived: those it takes the
    /// path to have dropped.
    pub fn genuine(&self) -> u64 {
        self.lost.saturating_sub(self.spurious)
    }

    /// Whether every frame datagram is accounted for: each one sent passed the relay,
    /// which forwarded or dropped it, and each one forwarded was received.
    pub fn datagrams_reconcile(&self) -> bool {
        self.sent == self.forwarded + self.dropped && self.received == self.forwarded
    }
}

/// One line per direction: the frames its sender sent, what the relay did with them, what
/// the receiver got, and how the frames the sender counted lost compare with those the
/// relay dropped, saying why they differ where they do. These are frames (one a datagram),
/// not the table's packets: several small packets share a frame, a large packet takes
/// several, and a reliable packet lost with its frame is resent in another.
pub fn losses(r: &Report) -> String {
    let mut out = String::new();
    for (dir, side, other) in [(TO_SERVER, "client", "server"), (TO_CLIENT, "server", "client")] {
        let Some(l) = Losses::of(r, dir) else { continue };
        let _ = write!(
            out,
            "losses {}: the {side} sent {} frames (resends included); the relay forwarded {} and dropped {} \
             (besides {} acknowledgement or handshake datagrams); the {other} received {}; the {side} counted {} \
             frames lost: {} on the way, {} spurious (they had arrived; their acknowledgement was late)",
            direction(dir),
            l.sent,
            l.forwarded,
            l.dropped,
            l.dropped_other,
            l.received,
            l.lost,
            l.genuine(),
            l.spurious,
        );
        let gap = l.genuine().abs_diff(l.dropped);
        if l.genuine() > l.dropped {
            let _ = write!(
                out,
                "; {gap} of those on the way had arrived too: the {side} resent them before their acknowledgement \
                 came and took it for the resend's (spurious losses it could not tell)"
            );
        } else if l.genuine() < l.dropped {
            let _ = write!(out, "; {gap} the relay dropped were not yet counted lost when the connection closed");
        }
        if l.sent != l.forwarded + l.dropped {
            let _ =
                write!(out, "; {} frames sent never reached the relay", l.sent.saturating_sub(l.forwarded + l.dropped));
        }
        if l.received != l.forwarded {
            let _ = write!(out, "; {} forwarded were not received", l.forwarded.saturating_sub(l.received));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::packet;

    fn report(modes: [SendMode; 4]) -> Report {
        let mut r = Report::new(modes);
        r.connected = true;
        r.ended = BTreeMap::from([("client", DisconnectReason::Local), ("server", DisconnectReason::remote(0))]);
        r
    }

    /// `sent` packets sent, `delivered` of them delivered in that order.
    fn stream(s: &mut Stream, sent: u64, delivered: &[u64]) {
        for _ in 0..sent {
            s.on_sent();
        }
        for &seq in delivered {
            s.receive(&packet(seq, Duration::ZERO, 40), Duration::from_millis(5));
        }
    }

    /// A side's connection that counted `unsent`.
    fn sender(unsent: Unsent) -> Option<SideCounts> {
        Some(SideCounts { unsent, ..SideCounts::default() })
    }

    const MODES: [SendMode; 4] = [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive, SendMode::Reliable];

    #[test]
    fn a_complete_clean_run_holds_and_skipped_unreliable_packets_are_allowed() {
        let mut r = report(MODES);
        stream(&mut r.streams[0][0], 3, &[0, 1, 2]);
        stream(&mut r.streams[0][1], 3, &[0, 2]);
        stream(&mut r.streams[0][2], 3, &[1]);
        assert_eq!(classify(&r), Verdict::Held);
        assert_eq!((r.streams[0][1].undelivered_allowed(), r.streams[0][1].missing()), (1, 0));
        assert_eq!(Verdict::Held.exit_code(), 0);
    }

    #[test]
    fn a_skipped_reliable_packet_or_a_reordered_or_corrupted_one_breaks_a_guarantee() {
        let mut r = report(MODES);
        stream(&mut r.streams[1][3], 3, &[0, 2]);
        let Verdict::Broken(what) = classify(&r) else { panic!("{:?}", classify(&r)) };
        assert!(what[0].contains("server->client ch3 reliable: 1 reliable packets skipped"), "{what:?}");

        let mut r = report(MODES);
        stream(&mut r.streams[0][1], 3, &[1, 0]);
        r.streams[0][2].receive(b"garbage", Duration::ZERO);
        let verdict = classify(&r);
        assert_eq!(verdict.exit_code(), 1);
        let Verdict::Broken(what) = verdict else { unreachable!() };
        assert_eq!(what.len(), 2, "{what:?}");
    }

    #[test]
    fn no_connection_a_lost_connection_or_an_overload_is_incomplete_not_a_violation() {
        let mut r = report(MODES);
        r.connected = false;
        r.ended = BTreeMap::from([("client", DisconnectReason::Timeout)]);
        let verdict = classify(&r);
        assert_eq!(verdict.exit_code(), 3);
        assert!(
            matches!(&verdict, Verdict::Incomplete(why) if why.contains("could not be established")),
            "{verdict:?}"
        );

        // The tail of a reliable stream never arrived because the connection timed out.
        let mut r = report(MODES);
        stream(&mut r.streams[0][0], 5, &[0, 1, 2]);
        r.ended = BTreeMap::from([("client", DisconnectReason::Timeout)]);
        let verdict = classify(&r);
        assert!(matches!(&verdict, Verdict::Incomplete(why) if why.contains("ended early")), "{verdict:?}");

        // Still in flight when the demo stopped waiting.
        let mut r = report(MODES);
        stream(&mut r.streams[0][0], 5, &[0, 1, 2]);
        r.ended.clear();
        r.gave_up = true;
        let verdict = classify(&r);
        assert!(matches!(&verdict, Verdict::Incomplete(why) if why.contains("overloaded")), "{verdict:?}");

        // Everything arrived, but sends were refused for a full queue.
        let mut r = report(MODES);
        r.streams[1][3].refused = 4;
        let verdict = classify(&r);
        assert!(matches!(&verdict, Verdict::Incomplete(why) if why.contains("4 sends were refused")), "{verdict:?}");
    }

    #[test]
    fn the_table_is_aligned() {
        let mut r = report(MODES);
        stream(&mut r.streams[0][0], 12_345, &[0, 1]);
        let text = table(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 9, "a header and 8 streams, no footnote: {text}");
        // Every column ends at the same offset on every line.
        let ends = |line: &str| -> Vec<usize> {
            let mut ends = Vec::new();
            let bytes = line.as_bytes();
            for i in 1..=bytes.len() {
                if bytes[i - 1] != b' ' && (i == bytes.len() || bytes[i] == b' ') {
                    ends.push(i);
                }
            }
            ends
        };
        let numbers = |line: &str| ends(line).into_iter().rev().take(11).collect::<Vec<_>>();
        for line in &lines[1..] {
            assert_eq!(numbers(line), numbers(lines[0]), "{text}");
        }
    }

    /// The cells of `stream`'s row (direction and channel as the table names them).
    fn row(text: &str, stream: &str) -> Vec<String> {
        let line = text.lines().find(|l| l.starts_with(stream)).unwrap_or_else(|| panic!("{stream}: {text}"));
        line.split_whitespace().skip(3).map(String::from).collect()
    }

    #[test]
    fn unreliable_packets_never_sent_are_told_apart_from_those_lost_on_the_way() {
        let mut r = report(MODES);
        // 10 sent on client->server ch1, 4 delivered: 3 expired and 2 replaced unsent, so
        // 1 was lost on the way.
        stream(&mut r.streams[0][1], 10, &[0, 2, 5, 9]);
        r.sides[0] = sender(Unsent { expired: 3, dropped: 2 });
        stream(&mut r.streams[0][2], 4, &[3]);
        let text = table(&r);
        // sent, refused, delivered, expired, dropped, skipped, missing, ...
        assert_eq!(row(&text, "client->server ch1")[..7], ["10", "0", "4", "3", "2", "1", "-"], "{text}");
        // Passive packets are not dropped unsent: all three are skipped.
        assert_eq!(row(&text, "client->server ch2")[3..6], ["-", "-", "3"], "{text}");
        assert_eq!(row(&text, "client->server ch0")[3..7], ["-", "-", "-", "0"], "{text}");
        assert_eq!(classify(&r), Verdict::Held);
    }

    #[test]
    fn unsent_counts_shared_by_several_unreliable_channels_are_a_footnote_not_a_guess() {
        let modes = [SendMode::Unreliable, SendMode::Unreliable, SendMode::Passive, SendMode::Reliable];
        let mut r = report(modes);
        stream(&mut r.streams[1][0], 5, &[0, 4]);
        r.sides[1] = sender(Unsent { expired: 2, dropped: 1 });
        let text = table(&r);
        assert_eq!(row(&text, "server->client ch0")[3..6], ["*", "*", "3"], "{text}");
        assert!(
            text.contains("* server->client: 2 unreliable packets expired and 1 dropped unsent across channels 0, 1"),
            "{text}"
        );
        // The "*" cells of the other direction are explained too, with its own counts.
        assert!(text.contains("* client->server: 0 unreliable packets expired and 0 dropped"), "{text}");
    }

    #[test]
    fn losses_set_each_sides_count_against_the_relays_drops_and_say_why_they_differ() {
        let mut r = report(MODES);
        r.relay.forwarded_frames = [90, 50];
        r.relay.dropped_frames = [8, 5];
        r.relay.dropped = [10, 7];
        // The client sent 98 frames: 90 forwarded and received, 8 dropped; it counted 11
        // lost, 3 of them spurious: the relay's 8, exactly.
        let client = SideCounts {
            frames_sent: 90,
            frames_resent: 8,
            frames_lost: 11,
            losses_spurious: 3,
            ..SideCounts::default()
        };
        // The server sent 55: it counted 4 lost, none spurious, one short of the relay's 5.
        let server = SideCounts { frames_sent: 50, frames_resent: 5, frames_lost: 4, ..SideCounts::default() };
        r.sides =
            [Some(SideCounts { frames_received: 50, ..client }), Some(SideCounts { frames_received: 90, ..server })];
        let text = losses(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(
            lines[0],
            "losses client->server: the client sent 98 frames (resends included); the relay forwarded 90 and dropped \
             8 (besides 2 acknowledgement or handshake datagrams); the server received 90; the client counted 11 \
             frames lost: 8 on the way, 3 spurious (they had arrived; their acknowledgement was late)",
            "reconciled: nothing to explain"
        );
        assert!(Losses::of(&r, TO_SERVER).is_some_and(|l| l.datagrams_reconcile() && l.genuine() == l.dropped));
        assert!(
            lines[1].ends_with("; 1 the relay dropped were not yet counted lost when the connection closed"),
            "{text}"
        );
        // More counted on the way than the relay dropped: resends of unrecognised
        // spurious losses. And datagrams that never reached the relay, or the receiver.
        r.sides[1] = Some(SideCounts { frames_lost: 7, frames_received: 88, frames_sent: 51, ..server });
        let text = losses(&r);
        assert!(text.contains("; 2 of those on the way had arrived too: the server resent them"), "{text}");
        assert!(text.contains("; 1 frames sent never reached the relay"), "{text}");
        assert!(text.contains("the client received 50"), "{text}");
        assert!(text.lines().next().is_some_and(|l| l.ends_with("; 2 forwarded were not received")), "{text}");
        r.sides[1] = None;
        assert_eq!(losses(&r), "", "both sides are needed");
    }
}
