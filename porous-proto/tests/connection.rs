//! Connections between two hosts (spec §2): handshake cases of Figure 2, simultaneous
//! open, refusals, stale connections, disconnection (Figure 3), timeouts, the
//! disconnected -> zombie -> deleted path, send errors, and byte-identical replay.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod support;

use std::time::Duration;

use bytes::Bytes;
use porous_proto::{
    ConnectError, DisconnectReason, Event, HostConfig, Mismatch, PeerState, SendError, SendMode, SequenceStart,
};
use support::{Datagram, MS, Mode, Pair, disconnected, received};

const SEC: Duration = Duration::from_secs(1);

fn payload(channel: usize, i: usize, len: usize) -> Bytes {
    let mut v = format!("{channel}:{i}:").into_bytes();
    v.resize(len.max(v.len()), b'x');
    Bytes::from(v)
}

#[test]
fn connect_exchange_all_modes_on_several_channels_and_disconnect_after_delivering_everything() {
    // Everything is queued at once, more than the first round trips carry: without
    // deadlines, so that no unreliable packet expires on the way.
    let mut config = HostConfig::default();
    for c in &mut config.peer.channels {
        c.unreliable_deadline = None;
    }
    let mut p = Pair::new(config.clone(), config);
    let (pa, pb) = p.establish();
    assert_eq!(p.a.peer_stats(pa).map(|s| s.state), Some(PeerState::Connected));
    let modes = [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive];
    let mut sent = vec![Vec::new(); 4];
    for i in 0..60 {
        for channel in 0..4 {
            let mode = modes[(i + channel) % 3];
            // Sizes from tiny to several fragments.
            let data = payload(channel, i, (i * 97 + channel * 31) % 4000);
            p.a.send(pa, channel, data.clone(), mode).expect("send");
            p.b.send(pb, channel, data.clone(), mode).expect("send back");
            sent[channel].push(data);
        }
    }
    // Queue more reliable data and disconnect at once: it must all arrive first.
    for (channel, sent) in sent.iter_mut().enumerate() {
        for i in 60..70 {
            let data = payload(channel, i, 1500);
            p.a.send(pa, channel, data.clone(), SendMode::Reliable).expect("send");
            sent.push(data);
        }
    }
    let now = p.now;
    // The application's code reaches the other side with the disconnection.
    p.a.disconnect_with(now, pa, 0xC0DE);
    assert_eq!(p.a.send(pa, 0, Bytes::from_static(b"late"), SendMode::Reliable), Err(SendError::NotConnected));
    assert!(p.run_until(10 * SEC, |p| !disconnected(&p.events_a).is_empty() && !disconnected(&p.events_b).is_empty()));
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::Local]);
    assert_eq!(disconnected(&p.events_b), [DisconnectReason::remote(0xC0DE)]);
    // On a lossless link every packet of every mode arrives, in order, with its mode.
    assert_eq!(received(&p.events_b, 4), sent);
    for e in &p.events_b {
        if let Event::Received { channel, mode, data, .. } = e {
            // The payload starts "channel:index:".
            let head = data.split(|&b| b == b':').nth(1).unwrap();
            let i: usize = std::str::from_utf8(head).unwrap().parse().unwrap();
            let want = if i < 60 { modes[(i + channel) % 3] } else { SendMode::Reliable };
            assert_eq!(*mode, want, "channel {channel} packet {i}");
        }
    }
    // Every Received precedes Disconnected.
    let last = p.events_b.iter().rposition(|e| matches!(e, Event::Received { .. })).unwrap();
    let end = p.events_b.iter().position(|e| matches!(e, Event::Disconnected { .. })).unwrap();
    assert!(last < end);
}

#[test]
fn figure_2a_a_dropped_acknowledgement_is_repaired_by_the_resent_request() {
    // b's request+ack (a's acknowledgement of... ) is the first datagram from b; drop b's
    // acknowledgement of a's request once, and a's acknowledgement of b's request once.
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let mut dropped = 0;
    p.pass = Box::new(move |d: &Datagram| {
        // a's pure acknowledgement (0x82) of b's request.
        if d.ty() == 0x82 && dropped == 0 {
            dropped += 1;
            return false;
        }
        true
    });
    let (pa, _pb) = p.establish();
    assert!(p.a.peer_stats(pa).is_some());
    assert!(p.log.iter().filter(|d| d.ty() == 0x82).count() >= 1);
}

#[test]
fn figure_2a_lost_final_ack_completes_by_the_requesters_next_datagram() {
    // Departure from Figure 2 (a): the listening side never resends on its own (its
    // requester's address is unproven, so it answers each request once, no more). When
    // a's acknowledgement is lost, a is connected and its next datagram, a keepalive
    // ping here, proves it holds b's nonce: b connects on it.
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let mut acks_dropped = 0;
    p.pass = Box::new(move |d: &Datagram| {
        if d.ty() == 0x82 && acks_dropped < 2 {
            acks_dropped += 1;
            return false;
        }
        // Keep data (pings) from doubling as the acknowledgement for a while.
        !(d.ty() < 0x80 && d.sent < Duration::from_millis(500))
    });
    let pa = p.connect();
    assert!(p.run_until(5 * SEC, |p| p.connected_b().is_some()));
    assert!(p.connected_a() == Some(pa));
    assert!(p.elapsed() >= 500 * MS, "b connected on a's first datagram that got through");
    let replies = p.log.iter().filter(|d| d.ty() == 0x81).count();
    assert_eq!(replies, 1, "b answered the one request once");
}

