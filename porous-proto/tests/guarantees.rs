//! The protocol's guarantees, proved in the deterministic simulator with quickcheck over
//! seeds and network conditions:
//!
//! - reliable packets arrive exactly once, in send order, per channel; on an unordered
//!   channel exactly once, in any order, and a lost packet delays no other;
//! - unreliable and passive packets are never duplicated or reordered, and arrive intact;
//! - a lost reliable packet stalls only its own channel;
//! - nothing stalls forever: once the network stops losing, every reliable packet arrives
//!   within [`heal_bound`];
//! - both id spaces wrap cleanly;
//! - fragmented packets of every mode up to the configured maximum reassemble correctly,
//!   and the reassembly memory cap holds;
//! - connections survive 30% loss, time out when the link dies, and reconnect;
//! - corrupted datagrams are rejected by the integrity check and change no state;
//! - runs are a function of their seed.
//!
//! Every guarantee holds in secure mode too (connect tokens, every datagram sealed): each
//! test's body takes a [`Mode`] and runs once per mode, as two tests, the secure one
//! named `..._in_secure_mode`.
//!
//! Set `POROUS_QC_TESTS` to run more cases than the default (in both modes).

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use porous_proto::sim::{BurstLoss, LinkConditions, Network};
use porous_proto::wire::secure::SEAL_EXTRA;
use porous_proto::{
    ChannelConfig, ConfigError, DisconnectReason, Event, HostConfig, PeerId, PeerState, SendMode, SequenceStart,
};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use support::Mode;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 9000))
}

fn cases(default: u64) -> u64 {
    std::env::var("POROUS_QC_TESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A packet that names itself: channel, sequence number, length, then a pattern.
fn packet(channel: usize, seq: u32, len: usize) -> Bytes {
    let len = len.max(9);
    let mut v = Vec::with_capacity(len);
    v.push(channel as u8);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend((9..len).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i * 7) as u8));
    Bytes::from(v)
}

/// Checks a received packet's integrity; returns its sequence number.
fn check(channel: usize, data: &[u8]) -> Result<u32, String> {
    if data.len() < 9 || usize::from(data[0]) != channel {
        return Err(format!("packet on channel {channel} is not ours: {:?}", &data[..data.len().min(9)]));
    }
    let seq = u32::from_le_bytes([data[1], data[2], data[3], data[4]]);
    let len = u32::from_le_bytes([data[5], data[6], data[7], data[8]]) as usize;
    if len != data.len()
        || data[9..]
            .iter()
            .enumerate()
            .any(|(i, &b)| b != (seq as usize).wrapping_mul(31).wrapping_add((i + 9) * 7) as u8)
    {
        return Err(format!("packet {seq} on channel {channel} is corrupted"));
    }
    Ok(seq)
}

/// What one side sent and the other received, per channel.
#[derive(Default)]
struct Ledger {
    sent: Vec<Vec<SendMode>>,
    received: Vec<Vec<u32>>,
    first_received: Vec<BTreeMap<u32, Duration>>,
    /// Channels that deliver in any order.
    unordered: Vec<bool>,
}

impl Ledger {
    fn new(channels: usize) -> Self {
        Self {
            sent: vec![Vec::new(); channels],
            received: vec![Vec::new(); channels],
            first_received: vec![BTreeMap::new(); channels],
            unordered: vec![false; channels],
        }
    }

    /// Receives every packet `host` has delivered so far, checking each.
    fn take_from(&mut self, net: &mut Network, host: SocketAddr) {
        let t = net.elapsed();
        while let Some(e) = net.poll_event(host) {
            if let Event::Received { channel, data, .. } = e {
                self.receive(t, channel, &data).unwrap();
            }
        }
    }

    /// `channel` delivers in any order: packets must still arrive exactly once.
    fn unordered(mut self, channel: usize, unordered: bool) -> Self {
        self.unordered[channel] = unordered;
        self
    }

    fn send(
        &mut self,
        net: &mut Network,
        from: SocketAddr,
        peer: PeerId,
        channel: usize,
        mode: SendMode,
        len: usize,
    ) -> bool {
        let seq = self.sent[channel].len() as u32;
        let data = packet(channel, seq, len);
        match net.host_mut(from).send(peer, channel, data, mode) {
            Ok(()) => {
                self.sent[channel].push(mode);
                true
            }
            Err(_) => false,
        }
    }

    fn receive(&mut self, at: Duration, channel: usize, data: &[u8]) -> Result<(), String> {
        let seq = check(channel, data)?;
        if self.unordered[channel] {
            if self.first_received[channel].contains_key(&seq) {
                return Err(format!("unordered channel {channel}: packet {seq} delivered twice"));
            }
            if self.sent[channel].get(seq as usize) != Some(&SendMode::Reliable) {
                return Err(format!("unordered channel {channel}: packet {seq} was never sent reliably"));
            }
        } else if let Some(&last) = self.received[channel].last()
            && seq <= last
        {
            return Err(format!("channel {channel}: packet {seq} after {last} (duplicated or out of order)"));
        }
        self.received[channel].push(seq);
        self.first_received[channel].insert(seq, at);
        Ok(())
    }

