//! Bulk reliable transfer over real UDP on 127.0.0.1 through `porous-mio`, next to a raw
//! UDP baseline in the same run (issue 9). Prints its figures; no criterion.
//!
//! For 32-byte and 1,000-byte packets: a sender thread and a receiver thread, each with a
//! standalone `porous_mio::Host` (default configuration), move N reliable packets on one
//! channel, the sender keeping the channel's queue full (it queues until `QueueFull`, then
//! services the host). Measured: wall time from the first send to the last delivery,
//! goodput (payload bytes per second), and CPU time per packet (both threads, read from
//! `/proc/thread-self/schedstat`). Then the raw baseline: plain `std::net::UdpSocket`s,
//! one thread blasting as many datagrams of the size POROUS put on the wire (its mean data
//! datagram) as POROUS sent, the other receiving and counting what arrives: the physical
//! limit of this machine. Each measurement runs 5 times; the medians and the ratio
//! POROUS / raw are printed last.
//!
//! ```text
//! cargo bench -p porous-mio --bench loopback [-- --small 500000 --large 200000 --runs 5]
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
use porous_mio::{Event, Host, HostConfig, SendError, SendMode};

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

/// One POROUS transfer.
#[derive(Clone, Copy, Debug, Default)]
struct Porous {
    wall: Duration,
    send_cpu: Duration,
    recv_cpu: Duration,
    delivered: u64,
    payload_bytes: u64,
    /// Data-direction datagrams and bytes the sender put on the wire (resends included).
    datagrams: u64,
    wire_bytes: u64,
    /// Acknowledgement-direction datagrams from the receiver.
    ack_datagrams: u64,
    would_block: u64,
    resent: u64,
}

impl Porous {
    fn cpu_per_msg(&self) -> f64 {
        (self.send_cpu + self.recv_cpu).as_nanos() as f64 / self.delivered as f64
    }
    fn goodput(&self) -> f64 {
        self.payload_bytes as f64 / self.wall.as_secs_f64()
    }
    fn datagram_size(&self) -> usize {
        (self.wire_bytes / self.datagrams.max(1)) as usize
    }
}

fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A raw socket with the kernel buffers `porous-mio` asks for, so that the baseline
/// differs from POROUS by the protocol alone. Returns the granted receive buffer size too.
fn raw_socket() -> std::io::Result<(UdpSocket, usize)> {
    let socket = UdpSocket::bind(localhost())?;
    let options = socket2::SockRef::from(&socket);
    // As in the adapter: best effort, the kernel may grant less.
    let _ = options.set_recv_buffer_size(porous_mio::SOCKET_BUFFER);
    let _ = options.set_send_buffer_size(porous_mio::SOCKET_BUFFER);
    let granted = options.recv_buffer_size()?;
    Ok((socket, granted))
}

struct RecvResult {
    last: Instant,
    cpu: Duration,
    delivered: u64,
    bytes: u64,
    ack_datagrams: u64,
}

fn porous_receiver(
    n: u64,
    addr_tx: mpsc::Sender<SocketAddr>,
    start: Arc<Barrier>,
    done: Arc<AtomicBool>,
) -> std::io::Result<RecvResult> {
    let mut host = Host::bind(localhost(), HostConfig::default())?;
    addr_tx.send(host.local_addr()).map_err(std::io::Error::other)?;
    while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
    start.wait();
    let cpu0 = thread_cpu();
    let acks0 = host.core().stats().datagrams_sent;
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
            Some(Event::Disconnected { reason, .. }) => return Err(std::io::Error::other(reason.to_string())),
            _ => {}
        }
        if Instant::now() > deadline {
            return Err(std::io::Error::other(format!("watchdog: {delivered} of {n} delivered")));
        }
    }
    let cpu = thread_cpu() - cpu0;
    done.store(true, Ordering::Release);
    // Acknowledge the tail so the sender sees everything acknowledged.
    let _ = host.service(Duration::from_millis(20));
    let ack_datagrams = host.core().stats().datagrams_sent - acks0;
    Ok(RecvResult { last, cpu, delivered, bytes, ack_datagrams })
}

