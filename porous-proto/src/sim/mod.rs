//! A deterministic, in-memory network of [`Host`]s for testing netcode (feature `sim`).
//!
//! A [`Network`] holds hosts at socket addresses and carries their datagrams over
//! simulated links with latency, jitter, random and burst loss, duplication, reordering,
//! corruption, a bandwidth bottleneck with a drop-tail queue, and an MTU, set per direction
//! ([`LinkConditions`], with presets such as [`LinkConditions::wifi`]). Time is simulated:
//! [`Network::step`] jumps to the earliest host deadline or delivery, or advances one fixed
//! tick in engine-style mode ([`Network::set_tick`]). A host's loop can also run late, as a
//! busy process's does: stalled, it handles nothing until the stall ends, then its whole
//! backlog at once ([`Network::stall`], [`Stalls`]). Everything random comes from one
//! seed, so a run is a function of the seed and the script: run it twice, get the same
//! events and the same bytes.
//!
//! Observability: per-link counters ([`Network::link_stats`]), an optional trace of every
//! datagram and its fate ([`Network::enable_trace`], [`Network::trace_text`]) to print when
//! a test fails, and a tap that records each datagram's bytes as well
//! ([`Network::enable_tap`], [`Network::drain_tap`]), to hash a run's traffic or write it
//! to a capture file.
//!
//! Hosts need not belong to the network. A test whose hosts live elsewhere (fields of a
//! game object, a harness struct) lends them to the network call by call and runs the
//! same loop with the same links and clock: [`Network::next_event`] says when, then
//! [`Network::advance_to`] moves the clock, [`Network::deliver`] hands over what is due
//! and [`Network::turn`] gives a host its turn (it steps, what it sends goes through the
//! test's hook onto the links, its events come back). A link can also be *held*
//! ([`LinkConditions::held`]): its datagrams wait until the caller releases, drops,
//! duplicates, reorders or takes them ([`Network::held`], [`Network::deliver_held_to`]), for
//! tests that play the network by hand. [`seeded_rng`] is the generator to make such hosts
//! with.
//!
//! # Testing your game logic on top
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use porous_proto::sim::{LinkConditions, Network};
//! use porous_proto::{Event, HostConfig, SendMode};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut net = Network::new(42);
//! let server = "10.0.0.1:7000".parse()?;
//! let client = "10.0.0.2:7000".parse()?;
//! net.add_host(server, HostConfig::default())?;
//! net.add_host(client, HostConfig::default())?;
//! net.set_link_both(server, client, LinkConditions::mobile());
//!
//! // The game: the client sends its input every 16 ms; the server echoes a state update
//! // for each input it gets, unreliably.
//! let now = net.now();
//! let peer = net.host_mut(client).connect(now, server)?;
//! let mut inputs = 0u32;
//! let mut updates = 0u32;
//! let mut connected = false;
//! net.run_for(Duration::from_secs(5), |net| {
//!     while let Some(e) = net.poll_event(server) {
//!         if let Event::Received { peer, data, .. } = e {
//!             let _ = net.host_mut(server).send(peer, 1, data, SendMode::Unreliable);
//!         }
//!     }
//!     while let Some(e) = net.poll_event(client) {
//!         match e {
//!             Event::Connected { .. } => connected = true,
//!             Event::Received { .. } => updates += 1,
//!             _ => {}
//!         }
//!     }
//!     if connected && net.elapsed() >= Duration::from_millis(16) * inputs {
//!         let input = Bytes::from(inputs.to_le_bytes().to_vec());
//!         // A full queue (`SendError::QueueFull`) means: try again next frame.
//!         if net.host_mut(client).send(peer, 0, input, SendMode::Reliable).is_ok() {
//!             inputs += 1;
//!         }
//!     }
//! });
//! assert!(inputs > 250);
//! // A few updates are lost on the mobile link, but most arrive.
//! assert!(updates > inputs * 8 / 10, "{updates} of {inputs}");
//! # Ok(())
//! # }
//! ```
//!
//! # Hashing the traffic of a run
//!
//! ```
//! use std::hash::{DefaultHasher, Hash, Hasher};
//! use std::time::Duration;
//! use porous_proto::sim::Network;
//! use porous_proto::HostConfig;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let run = |seed| -> Result<(u64, usize), Box<dyn std::error::Error>> {
//!     let mut net = Network::new(seed);
//!     let (a, b) = ("10.0.0.1:7000".parse()?, "10.0.0.2:7000".parse()?);
//!     net.add_host(a, HostConfig::default())?;
//!     net.add_host(b, HostConfig::default())?;
//!     net.enable_tap();
//!     let now = net.now();
//!     net.host_mut(a).connect(now, b)?;
//!     let (mut hash, mut datagrams) = (DefaultHasher::new(), 0);
//!     net.run_for(Duration::from_secs(2), |net| {
//!         for record in net.drain_tap() {
//!             (record.sent, record.from, record.to, &record.payload[..]).hash(&mut hash);
//!             datagrams += 1;
//!         }
//!     });
//!     Ok((hash.finish(), datagrams))
//! };
//! let (first, datagrams) = run(7)?;
//! assert!(datagrams > 4, "a handshake and keepalives");
//! assert_eq!(run(7)?.0, first, "same seed, same bytes");
//! # Ok(())
//! # }
//! ```

