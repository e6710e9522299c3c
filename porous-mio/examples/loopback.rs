//! POROUS end to end on this machine: a server and a client on 127.0.0.1, talking through
//! a small relay that loses, delays and jitters datagrams, both streaming reliable,
//! unreliable and passive packets on four channels. A live line shows progress; at the end
//! a table per channel and direction gives what was sent, delivered, expired and dropped
//! unsent (unreliable packets past their deadline, or replaced by a newer one), skipped
//! (sent and lost on the way, or overtaken: unreliable and passive packets may be),
//! missing (reliable packets must not be), out of order or duplicated, corrupted, and the
//! latency; then the connection's figures and a verdict.
//!
//! The channels are configured as a game would configure them: channels 0-2 carry small,
//! time-critical packets at high priority, and a channel of unreliable packets keeps only
//! its newest unsent one (`latest_only`: a state snapshot replaces the one before it);
//! channel 3 carries the large bulk packets at low priority, so they fill what the small
//! traffic leaves and never delay it.
//!
//! ```text
//! cargo run --release -p porous-mio --example loopback -- [--loss 0.02] [--delay 15]
//!     [--jitter 5] [--duration 10] [--min-size 16] [--max-size 400] [--bulk 8000]
//!     [--rate 60] [--mix rup]
//! ```
//!
//! Exit status: 0 when every guarantee held; 1 when one was broken (a reliable packet
//! skipped, any packet duplicated, reordered or corrupted); 2 for a usage error; 3 when the
//! run could not be completed, which is not a broken guarantee: the connection could not be
//! established, or ended early (a timeout), or the link was too slow for the traffic
//! asked of it (reliable packets were still in flight when the demo stopped waiting, or
//! sends were refused because the queue was full).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use porous_mio::{
    Bytes, ChannelConfig, DisconnectReason, Event, Host, HostConfig, PeerId, PeerStats, Priority, SendError, SendMode,
};

const SERVER: Token = Token(0);
const CLIENT: Token = Token(1);
const RELAY: Token = Token(2);

/// How long the demo waits, after the traffic, for the reliable packets still in flight.
const FINISH_WITHIN: Duration = Duration::from_secs(30);

const USAGE: &str = "\
usage: loopback [--loss P] [--delay MS] [--jitter MS] [--duration S] [--min-size B]
                [--max-size B] [--bulk B] [--rate N] [--mix MMM] [--help]

A POROUS server and client on 127.0.0.1 stream reliable, unreliable and passive packets
on four channels, both ways, through a relay that loses, delays and jitters datagrams.

  --loss P        chance that the relay drops a datagram, each way, 0 to 1 (0.02)
  --delay MS      the relay's one-way delay in ms (15)
  --jitter MS     random extra delay in ms, up to (5)
  --duration S    seconds of traffic (10)
  --min-size B    smallest packet on channels 0-2, bytes, at least 20 (16 means 20)
  --max-size B    largest packet on channels 0-2, bytes (400)
  --bulk B        size of the reliable packets channel 3 sends 3 times a second (8000)
  --rate N        packets per second on each of channels 0-2, 1 to 10000 (60)
  --mix MMM       modes of channels 0, 1, 2: r reliable, u unreliable, p passive (rup)
  --help          this text

Exit status: 0 every guarantee held, 1 a guarantee was broken, 2 usage error,
3 the run could not complete (no connection, connection lost, link overloaded).";

/// What the demo is asked to do.
#[derive(Clone, Debug, PartialEq)]
struct Options {
    loss: f64,
    delay: Duration,
    jitter: Duration,
    duration: Duration,
    min_size: usize,
    max_size: usize,
    bulk: usize,
    rate: u32,
    mix: [SendMode; 3],
    /// Not a flag: tests shorten it.
    connect_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            loss: 0.02,
            delay: Duration::from_millis(15),
            jitter: Duration::from_millis(5),
            duration: Duration::from_secs(10),
            min_size: 20,
            max_size: 400,
            bulk: 8000,
            rate: 60,
            mix: [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive],
            connect_timeout: HostConfig::default().peer.connect_timeout,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Run(Options),
    Help,
}

