//! Transfer layer tests: flush behaviour, and two transfer layers over a lossy link.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::time::Time;
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::flush::SKIPS_REMEMBERED;
use super::queues::tests::msg as message;
use super::*;
use crate::sim::SplitMix64;
use crate::wire::{Expand, SendMode};

pub(super) const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// Every explicit packet id is sent wide; these tests do not exercise channels.
pub(super) struct Wide;

impl IdPolicy for Wide {
    fn short_id(&self, _: u8, _: u32) -> bool {
        false
    }
}

/// Expands ids the way the peer owning `t` would.
pub(super) struct Exp<'t>(pub(super) &'t Transfer);

impl Expand for Exp<'_> {
    fn frame_id(&self, t: u32, bytes: u32) -> u32 {
        self.0.expand_frame_id(t, bytes)
    }
    fn ack_largest(&self, t: u16) -> u32 {
        self.0.expand_ack_largest(t)
    }
    fn packet_id(&self, _: u8, t: u16) -> u32 {
        u32::from(t)
    }
}

pub(super) fn cfg(mtu: usize) -> TransferConfig {
    TransferConfig::new(mtu, 4)
}

pub(super) fn flush(t: &mut Transfer, now: Time, key: Key) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut buf = BytesMut::new();
    while let Some(n) = t.poll_datagram(now, key, &Wide, &mut buf) {
        out.push(buf.split_to(n).freeze());
        assert!(n <= t.mtu, "datagram of {n} bytes exceeds the MTU");
    }
    out
}

/// Delivers a datagram to `t`; returns the ids of the messages of an accepted frame.
pub(super) fn deliver(t: &mut Transfer, now: Time, key: Key, d: &[u8]) -> Option<(u32, Vec<u32>)> {
    let data = Data::decode(d, key, &Exp(t)).ok()?;
    let ids: Vec<u32> = data.messages(&Exp(t)).map(|m| m.id).collect();
    t.on_datagram(now, &data, d.len());
    let k = data.frame_id?;
    if !t.frame_in_window(k) {
        return None;
    }
    t.accept_frame(k, now);
    Some((k, ids))
}

fn frame_ids(datagrams: &[Bytes], receiver: &Transfer, key: Key) -> Vec<Vec<u32>> {
    datagrams
        .iter()
        .filter_map(|d| {
            let data = Data::decode(d, key, &Exp(receiver)).ok()?;
            data.frame_id?;
            Some(data.messages(&Exp(receiver)).map(|m| m.id).collect())
        })
        .collect()
}

#[test]
fn figure_5_high_priority_first_and_the_window_limits_the_last_frame() {
    let t0 = Time::ZERO;
    // Two 400-byte messages fill a 900-byte datagram; the congestion window then only
    // leaves room for one more message.
    let mut c = cfg(900);
    c.initial_window = 900 + 500;
    c.congestion = CongestionControl::Aimd; // the spec's window, unpaced
    let mut a = Transfer::new(c, 0, 0);
    let b = Transfer::new(cfg(900), 0, 0);
    // Channel 0 sends at high priority, channel 1 at low (a channel has one priority).
    for (id, prio) in
        [(0, Priority::High), (1, Priority::Low), (2, Priority::High), (3, Priority::High), (4, Priority::Low)]
    {
        let channel = if prio == Priority::High { 0 } else { 1 };
        a.enqueue(prio, message(channel, id, SendMode::Reliable, 400));
    }
    let key = Key::connection(1, 2);
    let sent = flush(&mut a, t0, key);
    let frames = frame_ids(&sent, &b, key);
    assert_eq!(frames, vec![vec![0, 2], vec![3]], "frame b is partially filled");
    assert_eq!(a.queued_messages(), 2, "messages 1 and 4 wait for the window");
    assert!(a.flight() <= a.cwnd());
}