#[test]
fn figure_2b_a_dropped_request_is_resent() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let mut first = true;
    p.pass = Box::new(move |d: &Datagram| {
        if d.ty() == 0x80 && first {
            first = false;
            return false;
        }
        true
    });
    p.establish();
    assert!(p.log.iter().filter(|d| d.ty() == 0x80).count() >= 2);
    assert!(p.elapsed() >= 200 * MS, "the retry waited its interval");
}

#[test]
fn simultaneous_open_gives_one_matched_connection_each_way() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let now = p.now;
    let pa = p.a.connect_with(now, p.b_addr, b"from a").unwrap();
    let pb = p.b.connect_with(now, p.a_addr, b"from b").unwrap();
    assert!(p.run_until(5 * SEC, |p| p.connected_a().is_some() && p.connected_b().is_some()));
    assert_eq!(p.connected_a(), Some(pa));
    assert_eq!(p.connected_b(), Some(pb));
    // Each request crossed the other: both sides got the other's connect data.
    let data = |events: &[Event]| {
        events.iter().find_map(|e| match e {
            Event::Connected { data, .. } => Some(data.clone()),
            _ => None,
        })
    };
    assert_eq!(data(&p.events_a).as_deref(), Some(&b"from b"[..]));
    assert_eq!(data(&p.events_b).as_deref(), Some(&b"from a"[..]));
    assert_eq!(p.a.peers().count(), 1);
    assert_eq!(p.b.peers().count(), 1);
    p.a.send(pa, 1, Bytes::from_static(b"ping"), SendMode::Reliable).unwrap();
    p.b.send(pb, 2, Bytes::from_static(b"pong"), SendMode::Reliable).unwrap();
    p.run_for(SEC);
    assert_eq!(received(&p.events_b, 4)[1], [Bytes::from_static(b"ping")]);
    assert_eq!(received(&p.events_a, 4)[2], [Bytes::from_static(b"pong")]);
}

#[test]
fn incompatible_parameters_are_refused_with_a_reason_and_allocate_nothing() {
    let mut b = HostConfig::default();
    b.peer.app_version = 3;
    let mut p = Pair::new(HostConfig::default(), b);
    let pa = p.connect();
    p.run_for(SEC);
    let reasons = disconnected(&p.events_a);
    assert!(
        matches!(reasons[..], [DisconnectReason::Incompatible(Mismatch::AppVersion { local: 0, remote: 3, .. })]),
        "{reasons:?}"
    );
    assert_eq!(p.b.peers().count(), 0, "the refusing host allocated no peer");
    assert_eq!(p.b.stats().refused, 1);
    assert!(p.a.peer_stats(pa).is_none_or(|s| s.state != PeerState::Connected));
    // Every pre-connection reply is no larger than the request that caused it.
    let request = p.log.iter().find(|d| d.ty() == 0x80).unwrap().payload.len();
    assert!(p.log.iter().filter(|d| d.from == p.b_addr).all(|d| d.payload.len() <= request));

    let mut c = HostConfig::default();
    c.peer.channels.truncate(2);
    let mut q = Pair::new(HostConfig::default(), c);
    q.connect();
    q.run_for(SEC);
    let reasons = disconnected(&q.events_a);
    assert!(
        matches!(reasons[..], [DisconnectReason::Incompatible(Mismatch::ChannelCount { local: 4, remote: 2, .. })]),
        "{reasons:?}"
    );
}

#[test]
fn unordered_channels_must_match_and_carry_reliable_packets_only() {
    let unordered = |channels: &[usize]| {
        let mut c = HostConfig::default();
        for &i in channels {
            c.peer.channels[i] = porous_proto::ChannelConfig::unordered();
        }
        c
    };
    // A mismatch is refused, naming the channel, on both sides; nothing is allocated.
    let mut p = Pair::new(unordered(&[1]), unordered(&[1, 2]));
    p.connect();
    p.run_for(SEC);
    let reasons = disconnected(&p.events_a);
    assert!(
        matches!(
            reasons[..],
            [DisconnectReason::Incompatible(Mismatch::Unordered { channel: 2, local: false, remote: true, .. })]
        ),
        "{reasons:?}"
    );
    assert_eq!(p.b.peers().count(), 0);
    // The request grew by its bitmap of unordered channels, and no reply outgrew it.
    let request = p.log.iter().find(|d| d.ty() == 0x80).unwrap().payload.len();
    assert_eq!(request, 65);
    assert!(p.log.iter().filter(|d| d.from == p.b_addr).all(|d| d.payload.len() <= request));
    // Matching sets connect; the unordered channel refuses other modes.
    let mut p = Pair::new(unordered(&[1, 2]), unordered(&[1, 2]));
    let (pa, pb) = p.establish();
    let sent = p.a.send(pa, 2, Bytes::from_static(b"x"), SendMode::Unreliable);
    assert!(matches!(sent, Err(SendError::ModeNotAllowed { channel: 2, mode: SendMode::Unreliable, .. })), "{sent:?}");
    assert!(matches!(p.a.send(pa, 1, Bytes::new(), SendMode::Passive), Err(SendError::ModeNotAllowed { .. })));
    for i in 0..10 {
        p.a.send(pa, 2, payload(2, i, 50 + 700 * i), SendMode::Reliable).unwrap();
        p.b.send(pb, 0, payload(0, i, 10), SendMode::Unreliable).unwrap();
    }
    p.run_for(SEC);
    assert_eq!(received(&p.events_b, 4)[2].len(), 10);
    assert_eq!(received(&p.events_a, 4)[0].len(), 10, "the ordered channels are unchanged");
}

