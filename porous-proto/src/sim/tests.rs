//! The simulator's own API: the tap, held links, and hosts the network does not hold.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::PeerState;

const MS: Duration = Duration::from_millis(1);

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 7000))
}

/// Two hosts the network holds, `a` connecting to `b`, on `link` both ways, with the trace
/// and the tap on; runs `for_` of simulated time.
fn tapped_run(seed: u64, link: LinkConditions, for_: Duration) -> (Network, Vec<TapRecord>) {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(seed);
    net.add_host(a, HostConfig::default()).unwrap();
    net.add_host(b, HostConfig::default()).unwrap();
    net.set_link_both(a, b, link);
    net.enable_trace();
    net.enable_tap();
    let now = net.now();
    let peer = net.host_mut(a).connect(now, b).unwrap();
    let mut tapped = Vec::new();
    let mut sent = 0;
    net.run_for(for_, |net| {
        if net.host(a).peer_stats(peer).is_some_and(|s| s.state == PeerState::Connected) && sent < 50 {
            let data = Bytes::from(vec![sent as u8; 100 + 37 * sent]);
            if net.host_mut(a).send(peer, 0, data, crate::SendMode::Reliable).is_ok() {
                sent += 1;
            }
        }
        tapped.extend(net.drain_tap());
    });
    (net, tapped)
}

#[test]
fn the_tap_records_the_traces_datagrams_with_their_bytes() {
    let (mut net, tapped) = tapped_run(3, LinkConditions::hostile(), 3 * Duration::from_secs(1));
    assert!(tapped.len() > 50, "{} datagrams", tapped.len());
    // Record for record the trace, in the same order, with the bytes as sent.
    let trace: Vec<TraceRecord> = tapped.iter().map(TapRecord::trace).collect();
    assert_eq!(trace, net.trace());
    assert!(tapped.windows(2).all(|w| w[0].sent <= w[1].sent));
    for fate in [Fate::Lost, Fate::Delivered(Duration::ZERO), Fate::Corrupted(Duration::ZERO)] {
        let same = |f: &Fate| core::mem::discriminant(f) == core::mem::discriminant(&fate);
        assert!(tapped.iter().any(|r| same(&r.fate)), "no {fate:?} among {} records", tapped.len());
    }
    // What was taken is gone; the tap goes on recording.
    assert_eq!(net.drain_tap().count(), 0);
    net.run_for(Duration::from_secs(1), |_| {});
    assert!(net.drain_tap().count() > 0, "keepalives");
}

#[test]
fn the_tap_gives_the_same_bytes_for_the_same_seed_and_other_bytes_for_another() {
    let run = |seed| tapped_run(seed, LinkConditions::wifi(), Duration::from_secs(1)).1;
    let first = run(11);
    assert!(first.iter().any(|r| r.payload.len() > 500), "data datagrams recorded");
    assert_eq!(first, run(11));
    // Another seed: other connection nonces, other bytes.
    let other = run(12);
    assert_ne!(
        first.iter().map(|r| &r.payload).collect::<Vec<_>>(),
        other.iter().map(|r| &r.payload).collect::<Vec<_>>()
    );
}

#[test]
fn a_network_without_a_tap_records_nothing() {
    let mut net = Network::new(1);
    net.inject(addr(1), addr(2), Bytes::from_static(b"x"));
    assert_eq!(net.drain_tap().count(), 0);
    assert_eq!(net.in_flight(), 1);
}

#[test]
fn held_links_keep_datagrams_until_the_caller_moves_them() {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(1);
    net.set_link(a, b, LinkConditions::held());
    net.enable_tap();
    for d in ["1", "2", "3"] {
        net.inject(a, b, Bytes::from(d));
    }
    assert_eq!(net.in_flight(), 0, "held, not on their way");
    assert!(!net.step(Duration::from_secs(1)), "nothing happens by itself");
    assert!(net.drain_tap().all(|r| r.fate == Fate::Held));
    let mut q = net.held(a, b);
    assert_eq!(q.len(), 3);
    assert!(q.requeue_next()); // 2 3 1
    assert!(q.duplicate_next()); // 2 3 1 2
    assert!(q.drop_next()); // 3 1 2
    assert_eq!(q.release().as_deref(), Some(&b"3"[..]));
    assert_eq!(q.take_next().as_deref(), Some(&b"1"[..]));
    assert_eq!(q.release_all().collect::<Vec<_>>(), [Bytes::from("2")]);
    let mut q = net.held(a, b);
    assert!(q.is_empty());
    assert!(!q.drop_next() && !q.duplicate_next() && !q.requeue_next());
    assert_eq!((q.release(), q.take_next()), (None, None));
    let s = net.link_stats(a, b);
    assert_eq!(
        (s.sent, s.sent_bytes, s.delivered, s.delivered_bytes, s.dropped, s.duplicated),
        (3, 3, 2, 2, 1, 1),
        "taken is neither delivered nor dropped"
    );
    // Links not held are untouched, and a script still decides first.
    net.script(a, b, |i, _| i != 0);
    net.inject(a, b, Bytes::from_static(b"scripted"));
    net.inject(a, b, Bytes::from_static(b"kept"));
    net.inject(b, a, Bytes::from_static(b"back"));
    assert_eq!(net.held(a, b).len(), 1);
    assert_eq!(net.in_flight(), 1);
    let fates: Vec<Fate> = net.drain_tap().map(|r| r.fate).collect();
    assert_eq!(fates, [Fate::Scripted, Fate::Held, Fate::Delivered(net.elapsed() + 10 * MS)]);
}

