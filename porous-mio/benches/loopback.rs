//! porous-mio over real UDP on 127.0.0.1: bulk reliable transfer next to raw UDP baselines
//! (issues 9 and 20), then bulk and a 60 Hz game stream through a lossy relay (issues 16
//! and 17), then path MTU discovery through that relay given a path MTU (issue 38), all
//! in one run. Prints its figures; no criterion. The relay, the streams and
//! the raw baselines are `porous_loopback`'s, shared with the demo and with porous-tokio's
//! bench, which measures that adapter against the same baselines.
//!
//! For 32-byte and 1,000-byte packets, each scenario runs `--runs` times, the scenarios
//! interleaved (A B C A B C, the order rotated each run) so that a noisy moment of the
//! machine does not favour one of them:
//!
//! - `mio`: a sender thread and a receiver thread, each with a standalone
//!   `porous_mio::Host` (default configuration, full batching), move N reliable packets on
//!   one channel, the sender keeping the channel's queue full (it queues until
//!   `QueueFull`, then services the host for up to 1 ms). Measured: wall time from the
//!   first send to the last delivery, goodput (payload bytes per second), CPU time per
//!   packet (both threads, from `/proc/thread-self/schedstat`), system calls.
//! - `mio-secure`: the `mio` scenario in secure mode (issue 21): the receiver a server with
//!   a private key, the sender connecting with a connect token, every datagram sealed with
//!   ChaCha20-Poly1305. Its "cpu / mio's" column is secure against plain, per run.
//! - `mio-nobatch`: the same with `Batching::NONE`, one system call per datagram: the
//!   adapter as it was before batched IO.
//! - `mio-aimd`: `mio` with `CongestionControl::Aimd` (the spec's controller) instead of
//!   the default model-based one, to tell the controller's share of a clean-path figure.
//! - `raw`: plain `std::net::UdpSocket`s, one thread blasting as many datagrams of the
//!   size POROUS put on the wire (its mean data datagram, from the latest `mio` run) as
//!   POROUS sent, one `send_to` each, the other receiving and counting what arrives. The
//!   baseline of the targets: "raw UDP" is what an application gets without a protocol.
//! - `raw-batched`: the same datagrams through `porous_udp::UdpIo` with full batching (GSO
//!   runs of 64, `recvmmsg` with GRO): the machine's limit with the same system-call
//!   batching as the adapters.
//!
//! The ratios compare each POROUS run with the raw run of the same round: CPU per message
//! against raw UDP's CPU per datagram divided by the messages POROUS put in a datagram,
//! and goodput against raw throughput.
//!
//! Then two sets of scenarios through a lossy relay (issues 16 and 17,
//! `porous_loopback::relay`): a third socket on
//! 127.0.0.1 between the two hosts that drops each datagram with probability `--loss`
//! (each way, from its own seeded generator per direction), and forwards the rest after
//! `--delay` ms plus up to `--jitter` ms, never reordering a direction. Each run draws a
//! new seed (`--seed` plus the run's index); the scenarios of one round share it.
//! `--trace MS` prints the sender's view of the path every MS milliseconds of a `lossy-*`
//! run.
//!
//! - `lossy-model` and `lossy-aimd`: `--lossy` reliable packets of 1,000 bytes, moved as in
//!   `mio` (the sender keeps the queue full) with `CongestionControl::Model` (the default)
//!   and `CongestionControl::Aimd` (the spec). Measured: the time to deliver them all, and
//!   the sender's view of the path (resends, RTT, the controller's mode, bandwidth,
//!   pacing rate and window). Every porous-mio run also prints the datagrams lost on the
//!   way (sent less those the receiver verified), which the kernel's `RcvbufErrors`
//!   undercounts: it counts a dropped GRO batch (up to 64 datagrams) once.
//! - `realtime-repair` and `realtime-norepair`: a 60 Hz game stream for `--realtime`
//!   seconds, one way: each tick a 100-byte unreliable packet (channel 1), every other tick
//!   a 50-byte reliable one (channel 0); the receiver acknowledges. With repair copies on
//!   (the default) and off on every channel. Measured: latency from `send` to `Received`
//!   per mode, the unreliable packets the sender never sent (expired at their deadline,
//!   dropped for a full queue or replaced by a newer one), and every byte both hosts put
//!   on the wire (acknowledgements, pings and checks included) per message sent.
//! - `realtime-raw`: the same stream from plain sockets through the same relay, each
//!   packet a datagram of its own, nothing repaired: the latency floor of the path and
//!   the machine in the same round (its "reliable" figures are the 50-byte packets that
//!   arrived).
//!
//!
//! Then path MTU discovery (issue 38, `pmtu.rs`): the same relay given a path MTU
//! (`--path-mtu`, IPv4 and UDP headers counted; larger datagrams dropped silently), and a
//! bulk transfer of `--pmtu` bytes in reliable packets of `--pmtu-packet` bytes through it:
//!
//! - `pmtu-off` and `pmtu-on`: discovery off (the default) and on (`--max-mtu` on both
//!   sides, the base 1,200). Measured: goodput, the sender's datagrams per MB of payload,
//!   the size it reached and how long after it was connected, probes, black holes, and
//!   that every reliable packet arrived exactly once and in order.
//! - `pmtu-low`: discovery on through a relay of `--low-mtu` bytes, below the ceiling: the
//!   search settles between the base and the ceiling.
//!
//! ```text
//! cargo bench -p porous-mio --bench loopback [-- --small 500000 --large 200000 --runs 5
//!     --lossy 2000 --realtime 20 --loss 0.05 --delay 25 --jitter 0 --seed 1 --trace 50
//!     --pmtu 2000000 --pmtu-packet 300 --path-mtu 1500 --low-mtu 1280 --max-mtu 1452
//!     --only mio,raw,lossy-model,lossy-aimd,realtime-repair,realtime-norepair,realtime-raw,
//!            pmtu-off,pmtu-on,pmtu-low]
//! ```
//!
//! Without `--bench` on its command line (as under `cargo test --benches`) it runs one
//! short round only.

#[path = "loopback/pmtu.rs"]
mod pmtu;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_loopback::bulk::{
    Outcome, RecvEnd, SendEnd, WATCHDOG, cpu_model, io_error, join, kernel_drops, localhost, mbps, median, raw_run,
    raw_socket, round_order, spread, thread_cpu,
};
use porous_loopback::relay::{Path, Relay, RelayStats};
use porous_loopback::stream::{self, percentile, unpack};
use porous_mio::proto::{CongestionControl, CongestionMode};
use porous_mio::token::{self, PrivateKey, TokenParams};
use porous_mio::{Batching, Event, Host, HostConfig, PeerStats, SecureConfig, SendError, SendMode};

/// What a scenario is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    /// porous-mio with this batching and congestion controller.
    Mio(Batching, CongestionControl),
    /// porous-mio, full batching, the default controller, secure mode.
    MioSecure,
    /// Plain sockets, one system call per datagram.
    Raw,
    /// `porous_udp::UdpIo`, full batching, no protocol.
    RawBatched,
    /// Bulk reliable transfer through the lossy relay with this controller.
    Lossy(CongestionControl),
    /// The 60 Hz game stream through the lossy relay, repair copies on or off.
    Realtime { repair: bool },
    /// The same stream over plain sockets through the same relay, no protocol: what the
    /// path and this machine's scheduling give.
    RealtimeRaw,
    /// Bulk of small packets through the lossy relay given a path MTU, path MTU discovery
    /// on or off (issue 38; `pmtu`).
    Pmtu(PmtuCase),
}

