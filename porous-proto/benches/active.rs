//! Server scale (issue 18): one server `Host` and N active clients in memory, a 60 Hz game.
//!
//! Each tick every client sends a 20-byte reliable input; the server sends each client a
//! 100-byte unreliable state and, every 6th tick, a 40-byte reliable event. The clients are
//! emulated by one client `Host` that connects to a distinct alias of the server per
//! client (the simulator's links rewrite addresses on the way, as in `idle.rs`:
//! `support/crowd.rs`), so the server holds a full, independent peer per client. Datagrams
//! cross in the tick they are sent: both sides read what arrived, send, step and transmit,
//! in that order, as an engine loop does.
//!
//! Only the server's calls are timed (reading the tick's datagrams, the sends, `step`,
//! draining transmits and events). For each N the bench warms up for 2 s of game time,
//! then measures three windows of 3 s and prints, as medians of the windows (ranges in
//! brackets): server ns per peer per tick (the median tick over N), the p50 and p99 tick,
//! datagrams and bytes per peer per tick each way, heap per peer (live bytes of the server
//! with N active peers minus those of an empty one, over N) and allocations per peer per
//! tick during the timed calls.
//!
//! `cargo bench -p porous-proto --bench active` (N = 100, 1,000, 10,000 and 20,000;
//! `-- --sizes 100,1000` for others; `-- --delay D` holds every datagram D more ticks each
//! way once the clients are connected, a round trip of about 2 D + 1 ticks, so that
//! several frames are in flight as on a real path); see `docs/performance.md`. Under
//! `cargo test --benches` it runs once with 20 and 40 peers.

use std::alloc::System;
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_proto::{Event, Host, HostConfig, PeerId, SendMode};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const TICK: Duration = Duration::from_micros(16_667);
const WARM_UP_TICKS: usize = 120;
const WINDOW_TICKS: usize = 180;
const WINDOWS: usize = 3;

/// The value after `--name` on the command line.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

/// `--ticks K`: one window of K ticks after `--warm-up W` (default 60), for a profiler;
/// otherwise the defaults above.
fn schedule() -> (usize, usize, usize) {
    match arg("--ticks").and_then(|t| t.parse().ok()) {
        Some(ticks) => (arg("--warm-up").and_then(|w| w.parse().ok()).unwrap_or(60), ticks, 1),
        None => (WARM_UP_TICKS, WINDOW_TICKS, WINDOWS),
    }
}
/// The phases of a server tick that are timed apart: reading the datagrams, the sends,
/// `step`, draining transmits and events.
const PHASES: usize = 4;
const PHASE_NAMES: [&str; PHASES] = ["read", "send", "step", "drain"];

/// Every this many ticks the server also sends a reliable event.
const EVENT_EVERY: u64 = 6;

const INPUT: [u8; 20] = [1; 20];
const STATE: [u8; 100] = [2; 100];
const EVENT: [u8; 40] = [3; 40];

/// Channel 0 carries the reliable inputs and events, channel 1 the unreliable state.
const RELIABLE: usize = 0;
const UNRELIABLE: usize = 1;

fn rng(seed: u64) -> rand_pcg::Pcg32 {
    rand_pcg::Pcg32::new(seed, 0x0a02_bdbf_7bb3_c0a7)
}

fn config() -> HostConfig {
    let mut c = HostConfig::default();
    c.max_peers = 25_000;
    c
}

/// Peer counts: from `--sizes a,b,...`, those of the issue under `cargo bench` (which
/// passes `--bench`), or two small ones for the smoke run of `cargo test --benches`.
fn sizes() -> Vec<usize> {
    if let Some(list) = arg("--sizes") {
        return list.split(',').filter_map(|s| s.trim().parse().ok()).collect();
    }
    if std::env::args().any(|a| a == "--bench") { vec![100, 1_000, 10_000, 20_000] } else { vec![20, 40] }
}

#[path = "support/addresses.rs"]
mod addresses;
#[path = "support/crowd.rs"]
mod crowd;
use addresses::{CLIENT_BASE, alias, index};
use crowd::Crowd;

/// Datagrams and bytes that crossed one way.
#[derive(Clone, Copy, Debug, Default)]
struct Traffic {
    datagrams: u64,
    bytes: u64,
}

/// A server and `n` active clients, emulated by one client host.
struct Game {
    crowd: Crowd,
    ticks: u64,
    /// The server's peer per client and the client host's peer per client, by index.
    server_peers: Vec<Option<PeerId>>,
    client_peers: Vec<PeerId>,
    up: Traffic,
    down: Traffic,
}