    fn missing_reliable(&self) -> Vec<(usize, u32)> {
        let mut out = Vec::new();
        for (ch, modes) in self.sent.iter().enumerate() {
            for (seq, mode) in modes.iter().enumerate() {
                if *mode == SendMode::Reliable && !self.first_received[ch].contains_key(&(seq as u32)) {
                    out.push((ch, seq as u32));
                }
            }
        }
        out
    }
}

/// Network conditions drawn by quickcheck: from clean to hostile.
#[derive(Clone, Debug)]
struct Conditions(LinkConditions);

impl Arbitrary for Conditions {
    fn arbitrary(g: &mut Gen) -> Self {
        let pct = |g: &mut Gen, max: u8| f64::from(u8::arbitrary(g) % (max + 1)) / 100.0;
        let mut c = LinkConditions::perfect(MS * (1 + u32::from(u8::arbitrary(g) % 80)));
        c.jitter = MS * u32::from(u8::arbitrary(g) % 30);
        c.loss = pct(g, 30);
        if bool::arbitrary(g) {
            c.burst = Some(BurstLoss::new(pct(g, 5), 0.1 + pct(g, 40), 0.3 + pct(g, 60)));
        }
        c.duplicate = pct(g, 10);
        c.reorder = pct(g, 15);
        c.reorder_delay = MS * u32::from(u8::arbitrary(g) % 100);
        c.corrupt = pct(g, 5);
        // Late duplicates (up to 3 s behind) and replays of old datagrams, in a third of
        // the cases each.
        if u8::arbitrary(g) % 3 == 0 {
            c.late_duplicate = pct(g, 10);
            c.late_delay = MS * (1 + u32::from(u16::arbitrary(g) % 3000));
        }
        if u8::arbitrary(g) % 3 == 0 {
            c.replay = pct(g, 10);
        }
        if bool::arbitrary(g) {
            c.bandwidth = Some(100_000 + u64::from(u16::arbitrary(g)) * 50);
            c.queue = 16_000 + usize::from(u16::arbitrary(g));
        }
        Self(c)
    }
}

#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    ab: Conditions,
    ba: Conditions,
    packets: u16,
    max_len: u16,
    wrap: bool,
    /// Each side's datagram size; the connection uses the smaller.
    mtu: (u16, u16),
    /// Channel 3 is unordered (reliable packets only) on both sides.
    unordered: bool,
    /// Secure mode: `a` connects to `b` with a connect token, every datagram sealed. The
    /// datagram size is then at least 256 bytes (the token's request must fit).
    mode: Mode,
}

/// A datagram size from 128 to 9,000 bytes, the edges and common sizes often.
fn mtu(g: &mut Gen) -> u16 {
    const COMMON: [u16; 6] = [128, 129, 576, 1200, 1500, 9000];
    match u8::arbitrary(g) % 3 {
        0 => COMMON[usize::from(u8::arbitrary(g)) % COMMON.len()],
        _ => 128 + u16::arbitrary(g) % (9000 - 128 + 1),
    }
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Self {
        Self {
            seed: u64::arbitrary(g),
            ab: Conditions::arbitrary(g),
            ba: Conditions::arbitrary(g),
            packets: 40 + u16::arbitrary(g) % 200,
            max_len: 16 + u16::arbitrary(g) % 5000,
            wrap: bool::arbitrary(g),
            mtu: (mtu(g), mtu(g)),
            unordered: bool::arbitrary(g),
            mode: Mode::Plain,
        }
    }
}

/// The channel that is unordered in the cases that have one.
const UNORDERED: usize = 3;

/// Cases of the secure fragment property: each moves about 0.6 MB, every datagram sealed
/// and opened, which costs an unoptimized test build about 0.2 s a case.
const SECURE_FRAGMENT_CASES: u64 = 60;

fn config(wrap: bool) -> HostConfig {
    sized(wrap, 1200)
}

fn sized(wrap: bool, mtu: u16) -> HostConfig {
    let mut c = HostConfig::default();
    c.peer.mtu = usize::from(mtu);
    c.peer.timeout = Duration::from_secs(30);
    c.peer.connect_timeout = Duration::from_secs(30);
    if wrap {
        // Frame ids and packet ids start a little below their wrap.
        c.sequence_start = SequenceStart::fixed(u32::MAX - 200, 0xFF_FF00);
    }
    c
}

/// The bound on delivering every reliable packet once the network heals: a few RTOs to
/// resend what is outstanding (the RTO can have grown to the network's worst RTT plus four
/// deviations), plus draining the backlog from a collapsed congestion window, which slow
/// start reopens within a few round trips. The draining rate is 50 kB/s at a 1200-byte
/// datagram size and proportionally less below it: the window grows by one datagram per
/// round trip once out of slow start, and a small datagram also carries more overhead.
fn heal_bound(latency: Duration, backlog_bytes: usize, mtu: u16) -> Duration {
    let rate = 50_000.0 * f64::from(mtu.min(1200)) / 1200.0;
    3 * SEC + 20 * latency + Duration::from_secs_f64(backlog_bytes as f64 / rate)
}

