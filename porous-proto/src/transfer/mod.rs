//! The transfer layer (spec §3.1): congestion-controlled, prioritised message delivery
//! between two peers, resending what is reliable.
//!
//! A [`Transfer`] is owned by one peer and driven with explicit times. It knows messages
//! only as opaque [`OutMessage`]s with a reliability and a channel tag (for accounting);
//! it neither sorts nor de-duplicates what it receives, which is the sequencing layer's
//! job. Its parts, one file each:
//!
//! | part | owns |
//! |---|---|
//! | `flush` | one datagram of a flush, a step at a time, and the frames it assembles |
//! | `queues` | the high and low priority send queues |
//! | `inflight` | the transfer queue: frames in flight, `k_b`, the flight size, loss rules |
//! | `acks` | the receive window `i_b` and the acknowledgement ranges |
//! | `rtt` | RFC 6298 round-trip estimate and RTO, equations (5)-(7) |
//! | `ping` | pings and their echoes |
//! | `congestion` | the congestion window, equations (8)-(15) |
//! | `pmtu` | path MTU discovery: probes, the size datagrams use, black holes |
//!
//! Each flush ([`Transfer::poll_datagram`] until `None`) sends, in this order: due
//! acknowledgements (piggybacked on the first frame when they fit, alone before it
//! otherwise), lost frames inside the congestion window, then new frames assembled from
//! the queues while the congestion and transfer windows allow. Pings and their echoes ride
//! on whatever goes out first.

mod acks;
mod congestion;
pub(crate) mod delivery;
mod flush;
mod inflight;
mod pacing;
mod ping;
mod pmtu;
mod queues;
mod redundancy;
mod rtt;

use crate::time::Time;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::BufMut;
use smallvec::SmallVec;

use crate::config::{CongestionControl, PeerConfig, Priority};
use crate::lean::Nanos;
use crate::seq::SeqSpace;
pub(crate) use crate::stats::TransferStats;
use crate::wire::{
    ACK_DELAY_UNIT, AckRange, CHECK_LEN, Data, DataHeader, DataWriter, FRAME_OVERHEAD_MAX, Key, RunContext,
    ack_delay_len,
};
use acks::{Cadence, MAX_RANGES, Receiver};
use congestion::{AckEvent, Controller, Limits, Path, Reaction};
use delivery::Delivery;
pub(crate) use inflight::SPAN_COST;
use inflight::{Frame, InFlight, Outcome};
use pacing::Pacer;
use ping::Ping;
use pmtu::Discovery;
use queues::SendQueues;
pub(crate) use queues::{MESSAGE_OVERHEAD, OutMessage, Tag, stamped};
use redundancy::Redundancy;
use rtt::{INITIAL_RTT, Rtt};

/// Bytes of a frame besides its messages, as counted in the flight size: type byte, the
/// widest frame id and the check.
pub(crate) const FRAME_BASE: usize = 1 + 4 + CHECK_LEN;

/// Shortest interval between pings while frames are in flight.
pub(crate) const MIN_PING_PERIOD: Duration = Duration::from_millis(10);

/// Decides, when a message is encoded, whether its packet id may travel as 16 bits (the
/// sending channel knows whether the receiver can expand it).
pub(crate) trait IdPolicy {
    fn short_id(&self, channel: u8, id: u32) -> bool;
}

/// A value per channel, inline for the usual few channels: a connection's small tables
/// live in its own allocation rather than in heap blocks of their own, each one more
/// cache miss on the paths that read them for every message.
pub(crate) type PerChannel<T> = SmallVec<[T; 4]>;

/// What the transfer layers of a host's connections share: set from the host's
/// configuration, built once per host and kept behind one `Arc`, so a connection does not
/// carry its own copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shared {
    /// Ping period while nothing is in flight (keepalive).
    pub(crate) ping_interval: Duration,
    /// N_P.
    pub(crate) frame_window: u32,
    /// S.
    pub(crate) sentinel_spacing: u32,
    /// Most frames, and most message slots, the in-flight record may span from its oldest
    /// outstanding frame. Done frames behind an outstanding one keep their place until it
    /// is acknowledged, so without this a peer that never acknowledges one frame (or a
    /// link that keeps losing it) would make the record grow with everything sent after.
    pub(crate) span_limit: usize,
    /// Each channel's share of its priority, in round robin turns (1 for a channel not
    /// listed).
    pub(crate) weights: PerChannel<u32>,
    /// Whether each channel's small reliable messages get repair copies.
    pub(crate) repair: PerChannel<bool>,
}

