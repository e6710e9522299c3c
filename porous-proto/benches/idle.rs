//! Idle scale (issue 9): one server `Host` holding 100, 1,000 and 10,000 connected idle
//! peers, in memory.
//!
//! The clients are emulated by one client `Host` that connects to a distinct alias of the
//! server per client; the harness rewrites addresses on the way, so the server sees each
//! client at its own address and holds a full, independent peer for each. Clients connect
//! spread evenly over one keepalive interval (500 ms), as real clients arrive at random
//! times, and the pair then idles for 2 s so every timer is in its steady rhythm. Both
//! sides keep the connections alive with the default pings; nothing else is sent.
//!
//! The hosts are joined by the simulator's network, as every harness's are
//! (`support/crowd.rs`): its links rewrite the addresses, and its work stays outside the
//! server's timed calls.
//!
//! Criterion groups (time is the server's only; the clients' work is not counted):
//!
//! - `idle/step_nothing_due/{n}`: one `Host::step` when no timer is due (called again at
//!   the instant of the last step): the fixed cost of stepping, which must not grow with
//!   idle peers;
//! - `idle/tick_1ms/{n}`: one 1 ms engine tick of the server in the keepalive rhythm:
//!   `handle_datagram` for what the clients sent, `step`, `poll_transmit`, `poll_event`.
//!   A keepalive round is 500 ticks; the cost per peer per round is `500 x tick / n`.
//!
//! After the groups, the bench prints the heap memory the server holds per idle peer,
//! counted by a global allocator: live bytes of the server with `n` peers, minus those of
//! a server with none, divided by `n`.
//!
//! `cargo bench -p porous-proto --bench idle`; see `docs/performance.md`.

use std::alloc::System;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use porous_proto::sim::seeded_rng;
use porous_proto::{Event, Host, HostConfig};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Idle peer counts: those of the issue under `cargo bench` (which passes `--bench`), two
/// small ones for a smoke run under `cargo test --benches`.
fn sizes() -> &'static [usize] {
    if std::env::args().any(|a| a == "--bench") { &[100, 1_000, 10_000] } else { &[20, 40] }
}
const TICK: Duration = Duration::from_millis(1);
/// The default keepalive interval, over which connections are spread.
const SPREAD_TICKS: usize = 500;

fn config() -> HostConfig {
    let mut c = HostConfig::default();
    c.max_peers = 20_000;
    c
}

#[path = "support/addresses.rs"]
mod addresses;
#[path = "support/crowd.rs"]
mod crowd;
use addresses::alias;
use crowd::Crowd;

/// A server with `n` idle clients, emulated by one client host.
struct Idle {
    crowd: Crowd,
    connected: usize,
}

impl Idle {
    fn new(n: usize) -> Self {
        let server = Host::new(config(), seeded_rng(1)).expect("valid config");
        let client = Host::new(config(), seeded_rng(2)).expect("valid config");
        let mut s = Self { crowd: Crowd::new(server, client), connected: 0 };
        let per_tick = n.div_ceil(SPREAD_TICKS);
        let mut next = 0;
        while next < n {
            let now = s.crowd.now();
            for i in next..(next + per_tick).min(n) {
                s.crowd.client.connect(now, alias(i)).expect("connect");
            }
            next += per_tick;
            s.client_tick();
            s.server_tick();
        }
        // Two more seconds: the last handshakes finish and every keepalive is in rhythm.
        for _ in 0..2_000 {
            s.client_tick();
            s.server_tick();
        }
        assert_eq!(s.connected, n, "every client connected");
        assert_eq!(s.crowd.server.stats().peers, n);
        s
    }

    /// The clients' side of a tick: the clock advances, the clients take what the server
    /// sent, step, and send.
    fn client_tick(&mut self) {
        self.crowd.advance(TICK);
        self.crowd.client_read();
        let now = self.crowd.now();
        self.crowd.client.step(now);
        self.crowd.client_send(|_| {});
        while self.crowd.client.poll_event().is_some() {}
    }

    /// The server's side of a tick, its timed part between taking its inbox off the
    /// network and carrying its outbox.
    fn server_tick(&mut self) {
        self.crowd.take_inbox();
        self.server_turn();
        self.crowd.carry_outbox(|_| {});
    }

    /// The server's calls in a tick (what the benchmark times): read, step, transmit,
    /// drain events.
    fn server_turn(&mut self) {
        let c = &mut self.crowd;
        c.server_read();
        c.server.step(c.net.now());
        c.server_transmits();
        while let Some(e) = c.server.poll_event() {
            match e {
                Event::Connected { .. } => self.connected += 1,
                Event::Disconnected { peer, reason, .. } => panic!("{peer} disconnected: {reason}"),
                _ => {}
            }
        }
    }
}

fn bench_idle(c: &mut Criterion) {
    let mut nothing = c.benchmark_group("idle/step_nothing_due");
    nothing.throughput(Throughput::Elements(1));
    let mut setups: Vec<(usize, Idle)> = sizes().iter().map(|&n| (n, Idle::new(n))).collect();
    for (n, idle) in &mut setups {
        let now = idle.crowd.now();
        nothing.bench_with_input(BenchmarkId::from_parameter(*n), n, |b, _| b.iter(|| idle.crowd.server.step(now)));
    }
    nothing.finish();

    let mut tick = c.benchmark_group("idle/tick_1ms");
    for (n, idle) in &mut setups {
        tick.throughput(Throughput::Elements(*n as u64));
        let mut ticks = 0u64;
        let mut sent = 0u64;
        let before = idle.crowd.server.stats().datagrams_sent;
        tick.bench_with_input(BenchmarkId::from_parameter(*n), n, |b, _| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    idle.client_tick();
                    idle.crowd.take_inbox();
                    let start = Instant::now();
                    idle.server_turn();
                    total += start.elapsed();
                    idle.crowd.carry_outbox(|_| {});
                }
                ticks += iters;
                total
            });
        });
        sent += idle.crowd.server.stats().datagrams_sent - before;
        assert_eq!(idle.crowd.server.stats().peers, *n, "no idle peer timed out");
        eprintln!(
            "idle/tick_1ms/{n}: {sent} datagrams from the server in {ticks} ticks: {:.2} per peer per second",
            sent as f64 / *n as f64 / (ticks as f64 / 1000.0)
        );
    }
    tick.finish();
}

/// Live heap bytes (allocated and not freed) since `region` began.
fn live(region: &Region<'_, System>) -> i64 {
    let s = region.change();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

fn report_memory() {
    eprintln!();
    eprintln!("heap held by the server per idle peer (live bytes with n peers minus with none, / n):");
    eprintln!("{:>8} {:>14} {:>16} {:>18}", "peers", "server bytes", "bytes per peer", "marginal per peer");
    let region = Region::new(GLOBAL);
    let mut empty = Host::new(config(), seeded_rng(1)).expect("valid config");
    empty.step(Instant::now());
    let base = live(&region);
    drop(empty);
    let mut prev: Option<(usize, i64)> = None;
    for &n in sizes() {
        let region = Region::new(GLOBAL);
        let Crowd { server, client, net, inbox, outbox } = Idle::new(n).crowd;
        drop((client, net, inbox, outbox));
        let held = live(&region);
        let per = (held - base) as f64 / n as f64;
        let marginal =
            prev.map_or(String::from("-"), |(pn, ph)| format!("{:.0}", (held - ph) as f64 / (n - pn) as f64));
        eprintln!("{n:>8} {held:>14} {per:>16.0} {marginal:>18}");
        prev = Some((n, held));
        drop(server);
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench_idle(&mut c);
    report_memory();
    c.final_summary();
}
