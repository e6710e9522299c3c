//! One direction of a simulated link: its conditions, and the fate of each datagram.

use std::collections::VecDeque;
use std::time::Duration;
use web_time::Instant;

use bytes::Bytes;
use rand_core::Rng;

/// Two-state (Gilbert-Elliott) burst loss: the link moves between a good and a bad state
/// before each datagram; in the bad state it loses `loss_in_bad` of them.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct BurstLoss {
    /// Chance per datagram of moving from the good to the bad state.
    pub enter: f64,
    /// Chance per datagram of moving from the bad back to the good state.
    pub leave: f64,
    /// Loss probability in the bad state.
    pub loss_in_bad: f64,
}

impl BurstLoss {
    /// Bursts entered with chance `enter` and left with chance `leave` per datagram,
    /// losing `loss_in_bad` of the datagrams inside one.
    pub const fn new(enter: f64, leave: f64, loss_in_bad: f64) -> Self {
        Self { enter, leave, loss_in_bad }
    }
}

/// What one direction of a link does to the datagrams crossing it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct LinkConditions {
    /// One-way delay.
    pub latency: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per datagram. Like a real queue, it
    /// varies delays but keeps order: a datagram never arrives before one sent earlier on
    /// the same link, unless `reorder` holds it back.
    pub jitter: Duration,
    /// Independent loss probability (in the good state when `burst` is set).
    pub loss: f64,
    /// Burst loss on top of `loss`.
    pub burst: Option<BurstLoss>,
    /// Probability a datagram is delivered twice (the copy with its own delay).
    pub duplicate: f64,
    /// Probability a datagram is held back by `reorder_delay` more.
    pub reorder: f64,
    /// Extra delay of a reordered datagram.
    pub reorder_delay: Duration,
    /// Probability a datagram is delivered once more, late: a copy delayed by up to
    /// `late_delay` beyond its normal arrival (a duplicate held in some queue of the path).
    pub late_duplicate: f64,
    /// The most a late duplicate arrives after the original, drawn uniformly.
    pub late_delay: Duration,
    /// Probability, per datagram sent, that one of the last [`REPLAY_HISTORY`] datagrams
    /// that crossed this link is delivered again now (a replay: an attacker or a broken
    /// middlebox sending old datagrams).
    pub replay: f64,
    /// Probability one random bit of a datagram is flipped.
    pub corrupt: f64,
    /// Bottleneck rate in bytes per second; `None` for no limit.
    pub bandwidth: Option<u64>,
    /// Bytes the bottleneck may queue before it drops arrivals (drop-tail).
    pub queue: usize,
    /// Largest datagram the link carries; larger ones are dropped.
    pub mtu: Option<usize>,
    /// The link carries nothing.
    pub down: bool,
    /// The link delivers nothing by itself: every datagram waits in the link's queue until
    /// the caller releases, drops, duplicates, reorders or takes it (the `*_held` methods
    /// of [`Network`](super::Network)). Nothing else here applies to a held link.
    pub held: bool,
}

impl Default for LinkConditions {
    /// A perfect link with 10 ms of latency.
    fn default() -> Self {
        Self {
            latency: Duration::from_millis(10),
            jitter: Duration::ZERO,
            loss: 0.0,
            burst: None,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            late_duplicate: 0.0,
            late_delay: Duration::ZERO,
            replay: 0.0,
            corrupt: 0.0,
            bandwidth: None,
            queue: 0,
            mtu: None,
            down: false,
            held: false,
        }
    }
}

impl LinkConditions {
    /// A perfect link with the given one-way latency.
    pub fn perfect(latency: Duration) -> Self {
        Self { latency, ..Self::default() }
    }

    /// A link the caller drives by hand: datagrams wait until released (the field
    /// [`held`](#structfield.held)). For tests that decide the order, loss, duplication
    /// and corruption of every datagram themselves, such as a fuzzer, and for benchmarks
    /// that want the cheapest carry there is.
    pub fn held() -> Self {
        Self { latency: Duration::ZERO, held: true, ..Self::default() }
    }

    /// Wired LAN: 0.2 ms one way, 50 us jitter, no loss, 1 Gbit/s with 1 MB of buffer.
    pub fn lan() -> Self {
        Self {
            latency: Duration::from_micros(200),
            jitter: Duration::from_micros(50),
            bandwidth: Some(125_000_000),
            queue: 1 << 20,
            ..Self::default()
        }
    }