#[test]
fn hosts_that_refuse_or_are_full_say_so() {
    let mut b = HostConfig::default();
    b.accept_incoming = false;
    let mut p = Pair::new(HostConfig::default(), b);
    p.connect();
    p.run_for(SEC);
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::NotAccepting]);

    let mut b = HostConfig::default();
    b.max_peers = 1;
    let mut p = Pair::new(HostConfig::default(), b);
    let now = p.now;
    // Fill b's only slot with a connection attempt to a silent address.
    p.b.connect(now, "10.9.9.9:1".parse().unwrap()).unwrap();
    assert_eq!(p.b.connect(now, "10.9.9.8:1".parse().unwrap()), Err(ConnectError::HostFull));
    p.connect();
    p.run_for(SEC);
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::HostFull]);
    assert_eq!(p.b.peers().count(), 1);
}

#[test]
fn duplicate_requests_after_connecting_are_acknowledged_without_disruption() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (pa, pb) = p.establish();
    // Replay a's original request to b twice, as a duplicating network would.
    let request = p.log.iter().find(|d| d.ty() == 0x80).unwrap().clone();
    for _ in 0..2 {
        let now = p.now;
        p.b.handle_datagram(now, p.a_addr, &request.payload);
    }
    p.a.send(pa, 0, Bytes::from_static(b"still here"), SendMode::Reliable).unwrap();
    p.run_for(SEC);
    assert_eq!(p.b.peers().count(), 1);
    assert_eq!(p.b.peer_stats(pb).unwrap().state, PeerState::Connected);
    assert_eq!(received(&p.events_b, 4)[0], [Bytes::from_static(b"still here")]);
    assert!(disconnected(&p.events_a).is_empty() && disconnected(&p.events_b).is_empty());
    let acks = p.log.iter().filter(|d| d.from == p.b_addr && d.ty() == 0x82).count();
    assert_eq!(acks, 2, "b acknowledged each duplicate");
}

#[test]
fn a_restarted_host_is_told_its_old_connection_is_stale_and_can_reconnect_later() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    p.establish();
    // a restarts on the same address: a fresh host with another seed.
    p.a = porous_proto::Host::new(HostConfig::default(), porous_proto::sim::seeded_rng(99)).unwrap();
    p.events_a.clear();
    let first = p.connect();
    p.run_for(SEC);
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::Stale]);
    assert!(p.a.peer_stats(first).is_none_or(|s| s.state != PeerState::Connected));
    // b's old connection times out (nothing from the old a), then a new one succeeds.
    p.run_for(12 * SEC);
    assert_eq!(disconnected(&p.events_b), [DisconnectReason::Timeout]);
    p.run_for(4 * SEC); // the linger of a's failed attempt
    p.events_a.clear();
    p.events_b.clear();
    p.establish();
}

#[test]
fn connecting_to_nobody_times_out_and_silence_times_out_a_connection() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let now = p.now;
    let nobody = p.a.connect(now, "10.1.2.3:4".parse().unwrap()).unwrap();
    p.run_for(6 * SEC);
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::Timeout]);
    assert!(p.a.peer_stats(nobody).is_none(), "the failed attempt was deleted");

    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (pa, pb) = p.establish();
    p.pass = Box::new(|_| false); // the link dies
    p.run_for(11 * SEC);
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::Timeout]);
    assert_eq!(disconnected(&p.events_b), [DisconnectReason::Timeout]);
    assert!(p.a.peer_stats(pa).is_none() && p.b.peer_stats(pb).is_none());
}

#[test]
fn an_unreliable_deadline_counts_from_the_step_that_sends_it_not_a_stale_clock() {
    // A host idle for a second (no calls at all), then a send: the deadline counts from
    // the step that follows, not from the last time the host was given.
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (pa, _) = p.establish();
    let idle = p.now + SEC;
    assert!(HostConfig::default().peer.channels[1].unreliable_deadline.is_some_and(|d| d < SEC));
    p.a.send(pa, 1, Bytes::from_static(b"state"), SendMode::Unreliable).unwrap();
    p.a.step(idle);
    let mut sent = 0;
    while p.a.poll_transmit().is_some() {
        sent += 1;
    }
    let s = p.a.peer_stats(pa).unwrap().transfer;
    assert_eq!(s.unreliable_expired, 0);
    assert!(sent >= 1, "the packet went at the step");
}

#[test]
fn pings_keep_an_idle_connection_alive() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (pa, _) = p.establish();
    p.run_for(60 * SEC);
    assert!(disconnected(&p.events_a).is_empty());
    let s = p.a.peer_stats(pa).unwrap();
    assert_eq!(s.state, PeerState::Connected);
    assert!(s.rtt >= 20 * MS && s.rtt < 25 * MS, "rtt {:?} measured by pings", s.rtt);
    // Keepalive traffic stays modest: a ping and an echo per interval.
    assert!(s.transfer.datagrams_sent < 300, "{} datagrams in 60 s", s.transfer.datagrams_sent);
}