mod driver;
mod link;
mod nat;
mod rng;
mod stall;
mod trace;

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;
use web_time::Instant;

use bytes::Bytes;
use rand_core::Rng;
use rand_pcg::Pcg64Mcg;

use crate::{ConfigError, Event, Host, HostConfig};
use link::LinkState;
pub use link::{BurstLoss, Fate, LinkConditions, LinkStats, REPLAY_HISTORY};
pub use nat::{Nat, NatKind, NatStats};
#[cfg(test)]
pub(crate) use rng::SplitMix64;
pub use rng::seeded_rng;
use stall::StallState;
pub use stall::Stalls;
pub use trace::{TapRecord, TraceRecord};

/// A script deciding per datagram whether a link lets it through (`false` drops it):
/// given the index of the datagram on that link (from 0) and its bytes.
pub type Script = Box<dyn FnMut(u64, &[u8]) -> bool + Send>;

struct SimHost {
    host: Host,
    events: VecDeque<Event>,
    /// Its loop's stalls, and what arrived during one.
    stall: StallState,
}

/// A datagram a link hands over: who sent it, to whom, and its bytes
/// ([`Network::pop_arrival`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Arrival {
    /// Sender.
    pub from: SocketAddr,
    /// Destination.
    pub to: SocketAddr,
    /// The datagram.
    pub payload: Bytes,
}