#[test]
fn acks_piggyback_on_data_and_go_first_alone_when_they_do_not_fit() {
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let mut a = Transfer::new(cfg(600), 100, 200);
    let mut b = Transfer::new(cfg(600), 200, 100);
    a.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 10));
    for d in flush(&mut a, t0, kab) {
        deliver(&mut b, t0, kab, &d);
    }
    // b owes an acknowledgement and has data: one datagram carries both.
    b.enqueue(Priority::High, message(0, 9, SendMode::Reliable, 10));
    let out = flush(&mut b, t0 + MS, kba);
    let frames_with_acks = out
        .iter()
        .filter(|d| {
            let data = Data::decode(d, kba, &Exp(&a)).expect("valid"); // ok: test
            data.frame_id.is_some() && data.ack_largest().is_some()
        })
        .count();
    assert_eq!(frames_with_acks, 1, "{out:?}");
    for d in &out {
        deliver(&mut a, t0 + MS, kba, d);
    }
    assert_eq!(a.flight(), 0, "a's frame was acknowledged");
}

#[test]
fn lost_unreliable_frames_are_discarded_or_become_sentinels() {
    let t0 = Time::ZERO;
    let key = Key::connection(1, 2);
    let mut c = cfg(1200);
    Arc::make_mut(&mut c.shared).sentinel_spacing = 4; // S = 4: ids with k mod 4 = 3 become sentinels
    c.congestion = CongestionControl::Aimd; // unpaced: all four go at once
    let mut a = Transfer::new(c, 0, 0);
    let mut sent = 0;
    for i in 0..4 {
        a.enqueue(Priority::High, message(0, i, SendMode::Unreliable, 1100));
        sent += flush(&mut a, t0, key).len();
    }
    assert_eq!(sent, 4);
    // Nothing is acknowledged; after the RTO all four are dropped.
    let later = t0 + a.rto() + MS;
    a.on_timeout(later);
    let s = a.stats();
    assert_eq!((s.frames_lost, s.sentinel_frames, s.unreliable_stripped), (4, 1, 4));
    assert_eq!(s.frames_unacknowledged, 3, "three given up; the sentinel goes again");
    // Frame 3 is resent empty; the others are gone.
    let out = flush(&mut a, later, key);
    let b = Transfer::new(cfg(1200), 0, 0);
    let frames: Vec<_> = out
        .iter()
        .filter_map(|d| Data::decode(d, key, &Exp(&b)).ok())
        .filter_map(|d| d.frame_id.map(|id| (id, d.messages_len())))
        .collect();
    assert_eq!(frames, [(3, 0)]);
    assert_eq!(a.queued_bytes(0), 0, "dropped unreliable data is released");
}

/// A one-way link with fixed latency and seeded random loss.
struct Link {
    queue: VecDeque<(Time, Bytes)>,
    latency: Duration,
    loss: f64,
    rng: SplitMix64,
}

impl Link {
    fn new(latency: Duration, loss: f64, seed: u64) -> Self {
        Self { queue: VecDeque::new(), latency, loss, rng: SplitMix64::new(seed) }
    }

    fn send(&mut self, now: Time, d: Bytes) {
        if self.rng.unit() >= self.loss {
            self.queue.push_back((now + self.latency, d));
        }
    }

    fn due(&mut self, now: Time) -> Vec<Bytes> {
        let mut out = Vec::new();
        while self.queue.front().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, d)) = self.queue.pop_front() {
                out.push(d);
            }
        }
        out
    }
}

/// Two transfer layers exchange 600 messages (reliable and unreliable) over a lossy link in
/// both directions; ids start just below 2^32 so they wrap.
fn lossy_exchange(loss: f64, seed: u64) {
    lossy_exchange_with(loss, seed, CongestionControl::default());
}