impl Shared {
    /// The defaults for `channels` channels: the spec's windows, a 500 ms keepalive, equal
    /// weights, repair copies on.
    pub(crate) fn new(channels: usize) -> Self {
        Self {
            ping_interval: Duration::from_millis(500),
            frame_window: crate::seq::FRAME_WINDOW,
            sentinel_spacing: crate::seq::SENTINEL_SPACING,
            span_limit: crate::seq::FRAME_WINDOW as usize,
            weights: smallvec::smallvec![1; channels],
            repair: smallvec::smallvec![true; channels],
        }
    }

    /// The settings of a host whose connections are configured by `config` (validated).
    pub(crate) fn of(config: &PeerConfig) -> Self {
        Self {
            ping_interval: config.ping_interval,
            span_limit: span_limit(config),
            weights: config.channels.iter().map(|c| c.weight).collect(),
            repair: config.channels.iter().map(|c| c.repair).collect(),
            ..Self::new(config.channels.len())
        }
    }
}

/// Most frames and message slots the in-flight record may span under `config` (see
/// [`Shared::span_limit`]). Every message held costs its channel at least a queue slot of
/// its limit, so twice the messages the limits allow leaves room for done frames in
/// between.
pub(crate) fn span_limit(config: &PeerConfig) -> usize {
    let queued: usize = config.channels.iter().map(|c| c.max_queued_bytes).sum();
    (2 * queued / MESSAGE_OVERHEAD).clamp(64, crate::seq::FRAME_WINDOW as usize)
}

/// Parameters of one connection's transfer layer: the host's shared ones and what was
/// negotiated for this connection (read when the layer is made; only the MTU and the
/// shared part are kept).
#[derive(Clone, Debug)]
pub(crate) struct TransferConfig {
    /// The host's settings, shared by its connections.
    pub(crate) shared: Arc<Shared>,
    /// Negotiated datagram size.
    pub(crate) mtu: usize,
    /// The largest datagram path MTU discovery may raise the size to (at or below `mtu`:
    /// no discovery), and the largest probe this side answers.
    pub(crate) mtu_ceiling: usize,
    /// The largest datagram (as received: a sealed one opened) this side answers a probe
    /// of: the ceiling with sealing's bytes back on.
    pub(crate) mtu_accept: usize,
    /// Congestion window before any acknowledgement, in bytes.
    pub(crate) initial_window: usize,
    /// Negotiated bandwidth B for sending, bytes per second, 0 for no limit.
    pub(crate) bandwidth: u64,
    /// Number of channel tags to account bytes for.
    pub(crate) channels: usize,
    /// Seed of the generator that picks frame ids to skip; 0 never skips.
    pub(crate) skip_seed: u64,
    /// The congestion controller.
    pub(crate) congestion: CongestionControl,
}

impl TransferConfig {
    /// A configuration with its own default [`Shared`] part (tests; a host shares one).
    #[cfg(test)]
    pub(crate) fn new(mtu: usize, channels: usize) -> Self {
        Self::with_shared(Arc::new(Shared::new(channels)), mtu, channels)
    }

    /// The configuration of a connection of a host whose shared settings are `shared`.
    pub(crate) fn with_shared(shared: Arc<Shared>, mtu: usize, channels: usize) -> Self {
        Self {
            shared,
            mtu,
            mtu_ceiling: mtu,
            mtu_accept: mtu,
            initial_window: 10 * mtu,
            bandwidth: 0,
            channels,
            skip_seed: 0,
            congestion: CongestionControl::default(),
        }
    }
}

/// The transfer layer of one connection.
#[derive(Debug)]
pub(crate) struct Transfer {
    /// The host's settings (shared), and this connection's datagram size: all of the
    /// configuration the layer reads after it is made.
    shared: Arc<Shared>,
    mtu: usize,
    queues: SendQueues,
    inflight: InFlight,
    receiver: Receiver,
    /// This side's rhythm of sending frames: how long acknowledgements wait for a ride.
    cadence: Cadence,
    cc: Controller,
    delivery: Delivery,
    pacer: Pacer,
    /// When the pacer will let the next datagram go, while it holds back data that is
    /// ready to send (the pacing timer).
    pacing_wait: Option<Time>,
    rtt: Rtt,
    ping: Ping,
    pmtu: Discovery,
    /// The largest datagram this side takes from the peer's discovery (see
    /// [`TransferConfig::mtu_accept`]).
    mtu_accept: usize,
    /// Bytes each channel holds in the queues and in flight.
    queued: PerChannel<usize>,
    stats: TransferStats,
    /// Xorshift state choosing the ids to skip (0: never).
    skip: u64,
    /// The latest ids skipped, newest last. The in-flight record forgets a skipped id
    /// once it reaches the front, but a liar may acknowledge it later still.
    skipped: VecDeque<u32>,
    /// Repair candidates: small reliable messages sent and not yet copied, oldest first,
    /// with their store index and send time.
    repair: VecDeque<(u64, Time)>,
    /// The path's loss and the credit it earns repair copies.
    redundancy: Redundancy,
    /// When a tail-loss probe goes out if no datagram has carried the candidates' copies.
    probe_at: Option<Time>,
    /// When the last datagram went to the peer (the keepalive counts from it).
    last_sent: Option<Time>,
    /// The hold the resend timeout allows for (see [`Transfer::rto`]), kept current where
    /// its inputs change (a frame sent, a frame received) rather than recomputed from
    /// `Time`s at each of the several reads a datagram makes.
    rto_hold: Nanos,
    /// The losses declared since the congestion state was last known good, and that
    /// state: taken back if they all prove spurious (see [`Episode`]).
    episode: Option<Episode>,
    /// Resend timeouts in a row with nothing acknowledged between them: each doubles the
    /// next (see [`Transfer::backed_off_rto`]). One counts only when a transmission made
    /// since the last one timed out too (the serial the next transmission had then is
    /// `backoff_from`): frames sent before a timeout, timing out after it, say nothing new.
    backoff: u8,
    backoff_from: u64,
}

