//! Simulated figures for a fixed grid of network conditions, compared with the snapshot in
//! `docs/simulated.md`, so congestion control, loss recovery or latency regressions show in
//! review. Simulated time makes every figure deterministic. Run with `POROUS_BLESS=1` to
//! rewrite the snapshot after a deliberate change, and review the diff.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use porous_proto::sim::{LinkConditions, Network};
use porous_proto::{Event, HostConfig, PeerId, SendMode};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 9000))
}

fn grid() -> Vec<(&'static str, LinkConditions)> {
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

fn setup(c: LinkConditions) -> (Network, SocketAddr, SocketAddr, PeerId) {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(2026);
    let mut cfg = HostConfig::default();
    cfg.peer.timeout = 60 * SEC;
    net.add_host(a, cfg.clone()).unwrap();
    net.add_host(b, cfg).unwrap();
    net.set_link_both(a, b, c);
    let now = net.now();
    let pa = net.host_mut(a).connect(now, b).unwrap();
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

/// Bulk: 1 MB of 1000-byte reliable packets, the queue kept full. Returns goodput in
/// kB/s and the share of frames resent.
fn bulk(c: LinkConditions) -> (f64, f64) {
    let (mut net, a, b, pa) = setup(c);
    let total = 1000u32;
    let mut sent = 0u32;
    let mut got = 0u32;
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
    let s = net.host(a).peer_stats(pa).unwrap().transfer;
    (f64::from(total) / secs, s.frames_resent as f64 / s.frames_sent as f64 * 100.0)
}

/// A game: 60 Hz, each tick a 32-byte reliable input and a 200-byte unreliable state, for
/// 20 s. Returns reliable delivery latency p50 and p99 in ms, the share of unreliable
/// packets delivered, and wire bytes (both ways) per packet sent.
fn game(c: LinkConditions) -> (f64, f64, f64, f64) {
    let (mut net, a, b, pa) = setup(c);
    let tick = Duration::from_micros(16_667);
    let ticks = 1200u32;
    let sent_at: Vec<Duration> = Vec::new();
    let sent_at = std::cell::RefCell::new(sent_at);
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
        net.host_mut(a).send(pa, 0, Bytes::from(input), SendMode::Reliable).unwrap();
        net.host_mut(a).send(pa, 1, Bytes::from(vec![1; 200]), SendMode::Unreliable).unwrap();
        net.run_for(tick, &mut stamp);
    }
    net.run_for(30 * SEC, &mut stamp);
    assert_eq!(latencies.len(), ticks as usize, "every input arrives ({c:?}): {:?}", net.host(a).peer_stats(pa));
    latencies.sort_by(f64::total_cmp);
    let p = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    let wire = net.link_stats(a, b).sent_bytes + net.link_stats(b, a).sent_bytes - wire_before;
    (p(0.5), p(0.99), f64::from(unreliable) / f64::from(ticks) * 100.0, wire as f64 / f64::from(2 * ticks))
}

fn table() -> String {
    let mut t = String::from(
        "| conditions | bulk goodput | bulk frames resent | input latency p50 | p99 | state delivered | wire bytes per packet |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (name, c) in grid() {
        let (goodput, resent) = bulk(c);
        let (p50, p99, delivered, wire) = game(c);
        writeln!(
            t,
            "| {name} | {goodput:.0} kB/s | {resent:.1}% | {p50:.1} ms | {p99:.1} ms | {delivered:.1}% | {wire:.1} B |"
        )
        .unwrap();
    }
    t
}

#[test]
fn simulated_figures_match_the_snapshot() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/simulated.md");
    let doc = std::fs::read_to_string(path).expect("docs/simulated.md exists");
    let (begin, end) = ("<!-- generated:netsim:begin -->\n", "<!-- generated:netsim:end -->");
    let (b, e) = (doc.find(begin).expect("begin marker"), doc.find(end).expect("end marker"));
    let want = format!("{}{}{}", &doc[..b + begin.len()], table(), &doc[e..]);
    if std::env::var_os("POROUS_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
    } else {
        assert!(
            doc == want,
            "simulated figures changed; rerun with POROUS_BLESS=1 and review docs/simulated.md\n{}",
            table()
        );
    }
}
