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
//!     [--rate 60] [--mix rup] [--plot FILE]
//! ```
//!
//! `--plot FILE` draws the run as SVG: every packet's latency by when it was sent, per
//! channel and direction, and each side's congestion window, bytes in flight, round trip
//! and pacing rate every 100 ms (`porous_loopback::plot`).
//!
//! Exit status: 0 when every guarantee held; 1 when one was broken (a reliable packet
//! skipped, any packet duplicated, reordered or corrupted); 2 for a usage error; 3 when the
//! run could not be completed, which is not a broken guarantee: the connection could not be
//! established, or ended early (a timeout), or the link was too slow for the traffic
//! asked of it (reliable packets were still in flight when the demo stopped waiting, or
//! sends were refused because the queue was full).

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};
use porous_loopback::plot::Plot;
use porous_loopback::relay::{Path, Relay, TO_CLIENT, TO_SERVER};
use porous_loopback::rng::Rng;
use porous_loopback::verdict::{FINISH_WITHIN, Report, SideCounts, Verdict, classify, losses, table};
use porous_mio::{
    ChannelConfig, DisconnectReason, Event, Host, HostConfig, PeerId, PeerStats, Priority, SendError, SendMode,
};

const SERVER: Token = Token(0);
const CLIENT: Token = Token(1);

const USAGE: &str = "\
usage: loopback [--loss P] [--delay MS] [--jitter MS] [--duration S] [--min-size B]
                [--max-size B] [--bulk B] [--rate N] [--mix MMM] [--plot FILE] [--help]

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
  --plot FILE     draw the run into FILE as SVG: each packet's latency, and each side's
                  congestion window, bytes in flight, round trip and pacing rate
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
    /// Where to draw the run's time series, if anywhere.
    plot: Option<String>,
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
            plot: None,
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
        let known = [
            "--loss",
            "--delay",
            "--jitter",
            "--duration",
            "--min-size",
            "--max-size",
            "--bulk",
            "--rate",
            "--mix",
            "--plot",
        ];
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
            "--plot" => o.plot = Some(value),
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