/// A datagram on its way: due at `at`, and among datagrams due at the same instant,
/// delivered in the order the links scheduled them (`seq`).
struct Scheduled {
    at: Instant,
    seq: u64,
    arrival: Arrival,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Everything of a network but its hosts: the clock, the links and what is on them. Kept
/// apart so that a host of the network and the links can be borrowed at once.
struct Wires {
    seed: u64,
    rng: Pcg64Mcg,
    start: Instant,
    now: Instant,
    tick: Option<Duration>,
    default_link: LinkConditions,
    links: Links,
    scripts: BTreeMap<(SocketAddr, SocketAddr), (u64, Script)>,
    scheduled: BinaryHeap<Reverse<Scheduled>>,
    next_seq: u64,
    trace: Option<Vec<TraceRecord>>,
    tap: Option<Vec<TapRecord>>,
    /// The NATs in front of hosts (`nat.rs`).
    nats: nat::Nats,
}

/// A deterministic network of hosts. See the [module docs](self).
pub struct Network {
    wires: Wires,
    hosts: BTreeMap<SocketAddr, SimHost>,
}

impl core::fmt::Debug for Network {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Network")
            .field("seed", &self.wires.seed)
            .field("elapsed", &self.elapsed())
            .field("hosts", &self.hosts.keys().collect::<Vec<_>>())
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl Network {
    /// An empty network whose randomness all derives from `seed`.
    pub fn new(seed: u64) -> Self {
        let start = Instant::now();
        Self {
            wires: Wires {
                seed,
                rng: rng::network_rng(seed),
                start,
                now: start,
                tick: None,
                default_link: LinkConditions::default(),
                links: Links::default(),
                scripts: BTreeMap::new(),
                scheduled: BinaryHeap::new(),
                next_seq: 0,
                trace: None,
                tap: None,
                nats: nat::Nats::default(),
            },
            hosts: BTreeMap::new(),
        }
    }

    /// Adds a host at `addr`. Its random generator derives from the network's seed and
    /// the address.
    pub fn add_host(&mut self, addr: SocketAddr, config: HostConfig) -> Result<(), ConfigError> {
        let host = Host::new(config, rng::host_rng(self.wires.seed, addr))?;
        self.hosts.insert(addr, SimHost { host, events: VecDeque::new(), stall: StallState::default() });
        Ok(())
    }

    /// Removes the host at `addr` (a crash: it says nothing), returning it.
    pub fn remove_host(&mut self, addr: SocketAddr) -> Option<Host> {
        self.hosts.remove(&addr).map(|h| h.host)
    }

    /// The host at `addr`. Panics if there is none: a script error, not input.
    #[allow(clippy::panic)] // a test script naming an address it never added
    pub fn host(&self, addr: SocketAddr) -> &Host {
        match self.hosts.get(&addr) {
            Some(h) => &h.host,
            None => panic!("no host at {addr}"),
        }
    }

    /// The host at `addr`, to call. Panics if there is none.
    #[allow(clippy::panic)] // a test script naming an address it never added
    pub fn host_mut(&mut self, addr: SocketAddr) -> &mut Host {
        match self.hosts.get_mut(&addr) {
            Some(h) => &mut h.host,
            None => panic!("no host at {addr}"),
        }
    }

    /// The next event of the host at `addr`.
    pub fn poll_event(&mut self, addr: SocketAddr) -> Option<Event> {
        self.hosts.get_mut(&addr)?.events.pop_front()
    }

    /// Makes the loop of the host at `addr` late by `late` from now: until then it is
    /// neither stepped nor handed datagrams (what arrives waits, as in a socket's buffer),
    /// and when the stall ends it handles the whole backlog at once, then steps. A busy
    /// frame, a collector's pause. Only hosts the network holds stall.
    pub fn stall(&mut self, addr: SocketAddr, late: Duration) {
        let now = self.wires.now;
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.stall.stall(now, late);
        }
    }

    /// Makes the loop of the host at `addr` stall at random from now on (see [`Stalls`];
    /// `None` stops them, letting a stall under way end). The stalls are drawn from a
    /// generator of the host's own (seeded from the network's seed and the address), not
    /// from the network's.
    pub fn set_stalls(&mut self, addr: SocketAddr, stalls: Option<Stalls>) {
        let (now, seed) = (self.wires.now, self.wires.seed);
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.stall.set_random(now, stalls, rng::stall_rng(seed, addr));
        }
    }

    /// Whether the loop of the host at `addr` is stalled now (an application sharing the
    /// loop would be late too).
    pub fn is_stalled(&mut self, addr: SocketAddr) -> bool {
        let now = self.wires.now;
        self.hosts.get_mut(&addr).is_some_and(|h| h.stall.stalled(now))
    }

    /// Sets the conditions from `from` to `to`.
    pub fn set_link(&mut self, from: SocketAddr, to: SocketAddr, conditions: LinkConditions) {
        self.wires.link_mut(from, to).conditions = conditions;
    }

    /// Makes the links given share one bottleneck: their datagrams wait in one drop-tail
    /// queue and leave it at one rate, so flows on them compete as flows through one
    /// router do. Each link's own `bandwidth` and `queue` still apply to what it offers
    /// (give them the same values); its latency, loss and the rest stay its own. A link
    /// belongs to at most one shared bottleneck: a later call moves it.
    pub fn share_bottleneck(&mut self, links: &[(SocketAddr, SocketAddr)]) {
        let b = self.wires.links.bottlenecks.len();
        self.wires.links.bottlenecks.push(None);
        for &(from, to) in links {
            self.wires.link_mut(from, to).shared = Some(b);
        }
    }

