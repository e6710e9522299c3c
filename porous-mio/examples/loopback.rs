//! POROUS end to end on this machine: a server and a client on 127.0.0.1, talking through
//! a small relay that loses, delays and jitters datagrams, both streaming reliable,
//! unreliable and passive packets on four channels. A live line shows progress; at the end
//! a table per channel and direction gives what was delivered, the order checks, the
//! latency, and the connection's figures. The exit status is non-zero if any guarantee was
//! broken: a reliable packet missing, duplicated or out of order, any packet reordered or
//! corrupted.
//!
//! ```text
//! cargo run --release -p porous-mio --example loopback -- [--loss 0.02] [--delay 15]
//!     [--jitter 5] [--duration 10] [--min-size 16] [--max-size 400] [--bulk 8000]
//!     [--rate 60] [--mix rup]
//! ```
//!
//! `--loss` is the chance each datagram is dropped (each way), `--delay`/`--jitter` the
//! relay's one-way delay and its random extra in ms, `--duration` seconds of traffic,
//! `--min-size`/`--max-size` the size range of packets on channels 0-2, `--bulk` the size
//! of the reliable packets channel 3 sends three times a second (fragmented), `--rate`
//! packets per second on each of channels 0-2, and `--mix` the modes of channels 0, 1 and
//! 2 (r reliable, u unreliable, p passive). The defaults model a game: 60 Hz of small
//! packets both ways plus a stream of larger reliable ones, over a link with 2% loss.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use porous_mio::{DisconnectReason, Event, Host, HostConfig, PeerId, SendMode};