/// The longest a backed-off resend timeout grows (RFC 6298 §2.5's bound), unless the
/// estimator's own is longer.
const MAX_RTO: Duration = Duration::from_secs(60);

/// Timeouts in a row (nothing acknowledged between them) from which the path counts as
/// silent: at most one transmission is in flight, a probe, and each timeout doubles the
/// next, until something is acknowledged. One timeout is a tail loss, and a second a
/// resend lost too, common on a lossy path (at 20% loss, doubling from the second raised
/// the simulated game's input p99 by 10%); a third is a peer that hears nothing.
const SILENT_AFTER: u8 = 3;

/// A run of declared losses whose congestion reaction may yet be taken back, as F-RTO
/// (RFC 5682) and Eifel (RFC 3522) take back a timeout's: it opens with the first loss
/// declared while none is open, keeping the controller's state from just before; every
/// later loss joins it. If each of its losses proves spurious (the frame's first
/// transmission is acknowledged after all: a peer's loop ran late, its acknowledgement
/// was late), the controller's reaction is undone ([`TransferStats::congestion_undos`]).
/// Once a transmission made after its latest loss is acknowledged with some of them
/// still unproven, they were real (a late acknowledgement of an earlier transmission
/// comes before that of a later one) and the episode closes as it stands.
#[derive(Clone, Copy, Debug)]
struct Episode {
    before: Reaction,
    /// Losses declared, and of those, proved spurious.
    lost: u32,
    spurious: u32,
    /// The serial of the first transmission made after its latest loss.
    after: u64,
}

/// The largest message repair copies: small reliable messages are what a lost datagram
/// delays most, relative to their size.
pub(crate) const REPAIR_MAX: usize = 256;

/// Whether the `span` frame ids from `first` include one of `skipped`: ids kept in the order
/// sent, newest last, all within far less than half the id space of each other. From the
/// newest back, the first one older than the range ends the search; an honest range starts
/// past the latest skip, so that is usually the only one read.
fn names_a_skipped_id(skipped: &VecDeque<u32>, first: u32, span: u64) -> bool {
    let s = SeqSpace::FRAME;
    skipped.iter().rev().take_while(|&&k| !s.is_newer(first, k)).any(|&k| s.in_range(k, first, span))
}

impl Transfer {
    /// A transfer layer whose first frame id is `local_base` and whose peer's first frame id
    /// is `remote_base` (both from the handshake).
    pub(crate) fn new(cfg: TransferConfig, local_base: u32, remote_base: u32) -> Self {
        let ceiling = (cfg.shared.frame_window as usize).saturating_mul(cfg.mtu);
        let limits = Limits { mtu: cfg.mtu, initial_window: cfg.initial_window, bandwidth: cfg.bandwidth, ceiling };
        Self {
            cc: Controller::new(cfg.congestion, limits),
            delivery: Delivery::default(),
            pacer: Pacer::default(),
            pacing_wait: None,
            queues: SendQueues::default(),
            inflight: InFlight::new(local_base),
            receiver: Receiver::new(remote_base, cfg.shared.frame_window),
            cadence: Cadence::default(),
            rtt: Rtt::new(INITIAL_RTT),
            ping: Ping::default(),
            pmtu: Discovery::new(cfg.mtu, cfg.mtu_ceiling),
            mtu_accept: cfg.mtu_accept,
            queued: smallvec::smallvec![0; cfg.channels],
            stats: TransferStats::default(),
            skip: cfg.skip_seed,
            skipped: VecDeque::new(),
            repair: VecDeque::new(),
            redundancy: Redundancy::default(),
            probe_at: None,
            last_sent: None,
            rto_hold: Nanos::default(),
            episode: None,
            backoff: 0,
            backoff_from: 0,
            mtu: cfg.mtu,
            shared: cfg.shared,
        }
    }

