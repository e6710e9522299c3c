//! porous-tokio over real UDP on 127.0.0.1: bulk reliable transfer next to the raw UDP
//! baselines (issue 20), the same transfer and baselines as porous-mio's loopback bench
//! (`porous_loopback::bulk`), so that each adapter is measured against raw UDP in runs of
//! its own. Prints its figures; no criterion.
//!
//! For 32-byte and 1,000-byte packets, each scenario runs `--runs` times, interleaved (the
//! order rotated each run, so that a noisy moment of the machine favours none):
//!
//! - `tokio`: a sender thread and a receiver thread, each end a current-thread tokio
//!   runtime (the driver task and the application task share it, so the thread's CPU time
//!   is all of that end's), `HostConfig::default()`. The sender queues reliable packets on
//!   one channel until `QueueFull`, then sleeps 1 ms (tokio's timer granularity); the
//!   receiver awaits `Peer::recv`. Measured: wall time from the first send to the last
//!   delivery, goodput, CPU per packet of both threads, system calls.
//! - `raw`: plain sockets, one `send_to` per datagram, as many datagrams of the size the
//!   latest `tokio` run put on the wire as it sent: what an application gets without a
//!   protocol.
//! - `raw-batched`: the same datagrams through `porous_udp::UdpIo` with full batching.
//!
//! Each `tokio` run is compared with the `raw` run of the same round (CPU per message
//! against raw UDP's CPU per datagram over the messages a datagram carried; goodput
//! against raw throughput), as porous-mio's bench compares `mio`: the two benches'
//! ratios, run alternately, compare the adapters.
//!
//! ```text
//! cargo bench -p porous-tokio --bench loopback [-- --small 500000 --large 200000 --runs 5]
//! ```
//!
//! Without `--bench` on its command line (as under `cargo test --benches`) it runs one
//! short round only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use porous_loopback::bulk::{
    Outcome, RecvEnd, SendEnd, WATCHDOG, cpu_model, io_error, join, kernel_drops, localhost, mbps, raw_run, raw_socket,
    round_order, spread, thread_cpu,
};
use porous_tokio::{Bytes, Host, HostConfig, SendError, SendMode};

/// What a scenario is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Tokio,
    Raw,
    RawBatched,
}

impl Scenario {
    const ALL: [Self; 3] = [Self::Tokio, Self::Raw, Self::RawBatched];

    fn name(self) -> &'static str {
        match self {
            Self::Tokio => "tokio",
            Self::Raw => "raw",
            Self::RawBatched => "raw-batched",
        }
    }
}

/// A current-thread tokio runtime for one end of a `tokio` run.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