/// Reliable and unreliable messages one way over a link losing `loss` of the datagrams
/// each way, with controller `cc`: every reliable message arrives, the flight never
/// exceeds the congestion window, the transfer window holds and the ids wrap.
fn lossy_exchange_with(loss: f64, seed: u64, cc: CongestionControl) {
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let base_a = u32::MAX - 40;
    let base_b = u32::MAX - 7;
    let mut c = cfg(1200);
    c.congestion = cc;
    let mut a = Transfer::new(c.clone(), base_a, base_b);
    let mut b = Transfer::new(c, base_b, base_a);
    let mut ab = Link::new(25 * MS, loss, seed);
    let mut ba = Link::new(25 * MS, loss, seed ^ 0xABCD);
    let total = 600u32;
    let mut queued = 0u32;
    let mut reliable = BTreeSet::new();
    let mut delivered = BTreeSet::new();
    let mut now = t0;
    for step in 0..20_000u32 {
        now = t0 + step * 10 * MS;
        if queued < total {
            for _ in 0..6 {
                let mode = if queued.is_multiple_of(3) { SendMode::Unreliable } else { SendMode::Reliable };
                if mode == SendMode::Reliable {
                    reliable.insert(queued);
                }
                a.enqueue(Priority::High, message(0, queued, mode, 50 + (queued as usize * 37) % 700));
                queued += 1;
            }
        }
        for d in ab.due(now) {
            if let Some((_, ids)) = deliver(&mut b, now, kab, &d) {
                delivered.extend(ids);
            }
        }
        for d in ba.due(now) {
            deliver(&mut a, now, kba, &d);
        }
        for (t, link, key) in [(&mut a, &mut ab, kab), (&mut b, &mut ba, kba)] {
            t.set_step_interval(10 * MS);
            t.on_timeout(now);
            let mut buf = BytesMut::new();
            loop {
                let next_before = t.next_frame_id();
                let Some(n) = t.poll_datagram(now, key, &Wide, &mut buf) else { break };
                let d = buf.split_to(n).freeze();
                if t.next_frame_id() != next_before {
                    // A new frame: inside the congestion window and the transfer window.
                    assert!(t.flight() <= t.cwnd(), "flight {} above cwnd {}", t.flight(), t.cwnd());
                    let s = SeqSpace::FRAME;
                    assert!(s.distance(t.window_base(), next_before) < crate::seq::FRAME_WINDOW);
                }
                link.send(now, d);
            }
        }
        if queued == total && reliable.is_subset(&delivered) && a.is_idle() {
            break;
        }
    }
    let missing: Vec<_> = reliable.difference(&delivered).take(10).collect();
    assert!(missing.is_empty(), "{loss} loss: reliable messages never delivered: {missing:?}");
    assert!(a.is_idle(), "everything acknowledged or discarded");
    assert!(SeqSpace::FRAME.is_newer(a.next_frame_id(), base_a), "frame ids wrapped past 2^32");
    assert!(a.next_frame_id() < base_a, "frame ids wrapped past 2^32");
    let s = a.stats();
    assert!(s.frames_lost > 0 && s.frames_resent > 0, "{loss} loss exercises resends: {s:?}");
    assert_eq!(a.queued_bytes(0), 0);
    let elapsed = now - t0;
    eprintln!("{loss}: {elapsed:?}, {s:?}, cwnd {}", a.cwnd());
}

#[test]
fn every_reliable_message_arrives_over_ten_percent_loss() {
    for seed in 1..=4 {
        lossy_exchange(0.10, seed);
    }
}

#[test]
fn nothing_stalls_at_fifty_percent_loss_with_either_controller() {
    for seed in 1..=3 {
        lossy_exchange_with(0.50, seed, CongestionControl::Model);
        lossy_exchange_with(0.50, seed, CongestionControl::Aimd);
    }
}

#[test]
fn every_reliable_message_arrives_over_forty_percent_loss() {
    for seed in 1..=4 {
        lossy_exchange(0.40, seed);
    }
}