    /// The frames a loss now would hold back on an ordered channel until its resend: the
    /// lost one and those sent in the round trip after it (the frames in flight, or the
    /// round trip over the time between sends, whichever is more: a stream just started
    /// has few in flight yet).
    fn held(&self) -> usize {
        let gap = self.cadence.gap().as_nanos();
        let per_rtt = self.rtt.srtt().as_nanos().checked_div(gap).unwrap_or(0) as usize;
        1 + self.inflight.in_flight_frames().max(per_rtt)
    }

    fn path(&self) -> Path {
        Path { srtt: self.rtt.srtt(), rto: self.rto() }
    }

    // ---- sending -------------------------------------------------------------------

    /// Queues a message at `priority`.
    pub(crate) fn enqueue(&mut self, priority: Priority, m: OutMessage) {
        if let Some(q) = self.queued.get_mut(usize::from(m.channel)) {
            *q += m.cost();
        }
        self.queues.push(priority, &self.shared.weights, m);
    }

    /// Stamps the deadlines of messages queued since the last call that gave the time.
    pub(crate) fn stamp(&mut self, now: Time) {
        self.queues.stamp(now);
    }

    /// Bytes `channel` holds in the send queues and in flight.
    pub(crate) fn queued_bytes(&self, channel: u8) -> usize {
        self.queued.get(usize::from(channel)).copied().unwrap_or(0)
    }

    /// Unreliable packets of `channel` queued and not yet sent.
    pub(crate) fn queued_unreliable(&self, channel: u8) -> usize {
        self.queues.queued_unreliable(channel)
    }

    /// Drops queued unreliable packets of `channel`, oldest first, to free `need` bytes.
    /// Returns the bytes freed.
    pub(crate) fn drop_unreliable(&mut self, channel: u8, need: usize) -> usize {
        let (queued, stats) = (&mut self.queued, &mut self.stats);
        self.queues.drop_unreliable(channel, need, |m| {
            release(queued, m);
            stats.unreliable_dropped += 1;
        })
    }

    /// Whether nothing waits to be sent and nothing is in flight.
    pub(crate) fn is_idle(&self) -> bool {
        self.queues.is_empty() && self.inflight.outstanding() == 0
    }

    /// One past the newest frame received: it changes only when a frame newer than every
    /// other arrives.
    pub(crate) fn newest_received(&self) -> u32 {
        self.receiver.base()
    }

    /// The references truncated frame ids expand around: one past the newest frame
    /// received, and the next frame id to send (fuzzing forges datagrams with them).
    #[cfg(feature = "arbitrary")]
    pub(crate) fn id_references(&self) -> (u32, u32) {
        (self.receiver.base(), self.inflight.next_id())
    }

    /// Bytes this layer holds: its structures, and the payloads queued or in flight.
    pub(crate) fn memory(&self) -> usize {
        self.queues.memory()
            + self.inflight.memory()
            + self.receiver.memory()
            + self.skipped.capacity() * size_of::<u32>()
            + self.repair.capacity() * size_of::<(u64, Time)>()
            + if self.queued.spilled() { self.queued.capacity() * size_of::<usize>() } else { 0 }
            + self.queued.iter().sum::<usize>()
    }

    /// Number of messages waiting in the send queues.
    #[cfg(test)]
    pub(crate) fn queued_messages(&self) -> usize {
        self.queues.len()
    }

    /// Drops everything queued or in flight.
    pub(crate) fn clear(&mut self) {
        self.stats.frames_unacknowledged += self.inflight.outstanding() as u64;
        let queued = &mut self.queued;
        self.queues.clear(|m| release(queued, m));
        self.inflight.clear(|m| release(queued, m));
    }

    /// How often a ping rides on what goes out, with frames in flight (`busy`) or not.
    fn ping_period(&self, busy: bool) -> Duration {
        // A round-trip time can measure zero (a loopback, a simulation); pings never go
        // out more often than every MIN_PING_PERIOD, or "once per RTT" would mean always.
        // Nor less often than the keepalive interval, however long the RTT: the other
        // side times out on silence, and on a path slower than its timeout only a steady
        // stream of pings (answered long after) keeps both sides hearing each other.
        if busy {
            self.rtt.srtt().clamp(MIN_PING_PERIOD, self.shared.ping_interval.max(MIN_PING_PERIOD))
        } else {
            self.shared.ping_interval
        }
    }

    /// When a datagram must go out even with nothing else in it, as a keepalive: a
    /// `ping_interval` after the last one.
    fn keepalive_at(&self) -> Option<Time> {
        self.last_sent.map(|t| t + self.shared.ping_interval)
    }