/// Adds `a`, the host that connects, and `b`, the host it connects to, with their
/// configurations made for `mode` (in secure mode `a` a client, `b` a server holding the
/// backend's key).
fn add_pair(
    net: &mut Network,
    mode: Mode,
    (a, config_a): (SocketAddr, HostConfig),
    (b, config_b): (SocketAddr, HostConfig),
) -> Result<(), ConfigError> {
    let start = net.now() - net.elapsed();
    net.add_host(a, mode.client(config_a))?;
    net.add_host(b, mode.server(config_b, b, start))
}

/// `a` connects to `b` (in secure mode with a fresh connect token made from `seed`, whose
/// timeout is `a`'s); runs until both report `Connected`, at most `limit`.
fn connect(
    net: &mut Network,
    mode: Mode,
    (a, b): (SocketAddr, SocketAddr),
    limit: Duration,
    seed: u64,
) -> Option<(PeerId, PeerId)> {
    let token = mode.token(seed, b, net.elapsed(), net.host(a).config().peer.timeout);
    net.establish((a, b), token.as_deref(), limit)
}

/// Runs traffic both ways over lossy links, heals them, and checks every delivery rule.
fn run_case(case: &Case) -> Result<String, String> {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(case.seed);
    let config = |mtu: u16| {
        let mtu = if case.mode.is_secure() { mtu.max(256) } else { mtu };
        let mut c = sized(case.wrap, mtu);
        if case.unordered {
            c.peer.channels[UNORDERED] = ChannelConfig::unordered();
        }
        c
    };
    add_pair(&mut net, case.mode, (a, config(case.mtu.0)), (b, config(case.mtu.1))).map_err(|e| e.to_string())?;
    net.set_link(a, b, case.ab.0);
    net.set_link(b, a, case.ba.0);
    let (pa, pb) = match connect(&mut net, case.mode, (a, b), 60 * SEC, case.seed) {
        Some(peers) => peers,
        None => {
            // The link model can starve a handshake for its whole timeout: a burst state
            // changes per datagram, so it can last while the few handshake datagrams cross
            // (see `a_handshake_starved_by_a_burst_completes_once_the_links_heal`). What
            // must hold is that once the links heal a new handshake completes; the traffic
            // then crosses the case's links.
            net.set_link(a, b, LinkConditions::perfect(case.ab.0.latency));
            net.set_link(b, a, LinkConditions::perfect(case.ba.0.latency));
            let peers = connect(&mut net, case.mode, (a, b), 60 * SEC, case.seed ^ 1)
                .ok_or("never connected, even once the links healed")?;
            net.set_link(a, b, case.ab.0);
            net.set_link(b, a, case.ba.0);
            peers
        }
    };
    let channels = 4;
    let ledger = || Ledger::new(channels).unordered(UNORDERED, case.unordered);
    let (mut at_b, mut at_a) = (ledger(), ledger());
    // Unordered channels carry reliable packets only.
    let mode_on = |channel: usize, mode| if case.unordered && channel == UNORDERED { SendMode::Reliable } else { mode };
    let modes = [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive];
    let mut error = None;
    let mut sent = 0u32;
    let mut backlog = 0usize;
    let pump = |net: &mut Network, at_b: &mut Ledger, at_a: &mut Ledger, error: &mut Option<String>| {
        let t = net.elapsed();
        for (host, ledger) in [(b, &mut *at_b), (a, &mut *at_a)] {
            while let Some(e) = net.poll_event(host) {
                match e {
                    Event::Received { channel, data, .. } => {
                        if let Err(e) = ledger.receive(t, channel, &data) {
                            error.get_or_insert(e);
                        }
                    }
                    Event::Disconnected { reason, .. } => {
                        error.get_or_insert(format!("{host} disconnected: {reason}"));
                    }
                    _ => {}
                }
            }
        }
    };
    // Phase 1: traffic over the lossy links, a burst every 20 ms.
    while sent < u32::from(case.packets) {
        net.run_for(20 * MS, |net| pump(net, &mut at_b, &mut at_a, &mut error));
        for _ in 0..4 {
            let r = net.random();
            let channel = (r % channels as u64) as usize;
            let mode = modes[((r >> 8) % 3) as usize];
            let len = ((r >> 16) % u64::from(case.max_len)) as usize;
            if at_b.send(&mut net, a, pa, channel, mode_on(channel, mode), len) {
                backlog += len;
            }
            if r.is_multiple_of(5) {
                let channel = (r >> 24) as usize % channels;
                at_a.send(&mut net, b, pb, channel, mode_on(channel, mode), len / 4);
            }
            sent += 1;
        }
    }
    // Phase 2: the network heals; everything reliable must arrive within the bound.
    let healed = LinkConditions::perfect(case.ab.0.latency);
    net.set_link(a, b, healed);
    net.set_link(b, a, LinkConditions::perfect(case.ba.0.latency));
    let healed_at = net.elapsed();
    let mtu = case.mtu.0.min(case.mtu.1);
    let mtu = if case.mode.is_secure() { mtu.max(256) } else { mtu };
    let bound = heal_bound(case.ab.0.latency.max(case.ba.0.latency), backlog, mtu);
    let done = net.run_until(bound, |net| {
        pump(net, &mut at_b, &mut at_a, &mut error);
        error.is_some() || (at_b.missing_reliable().is_empty() && at_a.missing_reliable().is_empty())
    });
    if let Some(e) = error {
        return Err(e);
    }
    if !done {
        let missing = at_b.missing_reliable();
        return Err(format!(
            "{} reliable packets still missing {:?} after healing: {:?} (a wakes in {:?}); a: {:?}; b: {:?}",
            missing.len(),
            bound,
            &missing[..missing.len().min(5)],
            net.host(a).poll_timeout().map(|t| t.saturating_duration_since(net.now())),
            net.host(a).peer_stats(pa),
            net.host(b).peer_stats(pb),
        ));
    }
    let took = net.elapsed() - healed_at;
    let s = net.host(a).peer_stats(pa).ok_or("peer gone")?;
    if s.state != PeerState::Connected {
        return Err(format!("a is {:?}", s.state));
    }
    Ok(format!("healed in {took:?} of {bound:?}"))
}