/// The `pmtu-*` scenarios: discovery off or on through the relay of `--path-mtu`, or on
/// through one of `--low-mtu`, below the ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PmtuCase {
    Off,
    On,
    Low,
}

impl Scenario {
    /// The bulk transfers on a clean path.
    const CLEAN: [Self; 6] = [
        Self::MIO,
        Self::Raw,
        Self::MioSecure,
        Self::Mio(Batching::NONE, CongestionControl::Model),
        Self::RawBatched,
        Self::Mio(Batching::FULL, CongestionControl::Aimd),
    ];
    /// porous-mio as an application gets it: full batching, the default controller.
    const MIO: Self = Self::Mio(Batching::FULL, CongestionControl::Model);
    /// Bulk through the lossy relay (issue 16).
    const LOSSY: [Self; 2] = [Self::Lossy(CongestionControl::Model), Self::Lossy(CongestionControl::Aimd)];
    /// The game stream through the lossy relay (issue 17).
    const REALTIME: [Self; 3] = [Self::Realtime { repair: true }, Self::Realtime { repair: false }, Self::RealtimeRaw];
    /// Path MTU discovery through the relay given a path MTU (issue 38).
    const PMTU: [Self; 3] = [Self::Pmtu(PmtuCase::Off), Self::Pmtu(PmtuCase::On), Self::Pmtu(PmtuCase::Low)];

    fn all() -> impl Iterator<Item = Self> {
        Self::CLEAN.into_iter().chain(Self::LOSSY).chain(Self::REALTIME).chain(Self::PMTU)
    }

    fn name(self) -> &'static str {
        match self {
            Self::Mio(b, _) if b == Batching::NONE => "mio-nobatch",
            Self::Mio(_, CongestionControl::Aimd) => "mio-aimd",
            Self::Mio(..) => "mio",
            Self::MioSecure => "mio-secure",
            Self::Raw => "raw",
            Self::RawBatched => "raw-batched",
            Self::Lossy(CongestionControl::Aimd) => "lossy-aimd",
            Self::Lossy(_) => "lossy-model",
            Self::Realtime { repair: true } => "realtime-repair",
            Self::Realtime { repair: false } => "realtime-norepair",
            Self::RealtimeRaw => "realtime-raw",
            Self::Pmtu(PmtuCase::Off) => "pmtu-off",
            Self::Pmtu(PmtuCase::On) => "pmtu-on",
            Self::Pmtu(PmtuCase::Low) => "pmtu-low",
        }
    }

    fn is_porous(self) -> bool {
        matches!(self, Self::Mio(..) | Self::MioSecure)
    }
}

/// Secure mode's backend key and Unix time (the bench's tokens need no real clock).
const PRIVATE_KEY: PrivateKey = PrivateKey::from_bytes([0x3C; 32]);
const UNIX: u64 = 1_800_000_000;

fn mio_receiver(
    n: u64,
    (batching, config): (Batching, HostConfig),
    secure: bool,
    addr_tx: mpsc::Sender<SocketAddr>,
    start: Arc<Barrier>,
    done: Arc<AtomicBool>,
) -> std::io::Result<RecvEnd> {
    let mut host = if secure {
        // Tokens name the server's address: with none configured, the host takes the
        // address it binds, port included.
        let mut config = config;
        config.secure = Some(SecureConfig::server(PRIVATE_KEY, Vec::new(), Instant::now(), UNIX));
        Host::bind(localhost(), config)?
    } else {
        Host::bind(localhost(), config)?
    };
    host.set_batching(batching);
    addr_tx.send(host.local_addr()).map_err(io_error)?;
    while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
    start.wait();
    let cpu0 = thread_cpu();
    let c0 = host.core().stats();
    let s0 = host.socket_stats();
    let deadline = Instant::now() + WATCHDOG;
    let (mut delivered, mut bytes) = (0u64, 0u64);
    let mut last = Instant::now();
    while delivered < n {
        match host.service(Duration::from_millis(5))? {
            Some(Event::Received { data, .. }) => {
                delivered += 1;
                bytes += data.len() as u64;
                if delivered == n {
                    last = Instant::now();
                }
            }
            Some(Event::Disconnected { reason, .. }) => return Err(io_error(reason)),
            _ => {}
        }
        if Instant::now() > deadline {
            return Err(io_error(format!("watchdog: {delivered} of {n} delivered")));
        }
    }
    let cpu = thread_cpu() - cpu0;
    let s1 = host.socket_stats();
    done.store(true, Ordering::Release);
    // Acknowledge the tail so the sender sees everything acknowledged.
    let _ = host.service(Duration::from_millis(20));
    let c1 = host.core().stats();
    let (acks, arrived) = (c1.datagrams_sent - c0.datagrams_sent, c1.datagrams_received - c0.datagrams_received);
    let syscalls = (s1.recv_calls - s0.recv_calls) + (s1.send_calls - s0.send_calls);
    Ok(RecvEnd { deferred: 0, arrived, last, cpu, delivered, bytes, acks, syscalls })
}

/// `n` reliable packets of `size` bytes from one porous-mio host to another, directly or
/// through a lossy relay on `path`; in secure mode if `secure` (the receiver a server, the
/// sender connecting with a connect token).
fn mio_run(
    (batching, config): (Batching, HostConfig),
    secure: bool,
    size: usize,
    n: u64,
    path: Option<Path>,
    trace: Option<Duration>,
) -> std::io::Result<Outcome> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done, config) = (start.clone(), done.clone(), config.clone());
        thread::spawn(move || mio_receiver(n, (batching, config), secure, addr_tx, start, done))
    };
    let receiver_addr = addr_rx.recv().map_err(io_error)?;
    let relay = path.map(|p| Relay::start(receiver_addr, p)).transpose()?;
    let remote = relay.as_ref().map_or(receiver_addr, Relay::addr);
    let sender = thread::spawn(move || -> std::io::Result<SendEnd> {
        let mut config = config;
        if secure {
            config.secure = Some(SecureConfig::client());
        }
        let mut host = Host::bind(localhost(), config)?;
        host.set_batching(batching);
        let peer = if secure {
            // The client connects to `remote`, the server knows itself as `receiver_addr`
            // (they differ through a relay): the token names both.
            let mut servers = vec![remote];
            if receiver_addr != remote {
                servers.push(receiver_addr);
            }
            let params = TokenParams::new(1, servers, UNIX, Duration::from_secs(60));
            let token = token::generate_from_entropy(&PRIVATE_KEY, &params).map_err(io_error)?;
            host.connect_with_token(remote, &token).map_err(io_error)?
        } else {
            host.connect(remote).map_err(io_error)?
        };
        while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
        let packet = Bytes::from(vec![0x5A; size]);
        let c0 = host.core().stats();
        let p0 = host.peer_stats(peer).map(|p| p.transfer.frames_resent).unwrap_or(0);
        let s0 = host.socket_stats();
        start.wait();
        let cpu0 = thread_cpu();
        let t0 = Instant::now();
        let mut sent = 0u64;
        let mut next_trace = t0;
        while !done.load(Ordering::Acquire) {
            while sent < n {
                match host.send(peer, 0, packet.clone(), SendMode::Reliable) {
                    Ok(()) => sent += 1,
                    Err(SendError::QueueFull { .. }) => break,
                    Err(e) => return Err(io_error(e)),
                }
            }
            let _ = host.service(Duration::from_millis(1))?;
            if let Some(every) = trace
                && Instant::now() >= next_trace
            {
                next_trace += every;
                let stats = host.peer_stats(peer);
                let flight = stats.map_or(0, |p| p.flight);
                println!(
                    "  trace {:>7.1} ms: flight {flight} B, {}",
                    t0.elapsed().as_secs_f64() * 1e3,
                    path_view(stats.as_ref())
                );
            }
            if t0.elapsed() > WATCHDOG {
                return Err(io_error("watchdog: the sender gave up"));
            }
        }
        let cpu = thread_cpu() - cpu0;
        let (c1, s1) = (host.core().stats(), host.socket_stats());
        let stats = host.peer_stats(peer);
        let p1 = stats.map(|p| p.transfer.frames_resent).unwrap_or(0);
        let outcome = Outcome {
            datagrams: c1.datagrams_sent - c0.datagrams_sent,
            wire_bytes: c1.bytes_sent - c0.bytes_sent,
            would_block: s1.would_block - s0.would_block,
            resent: p1 - p0,
            syscalls: (s1.send_calls - s0.send_calls) + (s1.recv_calls - s0.recv_calls),
            peer: stats,
            ..Outcome::default()
        };
        Ok(SendEnd { start: t0, cpu, outcome })
    });
    let outcome = join(sender, receiver);
    // Stop the relay whatever happened, so that a failed run leaves no thread behind.
    let relay = relay.map(Relay::finish).transpose()?;
    let mut outcome = outcome?;
    outcome.relay = relay.unwrap_or_default();
    Ok(outcome)
}