    /// Whether the peer acknowledged a frame it cannot have received.
    pub(crate) fn misbehaving(&self) -> bool {
        self.stats.dishonest_acks > 0
    }

    // ---- receiving -----------------------------------------------------------------

    /// Expands a frame id sent as its low `bytes` bytes.
    pub(crate) fn expand_frame_id(&self, truncated: u32, bytes: u32) -> u32 {
        self.receiver.expand(truncated, bytes)
    }

    /// Expands the newest acknowledged frame id of an ack section.
    pub(crate) fn expand_ack_largest(&self, truncated: u16) -> u32 {
        SeqSpace::FRAME.expand_below(u32::from(truncated), 16, self.inflight.next_id())
    }

    /// Handles everything of a verified datagram but its messages: the ping, its echo and
    /// the acknowledgements. What the acknowledgements reveal as lost is found at the next
    /// flush, once every datagram received meanwhile has been handled.
    pub(crate) fn on_datagram(&mut self, now: Time, data: &Data<'_>, len: usize) {
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += len as u64;
        if let Some(id) = data.ping {
            // A probe larger than this side takes goes unanswered: discovery never raises
            // a peer beyond what this side agreed to receive.
            if len <= self.mtu_accept {
                self.ping.on_ping(id, now, data.frame_id.is_some());
            } else {
                self.stats.mtu_probes_refused += 1;
            }
        }
        if let Some(id) = data.ping_ack {
            self.pmtu.on_echo(now, id);
        }
        let held = ACK_DELAY_UNIT * data.ack_delay;
        if let Some(sample) = data.ping_ack.and_then(|id| self.ping.on_echo(now, id)) {
            // An echo that waited, waited with the acknowledgement of the frame its ping
            // came with: the reported delay is its wait as well.
            self.rtt.on_delayed_sample(now, sample, held);
            self.rto_hold = self.current_rto_hold();
            // The path carries both ways again (a keepalive went through): the next
            // resend need not wait out a backed-off timeout.
            self.backoff = 0;
        }
        // The newest frame acknowledged here that was sent only once gives an RTT sample;
        // when it is the newest the peer acknowledges, the peer said how long it held it.
        let mut newest: Option<(u64, Time, u32)> = None;
        let (mut acked, mut spurious) = (0, 0);
        for range in data.acks() {
            let (a, s) = self.on_ack_range(now, range, &mut newest);
            acked += a;
            spurious += s;
        }
        let rtt = newest.map(|(_, sent, id)| {
            let sample = now.saturating_duration_since(sent);
            if data.ack_largest() == Some(id) {
                // The RTO allows for the peer's holds: a delay longer than any hold is a
                // repeat carrying a lost acknowledgement, which says nothing of them.
                if held <= acks::MAX_ACK_DELAY {
                    self.rtt.on_ack_delay(held);
                }
                self.rtt.on_delayed_sample(now, sample, held);
            } else {
                self.rtt.on_sample(sample);
            }
            // The hold allowed for a peer that rides its own frames follows the round trip.
            self.rto_hold = self.current_rto_hold();
            self.rtt.latest()
        });
        if acked > 0 {
            // The peer hears us: the timeout is the estimator's again.
            self.backoff = 0;
            let ack = AckEvent {
                acked,
                sample: self.delivery.take_sample(self.cc.stats().min_rtt),
                rtt,
                in_flight: self.inflight.flight(),
                delivered: self.delivery.delivered(),
                spurious,
            };
            self.cc.on_ack(now, &ack, self.path());
            self.close_episode();
        }
        // No loss detection here: it runs once per batch of datagrams, at the next flush
        // ([`Transfer::on_timeout`]). A loop that ran late hands over its whole backlog
        // at once; judged after the first datagram, frames whose acknowledgements wait
        // further down the backlog would be declared lost (and resent) for nothing.
        self.inflight.pop_done();
    }