/// `n` reliable packets of `size` bytes from one porous-tokio host to another.
fn tokio_run(size: usize, n: u64) -> std::io::Result<Outcome> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done) = (start.clone(), done.clone());
        thread::spawn(move || -> std::io::Result<RecvEnd> {
            runtime()?.block_on(async move {
                let host = Host::bind(localhost(), HostConfig::default()).await.map_err(io_error)?;
                addr_tx.send(host.local_addr()).map_err(io_error)?;
                let peer = host.accept().await.map_err(io_error)?;
                start.wait();
                let cpu0 = thread_cpu();
                let (acks0, s0) = (host.stats().datagrams_sent, host.socket_stats());
                let received0 = host.stats().datagrams_received;
                let (mut delivered, mut bytes) = (0u64, 0u64);
                // One watchdog around the whole loop, rather than a timer per packet.
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
                let arrived = host.stats().datagrams_received - received0;
                Ok(RecvEnd { deferred, arrived, last, cpu, delivered, bytes, acks, syscalls })
            })
        })
    };
    let sender = thread::spawn(move || -> std::io::Result<SendEnd> {
        runtime()?.block_on(async move {
            let remote = addr_rx.recv().map_err(io_error)?;
            let host = Host::bind(localhost(), HostConfig::default()).await.map_err(io_error)?;
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

struct Options {
    small: u64,
    large: u64,
    runs: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let mut o = if args.iter().any(|a| a == "--bench") {
        Options { small: 500_000, large: 200_000, runs: 5 }
    } else {
        // The smoke run: every scenario once, briefly.
        Options { small: 20_000, large: 5_000, runs: 1 }
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--small" => o.small = value().parse().unwrap_or(o.small),
            "--large" => o.large = value().parse().unwrap_or(o.large),
            "--runs" => o.runs = value().parse::<usize>().map_or(o.runs, |v| v.max(1)),
            _ => {}
        }
    }
    o
}

fn print_run(scenario: Scenario, run: usize, o: &Outcome) {
    let name = scenario.name();
    if scenario == Scenario::Tokio {
        println!(
            "{name:<12} run {run}: {:>8.1} ms  goodput {:>12}  cpu/msg {:>7.1} ns (send {:.0} ms, recv {:.0} ms)  {} data \
             datagrams of {} B, {} acks, {} syscalls, {} resent, {} lost on the way, {} would-block, {} dropped by the \
             kernel, {} deferred",
            o.wall.as_secs_f64() * 1e3,
            mbps(o.rate()),
            o.cpu_per_item(),
            o.send_cpu.as_secs_f64() * 1e3,
            o.recv_cpu.as_secs_f64() * 1e3,
            o.datagrams,
            o.datagram_size(),
            o.acks,
            o.syscalls,
            o.resent,
            o.datagrams.saturating_sub(o.arrived),
            o.would_block,
            o.kernel_drops,
            o.deferred,
        );
    } else {
        println!(
            "{name:<12} run {run}: {:>8.1} ms  throughput {:>9}  cpu/datagram {:>7.1} ns  {} of {} datagrams of {} B \
             arrived, {} syscalls",
            o.wall.as_secs_f64() * 1e3,
            mbps(o.rate()),
            o.cpu_per_item(),
            o.delivered,
            o.datagrams,
            o.datagram_size(),
            o.syscalls,
        );
    }
}

fn main() -> std::io::Result<()> {
    let o = options();
    println!("loopback, porous-tokio (default config) vs raw UDP, {} runs each", o.runs);
    println!("machine: {} cpus, {}", thread::available_parallelism().map_or(0, usize::from), cpu_model());
    println!(
        "socket buffers: asked for {} KiB, the kernel reports {} KiB for receiving",
        porous_tokio::SOCKET_BUFFER / 1024,
        raw_socket()?.1 / 1024
    );
    for (size, n) in [(32usize, o.small), (1000, o.large)] {
        println!();
        println!("== {n} reliable packets of {size} bytes");
        let mut results: Vec<(Scenario, Vec<Outcome>)> = Scenario::ALL.iter().map(|&s| (s, Vec::new())).collect();
        // The raw datagrams: the size and count of the latest tokio run (first run: tokio first).
        let mut shape: Option<(usize, u64, f64)> = None;
        for run in 0..o.runs {
            let mut order = round_order(run, results.len());
            if shape.is_none() {
                order.sort_by_key(|&i| results[i].0 != Scenario::Tokio);
            }
            for i in order {
                let scenario = results[i].0;
                let drops0 = kernel_drops();
                let mut outcome = match scenario {
                    Scenario::Tokio => tokio_run(size, n)?,
                    _ => {
                        let (dsize, count, _) = shape.unwrap_or((size + 10, n, 1.0));
                        raw_run(scenario == Scenario::RawBatched, dsize, count)?
                    }
                };
                outcome.kernel_drops = kernel_drops() - drops0;
                if scenario == Scenario::Tokio {
                    shape = Some((outcome.datagram_size(), outcome.datagrams, outcome.per_datagram()));
                }
                print_run(scenario, run, &outcome);
                results[i].1.push(outcome);
            }
        }
        let per_datagram = shape.map_or(1.0, |s| s.2);
        println!();
        println!("{n} packets of {size} B ({per_datagram:.1} per datagram), medians (min-max) of {} runs:", o.runs);
        println!(
            "  {:<12} {:>26} {:>24} {:>20} {:>20}",
            "scenario", "goodput MB/s", "cpu/msg ns", "cpu / raw's", "goodput / raw"
        );
        let raw = results.iter().find(|(s, _)| *s == Scenario::Raw).map(|(_, r)| r.clone()).unwrap_or_default();
        for (scenario, runs) in &results {
            let goodput: Vec<f64> = runs.iter().map(|r| r.rate() / 1e6).collect();
            if *scenario == Scenario::Tokio {
                let cpu: Vec<f64> = runs.iter().map(Outcome::cpu_per_item).collect();
                // Per run, against the raw run of the same round.
                let pairs = runs.iter().zip(&raw);
                let c: Vec<f64> =
                    pairs.clone().map(|(p, r)| p.cpu_per_item() / (r.cpu_per_item() / p.per_datagram())).collect();
                let g: Vec<f64> = pairs.map(|(p, r)| 100.0 * p.rate() / r.rate()).collect();
                println!(
                    "  {:<12} {:>26} {:>24} {:>20} {:>20}",
                    scenario.name(),
                    spread(&goodput, 1),
                    spread(&cpu, 1),
                    format!("{}x", spread(&c, 2)),
                    format!("{}%", spread(&g, 0)),
                );
            } else {
                let cpu: Vec<f64> = runs.iter().map(|r| r.cpu_per_item() / per_datagram).collect();
                println!("  {:<12} {:>26} {:>24}", scenario.name(), spread(&goodput, 1), spread(&cpu, 1));
            }
        }
    }
    Ok(())
}
