//! Two `porous_proto::Host`s joined in memory, no sockets (issue 9): messages per second,
//! bytes per second, and heap allocations per message in steady state.
//!
//! Workloads, each on a perfect link driven by a simulated clock that advances a fixed
//! tick per round (the simulator's network with both links held: datagrams wait in the
//! link's queue until the receiver's turn):
//!
//! - `reliable_32B/batch{1,32,1024}`: host A sends that many 32-byte reliable packets per
//!   1 ms round to host B;
//! - `reliable_1000B/batch64`: 64 1,000-byte reliable packets per 1 ms round;
//! - `game_60hz`: a 60 Hz game loop, per tick 3 small reliable inputs client to server, one
//!   200-byte unreliable state server to client, and every 30th tick a 4,000-byte reliable
//!   packet server to client; one iteration is 30 ticks (0.5 s of game time).
//!
//! A round: the sender queues its batch (retrying in the next round what gets
//! `QueueFull`), steps, its datagrams are handed to the receiver, which steps (delivering
//! and acknowledging), and the acknowledgements are handed back. Both hosts run on this
//! thread, so the figures are CPU of both ends on one core. `…/both` times whole rounds;
//! `…/send_side` only the sender's calls (`send`, `step`, `poll_transmit`, and
//! `handle_datagram` of acknowledgements) and `…/recv_side` only the receiver's
//! (`handle_datagram` of data, `step`, `poll_event`, `poll_transmit`): the channel send
//! path and receive path.
//!
//! After the criterion groups, the bench prints heap allocations per message for each
//! workload, counted by a global allocator over 2,000 steady-state rounds (after 2,000
//! rounds of warm-up), outside criterion.
//!
//! Then secure mode against plain mode (issue 21): each small-message workload and the game
//! loop run plain and secure in turn (A B A B ..., fresh warmed pairs each run), CPU per
//! delivered message of both ends, the secure/plain ratio of each adjacent pair and the
//! medians; then allocations and wire bytes per message in secure mode. Only this part:
//! `POROUS_SECURE_ONLY=1` (`POROUS_SECURE_RUNS`, default 7, pairs of runs).
//!
//! `cargo bench -p porous-proto --bench hosts`. For a profiler, `POROUS_PROFILE=small`
//! (or `large`, `game`, and `plain1`, `secure1`: 32-byte messages one per round) runs
//! that workload for `POROUS_PROFILE_ROUNDS` rounds (default 20,000) without criterion.
//! See `docs/performance.md`.

use std::alloc::System;
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use porous_proto::sim::{LinkConditions, Network, seeded_rng};
use porous_proto::token::{self, PrivateKey, TokenParams};
use porous_proto::{Event, Host, HostConfig, PeerId, SecureConfig, SendError, SendMode};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Messages and payload bytes delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    messages: u64,
    bytes: u64,
}

/// Two hosts on a perfect in-memory link, connected, with a simulated clock.
struct Pair {
    a: Host,
    b: Host,
    a_addr: SocketAddr,
    b_addr: SocketAddr,
    now: Instant,
    /// A's id of B.
    ab: PeerId,
    /// B's id of A.
    ba: PeerId,
    /// The links both ways, held: a datagram waits in its link's queue (reused) until the
    /// round hands it over.
    net: Network,
    /// Delivered at B (from A) and at A (from B).
    at_b: Tally,
    at_a: Tally,
    /// Packets A still has to queue (refused with `QueueFull` so far).
    backlog: usize,
    /// Packets A's `send` took.
    queued: u64,
}