#[test]
fn a_handshake_over_held_links_happens_one_datagram_at_a_time() {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(5);
    net.add_host(a, HostConfig::default()).unwrap();
    net.add_host(b, HostConfig::default()).unwrap();
    net.set_link_both(a, b, LinkConditions::held());
    let now = net.now();
    let pa = net.host_mut(a).connect(now, b).unwrap();
    let state = |net: &Network| net.host(a).peer_stats(pa).map(|s| s.state);
    // The request waits; the requester retries on its own timer meanwhile.
    net.run_for(250 * MS, |_| {});
    assert!(net.held(a, b).len() >= 2, "the request and a retry");
    assert_eq!(net.held(b, a).len(), 0);
    assert!(net.held(a, b).drop_next(), "the first request is lost");
    assert!(net.deliver_held(a, b), "the retry arrives");
    net.step(Duration::ZERO);
    assert_eq!(net.held(b, a).len(), 1, "b answered");
    assert!(net.deliver_held(b, a));
    net.step(Duration::ZERO);
    assert_eq!(state(&net), Some(PeerState::Connected));
    assert_eq!(net.link_stats(a, b).dropped, 1);
    // A datagram to a host the network does not hold is lost.
    net.set_link(a, addr(9), LinkConditions::held());
    net.inject(a, addr(9), Bytes::from_static(b"nobody"));
    assert!(!net.deliver_held(a, addr(9)));
    assert!(!net.deliver_held(a, addr(9)), "and gone");
}

#[test]
fn hosts_of_your_own_ride_the_same_links_and_clock() {
    let (a_addr, b_addr) = (addr(1), addr(2));
    let mut a = Host::new(HostConfig::default(), seeded_rng(1)).unwrap();
    let mut b = Host::new(HostConfig::default(), seeded_rng(2)).unwrap();
    let mut net = Network::new(0);
    net.set_link_both(a_addr, b_addr, LinkConditions::perfect(15 * MS));
    let start = net.now();
    a.connect(start, b_addr).unwrap();
    let mut connected = (false, false);
    let mut arrivals = Vec::new();
    while !(connected.0 && connected.1) {
        assert!(net.elapsed() < Duration::from_secs(1), "connects");
        let deadlines = [a.poll_timeout(), b.poll_timeout(), net.next_arrival()];
        let next = deadlines.into_iter().flatten().min().unwrap();
        net.advance_to(next);
        let now = net.now();
        while let Some(d) = net.pop_arrival() {
            arrivals.push((net.elapsed(), d.from, d.to));
            let host = if d.to == a_addr { &mut a } else { &mut b };
            host.handle_datagram(now, d.from, &d.payload);
        }
        for (host, at, up) in [(&mut a, a_addr, &mut connected.0), (&mut b, b_addr, &mut connected.1)] {
            host.step(now);
            net.route(at, host);
            while let Some(e) = host.poll_event() {
                *up |= matches!(e, Event::Connected { .. });
            }
        }
    }
    // Request, answer, acknowledgement: one link latency each.
    assert_eq!(arrivals[..3], [(15 * MS, a_addr, b_addr), (30 * MS, b_addr, a_addr), (45 * MS, a_addr, b_addr)]);
    // What is still on its way stays there while the clock stands still.
    let on_the_way = net.in_flight();
    assert!(on_the_way > 0, "the acknowledgement");
    assert_eq!(std::iter::from_fn(|| net.pop_arrival()).count(), 0);
    net.advance_to(net.now() + Duration::from_secs(1));
    assert_eq!(std::iter::from_fn(|| net.pop_arrival()).count(), on_the_way);
    // The clock never goes back, and nothing arrives before its time.
    let before = net.now();
    net.advance_to(start);
    assert_eq!(net.now(), before);
    net.inject(a_addr, b_addr, Bytes::from_static(b"x"));
    assert_eq!(net.next_arrival(), Some(net.now() + 15 * MS));
    assert_eq!(net.pop_arrival(), None);
    net.advance_to(net.now() + 15 * MS);
    let d = net.pop_arrival().unwrap();
    assert_eq!((d.from, d.to, &d.payload[..]), (a_addr, b_addr, &b"x"[..]));
}

