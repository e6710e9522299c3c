//! Issue 38: path MTU discovery on a simulated 1,500-byte path (1,472 bytes of UDP payload
//! under IPv4), 25 ms each way, a 10 MB/s bottleneck with one bandwidth-delay product of
//! queue: bulk transfers of three packet sizes with discovery off (`max_mtu` 0, the
//! default) and on (`max_mtu` 1,452 on both sides), the time the sender takes to reach
//! the path's size, and the time it takes to find a black hole (the path shrinking under
//! the size in use).

use std::time::Duration;

use bytes::Bytes;
use porous_proto::{Event, HostConfig, SendMode};

use crate::workloads::{SEC, addr, config, link, pair};
use crate::{BDP, MODEL, RATE, Scale, summary};

/// The path's largest UDP payload: 1,500 bytes less 28 of IPv4 and UDP headers.
const PATH: usize = 1472;
/// The ceiling the "on" rows configure, on both sides.
const MAX_MTU: usize = 1452;

/// What one bulk transfer measured.
struct Run {
    goodput: f64,
    /// The sender's datagrams (data, acknowledgements, pings, probes) per MB of payload.
    datagrams_per_mb: f64,
    /// All the sender's wire bytes per payload byte.
    wire_per_byte: f64,
    black_holes: u64,
}

fn host_config(mtu: usize, max_mtu: usize) -> HostConfig {
    let mut cfg = config(MODEL, true);
    cfg.peer.mtu = mtu;
    cfg.peer.max_mtu = max_mtu;
    cfg
}

/// `total` bytes in reliable packets of `size` bytes from a to b, the send queue kept full.
fn bulk(seed: u64, max_mtu: usize, size: usize, total: usize, loss: f64) -> Run {
    let mut c = link(loss, RATE, BDP);
    c.mtu = Some(PATH);
    let (mut net, pa, _) = pair(seed, c, c, &host_config(1200, max_mtu));
    let (a, b) = (addr(1), addr(2));
    let packets = total.div_ceil(size);
    let (mut sent, mut got) = (0, 0);
    let before = net.host(a).peer_stats(pa).expect("connected");
    // `pair` lets a second pass after the handshake: the search (one round trip on this
    // path) is over by then; the next table times it.
    let start = net.elapsed();
    let done = net.run_until(3600 * SEC, |net| {
        while sent < packets && net.host_mut(a).send(pa, 0, Bytes::from(vec![7; size]), SendMode::Reliable).is_ok() {
            sent += 1;
        }
        while let Some(e) = net.poll_event(b) {
            got += usize::from(matches!(e, Event::Received { .. }));
        }
        got == packets
    });
    assert!(done, "seed {seed}: the transfer ended ({got} of {packets})");
    let secs = (net.elapsed() - start).as_secs_f64();
    let s = net.host(a).peer_stats(pa).expect("connected");
    let payload = (packets * size) as f64;
    let datagrams = s.transfer.datagrams_sent - before.transfer.datagrams_sent;
    let bytes = s.transfer.bytes_sent - before.transfer.bytes_sent;
    Run {
        goodput: payload / secs,
        datagrams_per_mb: datagrams as f64 / (payload / 1e6),
        wire_per_byte: bytes as f64 / payload,
        black_holes: s.transfer.black_holes,
    }
}

/// The size the sender settles on over a path carrying `path` bytes of UDP payload, from
/// `mtu` up to `max_mtu`, and how long after the handshake it got there.
fn reach(seed: u64, (mtu, max_mtu): (usize, usize), path: usize) -> (usize, Duration) {
    let mut net = porous_proto::sim::Network::new(seed);
    let (a, b) = (addr(1), addr(2));
    let mut c = link(0.0, RATE, BDP);
    c.mtu = Some(path);
    net.add_host(a, host_config(mtu, max_mtu)).expect("valid");
    net.add_host(b, host_config(mtu, max_mtu)).expect("valid");
    net.set_link(a, b, c);
    net.set_link(b, a, c);
    let now = net.now();
    let pa = net.host_mut(a).connect(now, b).expect("connect");
    let mut up: Option<Duration> = None;
    let mut last = (mtu, Duration::ZERO);
    net.run_for(30 * SEC, |net| {
        while let Some(e) = net.poll_event(a) {
            if matches!(e, Event::Connected { .. }) {
                up = Some(net.elapsed());
            }
        }
        while net.poll_event(b).is_some() {}
        if let (Some(t), Some(s)) = (up, net.host(a).peer_stats(pa))
            && s.mtu != last.0
        {
            last = (s.mtu, net.elapsed() - t);
        }
    });
    last
}