/// The game stream of the `realtime-*` scenarios (issue 17): ticks per second, and the
/// two packets of a tick.
const TICK_RATE: u32 = 60;
/// Each tick, on channel 1: a state update, unreliable.
const STATE_SIZE: usize = 100;
/// Every other tick (30 Hz), on channel 0: an event, reliable.
const EVENT_SIZE: usize = 50;
/// IPv4 and UDP headers of a datagram on 127.0.0.1, for wire figures that include them.
const IP_UDP_HEADERS: u64 = 28;
/// How long the receiver of the stream stays after the last reliable packet: longer than
/// the unreliable deadline (100 ms) and an acknowledgement's hold, so the tail of the
/// stream and its acknowledgements are part of the run.
const STREAM_LINGER: Duration = Duration::from_millis(250);

/// One run of the game stream.
#[derive(Clone, Debug, Default)]
struct Stream {
    /// Latencies from `send` to `Received`, ms, sorted: channel 0 (reliable) and channel 1
    /// (unreliable).
    reliable: Vec<f64>,
    unreliable: Vec<f64>,
    reliable_sent: u64,
    unreliable_sent: u64,
    /// UDP payload bytes and datagrams both hosts sent while the stream ran, both ways.
    wire_bytes: u64,
    datagrams: u64,
    /// The sender's connection at the end.
    sender: Option<PeerStats>,
    relay: RelayStats,
}

impl Stream {
    fn messages(&self) -> u64 {
        self.reliable_sent + self.unreliable_sent
    }

    /// Wire bytes per message sent: UDP payload, as the simulator's tables and the demo
    /// count them (`HostStats::bytes_sent`).
    fn wire_per_message(&self) -> f64 {
        self.wire_bytes as f64 / self.messages().max(1) as f64
    }

    /// The same with each datagram's IPv4 and UDP headers.
    fn wire_per_message_with_headers(&self) -> f64 {
        (self.wire_bytes + IP_UDP_HEADERS * self.datagrams) as f64 / self.messages().max(1) as f64
    }

    fn unreliable_delivered(&self) -> f64 {
        100.0 * self.unreliable.len() as f64 / self.unreliable_sent.max(1) as f64
    }

    /// Unreliable packets the sender never sent: still queued at their deadline
    /// (`TransferStats::unreliable_expired`), and dropped for a full queue or replaced by a
    /// newer one (`PeerStats::unreliable_dropped` + `unreliable_replaced`). Plain sockets
    /// drop nothing unsent: `NaN` for `realtime-raw`.
    fn unsent(&self) -> (f64, f64) {
        self.sender.map_or((f64::NAN, f64::NAN), |p| {
            (p.transfer.unreliable_expired as f64, (p.unreliable_dropped + p.unreliable_replaced) as f64)
        })
    }
}

/// Runs one end of the game stream; if it fails, tells the other end to stop waiting for
/// it (`done` for the sender, no more reliable packets to come for the receiver).
fn abort_on_error<T>(
    done: &AtomicBool,
    reliable_total: &AtomicU64,
    end: impl FnOnce() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let result = end();
    if result.is_err() {
        done.store(true, Ordering::Release);
        reliable_total.store(0, Ordering::Release);
    }
    result
}