#[test]
fn disconnected_peers_linger_acknowledging_repeats_then_are_deleted() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (pa, pb) = p.establish();
    // Drop a's first disconnection acknowledgement... b's, actually: b acknowledges a's
    // request; losing it makes a resend, which b (now disconnected) acknowledges again.
    let mut dropped = false;
    p.pass = Box::new(move |d: &Datagram| {
        if d.ty() == 0x87 && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    let now = p.now;
    p.a.disconnect(now, pa);
    assert!(p.run_until(5 * SEC, |p| !disconnected(&p.events_a).is_empty()));
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::Local]);
    let acks = p.log.iter().filter(|d| d.ty() == 0x87).count();
    assert!(acks >= 2, "the disconnected side acknowledged the repeat");
    assert_eq!(p.b.peer_stats(pb).map(|s| s.state), Some(PeerState::Disconnected));
    // Each side finds the other's address from its id, while the peer exists.
    assert_eq!((p.a.remote_addr(pa), p.b.remote_addr(pb)), (Some(p.b_addr), Some(p.a_addr)));
    // After the linger both are zombies and deleted; ids are dead.
    p.run_for(4 * SEC);
    assert!(p.a.peer_stats(pa).is_none() && p.b.peer_stats(pb).is_none());
    assert_eq!((p.a.remote_addr(pa), p.b.remote_addr(pb)), (None, None));
    assert_eq!((p.a.peers().count(), p.b.peers().count()), (0, 0));
    assert_eq!(p.a.send(pa, 0, Bytes::new(), SendMode::Reliable), Err(SendError::UnknownPeer));
    // The slot is reused with a new generation: the old id does not reach the new peer.
    let fresh = p.connect();
    assert_eq!(fresh.index(), pa.index());
    assert_ne!(fresh, pa);
}

#[test]
fn disconnect_now_reports_at_once_and_tells_the_remote() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (pa, _) = p.establish();
    for i in 0..10 {
        p.a.send(pa, 0, payload(0, i, 3000), SendMode::Reliable).unwrap();
    }
    let now = p.now;
    p.a.disconnect_now_with(now, pa, u32::MAX);
    while let Some(e) = p.a.poll_event() {
        p.events_a.push(e);
    }
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::Local]);
    p.run_for(SEC);
    assert_eq!(disconnected(&p.events_b), [DisconnectReason::remote(u32::MAX)]);
    assert!(received(&p.events_b, 4)[0].is_empty(), "pending data was dropped");
}

#[test]
fn send_errors_are_precise() {
    let mut small = HostConfig::default();
    small.peer.max_packet_size = 1000;
    small.peer.channels[1].max_queued_bytes = 2500;
    let mut p = Pair::new(small, HostConfig::default());
    let pa = p.connect();
    assert_eq!(p.a.send(pa, 0, Bytes::new(), SendMode::Reliable), Err(SendError::NotConnected));
    p.run_until(SEC, |p| p.connected_a().is_some());
    let sent = p.a.send(pa, 4, Bytes::new(), SendMode::Reliable);
    assert!(matches!(sent, Err(SendError::NoSuchChannel { channel: 4, channels: 4, .. })), "{sent:?}");
    let sent = p.a.send(pa, 0, Bytes::from(vec![0; 1001]), SendMode::Reliable);
    assert!(matches!(sent, Err(SendError::TooLarge { size: 1001, max: 1000, .. })), "{sent:?}");
    for _ in 0..2 {
        p.a.send(pa, 1, Bytes::from(vec![0; 1000]), SendMode::Reliable).unwrap();
    }
    let sent = p.a.send(pa, 1, Bytes::from(vec![0; 1000]), SendMode::Passive);
    assert!(matches!(sent, Err(SendError::QueueFull { channel: 1, .. })), "{sent:?}");
    // Unreliable data is dropped and counted instead.
    p.a.send(pa, 1, Bytes::from(vec![0; 1000]), SendMode::Unreliable).unwrap();
    assert_eq!(p.a.peer_stats(pa).unwrap().unreliable_dropped, 1);
    // Once acknowledged, the queue drains and reliable sends work again.
    p.run_for(SEC);
    p.a.send(pa, 1, Bytes::from(vec![0; 1000]), SendMode::Reliable).unwrap();
    let bogus =
        porous_proto::Host::new(HostConfig::default(), porous_proto::sim::seeded_rng(5)).unwrap().peers().next();
    assert!(bogus.is_none());
}