impl Game {
    fn new(n: usize) -> Self {
        let server = Host::new(config(), rng(1)).expect("valid config");
        let client = Host::new(config(), rng(2)).expect("valid config");
        let mut g = Self {
            crowd: Crowd::new(server, client),
            ticks: 0,
            server_peers: vec![None; n],
            client_peers: Vec::with_capacity(n),
            up: Traffic::default(),
            down: Traffic::default(),
        };
        // Clients arrive over half a second, as real ones do at random times.
        let per_tick = n.div_ceil(30);
        while g.client_peers.len() < n {
            let from = g.client_peers.len();
            let now = g.crowd.now();
            for i in from..(from + per_tick).min(n) {
                let peer = g.crowd.client.connect(now, alias(i)).expect("connect");
                g.client_peers.push(peer);
            }
            g.idle_tick();
        }
        let mut rounds = 0;
        while g.server_peers.iter().any(Option::is_none) {
            g.idle_tick();
            rounds += 1;
            assert!(rounds < 2_000, "every client connects");
        }
        // The delay applies from here: a connect flood through a long path is another
        // bench's matter (the handshake's), not this one's.
        let delay: u32 = arg("--delay").and_then(|d| d.parse().ok()).unwrap_or(0);
        if delay > 0 {
            g.crowd.set_delay(n, TICK * delay);
        }
        g
    }

    /// A tick without game traffic (while clients connect).
    fn idle_tick(&mut self) {
        self.crowd.advance(TICK);
        self.client_io(false);
        self.crowd.take_inbox();
        self.server_io(false);
        self.carry_down();
    }

    /// The clients' side of a tick: read, send inputs (if playing), step, transmit.
    fn client_io(&mut self, play: bool) {
        let c = &mut self.crowd;
        c.client_read();
        if play {
            for &peer in &self.client_peers {
                c.client.send(peer, RELIABLE, Bytes::from_static(&INPUT), SendMode::Reliable).expect("input");
            }
        }
        c.client.step(c.net.now());
        let up = &mut self.up;
        c.client_send(|t| {
            up.datagrams += 1;
            up.bytes += t.payload.len() as u64;
        });
        while let Some(e) = c.client.poll_event() {
            if let Event::Disconnected { peer, reason, .. } = e {
                panic!("client {peer} disconnected: {reason}");
            }
        }
    }

    /// The server's side of a tick (what is timed): read its inbox, send state (and
    /// events), step, transmit into its outbox, drain events. Returns how long each of those
    /// phases took (read, send, step, drain). Never inlined, so a profiler can count it alone
    /// (`valgrind --tool=callgrind --toggle-collect='active::Game::server_io'`); the network
    /// fills the inbox before it and carries the outbox after it.
    #[inline(never)]
    fn server_io(&mut self, play: bool) -> [Duration; PHASES] {
        let c = &mut self.crowd;
        let start = Instant::now();
        c.server_read();
        let read = Instant::now();

        if play {
            let event = self.ticks.is_multiple_of(EVENT_EVERY);
            for peer in self.server_peers.iter().flatten() {
                let _ = c.server.send(*peer, UNRELIABLE, Bytes::from_static(&STATE), SendMode::Unreliable);
                if event {
                    let _ = c.server.send(*peer, RELIABLE, Bytes::from_static(&EVENT), SendMode::Reliable);
                }
            }
        }
        let sent = Instant::now();
        c.server.step(c.net.now());
        let stepped = Instant::now();
        c.server_transmits();
        while let Some(e) = c.server.poll_event() {
            match e {
                Event::Connected { peer, remote, .. } => {
                    if let Some(slot) = self.server_peers.get_mut(index(remote, CLIENT_BASE)) {
                        *slot = Some(peer);
                    }
                }
                Event::Disconnected { peer, reason, .. } => panic!("server's {peer} disconnected: {reason}"),
                _ => {}
            }
        }
        let drained = Instant::now();
        [read - start, sent - read, stepped - sent, drained - stepped]
    }

    /// What the server sent this tick, onto the links.
    fn carry_down(&mut self) {
        let down = &mut self.down;
        self.crowd.carry_outbox(|t| {
            down.datagrams += 1;
            down.bytes += t.payload.len() as u64;
        });
    }

    /// One game tick; returns how long the server's calls took, in all and by phase, and
    /// the allocations they made.
    fn tick(&mut self) -> (Duration, [Duration; PHASES], u64) {
        self.crowd.advance(TICK);
        self.ticks += 1;
        self.client_io(true);
        self.crowd.take_inbox();
        let region = Region::new(GLOBAL);
        let start = Instant::now();
        let phases = self.server_io(true);
        let took = start.elapsed();
        let allocations = region.change().allocations as u64;
        self.carry_down();
        (took, phases, allocations)
    }
}