fn porous_run(size: usize, n: u64) -> std::io::Result<Porous> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done) = (start.clone(), done.clone());
        thread::spawn(move || porous_receiver(n, addr_tx, start, done))
    };
    let sender = thread::spawn(move || -> std::io::Result<(Instant, Duration, Porous)> {
        let remote = addr_rx.recv().map_err(std::io::Error::other)?;
        let mut host = Host::bind(localhost(), HostConfig::default())?;
        let peer = host.connect(remote).map_err(std::io::Error::other)?;
        while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
        let packet = Bytes::from(vec![0x5A; size]);
        let s0 = host.core().stats();
        let p0 = host.peer_stats(peer).map(|p| p.transfer.frames_resent).unwrap_or(0);
        let w0 = host.socket_stats().would_block;
        start.wait();
        let cpu0 = thread_cpu();
        let t0 = Instant::now();
        let mut sent = 0u64;
        while !done.load(Ordering::Acquire) {
            while sent < n {
                match host.send(peer, 0, packet.clone(), SendMode::Reliable) {
                    Ok(()) => sent += 1,
                    Err(SendError::QueueFull { .. }) => break,
                    Err(e) => return Err(std::io::Error::other(e)),
                }
            }
            let _ = host.service(Duration::from_millis(1))?;
            if t0.elapsed() > WATCHDOG {
                return Err(std::io::Error::other("watchdog: the sender gave up"));
            }
        }
        let cpu = thread_cpu() - cpu0;
        let s1 = host.core().stats();
        let p1 = host.peer_stats(peer).map(|p| p.transfer.frames_resent).unwrap_or(0);
        let result = Porous {
            datagrams: s1.datagrams_sent - s0.datagrams_sent,
            wire_bytes: s1.bytes_sent - s0.bytes_sent,
            would_block: host.socket_stats().would_block - w0,
            resent: p1 - p0,
            ..Porous::default()
        };
        Ok((t0, cpu, result))
    });
    let (t0, send_cpu, mut result) = sender.join().map_err(|_| std::io::Error::other("sender panicked"))??;
    let r = receiver.join().map_err(|_| std::io::Error::other("receiver panicked"))??;
    result.wall = r.last - t0;
    result.send_cpu = send_cpu;
    result.recv_cpu = r.cpu;
    result.delivered = r.delivered;
    result.payload_bytes = r.bytes;
    result.ack_datagrams = r.ack_datagrams;
    Ok(result)
}

/// One raw UDP blast.
#[derive(Clone, Copy, Debug, Default)]
struct Raw {
    wall: Duration,
    send_cpu: Duration,
    recv_cpu: Duration,
    sent: u64,
    arrived: u64,
    bytes: u64,
}

impl Raw {
    fn throughput(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64()
    }
    fn cpu_per_datagram(&self) -> f64 {
        (self.send_cpu + self.recv_cpu).as_nanos() as f64 / self.arrived.max(1) as f64
    }
}

fn raw_run(size: usize, count: u64) -> std::io::Result<Raw> {
    let (rx, _) = raw_socket()?;
    let (tx, _) = raw_socket()?;
    let to = rx.local_addr()?;
    rx.set_read_timeout(Some(Duration::from_millis(50)))?;
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done) = (start.clone(), done.clone());
        thread::spawn(move || -> (Option<Instant>, Duration, u64, u64) {
            let mut buf = vec![0u8; 65_536];
            start.wait();
            let cpu0 = thread_cpu();
            let (mut arrived, mut bytes, mut last) = (0u64, 0u64, None);
            while arrived < count {
                match rx.recv_from(&mut buf) {
                    Ok((len, _)) => {
                        arrived += 1;
                        bytes += len as u64;
                        last = Some(Instant::now());
                    }
                    // A timeout after the sender finished: the rest was lost.
                    Err(_) if done.load(Ordering::Acquire) => break,
                    Err(_) => {}
                }
            }
            (last, thread_cpu() - cpu0, arrived, bytes)
        })
    };
    let datagram = vec![0x5A; size];
    start.wait();
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let mut sent = 0;
    for _ in 0..count {
        if tx.send_to(&datagram, to).is_ok() {
            sent += 1;
        }
    }
    let send_cpu = thread_cpu() - cpu0;
    done.store(true, Ordering::Release);
    let (last, recv_cpu, arrived, bytes) = receiver.join().map_err(|_| std::io::Error::other("receiver panicked"))?;
    let wall = last.map_or(t0.elapsed(), |l| l - t0);
    Ok(Raw { wall, send_cpu, recv_cpu, sent, arrived, bytes })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn mbps(bytes_per_s: f64) -> String {
    format!("{:.1} MB/s", bytes_per_s / 1e6)
}

struct Options {
    small: u64,
    large: u64,
    runs: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let mut o = if full {
        Options { small: 500_000, large: 200_000, runs: 5 }
    } else {
        Options { small: 20_000, large: 5_000, runs: 1 }
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let mut num = || it.next().and_then(|v| v.parse::<u64>().ok());
        match a.as_str() {
            "--small" => o.small = num().unwrap_or(o.small),
            "--large" => o.large = num().unwrap_or(o.large),
            "--runs" => o.runs = num().map_or(o.runs, |v| v.max(1) as usize),
            _ => {}
        }
    }
    o
}