/// The game stream for `duration` through a relay on `path`: one sender ticking at 60 Hz
/// (event-driven between ticks, `service` until the next one, as a porous-mio application
/// in standalone mode runs), one receiver that records each packet's latency. Repair
/// copies on or off on every channel of both hosts.
fn realtime_run(repair: bool, duration: Duration, path: Path) -> std::io::Result<Stream> {
    let mut config = HostConfig::default();
    for channel in &mut config.peer.channels {
        channel.repair = repair;
    }
    // One clock for both threads: send times travel in the packets as offsets from it.
    let epoch = Instant::now();
    let (addr_tx, addr_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(2));
    // Reliable packets the sender queued; unknown (u64::MAX) until its traffic is over.
    let reliable_total = Arc::new(AtomicU64::new(u64::MAX));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done, reliable_total, config) =
            (start.clone(), done.clone(), reliable_total.clone(), config.clone());
        thread::spawn(move || {
            abort_on_error(&done, &reliable_total, || -> std::io::Result<(Vec<f64>, Vec<f64>, u64, u64)> {
                let mut host = Host::bind(localhost(), config)?;
                addr_tx.send(host.local_addr()).map_err(io_error)?;
                while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
                start.wait();
                let c0 = host.core().stats();
                let deadline = Instant::now() + duration + WATCHDOG;
                // Channel 0's reliable packets and channel 1's unreliable ones, each checked
                // as it arrives (intact, never duplicated or reordered) and timed.
                let mut streams = [stream::Stream::new(SendMode::Reliable), stream::Stream::new(SendMode::Unreliable)];
                let mut complete: Option<Instant> = None;
                loop {
                    let event = host.service(Duration::from_millis(5))?;
                    let now = Instant::now();
                    match event {
                        Some(Event::Received { channel, data, .. }) => {
                            let s = streams.get_mut(channel).ok_or_else(|| io_error("a packet on another channel"))?;
                            s.receive(&data, now.saturating_duration_since(epoch));
                        }
                        Some(Event::Disconnected { reason, .. }) => return Err(io_error(reason)),
                        _ => {}
                    }
                    if complete.is_none() && streams[0].delivered >= reliable_total.load(Ordering::Acquire) {
                        complete = Some(now);
                    }
                    if complete.is_some_and(|t| now >= t + STREAM_LINGER) {
                        break;
                    }
                    if now > deadline {
                        return Err(io_error(format!("watchdog: {} reliable packets delivered", streams[0].delivered)));
                    }
                }
                if let Some(s) = streams.iter().find(|s| !s.held()) {
                    return Err(io_error(format!(
                        "a guarantee broke on the {:?} stream: {} corrupted, {} duplicated or reordered",
                        s.mode, s.corrupted, s.out_of_order
                    )));
                }
                let c1 = host.core().stats();
                done.store(true, Ordering::Release);
                let [reliable, unreliable] = streams.map(|s| s.sorted_latencies());
                Ok((reliable, unreliable, c1.bytes_sent - c0.bytes_sent, c1.datagrams_sent - c0.datagrams_sent))
            })
        })
    };
    let receiver_addr = addr_rx.recv().map_err(io_error)?;
    let relay = Relay::start(receiver_addr, path)?;
    let remote = relay.addr();
    let sender = thread::spawn(move || {
        abort_on_error(&done, &reliable_total, || -> std::io::Result<Stream> {
            let mut host = Host::bind(localhost(), config)?;
            let peer = host.connect(remote).map_err(io_error)?;
            while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
            start.wait();
            let c0 = host.core().stats();
            let tick = Duration::from_secs(1) / TICK_RATE;
            let ticks = (duration.as_secs_f64() * f64::from(TICK_RATE)).round().max(1.0) as u64;
            let mut stream = Stream::default();
            let mut next = Instant::now();
            for i in 0..ticks {
                // Between ticks the host does its own work: acknowledgements, resends, probes.
                while let Some(wait) = next.checked_duration_since(Instant::now()).filter(|w| !w.is_zero()) {
                    let _ = host.service(wait)?;
                }
                let sent = epoch.elapsed();
                host.send(peer, 1, stream::packet(i, sent, STATE_SIZE), SendMode::Unreliable).map_err(io_error)?;
                stream.unreliable_sent += 1;
                if i % 2 == 0 {
                    host.send(peer, 0, stream::packet(i / 2, sent, EVENT_SIZE), SendMode::Reliable)
                        .map_err(io_error)?;
                    stream.reliable_sent += 1;
                }
                // The tick's packets leave now, not at the next wake-up.
                host.flush()?;
                next += tick;
            }
            reliable_total.store(stream.reliable_sent, Ordering::Release);
            let deadline = Instant::now() + WATCHDOG;
            while !done.load(Ordering::Acquire) {
                let _ = host.service(Duration::from_millis(5))?;
                if Instant::now() > deadline {
                    return Err(io_error("watchdog: the receiver never finished"));
                }
            }
            let c1 = host.core().stats();
            stream.wire_bytes = c1.bytes_sent - c0.bytes_sent;
            stream.datagrams = c1.datagrams_sent - c0.datagrams_sent;
            stream.sender = host.peer_stats(peer);
            Ok(stream)
        })
    });
    let sent = sender.join().map_err(|_| io_error("sender panicked"));
    let received = receiver.join().map_err(|_| io_error("receiver panicked"));
    let relay = relay.finish()?;
    let (mut stream, (reliable, unreliable, bytes, datagrams)) = (sent??, received??);
    stream.reliable = reliable;
    stream.unreliable = unreliable;
    stream.wire_bytes += bytes;
    stream.datagrams += datagrams;
    stream.relay = relay;
    Ok(stream)
}

/// The game stream with no protocol: each packet in a datagram of its own from a plain
/// socket, through a relay on `path`; what arrives is timed as in [`realtime_run`]. Its
/// latency is the floor POROUS's is measured against in the same round: the path's delay
/// plus what this machine's scheduling adds to any two threads talking through a third.
fn realtime_raw_run(duration: Duration, path: Path) -> std::io::Result<Stream> {
    let epoch = Instant::now();
    let (rx, _) = raw_socket()?;
    // Only so that the receiver notices the end; datagrams wake it at once.
    rx.set_read_timeout(Some(Duration::from_millis(20)))?;
    let relay = Relay::start(rx.local_addr()?, path)?;
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let done = done.clone();
        thread::spawn(move || -> std::io::Result<(Vec<f64>, Vec<f64>)> {
            let (mut reliable, mut unreliable) = (Vec::new(), Vec::new());
            let mut buf = vec![0u8; 65_536];
            while !done.load(Ordering::Acquire) {
                let Ok((n, _)) = rx.recv_from(&mut buf) else { continue };
                let now = Instant::now();
                let (_, sent) = unpack(&buf[..n]).ok_or_else(|| io_error("a stream packet, altered"))?;
                let ms = now.saturating_duration_since(epoch + sent).as_secs_f64() * 1e3;
                if n == EVENT_SIZE { reliable.push(ms) } else { unreliable.push(ms) }
            }
            Ok((reliable, unreliable))
        })
    };
    let (tx, _) = raw_socket()?;
    let tick = Duration::from_secs(1) / TICK_RATE;
    let ticks = (duration.as_secs_f64() * f64::from(TICK_RATE)).round().max(1.0) as u64;
    let mut stream = Stream::default();
    let mut next = Instant::now();
    for i in 0..ticks {
        thread::sleep(next.saturating_duration_since(Instant::now()));
        let sent = epoch.elapsed();
        for (seq, size) in [(Some(i), STATE_SIZE), ((i % 2 == 0).then_some(i / 2), EVENT_SIZE)] {
            let Some(seq) = seq else { continue };
            let datagram = stream::packet(seq, sent, size);
            tx.send_to(&datagram, relay.addr())?;
            stream.wire_bytes += datagram.len() as u64;
            stream.datagrams += 1;
            if size == EVENT_SIZE { stream.reliable_sent += 1 } else { stream.unreliable_sent += 1 }
        }
        next += tick;
    }
    // The last datagrams' way through the relay, with room for its lateness.
    thread::sleep(path.delay + path.jitter + STREAM_LINGER);
    done.store(true, Ordering::Release);
    let received = receiver.join().map_err(|_| io_error("receiver panicked"));
    stream.relay = relay.finish()?;
    let (mut reliable, mut unreliable) = received??;
    reliable.sort_by(f64::total_cmp);
    unreliable.sort_by(f64::total_cmp);
    stream.reliable = reliable;
    stream.unreliable = unreliable;
    Ok(stream)
}

