//! A server's tick, at the socket layer: one datagram to each of 64 peers, repeated, through
//! `UdpIo` with `sendmmsg` (32 datagrams per call) and without (one call per datagram),
//! interleaved A B A B. GSO takes none of them (one datagram per destination). Prints the
//! sender's CPU time per datagram, medians and ranges of the runs; no criterion.
//!
//! ```text
//! cargo bench -p porous-udp --bench fanout [-- --ticks 2000 --runs 5]
//! ```
//!
//! Without `--bench` on its command line (as under `cargo test --benches`) it runs one
//! short round only.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_udp::{AsSocketRef, Batching, Transmit, UdpIo};

const PEERS: usize = 64;

/// CPU time this thread has used (`/proc/thread-self/schedstat`, Linux).
fn thread_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(s.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0))
}

/// Sends `ticks` ticks of one 200-byte datagram per peer; returns CPU ns per datagram and
/// the system calls made.
fn run(batching: Batching, ticks: usize, peers: &[UdpSocket]) -> (f64, u64) {
    let socket = porous_udp::bind("127.0.0.1:0").expect("bind");
    let mut io = UdpIo::new(&socket, batching).expect("UdpIo");
    let payload = Bytes::from(vec![0x5A; 200]);
    let addrs: Vec<_> = peers.iter().map(|p| p.local_addr().expect("address")).collect();
    let cpu0 = thread_cpu();
    for _ in 0..ticks {
        for &remote in &addrs {
            io.push(Transmit::new(remote, payload.clone()));
        }
        // The receivers do not read: what overflows their buffers is dropped by the kernel,
        // which does not concern the sender.
        while io.send(socket.as_socket_ref()).is_err() {
            std::thread::yield_now();
        }
    }
    let cpu = thread_cpu() - cpu0;
    let stats = io.stats();
    (cpu.as_nanos() as f64 / stats.sent.max(1) as f64, stats.send_calls)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let value = |flag: &str, default: usize| {
        args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
    };
    let (ticks, runs) = if full { (value("--ticks", 2000), value("--runs", 5)) } else { (20, 1) };
    let peers: Vec<UdpSocket> = (0..PEERS).map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind")).collect();
    let modes = [("sendmmsg", Batching::FULL), ("one call per datagram", Batching::NONE)];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let start = Instant::now();
    for run_index in 0..runs {
        for k in 0..modes.len() {
            let i = (k + run_index) % modes.len();
            let (cpu, calls) = run(modes[i].1, ticks, &peers);
            println!("{:<22} run {run_index}: {cpu:>7.1} ns of CPU per datagram, {calls} send calls", modes[i].0);
            results[i].push(cpu);
        }
    }
    println!("\n{PEERS} peers x {ticks} ticks, {runs} runs each, {:.1} s", start.elapsed().as_secs_f64());
    for (i, (name, _)) in modes.iter().enumerate() {
        let v = &results[i];
        let (lo, hi) = v.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        println!("{name:<22} {:>7.1} ns per datagram (range {lo:.1}-{hi:.1})", median(v.clone()));
    }
}