    /// Sets the conditions both ways between `a` and `b`.
    pub fn set_link_both(&mut self, a: SocketAddr, b: SocketAddr, conditions: LinkConditions) {
        self.set_link(a, b, conditions);
        self.set_link(b, a, conditions);
    }

    /// The conditions of links not set otherwise.
    pub fn set_default_link(&mut self, conditions: LinkConditions) {
        self.wires.default_link = conditions;
    }

    /// The conditions from `from` to `to`.
    pub fn link(&self, from: SocketAddr, to: SocketAddr) -> LinkConditions {
        self.wires.links.get(from, to).map_or(self.wires.default_link, |l| l.conditions)
    }

    /// The counters of the link from `from` to `to`.
    pub fn link_stats(&self, from: SocketAddr, to: SocketAddr) -> LinkStats {
        self.wires.links.get(from, to).map(|l| l.stats).unwrap_or_default()
    }

    /// Bytes waiting now in the bottleneck the link from `from` to `to` feeds: its own
    /// drop-tail queue, or the one it shares ([`Network::share_bottleneck`]), the
    /// datagram being sent included. 0 for a link without a bandwidth limit. What a plot
    /// of queueing delay reads (divide by the rate).
    pub fn queued_bytes(&self, from: SocketAddr, to: SocketAddr) -> usize {
        let links = &self.wires.links;
        let Some(link) = links.get(from, to) else { return 0 };
        let Some(rate) = link.conditions.bandwidth.filter(|&r| r > 0) else { return 0 };
        let busy_until = match link.shared {
            Some(b) => links.bottlenecks.get(b).copied().flatten(),
            None => link.busy_until(),
        };
        busy_until.map_or(0, |b| (b.saturating_duration_since(self.wires.now).as_secs_f64() * rate as f64) as usize)
    }

    /// Lets `script` decide, before the link's conditions, which datagrams from `from` to
    /// `to` pass: for scripted losses such as "drop the third datagram".
    pub fn script(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        script: impl FnMut(u64, &[u8]) -> bool + Send + 'static,
    ) {
        self.wires.scripts.insert((from, to), (0, Box::new(script)));
    }

    /// Removes the script of a link.
    pub fn clear_script(&mut self, from: SocketAddr, to: SocketAddr) {
        self.wires.scripts.remove(&(from, to));
    }

    /// Steps every host on a fixed period (an engine loop), or, with `None`, whenever
    /// something is due (the default).
    pub fn set_tick(&mut self, tick: Option<Duration>) {
        self.wires.tick = tick.filter(|t| !t.is_zero());
    }

    /// Starts recording every datagram and its fate.
    pub fn enable_trace(&mut self) {
        self.wires.trace.get_or_insert_with(Vec::new);
    }

    /// The trace so far (empty unless enabled).
    pub fn trace(&self) -> &[TraceRecord] {
        self.wires.trace.as_deref().unwrap_or_default()
    }

    /// The trace as text, one datagram a line.
    pub fn trace_text(&self) -> String {
        self.trace().iter().map(|r| format!("{r}\n")).collect()
    }

    /// Starts tapping the links: from now on every datagram offered to a link is recorded
    /// with its bytes and its fate (the trace's records, bytes included), until taken by
    /// [`Network::drain_tap`]. For hashing a run's traffic, or writing it to a capture file.
    pub fn enable_tap(&mut self) {
        self.wires.tap.get_or_insert_with(Vec::new);
    }