struct Options {
    small: u64,
    large: u64,
    runs: usize,
    scenarios: Vec<Scenario>,
    /// Packets of the `lossy-*` scenarios.
    lossy: u64,
    /// Length of the `realtime-*` stream.
    realtime: Duration,
    /// The relay of the lossy scenarios; its seed is the first run's.
    path: Path,
    /// Print the sender's view of the path every this often during a `lossy-*` run, to
    /// see how its controller got where it ended (`--trace MS`).
    trace: Option<Duration>,
    /// The `pmtu-*` transfer: payload bytes (`--pmtu`) in packets of this size
    /// (`--pmtu-packet`).
    pmtu_bytes: u64,
    pmtu_packet: usize,
    /// The relay's path MTU in `pmtu-off` and `pmtu-on`, and in `pmtu-low`, IPv4 and UDP
    /// headers counted (`--path-mtu`, `--low-mtu`).
    path_mtu: usize,
    low_mtu: usize,
    /// Discovery's ceiling in `pmtu-on` and `pmtu-low`, on both sides (`--max-mtu`).
    max_mtu: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    // Issue 16's and 17's path: 5% loss each way, 25 ms one-way.
    let path = Path { loss: 0.05, delay: Duration::from_millis(25), jitter: Duration::ZERO, seed: 1, mtu: None };
    let all = Scenario::all().collect();
    let mut o = if full {
        Options {
            small: 500_000,
            large: 200_000,
            runs: 5,
            scenarios: all,
            lossy: 2_000,
            realtime: Duration::from_secs(20),
            path,
            trace: None,
            pmtu_bytes: 2_000_000,
            pmtu_packet: 300,
            path_mtu: 1500,
            low_mtu: 1280,
            max_mtu: 1452,
        }
    } else {
        // The smoke run: every scenario once, briefly.
        Options {
            small: 20_000,
            large: 5_000,
            runs: 1,
            scenarios: all,
            lossy: 100,
            realtime: Duration::from_millis(500),
            path,
            trace: None,
            pmtu_bytes: 100_000,
            pmtu_packet: 300,
            path_mtu: 1500,
            low_mtu: 1280,
            max_mtu: 1452,
        }
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_default();
        let ms = |v: String, default: Duration| v.parse::<f64>().map_or(default, |v| Duration::from_secs_f64(v / 1e3));
        match a.as_str() {
            "--small" => o.small = value().parse().unwrap_or(o.small),
            "--large" => o.large = value().parse().unwrap_or(o.large),
            "--runs" => o.runs = value().parse::<usize>().map_or(o.runs, |v| v.max(1)),
            "--lossy" => o.lossy = value().parse().unwrap_or(o.lossy),
            "--realtime" => o.realtime = ms(value(), o.realtime / 1000) * 1000,
            "--loss" => o.path.loss = value().parse().unwrap_or(o.path.loss),
            "--delay" => o.path.delay = ms(value(), o.path.delay),
            "--jitter" => o.path.jitter = ms(value(), o.path.jitter),
            "--seed" => o.path.seed = value().parse().unwrap_or(o.path.seed),
            "--trace" => o.trace = value().parse::<f64>().ok().map(|ms| Duration::from_secs_f64(ms / 1e3)),
            "--pmtu" => o.pmtu_bytes = value().parse().unwrap_or(o.pmtu_bytes),
            "--pmtu-packet" => {
                o.pmtu_packet = value().parse::<usize>().map_or(o.pmtu_packet, |v| v.max(stream::HEADER));
            }
            "--path-mtu" => o.path_mtu = value().parse().unwrap_or(o.path_mtu),
            "--low-mtu" => o.low_mtu = value().parse().unwrap_or(o.low_mtu),
            "--max-mtu" => o.max_mtu = value().parse().unwrap_or(o.max_mtu),
            "--only" => {
                let names = value();
                o.scenarios = Scenario::all().filter(|s| names.split(',').any(|n| n == s.name())).collect();
            }
            _ => {}
        }
    }
    o
}

/// The scenarios of `set` that were asked for, in `set`'s order, each with its runs.
fn selected<T>(o: &Options, set: &[Scenario]) -> Vec<(Scenario, Vec<T>)> {
    set.iter().filter(|s| o.scenarios.contains(s)).map(|&s| (s, Vec::new())).collect()
}

/// The relay's path for one run: a seed of its own, shared by the scenarios of the round.
fn path_of_run(o: &Options, run: usize) -> Path {
    Path { seed: o.path.seed.wrapping_add(run as u64), ..o.path }
}

fn mode_name(mode: CongestionMode) -> &'static str {
    match mode {
        CongestionMode::SlowStart => "slow-start",
        CongestionMode::Avoidance => "avoidance",
        CongestionMode::Startup => "startup",
        CongestionMode::Drain => "drain",
        CongestionMode::ProbeBandwidth => "probe-bw",
        CongestionMode::ProbeRtt => "probe-rtt",
        _ => "other",
    }
}

/// The sender's view of the path at the end of a run.
fn path_view(p: Option<&PeerStats>) -> String {
    let Some(p) = p else { return String::from("no connection stats") };
    let t = &p.transfer;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "rtt {:.1} ms (min {:.1}, rto {:.1}), {} {}, bw {}, pacing {}, cwnd {} B; frames sent {}, resent {}, \
         lost {} ({} spurious), resets {}; repair copies {}, probes {}; unreliable expired {}, stripped {}",
        ms(p.rtt),
        ms(p.congestion.min_rtt),
        ms(p.rto),
        mode_name(p.congestion.mode),
        if p.ssthresh == usize::MAX { String::new() } else { format!("(ssthresh {} B)", p.ssthresh) },
        mbps(p.congestion.bandwidth as f64),
        mbps(p.congestion.pacing_rate as f64),
        p.cwnd,
        t.frames_sent,
        t.frames_resent,
        t.frames_lost,
        t.losses_spurious,
        t.congestion_resets,
        t.repair_copies,
        t.probes,
        t.unreliable_expired,
        t.unreliable_stripped,
    )
}

fn print_lossy(scenario: Scenario, run: usize, seed: u64, o: &Outcome) {
    println!(
        "{:<17} run {run} (seed {seed}): {:>8.1} ms  goodput {:>10}  relay dropped {}+{} of {}+{} (data+acks), \
         late p99 {:.2} max {:.2} ms, {} dropped by the kernel; {}",
        scenario.name(),
        o.wall.as_secs_f64() * 1e3,
        mbps(o.rate()),
        o.relay.dropped[0],
        o.relay.dropped[1],
        o.relay.dropped[0] + o.relay.forwarded[0],
        o.relay.dropped[1] + o.relay.forwarded[1],
        o.relay.late_p99.as_secs_f64() * 1e3,
        o.relay.late_max.as_secs_f64() * 1e3,
        o.kernel_drops,
        path_view(o.peer.as_ref()),
    );
}

fn print_stream(scenario: Scenario, run: usize, seed: u64, s: &Stream) {
    println!(
        "{:<17} run {run} (seed {seed}): reliable p50 {:.1} p99 {:.1} max {:.1} ms ({} of {}); unreliable p50 {:.1} \
         p99 {:.1} max {:.1} ms ({} of {}, {:.1}%; unsent: {} expired, {} dropped); wire {:.1} B/msg ({:.1} with IP+UDP headers, {} datagrams); \
         relay dropped {}+{} of {}+{} (data+acks), late p99 {:.2} max {:.2} ms; {}",
        scenario.name(),
        percentile(&s.reliable, 0.5),
        percentile(&s.reliable, 0.99),
        percentile(&s.reliable, 1.0),
        s.reliable.len(),
        s.reliable_sent,
        percentile(&s.unreliable, 0.5),
        percentile(&s.unreliable, 0.99),
        percentile(&s.unreliable, 1.0),
        s.unreliable.len(),
        s.unreliable_sent,
        s.unreliable_delivered(),
        s.unsent().0,
        s.unsent().1,
        s.wire_per_message(),
        s.wire_per_message_with_headers(),
        s.datagrams,
        s.relay.dropped[0],
        s.relay.dropped[1],
        s.relay.dropped[0] + s.relay.forwarded[0],
        s.relay.dropped[1] + s.relay.forwarded[1],
        s.relay.late_p99.as_secs_f64() * 1e3,
        s.relay.late_max.as_secs_f64() * 1e3,
        path_view(s.sender.as_ref()),
    );
}