fn main() -> std::io::Result<()> {
    let o = options();
    println!("loopback bulk transfer, POROUS (porous-mio, default config) vs raw UDP, {} runs each", o.runs);
    println!("machine: {} cpus, {}", thread::available_parallelism().map_or(0, usize::from), cpu_model());
    println!(
        "socket buffers: asked for {} KiB, the kernel reports {} KiB for receiving",
        porous_mio::SOCKET_BUFFER / 1024,
        raw_socket()?.1 / 1024
    );
    let mut summary = Vec::new();
    for (size, n) in [(32usize, o.small), (1000, o.large)] {
        println!();
        println!("== {n} reliable packets of {size} bytes");
        let (mut p_runs, mut r_runs) = (Vec::new(), Vec::new());
        for run in 0..o.runs {
            let p = porous_run(size, n)?;
            println!(
                "porous run {run}: {:>8.1} ms  goodput {:>11}  cpu/msg {:>7.1} ns (send {:.0} ms, recv {:.0} ms, \
                 sender busy {:.0}%)  {} data datagrams of {} B, {} acks, {} resent, {} would-block",
                p.wall.as_secs_f64() * 1e3,
                mbps(p.goodput()),
                p.cpu_per_msg(),
                p.send_cpu.as_secs_f64() * 1e3,
                p.recv_cpu.as_secs_f64() * 1e3,
                100.0 * p.send_cpu.as_secs_f64() / p.wall.as_secs_f64(),
                p.datagrams,
                p.datagram_size(),
                p.ack_datagrams,
                p.resent,
                p.would_block,
            );
            // The same datagrams, same sizes, without a protocol.
            let r = raw_run(p.datagram_size(), p.datagrams)?;
            println!(
                "raw    run {run}: {:>8.1} ms  throughput {:>8}  cpu/datagram {:>7.1} ns  {} of {} datagrams arrived \
                 ({:.1}% lost)",
                r.wall.as_secs_f64() * 1e3,
                mbps(r.throughput()),
                r.cpu_per_datagram(),
                r.arrived,
                r.sent,
                100.0 * (1.0 - r.arrived as f64 / r.sent.max(1) as f64),
            );
            p_runs.push(p);
            r_runs.push(r);
        }
        let goodput = median(p_runs.iter().map(Porous::goodput).collect());
        let wire = median(p_runs.iter().map(|p| p.wire_bytes as f64 / p.wall.as_secs_f64()).collect());
        let cpu = median(p_runs.iter().map(Porous::cpu_per_msg).collect());
        let busy = median(p_runs.iter().map(|p| p.send_cpu.as_secs_f64() / p.wall.as_secs_f64()).collect());
        let msgs = median(p_runs.iter().map(|p| p.delivered as f64 / p.wall.as_secs_f64()).collect());
        let per_dgram = median(p_runs.iter().map(|p| p.delivered as f64 / p.datagrams as f64).collect());
        let raw = median(r_runs.iter().map(Raw::throughput).collect());
        let raw_cpu = median(r_runs.iter().map(Raw::cpu_per_datagram).collect());
        let raw_loss = median(r_runs.iter().map(|r| 1.0 - r.arrived as f64 / r.sent.max(1) as f64).collect());
        summary.push((size, n, goodput, wire, cpu, busy, msgs, per_dgram, raw, raw_cpu, raw_loss));
    }
    println!();
    println!("medians of {} runs:", o.runs);
    println!(
        "{:>6} {:>8} {:>14} {:>14} {:>12} {:>12} {:>9} {:>10} {:>14} {:>14} {:>9} {:>14}",
        "size",
        "packets",
        "goodput",
        "wire",
        "msgs/s",
        "cpu/msg",
        "msg/dgram",
        "send busy",
        "raw UDP",
        "raw cpu/dgram",
        "raw loss",
        "goodput/raw"
    );
    for (size, n, goodput, wire, cpu, busy, msgs, per_dgram, raw, raw_cpu, raw_loss) in summary {
        println!(
            "{size:>6} {n:>8} {:>14} {:>14} {:>12.0} {:>9.1} ns {per_dgram:>9.1} {:>9.0}% {:>14} {:>11.1} ns {:>8.1}% {:>13.1}%",
            mbps(goodput),
            mbps(wire),
            msgs,
            cpu,
            busy * 100.0,
            mbps(raw),
            raw_cpu,
            raw_loss * 100.0,
            100.0 * goodput / raw,
        );
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