#[test]
fn a_zero_round_trip_never_makes_a_flush_endless() {
    // An acknowledgement at the instant of sending measures an RTT of zero.
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let mut a = Transfer::new(cfg(1200), 0, 0);
    let mut b = Transfer::new(cfg(1200), 0, 0);
    for round in 0..50u32 {
        a.enqueue(Priority::High, message(0, round, SendMode::Reliable, 100));
        let out = flush(&mut a, t0, kab);
        assert!(out.len() <= 3, "round {round}: {} datagrams in one flush", out.len());
        for d in out {
            deliver(&mut b, t0, kab, &d);
        }
        for d in flush(&mut b, t0, kba) {
            deliver(&mut a, t0, kba, &d);
        }
    }
    // The last frame's acknowledgement is held for a ride; it goes alone once held long
    // enough, and the time it was held is taken off the sample.
    let t1 = t0 + MS;
    for d in flush(&mut b, t1, kba) {
        deliver(&mut a, t1, kba, &d);
    }
    assert!(a.rtt() < ACK_DELAY_UNIT, "zero, give or take the delay field's rounding");
    assert!(a.rto() >= MS, "the RTO keeps its granularity floor");
    assert_eq!(a.flight(), 0);
}

#[test]
fn a_resend_behind_every_kept_range_is_acknowledged_at_the_smallest_mtu() {
    // The receiver holds the most ranges it keeps, every one repeated in full, when a
    // frame older than all of them arrives again. It must be acknowledged (its sender
    // would otherwise resend it forever), in a datagram that fits the smallest MTU, and
    // no flush may write a datagram with nothing in it.
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let mut c = cfg(crate::wire::MIN_MTU);
    c.initial_window = 1 << 20;
    let mut a = Transfer::new(c.clone(), 0, 0);
    let mut b = Transfer::new(c, 0, 0);
    let mut sent = Vec::new();
    for i in 0..=(2 * MAX_RANGES as u32) {
        a.enqueue(Priority::High, message(0, i, SendMode::Reliable, 10));
        sent.extend(flush(&mut a, t0, kab));
    }
    // Frame 0 is lost, and every other frame after it: as many ranges as b keeps.
    for d in sent.iter().skip(1).step_by(2) {
        deliver(&mut b, t0, kab, d);
    }
    // b repeats its ranges on frames of its own until none is left to repeat; none of
    // it reaches a.
    let mut id = 1000;
    while b.receiver.has_repeats() {
        b.enqueue(Priority::High, message(1, id, SendMode::Reliable, 10));
        id += 1;
        flush(&mut b, t0, kba);
        assert!(id < 1100, "b's ranges are repeated within a hundred frames");
    }
    // Frame 0 arrives again, resent.
    deliver(&mut b, t0, kab, &sent[0]);
    let out = flush(&mut b, t0, kba);
    assert_eq!(out.len(), 1);
    let data = Data::decode(&out[0], kba, &Exp(&a)).expect("a valid acknowledgement"); // ok: test
    assert!(data.acks().any(|r| r.first == 0), "frame 0 is acknowledged: {:?}", data.acks().collect::<Vec<_>>());
    deliver(&mut a, t0, kba, &out[0]);
    // Frame 0 joined frame 1's range, so both are acknowledged; frame 2 never arrived.
    assert_eq!(a.window_base(), 2, "a's transfer window moves past frame 0");
}

#[test]
fn an_acknowledgement_of_a_frame_never_sent_fails_the_check() {
    // A peer holding the keys writes an acknowledgement of a frame a has not sent yet:
    // the receiver expands its 16-bit id below the next id to send, so the check
    // computed over the id the writer meant does not verify.
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let mut a = Transfer::new(cfg(1200), 500, 0);
    a.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 10));
    flush(&mut a, t0, kab);
    assert_eq!(a.next_frame_id(), 501);
    for unsent in [501, 505, 501 + 30_000] {
        let acks = [AckRange { first: unsent, last: unsent }];
        let header = DataHeader { frame: None, ping: None, ping_ack: None, ack_delay: 0, acks: &acks };
        let mut buf = Vec::new();
        let w = DataWriter::new(&mut buf, kba, &header);
        w.finish();
        assert_eq!(Data::decode(&buf, kba, &Exp(&a)), Err(crate::wire::DecodeError::BadChecksum), "{unsent}");
    }
    // The same datagram naming the frame that was sent verifies.
    let acks = [AckRange { first: 500, last: 500 }];
    let header = DataHeader { frame: None, ping: None, ping_ack: None, ack_delay: 0, acks: &acks };
    let mut buf = Vec::new();
    DataWriter::new(&mut buf, kba, &header).finish();
    assert!(deliver(&mut a, t0, kba, &buf).is_none(), "not a frame");
    assert_eq!(a.flight(), 0, "frame 500 acknowledged");
}