#[test]
fn delivery_guarantees_hold_over_arbitrary_networks() {
    fn prop(case: Case) -> TestResult {
        match run_case(&case) {
            Ok(_) => TestResult::passed(),
            Err(e) => TestResult::error(format!("{case:?}\n{e}")),
        }
    }
    QuickCheck::new().tests(cases(800)).max_tests(100_000).quickcheck(prop as fn(Case) -> TestResult);
}

#[test]
fn delivery_guarantees_hold_over_arbitrary_networks_in_secure_mode() {
    fn prop(mut case: Case) -> TestResult {
        case.mode = Mode::Secure;
        match run_case(&case) {
            Ok(_) => TestResult::passed(),
            Err(e) => TestResult::error(format!("{case:?}\n{e}")),
        }
    }
    QuickCheck::new().tests(cases(300)).max_tests(100_000).quickcheck(prop as fn(Case) -> TestResult);
}

#[test]
fn delivery_guarantees_hold_on_every_preset() {
    on_every_preset(Mode::Plain);
}

#[test]
fn delivery_guarantees_hold_on_every_preset_in_secure_mode() {
    on_every_preset(Mode::Secure);
}

fn on_every_preset(mode: Mode) {
    let presets = [
        ("lan", LinkConditions::lan()),
        ("wifi", LinkConditions::wifi()),
        ("mobile", LinkConditions::mobile()),
        ("satellite", LinkConditions::satellite()),
        ("hostile", LinkConditions::hostile()),
    ];
    for (name, c) in presets {
        for seed in 0..8 {
            let case = Case {
                seed,
                ab: Conditions(c),
                ba: Conditions(c),
                packets: 200,
                max_len: 3000,
                wrap: seed % 2 == 0,
                mtu: (1200, 1200),
                unordered: seed % 4 < 2,
                mode,
            };
            if let Err(e) = run_case(&case) {
                panic!("{name}, seed {seed}, {mode:?}: {e}");
            }
        }
    }
}

#[test]
fn a_lost_reliable_packet_stalls_only_its_own_channel() {
    stall_stays_in_its_channel(Mode::Plain);
}

#[test]
fn a_lost_reliable_packet_stalls_only_its_own_channel_in_secure_mode() {
    stall_stays_in_its_channel(Mode::Secure);
}