    /// Takes what the tap recorded since the last call, oldest first (nothing unless
    /// [enabled](Network::enable_tap)). Drain it as you go: the tap keeps what it records
    /// until then.
    pub fn drain_tap(&mut self) -> impl Iterator<Item = TapRecord> + '_ {
        self.wires.tap.iter_mut().flat_map(|t| t.drain(..))
    }

    /// The current simulated time.
    pub fn now(&self) -> Instant {
        self.wires.now
    }

    /// Simulated time since the network was made.
    pub fn elapsed(&self) -> Duration {
        self.wires.now - self.wires.start
    }

    /// Datagrams on their way (not counting those held: see [`Network::held`]).
    pub fn in_flight(&self) -> usize {
        self.wires.scheduled.len()
    }

    /// When the next thing happens: a delivery, a host deadline, or the next tick.
    fn next_time(&self) -> Option<Instant> {
        if let Some(tick) = self.wires.tick {
            return Some(self.wires.now + tick);
        }
        let delivery = self.next_arrival();
        let now = self.wires.now;
        // A stalled host's next moment is the end of its stall.
        let hosts = self.hosts.values().filter_map(|h| h.stall.resumes(now).or_else(|| h.host.poll_timeout())).min();
        match (delivery, hosts) {
            (Some(a), Some(b)) => Some(a.min(b).max(self.wires.now)),
            (a, b) => a.or(b).map(|t| t.max(self.wires.now)),
        }
    }

    /// Advances to the next moment something happens (at most `limit` ahead): delivers
    /// what is due, steps the hosts, carries their datagrams. Returns `false` when
    /// nothing is left to happen within `limit`.
    pub fn step(&mut self, limit: Duration) -> bool {
        let end = self.wires.now + limit;
        let Some(next) = self.next_time().filter(|&t| t <= end) else {
            self.advance_to(end);
            return false;
        };
        self.advance_to(next);
        let now = self.wires.now;
        let mut stepped = BTreeSet::new();
        // A host whose stall is over handles its backlog first: it arrived earlier.
        for (&addr, h) in &mut self.hosts {
            if h.stall.resumed(now) {
                for a in std::mem::take(&mut h.stall.backlog) {
                    h.host.handle_datagram(now, a.from, &a.payload);
                }
                stepped.insert(addr);
            }
        }
        while let Some(a) = self.pop_arrival() {
            if let Some(h) = self.hosts.get_mut(&a.to) {
                if h.stall.stalled(now) {
                    h.stall.backlog.push_back(a);
                    continue;
                }
                h.host.handle_datagram(now, a.from, &a.payload);
                stepped.insert(a.to);
            }
        }
        let tick = self.wires.tick.is_some();
        for (&addr, h) in &mut self.hosts {
            if h.stall.stalled(now) {
                continue;
            }
            if tick || stepped.contains(&addr) || h.host.poll_timeout().is_some_and(|t| t <= now) {
                h.host.step(now);
                self.wires.route(addr, &mut h.host);
                h.events.extend(std::iter::from_fn(|| h.host.poll_event()));
            }
        }
        true
    }

    /// Injects a datagram as if `from` had sent it to `to` now, through the link (as it is:
    /// no NAT rewrites it, so a test can put any source address on it).
    pub fn inject(&mut self, from: SocketAddr, to: SocketAddr, payload: Bytes) {
        self.wires.carry(from, to, payload);
    }

    /// Runs for `duration` of simulated time, calling `each` after every step (to read
    /// events and make application calls).
    pub fn run_for(&mut self, duration: Duration, mut each: impl FnMut(&mut Self)) {
        let end = self.wires.now + duration;
        while self.wires.now < end {
            self.step(end - self.wires.now);
            each(self);
        }
    }

    /// Runs until `done` returns true (checked after every step) or `limit` of simulated
    /// time passes. Returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let end = self.wires.now + limit;
        if done(self) {
            return true;
        }
        while self.wires.now < end {
            self.step(end - self.wires.now);
            if done(self) {
                return true;
            }
        }
        false
    }

    /// A random number from the network's generator, for scripts that want randomness
    /// within the same determinism.
    pub fn random(&mut self) -> u64 {
        self.wires.rng.next_u64()
    }

    /// When the next datagram on its way arrives (whatever its destination).
    pub fn next_arrival(&self) -> Option<Instant> {
        self.wires.scheduled.peek().map(|Reverse(s)| s.at)
    }

    /// Moves the clock to `at` (never back) without delivering or stepping anything.
    pub fn advance_to(&mut self, at: Instant) {
        self.wires.now = self.wires.now.max(at);
    }

    /// The next datagram due by now, taken off its link: for hosts of your own, to hand to
    /// [`Host::handle_datagram`]. Datagrams due at the same instant come in the order they
    /// were sent. [`Network::step`] takes them itself, for the hosts the network holds.
    pub fn pop_arrival(&mut self) -> Option<Arrival> {
        loop {
            let Reverse(next) = self.wires.scheduled.peek()?;
            if next.at > self.wires.now {
                return None;
            }
            let Reverse(s) = self.wires.scheduled.pop()?;
            if self.wires.nats.is_empty() {
                return Some(s.arrival);
            }
            // To a NAT's public address: to the host behind it, if the NAT lets it through.
            if let Some(to) = self.wires.nats.inbound(s.arrival.from, s.arrival.to, self.wires.now) {
                return Some(Arrival { to, ..s.arrival });
            }
        }
    }

    /// Offers every datagram `host`, a host of your own at `from`, has to send to the links
    /// (draining [`Host::poll_transmit`]), as [`Network::step`] does for the hosts the
    /// network holds.
    pub fn route(&mut self, from: SocketAddr, host: &mut Host) {
        self.wires.route(from, host);
    }

    /// The queue of the held link from `from` to `to` (see [`LinkConditions::held`]), to
    /// release, drop, duplicate, reorder or take its datagrams by hand.
    pub fn held(&mut self, from: SocketAddr, to: SocketAddr) -> Held<'_> {
        Held { link: self.wires.link_mut(from, to) }
    }

    /// Releases the next datagram held from `from` to `to` and hands it to the host the
    /// network holds at `to`, now; `false` if nothing was held (or there is no such host:
    /// the datagram is lost). The host steps at the next [`Network::step`].
    pub fn deliver_held(&mut self, from: SocketAddr, to: SocketAddr) -> bool {
        let now = self.wires.now;
        let Some(d) = self.held(from, to).release() else { return false };
        match self.hosts.get_mut(&to) {
            Some(h) => {
                h.host.handle_datagram(now, from, &d);
                true
            }
            None => false,
        }
    }
}