impl Pair {
    /// A pair in plain mode, or in secure mode: A a client with a connect token, B the
    /// server it names.
    fn with_mode(config: &HostConfig, secure: bool) -> Self {
        let a_addr: SocketAddr = "10.0.0.1:9000".parse().expect("address");
        let b_addr: SocketAddr = "10.0.0.2:9000".parse().expect("address");
        let mut net = Network::new(0);
        net.set_link_both(a_addr, b_addr, LinkConditions::held());
        let now = net.now();
        let (mut a_config, mut b_config) = (config.clone(), config.clone());
        let key = PrivateKey::from_bytes([0x3C; 32]);
        let unix = 1_800_000_000;
        if secure {
            a_config.secure = Some(SecureConfig::client());
            b_config.secure = Some(SecureConfig::server(key.clone(), vec![b_addr], now, unix));
        }
        let mut a = Host::new(a_config, seeded_rng(1)).expect("valid config");
        let b = Host::new(b_config, seeded_rng(2)).expect("valid config");
        let ab = if secure {
            let mut params = TokenParams::new(7, vec![b_addr], unix, Duration::from_secs(60));
            params.timeout = Duration::from_secs(3600);
            let t = token::generate(&key, &params, &mut seeded_rng(3)).expect("token");
            a.connect_with_token(now, b_addr, &t).expect("connect")
        } else {
            a.connect(now, b_addr).expect("connect")
        };
        let mut p = Self {
            a,
            b,
            a_addr,
            b_addr,
            now,
            ab,
            ba: ab,
            net,
            at_b: Tally::default(),
            at_a: Tally::default(),
            backlog: 0,
            queued: 0,
        };
        let (mut a_up, mut b_up) = (false, false);
        for _ in 0..100 {
            p.tick(Duration::from_millis(1));
            p.a.step(p.now);
            p.b.step(p.now);
            p.carry();
            while let Some(e) = p.a.poll_event() {
                a_up |= matches!(e, Event::Connected { .. });
            }
            while let Some(e) = p.b.poll_event() {
                if let Event::Connected { peer, .. } = e {
                    p.ba = peer;
                    b_up = true;
                }
            }
            if a_up && b_up {
                return p;
            }
        }
        panic!("the hosts did not connect");
    }

    /// Advances the clock by `d`.
    fn tick(&mut self, d: Duration) {
        self.net.advance_to(self.now + d);
        self.now = self.net.now();
    }

    fn collect_a(&mut self) {
        self.net.route(self.a_addr, &mut self.a);
    }

    fn collect_b(&mut self) {
        self.net.route(self.b_addr, &mut self.b);
    }

    fn deliver_to_b(&mut self) {
        self.net.deliver_held_to(self.a_addr, self.b_addr, &mut self.b);
    }

    fn deliver_to_a(&mut self) {
        self.net.deliver_held_to(self.b_addr, self.a_addr, &mut self.a);
    }

    /// Carries every queued datagram both ways.
    fn carry(&mut self) {
        self.collect_a();
        self.collect_b();
        self.deliver_to_b();
        self.deliver_to_a();
    }

    fn drain_b(&mut self) {
        while let Some(e) = self.b.poll_event() {
            if let Event::Received { data, .. } = e {
                self.at_b.messages += 1;
                self.at_b.bytes += black_box(data).len() as u64;
            }
        }
    }

    fn drain_a(&mut self) {
        while let Some(e) = self.a.poll_event() {
            if let Event::Received { data, .. } = e {
                self.at_a.messages += 1;
                self.at_a.bytes += black_box(data).len() as u64;
            }
        }
    }

    /// Queues up to `n` packets (plus the backlog) from A to B on channel 0; what the
    /// channel refuses waits for the next round.
    fn queue_a(&mut self, msg: &Bytes, n: usize, mode: SendMode) {
        let mut left = n + self.backlog;
        while left > 0 {
            match self.a.send(self.ab, 0, msg.clone(), mode) {
                Ok(()) => {
                    left -= 1;
                    self.queued += 1;
                }
                Err(SendError::QueueFull { .. }) => break,
                Err(e) => panic!("send failed: {e}"),
            }
        }
        self.backlog = left;
    }

    /// One round of bulk transfer A to B; returns the time spent in the sender's calls and
    /// in the receiver's.
    fn bulk_round(&mut self, msg: &Bytes, n: usize, tick: Duration) -> (Duration, Duration) {
        self.tick(tick);
        let t0 = Instant::now();
        self.queue_a(msg, n, SendMode::Reliable);
        self.a.step(self.now);
        self.collect_a();
        let t1 = Instant::now();
        self.deliver_to_b();
        self.b.step(self.now);
        self.drain_b();
        self.collect_b();
        let t2 = Instant::now();
        self.deliver_to_a();
        self.drain_a();
        let t3 = Instant::now();
        ((t1 - t0) + (t3 - t2), t2 - t1)
    }
}