#[test]
fn datagrams_due_together_arrive_in_the_order_they_were_sent() {
    let mut net = Network::new(0);
    net.set_default_link(LinkConditions::perfect(5 * MS));
    for i in 0..20u8 {
        // Alternating links, one instant.
        net.inject(addr(1 + i % 2), addr(3), Bytes::from(vec![i]));
    }
    net.advance_to(net.now() + 5 * MS);
    let got: Vec<u8> = std::iter::from_fn(|| net.pop_arrival()).map(|d| d.payload[0]).collect();
    assert_eq!(got, (0..20).collect::<Vec<_>>());
}

#[test]
fn links_are_told_apart_whatever_the_order_and_the_address_family() {
    let v6 = |i: u16| SocketAddr::from(([0xfd00, 0, 0, 0, 0, 0, 0, i], 7000));
    let (a, b, c, d, e) = (addr(1), addr(2), addr(3), v6(4), v6(5));
    let mut net = Network::new(0);
    net.set_default_link(LinkConditions::held());
    // Two directions, a third link, IPv6 both ways and mixed, and back: more links than
    // the look-up cache holds, in an order that misses it.
    let sends = [(a, b), (b, a), (a, c), (d, e), (e, d), (a, d), (d, a), (a, b), (c, a), (b, a), (a, b)];
    for (n, &(from, to)) in sends.iter().enumerate() {
        net.inject(from, to, Bytes::from(vec![n as u8]));
    }
    let mut links = sends.to_vec();
    links.sort();
    links.dedup();
    assert_eq!(links.len(), 8);
    for (from, to) in links {
        let got: Vec<u8> = net.held(from, to).release_all().map(|d| d[0]).collect();
        let want: Vec<u8> = sends.iter().enumerate().filter(|(_, l)| **l == (from, to)).map(|(n, _)| n as u8).collect();
        assert_eq!(got, want, "{from} -> {to}");
        assert_eq!(net.link_stats(from, to).sent, want.len() as u64, "{from} -> {to}");
    }
    assert_eq!(net.held(c, b).len(), 0, "a link nothing was sent on");
}

#[test]
fn links_sharing_a_bottleneck_share_its_rate_and_its_queue() {
    // Two senders each offer 1,000 datagrams of 1,000 bytes at once into a 1 MB/s
    // bottleneck with a 100 kB queue: alone, each link would queue 100 and deliver them
    // in 0.1 s; shared, the pair gets one queue of 100 datagrams and one rate.
    let (s1, s2, r) = (addr(1), addr(2), addr(3));
    let mut c = LinkConditions::perfect(5 * MS);
    c.bandwidth = Some(1_000_000);
    c.queue = 100_000;
    for shared in [false, true] {
        let mut net = Network::new(0);
        net.set_link(s1, r, c);
        net.set_link(s2, r, c);
        if shared {
            net.share_bottleneck(&[(s1, r), (s2, r)]);
        }
        for i in 0..1_000u32 {
            for s in [s1, s2] {
                net.inject(s, r, Bytes::from(vec![i as u8; 1_000]));
            }
        }
        let delivered = |net: &Network| net.link_stats(s1, r).delivered + net.link_stats(s2, r).delivered;
        let drops = net.link_stats(s1, r).queue_drops + net.link_stats(s2, r).queue_drops;
        // Everything queued leaves within the queue's drain time plus the latency.
        net.advance_to(net.now() + Duration::from_millis(300));
        let mut arrived = 0;
        while net.pop_arrival().is_some() {
            arrived += 1;
        }
        assert_eq!(arrived, delivered(&net));
        if shared {
            // One queue of 100 datagrams (and the one in service) for both.
            assert!((100..=104).contains(&arrived), "shared: {arrived} delivered");
            assert!(net.link_stats(s1, r).delivered > 40 && net.link_stats(s2, r).delivered > 40, "both got a share");
        } else {
            assert!((200..=206).contains(&arrived), "apart: {arrived} delivered");
        }
        assert_eq!(drops + arrived, 2_000);
    }
}