#[test]
fn the_same_inputs_and_seed_give_byte_identical_transmits() {
    fn run(mode: Mode) -> Vec<Datagram> {
        let mut a = HostConfig::default();
        a.sequence_start = SequenceStart::Random;
        let mut p = Pair::in_mode(mode, a, HostConfig::default(), 7, 8);
        let mut n = 0u32;
        p.pass = Box::new(move |_| {
            n += 1;
            n % 7 != 3 // deterministic loss
        });
        let token = mode.token(9, p.b_addr, Duration::ZERO, 10 * SEC);
        let (pa, pb) = p.establish_with(token.as_deref());
        for i in 0..200 {
            let send_mode = [SendMode::Reliable, SendMode::Unreliable, SendMode::Passive][i % 3];
            p.a.send(pa, i % 4, payload(i % 4, i, i * 13 % 2500), send_mode).unwrap();
            if i % 10 == 0 {
                p.b.send(pb, 0, payload(0, i, 100), SendMode::Reliable).unwrap();
                p.run_for(20 * MS);
            }
        }
        let now = p.now;
        p.a.disconnect(now, pa);
        p.run_for(5 * SEC);
        p.log
    }
    for mode in Mode::BOTH {
        let (first, second) = (run(mode), run(mode));
        assert!(first.len() > 300, "{mode:?}: {} datagrams", first.len());
        assert_eq!(first, second, "{mode:?}");
    }
}

#[test]
fn a_seeded_host_repeats_itself_and_an_entropy_host_does_not() {
    use porous_proto::Host;
    let now = porous_proto::Instant::now();
    let first_request = |mut host: Host| {
        host.connect(now, "10.0.0.9:9000".parse().unwrap()).unwrap();
        host.step(now);
        host.poll_transmit().unwrap().payload
    };
    let seeded = |seed| Host::with_seed(HostConfig::default(), seed).unwrap();
    let entropy = || Host::from_entropy(HostConfig::default()).unwrap();
    // The request carries the connection's random nonce: the same seed gives the same one.
    assert_eq!(first_request(seeded(3)), first_request(seeded(3)));
    assert_ne!(first_request(seeded(3)), first_request(seeded(4)));
    assert_ne!(first_request(entropy()), first_request(entropy()));
}

#[test]
fn sequence_ids_start_where_configured() {
    let mut a = HostConfig::default();
    a.sequence_start = SequenceStart::fixed(u32::MAX - 3, 0xFF_FFFE);
    let mut p = Pair::new(a.clone(), a);
    let (pa, _) = p.establish();
    for i in 0..20 {
        p.a.send(pa, 0, payload(0, i, 10), SendMode::Reliable).unwrap();
        p.run_for(5 * MS);
    }
    p.run_for(SEC);
    assert_eq!(received(&p.events_b, 4)[0].len(), 20, "both id spaces wrapped cleanly");
}

#[test]
fn the_step_interval_may_be_a_fixed_engine_tick() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    p.tick = Some(16 * MS);
    let (pa, _) = p.establish();
    for i in 0..100 {
        p.a.send(pa, 0, payload(0, i, 200), SendMode::Reliable).unwrap();
    }
    p.run_for(2 * SEC);
    assert_eq!(received(&p.events_b, 4)[0].len(), 100);
    let s = p.a.peer_stats(pa).unwrap();
    assert!(s.rto >= s.rtt + 16 * MS, "the RTO covers the step interval: {:?} vs {:?}", s.rto, s.rtt);
}

#[test]
fn spurious_steps_are_harmless() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (pa, _) = p.establish();
    p.run_for(SEC);
    p.a.send(pa, 0, Bytes::from_static(b"once"), SendMode::Reliable).unwrap();
    let now = p.now;
    let before = p.a.stats().datagrams_sent;
    for _ in 0..1000 {
        p.a.step(now);
    }
    let mut sent = 0;
    while p.a.poll_transmit().is_some() {
        sent += 1;
    }
    assert_eq!(sent, 1, "one datagram for one packet, however often the host steps");
    assert_eq!(p.a.stats().datagrams_sent, before + 1);
    assert!(p.a.poll_timeout().is_some_and(|t| t > now), "nothing left to do at once");
}

#[test]
fn high_priority_channels_go_first_when_the_window_is_scarce() {
    let mut a = HostConfig::default();
    a.peer.channels[3].priority = porous_proto::Priority::Low;
    let mut p = Pair::new(a, HostConfig::default());
    let (pa, _) = p.establish();
    // Queue bulk data on the low channel first, then one high-priority packet.
    for i in 0..200 {
        p.a.send(pa, 3, payload(3, i, 1100), SendMode::Reliable).unwrap();
    }
    p.a.send(pa, 0, Bytes::from_static(b"urgent"), SendMode::Reliable).unwrap();
    p.run_until(10 * SEC, |p| received(&p.events_b, 4)[3].len() == 200);
    let order: Vec<usize> = p
        .events_b
        .iter()
        .filter_map(|e| match e {
            Event::Received { channel, .. } => Some(*channel),
            _ => None,
        })
        .collect();
    let urgent = order.iter().position(|&c| c == 0).unwrap();
    assert_eq!(urgent, 0, "the high-priority packet overtook 200 queued low-priority ones");
}

#[test]
fn a_graceful_disconnect_whose_data_never_arrived_says_so() {
    // The link dies with reliable data in flight: the flush cannot finish, and the
    // application must be able to tell that from a clean close.
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (pa, _) = p.establish();
    p.pass = Box::new(|_| false);
    p.a.send(pa, 0, Bytes::from_static(b"lost"), SendMode::Reliable).unwrap();
    p.run_for(50 * MS);
    let now = p.now;
    p.a.disconnect(now, pa);
    p.run_for(30 * SEC);
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::FlushTimeout]);
    let stats = p.a.stats();
    assert_eq!(stats.peers + stats.closing, 0, "the peer was deleted");
    // A clean close is still Local.
    let mut q = Pair::new(HostConfig::default(), HostConfig::default());
    let (qa, _) = q.establish();
    q.a.send(qa, 0, Bytes::from_static(b"kept"), SendMode::Reliable).unwrap();
    let now = q.now;
    q.a.disconnect(now, qa);
    q.run_for(5 * SEC);
    assert_eq!(disconnected(&q.events_a), [DisconnectReason::Local]);
    assert_eq!(received(&q.events_b, 4)[0], [Bytes::from_static(b"kept")]);
}