#[test]
fn keepalive_pings_keep_their_interval_however_long_the_round_trip() {
    // An RTT longer than the peer's timeout must not stretch the keepalive past it: the
    // idle period was once max(ping_interval, srtt).
    let t0 = Time::ZERO;
    let key = Key::connection(1, 2);
    let mut c = cfg(1200);
    Arc::make_mut(&mut c.shared).ping_interval = 500 * MS;
    let mut a = Transfer::new(c, 0, 0);
    a.rtt_sample(Duration::from_secs(20));
    assert_eq!(flush(&mut a, t0, key).len(), 1, "the first ping");
    assert_eq!(a.next_timeout(), Some(t0 + 500 * MS));
    // With data in flight, once per RTT, but never less often than the keepalive.
    a.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 10));
    flush(&mut a, t0 + 500 * MS, key);
    assert!(a.flight() > 0);
    assert_eq!(a.ping_period(true), 500 * MS);
    let mut b = Transfer::new(cfg(1200), 0, 0);
    b.rtt_sample(Duration::ZERO);
    b.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 10));
    flush(&mut b, t0, key);
    assert_eq!(b.ping_period(true), MIN_PING_PERIOD, "never more often than the floor");
}

#[test]
fn a_one_way_stream_is_acknowledged_every_second_frame_without_spurious_resends() {
    // A client sends a reliable input every 16 ms and hears nothing but acknowledgements:
    // the receiver waits for the next input to acknowledge two at once, and the sender's
    // resend timer allows for that wait (no frame counts as lost on a lossless link).
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let mut a = Transfer::new(cfg(1200), 0, 0);
    let mut b = Transfer::new(cfg(1200), 0, 0);
    let mut ab = Link::new(25 * MS, 0.0, 1);
    let mut ba = Link::new(25 * MS, 0.0, 2);
    let mut acks = 0u32;
    for step in 0..2_200u32 {
        let now = t0 + step * MS;
        if step < 2_000 && step.is_multiple_of(16) {
            a.enqueue(Priority::High, message(0, step / 16, SendMode::Reliable, 50));
        }
        for d in ab.due(now) {
            deliver(&mut b, now, kab, &d);
        }
        for d in ba.due(now) {
            deliver(&mut a, now, kba, &d);
        }
        for (t, link, key, count) in [(&mut a, &mut ab, kab, None), (&mut b, &mut ba, kba, Some(&mut acks))] {
            t.set_step_interval(MS);
            t.on_timeout(now);
            let datagrams = flush(t, now, key);
            if let Some(c) = count {
                *c += datagrams.len() as u32;
            }
            for d in datagrams {
                link.send(now, d);
            }
        }
    }
    let s = a.stats();
    assert!(s.frames_sent >= 125, "{s:?}");
    assert!(u64::from(acks) <= s.frames_sent * 6 / 10, "{acks} acknowledgements for {} frames", s.frames_sent);
    assert_eq!((s.frames_lost, s.frames_resent), (0, 0), "no resend on a lossless link: {s:?}");
    assert!(a.is_idle(), "everything acknowledged");
}

