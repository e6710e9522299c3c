//! A deterministic, in-memory network of [`Host`]s for testing netcode (feature `sim`).
//!
//! A [`Network`] holds hosts at socket addresses and carries their datagrams over
//! simulated links with latency, jitter, random and burst loss, duplication, reordering,
//! corruption, a bandwidth bottleneck with a drop-tail queue, and an MTU, set per direction
//! ([`LinkConditions`], with presets such as [`LinkConditions::wifi`]). Time is simulated:
//! [`Network::step`] jumps to the earliest host deadline or delivery, or advances one fixed
//! tick in engine-style mode ([`Network::set_tick`]). Everything random comes from one
//! seed, so a run is a function of the seed and the script: run it twice, get the same
//! events and the same bytes.
//!
//! Observability: per-link counters ([`Network::link_stats`]) and an optional trace of
//! every datagram and its fate ([`Network::enable_trace`], [`Network::trace_text`]) to print
//! when a test fails.
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

mod link;
mod rng;
mod trace;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand_core::Rng;
use rand_pcg::Pcg64Mcg;

use crate::{ConfigError, Event, Host, HostConfig};
use link::LinkState;
pub use link::{BurstLoss, Fate, LinkConditions, LinkStats, REPLAY_HISTORY};
#[cfg(test)]
pub(crate) use rng::SplitMix64;
pub use rng::seeded_rng;
pub use trace::TraceRecord;

/// A script deciding per datagram whether a link lets it through (`false` drops it):
/// given the index of the datagram on that link (from 0) and its bytes.
pub type Script = Box<dyn FnMut(u64, &[u8]) -> bool + Send>;

struct SimHost {
    host: Host,
    events: VecDeque<Event>,
}

struct Pending {
    from: SocketAddr,
    to: SocketAddr,
    payload: Bytes,
}

/// A deterministic network of hosts. See the [module docs](self).
pub struct Network {
    seed: u64,
    rng: Pcg64Mcg,
    start: Instant,
    now: Instant,
    tick: Option<Duration>,
    hosts: BTreeMap<SocketAddr, SimHost>,
    default_link: LinkConditions,
    links: BTreeMap<(SocketAddr, SocketAddr), LinkState>,
    scripts: BTreeMap<(SocketAddr, SocketAddr), (u64, Script)>,
    in_flight: BinaryHeap<Reverse<(Instant, u64)>>,
    pending: BTreeMap<u64, Pending>,
    next_seq: u64,
    trace: Option<Vec<TraceRecord>>,
}