fn stall_stays_in_its_channel(mode: Mode) {
    for seed in 0..20 {
        let (a, b) = (addr(1), addr(2));
        let mut net = Network::new(seed);
        // Without repair copies, which would end the stall a datagram later: the stall
        // must last for its isolation to show.
        let mut cfg = config(false);
        for c in &mut cfg.peer.channels {
            c.repair = false;
        }
        add_pair(&mut net, mode, (a, cfg.clone()), (b, cfg)).unwrap();
        net.set_link_both(a, b, LinkConditions::perfect(25 * MS));
        let (pa, _) = connect(&mut net, mode, (a, b), 5 * SEC, seed).unwrap();
        net.run_for(SEC, |_| {}); // pings settle the RTT
        let mut ledger = Ledger::new(4);
        // One reliable packet on channel 0, alone in its datagram, which is dropped once.
        // The script counts from its installation: datagram 0 is the next one a sends.
        net.script(a, b, move |i, _| i != 0);
        ledger.send(&mut net, a, pa, 0, SendMode::Reliable, 100);
        net.run_for(MS, |_| {});
        net.clear_script(a, b);
        // Then a steady stream on channels 0 and 1.
        for _ in 0..20 {
            ledger.send(&mut net, a, pa, 0, SendMode::Reliable, 100);
            ledger.send(&mut net, a, pa, 1, SendMode::Reliable, 100);
            net.run_for(5 * MS, |net| ledger.take_from(net, b));
        }
        net.run_for(2 * SEC, |net| ledger.take_from(net, b));
        assert!(ledger.missing_reliable().is_empty(), "seed {seed}, {mode:?}: {:?}", ledger.missing_reliable());
        let first0 = ledger.first_received[0][&0];
        // Channel 1 delivered while channel 0 waited for its resend...
        let during: usize = ledger.first_received[1].values().filter(|&&t| t < first0).count();
        assert!(during >= 5, "seed {seed}, {mode:?}: channel 1 delivered only {during} packets during the stall");
        // ...and channel 0 delivered nothing before its lost packet.
        assert!(
            ledger.first_received[0].values().all(|&t| t >= first0),
            "seed {seed}, {mode:?}: channel 0 skipped ahead"
        );
    }
}

#[test]
fn a_lost_packet_on_an_unordered_channel_delays_no_other_packet_of_it() {
    unordered_loss_delays_no_other(Mode::Plain);
}

#[test]
fn a_lost_packet_on_an_unordered_channel_delays_no_other_packet_of_it_in_secure_mode() {
    unordered_loss_delays_no_other(Mode::Secure);
}

fn unordered_loss_delays_no_other(mode: Mode) {
    for seed in 0..20 {
        let (a, b) = (addr(1), addr(2));
        let mut net = Network::new(seed);
        // Without repair copies, so the lost packet waits for its resend: a stall would
        // show. Channel 0 unordered on both sides.
        let mut cfg = config(seed % 2 == 0);
        cfg.peer.channels[0] = ChannelConfig::unordered();
        for c in &mut cfg.peer.channels {
            c.repair = false;
        }
        add_pair(&mut net, mode, (a, cfg.clone()), (b, cfg)).unwrap();
        net.set_link_both(a, b, LinkConditions::perfect(25 * MS));
        let (pa, _) = connect(&mut net, mode, (a, b), 5 * SEC, seed).unwrap();
        net.run_for(SEC, |_| {}); // pings settle the RTT
        let mut ledger = Ledger::new(4).unordered(0, true);
        // Packet 0 alone in a datagram, which is dropped once; then a stream behind it,
        // small packets and packets of several fragments.
        net.script(a, b, move |i, _| i != 0);
        ledger.send(&mut net, a, pa, 0, SendMode::Reliable, 100);
        net.run_for(MS, |_| {});
        net.clear_script(a, b);
        for i in 0..20 {
            ledger.send(&mut net, a, pa, 0, SendMode::Reliable, if i % 4 == 0 { 3000 } else { 100 });
            net.run_for(5 * MS, |net| ledger.take_from(net, b));
        }
        net.run_for(2 * SEC, |net| ledger.take_from(net, b));
        // Every packet exactly once (the ledger refuses a second delivery)...
        assert!(ledger.missing_reliable().is_empty(), "seed {seed}, {mode:?}: {:?}", ledger.missing_reliable());
        assert_eq!(ledger.first_received[0].len(), 21);
        // ...and the ones behind the lost packet did not wait for it.
        let first0 = ledger.first_received[0][&0];
        let during = ledger.first_received[0].iter().filter(|&(&seq, &t)| seq > 0 && t < first0).count();
        assert!(during >= 10, "seed {seed}, {mode:?}: only {during} packets overtook the lost one");
    }
}

#[test]
fn fragmented_packets_of_every_mode_up_to_the_maximum_reassemble_and_memory_stays_capped() {
    fn prop(seed: u64, loss: u8) -> TestResult {
        fragments_reassemble(Mode::Plain, seed, loss)
    }
    QuickCheck::new().tests(cases(200)).quickcheck(prop as fn(u64, u8) -> TestResult);
}

#[test]
fn fragmented_packets_of_every_mode_up_to_the_maximum_reassemble_and_memory_stays_capped_in_secure_mode() {
    fn prop(seed: u64, loss: u8) -> TestResult {
        fragments_reassemble(Mode::Secure, seed, loss)
    }
    QuickCheck::new().tests(cases(SECURE_FRAGMENT_CASES)).quickcheck(prop as fn(u64, u8) -> TestResult);
}