/// Runs the demo: a server and a client on 127.0.0.1 through the relay (`porous_loopback`,
/// on threads of its own), traffic for `o.duration`, then a clean disconnection once every
/// reliable packet has arrived. `live` prints a progress line.
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
    let path = Path { loss: o.loss, delay: o.delay, jitter: o.jitter, seed: 0x9E37_79B9_7F4A_7C15, mtu: None };
    let relay = Relay::start(server.local_addr(), path)?;
    println!(
        "POROUS loopback: server {}, client {}, relay {} ({:.0}% loss, {} ms +{} ms each way), {} s of traffic",
        server.local_addr(),
        client.local_addr(),
        relay.addr(),
        o.loss * 100.0,
        o.delay.as_millis(),
        o.jitter.as_millis(),
        o.duration.as_secs_f64()
    );
    let start = Instant::now();
    let client_peer = client.connect(relay.addr()).map_err(std::io::Error::other)?;
    let mut server_peer: Option<PeerId> = None;
    let mut report = Report::new([o.mix[0], o.mix[1], o.mix[2], SendMode::Reliable]);
    let mut rng = Rng::new(0x2545_F491_4F6C_DD1D);
    let tick = Duration::from_secs(1) / o.rate;
    let bulk_tick = Duration::from_secs(1) / 3;
    let (mut next_send, mut next_bulk) = (start, start);
    let terminal = live && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut next_print = start;
    let mut traffic_end: Option<Instant> = None;
    let mut disconnecting = false;
    // Each direction's sender's connection as last seen: the client's, then the server's.
    let mut last_seen: [Option<PeerStats>; 2] = [None, None];
    let mut plot = o.plot.as_ref().map(|_| Plot::default());
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
                let (host, peer) =
                    if dir == TO_SERVER { (&mut client, client_peer) } else { (&mut server, server_peer) };
                for (ch, s) in streams.iter_mut().enumerate() {
                    let len = match ch {
                        3 if bulk_due => o.bulk,
                        3 => continue,
                        _ => o.min_size + (rng.next_u64() as usize % (o.max_size - o.min_size + 1)),
                    };
                    match host.send(peer, ch, s.next_packet(elapsed, len), s.mode) {
                        Ok(()) => s.on_sent(),
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
        let timeout = [server.timeout(), client.timeout(), Some(Duration::from_millis(5))].into_iter().flatten().min();
        poll.poll(&mut events, timeout)?;
        server.process()?;
        client.process()?;
        let t = start.elapsed();
        for (name, host, dir) in [("server", &mut server, TO_SERVER), ("client", &mut client, TO_CLIENT)] {
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
        // A peer's counters go with it once the disconnection is over.
        let current = [client.peer_stats(client_peer), server_peer.and_then(|p| server.peer_stats(p))];
        for (seen, now_seen) in last_seen.iter_mut().zip(current) {
            if now_seen.is_some() {
                *seen = now_seen;
            }
        }
        if let Some(plot) = plot.as_mut() {
            plot.sample(t, &last_seen);
        }
        if live && now >= next_print {
            next_print = now + Duration::from_millis(if terminal { 250 } else { 2000 });
            let s = last_seen[TO_SERVER];
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
    report.relay = relay.finish()?;
    let elapsed = start.elapsed().as_secs_f64();
    let wire = client.core().stats().bytes_sent + server.core().stats().bytes_sent;
    let delivered: u64 = report.streams.iter().flatten().map(|s| s.delivered).sum();
    for (dir, side) in [(TO_SERVER, "client"), (TO_CLIENT, "server")] {
        let Some(s) = last_seen[dir] else { continue };
        report.sides[dir] = Some(SideCounts::of(&s));
        report.notes.push(format!(
            "{side} connection: rtt {:.1} ms, cwnd {} B, pacing {:.0} kB/s, frames sent {}, resent {}, lost {} ({} \
             spurious), repair copies {}, probes {}",
            s.rtt.as_secs_f64() * 1000.0,
            s.cwnd,
            s.congestion.pacing_rate as f64 / 1000.0,
            s.transfer.frames_sent,
            s.transfer.frames_resent,
            s.transfer.frames_lost,
            s.transfer.losses_spurious,
            s.transfer.repair_copies,
            s.transfer.probes,
        ));
    }
    let r = &report.relay;
    report.notes.push(format!(
        "relay: {} datagrams forwarded, {} dropped; wire: {wire} B for {delivered} packets delivered = {:.1} B per \
         packet, in {elapsed:.1} s",
        r.forwarded[0] + r.forwarded[1],
        r.dropped[0] + r.dropped[1],
        wire as f64 / delivered.max(1) as f64,
    ));
    if let (Some(path), Some(plot)) = (&o.plot, &plot) {
        let title = format!(
            "POROUS loopback: {:.0}% loss, {} ms + up to {} ms each way, {:.0} s of traffic",
            o.loss * 100.0,
            o.delay.as_millis(),
            o.jitter.as_millis(),
            o.duration.as_secs_f64()
        );
        let svg = plot.svg(&title, &report.streams).map_err(|e| std::io::Error::other(e.to_string()))?;
        std::fs::write(path, svg)?;
        report.notes.push(format!("plot: wrote {path}"));
    }
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
    print!("{}", losses(&report));
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
    use porous_loopback::verdict::Losses;

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

    /// A short real run: the whole demo, end to end.
    #[test]
    fn a_one_second_run_holds_every_guarantee() {
        let o = options("--duration 1 --delay 5 --jitter 2");
        let report = run(&o, false).unwrap();
        assert_eq!(classify(&report), Verdict::Held, "{}", table(&report));
        assert!(report.streams.iter().flatten().all(|s| s.delivered > 0), "{}", table(&report));
    }

    #[test]
    fn plot_draws_the_run_into_an_svg_file() {
        let path = std::env::temp_dir().join(format!("porous-loopback-plot-{}.svg", std::process::id()));
        let o = options(&format!("--duration 1 --delay 5 --jitter 2 --plot {}", path.display()));
        assert_eq!(o.plot.as_deref(), path.to_str());
        let report = run(&o, false).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for title in ["delivered client to server", "delivered server to client", "Congestion window", "Pacing rate"] {
            assert!(svg.contains(title), "no panel {title}");
        }
        // A dot for every packet delivered, and a line for each side's measures.
        let delivered: u64 = report.streams.iter().flatten().map(|s| s.delivered).sum();
        assert_eq!(svg.matches("<circle").count() as u64, delivered);
        assert!(svg.matches("<polyline").count() >= 8);
        assert!(report.notes.iter().any(|n| n.starts_with("plot: wrote")));
    }

    /// Through a lossy relay, every frame is accounted for: each one a side sent passed the
    /// relay, which forwarded or dropped it, and each one forwarded was received; the
    /// losses each side counted are set against the relay's drops, the difference
    /// explained (`losses`, and its unit tests in `porous_loopback::verdict`).
    #[test]
    fn each_sides_frames_reconcile_with_the_relay() {
        let o = options("--duration 2 --loss 0.1 --delay 5 --jitter 2");
        let report = run(&o, false).unwrap();
        assert_eq!(classify(&report), Verdict::Held, "{}", table(&report));
        let text = losses(&report);
        for dir in [TO_SERVER, TO_CLIENT] {
            let l = Losses::of(&report, dir).unwrap_or_else(|| panic!("a side never seen: {text}"));
            assert!(l.dropped > 0, "a 10% lossy relay dropped frames: {text}");
            assert!(l.datagrams_reconcile(), "{l:?}\n{text}");
        }
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