/// Parses the flags (without the program name).
fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut o = Options::default();
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Ok(Command::Help);
        }
        let known =
            ["--loss", "--delay", "--jitter", "--duration", "--min-size", "--max-size", "--bulk", "--rate", "--mix"];
        if !known.contains(&flag.as_str()) {
            return Err(format!("unknown flag {flag}"));
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |min: f64, max: f64| -> Result<f64, String> {
            let v: f64 = value.parse().map_err(|_| format!("{flag}: not a number: {value}"))?;
            if !(min..=max).contains(&v) {
                return Err(format!("{flag}: {value} is outside {min}..={max}"));
            }
            Ok(v)
        };
        let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
        match flag.as_str() {
            "--loss" => o.loss = number(0.0, 1.0)?,
            "--delay" => o.delay = ms(number(0.0, 10_000.0)?),
            "--jitter" => o.jitter = ms(number(0.0, 10_000.0)?),
            "--duration" => o.duration = Duration::from_secs_f64(number(0.1, 86_400.0)?),
            "--min-size" => o.min_size = number(0.0, 1e6)? as usize,
            "--max-size" => o.max_size = number(1.0, 1e6)? as usize,
            "--bulk" => o.bulk = number(20.0, 1e7)? as usize,
            "--rate" => o.rate = number(1.0, 10_000.0)? as u32,
            _ => {
                let modes: Vec<SendMode> = value
                    .chars()
                    .map(|c| match c {
                        'r' => Ok(SendMode::Reliable),
                        'u' => Ok(SendMode::Unreliable),
                        'p' => Ok(SendMode::Passive),
                        _ => Err(format!("--mix: {c} is not r, u or p")),
                    })
                    .collect::<Result<_, _>>()?;
                o.mix = modes.try_into().map_err(|_| "--mix takes three letters, such as rup".to_string())?;
            }
        }
    }
    // A packet carries a 20-byte header of its own.
    o.min_size = o.min_size.max(20);
    if o.max_size < o.min_size {
        return Err(format!("--max-size {} is below --min-size {}", o.max_size, o.min_size));
    }
    Ok(Command::Run(o))
}

/// A small xorshift generator: the demo's randomness (sizes, the relay's fate).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A packet that names itself: sequence number, send time, length, then a pattern.
fn packet(seq: u64, sent: Duration, len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(sent.as_nanos() as u64).to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend((20..len).map(|i| (seq as usize ^ i) as u8));
    Bytes::from(v)
}

