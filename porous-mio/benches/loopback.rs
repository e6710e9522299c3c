//! Bulk reliable transfer over real UDP on 127.0.0.1 through the adapters, next to raw UDP
//! baselines, all in one run (issues 9 and 20). Prints its figures; no criterion.
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
//! - `tokio`: the same transfer through `porous-tokio`, each end a current-thread tokio
//!   runtime on its own thread (the driver task and the application task share it, so the
//!   thread's CPU time is all of that end's). The sender queues until `QueueFull`, then
//!   sleeps 1 ms (tokio's timer granularity); the receiver awaits `Peer::recv`.
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
//! ```text
//! cargo bench -p porous-mio --bench loopback [-- --small 500000 --large 200000 --runs 5
//!     --only mio,raw]
//! ```
//!
//! Without `--bench` on its command line (as under `cargo test --benches`) it runs one
//! short round only.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_mio::token::{self, PrivateKey, TokenParams};
use porous_mio::{Batching, Event, Host, HostConfig, SecureConfig, SendError, SendMode};
use porous_udp::{AsSocketRef, UdpIo};

/// Give up on a run after this long.
const WATCHDOG: Duration = Duration::from_secs(120);

/// CPU time this thread has used: nanosecond `schedstat` where the kernel offers it, else
/// the clock-tick `stat` fields.
fn thread_cpu() -> Duration {
    if let Ok(s) = std::fs::read_to_string("/proc/thread-self/schedstat")
        && let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok())
        && ns > 0
    {
        return Duration::from_nanos(ns);
    }
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// What a scenario is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    /// porous-mio with this batching.
    Mio(Batching),
    /// porous-mio, full batching, secure mode.
    MioSecure,
    /// porous-tokio, full batching.
    Tokio,
    /// Plain sockets, one system call per datagram.
    Raw,
    /// `porous_udp::UdpIo`, full batching, no protocol.
    RawBatched,
}

impl Scenario {
    const ALL: [Self; 6] = [
        Self::Mio(Batching::FULL),
        Self::Raw,
        Self::MioSecure,
        Self::Tokio,
        Self::Mio(Batching::NONE),
        Self::RawBatched,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Mio(b) if b == Batching::NONE => "mio-nobatch",
            Self::Mio(_) => "mio",
            Self::MioSecure => "mio-secure",
            Self::Tokio => "tokio",
            Self::Raw => "raw",
            Self::RawBatched => "raw-batched",
        }
    }

    fn is_porous(self) -> bool {
        matches!(self, Self::Mio(_) | Self::MioSecure | Self::Tokio)
    }
}

/// One measurement of one scenario.
#[derive(Clone, Copy, Debug, Default)]
struct Outcome {
    wall: Duration,
    send_cpu: Duration,
    recv_cpu: Duration,
    /// Packets delivered (POROUS) or datagrams arrived (raw).
    delivered: u64,
    /// Payload bytes delivered (POROUS) or datagram bytes arrived (raw).
    bytes: u64,
    /// Data-direction datagrams the sender put on the wire (resends included), and bytes.
    datagrams: u64,
    wire_bytes: u64,
    /// Acknowledgement-direction datagrams from the receiver.
    acks: u64,
    resent: u64,
    would_block: u64,
    /// System calls that moved datagrams, both ends.
    syscalls: u64,
    /// Datagrams the kernel dropped for want of receive-buffer room (UDP `RcvbufErrors`,
    /// system-wide, during the run).
    kernel_drops: u64,
    /// Datagrams the async adapter's driver left unread for a consumer that was behind.
    deferred: u64,
}

impl Outcome {
    fn cpu(&self) -> Duration {
        self.send_cpu + self.recv_cpu
    }
    fn cpu_per_item(&self) -> f64 {
        self.cpu().as_nanos() as f64 / self.delivered.max(1) as f64
    }
    fn rate(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64()
    }
    fn datagram_size(&self) -> usize {
        (self.wire_bytes / self.datagrams.max(1)) as usize
    }
    fn per_datagram(&self) -> f64 {
        self.delivered as f64 / self.datagrams.max(1) as f64
    }
}