/// A bulk workload: `batch` packets of `size` bytes per 1 ms round.
#[derive(Clone, Copy, Debug)]
struct Bulk {
    name: &'static str,
    size: usize,
    batch: usize,
}

const TICK: Duration = Duration::from_millis(1);

const SMALL: [Bulk; 3] = [
    Bulk { name: "reliable_32B", size: 32, batch: 1 },
    Bulk { name: "reliable_32B", size: 32, batch: 32 },
    Bulk { name: "reliable_32B", size: 32, batch: 1024 },
];
const LARGE: Bulk = Bulk { name: "reliable_1000B", size: 1000, batch: 64 };

/// The packet every round sends: a slice of a shared buffer, as an application that
/// serialises into a pool would hand over (cloning it allocates nothing).
fn packet(size: usize) -> Bytes {
    Bytes::from(vec![0x5A; size])
}

/// Whether `cargo bench` runs this binary (it passes `--bench`). Under `cargo test
/// --benches` criterion runs each benchmark once, and the rest shrinks to a smoke test.
fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Rounds of warm-up, and of allocation counting.
fn rounds() -> usize {
    if full_run() { 2_000 } else { 20 }
}

/// A connected pair after enough rounds for the congestion window and every buffer to
/// reach steady state.
fn warm_bulk(w: Bulk) -> (Pair, Bytes) {
    warm_bulk_in(w, false)
}

fn warm_bulk_in(w: Bulk, secure: bool) -> (Pair, Bytes) {
    let mut p = Pair::with_mode(&HostConfig::default(), secure);
    let msg = packet(w.size);
    for _ in 0..rounds() {
        p.bulk_round(&msg, w.batch, TICK);
    }
    (p, msg)
}

fn bench_bulk(c: &mut Criterion, w: Bulk) {
    let mut g = c.benchmark_group(format!("hosts/{}", w.name));
    g.throughput(Throughput::ElementsAndBytes { elements: w.batch as u64, bytes: (w.batch * w.size) as u64 });
    let (mut p, msg) = warm_bulk(w);
    for (side, pick) in [("both", 0), ("send_side", 1), ("recv_side", 2)] {
        g.bench_function(format!("batch{}/{side}", w.batch), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let (s, r) = p.bulk_round(&msg, w.batch, TICK);
                    total += match pick {
                        0 => start.elapsed(),
                        1 => s,
                        _ => r,
                    };
                }
                total
            });
        });
    }
    g.finish();
    // Everything queued arrives: rounds that queue nothing new until the backlog is sent
    // and delivered.
    for _ in 0..100_000 {
        if p.backlog == 0 && p.at_b.messages == p.queued {
            break;
        }
        p.bulk_round(&msg, 0, TICK);
    }
    assert!(p.backlog == 0 && p.at_b.messages == p.queued, "delivered {} of {} queued", p.at_b.messages, p.queued);
}

/// The 60 Hz game loop between a client (A) and a server (B).
struct Game {
    p: Pair,
    input: Bytes,
    state: Bytes,
    big: Bytes,
    tick_no: u64,
}

const GAME_TICK: Duration = Duration::from_micros(16_667);
const GAME_TICKS: u64 = 30;
/// Messages and payload bytes one iteration (30 ticks) sends.
const GAME_MESSAGES: u64 = GAME_TICKS * (3 + 1) + 1;
const GAME_BYTES: u64 = GAME_TICKS * (3 * 16 + 200) + 4000;

impl Game {
    fn new() -> Self {
        Self::with_mode(false)
    }

    fn with_mode(secure: bool) -> Self {
        let mut g = Self {
            p: Pair::with_mode(&HostConfig::default(), secure),
            input: packet(16),
            state: packet(200),
            big: packet(4000),
            tick_no: 0,
        };
        for _ in 0..100 {
            g.run();
        }
        g
    }

    /// One engine tick on both sides: queue, step, exchange, drain.
    fn tick(&mut self) {
        let p = &mut self.p;
        p.tick(GAME_TICK);
        for _ in 0..3 {
            p.a.send(p.ab, 0, self.input.clone(), SendMode::Reliable).expect("input queued");
        }
        p.b.send(p.ba, 1, self.state.clone(), SendMode::Unreliable).expect("state queued");
        if self.tick_no.is_multiple_of(GAME_TICKS) {
            p.b.send(p.ba, 2, self.big.clone(), SendMode::Reliable).expect("big packet queued");
        }
        self.tick_no += 1;
        p.a.step(p.now);
        p.b.step(p.now);
        p.carry();
        p.drain_a();
        p.drain_b();
    }