/// One window's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    ns_per_peer: f64,
    p50_ms: f64,
    p99_ms: f64,
    up_datagrams: f64,
    down_datagrams: f64,
    up_bytes: f64,
    down_bytes: f64,
    allocs: f64,
    /// Median ns per peer of each phase over the window's ticks.
    phases: [f64; PHASES],
}

fn measure(g: &mut Game, n: usize, ticks: usize) -> Window {
    let (up, down) = (g.up, g.down);
    let mut times = Vec::with_capacity(ticks);
    let mut phase_times: [Vec<Duration>; PHASES] = Default::default();
    let mut allocs = 0;
    for _ in 0..ticks {
        let (t, phases, a) = g.tick();
        times.push(t);
        for (v, p) in phase_times.iter_mut().zip(phases) {
            v.push(p);
        }
        allocs += a;
    }
    times.sort();
    let phases = phase_times.map(|mut v| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e9 / n as f64
    });
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize].as_secs_f64();
    let per = (n * ticks) as f64;
    Window {
        ns_per_peer: at(0.5) * 1e9 / n as f64,
        p50_ms: at(0.5) * 1e3,
        p99_ms: at(0.99) * 1e3,
        up_datagrams: (g.up.datagrams - up.datagrams) as f64 / per,
        down_datagrams: (g.down.datagrams - down.datagrams) as f64 / per,
        up_bytes: (g.up.bytes - up.bytes) as f64 / per,
        down_bytes: (g.down.bytes - down.bytes) as f64 / per,
        allocs: allocs as f64 / per,
        phases,
    }
}

/// Median and range of one figure over the windows.
fn summary(windows: &[Window], f: impl Fn(&Window) -> f64, digits: usize) -> String {
    let mut v: Vec<f64> = windows.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    let (lo, mid, hi) = (v[0], v[v.len() / 2], v[v.len() - 1]);
    if hi - lo < 0.5 * 10f64.powi(-(digits as i32)) {
        format!("{mid:.digits$}")
    } else {
        format!("{mid:.digits$} [{lo:.digits$}-{hi:.digits$}]")
    }
}

/// Live heap bytes (allocated and not freed) since `region` began.
fn live(region: &Region<'_, System>) -> i64 {
    let s = region.change();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

fn main() {
    let (warm_up, ticks, windows) = schedule();
    println!(
        "60 Hz game, one server and N clients in memory; server calls only; medians of {windows} windows of {ticks} ticks [range]"
    );
    println!(
        "| peers | ns/peer/tick | p50 tick ms | p99 tick ms | datagrams/peer/tick up | down | bytes/peer/tick up | down | heap/peer B | allocs/peer/tick |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let empty_region = Region::new(GLOBAL);
    let mut empty = Host::new(config(), rng(1)).expect("valid config");
    empty.step(Instant::now());
    let empty_bytes = live(&empty_region);
    drop(empty);
    let mut by_phase = Vec::new();
    for n in sizes() {
        let region = Region::new(GLOBAL);
        let mut g = Game::new(n);
        for _ in 0..warm_up {
            g.tick();
        }
        let windows: Vec<Window> = (0..windows).map(|_| measure(&mut g, n, ticks)).collect();
        assert_eq!(g.crowd.server.stats().peers, n, "no peer was lost");
        // The server's heap: everything live now minus the client side's share, which is
        // measured by dropping it.
        let Game { crowd: Crowd { server, client, net, inbox, outbox }, client_peers, server_peers, .. } = g;
        drop((client, net, inbox, outbox, client_peers, server_peers));
        let heap = (live(&region) - empty_bytes) as f64 / n as f64;
        drop(server);
        println!(
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {heap:.0} | {} |",
            summary(&windows, |w| w.ns_per_peer, 0),
            summary(&windows, |w| w.p50_ms, 3),
            summary(&windows, |w| w.p99_ms, 3),
            summary(&windows, |w| w.up_datagrams, 2),
            summary(&windows, |w| w.down_datagrams, 2),
            summary(&windows, |w| w.up_bytes, 1),
            summary(&windows, |w| w.down_bytes, 1),
            summary(&windows, |w| w.allocs, 3),
        );
        by_phase.push((n, windows));
    }
    println!();
    println!("Where the time goes: ns per peer per tick by phase, median tick of each phase (medians of the windows)");
    println!("| peers | {} |", PHASE_NAMES.join(" | "));
    println!("|---:|{}", "---:|".repeat(PHASES));
    for (n, windows) in by_phase {
        let cells: Vec<String> = (0..PHASES).map(|i| summary(&windows, |w| w.phases[i], 0)).collect();
        println!("| {n} | {} |", cells.join(" | "));
    }
}