#[test]
fn queued_bytes_is_what_the_bottleneck_holds_and_drains_at_its_rate() {
    let (s1, s2, r) = (addr(1), addr(2), addr(3));
    let mut c = LinkConditions::perfect(5 * MS);
    c.bandwidth = Some(1_000_000);
    c.queue = 100_000;
    let mut net = Network::new(0);
    net.set_link(s1, r, c);
    net.set_link(s2, r, c);
    assert_eq!(net.queued_bytes(s1, r), 0, "nothing sent");
    assert_eq!(net.queued_bytes(r, s1), 0, "no bandwidth limit: never a queue");
    for i in 0..50u32 {
        net.inject(s1, r, Bytes::from(vec![i as u8; 1_000]));
    }
    assert_eq!(net.queued_bytes(s1, r), 50_000, "50 datagrams of 1,000 bytes");
    assert_eq!(net.queued_bytes(s2, r), 0, "each link its own queue");
    net.advance_to(net.now() + Duration::from_millis(20));
    assert_eq!(net.queued_bytes(s1, r), 30_000, "20 ms at 1 MB/s drained 20 kB");
    net.share_bottleneck(&[(s1, r), (s2, r)]);
    for i in 0..10u32 {
        net.inject(s2, r, Bytes::from(vec![i as u8; 1_000]));
    }
    assert_eq!(net.queued_bytes(s1, r), 10_000, "shared: one queue, seen from both links");
    assert_eq!(net.queued_bytes(s2, r), 10_000);
    net.advance_to(net.now() + Duration::from_secs(1));
    assert_eq!(net.queued_bytes(s1, r), 0, "drained");
}

/// Two hosts the network holds, `a` connected to `b` over a perfect 10 ms link both ways;
/// returns a's id for b.
fn connected_pair(seed: u64) -> (Network, crate::PeerId) {
    let (a, b) = (addr(1), addr(2));
    let mut net = Network::new(seed);
    net.add_host(a, HostConfig::default()).unwrap();
    net.add_host(b, HostConfig::default()).unwrap();
    net.set_link_both(a, b, LinkConditions::perfect(10 * MS));
    let now = net.now();
    let peer = net.host_mut(a).connect(now, b).unwrap();
    assert!(net.run_until(Duration::from_secs(1), |net| {
        net.host(a).peer_stats(peer).is_some_and(|s| s.state == PeerState::Connected)
    }));
    net.run_for(Duration::from_secs(1), |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
    (net, peer)
}

#[test]
fn a_stalled_host_handles_its_backlog_at_once_when_its_loop_resumes() {
    let (a, b) = (addr(1), addr(2));
    let (mut net, peer) = connected_pair(4);
    net.stall(b, 40 * MS);
    let stalled_at = net.elapsed();
    let sent_back = net.link_stats(b, a).sent;
    let mut received = Vec::new();
    for i in 0..3u8 {
        net.host_mut(a).send(peer, 0, Bytes::from(vec![i; 20]), crate::SendMode::Reliable).unwrap();
        net.run_for(5 * MS, |net| {
            while let Some(e) = net.poll_event(b) {
                received.push((net.elapsed(), e));
            }
        });
    }
    assert!(net.is_stalled(b) && received.is_empty() && net.link_stats(b, a).sent == sent_back, "b does nothing");
    net.run_for(50 * MS, |net| {
        while let Some(e) = net.poll_event(b) {
            received.push((net.elapsed(), e));
        }
    });
    // All three arrived during the stall (10, 15, 20 ms in) and are handled at its end.
    let at: Vec<Duration> = received.iter().filter(|(_, e)| matches!(e, Event::Received { .. })).map(|r| r.0).collect();
    assert_eq!(at, vec![stalled_at + 40 * MS; 3]);
    assert!(!net.is_stalled(b) && net.link_stats(b, a).sent > sent_back, "b answers once it resumes");
}

#[test]
fn random_stalls_are_seeded() {
    let run = |stalls: Option<Stalls>| {
        let (mut net, peer) = connected_pair(5);
        let (a, b) = (addr(1), addr(2));
        net.set_stalls(b, stalls);
        let mut stalled = 0;
        for _ in 0..200u32 {
            net.host_mut(a).send(peer, 1, Bytes::from(vec![1; 20]), crate::SendMode::Unreliable).unwrap();
            net.run_for(10 * MS, |net| while net.poll_event(a).is_some() || net.poll_event(b).is_some() {});
            stalled += u32::from(net.is_stalled(b));
        }
        (net.link_stats(b, a), stalled)
    };
    let (plain, never) = run(None);
    let (busy, sometimes) = run(Some(Stalls::busy()));
    assert_eq!(never, 0);
    // Stalls of 5-20 ms every 150-250 ms: b is found stalled at some of the 200 instants.
    assert!((5..60).contains(&sometimes), "{sometimes}");
    assert_ne!(plain, busy, "b's acknowledgements went otherwise");
    assert_eq!(run(Some(Stalls::busy())), (busy, sometimes), "the same seed, the same run");
}