fn print_run(scenario: Scenario, run: usize, o: &Outcome) {
    let name = scenario.name();
    if scenario.is_porous() {
        println!(
            "{name:<12} run {run}: {:>8.1} ms  goodput {:>12}  cpu/msg {:>7.1} ns (send {:.0} ms, recv {:.0} ms, \
             sender busy {:.0}%)  {} data datagrams of {} B, {} acks, {} syscalls, {} resent, {} lost on the way, \
             {} would-block, {} dropped by the kernel, {} deferred{}",
            o.wall.as_secs_f64() * 1e3,
            mbps(o.rate()),
            o.cpu_per_item(),
            o.send_cpu.as_secs_f64() * 1e3,
            o.recv_cpu.as_secs_f64() * 1e3,
            100.0 * o.send_cpu.as_secs_f64() / o.wall.as_secs_f64(),
            o.datagrams,
            o.datagram_size(),
            o.acks,
            o.syscalls,
            o.resent,
            o.datagrams.saturating_sub(o.arrived),
            o.would_block,
            o.kernel_drops,
            o.deferred,
            // porous-mio runs: how the sender's controller saw the path.
            o.peer.map_or_else(String::new, |p| format!("; {}", path_view(Some(&p)))),
        );
    } else {
        println!(
            "{name:<12} run {run}: {:>8.1} ms  throughput {:>9}  cpu/datagram {:>7.1} ns  {} of {} datagrams of {} B \
             arrived ({:.1}% lost), {} syscalls",
            o.wall.as_secs_f64() * 1e3,
            mbps(o.rate()),
            o.cpu_per_item(),
            o.delivered,
            o.datagrams,
            o.datagram_size(),
            100.0 * (1.0 - o.delivered as f64 / o.datagrams.max(1) as f64),
            o.syscalls,
        );
    }
}

fn main() -> std::io::Result<()> {
    let o = options();
    let names: Vec<&str> = o.scenarios.iter().map(|s| s.name()).collect();
    println!("loopback, porous-mio (default config) vs raw UDP, {} runs each", o.runs);
    println!("scenarios, interleaved: {}", names.join(", "));
    println!("machine: {} cpus, {}", thread::available_parallelism().map_or(0, usize::from), cpu_model());
    println!(
        "socket buffers: asked for {} KiB, the kernel reports {} KiB for receiving",
        porous_mio::SOCKET_BUFFER / 1024,
        raw_socket()?.1 / 1024
    );
    let clean = clean_runs(&o)?;
    let lossy = lossy_runs(&o)?;
    let streams = realtime_runs(&o)?;
    let pmtu = pmtu_runs(&o)?;
    if !clean.is_empty() {
        println!();
        println!("medians (min-max) of {} runs; ratios per run against `raw` of the same run:", o.runs);
        clean_medians(clean);
    }
    lossy_medians(&o, &lossy);
    realtime_medians(&o, &streams);
    pmtu_medians(&o, &pmtu);
    Ok(())
}

/// One table of the clean path: packet size, count, messages per datagram, the runs.
type CleanTable = (usize, u64, f64, Vec<(Scenario, Vec<Outcome>)>);

/// The bulk transfers on a clean path, 32-byte and 1,000-byte packets.
fn clean_runs(o: &Options) -> std::io::Result<Vec<CleanTable>> {
    if selected::<Outcome>(o, &Scenario::CLEAN).is_empty() {
        return Ok(Vec::new());
    }
    let mut tables = Vec::new();
    for (size, n) in [(32usize, o.small), (1000, o.large)] {
        println!();
        println!("== {n} reliable packets of {size} bytes");
        let mut results: Vec<(Scenario, Vec<Outcome>)> = selected(o, &Scenario::CLEAN);
        // The raw datagrams: the size and count of the latest POROUS run (first run: POROUS first).
        let mut shape: Option<(usize, u64, f64)> = None;
        for run in 0..o.runs {
            let mut order = round_order(run, results.len());
            if shape.is_none() {
                order.sort_by_key(|&i| !results[i].0.is_porous());
            }
            for i in order {
                let scenario = results[i].0;
                let drops0 = kernel_drops();
                let outcome = match scenario {
                    Scenario::Mio(batching, congestion) => {
                        let mut config = HostConfig::default();
                        config.peer.congestion = congestion;
                        mio_run((batching, config), false, size, n, None, None)?
                    }
                    Scenario::MioSecure => mio_run((Batching::FULL, HostConfig::default()), true, size, n, None, None)?,
                    Scenario::Raw | Scenario::RawBatched => {
                        let (dsize, count, _) = shape.unwrap_or((size + 10, n, 1.0));
                        raw_run(scenario == Scenario::RawBatched, dsize, count)?
                    }
                    Scenario::Lossy(_) | Scenario::Realtime { .. } | Scenario::RealtimeRaw | Scenario::Pmtu(_) => {
                        unreachable!("not a clean-path scenario")
                    }
                };
                let mut outcome = outcome;
                outcome.kernel_drops = kernel_drops() - drops0;
                if scenario == Scenario::MIO || (shape.is_none() && scenario.is_porous()) {
                    shape = Some((outcome.datagram_size(), outcome.datagrams, outcome.per_datagram()));
                }
                print_run(scenario, run, &outcome);
                results[i].1.push(outcome);
            }
        }
        tables.push((size, n, shape.map_or(1.0, |s| s.2), results));
    }
    Ok(tables)
}

fn clean_medians(tables: Vec<CleanTable>) {
    for (size, n, per_datagram, results) in tables {
        println!();
        println!("{n} packets of {size} B ({per_datagram:.1} per datagram):");
        println!(
            "  {:<12} {:>26} {:>24} {:>20} {:>20} {:>12} {:>22} {:>22}",
            "scenario",
            "goodput MB/s",
            "cpu/msg ns",
            "cpu / raw's",
            "goodput / raw",
            "syscalls/msg",
            "cpu / mio's",
            "goodput / mio's"
        );
        let find = |wanted: Scenario| results.iter().find(|(s, _)| *s == wanted).map(|(_, r)| r.clone());
        let (raw, mio) = (find(Scenario::Raw), find(Scenario::MIO));
        for (scenario, runs) in &results {
            let goodput: Vec<f64> = runs.iter().map(|r| r.rate() / 1e6).collect();
            let syscalls = median(runs.iter().map(|r| r.syscalls as f64 / r.delivered.max(1) as f64).collect());
            if scenario.is_porous() {
                let cpu: Vec<f64> = runs.iter().map(Outcome::cpu_per_item).collect();
                // Per run, against the baseline's run of the same round.
                let against = |base: &Option<Vec<Outcome>>, cpu: fn(&Outcome, &Outcome) -> f64| match base {
                    Some(base) => {
                        let pairs = runs.iter().zip(base);
                        let c: Vec<f64> = pairs.clone().map(|(p, b)| cpu(p, b)).collect();
                        let g: Vec<f64> = pairs.map(|(p, b)| 100.0 * p.rate() / b.rate()).collect();
                        (format!("{}x", spread(&c, 2)), format!("{}%", spread(&g, 0)))
                    }
                    None => (String::from("-"), String::from("-")),
                };
                let (raw_cpu, raw_goodput) =
                    against(&raw, |p, r| p.cpu_per_item() / (r.cpu_per_item() / p.per_datagram()));
                let (mio_cpu, mio_goodput) = if *scenario == Scenario::MIO {
                    (String::new(), String::new())
                } else {
                    against(&mio, |p, m| p.cpu_per_item() / m.cpu_per_item())
                };
                println!(
                    "  {:<12} {:>26} {:>24} {:>20} {:>20} {:>12.4} {:>22} {:>22}",
                    scenario.name(),
                    spread(&goodput, 1),
                    spread(&cpu, 1),
                    raw_cpu,
                    raw_goodput,
                    syscalls,
                    mio_cpu,
                    mio_goodput,
                );
            } else {
                let cpu: Vec<f64> = runs.iter().map(|r| r.cpu_per_item() / per_datagram).collect();
                println!(
                    "  {:<12} {:>26} {:>24} {:>20} {:>20} {:>12.4}",
                    scenario.name(),
                    spread(&goodput, 1),
                    spread(&cpu, 1),
                    "",
                    "",
                    syscalls / per_datagram
                );
            }
        }
    }
}