    /// Acknowledges the frames of `range`: bytes newly acknowledged, and of those the
    /// bytes of frames whose loss was spurious (declared lost, yet an earlier transmission
    /// arrived: its acknowledgement was lost or late, not the frame).
    fn on_ack_range(&mut self, now: Time, range: AckRange, newest: &mut Option<(u64, Time, u32)>) -> (usize, usize) {
        let s = SeqSpace::FRAME;
        let base = self.inflight.base();
        let next = self.inflight.next_id();
        let outstanding = i64::from(s.distance(base, next));
        let lo = s.offset(range.first, base).max(0);
        // Ranges end at the newest acknowledged id, which decoding expands below the next
        // id to send (and checks in full): no range can name a frame never sent. The
        // clamp only keeps the walk inside the queue.
        let hi = s.offset(range.last, base);
        let span = u64::from(s.distance(range.first, range.last)) + 1;
        if names_a_skipped_id(&self.skipped, range.first, span) {
            self.stats.dishonest_acks += 1;
        }
        let hi = hi.min(outstanding - 1);
        let path = self.path();
        let (mut acked, mut spurious) = (0, 0);
        // A resend acknowledged sooner than any round trip seen cannot be what arrived.
        let min_rtt = self.rtt.min();
        for i in lo..=hi {
            let id = s.add(base, i as u32);
            let queued = &mut self.queued;
            // A skipped id in range was counted above.
            let outcome = self.inflight.ack(id, now, min_rtt, |m| release(queued, m));
            if let Some(Outcome::LateAck) = outcome {
                self.stats.losses_spurious += 1;
                self.redundancy.on_spurious();
                if let Some(e) = &mut self.episode {
                    e.spurious += 1;
                }
            }
            if let Some(Outcome::Acked { size, sent_once, delivery, sent_at, was_lost, early }) = outcome {
                self.cc.on_frame_acked(now, size, path);
                if self.pmtu.is_large(size, FRAME_OVERHEAD_MAX - FRAME_BASE) {
                    // What arrived: the only transmission, or the latest unless the
                    // acknowledgement came too soon after it (`early`).
                    self.pmtu.on_large_acked(size, (!early).then_some(sent_at));
                }
                self.delivery.on_acked(now, size, delivery, sent_at);
                self.redundancy.on_delivered();
                self.stats.frames_acked += 1;
                acked += size;
                if was_lost || early {
                    spurious += size;
                    self.stats.losses_spurious += 1;
                    self.redundancy.on_spurious();
                    if let Some(e) = &mut self.episode {
                        e.spurious += 1;
                    }
                }
                if let Some((serial, sent)) = sent_once.filter(|s| newest.is_none_or(|n| s.0 > n.0)) {
                    *newest = Some((serial, sent, id));
                }
            }
        }
        (acked, spurious)
    }

    /// Undoes the congestion reaction of the open loss episode if every one of its losses
    /// proved spurious, or closes it once a transmission made after its latest loss has
    /// been acknowledged (see [`Episode`]).
    fn close_episode(&mut self) {
        let Some(e) = self.episode else { return };
        if e.spurious >= e.lost {
            self.cc.undo(e.before);
            self.stats.congestion_undos += 1;
            self.episode = None;
        } else if self.inflight.acked_since(e.after) {
            self.episode = None;
        }
    }

    /// The resend timeout, doubled for each timeout in a row that nothing acknowledged
    /// once the path counts as silent (as TCP's and QUIC's back off), up to [`MAX_RTO`]: a
    /// peer that hears nothing gets fewer and fewer resends, not one a round trip until
    /// the connection times out.
    fn backed_off_rto(&self) -> Duration {
        let rto = self.rto();
        let doublings = self.backoff.saturating_sub(SILENT_AFTER - 1).min(16);
        rto.saturating_mul(1 << doublings).min(MAX_RTO.max(rto))
    }

    /// Whether a frame (new or resent) may go: always, but while the path is silent
    /// ([`SILENT_AFTER`] timeouts in a row) only when no transmission is in flight. That
    /// one is the probe; its timeout, doubled, lets the next one go.
    fn may_transmit(&self) -> bool {
        self.backoff < SILENT_AFTER || !self.inflight.has_in_flight()
    }

    fn detect_losses(&mut self, now: Time) {
        let spacing = self.shared.sentinel_spacing;
        let path = self.path();
        let window = self.reorder_window();
        let rto = self.backed_off_rto();
        let (queued, stats, cc, pmtu, episode) =
            (&mut self.queued, &mut self.stats, &mut self.cc, &mut self.pmtu, &mut self.episode);
        let redundancy = &mut self.redundancy;
        let timed_out = self.inflight.detect_losses(now, rto, window, |q, id| {
            let (size, sent_at, serial) = q.get(id).map_or((0, now, 0), |f| (f.bytes(), f.sent_at, f.serial));
            if pmtu.is_large(size, FRAME_OVERHEAD_MAX - FRAME_BASE) {
                pmtu.on_large_lost(now, size, sent_at, serial);
            }
            if drop_lost(q, id, spacing, queued, stats) {
                redundancy.on_lost();
                let e =
                    episode.get_or_insert_with(|| Episode { before: cc.reaction(), lost: 0, spurious: 0, after: 0 });
                e.lost += 1;
                e.after = q.next_serial();
                cc.on_drop(now, size, path);
            }
        });
        // Three large frames lost in a row: a black hole unless a frame as large sent
        // after them arrives within a reordering window.
        let (wait, inflight) = (self.reorder_window(), &self.inflight);
        if self.pmtu.judge(now, wait, |serial| inflight.acked_since(serial)) {
            self.stats.black_holes += 1;
        }
        if timed_out.is_some_and(|serial| serial >= self.backoff_from) {
            self.backoff = self.backoff.saturating_add(1).min(16);
            self.backoff_from = self.inflight.next_serial();
        }
        self.stats.congestion_resets = self.cc.resets();
    }