#[test]
fn a_handshake_answered_twice_gives_no_round_trip_sample() {
    // Karn's rule for the handshake: b's first reply is lost and a's resent request gets
    // a second one, so the time from b's first reply to a's acknowledgement spans two
    // exchanges and must not become b's first RTT sample.
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let mut first = true;
    p.pass = Box::new(move |d: &Datagram| {
        if d.ty() == 0x81 && first {
            first = false;
            return false;
        }
        true
    });
    p.connect();
    assert!(p.run_until(5 * SEC, |p| p.connected_b().is_some()));
    assert_eq!(p.log.iter().filter(|d| d.ty() == 0x81).count(), 2);
    let pb = p.connected_b().unwrap();
    let rtt = p.b.peer_stats(pb).unwrap().rtt;
    assert_eq!(rtt, 200 * MS, "still the initial estimate, not the {:?} the two exchanges span", p.elapsed());
    // One clean exchange is a sample.
    let mut q = Pair::new(HostConfig::default(), HostConfig::default());
    q.connect();
    assert!(q.run_until(5 * SEC, |q| q.connected_b().is_some()));
    let qb = q.connected_b().unwrap();
    assert_eq!(q.b.peer_stats(qb).unwrap().rtt, 20 * MS);
}

/// `clients` hosts connect to one server with `max_peers` at the same instant. Returns how
/// many connected and how many were refused; fails if any client is ever told it is
/// connected while the server holds no peer for it, or loses its connection afterwards.
fn crowd(clients: u16, max_peers: usize) -> (usize, usize) {
    use porous_proto::sim::Network;
    let mut net = Network::new(7);
    let server: std::net::SocketAddr = "10.0.0.1:9000".parse().unwrap();
    let mut config = HostConfig::default();
    config.max_peers = max_peers;
    net.add_host(server, config).unwrap();
    let addrs: Vec<std::net::SocketAddr> =
        (0..clients).map(|i| std::net::SocketAddr::from(([10, 1, (i >> 8) as u8, i as u8], 7000))).collect();
    for &a in &addrs {
        net.add_host(a, HostConfig::default()).unwrap();
    }
    let now = net.now();
    for &a in &addrs {
        net.host_mut(a).connect(now, server).unwrap();
    }
    let mut connected = std::collections::BTreeSet::new();
    let mut refused = 0;
    net.run_until(20 * SEC, |net| {
        for &a in &addrs {
            while let Some(e) = net.poll_event(a) {
                match e {
                    Event::Connected { .. } => {
                        assert!(net.host(server).peer_by_addr(a).is_some(), "{a} told it is connected to nobody");
                        connected.insert(a);
                    }
                    Event::Disconnected { reason, .. } => {
                        assert!(!connected.contains(&a), "{a} lost its connection: {reason}");
                        assert_eq!(reason, DisconnectReason::HostFull, "{a}");
                        refused += 1;
                    }
                    _ => {}
                }
            }
        }
        while net.poll_event(server).is_some() {}
        connected.len() + refused == addrs.len()
    });
    // Everyone connected stays connected, on both sides.
    net.run_for(2 * SEC, |_| {});
    let host = net.host(server);
    let up = host.peers().filter(|&p| host.peer_stats(p).is_some_and(|s| s.state == PeerState::Connected)).count();
    assert_eq!(up, connected.len());
    (connected.len(), refused)
}

#[test]
fn a_thousand_clients_at_once_all_connect_and_none_is_told_so_falsely() {
    // The server answers at most `max_pending` handshakes at a time and keeps each it
    // answered; the rest retry. It once dropped answered handshakes to make room, leaving
    // their clients connected to nobody (570 of 1,000).
    assert_eq!(crowd(1000, 1000), (1000, 0));
}

#[test]
fn a_crowd_beyond_the_peer_cap_is_refused_clearly() {
    assert_eq!(crowd(400, 250), (250, 150));
}

/// The connect requests (type `0x80`) in a log.
fn requests(log: &[Datagram]) -> usize {
    log.iter().filter(|d| d.ty() == 0x80).count()
}

