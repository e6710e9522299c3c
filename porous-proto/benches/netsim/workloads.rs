//! The simulated workloads behind `docs/simulated.md`: a bulk transfer, flows sharing a
//! bottleneck, and a 60 Hz game, each on `porous_proto::sim::Network` with a given seed,
//! so every figure is exact for its seed. Shared by the `netsim` bench (which runs them
//! over many seeds and writes the tables) and the `netsim_table` test (which checks the
//! presets table against the document).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use porous_proto::sim::{LinkConditions, Network, Stalls};
use porous_proto::{CongestionControl, Event, HostConfig, PeerId, PeerStats, SendMode};

pub(crate) const MS: Duration = Duration::from_millis(1);
pub(crate) const SEC: Duration = Duration::from_secs(1);

/// How often a workload samples its time series.
pub(crate) const SAMPLE: Duration = Duration::from_millis(100);

/// The time series a workload records for the plots (`plots.rs`), when asked: named
/// lines of (seconds since the workload's start, value).
#[derive(Clone, Debug, Default)]
pub(crate) struct Series {
    pub(crate) lines: Vec<(String, Vec<(f64, f64)>)>,
}

impl Series {
    pub(crate) fn push(&mut self, name: &str, t: f64, v: f64) {
        match self.lines.iter_mut().find(|(n, _)| n == name) {
            Some((_, points)) => points.push((t, v)),
            None => self.lines.push((name.to_string(), vec![(t, v)])),
        }
    }

    /// The line `name` (empty if never pushed).
    pub(crate) fn line(&self, name: &str) -> Vec<(f64, f64)> {
        self.lines.iter().find(|(n, _)| n == name).map(|(_, p)| p.clone()).unwrap_or_default()
    }

    /// A sender's view of its connection, under `suffix`: congestion window and bytes in
    /// flight (kB), pacing rate (MB/s), the latest and the smoothed round trip (ms).
    fn sender(&mut self, suffix: &str, t: f64, s: &PeerStats) {
        self.push(&format!("cwnd{suffix}"), t, s.cwnd as f64 / 1000.0);
        self.push(&format!("flight{suffix}"), t, s.flight as f64 / 1000.0);
        self.push(&format!("pacing{suffix}"), t, s.congestion.pacing_rate as f64 / 1e6);
        self.push(&format!("rtt{suffix}"), t, s.latest_rtt.as_secs_f64() * 1000.0);
        self.push(&format!("srtt{suffix}"), t, s.rtt.as_secs_f64() * 1000.0);
    }
}

/// When the next sample is due, and the bytes delivered since the last one.
struct Sampler {
    start: Duration,
    next: Duration,
    delivered: Vec<u64>,
}

impl Sampler {
    fn new(start: Duration, flows: usize) -> Self {
        Self { start, next: start + SAMPLE, delivered: vec![0; flows] }
    }

    /// If a sample is due at `now`: its time (seconds since the start), after pushing
    /// each flow's delivery rate over the interval (MB/s) as `delivery{suffix}`.
    fn due(&mut self, now: Duration, series: &mut Series, suffixes: &[&str]) -> Option<f64> {
        if now < self.next {
            return None;
        }
        let t = (now - self.start).as_secs_f64();
        let secs = (now - (self.next - SAMPLE)).as_secs_f64().max(1e-9);
        for (bytes, suffix) in self.delivered.iter_mut().zip(suffixes) {
            series.push(&format!("delivery{suffix}"), t, std::mem::take(bytes) as f64 / secs / 1e6);
        }
        self.next = now + SAMPLE;
        Some(t)
    }
}

pub(crate) fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 9000))
}

/// A host configuration for the workloads: defaults, the timeout raised to 60 s (the
/// harshest presets would otherwise time out), and the controller and repair given.
pub(crate) fn config(cc: CongestionControl, repair: bool) -> HostConfig {
    let mut cfg = HostConfig::default();
    cfg.peer.timeout = 60 * SEC;
    cfg.peer.congestion = cc;
    for c in &mut cfg.peer.channels {
        c.repair = repair;
    }
    cfg
}