    /// The connection moved to a new address of its remote: what is in flight went to the
    /// old one, where the remote no longer receives (its NAT forgot the mapping, or it left
    /// that network). Every frame in flight is declared lost now and resent to the new
    /// address at the next flush, rather than a reordering window after the first
    /// acknowledgement from there or a resend timeout. It says nothing of the new path:
    /// no congestion response, no black hole, no loss for the repair estimate, no backoff.
    /// A frame that did arrive is acknowledged as any spurious loss is. Path MTU discovery
    /// starts over from the base: the new path's size is its own (a frame resent larger
    /// than the base is cut, as after a black hole).
    pub(crate) fn on_path_change(&mut self, now: Time) {
        self.pmtu.on_path_change();
        let spacing = self.shared.sentinel_spacing;
        let (queued, stats) = (&mut self.queued, &mut self.stats);
        self.inflight.detect_losses(now, Duration::ZERO, Duration::ZERO, |q, id| {
            drop_lost(q, id, spacing, queued, stats);
        });
    }

    /// Runs the resend timer.
    pub(crate) fn on_timeout(&mut self, now: Time) {
        let rto = self.rto();
        self.pmtu.on_timeout(now, rto);
        self.detect_losses(now);
        self.inflight.pop_done();
    }

    /// Whether frame `k` lies inside the receive window; counts it when it does not.
    pub(crate) fn frame_in_window(&mut self, k: u32) -> bool {
        let ok = self.receiver.in_window(k);
        if !ok {
            self.stats.frames_out_of_window += 1;
        }
        ok
    }

    /// Records frame `k` as received: it will be acknowledged.
    pub(crate) fn accept_frame(&mut self, k: u32, now: Time) {
        self.receiver.record(k, now);
        self.rto_hold = self.current_rto_hold();
        self.stats.frames_received += 1;
    }

    /// How long a frame overtaken by an acknowledged later one may still be in flight
    /// before it counts as lost: a quarter RTT beyond the smoothed RTT.
    fn reorder_window(&self) -> Duration {
        (self.rtt.srtt() + self.rtt.srtt() / 4).max(rtt::GRANULARITY)
    }

    /// When loss detection must run next: the RTO of the oldest transmission in flight,
    /// or the end of its reordering window once a later one was acknowledged.
    pub(crate) fn loss_deadline(&self) -> Option<Time> {
        let (t, overtaken) = self.inflight.oldest_send()?;
        let rto = self.backed_off_rto();
        Some(t + if overtaken { rto.min(self.reorder_window()) } else { rto })
    }

    /// When the keepalive goes out if nothing else has.
    pub(crate) fn ping_deadline(&self) -> Option<Time> {
        self.keepalive_at()
    }

    /// When a held acknowledgement or echo stops waiting for a datagram to ride on.
    pub(crate) fn ack_deadline(&self) -> Option<Time> {
        [self.receiver.ack_deadline(&self.cadence), self.ping.echo_deadline(&self.cadence)].into_iter().flatten().min()
    }

    /// When path MTU discovery's timer fires: an unanswered probe counts as lost, a search
    /// starts again, or a run of large frames lost is judged.
    pub(crate) fn mtu_deadline(&self) -> Option<Time> {
        self.pmtu.deadline(self.rto(), self.reorder_window())
    }

    /// The datagram size in use now (path MTU discovery raises it from the negotiated one).
    pub(crate) fn current_mtu(&self) -> usize {
        self.pmtu.current()
    }

    /// The largest datagram size discovery may reach (the negotiated one when it is off).
    pub(crate) fn mtu_ceiling(&self) -> usize {
        self.pmtu.ceiling()
    }

    /// When the pacer lets the next datagram go, while it holds back data ready to send.
    pub(crate) fn pacing_deadline(&self) -> Option<Time> {
        self.pacing_wait
    }