/// Bulk through the lossy relay, each controller once per round.
fn lossy_runs(o: &Options) -> std::io::Result<Vec<(Scenario, Vec<Outcome>)>> {
    let mut results = selected(o, &Scenario::LOSSY);
    if results.is_empty() {
        return Ok(results);
    }
    println!();
    println!(
        "== lossy path: {} reliable packets of 1000 bytes through a relay, {:.0}% loss each way, {} ms one-way \
         (+ up to {} ms jitter)",
        o.lossy,
        o.path.loss * 100.0,
        o.path.delay.as_millis(),
        o.path.jitter.as_millis()
    );
    for run in 0..o.runs {
        let path = path_of_run(o, run);
        for i in round_order(run, results.len()) {
            let scenario = results[i].0;
            let Scenario::Lossy(congestion) = scenario else { unreachable!("not a lossy scenario") };
            let mut config = HostConfig::default();
            config.peer.congestion = congestion;
            let drops0 = kernel_drops();
            let mut outcome = mio_run((Batching::FULL, config), false, 1000, o.lossy, Some(path), o.trace)?;
            outcome.kernel_drops = kernel_drops() - drops0;
            print_lossy(scenario, run, path.seed, &outcome);
            results[i].1.push(outcome);
        }
    }
    Ok(results)
}

fn lossy_medians(o: &Options, results: &[(Scenario, Vec<Outcome>)]) {
    if results.is_empty() {
        return;
    }
    println!();
    println!(
        "lossy path, {} x 1000 B reliable, {:.0}% loss each way, {} ms one-way: medians (min-max) of {} runs",
        o.lossy,
        o.path.loss * 100.0,
        o.path.delay.as_millis(),
        o.runs
    );
    println!(
        "  {:<17} {:>28} {:>26} {:>22} {:>22} {:>26}",
        "scenario", "time to deliver all, ms", "goodput MB/s", "frames resent %", "smoothed rtt ms", "pacing rate MB/s"
    );
    for (scenario, runs) in results {
        let per = |f: fn(&Outcome) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let time = per(|r| r.wall.as_secs_f64() * 1e3);
        let goodput = per(|r| r.rate() / 1e6);
        let resent = per(|r| {
            r.peer.map_or(f64::NAN, |p| 100.0 * p.transfer.frames_resent as f64 / p.transfer.frames_sent.max(1) as f64)
        });
        let rtt = per(|r| r.peer.map_or(f64::NAN, |p| p.rtt.as_secs_f64() * 1e3));
        let pacing = per(|r| r.peer.map_or(f64::NAN, |p| p.congestion.pacing_rate as f64 / 1e6));
        println!(
            "  {:<17} {:>28} {:>26} {:>22} {:>22} {:>26}",
            scenario.name(),
            spread(&time, 0),
            spread(&goodput, 2),
            spread(&resent, 1),
            spread(&rtt, 1),
            spread(&pacing, 2)
        );
    }
}

/// The game stream through the lossy relay, repair on and off once per round.
fn realtime_runs(o: &Options) -> std::io::Result<Vec<(Scenario, Vec<Stream>)>> {
    let mut results = selected(o, &Scenario::REALTIME);
    if results.is_empty() {
        return Ok(results);
    }
    println!();
    println!(
        "== game stream: {:.1} s at {TICK_RATE} Hz, {STATE_SIZE} B unreliable every tick + {EVENT_SIZE} B reliable \
         every other tick, one way, through a relay, {:.0}% loss each way, {} ms one-way (+ up to {} ms jitter)",
        o.realtime.as_secs_f64(),
        o.path.loss * 100.0,
        o.path.delay.as_millis(),
        o.path.jitter.as_millis()
    );
    for run in 0..o.runs {
        let path = path_of_run(o, run);
        for i in round_order(run, results.len()) {
            let scenario = results[i].0;
            let stream = match scenario {
                Scenario::Realtime { repair } => realtime_run(repair, o.realtime, path)?,
                _ => realtime_raw_run(o.realtime, path)?,
            };
            print_stream(scenario, run, path.seed, &stream);
            results[i].1.push(stream);
        }
    }
    Ok(results)
}

fn realtime_medians(o: &Options, results: &[(Scenario, Vec<Stream>)]) {
    if results.is_empty() {
        return;
    }
    println!();
    println!(
        "game stream, {:.1} s, {:.0}% loss each way, {} ms one-way: medians (min-max) of {} runs; wire bytes are both \
         ways, per message sent",
        o.realtime.as_secs_f64(),
        o.path.loss * 100.0,
        o.path.delay.as_millis(),
        o.runs
    );
    println!(
        "  {:<17} {:>20} {:>20} {:>20} {:>20} {:>20} {:>22} {:>20} {:>20} {:>16} {:>16}",
        "scenario",
        "reliable p50 ms",
        "reliable p99 ms",
        "unreliable p50 ms",
        "unreliable p99 ms",
        "unreliable in %",
        "wire B/msg (UDP)",
        "+IP/UDP headers",
        "copies/reliable",
        "expired",
        "dropped"
    );
    let raw = results.iter().find(|(s, _)| *s == Scenario::RealtimeRaw).map(|(_, runs)| runs);
    for (scenario, runs) in results {
        let per = |f: &dyn Fn(&Stream) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let copies =
            per(&|s| s.sender.map_or(f64::NAN, |p| p.transfer.repair_copies as f64 / s.reliable_sent.max(1) as f64));
        println!(
            "  {:<17} {:>20} {:>20} {:>20} {:>20} {:>20} {:>22} {:>20} {:>20} {:>16} {:>16}",
            scenario.name(),
            spread(&per(&|s| percentile(&s.reliable, 0.5)), 1),
            spread(&per(&|s| percentile(&s.reliable, 0.99)), 1),
            spread(&per(&|s| percentile(&s.unreliable, 0.5)), 1),
            spread(&per(&|s| percentile(&s.unreliable, 0.99)), 1),
            spread(&per(&Stream::unreliable_delivered), 1),
            spread(&per(&Stream::wire_per_message), 1),
            spread(&per(&Stream::wire_per_message_with_headers), 1),
            if *scenario == Scenario::RealtimeRaw { String::from("-") } else { spread(&copies, 2) },
            if *scenario == Scenario::RealtimeRaw { String::from("-") } else { spread(&per(&|s| s.unsent().0), 0) },
            if *scenario == Scenario::RealtimeRaw { String::from("-") } else { spread(&per(&|s| s.unsent().1), 0) },
        );
    }
    // What the protocol adds to the tail: each POROUS run against the raw run of its round,
    // which went through the same relay at the same moment of the machine.
    let Some(raw) = raw else { return };
    println!("  p99 above `realtime-raw`'s of the same round, ms (median, min-max):");
    for (scenario, runs) in results.iter().filter(|(s, _)| *s != Scenario::RealtimeRaw) {
        let above = |q: fn(&Stream) -> &Vec<f64>| -> Vec<f64> {
            runs.iter().zip(raw).map(|(p, r)| percentile(q(p), 0.99) - percentile(q(r), 0.99)).collect()
        };
        println!(
            "  {:<17} reliable {:>22}   unreliable {:>22}",
            scenario.name(),
            spread(&above(|s| &s.reliable), 1),
            spread(&above(|s| &s.unreliable), 1)
        );
    }
}