#[test]
fn losses_are_judged_once_a_whole_batch_of_datagrams_is_handled() {
    // Two frames, acknowledged by two datagrams of the peer that arrive together (a loop
    // that ran late handles its backlog at once). The first makes the resend timeout
    // short (it is the first round-trip sample, and the peer reports holding it long);
    // the second acknowledges the second frame. Judged after the first datagram, the
    // second frame would count as lost and be resent; judged after the batch, nothing is.
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let mut a = Transfer::new(cfg(600), 0, 0);
    let mut b = Transfer::new(cfg(600), 0, 0);
    a.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 400));
    a.enqueue(Priority::High, message(0, 2, SendMode::Reliable, 400));
    let frames = flush(&mut a, t0, kab);
    assert_eq!(frames.len(), 2);
    deliver(&mut b, t0 + 10 * MS, kab, &frames[0]);
    let first = flush(&mut b, t0 + 9 * SEC, kba);
    deliver(&mut b, t0 + 9 * SEC, kab, &frames[1]);
    let second = flush(&mut b, t0 + 9 * SEC, kba);
    let late = t0 + 9 * SEC + 10 * MS;
    for d in first.iter().chain(&second) {
        deliver(&mut a, late, kba, d);
    }
    flush(&mut a, late, kab);
    let s = a.stats();
    assert_eq!((s.frames_acked, s.frames_lost, s.frames_resent), (2, 0, 0), "{s:?}");
}

/// Two transfers at 1,200 bytes under the spec's controller (which halves its window on
/// a drop, unpaced), both starting at id 0.
fn aimd_pair() -> (Transfer, Transfer) {
    let mut c = cfg(1200);
    c.congestion = CongestionControl::Aimd;
    (Transfer::new(c.clone(), 0, 0), Transfer::new(c, 0, 0))
}

#[test]
fn losses_that_prove_spurious_take_back_the_congestion_reaction() {
    // The spec's controller halves its window on a drop. The receiver's loop stalls
    // 40 ms: the sender's timer declares its frames lost and halves; then the receiver's
    // backlog acknowledges every first transmission, and the halving is taken back.
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let (mut a, mut b) = aimd_pair();
    let (mut ab, mut ba) = (Link::new(25 * MS, 0.0, 1), Link::new(25 * MS, 0.0, 2));
    let (mut before, mut lowest) = (0, usize::MAX);
    for step in 0..1_000u32 {
        let now = t0 + step * MS;
        if step < 600 && step.is_multiple_of(10) {
            a.enqueue(Priority::High, message(0, step / 10, SendMode::Reliable, 100));
        }
        let stalled = (300..340).contains(&step);
        if step == 300 {
            before = a.cwnd();
        }
        if !stalled {
            for d in ab.due(now) {
                deliver(&mut b, now, kab, &d);
            }
        }
        for d in ba.due(now) {
            deliver(&mut a, now, kba, &d);
        }
        a.set_step_interval(MS);
        a.on_timeout(now);
        for d in flush(&mut a, now, kab) {
            ab.send(now, d);
        }
        if !stalled {
            b.set_step_interval(MS);
            b.on_timeout(now);
            for d in flush(&mut b, now, kba) {
                ba.send(now, d);
            }
        }
        lowest = lowest.min(a.cwnd());
    }
    let s = a.stats();
    assert!(s.frames_lost > 0 && s.losses_spurious == s.frames_lost, "the stall's losses, all spurious: {s:?}");
    assert!(lowest < before, "the losses halved the window ({lowest} from {before})");
    assert_eq!(s.congestion_undos, 1, "{s:?}");
    assert!(a.cwnd() >= before, "the window came back: {} from {before}", a.cwnd());
    assert!(a.is_idle());
}