fn fragments_reassemble(mode: Mode, seed: u64, loss: u8) -> TestResult {
    let (a, b) = (addr(1), addr(2));
    let mut cfg = config(seed.is_multiple_of(2));
    cfg.peer.max_packet_size = 48_000;
    cfg.peer.max_reassembly_bytes = 64_000;
    let mut net = Network::new(seed);
    add_pair(&mut net, mode, (a, cfg.clone()), (b, cfg)).unwrap();
    let mut c = LinkConditions::perfect(20 * MS);
    c.loss = f64::from(loss % 25) / 100.0;
    c.jitter = 15 * MS;
    c.reorder = 0.1;
    c.reorder_delay = 30 * MS;
    c.duplicate = 0.02;
    net.set_link_both(a, b, c);
    let Some((pa, pb)) = connect(&mut net, mode, (a, b), 30 * SEC, seed) else {
        return TestResult::error("no connection");
    };
    let mut ledger = Ledger::new(4);
    let mut worst = 0usize;
    // A full fragment at a 1200-byte datagram size carries 1,172 bytes in plain mode and
    // `SEAL_EXTRA` fewer in secure mode (docs/wire-format.md): packets on either side of
    // that edge.
    let full = match mode {
        Mode::Plain => 1172,
        Mode::Secure => 1172 - SEAL_EXTRA,
    };
    let sizes = [48_000, 47_999, 1, full - 1, full, full + 1, 10_000, 25_000];
    let modes = [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive];
    for (i, &len) in sizes.iter().cycle().take(24).enumerate() {
        ledger.send(&mut net, a, pa, i % 4, modes[i % 3], len);
        net.run_for(30 * MS, |net| ledger.take_from(net, b));
        worst = worst.max(net.host(b).peer_stats(pb).map_or(0, |s| s.reassembly_bytes));
    }
    net.set_link_both(a, b, LinkConditions::perfect(20 * MS));
    net.run_until(20 * SEC, |net| {
        ledger.take_from(net, b);
        worst = worst.max(net.host(b).peer_stats(pb).map_or(0, |s| s.reassembly_bytes));
        ledger.missing_reliable().is_empty()
    });
    if !ledger.missing_reliable().is_empty() {
        return TestResult::error(format!("missing {:?}", ledger.missing_reliable()));
    }
    // The documented bound: the cap plus three packets per channel.
    let bound = 64_000 + 4 * 3 * (48_000 + 2 * 1172);
    if worst > bound {
        return TestResult::error(format!("reassembly held {worst} bytes, bound {bound}"));
    }
    TestResult::passed()
}

#[test]
fn connections_survive_thirty_percent_loss_time_out_when_the_link_dies_and_reconnect() {
    survive_loss_time_out_reconnect(Mode::Plain);
}

#[test]
fn connections_survive_thirty_percent_loss_time_out_when_the_link_dies_and_reconnect_in_secure_mode() {
    survive_loss_time_out_reconnect(Mode::Secure);
}

fn survive_loss_time_out_reconnect(mode: Mode) {
    for seed in 0..10 {
        let (a, b) = (addr(1), addr(2));
        let mut net = Network::new(seed);
        let mut cfg = HostConfig::default();
        cfg.peer.timeout = 5 * SEC;
        add_pair(&mut net, mode, (a, cfg.clone()), (b, cfg)).unwrap();
        let mut lossy = LinkConditions::perfect(30 * MS);
        lossy.loss = 0.3;
        net.set_link_both(a, b, lossy);
        let (pa, _) = connect(&mut net, mode, (a, b), 20 * SEC, seed).expect("connects through 30% loss");
        let mut ledger = Ledger::new(4);
        let mut ended = Vec::new();
        for _ in 0..200 {
            ledger.send(&mut net, a, pa, 0, SendMode::Reliable, 200);
            net.run_for(50 * MS, |net| {
                let t = net.elapsed();
                while let Some(e) = net.poll_event(b) {
                    match e {
                        Event::Received { channel, data, .. } => ledger.receive(t, channel, &data).unwrap(),
                        Event::Disconnected { reason, .. } => ended.push(reason),
                        _ => {}
                    }
                }
            });
        }
        assert!(ended.is_empty(), "seed {seed}, {mode:?}: a 30% lossy connection ended: {ended:?}");
        net.run_until(30 * SEC, |net| {
            let t = net.elapsed();
            while let Some(Event::Received { channel, data, .. }) = net.poll_event(b) {
                ledger.receive(t, channel, &data).unwrap();
            }
            ledger.missing_reliable().is_empty()
        });
        assert!(ledger.missing_reliable().is_empty(), "seed {seed}, {mode:?}");
        // The link dies: both sides time out.
        let mut dead = LinkConditions::perfect(30 * MS);
        dead.down = true;
        net.set_link_both(a, b, dead);
        let mut reasons = Vec::new();
        net.run_for(8 * SEC, |net| {
            for h in [a, b] {
                while let Some(e) = net.poll_event(h) {
                    if let Event::Disconnected { reason, .. } = e {
                        reasons.push(reason);
                    }
                }
            }
        });
        assert_eq!(reasons, [DisconnectReason::Timeout, DisconnectReason::Timeout], "seed {seed}, {mode:?}");
        // It comes back: a new connection works.
        net.set_link_both(a, b, lossy);
        net.run_for(5 * SEC, |_| {}); // zombies are gone
        let (pa, _) = connect(&mut net, mode, (a, b), 20 * SEC, seed).expect("reconnects");
        assert_eq!(net.host(a).peer_stats(pa).unwrap().state, PeerState::Connected);
    }
}