/// The state of every link that carried something or was set, by direction.
struct Links {
    states: Vec<LinkState>,
    /// When each shared bottleneck stops being busy (see `Network::share_bottleneck`).
    bottlenecks: Vec<Option<Instant>>,
    index: BTreeMap<(SocketAddr, SocketAddr), usize>,
    /// The two IPv4 links looked up last, as (from, to, index) with each address in one
    /// word ([`word`]; `NONE` in an empty entry): between two hosts these are both
    /// directions, so most look-ups end here, at the cost of two integer comparisons
    /// (what keeps a carry as cheap as a push onto a queue, where comparing and copying
    /// `SocketAddr`s would cost more than the push).
    recent: [(u64, u64, usize); 2],
}

/// No address: [`word`] never gives it.
const NONE: u64 = u64::MAX;

/// An IPv4 address and port in one word (`None` for IPv6, which the cache passes by).
fn word(addr: &SocketAddr) -> Option<u64> {
    match addr {
        SocketAddr::V4(a) => Some(u64::from(a.ip().to_bits()) << 16 | u64::from(a.port())),
        SocketAddr::V6(_) => None,
    }
}

impl Default for Links {
    fn default() -> Self {
        Self { states: Vec::new(), bottlenecks: Vec::new(), index: BTreeMap::new(), recent: [(NONE, NONE, 0); 2] }
    }
}

impl Links {
    fn get(&self, from: SocketAddr, to: SocketAddr) -> Option<&LinkState> {
        self.index.get(&(from, to)).and_then(|&i| self.states.get(i))
    }

    /// Where the link from `from` to `to` is, made with `default` conditions if there is
    /// none.
    #[inline]
    fn find_or_insert(&mut self, from: SocketAddr, to: SocketAddr, default: &LinkConditions) -> usize {
        if let (Some(f), Some(t)) = (word(&from), word(&to)) {
            for &(rf, rt, i) in &self.recent {
                if rf == f && rt == t {
                    return i;
                }
            }
        }
        self.find_or_insert_slowly(from, to, default)
    }