#[test]
fn unreliable_data_is_not_held_behind_reliable_data_the_pacer_spreads() {
    // Eight 1,000-byte reliable messages (a fragmented bulk packet) leave at the pacing
    // rate; a tick's unreliable state queued meanwhile goes at once, alone, and the
    // reliable data behind it waits for the pacer.
    let t0 = Time::ZERO;
    let key = Key::connection(1, 2);
    let mut a = Transfer::new(cfg(1200), 0, 0);
    let b = Transfer::new(cfg(1200), 0, 0);
    for id in 0..8 {
        a.enqueue(Priority::High, message(0, id, SendMode::Reliable, 1000));
    }
    let first = flush(&mut a, t0, key);
    assert!(first.len() < 8 && a.pacing_deadline().is_some(), "the pacer holds the rest back");
    a.enqueue(Priority::High, message(1, 99, SendMode::Unreliable, 100));
    let urgent = flush(&mut a, t0, key);
    assert_eq!(frame_ids(&urgent, &b, key), vec![vec![99]], "the state alone, at once");
    assert!(flush(&mut a, t0, key).is_empty(), "the reliable data still waits");
    // At most one datagram beyond the pacer's usual debt: a stream of states at the same
    // instant stops once the pacer is a datagram in debt.
    for id in 100..120 {
        a.enqueue(Priority::High, message(1, id, SendMode::Unreliable, 300));
    }
    let more: usize = flush(&mut a, t0, key).iter().map(Bytes::len).sum();
    assert!(more <= 1200, "{more} bytes of states beyond the pacer's allowance");
    // Once the pacer has refilled, the reliable data goes on.
    let later = a.pacing_deadline().expect("data waits");
    assert!(!flush(&mut a, later, key).is_empty());
}

#[test]
fn the_skipped_id_check_stopping_at_the_first_older_one_agrees_with_reading_them_all() {
    // Skipped ids as the sender keeps them: increasing, at most 32, spread over a few
    // thousand ids, from anywhere in the space (so across the wrap too).
    fn agrees(start: u32, gaps: Vec<u8>, first_off: u16, span: u16) -> bool {
        let s = SeqSpace::FRAME;
        let mut k = start;
        let skipped: VecDeque<u32> = gaps
            .iter()
            .take(SKIPS_REMEMBERED)
            .map(|g| {
                k = s.add(k, u32::from(*g) + 1);
                k
            })
            .collect();
        let first = s.add(start, u32::from(first_off) % 10_000);
        let span = u64::from(span) % 4_000 + 1;
        let all = skipped.iter().any(|&k| s.in_range(k, first, span));
        names_a_skipped_id(&skipped, first, span) == all
    }
    quickcheck::QuickCheck::new().tests(5_000).quickcheck(agrees as fn(u32, Vec<u8>, u16, u16) -> bool);
    // The cases that matter, by hand: a range over an old skip behind newer ones, and a
    // range between skips.
    let skipped: VecDeque<u32> = [u32::MAX - 2, 5, 300, 700].into_iter().collect();
    assert!(names_a_skipped_id(&skipped, 4, 3), "an old skip, behind two newer ones");
    assert!(names_a_skipped_id(&skipped, u32::MAX - 3, 2), "the oldest, across the wrap");
    assert!(!names_a_skipped_id(&skipped, 6, 294), "between skips");
    assert!(!names_a_skipped_id(&skipped, 701, 50), "past the newest");
}