/// The path from a to b shrinks to 1,280 bytes (1,252 of UDP payload) a third of the way
/// into a transfer of 3,000 reliable packets at 1,452 bytes: how long after it the sender
/// fell back to the base, and how many black holes it counted in all. `mixed`: packets of
/// 200 to 1,100 bytes (datagrams of every size), else of 100 bytes (nearly every datagram
/// full).
fn shrink(seed: u64, mixed: bool, loss: f64) -> (Duration, u64) {
    let mut c = link(loss, RATE, BDP);
    c.mtu = Some(PATH);
    let (mut net, pa, _) = pair(seed, c, c, &host_config(1200, MAX_MTU));
    let (a, b) = (addr(1), addr(2));
    assert_eq!(net.host(a).peer_stats(pa).expect("connected").mtu, MAX_MTU, "seed {seed}: the search is over");
    let total = 3000;
    let payload = |i: usize| Bytes::from(vec![7; if mixed { 200 + i * 37 % 900 } else { 100 }]);
    let (mut sent, mut got) = (0, 0);
    let (mut shrunk, mut found) = (None, None);
    let done = net.run_until(600 * SEC, |net| {
        while sent < total && net.host_mut(a).send(pa, 0, payload(sent), SendMode::Reliable).is_ok() {
            sent += 1;
        }
        if shrunk.is_none() && sent > total / 3 {
            let mut l = net.link(a, b);
            l.mtu = Some(1280 - 28);
            net.set_link(a, b, l);
            shrunk = Some(net.elapsed());
        }
        if let Some(at) = shrunk
            && found.is_none()
            && net.host(a).peer_stats(pa).is_some_and(|s| s.transfer.black_holes > 0)
        {
            found = Some(net.elapsed() - at);
        }
        while let Some(e) = net.poll_event(b) {
            got += usize::from(matches!(e, Event::Received { .. }));
        }
        got == total
    });
    assert!(done, "seed {seed}: the transfer ended ({got} of {total})");
    let holes = net.host(a).peer_stats(pa).expect("connected").transfer.black_holes;
    (found.expect("the black hole was found"), holes)
}

pub(crate) fn table(s: &Scale) -> String {
    let mut t = String::from(
        "| packets | loss | discovery | goodput (kB/s) | sender's datagrams per MB | wire bytes per payload byte | black holes |\n\
         |---:|---:|---|---:|---:|---:|---:|\n",
    );
    for (size, loss) in [(300, 0.0), (1000, 0.0), (8000, 0.0), (300, 0.05), (8000, 0.05)] {
        for (name, max) in [("off", 0), ("on, 1452", MAX_MTU)] {
            let runs: Vec<Run> = (1..=s.seeds).map(|seed| bulk(seed, max, size, s.transfer, loss)).collect();
            t += &format!(
                "| {size} B | {:.0}% | {name} | {} | {} | {} | {} |\n",
                loss * 100.0,
                summary(runs.iter().map(|r| r.goodput / 1000.0).collect(), 0),
                summary(runs.iter().map(|r| r.datagrams_per_mb).collect(), 0),
                summary(runs.iter().map(|r| r.wire_per_byte).collect(), 3),
                summary(runs.iter().map(|r| r.black_holes as f64).collect(), 0),
            );
        }
    }
    t += "\n| path MTU | UDP payload it carries | mtu / max_mtu | size reached | after the handshake |\n|---:|---:|---|---:|---:|\n";
    for (path_mtu, sizes) in
        [(576, (512, 9000)), (1280, (512, 9000)), (1500, (512, 9000)), (9000, (512, 9000)), (1500, (1200, MAX_MTU))]
    {
        let path = path_mtu - 28;
        let (size, after) = reach(1, sizes, path);
        t += &format!(
            "| {path_mtu} | {path} | {} / {} | {size} | {:.0} ms |\n",
            sizes.0,
            sizes.1,
            after.as_secs_f64() * 1000.0
        );
    }
    t += "\n| packets | loss | black hole found after | black holes counted |\n|---|---:|---:|---:|\n";
    for (name, mixed) in [("200-1100 B", true), ("100 B", false)] {
        for loss in [0.0, 0.05] {
            let runs: Vec<(Duration, u64)> = (1..=s.seeds).map(|seed| shrink(seed, mixed, loss)).collect();
            t += &format!(
                "| {name} | {:.0}% | {} ms | {} |\n",
                loss * 100.0,
                summary(runs.iter().map(|r| r.0.as_secs_f64() * 1000.0).collect(), 0),
                summary(runs.iter().map(|r| r.1 as f64).collect(), 0),
            );
        }
    }
    t
}