    #[cold]
    #[inline(never)]
    fn find_or_insert_slowly(&mut self, from: SocketAddr, to: SocketAddr, default: &LinkConditions) -> usize {
        let states = &mut self.states;
        let i = *self.index.entry((from, to)).or_insert_with(|| {
            states.push(LinkState::new(*default));
            states.len() - 1
        });
        if let (Some(f), Some(t)) = (word(&from), word(&to)) {
            self.recent = [(f, t, i), self.recent[0]];
        }
        i
    }

    /// The link at `i` and the queue of the bottleneck it shares, if it shares one.
    fn at_with_bottleneck(&mut self, i: usize) -> (&mut LinkState, Option<&mut Option<Instant>>) {
        let Some(link) = self.states.get_mut(i) else { unreachable!("an index points at its link") };
        let shared = link.shared.and_then(|b| self.bottlenecks.get_mut(b));
        (link, shared)
    }

    #[inline]
    fn at(&mut self, i: usize) -> &mut LinkState {
        match self.states.get_mut(i) {
            Some(link) => link,
            None => unreachable!("an index points at its link"),
        }
    }
}

impl Wires {
    fn link_mut(&mut self, from: SocketAddr, to: SocketAddr) -> &mut LinkState {
        let i = self.links.find_or_insert(from, to, &self.default_link);
        self.links.at(i)
    }

    fn route(&mut self, from: SocketAddr, host: &mut Host) {
        while let Some(t) = host.poll_transmit() {
            self.send(from, t.remote, t.payload);
        }
    }

    /// Carries what the host at `from` sent: behind a NAT, from the public address it
    /// maps to.
    fn send(&mut self, from: SocketAddr, to: SocketAddr, payload: Bytes) {
        let from = if self.nats.is_empty() { from } else { self.nats.outbound(from, to, self.now) };
        self.carry(from, to, payload);
    }

    #[inline]
    fn carry(&mut self, from: SocketAddr, to: SocketAddr, payload: Bytes) {
        let i = self.links.find_or_insert(from, to, &self.default_link);
        // The short way, for a held link with nothing to record or decide: a queue push.
        if self.scripts.is_empty() && self.trace.is_none() && self.tap.is_none() {
            let link = self.links.at(i);
            if link.conditions.held {
                link.stats.sent += 1;
                link.stats.sent_bytes += payload.len() as u64;
                link.held.push_back(payload);
                return;
            }
        }
        self.carry_on(i, from, to, payload);
    }

    /// Offers a datagram to the link at `link` (from `from` to `to`): the long way, with
    /// scripts, conditions, the trace and the tap. (Kept out of line, so that `carry`'s
    /// short way stays a few instructions.)
    #[inline(never)]
    fn carry_on(&mut self, link: usize, from: SocketAddr, to: SocketAddr, payload: Bytes) {
        let len = payload.len();
        // (An empty map is not searched: most networks have no script.)
        let script = if self.scripts.is_empty() { None } else { self.scripts.get_mut(&(from, to)) };
        let scripted = match script {
            Some((index, script)) => {
                let pass = script(*index, &payload);
                *index += 1;
                !pass
            }
            None => false,
        };
        let (link, shared) = self.links.at_with_bottleneck(link);
        let recording = self.trace.is_some() || self.tap.is_some();
        let sent = if recording { self.now - self.start } else { Duration::ZERO };
        let mut record = |payload: &Bytes, fate: Fate| {
            if recording {
                record(&mut self.trace, &mut self.tap, TraceRecord { sent, from, to, len, fate }, payload);
            }
        };
        if link.conditions.held && !scripted {
            link.stats.sent += 1;
            link.stats.sent_bytes += len as u64;
            record(&payload, Fate::Held);
            link.held.push_back(payload);
            return;
        }
        let fate = if scripted {
            link.stats.sent += 1;
            link.stats.dropped += 1;
            Err(Fate::Scripted)
        } else {
            link.carry(self.now, len, &mut self.rng, shared)
        };
        if link.conditions.replay > 0.0 {
            let draw = link::unit(&mut self.rng);
            if draw < link.conditions.replay && !link.history.is_empty() {
                let pick = (link::unit(&mut self.rng) * link.history.len() as f64) as usize;
                if let Some(old) = link.history.get(pick).cloned() {
                    link.stats.replayed += 1;
                    let at = self.now + link.conditions.latency;
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    self.scheduled.push(Reverse(Scheduled { at, seq, arrival: Arrival { from, to, payload: old } }));
                }
            }
            if link.history.len() == REPLAY_HISTORY {
                link.history.pop_front();
            }
            link.history.push_back(payload.clone());
        }
        let carried = match fate {
            Ok(c) => c,
            Err(f) => return record(&payload, f),
        };
        let (first, second) = carried.delays;
        let corrupted = carried.corrupt_bit.is_some();
        for delay in std::iter::once(first).chain(second) {
            record(&payload, if corrupted { Fate::Corrupted(sent + delay) } else { Fate::Delivered(sent + delay) });
        }
        let payload = match carried.corrupt_bit {
            Some(bit) => {
                let mut v = payload.to_vec();
                if let Some(b) = v.get_mut(bit / 8) {
                    *b ^= 1 << (bit % 8);
                }
                Bytes::from(v)
            }
            None => payload,
        };
        for delay in std::iter::once(first).chain(second) {
            let seq = self.next_seq;
            self.next_seq += 1;
            let arrival = Arrival { from, to, payload: payload.clone() };
            self.scheduled.push(Reverse(Scheduled { at: self.now + delay, seq, arrival }));
        }
    }
}