    /// One iteration: 30 ticks.
    fn run(&mut self) {
        for _ in 0..GAME_TICKS {
            self.tick();
        }
    }

    fn delivered(&self) -> u64 {
        self.p.at_a.messages + self.p.at_b.messages
    }
}

fn bench_game(c: &mut Criterion) {
    let mut g = c.benchmark_group("hosts/game_60hz");
    g.throughput(Throughput::ElementsAndBytes { elements: GAME_MESSAGES, bytes: GAME_BYTES });
    let mut game = Game::new();
    g.bench_function("30_ticks", |b| b.iter(|| game.run()));
    g.finish();
}

/// Heap allocations per delivered message in steady state, counted outside criterion.
fn report_allocations() {
    eprintln!();
    let n = rounds();
    eprintln!("allocations per message, steady state ({n} rounds after {n} of warm-up):");
    eprintln!(
        "{:<28} {:>10} {:>12} {:>14} {:>14} {:>12}",
        "workload", "messages", "allocations", "allocs/msg", "alloc B/msg", "wire B/msg"
    );
    let row = |name: &str, messages: u64, s: stats_alloc::Stats, wire: u64| {
        let events = (s.allocations + s.reallocations) as f64;
        eprintln!(
            "{name:<28} {messages:>10} {:>12} {:>14.4} {:>14.2} {:>12.2}",
            s.allocations + s.reallocations,
            events / messages as f64,
            s.bytes_allocated as f64 / messages as f64,
            wire as f64 / messages as f64,
        );
    };
    for w in SMALL.iter().copied().chain([LARGE]) {
        let (mut p, msg) = warm_bulk(w);
        let (before, sent_a, sent_b) = (p.at_b.messages, p.a.stats().bytes_sent, p.b.stats().bytes_sent);
        let region = Region::new(GLOBAL);
        for _ in 0..rounds() {
            p.bulk_round(&msg, w.batch, TICK);
        }
        let s = region.change();
        let wire = p.a.stats().bytes_sent - sent_a + p.b.stats().bytes_sent - sent_b;
        row(&format!("{}/batch{}", w.name, w.batch), p.at_b.messages - before, s, wire);
    }
    let mut game = Game::new();
    let (before, sent_a, sent_b) = (game.delivered(), game.p.a.stats().bytes_sent, game.p.b.stats().bytes_sent);
    let region = Region::new(GLOBAL);
    for _ in 0..(rounds() as u64).div_ceil(GAME_TICKS) {
        game.run();
    }
    let s = region.change();
    let wire = game.p.a.stats().bytes_sent - sent_a + game.p.b.stats().bytes_sent - sent_b;
    row("game_60hz", game.delivered() - before, s, wire);
}