/// The `pmtu-*` scenarios, each once per round, the rounds' relays seeded as the lossy
/// scenarios' are.
fn pmtu_runs(o: &Options) -> std::io::Result<Vec<(Scenario, Vec<pmtu::Run>)>> {
    let mut results = selected(o, &Scenario::PMTU);
    if results.is_empty() {
        return Ok(results);
    }
    println!();
    println!(
        "== path MTU discovery: {} B of reliable packets of {} B through a relay, {:.0}% loss each way, {} ms one-way \
         (+ up to {} ms jitter); base 1200, max_mtu {} when on; relay MTU {} (pmtu-low: {}), IPv4+UDP headers counted",
        o.pmtu_bytes,
        o.pmtu_packet,
        o.path.loss * 100.0,
        o.path.delay.as_millis(),
        o.path.jitter.as_millis(),
        o.max_mtu,
        o.path_mtu,
        o.low_mtu,
    );
    for run in 0..o.runs {
        let path = path_of_run(o, run);
        for i in round_order(run, results.len()) {
            let scenario = results[i].0;
            let Scenario::Pmtu(case) = scenario else { unreachable!("not a pmtu scenario") };
            let (max_mtu, mtu) = match case {
                PmtuCase::Off => (0, o.path_mtu),
                PmtuCase::On => (o.max_mtu, o.path_mtu),
                PmtuCase::Low => (o.max_mtu, o.low_mtu),
            };
            let drops0 = kernel_drops();
            let mut outcome = pmtu::run(max_mtu, o.pmtu_packet, o.pmtu_bytes, Path { mtu: Some(mtu), ..path })?;
            outcome.kernel_drops = kernel_drops() - drops0;
            print_pmtu(scenario, run, path.seed, &outcome);
            if !outcome.exactly_once {
                return Err(io_error(format!("{}: a reliable packet did not arrive exactly once", scenario.name())));
            }
            results[i].1.push(outcome);
        }
    }
    Ok(results)
}

/// A duration in ms, or "-" for none.
fn ms_or_dash(d: Option<Duration>) -> String {
    d.map_or_else(|| String::from("-"), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

fn print_pmtu(scenario: Scenario, run: usize, seed: u64, r: &pmtu::Run) {
    let (probes, probes_lost) = r.probes();
    let (lost, spurious) = r.frames_lost();
    let sizes: Vec<String> =
        r.mtu_log.iter().map(|&(t, m)| format!("{m} at {:.0} ms", t.as_secs_f64() * 1e3)).collect();
    println!(
        "{:<17} run {run} (seed {seed}): {:>8.1} ms  goodput {:>10}  {:.0} datagrams/MB, {:.3} wire B per payload B; \
         size {} (reached after {} ms{}), {probes} probes ({probes_lost} unanswered), {} black holes; {}; relay dropped \
         {}+{} at random and {}+{} too large (data+acks), {} dropped by the kernel; frames declared lost {lost} ({spurious} \
         spurious); sizes: {}",
        scenario.name(),
        r.wall.as_secs_f64() * 1e3,
        mbps(r.goodput()),
        r.datagrams_per_mb(),
        r.wire_per_byte(),
        r.final_mtu(),
        ms_or_dash(r.reached()),
        if r.unsettled { ", search unfinished" } else { "" },
        r.black_holes(),
        if r.exactly_once {
            format!("all {} reliable packets exactly once, in order", r.delivered)
        } else {
            format!(
                "GUARANTEE BROKEN: {} delivered, {} duplicated or reordered, {} missing",
                r.delivered, r.out_of_order, r.missing
            )
        },
        r.relay.dropped[0],
        r.relay.dropped[1],
        r.relay.too_large[0],
        r.relay.too_large[1],
        r.kernel_drops,
        sizes.join(", "),
    );
}

fn pmtu_medians(o: &Options, results: &[(Scenario, Vec<pmtu::Run>)]) {
    if results.is_empty() {
        return;
    }
    println!();
    println!(
        "path MTU discovery, {} B in {} B reliable packets, {:.0}% loss each way, {} ms one-way: medians (min-max) of \
         {} runs; the sender's datagrams (data, acknowledgements, pings, probes) during the transfer; time to reach from \
         the sender's connection",
        o.pmtu_bytes,
        o.pmtu_packet,
        o.path.loss * 100.0,
        o.path.delay.as_millis(),
        o.runs
    );
    println!(
        "  {:<10} {:>9} {:>22} {:>24} {:>20} {:>22} {:>18} {:>26} {:>14} {:>14} {:>14}",
        "scenario",
        "relay MTU",
        "goodput MB/s",
        "time ms",
        "datagrams per MB",
        "wire B / payload B",
        "size reached",
        "time to reach ms",
        "probes",
        "black holes",
        "exactly once"
    );
    for (scenario, runs) in results {
        let per = |f: &dyn Fn(&pmtu::Run) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let relay_mtu = match scenario {
            Scenario::Pmtu(PmtuCase::Low) => o.low_mtu,
            _ => o.path_mtu,
        };
        let reached: Vec<f64> = runs.iter().filter_map(|r| r.reached()).map(|d| d.as_secs_f64() * 1e3).collect();
        println!(
            "  {:<10} {:>9} {:>22} {:>24} {:>20} {:>22} {:>18} {:>26} {:>14} {:>14} {:>14}",
            scenario.name(),
            relay_mtu,
            spread(&per(&|r| r.goodput() / 1e6), 2),
            spread(&per(&|r| r.wall.as_secs_f64() * 1e3), 0),
            spread(&per(&|r| r.datagrams_per_mb()), 0),
            spread(&per(&|r| r.wire_per_byte()), 3),
            spread(&per(&|r| r.final_mtu() as f64), 0),
            if reached.is_empty() { String::from("-") } else { spread(&reached, 1) },
            spread(&per(&|r| r.probes().0 as f64), 0),
            spread(&per(&|r| r.black_holes() as f64), 0),
            format!("{} of {}", runs.iter().filter(|r| r.exactly_once).count(), runs.len()),
        );
    }
}