/// Two connected hosts `a` and `b` on a network of `seed`, the link `ab` from a to b and
/// `ba` back; returns the network and a's and b's ids for each other.
pub(crate) fn pair(seed: u64, ab: LinkConditions, ba: LinkConditions, cfg: &HostConfig) -> (Network, PeerId, PeerId) {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(seed);
    net.add_host(a, cfg.clone()).expect("valid config");
    net.add_host(b, cfg.clone()).expect("valid config");
    net.set_link(a, b, ab);
    net.set_link(b, a, ba);
    let (pa, pb) = net.establish((a, b), None, 60 * SEC).expect("a and b connect");
    // A second for the handshake's round-trip samples to settle.
    net.run_for(SEC, |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
    (net, pa, pb)
}

/// A 25 ms one-way link losing `loss` at random, with a bottleneck of `rate` bytes per
/// second and a drop-tail queue of `queue` bytes (no bottleneck if `rate` is 0).
pub(crate) fn link(loss: f64, rate: u64, queue: usize) -> LinkConditions {
    let mut c = LinkConditions::perfect(25 * MS);
    c.loss = loss;
    if rate > 0 {
        c.bandwidth = Some(rate);
        c.queue = queue;
    }
    c
}

/// What a bulk transfer measured.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bulk {
    /// Payload bytes per second, from the first send to the last delivery.
    pub(crate) goodput: f64,
    /// Frames sent again, as a share of frames sent.
    pub(crate) resent: f64,
}

/// `total` bytes in 1,000-byte reliable packets from a to b, the send queue kept full.
pub(crate) fn bulk(seed: u64, ab: LinkConditions, ba: LinkConditions, cfg: &HostConfig, total: usize) -> Bulk {
    let (mut net, pa, _) = pair(seed, ab, ba, cfg);
    let (a, b) = (addr(1), addr(2));
    let packets = total.div_ceil(1000);
    let (mut sent, mut got) = (0, 0);
    let start = net.elapsed();
    let done = net.run_until(3600 * SEC, |net| {
        while sent < packets && net.host_mut(a).send(pa, 0, Bytes::from(vec![7; 1000]), SendMode::Reliable).is_ok() {
            sent += 1;
        }
        while let Some(e) = net.poll_event(b) {
            got += usize::from(matches!(e, Event::Received { .. }));
        }
        got == packets
    });
    assert!(done, "seed {seed}: the transfer ended ({got} of {packets})");
    let secs = (net.elapsed() - start).as_secs_f64();
    let s = net.host(a).peer_stats(pa).expect("connected").transfer;
    Bulk { goodput: (packets * 1000) as f64 / secs, resent: s.frames_resent as f64 / s.frames_sent.max(1) as f64 }
}

/// Round trips seen by a flow kept busy through a bottleneck.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Queueing {
    pub(crate) min_rtt: Duration,
    pub(crate) p50_rtt: Duration,
    pub(crate) p95_rtt: Duration,
    pub(crate) goodput: f64,
}