/// The kernel's count of UDP datagrams dropped for a full receive buffer (Linux).
fn kernel_drops() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut rows = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (rows.next(), rows.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A raw socket with the kernel buffers the adapters ask for, so that the baseline differs
/// from POROUS by the protocol alone. Returns the granted receive buffer size too.
fn raw_socket() -> std::io::Result<(UdpSocket, usize)> {
    let socket = UdpSocket::bind(localhost())?;
    let options = socket2::SockRef::from(&socket);
    // As in the adapters: best effort, the kernel may grant less.
    let _ = options.set_recv_buffer_size(porous_mio::SOCKET_BUFFER);
    let _ = options.set_send_buffer_size(porous_mio::SOCKET_BUFFER);
    let granted = options.recv_buffer_size()?;
    Ok((socket, granted))
}

/// The receiving end of a POROUS run, when it delivered the last packet.
struct RecvEnd {
    deferred: u64,
    last: Instant,
    cpu: Duration,
    delivered: u64,
    bytes: u64,
    acks: u64,
    syscalls: u64,
}

/// The sending end of a POROUS run.
struct SendEnd {
    start: Instant,
    cpu: Duration,
    outcome: Outcome,
}

/// Both ends' threads, joined, as one outcome.
fn join(
    sender: thread::JoinHandle<std::io::Result<SendEnd>>,
    receiver: thread::JoinHandle<std::io::Result<RecvEnd>>,
) -> std::io::Result<Outcome> {
    let s = sender.join().map_err(|_| io_error("sender panicked"))??;
    let r = receiver.join().map_err(|_| io_error("receiver panicked"))??;
    let mut o = s.outcome;
    o.wall = r.last - s.start;
    o.send_cpu = s.cpu;
    o.recv_cpu = r.cpu;
    o.delivered = r.delivered;
    o.bytes = r.bytes;
    o.acks = r.acks;
    o.syscalls += r.syscalls;
    o.deferred = r.deferred;
    Ok(o)
}

/// Secure mode's backend key and Unix time (the bench's tokens need no real clock).
const PRIVATE_KEY: PrivateKey = PrivateKey::from_bytes([0x3C; 32]);
const UNIX: u64 = 1_800_000_000;

fn mio_receiver(
    n: u64,
    batching: Batching,
    secure: bool,
    addr_tx: mpsc::Sender<SocketAddr>,
    start: Arc<Barrier>,
    done: Arc<AtomicBool>,
) -> std::io::Result<RecvEnd> {
    let mut host = if secure {
        // Tokens name the server's address, so it must be known before the host exists:
        // take a free port, then bind the host to it.
        let addr = UdpSocket::bind(localhost())?.local_addr()?;
        let mut config = HostConfig::default();
        config.secure = Some(SecureConfig::server(PRIVATE_KEY, vec![addr], Instant::now(), UNIX));
        Host::bind(addr, config)?
    } else {
        Host::bind(localhost(), HostConfig::default())?
    };
    host.set_batching(batching);
    addr_tx.send(host.local_addr()).map_err(io_error)?;
    while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
    start.wait();
    let cpu0 = thread_cpu();
    let acks0 = host.core().stats().datagrams_sent;
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
    let acks = host.core().stats().datagrams_sent - acks0;
    let syscalls = (s1.recv_calls - s0.recv_calls) + (s1.send_calls - s0.send_calls);
    Ok(RecvEnd { deferred: 0, last, cpu, delivered, bytes, acks, syscalls })
}

fn mio_run(batching: Batching, secure: bool, size: usize, n: u64) -> std::io::Result<Outcome> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done) = (start.clone(), done.clone());
        thread::spawn(move || mio_receiver(n, batching, secure, addr_tx, start, done))
    };
    let sender = thread::spawn(move || -> std::io::Result<SendEnd> {
        let remote = addr_rx.recv().map_err(io_error)?;
        let mut config = HostConfig::default();
        if secure {
            config.secure = Some(SecureConfig::client());
        }
        let mut host = Host::bind(localhost(), config)?;
        host.set_batching(batching);
        let peer = if secure {
            let params = TokenParams::new(1, vec![remote], UNIX, Duration::from_secs(60));
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
        while !done.load(Ordering::Acquire) {
            while sent < n {
                match host.send(peer, 0, packet.clone(), SendMode::Reliable) {
                    Ok(()) => sent += 1,
                    Err(SendError::QueueFull { .. }) => break,
                    Err(e) => return Err(io_error(e)),
                }
            }
            let _ = host.service(Duration::from_millis(1))?;
            if t0.elapsed() > WATCHDOG {
                return Err(io_error("watchdog: the sender gave up"));
            }
        }
        let cpu = thread_cpu() - cpu0;
        let (c1, s1) = (host.core().stats(), host.socket_stats());
        let p1 = host.peer_stats(peer).map(|p| p.transfer.frames_resent).unwrap_or(0);
        let outcome = Outcome {
            datagrams: c1.datagrams_sent - c0.datagrams_sent,
            wire_bytes: c1.bytes_sent - c0.bytes_sent,
            would_block: s1.would_block - s0.would_block,
            resent: p1 - p0,
            syscalls: (s1.send_calls - s0.send_calls) + (s1.recv_calls - s0.recv_calls),
            ..Outcome::default()
        };
        Ok(SendEnd { start: t0, cpu, outcome })
    });
    join(sender, receiver)
}