impl core::fmt::Debug for Network {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Network")
            .field("seed", &self.seed)
            .field("elapsed", &self.elapsed())
            .field("hosts", &self.hosts.keys().collect::<Vec<_>>())
            .field("in_flight", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Network {
    /// An empty network whose randomness all derives from `seed`.
    pub fn new(seed: u64) -> Self {
        let start = Instant::now();
        Self {
            seed,
            rng: rng::network_rng(seed),
            start,
            now: start,
            tick: None,
            hosts: BTreeMap::new(),
            default_link: LinkConditions::default(),
            links: BTreeMap::new(),
            scripts: BTreeMap::new(),
            in_flight: BinaryHeap::new(),
            pending: BTreeMap::new(),
            next_seq: 0,
            trace: None,
        }
    }

    /// Adds a host at `addr`. Its random generator derives from the network's seed and
    /// the address.
    pub fn add_host(&mut self, addr: SocketAddr, config: HostConfig) -> Result<(), ConfigError> {
        let host = Host::new(config, rng::host_rng(self.seed, addr))?;
        self.hosts.insert(addr, SimHost { host, events: VecDeque::new() });
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

    /// Sets the conditions from `from` to `to`.
    pub fn set_link(&mut self, from: SocketAddr, to: SocketAddr, conditions: LinkConditions) {
        match self.links.get_mut(&(from, to)) {
            Some(l) => l.conditions = conditions,
            None => {
                self.links.insert((from, to), LinkState::new(conditions));
            }
        }
    }

    /// Sets the conditions both ways between `a` and `b`.
    pub fn set_link_both(&mut self, a: SocketAddr, b: SocketAddr, conditions: LinkConditions) {
        self.set_link(a, b, conditions);
        self.set_link(b, a, conditions);
    }

    /// The conditions of links not set otherwise.
    pub fn set_default_link(&mut self, conditions: LinkConditions) {
        self.default_link = conditions;
    }

    /// The conditions from `from` to `to`.
    pub fn link(&self, from: SocketAddr, to: SocketAddr) -> LinkConditions {
        self.links.get(&(from, to)).map_or(self.default_link, |l| l.conditions)
    }

    /// The counters of the link from `from` to `to`.
    pub fn link_stats(&self, from: SocketAddr, to: SocketAddr) -> LinkStats {
        self.links.get(&(from, to)).map(|l| l.stats).unwrap_or_default()
    }

    /// Lets `script` decide, before the link's conditions, which datagrams from `from` to
    /// `to` pass: for scripted losses such as "drop the third datagram".
    pub fn script(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        script: impl FnMut(u64, &[u8]) -> bool + Send + 'static,
    ) {
        self.scripts.insert((from, to), (0, Box::new(script)));
    }

    /// Removes the script of a link.
    pub fn clear_script(&mut self, from: SocketAddr, to: SocketAddr) {
        self.scripts.remove(&(from, to));
    }

    /// Steps every host on a fixed period (an engine loop), or, with `None`, whenever
    /// something is due (the default).
    pub fn set_tick(&mut self, tick: Option<Duration>) {
        self.tick = tick.filter(|t| !t.is_zero());
    }

    /// Starts recording every datagram and its fate.
    pub fn enable_trace(&mut self) {
        self.trace.get_or_insert_with(Vec::new);
    }

    /// The trace so far (empty unless enabled).
    pub fn trace(&self) -> &[TraceRecord] {
        self.trace.as_deref().unwrap_or_default()
    }

    /// The trace as text, one datagram a line.
    pub fn trace_text(&self) -> String {
        self.trace().iter().map(|r| format!("{r}\n")).collect()
    }

    /// The current simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Simulated time since the network was made.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Datagrams on their way.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// When the next thing happens: a delivery, a host deadline, or the next tick.
    fn next_time(&self) -> Option<Instant> {
        if let Some(tick) = self.tick {
            return Some(self.now + tick);
        }
        let delivery = self.in_flight.peek().map(|Reverse((t, _))| *t);
        let hosts = self.hosts.values().filter_map(|h| h.host.poll_timeout()).min();
        match (delivery, hosts) {
            (Some(a), Some(b)) => Some(a.min(b).max(self.now)),
            (a, b) => a.or(b).map(|t| t.max(self.now)),
        }
    }

    /// Advances to the next moment something happens (at most `limit` ahead): delivers
    /// what is due, steps the hosts, carries their datagrams. Returns `false` when
    /// nothing is left to happen within `limit`.
    pub fn step(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        let Some(next) = self.next_time().filter(|&t| t <= end) else {
            self.now = end.max(self.now);
            return false;
        };
        self.now = next;
        let mut stepped = std::collections::BTreeSet::new();
        while let Some(&Reverse((t, seq))) = self.in_flight.peek() {
            if t > self.now {
                break;
            }
            self.in_flight.pop();
            let Some(p) = self.pending.remove(&seq) else { continue };
            if let Some(h) = self.hosts.get_mut(&p.to) {
                h.host.handle_datagram(self.now, p.from, &p.payload);
                stepped.insert(p.to);
            }
        }
        let now = self.now;
        let due: Vec<SocketAddr> = self
            .hosts
            .iter()
            .filter(|(addr, h)| {
                self.tick.is_some() || stepped.contains(*addr) || h.host.poll_timeout().is_some_and(|t| t <= now)
            })
            .map(|(a, _)| *a)
            .collect();
        for addr in due {
            self.step_host(addr);
        }
        true
    }

    fn step_host(&mut self, addr: SocketAddr) {
        let now = self.now;
        let mut out = Vec::new();
        if let Some(h) = self.hosts.get_mut(&addr) {
            h.host.step(now);
            while let Some(t) = h.host.poll_transmit() {
                out.push(t);
            }
            while let Some(e) = h.host.poll_event() {
                h.events.push_back(e);
            }
        }
        for t in out {
            self.carry(addr, t.remote, t.payload);
        }
    }

    fn carry(&mut self, from: SocketAddr, to: SocketAddr, payload: Bytes) {
        let sent = self.elapsed();
        let len = payload.len();
        let scripted = match self.scripts.get_mut(&(from, to)) {
            Some((index, script)) => {
                let pass = script(*index, &payload);
                *index += 1;
                !pass
            }
            None => false,
        };
        let default = self.default_link;
        let link = self.links.entry((from, to)).or_insert_with(|| LinkState::new(default));
        let fate = if scripted {
            link.stats.sent += 1;
            link.stats.dropped += 1;
            Err(Fate::Scripted)
        } else {
            link.carry(self.now, len, &mut self.rng)
        };
        let mut record = |fate: Fate| {
            if let Some(trace) = &mut self.trace {
                trace.push(TraceRecord { sent, from, to, len, fate });
            }
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
                    self.in_flight.push(Reverse((at, seq)));
                    self.pending.insert(seq, Pending { from, to, payload: old });
                }
            }
            if link.history.len() == REPLAY_HISTORY {
                link.history.pop_front();
            }
            link.history.push_back(payload.clone());
        }
        let carried = match fate {
            Ok(c) => c,
            Err(f) => return record(f),
        };
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
        let (first, second) = carried.delays;
        for delay in std::iter::once(first).chain(second) {
            let at = sent + delay;
            record(if carried.corrupt_bit.is_some() { Fate::Corrupted(at) } else { Fate::Delivered(at) });
            let seq = self.next_seq;
            self.next_seq += 1;
            self.in_flight.push(Reverse((self.now + delay, seq)));
            self.pending.insert(seq, Pending { from, to, payload: payload.clone() });
        }
    }

    /// Injects a datagram as if `from` had sent it to `to` now, through the link.
    pub fn inject(&mut self, from: SocketAddr, to: SocketAddr, payload: Bytes) {
        self.carry(from, to, payload);
    }

    /// Runs for `duration` of simulated time, calling `each` after every step (to read
    /// events and make application calls).
    pub fn run_for(&mut self, duration: Duration, mut each: impl FnMut(&mut Self)) {
        let end = self.now + duration;
        while self.now < end {
            self.step(end - self.now);
            each(self);
        }
    }

    /// Runs until `done` returns true (checked after every step) or `limit` of simulated
    /// time passes. Returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let end = self.now + limit;
        if done(self) {
            return true;
        }
        while self.now < end {
            self.step(end - self.now);
            if done(self) {
                return true;
            }
        }
        false
    }

    /// A random number from the network's generator, for scripts that want randomness
    /// within the same determinism.
    pub fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }
}