/// Checks a packet; returns its sequence number and send time.
fn unpack(data: &[u8]) -> Option<(u64, Duration)> {
    let word = |i: usize| data.get(i..i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let (seq, sent) = (word(0)?, word(8)?);
    let len = u32::from_le_bytes(data.get(16..20)?.try_into().ok()?) as usize;
    let ok = len == data.len() && data.iter().enumerate().skip(20).all(|(i, &b)| b == (seq as usize ^ i) as u8);
    ok.then(|| (seq, Duration::from_nanos(sent)))
}

/// One direction of one channel.
#[derive(Debug)]
struct Stream {
    mode: SendMode,
    sent: u64,
    /// Sends the host refused (its queue was full: the link is slower than the traffic).
    refused: u64,
    delivered: u64,
    /// Delivered with a sequence number not above the last one: duplicated or reordered.
    out_of_order: u64,
    corrupted: u64,
    /// Highest sequence number delivered.
    last: Option<u64>,
    seen: Vec<bool>,
    latencies: Vec<f64>,
}

impl Stream {
    fn new(mode: SendMode) -> Self {
        Self {
            mode,
            sent: 0,
            refused: 0,
            delivered: 0,
            out_of_order: 0,
            corrupted: 0,
            last: None,
            seen: Vec::new(),
            latencies: Vec::new(),
        }
    }

    fn receive(&mut self, data: &[u8], now: Duration) {
        let Some((seq, sent)) = unpack(data) else {
            self.corrupted += 1;
            return;
        };
        if self.last.is_some_and(|l| seq <= l) {
            self.out_of_order += 1;
        }
        self.last = self.last.max(Some(seq));
        self.delivered += 1;
        if let Some(s) = self.seen.get_mut(seq as usize) {
            *s = true;
        }
        self.latencies.push((now.saturating_sub(sent)).as_secs_f64() * 1000.0);
    }

    /// Packets never delivered.
    fn undelivered(&self) -> u64 {
        self.seen.iter().filter(|s| !**s).count() as u64
    }

    /// Packets never delivered although a later one was: for reliable packets, a broken
    /// guarantee; for the others, what they may do.
    fn gaps(&self) -> u64 {
        let Some(last) = self.last else { return 0 };
        self.seen.iter().take(last as usize).filter(|s| !**s).count() as u64
    }

    /// Reliable packets never delivered (gaps and tail).
    fn missing(&self) -> u64 {
        if self.mode == SendMode::Reliable { self.undelivered() } else { 0 }
    }

    /// Unreliable and passive packets never delivered (sent and lost, overtaken, or never
    /// sent), as allowed.
    fn undelivered_allowed(&self) -> u64 {
        if self.mode == SendMode::Reliable { 0 } else { self.undelivered() }
    }

    fn percentile(&self, q: f64) -> Option<f64> {
        let mut l = self.latencies.clone();
        l.sort_by(f64::total_cmp);
        l.get(((l.len().max(1) - 1) as f64 * q) as usize).copied()
    }
}

/// The relay: forwards datagrams between the client and the server with loss, delay and
/// jitter, like a small, bad network.
struct Relay {
    socket: UdpSocket,
    server: SocketAddr,
    client: Option<SocketAddr>,
    queue: VecDeque<(Instant, SocketAddr, Vec<u8>)>,
    buf: Vec<u8>,
    rng: Rng,
    dropped: u64,
    forwarded: u64,
}

impl Relay {
    fn pump(&mut self, o: &Options) {
        while let Ok((n, from)) = self.socket.recv_from(&mut self.buf) {
            let to = if from == self.server {
                match self.client {
                    Some(c) => c,
                    None => continue,
                }
            } else {
                self.client = Some(from);
                self.server
            };
            if self.rng.unit() < o.loss {
                self.dropped += 1;
                continue;
            }
            // Keep the order of a real queue: never earlier than the last one queued.
            let mut at = Instant::now() + o.delay + o.jitter.mul_f64(self.rng.unit());
            if let Some(&(last, _, _)) = self.queue.back() {
                at = at.max(last);
            }
            self.queue.push_back((at, to, self.buf[..n].to_vec()));
        }
        let now = Instant::now();
        while self.queue.front().is_some_and(|(t, _, _)| *t <= now) {
            if let Some((_, to, d)) = self.queue.pop_front()
                && self.socket.send_to(&d, to).is_ok()
            {
                self.forwarded += 1;
            }
        }
    }

    fn timeout(&self) -> Option<Duration> {
        self.queue.front().map(|(t, _, _)| t.saturating_duration_since(Instant::now()))
    }
}

/// Unreliable packets a sending side dropped without ever sending them, from its
/// connection's counters. POROUS counts them per connection, not per channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Unsent {
    /// Still queued when their channel's deadline passed
    /// (`TransferStats::unreliable_expired`; a packet larger than a datagram counts once
    /// per fragment).
    expired: u64,
    /// Dropped for a full send queue (`PeerStats::unreliable_dropped`), or replaced by a
    /// newer packet on a `latest_only` channel (`PeerStats::unreliable_replaced`).
    dropped: u64,
}

impl Unsent {
    fn of(stats: &PeerStats) -> Self {
        Self {
            expired: stats.transfer.unreliable_expired,
            dropped: stats.unreliable_dropped + stats.unreliable_replaced,
        }
    }
}