fn connect_requests(events: &[Event]) -> Vec<(porous_proto::PeerId, Bytes)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ConnectRequest { peer, data, .. } => Some((*peer, data.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn connect_data_reaches_the_listening_application_and_only_it() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let now = p.now;
    let b = p.b_addr;
    let pa = p.a.connect_with(now, b, b"version 3; ticket 42").unwrap();
    assert!(p.run_until(5 * SEC, |p| p.connected_a().is_some() && p.connected_b().is_some()));
    let data_of = |events: &[Event]| {
        events.iter().find_map(|e| match e {
            Event::Connected { data, .. } => Some(data.clone()),
            _ => None,
        })
    };
    assert_eq!(data_of(&p.events_b).as_deref(), Some(&b"version 3; ticket 42"[..]));
    assert_eq!(data_of(&p.events_a).as_deref(), Some(&b""[..]), "replies carry no connect data");
    assert_eq!(p.a.remote_addr(pa), Some(b));
    // Too much data for a request is refused before anything is sent; a small datagram
    // size leaves less room.
    let too_much = [0u8; porous_proto::wire::MAX_CONNECT_DATA + 1];
    let other = "10.0.0.3:1".parse().unwrap();
    let connected = p.a.connect_with(now, other, &too_much);
    assert!(
        matches!(connected, Err(ConnectError::DataTooLarge { size: 257, max, .. }) if max == porous_proto::wire::MAX_CONNECT_DATA),
        "{connected:?}"
    );
    let mut small = HostConfig::default();
    small.peer.mtu = 128;
    let max = small.peer.max_connect_data();
    assert_eq!(max, 70);
    let mut host = porous_proto::Host::with_seed(small, 3).unwrap();
    assert!(matches!(
        host.connect_with(now, other, &[1; 71]),
        Err(ConnectError::DataTooLarge { size: 71, max: 70, .. })
    ));
    assert!(host.connect_with(now, other, &[1; 70]).is_ok());
    host.step(now);
    let request = host.poll_transmit().unwrap();
    assert!(request.payload.len() <= 128, "a {} byte request at a 128 byte datagram size", request.payload.len());
}

#[test]
fn manual_admission_asks_the_application_once_and_answers_only_its_decision() {
    let mut server = HostConfig::default();
    server.manual_accept = true;
    let mut p = Pair::new(HostConfig::default(), server);
    let now = p.now;
    let b = p.b_addr;
    let pa = p.a.connect_with(now, b, b"ticket:good").unwrap();
    // The application takes its time (an account lookup): the requester retries, the
    // host answers nothing and reports the request once.
    p.run_for(SEC);
    assert!(requests(&p.log) >= 3, "{} requests", requests(&p.log));
    assert!(p.log.iter().all(|d| d.from != b), "nothing is answered before the decision");
    let asked = connect_requests(&p.events_b);
    assert_eq!(asked.len(), 1, "one event whatever the retries: {asked:?}");
    let (pb, data) = asked[0].clone();
    assert_eq!(&data[..], b"ticket:good");
    assert_eq!(p.b.remote_addr(pb), Some(p.a_addr));
    assert_eq!(p.b.stats().pending, 1);
    assert_eq!(p.b.send(pb, 0, Bytes::new(), SendMode::Reliable), Err(SendError::NotConnected));
    let now = p.now;
    p.b.accept(now, pb).unwrap();
    assert_eq!(p.b.accept(now, pb), Err(porous_proto::AdmissionError::NotAwaiting), "decided already");
    assert!(p.run_until(SEC, |p| p.connected_a().is_some() && p.connected_b().is_some()));
    assert_eq!((p.connected_a(), p.connected_b()), (Some(pa), Some(pb)), "the id of the request is the peer's");
    p.b.send(pb, 1, Bytes::from_static(b"welcome"), SendMode::Reliable).unwrap();
    p.run_for(SEC);
    assert_eq!(received(&p.events_a, 4)[1], [Bytes::from_static(b"welcome")]);
    assert_eq!(p.b.accept(p.now, pb), Err(porous_proto::AdmissionError::NotAwaiting));
    assert_eq!(p.b.stats().rejected, 0);
}

#[test]
fn a_rejected_requester_hears_the_code_and_the_server_keeps_nothing() {
    let mut server = HostConfig::default();
    server.manual_accept = true;
    for by_disconnect in [false, true] {
        let mut p = Pair::new(HostConfig::default(), server.clone());
        let pa = p.connect();
        assert!(p.run_until(SEC, |p| !connect_requests(&p.events_b).is_empty()));
        let (pb, _) = connect_requests(&p.events_b)[0];
        let now = p.now;
        if by_disconnect {
            // Disconnecting a request that awaits the decision rejects it.
            p.b.disconnect_with(now, pb, 403);
        } else {
            p.b.reject(now, pb, 403).unwrap();
        }
        assert_eq!(p.b.reject(now, pb, 1), Err(porous_proto::AdmissionError::NotAwaiting));
        assert!(p.run_until(SEC, |p| !disconnected(&p.events_a).is_empty()));
        assert_eq!(disconnected(&p.events_a), [DisconnectReason::rejected(403)]);
        assert_eq!(disconnected(&p.events_b), [DisconnectReason::Local], "the id the application saw ends");
        assert!(p.a.peer_stats(pa).is_none() || p.a.peer_stats(pa).unwrap().state != PeerState::Connected);
        // The refusal is one small datagram, and the server holds nothing afterwards.
        let answers: Vec<&Datagram> = p.log.iter().filter(|d| d.from == p.b_addr).collect();
        assert_eq!(answers.len(), 1);
        assert!(answers[0].payload.len() < 64);
        let s = p.b.stats();
        assert_eq!((s.peers, s.pending, s.rejected), (0, 0, 1));
        assert_eq!(p.b.reject(p.now, pb, 1), Err(porous_proto::AdmissionError::UnknownPeer));
        assert_eq!(p.b.memory_usage().peers, 0);
    }
}

#[test]
fn an_undecided_request_times_out_and_the_application_hears_of_it() {
    let mut server = HostConfig::default();
    server.manual_accept = true;
    let mut p = Pair::new(HostConfig::default(), server);
    p.connect();
    p.run_for(7 * SEC);
    let asked = connect_requests(&p.events_b);
    assert_eq!(asked.len(), 1);
    assert_eq!(disconnected(&p.events_b), [DisconnectReason::Timeout]);
    assert_eq!(disconnected(&p.events_a), [DisconnectReason::Timeout]);
    assert_eq!(p.b.accept(p.now, asked[0].0), Err(porous_proto::AdmissionError::UnknownPeer));
    assert_eq!(p.b.stats().pending, 0);
}

/// The host's counts add up whatever its peers do (issue 32 item 4): `peers` is the
/// connections connecting or connected, `closing` the rest of the table, `pending` a part
/// of `connecting`; a peer reported `Disconnected` is no longer among `peers`. Checked on
/// every host after every step of a network where one client leaves gracefully, one is
/// kicked, one's requests are all lost, one crashes and one is rejected, until the
/// server's table is empty again.
#[test]
fn a_host_s_peer_counts_add_up_through_every_state() {
    use porous_proto::Host;
    use porous_proto::sim::{LinkConditions, Network};
    use std::net::SocketAddr;

    fn check(host: &Host, name: &str, gone: &[porous_proto::PeerId]) {
        let s = host.stats();
        let states: Vec<PeerState> = host.peers().filter_map(|p| host.peer_stats(p)).map(|s| s.state).collect();
        let count = |state| states.iter().filter(|&&s| s == state).count();
        assert_eq!(s.peers, s.connecting + s.connected, "{name}: {s:?}");
        assert_eq!(s.peers + s.closing, states.len(), "{name}: the table holds peers + closing: {s:?}");
        assert_eq!(s.connecting, count(PeerState::Connecting), "{name}");
        assert_eq!(s.connected, count(PeerState::Connected), "{name}");
        assert!(s.pending <= s.connecting, "{name}: {s:?}");
        for &peer in gone {
            let state = host.peer_stats(peer).map(|p| p.state);
            assert!(
                !matches!(state, Some(PeerState::Connecting | PeerState::Connected)),
                "{name}: {peer} was reported disconnected and is {state:?}"
            );
        }
    }

    let addr = |i: u8| -> SocketAddr { SocketAddr::from(([10, 0, 0, i], 9000)) };
    let server = addr(1);
    let clients: Vec<SocketAddr> = (2..=6).map(addr).collect();
    let mut net = Network::new(34);
    let mut config = HostConfig::default();
    config.manual_accept = true;
    net.add_host(server, config).unwrap();
    for &c in &clients {
        net.add_host(c, HostConfig::default()).unwrap();
    }
    let mut dead = LinkConditions::default();
    dead.loss = 1.0;
    net.set_link(clients[2], server, dead);
    let now = net.now();
    let ids: Vec<_> = clients.iter().map(|&c| net.host_mut(c).connect(now, server).unwrap()).collect();

    // Per host: the peers it has reported disconnected.
    let mut gone: std::collections::BTreeMap<SocketAddr, Vec<porous_proto::PeerId>> = Default::default();
    let mut kicked = false;
    let mut left = false;
    let mut crashed = false;
    let all: Vec<SocketAddr> = std::iter::once(server).chain(clients.iter().copied()).collect();
    let done = net.run_until(60 * SEC, |net| {
        let now = net.now();
        for &h in &all {
            if h == clients[3] && crashed {
                continue;
            }
            while let Some(event) = net.poll_event(h) {
                match event {
                    // The server admits all but the last client.
                    Event::ConnectRequest { peer, remote, .. } if remote == clients[4] => {
                        net.host_mut(h).reject(now, peer, 9).unwrap();
                    }
                    Event::ConnectRequest { peer, .. } => net.host_mut(h).accept(now, peer).unwrap(),
                    Event::Disconnected { peer, .. } => gone.entry(h).or_default().push(peer),
                    _ => {}
                }
            }
            check(net.host(h), &h.to_string(), gone.get(&h).map_or(&[], Vec::as_slice));
        }
        let s = net.host(server).stats();
        if s.connected == 3 && !left {
            // Clients 0 and 1 and 3 are in (2's requests are lost, 4 is rejected): 0 leaves
            // gracefully, the server kicks 1, 3 crashes.
            left = true;
            net.host_mut(clients[0]).disconnect(now, ids[0]);
        }
        if left
            && !kicked
            && let Some(peer) = net.host(server).peer_by_addr(clients[1])
        {
            kicked = true;
            net.host_mut(server).disconnect_now(now, peer);
        }
        if left && !crashed && net.host(server).peer_by_addr(clients[3]).is_some() {
            crashed = true;
            net.remove_host(clients[3]);
        }
        crashed && net.host(server).peers().count() == 0 && net.host(clients[2]).peers().count() == 0
    });
    assert!(done, "the server's table emptied: {:?}", net.host(server).stats());
    let server_gone = gone.get(&server).map_or(0, Vec::len);
    assert_eq!(server_gone, 4, "left, kicked, crashed (timed out) and rejected");
}