    /// Home Wi-Fi: 3 ms one way, 2 ms jitter, 0.5% loss plus bursts (enter 0.5%, leave
    /// 20%, 30% lost in bursts), 0.1% duplicates, 50 Mbit/s with 256 KB of buffer.
    pub fn wifi() -> Self {
        Self {
            latency: Duration::from_millis(3),
            jitter: Duration::from_millis(2),
            loss: 0.005,
            burst: Some(BurstLoss { enter: 0.005, leave: 0.2, loss_in_bad: 0.3 }),
            duplicate: 0.001,
            bandwidth: Some(6_250_000),
            queue: 256 << 10,
            ..Self::default()
        }
    }

    /// Mobile (4G): 40 ms one way, 15 ms jitter, 1% loss plus bursts (enter 1%, leave
    /// 10%, 50% lost in bursts), 1% reordered by 30 ms, 10 Mbit/s with 128 KB of buffer.
    pub fn mobile() -> Self {
        Self {
            latency: Duration::from_millis(40),
            jitter: Duration::from_millis(15),
            loss: 0.01,
            burst: Some(BurstLoss { enter: 0.01, leave: 0.1, loss_in_bad: 0.5 }),
            reorder: 0.01,
            reorder_delay: Duration::from_millis(30),
            bandwidth: Some(1_250_000),
            queue: 128 << 10,
            ..Self::default()
        }
    }

    /// Geostationary satellite: 300 ms one way, 20 ms jitter, 0.5% loss, 20 Mbit/s with
    /// 1 MB of buffer.
    pub fn satellite() -> Self {
        Self {
            latency: Duration::from_millis(300),
            jitter: Duration::from_millis(20),
            loss: 0.005,
            bandwidth: Some(2_500_000),
            queue: 1 << 20,
            ..Self::default()
        }
    }

    /// A link built to break things: 50 ms one way, 40 ms jitter, 10% loss plus bursts
    /// (enter 2%, leave 20%, 60% lost in bursts), 5% duplicated, 10% reordered by 100 ms,
    /// 2% corrupted, 2 Mbit/s with 64 KB of buffer.
    pub fn hostile() -> Self {
        Self {
            latency: Duration::from_millis(50),
            jitter: Duration::from_millis(40),
            loss: 0.10,
            burst: Some(BurstLoss { enter: 0.02, leave: 0.2, loss_in_bad: 0.6 }),
            duplicate: 0.05,
            reorder: 0.10,
            reorder_delay: Duration::from_millis(100),
            corrupt: 0.02,
            bandwidth: Some(250_000),
            queue: 64 << 10,
            ..Self::default()
        }
    }
}

/// What became of a datagram on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fate {
    /// Delivered at this offset from the simulation's start.
    Delivered(Duration),
    /// Delivered with one bit flipped.
    Corrupted(Duration),
    /// Lost at random (or in a burst).
    Lost,
    /// Dropped by a full bottleneck queue.
    QueueFull,
    /// Larger than the link's MTU.
    TooBig,
    /// The link was down.
    Down,
    /// Dropped by a script (see `Network::script`).
    Scripted,
    /// Queued on a held link, to be released (or not) by the caller.
    Held,
}

/// Counters of one direction of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// Datagrams offered to the link.
    pub sent: u64,
    /// Bytes offered.
    pub sent_bytes: u64,
    /// Deliveries (duplicates included).
    pub delivered: u64,
    /// Bytes delivered.
    pub delivered_bytes: u64,
    /// Lost at random.
    pub lost: u64,
    /// Dropped by the bottleneck queue.
    pub queue_drops: u64,
    /// Extra copies delivered (late ones included).
    pub duplicated: u64,
    /// Old datagrams delivered again.
    pub replayed: u64,
    /// Delivered corrupted.
    pub corrupted: u64,
    /// Dropped for their size.
    pub too_big: u64,
    /// Dropped while the link was down, by a script, or from a held link's queue.
    pub dropped: u64,
}

/// How many recent datagrams a link keeps for [`LinkConditions::replay`].
pub const REPLAY_HISTORY: usize = 64;