/// What a scripted run saw: every event of both hosts with its time, the trace of every
/// datagram on the links, and how many datagrams `b` counted malformed.
type ScriptedRun = (Vec<(Duration, SocketAddr, Event)>, String, u64);

/// Runs a fixed script; with `corrupt_every` set, every `corrupt_every`-th round hands `b`
/// every single-bit corruption of `a`'s latest datagram.
fn scripted_run(mode: Mode, seed: u64, corrupt_every: Option<u32>) -> ScriptedRun {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(seed);
    add_pair(&mut net, mode, (a, config(false)), (b, config(false))).unwrap();
    let mut c = LinkConditions::perfect(15 * MS);
    c.loss = 0.05;
    net.set_link_both(a, b, c);
    net.enable_trace();
    let now = net.now();
    let pa = match mode.token(seed, b, net.elapsed(), net.host(a).config().peer.timeout) {
        Some(token) => net.host_mut(a).connect_with_token(now, b, &token).unwrap(),
        None => net.host_mut(a).connect(now, b).unwrap(),
    };
    let mut log = Vec::new();
    let mut copies: Vec<Bytes> = Vec::new();
    // Capture a's datagrams (a script that lets everything pass, and keeps copies).
    let capture = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = capture.clone();
    net.script(a, b, move |_, d| {
        if let Ok(mut v) = sink.lock() {
            v.push(Bytes::copy_from_slice(d));
        }
        true
    });
    for round in 0..150u32 {
        let _ = net.host_mut(a).send(
            pa,
            (round % 4) as usize,
            packet((round % 4) as usize, round, 300),
            SendMode::Reliable,
        );
        net.run_for(10 * MS, |net| {
            let t = net.elapsed();
            for h in [a, b] {
                while let Some(e) = net.poll_event(h) {
                    log.push((t, h, e));
                }
            }
        });
        if corrupt_every.is_some_and(|n| round.is_multiple_of(n)) {
            if let Ok(v) = capture.lock() {
                copies.extend(v.iter().skip(copies.len()).cloned());
            }
            // Every bit of the latest datagram flipped in turn, delivered straight to b.
            if let Some(d) = copies.last() {
                let now = net.now();
                for bit in 0..d.len() * 8 {
                    let mut bad = d.to_vec();
                    bad[bit / 8] ^= 1 << (bit % 8);
                    net.host_mut(b).handle_datagram(now, a, &bad);
                }
            }
        }
    }
    (log, net.trace_text(), net.host(b).stats().malformed)
}

#[test]
fn corrupted_datagrams_are_rejected_and_change_no_state() {
    corruption_changes_nothing(Mode::Plain);
}

#[test]
fn corrupted_datagrams_are_rejected_and_change_no_state_in_secure_mode() {
    corruption_changes_nothing(Mode::Secure);
}

/// In secure mode each corrupted datagram costs a failed tag check (a ChaCha20 block and
/// Poly1305 over the datagram), some 40 times a keyed CRC in an unoptimized build, so
/// secure mode corrupts the latest datagram of every 10th round (the handshake's
/// included): over 40,000 corruptions a seed rather than 420,000.
fn corruption_changes_nothing(mode: Mode) {
    let every = match mode {
        Mode::Plain => 1,
        Mode::Secure => 10,
    };
    for seed in 0..3 {
        let (clean, trace, none) = scripted_run(mode, seed, None);
        let (dirty, dirty_trace, rejected) = scripted_run(mode, seed, Some(every));
        assert_eq!(none, 0, "{mode:?}");
        assert!(rejected > 10_000, "{mode:?}: {rejected} corrupted datagrams rejected");
        // Every single-bit corruption was rejected, and the run is event for event and
        // datagram for datagram the same as without them: they changed no state.
        assert_eq!(clean, dirty, "seed {seed}, {mode:?}");
        assert!(trace == dirty_trace, "seed {seed}, {mode:?}: the corruptions changed what went on the wire");
        assert!(clean.iter().filter(|(_, _, e)| matches!(e, Event::Received { .. })).count() >= 100);
    }
}

#[test]
fn corruption_on_the_wire_never_reaches_the_application() {
    corruption_never_delivered(Mode::Plain);
}

#[test]
fn corruption_on_the_wire_never_reaches_the_application_in_secure_mode() {
    corruption_never_delivered(Mode::Secure);
}