/// A current-thread tokio runtime for one end of a `tokio` run.
fn tokio_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

fn tokio_run(size: usize, n: u64) -> std::io::Result<Outcome> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done) = (start.clone(), done.clone());
        thread::spawn(move || -> std::io::Result<RecvEnd> {
            tokio_runtime()?.block_on(async move {
                let host = porous_tokio::Host::bind(localhost(), HostConfig::default()).await.map_err(io_error)?;
                addr_tx.send(host.local_addr()).map_err(io_error)?;
                let peer = host.accept().await.map_err(io_error)?;
                start.wait();
                let cpu0 = thread_cpu();
                let (acks0, s0) = (host.stats().datagrams_sent, host.socket_stats());
                let (mut delivered, mut bytes) = (0u64, 0u64);
                // One watchdog around the whole loop, as the mio receiver checks the time once
                // per event rather than arming a timer per packet.
                let receive = async {
                    while delivered < n {
                        let packet = peer.recv().await.map_err(io_error)?;
                        delivered += 1;
                        bytes += packet.data.len() as u64;
                    }
                    Ok::<(), std::io::Error>(())
                };
                tokio::time::timeout(WATCHDOG, receive)
                    .await
                    .map_err(|_| io_error("watchdog: the receiver gave up"))??;
                let last = Instant::now();
                let cpu = thread_cpu() - cpu0;
                let s1 = host.socket_stats();
                done.store(true, Ordering::Release);
                // Acknowledge the tail so the sender sees everything acknowledged.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let acks = host.stats().datagrams_sent - acks0;
                let syscalls = (s1.recv_calls - s0.recv_calls) + (s1.send_calls - s0.send_calls);
                let deferred = peer.delivery_stats().datagrams_deferred;
                Ok(RecvEnd { deferred, last, cpu, delivered, bytes, acks, syscalls })
            })
        })
    };
    let sender = thread::spawn(move || -> std::io::Result<SendEnd> {
        tokio_runtime()?.block_on(async move {
            let remote = addr_rx.recv().map_err(io_error)?;
            let host = porous_tokio::Host::bind(localhost(), HostConfig::default()).await.map_err(io_error)?;
            let peer = host.connect(remote).await.map_err(io_error)?;
            let packet = Bytes::from(vec![0x5A; size]);
            let c0 = host.stats();
            let p0 = peer.stats().map(|p| p.transfer.frames_resent).unwrap_or(0);
            let s0 = host.socket_stats();
            start.wait();
            let cpu0 = thread_cpu();
            let t0 = Instant::now();
            let mut sent = 0u64;
            while !done.load(Ordering::Acquire) {
                while sent < n {
                    match peer.send(0, packet.clone(), SendMode::Reliable) {
                        Ok(()) => sent += 1,
                        Err(SendError::QueueFull { .. }) => break,
                        Err(e) => return Err(io_error(e)),
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                if t0.elapsed() > WATCHDOG {
                    return Err(io_error("watchdog: the sender gave up"));
                }
            }
            let cpu = thread_cpu() - cpu0;
            let (c1, s1) = (host.stats(), host.socket_stats());
            let p1 = peer.stats().map(|p| p.transfer.frames_resent).unwrap_or(0);
            let outcome = Outcome {
                datagrams: c1.datagrams_sent - c0.datagrams_sent,
                wire_bytes: c1.bytes_sent - c0.bytes_sent,
                would_block: s1.would_block - s0.would_block,
                resent: p1 - p0,
                syscalls: (s1.send_calls - s0.send_calls) + (s1.recv_calls - s0.recv_calls),
                ..Outcome::default()
            };
            Ok(SendEnd { start: t0, cpu, outcome })
        })
    });
    join(sender, receiver)
}

/// The raw baselines: `count` datagrams of `size` bytes, blasted.
fn raw_run(batched: bool, size: usize, count: u64) -> std::io::Result<Outcome> {
    let (rx, _) = raw_socket()?;
    let (tx, _) = raw_socket()?;
    let to = rx.local_addr()?;
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done) = (start.clone(), done.clone());
        thread::spawn(move || -> std::io::Result<(Option<Instant>, Duration, u64, u64, u64)> {
            let mut counts = (0u64, 0u64, 0u64);
            let mut last = None;
            if batched {
                let mut io = UdpIo::new(&rx, Batching::FULL)?;
                let mut rx = mio::net::UdpSocket::from_std(rx);
                let mut poll = mio::Poll::new()?;
                let mut events = mio::Events::with_capacity(8);
                poll.registry().register(&mut rx, mio::Token(0), mio::Interest::READABLE)?;
                start.wait();
                let cpu0 = thread_cpu();
                while counts.0 < count {
                    match io.recv(rx.as_socket_ref()) {
                        Ok(_) => {
                            for (_, d) in io.received() {
                                counts.0 += 1;
                                counts.1 += d.len() as u64;
                            }
                            counts.2 += 1;
                            last = Some(Instant::now());
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            poll.poll(&mut events, Some(Duration::from_millis(50)))?;
                            // A quiet socket after the sender finished: the rest was lost.
                            if events.is_empty() && done.load(Ordering::Acquire) {
                                break;
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok((last, thread_cpu() - cpu0, counts.0, counts.1, counts.2))
            } else {
                rx.set_read_timeout(Some(Duration::from_millis(50)))?;
                let mut buf = vec![0u8; 65_536];
                start.wait();
                let cpu0 = thread_cpu();
                while counts.0 < count {
                    match rx.recv_from(&mut buf) {
                        Ok((len, _)) => {
                            counts.0 += 1;
                            counts.1 += len as u64;
                            counts.2 += 1;
                            last = Some(Instant::now());
                        }
                        // A timeout after the sender finished: the rest was lost.
                        Err(_) if done.load(Ordering::Acquire) => break,
                        Err(_) => {}
                    }
                }
                Ok((last, thread_cpu() - cpu0, counts.0, counts.1, counts.2))
            }
        })
    };
    let datagram = Bytes::from(vec![0x5A; size]);
    start.wait();
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let mut send_calls = 0;
    if batched {
        let mut io = UdpIo::new(&tx, Batching::FULL)?;
        for _ in 0..count {
            io.push(porous_mio::Transmit { remote: to, payload: datagram.clone() });
            if io.pending() >= 64 {
                while io.send(tx.as_socket_ref()).is_err() {
                    thread::yield_now();
                }
            }
        }
        while io.send(tx.as_socket_ref()).is_err() {
            thread::yield_now();
        }
        send_calls = io.stats().send_calls;
    } else {
        for _ in 0..count {
            if tx.send_to(&datagram, to).is_ok() {
                send_calls += 1;
            }
        }
    }
    let send_cpu = thread_cpu() - cpu0;
    done.store(true, Ordering::Release);
    let (last, recv_cpu, arrived, bytes, recv_calls) = receiver.join().map_err(|_| io_error("receiver panicked"))??;
    Ok(Outcome {
        wall: last.map_or(t0.elapsed(), |l| l - t0),
        send_cpu,
        recv_cpu,
        delivered: arrived,
        bytes,
        datagrams: count,
        wire_bytes: count * size as u64,
        syscalls: send_calls + recv_calls,
        ..Outcome::default()
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// "median (min-max)" with `digits` decimals.
fn spread(v: &[f64], digits: usize) -> String {
    let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    format!("{:.digits$} ({lo:.digits$}-{hi:.digits$})", median(v.to_vec()))
}

fn mbps(bytes_per_s: f64) -> String {
    format!("{:.1} MB/s", bytes_per_s / 1e6)
}

struct Options {
    small: u64,
    large: u64,
    runs: usize,
    scenarios: Vec<Scenario>,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let mut o = if full {
        Options { small: 500_000, large: 200_000, runs: 5, scenarios: Scenario::ALL.to_vec() }
    } else {
        Options { small: 20_000, large: 5_000, runs: 1, scenarios: Scenario::ALL.to_vec() }
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--small" => o.small = value().parse().unwrap_or(o.small),
            "--large" => o.large = value().parse().unwrap_or(o.large),
            "--runs" => o.runs = value().parse::<usize>().map_or(o.runs, |v| v.max(1)),
            "--only" => {
                let names = value();
                o.scenarios = Scenario::ALL.into_iter().filter(|s| names.split(',').any(|n| n == s.name())).collect();
            }
            _ => {}
        }
    }
    o
}

fn print_run(scenario: Scenario, run: usize, o: &Outcome) {
    let name = scenario.name();
    if scenario.is_porous() {
        println!(
            "{name:<12} run {run}: {:>8.1} ms  goodput {:>12}  cpu/msg {:>7.1} ns (send {:.0} ms, recv {:.0} ms, \
             sender busy {:.0}%)  {} data datagrams of {} B, {} acks, {} syscalls, {} resent, {} would-block, \
             {} dropped by the kernel, {} deferred",
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
            o.would_block,
            o.kernel_drops,
            o.deferred,
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
    println!("loopback bulk transfer, POROUS adapters (default config) vs raw UDP, {} runs each", o.runs);
    println!("scenarios, interleaved: {}", names.join(", "));
    println!("machine: {} cpus, {}", thread::available_parallelism().map_or(0, usize::from), cpu_model());
    println!(
        "socket buffers: asked for {} KiB, the kernel reports {} KiB for receiving",
        porous_mio::SOCKET_BUFFER / 1024,
        raw_socket()?.1 / 1024
    );
    let mut tables = Vec::new();
    for (size, n) in [(32usize, o.small), (1000, o.large)] {
        println!();
        println!("== {n} reliable packets of {size} bytes");
        let mut results: Vec<(Scenario, Vec<Outcome>)> = o.scenarios.iter().map(|&s| (s, Vec::new())).collect();
        // The raw datagrams: the size and count of the latest POROUS run (first run: POROUS first).
        let mut shape: Option<(usize, u64, f64)> = None;
        for run in 0..o.runs {
            let mut order: Vec<usize> = (0..results.len()).collect();
            order.rotate_left(run % results.len().max(1));
            if shape.is_none() {
                order.sort_by_key(|&i| !results[i].0.is_porous());
            }
            for i in order {
                let scenario = results[i].0;
                let drops0 = kernel_drops();
                let outcome = match scenario {
                    Scenario::Mio(batching) => mio_run(batching, false, size, n)?,
                    Scenario::MioSecure => mio_run(Batching::FULL, true, size, n)?,
                    Scenario::Tokio => tokio_run(size, n)?,
                    Scenario::Raw | Scenario::RawBatched => {
                        let (dsize, count, _) = shape.unwrap_or((size + 10, n, 1.0));
                        raw_run(scenario == Scenario::RawBatched, dsize, count)?
                    }
                };
                let mut outcome = outcome;
                outcome.kernel_drops = kernel_drops() - drops0;
                if scenario == Scenario::Mio(Batching::FULL) || (shape.is_none() && scenario.is_porous()) {
                    shape = Some((outcome.datagram_size(), outcome.datagrams, outcome.per_datagram()));
                }
                print_run(scenario, run, &outcome);
                results[i].1.push(outcome);
            }
        }
        tables.push((size, n, shape.map_or(1.0, |s| s.2), results));
    }
    println!();
    println!("medians (min-max) of {} runs; ratios per run against `raw` of the same run:", o.runs);
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
        let (raw, mio) = (find(Scenario::Raw), find(Scenario::Mio(Batching::FULL)));
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
                let (mio_cpu, mio_goodput) = if *scenario == Scenario::Mio(Batching::FULL) {
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
    Ok(())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| String::from("unknown cpu"))
}