/// The state of one direction of a link.
#[derive(Debug, Default)]
pub(crate) struct LinkState {
    pub(crate) conditions: LinkConditions,
    pub(crate) stats: LinkStats,
    bad: bool,
    busy_until: Option<Instant>,
    /// The bottleneck this link shares with others (see `Network::share_bottleneck`): its
    /// queue, not `busy_until`, is the one datagrams wait in.
    pub(crate) shared: Option<usize>,
    /// Latest arrival so far of a datagram not held back: jitter never goes below it.
    last_arrival: Option<Instant>,
    /// The latest datagrams that crossed, for replays (kept only while replay is on).
    pub(crate) history: VecDeque<Bytes>,
    /// What a held link holds, oldest first.
    pub(crate) held: VecDeque<Bytes>,
}

/// A uniform draw in `[0, 1)`.
pub(crate) fn unit(rng: &mut impl Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

impl LinkState {
    pub(crate) fn new(conditions: LinkConditions) -> Self {
        Self { conditions, ..Self::default() }
    }

    /// When the link's own bottleneck stops being busy (unused when it shares one).
    pub(crate) fn busy_until(&self) -> Option<Instant> {
        self.busy_until
    }

    /// Decides what happens to a datagram of `len` bytes sent at `now`: the delivery
    /// delays (one, or two for a duplicate) and whether to corrupt it, or why it is lost.
    /// `shared` is the queue of the bottleneck this link shares (when it shares one): when
    /// it stops being busy.
    pub(crate) fn carry(
        &mut self,
        now: Instant,
        len: usize,
        rng: &mut impl Rng,
        shared: Option<&mut Option<Instant>>,
    ) -> Result<Carried, Fate> {
        let c = self.conditions;
        self.stats.sent += 1;
        self.stats.sent_bytes += len as u64;
        if c.down {
            self.stats.dropped += 1;
            return Err(Fate::Down);
        }
        if c.mtu.is_some_and(|m| len > m) {
            self.stats.too_big += 1;
            return Err(Fate::TooBig);
        }
        let mut loss = c.loss;
        if let Some(b) = c.burst {
            let flip = unit(rng);
            self.bad = if self.bad { flip >= b.leave } else { flip < b.enter };
            if self.bad {
                loss = b.loss_in_bad;
            }
        }
        if unit(rng) < loss {
            self.stats.lost += 1;
            return Err(Fate::Lost);
        }
        // The bottleneck: serialise at the link rate behind what is queued.
        let mut depart = now;
        if let Some(rate) = c.bandwidth.filter(|&r| r > 0) {
            let busy_until = match shared {
                Some(queue) => queue,
                None => &mut self.busy_until,
            };
            let start = busy_until.map_or(now, |b| b.max(now));
            let backlog = start.saturating_duration_since(now).as_secs_f64() * rate as f64;
            if backlog > c.queue as f64 {
                self.stats.queue_drops += 1;
                return Err(Fate::QueueFull);
            }
            depart = start + Duration::from_secs_f64(len as f64 / rate as f64);
            *busy_until = Some(depart);
        }
        let mut last = self.last_arrival;
        let mut delay = |rng: &mut dyn FnMut() -> f64| {
            let mut at = depart + c.latency;
            if !c.jitter.is_zero() {
                at += c.jitter.mul_f64(rng());
            }
            if let Some(l) = last {
                at = at.max(l);
            }
            if rng() < c.reorder {
                at += c.reorder_delay;
            } else {
                last = Some(at);
            }
            at.saturating_duration_since(now)
        };
        let mut draw = || unit(rng);
        let first = delay(&mut draw);
        let mut second = (draw() < c.duplicate).then(|| delay(&mut draw));
        // Draw only when late duplicates are on, so runs without them stay as they were.
        if c.late_duplicate > 0.0 && draw() < c.late_duplicate {
            second = Some(first + c.late_delay.mul_f64(draw()));
        }
        self.last_arrival = last;
        let corrupt = draw() < c.corrupt;
        let bit = (draw() * (len * 8) as f64) as usize;
        self.stats.delivered += 1 + u64::from(second.is_some());
        self.stats.delivered_bytes += len as u64 * (1 + u64::from(second.is_some()));
        self.stats.duplicated += u64::from(second.is_some());
        self.stats.corrupted += u64::from(corrupt);
        Ok(Carried { delays: (first, second), corrupt_bit: corrupt.then_some(bit) })
    }
}

/// How a datagram that survived the link arrives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Carried {
    pub(crate) delays: (Duration, Option<Duration>),
    pub(crate) corrupt_bit: Option<usize>,
}