const SERVER: Token = Token(0);
const CLIENT: Token = Token(1);
const RELAY: Token = Token(2);

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
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        loss: 0.02,
        delay: Duration::from_millis(15),
        jitter: Duration::from_millis(5),
        duration: Duration::from_secs(10),
        min_size: 16,
        max_size: 400,
        bulk: 8000,
        rate: 60,
        mix: [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive],
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<f64>().map_err(|_| format!("{flag}: not a number: {v}"));
        match flag.as_str() {
            "--loss" => o.loss = num(&value)?.clamp(0.0, 0.9),
            "--delay" => o.delay = Duration::from_secs_f64(num(&value)? / 1000.0),
            "--jitter" => o.jitter = Duration::from_secs_f64(num(&value)? / 1000.0),
            "--duration" => o.duration = Duration::from_secs_f64(num(&value)?),
            "--min-size" => o.min_size = num(&value)? as usize,
            "--max-size" => o.max_size = num(&value)? as usize,
            "--bulk" => o.bulk = num(&value)? as usize,
            "--rate" => o.rate = num(&value)?.max(1.0) as u32,
            "--mix" => {
                let modes: Vec<SendMode> = value
                    .chars()
                    .map(|c| match c {
                        'r' => Ok(SendMode::Reliable),
                        'u' => Ok(SendMode::Unreliable),
                        'p' => Ok(SendMode::Passive),
                        _ => Err(format!("--mix: {c} is not r, u or p")),
                    })
                    .collect::<Result<_, _>>()?;
                o.mix = modes.try_into().map_err(|_| "--mix takes three letters, e.g. rup".to_string())?;
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    o.min_size = o.min_size.max(20);
    o.max_size = o.max_size.max(o.min_size);
    o.bulk = o.bulk.max(20);
    Ok(o)
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
#[derive(Default)]
struct Stream {
    mode: Option<SendMode>,
    sent: u64,
    delivered: u64,
    last: Option<u64>,
    violations: u64,
    seen: Vec<bool>,
    latencies: Vec<f64>,
}

impl Stream {
    fn receive(&mut self, data: &[u8], now: Duration) {
        let Some((seq, sent)) = unpack(data) else {
            self.violations += 1; // corrupted
            return;
        };
        if self.last.is_some_and(|l| seq <= l) {
            self.violations += 1; // duplicated or reordered
        }
        self.last = Some(seq);
        self.delivered += 1;
        if let Some(s) = self.seen.get_mut(seq as usize) {
            *s = true;
        }
        self.latencies.push((now.saturating_sub(sent)).as_secs_f64() * 1000.0);
    }

    fn missing_reliable(&self) -> u64 {
        if self.mode == Some(SendMode::Reliable) {
            self.sent - self.seen.iter().filter(|&&s| s).count() as u64
        } else {
            0
        }
    }

    fn percentile(&self, q: f64) -> f64 {
        let mut l = self.latencies.clone();
        l.sort_by(f64::total_cmp);
        l.get(((l.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or(0.0)
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

fn run(o: &Options) -> std::io::Result<bool> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(256);
    let any: SocketAddr = "127.0.0.1:0".parse().map_err(std::io::Error::other)?;
    let mut config = HostConfig::default();
    config.peer.max_packet_size = o.bulk.max(o.max_size) + 1024;
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
    let mut connected = false;
    // streams[direction][channel]: 0 = client to server, 1 = server to client.
    let modes = [o.mix[0], o.mix[1], o.mix[2], SendMode::Reliable];
    let mut streams: [[Stream; 4]; 2] = Default::default();
    for dir in &mut streams {
        for (ch, s) in dir.iter_mut().enumerate() {
            s.mode = Some(modes[ch]);
        }
    }
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let tick = Duration::from_secs(1) / o.rate;
    let bulk_tick = Duration::from_secs(1) / 3;
    let mut next_send = start;
    let mut next_bulk = start;
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut next_print = start;
    let mut traffic_end = None;
    let mut disconnecting = false;
    let mut ended: BTreeMap<&str, DisconnectReason> = BTreeMap::new();
    let hard_stop = start + o.duration + Duration::from_secs(30);
    loop {
        let now = Instant::now();
        if now >= hard_stop {
            println!("\nstopping: the connection did not finish within 30 s of the traffic");
            break;
        }
        // Traffic: every tick, one packet per channel each way.
        if connected && traffic_end.is_none() && now >= next_send {
            let elapsed = now - start;
            let bulk_due = now >= next_bulk;
            while next_send <= now {
                next_send += tick;
            }
            if bulk_due {
                next_bulk += bulk_tick;
            }
            for (dir, streams) in streams.iter_mut().enumerate() {
                let (host, peer) = if dir == 0 {
                    (&mut client, client_peer)
                } else {
                    (&mut server, server_peer.unwrap_or(client_peer))
                };
                for (ch, s) in streams.iter_mut().enumerate() {
                    let len = match ch {
                        3 if bulk_due => o.bulk,
                        3 => continue,
                        _ => o.min_size + (rng.next() as usize % (o.max_size - o.min_size + 1)),
                    };
                    if host.send(peer, ch, packet(s.sent, elapsed, len), modes[ch]).is_ok() {
                        s.sent += 1;
                        s.seen.push(false);
                    }
                }
            }
            if elapsed >= o.duration {
                traffic_end = Some(now);
            }
        }
        // Once the traffic is over and every reliable packet has arrived, disconnect.
        let all_in = streams.iter().flatten().all(|s| s.missing_reliable() == 0);
        if let (Some(_), false, true, Some(_)) = (traffic_end, disconnecting, all_in, server_peer) {
            client.disconnect(client_peer);
            disconnecting = true;
        }
        if ended.len() == 2 {
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
                        connected = server_peer.is_some();
                    }
                    Event::Received { channel, data, .. } => {
                        if let Some(s) = streams[dir].get_mut(channel) {
                            s.receive(&data, t);
                        }
                    }
                    Event::Disconnected { reason, .. } => {
                        ended.insert(name, reason);
                    }
                    _ => {}
                }
            }
        }
        if now >= next_print {
            next_print = now + Duration::from_millis(if terminal { 250 } else { 2000 });
            let s = client.peer_stats(client_peer);
            let sent: u64 = streams.iter().flatten().map(|s| s.sent).sum();
            let got: u64 = streams.iter().flatten().map(|s| s.delivered).sum();
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
    println!();
    let elapsed = start.elapsed().as_secs_f64();
    let wire = client.core().stats().bytes_sent + server.core().stats().bytes_sent;
    let delivered: u64 = streams.iter().flatten().map(|s| s.delivered).sum();
    let payload: u64 = streams.iter().flatten().map(|s| s.delivered).sum::<u64>();
    println!(
        "\n{:<20} {:>8} {:>9} {:>8} {:>10} {:>9} {:>9}",
        "stream", "sent", "delivered", "missing", "order/dup", "p50 ms", "p99 ms"
    );
    let mut ok = true;
    for (dir, name) in [(0, "client->server"), (1, "server->client")] {
        for (ch, s) in streams[dir].iter().enumerate() {
            let mode = match modes[ch] {
                SendMode::Reliable => "reliable",
                SendMode::Unreliable => "unreliable",
                _ => "passive",
            };
            let missing = s.missing_reliable();
            ok &= missing == 0 && s.violations == 0;
            println!(
                "{:<20} {:>8} {:>9} {:>8} {:>10} {:>9.1} {:>9.1}",
                format!("{name} ch{ch} {mode}"),
                s.sent,
                s.delivered,
                missing,
                s.violations,
                s.percentile(0.5),
                s.percentile(0.99)
            );
        }
    }
    if let Some(s) = client.peer_stats(client_peer).or_else(|| server_peer.and_then(|p| server.peer_stats(p))) {
        println!(
            "\nclient connection: rtt {:.1} ms, cwnd {} B, frames sent {} resent {} lost {}",
            s.rtt.as_secs_f64() * 1000.0,
            s.cwnd,
            s.transfer.frames_sent,
            s.transfer.frames_resent,
            s.transfer.frames_lost
        );
    }
    println!(
        "relay: {} forwarded, {} dropped; wire: {wire} B for {delivered} packets delivered = {:.1} B per packet ({payload} packets in {elapsed:.1} s)",
        relay.forwarded,
        relay.dropped,
        wire as f64 / delivered.max(1) as f64,
    );
    println!("ended: {ended:?}");
    let clean =
        ended.get("client") == Some(&DisconnectReason::Local) && ended.get("server") == Some(&DisconnectReason::Remote);
    ok &= clean;
    println!("{}", if ok { "all guarantees held" } else { "GUARANTEE VIOLATED (see above)" });
    Ok(ok)
}

fn main() -> ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