/// One timed run of a workload in one mode: CPU per delivered message of both ends (ns),
/// on a fresh pair warmed to steady state.
fn timed_run(workload: Option<Bulk>, secure: bool) -> f64 {
    match workload {
        Some(w) => {
            let (mut p, msg) = warm_bulk_in(w, secure);
            // About 100,000 messages per run, at least 200 rounds.
            let rounds = if full_run() { (100_000 / w.batch).max(200) } else { 20 };
            let before = p.at_b.messages;
            let start = Instant::now();
            for _ in 0..rounds {
                p.bulk_round(&msg, w.batch, TICK);
            }
            start.elapsed().as_nanos() as f64 / (p.at_b.messages - before) as f64
        }
        None => {
            let mut game = Game::with_mode(secure);
            let iterations = if full_run() { 600 } else { 2 };
            let before = game.delivered();
            let start = Instant::now();
            for _ in 0..iterations {
                game.run();
            }
            start.elapsed().as_nanos() as f64 / (game.delivered() - before) as f64
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// Secure mode against plain mode: A B A B runs, per-pair ratios and medians; then
/// allocations and wire bytes per message in secure mode.
fn report_secure() {
    let runs: usize = std::env::var("POROUS_SECURE_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(7);
    let runs = if full_run() { runs.max(1) } else { 1 };
    eprintln!();
    eprintln!("secure mode against plain, CPU of both ends per delivered message, {runs} A B pairs of runs:");
    eprintln!(
        "{:<24} {:>10} {:>10} {:>7}   per-pair ratios (secure/plain)",
        "workload", "plain ns", "secure ns", "ratio"
    );
    let workloads: Vec<(String, Option<Bulk>)> = SMALL
        .iter()
        .map(|w| (format!("{}/batch{}", w.name, w.batch), Some(*w)))
        .chain([("game_60hz".to_string(), None)])
        .collect();
    for (name, w) in &workloads {
        let (mut plain, mut secure, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let a = timed_run(*w, false);
            let b = timed_run(*w, true);
            plain.push(a);
            secure.push(b);
            ratios.push(b / a);
        }
        let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        eprintln!(
            "{name:<24} {:>10.1} {:>10.1} {:>7.2}   {}",
            median(&mut plain),
            median(&mut secure),
            median(&mut ratios),
            shown.join(" ")
        );
    }
    eprintln!();
    eprintln!("secure mode, steady state ({} rounds):", rounds());
    eprintln!("{:<28} {:>10} {:>14} {:>12} {:>12}", "workload", "messages", "allocs/msg", "wire B/msg", "plain B/msg");
    for w in SMALL {
        let mut figures = [(0u64, 0u64, 0f64); 2];
        for (i, secure) in [false, true].into_iter().enumerate() {
            let (mut p, msg) = warm_bulk_in(w, secure);
            let (before, sent_a, sent_b) = (p.at_b.messages, p.a.stats().bytes_sent, p.b.stats().bytes_sent);
            let region = Region::new(GLOBAL);
            for _ in 0..rounds() {
                p.bulk_round(&msg, w.batch, TICK);
            }
            let s = region.change();
            let messages = p.at_b.messages - before;
            let wire = p.a.stats().bytes_sent - sent_a + p.b.stats().bytes_sent - sent_b;
            figures[i] = (messages, wire, (s.allocations + s.reallocations) as f64 / messages as f64);
        }
        let [(pm, pw, _), (sm, sw, sa)] = figures;
        eprintln!(
            "{:<28} {sm:>10} {sa:>14.4} {:>12.2} {:>12.2}",
            format!("{}/batch{}", w.name, w.batch),
            sw as f64 / sm as f64,
            pw as f64 / pm as f64
        );
    }
}

/// Runs one workload without criterion, for a profiler.
fn profile(which: &str) {
    let rounds: u64 = std::env::var("POROUS_PROFILE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let start = Instant::now();
    let delivered = match which {
        "large" => {
            let (mut p, msg) = warm_bulk(LARGE);
            for _ in 0..rounds {
                p.bulk_round(&msg, LARGE.batch, TICK);
            }
            p.at_b.messages
        }
        "game" => {
            let mut game = Game::new();
            for _ in 0..rounds / GAME_TICKS {
                game.run();
            }
            game.delivered()
        }
        "secure1" | "plain1" => {
            let w = SMALL[0];
            let (mut p, msg) = warm_bulk_in(w, which == "secure1");
            for _ in 0..rounds {
                p.bulk_round(&msg, w.batch, TICK);
            }
            p.at_b.messages
        }
        _ => {
            let w = SMALL[2];
            let (mut p, msg) = warm_bulk(w);
            for _ in 0..rounds {
                p.bulk_round(&msg, w.batch, TICK);
            }
            p.at_b.messages
        }
    };
    let t = start.elapsed();
    eprintln!(
        "profile {which}: {delivered} messages in {t:?} ({:.1} ns/message)",
        t.as_nanos() as f64 / delivered as f64
    );
}

fn main() {
    if let Ok(which) = std::env::var("POROUS_PROFILE") {
        profile(&which);
        return;
    }
    if std::env::var_os("POROUS_SECURE_ONLY").is_some() {
        report_secure();
        return;
    }
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    for w in SMALL {
        bench_bulk(&mut c, w);
    }
    bench_bulk(&mut c, LARGE);
    bench_game(&mut c);
    report_allocations();
    report_secure();
    c.final_summary();
}