/// Two sides each sending one reliable message per 60 Hz tick over a 50 us path (two
/// games on one machine), each holding its acknowledgements for its own next tick. The
/// second side's ticks come first 1 ms after the first side's (short holds), then 12 ms
/// after, then they drift by 0.5 ms a tick. The first side's resend timeout must follow
/// the phase: with a timeout that allowed only for the holds reported lately, the short
/// phase shrank it to 2 ms and, once the phase moved, most frames timed out before their
/// acknowledgement rode the peer's next tick (issue 32, the two_clients example).
#[test]
fn a_peer_that_holds_acknowledgements_for_its_own_tick_is_waited_for_whatever_the_phase() {
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let mut a = Transfer::new(cfg(1200), 10, 20);
    let mut b = Transfer::new(cfg(1200), 20, 10);
    let (mut ab, mut ba) = (Link::new(Duration::from_micros(50), 0.0, 1), Link::new(Duration::from_micros(50), 0.0, 2));
    let tick = Duration::from_micros(16_667);
    let phase = |k: u32| match k {
        0..120 => MS,
        120..240 => 12 * MS,
        _ => (12 * MS + (k - 240) * MS / 2).min(tick - MS),
    };
    let (mut next_a, mut next_b, mut ka, mut kb) = (t0, t0 + phase(0), 0u32, 0u32);
    let step = Duration::from_micros(250);
    let mut delivered = (0usize, 0usize);
    for i in 0..(8 * 4_000u32) {
        let now = t0 + step * i;
        if now >= next_a && ka < 400 {
            a.enqueue(Priority::High, message(0, ka, SendMode::Reliable, 40));
            ka += 1;
            next_a = t0 + tick * ka;
        }
        if now >= next_b && kb < 400 {
            b.enqueue(Priority::High, message(0, kb, SendMode::Reliable, 40));
            kb += 1;
            next_b = t0 + tick * kb + phase(kb);
        }
        for d in ab.due(now) {
            delivered.0 += deliver(&mut b, now, kab, &d).map_or(0, |(_, ids)| ids.len());
        }
        for d in ba.due(now) {
            delivered.1 += deliver(&mut a, now, kba, &d).map_or(0, |(_, ids)| ids.len());
        }
        for (t, link, key) in [(&mut a, &mut ab, kab), (&mut b, &mut ba, kba)] {
            t.set_step_interval(step);
            t.on_timeout(now);
            let mut buf = BytesMut::new();
            while let Some(n) = t.poll_datagram(now, key, &Wide, &mut buf) {
                link.send(now, buf.split_to(n).freeze());
            }
        }
    }
    assert!(delivered.0 >= 400 && delivered.1 >= 400, "{delivered:?}");
    for (side, t) in [("a", &a), ("b", &b)] {
        let s = t.stats();
        assert!(
            s.frames_lost * 100 <= s.frames_sent,
            "{side} declared {} of {} frames lost",
            s.frames_lost,
            s.frames_sent
        );
    }
}

/// A move to a new address resends everything in flight at the next flush, oldest first,
/// without a congestion response or a backoff, and a resend that arrives completes the
/// transfer as any other.
#[test]
fn a_path_change_resends_the_flight_at_once_without_a_congestion_response() {
    let t0 = Time::ZERO;
    let (kab, kba) = (Key::connection(1, 2), Key::connection(2, 1));
    let (mut a, mut b) = aimd_pair();
    for id in 0..4 {
        a.enqueue(Priority::High, message(0, id, SendMode::Reliable, 500));
    }
    let lost_on_the_old_path = flush(&mut a, t0, kab);
    assert_eq!(lost_on_the_old_path.len(), 2);
    let (cwnd, in_flight) = (a.cwnd(), a.frames_in_flight());
    assert_eq!(in_flight, 2);
    let moved = t0 + 10 * MS;
    a.on_path_change(moved);
    let s = a.stats();
    assert_eq!(s.frames_lost, 2, "{s:?}");
    assert_eq!(a.cwnd(), cwnd, "no congestion response");
    assert_eq!(a.rto(), Transfer::new(cfg(1200), 0, 0).rto(), "no backoff");
    let resent = flush(&mut a, moved, kab);
    let ids: Vec<u32> =
        resent.iter().filter_map(|d| Data::decode(d, kab, &Exp(&b)).ok().and_then(|d| d.frame_id)).collect();
    assert!(ids.len() >= 2, "the flight went again at once: {ids:?}");
    // The resends reach the remote at its new address; the rest follows.
    let mut got: Vec<u32> =
        resent.iter().filter_map(|d| deliver(&mut b, moved, kab, d)).flat_map(|(_, ids)| ids).collect();
    let mut now = moved;
    for _ in 0..20 {
        for d in flush(&mut b, now, kba) {
            deliver(&mut a, now, kba, &d);
        }
        for d in flush(&mut a, now, kab) {
            if let Some((_, ids)) = deliver(&mut b, now, kab, &d) {
                got.extend(ids);
            }
        }
        now += 5 * MS;
        a.on_timeout(now);
        b.on_timeout(now);
    }
    got.sort_unstable();
    got.dedup();
    assert_eq!(got, vec![0, 1, 2, 3], "every message arrived");
    assert!(a.is_idle());
}
