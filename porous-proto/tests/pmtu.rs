//! Path MTU discovery (`PeerConfig::max_mtu`) over simulated paths whose links drop every
//! datagram larger than they carry: each side finds the largest size its path takes,
//! within the search's step, never above the ceiling, a path that shrinks mid-stream
//! (a black hole) costs no reliable packet and is found within a round trip or two, and
//! fragmented packets take fewer, larger fragments once the size grew; while random loss
//! and acknowledgements held up on a path that carries every size are no black hole
//! (issue 38).

#![cfg(feature = "sim")]

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use porous_proto::sim::{LinkConditions, Network};
use porous_proto::{Event, HostConfig, PeerId, SendMode, TransferStats};
use quickcheck::{Gen, QuickCheck, TestResult};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);
/// IPv4 and UDP headers: a path MTU less this is the largest UDP payload.
const HEADERS: usize = 28;
/// The search stops this close to the path's size.
const STEP: usize = 16;

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 9000))
}

fn config(mtu: usize, max_mtu: usize) -> HostConfig {
    let mut c = HostConfig::default();
    c.peer.mtu = mtu;
    c.peer.max_mtu = max_mtu;
    c
}

/// a and b connected over links carrying `ab` and `ba` bytes of UDP payload, 25 ms each
/// way; returns the network, a's id for b and b's for a.
fn pair(seed: u64, (ab, ba): (usize, usize), cfg: &HostConfig) -> (Network, PeerId, PeerId) {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(seed);
    net.add_host(a, cfg.clone()).unwrap();
    net.add_host(b, cfg.clone()).unwrap();
    for (from, to, mtu) in [(a, b, ab), (b, a, ba)] {
        let mut l = LinkConditions::perfect(25 * MS);
        l.mtu = Some(mtu);
        net.set_link(from, to, l);
    }
    let now = net.now();
    let pa = net.host_mut(a).connect(now, b).unwrap();
    let mut pb = None;
    assert!(net.run_until(10 * SEC, |net| {
        while net.poll_event(a).is_some() {}
        while let Some(e) = net.poll_event(b) {
            if let Event::Connected { peer, .. } = e {
                pb = Some(peer);
            }
        }
        pb.is_some()
    }));
    (net, pa, pb.unwrap())
}