/// a sends to b for `run` through the link given, its queue never empty; the RTT the
/// sender measures is sampled every 10 ms: the minimum over the whole run (the queue is
/// empty at the start), the quantiles after the first `warm_up`.
///
/// With `series`, also records the sender's connection, its delivery rate and the
/// bottleneck's queue (kB) every [`SAMPLE`].
pub(crate) fn queueing(
    seed: u64,
    c: LinkConditions,
    cfg: &HostConfig,
    warm_up: Duration,
    run: Duration,
    mut series: Option<&mut Series>,
) -> Queueing {
    let (mut net, pa, _) = pair(seed, c, c, cfg);
    let (a, b) = (addr(1), addr(2));
    let mut rtts = Vec::new();
    let mut min_rtt = Duration::MAX;
    let mut got = 0u64;
    let start = net.elapsed();
    let mut next_sample = start;
    let mut sampler = Sampler::new(start, 1);
    net.run_for(run, |net| {
        while net.host_mut(a).send(pa, 0, Bytes::from(vec![7; 1000]), SendMode::Reliable).is_ok() {}
        let now = net.elapsed();
        let steady = now >= start + warm_up;
        while let Some(e) = net.poll_event(b) {
            if matches!(e, Event::Received { .. }) {
                got += if steady { 1000 } else { 0 };
                sampler.delivered[0] += 1000;
            }
        }
        if let Some(series) = series.as_deref_mut()
            && let Some(t) = sampler.due(now, series, &[""])
        {
            if let Some(s) = net.host(a).peer_stats(pa) {
                series.sender("", t, &s);
            }
            series.push("queue", t, net.queued_bytes(a, b) as f64 / 1000.0);
        }
        if now >= next_sample {
            if let Some(s) = net.host(a).peer_stats(pa) {
                min_rtt = min_rtt.min(s.latest_rtt);
                if steady {
                    rtts.push(s.latest_rtt);
                }
            }
            next_sample = now + 10 * MS;
        }
    });
    rtts.sort();
    let at = |q: f64| rtts.get(((rtts.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or_default();
    let secs = (run - warm_up).as_secs_f64().max(1e-9);
    Queueing { min_rtt, p50_rtt: at(0.5), p95_rtt: at(0.95), goodput: got as f64 / secs }
}

/// Two flows sharing one bottleneck: what each delivered.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Share {
    /// Bytes per second each flow delivered over the measured interval.
    pub(crate) first: f64,
    pub(crate) second: f64,
}

/// Flows 1 -> 3 (controller `cc1`) and 2 -> 3 (`cc2`) through one shared bottleneck of
/// `rate` bytes per second with a drop-tail queue of `queue` bytes, 25 ms one way: both
/// kept busy for `run`, delivery counted after `warm_up`. With `series`, also records
/// each flow's delivery rate and connection (suffixes " 1" and " 2") and the shared
/// queue (kB) every [`SAMPLE`].
pub(crate) fn share(
    seed: u64,
    (cc1, cc2): (CongestionControl, CongestionControl),
    (rate, queue): (u64, usize),
    warm_up: Duration,
    run: Duration,
    mut series: Option<&mut Series>,
) -> Share {
    let (s1, s2, r) = (addr(1), addr(2), addr(3));
    let mut net = Network::new(seed);
    net.add_host(s1, config(cc1, true)).expect("valid config");
    net.add_host(s2, config(cc2, true)).expect("valid config");
    net.add_host(r, config(CongestionControl::default(), true)).expect("valid config");
    let bottleneck = link(0.0, rate, queue);
    let plain = link(0.0, 0, 0);
    net.set_link(r, s1, plain);
    net.set_link(r, s2, plain);
    net.set_link(s1, r, bottleneck);
    net.set_link(s2, r, bottleneck);
    net.share_bottleneck(&[(s1, r), (s2, r)]);
    let now = net.now();
    let p1 = net.host_mut(s1).connect(now, r).expect("connect");
    let p2 = net.host_mut(s2).connect(now, r).expect("connect");
    let mut from = [None; 2];
    let mut up = 0;
    net.run_until(60 * SEC, |net| {
        for s in [s1, s2] {
            while let Some(e) = net.poll_event(s) {
                up += usize::from(matches!(e, Event::Connected { .. }));
            }
        }
        while let Some(e) = net.poll_event(r) {
            if let Event::Connected { peer, remote, .. } = e {
                from[usize::from(remote == s2)] = Some(peer);
            }
        }
        up == 2 && from.iter().all(Option::is_some)
    });
    let mut got = [0u64; 2];
    let start = net.elapsed();
    let mut sampler = Sampler::new(start, 2);
    net.run_for(run, |net| {
        for (s, p) in [(s1, p1), (s2, p2)] {
            while net.host_mut(s).send(p, 0, Bytes::from(vec![7; 1000]), SendMode::Reliable).is_ok() {}
        }
        let counting = net.elapsed() >= start + warm_up;
        while let Some(e) = net.poll_event(r) {
            if let Event::Received { peer, .. } = e {
                let flow = usize::from(from[1] == Some(peer));
                got[flow] += if counting { 1000 } else { 0 };
                sampler.delivered[flow] += 1000;
            }
        }
        if let Some(series) = series.as_deref_mut()
            && let Some(t) = sampler.due(net.elapsed(), series, &[" 1", " 2"])
        {
            for (s, p, suffix) in [(s1, p1, " 1"), (s2, p2, " 2")] {
                if let Some(stats) = net.host(s).peer_stats(p) {
                    series.sender(suffix, t, &stats);
                }
            }
            series.push("queue", t, net.queued_bytes(s1, r) as f64 / 1000.0);
        }
    });
    let secs = (run - warm_up).as_secs_f64();
    Share { first: got[0] as f64 / secs, second: got[1] as f64 / secs }
}

/// Latency of one kind of packet in the game: from `send` to `Received`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Latency {
    /// For each packet that arrived: when it was sent (s since the workload's start) and
    /// its latency (ms).
    samples: Vec<(f64, f64)>,
    /// Packets sent.
    pub(crate) sent: usize,
}

impl Latency {
    /// Each packet that arrived: when it was sent (s) and its latency (ms), in the order
    /// they arrived.
    pub(crate) fn points(&self) -> &[(f64, f64)] {
        &self.samples
    }

    /// The `q` quantile in milliseconds (0 without samples).
    pub(crate) fn quantile(&self, q: f64) -> f64 {
        let mut v: Vec<f64> = self.samples.iter().map(|&(_, l)| l).collect();
        v.sort_by(f64::total_cmp);
        v.get(((v.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or(0.0)
    }

    /// The share of packets sent that arrived.
    pub(crate) fn delivered(&self) -> f64 {
        self.samples.len() as f64 / self.sent.max(1) as f64
    }
}

/// A packet of `len` bytes that says what it is: its kind in the first byte, its index
/// among the packets of that kind in the next four.
fn tagged(kind: u8, index: u32, len: usize) -> Bytes {
    let mut v = vec![kind; len];
    v[1..5].copy_from_slice(&index.to_le_bytes());
    Bytes::from(v)
}

/// Drains the events of `hosts`, adding each [`tagged`] packet received to its kind's
/// latencies: when it was sent (s since `start`) and how long ago (ms), from `sent_at`
/// of its kind and index.
fn read_latencies<const N: usize>(
    net: &mut Network,
    hosts: &[SocketAddr],
    samples: &mut [Vec<(f64, f64)>; N],
    (sent_at, start): (&[Vec<Duration>; N], Duration),
) {
    let now = net.elapsed();
    for &host in hosts {
        while let Some(e) = net.poll_event(host) {
            if let Event::Received { data, .. } = e
                && let (Some(&kind), Some(index)) = (data.first(), data.get(1..5))
            {
                let i = u32::from_le_bytes([index[0], index[1], index[2], index[3]]) as usize;
                if let (Some(at), Some(v)) =
                    (sent_at.get(usize::from(kind)).and_then(|v| v.get(i)), samples.get_mut(usize::from(kind)))
                {
                    v.push(((*at - start).as_secs_f64(), (now - *at).as_secs_f64() * 1000.0));
                }
            }
        }
    }
}

/// What the game measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Game {
    /// Client to server, reliable, every tick (32 bytes).
    pub(crate) input: Latency,
    /// Server to client, unreliable, every tick (200 bytes).
    pub(crate) state: Latency,
    /// Server to client, reliable, every other tick (50 bytes).
    pub(crate) event: Latency,
    /// Client to server, passive, every 6th tick (40 bytes).
    pub(crate) passive: Latency,
    /// Datagrams per tick each way.
    pub(crate) up_per_tick: f64,
    pub(crate) down_per_tick: f64,
    /// Wire bytes (both ways, all datagrams, during the ticks) per packet sent.
    pub(crate) wire_per_packet: f64,
    /// The client's smoothed RTT minus the path's (50 ms), averaged over the run, in ms.
    pub(crate) srtt_error: f64,
}

const KINDS: usize = 4;

/// A 60 Hz game for `ticks` ticks over the links given: a client (a) sends a reliable
/// input every tick and a passive packet every 6th, the server (b) an unreliable state
/// every tick and a reliable event every other; both sides send each tick, as a game
/// loop does. Latencies per kind, from `send` to `Received`.
pub(crate) fn game(seed: u64, ab: LinkConditions, ba: LinkConditions, cfg: &HostConfig, ticks: u32) -> Game {
    let (mut net, pa, pb) = pair(seed, ab, ba, cfg);
    let (a, b) = (addr(1), addr(2));
    let tick = Duration::from_micros(16_667);
    let mut sent_at: [Vec<Duration>; KINDS] = Default::default();
    let mut g = Game::default();
    let wire_before = net.link_stats(a, b).sent_bytes + net.link_stats(b, a).sent_bytes;
    let dgrams_before = (net.link_stats(a, b).sent, net.link_stats(b, a).sent);
    let mut srtt_error = 0.0;
    let mut samples = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    let start = net.elapsed();
    let read = |net: &mut Network, samples: &mut [Vec<(f64, f64)>; KINDS], sent_at: &[Vec<Duration>; KINDS]| {
        read_latencies(net, &[a, b], samples, (sent_at, start));
    };
    for i in 0..ticks {
        let now = net.elapsed();
        let mut send = |net: &mut Network, kind: u8, (from, peer): (SocketAddr, PeerId), channel, mode, len| {
            let index = sent_at[usize::from(kind)].len() as u32;
            if net.host_mut(from).send(peer, channel, tagged(kind, index, len), mode).is_ok() {
                sent_at[usize::from(kind)].push(now);
            }
        };
        send(&mut net, 0, (a, pa), 0, SendMode::Reliable, 32);
        if i % 6 == 0 {
            send(&mut net, 3, (a, pa), 3, SendMode::Passive, 40);
        }
        send(&mut net, 1, (b, pb), 1, SendMode::Unreliable, 200);
        if i % 2 == 0 {
            send(&mut net, 2, (b, pb), 2, SendMode::Reliable, 50);
        }
        net.run_for(tick, |net| read(net, &mut samples, &sent_at));
        if let Some(s) = net.host(a).peer_stats(pa) {
            srtt_error += s.rtt.as_secs_f64() * 1000.0 - 50.0;
        }
    }
    let (up, down) = (net.link_stats(a, b).sent - dgrams_before.0, net.link_stats(b, a).sent - dgrams_before.1);
    let wire = net.link_stats(a, b).sent_bytes + net.link_stats(b, a).sent_bytes - wire_before;
    // Let everything reliable arrive.
    net.run_for(30 * SEC, |net| read(net, &mut samples, &sent_at));
    let sent: usize = sent_at.iter().map(Vec::len).sum();
    for (k, (lat, s)) in [&mut g.input, &mut g.state, &mut g.event, &mut g.passive].into_iter().zip(samples).enumerate()
    {
        lat.samples = s;
        lat.sent = sent_at[k].len();
    }
    g.up_per_tick = up as f64 / f64::from(ticks);
    g.down_per_tick = down as f64 / f64::from(ticks);
    g.wire_per_packet = wire as f64 / sent.max(1) as f64;
    g.srtt_error = srtt_error / f64::from(ticks);
    g
}

/// What a tick's state measured beside bulk data.
#[derive(Clone, Debug, Default)]
pub(crate) struct Beside {
    /// Unreliable, every tick (200 bytes).
    pub(crate) state: Latency,
    /// Reliable, three times a second (8,000 bytes: seven fragments).
    pub(crate) bulk: Latency,
}

/// Issue 17: a tick's unreliable state beside a fragmented reliable packet on another
/// channel of the same priority: from a to b, a 200-byte state every tick (channel 1) and
/// an 8,000-byte reliable packet three times a second (channel 3), as the README demo
/// sends. The pacer spreads the packet's fragments at the rate the flow has shown, so a
/// state queued behind them waits unless it may pass.
pub(crate) fn beside_bulk(
    seed: u64,
    c: LinkConditions,
    cfg: &HostConfig,
    ticks: u32,
    mut series: Option<&mut Series>,
) -> Beside {
    let (mut net, pa, _) = pair(seed, c, c, cfg);
    let b = addr(2);
    let tick = Duration::from_micros(16_667);
    let mut sent_at: [Vec<Duration>; 2] = Default::default();
    let mut samples: [Vec<(f64, f64)>; 2] = Default::default();
    let start = net.elapsed();
    let read = |net: &mut Network, samples: &mut [Vec<(f64, f64)>; 2], sent_at: &[Vec<Duration>; 2]| {
        read_latencies(net, &[b], samples, (sent_at, start));
    };
    let mut sampler = Sampler::new(start, 0);
    for i in 0..ticks {
        let now = net.elapsed();
        let mut send = |net: &mut Network, kind: u8, channel, mode, len| {
            let index = sent_at[usize::from(kind)].len() as u32;
            if net.host_mut(addr(1)).send(pa, channel, tagged(kind, index, len), mode).is_ok() {
                sent_at[usize::from(kind)].push(now);
            }
        };
        send(&mut net, 0, 1, SendMode::Unreliable, 200);
        if i % 20 == 0 {
            send(&mut net, 1, 3, SendMode::Reliable, 8_000);
        }
        net.run_for(tick, |net| read(net, &mut samples, &sent_at));
        if let Some(series) = series.as_deref_mut()
            && let Some(t) = sampler.due(net.elapsed(), series, &[])
            && let Some(s) = net.host(addr(1)).peer_stats(pa)
        {
            series.sender("", t, &s);
        }
    }
    net.run_for(30 * SEC, |net| read(net, &mut samples, &sent_at));
    let [state, bulk] = samples;
    Beside {
        state: Latency { samples: state, sent: sent_at[0].len() },
        bulk: Latency { samples: bulk, sent: sent_at[1].len() },
    }
}

/// The presets table: for each simulator preset (and a plain 25 ms link with 5% and 30%
/// random loss), one seed (2026): a one-way bulk transfer and a one-way 60 Hz game.
pub(crate) mod presets {
    use super::*;

    pub(crate) fn grid() -> Vec<(&'static str, LinkConditions)> {
        let lossy = |loss: f64| {
            let mut c = LinkConditions::perfect(25 * MS);
            c.loss = loss;
            c
        };
        vec![
            ("perfect, 25 ms", LinkConditions::perfect(25 * MS)),
            ("lan", LinkConditions::lan()),
            ("wifi", LinkConditions::wifi()),
            ("mobile", LinkConditions::mobile()),
            ("satellite", LinkConditions::satellite()),
            ("hostile", LinkConditions::hostile()),
            ("25 ms, 5% loss", lossy(0.05)),
            ("25 ms, 30% loss", lossy(0.30)),
        ]
    }

    /// The seed of the one-seed table.
    pub(crate) const SEED: u64 = 2026;

    fn setup(c: LinkConditions, seed: u64) -> (Network, SocketAddr, SocketAddr, PeerId) {
        let (a, b) = (addr(1), addr(2));
        let mut net = Network::new(seed);
        let mut cfg = HostConfig::default();
        cfg.peer.timeout = 60 * SEC;
        net.add_host(a, cfg.clone()).expect("valid config");
        net.add_host(b, cfg).expect("valid config");
        net.set_link_both(a, b, c);
        let now = net.now();
        let pa = net.host_mut(a).connect(now, b).expect("connect");
        let mut up = false;
        net.run_until(60 * SEC, |net| {
            while let Some(e) = net.poll_event(a) {
                up |= matches!(e, Event::Connected { .. });
            }
            while net.poll_event(b).is_some() {}
            up
        });
        assert!(up);
        net.run_for(SEC, |net| while net.poll_event(b).is_some() {});
        (net, a, b, pa)
    }

    /// 1 MB of 1000-byte reliable packets, the queue kept full: goodput in kB/s and the
    /// share of frames resent.
    pub(crate) fn bulk(c: LinkConditions, seed: u64) -> (f64, f64) {
        let (mut net, a, b, pa) = setup(c, seed);
        let total = 1000u32;
        let (mut sent, mut got) = (0u32, 0u32);
        let start = net.elapsed();
        net.run_until(600 * SEC, |net| {
            while sent < total && net.host_mut(a).send(pa, 0, Bytes::from(vec![7; 1000]), SendMode::Reliable).is_ok() {
                sent += 1;
            }
            while let Some(e) = net.poll_event(b) {
                got += u32::from(matches!(e, Event::Received { .. }));
            }
            got == total
        });
        assert_eq!(got, total);
        let secs = (net.elapsed() - start).as_secs_f64();
        let s = net.host(a).peer_stats(pa).expect("connected").transfer;
        (f64::from(total) / secs, s.frames_resent as f64 / s.frames_sent as f64 * 100.0)
    }

    /// 60 Hz for 20 s, each tick a 32-byte reliable input and a 200-byte unreliable state
    /// from a to b: input latency p50 and p99 in ms, the share of states delivered, and
    /// wire bytes both ways per packet sent.
    pub(crate) fn game(c: LinkConditions, seed: u64) -> (f64, f64, f64, f64) {
        let (mut net, a, b, pa) = setup(c, seed);
        let tick = Duration::from_micros(16_667);
        let ticks = 1200u32;
        let sent_at = std::cell::RefCell::new(Vec::<Duration>::new());
        let mut latencies = Vec::new();
        let mut unreliable = 0u32;
        let wire_before = net.link_stats(a, b).sent_bytes + net.link_stats(b, a).sent_bytes;
        let mut stamp = |net: &mut Network| {
            let t = net.elapsed();
            while let Some(e) = net.poll_event(b) {
                if let Event::Received { channel, data, .. } = e {
                    if channel == 0 {
                        let i = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
                        latencies.push((t - sent_at.borrow()[i]).as_secs_f64() * 1000.0);
                    } else {
                        unreliable += 1;
                    }
                }
            }
        };
        for i in 0..ticks {
            let mut input = i.to_le_bytes().to_vec();
            input.resize(32, 0);
            sent_at.borrow_mut().push(net.elapsed());
            net.host_mut(a).send(pa, 0, Bytes::from(input), SendMode::Reliable).expect("send");
            net.host_mut(a).send(pa, 1, Bytes::from(vec![1; 200]), SendMode::Unreliable).expect("send");
            net.run_for(tick, &mut stamp);
        }
        net.run_for(30 * SEC, &mut stamp);
        assert_eq!(latencies.len(), ticks as usize, "every input arrives ({c:?})");
        latencies.sort_by(f64::total_cmp);
        let p = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        let wire = net.link_stats(a, b).sent_bytes + net.link_stats(b, a).sent_bytes - wire_before;
        (p(0.5), p(0.99), f64::from(unreliable) / f64::from(ticks) * 100.0, wire as f64 / f64::from(2 * ticks))
    }

    /// The table, as `docs/simulated.md` holds it between its `netsim` markers.
    pub(crate) fn table() -> String {
        let mut t = String::from(
            "| conditions | bulk goodput | bulk frames resent | input latency p50 | p99 | state delivered | wire bytes per packet |\n\
             |---|---:|---:|---:|---:|---:|---:|\n",
        );
        for (name, c) in grid() {
            let (goodput, resent) = bulk(c, SEED);
            let (p50, p99, delivered, wire) = game(c, SEED);
            t += &format!(
                "| {name} | {goodput:.0} kB/s | {resent:.1}% | {p50:.1} ms | {p99:.1} ms | {delivered:.1}% | {wire:.1} B |\n"
            );
        }
        t
    }
}

/// `doc` with the section between `<!-- generated:{name}:begin -->` and its end marker
/// replaced by `content`.
pub(crate) fn splice(doc: &str, name: &str, content: &str) -> String {
    let (begin, end) = (format!("<!-- generated:{name}:begin -->\n"), format!("<!-- generated:{name}:end -->"));
    let (Some(b), Some(e)) = (doc.find(&begin), doc.find(&end)) else {
        panic!("docs/simulated.md lacks the {name} markers");
    };
    format!("{}{}{}", &doc[..b + begin.len()], content, &doc[e..])
}

/// A side's transfer counters at the end of a run.
pub(crate) fn transfer(net: &Network, host: SocketAddr, peer: PeerId) -> porous_proto::TransferStats {
    net.host(host).peer_stats(peer).map(|s| s.transfer).unwrap_or_default()
}

/// What a stream over a lossless path measured while a loop stalled: each side's
/// transfer counters (on a lossless path every loss and every resend is spurious).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stalled {
    pub(crate) client: porous_proto::TransferStats,
    pub(crate) server: porous_proto::TransferStats,
}

/// Issue 32: a 60 Hz reliable stream for `secs` seconds over a lossless 25 ms path, from
/// the client (a) to the server (b), and back as well when `both_ways`; the loop of the
/// host `stalling` (if any) late as its [`Stalls`] say ([`Stalls::busy`]: 5 to 20 ms
/// about every 200 ms). An application shares its host's loop: while the loop is stalled
/// it sends nothing, and it catches up on the ticks it missed when the loop resumes.
pub(crate) fn stalled_stream(seed: u64, stalling: Option<(SocketAddr, Stalls)>, both_ways: bool, secs: u32) -> Stalled {
    let cfg = config(CongestionControl::default(), true);
    let c = link(0.0, 0, 0);
    let (mut net, pa, pb) = pair(seed, c, c, &cfg);
    let (a, b) = (addr(1), addr(2));
    if let Some((host, stalls)) = stalling {
        net.set_stalls(host, Some(stalls));
    }
    let tick = Duration::from_micros(16_667);
    let mut due = [0u32; 2];
    let senders: &[(SocketAddr, PeerId, usize)] = if both_ways { &[(a, pa, 32), (b, pb, 50)] } else { &[(a, pa, 32)] };
    for _ in 0..secs * 60 {
        for (i, &(host, peer, len)) in senders.iter().enumerate() {
            due[i] += 1;
            while due[i] > 0 && !net.is_stalled(host) {
                net.host_mut(host).send(peer, 0, Bytes::from(vec![7; len]), SendMode::Reliable).expect("send");
                due[i] -= 1;
            }
        }
        net.run_for(tick, |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
    }
    net.set_stalls(a, None);
    net.set_stalls(b, None);
    net.run_for(5 * SEC, |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
    Stalled { client: transfer(&net, a, pa), server: transfer(&net, b, pb) }
}

/// What a one-way stream cost on the wire, each way.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cost {
    /// Datagrams and bytes from the sender to the receiver.
    pub(crate) datagrams: u64,
    pub(crate) bytes: u64,
    /// Datagrams back (acknowledgements, pings).
    pub(crate) back: u64,
}

/// Issue 32: `count` 50-byte reliable messages from a to b, one every `every`, over a
/// lossless path `latency` one way (and `loss` random loss each way): the datagrams and
/// bytes each way from the first send until everything is acknowledged.
pub(crate) fn stream_cost(seed: u64, latency: Duration, loss: f64, every: Duration, count: u32, repair: bool) -> Cost {
    let cfg = config(CongestionControl::default(), repair);
    let mut c = LinkConditions::perfect(latency);
    c.loss = loss;
    let (mut net, pa, _) = pair(seed, c, c, &cfg);
    let (a, b) = (addr(1), addr(2));
    let (up, down) = (net.link_stats(a, b), net.link_stats(b, a));
    for _ in 0..count {
        net.host_mut(a).send(pa, 0, Bytes::from(vec![7; 50]), SendMode::Reliable).expect("send");
        net.run_for(every, |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
    }
    net.run_until(60 * SEC, |net| {
        while net.poll_event(a).is_some() || net.poll_event(b).is_some() {}
        net.host(a).peer_stats(pa).is_some_and(|s| s.frames_in_flight == 0)
    });
    let (up2, down2) = (net.link_stats(a, b), net.link_stats(b, a));
    Cost { datagrams: up2.sent - up.sent, bytes: up2.sent_bytes - up.sent_bytes, back: down2.sent - down.sent }
}

/// What each side sent into a blackout.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Blackout {
    /// Datagrams and bytes each side offered to the dead link, from the blackout until
    /// it gave up.
    pub(crate) client: (u64, u64),
    pub(crate) server: (u64, u64),
    /// How long after the blackout began each side gave up (timed out).
    pub(crate) client_gave_up: Duration,
    pub(crate) server_gave_up: Duration,
    /// After an outage (a blackout that ends), how long after the path came back the
    /// server had every input the client sent before that.
    pub(crate) recovered: Option<Duration>,
}

/// Issue 32, item 3: the game of [`game`] (60 Hz both ways: reliable inputs and passive
/// packets up, unreliable states and reliable events down) over a lossless 25 ms path
/// with the default 10 s timeout; after 2 s the path goes dead both ways, for good or
/// for `outage`, and the application keeps sending until its side times out (or 5 s
/// after the path came back). Counts what each side sent into the silence (until it
/// gave up, or until the path came back).
pub(crate) fn blackout(seed: u64, outage: Option<Duration>) -> Blackout {
    let mut cfg = config(CongestionControl::default(), true);
    cfg.peer.timeout = HostConfig::default().peer.timeout;
    let c = link(0.0, 0, 0);
    let (mut net, pa, pb) = pair(seed, c, c, &cfg);
    let (a, b) = (addr(1), addr(2));
    let tick = Duration::from_micros(16_667);
    let mut out = Blackout::default();
    let mut dead: Option<(Duration, porous_proto::sim::LinkStats, porous_proto::sim::LinkStats)> = None;
    let (mut a_up, mut b_up) = (true, true);
    let back_at = outage.map(|o| 120 + (o.as_micros() / tick.as_micros()) as u32);
    let (mut inputs, mut got, mut wanted) = (0u32, 0u32, None);
    let mut counts = None;
    let mut i = 0u32;
    while (a_up || b_up) && back_at.is_none_or(|t| i < t + 300) {
        if i == 120 {
            let mut down = c;
            down.down = true;
            net.set_link_both(a, b, down);
            dead = Some((net.elapsed(), net.link_stats(a, b), net.link_stats(b, a)));
        }
        if Some(i) == back_at {
            net.set_link_both(a, b, c);
            counts = Some((net.link_stats(a, b), net.link_stats(b, a)));
            wanted = Some((inputs, net.elapsed()));
        }
        if a_up {
            inputs += u32::from(net.host_mut(a).send(pa, 0, Bytes::from(vec![7; 32]), SendMode::Reliable).is_ok());
            if i.is_multiple_of(6) {
                let _ = net.host_mut(a).send(pa, 3, Bytes::from(vec![7; 40]), SendMode::Passive);
            }
        }
        if b_up {
            let _ = net.host_mut(b).send(pb, 1, Bytes::from(vec![7; 200]), SendMode::Unreliable);
            if i.is_multiple_of(2) {
                let _ = net.host_mut(b).send(pb, 2, Bytes::from(vec![7; 50]), SendMode::Reliable);
            }
        }
        net.run_for(tick, |net| {
            let since = dead.map_or(Duration::ZERO, |d| net.elapsed() - d.0);
            while let Some(e) = net.poll_event(a) {
                if matches!(e, Event::Disconnected { .. }) {
                    a_up = false;
                    out.client_gave_up = since;
                }
            }
            while let Some(e) = net.poll_event(b) {
                match e {
                    Event::Disconnected { .. } => {
                        b_up = false;
                        out.server_gave_up = since;
                    }
                    Event::Received { channel: 0, .. } => {
                        got += 1;
                        if let Some((n, at)) = wanted
                            && got == n
                        {
                            out.recovered = Some(net.elapsed() - at);
                        }
                    }
                    _ => {}
                }
            }
        });
        i += 1;
        assert!(i < 60 * 60, "both sides time out");
    }
    let (_, up, down) = dead.expect("the blackout began");
    let (up2, down2) = counts.unwrap_or((net.link_stats(a, b), net.link_stats(b, a)));
    out.client = (up2.sent - up.sent, up2.sent_bytes - up.sent_bytes);
    out.server = (down2.sent - down.sent, down2.sent_bytes - down.sent_bytes);
    out
}