    /// The next time a timer of this layer fires.
    #[cfg(test)]
    pub(crate) fn next_timeout(&self) -> Option<Time> {
        [
            self.loss_deadline(),
            self.ping_deadline(),
            self.pacing_deadline(),
            self.probe_deadline(),
            self.ack_deadline(),
            self.mtu_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A round-trip sample taken outside pings (the handshake's request and reply).
    pub(crate) fn rtt_sample(&mut self, sample: Duration) {
        self.rtt.on_sample(sample);
        self.rto_hold = self.current_rto_hold();
    }

    /// Tells the layer the host's smoothed step interval (the RTO's floor).
    pub(crate) fn set_step_interval(&mut self, step: Duration) {
        self.rtt.set_step(step);
    }

    // ---- observation ---------------------------------------------------------------

    pub(crate) fn stats(&self) -> TransferStats {
        let c = self.pmtu.counts();
        TransferStats { mtu_probes: c.probes_sent, mtu_probes_lost: c.probes_lost, ..self.stats }
    }

    pub(crate) fn rtt(&self) -> Duration {
        self.rtt.srtt()
    }

    pub(crate) fn rttvar(&self) -> Duration {
        self.rtt.rttvar()
    }

    /// The resend timeout: the estimator's, allowing for the peer's hold of the
    /// acknowledgement where it is longer than the holds the peer reported lately. A peer
    /// that sends no frames of its own holds it for this side's next frame (the second of
    /// two frames is acknowledged at once, so the hold it reports is not the first
    /// one's); one that keeps a rhythm of its own holds it for its next frame, which
    /// arrives here in that rhythm's phase, known from its frames' arrivals sooner than
    /// from its reports.
    pub(crate) fn rto(&self) -> Duration {
        debug_assert_eq!(self.rto_hold, self.current_rto_hold(), "the kept hold is current");
        self.rtt.rto_with_hold(self.rto_hold)
    }

    /// The hold [`Transfer::rto`] allows for, from the peer's rhythm and this side's.
    fn current_rto_hold(&self) -> Nanos {
        // The peer keeps a rhythm, and its next frame is not expected more than
        // MAX_ACK_DELAY before this side's last one.
        let peer_rides_own = self
            .receiver
            .next_arrival()
            .is_some_and(|t| self.cadence.last().is_none_or(|l| t + acks::MAX_ACK_DELAY >= l));
        if peer_rides_own {
            // It holds an acknowledgement for its next frame: this side's latest frame,
            // back a round trip later, rides the first of its frames to arrive then.
            self.cadence.last().map_or(Nanos::default(), |l| self.receiver.wait_for_arrival(l + self.rtt.srtt()))
        } else {
            Nanos::of(self.cadence.peer_wait())
        }
    }

    pub(crate) fn latest_rtt(&self) -> Duration {
        self.rtt.latest()
    }

    pub(crate) fn cwnd(&self) -> usize {
        self.cc.window()
    }

    pub(crate) fn ssthresh(&self) -> usize {
        self.cc.ssthresh()
    }

    pub(crate) fn congestion(&self) -> crate::stats::CongestionStats {
        self.cc.stats()
    }

    pub(crate) fn flight(&self) -> usize {
        self.inflight.flight()
    }

    /// Frames sent and not yet acknowledged or given up.
    pub(crate) fn frames_in_flight(&self) -> usize {
        self.inflight.outstanding()
    }

    /// `k_b`, the base of the transfer window.
    #[cfg(test)]
    pub(crate) fn window_base(&self) -> u32 {
        self.inflight.base()
    }

    /// `H`, the next frame id.
    #[cfg(test)]
    pub(crate) fn next_frame_id(&self) -> u32 {
        self.inflight.next_id()
    }
}

/// An unreliable message passed its deadline unsent: its bytes leave the queue, and it is
/// counted.
fn expire(queued: &mut [usize], stats: &mut TransferStats, m: &OutMessage) {
    release(queued, m);
    stats.unreliable_expired += 1;
}

/// Drops frame `id`, declared lost (spec §3.1.2: see [`InFlight::drop_frame`]), releasing
/// its unreliable messages, and counts it; whether it was in flight.
fn drop_lost(q: &mut InFlight, id: u32, spacing: u32, queued: &mut [usize], stats: &mut TransferStats) -> bool {
    let sentinel = SeqSpace::FRAME.is_spaced(id, spacing);
    let stripped = q.drop_frame(
        id,
        sentinel,
        |m| {
            release(queued, m);
            stats.unreliable_stripped += 1;
        },
        |q, r| FRAME_BASE + q.messages(r).map(|m| RunContext::explicit_len(&m.as_wire())).sum::<usize>(),
    );
    let Some(outcome) = stripped else { return false };
    stats.frames_lost += 1;
    match outcome {
        Outcome::Sentinel => stats.sentinel_frames += 1,
        Outcome::Discarded => stats.frames_unacknowledged += 1,
        _ => {}
    }
    true
}

fn release(queued: &mut [usize], m: &OutMessage) {
    if let Some(q) = queued.get_mut(usize::from(m.channel)) {
        *q = q.saturating_sub(m.cost());
    }
}

#[cfg(test)]
mod tests;