/// Each side's size after `run`, with traffic both ways.
fn sizes(net: &mut Network, pa: PeerId, pb: PeerId, run: Duration) -> (usize, usize) {
    let (a, b) = (addr(1), addr(2));
    net.run_for(run, |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
    (net.host(a).peer_stats(pa).unwrap().mtu, net.host(b).peer_stats(pb).unwrap().mtu)
}

#[test]
fn each_direction_finds_its_paths_size() {
    // Path MTUs of 576, 1,280, 1,500 and 9,000 bytes, one each way, and the ceiling
    // (max_mtu) above, at or below each.
    for (path_ab, path_ba) in [(576, 1500), (1280, 9000), (1500, 1280), (9000, 576)] {
        for max in [1452, 9000] {
            let (ab, ba) = (path_ab - HEADERS, path_ba - HEADERS);
            let cfg = config(512, max);
            let (mut net, pa, pb) = pair(1, (ab, ba), &cfg);
            let (sa, sb) = sizes(&mut net, pa, pb, 20 * SEC);
            for (side, found, path) in [("a", sa, ab), ("b", sb, ba)] {
                let want = path.min(max);
                assert!(
                    found <= want && found + STEP > want,
                    "{side} {path_ab}/{path_ba} max {max}: {found}, not {want}"
                );
            }
            // Nothing larger than a path carries was ever counted as application loss.
            let s = net.host(addr(1)).peer_stats(pa).unwrap().transfer;
            assert_eq!((s.frames_lost, s.black_holes), (0, 0), "{path_ab}/{path_ba} max {max}");
            assert!(s.mtu_probes_lost > 0 || ab >= max, "probes above the path are lost");
        }
    }
}

#[test]
fn a_path_reaches_its_size_in_a_round_trip_when_it_carries_the_ceiling() {
    let (mut net, pa, pb) = pair(2, (1472, 1472), &config(1200, 1452));
    let start = net.elapsed();
    let mut at = None;
    net.run_until(5 * SEC, |net| {
        while net.poll_event(addr(1)).is_some() || net.poll_event(addr(2)).is_some() {}
        if net.host(addr(1)).peer_stats(pa).unwrap().mtu == 1452 {
            at = Some(net.elapsed() - start);
        }
        at.is_some()
    });
    let took = at.expect("a reached 1452");
    assert!(took <= 60 * MS, "one round trip (50 ms), not {took:?}");
    let (_, sb) = sizes(&mut net, pa, pb, SEC);
    assert_eq!(sb, 1452);
}

#[test]
fn discovery_is_off_unless_both_sides_take_larger_datagrams() {
    for (a_max, b_max) in [(0, 0), (1452, 0), (0, 1452), (1100, 1100)] {
        let (a, b) = (addr(1), addr(2));
        let mut net = Network::new(3);
        net.add_host(a, config(1200, a_max)).unwrap();
        net.add_host(b, config(1200, b_max)).unwrap();
        let now = net.now();
        let pa = net.host_mut(a).connect(now, b).unwrap();
        net.run_for(5 * SEC, |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
        let s = net.host(a).peer_stats(pa).unwrap();
        assert_eq!(s.mtu, 1200, "{a_max}/{b_max}");
        if a_max > 1200 {
            // b answers no probe above what it takes.
            assert!(s.transfer.mtu_probes_lost >= 3, "{a_max}/{b_max}");
        } else {
            assert_eq!(s.transfer.mtu_probes, 0, "{a_max}/{b_max}");
        }
    }
}

#[test]
fn a_black_hole_mid_stream_falls_back_and_loses_nothing() {
    let (a, b) = (addr(1), addr(2));
    let (mut net, pa, pb) = pair(4, (1472, 1472), &config(1200, 1452));
    assert_eq!(sizes(&mut net, pa, pb, SEC).0, 1452);
    // Bulk traffic of packets of several sizes (so frames fill the larger datagrams), then
    // the path from a to b shrinks to 1,280 bytes (a tunnel on a new route).
    let total = 3000;
    let payload = |i: u32| {
        let mut v = i.to_le_bytes().to_vec();
        v.resize(200 + (i as usize * 37) % 900, (i % 251) as u8);
        Bytes::from(v)
    };
    let (mut sent, mut got) = (0u32, Vec::new());
    let (mut shrunk, mut found) = (None, None);
    let done = net.run_until(120 * SEC, |net| {
        while sent < total && net.host_mut(a).send(pa, 0, payload(sent), SendMode::Reliable).is_ok() {
            sent += 1;
        }
        if shrunk.is_none() && sent > total / 3 {
            let mut l = net.link(a, b);
            l.mtu = Some(1280 - HEADERS);
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
            if let Event::Received { data, .. } = e {
                got.push(data);
            }
        }
        while net.poll_event(a).is_some() {}
        got.len() == total as usize
    });
    assert!(done, "every packet arrived ({} of {total})", got.len());
    for (i, d) in got.iter().enumerate() {
        assert_eq!(*d, payload(i as u32), "packet {i}: exactly once, in order");
    }
    // Found a reordering window (a round trip and a quarter) after the first frames
    // too large went, as the path still acknowledges the smaller ones.
    let found = found.expect("the black hole was seen during the transfer");
    assert!(found <= 100 * MS, "found {found:?} after the path shrank");
    // The new search ends (each size too large costs three probe timeouts).
    sizes(&mut net, pa, pb, 10 * SEC);
    let s = net.host(a).peer_stats(pa).unwrap();
    assert!(s.transfer.black_holes >= 1, "the black hole was seen");
    assert!(s.mtu <= 1280 - HEADERS && s.mtu + STEP > 1280 - HEADERS, "a found the new size: {}", s.mtu);
}

/// Sends `sizes.len()` reliable packets from a to b on channel 0 as fast as the queue
/// takes them, changing a's path to b as `on_sent` says once that many are queued;
/// returns the datagrams a sent meanwhile, after checking b received every packet exactly
/// once and in order.
fn transfer(net: &mut Network, pa: PeerId, sizes: &[usize], mut on_sent: impl FnMut(&mut Network, usize)) -> u64 {
    let (a, b) = (addr(1), addr(2));
    let payload = |i: usize| {
        let mut v = (i as u32).to_le_bytes().to_vec();
        v.resize(sizes[i], (i % 251) as u8);
        Bytes::from(v)
    };
    let before = net.host(a).peer_stats(pa).unwrap().transfer.datagrams_sent;
    let (mut sent, mut got) = (0, Vec::new());
    let done = net.run_until(120 * SEC, |net| {
        while sent < sizes.len() && net.host_mut(a).send(pa, 0, payload(sent), SendMode::Reliable).is_ok() {
            sent += 1;
            on_sent(net, sent);
        }
        while let Some(e) = net.poll_event(b) {
            if let Event::Received { data, .. } = e {
                got.push(data);
            }
        }
        while net.poll_event(a).is_some() {}
        got.len() == sizes.len()
    });
    assert!(done, "every packet arrived ({} of {})", got.len(), sizes.len());
    for (i, d) in got.iter().enumerate() {
        assert_eq!(*d, payload(i), "packet {i}: exactly once, in order");
    }
    net.host(a).peer_stats(pa).unwrap().transfer.datagrams_sent - before
}

#[test]
fn fragmented_packets_take_fewer_datagrams_once_the_size_grew_and_survive_a_black_hole() {
    // A 1,500-byte path (1,472 bytes of UDP payload), the base at 1,200.
    let packets = 200;
    let eight_kb = vec![8000; packets];
    let per_packet = |datagrams: u64| datagrams as f64 / packets as f64;
    let (mut net, pa, _) = pair(5, (1472, 1472), &config(1200, 0));
    let base = per_packet(transfer(&mut net, pa, &eight_kb, |_, _| {}));
    let (mut net, pa, pb) = pair(5, (1472, 1472), &config(1200, 1452));
    assert_eq!(sizes(&mut net, pa, pb, SEC).0, 1452);
    let grown = per_packet(transfer(&mut net, pa, &eight_kb, |_, _| {}));
    // 8,000 bytes: 7 fragments of 16 granules (1,168 bytes) at the base, 6 of 19 (1,387
    // bytes) at 1,452; besides them, a few datagrams of acknowledgements and probes.
    eprintln!("datagrams per 8,000-byte packet: {base:.2} at 1,200, {grown:.2} at 1,452");
    assert!((7.0..7.3).contains(&base), "{base}");
    assert!((6.0..6.3).contains(&grown), "{grown}");

    // Then the path falls back to 1,200 bytes mid-transfer (a black hole): fragments cut
    // for 1,452 bytes, queued or in flight, and packets that travelled whole at 1,452
    // (1,300 bytes) are cut at a granule to fit, and every packet arrives exactly once.
    let mixed: Vec<usize> = (0..packets).map(|i| if i % 3 == 0 { 1300 } else { 8000 }).collect();
    let (a, b) = (addr(1), addr(2));
    transfer(&mut net, pa, &mixed, |net, sent| {
        if sent == packets / 3 {
            let mut l = net.link(a, b);
            l.mtu = Some(1200);
            net.set_link(a, b, l);
        }
    });
    let s = net.host(a).peer_stats(pa).unwrap();
    assert!(s.transfer.black_holes >= 1, "the black hole was seen");
    assert!(s.transfer.messages_cut > 0, "messages cut for 1,452 bytes were cut again");
    assert_eq!(s.mtu, 1200, "and the size fell back");
}

/// `total` bytes of reliable 300-byte packets from a to b, the send queue kept full (frames
/// of four packets, larger than the base), 25 ms each way through a 10 MB/s bottleneck,
/// losing `loss` at random each way, with no MTU limit: the path carries every size, so no
/// black hole is there to find. `stall`: b's loop runs late by this much once half has
/// arrived. Returns the sender's transfer statistics.
fn bulk_without_a_limit(seed: u64, loss: f64, total: usize, stall: Option<Duration>) -> TransferStats {
    let (a, b) = (addr(1), addr(2));
    let mut link = LinkConditions::perfect(25 * MS);
    link.loss = loss;
    link.bandwidth = Some(10_000_000);
    link.queue = 500_000;
    let mut cfg = config(1200, 1452);
    cfg.peer.timeout = 60 * SEC;
    let mut net = Network::new(seed);
    net.add_host(a, cfg.clone()).unwrap();
    net.add_host(b, cfg).unwrap();
    net.set_link_both(a, b, link);
    let (pa, _) = net.establish((a, b), None, 60 * SEC).expect("connected");
    net.run_for(SEC, |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
    assert_eq!(net.host(a).peer_stats(pa).unwrap().mtu, 1452, "seed {seed}: the search reached the ceiling");
    let packets = total.div_ceil(300);
    let (mut sent, mut got, mut stalled) = (0, 0, false);
    let done = net.run_until(600 * SEC, |net| {
        while sent < packets && net.host_mut(a).send(pa, 0, Bytes::from(vec![7; 300]), SendMode::Reliable).is_ok() {
            sent += 1;
        }
        if let Some(late) = stall.filter(|_| !stalled && got > packets / 2) {
            net.stall(b, late);
            stalled = true;
        }
        while let Some(e) = net.poll_event(b) {
            got += usize::from(matches!(e, Event::Received { .. }));
        }
        while net.poll_event(a).is_some() {}
        got == packets
    });
    assert!(done, "seed {seed}: every packet arrived ({got} of {packets})");
    net.host(a).peer_stats(pa).unwrap().transfer
}

#[test]
fn random_loss_is_no_black_hole() {
    // Transfers that declared a black hole at 5% loss (issue 38). Seed 4's 2 MB (a run of
    // `docs/simulated.md`'s table): at the end of the transfer only resends are in flight,
    // three of them lost in a row, and the later resend that arrived did not count as
    // proof of the size (a frame sent more than once). The others: three or four frames in
    // a row lost, found by a resend timeout barely longer than the round trip, before the
    // acknowledgement of the frame sent just after them came.
    for (seed, total) in [(4, 2_000_000), (81, 300_000), (86, 300_000), (158, 300_000), (252, 300_000)] {
        let s = bulk_without_a_limit(seed, 0.05, total, None);
        assert!(s.frames_lost > 0, "seed {seed}: the run lost frames");
        assert_eq!(s.black_holes, 0, "seed {seed}: {s:?}");
    }
}

#[test]
fn acknowledgements_held_up_are_no_black_hole() {
    // The receiver's loop runs late mid-transfer: every frame in flight outlives the resend
    // timeout, large or not, until the acknowledgements come at once (over real UDP, the
    // black holes of issue 38). Up to a resend timeout and a reordering window late.
    for late in [5, 20, 50] {
        let s = bulk_without_a_limit(1, 0.0, 300_000, Some(late * MS));
        assert!(s.frames_lost > 0, "{late} ms: frames timed out");
        assert_eq!(s.black_holes, 0, "{late} ms late: {s:?}");
    }
}

#[test]
fn random_loss_without_an_mtu_limit_is_no_black_hole_over_seeds() {
    // 5% to 10% loss each way, a fixed draw of seeds (the generator is seeded: the same
    // cases each run).
    fn prop(seed: u64, loss: u8) -> TestResult {
        let loss = 0.05 + f64::from(loss % 51) / 1000.0;
        let s = bulk_without_a_limit(seed, loss, 150_000, None);
        if s.black_holes == 0 {
            TestResult::passed()
        } else {
            TestResult::error(format!("seed {seed}, loss {loss}: {s:?}"))
        }
    }
    QuickCheck::new().rng(Gen::from_size_and_seed(100, 38)).tests(10).quickcheck(prop as fn(u64, u8) -> TestResult);
}