/// Appends a datagram's record to the trace and, with its bytes, to the tap (those on).
fn record(trace: &mut Option<Vec<TraceRecord>>, tap: &mut Option<Vec<TapRecord>>, r: TraceRecord, payload: &Bytes) {
    if let Some(trace) = trace {
        trace.push(r);
    }
    if let Some(tap) = tap {
        let TraceRecord { sent, from, to, fate, .. } = r;
        tap.push(TapRecord { sent, from, to, payload: payload.clone(), fate });
    }
}

/// The queue of a held link ([`LinkConditions::held`]), from [`Network::held`]: the
/// caller is the network. Released datagrams are the caller's to hand to the destination
/// host (`host.handle_datagram(net.now(), from, &datagram)`), or use
/// [`Network::deliver_held`] for a host the network holds. To replay one later, keep it:
/// the link keeps nothing it released (a kept `Bytes` would hold on to the sender's
/// buffer).
#[derive(Debug)]
pub struct Held<'a> {
    link: &'a mut LinkState,
}

impl<'a> Held<'a> {
    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.link.held.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.link.held.is_empty()
    }

    /// Releases the oldest datagram, counted as delivered.
    pub fn release(&mut self) -> Option<Bytes> {
        release(self.link)
    }

    /// Releases every datagram held, oldest first, one per iteration.
    pub fn release_all(self) -> impl Iterator<Item = Bytes> + 'a {
        let link = self.link;
        std::iter::from_fn(move || release(link))
    }

    /// Drops the oldest datagram (counted as dropped); `false` if nothing was held.
    pub fn drop_next(&mut self) -> bool {
        let dropped = self.link.held.pop_front().is_some();
        self.link.stats.dropped += u64::from(dropped);
        dropped
    }

    /// Queues a copy of the oldest datagram at the back (counted as duplicated).
    pub fn duplicate_next(&mut self) -> bool {
        let Some(d) = self.link.held.front().cloned() else { return false };
        self.link.held.push_back(d);
        self.link.stats.duplicated += 1;
        true
    }

    /// Moves the oldest datagram to the back: the others overtake it.
    pub fn requeue_next(&mut self) -> bool {
        let Some(d) = self.link.held.pop_front() else { return false };
        self.link.held.push_back(d);
        true
    }

    /// Takes the oldest datagram out, neither delivered nor dropped: to alter (corrupt,
    /// truncate, re-seal) and hand over yourself. The link's counters do not count it
    /// again.
    pub fn take_next(&mut self) -> Option<Bytes> {
        self.link.held.pop_front()
    }
}

fn release(link: &mut LinkState) -> Option<Bytes> {
    let d = link.held.pop_front()?;
    link.stats.delivered += 1;
    link.stats.delivered_bytes += d.len() as u64;
    Some(d)
}

#[cfg(test)]
mod tests;
