//! Loss recovery as a busy or silent peer sees it (issue 32): a loop that runs late causes
//! no spurious resends, a peer gone silent is not flooded with resends, repair copies
//! cost a clean path nothing, and the transfer counters add up.

#[path = "../benches/netsim/workloads.rs"]
#[allow(dead_code)]
mod workloads;

use std::time::Duration;

use bytes::Bytes;
use porous_proto::sim::{LinkConditions, Network, Stalls};
use porous_proto::{CongestionControl, SendMode};
use workloads::{MS, SEC, addr, config, pair, stalled_stream, stream_cost, transfer};

/// Issue 32, item 2: over a lossless 25 ms path with a 60 Hz reliable stream (one way and
/// both ways), either side's loop late by 5-20 ms about every 200 ms: spurious resends and
/// spurious losses each at most 1% of the frames sent, on both sides, and every loss
/// declared is found spurious (the path lost nothing).
#[test]
fn a_late_loop_causes_no_spurious_resends() {
    let mut failed = Vec::new();
    for (stalling, both_ways) in [(1, false), (2, false), (1, true), (2, true)] {
        let r = stalled_stream(7, Some((addr(stalling), Stalls::busy())), both_ways, 60);
        for (side, s) in [("client", r.client), ("server", r.server)] {
            let sent = s.frames_sent.max(1) as f64;
            let ctx = format!(
                "host {stalling} stalling, both ways {both_ways}, {side}: {} frames sent, {} resent, {} lost, {} found spurious",
                s.frames_sent, s.frames_resent, s.frames_lost, s.losses_spurious
            );
            println!("{ctx}");
            if s.frames_resent as f64 / sent > 0.01 || s.frames_lost as f64 / sent > 0.01 {
                failed.push(format!("over 1%: {ctx}"));
            }
            if s.losses_spurious != s.frames_lost {
                failed.push(format!("a loss on a lossless path not found spurious: {ctx}"));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Issue 32, item 2: a loop late by longer than the resend timeout (150 ms every 2 s,
/// over a 50 ms round trip) finds, when it resumes, the acknowledgements of everything it
/// sent before the stall waiting in its backlog. Loss detection runs once the whole
/// backlog is handled, so the late side declares none of its frames lost.
#[test]
fn a_loop_back_from_a_long_stall_reads_its_whole_backlog_before_judging_losses() {
    let long = Stalls::new((2 * SEC, 2 * SEC), (150 * MS, 150 * MS));
    for (stalling, both_ways) in [(1, false), (1, true), (2, true)] {
        let r = stalled_stream(9, Some((addr(stalling), long)), both_ways, 20);
        let s = if stalling == 1 { r.client } else { r.server };
        assert!(s.frames_sent > 1000, "{s:?}");
        assert_eq!((s.frames_lost, s.frames_resent), (0, 0), "host {stalling} stalling, both ways {both_ways}: {s:?}");
    }
}

/// Issue 32, item 3: a peer gone silent gets resends at a backed-off rate, not one
/// datagram a millisecond for the whole timeout (675 KB each way before); the keepalive
/// and the timeout stay as they were.
#[test]
fn a_blackout_gets_backed_off_resends() {
    let r = workloads::blackout(5, None);
    println!("{r:?}");
    let cfg = porous_proto::HostConfig::default().peer;
    for (side, (datagrams, bytes), gave_up) in
        [("client", r.client, r.client_gave_up), ("server", r.server, r.server_gave_up)]
    {
        let ctx = format!("{side}: {datagrams} datagrams, {bytes} bytes into the blackout, gave up after {gave_up:?}");
        assert!(gave_up >= cfg.timeout && gave_up < cfg.timeout + SEC, "the timeout: {ctx}");
        assert!(bytes <= 8_000, "{ctx}");
        let keepalives = (cfg.timeout.as_millis() / cfg.ping_interval.as_millis()) as u64;
        assert!(datagrams >= keepalives, "a keepalive every ping interval: {ctx}");
    }
}

/// Issue 32, item 3: when the path comes back after an 8 s outage (2 s short of the
/// timeout), the first keepalive that gets through ends the backoff: what waited is
/// delivered within a keepalive interval and a few round trips, not after the longest
/// backed-off timeout (2.9 s).
#[test]
fn after_an_outage_recovery_does_not_wait_for_the_backoff() {
    let r = workloads::blackout(6, Some(8 * SEC));
    println!("{r:?}");
    assert!(r.client.1 <= 4_000 && r.server.1 <= 4_000, "{r:?}");
    let recovered = r.recovered.expect("every input arrived");
    let ping = porous_proto::HostConfig::default().peer.ping_interval;
    assert!(recovered <= ping + 200 * MS, "{r:?}");
}

/// Issue 32, item 6: on a lossless path, repair copies add at most 5% to the datagrams and
/// the bytes of a one-way stream of small reliable messages (the four streams).
#[test]
fn repair_costs_a_clean_path_nothing() {
    let mut failed = Vec::new();
    for (latency, every) in [(10, 10), (10, 16), (25, 33), (1, 10)] {
        let (latency, every) = (latency * MS, every * MS);
        let count = (5 * SEC).as_millis() as u32 / every.as_millis() as u32;
        let on = stream_cost(3, latency, 0.0, every, count, true);
        let off = stream_cost(3, latency, 0.0, every, count, false);
        let ctx = format!("{latency:?} one way, every {every:?}: repair on {on:?}, off {off:?}");
        println!("{ctx}");
        if on.datagrams as f64 > off.datagrams as f64 * 1.05 || on.bytes as f64 > off.bytes as f64 * 1.05 {
            failed.push(ctx);
        }
    }
    assert!(failed.is_empty(), "repair adds more than 5%: {failed:#?}");
}

/// Issue 32, item 6: where a round trip holds many frames, repair does not wait for a
/// loss before copying (a loss without a copy would hold them all for its resend): over
/// a satellite path (600 ms round trips, 0.5% loss) every input of a 60 Hz game but the
/// first few has its copy, so the path's first loss is repaired too.
#[test]
fn a_long_path_copies_before_its_first_loss() {
    let c = LinkConditions::satellite();
    let (mut net, pa, _) = pair(5, c, c, &config(CongestionControl::default(), true));
    let (a, b) = (addr(1), addr(2));
    let ticks = 600;
    for _ in 0..ticks {
        net.host_mut(a).send(pa, 0, Bytes::from(vec![7; 32]), SendMode::Reliable).expect("send");
        net.host_mut(a).send(pa, 1, Bytes::from(vec![1; 200]), SendMode::Unreliable).expect("send");
        net.run_for(
            Duration::from_micros(16_667),
            |net| {
                while net.poll_event(a).is_some() || net.poll_event(b).is_some() {}
            },
        );
    }
    let t = transfer(&net, a, pa);
    assert!(t.repair_copies + 10 >= ticks, "{} inputs, {} copies: {t:?}", ticks, t.repair_copies);
}

/// The invariants between one side's transfer counters, at any moment.
fn check_counters(side: &str, s: &porous_proto::PeerStats) -> Result<(), String> {
    let t = &s.transfer;
    let transmissions = t.frames_sent + t.frames_resent;
    let checks = [
        // Every frame sent is acknowledged, given up, or still outstanding.
        (t.frames_acked + t.frames_unacknowledged + s.frames_in_flight as u64 == t.frames_sent, "frames conserved"),
        (t.losses_spurious <= t.frames_lost, "spurious losses are losses"),
        (t.frames_resent <= t.frames_lost, "a resend follows a loss"),
        (t.congestion_undos <= t.losses_spurious, "an undo follows spurious losses"),
        // A loss taken as real is a transmission never acknowledged.
        (t.frames_lost - t.losses_spurious <= transmissions - t.frames_acked, "real losses are unacknowledged"),
        (t.datagrams_sent >= transmissions, "a transmission is a datagram"),
        (t.probes <= t.frames_sent, "a probe is a frame"),
    ];
    match checks.iter().find(|(ok, _)| !ok) {
        Some((_, what)) => Err(format!("{side}: {what}: {s:?}")),
        None => Ok(()),
    }
}

/// Issue 32, item 4: the transfer counters of both sides add up at every moment of a game
/// over lossy, hostile, stalling and dying paths.
#[test]
fn transfer_counters_add_up() {
    use porous_proto::sim::LinkConditions;
    use porous_proto::{Event, SendMode};
    let lossy = |loss| {
        let mut c = LinkConditions::perfect(25 * MS);
        c.loss = loss;
        c
    };
    let cases: [(&str, LinkConditions, Option<Stalls>); 6] = [
        ("5% loss", lossy(0.05), None),
        ("30% loss", lossy(0.30), None),
        ("hostile", LinkConditions::hostile(), None),
        ("mobile", LinkConditions::mobile(), None),
        ("stalls", lossy(0.0), Some(Stalls::busy())),
        ("stalls at 5% loss", lossy(0.05), Some(Stalls::busy())),
    ];
    for (name, c, stalls) in cases {
        let cfg = config(CongestionControl::default(), true);
        let (mut net, pa, pb) = pair(11, c, c, &cfg);
        let (a, b) = (addr(1), addr(2));
        net.set_stalls(a, stalls);
        net.set_stalls(b, stalls);
        let tick = Duration::from_micros(16_667);
        for i in 0..1_200u32 {
            if i == 1_000 {
                // The path dies: losses and backoff into silence.
                let mut down = c;
                down.down = true;
                net.set_link_both(a, b, down);
            }
            let send = |net: &mut Network, host, peer, ch, len, mode| {
                let _ = net.host_mut(host).send(peer, ch, Bytes::from(vec![7; len]), mode);
            };
            send(&mut net, a, pa, 0, 32, SendMode::Reliable);
            send(&mut net, b, pb, 1, 200, SendMode::Unreliable);
            if i.is_multiple_of(2) {
                send(&mut net, b, pb, 2, 50, SendMode::Reliable);
            }
            if i.is_multiple_of(30) {
                send(&mut net, b, pb, 2, 3_000, SendMode::Reliable);
            }
            let mut failed = None;
            net.run_for(tick, |net| {
                while let Some(e) = net.poll_event(a).or_else(|| net.poll_event(b)) {
                    assert!(!matches!(e, Event::Disconnected { .. }), "{name}: {e:?}");
                }
                for (side, host, peer) in [("client", a, pa), ("server", b, pb)] {
                    if let Some(s) = net.host(host).peer_stats(peer)
                        && let Err(e) = check_counters(side, &s)
                    {
                        failed.get_or_insert(e);
                    }
                }
            });
            if let Some(e) = failed {
                panic!("{name}, tick {i}: {e}");
            }
        }
    }
}