/// What a run saw.
#[derive(Debug)]
struct Report {
    /// `streams[direction][channel]`: 0 = client to server, 1 = server to client.
    streams: [[Stream; 4]; 2],
    /// What each direction's sender dropped unsent: the client's counters for direction 0,
    /// the server's for direction 1.
    unsent: [Unsent; 2],
    /// Whether the connection was established.
    connected: bool,
    /// How each side's connection ended, if it did.
    ended: BTreeMap<&'static str, DisconnectReason>,
    /// The demo stopped waiting for reliable packets still in flight.
    gave_up: bool,
    /// Figures for the summary.
    notes: Vec<String>,
}

/// What a report means.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Every guarantee held and the run completed.
    Held,
    /// A guarantee was broken.
    Broken(Vec<String>),
    /// The run could not complete, for a reason that breaks no guarantee.
    Incomplete(String),
}

impl Verdict {
    fn exit_code(&self) -> u8 {
        match self {
            Self::Held => 0,
            Self::Broken(_) => 1,
            Self::Incomplete(_) => 3,
        }
    }
}

fn direction(dir: usize) -> &'static str {
    if dir == 0 { "client->server" } else { "server->client" }
}

fn mode_name(mode: SendMode) -> &'static str {
    match mode {
        SendMode::Reliable => "reliable",
        SendMode::Unreliable => "unreliable",
        _ => "passive",
    }
}

impl Report {
    /// The channels of direction `dir` that carry unreliable packets.
    fn unreliable_channels(&self, dir: usize) -> Vec<usize> {
        (0..4).filter(|&ch| self.streams[dir][ch].mode == SendMode::Unreliable).collect()
    }

    /// The unsent packets of one stream: known when it is its direction's only unreliable
    /// stream (the counters are per connection).
    fn unsent(&self, dir: usize, ch: usize) -> Option<Unsent> {
        (self.unreliable_channels(dir) == [ch]).then_some(self.unsent[dir])
    }
}