fn corruption_never_delivered(mode: Mode) {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(7);
    add_pair(&mut net, mode, (a, config(false)), (b, config(false))).unwrap();
    let mut c = LinkConditions::perfect(10 * MS);
    c.corrupt = 0.2;
    net.set_link_both(a, b, c);
    let (pa, _) = connect(&mut net, mode, (a, b), 30 * SEC, 7).unwrap();
    let mut ledger = Ledger::new(4);
    for i in 0..300 {
        ledger.send(&mut net, a, pa, i % 4, SendMode::Reliable, 500);
        net.run_for(10 * MS, |net| {
            let t = net.elapsed();
            while let Some(Event::Received { channel, data, .. }) = net.poll_event(b) {
                ledger.receive(t, channel, &data).unwrap();
            }
        });
    }
    net.run_until(20 * SEC, |net| {
        let t = net.elapsed();
        while let Some(Event::Received { channel, data, .. }) = net.poll_event(b) {
            ledger.receive(t, channel, &data).unwrap();
        }
        ledger.missing_reliable().is_empty()
    });
    assert!(ledger.missing_reliable().is_empty(), "{mode:?}");
    assert!(net.link_stats(a, b).corrupted > 50, "{mode:?}");
    assert!(net.host(b).stats().bad_checksum > 50, "{mode:?}");
}

#[test]
fn two_runs_with_one_seed_give_identical_event_logs() {
    one_seed_one_run(Mode::Plain);
}

#[test]
fn two_runs_with_one_seed_give_identical_event_logs_in_secure_mode() {
    one_seed_one_run(Mode::Secure);
}

fn one_seed_one_run(mode: Mode) {
    let case = Case {
        seed: 1234,
        ab: Conditions(LinkConditions::hostile()),
        ba: Conditions(LinkConditions::mobile()),
        packets: 150,
        max_len: 2500,
        wrap: true,
        mtu: (1200, 1200),
        unordered: false,
        mode,
    };
    let run = || {
        let (a, b) = (addr(1), addr(2));
        let mut net = Network::new(case.seed);
        add_pair(&mut net, mode, (a, config(true)), (b, config(true))).unwrap();
        net.set_link(a, b, case.ab.0);
        net.set_link(b, a, case.ba.0);
        net.enable_trace();
        let (pa, _) = connect(&mut net, mode, (a, b), 60 * SEC, case.seed).unwrap();
        let mut log = Vec::new();
        for i in 0..case.packets {
            let _ = net.host_mut(a).send(
                pa,
                usize::from(i % 4),
                packet(usize::from(i % 4), u32::from(i), usize::from(i) * 17 % 2500),
                SendMode::Reliable,
            );
            net.run_for(10 * MS, |net| {
                for h in [a, b] {
                    while let Some(e) = net.poll_event(h) {
                        log.push((net.elapsed(), h, e));
                    }
                }
            });
        }
        net.run_for(20 * SEC, |net| {
            for h in [a, b] {
                while let Some(e) = net.poll_event(h) {
                    log.push((net.elapsed(), h, e));
                }
            }
        });
        (log, net.trace_text())
    };
    let (first, trace) = run();
    let (second, trace2) = run();
    assert!(first.len() > 100, "{mode:?}: {} events", first.len());
    assert_eq!(first, second, "{mode:?}");
    assert_eq!(trace, trace2, "{mode:?}");
}

#[test]
#[ignore = "prints what generated cases do"]
fn show_cases() {
    let mut g = Gen::new(100);
    for _ in 0..8 {
        let case = Case::arbitrary(&mut g);
        let r = run_case(&case);
        eprintln!(
            "loss {:.2}/{:.2} lat {:?} packets {} max {} -> {:?}",
            case.ab.0.loss, case.ba.0.loss, case.ab.0.latency, case.packets, case.max_len, r
        );
    }
}

/// A case the secure-mode property found at 50,000 cases: on the way back, a burst state
/// (entered with chance 0.04 per datagram, left with 0.12, losing 79% meanwhile) held for
/// the whole 30 s connect timeout, and 1 of the server's 15 handshake replies arrived,
/// corrupted (over the same links, 400 other link seeds all connected). The handshake must
/// complete once the links heal, and the delivery rules then hold over the case's links.
#[test]
fn a_handshake_starved_by_a_burst_completes_once_the_links_heal() {
    let mut ab = LinkConditions::perfect(48 * MS);
    ab.jitter = 12 * MS;
    ab.loss = 0.29;
    ab.reorder = 0.12;
    ab.reorder_delay = 13 * MS;
    ab.corrupt = 0.03;
    let mut ba = LinkConditions::perfect(54 * MS);
    ba.jitter = 4 * MS;
    ba.burst = Some(BurstLoss::new(0.04, 0.12, 0.79));
    ba.reorder = 0.11;
    ba.reorder_delay = 89 * MS;
    ba.late_delay = Duration::from_millis(1451);
    ba.corrupt = 0.04;
    ba.bandwidth = Some(853_250);
    ba.queue = 33_261;
    let case = Case {
        seed: 10_141_068_267_198_543_240,
        ab: Conditions(ab),
        ba: Conditions(ba),
        packets: 104,
        max_len: 4357,
        wrap: false,
        mtu: (1424, 576),
        unordered: true,
        mode: Mode::Secure,
    };
    if let Err(e) = run_case(&case) {
        panic!("{e}");
    }
}