/// Judges a run: broken guarantees first, then the reasons a run may stop short.
fn classify(r: &Report) -> Verdict {
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
fn table(r: &Report) -> String {
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
            let (expired, dropped, skipped) = match (s.mode, r.unsent(dir, ch)) {
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
    for dir in 0..2 {
        let channels = r.unreliable_channels(dir);
        if channels.len() > 1 {
            let list: Vec<String> = channels.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                out,
                "* {}: {} unreliable packets expired and {} dropped unsent across channels {} (counted per \
                 connection), included in their skipped figures",
                direction(dir),
                r.unsent[dir].expired,
                r.unsent[dir].dropped,
                list.join(", ")
            );
        }
    }
    out
}

/// The channels as a game would set them up for this traffic. Channel 3's large packets
/// are bulk data (a level chunk, a replay): low priority, so they take only what the small
/// packets of channels 0-2 leave and never hold one of them back by a fragment. A channel
/// of unreliable packets carries state snapshots, of which only the newest matters: a
/// snapshot still queued when the next one comes is replaced (`latest_only`). Everything
/// else keeps its default: a 100 ms deadline for unreliable packets (six ticks at 60 Hz),
/// repair copies of small reliable packets, equal weights.
fn configure_channels(config: &mut HostConfig, o: &Options) {
    for (ch, mode) in o.mix.iter().enumerate() {
        if let Some(c) = config.peer.channels.get_mut(ch) {
            c.latest_only = *mode == SendMode::Unreliable;
        }
    }
    if let Some(bulk) = config.peer.channels.get_mut(3) {
        *bulk = ChannelConfig::with_priority(Priority::Low);
    }
}

fn run(o: &Options, live: bool) -> std::io::Result<Report> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(256);
    let any: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = HostConfig::default();
    config.peer.max_packet_size = o.bulk.max(o.max_size) + 1024;
    config.peer.connect_timeout = o.connect_timeout;
    configure_channels(&mut config, o);
    let mut server = Host::bind_with(any, config.clone(), poll.registry(), SERVER)?;
    let mut client = Host::bind_with(any, config, poll.registry(), CLIENT)?;
    let mut relay_socket = UdpSocket::bind(any)?;
    poll.registry().register(&mut relay_socket, RELAY, Interest::READABLE)?;
    let mut relay = Relay {
        socket: relay_socket,
        server: server.local_addr(),
        client: None,
        queue: VecDeque::new(),
        buf: vec![0; 65_536],
        rng: Rng(0x9E37_79B9_7F4A_7C15),
        dropped: 0,
        forwarded: 0,
    };
    let relay_addr = relay.socket.local_addr()?;
    println!(
        "POROUS loopback: server {}, client {}, relay {relay_addr} ({:.0}% loss, {} ms +{} ms each way), {} s of traffic",
        server.local_addr(),
        client.local_addr(),
        o.loss * 100.0,
        o.delay.as_millis(),
        o.jitter.as_millis(),
        o.duration.as_secs_f64()
    );
    let start = Instant::now();
    let client_peer = client.connect(relay_addr).map_err(std::io::Error::other)?;
    let mut server_peer: Option<PeerId> = None;
    let modes = [o.mix[0], o.mix[1], o.mix[2], SendMode::Reliable];
    let mut report = Report {
        streams: [modes.map(Stream::new), modes.map(Stream::new)],
        unsent: [Unsent::default(); 2],
        connected: false,
        ended: BTreeMap::new(),
        gave_up: false,
        notes: Vec::new(),
    };
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let tick = Duration::from_secs(1) / o.rate;
    let bulk_tick = Duration::from_secs(1) / 3;
    let (mut next_send, mut next_bulk) = (start, start);
    let terminal = live && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut next_print = start;
    let mut traffic_end: Option<Instant> = None;
    let mut disconnecting = false;
    let mut last_seen: [Option<PeerStats>; 2] = [None, None];
    loop {
        let now = Instant::now();
        if traffic_end.is_some_and(|end| now >= end + FINISH_WITHIN) {
            report.gave_up = true;
            break;
        }
        // Traffic: every tick, one packet per channel each way.
        if let (true, None, Some(server_peer)) = (report.connected, traffic_end, server_peer)
            && now >= next_send
        {
            let elapsed = now - start;
            let bulk_due = now >= next_bulk;
            while next_send <= now {
                next_send += tick;
            }
            if bulk_due {
                next_bulk += bulk_tick;
            }
            for (dir, streams) in report.streams.iter_mut().enumerate() {
                let (host, peer) = if dir == 0 { (&mut client, client_peer) } else { (&mut server, server_peer) };
                for (ch, s) in streams.iter_mut().enumerate() {
                    let len = match ch {
                        3 if bulk_due => o.bulk,
                        3 => continue,
                        _ => o.min_size + (rng.next() as usize % (o.max_size - o.min_size + 1)),
                    };
                    match host.send(peer, ch, packet(s.sent, elapsed, len), s.mode) {
                        Ok(()) => {
                            s.sent += 1;
                            s.seen.push(false);
                        }
                        Err(SendError::QueueFull { .. }) => s.refused += 1,
                        Err(e) => return Err(std::io::Error::other(e)),
                    }
                }
            }
            if elapsed >= o.duration {
                traffic_end = Some(now);
            }
        }
        // Once the traffic is over and every reliable packet has arrived, disconnect.
        let all_in = report.streams.iter().flatten().all(|s| s.missing() == 0);
        if traffic_end.is_some() && !disconnecting && all_in {
            client.disconnect(client_peer);
            disconnecting = true;
        }
        if report.ended.len() == 2 || (!report.connected && report.ended.contains_key("client")) {
            break;
        }
        // Either side ended for a reason of its own: the other will time out, don't wait.
        if report.ended.values().any(|r| !matches!(r, DisconnectReason::Local | DisconnectReason::Remote { .. })) {
            break;
        }
        let timeout = [server.timeout(), client.timeout(), relay.timeout(), Some(Duration::from_millis(5))]
            .into_iter()
            .flatten()
            .min();
        poll.poll(&mut events, timeout)?;
        relay.pump(o);
        server.process()?;
        client.process()?;
        relay.pump(o);
        let t = start.elapsed();
        for (name, host, dir) in [("server", &mut server, 0usize), ("client", &mut client, 1)] {
            while let Some(e) = host.poll_event() {
                match e {
                    Event::Connected { peer, .. } => {
                        if name == "server" {
                            server_peer = Some(peer);
                        }
                        report.connected = server_peer.is_some();
                    }
                    Event::Received { channel, data, .. } => {
                        if let Some(s) = report.streams[dir].get_mut(channel) {
                            s.receive(&data, t);
                        }
                    }
                    Event::Disconnected { reason, .. } => {
                        report.ended.insert(name, reason);
                    }
                    _ => {}
                }
            }
        }
        // Each side's connection as last seen: a peer's counters go with it once the
        // disconnection is over.
        let current = [client.peer_stats(client_peer), server_peer.and_then(|p| server.peer_stats(p))];
        for (seen, now_seen) in last_seen.iter_mut().zip(current) {
            if now_seen.is_some() {
                *seen = now_seen;
            }
        }
        if live && now >= next_print {
            next_print = now + Duration::from_millis(if terminal { 250 } else { 2000 });
            let s = last_seen[0];
            let sent: u64 = report.streams.iter().flatten().map(|s| s.sent).sum();
            let got: u64 = report.streams.iter().flatten().map(|s| s.delivered).sum();
            print!(
                "{}[{:5.1} s] sent {sent:>7} delivered {got:>7}  rtt {:>6.1} ms  cwnd {:>7}  lost {:>5}  resent {:>5}   {}",
                if terminal { "\r" } else { "" },
                t.as_secs_f64(),
                s.map_or(0.0, |s| s.rtt.as_secs_f64() * 1000.0),
                s.map_or(0, |s| s.cwnd),
                s.map_or(0, |s| s.transfer.frames_lost),
                s.map_or(0, |s| s.transfer.frames_resent),
                if terminal { "" } else { "\n" },
            );
            let _ = std::io::stdout().flush();
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let wire = client.core().stats().bytes_sent + server.core().stats().bytes_sent;
    let delivered: u64 = report.streams.iter().flatten().map(|s| s.delivered).sum();
    for (side, stats) in ["client", "server"].into_iter().zip(last_seen) {
        let Some(s) = stats else { continue };
        report.unsent[usize::from(side == "server")] = Unsent::of(&s);
        report.notes.push(format!(
            "{side} connection: rtt {:.1} ms, cwnd {} B, pacing {:.0} kB/s, frames sent {}, resent {}, lost {}, \
             repair copies {}, probes {}",
            s.rtt.as_secs_f64() * 1000.0,
            s.cwnd,
            s.congestion.pacing_rate as f64 / 1000.0,
            s.transfer.frames_sent,
            s.transfer.frames_resent,
            s.transfer.frames_lost,
            s.transfer.repair_copies,
            s.transfer.probes,
        ));
    }
    report.notes.push(format!(
        "relay: {} datagrams forwarded, {} dropped; wire: {wire} B for {delivered} packets delivered = {:.1} B per \
         packet, in {elapsed:.1} s",
        relay.forwarded,
        relay.dropped,
        wire as f64 / delivered.max(1) as f64,
    ));
    let ended: Vec<String> = report.ended.iter().map(|(side, reason)| format!("{side}: {reason}")).collect();
    report.notes.push(format!("ended: {}", if ended.is_empty() { String::from("-") } else { ended.join("; ") }));
    Ok(report)
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(Command::Run(o)) => o,
        Ok(Command::Help) => {
            // Not `println!`: `loopback --help | head` must not panic on a closed pipe.
            let _ = writeln!(std::io::stdout(), "{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("loopback: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let report = match run(&options, true) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("\nloopback: {e}");
            return ExitCode::from(3);
        }
    };
    println!("\n\n{}", table(&report));
    for note in &report.notes {
        println!("{note}");
    }
    let verdict = classify(&report);
    match &verdict {
        Verdict::Held => println!("all guarantees held"),
        Verdict::Broken(what) => {
            println!("GUARANTEE VIOLATED:");
            for line in what {
                println!("  {line}");
            }
        }
        Verdict::Incomplete(why) => println!("run incomplete (no guarantee broken): {why}"),
    }
    ExitCode::from(verdict.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn options(s: &str) -> Options {
        match parse(args(s)) {
            Ok(Command::Run(o)) => o,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn flags_parse_and_the_defaults_model_a_game() {
        assert_eq!(options(""), Options::default());
        let o = options("--loss 0.1 --delay 40 --jitter 10 --duration 20 --mix rrp --rate 30 --bulk 100");
        assert_eq!(o.loss, 0.1);
        assert_eq!((o.delay, o.jitter), (Duration::from_millis(40), Duration::from_millis(10)));
        assert_eq!(o.duration, Duration::from_secs(20));
        assert_eq!(o.mix, [SendMode::Reliable, SendMode::Reliable, SendMode::Passive]);
        assert_eq!((o.rate, o.bulk), (30, 100));
        assert_eq!(options("--min-size 5").min_size, 20, "a packet needs its 20-byte header");
        assert_eq!(parse(args("--help")), Ok(Command::Help));
        assert_eq!(parse(args("--loss 0.5 -h")), Ok(Command::Help));
    }

    #[test]
    fn bad_flags_are_errors_that_say_what_is_wrong() {
        for (line, says) in [
            ("--frobnicate 3", "unknown flag --frobnicate"),
            ("--loss", "--loss needs a value"),
            ("--loss lots", "not a number"),
            ("--loss 1.5", "outside"),
            ("--rate 0", "outside"),
            ("--duration -1", "outside"),
            ("--mix ru", "three letters"),
            ("--mix rux", "x is not r, u or p"),
            ("--min-size 300 --max-size 100", "below --min-size"),
        ] {
            let err = parse(args(line)).expect_err(line);
            assert!(err.contains(says), "{line}: {err}");
        }
    }

    fn report(modes: [SendMode; 4]) -> Report {
        Report {
            streams: [modes.map(Stream::new), modes.map(Stream::new)],
            unsent: [Unsent::default(); 2],
            connected: true,
            ended: BTreeMap::from([("client", DisconnectReason::Local), ("server", DisconnectReason::remote(0))]),
            gave_up: false,
            notes: Vec::new(),
        }
    }

    /// `seqs` sent, `delivered` of them delivered in that order.
    fn stream(s: &mut Stream, sent: u64, delivered: &[u64]) {
        for seq in 0..sent {
            s.sent += 1;
            s.seen.push(false);
            let _ = seq;
        }
        for &seq in delivered {
            s.receive(&packet(seq, Duration::ZERO, 40), Duration::from_millis(5));
        }
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
        r.unsent[0] = Unsent { expired: 3, dropped: 2 };
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
        r.unsent[1] = Unsent { expired: 2, dropped: 1 };
        let text = table(&r);
        assert_eq!(row(&text, "server->client ch0")[3..6], ["*", "*", "3"], "{text}");
        assert!(
            text.contains("* server->client: 2 unreliable packets expired and 1 dropped unsent across channels 0, 1"),
            "{text}"
        );
        // The "*" cells of the other direction are explained too, with its own counts.
        assert!(text.contains("* client->server: 0 unreliable packets expired and 0 dropped"), "{text}");
    }

    /// A short real run: the whole demo, end to end.
    #[test]
    fn a_one_second_run_holds_every_guarantee() {
        let o = options("--duration 1 --delay 5 --jitter 2");
        let report = run(&o, false).unwrap();
        assert_eq!(classify(&report), Verdict::Held, "{}", table(&report));
        assert!(report.streams.iter().flatten().all(|s| s.delivered > 0), "{}", table(&report));
    }

    /// A link that loses everything: the connection attempt fails, and says so.
    #[test]
    fn a_dead_link_is_reported_as_a_failed_connection() {
        let mut o = options("--loss 1 --duration 1");
        o.connect_timeout = Duration::from_millis(300);
        let report = run(&o, false).unwrap();
        let verdict = classify(&report);
        assert!(
            matches!(&verdict, Verdict::Incomplete(why) if why.contains("could not be established")),
            "{verdict:?}"
        );
        assert_eq!(verdict.exit_code(), 3);
    }
}
